//! Which standard descriptors the process was started without.
//!
//! A stdout closed by the caller (`xvmm >&-`) cannot be seen from `main`:
//! the standard library's start-up puts `/dev/null` on a closed descriptor
//! 0-2, and its stdout counts EBADF as success anyway, so every write would
//! "succeed" and a run would end with status 0 having shown nothing. Each
//! binary therefore calls [`record_at_start`] from a constructor
//! (`.init_array`), which runs before that start-up, and its application
//! layer fails the first write to a stream that was closed, as it fails one
//! to `/dev/full`.

use std::sync::atomic::{AtomicU8, Ordering};

/// Bit `n` set: descriptor `n` was closed when the process started.
static CLOSED_AT_START: AtomicU8 = AtomicU8::new(0);

/// Records which of descriptors 0, 1 and 2 are closed and puts a
/// placeholder on each, so that no file opened later takes its number (the
/// tables would be written into a result file, or a result file's bytes
/// into the tables). The placeholder is the root directory opened read
/// only: every write to it fails, and unlike `/dev/null` it cannot be
/// opened for writing again through `/dev/stdout`, so `--json /dev/stdout`
/// fails before measuring instead of losing the results. Close-on-exec: a
/// child gets the closed descriptor its parent was given.
///
/// Runs before `main`: libc calls and atomics only, nothing that allocates
/// or needs the standard library's start-up.
pub fn record_at_start() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only asks whether `fd` is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        CLOSED_AT_START.fetch_or(1 << fd, Ordering::Relaxed);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; the lowest free descriptor is `fd`
        // (those below it are open by now).
        let placeholder = unsafe { libc::open(c"/".as_ptr(), flags) };
        if placeholder > fd {
            // SAFETY: both descriptors are ours; dup3 closes nothing open.
            unsafe {
                libc::dup3(placeholder, fd, libc::O_CLOEXEC);
                libc::close(placeholder);
            }
        }
    }
}

/// Declares the constructor that calls [`record_at_start`] before the
/// standard library's start-up; each binary invokes it once, at top level.
#[macro_export]
macro_rules! record_stdio_at_start {
    () => {
        #[used]
        #[link_section = ".init_array"]
        static RECORD_STDIO: extern "C" fn() = {
            extern "C" fn record() {
                $crate::stdio::record_at_start();
            }
            record
        };
    };
}

fn closed_at_start(fd: u8) -> bool {
    CLOSED_AT_START.load(Ordering::Relaxed) & (1 << fd) != 0
}

/// Whether stdout was closed when the process started (see the module).
pub fn stdout_was_closed() -> bool {
    closed_at_start(1)
}

/// The error a write to a stream that was closed at start gets: EBADF, as
/// the write itself would have had without the standard library's cover.
pub fn closed_error() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EBADF)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: &str = "XVMM_STDIO_CLOSED_CHILD";

    /// Run in a fresh copy of this test binary whose stdout is closed
    /// (`pre_exec`): what [`record_at_start`] sees and leaves.
    #[test]
    fn a_closed_stdout_is_recorded_and_its_number_kept_from_files() {
        if std::env::var_os(CHILD).is_some() {
            // The test harness's own start-up already put /dev/null there;
            // close it again to see what the constructor sees.
            // SAFETY: closing this process's fd 1, which nothing else uses.
            unsafe { libc::close(1) };
            CLOSED_AT_START.store(0, Ordering::Relaxed);
            record_at_start();
            let file = std::fs::File::open("/proc/self/status").unwrap();
            use std::os::unix::io::AsRawFd;
            let fd1 = std::fs::read_link("/proc/self/fd/1").unwrap();
            eprintln!(
                "closed={} fd1={} file_fd={}",
                stdout_was_closed(),
                fd1.display(),
                file.as_raw_fd()
            );
            return;
        }
        let name = module_path!().split_once("::").unwrap().1;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("{name}::a_closed_stdout_is_recorded_and_its_number_kept_from_files"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let line = err.lines().find(|l| l.starts_with("closed=")).unwrap_or("");
        assert!(line.starts_with("closed=true fd1=/ file_fd="), "{err}");
        let file_fd: i32 = line.rsplit('=').next().unwrap().parse().unwrap();
        assert!(file_fd > 2, "{line}");
        assert!(!stdout_was_closed(), "this process's stdout was open");
    }
}
