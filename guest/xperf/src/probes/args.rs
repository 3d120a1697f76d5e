//! `xperf probes` options, parsed by hand like the rest of xperf's command
//! line (a guest's PID 1 gets them from the kernel command line).

use super::parse::{self, ProbePoint};
use super::sampling::Kind;
use crate::error::{Error, Result};
use std::path::PathBuf;
use xvmm_results::probes::mode;
use xvmm_results::xperf_args::{self as words, Words, MAX_COUNT as MAX_SAMPLES};

pub const DEFAULT_SAMPLES: u64 = 10_000;
pub const DEFAULT_ROUNDS: u64 = 10;
pub const DEFAULT_WARMUP: u64 = 200;
pub const DEFAULT_NULL_SAMPLES: u64 = 20_000;
pub const MAX_ROUNDS: u64 = 1000;
pub const DEFAULT_GETPPID_PROBE: &str = "__x64_sys_getppid";
pub const DEFAULT_PF_PROBE: &str = "handle_mm_fault";

pub const USAGE: &str = "\
usage: xperf probes [--samples N] [--rounds N] [--warmup N] [--null-samples N] [--cpu N]
                    [--modes LIST] [--crossings LIST] [--getppid-probe SYMBOL[+OFFSET]]
                    [--pf-probe SYMBOL[+OFFSET]] [--tracefs DIR] [--json FILE|-]
       xperf probes --show-state [--tracefs DIR]

Measures what instrumentation adds to the getppid round trip and to the #PF
refault round trip (root only): each mode against the same crossing without
a probe, alternated in rounds. Probes are dynamic events of group 'xperf',
enabled only in xperf's own tracefs instance; every hit is counted in the
trace and must match the samples; everything is removed and the host's
tracing state restored on every way out.

  --samples N        probed samples per mode and crossing, and as many without
                     the probe (default 10000)
  --rounds N         alternating no-probe/probe rounds (default 10)
  --warmup N         unrecorded iterations before each chunk (default 200)
  --null-samples N   samples of the empty stamp pair (default 20000)
  --cpu N            CPU to pin to (default: the CPU xperf starts on)
  --modes LIST       comma-separated, or 'all' (default) or 'none' (baselines
                     only): tracepoint, syscall-slow-path, kprobe-int3,
                     kprobe-optimized, kprobe-ftrace, kretprobe, fprobe, function
  --crossings LIST   getppid, pf-refault (default both)
  --getppid-probe P  the probed function, SYMBOL or SYMBOL+OFFSET (the int3 and
                     optimized kprobes go to OFFSET; default: the instruction
                     after the ftrace call site of __x64_sys_getppid)
  --pf-probe P       likewise for the #PF (default handle_mm_fault)
  --tracefs DIR      where tracefs is mounted (default: /sys/kernel/tracing,
                     mounted there, and unmounted after, when absent)
  --json FILE        the JSON report (as xperf's)
  --show-state       print the host tracing state a run may touch (mounts,
                     global tracefs files, instances, kprobes list and
                     kprobes-optimization) and exit: equal before and after a run
  -h, --help         this text";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub samples: u64,
    pub rounds: u64,
    pub warmup: u64,
    pub null_samples: u64,
    pub cpu: Option<u32>,
    pub modes: Vec<&'static str>,
    pub crossings: Vec<Kind>,
    pub getppid_probe: ProbePoint,
    pub pf_probe: ProbePoint,
    pub tracefs: Option<PathBuf>,
    pub json: Option<PathBuf>,
    /// Only print the host tracing state.
    pub show_state: bool,
}

impl Default for Options {
    fn default() -> Self {
        let point = |s: &str| ProbePoint {
            symbol: s.into(),
            offset: None,
        };
        Options {
            samples: DEFAULT_SAMPLES,
            rounds: DEFAULT_ROUNDS,
            warmup: DEFAULT_WARMUP,
            null_samples: DEFAULT_NULL_SAMPLES,
            cpu: None,
            modes: mode::MEASURED.to_vec(),
            crossings: vec![Kind::Getppid, Kind::PfRefault],
            getppid_probe: point(DEFAULT_GETPPID_PROBE),
            pf_probe: point(DEFAULT_PF_PROBE),
            tracefs: None,
            json: None,
            show_state: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Box<Options>),
    Help,
}

fn modes(value: &str) -> Result<Vec<&'static str>> {
    match value {
        "all" => return Ok(mode::MEASURED.to_vec()),
        "none" => return Ok(Vec::new()),
        _ => {}
    }
    let mut out = Vec::new();
    for name in value.split(',') {
        let m = mode::MEASURED.iter().find(|m| **m == name).ok_or_else(|| {
            Error::Usage(format!(
                "--modes: unknown mode {name:?} (one of {}, or all, none)",
                mode::MEASURED.join(", ")
            ))
        })?;
        if !out.contains(m) {
            out.push(*m);
        }
    }
    Ok(out)
}

fn crossings(value: &str) -> Result<Vec<Kind>> {
    let mut out = Vec::new();
    for name in value.split(',') {
        let k = Kind::parse(name).ok_or_else(|| {
            Error::Usage(format!(
                "--crossings: unknown crossing {name:?} (getppid, pf-refault)"
            ))
        })?;
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

/// `name`'s value (inline or the next word), which may not be empty.
fn value_of<I: Iterator<Item = String>>(
    name: &str,
    inline: Option<String>,
    words: &mut Words<I>,
) -> Result<String> {
    match words.value(inline) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Error::Usage(format!("{name} needs a value"))),
    }
}

/// A count of `name` within `min..=max`.
fn count_within(name: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    words::count(name, value, min, max).map_err(Error::Usage)
}

/// Parses the arguments after `probes`.
pub fn parse<I, S>(args: I) -> Result<Command>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut o = Options::default();
    let mut args = Words::new(args.into_iter().map(Into::into));
    while let Some((name, inline)) = args.next_option() {
        if matches!(name.as_str(), "-h" | "--help" | "--show-state") {
            if inline.is_some() {
                return Err(Error::Usage(format!("{name} takes no value")));
            }
            if name == "--show-state" {
                o.show_state = true;
                continue;
            }
            return Ok(Command::Help);
        }
        let known = [
            "--samples",
            "--rounds",
            "--warmup",
            "--null-samples",
            "--cpu",
            "--modes",
            "--crossings",
            "--getppid-probe",
            "--pf-probe",
            "--tracefs",
            "--json",
        ];
        if !known.contains(&name.as_str()) {
            return Err(Error::Usage(format!(
                "xperf probes: unknown argument {name:?} (try xperf probes --help)"
            )));
        }
        let v = value_of(&name, inline, &mut args)?;
        let point =
            |v: &str| parse::probe_point(v).map_err(|e| Error::Usage(format!("{name}: {e}")));
        match name.as_str() {
            "--samples" => o.samples = count_within(&name, &v, 1, MAX_SAMPLES)?,
            "--rounds" => o.rounds = count_within(&name, &v, 1, MAX_ROUNDS)?,
            "--warmup" => o.warmup = count_within(&name, &v, 0, MAX_SAMPLES)?,
            "--null-samples" => o.null_samples = count_within(&name, &v, 1, MAX_SAMPLES)?,
            "--cpu" => {
                // count_within() keeps it at most u32::MAX.
                let cpu = count_within(&name, &v, 0, u64::from(u32::MAX))?;
                o.cpu = Some(u32::try_from(cpu).unwrap_or(u32::MAX));
            }
            "--modes" => o.modes = modes(&v)?,
            "--crossings" => o.crossings = crossings(&v)?,
            "--getppid-probe" => o.getppid_probe = point(&v)?,
            "--pf-probe" => o.pf_probe = point(&v)?,
            "--tracefs" => o.tracefs = Some(PathBuf::from(v)),
            _ => o.json = Some(PathBuf::from(v)),
        }
    }
    if o.rounds > o.samples {
        return Err(Error::Usage(format!(
            "--rounds {} is more than --samples {}: each round needs a sample",
            o.rounds, o.samples
        )));
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
    fn defaults_lists_and_probe_points() {
        assert_eq!(run(&[]), Options::default());
        let o = run(&[
            "--samples=500",
            "--rounds",
            "5",
            "--modes",
            "kprobe-int3,tracepoint,kprobe-int3",
            "--crossings=pf-refault",
            "--getppid-probe",
            "__x64_sys_getppid+0x5",
            "--tracefs",
            "/t",
        ]);
        assert_eq!((o.samples, o.rounds), (500, 5));
        assert_eq!(o.modes, [mode::KPROBE_INT3, mode::TRACEPOINT]);
        assert_eq!(o.crossings, [Kind::PfRefault]);
        assert_eq!(o.getppid_probe.offset, Some(5));
        assert_eq!(o.tracefs, Some(PathBuf::from("/t")));
        assert!(run(&["--modes", "none"]).modes.is_empty());
        assert!(run(&["--show-state"]).show_state);
        assert_eq!(parse(["--help"]).unwrap(), Command::Help);
    }

    #[test]
    fn bad_arguments_are_one_line_usage_errors() {
        for bad in [
            &["--samples"][..],
            &["--samples", "0"],
            &["--rounds", "0"],
            &["--rounds", "20", "--samples", "10"],
            &["--modes", "kprobe"],
            &["--modes", ""],
            &["--crossings", "pf"],
            &["--getppid-probe", "1abc"],
            &["--pf-probe", "handle_mm_fault+x"],
            &["--raw"],
            &["--help=1"],
            &["--show-state=yes"],
            &["stray"],
            &["--tracefs="],
        ] {
            let err = parse(bad.iter().copied()).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(!err.to_string().contains('\n'), "{bad:?}");
        }
    }
}
