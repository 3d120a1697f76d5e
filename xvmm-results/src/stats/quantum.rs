//! The TSC quantum: how far the counter moves in one step. Many CPUs (AMD
//! Zen, and the TSC some hypervisors give) advance it by ~24 ticks every
//! 10 ns instead of by 1 every cycle, so an interval of 98 ticks is four
//! steps, +-25 %, and medians of such stepped data are biased. Every figure
//! under [`FLAG_QUANTA`] quanta is flagged in the tables.
//!
//! The estimate comes from the differences of back-to-back counter reads
//! ([`xvmm_host::tsc::back_to_back`], or the microguest's own loop): they fall in
//! clusters at multiples of the step (24/25, 49, 73/74... on this build
//! machine, whose step alternates 24 and 25 ticks, about 2445 MHz / 100 MHz), or in one wide
//! cluster when the counter moves every tick (the reads themselves take
//! longer than a step). A step that is not a whole number of ticks shows as
//! two neighbouring values (24 and 25), hence clusters of values at most one
//! tick apart.

/// Figures below this many quanta are flagged: one step is then more than
/// 5 % of the figure.
pub const FLAG_QUANTA: f64 = 20.0;

/// Clusters with fewer samples than this share of the total are noise (an
/// interrupt between two reads), not a multiple of the step.
const MIN_SHARE: f64 = 0.001;

/// Values that may belong to one cluster: a non-integral step rounds to
/// two neighbours.
const CLUSTER_WIDTH: u64 = 1;

/// A run of distinct differences at most [`CLUSTER_WIDTH`] apart.
#[derive(Debug, Clone, PartialEq)]
struct Cluster {
    /// Count-weighted mean of the values.
    center: f64,
    /// Distinct values in the cluster.
    values: Vec<u64>,
    count: u64,
}

fn clusters(diffs: &[u64]) -> Vec<Cluster> {
    let mut sorted: Vec<u64> = diffs.iter().copied().filter(|&d| d > 0).collect();
    sorted.sort_unstable();
    let mut out: Vec<Cluster> = Vec::new();
    let mut sum = 0f64;
    for v in sorted {
        let extends = out
            .last()
            .and_then(|c| c.values.last())
            .is_some_and(|&last| v - last <= CLUSTER_WIDTH);
        if !extends {
            if let Some(c) = out.last_mut() {
                c.center = sum / c.count as f64;
            }
            out.push(Cluster {
                center: 0.0,
                values: Vec::new(),
                count: 0,
            });
            sum = 0.0;
        }
        // `out` is never empty here.
        if let Some(c) = out.last_mut() {
            if c.values.last() != Some(&v) {
                c.values.push(v);
            }
            c.count += 1;
            sum += v as f64;
        }
    }
    if let Some(c) = out.last_mut() {
        c.center = sum / c.count.max(1) as f64;
    }
    out
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A cluster of differences of one tick is not a counter moving by one where
/// every other significant difference is a step or more away: AMD CPUs whose
/// counter steps (26 ticks every 10 ns on Zen 5) keep RDTSC strictly
/// increasing, so a read within the step of the read before returns that one
/// plus one. Measured on the Zen 5 build machine: 1 (10 %), 25 and 26; a
/// one-tick counter read that fast would show values between too. Those 1s
/// are the counter standing still (zeros elsewhere): returns how many there
/// were and the clusters without them.
fn split_monotonic_bumps(significant: Vec<Cluster>) -> (u64, Vec<Cluster>) {
    let is_bump = |c: &Cluster| c.values == [1];
    match significant.as_slice() {
        [first, next, ..] if is_bump(first) && next.center >= MIN_STEP_BESIDE_BUMPS => {
            let bumps = first.count;
            (bumps, significant.into_iter().skip(1).collect())
        }
        _ => (0, significant),
    }
}

/// The smallest step that 1s beside it are read as bumps of (see
/// [`split_monotonic_bumps`]): far above a read's own jitter.
const MIN_STEP_BESIDE_BUMPS: f64 = 8.0;

/// The counter's step in ticks, from differences of back-to-back reads;
/// `None` without a positive difference. Zero differences (reads faster
/// than a step) are ignored; clusters holding under 0.1 % of the samples are
/// noise.
pub fn estimate(diffs: &[u64]) -> Option<f64> {
    let positive = diffs.iter().filter(|&&d| d > 0).count() as f64;
    let significant: Vec<Cluster> = clusters(diffs)
        .into_iter()
        .filter(|c| c.count as f64 >= MIN_SHARE * positive)
        .collect();
    let (bumps, significant) = split_monotonic_bumps(significant);
    let zeros = diffs.len() as f64 - positive + bumps as f64;
    let first = significant.first()?;
    // A step shows only as values the counter skips: zeros (it stood still
    // through a read), or a second cluster a whole step further. One cluster
    // of one or two neighbouring values with no zeros is what a steady read
    // latency gives on a counter that moves every tick (18.4 ticks: 18 and
    // 19) as much as a step equal to the latency; nothing shows a step, so
    // the values' common divisor is the resolution.
    let lone = significant.len() == 1 && zeros < MIN_SHARE * diffs.len() as f64;
    if first.values.len() > 2 || lone {
        // A wide cluster: the counter resolves single ticks (or a common
        // divisor of the values it shows).
        return Some(first.values.iter().fold(0, |g, &v| gcd(g, v)) as f64);
    }
    // The step is the smallest distance between cluster centres, or the first
    // centre itself (reads one step apart); then each centre is a whole
    // number of steps, which refines it.
    let rough = significant
        .windows(2)
        .map(|w| w[1].center - w[0].center)
        .fold(first.center, f64::min);
    let (mut weighted, mut weight) = (0.0, 0.0);
    for c in &significant {
        let steps = (c.center / rough).round().max(1.0);
        weighted += c.center / steps * c.count as f64;
        weight += c.count as f64;
    }
    // A counter cannot step by less than a tick: rounding clusters of
    // neighbouring values (3 and 4 as four steps of 0.9) can make it look so.
    Some((weighted / weight).max(1.0))
}

/// Whether `ticks` is too few quanta to be read to better than 5 %.
pub fn is_coarse(ticks: u64, quantum: Option<f64>) -> bool {
    quantum.is_some_and(|q| q > 1.0 && (ticks as f64) < FLAG_QUANTA * q)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Differences from a measured histogram: (value, count).
    fn from_counts(measured: &[(u64, usize)]) -> Vec<u64> {
        measured
            .iter()
            .flat_map(|&(v, n)| std::iter::repeat_n(v, n))
            .collect()
    }

    /// Back-to-back reads of a counter stepping by `step` ticks, read every
    /// `latency` ticks, starting at offsets spread over a step.
    fn stepped(step: f64, latency: f64, n: usize) -> Vec<u64> {
        let read = |t: f64| crate::num::u64_saturating(((t / step).floor() * step).round());
        (0..n)
            .map(|i| {
                let t0 = 1000.0 + i as f64 * 7.31;
                read(t0 + latency) - read(t0)
            })
            .collect()
    }

    #[test]
    fn a_counter_never_steps_by_less_than_a_tick() {
        // Seen under QEMU TCG: single ticks and zeros, and a cluster of 3s
        // and 4s that rounds to four steps of about 0.92.
        let mut diffs = vec![0u64; 1000];
        diffs.extend([1u64; 1000]);
        diffs.extend([3u64; 300]);
        diffs.extend([4u64; 700]);
        assert_eq!(estimate(&diffs), Some(1.0));
    }

    #[test]
    fn a_non_integral_step_is_found_from_its_two_neighbours() {
        // The build machine: 24.45-tick steps, reads ~30 ticks apart: 24/25
        // and 49 with a few 73/74.
        let diffs = stepped(24.45, 30.0, 20_000);
        let q = estimate(&diffs).unwrap();
        assert!((q - 24.45).abs() < 0.1, "{q}");
        // Fenced reads are slower (49, 73/74): the same step.
        let q = estimate(&stepped(24.45, 60.0, 20_000)).unwrap();
        assert!((q - 24.45).abs() < 0.1, "{q}");
    }

    #[test]
    fn measured_distribution_of_the_build_machine() {
        // Plain back-to-back RDTSC on the build machine (EPYC, 2445 MHz),
        // 200k reads: value, count.
        let measured = [
            (24, 66_190),
            (25, 66_616),
            (49, 66_209),
            (73, 495),
            (74, 468),
            (98, 8),
            (122, 3),
            (3405, 1),
            (36_603, 1),
        ];
        let diffs = from_counts(&measured);
        let q = estimate(&diffs).unwrap();
        assert!((q - 24.45).abs() < 0.1, "{q}");
        // Another day's 200k reads, with rarer long gaps of 5 and 6 steps:
        // the step alternates 24 and 25 ticks, 24.5 on average.
        let measured = [
            (24, 81_297),
            (25, 81_311),
            (49, 35_802),
            (73, 634),
            (74, 594),
            (98, 23),
            (122, 124),
            (123, 121),
            (147, 75),
        ];
        let diffs = from_counts(&measured);
        let q = estimate(&diffs).unwrap();
        assert!((q - 24.5).abs() < 0.02, "{q}");
        assert!(is_coarse(98, Some(q)), "four steps are flagged");
    }

    /// Plain back-to-back RDTSC on the Zen 5 build machine (EPYC family 26,
    /// 2596 MHz, 2026-11-28), 200k reads: value, count. The counter steps by
    /// 26 ticks (intervals of a chain come out 78, 104, 130...); a read in
    /// the same step as the one before returns it plus one, and the read
    /// after such a bump is one short of a step (25). Read as a one-tick
    /// counter, every interval's flag and the linearity sweep's step error
    /// were 26 times too small.
    #[test]
    fn measured_distribution_of_the_zen5_build_machine() {
        let measured = [
            (1, 19_594),
            (25, 19_810),
            (26, 160_587),
            (51, 2),
            (52, 2),
            (182, 1),
            (337, 1),
            (468, 1),
            (494, 2),
        ];
        let diffs = from_counts(&measured);
        let q = estimate(&diffs).unwrap();
        // 2596 MHz / 100 MHz is 25.96; the bumps make the step read a
        // little short (25.89).
        assert!((q - 25.96).abs() < 0.2, "{q}");
        assert!(is_coarse(98, Some(q)) && is_coarse(500, Some(q)));
        // Fenced pairs are slower than a step: 26 and 52, no bumps.
        let fenced: Vec<u64> = (0..3000)
            .map(|i| if i % 3 == 0 { 26 } else { 52 })
            .collect();
        assert_eq!(estimate(&fenced), Some(26.0));
    }

    /// 1s beside a cluster within a read's jitter are a counter moving by
    /// one (TCG's, above), not bumps; from [`MIN_STEP_BESIDE_BUMPS`] on they
    /// are bumps.
    #[test]
    fn ones_are_bumps_only_beside_a_cluster_a_step_away() {
        let with_next = |next: u64| {
            let mut d = vec![1u64; 1000];
            d.extend(std::iter::repeat_n(next, 9000));
            estimate(&d).unwrap()
        };
        assert_eq!(with_next(7), 1.0);
        assert_eq!(with_next(8), 8.0);
        assert_eq!(with_next(26), 26.0);
        // 2s are not what a bump gives: a counter moving by one, read one
        // or two ticks apart, and 26 ticks when an interrupt came between.
        let mut d = vec![2u64; 1000];
        d.extend(std::iter::repeat_n(26, 9000));
        assert_eq!(estimate(&d), Some(2.0));
    }

    #[test]
    fn a_counter_that_moves_every_tick_has_a_quantum_of_one() {
        let diffs: Vec<u64> = (0..5000).map(|i| 18 + i % 9).collect();
        assert_eq!(estimate(&diffs), Some(1.0));
        // Only even values: a counter moving by two.
        let diffs: Vec<u64> = (0..5000).map(|i| 30 + 2 * (i % 5)).collect();
        assert_eq!(estimate(&diffs), Some(2.0));
    }

    /// Two neighbouring values and how many zeros beside them decide: zeros
    /// (the counter stood still through a read) show a step; under 0.1 %
    /// of the reads they are noise, and the values' divisor (1) is kept.
    #[test]
    fn zeros_beside_one_cluster_show_a_step_from_a_share_of_one_in_a_thousand() {
        let with_zeros = |zeros: usize, n: usize| {
            let mut d: Vec<u64> = (0..n - zeros).map(|i| 24 + (i % 2) as u64).collect();
            d.extend(std::iter::repeat_n(0, zeros));
            estimate(&d).unwrap()
        };
        // Half the reads saw no step: the step is 24.5.
        assert!((with_zeros(2000, 4000) - 24.5).abs() < 0.01);
        // Exactly the share (1 in 1000) counts; 5 in 10,000 do not.
        assert!((with_zeros(1, 1000) - 24.5).abs() < 0.01);
        assert_eq!(with_zeros(5, 10_000), 1.0);
    }

    /// One value and no zeros: a step of that size and a steady latency on a
    /// one-tick counter look the same; the larger reading is kept, which
    /// flags more figures rather than fewer.
    #[test]
    fn a_single_difference_without_zeros_is_taken_as_the_step() {
        assert_eq!(estimate(&[40; 1000]), Some(40.0));
        assert_eq!(estimate(&[1; 1000]), Some(1.0));
    }

    #[test]
    fn a_steady_read_latency_on_a_one_tick_counter_is_not_a_step() {
        // A counter moving every tick, read every 18.4 ticks: 18 or 19 every
        // time, the same two neighbours a 18.4-tick step would give; but no
        // read ever saw the counter stand still or skip a step, so nothing
        // shows a step larger than one tick.
        let diffs = stepped(1.0, 18.4, 20_000);
        assert!(diffs.iter().all(|&d| d == 18 || d == 19), "fixture");
        let q = estimate(&diffs).unwrap();
        assert!((q - 1.0).abs() < 0.01, "{q}");
        assert!(!is_coarse(98, Some(q)), "a one-tick counter flags nothing");
    }

    #[test]
    fn a_25_tick_counter_at_any_read_latency() {
        // Reads slower than a step (25/50), much slower (75/100), and
        // faster than a step (mostly 0, sometimes 25).
        for latency in [30.0, 80.0, 10.0] {
            let q = estimate(&stepped(25.0, latency, 20_000)).unwrap();
            assert!((q - 25.0).abs() < 0.1, "latency {latency}: {q}");
            assert!(is_coarse(98, Some(q)) && !is_coarse(500, Some(q)));
        }
    }

    #[test]
    fn reads_faster_than_a_step_and_rare_outliers() {
        // Mostly zero (same step), one step when the counter moved, and an
        // interrupt's gap that must not count as a cluster.
        let mut diffs = vec![0u64; 9000];
        diffs.extend(std::iter::repeat_n(40, 1000));
        diffs.push(123_457);
        assert_eq!(estimate(&diffs), Some(40.0));
        assert_eq!(estimate(&[0, 0, 0]), None);
        assert_eq!(estimate(&[]), None);
    }

    #[test]
    fn coarse_figures_are_under_twenty_quanta() {
        assert!(is_coarse(98, Some(24.45)));
        assert!(is_coarse(488, Some(24.45)));
        assert!(!is_coarse(490, Some(24.45)));
        assert!(!is_coarse(5, Some(1.0)), "a fine counter flags nothing");
        assert!(!is_coarse(5, None));
    }
}
