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

/// A bench's size or count from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
