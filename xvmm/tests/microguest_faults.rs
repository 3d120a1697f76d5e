//! Unexpected guest exceptions reach the VMM as a record with vector and RIP,
//! and the probes turn refused crossings into "unsupported" instead of errors.
//! Runs single phases through the library on this machine's /dev/kvm.

use std::path::Path;
use std::time::Duration;
use xvmm::microguest::guest::{self, Kind};
use xvmm::microguest::layout;
use xvmm::microguest::machine::{run_phase, MachineConfig, Phase, PhaseEnd};
use xvmm::microguest::platform::{self, Outcome, Platform, Vendor};
use xvmm::microguest::session::misdelivered;
use xvmm::vcpu::RunControl;

fn phase(kind: Kind, samples: u64, param: u64) -> Phase {
    Phase {
        kind,
        warmup: 0,
        samples,
        param,
    }
}

/// SYSENTER in a one-sample phase does what README "What runs where"
/// documents for this machine's CPU vendor and hypervisor: #UD at CPL3 on
/// the instruction (AMD by the architecture; Intel under PVM, measured on
/// the Intel CI machine), a completed phase (Intel under kvm_intel), or,
/// where nothing is documented, either with its fault named.
#[test]
fn sysenter_does_what_is_documented_for_this_vendor_and_hypervisor() {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let rc = RunControl::new(Duration::from_secs(30)).unwrap();
    let (end, facts) =
        run_phase(&rc, &MachineConfig::default(), &phase(Kind::Sysenter, 1, 0)).unwrap();
    let here = Platform::probe();
    assert_eq!(
        Vendor::from_cpuid(&facts.vendor),
        here.vendor,
        "the guest sees the host's vendor"
    );
    let fact = platform::expected_sysenter(here.vendor, here.hypervisor);
    println!(
        "{here:?}: SYSENTER {:?} ({}): {end:?}",
        fact.outcome, fact.source
    );
    match (fact.outcome, &end) {
        (Outcome::Runs, PhaseEnd::Done { .. }) => {}
        (Outcome::Faults { vector }, PhaseEnd::Fault(fault)) => {
            assert_eq!(fault.vector, vector, "{fault}");
            assert_eq!(fault.cs & 3, 3, "raised in user mode: {fault}");
            let user =
                layout::USER_CODE_GPA..layout::USER_CODE_GPA + guest::user_code().len() as u64;
            assert!(user.contains(&fault.rip), "{fault}");
            let text = fault.to_string();
            assert!(
                text.starts_with("unexpected exception #UD (vector 6) at RIP 0x2"),
                "{text}"
            );
            // A run reports it as unsupported, not as a failure.
            assert!(misdelivered(Kind::Sysenter, fault).is_some());
        }
        (Outcome::Undocumented, PhaseEnd::Done { .. }) => {}
        (Outcome::Undocumented, PhaseEnd::Fault(fault)) => {
            assert!(misdelivered(Kind::Sysenter, fault).is_some(), "{fault}")
        }
        (outcome, end) => panic!(
            "{here:?}: documented {outcome:?} ({}), got {end:?}",
            fact.source
        ),
    }
}

#[test]
fn every_stamp_of_a_small_phase_comes_back() {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let rc = RunControl::new(Duration::from_secs(30)).unwrap();
    let (end, _) = run_phase(&rc, &MachineConfig::default(), &phase(Kind::Imul, 64, 800)).unwrap();
    let PhaseEnd::Done { stamps, host, .. } = end else {
        panic!("{end:?}");
    };
    assert_eq!(
        stamps.len(),
        128,
        "two stamps per sample, exactly what was asked"
    );
    assert!(host.is_empty(), "a user-mode loop makes no measured exits");
    // Even samples run 800 imuls, odd ones 1600: the long chains take longer.
    let intervals: Vec<u64> = stamps.chunks(2).map(|p| p[1] - p[0]).collect();
    let mut short: Vec<u64> = intervals.iter().step_by(2).copied().collect();
    let mut long: Vec<u64> = intervals.iter().skip(1).step_by(2).copied().collect();
    short.sort_unstable();
    long.sort_unstable();
    assert!(long[16] > short[16] + 400, "short {short:?} long {long:?}");
}

/// An imul phase asked for K lengths takes them in turn: sample i times
/// (1 + i mod K) x N imuls.
#[test]
fn an_imul_phase_cycles_through_its_chain_lengths() {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let rc = RunControl::new(Duration::from_secs(30)).unwrap();
    let param = guest::chain_param(256, 4);
    let (end, _) = run_phase(
        &rc,
        &MachineConfig::default(),
        &phase(Kind::Imul, 200, param),
    )
    .unwrap();
    let PhaseEnd::Done { stamps, .. } = end else {
        panic!("{end:?}");
    };
    let intervals: Vec<u64> = stamps.chunks(2).map(|p| p[1] - p[0]).collect();
    let medians: Vec<u64> = (0..4)
        .map(|j| {
            let mut v: Vec<u64> = intervals.iter().skip(j).step_by(4).copied().collect();
            v.sort_unstable();
            v[v.len() / 2]
        })
        .collect();
    // 256 more imuls per step: at least ~1 tick each on any CPU here.
    assert!(
        medians.windows(2).all(|w| w[1] > w[0] + 200),
        "medians {medians:?}"
    );
}

#[test]
fn bad_phase_parameters_are_refused_before_any_vm_exists() {
    let rc = RunControl::new(Duration::from_secs(5)).unwrap();
    let err = run_phase(&rc, &MachineConfig::default(), &phase(Kind::Imul, 1, 7)).unwrap_err();
    assert!(err.to_string().contains("multiple of 8"), "{err}");
    let err = run_phase(
        &rc,
        &MachineConfig::default(),
        &phase(Kind::PageFault, u64::MAX, 0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
}

/// Whether a phase with the fenced kernel stamps (LFENCE, RDTSCP at CPL0)
/// was refused, asserting that this is what README "What runs where"
/// documents for this machine: refused by an emulation failure on AMD under
/// PVM, run under hardware KVM; either where nothing is documented. The
/// caller then uses plain RDTSC, as a run does.
fn fenced_refused(end: &PhaseEnd) -> bool {
    let here = Platform::probe();
    let fact = platform::expected_fenced_kernel_stamps(here);
    let refused = matches!(end, PhaseEnd::Refused { .. });
    let as_documented = match fact.outcome {
        Outcome::EmulationFails => matches!(
            end,
            PhaseEnd::Refused { reason } if reason.contains("KVM_EXIT_INTERNAL_ERROR")
        ),
        Outcome::Runs => !refused,
        _ => true,
    };
    assert!(
        as_documented,
        "{here:?}: fenced kernel stamps documented {:?} ({}), got {end:?}",
        fact.outcome, fact.source
    );
    refused
}

#[test]
fn page_faults_keep_alternating_across_an_odd_warm_up() {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let rc = RunControl::new(Duration::from_secs(30)).unwrap();
    for warmup in [0, 3, 4] {
        let p = Phase {
            kind: Kind::PageFault,
            warmup,
            samples: 20,
            param: 0,
        };
        let mut cfg = MachineConfig::default();
        let (mut end, _) = run_phase(&rc, &cfg, &p).unwrap();
        if fenced_refused(&end) {
            cfg.kernel_stamps = guest::KernelStamps::Plain;
            end = run_phase(&rc, &cfg, &p).unwrap().0;
        }
        let PhaseEnd::Done { stamps, .. } = end else {
            panic!("{end:?}");
        };
        for (i, s) in stamps.chunks(4).enumerate() {
            assert!(
                s[0] < s[1] && s[1] < s[2] && s[2] < s[3],
                "warm-up {warmup}, sample {i} did not fault: {s:x?}"
            );
        }
    }
}

/// A batch takes K crossings between one pair of stamps: its round trip is
/// K single round trips, give or take the stamps and the noise.
#[test]
fn a_batch_of_k_int3_costs_about_k_single_ones() {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let mut cfg = MachineConfig::default();
    let trips = |cfg: &MachineConfig, kind, param| -> Option<Vec<u64>> {
        let p = Phase {
            kind,
            warmup: 5,
            samples: 40,
            param,
        };
        match run_phase(&rc, cfg, &p).unwrap().0 {
            PhaseEnd::Done { stamps, .. } => Some(stamps.chunks(4).map(|s| s[3] - s[0]).collect()),
            end if fenced_refused(&end) => None,
            other => panic!("{kind:?}: {other:?}"),
        }
    };
    let single = trips(&cfg, Kind::Breakpoint, 0).unwrap_or_else(|| {
        cfg.kernel_stamps = guest::KernelStamps::Plain;
        trips(&cfg, Kind::Breakpoint, 0).expect("int3 runs")
    });
    let batch = trips(&cfg, Kind::Int3Batch, 10).expect("the batch runs");
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (one, ten) = (median(single), median(batch));
    assert!(
        ten > 5 * one && ten < 20 * one,
        "10 int3 per batch: {ten} ticks, one int3: {one} ticks"
    );
    let p = Phase {
        kind: Kind::Int3Batch,
        warmup: 0,
        samples: 1,
        param: 0,
    };
    assert!(run_phase(&rc, &cfg, &p).is_err(), "a batch of 0 is refused");
}
