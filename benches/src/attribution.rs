//! A synthetic traced run for the attribution bench and its claim: `n`
//! getppid-like samples in one crossing and `n` host exits spread over the
//! same stretch of time, on one vCPU, offset 0.

use crate::clock::{timed, Took};
use xvmm_results::attribution::{self, HostExitEvent, HostTrace, Index};
use xvmm_results::timeline::Mapping;
use xvmm_results::{Corrections, Crossing, Environment, Method, Report, Sample};

/// Ticks between sample starts; exits come as often, shifted by a prime so
/// they fall into every segment and the gaps.
const PERIOD: u64 = 1_000;

pub fn synthetic(n: u64) -> (Report, HostTrace) {
    let samples: Vec<Sample> = (0..n)
        .map(|i| {
            let t = 1_000_000 + i * PERIOD;
            Sample {
                u2k_u: t,
                u2k_k: t + 200 + i % 7,
                k2u_k: t + 400,
                k2u_u: t + 600 + i % 11,
                cpu: Some(0),
                interrupts: None,
            }
        })
        .collect();
    let report = getppid_report(samples);
    let exits = (0..n)
        .map(|i| HostExitEvent {
            vcpu: 0,
            exit: 1_000_000 + (i * 997) % (n * PERIOD),
            entry: 1_000_000 + (i * 997) % (n * PERIOD) + 150,
            reason: (i % 3) as u16,
        })
        .collect();
    let trace = HostTrace {
        reasons: vec!["npf".into(), "intr".into(), "io".into()],
        exits,
        lost: Vec::new(),
    };
    (report, trace)
}

/// A Linux VM's report of one getppid crossing with `samples` kept, as a
/// traced run's join finds it.
pub fn getppid_report(samples: Vec<Sample>) -> Report {
    let n = samples.len() as u64;
    let mut report = Report::new(
        "bench".into(),
        Environment::LinuxVm,
        Default::default(),
        Method::standard(0, n),
    );
    let corr = Corrections::derive(50, Some((50, 50)));
    let mut c = Crossing::from_samples("getppid", n, &samples, &corr, false);
    c.samples = Some(samples);
    report.crossings.push(c);
    report
}

/// Attributes the trace to the report and returns how long it took (the
/// index build included).
pub fn time_attribution(report: &mut Report, trace: &HostTrace) -> Took {
    let mapping = Mapping::unscaled(0);
    let ((), took) = timed(|| {
        let index = Index::new(trace, &mapping);
        attribution::attribute(report, &index, Some(0));
    });
    took
}

/// Attributes as a traced run's join does (only the exits inside the
/// report's samples indexed, one vCPU) and returns how long it took.
pub fn time_join(report: &mut Report, trace: &HostTrace, mapping: &Mapping) -> Took {
    let ((), took) = timed(|| {
        let index = Index::for_report(trace, mapping, report, Some(0));
        attribution::attribute(report, &index, Some(0));
    });
    took
}
