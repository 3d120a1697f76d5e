//! The application layer: the only code that knows clap, stdout and stderr.
//! It parses and checks the command line, opens every output before anything
//! is measured, calls the libraries with plain structs, renders what they
//! return, writes files and maps errors to exit statuses ([`exit`]).

mod async_pf;
pub mod cli;
mod deliver;
pub mod dist;
pub mod error;
pub mod exit;
pub mod input;
mod kernel;
mod linearity;
mod linux;
mod microguest;
pub mod output;
mod progress;
mod report;
mod reports;

use output::Stdout;

/// Parses the command line, runs it and returns the exit status. Every error
/// is one escaped line on stderr (clap's usage errors: clap's whole message).
pub fn main() -> i32 {
    forbid_new_privileges();
    let cli = match cli::Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    // With `panic = "abort"` no destructor runs: the hook undoes what this
    // process changed on the host before it aborts.
    xvmm_host::host_state::undo::install_panic_hook(|line| output::eprint(&format!("{line}\n")));
    let stdout = Stdout::new();
    let result = run(cli, &stdout)
        .map_err(error::Error::in_flag_terms)
        .and_then(|()| Ok(stdout.outcome()?));
    match result {
        Ok(()) => exit::OK,
        Err(err) => {
            let line = format!("xvmm: {err}");
            output::eprint(&format!("{}\n", xvmm_host::escape::visible(&line)));
            exit::code(&err)
        }
    }
}

/// Sets `no_new_privs` (README "Privileges"): nothing xvmm runs (make and
/// the compiler for `kernel build`) can gain privileges through a setuid or
/// file-capability binary, so a user in the kvm group who is tricked into
/// feeding xvmm a hostile guest or file stays that user. xvmm never needs
/// such a binary. Best effort: an old kernel without it changes nothing.
fn forbid_new_privileges() {
    // SAFETY: prctl with integer arguments only; it affects this process and
    // its future children.
    unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
}

/// `--help` and `--version` print and succeed; anything else clap rejects is
/// a usage error, shown whole (the message, the usage line, the hint).
fn usage_error(e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let stdout = Stdout::new();
            stdout.print(&e.render().to_string());
            match stdout.outcome() {
                Ok(()) => exit::OK,
                Err(err) => {
                    output::eprint(&format!("xvmm: {err}\n"));
                    exit::code(&err.into())
                }
            }
        }
        _ => {
            output::eprint(&format!("xvmm: usage: {}", usage_message(e)));
            exit::USAGE
        }
    }
}

/// What a usage error prints after `xvmm: usage: `: clap's whole message,
/// each line escaped. clap's plain rendering drops escape sequences from
/// an argument it quotes but keeps a bidirectional override (found by the
/// `cli_args` fuzz target).
pub fn usage_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let mut out = String::with_capacity(text.len() + 1);
    for line in text.lines() {
        out.push_str(&xvmm_host::escape::visible(line));
        out.push('\n');
    }
    out
}

/// Runs what the command line asks for: the kernel commands with the
/// kernel builder's errors, the rest with the VMM's.
fn run(cli: cli::Cli, stdout: &Stdout) -> error::Result<()> {
    let run = &cli.run;
    let vmm = match cli.command {
        Some(cli::Command::Kernel(cli::KernelCommand::Build(args))) => {
            return kernel::build(&args, stdout)
        }
        Some(cli::Command::Kernel(cli::KernelCommand::Hooks(args))) => {
            return kernel::hooks(&args.vmlinux, stdout)
        }
        Some(cli::Command::Initramfs(args)) => reports::initramfs(&args),
        Some(cli::Command::Compare(args)) => reports::compare(&args, stdout),
        Some(cli::Command::Machine(args)) => reports::machine(args.json.as_deref(), stdout),
        Some(cli::Command::Show(args)) => reports::show(&args.report, stdout),
        Some(cli::Command::Report(args)) => report::report(&args, stdout),
        Some(cli::Command::Linearity(args)) => linearity::run(&args, stdout),
        None if run.kernel.is_some() => {
            recover_host_state();
            // Here, not in linux.rs: `both` is built from linux.rs's steps.
            match run.async_pf {
                cli::AsyncPf::Both => async_pf::run_both(run, stdout),
                _ => linux::run(run, stdout),
            }
        }
        None => {
            recover_host_state();
            microguest::run(run, stdout)
        }
    };
    Ok(vmm?)
}

/// Before a run: undoes what a killed or aborted xvmm or xperf left on the
/// host (tracefs instances, dynamic events, sysctls, mounts; README
/// "Privileges"), one line on stderr for each.
fn recover_host_state() {
    let recovery = xvmm_host::host_state::undo::recover_orphans();
    for line in recovery.messages("xvmm") {
        output::eprint(&format!("{line}\n"));
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[test]
    fn usage_errors_are_escaped_line_by_line() {
        let e = super::cli::Cli::try_parse_from(["xvmm", "--mem", "5\u{202e}\x1b[2J"]).unwrap_err();
        let text = super::usage_message(&e);
        assert!(text.contains("'5\\u{202e}"), "{text}");
        assert!(
            !text.contains('\u{202e}') && !text.contains('\x1b'),
            "{text}"
        );
        assert!(text.ends_with("try '--help'.\n"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn no_new_privileges_once_set() {
        super::forbid_new_privileges();
        // A per-thread attribute, inherited by threads and children made later.
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
    }
}
