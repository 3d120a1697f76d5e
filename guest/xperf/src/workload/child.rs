//! The workload's process: forked, held at a gate until its pid is in the
//! trace's filter, then exec'd; waited for by a thread of its own, which
//! notes the TSC when it ended.
//!
//! `std::process::Command` cannot hold a child before `exec`: its `spawn`
//! waits for the exec, so a child blocked in `pre_exec` would never let it
//! return. Hence `fork` here, with only async-signal-safe calls in the
//! child (the argument vector is built before). The child stays in
//! xperf's process group, as under perf or strace: a terminal's Ctrl-C
//! reaches both, and an interactive command keeps its terminal.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use xvmm_host::signals::STOP_SIGNALS;

/// The signal state the command is to start with: what xperf itself was
/// started with, as under strace or `time` (xperf's own stop handlers and
/// the Rust runtime's ignored SIGPIPE are xperf's, not the command's: a
/// shell started with SIGINT ignored, as a background job is, sets up its
/// signals differently).
#[derive(Clone, Copy, Debug, Default)]
pub struct Inherited {
    /// Stop signals ignored when xperf started (`signals::STOP_SIGNALS`).
    ignored: [bool; STOP_SIGNALS.len()],
}

impl Inherited {
    /// Read now: before xperf installs its stop handlers.
    pub fn now() -> Inherited {
        let mut ignored = [false; STOP_SIGNALS.len()];
        for (i, &signal) in STOP_SIGNALS.iter().enumerate() {
            // SAFETY: sigaction is plain data; zeroed is a valid value.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current one.
            let read = unsafe { libc::sigaction(signal, std::ptr::null(), &raw mut old) };
            ignored[i] = read == 0 && old.sa_sigaction == libc::SIG_IGN;
        }
        Inherited { ignored }
    }

    /// In the forked child: the dispositions and mask the command starts
    /// with. Only async-signal-safe calls.
    ///
    /// # Safety
    ///
    /// Called only in the forked child, before its exec.
    unsafe fn apply(&self) {
        // SAFETY: plain system calls on locals, in the forked child.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut());
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGPIPE, &raw const action, std::ptr::null_mut());
            for (i, &signal) in STOP_SIGNALS.iter().enumerate() {
                action.sa_sigaction = if self.ignored[i] {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                libc::sigaction(signal, &raw const action, std::ptr::null_mut());
            }
        }
    }
}

/// A forked child waiting at its gate.
#[derive(Debug)]
pub struct Gated {
    pub pid: i32,
    /// Our end of the gate (a byte lets the child exec).
    gate: i32,
    /// Our end of the exec report (the child writes errno when exec fails;
    /// close-on-exec, so a successful exec closes it empty).
    report: i32,
}

/// How the child ended, its resource use, and when (TSC).
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub status: libc::c_int,
    pub user_us: u64,
    pub system_us: u64,
    pub tsc: u64,
}

fn pipe() -> Result<[i32; 2]> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("pipe2"));
    }
    Ok(fds)
}

fn close(fd: i32) {
    // SAFETY: closing a descriptor this module owns.
    unsafe { libc::close(fd) };
}

/// The search path when the environment has none (glibc's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a NUL-terminated path.
    path.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// The program `name` runs: itself when it names a path, else the first
/// executable of that name in `path` (a search list). Found here, before
/// the fork, so that the workload's trace holds no failed `execve` of a
/// search and a missing command fails before tracing starts.
pub fn resolve(name: &str, path: Option<&str>) -> Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    path.unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|dir| Path::new(if dir.is_empty() { "." } else { dir }).join(name))
        .find(|p| executable(p))
        .ok_or_else(|| Error::Sys(format!("cannot run the command: {name}: not found in PATH")))
}

/// Forks the command, held before its `exec` with the signal state of
/// `inherited`; returns once the child has set it up and waits at the
/// gate (so that none of its set-up is in the trace, which starts later).
pub fn spawn_gated(command: &[String], inherited: Inherited) -> Result<Gated> {
    let nul = || Error::Usage("the command has an argument with a NUL byte".into());
    let argv: Vec<CString> = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| nul())?;
    let first = command
        .first()
        .ok_or_else(|| Error::Usage("no command to run".into()))?;
    let path = std::env::var("PATH").ok();
    let program =
        CString::new(resolve(first, path.as_deref())?.as_os_str().as_bytes()).map_err(|_| nul())?;
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let gate = pipe()?;
    let report = pipe()?;
    let ready = pipe()?;
    // SAFETY: the child calls only async-signal-safe functions (read,
    // close, sigprocmask, sigaction, execv, write, _exit) on memory
    // prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = Error::last_os("fork");
        gate.into_iter().chain(report).chain(ready).for_each(close);
        return Err(e);
    }
    if pid == 0 {
        // SAFETY: see above; every path ends in exec or _exit.
        unsafe {
            libc::close(gate[1]);
            libc::close(report[0]);
            libc::close(ready[0]);
            inherited.apply();
            // Ready: its end closes at the exec (close-on-exec).
            let byte = 1u8;
            libc::write(ready[1], (&raw const byte).cast(), 1);
            let mut byte = 0u8;
            let got = libc::read(gate[0], (&raw mut byte).cast(), 1);
            if got != 1 {
                // xperf gave up (closed the gate without a byte).
                libc::_exit(126);
            }
            // The gate's end closes at the exec (close-on-exec): one
            // system call fewer of xperf's own in the workload's trace.
            libc::execv(program.as_ptr(), ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(report[1], (&raw const errno).cast(), 4);
            libc::_exit(127);
        }
    }
    close(gate[0]);
    close(report[1]);
    close(ready[1]);
    let gated = Gated {
        pid,
        gate: gate[1],
        report: report[0],
    };
    let mut byte = 0u8;
    // SAFETY: reads one byte into a local; blocks until the child is set
    // up (or gone: then it reads end of file, and the open fails later).
    unsafe { libc::read(ready[0], (&raw mut byte).cast(), 1) };
    close(ready[0]);
    wait_until_asleep(pid);
    Ok(gated)
}

/// Waits (a second at most) until `pid` sleeps: after its ready byte, in
/// the gate's read, so that the read's entry is before the trace starts
/// (one traced run counted it: `read` 14 against strace's 13).
fn wait_until_asleep(pid: i32) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let state = std::fs::read_to_string(&stat).ok().and_then(|s| {
            // "pid (comm) S ...": the command name may hold anything.
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().next().map(str::to_string)
        });
        if state.as_deref() != Some("R") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

impl Gated {
    /// Lets the child exec; `Err` (the child reaped) when the exec failed.
    pub fn open(self) -> Result<()> {
        let byte = 1u8;
        // SAFETY: a one-byte write from a live local to our pipe end.
        let wrote = unsafe { libc::write(self.gate, (&raw const byte).cast(), 1) };
        close(self.gate);
        let mut errno = 0i32;
        // SAFETY: reads at most four bytes into a live local; blocks until
        // the exec closed the child's end or the child wrote its errno.
        let got = unsafe { libc::read(self.report, (&raw mut errno).cast(), 4) };
        close(self.report);
        let pid = self.pid;
        std::mem::forget(self);
        if wrote != 1 {
            reap(pid);
            return Err(Error::last_os("opening the command's gate"));
        }
        if got == 4 {
            reap(pid);
            return Err(Error::Sys(format!(
                "cannot run the command: {}",
                std::io::Error::from_raw_os_error(errno)
            )));
        }
        Ok(())
    }
}

impl Drop for Gated {
    /// A child never let through ends at its closed gate; reaped here.
    fn drop(&mut self) {
        close(self.gate);
        close(self.report);
        reap(self.pid);
    }
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
}

/// Waits for `pid` on a thread of its own; its end arrives on the channel.
pub fn wait_in_thread(pid: i32) -> Result<mpsc::Receiver<Exit>> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("xperf-wait".into())
        .spawn(move || {
            let mut status = 0;
            // SAFETY: rusage is plain data wait4 fills.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let ended = loop {
                // SAFETY: waits for our own child, writing two locals.
                let r = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
                if r == pid {
                    break true;
                }
                if r < 0
                    && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    break false;
                }
            };
            let tsc = xvmm_host::tsc::rdtsc();
            let us = |t: libc::timeval| {
                u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000
                    + u64::try_from(t.tv_usec).unwrap_or(0)
            };
            if ended {
                let _ = tx.send(Exit {
                    status,
                    user_us: us(usage.ru_utime),
                    system_us: us(usage.ru_stime),
                    tsc,
                });
            }
        })
        .map_err(|e| Error::Sys(format!("starting the waiting thread: {e}")))?;
    Ok(rx)
}

/// Sends `signal` to each of `pids` (the workload's tasks); gone ones are
/// skipped.
pub fn signal_all(pids: impl IntoIterator<Item = i32>, signal: libc::c_int) {
    for pid in pids.into_iter().filter(|&p| p > 0) {
        // SAFETY: kill has no memory arguments.
        unsafe { libc::kill(pid, signal) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn command(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_gated_child_runs_only_once_opened_and_its_end_is_reported() {
        let gated = spawn_gated(&command(&["sh", "-c", "exit 7"]), Inherited::now()).unwrap();
        let ended = wait_in_thread(gated.pid).unwrap();
        // Held at its gate: not ended.
        assert!(ended.recv_timeout(Duration::from_millis(200)).is_err());
        gated.open().unwrap();
        let exit = ended.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(libc::WIFEXITED(exit.status));
        assert_eq!(libc::WEXITSTATUS(exit.status), 7);
        assert!(exit.tsc > 0);
    }

    #[test]
    fn the_command_starts_with_the_signal_state_xperf_started_with() {
        let file = std::env::temp_dir().join(format!("xperf-sigign-{}", std::process::id()));
        // SIGHUP ignored when xperf started (nohup), SIGPIPE ignored by the
        // Rust runtime since: the command gets the first, not the second.
        // SAFETY: swapping a disposition and putting it back.
        let old = unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let inherited = Inherited::now();
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGHUP, old) };
        let script = format!("exec cat /proc/self/status > {}", file.display());
        let gated = spawn_gated(&command(&["sh", "-c", &script]), inherited).unwrap();
        let ended = wait_in_thread(gated.pid).unwrap();
        gated.open().unwrap();
        ended.recv_timeout(Duration::from_secs(10)).unwrap();
        let status = std::fs::read_to_string(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        let mask = |field: &str| {
            let line = status.lines().find(|l| l.starts_with(field)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        let bit = |signal: libc::c_int| 1u64 << (signal - 1);
        assert_ne!(mask("SigIgn:") & bit(libc::SIGHUP), 0, "{status}");
        assert_eq!(mask("SigIgn:") & bit(libc::SIGPIPE), 0, "{status}");
        assert_eq!(mask("SigBlk:"), 0, "{status}");
    }

    #[test]
    fn a_command_is_found_in_the_search_path_before_the_fork() {
        assert_eq!(resolve("./x", None).unwrap(), PathBuf::from("./x"));
        assert_eq!(
            resolve("sh", Some("/nonexistent:/bin")).unwrap(),
            PathBuf::from("/bin/sh")
        );
        // A directory of that name is not a program.
        let err = resolve("tmp", Some("/")).unwrap_err().to_string();
        assert!(err.contains("tmp: not found in PATH"), "{err}");
        let err = spawn_gated(&command(&["xperf-no-such-command"]), Inherited::now()).unwrap_err();
        assert!(err.to_string().contains("not found in PATH"), "{err}");
    }

    #[test]
    fn a_command_that_cannot_run_is_one_error_and_a_dropped_gate_ends_the_child() {
        let gated = spawn_gated(&command(&["/nonexistent/xperf-test"]), Inherited::now()).unwrap();
        let err = gated.open().unwrap_err().to_string();
        assert!(err.contains("No such file or directory"), "{err}");
        // Not a program: exec's own refusal, in one line.
        let err = spawn_gated(&command(&["/etc/passwd"]), Inherited::now())
            .unwrap()
            .open()
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        let gated = spawn_gated(&command(&["true"]), Inherited::now()).unwrap();
        let pid = gated.pid;
        drop(gated);
        // Reaped by the drop: no such child any more.
        // SAFETY: kill with signal 0 only checks the pid.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1);
        let err = spawn_gated(&command(&["a\0b"]), Inherited::now()).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
