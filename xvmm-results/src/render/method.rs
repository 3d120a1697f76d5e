//! How the numbers were taken, as text: the stamps and their cost, the
//! corrections, the TSC quantum, and under each crossing row what a reader
//! needs to judge it (clean samples, the median's confidence interval, the
//! rounds, the batched figure, whether its parts add up).

use crate::correction::{parts_problem, HooksCost, PairCost};
use crate::quantum::{self, FLAG_QUANTA};
use crate::sweep::StampSweep;
use crate::{Crossing, Interval, Report};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

/// A figure as a table cell, marked `*` when it is under 20 TSC quanta.
pub fn flagged(value: Option<u64>, quantum: Option<f64>) -> String {
    match value {
        Some(v) if quantum::is_coarse(v, quantum) => format!("{v}*"),
        Some(v) => v.to_string(),
        None => "-".into(),
    }
}

/// The quantum a report's figures are judged against.
pub fn quantum_of(report: &Report) -> Option<f64> {
    report.machine.as_ref().and_then(|m| m.tsc_quantum_ticks)
}

fn pair(name: &str, p: &PairCost) -> String {
    let rounds = if p.round_medians.len() > 1 {
        let list: Vec<String> = p.round_medians.iter().map(u64::to_string).collect();
        format!(", rounds {}", list.join(" "))
    } else {
        String::new()
    };
    format!(
        "{name} {} (min {}, p99 {}{rounds})",
        p.stats.median, p.stats.min, p.stats.p99
    )
}

/// The user pair's linearity sweep and what the corrections took from it.
pub fn sweep_line(s: &StampSweep) -> String {
    let lengths = s.fit.phases.iter().flat_map(|p| p.lengths.iter().copied());
    let (shortest, longest) = (lengths.clone().min(), lengths.max());
    let chosen = if s.intercept_used {
        "the intercept"
    } else {
        "the null pair"
    };
    format!(
        "user pair sweep ({} phases, imul chains of {} to {}): intercept {:.1} ticks (+-{:.1}, \
         scatter {:.1}), slope {:.3} per imul; null pair {}, bias {:+.1}, threshold {:.1}: \
         corrections use {chosen} ({})\n",
        s.fit.phases.len(),
        shortest.unwrap_or(0),
        longest.unwrap_or(0),
        s.fit.intercept,
        s.fit.standard_error,
        s.fit.scatter,
        s.fit.slope,
        s.null_median,
        s.bias,
        s.threshold,
        s.correction
    )
}

/// A crossing's round trip with the kernel stamps on and off, what the
/// hooks' own sequences add, and the warning where the two disagree.
fn hooks_line(h: &HooksCost) -> String {
    let keeps = if h.off_keeps.is_empty() {
        String::new()
    } else {
        format!(" (off still {})", visible(&h.off_keeps))
    };
    let pm = |e: Option<f64>| e.map_or(String::new(), |e| format!(" +-{e:.1}"));
    let predicted = h.predicted.map_or(String::new(), |p| {
        format!("; the hooks' sequences add {p:+}{}", pm(h.predicted_error))
    });
    let mut out = format!(
        "kernel stamps on vs off, {} round trip: {} vs {} ticks, {:+}{}{keeps}{predicted}\n",
        visible(&h.crossing),
        h.on_median,
        h.off_median,
        h.delta,
        pm(h.delta_error)
    );
    if let Some(w) = &h.warning {
        let _ = writeln!(out, "warning: {}", visible(w));
    }
    out
}

/// Header lines about the stamps: their instructions, their cost, the
/// corrections, the quantum, LFENCE and the PMU.
pub fn stamp_lines(report: &Report) -> String {
    let mut out = String::new();
    let m = &report.method;
    if let Some(k) = &m.kernel_stamps {
        let _ = writeln!(
            out,
            "kernel stamps `{}` (entry) .. `{}` (return), from {}",
            visible(&k.entry),
            visible(&k.exit),
            visible(&k.source)
        );
    }
    if let Some(costs) = &report.stamp_costs {
        let mut pairs = vec![pair("user pair", &costs.user_pair)];
        for (name, p) in [
            ("kernel pair", &costs.kernel_pair),
            ("inner kernel pair", &costs.kernel_pair_inner),
            ("VMM pair", &costs.vmm_pair),
            ("VMM reverse pair", &costs.vmm_pair_reverse),
        ] {
            if let Some(p) = p {
                pairs.push(pair(name, p));
            }
        }
        let _ = writeln!(out, "stamp costs (ticks): {}", pairs.join("; "));
        if let Some(sweep) = &costs.user_sweep {
            out += &sweep_line(sweep);
        }
        let c = &costs.corrections;
        if costs.kernel_pair.is_some() {
            let _ = writeln!(
                out,
                "corrections (ticks): u2k {}, k2u {}, in_kernel {}, round trip {}; without kernel stamps {}",
                c.u2k, c.k2u, c.in_kernel, c.round_trip, c.user_round_trip
            );
        } else {
            let _ = writeln!(out, "corrections (ticks): round trip {}", c.user_round_trip);
        }
        if let Some(e) = &costs.exit_corrections {
            let _ = writeln!(
                out,
                "exit corrections (ticks): round trip {} (in the hypervisor) or {} (via the VMM) = guest->VMM {} + in VMM {} + VMM->guest {}",
                e.round_trip, e.round_trip_via_vmm, e.guest_to_vmm, e.in_vmm, e.vmm_to_guest
            );
        }
        for h in &costs.hooks {
            out += &hooks_line(h);
        }
    }
    if let Some(machine) = &report.machine {
        if let Some(q) = machine.tsc_quantum_ticks {
            let _ = writeln!(
                out,
                "TSC quantum {q:.2} ticks: figures under {FLAG_QUANTA:.0} quanta ({:.0} ticks) are marked *",
                FLAG_QUANTA * q
            );
        }
        if let Some(w) = machine.lfence.warning() {
            let _ = writeln!(out, "warning: {}", visible(&w));
        }
        if !machine.pmu.is_empty() {
            let _ = writeln!(out, "{}", visible(&machine.pmu));
        }
    }
    out
}

fn median(i: &Option<Interval>) -> String {
    i.as_ref()
        .filter(|i| i.corrected.count > 0)
        .map_or_else(|| "-".into(), |i| i.corrected.median.to_string())
}

/// What a reader needs under a crossing's row, one line each.
pub fn crossing_notes(c: &Crossing, quantum: Option<f64>) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(clean) = &c.clean {
        notes.push(format!(
            "clean samples (no interrupt in the window): {} of {} valid; u2k med {}, k2u med {}, rtrip med {}",
            clean.samples,
            c.samples_valid,
            median(&clean.u2k),
            median(&clean.k2u),
            median(&clean.round_trip)
        ));
    }
    if let Some(rt) = c.round_trip.as_ref().filter(|i| i.corrected.count > 0) {
        let mut text = String::new();
        if let Some(ci) = rt.median_ci {
            let _ = write!(text, "rtrip median 95% CI {}..{}", ci.low, ci.high);
        }
        if rt.rounds.len() > 1 {
            let list: Vec<String> = rt.rounds.iter().map(u64::to_string).collect();
            let spread =
                rt.rounds.iter().max().unwrap_or(&0) - rt.rounds.iter().min().unwrap_or(&0);
            let sep = if text.is_empty() { "" } else { "; " };
            let _ = write!(
                text,
                "{sep}per-round medians {} (spread {spread})",
                list.join(" ")
            );
        }
        if !text.is_empty() {
            notes.push(text);
        }
    }
    if let Some(b) = &c.batched {
        notes.push(format!(
            "batched: {} crossings per stamp pair, {} ticks per crossing (median, {} batches)",
            b.per_batch, b.per_crossing.median, b.per_crossing.count
        ));
        if !b.kernel_keeps.is_empty() {
            notes.push(format!("batched, left in: {}", visible(&b.kernel_keeps)));
        }
    } else if c.round_trip.as_ref().is_some_and(|rt| {
        rt.corrected.count > 0 && quantum::is_coarse(rt.corrected.median, quantum)
    }) {
        notes.push("round trip under 20 TSC quanta and no batched figure for this crossing".into());
    }
    if let Some(cycles) = c.cycles.as_ref().filter(|s| s.count > 0) {
        notes.push(format!(
            "core cycles (PMU): rtrip median {} (raw, min {}, {} samples)",
            cycles.median, cycles.min, cycles.count
        ));
    }
    if let Some(problem) = parts_problem(c) {
        notes.push(visible(&problem).into_owned());
    }
    notes
}

/// Where each crossing's kernel stamps sit, one line each.
pub fn stamp_point_lines(report: &Report) -> String {
    let mut out = String::new();
    if report.method.stamp_points.is_empty() {
        return out;
    }
    out += "kernel stamp points:\n";
    for p in &report.method.stamp_points {
        let _ = writeln!(
            out,
            "- {}: entry {} (after: {}); return {}",
            visible(&p.crossing),
            visible(&p.entry),
            visible(&p.entry_depth),
            visible(&p.exit)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Batched;

    /// A report whose getppid hooks on - off is `delta` ticks where the
    /// hooks' own sequences add `predicted`, on a 24.5-tick counter.
    pub(crate) fn hooks_report(delta: u64, predicted: u64) -> Report {
        use crate::correction::{HooksCost, PairCost, StampCosts};
        use crate::{Environment, HostFacts, Machine, Method};
        let p = |m: u64| PairCost::from_rounds("a", "b", &[vec![m]]);
        let mut costs = StampCosts::new(p(49), Some((p(49), p(73))), None);
        let hooks = HooksCost::new("getppid", &[1000 + delta; 9], &[1000; 9], "")
            .with_prediction(&[vec![100 + predicted; 9]], &[vec![100; 9]])
            .reconcile(Some(24.5));
        costs.hooks.push(hooks);
        let mut r = Report::new(
            "t".into(),
            Environment::BareMetal,
            HostFacts::default(),
            Method::standard(0, 9),
        );
        r.stamp_costs = Some(costs);
        r.machine = Some(Machine {
            tsc_quantum_ticks: Some(24.5),
            ..Machine::default()
        });
        r
    }

    /// Issue item 3: hooks on - off further from what the hooks' sequences
    /// add than the noise allows is a warning in the text and the JSON;
    /// within it (two quanta here) there is none.
    #[test]
    fn hooks_on_off_far_from_their_sequences_is_a_warning() {
        let far = hooks_report(613, 98);
        let text = crate::render::report(&far);
        assert!(
            text.contains("warning: getppid: hooks on - off 613 ticks"),
            "{text}"
        );
        let json = far.to_json_pretty();
        assert!(json.contains("getppid: hooks on - off 613 ticks"), "{json}");
        let near = hooks_report(613, 600);
        let text = crate::render::report(&near);
        assert!(!text.contains("warning: getppid"), "{text}");
        assert!(!near.to_json_pretty().contains("hooks on - off 613"));
    }

    #[test]
    fn a_batched_figure_says_what_it_leaves_in() {
        let mut c = Crossing::from_round_trips("getppid", 3, &[400, 410, 420], 70, "x".into());
        c.batched = Some(Batched::new(100, 70, &[15_070]));
        let notes = crossing_notes(&c, Some(24.45));
        assert!(
            notes.contains(&"batched: 100 crossings per stamp pair, 150 ticks per crossing (median, 1 batches)".to_string()),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.starts_with("batched, left in")));
        c.batched = c.batched.map(|b| b.keeping("the boot-time \x1b[0mstamp"));
        let notes = crossing_notes(&c, Some(24.45));
        assert!(
            notes.contains(&"batched, left in: the boot-time \\x1b[0mstamp".to_string()),
            "{notes:?}"
        );
    }
}
