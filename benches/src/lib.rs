//! Benchmarks that print figures; see the bin targets.

pub mod fuzz;
