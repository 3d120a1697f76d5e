//! Boot benchmark in the nested harness: wall time from VMM process start to
//! the L2 guest's `/init` marker, and peak RSS, for xvmm and for
//! `qemu-system-x86_64 -enable-kvm -nodefaults` (PVH boot), on the same L2
//! kernel (vmlinux) and initramfs, runs alternating. Prints figures; never
//! fails on numbers.
//!
//! `XVMM_BOOT_RUNS` (default 5) sets the runs per VMM. Timings are inside QEMU
//! TCG: compare the two VMMs with each other, not with bare metal.

use std::time::Duration;
use xvmm_harness::{self as harness, l1, Outcome, Step, StepResult, MARKER};

fn step(name: String, argv: Vec<String>) -> Step {
    Step {
        name,
        timeout_secs: 180,
        marker: Some(MARKER.into()),
        stop_at_marker: true,
        argv,
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn min(v: &[f64]) -> Option<f64> {
    v.iter().copied().min_by(f64::total_cmp)
}

fn max(v: &[f64]) -> Option<f64> {
    v.iter().copied().max_by(f64::total_cmp)
}

fn show(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.1} {unit}"))
}

/// Results of one VMM's measured (non-warm-up) runs that reached the marker.
struct Summary<'a> {
    runs: Vec<&'a StepResult>,
}

impl Summary<'_> {
    fn marker_ms(&self) -> Vec<f64> {
        self.runs.iter().filter_map(|r| r.marker_ms).collect()
    }
    fn kib(&self, f: impl Fn(&StepResult) -> Option<u64>) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| f(r))
            .map(|k| k as f64)
            .collect()
    }
}

fn main() {
    let runs: usize = std::env::var("XVMM_BOOT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let cmdline = harness::l2_cmdline("exit:0");
    let xvmm = || harness::xvmm_argv(l1::L2_VMLINUX, &cmdline, 120);
    let qemu = || harness::qemu_argv(l1::L2_VMLINUX, &cmdline);
    let mut plan = vec![
        step("warmup-xvmm".into(), xvmm()),
        step("warmup-qemu".into(), qemu()),
    ];
    for i in 0..runs {
        plan.push(step(format!("xvmm-{i}"), xvmm()));
        plan.push(step(format!("qemu-{i}"), qemu()));
    }
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
        "L2: PVH vmlinux, {} MiB, cmdline {cmdline:?}",
        harness::L2_MEM_MIB
    );
    println!("console log: {}", run.log.display());
    println!();
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>11} {:>11} {:>10} {:>10}",
        "run",
        "outcome",
        "marker ms",
        "kernel ms",
        "pre-kern ms",
        "maxrss KiB",
        "guest KiB",
        "other KiB"
    );
    for s in &run.steps {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
        let kernel_ms = run.guest_uptime(&s.name).map(|u| u * 1e3);
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |m| format!("{m:.1}"));
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>11} {:>11} {:>10} {:>10}",
            s.name,
            s.outcome.to_string(),
            ms(s.marker_ms),
            ms(kernel_ms),
            ms(s.marker_ms.zip(kernel_ms).map(|(m, k)| m - k)),
            s.max_rss_kib,
            opt(s.guest_rss_kib),
            opt(s.other_rss_kib),
        );
    }
    let summary = |prefix: &str| Summary {
        runs: run
            .steps
            .iter()
            .filter(|s| s.name.starts_with(prefix) && s.outcome == Outcome::StoppedAtMarker)
            .collect(),
    };
    let (x, q) = (summary("xvmm-"), summary("qemu-"));
    println!();
    for (name, s) in [("xvmm", &x), ("qemu", &q)] {
        let t = s.marker_ms();
        println!(
            "{name}: {}/{runs} runs reached the marker; time to marker median {} (min {}, max {})",
            s.runs.len(),
            show(median(t.clone()), "ms"),
            show(min(&t), "ms"),
            show(max(&t), "ms"),
        );
        let pre_kernel: Vec<f64> = s
            .runs
            .iter()
            .filter_map(|r| Some(r.marker_ms? - run.guest_uptime(&r.name)? * 1e3))
            .collect();
        println!(
            "      of which before the guest kernel's clock started (VMM set-up, firmware): \
             median {} (indicative: guest uptime runs differently under each VMM early in boot)",
            show(median(pre_kernel), "ms")
        );
        let peak = s.kib(|r| Some(r.max_rss_kib));
        let other = s.kib(|r| r.other_rss_kib);
        let guest = s.kib(|r| r.guest_rss_kib);
        println!(
            "      peak RSS median {}; at the marker: guest memory resident {}, \
             everything else (VMM overhead) {}",
            show(median(peak).map(|k| k / 1024.0), "MiB"),
            show(median(guest).map(|k| k / 1024.0), "MiB"),
            show(median(other).map(|k| k / 1024.0), "MiB"),
        );
    }
    let ratio = median(x.marker_ms())
        .zip(median(q.marker_ms()))
        .map(|(a, b)| a / b);
    // The minimum is the least disturbed by other load on the (emulated) host.
    let min_ratio = min(&x.marker_ms())
        .zip(min(&q.marker_ms()))
        .map(|(a, b)| a / b);
    println!();
    match (ratio, min_ratio) {
        (Some(r), Some(m)) => println!(
            "xvmm / qemu time to /init marker: median {r:.2}, best run {m:.2} (target <= 0.50: {})",
            if r <= 0.5 { "met" } else { "NOT met" }
        ),
        _ => println!("xvmm / qemu time to /init marker: n/a (runs failed; see the log)"),
    }
    match median(x.kib(|r| r.other_rss_kib)) {
        Some(k) => println!(
            "xvmm RSS overhead over guest memory: {:.2} MiB (target <= 5 MiB: {})",
            k / 1024.0,
            if k <= 5.0 * 1024.0 { "met" } else { "NOT met" }
        ),
        None => println!("xvmm RSS overhead over guest memory: n/a"),
    }
}
