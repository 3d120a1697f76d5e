//! The `characterize` block of a report: what `xperf characterize` found out
//! about the machine it ran on (hypervisor, clocks, exits a tenant can see,
//! crossings, the machine itself), one entry per metric.
//!
//! Every metric carries statistics, a value (a fact, or what the statistics
//! mean), or both; a metric that could not be taken carries the `reason`
//! instead. A reader never has to guess why a figure is missing.

use crate::Stats;
use serde::{Deserialize, Serialize};

/// Metric groups, in the order tables and reports show them.
pub const GROUPS: [&str; 6] = [
    "hypervisor",
    "time",
    "exits",
    "crossings",
    "interrupts",
    "machine",
];

/// What `xperf characterize` measured and read on one machine.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Characterization {
    /// When the run started, seconds since the Unix epoch (for trends).
    pub started_unix: u64,
    /// How long the run took, seconds.
    pub seconds: f64,
    /// The machine's host name (`uname -n`), to tell machines apart.
    #[serde(default)]
    pub hostname: String,
    /// The cluster's name for the node (`--node-name`, a DaemonSet's
    /// `spec.nodeName`): a container's host name is its pod's, not the node's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Whether it ran as root (root adds the kernel log's figures).
    #[serde(default)]
    pub privileged: bool,
    pub metrics: Vec<Metric>,
}

/// One metric: statistics (TSC ticks unless `unit` says otherwise), a value,
/// or the reason it could not be taken.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Metric {
    /// Stable identifier, e.g. "cpuid", "clock_gettime-vdso", "tsc-skew cpu0-cpu1".
    pub name: String,
    /// One of [`GROUPS`].
    pub group: String,
    /// Unit of `stats`: "ticks" (null overhead subtracted), "kHz", "ticks/pause"...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// A fact ("KVMKVMKVM"), or what the statistics mean ("does not trap").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Why there are no statistics and no value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A fact's figure in `unit`, for machines (the OpenMetrics output):
    /// the steal ratio, a rate in kHz. `value` says it in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<f64>,
}

impl Metric {
    /// A fact.
    pub fn fact(group: &str, name: &str, value: impl Into<String>) -> Metric {
        Metric {
            name: name.into(),
            group: group.into(),
            value: Some(value.into()),
            ..Metric::default()
        }
    }

    /// A metric that could not be taken, and why.
    pub fn missing(group: &str, name: &str, reason: impl Into<String>) -> Metric {
        Metric {
            name: name.into(),
            group: group.into(),
            reason: Some(reason.into()),
            ..Metric::default()
        }
    }

    /// Statistics of `samples` in `unit`; no samples is a missing metric.
    pub fn from_samples(group: &str, name: &str, unit: &str, samples: &[u64]) -> Metric {
        if samples.is_empty() {
            return Metric::missing(group, name, "no samples were taken");
        }
        Metric::from_stats(group, name, unit, Stats::from_samples(samples))
    }

    /// Statistics already computed (a crossing's interval).
    pub fn from_stats(group: &str, name: &str, unit: &str, stats: Stats) -> Metric {
        if stats.count == 0 {
            return Metric::missing(group, name, "no valid samples");
        }
        Metric {
            name: name.into(),
            group: group.into(),
            unit: unit.into(),
            stats: Some(stats),
            ..Metric::default()
        }
    }

    /// The same metric with `value` saying what it means.
    pub fn with_value(mut self, value: impl Into<String>) -> Metric {
        self.value = Some(value.into());
        self
    }

    /// The same fact with its figure, `number` in `unit`.
    pub fn with_number(mut self, number: f64, unit: &str) -> Metric {
        self.number = Some(number);
        self.unit = unit.into();
        self
    }

    /// Statistics with at least one sample.
    pub fn measured(&self) -> Option<&Stats> {
        self.stats.as_ref().filter(|s| s.count > 0)
    }

    /// Whether the metric holds something: statistics, a value or a reason.
    pub fn is_filled(&self) -> bool {
        self.measured().is_some()
            || self.value.as_deref().is_some_and(|v| !v.is_empty())
            || self.reason.as_deref().is_some_and(|r| !r.is_empty())
    }
}

impl Characterization {
    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// Names of metrics that hold nothing (a producer's bug).
    pub fn unfilled(&self) -> Vec<&str> {
        self.metrics
            .iter()
            .filter(|m| !m.is_filled())
            .map(|m| m.name.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_fill_stats_value_or_reason() {
        let m = Metric::from_samples("exits", "cpuid", "ticks", &[10, 20, 30]);
        assert_eq!(m.measured().map(|s| s.median), Some(20));
        assert!(m.reason.is_none() && m.is_filled());
        let empty = Metric::from_samples("exits", "cpuid", "ticks", &[]);
        assert!(empty.stats.is_none());
        assert_eq!(empty.reason.as_deref(), Some("no samples were taken"));
        let zero = Metric::from_stats("time", "x", "ticks", Stats::default());
        assert!(zero.reason.is_some() && zero.is_filled());
        assert!(Metric::fact("machine", "cpu", "EPYC").is_filled());
        let hollow = Metric {
            name: "hollow".into(),
            value: Some(String::new()),
            ..Metric::default()
        };
        let c = Characterization {
            metrics: vec![m, hollow],
            ..Characterization::default()
        };
        assert_eq!(c.unfilled(), ["hollow"]);
        assert_eq!(c.metric("cpuid").map(|m| m.name.as_str()), Some("cpuid"));
        assert_eq!(c.metric("hollow").map(|m| m.name.as_str()), Some("hollow"));
        assert!(c.metric("pause").is_none());
        // One sample is measured; none is not.
        let one = Metric::from_stats(
            "time",
            "one",
            "ticks",
            Stats {
                count: 1,
                ..Stats::default()
            },
        );
        assert_eq!(one.measured().map(|s| s.count), Some(1));
        let none = Metric {
            stats: Some(Stats::default()),
            ..Metric::default()
        };
        assert!(none.measured().is_none() && !none.is_filled());
    }

    #[test]
    fn json_leaves_out_what_a_metric_does_not_have() {
        let m = Metric::fact("machine", "kpti", "off");
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#"{"name":"kpti","group":"machine","value":"off"}"#);
        let back: Metric = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
    }
}
