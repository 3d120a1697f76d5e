//! The recorded real trace under `benches/data/kvm_trace/`: every KVM event
//! of the nested harness's L1 host (real KVM, under QEMU TCG) during a
//! traced `xvmm --kernel` run of xperf, recorded by `l1-init
//! --record-trace` (see that directory's `record.sh`), with the run's
//! report (`report.json`, its samples kept). The ingestion benches decode
//! it, read it as text, and attribute its samples to its exits.

use crate::trace::decode_only;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use xvmm::host_trace::{replay_pages, Recording, TraceEvent, TraceSummary};
use xvmm_host::tracefs_raw::Page;
use xvmm_results::attribution::{HostExitEvent, HostTrace, SegmentHost};
use xvmm_results::timeline::Mapping;
use xvmm_results::{Report, Sample, UNFILLED};

/// `benches/data/kvm_trace`.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/kvm_trace")
}

/// The recording and the report of its run.
pub fn load() -> Result<(Recording, Report), String> {
    let dir = dir();
    let recording = Recording::load(&dir)?;
    let path = dir.join("report.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let report = Report::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((recording, report))
}

/// The recording's events as the text lines `trace_pipe` prints for them
/// (what the text reader reads; fields it does not read are placeholders),
/// CPU by CPU.
pub fn text(recording: &Recording) -> String {
    let mut text = String::new();
    for (cpu, page) in recording.pages() {
        recording.decoder.decode_page(page, |ts, ev| {
            let head = |tid: i32| format!("  xvmm-{tid}  [{cpu:03}] d..1. {ts}: ");
            let line = match ev {
                TraceEvent::Exit {
                    tid, vcpu, reason, ..
                } => format!(
                    "{}kvm_exit: vcpu {vcpu} reason {reason} rip 0xffffffff81000000 info1 \
                     0x0000000000000000 info2 0x0000000000000000 intr_info 0x00000000 \
                     error_code 0x00000000",
                    head(tid)
                ),
                TraceEvent::Entry { tid, vcpu, .. } => {
                    format!(
                        "{}kvm_entry: vcpu {vcpu}, rip 0xffffffff81000000",
                        head(tid)
                    )
                }
                TraceEvent::Pio {
                    tid,
                    write,
                    port,
                    value,
                } => format!(
                    "{}kvm_pio: pio_{} at 0x{port:x} size 4 count 1 val 0x{value:x}",
                    head(tid),
                    if write { "write" } else { "read" }
                ),
                TraceEvent::TscOffset { vcpu, offset, .. } => format!(
                    "{}kvm_write_tsc_offset: vcpu={vcpu} prev=0 next={}",
                    head(0),
                    offset.cast_unsigned()
                ),
                TraceEvent::Lost { count } => format!("CPU:{cpu} [LOST {count} EVENTS]"),
                TraceEvent::AsyncPf { .. } => return,
            };
            text.push_str(&line);
            text.push('\n');
        });
    }
    text
}

/// The thread CPU time of decoding every page `passes` times
/// ([`crate::trace::decode_only`]), and the events decoded (the fast path,
/// or the general one).
pub fn decode(recording: &Recording, passes: u64, general: bool) -> (u64, Duration) {
    let (mut events, mut took) = (0, Duration::ZERO);
    for _ in 0..passes {
        let pages = recording.pages().map(|(_, page)| page);
        let (n, d) = decode_only(&recording.decoder, pages, general);
        (events, took) = (events + n as u64, took + d);
    }
    (events, took)
}

/// The binary reader's whole work `passes` times (decode, merge the CPUs,
/// pair into exits): the exits paired and the wall time.
pub fn replay(recording: &Recording, passes: u64) -> (u64, Duration) {
    let start = Instant::now();
    let mut exits = 0;
    for _ in 0..passes {
        exits += recording.replay().aggregator.finish(0).trace.exits.len() as u64;
    }
    (exits, start.elapsed())
}

/// One run as long as `copies` of the recorded one: the recording's pages
/// `copies` times back to back, each copy's pages starting later by the
/// recording's span, as if the run had gone on.
pub struct TiledRun {
    /// Ticks from the first page's start to one past the last event.
    pub span: u64,
    /// One copy's exits, and its exits never paired.
    pub exits: u64,
    pub unpaired: u64,
}

impl TiledRun {
    /// The recording's span and what one copy pairs.
    pub fn of(recording: &Recording) -> TiledRun {
        let starts = recording
            .pages()
            .filter_map(|(_, p)| Page::parse(recording.decoder.layout(), p).ok());
        let first = starts.map(|p| p.timestamp).min().unwrap_or(0);
        let mut last = first;
        for (_, page) in recording.pages() {
            recording
                .decoder
                .decode_page(page, |ts, _| last = last.max(ts));
        }
        let one = recording.replay().aggregator.finish(0);
        TiledRun {
            span: last - first + 1,
            exits: one.trace.exits.len() as u64,
            unpaired: one.unpaired,
        }
    }

    /// The binary reader's whole work on the run of `copies` copies, read
    /// once (decode, merge the CPUs, pair, the summary); returns what it
    /// gave and the wall time. Each page is copied once as the live
    /// reader's read copies it.
    pub fn replay(&self, recording: &Recording, copies: u64) -> (TraceSummary, Duration) {
        let size = recording.decoder.page_size();
        let layout = recording.decoder.layout();
        let per_cpu: Vec<u64> = recording
            .cpus
            .iter()
            .map(|c| (c.len() / size) as u64)
            .collect();
        let mut next = vec![0u64; per_cpu.len()];
        let start = Instant::now();
        let replayed = replay_pages(&recording.decoder, per_cpu.len(), |cpu, page| {
            let (copy, at) = (
                next[cpu] / per_cpu[cpu].max(1),
                next[cpu] % per_cpu[cpu].max(1),
            );
            if per_cpu[cpu] == 0 || copy >= copies {
                return false;
            }
            next[cpu] += 1;
            let from = usize::try_from(at).unwrap_or(usize::MAX) * size;
            page.clear();
            page.extend_from_slice(&recording.cpus[cpu][from..from + size]);
            layout.shift_page(page, copy * self.span)
        });
        let summary = replayed.aggregator.finish(0);
        (summary, start.elapsed())
    }
}

/// The text reader's work on [`text`] `passes` times
/// ([`crate::trace::read_text`]): exits paired and the wall time.
pub fn read_text(text: &str, passes: u64) -> (u64, Duration) {
    (0..passes)
        .map(|_| crate::trace::read_text(text))
        .fold((0, Duration::ZERO), |(exits, took), run| {
            (exits + run.exits as u64, took + run.elapsed)
        })
}

/// The recorded run repeated back to back: its samples until there are at
/// least `samples`, its exits until there are at least `exits` (and at
/// least as many copies as of the samples, so that every copy's samples
/// meet their own exits). Each copy is shifted by the run's span, host and
/// guest time alike; the report's crossings keep their rejections and
/// request as many samples as they hold. Returns the report, the trace and
/// the mapping of the run.
pub fn tiled(
    recording: &Recording,
    report: &Report,
    samples: u64,
    exits: u64,
) -> (Report, HostTrace, Mapping) {
    let kept: u64 = report
        .crossings
        .iter()
        .map(|c| c.samples.as_ref().map_or(0, Vec::len) as u64)
        .sum();
    let copies = samples.div_ceil(kept.max(1));
    let (trace, first_copy) = tiled_exits(recording, exits, copies);
    let span = first_copy.1 - first_copy.0 + 1;
    let mut tiled = report.clone();
    for c in &mut tiled.crossings {
        let Some(kept) = c.samples.take() else {
            continue;
        };
        let len = kept.len() as u64;
        // An unfilled stamp stays unfilled.
        let at = |t: u64, by: u64| if t == UNFILLED { t } else { t + by };
        let shift = |s: &Sample, by: u64| Sample {
            u2k_u: at(s.u2k_u, by),
            u2k_k: at(s.u2k_k, by),
            k2u_k: at(s.k2u_k, by),
            k2u_u: at(s.k2u_u, by),
            ..*s
        };
        c.samples = Some(
            (0..copies)
                .flat_map(|copy| kept.iter().map(move |s| shift(s, copy * span)))
                .collect(),
        );
        // More samples than requested would be refused as untrusted.
        c.samples_requested *= copies;
        c.samples_valid *= copies;
        let rejected = c.samples_rejected.clone();
        c.samples_rejected = (0..copies)
            .flat_map(|copy| rejected.iter().map(move |i| i + copy * len))
            .collect();
    }
    let t = report.timeline.as_ref();
    let mapping = Mapping::unscaled(t.map_or(0, |t| t.offset));
    (tiled, trace, mapping)
}

/// The recorded exits (read by the binary reader) repeated back to back,
/// each copy shifted by the recording's span, until there are at least
/// `exits` and `copies` copies; with the first copy's first exit and last
/// entry.
pub fn tiled_exits(recording: &Recording, exits: u64, copies: u64) -> (HostTrace, (u64, u64)) {
    let one = recording.replay().aggregator.finish(0).trace;
    let list: Vec<HostExitEvent> = one.exits.iter().collect();
    let copies = exits.div_ceil(list.len().max(1) as u64).max(copies);
    let first = list.iter().map(|e| e.exit).min().unwrap_or(0);
    let last = list.iter().map(|e| e.entry).max().unwrap_or(0).max(first);
    let span = last - first + 1;
    let mut trace = HostTrace {
        reasons: one.reasons.clone(),
        ..HostTrace::default()
    };
    for copy in 0..copies {
        for e in &list {
            trace.exits.push(HostExitEvent {
                exit: e.exit + copy * span,
                entry: e.entry + copy * span,
                ..*e
            });
        }
    }
    (trace, (first, last))
}

/// Host ticks two tracefs instances may stamp one event apart under QEMU
/// TCG: each instance's buffer takes its own TSC read as the tracepoint
/// writes to it (the recording measured 1-9 k ticks per exit).
pub const INSTANCES_APART: u64 = 20_000;

/// Whether two attributions of one run's samples, from two captures of the
/// same exits, agree: the same samples with exits, the same exits by
/// reason, the same exit-free statistics, and host time within
/// [`INSTANCES_APART`] per exit. The first difference, if any.
pub fn same_attribution(live: &SegmentHost, other: &SegmentHost) -> Result<(), String> {
    let counts = |h: &SegmentHost| -> Vec<(String, u64)> {
        h.exits.iter().map(|(r, c)| (r.clone(), c.count)).collect()
    };
    let placed = |h: &SegmentHost| (h.samples, h.samples_with_exits, h.unattributable);
    if placed(live) != placed(other) || counts(live) != counts(other) {
        return Err(format!(
            "samples (all, with exits, unattributable) {:?} and {:?}, exits {:?} and {:?}",
            placed(live),
            placed(other),
            counts(live),
            counts(other)
        ));
    }
    if live.exit_free != other.exit_free {
        return Err("the exit-free statistics differ".into());
    }
    let exits: u64 = live.exits.values().map(|c| c.count).sum();
    let apart = live.host_ticks_total.abs_diff(other.host_ticks_total);
    if apart > exits * INSTANCES_APART {
        return Err(format!(
            "host time {} and {} ticks: {apart} apart over {exits} exits",
            live.host_ticks_total, other.host_ticks_total
        ));
    }
    Ok(())
}
