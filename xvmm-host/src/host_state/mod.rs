//! The host state xvmm and xperf change, owned in one place.
//!
//! - [`mounts`]: tracefs and debugfs, mounted once per mount namespace when
//!   absent, unmounted when the last user anywhere (this process or another
//!   of ours) is done, never under a live user.
//! - [`journal`]: every change (a mount, a tracefs instance, a dynamic event,
//!   a sysctl) is written to `/run/xvmm` before it is made, so what a killed
//!   or aborted run left is found and undone by the next start of either
//!   tool ([`undo::recover_orphans`]), and a panic hook can undo it before
//!   the process aborts ([`undo::install_panic_hook`]).
//! - [`snapshot`]: the host's tracing state, read without changing anything;
//!   the suite compares one from its start with one from its end.
//! - [`namespace`]: a private mount namespace for a thread, where tracefs
//!   starts unmounted and nothing mounted leaks to the host.

pub mod journal;
pub mod mounts;
pub mod namespace;
pub mod snapshot;
pub mod undo;

use serde::{Deserialize, Serialize};
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

/// What a person can do when changing the host failed with `e`: a user
/// runs as root; root in a container without capabilities finds a
/// read-only /run and may not mount, and can change nothing of the host's
/// tracing there.
fn what_to_do(e: &std::io::Error) -> &'static str {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    match (root, e.raw_os_error()) {
        (false, _) => "run as root",
        (true, Some(libc::EROFS)) => {
            "a read-only /run, as in a container: run it on the host, or in a \
             privileged container with the host's /run"
        }
        (true, Some(libc::EPERM)) => {
            "root without CAP_SYS_ADMIN, as in a container: run it on the \
             host, or in a privileged container"
        }
        (true, _) => "as root",
    }
}

/// Where tracefs is mounted when it is not (and where it usually is).
pub const TRACEFS_DIR: &str = "/sys/kernel/tracing";
/// Where debugfs is mounted when it is not.
pub const DEBUGFS_DIR: &str = "/sys/kernel/debug";

/// A file system xvmm and xperf may need mounted.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum FsKind {
    Tracefs,
    Debugfs,
}

impl FsKind {
    pub fn fstype(self) -> &'static str {
        match self {
            FsKind::Tracefs => "tracefs",
            FsKind::Debugfs => "debugfs",
        }
    }

    /// Where it is mounted when it is not mounted anywhere.
    pub fn default_dir(self) -> &'static str {
        match self {
            FsKind::Tracefs => TRACEFS_DIR,
            FsKind::Debugfs => DEBUGFS_DIR,
        }
    }

    /// Whether `dir` holds this file system's tree.
    pub(crate) fn looks_right(self, dir: &std::path::Path) -> bool {
        match self {
            FsKind::Tracefs => dir.join("instances").is_dir() && dir.join("trace").is_file(),
            FsKind::Debugfs => dir.is_dir(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint follows who runs and why the change failed; the suite
    /// runs as root.
    #[test]
    fn a_failed_change_says_what_to_do() {
        // SAFETY: geteuid has no arguments and cannot fail.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the suite runs as root");
        let hint = |errno| what_to_do(&std::io::Error::from_raw_os_error(errno));
        assert!(hint(libc::EROFS).starts_with("a read-only /run, as in a container"));
        assert!(hint(libc::EPERM).starts_with("root without CAP_SYS_ADMIN"));
        assert_eq!(hint(libc::EACCES), "as root");
    }
}
