//! Where a microguest run's wall time went: each phase's VM creation,
//! loading, run (the guest in KVM_RUN and xvmm's handling of each exit) and
//! collection, as the run's [`Vms`](super::machine::Vms) timed them, summed
//! per kind for the benchmark and `--verbose`. Pure data.

use super::guest::Kind;
use super::machine::{PhaseRecord, PhaseTimes};
use std::ops::AddAssign;
use std::time::Duration;

/// A run's phases and the time outside them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Every phase, in the order it ran.
    pub phases: Vec<PhaseRecord>,
    /// The whole run ([`super::measure::measure`]).
    pub total: Duration,
    /// Statistics and the report, after the last phase.
    pub assemble: Duration,
}

/// The phases of one kind, summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindTimes {
    pub kind: Kind,
    pub phases: u64,
    /// Of `phases`, those that ran in an earlier phase's VM.
    pub reused: u64,
    /// Warm-up iterations and samples over the phases.
    pub warmup: u64,
    pub samples: u64,
    pub times: PhaseTimes,
}

impl AddAssign for PhaseTimes {
    fn add_assign(&mut self, o: PhaseTimes) {
        self.create += o.create;
        self.load += o.load;
        self.run += o.run;
        self.exits += o.exits;
        self.measured_exits += o.measured_exits;
        self.vmm_ticks += o.vmm_ticks;
        self.collect += o.collect;
    }
}

impl Profile {
    /// Every phase's times summed.
    pub fn phases_total(&self) -> PhaseTimes {
        let mut sum = PhaseTimes::default();
        for p in &self.phases {
            sum += p.times;
        }
        sum
    }

    /// The phases summed per kind, in the order each kind first ran.
    pub fn by_kind(&self) -> Vec<KindTimes> {
        let mut out: Vec<KindTimes> = Vec::new();
        for p in &self.phases {
            let i = match out.iter().position(|k| k.kind == p.kind) {
                Some(i) => i,
                None => {
                    out.push(KindTimes {
                        kind: p.kind,
                        phases: 0,
                        reused: 0,
                        warmup: 0,
                        samples: 0,
                        times: PhaseTimes::default(),
                    });
                    out.len() - 1
                }
            };
            let k = &mut out[i];
            k.phases += 1;
            k.reused += u64::from(p.reused);
            k.warmup += p.warmup;
            k.samples += p.samples;
            k.times += p.times;
        }
        out
    }

    /// Wall time in no phase and not in the report: the VMM's stamp pairs
    /// taken natively, and the session's own bookkeeping.
    pub fn between(&self) -> Duration {
        self.total
            .saturating_sub(self.phases_total().total())
            .saturating_sub(self.assemble)
    }

    /// The guest's warm-up, estimated: each phase's run time in proportion
    /// of its warm-up iterations to all its iterations (each iteration of a
    /// phase does the same work; the VMM sees no boundary between them).
    pub fn warmup_estimate(&self) -> Duration {
        self.phases
            .iter()
            .map(|p| {
                let all = p.warmup + p.samples;
                if all == 0 {
                    return Duration::ZERO;
                }
                let share = p.warmup as f64 / all as f64;
                p.times.run.mul_f64(share)
            })
            .sum()
    }

    /// Phases that ran in an earlier phase's VM.
    pub fn reused(&self) -> usize {
        self.phases.iter().filter(|p| p.reused).count()
    }
}

/// `ticks` of a TSC at `khz` as a duration (`None` for an unknown rate).
pub fn ticks_as_duration(ticks: u64, khz: u64) -> Option<Duration> {
    (khz > 0).then(|| {
        let nanos = u128::from(ticks) * 1_000_000 / u128::from(khz);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: Kind, reused: bool, warmup: u64, samples: u64, ms: u64) -> PhaseRecord {
        let d = Duration::from_millis;
        PhaseRecord {
            kind,
            warmup,
            samples,
            reused,
            times: PhaseTimes {
                create: d(if reused { 0 } else { 5 }),
                load: d(1),
                run: d(ms),
                exits: samples + warmup + 1,
                measured_exits: samples + warmup,
                vmm_ticks: 100,
                collect: d(2),
            },
        }
    }

    #[test]
    fn phases_sum_per_kind_in_first_run_order() {
        let p = Profile {
            phases: vec![
                record(Kind::Null, false, 0, 1, 10),
                record(Kind::PioOut, true, 10, 90, 100),
                record(Kind::Null, true, 10, 90, 30),
            ],
            total: Duration::from_millis(200),
            assemble: Duration::from_millis(7),
        };
        let kinds = p.by_kind();
        assert_eq!(
            kinds.iter().map(|k| k.kind).collect::<Vec<_>>(),
            [Kind::Null, Kind::PioOut]
        );
        let null = kinds[0];
        assert_eq!((null.phases, null.reused), (2, 1));
        assert_eq!((null.warmup, null.samples), (10, 91));
        assert_eq!(null.times.run, Duration::from_millis(40));
        assert_eq!(null.times.create, Duration::from_millis(5));
        assert_eq!(null.times.exits, 1 + 1 + 100 + 1);
        assert_eq!(null.times.measured_exits, 1 + 100);
        assert_eq!(null.times.vmm_ticks, 200);
        let all = p.phases_total();
        assert_eq!(all.total(), Duration::from_millis(5 + 3 + 140 + 6));
        assert_eq!(p.between(), Duration::from_millis(200 - 154 - 7));
        assert_eq!(p.reused(), 2);
        // A tenth of the two 100-iteration phases' run times; none of the first's.
        assert_eq!(p.warmup_estimate(), Duration::from_millis(13));
    }

    #[test]
    fn ticks_convert_at_the_tsc_rate() {
        assert_eq!(
            ticks_as_duration(2_000_000, 2_000_000),
            Some(Duration::from_millis(1))
        );
        assert_eq!(ticks_as_duration(3, 1_000), Some(Duration::from_micros(3)));
        assert_eq!(ticks_as_duration(5, 0), None);
    }
}
