//! Exit statuses (README, "Exit status"): every error maps to one, and a
//! status a guest asks for can never look like one of xvmm's own.

use crate::error::Error;

pub const OK: i32 = 0;
/// Any failure without a status of its own.
pub const ERROR: i32 = 1;
/// A command line that cannot be run as given.
pub const USAGE: i32 = 2;
/// The run did not finish within `--timeout` (as timeout(1) does).
pub const TIMEOUT: i32 = 124;
/// A guest that ends the VM with status N (1..=59) makes xvmm exit
/// `GUEST_BASE + N`: 65..=123, between USAGE and TIMEOUT.
pub const GUEST_BASE: i32 = 64;
/// Guest statuses above this all map to `GUEST_BASE + GUEST_MAX` (123); the
/// error line names the exact status.
pub const GUEST_MAX: u8 = 59;

/// The exit status for `err`. Signals give 128 + the signal's number, as a
/// shell reports a process killed by it (130 for Ctrl-C, 143 for SIGTERM).
pub fn code(err: &Error) -> i32 {
    match err {
        Error::Vmm(e) => vmm_code(e),
        Error::Kernel(_) => ERROR,
    }
}

fn vmm_code(err: &xvmm::Error) -> i32 {
    use xvmm::Error;
    match err {
        Error::Usage(_) => USAGE,
        Error::Timeout(_) => TIMEOUT,
        Error::Interrupted(signal) => 128 + signal,
        Error::GuestExit(status) => GUEST_BASE + i32::from((*status).clamp(1, GUEST_MAX)),
        _ => ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_statuses_never_collide_with_xvmm_statuses() {
        let ours = [
            OK,
            ERROR,
            USAGE,
            TIMEOUT,
            128 + libc::SIGINT,
            128 + libc::SIGTERM,
        ];
        for status in 1..=u8::MAX {
            let c = code(&xvmm::Error::GuestExit(status).into());
            assert!(!ours.contains(&c), "guest status {status} -> {c}");
            assert!((65..=123).contains(&c), "guest status {status} -> {c}");
        }
        assert_eq!(code(&xvmm::Error::GuestExit(7).into()), 71);
        assert_eq!(code(&xvmm::Error::GuestExit(200).into()), 123);
    }

    #[test]
    fn signals_and_kinds() {
        assert_eq!(code(&xvmm::Error::Interrupted(libc::SIGINT).into()), 130);
        assert_eq!(code(&xvmm::Error::Interrupted(libc::SIGTERM).into()), 143);
        assert_eq!(code(&xvmm::Error::Usage("x".into()).into()), 2);
        assert_eq!(code(&xvmm::Error::Timeout("x".into()).into()), 124);
        assert_eq!(code(&xvmm::Error::Kvm("x".into()).into()), 1);
    }
}
