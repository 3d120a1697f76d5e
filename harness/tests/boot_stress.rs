//! Many L2 boots in one L1, for a fault too rare for the suite's few
//! (the L2 triple fault seen twice in about fifty suite boots early on
//! 2026-11-29, and in none of 420 boots of this test later that day: see
//! docs/testing/harness.md). Not part of the suite:
//!
//! ```sh
//! XVMM_STRESS_BOOTS=240 XVMM_STRESS_SMP=1 \
//!     cargo test --release -p xvmm-harness --test boot_stress -- --ignored --nocapture
//! ```
//!
//! Boots alternate the PVH vmlinux and the bzImage; `XVMM_STRESS_SMP` gives
//! every other pair two vCPUs; `XVMM_STRESS_TRIPLE` makes every other boot
//! a deliberate triple fault (`reboot=t`), to see whether one leaves L1's
//! KVM in a state that breaks the boot after it. Every boot must reach
//! `/init` and end as asked; each one that does not is printed whole.

use std::time::Duration;
use xvmm_harness::{self as harness, l1, Outcome, Step, MARKER};

fn flag(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

/// Boot `i`'s step and the outcome it must end with.
fn boot(i: usize) -> (Step, Outcome) {
    let triple = flag("XVMM_STRESS_TRIPLE") && i.is_multiple_of(2);
    let kernel = if i % 4 < 2 {
        l1::L2_VMLINUX
    } else {
        l1::L2_BZIMAGE
    };
    let (cmdline, want) = if triple {
        let line = format!("{} reboot=t", harness::l2_cmdline("reboot"));
        (line, Outcome::Exited(1))
    } else {
        (harness::l2_cmdline("exit:0"), Outcome::Exited(0))
    };
    let mut argv = harness::xvmm_argv(kernel, &cmdline, 60);
    if flag("XVMM_STRESS_SMP") && i % 8 >= 4 {
        argv.extend(["--cpus".to_string(), "2".to_string()]);
    }
    let step = Step {
        name: format!("boot-{i}"),
        timeout_secs: 120,
        marker: Some(MARKER.into()),
        stop_at_marker: false,
        argv,
    };
    (step, want)
}

#[test]
#[ignore = "minutes of nested boots: run by hand (see the module text)"]
fn every_boot_reaches_init_and_ends_as_asked() {
    let n: usize = std::env::var("XVMM_STRESS_BOOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let boots: Vec<(Step, Outcome)> = (0..n).map(boot).collect();
    let plan: Vec<Step> = boots.iter().map(|(s, _)| s.clone()).collect();
    let artifacts = harness::prepare().expect("the harness's artifacts");
    let initramfs = harness::l1_initramfs(&artifacts, &plan, false).expect("L1's initramfs");
    let run = harness::run_l1(
        &artifacts,
        &initramfs,
        "boot-stress",
        Duration::from_secs(3600),
    )
    .expect("the L1 run");
    let mut bad = 0;
    for (step, want) in &boots {
        let s = run
            .step(&step.name)
            .unwrap_or_else(|| panic!("no result for {}", step.name));
        if s.outcome != *want || s.marker_ms.is_none() {
            bad += 1;
            eprintln!(
                "{}: {} (want {want}), /init {:?}\n{}",
                step.name,
                s.outcome,
                s.marker_ms,
                run.output(&step.name).join("\n")
            );
        }
    }
    eprintln!("{bad} of {n} boots went wrong");
    assert_eq!(bad, 0);
}
