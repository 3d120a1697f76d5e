//! What reads or changes the host a measurement runs on: the TSC and its
//! calibration, CPU facts, tracefs (text and binary), the host state xvmm
//! and xperf change, stop signals, standard descriptors, result files, ELF
//! images, and the suite's skip notes.

pub mod cpu;
pub mod elf;
pub mod file;
pub mod host_state;
pub mod signals;
pub mod skip;
pub mod stdio;
pub mod tracefs;
pub mod tracefs_raw;
pub mod tsc;
