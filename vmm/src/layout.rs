//! Guest physical address layout and guest-visible port numbers.
//! Pure data: no KVM, no I/O, so it can be unit-tested and shared by every guest kind.

pub use xvmm_results::channel::{PORT_EXIT, PORT_RESULTS_DOORBELL, RESULTS_GPA, RESULTS_SIZE};
