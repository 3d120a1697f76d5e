//! Instructions and calls timed from user space: `cpuid`, `rdtsc`, `rdtscp`,
//! `pause`, `clock_gettime` through libc (the vDSO when the clocksource
//! allows it) and as a raw system call; and what their costs mean.
//!
//! Each sample is the stamp pair of [`crate::stamp`] around the work, minus
//! the null measurement's median (saturating at 0), as for the crossings.

use xvmm_host::tsc;

/// Above this many ticks (null subtracted) an instruction that costs tens of
/// cycles natively is taken as trapped or emulated.
pub const TRAP_TICKS: u64 = 300;
/// Pauses per chunk of a pause-loop burst, and chunks per burst: 64 x 128 =
/// 8192 pauses, past Intel's PLE window (4096 cycles) and AMD's pause filter
/// count (3000 pauses), so a hypervisor that intercepts spinning does so.
pub const PAUSES_PER_CHUNK: u32 = 128;
pub const CHUNKS_PER_BURST: usize = 64;

/// `n` samples of `pair` after `warmup` unrecorded ones, `null` subtracted.
pub fn sample(
    n: usize,
    warmup: usize,
    null: u64,
    mut pair: impl FnMut() -> (u64, u64),
) -> Vec<u64> {
    for _ in 0..warmup {
        std::hint::black_box(pair());
    }
    let mut out = vec![u64::MAX; n];
    for slot in out.iter_mut() {
        let (open, close) = pair();
        *slot = close.saturating_sub(open).saturating_sub(null);
    }
    out
}

/// `clock_gettime(CLOCK_MONOTONIC)` through libc: glibc takes the vDSO when
/// the clocksource supports it, a system call otherwise.
pub fn clock_gettime_libc() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let open = tsc::open();
    // SAFETY: a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let (close, _) = tsc::close();
    std::hint::black_box(ts);
    (open, close)
}

/// `clock_gettime(CLOCK_MONOTONIC)` as a system call, always.
pub fn clock_gettime_syscall() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let open = tsc::open();
    // SAFETY: clock_gettime with a valid timespec to write.
    unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    let (close, _) = tsc::close();
    std::hint::black_box(ts);
    (open, close)
}

/// Whether the kernel mapped a vDSO into this process.
pub fn vdso_mapped() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector.
    unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) != 0 }
}

/// What the two clock_gettime medians say about the vDSO.
pub fn vdso_verdict(
    libc_median: u64,
    syscall_median: u64,
    mapped: bool,
    clocksource: &str,
) -> String {
    let source = if clocksource.is_empty() {
        "the clocksource".to_string()
    } else {
        format!("clocksource {clocksource}")
    };
    if !mapped {
        return "no vDSO is mapped (AT_SYSINFO_EHDR is 0): every clock_gettime is a system call"
            .into();
    }
    if libc_median.saturating_mul(2) < syscall_median {
        format!(
            "served by the vDSO without a system call ({libc_median} vs {syscall_median} ticks)"
        )
    } else {
        format!(
            "falls back to a system call: {source} has no vDSO support ({libc_median} vs {syscall_median} ticks)"
        )
    }
}

/// `prctl(PR_GET_TSC)`: whether user-mode RDTSC is allowed at all.
pub fn tsc_allowed_text() -> String {
    let mut mode: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer.
    let ret = unsafe { libc::prctl(libc::PR_GET_TSC, &mut mode as *mut libc::c_int) };
    tsc_mode_text(if ret == 0 {
        Ok(mode)
    } else {
        Err(std::io::Error::last_os_error())
    })
}

/// What PR_GET_TSC's mode (or its error) means.
fn tsc_mode_text(mode: std::io::Result<libc::c_int>) -> String {
    match mode {
        Ok(libc::PR_TSC_ENABLE) => "allowed at CPL3 (PR_GET_TSC: enabled)".into(),
        Ok(libc::PR_TSC_SIGSEGV) => "faults at CPL3 (PR_GET_TSC: SIGSEGV, CR4.TSD set)".into(),
        Ok(other) => format!("PR_GET_TSC gave mode {other}"),
        Err(e) => format!("PR_GET_TSC failed: {e}"),
    }
}

/// Whether an instruction that costs tens of cycles natively trapped, from
/// its median and (under a hypervisor) the cpuid exit's median.
pub fn trap_verdict(median: u64, cpuid_exit: Option<u64>) -> String {
    match cpuid_exit {
        Some(exit) if exit > TRAP_TICKS && median.saturating_mul(2) >= exit => {
            format!("traps: {median} ticks, as much as half a cpuid exit ({exit}) or more")
        }
        _ if median > TRAP_TICKS => {
            format!("slow: {median} ticks (over {TRAP_TICKS}): trapped or emulated")
        }
        _ => format!("does not trap: {median} ticks (native cost, at most {TRAP_TICKS})"),
    }
}

/// What the cpuid round trip means. A VM exit costs far more than
/// [`TRAP_TICKS`] on any hardware; a hypervisor under which cpuid is that
/// cheap does not exit on it (an emulator such as QEMU TCG runs it inline).
pub fn cpuid_verdict(median: u64, hypervisor: &str) -> String {
    if hypervisor.is_empty() {
        format!("no hypervisor seen: cpuid runs natively ({median} ticks)")
    } else if median <= TRAP_TICKS {
        format!(
            "only {median} ticks under {hypervisor:?}: too cheap for a VM exit; this hypervisor \
             emulates cpuid inline (as QEMU TCG does), so no exit cost can be read here"
        )
    } else {
        format!(
            "exits to the hypervisor ({hypervisor:?}) every time: {median} ticks per round trip, \
             the cheapest VM exit user space can time"
        )
    }
}

/// Per-chunk costs of one burst: [`CHUNKS_PER_BURST`] chunks of `pair`.
pub fn burst(null: u64, mut pair: impl FnMut() -> (u64, u64)) -> Vec<u64> {
    (0..CHUNKS_PER_BURST)
        .map(|_| {
            let (open, close) = pair();
            close.saturating_sub(open).saturating_sub(null)
        })
        .collect()
}

/// Median of `values` (0 for none).
pub fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

/// Chunks of a burst that took `extra` ticks or more over its median: an
/// exit (when `extra` is about an exit's cost), or an interrupt.
pub fn spikes(chunks: &[u64], extra: u64) -> usize {
    let threshold = median(chunks).saturating_add(extra);
    chunks.iter().filter(|&&c| c > threshold).count()
}

/// What the pause bursts and their control loops gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseLoops {
    pub bursts: usize,
    /// Ticks over a burst's median that make a chunk a spike.
    pub extra: u64,
    pub pause_spikes: usize,
    pub control_spikes: usize,
    /// Median of every pause chunk, and of every control loop.
    pub pause_median: u64,
    pub control_median: u64,
}

impl PauseLoops {
    /// Sums `bursts` (each a burst of pause chunks and its control loops):
    /// spikes counted per burst against that burst's own median.
    pub fn from_bursts(bursts: &[(Vec<u64>, Vec<u64>)], extra: u64) -> PauseLoops {
        let (mut pause_spikes, mut control_spikes) = (0, 0);
        let (mut chunks, mut controls) = (Vec::new(), Vec::new());
        for (pause, control) in bursts {
            pause_spikes += spikes(pause, extra);
            control_spikes += spikes(control, extra);
            chunks.extend_from_slice(pause);
            controls.extend_from_slice(control);
        }
        PauseLoops {
            bursts: bursts.len(),
            extra,
            pause_spikes,
            control_spikes,
            pause_median: median(&chunks),
            control_median: median(&controls),
        }
    }
}

/// Whether pause exits: a hypervisor with pause-loop exiting intercepts a
/// spinning loop of pauses. Where only some chunks exit, the pause bursts
/// show far more exit-sized spikes than control loops of the same native
/// length without pause (which only interrupts hit); where every chunk
/// exits, the exit sits inside every burst's median and makes no spike, but
/// the pause chunks' median then lies an exit above the control loops'.
pub fn pause_verdict(p: &PauseLoops) -> String {
    let total = CHUNKS_PER_BURST * PAUSES_PER_CHUNK as usize;
    let (pause_spikes, control_spikes, bursts, extra) =
        (p.pause_spikes, p.control_spikes, p.bursts, p.extra);
    let counts = format!(
        "{pause_spikes} chunks over the median by {extra}+ ticks in {bursts} bursts of {total} pauses, \
         {control_spikes} in as many control loops without pause; chunk median {} ticks against \
         {} for the control loop",
        p.pause_median, p.control_median
    );
    let spiky = pause_spikes > control_spikes.saturating_mul(2) + bursts / 10 + 2;
    // The control's length is calibrated, so allow it an eighth of error.
    let margin = extra.max(p.control_median / 8);
    let every = p.control_median > 0 && p.pause_median > p.control_median.saturating_add(margin);
    if every {
        format!(
            "exits (pause-loop exiting) in most chunks: the median chunk costs {} ticks more \
             than its control (over {margin}); {counts}",
            p.pause_median - p.control_median
        )
    } else if spiky {
        format!("exits (pause-loop exiting): {counts}")
    } else {
        format!("does not exit: {counts}")
    }
}

/// Iterations of a control loop as long as [`PAUSES_PER_CHUNK`] pauses
/// natively, from the median of `short` pauses timed alone (too few to
/// reach any pause-loop exiting window) and the median of a `dec; jnz` loop
/// of `gap` iterations.
pub fn control_spins(short_median: u64, short: u32, gap_median: u64, gap: u32) -> u32 {
    let chunk = short_median as f64 * f64::from(PAUSES_PER_CHUNK) / f64::from(short.max(1));
    let per_spin_ticks = gap_median as f64 / f64::from(gap);
    let spins = (chunk / per_spin_ticks.max(1e-3)).round();
    if spins >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        xvmm_results::num::u32_saturating(spins).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_subtract_the_null_and_saturate() {
        let mut t = 0u64;
        let s = sample(3, 2, 15, || {
            t += 100;
            (t, t + 10 + t / 100)
        });
        // Two warm-up pairs, then 300, 400, 500: 13, 14, 15 ticks minus 15.
        assert_eq!(s, [0, 0, 0]);
        let s = sample(2, 0, 5, || (0, 40));
        assert_eq!(s, [35, 35]);
    }

    #[test]
    fn verdicts_name_the_cause() {
        assert!(trap_verdict(30, Some(3000)).starts_with("does not trap"));
        assert!(trap_verdict(2000, Some(3000)).starts_with("traps"));
        assert!(trap_verdict(900, None).starts_with("slow"));
        assert!(trap_verdict(900, Some(100)).starts_with("slow"));
        assert!(vdso_verdict(40, 500, true, "tsc").starts_with("served by the vDSO"));
        let v = vdso_verdict(480, 500, true, "xen");
        assert!(v.contains("clocksource xen has no vDSO support"), "{v}");
        assert!(vdso_verdict(40, 500, false, "tsc").starts_with("no vDSO is mapped"));
        assert!(cpuid_verdict(1200, "KVMKVMKVM").starts_with("exits"));
        assert!(cpuid_verdict(24, "TCGTCGTCGTCG").contains("too cheap for a VM exit"));
        assert!(cpuid_verdict(100, "").contains("natively"));
    }

    fn loops(pause_spikes: usize, control_spikes: usize, medians: (u64, u64)) -> PauseLoops {
        PauseLoops {
            bursts: 100,
            extra: 1500,
            pause_spikes,
            control_spikes,
            pause_median: medians.0,
            control_median: medians.1,
        }
    }

    #[test]
    fn pause_verdict_counts_spikes_and_compares_medians() {
        let same = (9000, 9000);
        assert!(pause_verdict(&loops(250, 20, same)).starts_with("exits"));
        assert!(pause_verdict(&loops(30, 20, same)).starts_with("does not exit"));
        let none = PauseLoops {
            bursts: 0,
            ..loops(0, 0, same)
        };
        assert!(pause_verdict(&none).starts_with("does not exit"));
        // Every 128-pause chunk exits: the exit sits in the median of every
        // burst, so no chunk is a spike, but the chunks cost an exit more
        // than control loops of the same native length.
        let every = pause_verdict(&loops(0, 0, (9000 + 3000, 9000)));
        assert!(every.starts_with("exits"), "{every}");
        assert!(every.contains("12000") && every.contains("9000"), "{every}");
        assert!(
            control_spins(1000, 16, 2048, 4096) == 16_000,
            "128 pauses at 1000 ticks per 16: 8000 ticks, 2 spins a tick"
        );
        assert_eq!(control_spins(0, 16, 4096, 4096), 1);
        assert_eq!(control_spins(u64::MAX, 1, 0, 4096), u32::MAX);
        // A pause chunk a little slower than its control is no exit.
        let close = pause_verdict(&loops(0, 0, (9400, 9000)));
        assert!(close.starts_with("does not exit"), "{close}");
        // Natively a cheap cpuid makes `extra` small; a calibration error
        // of under an eighth of the chunk is still no exit.
        let native = PauseLoops {
            extra: 100,
            ..loops(0, 0, (9800, 9000))
        };
        assert!(pause_verdict(&native).starts_with("does not exit"));
        let native = PauseLoops {
            extra: 100,
            ..loops(0, 0, (11_000, 9000))
        };
        assert!(pause_verdict(&native).starts_with("exits"));
    }

    #[test]
    fn spikes_count_chunks_far_above_the_median() {
        let mut chunks = vec![1000u64; 64];
        assert_eq!(spikes(&chunks, 1500), 0);
        chunks[5] = 2400; // +1400: below the threshold
        chunks[9] = 4100;
        chunks[20] = 9000;
        assert_eq!(spikes(&chunks, 1500), 2);
        assert_eq!(spikes(&[], 1500), 0);
        assert_eq!(spikes(&[u64::MAX, u64::MAX], 1), 0);
        assert_eq!(median(&[5, 1, 3]), 3);
        assert_eq!(burst(10, || (0, 50)), vec![40; CHUNKS_PER_BURST]);
    }

    #[test]
    fn clock_gettime_paths_return_ordered_stamps() {
        for (a, b) in [clock_gettime_libc(), clock_gettime_syscall()] {
            assert!(a < b);
        }
        // The stamps are TSC readings taken inside the call.
        for path in [clock_gettime_libc, clock_gettime_syscall] {
            let before = tsc::open();
            let (a, b) = path();
            let after = tsc::open();
            assert!(before <= a && b <= after, "{before} {a} {b} {after}");
        }
        assert!(vdso_mapped(), "Linux maps a vDSO into every process");
        assert!(tsc_allowed_text().starts_with("allowed"));
    }

    #[test]
    fn verdict_thresholds_are_strict() {
        // Exactly half the system call is not "served by the vDSO".
        let v = vdso_verdict(250, 500, true, "tsc");
        assert!(v.starts_with("falls back"), "{v}");
        assert!(vdso_verdict(249, 500, true, "tsc").starts_with("served"));
        // A cpuid exit of exactly TRAP_TICKS is too cheap to be an exit.
        let t = trap_verdict(200, Some(TRAP_TICKS));
        assert!(t.starts_with("does not trap"), "{t}");
        assert!(trap_verdict(200, Some(TRAP_TICKS + 1)).starts_with("traps"));
        // TRAP_TICKS itself is still a native cost.
        assert!(trap_verdict(TRAP_TICKS, None).starts_with("does not trap"));
        assert!(trap_verdict(TRAP_TICKS + 1, None).starts_with("slow"));
    }

    #[test]
    fn tsc_modes_in_words() {
        assert!(tsc_mode_text(Ok(libc::PR_TSC_ENABLE)).starts_with("allowed at CPL3"));
        let segv = tsc_mode_text(Ok(libc::PR_TSC_SIGSEGV));
        assert!(segv.starts_with("faults at CPL3"), "{segv}");
        assert_eq!(tsc_mode_text(Ok(7)), "PR_GET_TSC gave mode 7");
        let err = tsc_mode_text(Err(std::io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(
            err.starts_with("PR_GET_TSC failed: Invalid argument"),
            "{err}"
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_upper_middle() {
        assert_eq!(median(&[4, 1, 3, 2]), 3);
        assert_eq!(median(&[10, 20]), 20);
        assert_eq!(median(&[]), 0);
    }

    #[test]
    fn pause_verdict_spike_threshold_and_text() {
        // 100 bursts, 20 control spikes: a pause burst needs over
        // 2 * 20 + 100 / 10 + 2 = 52 spikes to count as exiting.
        let same = (9000, 9000);
        for (spikes, exits) in [(45, false), (52, false), (53, true), (60, true)] {
            let v = pause_verdict(&loops(spikes, 20, same));
            assert_eq!(v.starts_with("exits"), exits, "{spikes}: {v}");
        }
        let v = pause_verdict(&loops(0, 0, same));
        assert!(v.contains("in 100 bursts of 8192 pauses"), "{v}");
        // No control median (nothing measured): no median comparison.
        let v = pause_verdict(&loops(0, 0, (5000, 0)));
        assert!(v.starts_with("does not exit"), "{v}");
        // A pause median exactly `extra` over the control is not yet an exit.
        let v = pause_verdict(&loops(0, 0, (9000 + 1500, 9000)));
        assert!(v.starts_with("does not exit"), "{v}");
        let v = pause_verdict(&loops(0, 0, (9000 + 1501, 9000)));
        assert!(v.starts_with("exits"), "{v}");
    }

    #[test]
    fn pause_loops_sum_spikes_over_bursts() {
        let mut a = vec![1000u64; CHUNKS_PER_BURST];
        a[0] = 5000;
        let mut b = vec![2000u64; CHUNKS_PER_BURST];
        b[1] = 9000;
        b[2] = 9000;
        let mut c = vec![500u64; CHUNKS_PER_BURST];
        c[3] = 4000;
        let flat = vec![500u64; CHUNKS_PER_BURST];
        let p = PauseLoops::from_bursts(&[(a, flat.clone()), (b, c)], 1500);
        assert_eq!(
            p,
            PauseLoops {
                bursts: 2,
                extra: 1500,
                pause_spikes: 3,
                control_spikes: 1,
                pause_median: 2000,
                control_median: 500,
            }
        );
        assert_eq!(PauseLoops::from_bursts(&[], 1500).bursts, 0);
    }
}
