//! Command-line options. Parsed by hand: xperf is often a guest's PID 1 with
//! arguments from the kernel command line, and every error must be one line.
//! The crossing run's options, their bounds and the word splitter are
//! `xvmm_results::xperf_args`, which xvmm writes the built-in xperf's
//! arguments with; this file dispatches the subcommands and applies the
//! defaults.

use crate::error::{Error, Result};
use std::path::PathBuf;
use xvmm_results::xperf_args::{Parsed, XperfArgs};
pub use xvmm_results::xperf_args::{
    DEFAULT_ROUNDS, DEFAULT_SAMPLES, MAX_CALIBRATIONS, MAX_COUNT as MAX_SAMPLES, MAX_ROUNDS,
    MAX_RUN_ID,
};

pub const DEFAULT_WARMUP: u64 = 1_000;
pub const DEFAULT_NULL_SAMPLES: u64 = 100_000;

pub const USAGE: &str = "\
usage: xperf [--samples N] [--warmup N] [--null-samples N] [--rounds R] [--cpu N] [--raw]
             [--interrupt-path] [--json FILE]
       xperf characterize [--samples N] [--cpu N] [--json FILE]   (see characterize --help)
       xperf probes [OPTIONS]   (what instrumentation costs; xperf probes --help)
       xperf workload [OPTIONS] -- CMD [ARGS]   (a command's kernel time; workload --help)

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
  --interrupt-path  also measure the interrupt path's crossings: a futex
                    wake-up of a thread on another CPU and back
                    (wakeup-cross-cpu), mprotect that must flush another
                    CPU's TLB (mprotect-shootdown), the same with no other
                    CPU to flush (mprotect-local), and a 200 us timer sleep
                    (timer-sleep); round trips only
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
    /// The interrupt path's crossings too (`crate::interrupt_path`).
    pub interrupt_path: bool,
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
            interrupt_path: false,
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
    /// `xperf workload ... -- CMD`: a whole command's kernel time.
    Workload(Box<crate::workload::args::Options>),
    WorkloadHelp,
    Help,
    Version,
}

/// The options as given, with xperf's defaults for the rest.
impl From<XperfArgs> for Options {
    fn from(a: XperfArgs) -> Options {
        Options {
            samples: a.samples.unwrap_or(DEFAULT_SAMPLES),
            warmup: a.warmup.unwrap_or(DEFAULT_WARMUP),
            null_samples: a.null_samples.unwrap_or(DEFAULT_NULL_SAMPLES),
            rounds: a.rounds.unwrap_or(DEFAULT_ROUNDS),
            cpu: a.cpu,
            raw: a.raw,
            json: a.json,
            calibrate: a.calibrate.unwrap_or(0),
            run_id: a.run_id,
            host_miss: a.host_miss.unwrap_or(0),
            interrupt_path: a.interrupt_path,
        }
    }
}

/// Parses the arguments after the program name.
pub fn parse<I, S>(args: I) -> Result<Command>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args = args.into_iter().map(Into::into).peekable();
    if args.peek().is_some_and(|a| a == "probes") {
        args.next();
        return Ok(match crate::probes::args::parse(args)? {
            crate::probes::args::Command::Run(o) => Command::Probes(o),
            crate::probes::args::Command::Help => Command::ProbesHelp,
        });
    }
    if args.peek().is_some_and(|a| a == "workload") {
        args.next();
        return Ok(match crate::workload::args::parse(args)? {
            crate::workload::args::Command::Run(o) => Command::Workload(o),
            crate::workload::args::Command::Help => Command::WorkloadHelp,
        });
    }
    if args.peek().is_some_and(|a| a == "characterize") {
        return crate::characterize::options::parse(args.skip(1)).map(Command::Characterize);
    }
    match XperfArgs::parse(args).map_err(Error::Usage)? {
        Parsed::Run(a) => Ok(Command::Run(Options::from(a))),
        Parsed::Help => Ok(Command::Help),
        Parsed::Version => Ok(Command::Version),
    }
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
        assert!(matches!(
            parse(["workload", "--", "true"]).unwrap(),
            Command::Workload(o) if o.command == ["true"]
        ));
        assert_eq!(parse(["workload", "-h"]).unwrap(), Command::WorkloadHelp);
        assert_eq!(parse(["workload"]).unwrap_err().exit_code(), 2);
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
