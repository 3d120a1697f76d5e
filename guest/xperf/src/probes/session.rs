//! The host tracing state `xperf probes` touches, and how it is put back.
//!
//! Everything that can be private is: the ring buffer, clock, event switches,
//! function-tracer filter and tracer live in xperf's own tracefs instance
//! (`instances/xperf-<pid>`). What the kernel only has globally is recorded
//! when changed and restored exactly: the dynamic events xperf created (group
//! [`GROUP`]), `/proc/sys/debug/kprobes-optimization`, and the tracefs and
//! debugfs mounts xperf made itself. [`Session::restore`] undoes all of it; it
//! runs on every way out (an error, a signal, a panic unwinding through the
//! guard's `Drop`), is idempotent, and each step is bounded (single writes).

use super::parse;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The dynamic-event group of every probe xperf creates.
pub const GROUP: &str = "xperf";
/// Where tracefs is looked for, in order; xperf mounts it at the first.
const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
const DEBUGFS_DIR: &str = "/sys/kernel/debug";
const OPTIMIZATION_SYSCTL: &str = "/proc/sys/debug/kprobes-optimization";
/// Upper bound for any tracefs/procfs file xperf reads.
pub const READ_LIMIT: u64 = 256 << 20;

/// A file system xperf mounted itself; unmounted again on drop.
#[derive(Debug)]
struct OwnMount(PathBuf);

impl OwnMount {
    fn mount(fstype: &str, dir: &str) -> io::Result<OwnMount> {
        let (src, target, kind) = (c"nodev", cstring(dir)?, cstring(fstype)?);
        // SAFETY: mount(2) with NUL-terminated strings and no data.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnMount(PathBuf::from(dir)))
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        if let Ok(path) = cstring(&self.0.to_string_lossy()) {
            // SAFETY: umount2 of the path we mounted; a failure (EBUSY if
            // someone started using it meanwhile) leaves it mounted, harmlessly.
            unsafe { libc::umount2(path.as_ptr(), 0) };
        }
    }
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

/// Reads a kernel file whole (tracefs files report size 0; the bound keeps a
/// runaway file from exhausting memory).
pub fn read_text(path: &Path) -> io::Result<String> {
    let bytes = xvmm_results::file::read_bounded(path, READ_LIMIT)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Replaces the content of a control file with `value` in one write.
pub fn write_text(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).truncate(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// Appends one command to a command file (`dynamic_events`): never
/// truncates, since truncating `dynamic_events` deletes every dynamic event
/// of the host.
fn append_text(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().append(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// Finds tracefs: `explicit` (must be one), else a mounted one, else mounts
/// it at /sys/kernel/tracing.
fn locate_tracefs(explicit: Option<&Path>) -> Result<(PathBuf, Option<OwnMount>)> {
    let is_tracefs = |p: &Path| p.join("instances").is_dir() && p.join("trace").is_file();
    if let Some(dir) = explicit {
        if is_tracefs(dir) {
            return Ok((dir.to_path_buf(), None));
        }
        return Err(Error::Tracing(format!(
            "no tracefs at {} (no instances/ and trace there)",
            dir.display()
        )));
    }
    for dir in TRACEFS_DIRS {
        if is_tracefs(Path::new(dir)) {
            return Ok((PathBuf::from(dir), None));
        }
    }
    let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("tracefs"))
    {
        return Err(Error::Tracing(
            "this kernel has no tracefs (CONFIG_TRACING off)".into(),
        ));
    }
    match OwnMount::mount("tracefs", TRACEFS_DIRS[0]) {
        Ok(m) => Ok((PathBuf::from(TRACEFS_DIRS[0]), Some(m))),
        Err(e) => Err(Error::Tracing(format!(
            "tracefs is not mounted and mounting it at {} failed: {e}",
            TRACEFS_DIRS[0]
        ))),
    }
}

/// Why the kernel refused a dynamic event, in one line.
fn creation_error(e: &io::Error, log_reason: Option<String>) -> String {
    let what = match e.raw_os_error() {
        Some(libc::EILSEQ) => "not an instruction boundary".to_string(),
        Some(libc::EEXIST) => "an event of that name exists already".to_string(),
        Some(libc::ENOENT) => "no such probe point".to_string(),
        _ => e.to_string(),
    };
    match log_reason {
        Some(r) if !what.contains(&r) => format!("{what} (error_log: {r})"),
        _ => what,
    }
}

/// xperf's tracing session: its instance, the events it created, the
/// global settings it changed.
#[derive(Debug)]
pub struct Session {
    root: PathBuf,
    instance: PathBuf,
    instance_made: bool,
    created: Vec<String>,
    /// The sysctl's text before xperf first wrote it.
    optimization_before: Option<String>,
    debugfs: Option<PathBuf>,
    debugfs_mount: Option<OwnMount>,
    /// Declared last: dropped after [`Drop::drop`] has emptied the mount.
    tracefs_mount: Option<OwnMount>,
}

impl Session {
    /// Finds (or mounts) tracefs, refuses to start when group [`GROUP`]
    /// already has events (someone else's, or a killed xperf's), and creates
    /// the private instance. Nothing is changed when it fails.
    pub fn open(explicit: Option<&Path>) -> Result<Session> {
        let (root, tracefs_mount) = locate_tracefs(explicit)?;
        let dynamic = root.join("dynamic_events");
        if dynamic.is_file() {
            let text = read_text(&dynamic)
                .map_err(|e| Error::Tracing(format!("reading {}: {e}", dynamic.display())))?;
            if let Some(name) = parse::dynamic_events_of(&text, GROUP).first() {
                return Err(Error::Tracing(format!(
                    "a dynamic event {GROUP}/{name} exists already (left by someone else or a killed xperf); \
                     remove it with: echo '-:{GROUP}/{name}' >> {}",
                    dynamic.display()
                )));
            }
        }
        let instance = root
            .join("instances")
            .join(format!("xperf-{}", std::process::id()));
        fs::create_dir(&instance).map_err(|e| {
            Error::Tracing(format!(
                "creating the tracefs instance {}: {e}",
                instance.display()
            ))
        })?;
        Ok(Session {
            root,
            instance,
            instance_made: true,
            created: Vec::new(),
            optimization_before: None,
            debugfs: None,
            debugfs_mount: None,
            tracefs_mount,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A path inside xperf's instance.
    pub fn in_instance(&self, rel: &str) -> PathBuf {
        self.instance.join(rel)
    }

    /// Writes a control file of the instance.
    pub fn set(&self, rel: &str, value: &str) -> Result<()> {
        let path = self.in_instance(rel);
        write_text(&path, value)
            .map_err(|e| Error::Tracing(format!("writing {value:?} to {}: {e}", path.display())))
    }

    /// Whether the kernel offers dynamic events at all.
    pub fn has_dynamic_events(&self) -> bool {
        self.root.join("dynamic_events").is_file()
    }

    /// Creates the dynamic event `definition` (e.g. `p:xperf/NAME SYM+5`),
    /// remembering it for removal. The error names the kernel's reason.
    pub fn create_event(
        &mut self,
        name: &str,
        definition: &str,
    ) -> std::result::Result<(), String> {
        let path = self.root.join("dynamic_events");
        match append_text(&path, &format!("{definition}\n")) {
            Ok(()) => {
                self.created.push(name.to_string());
                Ok(())
            }
            Err(e) => {
                let log = read_text(&self.root.join("error_log")).unwrap_or_default();
                Err(creation_error(
                    &e,
                    parse::error_log_reason(&log, definition),
                ))
            }
        }
    }

    /// Deletes a dynamic event this session created.
    pub fn remove_event(&mut self, name: &str) -> Result<()> {
        let Some(i) = self.created.iter().position(|n| n == name) else {
            return Ok(());
        };
        // Off everywhere first: an enabled event cannot be deleted.
        let _ = write_text(
            &self.in_instance(&format!("events/{GROUP}/{name}/enable")),
            "0",
        );
        append_text(
            &self.root.join("dynamic_events"),
            &format!("-:{GROUP}/{name}\n"),
        )
        .map_err(|e| Error::Tracing(format!("removing the dynamic event {GROUP}/{name}: {e}")))?;
        self.created.remove(i);
        Ok(())
    }

    /// The current `kprobes-optimization` value, if the kernel has OPTPROBES.
    pub fn optimization(&self) -> Option<bool> {
        let text = fs::read_to_string(OPTIMIZATION_SYSCTL).ok()?;
        Some(text.trim() == "1")
    }

    /// Sets `kprobes-optimization` (the old value is restored at the end).
    /// Writing 0 returns once every probe is back to int3; writing 1 only
    /// queues the optimization (the caller waits for it).
    pub fn set_optimization(&mut self, on: bool) -> Result<()> {
        let path = Path::new(OPTIMIZATION_SYSCTL);
        if self.optimization_before.is_none() {
            let before = fs::read_to_string(path)
                .map_err(|e| Error::Tracing(format!("reading {OPTIMIZATION_SYSCTL}: {e}")))?;
            self.optimization_before = Some(before.trim().to_string());
        }
        write_text(path, if on { "1" } else { "0" })
            .map_err(|e| Error::Tracing(format!("writing {OPTIMIZATION_SYSCTL}: {e}")))
    }

    /// A debugfs file (`kprobes/list`, `kprobes/blacklist`), mounting
    /// debugfs when it is not (it is unmounted again at the end). `None`
    /// without debugfs.
    pub fn debugfs(&mut self, rel: &str) -> Option<String> {
        if self.debugfs.is_none() {
            let dir = Path::new(DEBUGFS_DIR);
            if !dir.join("kprobes").is_dir() && dir.is_dir() {
                self.debugfs_mount = OwnMount::mount("debugfs", DEBUGFS_DIR).ok();
            }
            self.debugfs = Some(dir.to_path_buf());
        }
        self.debugfs
            .as_deref()
            .and_then(|d| read_text(&d.join(rel)).ok())
    }

    /// Puts everything back; returns what could not be. Safe to call twice.
    pub fn restore(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        if self.instance_made {
            // Switch everything in the instance off first: an event enabled
            // anywhere cannot be deleted.
            let _ = write_text(&self.instance.join("tracing_on"), "0");
            let _ = write_text(&self.instance.join("current_tracer"), "nop");
            let _ = write_text(&self.instance.join("events/enable"), "0");
            let _ = write_text(&self.instance.join("set_ftrace_filter"), "");
            match fs::remove_dir(&self.instance) {
                Ok(()) => self.instance_made = false,
                Err(e) => failed.push(format!(
                    "removing the tracefs instance {}: {e}",
                    self.instance.display()
                )),
            }
        }
        let dynamic = self.root.join("dynamic_events");
        let mut kept = Vec::new();
        for name in self.created.drain(..) {
            if let Err(e) = append_text(&dynamic, &format!("-:{GROUP}/{name}\n")) {
                failed.push(format!("removing the dynamic event {GROUP}/{name}: {e}"));
                kept.push(name);
            }
        }
        self.created = kept;
        if let Some(before) = self.optimization_before.take() {
            if let Err(e) = write_text(Path::new(OPTIMIZATION_SYSCTL), &before) {
                failed.push(format!("restoring {OPTIMIZATION_SYSCTL} to {before}: {e}"));
                self.optimization_before = Some(before);
            }
        }
        self.debugfs_mount = None;
        failed
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.restore();
        self.tracefs_mount = None;
    }
}

/// Files of the tracefs root that a snapshot holds.
const SNAPSHOT_FILES: [&str; 9] = [
    "dynamic_events",
    "current_tracer",
    "set_event",
    "set_event_pid",
    "tracing_on",
    "trace_clock",
    "set_ftrace_filter",
    "set_ftrace_pid",
    "enabled_functions",
];

/// One line for a snapshot: the file's text with line breaks shown, or why
/// it cannot be read.
fn snapshot_value(path: &Path) -> String {
    match read_text(path) {
        Ok(text) => text.trim_end().replace('\n', " | "),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// The host tracing state `xperf probes` could touch, read without changing
/// anything (nothing is mounted): tracefs and debugfs mounts, the global
/// tracefs files, the instances, the kprobes list and kprobes-optimization.
/// Two snapshots around a run must be equal.
pub fn snapshot(explicit: Option<&Path>) -> Vec<(String, String)> {
    let mut items = Vec::new();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let fstype = tail.split_whitespace().next()?;
            let point = head.split_whitespace().nth(4)?;
            matches!(fstype, "tracefs" | "debugfs").then(|| format!("{fstype}@{point}"))
        })
        .collect();
    mounts.sort();
    items.push(("mounts".to_string(), mounts.join(" ")));
    let root = explicit.map(Path::to_path_buf).or_else(|| {
        TRACEFS_DIRS
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("instances").is_dir())
    });
    if let Some(root) = root {
        for file in SNAPSHOT_FILES {
            items.push((file.to_string(), snapshot_value(&root.join(file))));
        }
        let mut instances: Vec<String> = fs::read_dir(root.join("instances"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        instances.sort();
        items.push(("instances".to_string(), instances.join(" ")));
    }
    items.push((
        "kprobes-optimization".to_string(),
        snapshot_value(Path::new(OPTIMIZATION_SYSCTL)),
    ));
    let list = Path::new(DEBUGFS_DIR).join("kprobes/list");
    if list.is_file() {
        items.push(("kprobes/list".to_string(), snapshot_value(&list)));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_errors_name_the_reason_once() {
        let eilseq = io::Error::from_raw_os_error(libc::EILSEQ);
        assert_eq!(
            creation_error(
                &eilseq,
                Some("Probe point is not an instruction boundary".into())
            ),
            "not an instruction boundary (error_log: Probe point is not an instruction boundary)"
        );
        let einval = io::Error::from_raw_os_error(libc::EINVAL);
        let text = creation_error(&einval, Some("Invalid probe point".into()));
        assert!(text.ends_with("(error_log: Invalid probe point)"), "{text}");
        assert_eq!(
            creation_error(&io::Error::from_raw_os_error(libc::EEXIST), None),
            "an event of that name exists already"
        );
    }

    #[test]
    fn a_snapshot_names_the_mounts_and_the_sysctl() {
        let names: Vec<String> = snapshot(None).into_iter().map(|(k, _)| k).collect();
        assert_eq!(names[0], "mounts");
        assert!(names.contains(&"kprobes-optimization".to_string()));
        assert_eq!(snapshot(None), snapshot(None), "reading changes nothing");
    }

    #[test]
    fn an_explicit_directory_that_is_not_tracefs_is_refused() {
        let err = locate_tracefs(Some(Path::new("/proc/self"))).unwrap_err();
        assert!(
            err.to_string().contains("no tracefs at /proc/self"),
            "{err}"
        );
    }
}
