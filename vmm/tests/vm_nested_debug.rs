//! TEMPORARY debugging aid (to be deleted): TSC/async-PF options on real KVM.

use std::time::Duration;
use xvmm::harness::{self, l1, Step};

fn step(name: &str, extra: &[&str]) -> Step {
    let mut argv = harness::xvmm_argv(l1::L2_VMLINUX, "console=ttyS0 panic=-1 xvmm.init=exit:0", 60);
    argv.extend(extra.iter().map(|s| s.to_string()));
    Step {
        name: name.into(),
        timeout_secs: 120,
        marker: Some(harness::MARKER.into()),
        stop_at_marker: false,
        argv,
    }
}

#[test]
#[ignore]
fn nested_options() {
    let a = harness::prepare().unwrap();
    let steps = vec![
        step("tsc-khz", &["--tsc-khz", "1000000"]),
        step("tsc-offset", &["--tsc-offset", "-1000000000000"]),
        step("async-pf", &["--async-pf", "on"]),
    ];
    let initramfs = harness::l1_initramfs(&a, &steps, false).unwrap();
    let run = harness::run_l1(&a, &initramfs, "vm-debug", Duration::from_secs(900)).unwrap();
    for l in &run.console {
        println!("{l}");
    }
}
