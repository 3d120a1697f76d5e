//! xperf: measures what a user->kernel->user crossing costs inside Linux.
//!
//! With the xperf kernel hooks (docs/xperf-abi.md) every sample is split into
//! u2k (user stamp to the kernel's entry stamp) and k2u (the kernel's exit
//! stamp to the user stamp); without them only round trips are taken. The
//! library is shared by the `xperf` binary, the VMM's built-in initramfs and
//! the benches.

/// `eprint!` that never panics: a write to a failing stderr
/// (`2>/dev/full`, a closed descriptor) has nowhere to be reported, and
/// `eprint!` would panic, which aborts the release build.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprintln!` that never panics (see [`say!`]).
#[macro_export]
macro_rules! sayln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod abi;
pub mod affinity;
pub mod app;
pub mod args;
pub mod calibrate;
pub mod characterize;
pub mod error;
pub mod hookseq;
pub mod host;
pub mod host_miss;
pub mod init;
pub mod interrupt_path;
pub mod measure;
pub mod pmu;
pub mod probes;
pub mod sampling;
pub mod stamp;
pub mod stop;
pub mod sweep;
pub mod trace_session;
pub mod tracefs_text;
pub mod workload;

pub use error::{Error, Result};
