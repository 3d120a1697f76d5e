//! `xvmm --kernel ...`: boot a Linux guest, print and write what its xperf
//! measured, compare it with a bare-metal baseline.

use super::cli::{AsyncPf, RunArgs};
use super::output::{self, JsonOutput, MetricsOutput, Stdout};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use xvmm::host_trace::TraceSummary;
use xvmm::linux::{self, Console, LinuxConfig, Userspace};
use xvmm::vcpu::StopSignals;
use xvmm::{Error, Result};
use xvmm_host::escape::ConsoleEscaper;
use xvmm_results::xperf_args::XperfArgs;
use xvmm_results::{render, Machine, Report};

/// The library's configuration from the command line, async PF offered or not.
pub(super) fn config(args: &RunArgs, kernel: &Path, async_pf: bool) -> Result<LinuxConfig> {
    let userspace = match (&args.initrd, &args.workload) {
        (Some(path), _) => {
            // clap refuses the built-in xperf's options beside --initrd.
            Userspace::Initrd(path.clone())
        }
        (None, Some(program)) => Userspace::Workload(linux::workload::WorkloadSpec {
            program: program.clone(),
            files: args.workload_file.clone(),
            args: args.workload_args.clone(),
            timeout_secs: Some(workload_timeout(args.timeout)),
        }),
        (None, None) => Userspace::BuiltIn {
            xperf: xperf_options(args)?,
        },
    };
    Ok(LinuxConfig {
        kernel: kernel.to_path_buf(),
        userspace,
        cmdline: args.cmdline.clone(),
        mem_mib: args.mem.unwrap_or(linux::DEFAULT_MEM_MIB),
        timeout: Duration::from_secs(args.timeout),
        cpus: args.cpus,
        pin: args.pin.clone().map_or_else(Vec::new, |list| list.0),
        tsc_khz: args.tsc_khz,
        tsc_offset: args.tsc_offset,
        async_pf,
        // The async page fault counts come from the host's trace, the
        // workload's attribution from its exits.
        trace: args.trace || args.host_fault_delay.is_some() || args.workload.is_some(),
        host_fault_delay: args.host_fault_delay,
    })
}

/// The guest's own stop for the workload, seconds: early enough in the
/// VM's `timeout` for xperf to stop it, read the trace and send the
/// report (a quarter of it, from 10 s to 60 s, kept for that).
fn workload_timeout(timeout: u64) -> u64 {
    let kept = (timeout / 4).clamp(10, 60);
    timeout.saturating_sub(kept).max(1)
}

/// `--samples`, `--warmup`, `--rounds`, `--raw` and `--interrupt-path` as
/// xperf's options
/// (and `--host-miss` under `--host-fault-delay`), checked against xperf's
/// bounds here rather than after a boot.
fn xperf_options(args: &RunArgs) -> Result<XperfArgs> {
    let options = XperfArgs {
        samples: args.samples,
        warmup: args.warmup,
        rounds: args.rounds,
        raw: args.raw,
        interrupt_path: args.interrupt_path,
        host_miss: args.host_fault_delay.map(|_| {
            args.samples
                .map_or(linux::HOST_MISS_PAGES, |n| n.min(linux::HOST_MISS_PAGES))
        }),
        ..XperfArgs::default()
    };
    match options.out_of_range() {
        Some(e) => Err(Error::Usage(format!(
            "{} {} is out of range: xperf takes {} to {}",
            e.flag, e.value, e.min, e.max
        ))),
        None => Ok(options),
    }
}

/// Where `--json` and the `--baseline` comparison go, opened before booting.
pub(super) struct Outputs {
    pub json: Option<JsonOutput>,
    pub metrics: Option<MetricsOutput>,
    pub comparison: Option<JsonOutput>,
    pub baseline: Option<Report>,
}

pub(super) fn outputs(args: &RunArgs) -> Result<Outputs> {
    let baseline = args
        .baseline
        .as_deref()
        .map(|p| super::input::read_report(p, "--baseline"))
        .transpose()?;
    if let Some(bare) = &baseline {
        baseline_fits(bare, args)?;
    }
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let comparison = match (&baseline, args.json.as_deref()) {
        (Some(_), Some(path)) if path != Path::new("-") => {
            Some(JsonOutput::prepare(&output::comparison_path(path))?)
        }
        _ => None,
    };
    let metrics = args
        .openmetrics
        .as_deref()
        .map(MetricsOutput::prepare)
        .transpose()?;
    Ok(Outputs {
        json,
        metrics,
        comparison,
        baseline,
    })
}

/// A workload's baseline is a workload's report, and a crossings run's is
/// not: each would compare nothing with the other (checked before booting).
fn baseline_fits(bare: &Report, args: &RunArgs) -> Result<()> {
    let path = args.baseline.as_deref().unwrap_or(Path::new("")).display();
    match (bare.workload.is_some(), args.workload.is_some()) {
        (false, true) => Err(Error::Usage(format!(
            "--baseline {path} has no workload: make it on bare metal with `xperf workload \
             --json FILE -- PROGRAM ARGS`"
        ))),
        (true, false) => Err(Error::Usage(format!(
            "--baseline {path} is a workload's (xperf workload): compare it with a run of \
             --workload PROGRAM"
        ))),
        _ => Ok(()),
    }
}

/// Where the guest console goes: stdout, or stderr when stdout carries the
/// JSON report (`--json -`), so that stdout is the report alone.
#[derive(Clone)]
enum ConsoleTo {
    Stdout(Stdout),
    Stderr,
}

impl ConsoleTo {
    fn print(&self, text: &str) {
        match self {
            ConsoleTo::Stdout(s) => s.print(text),
            ConsoleTo::Stderr => output::eprint(text),
        }
    }
}

/// The guest console, escaped, line by line (byte by byte when a person is
/// typing to the guest).
struct ConsoleSink {
    to: ConsoleTo,
    escaper: ConsoleEscaper,
    line: String,
    interactive: bool,
}

impl Write for ConsoleSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line += &self.escaper.escape(buf);
        if self.interactive || self.line.ends_with('\n') {
            self.to.print(&self.line);
            self.line.clear();
        }
        Ok(buf.len())
    }

    /// The UART flushes after every byte: lines stay whole until they end.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ConsoleSink {
    /// The run is over (the UART is gone): what is left goes out, ended with
    /// a newline so that nothing xvmm prints next is glued to a guest line cut
    /// short.
    fn drop(&mut self) {
        self.line += &self.escaper.finish();
        if !self.line.is_empty() {
            if !self.line.ends_with('\n') {
                self.line.push('\n');
            }
            self.to.print(&self.line);
        }
    }
}

fn console(quiet: bool, to: ConsoleTo) -> Console {
    if quiet {
        return Console {
            out: Box::new(std::io::sink()),
            input: None,
        };
    }
    // Forward keystrokes only from a terminal, so that xvmm never swallows a
    // pipe meant for someone else.
    let interactive = std::io::stdin().is_terminal();
    Console {
        out: Box::new(ConsoleSink {
            to,
            escaper: ConsoleEscaper::new(),
            line: String::new(),
            interactive,
        }),
        input: interactive.then(|| Box::new(std::io::stdin()) as linux::ConsoleFeed),
    }
}

/// `--verbose`: one line per pre-kernel phase, then their sum.
fn profile_text(profile: &linux::BootProfile) -> String {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut text = String::new();
    for (phase, took) in &profile.phases {
        text += &format!("xvmm: boot: {:>8.3} ms  {phase}\n", ms(*took));
    }
    text + &format!(
        "xvmm: boot: {:>8.3} ms  in all before the guest's first instruction\n",
        ms(profile.total())
    )
}

/// The kernel `--kernel` names.
pub(super) fn kernel(args: &RunArgs) -> Result<&Path> {
    args.kernel
        .as_deref()
        .ok_or_else(|| Error::Usage("--kernel is required to boot Linux".into()))
}

/// Boots the kernel named by `--kernel` once and delivers its results
/// (`--async-pf both` boots twice: `super::async_pf`).
pub fn run(args: &RunArgs, stdout: &Stdout) -> Result<()> {
    let kernel = kernel(args)?;
    let prepared = linux::prepare(config(args, kernel, args.async_pf == AsyncPf::On)?)?;
    let outputs = outputs(args)?;
    let _signals = StopSignals::install()?;
    let mut booted = boot(prepared, &outputs, args, stdout)?;
    let delivered = deliver(booted.report.take(), outputs, args, stdout);
    booted.verdict(delivered, args)
}

/// One boot's report, joined with everything the host saw, and how it ended.
pub(super) struct Booted {
    pub report: Option<Report>,
    end: Result<()>,
    bad_results: Option<Error>,
    built_in: bool,
}

impl Booted {
    /// Why the guest's run failed, if it did.
    pub fn end_error(&self) -> Option<String> {
        self.end.as_ref().err().map(ToString::to_string)
    }

    /// How the guest ended comes first; then what the results need.
    pub fn verdict(self, delivered: Result<bool>, args: &RunArgs) -> Result<()> {
        self.end?;
        match (delivered, self.bad_results) {
            (Err(e), _) => Err(e),
            (Ok(false), Some(bad)) => Err(bad),
            (Ok(false), None) if self.built_in => {
                Err(Error::Guest("guest ended without sending results".into()))
            }
            (Ok(false), None) => {
                if let Some(path) = &args.json {
                    output::eprint(&format!(
                        "xvmm: warning: the guest sent no results; nothing written to {}\n",
                        path.display()
                    ));
                }
                Ok(())
            }
            (Ok(true), _) => Ok(()),
        }
    }
}

/// Boots a prepared guest, prints its notes, and joins its results with the
/// host's view, the async page fault figures and the timeline.
pub(super) fn boot(
    prepared: linux::Prepared,
    outputs: &Outputs,
    args: &RunArgs,
    stdout: &Stdout,
) -> Result<Booted> {
    let built_in = prepared.built_in();
    let offered = prepared.async_pf_offered();
    let console_to = match &outputs.json {
        Some(json) if json.is_stdout() => ConsoleTo::Stderr,
        _ => ConsoleTo::Stdout(stdout.clone()),
    };
    let show = |profile: &linux::BootProfile| {
        if args.verbose {
            output::eprint(&profile_text(profile));
        }
    };
    let run = linux::run_with(prepared, console(args.quiet, console_to), &show)?;
    if !args.quiet {
        for note in &run.notes {
            output::eprint(&format!("xvmm: {note}\n"));
        }
    }
    let facts = linux::AsyncPfFacts {
        offered,
        msr_en: run.async_pf_en,
        faults: run.host_faults.clone(),
    };
    let report = joined(
        run.results.map(|mut r| {
            r.notes.push(run.placement.note());
            r
        }),
        run.trace.as_ref(),
        run.tsc.clone(),
        (run.run_id.clone(), run.asked_samples),
        &facts,
        &run.intervals,
    );
    if report.is_none() {
        if let Some(t) = &run.trace {
            output::eprint(&render::host_exit_table(&t.exits));
        }
    }
    Ok(Booted {
        report,
        end: run.end,
        bad_results: run.bad_results,
        built_in,
    })
}

/// The guest's report with the host's view, the async page fault figures,
/// the timeline and attribution.
fn joined(
    results: Option<Report>,
    trace: Option<&TraceSummary>,
    mut tsc: linux::TscFacts,
    (run_id, asked_samples): (Option<String>, Option<u64>),
    facts: &linux::AsyncPfFacts,
    intervals: &xvmm::devices::interval_sink::IntervalSink,
) -> Option<Report> {
    let mut report = results?;
    let host = Machine::probe();
    linux::add_host_view(&mut report, &host, trace);
    linux::add_async_pf(&mut report, facts, trace);
    let Some(trace) = trace else {
        return Some(report);
    };
    if tsc.host_khz == 0 {
        // Not KVM's own divisor: a scaled run's ratio may then be off.
        tsc.host_khz = host.tsc_khz;
        if tsc.requested_khz.is_some() {
            report.notes.push(format!(
                "KVM did not report the host kernel's TSC rate (KVM_GET_TSC_KHZ on the VM, \
                 Linux 6.0 and later): the timeline's ratio uses the probed {} kHz",
                host.tsc_khz
            ));
        }
    }
    match &run_id {
        Some(id) => {
            let calibrations = linux::CALIBRATIONS;
            linux::add_timeline(&mut report, trace, &tsc, id, asked_samples, calibrations);
            linux::workload::add_workload_exits(&mut report, trace, id, intervals);
        }
        None => report.notes.push(
            "no timeline: the guest was not asked for a run id and calibration exits \
             (a user initrd or an xperf subcommand), so its samples cannot be joined with \
             the host's trace"
                .into(),
        ),
    }
    Some(report)
}

/// Writes and prints the results, the exit table and the comparison;
/// `Ok(false)` when the guest sent none.
pub(super) fn deliver(
    report: Option<Report>,
    outputs: Outputs,
    args: &RunArgs,
    stdout: &Stdout,
) -> Result<bool> {
    let Some(report) = report else {
        return Ok(false);
    };
    let mut extra = String::new();
    let traced = args.trace || args.host_fault_delay.is_some();
    if traced && report.host_exits.is_empty() {
        // The report's tables show exits only when there are some; say so.
        extra = format!("\n{}", render::host_exit_table(&[]));
    }
    let mut compared = Ok(());
    if let Some(bare) = &outputs.baseline {
        let comparison = xvmm_results::compare(&report, bare);
        extra += &format!("\n{}", render::comparison_table(&comparison));
        if let Some(out) = outputs.comparison {
            compared = out.deliver(&comparison.to_json_pretty(), stdout);
            if let Some(path) = &args.json {
                let file = output::comparison_path(path);
                extra += &format!("comparison written to {}\n", file.display());
            }
        }
    }
    let to = super::deliver::To {
        json: outputs.json,
        metrics: outputs.metrics,
    };
    super::deliver::report(&report, &extra, to, args.quiet, stdout)?;
    compared.map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["xvmm", "--kernel", "k"];
        argv.extend_from_slice(extra);
        super::super::cli::Cli::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn verbose_prints_each_phase_and_their_sum() {
        assert!(run_args(&["--verbose"]).verbose);
        assert!(!run_args(&[]).verbose);
        let mut argv = vec!["xvmm", "--kernel", "k", "--verbose", "--quiet"];
        assert!(super::super::cli::Cli::try_parse_from(argv.drain(..)).is_err());
        let profile = linux::BootProfile {
            phases: vec![
                ("read", std::time::Duration::from_micros(1500)),
                ("load", std::time::Duration::from_micros(250)),
            ],
        };
        let text = profile_text(&profile);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].contains("1.500 ms") && lines[0].ends_with("read"),
            "{text}"
        );
        assert!(lines[2].contains("1.750 ms"), "{text}");
    }

    /// A workload's baseline must be a workload's, and a crossings run's
    /// must not: each is refused before the boot in one line.
    #[test]
    fn a_baseline_of_the_other_kind_is_refused_before_booting() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report");
        let read = |f: &str| super::super::input::read_report(&data.join(f), "b").unwrap();
        let (workload, crossings) = (read("workload-bm.json"), read("traced-bm.json"));
        let with_workload = run_args(&["--workload", "w", "--baseline", "b.json"]);
        let without = run_args(&["--initrd", "i", "--baseline", "b.json"]);
        assert!(baseline_fits(&workload, &with_workload).is_ok());
        assert!(baseline_fits(&crossings, &without).is_ok());
        for (bare, args, says) in [
            (
                &crossings,
                &with_workload,
                "--baseline b.json has no workload",
            ),
            (&workload, &without, "--baseline b.json is a workload's"),
        ] {
            let err = baseline_fits(bare, args).unwrap_err().to_string();
            assert!(err.contains(says) && !err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn xperf_options_need_the_built_in_initramfs() {
        for ok in [
            &["--samples", "5", "--warmup", "0", "--raw"][..],
            &["--initrd", "i", "--trace", "--pin", "0"],
        ] {
            assert!(
                config(&run_args(ok), Path::new("k"), false).is_ok(),
                "{ok:?}"
            );
        }
        let initrd = config(&run_args(&["--initrd", "i"]), Path::new("k"), false).unwrap();
        assert!(matches!(initrd.userspace, Userspace::Initrd(_)));
    }

    #[test]
    fn sample_counts_are_checked_before_booting() {
        for bad in [
            &["--samples", "0"][..],
            &["--samples", "1000001"],
            &["--warmup", "2000000"],
        ] {
            let err = config(&run_args(bad), Path::new("k"), false).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{bad:?}: {err}");
        }
        let cfg = config(&run_args(&["--samples", "1000000"]), Path::new("k"), false).unwrap();
        let Userspace::BuiltIn { xperf } = cfg.userspace else {
            panic!("not the built-in userspace");
        };
        assert_eq!(xperf.to_argv(), ["--samples", "1000000"]);
        let err = config(&run_args(&["--rounds", "101"]), Path::new("k"), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "usage: --rounds 101 is out of range: xperf takes 1 to 100"
        );
        let host_miss = |extra: &[&str]| {
            let cfg = config(&run_args(extra), Path::new("k"), true).unwrap();
            assert!(cfg.trace && cfg.async_pf, "a delay implies tracing");
            let Userspace::BuiltIn { xperf } = cfg.userspace else {
                panic!("not the built-in userspace");
            };
            xperf.host_miss
        };
        assert_eq!(host_miss(&["--host-fault-delay", "2ms"]), Some(200));
        assert_eq!(
            host_miss(&["--host-fault-delay", "2ms", "--samples", "50"]),
            Some(50)
        );
        let plain = config(&run_args(&[]), Path::new("k"), false).unwrap();
        let Userspace::BuiltIn { xperf } = plain.userspace else {
            panic!("not the built-in userspace");
        };
        assert_eq!(xperf.host_miss, None, "no --host-miss without a delay");
    }

    #[test]
    fn the_console_is_escaped_and_line_buffered() {
        let mut sink = ConsoleSink {
            to: ConsoleTo::Stdout(Stdout::new()),
            escaper: ConsoleEscaper::new(),
            line: String::new(),
            interactive: false,
        };
        sink.write_all(b"partial \x1b[2J").unwrap();
        sink.flush().unwrap();
        assert_eq!(sink.line, "partial \\x1b[2J", "held until the line ends");
        sink.write_all(b" done\n").unwrap();
        assert_eq!(sink.line, "", "a whole line goes out");
    }
}
