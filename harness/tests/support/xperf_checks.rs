//! The xperf checks of one patch series, bare metal against VM, in ONE
//! nested run: QEMU TCG boots the patched L1 kernel of `super::VERSION` (KVM
//! host + hooks, `xperf_stamps` on its command line), which runs
//! - step `bm`: the static xperf directly in L1 (the bare-metal side), and
//! - step `vm`: `xvmm --kernel /l2/bzImage` with the built-in initramfs, so
//!   the patched L2 kernel runs the same xperf as its `/init` (the VM side),
//!   with `--trace` timing L2's exits on L1's real KVM, on two vCPUs
//!   (`--cpus 2 --pin 0,1`: the join must place each exit on its vCPU), and
//! - step `vm-kpti`: the same with `pti=on` on L2's command line.
//!
//! Both reports must show the u2k/k2u split for #PF and getppid, positive
//! halves whose sum is below the round trip, and every requested sample
//! accounted for. `xvmm compare` then prints VM against bare metal.
//!
//! Included by `xperf.rs` (Linux 6.12) and `xperf_6_1.rs` (Linux 6.1), each
//! of which names its `VERSION` and `GROUP`: console in
//! target/harness/GROUP.log, the reports and the comparison in
//! target/harness/GROUP-{bm,vm,compare}.json.

use super::{GROUP, VERSION};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use xvmm_harness::{self as harness, l1, Artifacts, Step};
use xvmm_results::{Environment, Report, Status};

/// Samples per crossing: TCG makes every crossing slow, so few.
const SAMPLES: u64 = 2000;
const WARMUP: u64 = 200;
const NULL_SAMPLES: u64 = 20_000;
/// xvmm's --timeout inside L1 (L2 boot + xperf, all emulated).
const VM_TIMEOUT: u64 = 240;
/// The crossings xperf measures; all must be split on a patched kernel.
const CROSSINGS: [&str; 3] = ["pf-first-touch", "pf-refault", "getppid"];
/// The traced VM step's `--tsc-offset`: its report must show the guest ran
/// with it.
const VM_TSC_OFFSET: &str = "1000000000000";
/// xperf's default rounds (neither side passes --rounds).
const ROUNDS: u64 = 3;

/// L2's command line: xvmm's default (console, reset, results slot) plus the
/// stamps switch, `quiet` (every console byte is an emulated exit) and the
/// harness's `no_timer_check`; the xperf options after ` -- ` come from
/// `--null-samples` (and `xperf`) here and from xvmm's `--samples`/`--warmup`.
fn l2_cmdline(extra: &str, xperf: &str) -> String {
    format!(
        "{} xperf_stamps=1 quiet no_timer_check{extra} -- --null-samples {NULL_SAMPLES}{xperf}",
        xvmm::boot::cmdline::default_cmdline()
    )
}

fn plan() -> Vec<Step> {
    let n = SAMPLES.to_string();
    let w = WARMUP.to_string();
    let null = NULL_SAMPLES.to_string();
    let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
    let vm_step = |name: &str, cmdline: &str, trace: &[&str]| {
        // The traced step runs under the recorder, which keeps L1's own
        // record of the same exits (xvmm_init::record).
        let recorder: &[&str] = if trace.is_empty() {
            &[]
        } else {
            &[l1::INIT, "--record-trace"]
        };
        // stdout is the JSON alone; console and tables go to stderr.
        let rest = [&["--samples", &n, "--warmup", &w], trace, &["--json", "-"]].concat();
        let mut a: Vec<String> = argv(recorder);
        a.extend(harness::xvmm_l2_argv(cmdline, VM_TIMEOUT, &rest));
        Step {
            name: name.into(),
            timeout_secs: VM_TIMEOUT + 30,
            marker: None,
            stop_at_marker: false,
            argv: a,
        }
    };
    vec![
        Step {
            name: "bm".into(),
            timeout_secs: 240,
            marker: None,
            stop_at_marker: false,
            argv: argv(&[
                l1::XPERF,
                "--samples",
                &n,
                "--warmup",
                &w,
                "--null-samples",
                &null,
                "--interrupt-path",
                "--json",
                "-",
            ]),
        },
        // Traced, with a guest TSC offset the timeline must confirm, on two
        // vCPUs pinned to L1's two CPUs.
        // xvmm's --interrupt-path here, the option after ` -- ` in vm-kpti.
        vm_step(
            "vm",
            &l2_cmdline("", ""),
            &[
                "--interrupt-path",
                "--trace",
                "--tsc-offset",
                VM_TSC_OFFSET,
                "--cpus",
                "2",
                "--pin",
                "0,1",
            ],
        ),
        // The same with page table isolation forced on in L2 (TCG's EPYC is
        // not Meltdown-affected, so it is off by default).
        // One vCPU: the interrupt path's crossings must say they cannot run.
        vm_step("vm-kpti", &l2_cmdline(" pti=on", " --interrupt-path"), &[]),
    ]
}

/// The harness's L1 initramfs with xperf added as a second, concatenated
/// newc archive (the kernel unpacks archives one after the other).
fn l1_initramfs(a: &Artifacts, xperf: &std::path::Path) -> Result<Vec<u8>, String> {
    let mut cpio = harness::l1_initramfs(a, &plan(), false).map_err(|e| e.to_string())?;
    harness::append_files(&mut cpio, &[(l1::XPERF, xperf, 0o755)]).map_err(|e| e.to_string())?;
    Ok(cpio)
}

struct XperfRun {
    /// The static xvmm that ran in L1 (for `xvmm compare` on the host).
    xvmm: PathBuf,
    bm: Report,
    vm: Report,
    vm_kpti: Report,
    dir: PathBuf,
    /// L1's recording of the traced step's KVM events
    /// (`GROUP-trace/`, the layout `xvmm::host_trace::Recording` reads).
    trace_dir: PathBuf,
}

/// Writes the files the recorder carried out of L1 under `dir`.
fn write_recording(dir: &std::path::Path, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    for (name, bytes) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn skipped() -> bool {
    harness::skipped(&format!("nested {GROUP} harness test"))
}

/// The one L1 boot, shared by the tests below.
fn run() -> &'static XperfRun {
    static RUN: OnceLock<Result<XperfRun, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let (artifacts, xperf) =
            harness::prepare_patched_with_xperf(VERSION).map_err(|e| e.to_string())?;
        let initramfs = l1_initramfs(&artifacts, &xperf)?;
        let run = harness::run_l1_with_cmdline(
            &artifacts,
            &initramfs,
            GROUP,
            Duration::from_secs(10 * 60),
            "xperf_stamps",
        )
        .map_err(|e| e.to_string())?;
        eprintln!("{}", run.summary(&format!("nested {GROUP} harness")));
        let bm = run.exited_report("bm")?;
        let vm = run.exited_report("vm")?;
        let vm_kpti = run.exited_report("vm-kpti")?;
        let dir = run.log.parent().map(PathBuf::from).unwrap_or_default();
        for (name, r) in [("bm", &bm), ("vm", &vm)] {
            let path = dir.join(format!("{GROUP}-{name}.json"));
            std::fs::write(&path, r.to_json_pretty()).map_err(|e| e.to_string())?;
        }
        let trace_dir = dir.join(format!("{GROUP}-trace"));
        write_recording(&trace_dir, &run.files("vm")?)?;
        Ok(XperfRun {
            xvmm: artifacts.xvmm,
            bm,
            vm,
            vm_kpti,
            dir,
            trace_dir,
        })
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("nested {GROUP} harness failed: {e}"),
    }
}

/// What both sides must show: the split with positive halves, every
/// requested sample of every round either valid or counted as rejected, the
/// TSC quantum, the kernel's stamp pairs and the corrections they give,
/// clean-sample statistics (the kernel counts interrupts), and where the
/// stamps sit; and getppid's hooks on minus off against what the hooks' own
/// sequences add: the report's warning, in its JSON and its text, is what
/// that comparison gives.
fn assert_split(report: &Report, side: &str) {
    let quantum = check_samples_rounds_and_quantum(report, side);
    let costs = report.stamp_costs.as_ref().expect("stamp costs");
    check_kernel_stamp_pairs_and_getppid_hooks(report, costs, side, quantum);
    check_hook_sequences_and_stamp_points(report, costs, side);
    for name in CROSSINGS {
        check_crossing_split(report, side, name);
    }
}

/// The samples and rounds asked for, and a TSC quantum of at least a tick;
/// the quantum.
fn check_samples_rounds_and_quantum(report: &Report, side: &str) -> Option<f64> {
    assert_eq!(report.method.samples_requested, SAMPLES, "{side}");
    assert_eq!(u64::from(report.method.rounds), ROUNDS, "{side}");
    let quantum = report.machine.as_ref().and_then(|m| m.tsc_quantum_ticks);
    assert!(
        quantum.is_some_and(|q| q >= 1.0),
        "{side}: quantum {quantum:?}"
    );
    quantum
}

/// The kernel's stamp pairs and the corrections they give, then getppid's
/// hooks on minus off against the hooks' own sequences.
fn check_kernel_stamp_pairs_and_getppid_hooks(
    report: &Report,
    costs: &xvmm_results::StampCosts,
    side: &str,
    quantum: Option<f64>,
) {
    let kernel = costs.kernel_pair.as_ref().expect("the kernel stamp pair");
    let inner = costs
        .kernel_pair_inner
        .as_ref()
        .expect("the inner kernel pair");
    assert_eq!(kernel.round_medians.len() as u64, ROUNDS, "{side}");
    assert!(kernel.stats.count > 0 && inner.stats.count > 0, "{side}");
    assert_eq!(costs.derivation_problems(), Vec::<String>::new(), "{side}");
    let hooks = costs
        .hooks
        .iter()
        .find(|h| h.crossing == "getppid")
        .unwrap_or_else(|| panic!("{side}: no hooks on/off figure"));
    // What the hooks add to getppid's round trip (on - off) is what their
    // own sequences, timed by xperf, add (one quantum per difference).
    println!(
        "{side}: getppid hooks on - off {} ticks, the hooks' sequences {:?}, quantum {quantum:?}; \
         kernel pairs {} + {} (bare reads {:?})",
        hooks.delta,
        hooks.predicted,
        kernel.median(),
        inner.median(),
        costs
            .hook_sequences
            .as_ref()
            .map(|h| (h.bare_pair.median(), h.bare_inner.median()))
    );
    check_getppid_hooks_warning(report, hooks, side, quantum);
}

/// The hooks' sequences were timed on every side, so the report holds
/// on - off against them and warns where they differ by more than the
/// noise (three standard errors from the samples and the blocks' spread,
/// at least a quantum per difference): that warning is the comparison's
/// verdict, on real data, in the report and in its text. Agreement is
/// not required here, not even on bare metal: in both runs with the
/// noise measured (2026-11-28) L1 had on - off 208 (+-9.6) ticks against
/// 130 (+-0.0) predicted, 78 apart against a noise of 28.7 and 29.9; L2
/// 182 and 260 against 156, with PTI 2079 and 1976: under TCG the
/// kernel's hook code and its CPL3 reproduction do not cost the same,
/// for a reason not established, and no noise figure covers that.
fn check_getppid_hooks_warning(
    report: &Report,
    hooks: &xvmm_results::correction::HooksCost,
    side: &str,
    quantum: Option<f64>,
) {
    assert!(
        hooks.predicted.is_some(),
        "{side}: the hooks' sequences not timed"
    );
    let unexplained = hooks.unexplained(quantum);
    assert_eq!(hooks.warning, unexplained, "{side}: {hooks:?}");
    println!(
        "{side}: getppid hooks on - off against the sequences: noise {:.1} ticks: {}",
        hooks.noise(quantum),
        unexplained.as_deref().unwrap_or("agree")
    );
    if let Some(w) = &hooks.warning {
        let text = xvmm_results::render::report(report);
        assert!(text.contains(&format!("warning: {w}")), "{side}: {text}");
    }
}

/// The kernel pairs timed with the hooks' own sequences in every round, the
/// kernel's stamp instructions named, and the three stamp points.
fn check_hook_sequences_and_stamp_points(
    report: &Report,
    costs: &xvmm_results::StampCosts,
    side: &str,
) {
    let seq = costs
        .hook_sequences
        .as_ref()
        .expect("the kernel pairs timed with the hooks' own sequences");
    assert_eq!(seq.pf_pair.round_medians.len() as u64, ROUNDS, "{side}");
    let k = report
        .method
        .kernel_stamps
        .as_ref()
        .expect("kernel stamps named");
    assert_eq!(
        (k.entry.as_str(), k.exit.as_str()),
        ("rdtsc", "lfence; rdtsc"),
        "{side}"
    );
    assert_eq!(report.method.stamp_points.len(), 3, "{side}");
}

/// One crossing: measured with positive u2k/k2u halves, every requested
/// sample accounted for, per-round round trips with a CI of the median, and
/// clean-sample statistics that add up.
fn check_crossing_split(report: &Report, side: &str, name: &str) {
    let c = report
        .crossing(name)
        .unwrap_or_else(|| panic!("{side}: no crossing {name}"));
    assert_eq!(
        c.status,
        Status::Measured,
        "{side} {name}: no u2k/k2u split; notes: {:?}",
        report.notes
    );
    let raw = |i: &Option<xvmm_results::Interval>, what: &str| {
        i.as_ref()
            .unwrap_or_else(|| panic!("{side} {name}: no {what}"))
            .raw
            .median
    };
    let (u2k, k2u) = (raw(&c.u2k, "u2k"), raw(&c.k2u, "k2u"));
    assert!(u2k > 0 && k2u > 0, "{side} {name}: u2k {u2k} k2u {k2u}");
    assert_eq!(c.samples_requested, SAMPLES * ROUNDS, "{side} {name}");
    assert_eq!(
        c.samples_valid
            + c.samples_unfilled
            + c.samples_out_of_order
            + c.samples_other_rejected
            + c.samples_migrated,
        SAMPLES * ROUNDS,
        "{side} {name}: valid {} unfilled {} out of order {} other {} migrated {}",
        c.samples_valid,
        c.samples_unfilled,
        c.samples_out_of_order,
        c.samples_other_rejected,
        c.samples_migrated
    );
    assert!(c.samples_valid > 0, "{side} {name}: no valid sample");
    let rt = c.round_trip.as_ref().unwrap();
    assert_eq!(rt.rounds.len() as u64, ROUNDS, "{side} {name}");
    let ci = rt.median_ci.expect("a CI of the median");
    assert!(ci.low <= rt.corrected.median && rt.corrected.median <= ci.high);
    assert!(
        c.interrupts_counted,
        "{side} {name}: interrupts not counted"
    );
    let clean = c.clean.as_ref().expect("clean-sample statistics");
    assert_eq!(
        clean.samples + c.samples_interrupted,
        c.samples_valid,
        "{side} {name}"
    );
    assert!(clean.samples > 0, "{side} {name}: no clean sample");
    println!(
        "{side} {name}: {} valid, {} clean, {} interrupted, {} migrated; rtrip median {} (clean {})",
        c.samples_valid,
        clean.samples,
        c.samples_interrupted,
        c.samples_migrated,
        rt.corrected.median,
        clean.round_trip.as_ref().map_or(0, |i| i.corrected.median)
    );
}

#[test]
fn bare_metal_side_splits_every_crossing() {
    if skipped() {
        return;
    }
    let r = run();
    println!(
        "=== bare metal (xperf in L1)\n{}",
        xvmm_results::render::report(&r.bm)
    );
    assert_eq!(r.bm.environment, Environment::BareMetal);
    assert_split(&r.bm, "bare metal");
}

#[test]
fn vm_side_splits_every_crossing_and_traces_exits() {
    if skipped() {
        return;
    }
    let r = run();
    println!(
        "=== VM (xvmm -> L2 -> xperf as /init)\n{}",
        xvmm_results::render::report(&r.vm)
    );
    println!(
        "{}",
        xvmm_results::render::host_exit_table(&r.vm.host_exits)
    );
    assert_eq!(r.vm.environment, Environment::LinuxVm);
    assert_split(&r.vm, "VM");
    // xvmm added the host's view: L1's KVM module and a real exit trace.
    assert!(
        r.vm.notes.iter().any(|n| n.starts_with("VMM host: ")),
        "{:?}",
        r.vm.notes
    );
    assert!(!r.vm.host.kvm_module.is_empty());
    // `--cpus 2`: the guest kernel brought both vCPUs up (its own count, in
    // xperf's machine facts), and the single-vCPU step saw one.
    let cpus = |r: &Report| r.machine.as_ref().map(|m| m.logical_cpus);
    assert_eq!(cpus(&r.vm), Some(2), "the guest did not bring up 2 CPUs");
    assert_eq!(cpus(&r.vm_kpti), Some(1));
    assert!(
        r.vm.notes.iter().any(|n| n
            .starts_with("VM: 2 vCPUs, each on a host thread of its own, pinned to host CPUs 0,1")),
        "{:?}",
        r.vm.notes
    );
    assert!(!r.vm.host_exits.is_empty(), "no exits traced on L1's KVM");
    assert!(r.vm.host_exits.iter().all(|e| e.exit_to_entry.count > 0));
    // KVM reports the brand-string leaves as zero; xvmm passes the host's on,
    // so the guest names the CPU that L1 (the bare-metal side) has.
    assert!(!r.bm.host.cpu_model.is_empty());
    assert_eq!(r.vm.host.cpu_model, r.bm.host.cpu_model);
}

/// Issue 12 in the nested harness: the traced VM run's timeline is verified
/// by every calibration exit, getppid runs mostly without exits (or the
/// table says why not), and samples with exits are slower than the
/// exit-free median by at least 0.8x their exits' host time (the exits
/// landed in the right samples). TCG-emulated times: relations only.
#[test]
fn vm_timeline_is_verified_and_exits_land_in_their_samples() {
    if skipped() {
        return;
    }
    let r = run();
    let t = r.vm.timeline.as_ref().expect("a traced run has a timeline");
    println!("{}", xvmm_results::render::timeline_lines(t));
    println!(
        "{}",
        xvmm_results::render::attribution_table(&r.vm.crossings, t.verdict())
    );
    // KVM's own offset (L1's patched kernel), checked: verified, not inferred.
    assert!(t.verified && !t.offset_inferred, "{t:?}");
    assert_eq!(t.violations, 0);
    assert_eq!(t.checks, xvmm::linux::CALIBRATIONS, "{t:?}");
    assert_eq!(t.calibrations, xvmm::linux::CALIBRATIONS, "{t:?}");
    assert!(t.bound_ticks > 0);
    let m = t
        .measured_offset
        .expect("the calibration bounds the offset");
    assert!(m.low <= t.offset && t.offset <= m.high, "{t:?}");
    assert_eq!((t.lost_events, t.lost_windows), (0, 0), "{t:?}");
    assert!(t.offset_changes.is_empty(), "{t:?}");
    // --tsc-offset: what was asked is what KVM holds, and the calibration
    // allows it.
    let requested: i64 = VM_TSC_OFFSET.parse().unwrap();
    assert_eq!(t.requested_offset, Some(requested), "{t:?}");
    assert_eq!(
        t.offset, requested,
        "KVM's offset is not the requested one: {t:?}"
    );
    assert!(t.offset_source.contains("KVM"), "{t:?}");
    assert!(m.low <= requested && requested <= m.high, "{t:?}");
    for name in CROSSINGS {
        let c = r.vm.crossing(name).unwrap();
        for (segment, i) in [
            ("u2k", &c.u2k),
            ("k2u", &c.k2u),
            ("round_trip", &c.round_trip),
        ] {
            let h = i.as_ref().and_then(|i| i.host.as_ref());
            let h = h.unwrap_or_else(|| panic!("{name} {segment}: not attributed"));
            assert!(h.reason.is_none(), "{name} {segment}: {:?}", h.reason);
            // Attribution judges the samples xperf kept; some of those may
            // still be out of order or unfilled (unattributable below).
            assert!(h.samples >= c.samples_valid, "{name} {segment}");
            // Nothing was lost and the offset never moved, so the only
            // samples the trace cannot vouch for are those whose stamps are
            // out of order or unfilled, counted here from the raw samples.
            // Samples xperf rejected are in neither its statistics nor the
            // attribution.
            let raw = c.samples.as_ref().expect("a traced run keeps its samples");
            let kept: Vec<&xvmm_results::Sample> = (0u64..)
                .zip(raw)
                .filter(|(i, _)| !c.samples_rejected.contains(i))
                .map(|(_, s)| s)
                .collect();
            let split = kept.iter().any(|s| s.u2k_k != xvmm_results::UNFILLED);
            let bad = kept
                .iter()
                .filter(|s| {
                    if split {
                        s.validate().is_err()
                    } else {
                        s.k2u_u == xvmm_results::UNFILLED || s.k2u_u <= s.u2k_u
                    }
                })
                .count() as u64;
            assert_eq!(h.unattributable, bad, "{name} {segment}: {h:?}");
            assert_eq!(h.samples, kept.len() as u64, "{name} {segment}");
            if h.samples_with_exits > 0 && h.exit_free.count > 0 {
                assert!(
                    h.excess_ticks as f64 >= 0.8 * h.excess_host_ticks as f64,
                    "{name} {segment}: samples with exits exceed the exit-free median by {} \
                     ticks, their exits took {} host ticks",
                    h.excess_ticks,
                    h.excess_host_ticks
                );
            }
        }
    }
    check_slowest_samples(&r.vm);
    let getppid = r.vm.crossing("getppid").unwrap();
    let h = getppid.round_trip.as_ref().unwrap().host.as_ref().unwrap();
    let free = h.exit_free.count as f64 / h.samples.max(1) as f64;
    println!("getppid round trips without an exit: {:.1} %", 100.0 * free);
    assert!(free >= 0.95, "{h:?}");
}

/// L1's own recording of the traced step (every KVM event of L1, read
/// after the run from a tracefs instance of its own) decodes whole, holds
/// the calibration exits the run matched, and attributes the samples as
/// xvmm's live trace did (the same samples hit by the same exits): the
/// binary reader and the join on a real trace against a second capture.
#[test]
fn recorded_trace_attributes_the_samples_as_the_run_did() {
    use xvmm_results::attribution::{self, Index};
    if skipped() {
        return;
    }
    let r = run();
    let rec = xvmm::host_trace::Recording::load(&r.trace_dir).expect("the recording loads");
    let replayed = rec.replay();
    let bytes: usize = rec.cpus.iter().map(Vec::len).sum();
    let summary = replayed.aggregator.finish(0);
    println!(
        "recording: {} CPUs, {bytes} bytes of pages, {} events, {} exits, {} calibration exits",
        rec.cpus.len(),
        replayed.events,
        summary.trace.exits.len(),
        summary.calibrations.len()
    );
    assert_eq!(replayed.corrupt_pages, 0);
    assert!(summary.trace.lost.is_empty(), "{:?}", summary.trace.lost);
    assert_eq!(summary.calibrations.len() as u64, xvmm::linux::CALIBRATIONS);
    let traced: u64 = r.vm.host_exits.iter().map(|e| e.exit_to_entry.count).sum();
    // The recorder traced from before xvmm started until after it ended.
    assert!(summary.trace.exits.len() as u64 >= traced, "{traced}");
    let t = r.vm.timeline.as_ref().expect("a traced run has a timeline");
    let mut mapping = xvmm_results::timeline::Mapping::unscaled(t.offset);
    mapping.changes = t.offset_changes.clone();
    let mut again = r.vm.clone();
    let index = Index::for_report(&summary.trace, &mapping, &again, Some(0));
    attribution::attribute(&mut again, &index, Some(0));
    // The same samples hit by the same exits. Host times differ a little:
    // each instance stamps an event with its own TSC read (the benches'
    // test on the committed recording bounds that too).
    let placed = |h: &xvmm_results::attribution::SegmentHost| {
        let counts: Vec<_> = h.exits.iter().map(|(r, c)| (r.clone(), c.count)).collect();
        (h.samples, h.samples_with_exits, h.unattributable, counts)
    };
    for (live, replay) in r.vm.crossings.iter().zip(&again.crossings) {
        for (segment, a, b) in [
            ("u2k", &live.u2k, &replay.u2k),
            ("k2u", &live.k2u, &replay.k2u),
            ("round_trip", &live.round_trip, &replay.round_trip),
        ] {
            let host = |i: &Option<xvmm_results::Interval>| i.as_ref().and_then(|i| i.host.clone());
            if a.is_none() && b.is_none() {
                // A round-trip-only crossing (the interrupt path's).
                continue;
            }
            let (a, b) = (host(a), host(b));
            let a = a.unwrap_or_else(|| panic!("{} {segment}: not attributed", live.name));
            let b = b.unwrap_or_else(|| panic!("{} {segment}: not attributed", live.name));
            assert_eq!(placed(&a), placed(&b), "{} {segment}", live.name);
            assert_eq!(a.exit_free, b.exit_free, "{} {segment}", live.name);
            // The other vCPUs' exits: the same, but for those at a
            // window's edge (a receiver halting as the sender stamps), which
            // the two captures' own stamps may put on either side: 4239
            // against 4234 halts on 6.12; 3314 against 3282 samples with
            // one on 6.1, whose ping-pong halts the receiver right at the
            // sender's end stamp. A join that put them on the wrong vCPU
            // or window would differ by whole rows.
            match (&a.other_vcpus, &b.other_vcpus) {
                (None, None) => {}
                (Some(x), Some(y)) => {
                    let near = |p: u64, q: u64| p.abs_diff(q) <= 5 + p * 3 / 100;
                    assert_eq!(x.samples, y.samples, "{}", live.name);
                    assert!(
                        near(x.samples_with_exits, y.samples_with_exits),
                        "{x:?} {y:?}"
                    );
                    for (reason, cost) in &x.exits {
                        let other = y.exits.get(reason).map_or(0, |c| c.count);
                        assert!(
                            near(cost.count, other),
                            "{} {reason}: {x:?} {y:?}",
                            live.name
                        );
                    }
                }
                (x, y) => panic!("{}: live {x:?}, replayed {y:?}", live.name),
            }
        }
    }
}

#[test]
fn vm_side_with_kpti_splits_every_crossing() {
    if skipped() {
        return;
    }
    let r = run();
    println!(
        "=== VM with pti=on (xvmm -> L2 -> xperf as /init)\n{}",
        xvmm_results::render::report(&r.vm_kpti)
    );
    assert_eq!(r.vm.host.kpti, Some(false), "{:?}", r.vm.notes);
    assert_eq!(r.vm_kpti.host.kpti, Some(true), "{:?}", r.vm_kpti.notes);
    // With PTI every return to user mode switches CR3, so the hooks'
    // stores into the stamp page and the task miss the TLB there: a cost
    // the CPL3 reproduction of their instructions cannot show (it was
    // -27073 ticks, noise, in one TCG run, 2547 in another).
    assert_split(&r.vm_kpti, "VM with KPTI");
}

#[test]
fn xvmm_compare_prints_vm_against_bare_metal() {
    if skipped() {
        return;
    }
    let r = run();
    let (table, cmp) = harness::xvmm_compare(
        &r.xvmm,
        &r.dir.join(format!("{GROUP}-vm.json")),
        &r.dir.join(format!("{GROUP}-bm.json")),
        &r.dir.join(format!("{GROUP}-compare.json")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("=== xvmm compare (VM vs bare metal)\n{table}");
    // #PF and getppid are stamped at different depths: compare says so.
    assert!(table.contains("what the VM adds, decomposed"), "{table}");
    assert!(
        cmp.notes.iter().any(|n| n.contains("different depths")),
        "{:?}",
        cmp.notes
    );
    // --interrupt-path: the cross-CPU rows are compared too, and their
    // w/o-exits part carries its caveat.
    for name in SPANNING {
        assert!(
            cmp.rows
                .iter()
                .any(|row| row.crossing == name && row.exits.is_some()),
            "no decomposed {name} row:\n{table}"
        );
    }
    let caveat = format!("{} span CPUs", SPANNING.join(", "));
    assert!(
        cmp.notes.iter().any(|n| n.starts_with(&caveat)),
        "{:?}",
        cmp.notes
    );
    for name in CROSSINGS {
        for interval in ["u2k", "k2u", "round_trip"] {
            let row = cmp
                .rows
                .iter()
                .find(|row| row.crossing == name && row.interval == interval)
                .unwrap_or_else(|| panic!("no {name} {interval} row:\n{table}"));
            assert!(
                row.vm_median.is_some() && row.bare_median.is_some(),
                "{name} {interval}: a side is missing:\n{table}"
            );
            // The traced VM run's difference comes in its two parts.
            assert!(
                row.without_exits.is_some() && row.exits.is_some(),
                "{name} {interval}: no decomposition:\n{table}"
            );
            assert_eq!(row.timeline_verified, Some(true));
        }
    }
}

/// The report's timeline strip data on real traced data: each crossing's
/// round trip keeps its slowest samples, slowest first, each exit inside
/// its sample's window; some of them hold an exit (a first touch of a page
/// takes an npf in L2).
fn check_slowest_samples(vm: &xvmm_results::Report) {
    use xvmm_results::attribution::SLOWEST_SAMPLES;
    let mut with_exits = 0;
    for c in &vm.crossings {
        let Some(h) = c.round_trip.as_ref().and_then(|i| i.host.as_ref()) else {
            continue;
        };
        let kept = &h.slowest;
        let attributable = usize::try_from(h.samples - h.unattributable).unwrap();
        assert_eq!(kept.len(), SLOWEST_SAMPLES.min(attributable), "{}", c.name);
        assert!(
            kept.windows(2).all(|w| w[0].ticks >= w[1].ticks),
            "{}",
            c.name
        );
        for t in kept {
            let a = i64::try_from(t.sample.u2k_u).unwrap();
            let b = i64::try_from(t.sample.k2u_u).unwrap();
            for e in &t.exits {
                assert!(
                    a <= e.guest_tsc && e.guest_tsc <= b,
                    "{}: {e:?} outside {a}..{b}",
                    c.name
                );
            }
            with_exits += usize::from(!t.exits.is_empty());
        }
        if let Some(top) = kept.first() {
            let reasons: Vec<String> = top
                .exits
                .iter()
                .map(|e| format!("{} {}", e.reason, e.host_ticks))
                .collect();
            println!("{} slowest: {} ticks, exits {reasons:?}", c.name, top.ticks);
        }
    }
    assert!(with_exits > 0, "no kept slowest sample holds an exit");
}

/// The interrupt path's crossings that span CPUs.
const SPANNING: [&str; 2] = ["wakeup-cross-cpu", "mprotect-shootdown"];

/// The interrupt path's crossings, all of them.
const INTERRUPT_PATH: [&str; 4] = [
    "wakeup-cross-cpu",
    "mprotect-shootdown",
    "mprotect-local",
    "timer-sleep",
];

/// A crossing's corrected round-trip median.
fn median_of(r: &Report, name: &str) -> u64 {
    let c = r.crossing(name).unwrap();
    c.round_trip.as_ref().unwrap().corrected.median
}

/// The host's part of a traced crossing's round trip.
fn round_trip_host<'r>(r: &'r Report, name: &str) -> &'r xvmm_results::attribution::SegmentHost {
    let c = r.crossing(name).unwrap();
    let h = c.round_trip.as_ref().and_then(|i| i.host.as_ref());
    h.unwrap_or_else(|| panic!("{name}: not attributed"))
}

/// `--interrupt-path` on both sides: the cross-CPU wake-up, the TLB
/// shootdown and the timer sleep measured as round trips on L1 and in the
/// two-vCPU L2, every requested sample of every round valid; in the traced
/// VM each cross-CPU sample's window holds exits of the other vCPU (the
/// receiver's wake-up, its IPI taken) as well as its own; the local
/// mprotect, which spans no CPU, has few exits and none of the other's; the
/// timer sleep halts and programs the timer. With one vCPU the cross-CPU
/// kinds cannot run and say why.
#[test]
fn interrupt_path_crossings_place_every_vcpus_exits() {
    if skipped() {
        return;
    }
    let r = run();
    let requested = SAMPLES * ROUNDS;
    for (side, report) in [("bm", &r.bm), ("vm", &r.vm)] {
        for name in INTERRUPT_PATH {
            let c = report
                .crossing(name)
                .unwrap_or_else(|| panic!("{side}: no {name}"));
            assert!(
                matches!(c.status, Status::RoundTripOnly { .. }),
                "{side} {name}: {:?}",
                c.status
            );
            assert_eq!(
                (c.samples_requested, c.samples_valid),
                (requested, requested)
            );
            assert_eq!(c.spans_cpus, SPANNING.contains(&name), "{side} {name}");
        }
    }
    for name in SPANNING {
        check_other_vcpus_exits(r, name);
    }
    check_ipi_sends_against_the_local_control(&r.vm);
    check_timer_sleep(r);
    assert_eq!(
        r.vm_kpti.crossing("timer-sleep").map(|c| c.samples_valid),
        Some(requested),
        "one vCPU still sleeps"
    );
    for name in SPANNING.iter().chain(&["mprotect-local"]) {
        let c = r.vm_kpti.crossing(name).unwrap();
        assert!(
            matches!(&c.status, Status::Unsupported { reason } if reason.contains("only cpu0")),
            "one vCPU, {name}: {:?}",
            c.status
        );
    }
}

/// A cross-CPU crossing: slower in L2 than in L1, and the other vCPU's
/// exits inside most of its samples.
fn check_other_vcpus_exits(r: &XperfRun, name: &str) {
    let (vm, bm) = (median_of(&r.vm, name), median_of(&r.bm, name));
    // Emulated (TCG) figures: only their order is asserted.
    println!("{name}: median {vm} ticks in L2, {bm} in L1 (TCG-emulated)");
    assert!(vm > bm, "{name}: L2 {vm} not above L1 {bm}");
    let h = round_trip_host(&r.vm, name);
    let o = h.other_vcpus.as_ref();
    let o = o.unwrap_or_else(|| panic!("{name}: no other vCPU's exits: {h:?}"));
    println!(
        "{name}: own vCPU exits in {} of {} samples ({:?}); the other's in {} ({:?})",
        h.samples_with_exits,
        h.samples,
        h.reasons_by_host_time(),
        o.samples_with_exits,
        o.reasons_by_host_time()
    );
    assert_eq!(o.samples, h.samples - h.unattributable, "{name}");
    // Each sample wakes or flushes the other vCPU: it exits (its IPI
    // taken, its halt left) inside most windows. Not all: a wake-up
    // whose receiver goes back to sleep after the sender's closing
    // stamp leaves its halt exit outside (4686 of 6000 in one run).
    assert!(
        o.samples_with_exits * 2 >= o.samples,
        "{name}: the other vCPU exited in {} of {} samples",
        o.samples_with_exits,
        o.samples
    );
}

/// The shootdown's sender sends its IPI as its own exit, at least one a
/// sample: an ICR write to the xAPIC page (npf) or the x2APIC MSR (msr),
/// or KVM's paravirtual IPI hypercall (the 6.12 guest took npf, the 6.1
/// one hypercall, in one run each; SVM's reason names: TCG emulates SVM).
/// The control: the same pair with no other CPU to flush exits in few of
/// its samples (108 of 6000 in one run), the shootdown in most.
fn check_ipi_sends_against_the_local_control(vm: &Report) {
    let sends = |name: &str| {
        let h = round_trip_host(vm, name);
        let count = |reason: &str| h.exits.get(reason).map_or(0, |c| c.count);
        let sent: u64 = ["npf", "msr", "hypercall"].iter().map(|r| count(r)).sum();
        (sent, h.samples_with_exits, h.samples)
    };
    let (sent, remote_hit, remote_n) = sends("mprotect-shootdown");
    assert!(sent >= remote_n, "{sent} IPIs sent in {remote_n} samples");
    let (_, local_hit, local_n) = sends("mprotect-local");
    assert!(
        local_hit * 10 < local_n && remote_hit * 2 > remote_n,
        "samples with exits: local {local_hit} of {local_n}, remote {remote_hit} of {remote_n}"
    );
    assert!(round_trip_host(vm, "mprotect-local").other_vcpus.is_none());
}

/// A timer sleep halts its vCPU and is woken by the timer: a halt exit in
/// nearly every sample, and the timer's programming, a TSC-deadline MSR
/// write or the xAPIC's initial count (npf): 6000 halts and 6025 msr exits
/// in 6000 samples in one run.
fn check_timer_sleep(r: &XperfRun) {
    let (vm, bm) = (
        median_of(&r.vm, "timer-sleep"),
        median_of(&r.bm, "timer-sleep"),
    );
    let h = round_trip_host(&r.vm, "timer-sleep");
    println!(
        "timer-sleep: median {vm} ticks in L2, {bm} in L1 (TCG-emulated); exits in {} of {} \
         samples ({:?})",
        h.samples_with_exits,
        h.samples,
        h.reasons_by_host_time()
    );
    assert!(vm > bm, "timer-sleep: L2 {vm} not above L1 {bm}");
    assert!(h.other_vcpus.is_none(), "{h:?}");
    let count = |reason: &str| h.exits.get(reason).map_or(0, |c| c.count);
    let halts = count("hlt");
    assert!(
        halts * 10 >= h.samples * 9,
        "{halts} halts in {} samples",
        h.samples
    );
    let programs = count("msr") + count("npf");
    assert!(
        programs * 2 >= h.samples,
        "{programs} in {} samples",
        h.samples
    );
}
