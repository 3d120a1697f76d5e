//! The host's tracing state, read without changing anything: what the suite
//! records at its start and compares at its end, and what `xperf probes
//! --show-state` prints.
//!
//! tracefs and debugfs are read in a private mount namespace where they are
//! mounted afresh (see [`super::namespace`]), so a snapshot sees the
//! instances, events and tracers whether or not the host has them mounted,
//! and mounts nothing the host could see. Without the privilege for that, a
//! mounted tracefs is read where it is.

use super::journal;
use super::mounts::{self, FsKind, MountEntry};
use super::namespace::in_private_namespace;
use std::fs;
use std::path::{Path, PathBuf};

/// The global files of the tracefs root a snapshot holds.
pub const TRACEFS_FILES: [&str; 12] = [
    "tracing_on",
    "current_tracer",
    "trace_clock",
    "set_event",
    "set_event_pid",
    "set_ftrace_filter",
    "set_ftrace_notrace",
    "set_ftrace_pid",
    "dynamic_events",
    "kprobe_events",
    "uprobe_events",
    "enabled_functions",
];

/// The sysctl `xperf probes` changes.
pub const KPROBES_OPTIMIZATION: &str = "/proc/sys/debug/kprobes-optimization";

/// Upper bound on a file a snapshot reads.
const READ_LIMIT: u64 = 16 << 20;

/// One line for a snapshot: the file's text with line breaks shown, or why
/// it cannot be read (a file the kernel lacks reads "absent").
fn value_of(path: &Path) -> String {
    match crate::file::read_bounded(path, READ_LIMIT) {
        Ok(bytes) => String::from_utf8_lossy(&bytes)
            .trim_end()
            .replace('\n', " | "),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "absent".into(),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// The tracefs and debugfs mounts of a mount table, sorted.
pub fn tracing_mounts(table: &[MountEntry]) -> String {
    let mut mounts: Vec<String> = table
        .iter()
        .filter(|m| m.fstype == "tracefs" || m.fstype == "debugfs")
        .map(|m| format!("{}@{}", m.fstype, m.point.display()))
        .collect();
    mounts.sort();
    mounts.join(" ")
}

fn names_in(dir: &Path, keep: impl Fn(&str) -> bool) -> String {
    let mut names: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names.join(" ")
}

/// The files of a tracefs root (and debugfs's kprobe list, when given).
fn read_tracing(tracefs: &Path, debugfs: Option<&Path>) -> Vec<(String, String)> {
    let mut items: Vec<(String, String)> = TRACEFS_FILES
        .iter()
        .map(|f| (f.to_string(), value_of(&tracefs.join(f))))
        .collect();
    items.push((
        "instances".into(),
        names_in(&tracefs.join("instances"), |_| true),
    ));
    if let Some(d) = debugfs {
        items.push(("kprobes/list".into(), value_of(&d.join("kprobes/list"))));
    }
    items
}

/// tracefs and debugfs read in a private namespace, mounted there afresh.
fn read_privately() -> Option<Vec<(String, String)>> {
    in_private_namespace(|| {
        let tracefs = mounts::mount_private(FsKind::Tracefs).ok()?;
        let debugfs = mounts::mount_private(FsKind::Debugfs).ok();
        Some(read_tracing(&tracefs, debugfs.as_deref()))
    })
    .ok()
    .flatten()
}

/// The names of the tracefs instances (global kernel objects), read in a
/// private namespace; `None` without the privilege to make one.
pub fn instance_names() -> Option<Vec<String>> {
    in_private_namespace(|| {
        let root = mounts::mount_private(FsKind::Tracefs).ok()?;
        let names = names_in(&root.join("instances"), |_| true);
        Some(names.split_whitespace().map(String::from).collect())
    })
    .ok()
    .flatten()
}

/// Reads the host's tracing state: its tracefs and debugfs mounts, the
/// global tracing files, the instances, the kprobe list,
/// `kprobes-optimization`, and the journals of xvmm and xperf processes
/// (see [`journal`]). `explicit` reads tracefs there instead. Two snapshots
/// of an unchanged host are equal.
pub fn snapshot(explicit: Option<&Path>) -> Vec<(String, String)> {
    let table = mounts::mount_table().unwrap_or_default();
    let mut items = vec![("mounts".to_string(), tracing_mounts(&table))];
    let tracing = match explicit {
        Some(dir) => Some(read_tracing(dir, None)),
        None => read_privately().or_else(|| {
            // No private namespace (not root): a mounted tracefs, if any.
            let root: Option<PathBuf> = table
                .iter()
                .find(|m| m.fstype == "tracefs")
                .map(|m| m.point.clone());
            root.map(|r| read_tracing(&r, None))
        }),
    };
    items.extend(tracing.unwrap_or_default());
    items.push((
        "kprobes-optimization".into(),
        value_of(Path::new(KPROBES_OPTIMIZATION)),
    ));
    items.push(("journals".into(), names_in(journal::dir(), |n| n != "lock")));
    items
}

/// The items of `after` that differ from `before`, as lines
/// `NAME: BEFORE -> AFTER` (an item one side lacks reads "missing").
pub fn differences(before: &[(String, String)], after: &[(String, String)]) -> Vec<String> {
    let mut names: Vec<&String> = before.iter().chain(after).map(|(k, _)| k).collect();
    names.sort();
    names.dedup();
    let find = |side: &[(String, String)], k: &str| {
        side.iter()
            .find(|(n, _)| n == k)
            .map_or("missing".to_string(), |(_, v)| v.clone())
    };
    names
        .into_iter()
        .filter_map(|k| {
            let (b, a) = (find(before, k), find(after, k));
            (b != a).then(|| format!("{k}: {b:?} -> {a:?}"))
        })
        .collect()
}

/// A snapshot as text, one `NAME\tVALUE` line per item (values hold no
/// line breaks), and back.
pub fn to_text(items: &[(String, String)]) -> String {
    items.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect()
}

pub fn from_text(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_changes_nothing_and_sees_tracefs_unmounted_or_not() {
        let before = mounts::mount_table().unwrap();
        let a = snapshot(None);
        let b = snapshot(None);
        assert_eq!(mounts::mount_table().unwrap(), before, "nothing mounted");
        // Journals come and go with this binary's other tests.
        let stable = |s: &[(String, String)]| -> Vec<(String, String)> {
            s.iter().filter(|(k, _)| k != "journals").cloned().collect()
        };
        assert_eq!(differences(&stable(&a), &stable(&b)), Vec::<String>::new());
        let names: Vec<&str> = a.iter().map(|(k, _)| k.as_str()).collect();
        // Root reads tracefs in a private namespace even where the host
        // has none mounted (the suite runs as root).
        for want in [
            "mounts",
            "instances",
            "dynamic_events",
            "current_tracer",
            "kprobes-optimization",
            "journals",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }

    #[test]
    fn differences_name_each_changed_item() {
        let before = vec![
            ("mounts".to_string(), String::new()),
            ("instances".to_string(), "a".to_string()),
        ];
        let after = vec![
            (
                "mounts".to_string(),
                "tracefs@/sys/kernel/tracing".to_string(),
            ),
            ("instances".to_string(), "a".to_string()),
            ("journals".to_string(), "journal-5.json".to_string()),
        ];
        let d = differences(&before, &after);
        assert_eq!(
            d,
            [
                "journals: \"missing\" -> \"journal-5.json\"",
                "mounts: \"\" -> \"tracefs@/sys/kernel/tracing\"",
            ]
        );
        assert!(differences(&after, &after).is_empty());
        assert_eq!(from_text(&to_text(&after)), after);
    }
}
