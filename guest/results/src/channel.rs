//! The guest -> VMM channel: guest-visible port numbers and the shared results
//! buffer. Shared by the VMM and every guest (microguest, xvmm-init, xperf).

/// Port a guest writes one byte to in order to end the VM; the byte becomes
/// xvmm's exit status (0 = success).
pub const PORT_EXIT: u16 = 0x501;

/// Port a guest writes a 32-bit length to once it has put that many bytes of
/// results (a JSON [`crate::Report`]) at [`RESULTS_GPA`].
pub const PORT_RESULTS_DOORBELL: u16 = 0x504;

/// Port a guest writes a 32-bit index to, between two TSC stamps of its own,
/// so that the host's trace of the exit can be placed on the guest's
/// timeline (`xvmm_results::timeline`). The VMM only counts these writes.
pub const PORT_CALIBRATE: u16 = 0x508;

/// Guest physical address of the shared results buffer: a dedicated memory
/// slot in the 32-bit MMIO hole, marked reserved in the E820 map.
pub const RESULTS_GPA: u64 = 0xd000_0000;

/// Size of the shared results buffer.
pub const RESULTS_SIZE: u64 = 16 << 20;

/// Kernel command-line parameter through which the VMM tells a Linux guest
/// where the buffer is: `xvmm.results=<gpa hex>,<size hex>`.
pub const CMDLINE_RESULTS_PARAM: &str = "xvmm.results";
