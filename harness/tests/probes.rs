//! `xperf probes` on probe-enabled kernels, bare metal against VM, in ONE
//! nested run: QEMU TCG boots the patched L1 kernel (KVM host, hooks
//! compiled in but off), which runs
//! - `bm`: `xperf probes` directly in L1 (the bare-metal side), every mode;
//! - `bad-*`: a missing symbol and an offset that is no instruction
//!   boundary, each one line and exit 1;
//! - `interrupt`: a run that gets SIGINT twice while the jump-optimized
//!   kprobe is measured, which must exit 130 and deliver what it had;
//! - `killed`: a run killed with SIGKILL once the int3 mode has set
//!   `kprobes-optimization` to 0 and the kprobe-ftrace mode's event exists,
//!   which leaves its instance, event and the sysctl; `restart`, the next
//!   start of xperf, which must undo them and say so;
//! - `state-*`: the host tracing state (`xperf probes --show-state`) before
//!   and after each of those, which must not change (after `killed` it must);
//! - `vm`: `xvmm --kernel /l2/bzImage --trace` with xperf probes as L2's
//!   `/init` (the VM side).
//!
//! Then `xvmm compare` prints the VM/bare-metal ratio per mode. Timings are
//! TCG-emulated: the tests check that every mode runs, that every hit is
//! counted and that the state is restored, not figures. Reports in
//! target/harness/probes-{bm,vm,compare}.json; console target/harness/probes.log.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use xvmm_harness::{self as harness, l1, Outcome, Step};
use xvmm_results::probes::mode;
use xvmm_results::{Environment, Report, Status};

/// Probed samples per mode and crossing, and rounds (TCG: few).
const SAMPLES: &str = "1000";
const ROUNDS: &str = "4";
const WARMUP: &str = "50";
const NULL_SAMPLES: &str = "5000";
const VM_TIMEOUT: u64 = 900;
/// The progress line of the mode the interrupt step is stopped in.
const INTERRUPT_AT: &str = "measuring kprobe-optimized on getppid";
/// The progress line the killed step gets SIGKILL at: the int3 mode before
/// it left `kprobes-optimization` at 0 (restored only at the end) and this
/// mode's dynamic event exists.
const KILL_AT: &str = "measuring kprobe-ftrace on getppid";

fn step(name: &str, timeout_secs: u64, marker: Option<&str>, argv: &[&str]) -> Step {
    Step {
        name: name.into(),
        timeout_secs,
        marker: marker.map(str::to_string),
        stop_at_marker: marker.is_some(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
    }
}

fn probes_args() -> Vec<&'static str> {
    vec![
        "--samples",
        SAMPLES,
        "--rounds",
        ROUNDS,
        "--warmup",
        WARMUP,
        "--null-samples",
        NULL_SAMPLES,
    ]
}

fn vm_cmdline() -> String {
    format!(
        "{} quiet no_timer_check -- probes --rounds {ROUNDS} --null-samples {NULL_SAMPLES}",
        xvmm::boot::cmdline::default_cmdline()
    )
}

/// The steps L1 runs, in order; each `state-*` step records the host
/// tracing state after the step before it.
fn plan() -> Vec<Step> {
    vec![
        state_step("state-before"),
        bm_step(),
        state_step("state-after-bm"),
        bad_probe_step("bad-symbol", "no_such_function_xyz"),
        bad_probe_step("bad-boundary", "__x64_sys_getppid+1"),
        state_step("state-after-bad"),
        interrupt_step(),
        state_step("state-after-interrupt"),
        killed_step(),
        state_step("state-after-kill"),
        restart_step(),
        state_step("state-after-restart"),
        vm_step(),
    ]
}

/// `xperf probes --show-state`: the host tracing state at this point.
fn state_step(name: &str) -> Step {
    step(name, 60, None, &[l1::XPERF, "probes", "--show-state"])
}

/// Every mode on the bare-metal side, the report on stdout.
fn bm_step() -> Step {
    let mut bm = vec![l1::XPERF, "probes"];
    bm.extend(probes_args());
    bm.extend(["--json", "-"]);
    step("bm", 900, None, &bm)
}

/// A `--getppid-probe` xperf must refuse (one line, exit 1).
fn bad_probe_step(name: &str, probe: &str) -> Step {
    step(
        name,
        60,
        None,
        &[l1::XPERF, "probes", "--getppid-probe", probe],
    )
}

/// A run interrupted with SIGINT while it measures at [`INTERRUPT_AT`].
fn interrupt_step() -> Step {
    let mut interrupt = vec![l1::XPERF, "probes"];
    interrupt.extend(probes_args());
    interrupt.extend(["--crossings", "getppid", "--json", "/tmp/interrupted.json"]);
    let marker = format!("{}{INTERRUPT_AT}", xvmm_init::plan::INTERRUPT);
    step("interrupt", 900, Some(&marker), &interrupt)
}

/// A run killed with SIGKILL at [`KILL_AT`], leaving its tracing state.
fn killed_step() -> Step {
    let mut killed = vec![l1::XPERF, "probes"];
    killed.extend(probes_args());
    killed.extend([
        "--crossings",
        "getppid",
        "--modes",
        "kprobe-int3,kprobe-ftrace",
    ]);
    killed.extend(["--json", "/tmp/killed.json"]);
    step("killed", 900, Some(KILL_AT), &killed)
}

/// The next start of xperf after the kill, which must undo what it left.
fn restart_step() -> Step {
    let restart = [
        l1::XPERF,
        "probes",
        "--crossings",
        "getppid",
        "--modes",
        "tracepoint",
        "--samples",
        "100",
        "--rounds",
        "1",
        "--json",
        "/tmp/restart.json",
    ];
    step("restart", 300, None, &restart)
}

/// The VM side: xvmm boots L2 with xperf probes as its `/init`, traced.
fn vm_step() -> Step {
    let rest = [
        "--samples",
        SAMPLES,
        "--warmup",
        WARMUP,
        "--trace",
        "--json",
        "-",
    ];
    let argv = harness::xvmm_l2_argv(&vm_cmdline(), VM_TIMEOUT, &rest);
    let vm: Vec<&str> = argv.iter().map(String::as_str).collect();
    step("vm", VM_TIMEOUT + 60, None, &vm)
}

struct ProbesRun {
    run: harness::HarnessRun,
    xvmm: PathBuf,
    bm: Report,
    vm: Report,
    dir: PathBuf,
}

fn skipped() -> bool {
    harness::skipped("nested probes harness test")
}

/// The one L1 boot, shared by the tests below.
fn run() -> &'static ProbesRun {
    static RUN: OnceLock<Result<ProbesRun, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let (artifacts, xperf) =
            harness::prepare_patched_with_xperf(Default::default()).map_err(|e| e.to_string())?;
        let mut initramfs =
            harness::l1_initramfs(&artifacts, &plan(), false).map_err(|e| e.to_string())?;
        harness::append_files(&mut initramfs, &[(l1::XPERF, xperf.as_path(), 0o755)])
            .map_err(|e| e.to_string())?;
        let run = harness::run_l1(
            &artifacts,
            &initramfs,
            "probes",
            Duration::from_secs(60 * 60),
        )
        .map_err(|e| e.to_string())?;
        eprintln!("{}", run.summary("nested probes harness"));
        let bm = run.exited_report("bm")?;
        let vm = run.exited_report("vm")?;
        let dir = run.log.parent().map(Path::to_path_buf).unwrap_or_default();
        for (name, r) in [("bm", &bm), ("vm", &vm)] {
            let path = dir.join(format!("probes-{name}.json"));
            std::fs::write(&path, r.to_json_pretty()).map_err(|e| e.to_string())?;
        }
        Ok(ProbesRun {
            run,
            xvmm: artifacts.xvmm,
            bm,
            vm,
            dir,
        })
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("nested probes harness failed: {e}"),
    }
}

/// Every mode ran on every crossing it applies to, with every hit counted.
/// No relation between the modes' figures is asserted: TCG emulates an
/// int3 exception about as cheaply as the jump-optimized detour, so the
/// hardware's ordering need not hold here (benches/probes prints them).
fn assert_all_modes(report: &Report, side: &str) {
    for (m, crossing, p) in harness::probe_rows(report, side) {
        assert_eq!(
            p.status,
            Status::Measured,
            "{side} {m} on {crossing}: {p:?}"
        );
        assert_eq!(p.hits, p.hits_expected, "{side} {m} on {crossing}");
        assert_eq!(p.iterations, SAMPLES.parse::<u64>().unwrap(), "{side} {m}");
        let added = p.added_ticks.as_ref().expect("added ticks");
        assert_eq!(added.count, p.iterations, "{side} {m} on {crossing}");
    }
}

#[test]
fn bare_metal_side_measures_every_mode() {
    if skipped() {
        return;
    }
    let r = run();
    println!(
        "=== bare metal (xperf probes in L1, TCG-emulated)\n{}",
        xvmm_results::render::report(&r.bm)
    );
    assert_eq!(r.bm.environment, Environment::BareMetal);
    assert!(
        r.bm.notes
            .iter()
            .any(|n| n.contains("xperf hooks compiled in, kernel.xperf_stamps=0")),
        "{:?}",
        r.bm.notes
    );
    assert_all_modes(&r.bm, "bare metal");
}

#[test]
fn vm_side_measures_every_mode_and_traces_exits() {
    if skipped() {
        return;
    }
    let r = run();
    println!(
        "=== VM (xvmm -> L2 -> xperf probes as /init, TCG-emulated)\n{}",
        xvmm_results::render::report(&r.vm)
    );
    assert_eq!(r.vm.environment, Environment::LinuxVm);
    assert_all_modes(&r.vm, "VM");
    assert!(!r.vm.host_exits.is_empty(), "no exits traced on L1's KVM");
}

fn state_of(run: &harness::HarnessRun, name: &str) -> Vec<String> {
    assert_eq!(
        run.step(name).map(|s| s.outcome.clone()),
        Some(Outcome::Exited(0)),
        "{name}"
    );
    run.output(name)
        .into_iter()
        .filter(|l| l.starts_with("state "))
        .map(str::to_string)
        .collect()
}

#[test]
fn bad_input_and_signals_leave_the_tracing_state_as_found() {
    if skipped() {
        return;
    }
    let r = &run().run;
    let before = state_of(r, "state-before");
    assert!(
        before
            .iter()
            .any(|l| l.starts_with("state kprobes-optimization: 1")),
        "{before:?}"
    );
    for after in ["state-after-bm", "state-after-bad", "state-after-interrupt"] {
        assert_eq!(state_of(r, after), before, "{after}");
    }
    for (name, needle) in [
        (
            "bad-symbol",
            "no_such_function_xyz is not a function of this kernel",
        ),
        ("bad-boundary", "not an instruction boundary"),
    ] {
        let out = r.output(name);
        assert_eq!(
            r.step(name).map(|s| s.outcome.clone()),
            Some(Outcome::Exited(1)),
            "{name}: {out:?}"
        );
        let errors: Vec<&&str> = out.iter().filter(|l| l.starts_with("xperf: ")).collect();
        assert_eq!(errors.len(), 1, "{name}: {out:?}");
        assert!(errors[0].contains(needle), "{name}: {out:?}");
    }
    let interrupt = r.step("interrupt").expect("interrupt step ran");
    let out = r.output("interrupt");
    assert_eq!(interrupt.outcome, Outcome::Exited(130), "{out:?}");
    assert!(
        interrupt.marker_ms.is_some(),
        "never reached {INTERRUPT_AT}"
    );
    // stdout and stderr reach the console through two pipes: the error line
    // is the last one xperf writes, not necessarily the last one echoed.
    let errors: Vec<&&str> = out.iter().filter(|l| l.starts_with("xperf: ")).collect();
    assert_eq!(errors.len(), 1, "{out:?}");
    assert!(errors[0].contains("stopped by signal 2"), "{out:?}");
    assert!(
        out.iter()
            .any(|l| l.contains("not measured: stopped by signal 2")),
        "the rows not measured must say so: {out:?}"
    );
}

/// SIGKILL (no destructor, no signal handler) leaves the host changed; the
/// next start of xperf finds the killed run's journal, undoes it, says so
/// in one line, and the state is then exactly as before.
#[test]
fn a_killed_run_is_undone_by_the_next_start() {
    if skipped() {
        return;
    }
    let r = &run().run;
    let before = state_of(r, "state-before");
    let killed = r.step("killed").expect("killed step ran");
    assert!(killed.marker_ms.is_some(), "never reached {KILL_AT}");
    let left = state_of(r, "state-after-kill");
    let changed: Vec<&String> = left.iter().filter(|l| !before.contains(l)).collect();
    for what in [
        "state kprobes-optimization: 0",
        "state instances: xperf-",
        "state dynamic_events: p:xperf/",
        "state journals: journal-",
    ] {
        assert!(
            changed.iter().any(|l| l.starts_with(what)),
            "SIGKILL left no {what:?}: {changed:?}"
        );
    }
    let out = r.output("restart");
    assert_eq!(
        r.step("restart").map(|s| s.outcome.clone()),
        Some(Outcome::Exited(0)),
        "{out:?}"
    );
    // One line for the killed process, the mount it made included.
    let notes: Vec<&&str> = out
        .iter()
        .filter(|l| l.starts_with("xperf: note: "))
        .collect();
    assert_eq!(notes.len(), 1, "{out:?}");
    assert!(
        notes[0].starts_with("xperf: note: restored what xperf (pid "),
        "{out:?}"
    );
    for undone in [
        "removed tracefs instance xperf-",
        "removed dynamic event xperf/",
        "/proc/sys/debug/kprobes-optimization back to 1",
        "unmounted debugfs at /sys/kernel/debug",
    ] {
        assert!(notes[0].contains(undone), "{undone:?} not in {}", notes[0]);
    }
    assert_eq!(state_of(r, "state-after-restart"), before);
}

#[test]
fn xvmm_compare_prints_the_vm_to_bare_metal_ratio_per_mode() {
    if skipped() {
        return;
    }
    let r = run();
    let (table, cmp) = harness::xvmm_compare(
        &r.xvmm,
        &r.dir.join("probes-vm.json"),
        &r.dir.join("probes-bm.json"),
        &r.dir.join("probes-compare.json"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("=== xvmm compare (VM vs bare metal, TCG-emulated)\n{table}");
    for m in mode::MEASURED {
        let row = cmp
            .probes
            .iter()
            .find(|p| p.mode == m && p.crossing == "getppid")
            .unwrap_or_else(|| panic!("no {m} row:\n{table}"));
        assert!(row.ratio.is_some_and(|x| x > 0.0), "{m}: {row:?}");
    }
    assert!(table.contains("x VM/BM"), "{table}");
}
