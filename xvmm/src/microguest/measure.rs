//! The measurement plan and how its stamps become statistics.
//!
//! 1. Probe whether the hypervisor can execute LFENCE/RDTSCP at CPL0 (one
//!    sample of the kernel null loop); if not, kernel stamps become plain RDTSC.
//! 2. The TSC quantum, from back-to-back reads in the guest.
//! 3. `rounds` rounds ([`super::session`]), each: the stamp pairs (user pair,
//!    kernel pair and inner kernel pair in the guest, the VMM's pairs
//!    natively), every crossing (#PF, int3, SYSCALL, SYSENTER, int 0x80; four
//!    stamps each) with the kernel stamps on and then off, and every VM exit
//!    timed in the guest, split by host stamps where it reaches xvmm.
//! 4. Each interval corrected by what its stamps cost
//!    ([`xvmm_results::correction`]), all rounds together.

use super::guest::Kind;
pub use super::kinds::CROSSINGS;
use super::kinds::{self, Role};
use super::machine::{self, GuestFacts, HostStamps, MachineConfig, Phase, PhaseEnd, VmPolicy, Vms};
use super::profile::Profile;
use super::session::{Collected, CrossingRounds, ExitRounds, Session};
use super::stamps::{aligned_intervals, TwoStamp};
use crate::progress::Progress;
use crate::vcpu::RunControl;
use crate::{Error, Result, Setting};
use std::time::{Duration, Instant};
use xvmm_results::correction::{ExitCorrections, HooksCost, PairCost};
use xvmm_results::exit_trace::{self, TracedExit};
use xvmm_results::machine::Machine;
use xvmm_results::sweep::{self, SweepFit};
use xvmm_results::timeline::Mapping;
use xvmm_results::{
    Batched, Corrections, Crossing, Environment, ExitCount, ExitSplit, ExitTiming, HostFacts,
    Interval, IpiReceiver, IpiStamps, KernelStamps as KernelStampText, KvmExits, Method, Report,
    Sample, StampCosts, StampPoint, Stats, Status, UNFILLED,
};

/// What to measure and how.
#[derive(Clone, Debug)]
pub struct Options {
    pub samples: u64,
    pub warmup: u64,
    /// Keep every sample's stamps in the report.
    pub raw: bool,
    pub machine: MachineConfig,
    /// The host CPU the caller pinned the vCPU thread to, for the report.
    pub pinned_cpu: Option<u32>,
    /// Times the whole measurement is repeated.
    pub rounds: u32,
    /// Also time every exit with the host's tracepoints (`--trace`).
    pub trace: bool,
    /// One VM for the phases, or one each (the peer of the benchmark).
    pub vms: VmPolicy,
}

/// Rounds by default (`--rounds`).
pub const DEFAULT_ROUNDS: u32 = 3;
/// Most rounds a run may ask for.
pub const MAX_ROUNDS: u32 = 100;

/// Most samples a phase can hold: the sample buffer over the largest sample
/// (the IPI rows' 40 bytes).
pub const MAX_SAMPLES: u64 = super::layout::SAMPLES_SIZE / 40;

impl Options {
    pub fn new(samples: u64, warmup: u64) -> Result<Options> {
        if samples == 0 {
            return Err(Setting::Samples.invalid("must be at least 1"));
        }
        if warmup > MAX_SAMPLES {
            return Err(Setting::Warmup.invalid(format!(
                "{warmup} is more than the microguest allows ({MAX_SAMPLES}, its sample buffer's size)"
            )));
        }
        if samples > MAX_SAMPLES {
            return Err(Setting::Samples.invalid(format!(
                "{samples} is more than the microguest's sample buffer holds ({MAX_SAMPLES})"
            )));
        }
        Ok(Options {
            samples,
            warmup,
            raw: false,
            machine: MachineConfig::default(),
            pinned_cpu: None,
            rounds: DEFAULT_ROUNDS,
            trace: false,
            vms: VmPolicy::Reuse,
        })
    }

    /// The same with `rounds` rounds (1 to [`MAX_ROUNDS`]).
    pub fn with_rounds(mut self, rounds: u32) -> Result<Options> {
        if !(1..=MAX_ROUNDS).contains(&rounds) {
            return Err(Setting::Rounds
                .invalid(format!("must be between 1 and {MAX_ROUNDS}, not {rounds}")));
        }
        self.rounds = rounds;
        Ok(self)
    }
}

/// Steps [`measure`] reports: the TSC quantum, then per round the stamp
/// pairs, every crossing and every exit.
pub fn phases(rounds: u32) -> u64 {
    1 + u64::from(rounds) * (1 + CROSSINGS.len() as u64 + kinds::EXIT_ROWS as u64)
}

/// A run's report, and why it stopped early if it did.
#[derive(Debug)]
pub struct Measured {
    pub report: Report,
    /// `Error::Timeout` or `Error::Interrupted` when the run stopped before
    /// every row was measured: the rows done are kept, the others are marked
    /// "not measured". The caller writes the report, then fails with this.
    pub stopped: Option<Error>,
    /// Where the run's wall time went.
    pub profile: Profile,
}

fn not_measured(err: Option<&Error>) -> String {
    match err {
        Some(err) => format!("not measured: the run stopped before this row ({err})"),
        None => "not measured".into(),
    }
}

/// Measures everything and returns the report; the whole run, probes included,
/// cannot outlive `timeout`. A timeout or Ctrl-C after the first round's
/// stamp pairs keeps every row already measured (see [`Measured::stopped`]).
/// `progress` hears one step per stamp-pair set, crossing and exit per round
/// ([`phases`]).
pub fn measure(opts: &Options, timeout: Duration, progress: &dyn Progress) -> Result<Measured> {
    if timeout.is_zero() {
        return Err(Setting::Timeout.invalid("must be at least 1 second"));
    }
    let start = Instant::now();
    let rc = RunControl::new(timeout)?;
    let mut session = Session {
        rc: &rc,
        deadline: Instant::now() + timeout,
        timeout,
        cfg: opts.machine.clone(),
        warmup: opts.warmup,
        samples: opts.samples,
        rounds: opts.rounds.max(1),
        trace: opts.trace,
        vms: Vms::new(opts.vms),
    };
    progress.begin("microguest", phases(session.rounds));
    let collected = session.run(progress);
    progress.finish();
    let collected = collected?;
    let assembling = Instant::now();
    let mut measured = assemble(opts, collected);
    measured.profile = Profile {
        phases: session.vms.take_records(),
        assemble: assembling.elapsed(),
        total: start.elapsed(),
    };
    Ok(measured)
}

/// The report of a run: host facts, method, stamp costs, rows and notes.
fn assemble(opts: &Options, c: Collected) -> Measured {
    let costs = stamp_costs(&c);
    let stopped = c.stopped.as_ref();
    let corr = costs.corrections;
    let exit_corr = costs.exit_corrections.unwrap_or_default();
    let crossings: Vec<Crossing> = c
        .crossings
        .iter()
        .map(|row| crossing_row(row, opts, &corr, stopped))
        .collect();
    let mut unsplit = Vec::new();
    let iterations = opts.warmup + opts.samples;
    let stamp_exits = exit_count(c.kernel_pair_exits.iter().copied(), iterations);
    let mut exits: Vec<ExitTiming> = c
        .exits
        .iter()
        .map(|row| {
            let mut timing = exit_row(row, opts, &exit_corr, stopped, &mut unsplit);
            if timing.status == Status::Measured {
                let counted = exit_count(row.rounds.iter().map(|m| m.kvm_exits), iterations);
                timing.kvm_exits = counted
                    .zip(stamp_exits)
                    .map(|(row, stamps)| KvmExits { row, stamps });
            }
            timing
        })
        .collect();
    let uncounted = drop_undercounted_exits(&mut exits);
    let mut costs = costs;
    costs.hooks = c
        .crossings
        .iter()
        .filter(|row| row.unsupported.is_none() && !row.on.is_empty())
        .map(|row| {
            let on: Vec<u64> = row
                .on
                .iter()
                .flatten()
                .filter(|s| s.validate().is_ok())
                .map(Sample::round_trip)
                .collect();
            HooksCost::new(row.name, &on, &row.off.concat(), "")
        })
        .collect();
    let mut notes = run_notes(&c, &unsplit, opts.samples);
    notes.extend(uncounted);
    let host = Machine::probe();
    let mut method = Method::standard(opts.warmup, opts.samples);
    method.pinned_cpu = opts.pinned_cpu;
    // One entry per round taken, and the rounds asked for are a u32.
    method.rounds = u32::try_from(c.user_pair.len().max(1)).unwrap_or(u32::MAX);
    let (exit_text, entry_text) = c.kernel_stamps.text();
    method.kernel_stamps = Some(KernelStampText {
        entry: entry_text.into(),
        exit: exit_text.into(),
        source: "the microguest's asm/macros.S: KSTAMP_CLOSE first thing in a handler, \
                 KSTAMP_OPEN right before its IRETQ/SYSRETQ"
            .into(),
    });
    method.stamp_points = stamp_points();
    let mut report = Report::new(
        format!("xvmm-microguest {}", env!("CARGO_PKG_VERSION")),
        Environment::Microguest,
        host_facts(&c.facts, &host),
        method,
    );
    report.machine = Some(Machine {
        tsc_quantum_ticks: c.quantum,
        ..host
    });
    report.null_overhead = costs.user_pair.stats.clone();
    report.stamp_costs = Some(costs);
    report.crossings = crossings;
    report.exits = exits;
    report.notes = notes;
    Measured {
        report,
        stopped: c.stopped,
        profile: Profile::default(),
    }
}

/// The row whose instruction exits wherever it runs: KVM intercepts CPUID
/// on VMX (unconditionally) and SVM alike.
const ALWAYS_EXITS: &str = "cpuid";

/// Takes KVM's exit counts off every row where the count of [`ALWAYS_EXITS`]
/// shows under 0.9 exits a sample: that KVM leaves out of its statistic
/// exits it handles itself (PVM: CPUID 0.003, and WBINVD, whose round trip
/// is hundreds of ticks longer than the stamps', 0.000 here, 2026-11-30),
/// so a row's count would say that an exit was none. Returns the note that
/// says so, if it did.
fn drop_undercounted_exits(exits: &mut [ExitTiming]) -> Option<String> {
    let cpuid = exits
        .iter()
        .find(|e| e.name == ALWAYS_EXITS)?
        .kvm_exits?
        .per_sample()?;
    if cpuid >= 0.9 {
        return None;
    }
    for e in exits.iter_mut() {
        e.kvm_exits = None;
    }
    Some(format!(
        "KVM's own count of the vCPU's exits (its `exits` statistic) gave {cpuid:.3} exits a \
         sample to {ALWAYS_EXITS}, which always exits: this KVM does not count the exits it \
         handles itself, so no row gives its count"
    ))
}

/// What KVM counted over phases of `iterations` runs each; `None` when a
/// phase lacks its count, or there was none.
fn exit_count(phases: impl Iterator<Item = Option<u64>>, iterations: u64) -> Option<ExitCount> {
    let mut sum = ExitCount::default();
    for exits in phases {
        sum = sum.plus(ExitCount {
            exits: exits?,
            iterations,
        });
    }
    (sum.iterations > 0).then_some(sum)
}

/// The stamp pairs measured in every round, and the corrections from them.
fn stamp_costs(c: &Collected) -> StampCosts {
    let (open, close) = (xvmm_host::tsc::OPEN_TEXT, xvmm_host::tsc::CLOSE_TEXT);
    let (k_open, k_close) = c.kernel_stamps.text();
    let user = PairCost::from_rounds(open, close, &c.user_pair);
    let kernel = PairCost::from_rounds(k_open, k_close, &c.kernel_pair);
    let inner = PairCost::from_rounds(k_close, k_open, &c.kernel_pair_inner);
    let vmm = PairCost::from_rounds(open, close, &c.vmm_pair);
    let reverse = PairCost::from_rounds(close, open, &c.vmm_pair_reverse);
    let null = user.median();
    let costs = StampCosts::new(user, Some((kernel, inner)), Some((vmm, reverse)));
    match SweepFit::new(c.user_sweep.clone(), c.quantum) {
        Some(fit) => costs.with_user_sweep(sweep::decide(null, fit, c.quantum)),
        None => costs,
    }
}

/// Where the microguest's kernel stamps sit: the same place for every
/// crossing, so their u2k figures are comparable with each other.
fn stamp_points() -> Vec<StampPoint> {
    CROSSINGS
        .iter()
        .map(|(name, _)| StampPoint {
            crossing: (*name).into(),
            entry: "first instruction of the handler".into(),
            entry_depth: "nothing (the CPU's own delivery only)".into(),
            exit: "right before IRETQ/SYSRETQ/SYSEXITQ".into(),
        })
        .collect()
}

fn crossing_row(
    row: &CrossingRounds,
    opts: &Options,
    corr: &Corrections,
    stopped: Option<&Error>,
) -> Crossing {
    if let Some(reason) = &row.unsupported {
        return Crossing::unsupported(row.name, opts.samples, reason.clone());
    }
    if row.on.is_empty() {
        return Crossing::unsupported(row.name, opts.samples, not_measured(stopped));
    }
    let mut c = Crossing::from_rounds(row.name, opts.samples, &row.on, corr, opts.raw);
    if let Some(batches) = &row.batches {
        // Each crossing in a batch still takes the kernel's two stamps.
        let k = super::session::BATCH;
        let kernel = corr.round_trip - corr.user_round_trip;
        c.batched = Some(Batched::new(k, corr.user_round_trip + k * kernel, batches));
    }
    c
}

/// The three parts of one round's exits, or `None` when they cannot be cut.
fn round_split(m: &TwoStamp, warmup: u64) -> Option<[Vec<u64>; 3]> {
    m.tsc_offset
        .and_then(|offset| split_exits(&m.opens, &m.closes, &m.host, warmup, offset))
}

fn exit_row(
    row: &ExitRounds,
    opts: &Options,
    corr: &ExitCorrections,
    stopped: Option<&Error>,
    unsplit: &mut Vec<String>,
) -> ExitTiming {
    if let Some(reason) = &row.unsupported {
        return unsupported_exit(row, opts.samples, reason.clone());
    }
    if row.rounds.is_empty() {
        return unsupported_exit(row, opts.samples, not_measured(stopped));
    }
    let via_vmm = row.rounds.iter().any(|m| !m.host.is_empty());
    let correction = if via_vmm {
        corr.round_trip_via_vmm
    } else {
        corr.round_trip
    };
    let intervals: Vec<&[u64]> = row.rounds.iter().map(|m| m.intervals.as_slice()).collect();
    let mut timing = ExitTiming::new(
        row.name,
        row.kind.family(),
        Status::Measured,
        (
            opts.samples * row.rounds.len() as u64,
            intervals.iter().map(|r| r.len() as u64).sum(),
        ),
        Some(Interval::from_rounds(&intervals, correction)),
    );
    // Under half: the interrupt is not delivered in the window, and the
    // few samples that took it met an exit of another cause (PVM: 1 of
    // 6000, 4 ms long), so their figure is not the row's.
    if row.kind.takes_interrupt() && timing.samples_valid * 2 < timing.samples_requested {
        let why = format!(
            "only {} of {} samples took exactly the interrupt they asked for within their window \
             (STI and the one instruction STI shadows): the hypervisor does not deliver it there, \
             so the few that took it do not give the row's figure",
            timing.samples_valid, timing.samples_requested
        );
        return unsupported_exit(row, timing.samples_requested, why);
    }
    if via_vmm {
        split_timing(&mut timing, row, opts.warmup, corr, unsplit);
    }
    if row.kind.has_receiver() {
        timing.receiver = Some(receiver_side(row, opts));
    }
    if !row.traced.is_empty() {
        match traced_exit(row, opts.warmup, opts.machine.tsc_khz.is_some()) {
            Ok(t) => timing.traced = Some(t),
            Err(why) => unsplit.push(format!("{} traced ({why})", row.name)),
        }
    }
    timing
}

/// The IPI rows' receiver side over every round, with the host CPUs of
/// both vCPU threads.
fn receiver_side(row: &ExitRounds, opts: &Options) -> IpiReceiver {
    let stamps: Vec<IpiStamps> = row
        .rounds
        .iter()
        .flat_map(|m| m.receiver.iter().copied())
        .collect();
    let mut side = IpiReceiver::from_samples(&stamps);
    side.sender_cpu = opts.pinned_cpu;
    side.receiver_cpu = opts
        .machine
        .receiver_cpu
        .or_else(super::receiver::receiver_cpu)
        .and_then(|c| u32::try_from(c).ok());
    side
}

/// The traced rounds of an exit row cut at the host's tracepoints, and the
/// probe effect against the untraced rounds.
fn traced_exit(
    row: &ExitRounds,
    warmup: u64,
    scaled: bool,
) -> std::result::Result<TracedExit, String> {
    if scaled {
        // The microguest's host stamps and guest stamps share one clock only
        // unscaled (see MachineConfig::tsc_offset).
        return Err("--tsc-khz scales the guest TSC away from the host's".into());
    }
    let mut parts = exit_trace::Parts::default();
    let mut in_vmm = Vec::new();
    for m in &row.traced {
        let Some(offset) = m.tsc_offset else {
            return Err("the guest TSC offset was unknown or moved during the phase".into());
        };
        let samples: Vec<Option<(u64, u64)>> = m
            .opens
            .iter()
            .zip(&m.closes)
            .map(|(&o, &c)| (o != UNFILLED).then_some((o, c)))
            .collect();
        let exits = m.traced.as_deref().unwrap_or_default();
        parts.append(exit_trace::split(
            &samples,
            exits,
            &Mapping::unscaled(offset),
        ));
        in_vmm.extend(
            m.host
                .iter()
                .skip(xvmm_results::num::usize_from(warmup))
                .map(|h| h.reentered.saturating_sub(h.exited)),
        );
    }
    let traced: Vec<u64> = row
        .traced
        .iter()
        .flat_map(|m| m.intervals.clone())
        .collect();
    let untraced: Vec<u64> = row
        .rounds
        .iter()
        .flat_map(|m| m.intervals.clone())
        .collect();
    Ok(TracedExit::new(&parts, &in_vmm, &traced, &untraced))
}

/// Fills an exit's host-side parts: corrected and raw when every round's
/// guest and host stamps line up, else only the raw in-VMM time.
fn split_timing(
    timing: &mut ExitTiming,
    row: &ExitRounds,
    warmup: u64,
    corr: &ExitCorrections,
    unsplit: &mut Vec<String>,
) {
    let splits: Option<Vec<[Vec<u64>; 3]>> =
        row.rounds.iter().map(|m| round_split(m, warmup)).collect();
    let Some(splits) = splits else {
        let why = if row.rounds.iter().any(|m| m.tsc_offset.is_none()) {
            "the guest TSC offset was unknown or moved during the phase"
        } else {
            "guest and host stamps did not line up"
        };
        unsplit.push(format!("{} ({why})", row.name));
        let in_vmm: Vec<u64> = row
            .rounds
            .iter()
            .flat_map(|m| m.host.iter().skip(xvmm_results::num::usize_from(warmup)))
            .map(|h| h.reentered.saturating_sub(h.exited))
            .collect();
        timing.in_vmm = Some(Stats::from_samples(&in_vmm));
        return;
    };
    let part = |k: usize, correction: u64| {
        let rounds: Vec<&[u64]> = splits.iter().map(|s| s[k].as_slice()).collect();
        Interval::from_rounds(&rounds, correction)
    };
    let split = ExitSplit {
        guest_to_vmm: part(0, corr.guest_to_vmm),
        in_vmm: part(1, corr.in_vmm),
        vmm_to_guest: part(2, corr.vmm_to_guest),
    };
    timing.guest_to_vmm = Some(split.guest_to_vmm.raw.clone());
    timing.in_vmm = Some(split.in_vmm.raw.clone());
    timing.vmm_to_guest = Some(split.vmm_to_guest.raw.clone());
    timing.split = Some(split);
}

/// What the interrupt rows dropped: each sample turns interrupts on for
/// one window and stands only where exactly its own interrupt came in it.
fn interrupts_note(exits: &[ExitRounds], samples: u64) -> String {
    let dropped: Vec<String> = exits
        .iter()
        .filter(|e| e.kind.takes_interrupt() && !e.rounds.is_empty())
        .filter_map(|e| {
            let valid: u64 = e.rounds.iter().map(|m| m.intervals.len() as u64).sum();
            let asked = samples * e.rounds.len() as u64;
            (valid < asked).then(|| format!("{} {} of {asked}", e.name, asked - valid))
        })
        .collect();
    let mut note = String::from(
        "the microguest runs with interrupts off: no interrupt can hit a sample in the guest that \
         the sample does not ask for (the host's are not visible to it); the APIC and timer rows \
         run in a VM with KVM's in-kernel irqchip, turn interrupts on for one window per sample, \
         and keep a sample only where exactly its own interrupt came in that window",
    );
    if !dropped.is_empty() {
        note += &format!(" (dropped: {})", dropped.join(", "));
    }
    note
}

/// Which exits stay in KVM and which reach xvmm, from [`KINDS`]' rows.
///
/// [`KINDS`]: super::kinds::KINDS
fn exits_note(exits: &[ExitRounds]) -> String {
    let in_kvm: Vec<&str> = exits
        .iter()
        .filter(|e| e.kind.reaches_vmm().is_none())
        .map(|e| e.name)
        .collect();
    format!(
        "VM exits are timed at CPL0 between the kernel stamps; {} stay in KVM, or in the guest \
         where the hypervisor does not intercept them (the hypercall's number 0 is unknown to \
         KVM), the others reach xvmm and also hold its two stamps around KVM_RUN",
        in_kvm.join(", ")
    )
}

/// Which phases the hypervisor refused and then ran, named by their row
/// where they have one: the rows hold only the runs that ended well.
fn passing_refusals_note(
    refusals: &[machine::PassingRefusal],
    crossings: &[CrossingRounds],
    exits: &[ExitRounds],
) -> Option<String> {
    if refusals.is_empty() {
        return None;
    }
    let rows = crossings
        .iter()
        .map(|r| (r.kind, r.name))
        .chain(exits.iter().map(|r| (r.kind, r.name)));
    let names: std::collections::HashMap<Kind, &str> = rows.collect();
    let each: Vec<String> = refusals
        .iter()
        .map(|p| {
            let name = names
                .get(&p.kind)
                .map_or_else(|| format!("{:?}", p.kind), |n| n.to_string());
            format!("{name} ({})", p.reasons.join("; "))
        })
        .collect();
    Some(format!(
        "the hypervisor refused a run of these phases and ran it when asked again in a fresh VM, \
         so the refusal was a fault of the moment, not the row's answer, and only the runs that \
         ended well are counted: {}",
        each.join(", ")
    ))
}

/// The notes of a run: kernel stamps, exits, splits and an early stop.
fn run_notes(c: &Collected, unsplit: &[String], samples: u64) -> Vec<String> {
    let mut notes = c.notes.clone();
    notes.push(exits_note(&c.exits));
    if let Some(why) = &c.facts.no_exit_count {
        notes.push(format!(
            "KVM's count of the vCPU's exits could not be read ({why}): the exit rows do not say \
             how often their instruction exited"
        ));
    }
    notes.push(interrupts_note(&c.exits, samples));
    if !unsplit.is_empty() {
        notes.push(format!(
            "only the in-VMM time is given for {}: guest and host stamps need a fixed guest TSC offset \
             (KVM re-bases it on hosts with an unstable TSC)",
            unsplit.join(", ")
        ));
    }
    notes.extend(passing_refusals_note(
        &c.passing_refusals,
        &c.crossings,
        &c.exits,
    ));
    if c.user_sweep.is_empty() {
        notes.push(
            "the user pair's linearity sweep gave no usable phase: the corrections subtract the \
             null pair's median"
                .into(),
        );
    }
    if let Some(err) = &c.stopped {
        notes.insert(
            0,
            format!(
                "the run stopped early ({err}) in round {} of its rounds: rows marked \"not measured\" \
                 were not reached, the others hold the rounds done",
                c.user_pair.len()
            ),
        );
    }
    notes
}

/// Runs one two-stamp phase (`Kind::Null`/`Kind::KernelNull`, or
/// `Kind::Imul`/`Kind::KernelImul` with its chain length N: even samples time
/// N imuls, odd samples 2N) in its own VM and returns every sample's interval
/// (0 where a sample was not valid), for the benchmarks and the linearity
/// checks. Kernel kinds run with plain-RDTSC kernel stamps where the
/// hypervisor cannot run the fenced ones at CPL0 (`plain`).
pub fn user_intervals(
    kind: Kind,
    param: u64,
    warmup: u64,
    samples: u64,
    timeout: Duration,
) -> Result<Vec<u64>> {
    user_or_kernel_intervals(kind, param, warmup, samples, timeout, false)
}

/// [`user_intervals`] for kernel kinds too; `plain` selects plain-RDTSC
/// kernel stamps.
pub fn user_or_kernel_intervals(
    kind: Kind,
    param: u64,
    warmup: u64,
    samples: u64,
    timeout: Duration,
    plain: bool,
) -> Result<Vec<u64>> {
    if !matches!(kind.role(), Role::Stamps { .. }) {
        return Err(Error::Usage(format!(
            "{kind:?} is not a two-stamp stamp-timing kind"
        )));
    }
    let rc = RunControl::new(timeout)?;
    let phase = Phase {
        kind,
        warmup,
        samples,
        param,
    };
    let cfg = MachineConfig {
        kernel_stamps: if plain {
            super::guest::KernelStamps::Plain
        } else {
            super::guest::KernelStamps::Fenced
        },
        ..MachineConfig::default()
    };
    match machine::run_phase(&rc, &cfg, &phase)?.0 {
        PhaseEnd::Done { stamps, .. } => Ok(aligned_intervals(&stamps)),
        PhaseEnd::Refused { reason } => Err(Error::Guest(format!("{kind:?}: {reason}"))),
        PhaseEnd::Fault(f) => Err(Error::Guest(format!("{kind:?}: {f}"))),
    }
}

fn unsupported_exit(row: &ExitRounds, samples: u64, reason: String) -> ExitTiming {
    let status = Status::Unsupported { reason };
    ExitTiming::new(row.name, row.kind.family(), status, (samples, 0), None)
}

/// The guest -> VMM, in-VMM and VMM -> guest parts of exits, from guest stamps
/// (`opens`/`closes`, one per sample, UNFILLED when discarded) and host stamps
/// (`host`, one per exit including warm-up). `offset` converts host TSC to
/// guest TSC. `None` when the stamps do not line up.
pub fn split_exits(
    opens: &[u64],
    closes: &[u64],
    host: &[HostStamps],
    warmup: u64,
    offset: i64,
) -> Option<[Vec<u64>; 3]> {
    let recorded = host.get(usize::try_from(warmup).ok()?..)?;
    if recorded.len() != opens.len() {
        return None;
    }
    let mut parts = [Vec::new(), Vec::new(), Vec::new()];
    for ((&open, &close), h) in opens.iter().zip(closes).zip(recorded) {
        if open == UNFILLED {
            continue;
        }
        let exited = h.exited.wrapping_add_signed(offset);
        let reentered = h.reentered.wrapping_add_signed(offset);
        if !(open < exited && exited <= reentered && reentered < close) {
            return None;
        }
        parts[0].push(exited - open);
        parts[1].push(reentered - exited);
        parts[2].push(close - reentered);
    }
    Some(parts)
}

/// Host facts for the report: CPU model and KVM module of the host, the TSC
/// rate and hypervisor signature the guest sees.
pub fn host_facts(facts: &GuestFacts, host: &Machine) -> HostFacts {
    HostFacts {
        cpu_model: host.cpu_model.clone(),
        tsc_khz: u64::from(facts.tsc_khz),
        hypervisor_signature: facts.hypervisor_signature.clone(),
        kvm_module: host.kvm_module.clone(),
        kernel_release: host.kernel_release.clone(),
        kpti: host.kpti(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::session::exit_kinds;
    use super::*;

    #[test]
    fn an_exit_count_sums_the_rounds_or_is_none_where_a_phase_has_none() {
        let two = exit_count([Some(663), Some(662)].into_iter(), 330);
        assert_eq!(
            two,
            Some(ExitCount {
                exits: 1325,
                iterations: 660
            })
        );
        assert_eq!(exit_count([Some(663), None].into_iter(), 330), None);
        assert_eq!(exit_count(std::iter::empty(), 330), None);
    }

    fn counted(name: &str, row: u64, stamps: u64) -> ExitTiming {
        let mut e = ExitTiming::new(name, None, Status::Measured, (600, 600), None);
        let count = |exits| ExitCount {
            exits,
            iterations: 660,
        };
        e.kvm_exits = Some(KvmExits {
            row: count(row),
            stamps: count(stamps),
        });
        e
    }

    /// PVM's counts (2026-11-30): CPUID 16 and WBINVD 14 exits in 660 runs,
    /// the stamps' phases 14, though both exit; port I/O, which reaches
    /// xvmm, 663. Nested KVM counts CPUID's.
    #[test]
    fn counts_are_dropped_where_kvm_does_not_count_cpuids_exits() {
        let mut pvm = vec![
            counted("cpuid", 16, 14),
            counted("pio-out", 663, 14),
            counted("wbinvd", 14, 14),
        ];
        let note = drop_undercounted_exits(&mut pvm).expect("a note");
        assert!(note.contains("0.003 exits a sample to cpuid"), "{note}");
        assert!(pvm.iter().all(|e| e.kvm_exits.is_none()));

        let mut kvm = vec![counted("cpuid", 680, 20), counted("mov-from-cr8", 20, 20)];
        assert_eq!(drop_undercounted_exits(&mut kvm), None);
        assert!(kvm.iter().all(|e| e.kvm_exits.is_some()));
        let per = kvm[0].kvm_exits.unwrap().per_sample().unwrap();
        assert!((per - 1.0).abs() < 1e-9, "{per}");
        // Without a cpuid count there is nothing to judge by: kept.
        let mut no_cpuid = vec![counted("pio-out", 663, 14)];
        assert_eq!(drop_undercounted_exits(&mut no_cpuid), None);
        assert!(no_cpuid[0].kvm_exits.is_some());
    }

    /// The note names the exits KVM keeps, in row order, and none that
    /// reaches xvmm.
    #[test]
    fn the_exits_note_names_the_exits_kvm_keeps() {
        let row = |name, kind| ExitRounds {
            name,
            kind,
            unsupported: None,
            rounds: Vec::new(),
            traced: Vec::new(),
        };
        let rows = [
            row("cpuid", Kind::Cpuid),
            row("pio-out", Kind::PioOut),
            row("hlt", Kind::Hlt),
            row("xsetbv", Kind::Xsetbv),
        ];
        let note = exits_note(&rows);
        assert!(note.contains("; cpuid, xsetbv stay in KVM"), "{note}");
    }

    /// A refusal a rerun did not repeat is named by its row, with why the
    /// refused run ended; a phase of no row by its kind; none, no note.
    #[test]
    fn the_note_names_each_refusal_a_rerun_did_not_repeat() {
        let exits = [ExitRounds {
            name: "mmio-write",
            kind: Kind::MmioWrite,
            unsupported: None,
            rounds: Vec::new(),
            traced: Vec::new(),
        }];
        let refused = |kind, reasons: &[&str]| machine::PassingRefusal {
            kind,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        };
        assert_eq!(passing_refusals_note(&[], &[], &exits), None);
        let note = passing_refusals_note(
            &[
                refused(Kind::MmioWrite, &["triple fault", "internal error"]),
                refused(Kind::KernelNull, &["triple fault"]),
            ],
            &[],
            &exits,
        )
        .expect("a note");
        assert!(
            note.ends_with(
                ": mmio-write (triple fault; internal error), KernelNull (triple fault)"
            ),
            "{note}"
        );
    }

    /// An interrupt row stands where at least half its samples took
    /// exactly their own interrupt, says how many it dropped, and is
    /// unsupported with the count below half (PVM's self-IPI: 0 of 6000);
    /// a row of another kind keeps whatever samples it has.
    #[test]
    fn an_interrupt_row_needs_half_its_samples_to_take_their_interrupt() {
        let round = |valid: u64| {
            let mut stamps = Vec::new();
            for i in 0..10u64 {
                let open = 1000 * (i + 1);
                let close = if i < valid { open + 500 } else { UNFILLED };
                stamps.extend([open, close]);
            }
            super::super::stamps::two_stamp_samples(&stamps)
        };
        let row = |kind, name, valid| ExitRounds {
            name,
            kind,
            unsupported: None,
            rounds: vec![round(valid), round(valid)],
            traced: Vec::new(),
        };
        let opts = Options::new(10, 0).unwrap();
        let corr = ExitCorrections::derive(10, 10, 10);
        let exit = |r: &ExitRounds| exit_row(r, &opts, &corr, None, &mut Vec::new());
        let half = exit(&row(Kind::X2apicSelfIpi, "x2apic-self-ipi", 5));
        assert_eq!((half.status, half.samples_valid), (Status::Measured, 10));
        let under = exit(&row(Kind::TscDeadlineImmed, "tscdeadline-immed", 4));
        match &under.status {
            Status::Unsupported { reason } => {
                assert!(reason.starts_with("only 8 of 20 samples"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(under.round_trip, None);
        let cpuid = exit(&row(Kind::Cpuid, "cpuid", 1));
        assert_eq!((cpuid.status, cpuid.samples_valid), (Status::Measured, 2));
        let rows = [
            row(Kind::X2apicSelfIpi, "x2apic-self-ipi", 10),
            row(Kind::X2apicSelfIpiHlt, "x2apic-self-ipi-hlt", 7),
            row(Kind::Cpuid, "cpuid", 3),
        ];
        let note = interrupts_note(&rows, 10);
        assert!(
            note.ends_with("(dropped: x2apic-self-ipi-hlt 6 of 20)"),
            "{note}"
        );
        assert!(!interrupts_note(&rows[..1], 10).contains("dropped"));
    }

    #[test]
    fn exits_split_with_offset_and_skip_warmup() {
        let h = |exited, reentered| HostStamps { exited, reentered };
        // Guest TSC = host TSC + 1000; one warm-up exit first.
        let host = [
            h(0, 0),
            h(120u64.wrapping_sub(1000), 300u64.wrapping_sub(1000)),
        ];
        let parts = split_exits(&[100], &[350], &host, 1, 1000).unwrap();
        assert_eq!(parts, [vec![20], vec![180], vec![50]]);
        // Wrong count or out-of-order stamps give no split.
        assert!(split_exits(&[100], &[350], &host[..1], 1, 1000).is_none());
        assert!(split_exits(&[100], &[350], &host, 1, 0).is_none());
        // Discarded samples are skipped, not misaligned.
        let parts = split_exits(&[UNFILLED], &[UNFILLED], &host, 1, 1000).unwrap();
        assert!(parts[0].is_empty());
    }

    #[test]
    fn progress_steps_cover_every_row() {
        let facts = GuestFacts::default();
        let rows = CROSSINGS.len() + exit_kinds(&facts).len();
        assert_eq!(
            phases(3),
            1 + 3 * (1 + rows as u64),
            "the quantum, then per round the stamp pairs and one step per row"
        );
    }

    #[test]
    fn options_refuse_bad_sample_counts() {
        assert!(Options::new(0, 0)
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        assert!(Options::new(MAX_SAMPLES + 1, 0).is_err());
        assert!(Options::new(10, MAX_SAMPLES + 1).is_err());
        assert_eq!(Options::new(MAX_SAMPLES, 5).unwrap().warmup, 5);
    }
}
