//! Events into figures: exits paired with their entries per thread, the
//! calibration exits, offset rewrites and lost windows.

use super::parse::{AsyncPfEvent, TraceEvent};
use std::collections::BTreeMap;
use xvmm_results::attribution::{HostExitEvent, HostTrace};
use xvmm_results::channel::PORT_CALIBRATE;
use xvmm_results::stats::value_counts::ValueCounts;
use xvmm_results::timeline::OffsetChange;
use xvmm_results::HostExit;

/// Exits kept per run for attribution; past it the rest of the run is
/// marked lost (at 5-6 bytes an exit in the log, about 200 MiB).
pub const MAX_KEPT_EXITS: usize = 32 << 20;
/// Async page fault events kept per run (16 bytes each, 128 MiB).
pub const MAX_KEPT_ASYNC_PF: usize = 8 << 20;

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

/// Each thread's exit waiting for its entry. The trace is filtered to the
/// VM's vCPU threads, so there are a few, and a list searched from the
/// newest is quicker than a map (issue 38: the reader's rate).
#[derive(Debug, Default)]
struct PendingExits(Vec<(i32, Pending)>);

impl PendingExits {
    fn get_mut(&mut self, tid: i32) -> Option<&mut Pending> {
        self.0
            .iter_mut()
            .rev()
            .find(|(t, _)| *t == tid)
            .map(|(_, p)| p)
    }

    /// Holds `p` for `tid`; whether it replaced an exit still waiting.
    fn insert(&mut self, tid: i32, p: Pending) -> bool {
        match self.get_mut(tid) {
            Some(held) => {
                *held = p;
                true
            }
            None => {
                self.0.push((tid, p));
                false
            }
        }
    }

    fn remove(&mut self, tid: i32) -> Option<Pending> {
        let at = self.0.iter().rposition(|(t, _)| *t == tid)?;
        Some(self.0.swap_remove(at).1)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// The name of the last reason id, shared by every reason past the first
/// `u16::MAX` (kernels have a few dozen).
pub const OTHER_REASONS: &str = "(reasons past the first 65535)";

/// Pairs each exit with the next entry of the same thread, groups the
/// exit-to-entry times by exit reason, and keeps every exit for attribution.
#[derive(Default, Debug)]
pub struct ExitAggregator {
    pending: PendingExits,
    reason_ids: foldhash::HashMap<String, u16>,
    /// The last reason seen and its id: the binary reader hands the same
    /// shared name for every exit of a reason, so most lookups end here.
    last_reason: Option<(std::sync::Arc<str>, u16)>,
    /// Lookups in `reason_ids` (what the shared name saves).
    reason_lookups: u64,
    /// Exit-to-entry times by reason, counted, not kept (a run can have
    /// tens of millions).
    by_reason: BTreeMap<u16, ValueCounts>,
    /// How many exits the log keeps; [`MAX_KEPT_EXITS`] but in tests.
    keep_at_most: Option<usize>,
    trace: HostTrace,
    calibrations: Vec<HostCalibration>,
    offset_changes: Vec<OffsetChange>,
    async_pf: Vec<(AsyncPfEvent, u64)>,
    /// Each CPU's latest event time (index: CPU): a loss on a CPU happened
    /// after its own last event, however far other CPUs' events ran ahead.
    cpu_latest: Vec<u64>,
    /// A lost window waiting for its end (the next event of any CPU).
    lost_since: Option<u64>,
    lost: u64,
    /// A loss was marked without its count (a page's missed-events flag
    /// with no room for the count, or a page that did not decode).
    lost_uncounted: bool,
    /// Exits never followed by an entry, or entries without an exit.
    pub unpaired: u64,
}

/// CPUs whose latest times are kept, as many as a kernel can have
/// (`NR_CPUS` is at most 8192); a loss on a CPU past them opens its window
/// at 0, as on a CPU not seen yet.
const MAX_CPUS: usize = 8192;

impl ExitAggregator {
    /// An event of a stream whose CPUs are not told apart (one CPU's): a
    /// loss opens its window after the stream's last event.
    pub fn push(&mut self, event: TraceEvent) {
        self.push_on(0, event);
    }

    /// An event that CPU `cpu` recorded, in the stream merged by time: a
    /// loss on `cpu` opens its window after that CPU's last event.
    pub fn push_on(&mut self, cpu: usize, event: TraceEvent) {
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
            self.set_latest(cpu, ts);
        }
        match event {
            TraceEvent::Exit {
                tid,
                vcpu,
                ts,
                reason,
            } => {
                let id = match &self.last_reason {
                    Some((last, id)) if std::sync::Arc::ptr_eq(last, &reason) => *id,
                    _ => {
                        let id = self.reason_id(&reason);
                        self.last_reason = Some((reason, id));
                        id
                    }
                };
                self.exit(tid, vcpu, ts, id)
            }
            TraceEvent::Entry { tid, ts, .. } => self.entry(tid, ts),
            TraceEvent::Pio {
                tid,
                write: true,
                port,
                value,
            } => {
                if let Some(p) = self.pending.get_mut(tid) {
                    p.pio_write = Some((port, value));
                }
            }
            TraceEvent::Pio { .. } => {}
            TraceEvent::TscOffset { ts, offset, .. } => self.offset_changes.push(OffsetChange {
                host_tsc: ts,
                offset,
            }),
            TraceEvent::AsyncPf { kind, ts } => {
                if self.async_pf.len() < MAX_KEPT_ASYNC_PF {
                    self.async_pf.push((kind, ts));
                }
            }
            TraceEvent::Lost { count } => {
                self.lost += count;
                self.lost_uncounted |= count == 0;
                // The exits in flight may have lost their entries.
                self.unpaired += self.pending.len() as u64;
                self.pending.clear();
                // A CPU not seen yet may have lost events from the start.
                let since = self.cpu_latest.get(cpu).copied().unwrap_or(0);
                self.lost_since = Some(self.lost_since.map_or(since, |s| s.min(since)));
            }
        }
    }

    fn set_latest(&mut self, cpu: usize, ts: u64) {
        if cpu >= self.cpu_latest.len() && cpu < MAX_CPUS {
            self.cpu_latest.resize(cpu + 1, 0);
        }
        if let Some(latest) = self.cpu_latest.get_mut(cpu) {
            *latest = ts;
        }
    }

    fn reason_id(&mut self, reason: &str) -> u16 {
        self.reason_lookups += 1;
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

    fn exit(&mut self, tid: i32, vcpu: u32, ts: u64, reason: u16) {
        let replaced = self.pending.insert(
            tid,
            Pending {
                ts,
                vcpu,
                reason,
                pio_write: None,
            },
        );
        if replaced {
            self.unpaired += 1;
        }
    }

    fn entry(&mut self, tid: i32, ts: u64) {
        let Some(p) = self.pending.remove(tid).filter(|p| ts >= p.ts) else {
            self.unpaired += 1;
            return;
        };
        self.by_reason.entry(p.reason).or_default().push(ts - p.ts);
        let keep_at_most = self.keep_at_most.unwrap_or(MAX_KEPT_EXITS);
        if let Some((PORT_CALIBRATE, index)) = p.pio_write {
            self.calibrations.push(HostCalibration {
                index,
                exit: p.ts,
                entry: ts,
            });
        }
        if self.trace.exits.len() < keep_at_most {
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
                exit_to_entry: ticks.stats(),
            })
            .collect();
        exits.sort_by_key(|e| std::cmp::Reverse(e.exit_to_entry.count));
        exits
    }

    /// Everything collected, once the trace has ended; `lost` is what the
    /// ring buffer's overrun counters counted (see [`Self::finish_counted`]).
    pub fn finish(self, lost: u64) -> TraceSummary {
        self.finish_counted(lost, 0)
    }

    /// Everything collected, once the trace has ended. `overrun`: what the
    /// overrun counters counted, losses the kernel marks on the page after
    /// them; `unmarked`: losses no page marks (events dropped, commit
    /// overruns). Overruns beyond what the stream marked (when every mark
    /// had its count), and every unmarked loss, fell where nobody can say:
    /// the whole run is then one lost window.
    pub fn finish_counted(mut self, overrun: u64, unmarked: u64) -> TraceSummary {
        if let Some(from) = self.lost_since.take() {
            self.trace.lost.push((from, u64::MAX));
        }
        let unmarked_overruns = if self.lost_uncounted {
            0
        } else {
            overrun.saturating_sub(self.lost)
        };
        let lost_unplaced = unmarked_overruns.saturating_add(unmarked);
        if lost_unplaced > 0 {
            self.trace.lost = vec![(0, u64::MAX)];
        }
        TraceSummary {
            exits: self.summary(),
            unpaired: self.unpaired,
            lost: overrun.max(self.lost).saturating_add(unmarked),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // Dropped events no page marks, even beside a mark without its
        // count: they fell anywhere.
        let mut agg = run();
        agg.push(TraceEvent::Lost { count: 0 });
        agg.push(exit(1, 400, "io"));
        let done = agg.finish_counted(3, 2);
        assert_eq!((done.lost, done.lost_unplaced), (5, 2));
        assert_eq!(done.trace.lost, [(0, u64::MAX)]);
    }

    /// Events merged from two CPUs: a loss opens its window after its own
    /// CPU's last event; a CPU with none yet may have lost from the start;
    /// two losses before the next event share the earlier start.
    #[test]
    fn a_loss_opens_its_window_after_its_own_cpus_last_event() {
        let mut agg = ExitAggregator::default();
        agg.push_on(0, exit(1, 100, "io"));
        agg.push_on(0, entry(1, 110));
        agg.push_on(1, exit(2, 200, "io"));
        agg.push_on(1, entry(2, 400));
        agg.push_on(0, TraceEvent::Lost { count: 4 });
        agg.push_on(0, exit(1, 500, "io"));
        agg.push_on(1, exit(2, 600, "io"));
        agg.push_on(1, TraceEvent::Lost { count: 1 });
        agg.push_on(0, TraceEvent::Lost { count: 1 });
        agg.push_on(1, entry(2, 700));
        agg.push_on(2, TraceEvent::Lost { count: 2 });
        agg.push_on(2, exit(3, 800, "io"));
        agg.push_on(MAX_CPUS + 1, TraceEvent::Lost { count: 1 });
        agg.push_on(0, entry(1, 900));
        assert_eq!(
            agg.finish(9).trace.lost,
            [(110, 500), (500, 700), (0, 800), (0, 900)]
        );
    }

    /// A CPU seen earlier keeps its latest time when a lower-numbered CPU
    /// is seen after it; a CPU past the cap has none.
    #[test]
    fn each_cpus_latest_time_survives_the_others() {
        let mut agg = ExitAggregator::default();
        agg.push_on(3, exit(1, 1000, "io"));
        agg.push_on(0, entry(1, 1100));
        agg.push_on(3, TraceEvent::Lost { count: 1 });
        agg.push_on(0, exit(1, 1200, "io"));
        agg.push_on(MAX_CPUS, entry(1, 1300));
        agg.push_on(MAX_CPUS, TraceEvent::Lost { count: 1 });
        agg.push_on(0, exit(1, 1400, "io"));
        assert_eq!(agg.finish(0).trace.lost, [(1000, 1200), (0, 1400)]);
    }

    /// The reader hands one shared name per reason: exits of the same
    /// reason in a row look it up once.
    #[test]
    fn a_repeated_shared_reason_is_looked_up_once() {
        let mut agg = ExitAggregator::default();
        let io: std::sync::Arc<str> = "io".into();
        for ts in [100, 300, 500] {
            agg.push(TraceEvent::Exit {
                tid: 1,
                vcpu: 0,
                ts,
                reason: io.clone(),
            });
            agg.push(entry(1, ts + 50));
        }
        assert_eq!(agg.reason_lookups, 1);
        agg.push(exit(1, 700, "io"));
        assert_eq!(agg.reason_lookups, 2, "another name of the same text");
        let done = agg.finish(0);
        assert_eq!(done.exits.len(), 1);
        assert_eq!(done.exits[0].exit_to_entry.count, 3);
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

    /// Many threads' exits wait at once and are entered in another order
    /// than they came: each entry pairs with its own thread's exit, and
    /// taking one out leaves the others waiting.
    #[test]
    fn each_threads_entry_pairs_with_its_own_exit_among_many_waiting() {
        let mut agg = ExitAggregator::default();
        for tid in 1..=40 {
            agg.push(exit(tid, 1000 + 10 * u64::from(tid.unsigned_abs()), "io"));
        }
        for tid in [7, 40, 1, 23, 2, 39] {
            agg.push(entry(tid, 5000 + u64::from(tid.unsigned_abs())));
        }
        assert_eq!((agg.pending.len(), agg.unpaired), (34, 0));
        agg.push(entry(7, 6000)); // its exit was taken: unpaired
        agg.push(exit(23, 7000, "hlt"));
        agg.push(entry(23, 7100));
        let done = agg.finish(0);
        let times: Vec<(u64, u64)> = done.trace.exits.iter().map(|e| (e.exit, e.entry)).collect();
        assert_eq!(
            times,
            [
                (1070, 5007),
                (1400, 5040),
                (1010, 5001),
                (1230, 5023),
                (1020, 5002),
                (1390, 5039),
                (7000, 7100)
            ]
        );
        assert_eq!(done.unpaired, 1);
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
        agg.async_pf = vec![(AsyncPfEvent::Completed, 0); MAX_KEPT_ASYNC_PF];
        agg.push(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::Ready,
            ts: 30,
        });
        assert_eq!(agg.async_pf.len(), MAX_KEPT_ASYNC_PF);
        assert_eq!(agg.cpu_latest, [30]);
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
        agg.keep_at_most = Some(3);
        agg.trace.exits = vec![kept; 3].into();
        agg.push(exit(1, 100, "io"));
        agg.push(entry(1, 150));
        agg.push(exit(1, 200, "io"));
        agg.push(entry(1, 260));
        assert_eq!(agg.trace.exits.len(), 3);
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
}
