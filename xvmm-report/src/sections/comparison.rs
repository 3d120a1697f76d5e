//! VM against bare metal: one section per pair of files, the
//! decomposition of each crossing with its chart.

use super::{column, TICKS};
use crate::charts;
use crate::Input;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart};
use xvmm_results::{compare, Comparison, Environment};

/// Each VM report against the first bare-metal report.
pub(super) fn comparison_sections(inputs: &[Input]) -> Vec<Section> {
    let Some(bare) = inputs
        .iter()
        .position(|i| i.report.environment == Environment::BareMetal)
    else {
        return Vec::new();
    };
    inputs
        .iter()
        .enumerate()
        .filter(|(_, i)| i.report.environment == Environment::LinuxVm)
        .map(|(v, vm)| comparison_section(v, vm, bare, &inputs[bare]))
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
    // The attribution of VM time to exits (without exits / exits by reason,
    // as stacked bars) comes here as one more chart once reports carry it.
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
