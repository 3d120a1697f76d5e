//! The interrupt path as a program meets it, on two CPUs and any kernel,
//! without root: a futex wake-up of a thread asleep on another CPU
//! ([`wakeup`]), a TLB shootdown ([`shootdown`]) and the timer wake-up.
//! `xperf characterize` reports them as metrics; `xperf --interrupt-path`
//! adds them to its crossings ([`crossings`]) as round trips whose stamps a
//! VMM joins with its exits: for the cross-CPU ones those of every vCPU, so
//! that the IPI's exit on the sender and the receiver's wake-up both land
//! in the sample.

pub mod shootdown;
pub mod wakeup;

use std::time::Duration;
use xvmm_results::{names, Crossing, Sample, UNFILLED};

/// One sample: the TSC before and after, both read on one CPU (no tick of
/// one CPU is subtracted from a tick of another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub end: u64,
}

impl Window {
    pub fn ticks(self) -> u64 {
        self.end.wrapping_sub(self.start)
    }

    /// The window as a round-trip sample taken on `cpu`: user stamps only.
    fn sample(self, cpu: u32) -> Sample {
        Sample {
            u2k_u: self.start,
            u2k_k: UNFILLED,
            k2u_k: UNFILLED,
            k2u_u: self.end,
            cpu: Some(cpu),
            interrupts: None,
        }
    }
}

/// Each window's length in ticks.
pub fn ticks(windows: &[Window]) -> Vec<u64> {
    windows.iter().map(|w| w.ticks()).collect()
}

/// Samples per round at most, and how long one round of one kind may take.
pub const MAX_SAMPLES_PER_ROUND: u64 = 10_000;
const ROUND_LIMIT: Duration = Duration::from_secs(60);

/// What [`crossings`] measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Samples per round (at most [`MAX_SAMPLES_PER_ROUND`] are taken).
    pub samples: u64,
    pub rounds: u32,
    /// The measuring CPU, and the CPUs the other thread may take.
    pub cpu: u32,
    pub others: Vec<u32>,
    /// Ticks the user stamp pair adds to a round trip.
    pub correction: u64,
    /// Keep every sample's stamps.
    pub raw: bool,
}

/// The rounds of one kind: each round's windows, and the other CPU.
struct Taken {
    rounds: Vec<Vec<Window>>,
    other: u32,
}

/// `wakeup-cross-cpu`, `mprotect-shootdown`, `mprotect-local` and
/// `timer-sleep` as round-trip crossings, each round with new threads; a
/// kind that cannot be taken (no other CPU for the first three, a CPU this
/// process may not use, a round too slow) is unsupported with the reason.
/// Also the notes that say where they ran.
pub fn crossings(plan: &Plan) -> (Vec<Crossing>, Vec<String>) {
    let per_round = plan.samples.clamp(1, MAX_SAMPLES_PER_ROUND);
    let n = xvmm_results::num::usize_from(per_round);
    let rounds = plan.rounds.max(1);
    let (wakeups, shootdowns) = if plan.others.is_empty() {
        let why = format!("only cpu{} is online: no other CPU", plan.cpu);
        (Err(why.clone()), Err(why))
    } else {
        let wakeups = take(rounds, |_| {
            wakeup::cross_cpu(plan.cpu, &plan.others, n, ROUND_LIMIT)
                .map(|(other, w)| (other, vec![w]))
        });
        let shootdowns = take(rounds, |_| {
            shootdown::tlb_shootdown(plan.cpu, &plan.others, n, ROUND_LIMIT)
                .map(|m| (m.other, vec![m.remote, m.local]))
        });
        (wakeups, shootdowns)
    };
    let timer = take(rounds, |_| timer_round(plan.cpu, n));
    let mut notes = Vec::new();
    let mut out = Vec::new();
    let kinds = [
        (names::WAKEUP_CROSS_CPU, &wakeups, 0, true),
        (names::MPROTECT_SHOOTDOWN, &shootdowns, 0, true),
        (names::MPROTECT_LOCAL, &shootdowns, 1, false),
        (names::TIMER_SLEEP, &timer, 0, false),
    ];
    for (name, taken, part, spans) in kinds {
        out.push(match taken {
            Ok(t) => {
                if part == 0 {
                    notes.push(note(name, plan.cpu, t[part].other));
                }
                crossing(name, per_round, t, part, plan, spans)
            }
            Err(why) => {
                let requested = per_round.saturating_mul(u64::from(rounds));
                Crossing::unsupported(name, requested, why.clone())
            }
        });
    }
    (out, notes)
}

/// One round of timer sleeps on a new thread pinned to `cpu`.
fn timer_round(cpu: u32, n: usize) -> Result<(u32, Vec<Vec<Window>>), String> {
    std::thread::scope(|s| {
        let sleeper = s.spawn(|| {
            crate::affinity::pin(Some(cpu)).map_err(|e| e.to_string())?;
            Ok((cpu, vec![wakeup::timer_sleeps(n, wakeup::TIMER_PERIOD)]))
        });
        sleeper
            .join()
            .unwrap_or_else(|_| Err("the timer thread panicked".into()))
    })
}

/// `rounds` rounds of `one`, which gives the other CPU and the round's
/// windows of each part; the first failure ends them.
fn take(
    rounds: u32,
    one: impl Fn(u32) -> Result<(u32, Vec<Vec<Window>>), String>,
) -> Result<Vec<Taken>, String> {
    let mut parts: Vec<Taken> = Vec::new();
    for r in 0..rounds {
        let (other, windows) = one(r)?;
        if parts.is_empty() {
            parts = windows
                .iter()
                .map(|_| Taken {
                    rounds: Vec::new(),
                    other,
                })
                .collect();
        }
        for (p, w) in parts.iter_mut().zip(windows) {
            p.rounds.push(w);
        }
    }
    Ok(parts)
}

/// Part `part` of the rounds taken, as a round-trip crossing.
fn crossing(
    name: &str,
    per_round: u64,
    taken: &[Taken],
    part: usize,
    plan: &Plan,
    spans_cpus: bool,
) -> Crossing {
    let t = &taken[part];
    let values: Vec<Vec<u64>> = t.rounds.iter().map(|r| ticks(r)).collect();
    let views: Vec<&[u64]> = values.iter().map(Vec::as_slice).collect();
    let reason = format!(
        "a round trip timed on cpu{}'s TSC: no kernel stamps inside it",
        plan.cpu
    );
    let mut c = Crossing::from_round_trip_rounds(name, per_round, &views, plan.correction, reason);
    c.spans_cpus = spans_cpus;
    if plan.raw {
        let samples = t.rounds.iter().flatten().map(|w| w.sample(plan.cpu));
        c.samples = Some(samples.collect());
    }
    c
}

fn note(name: &str, cpu: u32, other: u32) -> String {
    match name {
        names::WAKEUP_CROSS_CPU => format!(
            "{name}: a futex ping-pong between cpu{cpu} and cpu{other}; a sample is two \
             wake-ups of a thread asleep on the other CPU (an IPI and a schedule each)"
        ),
        names::MPROTECT_SHOOTDOWN => format!(
            "{name}: mprotect of a page read-only and back on cpu{cpu} while a thread reads it \
             on cpu{other} (each call flushes cpu{other}'s TLB); mprotect-local: the same pair \
             before that thread started"
        ),
        _ => format!(
            "{name}: clock_nanosleep to an absolute CLOCK_MONOTONIC deadline {} us ahead on \
             cpu{cpu}, timer slack 1 ns, timed from before the deadline is read to after the \
             call returns: the period, the timer's lateness and the calls",
            wakeup::TIMER_PERIOD.as_micros()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::Status;

    fn online() -> Vec<u32> {
        crate::affinity::online_cpus()
    }

    fn plan(others: Vec<u32>) -> Plan {
        Plan {
            samples: 20,
            rounds: 2,
            cpu: online()[0],
            others,
            correction: 7,
            raw: true,
        }
    }

    /// Two rounds of each kind on this machine's first two CPUs: every
    /// sample valid, kept raw on the measuring CPU in time order, the
    /// correction subtracted, and only the cross-CPU kinds marked as
    /// spanning CPUs.
    #[test]
    fn each_kind_is_a_round_trip_crossing_of_every_round() {
        let Some(&other) = online().get(1) else {
            println!("one CPU online: nothing to cross to");
            return;
        };
        let p = plan(vec![other]);
        let (crossings, notes) = crossings(&p);
        let names: Vec<&str> = crossings.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                names::WAKEUP_CROSS_CPU,
                names::MPROTECT_SHOOTDOWN,
                names::MPROTECT_LOCAL,
                names::TIMER_SLEEP
            ]
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("wakeup-cross-cpu: a futex"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("mprotect-shootdown: mprotect"),
            "{notes:?}"
        );
        assert!(
            notes[2].starts_with("timer-sleep: clock_nanosleep"),
            "{notes:?}"
        );
        assert!(
            notes[..2]
                .iter()
                .all(|n| n.contains(&format!("cpu{other}"))),
            "{notes:?}"
        );
        for c in &crossings {
            assert!(matches!(c.status, Status::RoundTripOnly { .. }), "{c:?}");
            assert_eq!(
                (c.samples_requested, c.samples_valid),
                (40, 40),
                "{}",
                c.name
            );
            let spans = [names::WAKEUP_CROSS_CPU, names::MPROTECT_SHOOTDOWN];
            assert_eq!(c.spans_cpus, spans.contains(&c.name.as_str()));
            let rt = c.round_trip.as_ref().unwrap();
            assert_eq!(rt.correction, Some(7));
            let samples = c.samples.as_ref().unwrap();
            assert_eq!(samples.len(), 40);
            assert!(samples.iter().all(|s| s.cpu == Some(p.cpu)
                && s.u2k_k == UNFILLED
                && s.k2u_k == UNFILLED
                && s.u2k_u < s.k2u_u));
            let mut values: Vec<u64> = samples.iter().map(|s| s.k2u_u - s.u2k_u - 7).collect();
            values.sort_unstable();
            assert!(
                rt.corrected.min == values[0] && rt.corrected.max == values[39],
                "{}: {:?} against {values:?}",
                c.name,
                rt.corrected
            );
        }
        // A sleep lasts its period at least: 200 us is 200 ticks a MHz.
        let khz = xvmm_host::tsc::calibrate_khz(std::time::Duration::from_millis(20));
        let sleep = crossings[3].round_trip.as_ref().unwrap().corrected.min;
        assert!(
            sleep * 1000 >= khz * 200 * 9 / 10,
            "{sleep} ticks at {khz} kHz"
        );
    }

    /// No other CPU, or none this process may use: every cross-CPU kind
    /// unsupported, with the reason, and nothing measured; the timer
    /// sleep, on one CPU, still measured.
    #[test]
    fn without_a_usable_other_cpu_every_kind_says_why() {
        let (mut none, notes) = crossings(&plan(Vec::new()));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let beyond = libc::CPU_SETSIZE as u32 - 1;
        let (mut unusable, _) = crossings(&plan(vec![beyond]));
        for timer in [none.pop().unwrap(), unusable.pop().unwrap()] {
            assert_eq!(timer.name, names::TIMER_SLEEP);
            assert_eq!(timer.samples_valid, 40);
        }
        for (c, why) in none
            .iter()
            .map(|c| (c, "is online: no other CPU".to_string()))
            .chain(unusable.iter().map(|c| (c, format!("[{beyond}]"))))
        {
            assert!(
                matches!(&c.status, Status::Unsupported { reason } if reason.contains(&why)),
                "{}: {:?}",
                c.name,
                c.status
            );
            assert_eq!((c.samples_requested, c.samples_valid), (40, 0));
            assert!(c.round_trip.is_none() && c.samples.is_none());
        }
    }
}
