//! The `characterize` block as text: one row per metric, grouped, with the
//! statistics, and under it what the figures mean or why there are none.

use crate::characterize::{Characterization, Metric, GROUPS};
use crate::document::Table;
use std::collections::HashMap;
use std::fmt::Write as _;
use xvmm_host::escape::visible;

/// N of a metric's unit "ticks/N things" (a sample spans N pauses or
/// wake-ups), 1 for plain "ticks"; `None` for any other unit.
pub fn ticks_per(unit: &str) -> Option<f64> {
    if unit == "ticks" {
        return Some(1.0);
    }
    unit.strip_prefix("ticks/")?
        .split_whitespace()
        .next()?
        .parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .map(f64::from)
}

/// Metrics by group: the groups of [`GROUPS`] first, in that order, then any
/// other group in the order it appears. Linear in the number of metrics (a
/// report is untrusted input: its size is not ours to pick).
pub fn by_group(c: &Characterization) -> Vec<(&str, Vec<&Metric>)> {
    let mut groups: Vec<(&str, Vec<&Metric>)> = GROUPS.iter().map(|g| (*g, Vec::new())).collect();
    let mut index: HashMap<&str, usize> = GROUPS.iter().enumerate().map(|(i, g)| (*g, i)).collect();
    for m in &c.metrics {
        let i = *index.entry(m.group.as_str()).or_insert_with(|| {
            groups.push((m.group.as_str(), Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(m);
    }
    groups.retain(|(_, metrics)| !metrics.is_empty());
    groups
}

/// A measured metric is a row of figures with its meaning under it; a fact
/// or a reason sits beside the name.
fn metric_rows(t: &mut Table, m: &Metric) {
    let name = format!("  {}", visible(&m.name));
    let Some(s) = m.measured() else {
        let text = match (&m.value, &m.reason) {
            (Some(v), _) => visible(v).into_owned(),
            (None, Some(r)) => format!("not measured: {}", visible(r)),
            (None, None) => "-".into(),
        };
        t.labelled(name, text);
        return;
    };
    t.row(vec![
        name,
        s.count.to_string(),
        s.min.to_string(),
        s.median.to_string(),
        s.p99.to_string(),
        format!("{:.0}", s.mean),
        visible(&m.unit).into_owned(),
    ]);
    if let Some(v) = &m.value {
        t.note(visible(v).into_owned());
    }
}

/// The characterisation as a table, grouped by what the metrics are about.
pub fn characterize_table(c: &Characterization) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "characterization of {} ({:.1} s{}): timings in TSC ticks with the null overhead subtracted",
        if c.hostname.is_empty() {
            "this machine".into()
        } else {
            visible(&c.hostname).into_owned()
        },
        c.seconds,
        if c.privileged { ", as root" } else { ", not root" }
    );
    out + &characterize_of(c).render()
}

/// The characterisation's metrics by group, for every backend: a group's
/// name, then a row per metric with its value or why it is missing below.
pub fn characterize_of(c: &Characterization) -> Table {
    let mut t = Table::new(&["metric", "n", "min", "median", "p99", "mean", "unit"]);
    for (group, metrics) in by_group(c) {
        t.row(vec![format!("{}:", visible(group))]);
        for m in metrics {
            metric_rows(&mut t, m);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_carry_stats_values_and_reasons_in_group_order() {
        let c = Characterization {
            hostname: "box\x1b[2J".into(),
            seconds: 1.25,
            metrics: vec![
                Metric::fact("machine", "kpti", "off"),
                Metric::from_samples("exits", "cpuid", "ticks", &[100, 200, 300])
                    .with_value("exits to the hypervisor"),
                Metric::missing("hypervisor", "dmi", "no /sys/class/dmi/id"),
                Metric::fact("odd-group", "x", "y\nforged"),
            ],
            ..Characterization::default()
        };
        let text = characterize_table(&c);
        assert!(text.starts_with("characterization of box\\x1b[2J (1.2 s, not root)"));
        let pos = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle} missing in\n{text}"))
        };
        assert!(pos("hypervisor:") < pos("exits:") && pos("exits:") < pos("machine:"));
        assert!(pos("machine:") < pos("odd-group:"));
        let cpuid: Vec<&str> = text
            .lines()
            .find(|l| l.trim_start().starts_with("cpuid"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(cpuid, ["cpuid", "3", "100", "200", "300", "200", "ticks"]);
        let dmi = text
            .lines()
            .find(|l| l.trim_start().starts_with("dmi"))
            .unwrap();
        assert!(
            dmi.ends_with("  not measured: no /sys/class/dmi/id"),
            "{text}"
        );
        assert!(text.contains("exits to the hypervisor"));
        assert!(text.contains("y\\nforged") && !text.contains('\x1b'));
    }
}
