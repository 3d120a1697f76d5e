//! Undoing what was recorded: a dead process's journal and the tracefs
//! instances named after it (`recover_orphans`, at every start of xvmm and
//! xperf), this process's own changes (`undo_own`, from the panic hook), and
//! the mounts nobody uses any more. It reads the journal ([`super::journal`])
//! and unmounts through [`super::mounts`], so that neither of those needs
//! the other's undo half.

use super::journal::{
    alive, dir, instance_pid, lock_in, mount_used_by_others, persist, read_journals,
    read_mount_records, relock, Change, JournalFile, IN_PROCESS, OWN,
};
use super::mounts::{self, FsKind};
use super::namespace::in_private_namespace;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a recovery did: one line per process whose leftovers were undone,
/// and what could not be undone.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub restored: Vec<String>,
    pub failed: Vec<String>,
}

impl Recovery {
    /// One line for the terminal per thing undone or left, prefixed with
    /// `tool`, escaped (the names come from files on the host).
    pub fn messages(&self, tool: &str) -> Vec<String> {
        let restored = self
            .restored
            .iter()
            .map(|l| format!("{tool}: note: {}", crate::escape::visible(l)));
        let failed = self.failed.iter().map(|l| {
            format!(
                "{tool}: warning: host state an earlier run left is not restored: {}",
                crate::escape::visible(l)
            )
        });
        restored.chain(failed).collect()
    }
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
pub(super) fn describe_changes(changes: &[Change], done: &mut Vec<String>) -> Vec<String> {
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
/// `report` gets one line per change that could not be undone: the hook
/// runs as the process dies, so the application passes what writes it to
/// stderr (this library never prints).
pub fn install_panic_hook(report: fn(&str)) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        for failure in undo_own() {
            report(&format!("host state not restored: {failure}"));
        }
    }));
}
