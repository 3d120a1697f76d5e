//! Runs one mode on one crossing: alternating rounds of no-probe and probed
//! chunks, the probe switched on and off between them and checked in the
//! kernel text each time, every probed sample's hits counted in the trace.

use super::modes::{Armed, Plan, Switch};
use super::parse::{self, Matcher};
use super::sampling::{self, Crosser, Tally};
use crate::trace_session::{self as session, Session};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use xvmm_host::signals;
use xvmm_results::probes::{added_cost, Probe, Round};
use xvmm_results::Status;

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
            .filter_map(xvmm_host::tracefs::parse_record)
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
            .filter_map(xvmm_host::tracefs::parse_record)
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
    fn check_list(&mut self, plan: &Plan) -> Result<Listed, Stop> {
        let Some(want) = &plan.list else {
            return Ok(Listed::NotAsked);
        };
        let Some(list) = self.session.debugfs("kprobes/list") else {
            return Ok(Listed::Unreadable);
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
        Ok(Listed::Shown(format!(
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
        confirmed(plan, &listed, &byte)?;
        if first {
            if !byte.is_empty() {
                notes.push(format!("probed instruction starts with {byte} when on"));
            }
            notes.extend(listed.note());
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
        let rounds = self.rounds;
        let mut live = Live {
            runner: self,
            plan,
            crosser,
        };
        drive(&mut live, rounds, plan, probe)
    }
}

/// What `kprobes/list` said about a plan's probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// The plan has nothing to look up there.
    NotAsked,
    /// No debugfs: the list could not be read.
    Unreadable,
    /// Listed as the mode wants it (flags in words).
    Shown(String),
}

impl Listed {
    fn note(&self) -> Option<String> {
        match self {
            Listed::NotAsked => None,
            Listed::Unreadable => Some("kprobes/list not readable (no debugfs)".into()),
            Listed::Shown(text) => Some(text.clone()),
        }
    }
}

/// Whether what was read proves the plan's mode is in place: an optimized
/// kprobe must show `[OPTIMIZED]` in kprobes/list or its jump in the text
/// (the peek); without either the row would only claim its mode.
pub fn confirmed(plan: &Plan, listed: &Listed, byte: &str) -> Result<(), Stop> {
    // check_list already refused a listing without [OPTIMIZED]; settle
    // already refused a byte other than the jump: what is read is proof.
    let shown = matches!(listed, Listed::Shown(_));
    if plan.optimization != Some(true) || shown || !byte.is_empty() {
        return Ok(());
    }
    Err(Stop::Unsupported(format!(
        "{}: neither kprobes/list's [OPTIMIZED] ({}) nor the jump in the probed instruction \
         (no peek probe) could be read, so the probe may be an int3 one: not measured as {}",
        plan.mode,
        match listed {
            Listed::Unreadable => "no debugfs",
            _ => "not looked up",
        },
        plan.mode
    )))
}

/// The two halves of one round, as [`drive`] asks for them.
pub trait Halves {
    /// A chunk without the probe (which must stay silent).
    fn baseline(&mut self) -> Result<Vec<(u64, u64)>, Stop>;
    /// The probe switched on (its notes taken in the `first` round), a
    /// chunk with it and its records' tally, the probe switched off.
    fn probed(
        &mut self,
        first: bool,
        notes: &mut Vec<String>,
    ) -> Result<(Vec<(u64, u64)>, Tally), Stop>;
}

/// The live halves: the runner's session, the plan's switches, the crosser.
struct Live<'r, 'a, 'p> {
    runner: &'r mut Runner<'a>,
    plan: &'p Plan,
    crosser: &'p mut Crosser,
}

impl Halves for Live<'_, '_, '_> {
    fn baseline(&mut self) -> Result<Vec<(u64, u64)>, Stop> {
        let (baseline, quiet) = self.runner.chunk(self.crosser, self.plan, 0)?;
        if quiet.inside.iter().any(|&n| n > 0) {
            return Err(Stop::Failed(format!(
                "the probe fired {} times while off",
                quiet.inside.iter().sum::<u64>()
            )));
        }
        Ok(baseline)
    }

    fn probed(
        &mut self,
        first: bool,
        notes: &mut Vec<String>,
    ) -> Result<(Vec<(u64, u64)>, Tally), Stop> {
        self.runner.on(self.plan, first, notes)?;
        let chunk = self
            .runner
            .chunk(self.crosser, self.plan, self.plan.per_sample)?;
        self.runner.off(self.plan)?;
        Ok(chunk)
    }
}

/// Every round of `plan`: a no-probe and a probed chunk, the hits counted.
pub fn drive(
    halves: &mut impl Halves,
    rounds: u64,
    plan: &Plan,
    probe: &mut Probe,
) -> Result<Vec<Round>, Stop> {
    let mut out = Vec::new();
    for r in 0..rounds {
        if let Some(s) = signals::stop_requested() {
            return Err(Stop::Signal(s));
        }
        // Odd rounds take the probed half first: what the first half
        // leaves behind (caches, the settled text) then favours each side
        // equally often.
        let (baseline, (probed, tally)) = if r % 2 == 0 {
            let baseline = halves.baseline()?;
            (baseline, halves.probed(r == 0, &mut probe.notes)?)
        } else {
            let probed = halves.probed(false, &mut probe.notes)?;
            (halves.baseline()?, probed)
        };
        let n = probed.len() as u64;
        probe.iterations += n;
        if plan.per_sample == 0 {
            probe.hits += tally.inside.iter().sum::<u64>();
        } else {
            // Every hit of the samples that had exactly theirs.
            probe.hits += tally.exact * plan.hits_per_sample();
            probe.hits_expected += n * plan.hits_per_sample();
        }
        out.push(sampling::round(&baseline, &probed));
    }
    probe.rounds = rounds;
    Ok(out)
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
                "only {} of {} hits came in probed samples with exactly one hit of each kind: a probe that did not fire is no cheap probe",
                probe.hits, probe.hits_expected
            )
        };
        probe.status = Status::Unsupported {
            reason: format!("{}{what}", super::FAILED),
        };
        return;
    }
    probe.hits_per_sample = plan.hits_per_sample();
    let Some(cost) = added_cost(rounds, plan.hits_per_sample()) else {
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
            "{} probed samples were faster than their round's no-probe median (negative added ticks, kept)",
            cost.below_baseline
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::probes::mode;

    fn plan(m: &'static str, matchers: Vec<Matcher>, per_sample: u64) -> Plan {
        Plan {
            mode: m,
            probe: String::new(),
            switches: Vec::new(),
            matchers,
            per_sample,
            site: None,
            list: None,
            optimization: None,
        }
    }

    /// Chunks of `n` samples: 1000 ticks without the probe, `added` more
    /// with it, every probed sample with exactly its hits; the halves in
    /// the order asked for.
    struct Fake {
        n: u64,
        added: u64,
        matchers: usize,
        order: Vec<&'static str>,
        firsts: Vec<bool>,
    }

    fn windows(n: u64, round_trip: u64) -> Vec<(u64, u64)> {
        (0..n)
            .map(|i| (i * 10_000, i * 10_000 + round_trip))
            .collect()
    }

    impl Halves for Fake {
        fn baseline(&mut self) -> Result<Vec<(u64, u64)>, Stop> {
            self.order.push("baseline");
            Ok(windows(self.n, 1000))
        }
        fn probed(
            &mut self,
            first: bool,
            _notes: &mut Vec<String>,
        ) -> Result<(Vec<(u64, u64)>, Tally), Stop> {
            self.order.push("probed");
            self.firsts.push(first);
            let tally = Tally {
                exact: self.n,
                inside: vec![self.n; self.matchers],
                outside: 0,
            };
            Ok((windows(self.n, 1000 + self.added), tally))
        }
    }

    fn fake(n: u64, added: u64, matchers: usize) -> Fake {
        Fake {
            n,
            added,
            matchers,
            order: Vec::new(),
            firsts: Vec::new(),
        }
    }

    /// Whatever the first half of a round leaves behind (a warm cache, a
    /// settled text) helps the second: the order alternates so that it
    /// helps both sides alike.
    #[test]
    fn rounds_alternate_which_half_comes_first() {
        let p = plan(mode::KPROBE_INT3, vec![Matcher::Event("k".into())], 1);
        let mut f = fake(3, 500, 1);
        let mut probe = Probe::unsupported(p.mode, "getppid", String::new());
        let rounds = drive(&mut f, 4, &p, &mut probe).unwrap();
        assert_eq!(
            f.order,
            [
                "baseline", "probed", "probed", "baseline", "baseline", "probed", "probed",
                "baseline"
            ]
        );
        assert_eq!(f.firsts, [true, false, false, false]);
        assert_eq!(rounds.len(), 4);
        assert!(rounds
            .iter()
            .all(|r| r.baseline == [1000; 3] && r.probed == [1500; 3]));
        assert_eq!((probe.rounds, probe.iterations), (4, 12));
    }

    /// getppid's tracepoint: sys_enter and sys_exit in every sample, two
    /// hits, so the added ticks per hit are half the sample's.
    #[test]
    fn a_getppid_tracepoint_sample_counts_as_two_hits() {
        let nr = libc::SYS_getppid as u64;
        let p = plan(
            mode::TRACEPOINT,
            vec![Matcher::SysEnter(nr), Matcher::SysExit(nr)],
            1,
        );
        let mut f = fake(5, 600, 2);
        let mut probe = Probe::unsupported(p.mode, "getppid", String::new());
        let rounds = drive(&mut f, 2, &p, &mut probe).unwrap();
        finish(&mut probe, &rounds, &p);
        assert_eq!(probe.status, Status::Measured, "{probe:?}");
        assert_eq!(probe.hits_per_sample, 2);
        assert_eq!((probe.hits, probe.hits_expected), (20, 20));
        assert_eq!(probe.added_median(), Some(300));
        assert_eq!(probe.median_difference, Some(600), "per sample");
        // One kprobe: one hit per sample.
        let k = plan(mode::KPROBE_INT3, vec![Matcher::Event("k".into())], 1);
        let mut f = fake(5, 600, 1);
        let mut probe = Probe::unsupported(k.mode, "getppid", String::new());
        let rounds = drive(&mut f, 2, &k, &mut probe).unwrap();
        finish(&mut probe, &rounds, &k);
        assert_eq!((probe.hits_per_sample, probe.hits), (1, 10));
        assert_eq!(probe.added_median(), Some(600));
        // A sample missing one of its two hits fails the row.
        let mut probe = Probe::unsupported(p.mode, "getppid", String::new());
        let mut f = fake(5, 600, 2);
        let rounds = drive(&mut f, 1, &p, &mut probe).unwrap();
        probe.hits -= 2;
        finish(&mut probe, &rounds, &p);
        assert!(probe
            .status
            .why_not()
            .unwrap()
            .contains(crate::probes::FAILED));
    }

    #[test]
    fn an_optimized_row_needs_the_list_or_the_jump() {
        let mut opt = plan(mode::KPROBE_OPTIMIZED, vec![Matcher::Event("k".into())], 1);
        opt.optimization = Some(true);
        let shown = Listed::Shown("kprobes/list: [OPTIMIZED]".into());
        for (listed, byte) in [(&Listed::Unreadable, ""), (&Listed::NotAsked, "")] {
            match confirmed(&opt, listed, byte) {
                Err(Stop::Unsupported(why)) => {
                    assert!(why.contains("neither"), "{why}");
                    assert!(why.contains("[OPTIMIZED]") && why.contains("jump"), "{why}");
                }
                other => panic!("{listed:?} {byte:?}: {other:?}"),
            }
        }
        assert!(confirmed(&opt, &shown, "").is_ok());
        assert!(confirmed(&opt, &Listed::Unreadable, "0xe9").is_ok());
        // An int3 probe with nothing read is still an int3 probe.
        let int3 = plan(mode::KPROBE_INT3, vec![Matcher::Event("k".into())], 1);
        assert!(confirmed(&int3, &Listed::Unreadable, "").is_ok());
    }
}
