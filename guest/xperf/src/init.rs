//! Duties of a guest's PID 1: mount the pseudo-filesystems xperf reads, and
//! end the VM through the VMM's exit port instead of returning (init exiting
//! panics the kernel).

use crate::error::Result;
use xvmm_guest::{channel, sys};

pub fn is_pid1() -> bool {
    std::process::id() == 1
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
/// port does not stop the VM, powers off, and failing that waits forever.
pub fn finish(code: i32) -> ! {
    let byte = u8::try_from(code).unwrap_or(u8::MAX);
    if let Err(e) = channel::exit_vm(byte) {
        crate::sayln!("xperf: {e}");
    }
    let failed = sys::reboot(libc::RB_POWER_OFF);
    crate::sayln!("xperf: {failed}");
    sys::park()
}
