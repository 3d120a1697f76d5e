//! A workload in a VM against the same workload on bare metal: a waterfall
//! from bare metal's kernel time to the VM's, kind by kind and part by
//! part (more intervals, exits inside them, the rest), then the table the
//! terminal prints.

use xvmm_results::compare::{Comparison, DiffUnit};
use xvmm_results::document::{capped, Bar, BarChart, Block, Chart};
use xvmm_results::render::workload_compare::{largest_extra, workload_comparison_of};
use xvmm_results::stats::workload_compare::{KindComparison, WorkloadComparison};

/// Kinds drawn as their own steps; the rest are one step of "other kinds".
pub(super) const STEPPED_KINDS: usize = 12;

/// The waterfall's series: the two totals, then the three parts.
const SERIES: [&str; 4] = ["all kinds", "more or fewer intervals", "exits", "rest"];

/// The chart's unit, and how one figure of the comparison converts to it.
fn chart_unit(c: &Comparison) -> (String, f64) {
    match (c.diff_unit, c.vm_tsc_khz) {
        (DiffUnit::Ns, _) => ("ms".into(), 1e-6),
        (DiffUnit::Ticks, 0) => ("TSC ticks".into(), 1.0),
        (DiffUnit::Ticks, khz) => ("ms".into(), 1.0 / khz as f64),
    }
}

/// One step of each non-zero part of `parts` (count, exits, rest) from
/// `*at`, which moves to each step's end.
fn steps(label: &str, parts: [f64; 3], scale: f64, at: &mut f64, bars: &mut Vec<Bar>) {
    for (k, value) in parts.into_iter().enumerate() {
        if value == 0.0 {
            continue;
        }
        let from = *at;
        *at += value * scale;
        bars.push(Bar {
            label: format!("{label} · {}", SERIES[k + 1]),
            series: k + 1,
            from: Some(from),
            to: *at,
            mark: None,
            whisker: None,
        });
    }
}

fn total(label: &str, value: f64) -> Bar {
    Bar {
        label: label.into(),
        series: 0,
        from: None,
        to: value,
        mark: None,
        whisker: None,
    }
}

/// Bare metal's summed kernel time, then a step per part of the kinds with
/// the largest differences, then the VM's: the steps end where the VM's
/// bar does, since each kind's parts add up to its difference.
pub(super) fn waterfall(c: &Comparison, w: &WorkloadComparison) -> BarChart {
    let (unit, scale) = chart_unit(c);
    let mut kinds: Vec<&KindComparison> = w.rows.iter().collect();
    kinds.sort_by(|a, b| b.diff.abs().total_cmp(&a.diff.abs()));
    let bare: f64 = w.rows.iter().map(|r| r.bare_time).sum::<f64>() * scale;
    let vm: f64 = w.rows.iter().map(|r| r.vm_time).sum::<f64>() * scale;
    let mut bars = vec![total("bare metal", bare)];
    let mut at = bare;
    for r in kinds.iter().take(STEPPED_KINDS) {
        let parts = [r.count_part, r.exits_part, r.rest];
        steps(&r.label(), parts, scale, &mut at, &mut bars);
    }
    let others = &kinds[kinds.len().min(STEPPED_KINDS)..];
    if !others.is_empty() {
        let sum = |f: fn(&KindComparison) -> f64| others.iter().map(|r| f(r)).sum::<f64>();
        let parts = [
            sum(|r| r.count_part),
            sum(|r| r.exits_part),
            sum(|r| r.rest),
        ];
        let label = format!("{} other kinds", others.len());
        steps(&label, parts, scale, &mut at, &mut bars);
    }
    bars.push(total("VM", vm));
    BarChart {
        caption: format!(
            "Kernel time summed, bare metal to VM: a step per part of the {} kinds that differ most",
            STEPPED_KINDS.min(kinds.len())
        ),
        unit,
        series: SERIES.map(String::from).to_vec(),
        bars,
        reference: None,
        omitted: 0,
    }
}

/// How to read the waterfall and the table.
const READING: &str = "Each kind's time (a system call's on CPU) is summed over its intervals. \
The VM's extra time of a kind is split exactly into what more or fewer intervals add at bare \
metal's mean (not for time off CPU), the host's time of the exits inside the VM's intervals, and the rest: intervals \
that last longer with no exit inside (a guest's TLB and cache misses, two-level page walks, other \
work). An interrupt inside a system call is in both kinds' time, so the total counts it twice on \
both sides. Medians stand beside, not decomposed.";

/// The blocks of a workload comparison.
pub(super) fn workload_comparison_blocks(
    c: &Comparison,
    w: &WorkloadComparison,
    blocks: &mut Vec<Block>,
) {
    let mut summary = format!(
        "Workload {}: VM {}, bare metal {}. Wall time: VM {}, bare metal {}.",
        w.vm_command.join(" "),
        w.vm_ended,
        w.bare_ended,
        xvmm_results::render::workload_compare::in_ms(c, w.vm_wall),
        xvmm_results::render::workload_compare::in_ms(c, w.bare_wall),
    );
    if let Some(line) = largest_extra(c, w) {
        summary += &format!(" {}{}.", line[..1].to_uppercase(), &line[1..]);
    }
    blocks.push(Block::Paragraph(summary));
    blocks.push(Block::Paragraph(READING.into()));
    blocks.push(Block::Chart(Chart::Bars(waterfall(c, w))));
    capped(
        workload_comparison_of(c, w, usize::MAX),
        w.rows.len(),
        blocks,
    );
    if !w.notes.is_empty() {
        blocks.push(Block::List(w.notes.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str, parts: [f64; 3], bare_time: f64) -> KindComparison {
        let diff: f64 = parts.iter().sum();
        KindComparison {
            family: "syscall".into(),
            name: name.into(),
            vm_time: bare_time + diff,
            bare_time,
            diff,
            count_part: parts[0],
            exits_part: parts[1],
            rest: parts[2],
            ..KindComparison::default()
        }
    }

    fn comparison(rows: Vec<KindComparison>) -> Comparison {
        Comparison {
            schema: String::new(),
            schema_version: 0,
            vm_tool: String::new(),
            bare_metal_tool: String::new(),
            diff_unit: DiffUnit::Ticks,
            vm_tsc_khz: 1000,
            bare_tsc_khz: 1000,
            rows: vec![],
            notes: vec![],
            probes: vec![],
            workload: Some(WorkloadComparison {
                rows,
                ..WorkloadComparison::default()
            }),
        }
    }

    /// The steps start at bare metal's bar, each at the last one's end, and
    /// the last ends at the VM's bar; the kinds past the stepped ones are one
    /// step.
    #[test]
    fn the_waterfall_walks_from_bare_metal_to_the_vm() {
        let mut rows: Vec<KindComparison> = (0..15)
            .map(|i| {
                kind(
                    &format!("k{i}"),
                    [100.0, 50.0 * f64::from(i), -20.0],
                    1000.0,
                )
            })
            .collect();
        rows.push(kind("zero", [0.0, 0.0, 0.0], 10.0));
        let c = comparison(rows);
        let chart = waterfall(&c, c.workload.as_ref().unwrap());
        let bars = &chart.bars;
        assert_eq!(chart.unit, "ms");
        let first = bars.first().unwrap();
        let last = bars.last().unwrap();
        assert_eq!(
            (first.label.as_str(), last.label.as_str()),
            ("bare metal", "VM")
        );
        let mut at = first.to;
        for b in &bars[1..bars.len() - 1] {
            assert_eq!(b.from, Some(at), "{}", b.label);
            assert!(b.series >= 1 && b.series <= 3);
            at = b.to;
        }
        assert!((at - last.to).abs() < 1e-9, "{at} against {}", last.to);
        // k14 differs most and goes first; k0 (100 - 20) is among the others
        // (four kinds: k0, k1, k2 and the zero one, which adds no step).
        assert_eq!(bars[1].label, "syscall k14 · more or fewer intervals");
        assert!(bars.iter().any(|b| b.label == "4 other kinds · exits"));
        assert!(!bars.iter().any(|b| b.label.contains("zero")));
    }
}
