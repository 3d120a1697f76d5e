//! Command-line options. Parsed by hand: xperf is often a guest's PID 1 with
//! arguments from the kernel command line, and every error must be one line.

use crate::counts::count;
pub use crate::counts::{DEFAULT_ROUNDS, MAX_SAMPLES};
use crate::error::{Error, Result};
use std::path::PathBuf;

pub const DEFAULT_SAMPLES: u64 = 10_000;
pub const DEFAULT_WARMUP: u64 = 1_000;
pub const DEFAULT_NULL_SAMPLES: u64 = 100_000;
pub const MAX_ROUNDS: u64 = 100;
/// Upper bound for `--calibrate`.
pub const MAX_CALIBRATIONS: u64 = 4096;
/// Upper bound for the length of `--run-id`.
pub const MAX_RUN_ID: usize = 64;

pub const USAGE: &str = "\
usage: xperf [--samples N] [--warmup N] [--null-samples N] [--rounds R] [--cpu N] [--raw] [--json FILE]
       xperf characterize [--samples N] [--cpu N] [--json FILE]   (see characterize --help)
       xperf probes [OPTIONS]   (what instrumentation costs; xperf probes --help)

Measures user->kernel->user crossings: #PF on first touch, #PF after
MADV_DONTNEED, and the getppid syscall. With the xperf kernel hooks
(docs/xperf-abi.md) each sample is split into u2k and k2u; without them
only round trips are measured, and the output says so.

  --samples N       samples per crossing (default 10000)
  --warmup N        unrecorded iterations before each crossing (default 1000)
  --null-samples N  samples of the empty stamp pair (default 100000)
  --rounds R        repeat the whole measurement R times (default 3): per-round
                    medians, their spread and a confidence interval of each median
  --cpu N           CPU to pin to (default: the CPU xperf starts on)
  --raw             keep every sample's stamps in the JSON report
  --calibrate K     (under xvmm --trace) K stamped exits to the VMM's
                    calibration port, spread over the run, for the host's
                    timeline (needs root: ioperm)
  --run-id ID       echo ID (hex digits) in the report, so that the VMM
                    can tell its own run's results
  --host-miss N     (under xvmm --host-fault-delay) also measure pf-host-miss:
                    N pages per round whose host backing the VMM drops, with
                    a spinner task on the same CPU (needs root: pagemap, ioperm)
  --json FILE       write the JSON report to FILE atomically, or to stdout
                    when FILE is - (the table then goes to stderr; default:
                    xperf.json when there is no VMM results channel)
  -h, --help        this text
  -V, --version     print the version";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub samples: u64,
    pub warmup: u64,
    pub null_samples: u64,
    pub rounds: u32,
    pub cpu: Option<u32>,
    pub raw: bool,
    pub json: Option<PathBuf>,
    /// Calibration exits to take (0: none).
    pub calibrate: u64,
    pub run_id: Option<String>,
    /// pf-host-miss pages per round (0: not measured).
    pub host_miss: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            samples: DEFAULT_SAMPLES,
            warmup: DEFAULT_WARMUP,
            null_samples: DEFAULT_NULL_SAMPLES,
            rounds: DEFAULT_ROUNDS,
            cpu: None,
            raw: false,
            json: None,
            calibrate: 0,
            run_id: None,
            host_miss: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Options),
    /// `xperf probes ...`
    Probes(Box<crate::probes::args::Options>),
    ProbesHelp,
    /// `xperf characterize ...`: the whole machine (crate::characterize).
    Characterize(crate::characterize::Options),
    Help,
    Version,
}

fn run_id(value: &str) -> Result<String> {
    let hex = value.bytes().all(|b| b.is_ascii_hexdigit());
    if value.is_empty() || value.len() > MAX_RUN_ID || !hex {
        return Err(Error::Usage(format!(
            "--run-id takes 1 to {MAX_RUN_ID} hex digits"
        )));
    }
    Ok(value.to_string())
}

/// Parses the arguments after the program name.
pub fn parse<I, S>(args: I) -> Result<Command>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut opts = Options::default();
    let mut args = args.into_iter().map(Into::into).peekable();
    if args.peek().is_some_and(|a| a == "probes") {
        args.next();
        return Ok(match crate::probes::args::parse(args)? {
            crate::probes::args::Command::Run(o) => Command::Probes(o),
            crate::probes::args::Command::Help => Command::ProbesHelp,
        });
    }
    if args.peek().is_some_and(|a| a == "characterize") {
        return crate::characterize::options::parse(args.skip(1)).map(Command::Characterize);
    }
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let takes_value = matches!(
            name.as_str(),
            "--samples"
                | "--warmup"
                | "--null-samples"
                | "--rounds"
                | "--cpu"
                | "--json"
                | "--calibrate"
                | "--run-id"
                | "--host-miss"
        );
        if !takes_value && inline.is_some() {
            return Err(Error::Usage(format!("{name} takes no value")));
        }
        let value = if takes_value {
            match inline.or_else(|| args.next()) {
                Some(v) => v,
                None => return Err(Error::Usage(format!("{name} needs a value"))),
            }
        } else {
            String::new()
        };
        match name.as_str() {
            "--samples" => opts.samples = count(&name, &value, 1)?,
            "--warmup" => opts.warmup = count(&name, &value, 0)?,
            "--null-samples" => opts.null_samples = count(&name, &value, 1)?,
            "--rounds" => {
                let n = count(&name, &value, 1)?;
                opts.rounds = match u32::try_from(n) {
                    Ok(rounds) if n <= MAX_ROUNDS => rounds,
                    _ => {
                        return Err(Error::Usage(format!(
                            "--rounds must be between 1 and {MAX_ROUNDS}, got {n}"
                        )))
                    }
                };
            }
            "--cpu" => {
                let cpu = value.parse::<u32>().map_err(|_| {
                    Error::Usage(format!("--cpu needs a CPU number, got {value:?}"))
                })?;
                opts.cpu = Some(cpu);
            }
            "--json" => {
                if value.is_empty() {
                    return Err(Error::Usage("--json needs a file name".into()));
                }
                opts.json = Some(PathBuf::from(value));
            }
            "--raw" => opts.raw = true,
            "--calibrate" => {
                let n = count(&name, &value, 0)?;
                if n > MAX_CALIBRATIONS {
                    return Err(Error::Usage(format!(
                        "--calibrate must be between 0 and {MAX_CALIBRATIONS}, got {n}"
                    )));
                }
                opts.calibrate = n;
            }
            "--run-id" => opts.run_id = Some(run_id(&value)?),
            "--host-miss" => {
                let n = count(&name, &value, 0)?;
                if n > crate::host_miss::MAX_PAGES {
                    return Err(Error::Usage(format!(
                        "--host-miss must be between 0 and {}, got {n}",
                        crate::host_miss::MAX_PAGES
                    )));
                }
                opts.host_miss = n;
            }
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            other => {
                return Err(Error::Usage(format!(
                    "unknown argument {other:?} (try --help)"
                )))
            }
        }
    }
    Ok(Command::Run(opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().copied()) {
            Ok(Command::Run(o)) => o,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    #[test]
    fn defaults_and_both_value_styles() {
        assert_eq!(run(&[]), Options::default());
        let o = run(&[
            "--samples",
            "50",
            "--warmup=0",
            "--cpu",
            "1",
            "--raw",
            "--json=a.json",
        ]);
        assert_eq!(o.samples, 50);
        assert_eq!(o.warmup, 0);
        assert_eq!(o.cpu, Some(1));
        assert!(o.raw);
        assert_eq!(o.json, Some(PathBuf::from("a.json")));
        let o = run(&["--calibrate", "256", "--run-id", "00ff"]);
        assert_eq!((o.calibrate, o.run_id.as_deref()), (256, Some("00ff")));
        assert_eq!(run(&["--host-miss", "200"]).host_miss, 200);
        assert_eq!(parse(["--help"]).unwrap(), Command::Help);
        assert_eq!(parse(["-V"]).unwrap(), Command::Version);
        assert!(
            matches!(parse(["probes", "--rounds", "2"]).unwrap(), Command::Probes(o) if o.rounds == 2)
        );
        assert_eq!(parse(["probes", "-h"]).unwrap(), Command::ProbesHelp);
        assert_eq!(parse(["--raw", "probes"]).unwrap_err().exit_code(), 2);
        assert!(matches!(
            parse(["characterize", "--samples", "9"]).unwrap(),
            Command::Characterize(o) if o.samples == 9
        ));
        // Only as the first word: elsewhere it is a stray argument.
        assert!(parse(["--raw", "characterize"]).is_err());
    }

    #[test]
    fn bad_arguments_are_one_line_usage_errors() {
        for bad in [
            &["--samples"][..],
            &["--samples", "0"],
            &["--samples", "-3"],
            &["--samples", "1000001"],
            &["--rounds", "0"],
            &["--rounds", "101"],
            &["--cpu", "x"],
            &["--raw=1"],
            &["--json", ""],
            &["--frobnicate"],
            &["--calibrate", "4097"],
            &["--host-miss", "10001"],
            &["--run-id", "not hex"],
            &["--run-id", ""],
            &["stray"],
        ] {
            let err = parse(bad.iter().copied()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(!err.to_string().contains('\n'));
        }
    }
}
