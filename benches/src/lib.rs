//! Benchmarks that print figures (see the bin targets), and the checks
//! behind README's claims about them, shared by the benches (which print)
//! and `tests/claims.rs` (which fails when a claim does not hold).

pub mod attribution;
pub mod boot;
pub mod clock;
pub mod fuzz;
pub mod linearity;
pub mod mutants;
pub mod perf;
pub mod scale;
pub mod trace;
