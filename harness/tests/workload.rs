//! `xperf workload` on the project's own Linux 6.12 (L1 of the nested
//! harness, bare metal to it), where kprobe events exist: user faults are
//! timed by the return probe on `handle_mm_fault`, and the system call
//! counts agree with strace's (`strace -f -c`, ptrace, an independent
//! tracer) on the same command, in ONE L1 boot:
//! - step `xperf`: `xperf workload --json - -- busybox sh -c ...`;
//! - step `strace`: `strace -f -c -- busybox sh -c ...` (its summary on
//!   stderr).
//!
//! Debian's static busybox is the workload (a shell that forks and execs
//! two of its applets, a file read, a directory listed) and strace comes
//! with its libraries: harness/setup.sh installs both. Figures are
//! TCG-emulated: only counts, shapes and relations are asserted.
//! XVMM_SKIP_HARNESS=1 skips.

#[path = "support/workload_pairs.rs"]
mod workload_pairs;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;
use workload_pairs::{
    assert_decomposed, assert_joined_whole, assert_real_pairs, calls, cat, pair, vm_step,
    workload_steps, Pair,
};
use xvmm_harness::workloads::{BUSYBOX, HOST_BUSYBOX, REAL, SCRIPT};
use xvmm_harness::{self as harness, l1, Step};
use xvmm_results::schema::workload::{Workload, FAMILY_FAULT, FAMILY_SYSCALL};
use xvmm_results::Report;

const STRACE: &str = "/usr/bin/strace";
/// Debian's linux-perf: `perf kvm stat`, the host's exit counts by reason.
const PERF: &str = "/usr/bin/perf";
const PERF_DATA: &str = "/perf.data";
const PERF_VM_JSON: &str = "/perf-vm.json";

fn plan() -> Vec<Step> {
    let mut plan = vec![cat("mounts-before", "/proc/mounts")];
    plan.extend(workload_steps("sh", SCRIPT, l1::L2_BZIMAGE));
    plan.push(Step::run(
        "strace",
        300,
        &[STRACE, "-f", "-c", "--", BUSYBOX, "sh", "-c", SCRIPT],
    ));
    for (name, script) in REAL {
        plan.extend(workload_steps(name, script, l1::L2_BZIMAGE));
    }
    // Every xperf and xvmm run above restored L1's tracing mounts.
    plan.push(cat("mounts-after", "/proc/mounts"));
    plan.extend(perf_steps());
    plan
}

/// `perf kvm stat record` around one more L2 run of SCRIPT (`perf-vm`), its
/// report by exit reason (`perf-report`, on stderr), and that run's own
/// report (`perf-vm-report`). perf mounts tracefs itself to find the kvm
/// tracepoints.
fn perf_steps() -> Vec<Step> {
    let mut vm = vm_step("perf-vm", SCRIPT, (l1::L2_BZIMAGE, ""), PERF_VM_JSON);
    // No baseline: this run is perf's.
    let at = vm.argv.iter().position(|a| a == "--baseline").unwrap();
    vm.argv.drain(at..at + 2);
    let record = [PERF, "kvm", "stat", "record", "-o", PERF_DATA, "--"];
    vm.argv.splice(0..0, record.iter().map(|a| a.to_string()));
    vec![
        vm,
        Step::run(
            "perf-report",
            120,
            &[
                PERF,
                "kvm",
                "-i",
                PERF_DATA,
                "stat",
                "report",
                "--event=vmexit",
            ],
        ),
        cat("perf-vm-report", PERF_VM_JSON),
    ]
}

/// perf kvm stat report's table: "VM-EXIT Samples Samples% Time% ...",
/// one exit reason a line.
fn perf_counts(lines: &[&str]) -> BTreeMap<String, u64> {
    lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let samples = f.get(1)?.parse().ok()?;
            f.get(2)?
                .ends_with('%')
                .then(|| (f[0].to_string(), samples))
        })
        .collect()
}

struct Run {
    /// The first workload (SCRIPT): xperf's record of it in L1.
    workload: Workload,
    /// It in L1 and L2, and their comparison.
    sh: Pair,
    /// strace's summary: calls per system call.
    strace: BTreeMap<String, u64>,
    /// The real workloads, each by name: its pair, or why there is none.
    real: Vec<(&'static str, Result<Pair, String>)>,
    /// L1's tracefs and debugfs mounts before the first step and after the
    /// last xperf and xvmm runs.
    mounts: (Vec<String>, Vec<String>),
    /// perf kvm stat's exit counts by reason, and xvmm's report of the same
    /// run, or why there are none.
    perf: Result<(BTreeMap<String, u64>, Report), String>,
}

fn skipped() -> bool {
    harness::skipped("nested workload harness test")
}

/// strace -c's table: "% time seconds usecs/call calls [errors] syscall".
fn strace_counts(lines: &[&str]) -> BTreeMap<String, u64> {
    lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.last()?;
            let calls = f.get(3)?.parse().ok()?;
            (f.first()?.parse::<f64>().is_ok() && name != "total")
                .then(|| (name.to_string(), calls))
        })
        .collect()
}

fn boot() -> Result<Run, String> {
    let (artifacts, xperf) =
        harness::prepare_patched_with_xperf(Default::default()).map_err(|e| e.to_string())?;
    let mut cpio = harness::l1_initramfs(&artifacts, &plan(), false).map_err(|e| e.to_string())?;
    harness::append_files(
        &mut cpio,
        &[
            (l1::XPERF, &xperf, 0o755),
            (BUSYBOX, Path::new(HOST_BUSYBOX), 0o755),
        ],
    )
    .map_err(|e| format!("busybox-static (harness/setup.sh installs it): {e}"))?;
    harness::append_dynamic(&mut cpio, Path::new(STRACE), STRACE)
        .map_err(|e| format!("strace (harness/setup.sh installs it): {e}"))?;
    harness::append_dynamic(&mut cpio, Path::new(PERF), PERF)
        .map_err(|e| format!("perf (harness/setup.sh installs linux-perf): {e}"))?;
    let run = harness::run_l1(&artifacts, &cpio, "workload", Duration::from_secs(20 * 60))
        .map_err(|e| e.to_string())?;
    eprintln!("{}", run.summary("nested workload harness"));
    let sh = pair(&run, "sh")?;
    let workload = sh
        .bm
        .workload
        .clone()
        .ok_or("no workload block in xperf's report")?;
    let strace = strace_counts(&run.stderr("strace"));
    let real = REAL
        .iter()
        .map(|&(name, _)| (name, pair(&run, name)))
        .collect();
    let perf = run
        .exited("perf-vm")
        .and_then(|()| run.exited("perf-report"))
        .and_then(|()| run.exited_report("perf-vm-report"))
        .map(|report| (perf_counts(&run.stderr("perf-report")), report));
    let tracing_mounts = |step: &str| -> Vec<String> {
        run.stdout(step)
            .iter()
            .filter(|l| l.contains("tracefs") || l.contains("debugfs"))
            .map(|l| l.to_string())
            .collect()
    };
    run.exited("mounts-after")?;
    let mounts = (
        tracing_mounts("mounts-before"),
        tracing_mounts("mounts-after"),
    );
    Ok(Run {
        workload,
        sh,
        strace,
        real,
        mounts,
        perf,
    })
}

fn run() -> &'static Run {
    static RUN: OnceLock<Result<Run, String>> = OnceLock::new();
    match RUN.get_or_init(boot) {
        Ok(r) => r,
        Err(e) => panic!("nested workload harness failed: {e}"),
    }
}

#[test]
fn system_call_counts_agree_with_strace_in_l1() {
    if skipped() {
        return;
    }
    let r = run();
    assert!(r.strace.len() > 10, "strace's summary: {:?}", r.strace);
    let returned: BTreeMap<String, u64> = r
        .workload
        .family(FAMILY_SYSCALL)
        .filter(|row| row.length.count > 0)
        .map(|row| (row.name.clone(), row.length.count))
        .collect();
    assert_eq!(returned, r.strace, "xperf against strace");
    // sh forks cat and execs ls in itself (the last command of a -c).
    assert_eq!(r.workload.tasks, 2, "sh and the cat it forked");
    assert_eq!(r.workload.lost_events, 0);
    assert!(r.workload.ended.succeeded(), "{:?}", r.workload.ended);
}

#[test]
fn faults_are_timed_by_the_return_probe_on_a_kernel_with_kprobes() {
    if skipped() {
        return;
    }
    let w = &run().workload;
    assert!(w.fault_end.contains("kretprobe"), "{}", w.fault_end);
    let faults: Vec<_> = w.family(FAMILY_FAULT).collect();
    assert!(!faults.is_empty(), "no user fault recorded");
    let timed: u64 = faults.iter().map(|r| r.length.count).sum();
    let untimed: u64 = faults.iter().map(|r| r.untimed).sum();
    // A fault opened again before its end (a handle_mm_fault retried, or
    // one that never reached it) is unpaired; nearly all close.
    assert!(
        timed > 20 && untimed == 0,
        "timed {timed}, untimed {untimed}"
    );
    assert!(
        w.unpaired.opens * 10 < timed,
        "{} faults never closed of {timed}",
        w.unpaired.opens
    );
    for r in &faults {
        assert!(r.length.min > 0 && r.length.p99 >= r.length.median, "{r:?}");
    }
    // Every exec'd program's first instruction faults: exec faults exist.
    assert!(w
        .row(FAMILY_FAULT, "exec")
        .is_some_and(|r| r.length.count >= 3));
}

/// Issue 38 item 2 in L2.
#[test]
fn the_vm_run_joins_every_traced_exit_with_the_workloads_intervals() {
    if skipped() {
        return;
    }
    assert_joined_whole("sh", SCRIPT, &run().sh.vm);
}

/// Issue 38 item 2, `--baseline`.
#[test]
fn the_vm_runs_extra_kernel_time_decomposes_against_bare_metal() {
    if skipped() {
        return;
    }
    let p = &run().sh;
    assert_decomposed("sh", p);
    // One script: it execs and waits as often in both.
    for call in ["execve", "wait4"] {
        let (vm, bare) = calls(p, call);
        assert!(vm > 0 && vm == bare, "{call}: {vm} against {bare}");
    }
}

/// Issue 38 item 4: real work on bare metal (L1) and in L2, each joined
/// whole and decomposed, each with the system calls its script makes as
/// often on both sides.
#[test]
fn real_workloads_run_on_bare_metal_and_in_l2_and_decompose() {
    if skipped() {
        return;
    }
    assert_real_pairs(&run().real);
}

/// Issue 38 item 3: on one L2 run, the exits xvmm's trace counted by reason
/// agree with `perf kvm stat`'s (perf's own tracepoint events, a tracer
/// independent of xvmm's tracefs instance), within the events xvmm's
/// trace says it lost.
#[test]
fn the_hosts_exit_counts_agree_with_perf_kvm_stat() {
    if skipped() {
        return;
    }
    let (perf, report) = match &run().perf {
        Ok(p) => p,
        Err(e) => panic!("perf kvm stat: {e}"),
    };
    let ours: BTreeMap<String, u64> = report
        .host_exits
        .iter()
        .map(|e| (e.reason.clone(), e.exit_to_entry.count))
        .collect();
    eprintln!("perf kvm stat: {perf:?}\nxvmm --trace: {ours:?}");
    assert!(perf.len() >= 3 && ours.len() >= 3, "{perf:?} {ours:?}");
    let lost = report.timeline.as_ref().map_or(0, |t| t.lost_events);
    let mut off = Vec::new();
    for reason in perf.keys().chain(ours.keys()) {
        let (p, o) = (
            perf.get(reason).copied().unwrap_or(0),
            ours.get(reason).copied().unwrap_or(0),
        );
        if p.abs_diff(o) > lost {
            off.push(format!("{reason}: perf {p}, xvmm {o}"));
        }
    }
    assert!(off.is_empty(), "{} events lost; {}", lost, off.join("; "));
}

/// Ten xperf and xvmm runs in L1 leave its tracing mounts as they found
/// them (L1 boots with tracefs mounted: a run must not unmount it or mount
/// another).
#[test]
fn the_runs_leave_l1s_tracing_mounts_as_found() {
    if skipped() {
        return;
    }
    let (before, after) = &run().mounts;
    assert_eq!(before, after, "tracefs and debugfs mounts");
}
