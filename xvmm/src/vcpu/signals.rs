//! SIGINT, SIGTERM and SIGHUP during a measurement: asked to stop, never to
//! vanish. The guard itself is shared with xperf ([`xvmm_host::signals`]);
//! this module adapts it to the VMM's error type.
//!
//! [`StopSignals::install`] replaces the three handlers with one that only
//! records the signal; the run loop ([`super::RunControl`]) sees it, kicks the
//! vCPUs out of `KVM_RUN`, and the caller keeps what was measured, writes it
//! and removes the host state it created (tracefs instances, mounts) on its
//! way out. A second or third signal changes nothing. Dropping the guard
//! restores the handlers that were there before.

use crate::{Error, Result};
pub use xvmm_host::signals::{stop_count, stop_requested};

/// Sets `handler` for `signal` (no SA_RESTART: a blocking ioctl such as
/// KVM_RUN returns EINTR) and returns the action it replaced.
pub(crate) fn set_handler(
    signal: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> Result<libc::sigaction> {
    xvmm_host::signals::set_handler(signal, handler).map_err(|e| Error::Io(e.to_string()))
}

/// Installed stop-signal handlers; dropping it restores the previous ones.
#[derive(Debug)]
pub struct StopSignals {
    _guard: xvmm_host::signals::StopSignals,
}

impl StopSignals {
    /// Installs the handlers and forgets any earlier stop request. Only one
    /// guard may exist at a time.
    pub fn install() -> Result<StopSignals> {
        let guard =
            xvmm_host::signals::StopSignals::install().map_err(|e| Error::Io(e.to_string()))?;
        Ok(StopSignals { _guard: guard })
    }
}
