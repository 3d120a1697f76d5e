//! The host's half of a run's async page fault figures
//! (`xvmm_results::async_pf`): what was offered, what the guest turned on,
//! the fault server's counts and the kvm tracepoints; and, on a verified
//! timeline, which pf-host-miss samples a `kvm_async_pf_not_present` fell in.

use crate::host_fault::HostFaultSummary;
use crate::host_trace::{AsyncPfEvent, TraceSummary};
use xvmm_results::async_pf::{AsyncPf, PF_HOST_MISS};
use xvmm_results::timeline::Mapping;
use xvmm_results::{Report, Stats, UNFILLED};

/// What the VMM knows about async page faults after a run.
#[derive(Debug, Clone, Default)]
pub struct AsyncPfFacts {
    /// KVM_FEATURE_ASYNC_PF(_INT) offered in CPUID.
    pub offered: bool,
    /// MSR_KVM_ASYNC_PF_EN at the end of the run.
    pub msr_en: Option<u64>,
    pub faults: Option<HostFaultSummary>,
}

/// Writes the host's half into `report.async_pf` (created when the guest
/// sent none but the VMM served faults).
pub fn add_async_pf(report: &mut Report, facts: &AsyncPfFacts, trace: Option<&TraceSummary>) {
    let Some(faults) = &facts.faults else {
        // Only a guest could have put it there; nothing of the host's half
        // comes from a guest.
        if report.async_pf.take().is_some() {
            report.notes.push(
                "the guest sent async page fault figures, but this run served no host faults \
                 (no --host-fault-delay): they were dropped"
                    .into(),
            );
        }
        return;
    };
    if facts.offered && facts.msr_en.is_some_and(|v| v & 1 == 0) {
        report.notes.push(
            "async page faults were offered but the guest kernel did not turn them on \
             (MSR_KVM_ASYNC_PF_EN bit 0 clear): no CONFIG_KVM_GUEST, or `no-kvmapf` on its \
             command line"
                .into(),
        );
    }
    let a = report.async_pf.get_or_insert_with(AsyncPf::default);
    // Every host figure is the VMM's own, whatever the guest sent.
    a.host = Default::default();
    a.on_off = None;
    a.offered = facts.offered;
    a.enabled_by_guest = facts.msr_en.map(|v| v & 1 == 1);
    a.host_fault_delay_ns = u64::try_from(faults.delay.as_nanos()).unwrap_or(u64::MAX);
    let h = &mut a.host;
    h.uffd_faults_served = faults.faults_served;
    h.uffd_latency_ns =
        (!faults.latency_ns.is_empty()).then(|| Stats::from_samples(&faults.latency_ns));
    h.pages_dropped = faults.pages_dropped;
    h.drop_requests = faults.requests;
    h.drop_requests_refused = faults.refused;
    h.last_refusal.clone_from(&faults.last_refusal);
    h.failure.clone_from(&faults.failure);
    if let Some(t) = trace.filter(|t| t.async_pf_traced) {
        let count = |kind| Some(t.async_pf.iter().filter(|(k, _)| *k == kind).count() as u64);
        h.try_async_get_page = count(AsyncPfEvent::TryAsyncGetPage);
        h.repeated_fault = count(AsyncPfEvent::RepeatedFault);
        h.not_present = count(AsyncPfEvent::NotPresent);
        h.completed = count(AsyncPfEvent::Completed);
        h.ready = count(AsyncPfEvent::Ready);
    }
}

/// On a verified timeline: the pf-host-miss samples with a
/// `kvm_async_pf_not_present` inside their window, and in how many of them
/// the host's view agrees with the guest's own (`sample_async`).
pub fn attribute_not_present(report: &mut Report, trace: &TraceSummary, mapping: &Mapping) {
    let mut events: Vec<i128> = trace
        .async_pf
        .iter()
        .filter(|(k, _)| *k == AsyncPfEvent::NotPresent)
        .map(|(_, ts)| mapping.to_guest(*ts))
        .collect();
    events.sort_unstable();
    let Some(samples) = report
        .crossings
        .iter()
        .find(|c| c.name == PF_HOST_MISS)
        .and_then(|c| c.samples.clone())
    else {
        return;
    };
    let Some(a) = report.async_pf.as_mut() else {
        return;
    };
    let host_saw: Vec<bool> = samples
        .iter()
        .map(|s| {
            let (from, to) = (i128::from(s.u2k_u), i128::from(s.k2u_u));
            s.k2u_u != UNFILLED && {
                let first = events.partition_point(|&e| e < from);
                events.get(first).is_some_and(|&e| e <= to)
            }
        })
        .collect();
    a.host.samples_with_not_present = Some(host_saw.iter().filter(|&&b| b).count() as u64);
    // KVM traces "not present" also when it halts a vCPU whose guest did not
    // turn async PF on: only then does the host's view say what the guest got.
    if a.enabled_by_guest == Some(true) && a.guest.sample_async.len() == host_saw.len() {
        let agreeing = host_saw
            .iter()
            .zip(&a.guest.sample_async)
            .filter(|(h, g)| **h == (**g == 1))
            .count();
        a.host.samples_agreeing = Some(agreeing as u64);
        let async_agreeing = host_saw
            .iter()
            .zip(&a.guest.sample_async)
            .filter(|(h, g)| **h && **g == 1)
            .count();
        a.host.samples_async_agreeing = Some(async_agreeing as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{Crossing, Environment, Method, Sample};

    fn sample(from: u64, to: u64) -> Sample {
        Sample {
            u2k_u: from,
            u2k_k: UNFILLED,
            k2u_k: UNFILLED,
            k2u_u: to,
            cpu: Some(0),
            interrupts: None,
        }
    }

    #[test]
    fn not_present_events_land_in_their_samples_on_the_timeline() {
        let mut r = Report::new(
            "xperf".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 3),
        );
        let samples = vec![
            sample(1_000, 2_000),
            sample(3_000, 4_000),
            sample(5_000, 6_000),
        ];
        let mut c = Crossing::from_round_trip_rounds(
            PF_HOST_MISS,
            3,
            &[&[1000, 1000, 1000]],
            0,
            "x".into(),
        );
        c.samples = Some(samples);
        r.crossings.push(c);
        r.async_pf = Some(AsyncPf {
            enabled_by_guest: Some(true),
            guest: xvmm_results::async_pf::AsyncPfGuest {
                sample_async: vec![1, 0, 1],
                ..Default::default()
            },
            ..Default::default()
        });
        // Guest = host - 500: host 1_600 is guest 1_100 (sample 0), host
        // 5_400 is guest 4_900 (between samples 1 and 2: in none).
        let trace = TraceSummary {
            async_pf: vec![
                (AsyncPfEvent::NotPresent, 1_600),
                (AsyncPfEvent::Ready, 3_600),
                (AsyncPfEvent::NotPresent, 5_400),
            ],
            async_pf_traced: true,
            ..Default::default()
        };
        attribute_not_present(&mut r, &trace, &Mapping::unscaled(-500));
        let a = r.async_pf.clone().unwrap();
        assert_eq!(a.host.samples_with_not_present, Some(1));
        // Sample 0 agrees (both), 1 agrees (neither), 2 does not.
        assert_eq!(a.host.samples_agreeing, Some(2));
        // Of the guest's two async samples (0 and 2), the host saw one.
        assert_eq!(a.host.samples_async_agreeing, Some(1));
        // A guest that did not turn async PF on receives none: nothing to agree on.
        r.async_pf.as_mut().unwrap().enabled_by_guest = Some(false);
        r.async_pf.as_mut().unwrap().host.samples_agreeing = None;
        attribute_not_present(&mut r, &trace, &Mapping::unscaled(-500));
        assert_eq!(r.async_pf.unwrap().host.samples_agreeing, None);
    }

    #[test]
    fn host_counts_come_from_the_trace_and_the_server() {
        let mut r = Report::new(
            "xperf".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 1),
        );
        let facts = AsyncPfFacts {
            offered: true,
            msr_en: Some(0x1234_0001),
            faults: Some(HostFaultSummary {
                delay: std::time::Duration::from_micros(200),
                requests: 2,
                pages_dropped: 10,
                faults_served: 10,
                latency_ns: vec![210_000; 10],
                ..Default::default()
            }),
        };
        let trace = TraceSummary {
            async_pf: vec![
                (AsyncPfEvent::NotPresent, 1),
                (AsyncPfEvent::NotPresent, 2),
                (AsyncPfEvent::Completed, 3),
            ],
            async_pf_traced: true,
            ..Default::default()
        };
        add_async_pf(&mut r, &facts, Some(&trace));
        let a = r.async_pf.unwrap();
        assert!(a.offered && a.enabled_by_guest == Some(true));
        assert_eq!(a.host_fault_delay_ns, 200_000);
        assert_eq!(
            (a.host.not_present, a.host.completed, a.host.ready),
            (Some(2), Some(1), Some(0))
        );
        assert_eq!(a.host.uffd_faults_served, 10);
        assert_eq!(a.host.uffd_latency_ns.unwrap().median, 210_000);
        // Without the tracepoints the counts are unknown, not zero.
        let mut r2 = Report::new(
            "x".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 1),
        );
        add_async_pf(&mut r2, &facts, Some(&TraceSummary::default()));
        assert_eq!(r2.async_pf.unwrap().host.not_present, None);
    }
}
