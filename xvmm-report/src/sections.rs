//! What the report shows, built from the result files: the inputs, VM
//! against bare metal, the characterisation matrix and trend, and one
//! section per file (summary, distributions, exits, characterisation, notes,
//! machine).
//!
//! Every loop here is linear in the size of the files (a result file is
//! untrusted: its number of crossings or metrics is not ours to pick), and
//! tables and charts are cut at fixed sizes with the number left out said.

use super::basis::{Basis, Unit};
use super::charts::{self, Bar, BarChart, Bin, Distribution, Line, TrendChart};
use super::document::{capped, Block, Cell, Chart, Document, Section, Table, MAX_TABLE_ROWS};
use super::Input;
use std::collections::HashMap;
use xvmm_results::render::{by_group, machine_facts};
use xvmm_results::{
    compare, Characterization, Comparison, Crossing, Environment, Interval, Metric, Report, Sample,
    Stats, Status,
};

/// Most distributions drawn per file.
pub const MAX_DISTRIBUTIONS: usize = 60;
/// Longest value shown in a matrix cell (the whole text is its title).
const MAX_CELL: usize = 60;
const TICKS: &str = "TSC ticks (null overhead subtracted)";

/// The whole document.
pub fn document(inputs: &[Input]) -> Document {
    let mut sections = vec![inputs_section(inputs)];
    sections.extend(comparison_sections(inputs));
    sections.extend(matrix_section(inputs));
    sections.extend(trend_sections(inputs));
    sections.extend(
        inputs
            .iter()
            .enumerate()
            .map(|(i, input)| report_section(i, input)),
    );
    Document {
        title: "xvmm report".into(),
        subtitle: format!(
            "{} result file(s), rendered by xvmm {}",
            inputs.len(),
            env!("CARGO_PKG_VERSION")
        ),
        sections,
    }
}

fn column(i: usize, input: &Input) -> String {
    format!("#{} {}", i + 1, input.label)
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn inputs_section(inputs: &[Input]) -> Section {
    let header = [
        "#",
        "file",
        "tool",
        "environment",
        "CPU",
        "kernel",
        "TSC kHz",
        "hypervisor",
        "contents",
    ];
    let rows = inputs
        .iter()
        .enumerate()
        .take(MAX_TABLE_ROWS)
        .map(|(i, input)| {
            let r = &input.report;
            let mut contents = format!("{} crossings, {} exits", r.crossings.len(), r.exits.len());
            if !r.host_exits.is_empty() {
                contents += &format!(", {} traced exit reasons", r.host_exits.len());
            }
            if let Some(c) = &r.characterize {
                contents += &format!(", characterization ({} metrics)", c.metrics.len());
            }
            vec![
                Cell::from(format!("{}", i + 1)),
                input.label.as_str().into(),
                r.tool.as_str().into(),
                r.environment.describe().into(),
                or_dash(&r.host.cpu_model).into(),
                or_dash(&r.host.kernel_release).into(),
                r.host.tsc_khz.to_string().into(),
                or_dash(&r.host.hypervisor_signature).into(),
                contents.into(),
            ]
        })
        .collect();
    let mut blocks = Vec::new();
    capped(
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: false,
        },
        inputs.len(),
        &mut blocks,
    );
    Section {
        id: "inputs".into(),
        title: "Result files".into(),
        blocks,
    }
}

// ------------------------------------------------------------- comparison

/// Each VM report against the first bare-metal report.
fn comparison_sections(inputs: &[Input]) -> Vec<Section> {
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
fn comparison_chart(c: &Comparison) -> BarChart {
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

fn comparison_section(v: usize, vm: &Input, b: usize, bare: &Input) -> Section {
    let c = compare(&vm.report, &bare.report);
    let chart = comparison_chart(&c);
    let fig = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let rows = c
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
            rows,
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

fn characterized(inputs: &[Input]) -> Vec<(usize, &Input, &Characterization)> {
    inputs
        .iter()
        .enumerate()
        .filter_map(|(i, input)| input.report.characterize.as_ref().map(|c| (i, input, c)))
        .collect()
}

/// Metric names of all columns, first appearance first, each once.
fn metric_names<'a>(columns: &[&'a Characterization]) -> Vec<(&'a str, &'a str)> {
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

fn index(c: &Characterization) -> HashMap<&str, &Metric> {
    let mut map = HashMap::with_capacity(c.metrics.len());
    for m in &c.metrics {
        map.entry(m.name.as_str()).or_insert(m);
    }
    map
}

fn short(text: &str) -> String {
    if text.chars().count() <= MAX_CELL {
        return text.to_string();
    }
    let mut s: String = text.chars().take(MAX_CELL - 1).collect();
    s.push('…');
    s
}

/// A metric as a matrix cell, with its ratio against the first column's
/// (see [`Basis::ratio`]; `Ok(None)` in the first column).
fn matrix_cell(m: Option<&Metric>, ratio: Result<Option<f64>, String>) -> Cell {
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

fn matrix_section(inputs: &[Input]) -> Option<Section> {
    let cols = characterized(inputs);
    if cols.len() < 2 {
        return None;
    }
    let chars: Vec<&Characterization> = cols.iter().map(|(_, _, c)| *c).collect();
    let basis = Basis::of(&cols.iter().map(|(_, i, _)| &i.report).collect::<Vec<_>>());
    let indexes: Vec<HashMap<&str, &Metric>> = chars.iter().map(|c| index(c)).collect();
    let mut rows = Vec::new();
    let mut bars = Vec::new();
    let names = metric_names(&chars);
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
    let mut header = vec!["metric".to_string()];
    header.extend(cols.iter().map(|(i, input, _)| column(*i, input)));
    let mut blocks = vec![Block::Paragraph(format!(
        "Each characterization file is a column; ratios are against the first ({}). {} Hover a cell for its statistics, its meaning or why it is missing.",
        column(cols[0].0, cols[0].1),
        basis.describe()
    ))];
    blocks.push(Block::Chart(Chart::Bars(BarChart {
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
    })));
    capped(
        Table {
            header,
            rows,
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

/// What tells one machine from another in a characterization: host name,
/// CPU model and count, the hypervisor it sees and where it ran.
type MachineKey = (String, String, u32, String, &'static str);

/// Characterizations of one machine ([`MachineKey`]), by time.
fn same_machine_runs(inputs: &[Input]) -> Vec<Vec<(usize, &Input, &Characterization)>> {
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

fn trend_sections(inputs: &[Input]) -> Vec<Section> {
    same_machine_runs(inputs)
        .into_iter()
        .enumerate()
        .map(|(n, runs)| trend_section(n, &runs))
        .collect()
}

/// A time axis unit that suits a span of `seconds`: (name, seconds per unit).
fn time_unit(seconds: u64) -> (&'static str, f64) {
    match seconds {
        0..=119 => ("seconds", 1.0),
        120..=7199 => ("minutes", 60.0),
        7200..=172_799 => ("hours", 3600.0),
        _ => ("days", 86_400.0),
    }
}

fn trend_section(n: usize, runs: &[(usize, &Input, &Characterization)]) -> Section {
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
        rows: trend_rows(&timed, &indexes, &basis),
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
    capped(table, timed.len(), &mut blocks);
    Section {
        id: format!("trend-{}", n + 1),
        title: format!("Trend: {} over time", or_dash(host)),
        blocks,
    }
}

/// The trend table's rows: each timed metric (at most [`MAX_TABLE_ROWS`]),
/// each run's median relative to the first run's.
fn trend_rows(
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

/// One measured segment of a report: label, statistics, raw values if kept.
struct Segment {
    label: String,
    stats: Stats,
    raw: Option<Vec<u64>>,
}

type IntervalOf = fn(&Crossing) -> &Option<Interval>;
type ValueOf = fn(&Sample) -> u64;

const CROSSING_SEGMENTS: [(&str, IntervalOf, ValueOf); 4] = [
    ("u2k", |c| &c.u2k, Sample::u2k),
    ("k2u", |c| &c.k2u, Sample::k2u),
    ("in kernel", |c| &c.in_kernel, Sample::in_kernel),
    ("round trip", |c| &c.round_trip, Sample::round_trip),
];

/// The first `limit` crossing segments and exit round trips with samples,
/// in order, and how many there are in all.
fn segments(r: &Report, limit: usize) -> (Vec<Segment>, usize) {
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
fn range_bar(label: String, s: &Stats) -> Bar {
    Bar {
        label,
        series: 0,
        from: Some(s.min as f64),
        to: s.p99 as f64,
        mark: Some(s.median as f64),
        whisker: Some(s.max as f64),
    }
}

fn report_section(i: usize, input: &Input) -> Section {
    let r = &input.report;
    let mut blocks = vec![Block::Paragraph(summary(r))];
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
        let rows = facts
            .into_iter()
            .take(MAX_TABLE_ROWS)
            .map(|(k, v)| vec![Cell::from(k), Cell::from(v)])
            .collect();
        capped(
            Table {
                header: vec!["fact".into(), "value".into()],
                rows,
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

/// What the report's timings had subtracted: older reports the null
/// overhead from everything, newer ones each interval's own stamps, the user
/// pair's being the null pair or its sweep's intercept.
fn subtracted(r: &Report) -> String {
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

fn summary(r: &Report) -> String {
    let n = &r.null_overhead;
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

fn stat_cells(s: Option<&Stats>) -> [Cell; 2] {
    match s.filter(|s| s.count > 0) {
        Some(s) => [s.median.to_string().into(), s.p99.to_string().into()],
        None => ["-".into(), "-".into()],
    }
}

fn crossing_blocks(r: &Report, blocks: &mut Vec<Block>) {
    if !r.crossings.is_empty() {
        let rows = r
            .crossings
            .iter()
            .take(MAX_TABLE_ROWS)
            .map(|c| {
                let status = match c.status.why_not() {
                    None => Cell::from("measured"),
                    Some(why) => Cell::with_title(short(&why), why),
                };
                let mut row = vec![
                    Cell::from(c.name.as_str()),
                    status,
                    format!("{}/{}", c.samples_valid, c.samples_requested).into(),
                ];
                for i in [&c.u2k, &c.k2u, &c.round_trip] {
                    row.extend(stat_cells(i.as_ref().map(|i| &i.corrected)));
                }
                row
            })
            .collect();
        let header = [
            "crossing",
            "status",
            "valid",
            "u2k med",
            "u2k p99",
            "k2u med",
            "k2u p99",
            "rtrip med",
            "rtrip p99",
        ];
        blocks.push(Block::Subheading("Crossings".into()));
        let t = Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: true,
        };
        capped(t, r.crossings.len(), blocks);
    }
    if !r.exits.is_empty() {
        let rows = r
            .exits
            .iter()
            .take(MAX_TABLE_ROWS)
            .map(|e| {
                let mut row = vec![
                    Cell::from(e.name.as_str()),
                    format!("{}/{}", e.samples_valid, e.samples_requested).into(),
                ];
                row.extend(stat_cells(e.round_trip.as_ref().map(|i| &i.corrected)));
                for s in [&e.guest_to_vmm, &e.in_vmm, &e.vmm_to_guest] {
                    row.push(stat_cells(s.as_ref())[0].clone());
                }
                row
            })
            .collect();
        let header = [
            "VM exit",
            "valid",
            "rtrip med",
            "rtrip p99",
            "guest->VMM med",
            "in VMM med",
            "VMM->guest med",
        ];
        blocks.push(Block::Subheading("VM exits timed in the guest".into()));
        let t = Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows,
            numeric: true,
        };
        capped(t, r.exits.len(), blocks);
    }
}

fn host_exit_blocks(r: &Report, blocks: &mut Vec<Block>) {
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
    let rows = r
        .host_exits
        .iter()
        .take(MAX_TABLE_ROWS)
        .map(|e| {
            let s = &e.exit_to_entry;
            let total = s.mean * s.count as f64;
            vec![
                Cell::from(e.reason.as_str()),
                s.count.to_string().into(),
                s.median.to_string().into(),
                s.p99.to_string().into(),
                format!("{total:.0}").into(),
            ]
        })
        .collect();
    let header = ["reason", "count", "median", "p99", "total (mean x count)"];
    let t = Table {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
        numeric: true,
    };
    capped(t, r.host_exits.len(), blocks);
}

fn characterize_blocks(c: &Characterization, blocks: &mut Vec<Block>) {
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
    let mut rows = Vec::new();
    for (group, metrics) in by_group(c) {
        for m in metrics
            .into_iter()
            .take(MAX_TABLE_ROWS.saturating_sub(rows.len()))
        {
            let mut row = vec![Cell::from(group), Cell::from(m.name.as_str())];
            match m.measured() {
                Some(s) => row.extend(
                    [
                        s.count.to_string(),
                        s.min.to_string(),
                        s.median.to_string(),
                        s.p99.to_string(),
                        format!("{:.0}", s.mean),
                        m.unit.clone(),
                    ]
                    .map(Cell::from),
                ),
                None => row.extend((0..6).map(|_| Cell::from(""))),
            }
            row.push(match (&m.value, &m.reason) {
                (Some(v), _) => Cell::from(v.as_str()),
                (None, Some(r)) => Cell::from(format!("not measured: {r}")),
                (None, None) => Cell::from("-"),
            });
            rows.push(row);
        }
    }
    let header = [
        "group",
        "metric",
        "n",
        "min",
        "median",
        "p99",
        "mean",
        "unit",
        "value or reason",
    ];
    let t = Table {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
        numeric: true,
    };
    capped(t, c.metrics.len(), blocks);
}

// ------------------------------------------------------------ distributions

/// Bins of a segment: from the raw values when the file kept them (log
/// spaced when they span more than [`charts::LOG_SPAN`]), else from the
/// stored histogram (min to p99) plus one bin for the tail to the max.
pub fn distribution(caption: &str, stats: &Stats, raw: Option<&[u64]>) -> Distribution {
    let bins = match raw.filter(|r| !r.is_empty()) {
        Some(values) => bins_of(values, stats.p99),
        None => bins_of_histogram(stats),
    };
    Distribution {
        caption: caption.to_string(),
        unit: TICKS.into(),
        bins,
        median: stats.median as f64,
        p99: stats.p99 as f64,
    }
}

const RAW_BINS: usize = 40;

/// Bins of raw values, linear or log-spaced; the ones at or past the p99
/// are the tail.
pub fn bins_of(values: &[u64], p99: u64) -> Vec<Bin> {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Vec::new();
    };
    let (lo, hi) = (min as f64, max as f64 + 1.0);
    let log = hi / lo.max(1.0) > charts::LOG_SPAN;
    let (a, b) = if log {
        (lo.max(1.0).ln(), hi.ln())
    } else {
        (lo, hi)
    };
    let step = (b - a) / RAW_BINS as f64;
    let edge = |k: usize| {
        let e = a + step * k as f64;
        if log {
            e.exp()
        } else {
            e
        }
    };
    let mut counts = vec![0u64; RAW_BINS];
    for &v in values {
        let x = if log {
            (v as f64).max(1.0).ln()
        } else {
            v as f64
        };
        let k = if step > 0.0 {
            xvmm_results::num::usize_saturating((x - a) / step)
        } else {
            0
        };
        counts[k.min(RAW_BINS - 1)] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(k, count)| Bin {
            lo: edge(k),
            hi: edge(k + 1),
            count,
            tail: edge(k) >= p99 as f64,
        })
        .collect()
}

/// The stored histogram's buckets (merged down to at most
/// [`charts::MAX_BINS`]) and the tail above the p99 as one bin.
pub fn bins_of_histogram(stats: &Stats) -> Vec<Bin> {
    let h = &stats.histogram;
    let width = h.width.max(1) as f64;
    let merge = h.counts.len().div_ceil(charts::MAX_BINS).max(1);
    let mut bins: Vec<Bin> = h
        .counts
        .chunks(merge)
        .enumerate()
        .map(|(k, chunk)| {
            let lo = h.start as f64 + (k * merge) as f64 * width;
            Bin {
                lo,
                hi: lo + chunk.len() as f64 * width,
                count: chunk.iter().fold(0u64, |a, &c| a.saturating_add(c)),
                tail: false,
            }
        })
        .collect();
    if h.above > 0 {
        let lo = h.start as f64 + h.counts.len() as f64 * width;
        bins.push(Bin {
            lo,
            hi: (stats.max as f64).max(lo + width),
            count: h.above,
            tail: true,
        });
    }
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_what_was_subtracted() {
        use xvmm_results::correction::{PairCost, StampCosts};
        use xvmm_results::sweep::{decide, SweepFit, SweepPhase};
        let mut r = Report::new(
            "t".into(),
            xvmm_results::Environment::Microguest,
            xvmm_results::HostFacts::default(),
            xvmm_results::Method::standard(1, 2),
        );
        assert!(summary(&r).ends_with("samples) subtracted from every timing."));
        let costs = StampCosts::new(PairCost::from_rounds("a", "b", &[vec![42]]), None, None);
        r.stamp_costs = Some(costs.clone());
        assert!(
            summary(&r).ends_with("own stamps' cost (user pair 42)."),
            "{}",
            summary(&r)
        );
        let phase = SweepPhase::from_medians(&[16, 32], &[70, 102], 10).unwrap();
        let sweep = decide(
            42,
            SweepFit::new(vec![phase], Some(2.0)).unwrap(),
            Some(2.0),
        );
        r.stamp_costs = Some(costs.with_user_sweep(sweep));
        assert!(
            summary(&r).ends_with("sweep's intercept, 38 ticks (the null pair is +4.0 off)."),
            "{}",
            summary(&r)
        );
    }
    use xvmm_results::progress::Silent;
    use xvmm_results::{HostFacts, Method};

    fn report(env: Environment, names: &[&str], scale: u64) -> Report {
        let host = HostFacts {
            cpu_model: "Test CPU".into(),
            tsc_khz: 2_000_000,
            ..Default::default()
        };
        let mut r = Report::new("test".into(), env, host, Method::standard(1, 4));
        r.null_overhead = Stats::from_samples(&[40, 50, 60]);
        for name in names {
            let samples: Vec<Sample> = (0..4)
                .map(|i| Sample {
                    u2k_u: 0,
                    u2k_k: 100 * scale + i,
                    k2u_k: 300 * scale,
                    k2u_u: 500 * scale + i,
                    cpu: None,
                    interrupts: None,
                })
                .collect();
            r.crossings.push(Crossing::from_samples(
                name,
                4,
                &samples,
                &xvmm_results::Corrections::derive(50, Some((50, 10))),
                true,
            ));
        }
        r
    }

    fn input(label: &str, report: Report) -> Input {
        Input {
            label: label.into(),
            report,
        }
    }

    fn characterized(host: &str, started: u64, cpuid: u64) -> Report {
        let mut r = report(Environment::BareMetal, &["getppid"], 1);
        r.characterize = Some(Characterization {
            started_unix: started,
            seconds: 1.0,
            hostname: host.into(),
            privileged: false,
            metrics: vec![
                Metric::from_samples("exits", "cpuid", "ticks", &[cpuid, cpuid + 10]),
                Metric::fact("hypervisor", "virt", "kvm"),
                Metric::missing("hypervisor", "dmi", "no DMI"),
            ],
        });
        r
    }

    fn ids(doc: &Document) -> Vec<&str> {
        doc.sections.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn a_vm_and_a_bare_metal_file_give_a_comparison_with_both_sides() {
        let doc = document(&[
            input("vm.json", report(Environment::LinuxVm, &["getppid"], 2)),
            input("bm.json", report(Environment::BareMetal, &["getppid"], 1)),
        ]);
        assert_eq!(ids(&doc), ["inputs", "compare-1", "file-1", "file-2"]);
        let Some(Block::Chart(Chart::Bars(chart))) = doc.sections[1].blocks.get(1) else {
            panic!("no comparison chart: {:?}", doc.sections[1].blocks);
        };
        assert_eq!(chart.series, ["VM", "bare metal"]);
        let sides: Vec<usize> = chart.bars.iter().map(|b| b.series).collect();
        assert!(sides.contains(&0) && sides.contains(&1), "{sides:?}");
        // u2k raw 200 (VM) vs 100 (BM), minus its stamp cost (50 + 50) / 2.
        let u2k: Vec<f64> = chart
            .bars
            .iter()
            .filter(|b| b.label.starts_with("getppid u2k"))
            .map(|b| b.to)
            .collect();
        assert_eq!(u2k, [151.0, 51.0]);
    }

    #[test]
    fn characterizations_give_a_matrix_and_over_time_a_trend() {
        let doc = document(&[
            input("a.json", characterized("box", 1_000, 1000)),
            input("b.json", characterized("box", 1_000 + 7200, 2000)),
            input("c.json", characterized("other", 5, 500)),
        ]);
        assert_eq!(
            ids(&doc),
            ["inputs", "matrix", "trend-1", "file-1", "file-2", "file-3"]
        );
        let matrix = &doc.sections[1];
        let Some(Block::Table(t)) = matrix.blocks.iter().find(|b| matches!(b, Block::Table(_)))
        else {
            panic!("no matrix table");
        };
        let cpuid = t.rows.iter().find(|r| r[0].text == "exits: cpuid").unwrap();
        // Nearest-rank medians of two samples: the lower one.
        assert_eq!(cpuid[1].text, "1000 ticks");
        assert_eq!(cpuid[2].text, "2000 ticks (2.00x)");
        let dmi = t
            .rows
            .iter()
            .find(|r| r[0].text == "hypervisor: dmi")
            .unwrap();
        assert_eq!(
            (dmi[1].text.as_str(), dmi[1].title.as_deref()),
            ("not measured", Some("no DMI"))
        );
        let Some(Block::Chart(Chart::Trend(trend))) = doc.sections[2].blocks.get(1) else {
            panic!("no trend chart");
        };
        let cpuid_line = trend.lines.iter().find(|l| l.name == "cpuid").unwrap();
        assert_eq!(cpuid_line.points.len(), 2);
        assert_eq!(cpuid_line.points[1].0, 2.0, "two hours later");
        assert_eq!(trend.x_unit, "hours since the first run");
        assert_eq!(time_unit(30), ("seconds", 1.0));
        assert_eq!(time_unit(10 * 86_400).0, "days");
        assert_eq!(cpuid_line.points[1].1, 2.0);
        // One file per machine: no trend. The same host name under another
        // hypervisor is another machine (L1 and L2 of the harness).
        let doc = document(&[
            input("a", characterized("x", 1, 5)),
            input("b", characterized("y", 2, 5)),
        ]);
        assert_eq!(ids(&doc), ["inputs", "matrix", "file-1", "file-2"]);
        let mut guest = characterized("x", 2, 5);
        guest.host.hypervisor_signature = "KVMKVMKVM".into();
        let doc = document(&[input("a", characterized("x", 1, 5)), input("b", guest)]);
        assert_eq!(ids(&doc), ["inputs", "matrix", "file-1", "file-2"]);
    }

    /// The matrix's `exits: cpuid` row.
    fn cpuid_row(doc: &Document) -> Vec<Cell> {
        let matrix = doc.sections.iter().find(|s| s.id == "matrix").unwrap();
        let Some(Block::Table(t)) = matrix.blocks.iter().find(|b| matches!(b, Block::Table(_)))
        else {
            panic!("no matrix table");
        };
        t.rows
            .iter()
            .find(|r| r[0].text == "exits: cpuid")
            .unwrap()
            .clone()
    }

    fn matrix_text(doc: &Document) -> String {
        let matrix = doc.sections.iter().find(|s| s.id == "matrix").unwrap();
        format!("{:?}", matrix.blocks)
    }

    #[test]
    fn machines_with_different_tsc_rates_compare_in_nanoseconds() {
        // 3000 ticks at 3 GHz and 2000 ticks at 2 GHz: both 1 us.
        let mut fast = characterized("fast", 1, 3000);
        fast.host.tsc_khz = 3_000_000;
        let mut slow = characterized("slow", 2, 2000);
        slow.host.tsc_khz = 2_000_000;
        let doc = document(&[input("slow", slow.clone()), input("fast", fast.clone())]);
        let row = cpuid_row(&doc);
        assert_eq!(row[2].text, "3000 ticks (1.00x)", "{row:?}");
        let text = matrix_text(&doc);
        assert!(text.contains("ratios of nanoseconds"), "{text}");
        // One TSC rate (within 0.1 %): ticks, and the page says so.
        fast.host.tsc_khz = 2_001_000;
        let doc = document(&[input("slow", slow.clone()), input("fast", fast.clone())]);
        assert_eq!(cpuid_row(&doc)[2].text, "3000 ticks (1.50x)");
        assert!(matrix_text(&doc).contains("ratios of TSC ticks"));
        // A file without a rate cannot be converted: no ratio, and why.
        fast.host.tsc_khz = 0;
        let doc = document(&[input("slow", slow), input("fast", fast)]);
        let row = cpuid_row(&doc);
        assert_eq!(row[2].text, "3000 ticks", "{row:?}");
        assert!(row[2].title.as_deref().unwrap().contains("no TSC rate"));
    }

    #[test]
    fn metrics_in_different_units_get_no_ratio() {
        let mut a = characterized("a", 1, 1000);
        let mut b = characterized("b", 2, 1000);
        for (r, chunk) in [(&mut a, 128), (&mut b, 64)] {
            let c = r.characterize.as_mut().unwrap();
            c.metrics[0].unit = format!("ticks/{chunk} pauses");
        }
        let row = cpuid_row(&document(&[input("a", a), input("b", b)]));
        assert_eq!(row[2].text, "1000 ticks/64 pauses", "{row:?}");
    }

    #[test]
    fn raw_samples_and_stored_histograms_become_bins() {
        let lin = bins_of(&[100, 110, 120, 130, 1000], 130);
        assert_eq!(lin.iter().map(|b| b.count).sum::<u64>(), 5);
        assert!(lin.iter().all(|b| b.lo < b.hi));
        assert!(lin.last().unwrap().tail && !lin[0].tail);
        let log = bins_of(&[1, 10, 100, 1000, 10_000, 0], 1000);
        assert!(log[1].hi / log[1].lo > 1.1, "log-spaced: {log:?}");
        assert_eq!(log.iter().map(|b| b.count).sum::<u64>(), 6);
        assert!(bins_of(&[], 0).is_empty());
        assert_eq!(
            bins_of(&[7, 7, 7], 7).iter().map(|b| b.count).sum::<u64>(),
            3
        );

        let mut values: Vec<u64> = (0..1000).map(|i| 400 + i % 50).collect();
        values.extend([100_000; 5]);
        let stats = Stats::from_samples(&values);
        let bins = bins_of_histogram(&stats);
        let tail = bins.last().unwrap();
        assert!(tail.tail && tail.hi == 100_000.0, "{tail:?}");
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 1005);
        // A hostile histogram: a million buckets of width 0.
        let mut odd = stats.clone();
        odd.histogram.counts = vec![1; 1_000_000];
        odd.histogram.width = 0;
        let bins = bins_of_histogram(&odd);
        assert!(bins.len() <= charts::MAX_BINS + 1);
        assert_eq!(
            bins.iter()
                .filter(|b| !b.tail)
                .map(|b| b.count)
                .sum::<u64>(),
            1_000_000
        );
    }

    #[test]
    fn a_huge_file_is_cut_to_fixed_sizes() {
        let names: Vec<String> = (0..3000).map(|i| format!("c{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let doc = document(&[input("huge.json", report(Environment::BareMetal, &refs, 1))]);
        let file = &doc.sections[1];
        let grid = file.blocks.iter().find_map(|b| match b {
            Block::Grid(g) => Some(g.len()),
            _ => None,
        });
        assert_eq!(grid, Some(MAX_DISTRIBUTIONS));
        let tables: Vec<usize> = file
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Table(t) => Some(t.rows.len()),
                _ => None,
            })
            .collect();
        assert!(tables.iter().all(|&n| n <= MAX_TABLE_ROWS), "{tables:?}");
        assert!(file
            .blocks
            .iter()
            .any(|b| matches!(b, Block::Paragraph(p) if p.contains("of 3000 rows"))));
        let html = super::super::html(
            &[input(
                "huge.json",
                report(Environment::BareMetal, &refs[..200], 1),
            )],
            &Silent,
        );
        assert!(html.len() < 8 << 20, "{} bytes", html.len());
    }

    #[test]
    fn names_from_files_reach_the_page_as_text() {
        let mut r = report(Environment::BareMetal, &["<script>alert(1)</script>"], 1);
        r.notes.push("<img src=x onerror=alert(1)>".into());
        r.tool = "\"><svg onload=alert(1)>".into();
        let html = super::super::html(&[input("<b>.json", r.clone())], &Silent);
        for raw in ["<script", "<img", "<b>", "<svg onload"] {
            assert!(!html.contains(raw), "{raw} reached the page raw");
        }
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        let md = super::super::markdown(&[input("<b>.json", r)], &Silent);
        assert!(!md.contains("<script") && md.contains("&lt;script&gt;"));
        assert!(md.contains("*Chart (in the HTML report): "));
    }
}
