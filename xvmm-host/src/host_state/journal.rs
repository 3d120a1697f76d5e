//! A write-ahead record of every change xvmm and xperf make to the host, so
//! that no way out leaves the host changed for good.
//!
//! Each process that changes something keeps `journal-<pid>.json` in
//! [`DEFAULT_DIR`] (a tmpfs, emptied by a reboot exactly when the kernel
//! state it describes is), naming itself by pid and start time (a reused pid
//! is not mistaken for it) and listing what it changed: tracefs instances,
//! dynamic events, one-value files such as `kprobes-optimization`, and the
//! tracefs/debugfs mounts it uses. A change is recorded before it is made
//! and forgotten once undone. A mount xvmm or xperf made has a
//! `mount-<id>.json` of its own, so that whichever of our processes uses it
//! last, not necessarily the one that made it, unmounts it.
//!
//! [`super::undo::recover_orphans`] (the next start of either tool) undoes the journals
//! of processes that no longer exist (killed with SIGKILL, or aborted on a
//! panic: the release profile has `panic = "abort"`, so no destructor ran),
//! and removes tracefs instances named after a dead xvmm or xperf process;
//! [`super::undo::undo_own`] does the same for the running process (its panic hook).
//! All of it runs under one lock: a mutex within the process and `flock` on
//! `<dir>/lock` across processes.

use super::FsKind;
use super::{err, Result};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Where the journals live unless `XVMM_STATE_DIR` names another directory.
pub const DEFAULT_DIR: &str = "/run/xvmm";
/// Prefixes of the tracefs instances xvmm and xperf create
/// (`<prefix><pid>`, tests add `-<what>`).
pub const INSTANCE_PREFIXES: [&str; 2] = ["xvmm-", "xperf-"];

/// One change to the host, as recorded before it is made.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// The process uses the tracefs or debugfs mount with this id.
    UsesMount { mount_id: u64 },
    /// A tracefs instance, by its name under `instances/`.
    Instance { name: String },
    /// A dynamic event (`group/name`) created through `dynamic_events`.
    DynamicEvent { event: String },
    /// A one-value file (a sysctl) and its text before the change.
    Value { path: PathBuf, before: String },
}

/// A process's journal as stored.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(super) struct JournalFile {
    pub tool: String,
    pub pid: u32,
    pub start_time: u64,
    pub changes: Vec<Change>,
}

/// A tracefs or debugfs mount one of our processes made.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountRecord {
    pub kind: FsKind,
    pub point: PathBuf,
    pub mount_id: u64,
    /// The mount namespace it was made in (only there can it be unmounted).
    pub namespace: u64,
    /// The process that made it (0 in records of older versions).
    #[serde(default)]
    pub pid: u32,
}

/// The journal directory in use.
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::var_os("XVMM_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
    })
}

/// This process's changes, in the order they were recorded.
pub(super) static OWN: Mutex<Vec<Change>> = Mutex::new(Vec::new());
/// Serialises the journal's users within the process (flock only excludes
/// other open files, and each holder opens its own).
pub(super) static IN_PROCESS: Mutex<()> = Mutex::new(());

/// The cross-process lock, held while it lives.
pub(crate) struct Lock {
    _guard: Option<MutexGuard<'static, ()>>,
    _file: Option<File>,
}

pub(super) fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes the journal lock in `dir`, creating the directory (0700) if needed.
pub(crate) fn lock_in(dir: &Path) -> Result<Lock> {
    let guard = relock(&IN_PROCESS);
    let file = open_lock_file(dir)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = io::Error::last_os_error();
        // A kernel without CONFIG_FILE_LOCKING (a tinyconfig guest, where
        // xperf runs alone as /init) has no flock: the process's own lock
        // is all there is, and all there needs to be.
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(err(format!("locking {}/lock: {e}", dir.display())));
        }
    }
    Ok(Lock {
        _guard: Some(guard),
        _file: Some(file),
    })
}

fn open_lock_file(dir: &Path) -> Result<File> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(err(format!(
                "cannot keep the record of host changes in {}: {e} ({})",
                dir.display(),
                super::what_to_do(&e)
            )))
        }
    }
    let path = dir.join("lock");
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| err(format!("opening {}: {e}", path.display())))
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field
/// 22), which tells a pid's reuse from its first owner.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // fields after its closing parenthesis.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

pub(super) fn alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

fn own_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "xvmm".into())
}

fn journal_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("journal-{pid}.json"))
}

/// Writes `changes` as this process's journal (removes it when empty):
/// a fresh name, then a rename, so a reader never sees half a file.
pub(super) fn persist(dir: &Path, changes: &[Change]) -> Result<()> {
    let pid = std::process::id();
    let path = journal_path(dir, pid);
    if changes.is_empty() {
        return match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(err(format!("removing {}: {e}", path.display())))
            }
            _ => Ok(()),
        };
    }
    let journal = JournalFile {
        tool: own_name(),
        pid,
        start_time: start_time(pid).unwrap_or(0),
        changes: changes.to_vec(),
    };
    let bytes = serde_json::to_vec(&journal).map_err(|e| err(e.to_string()))?;
    write_fresh_then_rename(&path, &bytes)
}

pub(crate) fn write_fresh_then_rename(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let write = || -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        err(format!("writing {}: {e}", path.display()))
    })
}

/// Records a change before it is made. Fails (and nothing should be
/// changed then) when the record cannot be kept.
pub fn record(change: Change) -> Result<()> {
    let dir = dir();
    let _lock = lock_in(dir)?;
    record_locked(dir, change)
}

pub(crate) fn record_locked(dir: &Path, change: Change) -> Result<()> {
    let mut own = relock(&OWN);
    own.push(change);
    if let Err(e) = persist(dir, &own) {
        own.pop();
        return Err(e);
    }
    Ok(())
}

/// Forgets a change that was undone (or never made).
pub fn forget(change: &Change) {
    let dir = dir();
    if let Ok(_lock) = lock_in(dir) {
        forget_locked(dir, change);
    }
}

pub(crate) fn forget_locked(dir: &Path, change: &Change) {
    let mut own = relock(&OWN);
    if let Some(i) = own.iter().position(|c| c == change) {
        own.remove(i);
        // A journal that cannot be rewritten keeps the change: the next
        // start then finds it undone already, which recovery tolerates.
        let _ = persist(dir, &own);
    }
}

/// Every `<prefix>*.json` of `dir` that parses as a `T` (others are
/// someone else's, or half-written by a process killed mid-rename).
fn read_records<T: serde::de::DeserializeOwned>(
    dir: &Path,
    prefix: &str,
    limit: u64,
) -> Vec<(PathBuf, T)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(prefix) && name.ends_with(".json")) {
            continue;
        }
        let path = entry.path();
        if let Ok(bytes) = crate::file::read_bounded(&path, limit) {
            if let Ok(record) = serde_json::from_slice::<T>(&bytes) {
                out.push((path, record));
            }
        }
    }
    out
}

pub(super) fn read_journals(dir: &Path) -> Vec<(PathBuf, JournalFile)> {
    read_records(dir, "journal-", 1 << 20)
}

pub(crate) fn read_mount_records(dir: &Path) -> Vec<(PathBuf, MountRecord)> {
    read_records(dir, "mount-", 1 << 16)
}

/// Whether a live process other than this one records using the mount.
pub(crate) fn mount_used_by_others(dir: &Path, mount_id: u64) -> bool {
    let me = std::process::id();
    read_journals(dir).iter().any(|(_, j)| {
        j.pid != me
            && alive(j.pid, j.start_time)
            && j.changes.contains(&Change::UsesMount { mount_id })
    })
}

/// The pid an instance name was made with (`xvmm-123`, `xperf-45-rawtest`).
pub fn instance_pid(name: &str) -> Option<u32> {
    let rest = INSTANCE_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))?;
    let digits: &str = &rest[..rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len())];
    let after = &rest[digits.len()..];
    if digits.is_empty() || !(after.is_empty() || after.starts_with('-')) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::undo::{describe_changes, recover_orphans_in};
    use super::*;

    #[test]
    fn instance_names_give_their_pid() {
        assert_eq!(instance_pid("xvmm-123"), Some(123));
        assert_eq!(instance_pid("xperf-45-rawtest"), Some(45));
        assert_eq!(instance_pid("xvmm-"), None);
        assert_eq!(instance_pid("xvmm-12x"), None);
        assert_eq!(instance_pid("other-12"), None);
        assert_eq!(instance_pid("xvmmm-12"), None);
    }

    #[test]
    fn start_time_tells_a_live_process_from_a_reused_pid() {
        let me = std::process::id();
        let start = start_time(me).expect("own start time");
        assert!(alive(me, start));
        assert!(
            !alive(me, start + 1),
            "another start time is another process"
        );
        assert!(!alive(u32::MAX - 1, 0));
    }

    #[test]
    fn a_journal_round_trips_and_names_its_changes() {
        let j = JournalFile {
            tool: "xperf".into(),
            pid: 7,
            start_time: 9,
            changes: vec![
                Change::UsesMount { mount_id: 31 },
                Change::Instance {
                    name: "xperf-7".into(),
                },
                Change::DynamicEvent {
                    event: "xperf/peek".into(),
                },
                Change::Value {
                    path: "/proc/sys/debug/kprobes-optimization".into(),
                    before: "1".into(),
                },
            ],
        };
        let text = serde_json::to_string(&j).unwrap();
        assert!(text.contains(r#""change":"dynamic_event""#), "{text}");
        assert_eq!(serde_json::from_str::<JournalFile>(&text).unwrap(), j);
        let mut done = vec![
            "removed tracefs instance xperf-7".to_string(),
            "removed dynamic event xperf/peek".to_string(),
            "/proc/sys/debug/kprobes-optimization back to 1".to_string(),
            "removed tracefs instance xvmm-8".to_string(),
        ];
        let mine = describe_changes(&j.changes, &mut done);
        assert_eq!(mine.len(), 3);
        assert_eq!(done, ["removed tracefs instance xvmm-8"]);
    }

    /// A journal of a process that no longer exists is undone: here its
    /// one change is a value in a plain file, so no tracefs is needed.
    #[test]
    fn a_dead_process_journal_is_undone_and_removed() {
        let dir = std::env::temp_dir().join(format!("xvmm-journal-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let value = dir.join("value");
        fs::write(&value, "0").unwrap();
        // A child that exits at once gives a pid that is surely dead.
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut child = child;
        child.wait().unwrap();
        let dead = JournalFile {
            tool: "xperf".into(),
            pid,
            start_time: 1,
            changes: vec![Change::Value {
                path: value.clone(),
                before: "1".into(),
            }],
        };
        fs::write(
            dir.join(format!("journal-{pid}.json")),
            serde_json::to_vec(&dead).unwrap(),
        )
        .unwrap();
        // A live process's journal (this one's) is left alone.
        let live = JournalFile {
            pid: std::process::id(),
            start_time: start_time(std::process::id()).unwrap(),
            ..dead.clone()
        };
        let live_path = dir.join(format!("journal-{}.json", live.pid));
        fs::write(&live_path, serde_json::to_vec(&live).unwrap()).unwrap();
        let recovery = recover_orphans_in(&dir);
        assert!(recovery.failed.is_empty(), "{recovery:?}");
        assert_eq!(fs::read_to_string(&value).unwrap(), "1");
        assert!(!dir.join(format!("journal-{pid}.json")).exists());
        assert!(live_path.exists(), "a live process's journal stays");
        let line = recovery
            .restored
            .iter()
            .find(|l| l.contains(&format!("pid {pid}")))
            .unwrap_or_else(|| panic!("{recovery:?}"));
        assert!(line.contains("back to 1"), "{line}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
