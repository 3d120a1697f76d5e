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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;
use xvmm_harness::{self as harness, l1, Step};
use xvmm_results::schema::workload::{RowExits, Workload, FAMILY_FAULT, FAMILY_SYSCALL};
use xvmm_results::Report;

const BUSYBOX: &str = "/bin/busybox";
const STRACE: &str = "/usr/bin/strace";
/// The workload: the same on both steps.
const SCRIPT: &str = "/bin/busybox cat /proc/cpuinfo > /dev/null; /bin/busybox ls / > /dev/null";
/// The same in L2, where xvmm puts busybox in /workload.
const VM_SCRIPT: &str =
    "/workload/busybox cat /proc/cpuinfo > /dev/null; /workload/busybox ls / > /dev/null";
/// The L2 run's limit, seconds (TCG: the boot alone takes minutes).
const VM_TIMEOUT: u64 = 360;

fn plan() -> Vec<Step> {
    vec![
        Step::run(
            "xperf",
            300,
            &[
                l1::XPERF,
                "workload",
                "--json",
                "-",
                "--",
                BUSYBOX,
                "sh",
                "-c",
                SCRIPT,
            ],
        ),
        Step::run(
            "strace",
            300,
            &[STRACE, "-f", "-c", "--", BUSYBOX, "sh", "-c", SCRIPT],
        ),
        vm_step(),
    ]
}

/// `xvmm --kernel L2 --workload busybox -- sh -c VM_SCRIPT` in L1: the
/// JSON on stdout, L2's console on stderr.
fn vm_step() -> Step {
    let cmdline = format!(
        "{} quiet no_timer_check",
        xvmm::boot::cmdline::default_cmdline()
    );
    let rest = [
        "--workload",
        BUSYBOX,
        "--json",
        "-",
        "--",
        "sh",
        "-c",
        VM_SCRIPT,
    ];
    Step {
        name: "vm".into(),
        timeout_secs: VM_TIMEOUT + 30,
        marker: None,
        stop_at_marker: false,
        argv: harness::xvmm_l2_argv(&cmdline, VM_TIMEOUT, &rest),
    }
}

struct Run {
    workload: Workload,
    /// The L2 run's report, with the host's exits joined.
    vm: Report,
    /// strace's summary: calls per system call.
    strace: BTreeMap<String, u64>,
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
            (BUSYBOX, Path::new(BUSYBOX), 0o755),
        ],
    )
    .map_err(|e| format!("busybox-static (harness/setup.sh installs it): {e}"))?;
    harness::append_dynamic(&mut cpio, Path::new(STRACE), STRACE)
        .map_err(|e| format!("strace (harness/setup.sh installs it): {e}"))?;
    let run = harness::run_l1(&artifacts, &cpio, "workload", Duration::from_secs(20 * 60))
        .map_err(|e| e.to_string())?;
    eprintln!("{}", run.summary("nested workload harness"));
    let report = run.exited_report("xperf")?;
    let workload = report
        .workload
        .ok_or("no workload block in xperf's report")?;
    let strace = strace_counts(&run.stderr("strace"));
    let vm = run.exited_report("vm")?;
    Ok(Run {
        workload,
        vm,
        strace,
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

/// Issue 38 item 2 in L2: the guest's intervals arrive whole, the
/// timeline they are placed on is verified, and every exit the host
/// traced is counted once: inside an interval, outside every interval
/// in the command's run, or outside the run.
#[test]
fn the_vm_run_joins_every_traced_exit_with_the_workloads_intervals() {
    if skipped() {
        return;
    }
    let r = &run().vm;
    let w = r.workload.as_ref().expect("a workload block");
    assert!(w.ended.succeeded(), "{:?}", w.ended);
    assert_eq!(w.command[0], "/workload/busybox");
    assert_eq!(
        w.command[3], VM_SCRIPT,
        "an argument with spaces arrives whole"
    );
    let t = r.timeline.as_ref().expect("a timeline");
    assert!(t.verified, "timeline: {:?}", t.reason);
    let x = w.exits.as_ref().expect("the exits joined");
    assert!(x.timeline_verified);
    assert_eq!(w.streamed, Some(x.intervals), "sent against joined");
    assert_eq!((x.chunks_refused, w.stream_stopped.as_deref()), (0, None));
    // As many intervals as the rows count.
    let timed: u64 = w.rows.iter().map(|row| row.length.count).sum();
    assert_eq!(x.intervals, timed);
    assert!(x.rows.iter().any(|row| row.count() > 0), "{x:?}");
    assert!(x.rows.iter().all(|row| row.family != "unknown"), "{x:?}");
    let joined: u64 = x.rows.iter().map(RowExits::count).sum::<u64>()
        + x.outside.iter().map(|o| o.count).sum::<u64>()
        + x.outside_window;
    let traced: u64 = r.host_exits.iter().map(|e| e.exit_to_entry.count).sum();
    if t.lost_events == 0 {
        assert_eq!(joined, traced, "every traced exit counted once");
    }
    eprintln!(
        "{}",
        xvmm_results::render::workload_table(w, r.host.tsc_khz)
    );
    // The shell execs twice and waits for the cat it forked.
    let names: Vec<&str> = w.family(FAMILY_SYSCALL).map(|r| r.name.as_str()).collect();
    for name in ["execve", "wait4"] {
        assert!(names.contains(&name), "no {name} row in {names:?}");
    }
}
