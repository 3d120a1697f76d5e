//! The timeline of a traced run and where the host's exits fell: one line
//! for the mapping and its check, one table row per crossing segment.

use super::table::Table;
use super::{cell, median};
use crate::attribution::{SegmentHost, SEGMENTS};
use crate::escape::visible;
use crate::timeline::Timeline;
use crate::{Crossing, ExitTiming};
use std::fmt::Write as _;

/// The mapping, how it was checked, and requested vs measured controls.
pub fn timeline_lines(t: &Timeline) -> String {
    let mut out = String::new();
    let verdict = if t.verified {
        "verified".to_string()
    } else {
        format!(
            "NOT VERIFIED: {}",
            visible(t.reason.as_deref().unwrap_or("unknown"))
        )
    };
    let _ = writeln!(
        out,
        "timeline: guest TSC = host TSC x {:.6} {} {} (offset from {}); {} calibration exits, \
         {} violations, bound {} ticks: {verdict}",
        t.ratio,
        if t.offset < 0 { '-' } else { '+' },
        t.offset.unsigned_abs(),
        visible(&t.offset_source),
        t.checks,
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
    if t.requested_khz.is_some() || t.measured_khz.is_some() {
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} kHz"));
        let _ = writeln!(
            out,
            "  TSC rate: requested {}, measured {}",
            show(t.requested_khz.map(u64::from)),
            show(t.measured_khz)
        );
    }
    if !t.offset_changes.is_empty() || t.unmatched > 0 || t.lost_events > 0 {
        let _ = writeln!(
            out,
            "  {} offset rewrites during the run, {} calibration exits seen by one side only, \
             {} trace events lost",
            t.offset_changes.len(),
            t.unmatched,
            t.lost_events
        );
    }
    out
}

/// Exits by reason, most host time first: `npf 3/1200, intr 1/90`.
fn reasons(h: &SegmentHost) -> String {
    let shown: Vec<String> = h
        .reasons_by_host_time()
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
/// all samples', and the exits by reason (count / host ticks).
pub fn attribution_table(crossings: &[Crossing], verified: bool) -> String {
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
        }
    }
    if !any {
        return String::new();
    }
    let mut out = String::from(if verified {
        "host exits by sample segment (corrected guest ticks; an exit belongs to the segment \
         its kvm_exit falls in)\n"
    } else {
        "host exits by sample segment -- UNVERIFIED TIMELINE: placements may be wrong\n"
    });
    out += &t.render();
    out
}

/// VM exits cut at the host's tracepoints, with the probe effect.
pub fn traced_exit_table(exits: &[ExitTiming]) -> String {
    let traced: Vec<_> = exits
        .iter()
        .filter_map(|e| Some((e, e.traced.as_ref()?)))
        .collect();
    if traced.is_empty() {
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
    for (e, x) in traced {
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
            t.note(format!(
                "({} samples without a traced exit, {} with more than one)",
                x.no_exit, x.more_exits
            ));
        }
    }
    let mut out = String::from(
        "VM exits at the host's tracepoints (medians, TSC ticks; kvm_exit/kvm_entry fire in \
         KVM's C code, hundreds of instructions from VMRUN/VMRESUME, so guest->host and \
         host->guest include that code; probe effect = traced - untraced round-trip median, \
         rounds alternated)\n",
    );
    out += &t.render();
    out
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
            checks: 256,
            violations: u64::from(!verified),
            bound_ticks: 900,
            verified,
            reason: (!verified).then(|| "1 of 256 \x1b[2J".into()),
            offset_changes: vec![],
            measured_offset: Some(OffsetRange { low: -9, high: -1 }),
            requested_offset: Some(-5),
            measured_khz: Some(2_000_100),
            requested_khz: Some(2_000_000),
            unmatched: 0,
            lost_events: 0,
        }
    }

    #[test]
    fn the_timeline_line_says_verified_or_why_not_escaped() {
        let ok = timeline_lines(&timeline(true));
        assert!(ok.contains("256 calibration exits, 0 violations, bound 900 ticks: verified"));
        assert!(ok.contains("host TSC x 1.000000 - 5 (offset from KVM_VCPU_TSC_OFFSET)"));
        assert!(ok.contains("requested -5, the guest ran with one in [-9, -1]"));
        assert!(ok.contains("requested 2000000 kHz, measured 2000100 kHz"));
        let bad = timeline_lines(&timeline(false));
        assert!(bad.contains("NOT VERIFIED: 1 of 256 \\x1b[2J"), "{bad}");
        assert!(!bad.contains('\x1b'));
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
        let text = attribution_table(&[c.clone()], true);
        let row = text.lines().find(|l| l.starts_with("getppid")).unwrap();
        assert!(row.contains("npf 2/50, intr 1/5"), "{row}");
        assert!(text.starts_with("host exits by sample segment (corrected"));
        assert!(attribution_table(&[c], false).contains("UNVERIFIED"));
        let plain = Crossing::from_round_trips("x", 1, &[1], 0, "no hooks".into());
        assert_eq!(attribution_table(&[plain], true), "");
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
        let mut exit = crate::ExitTiming {
            name: "cpuid".into(),
            status: crate::Status::Measured,
            samples_requested: 3,
            samples_valid: 3,
            round_trip: None,
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
            split: None,
            traced: None,
        };
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
}
