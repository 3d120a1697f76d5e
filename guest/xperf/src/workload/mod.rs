//! `xperf workload -- CMD`: where a whole command's time in the kernel goes
//! (issue 38; docs/design/workload.md).
//!
//! - [`args`]: the subcommand's options;
//! - [`child`]: the command, held at a gate until the trace follows it;
//! - [`decode`]: the binary trace pages, and the tasks followed (fuzzable);
//! - [`syscalls`]: x86-64 system call names;
//! - here: the tracefs instance, the reading loop, the report.
//!
//! The tracing lives in xperf's own instance ([`crate::trace_session`]):
//! `x86-tsc` clock, `set_event_pid` the command with `event-fork`, the
//! events of [`decode::EVENTS`], every `irq_vectors` entry and exit, and a
//! return probe on `handle_mm_fault` for a user fault's end
//! (`exc_page_fault` is `noinstr`). The pages are read as they fill, merged
//! across CPUs by time and paired into intervals by
//! `xvmm_results::stats::workload`, whose memory is the open intervals.

pub mod args;
pub mod child;
pub mod decode;
mod stream;
pub mod syscalls;

use crate::calibrate::Calibrator;
use crate::error::{Error, Result};
use crate::host;
use crate::trace_session::{read_text, Session, GROUP};
use decode::{Decoder, Follow, Raw, Stamped};
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use xvmm_host::signals::{self, StopSignals};
use xvmm_host::tracefs_pipes::{drain_pipe, open_cpu_pipes, CpuMerge};
use xvmm_results::schema::workload::{
    Ended, Row, Workload, FAMILY_FAULT, FAMILY_INTERRUPT, FAMILY_OFF_CPU, FAMILY_SYSCALL,
};
use xvmm_results::stats::workload::{Builder, FaultKind, IntervalKind, KindFigures};
use xvmm_results::stats::workload_join::kind_code;
use xvmm_results::{Method, Report, Stats};

/// How often the pages are read while the command runs.
const POLL: Duration = Duration::from_millis(10);

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub options: args::Options,
    /// The results channel a VMM announced (in a guest xvmm started).
    pub region: Option<xvmm_guest::channel::ResultsRegion>,
}

/// A finished (or stopped) run.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    /// Host state that could not be restored (the run fails).
    pub not_restored: Vec<String>,
    /// The stop-signal handlers, held until the report is delivered.
    pub signals: StopSignals,
}

/// The instance's set-up: what is enabled, and how faults end.
struct Enabled {
    /// The `format` files of the enabled events.
    formats: Vec<String>,
    /// The return probe exists: faults are timed.
    fault_probe: bool,
    fault_end: String,
}

fn enable(session: &Session, group: &str, event: &str) -> Result<String> {
    let dir = format!("events/{group}/{event}");
    let format = read_text(&session.in_instance(&format!("{dir}/format")))
        .map_err(|e| Error::Tracing(format!("this kernel has no {group}:{event} event ({e})")))?;
    session.set(&format!("{dir}/enable"), "1")?;
    Ok(format)
}

/// Clock, buffer, filter options and events of the instance (tracing off).
fn configure(session: &mut Session, o: &args::Options) -> Result<Enabled> {
    session.set("tracing_on", "0")?;
    session
        .set("trace_clock", "x86-tsc")
        .map_err(|_| Error::Tracing("the x86-tsc trace clock is not available".into()))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kib = o
        .buffer_kib
        .unwrap_or_else(|| args::default_buffer_kib(cpus));
    session.set("buffer_size_kb", &kib.to_string())?;
    session.set("options/event-fork", "1")?;
    let mut formats = Vec::new();
    for (group, event) in decode::EVENTS {
        formats.push(enable(session, group, event)?);
    }
    let vectors = std::fs::read_dir(session.in_instance("events/irq_vectors"))
        .map_err(|e| Error::Tracing(format!("this kernel has no irq_vectors events ({e})")))?;
    let mut names: Vec<String> = vectors
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| decode::is_vector_event(n))
        .collect();
    names.sort();
    for name in names {
        formats.push(enable(session, "irq_vectors", &name)?);
    }
    let definition = format!("r:{GROUP}/{} handle_mm_fault", decode::FAULT_DONE);
    let created = if session.root().join("kprobe_events").is_file() {
        session.create_event(decode::FAULT_DONE, &definition)
    } else {
        Err("this kernel has no kprobe events (CONFIG_KPROBE_EVENTS)".into())
    };
    let (fault_probe, fault_end) = match created {
        Ok(()) => {
            formats.push(enable(session, GROUP, decode::FAULT_DONE)?);
            (
                true,
                "the return of handle_mm_fault (a kretprobe)".to_string(),
            )
        }
        Err(why) => (
            false,
            format!("not timed, counted: no return probe on handle_mm_fault: {why}"),
        ),
    };
    Ok(Enabled {
        formats,
        fault_probe,
        fault_end,
    })
}

/// What the trace gave, as it is read.
struct Recorder {
    decoder: Decoder,
    merge: CpuMerge<Stamped>,
    follow: Follow,
    builder: Builder,
    fault_probe: bool,
    /// Faults by kind when they cannot be timed.
    untimed: BTreeMap<FaultKind, u64>,
    events: u64,
    lost: u64,
    page: Vec<u8>,
    /// Each closed interval to the VMM, when it asked for them.
    stream: Option<stream::IntervalStream>,
}

impl Recorder {
    fn new(decoder: Decoder, cpus: usize, root: i32, fault_probe: bool) -> Recorder {
        let page = vec![0u8; decoder.page_size()];
        Recorder {
            decoder,
            merge: CpuMerge::new(cpus),
            follow: Follow::new(root),
            builder: Builder::new(),
            fault_probe,
            untimed: BTreeMap::new(),
            events: 0,
            lost: 0,
            page,
            stream: None,
        }
    }

    /// Reads every CPU's pages; `true` if there were any.
    fn drain(&mut self, pipes: &mut [File]) -> Result<bool> {
        let round = xvmm_host::tsc::rdtsc();
        let mut any = false;
        let (decoder, merge) = (&mut self.decoder, &mut self.merge);
        let (mut events, mut lost) = (0, 0);
        for (cpu, pipe) in pipes.iter_mut().enumerate() {
            let index = u32::try_from(cpu).unwrap_or(u32::MAX);
            any |= drain_pipe(pipe, &mut self.page, |bytes| {
                let count = decoder.decode_page(index, bytes, |s| merge.push(cpu, s.ts, s));
                events += count.events;
                lost += count.lost;
            })
            .map_err(|e| Error::Tracing(format!("reading the trace of CPU {cpu}: {e}")))?;
        }
        self.events += events;
        self.lost += lost;
        let mut released = Vec::new();
        self.merge.release_drained(round, |s| released.push(s));
        released.iter().for_each(|s| self.feed(s));
        Ok(any)
    }

    fn feed(&mut self, s: &Stamped) {
        if let (false, Raw::FaultUser { error_code }) = (self.fault_probe, s.raw) {
            if self.follow.follows(s.pid) {
                *self
                    .untimed
                    .entry(FaultKind::from_error_code(error_code))
                    .or_default() += 1;
            }
            return;
        }
        let (builder, stream) = (&mut self.builder, &mut self.stream);
        self.follow.push(s, |r| {
            builder.push(&r, &mut |i| {
                if let Some(stream) = stream.as_mut() {
                    stream.push(i);
                }
            });
        });
    }

    /// What the trace says: the rows, what stayed unpaired, the tasks and
    /// the events (the rest of the block is the command's end's).
    fn finish(mut self) -> Workload {
        let mut rest = Vec::new();
        self.merge.release_all(|s| rest.push(s));
        rest.iter().for_each(|s| self.feed(s));
        let streamed = self.stream.take().map(stream::IntervalStream::finish);
        let tasks = self.follow.tasks() as u64;
        let finished = self.builder.finish();
        let mut rows: Vec<Row> = finished
            .figures
            .iter()
            .map(|f| row(f, &self.decoder))
            .collect();
        for (nr, count) in &finished.unreturned {
            let name = syscalls::name(*nr);
            match rows
                .iter_mut()
                .find(|r| r.family == FAMILY_SYSCALL && r.name == name)
            {
                Some(r) => r.untimed = *count,
                None => rows.push(Row {
                    family: FAMILY_SYSCALL.into(),
                    name,
                    untimed: *count,
                    code: Some(kind_code(IntervalKind::Syscall(*nr))),
                    ..Row::default()
                }),
            }
        }
        for (kind, count) in &self.untimed {
            rows.push(Row {
                family: FAMILY_FAULT.into(),
                name: kind.name().into(),
                untimed: *count,
                code: Some(kind_code(IntervalKind::Fault(*kind))),
                ..Row::default()
            });
        }
        let (streamed, stream_stopped) = streamed.map_or((None, None), |(n, why)| (Some(n), why));
        Workload {
            tasks,
            rows,
            events: self.events,
            lost_events: self.lost,
            unpaired: finished.unpaired,
            streamed,
            stream_stopped,
            ..Workload::default()
        }
    }
}

/// A kind's figures as a report row, named.
fn row(f: &KindFigures, decoder: &Decoder) -> Row {
    let (family, name) = match f.kind {
        IntervalKind::Syscall(nr) => (FAMILY_SYSCALL, syscalls::name(nr)),
        IntervalKind::Fault(kind) => (FAMILY_FAULT, kind.name().to_string()),
        IntervalKind::Interrupt(v) => (FAMILY_INTERRUPT, decoder.vector_name(v)),
        IntervalKind::OffCpu => (FAMILY_OFF_CPU, "off-cpu".to_string()),
    };
    Row {
        family: family.into(),
        name,
        length: f.length.clone(),
        total_ticks: u64::try_from(f.total).unwrap_or(u64::MAX),
        off_cpu_ticks: u64::try_from(f.off_cpu).unwrap_or(u64::MAX),
        untimed: 0,
        code: Some(kind_code(f.kind)),
    }
}

/// The decoder of the instance's pages.
fn decoder(session: &Session, formats: &[String]) -> Result<Decoder> {
    let header = xvmm_host::file::read_in_large_reads(
        File::open(session.in_instance("events/header_page"))
            .map_err(|e| Error::Tracing(format!("events/header_page: {e}")))?,
    )
    .map_err(|e| Error::Tracing(format!("events/header_page: {e}")))?;
    let header = String::from_utf8_lossy(&header);
    let texts: Vec<&str> = formats.iter().map(String::as_str).collect();
    Decoder::new(&header, &texts).map_err(|e| Error::Tracing(format!("the trace format: {e}")))
}

/// How the waiting ended, and why xperf stopped the command if it did.
struct Waited {
    exit: Option<child::Exit>,
    stopped_by: Option<String>,
}

/// Reads the trace until the command ends; stops it at the timeout or on
/// stop signals (the first forwarded to it, the second kills every task).
fn record_until_end(
    recorder: &mut Recorder,
    pipes: &mut [File],
    ended: &Receiver<child::Exit>,
    root: i32,
    timeout: Option<Duration>,
) -> Result<Waited> {
    let started = Instant::now();
    let mut stopped_by = None;
    let mut signals_seen = 0;
    loop {
        recorder.drain(pipes)?;
        match ended.recv_timeout(POLL) {
            Ok(exit) => {
                return Ok(Waited {
                    exit: Some(exit),
                    stopped_by,
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Ok(Waited {
                    exit: None,
                    stopped_by,
                })
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) && stopped_by.is_none() {
            let secs = timeout.map_or(0, |t| t.as_secs());
            stopped_by = Some(format!("timeout after {secs} s"));
            child::signal_all(recorder.follow.pids(), libc::SIGKILL);
        }
        let count = signals::stop_count();
        if count > signals_seen {
            signals_seen = count;
            let signal = signals::stop_requested().unwrap_or(libc::SIGTERM);
            stopped_by.get_or_insert_with(|| format!("signal {signal}"));
            if count == 1 {
                child::signal_all([root], signal);
            } else {
                child::signal_all(recorder.follow.pids(), libc::SIGKILL);
            }
        }
    }
}

/// Runs `xperf workload`.
pub fn run(config: &Config) -> Result<Outcome> {
    let o = &config.options;
    crate::trace_session::check_root("xperf workload")?;
    // Before the stop handlers replace them: the command's signal state.
    let inherited = child::Inherited::now();
    // Before the session: on an early return the session restores the
    // host while the handlers are still in place.
    let signals = StopSignals::install().map_err(|e| Error::Tracing(e.to_string()))?;
    let mut session = Session::open(o.tracefs.as_deref())?;
    let enabled = configure(&mut session, o)?;
    let decoder = decoder(&session, &enabled.formats)?;
    let gated = child::spawn_gated(&o.command, inherited)?;
    let root = gated.pid;
    session.set("set_event_pid", &root.to_string())?;
    let mut pipes = open_cpu_pipes(&session.in_instance("")).map_err(Error::Tracing)?;
    let mut recorder = Recorder::new(decoder, pipes.len(), root, enabled.fault_probe);
    // The VMM that asked for calibration exits joins the intervals.
    if let Some(region) = config.region.filter(|_| o.calibrate > 0) {
        recorder.stream = Some(stream::IntervalStream::open(region)?);
    }
    let mut calibrator = Calibrator::new(o.calibrate, 2)?;
    let ended = child::wait_in_thread(root)?;
    calibrator.checkpoint();
    session.set("tracing_on", "1")?;
    let start = xvmm_host::tsc::rdtsc();
    gated.open()?;
    let waited = record_until_end(&mut recorder, &mut pipes, &ended, root, o.timeout)?;
    session.set("tracing_on", "0")?;
    calibrator.checkpoint();
    // Tracing is off: a pass that finds nothing is the last.
    while recorder.drain(&mut pipes)? {}
    drop(pipes);
    let not_restored = session.restore();
    drop(session);
    let traced = recorder.finish();
    let exit = waited.exit;
    let status = exit.map(|e| e.status);
    let workload = Workload {
        command: o.command.clone(),
        ended: Ended {
            code: status
                .filter(|&s| libc::WIFEXITED(s))
                .map(|s| libc::WEXITSTATUS(s)),
            signal: status
                .filter(|&s| libc::WIFSIGNALED(s))
                .map(|s| libc::WTERMSIG(s)),
            stopped_by: waited.stopped_by,
        },
        wall_ticks: exit.map_or(0, |e| e.tsc.saturating_sub(start)),
        user_us: exit.map_or(0, |e| e.user_us),
        system_us: exit.map_or(0, |e| e.system_us),
        fault_end: enabled.fault_end,
        start_tsc: start,
        ..traced
    };
    let mut report = build_report(config, workload);
    report.calibration = calibrator.finish();
    report.run_id = o.run_id.clone();
    Ok(Outcome {
        report,
        not_restored,
        signals,
    })
}

fn build_report(config: &Config, workload: Workload) -> Report {
    let machine = xvmm_results::Machine::probe();
    let mut report = Report::new(
        format!("xperf {} workload", env!("CARGO_PKG_VERSION")),
        host::environment(&machine, config.region.is_some()),
        host::host_facts(&machine),
        Method::standard(0, 0),
    );
    report.null_overhead = Stats::default();
    report.notes = host::notes(&machine);
    report.notes.push(
        "workload times are TSC ticks of the x86-tsc trace clock, each interval from its \
         opening tracepoint to its closing one; interrupts are rows of their own and are not \
         subtracted from the interval they hit"
            .into(),
    );
    report.machine = Some(machine);
    report.workload = Some(workload);
    report
}

/// The exit status xperf ends with for the command's end: its own status,
/// or 128 + the signal that killed it.
pub fn exit_code(ended: &Ended) -> i32 {
    match (ended.code, ended.signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}
