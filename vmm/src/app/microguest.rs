//! `xvmm` without `--kernel`: the built-in microguest's measurement.

use super::cli::{OnOff, RunArgs};
use super::output::{JsonOutput, Stdout};
use crate::microguest::{self, Options};
use crate::vcpu::StopSignals;
use crate::{Error, Result};
use std::time::Duration;

/// Samples per crossing by default: a few seconds on real hardware and under
/// this machine's emulated CPL0 (~20 us per crossing).
pub const DEFAULT_SAMPLES: u64 = 10_000;
pub const DEFAULT_WARMUP: u64 = 1_000;

/// The microguest's options from the command line; options that only mean
/// something for a Linux guest are usage errors.
fn options(args: &RunArgs) -> Result<Options> {
    let linux_only = [
        (args.trace, "--trace"),
        (args.async_pf == OnOff::On, "--async-pf on"),
        (args.mem.is_some(), "--mem"),
    ];
    if let Some((_, flag)) = linux_only.iter().find(|(given, _)| *given) {
        return Err(Error::Usage(format!(
            "{flag} applies to Linux guests (--kernel); the built-in microguest does not use it"
        )));
    }
    let mut opts = Options::new(
        args.samples.unwrap_or(DEFAULT_SAMPLES),
        args.warmup.unwrap_or(DEFAULT_WARMUP),
    )?;
    opts.raw = args.raw;
    opts.pinned_cpu = args.pin.and_then(|cpu| u32::try_from(cpu).ok());
    opts.machine.tsc_khz = args.tsc_khz;
    opts.machine.tsc_offset = args.tsc_offset;
    Ok(opts)
}

/// Measures, then writes the JSON and prints the tables. A run stopped by
/// `--timeout` or a signal still delivers what it measured, then fails.
pub fn run(args: &RunArgs, stdout: &Stdout) -> Result<()> {
    let opts = options(args)?;
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let _signals = StopSignals::install()?;
    if let Some(cpu) = args.pin {
        crate::affinity::pin_current_thread(cpu)?;
    }
    // A bar only for long runs, and only for a person watching.
    let quiet = args.quiet || opts.samples < DEFAULT_SAMPLES;
    let progress = super::progress::Terminal::new(quiet);
    let measured = microguest::measure(&opts, Duration::from_secs(args.timeout), &progress)?;
    super::deliver::report(&measured.report, "", json, args.quiet, stdout)?;
    match measured.stopped {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<Options> {
        let mut argv = vec!["xvmm"];
        argv.extend_from_slice(extra);
        options(&super::super::cli::Cli::try_parse_from(argv).unwrap().run)
    }

    #[test]
    fn linux_only_options_are_usage_errors() {
        for (flag, extra) in [
            ("--trace", &["--trace"][..]),
            ("--async-pf on", &["--async-pf", "on"]),
            ("--mem", &["--mem", "64"]),
        ] {
            let err = parse(extra).unwrap_err();
            assert!(matches!(err, Error::Usage(_)));
            assert!(
                err.to_string()
                    .starts_with(&format!("usage: {flag} applies")),
                "{err}"
            );
        }
        let o = parse(&["--samples", "5", "--warmup", "0", "--raw", "--pin", "1"]).unwrap();
        assert_eq!(
            (o.samples, o.warmup, o.raw, o.pinned_cpu),
            (5, 0, true, Some(1))
        );
    }
}
