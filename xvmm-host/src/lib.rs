//! What reads or changes the host a measurement runs on: the TSC and its
//! calibration, CPU facts, tracefs (text and binary), the host state xvmm
//! and xperf change, stop signals, standard descriptors, result files, ELF
//! images, the suite's skip notes, and the escaping that keeps untrusted
//! text (a guest's, a file's) from acting on a terminal. It knows nothing
//! of the result format: every xvmm crate may use it.

pub mod cpu;
pub mod cpu_list;
pub mod elf;
pub mod escape;
pub mod file;
pub mod host_state;
pub mod signals;
pub mod skip;
pub mod stdio;
pub mod tracefs;
pub mod tracefs_pipes;
pub mod tracefs_raw;
pub mod tsc;

pub use file::{write_atomically, Output};
