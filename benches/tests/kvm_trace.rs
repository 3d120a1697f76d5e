//! The recorded real trace the ingestion benches run on
//! (`benches/data/kvm_trace`, recorded in the nested harness by its
//! `record.sh`): it decodes whole, the text and binary readers pair the
//! same exits from it, the fast decode path gives what the general one
//! gives event by event, and it attributes the samples of its run's report
//! as xvmm's live trace did during that run (a second capture of the same
//! exits: the same samples hit, by the same exits; host times within what
//! two instances' stamps of one event differ by). Controls: the timeline
//! moved does not agree, and the run tiled twice attributes twice the
//! samples.

use xvmm_benches::recorded;
use xvmm_results::attribution::{self, Index, SegmentHost};
use xvmm_results::timeline::Mapping;
use xvmm_results::Report;

fn hosts(report: &Report) -> Vec<Option<SegmentHost>> {
    report
        .crossings
        .iter()
        .flat_map(|c| [&c.u2k, &c.k2u, &c.round_trip])
        .map(|i| i.as_ref().and_then(|i| i.host.clone()))
        .collect()
}

fn attributed(report: &Report, recording: &xvmm::host_trace::Recording, offset: i64) -> Report {
    let trace = recording.replay().aggregator.finish(0).trace;
    let mut again = report.clone();
    let mut mapping = Mapping::unscaled(offset);
    if let Some(t) = &report.timeline {
        mapping.changes = t.offset_changes.clone();
    }
    let index = Index::for_report(&trace, &mapping, &again, Some(0));
    attribution::attribute(&mut again, &index, Some(0));
    again
}

#[test]
fn the_recording_decodes_whole_and_both_readers_agree() {
    let (rec, report) = recorded::load().unwrap();
    assert!(report.timeline.as_ref().is_some_and(|t| t.verified));
    let r = rec.replay();
    assert_eq!(r.corrupt_pages, 0);
    let events = r.events;
    let summary = r.aggregator.finish(0);
    assert!(summary.trace.lost.is_empty());
    assert!(
        summary.trace.exits.len() > 1000,
        "{}",
        summary.trace.exits.len()
    );
    assert_eq!(summary.calibrations.len() as u64, xvmm::linux::CALIBRATIONS);
    let text = recorded::text(&rec);
    assert_eq!(
        recorded::read_text(&text, 1).0,
        summary.trace.exits.len() as u64
    );
    assert_eq!(
        recorded::replay(&rec, 2).0,
        2 * summary.trace.exits.len() as u64
    );
    for general in [false, true] {
        assert_eq!(recorded::decode(&rec, 1, general).0, events);
        assert_eq!(recorded::decode(&rec, 3, general).0, 3 * events);
    }
    for (_, page) in rec.pages() {
        let (mut fast, mut general) = (Vec::new(), Vec::new());
        rec.decoder.decode_page(page, |ts, ev| fast.push((ts, ev)));
        rec.decoder
            .decode_page_general(page, |ts, ev| general.push((ts, ev)));
        assert_eq!(fast, general);
    }
}

#[test]
fn the_recording_attributes_the_samples_as_the_live_trace_did() {
    let (rec, report) = recorded::load().unwrap();
    let t = report.timeline.as_ref().unwrap();
    let live = hosts(&report);
    let agree = |offset: i64| -> Result<(), String> {
        let again = hosts(&attributed(&report, &rec, offset));
        for (a, b) in live.iter().zip(&again) {
            let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
            recorded::same_attribution(a, b)?;
        }
        Ok(())
    };
    assert!(live.iter().all(Option::is_some), "{live:?}");
    agree(t.offset).unwrap();
    // Control: the same exits a million ticks off the timeline land in
    // other samples.
    assert!(agree(t.offset + 1_000_000).is_err());
}

#[test]
fn the_run_tiled_twice_attributes_twice_the_samples() {
    let (rec, mut report) = recorded::load().unwrap();
    // Rejections move with their copy (the recorded run has none).
    report.crossings[0].samples_rejected = vec![0, 5];
    let kept: u64 = report
        .crossings
        .iter()
        .map(|c| c.samples.as_ref().map_or(0, Vec::len) as u64)
        .sum();
    let exits = rec.replay().aggregator.finish(0).trace.exits.len() as u64;
    let (mut tiled, trace, mapping) = recorded::tiled(&rec, &report, kept + 1, exits + 1);
    assert_eq!(trace.exits.len() as u64, 2 * exits);
    for (one, two) in report.crossings.iter().zip(&tiled.crossings) {
        let (a, b) = (one.samples.as_ref().unwrap(), two.samples.as_ref().unwrap());
        assert_eq!(b.len(), 2 * a.len());
        assert_eq!(&b[..a.len()], &a[..]);
        // The second copy lies after the first, whole.
        let last = a.iter().map(|s| s.k2u_u).max().unwrap();
        assert!(b[a.len()..].iter().all(|s| s.u2k_u > last));
        assert_eq!(two.samples_requested, 2 * one.samples_requested);
        assert_eq!(two.samples_valid, 2 * one.samples_valid);
    }
    let len = report.crossings[0].samples.as_ref().unwrap().len() as u64;
    assert_eq!(tiled.crossings[0].samples_rejected, [0, 5, len, len + 5]);
    let index = Index::for_report(&trace, &mapping, &tiled, Some(0));
    attribution::attribute(&mut tiled, &index, Some(0));
    let once = rec.replay().aggregator.finish(0).trace;
    let index = Index::for_report(&once, &mapping, &report, Some(0));
    attribution::attribute(&mut report, &index, Some(0));
    for (one, two) in hosts(&report).iter().zip(hosts(&tiled)) {
        let (one, two) = (one.as_ref().unwrap(), two.unwrap());
        assert_eq!(two.samples, 2 * one.samples);
        assert_eq!(two.samples_with_exits, 2 * one.samples_with_exits);
        assert_eq!(two.unattributable, 2 * one.unattributable);
        assert_eq!(two.exit_free.count, 2 * one.exit_free.count);
        assert_eq!(two.exit_free.median, one.exit_free.median);
        assert_eq!(two.host_ticks_total, 2 * one.host_ticks_total);
        for (reason, cost) in &one.exits {
            assert_eq!(two.exits[reason].count, 2 * cost.count, "{reason}");
        }
        assert_eq!(two.exits.len(), one.exits.len());
    }
}

fn segment(samples_with_exits: u64, exits: &[(&str, u64, u64)]) -> SegmentHost {
    SegmentHost {
        samples: 100,
        samples_with_exits,
        exits: exits
            .iter()
            .map(|&(r, count, host_ticks)| {
                let cost = attribution::ReasonCost { count, host_ticks };
                (r.to_string(), cost)
            })
            .collect(),
        host_ticks_total: exits.iter().map(|e| e.2).sum(),
        ..SegmentHost::default()
    }
}

#[test]
fn two_captures_agree_only_when_the_same_samples_meet_the_same_exits() {
    let apart = recorded::INSTANCES_APART;
    let live = segment(2, &[("msr", 2, 1000)]);
    assert!(recorded::same_attribution(&live, &live).is_ok());
    // Host time: up to INSTANCES_APART per exit apart.
    let near = segment(2, &[("msr", 2, 1000 + 2 * apart)]);
    assert!(recorded::same_attribution(&live, &near).is_ok());
    let far = segment(2, &[("msr", 2, 1001 + 2 * apart)]);
    assert!(recorded::same_attribution(&live, &far).is_err());
    // Other samples, or other exits, alone.
    assert!(recorded::same_attribution(&live, &segment(3, &[("msr", 2, 1000)])).is_err());
    assert!(recorded::same_attribution(&live, &segment(2, &[("npf", 2, 1000)])).is_err());
    assert!(recorded::same_attribution(&live, &segment(2, &[("msr", 3, 1000)])).is_err());
    let mut other_free = live.clone();
    other_free.exit_free.count = 7;
    assert!(recorded::same_attribution(&live, &other_free).is_err());
}
