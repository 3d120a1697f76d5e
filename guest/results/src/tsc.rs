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
//! one `asm!` block) splices [`stamp_open!`] and [`stamp_close!`] into its
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
/// material of the TSC quantum (see [`crate::quantum`]).
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

/// TSC ticks per millisecond, counted against the monotonic clock over
/// `window` (spinning, so the CPU stays awake). The one calibration every
/// producer uses when CPUID does not give the rate.
#[cfg(target_arch = "x86_64")]
pub fn calibrate_khz(window: Duration) -> u64 {
    let (t0, c0) = (Instant::now(), rdtsc());
    while t0.elapsed() < window {
        std::hint::spin_loop();
    }
    let (elapsed, c1) = (t0.elapsed(), rdtsc());
    let micros = u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    c1.saturating_sub(c0).saturating_mul(1000) / micros
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
    fn calibration_agrees_with_a_longer_calibration() {
        let short = calibrate_khz(Duration::from_millis(20)) as f64;
        let long = calibrate_khz(Duration::from_millis(200)) as f64;
        assert!(long > 100_000.0, "calibrated {long} kHz");
        assert!(
            (short / long - 1.0).abs() < 0.05,
            "20 ms gave {short} kHz, 200 ms {long} kHz"
        );
    }
}
