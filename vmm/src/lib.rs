//! xvmm: a small KVM VMM that measures user<->kernel crossings.
//!
//! Module map (one job each):
//! - [`layout`]: guest physical addresses, pure constants and functions.
//! - [`arch`]: x86-64 CPU state: CPUID, MSRs, registers, GDT, page tables.
//! - [`boot`]: loading Linux (bzImage, PVH ELF), zero page, E820, command line.
//! - [`vm`], [`vcpu`]: KVM objects and the run loop.
//! - [`devices`]: UART, i8042 reset, exit and results ports.
//! - [`linux`]: booting a Linux guest and collecting its results.
//! - [`guest_image`]: the built-in initramfs (static xperf as /init) and its command line.
//! - [`microguest`]: the built-in bare-metal guest and its measurements.
//! - [`kernel`]: building guest/host kernels, cached by their inputs.
//! - [`initramfs`]: writing newc cpio archives.
//! - [`harness`]: the nested KVM test harness (QEMU TCG -> L1 KVM host -> L2).
//! - [`report`]: tables and comparisons of results.
//! - [`tracing`]: host-side VM-exit timing from the kvm tracepoints.

pub mod arch;
pub mod boot;
pub mod cli;
pub mod devices;
pub mod error;
pub mod guest_image;
pub mod harness;
pub mod initramfs;
pub mod kernel;
pub mod layout;
pub mod linux;
pub mod microguest;
pub mod report;
pub mod tracing;
pub mod vcpu;
pub mod vm;

pub use error::{Error, Result};

/// Runs what the command line asks for.
pub fn run(cli: cli::Cli) -> Result<()> {
    if cli.run.timeout == 0 || cli.run.timeout > cli::MAX_TIMEOUT_SECS {
        return Err(Error::Usage(format!(
            "--timeout {} is out of range: it must be at least 1 second and at most {}",
            cli.run.timeout,
            cli::MAX_TIMEOUT_SECS
        )));
    }
    match cli.command {
        Some(cli::Command::Kernel(cli::KernelCommand::Build(args))) => kernel::build_command(&args),
        Some(cli::Command::Kernel(cli::KernelCommand::Hooks(args))) => {
            kernel::hooks::command(&args.vmlinux)
        }
        Some(cli::Command::Initramfs(args)) => initramfs::command(&args),
        Some(cli::Command::Compare(args)) => report::compare_command(&args),
        Some(cli::Command::Machine(args)) => report::machine_command(args.json.as_deref()),
        Some(cli::Command::Show(args)) => report::show_command(&args.report),
        None if cli.run.kernel.is_some() => linux::run(&cli.run),
        None => microguest::run(&cli.run),
    }
}
