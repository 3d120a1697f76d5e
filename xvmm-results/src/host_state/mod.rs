//! The host state xvmm and xperf change, owned in one place.
//!
//! - [`mounts`]: tracefs and debugfs, mounted once per mount namespace when
//!   absent, unmounted when the last user anywhere (this process or another
//!   of ours) is done, never under a live user.
//! - [`journal`]: every change (a mount, a tracefs instance, a dynamic event,
//!   a sysctl) is written to `/run/xvmm` before it is made, so what a killed
//!   or aborted run left is found and undone by the next start of either
//!   tool, and a panic hook can undo it before the process aborts.
//! - [`snapshot`]: the host's tracing state, read without changing anything;
//!   the suite compares one from its start with one from its end.
//! - [`namespace`]: a private mount namespace for a thread, where tracefs
//!   starts unmounted and nothing mounted leaks to the host.

pub mod journal;
pub mod mounts;
pub mod namespace;
pub mod snapshot;

use std::fmt;

/// Why the host's state could not be found, changed or restored: one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStateError(pub String);

impl fmt::Display for HostStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostStateError {}

pub type Result<T> = std::result::Result<T, HostStateError>;

fn err(what: impl Into<String>) -> HostStateError {
    HostStateError(what.into())
}
