//! Linearity of the stamps, and whether the user pair's cost that runs
//! subtract is right: dependent chains of N `imul` timed with the same
//! stamps as the crossings, in phases of eight lengths taken in turn (one
//! VM phase in the microguest, one pass natively), each phase with its own
//! line (`xvmm_results::sweep`).
//!
//! The check takes the correction a run would apply (the null pair, or the
//! intercept of the run's short sweep where the two differ by more than one
//! TSC quantum), from samples of its own, and holds it against a longer,
//! independent sweep: the correction must be one the method allows given
//! that sweep ([`xvmm_results::sweep::check_correction`], within the two
//! sweeps' combined uncertainty); the long chains must lie within 2 % of
//! their phase's line; 4096 imul must cost twice 2048 within 2 % once the
//! correction is subtracted. Corrections moved off the right one must fail
//! the same check: that is the negative control.

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
}

/// Checks `correction` (for the user pair whose run-time decision is
/// `decided`) against the independent `short` sweep, and the `long` phase's
/// linearity with it subtracted. `Err` says which part failed.
pub fn check(
    short: &SweepFit,
    long: &SweepPhase,
    correction: u64,
    decided: &StampSweep,
    quantum: Option<f64>,
) -> Result<Verdict, String> {
    let c = correction as f64;
    let tolerance = sweep::agreement(&decided.fit, short);
    let at = |len: u64| {
        let i = long.lengths.iter().position(|&l| l == len);
        i.map_or(f64::NAN, |i| long.medians[i] as f64 - c)
    };
    let longest = long.lengths.last().copied().unwrap_or(0);
    let ratio = at(longest) / at(longest / 2).max(1.0);
    let verdict = Verdict {
        correction,
        intercept: short.intercept,
        tolerance,
        ratio,
        worst_residual: long.worst_residual(LINEAR_FROM, c),
    };
    sweep::check_correction(correction, decided.null_median, short, tolerance, quantum)
        .map_err(|e| format!("{e}: {verdict:?}"))?;
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

/// Corrections the check must refuse, given a verdict on the right one
/// `v`: none, twice it, one quantum further from the sweep's intercept (or
/// the tolerance and a tick, where the sweeps resolve less than a quantum),
/// and past the intercept by twice the tolerance and a quantum. Each with
/// what it is.
pub fn wrong_corrections(v: &Verdict, quantum: Option<f64>) -> Vec<(u64, String)> {
    let q = quantum.filter(|q| *q > 0.0).unwrap_or(1.0);
    let c = v.correction as f64;
    let away = if c >= v.intercept { 1.0 } else { -1.0 };
    let step = q.max(v.tolerance + 1.0);
    let past = 2.0 * v.tolerance + q + 2.0;
    let at = |x: f64| x.round().max(0.0) as u64;
    vec![
        (0, "no correction".into()),
        (2 * v.correction, "twice the correction".into()),
        (
            at(c + away * step),
            format!("{step:.1} ticks further from the intercept"),
        ),
        (
            at(c - away * past),
            format!("{past:.1} ticks toward and past the intercept"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic machine: stamps cost `a` with work between (null pair
    /// `null`), each imul 3 ticks, a quantum of 1.
    fn synthetic(a: u64, null: u64) -> (SweepFit, SweepPhase, StampSweep) {
        let phase = |n: u64, k: u64| {
            let lengths = sweep::lengths(n, k);
            let medians: Vec<u64> = lengths.iter().map(|&l| a + 3 * l).collect();
            SweepPhase::from_medians(&lengths, &medians, 1000).unwrap()
        };
        let short = SweepFit::new(
            INTERCEPT_PHASES.iter().map(|&(n, k)| phase(n, k)).collect(),
            Some(1.0),
        )
        .unwrap();
        let run = SweepFit::new(vec![phase(16, 8), phase(64, 8)], Some(1.0)).unwrap();
        let decided = sweep::decide(null, run, Some(1.0));
        (short, phase(LONG_PHASE.0, LONG_PHASE.1), decided)
    }

    #[test]
    fn the_right_correction_passes_and_wrong_ones_fail() {
        for (a, null) in [(73, 73), (38, 42)] {
            let (short, long, decided) = synthetic(a, null);
            assert_eq!(decided.correction, a, "{decided:?}");
            let v = check(&short, &long, decided.correction, &decided, Some(1.0)).unwrap();
            assert!(
                v.worst_residual < 1e-9 && (v.ratio - 2.0).abs() < 1e-9,
                "{v:?}"
            );
            for (wrong, what) in wrong_corrections(&v, Some(1.0)) {
                assert!(
                    check(&short, &long, wrong, &decided, Some(1.0)).is_err(),
                    "{what} ({wrong}) passed"
                );
            }
            // The null pair where it is off: refused.
            if null != a {
                assert!(check(&short, &long, null, &decided, Some(1.0)).is_err());
            }
        }
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
        let e = check(&short, &long, 73, &decided, Some(1.0)).unwrap_err();
        assert!(e.contains("2 %"), "{e}");
    }
}
