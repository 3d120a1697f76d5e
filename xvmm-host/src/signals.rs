//! SIGINT, SIGTERM and SIGHUP during a measurement: asked to stop, never to
//! vanish. Shared by xvmm (the vCPU run loop) and xperf (`xperf probes`, which
//! must remove its probes and restore the host's tracing state on the way out).
//!
//! [`StopSignals::install`] replaces the three handlers with one that only
//! records the signal; the measuring loop polls [`stop_requested`], stops,
//! keeps what was measured and restores the state it changed. A second or third
//! signal changes nothing (GNU `timeout` and impatient users send more than
//! one): the clean stop is already under way and every step of it is bounded
//! in time. Dropping the guard restores the handlers that were there before, so
//! later signals act as they always did.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Mutex;

/// The first stop signal received while a guard is installed (0: none).
static FIRST: AtomicI32 = AtomicI32::new(0);
/// How many stop signals arrived (for the report: "stopped by 2 signals").
static COUNT: AtomicU32 = AtomicU32::new(0);
/// Handlers replaced by the installed guard, restored when it drops.
static SAVED: Mutex<Option<Vec<(libc::c_int, libc::sigaction)>>> = Mutex::new(None);

/// The signals that ask a measurement to stop.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_stop(signal: libc::c_int) {
    // Async-signal-safe: two atomic operations.
    let _ = FIRST.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    COUNT.fetch_add(1, Ordering::SeqCst);
}

/// Sets `handler` for `signal` (no SA_RESTART: a blocking call such as
/// KVM_RUN or a sleep returns EINTR) and returns the action it replaced.
pub fn set_handler(
    signal: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction with a zeroed struct, an empty mask and a plain handler.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, &act, &mut old) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot install a handler for signal {signal}: {e}"),
            ));
        }
        Ok(old)
    }
}

/// Installed stop-signal handlers; dropping it restores the previous ones.
#[derive(Debug)]
pub struct StopSignals {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl StopSignals {
    /// Installs the handlers and forgets any earlier stop request. Only one
    /// guard may exist at a time.
    pub fn install() -> io::Result<StopSignals> {
        let mut saved = SAVED.lock().unwrap_or_else(|e| e.into_inner());
        if saved.is_some() {
            return Err(io::Error::other(
                "stop-signal handlers are already installed",
            ));
        }
        FIRST.store(0, Ordering::SeqCst);
        COUNT.store(0, Ordering::SeqCst);
        let mut previous = Vec::with_capacity(STOP_SIGNALS.len());
        for signal in STOP_SIGNALS {
            match set_handler(signal, on_stop) {
                Ok(old) => previous.push((signal, old)),
                Err(e) => {
                    restore(&previous);
                    return Err(e);
                }
            }
        }
        *saved = Some(previous);
        Ok(StopSignals {
            _not_send: std::marker::PhantomData,
        })
    }
}

fn restore(previous: &[(libc::c_int, libc::sigaction)]) {
    for (signal, old) in previous {
        // SAFETY: restoring an action sigaction returned earlier.
        unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        let mut saved = SAVED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(previous) = saved.take() {
            restore(&previous);
        }
    }
}

/// The first stop signal received since the guard was installed, if any.
pub fn stop_requested() -> Option<libc::c_int> {
    match FIRST.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// How many stop signals arrived since the guard was installed.
pub fn stop_count() -> u32 {
    COUNT.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the whole module: the handlers are process-wide.
    #[test]
    fn signals_are_recorded_repeated_and_handlers_restored() {
        let current = |signal| {
            // SAFETY: reading the current action only.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, std::ptr::null(), &mut old);
                old.sa_sigaction
            }
        };
        let before = current(libc::SIGTERM);
        let guard = StopSignals::install().unwrap();
        assert!(StopSignals::install().is_err(), "one guard at a time");
        assert_eq!(stop_requested(), None);
        // SAFETY: raising a signal whose handler only stores atomics.
        unsafe { libc::raise(libc::SIGTERM) };
        // SAFETY: the same handler (`on_stop`) takes SIGINT.
        unsafe { libc::raise(libc::SIGINT) };
        assert_eq!(
            stop_requested(),
            Some(libc::SIGTERM),
            "the first one counts"
        );
        assert_eq!(stop_count(), 2, "the second is recorded, not fatal");
        drop(guard);
        assert_eq!(current(libc::SIGTERM), before, "handler restored");
        let again = StopSignals::install().unwrap();
        assert_eq!(stop_requested(), None, "a new guard starts clean");
        drop(again);
    }
}
