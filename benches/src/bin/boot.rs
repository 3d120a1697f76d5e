//! Boot benchmark in the nested harness (issue 25, "Boot"): xvmm against
//! QEMU `microvm` (qboot) and QEMU `pc`, the same L2 PVH vmlinux, initramfs
//! and command line, runs alternating; see `xvmm_benches::boot` for what is
//! measured and how. Prints each run, the medians and the ratios against
//! microvm with their targets; never fails on numbers.
//!
//! `XVMM_BOOT_RUNS` (default 5) sets the rounds. Timings are inside QEMU
//! TCG: compare the VMMs with each other, not with bare metal.

use std::time::Duration;
use xvmm_benches::boot::{
    self, median, Figures, Runs, CONSOLE, QUIET, TARGET_FIRST_BYTE, TARGET_INIT,
    TARGET_OVERHEAD_MIB, VMMS,
};
use xvmm_harness::{self as harness, HarnessRun};

fn show(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.1} {unit}"))
}

fn print_runs(run: &HarnessRun) {
    println!(
        "{:<20} {:>8} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10}",
        "run",
        "outcome",
        "1st byte",
        "/init ms",
        "uptime ms",
        "maxrss KiB",
        "guest KiB",
        "other KiB"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |m| format!("{m:.1}"));
    let kib = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    for s in &run.steps {
        println!(
            "{:<20} {:>8} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10}",
            s.name,
            s.outcome.to_string(),
            ms(s.first_byte_ms),
            ms(s.marker_ms),
            ms(run.guest_uptime(&s.name).map(|u| u * 1e3)),
            s.max_rss_kib,
            kib(s.guest_rss_kib),
            kib(s.other_rss_kib),
        );
    }
}

fn print_medians(run: &HarnessRun, runs: usize) {
    for vmm in VMMS {
        let (q, c) = (Runs::of(run, vmm, QUIET), Runs::of(run, vmm, CONSOLE));
        println!(
            "{vmm}: {}+{} of {runs}+{runs} runs reached /init; quiet: to /init {}, guest uptime \
             there {}, before the guest clock {}; console: to the first byte {}, first byte to \
             /init {}; at /init: guest RAM resident {}, everything else {}",
            q.runs.len(),
            c.runs.len(),
            show(median(q.to_init()), "ms"),
            show(median(q.uptime()), "ms"),
            show(median(q.before_clock()), "ms"),
            show(median(c.to_first_byte()), "ms"),
            show(median(c.byte_to_init()), "ms"),
            show(median(q.guest_kib()).map(|k| k / 1024.0), "MiB"),
            show(median(q.overhead_kib()).map(|k| k / 1024.0), "MiB"),
        );
    }
}

fn print_clocks(run: &HarnessRun) {
    println!(
        "guest clocks (console runs, kernel log; medians): VM creation to the kernel's kvmclock \
         set-up, by KVM's clock; and how far the guest's uptime lagged its kvmclock-based \
         sched_clock when the kernel switched off jiffies (ticks a nested guest lost):"
    );
    for vmm in VMMS {
        let clocks = Runs::of(run, vmm, CONSOLE).clocks(run);
        let each =
            |f: fn(&boot::GuestClock) -> Option<f64>| median(clocks.iter().filter_map(f).collect());
        println!(
            "  {vmm:<8} VM to kvmclock {}, uptime behind by {}",
            show(each(|c| c.vm_to_kvmclock_ms), "ms"),
            show(each(|c| c.uptime_lag_ms), "ms"),
        );
    }
}

fn verdict(what: &str, v: Option<f64>, target: f64, unit: &str) {
    match v {
        Some(x) => println!(
            "{what}: {x:.2}{unit} (target <= {target}{unit}: {})",
            if x <= target { "met" } else { "NOT met" }
        ),
        None => println!("{what}: n/a (runs failed; see the log)"),
    }
}

fn main() {
    let runs: usize = std::env::var("XVMM_BOOT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let plan = boot::plan(runs);
    let result = harness::prepare()
        .and_then(|a| Ok((harness::l1_initramfs(&a, &plan, true)?, a)))
        .and_then(|(cpio, a)| {
            harness::run_l1(&a, &cpio, "boot-bench", Duration::from_secs(40 * 60))
        });
    let run = match result {
        Ok(r) => r,
        Err(e) => {
            println!("boot benchmark could not run: {e}");
            return;
        }
    };
    println!("boot benchmark: nested harness (QEMU TCG -> L1 KVM -> VMM -> L2 6.12 tinyconfig)");
    println!(
        "L2: PVH vmlinux, {} MiB; quiet cmdline {:?}; console cmdline {:?}",
        harness::L2_MEM_MIB,
        harness::l2_cmdline("exit:0"),
        boot::console_cmdline()
    );
    println!("console log: {}", run.log.display());
    println!();
    print_runs(&run);
    println!();
    print_medians(&run, runs);
    println!();
    print_clocks(&run);
    println!();
    println!("xvmm's pre-kernel profile in L1 (--verbose, median of its measured runs):");
    for (phase, ms) in boot::profile(&run) {
        println!("  {ms:>9.3} ms  {phase}");
    }
    let f = Figures::of(&run);
    println!();
    println!("medians of {runs} alternating runs:");
    verdict(
        "xvmm / microvm, VMM start to /init",
        f.init_vs_microvm,
        TARGET_INIT,
        "x",
    );
    verdict(
        "xvmm / microvm, VMM start to the kernel's first console byte",
        f.first_byte_vs_microvm,
        TARGET_FIRST_BYTE,
        "x",
    );
    verdict(
        "xvmm VMM memory overhead (RSS at /init minus guest RAM resident)",
        f.xvmm_overhead_mib,
        TARGET_OVERHEAD_MIB,
        " MiB",
    );
    let r = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.2}x"));
    println!(
        "xvmm / microvm, kernel time by the outside clock (to /init, quiet, less to the first \
         console line): {} ({} vs {}); guest uptime at /init: {}",
        r(f.kernel_vs_microvm),
        show(boot::kernel_ms(&run, "xvmm"), "ms"),
        show(boot::kernel_ms(&run, "microvm"), "ms"),
        r(f.uptime_vs_microvm)
    );
    println!("xvmm / pc, VMM start to /init: {}", r(f.init_vs_pc));
}
