//! The microguest on real KVM: boots the nested harness (QEMU TCG -> L1 with
//! KVM_AMD) once and runs the default microguest measurement there, twice: once
//! for the human table, once `--quiet --raw --json -` for the report, which is
//! checked with `xvmm::microguest::verify`. Prints the table, the check and
//! the wall time; never fails on numbers (TCG timings are emulated: they show
//! that the crossings work and are consistent, not what hardware costs).
//!
//! `XVMM_NESTED_SAMPLES` (default 2000) sets the samples per row and
//! `XVMM_NESTED_TIMEOUT` (default 500) xvmm's --timeout in seconds.

use std::time::Duration;
use xvmm_harness::{self as harness, l1, HarnessRun, Step};
use xvmm_results::Report;

fn step(name: &str, argv: &[String]) -> Step {
    Step {
        name: name.into(),
        timeout_secs: 600,
        marker: None,
        stop_at_marker: false,
        argv: argv.to_vec(),
    }
}

/// The number in environment variable `name`, `default` when it is unset
/// or not a number.
fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xvmm's command lines in L1: the one for the human table and the one
/// writing the raw report as JSON to stdout.
fn microguest_argvs(samples: u64, timeout: u64) -> (Vec<String>, Vec<String>) {
    let warmup = (samples / 10).max(1);
    let base: Vec<String> = [
        l1::XVMM,
        "--samples",
        &samples.to_string(),
        "--warmup",
        &warmup.to_string(),
        "--timeout",
        &timeout.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut json_argv = base.clone();
    json_argv.extend(["--quiet", "--raw", "--json", "-"].map(String::from));
    (base, json_argv)
}

/// Boots L1 with both steps; `None` (said on stdout) where the harness
/// cannot be prepared or run.
fn run_in_l1(table_argv: &[String], json_argv: &[String], timeout: u64) -> Option<HarnessRun> {
    let artifacts = match harness::prepare() {
        Ok(a) => a,
        Err(e) => {
            println!("nested harness: cannot prepare: {e}");
            return None;
        }
    };
    let steps = [
        step("microguest-table", table_argv),
        step("microguest-json", json_argv),
    ];
    let run = harness::l1_initramfs(&artifacts, &steps, false).and_then(|initrd| {
        let limit = Duration::from_secs(2 * timeout + 300);
        harness::run_l1(&artifacts, &initrd, "microguest", limit)
    });
    match run {
        Ok(r) => Some(r),
        Err(e) => {
            println!("nested harness: {e}");
            None
        }
    }
}

/// How L1 came up, how each step ended, and the microguest's table.
fn print_run_and_table(run: &HarnessRun) {
    for line in xvmm_benches::l1_run_lines(run) {
        println!("{line}");
    }
    println!();
    for line in run.output("microguest-table") {
        println!("{line}");
    }
}

/// The report's TSC quantum and stamp costs, and what
/// `xvmm::microguest::verify` finds wrong with it.
fn print_report_and_its_check(report: &Report) {
    let quantum = report.machine.as_ref().and_then(|m| m.tsc_quantum_ticks);
    println!("\nTSC quantum on real KVM (TCG-emulated): {quantum:?} ticks");
    if let Some(costs) = &report.stamp_costs {
        println!(
            "stamp pairs (medians): user {}, kernel {:?}, inner kernel {:?}; corrections {:?} (derivation problems: {:?})",
            costs.user_pair.stats.median,
            costs.kernel_pair.as_ref().map(|p| p.stats.median),
            costs.kernel_pair_inner.as_ref().map(|p| p.stats.median),
            costs.corrections,
            costs.derivation_problems()
        );
        if let Some(sweep) = &costs.user_sweep {
            println!("user pair sweep: {}", sweep.reason);
        }
    }
    println!(
        "clean samples: the microguest runs with interrupts off, so every valid sample is clean"
    );
    let problems = xvmm::microguest::verify::problems(report);
    if problems.is_empty() {
        println!("\nreport check (verify::problems) on real KVM: passed");
    } else {
        println!("\nreport check on real KVM: {} problem(s)", problems.len());
        for p in problems {
            println!("- {p}");
        }
    }
}

fn main() {
    let samples = env_number("XVMM_NESTED_SAMPLES", 2000);
    let timeout = env_number("XVMM_NESTED_TIMEOUT", 500);
    let (table_argv, json_argv) = microguest_argvs(samples, timeout);
    let Some(run) = run_in_l1(&table_argv, &json_argv, timeout) else {
        return;
    };
    print_run_and_table(&run);
    let json = run.output("microguest-json").join("\n");
    match Report::from_json(&json) {
        Ok(report) => print_report_and_its_check(&report),
        Err(e) => println!("\nno parsable report from L1: {e}\n{}", run.tail(20)),
    }
}
