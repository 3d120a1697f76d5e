//! Linearity of the stamps: a dependent chain of N `imul` timed with the
//! same stamps as the crossings, for N from 0 to 4096. The raw medians must
//! lie on a line `raw = a + b * N` whose intercept `a` is the stamp pair's
//! cost (within one TSC quantum) and whose points stay within 2 % of the
//! line; after subtracting the stamp cost, 2N costs twice N within 2 %.
//! A wrong correction (none, or twice the pair) moves the intercept by a
//! stamp pair and fails the check: that is the negative control.

use std::arch::asm;
use xvmm_results::{stamp_close, stamp_open, tsc};

/// Chain lengths of the sweep: dense where the stamps dominate.
pub const SWEEP: [u64; 10] = [0, 8, 16, 32, 64, 128, 512, 1024, 2048, 4096];

/// The stamps around `n` dependent imuls (n a multiple of 8), or around
/// nothing when n is 0, in one asm block so that the compiler adds nothing to
/// the window.
#[inline(never)]
pub fn native_chain(n: u64) -> u64 {
    let (lo0, hi0, lo1, hi1): (u32, u32, u32, u32);
    // SAFETY: register-only arithmetic and timestamp instructions.
    unsafe {
        asm!(
            stamp_open!(),
            "mov {lo0:e}, eax", "mov {hi0:e}, edx",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "sub {n}, 8",
            "jnz 2b",
            "3:",
            stamp_close!(),
            n = inout(reg) n => _,
            lo0 = out(reg) lo0, hi0 = out(reg) hi0,
            out("eax") lo1, out("edx") hi1, out("ecx") _,
            options(nomem, nostack),
        );
    }
    tsc::join(lo1, hi1).saturating_sub(tsc::join(lo0, hi0))
}

/// Median raw ticks per chain length of `sweep`, samples interleaved (one of
/// each length per pass) so that drift hits every length alike.
pub fn native_sweep(sweep: &[u64], passes: usize) -> Vec<u64> {
    for _ in 0..passes / 10 {
        for &n in sweep {
            native_chain(n);
        }
    }
    let mut samples = vec![Vec::with_capacity(passes); sweep.len()];
    for _ in 0..passes {
        for (i, &n) in sweep.iter().enumerate() {
            samples[i].push(native_chain(n));
        }
    }
    samples
        .iter()
        .map(|s| xvmm_results::Stats::from_samples(s).median)
        .collect()
}

/// A least-squares line through (N, ticks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub intercept: f64,
    pub slope: f64,
}

pub fn fit(points: &[(f64, f64)]) -> Fit {
    let n = points.len().max(1) as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    Fit {
        intercept: my - slope * mx,
        slope,
    }
}

/// What the check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub fit: Fit,
    /// `(2N - c) / (N - c)` at the two longest chains, c the correction.
    pub ratio: f64,
    /// Worst distance of a point from the line, relative to the corrected
    /// figure (chains of 512 and more).
    pub worst_residual: f64,
}

/// Checks medians `raw[i]` of chains `sweep[i]` against the claim, with the
/// stamp cost `correction` subtracted: the corrected line's intercept within
/// `quantum` (+1 tick of rounding) of 0, every long chain within 2 % of the
/// line, and 2N = 2 x N within 2 %. `Err` says which part failed.
pub fn check(sweep: &[u64], raw: &[u64], correction: u64, quantum: f64) -> Result<Verdict, String> {
    let corrected: Vec<(f64, f64)> = sweep
        .iter()
        .zip(raw)
        .map(|(&n, &r)| (n as f64, r as f64 - correction as f64))
        .collect();
    let line = fit(&corrected);
    let last = corrected.len() - 1;
    let ratio = corrected[last].1 / corrected[last - 1].1.max(1.0);
    let worst_residual = corrected
        .iter()
        .filter(|(n, _)| *n >= 512.0)
        .map(|(n, y)| ((line.intercept + line.slope * n) - y).abs() / y.abs().max(1.0))
        .fold(0.0, f64::max);
    let verdict = Verdict {
        fit: line,
        ratio,
        worst_residual,
    };
    if line.intercept.abs() > quantum + 1.0 {
        return Err(format!(
            "intercept {:.1} ticks after subtracting {correction}: not 0 within one quantum ({quantum:.2}): {verdict:?}",
            line.intercept
        ));
    }
    if line.slope <= 0.0 || worst_residual > 0.02 {
        return Err(format!(
            "points leave the line by more than 2 %: {verdict:?}"
        ));
    }
    if (ratio - 2.0).abs() > 0.04 {
        return Err(format!(
            "2N / N is {ratio:.4}, not 2.00 within 2 %: {verdict:?}"
        ));
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Synthetic medians: stamps cost 73, each imul 3 ticks.
    fn synthetic() -> Vec<u64> {
        SWEEP.iter().map(|n| 73 + 3 * n).collect()
    }

    #[test]
    fn the_right_correction_passes_and_wrong_ones_fail() {
        let raw = synthetic();
        let v = check(&SWEEP, &raw, 73, 24.45).unwrap();
        assert!((v.fit.slope - 3.0).abs() < 1e-9 && v.fit.intercept.abs() < 1e-6);
        assert!(check(&SWEEP, &raw, 0, 24.45)
            .unwrap_err()
            .contains("intercept"));
        assert!(check(&SWEEP, &raw, 146, 24.45)
            .unwrap_err()
            .contains("intercept"));
    }

    #[test]
    fn a_bent_line_fails() {
        // Long chains 5 % slower than the line through the short ones.
        let raw: Vec<u64> = SWEEP
            .iter()
            .map(|&n| 73 + 3 * n + if n >= 2048 { 3 * n / 20 } else { 0 })
            .collect();
        assert!(check(&SWEEP, &raw, 73, 24.45).is_err());
    }
}
