//! Shared parts of the two static init programs:
//! - `xvmm-init`: `/init` of L2 boot-test guests (prints a marker, then does
//!   what `xvmm.init=` on the kernel command line asks).
//! - `l1-init`: `/init` of the nested harness's L1 host (runs a test plan).
//!
//! Pure parsing lives in [`action`] and [`plan`]; system calls in [`sys`].

pub mod action;
pub mod memory;
pub mod plan;
pub mod sys;

/// Printed to the console by `xvmm-init` as soon as it runs: proof the guest
/// kernel booted and unpacked the initramfs.
pub const MARKER: &str = "XVMM-INIT: reached /init";
