//! The instrumentation tables: `xperf probes` rows of a report, and the
//! VM/bare-metal ratio per mode of a comparison.

use super::method::quantum_of;
use super::status_text;
use crate::document::Table;
use crate::probes::{mode, vm_explanation, Probe, ProbeComparisonRow};
use crate::{Report, Status};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// The measured row of `mode` on `crossing`, if there is one.
fn row_of<'a>(probes: &'a [Probe], mode_name: &str, crossing: &str) -> Option<&'a Probe> {
    probes
        .iter()
        .find(|p| p.mode == mode_name && p.crossing == crossing)
        .filter(|p| p.added_median().is_some())
}

/// The measured added median (per hit) of `mode` on `crossing`.
fn added_of(probes: &[Probe], mode_name: &str, crossing: &str) -> Option<i64> {
    row_of(probes, mode_name, crossing).and_then(Probe::added_median)
}

/// Signed ticks, `*` when under 20 TSC quanta either way.
fn flagged(value: Option<i64>, quantum: Option<f64>) -> String {
    match value {
        Some(v) if crate::quantum::is_coarse(v.unsigned_abs(), quantum) => format!("{v}*"),
        Some(v) => v.to_string(),
        None => "-".into(),
    }
}

fn cell(value: Option<i64>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

fn nanoseconds(ticks: Option<i64>, tsc_khz: u64) -> String {
    match ticks {
        Some(t) if tsc_khz > 0 => format!("{:.0}", t as f64 * 1e6 / tsc_khz as f64),
        _ => "-".into(),
    }
}

fn hits_cell(p: &Probe) -> String {
    if p.hits_expected == 0 {
        format!("{} (control)", p.hits)
    } else if p.hits == p.hits_expected {
        format!("{}/{} ok", p.hits, p.hits_expected)
    } else {
        format!("{}/{} BAD", p.hits, p.hits_expected)
    }
}

/// Notes under a measured row: what was placed, the tracepoint's own cost
/// beside the slow-path shift, the row's own caveats.
fn row_notes(p: &Probe, probes: &[Probe]) -> Vec<String> {
    let mut notes = Vec::new();
    if !p.probe.is_empty() {
        notes.push(visible(&p.probe).into_owned());
    }
    if p.mode == mode::TRACEPOINT {
        // The control's shift is per sample (it has no hits): compare per
        // sample, then give the tracepoint's own part per hit again.
        let shift = added_of(probes, mode::SYSCALL_SLOW_PATH, &p.crossing);
        if let (Some(all), Some(shift)) = (p.added_median(), shift) {
            let hits = p.hits_per_sample.max(1);
            let sample = i128::from(all) * i128::from(hits);
            let own = sample - i128::from(shift);
            notes.push(format!(
                "per sample ({hits} hit(s)) {sample}, of which the slow-path shift is {shift} and \
                 the tracepoint itself {own:+} ticks ({:+} per hit)",
                own / i128::from(hits)
            ));
        }
    }
    notes.extend(p.notes.iter().map(|n| visible(n).into_owned()));
    notes
}

/// The added median's 95 % interval, "low..high" (either may be negative).
fn ci_cell(p: &Probe) -> String {
    p.added_median_ci
        .as_ref()
        .map_or_else(|| "-".into(), |ci| format!("{}..{}", ci.low, ci.high))
}

/// One row per (mode, crossing) of a report's `probes`: hits found against
/// hits expected, ticks added per hit (median with its 95 % interval, p99,
/// ns; `*` under 20 TSC quanta), the ratio to the int3 kprobe on the same
/// crossing, and the no-probe median of the same rounds.
pub fn probes_table(report: &Report) -> String {
    let (probes, tsc_khz, quantum) = (&report.probes, report.host.tsc_khz, quantum_of(report));
    let mut t = Table::new(&[
        "mode",
        "crossing",
        "hits",
        "added med",
        "med 95% CI",
        "added p99",
        "added ns",
        "x int3",
        "base med",
    ]);
    for p in probes {
        let (name, crossing) = (visible(&p.mode), visible(&p.crossing));
        if p.status != Status::Measured {
            t.row(vec![name.into_owned(), crossing.into_owned()]);
            if let Some(text) = status_text(&p.status) {
                t.note(text);
            }
            continue;
        }
        let added = p.added_ticks.as_ref();
        let int3 = added_of(probes, mode::KPROBE_INT3, &p.crossing);
        let x_int3 = match (p.added_median(), int3) {
            (Some(a), Some(i)) if i > 0 => Some(a as f64 / i as f64),
            _ => None,
        };
        t.row(vec![
            name.into_owned(),
            crossing.into_owned(),
            hits_cell(p),
            flagged(added.map(|s| s.median), quantum),
            ci_cell(p),
            flagged(added.map(|s| s.p99), quantum),
            nanoseconds(added.map(|s| s.median), tsc_khz),
            ratio(x_int3),
            super::cell(p.baseline.as_ref().map(|s| s.median)),
        ]);
        for note in row_notes(p, probes) {
            t.note(note);
        }
    }
    let mut out = String::from(
        "instrumentation (TSC ticks added per hit: each probed round trip minus the median \
         of the no-probe round trips of its round; * under 20 TSC quanta)\n",
    );
    out += &t.render();
    out
}

/// VM against bare metal per mode: added ticks per hit on each side, the
/// ratio, and where the ratio comes from.
pub fn probe_comparison_table(rows: &[ProbeComparisonRow]) -> String {
    let mut t = Table::new(&["mode", "crossing", "VM added", "BM added", "x VM/BM"]);
    let mut modes = Vec::new();
    for r in rows {
        t.row(vec![
            visible(&r.mode).into_owned(),
            visible(&r.crossing).into_owned(),
            cell(r.vm_added_median),
            cell(r.bare_added_median),
            ratio(r.ratio),
        ]);
        if let Some(n) = &r.note {
            t.note(format!("({})", visible(n)));
        }
        if !modes.contains(&r.mode) {
            modes.push(r.mode.clone());
        }
    }
    let mut out = String::from("instrumentation, VM against bare metal (added ticks per hit)\n");
    out += &t.render();
    for m in &modes {
        let why = vm_explanation(m);
        if !why.is_empty() {
            let _ = writeln!(out, "  {}: {why}", visible(m));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::SignedStats;
    use crate::Stats;

    fn measured(mode_name: &str, added: &[i64], hits: u64, expected: u64) -> Probe {
        let mut p = Probe::unsupported(mode_name, "getppid", String::new());
        p.status = Status::Measured;
        p.added_ticks = Some(SignedStats::from_samples(added));
        let (low, high) = (added.iter().min(), added.iter().max());
        p.added_median_ci = low
            .zip(high)
            .map(|(&low, &high)| crate::probes::SignedCi { low, high });
        p.baseline = Some(Stats::from_samples(&[500]));
        p.hits = hits;
        p.hits_expected = expected;
        p.iterations = expected.max(1);
        p
    }

    fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no row {first} in\n{text}"))
            .split_whitespace()
            .collect()
    }

    #[test]
    fn rows_show_hits_added_cost_and_ratio_to_int3() {
        let mut tracepoint = measured(mode::TRACEPOINT, &[300, 300, 330], 6, 6);
        tracepoint.hits_per_sample = 2;
        let probes = vec![
            tracepoint,
            measured(mode::FUNCTION, &[-30, -5, 20], 3, 3),
            measured(mode::SYSCALL_SLOW_PATH, &[100, 100, 110], 0, 0),
            measured(mode::KPROBE_INT3, &[2000, 2000, 2100], 3, 3),
            measured(mode::KPROBE_OPTIMIZED, &[200, 200, 210], 2, 3),
            Probe::unsupported(mode::FPROBE, "getppid", "no \x1b[31mFPROBE_EVENTS".into()),
        ];
        let mut report = crate::fixtures::report(crate::Environment::BareMetal, 1);
        report.host.tsc_khz = 2_000_000;
        report.machine = Some(crate::Machine {
            tsc_quantum_ticks: Some(10.0),
            ..crate::Machine::default()
        });
        report.probes = probes;
        let text = probes_table(&report);
        assert_eq!(
            row(&text, "kprobe-optimized"),
            [
                "kprobe-optimized",
                "getppid",
                "2/3",
                "BAD",
                "200",
                "200..210",
                "210",
                "100",
                "0.10x",
                "500"
            ]
        );
        assert_eq!(row(&text, "kprobe-int3")[2..4], ["3/3", "ok"]);
        // Under 20 quanta of 10 ticks: flagged.
        assert_eq!(row(&text, "syscall-slow-path")[4], "100*");
        assert_eq!(row(&text, "syscall-slow-path")[2..4], ["0", "(control)"]);
        // The tracepoint's 300 per hit is 600 per sample (two hits); the
        // control's 100 is per sample.
        assert!(
            text.contains(
                "per sample (2 hit(s)) 600, of which the slow-path shift is 100 and the \
                 tracepoint itself +500 ticks (+250 per hit)"
            ),
            "{text}"
        );
        // A probe that costs nothing shows signed figures.
        assert_eq!(row(&text, "function")[4..7], ["-5*", "-30..20", "20*"]);
        assert!(
            text.contains("unsupported: no \\x1b[31mFPROBE_EVENTS"),
            "{text}"
        );
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn comparison_rows_and_explanations() {
        let rows = crate::probes::compare_probes(
            &[measured(mode::KPROBE_INT3, &[3000], 1, 1)],
            &[measured(mode::KPROBE_INT3, &[1000], 1, 1)],
        );
        let text = probe_comparison_table(&rows);
        assert_eq!(
            row(&text, "kprobe-int3"),
            ["kprobe-int3", "getppid", "3000", "1000", "3.00x"]
        );
        assert!(text.contains("kprobe-int3: int3 (#BP)"), "{text}");
    }
}
