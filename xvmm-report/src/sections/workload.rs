//! An `xperf workload` report's section: where the command's time went, as
//! stacked bars (the kernel's intervals by family against the wall time;
//! the system calls with most time on CPU), then the table the terminal
//! prints.

use xvmm_results::document::{capped, Block, Chart, Part, StackedBar, StackedChart};
use xvmm_results::render;
use xvmm_results::schema::workload::{
    Workload, WorkloadExits, FAMILY_FAULT, FAMILY_INTERRUPT, FAMILY_OFF_CPU, FAMILY_SYSCALL,
};

/// System calls shown by name in the second chart; the rest are one part.
const NAMED_CALLS: usize = 8;

/// Ticks in the charts' unit: milliseconds at `tsc_khz`, ticks without it.
fn scaled(ticks: u64, tsc_khz: u64) -> f64 {
    if tsc_khz == 0 {
        ticks as f64
    } else {
        ticks as f64 / tsc_khz as f64
    }
}

fn unit(tsc_khz: u64) -> String {
    if tsc_khz == 0 {
        "TSC ticks".into()
    } else {
        "ms".into()
    }
}

/// One bar of `values` (ticks), each its own series, scaled.
fn bar(label: &str, values: &[u64], tsc_khz: u64, mark: Option<f64>) -> StackedBar {
    StackedBar {
        label: label.into(),
        parts: values
            .iter()
            .enumerate()
            .map(|(series, &v)| Part {
                series,
                value: scaled(v, tsc_khz),
            })
            .collect(),
        whisker: None,
        mark,
    }
}

/// The time the workload's system calls spent on CPU.
fn calls_on_cpu(w: &Workload) -> u64 {
    w.family(FAMILY_SYSCALL)
        .map(|r| r.total_ticks.saturating_sub(r.off_cpu_ticks))
        .fold(0, u64::saturating_add)
}

/// One bar of the kernel's intervals by family, the wall time its mark:
/// calls on CPU, calls off CPU, faults, interrupts, off CPU outside calls.
pub(super) fn families_chart(w: &Workload, tsc_khz: u64) -> StackedChart {
    let calls_total = w.family_total(FAMILY_SYSCALL);
    let on = calls_on_cpu(w);
    let off_in_calls = calls_total.saturating_sub(on);
    let off_outside = w.family_total(FAMILY_OFF_CPU).saturating_sub(off_in_calls);
    let values = [
        on,
        off_in_calls,
        w.family_total(FAMILY_FAULT),
        w.family_total(FAMILY_INTERRUPT),
        off_outside,
    ];
    let mut series: Vec<String> = [
        "system calls, on CPU",
        "system calls, off CPU",
        "user faults",
        "interrupts",
        "off CPU outside calls",
    ]
    .map(String::from)
    .to_vec();
    let wall = Some(scaled(w.wall_ticks, tsc_khz));
    let mut bars = vec![bar("all tasks", &values, tsc_khz, wall)];
    if let Some(x) = &w.exits {
        series.push("outside every interval (exits only)".into());
        bars.push(bar("VM exits inside", &exit_values(x), tsc_khz, None));
    }
    StackedChart {
        caption: "Kernel intervals summed over the tasks (dot: the wall time), and the host's \
                  exit time inside each"
            .into(),
        unit: unit(tsc_khz),
        series,
        bars,
        omitted: 0,
    }
}

/// The exits' time in the families chart's series: a call's exits are on
/// CPU (those while it is blocked are the off-CPU row's, all in the
/// off-CPU part), then the exits outside every interval.
fn exit_values(x: &WorkloadExits) -> [u64; 6] {
    let of = |family: &str| {
        x.rows
            .iter()
            .filter(|r| r.family == family)
            .map(|r| r.ticks())
            .fold(0, u64::saturating_add)
    };
    let outside = x
        .outside
        .iter()
        .map(|r| r.ticks)
        .fold(0, u64::saturating_add);
    [
        of(FAMILY_SYSCALL),
        0,
        of(FAMILY_FAULT),
        of(FAMILY_INTERRUPT),
        of(FAMILY_OFF_CPU),
        outside,
    ]
}

/// One bar of the system calls' time on CPU: the largest by name, the rest
/// as one part.
pub(super) fn calls_chart(w: &Workload, tsc_khz: u64) -> Option<StackedChart> {
    let mut calls: Vec<(&str, u64)> = w
        .family(FAMILY_SYSCALL)
        .map(|r| {
            (
                r.name.as_str(),
                r.total_ticks.saturating_sub(r.off_cpu_ticks),
            )
        })
        .filter(|&(_, t)| t > 0)
        .collect();
    if calls.is_empty() {
        return None;
    }
    calls.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let rest: u64 = calls
        .iter()
        .skip(NAMED_CALLS)
        .map(|c| c.1)
        .fold(0, u64::saturating_add);
    let mut series: Vec<String> = calls
        .iter()
        .take(NAMED_CALLS)
        .map(|c| c.0.to_string())
        .collect();
    let mut values: Vec<u64> = calls.iter().take(NAMED_CALLS).map(|c| c.1).collect();
    if rest > 0 {
        series.push(format!("{} other calls", calls.len() - NAMED_CALLS));
        values.push(rest);
    }
    Some(StackedChart {
        caption: format!(
            "System calls' time on CPU: the {} largest by name",
            NAMED_CALLS.min(calls.len())
        ),
        unit: unit(tsc_khz),
        series,
        bars: vec![bar("system calls", &values, tsc_khz, None)],
        omitted: 0,
    })
}

pub(super) fn workload_blocks(w: &Workload, tsc_khz: u64, blocks: &mut Vec<Block>) {
    blocks.push(Block::Subheading(format!(
        "Workload: {} ({}; {} tasks)",
        w.command.join(" "),
        w.ended.describe(),
        w.tasks
    )));
    blocks.push(Block::Paragraph(format!(
        "Wall {:.3} ms, user {:.3} ms, system {:.3} ms (rusage); {} trace events, {} lost. \
         Intervals run from their opening tracepoint to their closing one; faults: {}.",
        scaled(w.wall_ticks, tsc_khz.max(1)),
        w.user_us as f64 / 1000.0,
        w.system_us as f64 / 1000.0,
        w.events,
        w.lost_events,
        w.fault_end
    )));
    blocks.push(Block::Chart(Chart::Stacked(families_chart(w, tsc_khz))));
    if let Some(chart) = calls_chart(w, tsc_khz) {
        blocks.push(Block::Chart(Chart::Stacked(chart)));
    }
    // The table's rows: one per kind, and one heading per family.
    let rows = w.rows.len() + render::rows_by_family(w).len();
    capped(render::workload_of(w, tsc_khz), rows, blocks);
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::schema::workload::{ReasonExits, Row, RowExits};

    fn row(family: &str, name: &str, total: u64, off: u64) -> Row {
        Row {
            family: family.into(),
            name: name.into(),
            total_ticks: total,
            off_cpu_ticks: off,
            ..Row::default()
        }
    }

    fn workload() -> Workload {
        let mut rows: Vec<Row> = (0..10)
            .map(|i| row(FAMILY_SYSCALL, &format!("call{i}"), 1000 * (i + 1), 0))
            .collect();
        rows.push(row(FAMILY_SYSCALL, "read", 60_000, 40_000));
        rows.push(row(FAMILY_FAULT, "write", 3000, 0));
        rows.push(row(FAMILY_INTERRUPT, "local_timer", 2000, 0));
        rows.push(row(FAMILY_OFF_CPU, "off-cpu", 70_000, 0));
        Workload {
            command: vec!["tar".into()],
            wall_ticks: 100_000,
            tasks: 2,
            rows,
            ..Workload::default()
        }
    }

    #[test]
    fn the_families_add_up_to_the_intervals_and_off_cpu_is_counted_once() {
        let w = workload();
        let c = families_chart(&w, 1000);
        let parts: Vec<f64> = c.bars[0].parts.iter().map(|p| p.value).collect();
        // Calls on CPU: 55 000 of the numbered calls + 20 000 of read; off
        // CPU in calls 40 000; off CPU outside calls 70 000 - 40 000.
        assert_eq!(parts, [75.0, 40.0, 3.0, 2.0, 30.0]);
        assert_eq!(c.bars[0].mark, Some(100.0));
        assert_eq!(c.unit, "ms");
        assert_eq!(families_chart(&w, 0).unit, "TSC ticks");
        assert_eq!(c.bars.len(), 1, "no exits, no exits bar");
    }

    /// A VM run's chart has a second bar: each family's exit time in its
    /// colour, and the exits outside every interval in one of their own.
    #[test]
    fn a_vm_runs_exits_are_drawn_inside_their_families() {
        let mut w = workload();
        let exits = |family: &str, ticks| RowExits {
            family: family.into(),
            name: "x".into(),
            reasons: vec![ReasonExits {
                reason: "msr".into(),
                count: 1,
                ticks,
            }],
        };
        w.exits = Some(WorkloadExits {
            rows: vec![
                exits(FAMILY_SYSCALL, 1000),
                exits(FAMILY_SYSCALL, 2000),
                exits(FAMILY_INTERRUPT, 500),
                exits(FAMILY_OFF_CPU, 4000),
            ],
            outside: exits("", 7000).reasons,
            ..WorkloadExits::default()
        });
        let c = families_chart(&w, 1000);
        assert_eq!(c.series.len(), 6);
        let parts: Vec<f64> = c.bars[1].parts.iter().map(|p| p.value).collect();
        assert_eq!(parts, [3.0, 0.0, 0.0, 0.5, 4.0, 7.0]);
        assert_eq!(c.bars[1].mark, None);
    }

    #[test]
    fn the_largest_calls_by_name_and_the_rest_as_one() {
        let w = workload();
        let c = calls_chart(&w, 1000).unwrap();
        assert_eq!(c.series.len(), NAMED_CALLS + 1);
        assert_eq!(c.series[0], "read");
        assert_eq!(c.series[1], "call9");
        assert_eq!(c.series[NAMED_CALLS], "3 other calls");
        // call0..call2: 1 + 2 + 3 ms together.
        assert_eq!(c.bars[0].parts[NAMED_CALLS].value, 6.0);
        let sum: f64 = c.bars[0].parts.iter().map(|p| p.value).sum();
        assert_eq!(sum, 75.0);
        assert!(calls_chart(&Workload::default(), 1000).is_none());
        let mut blocks = Vec::new();
        workload_blocks(&w, 1000, &mut blocks);
        assert!(matches!(&blocks[0], Block::Subheading(s) if s.starts_with("Workload: tar")));
        let charts = blocks
            .iter()
            .filter(|b| matches!(b, Block::Chart(_)))
            .count();
        assert_eq!(charts, 2);
    }
}
