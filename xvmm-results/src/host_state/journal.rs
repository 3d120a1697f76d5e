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
//! [`recover_orphans`] (the next start of either tool) undoes the journals
//! of processes that no longer exist (killed with SIGKILL, or aborted on a
//! panic: the release profile has `panic = "abort"`, so no destructor ran),
//! and removes tracefs instances named after a dead xvmm or xperf process;
//! [`undo_own`] does the same for the running process (its panic hook).
//! All of it runs under one lock: a mutex within the process and `flock` on
//! `<dir>/lock` across processes.

use super::mounts::{self, FsKind};
use super::namespace::in_private_namespace;
use super::{err, Result};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

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
struct JournalFile {
    tool: String,
    pid: u32,
    start_time: u64,
    changes: Vec<Change>,
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

/// What a recovery did: one line per process whose leftovers were undone,
/// and what could not be undone.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub restored: Vec<String>,
    pub failed: Vec<String>,
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
static OWN: Mutex<Vec<Change>> = Mutex::new(Vec::new());
/// Serialises the journal's users within the process (flock only excludes
/// other open files, and each holder opens its own).
static IN_PROCESS: Mutex<()> = Mutex::new(());

/// The cross-process lock, held while it lives.
pub(crate) struct Lock {
    _guard: Option<MutexGuard<'static, ()>>,
    _file: Option<File>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
                "cannot keep the record of host changes in {}: {e} (run as root)",
                dir.display()
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

fn alive(pid: u32, start: u64) -> bool {
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
fn persist(dir: &Path, changes: &[Change]) -> Result<()> {
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

fn read_journals(dir: &Path) -> Vec<(PathBuf, JournalFile)> {
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

fn write_value(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).truncate(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn append_value(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().append(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// Switches an instance off and removes it; gone already counts as done.
fn remove_instance(root: &Path, name: &str) -> std::result::Result<(), String> {
    let dir = root.join("instances").join(name);
    if !dir.exists() {
        return Ok(());
    }
    let _ = write_value(&dir.join("tracing_on"), "0");
    let _ = write_value(&dir.join("current_tracer"), "nop");
    let _ = write_value(&dir.join("events/enable"), "0");
    let _ = write_value(&dir.join("set_ftrace_filter"), "");
    // rmdir of a busy instance fails at once with EBUSY; a reader that is
    // closing its files may need a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fs::remove_dir(&dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("removing the tracefs instance {name}: {e}")),
        }
    }
}

/// Deletes a dynamic event; one that does not exist counts as done.
fn remove_dynamic_event(root: &Path, event: &str) -> std::result::Result<(), String> {
    let _ = write_value(&root.join("events").join(event).join("enable"), "0");
    if !root.join("events").join(event).exists() {
        return Ok(());
    }
    append_value(&root.join("dynamic_events"), &format!("-:{event}\n"))
        .map_err(|e| format!("removing the dynamic event {event}: {e}"))
}

/// Undoes the tracefs part of `changes` (instances before events: an event
/// enabled in an instance cannot be deleted), plus every instance named by
/// a dead process when `sweep` is set. Returns what was done and what failed.
fn undo_in_tracefs(root: &Path, changes: &[Change], sweep: bool) -> (Vec<String>, Vec<String>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for c in changes {
        if let Change::Instance { name } = c {
            match remove_instance(root, name) {
                Ok(()) => done.push(format!("removed tracefs instance {name}")),
                Err(e) => failed.push(e),
            }
        }
    }
    if sweep {
        for (name, pid) in dead_instances(root) {
            match remove_instance(root, &name) {
                Ok(()) => done.push(format!(
                    "removed tracefs instance {name} (its process {pid} no longer exists)"
                )),
                Err(e) => failed.push(e),
            }
        }
    }
    for c in changes {
        if let Change::DynamicEvent { event } = c {
            match remove_dynamic_event(root, event) {
                Ok(()) => done.push(format!("removed dynamic event {event}")),
                Err(e) => failed.push(e),
            }
        }
    }
    (done, failed)
}

/// Instances named after an xvmm or xperf process that no longer exists.
fn dead_instances(root: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root.join("instances"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = instance_pid(&name) {
            if !Path::new("/proc").join(pid.to_string()).exists() {
                out.push((name, pid));
            }
        }
    }
    out
}

/// Runs the tracefs part of an undo in a private mount namespace where
/// tracefs is mounted afresh: the host's mounts stay as they are whether
/// or not tracefs is mounted there.
fn undo_tracefs_privately(changes: &[Change], sweep: bool) -> (Vec<String>, Vec<String>) {
    let needs = sweep
        || changes
            .iter()
            .any(|c| matches!(c, Change::Instance { .. } | Change::DynamicEvent { .. }));
    if !needs {
        return (Vec::new(), Vec::new());
    }
    let result = in_private_namespace(|| match mounts::mount_private(FsKind::Tracefs) {
        Ok(root) => undo_in_tracefs(&root, changes, sweep),
        Err(e) => (Vec::new(), vec![e.to_string()]),
    });
    match result {
        Ok(r) => r,
        // Without CAP_SYS_ADMIN there is no namespace, and no way to undo
        // tracefs changes either; a sweep alone then finds nothing to say.
        Err(_) if !changes.iter().any(|c| !matches!(c, Change::Value { .. })) => {
            (Vec::new(), Vec::new())
        }
        Err(e) => (
            Vec::new(),
            vec![format!("cannot reach tracefs to undo changes: {e}")],
        ),
    }
}

/// Undoes a journal's changes; returns what was done and what failed.
fn undo_changes(changes: &[Change], sweep: bool) -> (Vec<String>, Vec<String>) {
    let (mut done, mut failed) = undo_tracefs_privately(changes, sweep);
    for c in changes {
        if let Change::Value { path, before } = c {
            match write_value(path, before) {
                Ok(()) => done.push(format!("{} back to {before}", path.display())),
                Err(e) => failed.push(format!("restoring {} to {before}: {e}", path.display())),
            }
        }
    }
    (done, failed)
}

/// Unmounts the mounts our processes made that no live process uses any
/// more (only those made in this thread's mount namespace can be).
fn release_unused_mounts(dir: &Path) -> (Vec<(u32, String)>, Vec<String>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    let namespace = mounts::namespace_id().ok();
    for (path, record) in read_mount_records(dir) {
        if mount_used_by_others(dir, record.mount_id) || mounts::in_use_here(record.mount_id) {
            continue;
        }
        if Some(record.namespace) != namespace {
            // Made in a namespace that is gone (a test's) or not ours: the
            // mount cannot outlive its namespace, so only the record is left.
            if !mounts::namespace_exists(record.namespace) {
                let _ = fs::remove_file(&path);
            }
            continue;
        }
        match mounts::unmount_recorded(&record) {
            Ok(true) => {
                done.push((
                    record.pid,
                    format!(
                        "unmounted {} at {}",
                        record.kind.fstype(),
                        record.point.display()
                    ),
                ));
                let _ = fs::remove_file(&path);
            }
            Ok(false) => {
                let _ = fs::remove_file(&path);
            }
            Err(e) => failed.push(e),
        }
    }
    (done, failed)
}

/// Undoes what processes that no longer exist left behind (their journals,
/// and tracefs instances named after them), and unmounts what our processes
/// mounted that nobody uses. One line per process in `restored`.
pub fn recover_orphans() -> Recovery {
    recover_orphans_in(dir())
}

pub(crate) fn recover_orphans_in(dir: &Path) -> Recovery {
    let mut recovery = Recovery::default();
    if !dir.is_dir() && !sweep_wanted() {
        return recovery;
    }
    let lock = match lock_in(dir) {
        Ok(l) => l,
        // Not root: nothing of ours can have been changed by this user.
        Err(_) => return recovery,
    };
    let dead: Vec<(PathBuf, JournalFile)> = read_journals(dir)
        .into_iter()
        .filter(|(_, j)| !alive(j.pid, j.start_time))
        .collect();
    let all: Vec<Change> = dead.iter().flat_map(|(_, j)| j.changes.clone()).collect();
    let (done, failed) = undo_changes(&all, sweep_wanted());
    recovery.failed.extend(failed);
    let mut leftover = done;
    // The dead journals first: a mount they used is then nobody's.
    if recovery.failed.is_empty() {
        for (path, _) in &dead {
            let _ = fs::remove_file(path);
        }
    }
    let (mut unmounted, unmount_failed) = release_unused_mounts(dir);
    recovery.failed.extend(unmount_failed);
    for (_, j) in &dead {
        let mut mine: Vec<String> = describe_changes(&j.changes, &mut leftover);
        mine.extend(
            unmounted
                .iter()
                .filter(|(pid, _)| *pid == j.pid)
                .map(|(_, line)| line.clone()),
        );
        unmounted.retain(|(pid, _)| *pid != j.pid);
        if !mine.is_empty() {
            recovery.restored.push(format!(
                "restored what {} (pid {}, no longer running) left: {}",
                j.tool,
                j.pid,
                mine.join(", ")
            ));
        }
    }
    leftover.extend(unmounted.into_iter().map(|(_, line)| line));
    recovery.restored.extend(leftover);
    drop(lock);
    recovery
}

/// The lines of `done` that belong to `changes`, taken out of `done`.
fn describe_changes(changes: &[Change], done: &mut Vec<String>) -> Vec<String> {
    let mut mine = Vec::new();
    for c in changes {
        let key = match c {
            Change::Instance { name } => format!("removed tracefs instance {name}"),
            Change::DynamicEvent { event } => format!("removed dynamic event {event}"),
            Change::Value { path, before } => format!("{} back to {before}", path.display()),
            Change::UsesMount { .. } => continue,
        };
        if let Some(i) = done.iter().position(|d| *d == key) {
            mine.push(done.remove(i));
        }
    }
    mine
}

/// Whether to look for instances of dead processes: only as root (nobody
/// else can have made or remove them).
fn sweep_wanted() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Undoes everything this process recorded (for a panic hook, before the
/// process aborts and no destructor runs). Returns what failed.
pub fn undo_own() -> Vec<String> {
    let dir = dir();
    // The panicking thread may hold the in-process lock itself: wait a
    // little, then go on without it rather than deadlock.
    let deadline = Instant::now() + Duration::from_millis(200);
    let guard = loop {
        match IN_PROCESS.try_lock() {
            Ok(g) => break Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let changes = std::mem::take(&mut *relock(&OWN));
    let (_, mut failed) = undo_changes(&changes, false);
    mounts::forget_all_uses();
    if guard.is_some() {
        let (_, unmount_failed) = release_unused_mounts(dir);
        failed.extend(unmount_failed);
    }
    let _ = persist(dir, &[]);
    drop(guard);
    failed
}

/// Installs a panic hook that, after the usual message, undoes what the
/// process changed on the host (for binaries built with `panic = "abort"`).
pub fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        for failure in undo_own() {
            // The hook runs as the process dies: stderr is all there is.
            let _ = writeln!(io::stderr(), "host state not restored: {failure}");
        }
    }));
}

#[cfg(test)]
mod tests {
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
