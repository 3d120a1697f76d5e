//! The parts of the result format added with per-kind stamp costs and
//! rounds: a crossing's four intervals as one set (all samples or the clean
//! ones), the batched figure, the split of a VM exit, and where the kernel
//! stamps are.

use crate::{Corrections, Interval, Sample, Stats};
use serde::{Deserialize, Serialize};

/// A crossing's four intervals over one set of samples.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Intervals {
    /// Samples in the set.
    pub samples: u64,
    pub u2k: Option<Interval>,
    pub k2u: Option<Interval>,
    pub in_kernel: Option<Interval>,
    pub round_trip: Option<Interval>,
}

impl Intervals {
    /// The four intervals of validated samples, per round (in the order
    /// taken), each with its correction.
    pub fn from_rounds(rounds: &[Vec<Sample>], corr: &Corrections) -> Intervals {
        let column = |f: fn(&Sample) -> u64| -> Vec<Vec<u64>> {
            rounds.iter().map(|r| r.iter().map(f).collect()).collect()
        };
        let interval = |f: fn(&Sample) -> u64, correction: u64| {
            let values = column(f);
            let views: Vec<&[u64]> = values.iter().map(Vec::as_slice).collect();
            Some(Interval::from_rounds(&views, correction))
        };
        Intervals {
            samples: rounds.iter().map(|r| r.len() as u64).sum(),
            u2k: interval(Sample::u2k, corr.u2k),
            k2u: interval(Sample::k2u, corr.k2u),
            in_kernel: interval(Sample::in_kernel, corr.in_kernel),
            round_trip: interval(Sample::round_trip, corr.round_trip),
        }
    }
}

/// K crossings between one pair of stamps, as perf bench and kvm-unit-tests
/// time them: the round trip only, but with the stamps' cost spread over K.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Batched {
    /// Crossings per batch (K).
    pub per_batch: u64,
    /// Ticks subtracted from each batch before dividing by K: the user pair,
    /// plus K times the kernel stamps where the kernel stamps every crossing.
    pub correction: u64,
    /// Ticks per crossing: (batch - correction) / K, per batch.
    pub per_crossing: Stats,
    /// What the kernel still runs of its stamps on each crossing of a batch
    /// and is not subtracted (empty: every stamp is in `correction`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel_keeps: String,
}

impl Batched {
    pub fn new(per_batch: u64, correction: u64, batches: &[u64]) -> Batched {
        let k = per_batch.max(1);
        let per: Vec<u64> = batches
            .iter()
            .map(|b| b.saturating_sub(correction) / k)
            .collect();
        Batched {
            per_batch: k,
            correction,
            per_crossing: Stats::from_samples(&per),
            kernel_keeps: String::new(),
        }
    }

    /// The same, saying what stays in each crossing unsubtracted.
    pub fn keeping(mut self, kernel_keeps: &str) -> Batched {
        self.kernel_keeps = kernel_keeps.into();
        self
    }
}

/// A VM exit's round trip cut by the VMM's stamps around `KVM_RUN`, each
/// part corrected so that the three add up to the corrected round trip.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExitSplit {
    pub guest_to_vmm: Interval,
    pub in_vmm: Interval,
    pub vmm_to_guest: Interval,
}

/// The kernel side's stamps (their TSC reads), as the code that takes them
/// spells them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct KernelStamps {
    /// At kernel entry (u2k_k).
    pub entry: String,
    /// Before the return to user mode (k2u_k).
    pub exit: String,
    /// Where the text comes from (the stamp page, the microguest's macros).
    pub source: String,
}

/// Where one crossing's kernel stamps sit.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StampPoint {
    pub crossing: String,
    /// The entry stamp's place in the entry path.
    pub entry: String,
    /// What the entry path has done before that stamp, in a few words
    /// ("nothing", "swapgs", ...): crossings whose depths differ do not have
    /// comparable u2k figures.
    pub entry_depth: String,
    /// The return stamp's place, and what follows it.
    pub exit: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_corrected_then_divided() {
        let b = Batched::new(100, 73, &[10_073, 20_073, 15_073]);
        assert_eq!(b.per_crossing.median, 150);
        assert_eq!((b.per_crossing.min, b.per_crossing.max), (100, 200));
        assert_eq!(Batched::new(0, 0, &[5]).per_batch, 1);
    }

    #[test]
    fn interval_sets_keep_round_medians_and_counts() {
        let s = |base: u64, u2k: u64| Sample {
            u2k_u: base,
            u2k_k: base + u2k,
            k2u_k: base + u2k + 10,
            k2u_u: base + u2k + 30,
            ..Default::default()
        };
        let rounds = vec![vec![s(0, 100), s(100, 110)], vec![s(500, 200)]];
        let corr = Corrections::derive(20, Some((20, 4)));
        let set = Intervals::from_rounds(&rounds, &corr);
        assert_eq!(set.samples, 3);
        let u2k = set.u2k.unwrap();
        assert_eq!(u2k.correction, Some(20));
        assert_eq!(u2k.rounds, vec![80, 180]);
        assert_eq!(u2k.raw.count, 3);
        assert_eq!(set.in_kernel.unwrap().corrected.median, 6);
    }
}
