//! Characterisations of one machine over time: a trend chart and table per
//! machine with more than one run.

use super::column;
use super::matrix::{characterized, index, matrix_cell};
use super::or_dash;
use crate::basis::{Basis, Unit};
use crate::Input;
use std::collections::HashMap;
use xvmm_results::document::{capped, Block, Cell, Chart, Row, Section, Table, MAX_TABLE_ROWS};
use xvmm_results::document::{Line, TrendChart};
use xvmm_results::{Characterization, Metric};

/// What tells one machine from another in a characterization: host name,
/// CPU model and count, the hypervisor it sees and where it ran.
pub(super) type MachineKey = (String, String, u32, String, &'static str);

/// Characterizations of one machine ([`MachineKey`]), by time.
pub(super) fn same_machine_runs(inputs: &[Input]) -> Vec<Vec<(usize, &Input, &Characterization)>> {
    let mut groups: Vec<Vec<(usize, &Input, &Characterization)>> = Vec::new();
    let mut by_key: HashMap<MachineKey, usize> = HashMap::new();
    for (i, input, c) in characterized(inputs) {
        let (r, m) = (&input.report, input.report.machine.as_ref());
        let key = (
            c.hostname.clone(),
            r.host.cpu_model.clone(),
            m.map_or(0, |m| m.logical_cpus),
            r.host.hypervisor_signature.clone(),
            r.environment.describe(),
        );
        let g = *by_key.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push((i, input, c));
    }
    for g in &mut groups {
        g.sort_by_key(|(_, _, c)| c.started_unix);
    }
    groups.retain(|g| {
        g.len() >= 2 && g.first().map(|f| f.2.started_unix) != g.last().map(|l| l.2.started_unix)
    });
    groups
}

pub(super) fn trend_sections(inputs: &[Input]) -> Vec<Section> {
    same_machine_runs(inputs)
        .into_iter()
        .enumerate()
        .map(|(n, runs)| trend_section(n, &runs))
        .collect()
}

/// A time axis unit that suits a span of `seconds`: (name, seconds per unit).
pub(super) fn time_unit(seconds: u64) -> (&'static str, f64) {
    match seconds {
        0..=119 => ("seconds", 1.0),
        120..=7199 => ("minutes", 60.0),
        7200..=172_799 => ("hours", 3600.0),
        _ => ("days", 86_400.0),
    }
}

pub(super) fn trend_section(n: usize, all: &[(usize, &Input, &Characterization)]) -> Section {
    // The table has a column per run: the latest ones, at most FLEET_FILES.
    let runs = &all[all.len().saturating_sub(super::FLEET_FILES)..];
    let t0 = runs[0].2.started_unix;
    let span = runs[runs.len() - 1].2.started_unix.saturating_sub(t0);
    let (unit, per) = time_unit(span);
    let indexes: Vec<HashMap<&str, &Metric>> = runs.iter().map(|r| index(r.2)).collect();
    let basis = Basis::of(&runs.iter().map(|r| &r.1.report).collect::<Vec<_>>());
    let timed: Vec<&Metric> = runs[0]
        .2
        .metrics
        .iter()
        .filter(|m| m.measured().is_some() && m.unit == "ticks")
        .collect();
    let since = |c: &Characterization| c.started_unix.saturating_sub(t0) as f64 / per;
    let lines = timed
        .iter()
        .map(|m| Line {
            name: m.name.clone(),
            points: runs
                .iter()
                .zip(&indexes)
                .enumerate()
                .filter_map(|(k, (r, idx))| {
                    let ratio = basis.ratio(Some(m), k, idx.get(m.name.as_str()).copied());
                    Some((since(r.2), ratio.ok()??))
                })
                .collect(),
        })
        .collect();
    let mut header = vec!["metric".to_string()];
    header.extend(
        runs.iter()
            .map(|r| format!("{} (+{:.1} {unit})", column(r.0, r.1), since(r.2))),
    );
    let table = Table {
        header,
        rows: trend_rows(&timed, &indexes, &basis)
            .into_iter()
            .map(Row::Cells)
            .collect(),
        numeric: true,
    };
    let host = &runs[0].2.hostname;
    let mut blocks = vec![
        Block::Paragraph(format!(
            "{} characterizations of the same machine ({}, {}) over {:.1} {unit}: medians relative to the first run. {}",
            runs.len(),
            or_dash(host),
            or_dash(&runs[0].1.report.host.cpu_model),
            span as f64 / per,
            basis.describe()
        )),
        Block::Chart(Chart::Trend(TrendChart {
            caption: "Median relative to the first run".into(),
            x_unit: format!("{unit} since the first run"),
            y_unit: match basis.unit {
                Unit::Ticks => "ratio (TSC ticks)",
                Unit::Nanoseconds => "ratio (nanoseconds)",
            }
            .into(),
            lines,
            reference: Some(1.0),
        })),
    ];
    if all.len() > runs.len() {
        blocks.push(Block::Paragraph(format!(
            "(the latest {} of {} runs)",
            runs.len(),
            all.len()
        )));
    }
    capped(table, timed.len(), &mut blocks);
    Section {
        id: format!("trend-{}", n + 1),
        title: format!("Trend: {} over time", or_dash(host)),
        blocks,
    }
}

/// The trend table's rows: each timed metric (at most [`MAX_TABLE_ROWS`]),
/// each run's median relative to the first run's.
pub(super) fn trend_rows(
    timed: &[&Metric],
    indexes: &[HashMap<&str, &Metric>],
    basis: &Basis,
) -> Vec<Vec<Cell>> {
    timed
        .iter()
        .take(MAX_TABLE_ROWS)
        .map(|m| {
            let mut row = vec![Cell::from(m.name.as_str())];
            row.extend(indexes.iter().enumerate().map(|(k, idx)| {
                let this = idx.get(m.name.as_str()).copied();
                matrix_cell(this, basis.ratio(Some(*m).filter(|_| k > 0), k, this))
            }));
            row
        })
        .collect()
}

// ------------------------------------------------------- one file's section
