//! The application layer: the only code that knows clap, stdout and stderr.
//! It parses and checks the command line, calls the libraries with plain
//! structs, renders what they return and maps errors to exit codes.

pub mod cli;
mod kernel;

use crate::{initramfs, linux, microguest, report, Error, Result};

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
        Some(cli::Command::Kernel(cli::KernelCommand::Build(args))) => kernel::build(&args),
        Some(cli::Command::Kernel(cli::KernelCommand::Hooks(args))) => kernel::hooks(&args.vmlinux),
        Some(cli::Command::Initramfs(args)) => {
            let bytes = initramfs::from_specs(&args.entries)?.to_bytes();
            std::fs::write(&args.output, bytes).map_err(|e| Error::io("writing", &args.output, e))
        }
        Some(cli::Command::Compare(args)) => report::compare_command(&args),
        Some(cli::Command::Machine(args)) => report::machine_command(args.json.as_deref()),
        Some(cli::Command::Show(args)) => report::show_command(&args.report),
        None if cli.run.kernel.is_some() => linux::run(&cli.run),
        None => microguest::run(&cli.run),
    }
}
