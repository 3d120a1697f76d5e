//! Order statistics over every sample (no sketching: runs are small enough to
//! sort, and exact percentiles are what users compare across machines).

pub mod attribution;
pub mod bootstrap;
pub mod clocks;
pub mod compare;
pub mod correction;
pub mod exit_log;
pub mod interval_log;
pub mod linearity;
pub mod pending_exits;
pub mod quantum;
pub mod sweep;
pub mod timeline;
pub mod value_counts;
pub mod varint;
pub mod workload;
pub mod workload_compare;
pub mod workload_join;

use serde::{Deserialize, Serialize};

/// Number of equal-width buckets between the minimum and the p99.
pub const HISTOGRAM_BUCKETS: usize = 20;

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub min: u64,
    pub median: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: f64,
    /// Population standard deviation.
    pub stddev: f64,
    pub histogram: Histogram,
}

/// Equal-width buckets from `min` to `p99`; samples above the p99 are counted
/// in `above`, so a long tail does not flatten the interesting part.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Lower bound of the first bucket.
    pub start: u64,
    /// Width of every bucket (at least 1).
    pub width: u64,
    pub counts: Vec<u64>,
    /// Samples above the last bucket.
    pub above: u64,
}

impl Stats {
    /// Summarises `samples`; an empty slice gives all-zero statistics with count 0.
    pub fn from_samples(samples: &[u64]) -> Stats {
        if samples.is_empty() {
            return Stats::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let count = sorted.len();
        let mean = sorted.iter().map(|&v| v as f64).sum::<f64>() / count as f64;
        let variance = sorted
            .iter()
            .map(|&v| {
                let d = v as f64 - mean;
                d * d
            })
            .sum::<f64>()
            / count as f64;
        let p99 = percentile(&sorted, 99.0);
        Stats {
            count: count as u64,
            min: sorted[0],
            median: percentile(&sorted, 50.0),
            p99,
            max: sorted[count - 1],
            mean,
            stddev: variance.sqrt(),
            histogram: Histogram::build(&sorted, sorted[0], p99),
        }
    }
}

/// Nearest-rank percentile of sorted data (`pct` in 0..=100).
pub fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = crate::num::usize_saturating(((pct / 100.0) * sorted.len() as f64).ceil());
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Histogram {
    fn build(sorted: &[u64], lo: u64, hi: u64) -> Histogram {
        // Saturating: samples spanning the whole u64 range must not overflow.
        let span = (hi - lo).saturating_add(1);
        let width = span.div_ceil(HISTOGRAM_BUCKETS as u64).max(1);
        let buckets = crate::num::usize_from(span.div_ceil(width));
        let mut counts = vec![0u64; buckets];
        let mut above = 0;
        for &v in sorted {
            if v > hi {
                above += 1;
            } else {
                counts[crate::num::usize_from((v - lo) / width)] += 1;
            }
        }
        Histogram {
            start: lo,
            width,
            counts,
            above,
        }
    }

    /// Total number of samples the histogram holds.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.above
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_spanning_the_whole_u64_range_do_not_overflow() {
        let s = Stats::from_samples(&[0, u64::MAX / 2, u64::MAX]);
        assert_eq!((s.min, s.max, s.count), (0, u64::MAX, 3));
        assert_eq!(s.histogram.total(), 3);
        assert_eq!(s.histogram.counts.len(), HISTOGRAM_BUCKETS);
    }

    #[test]
    fn empty_input_gives_zero_count() {
        let s = Stats::from_samples(&[]);
        assert_eq!(s.count, 0);
        assert_eq!(s.histogram.total(), 0);
    }

    #[test]
    fn order_statistics_of_one_to_hundred() {
        let values: Vec<u64> = (1..=100).rev().collect();
        let s = Stats::from_samples(&values);
        assert_eq!(
            (s.count, s.min, s.median, s.p99, s.max),
            (100, 1, 50, 99, 100)
        );
        assert!((s.mean - 50.5).abs() < 1e-9);
        // Population stddev of 1..=100 is sqrt((100^2 - 1) / 12).
        assert!((s.stddev - (9999.0f64 / 12.0).sqrt()).abs() < 1e-9);
    }

    #[test]
    fn histogram_holds_every_sample_and_separates_the_tail() {
        let mut values: Vec<u64> = (0..1000).map(|i| 400 + i % 50).collect();
        values.extend([100_000; 5]);
        let s = Stats::from_samples(&values);
        let h = &s.histogram;
        assert_eq!(h.total(), values.len() as u64);
        assert_eq!(h.start, 400);
        assert!(h.counts.len() <= HISTOGRAM_BUCKETS);
        assert_eq!(
            h.above,
            5 + values.iter().filter(|&&v| v > s.p99 && v < 100_000).count() as u64
        );
    }

    #[test]
    fn constant_samples_have_zero_spread() {
        let s = Stats::from_samples(&[7, 7, 7]);
        assert_eq!((s.min, s.median, s.p99, s.max), (7, 7, 7, 7));
        assert_eq!(s.stddev, 0.0);
        assert_eq!(s.histogram.counts, vec![3]);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        assert_eq!(percentile(&[10, 20, 30, 40], 50.0), 20);
        assert_eq!(percentile(&[10, 20, 30, 40], 99.0), 40);
        assert_eq!(percentile(&[10], 0.0), 10);
    }
}
