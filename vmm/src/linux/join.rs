//! A traced run's guest stamps and host exits on one timeline: the mapping
//! from KVM's offset (or from the calibration exits where KVM cannot say),
//! its verification against the calibration exits, and the attribution of
//! every exit to the sample segment it fell in
//! (`xvmm_results::{timeline, attribution}`).

use crate::host_trace::TraceSummary;
use std::collections::HashMap;
use xvmm_results::attribution::{self, Index};
use xvmm_results::timeline::{self, CalibrationPair, Mapping, Timeline};
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
    /// The host's TSC rate.
    pub host_khz: u64,
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

/// The mapping to check: KVM's offset when it reports one, else the middle
/// of the offsets the calibration allows (then only their consistency is
/// checked, and the report says so).
fn mapping(tsc: &TscFacts, trace: &TraceSummary, pairs: &[CalibrationPair]) -> (Mapping, String) {
    let scaled = |offset| match tsc.requested_khz {
        Some(_) => Mapping::scaled(offset, u64::from(tsc.guest_khz), tsc.host_khz),
        None => Mapping::unscaled(offset),
    };
    let (mut m, source) = match tsc.offset_before {
        Some(offset) => (scaled(offset), "KVM_VCPU_TSC_OFFSET".to_string()),
        None => {
            let range = timeline::verify(&scaled(0), pairs).offset_range;
            let offset = range.map_or(0, |r| r.low / 2 + r.high / 2);
            (
                scaled(offset),
                "the calibration exits (this KVM cannot report its offset)".into(),
            )
        }
    };
    m.changes = trace.offset_changes.clone();
    m.changes.sort_by_key(|c| c.host_tsc);
    (m, source)
}

/// Why the timeline cannot be trusted, if it cannot.
fn refusal(report: &Report, run_id: &str, v: &timeline::Verification) -> Option<String> {
    if report.run_id.as_deref() != Some(run_id) {
        return Some(format!(
            "the results carry run id {:?}, this run's is {run_id:?}: they are not from this run",
            report.run_id.as_deref().unwrap_or("none")
        ));
    }
    if v.checks == 0 {
        return Some("no calibration exit was seen by both the guest and the host".into());
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
pub fn add_timeline(report: &mut Report, trace: &TraceSummary, tsc: &TscFacts, run_id: &str) {
    let (pairs, unmatched) = pairs(report, trace);
    let (mapping, offset_source) = mapping(tsc, trace, &pairs);
    let v = timeline::verify(&mapping, &pairs);
    let reason = refusal(report, run_id, &v);
    let measured_khz = v
        .measured_ratio
        .filter(|_| tsc.host_khz > 0)
        .map(|r| (r * tsc.host_khz as f64).round() as u64);
    if tsc.offset_before.is_some() && tsc.offset_before != tsc.offset_after {
        report.notes.push(format!(
            "KVM's TSC offset was {} before the run and {} after ({} rewrites traced)",
            tsc.offset_before.unwrap_or_default(),
            tsc.offset_after.map_or("unknown".into(), |o| o.to_string()),
            trace.offset_changes.len()
        ));
    }
    report.timeline = Some(Timeline {
        offset: mapping.offset,
        offset_source,
        ratio: mapping.ratio(),
        checks: v.checks,
        violations: v.violations,
        bound_ticks: v.bound_ticks,
        verified: reason.is_none(),
        reason: reason.clone(),
        offset_changes: mapping.changes.clone(),
        measured_offset: v.offset_range,
        requested_offset: tsc.requested_offset,
        measured_khz,
        requested_khz: tsc.requested_khz,
        unmatched,
        lost_events: trace.lost,
    });
    // Results from another run are not joined at all; an unverified
    // timeline is joined and marked as such wherever it shows.
    if report.run_id.as_deref() == Some(run_id) {
        attribution::attribute(report, &Index::new(&trace.trace, &mapping), Some(0));
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
    use xvmm_results::timeline::GuestCalibration;
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
                }],
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

    #[test]
    fn a_consistent_run_is_verified_and_attributed() {
        let (mut r, trace, tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "ab");
        let t = r.timeline.as_ref().unwrap();
        assert!(t.verified, "{t:?}");
        assert_eq!((t.checks, t.violations, t.bound_ticks), (2, 0, 100));
        let m = t.measured_offset.unwrap();
        assert!(m.low <= -1000 && -1000 <= m.high, "{m:?}");
        let host = r.crossings[0].u2k.as_ref().unwrap().host.as_ref().unwrap();
        assert_eq!((host.samples, host.samples_with_exits), (1, 1));
        assert_eq!(host.exits["npf"].host_ticks, 300);
    }

    #[test]
    fn a_wrong_offset_another_run_or_no_calibration_is_never_verified() {
        let (mut r, trace, mut tsc) = run();
        tsc.offset_before = Some(0);
        add_timeline(&mut r, &trace, &tsc, "ab");
        let t = r.timeline.as_ref().unwrap();
        assert!(!t.verified);
        assert_eq!(t.violations, 2);
        assert!(t.reason.as_deref().unwrap().contains("2 of 2"));

        let (mut r, trace, tsc) = run();
        add_timeline(&mut r, &trace, &tsc, "cd");
        let t = r.timeline.as_ref().unwrap();
        assert!(t.reason.as_deref().unwrap().contains("not from this run"));
        assert!(r.crossings[0].u2k.as_ref().unwrap().host.is_none());

        let (mut r, mut trace, tsc) = run();
        trace.calibrations.clear();
        add_timeline(&mut r, &trace, &tsc, "ab");
        let t = r.timeline.as_ref().unwrap();
        assert_eq!((t.checks, t.unmatched), (0, 2));
        assert!(!t.verified);
    }

    #[test]
    fn without_kvm_offset_the_calibration_gives_it() {
        let (mut r, trace, mut tsc) = run();
        tsc.offset_before = None;
        add_timeline(&mut r, &trace, &tsc, "ab");
        let t = r.timeline.as_ref().unwrap();
        assert!(t.verified);
        assert!(t.offset_source.contains("calibration"));
        assert!((-1080..=-920).contains(&t.offset), "{}", t.offset);
    }
}
