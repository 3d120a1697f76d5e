//! Linearity of the stamps, and whether the user pair's cost that runs
//! subtract is right: dependent chains of N `imul` timed with the same
//! stamps as the crossings, in phases of eight lengths taken in turn (one
//! VM phase in the microguest, one pass natively), each phase with its own
//! line (`xvmm_results::sweep`).
//!
//! The check takes the correction a run would apply (the null pair, or the
//! intercept of the run's short sweep where the two differ by more than two
//! standard errors), from samples of its own, and holds it against a
//! longer, independent sweep: the correction must be one the method allows
//! given that sweep ([`xvmm_results::sweep::check_correction`], within the
//! two sweeps' combined uncertainty); the long chains must lie within 2 % of
//! their phase's line; 4096 imul must cost twice 2048 within 2 % once the
//! correction is subtracted; the sweep's slope must be one imul's cost as a
//! long chain, timed on its own ([`ChainCost`]), gives it. Corrections one
//! TSC quantum either side of the right one, and chain costs 5 % off, must
//! fail the same check: those are the negative controls.

use std::arch::asm;
use xvmm_results::sweep::{self, StampSweep, SweepFit, SweepPhase};
use xvmm_results::{stamp_close, stamp_open, tsc};

/// Phases whose intercepts the correction is checked against: short
/// chains (8 to 1024 imul), where the stamps are a large share of the
/// interval, with first lengths that cross the TSC's steps at different
/// points.
pub const INTERCEPT_PHASES: [(u64, u64); 8] = [
    (8, 8),
    (16, 8),
    (24, 8),
    (40, 8),
    (56, 8),
    (72, 8),
    (104, 8),
    (128, 8),
];

/// The long phase: 512 to 4096 imul, for the 2 % claims.
pub const LONG_PHASE: (u64, u64) = (512, 8);

/// Chains from this length on must lie within 2 % of their phase's line.
pub const LINEAR_FROM: u64 = 512;

/// The stamps around `n` dependent imuls (n a multiple of 8), or around
/// nothing when n is 0, in one asm block so that the compiler adds nothing to
/// the window.
#[inline(never)]
pub fn native_chain(n: u64) -> u64 {
    let (lo0, hi0, lo1, hi1): (u32, u32, u32, u32);
    // SAFETY: register-only arithmetic and timestamp instructions.
    unsafe {
        asm!(
            stamp_open!(),
            "mov {lo0:e}, eax", "mov {hi0:e}, edx",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "sub {n}, 8",
            "jnz 2b",
            "3:",
            stamp_close!(),
            n = inout(reg) n => _,
            lo0 = out(reg) lo0, hi0 = out(reg) hi0,
            out("eax") lo1, out("edx") hi1, out("ecx") _,
            options(nomem, nostack),
        );
    }
    tsc::join(lo1, hi1).saturating_sub(tsc::join(lo0, hi0))
}

/// The user pair's cost as xperf decides it natively: `rounds` rounds of
/// its null pair and its sweep (`null_samples` each), then the decision
/// against the TSC `quantum`.
pub fn native_decision(rounds: u32, null_samples: usize, quantum: Option<f64>) -> StampSweep {
    let (mut null, mut phases) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        null.extend(xperf::measure::user_pair(1000, null_samples));
        phases.extend(xperf::sweep::round(round, 1000, null_samples));
    }
    let fit = SweepFit::new(phases, quantum).expect("the native sweep measures");
    sweep::decide(
        xvmm_results::Stats::from_samples(&null).median,
        fit,
        quantum,
    )
}

/// Native phases (xperf's chains), `samples` each.
pub fn native_phases(phases: &[(u64, u64)], samples: usize) -> Vec<SweepPhase> {
    phases
        .iter()
        .map(|&(n, k)| {
            xperf::sweep::phase(n, k, 1000, samples)
                .unwrap_or_else(|| panic!("native phase {n} x {k}: no valid sample"))
        })
        .collect()
}

/// What one dependent `imul` costs, measured independently of any sweep:
/// the same loop (8 `imul` per `sub; jnz` turn) run for [`CHAIN_COST_LENGTH`]
/// and twice as many imul, interleaved; the difference of their medians over
/// the length leaves the stamps out. Chains of 16 us, so that few samples
/// hold an interrupt (at 2^18 imul a third did, and the medians came out
/// 1-2 % high).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainCost {
    /// Ticks per imul: `(m(2L) - m(L)) / L`.
    pub ticks_per_imul: f64,
    /// Its standard error: each median's (1.2533 x 1.4826 x MAD /
    /// sqrt(samples)), combined, over L.
    pub standard_error: f64,
}

/// The independent chain's shorter length: 2^14 imul.
pub const CHAIN_COST_LENGTH: u64 = 1 << 14;

fn median_f(v: &[f64]) -> f64 {
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

impl ChainCost {
    /// From timings (ticks) of [`CHAIN_COST_LENGTH`] imul (`short`) and of
    /// twice that (`long`).
    pub fn from_samples(short: &[u64], long: &[u64]) -> ChainCost {
        let stats = |t: &[u64]| {
            let v: Vec<f64> = t.iter().map(|&x| x as f64).collect();
            let se = 1.2533 * 1.4826 * sweep::mad(&v) / (v.len().max(1) as f64).sqrt();
            (median_f(&v), se)
        };
        let ((m1, e1), (m2, e2)) = (stats(short), stats(long));
        let l = CHAIN_COST_LENGTH as f64;
        ChainCost {
            ticks_per_imul: (m2 - m1) / l,
            standard_error: e1.hypot(e2) / l,
        }
    }

    /// Natively, `samples` chains of each length, interleaved.
    pub fn native(samples: usize) -> ChainCost {
        let (mut short, mut long) = (Vec::new(), Vec::new());
        for _ in 0..samples.max(1) {
            short.push(native_chain(CHAIN_COST_LENGTH));
            long.push(native_chain(2 * CHAIN_COST_LENGTH));
        }
        ChainCost::from_samples(&short, &long)
    }

    /// Both measurements' samples together (taken before and after a sweep).
    pub fn pooled(a: ChainCost, b: ChainCost) -> ChainCost {
        // Their mean, known to half their combined error, widened by the
        // distance between them (the core may have changed speed between).
        let mean = (a.ticks_per_imul + b.ticks_per_imul) / 2.0;
        let se = (a.standard_error.hypot(b.standard_error) / 2.0)
            .max((a.ticks_per_imul - b.ticks_per_imul).abs() / 2.0);
        ChainCost {
            ticks_per_imul: mean,
            standard_error: se,
        }
    }
}

/// What the check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The correction checked (ticks).
    pub correction: u64,
    /// The long sweep's intercept and how far the correction may be from
    /// it by chance (ticks).
    pub intercept: f64,
    pub tolerance: f64,
    /// `(m(L) - c) / (m(L/2) - c)`, L the long phase's longest chain.
    pub ratio: f64,
    /// Worst distance of a chain of [`LINEAR_FROM`] or more from its
    /// phase's line, relative to the corrected figure.
    pub worst_residual: f64,
    /// The sweep's slope (every phase, short and long) and its standard
    /// error, against the chain's independent cost per imul.
    pub slope: f64,
    pub slope_error: f64,
    pub chain: ChainCost,
}

/// Checks `correction` (for the user pair whose run-time decision is
/// `decided`) against the independent `short` sweep, the `long` phase's
/// linearity with it subtracted, and the sweep's slope against `chain`, the
/// chain's cost per imul measured independently: within three standard
/// errors of the difference. `Err` says which part failed.
pub fn check(
    short: &SweepFit,
    long: &SweepPhase,
    correction: u64,
    decided: &StampSweep,
    quantum: Option<f64>,
    chain: ChainCost,
) -> Result<Verdict, String> {
    let c = correction as f64;
    let tolerance = sweep::agreement(&decided.fit, short);
    let at = |len: u64| {
        let i = long.lengths.iter().position(|&l| l == len);
        i.map_or(f64::NAN, |i| long.medians[i] as f64 - c)
    };
    let longest = long.lengths.last().copied().unwrap_or(0);
    let ratio = at(longest) / at(longest / 2).max(1.0);
    let mut every = short.phases.clone();
    every.push(long.clone());
    let slopes: Vec<f64> = every.iter().map(|p| p.slope).collect();
    let verdict = Verdict {
        correction,
        intercept: short.intercept,
        tolerance,
        ratio,
        worst_residual: long.worst_residual(LINEAR_FROM, c),
        slope: sweep::middle_mean(&slopes),
        slope_error: sweep::slope_error(&every, quantum),
        chain,
    };
    sweep::check_correction(correction, decided, short, tolerance)
        .map_err(|e| format!("{e}: {verdict:?}"))?;
    let slope_tolerance = 3.0 * verdict.slope_error.hypot(chain.standard_error);
    let slope_off = (verdict.slope - chain.ticks_per_imul).abs();
    // NaN (no slope or no chain cost) fails too.
    if slope_off.is_nan() || slope_off > slope_tolerance {
        return Err(format!(
            "the sweep's slope {:.4} is not the chain's cost {:.4} ticks per imul within {slope_tolerance:.4}: {verdict:?}",
            verdict.slope, chain.ticks_per_imul
        ));
    }
    if long.slope <= 0.0 || verdict.worst_residual > 0.02 {
        return Err(format!(
            "chains leave their phase's line by more than 2 %: {verdict:?}"
        ));
    }
    if !ratio.is_finite() || (ratio - 2.0).abs() > 0.04 {
        return Err(format!(
            "the longest chain over the one half its length is {ratio:.4}, not 2.00 within 2 %: {verdict:?}"
        ));
    }
    Ok(verdict)
}

/// How far a control must lie from the right correction `v.correction` for
/// the check to be able to refuse it: one TSC quantum, or, where the sweeps
/// resolve less than a quantum, the correction's own distance from the
/// reference intercept plus the tolerance and a tick.
pub fn control_step(v: &Verdict, quantum: Option<f64>) -> f64 {
    let q = quantum.filter(|q| *q > 0.0).unwrap_or(1.0);
    let resolution = (v.correction as f64 - v.intercept).abs() + v.tolerance + 1.0;
    q.max(resolution)
}

/// Corrections the check must refuse, given a verdict on the right one
/// `v`: none, twice it, and one [`control_step`] (a quantum, where the
/// sweeps resolve one) either side of it. Each with what it is.
pub fn wrong_corrections(v: &Verdict, quantum: Option<f64>) -> Vec<(u64, String)> {
    let c = v.correction as f64;
    let step = control_step(v, quantum);
    let at = |x: f64| x.round().max(0.0) as u64;
    vec![
        (0, "no correction".into()),
        (2 * v.correction, "twice the correction".into()),
        (at(c - step), format!("{step:.1} ticks lower")),
        (at(c + step), format!("{step:.1} ticks higher")),
    ]
}

/// Chain costs the slope check must refuse: 5 % either side of the right
/// one, or the check's own resolution where that is wider.
pub fn wrong_chain_costs(v: &Verdict) -> Vec<ChainCost> {
    let off = (0.05 * v.chain.ticks_per_imul).max(
        3.0 * v.slope_error.hypot(v.chain.standard_error)
            + (v.slope - v.chain.ticks_per_imul).abs()
            + 1e-3,
    );
    [-off, off]
        .iter()
        .map(|d| ChainCost {
            ticks_per_imul: v.chain.ticks_per_imul + d,
            ..v.chain
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The synthetic machines' imul: 3 ticks, known to 0.01.
    const CHAIN: ChainCost = ChainCost {
        ticks_per_imul: 3.0,
        standard_error: 0.01,
    };

    /// A synthetic machine: stamps cost `a` with work between (null pair
    /// `null`), each imul 3 ticks, a quantum of 1.
    fn synthetic(a: u64, null: u64) -> (SweepFit, SweepPhase, StampSweep) {
        synthetic_q(a, null, 1.0)
    }

    /// The same on a counter of quantum `q`: every median on a step.
    fn synthetic_q(a: u64, null: u64, q: f64) -> (SweepFit, SweepPhase, StampSweep) {
        let on_step = |t: f64| ((t / q).round() * q).round() as u64;
        let phase = |n: u64, k: u64| {
            let lengths = sweep::lengths(n, k);
            let medians: Vec<u64> = lengths
                .iter()
                .map(|&l| on_step(a as f64 + 3.0 * l as f64))
                .collect();
            SweepPhase::from_medians(&lengths, &medians, 1000).unwrap()
        };
        let short = SweepFit::new(
            INTERCEPT_PHASES.iter().map(|&(n, k)| phase(n, k)).collect(),
            Some(q),
        )
        .unwrap();
        let run = SweepFit::new(
            (0..3)
                .flat_map(sweep::run_phases)
                .map(|(n, k)| phase(n, k))
                .collect(),
            Some(q),
        )
        .unwrap();
        let decided = sweep::decide(null, run, Some(q));
        (short, phase(LONG_PHASE.0, LONG_PHASE.1), decided)
    }

    #[test]
    fn the_right_correction_passes_and_wrong_ones_fail() {
        for (a, null) in [(73, 73), (38, 42)] {
            let (short, long, decided) = synthetic(a, null);
            assert_eq!(decided.correction, a, "{decided:?}");
            let v = check(
                &short,
                &long,
                decided.correction,
                &decided,
                Some(1.0),
                CHAIN,
            )
            .unwrap();
            assert!(
                v.worst_residual < 1e-9 && (v.ratio - 2.0).abs() < 1e-9,
                "{v:?}"
            );
            for (wrong, what) in wrong_corrections(&v, Some(1.0)) {
                assert!(
                    check(&short, &long, wrong, &decided, Some(1.0), CHAIN).is_err(),
                    "{what} ({wrong}) passed"
                );
            }
            // The null pair where it is off: refused.
            if null != a {
                assert!(check(&short, &long, null, &decided, Some(1.0), CHAIN).is_err());
            }
        }
    }

    /// The AMD build machine's shape: a 24.5-tick counter, stamps that add
    /// 61 ticks to an interval with work in it, a null pair whose median sits
    /// on the step above (73). Whatever the run decides, a correction one
    /// quantum either side of it must fail the check.
    #[test]
    fn corrections_one_quantum_off_fail_on_a_coarse_counter() {
        let q = 24.5;
        let (short, long, decided) = synthetic_q(61, 73, q);
        let v = check(&short, &long, decided.correction, &decided, Some(q), CHAIN).unwrap();
        let c = decided.correction as f64;
        let controls = wrong_corrections(&v, Some(q));
        for x in [c - q, c + q] {
            let x = x.round() as u64;
            assert!(
                controls.iter().any(|(w, _)| w.abs_diff(x) <= 1),
                "no control one quantum off {c} ({x}): {controls:?}"
            );
            assert!(
                check(&short, &long, x, &decided, Some(q), CHAIN).is_err(),
                "{x}, one quantum off {c}, passed: {decided:?}"
            );
        }
    }

    /// The slope is held against the chain's own cost: a cost 5 % either
    /// side fails, and so does a chain cost the sweep's slope is far from.
    #[test]
    fn a_slope_off_the_chains_cost_fails() {
        let (short, long, decided) = synthetic(73, 73);
        let v = check(&short, &long, 73, &decided, Some(1.0), CHAIN).unwrap();
        assert!((v.slope - 3.0).abs() < 1e-9, "{v:?}");
        for wrong in wrong_chain_costs(&v) {
            let e = check(&short, &long, 73, &decided, Some(1.0), wrong).unwrap_err();
            assert!(e.contains("chain's cost"), "{e}");
        }
        let wrong = ChainCost {
            ticks_per_imul: 2.5,
            standard_error: 0.01,
        };
        assert!(check(&short, &long, 73, &decided, Some(1.0), wrong).is_err());
        // 60 ticks of stamps on both lengths: left out.
        let (l1, l2) = (3 * CHAIN_COST_LENGTH + 60, 6 * CHAIN_COST_LENGTH + 60);
        let c = ChainCost::from_samples(&[l1, l1, l1 + 500], &[l2, l2 + 9, l2]);
        assert!((c.ticks_per_imul - 3.0).abs() < 1e-12, "{c:?}");
        let p = ChainCost::pooled(
            c,
            ChainCost {
                ticks_per_imul: 3.2,
                ..c
            },
        );
        assert!((p.ticks_per_imul - 3.1).abs() < 1e-9 && p.standard_error >= 0.1);
    }

    #[test]
    fn a_bent_line_fails() {
        let (short, mut long, decided) = synthetic(73, 73);
        // The longest chains 5 % slower than the line through the others.
        let k = long.medians.len();
        long.medians[k - 1] += long.medians[k - 1] / 20;
        let (a, b) = sweep::line(
            &long
                .lengths
                .iter()
                .zip(&long.medians)
                .map(|(&n, &m)| (n as f64, m as f64))
                .collect::<Vec<_>>(),
        );
        (long.intercept, long.slope) = (a, b);
        let e = check(&short, &long, 73, &decided, Some(1.0), CHAIN).unwrap_err();
        assert!(e.contains("2 %"), "{e}");
    }
}
