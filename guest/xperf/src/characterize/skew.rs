//! Cross-CPU TSC skew by ping-pong: a thread on CPU `a` stamps `t1` and
//! pings; a thread on CPU `b` sees the ping, stamps `t2` and pongs; `a` sees
//! the pong and stamps `t3`. Causality gives `t1 < t2 < t3` in true time, so
//! B's offset from A lies in `[t2 - t3, t2 - t1]`; the tightest bounds over
//! all rounds bound the skew. Bounds that contradict each other mean the two
//! TSCs are not one clock (a warp).

use crate::affinity::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xvmm_host::tsc;

/// One round's three stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
}

/// What the rounds of one pair say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skew {
    /// |t2 - (t1 + t3) / 2| per round: the offset estimate's size, ticks.
    pub estimates: Vec<u64>,
    /// Tightest lower and upper bound on B - A, ticks.
    pub lower: i128,
    pub upper: i128,
}

impl Skew {
    pub fn from_rounds(rounds: &[Round]) -> Option<Skew> {
        if rounds.is_empty() {
            return None;
        }
        let (mut lower, mut upper) = (i128::MIN, i128::MAX);
        let mut estimates = Vec::with_capacity(rounds.len());
        for r in rounds {
            let (t1, t2, t3) = (i128::from(r.t1), i128::from(r.t2), i128::from(r.t3));
            lower = lower.max(t2 - t3);
            upper = upper.min(t2 - t1);
            let mid = t2 - (t1 + t3) / 2;
            estimates.push(u64::try_from(mid.unsigned_abs()).unwrap_or(u64::MAX));
        }
        Some(Skew {
            estimates,
            lower,
            upper,
        })
    }

    /// The bounds in words.
    pub fn describe(&self, a: u32, b: u32) -> String {
        if self.lower <= self.upper {
            format!(
                "TSC of cpu{b} minus cpu{a} lies in [{}, {}] ticks (tightest of {} ping-pong rounds)",
                self.lower,
                self.upper,
                self.estimates.len()
            )
        } else {
            format!(
                "the bounds contradict each other ([{}, {}] over {} rounds): the two TSCs are not one clock (warp)",
                self.lower,
                self.upper,
                self.estimates.len()
            )
        }
    }
}

/// A cache line of its own, so the two flags do not share one.
#[repr(align(64))]
#[derive(Default)]
struct Line(AtomicU64);

#[derive(Default)]
struct Shared {
    ping: Line,
    pong: Line,
    t2: Line,
    abort: AtomicBool,
}

/// Spins until `cell` holds `want`; false after `deadline` or an abort.
fn wait_for(cell: &AtomicU64, want: u64, shared: &Shared, deadline: Instant) -> bool {
    let mut spins = 0u32;
    while cell.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096)
            && (Instant::now() > deadline || shared.abort.load(Ordering::Relaxed))
        {
            shared.abort.store(true, Ordering::Relaxed);
            return false;
        }
    }
    true
}

fn pinger(shared: &Shared, rounds: u64, deadline: Instant) -> Vec<Round> {
    let mut out = Vec::with_capacity(xvmm_results::num::usize_from(rounds));
    for r in 1..=rounds {
        let t1 = tsc::open();
        shared.ping.0.store(r, Ordering::Release);
        if !wait_for(&shared.pong.0, r, shared, deadline) {
            break;
        }
        let t3 = tsc::open();
        let t2 = shared.t2.0.load(Ordering::Relaxed);
        out.push(Round { t1, t2, t3 });
    }
    out
}

fn ponger(shared: &Shared, rounds: u64, deadline: Instant) {
    for r in 1..=rounds {
        if !wait_for(&shared.ping.0, r, shared, deadline) {
            return;
        }
        let t2 = tsc::open();
        shared.t2.0.store(t2, Ordering::Relaxed);
        shared.pong.0.store(r, Ordering::Release);
    }
}

/// `rounds` ping-pong rounds between CPUs `a` and `b`, within `limit`.
pub fn ping_pong(a: u32, b: u32, rounds: u64, limit: Duration) -> Result<Vec<Round>, String> {
    let shared = Shared::default();
    let deadline = Instant::now() + limit;
    let (pinged, ponged) = std::thread::scope(|s| {
        let pong = s.spawn(|| {
            pin(Some(b)).map_err(|e| {
                shared.abort.store(true, Ordering::Relaxed);
                e.to_string()
            })?;
            ponger(&shared, rounds, deadline);
            Ok::<(), String>(())
        });
        let ping = s.spawn(|| {
            pin(Some(a)).map_err(|e| {
                shared.abort.store(true, Ordering::Relaxed);
                e.to_string()
            })?;
            Ok::<Vec<Round>, String>(pinger(&shared, rounds, deadline))
        });
        let pinged = ping
            .join()
            .unwrap_or_else(|_| Err("ping thread panicked".into()));
        if pinged.is_err() {
            shared.abort.store(true, Ordering::Relaxed);
        }
        let ponged = pong
            .join()
            .unwrap_or_else(|_| Err("pong thread panicked".into()));
        (pinged, ponged)
    });
    ponged?;
    let done = pinged?;
    if (done.len() as u64) < rounds {
        return Err(format!(
            "only {} of {rounds} rounds between cpu{a} and cpu{b} within {} s",
            done.len(),
            limit.as_secs()
        ));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_come_from_the_tightest_rounds() {
        // B runs 100 ticks ahead of A; message latencies vary.
        let rounds = [
            Round {
                t1: 1000,
                t2: 1150,
                t3: 1100,
            },
            Round {
                t1: 2000,
                t2: 2130,
                t3: 2060,
            },
            Round {
                t1: 3000,
                t2: 3200,
                t3: 3300,
            },
        ];
        let s = Skew::from_rounds(&rounds).unwrap();
        assert_eq!((s.lower, s.upper), (70, 130));
        assert_eq!(s.estimates, [100, 100, 50]);
        assert!(s.describe(0, 1).contains("lies in [70, 130]"));
        let warp = [
            Round {
                t1: 10,
                t2: 500,
                t3: 20,
            },
            Round {
                t1: 30,
                t2: 0,
                t3: 40,
            },
        ];
        let w = Skew::from_rounds(&warp).unwrap();
        assert!(w.lower > w.upper);
        assert!(w.describe(0, 1).contains("warp"));
        assert_eq!(Skew::from_rounds(&[]), None);
        let extreme = [Round {
            t1: u64::MAX,
            t2: 0,
            t3: u64::MAX,
        }];
        assert_eq!(Skew::from_rounds(&extreme).unwrap().estimates, [u64::MAX]);
    }

    #[test]
    fn ping_pong_between_two_cpus_when_there_are_two() {
        let cpus = super::super::facts::parse_cpu_list(&super::super::facts::read_trimmed(
            "/sys/devices/system/cpu/online",
        ));
        let (Some(&a), Some(&b)) = (cpus.first(), cpus.get(1)) else {
            return; // one CPU: nothing to pair (the caller reports why)
        };
        let rounds = ping_pong(a, b, 200, Duration::from_secs(20)).unwrap();
        assert_eq!(rounds.len(), 200);
        assert!(rounds.iter().all(|r| r.t1 < r.t3));
        let skew = Skew::from_rounds(&rounds).unwrap();
        // This machine's TSCs are one clock: the bounds must hold each other.
        assert!(skew.lower <= skew.upper, "{}", skew.describe(a, b));
        let err = ping_pong(a, 1 << 20, 10, Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("CPU"), "{err}");
    }

    /// `wait_for` on a cell that never changes, from another thread; None
    /// if it has not given up within 10 s (it is then aborted).
    fn gives_up(shared: &Shared, deadline: Instant) -> Option<bool> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(wait_for(&AtomicU64::new(0), 1, shared, deadline)));
            let got = rx.recv_timeout(Duration::from_secs(10)).ok();
            shared.abort.store(true, Ordering::Relaxed);
            got
        })
    }

    #[test]
    fn a_wait_gives_up_at_the_deadline_and_tells_the_other_side() {
        let shared = Shared::default();
        let past = Instant::now();
        assert_eq!(gives_up(&shared, past), Some(false));
        assert!(shared.abort.load(Ordering::Relaxed));
    }

    #[test]
    fn a_wait_gives_up_when_the_other_side_aborts() {
        let shared = Shared::default();
        shared.abort.store(true, Ordering::Relaxed);
        let later = Instant::now() + Duration::from_secs(20);
        assert_eq!(gives_up(&shared, later), Some(false));
    }

    #[test]
    fn too_few_rounds_within_the_limit_is_an_error() {
        let cpus = super::super::facts::parse_cpu_list(&super::super::facts::read_trimmed(
            "/sys/devices/system/cpu/online",
        ));
        let a = cpus.first().copied().unwrap_or(0);
        // Both threads on one CPU: each round waits for the scheduler to
        // switch threads, so 200 rounds never fit in a millisecond.
        let err = ping_pong(a, a, 200, Duration::from_millis(1)).unwrap_err();
        assert!(err.contains("of 200 rounds between"), "{err}");
    }
}
