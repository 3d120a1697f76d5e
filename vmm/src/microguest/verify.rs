//! Checks a microguest report for the properties every run must have, so the
//! /dev/kvm tests and the nested-harness tests assert the same things:
//! - every crossing and exit is measured, or unsupported with a reason;
//! - #PF and int3 (which every KVM delivers) are measured;
//! - in every kept sample `u2k_u < u2k_k < k2u_k < k2u_u`, none unfilled;
//! - the null overhead is above 0 and below every round trip.

use xvmm_results::{Crossing, Environment, ExitTiming, Report, Status};

/// Crossings a microguest report lists, in order.
pub const CROSSINGS: [&str; 5] = ["pf", "int3", "syscall", "sysenter", "int-n"];

/// Everything wrong with `report` (empty when it passes).
pub fn problems(report: &Report) -> Vec<String> {
    let mut p = Vec::new();
    if let Err(e) = report.check_schema() {
        p.push(e.to_string());
    }
    if report.environment != Environment::Microguest {
        p.push(format!("environment is {:?}", report.environment));
    }
    let names: Vec<&str> = report.crossings.iter().map(|c| c.name.as_str()).collect();
    if names != CROSSINGS {
        p.push(format!("crossings are {names:?}, expected {CROSSINGS:?}"));
    }
    let null = report.null_overhead.median;
    if null == 0 || report.null_overhead.count == 0 {
        p.push(format!(
            "null overhead is {null} ({} samples)",
            report.null_overhead.count
        ));
    }
    for c in &report.crossings {
        crossing_problems(c, null, &mut p);
    }
    for name in ["pf", "int3"] {
        if report
            .crossing(name)
            .is_some_and(|c| c.status != Status::Measured)
        {
            p.push(format!("{name} is not measured"));
        }
    }
    if report.exits.is_empty() {
        p.push("no VM exits listed".into());
    }
    for e in &report.exits {
        exit_problems(e, null, &mut p);
    }
    p
}

/// What is wrong with one crossing row; `null` is the null overhead's median.
fn crossing_problems(c: &Crossing, null: u64, p: &mut Vec<String>) {
    match &c.status {
        Status::Measured => {
            if c.samples_valid == 0 {
                p.push(format!("{}: no valid sample", c.name));
            }
            if c.samples_unfilled + c.samples_out_of_order > 0 {
                p.push(format!(
                    "{}: {} unfilled, {} out-of-order samples",
                    c.name, c.samples_unfilled, c.samples_out_of_order
                ));
            }
            match &c.round_trip {
                Some(rt) if rt.raw.count > 0 && null >= rt.raw.min => p.push(format!(
                    "{}: null overhead {null} is not below the round trip (min {})",
                    c.name, rt.raw.min
                )),
                Some(_) => {}
                None => p.push(format!("{}: measured without a round trip", c.name)),
            }
            for (i, s) in c.samples.iter().flatten().enumerate() {
                if !(s.u2k_u < s.u2k_k && s.u2k_k < s.k2u_k && s.k2u_k < s.k2u_u) {
                    p.push(format!("{} sample {i} is not ordered: {s:?}", c.name));
                    break;
                }
            }
        }
        Status::Unsupported { reason } | Status::RoundTripOnly { reason } => {
            if reason.trim().is_empty() {
                p.push(format!("{}: not measured and no reason given", c.name));
            }
        }
    }
}

/// What is wrong with one exit row.
fn exit_problems(e: &ExitTiming, null: u64, p: &mut Vec<String>) {
    match &e.status {
        Status::Measured => match &e.round_trip {
            Some(rt) if rt.raw.count > 0 && null < rt.raw.min => {}
            Some(rt) => p.push(format!(
                "{}: null overhead {null} is not below the round trip (min {}, {} samples)",
                e.name, rt.raw.min, rt.raw.count
            )),
            None => p.push(format!("{}: measured without a round trip", e.name)),
        },
        Status::Unsupported { reason } | Status::RoundTripOnly { reason } => {
            if reason.trim().is_empty() {
                p.push(format!("{}: not measured and no reason given", e.name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{Crossing, ExitTiming, HostFacts, Interval, Method, Sample, Stats};

    fn good() -> Report {
        let mut r = Report::new(
            "t".into(),
            Environment::Microguest,
            HostFacts::default(),
            Method::standard(0, 2),
        );
        r.null_overhead = Stats::from_samples(&[50, 60]);
        let s = |base| Sample {
            u2k_u: base,
            u2k_k: base + 100,
            k2u_k: base + 200,
            k2u_u: base + 300,
        };
        for name in CROSSINGS {
            r.crossings.push(if name == "pf" || name == "int3" {
                Crossing::from_samples(name, 2, &[s(0), s(1000)], 50, true)
            } else {
                Crossing::unsupported(name, 2, "refused".into())
            });
        }
        r.exits.push(ExitTiming {
            name: "cpuid".into(),
            status: Status::Measured,
            samples_requested: 2,
            samples_valid: 2,
            round_trip: Some(Interval::from_raw(&[900, 1000], 50)),
            guest_to_vmm: None,
            in_vmm: None,
            vmm_to_guest: None,
        });
        r
    }

    #[test]
    fn a_good_report_passes() {
        assert_eq!(problems(&good()), Vec::<String>::new());
    }

    #[test]
    fn each_violation_is_named() {
        let mut r = good();
        r.crossings[0].samples.as_mut().unwrap()[1].k2u_k = 10;
        assert!(problems(&r)[0].contains("pf sample 1 is not ordered"));

        let mut r = good();
        r.null_overhead = Stats::from_samples(&[5000]);
        let p = problems(&r);
        assert!(
            p.iter().any(|m| m.starts_with("pf: null overhead 5000")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|m| m.starts_with("cpuid: null overhead")),
            "{p:?}"
        );

        let mut r = good();
        r.crossings[2] = Crossing::unsupported("syscall", 2, " ".into());
        r.crossings[1] = Crossing::unsupported("int3", 2, "no".into());
        let p = problems(&r);
        assert!(
            p.contains(&"syscall: not measured and no reason given".to_string()),
            "{p:?}"
        );
        assert!(p.contains(&"int3 is not measured".to_string()), "{p:?}");

        let mut r = good();
        r.crossings.pop();
        r.exits.clear();
        assert_eq!(problems(&r).len(), 2);
    }
}
