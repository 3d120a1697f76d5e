//! A confidence interval of the median that survives the way samples are
//! taken: one after the other, so neighbours share the CPU's state (caches,
//! frequency, a busy neighbour), and an ordinary bootstrap or an
//! order-statistics interval, which assume independent samples, would be
//! too narrow.
//!
//! Method: moving-block bootstrap, percentile interval. The samples, in the
//! order they were taken, are cut into blocks of `ceil(sqrt(n))`
//! neighbours; each of [`RESAMPLES`] resamples strings together `n / block`
//! blocks drawn with replacement from every possible start, and its median
//! is kept; the interval runs from the 2.5th to the 97.5th percentile of
//! those medians. The generator is SplitMix64 with a fixed seed, so the same
//! samples always give the same interval.

use serde::{Deserialize, Serialize};

/// Resamples per interval: enough for a 95 % percentile interval (its ends
/// are the 5th and 195th of 200 sorted medians) at a cost linear in them.
pub const RESAMPLES: usize = 200;
/// The seed every interval starts from.
pub const SEED: u64 = 0x5856_4d4d_2d43_4931;
/// What the report calls the method.
pub const METHOD: &str =
    "moving-block bootstrap (block sqrt(n), 200 resamples, seed fixed), 95 % percentile interval";

/// A 95 % confidence interval of a median, in ticks.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MedianCi {
    pub low: u64,
    pub high: u64,
}

/// SplitMix64: a few lines, a fixed seed and no dependency (reproducibility
/// is all this needs from a generator).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0); the modulo bias is below 2^-40 for any n a
    /// run can have.
    fn below(&mut self, n: usize) -> usize {
        crate::num::usize_from(self.next() % n as u64)
    }
}

/// The nearest-rank median of `values`, reordering them.
fn median_of(values: &mut [u64]) -> u64 {
    let rank = values.len().div_ceil(2).max(1) - 1;
    *values.select_nth_unstable(rank).1
}

/// The 95 % interval of the median of `samples` (in the order taken);
/// `None` for fewer than 2 samples.
pub fn median_ci(samples: &[u64]) -> Option<MedianCi> {
    let n = samples.len();
    if n < 2 {
        return None;
    }
    let block = crate::num::usize_saturating((n as f64).sqrt().ceil());
    let starts = n - block + 1;
    let blocks = n.div_ceil(block);
    let mut rng = SplitMix64(SEED);
    let mut resample = Vec::with_capacity(blocks * block);
    let mut medians = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        resample.clear();
        for _ in 0..blocks {
            let start = rng.below(starts);
            resample.extend_from_slice(&samples[start..start + block]);
        }
        resample.truncate(n);
        medians.push(median_of(&mut resample));
    }
    medians.sort_unstable();
    let at = |p: f64| {
        medians
            [crate::num::usize_saturating((p * RESAMPLES as f64).round()).clamp(1, RESAMPLES) - 1]
    };
    Some(MedianCi {
        low: at(0.025),
        high: at(0.975),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::percentile;

    /// Independent values with a known distribution: a discrete uniform
    /// spread around `center`.
    fn noisy(center: u64, n: usize, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64(seed);
        (0..n)
            .map(|_| center - 50 + rng.below(101) as u64)
            .collect()
    }

    #[test]
    fn the_interval_holds_the_median_and_is_reproducible() {
        let samples = noisy(1000, 5000, 1);
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let median = percentile(&sorted, 50.0);
        let ci = median_ci(&samples).unwrap();
        assert!(ci.low <= median && median <= ci.high, "{ci:?} {median}");
        assert!(
            ci.high - ci.low <= 10,
            "5000 samples pin the median: {ci:?}"
        );
        assert_eq!(median_ci(&samples), Some(ci), "fixed seed");
    }

    #[test]
    fn the_interval_narrows_with_more_samples() {
        let width = |n| {
            let ci = median_ci(&noisy(1000, n, 7)).unwrap();
            ci.high - ci.low
        };
        assert!(
            width(200) > width(20_000),
            "{} {}",
            width(200),
            width(20_000)
        );
    }

    #[test]
    fn covers_the_true_median_about_95_percent_of_the_time() {
        // 200 independent runs of 400 samples whose true median is 1000.
        let covered = (0..200)
            .filter(|&seed| {
                let ci = median_ci(&noisy(1000, 400, 100 + seed)).unwrap();
                ci.low <= 1000 && 1000 <= ci.high
            })
            .count();
        assert!(
            (175..=200).contains(&covered),
            "covered {covered} of 200 runs"
        );
    }

    #[test]
    fn drifting_samples_widen_the_interval() {
        // The same values in the order taken: shuffled, then as a slow drift
        // (the first half low, the second high). Blocks keep the drift, so
        // the interval must be wider than for independent samples.
        let mut values = noisy(1000, 4000, 3);
        let independent = median_ci(&values).unwrap();
        values.sort_unstable();
        let drifting = median_ci(&values).unwrap();
        assert!(
            drifting.high - drifting.low > independent.high - independent.low,
            "{drifting:?} vs {independent:?}"
        );
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(median_ci(&[]), None);
        assert_eq!(median_ci(&[5]), None);
        assert_eq!(median_ci(&[7, 7, 7, 7]), Some(MedianCi { low: 7, high: 7 }));
    }
}
