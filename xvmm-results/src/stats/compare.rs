//! A VM report against a bare-metal report of the same crossings: the
//! `xvmm-comparison` schema and how it is computed.
//!
//! Two rules. No difference subtracts ticks of two clocks: when the files'
//! TSC rates differ, every difference is of nanoseconds (each side's ticks
//! over its own rate), and the comparison names its unit. And a
//! decomposition adds up in the statistic it names: the VM's mean minus
//! bare metal's is split exactly into what no exit explains, what exits
//! explain and what the samples the trace cannot vouch for add. Medians do
//! not add, so the median difference stands beside it, undecomposed.

use crate::attribution::SegmentHost;
use crate::probes::{compare_probes, ProbeComparisonRow};
use crate::stats::clocks::Clocks;
pub use crate::stats::clocks::DiffUnit;
use crate::stats::workload_compare::{compare_workloads, WorkloadComparison};
use crate::{Crossing, Environment, Interval, Report, Stats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Name of the comparison schema written by `xvmm compare --json`.
pub const COMPARISON_SCHEMA: &str = "xvmm-comparison";
/// 2: differences in `diff_unit`; `without_exits`, `exits` and
/// `unattributable` are the parts of the mean difference.
pub const COMPARISON_SCHEMA_VERSION: u32 = 2;

/// One interval of one crossing, VM against bare metal (corrected values).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ComparisonRow {
    pub crossing: String,
    /// "u2k", "k2u" or "round_trip".
    pub interval: String,
    /// Each file's own ticks.
    pub vm_median: Option<u64>,
    pub vm_p99: Option<u64>,
    pub bare_median: Option<u64>,
    pub bare_p99: Option<u64>,
    /// Each file's own ticks; absent from older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_mean: Option<f64>,
    /// VM minus bare metal, in the comparison's `diff_unit`. Not
    /// decomposable: medians and p99s do not add.
    pub diff_median: Option<i64>,
    pub diff_p99: Option<i64>,
    /// VM mean minus bare-metal mean, in `diff_unit`: what `without_exits`,
    /// `exits` and `unattributable` add up to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_mean: Option<f64>,
    /// VM over bare metal, of nanoseconds when the rates differ.
    pub ratio_median: Option<f64>,
    pub ratio_p99: Option<f64>,
    /// Why a side has no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The parts of `diff_mean` (only when the VM run was traced and its
    /// attribution covers the interval's samples; all three or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_exits: Option<WithoutExits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<ExitsPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattributable: Option<UnattributablePart>,
    /// Whether the VM run's timeline was verified (see `timeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_verified: Option<bool>,
}

/// The part of the mean difference no exit explains: the VM's exit-free
/// mean minus the bare-metal mean, in `diff_unit`, with an approximate
/// 95 % interval (two independent means, normal approximation). Within-run
/// scatter only: how far two runs on different days differ is not in it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WithoutExits {
    pub mean: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<f64>,
}

/// The part of the mean difference exits explain, in `diff_unit`: the
/// fraction of samples with exits times what such a sample costs more
/// than an exit-free one on average.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExitsPart {
    /// Samples with an exit in the segment, of all the VM's samples.
    pub hits: u64,
    pub samples: u64,
    pub hit_fraction: f64,
    /// The hit samples' mean minus the exit-free mean.
    pub per_hit: f64,
    /// `hit_fraction` times `per_hit`.
    pub mean: f64,
    /// `mean` shared among exit reasons by host time (by count where the
    /// trace timed none), adding up to it.
    pub by_reason: BTreeMap<String, f64>,
}

/// The part of the mean difference from the samples the trace cannot
/// vouch for (events lost in their windows...), in `diff_unit`: their
/// fraction times their mean minus the exit-free mean. Exits may be in it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UnattributablePart {
    pub samples: u64,
    pub fraction: f64,
    pub mean: f64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Comparison {
    pub schema: String,
    pub schema_version: u32,
    pub vm_tool: String,
    pub bare_metal_tool: String,
    /// The unit of every difference (`diff_*`, the parts of `diff_mean`).
    #[serde(default)]
    pub diff_unit: DiffUnit,
    /// Each file's TSC rate (0: unknown), which turns its ticks into ns.
    #[serde(default)]
    pub vm_tsc_khz: u64,
    #[serde(default)]
    pub bare_tsc_khz: u64,
    pub rows: Vec<ComparisonRow>,
    /// Caveats (mismatched environments, TSC rates...).
    pub notes: Vec<String>,
    /// Instrumentation modes, VM against bare metal (reports of `xperf probes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeComparisonRow>,
    /// Two files of one workload (`xperf workload`, `xvmm --workload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadComparison>,
}

impl Comparison {
    pub fn to_json_pretty(&self) -> String {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A VM figure of its own ticks in `diff_unit`.
    pub fn vm_in_unit(&self, ticks: f64) -> f64 {
        ticks * self.clocks().vm
    }

    /// A bare-metal figure of its own ticks in `diff_unit`.
    pub fn bare_in_unit(&self, ticks: f64) -> f64 {
        ticks * self.clocks().bare
    }

    fn clocks(&self) -> Clocks {
        Clocks::of(self.vm_tsc_khz, self.bare_tsc_khz)
    }
}

/// Picks one interval of a crossing.
type IntervalField = fn(&Crossing) -> &Option<Interval>;

const INTERVALS: [(&str, IntervalField); 3] = [
    ("u2k", |c| &c.u2k),
    ("k2u", |c| &c.k2u),
    ("round_trip", |c| &c.round_trip),
];

fn why_missing(c: Option<&Crossing>, side: &str) -> Option<String> {
    match c {
        None => Some(format!("not in the {side} report")),
        Some(c) => c.status.why_not().map(|t| format!("{side}: {t}")),
    }
}

/// The interval itself, measured.
fn measured(c: Option<&Crossing>, field: IntervalField) -> Option<&Interval> {
    c.and_then(|c| field(c).as_ref())
        .filter(|i| i.corrected.count > 0)
}

/// An approximate 95 % interval of `a`'s mean minus `b`'s (each scaled to
/// the unit): independent samples, each mean's standard error from its
/// sample standard deviation; none with fewer than two values a side.
fn mean_difference_interval(a: &Stats, a_unit: f64, b: &Stats, b_unit: f64) -> Option<(f64, f64)> {
    let variance_of_mean = |s: &Stats, unit: f64| {
        let n = s.count as f64;
        // Population to sample variance, over n: the mean's variance.
        (s.count >= 2).then(|| (s.stddev * unit).powi(2) / (n - 1.0))
    };
    let se = (variance_of_mean(a, a_unit)? + variance_of_mean(b, b_unit)?).sqrt();
    let d = a.mean * a_unit - b.mean * b_unit;
    Some((d - 1.96 * se, d + 1.96 * se))
}

/// `total` shared among the exit reasons by host time, or by count when
/// the trace timed none of them (so the shares add up to `total`).
fn by_reason(host: &SegmentHost, total: f64) -> BTreeMap<String, f64> {
    let timed = host.host_ticks_total > 0;
    let weight = |c: &crate::attribution::ReasonCost| {
        if timed {
            c.host_ticks as f64
        } else {
            c.count as f64
        }
    };
    let sum: f64 = host.exits.values().map(weight).sum();
    host.exits
        .iter()
        .map(|(reason, cost)| {
            let share = if sum > 0.0 { weight(cost) / sum } else { 0.0 };
            (reason.clone(), total * share)
        })
        .collect()
}

/// The three parts of the mean difference.
type Parts = (WithoutExits, ExitsPart, UnattributablePart);

/// The VM's mean minus bare metal's, in its parts. Of the VM's N samples,
/// w have exits and U are unattributable, the rest exit-free, so
/// N mean = (N - w - U) free + w hit + U unattributable, and
/// mean - bare = (free - bare) + w/N (hit - free) + U/N (unattributable - free),
/// exactly. The hit samples' sum is their excess over the exit-free median
/// plus w medians; the unattributable ones' is what the interval's sum
/// leaves. Only an attribution over the interval's own samples decomposes.
fn decompose(host: &SegmentHost, vm: &Stats, bare: &Stats, clocks: Clocks) -> Option<Parts> {
    let free = &host.exit_free;
    let (n, w, u) = (host.samples, host.samples_with_exits, host.unattributable);
    let counted = free.count.checked_add(w)?.checked_add(u)?;
    if free.count == 0 || bare.count == 0 || vm.count != n || counted != n {
        return None;
    }
    let (nf, wf, uf) = (n as f64, w as f64, u as f64);
    let hit_sum = host.excess_ticks as f64 + wf * free.median as f64;
    let unattributable_sum = nf * vm.mean - free.count as f64 * free.mean - hit_sum;
    let exits = (hit_sum - wf * free.mean) / nf * clocks.vm;
    let per_hit = if w > 0 {
        (hit_sum / wf - free.mean) * clocks.vm
    } else {
        0.0
    };
    let ci = mean_difference_interval(free, clocks.vm, bare, clocks.bare);
    let without = WithoutExits {
        mean: free.mean * clocks.vm - bare.mean * clocks.bare,
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
    };
    let exits = ExitsPart {
        hits: w,
        samples: n,
        hit_fraction: wf / nf,
        per_hit,
        mean: exits,
        by_reason: by_reason(host, exits),
    };
    let unattributable = UnattributablePart {
        samples: u,
        fraction: uf / nf,
        mean: (unattributable_sum - uf * free.mean) / nf * clocks.vm,
    };
    Some((without, exits, unattributable))
}

/// The measured statistics of one interval, if there are any.
fn pick(c: Option<&Crossing>, field: IntervalField) -> Option<&Stats> {
    c.and_then(|c| field(c).as_ref())
        .map(|i| &i.corrected)
        .filter(|s| s.count > 0)
}

/// Crossing names of both reports, the VM's order first, each once. Linear:
/// a report's names come from a guest, so their number is not ours to pick.
fn names<'a>(vm: &'a Report, bare: &'a Report) -> Vec<&'a str> {
    let mut seen = HashSet::new();
    vm.crossings
        .iter()
        .chain(&bare.crossings)
        .map(|c| c.name.as_str())
        .filter(|n| seen.insert(*n))
        .collect()
}

/// The first crossing of each name.
fn by_name(report: &Report) -> HashMap<&str, &Crossing> {
    let mut map = HashMap::with_capacity(report.crossings.len());
    for c in &report.crossings {
        map.entry(c.name.as_str()).or_insert(c);
    }
    map
}

fn rows_of(
    name: &str,
    (v, b): (Option<&Crossing>, Option<&Crossing>),
    timeline_verified: Option<bool>,
    clocks: Clocks,
) -> Vec<ComparisonRow> {
    let note = why_missing(v, "VM").or_else(|| why_missing(b, "bare metal"));
    let mut rows = Vec::new();
    for (interval, field) in INTERVALS {
        let (vs, bs) = (pick(v, field), pick(b, field));
        if vs.is_none() && bs.is_none() && interval != "round_trip" {
            continue;
        }
        let (vm_median, vm_p99) = (vs.map(|s| s.median), vs.map(|s| s.p99));
        let (bare_median, bare_p99) = (bs.map(|s| s.median), bs.map(|s| s.p99));
        let host = measured(v, field).and_then(|i| i.host.as_ref());
        let parts = match (host, vs, bs) {
            (Some(h), Some(vs), Some(bs)) => decompose(h, vs, bs, clocks),
            _ => None,
        };
        let (without_exits, exits, unattributable) = match parts {
            Some((w, e, u)) => (Some(w), Some(e), Some(u)),
            None => (None, None, None),
        };
        rows.push(ComparisonRow {
            crossing: name.to_string(),
            interval: interval.to_string(),
            vm_median,
            vm_p99,
            bare_median,
            bare_p99,
            vm_mean: vs.map(|s| s.mean),
            bare_mean: bs.map(|s| s.mean),
            diff_median: clocks.diff(vm_median, bare_median),
            diff_p99: clocks.diff(vm_p99, bare_p99),
            diff_mean: vs
                .zip(bs)
                .map(|(v, b)| v.mean * clocks.vm - b.mean * clocks.bare),
            ratio_median: clocks.ratio(vm_median, bare_median),
            ratio_p99: clocks.ratio(vm_p99, bare_p99),
            note: note.clone(),
            without_exits,
            exits,
            unattributable,
            timeline_verified,
        });
    }
    rows
}

/// What the two TSC rates mean for the figures.
fn rate_note(vm_khz: u64, bare_khz: u64) -> Option<String> {
    if vm_khz == 0 || bare_khz == 0 {
        let side = if vm_khz == 0 {
            "the VM's"
        } else {
            "bare metal's"
        };
        return Some(format!(
            "{side} TSC rate is unknown: differences are of ticks as measured, which holds only \
             if both files ran at one rate"
        ));
    }
    (Clocks::of(vm_khz, bare_khz).unit == DiffUnit::Ns).then(|| {
        format!(
            "TSC rates differ ({vm_khz} vs {bare_khz} kHz): differences are in ns and ratios are \
             of nanoseconds (each file's ticks over its own rate); medians, p99s and means are \
             each file's own ticks"
        )
    })
}

fn environment_notes(vm: &Report, bare: &Report) -> Vec<String> {
    let mut notes = Vec::new();
    if vm.environment == Environment::BareMetal {
        notes.push("the VM report says it was measured on bare metal".into());
    }
    if bare.environment != Environment::BareMetal {
        notes.push(format!(
            "the bare-metal report says it was measured in environment {:?}",
            bare.environment
        ));
    }
    notes.extend(rate_note(vm.host.tsc_khz, bare.host.tsc_khz));
    notes
}

/// The entry stamp's depth of each crossing a report describes.
fn depths(report: &Report) -> HashMap<&str, &str> {
    report
        .method
        .stamp_points
        .iter()
        .map(|p| (p.crossing.as_str(), p.entry_depth.as_str()))
        .collect()
}

/// Caveats when u2k figures are not taken from the same point of the entry
/// path: a crossing stamped differently in the two reports, or crossings of
/// one report stamped at different depths (side by side in the table).
fn depth_notes(vm: &Report, bare: &Report, names: &[&str]) -> Vec<String> {
    let (v, b) = (depths(vm), depths(bare));
    let mut notes = Vec::new();
    for name in names {
        if let (Some(dv), Some(db)) = (v.get(name), b.get(name)) {
            if dv != db {
                notes.push(format!(
                    "{name}: the VM's entry stamp comes after {dv:?}, bare metal's after {db:?}: \
                     their u2k figures do not start from the same point"
                ));
            }
        }
    }
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for name in names {
        if let Some(d) = v.get(name).or_else(|| b.get(name)) {
            if !seen.iter().any(|(_, x)| x == d) {
                seen.push((name, d));
            }
        }
    }
    if seen.len() > 1 {
        let list: Vec<String> = seen
            .iter()
            .map(|(n, d)| format!("{n} after {d:?}"))
            .collect();
        notes.push(format!(
            "entry stamps sit at different depths ({}): compare a crossing's u2k VM against \
             bare metal, not one crossing's u2k with another's",
            list.join(", ")
        ));
    }
    notes
}

/// Caveats for the VM's decomposed crossings whose work spans CPUs: their
/// exit-free samples are those in which no other CPU was woken or flushed,
/// other work than the rest, so their "without exits" part is not like
/// against like (the parts still add up).
fn spanning_notes(vm: &Report) -> Vec<String> {
    let traced = |c: &&Crossing| {
        c.round_trip
            .as_ref()
            .is_some_and(|i| i.host.as_ref().is_some_and(|h| h.other_vcpus.is_some()))
    };
    let names: Vec<&str> = vm
        .crossings
        .iter()
        .filter(|c| c.spans_cpus)
        .filter(traced)
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "{} span CPUs: a sample without exits of its own vCPU is one in which the other CPU was          not woken or flushed (a thread that had not gone to sleep, a reader off its CPU), so          their w/o-exits part compares other work; read their exits part and the other vCPUs'          exits in the attribution table",
        names.join(", ")
    )]
}

/// Compares every crossing of `vm` with the same-named crossing of `bare`.
pub fn compare(vm: &Report, bare: &Report) -> Comparison {
    let (vm_index, bare_index) = (by_name(vm), by_name(bare));
    let all_names = names(vm, bare);
    let mut notes = environment_notes(vm, bare);
    notes.extend(depth_notes(vm, bare, &all_names));
    notes.extend(spanning_notes(vm));
    let clocks = Clocks::of(vm.host.tsc_khz, bare.host.tsc_khz);
    let rows = all_names
        .into_iter()
        .flat_map(|name| {
            let pair = (vm_index.get(name).copied(), bare_index.get(name).copied());
            rows_of(name, pair, vm.timeline.as_ref().map(|t| t.verified), clocks)
        })
        .collect();
    let mut probes = compare_probes(&vm.probes, &bare.probes);
    // Each side's added ticks are its own: their ratio, of nanoseconds.
    for p in &mut probes {
        p.ratio = p.ratio.map(|r| r * (clocks.vm / clocks.bare));
    }
    let workload = match (&vm.workload, &bare.workload) {
        (Some(v), Some(b)) => Some(compare_workloads(v, b, clocks)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            let has = if vm.workload.is_some() {
                "VM"
            } else {
                "bare-metal"
            };
            notes.push(format!(
                "only the {has} file has a workload: run the same command under `xperf \
                 workload` (bare metal) and `xvmm --kernel --workload` (VM) to compare it"
            ));
            None
        }
    };
    Comparison {
        schema: COMPARISON_SCHEMA.into(),
        schema_version: COMPARISON_SCHEMA_VERSION,
        vm_tool: vm.tool.clone(),
        bare_metal_tool: bare.tool.clone(),
        diff_unit: clocks.unit,
        vm_tsc_khz: vm.host.tsc_khz,
        bare_tsc_khz: bare.host.tsc_khz,
        rows,
        notes,
        probes,
        workload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::render::comparison_table;
    use crate::{Corrections, Sample};

    /// The comparison's row of `crossing`'s `interval`.
    fn row_of<'c>(c: &'c Comparison, crossing: &str, interval: &str) -> &'c ComparisonRow {
        c.rows
            .iter()
            .find(|r| r.crossing == crossing && r.interval == interval)
            .unwrap_or_else(|| panic!("no row {crossing} {interval}"))
    }

    #[test]
    fn comparison_gives_difference_and_ratio() {
        let vm = fixtures::report(Environment::Microguest, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        let c = compare(&vm, &bare);
        let rt = row_of(&c, "pf", "round_trip");
        assert_eq!((rt.vm_median, rt.bare_median), (Some(850), Some(350)));
        assert_eq!(rt.diff_median, Some(500));
        assert!((rt.ratio_median.unwrap() - 850.0 / 350.0).abs() < 1e-9);
        let int_n = c.rows.iter().find(|r| r.crossing == "int-n").unwrap();
        assert_eq!(int_n.vm_median, None);
        assert!(int_n.note.as_deref().unwrap().contains("unsupported"));
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        let table = comparison_table(&c);
        assert!(table.contains("+500"), "{table}");
        assert!(table.contains("2.43x"), "{table}");

        // Swapped arguments are flagged.
        let swapped = compare(&bare, &vm);
        assert_eq!(swapped.notes.len(), 2, "{:?}", swapped.notes);
    }

    /// Two workloads compare kind by kind; a workload against crossings
    /// compares no workload and says which file has one.
    #[test]
    fn a_workload_meets_a_workload_or_is_named_alone() {
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        vm.workload = Some(crate::schema::workload::Workload::default());
        let c = compare(&vm, &bare);
        assert!(c.workload.is_none());
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("only the VM file has a workload")),
            "{:?}",
            c.notes
        );
        let c = compare(&bare, &vm);
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("only the bare-metal file")));
        let mut both = bare.clone();
        both.workload = vm.workload.clone();
        assert!(compare(&vm, &both).workload.is_some());
        assert!(!compare(&vm, &both)
            .notes
            .iter()
            .any(|n| n.contains("has a workload")));
    }

    /// The comparison file (`FILE.compare.json`) reads back as the same
    /// comparison, and is indented for a person.
    #[test]
    fn the_comparison_json_reads_back_whole() {
        let vm = fixtures::report(Environment::Microguest, 2);
        let c = compare(&vm, &fixtures::report(Environment::BareMetal, 1));
        let text = c.to_json_pretty();
        let back: Comparison = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert!(
            text.starts_with("{\n  \"") && text.contains("\"rows\": ["),
            "{text}"
        );
    }

    /// Asserts `a` and `b` agree within `tolerance`.
    fn near(a: f64, b: f64, tolerance: f64, what: &str) {
        assert!((a - b).abs() <= tolerance, "{what}: {a} against {b}");
    }

    /// The parts of a decomposed row add up to its mean difference.
    fn assert_adds_up(row: &ComparisonRow) {
        let what = format!("{} {}", row.crossing, row.interval);
        let (w, e, u) = (
            row.without_exits.as_ref().unwrap(),
            row.exits.as_ref().unwrap(),
            row.unattributable.as_ref().unwrap(),
        );
        let diff = row.diff_mean.unwrap();
        near(
            w.mean + e.mean + u.mean,
            diff,
            1e-6 * diff.abs().max(1.0),
            &what,
        );
        near(
            e.hit_fraction * e.per_hit,
            e.mean,
            1e-9 * e.mean.abs().max(1.0),
            &what,
        );
        if !e.by_reason.is_empty() {
            let reasons: f64 = e.by_reason.values().sum();
            near(reasons, e.mean, 1e-9 * e.mean.abs().max(1.0), &what);
        }
    }

    #[test]
    fn a_traced_vm_run_splits_the_mean_difference_into_its_parts() {
        use crate::attribution::ReasonCost;
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        // VM u2k: five samples, attribution saw three exit-free (median
        // 121, mean 121.33), one 200 ticks above that median with exits
        // (two reasons sharing the host time 3:1), one unattributable.
        let u2k = vm.crossings[0].u2k.as_mut().unwrap();
        u2k.corrected = Stats::from_samples(&[120, 121, 123, 321, 500]);
        let mut host = SegmentHost {
            samples: 5,
            unattributable: 1,
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[120, 121, 123]),
            excess_ticks: 200,
            host_ticks_total: 400,
            ..Default::default()
        };
        for (reason, host_ticks) in [("npf", 300), ("intr", 100)] {
            let cost = ReasonCost {
                count: 1,
                host_ticks,
            };
            host.exits.insert(reason.into(), cost);
        }
        u2k.host = Some(host);
        let c = compare(&vm, &bare);
        assert_eq!(c.diff_unit, DiffUnit::Ticks);
        let row = row_of(&c, "pf", "u2k");
        // Bare-metal u2k: 50, 51, 52. VM mean 1185 / 5 = 237.
        assert_eq!(row.diff_median, Some(123 - 51), "not decomposed");
        near(
            row.diff_mean.unwrap(),
            237.0 - 51.0,
            1e-9,
            "mean difference",
        );
        let free = 364.0 / 3.0;
        near(
            row.without_exits.as_ref().unwrap().mean,
            free - 51.0,
            1e-9,
            "w/o",
        );
        let exits = row.exits.as_ref().unwrap();
        assert_eq!((exits.hits, exits.samples), (1, 5));
        near(exits.hit_fraction, 0.2, 1e-12, "hit fraction");
        near(exits.per_hit, 321.0 - free, 1e-9, "per hit");
        near(exits.by_reason["npf"], 0.75 * exits.mean, 1e-9, "npf");
        let u = row.unattributable.as_ref().unwrap();
        assert_eq!(u.samples, 1);
        near(u.mean, (500.0 - free) / 5.0, 1e-9, "unattributable");
        assert_adds_up(row);
        // Untraced rows have no split; the table shows one only when traced.
        let k2u = c.rows.iter().find(|r| r.interval == "k2u").unwrap();
        assert!(k2u.without_exits.is_none() && k2u.exits.is_none());
        let table = comparison_table(&c);
        assert!(table.contains("what the VM adds, decomposed"), "{table}");
        assert!(!comparison_table(&compare(&bare, &bare)).contains("decomposed"));
        // The same attribution on an interval with no sample, or over other
        // samples than the interval's: nothing to decompose.
        for count in [0, 4] {
            vm.crossings[0].u2k.as_mut().unwrap().corrected.count = count;
            let c = compare(&vm, &bare);
            let row = row_of(&c, "pf", "u2k");
            assert!(
                row.without_exits.is_none() && row.exits.is_none() && row.unattributable.is_none(),
                "{row:?}"
            );
        }
    }

    /// `n` independent values spread evenly around `center` (+-50), from a
    /// SplitMix64 stream: their true mean is `center`.
    fn draw(center: u64, n: usize, seed: &mut u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *seed;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                center - 50 + (z ^ (z >> 31)) % 101
            })
            .collect()
    }

    /// The without-exits part and its interval for VM exit-free values
    /// against bare-metal values.
    fn difference_ci(vm: &[u64], bare: &[u64]) -> (f64, f64, f64) {
        let stats = Stats::from_samples(vm);
        let host = SegmentHost {
            samples: vm.len() as u64,
            exit_free: stats.clone(),
            ..Default::default()
        };
        let one = Clocks::of(0, 0);
        let (w, ..) = decompose(&host, &stats, &Stats::from_samples(bare), one).unwrap();
        (w.mean, w.ci_low.unwrap(), w.ci_high.unwrap())
    }

    #[test]
    fn the_difference_interval_covers_the_true_difference_95_percent_of_the_time() {
        // 400 pairs of independent runs, VM exit-free mean 1100, bare metal
        // 1000: the interval should hold 100 in about 95 % of them.
        let mut seed = 21;
        let covered = (0..400)
            .filter(|_| {
                let vm = draw(1100, 300, &mut seed);
                let bare = draw(1000, 300, &mut seed);
                let (_, low, high) = difference_ci(&vm, &bare);
                low <= 100.0 && 100.0 <= high
            })
            .count();
        assert!((360..=392).contains(&covered), "covered {covered} of 400");
    }

    #[test]
    fn the_difference_interval_is_not_the_sum_of_both_widths() {
        // Two runs of the same spread: the difference's interval is about
        // sqrt(2) times one mean's, not twice it.
        let mut seed = 5;
        let (vm, bare) = (draw(1100, 300, &mut seed), draw(1000, 300, &mut seed));
        let one = |v: &[u64]| {
            let s = Stats::from_samples(v);
            2.0 * 1.96 * s.stddev / (s.count as f64 - 1.0).sqrt()
        };
        let (mean, low, high) = difference_ci(&vm, &bare);
        assert!(low <= mean && mean <= high, "{low} {mean} {high}");
        let width = high - low;
        let single = (one(&vm) + one(&bare)) / 2.0;
        assert!(
            width < 1.7 * single && width > 1.2 * single,
            "{width} against {single} for one mean"
        );
        // One value a side has no spread to speak of: no interval.
        assert!(mean_difference_interval(
            &Stats::from_samples(&[5]),
            1.0,
            &Stats::from_samples(&vm),
            1.0
        )
        .is_none());
    }

    #[test]
    fn the_unattributable_samples_are_a_part_of_their_own() {
        // u2k of 100 ticks four times, 1100 once (an exit of 900 inside), and
        // 10100 once where the trace lost events: unattributable. Of the
        // mean difference, exits explain 1/6 x 1000, the unattributable
        // sample 1/6 x 10000.
        let sample = |k: u64, u2k: u64| Sample {
            u2k_u: k * 100_000,
            u2k_k: k * 100_000 + u2k,
            k2u_k: k * 100_000 + u2k + 10,
            k2u_u: k * 100_000 + u2k + 20,
            cpu: Some(0),
            interrupts: None,
        };
        let samples: Vec<Sample> = [100, 100, 100, 100, 1100, 10_100]
            .iter()
            .zip(1..)
            .map(|(&u2k, k)| sample(k, u2k))
            .collect();
        // At one TSC rate (ticks), and with the VM at 4 GHz against bare
        // metal's 2 GHz (ns: a VM tick is 0.25 ns, a bare-metal one 0.5).
        for (vm_khz, vm_unit, bare_unit) in [(2_000_000, 1.0, 1.0), (4_000_000, 0.25, 0.5)] {
            parts_in_unit(&samples, vm_khz, vm_unit, bare_unit);
        }
    }

    fn parts_in_unit(samples: &[Sample], vm_khz: u64, vm_unit: f64, bare_unit: f64) {
        use crate::attribution::{attribute, HostExitEvent, HostTrace, Index};
        use crate::timeline::Mapping;
        let samples = samples.to_vec();
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        vm.host.tsc_khz = vm_khz;
        let mut c = Crossing::from_samples("pf", 6, &samples, &Corrections::default(), true);
        c.samples = Some(samples);
        vm.crossings[0] = c;
        let trace = HostTrace {
            reasons: vec!["npf".into()],
            exits: vec![HostExitEvent {
                vcpu: 0,
                exit: 500_050,
                entry: 500_950,
                reason: 0,
            }]
            .into(),
            lost: vec![(600_010, 600_020)],
        };
        let m = Mapping::unscaled(0);
        attribute(&mut vm, &Index::new(&trace, &m), None);
        let host = vm.crossings[0].u2k.as_ref().unwrap().host.clone().unwrap();
        assert_eq!((host.samples, host.unattributable), (6, 1), "fixture");
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        bare.host.tsc_khz = 2_000_000;
        let c = compare(&vm, &bare);
        let row = row_of(&c, "pf", "u2k");
        let exits = row.exits.as_ref().unwrap();
        near(exits.mean, 1000.0 / 6.0 * vm_unit, 1e-9, "exits");
        near(exits.per_hit, 1000.0 * vm_unit, 1e-9, "per hit");
        near(exits.hit_fraction, 1.0 / 6.0, 1e-12, "hit fraction");
        near(exits.by_reason["npf"], exits.mean, 1e-9, "npf");
        let u = row.unattributable.as_ref().unwrap();
        near(u.mean, 10_000.0 / 6.0 * vm_unit, 1e-9, "unattributable");
        near(u.fraction, 1.0 / 6.0, 1e-12, "unattributable fraction");
        near(
            row.without_exits.as_ref().unwrap().mean,
            100.0 * vm_unit - 51.0 * bare_unit,
            1e-9,
            "w/o",
        );
        assert_adds_up(row);
    }

    /// No ratio over a bare-metal 0, and an unknown TSC rate on either
    /// side compares ticks as measured.
    #[test]
    fn no_ratio_over_zero_and_an_unknown_rate_scales_nothing() {
        let ticks = Clocks::of(0, 2_000_000);
        assert_eq!(ticks.ratio(Some(5), Some(0)), None);
        assert_eq!(
            (ticks.unit, ticks.vm, ticks.bare),
            (DiffUnit::Ticks, 1.0, 1.0)
        );
        assert_eq!(Clocks::of(3_000_000, 0).unit, DiffUnit::Ticks);
        let ns = Clocks::of(4_000_000, 2_000_000);
        assert_eq!(ns.unit, DiffUnit::Ns);
        assert_eq!(ns.ratio(Some(6), Some(3)), Some(1.0));
        assert_eq!(ns.diff(Some(4000), Some(2000)), Some(0));
    }

    /// No decomposition without exit-free samples to stand against; exits
    /// the trace timed none of are shared by count.
    #[test]
    fn no_decomposition_without_exit_free_samples() {
        let stats = |v: &[u64]| Stats::from_samples(v);
        let one = Clocks::of(0, 0);
        let bare = stats(&[100, 101]);
        let host = SegmentHost {
            samples: 4,
            unattributable: 1,
            samples_with_exits: 3,
            excess_ticks: 300,
            ..Default::default()
        };
        let vm = stats(&[120, 121, 421, 600]);
        assert!(decompose(&host, &vm, &bare, one).is_none());
        let all_unattributable = SegmentHost {
            unattributable: 4,
            samples_with_exits: 0,
            ..host.clone()
        };
        assert!(decompose(&all_unattributable, &vm, &bare, one).is_none());
        let cost = |count| crate::attribution::ReasonCost {
            count,
            host_ticks: 0,
        };
        let timeless = SegmentHost {
            samples_with_exits: 1,
            unattributable: 1,
            exit_free: stats(&[120, 121]),
            exits: [("io".to_string(), cost(3)), ("hlt".to_string(), cost(1))].into(),
            host_ticks_total: 0,
            ..host
        };
        let (_, exits, _) = decompose(&timeless, &vm, &bare, one).unwrap();
        near(
            exits.by_reason["io"],
            0.75 * exits.mean,
            1e-9,
            "io by count",
        );
        near(
            exits.by_reason["hlt"],
            0.25 * exits.mean,
            1e-9,
            "hlt by count",
        );
    }

    /// An interval with no sample is not measured: no figure on its side.
    #[test]
    fn an_interval_without_samples_gives_no_figure() {
        let mut vm = fixtures::report(Environment::Microguest, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        let rt = vm.crossings[0].round_trip.as_mut().unwrap();
        rt.corrected.count = 0;
        let c = compare(&vm, &bare);
        let row = row_of(&c, &vm.crossings[0].name, "round_trip");
        assert_eq!((row.vm_median, row.diff_median), (None, None), "{row:?}");
        assert!(row.bare_median.is_some());
    }

    #[test]
    fn ratios_across_tsc_rates_are_of_nanoseconds() {
        // The same tick counts at 3 GHz (VM) and 2 GHz (bare metal): the VM
        // took two thirds of the time.
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        vm.host.tsc_khz = 3_000_000;
        let bare = fixtures::report(Environment::BareMetal, 1);
        let c = compare(&vm, &bare);
        let rt = row_of(&c, "pf", "round_trip");
        assert_eq!(rt.vm_median, rt.bare_median);
        assert!(
            (rt.ratio_median.unwrap() - 2.0 / 3.0).abs() < 1e-9,
            "{:?}",
            rt.ratio_median
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("ratios are of nanoseconds")),
            "{:?}",
            c.notes
        );
        // Within 0.1 %: one rate, ratios of ticks.
        vm.host.tsc_khz = 2_001_000;
        let c = compare(&vm, &bare);
        assert_eq!(c.rows[2].ratio_median, Some(1.0), "{:?}", c.rows[2]);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        // Exactly 0.1 % apart is still one rate; an unknown rate (0) on
        // either side leaves ticks as measured, and says so.
        let mut bare = bare;
        for (v, b, notes) in [
            (2_002_000, 2_000_000, 0),
            (0, 2_000_000, 1),
            (3_000_000, 0, 1),
        ] {
            vm.host.tsc_khz = v;
            bare.host.tsc_khz = b;
            let c = compare(&vm, &bare);
            assert_eq!(c.diff_unit, DiffUnit::Ticks);
            assert_eq!(c.notes.len(), notes, "{v} vs {b}: {:?}", c.notes);
            assert!(c.notes.iter().all(|n| n.contains("rate is unknown")));
        }
    }

    /// Issue item 5: 3000 ticks at 3 GHz and 2000 at 2 GHz are both 1 us.
    #[test]
    fn differences_across_tsc_rates_are_of_nanoseconds() {
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (3_000_000, 2_000_000);
        let set = |r: &mut Report, median, p99| {
            let s = &mut r.crossings[0].round_trip.as_mut().unwrap().corrected;
            (s.median, s.p99) = (median, p99);
        };
        set(&mut vm, 3000, 6000);
        set(&mut bare, 2000, 4000);
        let c = compare(&vm, &bare);
        let rt = row_of(&c, "pf", "round_trip");
        assert_eq!((rt.diff_median, rt.diff_p99), (Some(0), Some(0)), "{rt:?}");
        assert_eq!(c.diff_unit, DiffUnit::Ns);
        // Means: VM 350 ticks at 3 GHz (116.7 ns), bare metal 350 at 2 GHz.
        near(
            rt.diff_mean.unwrap(),
            350.0 / 3.0 - 175.0,
            1e-9,
            "mean in ns",
        );
        let json = c.to_json_pretty();
        assert!(json.contains("\"diff_unit\": \"ns\""), "{json}");
        let table = comparison_table(&c);
        assert!(table.contains("diff = VM - bare metal in ns"), "{table}");
        // The exit-free part too: a traced VM side with one exit-free value.
        let u2k = vm.crossings[0].u2k.as_mut().unwrap();
        u2k.corrected = Stats::from_samples(&[3000]);
        u2k.host = Some(SegmentHost {
            samples: 1,
            exit_free: Stats::from_samples(&[3000]),
            ..Default::default()
        });
        let s = &mut bare.crossings[0].u2k.as_mut().unwrap().corrected;
        *s = Stats::from_samples(&[2000]);
        let c = compare(&vm, &bare);
        let u2k = row_of(&c, "pf", "u2k");
        assert_eq!(u2k.diff_median, Some(0));
        near(
            u2k.without_exits.as_ref().unwrap().mean,
            0.0,
            1e-9,
            "w/o in ns",
        );
        assert_adds_up(u2k);
        let table = comparison_table(&c);
        assert!(
            table.contains("what the VM adds, decomposed (in ns)"),
            "{table}"
        );
    }

    /// Each side's ticks over its own rate: 6000 ticks at 3 GHz are 2000 ns,
    /// 1000 at 2 GHz 500 ns; at one rate a tick stays a tick.
    #[test]
    fn each_sides_ticks_become_the_comparisons_unit() {
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (3_000_000, 2_000_000);
        let s = &mut vm.crossings[0].round_trip.as_mut().unwrap().corrected;
        (s.median, s.p99) = (6000, 9000);
        let s = &mut bare.crossings[0].round_trip.as_mut().unwrap().corrected;
        (s.median, s.p99) = (1000, 1200);
        let c = compare(&vm, &bare);
        near(c.vm_in_unit(6000.0), 2000.0, 1e-9, "VM ns");
        near(c.bare_in_unit(1000.0), 500.0, 1e-9, "bare-metal ns");
        let rt = row_of(&c, "pf", "round_trip");
        assert_eq!((rt.diff_median, rt.diff_p99), (Some(1500), Some(2400)));
        assert_eq!((c.diff_unit, c.diff_unit.name()), (DiffUnit::Ns, "ns"));
        bare.host.tsc_khz = 3_000_000;
        let c = compare(&vm, &bare);
        assert_eq!(
            (c.vm_in_unit(6000.0), c.bare_in_unit(1000.0)),
            (6000.0, 1000.0)
        );
        assert_eq!(row_of(&c, "pf", "round_trip").diff_median, Some(5000));
        assert_eq!(
            (c.diff_unit, c.diff_unit.name()),
            (DiffUnit::Ticks, "ticks")
        );
    }

    /// The note names the side whose TSC rate is unknown.
    #[test]
    fn the_rate_note_names_the_side_without_a_rate() {
        let vm = rate_note(0, 2_000_000).unwrap();
        assert!(vm.starts_with("the VM's TSC rate is unknown"), "{vm}");
        let bare = rate_note(2_000_000, 0).unwrap();
        assert!(
            bare.starts_with("bare metal's TSC rate is unknown"),
            "{bare}"
        );
    }

    /// A probe's added ticks are each side's own: at 3 GHz against 2 GHz,
    /// 300 VM ticks (100 ns) over 100 bare-metal ones (50 ns) are a ratio
    /// of 2, not 3.
    #[test]
    fn probe_ratios_across_tsc_rates_are_of_nanoseconds() {
        let probe = |added: i64| crate::Probe {
            status: crate::Status::Measured,
            added_ticks: Some(crate::probes::SignedStats::from_samples(&[added])),
            ..crate::Probe::unsupported("kprobe", "getppid", String::new())
        };
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (3_000_000, 2_000_000);
        vm.probes = vec![probe(300)];
        bare.probes = vec![probe(100)];
        let c = compare(&vm, &bare);
        assert_eq!(c.probes.len(), 1);
        near(c.probes[0].ratio.unwrap(), 2.0, 1e-12, "ratio of ns");
        bare.host.tsc_khz = 3_000_000;
        near(
            compare(&vm, &bare).probes[0].ratio.unwrap(),
            3.0,
            1e-12,
            "one rate",
        );
    }

    /// A report read from a file may name reasons with no count and no
    /// time: they get no share, not a division by zero.
    #[test]
    fn reasons_with_nothing_get_no_share() {
        let mut host = SegmentHost::default();
        host.exits.insert("npf".into(), Default::default());
        let shares = by_reason(&host, 100.0);
        assert_eq!(shares.get("npf"), Some(&0.0), "{shares:?}");
    }

    /// The interval of a difference of means, each side scaled to the unit:
    /// the means' variances (sample variance over n) add.
    #[test]
    fn the_difference_interval_scales_each_side_by_its_own_unit() {
        // a: 10, 20, 30 (mean 20, population variance 200/3) at 0.5 a
        // tick; b: 100, 300 (mean 200, population variance 10000) at 2.
        let a = Stats::from_samples(&[10, 20, 30]);
        let b = Stats::from_samples(&[100, 300]);
        let (low, high) = mean_difference_interval(&a, 0.5, &b, 2.0).unwrap();
        let se = (200.0 / 3.0 * 0.25 / 2.0 + 10000.0 * 4.0 / 1.0_f64).sqrt();
        let d = 20.0 * 0.5 - 200.0 * 2.0;
        near(low, d - 1.96 * se, 1e-6, "low");
        near(high, d + 1.96 * se, 1e-6, "high");
    }

    /// Issue item 4: on a real harness pair (the nested run's traced VM
    /// report and its bare-metal one, `xvmm-cli/tests/data/report/`), each
    /// row's parts add up to the VM's mean minus bare metal's, and every
    /// row decomposes (no sample there is unattributable, so that part is
    /// what rounding leaves).
    #[test]
    fn the_parts_add_up_to_the_mean_difference_on_real_harness_data() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xvmm-cli/tests/data/report/"
        );
        let read = |f: &str| {
            let text = std::fs::read_to_string(format!("{dir}{f}")).unwrap();
            Report::from_json(&text).unwrap()
        };
        let (vm, bare) = (read("traced-vm.json"), read("traced-bm.json"));
        let c = compare(&vm, &bare);
        assert_eq!(c.rows.len(), 9);
        for row in &c.rows {
            let mean = |r: &Report| {
                let c = r.crossings.iter().find(|c| c.name == row.crossing).unwrap();
                let i = INTERVALS.iter().find(|(n, _)| *n == row.interval).unwrap();
                (i.1)(c).as_ref().unwrap().corrected.mean
            };
            let what = format!("{} {}", row.crossing, row.interval);
            near(row.diff_mean.unwrap(), mean(&vm) - mean(&bare), 1e-9, &what);
            assert_adds_up(row);
            let u = row.unattributable.as_ref().unwrap();
            assert_eq!(u.samples, 0, "{what}");
            near(u.mean, 0.0, 1e-6, &what);
        }
        // getppid u2k: 1 of 6000 samples had an exit.
        let getppid = row_of(&c, "getppid", "u2k");
        let exits = getppid.exits.as_ref().unwrap();
        assert_eq!((exits.hits, exits.samples), (1, 6000));
        println!("{}", comparison_table(&c));
    }

    /// A traced crossing that spans CPUs gets the note on its w/o-exits
    /// part; one that spans CPUs untraced, or a traced one that does not
    /// span them, gets none.
    #[test]
    fn only_a_traced_crossing_that_spans_cpus_is_noted() {
        let bare = fixtures::report(Environment::BareMetal, 2);
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let noted = |vm: &Report| {
            let c = compare(vm, &bare);
            c.notes
                .into_iter()
                .filter(|n| n.contains("span CPUs"))
                .collect::<Vec<_>>()
        };
        let traced = |c: &mut Crossing, other: bool| {
            c.round_trip.as_mut().unwrap().host = Some(SegmentHost {
                other_vcpus: other.then(Default::default),
                ..Default::default()
            });
        };
        let second = Crossing {
            name: "second".into(),
            ..vm.crossings[0].clone()
        };
        vm.crossings.push(second);
        assert!(noted(&vm).is_empty());
        vm.crossings[0].spans_cpus = true;
        assert!(noted(&vm).is_empty(), "untraced");
        traced(&mut vm.crossings[2], false);
        assert!(noted(&vm).is_empty(), "traced, spanning nothing");
        traced(&mut vm.crossings[0], true);
        let notes = noted(&vm);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with(&format!("{} span CPUs", vm.crossings[0].name)));
        assert!(!notes[0].contains("second"), "{notes:?}");
    }

    /// A crossing neither side measured keeps its round-trip row (which
    /// says why) and no other.
    #[test]
    fn a_crossing_measured_on_neither_side_keeps_only_its_round_trip_row() {
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        for r in [&mut vm, &mut bare] {
            let c = &mut r.crossings[0];
            (c.u2k, c.k2u, c.in_kernel, c.round_trip) = (None, None, None, None);
        }
        let name = vm.crossings[0].name.clone();
        let c = compare(&vm, &bare);
        let rows: Vec<&str> = c
            .rows
            .iter()
            .filter(|r| r.crossing == name)
            .map(|r| r.interval.as_str())
            .collect();
        assert_eq!(rows, ["round_trip"]);
    }

    #[test]
    fn crossings_only_on_one_side_are_named() {
        let vm = fixtures::report(Environment::LinuxVm, 2);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        bare.crossings[0].name = "getppid".into();
        let c = compare(&vm, &bare);
        let names: Vec<&str> = c.rows.iter().map(|r| r.crossing.as_str()).collect();
        assert_eq!(names.first(), Some(&"pf"));
        assert!(names.contains(&"getppid"));
        let pf = c.rows.iter().find(|r| r.crossing == "pf").unwrap();
        assert_eq!(pf.note.as_deref(), Some("not in the bare metal report"));
    }

    #[test]
    fn crossings_stamped_at_different_depths_get_a_caveat() {
        let point = |crossing: &str, depth: &str| crate::StampPoint {
            crossing: crossing.into(),
            entry: "somewhere".into(),
            entry_depth: depth.into(),
            exit: "before the return".into(),
        };
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        assert!(compare(&vm, &bare).notes.is_empty());
        for r in [&mut vm, &mut bare] {
            r.method.stamp_points = vec![point("pf", "nothing"), point("int-n", "nothing")];
        }
        assert!(compare(&vm, &bare).notes.is_empty(), "same depths");
        vm.method.stamp_points[1] = point("int-n", "swapgs");
        bare.method.stamp_points[1] = point("int-n", "swapgs");
        let notes = compare(&vm, &bare).notes;
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("different depths") && notes[0].contains("int-n after \"swapgs\"")
        );
        bare.method.stamp_points[0] = point("pf", "swapgs");
        let notes = compare(&vm, &bare).notes;
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("pf: the VM's entry stamp")),
            "{notes:?}"
        );
    }

    #[test]
    fn many_crossings_compare_in_linear_time() {
        // 80 k names took 33 s with a quadratic name search.
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let template = vm.crossings[0].clone();
        vm.crossings = (0..80_000)
            .map(|i| Crossing {
                name: format!("c{i}"),
                ..template.clone()
            })
            .collect();
        let bare = vm.clone();
        let start = std::time::Instant::now();
        let c = compare(&vm, &bare);
        assert_eq!(c.rows.len(), 3 * 80_000);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
    }
}
