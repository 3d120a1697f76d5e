//! What instrumentation costs, bare metal (L1) against the VM (L2), in the
//! nested harness; prints the targets of issue 14 and never fails on numbers
//! (QEMU TCG emulates the CPU: ratios and shapes mean something, absolute
//! ticks do not).
//!
//! L1 boots alternate between the patched host kernel (xperf hooks compiled
//! in, off: booted without `xperf_stamps`) and the plain one; every boot
//! runs `xperf probes --modes none` (the no-probe crossings) in L1, and the
//! first patched boot also runs the full `xperf probes` in L1 and in L2
//! (`xvmm --trace`), plus L2 runs alternating between the patched and the
//! plain guest kernel. Printed:
//! - the jump-optimized kprobe against the int3 kprobe on the same address
//!   (target: at least 5x cheaper), bare metal and VM;
//! - hooks compiled in but off against the plain kernel, with the noise;
//! - the VM/bare-metal ratio of each mode, with where it comes from and the
//!   exits the host traced during the whole VM run.
//!
//! `XVMM_PROBES_SAMPLES` (default 2000), `XVMM_PROBES_ROUNDS` (default 5),
//! `XVMM_PROBES_PAIRS` (L1 boot pairs, default 2), `XVMM_PROBES_RUNS`
//! (no-probe runs per kernel and boot, default 3).

use std::path::{Path, PathBuf};
use std::time::Duration;
use xvmm::progress::Silent;
use xvmm_harness::{self as harness, l1, Artifacts, Step};
use xvmm_kernel::{self as kernel, BuildRequest, BuiltKernel, Flavour};
use xvmm_results::probes::{self, mode, Probe};
use xvmm_results::{Report, Stats};

const L1_XPERF: &str = "/bin/xperf";
const L2_PLAIN: &str = "/l2/bzImage-plain";
const WARMUP: &str = "100";
const NULL_SAMPLES: &str = "5000";
const VM_TIMEOUT: u64 = 1500;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    samples: String,
    rounds: String,
    pairs: u64,
    runs: u64,
}

fn step(name: String, argv: Vec<String>) -> Step {
    Step {
        name,
        timeout_secs: VM_TIMEOUT + 60,
        marker: None,
        stop_at_marker: false,
        argv,
    }
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// `xperf probes` in L1.
fn bm_step(name: String, s: &Settings, modes: &str) -> Step {
    step(
        name,
        strings(&[
            L1_XPERF,
            "probes",
            "--modes",
            modes,
            "--samples",
            &s.samples,
            "--rounds",
            &s.rounds,
            "--warmup",
            WARMUP,
            "--null-samples",
            NULL_SAMPLES,
            "--json",
            "-",
        ]),
    )
}

/// `xperf probes` as L2's /init under xvmm.
fn vm_step(name: String, s: &Settings, kernel: &str, modes: &str, trace: bool) -> Step {
    let cmdline = format!(
        "{} quiet no_timer_check -- probes --modes {modes} --rounds {} --null-samples {NULL_SAMPLES}",
        xvmm::boot::cmdline::default_cmdline(),
        s.rounds
    );
    let mut argv = strings(&[
        l1::XVMM,
        "--kernel",
        kernel,
        "--cmdline",
        &cmdline,
        "--mem",
        &harness::L2_MEM_MIB.to_string(),
        "--timeout",
        &VM_TIMEOUT.to_string(),
        "--samples",
        &s.samples,
        "--warmup",
        WARMUP,
        "--json",
        "-",
    ]);
    if trace {
        argv.push("--trace".into());
    }
    step(name, argv)
}

/// The steps of one L1 boot; the first patched boot also does the full runs.
fn plan(s: &Settings, patched: bool, full: bool) -> Vec<Step> {
    let tag = if patched { "patched" } else { "plain" };
    let mut steps = Vec::new();
    if full {
        steps.push(bm_step("bm-full".into(), s, "all"));
        steps.push(vm_step("vm-full".into(), s, l1::L2_BZIMAGE, "all", true));
        // The exits of a VM run without probes, to hold the full run's against.
        steps.push(vm_step(
            "vm-none-traced".into(),
            s,
            l1::L2_BZIMAGE,
            "none",
            true,
        ));
        for k in 0..s.runs {
            steps.push(vm_step(
                format!("vm-patched-{k}"),
                s,
                l1::L2_BZIMAGE,
                "none",
                false,
            ));
            steps.push(vm_step(format!("vm-plain-{k}"), s, L2_PLAIN, "none", false));
        }
    }
    for k in 0..s.runs {
        steps.push(bm_step(format!("bm-{tag}-{k}"), s, "none"));
    }
    steps
}

fn build(flavour: Flavour, patched: bool) -> Result<BuiltKernel, String> {
    let request = BuildRequest {
        patched,
        ..BuildRequest::new(flavour)
    };
    kernel::build(&request, &Silent).map_err(|e| e.to_string())
}

/// One L1 boot; returns the reports of its steps by name.
fn boot(
    a: &Artifacts,
    xperf: &Path,
    l2_plain: &Path,
    steps: &[Step],
    group: &str,
) -> Result<Vec<(String, Report)>, String> {
    let mut cpio = harness::l1_initramfs(a, steps, false).map_err(|e| e.to_string())?;
    harness::append_files(
        &mut cpio,
        &[(L1_XPERF, xperf, 0o755), (L2_PLAIN, l2_plain, 0o644)],
    )
    .map_err(|e| e.to_string())?;
    let run = harness::run_l1(a, &cpio, group, Duration::from_secs(4 * 3600))
        .map_err(|e| e.to_string())?;
    println!(
        "L1 boot {group}: {:.0} s (console {})",
        run.seconds,
        run.log.display()
    );
    let mut reports = Vec::new();
    for s in steps {
        match run.report(&s.name) {
            Ok(r) => reports.push((s.name.clone(), r)),
            Err(e) => println!(
                "  step {}: {e} (outcome {:?})",
                s.name,
                run.step(&s.name).map(|r| r.outcome.to_string())
            ),
        }
    }
    Ok(reports)
}

fn find<'a>(reports: &'a [(String, Report)], name: &str) -> Option<&'a Report> {
    reports.iter().find(|(n, _)| n == name).map(|(_, r)| r)
}

/// The no-probe round trips of `crossing` in every report whose step name starts with `prefix`.
fn baselines(reports: &[(String, Report)], prefix: &str, crossing: &str) -> Vec<Stats> {
    reports
        .iter()
        .filter(|(n, _)| n.starts_with(prefix))
        .filter_map(|(_, r)| {
            r.crossing(crossing)?
                .round_trip
                .as_ref()
                .map(|i| i.raw.clone())
        })
        .collect()
}

fn added(report: &Report, m: &str, crossing: &str) -> Option<i64> {
    report
        .probes
        .iter()
        .find(|p| p.mode == m && p.crossing == crossing)
        .and_then(Probe::added_median)
}

fn print_jump_target(side: &str, r: &Report) {
    for crossing in ["getppid", "pf-refault"] {
        match (
            added(r, mode::KPROBE_INT3, crossing),
            added(r, mode::KPROBE_OPTIMIZED, crossing),
        ) {
            (Some(i), Some(o)) => {
                let x = i as f64 / o.max(1) as f64;
                println!(
                    "  {side:<11} {crossing:<11} int3 {i:>7} ticks/hit, optimized {o:>6}: {x:>5.1}x cheaper ({})",
                    if x >= 5.0 { "target >= 5x met" } else { "target >= 5x NOT met" }
                );
            }
            _ => println!("  {side:<11} {crossing:<11} not both measured"),
        }
    }
}

fn print_hooks(side: &str, patched: &[Stats], plain: &[Stats], crossing: &str) {
    let p = probes::hooks_off(crossing, patched, plain);
    let med = |s: &Option<Stats>| s.as_ref().map_or(0, |s| s.median);
    println!(
        "  {side:<11} {crossing:<11} plain {:>6}  patched {:>6}  {}",
        med(&p.baseline),
        med(&p.probed),
        p.notes
            .first()
            .map(String::as_str)
            .unwrap_or_else(|| p.status.why_not().map_or("", |_| "not measured"))
    );
}

/// Exits per reason of a traced VM run, "reason count, ...".
fn exits(r: &Report) -> (u64, String) {
    let total = r.host_exits.iter().map(|e| e.exit_to_entry.count).sum();
    let reasons: Vec<String> = r
        .host_exits
        .iter()
        .map(|e| format!("{} {}", e.reason, e.exit_to_entry.count))
        .collect();
    (total, reasons.join(", "))
}

fn print_vm_ratios(vm: &Report, bm: &Report, quiet_vm: Option<&Report>) {
    let rows = probes::compare_probes(&vm.probes, &bm.probes);
    println!("{}", xvmm_results::render::probe_comparison_table(&rows));
    println!(
        "  in the harness L1 runs the SMP host kernel and L2 the uniprocessor guest kernel, both \
         under TCG: the same mode runs less kernel code in L2, so ratios below 1 say nothing \
         about KVM"
    );
    let hits: u64 = vm.probes.iter().map(|p| p.hits).sum();
    let (n, reasons) = exits(vm);
    println!(
        "  exits L1's KVM traced during the whole VM run with every mode (boot included): {n} ({reasons}); \
         probe hits counted in the guest: {hits}"
    );
    if let Some(q) = quiet_vm {
        let (n, reasons) = exits(q);
        println!("  the same VM run without any probe (--modes none): {n} exits ({reasons})");
    }
    // The exits a probe hit could cause: an intercepted exception (#BP,
    // #DB) or a nested page fault (SVM and VMX names).
    let suspicious: Vec<&str> = vm
        .host_exits
        .iter()
        .map(|e| e.reason.as_str())
        .filter(|r| {
            ["excp", "EXCEPTION", "npf", "EPT"]
                .iter()
                .any(|k| r.contains(k))
        })
        .collect();
    if suspicious.is_empty() {
        println!(
            "  no exception (#BP, #DB) or nested-page-fault exit at all, the exits a probe hit \
             could cause: the hits stay in the guest (whole-run counts: xperf probes runs are not \
             joined sample by sample with the host trace as the crossing run is)"
        );
    } else {
        println!(
            "  exits a probe hit could cause were traced: {} (whole-run counts against the run without \
             probes: xperf probes runs are not joined sample by sample with the host trace)",
            suspicious.join(", ")
        );
    }
}

fn main() {
    let s = Settings {
        samples: env_u64("XVMM_PROBES_SAMPLES", 2000).to_string(),
        rounds: env_u64("XVMM_PROBES_ROUNDS", 5).to_string(),
        pairs: env_u64("XVMM_PROBES_PAIRS", 2),
        runs: env_u64("XVMM_PROBES_RUNS", 3),
    };
    let kernels = (|| -> Result<_, String> {
        Ok((
            build(Flavour::Host, true)?,
            build(Flavour::Host, false)?,
            build(Flavour::Guest, true)?,
            build(Flavour::Guest, false)?,
        ))
    })();
    let (host_patched, host_plain, guest_patched, guest_plain) = match kernels {
        Ok(k) => k,
        Err(e) => return println!("probes bench: cannot build the kernels: {e}"),
    };
    let a = match harness::with_static_binaries(host_patched.clone(), guest_patched, &["xperf"]) {
        Ok(a) => a,
        Err(e) => return println!("probes bench: {e}"),
    };
    let xperf: PathBuf = a.xvmm.with_file_name("xperf");
    let mut reports = Vec::new();
    for pair in 0..s.pairs {
        for patched in [true, false] {
            let mut boot_a = a.clone();
            boot_a.l1_kernel = if patched {
                host_patched.clone()
            } else {
                host_plain.clone()
            };
            let steps = plan(&s, patched, pair == 0 && patched);
            let group = format!(
                "probes-bench-{}-{pair}",
                if patched { "patched" } else { "plain" }
            );
            match boot(&boot_a, &xperf, &guest_plain.bzimage, &steps, &group) {
                Ok(r) => reports.extend(r.into_iter().map(|(n, r)| (format!("{n}@{pair}"), r))),
                Err(e) => return println!("probes bench: {e}"),
            }
        }
    }
    report(&reports);
}

fn report(reports: &[(String, Report)]) {
    let (bm, vm) = (find(reports, "bm-full@0"), find(reports, "vm-full@0"));
    for (side, r) in [("bare metal (L1)", bm), ("VM (L2)", vm)] {
        if let Some(r) = r {
            println!(
                "\n=== {side}, TCG-emulated\n{}",
                xvmm_results::render::probes_table(r)
            );
        }
    }
    println!("\ntargets (TCG-emulated timings: ratios, not absolute costs)");
    println!("jump-optimized kprobe vs int3 kprobe on the same instruction:");
    for (side, r) in [("bare metal", bm), ("VM", vm)] {
        if let Some(r) = r {
            print_jump_target(side, r);
        }
    }
    println!(
        "xperf hooks compiled in but off vs the plain kernel (no-probe round trips, run medians):"
    );
    for crossing in ["getppid", "pf-refault"] {
        print_hooks(
            "bare metal",
            &baselines(reports, "bm-patched", crossing),
            &baselines(reports, "bm-plain", crossing),
            crossing,
        );
        print_hooks(
            "VM",
            &baselines(reports, "vm-patched", crossing),
            &baselines(reports, "vm-plain", crossing),
            crossing,
        );
    }
    if let (Some(vm), Some(bm)) = (vm, bm) {
        println!("VM/bare-metal ratio per mode:");
        print_vm_ratios(vm, bm, find(reports, "vm-none-traced@0"));
    }
}
