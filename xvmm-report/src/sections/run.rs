//! One section per result file: its summary, crossings and their
//! distributions, host exits, characterisation, workload, notes and machine.

use super::bins::distribution;
use super::{column, or_dash, MAX_DISTRIBUTIONS, TICKS};
use crate::charts;
use crate::Input;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart};
use xvmm_results::render::{self, machine_facts};
use xvmm_results::{Characterization, Crossing, Interval, Report, Sample, Stats, Status};

/// One measured segment of a report: label, statistics, raw values if kept.
pub(super) struct Segment {
    label: String,
    stats: Stats,
    raw: Option<Vec<u64>>,
}

pub(super) type IntervalOf = fn(&Crossing) -> &Option<Interval>;

pub(super) type ValueOf = fn(&Sample) -> u64;

pub(super) const CROSSING_SEGMENTS: [(&str, IntervalOf, ValueOf); 4] = [
    ("u2k", |c| &c.u2k, Sample::u2k),
    ("k2u", |c| &c.k2u, Sample::k2u),
    ("in kernel", |c| &c.in_kernel, Sample::in_kernel),
    ("round trip", |c| &c.round_trip, Sample::round_trip),
];

/// The first `limit` crossing segments and exit round trips with samples,
/// in order, and how many there are in all.
pub(super) fn segments(r: &Report, limit: usize) -> (Vec<Segment>, usize) {
    let null = r.null_overhead.median;
    let measured = |i: &Option<Interval>| i.as_ref().is_some_and(|i| i.corrected.count > 0);
    let total = r
        .crossings
        .iter()
        .map(|c| {
            CROSSING_SEGMENTS
                .iter()
                .filter(|(_, interval, _)| measured(interval(c)))
                .count()
        })
        .sum::<usize>()
        + r.exits.iter().filter(|e| measured(&e.round_trip)).count();
    let mut out = Vec::new();
    for c in &r.crossings {
        if out.len() >= limit {
            break;
        }
        let valid: Option<Vec<&Sample>> = c
            .samples
            .as_ref()
            .filter(|_| c.status == Status::Measured)
            .map(|s| s.iter().filter(|s| s.validate().is_ok()).collect());
        for (name, interval, value) in CROSSING_SEGMENTS {
            let Some(i) = interval(c).as_ref().filter(|i| i.corrected.count > 0) else {
                continue;
            };
            // Each segment subtracts its own stamp cost; files written before
            // per-kind corrections subtracted the one null from everything.
            let correction = i.correction.unwrap_or(null);
            let stats = i.corrected.clone();
            let raw = valid.as_ref().map(|v| {
                v.iter()
                    .map(|s| value(s).saturating_sub(correction))
                    .collect()
            });
            out.push(Segment {
                label: format!("{} {name}", c.name),
                stats,
                raw,
            });
        }
    }
    for e in &r.exits {
        if let Some(stats) = e
            .round_trip
            .as_ref()
            .map(|i| i.corrected.clone())
            .filter(|s| s.count > 0)
        {
            out.push(Segment {
                label: format!("exit {} round trip", e.name),
                stats,
                raw: None,
            });
        }
        if out.len() >= limit {
            break;
        }
    }
    out.truncate(limit);
    (out, total)
}

/// A range bar: min to p99, the median as a dot, a whisker to the max.
pub(super) fn range_bar(label: String, s: &Stats) -> Bar {
    Bar {
        label,
        series: 0,
        from: Some(s.min as f64),
        to: s.p99 as f64,
        mark: Some(s.median as f64),
        whisker: Some(s.max as f64),
    }
}

pub(super) fn report_section(i: usize, input: &Input) -> Section {
    let r = &input.report;
    let mut blocks = vec![Block::Paragraph(summary(r))];
    blocks.extend(warnings(r).into_iter().map(Block::Paragraph));
    let (segs, total) = segments(r, charts::MAX_ROWS.max(MAX_DISTRIBUTIONS) + 1);
    if !segs.is_empty() {
        blocks.push(Block::Chart(Chart::Bars(BarChart {
            caption: "Every segment: min to p99, median dot, whisker to the max".into(),
            unit: TICKS.into(),
            series: vec![],
            bars: segs
                .iter()
                .map(|s| range_bar(s.label.clone(), &s.stats))
                .collect(),
            reference: None,
            omitted: total - segs.len(),
        })));
        blocks.push(Block::Subheading("Distributions".into()));
        let shown = segs.len().min(MAX_DISTRIBUTIONS);
        blocks.push(Block::Grid(
            segs[..shown]
                .iter()
                .map(|s| Chart::Histogram(distribution(&s.label, &s.stats, s.raw.as_deref())))
                .collect(),
        ));
        if total > shown {
            blocks.push(Block::Paragraph(format!(
                "(the first {shown} of {total} distributions)"
            )));
        }
    }
    crossing_blocks(r, &mut blocks);
    super::attribution::timeline_blocks(r, &mut blocks);
    super::async_pf::async_pf_blocks(r, &mut blocks);
    host_exit_blocks(r, &mut blocks);
    if let Some(c) = &r.characterize {
        characterize_blocks(c, &mut blocks);
    }
    if let Some(w) = &r.workload {
        super::workload::workload_blocks(w, r.host.tsc_khz, &mut blocks);
    }
    if !r.notes.is_empty() {
        blocks.push(Block::Subheading("Notes".into()));
        blocks.push(Block::List(
            r.notes.iter().take(MAX_TABLE_ROWS).cloned().collect(),
        ));
    }
    if let Some(m) = &r.machine {
        blocks.push(Block::Subheading("Machine".into()));
        let facts = machine_facts(m);
        let total = facts.len();
        let rows: Vec<Vec<Cell>> = facts
            .into_iter()
            .take(MAX_TABLE_ROWS)
            .map(|(k, v)| vec![Cell::from(k), Cell::from(v)])
            .collect();
        capped(
            Table {
                header: vec!["fact".into(), "value".into()],
                rows: rows.into_iter().map(Row::Cells).collect(),
                numeric: false,
            },
            total,
            &mut blocks,
        );
    }
    Section {
        id: format!("file-{}", i + 1),
        title: format!("{}: {}", column(i, input), r.environment.describe()),
        blocks,
    }
}

/// The report's own warnings about its figures: each crossing whose round
/// trip with the hooks on and off differs from what the hooks' sequences
/// add by more than the noise.
pub(super) fn warnings(r: &Report) -> Vec<String> {
    r.stamp_costs
        .iter()
        .flat_map(|c| &c.hooks)
        .filter_map(|h| h.warning.as_ref())
        .map(|w| format!("Warning: {w}"))
        .collect()
}

/// What the report's timings had subtracted: older reports the null
/// overhead from everything, newer ones each interval's own stamps, the user
/// pair's being the null pair or its sweep's intercept.
pub(super) fn subtracted(r: &Report) -> String {
    match r.stamp_costs.as_ref() {
        None => " subtracted from every timing".into(),
        Some(c) => match c.user_sweep.as_ref().filter(|s| s.intercept_used) {
            Some(s) => format!(
                "; each timing minus its own stamps' cost, the user pair's being its linearity \
                 sweep's intercept, {} ticks (the null pair is {:+.1} off)",
                s.correction, s.bias
            ),
            None => format!(
                "; each timing minus its own stamps' cost (user pair {})",
                c.user_cost()
            ),
        },
    }
}

pub(super) fn summary(r: &Report) -> String {
    let n = &r.null_overhead;
    if r.workload.is_some() && r.crossings.is_empty() {
        // `xperf workload`: a trace of a command, no stamps taken.
        return format!(
            "{} on {} ({} kHz TSC, hypervisor {}, kernel {}): times are ticks of the x86-tsc \
             trace clock.",
            r.tool,
            or_dash(&r.host.cpu_model),
            r.host.tsc_khz,
            if r.host.hypervisor_signature.is_empty() {
                "none seen".into()
            } else {
                format!("{:?}", r.host.hypervisor_signature)
            },
            or_dash(&r.host.kernel_release),
        );
    }
    format!(
        "{} on {} ({} kHz TSC, hypervisor {}, kernel {}). {} samples per row after {} warm-up; stamps {} .. {}; null overhead median {} (min {}, p99 {}, {} samples){}.",
        r.tool,
        or_dash(&r.host.cpu_model),
        r.host.tsc_khz,
        if r.host.hypervisor_signature.is_empty() { "none seen".into() } else { format!("{:?}", r.host.hypervisor_signature) },
        or_dash(&r.host.kernel_release),
        r.method.samples_requested,
        r.method.warmup,
        r.method.stamp_begin,
        r.method.stamp_end,
        n.median,
        n.min,
        n.p99,
        n.count,
        subtracted(r)
    )
}

pub(super) fn crossing_blocks(r: &Report, blocks: &mut Vec<Block>) {
    let quantum = render::quantum_of(r);
    if !r.crossings.is_empty() {
        blocks.push(Block::Subheading("Crossings".into()));
        let t = render::crossings_of(&r.crossings, r.host.tsc_khz, quantum);
        capped(t, r.crossings.len(), blocks);
    }
    if !r.exits.is_empty() {
        blocks.push(Block::Subheading("VM exits timed in the guest".into()));
        capped(
            render::exits_of(&r.exits, r.host.tsc_khz),
            r.exits.len(),
            blocks,
        );
    }
}

pub(super) fn host_exit_blocks(r: &Report, blocks: &mut Vec<Block>) {
    if r.host_exits.is_empty() {
        return;
    }
    blocks.push(Block::Subheading(
        "Exits by reason (host kvm_exit -> kvm_entry)".into(),
    ));
    let bars = r
        .host_exits
        .iter()
        .filter(|e| e.exit_to_entry.count > 0)
        .map(|e| Bar {
            label: format!("{} ({}x)", e.reason, e.exit_to_entry.count),
            series: 0,
            from: None,
            to: e.exit_to_entry.median as f64,
            mark: None,
            whisker: Some(e.exit_to_entry.p99 as f64),
        })
        .collect();
    blocks.push(Block::Chart(Chart::Bars(BarChart {
        caption: "Host time per exit, median with a whisker to the p99".into(),
        unit: "host TSC ticks".into(),
        series: vec![],
        bars,
        reference: None,
        omitted: 0,
    })));
    capped(
        render::host_exits_of(&r.host_exits),
        r.host_exits.len(),
        blocks,
    );
}

pub(super) fn characterize_blocks(c: &Characterization, blocks: &mut Vec<Block>) {
    blocks.push(Block::Subheading(format!(
        "Characterization ({:.1} s{}, host {})",
        c.seconds,
        if c.privileged { ", as root" } else { "" },
        or_dash(&c.hostname)
    )));
    let timed: Vec<Bar> = c
        .metrics
        .iter()
        .filter(|m| m.unit == "ticks")
        .filter_map(|m| Some(range_bar(m.name.clone(), m.measured()?)))
        .collect();
    if !timed.is_empty() {
        blocks.push(Block::Chart(Chart::Bars(BarChart {
            caption: "Timed metrics: min to p99, median dot, whisker to the max".into(),
            unit: TICKS.into(),
            series: vec![],
            bars: timed,
            reference: None,
            omitted: 0,
        })));
    }
    capped(render::characterize_of(c), c.metrics.len(), blocks);
}

// ------------------------------------------------------------ distributions
