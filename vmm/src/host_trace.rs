//! Host-side VM-exit timing from the `kvm:kvm_exit` / `kvm:kvm_entry` tracepoints.
//!
//! The tracer works in a private tracefs *instance* (`instances/xvmm-<pid>`): the
//! instance has its own ring buffer, clock, event switches and filters, so the
//! host's global tracing state is never modified. Removing the instance is the
//! whole restore; it happens on [`ExitTracer::finish`], on drop (also on the
//! Ctrl-C path, which returns normally through the run loop), and stale instances
//! of dead xvmm processes are removed on the next start.
//!
//! With the `x86-tsc` trace clock the timestamps are raw host TSC values, so an
//! exit's host-side cost is `kvm_entry.ts - kvm_exit.ts` in TSC ticks.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use xvmm_results::{HostExit, Stats};

const TRACEFS_MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
const INSTANCE_PREFIX: &str = "xvmm-";
/// Per-CPU ring buffer size for the instance; a reader thread drains it
/// continuously, so this only has to absorb scheduling hiccups.
const BUFFER_KB: u32 = 8192;

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    Exit { tid: i32, ts: u64, reason: String },
    Entry { tid: i32, ts: u64 },
}

/// Parses one line of the text trace format, e.g.
/// `xvmm-1234 [001] d..1. 5398127362712: kvm_exit: vcpu 0 reason io rip 0x...`.
/// Lines that are not kvm_exit/kvm_entry events (comments, lost-event notes) give `None`.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    let record = xvmm_results::tracefs::parse_record(line)?;
    let (tid, ts) = (record.pid, record.ts);
    if record.body.starts_with("kvm_entry:") {
        return Some(TraceEvent::Entry { tid, ts });
    }
    let rest = record.body.strip_prefix("kvm_exit: ")?;
    let mut words = rest.split_whitespace();
    let reason = loop {
        match words.next() {
            Some("reason") => break words.next()?.to_string(),
            Some(_) => continue,
            None => return None,
        }
    };
    Some(TraceEvent::Exit { tid, ts, reason })
}

/// Pairs each exit with the next entry of the same thread and groups the
/// exit-to-entry times by exit reason.
#[derive(Default, Debug)]
pub struct ExitAggregator {
    pending: BTreeMap<i32, (u64, String)>,
    by_reason: BTreeMap<String, Vec<u64>>,
    /// Exits never followed by an entry, or entries without an exit.
    pub unpaired: u64,
}

impl ExitAggregator {
    pub fn push(&mut self, event: TraceEvent) {
        match event {
            TraceEvent::Exit { tid, ts, reason } => {
                if self.pending.insert(tid, (ts, reason)).is_some() {
                    self.unpaired += 1;
                }
            }
            TraceEvent::Entry { tid, ts } => match self.pending.remove(&tid) {
                Some((exit_ts, reason)) if ts >= exit_ts => {
                    self.by_reason.entry(reason).or_default().push(ts - exit_ts)
                }
                _ => self.unpaired += 1,
            },
        }
    }

    /// Per-reason statistics, most frequent first.
    pub fn summary(&self) -> Vec<HostExit> {
        let mut exits: Vec<HostExit> = self
            .by_reason
            .iter()
            .map(|(reason, ticks)| HostExit {
                reason: reason.clone(),
                exit_to_entry: Stats::from_samples(ticks),
            })
            .collect();
        exits.sort_by_key(|e| std::cmp::Reverse(e.exit_to_entry.count));
        exits
    }
}

/// What a finished trace yields.
#[derive(Debug, Default)]
pub struct TraceSummary {
    pub exits: Vec<HostExit>,
    pub unpaired: u64,
    /// Events the kernel dropped because the buffer overflowed.
    pub lost: u64,
}

/// A running kvm_exit/kvm_entry trace of some threads.
pub struct ExitTracer {
    instance: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<std::io::Result<ExitAggregator>>>,
    /// Declared last: fields drop after `Drop::drop` has removed the instance,
    /// so an unmount of our own mount finds it empty.
    _mount: Option<OwnMount>,
}

/// tracefs mounted by xvmm itself: unmounted again when dropped, so the host
/// is left as it was found.
struct OwnMount;

impl Drop for OwnMount {
    fn drop(&mut self) {
        // SAFETY: umount2 with a static NUL-terminated path; failure (EBUSY if
        // someone else started using it meanwhile) leaves it mounted, harmlessly.
        unsafe { libc::umount2(TRACEFS_MOUNT_TARGET.as_ptr(), 0) };
    }
}

/// Where xvmm mounts tracefs when no mount exists.
const TRACEFS_MOUNT_TARGET: &std::ffi::CStr = c"/sys/kernel/tracing";

/// Finds the mounted tracefs, mounting it at /sys/kernel/tracing if needed
/// (then the returned guard unmounts it again).
fn tracefs_root() -> Result<(PathBuf, Option<OwnMount>)> {
    for root in TRACEFS_MOUNTS {
        if Path::new(root).join("instances").is_dir() {
            return Ok((PathBuf::from(root), None));
        }
    }
    let target = TRACEFS_MOUNT_TARGET;
    // SAFETY: plain mount(2) with static NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Error::Tracing(format!(
            "tracefs is not mounted and mounting it failed: {} (run as root)",
            std::io::Error::last_os_error()
        )));
    }
    Ok((PathBuf::from(TRACEFS_MOUNTS[0]), Some(OwnMount)))
}

fn write_file(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .map_err(|e| Error::Tracing(format!("writing {value:?} to {}: {e}", path.display())))
}

/// Removes instances left by xvmm processes that no longer exist (e.g. killed
/// with SIGKILL before they could clean up).
fn remove_stale_instances(root: &Path) {
    let Ok(entries) = fs::read_dir(root.join("instances")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(INSTANCE_PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

impl ExitTracer {
    /// Starts tracing kvm_exit/kvm_entry of the given thread ids (vCPU threads).
    pub fn start(tids: &[i32]) -> Result<ExitTracer> {
        let (root, mount) = tracefs_root()?;
        remove_stale_instances(&root);
        let instance = root
            .join("instances")
            .join(format!("{INSTANCE_PREFIX}{}", std::process::id()));
        if !root.join("events/kvm/kvm_exit").is_dir() {
            return Err(Error::Tracing(
                "the kvm:kvm_exit tracepoint is not available (kvm module not loaded?)".into(),
            ));
        }
        fs::create_dir(&instance).map_err(|e| {
            Error::Tracing(format!(
                "creating tracefs instance {}: {e}",
                instance.display()
            ))
        })?;
        // From here on the instance exists: the tracer owns it, and its Drop removes it.
        let mut tracer = ExitTracer {
            instance,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
            _mount: mount,
        };
        tracer.configure(tids)?;
        tracer.reader = Some(tracer.spawn_reader()?);
        write_file(&tracer.instance.join("tracing_on"), "1")?;
        Ok(tracer)
    }

    fn configure(&self, tids: &[i32]) -> Result<()> {
        let i = &self.instance;
        write_file(&i.join("tracing_on"), "0")?;
        write_file(&i.join("trace_clock"), "x86-tsc").map_err(|_| {
            Error::Tracing("the x86-tsc trace clock is not available on this host".into())
        })?;
        write_file(&i.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
        let filter = tids
            .iter()
            .map(|t| format!("common_pid == {t}"))
            .collect::<Vec<_>>()
            .join(" || ");
        for event in ["kvm_exit", "kvm_entry"] {
            let dir = i.join("events/kvm").join(event);
            if !filter.is_empty() {
                write_file(&dir.join("filter"), &filter)?;
            }
            write_file(&dir.join("enable"), "1")?;
        }
        Ok(())
    }

    fn spawn_reader(&self) -> Result<JoinHandle<std::io::Result<ExitAggregator>>> {
        let path = self.instance.join("trace_pipe");
        let mut pipe = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| Error::Tracing(format!("opening {}: {e}", path.display())))?;
        let stop = Arc::clone(&self.stop);
        Ok(std::thread::spawn(move || {
            crate::affinity::unpin_helper_thread();
            let mut agg = ExitAggregator::default();
            let mut buf = vec![0u8; 1 << 16];
            let mut partial = String::new();
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => {}
                    Ok(n) => {
                        partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                        while let Some(nl) = partial.find('\n') {
                            if let Some(ev) = parse_line(&partial[..nl]) {
                                agg.push(ev);
                            }
                            partial.drain(..=nl);
                        }
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                // Nothing to read: the buffer is drained, so stopping now loses nothing.
                if stop.load(Ordering::Acquire) {
                    return Ok(agg);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }))
    }

    /// Stops tracing, drains the buffer and returns the per-reason summary.
    pub fn finish(mut self) -> Result<TraceSummary> {
        write_file(&self.instance.join("tracing_on"), "0")?;
        self.stop.store(true, Ordering::Release);
        let agg = match self.reader.take().map(JoinHandle::join) {
            Some(Ok(Ok(agg))) => agg,
            Some(Ok(Err(e))) => return Err(Error::Tracing(format!("reading trace_pipe: {e}"))),
            _ => return Err(Error::Tracing("trace reader thread failed".into())),
        };
        let lost = self.lost_events();
        Ok(TraceSummary {
            exits: agg.summary(),
            unpaired: agg.unpaired,
            lost,
        })
    }

    /// Sum of the per-CPU "overrun" counters of the instance.
    fn lost_events(&self) -> u64 {
        let Ok(cpus) = fs::read_dir(self.instance.join("per_cpu")) else {
            return 0;
        };
        cpus.flatten()
            .filter_map(|cpu| fs::read_to_string(cpu.path().join("stats")).ok())
            .flat_map(|stats| {
                stats
                    .lines()
                    .filter_map(|l| {
                        l.strip_prefix("overrun:")
                            .and_then(|v| v.trim().parse::<u64>().ok())
                    })
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    pub fn instance_path(&self) -> &Path {
        &self.instance
    }
}

impl Drop for ExitTracer {
    fn drop(&mut self) {
        let _ = fs::write(self.instance.join("tracing_on"), "0");
        self.stop.store(true, Ordering::Release);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        for event in ["kvm_exit", "kvm_entry"] {
            let _ = fs::write(
                self.instance.join("events/kvm").join(event).join("enable"),
                "0",
            );
        }
        // The kernel refuses rmdir while a file of the instance is open; the
        // reader has been joined, so nothing is.
        let _ = fs::remove_dir(&self.instance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmx_and_svm_lines() {
        let exit = "  xvmm-vcpu-0-4242  [001] d..1.  5398127362712: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip 0xfff0 info1 0x0";
        assert_eq!(
            parse_line(exit),
            Some(TraceEvent::Exit {
                tid: 4242,
                ts: 5398127362712,
                reason: "IO_INSTRUCTION".into()
            })
        );
        let svm = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 0 reason npf rip 0x1 info1 0x0";
        assert_eq!(
            parse_line(svm),
            Some(TraceEvent::Exit {
                tid: 7,
                ts: 99,
                reason: "npf".into()
            })
        );
        let entry = "  xvmm-4242  [001] d..1.  5398127364000: kvm_entry: vcpu 0, rip 0xfff0";
        assert_eq!(
            parse_line(entry),
            Some(TraceEvent::Entry {
                tid: 4242,
                ts: 5398127364000
            })
        );
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(parse_line("CPU:1 [LOST 12 EVENTS]"), None);
        assert_eq!(
            parse_line("x-1 [0] .... notanumber: kvm_entry: vcpu 0"),
            None
        );
    }

    #[test]
    fn aggregator_pairs_exits_with_entries_per_thread() {
        let mut agg = ExitAggregator::default();
        let exit = |tid, ts, r: &str| TraceEvent::Exit {
            tid,
            ts,
            reason: r.into(),
        };
        agg.push(exit(1, 100, "io"));
        agg.push(exit(2, 105, "hlt"));
        agg.push(TraceEvent::Entry { tid: 1, ts: 160 });
        agg.push(TraceEvent::Entry { tid: 2, ts: 1105 });
        agg.push(exit(1, 200, "io"));
        agg.push(TraceEvent::Entry { tid: 1, ts: 240 });
        agg.push(TraceEvent::Entry { tid: 3, ts: 1 });
        let summary = agg.summary();
        assert_eq!(summary[0].reason, "io");
        assert_eq!(summary[0].exit_to_entry.count, 2);
        assert_eq!(
            (summary[0].exit_to_entry.min, summary[0].exit_to_entry.max),
            (40, 60)
        );
        assert_eq!(summary[1].exit_to_entry.min, 1000);
        assert_eq!(agg.unpaired, 1);
    }

    /// Needs root and tracefs (both present on the build machines): the
    /// instance is created, configured with the x86-tsc clock, and removed again,
    /// leaving the global trace clock untouched.
    #[test]
    fn instance_is_private_and_removed() {
        let Ok((root, _mount)) = tracefs_root() else {
            panic!("tracefs unavailable: this test needs root and tracefs");
        };
        let global_clock = fs::read_to_string(root.join("trace_clock")).unwrap();
        let tracer = ExitTracer::start(&[std::process::id() as i32]).unwrap();
        let path = tracer.instance_path().to_path_buf();
        let clock = fs::read_to_string(path.join("trace_clock")).unwrap();
        assert!(clock.contains("[x86-tsc]"), "instance clock: {clock}");
        let summary = tracer.finish().unwrap();
        assert!(summary.exits.is_empty(), "no vCPU ran, no exits expected");
        assert!(!path.exists(), "instance not removed");
        assert_eq!(
            fs::read_to_string(root.join("trace_clock")).unwrap(),
            global_clock
        );
    }
}
