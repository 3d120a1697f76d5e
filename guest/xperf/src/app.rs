//! The xperf command: parse, check where the report goes, measure, deliver
//! the report, print the table. The only module that writes to stdout.
//!
//! Output policy (as xvmm's): the report's destination is checked before
//! measuring; the report goes to the VMM and to its file before the table is
//! printed; a write to stdout that fails never panics (a broken pipe ends
//! output quietly, any other failure is an error at the end); a report file
//! that cannot be written at the end is saved to a fallback file instead.

use crate::args::{self, Command, Options, USAGE};
use crate::characterize::{self, Steps};
use crate::error::{Error, Result};
use crate::measure::{self, Config};
use std::io::Write;
use std::path::PathBuf;
use xvmm_guest::channel;

/// Where the JSON report goes when there is no VMM channel and no `--json`.
pub const DEFAULT_JSON: &str = "xperf.json";

/// What the command line asks to measure.
enum Work {
    Crossings(Options),
    Characterize(characterize::Options),
}

/// `xperf characterize`'s progress: one line on stderr, rewritten in place,
/// when stderr is a terminal (not for a VM's init, whose console is one:
/// the VMM would show the control sequences). xperf stays a lean static
/// binary, so no progress-bar crate.
struct StderrSteps {
    shown: bool,
}

impl StderrSteps {
    fn new(vm_init: bool) -> StderrSteps {
        use std::io::IsTerminal;
        StderrSteps {
            shown: !vm_init && std::io::stderr().is_terminal(),
        }
    }
}

impl Steps for StderrSteps {
    fn step(&self, index: usize, total: usize, what: &str) {
        if self.shown {
            // \r and "erase line": the next step replaces this one.
            crate::say!("\r\x1b[2Kxperf characterize [{}/{total}] {what}", index + 1);
        }
    }

    fn finish(&self) {
        if self.shown {
            crate::say!("\r\x1b[2K");
        }
    }
}

/// Where the JSON report goes, checked before measuring.
enum JsonTo {
    Stdout,
    File(PathBuf, xvmm_host::Output),
}

/// Writes to stdout; a stdout closed at start (`>&-`) fails as a full one.
fn write_stdout(text: &str) -> std::io::Result<()> {
    if xvmm_host::stdio::stdout_was_closed() {
        return Err(xvmm_host::stdio::closed_error());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// Writes to stdout; a broken pipe is quiet, another failure is an error.
fn print(text: &str) -> Result<()> {
    match write_stdout(text) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Output(format!("cannot write to stdout: {e}"))),
    }
}

/// Runs xperf with the arguments after the program name; `vm_init` when
/// the VMM made it the guest's init ([`crate::init::is_vm_init`]).
pub fn run(argv: Vec<String>, vm_init: bool) -> Result<()> {
    if vm_init {
        for warning in crate::init::mount_pseudo_filesystems()? {
            crate::sayln!("xperf: warning: {warning}");
        }
    }
    let command = args::parse(argv)?;
    let measures = match &command {
        Command::Probes(o) => !o.show_state,
        Command::Workload(_) => true,
        Command::Characterize(o) => !o.help,
        Command::Run(_) => true,
        _ => false,
    };
    if measures {
        recover_host_state();
    }
    let work = match command {
        Command::Help => return print(&format!("{USAGE}\n")),
        Command::ProbesHelp => return print(&format!("{}\n", crate::probes::args::USAGE)),
        Command::Version => return print(&format!("xperf {}\n", env!("CARGO_PKG_VERSION"))),
        Command::Probes(opts) => return run_probes(opts),
        Command::WorkloadHelp => return print(&format!("{}\n", crate::workload::args::USAGE)),
        Command::Workload(opts) => return run_workload(*opts),
        Command::Characterize(o) if o.help => {
            return print(&format!("{}\n", characterize::options::USAGE))
        }
        Command::Characterize(o) => Work::Characterize(o),
        Command::Run(opts) => Work::Crossings(opts),
    };
    let region = channel::results_region_from_proc()?;
    let opts = match work {
        Work::Characterize(o) => return characterize_command(&o, region, vm_init),
        Work::Crossings(opts) => opts,
    };
    let json_to = json_destination(opts.json.clone(), DEFAULT_JSON, region.is_some())?;
    let report = measure::run(&Config {
        samples: opts.samples,
        warmup: opts.warmup,
        null_samples: opts.null_samples,
        rounds: opts.rounds,
        cpu: opts.cpu,
        raw: opts.raw,
        vmm_channel: region.is_some(),
        calibrate: opts.calibrate,
        run_id: opts.run_id.clone(),
        host_miss: opts.host_miss,
        interrupt_path: opts.interrupt_path,
        channel: region,
    })?;
    deliver(&report, region, json_to)
}

/// `xperf characterize`: once, or with `--every` again after each period
/// until SIGTERM or SIGINT ([`stop_characterize`]). Every file is replaced
/// atomically, so a stop at any point leaves whole files. The first run's
/// failure ends the command (a wrong path shows at once); a later one is
/// said on stderr and the next period tries again (a full disk may clear).
fn characterize_command(
    opts: &characterize::Options,
    region: Option<channel::ResultsRegion>,
    vm_init: bool,
) -> Result<()> {
    if opts.every.is_some() && region.is_some() {
        return Err(Error::Usage(
            "--every repeats on a machine; in an xvmm guest the VMM takes one report".into(),
        ));
    }
    if !vm_init {
        let metrics = opts.openmetrics.clone();
        let repeating = opts.every.is_some();
        crate::stop::install(move |signal| stop_characterize(signal, metrics, repeating))
            .map_err(|e| Error::Output(format!("cannot install the stop handlers: {e}")))?;
    }
    let Some(period) = opts.every else {
        return characterize_once(opts, region, vm_init);
    };
    if let Some(jitter) = opts.jitter {
        // Spread a fleet's runs: nodes started together do not all measure
        // (and load their hypervisors) at once.
        std::thread::sleep(characterize::options::random_below(jitter));
    }
    let mut runs = 0u64;
    loop {
        let started = std::time::Instant::now();
        match characterize_once(opts, region, vm_init) {
            Err(e) if runs == 0 => return Err(e),
            Err(e) => crate::sayln!(
                "xperf: run {} failed: {e}; trying again in {period:?}",
                runs + 1
            ),
            Ok(()) => {}
        }
        runs += 1;
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
}

/// Ends `xperf characterize` on `signal` (the writers' lock held: no file
/// is half replaced). A repeating run removes its OpenMetrics file first:
/// node_exporter would otherwise serve its last figures as current for as
/// long as the file stays, with no run behind them. The JSON stays: it is a
/// dated record. A repeating run stopped is its normal end (status 0); a
/// single run stopped before its end did not finish (128 + signal).
fn stop_characterize(signal: libc::c_int, metrics: Option<PathBuf>, repeating: bool) -> ! {
    let name = if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    if let (true, Some(path)) = (repeating, &metrics) {
        match std::fs::remove_file(path) {
            Ok(()) => crate::sayln!(
                "xperf: stopped by {name}; removed {} (its figures would read as current)",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::sayln!("xperf: stopped by {name}")
            }
            Err(e) => {
                crate::sayln!(
                    "xperf: stopped by {name}; cannot remove {}: {e}",
                    path.display()
                );
                std::process::exit(1);
            }
        }
        std::process::exit(0);
    }
    crate::sayln!("xperf: stopped by {name} before the run ended");
    std::process::exit(if repeating { 0 } else { 128 + signal })
}

/// One characterisation: its files opened first, then measured, delivered.
fn characterize_once(
    opts: &characterize::Options,
    region: Option<channel::ResultsRegion>,
    vm_init: bool,
) -> Result<()> {
    let default = characterize::options::DEFAULT_JSON;
    let json_to = json_destination(opts.json.clone(), default, region.is_some())?;
    let metrics_to = openmetrics_destination(opts.openmetrics.as_deref())?;
    let config = characterize::Config {
        samples: opts.samples,
        cpu: opts.cpu,
        vmm_channel: region.is_some(),
        node_name: opts.node_name.clone(),
    };
    let report = characterize::run(&config, &StderrSteps::new(vm_init))?;
    let written = deliver(&report, region, json_to);
    let metrics = write_openmetrics(&report, metrics_to);
    written.and(metrics)
}

/// `--openmetrics FILE`, opened now (a directory that cannot take it fails
/// before measuring, as `--json` does).
fn openmetrics_destination(
    path: Option<&std::path::Path>,
) -> Result<Option<(PathBuf, xvmm_host::Output)>> {
    path.map(|p| Ok((p.to_path_buf(), prepared(p)?)))
        .transpose()
}

/// The figures as OpenMetrics text, replacing the file atomically (a
/// textfile collector never reads half of it); saved elsewhere on failure.
fn write_openmetrics(
    report: &xvmm_results::Report,
    to: Option<(PathBuf, xvmm_host::Output)>,
) -> Result<()> {
    let Some((path, out)) = to else {
        return Ok(());
    };
    let text = xvmm_results::render::openmetrics::openmetrics(report, "xperf");
    let writing = crate::stop::writing();
    let committed = out.commit(text.as_bytes());
    drop(writing);
    match committed {
        Ok(()) => print(&format!("OpenMetrics written to {}\n", path.display())),
        Err(e) => Err(saved_instead(&path.display().to_string(), &e, &text)),
    }
}

/// Before measuring: undoes what a killed or aborted xperf or xvmm left on
/// the host (instances, dynamic events, kprobes-optimization, mounts), one
/// line on stderr for each.
fn recover_host_state() {
    let recovery = xvmm_host::host_state::undo::recover_orphans();
    for line in recovery.messages("xperf") {
        crate::sayln!("{line}");
    }
}

/// `xperf probes`: measures, delivers the report (VMM, file, table) like a
/// plain run, then fails when a probe misbehaved, the host's tracing state
/// could not be restored, or a signal stopped the run.
fn run_probes(opts: Box<crate::probes::args::Options>) -> Result<()> {
    if opts.show_state {
        let state = xvmm_host::host_state::snapshot::snapshot(opts.tracefs.as_deref());
        let text: String = state
            .iter()
            .map(|(k, v)| format!("state {k}: {}\n", xvmm_host::escape::visible(v)))
            .collect();
        return print(&text);
    }
    let region = channel::results_region_from_proc()?;
    let json_to = json_destination(opts.json.clone(), DEFAULT_JSON, region.is_some())?;
    let config = crate::probes::Config {
        options: *opts,
        vmm_channel: region.is_some(),
    };
    // Progress on stderr: one line per mode (a person, or the harness, can
    // see where a long run is).
    let outcome = crate::probes::run(&config, &mut |line| crate::sayln!("xperf probes: {line}"))?;
    let written = deliver(&outcome.report, region, json_to);
    // The handlers stay until here: later signals are recorded, not fatal.
    drop(outcome.signals);
    restored(&outcome.not_restored)?;
    if let Some(signal) = outcome.stopped_by {
        written?;
        return Err(Error::Stopped(signal));
    }
    if !outcome.failed.is_empty() {
        written?;
        return Err(Error::Tracing(format!(
            "{} probe(s) failed verification: {}",
            outcome.failed.len(),
            outcome.failed.join("; ")
        )));
    }
    written
}

/// `xperf workload`: runs the command under the trace, delivers the report
/// (VMM, file, table), then ends with the command's status; a host state
/// that could not be restored fails the run.
fn run_workload(opts: crate::workload::args::Options) -> Result<()> {
    let region = channel::results_region_from_proc()?;
    let json_to = json_destination(opts.json.clone(), DEFAULT_JSON, region.is_some())?;
    let config = crate::workload::Config {
        options: opts,
        region,
    };
    let outcome = crate::workload::run(&config)?;
    let written = deliver(&outcome.report, region, json_to);
    drop(outcome.signals);
    restored(&outcome.not_restored)?;
    written?;
    match outcome.report.workload.as_ref().map(|w| &w.ended) {
        Some(ended) if !ended.succeeded() => Err(Error::Command {
            status: crate::workload::exit_code(ended),
            how: ended.describe(),
        }),
        _ => Ok(()),
    }
}

/// A run fails when what it changed on the host could not be put back.
fn restored(not_restored: &[String]) -> Result<()> {
    if not_restored.is_empty() {
        return Ok(());
    }
    Err(Error::Tracing(format!(
        "host tracing state not restored: {}",
        not_restored.join("; ")
    )))
}

/// The report to the VMM and its file first, then the tables (and the JSON
/// after them for `--json -`).
fn deliver(
    report: &xvmm_results::Report,
    region: Option<channel::ResultsRegion>,
    json_to: Option<JsonTo>,
) -> Result<()> {
    let json = report.to_json_pretty();
    let mut lines = String::new();
    if let Some(region) = region {
        channel::send_to_vmm(region, &json)?;
        lines += &format!(
            "report ({} bytes) sent to the VMM at {:#x}\n",
            json.len(),
            region.gpa
        );
    }
    let to_stdout = matches!(json_to, Some(JsonTo::Stdout));
    let written = write_file(json_to, &json, &mut lines);
    let text = xvmm_results::render::report(report) + &lines;
    if to_stdout {
        // "-": stdout is the report alone; the table goes to stderr. A
        // report that cannot go there is saved (even when the reader left:
        // it is the measurement, not a table).
        crate::say!("{text}");
        let text = format!("{json}\n");
        if let Err(e) = write_stdout(&text) {
            return Err(saved_instead("to stdout", &e, &text));
        }
    } else {
        print(&text)?;
    }
    written
}

/// `--json FILE` (or `default` when no VMM takes the report), opened now.
fn json_destination(
    json: Option<PathBuf>,
    default: &str,
    vmm_channel: bool,
) -> Result<Option<JsonTo>> {
    let file = json.or_else(|| (!vmm_channel).then(|| PathBuf::from(default)));
    match file {
        None => Ok(None),
        Some(path) if path.as_os_str() == "-" => Ok(Some(JsonTo::Stdout)),
        Some(path) => {
            let out = prepared(&path)?;
            Ok(Some(JsonTo::File(path, out)))
        }
    }
}

/// A file destination checked and opened now, before anything is measured.
fn prepared(path: &std::path::Path) -> Result<xvmm_host::Output> {
    xvmm_host::Output::prepare(path)
        .map_err(|e| Error::Output(format!("cannot write {}: {e}", path.display())))
}

/// Commits the report file; on failure saves it to a fallback file.
fn write_file(json_to: Option<JsonTo>, json: &str, lines: &mut String) -> Result<()> {
    let Some(JsonTo::File(path, out)) = json_to else {
        return Ok(());
    };
    let text = format!("{json}\n");
    let writing = crate::stop::writing();
    let committed = out.commit(text.as_bytes());
    drop(writing);
    match committed {
        Ok(()) => {
            *lines += &format!("report written to {}\n", path.display());
            Ok(())
        }
        Err(e) => Err(saved_instead(&path.display().to_string(), &e, &text)),
    }
}

/// Saves the report `text` that could not be written to `what` in a
/// fallback file; the error names both.
fn saved_instead(what: &str, e: &std::io::Error, text: &str) -> Error {
    Error::Output(
        match xvmm_host::file::save_fallback("xperf-results", text.as_bytes()) {
            Ok(saved) => format!(
                "cannot write {what}: {e}; the report was saved to {}",
                saved.display()
            ),
            Err(e2) => format!("cannot write {what} ({e}), nor to a fallback file ({e2})"),
        },
    )
}
