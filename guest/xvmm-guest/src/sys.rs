//! The few system calls a guest's PID 1 needs, as thin checked wrappers.

use crate::{Error, Result};
use std::ffi::CString;
use std::io::Write;

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Sys(format!("{s:?} contains NUL")))
}

/// Mounts a `fstype` file system on `target` (creating it); "already
/// mounted" (EBUSY, e.g. devtmpfs with `devtmpfs.mount=1`) is success.
pub fn mount(fstype: &str, target: &str) -> Result<()> {
    let _ = std::fs::create_dir_all(target);
    let (tgt, fs) = (cstr(target)?, cstr(fstype)?);
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe { libc::mount(fs.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EBUSY) {
        return Ok(());
    }
    Err(Error::Sys(format!("mount -t {fstype} {target}: {err}")))
}

/// Loads the kernel module in `path` (`finit_module`, no parameters): how
/// the harness's L1 loads a distribution kernel's `kvm` modules, having no
/// modprobe.
pub fn load_module(path: &str) -> Result<()> {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).map_err(|e| Error::Sys(format!("open {path}: {e}")))?;
    let params = cstr("")?;
    // SAFETY: an open descriptor we own and a NUL-terminated parameter
    // string; the kernel reads both and keeps neither.
    let rc = unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), params.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    // EEXIST included: kvm answers it for a second vendor module.
    let err = std::io::Error::last_os_error();
    Err(Error::Sys(format!("finit_module {path}: {err}")))
}

/// Writes one line to /dev/console (falling back to stdout), unbuffered so
/// that the line's time is the time it was produced.
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

/// Waits until what this process wrote to its terminals (the serial console
/// in a guest) has been transmitted: the kernel's serial driver sends from a
/// buffer, and a VM ended right after a write would lose the tail. Also
/// drains `/dev/console` itself, which [`console_line`] writes to and which
/// need not be this process's stdout (an init the kernel started without it).
pub fn drain_console() {
    use std::os::unix::io::AsRawFd;
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        drain_tty(fd);
    }
    if let Ok(c) = std::fs::OpenOptions::new().write(true).open("/dev/console") {
        drain_tty(c.as_raw_fd());
    }
}

fn drain_tty(fd: libc::c_int) {
    // SAFETY: isatty and tcdrain only inspect or wait on the descriptor.
    unsafe {
        if libc::isatty(fd) == 1 {
            libc::tcdrain(fd);
        }
    }
}

/// Grants this process access to `count` I/O ports from `port` (`ioperm`).
pub fn ioperm(port: u16, count: u64) -> Result<()> {
    // SAFETY: ioperm only changes this task's I/O permission bitmap.
    if unsafe { libc::ioperm(libc::c_ulong::from(port), count, 1) } != 0 {
        return Err(Error::last_os(&format!("ioperm({port:#x})")));
    }
    Ok(())
}

/// Gives back `count` ports from `port` that [`ioperm`] granted (nothing
/// to report: a port not granted stays not granted).
pub fn ioperm_release(port: u16, count: u64) {
    // SAFETY: ioperm only changes this task's I/O permission bitmap.
    unsafe { libc::ioperm(libc::c_ulong::from(port), count, 0) };
}

/// `out dx, al`: the caller must have been granted `port` with [`ioperm`].
pub fn outb(port: u16, value: u8) {
    // SAFETY: an I/O port write; without ioperm it faults (SIGSEGV), it cannot
    // corrupt this process's memory.
    unsafe {
        std::arch::asm!("out dx, al", in("dx") port, in("al") value,
                        options(nomem, nostack, preserves_flags));
    }
}

/// `out dx, eax`: the caller must have been granted `port..port+4`.
pub fn outl(port: u16, value: u32) {
    // SAFETY: as for `outb`.
    unsafe {
        std::arch::asm!("out dx, eax", in("dx") port, in("eax") value,
                        options(nomem, nostack, preserves_flags));
    }
}

/// `in eax, dx`: the caller must have been granted `port..port+4`.
pub fn inl(port: u16) -> u32 {
    let value: u32;
    // SAFETY: as for `outb`: an I/O port read, which faults without ioperm.
    unsafe {
        std::arch::asm!("in eax, dx", in("dx") port, out("eax") value,
                        options(nomem, nostack, preserves_flags));
    }
    value
}

/// `reboot(2)` with one of the `RB_*` commands; returns only on failure.
pub fn reboot(cmd: libc::c_int) -> Error {
    // The kernel halts or resets without sending what the serial driver
    // still holds: a line printed just before would be lost (one fresh-clone
    // run of the suite in ten lost one).
    drain_console();
    // SAFETY: reboot with a valid command; if it succeeds it does not return.
    unsafe {
        libc::sync();
        libc::reboot(cmd);
    }
    Error::last_os(&format!("reboot({cmd:#x})"))
}

/// The kernel's log buffer (`syslog(2)` READ_ALL): with `quiet` a boot prints
/// nothing, so this is how its timeline is seen without slowing the boot down
/// with console output.
pub fn kernel_log() -> Result<String> {
    const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    // SAFETY: SIZE_BUFFER takes no buffer.
    let size = unsafe { libc::klogctl(SYSLOG_ACTION_SIZE_BUFFER, std::ptr::null_mut(), 0) };
    let len = match usize::try_from(size) {
        Ok(len) if len > 0 => len,
        _ => return Err(Error::last_os("syslog(SIZE_BUFFER)")),
    };
    let mut buf = vec![0u8; len];
    // SAFETY: the kernel writes at most `size` bytes into `buf`.
    let n = unsafe { libc::klogctl(SYSLOG_ACTION_READ_ALL, buf.as_mut_ptr().cast(), size) };
    let Ok(n) = usize::try_from(n) else {
        return Err(Error::last_os("syslog(READ_ALL)"));
    };
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Sleeps forever: PID 1 must never exit (the kernel would panic).
pub fn park() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_nul_are_refused_before_any_call() {
        let err = mount("proc", "/a\0b").unwrap_err();
        assert!(err.to_string().contains("contains NUL"), "{err}");
    }
}
