//! The build cache outside the checkout: where it is, per-key locks so
//! concurrent builds of the same inputs wait instead of racing, and atomic
//! publication (build in a temporary directory, rename into place) so an
//! interrupted build never leaves a half-written entry.

use crate::error::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// `--cache`, else `$XVMM_CACHE`, else `~/.cache/xvmm`.
pub fn root(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("XVMM_CACHE").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("xvmm")),
        None => Err(Error::Build(
            "no cache directory: pass --cache or set XVMM_CACHE or HOME".into(),
        )),
    }
}

/// An exclusive `flock` on `<root>/locks/<key>.lock`, released on drop.
pub struct CacheLock {
    _file: File,
}

impl CacheLock {
    /// Waits for the lock `key`; `on_wait` is called once if someone else
    /// holds it (so the caller can say why nothing happens).
    pub fn acquire_or_wait(root: &Path, key: &str, on_wait: impl FnOnce()) -> Result<CacheLock> {
        let file = CacheLock::open(root, key)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(CacheLock { _file: file });
        }
        on_wait();
        CacheLock::lock(file, root, key)
    }

    pub fn acquire(root: &Path, key: &str) -> Result<CacheLock> {
        CacheLock::lock(CacheLock::open(root, key)?, root, key)
    }

    fn open(root: &Path, key: &str) -> Result<File> {
        let dir = root.join("locks");
        fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
        let path = dir.join(format!("{key}.lock"));
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))
    }

    fn lock(file: File, root: &Path, key: &str) -> Result<CacheLock> {
        // SAFETY: flock on a descriptor we own; blocks until the lock is free.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            let path = root.join("locks").join(format!("{key}.lock"));
            return Err(Error::io("locking", &path, std::io::Error::last_os_error()));
        }
        Ok(CacheLock { _file: file })
    }
}

/// Creates `<parent>/.tmp-<tag>-<pid>`, first removing leftovers of earlier
/// interrupted attempts for the same tag (the caller holds the tag's lock).
pub fn fresh_tmp_dir(parent: &Path, tag: &str) -> Result<PathBuf> {
    fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
    let prefix = format!(".tmp-{tag}-");
    if let Ok(entries) = fs::read_dir(parent) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let tmp = parent.join(format!("{prefix}{}", std::process::id()));
    fs::create_dir_all(&tmp).map_err(|e| Error::io("creating", &tmp, e))?;
    Ok(tmp)
}

/// Renames a finished temporary directory into its final place.
pub fn publish(tmp: &Path, final_dir: &Path) -> Result<()> {
    if final_dir.exists() {
        // An incomplete entry (no lock was held when it was made); replace it.
        fs::remove_dir_all(final_dir).map_err(|e| Error::io("removing", final_dir, e))?;
    }
    fs::rename(tmp, final_dir).map_err(|e| Error::io("publishing", final_dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_makes_the_next_one_wait_and_say_so() {
        let root = scratch("waitlock");
        let first = CacheLock::acquire(&root, "make").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let root = root.clone();
            std::thread::spawn(move || {
                let _second = CacheLock::acquire_or_wait(&root, "make", || tx.send(()).unwrap());
            })
        };
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("the waiter said it waits");
        drop(first);
        waiter.join().unwrap();
        let mut said = false;
        drop(CacheLock::acquire_or_wait(&root, "make", || said = true).unwrap());
        assert!(!said, "a free lock is taken without waiting");
        fs::remove_dir_all(&root).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xvmm-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn explicit_root_wins() {
        assert_eq!(
            root(Some(Path::new("/x/y"))).unwrap(),
            PathBuf::from("/x/y")
        );
    }

    #[test]
    fn tmp_dirs_are_cleaned_and_published_atomically() {
        let parent = scratch("publish");
        fs::create_dir_all(parent.join(".tmp-abc-1")).unwrap();
        fs::write(parent.join(".tmp-abc-1/stale"), b"x").unwrap();
        let tmp = fresh_tmp_dir(&parent, "abc").unwrap();
        assert!(!parent.join(".tmp-abc-1").exists() || tmp == parent.join(".tmp-abc-1"));
        assert!(fs::read_dir(&tmp).unwrap().next().is_none());
        fs::write(tmp.join("bzImage"), b"k").unwrap();
        let final_dir = parent.join("abc");
        fs::create_dir_all(&final_dir).unwrap();
        fs::write(final_dir.join("partial"), b"p").unwrap();
        publish(&tmp, &final_dir).unwrap();
        assert_eq!(fs::read(final_dir.join("bzImage")).unwrap(), b"k");
        assert!(!final_dir.join("partial").exists());
        assert!(!tmp.exists());
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn lock_is_reacquirable_after_drop() {
        let root = scratch("lock");
        drop(CacheLock::acquire(&root, "k").unwrap());
        let _again = CacheLock::acquire(&root, "k").unwrap();
        assert!(root.join("locks/k.lock").exists());
        fs::remove_dir_all(&root).unwrap();
    }
}
