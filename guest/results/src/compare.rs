//! A VM report against a bare-metal report of the same crossings: the
//! `xvmm-comparison` schema and how it is computed.

use crate::attribution::SegmentHost;
use crate::probes::{compare_probes, ProbeComparisonRow};
use crate::{Crossing, Environment, Interval, Report, Stats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Name of the comparison schema written by `xvmm compare --json`.
pub const COMPARISON_SCHEMA: &str = "xvmm-comparison";
pub const COMPARISON_SCHEMA_VERSION: u32 = 1;

/// One interval of one crossing, VM against bare metal (corrected ticks).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ComparisonRow {
    pub crossing: String,
    /// "u2k", "k2u" or "round_trip".
    pub interval: String,
    pub vm_median: Option<u64>,
    pub vm_p99: Option<u64>,
    pub bare_median: Option<u64>,
    pub bare_p99: Option<u64>,
    /// VM minus bare metal.
    pub diff_median: Option<i64>,
    pub diff_p99: Option<i64>,
    /// VM over bare metal.
    pub ratio_median: Option<f64>,
    pub ratio_p99: Option<f64>,
    /// Why a side has no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What the VM adds without exits: the VM's exit-free median minus the
    /// bare-metal median (only when the VM run was traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_exits: Option<WithoutExits>,
    /// What exits add: the VM's mean over all samples minus its mean over
    /// the exit-free ones, split by exit reason in proportion to host time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<ExitsPart>,
    /// Whether the VM run's timeline was verified (see `timeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_verified: Option<bool>,
}

/// The part of a difference no exit explains, with a 95 % interval from
/// the two medians' bootstrap intervals (conservative: ends against ends).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WithoutExits {
    pub ticks: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<i64>,
}

/// The part of a difference exits explain, in guest ticks per sample.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExitsPart {
    pub ticks: f64,
    pub by_reason: BTreeMap<String, f64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Comparison {
    pub schema: String,
    pub schema_version: u32,
    pub vm_tool: String,
    pub bare_metal_tool: String,
    pub rows: Vec<ComparisonRow>,
    /// Caveats (mismatched environments, TSC rates...).
    pub notes: Vec<String>,
    /// Instrumentation modes, VM against bare metal (reports of `xperf probes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeComparisonRow>,
}

impl Comparison {
    pub fn to_json_pretty(&self) -> String {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

fn diff(vm: Option<u64>, bare: Option<u64>) -> Option<i64> {
    i64::try_from(vm?)
        .ok()?
        .checked_sub(i64::try_from(bare?).ok()?)
}

fn ratio(vm: Option<u64>, bare: Option<u64>) -> Option<f64> {
    let (vm, bare) = (vm?, bare?);
    (bare > 0).then(|| vm as f64 / bare as f64)
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

/// The exit-free part: VM exit-free median minus bare-metal median.
fn without_exits(host: &SegmentHost, bare: &Interval) -> Option<WithoutExits> {
    if host.exit_free.count == 0 {
        return None;
    }
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let ticks = as_i64(host.exit_free.median).saturating_sub(as_i64(bare.corrected.median));
    let (ci_low, ci_high) = match (&host.exit_free_median_ci, &bare.median_ci) {
        (Some(v), Some(b)) => (
            Some(as_i64(v.low).saturating_sub(as_i64(b.high))),
            Some(as_i64(v.high).saturating_sub(as_i64(b.low))),
        ),
        _ => (None, None),
    };
    Some(WithoutExits {
        ticks,
        ci_low,
        ci_high,
    })
}

/// The exits' part: mean of all minus mean of the exit-free, by host time.
fn exits_part(vm: &Interval, host: &SegmentHost) -> Option<ExitsPart> {
    if host.exit_free.count == 0 {
        return None;
    }
    let ticks = vm.corrected.mean - host.exit_free.mean;
    let total = host.host_ticks_total as f64;
    let by_reason = host
        .exits
        .iter()
        .map(|(reason, cost)| {
            let share = if total > 0.0 {
                cost.host_ticks as f64 / total
            } else {
                0.0
            };
            (reason.clone(), ticks * share)
        })
        .collect();
    Some(ExitsPart { ticks, by_reason })
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
    v: Option<&Crossing>,
    b: Option<&Crossing>,
    timeline_verified: Option<bool>,
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
        let (vi, bi) = (measured(v, field), measured(b, field));
        let host = vi.and_then(|i| i.host.as_ref());
        let (without, exits) = match (vi, host, bi) {
            (Some(vi), Some(h), Some(bi)) => (without_exits(h, bi), exits_part(vi, h)),
            _ => (None, None),
        };
        rows.push(ComparisonRow {
            crossing: name.to_string(),
            interval: interval.to_string(),
            vm_median,
            vm_p99,
            bare_median,
            bare_p99,
            diff_median: diff(vm_median, bare_median),
            diff_p99: diff(vm_p99, bare_p99),
            ratio_median: ratio(vm_median, bare_median),
            ratio_p99: ratio(vm_p99, bare_p99),
            note: note.clone(),
            without_exits: without,
            exits,
            timeline_verified,
        });
    }
    rows
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
    if vm.host.tsc_khz > 0 && bare.host.tsc_khz > 0 {
        let skew = vm.host.tsc_khz.abs_diff(bare.host.tsc_khz) as f64 / bare.host.tsc_khz as f64;
        if skew > 0.001 {
            notes.push(format!(
                "TSC rates differ ({} vs {} kHz): tick counts are not directly comparable",
                vm.host.tsc_khz, bare.host.tsc_khz
            ));
        }
    }
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

/// Compares every crossing of `vm` with the same-named crossing of `bare`.
pub fn compare(vm: &Report, bare: &Report) -> Comparison {
    let (vm_index, bare_index) = (by_name(vm), by_name(bare));
    let all_names = names(vm, bare);
    let mut notes = environment_notes(vm, bare);
    notes.extend(depth_notes(vm, bare, &all_names));
    let rows = all_names
        .into_iter()
        .flat_map(|name| {
            rows_of(
                name,
                vm_index.get(name).copied(),
                bare_index.get(name).copied(),
                vm.timeline.as_ref().map(|t| t.verified),
            )
        })
        .collect();
    Comparison {
        schema: COMPARISON_SCHEMA.into(),
        schema_version: COMPARISON_SCHEMA_VERSION,
        vm_tool: vm.tool.clone(),
        bare_metal_tool: bare.tool.clone(),
        rows,
        notes,
        probes: compare_probes(&vm.probes, &bare.probes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::render::comparison_table;

    #[test]
    fn comparison_gives_difference_and_ratio() {
        let vm = fixtures::report(Environment::Microguest, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        let c = compare(&vm, &bare);
        let rt = c
            .rows
            .iter()
            .find(|r| r.crossing == "pf" && r.interval == "round_trip")
            .unwrap();
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

    #[test]
    fn a_traced_vm_run_splits_the_difference_into_exits_and_the_rest() {
        use crate::attribution::ReasonCost;
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        // VM u2k: corrected 150..152, mean 151; say the exit-free samples
        // have median 120 and mean 121, and two reasons share the host time 3:1.
        let u2k = vm.crossings[0].u2k.as_mut().unwrap();
        let mut host = SegmentHost {
            samples: 3,
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[120, 121, 122]),
            host_ticks_total: 400,
            ..Default::default()
        };
        host.exit_free.mean = 121.0;
        host.exits.insert(
            "npf".into(),
            ReasonCost {
                count: 1,
                host_ticks: 300,
            },
        );
        host.exits.insert(
            "intr".into(),
            ReasonCost {
                count: 1,
                host_ticks: 100,
            },
        );
        u2k.host = Some(host);
        let c = compare(&vm, &bare);
        let row = c
            .rows
            .iter()
            .find(|r| r.crossing == "pf" && r.interval == "u2k")
            .unwrap();
        // Bare-metal u2k median: 101 - 50 = 51.
        assert_eq!(row.diff_median, Some(151 - 51));
        assert_eq!(row.without_exits.as_ref().unwrap().ticks, 121 - 51);
        let exits = row.exits.as_ref().unwrap();
        let all_mean = vm.crossings[0].u2k.as_ref().unwrap().corrected.mean;
        assert!((exits.ticks - (all_mean - 121.0)).abs() < 1e-9);
        assert!((exits.by_reason["npf"] - 0.75 * exits.ticks).abs() < 1e-9);
        // Untraced rows have no split; the table shows one only when traced.
        let k2u = c.rows.iter().find(|r| r.interval == "k2u").unwrap();
        assert!(k2u.without_exits.is_none() && k2u.exits.is_none());
        let table = comparison_table(&c);
        assert!(table.contains("what the VM adds, decomposed"), "{table}");
        assert!(!comparison_table(&compare(&bare, &bare)).contains("decomposed"));
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
