//! `xvmm --kernel ...`: boot a Linux guest, print and write what its xperf
//! measured, compare it with a bare-metal baseline.

use super::cli::{OnOff, RunArgs};
use super::output::{self, JsonOutput, Stdout};
use crate::host_trace::TraceSummary;
use crate::linux::{self, Console, LinuxConfig, LinuxRun, Userspace};
use crate::vcpu::StopSignals;
use crate::{Error, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use xvmm_results::escape::ConsoleEscaper;
use xvmm_results::{render, Machine, Report};

/// xperf's own bounds for `--samples` and `--warmup` (guest/xperf/src/args.rs).
const XPERF_MAX_COUNT: u64 = 1_000_000;
/// xperf's bound for `--rounds`.
const XPERF_MAX_ROUNDS: u32 = 100;

/// The library's configuration from the command line.
fn config(args: &RunArgs, kernel: &Path) -> Result<LinuxConfig> {
    let userspace = match &args.initrd {
        Some(path) => {
            // These become xperf's arguments, so they need the built-in xperf.
            let xperf_only = [
                (args.samples.is_some(), "--samples"),
                (args.warmup.is_some(), "--warmup"),
                (args.rounds.is_some(), "--rounds"),
                (args.raw, "--raw"),
            ];
            if let Some((_, name)) = xperf_only.iter().find(|(given, _)| *given) {
                return Err(Error::Usage(format!(
                    "{name} is passed to the built-in xperf and cannot be used with --initrd (put init arguments after ' -- ' in --cmdline)"
                )));
            }
            Userspace::Initrd(path.clone())
        }
        None => Userspace::BuiltIn {
            xperf_args: xperf_args(args)?,
        },
    };
    Ok(LinuxConfig {
        kernel: kernel.to_path_buf(),
        userspace,
        cmdline: args.cmdline.clone(),
        mem_mib: args.mem.unwrap_or(linux::DEFAULT_MEM_MIB),
        timeout: Duration::from_secs(args.timeout),
        pin: args.pin,
        tsc_khz: args.tsc_khz,
        tsc_offset: args.tsc_offset,
        async_pf: args.async_pf == OnOff::On,
        trace: args.trace,
    })
}

/// `--samples`, `--warmup` and `--raw` as xperf options, checked against
/// xperf's limits here rather than after a boot.
fn xperf_args(args: &RunArgs) -> Result<Vec<String>> {
    if let Some(n) = args.samples {
        if !(1..=XPERF_MAX_COUNT).contains(&n) {
            return Err(Error::Usage(format!(
                "--samples {n} is out of range: xperf takes 1 to {XPERF_MAX_COUNT}"
            )));
        }
    }
    if let Some(n) = args.warmup {
        if n > XPERF_MAX_COUNT {
            return Err(Error::Usage(format!(
                "--warmup {n} is out of range: xperf takes 0 to {XPERF_MAX_COUNT}"
            )));
        }
    }
    let mut xperf = linux::builtin::xperf_args(args.samples, args.warmup, args.raw);
    if let Some(n) = args.rounds {
        if !(1..=XPERF_MAX_ROUNDS).contains(&n) {
            return Err(Error::Usage(format!(
                "--rounds {n} is out of range: xperf takes 1 to {XPERF_MAX_ROUNDS}"
            )));
        }
        xperf.extend(["--rounds".to_string(), n.to_string()]);
    }
    Ok(xperf)
}

/// Where `--json` and the `--baseline` comparison go, opened before booting.
struct Outputs {
    json: Option<JsonOutput>,
    comparison: Option<JsonOutput>,
    baseline: Option<Report>,
}

fn outputs(args: &RunArgs) -> Result<Outputs> {
    let baseline = args
        .baseline
        .as_deref()
        .map(|p| super::input::read_report(p, "--baseline"))
        .transpose()?;
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let comparison = match (&baseline, args.json.as_deref()) {
        (Some(_), Some(path)) if path != Path::new("-") => {
            Some(JsonOutput::prepare(&output::comparison_path(path))?)
        }
        _ => None,
    };
    Ok(Outputs {
        json,
        comparison,
        baseline,
    })
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

/// Boots the kernel named by `--kernel` and delivers its results.
pub fn run(args: &RunArgs, stdout: &Stdout) -> Result<()> {
    let kernel = args
        .kernel
        .as_deref()
        .ok_or_else(|| Error::Usage("--kernel is required to boot Linux".into()))?;
    let prepared = linux::prepare(config(args, kernel)?)?;
    let built_in = prepared.built_in();
    let outputs = outputs(args)?;
    let console_to = match &outputs.json {
        Some(json) if json.is_stdout() => ConsoleTo::Stderr,
        _ => ConsoleTo::Stdout(stdout.clone()),
    };
    let _signals = StopSignals::install()?;
    let LinuxRun {
        end,
        results,
        bad_results,
        trace,
        notes,
        tsc,
        run_id,
    } = linux::run(prepared, console(args.quiet, console_to))?;
    if !args.quiet {
        for note in &notes {
            output::eprint(&format!("xvmm: {note}\n"));
        }
    }
    let traced = trace.as_ref().map(|t| Traced {
        summary: t,
        tsc,
        run_id,
    });
    let delivered = deliver(results, traced, outputs, args, stdout);
    // How the guest ended comes first; then what the results need.
    end?;
    match (delivered, bad_results) {
        (Err(e), _) => Err(e),
        (Ok(false), Some(bad)) => Err(bad),
        (Ok(false), None) if built_in => {
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

/// What a traced run brought back besides the guest's results.
struct Traced<'a> {
    summary: &'a TraceSummary,
    tsc: linux::TscFacts,
    /// The id xperf stamped its results with; `None` when it was not asked
    /// to (a user initrd, an xperf subcommand): no timeline can be joined.
    run_id: Option<String>,
}

/// Writes and prints the results, with the host's view, the timeline and
/// attribution, the exit table and the comparison; `Ok(false)` when the
/// guest sent none.
fn deliver(
    results: Option<Report>,
    traced: Option<Traced>,
    outputs: Outputs,
    args: &RunArgs,
    stdout: &Stdout,
) -> Result<bool> {
    let trace = traced.as_ref().map(|t| t.summary);
    let Some(mut report) = results else {
        if let Some(t) = trace {
            output::eprint(&render::host_exit_table(&t.exits));
        }
        return Ok(false);
    };
    let host = Machine::probe();
    linux::add_host_view(&mut report, &host, trace);
    if let Some(mut t) = traced {
        if t.tsc.host_khz == 0 {
            t.tsc.host_khz = host.tsc_khz;
        }
        match &t.run_id {
            Some(id) => linux::add_timeline(&mut report, t.summary, &t.tsc, id),
            None => report.notes.push(
                "no timeline: the guest was not asked for a run id and calibration exits \
                 (a user initrd or an xperf subcommand), so its samples cannot be joined with \
                 the host's trace"
                    .into(),
            ),
        }
    }
    let mut extra = String::new();
    if trace.is_some() && report.host_exits.is_empty() {
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
    super::deliver::report(&report, &extra, outputs.json, args.quiet, stdout)?;
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
    fn xperf_options_need_the_built_in_initramfs() {
        for ok in [
            &["--samples", "5", "--warmup", "0", "--raw"][..],
            &["--initrd", "i", "--trace", "--pin", "0"],
        ] {
            assert!(config(&run_args(ok), Path::new("k")).is_ok(), "{ok:?}");
        }
        for (bad, name) in [
            (&["--initrd", "i", "--samples", "5"][..], "--samples"),
            (&["--initrd", "i", "--warmup", "5"], "--warmup"),
            (&["--initrd", "i", "--raw"], "--raw"),
        ] {
            let err = config(&run_args(bad), Path::new("k")).unwrap_err();
            assert!(matches!(err, Error::Usage(_)));
            assert!(
                err.to_string()
                    .starts_with(&format!("usage: {name} is passed")),
                "{err}"
            );
        }
    }

    #[test]
    fn sample_counts_are_checked_before_booting() {
        for bad in [
            &["--samples", "0"][..],
            &["--samples", "1000001"],
            &["--warmup", "2000000"],
        ] {
            let err = config(&run_args(bad), Path::new("k")).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{bad:?}: {err}");
        }
        let cfg = config(&run_args(&["--samples", "1000000"]), Path::new("k")).unwrap();
        let Userspace::BuiltIn { xperf_args } = cfg.userspace else {
            panic!("not the built-in userspace");
        };
        assert_eq!(xperf_args, ["--samples", "1000000"]);
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
