//! The one owner of the tracefs and debugfs mounts.
//!
//! [`FsUse::acquire`] finds the file system in the calling thread's mount
//! namespace, mounting it when absent, and counts its users per namespace;
//! the last [`FsUse`] dropped in a namespace releases it, and a mount made by
//! one of our processes is unmounted only when no live process of ours still
//! uses it (the journal says who does). Parallel users in one process (the
//! test suite's threads) and in several processes (two traced runs) thus
//! never lose the tree under them, and the host is left as found.

use super::journal::{self, Change, MountRecord};
use super::{err, Result};
pub use super::{FsKind, DEBUGFS_DIR, TRACEFS_DIR};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One line of `/proc/thread-self/mountinfo`, the fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u64,
    pub point: PathBuf,
    pub fstype: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space in a path).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            // The low byte, as `as u8` gave: the kernel writes \000..\377 only.
            out.push(v.to_le_bytes()[0]);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text (`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 ...`).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mut fields = head.split_whitespace();
            let id = fields.next()?.parse().ok()?;
            let point = fields.nth(3)?;
            let fstype = tail.split_whitespace().next()?;
            Some(MountEntry {
                id,
                point: PathBuf::from(unescape(point)),
                fstype: fstype.to_string(),
            })
        })
        .collect()
}

/// The mounts of the calling thread's namespace (`/proc/self` would show
/// the main thread's, which a test thread may have left).
pub fn mount_table() -> io::Result<Vec<MountEntry>> {
    let bytes = crate::file::read_bounded(Path::new("/proc/thread-self/mountinfo"), 64 << 20)?;
    Ok(parse_mountinfo(&String::from_utf8_lossy(&bytes)))
}

/// The calling thread's mount namespace (its inode number).
pub fn namespace_id() -> io::Result<u64> {
    Ok(fs::metadata("/proc/thread-self/ns/mnt")?.ino())
}

/// Whether any thread of any process is in mount namespace `ns`.
pub(crate) fn namespace_exists(ns: u64) -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return true;
    };
    procs.flatten().any(|p| {
        fs::read_dir(p.path().join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| fs::metadata(t.path().join("ns/mnt")).is_ok_and(|m| m.ino() == ns))
    })
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
}

fn mount_fs(kind: FsKind, point: &Path) -> io::Result<()> {
    let (target, fstype) = (
        cstring(point)?,
        CString::new(kind.fstype()).unwrap_or_default(),
    );
    // SAFETY: mount(2) with NUL-terminated strings and no data.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The mount of `kind` to use in this namespace: the one at its usual
/// place first. Found in mountinfo, never by touching paths: reading
/// `/sys/kernel/debug/tracing` would automount tracefs there.
fn find_mounted(kind: FsKind, table: &[MountEntry]) -> Option<MountEntry> {
    let of_kind = || table.iter().filter(|m| m.fstype == kind.fstype());
    of_kind()
        .find(|m| m.point == Path::new(kind.default_dir()))
        .or_else(|| of_kind().next())
        .cloned()
}

/// Mounts `kind` at its usual place in a private namespace (see
/// [`super::namespace`]), for work that must not change the host's mounts.
pub(crate) fn mount_private(kind: FsKind) -> Result<PathBuf> {
    let point = PathBuf::from(kind.default_dir());
    mount_fs(kind, &point).map_err(|e| {
        err(format!(
            "mounting {} at {}: {e}",
            kind.fstype(),
            point.display()
        ))
    })?;
    Ok(point)
}

/// Unmounts a recorded mount if it is still there as recorded. `Ok(false)`:
/// it was gone already.
pub(crate) fn unmount_recorded(record: &MountRecord) -> std::result::Result<bool, String> {
    let present = mount_table().is_ok_and(|t| {
        t.iter().any(|m| {
            m.id == record.mount_id && m.point == record.point && m.fstype == record.kind.fstype()
        })
    });
    if !present {
        return Ok(false);
    }
    let path = cstring(&record.point).map_err(|e| e.to_string())?;
    // SAFETY: umount2 of a NUL-terminated path; no MNT_DETACH: a mount
    // someone else has files open in stays (EBUSY) rather than vanish later.
    if unsafe { libc::umount2(path.as_ptr(), 0) } != 0 {
        return Err(format!(
            "unmounting {} at {}: {}",
            record.kind.fstype(),
            record.point.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(true)
}

/// Users of a mount in one namespace, within this process.
#[derive(Debug)]
struct NsUsers {
    users: usize,
    root: PathBuf,
    mount_id: u64,
}

static USERS: Mutex<BTreeMap<(u64, FsKind), NsUsers>> = Mutex::new(BTreeMap::new());
/// Makes each acquire and release whole within the process (two threads of
/// one namespace must not both find the file system unmounted and mount
/// it). Always the outermost lock: taken before the journal's, never
/// inside it.
static ACQUIRE: Mutex<()> = Mutex::new(());

fn users() -> std::sync::MutexGuard<'static, BTreeMap<(u64, FsKind), NsUsers>> {
    USERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a thread of this process holds the mount with this id.
pub(crate) fn in_use_here(mount_id: u64) -> bool {
    users().values().any(|u| u.mount_id == mount_id)
}

/// Forgets every in-process user (the process is about to die).
pub(crate) fn forget_all_uses() {
    users().clear();
}

/// A live use of tracefs or debugfs; dropping the last use in a namespace
/// releases the mount (see the module's description).
#[derive(Debug)]
pub struct FsUse {
    kind: FsKind,
    root: PathBuf,
    /// The namespace whose count this use holds; `None` for a directory
    /// the user named, which is never mounted or unmounted.
    counted: Option<u64>,
}

impl FsUse {
    /// Finds `kind` mounted, or mounts it at its usual place. With
    /// `explicit`, that directory must hold it and nothing is mounted.
    pub fn acquire(kind: FsKind, explicit: Option<&Path>) -> Result<FsUse> {
        if let Some(dir) = explicit {
            if !kind.looks_right(dir) {
                return Err(err(format!(
                    "no {} at {} (no instances/ and trace there)",
                    kind.fstype(),
                    dir.display()
                )));
            }
            return Ok(FsUse {
                kind,
                root: dir.to_path_buf(),
                counted: None,
            });
        }
        let _whole = ACQUIRE.lock().unwrap_or_else(|p| p.into_inner());
        let ns = namespace_id().map_err(|e| err(format!("reading the mount namespace: {e}")))?;
        if let Some(u) = users().get_mut(&(ns, kind)) {
            u.users += 1;
            return Ok(FsUse {
                kind,
                root: u.root.clone(),
                counted: Some(ns),
            });
        }
        let dir = journal::dir();
        let table = mount_table().map_err(|e| err(format!("reading the mount table: {e}")))?;
        let (root, mount_id) = match find_mounted(kind, &table) {
            Some(m) => {
                // Someone's mount: say we use it, so that if it is one of
                // ours its maker leaves it to us. Without a journal (not
                // root) the mount is not ours to protect anyway.
                if let Ok(_lock) = journal::lock_in(dir) {
                    journal::record_locked(dir, Change::UsesMount { mount_id: m.id })?;
                }
                (m.point, m.id)
            }
            None => Self::mount_new(kind, ns, dir)?,
        };
        users().insert(
            (ns, kind),
            NsUsers {
                users: 1,
                root: root.clone(),
                mount_id,
            },
        );
        Ok(FsUse {
            kind,
            root,
            counted: Some(ns),
        })
    }

    /// Mounts `kind` and records the mount and this process's use of it.
    fn mount_new(kind: FsKind, ns: u64, dir: &Path) -> Result<(PathBuf, u64)> {
        let point = PathBuf::from(kind.default_dir());
        if kind == FsKind::Tracefs && !kernel_has(kind) {
            return Err(err("this kernel has no tracefs (CONFIG_TRACING off)"));
        }
        let _lock = journal::lock_in(dir)?;
        mount_fs(kind, &point).map_err(|e| {
            err(format!(
                "{} is not mounted and mounting it at {} failed: {e} ({})",
                kind.fstype(),
                point.display(),
                super::what_to_do(&e)
            ))
        })?;
        let table = mount_table().unwrap_or_default();
        let Some(mine) = table
            .iter()
            .rev()
            .find(|m| m.fstype == kind.fstype() && m.point == point)
        else {
            return Err(err(format!(
                "mounted {} at {} but the mount table does not show it",
                kind.fstype(),
                point.display()
            )));
        };
        let record = MountRecord {
            kind,
            point: point.clone(),
            mount_id: mine.id,
            namespace: ns,
            pid: std::process::id(),
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| err(e.to_string()))?;
        let written =
            journal::write_fresh_then_rename(&dir.join(format!("mount-{}.json", mine.id)), &bytes)
                .and_then(|()| {
                    journal::record_locked(dir, Change::UsesMount { mount_id: mine.id })
                });
        if let Err(e) = written {
            let _ = unmount_recorded(&record);
            return Err(e);
        }
        Ok((point, mine.id))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn kind(&self) -> FsKind {
        self.kind
    }

    /// Drops this use; the namespace's last use here releases the mount.
    fn release(&mut self) {
        let Some(ns) = self.counted.take() else {
            return;
        };
        let _whole = ACQUIRE.lock().unwrap_or_else(|p| p.into_inner());
        let mut map = users();
        let Some(u) = map.get_mut(&(ns, self.kind)) else {
            return;
        };
        u.users -= 1;
        if u.users > 0 {
            return;
        }
        let mount_id = u.mount_id;
        map.remove(&(ns, self.kind));
        drop(map);
        let dir = journal::dir();
        let Ok(_lock) = journal::lock_in(dir) else {
            return;
        };
        journal::forget_locked(dir, &Change::UsesMount { mount_id });
        let ours = journal::read_mount_records(dir)
            .into_iter()
            .find(|(_, r)| r.mount_id == mount_id && r.namespace == ns);
        if let Some((path, record)) = ours {
            if journal::mount_used_by_others(dir, mount_id) || in_use_here(mount_id) {
                return;
            }
            // EBUSY (someone outside opened a file in it) keeps the record:
            // the next start of either tool tries again.
            if unmount_recorded(&record).is_ok() {
                let _ = fs::remove_file(path);
            }
        }
    }
}

impl Drop for FsUse {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether the running kernel knows the file system at all.
fn kernel_has(kind: FsKind) -> bool {
    fs::read_to_string("/proc/filesystems").is_ok_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().last() == Some(kind.fstype()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_state::namespace::enter_private_mount_namespace;
    use std::sync::{Arc, Barrier};

    #[test]
    fn mountinfo_lines_give_id_point_and_type() {
        let text = "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
                    41 22 0:12 / /sys/kernel/tracing rw,relatime shared:17 - tracefs tracefs rw\n\
                    57 22 0:40 / /mnt/a\\040b rw - ext4 /dev/x rw\n\
                    garbage\n";
        let t = parse_mountinfo(text);
        assert_eq!(t.len(), 3);
        assert_eq!(t[1].id, 41);
        assert_eq!(t[1].point, Path::new(TRACEFS_DIR));
        assert_eq!(t[1].fstype, "tracefs");
        assert_eq!(t[2].point, Path::new("/mnt/a b"));
        let found = find_mounted(FsKind::Tracefs, &t).unwrap();
        assert_eq!(found.id, 41);
        assert!(find_mounted(FsKind::Debugfs, &t).is_none());
    }

    fn tracefs_mounts() -> Vec<MountEntry> {
        mount_table()
            .unwrap()
            .into_iter()
            .filter(|m| m.fstype == "tracefs")
            .collect()
    }

    /// The fresh-machine path on every run: in a private namespace tracefs
    /// starts unmounted; the first use mounts it, the mount outlives every
    /// use but the last, and goes with it. Threads started here share the
    /// namespace, and their uses overlap (the race issue 20 found).
    #[test]
    fn tracefs_is_mounted_once_and_unmounted_after_the_last_user() {
        enter_private_mount_namespace().expect("root makes mount namespaces");
        assert!(tracefs_mounts().is_empty());
        let first = FsUse::acquire(FsKind::Tracefs, None).unwrap();
        assert_eq!(first.root(), Path::new(TRACEFS_DIR));
        let mounted = tracefs_mounts();
        assert_eq!(mounted.len(), 1);
        let uses = Change::UsesMount {
            mount_id: mounted[0].id,
        };
        let record = journal::dir().join(format!("mount-{}.json", mounted[0].id));
        assert!(record.is_file(), "the mount is recorded as ours");
        let barrier = Arc::new(Barrier::new(8));
        let ns = namespace_id().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    assert_eq!(namespace_id().unwrap(), ns, "threads inherit it");
                    for _ in 0..50 {
                        let u = FsUse::acquire(FsKind::Tracefs, None).unwrap();
                        assert!(u.root().join("instances").is_dir());
                        drop(u);
                    }
                    barrier.wait();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(tracefs_mounts().len(), 1, "still mounted: one user left");
        drop(first);
        assert!(tracefs_mounts().is_empty(), "unmounted with the last user");
        assert!(!record.exists(), "the mount's record goes with it");
        let journal = journal::dir().join(format!("journal-{}.json", std::process::id()));
        let text = fs::read_to_string(&journal).unwrap_or_default();
        let used = serde_json::to_string(&uses).unwrap();
        assert!(!text.contains(&used), "{text}");
    }

    #[test]
    fn a_mount_found_is_used_and_left_mounted() {
        enter_private_mount_namespace().expect("root makes mount namespaces");
        mount_fs(FsKind::Tracefs, Path::new(TRACEFS_DIR)).unwrap();
        let before = tracefs_mounts();
        let u = FsUse::acquire(FsKind::Tracefs, None).unwrap();
        drop(u);
        assert_eq!(tracefs_mounts(), before, "someone else's mount stays");
    }

    #[test]
    fn an_explicit_directory_must_hold_tracefs() {
        let e = FsUse::acquire(FsKind::Tracefs, Some(Path::new("/proc/self"))).unwrap_err();
        assert!(e.0.contains("no tracefs at /proc/self"), "{e}");
    }
}
