//! KVM asynchronous page faults, measured (`xvmm --host-fault-delay`, the
//! `pf-host-miss` crossing): what the host did, what the guest received, and
//! what a second task on the same vCPU got done meanwhile.
//!
//! The guest half (`guest`, `spinner`) comes from xperf; the host half
//! (`host`, `offered`, `enabled_by_guest`, `host_fault_delay_ns`) from the VMM.

use crate::Stats;
use serde::{Deserialize, Serialize};

/// The crossing that touches pages whose host backing was dropped.
pub const PF_HOST_MISS: &str = "pf-host-miss";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AsyncPf {
    /// KVM_FEATURE_ASYNC_PF and _INT offered in CPUID 0x40000001.
    pub offered: bool,
    /// Bit 0 of the guest's MSR_KVM_ASYNC_PF_EN at the end of the run, read by
    /// the VMM: whether the guest kernel turned async page faults on.
    #[serde(default)]
    pub enabled_by_guest: Option<bool>,
    pub host_fault_delay_ns: u64,
    #[serde(default)]
    pub host: AsyncPfHost,
    #[serde(default)]
    pub guest: AsyncPfGuest,
    /// The second guest task on the vCPU (SCHED_IDLE, so it runs only while
    /// the measuring task sleeps).
    #[serde(default)]
    pub spinner: Option<Spinner>,
    /// `--async-pf both`: this run against the other, in both reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_off: Option<OnOff>,
}

/// Host counts: the kvm tracepoints (absent without tracing) and the fault server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AsyncPfHost {
    #[serde(default)]
    pub try_async_get_page: Option<u64>,
    #[serde(default)]
    pub not_present: Option<u64>,
    #[serde(default)]
    pub ready: Option<u64>,
    #[serde(default)]
    pub completed: Option<u64>,
    /// `kvm_async_pf_repeated_fault`: the guest touched a page already being
    /// fetched (the vCPU halts on it).
    #[serde(default)]
    pub repeated_fault: Option<u64>,
    pub uffd_faults_served: u64,
    /// From reading a fault to its page being in place, ns (delay included).
    #[serde(default)]
    pub uffd_latency_ns: Option<Stats>,
    pub pages_dropped: u64,
    pub drop_requests: u64,
    pub drop_requests_refused: u64,
    #[serde(default)]
    pub last_refusal: Option<String>,
    /// Why the fault server stopped early.
    #[serde(default)]
    pub failure: Option<String>,
    /// pf-host-miss samples with a `kvm_async_pf_not_present` in their window
    /// on the verified timeline (None without one).
    #[serde(default)]
    pub samples_with_not_present: Option<u64>,
    /// Samples where that host view and the guest's own (`sample_async`) agree.
    #[serde(default)]
    pub samples_agreeing: Option<u64>,
    /// Of the samples where the guest saw an async PF, those whose window
    /// also holds the host's `not present` (agreement where there is
    /// something to agree on, not where neither side saw one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_async_agreeing: Option<u64>,
}

/// What xperf saw.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AsyncPfGuest {
    /// Async "page not present" #PFs delivered to the measuring task (the
    /// stamp page's `pf_async`), over all pf-host-miss samples.
    #[serde(default)]
    pub async_pf_received: Option<u64>,
    /// Page-ready notifications (the HYP row of /proc/interrupts, vector
    /// 0xf3), over the pf-host-miss phase.
    #[serde(default)]
    pub page_ready: Option<u64>,
    /// Pages dropped and touched.
    pub touches: u64,
    /// Per pf-host-miss sample, in the order of its raw samples: `pf_async`
    /// advanced (1) or not (0); empty without the kernel hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_async: Vec<u8>,
    /// Voluntary context switches of the measuring task during the touches
    /// (it sleeps on an async fault; a blocked vCPU does not switch).
    pub voluntary_switches: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Spinner {
    /// Iterations the spinner made during each touch.
    pub per_touch: Stats,
    /// Iterations per TSC tick while it ran alone (its speed), for scale.
    pub iterations_per_kilotick: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<u64>,
}

/// One side of the on/off comparison.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OnOffSide {
    pub touch_median: u64,
    pub touch_ci: (u64, u64),
    pub touch_mean: f64,
    pub spinner_median: Option<u64>,
    pub spinner_mean: Option<f64>,
    pub async_pf_received: Option<u64>,
    pub not_present: Option<u64>,
}

/// `--async-pf both`: the same touches with async PF on and off.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OnOff {
    pub on: OnOffSide,
    pub off: OnOffSide,
    /// on minus off, median of the touch time, with a bootstrap 95 % CI.
    pub touch_difference: i64,
    pub touch_difference_ci: (i64, i64),
    /// on minus off, mean spinner iterations per touch.
    pub spinner_difference: Option<f64>,
}

impl OnOffSide {
    /// The side's figures from its report; None without a pf-host-miss crossing.
    pub fn of(report: &crate::Report) -> Option<OnOffSide> {
        let crossing = report.crossings.iter().find(|c| c.name == PF_HOST_MISS)?;
        let rt = crossing.round_trip.as_ref()?;
        let a = report.async_pf.as_ref();
        let spinner = a.and_then(|a| a.spinner.as_ref());
        Some(OnOffSide {
            touch_median: rt.corrected.median,
            touch_ci: rt
                .median_ci
                .map_or((rt.corrected.median, rt.corrected.median), |ci| {
                    (ci.low, ci.high)
                }),
            touch_mean: rt.corrected.mean,
            spinner_median: spinner.map(|s| s.per_touch.median),
            spinner_mean: spinner.map(|s| s.per_touch.mean),
            async_pf_received: a.and_then(|a| a.guest.async_pf_received),
            not_present: a.and_then(|a| a.host.not_present),
        })
    }
}

/// Compares a run with async PF on against one with it off. The interval
/// of the difference is built from the two medians' intervals, ends against
/// ends (conservative, like `compare`).
pub fn compare_on_off(on: &crate::Report, off: &crate::Report) -> Option<OnOff> {
    let (on, off) = (OnOffSide::of(on)?, OnOffSide::of(off)?);
    let signed = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    Some(OnOff {
        touch_difference: signed(on.touch_median) - signed(off.touch_median),
        touch_difference_ci: (
            signed(on.touch_ci.0) - signed(off.touch_ci.1),
            signed(on.touch_ci.1) - signed(off.touch_ci.0),
        ),
        spinner_difference: on.spinner_mean.zip(off.spinner_mean).map(|(x, y)| x - y),
        on,
        off,
    })
}
