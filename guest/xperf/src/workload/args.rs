//! `xperf workload`'s options. Everything from the first word that is not
//! an option (or after `--`) is the command, its own options included.

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: xperf workload [--json FILE] [--timeout SECS] [--buffer-kib N] [--tracefs DIR]
                      [--calibrate N] [--run-id ID] [--] CMD [ARGS]

Runs CMD and records where its time in the kernel goes, for CMD and every
process and thread it creates, from the kernel's own tracepoints (no
patched kernel; root, for tracefs): each system call by name, user page
faults by kind, the interrupts that hit it by vector, and its time off CPU;
count, total, median and p99 per kind, and its wall, user and system time.
The tracing runs in a tracefs instance of its own, restored on every exit.
xperf exits with CMD's status (128 + the signal that killed it) once the
report is delivered.

  --json FILE       write the JSON report to FILE atomically, or to stdout
                    when FILE is - (the table then goes to stderr; default:
                    xperf.json when there is no VMM results channel)
  --timeout SECS    stop CMD (SIGKILL to every task of it) after SECS
                    seconds; what was recorded is reported
  --buffer-kib N    trace ring buffer per CPU, KiB (default: 4096, less on
                    machines with many CPUs: 256 MiB in all at most)
  --tracefs DIR     tracefs mount point (default: found, or mounted)
  --calibrate N     in a VM whose VMM traces it (xvmm --workload): N
                    calibration exits, half before CMD and half after, that
                    place the host's exits on the guest's timeline
  --run-id ID       echoed in the report, so the VMM knows it as its run's
  -h, --help        this text";

/// Per-CPU ring buffer bounds, KiB.
pub const MIN_BUFFER_KIB: u64 = 64;
pub const MAX_BUFFER_KIB: u64 = 1 << 20;
/// The default buffers' total over all CPUs, KiB.
const DEFAULT_TOTAL_KIB: u64 = 256 << 10;
const DEFAULT_PER_CPU_KIB: u64 = 4096;
/// `--calibrate`'s largest value.
pub const MAX_CALIBRATIONS: u64 = 1 << 16;
/// `--timeout`'s largest value, seconds (a week).
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    pub command: Vec<String>,
    pub json: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// None: [`default_buffer_kib`].
    pub buffer_kib: Option<u64>,
    pub tracefs: Option<PathBuf>,
    /// Calibration exits for the VMM's timeline (0: none).
    pub calibrate: u64,
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Box<Options>),
    Help,
}

/// The default per-CPU buffer for a machine of `cpus` CPUs.
pub fn default_buffer_kib(cpus: usize) -> u64 {
    let cpus = u64::try_from(cpus.max(1)).unwrap_or(u64::MAX);
    (DEFAULT_TOTAL_KIB / cpus).clamp(MIN_BUFFER_KIB, DEFAULT_PER_CPU_KIB)
}

fn number(name: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(Error::Usage(format!(
            "{name} takes a whole number from {min} to {max}, not {value:?}"
        ))),
    }
}

/// Parses the arguments after `workload`.
pub fn parse<I, S>(args: I) -> Result<Command>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut o = Options::default();
    let mut args = args.into_iter().map(Into::into);
    while let Some(arg) = args.next() {
        if arg == "--" {
            o.command.extend(args.by_ref());
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            o.command.push(arg);
            o.command.extend(args.by_ref());
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        if name == "-h" || name == "--help" {
            return Ok(Command::Help);
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| Error::Usage(format!("{name} needs a value")))
        };
        match name.as_str() {
            "--json" => {
                let v = value()?;
                if v.is_empty() {
                    return Err(Error::Usage("--json needs a file name".into()));
                }
                o.json = Some(PathBuf::from(v));
            }
            "--timeout" => {
                let secs = number(&name, &value()?, 1, MAX_TIMEOUT_SECS)?;
                o.timeout = Some(Duration::from_secs(secs));
            }
            "--buffer-kib" => {
                o.buffer_kib = Some(number(&name, &value()?, MIN_BUFFER_KIB, MAX_BUFFER_KIB)?);
            }
            "--tracefs" => o.tracefs = Some(PathBuf::from(value()?)),
            "--calibrate" => o.calibrate = number(&name, &value()?, 0, MAX_CALIBRATIONS)?,
            "--run-id" => o.run_id = Some(value()?),
            _ => {
                return Err(Error::Usage(format!(
                    "unknown argument {name:?} (try xperf workload --help)"
                )))
            }
        }
    }
    if o.command.is_empty() {
        return Err(Error::Usage(
            "xperf workload needs a command to run (xperf workload [OPTIONS] -- CMD [ARGS])".into(),
        ));
    }
    Ok(Command::Run(Box::new(o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().copied()) {
            Ok(Command::Run(o)) => *o,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    #[test]
    fn the_command_starts_at_the_first_word_or_after_the_dashes() {
        let o = run(&["--timeout", "5", "tar", "czf", "-", "--json", "x"]);
        assert_eq!(o.command, ["tar", "czf", "-", "--json", "x"]);
        assert_eq!(o.timeout, Some(Duration::from_secs(5)));
        assert_eq!(o.json, None);
        let o = run(&["--json=-", "--", "--weird-name", "a"]);
        assert_eq!(o.command, ["--weird-name", "a"]);
        assert_eq!(o.json, Some(PathBuf::from("-")));
        let o = run(&["--buffer-kib", "128", "--tracefs", "/t", "true"]);
        assert_eq!(
            (o.buffer_kib, o.tracefs),
            (Some(128), Some(PathBuf::from("/t")))
        );
        assert_eq!(parse(["-h"]).unwrap(), Command::Help);
        assert_eq!(parse(["--help", "true"]).unwrap(), Command::Help);
        let o = run(&["--calibrate", "256", "--run-id=ab12", "true"]);
        assert_eq!((o.calibrate, o.run_id.as_deref()), (256, Some("ab12")));
        assert_eq!(run(&["true"]).calibrate, 0);
    }

    #[test]
    fn bad_arguments_are_one_line_usage_errors() {
        for bad in [
            &[][..],
            &["--"],
            &["--timeout", "0", "true"],
            &["--timeout", "x", "true"],
            &["--timeout"],
            &["--buffer-kib", "1", "true"],
            &["--buffer-kib", "99999999999", "true"],
            &["--json", "", "true"],
            &["--calibrate", "65537", "true"],
            &["--run-id"],
            &["--frob", "true"],
        ] {
            let err = parse(bad.iter().copied()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
    }

    #[test]
    fn default_buffers_shrink_with_many_cpus_within_bounds() {
        assert_eq!(default_buffer_kib(1), 4096);
        assert_eq!(default_buffer_kib(0), 4096);
        assert_eq!(default_buffer_kib(64), 4096);
        assert_eq!(default_buffer_kib(256), 1024);
        assert_eq!(default_buffer_kib(100_000), MIN_BUFFER_KIB);
    }
}
