//! The result format shared by every xvmm measurement producer (the built-in
//! microguest, `xperf` in a Linux guest or on bare metal) and every consumer
//! (the VMM's report, the harness, the benches).
//!
//! The JSON form is versioned by [`SCHEMA`] and [`SCHEMA_VERSION`]; bump the
//! version on any incompatible change and document it in the README.

pub mod schema;

pub mod num;
pub mod progress;
pub mod render;
pub mod stats;

#[cfg(test)]
pub(crate) mod fixtures;

// The modules by concern (schema/, stats/, render/, host/), named here as
// the rest of the workspace has always named them.
pub use bootstrap::MedianCi;
pub use characterize::{Characterization, Metric};
pub use compare::{compare, Comparison, ComparisonRow};
pub use correction::{Corrections, StampCosts};
pub use intervals::{Batched, ExitSplit, Intervals, KernelStamps, StampPoint};
pub use ipi::{IpiReceiver, IpiStamps};
pub use machine::Machine;
pub use probes::Probe;
pub use render::document;
pub use schema::{
    async_pf, channel, characterize, exit_trace, interval_stream, intervals, ipi, json, limits,
    machine, names, probes, workload, xperf_args,
};
use serde::{Deserialize, Serialize};
pub use stats::{attribution, bootstrap, compare, correction, linearity, quantum, sweep, timeline};
pub use stats::{Histogram, Stats};
use xvmm_host::{escape, tsc};

/// Name of the schema, the first thing a reader checks.
pub const SCHEMA: &str = "xvmm-results";
/// Version of the schema described in the README.
pub const SCHEMA_VERSION: u32 = 1;

/// Sentinel the measuring side writes into a stamp slot before a sample; a slot
/// still holding it afterwards was not filled by the kernel.
pub const UNFILLED: u64 = u64::MAX;

/// One complete measurement run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Report {
    pub schema: String,
    pub schema_version: u32,
    /// Producer, e.g. "xvmm-microguest 0.1.0" or "xperf 0.1.0".
    pub tool: String,
    /// Where the numbers were taken.
    pub environment: Environment,
    pub host: HostFacts,
    /// Full characterisation of the machine the measuring code ran on.
    #[serde(default)]
    pub machine: Option<Machine>,
    pub method: Method,
    /// The stamp pair with nothing between it, in TSC ticks.
    pub null_overhead: Stats,
    #[serde(deserialize_with = "limits::crossings")]
    pub crossings: Vec<Crossing>,
    /// VM-exit round trips (empty outside a VM).
    #[serde(default, deserialize_with = "limits::exits")]
    pub exits: Vec<ExitTiming>,
    /// Host-side exit-to-entry times by exit reason, from the kvm tracepoints
    /// (only with `xvmm --trace`).
    #[serde(default)]
    pub host_exits: Vec<HostExit>,
    /// Free-form caveats the reader must see (THP state, pinning failures...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// What instrumentation adds to the crossings (`xperf probes` only).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "limits::probes"
    )]
    pub probes: Vec<Probe>,
    /// What `xperf characterize` found out about the machine (only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub characterize: Option<Characterization>,
    /// What the stamps themselves cost and the corrections derived from it
    /// (reports before it had only `null_overhead`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp_costs: Option<StampCosts>,
    /// Calibration exits the guest took for the host's timeline (`[index,
    /// before, after]`; only when the VMM asked for them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calibration: Vec<timeline::GuestCalibration>,
    /// The run id the VMM gave the guest, echoed back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The host/guest TSC timeline of a traced run (`xvmm --trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<timeline::Timeline>,
    /// KVM async page faults measured (`--host-fault-delay`); additive
    /// (README "Schema").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_pf: Option<async_pf::AsyncPf>,
    /// Where a whole command's kernel time went (`xperf workload` only);
    /// additive (README "Schema").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<workload::Workload>,
}

impl Report {
    pub fn new(tool: String, environment: Environment, host: HostFacts, method: Method) -> Self {
        Report {
            schema: SCHEMA.to_string(),
            schema_version: SCHEMA_VERSION,
            tool,
            environment,
            host,
            machine: None,
            method,
            null_overhead: Stats::default(),
            crossings: Vec::new(),
            exits: Vec::new(),
            host_exits: Vec::new(),
            notes: Vec::new(),
            probes: Vec::new(),
            characterize: None,
            stamp_costs: None,
            calibration: Vec::new(),
            run_id: None,
            timeline: None,
            async_pf: None,
            workload: None,
        }
    }

    /// Parses a report and checks its schema name and version.
    pub fn from_json(text: &str) -> Result<Self, FormatError> {
        let report: Report =
            serde_json::from_str(text).map_err(|e| FormatError::Json(e.to_string()))?;
        report.check_schema()?;
        Ok(report)
    }

    pub fn check_schema(&self) -> Result<(), FormatError> {
        if self.schema != SCHEMA {
            return Err(FormatError::Schema(self.schema.clone()));
        }
        if self.schema_version != SCHEMA_VERSION {
            return Err(FormatError::Version(self.schema_version));
        }
        Ok(())
    }

    /// The report as written to files and the VMM (see [`json`]).
    pub fn to_json_pretty(&self) -> String {
        json::to_string(self)
    }

    pub fn crossing(&self, name: &str) -> Option<&Crossing> {
        self.crossings.iter().find(|c| c.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    Json(String),
    Schema(String),
    Version(u32),
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // serde_json quotes the offending text (an unknown variant, a
            // field name), which may hold control characters: escaped here,
            // the message is safe for every caller to print.
            FormatError::Json(e) => {
                write!(f, "results are not valid JSON: {}", escape::visible(e))
            }
            FormatError::Schema(s) => write!(f, "results have schema {s:?}, expected {SCHEMA:?}"),
            FormatError::Version(v) => {
                write!(
                    f,
                    "results have schema version {v}, expected {SCHEMA_VERSION}"
                )
            }
        }
    }
}

impl std::error::Error for FormatError {}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Environment {
    /// xvmm's built-in bare-metal guest: hardware floor inside a VM.
    Microguest,
    /// xperf inside a Linux guest booted by xvmm.
    LinuxVm,
    /// xperf on a Linux host (no hypervisor underneath, or an unknown one).
    BareMetal,
}

impl Environment {
    /// Where the numbers were taken, for people.
    pub fn describe(self) -> &'static str {
        match self {
            Environment::Microguest => "microguest (bare-metal guest under KVM)",
            Environment::LinuxVm => "Linux guest under KVM",
            Environment::BareMetal => "bare metal",
        }
    }
}

/// Facts about the machine the numbers describe.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct HostFacts {
    pub cpu_model: String,
    /// TSC frequency in kHz, 0 when unknown.
    pub tsc_khz: u64,
    /// CPUID 0x40000000 signature as the measuring code sees it ("" on bare metal).
    pub hypervisor_signature: String,
    /// KVM module serving /dev/kvm on the host ("kvm_amd", "kvm_intel", "kvm_pvm"...).
    #[serde(default)]
    pub kvm_module: String,
    /// `uname -r` of the kernel the measuring code ran on.
    #[serde(default)]
    pub kernel_release: String,
    /// Whether kernel page-table isolation was active, when known.
    #[serde(default)]
    pub kpti: Option<bool>,
}

/// How the samples were taken.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Method {
    /// Instruction sequence that opens an interval.
    pub stamp_begin: String,
    /// Instruction sequence that closes an interval.
    pub stamp_end: String,
    pub warmup: u64,
    pub samples_requested: u64,
    /// What the corrected figures subtract from the raw ones.
    pub correction: String,
    /// CPU the measuring thread was pinned to, if any.
    #[serde(default)]
    pub pinned_cpu: Option<u32>,
    /// Rounds the whole measurement was repeated (`--rounds`); 1 in reports
    /// written before rounds existed. `samples_requested` is per round.
    #[serde(default = "one")]
    pub rounds: u32,
    /// The kernel side's stamps, when the producer's kernel takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_stamps: Option<KernelStamps>,
    /// Where each crossing's kernel stamps sit in its entry and exit path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stamp_points: Vec<StampPoint>,
}

fn one() -> u32 {
    1
}

impl Method {
    pub fn standard(warmup: u64, samples_requested: u64) -> Self {
        Method {
            stamp_begin: tsc::OPEN_TEXT.into(),
            stamp_end: tsc::CLOSE_TEXT.into(),
            warmup,
            samples_requested,
            correction: correction::DERIVATION.into(),
            pinned_cpu: None,
            rounds: 1,
            kernel_stamps: None,
            stamp_points: Vec::new(),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Status {
    /// Full u2k/k2u split.
    Measured,
    /// Only the user-side round trip could be taken (e.g. unpatched kernel).
    RoundTripOnly { reason: String },
    /// Not measured at all.
    Unsupported { reason: String },
}

impl Status {
    /// Why a row has no (or only some) figures; `None` when fully measured.
    /// Raw text: renderers escape it for a terminal.
    pub fn why_not(&self) -> Option<String> {
        match self {
            Status::Measured => None,
            Status::RoundTripOnly { reason } => Some(format!("round trip only: {reason}")),
            Status::Unsupported { reason } => Some(format!("unsupported: {reason}")),
        }
    }
}

/// One interval kind, as raw TSC ticks and with the stamps' cost subtracted.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Interval {
    pub raw: Stats,
    pub corrected: Stats,
    /// Ticks subtracted from every raw value (see README "Method").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<u64>,
    /// Raw values below the correction, clamped at 0 in `corrected`.
    #[serde(default)]
    pub clamped: u64,
    /// 95 % confidence interval of the corrected median ([`bootstrap`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ci: Option<MedianCi>,
    /// Each round's corrected median, in round order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<u64>,
    /// The host's exits in this segment (`xvmm --trace`, see [`attribution`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<attribution::SegmentHost>,
}

impl Interval {
    /// Summarises raw interval values (in the order taken) and their
    /// corrected counterparts, one round.
    pub fn from_raw(raw: &[u64], correction: u64) -> Self {
        Interval::from_rounds(&[raw], correction)
    }

    /// The same over several rounds: statistics of all values together,
    /// each round's corrected median, and the median's confidence interval.
    pub fn from_rounds(rounds: &[&[u64]], correction: u64) -> Self {
        let raw: Vec<u64> = rounds.iter().flat_map(|r| r.iter().copied()).collect();
        let corrected: Vec<u64> = raw.iter().map(|v| v.saturating_sub(correction)).collect();
        let round_medians = if rounds.len() > 1 {
            rounds
                .iter()
                .map(|r| Stats::from_samples(r).median.saturating_sub(correction))
                .collect()
        } else {
            Vec::new()
        };
        Interval {
            raw: Stats::from_samples(&raw),
            clamped: raw.iter().filter(|&&v| v < correction).count() as u64,
            median_ci: bootstrap::median_ci(&corrected),
            corrected: Stats::from_samples(&corrected),
            correction: Some(correction),
            rounds: round_medians,
            host: None,
        }
    }
}

/// Four stamps of one crossing sample, all in the measuring CPU's TSC, and
/// what the producer knows about the sample's surroundings. Written as an
/// array (see `sample_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub u2k_u: u64,
    pub u2k_k: u64,
    pub k2u_k: u64,
    pub k2u_u: u64,
    /// The CPU the sample ran on (TSC_AUX & 0xfff of the closing stamp).
    pub cpu: Option<u32>,
    /// Interrupts the CPU took inside the sample's window; `None` when the
    /// producer cannot count them.
    pub interrupts: Option<u32>,
}

/// Why a sample was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// A kernel slot still held [`UNFILLED`].
    Unfilled,
    /// The stamps are not strictly increasing.
    OutOfOrder,
}

impl Sample {
    /// Checks that the kernel filled both slots and the stamps are ordered
    /// `u2k_u < u2k_k < k2u_k < k2u_u`.
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.u2k_k == UNFILLED || self.k2u_k == UNFILLED {
            return Err(Rejection::Unfilled);
        }
        if self.u2k_u < self.u2k_k && self.u2k_k < self.k2u_k && self.k2u_k < self.k2u_u {
            Ok(())
        } else {
            Err(Rejection::OutOfOrder)
        }
    }
    pub fn u2k(&self) -> u64 {
        self.u2k_k - self.u2k_u
    }
    pub fn k2u(&self) -> u64 {
        self.k2u_u - self.k2u_k
    }
    pub fn in_kernel(&self) -> u64 {
        self.k2u_k - self.u2k_k
    }
    pub fn round_trip(&self) -> u64 {
        self.k2u_u - self.u2k_u
    }
}

/// One user<->kernel crossing kind (#PF, int3, syscall...).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Crossing {
    /// Stable identifier: "pf", "int3", "syscall", "sysenter", "int-n",
    /// "pf-first-touch", "pf-refault", "getppid"...
    #[serde(deserialize_with = "limits::crossing_name")]
    pub name: String,
    pub status: Status,
    pub samples_requested: u64,
    /// Samples that passed validation and are in the statistics.
    pub samples_valid: u64,
    /// Samples whose kernel slots were not filled.
    pub samples_unfilled: u64,
    /// Samples whose stamps were not strictly ordered.
    pub samples_out_of_order: u64,
    /// Samples dropped for another, named reason (e.g. KVM async page faults).
    #[serde(default)]
    pub samples_other_rejected: u64,
    #[serde(default)]
    pub other_rejected_reason: Option<String>,
    pub u2k: Option<Interval>,
    pub k2u: Option<Interval>,
    /// Kernel stamp to kernel stamp: time spent in the handler.
    #[serde(default)]
    pub in_kernel: Option<Interval>,
    /// User stamp to user stamp.
    pub round_trip: Option<Interval>,
    /// Per-sample stamps of every round (round r's are at r *
    /// samples-per-round), only when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
    /// Indices into `samples` of those the producer rejected before the
    /// shared validation (xperf: a KVM async page fault, a sequence counter
    /// off by more than one, a migration): in neither the statistics nor
    /// the attribution, which must cover the same samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_rejected: Vec<u64>,
    /// Samples dropped because their stamps came from different CPUs.
    #[serde(default)]
    pub samples_migrated: u64,
    /// Whether the producer counted interrupts inside each sample's window.
    #[serde(default)]
    pub interrupts_counted: bool,
    /// Valid samples an interrupt hit: in the statistics above, not in `clean`.
    #[serde(default)]
    pub samples_interrupted: u64,
    /// The valid samples no interrupt hit (when interrupts were counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean: Option<Intervals>,
    /// The round trip timed K at a time, offered for figures close to the
    /// TSC quantum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batched: Option<Batched>,
    /// The raw round trip in core cycles (PMU), when the CPU lets user mode
    /// read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<Stats>,
    /// Whether the crossing's work runs on other CPUs too (a cross-CPU
    /// wake-up, a TLB shootdown): a traced run also places the exits of the
    /// other vCPUs inside each sample's window, apart from its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spans_cpus: bool,
}

impl Crossing {
    pub fn unsupported(name: &str, samples_requested: u64, reason: String) -> Self {
        Crossing {
            name: name.to_string(),
            status: Status::Unsupported { reason },
            samples_requested,
            samples_valid: 0,
            samples_unfilled: 0,
            samples_out_of_order: 0,
            samples_other_rejected: 0,
            other_rejected_reason: None,
            u2k: None,
            k2u: None,
            in_kernel: None,
            round_trip: None,
            samples: None,
            samples_rejected: Vec::new(),
            samples_migrated: 0,
            interrupts_counted: false,
            samples_interrupted: 0,
            clean: None,
            batched: None,
            cycles: None,
            spans_cpus: false,
        }
    }

    /// Validates four-stamp samples of one round and summarises the valid ones.
    pub fn from_samples(
        name: &str,
        samples_requested: u64,
        samples: &[Sample],
        corrections: &Corrections,
        keep_samples: bool,
    ) -> Self {
        Crossing::from_rounds(
            name,
            samples_requested,
            &[samples.to_vec()],
            corrections,
            keep_samples,
        )
    }

    /// Validates four-stamp samples of every round (`samples_per_round`
    /// requested in each) and summarises the valid ones: all of them, and
    /// apart those no interrupt hit when interrupts were counted.
    pub fn from_rounds(
        name: &str,
        samples_per_round: u64,
        rounds: &[Vec<Sample>],
        corrections: &Corrections,
        keep_samples: bool,
    ) -> Self {
        let requested = samples_per_round.saturating_mul(rounds.len() as u64);
        let mut crossing = Crossing::unsupported(name, requested, String::new());
        crossing.status = Status::Measured;
        let mut valid: Vec<Vec<Sample>> = Vec::with_capacity(rounds.len());
        for round in rounds {
            let mut kept = Vec::with_capacity(round.len());
            for s in round {
                match s.validate() {
                    Ok(()) => kept.push(*s),
                    Err(Rejection::Unfilled) => crossing.samples_unfilled += 1,
                    Err(Rejection::OutOfOrder) => crossing.samples_out_of_order += 1,
                }
            }
            valid.push(kept);
        }
        let all = Intervals::from_rounds(&valid, corrections);
        crossing.samples_valid = all.samples;
        crossing.u2k = all.u2k;
        crossing.k2u = all.k2u;
        crossing.in_kernel = all.in_kernel;
        crossing.round_trip = all.round_trip;
        crossing.interrupts_counted = valid.iter().flatten().any(|s| s.interrupts.is_some());
        if crossing.interrupts_counted {
            let clean: Vec<Vec<Sample>> = valid
                .iter()
                .map(|r| {
                    r.iter()
                        .filter(|s| s.interrupts == Some(0))
                        .copied()
                        .collect()
                })
                .collect();
            let set = Intervals::from_rounds(&clean, corrections);
            crossing.samples_interrupted = crossing.samples_valid - set.samples;
            crossing.clean = Some(set);
        }
        if keep_samples {
            crossing.samples = Some(rounds.iter().flatten().copied().collect());
        }
        crossing
    }

    /// Summarises user-side round trips only (no kernel stamps available),
    /// one round.
    pub fn from_round_trips(
        name: &str,
        samples_requested: u64,
        round_trips: &[u64],
        correction: u64,
        reason: String,
    ) -> Self {
        Crossing::from_round_trip_rounds(
            name,
            samples_requested,
            &[round_trips],
            correction,
            reason,
        )
    }

    /// The same over rounds (`samples_per_round` requested in each).
    pub fn from_round_trip_rounds(
        name: &str,
        samples_per_round: u64,
        rounds: &[&[u64]],
        correction: u64,
        reason: String,
    ) -> Self {
        let requested = samples_per_round.saturating_mul(rounds.len() as u64);
        let mut crossing = Crossing::unsupported(name, requested, String::new());
        crossing.status = Status::RoundTripOnly { reason };
        crossing.samples_valid = rounds.iter().map(|r| r.len() as u64).sum();
        crossing.round_trip = Some(Interval::from_rounds(rounds, correction));
        crossing
    }
}

/// A VM-exit round trip measured from inside the guest, optionally split by
/// host-side stamps taken around `KVM_RUN`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExitTiming {
    /// The exit's row name, e.g. "cpuid" or "pio-out" (the microguest's
    /// rows are xvmm's `microguest::kinds::exit_rows`).
    #[serde(deserialize_with = "limits::exit_name")]
    pub name: String,
    /// What the row's instruction touches, for grouping tables (the
    /// microguest's rows have one; reports written before do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<ExitFamily>,
    pub status: Status,
    pub samples_requested: u64,
    pub samples_valid: u64,
    /// Guest stamp to guest stamp.
    pub round_trip: Option<Interval>,
    /// Guest stamp before the exit to the host stamp when `KVM_RUN` returned.
    #[serde(default)]
    pub guest_to_vmm: Option<Stats>,
    /// Host time between `KVM_RUN` returning and being called again.
    #[serde(default)]
    pub in_vmm: Option<Stats>,
    /// Host stamp before `KVM_RUN` to the guest stamp after the exit.
    #[serde(default)]
    pub vmm_to_guest: Option<Stats>,
    /// The same three parts corrected for the stamps, so that they add up
    /// to the corrected round trip (`guest_to_vmm`, `in_vmm` and
    /// `vmm_to_guest` above stay raw, as in reports written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<ExitSplit>,
    /// With `xvmm --trace`: the round trip cut by the host's tracepoints
    /// ([`exit_trace`]), and what tracing costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced: Option<exit_trace::TracedExit>,
    /// The IPI rows: what the receiving vCPU stamped on the same clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<IpiReceiver>,
    /// KVM's own count of the vCPU's exits in the row's phases and in the
    /// kernel stamp pair's: whether, and how often, the instruction exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_exits: Option<KvmExits>,
}

/// Exits KVM counted (its per-vCPU `exits` statistic) over phases that ran
/// their instruction `iterations` times, warm-up included.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitCount {
    pub exits: u64,
    pub iterations: u64,
}

impl ExitCount {
    /// Both counts summed (another round's phase).
    #[must_use]
    pub fn plus(self, other: ExitCount) -> ExitCount {
        ExitCount {
            exits: self.exits.saturating_add(other.exits),
            iterations: self.iterations.saturating_add(other.iterations),
        }
    }

    /// Exits per iteration; `None` for no iteration.
    pub fn per_iteration(&self) -> Option<f64> {
        (self.iterations > 0).then(|| self.exits as f64 / self.iterations as f64)
    }
}

/// An exit row's [`ExitCount`] beside the kernel stamp pair's (the same
/// two stamps with nothing between), so that the exits the stamps take
/// themselves (PVM traps the guest kernel's RDTSC) are not the row's.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvmExits {
    pub row: ExitCount,
    pub stamps: ExitCount,
}

impl KvmExits {
    /// How many exits one run of the row's instruction took, beyond its
    /// stamps' own: 1.0 for an instruction that exits once, about 0 for
    /// one the hypervisor lets run (and the few exits of another cause
    /// the phases met, host interrupts mostly, spread over each).
    pub fn per_sample(&self) -> Option<f64> {
        Some(self.row.per_iteration()? - self.stamps.per_iteration()?)
    }
}

impl ExitTiming {
    /// A row with its round trip and none of the host-side figures, which
    /// the caller adds where it has them; `samples` is (requested, valid).
    pub fn new(
        name: &str,
        family: Option<ExitFamily>,
        status: Status,
        samples: (u64, u64),
        round_trip: Option<Interval>,
    ) -> ExitTiming {
        ExitTiming {
            name: name.into(),
            family,
            status,
            samples_requested: samples.0,
            samples_valid: samples.1,
            round_trip,
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
            split: None,
            traced: None,
            receiver: None,
            kvm_exits: None,
        }
    }
}

/// What an exit row's instruction touches (kvm-unit-tests' vmexit kinds
/// fall into these): tables group their rows by it, in this order.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum ExitFamily {
    /// Instructions that exit on their own: CPUID, hypercalls, HLT,
    /// cache flushes, XSETBV.
    Instruction,
    /// Control and debug registers (CR0, CR4, CR8, DR7).
    Register,
    /// RDMSR and WRMSR, whoever serves them.
    Msr,
    /// Port I/O, served by the VMM or by KVM (an ioeventfd, an in-kernel
    /// device).
    PortIo,
    /// MMIO, likewise.
    Mmio,
    /// The local APIC and interrupts (IPIs, EOI).
    Interrupt,
    /// Timers (the LAPIC timer, TSC deadline).
    Timer,
}

impl ExitFamily {
    /// Every family, in table order.
    pub const ALL: [ExitFamily; 7] = [
        ExitFamily::Instruction,
        ExitFamily::Register,
        ExitFamily::Msr,
        ExitFamily::PortIo,
        ExitFamily::Mmio,
        ExitFamily::Interrupt,
        ExitFamily::Timer,
    ];

    /// The family's heading in tables.
    pub fn heading(self) -> &'static str {
        match self {
            ExitFamily::Instruction => "instructions",
            ExitFamily::Register => "control and debug registers",
            ExitFamily::Msr => "MSRs",
            ExitFamily::PortIo => "port I/O",
            ExitFamily::Mmio => "MMIO",
            ExitFamily::Interrupt => "APIC and interrupts",
            ExitFamily::Timer => "timers",
        }
    }

    /// Its value in JSON and as an OpenMetrics label.
    pub fn label(self) -> &'static str {
        match self {
            ExitFamily::Instruction => "instruction",
            ExitFamily::Register => "register",
            ExitFamily::Msr => "msr",
            ExitFamily::PortIo => "port-io",
            ExitFamily::Mmio => "mmio",
            ExitFamily::Interrupt => "interrupt",
            ExitFamily::Timer => "timer",
        }
    }
}

/// Exit rows grouped by family for a table: each family present, in
/// [`ExitFamily::ALL`] order, with its rows in report order; rows without a
/// family (older reports) last, under `None`. A report none of whose rows
/// has a family gives one group, `None`, in report order.
pub fn exits_by_family(exits: &[ExitTiming]) -> Vec<(Option<ExitFamily>, Vec<&ExitTiming>)> {
    let families = ExitFamily::ALL.iter().copied().map(Some).chain([None]);
    families
        .map(|f| {
            (
                f,
                exits.iter().filter(|e| e.family == f).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, rows)| !rows.is_empty())
        .collect()
}

/// Host-side cost of one kind of VM exit: host TSC ticks from `kvm_exit` to
/// the next `kvm_entry` of the same vCPU thread.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HostExit {
    /// Exit reason as the host kernel names it ("io", "npf", "IO_INSTRUCTION"...).
    pub reason: String,
    /// Counted as the trace streams (`stats::value_counts`): the median,
    /// p99 and histogram exact below 4096 ticks, less than 0.05 % low above.
    pub exit_to_entry: Stats,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exits a sample beyond the stamps' own (PVM's pio-out, 2026-11-30:
    /// 663 and 14 in 660 runs); no run, no figure.
    #[test]
    fn kvm_exits_a_sample_are_the_rows_less_the_stamps() {
        let count = |exits, iterations| ExitCount { exits, iterations };
        let k = KvmExits {
            row: count(663, 660),
            stamps: count(14, 660),
        };
        let per = k.per_sample().unwrap();
        assert!((per - 649.0 / 660.0).abs() < 1e-12, "{per}");
        assert_eq!(count(5, 0).per_iteration(), None);
        let none = KvmExits {
            row: count(663, 660),
            stamps: count(0, 0),
        };
        assert_eq!(none.per_sample(), None);
        assert_eq!(count(1, 2).plus(count(3, 4)), count(4, 6));
        assert_eq!(count(u64::MAX, 1).plus(count(1, 1)), count(u64::MAX, 2));
    }

    /// A family is written as its label, read back, and left out where a
    /// row has none; a report written before families reads as `None`; an
    /// unknown family is refused, not taken as another.
    #[test]
    fn exit_families_round_trip_as_their_labels() {
        for f in ExitFamily::ALL {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.label()));
            assert_eq!(serde_json::from_str::<ExitFamily>(&json).unwrap(), f);
        }
        let mut labels: Vec<&str> = ExitFamily::ALL.iter().map(|f| f.label()).collect();
        labels.dedup();
        assert_eq!(labels.len(), ExitFamily::ALL.len());
        assert!(serde_json::from_str::<ExitFamily>("\"apic\"").is_err());
        let mut sorted = ExitFamily::ALL;
        sorted.sort();
        assert_eq!(sorted, ExitFamily::ALL, "ALL is the table order");
    }

    fn sample(a: u64, b: u64, c: u64, d: u64) -> Sample {
        Sample {
            u2k_u: a,
            u2k_k: b,
            k2u_k: c,
            k2u_u: d,
            ..Default::default()
        }
    }

    /// A report with nothing measured yet.
    fn empty_report(env: Environment, method: Method) -> Report {
        Report::new("test".into(), env, HostFacts::default(), method)
    }

    /// Found by fuzzing (fuzz/fuzz_targets/report.rs): serde_json's default
    /// float parser is not exact, so a standard deviation xvmm wrote as
    /// 1007904.9460502765 read back as 1007904.9460502764.
    #[test]
    fn a_saved_report_reads_back_exactly() {
        let mut r = empty_report(Environment::BareMetal, Method::standard(0, 1));
        r.null_overhead.stddev = 1007904.9460502765;
        r.null_overhead.mean = 339421.86363636365;
        assert_eq!(Report::from_json(&r.to_json_pretty()).unwrap(), r);
    }

    /// Found by fuzzing (fuzz/fuzz_targets/report.rs, results_channel.rs):
    /// serde_json's message quotes the unknown variant, so a `\t` or DEL
    /// written in a result file or by a guest reached the error line raw.
    #[test]
    fn json_errors_quote_the_input_escaped() {
        let text = empty_report(Environment::BareMetal, Method::standard(0, 1))
            .to_json_pretty()
            // JSON escapes for a tab and ESC, a raw DEL (JSON allows it).
            .replace("\"bare-metal\"", "\"bare-m\\tal\u{7f}\\u001b[2J\"");
        let err = Report::from_json(&text).unwrap_err().to_string();
        assert!(
            err.contains("unknown variant `bare-m\\tal\\x7f\\x1b[2J`"),
            "{err}"
        );
        assert!(!err.chars().any(char::is_control), "{err}");
    }

    #[test]
    fn validation_rejects_unfilled_and_unordered() {
        assert_eq!(sample(1, 2, 3, 4).validate(), Ok(()));
        assert_eq!(
            sample(1, UNFILLED, 3, 4).validate(),
            Err(Rejection::Unfilled)
        );
        assert_eq!(
            sample(1, 2, UNFILLED, 4).validate(),
            Err(Rejection::Unfilled)
        );
        assert_eq!(sample(2, 2, 3, 4).validate(), Err(Rejection::OutOfOrder));
        assert_eq!(sample(1, 3, 2, 4).validate(), Err(Rejection::OutOfOrder));
        assert_eq!(sample(1, 2, 4, 4).validate(), Err(Rejection::OutOfOrder));
    }

    #[test]
    fn crossing_counts_rejections_and_splits_intervals() {
        let samples = [
            sample(100, 400, 900, 1200),
            sample(100, 500, 1000, 1400),
            sample(100, UNFILLED, 900, 1200),
            sample(100, 90, 900, 1200),
        ];
        let corr = Corrections::derive(50, Some((50, 50)));
        let c = Crossing::from_samples("pf", 4, &samples, &corr, false);
        assert_eq!(c.status, Status::Measured);
        assert_eq!(
            (c.samples_valid, c.samples_unfilled, c.samples_out_of_order),
            (2, 1, 1)
        );
        let u2k = c.u2k.unwrap();
        assert_eq!((u2k.raw.min, u2k.raw.max), (300, 400));
        assert_eq!((u2k.corrected.min, u2k.corrected.max), (250, 350));
        let k2u = c.k2u.unwrap();
        assert_eq!((k2u.raw.min, k2u.raw.max), (300, 400));
        assert_eq!(c.round_trip.unwrap().raw.max, 1300);
        assert!(c.samples.is_none());
        assert!(!c.interrupts_counted && c.clean.is_none());
    }

    #[test]
    fn interrupted_samples_stay_in_all_and_leave_clean() {
        let with = |irqs: Option<u32>, rt: u64| Sample {
            interrupts: irqs,
            cpu: Some(1),
            ..sample(0, 100, 200, rt)
        };
        let rounds = vec![
            vec![with(Some(0), 300), with(Some(2), 90_000)],
            vec![with(Some(0), 310), with(Some(0), 320)],
        ];
        let corr = Corrections::derive(10, Some((10, 10)));
        let c = Crossing::from_rounds("getppid", 2, &rounds, &corr, true);
        assert_eq!((c.samples_requested, c.samples_valid), (4, 4));
        assert!(c.interrupts_counted);
        assert_eq!(c.samples_interrupted, 1);
        let clean = c.clean.as_ref().unwrap();
        assert_eq!(clean.samples, 3);
        assert_eq!(clean.round_trip.as_ref().unwrap().raw.max, 320);
        assert_eq!(c.round_trip.as_ref().unwrap().raw.max, 90_000);
        // Per-round medians of the corrected round trip (correction 30).
        assert_eq!(c.round_trip.as_ref().unwrap().rounds, vec![270, 280]);
        assert_eq!(c.samples.as_ref().map(Vec::len), Some(4));
    }

    #[test]
    fn json_round_trip_and_schema_check() {
        let mut report = empty_report(Environment::Microguest, Method::standard(10, 100));
        report.null_overhead = Stats::from_samples(&[40, 41, 42]);
        report
            .crossings
            .push(Crossing::unsupported("int-n", 100, "refused".into()));
        let samples = [sample(1, 2, 3, 4), sample(5, 6, 7, 8)];
        let corr = Corrections::derive(1, Some((1, 1)));
        report
            .crossings
            .push(Crossing::from_samples("pf", 2, &samples, &corr, true));
        let text = report.to_json_pretty();
        let back = Report::from_json(&text).unwrap();
        assert_eq!(back, report);
        assert!(text.contains("\"kind\": \"unsupported\""));
        assert!(text.contains("\n        [1, 2, 3, 4],\n"), "{text}");

        let wrong = text.replace("\"schema_version\": 1", "\"schema_version\": 99");
        assert_eq!(Report::from_json(&wrong), Err(FormatError::Version(99)));
        assert!(matches!(Report::from_json("{"), Err(FormatError::Json(_))));
    }
}
