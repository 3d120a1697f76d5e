//! A report as OpenMetrics text, for Prometheus through node_exporter's
//! textfile collector: every figure a gauge, encoded by `prometheus-client`
//! (the Prometheus project's Rust client), not by hand.
//!
//! Names are `<prefix>_<what>_<unit>`: `xperf_exits_cpuid_ticks` with a
//! `quantile` label (0, 0.5, 0.99, 1: min, median, p99, max) beside
//! `_mean_ticks`, `_stddev_ticks` and `_samples`, and `<prefix>_tsc_hz` to
//! turn ticks into seconds. Every series carries the machine as constant
//! labels (hypervisor, clocksource, kernel, cpu_model: a handful of values
//! per fleet); no label takes a value that grows without bound (no run id,
//! no time, no sample). A figure that could not be taken is absent, and
//! `<prefix>_metric_unavailable{metric,reason}` is 1 in its place, so a
//! dashboard tells "not measured" from zero.
//!
//! The client writes label values verbatim, so [`label_value`] escapes them
//! here (a report is untrusted: a CPU model or a reason may hold a quote).

use crate::characterize::Metric;
use crate::escape::visible;
use crate::{Crossing, ExitTiming, HostExit, Interval, Report, Stats, Status};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

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

/// Longest `reason` label value; the JSON keeps the whole text.
pub const MAX_REASON: usize = 160;

/// Reads one figure of a [`Stats`].
type Pick = fn(&Stats) -> u64;

/// The quantile label values and what they stand for.
const QUANTILES: [(&str, Pick); 4] = [
    ("0", |s| s.min),
    ("0.5", |s| s.median),
    ("0.99", |s| s.p99),
    ("1", |s| s.max),
];

/// The intervals of a crossing, as the `interval` label names them.
const INTERVALS: [&str; 4] = ["u2k", "k2u", "in_kernel", "round_trip"];

/// Gauge families by name, filled first and registered in name order (so
/// the same report always gives the same text).
struct Families {
    families: BTreeMap<(String, Option<String>), (String, Gauges)>,
}

impl Families {
    fn new() -> Families {
        Families {
            families: BTreeMap::new(),
        }
    }

    /// Sets `name{labels}` (in `unit`, when it has one) to `value`.
    fn set(&mut self, name: &str, unit: Option<&str>, help: &str, labels: Labels, value: f64) {
        let key = (name.to_string(), unit.map(str::to_string));
        let (_, family) = self
            .families
            .entry(key)
            .or_insert_with(|| (help.to_string(), Gauges::default()));
        family.get_or_create(&labels).set(value);
    }

    /// Statistics as a quantile family plus mean, stddev and sample count.
    fn stats(
        &mut self,
        name: &str,
        unit: &str,
        scale: f64,
        help: &str,
        labels: &Labels,
        s: &Stats,
    ) {
        for (q, pick) in QUANTILES {
            let mut l = labels.clone();
            l.push(("quantile".into(), q.into()));
            self.set(name, Some(unit), help, l, pick(s) as f64 * scale);
        }
        let mean = format!("{name}_mean");
        self.set(&mean, Some(unit), help, labels.clone(), s.mean * scale);
        let stddev = format!("{name}_stddev");
        self.set(&stddev, Some(unit), help, labels.clone(), s.stddev * scale);
        let samples = format!("{name}_samples");
        self.set(&samples, None, help, labels.clone(), s.count as f64);
    }

    /// One `metric_unavailable` series for `metric`, and why.
    fn unavailable(&mut self, metric: &str, reason: &str) {
        let labels = vec![
            ("metric".to_string(), label_value(metric)),
            ("reason".to_string(), label_value(&clip(reason, MAX_REASON))),
        ];
        self.set(
            "metric_unavailable",
            None,
            "1 for each metric that could not be taken (reason says why); absent metrics are not zero",
            labels,
            1.0,
        );
    }

    fn encode(self, prefix: &str, constant: Labels) -> String {
        let labels = constant
            .into_iter()
            .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v)));
        let mut registry = Registry::with_prefix_and_labels(prefix, labels);
        for ((name, unit), (help, family)) in self.families {
            match unit {
                Some(u) => registry.register_with_unit(name, help, Unit::Other(u), family),
                None => registry.register(name, help, family),
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
    run_facts(&mut f, report);
    match &report.characterize {
        Some(c) => c
            .metrics
            .iter()
            .for_each(|m| characterize_metric(&mut f, m)),
        None => report.crossings.iter().for_each(|c| crossing(&mut f, c)),
    }
    report.exits.iter().for_each(|e| exit(&mut f, e));
    report.host_exits.iter().for_each(|e| host_exit(&mut f, e));
    f.encode(&sanitize(prefix), machine_labels(report))
}

/// The machine, as constant labels on every series.
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

/// The TSC rate and, for a characterisation, when it ran and for how long.
fn run_facts(f: &mut Families, report: &Report) {
    let khz = report
        .machine
        .as_ref()
        .map(|m| m.tsc_khz)
        .filter(|&k| k > 0)
        .unwrap_or(report.host.tsc_khz);
    if khz > 0 {
        let help = "TSC rate the ticks are counted at (divide a _ticks figure by it for seconds)";
        f.set("tsc_hz", None, help, Vec::new(), khz as f64 * 1000.0);
    } else {
        f.unavailable("tsc_hz", "the TSC rate is not known");
    }
    if let Some(c) = &report.characterize {
        let help = "when the characterisation started, seconds since the Unix epoch";
        f.set(
            "run_started",
            Some("seconds"),
            help,
            Vec::new(),
            c.started_unix as f64,
        );
        let help = "how long the characterisation took";
        f.set("run_duration", Some("seconds"), help, Vec::new(), c.seconds);
    }
}

/// The family name and unit of a characterisation metric, the scale from
/// its JSON unit to the family's, and the labels its name carries.
fn metric_family(m: &Metric) -> (String, String, f64, Labels) {
    // "tsc-skew cpu0-cpu3": one family, the pair as a label (bounded by the
    // machine's CPUs).
    let (base, labels) = match m.name.split_once(' ') {
        Some((base, pair)) => (base, vec![("cpus".to_string(), label_value(pair))]),
        None => (m.name.as_str(), Vec::new()),
    };
    let (unit, scale) = match m.unit.as_str() {
        "kHz" => ("hertz".to_string(), 1000.0),
        u if u.starts_with("ticks") => ("ticks".to_string(), 1.0),
        "" => ("value".to_string(), 1.0),
        u => (sanitize(u), 1.0),
    };
    // A rate's name says "khz"; its unit now says hertz.
    let base = base.replace("khz", "rate");
    (
        sanitize(&format!("{}_{base}", m.group)),
        unit,
        scale,
        labels,
    )
}

fn characterize_metric(f: &mut Families, m: &Metric) {
    let (name, unit, scale, labels) = metric_family(m);
    let help = match m.unit.as_str() {
        u if u.starts_with("ticks/") => format!("xperf characterize {} ({u})", m.name),
        _ => format!("xperf characterize {}", m.name),
    };
    let help = help_text(&help);
    if let Some(s) = m.measured() {
        f.stats(&name, &unit, scale, &help, &labels, s);
    } else if let Some(n) = m.number.filter(|n| n.is_finite()) {
        f.set(&name, Some(&unit), &help, labels, n * scale);
    } else if let Some(reason) = m.reason.as_deref() {
        f.unavailable(&name, reason);
    }
    // A fact with only words (the hypervisor's name, the mitigations) is
    // not a figure: the JSON and the constant labels carry it.
}

fn crossing(f: &mut Families, c: &Crossing) {
    let intervals: [&Option<Interval>; 4] = [&c.u2k, &c.k2u, &c.in_kernel, &c.round_trip];
    let help = "a user<->kernel crossing, per interval, null overhead subtracted";
    for (name, interval) in INTERVALS.iter().zip(intervals) {
        let metric = format!("crossing_{}_{name}", sanitize(&c.name));
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
                f.stats("crossing", "ticks", 1.0, help, &labels, s);
            }
            None => {
                let why = c.status.why_not();
                let reason = why.as_deref().unwrap_or("no valid samples");
                f.unavailable(&metric, reason);
            }
        }
    }
}

fn exit(f: &mut Families, e: &ExitTiming) {
    let help = "a VM exit's round trip seen from the guest, null overhead subtracted";
    match e
        .round_trip
        .as_ref()
        .map(|i| &i.corrected)
        .filter(|s| s.count > 0)
    {
        Some(s) => {
            let labels = vec![("exit".to_string(), label_value(&e.name))];
            f.stats("exit_round_trip", "ticks", 1.0, help, &labels, s);
        }
        None => {
            let reason = match &e.status {
                Status::Measured => "no valid samples".to_string(),
                other => other.why_not().unwrap_or_default(),
            };
            f.unavailable(&format!("exit_{}", sanitize(&e.name)), &reason);
        }
    }
}

fn host_exit(f: &mut Families, e: &HostExit) {
    if e.exit_to_entry.count == 0 {
        return;
    }
    let help = "host time from kvm_exit to kvm_entry by exit reason (host ticks)";
    let labels = vec![("reason".to_string(), label_value(&e.reason))];
    f.stats("host_exit", "ticks", 1.0, help, &labels, &e.exit_to_entry);
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

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
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
            Metric::from_samples("time", "tsc-skew cpu0-cpu3", "ticks", &[5, 7]),
            Metric::from_samples("exits", "pause", "ticks/128 pauses", &[900]),
            Metric::fact("machine", "steal", "1.00 %").with_number(0.01, "ratio"),
            Metric::fact("hypervisor", "virt", "kvm"),
            Metric::missing("crossings", "getppid-u2k", "no \"hooks\"\nhere"),
        ];
        r.characterize = Some(c);
        r
    }

    #[test]
    fn every_statistic_is_a_gauge_equal_to_the_report() {
        let r = characterized();
        let text = openmetrics(&r, "xperf");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let all = series(&text);
        let cpuid = r.characterize.as_ref().unwrap().metric("cpuid").unwrap();
        let s = cpuid.measured().unwrap();
        for (q, want) in [
            ("0", s.min),
            ("0.5", s.median),
            ("0.99", s.p99),
            ("1", s.max),
        ] {
            let got = value(&all, "xperf_exits_cpuid_ticks", &[("quantile", q)]);
            assert_eq!(got, want as f64, "quantile {q}");
        }
        assert_eq!(value(&all, "xperf_exits_cpuid_mean_ticks", &[]), s.mean);
        assert_eq!(value(&all, "xperf_exits_cpuid_stddev_ticks", &[]), s.stddev);
        assert_eq!(value(&all, "xperf_exits_cpuid_samples", &[]), 4.0);
        // kHz becomes hertz, and its name says rate.
        let hz = value(
            &all,
            "xperf_time_tsc_rate_measured_hertz",
            &[("quantile", "0.5")],
        );
        assert!(hz == 1_999_999_000.0 || hz == 2_000_001_000.0, "{hz}");
        assert_eq!(value(&all, "xperf_tsc_hz", &[]), 2e9);
        let skew = value(
            &all,
            "xperf_time_tsc_skew_ticks",
            &[("cpus", "cpu0-cpu3"), ("quantile", "1")],
        );
        assert_eq!(skew, 7.0);
        assert_eq!(
            value(&all, "xperf_exits_pause_ticks", &[("quantile", "0.5")]),
            900.0
        );
        assert_eq!(value(&all, "xperf_machine_steal_ratio", &[]), 0.01);
        assert_eq!(value(&all, "xperf_run_started_seconds", &[]), 1.7e9);
        assert_eq!(value(&all, "xperf_run_duration_seconds", &[]), 1.5);
        // A fact in words is no series; the crossings are not repeated
        // from the report's own list (the characterisation has them).
        assert!(all
            .iter()
            .all(|(n, ..)| !n.contains("virt") && !n.contains("crossing_pf")));
    }

    #[test]
    fn a_missing_metric_is_named_unavailable_not_zero() {
        let all = series(&openmetrics(&characterized(), "xperf"));
        let gone = find(&all, "xperf_metric_unavailable", &[]);
        assert_eq!(gone.len(), 1, "{gone:?}");
        let (_, labels, v) = gone[0];
        assert_eq!(*v, 1.0);
        assert_eq!(labels["metric"], "crossings_getppid_u2k");
        // The newline is shown as an escape (one printable line), then the
        // exposition's own escaping brings it back as text.
        assert_eq!(labels["reason"], "no \"hooks\"\\nhere");
        assert!(all
            .iter()
            .all(|(n, ..)| !n.starts_with("xperf_crossings_getppid_u2k")));
    }

    #[test]
    fn the_machine_labels_every_series_and_no_label_is_unbounded() {
        let all = series(&openmetrics(&characterized(), "xperf"));
        let allowed: BTreeSet<&str> = [
            "hypervisor",
            "clocksource",
            "kernel",
            "cpu_model",
            "quantile",
            "cpus",
            "metric",
            "reason",
            "crossing",
            "interval",
            "exit",
        ]
        .into();
        for (name, labels, _) in &all {
            assert_eq!(labels["hypervisor"], "KVMKVMKVM", "{name}");
            assert_eq!(labels["kernel"], "6.12.0", "{name}");
            assert_eq!(labels["clocksource"], "tsc", "{name}");
            // Quote and backslash survive; the newline is shown, not kept.
            assert_eq!(labels["cpu_model"], "Evil \"CPU\" \\ 9000\\nx", "{name}");
            for key in labels.keys() {
                assert!(allowed.contains(key.as_str()), "{name}: label {key}");
            }
        }
    }

    #[test]
    fn a_vm_run_gives_its_crossings_exits_and_host_exits() {
        let mut r = fixtures::report(Environment::LinuxVm, 2);
        let exit = |name: &str, status: Status, round_trip: Option<Interval>| ExitTiming {
            name: name.into(),
            status,
            samples_requested: 3,
            samples_valid: 3,
            round_trip,
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
            split: None,
            traced: None,
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
        let labels = [("crossing", "pf"), ("interval", "u2k"), ("quantile", "0.5")];
        assert_eq!(
            value(&all, "xvmm_crossing_ticks", &labels),
            u2k.median as f64
        );
        let rt = [("crossing", "pf"), ("interval", "round_trip")];
        assert_eq!(value(&all, "xvmm_crossing_samples", &rt), 3.0);
        assert_eq!(
            value(
                &all,
                "xvmm_exit_round_trip_ticks",
                &[("exit", "cpuid"), ("quantile", "0.5")]
            ),
            1050.0
        );
        assert_eq!(
            value(
                &all,
                "xvmm_host_exit_ticks",
                &[("reason", "io"), ("quantile", "0")]
            ),
            70.0
        );
        // int-n was not measured, and xsetbv had no XSAVE: absent, and named.
        let gone: BTreeSet<String> = find(&all, "xvmm_metric_unavailable", &[])
            .iter()
            .map(|(_, l, _)| l["metric"].clone())
            .collect();
        for m in [
            "crossing_int_n_u2k",
            "crossing_int_n_round_trip",
            "exit_xsetbv",
        ] {
            assert!(gone.contains(m), "{m} not in {gone:?}");
        }
        assert!(find(&all, "xvmm_crossing_ticks", &[("crossing", "int-n")]).is_empty());
        // Without a machine block the host facts label the series.
        assert_eq!(all[0].1["cpu_model"], "Test CPU");
        assert_eq!(all[0].1["hypervisor"], "none");
    }

    #[test]
    fn names_are_sanitised_and_text_is_escaped() {
        assert_eq!(sanitize("tsc-skew cpu0-cpu1"), "tsc_skew_cpu0_cpu1");
        assert_eq!(sanitize("--"), "x");
        assert_eq!(sanitize("9lives"), "x_9lives");
        assert_eq!(sanitize("Pf.First"), "pf_first");
        assert_eq!(label_value("a\"b\\c\x1b"), "a\\\"b\\\\c\\\\x1b");
        assert_eq!(clip("abcdef", 3), "abc...");
        assert_eq!(clip("abc", 3), "abc");
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
