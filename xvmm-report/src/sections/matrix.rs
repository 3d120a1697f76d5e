//! The characterisation matrix: every metric of every characterised file
//! side by side, with ratios against the first.

use super::{column, MAX_CELL};
use crate::basis::{Basis, Unit};
use crate::Input;
use std::collections::HashMap;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart};
use xvmm_results::{Characterization, Metric};

pub(super) fn characterized(inputs: &[Input]) -> Vec<(usize, &Input, &Characterization)> {
    inputs
        .iter()
        .enumerate()
        .filter_map(|(i, input)| input.report.characterize.as_ref().map(|c| (i, input, c)))
        .collect()
}

/// Metric names of all columns, first appearance first, each once.
pub(super) fn metric_names<'a>(columns: &[&'a Characterization]) -> Vec<(&'a str, &'a str)> {
    let mut seen = HashMap::new();
    let mut names = Vec::new();
    for c in columns {
        for m in &c.metrics {
            if seen.insert(m.name.as_str(), ()).is_none() {
                names.push((m.group.as_str(), m.name.as_str()));
            }
        }
    }
    names
}

pub(super) fn index(c: &Characterization) -> HashMap<&str, &Metric> {
    let mut map = HashMap::with_capacity(c.metrics.len());
    for m in &c.metrics {
        map.entry(m.name.as_str()).or_insert(m);
    }
    map
}

pub(super) fn short(text: &str) -> String {
    if text.chars().count() <= MAX_CELL {
        return text.to_string();
    }
    let mut s: String = text.chars().take(MAX_CELL - 1).collect();
    s.push('…');
    s
}

/// A metric as a matrix cell, with its ratio against the first column's
/// (see [`Basis::ratio`]; `Ok(None)` in the first column).
pub(super) fn matrix_cell(m: Option<&Metric>, ratio: Result<Option<f64>, String>) -> Cell {
    let Some(m) = m else {
        return Cell::with_title("-", "not in this file");
    };
    if let Some(s) = m.measured() {
        let mut text = format!("{} {}", s.median, m.unit);
        let mut title = format!(
            "n {}, min {}, median {}, p99 {}, mean {:.0}",
            s.count, s.min, s.median, s.p99, s.mean
        );
        match ratio {
            Ok(Some(r)) => text += &format!(" ({r:.2}x)"),
            Ok(None) => {}
            Err(why) => title += &format!("; no ratio: {why}"),
        }
        return Cell::with_title(
            text,
            m.value
                .as_deref()
                .map_or(title.clone(), |v| format!("{title}; {v}")),
        );
    }
    match (&m.value, &m.reason) {
        (Some(v), _) => Cell::with_title(short(v), v.clone()),
        (None, Some(r)) => Cell::with_title("not measured", r.clone()),
        (None, None) => Cell::from("-"),
    }
}

/// One table row per metric (its cell in every column) and one bar per
/// timed metric's ratio against the first column.
fn metric_rows_and_ratio_bars(
    cols: &[(usize, &Input, &Characterization)],
    basis: &Basis,
    names: &[(&str, &str)],
) -> (Vec<Vec<Cell>>, Vec<Bar>) {
    let indexes: Vec<HashMap<&str, &Metric>> = cols.iter().map(|(_, _, c)| index(c)).collect();
    let mut rows = Vec::new();
    let mut bars = Vec::new();
    for &(group, name) in names.iter().take(MAX_TABLE_ROWS) {
        let first = indexes[0].get(name).copied();
        let mut row = vec![Cell::from(format!("{group}: {name}"))];
        for (k, idx) in indexes.iter().enumerate() {
            let m = idx.get(name).copied();
            let ratio = basis.ratio(first.filter(|_| k > 0), k, m);
            let timed = first.is_some_and(|f| f.unit == "ticks");
            if let Some(r) = ratio.clone().ok().flatten().filter(|_| timed) {
                let label = if cols.len() > 2 {
                    format!("{name} · {}", cols[k].1.label)
                } else {
                    name.to_string()
                };
                bars.push(Bar {
                    label,
                    series: k - 1,
                    from: Some(1.0),
                    to: r,
                    mark: None,
                    whisker: None,
                });
            }
            row.push(matrix_cell(m, ratio));
        }
        rows.push(row);
    }
    (rows, bars)
}

/// The chart of every later column's ratios against the first's.
fn ratio_chart(
    cols: &[(usize, &Input, &Characterization)],
    basis: &Basis,
    bars: Vec<Bar>,
) -> BarChart {
    BarChart {
        caption: format!(
            "Median against {} (1.0 = the same)",
            short(&cols[0].1.label)
        ),
        unit: match basis.unit {
            Unit::Ticks => "ratio of medians (TSC ticks)",
            Unit::Nanoseconds => "ratio of medians (nanoseconds)",
        }
        .into(),
        series: cols[1..]
            .iter()
            .map(|(i, input, _)| column(*i, input))
            .collect(),
        bars,
        reference: Some(1.0),
        omitted: 0,
    }
}

pub(super) fn matrix_section(inputs: &[Input]) -> Option<Section> {
    let mut cols = characterized(inputs);
    if cols.len() < 2 {
        return None;
    }
    let total = cols.len();
    cols.truncate(super::FLEET_FILES);
    let chars: Vec<&Characterization> = cols.iter().map(|(_, _, c)| *c).collect();
    let basis = Basis::of(&cols.iter().map(|(_, i, _)| &i.report).collect::<Vec<_>>());
    let names = metric_names(&chars);
    let (rows, bars) = metric_rows_and_ratio_bars(&cols, &basis, &names);
    let mut header = vec!["metric".to_string()];
    header.extend(cols.iter().map(|(i, input, _)| column(*i, input)));
    let mut blocks = vec![Block::Paragraph(format!(
        "Each characterization file is a column; ratios are against the first ({}). {} Hover a cell for its statistics, its meaning or why it is missing.",
        column(cols[0].0, cols[0].1),
        basis.describe()
    ))];
    if total > cols.len() {
        blocks.push(Block::Paragraph(format!(
            "(the first {} of {total} characterization files; the fleet view shows them all)",
            cols.len()
        )));
    }
    blocks.push(Block::Chart(Chart::Bars(ratio_chart(&cols, &basis, bars))));
    capped(
        Table {
            header,
            rows: rows.into_iter().map(Row::Cells).collect(),
            numeric: true,
        },
        names.len(),
        &mut blocks,
    );
    Some(Section {
        id: "matrix".into(),
        title: "Characterizations side by side".into(),
        blocks,
    })
}

// ----------------------------------------------------------------- trend
