//! The text renderer: every table xvmm and xperf print, from one code path.
//!
//! Renderers return `String`s and never print. All figures are TSC ticks with
//! the null overhead subtracted (the JSON keeps the raw values too); a
//! nanosecond column is added when the TSC rate is known. Every string that
//! came from a report (names, reasons, notes, CPU model...) goes through
//! [`xvmm_host::escape::visible`]: a report is untrusted input.

use crate::compare::{Comparison, DiffUnit, ExitsPart};
use crate::document::Table;
use crate::{Crossing, ExitTiming, HostExit, Interval, Machine, Report, Stats, Status};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

mod async_pf;
mod characterize;
pub mod document;
mod linearity;
mod method;
pub mod openmetrics;
mod probes;
mod timeline;
mod workload;
pub mod workload_compare;

pub use async_pf::{async_pf_lines, on_off_table};
pub use characterize::{by_group, characterize_of, characterize_table, ticks_per};
pub use linearity::linearity_table;
pub use method::quantum_of;
pub use probes::{probe_comparison_table, probes_table};
pub use timeline::{attribution_of, attribution_table, timeline_lines, traced_exit_table};
pub use workload::{rows_by_family, workload_of, workload_table};

/// "-" for a missing figure.
fn cell(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn corrected(interval: &Option<Interval>) -> Option<&Stats> {
    interval.as_ref().map(|i| &i.corrected)
}

fn median(stats: Option<&Stats>) -> Option<u64> {
    stats.filter(|s| s.count > 0).map(|s| s.median)
}

fn p99(stats: Option<&Stats>) -> Option<u64> {
    stats.filter(|s| s.count > 0).map(|s| s.p99)
}

/// Ticks as nanoseconds at `tsc_khz`, "-" when unknown.
fn nanoseconds(ticks: Option<u64>, tsc_khz: u64) -> String {
    match ticks {
        Some(t) if tsc_khz > 0 => format!("{:.0}", t as f64 * 1e6 / tsc_khz as f64),
        _ => "-".to_string(),
    }
}

/// Why a row has no (or only some) figures; `None` when fully measured.
pub fn status_text(status: &Status) -> Option<String> {
    match status {
        Status::Measured => None,
        Status::RoundTripOnly { reason } => Some(format!("round trip only: {}", visible(reason))),
        Status::Unsupported { reason } => Some(format!("unsupported: {}", visible(reason))),
    }
}

/// `s`, or "unknown" when empty; escaped.
pub fn or_unknown(s: &str) -> String {
    if s.is_empty() {
        "unknown".into()
    } else {
        visible(s).into_owned()
    }
}

fn on_off(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    }
}

/// The header lines: where the numbers come from and how they were taken.
fn header(report: &Report) -> String {
    let h = &report.host;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} on {}: {}",
        visible(&report.tool),
        or_unknown(&h.cpu_model),
        report.environment.describe()
    );
    let tsc = if h.tsc_khz > 0 {
        h.tsc_khz.to_string()
    } else {
        "unknown".into()
    };
    let hypervisor = if h.hypervisor_signature.is_empty() {
        "none".into()
    } else {
        format!("\"{}\"", visible(&h.hypervisor_signature))
    };
    let _ = writeln!(
        out,
        "TSC {tsc} kHz | hypervisor seen: {hypervisor} | KVM module: {} | kernel {} | KPTI {}",
        or_unknown(&h.kvm_module),
        or_unknown(&h.kernel_release),
        on_off(h.kpti),
    );
    if is_workload_only(report) {
        // No stamps were taken: the trace clock's ticks are the figures.
        return out;
    }
    let m = &report.method;
    let rounds = if m.rounds > 1 {
        format!(" in each of {} rounds", m.rounds)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{} samples per row{rounds} after {} warm-up; stamps `{}` .. `{}`; TSC ticks minus the stamps' cost",
        m.samples_requested,
        m.warmup,
        visible(&m.stamp_begin),
        visible(&m.stamp_end)
    );
    let n = &report.null_overhead;
    let _ = writeln!(
        out,
        "null overhead (stamp pair, nothing between): median {} min {} p99 {} ({} samples)",
        n.median, n.min, n.p99, n.count
    );
    out + &method::stamp_lines(report)
}

/// Counts of samples a crossing dropped, when there are any.
fn discarded_note(c: &Crossing) -> Option<String> {
    // Guest-written counters: saturate rather than overflow.
    let rejected = c
        .samples_unfilled
        .saturating_add(c.samples_out_of_order)
        .saturating_add(c.samples_other_rejected);
    let rejected = rejected.saturating_add(c.samples_migrated);
    (rejected > 0).then(|| {
        format!(
            "discarded: {} unfilled, {} out of order, {} migrated, {} other{}",
            c.samples_unfilled,
            c.samples_out_of_order,
            c.samples_migrated,
            c.samples_other_rejected,
            c.other_rejected_reason
                .as_deref()
                .map(|r| format!(" ({})", visible(r)))
                .unwrap_or_default()
        )
    })
}

/// The crossing table: one row per crossing, u2k / k2u / round trip, median
/// and p99; medians under 20 TSC quanta (`quantum`) marked `*`.
pub fn crossing_table(crossings: &[Crossing], tsc_khz: u64, quantum: Option<f64>) -> String {
    crossings_of(crossings, tsc_khz, quantum).render()
}

/// The crossing table, for every backend (the terminal, `xvmm report`).
pub fn crossings_of(crossings: &[Crossing], tsc_khz: u64, quantum: Option<f64>) -> Table {
    let mut t = Table::new(&[
        "crossing",
        "valid",
        "u2k med",
        "u2k p99",
        "k2u med",
        "k2u p99",
        "rtrip med",
        "rtrip p99",
        "rtrip ns",
    ]);
    for c in crossings {
        let name = visible(&c.name).into_owned();
        if let (Some(text), None) = (status_text(&c.status), &c.round_trip) {
            t.row(vec![name]);
            t.note(text);
            continue;
        }
        let rt = corrected(&c.round_trip);
        let flag = |v| method::flagged(v, quantum);
        t.row(vec![
            name,
            format!("{}/{}", c.samples_valid, c.samples_requested),
            flag(median(corrected(&c.u2k))),
            cell(p99(corrected(&c.u2k))),
            flag(median(corrected(&c.k2u))),
            cell(p99(corrected(&c.k2u))),
            flag(median(rt)),
            cell(p99(rt)),
            nanoseconds(median(rt), tsc_khz),
        ]);
        if let Some(note) = discarded_note(c) {
            t.note(note);
        }
        if let Some(text) = status_text(&c.status) {
            t.note(text);
        }
        for note in method::crossing_notes(c, quantum) {
            t.note(note);
        }
    }
    t
}

/// The exit table: round trip in the guest, and its host-side split.
pub fn exit_table(exits: &[ExitTiming], tsc_khz: u64) -> String {
    exits_of(exits, tsc_khz).render()
}

/// The exit table, for every backend.
pub fn exits_of(exits: &[ExitTiming], tsc_khz: u64) -> Table {
    let mut t = Table::new(&[
        "VM exit",
        "valid",
        "rtrip med",
        "rtrip p99",
        "rtrip ns",
        "guest->VMM",
        "in VMM",
        "VMM->guest",
        "exits",
    ]);
    grouped_rows(&mut t, crate::exits_by_family(exits), |t, e| {
        exit_row(t, e, tsc_khz);
    });
    t
}

/// Puts `groups` of exit rows (by [`crate::exits_by_family`]) into `t`,
/// each under its family's heading ("other" for rows without one), and
/// none where no row has a family (reports written before them).
fn grouped_rows<T>(
    t: &mut Table,
    groups: Vec<(Option<crate::ExitFamily>, Vec<T>)>,
    mut row: impl FnMut(&mut Table, T),
) {
    let grouped = groups.len() > 1 || groups.iter().any(|(f, _)| f.is_some());
    for (family, rows) in groups {
        if grouped {
            t.group(family.map_or("other", |f| f.heading()).into());
        }
        for r in rows {
            row(t, r);
        }
    }
}

/// One exit's row of [`exits_of`], or its name and why it was not measured.
fn exit_row(t: &mut Table, e: &ExitTiming, tsc_khz: u64) {
    let name = visible(&e.name).into_owned();
    if let Some(text) = status_text(&e.status) {
        t.row(vec![name]);
        t.note(text);
        return;
    }
    let rt = corrected(&e.round_trip);
    // Corrected parts when the report has them, else (older reports)
    // the raw ones.
    let parts = match &e.split {
        Some(s) => [
            Some(&s.guest_to_vmm.corrected),
            Some(&s.in_vmm.corrected),
            Some(&s.vmm_to_guest.corrected),
        ],
        None => [
            e.guest_to_vmm.as_ref(),
            e.in_vmm.as_ref(),
            e.vmm_to_guest.as_ref(),
        ],
    };
    t.row(vec![
        name,
        format!("{}/{}", e.samples_valid, e.samples_requested),
        cell(median(rt)),
        cell(p99(rt)),
        nanoseconds(median(rt), tsc_khz),
        cell(median(parts[0])),
        cell(median(parts[1])),
        cell(median(parts[2])),
        exits_per_sample(e.kvm_exits.as_ref()),
    ]);
    if let Some(r) = &e.receiver {
        t.note(receiver_note(r, tsc_khz));
    }
}

/// KVM's exits a sample beyond the stamps' own, two decimals ("-" where
/// KVM's count is not in the report).
fn exits_per_sample(k: Option<&crate::KvmExits>) -> String {
    k.and_then(crate::KvmExits::per_sample)
        .map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

/// An IPI row's receiver side in one line: its two legs (medians, raw
/// ticks on the one TSC), how many receivers had halted, and where the
/// vCPU threads ran.
fn receiver_note(r: &crate::IpiReceiver, tsc_khz: u64) -> String {
    let cpu = |c: Option<u32>| c.map_or_else(|| "unpinned".to_string(), |c| format!("CPU {c}"));
    let leg = |s: &Stats| {
        let ns = nanoseconds(Some(s.median), tsc_khz);
        let ns = if ns == "-" {
            String::new()
        } else {
            format!(", {ns} ns")
        };
        format!("median {} (p99 {}{ns})", s.median, s.p99)
    };
    let mut text = format!(
        "receiver: send to handler {}, handler to EOI done {}; {} of {} halted when sent; \
         sender on host {}, receiver on host {}",
        leg(&r.send_to_handler),
        leg(&r.handler_to_eoi),
        r.halted,
        r.samples(),
        cpu(r.sender_cpu),
        cpu(r.receiver_cpu)
    );
    if r.sender_cpu.is_some() && r.sender_cpu == r.receiver_cpu {
        text += " (one host CPU: the host's scheduling is in every sample)";
    }
    if r.out_of_order > 0 {
        text += &format!(
            "; {} samples left out, their stamps out of causal order",
            r.out_of_order
        );
    }
    text
}

/// Host-side exit-to-entry times per exit reason (TSC ticks).
pub fn host_exit_table(exits: &[HostExit]) -> String {
    let mut out = String::from("host exits (kvm_exit -> kvm_entry, host TSC ticks)\n");
    if exits.is_empty() {
        out += "(no exits traced)\n";
        return out;
    }
    out + &host_exits_of(exits).render()
}

/// Host-side exit-to-entry times per exit reason, for every backend: what
/// each reason cost in all (mean x count) beside its median and p99.
pub fn host_exits_of(exits: &[HostExit]) -> Table {
    let mut t = Table::new(&["reason", "count", "median", "p99", "total (mean x count)"]);
    for e in exits {
        let s = &e.exit_to_entry;
        t.row(vec![
            visible(&e.reason).into_owned(),
            s.count.to_string(),
            s.median.to_string(),
            s.p99.to_string(),
            format!("{:.0}", s.mean * s.count as f64),
        ]);
    }
    t
}

/// An `xperf workload` report: a command's trace, no crossing measured.
fn is_workload_only(report: &Report) -> bool {
    report.workload.is_some() && report.crossings.is_empty()
}

/// Everything a report holds, as text: header, crossings, exits, host exits,
/// notes and the machine it was measured on.
pub fn report(report: &Report) -> String {
    let mut out = header(report);
    if !is_workload_only(report) {
        out.push('\n');
        let quantum = method::quantum_of(report);
        out += &crossing_table(&report.crossings, report.host.tsc_khz, quantum);
        if quantum.is_some_and(|q| q > 1.0) {
            out +=
                "(* under 20 TSC quanta: one step of the counter is more than 5 % of the figure)\n";
        }
        out += &method::stamp_point_lines(report);
    }
    if !report.exits.is_empty() {
        out.push('\n');
        out += &exit_table(&report.exits, report.host.tsc_khz);
        if report.exits.iter().any(|e| e.split.is_some()) {
            out += "(guest->VMM, in VMM, VMM->guest: cut by the VMM's stamps around KVM_RUN and \
                    corrected like the round trip, so the three add up to it in the mean; \
                    only exits that reach xvmm have them)\n";
        } else {
            out += "(guest->VMM, in VMM, VMM->guest: medians of host stamps taken around KVM_RUN; \
                    only exits that reach xvmm have them)\n";
        }
        let traced = traced_exit_table(&report.exits);
        if !traced.is_empty() {
            out.push('\n');
            out += &traced;
        }
    }
    if !report.host_exits.is_empty() {
        out.push('\n');
        out += &host_exit_table(&report.host_exits);
    }
    if !report.probes.is_empty() {
        out.push('\n');
        out += &probes_table(report);
    }
    if let Some(t) = &report.timeline {
        out.push('\n');
        out += &timeline_lines(t);
        out += &attribution_table(&report.crossings, t.verdict());
    }
    if let Some(a) = &report.async_pf {
        out.push('\n');
        out += &async_pf_lines(a);
    }
    if let Some(w) = &report.workload {
        out.push('\n');
        out += &workload_table(w, report.host.tsc_khz);
    }
    if !report.notes.is_empty() {
        out += "\nnotes:\n";
        for n in &report.notes {
            let _ = writeln!(out, "- {}", visible(n));
        }
    }
    if let Some(m) = &report.machine {
        out += "\nmeasured on:\n";
        out += &machine_table(m);
    }
    if let Some(c) = &report.characterize {
        out.push('\n');
        out += &characterize_table(c);
    }
    out
}

/// The characterisation of a machine as (key, value) pairs, values made
/// visible: what decides whether two reports can be compared. The one list
/// every renderer of the machine block (text, HTML) shows.
pub fn machine_facts(m: &Machine) -> Vec<(&'static str, String)> {
    let mut facts = vec![
        (
            "cpu",
            format!(
                "{} {} (family/model/stepping {}), {} logical CPUs",
                or_unknown(&m.cpu_vendor),
                or_unknown(&m.cpu_model),
                or_unknown(&m.cpu_signature),
                m.logical_cpus
            ),
        ),
        (
            "tsc",
            format!("{} kHz ({})", m.tsc_khz, or_unknown(&m.tsc_khz_source)),
        ),
        (
            "hypervisor",
            if m.hypervisor_signature.is_empty() {
                "none seen (bare metal, or a hypervisor that hides itself)".into()
            } else {
                format!("\"{}\"", visible(&m.hypervisor_signature))
            },
        ),
        ("kernel", or_unknown(&m.kernel_release)),
        ("kvm module", kvm_module_text(m)),
        ("cpu flags", visible(&m.flags.join(" ")).into_owned()),
        ("kpti", on_off(m.kpti()).into()),
        ("thp", or_unknown(&m.thp)),
        ("clocksource", or_unknown(&m.clocksource)),
    ];
    // Only what is not "Not affected": the mitigations that cost crossings.
    let affected: Vec<String> = m
        .vulnerabilities
        .iter()
        .filter(|(_, v)| *v != "Not affected")
        .map(|(k, v)| format!("{}: {}", visible(k), visible(v)))
        .collect();
    if affected.is_empty() {
        let none = if m.vulnerabilities.is_empty() {
            "unknown"
        } else {
            "none affected"
        };
        facts.push(("vulnerabilities", none.into()));
    }
    for (i, v) in affected.into_iter().enumerate() {
        facts.push((if i == 0 { "vulnerabilities" } else { "" }, v));
    }
    facts
}

/// [`machine_facts`], one fact a line.
pub fn machine_table(m: &Machine) -> String {
    let mut out = String::new();
    for (key, value) in machine_facts(m) {
        let _ = writeln!(out, "  {key:<16} {value}");
    }
    out
}

fn kvm_module_text(m: &Machine) -> String {
    let params = m
        .kvm_params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    if m.kvm_module.is_empty() {
        "none loaded".into()
    } else if params.is_empty() {
        visible(&m.kvm_module).into_owned()
    } else {
        visible(&format!("{} ({params})", m.kvm_module)).into_owned()
    }
}

fn signed(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:+}"))
}

fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// A VM vs bare-metal comparison as a table.
pub fn comparison_table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "VM: {}  vs  bare metal: {}",
        visible(&c.vm_tool),
        visible(&c.bare_metal_tool)
    );
    if let Some(w) = &c.workload {
        out += &workload_compare::workload_comparison_text(c, w);
        if c.rows.is_empty() {
            // A workload's files: no crossing to compare.
            for n in &c.notes {
                let _ = writeln!(out, "note: {}", visible(n));
            }
            return out;
        }
    }
    out += match c.diff_unit {
        DiffUnit::Ticks => {
            "TSC ticks, null overhead subtracted; diff = VM - bare metal in ticks, ratio = VM / \
             bare metal\n"
        }
        // Never a difference of two clocks' ticks: each side over its own rate.
        DiffUnit::Ns => {
            "medians and p99s in each file's own TSC ticks, null overhead subtracted; diff = VM - \
             bare metal in ns, ratio = VM / bare metal of ns (the TSC rates differ)\n"
        }
    };
    let mut t = Table::new(&[
        "crossing", "interval", "VM med", "VM p99", "BM med", "BM p99", "diff med", "diff p99",
        "x med", "x p99",
    ]);
    for r in &c.rows {
        t.row(vec![
            visible(&r.crossing).into_owned(),
            r.interval.clone(),
            cell(r.vm_median),
            cell(r.vm_p99),
            cell(r.bare_median),
            cell(r.bare_p99),
            signed(r.diff_median),
            signed(r.diff_p99),
            times(r.ratio_median),
            times(r.ratio_p99),
        ]);
        if let Some(n) = &r.note {
            t.note(format!("({})", visible(n)));
        }
    }
    out += &t.render();
    if !c.probes.is_empty() {
        out.push('\n');
        out += &probe_comparison_table(&c.probes);
    }
    out += &decomposition_table(c);
    for n in &c.notes {
        let _ = writeln!(out, "note: {}", visible(n));
    }
    out
}

/// Reasons of an exits part, largest first: `npf +12.0, intr +1.5`.
fn exit_shares(by_reason: &std::collections::BTreeMap<String, f64>) -> String {
    let mut list: Vec<_> = by_reason.iter().collect();
    list.sort_by(|a, b| b.1.total_cmp(a.1));
    let shown: Vec<String> = list
        .iter()
        .take(4)
        .map(|(r, v)| format!("{} {v:+.1}", visible(r)))
        .collect();
    if shown.is_empty() {
        "-".into()
    } else {
        shown.join(", ")
    }
}

/// How the decomposition adds up, under its heading.
const DECOMPOSITION: &str =
    "  diff mean = VM mean - bare-metal mean = w/o exits + exits + unattrib., exactly
  w/o exits = VM exit-free mean - bare-metal mean (approx. 95 % CI, within-run scatter only)
  exits = hit (samples with an exit, of all) x per hit (their mean - the exit-free mean), split by \
host time
  unattrib. = the samples the trace cannot vouch for: their fraction x (their mean - the exit-free \
mean)
  diff med = VM median - bare-metal median: not decomposable (medians do not add)
";

/// A fraction of samples as hits of all, e.g. `15/6000`.
fn hits(e: &ExitsPart) -> String {
    format!("{}/{}", e.hits, e.samples)
}

/// The VM's mean difference split into what no exit explains, what exits
/// do and what unattributable samples add; empty when the VM run was not
/// traced.
fn decomposition_table(c: &Comparison) -> String {
    let rows: Vec<_> = c.rows.iter().filter(|r| r.exits.is_some()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nwhat the VM adds, decomposed (in {}):\n{DECOMPOSITION}",
        c.diff_unit.name()
    );
    if rows.iter().any(|r| r.timeline_verified == Some(false)) {
        out += "UNVERIFIED TIMELINE: the exit placements behind this split may be wrong\n";
    }
    let mut t = Table::new(&[
        "crossing",
        "interval",
        "diff mean",
        "w/o exits",
        "95% CI",
        "hit",
        "per hit",
        "exits",
        "unattrib.",
        "by reason",
        "diff med",
    ]);
    // A part that rounds to nothing shows as +0.0, never -0.0.
    let f = |v: Option<f64>| {
        v.map_or_else(
            || "-".into(),
            |v| format!("{:+.1}", if v.abs() < 0.05 { 0.0 } else { v }),
        )
    };
    for r in rows {
        let (w, e, u) = (&r.without_exits, &r.exits, &r.unattributable);
        let ci = match w.as_ref().map(|w| (w.ci_low, w.ci_high)) {
            Some((Some(lo), Some(hi))) => format!("[{lo:+.1}, {hi:+.1}]"),
            _ => "-".into(),
        };
        t.row(vec![
            visible(&r.crossing).into_owned(),
            r.interval.clone(),
            f(r.diff_mean),
            f(w.as_ref().map(|w| w.mean)),
            ci,
            e.as_ref().map_or("-".into(), hits),
            f(e.as_ref().map(|e| e.per_hit)),
            f(e.as_ref().map(|e| e.mean)),
            f(u.as_ref().map(|u| u.mean)),
            e.as_ref().map_or("-".into(), |e| exit_shares(&e.by_reason)),
            signed(r.diff_median),
        ]);
    }
    out + &t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Row;
    use crate::{fixtures, Environment, ExitFamily};

    fn row_of<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no row {first} in\n{text}"))
            .split_whitespace()
            .collect()
    }

    #[test]
    fn crossing_table_has_one_row_per_crossing_with_corrected_medians() {
        let r = fixtures::report(Environment::Microguest, 1);
        let text = report(&r);
        let cols = row_of(&text, "pf");
        // Raw u2k 100..102, k2u 200, round trip 500; u2k and k2u minus 50,
        // the round trip minus 150 (every stamp pair's median is 50).
        assert_eq!(cols[1], "3/3");
        assert_eq!((cols[2], cols[3]), ("51", "52"));
        assert_eq!((cols[4], cols[5]), ("150", "150"));
        assert_eq!((cols[6], cols[7]), ("350", "350"));
        assert_eq!(cols[8], "175", "350 ticks at 2 GHz");
        assert!(
            text.contains("unsupported: hypervisor refused int 0x80"),
            "{text}"
        );
        assert!(text.contains("null overhead (stamp pair, nothing between): median 50 min 40"));
        assert!(text.contains("Test CPU"));
    }

    #[test]
    fn the_user_pair_sweep_and_its_choice_are_printed() {
        use crate::correction::{PairCost, StampCosts};
        use crate::sweep::{decide, SweepFit, SweepPhase};
        let mut r = fixtures::report(Environment::Microguest, 1);
        let pair = PairCost::from_rounds("open", "close", &[vec![42, 42, 44]]);
        let phases = vec![
            SweepPhase::from_medians(&[16, 32], &[70, 102], 500).unwrap(),
            SweepPhase::from_medians(&[64, 128], &[166, 294], 500).unwrap(),
        ];
        let sweep = decide(42, SweepFit::new(phases, Some(2.0)).unwrap(), Some(2.0));
        r.stamp_costs = Some(StampCosts::new(pair, None, None).with_user_sweep(sweep));
        let text = report(&r);
        assert!(
            text.contains(
                "user pair sweep (2 phases, imul chains of 16 to 128): intercept 38.0 ticks \
                 (+-0.9, scatter 0.0), slope 2.000 per imul; null pair 42, bias +4.0, \
                 threshold 1.8: corrections use the intercept (38)"
            ),
            "{text}"
        );
        assert!(
            text.contains("corrections (ticks): round trip 38"),
            "{text}"
        );
    }

    #[test]
    fn round_trip_only_rows_show_the_round_trip_and_say_why() {
        let mut r = fixtures::report(Environment::BareMetal, 1);
        r.crossings.push(Crossing::from_round_trips(
            "getppid",
            2,
            &[573, 600],
            73,
            "no hooks".into(),
        ));
        let text = report(&r);
        let cols = row_of(&text, "getppid");
        assert_eq!(cols[1..8], ["2/2", "-", "-", "-", "-", "500", "527"]);
        let after = text.split("getppid").nth(1).unwrap();
        assert!(
            after.lines().nth(1).unwrap().trim() == "round trip only: no hooks",
            "{text}"
        );
    }

    #[test]
    fn exit_table_shows_split_or_dashes() {
        let e = ExitTiming {
            name: "pio-out".into(),
            family: None,
            status: Status::Measured,
            samples_requested: 2,
            samples_valid: 2,
            round_trip: Some(Interval::from_raw(&[1000, 1200], 100)),
            guest_to_vmm: Some(Stats::from_samples(&[400, 500])),
            in_vmm: Some(Stats::from_samples(&[100, 100])),
            vmm_to_guest: None,
            split: None,
            traced: None,
            receiver: None,
            kvm_exits: None,
        };
        let text = exit_table(std::slice::from_ref(&e), 0);
        assert_eq!(
            row_of(&text, "pio-out"),
            ["pio-out", "2/2", "900", "1100", "-", "400", "100", "-", "-"]
        );
        // KVM counted 663 exits in 660 runs, the stamps' phases 14.
        let count = |exits| crate::ExitCount {
            exits,
            iterations: 660,
        };
        let counted = ExitTiming {
            kvm_exits: Some(crate::KvmExits {
                row: count(663),
                stamps: count(14),
            }),
            ..e
        };
        let text = exit_table(&[counted], 0);
        assert_eq!(row_of(&text, "pio-out")[8], "0.98");
    }

    /// An IPI row carries its receiver's legs, the halted count and the
    /// host CPUs below it; one shared host CPU and samples out of order
    /// are said.
    #[test]
    fn an_ipi_row_notes_its_receiver_side() {
        let stamps = |sent, handler, eoi, acked, halted_at| crate::IpiStamps {
            sent,
            acked,
            handler,
            eoi,
            halted_at,
        };
        let mut r = crate::IpiReceiver::from_samples(&[
            stamps(1000, 3600, 4000, 5000, 900),
            stamps(9000, 8000, 8100, 9500, 0),
        ]);
        r.sender_cpu = Some(0);
        r.receiver_cpu = Some(1);
        let mut e = ExitTiming::new(
            "ipi",
            Some(ExitFamily::Interrupt),
            Status::Measured,
            (2, 2),
            Some(Interval::from_raw(&[4000, 500], 0)),
        );
        e.receiver = Some(r.clone());
        let text = exit_table(&[e.clone()], 2_600_000);
        let note = text.lines().find(|l| l.contains("receiver:")).expect(&text);
        assert!(
            note.contains("send to handler median 2600 (p99 2600, 1000 ns)")
                && note.contains("handler to EOI done median 400 (p99 400")
                && note.contains("1 of 1 halted when sent")
                && note.contains("sender on host CPU 0, receiver on host CPU 1")
                && note.contains("1 samples left out"),
            "{note}"
        );
        assert!(!note.contains("one host CPU"), "{note}");
        r.receiver_cpu = Some(0);
        r.out_of_order = 0;
        e.receiver = Some(r);
        let text = exit_table(&[e], 0);
        assert!(
            text.contains("(one host CPU: the host's scheduling"),
            "{text}"
        );
        assert!(!text.contains("left out"), "{text}");
    }

    /// Rows are grouped by family in the family order, each under its
    /// heading, whatever order the report holds them in; rows without a
    /// family come last under "other"; a report with no families (written
    /// before they existed) keeps its order and gets no headings.
    #[test]
    fn exit_rows_are_grouped_by_family_under_headings() {
        let row = |name: &str, family: Option<ExitFamily>| {
            let rt = Some(Interval::from_raw(&[500], 100));
            ExitTiming::new(name, family, Status::Measured, (1, 1), rt)
        };
        let exits = [
            row("pio-out", Some(ExitFamily::PortIo)),
            row("rdmsr", Some(ExitFamily::Msr)),
            row("old-row", None),
            row("cpuid", Some(ExitFamily::Instruction)),
            row("wrmsr", Some(ExitFamily::Msr)),
        ];
        let text = exit_table(&exits, 0);
        let firsts: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split("  ").next().unwrap().trim_end())
            .collect();
        assert_eq!(
            firsts,
            [
                "-- instructions",
                "cpuid",
                "-- MSRs",
                "rdmsr",
                "wrmsr",
                "-- port I/O",
                "pio-out",
                "-- other",
                "old-row"
            ],
            "{text}"
        );
        let table = exits_of(&exits, 0);
        let groups: Vec<&Row> = table
            .rows
            .iter()
            .filter(|r| matches!(r, Row::Group(_)))
            .collect();
        assert_eq!(groups.len(), 4);
        // An old report: its own order, no headings.
        let old = [row("pio-out", None), row("cpuid", None)];
        let text = exit_table(&old, 0);
        assert!(!text.contains("--"), "{text}");
        assert!(text.find("pio-out") < text.find("cpuid"), "{text}");
    }

    #[test]
    fn host_exit_rows_and_the_empty_case() {
        let exits = [HostExit {
            reason: "io".into(),
            exit_to_entry: Stats::from_samples(&[10, 20, 30]),
        }];
        assert_eq!(
            row_of(&host_exit_table(&exits), "io"),
            ["io", "3", "20", "30", "60"],
            "reason, count, median, p99, total (mean 20 x 3)"
        );
        assert!(host_exit_table(&[]).contains("(no exits traced)"));
    }

    #[test]
    fn rows_stay_aligned_with_long_names() {
        let mut r = fixtures::report(Environment::BareMetal, 1);
        r.crossings[0].name = "a-very-long-crossing-name".into();
        let text = crossing_table(&r.crossings, 0, None);
        let lines: Vec<&str> = text.lines().collect();
        let header_end = lines[0].find("rtrip ns").unwrap() + "rtrip ns".len();
        assert_eq!(lines[1].len(), header_end, "{text}");
    }

    #[test]
    fn text_from_the_report_cannot_reach_the_terminal_raw() {
        let mut r = fixtures::report(Environment::LinuxVm, 1);
        r.tool = "xperf\x1b[2J".into();
        r.crossings[0].name = "pf\nforged line".into();
        r.crossings[1].status = Status::Unsupported {
            reason: "\x1b]0;title\x07".into(),
        };
        r.notes.push("note\r\u{202e}".into());
        r.machine = Some(Machine {
            cpu_model: "\x1b[31mred".into(),
            ..Default::default()
        });
        let text = report(&r);
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
        assert!(!text.contains('\u{202e}'));
        assert!(text.contains("pf\\nforged line"));
        assert!(text.contains("\\x1b]0;title\\x07"));
        assert!(!text.lines().any(|l| l.starts_with("forged")));
    }
}
