//! `xperf probes`: what instrumentation adds to a crossing, per mode (static
//! tracepoint, int3 / jump-optimized / ftrace kprobe, kretprobe, fprobe,
//! function tracer), on the getppid round trip and the #PF refault round
//! trip, each against the same crossing without a probe in alternating
//! rounds.
//!
//! - [`args`]: the subcommand's options;
//! - [`parse`]: pure parsers of the kernel's files and of probe points (fuzzable);
//! - [`crate::trace_session`] (shared with `xperf workload`): the host's tracing state, changed only where needed and restored;
//! - [`placement`]: the probed functions and the instruction inside them;
//! - [`modes`]: what each mode puts in place and how its hits are recognised;
//! - [`sampling`]: the crossings in chunks, and hits per sample;
//! - [`runner`]: the rounds of one mode.

pub mod args;
pub mod modes;
pub mod parse;
pub mod placement;
pub mod runner;
pub mod sampling;

use crate::error::{Error, Result};
use crate::trace_session::{read_text, Session, GROUP};
use crate::{abi, host, measure};
use modes::{Kernel, Target};
use parse::ProbePoint;
use runner::Runner;
use sampling::{Crosser, Kind};
use std::collections::BTreeMap;
use std::path::Path;
use xvmm_host::signals::{self, StopSignals};
use xvmm_results::correction::PairCost;
use xvmm_results::probes::{mode, Probe, Round};
use xvmm_results::{Crossing, Method, Report, StampCosts};

/// How the reason of a row whose probe misbehaved begins.
pub const FAILED: &str = "verification failed: ";
/// Per-CPU ring-buffer bytes per trace event, generously.
const BYTES_PER_EVENT: u64 = 128;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    pub options: args::Options,
    /// Running in a guest whose VMM announced a results channel.
    pub vmm_channel: bool,
}

/// A finished (or stopped) run.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    /// Rows whose probe misbehaved (the run fails after delivering).
    pub failed: Vec<String>,
    /// The stop signal that ended the run early.
    pub stopped_by: Option<i32>,
    /// Host state that could not be restored (the run fails).
    pub not_restored: Vec<String>,
    /// The stop-signal handlers, still installed: the caller holds them
    /// until the report is delivered, so a second or third signal cannot
    /// kill xperf half-way through writing it.
    pub signals: StopSignals,
}

fn point_of(o: &args::Options, kind: Kind) -> &ProbePoint {
    match kind {
        Kind::Getppid => &o.getppid_probe,
        Kind::PfRefault => &o.pf_probe,
    }
}

/// Modes that need the probed function's symbol.
fn needs_symbol(modes: &[&str]) -> bool {
    modes
        .iter()
        .any(|m| *m != mode::TRACEPOINT && *m != mode::SYSCALL_SLOW_PATH)
}

/// Checks every probed symbol against /proc/kallsyms before anything is
/// changed: a missing or ambiguous name is the user's error.
fn check_symbols(o: &args::Options) -> Result<Option<String>> {
    if !needs_symbol(&o.modes) {
        return Ok(None);
    }
    let Ok(kallsyms) = read_text(Path::new("/proc/kallsyms")) else {
        return Ok(None);
    };
    for &kind in &o.crossings {
        let symbol = &point_of(o, kind).symbol;
        match parse::kallsyms_text_addresses(&kallsyms, symbol).len() {
            0 => {
                return Err(Error::Tracing(format!(
                    "{symbol} is not a function of this kernel (not in /proc/kallsyms)"
                )))
            }
            1 => {}
            n => {
                return Err(Error::Tracing(format!(
                    "{symbol} names {n} functions in /proc/kallsyms; a probe needs a unique name"
                )))
            }
        }
    }
    Ok(Some(kallsyms))
}

/// The private instance: x86-tsc timestamps (the clock of the user stamps),
/// a buffer that holds a whole chunk.
fn configure_instance(session: &Session, o: &args::Options) -> Result<()> {
    session.set("tracing_on", "0")?;
    session
        .set("trace_clock", "x86-tsc")
        .map_err(|_| Error::Tracing("the x86-tsc trace clock is not available".into()))?;
    let per_round = o.samples.div_ceil(o.rounds) + o.warmup;
    let kb = (per_round * 2 * BYTES_PER_EVENT).div_ceil(1024).max(1024);
    session.set("buffer_size_kb", &kb.to_string())?;
    // Events of other tasks would only fill the buffer (the check costs a
    // per-CPU flag test in every event); the function tracer is not
    // filtered by task, its records are sorted out by pid when read.
    session.set("set_event_pid", &std::process::id().to_string())
}

/// What the kernel offers, and the peek event (created for the whole run:
/// a kprobe at `__x64_sys_getpid`+0 that patches nothing while disabled).
fn kernel_features(session: &mut Session, targets: &[Target], o: &args::Options) -> Kernel {
    let mut k = Kernel::default();
    for rel in modes::INSTANCE_FILES {
        k.has.insert(rel, session.in_instance(rel).exists());
    }
    k.function_tracer = read_text(&session.in_instance("available_tracers"))
        .is_ok_and(|t| t.split_whitespace().any(|w| w == "function"));
    k.optprobes = session.optimization().is_some();
    k.kprobes = session.has_dynamic_events() && session.root().join("kprobe_events").is_file();
    k.fprobes = read_text(&session.root().join("README"))
        .is_ok_and(|r| parse::readme_has_fprobe_events(&r));
    if needs_symbol(&o.modes) && k.kprobes {
        k.peek = session
            .create_event("peek", &modes::peek_definition(GROUP, targets))
            .is_ok();
    }
    k
}

/// Creates the dynamic events one mode needs (each mode gets its own, and
/// they go again after it: an fprobe, for one, patches its function's
/// ftrace site for as long as it exists, enabled or not).
fn create_mode_events(session: &mut Session, k: &mut Kernel, t: &Target, m: &str) -> Vec<String> {
    k.events.clear();
    let mut names = Vec::new();
    for (name, def) in modes::event_definitions(GROUP, t, &[m]) {
        let result = if def.starts_with("f:") && !k.fprobes {
            Err("tracefs offers no fprobe events: kernel without CONFIG_FPROBE_EVENTS".into())
        } else if !def.starts_with("f:") && !k.kprobes {
            Err(modes::NO_KPROBES.into())
        } else {
            session
                .create_event(&name, &def)
                .map_err(|why| placement::refusal(session, t, why))
        };
        if result.is_ok() {
            if def.starts_with("f:") {
                // Only a check: the mode creates it for each probed half.
                let _ = session.remove_event(&name);
            } else {
                names.push(name.clone());
            }
        }
        k.events.insert(name, result);
    }
    names
}

/// Notes on the kernel that decide how the figures compare across kernels.
fn kernel_notes(k: &Kernel, optimization_before: Option<bool>) -> Vec<String> {
    let hooks = match abi::query() {
        abi::Hooks::Present(_) => {
            let on = std::fs::read_to_string("/proc/sys/kernel/xperf_stamps")
                .map(|s| s.trim() == "1")
                .unwrap_or(false);
            format!(
                "xperf hooks compiled in, kernel.xperf_stamps={}",
                u8::from(on)
            )
        }
        _ => "no xperf hooks (a plain kernel)".into(),
    };
    let mut notes = vec![format!("kernel: {hooks}")];
    notes.push(match optimization_before {
        Some(v) => format!(
            "kprobes-optimization was {} before the run and is restored after it",
            u8::from(v)
        ),
        None => "no kprobes-optimization sysctl (kernel without OPTPROBES)".into(),
    });
    if !k.peek {
        notes.push("no peek probe: probed instructions not checked in the kernel text".into());
    }
    notes
}

/// Runs `xperf probes`; `progress` hears which mode is being measured.
pub fn run(config: &Config, progress: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let o = &config.options;
    crate::trace_session::check_root("xperf probes")?;
    let per_round = measure::usize_of(o.samples.div_ceil(o.rounds))?;
    let warmup = measure::usize_of(o.warmup)?;
    measure::check_memory((per_round + warmup) as u64)?;
    let kallsyms = check_symbols(o)?;
    // Before the session: locals drop in reverse order, so on every early
    // return the session restores the host's state while the handlers are
    // still in place.
    let signals = StopSignals::install().map_err(|e| Error::Tracing(e.to_string()))?;
    let mut session = Session::open(o.tracefs.as_deref())?;
    configure_instance(&session, o)?;
    let mut targets: Vec<Target> = o
        .crossings
        .iter()
        .map(|&kind| {
            let files = placement::KernelFiles {
                tracefs: session.root(),
                kcore: Path::new("/proc/kcore"),
            };
            placement::resolve(kind, point_of(o, kind), kallsyms.as_deref(), &files)
        })
        .collect();
    let optimization_before = session.optimization();
    let mut notes = Vec::new();
    for t in targets.iter_mut() {
        if point_of(o, t.kind).offset.is_some() {
            placement::check_given(&mut session, t).map_err(Error::Tracing)?;
        } else if o.modes.contains(&mode::KPROBE_OPTIMIZED) {
            notes.extend(placement::find_optimizable(&mut session, t));
        }
    }
    let mut kernel = kernel_features(&mut session, &targets, o);
    let cpu = crate::affinity::pin(o.cpu)?;
    let measured = measure_all(&mut session, &mut kernel, &targets, o, cpu, progress)?;
    let not_restored = session.restore();
    drop(session);
    let mut all_notes = kernel_notes(&kernel, optimization_before);
    all_notes.extend(notes);
    all_notes.extend(measured.notes);
    let report = build_report(config, cpu, measured.probes, &measured.baselines, all_notes)?;
    let failed = report
        .probes
        .iter()
        .filter_map(|p| {
            p.status
                .why_not()
                .filter(|w| w.contains(FAILED))
                .map(|w| format!("{} on {}: {w}", p.mode, p.crossing))
        })
        .collect();
    Ok(Outcome {
        report,
        failed,
        stopped_by: signals::stop_requested(),
        not_restored,
        signals,
    })
}

/// What the rounds produced.
struct Measured {
    probes: Vec<Probe>,
    /// Every no-probe round trip per crossing (raw ticks).
    /// The no-probe round trips of each crossing, round by round.
    baselines: BTreeMap<&'static str, Vec<Vec<u64>>>,
    notes: Vec<String>,
}

/// The runner, with the peeked sites' bytes before anything is armed.
fn new_runner<'a>(
    session: &'a mut Session,
    kernel: &Kernel,
    cpu: u32,
    rounds: u64,
    notes: &mut Vec<String>,
) -> Runner<'a> {
    let mut runner = Runner {
        session,
        cpu,
        pid: i32::try_from(std::process::id()).expect("pids are below PID_MAX_LIMIT (2^22)"),
        peek_event: kernel.peek.then(|| "peek".to_string()),
        original: BTreeMap::new(),
        rounds,
    };
    if kernel.peek {
        match runner.peek() {
            Ok(bytes) => runner.original = bytes,
            Err(e) => notes.push(format!(
                "peek failed ({e}): probed instructions not checked"
            )),
        }
        if runner.original.is_empty() {
            runner.peek_event = None;
        }
    }
    runner
}

fn measure_all(
    session: &mut Session,
    kernel: &mut Kernel,
    targets: &[Target],
    o: &args::Options,
    cpu: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<Measured> {
    let per_round = measure::usize_of(o.samples.div_ceil(o.rounds))?;
    let warmup = measure::usize_of(o.warmup)?;
    let mut notes = Vec::new();
    let mut runner = new_runner(session, kernel, cpu, o.rounds, &mut notes);
    let mut probes = Vec::new();
    let mut baselines: BTreeMap<&'static str, Vec<Vec<u64>>> = BTreeMap::new();
    for (index, t) in targets.iter().enumerate() {
        let mut crosser = Crosser::new(t.kind, warmup, per_round)?;
        for &m in &o.modes {
            if m == mode::SYSCALL_SLOW_PATH && t.kind != Kind::Getppid {
                continue;
            }
            if let Some(signal) = signals::stop_requested() {
                let why = format!("not measured: stopped by signal {signal}");
                probes.push(Probe::unsupported(m, t.kind.name(), why));
                continue;
            }
            let created = create_mode_events(runner.session, kernel, t, m);
            let context = modes::Context {
                group: GROUP,
                index,
                target: t,
                crosser: &crosser,
                kernel,
            };
            let plan = modes::plan(m, &context);
            let (probe, rounds) = match plan {
                Ok(plan) => {
                    progress(&format!("measuring {m} on {}", t.kind.name()));
                    runner.measure(&plan, &mut crosser)
                }
                Err(why) => (Probe::unsupported(m, t.kind.name(), why), Vec::new()),
            };
            for name in created {
                runner.session.remove_event(&name)?;
            }
            let base = baselines.entry(t.kind.name()).or_default();
            base.extend(rounds.into_iter().map(|r: Round| r.baseline));
            probes.push(probe);
        }
        let base = baselines.entry(t.kind.name()).or_default();
        if base.is_empty() {
            // No mode ran: the crossing's own no-probe figures still count.
            for _ in 0..o.rounds {
                if signals::stop_requested().is_some() {
                    break;
                }
                base.push(sampling::round_trips(crosser.chunk()?));
            }
        }
        if crosser.migrated() > 0 {
            notes.push(format!(
                "{}: {} samples' two stamps came from different CPUs (TSC_AUX) although xperf \
                 is pinned",
                t.kind.name(),
                crosser.migrated()
            ));
        }
    }
    Ok(Measured {
        probes,
        baselines,
        notes,
    })
}

/// The user stamp pair with nothing between, in `rounds` rounds, and the
/// corrections main's stamp-cost machinery derives from it (no kernel
/// stamps here: round trips only).
fn user_stamp_costs(o: &args::Options, quantum: Option<f64>) -> Result<StampCosts> {
    let warmup = measure::usize_of(o.warmup)?;
    let per_round = measure::usize_of(o.null_samples.div_ceil(o.rounds).max(1))?;
    let (mut rounds, mut sweep) = (Vec::new(), Vec::new());
    for round in 0..o.rounds {
        rounds.push(measure::user_pair(warmup, per_round));
        sweep.extend(crate::sweep::round(
            u32::try_from(round).unwrap_or(u32::MAX),
            warmup,
            per_round,
        ));
    }
    let (open, close) = (xvmm_host::tsc::OPEN_TEXT, xvmm_host::tsc::CLOSE_TEXT);
    let costs = StampCosts::new(PairCost::from_rounds(open, close, &rounds), None, None);
    Ok(measure::with_user_sweep(costs, sweep, quantum))
}

fn build_report(
    config: &Config,
    cpu: u32,
    probes: Vec<Probe>,
    baselines: &BTreeMap<&'static str, Vec<Vec<u64>>>,
    notes: Vec<String>,
) -> Result<Report> {
    let o = &config.options;
    let machine = xvmm_results::Machine::probe();
    let costs = user_stamp_costs(o, machine.tsc_quantum_ticks)?;
    let mut method = Method::standard(o.warmup, o.samples);
    method.pinned_cpu = Some(cpu);
    method.rounds = u32::try_from(o.rounds).unwrap_or(u32::MAX);
    let mut report = Report::new(
        format!("xperf {} probes", env!("CARGO_PKG_VERSION")),
        host::environment(&machine, config.vmm_channel),
        host::host_facts(&machine),
        method,
    );
    let per_round = o.samples.div_ceil(o.rounds);
    for &kind in &o.crossings {
        let rounds = baselines.get(kind.name()).cloned().unwrap_or_default();
        let views: Vec<&[u64]> = rounds.iter().map(Vec::as_slice).collect();
        report.crossings.push(Crossing::from_round_trip_rounds(
            kind.name(),
            per_round,
            &views,
            costs.corrections.user_round_trip,
            "xperf probes times round trips: the crossing without any probe, every round of \
             every mode"
                .into(),
        ));
    }
    report.null_overhead = costs.user_pair.stats.clone();
    report.stamp_costs = Some(costs);
    report.notes = host::notes(&machine);
    report.notes.extend(notes);
    report.machine = Some(machine);
    report.probes = probes;
    Ok(report)
}
