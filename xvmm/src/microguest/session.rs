//! One microguest run, phase by phase, in the VMs of its [`Vms`]: the probe
//! of the kernel stamps, the TSC quantum, then `rounds` rounds of the stamp
//! pairs, every crossing (with the kernel stamps on, then off) and every VM
//! exit. What the rounds measured is kept per row for the report
//! ([`mod@super::measure`]); a timeout or Ctrl-C ends the rounds early and keeps
//! what was measured.

use super::guest::{KernelStamps, Kind};
use super::kinds::{self, Needs, Role, VmmExit, CROSSINGS};
use super::machine::{
    self, GuestFacts, HostStamps, MachineConfig, PassingRefusal, Phase, PhaseEnd, Vms,
};
use super::stamps::{
    aligned_intervals, four_stamp_samples, interval, receiver_samples, two_stamp_samples, TwoStamp,
};
use crate::progress::Progress;
use crate::vcpu::RunControl;
use crate::{Error, Result};
use std::time::{Duration, Instant};
use xvmm_host::tsc;
use xvmm_results::sweep::{self, SweepPhase};
use xvmm_results::{Sample, UNFILLED};

/// Back-to-back TSC reads of the quantum phase.
const QUANTUM_READS: u64 = 20_000;
/// Crossings per batch of the batched figure.
pub const BATCH: u64 = 100;

/// A crossing's rounds: its samples with the kernel stamps, and its round
/// trips without them.
pub struct CrossingRounds {
    pub name: &'static str,
    pub kind: Kind,
    /// Why it is not measured (probe, refusal, or the run's stop).
    pub unsupported: Option<String>,
    pub on: Vec<Vec<Sample>>,
    pub off: Vec<Vec<u64>>,
    /// Round trips of [`BATCH`] crossings between one stamp pair, taken
    /// when the single round trip is under 20 TSC quanta.
    pub batches: Option<Vec<u64>>,
}

/// A VM exit's rounds.
pub struct ExitRounds {
    pub name: &'static str,
    pub kind: Kind,
    pub unsupported: Option<String>,
    pub rounds: Vec<TwoStamp>,
    /// With `--trace`: the same phases with the host tracing, alternated
    /// with the untraced ones (first in odd rounds, second in even ones).
    pub traced: Vec<TwoStamp>,
}

/// Everything the run measured.
pub struct Collected {
    pub facts: GuestFacts,
    pub kernel_stamps: KernelStamps,
    pub quantum: Option<f64>,
    pub user_pair: Vec<Vec<u64>>,
    pub kernel_pair: Vec<Vec<u64>>,
    /// KVM's exit count in each round's kernel pair phase.
    pub kernel_pair_exits: Vec<Option<u64>>,
    pub kernel_pair_inner: Vec<Vec<u64>>,
    pub vmm_pair: Vec<Vec<u64>>,
    pub vmm_pair_reverse: Vec<Vec<u64>>,
    /// The user pair's linearity sweep, every phase of every round.
    pub user_sweep: Vec<SweepPhase>,
    pub crossings: Vec<CrossingRounds>,
    pub exits: Vec<ExitRounds>,
    pub notes: Vec<String>,
    /// Phases the hypervisor refused, then ran when run again.
    pub passing_refusals: Vec<PassingRefusal>,
    /// Why the run stopped before its last round ended, if it did.
    pub stopped: Option<Error>,
}

pub struct Session<'a> {
    pub rc: &'a RunControl,
    /// When the whole run must end, and the --timeout it came from.
    pub deadline: Instant,
    pub timeout: Duration,
    pub cfg: MachineConfig,
    pub warmup: u64,
    pub samples: u64,
    pub rounds: u32,
    /// Also run every exit phase traced (`--trace`).
    pub trace: bool,
    /// The phases' VMs, and where each phase's time went.
    pub vms: Vms,
}

/// A crossing's samples with the kernel stamps and its round trips without
/// them, or why the hypervisor refused it.
type OnOff = std::result::Result<(Vec<Sample>, Vec<u64>), String>;

/// A phase's guest and host stamps, the TSC offset, the traced exits and
/// KVM's exit count (as in [`PhaseEnd::Done`]), or why the hypervisor
/// refused it.
type PhaseStamps = std::result::Result<
    (
        Vec<u64>,
        Vec<HostStamps>,
        Option<i64>,
        Option<Vec<(u64, u64)>>,
        Option<u64>,
    ),
    String,
>;

fn is_stop(err: &Error) -> bool {
    matches!(err, Error::Timeout(_) | Error::Interrupted(_))
}

impl Session<'_> {
    /// Runs everything; only a failure that is not a stop, or a stop before
    /// the first round's stamp pairs, is an error.
    pub fn run(&mut self, progress: &dyn Progress) -> Result<Collected> {
        let mut c = self.start(progress)?;
        for round in 0..self.rounds {
            progress.step(&format!("round {}/{}: stamp pairs", round + 1, self.rounds));
            match self.pairs(&mut c) {
                Ok(()) => {}
                Err(e) if is_stop(&e) && round > 0 => {
                    c.stopped = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
            if let Err(e) = self.round(&mut c, progress) {
                if !is_stop(&e) {
                    return Err(e);
                }
                c.stopped = Some(e);
                break;
            }
        }
        if c.stopped.is_none() {
            match self.batches(&mut c) {
                Err(e) if is_stop(&e) => c.stopped = Some(e),
                other => other?,
            }
        }
        c.passing_refusals = self.vms.take_passing_refusals();
        Ok(c)
    }

    /// The batched figure of every crossing that has a batch kind and whose
    /// round trip, roughly corrected, is under 20 TSC quanta.
    fn batches(&self, c: &mut Collected) -> Result<()> {
        let median =
            |rounds: &[Vec<u64>]| xvmm_results::Stats::from_samples(&rounds.concat()).median;
        let stamps = median(&c.user_pair) + median(&c.kernel_pair) + median(&c.kernel_pair_inner);
        for row in c.crossings.iter_mut().filter(|r| r.unsupported.is_none()) {
            let Some(kind) = row.kind.batched() else {
                continue;
            };
            let trips: Vec<u64> = row
                .on
                .iter()
                .flatten()
                .filter(|s| s.validate().is_ok())
                .map(Sample::round_trip)
                .collect();
            let rough = xvmm_results::Stats::from_samples(&trips)
                .median
                .saturating_sub(stamps);
            if trips.is_empty() || !xvmm_results::quantum::is_coarse(rough, c.quantum) {
                continue;
            }
            let phase = Phase {
                kind,
                warmup: self.warmup.min(100),
                samples: (self.samples / 10).max(10),
                param: BATCH,
            };
            if let PhaseEnd::Done { stamps, .. } = self.vms.run(self.rc, &self.cfg, &phase)?.0 {
                row.batches = Some(
                    four_stamp_samples(&stamps)
                        .iter()
                        .filter_map(|s| interval(s.u2k_u, s.k2u_u))
                        .collect(),
                );
            }
        }
        Ok(())
    }

    /// The probe of the kernel stamps and the TSC quantum.
    fn start(&mut self, progress: &dyn Progress) -> Result<Collected> {
        let mut notes: Vec<String> = self.probe_kernel_stamps()?.into_iter().collect();
        progress.step("tsc quantum");
        let quantum = self.quantum()?;
        if quantum.is_none() {
            notes.push("the TSC quantum could not be estimated (no two reads differed)".into());
        }
        let facts = self.facts()?;
        let crossings = CROSSINGS
            .iter()
            .map(|&(name, kind)| CrossingRounds {
                name,
                kind,
                unsupported: None,
                on: Vec::new(),
                off: Vec::new(),
                batches: None,
            })
            .collect();
        let exits = exit_kinds(&facts)
            .iter()
            .map(|&(name, kind)| ExitRounds {
                name,
                kind,
                unsupported: None,
                rounds: Vec::new(),
                traced: Vec::new(),
            })
            .collect();
        Ok(Collected {
            facts,
            kernel_stamps: self.cfg.kernel_stamps,
            quantum,
            user_pair: Vec::new(),
            kernel_pair: Vec::new(),
            kernel_pair_exits: Vec::new(),
            kernel_pair_inner: Vec::new(),
            vmm_pair: Vec::new(),
            vmm_pair_reverse: Vec::new(),
            user_sweep: Vec::new(),
            crossings,
            exits,
            notes,
            passing_refusals: Vec::new(),
            stopped: None,
        })
    }

    /// The guest's facts (vendor, TSC rate...), from a one-sample null phase.
    fn facts(&self) -> Result<GuestFacts> {
        let one = Phase {
            kind: Kind::Null,
            warmup: 0,
            samples: 1,
            param: 0,
        };
        Ok(self.vms.run(self.rc, &self.cfg, &one)?.1)
    }

    /// Runs one sample of the kernel null loop: if the hypervisor cannot
    /// execute LFENCE/RDTSCP at CPL0, kernel stamps become plain RDTSC from
    /// now on and the returned note says why.
    fn probe_kernel_stamps(&mut self) -> Result<Option<String>> {
        let Some(reason) = fenced_kernel_stamps_refused(&self.vms, self.rc, &self.cfg)? else {
            return Ok(None);
        };
        self.cfg.kernel_stamps = KernelStamps::Plain;
        Ok(Some(format!(
            "kernel-side stamps are plain RDTSC: the hypervisor cannot execute LFENCE/RDTSCP at CPL0 ({reason})"
        )))
    }

    /// The counter's step, from back-to-back reads at CPL3 in the guest.
    fn quantum(&self) -> Result<Option<f64>> {
        tsc_quantum(&self.vms, self.rc, &self.cfg)
    }

    /// One round's stamp pairs: in the guest the user pair, its linearity
    /// sweep and both kernel pairs, natively the VMM's pair and reverse pair.
    fn pairs(&self, c: &mut Collected) -> Result<()> {
        let counted = |kind: Kind, what: &str| -> Result<(Vec<u64>, Option<u64>)> {
            match self.stamps(kind, 0, &self.cfg)? {
                Ok((stamps, .., kvm_exits)) => {
                    Ok((two_stamp_samples(&stamps).intervals, kvm_exits))
                }
                Err(r) => Err(Error::Guest(format!("the {what} did not run: {r}"))),
            }
        };
        let intervals = |kind: Kind, what: &str| Ok(counted(kind, what)?.0);
        let user = intervals(Kind::Null, "user stamp pair")?;
        // One entry per round taken, and the rounds asked for are a u32.
        let round = u32::try_from(c.user_pair.len()).unwrap_or(u32::MAX);
        let sweep = sweep_round(
            &self.vms,
            self.rc,
            &self.cfg,
            &xvmm_results::sweep::run_phases(round),
            self.warmup,
            self.samples,
        )?;
        let (kernel, kernel_exits) = counted(Kind::KernelNull, "kernel stamp pair")?;
        let inner = intervals(Kind::KernelNullInner, "inner kernel stamp pair")?;
        let (vmm, reverse) = vmm_pairs(self.warmup, self.samples);
        c.user_pair.push(user);
        c.user_sweep.extend(sweep);
        c.kernel_pair.push(kernel);
        c.kernel_pair_exits.push(kernel_exits);
        c.kernel_pair_inner.push(inner);
        c.vmm_pair.push(vmm);
        c.vmm_pair_reverse.push(reverse);
        Ok(())
    }

    /// One round of every crossing and exit still measurable.
    fn round(&self, c: &mut Collected, progress: &dyn Progress) -> Result<()> {
        let first = c.user_pair.len() == 1;
        for row in c.crossings.iter_mut() {
            progress.step(row.name);
            if first {
                row.unsupported = self.crossing_unsupported(row.kind, &c.facts)?;
            }
            if row.unsupported.is_some() {
                continue;
            }
            match self.crossing_round(row.kind)? {
                Ok((on, off)) => {
                    row.on.push(on);
                    row.off.push(off);
                }
                Err(reason) => row.unsupported = Some(reason),
            }
        }
        for row in c.exits.iter_mut() {
            progress.step(row.name);
            if first {
                row.unsupported = self.exit_unsupported(row.kind, &c.facts)?;
            }
            if row.unsupported.is_some() {
                continue;
            }
            let traced_first = self.trace && c.user_pair.len() % 2 == 1;
            if traced_first {
                self.traced_round(row)?;
            }
            match self.two_stamp(row.kind, &self.cfg)? {
                Ok(m) => row.rounds.push(m),
                Err(reason) => row.unsupported = Some(format!("hypervisor refused it: {reason}")),
            }
            if self.trace && !traced_first && row.unsupported.is_none() {
                self.traced_round(row)?;
            }
        }
        Ok(())
    }

    /// One traced run of an exit row's phase (see [`ExitRounds::traced`]).
    fn traced_round(&self, row: &mut ExitRounds) -> Result<()> {
        let cfg = MachineConfig {
            trace: true,
            ..self.cfg.clone()
        };
        match self.two_stamp(row.kind, &cfg)? {
            Ok(m) => row.traced.push(m),
            Err(reason) => row.unsupported = Some(format!("hypervisor refused it: {reason}")),
        }
        Ok(())
    }

    fn crossing_unsupported(&self, kind: Kind, facts: &GuestFacts) -> Result<Option<String>> {
        if kind == Kind::Sysenter && facts.is_amd() {
            return Ok(Some(format!(
                "{} CPUs raise #UD for SYSENTER in 64-bit mode (only SYSCALL exists there)",
                facts.vendor
            )));
        }
        self.probe(kind)
    }

    fn exit_unsupported(&self, kind: Kind, facts: &GuestFacts) -> Result<Option<String>> {
        let msr = kind
            .reaches_vmm()
            .is_some_and(VmmExit::needs_user_space_msr);
        if msr && !facts.user_space_msr {
            return Ok(Some(
                "KVM lacks KVM_CAP_X86_USER_SPACE_MSR, so no MSR access reaches xvmm".into(),
            ));
        }
        if let Some(missing) = missing_feature(kind.needs(), facts) {
            return Ok(Some(missing.into()));
        }
        self.probe(kind)
    }

    /// A crossing's samples with the kernel stamps, then its round trips
    /// without them; `Ok(Err(reason))` when the hypervisor refused it.
    fn crossing_round(&self, kind: Kind) -> Result<OnOff> {
        let on = match self.crossing_samples(kind, &self.cfg)? {
            Ok(samples) => samples,
            Err(reason) => return Ok(Err(reason)),
        };
        let off_cfg = MachineConfig {
            kernel_stamps: KernelStamps::Off,
            ..self.cfg.clone()
        };
        let off = match self.crossing_samples(kind, &off_cfg)? {
            Ok(samples) => samples
                .iter()
                .filter_map(|s| interval(s.u2k_u, s.k2u_u))
                .collect(),
            Err(reason) => return Ok(Err(reason)),
        };
        Ok(Ok((on, off)))
    }

    fn crossing_samples(
        &self,
        kind: Kind,
        cfg: &MachineConfig,
    ) -> Result<std::result::Result<Vec<Sample>, String>> {
        match self.vms.run(self.rc, cfg, &self.phase(kind))?.0 {
            PhaseEnd::Done { stamps, .. } => Ok(Ok(four_stamp_samples(&stamps))),
            PhaseEnd::Refused { reason } => Ok(Err(format!("hypervisor refused it: {reason}"))),
            PhaseEnd::Fault(f) => match misdelivered(kind, &f) {
                Some(reason) => Ok(Err(reason)),
                None => Err(Error::Guest(format!("{kind:?} measurement: {f}"))),
            },
        }
    }

    fn phase(&self, kind: Kind) -> Phase {
        Phase {
            kind,
            warmup: self.warmup,
            samples: self.samples,
            param: 0,
        }
    }

    /// Runs one sample of `kind` under a short watchdog: the
    /// reason it cannot be measured here, or `None` when it works.
    fn probe(&self, kind: Kind) -> Result<Option<String>> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let limit = probe_limit(self.vms.slowest_sample());
        let probe_rc = RunControl::new(left.min(limit).max(Duration::from_millis(1)))?;
        let phase = Phase {
            kind,
            warmup: 0,
            samples: 1,
            param: 0,
        };
        match self.vms.run(&probe_rc, &self.cfg, &phase) {
            Ok((PhaseEnd::Done { .. }, _)) => Ok(None),
            Ok((PhaseEnd::Refused { reason }, _)) => {
                Ok(Some(format!("hypervisor refused it: {reason}")))
            }
            Ok((PhaseEnd::Fault(f), _)) => match misdelivered(kind, &f) {
                Some(reason) => Ok(Some(reason)),
                None => Err(Error::Guest(format!("{kind:?} probe: {f}"))),
            },
            Err(Error::Timeout(_)) if Instant::now() < self.deadline => Ok(Some(format!(
                "the guest did not finish one sample within {:.1} s: the hypervisor does not return \
                 from it",
                limit.as_secs_f64()
            ))),
            // The run's own deadline passed during the probe: report it as such.
            Err(Error::Timeout(_)) => Err(Error::Timeout(format!(
                "guest did not finish within {} s",
                self.timeout.as_secs_f64()
            ))),
            Err(e) => Err(e),
        }
    }

    /// Runs a phase; `Ok(Err(reason))` when the hypervisor refused it.
    fn stamps(&self, kind: Kind, param: u64, cfg: &MachineConfig) -> Result<PhaseStamps> {
        let phase = Phase {
            param,
            ..self.phase(kind)
        };
        match self.vms.run(self.rc, cfg, &phase)?.0 {
            PhaseEnd::Done {
                stamps,
                host,
                tsc_offset,
                traced,
                kvm_exits,
            } => Ok(Ok((stamps, host, tsc_offset, traced, kvm_exits))),
            PhaseEnd::Refused { reason } => Ok(Err(reason)),
            PhaseEnd::Fault(f) => Err(Error::Guest(format!("{kind:?} measurement: {f}"))),
        }
    }

    fn two_stamp(
        &self,
        kind: Kind,
        cfg: &MachineConfig,
    ) -> Result<std::result::Result<TwoStamp, String>> {
        Ok(self
            .stamps(kind, 0, cfg)?
            .map(|(stamps, host, tsc_offset, traced, kvm_exits)| {
                let mut m = if kind.has_receiver() {
                    receiver_samples(&stamps)
                } else {
                    two_stamp_samples(&stamps)
                };
                m.host = host;
                m.tsc_offset = tsc_offset;
                m.traced = traced;
                m.kvm_exits = kvm_exits;
                m
            }))
    }
}

/// The VMM's stamps as the microguest's exit handler (`machine.rs`) takes
/// them around `KVM_RUN`, natively: opening then closing (`H`), closing then opening (`H'`).
pub fn vmm_pairs(warmup: u64, samples: u64) -> (Vec<u64>, Vec<u64>) {
    for _ in 0..warmup {
        std::hint::black_box((tsc::open(), tsc::close()));
    }
    let n = xvmm_results::num::usize_from(samples);
    let (mut pair, mut reverse) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let open = tsc::open();
        let (close, _) = tsc::close();
        let again = tsc::open();
        pair.push(close.saturating_sub(open));
        reverse.push(again.saturating_sub(close));
    }
    (pair, reverse)
}

/// Why this hypervisor cannot execute the kernel stamps' LFENCE/RDTSCP at
/// CPL0 (`None` where it can), from one sample of the kernel null loop.
pub fn fenced_kernel_stamps_refused(
    vms: &Vms,
    rc: &RunControl,
    cfg: &MachineConfig,
) -> Result<Option<String>> {
    let probe = Phase {
        kind: Kind::KernelNull,
        warmup: 0,
        samples: 1,
        param: 0,
    };
    Ok(match vms.run(rc, cfg, &probe)?.0 {
        PhaseEnd::Refused { reason } => Some(reason),
        // A KVM without RDTSCP in the guest CPUID injects #UD.
        PhaseEnd::Fault(f) if f.vector == 6 && f.cs & 3 == 0 => Some(f.to_string()),
        _ => None,
    })
}

/// The guest TSC's step, from back-to-back reads at CPL3 (`None` where no
/// read pair came back).
pub fn tsc_quantum(vms: &Vms, rc: &RunControl, cfg: &MachineConfig) -> Result<Option<f64>> {
    let phase = Phase {
        kind: Kind::TscStep,
        warmup: 100,
        samples: QUANTUM_READS,
        param: 0,
    };
    Ok(match vms.run(rc, cfg, &phase)?.0 {
        PhaseEnd::Done { stamps, .. } => xvmm_results::quantum::estimate(
            &stamps
                .chunks_exact(2)
                .filter(|p| p[0] != UNFILLED && p[1] != UNFILLED)
                .map(|p| p[1].wrapping_sub(p[0]))
                .collect::<Vec<u64>>(),
        ),
        _ => None,
    })
}

/// How long a one-sample probe may take before its kind counts as unsupported
/// (a hypervisor that never returns from an instruction), at least.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times the slowest one-sample phase that ended well a probe may
/// take on a machine where [`PROBE_TIMEOUT`] is not many times that (nested
/// under an emulator, on a loaded machine).
pub const PROBE_SLACK: u32 = 20;

/// A probe's time limit, given the slowest one-sample phase so far.
pub fn probe_limit(slowest_sample: Duration) -> Duration {
    PROBE_TIMEOUT.max(slowest_sample.saturating_mul(PROBE_SLACK))
}

/// The exits in report order; the hypercall is chosen by CPU vendor.
pub fn exit_kinds(facts: &GuestFacts) -> Vec<(&'static str, Kind)> {
    kinds::exit_rows(facts.is_amd()).collect()
}

/// Faults that mean the hypervisor did not perform the crossing, so it cannot
/// be measured there: the kernel entry point faulting while still at CPL3 (a
/// transfer without the privilege change: PVM does this with SYSCALL), or #UD /
/// #GP raised on the crossing instruction in the user loop (PVM answers
/// `int 0x80` with #UD).
pub fn misdelivered(kind: Kind, fault: &machine::GuestFault) -> Option<String> {
    // The stamp loops cross nothing: any fault there is a real failure.
    if matches!(kind.role(), Role::Stamps { .. }) {
        return None;
    }
    let entries = super::guest::kernel_entries();
    let entry = kind.handler().map(|h| entries.handler(h));
    let code = |start: u64, len: usize| start..start + len as u64;
    let (loop_code, loop_cpl) = if kind.runs_in_kernel() {
        let kernel = super::guest::kernel_code().len();
        (code(super::layout::KERNEL_CODE_GPA, kernel), 0)
    } else {
        let user = super::guest::user_code().len();
        (code(super::layout::USER_CODE_GPA, user), 3)
    };
    let cpl = fault.cs & 3;
    if entry == Some(fault.rip) && cpl == 3 {
        Some(format!(
            "hypervisor jumped to the kernel entry point without entering CPL0 ({fault})"
        ))
    } else if matches!(fault.vector, 6 | 13) && cpl == loop_cpl && loop_code.contains(&fault.rip) {
        Some(format!(
            "hypervisor raised an exception on the measured instruction ({fault})"
        ))
    } else {
        None
    }
}

/// Samples of one sweep phase: at least enough for a median per length.
fn sweep_samples(samples: u64, k: u64) -> u64 {
    samples.max(16 * k)
}

/// One round of the user pair's linearity sweep as a run takes it
/// ([`sweep::run_phases`], at CPL3), or of other
/// `phases` (`(n, k)`: chains n, 2n, ..., k n in turn). A phase whose
/// lengths did not all get a valid sample is left out.
pub fn sweep_round(
    vms: &Vms,
    rc: &RunControl,
    cfg: &MachineConfig,
    phases: &[(u64, u64)],
    warmup: u64,
    samples: u64,
) -> Result<Vec<SweepPhase>> {
    chain_phases(vms, rc, cfg, Kind::Imul, phases, warmup, samples)
}

/// [`sweep_round`] for either stamp pair: `kind` [`Kind::Imul`] (user) or
/// [`Kind::KernelImul`] (the kernel's, at CPL0).
pub fn chain_phases(
    vms: &Vms,
    rc: &RunControl,
    cfg: &MachineConfig,
    kind: Kind,
    phases: &[(u64, u64)],
    warmup: u64,
    samples: u64,
) -> Result<Vec<SweepPhase>> {
    let mut out = Vec::with_capacity(phases.len());
    for &(n, k) in phases {
        let phase = Phase {
            kind,
            warmup,
            samples: sweep_samples(samples, k),
            param: super::guest::chain_param(n, k),
        };
        let stamps = match vms.run(rc, cfg, &phase)?.0 {
            PhaseEnd::Done { stamps, .. } => stamps,
            PhaseEnd::Refused { reason } => {
                return Err(Error::Guest(format!(
                    "the user pair's sweep did not run: {reason}"
                )))
            }
            PhaseEnd::Fault(f) => return Err(Error::Guest(format!("the user pair's sweep: {f}"))),
        };
        let lengths = sweep::lengths(n, k);
        out.extend(SweepPhase::from_interleaved(
            &lengths,
            &aligned_intervals(&stamps),
        ));
    }
    Ok(out)
}

/// Why the guest cannot run an instruction that needs `needs`, if it cannot.
fn missing_feature(needs: Needs, facts: &GuestFacts) -> Option<&'static str> {
    match needs {
        Needs::Nothing => None,
        Needs::Xsave if facts.xsave => None,
        Needs::Xsave => Some(
            "the guest's CPUID has no XSAVE (KVM_GET_SUPPORTED_CPUID leaf 1 ECX bit 26), so \
             CR4.OSXSAVE stays clear and XSETBV would raise #UD",
        ),
        Needs::Ioeventfd if facts.ioeventfds => None,
        Needs::Ioeventfd => Some(
            "KVM refused an ioeventfd (KVM_IOEVENTFD) on the port or the MMIO address, so no \
             write to them stays in the kernel",
        ),
        Needs::TscAdjust if facts.tsc_adjust => None,
        Needs::TscAdjust => Some(
            "the guest's CPUID has no IA32_TSC_ADJUST (KVM_GET_SUPPORTED_CPUID leaf 7 EBX bit 1), \
             so KVM would answer the access with #GP",
        ),
        Needs::Ibpb if facts.ibpb => None,
        Needs::Ibpb => Some(
            "the guest's CPUID has no IBPB (KVM_GET_SUPPORTED_CPUID leaf 7 EDX bit 26 or \
             0x80000008 EBX bit 12), so KVM would answer the IA32_PRED_CMD write with #GP",
        ),
        Needs::Ibrs if facts.ibrs => None,
        Needs::Ibrs => Some(
            "the guest's CPUID has no IBRS (KVM_GET_SUPPORTED_CPUID leaf 7 EDX bit 26 or \
             0x80000008 EBX bit 14), so KVM would answer the IA32_SPEC_CTRL write with #GP",
        ),
        Needs::Irqchip if facts.irqchip => None,
        Needs::Irqchip => {
            Some("KVM lacks KVM_CAP_IRQCHIP, so no in-kernel PIC or LAPIC serves the access")
        }
        Needs::X2apic | Needs::TscDeadline | Needs::Smp if !facts.irqchip => {
            missing_feature(Needs::Irqchip, facts)
        }
        Needs::X2apic | Needs::TscDeadline | Needs::Smp if !facts.x2apic => Some(
            "the guest's CPUID has no x2APIC (KVM_GET_SUPPORTED_CPUID leaf 1 ECX bit 21), and the \
             microguest reaches its LAPIC only through the x2APIC MSRs",
        ),
        Needs::TscDeadline if !facts.tsc_deadline => Some(
            "KVM lacks KVM_CAP_TSC_DEADLINE_TIMER, so the LAPIC timer has no TSC-deadline mode",
        ),
        Needs::TwoVcpus if facts.max_vcpus < 2 => Some(
            "this KVM runs one vCPU per VM (KVM_CAP_MAX_VCPUS), and the round robin needs a second \
             one to pass the token to",
        ),
        Needs::TwoVcpus => None,
        Needs::Smp if facts.max_vcpus < 2 => Some(
            "this KVM runs one vCPU per VM (KVM_CAP_MAX_VCPUS), and an IPI needs a second one to \
             receive it",
        ),
        Needs::X2apic | Needs::TscDeadline | Needs::Smp => None,
        Needs::TsxCtrl if facts.tsx_ctrl => None,
        Needs::TsxCtrl => Some(
            "the vCPU has no IA32_TSX_CTRL (IA32_ARCH_CAPABILITIES bit 7 clear or the MSR absent: \
             KVM offers it on Intel CPUs with TSX control), so an access would be #GP",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_waits_two_seconds_or_twenty_of_the_slowest_sample() {
        assert_eq!(probe_limit(Duration::ZERO), Duration::from_secs(2));
        // 99 ms of a fast machine: 1.98 s, under the floor.
        assert_eq!(
            probe_limit(Duration::from_millis(99)),
            Duration::from_secs(2)
        );
        assert_eq!(
            probe_limit(Duration::from_millis(101)),
            Duration::from_millis(2020)
        );
        // One sample at 0.4 s in a loaded nested guest: 8 s.
        assert_eq!(
            probe_limit(Duration::from_millis(400)),
            Duration::from_secs(8)
        );
        assert_eq!(probe_limit(Duration::MAX), Duration::MAX);
    }

    #[test]
    fn an_exit_runs_only_where_the_guest_has_what_it_needs() {
        let with = GuestFacts {
            xsave: true,
            ..GuestFacts::default()
        };
        let without = GuestFacts::default();
        assert_eq!(missing_feature(Needs::Nothing, &without), None);
        assert_eq!(missing_feature(Needs::Xsave, &with), None);
        let why = missing_feature(Needs::Xsave, &without).unwrap();
        assert!(why.contains("no XSAVE") && why.contains("#UD"), "{why}");
        let eventfd = GuestFacts {
            ioeventfds: true,
            ..GuestFacts::default()
        };
        assert_eq!(missing_feature(Needs::Ioeventfd, &eventfd), None);
        let why = missing_feature(Needs::Ioeventfd, &with).unwrap();
        assert!(why.contains("KVM_IOEVENTFD"), "{why}");
        assert_eq!(kinds::Kind::PioOutEventfd.needs(), Needs::Ioeventfd);
        assert_eq!(kinds::Kind::Xsetbv.needs(), Needs::Xsave);
        assert_eq!(kinds::Kind::Cpuid.needs(), Needs::Nothing);
        let adjust = GuestFacts {
            tsc_adjust: true,
            ..GuestFacts::default()
        };
        assert_eq!(missing_feature(Needs::TscAdjust, &adjust), None);
        let why = missing_feature(Needs::TscAdjust, &eventfd).unwrap();
        assert!(
            why.contains("IA32_TSC_ADJUST") && why.contains("#GP"),
            "{why}"
        );
        assert_eq!(kinds::Kind::WrTscAdjust.needs(), Needs::TscAdjust);
    }

    /// The irqchip rows need KVM's irqchip; the APIC rows x2APIC too, the
    /// timer row the TSC-deadline mode too; each reason names what is
    /// missing first.
    #[test]
    fn apic_rows_need_the_irqchip_then_x2apic_then_the_deadline_timer() {
        let all = GuestFacts {
            irqchip: true,
            x2apic: true,
            tsc_deadline: true,
            max_vcpus: 2,
            ..GuestFacts::default()
        };
        let every = [
            Needs::Irqchip,
            Needs::X2apic,
            Needs::TscDeadline,
            Needs::Smp,
        ];
        for needs in every {
            assert_eq!(missing_feature(needs, &all), None, "{needs:?}");
        }
        let without = |f: fn(&mut GuestFacts)| {
            let mut facts = all.clone();
            f(&mut facts);
            facts
        };
        let no_chip = without(|f| f.irqchip = false);
        for needs in every {
            let why = missing_feature(needs, &no_chip).unwrap();
            assert!(why.contains("KVM_CAP_IRQCHIP"), "{why}");
        }
        let no_x2apic = without(|f| f.x2apic = false);
        assert_eq!(missing_feature(Needs::Irqchip, &no_x2apic), None);
        for needs in [Needs::X2apic, Needs::TscDeadline, Needs::Smp] {
            let why = missing_feature(needs, &no_x2apic).unwrap();
            assert!(why.contains("no x2APIC"), "{why}");
        }
        let no_deadline = without(|f| f.tsc_deadline = false);
        assert_eq!(missing_feature(Needs::X2apic, &no_deadline), None);
        let why = missing_feature(Needs::TscDeadline, &no_deadline).unwrap();
        assert!(why.contains("KVM_CAP_TSC_DEADLINE_TIMER"), "{why}");
        // The IPI rows: a second vCPU, only where KVM runs one.
        let one_vcpu = without(|f| f.max_vcpus = 1);
        assert_eq!(missing_feature(Needs::X2apic, &one_vcpu), None);
        let why = missing_feature(Needs::Smp, &one_vcpu).unwrap();
        assert!(why.contains("KVM_CAP_MAX_VCPUS"), "{why}");
        assert_eq!(Kind::IpiHalt.needs(), Needs::Smp);
        let why = missing_feature(Needs::TwoVcpus, &one_vcpu).unwrap();
        assert!(why.contains("pass the token"), "{why}");
        // The round robin needs no irqchip.
        assert_eq!(missing_feature(Needs::TwoVcpus, &no_chip), None);
        assert_eq!(Kind::PioInKernel.needs(), Needs::Irqchip);
        assert_eq!(Kind::X2apicSelfIpiHlt.needs(), Needs::X2apic);
        assert_eq!(Kind::TscDeadlineImmed.needs(), Needs::TscDeadline);
        // Only these rows' VMs have the irqchip, and only the APIC and
        // timer rows take interrupts.
        assert!(Kind::PioOutKernel.needs_irqchip() && !Kind::PioOutKernel.takes_interrupt());
        assert!(Kind::X2apicSelfIpi.needs_irqchip() && Kind::X2apicSelfIpi.takes_interrupt());
        assert!(!Kind::Cpuid.needs_irqchip() && !Kind::Hlt.takes_interrupt());
    }

    /// Each speculation-control row asks for its own fact, and its reason
    /// names the MSR KVM would refuse.
    #[test]
    fn speculation_msr_rows_need_their_own_cpuid_bits() {
        let cases = [
            (Kind::WrIbpb, Needs::Ibpb, "IA32_PRED_CMD"),
            (Kind::WrIbrs, Needs::Ibrs, "IA32_SPEC_CTRL"),
            (Kind::WrTsxCtrl, Needs::TsxCtrl, "IA32_TSX_CTRL"),
        ];
        let all = GuestFacts {
            ibpb: true,
            ibrs: true,
            tsx_ctrl: true,
            ..GuestFacts::default()
        };
        for (kind, needs, msr) in cases {
            assert_eq!(kind.needs(), needs, "{kind:?}");
            assert_eq!(missing_feature(needs, &all), None, "{kind:?}");
            let mut one_short = all.clone();
            match needs {
                Needs::Ibpb => one_short.ibpb = false,
                Needs::Ibrs => one_short.ibrs = false,
                _ => one_short.tsx_ctrl = false,
            }
            let why = missing_feature(needs, &one_short).unwrap();
            assert!(why.contains(msr) && why.contains("#GP"), "{why}");
            // The other two facts do not stand in for it.
            for (_, other, _) in cases.iter().filter(|c| c.1 != needs) {
                assert_eq!(missing_feature(*other, &one_short), None, "{other:?}");
            }
        }
    }

    #[test]
    fn misdelivered_crossings_are_told_apart_from_guest_bugs() {
        let entries = crate::microguest::guest::kernel_entries();
        let user_rip = crate::microguest::layout::USER_CODE_GPA + 0x40;
        let fault = |vector, rip, cs| machine::GuestFault {
            vector,
            error: 5,
            rip,
            cs,
            rflags: 0x3002,
            rsp: 0x37ff8,
            cr2: rip,
        };
        // SYSCALL landing on LSTAR still at CPL3 (PVM).
        let f = fault(14, entries.syscall, 0x2b);
        assert!(misdelivered(Kind::Syscall, &f)
            .unwrap()
            .contains("without entering CPL0"));
        // The same address at CPL0 is a fault in our handler: a bug, not unsupported.
        assert_eq!(
            misdelivered(Kind::Syscall, &fault(14, entries.syscall, 0x08)),
            None
        );
        // #UD on int 0x80 in the user loop.
        let f = fault(6, user_rip, 0x2b);
        assert!(misdelivered(Kind::IntN, &f)
            .unwrap()
            .contains("on the measured instruction"));
        // #PF in the user loop is not a refusal.
        assert_eq!(misdelivered(Kind::IntN, &fault(14, user_rip, 0x2b)), None);
        // #GP on rdmsr at CPL0 in the kernel loop.
        let f = fault(13, crate::microguest::layout::KERNEL_CODE_GPA + 0x300, 0x08);
        assert!(misdelivered(Kind::Rdmsr, &f).is_some());
        assert_eq!(misdelivered(Kind::Null, &fault(6, user_rip, 0x2b)), None);
    }
}
