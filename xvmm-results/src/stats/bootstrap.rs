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

/// The rank of the nearest-rank median among `n` values.
fn median_rank(n: usize) -> usize {
    n.div_ceil(2).max(1) - 1
}

/// Distinct values past which a resample's median is selected in a copy
/// of it rather than counted: the histogram is cleared and scanned once a
/// resample, and past this (its four lanes beyond a core's L2 cache) the
/// copy costs less (300 k values: 600 distinct 35 ms by the histogram, 112
/// ms by selection; 150 k distinct 127 against 106 ms).
pub const HISTOGRAM_MAX_DISTINCT: usize = 1 << 15;

/// How each resample's median is found; both give the same medians.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Method {
    /// Counting the resample's values in a histogram of these, the
    /// samples' sorted distinct values.
    Histogram(Vec<u64>),
    /// Copying the resample and selecting its median.
    Selection,
}

impl Method {
    /// The cheaper method for samples of these distinct values.
    fn for_values(distinct: Vec<u64>) -> Method {
        if distinct.len() <= HISTOGRAM_MAX_DISTINCT {
            Method::Histogram(distinct)
        } else {
            Method::Selection
        }
    }
}

/// The sorted distinct values of `samples`.
fn distinct_values(samples: &[u64]) -> Vec<u64> {
    let mut distinct = samples.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
}

/// Each sample as the index of its value among `distinct`.
fn codes_of(samples: &[u64], distinct: &[u64]) -> Vec<u32> {
    samples
        .iter()
        .map(|v| u32::try_from(distinct.partition_point(|d| d < v)).unwrap_or(u32::MAX))
        .collect()
}

/// Adds `codes` to four histograms of `d` counts each, in turn.
fn count_codes(codes: &[u32], lanes: &mut [u32], d: usize) {
    let mut quads = codes.chunks_exact(4);
    for q in &mut quads {
        lanes[q[0] as usize] += 1;
        lanes[d + q[1] as usize] += 1;
        lanes[2 * d + q[2] as usize] += 1;
        lanes[3 * d + q[3] as usize] += 1;
    }
    for &code in quads.remainder() {
        lanes[code as usize] += 1;
    }
}

/// The index of the value at `rank` (0-based) in a histogram of counts.
fn code_at_rank(counts: &[u32], rank: usize) -> usize {
    let mut below = 0usize;
    for (code, &c) in counts.iter().enumerate() {
        below += c as usize;
        if below > rank {
            return code;
        }
    }
    counts.len().saturating_sub(1)
}

/// The moving-block resamples of `n` samples, each as its blocks (start,
/// length): [`RESAMPLES`] of them, each `n / block` blocks from random
/// starts, the last cut so that it holds n.
fn resample_blocks(n: usize) -> impl Iterator<Item = Vec<(usize, usize)>> {
    let block = crate::num::usize_saturating((n as f64).sqrt().ceil());
    let (starts, blocks) = (n - block + 1, n.div_ceil(block));
    let mut rng = SplitMix64(SEED);
    (0..RESAMPLES).map(move |_| {
        let mut left = n;
        (0..blocks)
            .map(|_| {
                let take = block.min(left);
                left -= take;
                (rng.below(starts), take)
            })
            .collect()
    })
}

/// Each resample's median, by `method`.
fn resample_medians(samples: &[u64], method: Method) -> Vec<u64> {
    let n = samples.len();
    let rank = median_rank(n);
    match method {
        Method::Histogram(distinct) => {
            let codes = codes_of(samples, &distinct);
            let d = distinct.len();
            // Four histograms, summed at the end: neighbours often share a
            // value, and four counters let their increments overlap instead
            // of waiting on one another.
            let mut lanes = vec![0u32; 4 * d];
            let mut counts = vec![0u32; d];
            resample_blocks(n)
                .map(|blocks| {
                    lanes.fill(0);
                    for (start, take) in blocks {
                        count_codes(&codes[start..start + take], &mut lanes, d);
                    }
                    for (code, c) in counts.iter_mut().enumerate() {
                        *c = lanes[code]
                            + lanes[d + code]
                            + lanes[2 * d + code]
                            + lanes[3 * d + code];
                    }
                    distinct[code_at_rank(&counts, rank)]
                })
                .collect()
        }
        Method::Selection => {
            let mut resample = Vec::with_capacity(n);
            resample_blocks(n)
                .map(|blocks| {
                    resample.clear();
                    for (start, take) in blocks {
                        resample.extend_from_slice(&samples[start..start + take]);
                    }
                    *resample.select_nth_unstable(rank).1
                })
                .collect()
        }
    }
}

/// The 95 % interval of the median of `samples` (in the order taken);
/// `None` for fewer than 2 samples.
pub fn median_ci(samples: &[u64]) -> Option<MedianCi> {
    if samples.len() < 2 {
        return None;
    }
    median_ci_by(samples, Method::for_values(distinct_values(samples)))
}

fn median_ci_by(samples: &[u64], method: Method) -> Option<MedianCi> {
    let n = samples.len();
    if n < 2 || u32::try_from(n).is_err() {
        return None;
    }
    let mut medians = resample_medians(samples, method);
    medians.sort_unstable();
    let rank = |p: f64| crate::num::usize_saturating((p * RESAMPLES as f64).round());
    let at = |p: f64| medians[rank(p).clamp(1, RESAMPLES) - 1];
    Some(MedianCi {
        low: at(0.025),
        high: at(0.975),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four codes go to the four lanes in turn, each lane `d` counts long;
    /// what is left over goes to the first.
    #[test]
    fn codes_are_counted_in_four_lanes_in_turn() {
        let mut lanes = vec![0u32; 8];
        count_codes(&[0, 1, 0, 1, 1, 0], &mut lanes, 2);
        assert_eq!(lanes, [2, 1, 0, 1, 1, 0, 0, 1]);
    }

    /// One sample has no interval, by either method.
    #[test]
    fn one_sample_has_no_interval() {
        assert_eq!(median_ci_by(&[5], Method::Selection), None);
        assert_eq!(median_ci_by(&[5], Method::Histogram(vec![5])), None);
        assert_eq!(median_ci(&[5]), None);
    }

    #[test]
    fn the_median_rank_is_the_nearest_ranks() {
        let ranks: Vec<usize> = (0..6).map(median_rank).collect();
        assert_eq!(ranks, [0, 0, 0, 1, 1, 2]);
    }

    /// The histogram up to 2^15 distinct values, selection past them: the
    /// two give the same medians, so only their speed tells them apart.
    #[test]
    fn few_distinct_values_are_counted_many_are_selected() {
        let values = |n: u64| (0..n).collect::<Vec<u64>>();
        assert!(matches!(
            Method::for_values(values(10)),
            Method::Histogram(_)
        ));
        assert!(matches!(
            Method::for_values(values(1 << 15)),
            Method::Histogram(_)
        ));
        assert_eq!(Method::for_values(values((1 << 15) + 1)), Method::Selection);
    }

    /// SplitMix64's published sequence from state 0 (Vigna's reference
    /// implementation; Java's SplittableRandom gives the same).
    #[test]
    fn the_generator_is_splitmix64() {
        let mut g = SplitMix64(0);
        assert_eq!(
            [g.next(), g.next(), g.next()],
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }
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

    /// The method as written first: each resample copied, its median
    /// selected. The histogram must give exactly its intervals.
    fn median_ci_by_selection(samples: &[u64]) -> Option<MedianCi> {
        let n = samples.len();
        if n < 2 {
            return None;
        }
        let block = crate::num::usize_saturating((n as f64).sqrt().ceil());
        let (starts, blocks) = (n - block + 1, n.div_ceil(block));
        let mut rng = SplitMix64(SEED);
        let mut medians: Vec<u64> = (0..RESAMPLES)
            .map(|_| {
                let mut resample = Vec::with_capacity(blocks * block);
                for _ in 0..blocks {
                    let start = rng.below(starts);
                    resample.extend_from_slice(&samples[start..start + block]);
                }
                resample.truncate(n);
                *resample.select_nth_unstable(median_rank(n)).1
            })
            .collect();
        medians.sort_unstable();
        let rank = |p: f64| crate::num::usize_saturating((p * RESAMPLES as f64).round());
        let at = |p: f64| medians[rank(p).clamp(1, RESAMPLES) - 1];
        Some(MedianCi {
            low: at(0.025),
            high: at(0.975),
        })
    }

    #[test]
    fn the_histogram_gives_the_intervals_selection_gives() {
        let mut rng = SplitMix64(11);
        for n in [2, 3, 4, 5, 17, 100, 101, 999, 4096, 20_001] {
            // Few distinct values, many, and a heavy tail.
            let few: Vec<u64> = (0..n).map(|_| 500 + rng.below(4) as u64).collect();
            let many: Vec<u64> = (0..n).map(|_| rng.next() % 1_000_000).collect();
            let tail: Vec<u64> = (0..n)
                .map(|i| {
                    if i % 37 == 0 {
                        90_000 + rng.below(9_000) as u64
                    } else {
                        300 + rng.below(40) as u64
                    }
                })
                .collect();
            for values in [few, many, tail] {
                let first = median_ci_by_selection(&values);
                let histogram = Method::Histogram(distinct_values(&values));
                assert_eq!(median_ci_by(&values, histogram), first, "n {n}");
                assert_eq!(median_ci_by(&values, Method::Selection), first, "n {n}");
                assert_eq!(median_ci(&values), first, "n {n}");
            }
        }
    }

    #[test]
    fn many_distinct_values_are_selected_few_counted() {
        let few: Vec<u64> = (0..HISTOGRAM_MAX_DISTINCT as u64).collect();
        assert_eq!(Method::for_values(few.clone()), Method::Histogram(few));
        let many: Vec<u64> = (0..=HISTOGRAM_MAX_DISTINCT as u64).collect();
        assert_eq!(Method::for_values(many), Method::Selection);
    }

    #[test]
    fn code_at_rank_counts_from_the_lowest_value() {
        assert_eq!(code_at_rank(&[2, 0, 3], 0), 0);
        assert_eq!(code_at_rank(&[2, 0, 3], 1), 0);
        assert_eq!(code_at_rank(&[2, 0, 3], 2), 2);
        assert_eq!(code_at_rank(&[2, 0, 3], 4), 2);
        assert_eq!(code_at_rank(&[0, 1, 0, 1], 1), 3);
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(median_ci(&[]), None);
        assert_eq!(median_ci(&[5]), None);
        assert_eq!(median_ci(&[7, 7, 7, 7]), Some(MedianCi { low: 7, high: 7 }));
    }
}
