//! Time taken, by the wall and by the thread's CPU.

use std::time::{Duration, Instant};

/// How long a piece of work took: wall time, and the CPU time of the thread
/// that did it (what a target "on one core" means when the machine is
/// shared: a busy neighbour adds wall time, not CPU time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Took {
    pub cpu: Duration,
    pub wall: Duration,
}

/// This thread's CPU time so far.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is always there on Linux");
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Runs `work` and says how long it took.
pub fn timed<T>(work: impl FnOnce() -> T) -> (T, Took) {
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    let out = work();
    let took = Took {
        cpu: thread_cpu_time().saturating_sub(cpu),
        wall: wall.elapsed(),
    };
    (out, took)
}
