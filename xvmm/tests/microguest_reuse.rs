//! One VM for a run's phases (`VmPolicy::Reuse`) against a fresh VM per
//! phase, the oracle: the same phases give the same samples, a reused VM
//! starts a phase as a fresh one does, and a phase that did not reach its
//! doorbell leaves no VM behind. On this machine's /dev/kvm.

use std::path::Path;
use std::time::Duration;
use xvmm::microguest::guest::{KernelStamps, Kind};
use xvmm::microguest::machine::{MachineConfig, Phase, PhaseEnd, VmPolicy, Vms};
use xvmm::microguest::measure::{measure, Options};
use xvmm::microguest::session::fenced_kernel_stamps_refused;
use xvmm::vcpu::RunControl;
use xvmm_results::{Report, Status, UNFILLED};

fn no_kvm() -> bool {
    let missing = !Path::new("/dev/kvm").exists();
    if missing {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
    }
    missing
}

fn phase(kind: Kind, warmup: u64, samples: u64) -> Phase {
    Phase {
        kind,
        warmup,
        samples,
        param: 0,
    }
}

/// The kernel stamps this hypervisor runs, found as a run finds them.
fn kernel_stamps(vms: &Vms, rc: &RunControl) -> MachineConfig {
    let mut cfg = MachineConfig::default();
    if fenced_kernel_stamps_refused(vms, rc, &cfg)
        .unwrap()
        .is_some()
    {
        cfg.kernel_stamps = KernelStamps::Plain;
    }
    cfg
}

fn done(end: PhaseEnd) -> (Vec<u64>, usize) {
    match end {
        PhaseEnd::Done { stamps, host, .. } => (stamps, host.len()),
        other => panic!("{other:?}"),
    }
}

/// Page faults still fault on every sample, the first included, phase
/// after phase (a #PF phase changes its page tables, so the next phase gets
/// a fresh VM: where the hypervisor shadows them, PVM, the VMM's rewrite
/// goes unseen and the first access of the next phase did not fault), with
/// the kernel stamps taken away and put back between phases; exit phases
/// in a reused VM get a host stamp per exit, as in a fresh VM.
#[test]
fn a_reused_vm_starts_each_phase_as_a_fresh_one() {
    if no_kvm() {
        return;
    }
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let vms = Vms::new(VmPolicy::Reuse);
    let cfg = kernel_stamps(&vms, &rc);
    let off = MachineConfig {
        kernel_stamps: KernelStamps::Off,
        ..cfg.clone()
    };
    // Phases with no warm-up check their very first access; after an odd
    // and an even number of faults the other page is the present one.
    let plan = [
        (3, &cfg),
        (0, &cfg),
        (0, &off),
        (4, &cfg),
        (0, &cfg),
        (1, &cfg),
        (0, &cfg),
    ];
    for (warmup, cfg) in plan {
        let (stamps, _) = done(
            vms.run(&rc, cfg, &phase(Kind::PageFault, warmup, 20))
                .unwrap()
                .0,
        );
        for (i, s) in stamps.chunks(4).enumerate() {
            // Without kernel stamps the kernel slots hold whatever the
            // handler's registers held; the phases after it must have
            // their stamps back (the kernel code is rewritten each phase).
            let faulted = if cfg.kernel_stamps == KernelStamps::Off {
                s[0] < s[3]
            } else {
                s[0] < s[1] && s[1] < s[2] && s[2] < s[3]
            };
            assert!(faulted, "warm-up {warmup}, sample {i}: {s:x?}");
        }
    }
    for kind in [Kind::PioIn, Kind::Hlt] {
        let (stamps, host) = done(vms.run(&rc, &cfg, &phase(kind, 7, 30)).unwrap().0);
        assert_eq!(
            host, 37,
            "{kind:?}: a host stamp per exit, warm-up's included"
        );
        assert!(stamps.iter().all(|&s| s != UNFILLED), "{kind:?}");
    }
    let records = vms.take_records();
    // The kernel stamps' probe: one run, or three where the hypervisor
    // refuses it (a refused phase runs again, twice, in a fresh VM).
    let probes = records
        .iter()
        .take_while(|r| r.kind == Kind::KernelNull)
        .count();
    assert!(probes == 1 || probes == 3, "{records:?}");
    for pair in records.windows(2).skip(probes) {
        let after_pf = pair[0].kind == Kind::PageFault;
        assert_eq!(pair[1].reused, !after_pf, "{records:?}");
    }
    for r in records.iter().filter(|r| r.kind == Kind::PioIn) {
        assert_eq!(r.times.measured_exits, 37);
        assert_eq!(r.times.exits, 38, "and the doorbell");
    }
}

/// A phase stopped by its deadline (or refused, or faulted) drops its VM:
/// the next phase gets a fresh one.
#[test]
fn a_phase_that_does_not_reach_its_doorbell_leaves_no_vm() {
    if no_kvm() {
        return;
    }
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let vms = Vms::new(VmPolicy::Reuse);
    let cfg = kernel_stamps(&vms, &rc);
    done(vms.run(&rc, &cfg, &phase(Kind::Null, 0, 10)).unwrap().0);
    let short = RunControl::new(Duration::from_millis(1)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let stopped = vms.run(&short, &cfg, &phase(Kind::PageFault, 0, 100_000));
    assert!(stopped.is_err(), "{stopped:?}");
    done(vms.run(&rc, &cfg, &phase(Kind::Null, 0, 10)).unwrap().0);
    done(vms.run(&rc, &cfg, &phase(Kind::Null, 0, 10)).unwrap().0);
    let reused: Vec<bool> = vms.take_records().iter().map(|r| r.reused).collect();
    let n = reused.len();
    assert_eq!(
        reused[n - 3..],
        [true, false, true],
        "the stopped phase took the Null phase's VM and left none: {reused:?}"
    );
}

fn rows(r: &Report) -> Vec<(String, bool, u64)> {
    let crossings = r.crossings.iter().map(|c| {
        (
            c.name.clone(),
            c.status == Status::Measured,
            c.samples_valid,
        )
    });
    let exits = r.exits.iter().map(|e| {
        (
            e.name.clone(),
            e.status == Status::Measured,
            e.samples_valid,
        )
    });
    crossings.chain(exits).collect()
}

/// A whole run with one VM measures the same rows, with the same valid
/// samples, through the same phases, as with a fresh VM per phase.
#[test]
fn a_run_reusing_its_vm_measures_what_fresh_vms_measure() {
    if no_kvm() {
        return;
    }
    let run = |vms| {
        let mut o = Options::new(300, 20).unwrap().with_rounds(1).unwrap();
        o.vms = vms;
        let m = measure(&o, Duration::from_secs(120), &xvmm::progress::Silent).unwrap();
        assert!(m.stopped.is_none(), "{:?}", m.stopped);
        m
    };
    let (new, old) = (run(VmPolicy::Reuse), run(VmPolicy::FreshPerPhase));
    assert_eq!(rows(&new.report), rows(&old.report));
    let plan = |m: &xvmm::microguest::Measured| -> Vec<(Kind, u64, u64)> {
        let p = &m.profile.phases;
        p.iter().map(|r| (r.kind, r.warmup, r.samples)).collect()
    };
    assert_eq!(plan(&new), plan(&old));
    assert_eq!(old.profile.reused(), 0);
    assert!(
        new.profile.reused() * 2 > new.profile.phases.len(),
        "most phases reuse a VM: {} of {}",
        new.profile.reused(),
        new.profile.phases.len()
    );
    assert!(new.profile.total >= new.profile.phases_total().total());
}

/// What a probe's time limit scales with: one-sample phases without
/// warm-up that ended well, their VM's creation included; a longer phase
/// or one stopped by its deadline does not count.
#[test]
fn the_slowest_sample_counts_only_one_sample_phases_that_ended_well() {
    if no_kvm() {
        return;
    }
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let cfg = kernel_stamps(&Vms::fresh(), &rc);
    let vms = Vms::new(VmPolicy::Reuse);
    assert_eq!(vms.slowest_sample(), Duration::ZERO);
    done(vms.run(&rc, &cfg, &phase(Kind::Null, 0, 2)).unwrap().0);
    done(vms.run(&rc, &cfg, &phase(Kind::Null, 1, 1)).unwrap().0);
    assert_eq!(vms.slowest_sample(), Duration::ZERO);
    // A fresh VM's phase (no VM kept: the last one is taken by kind).
    let fresh = Vms::new(VmPolicy::FreshPerPhase);
    let start = std::time::Instant::now();
    done(fresh.run(&rc, &cfg, &phase(Kind::Null, 0, 1)).unwrap().0);
    let wall = start.elapsed();
    let one = fresh.slowest_sample();
    assert!(one > Duration::ZERO && one <= wall, "{one:?} of {wall:?}");
    let short = RunControl::new(Duration::from_millis(1)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(fresh.run(&short, &cfg, &phase(Kind::Null, 0, 1)).is_err());
    assert_eq!(fresh.slowest_sample(), one);
}

/// KVM's exit count against the exits xvmm saw: every time KVM_RUN
/// returned to xvmm (each pio-out sample, warm-up's included, and the
/// doorbell) the vCPU exited, so KVM counted at least those; and the
/// kernel stamp pair's phase, the same stamps with no pio-out between,
/// counts about one a sample fewer. On PVM (2026-11-30): 322 and 7 for
/// 320 runs.
#[test]
fn kvm_counts_at_least_every_exit_that_reached_xvmm() {
    if no_kvm() {
        return;
    }
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let vms = Vms::new(VmPolicy::FreshPerPhase);
    let cfg = kernel_stamps(&vms, &rc);
    let counted = |kind| match vms.run(&rc, &cfg, &phase(kind, 20, 300)).unwrap().0 {
        PhaseEnd::Done { kvm_exits, .. } => kvm_exits,
        other => panic!("{other:?}"),
    };
    let Some(pio) = counted(Kind::PioOut) else {
        // A KVM without binary statistics (before Linux 5.14) says why.
        let facts = vms.run(&rc, &cfg, &phase(Kind::Null, 0, 1)).unwrap().1;
        let why = facts
            .no_exit_count
            .expect("a reason where there is no count");
        return eprintln!("{}", xvmm_host::skip::record(&why));
    };
    let stamps = counted(Kind::KernelNull).expect("counted as pio-out was");
    let records = vms.take_records();
    let returns = records[records.len() - 2].times.exits;
    assert!(returns > 320, "{returns} KVM_RUN returns");
    assert!(pio >= returns, "KVM counted {pio}, xvmm saw {returns}");
    // One exit a sample beyond the stamps' phase, give or take the few
    // either phase meets (its doorbell, host interrupts).
    let beyond = pio.saturating_sub(stamps);
    assert!((300..340).contains(&beyond), "{pio} - {stamps}");
}
