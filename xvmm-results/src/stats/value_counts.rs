//! Statistics of a stream too long to keep: a traced run's exit-to-entry
//! times, millions of them (issue 25: 10 M exits in at most 64 MiB), each
//! counted in a bucket instead of stored.
//!
//! Values below [`EXACT_BELOW`] have a bucket each; above, a bucket holds
//! the values that share their top 12 significant bits, so a percentile is
//! low by less than 1/2048 (0.05 %) of itself. The count, minimum, maximum,
//! mean and standard deviation are exact (the last two by Welford's
//! update). Memory is at most 110 592 counters, however long the stream.

use super::{Histogram, Stats, HISTOGRAM_BUCKETS};

/// Values below this are counted exactly.
pub const EXACT_BELOW: u64 = 1 << 12;
/// Buckets per power of two above [`EXACT_BELOW`].
const PER_OCTAVE: u64 = 1 << 11;

/// The bucket of `v`.
fn bucket(v: u64) -> usize {
    if v < EXACT_BELOW {
        return crate::num::usize_from(v);
    }
    let e = u64::from(63 - v.leading_zeros());
    let mantissa = v >> (e - 11);
    crate::num::usize_from(EXACT_BELOW + (e - 12) * PER_OCTAVE + (mantissa - PER_OCTAVE))
}

/// The smallest value of bucket `i`: what a percentile in it reports.
fn floor_of(i: usize) -> u64 {
    let i = i as u64;
    if i < EXACT_BELOW {
        return i;
    }
    let k = i - EXACT_BELOW;
    let e = 12 + k / PER_OCTAVE;
    (PER_OCTAVE + k % PER_OCTAVE) << (e - 11)
}

/// `v` as its bucket reports it.
pub fn rounded(v: u64) -> u64 {
    floor_of(bucket(v))
}

/// A stream of values, counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueCounts {
    counts: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
    mean: f64,
    /// Sum of squared differences from the running mean (Welford).
    m2: f64,
}

impl ValueCounts {
    pub fn push(&mut self, v: u64) {
        let b = bucket(v);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        }
        (self.min, self.max) = (self.min.min(v), self.max.max(v));
        self.count += 1;
        let delta = v as f64 - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (v as f64 - self.mean);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The nearest-rank percentile, as [`super::percentile`] defines it,
    /// at its bucket's floor.
    fn percentile(&self, pct: f64) -> u64 {
        let rank = crate::num::u64_saturating(((pct / 100.0) * self.count as f64).ceil());
        let rank = rank.clamp(1, self.count.max(1));
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return floor_of(i);
            }
        }
        self.max
    }

    /// The statistics [`Stats::from_samples`] gives for the same values,
    /// the percentiles and the histogram at bucket resolution.
    pub fn stats(&self) -> Stats {
        if self.count == 0 {
            return Stats::default();
        }
        let p99 = self.percentile(99.0);
        Stats {
            count: self.count,
            min: self.min,
            median: self.percentile(50.0),
            p99,
            max: self.max,
            mean: self.mean,
            stddev: (self.m2 / self.count as f64).max(0.0).sqrt(),
            histogram: self.histogram(rounded(self.min), p99),
        }
    }

    /// [`Histogram`]'s equal-width buckets from `lo` to `hi`, each value
    /// counted at its bucket's floor.
    fn histogram(&self, lo: u64, hi: u64) -> Histogram {
        let span = (hi - lo).saturating_add(1);
        let width = span.div_ceil(HISTOGRAM_BUCKETS as u64).max(1);
        let mut counts = vec![0u64; crate::num::usize_from(span.div_ceil(width))];
        let mut above = 0;
        for (i, &c) in self.counts.iter().enumerate().filter(|(_, &c)| c > 0) {
            let v = floor_of(i);
            if v > hi {
                above += c;
            } else {
                counts[crate::num::usize_from((v - lo) / width)] += c;
            }
        }
        Histogram {
            start: lo,
            width,
            counts,
            above,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_below_4096_and_within_a_2048th_above() {
        for v in [0, 1, 4095] {
            assert_eq!(rounded(v), v);
        }
        assert_eq!(rounded(4096), 4096);
        assert_eq!(rounded(4097), 4096);
        assert_eq!(rounded(4098), 4098);
        assert_eq!(rounded(u64::MAX), u64::MAX - ((1 << 52) - 1));
        let mut x = 1u64;
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = x >> (x % 60);
            let r = rounded(v);
            assert!(r <= v && (v - r) as f64 <= v as f64 / 2048.0, "{v} {r}");
            assert_eq!(floor_of(bucket(r)), r, "a floor is its own bucket's");
            assert!(bucket(v) < 4096 + 52 * 2048);
        }
    }

    /// Below 4096 every figure is what `Stats::from_samples` gives; above,
    /// the percentiles are within 0.05 % and the rest the same.
    #[test]
    fn the_stats_are_those_of_every_value() {
        let mut x = 3u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let small: Vec<u64> = (0..10_001).map(|_| 300 + next(900)).collect();
        let big: Vec<u64> = (0..10_001)
            .map(|i| {
                if i % 50 == 0 {
                    10_000_000 + next(1 << 30)
                } else {
                    2_000 + next(9_000)
                }
            })
            .collect();
        for (values, exact) in [(small, true), (big, false)] {
            let mut counts = ValueCounts::default();
            values.iter().for_each(|&v| counts.push(v));
            let (got, want) = (counts.stats(), Stats::from_samples(&values));
            assert_eq!(counts.count(), 10_001);
            assert_eq!(
                (got.count, got.min, got.max),
                (want.count, want.min, want.max)
            );
            assert!((got.mean - want.mean).abs() <= 1e-9 * want.mean);
            assert!((got.stddev - want.stddev).abs() <= 1e-9 * want.stddev);
            for (g, w) in [(got.median, want.median), (got.p99, want.p99)] {
                assert!(g <= w && (w - g) as f64 <= w as f64 / 2048.0, "{g} {w}");
                assert!(!exact || g == w, "{g} {w}");
            }
            if exact {
                assert_eq!(got.histogram, want.histogram);
            }
            assert_eq!(got.histogram.total(), want.count);
        }
    }

    #[test]
    fn no_values_and_one_value() {
        assert_eq!(ValueCounts::default().stats(), Stats::default());
        let mut one = ValueCounts::default();
        one.push(123_456_789);
        let s = one.stats();
        assert_eq!(
            (s.count, s.min, s.max, s.stddev),
            (1, 123_456_789, 123_456_789, 0.0)
        );
        assert_eq!(s.median, rounded(123_456_789));
        assert_eq!(s.histogram.total(), 1);
    }
}
