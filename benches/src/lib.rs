//! Benchmarks that print figures (see the bin targets), and the checks
//! behind README's claims about them, shared by the benches (which print)
//! and `tests/claims.rs` (which fails when a claim does not hold).

pub mod attribution;
pub mod boot;
pub mod clock;
pub mod fuzz;
pub mod linearity;
pub mod mutants;
pub mod peer;
pub mod perf;
pub mod recorded;
pub mod scale;
pub mod trace;
pub mod workload;

/// Median (mean of the middle two for an even count); `None` if empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// How a nested L1 run went, as the nested benches print it: L1's state,
/// its time and console, then each step's outcome and time.
pub fn l1_run_lines(run: &xvmm_harness::HarnessRun) -> Vec<String> {
    let mut lines = vec![format!(
        "L1 up in QEMU TCG, /dev/kvm {}; {:.1} s in total (console: {})",
        if run.kvm_present {
            "present"
        } else {
            "MISSING"
        },
        run.seconds,
        run.log.display()
    )];
    lines.extend(run.steps.iter().map(|s| {
        format!(
            "step {}: {} after {:.1} s",
            s.name,
            s.outcome,
            s.elapsed_ms / 1000.0
        )
    }));
    lines
}

/// A bench's size or count from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
