//! Duties of a guest's PID 1: mount the pseudo-filesystems xperf reads, and
//! end the VM through the VMM's exit port instead of returning (init exiting
//! panics the kernel).

use crate::error::{Error, Result};
use std::ffi::CStr;

pub fn is_pid1() -> bool {
    std::process::id() == 1
}

fn mount(source: &CStr, target: &CStr, fstype: &CStr) -> Result<()> {
    // SAFETY: NUL-terminated strings; mkdir of an existing directory fails
    // harmlessly with EEXIST.
    unsafe {
        libc::mkdir(target.as_ptr(), 0o755);
        if libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
        {
            let err = std::io::Error::last_os_error();
            // Already mounted (e.g. by a kernel with devtmpfs.mount=1) is fine.
            if err.raw_os_error() != Some(libc::EBUSY) {
                return Err(Error::Sys(format!(
                    "mount {} on {}: {err}",
                    fstype.to_string_lossy(),
                    target.to_string_lossy()
                )));
            }
        }
    }
    Ok(())
}

/// Mounts /proc (required: the kernel command line and CPU facts), then /sys
/// and /dev (devtmpfs, only needed for /dev/mem). A kernel without sysfs or
/// devtmpfs can still be measured, so those failures come back as warnings.
pub fn mount_pseudo_filesystems() -> Result<Vec<String>> {
    mount(c"proc", c"/proc", c"proc")?;
    let mut warnings = Vec::new();
    for (source, target) in [(c"sysfs", c"/sys"), (c"devtmpfs", c"/dev")] {
        if let Err(e) = mount(source, target, source) {
            warnings.push(e.to_string());
        }
    }
    Ok(warnings)
}

/// Ends the VM with `code` (clamped to a byte). Never returns: if the exit
/// port does not stop the VM, powers off, and failing that waits forever.
pub fn finish(code: i32) -> ! {
    let byte = u8::try_from(code).unwrap_or(u8::MAX);
    if let Err(e) = crate::channel::exit_vm(byte) {
        eprintln!("xperf: {e}");
    }
    // SAFETY: sync and reboot take no pointers.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    loop {
        // SAFETY: pause has no arguments.
        unsafe { libc::pause() };
    }
}
