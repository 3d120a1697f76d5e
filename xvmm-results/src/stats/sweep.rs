//! Whether the user stamp pair with nothing between (the null pair, `A`)
//! costs what the stamps add to an interval that holds work, measured on
//! every run by a short linearity sweep, and which of the two the
//! corrections subtract.
//!
//! A dependent chain of `n` `imul` between the user stamps takes `a + b n`
//! ticks, `a` being what the stamps add to an interval with work in it. The
//! null pair measures the stamps with nothing between; where the CPU overlaps
//! part of a stamp with the work, or cannot with nothing to overlap, `a` and
//! the null pair differ (the bias). Each sweep phase times K chain lengths
//! `n, 2n, ..., K n` interleaved sample by sample (one VM phase in the
//! microguest, one pass natively) and fits its own line through their
//! medians: a change of the core clock between phases (turbo, a busy
//! neighbour; the TSC does not follow it) then changes only that phase's
//! slope, not its intercept. K = 2 is nanoBench's n / 2n cancellation
//! (`a = 2 m(n) - m(2n)`). The sweep's intercept is the middle half's mean
//! of the phases' intercepts: robust to one disturbed phase, and finer than
//! a median where every median sits on the TSC's steps (the phases' lines
//! cross those steps at different points, so their errors average out).
//!
//! A single least-squares line through chains of 8 to 4096 across phases is
//! not that: on the Intel CI machine one phase (512 and 1024) ran 5 % faster
//! than the others and the line's intercept came out 16 ticks under the null
//! pair (26 against 42), while each phase's own n / 2n intercept was 36-42.
//!
//! The corrections keep the null pair unless the two differ by more than
//! two standard errors of the sweep's intercept (at least a tick): the null
//! pair's median sits on one of the TSC's steps and may be off the stamps'
//! true cost by up to a step, while the intercept, from phases that cross
//! the steps at different points, is known to its standard error. Beyond
//! that the intercept replaces `A` everywhere `A` is subtracted
//! (crossings' round trips, u2k + k2u, batches). A threshold of a whole
//! step (as before) let a null pair half a step off the line stand, and a
//! correction one step the other way could then not be told from it.

use serde::{Deserialize, Serialize};

/// What a sweep times between the user stamps.
pub const WORK: &str = "a dependent chain of N `imul rax, rax` (8 per `sub rcx, 8; jnz` loop turn)";

/// The sweep a run takes in round `round` (from 0): `(n, k)` is one phase of
/// the chain lengths `n, 2n, ..., k n`. Short chains, where the stamps are
/// a large share of the interval and the run stays fast (16 to 1088 imul,
/// about 100 to 2600 ticks). `n` moves from round to round: where the TSC
/// steps (24.5 ticks on the AMD build machine), a phase's medians sit on
/// the steps at points fixed by `n` and the slope, so the same phase
/// repeated would repeat its rounding error; other lengths round
/// differently and the rounds' errors average out.
pub fn run_phases(round: u32) -> [(u64, u64); 2] {
    let r = u64::from(round % 4);
    [(16 + 8 * r, 8), (64 + 24 * r, 8)]
}

/// The chain lengths of a phase.
pub fn lengths(n: u64, k: u64) -> Vec<u64> {
    (1..=k.max(1)).map(|j| j * n).collect()
}

/// A least-squares line `y = intercept + slope x` (points with a single x:
/// slope 0 through their mean).
pub fn line(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len().max(1) as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - slope * mx, slope)
}

/// One phase: chain lengths timed interleaved, each length's median, and
/// the phase's own line through them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SweepPhase {
    pub lengths: Vec<u64>,
    pub medians: Vec<u64>,
    /// Valid samples per length, all lengths together.
    pub samples: u64,
    pub intercept: f64,
    pub slope: f64,
}

impl SweepPhase {
    /// From each length's medians; `None` without two distinct lengths.
    pub fn from_medians(lengths: &[u64], medians: &[u64], samples: u64) -> Option<SweepPhase> {
        let points: Vec<(f64, f64)> = lengths
            .iter()
            .zip(medians)
            .map(|(&n, &m)| (n as f64, m as f64))
            .collect();
        let distinct = lengths.iter().any(|&n| Some(&n) != lengths.first());
        if points.len() < 2 || !distinct {
            return None;
        }
        let (intercept, slope) = line(&points);
        Some(SweepPhase {
            lengths: lengths.to_vec(),
            medians: medians.to_vec(),
            samples,
            intercept,
            slope,
        })
    }

    /// From interleaved samples: sample `i` timed `lengths[i % K]`; 0 marks
    /// an invalid sample. `None` when a length has no valid sample.
    pub fn from_interleaved(lengths: &[u64], intervals: &[u64]) -> Option<SweepPhase> {
        let k = lengths.len().max(1);
        let mut medians = Vec::with_capacity(k);
        let mut samples = 0u64;
        for j in 0..k {
            let valid: Vec<u64> = intervals
                .iter()
                .skip(j)
                .step_by(k)
                .copied()
                .filter(|&t| t > 0)
                .collect();
            if valid.is_empty() {
                return None;
            }
            samples += valid.len() as u64;
            medians.push(crate::Stats::from_samples(&valid).median);
        }
        SweepPhase::from_medians(lengths, &medians, samples)
    }

    /// The worst distance of a point of at least `from` imul from the
    /// phase's line, relative to the point's own value less `correction`.
    pub fn worst_residual(&self, from: u64, correction: f64) -> f64 {
        self.lengths
            .iter()
            .zip(&self.medians)
            .filter(|(&n, _)| n >= from)
            .map(|(&n, &m)| {
                let line = self.intercept + self.slope * n as f64;
                (line - m as f64).abs() / (m as f64 - correction).abs().max(1.0)
            })
            .fold(0.0, f64::max)
    }
}

fn median_of(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The middle half of `sorted` (at least its middle value): a quarter,
/// rounded up, off each end. [`middle_mean`]'s rule, and the one
/// `linearity::ChainCost::across_phases` trims the phases' chains by.
pub fn middle_half<T>(sorted: &[T]) -> &[T] {
    let drop = sorted
        .len()
        .div_ceil(4)
        .min(sorted.len().saturating_sub(1) / 2);
    &sorted[drop..sorted.len() - drop]
}

/// The mean of the middle half ([`middle_half`]) of the finite values.
pub fn middle_mean(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let kept = middle_half(&v);
    if kept.is_empty() {
        return f64::NAN;
    }
    kept.iter().sum::<f64>() / kept.len() as f64
}

/// Median absolute deviation from the median.
pub fn mad(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = median_of(&v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    dev.sort_by(f64::total_cmp);
    median_of(&dev)
}

/// A sweep's phases and what they say together.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SweepFit {
    pub phases: Vec<SweepPhase>,
    /// Middle-half mean of the phases' intercepts (ticks).
    pub intercept: f64,
    /// Middle-half mean of their slopes (ticks per imul).
    pub slope: f64,
    /// The fit's residual: median absolute deviation of the phases'
    /// intercepts from their median (ticks).
    pub scatter: f64,
    /// Standard error of the intercept (ticks): from the scatter (1.4826 x
    /// scatter / sqrt(phases)), or from the TSC's steps where that is
    /// larger (see [`step_error`]).
    pub standard_error: f64,
}

/// The intercept's standard error that the counter's steps alone cause:
/// each median is off its true value by up to half a step (a spread of
/// `quantum / sqrt(12)`), which a phase's line carries into its intercept
/// by the usual least-squares factor; phases of the same lengths round the
/// same way, so only distinct ones average.
pub fn step_error(phases: &[SweepPhase], quantum: Option<f64>) -> f64 {
    let q = quantum.filter(|q| q.is_finite() && *q > 0.0).unwrap_or(1.0);
    let mut distinct: Vec<&Vec<u64>> = phases.iter().map(|p| &p.lengths).collect();
    distinct.sort();
    distinct.dedup();
    if distinct.is_empty() {
        return f64::NAN;
    }
    let factor = |lengths: &Vec<u64>| {
        let k = lengths.len() as f64;
        let mean = lengths.iter().sum::<u64>() as f64 / k;
        let sxx: f64 = lengths.iter().map(|&n| (n as f64 - mean).powi(2)).sum();
        (1.0 / k + mean * mean / sxx.max(f64::MIN_POSITIVE)).sqrt()
    };
    let mean_factor = distinct.iter().map(|l| factor(l)).sum::<f64>() / distinct.len() as f64;
    q / 12f64.sqrt() * mean_factor / (distinct.len() as f64).sqrt()
}

impl SweepFit {
    /// `None` without a phase. `quantum`: the TSC's step, for the standard
    /// error.
    pub fn new(phases: Vec<SweepPhase>, quantum: Option<f64>) -> Option<SweepFit> {
        if phases.is_empty() {
            return None;
        }
        let intercepts: Vec<f64> = phases.iter().map(|p| p.intercept).collect();
        let slopes: Vec<f64> = phases.iter().map(|p| p.slope).collect();
        let scatter = mad(&intercepts);
        let from_scatter = 1.4826 * scatter / (phases.len() as f64).sqrt();
        Some(SweepFit {
            intercept: middle_mean(&intercepts),
            slope: middle_mean(&slopes),
            scatter,
            standard_error: from_scatter.max(step_error(&phases, quantum)),
            phases,
        })
    }
}

/// The user pair against its sweep, and the stamp cost the corrections
/// subtract for it (`stamp_costs.user_sweep` in a report).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StampSweep {
    /// What was timed between the stamps ([`WORK`]).
    pub work: String,
    pub fit: SweepFit,
    /// The null pair's median, all rounds (ticks).
    pub null_median: u64,
    /// `null_median - fit.intercept` (ticks).
    pub bias: f64,
    /// The TSC quantum the bias was judged against.
    pub quantum: Option<f64>,
    /// A bias beyond this many ticks switches to the intercept.
    pub threshold: f64,
    /// Whether the corrections subtract the intercept instead of the null pair.
    pub intercept_used: bool,
    /// What the corrections subtract for the user pair (ticks).
    pub correction: u64,
    /// Why, in words.
    pub reason: String,
}

/// The switch point: two standard errors of the sweep's intercept, at
/// least a tick. A null pair further than that from the line is not the
/// line's value; the intercept, averaged over phases whose medians sit on
/// the TSC's steps at different points, is known to its standard error,
/// while the null pair's median sits on a step and may be off by up to one.
pub fn threshold(standard_error: f64) -> f64 {
    if standard_error.is_finite() {
        (2.0 * standard_error).max(1.0)
    } else {
        f64::INFINITY
    }
}

/// Decides between the null pair's median and the sweep's intercept (see
/// the module text).
pub fn decide(null_median: u64, fit: SweepFit, quantum: Option<f64>) -> StampSweep {
    let bias = null_median as f64 - fit.intercept;
    let limit = threshold(fit.standard_error);
    let usable = fit.intercept.is_finite() && fit.intercept >= 0.0 && fit.slope > 0.0;
    let used = usable && bias.abs() > limit;
    let correction = if used {
        crate::num::u64_saturating(fit.intercept.round())
    } else {
        null_median
    };
    let reason = if !usable {
        format!(
            "the sweep is not usable (intercept {:.1}, slope {:.3}): the null pair is kept",
            fit.intercept, fit.slope
        )
    } else if used {
        format!(
            "the null pair ({null_median}) is {bias:+.1} ticks off the sweep's intercept ({:.1}), \
             more than {limit:.1}: the corrections use the intercept",
            fit.intercept
        )
    } else {
        format!(
            "the null pair ({null_median}) is within {limit:.1} ticks of the sweep's intercept \
             ({:.1}, bias {bias:+.1}): the corrections use the null pair",
            fit.intercept
        )
    };
    StampSweep {
        work: WORK.into(),
        fit,
        null_median,
        bias,
        quantum,
        threshold: limit,
        intercept_used: used,
        correction,
        reason,
    }
}

impl StampSweep {
    /// Why the recorded decision does not follow from the recorded figures
    /// (a report edited, or written by a producer that decided otherwise);
    /// `None` when it does.
    pub fn inconsistency(&self) -> Option<String> {
        let again = decide(self.null_median, self.fit.clone(), self.quantum);
        let recomputed = SweepFit::new(self.fit.phases.clone(), self.quantum);
        let fit_ok = recomputed.is_some_and(|f| {
            (f.intercept - self.fit.intercept).abs() < 1e-6
                && (f.scatter - self.fit.scatter).abs() < 1e-6
        });
        if !fit_ok {
            return Some("the sweep's intercept is not the one its phases give".into());
        }
        (again.correction != self.correction || again.intercept_used != self.intercept_used)
            .then(|| {
                format!(
                    "the sweep recorded correction {} (intercept used: {}), its figures give {} ({})",
                    self.correction, self.intercept_used, again.correction, again.intercept_used
                )
            })
    }
}

/// How far two independent sweeps' intercepts may differ by chance: three
/// standard errors of the difference, at least one tick.
pub fn agreement(a: &SweepFit, b: &SweepFit) -> f64 {
    (3.0 * (a.standard_error.powi(2) + b.standard_error.powi(2)).sqrt()).max(1.0)
}

/// Whether `correction` is one the method allows for the user pair, given
/// the run's decision `decided` and an independent sweep `reference` known
/// to within `tolerance` ticks: the null pair where the run kept it and
/// `reference` puts it within the run's threshold (allowing for the
/// tolerance), else a value within the tolerance (and half a tick of
/// rounding) of `reference`'s intercept.
pub fn check_correction(
    correction: u64,
    decided: &StampSweep,
    reference: &SweepFit,
    tolerance: f64,
) -> Result<(), String> {
    let null = decided.null_median;
    let bias = null as f64 - reference.intercept;
    let off = correction as f64 - reference.intercept;
    let keep_ok = !decided.intercept_used && bias.abs() <= decided.threshold + tolerance;
    if correction == null && keep_ok {
        return Ok(());
    }
    if off.abs() <= tolerance + 0.5 {
        return Ok(());
    }
    Err(format!(
        "correction {correction} against the sweep's intercept {:.1} (+-{tolerance:.1}): {off:+.1} ticks; \
         null pair {null} ({bias:+.1}, run's threshold {:.1}): {}",
        reference.intercept,
        decided.threshold,
        if correction == null {
            "the null pair is off the sweep by more than the threshold"
        } else {
            "not the intercept"
        }
    ))
}

/// The standard error of a sweep's slope (ticks per imul): from the
/// phases' scatter (1.4826 x MAD of their slopes / sqrt(phases)), or from
/// the TSC's steps where that is larger (half a step's spread over each
/// phase's lengths, averaged over distinct phases, as [`step_error`]).
pub fn slope_error(phases: &[SweepPhase], quantum: Option<f64>) -> f64 {
    if phases.is_empty() {
        return f64::NAN;
    }
    let q = quantum.filter(|q| q.is_finite() && *q > 0.0).unwrap_or(1.0);
    let slopes: Vec<f64> = phases.iter().map(|p| p.slope).collect();
    let from_scatter = 1.4826 * mad(&slopes) / (phases.len() as f64).sqrt();
    let mut distinct: Vec<&Vec<u64>> = phases.iter().map(|p| &p.lengths).collect();
    distinct.sort();
    distinct.dedup();
    let factor = |lengths: &Vec<u64>| {
        let k = lengths.len() as f64;
        let mean = lengths.iter().sum::<u64>() as f64 / k;
        let sxx: f64 = lengths.iter().map(|&n| (n as f64 - mean).powi(2)).sum();
        1.0 / sxx.max(f64::MIN_POSITIVE).sqrt()
    };
    let mean_factor = distinct.iter().map(|l| factor(l)).sum::<f64>() / distinct.len() as f64;
    let from_steps = q / 12f64.sqrt() * mean_factor / (distinct.len() as f64).sqrt();
    from_scatter.max(from_steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points at one x have no slope: a flat line through their mean, not
    /// a division of zero by zero.
    #[test]
    fn points_at_one_x_give_a_flat_line_through_their_mean() {
        assert_eq!(line(&[(3.0, 5.0), (3.0, 7.0)]), (6.0, 0.0));
    }

    /// The residual is relative to the point less the correction: medians
    /// 100, 200, 330 at 8, 16, 24 imuls fit y = -20 + 14.375 x, 5 ticks
    /// from the first point, which less a correction of 50 is 50: 10 %.
    #[test]
    fn the_worst_residual_is_relative_to_the_point_less_the_correction() {
        let phase = SweepPhase::from_medians(&[8, 16, 24], &[100, 200, 330], 10).unwrap();
        assert!((phase.intercept + 20.0).abs() < 1e-9, "{phase:?}");
        assert!((phase.worst_residual(0, 50.0) - 0.1).abs() < 1e-12);
        // From 16 imuls on: 10 ticks from 200 less 50.
        assert!((phase.worst_residual(16, 50.0) - 10.0 / 150.0).abs() < 1e-12);
    }

    fn collinear(lengths: &[u64], intercept: u64, slope: u64) -> SweepPhase {
        let medians: Vec<u64> = lengths.iter().map(|n| intercept + slope * n).collect();
        SweepPhase::from_medians(lengths, &medians, 10).unwrap()
    }

    fn fit(intercept: f64, standard_error: f64) -> SweepFit {
        SweepFit {
            phases: Vec::new(),
            intercept,
            slope: 2.0,
            scatter: 0.0,
            standard_error,
        }
    }

    /// A quantum that is not a positive finite number counts as one tick,
    /// for the intercept's and the slope's step errors alike.
    #[test]
    fn a_quantum_that_is_no_step_counts_as_one_tick() {
        let phases = [collinear(&[8, 16, 24], 40, 3)];
        for error in [step_error, slope_error] {
            let one = error(&phases, None);
            assert!(one > 0.0);
            for q in [0.0, -2.0, f64::NAN, f64::INFINITY] {
                assert_eq!(error(&phases, Some(q)), one, "quantum {q}");
            }
            assert_eq!(error(&phases, Some(26.0)), 26.0 * one);
        }
    }

    /// The slope's error from the phases' scatter (1.4826 MAD / sqrt(3)
    /// of slopes 2, 2.5 and 3.5 at long chains), and from the steps where
    /// the phases agree (two distinct length sets of one slope).
    #[test]
    fn the_slope_error_comes_from_the_scatter_or_the_steps() {
        let lengths = [100, 200, 300];
        let agreeing: Vec<SweepPhase> = [(100, 2), (100, 2), (100, 2)]
            .iter()
            .map(|&(a, s)| collinear(&lengths, a, s))
            .collect();
        let scattered = [
            SweepPhase::from_medians(&lengths, &[300, 500, 700], 10).unwrap(),
            SweepPhase::from_medians(&lengths, &[350, 600, 850], 10).unwrap(),
            SweepPhase::from_medians(&lengths, &[450, 800, 1150], 10).unwrap(),
        ];
        let want = 1.4826 * 0.5 / 3f64.sqrt();
        assert!((slope_error(&scattered, Some(1.0)) - want).abs() < 1e-12);
        assert!(slope_error(&agreeing, Some(1.0)) < 0.01);
        let two = [
            collinear(&[8, 16, 24], 40, 3),
            collinear(&[16, 32, 48], 40, 3),
        ];
        let factor = (1.0 / 128f64.sqrt() + 1.0 / 512f64.sqrt()) / 2.0;
        let want = 26.0 / 12f64.sqrt() * factor / 2f64.sqrt();
        assert!((slope_error(&two, Some(26.0)) - want).abs() < 1e-12);
    }

    /// The intercept is used only when the null pair is off it by more
    /// than the threshold: exactly the threshold keeps the null pair.
    #[test]
    fn a_bias_of_exactly_the_threshold_keeps_the_null_pair() {
        // Standard error 5: threshold 10; null pair 110 against 100.
        let kept = decide(110, fit(100.0, 5.0), None);
        assert_eq!((kept.intercept_used, kept.correction), (false, 110));
        let used = decide(111, fit(100.0, 5.0), None);
        assert_eq!((used.intercept_used, used.correction), (true, 100));
    }

    /// Two sweeps agree within three standard errors of the difference:
    /// errors 3 and 4 give 15.
    #[test]
    fn agreement_is_three_standard_errors_of_the_difference() {
        assert_eq!(agreement(&fit(0.0, 3.0), &fit(0.0, 4.0)), 15.0);
        assert_eq!(agreement(&fit(0.0, 0.1), &fit(0.0, 0.1)), 1.0);
    }

    /// A recorded fit whose intercept or scatter is not what its phases
    /// give is inconsistent, each on its own, from a difference of 1e-6.
    #[test]
    fn a_recorded_fit_off_its_phases_is_inconsistent() {
        // One phase through 0: intercept 0.0 and scatter 0.0 exactly.
        let fit = SweepFit::new(vec![collinear(&[8, 16, 24], 0, 10)], None).unwrap();
        assert_eq!((fit.intercept, fit.scatter), (0.0, 0.0));
        let sweep = decide(0, fit, None);
        assert_eq!(sweep.inconsistency(), None);
        for (intercept, scatter) in [(-1e-6, 0.0), (0.0, -1e-6)] {
            let mut off = sweep.clone();
            (off.fit.intercept, off.fit.scatter) = (intercept, scatter);
            assert!(off.inconsistency().is_some(), "{intercept} {scatter}");
        }
    }

    /// The user pair's correction check, on the null pair the run kept:
    /// 50 against a reference intercept of 45 is 5 off, within the run's
    /// threshold 4 plus the reference's tolerance 2 (not within 4 - 2); a
    /// run that used the intercept may not fall back on the null pair.
    #[test]
    fn the_kept_null_pair_passes_within_threshold_plus_tolerance() {
        let mut decided = decide(50, fit(45.0, 2.0), None);
        (decided.intercept_used, decided.threshold) = (false, 4.0);
        let reference = fit(45.0, 1.0);
        assert_eq!(check_correction(50, &decided, &reference, 2.0), Ok(()));
        decided.intercept_used = true;
        assert!(check_correction(50, &decided, &reference, 2.0).is_err());
        assert_eq!(check_correction(46, &decided, &reference, 2.0), Ok(()));
    }

    /// An even count's median is the mean of the middle two (so is the
    /// MAD's, of the deviations 0.5, 0.5, 1.5, 7.5 from 2.5).
    #[test]
    fn an_even_count_has_the_middle_twos_mean_for_median() {
        assert_eq!(median_of(&[1.0, 2.0, 3.0, 10.0]), 2.5);
        assert_eq!(median_of(&[1.0, 2.0, 3.0]), 2.0);
        assert!(median_of(&[]).is_nan());
        assert_eq!(mad(&[10.0, 3.0, 1.0, 2.0]), 1.0);
    }

    /// Medians of the microguest's sweep on the Intel CI machine (family 6
    /// model 0xa7, 2.6 GHz TSC, quantum 2 ticks, PVM; ENVIRONMENT.md), as it
    /// took them: five phases of n and 2n interleaved.
    const INTEL_PHASES: [(u64, u64, u64); 5] = [
        (8, 56, 72),
        (32, 106, 170),
        (128, 302, 566),
        (512, 1040, 2044),
        (2048, 4252, 8468),
    ];
    const INTEL_NULL: u64 = 42;

    fn n_2n(phases: &[(u64, u64, u64)], quantum: f64) -> SweepFit {
        SweepFit::new(
            phases
                .iter()
                .map(|&(n, a, b)| SweepPhase::from_medians(&[n, 2 * n], &[a, b], 4000).unwrap())
                .collect(),
            Some(quantum),
        )
        .unwrap()
    }

    #[test]
    fn the_intel_sweep_chooses_the_intercept() {
        let fit = n_2n(&INTEL_PHASES, 2.0);
        let intercepts: Vec<f64> = fit.phases.iter().map(|p| p.intercept).collect();
        assert_eq!(intercepts, [40.0, 42.0, 38.0, 36.0, 36.0], "2 m(n) - m(2n)");
        assert!((fit.intercept - 38.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.scatter - 2.0).abs() < 1e-9);
        let s = decide(INTEL_NULL, fit, Some(2.0));
        assert!((s.bias - 4.0).abs() < 1e-9, "{s:?}");
        assert!(s.intercept_used && s.correction == 38, "{s:?}");
        assert!(s.reason.contains("use the intercept"), "{}", s.reason);
        assert_eq!(s.inconsistency(), None);
    }

    /// Where CI's "-15.9 ticks" came from: one least-squares line through
    /// all eleven points, dominated by the long chains of the phase that
    /// ran faster.
    #[test]
    fn one_line_through_every_phase_puts_the_intel_intercept_16_ticks_low() {
        let mut points = vec![(0.0, INTEL_NULL as f64)];
        for (n, a, b) in INTEL_PHASES {
            points.push((n as f64, a as f64));
            points.push((2.0 * n as f64, b as f64));
        }
        let (a, _) = line(&points);
        assert!((a - INTEL_NULL as f64 + 15.9).abs() < 0.1, "{a}");
    }

    /// The microguest's sweep on this AMD machine (quantum 24.5) as five
    /// n / 2n phases: their intercepts sit a step apart (50, 74, 72, 50,
    /// 50), the middle half at 50, known to the steps' error (7.1): the null
    /// pair (73) is 23 ticks, three standard errors, off and is not kept; a
    /// null pair within two standard errors is.
    #[test]
    fn an_amd_sweep_keeps_the_null_pair_only_within_two_standard_errors() {
        let phases = [
            (8, 74, 98),
            (32, 147, 220),
            (128, 367, 662),
            (512, 1250, 2450),
            (2048, 4876, 9702),
        ];
        let fit = n_2n(&phases, 24.5);
        assert!((fit.standard_error - 7.07).abs() < 0.01, "{fit:?}");
        let s = decide(73, fit, Some(24.5));
        assert!(s.intercept_used && s.correction == 50, "{s:?}");
        assert!((s.threshold - 14.14).abs() < 0.01, "{s:?}");
        let s = decide(60, s.fit, Some(24.5));
        assert!(!s.intercept_used && s.correction == 60, "{s:?}");
    }

    /// The AMD build machine's figures (quantum 24.5): the run's sweep puts
    /// the line at 61 +- 2, the null pair's median sits on the step at 73,
    /// half a step above: the null pair is not the line's value, and a
    /// correction of 73 would be one a correction a quantum lower (49) could
    /// not be told from.
    #[test]
    fn a_null_pair_half_a_step_off_the_line_is_not_kept() {
        let phases: Vec<SweepPhase> = [(16u64, 8u64, 61.0), (24, 8, 63.0), (40, 8, 59.0)]
            .iter()
            .map(|&(n, k, a)| {
                let lengths = lengths(n, k);
                let medians: Vec<u64> = lengths
                    .iter()
                    .map(|&l| crate::num::u64_saturating((a + 2.3 * l as f64).round()))
                    .collect();
                SweepPhase::from_medians(&lengths, &medians, 1000).unwrap()
            })
            .collect();
        let fit = SweepFit::new(phases, Some(24.5)).unwrap();
        assert!((fit.intercept - 61.0).abs() < 1.0, "{fit:?}");
        let s = decide(73, fit, Some(24.5));
        assert!(s.intercept_used && s.correction == 61, "{s:?}");
    }

    #[test]
    fn a_correction_one_quantum_off_is_caught() {
        let intel = n_2n(&INTEL_PHASES, 2.0);
        let decided = decide(INTEL_NULL, intel.clone(), Some(2.0));
        // The Intel figures: the intercept is right, one quantum either side
        // is not, and neither is the null pair it replaced.
        let tol = 0.9;
        assert!(check_correction(38, &decided, &intel, tol).is_ok());
        for wrong in [36, 40, INTEL_NULL] {
            let e = check_correction(wrong, &decided, &intel, tol).unwrap_err();
            assert!(e.contains("correction"), "{wrong}: {e}");
        }
        // An AMD-like sweep on the null pair: the null pair is right, one
        // step (24 or 25 ticks) either side is not.
        let amd = SweepFit::new(
            vec![SweepPhase::from_medians(&[16, 32, 48, 64], &[110, 147, 184, 222], 1000).unwrap()],
            Some(24.45),
        )
        .unwrap();
        assert!((amd.intercept - 72.5).abs() < 0.1, "{amd:?}");
        let kept = decide(73, amd.clone(), Some(24.45));
        assert!(!kept.intercept_used, "{kept:?}");
        assert!(check_correction(73, &kept, &amd, 6.0).is_ok());
        for wrong in [48, 49, 97, 98, 0, 146] {
            assert!(
                check_correction(wrong, &kept, &amd, 6.0).is_err(),
                "{wrong}"
            );
        }
        // A null pair the run kept, but the reference puts further off than
        // the run's threshold and the tolerance: refused.
        let far = decide(73, amd.clone(), Some(24.45));
        let reference = SweepFit {
            intercept: 40.0,
            ..amd.clone()
        };
        assert!(check_correction(73, &far, &reference, 3.0).is_err());
    }

    #[test]
    fn the_slope_error_comes_from_the_phases_or_the_steps() {
        let p = |n: u64, slope: f64| {
            let l = lengths(n, 8);
            let m: Vec<u64> = l
                .iter()
                .map(|&x| 60 + crate::num::u64_saturating(slope * x as f64))
                .collect();
            SweepPhase::from_medians(&l, &m, 10).unwrap()
        };
        // Identical phases: only the steps (quantum 1: 1/sqrt(12 sxx)).
        let same = vec![p(512, 2.0); 3];
        let sxx: f64 = lengths(512, 8)
            .iter()
            .map(|&x| (x as f64 - 2304.0).powi(2))
            .sum();
        let e = slope_error(&same, Some(1.0));
        assert!((e - 1.0 / (12.0 * sxx).sqrt()).abs() < 1e-12, "{e}");
        // Phases whose slopes scatter: the scatter.
        let spread = vec![p(512, 2.0), p(512, 2.2), p(512, 2.4)];
        assert!(slope_error(&spread, Some(1.0)) > 0.1);
        assert!(slope_error(&[], None).is_nan());
    }

    #[test]
    fn a_sweep_that_is_not_a_line_is_not_used() {
        let flat = SweepFit::new(
            vec![SweepPhase::from_medians(&[16, 32], &[100, 100], 10).unwrap()],
            Some(2.0),
        )
        .unwrap();
        let s = decide(40, flat, Some(2.0));
        assert!(!s.intercept_used && s.correction == 40, "{s:?}");
        assert!(s.reason.contains("not usable"));
        assert!(SweepPhase::from_medians(&[16, 16], &[1, 2], 1).is_none());
        assert!(SweepFit::new(Vec::new(), None).is_none());
    }

    #[test]
    fn interleaved_samples_split_by_length_and_invalid_ones_drop() {
        // Lengths 8, 16, 24 in turn; 0 is an invalid sample.
        let samples = [30, 50, 70, 32, 0, 70, 28, 50, 72];
        let p = SweepPhase::from_interleaved(&[8, 16, 24], &samples).unwrap();
        assert_eq!(p.medians, [30, 50, 70]);
        assert_eq!(p.samples, 8);
        assert!((p.slope - 2.5).abs() < 1e-9 && (p.intercept - 10.0).abs() < 1e-9);
        assert!(SweepPhase::from_interleaved(&[8, 16], &[30, 0, 31, 0]).is_none());
    }

    #[test]
    fn the_steps_bound_the_standard_error_where_phases_repeat() {
        let p =
            |n: u64, a: u64, b: u64| SweepPhase::from_medians(&[n, 2 * n], &[a, b], 10).unwrap();
        // Three identical phases: no scatter, but each median is only known
        // to a step (n / 2n: factor sqrt(1/2 + 9/2) = sqrt(5)).
        let same = SweepFit::new(vec![p(16, 98, 147); 3], Some(24.5)).unwrap();
        assert_eq!(same.scatter, 0.0);
        let expected = 24.5 / 12f64.sqrt() * 5f64.sqrt();
        assert!((same.standard_error - expected).abs() < 1e-9, "{same:?}");
        // Two distinct phases average their rounding.
        let two = SweepFit::new(vec![p(16, 98, 147), p(24, 122, 195)], Some(24.5)).unwrap();
        assert!((two.standard_error - expected / 2f64.sqrt()).abs() < 1e-9);
        assert!(agreement(&same, &two) > 3.0 * expected);
    }

    #[test]
    fn run_phases_move_from_round_to_round() {
        assert_eq!(run_phases(0), [(16, 8), (64, 8)]);
        assert_ne!(run_phases(1), run_phases(0));
        assert_eq!(run_phases(4), run_phases(0));
        assert!(run_phases(3)
            .iter()
            .all(|&(n, k)| n % 8 == 0 && n * k <= 1088));
    }

    #[test]
    fn the_middle_half_resists_one_wild_phase() {
        assert_eq!(middle_mean(&[38.0, 40.0, 39.0, 1000.0]), 39.5);
        assert_eq!(middle_mean(&[5.0]), 5.0);
        assert_eq!(middle_mean(&[1.0, 3.0]), 2.0);
        assert!(middle_mean(&[]).is_nan());
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), 1.0);
    }

    #[test]
    fn a_tampered_decision_is_inconsistent() {
        let mut s = decide(INTEL_NULL, n_2n(&INTEL_PHASES, 2.0), Some(2.0));
        s.correction = INTEL_NULL;
        assert!(s.inconsistency().unwrap().contains("recorded correction"));
        let mut s = decide(INTEL_NULL, n_2n(&INTEL_PHASES, 2.0), Some(2.0));
        s.fit.intercept += 3.0;
        assert!(s.inconsistency().unwrap().contains("intercept"));
    }
}
