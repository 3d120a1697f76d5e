//! What instrumentation costs: the `probes` part of a report (`xperf probes`)
//! and of a comparison. One row per (mode, crossing): the round trip of the
//! crossing with the probe in place against the same crossing without it,
//! measured in alternating rounds so that drift cancels.

use crate::{MedianCi, Stats, Status};
use serde::{Deserialize, Serialize};

/// The instrumentation modes, as reports name them.
pub mod mode {
    /// A static tracepoint: `raw_syscalls:sys_enter`/`sys_exit` on getppid,
    /// `exceptions:page_fault_user` on the #PF.
    pub const TRACEPOINT: &str = "tracepoint";
    /// A control for the syscall tracepoints: `syscalls:sys_{enter,exit}_getpid`
    /// enabled (never fired by getppid) moves every syscall to the slow path;
    /// what that alone costs getppid.
    pub const SYSCALL_SLOW_PATH: &str = "syscall-slow-path";
    /// A kprobe inside the function, as an int3 breakpoint (optimization off).
    pub const KPROBE_INT3: &str = "kprobe-int3";
    /// The same kprobe, jump-optimized.
    pub const KPROBE_OPTIMIZED: &str = "kprobe-optimized";
    /// A kprobe at the function's +0, on its ftrace call site.
    pub const KPROBE_FTRACE: &str = "kprobe-ftrace";
    /// A kretprobe on the function (entry on ftrace, a return trampoline).
    pub const KRETPROBE: &str = "kretprobe";
    /// An fprobe event on the function (ftrace-based entry probe).
    pub const FPROBE: &str = "fprobe";
    /// The function tracer filtered to the function.
    pub const FUNCTION: &str = "function";
    /// The xperf hooks compiled in but off, against the plain kernel: a
    /// comparison of two kernels' no-probe baselines ([`super::hooks_off`]).
    pub const HOOKS_OFF: &str = "hooks-off";

    /// Every mode `xperf probes` measures itself, in its order.
    pub const MEASURED: [&str; 8] = [
        TRACEPOINT,
        SYSCALL_SLOW_PATH,
        KPROBE_INT3,
        KPROBE_OPTIMIZED,
        KPROBE_FTRACE,
        KRETPROBE,
        FPROBE,
        FUNCTION,
    ];
}

/// What one instrumentation mode adds to one crossing.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Probe {
    /// One of [`mode`].
    #[serde(deserialize_with = "crate::limits::probe_mode")]
    pub mode: String,
    /// "getppid" or "pf-refault".
    #[serde(deserialize_with = "crate::limits::crossing_name")]
    pub crossing: String,
    /// `measured`, or `unsupported` with the reason (what the kernel lacks,
    /// or why the measurement was discarded).
    pub status: Status,
    /// What was placed where, and how it was checked (e.g. "kprobe
    /// xperf/getppid_kprobe at __x64_sys_getppid+0x5, int3 (0xcc) in place").
    #[serde(default)]
    pub probe: String,
    /// Probed samples taken (over all rounds).
    pub iterations: u64,
    /// Probe hits counted in the trace buffer inside those samples.
    pub hits: u64,
    /// The hits the samples must show: one per sample, 0 for a control mode.
    #[serde(default)]
    pub hits_expected: u64,
    /// Hits each probed sample holds: 1, 2 for getppid's tracepoint
    /// (sys_enter and sys_exit), 0 for a control. Older reports: 1.
    #[serde(default = "one")]
    pub hits_per_sample: u64,
    /// Ticks each probed sample took beyond the median of the no-probe
    /// samples of its round, per hit (divided by `hits_per_sample` where
    /// that is above 1), signed: a probed sample faster than the median
    /// counts below 0, so mean and p99 are not pushed up.
    pub added_ticks: Option<SignedStats>,
    /// 95 % bootstrap interval of the added median (`xvmm_results::bootstrap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_median_ci: Option<SignedCi>,
    /// Median of the probed samples minus the median of the no-probe ones,
    /// signed (the figure that can show "no cost" honestly).
    #[serde(default)]
    pub median_difference: Option<i64>,
    /// Round trips without the probe, over the same rounds (raw ticks).
    #[serde(default)]
    pub baseline: Option<Stats>,
    /// Round trips with the probe (raw ticks).
    #[serde(default)]
    pub probed: Option<Stats>,
    /// How many alternating no-probe/probe rounds.
    #[serde(default)]
    pub rounds: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Probe {
    /// A row that was not measured, with the reason.
    pub fn unsupported(mode: &str, crossing: &str, reason: String) -> Probe {
        Probe {
            mode: mode.into(),
            crossing: crossing.into(),
            status: Status::Unsupported { reason },
            probe: String::new(),
            iterations: 0,
            hits: 0,
            hits_expected: 0,
            hits_per_sample: 1,
            added_ticks: None,
            added_median_ci: None,
            median_difference: None,
            baseline: None,
            probed: None,
            rounds: 0,
            notes: Vec::new(),
        }
    }

    /// The median added ticks (per hit) of a measured row.
    pub fn added_median(&self) -> Option<i64> {
        match self.status {
            Status::Measured => self.added_ticks.as_ref().map(|s| s.median),
            _ => None,
        }
    }
}

fn one() -> u64 {
    1
}

/// Order statistics of signed values (ticks added by a probe), as
/// [`Stats`] gives them for unsigned ones (nearest rank).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SignedStats {
    pub count: u64,
    pub min: i64,
    pub median: i64,
    pub p99: i64,
    pub max: i64,
    pub mean: f64,
    /// Population standard deviation.
    pub stddev: f64,
}

impl SignedStats {
    pub fn from_samples(samples: &[i64]) -> SignedStats {
        if samples.is_empty() {
            return SignedStats::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let mean = sorted.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let variance = sorted
            .iter()
            .map(|&v| (v as f64 - mean) * (v as f64 - mean))
            .sum::<f64>()
            / n as f64;
        let rank = |pct: f64| {
            let r = crate::num::usize_saturating(((pct / 100.0) * n as f64).ceil());
            sorted[r.clamp(1, n) - 1]
        };
        SignedStats {
            count: n as u64,
            min: sorted[0],
            median: rank(50.0),
            p99: rank(99.0),
            max: sorted[n - 1],
            mean,
            stddev: variance.sqrt(),
        }
    }

    /// The same statistics of every value divided by `k` (at least 1):
    /// order statistics rounded to the nearest tick (division keeps the
    /// order), mean and spread exact.
    pub fn per(mut self, k: u64) -> SignedStats {
        let k = k.max(1);
        let div = |v: i64| div_nearest(v, k);
        (self.min, self.median, self.p99, self.max) = (
            div(self.min),
            div(self.median),
            div(self.p99),
            div(self.max),
        );
        self.mean /= k as f64;
        self.stddev /= k as f64;
        self
    }
}

/// `v / k` rounded to the nearest integer (halves away from 0).
fn div_nearest(v: i64, k: u64) -> i64 {
    let k = i128::from(k);
    let v = i128::from(v);
    let q = (2 * v.abs() + k) / (2 * k);
    // Never clamps: |q| <= |v| for k >= 1.
    crate::num::i64_clamped(if v < 0 { -q } else { q })
}

/// A 95 % confidence interval of a signed median, in ticks.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedCi {
    pub low: i64,
    pub high: i64,
}

/// The bootstrap interval of the median of signed `values` (in the order
/// taken), divided by `k`: the values are shifted to start at 0, which
/// moves every median by the same amount.
fn signed_median_ci(values: &[i64], k: u64) -> Option<SignedCi> {
    let min = *values.iter().min()?;
    let shifted: Vec<u64> = values.iter().map(|&v| v.abs_diff(min)).collect();
    let ci: MedianCi = crate::bootstrap::median_ci(&shifted)?;
    let back = |u: u64| div_nearest(min.saturating_add_unsigned(u), k);
    Some(SignedCi {
        low: back(ci.low),
        high: back(ci.high),
    })
}

/// The samples of one round: without the probe, then with it (raw ticks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub baseline: Vec<u64>,
    pub probed: Vec<u64>,
}

/// Added-cost statistics of alternating rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedCost {
    /// Per hit, signed.
    pub added: SignedStats,
    /// 95 % interval of the added median (per hit).
    pub added_median_ci: Option<SignedCi>,
    pub median_difference: i64,
    pub baseline: Stats,
    pub probed: Stats,
    /// Probed samples faster than their round's baseline median (negative
    /// added values).
    pub below_baseline: u64,
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Each probed sample minus the median of its own round's no-probe samples,
/// divided by the `hits` each sample holds (1 where it is 0, a control):
/// drift between rounds cancels, and the spread of the probed samples stays
/// visible. `None` when a round lacks samples on either side.
pub fn added_cost(rounds: &[Round], hits: u64) -> Option<AddedCost> {
    if rounds.is_empty() {
        return None;
    }
    let mut added = Vec::new();
    let mut below = 0;
    for r in rounds {
        if r.baseline.is_empty() || r.probed.is_empty() {
            return None;
        }
        let base = signed(Stats::from_samples(&r.baseline).median);
        for &p in &r.probed {
            let d = signed(p).saturating_sub(base);
            below += u64::from(d < 0);
            added.push(d);
        }
    }
    let hits = hits.max(1);
    let all = |side: fn(&Round) -> &Vec<u64>| -> Vec<u64> {
        rounds
            .iter()
            .flat_map(|r| side(r).iter().copied())
            .collect()
    };
    let baseline = Stats::from_samples(&all(|r| &r.baseline));
    let probed = Stats::from_samples(&all(|r| &r.probed));
    Some(AddedCost {
        added_median_ci: signed_median_ci(&added, hits),
        added: SignedStats::from_samples(&added).per(hits),
        median_difference: signed(probed.median) - signed(baseline.median),
        baseline,
        probed,
        below_baseline: below,
    })
}

/// The `hooks-off` row: a patched kernel (hooks compiled in, off) against
/// the plain kernel, from the no-probe round trips of several runs on each
/// (raw ticks; the runs alternated between the kernels). Each run counts
/// once, by its median: the difference is the median of the patched runs
/// minus that of the plain runs, and the noise is the spread of the run
/// medians of one kernel. The difference means something only beyond it.
pub fn hooks_off(crossing: &str, patched_runs: &[Stats], plain_runs: &[Stats]) -> Probe {
    let medians = |runs: &[Stats]| -> Vec<u64> {
        runs.iter()
            .filter(|s| s.count > 0)
            .map(|s| s.median)
            .collect()
    };
    let (patched, plain) = (medians(patched_runs), medians(plain_runs));
    if patched.is_empty() || plain.is_empty() {
        return Probe::unsupported(
            mode::HOOKS_OFF,
            crossing,
            "needs no-probe runs on both the patched and the plain kernel".into(),
        );
    }
    let (patched_stats, plain_stats) = (Stats::from_samples(&patched), Stats::from_samples(&plain));
    let added: Vec<i64> = patched
        .iter()
        .map(|&v| signed(v) - signed(plain_stats.median))
        .collect();
    let difference = signed(patched_stats.median) - signed(plain_stats.median);
    let noise = spread(&patched).max(spread(&plain));
    let mut probe = Probe::unsupported(mode::HOOKS_OFF, crossing, String::new());
    probe.status = Status::Measured;
    probe.probe = format!(
        "patched kernel, hooks off ({} runs), against the plain kernel ({} runs)",
        patched.len(),
        plain.len()
    );
    probe.iterations = patched_runs.iter().map(|s| s.count).sum();
    probe.added_ticks = Some(SignedStats::from_samples(&added));
    probe.median_difference = Some(difference);
    probe.baseline = Some(plain_stats);
    probe.probed = Some(patched_stats);
    probe.rounds = patched.len().min(plain.len()) as u64;
    probe.notes.push(format!(
        "difference {difference:+} ticks; noise (spread of one kernel's run medians) {noise} ticks: {}",
        if difference.unsigned_abs() <= noise {
            "within the noise"
        } else {
            "beyond the noise"
        }
    ));
    probe
}

/// Largest minus smallest value.
fn spread(values: &[u64]) -> u64 {
    match (values.iter().min(), values.iter().max()) {
        (Some(lo), Some(hi)) => hi - lo,
        _ => 0,
    }
}

/// Where the VM/bare-metal ratio of a mode comes from, for the comparison.
/// None of the modes makes a hit leave the guest; what differs in a VM is
/// the cost of the same guest instructions (two-level page walks on TLB
/// misses, exception delivery, the host's scheduling).
pub fn vm_explanation(mode_name: &str) -> &'static str {
    match mode_name {
        mode::TRACEPOINT => {
            "a static key turned into a jump, the trace event and a ring-buffer write: guest \
             kernel code only, no VM exit; the ratio is the guest's own speed (TLB misses walk \
             guest and host page tables)"
        }
        mode::FUNCTION | mode::FPROBE | mode::KPROBE_FTRACE => {
            "the function's ftrace site becomes a call into ftrace, then the handler and a \
             ring-buffer write: guest code only, no VM exit"
        }
        mode::SYSCALL_SLOW_PATH => "the syscall slow path is plain guest kernel code: no VM exit",
        mode::KPROBE_INT3 => {
            "int3 (#BP) and the return after it are guest-internal exceptions: KVM does not \
             intercept #BP here, so no VM exit; the VM pays only for its own exception delivery"
        }
        mode::KPROBE_OPTIMIZED => {
            "a jump to a detour buffer and back: plain guest code, no exception, no VM exit"
        }
        mode::KRETPROBE => "an ftrace entry plus a return trampoline: guest code only, no VM exit",
        _ => "",
    }
}

/// One mode on one crossing, VM against bare metal (added ticks per hit).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProbeComparisonRow {
    pub mode: String,
    pub crossing: String,
    pub vm_added_median: Option<i64>,
    pub bare_added_median: Option<i64>,
    /// VM over bare metal.
    pub ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn why_missing(p: Option<&Probe>, side: &str) -> Option<String> {
    match p {
        None => Some(format!("not in the {side} report")),
        Some(p) => p.status.why_not().map(|t| format!("{side}: {t}")),
    }
}

/// Pairs the probe rows of two reports by (mode, crossing), the VM's order
/// first. Linear in the number of rows.
pub fn compare_probes(vm: &[Probe], bare: &[Probe]) -> Vec<ProbeComparisonRow> {
    use std::collections::{HashMap, HashSet};
    let key = |p: &Probe| (p.mode.clone(), p.crossing.clone());
    let mut bare_by = HashMap::with_capacity(bare.len());
    for p in bare {
        bare_by.entry(key(p)).or_insert(p);
    }
    let mut vm_by = HashMap::with_capacity(vm.len());
    for p in vm {
        vm_by.entry(key(p)).or_insert(p);
    }
    let mut seen = HashSet::new();
    vm.iter()
        .chain(bare)
        .map(key)
        .filter(|k| seen.insert(k.clone()))
        .map(|k| {
            let (v, b) = (vm_by.get(&k).copied(), bare_by.get(&k).copied());
            let (vm_added, bare_added) = (
                v.and_then(Probe::added_median),
                b.and_then(Probe::added_median),
            );
            ProbeComparisonRow {
                ratio: match (vm_added, bare_added) {
                    (Some(v), Some(b)) if v > 0 && b > 0 => Some(v as f64 / b as f64),
                    _ => None,
                },
                note: why_missing(v, "VM").or_else(|| why_missing(b, "bare metal")),
                mode: k.0,
                crossing: k.1,
                vm_added_median: vm_added,
                bare_added_median: bare_added,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_cost_subtracts_each_rounds_own_baseline() {
        // Round 2 drifted up by 1000 ticks on both sides: the added cost stays 50.
        let rounds = [
            Round {
                baseline: vec![100, 100, 110],
                probed: vec![150, 150, 160],
            },
            Round {
                baseline: vec![1100, 1100, 1110],
                probed: vec![1150, 1150, 1090],
            },
        ];
        let c = added_cost(&rounds, 1).unwrap();
        assert_eq!(c.added.count, 6);
        assert_eq!(c.added.median, 50);
        assert_eq!(c.added.min, -10, "1090 is below its round's 1100");
        assert_eq!(c.below_baseline, 1);
        assert_eq!((c.baseline.count, c.probed.count), (6, 6));
        assert_eq!(c.median_difference, 160 - 110, "medians of all six");
        let ci = c.added_median_ci.expect("an interval of the added median");
        assert!(ci.low <= 50 && 50 <= ci.high, "{ci:?}");
        assert!(added_cost(&[], 1).is_none());
        assert!(added_cost(
            &[Round {
                baseline: vec![1],
                probed: vec![]
            }],
            1
        )
        .is_none());
    }

    /// A probe that costs nothing: probed samples scatter around the
    /// baseline's median both ways. Clamping the faster ones at 0 would
    /// report a positive mean and p99; the signed values average to 0.
    #[test]
    fn added_cost_keeps_samples_below_the_baseline_signed() {
        let rounds = [Round {
            baseline: vec![1000; 9],
            probed: vec![960, 970, 980, 990, 1000, 1010, 1020, 1030, 1040],
        }];
        let c = added_cost(&rounds, 1).unwrap();
        assert_eq!((c.added.min, c.added.median, c.added.max), (-40, 0, 40));
        assert!(c.added.mean.abs() < 1e-9, "mean {}", c.added.mean);
        assert_eq!(c.below_baseline, 4);
        let ci = c.added_median_ci.unwrap();
        assert!(ci.low < 0 && ci.high > 0, "{ci:?}");
    }

    /// getppid's tracepoint: each sample holds sys_enter and sys_exit, so
    /// the added ticks per hit are half the sample's.
    #[test]
    fn added_cost_is_per_hit() {
        let rounds = [Round {
            baseline: vec![1000, 1000, 1000],
            probed: vec![1600, 1602, 1601],
        }];
        let c = added_cost(&rounds, 2).unwrap();
        assert_eq!((c.added.min, c.added.median, c.added.max), (300, 301, 301));
        assert!(
            (c.added.mean - 1803.0 / 6.0).abs() < 1e-9,
            "{}",
            c.added.mean
        );
        assert_eq!(c.median_difference, 601, "raw medians, per sample");
        // A control (0 hits per sample): per sample.
        assert_eq!(added_cost(&rounds, 0).unwrap().added.median, 601);
        let ci = c.added_median_ci.unwrap();
        assert!(ci.low >= 300 && ci.high <= 301, "{ci:?}");
    }

    #[test]
    fn hooks_off_states_difference_and_noise() {
        let runs = |medians: &[u64]| -> Vec<Stats> {
            medians
                .iter()
                .map(|&m| Stats::from_samples(&[m - 5, m, m + 5]))
                .collect()
        };
        let p = hooks_off("getppid", &runs(&[505, 540, 500]), &runs(&[510, 515]));
        assert_eq!(p.status, Status::Measured);
        assert_eq!(p.mode, mode::HOOKS_OFF);
        // Nearest-rank medians of the run medians: patched 505, plain 510.
        assert_eq!(p.median_difference, Some(-5));
        assert!(
            p.notes[0].contains("noise (spread of one kernel's run medians) 40 ticks: within"),
            "{:?}",
            p.notes
        );
        assert_eq!(p.iterations, 9);
        let far = hooks_off("getppid", &runs(&[600, 601]), &runs(&[500, 502]));
        assert!(
            far.notes[0].ends_with("beyond the noise"),
            "{:?}",
            far.notes
        );
        let none = hooks_off("getppid", &[], &runs(&[500]));
        assert!(matches!(none.status, Status::Unsupported { .. }));
    }

    fn measured(mode: &str, crossing: &str, added: i64) -> Probe {
        let mut p = Probe::unsupported(mode, crossing, String::new());
        p.status = Status::Measured;
        p.added_ticks = Some(SignedStats::from_samples(&[added]));
        p
    }

    #[test]
    fn comparison_pairs_rows_and_names_missing_sides() {
        let vm = vec![
            measured(mode::KPROBE_INT3, "getppid", 3000),
            measured(mode::KPROBE_OPTIMIZED, "getppid", 200),
        ];
        let bare = vec![
            measured(mode::KPROBE_INT3, "getppid", 1000),
            Probe::unsupported(mode::KPROBE_OPTIMIZED, "getppid", "no OPTPROBES".into()),
            measured(mode::FUNCTION, "pf-refault", 10),
        ];
        let rows = compare_probes(&vm, &bare);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].ratio, Some(3.0));
        assert_eq!(rows[1].bare_added_median, None);
        assert!(rows[1].note.as_deref().unwrap().contains("no OPTPROBES"));
        assert_eq!(rows[2].note.as_deref(), Some("not in the VM report"));
        for m in mode::MEASURED {
            assert!(!vm_explanation(m).is_empty(), "{m}");
        }
    }

    #[test]
    fn json_of_a_probe_round_trips() {
        let p = measured(mode::KRETPROBE, "getppid", 42);
        let text = serde_json::to_string(&p).unwrap();
        assert!(!text.contains("\"notes\""), "empty notes are left out");
        assert_eq!(serde_json::from_str::<Probe>(&text).unwrap(), p);
    }
}
