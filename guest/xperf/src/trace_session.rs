//! The host tracing state `xperf probes` and `xperf workload` touch, and how it is put back.
//!
//! Everything that can be private is: the ring buffer, clock, event switches,
//! function-tracer filter and tracer live in xperf's own tracefs instance
//! (`instances/xperf-<pid>`). What the kernel only has globally is recorded
//! when changed and restored exactly: the dynamic events xperf created (group
//! [`GROUP`]) and `/proc/sys/debug/kprobes-optimization`. The tracefs and
//! debugfs mounts come from [`xvmm_host::host_state::mounts`], and every
//! change is written to its journal before it is made, so a killed xperf's
//! leftovers are undone by the next start of xperf or xvmm.
//! [`Session::restore`] undoes all of it; it runs on every way out (an
//! error, a signal, a panic unwinding through the guard's `Drop`; with
//! `panic = "abort"` the panic hook), is idempotent, and each step is
//! bounded (single writes).

use crate::error::{Error, Result};
use crate::tracefs_text as parse;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use xvmm_host::host_state::journal::{self, Change};
use xvmm_host::host_state::mounts::{FsKind, FsUse};
use xvmm_host::host_state::snapshot::KPROBES_OPTIMIZATION as OPTIMIZATION_SYSCTL;

/// The dynamic-event group of every probe xperf creates.
pub const GROUP: &str = "xperf";
/// Upper bound for any tracefs/procfs file xperf reads.
pub const READ_LIMIT: u64 = 256 << 20;

/// Reads a kernel file whole (tracefs files report size 0; the bound keeps a
/// runaway file from exhausting memory).
pub fn read_text(path: &Path) -> io::Result<String> {
    let bytes = xvmm_host::file::read_bounded(path, READ_LIMIT)?;
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

/// Refuses a non-root run of `command` in one line: tracefs instances,
/// dynamic events and the sysctls they touch are root's.
pub fn check_root(command: &str) -> Result<()> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::Tracing(format!(
            "{command} needs root: tracefs instances and dynamic events are root-only"
        )));
    }
    Ok(())
}

fn tracing_error(e: impl std::fmt::Display) -> Error {
    Error::Tracing(e.to_string())
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
    /// None until debugfs is first needed; Some(None) without debugfs.
    debugfs: Option<Option<FsUse>>,
    /// Declared last: released after [`Drop::drop`] has emptied it.
    _tracefs: FsUse,
}

fn instance_change(instance: &Path) -> Change {
    Change::Instance {
        name: instance
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

fn event_change(name: &str) -> Change {
    Change::DynamicEvent {
        event: format!("{GROUP}/{name}"),
    }
}

impl Session {
    /// Finds (or mounts) tracefs, refuses to start when group [`GROUP`]
    /// already has events (someone else's: a killed xperf's were undone at
    /// start), and creates the private instance. Nothing is changed when it
    /// fails.
    pub fn open(explicit: Option<&Path>) -> Result<Session> {
        let tracefs = FsUse::acquire(FsKind::Tracefs, explicit).map_err(tracing_error)?;
        let root = tracefs.root().to_path_buf();
        let dynamic = root.join("dynamic_events");
        if dynamic.is_file() {
            let text = read_text(&dynamic)
                .map_err(|e| Error::Tracing(format!("reading {}: {e}", dynamic.display())))?;
            if let Some(name) = parse::dynamic_events_of(&text, GROUP).first() {
                return Err(Error::Tracing(format!(
                    "a dynamic event {GROUP}/{name} exists already (someone else's); \
                     remove it with: echo '-:{GROUP}/{name}' >> {}",
                    dynamic.display()
                )));
            }
        }
        let instance = root
            .join("instances")
            .join(format!("xperf-{}", std::process::id()));
        let change = instance_change(&instance);
        journal::record(change.clone()).map_err(tracing_error)?;
        if let Err(e) = std::fs::create_dir(&instance) {
            journal::forget(&change);
            return Err(Error::Tracing(format!(
                "creating the tracefs instance {}: {e}",
                instance.display()
            )));
        }
        Ok(Session {
            root,
            instance,
            instance_made: true,
            created: Vec::new(),
            optimization_before: None,
            debugfs: None,
            _tracefs: tracefs,
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
        let change = event_change(name);
        journal::record(change.clone()).map_err(|e| e.to_string())?;
        let path = self.root.join("dynamic_events");
        match append_text(&path, &format!("{definition}\n")) {
            Ok(()) => {
                self.created.push(name.to_string());
                Ok(())
            }
            Err(e) => {
                journal::forget(&change);
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
        journal::forget(&event_change(name));
        Ok(())
    }

    /// The current `kprobes-optimization` value, if the kernel has OPTPROBES.
    pub fn optimization(&self) -> Option<bool> {
        let text = std::fs::read_to_string(OPTIMIZATION_SYSCTL).ok()?;
        Some(text.trim() == "1")
    }

    /// Sets `kprobes-optimization` (the old value is restored at the end).
    /// Writing 0 returns once every probe is back to int3; writing 1 only
    /// queues the optimization (the caller waits for it).
    pub fn set_optimization(&mut self, on: bool) -> Result<()> {
        let path = Path::new(OPTIMIZATION_SYSCTL);
        if self.optimization_before.is_none() {
            let before = std::fs::read_to_string(path)
                .map_err(|e| Error::Tracing(format!("reading {OPTIMIZATION_SYSCTL}: {e}")))?;
            let before = before.trim().to_string();
            journal::record(Change::Value {
                path: path.to_path_buf(),
                before: before.clone(),
            })
            .map_err(tracing_error)?;
            self.optimization_before = Some(before);
        }
        write_text(path, if on { "1" } else { "0" })
            .map_err(|e| Error::Tracing(format!("writing {OPTIMIZATION_SYSCTL}: {e}")))
    }

    /// A debugfs file (`kprobes/list`, `kprobes/blacklist`), mounting
    /// debugfs when it is not (it is unmounted again at the end). `None`
    /// without debugfs.
    pub fn debugfs(&mut self, rel: &str) -> Option<String> {
        let debugfs = self
            .debugfs
            .get_or_insert_with(|| FsUse::acquire(FsKind::Debugfs, None).ok());
        debugfs
            .as_ref()
            .and_then(|d| read_text(&d.root().join(rel)).ok())
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
            match std::fs::remove_dir(&self.instance) {
                Ok(()) => {
                    self.instance_made = false;
                    journal::forget(&instance_change(&self.instance));
                }
                Err(e) => failed.push(format!(
                    "removing the tracefs instance {}: {e}",
                    self.instance.display()
                )),
            }
        }
        let dynamic = self.root.join("dynamic_events");
        let mut kept = Vec::new();
        for name in self.created.drain(..) {
            match append_text(&dynamic, &format!("-:{GROUP}/{name}\n")) {
                Ok(()) => journal::forget(&event_change(&name)),
                Err(e) => {
                    failed.push(format!("removing the dynamic event {GROUP}/{name}: {e}"));
                    kept.push(name);
                }
            }
        }
        self.created = kept;
        if let Some(before) = self.optimization_before.take() {
            match write_text(Path::new(OPTIMIZATION_SYSCTL), &before) {
                Ok(()) => journal::forget(&Change::Value {
                    path: OPTIMIZATION_SYSCTL.into(),
                    before,
                }),
                Err(e) => {
                    failed.push(format!("restoring {OPTIMIZATION_SYSCTL} to {before}: {e}"));
                    self.optimization_before = Some(before);
                }
            }
        }
        self.debugfs = None;
        failed
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.restore();
    }
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
    fn an_explicit_directory_that_is_not_tracefs_is_refused() {
        let err = Session::open(Some(Path::new("/proc/self"))).unwrap_err();
        assert!(
            err.to_string().contains("no tracefs at /proc/self"),
            "{err}"
        );
    }
}
