//! Debian's stock kernels (downloaded and unpacked by the harness, never
//! installed) as L2 under xvmm, in ONE nested run. L1 is the project's
//! unpatched host kernel; each step boots a Debian kernel with the built-in
//! xperf as `/init`:
//! - `deb-xperf`: Debian 12's 6.1, the default run (round trips: the kernel
//!   has no hooks);
//! - `deb-characterize`: `xperf characterize` on it;
//! - `deb-probes`: `xperf probes` on it, a kernel without the ftrace
//!   address list (Linux 6.1 has no `available_filter_functions_addrs`):
//!   the ftrace sites come from `/proc/kcore`;
//! - `ibt-probes`: `xperf probes` on Debian's 6.12, built with
//!   `CONFIG_X86_KERNEL_IBT`: ftrace sites and entry probes at +4, after
//!   each function's ENDBR64;
//! - `deb-workload` and `deb-workload-NAME`: `xvmm --workload busybox` on
//!   Debian's 6.1 with the harness's workloads, their intervals joined with
//!   L1's exits.
//!
//! A second L1 boot, `debian-l1`, runs Debian's 6.1 as L1 itself (its own
//! kvm modules): xperf on it as bare metal, the project's guest kernel on
//! its KVM, and each real workload under `xperf workload` on it and in L2
//! on Debian's 6.1 again, with the first as `--baseline`: 6.1 against 6.1.
//!
//! On 6.1 every probes row must be measured with every hit counted, or give
//! a reason that holds for Debian's own config (in the package); on the IBT
//! kernel every row must be measured.
//! Times are TCG-emulated: shapes, not figures. Reports in
//! `target/harness/distro-*.json`, console `target/harness/distro.log`.

#[path = "support/workload_pairs.rs"]
mod workload_pairs;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use workload_pairs::{assert_joined_whole, assert_real_pairs, pair, Pair};
use xvmm_harness::distro::{self, DistroKernel};
use xvmm_harness::workloads::{BUSYBOX, HOST_BUSYBOX, REAL, SCRIPT, SHAPES};
use xvmm_harness::{self as harness, l1, Step};
use xvmm_kernel::BuiltKernel;
use xvmm_results::probes::mode;
use xvmm_results::{Environment, Report, Status};

const SAMPLES: &str = "1000";
const WARMUP: &str = "50";
const NULL_SAMPLES: &str = "2000";
const ROUNDS: &str = "2";
/// Per VM (the slowest, probes on 6.12, took ~60 s here): a hung one ends its step.
const VM_TIMEOUT: u64 = 400;
/// Where the Debian kernels lie in L1.
const DEBIAN_KERNEL: &str = "/l2/debian-vmlinuz";
const IBT_KERNEL: &str = "/l2/debian-ibt-vmlinuz";
/// The prefix of the workload pairs' steps in the `debian-l1` boot.
const PAIRS: &str = "deb61-";

fn vm_step(name: &str, kernel: &str, xperf_args: &str, extra: &[&str]) -> Step {
    let cmdline = format!(
        "{} quiet no_timer_check -- {xperf_args}",
        xvmm::boot::cmdline::default_cmdline()
    );
    let (mem, timeout) = (harness::L2_MEM_MIB.to_string(), VM_TIMEOUT.to_string());
    let mut a = vec![l1::XVMM, "--kernel", kernel, "--cmdline", &cmdline];
    a.extend(["--mem", &mem, "--timeout", &timeout]);
    a.extend(extra);
    // stdout holds the JSON alone; L2's console goes to stderr, which
    // l1-init keeps in L1's console: a step that hangs shows how far the
    // guest got.
    a.extend(["--json", "-"]);
    Step::run(name, VM_TIMEOUT + 30, &a)
}

fn plan() -> Vec<Step> {
    let samples = ["--samples", SAMPLES, "--warmup", WARMUP];
    let probes = format!("probes --rounds {ROUNDS} --null-samples {NULL_SAMPLES}");
    vec![
        vm_step(
            "deb-xperf",
            DEBIAN_KERNEL,
            &format!("--null-samples {NULL_SAMPLES}"),
            &samples,
        ),
        vm_step(
            "deb-characterize",
            DEBIAN_KERNEL,
            "characterize --samples 2000",
            &[],
        ),
        vm_step("deb-probes", DEBIAN_KERNEL, &probes, &samples),
        vm_step("ibt-probes", IBT_KERNEL, &probes, &samples),
    ]
    .into_iter()
    .chain(workload_steps())
    .collect()
}

/// `deb-workload` and `deb-workload-NAME`: `xvmm --kernel debian-6.1
/// --workload busybox -- sh -c SCRIPT`, a stock kernel's tracepoints
/// joined with L1's exits, for the harness's workloads. Its command line
/// has no ` -- ` of its own (xvmm gives init the workload's).
fn workload_steps() -> Vec<Step> {
    let all = std::iter::once(("deb-workload".to_string(), SCRIPT)).chain(
        REAL.iter()
            .map(|&(name, s)| (format!("deb-workload-{name}"), s)),
    );
    all.map(|(name, script)| workload_step(&name, script))
        .collect()
}

fn workload_step(name: &str, script: &str) -> Step {
    let cmdline = format!(
        "{} quiet no_timer_check",
        xvmm::boot::cmdline::default_cmdline()
    );
    let (mem, timeout) = (harness::L2_MEM_MIB.to_string(), VM_TIMEOUT.to_string());
    let a = [
        l1::XVMM,
        "--kernel",
        DEBIAN_KERNEL,
        "--cmdline",
        &cmdline,
        "--mem",
        &mem,
        "--timeout",
        &timeout,
        "--workload",
        BUSYBOX,
        "--json",
        "-",
        "--",
        "sh",
        "-c",
        script,
    ];
    Step::run(name, VM_TIMEOUT + 30, &a)
}

struct DistroRun {
    kernel: DistroKernel,
    ibt: DistroKernel,
    reports: Vec<(String, Report)>,
}

impl DistroRun {
    fn report(&self, name: &str) -> &Report {
        report_named(&self.reports, name)
    }
}

/// The report of step `name`.
fn report_named<'a>(reports: &'a [(String, Report)], name: &str) -> &'a Report {
    &reports
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no report {name}"))
        .1
}

fn skipped() -> bool {
    harness::skipped("nested Debian kernel test")
}

/// The project's own kernel of `flavour` (plain), through the cache.
fn project_kernel(flavour: xvmm_kernel::Flavour) -> Result<BuiltKernel, String> {
    xvmm_kernel::build(
        &xvmm_kernel::BuildRequest::new(flavour),
        &xvmm::progress::Silent,
    )
    .map_err(|e| e.to_string())
}

/// Boots `l1` with `plan` (xperf and `files`, with their modes, added to
/// the initramfs) and returns the run and the report of each step that
/// prints one (not the workload pairs' runs, which write theirs to files),
/// saved as `target/harness/<group>-<step>.json`.
fn boot_group(
    group: &str,
    l1: BuiltKernel,
    l2: BuiltKernel,
    plan: &[Step],
    files: &[(&str, &Path, u32)],
) -> Result<(harness::HarnessRun, Vec<(String, Report)>), String> {
    let artifacts = harness::with_static_binaries(l1, l2, &["xperf"]).map_err(|e| e.to_string())?;
    let xperf = artifacts.xvmm.with_file_name("xperf");
    let mut initramfs =
        harness::l1_initramfs(&artifacts, plan, false).map_err(|e| e.to_string())?;
    let mut all: Vec<(&str, &Path, u32)> = vec![(l1::XPERF, xperf.as_path(), 0o755)];
    all.extend(files);
    harness::append_files(&mut initramfs, &all).map_err(|e| e.to_string())?;
    let run = harness::run_l1(&artifacts, &initramfs, group, Duration::from_secs(30 * 60))
        .map_err(|e| e.to_string())?;
    eprintln!("{}", run.summary(&format!("nested {group} harness")));
    let dir = run.log.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut reports = Vec::new();
    for step in plan.iter().filter(|s| !s.name.starts_with(PAIRS)) {
        let report = run.exited_report(&step.name)?;
        let path: PathBuf = dir.join(format!("{group}-{}.json", step.name));
        std::fs::write(&path, report.to_json_pretty()).map_err(|e| e.to_string())?;
        reports.push((step.name.clone(), report));
    }
    Ok((run, reports))
}

fn fetch(package: &str) -> Result<DistroKernel, String> {
    let k = distro::debian_kernel(package).map_err(|e| e.to_string())?;
    eprintln!(
        "Debian kernel: {} ({}), {}",
        k.package,
        k.release,
        k.vmlinuz.display()
    );
    Ok(k)
}

/// The one L1 boot, shared by the tests below.
fn run() -> &'static DistroRun {
    static RUN: OnceLock<Result<DistroRun, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let kernel = fetch(distro::DEBIAN_12_KERNEL)?;
        let ibt = fetch(distro::DEBIAN_612_KERNEL)?;
        let host = project_kernel(xvmm_kernel::Flavour::Host)?;
        let files = [
            (DEBIAN_KERNEL, kernel.vmlinuz.as_path(), 0o644),
            (IBT_KERNEL, ibt.vmlinuz.as_path(), 0o644),
            (BUSYBOX, Path::new(HOST_BUSYBOX), 0o755),
        ];
        let (_, reports) = boot_group("distro", host.clone(), host, &plan(), &files)?;
        Ok(DistroRun {
            kernel,
            ibt,
            reports,
        })
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("nested Debian kernel harness failed: {e}"),
    }
}

/// The report was taken on the Debian kernel, inside a VM.
fn assert_on_debian(r: &Report, kernel: &DistroKernel, step: &str) {
    assert_eq!(r.environment, Environment::LinuxVm, "{step}");
    let json = r.to_json_pretty();
    assert!(
        json.contains(&kernel.release),
        "{step}: the report never names {}",
        kernel.release
    );
}

#[test]
fn the_default_run_measures_round_trips_on_debians_kernel() {
    if skipped() {
        return;
    }
    let r = run();
    let report = r.report("deb-xperf");
    println!(
        "=== Debian {} in L2: xperf (TCG-emulated)\n{}",
        r.kernel.release,
        xvmm_results::render::report(report)
    );
    assert_on_debian(report, &r.kernel, "deb-xperf");
    assert!(!report.crossings.is_empty());
    for c in &report.crossings {
        // No hooks in a stock kernel: the round trip, and why no split.
        match &c.status {
            Status::RoundTripOnly { reason } => assert!(!reason.is_empty()),
            other => panic!("{}: {other:?}", c.name),
        }
        let rt = c.round_trip.as_ref().expect("round trip");
        assert!(
            rt.raw.count >= SAMPLES.parse::<u64>().unwrap(),
            "{}",
            c.name
        );
        assert!(rt.raw.min > 0, "{}", c.name);
    }
}

/// A workload's run on Debian's 6.1, its script whole: joined whole
/// ([`assert_joined_whole`]), on Debian's kernel, and with faults timed to
/// their end.
fn assert_joined_on_debian(r: &DistroRun, step: &str, script: &str) {
    let report = r.report(step);
    assert_on_debian(report, &r.kernel, step);
    assert_joined_whole(step, script, report);
    // Debian's config has kprobe events: faults are timed to their end.
    let w = report.workload.as_ref().unwrap();
    assert!(w.fault_end.contains("kretprobe"), "{}", w.fault_end);
}

/// Issue 38 on a stock kernel: Debian 12's 6.1, no patch, records the
/// workload's system calls, faults and interrupts from its own
/// tracepoints, and xvmm joins every traced exit with them on a verified
/// timeline.
#[test]
fn a_workload_is_joined_with_its_exits_on_debians_kernel() {
    if skipped() {
        return;
    }
    let r = run();
    assert_joined_on_debian(r, "deb-workload", SCRIPT);
    let w = r.report("deb-workload").workload.as_ref().unwrap();
    let calls: Vec<&str> = w.family("syscall").map(|r| r.name.as_str()).collect();
    for call in ["execve", "wait4"] {
        assert!(calls.contains(&call), "no {call} in {calls:?}");
    }
}

/// The real workloads on Debian's 6.1, each joined whole and making its
/// own system calls as often as on the project's kernel.
#[test]
fn real_workloads_are_joined_with_their_exits_on_debians_kernel() {
    if skipped() {
        return;
    }
    let r = run();
    for (name, script) in REAL {
        assert_joined_on_debian(r, &format!("deb-workload-{name}"), script);
    }
    for (name, call, least) in SHAPES {
        let w = r
            .report(&format!("deb-workload-{name}"))
            .workload
            .as_ref()
            .unwrap();
        let count = w.row("syscall", call).map_or(0, |row| row.length.count);
        assert!(count >= least, "{name} {call}: {count}");
    }
}

#[test]
fn characterize_runs_on_debians_kernel() {
    if skipped() {
        return;
    }
    let r = run();
    let report = r.report("deb-characterize");
    assert_on_debian(report, &r.kernel, "deb-characterize");
    let c = report.characterize.as_ref().expect("characterize block");
    println!("=== Debian {}: characterize\n{c:?}", r.kernel.release);
    assert!(!c.metrics.is_empty());
}

/// The kernel options a reason names (`CONFIG_FPROBE_EVENTS`).
fn options_named(reason: &str) -> Vec<String> {
    reason
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("CONFIG_") && w.len() > "CONFIG_".len())
        .map(str::to_string)
        .collect()
}

/// A row's reason must hold for this kernel: every option it says is missing
/// is missing from Debian's config, and the one it says is in use
/// (CONFIG_RETHUNK, which keeps 6.1 from jump-optimizing any function that
/// returns through the thunk) is set.
fn check_reason(what: &str, reason: &str, kernel: &DistroKernel) {
    let named = options_named(reason);
    assert!(
        !named.is_empty(),
        "{what}: no kernel option named: {reason}"
    );
    for option in named {
        let set = kernel.config_has(&option).unwrap();
        if option == "CONFIG_RETHUNK" {
            assert!(
                set,
                "{what}: blames {option}, which Debian's config lacks: {reason}"
            );
        } else {
            assert!(
                !set,
                "{what}: says {option} is missing, Debian's config sets it: {reason}"
            );
        }
    }
}

#[test]
fn every_probes_row_is_measured_or_names_an_option_debian_lacks() {
    if skipped() {
        return;
    }
    let r = run();
    let report = r.report("deb-probes");
    println!(
        "=== Debian {}: xperf probes (TCG-emulated)\n{}",
        r.kernel.release,
        xvmm_results::render::report(report)
    );
    assert_on_debian(report, &r.kernel, "deb-probes");
    // The rows the ftrace sites decide (found in /proc/kcore on 6.1) must
    // be measured; any other row measured, or with a reason that holds.
    let sited = [
        mode::KPROBE_INT3,
        mode::KPROBE_FTRACE,
        mode::KRETPROBE,
        mode::FUNCTION,
    ];
    for (m, crossing, p) in harness::probe_rows(report, "deb-probes") {
        let what = format!("{m} on {crossing}");
        match &p.status {
            Status::Measured => assert_eq!(p.hits, p.hits_expected, "{what}"),
            _ if sited.contains(&m) => panic!("{what}: {p:?}"),
            Status::Unsupported { reason } | Status::RoundTripOnly { reason } => {
                check_reason(&what, reason, &r.kernel);
            }
        }
    }
}

#[test]
fn on_debians_ibt_kernel_every_probes_row_is_measured_past_the_endbr() {
    if skipped() {
        return;
    }
    let r = run();
    assert!(
        r.ibt.config_has("CONFIG_X86_KERNEL_IBT").unwrap(),
        "{} is no IBT kernel",
        r.ibt.release
    );
    let report = r.report("ibt-probes");
    println!(
        "=== Debian {} (IBT): xperf probes (TCG-emulated)\n{}",
        r.ibt.release,
        xvmm_results::render::report(report)
    );
    assert_on_debian(report, &r.ibt, "ibt-probes");
    for (m, crossing, p) in harness::probe_rows(report, "ibt-probes") {
        assert_eq!(p.status, Status::Measured, "{m} on {crossing}: {p:?}");
        assert_eq!(p.hits, p.hits_expected, "{m} on {crossing}");
        // The entry probes sit after the ENDBR64.
        if [mode::KPROBE_FTRACE, mode::KRETPROBE, mode::FPROBE].contains(&m) {
            assert!(p.probe.contains("+4"), "{m} on {crossing}: {}", p.probe);
        }
    }
}

/// Debian 12's kernel as the L1 host: its own `kvm` and `kvm_amd` modules
/// loaded by `l1-init` from the initramfs (`/modules/order`), xperf on it as
/// bare metal, and xvmm serving the project's guest kernel from its KVM.
struct DebianHost {
    kernel: DistroKernel,
    run: harness::HarnessRun,
    reports: Vec<(String, Report)>,
    /// Each real workload on Debian's 6.1 as bare metal and in L2.
    real: Vec<(&'static str, Result<Pair, String>)>,
}

impl DebianHost {
    fn report(&self, name: &str) -> &Report {
        report_named(&self.reports, name)
    }
}

fn host_plan() -> Vec<Step> {
    let (s, w, n, r) = (SAMPLES, WARMUP, NULL_SAMPLES, ROUNDS);
    let xperf = [
        l1::XPERF,
        "--samples",
        s,
        "--warmup",
        w,
        "--null-samples",
        n,
    ];
    let characterize = [l1::XPERF, "characterize", "--samples", "2000"];
    let probes = [
        l1::XPERF,
        "probes",
        "--samples",
        s,
        "--warmup",
        w,
        "--rounds",
        r,
        "--null-samples",
        n,
    ];
    let json = |a: &[&'static str]| [a, &["--json", "-"]].concat();
    vec![
        Step::run("bm-xperf", 300, &json(&xperf)),
        Step::run("bm-characterize", 300, &json(&characterize)),
        Step::run("bm-probes", 600, &json(&probes)),
        // The project's guest kernel, the default run, on Debian's KVM.
        vm_step(
            "vm",
            l1::L2_BZIMAGE,
            &format!("--null-samples {n}"),
            &["--samples", s, "--warmup", w],
        ),
    ]
    .into_iter()
    .chain(REAL.iter().flat_map(|&(name, script)| {
        workload_pairs::workload_steps(&format!("{PAIRS}{name}"), script, DEBIAN_KERNEL)
    }))
    .collect()
}

/// The L1 boot of Debian's kernel, shared by the tests below.
fn debian_host() -> &'static DebianHost {
    static RUN: OnceLock<Result<DebianHost, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let kernel = fetch(distro::DEBIAN_12_KERNEL)?;
        if kernel.modules.is_empty() {
            return Err(format!("{} gave no kvm modules", kernel.deb));
        }
        let l1 = BuiltKernel {
            bzimage: kernel.vmlinuz.clone(),
            vmlinux: kernel.vmlinuz.clone(),
            config: kernel.config.clone(),
            system_map: kernel
                .vmlinuz
                .with_file_name(format!("System.map-{}", kernel.release)),
            key: kernel.deb.clone(),
            cached: true,
            seconds: 0.0,
        };
        let guest = project_kernel(xvmm_kernel::Flavour::Guest)?;
        let names: Vec<String> = kernel
            .modules
            .iter()
            .map(|m| format!("/modules/{}", m.file_name().unwrap().to_string_lossy()))
            .collect();
        let order = harness::workspace_root().join("target/harness/debian-l1-modules.order");
        std::fs::create_dir_all(order.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::write(&order, names.join("\n")).map_err(|e| e.to_string())?;
        let mut files: Vec<(&str, &Path, u32)> = names
            .iter()
            .zip(&kernel.modules)
            .map(|(at, host)| (at.as_str(), host.as_path(), 0o644))
            .collect();
        files.push(("/modules/order", order.as_path(), 0o644));
        files.push((DEBIAN_KERNEL, kernel.vmlinuz.as_path(), 0o644));
        files.push((BUSYBOX, Path::new(HOST_BUSYBOX), 0o755));
        let (run, reports) = boot_group("debian-l1", l1, guest, &host_plan(), &files)?;
        let real = REAL
            .iter()
            .map(|&(name, _)| (name, pair(&run, &format!("{PAIRS}{name}"))))
            .collect();
        Ok(DebianHost {
            kernel,
            run,
            reports,
            real,
        })
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("nested Debian L1 harness failed: {e}"),
    }
}

#[test]
fn debians_kernel_as_the_l1_host_serves_kvm_from_its_own_modules() {
    if skipped() {
        return;
    }
    let h = debian_host();
    // L1's CPU is QEMU's EPYC: kvm-intel refuses to load there (no VMX).
    for m in &h.kernel.modules {
        let name = m.file_name().unwrap().to_string_lossy();
        if name == "kvm-intel.ko" {
            continue;
        }
        let loaded = format!("XVMM-L1: module /modules/{name} loaded");
        assert!(
            h.run.console.iter().any(|l| l.contains(&loaded)),
            "{name} not loaded:\n{}",
            h.run.tail(30)
        );
    }
    assert!(h.run.kvm_present, "no /dev/kvm:\n{}", h.run.tail(30));
    let vm = h.report("vm");
    println!(
        "=== xvmm on Debian {} (L1) -> the project's guest kernel (TCG-emulated)\n{}",
        h.kernel.release,
        xvmm_results::render::report(vm)
    );
    assert_eq!(vm.environment, Environment::LinuxVm);
    assert_eq!(vm.host.kvm_module, "kvm_amd");
    assert!(
        vm.to_json_pretty().contains(&h.kernel.release),
        "the VMM host is Debian's"
    );
    assert!(!vm.crossings.is_empty());
}

#[test]
fn debians_kernel_as_bare_metal_runs_xperf_characterize_and_probes() {
    if skipped() {
        return;
    }
    let h = debian_host();
    let bm = h.report("bm-xperf");
    println!(
        "=== Debian {} as L1 (bare metal, TCG-emulated)\n{}",
        h.kernel.release,
        xvmm_results::render::report(bm)
    );
    assert_eq!(bm.environment, Environment::BareMetal);
    assert_eq!(bm.host.kernel_release, h.kernel.release);
    for c in &bm.crossings {
        let rt = c.round_trip.as_ref().expect("round trip");
        assert!(
            rt.raw.count >= SAMPLES.parse::<u64>().unwrap(),
            "{}",
            c.name
        );
    }
    let ch = h.report("bm-characterize");
    let c = ch.characterize.as_ref().expect("characterize");
    assert!(!c.metrics.is_empty());
    assert_rate_against_qemus_hpet(c);
    let probes = h.report("bm-probes");
    println!("{}", xvmm_results::render::report(probes));
    for (m, crossing, p) in harness::probe_rows(probes, "bm-probes") {
        let what = format!("{m} on {crossing}");
        match &p.status {
            Status::Measured => assert_eq!(p.hits, p.hits_expected, "{what}"),
            _ if [mode::KPROBE_INT3, mode::KPROBE_FTRACE, mode::KRETPROBE].contains(&m) => {
                panic!("{what}: {p:?}")
            }
            Status::Unsupported { reason } | Status::RoundTripOnly { reason } => {
                check_reason(&what, reason, &h.kernel);
            }
        }
    }
}

/// Issue 38 item 4 on a stock kernel: each real workload under `xperf
/// workload` on Debian's 6.1 as bare metal (L1), and in L2 on Debian's 6.1
/// again on Debian's own KVM with the first as `--baseline`: each joined
/// whole, its extra time decomposed, each making its script's calls as
/// often on both sides; both runs on Debian's kernel.
#[test]
fn real_workloads_on_debians_6_1_run_on_bare_metal_and_in_l2_and_decompose() {
    if skipped() {
        return;
    }
    let h = debian_host();
    assert_real_pairs(&h.real);
    for (name, p) in &h.real {
        let p = p.as_ref().unwrap();
        assert_eq!(p.bm.environment, Environment::BareMetal, "{name}");
        assert_eq!(p.vm.environment, Environment::LinuxVm, "{name}");
        assert_eq!(p.bm.host.kernel_release, h.kernel.release, "{name}");
        assert!(
            p.vm.to_json_pretty().contains(&h.kernel.release),
            "{name}: L2 is Debian's"
        );
        assert_eq!(p.vm.host.kvm_module, "kvm_amd", "{name}: on Debian's KVM");
        println!(
            "=== {name}: Debian {} in L2 against Debian {} as bare metal (TCG-emulated)\n{}",
            h.kernel.release,
            h.kernel.release,
            xvmm_results::render::comparison_table(&p.comparison)
        );
    }
}

/// QEMU's machine offers L1 an HPET (and an ACPI PM timer) beside its TSC
/// clocksource: xperf reads the HPET's counter through `/dev/hpet` and
/// finds the rate the kernel calibrated. Both count the emulating host's
/// time, so TCG's slowness cannot move the figure; 1000 ppm allows for a
/// kernel calibration against a busy host.
fn assert_rate_against_qemus_hpet(c: &xvmm_results::Characterization) {
    let m = c.metric("tsc-khz-measured").expect("tsc-khz-measured");
    let value = m.value.as_deref().unwrap_or_default();
    assert!(value.contains("against the HPET's counter"), "{value}");
    let ppm: f64 = value
        .split_once(" ppm against")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no ppm figure: {value}"));
    assert!(ppm.abs() < 1000.0, "{value}");
}
