//! xperf: measures what a user->kernel->user crossing costs inside Linux.
//!
//! With the xperf kernel hooks (docs/xperf-abi.md) every sample is split into
//! u2k (user stamp to the kernel's entry stamp) and k2u (the kernel's exit
//! stamp to the user stamp); without them only round trips are taken. The
//! library is shared by the `xperf` binary, the VMM's built-in initramfs and
//! the benches.

pub mod abi;
pub mod app;
pub mod args;
pub mod calibrate;
pub mod characterize;
pub mod error;
pub mod host;
pub mod host_miss;
pub mod init;
pub mod measure;
pub mod pmu;
pub mod probes;
pub mod sampling;
pub mod stamp;
pub mod sweep;

pub use error::{Error, Result};
