//! Benchmarks that print figures; see the bin targets.
