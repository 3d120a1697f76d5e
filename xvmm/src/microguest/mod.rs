//! The built-in bare-metal microguest: xvmm's default run (no `--kernel`).
//!
//! xvmm builds long mode, GDT, TSS, IDT and page tables itself; the guest
//! ([`guest`]) is a CPL3 measurement loop per kind plus minimal CPL0 handlers.
//! Each measurement phase runs in a small VM ([`machine`]), the last
//! phase's when it ended well and left its page tables alone; [`mod@measure`] turns
//! the stamps into an `xvmm_results::Report` (environment `microguest`).
//!
//! - [`layout`]: the guest's address space and control block.
//! - [`tables`]: GDT/TSS/IDT/page-table encoding (pure).
//! - [`kinds`]: the measurement kinds, one table: routine, report row, how measured.
//! - [`guest`]: the guest code (assembly) and its entry points.
//! - [`machine`]: the phases' VMs (reused or fresh), the exit handler, host stamps around KVM_RUN, each phase's times.
//! - [`session`]: one run, phase by phase and round by round.
//! - [`stamps`]: a phase's stamp words as samples and intervals (pure).
//! - [`mod@measure`]: rounds -> stamp costs, crossings, exits; host facts.
//! - [`verify`]: the properties every report must have (shared by tests).
//! - [`linearity`]: `xvmm linearity`, the stamps' self-check at CPL3 and CPL0.
//! - [`platform`]: what runs where, per CPU vendor and hypervisor, as documented.
//! - [`receiver`]: the two-vCPU rows' second vCPU, on a thread of its own.
//! - [`profile`]: where a run's wall time went, per phase and per kind (pure).

pub mod guest;
pub mod kinds;
pub mod layout;
pub mod linearity;
pub mod machine;
pub mod measure;
pub mod platform;
pub mod profile;
pub mod receiver;
pub mod session;
pub mod stamps;
pub mod tables;
pub mod verify;

pub use measure::{measure, Measured, Options};
