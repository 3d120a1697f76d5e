//! The few system calls the inits need, as thin checked wrappers.

use std::ffi::CString;
use std::io::Write;

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} contains NUL"))
}

/// Mounts `fstype` on `target` (creating it); "already mounted" is success.
pub fn mount(fstype: &str, target: &str) -> Result<(), String> {
    let _ = std::fs::create_dir_all(target);
    let (src, tgt, fs) = (cstr(fstype)?, cstr(target)?, cstr(fstype)?);
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EBUSY) {
        return Ok(());
    }
    Err(format!("mount -t {fstype} {target}: {err}"))
}

/// Writes one line to /dev/console (falling back to stdout), unbuffered so
/// that timing of the line is the time it was produced.
pub fn console_line(line: &str) {
    let text = format!("{line}\n");
    match std::fs::OpenOptions::new().write(true).open("/dev/console") {
        Ok(mut c) => {
            let _ = c.write_all(text.as_bytes());
        }
        Err(_) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
        }
    }
}

/// Gains access to one I/O port for this process (`ioperm`).
pub fn ioperm(port: u16) -> Result<(), String> {
    // SAFETY: plain system call with integer arguments.
    let rc = unsafe { libc::ioperm(port.into(), 1, 1) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "ioperm({port:#x}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// `outb`: the caller must have been granted `port` with [`ioperm`].
pub fn outb(port: u16, value: u8) {
    // SAFETY: an I/O port write; without ioperm it faults (SIGSEGV), it cannot
    // corrupt this process's memory.
    unsafe {
        std::arch::asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack));
    }
}

/// `reboot(2)` with one of the `RB_*` commands; returns only on failure.
pub fn reboot(cmd: libc::c_int) -> String {
    // SAFETY: reboot with a valid command; if it succeeds it does not return.
    unsafe {
        libc::sync();
        libc::reboot(cmd);
    }
    format!("reboot({cmd:#x}): {}", std::io::Error::last_os_error())
}

/// The kernel's log buffer (`syslog(2)` READ_ALL), for `xvmm.dmesg`: with
/// `quiet` a boot prints nothing, so this is how its timeline is seen without
/// slowing the boot down with console output.
pub fn kernel_log() -> Result<String, String> {
    const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    // SAFETY: SIZE_BUFFER takes no buffer.
    let size = unsafe { libc::klogctl(SYSLOG_ACTION_SIZE_BUFFER, std::ptr::null_mut(), 0) };
    if size <= 0 {
        return Err(format!(
            "syslog(SIZE_BUFFER): {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: the kernel writes at most `size` bytes into `buf`.
    let n = unsafe { libc::klogctl(SYSLOG_ACTION_READ_ALL, buf.as_mut_ptr().cast(), size) };
    if n < 0 {
        return Err(format!(
            "syslog(READ_ALL): {}",
            std::io::Error::last_os_error()
        ));
    }
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Sleeps forever: PID 1 must never exit (the kernel would panic).
pub fn park() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
