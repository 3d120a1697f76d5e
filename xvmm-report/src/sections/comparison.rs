//! VM against bare metal: one section per pair of files, the
//! decomposition of each crossing with its chart.

use super::{column, TICKS};
use crate::charts;
use crate::Input;
use std::collections::HashMap;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart, Part, StackedBar, StackedChart};
use xvmm_results::{compare, Comparison, Environment};

/// Each VM report against its bare-metal report: the first with the VM's
/// CPU model (the host it ran on, as far as a file can say), else the
/// first of all. One pass to index the bare-metal files, one for the VMs.
pub(super) fn comparison_sections(inputs: &[Input]) -> Vec<Section> {
    let mut first = None;
    let mut by_cpu: HashMap<&str, usize> = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        if input.report.environment == Environment::BareMetal {
            first.get_or_insert(i);
            by_cpu
                .entry(input.report.host.cpu_model.as_str())
                .or_insert(i);
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
            let bare = by_cpu
                .get(vm.report.host.cpu_model.as_str())
                .copied()
                .unwrap_or(first);
            comparison_section(v, vm, bare, &inputs[bare])
        })
        .collect()
}

/// VM and bare-metal medians side by side, with a whisker to the p99.
pub(super) fn comparison_chart(c: &Comparison) -> BarChart {
    let mut bars = Vec::new();
    for row in c.rows.iter().take(charts::MAX_ROWS / 2) {
        let name = format!("{} {}", row.crossing, row.interval);
        let sides = [
            (row.vm_median, row.vm_p99, "VM", 0),
            (row.bare_median, row.bare_p99, "bare metal", 1),
        ];
        for (median, p99, side, series) in sides {
            if let Some(m) = median {
                bars.push(Bar {
                    label: format!("{name} · {side}"),
                    series,
                    from: None,
                    to: m as f64,
                    mark: None,
                    whisker: p99.map(|p| p as f64),
                });
            }
        }
    }
    BarChart {
        caption: "Median per crossing and interval, whisker to the p99".into(),
        unit: TICKS.into(),
        series: vec!["VM".into(), "bare metal".into()],
        bars,
        reference: None,
        omitted: c.rows.len().saturating_sub(charts::MAX_ROWS / 2) * 2,
    }
}

/// How to read the decomposition chart.
pub(super) const DECOMPOSITION: &str = "Each crossing interval's VM time, decomposed: the \
bare-metal median, what the VM adds without exits (the whisker is that difference's 95 % \
interval) and what exits add, by reason in proportion to their host time; the dot is the VM's \
median. A pale part is negative.";

/// Why a comparison has no decomposition chart.
pub(super) const NO_DECOMPOSITION: &str = "No decomposition into exits: the VM file holds no \
host attribution (a run with `xvmm --trace` whose timeline joined the guest's samples gives \
one).";

/// Exit reasons named in the decomposition's legend; the rest are summed
/// as "other exits".
const MAX_REASONS: usize = 5;

/// Series of the decomposition: bare metal, the VM without exits, the
/// exit reasons with the most ticks over all rows, then "other exits".
fn decomposition_series(c: &Comparison) -> Vec<String> {
    let mut totals: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for part in c.rows.iter().filter_map(|r| r.exits.as_ref()) {
        for (reason, ticks) in &part.by_reason {
            *totals.entry(reason.as_str()).or_default() += ticks.abs();
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
    series
}

/// One stacked bar: bare-metal median, then what the VM adds without exits
/// (whisker: that part's interval), then each exit reason's share; the VM's
/// median as a dot.
fn decomposition_bar(row: &xvmm_results::ComparisonRow, series: &[String]) -> Option<StackedBar> {
    let bare = row.bare_median? as f64;
    let without = row.without_exits.as_ref();
    if without.is_none() && row.exits.is_none() {
        return None;
    }
    let mut parts = vec![Part {
        series: 0,
        value: bare,
    }];
    if let Some(w) = without {
        parts.push(Part {
            series: 1,
            value: w.ticks as f64,
        });
    }
    let mut other = 0.0;
    for (reason, ticks) in row.exits.iter().flat_map(|e| &e.by_reason) {
        let name = format!("exit: {reason}");
        match series.iter().position(|s| *s == name) {
            Some(i) => parts.push(Part {
                series: i,
                value: *ticks,
            }),
            None => other += ticks,
        }
    }
    if other != 0.0 {
        parts.push(Part {
            series: series.len() - 1,
            value: other,
        });
    }
    let whisker = without.and_then(|w| Some((bare + w.ci_low? as f64, bare + w.ci_high? as f64)));
    Some(StackedBar {
        label: format!("{} {}", row.crossing, row.interval),
        parts,
        whisker,
        mark: row.vm_median.map(|m| m as f64),
    })
}

/// VM time decomposed per crossing interval: bare metal + the VM without
/// exits + exits by reason; `None` when no row holds an attribution.
pub(super) fn decomposition_chart(c: &Comparison) -> Option<StackedChart> {
    let series = decomposition_series(c);
    let all: Vec<StackedBar> = c
        .rows
        .iter()
        .filter_map(|r| decomposition_bar(r, &series))
        .collect();
    if all.is_empty() {
        return None;
    }
    let omitted = all.len().saturating_sub(charts::MAX_ROWS);
    let mut bars = all;
    bars.truncate(charts::MAX_ROWS);
    Some(StackedChart {
        caption: "Where the VM's time goes: bare metal + VM without exits + exits by reason".into(),
        unit: TICKS.into(),
        series,
        bars,
        omitted,
    })
}

pub(super) fn comparison_section(v: usize, vm: &Input, b: usize, bare: &Input) -> Section {
    let c = compare(&vm.report, &bare.report);
    let chart = comparison_chart(&c);
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
        "x med",
        "x p99",
    ];
    let mut blocks = vec![
        Block::Paragraph(format!(
            "{} (VM) against {} (bare metal): what the VM adds to each crossing, per interval.",
            column(v, vm),
            column(b, bare)
        )),
        Block::Chart(Chart::Bars(chart)),
    ];
    match decomposition_chart(&c) {
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
    if !c.notes.is_empty() {
        blocks.push(Block::List(c.notes.clone()));
    }
    Section {
        id: format!("compare-{}", v + 1),
        title: format!("VM vs bare metal: {} against {}", vm.label, bare.label),
        blocks,
    }
}

// ---------------------------------------------------------------- matrix
