//! The native half of the linearity check ([`xvmm_results::linearity`]):
//! chains of `imul` timed in this process with xperf's stamps, and the
//! user pair's cost as xperf decides it natively.

use std::arch::asm;
use xvmm_host::{stamp_close, stamp_open, tsc};
pub use xvmm_results::linearity::*;
use xvmm_results::sweep::{self, StampSweep, SweepFit, SweepPhase};

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

/// The user pair's cost as xperf decides it natively: `rounds` rounds of
/// its null pair and its sweep (`null_samples` each), then the decision
/// against the TSC `quantum`.
pub fn native_decision(rounds: u32, null_samples: usize, quantum: Option<f64>) -> StampSweep {
    let (mut null, mut phases) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        null.extend(xperf::measure::user_pair(1000, null_samples));
        phases.extend(xperf::sweep::round(round, 1000, null_samples));
    }
    let fit = SweepFit::new(phases, quantum).expect("the native sweep measures");
    sweep::decide(
        xvmm_results::Stats::from_samples(&null).median,
        fit,
        quantum,
    )
}

/// How many times each phase of [`native_phases_with_chains`] stops to
/// time chains, and how many chains of each length it times there: 64 of
/// each a phase, about 2 ms of chains against a phase's 24 000 samples.
pub const CHAIN_BREAKS: usize = 16;
pub const CHAINS_PER_BREAK: usize = 4;

/// Native phases (xperf's chains), `samples` each, each timing chains of
/// [`CHAIN_COST_LENGTH`] and twice that ([`ChainCost::from_samples`]) at
/// [`CHAIN_BREAKS`] points through it (`xperf::sweep::phase_with_breaks`):
/// a phase's slope and its chains' cost come from the same stretch of
/// time, so the slope check compares them at one core speed.
pub fn native_phases_with_chains(
    phases: &[(u64, u64)],
    samples: usize,
) -> (Vec<SweepPhase>, Vec<ChainCost>) {
    phases
        .iter()
        .map(|&(n, k)| {
            let (mut short, mut long) = (Vec::new(), Vec::new());
            let phase = xperf::sweep::phase_with_breaks(n, k, 1000, samples, CHAIN_BREAKS, || {
                for _ in 0..CHAINS_PER_BREAK {
                    short.push(native_chain(CHAIN_COST_LENGTH));
                    long.push(native_chain(2 * CHAIN_COST_LENGTH));
                }
            })
            .unwrap_or_else(|| panic!("native phase {n} x {k}: no valid sample"));
            (phase, ChainCost::from_samples(&short, &long))
        })
        .unzip()
}
