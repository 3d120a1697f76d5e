//! A report as OpenMetrics text, for Prometheus through node_exporter's
//! textfile collector: every figure a gauge, encoded by `prometheus-client`
//! (the Prometheus project's Rust client), not by hand. docs/metrics.md
//! lists the families; `promtool check metrics` accepts the text.
//!
//! Prometheus's conventions: base units (durations in seconds, converted
//! from TSC ticks with the run's rate, itself `<prefix>_tsc_frequency_hertz`;
//! in ticks, said in the name and HELP, only where the rate is unknown); the
//! measured thing and the statistic as labels (`statistic` = min, median,
//! p99, max, mean, stddev: never the `quantile` label, which belongs to
//! summaries); the machine once, in `<prefix>_machine_info`, not on every
//! series (a kernel upgrade renames no series); no label whose values grow
//! without bound. A figure that could not be taken is absent and
//! `<prefix>_metric_unavailable{metric,reason}` is 1 in its place, the
//! reason one of a fixed set of codes ([`REASON_CODES`]; the JSON keeps the
//! text), so a dashboard tells "not measured" from zero.
//!
//! The client writes label values verbatim, so [`label_value`] escapes them
//! here (a report is untrusted: a CPU model may hold a quote).

use crate::characterize::Metric;
use crate::{Crossing, ExitTiming, HostExit, Interval, Report, Stats, Status};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use xvmm_host::escape::visible;

/// An `--openmetrics` destination as given on a command line (xperf's
/// and xvmm's): a file name, never empty nor `-` (stdout), since a textfile
/// collector reads files. The error completes "--openmetrics ...".
pub fn destination(text: &str) -> Result<std::path::PathBuf, String> {
    match text {
        "" | "-" => {
            Err("needs a file name (node_exporter reads a directory of *.prom files)".into())
        }
        path => Ok(path.into()),
    }
}

/// The label set of one series.
type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// Reads one figure of a [`Stats`].
type Pick = fn(&Stats) -> f64;

/// The `statistic` label's values and what they stand for.
const STATISTICS: [(&str, Pick); 6] = [
    ("min", |s| s.min as f64),
    ("median", |s| s.median as f64),
    ("p99", |s| s.p99 as f64),
    ("max", |s| s.max as f64),
    ("mean", |s| s.mean),
    ("stddev", |s| s.stddev),
];

/// The values `reason` takes on `<prefix>_metric_unavailable`.
pub const REASON_CODES: [&str; 7] = [
    "no_kernel_hooks",
    "unsupported",
    "not_permitted",
    "not_readable",
    "not_reported",
    "no_samples",
    "failed",
];

/// How TSC ticks are written: seconds at a known rate, else ticks.
#[derive(Clone, Copy)]
enum Clock {
    Hertz(f64),
    Ticks,
}

impl Clock {
    fn of_khz(khz: u64) -> Clock {
        match khz {
            0 => Clock::Ticks,
            k => Clock::Hertz(k as f64 * 1000.0),
        }
    }

    /// The unit a duration family gets and the factor from ticks to it.
    fn unit_and_scale(self) -> (&'static str, f64) {
        match self {
            Clock::Hertz(hz) => ("seconds", 1.0 / hz),
            Clock::Ticks => ("ticks", 1.0),
        }
    }

    /// What the HELP text adds about the unit.
    fn help_note(self) -> &'static str {
        match self {
            Clock::Hertz(_) => "",
            Clock::Ticks => {
                " (in TSC ticks: the run did not know the TSC rate to convert them to seconds)"
            }
        }
    }
}

/// One family: its HELP, unit and series.
struct FamilyDef {
    help: String,
    unit: Option<String>,
    gauges: Gauges,
}

/// Gauge families by name, filled first and registered in name order (so
/// the same report always gives the same text).
struct Families {
    families: BTreeMap<String, FamilyDef>,
}

impl Families {
    fn new() -> Families {
        Families {
            families: BTreeMap::new(),
        }
    }

    /// Sets `name{labels}` (in `unit`, when it has one) to `value`.
    fn set(&mut self, name: &str, unit: Option<&str>, help: &str, labels: Labels, value: f64) {
        let family = self
            .families
            .entry(name.to_string())
            .or_insert_with(|| FamilyDef {
                help: help.to_string(),
                unit: unit.map(str::to_string),
                gauges: Gauges::default(),
            });
        family.gauges.get_or_create(&labels).set(value);
    }

    /// A duration's statistics: `<stem>_duration_<unit>{labels, statistic}`
    /// and `<stem>_samples{labels}`. `per` divides every figure (a burst of
    /// `per` instructions timed as one: each statistic scales alike).
    fn durations(&mut self, stem: &str, clock: Clock, help: &str, labels: &Labels, s: &Stats) {
        self.scaled(stem, "duration", clock, help, labels, s, 1.0);
    }

    #[allow(clippy::too_many_arguments)]
    fn scaled(
        &mut self,
        stem: &str,
        what: &str,
        clock: Clock,
        help: &str,
        labels: &Labels,
        s: &Stats,
        per: f64,
    ) {
        let (unit, scale) = clock.unit_and_scale();
        let help = format!("{help}{}", clock.help_note());
        let name = match what {
            "" => stem.to_string(),
            what => format!("{stem}_{what}"),
        };
        self.statistics(&name, unit, scale / per, &help, labels, s);
        let samples = format!("{stem}_samples");
        let count_help = format!("samples behind {name}_{unit}");
        self.set(&samples, None, &count_help, labels.clone(), s.count as f64);
    }

    /// One series per statistic of `s`, times `scale`, under `name` in `unit`.
    fn statistics(
        &mut self,
        name: &str,
        unit: &str,
        scale: f64,
        help: &str,
        labels: &Labels,
        s: &Stats,
    ) {
        for (statistic, pick) in STATISTICS {
            let mut l = labels.clone();
            l.push(("statistic".into(), statistic.into()));
            self.set(name, Some(unit), help, l, pick(s) * scale);
        }
    }

    /// One `metric_unavailable` series for `metric`, and why (as a code).
    fn unavailable(&mut self, metric: &str, reason: &str) {
        let labels = vec![
            ("metric".to_string(), label_value(metric)),
            ("reason".to_string(), reason_code(reason).to_string()),
        ];
        self.set(
            "metric_unavailable",
            None,
            "1 for each figure that could not be taken; reason is a code (docs/metrics.md), \
             the JSON report has the full text. An absent figure is not zero",
            labels,
            1.0,
        );
    }

    fn encode(self, prefix: &str) -> String {
        let mut registry = Registry::with_prefix(prefix);
        for (name, family) in self.families {
            let help = help_text(&family.help);
            match family.unit {
                Some(u) => registry.register_with_unit(name, help, Unit::Other(u), family.gauges),
                None => registry.register(name, help, family.gauges),
            }
        }
        let mut text = String::new();
        // Writing to a String cannot fail, and every name is sanitised.
        if encode(&mut text, &registry).is_err() {
            text.clear();
        }
        text
    }
}

/// The report as OpenMetrics text, every name under `prefix` (`xperf` for
/// xperf, `xvmm` for a VM run): the characterisation's metrics when the
/// report has them, its crossings otherwise, and its exits.
pub fn openmetrics(report: &Report, prefix: &str) -> String {
    let mut f = Families::new();
    let guest = Clock::of_khz(guest_khz(report));
    run_facts(&mut f, report, prefix);
    match &report.characterize {
        Some(c) => c
            .metrics
            .iter()
            .for_each(|m| characterize_metric(&mut f, m, guest)),
        None => report
            .crossings
            .iter()
            .for_each(|c| crossing(&mut f, c, guest)),
    }
    report.exits.iter().for_each(|e| exit(&mut f, e, guest));
    let host = Clock::of_khz(report.host.tsc_khz);
    report
        .host_exits
        .iter()
        .for_each(|e| host_exit(&mut f, e, host));
    f.encode(&sanitize(prefix))
}

/// The TSC rate of the measured machine's ticks (the guest's in a VM run),
/// in kHz; 0 when unknown.
fn guest_khz(report: &Report) -> u64 {
    report
        .machine
        .as_ref()
        .map(|m| m.tsc_khz)
        .filter(|&k| k > 0)
        .unwrap_or(report.host.tsc_khz)
}

/// The machine's facts, as the labels of `<prefix>_machine_info`.
pub fn machine_labels(report: &Report) -> Labels {
    let m = report.machine.as_ref();
    let pick = |a: Option<&str>, b: &str| {
        let v = a.filter(|v| !v.is_empty()).unwrap_or(b);
        if v.is_empty() {
            "unknown".to_string()
        } else {
            label_value(v)
        }
    };
    let hypervisor = m.map(|m| m.hypervisor_signature.as_str());
    let hypervisor = match pick(hypervisor, &report.host.hypervisor_signature) {
        h if h == "unknown" => "none".to_string(),
        h => h,
    };
    vec![
        ("hypervisor".into(), hypervisor),
        (
            "clocksource".into(),
            pick(m.map(|m| m.clocksource.as_str()), ""),
        ),
        (
            "kernel".into(),
            pick(
                m.map(|m| m.kernel_release.as_str()),
                &report.host.kernel_release,
            ),
        ),
        (
            "cpu_model".into(),
            pick(m.map(|m| m.cpu_model.as_str()), &report.host.cpu_model),
        ),
    ]
}

/// Build and machine info, the TSC rate and, for a characterisation, when
/// it ran and for how long.
fn run_facts(f: &mut Families, report: &Report, prefix: &str) {
    let version = vec![(
        "version".to_string(),
        label_value(env!("CARGO_PKG_VERSION")),
    )];
    let help = format!("1; the labels say which {prefix} wrote these figures");
    f.set("build_info", None, &help, version, 1.0);
    let help = "1; the labels describe the machine measured (join on instance to label a series)";
    f.set("machine_info", None, help, machine_labels(report), 1.0);
    match guest_khz(report) {
        0 => f.unavailable("tsc_frequency_hertz", "not reported"),
        khz => {
            let help = "TSC rate the figures in seconds were converted from ticks with";
            f.set(
                "tsc_frequency",
                Some("hertz"),
                help,
                Vec::new(),
                khz as f64 * 1000.0,
            );
        }
    }
    if let Some(c) = &report.characterize {
        let help = "when the last characterisation started, seconds since the Unix epoch";
        f.set(
            "last_run_timestamp",
            Some("seconds"),
            help,
            Vec::new(),
            c.started_unix as f64,
        );
        let help = "how long the last characterisation took";
        f.set(
            "last_run_duration",
            Some("seconds"),
            help,
            Vec::new(),
            c.seconds,
        );
    }
}

/// Where a characterisation metric goes: the family stem, its labels, and
/// how its figures convert.
enum Target {
    /// TSC ticks: a `<stem>_<what>` family in seconds (`what` is
    /// "duration", or empty for an offset such as a skew); `per`
    /// instructions in one sample.
    Duration {
        stem: String,
        what: &'static str,
        per: f64,
    },
    /// A figure in `unit` times `scale` (a rate in kHz as hertz).
    Plain {
        name: String,
        unit: Option<String>,
        scale: f64,
    },
}

/// The crossing intervals a characterisation names by suffix.
const CROSSING_SUFFIXES: [(&str, &str); 3] = [("-u2k", "u2k"), ("-k2u", "k2u"), ("", "round_trip")];

/// The clocks `time` times per read.
const CLOCK_READS: [&str; 4] = [
    "clock_gettime-vdso",
    "clock_gettime-syscall",
    "rdtsc",
    "rdtscp",
];

/// The family and labels of a characterisation metric (docs/metrics.md's
/// table); a metric this version does not know keeps a family of its own.
fn metric_target(m: &Metric) -> (Target, Labels) {
    let label = |k: &str, v: &str| vec![(k.to_string(), label_value(v))];
    let duration = |stem: &str, per: f64| Target::Duration {
        stem: stem.into(),
        what: "duration",
        per,
    };
    let hertz = |name: &str| Target::Plain {
        name: name.into(),
        unit: Some("hertz".into()),
        scale: 1000.0,
    };
    match (m.group.as_str(), m.name.as_str()) {
        ("time", clock) if CLOCK_READS.contains(&clock) => {
            (duration("clock_read", 1.0), label("clock", clock))
        }
        ("time", "tsc-khz-measured") => (hertz("tsc_measured_frequency"), Vec::new()),
        ("time", "tsc-khz-reported") => (hertz("tsc_reported_frequency"), label("source", "cpuid")),
        ("time", "tsc-khz-kernel") => (hertz("tsc_reported_frequency"), label("source", "kernel")),
        ("time", name) if name.starts_with("tsc-skew ") => {
            let pair = name.trim_start_matches("tsc-skew ");
            let skew = Target::Duration {
                stem: "tsc_skew".into(),
                what: "",
                per: 1.0,
            };
            (skew, label("cpus", pair))
        }
        ("interrupts", "wakeup-cross-cpu") => (
            duration("cross_cpu_wakeup", instructions_per_sample(&m.unit)),
            Vec::new(),
        ),
        ("interrupts", "mprotect-shootdown") => (
            duration("mprotect", instructions_per_sample(&m.unit)),
            label("tlb_flush", "remote"),
        ),
        ("interrupts", "mprotect-local") => (
            duration("mprotect", instructions_per_sample(&m.unit)),
            label("tlb_flush", "local"),
        ),
        ("interrupts", "timer-wakeup") => (
            Target::Plain {
                name: "timer_wakeup_lateness".into(),
                unit: Some("seconds".into()),
                scale: 1e-9,
            },
            Vec::new(),
        ),
        ("exits", "pause") => (
            duration("pause", instructions_per_sample(&m.unit)),
            Vec::new(),
        ),
        ("exits", exit) => (
            duration("exit", instructions_per_sample(&m.unit)),
            label("exit", exit),
        ),
        ("crossings", name) => {
            let (base, interval) = CROSSING_SUFFIXES
                .iter()
                .find_map(|(suffix, interval)| Some((name.strip_suffix(suffix)?, *interval)))
                .unwrap_or((name, "round_trip"));
            let mut labels = label("crossing", base);
            labels.push(("interval".into(), interval.into()));
            (duration("crossing", 1.0), labels)
        }
        (group, name) => (other_target(group, name, &m.unit), Vec::new()),
    }
}

/// A metric outside the table: `<group>_<name>` in its own unit.
fn other_target(group: &str, name: &str, unit: &str) -> Target {
    let stem = sanitize(&format!("{group}_{name}"));
    match unit {
        u if u.starts_with("ticks") => Target::Duration {
            stem,
            what: "duration",
            per: instructions_per_sample(u),
        },
        "kHz" => Target::Plain {
            name: stem.replace("khz", "frequency"),
            unit: Some("hertz".into()),
            scale: 1000.0,
        },
        "" => Target::Plain {
            name: stem,
            unit: None,
            scale: 1.0,
        },
        u => Target::Plain {
            name: stem,
            unit: Some(sanitize(u)),
            scale: 1.0,
        },
    }
}

/// N in a unit "ticks/N pauses" (one sample times N instructions); 1 else.
fn instructions_per_sample(unit: &str) -> f64 {
    super::ticks_per(unit).unwrap_or(1.0)
}

fn characterize_metric(f: &mut Families, m: &Metric, clock: Clock) {
    let (target, labels) = metric_target(m);
    let family = match &target {
        Target::Duration { stem, .. } => stem,
        Target::Plain { name, .. } => name,
    };
    let help = FAMILY_HELP
        .iter()
        .find(|(name, _)| name == family)
        .map_or_else(|| help_for(m), |(_, help)| (*help).to_string());
    match (target, m.measured()) {
        (Target::Duration { stem, what, per }, Some(s)) => {
            f.scaled(&stem, what, clock, &help, &labels, s, per);
        }
        (Target::Plain { name, unit, scale }, Some(s)) => {
            let unit_name = unit.as_deref().unwrap_or("value");
            f.statistics(&name, unit_name, scale, &help, &labels, s);
            let count_help = format!("samples behind {name}");
            f.set(
                &format!("{name}_samples"),
                None,
                &count_help,
                labels,
                s.count as f64,
            );
        }
        (Target::Plain { name, unit, scale }, None) => match m.number.filter(|n| n.is_finite()) {
            Some(n) => f.set(&name, unit.as_deref(), &help, labels, n * scale),
            None => unavailable_metric(f, m),
        },
        (Target::Duration { .. }, None) => unavailable_metric(f, m),
    }
}

/// A metric without a figure: unavailable when it gives a reason. A fact
/// in words only (the hypervisor's name, the mitigations) is no figure: the
/// JSON and `machine_info` carry it.
fn unavailable_metric(f: &mut Families, m: &Metric) {
    if let Some(reason) = m.reason.as_deref() {
        f.unavailable(&format!("{}/{}", m.group, m.name), reason);
    }
}

/// What each characterisation family holds, for its HELP line.
const FAMILY_HELP: [(&str, &str); 12] = [
    ("clock_read", "one clock read as user space makes it, by clock: clock_gettime(CLOCK_MONOTONIC) through the vDSO or as a system call, rdtsc, rdtscp; the stamps' cost subtracted"),
    ("tsc_measured_frequency", "the TSC rate measured over 100 ms windows against CLOCK_MONOTONIC"),
    ("tsc_reported_frequency", "the TSC rate the machine states: CPUID leaf 0x15 or 0x40000010 (source=cpuid) or the kernel log (source=kernel)"),
    ("tsc_skew", "the TSC of one CPU minus another's (cpus=cpuA-cpuB), estimated by ping-pong rounds between them"),
    ("pause", "one pause instruction, timed in bursts: far above a few nanoseconds when pause-loop exiting sends the vCPU to the hypervisor"),
    ("exit", "a VM exit's round trip timed from user space, by instruction (cpuid exits under every hypervisor); the stamps' cost subtracted"),
    ("crossing", "a user/kernel crossing (getppid, #PF first touch and refault) by interval: round_trip, and u2k and k2u on a kernel with xperf's hooks; the stamps' cost subtracted"),
    ("machine_steal", "share of CPU time the hypervisor stole during the run (/proc/stat steal)"),
    ("machine_memory", "the machine's memory (MemTotal)"),
    ("cross_cpu_wakeup", "one wake-up of a thread asleep on another CPU (an IPI and a schedule), half a futex ping-pong round trip between two pinned threads"),
    ("mprotect", "one mprotect of a page this process touches, made read-only or read-write again: with another thread of it running on another CPU (tlb_flush=remote: a TLB shootdown there, an IPI and its answer) or with none (tlb_flush=local)"),
    ("timer_wakeup_lateness", "how late clock_nanosleep to an absolute CLOCK_MONOTONIC deadline returns (timer slack 1 ns, no real-time priority), in seconds of CLOCK_MONOTONIC"),
];

/// A metric's HELP: what it is, from its name and unit.
fn help_for(m: &Metric) -> String {
    match m.unit.as_str() {
        u if u.starts_with("ticks/") => {
            format!(
                "xperf characterize {} {} ({u}, per instruction)",
                m.group, m.name
            )
        }
        _ => format!("xperf characterize {} {}", m.group, m.name),
    }
}

/// The intervals of a crossing, as the `interval` label names them.
const INTERVALS: [&str; 4] = ["u2k", "k2u", "in_kernel", "round_trip"];

fn crossing(f: &mut Families, c: &Crossing, clock: Clock) {
    let intervals: [&Option<Interval>; 4] = [&c.u2k, &c.k2u, &c.in_kernel, &c.round_trip];
    let help = "a user<->kernel crossing, per interval, null overhead subtracted";
    for (name, interval) in INTERVALS.iter().zip(intervals) {
        match interval
            .as_ref()
            .map(|i| &i.corrected)
            .filter(|s| s.count > 0)
        {
            Some(s) => {
                let labels = vec![
                    ("crossing".to_string(), label_value(&c.name)),
                    ("interval".to_string(), (*name).to_string()),
                ];
                f.durations("crossing", clock, help, &labels, s);
            }
            None => {
                let why = c.status.why_not();
                let reason = why.as_deref().unwrap_or("no valid samples");
                f.unavailable(&format!("crossings/{}-{name}", c.name), reason);
            }
        }
    }
}

fn exit(f: &mut Families, e: &ExitTiming, clock: Clock) {
    let help = "a VM exit's round trip seen from the guest, null overhead subtracted";
    match e
        .round_trip
        .as_ref()
        .map(|i| &i.corrected)
        .filter(|s| s.count > 0)
    {
        Some(s) => {
            let mut labels = vec![("exit".to_string(), label_value(&e.name))];
            // The family where the report has one, so a dashboard can sum
            // or filter by it.
            if let Some(family) = e.family {
                labels.push(("family".to_string(), family.label().to_string()));
            }
            f.durations("exit", clock, help, &labels, s);
            if let Some(per) = e.kvm_exits.as_ref().and_then(crate::KvmExits::per_sample) {
                f.set(
                    "exit_kvm_exits_per_sample",
                    None,
                    "exits KVM counted (its per-vCPU exits statistic) per run of the row's \
                     instruction, less the kernel stamp pair's own",
                    labels,
                    per,
                );
            }
            if let Some(r) = e.receiver.as_ref().filter(|r| r.samples() > 0) {
                ipi_receiver(f, &e.name, r, clock);
            }
        }
        None => {
            let reason = match &e.status {
                Status::Measured => "no valid samples".to_string(),
                other => other.why_not().unwrap_or_default(),
            };
            f.unavailable(&format!("exits/{}", e.name), &reason);
        }
    }
}

/// An IPI row's receiver legs, one series each (`leg`), on the guest's
/// clock as the row's round trip.
fn ipi_receiver(f: &mut Families, exit: &str, r: &crate::IpiReceiver, clock: Clock) {
    let help = "an IPI row's receiver side: the sender's stamp to the receiver's handler \
                (send_to_handler), the handler to its EOI done (handler_to_eoi), raw";
    for (leg, stats) in [
        ("send_to_handler", &r.send_to_handler),
        ("handler_to_eoi", &r.handler_to_eoi),
    ] {
        let labels = vec![
            ("exit".to_string(), label_value(exit)),
            ("leg".to_string(), leg.to_string()),
        ];
        f.durations("ipi_receiver", clock, help, &labels, stats);
    }
}

fn host_exit(f: &mut Families, e: &HostExit, clock: Clock) {
    if e.exit_to_entry.count == 0 {
        return;
    }
    let help = "host time from kvm_exit to kvm_entry by exit reason, at the host's TSC rate";
    let labels = vec![("reason".to_string(), label_value(&e.reason))];
    f.durations("host_exit", clock, help, &labels, &e.exit_to_entry);
}

/// A reason text as one of [`REASON_CODES`]: the label's values stay a
/// fixed set however the text is worded (it may hold numbers, paths, a
/// kernel's error). The first rule that matches wins.
pub fn reason_code(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| r.contains(w));
    if has(&["xperf hooks", "pr_xperf"]) {
        "no_kernel_hooks"
    } else if has(&[
        "permission",
        "not permitted",
        "eperm",
        "eacces",
        "as root",
        "cap_",
    ]) {
        "not_permitted"
    } else if has(&[
        "unsupported",
        "not supported",
        "does not support",
        "lacks",
        "no such device",
    ]) {
        "unsupported"
    } else if has(&["no valid samples", "no samples", "no rounds"]) {
        "no_samples"
    } else if has(&[
        "not readable",
        "no such file",
        "cannot read",
        "cannot open",
        "no /",
    ]) {
        "not_readable"
    } else if has(&["kernel log", "gives no", "not reported", "has no", "no \""]) {
        "not_reported"
    } else {
        "failed"
    }
}

/// A metric name part: ASCII letters, digits and `_`, lower case, never
/// empty, never starting with a digit.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let out = out.trim_matches('_').to_string();
    match out.chars().next() {
        None => "x".into(),
        Some(c) if c.is_ascii_digit() => format!("x_{out}"),
        Some(_) => out,
    }
}

/// A label value as the exposition needs it: printable (control characters
/// shown as escapes), then `\`, `"` and newline escaped.
pub fn label_value(text: &str) -> String {
    let shown = visible(text);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text: one printable line with `\` escaped (the client writes it
/// verbatim).
fn help_text(text: &str) -> String {
    visible(text).replace('\\', "\\\\")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::characterize::Characterization;
    use crate::fixtures;
    use crate::{Environment, ExitTiming, HostExit, Machine};
    use std::collections::BTreeSet;

    /// One sample line: name, labels (unescaped), value.
    type Series = (String, BTreeMap<String, String>, f64);

    /// A strict reader of the exposition's sample lines (the test's own,
    /// so that an encoder bug shows): every label value quoted and escaped.
    fn series(text: &str) -> Vec<Series> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (head, value) = line.rsplit_once(' ').expect(line);
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}').expect(line))),
                None => (head, BTreeMap::new()),
            };
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "{name}"
            );
            out.push((name.to_string(), labels, value.parse().expect(line)));
        }
        out
    }

    fn parse_labels(text: &str) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        let mut chars = text.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            assert_eq!(chars.next(), Some('"'), "{text}");
            let mut value = String::new();
            loop {
                match chars.next().expect(text) {
                    '\\' => match chars.next().expect(text) {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => panic!("bad escape \\{c} in {text}"),
                    },
                    '"' => break,
                    '\n' => panic!("raw newline in {text}"),
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
            match chars.next() {
                Some(',') | None => {}
                Some(c) => panic!("{c} after a label value in {text}"),
            }
        }
        labels
    }

    fn find<'a>(all: &'a [Series], name: &str, pairs: &[(&str, &str)]) -> Vec<&'a Series> {
        all.iter()
            .filter(|(n, l, _)| {
                n == name
                    && pairs
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .collect()
    }

    fn value(all: &[Series], name: &str, pairs: &[(&str, &str)]) -> f64 {
        let found = find(all, name, pairs);
        assert_eq!(found.len(), 1, "{name} {pairs:?}: {found:?}");
        found[0].2
    }

    /// Relative closeness for figures converted to seconds.
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
    }

    fn characterized() -> Report {
        let mut r = fixtures::report(Environment::BareMetal, 1);
        r.machine = Some(Machine {
            cpu_model: "Evil \"CPU\" \\ 9000\nx".into(),
            hypervisor_signature: "KVMKVMKVM".into(),
            kernel_release: "6.12.0".into(),
            clocksource: "tsc".into(),
            tsc_khz: 2_000_000,
            ..Machine::default()
        });
        let cpuid = Metric::from_samples("exits", "cpuid", "ticks", &[100, 200, 300, 400]);
        let mut c = Characterization {
            started_unix: 1_700_000_000,
            seconds: 1.5,
            ..Characterization::default()
        };
        c.metrics = vec![
            cpuid,
            Metric::from_samples("time", "tsc-khz-measured", "kHz", &[1_999_999, 2_000_001]),
            Metric::fact("time", "tsc-khz-kernel", "2000000 kHz").with_number(2e6, "kHz"),
            Metric::from_samples("time", "tsc-skew cpu0-cpu3", "ticks", &[5, 7]),
            Metric::from_samples("time", "rdtscp", "ticks", &[40, 60]),
            Metric::from_samples("exits", "pause", "ticks/128 pauses", &[1280]),
            Metric::from_samples(
                "interrupts",
                "wakeup-cross-cpu",
                "ticks/2 wake-ups",
                &[60_000],
            ),
            Metric::from_samples("interrupts", "timer-wakeup", "ns", &[21_000]),
            Metric::from_samples("crossings", "getppid", "ticks", &[400, 600]),
            Metric::from_samples("crossings", "getppid-u2k", "ticks", &[100]),
            Metric::fact("machine", "steal", "1.00 %").with_number(0.01, "ratio"),
            Metric::fact("machine", "memory", "1 GiB").with_number(1073741824.0, "bytes"),
            Metric::fact("hypervisor", "virt", "kvm"),
            Metric::missing(
                "crossings",
                "getppid-k2u",
                "round trip only: kernel has no xperf hooks (prctl PR_XPERF answered EINVAL)",
            ),
            Metric::missing("time", "tsc-khz-reported", "CPUID gives no \"TSC\"\nrate"),
        ];
        r.characterize = Some(c);
        r
    }

    /// Every family the characterisation above must give, written out here
    /// (docs/metrics.md's names), not derived from the exporter's rules.
    const CHARACTERIZE_FAMILIES: [&str; 24] = [
        "xperf_build_info",
        "xperf_machine_info",
        "xperf_tsc_frequency_hertz",
        "xperf_last_run_timestamp_seconds",
        "xperf_last_run_duration_seconds",
        "xperf_exit_duration_seconds",
        "xperf_exit_samples",
        "xperf_tsc_measured_frequency_hertz",
        "xperf_tsc_measured_frequency_samples",
        "xperf_tsc_reported_frequency_hertz",
        "xperf_tsc_skew_seconds",
        "xperf_tsc_skew_samples",
        "xperf_clock_read_duration_seconds",
        "xperf_clock_read_samples",
        "xperf_pause_duration_seconds",
        "xperf_pause_samples",
        "xperf_cross_cpu_wakeup_duration_seconds",
        "xperf_cross_cpu_wakeup_samples",
        "xperf_timer_wakeup_lateness_seconds",
        "xperf_timer_wakeup_lateness_samples",
        "xperf_crossing_duration_seconds",
        "xperf_crossing_samples",
        "xperf_machine_steal_ratio",
        "xperf_machine_memory_bytes",
    ];

    #[test]
    fn the_families_are_the_documented_ones_and_nothing_else() {
        let text = openmetrics(&characterized(), "xperf");
        let got: BTreeSet<String> = series(&text).into_iter().map(|(n, ..)| n).collect();
        let mut want: BTreeSet<String> = CHARACTERIZE_FAMILIES
            .iter()
            .map(|s| s.to_string())
            .collect();
        want.insert("xperf_metric_unavailable".into());
        assert_eq!(got, want);
        // The reserved summary label never appears on these gauges.
        assert!(!text.contains("quantile="), "{text}");
        // A family's HELP says what the family holds, not its first series.
        assert!(
            text.contains("# HELP xperf_clock_read_duration_seconds one clock read"),
            "{text}"
        );
    }

    #[test]
    fn every_statistic_is_a_gauge_in_seconds_equal_to_the_report() {
        let r = characterized();
        let text = openmetrics(&r, "xperf");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let all = series(&text);
        // 2 GHz: a tick is 0.5 ns.
        for (statistic, ticks) in [
            ("min", 100.0),
            ("median", 200.0),
            ("p99", 400.0),
            ("max", 400.0),
            ("mean", 250.0),
        ] {
            let got = value(
                &all,
                "xperf_exit_duration_seconds",
                &[("exit", "cpuid"), ("statistic", statistic)],
            );
            assert!(close(got, ticks * 0.5e-9), "{statistic}: {got}");
        }
        let cpuid = r.characterize.as_ref().unwrap().metric("cpuid").unwrap();
        let stddev = cpuid.measured().unwrap().stddev;
        let got = value(
            &all,
            "xperf_exit_duration_seconds",
            &[("exit", "cpuid"), ("statistic", "stddev")],
        );
        assert!(close(got, stddev * 0.5e-9), "{got}");
        assert_eq!(value(&all, "xperf_exit_samples", &[("exit", "cpuid")]), 4.0);
        assert_eq!(value(&all, "xperf_tsc_frequency_hertz", &[]), 2e9);
        let hz = value(
            &all,
            "xperf_tsc_measured_frequency_hertz",
            &[("statistic", "min")],
        );
        assert_eq!(hz, 1_999_999_000.0);
        let kernel = [("source", "kernel")];
        assert_eq!(
            value(&all, "xperf_tsc_reported_frequency_hertz", &kernel),
            2e9
        );
        let skew = [("cpus", "cpu0-cpu3"), ("statistic", "max")];
        assert!(close(value(&all, "xperf_tsc_skew_seconds", &skew), 3.5e-9));
        let rdtscp = [("clock", "rdtscp"), ("statistic", "max")];
        assert!(close(
            value(&all, "xperf_clock_read_duration_seconds", &rdtscp),
            30e-9
        ));
        // 1280 ticks for 128 pauses: 10 ticks, 5 ns, a pause.
        let pause = value(
            &all,
            "xperf_pause_duration_seconds",
            &[("statistic", "median")],
        );
        assert!(close(pause, 5e-9), "{pause}");
        // 60000 ticks for two wake-ups: 30000 ticks, 15 us, a wake-up.
        let median = [("statistic", "median")];
        let wakeup = value(&all, "xperf_cross_cpu_wakeup_duration_seconds", &median);
        assert!(close(wakeup, 15e-6), "{wakeup}");
        let late = value(&all, "xperf_timer_wakeup_lateness_seconds", &median);
        assert!(close(late, 21e-6), "{late}");
        let rt = [
            ("crossing", "getppid"),
            ("interval", "round_trip"),
            ("statistic", "max"),
        ];
        assert!(close(
            value(&all, "xperf_crossing_duration_seconds", &rt),
            300e-9
        ));
        let u2k = [("crossing", "getppid"), ("interval", "u2k")];
        assert_eq!(value(&all, "xperf_crossing_samples", &u2k), 1.0);
        assert_eq!(value(&all, "xperf_machine_steal_ratio", &[]), 0.01);
        assert_eq!(value(&all, "xperf_machine_memory_bytes", &[]), 1073741824.0);
        assert_eq!(value(&all, "xperf_last_run_timestamp_seconds", &[]), 1.7e9);
        assert_eq!(value(&all, "xperf_last_run_duration_seconds", &[]), 1.5);
        // A fact in words is no series.
        assert!(all.iter().all(|(n, ..)| !n.contains("virt")));
    }

    #[test]
    fn without_a_tsc_rate_durations_stay_in_ticks_and_say_so() {
        let mut r = characterized();
        r.machine.as_mut().unwrap().tsc_khz = 0;
        r.host.tsc_khz = 0;
        let text = openmetrics(&r, "xperf");
        let all = series(&text);
        let median = [("exit", "cpuid"), ("statistic", "median")];
        assert_eq!(value(&all, "xperf_exit_duration_ticks", &median), 200.0);
        assert!(find(&all, "xperf_exit_duration_seconds", &[]).is_empty());
        assert!(text.contains("did not know the TSC rate"), "{text}");
        let gone = [
            ("metric", "tsc_frequency_hertz"),
            ("reason", "not_reported"),
        ];
        assert_eq!(value(&all, "xperf_metric_unavailable", &gone), 1.0);
    }

    #[test]
    fn a_machine_without_its_own_rate_converts_at_the_hosts() {
        let mut r = characterized();
        r.machine.as_mut().unwrap().tsc_khz = 0;
        r.host.tsc_khz = 1_000_000;
        let all = series(&openmetrics(&r, "xperf"));
        assert_eq!(value(&all, "xperf_tsc_frequency_hertz", &[]), 1e9);
        let median = [("exit", "cpuid"), ("statistic", "median")];
        // 200 ticks at 1 GHz.
        let got = value(&all, "xperf_exit_duration_seconds", &median);
        assert!(close(got, 200e-9), "{got}");
        // With a rate of its own (a guest's), the machine's wins.
        r.machine.as_mut().unwrap().tsc_khz = 2_000_000;
        let all = series(&openmetrics(&r, "xperf"));
        assert_eq!(value(&all, "xperf_tsc_frequency_hertz", &[]), 2e9);
    }

    #[test]
    fn a_metric_this_version_does_not_know_keeps_a_family_of_its_own() {
        let mut r = characterized();
        let c = r.characterize.as_mut().unwrap();
        c.metrics = vec![
            Metric::from_samples("time", "new-clock", "ticks", &[40, 60]),
            Metric::from_samples("exits", "ud2", "ticks/64 loads", &[640]),
            Metric::from_samples("memory", "tlb-walk", "ticks/8 loads", &[80]),
        ];
        let text = openmetrics(&r, "xperf");
        let all = series(&text);
        // A time metric outside the table is neither a clock read nor a
        // skew: its own duration family, in seconds.
        let max = value(
            &all,
            "xperf_time_new_clock_duration_seconds",
            &[("statistic", "max")],
        );
        assert!(close(max, 30e-9), "{max}");
        assert!(find(&all, "xperf_tsc_skew_seconds", &[]).is_empty());
        assert!(
            text.contains(
                "# HELP xperf_time_new_clock_duration_seconds xperf characterize time new-clock."
            ),
            "{text}"
        );
        // Samples that time 64 (or 8) at once: per instruction, and the
        // HELP says so where the family is not one of the table's.
        let ud2 = [("exit", "ud2"), ("statistic", "median")];
        assert!(close(
            value(&all, "xperf_exit_duration_seconds", &ud2),
            5e-9
        ));
        let walk = value(
            &all,
            "xperf_memory_tlb_walk_duration_seconds",
            &[("statistic", "min")],
        );
        assert!(close(walk, 5e-9), "{walk}");
        assert!(
            text.contains("tlb-walk (ticks/8 loads, per instruction)"),
            "{text}"
        );
    }

    #[test]
    fn an_ipi_rows_receiver_legs_are_series_of_their_own() {
        let mut r = fixtures::report(Environment::Microguest, 1);
        r.host.tsc_khz = 1_000_000;
        let mut e = ExitTiming::new(
            "ipi",
            Some(crate::ExitFamily::Interrupt),
            Status::Measured,
            (1, 1),
            Some(Interval::from_raw(&[5000], 0)),
        );
        e.receiver = Some(crate::IpiReceiver::from_samples(&[crate::IpiStamps {
            sent: 1000,
            acked: 6000,
            handler: 3000,
            eoi: 3500,
            halted_at: 900,
        }]));
        r.exits.push(e);
        let text = openmetrics(&r, "xvmm");
        let all = series(&text);
        let leg = |leg: &str| {
            all.iter()
                .find(|(n, l, _)| {
                    n == "xvmm_ipi_receiver_duration_seconds"
                        && l.get("leg").map(String::as_str) == Some(leg)
                        && l.get("exit").map(String::as_str) == Some("ipi")
                        && l.get("statistic").map(String::as_str) == Some("median")
                })
                .map(|s| s.2)
                .unwrap_or_else(|| panic!("{leg}: {text}"))
        };
        // 2000 and 500 ticks at 1 GHz.
        assert!((leg("send_to_handler") - 2e-6).abs() < 1e-12, "{text}");
        assert!((leg("handler_to_eoi") - 5e-7).abs() < 1e-12, "{text}");
        // A row without a receiver adds none.
        r.exits[0].receiver = None;
        assert!(!openmetrics(&r, "xvmm").contains("ipi_receiver"));
    }

    #[test]
    fn an_interval_without_samples_is_unavailable_not_zero() {
        let mut r = fixtures::report(Environment::LinuxVm, 2);
        r.host.tsc_khz = 1_000_000;
        let empty = Interval::default();
        r.crossings[0].round_trip = Some(empty.clone());
        r.exits.push(ExitTiming {
            name: "hlt".into(),
            family: None,
            status: Status::Measured,
            samples_requested: 3,
            samples_valid: 0,
            round_trip: Some(empty),
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
            split: None,
            traced: None,
            receiver: None,
            kvm_exits: None,
        });
        let all = series(&openmetrics(&r, "xvmm"));
        let name = &r.crossings[0].name;
        let rt = [("crossing", name.as_str()), ("interval", "round_trip")];
        assert!(find(&all, "xvmm_crossing_duration_seconds", &rt).is_empty());
        let gone = format!("crossings/{name}-round_trip");
        let missing = [("metric", gone.as_str()), ("reason", "no_samples")];
        assert_eq!(value(&all, "xvmm_metric_unavailable", &missing), 1.0);
        assert!(find(&all, "xvmm_exit_duration_seconds", &[("exit", "hlt")]).is_empty());
        let hlt = [("metric", "exits/hlt"), ("reason", "no_samples")];
        assert_eq!(value(&all, "xvmm_metric_unavailable", &hlt), 1.0);
    }

    #[test]
    fn a_destination_is_a_file_name() {
        for bad in ["", "-"] {
            let err = destination(bad).unwrap_err();
            assert!(err.contains("needs a file name"), "{bad:?}: {err}");
        }
        assert_eq!(
            destination("/d/x.prom").unwrap(),
            std::path::PathBuf::from("/d/x.prom")
        );
    }

    #[test]
    fn a_missing_metric_is_named_unavailable_with_a_fixed_code() {
        let all = series(&openmetrics(&characterized(), "xperf"));
        let gone = find(&all, "xperf_metric_unavailable", &[]);
        let pairs: BTreeSet<(String, String)> = gone
            .iter()
            .map(|(_, l, _)| (l["metric"].clone(), l["reason"].clone()))
            .collect();
        let want: BTreeSet<(String, String)> = [
            ("crossings/getppid-k2u", "no_kernel_hooks"),
            ("time/tsc-khz-reported", "not_reported"),
        ]
        .iter()
        .map(|(m, r)| (m.to_string(), r.to_string()))
        .collect();
        assert_eq!(pairs, want);
        assert!(gone.iter().all(|(.., v)| *v == 1.0));
    }

    #[test]
    fn reasons_become_codes_from_the_fixed_list() {
        for (text, code) in [
            (
                "round trip only: kernel has no xperf hooks (prctl PR_XPERF answered EINVAL)",
                "no_kernel_hooks",
            ),
            (
                "perf_event_open: Permission denied (os error 13)",
                "not_permitted",
            ),
            ("unsupported: no XSAVE", "unsupported"),
            ("no valid samples", "no_samples"),
            ("/sys/class/dmi/id is not readable", "not_readable"),
            (
                "no \"tsc: Detected\" line in the kernel log",
                "not_reported",
            ),
            (
                "CPUID gives no TSC rate (neither leaf 0x15 nor 0x40000010)",
                "not_reported",
            ),
            ("something else at 0x1234 went wrong", "failed"),
        ] {
            let got = reason_code(text);
            assert_eq!(got, code, "{text}");
            assert!(REASON_CODES.contains(&got));
        }
    }

    #[test]
    fn the_machine_is_one_info_series_and_no_other_series_carries_it() {
        let all = series(&openmetrics(&characterized(), "xperf"));
        let info = find(&all, "xperf_machine_info", &[]);
        assert_eq!(info.len(), 1);
        let (_, labels, v) = info[0];
        assert_eq!(*v, 1.0);
        assert_eq!(labels["hypervisor"], "KVMKVMKVM");
        assert_eq!(labels["kernel"], "6.12.0");
        assert_eq!(labels["clocksource"], "tsc");
        // Quote and backslash survive; the newline is shown, not kept.
        assert_eq!(labels["cpu_model"], "Evil \"CPU\" \\ 9000\\nx");
        let machine_keys = ["hypervisor", "kernel", "clocksource", "cpu_model"];
        for (name, labels, _) in all.iter().filter(|(n, ..)| n != "xperf_machine_info") {
            for key in machine_keys {
                assert!(!labels.contains_key(key), "{name} carries {key}");
            }
        }
        let build = find(&all, "xperf_build_info", &[]);
        assert_eq!(build[0].1["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn a_kernel_upgrade_changes_no_series_but_machine_info() {
        let before = characterized();
        let mut after = before.clone();
        after.machine.as_mut().unwrap().kernel_release = "6.13.1".into();
        let keys = |r: &Report| -> BTreeSet<(String, Vec<(String, String)>)> {
            series(&openmetrics(r, "xperf"))
                .into_iter()
                .filter(|(n, ..)| n != "xperf_machine_info")
                .map(|(n, l, _)| (n, l.into_iter().collect()))
                .collect()
        };
        assert_eq!(keys(&before), keys(&after));
    }

    /// An exit row's family is a label of each of its series; a row
    /// without one (reports written before) has no such label.
    #[test]
    fn an_exits_family_is_one_of_its_labels() {
        let mut r = fixtures::report(Environment::LinuxVm, 2);
        r.host.tsc_khz = 1_000_000;
        let rt = Interval::from_rounds(&[&[1000, 1100, 1200]], 50);
        for (name, family) in [
            ("cpuid", Some(crate::ExitFamily::Instruction)),
            ("hlt", None),
        ] {
            let rt = Some(rt.clone());
            r.exits
                .push(ExitTiming::new(name, family, Status::Measured, (3, 3), rt));
        }
        let all = series(&openmetrics(&r, "xvmm"));
        let name = "xvmm_exit_duration_seconds";
        let cpuid = find(&all, name, &[("exit", "cpuid")]);
        let labelled = find(&all, name, &[("exit", "cpuid"), ("family", "instruction")]);
        assert!(!cpuid.is_empty());
        assert_eq!(labelled.len(), cpuid.len());
        let hlt = find(&all, name, &[("exit", "hlt")]);
        assert!(!hlt.is_empty());
        assert!(find(&all, name, &[("exit", "hlt"), ("family", "instruction")]).is_empty());
    }

    /// KVM's count of a row's exits a sample, where the report has it.
    #[test]
    fn an_exit_row_gives_kvms_count_where_the_report_has_it() {
        let mut r = fixtures::report(Environment::Microguest, 2);
        let rt = Interval::from_rounds(&[&[1000, 1100, 1200]], 50);
        let mut cpuid = ExitTiming::new("cpuid", None, Status::Measured, (3, 3), Some(rt.clone()));
        // KVM counted 670 exits in 660 runs, the stamps' phases 10.
        let count = |exits| crate::ExitCount {
            exits,
            iterations: 660,
        };
        cpuid.kvm_exits = Some(crate::KvmExits {
            row: count(670),
            stamps: count(10),
        });
        r.exits.push(cpuid);
        r.exits.push(ExitTiming::new(
            "hlt",
            None,
            Status::Measured,
            (3, 3),
            Some(rt),
        ));
        let all = series(&openmetrics(&r, "xvmm"));
        let counted = value(&all, "xvmm_exit_kvm_exits_per_sample", &[("exit", "cpuid")]);
        assert!(close(counted, 1.0), "{counted}");
        assert!(find(&all, "xvmm_exit_kvm_exits_per_sample", &[("exit", "hlt")]).is_empty());
    }

    #[test]
    fn a_vm_run_gives_its_crossings_exits_and_host_exits() {
        let mut r = fixtures::report(Environment::LinuxVm, 2);
        r.host.tsc_khz = 1_000_000;
        let exit = |name: &str, status: Status, round_trip: Option<Interval>| {
            ExitTiming::new(name, None, status, (3, 3), round_trip)
        };
        let rt = Interval::from_rounds(&[&[1000, 1100, 1200]], 50);
        r.exits.push(exit("cpuid", Status::Measured, Some(rt)));
        let no_xsave = Status::Unsupported {
            reason: "no XSAVE".into(),
        };
        r.exits.push(exit("xsetbv", no_xsave, None));
        r.host_exits.push(HostExit {
            reason: "io".into(),
            exit_to_entry: Stats::from_samples(&[70, 80, 90]),
        });
        let all = series(&openmetrics(&r, "xvmm"));
        let pf = &r.crossings[0];
        let u2k = &pf.u2k.as_ref().unwrap().corrected;
        let labels = [
            ("crossing", "pf"),
            ("interval", "u2k"),
            ("statistic", "median"),
        ];
        let got = value(&all, "xvmm_crossing_duration_seconds", &labels);
        // 1 GHz: a tick is a nanosecond.
        assert!(close(got, u2k.median as f64 * 1e-9), "{got}");
        let rt = [("crossing", "pf"), ("interval", "round_trip")];
        assert_eq!(value(&all, "xvmm_crossing_samples", &rt), 3.0);
        let cpuid = [("exit", "cpuid"), ("statistic", "median")];
        assert!(close(
            value(&all, "xvmm_exit_duration_seconds", &cpuid),
            1050e-9
        ));

        let io = [("reason", "io"), ("statistic", "min")];
        assert!(close(
            value(&all, "xvmm_host_exit_duration_seconds", &io),
            70e-9
        ));
        assert_eq!(
            value(&all, "xvmm_host_exit_samples", &[("reason", "io")]),
            3.0
        );
        // int-n was not measured, and xsetbv had no XSAVE: absent, and named.
        let gone: BTreeSet<(String, String)> = find(&all, "xvmm_metric_unavailable", &[])
            .iter()
            .map(|(_, l, _)| (l["metric"].clone(), l["reason"].clone()))
            .collect();
        for (m, code) in [
            ("crossings/int-n-u2k", "unsupported"),
            ("crossings/int-n-round_trip", "unsupported"),
            ("exits/xsetbv", "unsupported"),
        ] {
            assert!(
                gone.contains(&(m.into(), code.into())),
                "{m} not in {gone:?}"
            );
        }
        assert!(find(
            &all,
            "xvmm_crossing_duration_seconds",
            &[("crossing", "int-n")]
        )
        .is_empty());
        // Without a machine block the host facts describe the machine.
        let info = find(&all, "xvmm_machine_info", &[]);
        assert_eq!(info[0].1["cpu_model"], "Test CPU");
        assert_eq!(info[0].1["hypervisor"], "none");
    }

    #[test]
    fn names_are_sanitised_and_text_is_escaped() {
        assert_eq!(sanitize("tsc-skew cpu0-cpu1"), "tsc_skew_cpu0_cpu1");
        assert_eq!(sanitize("--"), "x");
        assert_eq!(sanitize("9lives"), "x_9lives");
        assert_eq!(sanitize("Pf.First"), "pf_first");
        assert_eq!(label_value("a\"b\\c\x1b"), "a\\\"b\\\\c\\\\x1b");
        assert_eq!(instructions_per_sample("ticks/128 pauses"), 128.0);
        assert_eq!(instructions_per_sample("ticks"), 1.0);
        assert_eq!(instructions_per_sample("ticks/0 pauses"), 1.0);
    }

    #[test]
    fn the_same_report_gives_the_same_families_each_once() {
        let r = characterized();
        let names = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| l.starts_with("# TYPE"))
                .map(str::to_string)
                .collect()
        };
        let a = openmetrics(&r, "xperf");
        assert_eq!(names(&a), names(&openmetrics(&r, "xperf")));
        // Each family once (Prometheus refuses a repeated one).
        let unique: BTreeSet<String> = names(&a).into_iter().collect();
        assert_eq!(unique.len(), names(&a).len());
    }
}
