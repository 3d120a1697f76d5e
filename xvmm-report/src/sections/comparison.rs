//! VM against bare metal: one section per pair of files, the
//! decomposition of each crossing with its chart.

use super::workload_compare::workload_comparison_blocks;
use super::{column, TICKS};
use crate::charts;
use crate::Input;
use std::collections::HashMap;
use xvmm_results::compare::DiffUnit;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart, Part, StackedBar, StackedChart};
use xvmm_results::{compare, Comparison, ComparisonRow, Environment};

/// Each VM report against its bare-metal report: the first of the same
/// kind (a workload's against a workload's, crossings against crossings)
/// with the VM's CPU model (the host it ran on, as far as a file can say),
/// else the first of the same kind, else the first of all. One pass to
/// index the bare-metal files, one for the VMs.
pub(super) fn comparison_sections(inputs: &[Input]) -> Vec<Section> {
    let mut first = None;
    let mut first_of_kind: HashMap<bool, usize> = HashMap::new();
    let mut by_cpu: HashMap<(bool, &str), usize> = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        let r = &input.report;
        if r.environment == Environment::BareMetal {
            let kind = r.workload.is_some();
            first.get_or_insert(i);
            first_of_kind.entry(kind).or_insert(i);
            by_cpu.entry((kind, r.host.cpu_model.as_str())).or_insert(i);
        }
    }
    let Some(first) = first else {
        return Vec::new();
    };
    inputs
        .iter()
        .enumerate()
        .filter(|(_, i)| i.report.environment == Environment::LinuxVm)
        .map(|(v, vm)| {
            let kind = vm.report.workload.is_some();
            let bare = by_cpu
                .get(&(kind, vm.report.host.cpu_model.as_str()))
                .or_else(|| first_of_kind.get(&kind))
                .copied()
                .unwrap_or(first);
            comparison_section(v, vm, bare, &inputs[bare])
        })
        .collect()
}

/// The unit of a comparison's charts: the tick of both files, or ns when
/// their TSC rates differ (no chart sets two clocks' ticks side by side).
fn unit(c: &Comparison) -> String {
    match c.diff_unit {
        DiffUnit::Ticks => TICKS.into(),
        DiffUnit::Ns => {
            "ns (each file's TSC ticks over its own rate, null overhead subtracted)".into()
        }
    }
}

/// VM and bare-metal medians side by side, with a whisker to the p99.
pub(super) fn comparison_chart(c: &Comparison) -> BarChart {
    let mut bars = Vec::new();
    for row in c.rows.iter().take(charts::MAX_ROWS / 2) {
        let name = format!("{} {}", row.crossing, row.interval);
        let vm = |t: u64| c.vm_in_unit(t as f64);
        let bare = |t: u64| c.bare_in_unit(t as f64);
        let sides = [
            (row.vm_median.map(vm), row.vm_p99.map(vm), "VM", 0),
            (
                row.bare_median.map(bare),
                row.bare_p99.map(bare),
                "bare metal",
                1,
            ),
        ];
        for (median, p99, side, series) in sides {
            if let Some(m) = median {
                bars.push(Bar {
                    label: format!("{name} · {side}"),
                    series,
                    from: None,
                    to: m,
                    mark: None,
                    whisker: p99,
                });
            }
        }
    }
    BarChart {
        caption: "Median per crossing and interval, whisker to the p99".into(),
        unit: unit(c),
        series: vec!["VM".into(), "bare metal".into()],
        bars,
        reference: None,
        omitted: c.rows.len().saturating_sub(charts::MAX_ROWS / 2) * 2,
    }
}

/// How to read the decomposition chart.
pub(super) const DECOMPOSITION: &str = "Each crossing interval's mean VM time, decomposed: the \
bare-metal mean, what the VM adds without exits (its exit-free mean minus that; the whisker is \
this difference's 95 % interval), what exits add (the fraction of samples with an exit times \
what such a sample costs more than an exit-free one, by reason in proportion to host time) and \
what the samples the trace cannot vouch for add. The parts add up to the VM's mean, the dot. \
Medians do not add: the table's median difference is not decomposed. A pale part is negative.";

/// Why a comparison has no decomposition chart.
pub(super) const NO_DECOMPOSITION: &str = "No decomposition into exits: the VM file holds no \
host attribution (a run with `xvmm --trace` whose timeline joined the guest's samples gives \
one).";

/// Exit reasons named in the decomposition's legend; the rest are summed
/// as "other exits".
const MAX_REASONS: usize = 5;

/// The series of unattributable samples' part.
const UNATTRIBUTABLE: &str = "unattributable samples";

/// Series of the decomposition: bare metal, the VM without exits, the
/// exit reasons with the most time over all rows, then "other exits", then
/// the unattributable samples where a row has any.
fn decomposition_series(c: &Comparison) -> Vec<String> {
    let mut totals: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for part in c.rows.iter().filter_map(|r| r.exits.as_ref()) {
        for (reason, value) in &part.by_reason {
            *totals.entry(reason.as_str()).or_default() += value.abs();
        }
    }
    let mut reasons: Vec<(&str, f64)> = totals.into_iter().collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut series = vec!["bare metal".to_string(), "VM without exits".to_string()];
    series.extend(
        reasons
            .iter()
            .take(MAX_REASONS)
            .map(|(r, _)| format!("exit: {r}")),
    );
    if reasons.len() > MAX_REASONS {
        series.push("other exits".into());
    }
    let unattributable = c.rows.iter().filter_map(|r| r.unattributable.as_ref());
    if unattributable.into_iter().any(|u| u.samples > 0) {
        series.push(UNATTRIBUTABLE.into());
    }
    series
}

/// One stacked bar: the bare-metal mean, then the parts of the mean
/// difference (without exits, whisker: its interval; each exit reason's
/// share; the unattributable samples), which end at the VM's mean, the dot.
fn decomposition_bar(c: &Comparison, row: &ComparisonRow, series: &[String]) -> Option<StackedBar> {
    let (w, e, u) = (
        row.without_exits.as_ref()?,
        row.exits.as_ref()?,
        row.unattributable.as_ref()?,
    );
    let bare = c.bare_in_unit(row.bare_mean?);
    let part = |series, value| Part { series, value };
    let mut parts = vec![part(0, bare), part(1, w.mean)];
    let mut other = 0.0;
    for (reason, value) in &e.by_reason {
        let name = format!("exit: {reason}");
        match series.iter().position(|s| *s == name) {
            Some(i) => parts.push(part(i, *value)),
            None => other += value,
        }
    }
    if other != 0.0 {
        let at = series.iter().position(|s| s == "other exits");
        parts.push(part(at.unwrap_or(series.len() - 1), other));
    }
    if u.samples > 0 {
        let at = series.iter().position(|s| s == UNATTRIBUTABLE);
        parts.push(part(at.unwrap_or(series.len() - 1), u.mean));
    }
    let whisker = w
        .ci_low
        .zip(w.ci_high)
        .map(|(lo, hi)| (bare + lo, bare + hi));
    Some(StackedBar {
        label: format!("{} {}", row.crossing, row.interval),
        parts,
        whisker,
        mark: row.vm_mean.map(|m| c.vm_in_unit(m)),
    })
}

/// VM time decomposed per crossing interval: bare metal + the VM without
/// exits + exits by reason + unattributable samples; `None` when no row
/// holds an attribution.
pub(super) fn decomposition_chart(c: &Comparison) -> Option<StackedChart> {
    let series = decomposition_series(c);
    let all: Vec<StackedBar> = c
        .rows
        .iter()
        .filter_map(|r| decomposition_bar(c, r, &series))
        .collect();
    if all.is_empty() {
        return None;
    }
    let omitted = all.len().saturating_sub(charts::MAX_ROWS);
    let mut bars = all;
    bars.truncate(charts::MAX_ROWS);
    Some(StackedChart {
        caption: "Where the VM's mean time goes: bare metal + VM without exits + exits by reason"
            .into(),
        unit: unit(c),
        series,
        bars,
        omitted,
    })
}

pub(super) fn comparison_section(v: usize, vm: &Input, b: usize, bare: &Input) -> Section {
    let c = compare(&vm.report, &bare.report);
    let mut blocks = match (&c.workload, c.rows.is_empty()) {
        (Some(_), true) => vec![Block::Paragraph(format!(
            "{} (VM) against {} (bare metal): one workload's time in the kernel.",
            column(v, vm),
            column(b, bare)
        ))],
        _ => crossing_blocks(&c, v, vm, b, bare),
    };
    if let Some(w) = &c.workload {
        workload_comparison_blocks(&c, w, &mut blocks);
    }
    if !c.notes.is_empty() {
        blocks.push(Block::List(c.notes.clone()));
    }
    Section {
        id: format!("compare-{}", v + 1),
        title: format!("VM vs bare metal: {} against {}", vm.label, bare.label),
        blocks,
    }
}

/// The crossings' chart, decomposition and table.
fn crossing_blocks(c: &Comparison, v: usize, vm: &Input, b: usize, bare: &Input) -> Vec<Block> {
    let chart = comparison_chart(c);
    let fig = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let rows: Vec<Vec<Cell>> = c
        .rows
        .iter()
        .take(MAX_TABLE_ROWS)
        .map(|r| {
            let mut first = Cell::from(format!("{} {}", r.crossing, r.interval));
            first.title = r.note.clone();
            vec![
                first,
                fig(r.vm_median).into(),
                fig(r.vm_p99).into(),
                fig(r.bare_median).into(),
                fig(r.bare_p99).into(),
                r.diff_median
                    .map_or("-".into(), |d| format!("{d:+}"))
                    .into(),
                r.diff_mean
                    .map_or("-".into(), |d| format!("{d:+.1}"))
                    .into(),
                r.ratio_median
                    .map_or("-".into(), |x| format!("{x:.2}x"))
                    .into(),
                r.ratio_p99
                    .map_or("-".into(), |x| format!("{x:.2}x"))
                    .into(),
            ]
        })
        .collect();
    let header = [
        "crossing interval",
        "VM med",
        "VM p99",
        "BM med",
        "BM p99",
        "diff med",
        "diff mean",
        "x med",
        "x p99",
    ];
    let mut blocks = vec![
        Block::Paragraph(format!(
            "{} (VM) against {} (bare metal): what the VM adds to each crossing, per interval; \
             medians and p99s in each file's ticks, differences (diff) in {}.",
            column(v, vm),
            column(b, bare),
            c.diff_unit.name()
        )),
        Block::Chart(Chart::Bars(chart)),
    ];
    match decomposition_chart(c) {
        Some(chart) => {
            blocks.push(Block::Paragraph(DECOMPOSITION.into()));
            blocks.push(Block::Chart(Chart::Stacked(chart)));
        }
        None => blocks.push(Block::Paragraph(NO_DECOMPOSITION.into())),
    }
    capped(
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: rows.into_iter().map(Row::Cells).collect(),
            numeric: true,
        },
        c.rows.len(),
        &mut blocks,
    );
    blocks
}

// ---------------------------------------------------------------- matrix

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::Report;

    /// A report the nested harness measured (`xvmm-cli/tests/data/report/`).
    fn read(file: &str) -> Report {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xvmm-cli/tests/data/report/"
        );
        let text = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
        Report::from_json(&text).unwrap()
    }

    /// The nested harness's traced VM run and its bare-metal run.
    fn harness_pair() -> (Report, Report) {
        (read("traced-vm.json"), read("traced-bm.json"))
    }

    /// The harness's workload pair: the VM file meets the bare-metal file
    /// of its own kind, though a crossings file of the same CPU comes
    /// first; its waterfall walks from bare metal's summed time to the
    /// VM's; and the notes speak when the data say what they warn of.
    #[test]
    fn a_workload_pair_is_compared_kind_by_kind_on_real_harness_data() {
        let (traced_bm, vm, bm) = (
            read("traced-bm.json"),
            read("workload-vm.json"),
            read("workload-bm.json"),
        );
        let input = |label: &str, report: &Report| Input {
            label: label.into(),
            report: report.clone(),
        };
        let inputs = [input("t", &traced_bm), input("b", &bm), input("v", &vm)];
        let sections = comparison_sections(&inputs);
        assert_eq!(sections.len(), 1);
        assert_eq!(sections[0].title, "VM vs bare metal: v against b");
        let c = compare(&vm, &bm);
        let w = c.workload.as_ref().expect("both files have a workload");
        assert!(w.notes.is_empty(), "{:?}", w.notes);
        let chart = super::super::workload_compare::waterfall(&c, w);
        let (bare, steps, last) = (
            &chart.bars[0],
            &chart.bars[1..chart.bars.len() - 1],
            chart.bars.last().unwrap(),
        );
        let end = steps.last().map_or(bare.to, |s| s.to);
        assert!(
            (end - last.to).abs() < 1e-9 * last.to,
            "{end} against {}",
            last.to
        );
        assert!(last.to > bare.to, "the VM took longer under TCG");
        // Controls: an unverified timeline and another command are said.
        let mut unverified = vm.clone();
        let x = unverified
            .workload
            .as_mut()
            .unwrap()
            .exits
            .as_mut()
            .unwrap();
        x.timeline_verified = false;
        let notes = compare(&unverified, &bm).workload.unwrap().notes;
        assert!(
            notes.iter().any(|n| n.contains("NOT verified")),
            "{notes:?}"
        );
        let mut other = bm.clone();
        other.workload.as_mut().unwrap().command[3] += "; true";
        let notes = compare(&vm, &other).workload.unwrap().notes;
        assert!(
            notes.iter().any(|n| n.contains("commands differ")),
            "{notes:?}"
        );
    }

    /// Issue item 4: every stacked bar's parts end at its dot, the VM's
    /// mean, on real harness data.
    #[test]
    fn the_stacked_parts_end_at_the_vm_mean_on_real_harness_data() {
        let (vm, bare) = harness_pair();
        let c = compare(&vm, &bare);
        let chart = decomposition_chart(&c).expect("a traced pair decomposes");
        assert_eq!(chart.bars.len(), c.rows.len());
        assert_eq!(chart.unit, TICKS);
        for bar in &chart.bars {
            let end: f64 = bar.parts.iter().map(|p| p.value).sum();
            let mark = bar.mark.unwrap();
            assert!(
                (end - mark).abs() < 1e-6 * mark,
                "{}: {end} against {mark}",
                bar.label
            );
            let (lo, hi) = bar.whisker.unwrap();
            let without = bar.parts[0].value + bar.parts[1].value;
            assert!(
                lo <= without && without <= hi,
                "{}: {lo} {without} {hi}",
                bar.label
            );
        }
        // No sample of that run is unattributable: no such series.
        assert!(!chart.series.iter().any(|s| s == UNATTRIBUTABLE));
    }

    /// Across TSC rates both charts are of ns, and the bars still end at
    /// the VM's mean, in ns.
    #[test]
    fn across_tsc_rates_the_charts_are_of_nanoseconds() {
        let (mut vm, bare) = harness_pair();
        vm.host.tsc_khz = 2 * bare.host.tsc_khz;
        let c = compare(&vm, &bare);
        let medians = comparison_chart(&c);
        assert!(medians.unit.starts_with("ns"), "{}", medians.unit);
        let row = &c.rows[0];
        let ns = |ticks: u64, khz: u64| ticks as f64 * 1e6 / khz as f64;
        let (vm_bar, bare_bar) = (&medians.bars[0], &medians.bars[1]);
        assert!((vm_bar.to - ns(row.vm_median.unwrap(), vm.host.tsc_khz)).abs() < 1e-6);
        assert!((bare_bar.to - ns(row.bare_median.unwrap(), bare.host.tsc_khz)).abs() < 1e-6);
        let chart = decomposition_chart(&c).unwrap();
        assert!(chart.unit.starts_with("ns"), "{}", chart.unit);
        let bar = &chart.bars[0];
        let end: f64 = bar.parts.iter().map(|p| p.value).sum();
        let vm_mean = row.vm_mean.unwrap() * 1e6 / vm.host.tsc_khz as f64;
        assert!(
            (end - vm_mean).abs() < 1e-6 * vm_mean,
            "{end} against {vm_mean}"
        );
    }

    /// A row with unattributable samples gets their part, in its own series.
    #[test]
    fn unattributable_samples_have_their_own_part() {
        let (vm, bare) = harness_pair();
        let mut c = compare(&vm, &bare);
        let u = c.rows[0].unattributable.as_mut().unwrap();
        (u.samples, u.mean) = (3, 42.0);
        let chart = decomposition_chart(&c).unwrap();
        let at = chart
            .series
            .iter()
            .position(|s| s == UNATTRIBUTABLE)
            .unwrap();
        let last = chart.bars[0].parts.last().unwrap();
        assert_eq!((last.series, last.value), (at, 42.0));
    }
}
