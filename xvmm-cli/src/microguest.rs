//! `xvmm` without `--kernel`: the built-in microguest's measurement.

use super::cli::RunArgs;
use super::output::{JsonOutput, MetricsOutput, Stdout};
use std::time::Duration;
use xvmm::microguest::{self, Options};
use xvmm::vcpu::StopSignals;
use xvmm::{Error, Result};

/// Samples per crossing by default: a few seconds on real hardware and under
/// this machine's emulated CPL0 (~20 us per crossing).
pub const DEFAULT_SAMPLES: u64 = 10_000;
pub const DEFAULT_WARMUP: u64 = 1_000;

/// The microguest's options from the command line (clap refuses those that
/// only mean something for a Linux guest: they require --kernel).
fn options(args: &RunArgs) -> Result<Options> {
    let opts = Options::new(
        args.samples.unwrap_or(DEFAULT_SAMPLES),
        args.warmup.unwrap_or(DEFAULT_WARMUP),
    )?;
    let mut opts = opts.with_rounds(args.rounds.unwrap_or(microguest::measure::DEFAULT_ROUNDS))?;
    opts.raw = args.raw;
    opts.trace = args.trace;
    let (sender, receiver) = pins(args)?;
    opts.pinned_cpu = sender.and_then(|cpu| u32::try_from(cpu).ok());
    opts.machine.receiver_cpu = receiver;
    opts.machine.tsc_khz = args.tsc_khz;
    opts.machine.tsc_offset = args.tsc_offset;
    Ok(opts)
}

/// The host CPUs `--pin` names: the first for vCPU 0 (every row's), the
/// second for vCPU 1, the receiver the IPI rows add.
fn pins(args: &RunArgs) -> Result<(Option<usize>, Option<usize>)> {
    match args.pin.as_ref().map(|list| list.0.as_slice()) {
        None => Ok((None, None)),
        Some([cpu]) => Ok((Some(*cpu), None)),
        Some([sender, receiver]) => {
            // Checked before anything runs: the receiver's thread pins
            // itself only when its first row does.
            let usable = xvmm::affinity::usable_cpus();
            if !usable.contains(receiver) {
                return Err(Error::Usage(format!(
                    "--pin {receiver}: xvmm may not run on that host CPU (it may use {})",
                    cpu_ranges(&usable)
                )));
            }
            Ok((Some(*sender), Some(*receiver)))
        }
        Some(many) => Err(Error::Usage(format!(
            "--pin names {} CPUs: the built-in microguest runs at most two vCPUs, the IPI rows' \
             sender and receiver (more need --kernel with --cpus)",
            many.len()
        ))),
    }
}

/// CPUs as a kernel-style list ("0-3,6").
fn cpu_ranges(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        parts.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    parts.join(",")
}

/// Pins the vCPU thread: to `--pin`, else to the CPU it runs on now (a
/// moving vCPU thread would mix CPUs into one row). Returns the note a
/// report carries when the default pinning failed; a failing `--pin` is an
/// error.
fn pin(requested: Option<usize>, opts: &mut Options) -> Result<Option<String>> {
    if let Some(cpu) = requested {
        xvmm::affinity::pin_current_thread(cpu)?;
        return Ok(None);
    }
    // SAFETY: no arguments.
    let current = unsafe { libc::sched_getcpu() };
    let Ok(cpu) = usize::try_from(current) else {
        return Ok(Some(format!(
            "the vCPU thread is NOT pinned: sched_getcpu failed ({}); samples may mix CPUs",
            std::io::Error::last_os_error()
        )));
    };
    match xvmm::affinity::pin_current_thread(cpu) {
        Ok(()) => {
            opts.pinned_cpu = u32::try_from(cpu).ok();
            Ok(None)
        }
        Err(e) => Ok(Some(format!(
            "the vCPU thread is NOT pinned ({e}); samples may mix CPUs"
        ))),
    }
}

/// Measures, then writes the JSON and prints the tables. A run stopped by
/// `--timeout` or a signal still delivers what it measured, then fails.
pub fn run(args: &RunArgs, stdout: &Stdout) -> Result<()> {
    let opts = options(args)?;
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let metrics = args
        .openmetrics
        .as_deref()
        .map(MetricsOutput::prepare)
        .transpose()?;
    let _signals = StopSignals::install()?;
    let mut opts = opts;
    let pin_note = pin(pins(args)?.0, &mut opts)?;
    // A bar only for long runs, and only for a person watching.
    let quiet = args.quiet || opts.samples < DEFAULT_SAMPLES;
    let progress = super::progress::Terminal::new(quiet);
    let mut measured = microguest::measure(&opts, Duration::from_secs(args.timeout), &progress)?;
    if let Some(note) = pin_note {
        measured.report.notes.insert(0, note);
    }
    let to = super::deliver::To { json, metrics };
    super::deliver::report(&measured.report, "", to, args.quiet, stdout)?;
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
    fn a_second_pin_is_the_receivers_and_cpu_lists_read_back() {
        let o = parse(&["--pin", "1,0"]).unwrap();
        assert_eq!((o.pinned_cpu, o.machine.receiver_cpu), (Some(1), Some(0)));
        let o = parse(&["--pin", "1"]).unwrap();
        assert_eq!(o.machine.receiver_cpu, None);
        assert_eq!(cpu_ranges(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_ranges(&[5]), "5");
        assert_eq!(cpu_ranges(&[]), "");
    }

    #[test]
    fn options_carry_the_flags() {
        let o = parse(&["--samples", "5", "--warmup", "0", "--raw", "--pin", "1"]).unwrap();
        assert_eq!(
            (o.samples, o.warmup, o.raw, o.pinned_cpu),
            (5, 0, true, Some(1))
        );
    }
}
