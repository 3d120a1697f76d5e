//! Duties of a VM's PID 1: mount the pseudo-filesystems xperf reads, and end
//! the VM through the VMM's exit port instead of returning (init exiting
//! panics the kernel).
//!
//! Being PID 1 does not make xperf a VM's init: it is PID 1 of every
//! container whose image holds it alone (`FROM scratch`), and of `unshare
//! --pid`. It takes the role only when the VMM says so, with
//! [`xvmm_results::channel::INIT_WORD`] on the kernel command line, which the
//! kernel hands to init as an environment variable. Anywhere else it is an
//! ordinary program: it measures, writes its files and exits with its status.

use crate::error::Result;
use xvmm_guest::{channel, sys};
use xvmm_results::channel::INIT_ENV;

/// Whether this process is a VM's init by the VMM's word: PID 1 and
/// `xvmm_init=1` in its environment.
pub fn is_vm_init() -> bool {
    std::process::id() == 1 && told_by_vmm(std::env::var_os(INIT_ENV).as_deref())
}

/// Whether the value of [`INIT_ENV`] is the VMM's word.
fn told_by_vmm(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// Mounts /proc (required: the kernel command line and CPU facts), then /sys
/// and /dev (devtmpfs, only needed for /dev/mem). A kernel without sysfs or
/// devtmpfs can still be measured, so those failures come back as warnings.
pub fn mount_pseudo_filesystems() -> Result<Vec<String>> {
    sys::mount("proc", "/proc")?;
    let mut warnings = Vec::new();
    for (fstype, target) in [("sysfs", "/sys"), ("devtmpfs", "/dev")] {
        if let Err(e) = sys::mount(fstype, target) {
            warnings.push(e.to_string());
        }
    }
    Ok(warnings)
}

/// Ends the VM with `code` (clamped to a byte). Never returns: if the exit
/// port does not stop the VM, powers off, and failing that exits, which
/// panics the guest kernel with the status on the console (the VMM sees the
/// reset that `panic=-1` makes): init never parks where nobody would see it.
pub fn finish(code: i32) -> ! {
    let byte = u8::try_from(code).unwrap_or(u8::MAX);
    if let Err(e) = channel::exit_vm(byte) {
        crate::sayln!("xperf: {e}");
    }
    let failed = sys::reboot(libc::RB_POWER_OFF);
    crate::sayln!("xperf: {failed}; exiting with status {code}");
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_the_vmms_word_makes_an_init() {
        assert!(told_by_vmm(Some(OsStr::new("1"))));
        for other in [None, Some(""), Some("0"), Some("yes"), Some("1 ")] {
            assert!(!told_by_vmm(other.map(OsStr::new)), "{other:?}");
        }
        // A test process is never PID 1, whatever its environment says.
        assert!(!is_vm_init());
    }
}
