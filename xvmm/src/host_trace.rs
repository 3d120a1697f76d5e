//! Host-side VM-exit timing from the `kvm:kvm_exit` / `kvm:kvm_entry` tracepoints.
//!
//! The tracer works in a private tracefs *instance* (`instances/xvmm-<pid>`): the
//! instance has its own ring buffer, clock, event switches and filters, so the
//! host's global tracing state is never modified. Removing the instance is the
//! whole restore; it happens on [`ExitTracer::finish`], on drop (also on the
//! Ctrl-C path, which returns normally through the run loop). tracefs itself
//! comes from [`xvmm_results::host_state`]: mounted there when absent, and the
//! instance recorded in its journal before it is made, so that a killed xvmm's
//! instance is removed by the next start of xvmm or xperf.
//!
//! With the `x86-tsc` trace clock the timestamps are raw host TSC values, so an
//! exit's host-side cost is `kvm_entry.ts - kvm_exit.ts` in TSC ticks.

mod raw;

pub use raw::{
    drain_pipe, example_decoder, example_formats, open_cpu_pipes, CpuMerge, PageOutcome,
    RawDecoder, EXAMPLE_HEADER_PAGE,
};

use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use xvmm_results::attribution::{HostExitEvent, HostTrace};
use xvmm_results::channel::PORT_CALIBRATE;
use xvmm_results::host_state::journal::{self, Change};
use xvmm_results::host_state::mounts::{FsKind, FsUse};
use xvmm_results::timeline::OffsetChange;
use xvmm_results::{HostExit, Stats};

const INSTANCE_PREFIX: &str = "xvmm-";
/// Exits and entries; the port behind an I/O exit (to find the calibration
/// exits); offset rewrites (for the timeline).
const TRACED_EVENTS: [&str; 4] = ["kvm_exit", "kvm_entry", "kvm_pio", "kvm_write_tsc_offset"];
/// Per-CPU ring buffer size for the instance; a reader thread drains it
/// continuously, so this only has to absorb scheduling hiccups.
const BUFFER_KB: u32 = 8192;

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    Exit {
        tid: i32,
        vcpu: u32,
        ts: u64,
        reason: String,
    },
    Entry {
        tid: i32,
        vcpu: u32,
        ts: u64,
    },
    /// `kvm_pio`: the port access behind the thread's pending I/O exit.
    Pio {
        tid: i32,
        write: bool,
        port: u16,
        value: u32,
    },
    /// `kvm_write_tsc_offset`: KVM gave the vCPU a new TSC offset.
    TscOffset {
        ts: u64,
        vcpu: u32,
        offset: i64,
    },
    /// `CPU:N [LOST M EVENTS]`: the ring buffer dropped events here.
    Lost {
        count: u64,
    },
    /// One of KVM's async page fault tracepoints.
    AsyncPf {
        kind: AsyncPfEvent,
        ts: u64,
    },
}

/// KVM's async page fault tracepoints (include/trace/events/kvm.h), in the
/// order a fault meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AsyncPfEvent {
    /// The vCPU's fault could not be served at once; KVM tries going async.
    TryAsyncGetPage,
    /// The guest touched a page already being fetched: the vCPU halts on it.
    RepeatedFault,
    /// KVM queued the fetch and told the guest "page not present" (or, if
    /// the guest cannot take it, halted the vCPU).
    NotPresent,
    /// The worker fetched the page (runs in a kworker, not the vCPU thread).
    Completed,
    /// KVM told the guest the page is ready.
    Ready,
}

impl AsyncPfEvent {
    pub const ALL: [AsyncPfEvent; 5] = [
        AsyncPfEvent::TryAsyncGetPage,
        AsyncPfEvent::RepeatedFault,
        AsyncPfEvent::NotPresent,
        AsyncPfEvent::Completed,
        AsyncPfEvent::Ready,
    ];

    /// The tracepoint's name under events/kvm.
    pub fn tracepoint(self) -> &'static str {
        match self {
            AsyncPfEvent::TryAsyncGetPage => "kvm_try_async_get_page",
            AsyncPfEvent::RepeatedFault => "kvm_async_pf_repeated_fault",
            AsyncPfEvent::NotPresent => "kvm_async_pf_not_present",
            AsyncPfEvent::Completed => "kvm_async_pf_completed",
            AsyncPfEvent::Ready => "kvm_async_pf_ready",
        }
    }

    pub fn from_tracepoint(name: &str) -> Option<AsyncPfEvent> {
        AsyncPfEvent::ALL
            .into_iter()
            .find(|e| e.tracepoint() == name)
    }
}

/// The head of an event line: `comm-tid [cpu] flags ts: name: ` -> (tid,
/// ts, name, rest), from the one tracefs record parser.
fn split_event(line: &str) -> Option<(i32, u64, &str, &str)> {
    let record = xvmm_results::tracefs::parse_record(line)?;
    let (name, body) = record.body.split_once(": ").unwrap_or((record.body, ""));
    Some((record.pid, record.ts, name, body))
}

/// The word after `key` in `text` (`key` a whole word), trailing commas cut.
fn word_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().map(|v| v.trim_end_matches(','));
        }
    }
    None
}

/// `key=value` in `text`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn hex_u32(text: &str) -> Option<u32> {
    u32::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// Parses one line of the text trace format, e.g.
/// `xvmm-1234 [001] d..1. 5398127362712: kvm_exit: vcpu 0 reason io rip 0x...`.
/// Lines that are none of the traced events (comments, other events) give `None`.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    if let Some(rest) = line.trim_start().strip_prefix("CPU:") {
        let count = rest.split_once("[LOST ")?.1.split_whitespace().next()?;
        return Some(TraceEvent::Lost {
            count: count.parse().ok()?,
        });
    }
    let (tid, ts, name, body) = split_event(line)?;
    match name {
        "kvm_exit" => Some(TraceEvent::Exit {
            tid,
            vcpu: word_after(body, "vcpu")?.parse().ok()?,
            ts,
            // "reason ," trims to nothing: not an exit line.
            reason: word_after(body, "reason")
                .filter(|r| !r.is_empty())?
                .to_string(),
        }),
        "kvm_entry" => Some(TraceEvent::Entry {
            tid,
            vcpu: word_after(body, "vcpu")?.parse().ok()?,
            ts,
        }),
        "kvm_pio" => {
            let write = body.starts_with("pio_write");
            Some(TraceEvent::Pio {
                tid,
                write,
                port: u16::try_from(hex_u32(word_after(body, "at")?)?).ok()?,
                value: hex_u32(word_after(body, "val")?)?,
            })
        }
        name if AsyncPfEvent::from_tracepoint(name).is_some() => Some(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::from_tracepoint(name)?,
            ts,
        }),
        "kvm_write_tsc_offset" => Some(TraceEvent::TscOffset {
            ts,
            vcpu: field(body, "vcpu")?.parse().ok()?,
            // Printed as an unsigned 64-bit number: the bits of an i64.
            offset: field(body, "next")?.parse::<u64>().ok()?.cast_signed(),
        }),
        _ => None,
    }
}

/// Longest trace line kept (a kvm_exit line is about 150 bytes); longer
/// ones are dropped whole, so a reader's memory stays bounded.
pub const MAX_TRACE_LINE: usize = 4096;

/// Cuts the `trace_pipe` byte stream into lines across reads of any size: a
/// line (or a UTF-8 sequence) split between two reads is joined before it is
/// parsed. Lines longer than [`MAX_TRACE_LINE`] are skipped.
#[derive(Debug, Default)]
pub struct TraceLines {
    partial: Vec<u8>,
    /// The current line has already passed the limit: skip to its end.
    overlong: bool,
}

impl TraceLines {
    /// Calls `each` with every line that `bytes` completes, without its `\n`
    /// (invalid UTF-8 shown as U+FFFD).
    pub fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(&str)) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let line = &rest[..nl];
            rest = &rest[nl + 1..];
            if std::mem::take(&mut self.overlong) {
                continue;
            }
            if self.partial.is_empty() {
                if line.len() <= MAX_TRACE_LINE {
                    each(&String::from_utf8_lossy(line));
                }
            } else {
                self.partial.extend_from_slice(line);
                if self.partial.len() <= MAX_TRACE_LINE {
                    each(&String::from_utf8_lossy(&self.partial));
                }
                self.partial.clear();
            }
        }
        if self.overlong {
            return;
        }
        if self.partial.len() + rest.len() > MAX_TRACE_LINE {
            self.partial.clear();
            self.overlong = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }
}

/// Exits kept per run for attribution; past it the rest of the run is
/// marked lost (at 32 bytes an exit, 256 MiB).
pub const MAX_KEPT_EXITS: usize = 8 << 20;

/// A calibration exit as the host traced it: the index the guest wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCalibration {
    pub index: u32,
    pub exit: u64,
    pub entry: u64,
}

/// An exit waiting for its entry.
#[derive(Debug)]
struct Pending {
    ts: u64,
    vcpu: u32,
    reason: u16,
    pio_write: Option<(u16, u32)>,
}

/// The name of the last reason id, shared by every reason past the first
/// `u16::MAX` (kernels have a few dozen).
pub const OTHER_REASONS: &str = "(reasons past the first 65535)";

/// Pairs each exit with the next entry of the same thread, groups the
/// exit-to-entry times by exit reason, and keeps every exit for attribution.
#[derive(Default, Debug)]
pub struct ExitAggregator {
    pending: BTreeMap<i32, Pending>,
    reason_ids: HashMap<String, u16>,
    by_reason: BTreeMap<u16, Vec<u64>>,
    trace: HostTrace,
    calibrations: Vec<HostCalibration>,
    offset_changes: Vec<OffsetChange>,
    async_pf: Vec<(AsyncPfEvent, u64)>,
    /// The last event's time, and a lost window waiting for its end.
    last_ts: u64,
    lost_since: Option<u64>,
    lost: u64,
    /// A loss was marked without its count (a page's missed-events flag
    /// with no room for the count, or a page that did not decode).
    lost_uncounted: bool,
    /// Exits never followed by an entry, or entries without an exit.
    pub unpaired: u64,
}

impl ExitAggregator {
    pub fn push(&mut self, event: TraceEvent) {
        let ts = match &event {
            TraceEvent::Exit { ts, .. }
            | TraceEvent::Entry { ts, .. }
            | TraceEvent::AsyncPf { ts, .. }
            | TraceEvent::TscOffset { ts, .. } => Some(*ts),
            _ => None,
        };
        if let Some(ts) = ts {
            if let Some(from) = self.lost_since.take() {
                self.trace.lost.push((from, ts));
            }
            self.last_ts = ts;
        }
        match event {
            TraceEvent::Exit {
                tid,
                vcpu,
                ts,
                reason,
            } => self.exit(tid, vcpu, ts, &reason),
            TraceEvent::Entry { tid, ts, .. } => self.entry(tid, ts),
            TraceEvent::Pio {
                tid,
                write: true,
                port,
                value,
            } => {
                if let Some(p) = self.pending.get_mut(&tid) {
                    p.pio_write = Some((port, value));
                }
            }
            TraceEvent::Pio { .. } => {}
            TraceEvent::TscOffset { ts, offset, .. } => self.offset_changes.push(OffsetChange {
                host_tsc: ts,
                offset,
            }),
            TraceEvent::AsyncPf { kind, ts } => {
                if self.async_pf.len() < MAX_KEPT_EXITS {
                    self.async_pf.push((kind, ts));
                }
            }
            TraceEvent::Lost { count } => {
                self.lost += count;
                self.lost_uncounted |= count == 0;
                // The exits in flight may have lost their entries.
                self.unpaired += self.pending.len() as u64;
                self.pending.clear();
                self.lost_since.get_or_insert(self.last_ts);
            }
        }
    }

    fn reason_id(&mut self, reason: &str) -> u16 {
        if let Some(&id) = self.reason_ids.get(reason) {
            return id;
        }
        // Reasons come from the kernel's tables: a few dozen at most. Past
        // u16::MAX - 1 of them, every further one shares the last id, whose
        // name says so (every id used has a name).
        match u16::try_from(self.trace.reasons.len()) {
            Ok(id) if id < u16::MAX => {
                self.trace.reasons.push(reason.to_string());
                self.reason_ids.insert(reason.to_string(), id);
                id
            }
            Ok(_) => {
                self.trace.reasons.push(OTHER_REASONS.to_string());
                u16::MAX
            }
            Err(_) => u16::MAX,
        }
    }

    fn exit(&mut self, tid: i32, vcpu: u32, ts: u64, reason: &str) {
        let reason = self.reason_id(reason);
        let previous = self.pending.insert(
            tid,
            Pending {
                ts,
                vcpu,
                reason,
                pio_write: None,
            },
        );
        if previous.is_some() {
            self.unpaired += 1;
        }
    }

    fn entry(&mut self, tid: i32, ts: u64) {
        let Some(p) = self.pending.remove(&tid).filter(|p| ts >= p.ts) else {
            self.unpaired += 1;
            return;
        };
        self.by_reason.entry(p.reason).or_default().push(ts - p.ts);
        if let Some((PORT_CALIBRATE, index)) = p.pio_write {
            self.calibrations.push(HostCalibration {
                index,
                exit: p.ts,
                entry: ts,
            });
        }
        if self.trace.exits.len() < MAX_KEPT_EXITS {
            self.trace.exits.push(HostExitEvent {
                vcpu: p.vcpu,
                exit: p.ts,
                entry: ts,
                reason: p.reason,
            });
        } else if self.trace.lost.last().is_none_or(|w| w.1 != u64::MAX) {
            // Too many to keep: from here on, nothing can be vouched for.
            self.trace.lost.push((p.ts, u64::MAX));
        }
    }

    /// Per-reason statistics, most frequent first.
    pub fn summary(&self) -> Vec<HostExit> {
        let mut exits: Vec<HostExit> = self
            .by_reason
            .iter()
            .map(|(&id, ticks)| HostExit {
                reason: self.trace.reasons[usize::from(id)].clone(),
                exit_to_entry: Stats::from_samples(ticks),
            })
            .collect();
        exits.sort_by_key(|e| std::cmp::Reverse(e.exit_to_entry.count));
        exits
    }

    /// Everything collected, once the trace has ended; `lost` is what the
    /// ring buffer's overrun counters counted. Losses they count beyond
    /// what the stream marked (when every mark had its count) fell where
    /// nobody can say: the whole run is then one lost window.
    pub fn finish(mut self, lost: u64) -> TraceSummary {
        if let Some(from) = self.lost_since.take() {
            self.trace.lost.push((from, u64::MAX));
        }
        let lost_unplaced = if self.lost_uncounted {
            0
        } else {
            lost.saturating_sub(self.lost)
        };
        if lost_unplaced > 0 {
            self.trace.lost = vec![(0, u64::MAX)];
        }
        TraceSummary {
            exits: self.summary(),
            unpaired: self.unpaired,
            lost: lost.max(self.lost),
            lost_unplaced,
            trace: self.trace,
            calibrations: self.calibrations,
            offset_changes: self.offset_changes,
            async_pf: self.async_pf,
            async_pf_traced: false,
            reader: TraceReader::default(),
        }
    }
}

/// What a finished trace yields.
#[derive(Debug, Default)]
pub struct TraceSummary {
    pub exits: Vec<HostExit>,
    pub unpaired: u64,
    /// Events the kernel dropped because the buffer overflowed.
    pub lost: u64,
    /// Of those, the ones the overrun counters count and the stream never
    /// marked (see [`ExitAggregator::finish`]).
    pub lost_unplaced: u64,
    /// Every exit, for attribution.
    pub trace: HostTrace,
    /// The guest's calibration exits (writes to [`PORT_CALIBRATE`]).
    pub calibrations: Vec<HostCalibration>,
    /// TSC offsets KVM wrote while tracing.
    pub offset_changes: Vec<OffsetChange>,
    /// KVM's async page fault events, with their host TSC.
    pub async_pf: Vec<(AsyncPfEvent, u64)>,
    /// Whether the async page fault tracepoints exist on this host and were on.
    pub async_pf_traced: bool,
    pub reader: TraceReader,
}

/// Which reader drained the trace; the report says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceReader {
    /// Every CPU's binary `trace_pipe_raw` pages; pages that could not be
    /// decoded are counted, and a lost window marked for each.
    Raw { corrupt_pages: u64 },
    /// The text `trace_pipe`, and why the binary pages were not read.
    Text { why: String },
}

impl Default for TraceReader {
    fn default() -> Self {
        TraceReader::Text { why: String::new() }
    }
}

impl TraceReader {
    /// E.g. "the binary trace_pipe_raw pages" or "the text trace_pipe
    /// (binary pages unusable: ...)".
    pub fn describe(&self) -> String {
        match self {
            TraceReader::Raw { corrupt_pages: 0 } => "the binary trace_pipe_raw pages".into(),
            TraceReader::Raw { corrupt_pages } => {
                format!(
                    "the binary trace_pipe_raw pages ({corrupt_pages} undecodable, marked lost)"
                )
            }
            TraceReader::Text { why } if why.is_empty() => "the text trace_pipe".into(),
            TraceReader::Text { why } => {
                format!("the text trace_pipe (binary pages unusable: {why})")
            }
        }
    }
}

/// What a reader thread hands back.
type Drained = std::io::Result<(ExitAggregator, TraceReader)>;

/// A running kvm_exit/kvm_entry trace of some threads.
pub struct ExitTracer {
    instance: PathBuf,
    /// The instance's journal entry, forgotten once it is removed.
    recorded: Change,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Drained>>,
    async_pf_traced: bool,
    /// Declared last: dropped after `Drop::drop` has removed the instance,
    /// so a mount released with it is left empty.
    _tracefs: FsUse,
}

fn write_file(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .map_err(|e| Error::Tracing(format!("writing {value:?} to {}: {e}", path.display())))
}

/// tracefs for xvmm (mounted when absent; see [`xvmm_results::host_state`]).
fn tracefs() -> Result<FsUse> {
    FsUse::acquire(FsKind::Tracefs, None).map_err(|e| Error::Tracing(e.to_string()))
}

/// Creates a tracefs instance, recorded in the journal first: a process
/// killed after this leaves a record the next start undoes.
fn make_instance(root: &Path, name: &str) -> Result<(PathBuf, Change)> {
    let change = Change::Instance { name: name.into() };
    journal::record(change.clone()).map_err(|e| Error::Tracing(e.to_string()))?;
    let path = root.join("instances").join(name);
    if let Err(e) = fs::create_dir(&path) {
        journal::forget(&change);
        return Err(Error::Tracing(format!(
            "creating tracefs instance {}: {e}",
            path.display()
        )));
    }
    Ok((path, change))
}

/// `common_pid == a || common_pid == b`: only the given threads' events;
/// empty when no threads are given.
fn tid_filter(tids: &[i32]) -> String {
    tids.iter()
        .map(|t| format!("common_pid == {t}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The filter to write for the kvm `event`, if any: none without threads,
/// and none for `kvm_async_pf_completed`, which fires in a kworker, so it
/// cannot be filtered by the vCPU thread.
fn event_filter<'a>(filter: &'a str, event: &str) -> Option<&'a str> {
    if filter.is_empty() || event == AsyncPfEvent::Completed.tracepoint() {
        None
    } else {
        Some(filter)
    }
}

/// The async page fault tracepoints under `kvm_events` (an instance's
/// `events/kvm`), where the host has them all (a kernel without
/// CONFIG_KVM_ASYNC_PF has none); returns whether they are on.
fn enable_async_pf(kvm_events: &Path, filter: &str) -> Result<bool> {
    let dirs: Vec<(AsyncPfEvent, PathBuf)> = AsyncPfEvent::ALL
        .iter()
        .map(|e| (*e, kvm_events.join(e.tracepoint())))
        .collect();
    if !dirs.iter().all(|(_, d)| d.is_dir()) {
        return Ok(false);
    }
    for (event, dir) in dirs {
        if let Some(filter) = event_filter(filter, event.tracepoint()) {
            write_file(&dir.join("filter"), filter)?;
        }
        write_file(&dir.join("enable"), "1")?;
    }
    Ok(true)
}

/// One pass over every CPU's pipe, giving each page with its CPU to
/// `each`; `true` if any CPU had pages.
fn drain_cpus(
    pipes: &mut [fs::File],
    page: &mut [u8],
    mut each: impl FnMut(usize, &[u8]),
) -> std::io::Result<bool> {
    let mut any = false;
    for (cpu, pipe) in pipes.iter_mut().enumerate() {
        any |= drain_pipe(pipe, page, |bytes| each(cpu, bytes))?;
    }
    Ok(any)
}

/// The raw reader's loop: drains every CPU's pages in rounds, merging the
/// CPUs by time up to where no CPU can still deliver an earlier event,
/// until a round begun after `stop` finds nothing.
fn read_raw(decoder: &RawDecoder, pipes: &mut [fs::File], stop: &AtomicBool) -> Drained {
    let mut agg = ExitAggregator::default();
    let mut merge = CpuMerge::new(pipes.len());
    let mut page = vec![0u8; decoder.page_size()];
    let mut corrupt_pages = 0;
    loop {
        let round = xvmm_results::tsc::rdtsc();
        // Tracing is off before stop is set: a drain begun after
        // it that finds nothing is the last.
        let stopping = stop.load(Ordering::Acquire);
        let any = drain_cpus(pipes, &mut page, |cpu, bytes| {
            let outcome = decoder.decode_page(bytes, |ts, ev| merge.push(cpu, ts, ev));
            if outcome == PageOutcome::Corrupt {
                corrupt_pages += 1;
                let at = merge.latest(cpu);
                merge.push(cpu, at, TraceEvent::Lost { count: 0 });
            }
        })?;
        merge.release_drained(round, |ev| agg.push(ev));
        if !any && stopping {
            merge.release_all(|ev| agg.push(ev));
            return Ok((agg, TraceReader::Raw { corrupt_pages }));
        }
        if !any {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The text reader's loop over a non-blocking `trace_pipe`, until a read
/// after `stop` finds it empty.
fn read_text(mut pipe: impl Read, stop: &AtomicBool, why: String) -> Drained {
    let mut agg = ExitAggregator::default();
    let mut buf = vec![0u8; 1 << 16];
    let mut lines = TraceLines::default();
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                lines.feed(&buf[..n], |line| {
                    if let Some(ev) = parse_line(line) {
                        agg.push(ev);
                    }
                });
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // Nothing to read: the buffer is drained, so stopping now loses nothing.
        if stop.load(Ordering::Acquire) {
            return Ok((agg, TraceReader::Text { why }));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the joined reader thread gave, as the tracer's result.
fn reader_result(
    joined: Option<std::thread::Result<Drained>>,
) -> Result<(ExitAggregator, TraceReader)> {
    match joined {
        Some(Ok(Ok(drained))) => Ok(drained),
        Some(Ok(Err(e))) => Err(Error::Tracing(format!("reading the trace: {e}"))),
        _ => Err(Error::Tracing("trace reader thread failed".into())),
    }
}

/// Sum of the per-CPU "overrun" counters of an instance.
fn lost_events(instance: &Path) -> u64 {
    let Ok(cpus) = fs::read_dir(instance.join("per_cpu")) else {
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

/// Removes an instance directory; whether it is gone (also when someone
/// else removed it first).
fn remove_instance(path: &Path) -> bool {
    fs::remove_dir(path).is_ok() || !path.exists()
}

impl ExitTracer {
    /// Starts tracing kvm_exit/kvm_entry of the given thread ids (vCPU threads).
    pub fn start(tids: &[i32]) -> Result<ExitTracer> {
        let tracefs = tracefs()?;
        let root = tracefs.root();
        if !root.join("events/kvm/kvm_exit").is_dir() {
            return Err(Error::Tracing(
                "the kvm:kvm_exit tracepoint is not available (kvm module not loaded?)".into(),
            ));
        }
        let name = format!("{INSTANCE_PREFIX}{}", std::process::id());
        let (instance, recorded) = make_instance(root, &name)?;
        // From here on the instance exists: the tracer owns it, and its Drop removes it.
        let mut tracer = ExitTracer {
            instance,
            recorded,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
            async_pf_traced: false,
            _tracefs: tracefs,
        };
        tracer.async_pf_traced = tracer.configure(tids)?;
        tracer.reader = Some(tracer.spawn_reader()?);
        write_file(&tracer.instance.join("tracing_on"), "1")?;
        Ok(tracer)
    }

    /// Returns whether the async page fault events are traced.
    fn configure(&self, tids: &[i32]) -> Result<bool> {
        let i = &self.instance;
        write_file(&i.join("tracing_on"), "0")?;
        write_file(&i.join("trace_clock"), "x86-tsc").map_err(|_| {
            Error::Tracing("the x86-tsc trace clock is not available on this host".into())
        })?;
        write_file(&i.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
        let filter = tid_filter(tids);
        for event in TRACED_EVENTS {
            let dir = i.join("events/kvm").join(event);
            if !dir.is_dir() {
                return Err(Error::Tracing(format!(
                    "the kvm:{event} tracepoint is not available on this host"
                )));
            }
            if let Some(filter) = event_filter(&filter, event) {
                write_file(&dir.join("filter"), filter)?;
            }
            write_file(&dir.join("enable"), "1")?;
        }
        enable_async_pf(&i.join("events/kvm"), &filter)
    }

    /// The binary reader where this host's pages and formats can be
    /// decoded, the text reader otherwise.
    fn spawn_reader(&self) -> Result<JoinHandle<Drained>> {
        match self.raw_setup() {
            Ok((decoder, pipes)) => Ok(self.spawn_raw_reader(decoder, pipes)),
            Err(why) => self.spawn_text_reader(why),
        }
    }

    fn raw_setup(&self) -> std::result::Result<(RawDecoder, Vec<fs::File>), String> {
        if std::env::var_os("XVMM_TRACE_TEXT").is_some() {
            return Err("XVMM_TRACE_TEXT is set".into());
        }
        let decoder = RawDecoder::load(&self.instance.join("events"))?;
        Ok((decoder, open_cpu_pipes(&self.instance)?))
    }

    /// Drains every CPU's pages in rounds, merging the CPUs by time up to
    /// where no CPU can still deliver an earlier event.
    fn spawn_raw_reader(
        &self,
        decoder: RawDecoder,
        mut pipes: Vec<fs::File>,
    ) -> JoinHandle<Drained> {
        let stop = Arc::clone(&self.stop);
        std::thread::spawn(move || {
            crate::affinity::unpin_helper_thread();
            read_raw(&decoder, &mut pipes, &stop)
        })
    }

    fn spawn_text_reader(&self, why: String) -> Result<JoinHandle<Drained>> {
        let path = self.instance.join("trace_pipe");
        let pipe = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| Error::Tracing(format!("opening {}: {e}", path.display())))?;
        let stop = Arc::clone(&self.stop);
        Ok(std::thread::spawn(move || {
            crate::affinity::unpin_helper_thread();
            read_text(pipe, &stop, why)
        }))
    }

    /// Stops tracing, drains the buffer and returns the per-reason summary.
    pub fn finish(mut self) -> Result<TraceSummary> {
        write_file(&self.instance.join("tracing_on"), "0")?;
        self.stop.store(true, Ordering::Release);
        let (agg, reader) = reader_result(self.reader.take().map(JoinHandle::join))?;
        let lost = lost_events(&self.instance);
        Ok(TraceSummary {
            reader,
            async_pf_traced: self.async_pf_traced,
            ..agg.finish(lost)
        })
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
        let async_pf = AsyncPfEvent::ALL.map(AsyncPfEvent::tracepoint);
        for event in TRACED_EVENTS.iter().chain(&async_pf) {
            let _ = fs::write(
                self.instance.join("events/kvm").join(event).join("enable"),
                "0",
            );
        }
        // The kernel refuses rmdir while a file of the instance is open; the
        // reader has been joined, so nothing is. A failed removal stays in
        // the journal for the next start to finish.
        if remove_instance(&self.instance) {
            journal::forget(&self.recorded);
        }
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
                vcpu: 0,
                ts: 5398127362712,
                reason: "IO_INSTRUCTION".into()
            })
        );
        let svm = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 2 reason npf rip 0x1 info1 0x0";
        assert_eq!(
            parse_line(svm),
            Some(TraceEvent::Exit {
                tid: 7,
                vcpu: 2,
                ts: 99,
                reason: "npf".into()
            })
        );
        let entry = "  xvmm-4242  [001] d..1.  5398127364000: kvm_entry: vcpu 0, rip 0xfff0";
        assert_eq!(
            parse_line(entry),
            Some(TraceEvent::Entry {
                tid: 4242,
                vcpu: 0,
                ts: 5398127364000
            })
        );
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(
            parse_line("CPU:1 [LOST 12 EVENTS]"),
            Some(TraceEvent::Lost { count: 12 })
        );
        assert_eq!(
            parse_line("x-1 [0] .... notanumber: kvm_entry: vcpu 0"),
            None
        );
        assert_eq!(parse_line("x-1 [0] .... 5: kvm_entry: rip 0x0"), None);
    }

    #[test]
    fn an_exit_without_a_reason_is_not_an_exit() {
        // Found by fuzzing (fuzz/seeds/trace_line/crash-1560e5bd...).
        let line = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 0 reason , rip 0xfff0";
        assert_eq!(parse_line(line), None);
    }

    #[test]
    fn parses_port_and_offset_events() {
        let pio = "xvmm-9 [001] d..1. 120: kvm_pio: pio_write at 0x508 size 4 count 1 val 0x2a ";
        assert_eq!(
            parse_line(pio),
            Some(TraceEvent::Pio {
                tid: 9,
                write: true,
                port: 0x508,
                value: 42
            })
        );
        let read = "xvmm-9 [001] d..1. 120: kvm_pio: pio_read at 0x3fd size 1 count 1 val 0x60 ";
        assert!(matches!(
            parse_line(read),
            Some(TraceEvent::Pio { write: false, .. })
        ));
        let offset =
            "xvmm-9 [000] ..... 77: kvm_write_tsc_offset: vcpu=0 prev=0 next=18446744073709551516";
        assert_eq!(
            parse_line(offset),
            Some(TraceEvent::TscOffset {
                ts: 77,
                vcpu: 0,
                offset: -100
            })
        );
    }

    fn exit(tid: i32, ts: u64, r: &str) -> TraceEvent {
        TraceEvent::Exit {
            tid,
            vcpu: 0,
            ts,
            reason: r.into(),
        }
    }

    fn entry(tid: i32, ts: u64) -> TraceEvent {
        TraceEvent::Entry { tid, vcpu: 0, ts }
    }

    #[test]
    fn lines_split_across_reads_are_joined_and_overlong_ones_skipped() {
        let text = "a-1 [0] . 5: kvm_entry: vcpu 0\nx\u{e9}y\n".as_bytes();
        let mut whole = Vec::new();
        TraceLines::default().feed(text, |l| whole.push(l.to_string()));
        assert_eq!(whole, ["a-1 [0] . 5: kvm_entry: vcpu 0", "x\u{e9}y"]);
        // One byte per read, splitting the two-byte e-acute too.
        let mut bytewise = Vec::new();
        let mut lines = TraceLines::default();
        for b in text {
            lines.feed(std::slice::from_ref(b), |l| bytewise.push(l.to_string()));
        }
        assert_eq!(bytewise, whole);
        let mut long = vec![b'x'; MAX_TRACE_LINE + 1];
        long.extend_from_slice(b"\nshort\n");
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        for chunk in long.chunks(1000) {
            lines.feed(chunk, |l| kept.push(l.to_string()));
        }
        assert_eq!(kept, ["short"]);
    }

    #[test]
    fn aggregator_pairs_exits_with_entries_per_thread() {
        let mut agg = ExitAggregator::default();
        agg.push(exit(1, 100, "io"));
        agg.push(exit(2, 105, "hlt"));
        agg.push(entry(1, 160));
        agg.push(entry(2, 1105));
        agg.push(exit(1, 200, "io"));
        agg.push(entry(1, 240));
        agg.push(entry(3, 1));
        let summary = agg.summary();
        assert_eq!(summary[0].reason, "io");
        assert_eq!(summary[0].exit_to_entry.count, 2);
        assert_eq!(
            (summary[0].exit_to_entry.min, summary[0].exit_to_entry.max),
            (40, 60)
        );
        assert_eq!(summary[1].exit_to_entry.min, 1000);
        assert_eq!(agg.unpaired, 1);
        let done = agg.finish(0);
        assert_eq!(done.trace.exits.len(), 3);
        assert_eq!(done.trace.reasons, ["io", "hlt"]);
    }

    #[test]
    fn calibration_exits_lost_windows_and_offsets_are_kept() {
        let mut agg = ExitAggregator::default();
        agg.push(exit(1, 100, "io"));
        agg.push(TraceEvent::Pio {
            tid: 1,
            write: true,
            port: PORT_CALIBRATE,
            value: 7,
        });
        agg.push(entry(1, 150));
        agg.push(exit(1, 200, "io"));
        agg.push(TraceEvent::Pio {
            tid: 1,
            write: true,
            port: 0x3f8,
            value: 7,
        });
        agg.push(entry(1, 230));
        agg.push(exit(1, 300, "npf"));
        agg.push(TraceEvent::Lost { count: 5 });
        agg.push(entry(1, 900)); // its exit may be one of the lost: unpaired
        agg.push(TraceEvent::TscOffset {
            ts: 950,
            vcpu: 0,
            offset: -3,
        });
        let done = agg.finish(0);
        assert_eq!(
            done.calibrations,
            [HostCalibration {
                index: 7,
                exit: 100,
                entry: 150
            }]
        );
        assert_eq!(done.trace.lost, [(300, 900)]);
        assert_eq!(done.lost, 5);
        assert_eq!(done.unpaired, 2);
        assert_eq!(
            done.offset_changes,
            [OffsetChange {
                host_tsc: 950,
                offset: -3
            }]
        );
    }

    #[test]
    fn overruns_the_stream_never_marked_leave_no_window_vouched_for() {
        let run = || {
            let mut agg = ExitAggregator::default();
            agg.push(exit(1, 100, "io"));
            agg.push(entry(1, 150));
            agg
        };
        // The counters saw 3 lost events, the stream marked none: where
        // they fell is unknown.
        let done = run().finish(3);
        assert_eq!((done.lost, done.lost_unplaced), (3, 3));
        assert_eq!(done.trace.lost, [(0, u64::MAX)]);
        // Marked in the stream with their count: their windows are enough.
        let mut agg = run();
        agg.push(TraceEvent::Lost { count: 3 });
        agg.push(exit(1, 400, "io"));
        assert_eq!(agg.finish(3).trace.lost, [(150, 400)]);
        // A mark without its count may hold the counters' excess.
        let mut agg = run();
        agg.push(TraceEvent::Lost { count: 0 });
        agg.push(exit(1, 400, "io"));
        let done = agg.finish(3);
        assert_eq!((done.trace.lost, done.lost_unplaced), (vec![(150, 400)], 0));
        // Nothing lost: nothing marked.
        assert_eq!(run().finish(0).trace.lost, []);
    }

    #[test]
    fn lines_up_to_the_limit_are_kept_across_reads_and_the_buffer_stays_bounded() {
        // A typical line cut in the middle by the read boundary is joined.
        let line = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 2 reason npf rip 0x1 info1 0x0 info2 0x0 intr_info 0x0 error_code 0x0 requests 0x0";
        let (head, tail) = line.split_at(line.len() / 2);
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        lines.feed(head.as_bytes(), |l| kept.push(l.to_string()));
        lines.feed(format!("{tail}\n").as_bytes(), |l| kept.push(l.to_string()));
        assert_eq!(kept, [line]);
        // ... also when it comes in three reads.
        let (first, second) = head.split_at(head.len() / 2);
        let mut kept = Vec::new();
        for part in [first, second, &format!("{tail}\n")] {
            lines.feed(part.as_bytes(), |l| kept.push(l.to_string()));
        }
        assert_eq!(kept, [line]);
        // Exactly MAX_TRACE_LINE bytes, its newline in the next read: kept.
        let longest = "y".repeat(MAX_TRACE_LINE);
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        lines.feed(longest.as_bytes(), |l| kept.push(l.to_string()));
        assert_eq!(lines.partial.len(), MAX_TRACE_LINE);
        lines.feed(b"\nnext\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, [longest.as_str(), "next"]);
        // A line far past the limit is never buffered whole.
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        for _ in 0..10 {
            lines.feed(&[b'z'; 1000], |l| kept.push(l.to_string()));
            assert!(
                lines.partial.len() <= MAX_TRACE_LINE,
                "{}",
                lines.partial.len()
            );
        }
        lines.feed(b"z\nafter\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, ["after"]);
        // ... nor when it comes in one read.
        lines.feed(&[b'z'; 10_000], |l| kept.push(l.to_string()));
        assert!(
            lines.partial.len() <= MAX_TRACE_LINE,
            "{}",
            lines.partial.len()
        );
        lines.feed(b"\nlast\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, ["after", "last"]);
    }

    #[test]
    fn a_second_exit_before_an_entry_leaves_the_first_unpaired() {
        let mut agg = ExitAggregator::default();
        agg.push(exit(1, 100, "io"));
        agg.push(exit(1, 200, "hlt")); // the entry of the first went missing
        agg.push(exit(2, 210, "io"));
        agg.push(entry(1, 230));
        agg.push(entry(2, 260));
        assert_eq!(agg.unpaired, 1);
        let done = agg.finish(0);
        assert_eq!(done.unpaired, 1);
        let hlt = done.exits.iter().find(|e| e.reason == "hlt").unwrap();
        assert_eq!((hlt.exit_to_entry.count, hlt.exit_to_entry.min), (1, 30));
        let io = done.exits.iter().find(|e| e.reason == "io").unwrap();
        assert_eq!((io.exit_to_entry.count, io.exit_to_entry.min), (1, 50));
    }

    #[test]
    fn reason_ids_are_dense_and_saturate_at_u16_max() {
        let mut agg = ExitAggregator::default();
        assert_eq!(agg.reason_id("io"), 0);
        assert_eq!(agg.reason_id("hlt"), 1);
        assert_eq!(agg.reason_id("io"), 0);
        for n in 2..u16::MAX {
            assert_eq!(agg.reason_id(&format!("r{n}")), n);
        }
        // Every id below u16::MAX is taken: further reasons share it,
        // named once as what it is, and are not added to the table.
        assert_eq!(agg.reason_id("one more"), u16::MAX);
        assert_eq!(agg.reason_id("and another"), u16::MAX);
        assert_eq!(agg.trace.reasons.len(), usize::from(u16::MAX) + 1);
        assert_eq!(agg.trace.reasons[1], "hlt");
        assert_eq!(agg.trace.reasons[usize::from(u16::MAX)], OTHER_REASONS);
        assert!(!agg.trace.reasons.iter().any(|r| r == "one more"));
        // An exit of such a reason is summarised under that name.
        agg.push(TraceEvent::Exit {
            tid: 1,
            vcpu: 0,
            ts: 100,
            reason: "yet another".into(),
        });
        agg.push(TraceEvent::Entry {
            tid: 1,
            vcpu: 0,
            ts: 150,
        });
        let summary = agg.summary();
        assert_eq!(summary.len(), 1);
        assert_eq!(summary[0].reason, OTHER_REASONS);
    }

    #[test]
    fn async_pf_events_are_kept_up_to_the_cap() {
        let mut agg = ExitAggregator::default();
        agg.push(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::NotPresent,
            ts: 10,
        });
        agg.push(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::Ready,
            ts: 20,
        });
        assert_eq!(
            agg.async_pf,
            [(AsyncPfEvent::NotPresent, 10), (AsyncPfEvent::Ready, 20)]
        );
        agg.async_pf = vec![(AsyncPfEvent::Completed, 0); MAX_KEPT_EXITS];
        agg.push(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::Ready,
            ts: 30,
        });
        assert_eq!(agg.async_pf.len(), MAX_KEPT_EXITS);
        assert_eq!(agg.last_ts, 30);
    }

    #[test]
    fn exits_past_the_cap_are_counted_but_mark_one_open_lost_window() {
        let mut agg = ExitAggregator::default();
        let kept = HostExitEvent {
            vcpu: 0,
            exit: 1,
            entry: 2,
            reason: 0,
        };
        agg.trace.exits = vec![kept; MAX_KEPT_EXITS];
        agg.push(exit(1, 100, "io"));
        agg.push(entry(1, 150));
        agg.push(exit(1, 200, "io"));
        agg.push(entry(1, 260));
        assert_eq!(agg.trace.exits.len(), MAX_KEPT_EXITS);
        assert_eq!(agg.trace.lost, [(100, u64::MAX)]);
        // Still timed for the per-reason summary.
        let io = &agg.summary()[0];
        assert_eq!(io.reason, "io");
        assert_eq!(
            (
                io.exit_to_entry.count,
                io.exit_to_entry.min,
                io.exit_to_entry.max
            ),
            (2, 50, 60)
        );
    }

    #[test]
    fn describe_names_the_reader_and_why() {
        let says = |r: TraceReader| r.describe();
        assert_eq!(
            says(TraceReader::Raw { corrupt_pages: 0 }),
            "the binary trace_pipe_raw pages"
        );
        assert_eq!(
            says(TraceReader::Raw { corrupt_pages: 3 }),
            "the binary trace_pipe_raw pages (3 undecodable, marked lost)"
        );
        assert_eq!(says(TraceReader::default()), "the text trace_pipe");
        assert_eq!(
            says(TraceReader::Text {
                why: "XVMM_TRACE_TEXT is set".into()
            }),
            "the text trace_pipe (binary pages unusable: XVMM_TRACE_TEXT is set)"
        );
    }

    #[test]
    fn filters_name_the_threads_except_for_the_kworker_event() {
        assert_eq!(tid_filter(&[]), "");
        assert_eq!(tid_filter(&[7]), "common_pid == 7");
        let both = tid_filter(&[7, 9]);
        assert_eq!(both, "common_pid == 7 || common_pid == 9");
        for event in TRACED_EVENTS {
            assert_eq!(event_filter(&both, event), Some(both.as_str()), "{event}");
            assert_eq!(event_filter("", event), None, "{event}");
        }
        let completed = AsyncPfEvent::Completed.tracepoint();
        assert_eq!(event_filter(&both, completed), None);
        assert_eq!(event_filter("", completed), None);
        let ready = AsyncPfEvent::Ready.tracepoint();
        assert_eq!(event_filter(&both, ready), Some(both.as_str()));
    }

    /// `enable_async_pf` on a plain directory laid out like an instance's
    /// `events/kvm`: which files it writes, not how tracefs takes them.
    #[test]
    fn async_pf_tracepoints_are_enabled_only_when_all_exist() {
        let dir = std::env::temp_dir().join(format!("xvmm-async-pf-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let [present @ .., missing] = AsyncPfEvent::ALL;
        for e in present {
            fs::create_dir_all(dir.join(e.tracepoint())).unwrap();
        }
        let read =
            |e: AsyncPfEvent, f: &str| fs::read_to_string(dir.join(e.tracepoint()).join(f)).ok();
        // One missing (an older kernel): none is turned on.
        assert!(!enable_async_pf(&dir, "common_pid == 5").unwrap());
        assert!(present.iter().all(|&e| read(e, "enable").is_none()));
        fs::create_dir(dir.join(missing.tracepoint())).unwrap();
        assert!(enable_async_pf(&dir, "common_pid == 5").unwrap());
        for e in AsyncPfEvent::ALL {
            assert_eq!(read(e, "enable").as_deref(), Some("1"), "{e:?}");
            let filter = (e != AsyncPfEvent::Completed).then_some("common_pid == 5");
            assert_eq!(read(e, "filter").as_deref(), filter, "{e:?}");
        }
        // Without threads nothing is filtered.
        for e in AsyncPfEvent::ALL {
            let _ = fs::remove_file(dir.join(e.tracepoint()).join("filter"));
        }
        assert!(enable_async_pf(&dir, "").unwrap());
        assert!(AsyncPfEvent::ALL
            .iter()
            .all(|&e| read(e, "filter").is_none()));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A non-blocking pipe as (read end, write end), like a trace_pipe_raw.
    fn nonblocking_pipe() -> (fs::File, fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two fds it is given room for.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        assert_eq!(rc, 0);
        // SAFETY: both fds are fresh and owned by nothing else.
        unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn a_round_reports_pages_from_any_cpu() {
        use std::io::Write;
        let (r0, _w0) = nonblocking_pipe();
        let (r1, mut w1) = nonblocking_pipe();
        let mut pipes = [r0, r1];
        let mut page = [0u8; 64];
        let mut got = Vec::new();
        w1.write_all(b"page").unwrap();
        let any = drain_cpus(&mut pipes, &mut page, |cpu, b| got.push((cpu, b.to_vec())));
        assert!(any.unwrap());
        assert_eq!(got, [(1, b"page".to_vec())]);
        // Drained: the next round finds nothing, which is how the reader
        // knows it may stop.
        assert!(!drain_cpus(&mut pipes, &mut page, |_, _| panic!("no pages")).unwrap());
    }

    /// A scripted `trace_pipe`: each read takes the next step; reading past
    /// the script is a failure of the reader under test.
    struct Script(std::collections::VecDeque<std::io::Result<&'static [u8]>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let step = self.0.pop_front().expect("read past the script")?;
            buf[..step.len()].copy_from_slice(step);
            Ok(step.len())
        }
    }

    #[test]
    fn the_text_reader_retries_interrupted_reads_and_stops_when_drained() {
        use std::io::Error as IoError;
        let stop = AtomicBool::new(true);
        let script = Script(
            [
                Err(IoError::from(ErrorKind::Interrupted)),
                Ok(&b"xvmm-9 [001] d..1. 100: kvm_exit: vcpu 0 reason io rip 0x1\n"[..]),
                Ok(&b"xvmm-9 [001] d..1. 130: kvm_entry: vcpu 0, rip 0x1\n"[..]),
                Err(IoError::from(ErrorKind::WouldBlock)),
            ]
            .into(),
        );
        let (agg, reader) = read_text(script, &stop, "why".into()).unwrap();
        assert_eq!(reader, TraceReader::Text { why: "why".into() });
        let io = &agg.summary()[0];
        assert_eq!((io.reason.as_str(), io.exit_to_entry.min), ("io", 30));
        // A real error ends the reader with it, not retried.
        let failing = Script([Err(IoError::other("gone"))].into());
        let e = read_text(failing, &stop, String::new()).unwrap_err();
        assert_eq!(e.to_string(), "gone");
        let e = reader_result(Some(Ok(Err(e)))).err().unwrap();
        assert_eq!(
            e.to_string(),
            Error::Tracing("reading the trace: gone".into()).to_string()
        );
        let e = reader_result(None).err().unwrap();
        assert!(e.to_string().contains("trace reader thread failed"), "{e}");
    }

    #[test]
    fn the_raw_reader_waits_for_stop_and_counts_corrupt_pages() {
        use std::io::Write;
        let decoder = example_decoder().unwrap();
        let (r0, _w0) = nonblocking_pipe();
        let (r1, mut w1) = nonblocking_pipe();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || read_raw(&decoder, &mut [r0, r1], &stop))
        };
        // Nothing to read yet: the reader keeps waiting.
        std::thread::sleep(Duration::from_millis(50));
        w1.write_all(&[0; 8]).unwrap(); // too short for a page header
        stop.store(true, Ordering::Release);
        let (agg, reader) = reader.join().unwrap().unwrap();
        assert_eq!(reader, TraceReader::Raw { corrupt_pages: 1 });
        // The page's loss is marked, without a count.
        let done = agg.finish(0);
        assert_eq!((done.lost, done.trace.lost), (0, vec![(0, u64::MAX)]));
    }

    /// A directory laid out like an instance's `per_cpu`, stats as the
    /// kernel prints them.
    #[test]
    fn lost_events_sum_every_cpus_overruns() {
        let dir = std::env::temp_dir().join(format!("xvmm-overrun-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(lost_events(&dir), 0);
        for (cpu, overrun) in [(0, 3), (1, 0), (2, 40)] {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            fs::create_dir_all(&d).unwrap();
            let stats = format!("entries: 5\noverrun: {overrun}\ncommit overrun: 7\nbytes: 96\n");
            fs::write(d.join("stats"), stats).unwrap();
        }
        assert_eq!(lost_events(&dir), 43);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_instance_counts_as_removed_once_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("xvmm-remove-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("busy/inside")).unwrap();
        fs::create_dir_all(dir.join("empty")).unwrap();
        assert!(remove_instance(&dir.join("empty")));
        assert!(!dir.join("empty").exists());
        // Already gone (removed by another start): nothing left to undo.
        assert!(remove_instance(&dir.join("empty")));
        // Refused (like an instance with a file open): still recorded.
        assert!(!remove_instance(&dir.join("busy")));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A private instance for a test, removed again when dropped.
    struct TestInstance(PathBuf, Change);

    impl Drop for TestInstance {
        fn drop(&mut self) {
            let _ = fs::write(self.0.join("tracing_on"), "0");
            let _ = fs::write(self.0.join("events/raw_syscalls/sys_enter/enable"), "0");
            if fs::remove_dir(&self.0).is_ok() {
                journal::forget(&self.1);
            }
        }
    }

    /// Tests that touch tracefs start where a fresh machine does: in a
    /// private mount namespace without tracefs (nothing leaks to the host).
    fn fresh_tracefs() -> FsUse {
        xvmm_results::host_state::namespace::enter_private_mount_namespace()
            .expect("the suite runs as root: a private mount namespace");
        tracefs().expect("tracefs mounts in the private namespace")
    }

    /// getppid calls of this thread, alternating between the CPUs so the
    /// per-CPU streams have to be merged.
    fn syscalls_on_every_cpu(rounds: usize) {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        for round in 0..rounds {
            // SAFETY: a cpu_set_t on the stack, this thread's own affinity.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(round % cpus, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
            for _ in 0..200 {
                // SAFETY: getppid has no arguments and cannot fail.
                unsafe { libc::getppid() };
            }
        }
        crate::affinity::unpin_helper_thread();
    }

    /// (ts, pid, syscall number) of every sys_enter in the text `trace`.
    fn text_sys_enters(instance: &Path) -> Vec<(u64, i32, i64)> {
        let text = fs::read_to_string(instance.join("trace")).unwrap();
        text.lines()
            .filter_map(xvmm_results::tracefs::parse_record)
            .filter_map(|r| {
                let nr = r.body.strip_prefix("sys_enter: NR ")?.split(' ').next()?;
                Some((r.ts, r.pid, nr.parse().ok()?))
            })
            .collect()
    }

    /// The same from every CPU's `trace_pipe_raw`, merged by time.
    fn raw_sys_enters(instance: &Path) -> Vec<(u64, i32, i64)> {
        use xvmm_results::tracefs_raw::{EventFormat, Page, PageLayout};
        let events = instance.join("events");
        let header = raw::read_in_one(&events.join("header_page")).unwrap();
        let layout = PageLayout::parse(&header).unwrap();
        let format = fs::read_to_string(events.join("raw_syscalls/sys_enter/format")).unwrap();
        let format = EventFormat::parse(&format).unwrap();
        let mut pipes = open_cpu_pipes(instance).unwrap();
        let mut merge = CpuMerge::new(pipes.len());
        let mut page = vec![0; layout.page_size()];
        for (cpu, pipe) in pipes.iter_mut().enumerate() {
            drain_pipe(pipe, &mut page, |bytes| {
                let page = Page::parse(&layout, bytes).unwrap();
                for r in page.records() {
                    let r = r.unwrap();
                    assert_eq!(r.id(), Some(format.id));
                    let pid = i32::try_from(format.signed("common_pid", r.data).unwrap()).unwrap();
                    let nr = format.signed("id", r.data).unwrap();
                    merge.push(cpu, r.ts, (r.ts, pid, nr));
                }
            })
            .unwrap();
        }
        let mut out = Vec::new();
        merge.release_all(|e| out.push(e));
        out
    }

    /// The binary pages of a real tracefs instance against its text: the
    /// same raw_syscalls:sys_enter events, times, threads and numbers.
    #[test]
    fn raw_pages_decode_the_events_the_text_trace_shows() {
        let tracefs = fresh_tracefs();
        let name = format!("xvmm-{}-rawtest", std::process::id());
        let (path, recorded) = make_instance(tracefs.root(), &name).unwrap();
        let instance = TestInstance(path, recorded);
        let i = &instance.0;
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        write_file(&i.join("trace_clock"), "x86-tsc").unwrap();
        let event = i.join("events/raw_syscalls/sys_enter");
        write_file(&event.join("filter"), &format!("common_pid == {tid}")).unwrap();
        write_file(&event.join("enable"), "1").unwrap();
        write_file(&i.join("tracing_on"), "1").unwrap();
        syscalls_on_every_cpu(20);
        write_file(&i.join("tracing_on"), "0").unwrap();
        // `trace` leaves the buffer as it is; the pipes then consume it.
        let text = text_sys_enters(i);
        let raw = raw_sys_enters(i);
        let getppid = raw.iter().filter(|e| e.2 == libc::SYS_getppid).count();
        assert!(getppid >= 20 * 200, "{getppid} getppid calls decoded");
        assert!(raw.iter().all(|e| e.1 == tid));
        assert_eq!(raw.len(), text.len());
        assert_eq!(raw, text);
        println!("{} sys_enter events: binary and text agree", raw.len());
    }

    /// Needs root and tracefs (both present on the build machines): the
    /// instance is created, configured with the x86-tsc clock, and removed again,
    /// leaving the global trace clock untouched.
    #[test]
    fn instance_is_private_and_removed() {
        let tracefs = fresh_tracefs();
        let root = tracefs.root();
        let global_clock = fs::read_to_string(root.join("trace_clock")).unwrap();
        let tracer = ExitTracer::start(&[i32::try_from(std::process::id()).unwrap()]).unwrap();
        let path = tracer.instance_path().to_path_buf();
        let clock = fs::read_to_string(path.join("trace_clock")).unwrap();
        assert!(clock.contains("[x86-tsc]"), "instance clock: {clock}");
        let summary = tracer.finish().unwrap();
        assert!(summary.exits.is_empty(), "no vCPU ran, no exits expected");
        if std::env::var_os("XVMM_TRACE_TEXT").is_none() {
            assert_eq!(summary.reader, TraceReader::Raw { corrupt_pages: 0 });
        }
        assert!(!path.exists(), "instance not removed");
        // Only hosts with CONFIG_KVM_ASYNC_PF have these tracepoints.
        let async_pf = AsyncPfEvent::ALL
            .iter()
            .all(|e| root.join("events/kvm").join(e.tracepoint()).is_dir());
        assert_eq!(summary.async_pf_traced, async_pf);
        assert_eq!(summary.lost, 0);
        assert_eq!(
            fs::read_to_string(root.join("trace_clock")).unwrap(),
            global_clock
        );
        let journal = journal::dir().join(format!("journal-{}.json", std::process::id()));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(journal).unwrap_or_default();
        assert!(
            !text.contains(&format!("\"{name}\"")),
            "still recorded: {text}"
        );
        drop(tracefs);
        let table = xvmm_results::host_state::mounts::mount_table().unwrap();
        assert!(
            table.iter().all(|m| m.fstype != "tracefs"),
            "the mount this test's namespace made goes with its last user"
        );
    }
}
