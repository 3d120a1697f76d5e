//! Reports for the unit tests of the renderer and the comparison.

use crate::{Corrections, Crossing, Environment, HostFacts, Method, Report, Sample, Stats};

/// A report with a measured `pf` (u2k 100*scale.., k2u 200*scale, round trip
/// 500*scale ticks; every stamp pair's median 50, so u2k and k2u are
/// corrected by 50, the round trip by 150) and an unsupported `int-n`.
pub fn report(env: Environment, scale: u64) -> Report {
    let mut r = Report::new(
        "test".into(),
        env,
        HostFacts {
            cpu_model: "Test CPU".into(),
            tsc_khz: 2_000_000,
            ..Default::default()
        },
        Method::standard(10, 3),
    );
    r.null_overhead = Stats::from_samples(&[40, 50, 60]);
    let samples: Vec<Sample> = (0..3)
        .map(|i| Sample {
            u2k_u: 1000,
            u2k_k: 1000 + 100 * scale + i,
            k2u_k: 1000 + 300 * scale,
            k2u_u: 1000 + 500 * scale,
            ..Default::default()
        })
        .collect();
    r.crossings.push(Crossing::from_samples(
        "pf",
        3,
        &samples,
        &corrections(),
        false,
    ));
    r.crossings.push(Crossing::unsupported(
        "int-n",
        3,
        "hypervisor refused int 0x80".into(),
    ));
    r
}

/// The fixture's corrections: every pair's median 50.
pub fn corrections() -> Corrections {
    Corrections::derive(50, Some((50, 50)))
}
