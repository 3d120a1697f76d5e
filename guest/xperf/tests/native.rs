//! Runs the built xperf binary on this machine with small sample counts and
//! checks the report it writes. On an unpatched kernel (every build machine
//! here) that is round-trip mode; on a patched one the split must be present.

use std::path::PathBuf;
use std::process::Command;
use xvmm_results::{Report, Status};

const SAMPLES: u64 = 300;

fn out_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xperf-it-{tag}-{}.json", std::process::id()))
}

fn hooks_present() -> bool {
    // SAFETY: prctl with integer arguments; EINVAL on unpatched kernels.
    unsafe { libc::prctl(0x5850_4652, 0 as libc::c_ulong, 0 as libc::c_ulong, 0, 0) >= 0 }
}

/// Runs xperf with small counts in two rounds; returns its report and
/// what it printed.
fn run_xperf_with_a_report() -> (Report, String) {
    let path = out_path("run");
    let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
        .args(["--samples", &SAMPLES.to_string(), "--warmup", "50"])
        .args(["--null-samples", "2000", "--rounds", "2", "--json"])
        .arg(&path)
        .output()
        .expect("xperf runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "xperf failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("report file");
    let _ = std::fs::remove_file(&path);
    (Report::from_json(&text).expect("report parses"), stdout)
}

/// The null pair and the user pair's cost agree with each other and with
/// the TSC quantum; returns the user pair's cost.
fn assert_the_user_pair_cost_is_consistent(report: &Report, quantum: f64) -> u64 {
    let null = report.null_overhead.median;
    assert!(null > 0 && report.null_overhead.count == 4000);
    let costs = report.stamp_costs.as_ref().expect("stamp costs");
    assert_eq!(costs.user_pair.stats, report.null_overhead);
    assert_eq!(costs.user_pair.round_medians.len(), 2);
    // The user pair's cost is the null pair, or its sweep's intercept where
    // the two differ by more than a quantum (README "Method"): recorded,
    // consistent, and what the round trips subtract.
    let sweep = costs.user_sweep.as_ref().expect("the user pair's sweep");
    assert_eq!(sweep.null_median, null);
    assert_eq!(sweep.inconsistency(), None);
    assert_eq!(sweep.fit.phases.len(), 4, "two phases in each of 2 rounds");
    let user_cost = costs.user_cost();
    assert_eq!(user_cost, sweep.correction);
    // The null pair is a whole number of quanta, give or take the rounding
    // of a non-integral step.
    let steps = null as f64 / quantum;
    assert!(
        (steps - steps.round()).abs() * quantum <= 1.0 + 1e-9,
        "{null} vs {quantum}"
    );
    user_cost
}

/// Every crossing has its samples, split where the kernel has the hooks
/// and round trips less the user pair otherwise, and costs more than the
/// null pair.
fn assert_each_crossing_is_measured_above_null(report: &Report, user_cost: u64) {
    let null = report.null_overhead.median;
    for c in &report.crossings {
        assert_eq!(c.samples_requested, 2 * SAMPLES, "{}", c.name);
        let rt = c.round_trip.as_ref().expect("round trip");
        if hooks_present() {
            assert_eq!(c.status, Status::Measured, "{}", c.name);
            assert!(c.u2k.is_some() && c.k2u.is_some());
        } else {
            assert!(
                matches!(&c.status, Status::RoundTripOnly { reason } if reason.contains("EINVAL")),
                "{}: {:?}",
                c.name,
                c.status
            );
            assert_eq!(
                c.samples_valid + c.samples_migrated,
                2 * SAMPLES,
                "{}",
                c.name
            );
            assert_eq!(rt.raw.count, c.samples_valid);
            assert_eq!(
                rt.correction,
                Some(user_cost),
                "{}: minus the user pair's cost",
                c.name
            );
        }
        assert!(
            rt.raw.median > null,
            "{}: {} <= null {null}",
            c.name,
            rt.raw.median
        );
    }
}

/// getppid costs what a system call costs, a fault more, and the table
/// says what it measured.
fn assert_plausible_costs_and_table(report: &Report, stdout: &str) {
    let getppid = report
        .crossing("getppid")
        .expect("getppid")
        .round_trip
        .as_ref()
        .unwrap();
    // ENVIRONMENT.md: ~441 min / 514 median natively; allow for load and
    // other CPUs, but a syscall is never 50 ticks nor 100k ticks.
    assert!(
        (150..20_000).contains(&getppid.raw.median),
        "getppid median {} ticks",
        getppid.raw.median
    );
    // A fault allocates and zeroes a page: dearer than a null syscall.
    let pf = report
        .crossing("pf-first-touch")
        .unwrap()
        .round_trip
        .as_ref()
        .unwrap();
    assert!(
        pf.raw.median > getppid.raw.median,
        "pf {} <= getppid {}",
        pf.raw.median,
        getppid.raw.median
    );
    assert!(
        stdout.contains("getppid") && stdout.contains("null overhead"),
        "{stdout}"
    );
    if !hooks_present() {
        assert!(stdout.contains("round trips only"), "{stdout}");
    }
}

/// getppid is a few hundred ticks here: under 20 quanta, so it carries the
/// batched figure, which cannot exceed the single crossing by much (it
/// spreads the stamps over 100 calls) nor be a tenth of it. Its median's
/// confidence interval holds the median.
fn assert_getppid_batched_if_coarse_and_its_ci(report: &Report, quantum: f64, stdout: &str) {
    let g = report.crossing("getppid").unwrap();
    let rt = g.round_trip.as_ref().unwrap().corrected.median;
    if xvmm_results::quantum::is_coarse(rt, Some(quantum)) {
        let b = g
            .batched
            .as_ref()
            .expect("batched figure for a coarse round trip");
        assert_eq!(b.per_batch, 100);
        let per = b.per_crossing.median;
        assert!(
            per * 10 > rt && per < 3 * rt + 100,
            "batched {per} vs single {rt}"
        );
        assert!(
            stdout.contains("batched: 100 crossings per stamp pair"),
            "{stdout}"
        );
    }
    let ci = g.round_trip.as_ref().unwrap().median_ci.expect("a CI");
    assert!(ci.low <= rt && rt <= ci.high, "{ci:?} {rt}");
}

#[test]
fn native_run_writes_a_consistent_report() {
    let (report, stdout) = run_xperf_with_a_report();
    assert_eq!(report.crossings.len(), 3);
    assert_eq!(report.method.samples_requested, SAMPLES);
    assert_eq!(report.method.rounds, 2);
    let machine = report.machine.as_ref().expect("machine");
    let quantum = machine
        .tsc_quantum_ticks
        .expect("the TSC quantum is measured");
    let user_cost = assert_the_user_pair_cost_is_consistent(&report, quantum);
    assert_each_crossing_is_measured_above_null(&report, user_cost);
    assert_plausible_costs_and_table(&report, &stdout);
    assert_getppid_batched_if_coarse_and_its_ci(&report, quantum, &stdout);
}

#[test]
fn raw_samples_and_json_on_stdout() {
    let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
        .args(["--samples", "40", "--warmup", "0", "--null-samples", "10"])
        .args(["--raw", "--json", "-"])
        .output()
        .expect("xperf runs");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    // stdout is the JSON document alone; the table goes to stderr.
    let report = Report::from_json(&stdout).expect("stdout is the report alone");
    assert!(String::from_utf8_lossy(&out.stderr).contains("getppid"));
    for c in &report.crossings {
        let samples = c.samples.as_ref().expect("raw samples");
        assert_eq!(samples.len(), 40 * 3, "three rounds by default");
        assert!(samples.iter().all(|s| s.u2k_u < s.k2u_u));
        // Each sample names its CPU (xperf is pinned: one CPU throughout).
        let cpus: std::collections::HashSet<Option<u32>> = samples.iter().map(|s| s.cpu).collect();
        assert!(
            cpus.len() <= 2 && cpus.iter().any(Option::is_some),
            "{cpus:?}"
        );
    }
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    for args in [
        &["--samples", "zero"][..],
        &["--bogus"],
        &["--cpu", "4096"],
        &["--samples", "5", "--json", "/nonexistent-dir/x.json"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
            .args(args)
            .args(["--warmup", "0", "--null-samples", "10"])
            .output()
            .expect("xperf runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("xperf: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"));
    }
}

/// stderr on a full device: the error line cannot be written, and xperf
/// must still end with its own status, not abort on a panic of `eprintln!`.
#[test]
fn a_failing_stderr_does_not_abort_xperf() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_xperf"))
        .arg("--no-such-option")
        .stdout(std::process::Stdio::null())
        .stderr(full)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2), "{status:?}");
}
