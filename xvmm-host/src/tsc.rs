//! The TSC as every user-mode producer reads it: the stamp instruction
//! sequences (one source of truth for the code that takes stamps and for the
//! report that names them) and the one TSC-rate calibration.
//!
//! Opening stamp `lfence; rdtsc; lfence`: the first LFENCE keeps earlier
//! instructions from completing after the read, the second keeps later ones
//! from starting before it. Closing stamp `rdtscp; lfence`: RDTSCP waits for
//! everything before it, the LFENCE holds back what follows. Never `cpuid`:
//! inside a guest it is a VM exit.
//!
//! Code that must keep the compiler out of the measured window (a crossing in
//! one `asm!` block) splices `stamp_open!` and `stamp_close!` into its
//! template; code that only needs a timestamp calls [`open`] and [`close`].

use std::time::{Duration, Instant};

/// The opening stamp's instructions, for an `asm!` template.
#[macro_export]
macro_rules! stamp_open {
    () => {
        "lfence\nrdtsc\nlfence"
    };
}

/// The closing stamp's instructions, for an `asm!` template (clobbers eax,
/// edx, ecx: RDTSCP writes the CPU's TSC_AUX there).
#[macro_export]
macro_rules! stamp_close {
    () => {
        "rdtscp\nlfence"
    };
}

/// The opening stamp as reports name it.
pub const OPEN_TEXT: &str = "lfence; rdtsc; lfence";
/// The closing stamp as reports name it.
pub const CLOSE_TEXT: &str = "rdtscp; lfence";

/// Joins the EDX:EAX halves RDTSC(P) returns.
#[inline(always)]
pub fn join(lo: u32, hi: u32) -> u64 {
    (u64::from(hi) << 32) | u64::from(lo)
}

/// An opening stamp: the TSC, serialised against what comes before and after.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn open() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: LFENCE and RDTSC exist on every x86-64 CPU and touch no memory.
    unsafe {
        core::arch::asm!(
            stamp_open!(),
            out("eax") lo,
            out("edx") hi,
            options(nostack, nomem, preserves_flags),
        );
    }
    join(lo, hi)
}

/// A closing stamp: the TSC and TSC_AUX (Linux keeps the CPU number there:
/// `aux & 0xfff`), after everything before it has completed.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn close() -> (u64, u32) {
    let (lo, hi, aux): (u32, u32, u32);
    // SAFETY: RDTSCP and LFENCE touch only the declared registers.
    unsafe {
        core::arch::asm!(
            stamp_close!(),
            out("eax") lo,
            out("edx") hi,
            out("ecx") aux,
            options(nostack, nomem, preserves_flags),
        );
    }
    (join(lo, hi), aux)
}

/// The TSC with no ordering at all (for coarse timing, never for intervals).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Differences of `n` pairs of back-to-back plain `rdtsc` reads: the raw
/// material of the TSC quantum (see `xvmm_results::quantum`).
#[cfg(target_arch = "x86_64")]
pub fn back_to_back(n: usize) -> Vec<u64> {
    let mut diffs = vec![0u64; n];
    for d in diffs.iter_mut() {
        let a = rdtsc();
        let b = rdtsc();
        *d = b.wrapping_sub(a);
    }
    diffs
}

/// A clock reading (ns) and the TSC at the same moment: the TSC read on
/// both sides of the clock read, retried while the two are far apart (an
/// interrupt or preemption between them), and their midpoint kept.
#[cfg(target_arch = "x86_64")]
fn paired(now: &impl Fn() -> u64) -> (u64, u64) {
    let mut best = (now(), rdtsc(), u64::MAX);
    for _ in 0..100 {
        let before = rdtsc();
        let t = now();
        let after = rdtsc();
        let gap = after.saturating_sub(before);
        if gap < best.2 {
            best = (t, before + gap / 2, gap);
        }
        if gap < 2_000 {
            break;
        }
    }
    (best.0, best.1)
}

/// `clock` (a `clock_gettime` clock id) in nanoseconds.
#[cfg(target_arch = "x86_64")]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write; an invalid clock leaves it 0.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    // Neither is negative for the clocks used here (monotonic ones).
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// TSC ticks per millisecond, counted against the monotonic clock over
/// `window` (spinning, so the CPU stays awake). The one calibration every
/// producer uses when CPUID does not give the rate. Each end pairs a clock
/// read with the TSC read around it, so a preemption at either end does not
/// skew the rate.
#[cfg(target_arch = "x86_64")]
pub fn calibrate_khz(window: Duration) -> u64 {
    calibrate_khz_on(libc::CLOCK_MONOTONIC, window)
}

/// [`calibrate_khz`] against `clock` (`CLOCK_MONOTONIC_RAW` reads the
/// clocksource's own counter without NTP's corrections).
#[cfg(target_arch = "x86_64")]
pub fn calibrate_khz_on(clock: libc::clockid_t, window: Duration) -> u64 {
    let now = || clock_ns(clock);
    let (t0, c0) = paired(&now);
    let started = Instant::now();
    while started.elapsed() < window {
        std::hint::spin_loop();
    }
    let (t1, c1) = paired(&now);
    let nanos = t1.saturating_sub(t0).max(1);
    // ticks * 1e6 / ns = kHz, in 128 bits: no overflow for any window.
    u64::try_from(u128::from(c1.saturating_sub(c0)) * 1_000_000 / u128::from(nanos))
        .unwrap_or(u64::MAX)
}

/// The TSC rate the running kernel settled on, from its log ("tsc: Refined
/// TSC clocksource calibration: 2445.406 MHz", else "tsc: Detected ... MHz
/// processor"), in kHz; `None` when the log does not say (not readable, or
/// the lines have scrolled out).
pub fn kernel_khz() -> Option<u64> {
    const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
    let mut buf = vec![0u8; 1 << 20];
    // 1 MiB: fits a c_int.
    let len = libc::c_int::try_from(buf.len()).unwrap_or(libc::c_int::MAX);
    // SAFETY: the kernel writes at most `len` <= buf.len() bytes into buf.
    let n = unsafe { libc::klogctl(SYSLOG_ACTION_READ_ALL, buf.as_mut_ptr().cast(), len) };
    let text = String::from_utf8_lossy(buf.get(..usize::try_from(n).ok()?)?);
    kernel_khz_in(&text)
}

/// The rate a kernel log states (see [`kernel_khz`]), the refined one first.
pub fn kernel_khz_in(log: &str) -> Option<u64> {
    let mhz = |marker: &str, end: &str| {
        log.lines().rev().find_map(|l| {
            let rest = &l[l.find(marker)? + marker.len()..];
            let value = rest.trim().strip_suffix(end)?.trim();
            let (int, frac) = value.split_once('.').unwrap_or((value, ""));
            let frac = format!("{frac:0<3}");
            Some(int.parse::<u64>().ok()? * 1000 + frac.get(..3)?.parse::<u64>().ok()?)
        })
    };
    mhz("tsc: Refined TSC clocksource calibration:", "MHz")
        .or_else(|| mhz("tsc: Detected", "MHz processor"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_code_name_the_same_instructions() {
        assert_eq!(OPEN_TEXT.replace("; ", "\n"), stamp_open!());
        assert_eq!(CLOSE_TEXT.replace("; ", "\n"), stamp_close!());
    }

    #[test]
    fn stamps_are_ordered() {
        let a = open();
        let (b, _) = close();
        assert!(b > a, "{a} then {b}");
    }

    #[test]
    fn the_kernel_log_states_its_rate() {
        let log = "[    0.000000] tsc: Detected 2445.406 MHz processor\n\
                   [    1.2] clocksource: tsc: mask\n\
                   [    2.1] tsc: Refined TSC clocksource calibration: 2445.41 MHz\n";
        assert_eq!(kernel_khz_in(log), Some(2_445_410));
        assert_eq!(
            kernel_khz_in("[0.0] tsc: Detected 2445.406 MHz processor"),
            Some(2_445_406)
        );
        assert_eq!(kernel_khz_in("nothing about it"), None);
    }

    /// The calibration against the rate the kernel settled on, within 100
    /// ppm, where the kernel's log says it (root, lines not scrolled out).
    #[test]
    fn calibration_agrees_with_the_kernel_within_100_ppm() {
        let Some(kernel) = kernel_khz() else {
            eprintln!(
                "skipping: the kernel log does not state the TSC rate (not root, or scrolled out)"
            );
            return;
        };
        for clock in [libc::CLOCK_MONOTONIC, libc::CLOCK_MONOTONIC_RAW] {
            let ours = calibrate_khz_on(clock, Duration::from_millis(500));
            let ppm = (ours as f64 - kernel as f64).abs() / kernel as f64 * 1e6;
            assert!(
                ppm <= 100.0,
                "clock {clock}: calibrated {ours} kHz, the kernel says {kernel} kHz: {ppm:.0} ppm"
            );
        }
    }
}
