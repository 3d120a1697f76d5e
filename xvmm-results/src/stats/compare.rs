//! A VM report against a bare-metal report of the same crossings: the
//! `xvmm-comparison` schema and how it is computed.

use crate::attribution::SegmentHost;
use crate::num;
use crate::probes::{compare_probes, ProbeComparisonRow};
use crate::{Crossing, Environment, Interval, MedianCi, Report, Stats};
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
    /// What exits add: the VM's mean over the attributed samples minus its
    /// mean over their exit-free ones, split by exit reason in proportion to
    /// host time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<ExitsPart>,
    /// Whether the VM run's timeline was verified (see `timeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_verified: Option<bool>,
}

/// The part of a difference no exit explains, with an approximate 95 %
/// interval of that difference: the two medians' bootstrap intervals
/// combined for independent runs ([`difference_interval`]). Within-run
/// scatter only: how far two runs on different days differ is not in it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WithoutExits {
    pub ticks: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<i64>,
}

/// The part of a difference exits explain, in guest ticks per sample: the
/// mean over the attributed samples minus the mean over their exit-free
/// ones (the unattributable samples are in neither).
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

/// VM over bare metal; `scale` turns a ratio of ticks into one of
/// nanoseconds (bare-metal kHz over VM kHz; 1 when both share one rate).
fn ratio(vm: Option<u64>, bare: Option<u64>, scale: f64) -> Option<f64> {
    let (vm, bare) = (vm?, bare?);
    (bare > 0).then(|| vm as f64 / bare as f64 * scale)
}

/// Bare-metal kHz over VM kHz when the two TSC rates differ by more than
/// 0.1 % (a 3 GHz tick is not a 2 GHz one), else 1: within that, ticks
/// are compared as measured.
fn tick_scale(vm: &Report, bare: &Report) -> f64 {
    let (v, b) = (vm.host.tsc_khz, bare.host.tsc_khz);
    if v == 0 || b == 0 || (v.abs_diff(b) as f64) <= 0.001 * b as f64 {
        1.0
    } else {
        b as f64 / v as f64
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

/// The interval of `a - b`, two medians of independent runs, from each
/// one's 95 % interval: each side's distance to its end is combined in
/// quadrature (MOVER, Zou & Donner 2008), which is what the percentiles of
/// independent bootstrap differences come to when the two are about
/// normal. Subtracting the ends (a's low minus b's high) would cover the
/// difference ~99 % of the time, not 95 %. Widened to whole ticks.
pub fn difference_interval(a: u64, a_ci: MedianCi, b: u64, b_ci: MedianCi) -> (i64, i64) {
    let f = |v: u64| v as f64;
    let d = f(a) - f(b);
    let below = (f(a) - f(a_ci.low)).hypot(f(b_ci.high) - f(b));
    let above = (f(a_ci.high) - f(a)).hypot(f(b) - f(b_ci.low));
    // Saturating casts: medians of untrusted files may be anything.
    (
        num::i64_saturating((d - below).floor()),
        num::i64_saturating((d + above).ceil()),
    )
}

/// The exit-free part: VM exit-free median minus bare-metal median.
fn without_exits(host: &SegmentHost, bare: &Interval) -> Option<WithoutExits> {
    if host.exit_free.count == 0 {
        return None;
    }
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (v, b) = (host.exit_free.median, bare.corrected.median);
    let ticks = as_i64(v).saturating_sub(as_i64(b));
    let (ci_low, ci_high) = match (host.exit_free_median_ci, bare.median_ci) {
        (Some(v_ci), Some(b_ci)) => {
            let (low, high) = difference_interval(v, v_ci, b, b_ci);
            (Some(low), Some(high))
        }
        _ => (None, None),
    };
    Some(WithoutExits {
        ticks,
        ci_low,
        ci_high,
    })
}

/// The exits' part: the attributed samples' mean minus their exit-free
/// ones' mean, by host time. Both from the attribution's own set: the
/// interval's mean also holds the unattributable samples. With n attributed
/// samples, w of them with exits, the sum over those w of (value - exit-free
/// median) is `excess_ticks`, so the attributed mean minus the exit-free
/// mean is (excess + w (median - mean)) / n.
fn exits_part(host: &SegmentHost) -> Option<ExitsPart> {
    let attributed = host.samples.saturating_sub(host.unattributable);
    if host.exit_free.count == 0 || attributed == 0 {
        return None;
    }
    let with = host.samples_with_exits as f64;
    let free = &host.exit_free;
    let ticks =
        (host.excess_ticks as f64 + with * (free.median as f64 - free.mean)) / attributed as f64;
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
    scale: f64,
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
            (Some(_), Some(h), Some(bi)) => (without_exits(h, bi), exits_part(h)),
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
            ratio_median: ratio(vm_median, bare_median, scale),
            ratio_p99: ratio(vm_p99, bare_p99, scale),
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
                "TSC rates differ ({} vs {} kHz): ratios are of nanoseconds (each file's ticks \
                 over its own rate); medians and differences are each file's ticks, not directly \
                 comparable",
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
    let scale = tick_scale(vm, bare);
    let rows = all_names
        .into_iter()
        .flat_map(|name| {
            rows_of(
                name,
                vm_index.get(name).copied(),
                bare_index.get(name).copied(),
                vm.timeline.as_ref().map(|t| t.verified),
                scale,
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

    #[test]
    fn a_traced_vm_run_splits_the_difference_into_exits_and_the_rest() {
        use crate::attribution::ReasonCost;
        let mut vm = fixtures::report(Environment::LinuxVm, 2);
        let bare = fixtures::report(Environment::BareMetal, 1);
        // VM u2k: corrected 150..152; say attribution saw 5 samples, one
        // unattributable, three exit-free (median 121, mean 121.33) and one
        // 200 ticks above that median with exits, two reasons sharing the
        // host time 3:1.
        let u2k = vm.crossings[0].u2k.as_mut().unwrap();
        let mut host = SegmentHost {
            samples: 5,
            unattributable: 1,
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[120, 121, 123]),
            excess_ticks: 200,
            host_ticks_total: 400,
            ..Default::default()
        };
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
        let row = row_of(&c, "pf", "u2k");
        // Bare-metal u2k median: 101 - 50 = 51.
        assert_eq!(row.diff_median, Some(151 - 51));
        assert_eq!(row.without_exits.as_ref().unwrap().ticks, 121 - 51);
        let exits = row.exits.as_ref().unwrap();
        // Attributed: 120, 121, 123 and 321, mean 171.25; exit-free 364 / 3.
        assert!(
            (exits.ticks - (171.25 - 364.0 / 3.0)).abs() < 1e-9,
            "{exits:?}"
        );
        assert!((exits.by_reason["npf"] - 0.75 * exits.ticks).abs() < 1e-9);
        // Untraced rows have no split; the table shows one only when traced.
        let k2u = c.rows.iter().find(|r| r.interval == "k2u").unwrap();
        assert!(k2u.without_exits.is_none() && k2u.exits.is_none());
        let table = comparison_table(&c);
        assert!(table.contains("what the VM adds, decomposed"), "{table}");
        assert!(!comparison_table(&compare(&bare, &bare)).contains("decomposed"));
        // The same attribution on an interval with no sample: nothing to
        // decompose.
        vm.crossings[0].u2k.as_mut().unwrap().corrected.count = 0;
        let c = compare(&vm, &bare);
        let row = row_of(&c, "pf", "u2k");
        assert!(
            row.without_exits.is_none() && row.exits.is_none(),
            "{row:?}"
        );
    }

    /// `n` independent values spread evenly around `center` (+-50), from a
    /// SplitMix64 stream: their true median is `center`.
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

    /// The decomposition's interval for VM exit-free values against
    /// bare-metal values.
    fn difference_ci(vm: &[u64], bare: &[u64]) -> (i64, i64, i64) {
        let host = SegmentHost {
            samples: vm.len() as u64,
            exit_free: Stats::from_samples(vm),
            exit_free_median_ci: crate::bootstrap::median_ci(vm),
            ..Default::default()
        };
        let w = without_exits(&host, &Interval::from_raw(bare, 0)).unwrap();
        (w.ticks, w.ci_low.unwrap(), w.ci_high.unwrap())
    }

    #[test]
    fn the_difference_interval_covers_the_true_difference_95_percent_of_the_time() {
        // 400 pairs of independent runs, VM exit-free median 1100, bare metal
        // 1000: the interval should hold 100 in about 95 % of them. Ends
        // against ends of two 95 % intervals hold it in about 99 %.
        let mut seed = 21;
        let covered = (0..400)
            .filter(|_| {
                let vm = draw(1100, 300, &mut seed);
                let bare = draw(1000, 300, &mut seed);
                let (_, low, high) = difference_ci(&vm, &bare);
                low <= 100 && 100 <= high
            })
            .count();
        assert!((360..=392).contains(&covered), "covered {covered} of 400");
    }

    #[test]
    fn the_difference_interval_is_not_the_sum_of_both_widths() {
        // Two runs of the same spread: the difference's interval is about
        // sqrt(2) times one median's, not twice it.
        let mut seed = 5;
        let (vm, bare) = (draw(1100, 300, &mut seed), draw(1000, 300, &mut seed));
        let one = |v: &[u64]| {
            let ci = crate::bootstrap::median_ci(v).unwrap();
            (ci.high - ci.low) as f64
        };
        let (ticks, low, high) = difference_ci(&vm, &bare);
        assert!(low <= ticks && ticks <= high, "{low} {ticks} {high}");
        let width = (high - low) as f64;
        let single = (one(&vm) + one(&bare)) / 2.0;
        assert!(
            width < 1.7 * single && width > 1.2 * single,
            "{width} against {single} for one median"
        );
    }

    #[test]
    fn the_exits_part_is_over_the_attributed_samples_only() {
        use crate::attribution::{attribute, HostExitEvent, HostTrace, Index};
        use crate::timeline::Mapping;
        // u2k of 100 ticks four times, 1100 once (an exit of 900 inside), and
        // 10100 once where the trace lost events: unattributable, so in
        // neither part. The exits part is the attributed mean (300) minus
        // the exit-free mean (100).
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
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
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
        let bare = fixtures::report(Environment::BareMetal, 1);
        let c = compare(&vm, &bare);
        let row = row_of(&c, "pf", "u2k");
        let exits = row.exits.as_ref().unwrap();
        assert!((exits.ticks - 200.0).abs() < 1e-9, "{exits:?}");
        assert!((exits.by_reason["npf"] - 200.0).abs() < 1e-9);
    }

    /// No ratio over a bare-metal 0, and an unknown TSC rate on either
    /// side compares ticks as measured.
    #[test]
    fn no_ratio_over_zero_and_an_unknown_rate_scales_nothing() {
        assert_eq!(ratio(Some(5), Some(0), 1.0), None);
        assert_eq!(ratio(Some(6), Some(3), 0.5), Some(1.0));
        let mut vm = fixtures::report(Environment::LinuxVm, 1);
        let mut bare = fixtures::report(Environment::BareMetal, 1);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (0, 2_000_000);
        assert_eq!(tick_scale(&vm, &bare), 1.0);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (3_000_000, 0);
        assert_eq!(tick_scale(&vm, &bare), 1.0);
        (vm.host.tsc_khz, bare.host.tsc_khz) = (4_000_000, 2_000_000);
        assert_eq!(tick_scale(&vm, &bare), 0.5);
    }

    /// Each side's distance to its own end, in quadrature, on each side:
    /// an asymmetric case worked by hand.
    #[test]
    fn the_difference_interval_combines_each_sides_distance_to_its_end() {
        let ci = |low, high| MedianCi { low, high };
        // d = 50; below = hypot(100 - 90, 60 - 50) = 14.14; above =
        // hypot(120 - 100, 50 - 45) = 20.62.
        assert_eq!(
            difference_interval(100, ci(90, 120), 50, ci(45, 60)),
            (35, 71)
        );
        assert_eq!(
            difference_interval(50, ci(45, 60), 100, ci(90, 120)),
            (-71, -35)
        );
    }

    /// No exits' part without exit-free samples to stand against, nor
    /// without attributed samples to average over (a file may say either).
    #[test]
    fn no_exits_part_without_exit_free_or_attributed_samples() {
        let host = SegmentHost {
            samples: 4,
            unattributable: 1,
            samples_with_exits: 3,
            excess_ticks: 300,
            ..Default::default()
        };
        assert!(exits_part(&host).is_none());
        let all_unattributable = SegmentHost {
            unattributable: 4,
            exit_free: Stats::from_samples(&[120, 121]),
            ..host.clone()
        };
        assert!(exits_part(&all_unattributable).is_none());
        let fine = SegmentHost {
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[120, 121]),
            ..host
        };
        assert!(exits_part(&fine).is_some());
        // Exits listed with no host time between them: each gets 0, not a
        // share of nothing (NaN).
        let timeless = SegmentHost {
            exits: [(
                "io".to_string(),
                crate::attribution::ReasonCost {
                    count: 2,
                    host_ticks: 0,
                },
            )]
            .into_iter()
            .collect(),
            host_ticks_total: 0,
            ..fine
        };
        let part = exits_part(&timeless).unwrap();
        assert_eq!(part.by_reason.get("io"), Some(&0.0));
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
        // either side says nothing of rates.
        let mut bare = bare;
        for (v, b) in [(2_002_000, 2_000_000), (0, 2_000_000), (3_000_000, 0)] {
            vm.host.tsc_khz = v;
            bare.host.tsc_khz = b;
            let c = compare(&vm, &bare);
            assert!(c.notes.is_empty(), "{v} vs {b}: {:?}", c.notes);
        }
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
