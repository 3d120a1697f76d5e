//! xvmm: a small KVM VMM that measures user<->kernel crossings.
//!
//! Layers, top to bottom (docs/DESIGN.md; `tests/layers.rs` checks that
//! no module uses one above it). The command line, the terminal, output files
//! and exit codes are the xvmm-cli crate's; kernel builds xvmm-kernel's; the
//! HTML report xvmm-report's.
//! - [`linux`], [`microguest`]: what xvmm measures (boot Linux and collect
//!   xperf's results; the built-in bare-metal guest).
//! - [`boot`], [`vm`], [`vcpu`], [`devices`], [`host_trace`], [`initramfs`]:
//!   the VMM core and host-side tracing.
//! - [`arch`], [`layout`], [`elf`], [`affinity`], [`progress`], [`error`]: CPU
//!   state, guest addresses, the ELF reader, thread placement, the progress
//!   trait and the one error type.

pub mod affinity;
pub mod arch;
pub mod boot;
pub mod devices;
pub mod error;
pub mod host_fault;
pub mod host_trace;
pub mod initramfs;
pub mod layout;
pub mod linux;
pub mod microguest;
pub mod vcpu;
pub mod vm;

pub use error::{Error, Result, Setting};
pub use xvmm_host::elf;
/// The one ELF reader, shared with xperf (which reads `/proc/kcore`).
pub use xvmm_results::progress;
