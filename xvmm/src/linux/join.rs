//! A traced run's guest stamps and host exits on one timeline: the mapping
//! from KVM's offset (or from the calibration exits where KVM cannot say),
//! its verification against the calibration exits, and the attribution of
//! every exit to the sample segment it fell in
//! (`xvmm_results::{timeline, attribution}`).

use crate::host_trace::TraceSummary;
use std::collections::HashMap;
use xvmm_results::attribution::{self, Index};
use xvmm_results::timeline::{self, CalibrationPair, Mapping, Timeline, TscScaling};
use xvmm_results::Report;

/// Calibration exits xvmm asks a traced xperf for.
pub const CALIBRATIONS: u64 = 256;

/// What the VMM knows about the guest's TSC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TscFacts {
    /// KVM's offset before the guest ran and after (`KVM_VCPU_TSC_OFFSET`;
    /// `None` where KVM cannot report it).
    pub offset_before: Option<i64>,
    pub offset_after: Option<i64>,
    /// The guest's TSC rate KVM reports (`KVM_GET_TSC_KHZ`).
    pub guest_khz: u32,
    pub requested_offset: Option<i64>,
    pub requested_khz: Option<u32>,
    /// The host kernel's `tsc_khz` as KVM reports it on the VM, the divisor
    /// of its ratio (0: unknown; the caller may fill in a probed rate).
    pub host_khz: u64,
    /// How this KVM scales (`None`: not known, e.g. no vendor module).
    pub scaling: Option<TscScaling>,
}

/// Calibration exits both sides know, by index; and how many only one does.
fn pairs(report: &Report, trace: &TraceSummary) -> (Vec<CalibrationPair>, u64) {
    let mut host: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut unmatched = 0u64;
    for c in &trace.calibrations {
        if host.insert(c.index, (c.exit, c.entry)).is_some() {
            unmatched += 1;
        }
    }
    let mut out = Vec::with_capacity(report.calibration.len());
    for g in &report.calibration {
        match host.remove(&g.0) {
            Some((exit, entry)) => out.push(CalibrationPair {
                guest_before: g.1,
                guest_after: g.2,
                host_exit: exit,
                host_entry: entry,
            }),
            None => unmatched += 1,
        }
    }
    (out, unmatched + host.len() as u64)
}

/// The mapping KVM ran the guest with at `offset`: its ratio, when
/// `--tsc-khz` asked for a rate, computed as KVM computes it; an error
/// where that cannot be done here (the ratio 1 is used then).
fn kvm_mapping(tsc: &TscFacts, offset: i64) -> Result<Mapping, String> {
    let Some(khz) = tsc.requested_khz else {
        return Ok(Mapping::unscaled(offset));
    };
    let scaling = tsc
        .scaling
        .ok_or("KVM's TSC ratio is unknown here (neither kvm_amd nor kvm_intel is loaded)")?;
    let host = u32::try_from(tsc.host_khz).unwrap_or(0);
    Mapping::scaled(offset, khz, host, scaling)
        .map_err(|why| format!("KVM's TSC ratio cannot be computed: {why}"))
}

/// The mapping to check, where its offset came from, whether that was
/// inferred from the pairs themselves, and why no exact mapping could be
/// made (if it could not): KVM's offset when it reports one, else the
/// middle of the offsets the calibration allows.
struct Chosen {
    mapping: Mapping,
    source: String,
    inferred: bool,
    failure: Option<String>,
}

fn mapping(tsc: &TscFacts, trace: &TraceSummary, pairs: &[CalibrationPair]) -> Chosen {
    let failure = kvm_mapping(tsc, 0).err();
    let make = |offset| kvm_mapping(tsc, offset).unwrap_or_else(|_| Mapping::unscaled(offset));
    let (mut mapping, source, inferred) = match tsc.offset_before {
        Some(offset) => (make(offset), "KVM_VCPU_TSC_OFFSET".to_string(), false),
        None => {
            let range = timeline::verify(&make(0), pairs).offset_range;
            let offset = range.map_or(0, |r| r.low / 2 + r.high / 2);
            (
                make(offset),
                "the calibration exits (this KVM cannot report its offset)".into(),
                true,
            )
        }
    };
    mapping.changes = trace.offset_changes.clone();
    mapping.changes.sort_by_key(|c| c.host_tsc);
    Chosen {
        mapping,
        source,
        inferred,
        failure,
    }
}

/// Why the timeline cannot be trusted, if it cannot.
fn refusal(
    report: &Report,
    run_id: &str,
    v: &timeline::Verification,
    calibrations: u64,
    failure: Option<&str>,
) -> Option<String> {
    if report.run_id.as_deref() != Some(run_id) {
        return Some(format!(
            "the results carry run id {:?}, this run's is {run_id:?}: they are not from this run",
            report.run_id.as_deref().unwrap_or("none")
        ));
    }
    if let Some(why) = failure {
        return Some(why.to_string());
    }
    if let Some(why) = timeline::too_few_matched(v.checks, calibrations) {
        return Some(why);
    }
    (v.violations > 0).then(|| {
        format!(
            "{} of {} calibration exits fall outside the guest's own stamps under this mapping",
            v.violations, v.checks
        )
    })
}

/// Verifies the timeline of a traced run, writes it into `report`, and
/// attributes every traced exit to the samples (when the guest kept them).
/// `calibrations` is how many calibration exits the guest was asked for.
pub fn add_timeline(
    report: &mut Report,
    trace: &TraceSummary,
    tsc: &TscFacts,
    run_id: &str,
    asked_samples: Option<u64>,
    calibrations: u64,
) {
    let (pairs, unmatched) = pairs(report, trace);
    let chosen = mapping(tsc, trace, &pairs);
    let v = timeline::verify(&chosen.mapping, &pairs);
    let calibrations = calibrations.max(v.checks + unmatched);
    let reason = refusal(report, run_id, &v, calibrations, chosen.failure.as_deref());
    if tsc.offset_before.is_some() && tsc.offset_before != tsc.offset_after {
        report.notes.push(format!(
            "KVM's TSC offset was {} before the run and {} after ({} rewrites traced)",
            tsc.offset_before.unwrap_or_default(),
            tsc.offset_after.map_or("unknown".into(), |o| o.to_string()),
            trace.offset_changes.len()
        ));
    }
    let mapping = chosen.mapping;
    let scaled = mapping.ratio_fixed != 1 << mapping.frac_bits;
    report.timeline = Some(Timeline {
        offset: mapping.offset,
        offset_source: chosen.source,
        ratio: mapping.ratio(),
        ratio_fixed: scaled.then_some(mapping.ratio_fixed),
        ratio_frac_bits: scaled.then_some(mapping.frac_bits),
        host_khz: (tsc.host_khz > 0).then_some(tsc.host_khz),
        checks: v.checks,
        calibrations,
        violations: v.violations,
        bound_ticks: v.bound_ticks,
        verified: reason.is_none() && !chosen.inferred,
        offset_inferred: chosen.inferred,
        reason: reason.clone(),
        offset_changes: mapping.changes.clone(),
        measured_offset: v.offset_range,
        requested_offset: tsc.requested_offset,
        measured_khz: v
            .measured_ratio
            .filter(|_| tsc.host_khz > 0)
            .map(|r| xvmm_results::num::u64_saturating((r * tsc.host_khz as f64).round())),
        requested_khz: tsc.requested_khz,
        unmatched,
        lost_events: trace.lost,
        lost_windows: trace.trace.lost.len() as u64,
        lost_unplaced: trace.lost_unplaced,
    });
    // Results from another run are not joined at all; an unverified
    // timeline is joined and marked as such wherever it shows.
    if report.run_id.as_deref() == Some(run_id) {
        // Only the exits inside samples are indexed: a long run's millions
        // between them would cost 40 bytes each here.
        let index = Index::for_report(&trace.trace, &mapping, report, Some(0));
        // What the host asked for bounds the samples, not what the guest
        // says was requested.
        attribution::attribute_asked(report, &index, Some(0), asked_samples);
        if reason.is_none() {
            super::async_pf::attribute_not_present(report, trace, &mapping);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_trace::HostCalibration;
    use xvmm_results::attribution::{HostExitEvent, HostTrace};
    use xvmm_results::timeline::{GuestCalibration, Verdict};
    use xvmm_results::{Corrections, Crossing, Environment, Method, Sample};

    /// A guest at offset -1000 with two calibration exits and one getppid
    /// sample whose u2k holds an exit.
    fn run() -> (Report, TraceSummary, TscFacts) {
        let mut r = Report::new(
            "xperf".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 1),
        );
        r.run_id = Some("ab".into());
        r.calibration = vec![
            GuestCalibration(0, 9_000, 9_100),
            GuestCalibration(1, 99_000, 99_100),
        ];
        let s = Sample {
            u2k_u: 50_000,
            u2k_k: 50_500,
            k2u_k: 50_600,
            k2u_u: 50_700,
            cpu: Some(0),
            interrupts: None,
        };
        let mut c = Crossing::from_samples("getppid", 1, &[s], &Corrections::default(), true);
        c.samples = Some(vec![s]);
        r.crossings.push(c);
        let trace = TraceSummary {
            calibrations: vec![
                HostCalibration {
                    index: 0,
                    exit: 10_020,
                    entry: 10_080,
                },
                HostCalibration {
                    index: 1,
                    exit: 100_020,
                    entry: 100_080,
                },
            ],
            trace: HostTrace {
                reasons: vec!["npf".into()],
                exits: vec![HostExitEvent {
                    vcpu: 0,
                    exit: 51_100,
                    entry: 51_400,
                    reason: 0,
                }]
                .into(),
                lost: vec![],
            },
            ..Default::default()
        };
        let tsc = TscFacts {
            offset_before: Some(-1000),
            offset_after: Some(-1000),
            guest_khz: 1_000_000,
            host_khz: 1_000_000,
            ..Default::default()
        };
        (r, trace, tsc)
    }

    /// Issue item 6: a guest that says it was asked for more samples than
    /// the host asked for is not attributed, however few it sent; without
    /// the host's figure its own bounds it.
    #[test]
    fn the_host_not_the_guest_says_how_many_samples_were_asked_for() {
        let (mut r, trace, tsc) = run();
        r.crossings[0].samples_requested = 1000;
        add_timeline(&mut r, &trace, &tsc, "ab", Some(1), 2);
        let host = r.crossings[0].u2k.as_ref().unwrap().host.as_ref().unwrap();
        let why = host.reason.as_deref().unwrap_or_default();
        assert!(why.contains("the host asked for 1"), "{host:?}");
        let (mut r, trace, tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "ab", Some(1), 2);
        let host = r.crossings[0].u2k.as_ref().unwrap().host.as_ref().unwrap();
        assert_eq!((host.reason.as_deref(), host.samples), (None, 1));
    }

    #[test]
    fn a_consistent_run_is_verified_and_attributed() {
        let (mut r, trace, tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(t.verified, "{t:?}");
        assert_eq!((t.checks, t.violations, t.bound_ticks), (2, 0, 100));
        let m = t.measured_offset.unwrap();
        assert!(m.low <= -1000 && -1000 <= m.high, "{m:?}");
        let host = r.crossings[0].u2k.as_ref().unwrap().host.as_ref().unwrap();
        assert_eq!((host.samples, host.samples_with_exits), (1, 1));
        assert_eq!(host.exits["npf"].host_ticks, 300);
        // The round trip keeps its slowest sample with that exit, on the
        // guest's TSC (the report's timeline strip).
        let rt = r.crossings[0]
            .round_trip
            .as_ref()
            .unwrap()
            .host
            .as_ref()
            .unwrap();
        let kept = &rt.slowest[0];
        assert_eq!(kept.sample.u2k_u, 50_000);
        assert_eq!(
            (kept.exits[0].reason.as_str(), kept.exits[0].host_ticks),
            ("npf", 300)
        );
    }

    #[test]
    fn a_wrong_offset_another_run_or_no_calibration_is_never_verified() {
        let (mut r, trace, mut tsc) = run();
        tsc.offset_before = Some(0);
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(!t.verified);
        assert_eq!(t.violations, 2);
        assert!(t.reason.as_deref().unwrap().contains("2 of 2"));

        let (mut r, trace, tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "cd", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(t.reason.as_deref().unwrap().contains("not from this run"));
        assert!(r.crossings[0].u2k.as_ref().unwrap().host.is_none());

        let (mut r, mut trace, tsc) = run();
        trace.calibrations.clear();
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert_eq!((t.checks, t.unmatched), (0, 2));
        assert!(!t.verified);
    }

    #[test]
    fn without_kvm_offset_the_calibration_gives_it() {
        let (mut r, trace, mut tsc) = run();
        tsc.offset_before = None;
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert_eq!(t.verdict(), Verdict::Consistent, "{t:?}");
        assert!(t.offset_inferred && !t.verified);
        assert!(t.offset_source.contains("calibration"));
        assert!((-1080..=-920).contains(&t.offset), "{}", t.offset);
    }

    #[test]
    fn an_inferred_offset_is_consistent_never_verified() {
        let (mut r, trace, mut tsc) = run();
        tsc.offset_before = None;
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(!t.verified, "{t:?}");
        let text = xvmm_results::render::timeline_lines(t);
        assert!(text.contains(": consistent (offset inferred)"), "{text}");
        // Pairs no single offset satisfies are not even consistent.
        let (mut r, mut trace, mut tsc) = run();
        tsc.offset_before = None;
        trace.calibrations[1].exit += 5_000;
        trace.calibrations[1].entry += 5_000;
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert_eq!(t.verdict(), Verdict::NotVerified, "{t:?}");
        let text = xvmm_results::render::timeline_lines(t);
        assert!(
            text.contains("NOT VERIFIED") && !text.contains("consistent"),
            "{text}"
        );
    }

    #[test]
    fn a_scaled_guest_is_mapped_with_kvms_own_ratio() {
        // An SVM host whose kernel runs its TSC at 2_445_000 kHz, the guest
        // asked for 1 GHz: guest = floor(host * r / 2^32) - 1000, r =
        // floor(2^32 * 1e6 / 2_445_000), exits around host TSC 2e14.
        let (mut r, mut trace, mut tsc) = run();
        let ratio = (1u128 << 32) * 1_000_000 / 2_445_000;
        let guest = |host: u64| u64::try_from((u128::from(host) * ratio) >> 32).unwrap() - 1000;
        for (i, c) in trace.calibrations.iter_mut().enumerate() {
            c.exit = 200_000_000_000_000 + i as u64 * 1_000_000_000;
            c.entry = c.exit + 60;
            let index = u32::try_from(i).unwrap();
            r.calibration[i] = GuestCalibration(index, guest(c.exit) - 20, guest(c.entry) + 20);
        }
        (tsc.requested_khz, tsc.host_khz) = (Some(1_000_000), 2_445_000);
        tsc.scaling = Some(TscScaling::SVM);
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(t.verified, "{t:?}");
        assert_eq!(
            (t.ratio_fixed, t.ratio_frac_bits),
            (Some(u64::try_from(ratio).unwrap()), Some(32))
        );
        assert_eq!(t.measured_khz, Some(1_000_000));
        // The same run taken for VMX's 48-bit fraction misses by 20 k ticks.
        tsc.scaling = Some(TscScaling::VMX);
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        assert_eq!(r.timeline.as_ref().unwrap().violations, 2);
        // Without the vendor's ratio nothing is guessed.
        tsc.scaling = None;
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert!(
            t.reason.as_deref().unwrap().contains("ratio is unknown"),
            "{t:?}"
        );
    }

    #[test]
    fn one_matched_calibration_exit_in_ten_verifies_nothing() {
        let (mut r, mut trace, tsc) = run();
        r.calibration = (0..10)
            .map(|i| {
                GuestCalibration(
                    i,
                    9_000 + u64::from(i) * 10_000,
                    9_100 + u64::from(i) * 10_000,
                )
            })
            .collect();
        trace.calibrations.truncate(1);
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert_eq!((t.checks, t.unmatched, t.violations), (1, 9, 0));
        assert!(!t.verified, "{t:?}");
        assert!(
            t.reason.as_deref().unwrap().contains("only 1 of 10"),
            "{t:?}"
        );
    }

    #[test]
    fn events_lost_where_the_stream_cannot_say_leave_every_sample_unattributable() {
        let (mut r, mut trace, tsc) = run();
        (trace.lost, trace.lost_unplaced) = (4, 4);
        trace.trace.lost = vec![(0, u64::MAX)];
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let host = r.crossings[0].u2k.as_ref().unwrap().host.as_ref().unwrap();
        assert_eq!((host.samples, host.unattributable), (1, 1));
        let text = xvmm_results::render::timeline_lines(r.timeline.as_ref().unwrap());
        assert!(text.contains("4 trace events lost"), "{text}");
        assert!(text.contains("unattributable"), "{text}");
    }

    /// Calibration exits only one side knows, and a host index seen twice,
    /// each count once as unmatched.
    #[test]
    fn unmatched_calibrations_are_counted_on_both_sides_and_duplicates_once() {
        let (mut r, mut trace, _) = run();
        r.calibration.push(GuestCalibration(7, 200_000, 200_100));
        r.calibration.push(GuestCalibration(8, 300_000, 300_100));
        trace.calibrations.push(HostCalibration {
            index: 9,
            exit: 1,
            entry: 2,
        });
        let (matched, unmatched) = pairs(&r, &trace);
        assert_eq!((matched.len(), unmatched), (2, 3));
        let (r, mut trace, _) = run();
        let again = trace.calibrations[1];
        trace.calibrations.push(again);
        let (matched, unmatched) = pairs(&r, &trace);
        assert_eq!((matched.len(), unmatched), (2, 1));
    }

    /// KVM's offset changing during the run is noted; an unchanged or an
    /// unknown one is not.
    #[test]
    fn an_offset_that_moved_during_the_run_is_noted_and_only_then() {
        let note = |before, after| {
            let (mut r, trace, mut tsc) = run();
            (tsc.offset_before, tsc.offset_after) = (before, after);
            add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
            r.notes
                .iter()
                .find(|n| n.contains("before the run"))
                .cloned()
        };
        let moved = note(Some(-1000), Some(-900)).expect("a note");
        assert!(
            moved.contains("was -1000 before the run and -900 after"),
            "{moved}"
        );
        assert_eq!(note(Some(-1000), Some(-1000)), None);
        assert_eq!(note(None, Some(-900)), None);
        assert!(note(Some(-1000), None)
            .unwrap()
            .contains("and unknown after"));
    }

    /// An unscaled run shows no fixed-point ratio; the host rate only when
    /// known.
    #[test]
    fn an_unscaled_run_has_no_fixed_ratio_and_an_unknown_host_rate_stays_unknown() {
        let (mut r, trace, mut tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "ab", None, 2);
        let t = r.timeline.as_ref().unwrap();
        assert_eq!((t.ratio_fixed, t.ratio_frac_bits), (None, None), "{t:?}");
        assert_eq!(t.host_khz, Some(1_000_000));
        // A third calibration exit far enough away to measure the rate.
        let far = |tsc: &TscFacts| {
            let (mut r, mut trace, _) = run();
            r.calibration
                .push(GuestCalibration(2, 9_999_000, 9_999_100));
            trace.calibrations.push(HostCalibration {
                index: 2,
                exit: 10_000_020,
                entry: 10_000_080,
            });
            add_timeline(&mut r, &trace, tsc, "ab", None, 3);
            r.timeline.unwrap()
        };
        assert_eq!(far(&tsc).measured_khz, Some(1_000_000));
        tsc.host_khz = 0;
        let t = far(&tsc);
        assert_eq!((t.host_khz, t.measured_khz), (None, None), "{t:?}");
    }
}
