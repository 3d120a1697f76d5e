//! Many characterisations as distributions: for each key metric, every
//! file's median in nanoseconds (each file's ticks over its own TSC rate),
//! as one box plot per instance type (CPU model and hypervisor) and, where
//! files run more than one kernel, per kernel release. One pass over the
//! files and their metrics; groups and rows are cut at fixed sizes, so a
//! page of 1000 files is as large as one of 50.

use super::matrix::{characterized, index};
use super::or_dash;
use crate::charts;
use crate::Input;
use std::collections::HashMap;
use xvmm_results::document::{
    capped, Block, BoxChart, BoxGroup, Chart, Quartiles, Section, Table, MAX_TABLE_ROWS,
};
use xvmm_results::names;

/// Characterised files from which the fleet view is shown.
pub const FLEET_MIN: usize = 4;

/// The metrics a fleet is compared on, in this order: a VM exit, a system
/// call, a page fault, the clock, the interrupt path (a cross-CPU wake-up,
/// a timer's lateness).
pub const FLEET_METRICS: [&str; 8] = [
    names::CPUID,
    names::GETPPID,
    names::PF_FIRST_TOUCH,
    names::PF_REFAULT,
    names::CLOCK_GETTIME_VDSO,
    names::CLOCK_GETTIME_SYSCALL,
    names::WAKEUP_CROSS_CPU,
    names::TIMER_WAKEUP,
];

/// A median in nanoseconds: ticks over the file's own TSC rate (`khz`),
/// divided by N for a unit of "ticks/N things" (one thing's share), or
/// nanoseconds as they are; `None` for any other unit.
fn median_ns(unit: &str, median: u64, khz: u64) -> Option<f64> {
    if unit == "ns" {
        return Some(median as f64);
    }
    let per = xvmm_results::render::ticks_per(unit)?;
    Some(median as f64 * 1e6 / khz as f64 / per)
}

/// What a file is grouped by.
#[derive(Clone, Copy)]
enum GroupBy {
    /// CPU model and hypervisor signature.
    InstanceType,
    KernelRelease,
}

impl GroupBy {
    fn key(self, input: &Input) -> String {
        let h = &input.report.host;
        match self {
            GroupBy::InstanceType => format!(
                "{} · {}",
                or_dash(&h.cpu_model),
                if h.hypervisor_signature.is_empty() {
                    "no hypervisor".to_string()
                } else {
                    h.hypervisor_signature.clone()
                }
            ),
            GroupBy::KernelRelease => or_dash(&h.kernel_release),
        }
    }

    fn name(self) -> &'static str {
        match self {
            GroupBy::InstanceType => "instance type (CPU model · hypervisor)",
            GroupBy::KernelRelease => "kernel release",
        }
    }
}

/// One file's figures: its group keys and each fleet metric's median in ns.
struct FileFigures {
    keys: [String; 2],
    values: [Option<f64>; FLEET_METRICS.len()],
}

/// Each characterised file with a TSC rate: its figures; and how many
/// characterised files had no rate.
fn figures(inputs: &[Input]) -> (Vec<FileFigures>, usize) {
    let mut out = Vec::new();
    let mut no_rate = 0;
    for (_, input, c) in characterized(inputs) {
        let khz = input.report.host.tsc_khz;
        if khz == 0 {
            no_rate += 1;
            continue;
        }
        let idx = index(c);
        let values = FLEET_METRICS.map(|name| {
            let m = idx.get(name)?;
            median_ns(&m.unit, m.measured()?.median, khz)
        });
        out.push(FileFigures {
            keys: [
                GroupBy::InstanceType.key(input),
                GroupBy::KernelRelease.key(input),
            ],
            values,
        });
    }
    (out, no_rate)
}

/// The groups of one metric by one key, first appearance first.
fn groups(files: &[FileFigures], metric: usize, by: usize) -> Vec<BoxGroup> {
    let mut order: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for f in files {
        let Some(v) = f.values[metric] else { continue };
        let key = f.keys[by].as_str();
        let i = *at.entry(key).or_insert_with(|| {
            order.push((key, Vec::new()));
            order.len() - 1
        });
        order[i].1.push(v);
    }
    order
        .into_iter()
        .filter_map(|(label, values)| {
            Some(BoxGroup {
                label: label.to_string(),
                count: values.len(),
                quartiles: Quartiles::of(&values)?,
            })
        })
        .collect()
}

fn box_chart(metric: &str, by: GroupBy, mut groups: Vec<BoxGroup>) -> BoxChart {
    let omitted = groups.len().saturating_sub(charts::MAX_ROWS);
    groups.truncate(charts::MAX_ROWS);
    BoxChart {
        caption: format!("{metric}: median per file, by {}", by.name()),
        unit: "nanoseconds".into(),
        groups,
        omitted,
    }
}

fn ns(v: f64) -> String {
    charts::number(v)
}

/// The fleet section: where at least [`FLEET_MIN`] files are
/// characterisations.
pub(super) fn fleet_section(inputs: &[Input]) -> Option<Section> {
    let total = characterized(inputs).len();
    if total < FLEET_MIN {
        return None;
    }
    let (files, no_rate) = figures(inputs);
    let mut blocks = vec![Block::Paragraph(format!(
        "{total} characterization files as distributions: for each key metric, every file's \
         median in nanoseconds (its ticks over its own TSC rate; timer-wakeup is in ns already), \
         one box per group: the box \
         spans the quartiles, the bar is the median, the whisker runs from the minimum to the \
         maximum.{}",
        if no_rate > 0 {
            format!(" {no_rate} file(s) without a TSC rate are left out.")
        } else {
            String::new()
        }
    ))];
    let kernels: std::collections::HashSet<&str> =
        files.iter().map(|f| f.keys[1].as_str()).collect();
    let mut table = Table::new(&[
        "metric", "group", "files", "min", "q1", "median", "q3", "max",
    ]);
    let mut rows = 0usize;
    for (m, metric) in FLEET_METRICS.iter().enumerate() {
        let by_type = groups(&files, m, 0);
        if by_type.is_empty() {
            continue;
        }
        for g in &by_type {
            rows += 1;
            if rows <= MAX_TABLE_ROWS {
                let q = g.quartiles;
                table.row(vec![
                    (*metric).to_string(),
                    g.label.clone(),
                    g.count.to_string(),
                    ns(q.min),
                    ns(q.q1),
                    ns(q.median),
                    ns(q.q3),
                    ns(q.max),
                ]);
            }
        }
        blocks.push(Block::Chart(Chart::Boxes(box_chart(
            metric,
            GroupBy::InstanceType,
            by_type,
        ))));
        if kernels.len() > 1 {
            let by_kernel = groups(&files, m, 1);
            blocks.push(Block::Chart(Chart::Boxes(box_chart(
                metric,
                GroupBy::KernelRelease,
                by_kernel,
            ))));
        }
    }
    if rows == 0 {
        blocks.push(Block::Paragraph(
            "None of these files holds a key metric in ticks or nanoseconds.".into(),
        ));
    } else {
        capped(table, rows, &mut blocks);
    }
    Some(Section {
        id: "fleet".into(),
        title: format!("Fleet: {total} characterizations as distributions"),
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_become_nanoseconds_by_their_unit() {
        // 2.5 GHz: 2500 ticks a microsecond.
        assert_eq!(median_ns("ticks", 2500, 2_500_000), Some(1000.0));
        // A round trip of two wake-ups: one wake-up's share.
        assert_eq!(median_ns("ticks/2 wake-ups", 2500, 2_500_000), Some(500.0));
        assert_eq!(median_ns("ns", 21_000, 2_500_000), Some(21_000.0));
        for other in ["kHz", "ticks/0 x", "ticks/", "ticks/two", "bytes"] {
            assert_eq!(median_ns(other, 2500, 2_500_000), None, "{other}");
        }
    }
}
