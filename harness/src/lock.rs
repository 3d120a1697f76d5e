//! One L1 boot at a time on a machine. QEMU TCG takes whole cores and the
//! harness checks timings, so two test binaries (or two developers) booting
//! L1 together would slow each other into timeouts. Every QEMU run holds an
//! exclusive `flock` on [`LOCK_PATH`], the file `flock(1)` takes in
//! `flock /tmp/xvmm-harness.lock cargo test ...`.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use xvmm::{Error, Result};

/// The machine-wide harness lock.
pub const LOCK_PATH: &str = "/tmp/xvmm-harness.lock";

/// Threads of one process: a descriptor inherited from `flock(1)` is shared
/// by all of them, so the file lock alone would not keep them apart.
static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Held for the duration of one QEMU run; released on drop.
pub struct HarnessLock {
    /// The lock's own open file (closing it releases the lock); `None` when
    /// the lock is held through a descriptor the caller passed down.
    _file: Option<File>,
    _thread: MutexGuard<'static, ()>,
}

impl HarnessLock {
    /// Waits for [`LOCK_PATH`].
    pub fn acquire() -> Result<HarnessLock> {
        HarnessLock::acquire_at(Path::new(LOCK_PATH))
    }

    /// Waits for an exclusive `flock` on `path`. When this process inherited
    /// an open descriptor of `path` (`flock PATH cargo test` passes its own
    /// down), the lock is taken through it: immediately when the caller
    /// already holds it (a second open would wait for ourselves forever),
    /// and it is left to the caller to release.
    pub fn acquire_at(path: &Path) -> Result<HarnessLock> {
        let thread = IN_PROCESS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(fd) = inherited_descriptor(path) {
            lock(fd, path)?;
            return Ok(HarnessLock {
                _file: None,
                _thread: thread,
            });
        }
        let file = open(path)?;
        lock(file.as_raw_fd(), path)?;
        Ok(HarnessLock {
            _file: Some(file),
            _thread: thread,
        })
    }
}

/// Opens `path`, creating it when absent. An existing file is opened read
/// only (enough for `flock`): another user's file in sticky `/tmp` cannot be
/// opened for writing. The path is well known and in a directory everyone
/// writes, so nothing there is followed (`O_NOFOLLOW`; creating is
/// `O_EXCL`): a link planted at it would make a root run create, or lock,
/// any file it points at. Non-blocking, so that a FIFO planted there cannot
/// stall the open; it is refused as not a regular file.
fn open(path: &Path) -> Result<File> {
    let nofollow = libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // Twice: another process may create the file between our two opens.
    for _ in 0..2 {
        let existing = OpenOptions::new()
            .read(true)
            .custom_flags(nofollow | libc::O_NONBLOCK)
            .open(path);
        let file = match existing {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(nofollow)
                    .open(path)
                {
                    Ok(f) => return Ok(f),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(Error::io("creating", path, e)),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::Io(format!(
                    "opening {}: is a symbolic link: refusing to follow it",
                    path.display()
                )))
            }
            Err(e) => return Err(Error::io("opening", path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io("opening", path, e))?;
        if !meta.is_file() {
            return Err(Error::Io(format!(
                "opening {}: not a regular file",
                path.display()
            )));
        }
        return Ok(file);
    }
    Err(Error::Io(format!(
        "opening {}: it keeps appearing and disappearing",
        path.display()
    )))
}

fn lock(fd: RawFd, path: &Path) -> Result<()> {
    // SAFETY: flock on an open descriptor; blocks until the lock is ours.
    if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
        return Err(Error::io("locking", path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A descriptor of this process open on the same file as `path`, if any.
fn inherited_descriptor(path: &Path) -> Option<RawFd> {
    // Not through a link: the lock is never taken on what one points at.
    let want = std::fs::symlink_metadata(path).ok()?;
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let fd: RawFd = entry.file_name().to_str()?.parse().ok()?;
            let meta = std::fs::metadata(entry.path()).ok()?;
            (meta.is_file() && meta.dev() == want.dev() && meta.ino() == want.ino()).then_some(fd)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn scratch(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("xvmm-lock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// Whether `flock -n` (another open file, as another process) gets it.
    fn free_for_others(path: &Path) -> bool {
        Command::new("flock")
            .args(["-n", "-E", "3"])
            .arg(path)
            .arg("true")
            .status()
            .expect("flock(1) runs")
            .code()
            == Some(0)
    }

    #[test]
    fn excludes_other_processes_until_dropped() {
        let path = scratch("exclusive");
        let held = HarnessLock::acquire_at(&path).unwrap();
        assert!(!free_for_others(&path));
        drop(held);
        assert!(free_for_others(&path));
        std::fs::remove_file(&path).unwrap();
    }

    /// Issue 20, item 5: the lock at its well-known /tmp name was opened
    /// through whatever link was planted there: an existing target was
    /// locked, a missing one created (by root, anywhere).
    #[test]
    fn a_planted_symlink_is_never_followed() {
        let dir = scratch("planted");
        std::fs::create_dir(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.join("lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = HarnessLock::acquire_at(&link).err().expect("refused");
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(free_for_others(&victim));

        let dangling = dir.join("dangling");
        let absent = dir.join("absent");
        std::os::unix::fs::symlink(&absent, &dangling).unwrap();
        assert!(HarnessLock::acquire_at(&dangling).is_err());
        assert!(!absent.exists(), "created through a dangling link");

        let fifo = dir.join("fifo");
        let made = Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()));
        let err = HarnessLock::acquire_at(&fifo).err().expect("refused");
        assert!(err.to_string().ends_with("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_open_descriptor_of_the_lock_file_is_found() {
        let path = scratch("inherited");
        assert_eq!(inherited_descriptor(&path), None);
        let file = open(&path).unwrap();
        let other = scratch("other");
        std::fs::write(&other, b"").unwrap();
        let _unrelated = File::open(&other).unwrap();
        assert_eq!(inherited_descriptor(&path), Some(file.as_raw_fd()));
        // Locking through it again (the `flock(1)` case) does not block.
        lock(file.as_raw_fd(), &path).unwrap();
        let again = HarnessLock::acquire_at(&path).unwrap();
        assert!(!free_for_others(&path));
        drop(again);
        // Still held: released by whoever opened the descriptor.
        assert!(!free_for_others(&path));
        drop(file);
        assert!(free_for_others(&path));
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&other).unwrap();
    }
}
