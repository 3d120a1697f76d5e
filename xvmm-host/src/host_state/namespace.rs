//! A private mount namespace for one thread.
//!
//! `unshare(CLONE_NEWNS)` acts on the calling thread alone (it implies
//! `CLONE_FS`, which gives the thread its own root and working directory), so
//! a test thread, or a short-lived helper thread, can mount and unmount
//! tracefs without the host or the process's other threads seeing it. Threads
//! and processes it starts inherit the namespace; it ends with the last of
//! them.

use super::mounts::{mount_table, MountEntry};
use std::io;
use std::path::Path;

/// Moves the calling thread into a new mount namespace with private
/// propagation and unmounts every tracefs and debugfs there, so the thread
/// meets the machine as a fresh boot leaves it ("tracefs not mounted")
/// whatever the host has mounted. Needs CAP_SYS_ADMIN.
pub fn enter_private_mount_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) with a flag constant; it changes only this thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("unshare(CLONE_NEWNS): {e}"),
        ));
    }
    // Without this, unmounts below would propagate back to the host's
    // shared mounts (systemd makes / shared).
    // SAFETY: mount(2) changing propagation only: no source, no data.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("making / private in the new mount namespace: {e}"),
        ));
    }
    unmount_tracing_filesystems()
}

/// Unmounts every tracefs and debugfs of the calling thread's namespace,
/// deepest first (an automounted tracefs under debugfs goes before it).
fn unmount_tracing_filesystems() -> io::Result<()> {
    let mut tracing: Vec<MountEntry> = mount_table()?
        .into_iter()
        .filter(|m| m.fstype == "tracefs" || m.fstype == "debugfs")
        .collect();
    tracing.sort_by_key(|m| std::cmp::Reverse(m.point.components().count()));
    for m in tracing {
        detach(&m.point)?;
    }
    Ok(())
}

fn detach(point: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(point.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a mount point"))?;
    // SAFETY: umount2 of a NUL-terminated path; MNT_DETACH because only this
    // private namespace loses it.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        // Already gone (a parent's detach took it): nothing to do.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(io::Error::new(
                e.kind(),
                format!("unmounting {} in a private namespace: {e}", point.display()),
            ));
        }
    }
    Ok(())
}

/// Runs `f` on a new thread in a private mount namespace (see
/// [`enter_private_mount_namespace`]): what it mounts is gone when it returns.
pub fn in_private_namespace<T: Send>(f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_private_mount_namespace()?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| {
            Err(io::Error::other(
                "a thread in a private mount namespace panicked",
            ))
        })
    })
}

/// Whether this process may make mount namespaces (CAP_SYS_ADMIN): probed
/// by doing it on a throwaway thread.
pub fn private_namespaces_available() -> bool {
    in_private_namespace(|| ()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_state::mounts::{mount_table, TRACEFS_DIR};

    fn tracefs_mounted() -> bool {
        mount_table().unwrap().iter().any(|m| m.fstype == "tracefs")
    }

    /// Needs root (the build machines run the suite as root): a mount made
    /// in the private namespace is not seen by the rest of the process.
    #[test]
    fn a_mount_in_a_private_namespace_stays_there() {
        let before = mount_table().unwrap();
        let inside = in_private_namespace(|| {
            assert!(!tracefs_mounted(), "tracefs starts unmounted");
            // SAFETY: the four pointers are C-string literals ('static and
            // NUL-terminated) and a null `data`, which mount(2) accepts; it
            // keeps none of them after it returns.
            let rc = unsafe {
                libc::mount(
                    c"nodev".as_ptr(),
                    c"/sys/kernel/tracing".as_ptr(),
                    c"tracefs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            assert_eq!(rc, 0, "{}", io::Error::last_os_error());
            assert!(Path::new(TRACEFS_DIR).join("instances").is_dir());
            tracefs_mounted()
        })
        .expect("root can make a mount namespace");
        assert!(inside, "the private namespace saw its own mount");
        assert_eq!(mount_table().unwrap(), before, "nothing leaked out");
    }
}
