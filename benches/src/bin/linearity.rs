//! Linearity self-check of the stamps and the null subtraction: a dependent
//! chain of N and of 2N `imul` measured with the same stamps, natively in this
//! process and at CPL3 in the microguest, N and 2N samples interleaved so that
//! clock drift (turbo, a busy neighbour) hits both alike. After subtracting
//! the null median the 2N/N ratio should be 2.00 within 2%. Prints the figures
//! and whether they are within 2%, and the native sweep against the
//! correction xperf decides ([`xvmm_benches::linearity::check`]); never fails
//! on numbers (the claims are checked by `benches/tests/claims.rs`).
//!
//! `XVMM_LINEARITY_N` (a multiple of 8, default 4096) sets N.

use std::time::Duration;
use xvmm::microguest::guest::Kind;
use xvmm::microguest::measure;
use xvmm_benches::linearity::{self, native_chain, INTERCEPT_PHASES, LONG_PHASE};
use xvmm_host::tsc;
use xvmm_results::sweep::SweepFit;
use xvmm_results::{quantum, Stats};

const SAMPLES: usize = 20_000;
const WARMUP: usize = 2_000;

/// Interleaved samples: (N chain, 2N chain) pairs, after a warm-up.
fn native(n: u64) -> (Vec<u64>, Vec<u64>) {
    for _ in 0..WARMUP {
        native_chain(n);
        native_chain(2 * n);
    }
    (0..SAMPLES / 2)
        .map(|_| (native_chain(n), native_chain(2 * n)))
        .unzip()
}

fn native_null() -> Vec<u64> {
    for _ in 0..WARMUP {
        native_chain(0);
    }
    (0..SAMPLES / 2).map(|_| native_chain(0)).collect()
}

fn report(label: &str, null: &[u64], one: &[u64], two: &[u64], n: u64) {
    let (null, one, two) = (
        Stats::from_samples(null),
        Stats::from_samples(one),
        Stats::from_samples(two),
    );
    let c1 = one.median.saturating_sub(null.median);
    let c2 = two.median.saturating_sub(null.median);
    if c1 == 0 {
        println!("{label}: the N chain is not longer than the null measurement");
        return;
    }
    let ratio = c2 as f64 / c1 as f64;
    let off = (ratio - 2.0).abs() / 2.0 * 100.0;
    println!(
        "{label}: null median {} | N={n}: median {} -> {c1} | 2N: median {} -> {c2} | ratio {ratio:.4} ({off:.2}% from 2.00: {})",
        null.median,
        one.median,
        two.median,
        if off <= 2.0 { "within 2%" } else { "OUTSIDE 2%" }
    );
    println!(
        "{:>w$}  ticks per imul: {:.3} (N), {:.3} (2N)",
        "",
        c1 as f64 / n as f64,
        c2 as f64 / (2 * n) as f64,
        w = label.len()
    );
}

fn main() {
    let n: u64 = std::env::var("XVMM_LINEARITY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u64| n > 0 && n % 8 == 0)
        .unwrap_or(4096);

    let (one, two) = native(n);
    report("native CPL3     ", &native_null(), &one, &two, n);
    let q = quantum::estimate(&tsc::back_to_back(100_000)).unwrap_or(1.0);
    let decided = linearity::native_decision(3, 100_000, Some(q));
    println!("native user pair: {}", decided.reason);
    let mut all = INTERCEPT_PHASES.to_vec();
    all.push(LONG_PHASE);
    let (phases, chains) = linearity::native_phases_with_chains(&all, 24_000);
    let chain = linearity::ChainCost::across_phases(&chains);
    let (apart, noise) = linearity::ChainCost::spread(&chains);
    println!(
        "native chains, timed in each phase: {:.4} ticks per imul ({apart:.4} from the fastest \
         phase's to the slowest's, noise {noise:.4})",
        chain.ticks_per_imul
    );
    let (short, long) = phases.split_at(INTERCEPT_PHASES.len());
    match SweepFit::new(short.to_vec(), Some(q)) {
        Some(short) => {
            let c = decided.correction;
            match linearity::check(&short, &long[0], c, &decided, Some(q), chain) {
                Ok(v) => println!("native sweep: {v:?}"),
                Err(e) => println!("native sweep: FAILS: {e}"),
            }
        }
        None => println!("native sweep: no phase measured"),
    }

    let guest = |kind, param| {
        measure::user_intervals(
            kind,
            param,
            WARMUP as u64,
            SAMPLES as u64,
            Duration::from_secs(120),
        )
    };
    match (guest(Kind::Null, 0), guest(Kind::Imul, n)) {
        (Ok(null), Ok(chains)) => {
            // Even samples ran N imuls, odd samples 2N; 0 marks an invalid sample.
            let valid = |parity: usize| -> Vec<u64> {
                chains
                    .iter()
                    .skip(parity)
                    .step_by(2)
                    .copied()
                    .filter(|&t| t > 0)
                    .collect()
            };
            let null: Vec<u64> = null.into_iter().filter(|&t| t > 0).collect();
            report("microguest CPL3 ", &null, &valid(0), &valid(1), n);
        }
        (a, b) => {
            for e in [a.err(), b.err()].into_iter().flatten() {
                println!("microguest CPL3: failed: {e}");
            }
        }
    }
}
