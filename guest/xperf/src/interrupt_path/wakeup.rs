//! The interrupt path as a program meets it, on any kernel and without
//! root: a cross-CPU wake-up and a timer wake-up.
//!
//! - Cross-CPU: two threads pinned to two CPUs pass a futex word back and
//!   forth, each sleeping in `FUTEX_WAIT` until the other wakes it. Waking a
//!   thread asleep on another CPU sends that CPU an IPI (in a VM: the
//!   sender's ICR write, an exit unless the APIC is virtualised, and an
//!   injection into the receiver, often out of a halt exit) and schedules
//!   the thread there. A sample is one round trip, two wake-ups, timed on
//!   the first CPU's TSC only: no tick of one CPU is subtracted from a tick
//!   of another.
//! - Timer: how late `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`
//!   returns past its deadline, with the thread's timer slack at 1 ns (the
//!   latency cyclictest measures, without its real-time priority): the
//!   timer's programming (a TSC-deadline MSR write, an exit in a VM), its
//!   interrupt and the wake-up. Nanoseconds of one clock, CLOCK_MONOTONIC.

use super::Window;
use crate::affinity::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use xvmm_host::tsc;

/// The futex word: whose turn it is, or the end.
const FIRST_TURN: u32 = 0;
const SECOND_TURN: u32 = 1;
const STOP: u32 = 2;

/// How long one `FUTEX_WAIT` sleeps before the deadline is checked again.
const WAIT_SLICE: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 50_000_000,
};

/// Sleeps while `word` holds `value` (or for [`WAIT_SLICE`]); a wake-up,
/// a changed word, a signal or the slice's end all return.
fn futex_wait(word: &AtomicU32, value: u32) {
    // SAFETY: FUTEX_WAIT on a live, aligned u32 with a valid timeout; the
    // kernel only reads both.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            value,
            &WAIT_SLICE as *const libc::timespec,
        );
    }
}

/// Wakes the thread sleeping on `word`, if one is.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32; no memory is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// The first thread: hands the turn over and sleeps until it comes back,
/// `rounds` times; each round trip's window on this CPU's TSC.
fn first(word: &AtomicU32, stop: &AtomicBool, rounds: usize, deadline: Instant) -> Vec<Window> {
    let mut out = Vec::with_capacity(rounds);
    'rounds: for _ in 0..rounds {
        let sent = tsc::open();
        word.store(SECOND_TURN, Ordering::Release);
        futex_wake(word);
        while word.load(Ordering::Acquire) == SECOND_TURN {
            if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                break 'rounds;
            }
            futex_wait(word, SECOND_TURN);
        }
        out.push(Window {
            start: sent,
            end: tsc::open(),
        });
    }
    word.store(STOP, Ordering::Release);
    futex_wake(word);
    out
}

/// The second thread: hands every turn straight back, until the end.
fn second(word: &AtomicU32, stop: &AtomicBool, deadline: Instant) {
    loop {
        match word.load(Ordering::Acquire) {
            STOP => return,
            SECOND_TURN => {
                word.store(FIRST_TURN, Ordering::Release);
                futex_wake(word);
            }
            _ if stop.load(Ordering::Relaxed) || Instant::now() > deadline => return,
            _ => futex_wait(word, FIRST_TURN),
        }
    }
}

/// `rounds` futex round trips between CPU `a` and the first of `others`
/// this process may run on, within `limit`: the other CPU and the round
/// trips' windows on `a`'s TSC. Both threads are new; the caller's CPU
/// affinity is left as it was.
pub fn cross_cpu(
    a: u32,
    others: &[u32],
    rounds: usize,
    limit: Duration,
) -> Result<(u32, Vec<Window>), String> {
    let word = AtomicU32::new(FIRST_TURN);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + limit;
    let (firsts, seconds) = std::thread::scope(|s| {
        let b = s.spawn(|| {
            let Some(b) = others.iter().copied().find(|&b| pin(Some(b)).is_ok()) else {
                stop.store(true, Ordering::Relaxed);
                return Err(format!("no CPU of {others:?} allows this process"));
            };
            second(&word, &stop, deadline);
            Ok(b)
        });
        let a = s.spawn(|| match pin(Some(a)) {
            Ok(_) => Ok(first(&word, &stop, rounds, deadline)),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                Err(e.to_string())
            }
        });
        let firsts = a
            .join()
            .unwrap_or_else(|_| Err("the first thread panicked".into()));
        let seconds = b
            .join()
            .unwrap_or_else(|_| Err("the second thread panicked".into()));
        (firsts, seconds)
    });
    let b = seconds?;
    let trips = firsts?;
    if trips.len() < rounds {
        return Err(format!(
            "only {} of {rounds} round trips between cpu{a} and cpu{b} within {} s",
            trips.len(),
            limit.as_secs()
        ));
    }
    Ok((b, trips))
}

/// CLOCK_MONOTONIC now, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Sleeps until CLOCK_MONOTONIC reads `deadline_ns` (again after a signal).
fn sleep_until(deadline_ns: u64) {
    let deadline = libc::timespec {
        tv_sec: libc::time_t::try_from(deadline_ns / 1_000_000_000).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::try_from(deadline_ns % 1_000_000_000).unwrap_or(0),
    };
    // SAFETY: reads one timespec we own; no remainder with TIMER_ABSTIME.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &deadline,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

/// The calling thread's timer slack set to 1 ns (0 would mean "the
/// default"), put back when dropped.
struct TightTimerSlack(libc::c_int);

impl TightTimerSlack {
    fn set() -> TightTimerSlack {
        // SAFETY: prctl with integer arguments on this thread only.
        let before = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        TightTimerSlack(before)
    }
}

impl Drop for TightTimerSlack {
    fn drop(&mut self) {
        let before = libc::c_ulong::try_from(self.0).unwrap_or(0);
        // SAFETY: as in `set`.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, before, 0, 0, 0) };
    }
}

/// How far ahead each timer sleep's deadline is.
pub const TIMER_PERIOD: Duration = Duration::from_micros(200);

/// `samples` sleeps of `period` to an absolute deadline: each one's
/// window on this CPU's TSC, from before the deadline is read to after the
/// call returns (the thread must be pinned: both reads on one CPU).
pub fn timer_sleeps(samples: usize, period: Duration) -> Vec<Window> {
    let _slack = TightTimerSlack::set();
    let period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    (0..samples)
        .map(|_| {
            let start = tsc::open();
            sleep_until(monotonic_ns().saturating_add(period));
            Window {
                start,
                end: tsc::open(),
            }
        })
        .collect()
}

/// `samples` sleeps of `period` to an absolute deadline: how late each
/// woke, in nanoseconds.
pub fn timer_lateness(samples: usize, period: Duration) -> Vec<u64> {
    let _slack = TightTimerSlack::set();
    let period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    (0..samples)
        .map(|_| {
            let deadline = monotonic_ns().saturating_add(period);
            sleep_until(deadline);
            monotonic_ns().saturating_sub(deadline)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's timer slack, in ns.
    fn timer_slack() -> libc::c_int {
        // SAFETY: reads this thread's timer slack.
        unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }
    }

    /// This process's voluntary context switches so far.
    fn voluntary_switches() -> i64 {
        // SAFETY: an all-zero rusage is valid; getrusage fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: writes one rusage we own.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
        usage.ru_nvcsw
    }

    fn online() -> Vec<u32> {
        crate::affinity::online_cpus()
    }

    /// Every round trip is two wake-ups: each at least a futex call and a
    /// schedule, so far more than a TSC read; none lost, none left over.
    #[test]
    fn a_cross_cpu_round_trip_takes_both_threads_turns() {
        let cpus = online();
        if cpus.len() < 2 {
            println!("one CPU online: nothing to wake across");
            return;
        }
        let (switches, started) = (voluntary_switches(), Instant::now());
        let (b, trips) = cross_cpu(cpus[0], &cpus[1..], 200, Duration::from_secs(20)).unwrap();
        // The threads slept (a pair that spins switches nothing; one that
        // sleeps does so in most round trips, though on a loaded machine a
        // turn can come back before its thread went to sleep), and each
        // was woken: not by the 50 ms slice's end.
        let slept = voluntary_switches() - switches;
        assert!(slept >= 50, "{slept} voluntary switches in 200 round trips");
        // (Woken only by the slice's end, 200 round trips take 10 s or
        // more; a loaded machine takes well under a second.)
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(b, cpus[1]);
        assert_eq!(trips.len(), 200);
        let mut sorted = super::super::ticks(&trips);
        sorted.sort_unstable();
        // Each window is on one CPU's TSC, in time order.
        assert!(
            trips.windows(2).all(|w| w[0].end <= w[1].start),
            "{trips:?}"
        );
        // Two futex system calls at least, each hundreds of ticks.
        assert!(sorted[100] > 500, "median {} ticks", sorted[100]);
    }

    /// A CPU this process may not use is skipped for the next; none at all
    /// is an error that names them, and nothing hangs.
    #[test]
    fn the_other_cpu_is_one_this_process_may_use() {
        let cpus = online();
        let beyond = libc::CPU_SETSIZE as u32 - 1;
        if cpus.len() >= 2 {
            let (b, trips) =
                cross_cpu(cpus[0], &[beyond, cpus[1]], 5, Duration::from_secs(20)).unwrap();
            assert_eq!((b, trips.len()), (cpus[1], 5));
        }
        // Either side failing to pin stops the other at once, not at the
        // deadline.
        let started = Instant::now();
        let e = cross_cpu(cpus[0], &[beyond], 5, Duration::from_secs(20)).unwrap_err();
        assert!(e.contains(&format!("[{beyond}]")), "{e}");
        let e = cross_cpu(beyond, &cpus, 5, Duration::from_secs(20)).unwrap_err();
        assert!(e.contains(&format!("CPU {beyond}")), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// Round trips the deadline cut short are an error, not a short list.
    #[test]
    fn fewer_round_trips_than_asked_for_are_an_error() {
        let cpus = online();
        let others = if cpus.len() >= 2 {
            &cpus[1..]
        } else {
            &cpus[..]
        };
        let e = cross_cpu(cpus[0], others, 100_000, Duration::ZERO).unwrap_err();
        assert!(e.contains("of 100000 round trips between"), "{e}");
    }

    /// A partner that never answers costs the deadline, not a hang: each
    /// side gives up once it passes, the first ending the exchange.
    #[test]
    fn each_side_gives_up_at_the_deadline() {
        let (word, stop) = (AtomicU32::new(FIRST_TURN), AtomicBool::new(false));
        let started = Instant::now();
        let trips = first(&word, &stop, 3, started + Duration::from_millis(100));
        assert!(trips.is_empty(), "{trips:?}");
        assert_eq!(word.load(Ordering::Relaxed), STOP);
        word.store(FIRST_TURN, Ordering::Relaxed);
        second(&word, &stop, started + Duration::from_millis(200));
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// Each sleep ends after its deadline; the slack is back afterwards.
    #[test]
    fn a_timer_wakes_after_its_deadline_and_the_slack_is_restored() {
        let before = timer_slack();
        let started = Instant::now();
        let late = timer_lateness(20, Duration::from_millis(2));
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert_eq!(late.len(), 20);
        // Late by less than a whole period in most samples (a loaded
        // machine can delay any one).
        let mut sorted = late.clone();
        sorted.sort_unstable();
        assert!(sorted[10] < 2_000_000, "median {} ns late", sorted[10]);
        assert_eq!(timer_slack(), before);
    }

    #[test]
    fn the_slack_is_one_nanosecond_while_measuring() {
        let slack = TightTimerSlack::set();
        assert_eq!(timer_slack(), 1);
        drop(slack);
    }
}
