//! xperf's getppid round trip against its peers, like for like: a loop of
//! the bare `syscall` instruction xperf times (the test's own, whose loop
//! is known), and `perf bench syscall basic` (Debian's linux-perf), whose
//! loop goes through glibc's `getppid()`, against the same loop written
//! here. Each pair must agree within 15 % once both are in TSC ticks.
//! perf reports microseconds per call (a mean over its loop); ticks =
//! usecs/op * TSC kHz / 1000. Its fastest of several short runs is used: a
//! run's mean absorbs every preemption on a busy machine, xperf's median
//! does not.

use std::arch::asm;
use std::process::Command;

/// Short perf runs (~4 ms each) so that some fit between other tasks' slices.
pub const PERF_LOOPS: u64 = 20_000;
/// Even shorter runs (~1 ms) for the check: on a machine loaded by other
/// builds, 4 ms runs are rarely left alone (measured: fastest 4 ms run 550
/// ticks, fastest 1 ms run 504, under a load average of 9 on 2 CPUs).
pub const CHECK_LOOPS: u64 = 5_000;
pub const TOLERANCE: f64 = 0.15;

/// getppid through a bare `syscall`, as xperf issues it.
#[inline(always)]
pub fn raw_getppid() {
    // SAFETY: getppid has no arguments or side effects; clobbers declared.
    unsafe {
        asm!("syscall", inlateout("rax") libc::SYS_getppid => _,
             out("rcx") _, out("r11") _, options(nostack));
    }
}

/// getppid through glibc's `getppid()`, as `perf bench syscall basic`'s
/// loop calls it: the wrapper's call, return and register moves come on
/// top of the `syscall` itself.
#[inline(never)]
pub fn wrapped_getppid() {
    // SAFETY: getppid has no arguments or side effects.
    std::hint::black_box(unsafe { libc::getppid() });
}

/// Fastest per-call cost in TSC ticks of `loops` back-to-back calls, over
/// `runs` runs: perf's own loop, timed with the TSC instead.
pub fn loop_ticks(call: impl Fn(), runs: usize, loops: u64) -> u64 {
    let mut best = u64::MAX;
    for _ in 0..runs {
        let start = xvmm_host::tsc::open();
        for _ in 0..loops {
            call();
        }
        let (end, _) = xvmm_host::tsc::close();
        best = best.min(end.saturating_sub(start) / loops.max(1));
    }
    best
}

/// The "usecs/op" figure of `perf bench syscall basic` output.
pub fn parse_usecs_per_op(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.trim().strip_suffix("usecs/op"))
        .and_then(|v| v.trim().parse().ok())
}

/// One `perf bench syscall basic` run of `loops` calls: usecs per call.
pub fn perf_usecs_per_op(loops: u64) -> Result<f64, String> {
    let out = Command::new("perf")
        .args(["bench", "syscall", "basic", "-l", &loops.to_string()])
        .output()
        .map_err(|e| {
            format!(
                "cannot run perf: {e} (Debian package linux-perf, installed by harness/setup.sh)"
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "perf bench failed: {}",
            err.lines().next().unwrap_or("")
        ));
    }
    parse_usecs_per_op(&text).ok_or_else(|| "no usecs/op in perf's output".to_string())
}

/// The fastest of `runs` perf runs of `loops` calls, in TSC ticks per call.
pub fn perf_fastest_ticks(runs: usize, loops: u64, tsc_khz: u64) -> Result<f64, String> {
    let mut best = f64::MAX;
    for _ in 0..runs {
        best = best.min(perf_usecs_per_op(loops)?);
    }
    Ok(best * tsc_khz as f64 / 1000.0)
}

/// Relative difference of `b` from `a`.
pub fn relative(a: f64, b: f64) -> f64 {
    (b - a) / a.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_bench_output() {
        let text = "# Running 'syscall/basic' benchmark:\n# Executed 10000000 getppid() calls\n     Total time: 2.198 [sec]\n\n       0.219895 usecs/op\n        4547618 ops/sec\n";
        assert_eq!(parse_usecs_per_op(text), Some(0.219895));
        assert_eq!(parse_usecs_per_op("Total time: 2 [sec]"), None);
    }
}
