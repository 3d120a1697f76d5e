//! The measurement plan: which phases run, in what order, and how their stamps
//! become statistics.
//!
//! 1. Probe whether the hypervisor can execute LFENCE/RDTSCP at CPL0 (one
//!    sample of the kernel null loop); if not, kernel stamps become plain RDTSC.
//! 2. Null measurements: the user stamp pair (subtracted from every user-side
//!    interval) and the kernel stamp pair (subtracted from CPL0 exit loops).
//! 3. Crossings (#PF, int3, SYSCALL, SYSENTER, int 0x80), four stamps each.
//! 4. VM-exit round trips timed in the guest, split by host stamps where the
//!    exit reaches xvmm.

use super::guest::Kind;
use super::machine::{self, GuestFacts, HostStamps, MachineConfig, Phase, PhaseEnd};
use crate::progress::Progress;
use crate::vcpu::RunControl;
use crate::{Error, Result};
use std::time::{Duration, Instant};
use xvmm_results::machine::Machine;
use xvmm_results::{
    Crossing, Environment, ExitTiming, HostFacts, Interval, Method, Report, Sample, Stats, Status,
    UNFILLED,
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
}

/// Most samples a phase can hold: the sample buffer over the largest sample.
pub const MAX_SAMPLES: u64 = super::layout::SAMPLES_SIZE / 32;

impl Options {
    pub fn new(samples: u64, warmup: u64) -> Result<Options> {
        if samples == 0 {
            return Err(Error::Usage("--samples must be at least 1".into()));
        }
        if warmup > MAX_SAMPLES {
            return Err(Error::Usage(format!(
                "--warmup {warmup} is more than the microguest allows ({MAX_SAMPLES}, its sample buffer's size)"
            )));
        }
        if samples > MAX_SAMPLES {
            return Err(Error::Usage(format!(
                "--samples {samples} is more than the microguest's sample buffer holds ({MAX_SAMPLES})"
            )));
        }
        Ok(Options {
            samples,
            warmup,
            raw: false,
            machine: MachineConfig::default(),
            pinned_cpu: None,
        })
    }
}

/// Steps [`measure`] reports: two null measurements, five crossings, eight exits.
pub const PHASES: u64 = 15;

/// How long a one-sample probe may take before its kind counts as unsupported
/// (a hypervisor that never returns from an instruction).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A run's report, and why it stopped early if it did.
#[derive(Debug)]
pub struct Measured {
    pub report: Report,
    /// `Error::Timeout` or `Error::Interrupted` when the run stopped before
    /// every row was measured: the rows done are kept, the others are marked
    /// "not measured". The caller writes the report, then fails with this.
    pub stopped: Option<Error>,
}

/// Whether `err` only means "stop now" (timeout, Ctrl-C) rather than a failure.
fn is_stop(err: &Error) -> bool {
    matches!(err, Error::Timeout(_) | Error::Interrupted(_))
}

fn not_measured(err: &Error) -> String {
    format!("not measured: the run stopped before this row ({err})")
}

/// One row of the report, unless the run has stopped: then, and when a timeout
/// or Ctrl-C stops it during `measure_row`, the row is `not_measured_row` with
/// the reason, and `stopped` remembers why. Other errors end the run.
fn row_unless_stopped<T>(
    stopped: &mut Option<Error>,
    measure_row: impl FnOnce() -> Result<T>,
    not_measured_row: impl FnOnce(String) -> T,
) -> Result<T> {
    if let Some(err) = stopped {
        return Ok(not_measured_row(not_measured(err)));
    }
    match measure_row() {
        Err(err) if is_stop(&err) => {
            let row = not_measured_row(not_measured(&err));
            *stopped = Some(err);
            Ok(row)
        }
        other => other,
    }
}

/// Measures everything and returns the report; the whole run, probes included,
/// cannot outlive `timeout`. A timeout or Ctrl-C after the null measurements
/// keeps every row already measured (see [`Measured::stopped`]). `progress`
/// hears one step per null measurement, crossing and exit ([`PHASES`]).
pub fn measure(opts: &Options, timeout: Duration, progress: &dyn Progress) -> Result<Measured> {
    if timeout.is_zero() {
        return Err(Error::Usage("--timeout must be at least 1 second".into()));
    }
    let rc = RunControl::new(timeout)?;
    let mut session = Session {
        rc: &rc,
        deadline: Instant::now() + timeout,
        timeout,
        cfg: opts.machine.clone(),
        facts: GuestFacts::default(),
        unsplit: Default::default(),
        warmup: opts.warmup,
        samples: opts.samples,
        raw: opts.raw,
    };
    progress.begin("microguest", PHASES);
    let measured = session.measure_all(opts, progress);
    progress.finish();
    measured
}

/// The two null measurements: the user stamp pair (subtracted from crossings)
/// and the kernel stamp pair (subtracted from exits).
struct Nulls {
    user: Stats,
    kernel: Stats,
}

/// The crossings in report order.
const CROSSINGS: [(&str, Kind); 5] = [
    ("pf", Kind::PageFault),
    ("int3", Kind::Breakpoint),
    ("syscall", Kind::Syscall),
    ("sysenter", Kind::Sysenter),
    ("int-n", Kind::IntN),
];

/// The exits in report order; the hypercall is chosen by CPU vendor.
fn exit_kinds(facts: &GuestFacts) -> [(&'static str, Kind); 8] {
    let hypercall = if facts.is_amd() {
        ("vmmcall", Kind::Vmmcall)
    } else {
        ("vmcall", Kind::Vmcall)
    };
    [
        ("cpuid", Kind::Cpuid),
        ("pio-out", Kind::PioOut),
        ("pio-in", Kind::PioIn),
        ("mmio-write", Kind::MmioWrite),
        hypercall,
        ("rdmsr", Kind::Rdmsr),
        ("wrmsr", Kind::Wrmsr),
        ("hlt", Kind::Hlt),
    ]
}

/// The report of a run: host facts, method, rows and notes.
fn assemble_report(
    opts: &Options,
    facts: &GuestFacts,
    null: Stats,
    crossings: Vec<Crossing>,
    exits: Vec<ExitTiming>,
    notes: Vec<String>,
) -> Report {
    let host = Machine::probe();
    let mut report = Report::new(
        format!("xvmm-microguest {}", env!("CARGO_PKG_VERSION")),
        Environment::Microguest,
        host_facts(facts, &host),
        Method::standard(opts.warmup, opts.samples),
    );
    report.machine = Some(host);
    report.method.pinned_cpu = opts.pinned_cpu;
    report.null_overhead = null;
    report.crossings = crossings;
    report.exits = exits;
    report.notes = notes;
    report
}

/// Runs one user-mode two-stamp phase (`Kind::Null`, or `Kind::Imul` with its
/// chain length N: even samples time N imuls, odd samples 2N) in its own VM
/// and returns every sample's interval (0 where a sample was not valid), for
/// the benchmarks.
pub fn user_intervals(
    kind: Kind,
    param: u64,
    warmup: u64,
    samples: u64,
    timeout: Duration,
) -> Result<Vec<u64>> {
    if kind.four_stamps() || kind.runs_in_kernel() {
        return Err(Error::Usage(format!(
            "{kind:?} is not a user-mode two-stamp kind"
        )));
    }
    let rc = RunControl::new(timeout)?;
    let phase = Phase {
        kind,
        warmup,
        samples,
        param,
    };
    match machine::run_phase(&rc, &MachineConfig::default(), &phase)?.0 {
        PhaseEnd::Done { stamps, .. } => Ok(stamps
            .chunks_exact(2)
            .map(|p| match (p[0], p[1]) {
                (open, close) if open != UNFILLED && close != UNFILLED && close > open => {
                    close - open
                }
                _ => 0,
            })
            .collect()),
        PhaseEnd::Refused { reason } => Err(Error::Guest(format!("{kind:?}: {reason}"))),
        PhaseEnd::Fault(f) => Err(Error::Guest(format!("{kind:?}: {f}"))),
    }
}

fn unsupported_exit(name: &str, samples: u64, reason: String) -> ExitTiming {
    ExitTiming {
        name: name.into(),
        status: Status::Unsupported { reason },
        samples_requested: samples,
        samples_valid: 0,
        round_trip: None,
        guest_to_vmm: None,
        in_vmm: None,
        vmm_to_guest: None,
    }
}

/// Two-stamp samples of one phase: the valid intervals, the samples they came
/// from (index into the phase) and the host stamps of the measured exits.
pub struct TwoStamp {
    pub intervals: Vec<u64>,
    pub opens: Vec<u64>,
    pub closes: Vec<u64>,
    pub discarded: u64,
    pub host: Vec<HostStamps>,
    /// Guest TSC = host TSC + this, when known for the whole phase.
    pub tsc_offset: Option<i64>,
}

/// Splits two-stamp words into intervals, dropping unfilled or unordered pairs.
pub fn two_stamp_samples(stamps: &[u64]) -> TwoStamp {
    let mut out = TwoStamp {
        intervals: Vec::with_capacity(stamps.len() / 2),
        opens: Vec::with_capacity(stamps.len() / 2),
        closes: Vec::with_capacity(stamps.len() / 2),
        discarded: 0,
        host: Vec::new(),
        tsc_offset: None,
    };
    for pair in stamps.chunks_exact(2) {
        let (open, close) = (pair[0], pair[1]);
        if open == UNFILLED || close == UNFILLED || close <= open {
            out.discarded += 1;
            // Keep positions aligned with the host stamps of the same sample.
            out.opens.push(UNFILLED);
            out.closes.push(UNFILLED);
            continue;
        }
        out.intervals.push(close - open);
        out.opens.push(open);
        out.closes.push(close);
    }
    out
}

/// Four-stamp words as samples.
pub fn four_stamp_samples(stamps: &[u64]) -> Vec<Sample> {
    stamps
        .chunks_exact(4)
        .map(|s| Sample {
            u2k_u: s[0],
            u2k_k: s[1],
            k2u_k: s[2],
            k2u_u: s[3],
        })
        .collect()
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

/// Faults that mean the hypervisor did not perform the crossing, so it cannot
/// be measured there: the kernel entry point faulting while still at CPL3 (a
/// transfer without the privilege change: PVM does this with SYSCALL), or #UD /
/// #GP raised on the crossing instruction in the user loop (PVM answers
/// `int 0x80` with #UD).
pub fn misdelivered(kind: Kind, fault: &machine::GuestFault) -> Option<String> {
    // The stamp loops cross nothing: any fault there is a real failure.
    if matches!(kind, Kind::Null | Kind::Imul | Kind::KernelNull) {
        return None;
    }
    let entries = super::guest::kernel_entries();
    let entry = match kind {
        Kind::Syscall => Some(entries.syscall),
        Kind::Sysenter => Some(entries.sysenter),
        Kind::PageFault => Some(entries.page_fault),
        Kind::Breakpoint => Some(entries.breakpoint),
        Kind::IntN => Some(entries.int_n),
        _ => None,
    };
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

/// A phase's guest and host stamps, or why the hypervisor refused it.
type PhaseStamps = std::result::Result<(Vec<u64>, Vec<HostStamps>, Option<i64>), String>;

struct Session<'a> {
    rc: &'a RunControl,
    /// When the whole run must end, and the --timeout it came from.
    deadline: Instant,
    timeout: Duration,
    cfg: MachineConfig,
    facts: GuestFacts,
    /// Exits that reached xvmm but could not be split, with the reason.
    unsplit: std::cell::RefCell<Vec<String>>,
    warmup: u64,
    samples: u64,
    raw: bool,
}

impl Session<'_> {
    /// Every phase in order (see the module comment), then the report.
    fn measure_all(&mut self, opts: &Options, progress: &dyn Progress) -> Result<Measured> {
        let mut notes: Vec<String> = self.probe_kernel_stamps()?.into_iter().collect();
        let nulls = self.null_measurements(progress)?;
        notes.push(format!(
            "VM exits are timed at CPL0 and corrected by the kernel stamp pair's median ({} ticks, min {}); \
             cpuid and the hypercall (number 0, unknown to KVM) stay in KVM, the others reach xvmm",
            nulls.kernel.median, nulls.kernel.min
        ));
        let mut stopped: Option<Error> = None;
        let crossings = self.crossings(nulls.user.median, progress, &mut stopped)?;
        let exits = self.exits(nulls.kernel.median, progress, &mut stopped)?;
        let unsplit = self.unsplit.take();
        if !unsplit.is_empty() {
            notes.push(format!(
                "only the in-VMM time is given for {}: guest and host stamps need a fixed guest TSC offset \
                 (KVM re-bases it on hosts with an unstable TSC)",
                unsplit.join(", ")
            ));
        }
        if let Some(err) = &stopped {
            notes.insert(
                0,
                format!(
                    "the run stopped early ({err}): rows marked \"not measured\" were not reached"
                ),
            );
        }
        let report = assemble_report(opts, &self.facts, nulls.user, crossings, exits, notes);
        Ok(Measured { report, stopped })
    }

    /// Runs one sample of the kernel null loop: if the hypervisor cannot
    /// execute LFENCE/RDTSCP at CPL0, kernel stamps become plain RDTSC from
    /// now on and the returned note says why. Also learns the guest's facts.
    fn probe_kernel_stamps(&mut self) -> Result<Option<String>> {
        let probe = Phase {
            kind: Kind::KernelNull,
            warmup: 0,
            samples: 1,
            param: 0,
        };
        let (end, facts) = machine::run_phase(self.rc, &self.cfg, &probe)?;
        self.facts = facts;
        let refused = match end {
            PhaseEnd::Refused { reason } => Some(reason),
            // A KVM without RDTSCP in the guest CPUID injects #UD.
            PhaseEnd::Fault(f) if f.vector == 6 && f.cs & 3 == 0 => Some(f.to_string()),
            _ => None,
        };
        let Some(reason) = refused else {
            return Ok(None);
        };
        self.cfg.plain_kernel_stamps = true;
        Ok(Some(format!(
            "kernel-side stamps are plain RDTSC: the hypervisor cannot execute LFENCE/RDTSCP at CPL0 ({reason})"
        )))
    }

    /// The user and kernel stamp pairs with nothing between. Every later
    /// figure depends on them, so a refusal here ends the run.
    fn null_measurements(&self, progress: &dyn Progress) -> Result<Nulls> {
        progress.step("null");
        let user = self
            .two_stamp_intervals(Kind::Null, 0)?
            .map_err(|r| Error::Guest(format!("the null measurement did not run: {r}")))?;
        progress.step("kernel null");
        let kernel = self
            .two_stamp_intervals(Kind::KernelNull, 0)?
            .map_err(|r| Error::Guest(format!("the kernel null measurement did not run: {r}")))?;
        Ok(Nulls {
            user: Stats::from_samples(&user.intervals),
            kernel: Stats::from_samples(&kernel.intervals),
        })
    }

    /// Every crossing, each probed with one sample in its own VM first.
    fn crossings(
        &self,
        null_ticks: u64,
        progress: &dyn Progress,
        stopped: &mut Option<Error>,
    ) -> Result<Vec<Crossing>> {
        let mut rows = Vec::with_capacity(CROSSINGS.len());
        for (name, kind) in CROSSINGS {
            let measure_row = || -> Result<Crossing> {
                progress.step(name);
                let unsupported = if kind == Kind::Sysenter && self.facts.is_amd() {
                    Some(format!(
                        "{} CPUs raise #UD for SYSENTER in 64-bit mode (only SYSCALL exists there)",
                        self.facts.vendor
                    ))
                } else {
                    self.probe(kind)?
                };
                match unsupported {
                    Some(reason) => Ok(Crossing::unsupported(name, self.samples, reason)),
                    None => self.crossing(name, kind, null_ticks),
                }
            };
            rows.push(row_unless_stopped(stopped, measure_row, |reason| {
                Crossing::unsupported(name, self.samples, reason)
            })?);
        }
        Ok(rows)
    }

    /// Every VM exit, each probed with one sample in its own VM first.
    fn exits(
        &self,
        null_ticks: u64,
        progress: &dyn Progress,
        stopped: &mut Option<Error>,
    ) -> Result<Vec<ExitTiming>> {
        let kinds = exit_kinds(&self.facts);
        let mut rows = Vec::with_capacity(kinds.len());
        for (name, kind) in kinds {
            let measure_row = || -> Result<ExitTiming> {
                progress.step(name);
                let msr = matches!(kind, Kind::Rdmsr | Kind::Wrmsr);
                let unsupported = if msr && !self.facts.user_space_msr {
                    Some(
                        "KVM lacks KVM_CAP_X86_USER_SPACE_MSR, so no MSR access reaches xvmm"
                            .into(),
                    )
                } else {
                    self.probe(kind)?
                };
                match unsupported {
                    Some(reason) => Ok(unsupported_exit(name, self.samples, reason)),
                    None => self.exit(name, kind, null_ticks),
                }
            };
            rows.push(row_unless_stopped(stopped, measure_row, |reason| {
                unsupported_exit(name, self.samples, reason)
            })?);
        }
        Ok(rows)
    }

    fn phase(&self, kind: Kind, param: u64) -> Phase {
        Phase {
            kind,
            warmup: self.warmup,
            samples: self.samples,
            param,
        }
    }

    /// Runs one sample of `kind` in its own VM under a short watchdog: the
    /// reason it cannot be measured here, or `None` when it works.
    fn probe(&self, kind: Kind) -> Result<Option<String>> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let probe_rc = RunControl::new(left.min(PROBE_TIMEOUT).max(Duration::from_millis(1)))?;
        let phase = Phase {
            kind,
            warmup: 0,
            samples: 1,
            param: 0,
        };
        match machine::run_phase(&probe_rc, &self.cfg, &phase) {
            Ok((PhaseEnd::Done { .. }, _)) => Ok(None),
            Ok((PhaseEnd::Refused { reason }, _)) => Ok(Some(format!("hypervisor refused it: {reason}"))),
            Ok((PhaseEnd::Fault(f), _)) => match misdelivered(kind, &f) {
                Some(reason) => Ok(Some(reason)),
                None => Err(Error::Guest(format!("{kind:?} probe: {f}"))),
            },
            Err(Error::Timeout(_)) if Instant::now() < self.deadline => Ok(Some(format!(
                "the guest did not finish one sample within {} s: the hypervisor does not return from it",
                PROBE_TIMEOUT.as_secs()
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
    fn stamps(&self, kind: Kind, param: u64) -> Result<PhaseStamps> {
        match machine::run_phase(self.rc, &self.cfg, &self.phase(kind, param))?.0 {
            PhaseEnd::Done {
                stamps,
                host,
                tsc_offset,
            } => Ok(Ok((stamps, host, tsc_offset))),
            PhaseEnd::Refused { reason } => Ok(Err(reason)),
            PhaseEnd::Fault(f) => Err(Error::Guest(format!("{kind:?} measurement: {f}"))),
        }
    }

    fn two_stamp_intervals(
        &self,
        kind: Kind,
        param: u64,
    ) -> Result<std::result::Result<TwoStamp, String>> {
        Ok(self.stamps(kind, param)?.map(|(stamps, host, tsc_offset)| {
            let mut m = two_stamp_samples(&stamps);
            m.host = host;
            m.tsc_offset = tsc_offset;
            m
        }))
    }

    fn crossing(&self, name: &str, kind: Kind, null_ticks: u64) -> Result<Crossing> {
        let end = machine::run_phase(self.rc, &self.cfg, &self.phase(kind, 0))?.0;
        Ok(match end {
            PhaseEnd::Done { stamps, .. } => Crossing::from_samples(
                name,
                self.samples,
                &four_stamp_samples(&stamps),
                null_ticks,
                self.raw,
            ),
            PhaseEnd::Refused { reason } => Crossing::unsupported(
                name,
                self.samples,
                format!("hypervisor refused it: {reason}"),
            ),
            PhaseEnd::Fault(f) => match misdelivered(kind, &f) {
                Some(reason) => Crossing::unsupported(name, self.samples, reason),
                None => return Err(Error::Guest(format!("{name} measurement: {f}"))),
            },
        })
    }

    fn exit(&self, name: &str, kind: Kind, null_ticks: u64) -> Result<ExitTiming> {
        let m = match self.two_stamp_intervals(kind, 0)? {
            Ok(m) => m,
            Err(reason) => {
                return Ok(unsupported_exit(
                    name,
                    self.samples,
                    format!("hypervisor refused it: {reason}"),
                ))
            }
        };
        let mut timing = ExitTiming {
            name: name.into(),
            status: Status::Measured,
            samples_requested: self.samples,
            samples_valid: m.intervals.len() as u64,
            round_trip: Some(Interval::from_raw(&m.intervals, null_ticks)),
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
        };
        if !m.host.is_empty() {
            let split = m
                .tsc_offset
                .and_then(|offset| split_exits(&m.opens, &m.closes, &m.host, self.warmup, offset));
            if split.is_none() {
                let why = if m.tsc_offset.is_none() {
                    "the guest TSC offset was unknown or moved during the phase"
                } else {
                    "guest and host stamps did not line up"
                };
                self.unsplit.borrow_mut().push(format!("{name} ({why})"));
            }
            match split {
                Some([to_vmm, in_vmm, to_guest]) => {
                    timing.guest_to_vmm = Some(Stats::from_samples(&to_vmm));
                    timing.in_vmm = Some(Stats::from_samples(&in_vmm));
                    timing.vmm_to_guest = Some(Stats::from_samples(&to_guest));
                }
                None => {
                    let in_vmm: Vec<u64> = m
                        .host
                        .iter()
                        .skip(self.warmup as usize)
                        .map(|h| h.reentered.saturating_sub(h.exited))
                        .collect();
                    timing.in_vmm = Some(Stats::from_samples(&in_vmm));
                }
            }
        }
        Ok(timing)
    }
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
    use super::*;

    #[test]
    fn two_stamp_samples_drop_unfilled_and_unordered() {
        let m = two_stamp_samples(&[10, 50, 10, UNFILLED, 60, 60, 100, 170, 7]);
        assert_eq!(m.intervals, vec![40, 70]);
        assert_eq!(m.discarded, 2);
        assert_eq!(m.opens, vec![10, UNFILLED, UNFILLED, 100]);
    }

    #[test]
    fn four_stamp_words_become_samples() {
        let s = four_stamp_samples(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1],
            Sample {
                u2k_u: 5,
                u2k_k: 6,
                k2u_k: 7,
                k2u_u: 8
            }
        );
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

    #[test]
    fn progress_steps_cover_every_row() {
        let facts = GuestFacts::default();
        let rows = CROSSINGS.len() + exit_kinds(&facts).len();
        assert_eq!(
            PHASES,
            2 + rows as u64,
            "two null measurements, then one step per row"
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
