//! Runs one mode on one crossing: alternating rounds of no-probe and probed
//! chunks, the probe switched on and off between them and checked in the
//! kernel text each time, every probed sample's hits counted in the trace.

use super::modes::{Armed, Plan, Switch};
use super::parse::{self, Matcher};
use super::sampling::{self, Crosser, Tally};
use super::session::{self, Session};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use xvmm_results::probes::{added_cost, Probe, Round};
use xvmm_results::{signals, Status};

/// How often a switched probe is looked at while it settles.
const POLL: Duration = Duration::from_millis(20);

/// Why a mode's row has no figures.
#[derive(Debug)]
pub enum Stop {
    /// The probe misbehaved: fired while off, missed samples, did not reach
    /// the text. An error of the run, not a property of the kernel.
    Failed(String),
    /// The kernel refused a switch (not a fault of the probe).
    Unsupported(String),
    /// A stop signal arrived.
    Signal(i32),
}

/// Everything the rounds need: the session, the CPU and task the records
/// must come from, and the original bytes of the peeked sites.
pub struct Runner<'a> {
    pub session: &'a mut Session,
    pub cpu: u32,
    pub pid: i32,
    pub peek_event: Option<String>,
    /// Bytes of the peeked sites before anything was armed.
    pub original: BTreeMap<String, u8>,
    pub rounds: u64,
}

impl Runner<'_> {
    fn cpu_file(&self, name: &str) -> String {
        format!("per_cpu/cpu{}/{name}", self.cpu)
    }

    /// Empties this CPU's ring buffer of the instance (and its loss
    /// counters) and starts recording.
    pub fn clear(&self) -> Result<(), String> {
        self.session
            .set(&self.cpu_file("trace"), "")
            .and_then(|()| self.session.set("tracing_on", "1"))
            .map_err(|e| e.to_string())
    }

    /// Stops recording, so that the buffer holds still while it is read.
    fn hold(&self) -> Result<(), String> {
        self.session
            .set("tracing_on", "0")
            .map_err(|e| e.to_string())
    }

    /// This task's records on this CPU: (timestamp, index of the first
    /// matcher that matches), and how many events the buffer lost.
    pub fn records(&self, matchers: &[Matcher]) -> Result<(Vec<(u64, usize)>, u64), String> {
        self.hold()?;
        let path = self.session.in_instance(&self.cpu_file("trace"));
        let text =
            session::read_text(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let found = text
            .lines()
            .filter_map(xvmm_results::tracefs::parse_record)
            .filter(|r| r.pid == self.pid)
            .filter_map(|r| {
                let m = matchers.iter().position(|m| m.matches(r.body))?;
                Some((r.ts, m))
            })
            .collect();
        let stats = session::read_text(&self.session.in_instance(&self.cpu_file("stats")))
            .unwrap_or_default();
        Ok((found, parse::lost_events(&stats).unwrap_or(0)))
    }

    /// The bytes the peek event fetches right now.
    pub fn peek(&self) -> Result<BTreeMap<String, u8>, String> {
        let event = self.peek_event.as_deref().ok_or("no peek event")?;
        let enable = format!("events/{}/{event}/enable", session::GROUP);
        self.clear()?;
        self.session.set(&enable, "1").map_err(|e| e.to_string())?;
        // SAFETY: getpid has no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_getpid) };
        self.session.set(&enable, "0").map_err(|e| e.to_string())?;
        self.hold()?;
        let path = self.session.in_instance(&self.cpu_file("trace"));
        let text =
            session::read_text(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let matcher = Matcher::Event(event.to_string());
        let body = text
            .lines()
            .filter_map(xvmm_results::tracefs::parse_record)
            .rfind(|r| r.pid == self.pid && matcher.matches(r.body))
            .map(|r| r.body)
            .ok_or("the peek probe on __x64_sys_getpid recorded nothing")?;
        Ok(parse::byte_fields(body).into_iter().collect())
    }

    fn apply(&mut self, switch: &Switch, on: bool) -> Result<(), String> {
        let r = match switch {
            // An event that is gone (deleted by a `Created` switch) is off.
            Switch::Event(rel) if !on && !self.session.in_instance(rel).exists() => Ok(()),
            Switch::Event(rel) => self.session.set(rel, if on { "1" } else { "0" }),
            Switch::Created(name, definition) if on => {
                return self.session.create_event(name, definition);
            }
            Switch::Created(name, _) => self.session.remove_event(name),
            Switch::FunctionTracer(symbol) if on => {
                self.session
                    .set("set_ftrace_filter", symbol)
                    .map_err(|e| e.to_string())?;
                // Never switch the tracer on with a filter that did not
                // take: an empty filter traces every function.
                let filter = session::read_text(&self.session.in_instance("set_ftrace_filter"))
                    .unwrap_or_default();
                if !parse::filter_is(&filter, symbol) {
                    return Err(format!("set_ftrace_filter did not take {symbol}"));
                }
                self.session.set("current_tracer", "function")
            }
            Switch::FunctionTracer(_) => self.session.set("current_tracer", "nop"),
        };
        r.map_err(|e| e.to_string())
    }

    /// Waits until the plan's site shows it on (or off); says what it saw.
    fn settle(&self, plan: &Plan, on: bool) -> Result<String, Stop> {
        let Some(site) = &plan.site else {
            return Ok(String::new());
        };
        let original = self.original.get(&site.field).copied();
        let started = Instant::now();
        loop {
            let bytes = self.peek().map_err(Stop::Failed)?;
            let now = bytes.get(&site.field).copied();
            let reached = match (on, site.armed, now, original) {
                (true, Armed::Byte(b), Some(n), _) => n == b,
                (true, Armed::Changed, Some(n), Some(o)) => n != o,
                (false, _, Some(n), Some(o)) => n == o,
                _ => false,
            };
            if reached {
                return Ok(format!("{:#04x}", now.unwrap_or(0)));
            }
            // Switching off is part of the clean stop: it waits (bounded)
            // even after a signal.
            if let (true, Some(s)) = (on, signals::stop_requested()) {
                return Err(Stop::Signal(s));
            }
            if started.elapsed() > site.settle {
                let fmt = |b: Option<u8>| b.map_or("none".into(), |b| format!("{b:#04x}"));
                return Err(Stop::Failed(format!(
                    "after {:.1} s the probed instruction starts with {} (original {}), not what {} {} leaves there",
                    started.elapsed().as_secs_f64(),
                    fmt(now),
                    fmt(original),
                    plan.mode,
                    if on { "on" } else { "off" }
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// What `kprobes/list` says about the plan's probe; an error when it
    /// contradicts the mode.
    fn check_list(&mut self, plan: &Plan) -> Result<Option<String>, Stop> {
        let Some(want) = &plan.list else {
            return Ok(None);
        };
        let Some(list) = self.session.debugfs("kprobes/list") else {
            return Ok(Some("kprobes/list not readable (no debugfs)".into()));
        };
        let found = parse::kprobe_list(&list, want.kind, want.address, &want.names, want.offset);
        let symbol = want.names.first().map(String::as_str).unwrap_or("?");
        let Some(p) = found.first() else {
            return Err(Stop::Failed(format!(
                "{symbol}+{:#x} is not in kprobes/list",
                want.offset
            )));
        };
        let flags = format!(
            "{}{}{}",
            if p.optimized { "[OPTIMIZED]" } else { "" },
            if p.ftrace { "[FTRACE]" } else { "" },
            if p.disabled { "[DISABLED]" } else { "" }
        );
        if want.ftrace.is_some_and(|f| f != p.ftrace)
            || want.optimized.is_some_and(|o| o != p.optimized)
        {
            let why = format!(
                "kprobes/list shows {symbol}+{:#x} as {} for mode {}",
                want.offset,
                if flags.is_empty() {
                    "a plain int3 probe"
                } else {
                    &flags
                },
                plan.mode
            );
            // Not on ftrace or not optimizable: what this kernel cannot do.
            return Err(Stop::Unsupported(why));
        }
        Ok(Some(format!(
            "kprobes/list: {}",
            if flags.is_empty() { "int3" } else { &flags }
        )))
    }

    /// Switches the plan on and waits until the text shows it.
    fn on(&mut self, plan: &Plan, first: bool, notes: &mut Vec<String>) -> Result<(), Stop> {
        if let Some(opt) = plan.optimization {
            self.session
                .set_optimization(opt)
                .map_err(|e| Stop::Unsupported(e.to_string()))?;
        }
        for s in &plan.switches {
            if let Err(e) = self.apply(s, true) {
                return Err(Stop::Unsupported(format!(
                    "switching {} on: {e}",
                    plan.mode
                )));
            }
        }
        // The list first: it says at once whether the kernel took the mode
        // (an unoptimizable probe never gets [OPTIMIZED]); the text then
        // shows when the mode is really in place.
        let listed = self.check_list(plan)?;
        let byte = self.settle(plan, true)?;
        if first {
            if !byte.is_empty() {
                notes.push(format!("probed instruction starts with {byte} when on"));
            }
            notes.extend(listed);
        }
        Ok(())
    }

    fn off(&mut self, plan: &Plan) -> Result<(), Stop> {
        for s in plan.switches.iter().rev() {
            self.apply(s, false)
                .map_err(|e| Stop::Failed(format!("switching {} off: {e}", plan.mode)))?;
        }
        self.settle(plan, false).map(|_| ())
    }

    /// One chunk: cleared buffer, samples, the records inside them.
    fn chunk(
        &self,
        crosser: &mut Crosser,
        plan: &Plan,
        per_sample: u64,
    ) -> Result<(Vec<(u64, u64)>, Tally), Stop> {
        self.clear().map_err(Stop::Failed)?;
        let windows = crosser
            .chunk()
            .map_err(|e| Stop::Failed(e.to_string()))?
            .to_vec();
        let (records, lost) = self.records(&plan.matchers).map_err(Stop::Failed)?;
        if lost > 0 {
            return Err(Stop::Failed(format!(
                "the trace buffer lost {lost} events: hits cannot be counted"
            )));
        }
        let tally = sampling::tally(&records, &windows, plan.matchers.len(), per_sample);
        Ok((windows, tally))
    }

    /// Runs every round of `plan` on `crosser`: the row, and the rounds'
    /// samples (empty when the row has no figures).
    pub fn measure(&mut self, plan: &Plan, crosser: &mut Crosser) -> (Probe, Vec<Round>) {
        let mut probe = Probe::unsupported(plan.mode, crosser.kind().name(), String::new());
        probe.probe = plan.probe.clone();
        let result = self.rounds(plan, crosser, &mut probe);
        // Off on every way out (an error may leave it on).
        let off = self.off(plan);
        let mut kept = Vec::new();
        match result.and_then(|rounds| off.map(|()| rounds)) {
            Ok(rounds) => {
                finish(&mut probe, &rounds, plan);
                probe.notes.extend(self.profile_note(plan));
                kept = rounds;
            }
            Err(Stop::Failed(why)) => {
                probe.status = Status::Unsupported {
                    reason: format!("{}{why}", super::FAILED),
                }
            }
            Err(Stop::Unsupported(why)) => probe.status = Status::Unsupported { reason: why },
            Err(Stop::Signal(s)) => {
                probe.status = Status::Unsupported {
                    reason: format!("not measured: stopped by signal {s}"),
                }
            }
        }
        (probe, kept)
    }

    /// kprobe_profile's counters of a kprobe event (every task's hits,
    /// not only the samples'): a cross-check, and the misses kprobes counted.
    fn profile_note(&self, plan: &Plan) -> Option<String> {
        let Some(Matcher::Event(name)) = plan.matchers.first() else {
            return None;
        };
        let text = session::read_text(&self.session.root().join("kprobe_profile")).ok()?;
        let (hits, missed) = parse::kprobe_profile(&text, name)?;
        Some(format!(
            "kprobe_profile: {hits} hits by every task, {missed} missed"
        ))
    }

    fn rounds(
        &mut self,
        plan: &Plan,
        crosser: &mut Crosser,
        probe: &mut Probe,
    ) -> Result<Vec<Round>, Stop> {
        let mut rounds = Vec::new();
        for r in 0..self.rounds {
            if let Some(s) = signals::stop_requested() {
                return Err(Stop::Signal(s));
            }
            let (baseline, quiet) = self.chunk(crosser, plan, 0)?;
            if quiet.inside.iter().any(|&n| n > 0) {
                return Err(Stop::Failed(format!(
                    "the probe fired {} times while off",
                    quiet.inside.iter().sum::<u64>()
                )));
            }
            self.on(plan, r == 0, &mut probe.notes)?;
            let (probed, tally) = self.chunk(crosser, plan, plan.per_sample)?;
            self.off(plan)?;
            let n = probed.len() as u64;
            probe.iterations += n;
            if plan.per_sample == 0 {
                probe.hits += tally.inside.iter().sum::<u64>();
            } else {
                probe.hits += tally.exact;
                probe.hits_expected += n;
            }
            rounds.push(sampling::round(&baseline, &probed));
        }
        probe.rounds = self.rounds;
        Ok(rounds)
    }
}

/// Fills a finished row, or marks it failed when its hits are not exact.
fn finish(probe: &mut Probe, rounds: &[Round], plan: &Plan) {
    if probe.hits != probe.hits_expected {
        let what = if plan.per_sample == 0 {
            format!(
                "the control fired {} times in {} samples",
                probe.hits, probe.iterations
            )
        } else {
            format!(
                "only {} of {} probed samples had exactly one hit of each kind: a probe that did not fire is no cheap probe",
                probe.hits, probe.hits_expected
            )
        };
        probe.status = Status::Unsupported {
            reason: format!("{}{what}", super::FAILED),
        };
        return;
    }
    let Some(cost) = added_cost(rounds) else {
        probe.status = Status::Unsupported {
            reason: "no samples".into(),
        };
        return;
    };
    probe.status = Status::Measured;
    probe.added_ticks = Some(cost.added);
    probe.added_median_ci = cost.added_median_ci;
    probe.median_difference = Some(cost.median_difference);
    probe.baseline = Some(cost.baseline);
    probe.probed = Some(cost.probed);
    if cost.below_baseline > 0 {
        probe.notes.push(format!(
            "{} probed samples were faster than their round's no-probe median (counted as 0 added)",
            cost.below_baseline
        ));
    }
}
