//! A VM exit's round trip cut by the host's own tracepoints (`xvmm
//! --trace` on the microguest): guest->host from the guest's stamp before
//! the exiting instruction to `kvm_exit`, in host from `kvm_exit` to
//! `kvm_entry`, host->guest from `kvm_entry` to the guest's stamp after.
//!
//! The tracepoints fire in KVM's C code, hundreds of instructions away from
//! the VMRUN/VMRESUME that really leaves and enters the guest: guest->host
//! and host->guest include that code, in host excludes it. A negative part
//! cannot happen on a right mapping, so every one is counted.

use crate::stats::Stats;
use crate::timeline::Mapping;
use serde::{Deserialize, Serialize};

/// The traced split of one exit kind, over every traced round.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct TracedExit {
    /// Samples with valid guest stamps.
    pub samples: u64,
    /// Samples whose window held exactly one traced exit: the split ones.
    pub split: u64,
    /// Samples with no traced exit in their window, and with more than one.
    pub no_exit: u64,
    pub more_exits: u64,
    /// Split samples with a part below zero (in none of the statistics).
    pub negative: u64,
    pub guest_to_host: Stats,
    pub in_host: Stats,
    pub host_to_guest: Stats,
    /// For exits served in the VMM process: the VMM's own time (from
    /// `KVM_RUN` returning to it being called again), inside `in_host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_vmm: Option<Stats>,
    /// Traced exits in each sample's window, over every sample (absent in
    /// reports written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits_per_sample: Option<Stats>,
    /// Samples with more than one exit, each exit's entry inside the
    /// window too: all their exits' host time together (guest ticks), the
    /// host's share of a path of several exits (an interrupt's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_host_several: Option<Stats>,
    /// The largest distance, over the split samples, between the three
    /// parts' sum and the sample's own round trip (guest ticks): the parts
    /// come from the host's tracepoints mapped onto the guest's clock, the
    /// round trip from the guest's stamps alone, so a mapping that moves
    /// the exit and the entry differently shows here.
    #[serde(default)]
    pub parts_sum_worst: u64,
    /// The probe effect: median round trips of the traced rounds and of
    /// the untraced ones, alternated, and traced minus untraced.
    pub round_trip_traced_median: u64,
    pub round_trip_untraced_median: u64,
    pub probe_effect_ticks: i64,
}

/// The three parts of every sample that holds one traced exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    pub guest_to_host: Vec<u64>,
    pub in_host: Vec<u64>,
    pub host_to_guest: Vec<u64>,
    pub no_exit: u64,
    pub more_exits: u64,
    pub negative: u64,
    pub samples: u64,
    /// See [`TracedExit::parts_sum_worst`].
    pub parts_sum_worst: u64,
    /// See [`TracedExit::exits_per_sample`] and
    /// [`TracedExit::in_host_several`].
    pub exits_per_sample: Vec<u64>,
    pub in_host_several: Vec<u64>,
}

impl Parts {
    /// Adds another phase's parts to these.
    pub fn append(&mut self, mut other: Parts) {
        self.guest_to_host.append(&mut other.guest_to_host);
        self.in_host.append(&mut other.in_host);
        self.host_to_guest.append(&mut other.host_to_guest);
        self.no_exit += other.no_exit;
        self.more_exits += other.more_exits;
        self.negative += other.negative;
        self.samples += other.samples;
        self.parts_sum_worst = self.parts_sum_worst.max(other.parts_sum_worst);
        self.exits_per_sample.append(&mut other.exits_per_sample);
        self.in_host_several.append(&mut other.in_host_several);
    }
}

/// Splits samples `[open, close)` (guest TSC; `None` for discarded ones) by
/// the traced exits `(kvm_exit, kvm_entry)` (host TSC, sorted by exit).
pub fn split(samples: &[Option<(u64, u64)>], exits: &[(u64, u64)], mapping: &Mapping) -> Parts {
    let mut p = Parts::default();
    let mapped: Vec<(i128, i128, u64)> = exits
        .iter()
        .map(|&(exit, entry)| {
            (
                mapping.to_guest(exit),
                mapping.to_guest(entry),
                mapping.scale_duration(entry.saturating_sub(exit)),
            )
        })
        .collect();
    for &(open, close) in samples.iter().flatten() {
        p.samples += 1;
        let (a, b) = (i128::from(open), i128::from(close));
        let first = mapped.partition_point(|e| e.0 < a);
        let last = mapped.partition_point(|e| e.0 < b);
        p.exits_per_sample.push((last - first) as u64);
        match last - first {
            0 => p.no_exit += 1,
            1 => {
                let (exit, entry, host) = mapped[first];
                let (g2h, h2g) = (exit - a, b - entry);
                if g2h <= 0 || h2g <= 0 || host == 0 {
                    p.negative += 1;
                    continue;
                }
                let sum = g2h + i128::from(host) + h2g;
                let off = u64::try_from((sum - (b - a)).unsigned_abs()).unwrap_or(u64::MAX);
                p.parts_sum_worst = p.parts_sum_worst.max(off);
                p.guest_to_host.push(u64::try_from(g2h).unwrap_or(u64::MAX));
                p.in_host.push(host);
                p.host_to_guest.push(u64::try_from(h2g).unwrap_or(u64::MAX));
            }
            _ => {
                p.more_exits += 1;
                let several = &mapped[first..last];
                if several.iter().all(|e| e.1 < b) {
                    p.in_host_several.push(several.iter().map(|e| e.2).sum());
                }
            }
        }
    }
    p
}

impl TracedExit {
    /// The report's figures from the traced rounds' parts, the VMM's own
    /// time per exit (when the exit reached it) and both round-trip sets.
    pub fn new(parts: &Parts, in_vmm: &[u64], traced: &[u64], untraced: &[u64]) -> TracedExit {
        let (t, u) = (
            Stats::from_samples(traced).median,
            Stats::from_samples(untraced).median,
        );
        TracedExit {
            samples: parts.samples,
            split: parts.in_host.len() as u64,
            no_exit: parts.no_exit,
            more_exits: parts.more_exits,
            negative: parts.negative,
            parts_sum_worst: parts.parts_sum_worst,
            guest_to_host: Stats::from_samples(&parts.guest_to_host),
            in_host: Stats::from_samples(&parts.in_host),
            host_to_guest: Stats::from_samples(&parts.host_to_guest),
            in_vmm: (!in_vmm.is_empty()).then(|| Stats::from_samples(in_vmm)),
            exits_per_sample: (!parts.exits_per_sample.is_empty())
                .then(|| Stats::from_samples(&parts.exits_per_sample)),
            in_host_several: (!parts.in_host_several.is_empty())
                .then(|| Stats::from_samples(&parts.in_host_several)),
            round_trip_traced_median: t,
            round_trip_untraced_median: u,
            probe_effect_ticks: i64::try_from(t).unwrap_or(i64::MAX)
                - i64::try_from(u).unwrap_or(i64::MAX),
        }
    }

    /// The share of split samples with every part positive.
    pub fn positive_share(&self) -> f64 {
        let looked = self.split + self.negative;
        if looked == 0 {
            0.0
        } else {
            self.split as f64 / looked as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sample_with_one_exit_is_cut_in_three() {
        // Guest = host - 1000.
        let m = Mapping::unscaled(-1000);
        let samples = [
            Some((100, 400)),   // exit at guest 150..350
            None,               // discarded
            Some((1000, 1100)), // no exit
            Some((2000, 2600)), // two exits
            Some((3000, 3100)), // exit whose entry comes after the closing stamp
        ];
        let exits = [(1150, 1350), (3100, 3200), (3300, 3400), (4050, 4200)];
        let p = split(&samples, &exits, &m);
        assert_eq!(
            (p.samples, p.no_exit, p.more_exits, p.negative),
            (4, 1, 1, 1)
        );
        assert_eq!(
            (
                p.guest_to_host.clone(),
                p.in_host.clone(),
                p.host_to_guest.clone()
            ),
            (vec![50], vec![200], vec![50])
        );
        assert_eq!(p.parts_sum_worst, 0, "one offset: the parts add up");
        // KVM rewrote the offset between the exit and the entry: the parts,
        // each mapped with its own offset, no longer add up to the sample.
        let mut moved = Mapping::unscaled(-1000);
        moved.changes.push(crate::timeline::OffsetChange {
            host_tsc: 1200,
            offset: -1030,
        });
        let q = split(&samples[..1], &exits, &moved);
        assert_eq!(q.parts_sum_worst, 30, "{q:?}");
        let t = TracedExit::new(&p, &[20], &[300, 310], &[280, 290]);
        assert_eq!(t.split, 1);
        assert_eq!(t.probe_effect_ticks, 310 - 290);
        assert!((t.positive_share() - 0.5).abs() < 1e-9);
        assert_eq!(t.in_vmm.unwrap().median, 20);
    }

    /// A path of several exits: each sample's exits counted, and where
    /// every exit of a sample also re-entered inside it, their host times
    /// summed; a sample whose last entry comes after its closing stamp is
    /// counted but not summed.
    #[test]
    fn samples_with_several_exits_sum_their_host_time() {
        let m = Mapping::unscaled(0);
        let samples = [
            Some((100, 1000)),  // three exits inside
            Some((2000, 2300)), // two, the second re-entered after 2300
            Some((3000, 3100)), // one
            Some((4000, 4100)), // none
        ];
        let exits = [
            (150, 200),
            (400, 470),
            (800, 900),
            (2050, 2100),
            (2250, 2400),
            (3020, 3080),
        ];
        let p = split(&samples, &exits, &m);
        assert_eq!(p.exits_per_sample, [3, 2, 1, 0]);
        assert_eq!(p.more_exits, 2);
        assert_eq!(p.in_host_several, [50 + 70 + 100]);
        let t = TracedExit::new(&p, &[], &[900], &[880]);
        let per = t.exits_per_sample.unwrap();
        assert_eq!((per.count, per.max, per.min), (4, 3, 0));
        assert_eq!(t.in_host_several.unwrap().median, 220);
        // No sample with several exits: nothing summed, and said so.
        let one = split(&samples[2..], &exits, &m);
        assert!(TracedExit::new(&one, &[], &[1], &[1])
            .in_host_several
            .is_none());
    }
}
