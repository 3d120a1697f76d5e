//! How `xperf characterize` stops: on SIGTERM or SIGINT at any point of a
//! run or of the wait between runs, at once, never halfway through writing
//! a file.
//!
//! As a container's PID 1 (a DaemonSet's) xperf must install handlers of its
//! own: the kernel drops a signal whose action is the default one before it
//! reaches PID 1, so without them `kubectl delete` would wait out the grace
//! period and end it with SIGKILL. The handler only writes the signal's
//! number to a pipe (async-signal-safe); a thread blocked on the pipe (no
//! polling, so nothing wakes beside the measurement) takes the writers' lock,
//! so a file being replaced is either whole or not yet there, then acts.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The signals that stop the command.
pub const SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// The pipe's write end, for the handler (-1: not installed).
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// Held while a file is replaced; the stopping thread takes it for good.
static WRITING: Mutex<()> = Mutex::new(());

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = PIPE.load(Ordering::SeqCst);
    let byte = u8::try_from(signal).unwrap_or(u8::MAX);
    // SAFETY: write(2) is async-signal-safe; one byte from a local.
    unsafe {
        libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
    }
}

/// The lock a writer holds while it replaces a file, so that a stop never
/// comes between its temporary and its rename.
pub fn writing() -> MutexGuard<'static, ()> {
    WRITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the handlers and starts the thread that calls `on_stop` with the
/// first signal's number once no file is being written. `on_stop` must end
/// the process (it runs holding the writers' lock, which it never gives back).
pub fn install(on_stop: impl FnOnce(libc::c_int) + Send + 'static) -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success; checked below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned from here on.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if PIPE
        .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return Err(io::Error::other("stop handlers are already installed"));
    }
    // The handler writes to it for the life of the process.
    std::mem::forget(write);
    std::thread::Builder::new()
        .name("xperf-stop".into())
        .spawn(move || {
            let Some(signal) = wait_for_signal(&read) else {
                return;
            };
            let _held = std::mem::ManuallyDrop::new(writing());
            on_stop(signal);
        })?;
    for signal in SIGNALS {
        xvmm_host::signals::set_handler(signal, on_signal)?;
    }
    Ok(())
}

/// Blocks until the handler writes a signal's number; `None` if the pipe
/// fails (never seen: its write end is never closed), and then the signals
/// are only recorded, as before they were installed.
fn wait_for_signal(read: &OwnedFd) -> Option<libc::c_int> {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads one byte into a local from a descriptor we own.
        let n = unsafe { libc::read(read.as_raw_fd(), std::ptr::addr_of_mut!(byte).cast(), 1) };
        match n {
            1 => return Some(libc::c_int::from(byte)),
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
}
