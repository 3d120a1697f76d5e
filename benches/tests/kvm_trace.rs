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
    let (rec, report) = recorded::load().unwrap();
    let kept: u64 = report
        .crossings
        .iter()
        .map(|c| c.samples.as_ref().map_or(0, Vec::len) as u64)
        .sum();
    let exits = rec.replay().aggregator.finish(0).trace.exits.len() as u64;
    let (mut tiled, trace, mapping) = recorded::tiled(&rec, &report, kept + 1, exits + 1);
    assert_eq!(trace.exits.len() as u64, 2 * exits);
    let index = Index::for_report(&trace, &mapping, &tiled, Some(0));
    attribution::attribute(&mut tiled, &index, Some(0));
    for (one, two) in hosts(&report).iter().zip(hosts(&tiled)) {
        let (one, two) = (one.as_ref().unwrap(), two.unwrap());
        assert_eq!(two.samples, 2 * one.samples);
        assert_eq!(two.samples_with_exits, 2 * one.samples_with_exits);
        assert_eq!(two.unattributable, 2 * one.unattributable);
        assert_eq!(two.exit_free.count, 2 * one.exit_free.count);
        assert_eq!(two.exit_free.median, one.exit_free.median);
    }
}
