//! The result format's parts beyond the report's core types (`lib.rs`):
//! what the guest sends over its channel, each block of a report, the
//! bounds a file is read under, its JSON layout, and xperf's command line.

pub mod async_pf;
pub mod channel;
pub mod characterize;
pub mod exit_trace;
pub mod interval_stream;
pub mod intervals;
pub mod ipi;
pub mod json;
pub mod limits;
pub mod machine;
pub mod names;
pub mod probes;
pub(crate) mod sample_format;
pub mod workload;
pub mod xperf_args;
