//! The timeline of a traced run and where the host's exits fell: one line
//! for the mapping and its check, one table row per crossing segment.

use super::{cell, median};
use crate::attribution::{SegmentHost, SEGMENTS};
use crate::document::Table;
use crate::timeline::{Timeline, Verdict};
use crate::{Crossing, ExitTiming};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

/// The mapping, how it was checked, and requested vs measured controls.
pub fn timeline_lines(t: &Timeline) -> String {
    let mut out = String::new();
    let verdict = match t.verdict() {
        Verdict::Verified => "verified".to_string(),
        Verdict::Consistent => "consistent (offset inferred)".to_string(),
        Verdict::NotVerified => format!(
            "NOT VERIFIED: {}",
            visible(t.reason.as_deref().unwrap_or("unknown"))
        ),
    };
    let _ = writeln!(
        out,
        "timeline: guest TSC = host TSC x {:.6} {} {} (offset from {}); {} of {} calibration \
         exits matched, {} violations, bound {} ticks: {verdict}",
        t.ratio,
        if t.offset < 0 { '-' } else { '+' },
        t.offset.unsigned_abs(),
        visible(&t.offset_source),
        t.checks,
        t.calibrations.max(t.checks),
        t.violations,
        t.bound_ticks,
    );
    if let Some(r) = &t.measured_offset {
        let requested = t
            .requested_offset
            .map_or(String::new(), |o| format!("requested {o}, "));
        let _ = writeln!(
            out,
            "  TSC offset: {requested}the guest ran with one in [{}, {}]",
            r.low, r.high
        );
    }
    rate_line(t, &mut out);
    lost_line(t, &mut out);
    out
}

/// Requested against measured rate, and KVM's ratio when it scaled.
fn rate_line(t: &Timeline, out: &mut String) {
    if t.requested_khz.is_none() && t.measured_khz.is_none() {
        return;
    }
    let show = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} kHz"));
    let kvm = match (t.ratio_fixed, t.ratio_frac_bits) {
        (Some(fixed), Some(bits)) => format!(
            "; KVM's ratio {fixed:#x} / 2^{bits} on a {} host",
            show(t.host_khz)
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "  TSC rate: requested {}, measured {}{kvm}",
        show(t.requested_khz.map(u64::from)),
        show(t.measured_khz)
    );
}

/// Offset rewrites, one-sided calibration exits, lost events and what
/// they cost attribution.
fn lost_line(t: &Timeline, out: &mut String) {
    if t.offset_changes.is_empty() && t.unmatched == 0 && t.lost_events == 0 {
        return;
    }
    let _ = write!(
        out,
        "  {} offset rewrites during the run, {} calibration exits seen by one side only, \
         {} trace events lost",
        t.offset_changes.len(),
        t.unmatched,
        t.lost_events
    );
    if t.lost_unplaced > 0 {
        let _ = write!(
            out,
            " ({} counted by the ring buffer's overrun counters and never marked in the \
             stream: where they fell is unknown, so every sample is unattributable)",
            t.lost_unplaced
        );
    } else if t.lost_windows > 0 {
        let _ = write!(
            out,
            " (in {} windows: the samples there are unattributable)",
            t.lost_windows
        );
    }
    out.push('\n');
}

/// Exits by reason, most host time first: `npf 3/1200, intr 1/90`.
fn reasons(h: &SegmentHost) -> String {
    reason_list(&h.reasons_by_host_time())
}

fn reason_list(by_host_time: &[(&str, &crate::attribution::ReasonCost)]) -> String {
    let shown: Vec<String> = by_host_time
        .iter()
        .map(|(r, c)| format!("{} {}/{}", visible(r), c.count, c.host_ticks))
        .collect();
    if shown.is_empty() {
        "-".into()
    } else {
        shown.join(", ")
    }
}

/// Per crossing segment: samples with exits, the exit-free median next to
/// all samples', and the exits by reason (count / host ticks), under a
/// heading that says how far the timeline can be trusted.
pub fn attribution_table(crossings: &[Crossing], verdict: Verdict) -> String {
    let Some(t) = attribution_of(crossings) else {
        return String::new();
    };
    let mut out = String::from(match verdict {
        Verdict::Verified => {
            "host exits by sample segment (corrected guest ticks; an exit belongs to the segment \
             its kvm_exit falls in)\n"
        }
        Verdict::Consistent => {
            "host exits by sample segment -- OFFSET INFERRED from the calibration exits: \
             placements agree with them, not verified\n"
        }
        Verdict::NotVerified => {
            "host exits by sample segment -- UNVERIFIED TIMELINE: placements may be wrong\n"
        }
    });
    out += &t.render();
    out
}

/// The attribution table, for every backend: a row per attributed crossing
/// segment (`None` when the report has none).
pub fn attribution_of(crossings: &[Crossing]) -> Option<Table> {
    let mut t = Table::new(&[
        "crossing",
        "segment",
        "samples",
        "w/ exits",
        "unattr",
        "all med",
        "free med",
        "exits (reason count/host ticks)",
    ]);
    let mut any = false;
    for c in crossings {
        for (name, pick) in SEGMENTS {
            let Some(i) = pick(c) else { continue };
            let Some(h) = &i.host else { continue };
            any = true;
            t.row(vec![
                visible(&c.name).into_owned(),
                name.into(),
                h.samples.to_string(),
                h.samples_with_exits.to_string(),
                h.unattributable.to_string(),
                cell(median(Some(&i.corrected))),
                cell((h.exit_free.count > 0).then_some(h.exit_free.median)),
                reasons(h),
            ]);
            if let Some(why) = &h.reason {
                t.note(format!("(not attributed: {})", visible(why)));
            }
            if let Some(o) = &h.other_vcpus {
                t.row(vec![
                    visible(&c.name).into_owned(),
                    "other vCPUs".into(),
                    o.samples.to_string(),
                    o.samples_with_exits.to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    reason_list(&o.reasons_by_host_time()),
                ]);
            }
        }
    }
    any.then_some(t)
}

/// VM exits cut at the host's tracepoints, with the probe effect.
pub fn traced_exit_table(exits: &[ExitTiming]) -> String {
    let groups: Vec<_> = crate::exits_by_family(exits)
        .into_iter()
        .map(|(family, rows)| {
            let traced: Vec<_> = rows
                .into_iter()
                .filter_map(|e| Some((e, e.traced.as_ref()?)))
                .collect();
            (family, traced)
        })
        .filter(|(_, traced)| !traced.is_empty())
        .collect();
    if groups.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&[
        "VM exit",
        "split",
        "neg",
        "guest->host",
        "in host",
        "in VMM",
        "host->guest",
        "probe effect",
    ]);
    super::grouped_rows(&mut t, groups, |t, (e, x)| traced_row(t, e, x));
    let mut out = String::from(
        "VM exits at the host's tracepoints (medians, TSC ticks; kvm_exit/kvm_entry fire in \
         KVM's C code, hundreds of instructions from VMRUN/VMRESUME, so guest->host and \
         host->guest include that code; probe effect = traced - untraced round-trip median, \
         rounds alternated)\n",
    );
    out += &t.render();
    out
}

/// One row of [`traced_exit_table`], with a note where samples held no
/// traced exit or more than one.
fn traced_row(t: &mut Table, e: &ExitTiming, x: &crate::exit_trace::TracedExit) {
    t.row(vec![
        visible(&e.name).into_owned(),
        format!("{}/{}", x.split, x.samples),
        x.negative.to_string(),
        cell((x.split > 0).then_some(x.guest_to_host.median)),
        cell((x.split > 0).then_some(x.in_host.median)),
        cell(x.in_vmm.as_ref().map(|s| s.median)),
        cell((x.split > 0).then_some(x.host_to_guest.median)),
        format!("{:+}", x.probe_effect_ticks),
    ]);
    if x.no_exit + x.more_exits > 0 {
        let mut note = format!(
            "({} samples without a traced exit, {} with more than one",
            x.no_exit, x.more_exits
        );
        // Where most samples are a path of several exits, what that path
        // costs in the host is the row's figure.
        if let (Some(per), Some(several)) = (&x.exits_per_sample, &x.in_host_several) {
            if x.more_exits * 2 > x.samples {
                let _ = write!(
                    note,
                    ": median {} exits a sample, {} ticks in the host together",
                    per.median, several.median
                );
            }
        }
        note.push(')');
        t.note(note);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::ReasonCost;
    use crate::timeline::OffsetRange;
    use crate::Stats;

    fn timeline(verified: bool) -> Timeline {
        Timeline {
            offset: -5,
            offset_source: "KVM_VCPU_TSC_OFFSET".into(),
            ratio: 1.0,
            ratio_fixed: None,
            ratio_frac_bits: None,
            host_khz: Some(2_000_000),
            checks: 256,
            calibrations: 256,
            violations: u64::from(!verified),
            bound_ticks: 900,
            verified,
            offset_inferred: false,
            reason: (!verified).then(|| "1 of 256 \x1b[2J".into()),
            offset_changes: vec![],
            measured_offset: Some(OffsetRange { low: -9, high: -1 }),
            requested_offset: Some(-5),
            measured_khz: Some(2_000_100),
            requested_khz: Some(2_000_000),
            unmatched: 0,
            lost_events: 0,
            lost_windows: 0,
            lost_unplaced: 0,
        }
    }

    #[test]
    fn the_timeline_line_says_verified_or_why_not_escaped() {
        let ok = timeline_lines(&timeline(true));
        assert!(
            ok.contains(
                "256 of 256 calibration exits matched, 0 violations, bound 900 ticks: verified"
            ),
            "{ok}"
        );
        assert!(ok.contains("host TSC x 1.000000 - 5 (offset from KVM_VCPU_TSC_OFFSET)"));
        assert!(ok.contains("requested -5, the guest ran with one in [-9, -1]"));
        assert!(
            ok.contains("requested 2000000 kHz, measured 2000100 kHz\n"),
            "{ok}"
        );
        let bad = timeline_lines(&timeline(false));
        assert!(bad.contains("NOT VERIFIED: 1 of 256 \\x1b[2J"), "{bad}");
        assert!(!bad.contains('\x1b'));
        assert!(
            !bad.contains("verified\n") && !bad.contains("consistent"),
            "{bad}"
        );
    }

    #[test]
    fn an_inferred_offset_reads_consistent_and_a_refused_one_does_not() {
        let mut t = timeline(false);
        (t.reason, t.violations, t.offset_inferred) = (None, 0, true);
        let text = timeline_lines(&t);
        assert!(
            text.contains("bound 900 ticks: consistent (offset inferred)\n"),
            "{text}"
        );
        assert!(!text.contains(": verified"), "{text}");
        // Inferred and refused (too few matched): not verified.
        t.reason = Some("only 1 of 256".into());
        let text = timeline_lines(&t);
        assert!(text.contains("NOT VERIFIED: only 1 of 256"), "{text}");
        assert!(!text.contains("consistent"), "{text}");
        // A timeline marked verified with an inferred offset is not believed.
        let mut odd = timeline(true);
        odd.offset_inferred = true;
        assert_eq!(odd.verdict(), Verdict::NotVerified);
    }

    #[test]
    fn kvms_ratio_and_lost_windows_are_shown() {
        let mut t = timeline(true);
        (t.ratio_fixed, t.ratio_frac_bits) = (Some(0x6_8b2d_29b5), Some(32));
        let text = timeline_lines(&t);
        assert!(
            text.contains("KVM's ratio 0x68b2d29b5 / 2^32 on a 2000000 kHz host"),
            "{text}"
        );
        (t.lost_events, t.lost_windows) = (7, 2);
        let text = timeline_lines(&t);
        assert!(
            text.contains(
                "7 trace events lost (in 2 windows: the samples there are unattributable)"
            ),
            "{text}"
        );
        t.lost_unplaced = 3;
        let text = timeline_lines(&t);
        assert!(text.contains("so every sample is unattributable"), "{text}");
    }

    #[test]
    fn segments_with_host_data_get_a_row_and_reasons_sort_by_host_time() {
        let mut c = Crossing::from_round_trips("getppid", 2, &[100, 120], 0, "no hooks".into());
        let mut host = SegmentHost {
            samples: 2,
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[100]),
            ..Default::default()
        };
        host.exits.insert(
            "intr".into(),
            ReasonCost {
                count: 1,
                host_ticks: 5,
            },
        );
        host.exits.insert(
            "npf".into(),
            ReasonCost {
                count: 2,
                host_ticks: 50,
            },
        );
        c.round_trip.as_mut().unwrap().host = Some(host);
        let text = attribution_table(&[c.clone()], Verdict::Verified);
        let row = text.lines().find(|l| l.starts_with("getppid")).unwrap();
        assert!(row.contains("npf 2/50, intr 1/5"), "{row}");
        assert!(text.starts_with("host exits by sample segment (corrected"));
        assert!(!text.contains("UNVERIFIED") && !text.contains("INFERRED"));
        let unverified = attribution_table(&[c.clone()], Verdict::NotVerified);
        assert!(unverified.contains("UNVERIFIED TIMELINE"), "{unverified}");
        let consistent = attribution_table(&[c], Verdict::Consistent);
        assert!(consistent.contains("OFFSET INFERRED"), "{consistent}");
        assert!(!consistent.contains("UNVERIFIED"), "{consistent}");
        let plain = Crossing::from_round_trips("x", 1, &[1], 0, "no hooks".into());
        assert_eq!(attribution_table(&[plain], Verdict::Verified), "");
    }

    /// A crossing that spans CPUs gets a row of the other vCPUs' exits
    /// under its round trip, by host time too; one without them none.
    #[test]
    fn the_other_vcpus_exits_get_a_row_of_their_own() {
        let mut c = Crossing::from_round_trips("wake", 3, &[100, 120, 90], 0, "x".into());
        let mut other = crate::attribution::OtherVcpus {
            samples: 3,
            samples_with_exits: 2,
            ..Default::default()
        };
        for (reason, count, host_ticks) in [("hlt", 2, 900), ("interrupt", 3, 70)] {
            other
                .exits
                .insert(reason.into(), ReasonCost { count, host_ticks });
        }
        c.round_trip.as_mut().unwrap().host = Some(SegmentHost {
            samples: 3,
            other_vcpus: Some(other),
            ..Default::default()
        });
        let text = attribution_table(&[c.clone()], Verdict::Verified);
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("wake")).collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!(rows[0].contains("round_trip"), "{text}");
        let other = rows[1];
        assert!(other.contains("other vCPUs"), "{text}");
        assert!(other.ends_with("hlt 2/900, interrupt 3/70"), "{other}");
        let cells: Vec<&str> = other.split_whitespace().collect();
        assert_eq!(&cells[3..5], ["3", "2"], "{other}");
        c.round_trip
            .as_mut()
            .unwrap()
            .host
            .as_mut()
            .unwrap()
            .other_vcpus = None;
        let text = attribution_table(&[c], Verdict::Verified);
        assert!(!text.contains("other vCPUs"), "{text}");
    }

    #[test]
    fn traced_exits_get_their_parts_and_the_probe_effect() {
        use crate::exit_trace::{Parts, TracedExit};
        let parts = Parts {
            guest_to_host: vec![40, 50],
            in_host: vec![300, 320],
            host_to_guest: vec![60, 70],
            no_exit: 1,
            samples: 3,
            ..Default::default()
        };
        let mut e = crate::fixtures::report(crate::Environment::Microguest, 1);
        let mut exit = crate::ExitTiming::new("cpuid", None, crate::Status::Measured, (3, 3), None);
        assert_eq!(traced_exit_table(std::slice::from_ref(&exit)), "");
        exit.traced = Some(TracedExit::new(&parts, &[], &[500, 520], &[480, 490]));
        e.exits.push(exit);
        let text = traced_exit_table(&e.exits);
        let row = text.lines().find(|l| l.starts_with("cpuid")).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        // Medians of two values are the lower ones.
        assert_eq!(cols, ["cpuid", "2/3", "0", "40", "300", "-", "60", "+20"]);
        assert!(text.contains("(1 samples without a traced exit, 0 with more than one)"));
    }

    /// A row whose samples are mostly a path of several exits says how
    /// many and what they cost in the host together; a row with a few
    /// such samples does not.
    #[test]
    fn a_path_of_several_exits_is_summed_in_the_note() {
        use crate::exit_trace::{Parts, TracedExit};
        let mut parts = Parts {
            more_exits: 3,
            samples: 4,
            exits_per_sample: vec![3, 3, 3, 0],
            in_host_several: vec![900, 1000, 700],
            no_exit: 1,
            ..Default::default()
        };
        let row = |parts: &Parts| {
            let family = Some(crate::ExitFamily::Interrupt);
            let status = crate::Status::Measured;
            let mut exit = crate::ExitTiming::new("x2apic-self-ipi", family, status, (4, 4), None);
            exit.traced = Some(TracedExit::new(parts, &[], &[2000], &[1900]));
            traced_exit_table(&[exit])
        };
        let text = row(&parts);
        assert!(
            text.contains(
                "(1 samples without a traced exit, 3 with more than one: median 3 exits a sample, \
                 900 ticks in the host together)"
            ),
            "{text}"
        );
        assert!(text.contains("-- APIC and interrupts"), "{text}");
        parts.more_exits = 2;
        let text = row(&parts);
        assert!(text.contains("2 with more than one)"), "{text}");
    }
}
