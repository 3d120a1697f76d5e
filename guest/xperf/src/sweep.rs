//! The user stamp pair's linearity sweep, natively (README "Method"):
//! dependent imul chains between xperf's own stamps, the lengths of a phase
//! interleaved sample by sample, as the microguest takes them in a VM
//! (`xvmm_results::sweep` fits them and decides what the corrections
//! subtract).

use crate::stamp;
use xvmm_results::sweep::{self, SweepPhase};

/// One phase: `samples` chains (at least 16 per length) of the lengths
/// `n, 2n, ..., k n` in turn, after `warmup` turns of each. A sample whose
/// stamps came from two CPUs counts as invalid. `None` when a length got no
/// valid sample.
pub fn phase(n: u64, k: u64, warmup: usize, samples: usize) -> Option<SweepPhase> {
    phase_with_breaks(n, k, warmup, samples, 0, || {})
}

/// [`phase`], with `between` called before `breaks` of its turns spread
/// evenly through it (the first turn's included): what the caller times
/// there is timed at the phase's own core speed (at most once a turn), which a measurement
/// before or after the phase is not (a cloud core's speed moved by 5 %
/// within a second). The turn after a break is counted like any other.
pub fn phase_with_breaks(
    n: u64,
    k: u64,
    warmup: usize,
    samples: usize,
    breaks: usize,
    mut between: impl FnMut(),
) -> Option<SweepPhase> {
    let lengths = sweep::lengths(n, k);
    for _ in 0..warmup {
        for &len in &lengths {
            std::hint::black_box(stamp::chain_pair(len));
        }
    }
    let passes = samples.div_ceil(lengths.len()).max(16);
    let every = passes.div_ceil(breaks.max(1));
    let mut intervals = Vec::with_capacity(passes * lengths.len());
    for pass in 0..passes {
        if breaks > 0 && pass % every == 0 {
            between();
        }
        for &len in &lengths {
            let s = stamp::chain_pair(len);
            let valid = s.cpu().is_some() && s.close > s.open;
            intervals.push(if valid { s.close - s.open } else { 0 });
        }
    }
    SweepPhase::from_interleaved(&lengths, &intervals)
}

/// Most samples a run's sweep phase takes: 3000 per length is plenty for
/// a median, and the chains are slow where every instruction is emulated
/// (the nested harness's TCG).
pub const MAX_RUN_SAMPLES: usize = 24_000;

/// Round `round`'s sweep ([`sweep::run_phases`]), `samples` a phase (at
/// most [`MAX_RUN_SAMPLES`]).
pub fn round(round: u32, warmup: usize, samples: usize) -> Vec<SweepPhase> {
    let samples = samples.min(MAX_RUN_SAMPLES);
    sweep::run_phases(round)
        .iter()
        .filter_map(|&(n, k)| phase(n, k, warmup, samples))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_a_rising_line_through_its_lengths() {
        let p = phase(64, 4, 10, 400).expect("every length measured");
        assert_eq!(p.lengths, [64, 128, 192, 256]);
        assert!(p.samples >= 400 && p.samples <= 404, "{}", p.samples);
        assert!(p.medians.windows(2).all(|w| w[1] > w[0]), "{:?}", p.medians);
        assert!(p.slope > 0.1, "{p:?}");
    }

    /// The breaks come as many times as asked, before the first turn and
    /// spread through the rest, and none where none is asked for.
    #[test]
    fn breaks_are_spread_through_the_phase() {
        let mut at = Vec::new();
        let mut turn = 0;
        let p = phase_with_breaks(8, 4, 0, 400, 4, || {
            at.push(turn);
            turn += 1;
        });
        assert!(p.is_some());
        assert_eq!(at, [0, 1, 2, 3]);
        let mut none = 0;
        assert!(phase_with_breaks(8, 4, 0, 400, 0, || none += 1).is_some());
        assert_eq!(none, 0);
        // 100 turns of 4 lengths: 7 breaks come every 15 turns, and more
        // breaks than turns come once a turn.
        let count = |breaks| {
            let mut n = 0;
            phase_with_breaks(8, 4, 0, 400, breaks, || n += 1);
            n
        };
        assert_eq!((count(7), count(1000)), (7, 100));
    }
}
