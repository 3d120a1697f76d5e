//! Linux-guest boot tests through the nested KVM harness (QEMU TCG -> L1
//! host kernel with KVM -> static xvmm -> L2 guest kernel with xvmm-init).
//!
//! All steps run in ONE L1 boot (shared by the tests below); each test then
//! checks its step's line. Needs qemu-system-x86 and the kernel build tools
//! (`./test.sh` installs them); set XVMM_SKIP_HARNESS=1 to skip explicitly.
//! Console of the run: target/harness/linux-boot.log.

use std::sync::OnceLock;
use std::time::Duration;
use xvmm::microguest::platform::Outcome as Documented;
use xvmm_harness::{self as harness, l1, Outcome, Step, StepResult, MARKER};

/// xvmm --timeout for steps that should finish on their own.
const BOOT_TIMEOUT: u64 = 90;
/// xvmm --timeout for the hang step: long enough for the L2 kernel to reach
/// /init under TCG on a slow CI machine (about 8 s there), short enough that
/// waiting it out stays cheap.
const HANG_TIMEOUT: u64 = 20;

fn xvmm_step(name: &str, kernel: &str, cmdline: String, timeout: u64) -> Step {
    Step {
        name: name.into(),
        timeout_secs: timeout + 60,
        marker: Some(MARKER.into()),
        stop_at_marker: false,
        argv: harness::xvmm_argv(kernel, &cmdline, timeout),
    }
}

fn plan() -> Vec<Step> {
    let c = harness::l2_cmdline;
    vec![
        xvmm_step("bzimage-exit0", l1::L2_BZIMAGE, c("exit:0"), BOOT_TIMEOUT),
        xvmm_step("pvh-exit0", l1::L2_VMLINUX, c("exit:0"), BOOT_TIMEOUT),
        xvmm_step("pvh-exit7", l1::L2_VMLINUX, c("exit:7"), BOOT_TIMEOUT),
        xvmm_step(
            "reboot-kbd",
            l1::L2_VMLINUX,
            format!("{} reboot=k", c("reboot")),
            BOOT_TIMEOUT,
        ),
        xvmm_step(
            "reboot-triple",
            l1::L2_VMLINUX,
            format!("{} reboot=t", c("reboot")),
            BOOT_TIMEOUT,
        ),
        // xvmm.dmesg: /init first prints the kernel's log, several KiB that
        // the serial driver still holds in its buffer when the power-off
        // halts the CPU unless /init waits for them to be sent.
        xvmm_step(
            "poweroff",
            l1::L2_VMLINUX,
            format!("{} xvmm.dmesg", c("poweroff")),
            BOOT_TIMEOUT,
        ),
        xvmm_step("hang", l1::L2_VMLINUX, c("hang"), HANG_TIMEOUT),
        Step {
            name: "microguest-tsc-khz".into(),
            timeout_secs: 180,
            marker: None,
            stop_at_marker: false,
            argv: [
                l1::XVMM,
                "--tsc-khz",
                &GUEST_TSC_KHZ.to_string(),
                "--samples",
                "50",
                "--warmup",
                "5",
                "--quiet",
                "--json",
                "-",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect(),
        },
        Step {
            name: "microguest-trace".into(),
            timeout_secs: 300,
            marker: None,
            stop_at_marker: false,
            argv: [
                l1::XVMM,
                "--trace",
                "--samples",
                "200",
                "--warmup",
                "20",
                "--rounds",
                "2",
                "--quiet",
                "--json",
                "-",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect(),
        },
    ]
    .into_iter()
    .chain(LINEARITY_RUNS.iter().map(|name| linearity_step(name)))
    .collect()
}

/// The `xvmm linearity` steps: five runs, of which one must hold (see
/// the test). About 4 s each in L1.
const LINEARITY_RUNS: [&str; 5] = [
    "microguest-linearity-1",
    "microguest-linearity-2",
    "microguest-linearity-3",
    "microguest-linearity-4",
    "microguest-linearity-5",
];

/// `xvmm linearity` in L1, one of [`LINEARITY_RUNS`].
fn linearity_step(name: &str) -> Step {
    Step {
        name: name.into(),
        timeout_secs: 420,
        marker: None,
        stop_at_marker: false,
        argv: [
            l1::XVMM,
            "linearity",
            "--samples",
            "4000",
            // TCG's phases scatter more than hardware's: 24 decision
            // phases, so that their standard error is not one of six that
            // happened to agree.
            "--rounds",
            "12",
            "--timeout",
            "360",
            "--json",
            "-",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
    }
}

/// The guest TSC rate the microguest step asks real KVM for.
const GUEST_TSC_KHZ: u64 = 1_234_567;

fn skipped() -> bool {
    harness::skipped("nested harness test")
}

/// The one L1 boot, shared by every test in this file.
fn run() -> &'static harness::HarnessRun {
    static RUN: OnceLock<Result<harness::HarnessRun, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let artifacts = harness::prepare().map_err(|e| e.to_string())?;
        let initramfs =
            harness::l1_initramfs(&artifacts, &plan(), false).map_err(|e| e.to_string())?;
        let run = harness::run_l1(
            &artifacts,
            &initramfs,
            "linux-boot",
            Duration::from_secs(20 * 60),
        )
        .map_err(|e| e.to_string())?;
        eprintln!("{}", run.summary("nested harness"));
        Ok(run)
    });
    match result {
        Ok(run) => run,
        Err(e) => panic!("nested harness could not run: {e}"),
    }
}

fn step(name: &str) -> (&'static harness::HarnessRun, &'static StepResult) {
    let run = run();
    match run.step(name) {
        Some(s) => (run, s),
        None => panic!(
            "no result for step {name} (kvm present: {}, finished: {}); console tail:\n{}",
            run.kvm_present,
            run.finished,
            run.tail(40)
        ),
    }
}

fn assert_reached_init(name: &str) {
    let (run, s) = step(name);
    assert!(
        s.marker_ms.is_some(),
        "{name}: L2 never printed {MARKER:?}; its output:\n{}",
        run.output(name).join("\n")
    );
    assert!(run.output(name).iter().any(|l| l.contains(MARKER)));
}

fn assert_exit(name: &str, want: Outcome) {
    let (run, s) = step(name);
    assert_eq!(
        s.outcome,
        want,
        "{name}: xvmm ended with {} instead of {want}; its output:\n{}",
        s.outcome,
        run.output(name).join("\n")
    );
}

#[test]
fn l1_has_kvm_and_runs_the_whole_plan() {
    if skipped() {
        return;
    }
    let run = run();
    assert!(run.kvm_present, "no /dev/kvm in L1:\n{}", run.tail(40));
    assert!(
        run.finished,
        "L1 did not finish its plan:\n{}",
        run.tail(40)
    );
    assert_eq!(run.steps.len(), plan().len());
}

#[test]
fn bzimage_boots_to_init_and_exits_0() {
    if skipped() {
        return;
    }
    assert_reached_init("bzimage-exit0");
    assert_exit("bzimage-exit0", Outcome::Exited(0));
}

#[test]
fn vmlinux_pvh_boots_to_init_and_exits_0() {
    if skipped() {
        return;
    }
    assert_reached_init("pvh-exit0");
    assert_exit("pvh-exit0", Outcome::Exited(0));
}

#[test]
fn exit_port_status_becomes_xvmm_exit_status() {
    if skipped() {
        return;
    }
    assert_reached_init("pvh-exit7");
    // Guest status N exits 64 + N (README "Exit status").
    assert_exit("pvh-exit7", Outcome::Exited(64 + 7));
}

#[test]
fn keyboard_controller_reboot_is_a_clean_exit() {
    if skipped() {
        return;
    }
    assert_reached_init("reboot-kbd");
    assert_exit("reboot-kbd", Outcome::Exited(0));
}

#[test]
fn triple_fault_is_an_error_with_a_clear_message() {
    if skipped() {
        return;
    }
    assert_reached_init("reboot-triple");
    let (run, s) = step("reboot-triple");
    assert!(
        matches!(s.outcome, Outcome::Exited(c) if c != 0),
        "triple fault gave {}",
        s.outcome
    );
    let out = run.output("reboot-triple");
    let message = out.iter().find(|l| l.starts_with("xvmm: "));
    assert!(
        message.is_some_and(|m| {
            let m = m.to_lowercase();
            m.contains("triple fault") && m.contains("rip")
        }),
        "no one-line triple-fault error naming the RIP; output:\n{}",
        out.join("\n")
    );
}

#[test]
fn poweroff_without_acpi_is_a_clean_exit() {
    // A tinyconfig kernel has no ACPI, so RB_POWER_OFF halts the vCPU with
    // interrupts off ("System halted"); xvmm's idle probe sees the vCPU asleep
    // in HLT with IF=0 and ends the run with status 0, well before --timeout.
    // The step gets the boot timeout, not the hang's: the boot alone took 8 s
    // on a slow CI machine, and --timeout would end the run with 124, not 0.
    if skipped() {
        return;
    }
    assert_reached_init("poweroff");
    let (run, s) = step("poweroff");
    let out = run.output("poweroff");
    // Everything /init wrote before powering off arrives: the kernel's log,
    // down to the line near its end the kernel printed when it ran /init,
    // then the action.
    let dmesg: Vec<&str> = out
        .iter()
        .copied()
        .filter(|l| l.starts_with("XVMM-DMESG: "))
        .collect();
    assert!(
        dmesg
            .iter()
            .any(|l| l.contains("Run /init as init process")),
        "the kernel's log did not arrive whole ({} lines); output:\n{}",
        dmesg.len(),
        out.join("\n")
    );
    assert!(
        out.iter().any(|l| l.contains("action Poweroff")),
        "the action line was lost; output:\n{}",
        out.join("\n")
    );
    assert_exit("poweroff", Outcome::Exited(0));
    assert!(
        out.iter()
            .any(|l| l.starts_with("xvmm: the guest halted with interrupts off")),
        "no halt note; output:\n{}",
        out.join("\n")
    );
    assert!(
        s.elapsed_ms < BOOT_TIMEOUT as f64 * 1e3,
        "ended at {} ms, not before the {} s timeout",
        s.elapsed_ms,
        BOOT_TIMEOUT
    );
}

#[test]
fn hang_gives_the_timeout_error() {
    if skipped() {
        return;
    }
    assert_reached_init("hang");
    assert_exit("hang", Outcome::Exited(124));
    let (run, s) = step("hang");
    let out = run.output("hang");
    assert!(
        out.iter().any(|l| l.starts_with("xvmm: timeout")),
        "no timeout message; output:\n{}",
        out.join("\n")
    );
    // It ended because of --timeout, not much later.
    assert!(
        s.elapsed_ms < (HANG_TIMEOUT as f64 + 30.0) * 1e3,
        "took {} ms",
        s.elapsed_ms
    );
}

/// `--tsc-khz` on real KVM: the microguest report carries the rate KVM gave
/// the vCPU (KVM_GET_TSC_KHZ after KVM_SET_TSC_KHZ), or xvmm refuses in one
/// line when the CPU (here: QEMU's emulated SVM) has no TSC scaling.
#[test]
fn guest_tsc_rate_on_real_kvm_is_applied_or_refused_in_one_line() {
    if skipped() {
        return;
    }
    let (run, s) = step("microguest-tsc-khz");
    let out = run.output("microguest-tsc-khz");
    match &s.outcome {
        Outcome::Exited(0) => {
            let report = xvmm_results::Report::from_json(&out.join("\n"))
                .unwrap_or_else(|e| panic!("{e}; output:\n{}", out.join("\n")));
            assert!(
                report.host.tsc_khz.abs_diff(GUEST_TSC_KHZ) <= 1_000,
                "asked for {GUEST_TSC_KHZ} kHz, the guest got {}",
                report.host.tsc_khz
            );
            eprintln!("real KVM applied --tsc-khz: {} kHz", report.host.tsc_khz);
        }
        Outcome::Exited(1) => {
            assert_eq!(out.len(), 1, "{}", out.join("\n"));
            assert!(out[0].contains("KVM_CAP_TSC_CONTROL"), "{}", out[0]);
            eprintln!("real KVM refused --tsc-khz: {}", out[0]);
        }
        other => panic!("--tsc-khz run ended with {other}:\n{}", out.join("\n")),
    }
}

/// KVM's own count of the row's exits a sample (its `exits` statistic,
/// untraced rounds, the stamp pair's phase subtracted) against the
/// tracepoints' (`kvm_exit`s in each traced sample's window): two tools,
/// one answer. One run (2026-11-30): within 0.055 on every row, 0.000
/// and 0.000 for `mov-from-cr8`, 5.043 and 5.020 for
/// `x2apic-self-ipi-tpr-sti-hlt`, 1.098 and 1.043 for `ipi` (KVM's count
/// also holds the exits between samples).
fn check_kvm_count_against_the_trace(
    e: &xvmm_results::ExitTiming,
    t: &xvmm_results::exit_trace::TracedExit,
) {
    let kvm = e.kvm_exits.and_then(|k| k.per_sample());
    let traced = t.exits_per_sample.as_ref().map(|s| s.mean);
    let (Some(kvm), Some(traced)) = (kvm, traced) else {
        panic!("{}: KVM counted {kvm:?}, the trace {traced:?}", e.name);
    };
    assert!(
        (kvm - traced).abs() <= 0.15,
        "{}: KVM counted {kvm:.3} exits a sample, the trace {traced:.3}",
        e.name
    );
}

/// Issue 12, the microguest part: on L1's real KVM every exit kind's traced
/// split has guest->host, in host and host->guest positive in at least
/// 99.9 % of its split samples (a negative part would disprove the
/// mapping), adding up to each split sample's round trip within 2 TSC
/// quanta, and an exit served in the VMM process (pio-out) spends longer
/// in the host than the cheapest one KVM serves itself (cpuid, xsetbv)
/// and than the same port or MMIO write served by an ioeventfd or a port
/// access served by the in-kernel PIC; the interrupt rows hold more than
/// one exit in their samples; KVM's own count of each row's exits agrees
/// with the trace's.
/// TCG-emulated times: relations only.
#[test]
fn microguest_exits_split_at_the_host_tracepoints() {
    if skipped() {
        return;
    }
    let report = traced_microguest_report();
    println!("{}", xvmm_results::render::traced_exit_table(&report.exits));
    let q = report
        .machine
        .as_ref()
        .and_then(|m| m.tsc_quantum_ticks)
        .expect("the TSC quantum");
    let mut in_host = std::collections::HashMap::new();
    for e in report.exits.iter().filter(|e| e.round_trip.is_some()) {
        let t = e
            .traced
            .as_ref()
            .unwrap_or_else(|| panic!("{}: not traced: {:?}", e.name, report.notes));
        check_kvm_count_against_the_trace(e, t);
        if checked_as_documented(&e.name, t) {
            continue;
        }
        // The other way round for every other row: an exit in all but a
        // few samples (394 to 399 of 400 held exactly one in past runs).
        assert!(t.no_exit * 20 <= t.samples, "{}: {t:?}", e.name);
        assert!(t.split > 0, "{}: {t:?}", e.name);
        // Per split sample: guest->host + in host + host->guest (host
        // tracepoints mapped onto the guest clock) against the sample's own
        // round trip (guest stamps), within 2 quanta.
        assert!(
            t.parts_sum_worst as f64 <= 2.0 * q,
            "{}: the parts miss a sample's round trip by {} ticks (quantum {q:.1}): {t:?}",
            e.name,
            t.parts_sum_worst
        );
        assert!(t.positive_share() >= 0.999, "{}: {t:?}", e.name);
        in_host.insert(e.name.as_str(), t.in_host.median);
    }
    // Against the cheapest exit KVM serves itself: under TCG one of them
    // can run long (one run: cpuid 136073 ticks in the host against
    // pio-out's 128160, xsetbv 78866).
    // A row missing here was not measured: say why (CI once lost
    // mmio-write, its status unseen).
    let host = |name: &str| -> u64 {
        *in_host.get(name).unwrap_or_else(|| {
            let status = report
                .exits
                .iter()
                .find(|e| e.name == name)
                .map(|e| &e.status);
            panic!(
                "{name} has no host time: {status:?}; notes: {:?}",
                report.notes
            )
        })
    };
    let pio = host("pio-out");
    let in_kvm = ["cpuid", "xsetbv"]
        .iter()
        .filter_map(|name| in_host.get(name).map(|t| (*name, *t)))
        .min_by_key(|(_, t)| *t)
        .expect("cpuid is measured");
    assert!(
        pio > in_kvm.1,
        "pio-out {pio} vs {} {} ticks in the host",
        in_kvm.0,
        in_kvm.1
    );
    // The same write served by an ioeventfd stays in KVM: less host time
    // than the trip to xvmm and back (one run: pio-out-eventfd 22412
    // against pio-out's 60034).
    // So does a port the in-kernel PIC serves (one run: pio-in-kernel 22022
    // against pio-in's 60632).
    for (user, kernel) in [
        ("pio-out", "pio-out-eventfd"),
        ("mmio-write", "mmio-write-eventfd"),
        ("pio-in", "pio-in-kernel"),
        ("pio-out", "pio-out-kernel"),
    ] {
        let (u, k) = (host(user), host(kernel));
        assert!(k < u, "{kernel} {k} vs {user} {u} ticks in the host");
    }
}

/// Issue 37 item 2, the microguest's IPI rows on L1's real KVM (two
/// vCPUs, each thread on its own host CPU of L1's two): both rows
/// measured; each sample's handler stamp lies between the sender's two on
/// the one TSC (none left out of causal order); the send-to-handler leg is
/// under the round trip it is part of; `ipi-halt` waited for every
/// receiver to halt.
/// TCG-emulated times: relations only.
#[test]
fn microguest_ipi_rows_time_both_vcpus_on_one_clock() {
    if skipped() {
        return;
    }
    let report = traced_microguest_report();
    let row = |name: &str| {
        let e = report.exits.iter().find(|e| e.name == name).expect(name);
        assert_eq!(
            e.status,
            xvmm_results::Status::Measured,
            "{name}: {:?}",
            e.status
        );
        let r = e
            .receiver
            .clone()
            .unwrap_or_else(|| panic!("{name}: no receiver"));
        let rt = e.round_trip.as_ref().expect("a round trip").raw.median;
        println!(
            "{name}: round trip {rt}, send->handler {}, handler->EOI {}, {} of {} halted, \
             CPUs {:?} -> {:?} (TCG-emulated ticks)",
            r.send_to_handler.median,
            r.handler_to_eoi.median,
            r.halted,
            r.samples(),
            r.sender_cpu,
            r.receiver_cpu
        );
        assert_eq!(r.out_of_order, 0, "{name}: {r:?}");
        assert_eq!(r.samples(), e.samples_valid, "{name}");
        assert!(r.send_to_handler.median < rt, "{name}: {r:?} against {rt}");
        assert!(r.handler_to_eoi.median > 0, "{name}: {r:?}");
        assert!(
            r.sender_cpu.is_some() && r.receiver_cpu.is_some() && r.sender_cpu != r.receiver_cpu,
            "{name}: {r:?}"
        );
        r
    };
    // ipi-halt waits for the halt; ipi does not, but under TCG its
    // sender's ICR write (an exit L1's KVM emulates) outlasts the
    // receiver's way back to HLT, so both found every receiver halted in
    // past runs (400 of 400). The control, a receiver not yet halted, is
    // PVM's (`xvmm/tests/microguest_smp.rs`).
    let (ipi, halt) = (row("ipi"), row("ipi-halt"));
    assert_eq!(halt.halted, halt.samples(), "{halt:?}");
    assert!(ipi.halted <= ipi.samples(), "{ipi:?}");
}

/// The traced checks of a row whose nested outcome is documented as
/// something other than one exit a sample; whether it was one.
fn checked_as_documented(name: &str, t: &xvmm_results::exit_trace::TracedExit) -> bool {
    // Samples that held any kvm_exit (one, more, or one whose parts
    // came out negative): all but `no_exit`.
    let exited = t.samples - t.no_exit;
    match nested_outcome(name) {
        // An interrupt of L1's can still land in a sample (and KVM
        // then watches DR7 again until the next write): a few.
        Documented::RunsWithoutExit => {
            assert!(exited * 20 <= t.samples, "{name}: {t:?}");
            true
        }
        // A spin on another vCPU: no exit in most samples; those with
        // one waited for a vCPU L1 did not run, and took longer.
        Documented::RunsWithoutExitWhileScheduled => {
            assert!(t.no_exit * 2 >= t.samples, "{name}: {t:?}");
            // One run: 11207858 ticks to the first exit, against a
            // median sample of 1212.
            assert!(
                t.split == 0 || t.guest_to_host.median > t.round_trip_traced_median,
                "{name}: {t:?}"
            );
            true
        }
        // An interrupt's path: more than one exit in all but a few.
        // Their host time together is part of the sample, not all of it.
        Documented::RunsWithSeveralExits => {
            assert!(t.more_exits * 20 >= t.samples * 19, "{name}: {t:?}");
            let per = t.exits_per_sample.as_ref().expect("exits per sample");
            let host = t.in_host_several.as_ref().expect("the exits' host time");
            assert!(per.median >= 2, "{name}: {t:?}");
            assert!(
                host.median > 0 && host.median < t.round_trip_traced_median,
                "{name}: {t:?}"
            );
            true
        }
        _ => false,
    }
}

/// The traced microguest step's report (it must have ended well).
fn traced_microguest_report() -> xvmm_results::Report {
    let (run, s) = step("microguest-trace");
    let out = run.output("microguest-trace").join("\n");
    assert_eq!(s.outcome, Outcome::Exited(0), "{out}");
    xvmm_results::Report::from_json(&out).unwrap_or_else(|e| panic!("{e}; output:\n{out}"))
}

/// What `platform.rs` documents for a row on AMD under kvm_amd, L1's CPU
/// and hypervisor here.
fn nested_outcome(row: &str) -> Documented {
    use xvmm::microguest::platform::{expected_exit, Hypervisor, Platform, Vendor};
    let l1 = Platform {
        vendor: Vendor::Amd,
        hypervisor: Hypervisor::KvmAmd,
    };
    expected_exit(row, l1).outcome
}

/// Issue 21 item 13: the kernel pair's linearity check, which this host's
/// PVM cannot make (it emulates CPL0), made on L1's real KVM, where CPL0
/// runs as the CPU runs it (here QEMU's TCG: emulated times, so the check's
/// relations, not its figures, are what counts). In one of five runs the
/// right correction passes: the correction a run would subtract agrees
/// with the long sweep, the sweep's slope with the chain's own cost per imul
/// (timed at CPL0) within 3 SE. Every run's controls are exactly what the
/// check claims (no correction, twice it, one quantum either side, chain
/// costs 5 % off), and its verdict follows from them: it holds only where
/// every control was refused, and says it cannot tell where one passed
/// (under TCG the sweeps scatter by tens of ticks: one run's kernel
/// intercept was known to +-30, wider than a quantum, so "cannot tell" is
/// the expected answer there, not a failure). Whether it holds is printed,
/// not required: TCG's load decides that. The user pair is checked too and
/// its verdict printed; it is required to hold on this host instead
/// (benches/tests/claims.rs), where CPL3 runs natively.
#[test]
fn kernel_stamps_are_linear_on_real_kvm_with_controls_one_quantum_off() {
    if skipped() {
        return;
    }
    // Under TCG a phase's timing drifts with the host's load, so one of
    // five runs must pass the right correction; each is checked for shape.
    let runs: Vec<Result<(), String>> = LINEARITY_RUNS
        .iter()
        .map(|name| linearity_in_l1(name))
        .collect();
    println!("{runs:?}");
    assert!(runs.iter().any(Result::is_ok), "{runs:?}");
}

/// One `xvmm linearity` step: both pairs checked, six controls each, the
/// exit status and each verdict as the controls give them; `Err` says why
/// the kernel pair's right correction failed.
fn linearity_in_l1(name: &str) -> Result<(), String> {
    use xvmm::microguest::linearity::{Linearity, Pair};
    use xvmm_results::linearity::Outcome as Told;
    let (run, s) = step(name);
    // The verdict line on stderr is not part of the JSON.
    let lines = run.output(name);
    let out: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("xvmm: "))
        .collect();
    let out = out.join("\n");
    let l: Linearity =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: {e}; output:\n{out}"));
    println!("{name}:\n{}", xvmm_results::render::linearity_table(&l));
    assert!(l.not_checked.is_empty(), "{:?}", l.not_checked);
    let pairs: Vec<_> = l.pairs.iter().map(|p| p.pair).collect();
    assert_eq!(pairs, [Pair::User, Pair::Kernel], "{out}");
    let expected = if l.holds() { 0 } else { 1 };
    assert_eq!(s.outcome, Outcome::Exited(expected), "{out}");
    for p in &l.pairs {
        let c = &p.check;
        if c.verdict.is_err() {
            assert!(c.controls.is_empty(), "{name}: {c:?}");
            assert_eq!(c.outcome(), Told::DoesNotHold);
            continue;
        }
        // The controls sit one quantum off, never widened to what the
        // sweeps resolve.
        assert_eq!(c.controls.len(), 6, "{name}: {c:?}");
        assert_eq!(c.control_step, Some(l.quantum), "{name}: {c:?}");
        let right = p.decided.correction;
        let step = xvmm_results::num::u64_saturating(l.quantum.round());
        for wrong in [right.saturating_sub(step), right + step] {
            assert!(
                c.controls.iter().any(|k| k.correction.abs_diff(wrong) <= 1),
                "{name}: no control at {wrong}: {c:?}"
            );
        }
        let refused = c.controls.iter().all(|k| k.refused.is_some());
        let want = if refused {
            Told::Holds
        } else {
            Told::CannotTell
        };
        assert_eq!(c.outcome(), want, "{name}: {c:?}");
    }
    let kernel = &l.pairs[1].check;
    println!("{name}: kernel pair {}", kernel.outcome().describe());
    kernel
        .verdict
        .as_ref()
        .map(|_| ())
        .map_err(|e| format!("{name}: kernel pair: {e}"))
}
