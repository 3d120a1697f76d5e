//! The built-in microguest on this machine's /dev/kvm, through the real binary,
//! with small sample counts. Skipped (with a message) only where /dev/kvm does
//! not exist.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use xvmm::microguest::kinds;
use xvmm::microguest::measure::{measure, phases, Options};
use xvmm::microguest::platform::{self, Platform, Vendor};
use xvmm::progress::Progress;
use xvmm_results::num::u64_saturating;
use xvmm_results::{Environment, Report, Status, SCHEMA, SCHEMA_VERSION};

const CROSSINGS: [&str; 5] = ["pf", "int3", "syscall", "sysenter", "int-n"];

fn kvm_available() -> bool {
    if Path::new("/dev/kvm").exists() {
        return true;
    }
    eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
    false
}

/// One xvmm run at a time: two at once on a 2-CPU PVM machine time each
/// other, and the stamps' correction and a row are then taken under
/// different loads (a fresh clone's run gave wbinvd and invd corrected
/// medians of 182 and 208 ticks, some 1500 alone, and `verify` asked
/// whether they exited).
fn one_run() -> std::sync::MutexGuard<'static, ()> {
    static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_RUN.lock().unwrap_or_else(|e| e.into_inner())
}

fn xvmm(args: &[&str]) -> Output {
    let _turn = one_run();
    run_in_turn(args)
}

/// Runs xvmm; the caller holds [`one_run`]'s turn.
fn run_in_turn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(args)
        .output()
        .expect("xvmm runs")
}

fn temp_json(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xvmm-mg-test-{}-{name}.json", std::process::id()))
}

/// One run shared by the assertions below (each run costs a few seconds).
fn raw_run() -> &'static Report {
    static REPORT: std::sync::OnceLock<Report> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| {
        let path = temp_json("raw");
        let out = xvmm(&[
            "--samples",
            "300",
            "--warmup",
            "30",
            "--rounds",
            "2",
            "--raw",
            "--timeout",
            "60",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "xvmm failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Report::from_json(&text).expect("the JSON parses and has the current schema")
    })
}

#[test]
fn every_crossing_and_exit_is_measured_or_explained() {
    if !kvm_available() {
        return;
    }
    let r = raw_run();
    assert_eq!(
        (r.schema.as_str(), r.schema_version),
        (SCHEMA, SCHEMA_VERSION)
    );
    assert_eq!(r.environment, Environment::Microguest);
    let names: Vec<&str> = r.crossings.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, CROSSINGS);
    let here = Platform::of(r.machine.as_ref().expect("the machine"));
    check_crossings_as_documented(r, here);
    check_exits_as_documented(r, here);
    check_pio_out_host_split(r);
    check_kvm_exit_counts(r, here);
    assert_eq!(
        xvmm::microguest::verify::problems(r),
        Vec::<String>::new(),
        "verify"
    );
    assert!(!r.host.cpu_model.is_empty() && r.host.tsc_khz > 0);
    check_stated_tsc_rate_is_the_guests(r);
    let q = r.machine.as_ref().and_then(|m| m.tsc_quantum_ticks);
    assert!(q.is_some_and(|q| q >= 1.0), "quantum {q:?}");
    assert!(!r.host.hypervisor_signature.is_empty());
    assert!(!r.host.kvm_module.is_empty());
}

/// Each crossing row as README "What runs where" documents it for this
/// machine's vendor and hypervisor (either, with a reason, where nothing is).
fn check_crossings_as_documented(r: &Report, here: Platform) {
    for c in &r.crossings {
        let fact = platform::expected_crossing(&c.name, here);
        platform::row_matches(&fact, &c.status)
            .unwrap_or_else(|e| panic!("{here:?} {}: {e}", c.name));
        match &c.status {
            Status::Measured => {
                assert_eq!(c.samples_requested, 600, "2 rounds of 300");
                assert!(c.samples_valid > 0, "{}", c.name);
                assert!(c.u2k.is_some() && c.k2u.is_some() && c.round_trip.is_some());
            }
            Status::Unsupported { reason } => assert!(reason.len() > 10, "{}: {reason:?}", c.name),
            other => panic!("{}: unexpected status {other:?}", c.name),
        }
    }
}

/// Every exit, in order (the hypercall the vendor's), each row as README
/// "What runs where" documents it.
fn check_exits_as_documented(r: &Report, here: Platform) {
    // Every exit row of the library's table, in its order: the names
    // themselves are pinned once, in kinds.rs
    // (`the_report_rows_keep_their_names_and_order`).
    let exits: Vec<&str> = r.exits.iter().map(|e| e.name.as_str()).collect();
    let table: Vec<&str> = kinds::exit_rows(here.vendor == Vendor::Amd)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(exits, table, "{here:?}");
    assert!(
        exits.contains(&platform::hypercall(here.vendor)),
        "{exits:?}"
    );
    for e in &r.exits {
        let fact = platform::expected_exit(&e.name, here);
        platform::row_matches(&fact, &e.status)
            .unwrap_or_else(|err| panic!("{here:?} {}: {err}", e.name));
        match &e.status {
            Status::Measured => {
                assert!(e.samples_valid > 0 && e.round_trip.is_some(), "{}", e.name)
            }
            Status::Unsupported { reason } => assert!(!reason.is_empty(), "{}", e.name),
            other => panic!("{}: unexpected status {other:?}", e.name),
        }
    }
}

/// KVM's exit counts, as `platform.md` has them: PVM leaves the exits it
/// handles itself out of its statistic (CPUID counted 0.003 a sample), so
/// the report drops every row's count and says why; a hardware KVM counts
/// CPUID's exit and each of those that reach xvmm, once a sample.
fn check_kvm_exit_counts(r: &Report, here: Platform) {
    let measured = || r.exits.iter().filter(|e| e.status == Status::Measured);
    if here.hypervisor == platform::Hypervisor::Pvm {
        assert!(measured().all(|e| e.kvm_exits.is_none()));
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("does not count the exits it handles itself")),
            "{:?}",
            r.notes
        );
        return;
    }
    let reaching_xvmm = |name: &str| {
        kinds::exit_rows(here.vendor == Vendor::Amd)
            .any(|(row, kind)| row == name && kind.reaches_vmm().is_some())
    };
    for e in measured().filter(|e| e.name == "cpuid" || reaching_xvmm(&e.name)) {
        let per = e.kvm_exits.and_then(|k| k.per_sample());
        assert!(
            per.is_some_and(|x| (0.9..1.5).contains(&x)),
            "{}: {per:?}",
            e.name
        );
    }
}

/// Exits that reach xvmm carry the host-side split when the TSC offset is known.
fn check_pio_out_host_split(r: &Report) {
    let pio = r.exits.iter().find(|e| e.name == "pio-out").unwrap();
    assert_eq!(pio.status, Status::Measured);
    assert!(pio
        .in_vmm
        .as_ref()
        .is_some_and(|s| s.count > 0 && s.median > 0));
    if let Some(split) = &pio.split {
        // Exactly additive per sample, so in the means (verify checks it
        // too); the medians agree within the spread of the parts.
        let rt = &pio.round_trip.as_ref().unwrap().corrected;
        let parts = [&split.guest_to_vmm, &split.in_vmm, &split.vmm_to_guest];
        let mean: f64 = parts.iter().map(|i| i.corrected.mean).sum();
        assert!(parts.iter().all(|i| i.raw.count == rt.count));
        // A part clamped at 0 (PVM's emulated kernel stamps vary by tens of
        // thousands of ticks) adds what was clamped away.
        let clamped = parts.iter().any(|i| i.clamped > 0);
        assert!(
            clamped || (mean - rt.mean).abs() < 1e-6 * rt.mean,
            "{mean} vs {}",
            rt.mean
        );
        assert!(mean >= rt.mean - 1e-6 * rt.mean, "clamping only adds");
    }
}

/// The rate the report states against the rate a guest's TSC is seen to
/// run at, measured here (not the number KVM or the kernel log states).
fn check_stated_tsc_rate_is_the_guests(r: &Report) {
    // Each measurement bounds the true rate, so their intersection does too;
    // a busy host (CI's two vCPUs) can widen one past 0.1 %, so measure again
    // until the bounds resolve it.
    let (mut low, mut high) = (f64::MIN, f64::MAX);
    for _ in 0..5 {
        let (l, h) = guest_tsc_khz_bounds(Duration::from_millis(1000));
        (low, high) = (low.max(l), high.min(h));
        if high - low < 0.0005 * low {
            break;
        }
    }
    assert!(
        (u64_saturating(low.floor())..=u64_saturating(high.ceil())).contains(&r.host.tsc_khz),
        "the report says the guest TSC runs at {} kHz; a guest's TSC ran at {low:.0}..{high:.0} kHz",
        r.host.tsc_khz
    );
    // The check resolves 0.1 %: a rate that far off would fail it.
    let off = r.host.tsc_khz + r.host.tsc_khz / 1000;
    assert!(
        (off as f64) > high,
        "{low:.0}..{high:.0} kHz cannot tell {} from {off}",
        r.host.tsc_khz
    );
}

#[test]
fn every_raw_sample_is_ordered_and_filled() {
    if !kvm_available() {
        return;
    }
    let r = raw_run();
    for c in r.crossings.iter().filter(|c| c.status == Status::Measured) {
        let samples = c.samples.as_ref().expect("--raw keeps the samples");
        assert_eq!(samples.len() as u64, c.samples_requested, "{}", c.name);
        for (i, s) in samples.iter().enumerate() {
            assert!(
                s.u2k_u < s.u2k_k && s.u2k_k < s.k2u_k && s.k2u_k < s.k2u_u,
                "{} sample {i}: {s:?}",
                c.name
            );
        }
        assert_eq!(
            (c.samples_unfilled, c.samples_out_of_order),
            (0, 0),
            "{}",
            c.name
        );
        assert_eq!(c.samples_valid, c.samples_requested);
    }
}

/// The report's statistics, recomputed from its own raw samples: every
/// interval (in_kernel included), its correction, median, mean and spread.
#[test]
fn statistics_match_the_raw_samples_and_the_stamp_costs() {
    if !kvm_available() {
        return;
    }
    let r = raw_run();
    let costs = r.stamp_costs.as_ref().expect("stamp costs");
    let corr = costs.corrections;
    assert_eq!(r.null_overhead, costs.user_pair.stats);
    assert_eq!(costs.user_pair.round_medians.len(), 2);
    let (b, c) = (
        costs.kernel_pair_inner.as_ref().unwrap().stats.median,
        costs.kernel_pair.as_ref().unwrap().stats.median,
    );
    assert_eq!(corr.in_kernel, b);
    // The user pair's cost is the null pair or its sweep's intercept, as
    // the sweep decided (README "Method").
    let sweep = costs.user_sweep.as_ref().expect("a user pair sweep");
    assert_eq!(sweep.null_median, costs.user_pair.stats.median);
    assert_eq!(sweep.inconsistency(), None);
    assert_eq!(sweep.fit.phases.len(), 4, "two phases in each of 2 rounds");
    assert_eq!(corr.round_trip, sweep.correction + b + c);
    assert_eq!(corr.user_round_trip, sweep.correction);
    for x in r.crossings.iter().filter(|c| c.status == Status::Measured) {
        let valid: Vec<_> = x
            .samples
            .as_ref()
            .unwrap()
            .iter()
            .filter(|s| s.validate().is_ok())
            .collect();
        let check = |what: &str,
                     interval: &Option<xvmm_results::Interval>,
                     f: fn(&xvmm_results::Sample) -> u64,
                     correction: u64| {
            let i = interval.as_ref().unwrap();
            let raw: Vec<u64> = valid.iter().map(|s| f(s)).collect();
            let mean = raw.iter().sum::<u64>() as f64 / raw.len() as f64;
            let var =
                raw.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / raw.len() as f64;
            let mut sorted = raw.clone();
            sorted.sort_unstable();
            assert_eq!(i.correction, Some(correction), "{} {what}", x.name);
            assert_eq!(i.raw.count, raw.len() as u64, "{} {what}", x.name);
            assert_eq!(
                i.raw.median,
                sorted[sorted.len().div_ceil(2) - 1],
                "{} {what}",
                x.name
            );
            assert!((i.raw.mean - mean).abs() < 1e-6 * mean, "{} {what}", x.name);
            assert!(
                (i.raw.stddev - var.sqrt()).abs() < 1e-6 * mean,
                "{} {what}",
                x.name
            );
            let clamped = raw.iter().filter(|&&v| v < correction).count() as u64;
            assert_eq!(i.clamped, clamped, "{} {what}", x.name);
            assert_eq!(i.corrected.median, i.raw.median.saturating_sub(correction));
            assert!(i.raw.min as f64 <= i.raw.mean && i.raw.mean <= i.raw.max as f64);
            assert_eq!(i.rounds.len(), 2, "{} {what}", x.name);
        };
        check("u2k", &x.u2k, xvmm_results::Sample::u2k, corr.u2k);
        check("k2u", &x.k2u, xvmm_results::Sample::k2u, corr.k2u);
        check(
            "in_kernel",
            &x.in_kernel,
            xvmm_results::Sample::in_kernel,
            corr.in_kernel,
        );
        check(
            "round trip",
            &x.round_trip,
            xvmm_results::Sample::round_trip,
            corr.round_trip,
        );
    }
}

#[test]
fn table_goes_to_stdout_and_json_to_a_file() {
    if !kvm_available() {
        return;
    }
    let out = xvmm(&[
        "--samples",
        "20",
        "--warmup",
        "2",
        "--timeout",
        "60",
        "--json",
        "-",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With --json -, stdout is the JSON alone and the table moves to stderr.
    let json = String::from_utf8(out.stdout).unwrap();
    let report = Report::from_json(&json).unwrap();
    assert!(
        report.crossings.iter().all(|c| c.samples.is_none()),
        "no --raw"
    );
    let table = String::from_utf8(out.stderr).unwrap();
    for name in CROSSINGS {
        assert!(
            table.lines().any(|l| l.starts_with(name)),
            "row {name} missing:\n{table}"
        );
    }
    assert!(table.contains("null overhead"));
}

/// The gauge `name` with every label of `labels` (the quoted forms), from
/// an OpenMetrics text.
fn gauge(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.parse().unwrap())
}

/// `promtool check metrics < text` (Debian's prometheus package, which
/// harness/setup.sh installs): `Err` with its complaints when it refuses.
fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed (harness/setup.sh installs Debian's prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr)),
    }
}

#[test]
fn openmetrics_carry_the_json_figures_and_a_bad_path_fails_first() {
    if !kvm_available() {
        return;
    }
    let json = temp_json("om");
    let prom = json.with_extension("prom");
    let (report, text) = run_writing_json_and_openmetrics(&json, &prom);
    check_promtool_accepts_it_and_refuses_the_control(&text);
    std::fs::remove_file(&json).unwrap();
    std::fs::remove_file(&prom).unwrap();
    assert!(text.ends_with("# EOF\n"));
    check_openmetrics_carry_the_json_figures(&report, &text);
    check_unwritable_destination_fails_before_the_vm();
    check_destination_failing_at_the_end_is_saved_beside();
}

/// A short run writing its report to `json` and its OpenMetrics to `prom`:
/// the report and the OpenMetrics text.
fn run_writing_json_and_openmetrics(json: &Path, prom: &Path) -> (Report, String) {
    let out = xvmm(&[
        "--samples",
        "20",
        "--warmup",
        "2",
        "--timeout",
        "60",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--openmetrics",
        prom.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = Report::from_json(&std::fs::read_to_string(json).unwrap()).unwrap();
    let text = std::fs::read_to_string(prom).unwrap();
    (report, text)
}

/// Prometheus's own linter accepts the file; the control (the summary
/// label on a gauge, as this file once had) shows that it can refuse.
fn check_promtool_accepts_it_and_refuses_the_control(text: &str) {
    promtool_check(text).unwrap();
    let bad = "# HELP x_seconds x.\n# TYPE x_seconds gauge\nx_seconds{quantile=\"0.5\"} 1.0\n";
    assert!(promtool_check(bad).is_err(), "promtool took the control");
}

/// Seconds at the measured machine's TSC rate (docs/metrics.md): the
/// guest's where the report states it (its figure may differ from the
/// host's by a kHz of calibration), read back from the file. Every measured
/// crossing's median and exit's p99 is there; every unmeasured crossing is
/// named.
fn check_openmetrics_carry_the_json_figures(report: &Report, text: &str) {
    let hz = gauge(text, "xvmm_tsc_frequency_hertz", &[]).expect("the TSC rate");
    let guest_khz = report.machine.as_ref().map_or(0, |m| m.tsc_khz);
    let khz = if guest_khz > 0 {
        guest_khz
    } else {
        report.host.tsc_khz
    };
    assert_eq!(hz, khz as f64 * 1000.0);
    let seconds = |ticks: u64| ticks as f64 / hz;
    let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs());
    let mut compared = 0;
    for c in &report.crossings {
        let Some(rt) = c.round_trip.as_ref().filter(|i| i.corrected.count > 0) else {
            let unavailable = format!("metric=\"crossings/{}-round_trip\"", c.name);
            assert!(
                text.contains(&unavailable),
                "{} unmeasured but not named",
                c.name
            );
            continue;
        };
        let labels = [
            &format!("crossing=\"{}\"", c.name)[..],
            "interval=\"round_trip\"",
            "statistic=\"median\"",
        ];
        let got = gauge(text, "xvmm_crossing_duration_seconds", &labels);
        assert!(
            near(got, seconds(rt.corrected.median)),
            "{}: {got:?}",
            c.name
        );
        compared += 1;
    }
    for e in &report.exits {
        if let Some(rt) = e.round_trip.as_ref().filter(|i| i.corrected.count > 0) {
            let labels = [&format!("exit=\"{}\"", e.name)[..], "statistic=\"p99\""];
            let got = gauge(text, "xvmm_exit_duration_seconds", &labels);
            assert!(near(got, seconds(rt.corrected.p99)), "{}: {got:?}", e.name);
            compared += 1;
        }
    }
    assert!(
        !text.contains("quantile="),
        "a gauge with the summary label"
    );
    assert!(compared >= 5, "only {compared} figures compared");
}

/// A destination that cannot be written fails before the VM is made; `-`
/// is no OpenMetrics destination.
fn check_unwritable_destination_fails_before_the_vm() {
    // Timed from this run's own turn, not from the wait for it.
    let turn = one_run();
    let started = Instant::now();
    let out = run_in_turn(&[
        "--samples",
        "20",
        "--openmetrics",
        "/nonexistent/dir/x.prom",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/dir/x.prom") && err.lines().count() == 1,
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(turn);
    let out = xvmm(&["--openmetrics", "-"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A destination that fails at the end (/dev/full): the JSON is written
/// all the same, and the OpenMetrics text is saved beside, by name.
fn check_destination_failing_at_the_end_is_saved_beside() {
    let dir = std::env::temp_dir().join(format!("xvmm-mg-om-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let turn = one_run();
    let out = Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args([
            "--samples",
            "20",
            "--warmup",
            "2",
            "--quiet",
            "--json",
            "r.json",
        ])
        .args(["--openmetrics", "/dev/full"])
        .current_dir(&dir)
        .output()
        .unwrap();
    drop(turn);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(Report::from_json(&std::fs::read_to_string(dir.join("r.json")).unwrap()).is_ok());
    let saved = err
        .trim_end()
        .split("they were saved to ")
        .nth(1)
        .unwrap_or_else(|| panic!("no fallback named: {err}"));
    assert!(
        err.contains("cannot write the OpenMetrics to /dev/full"),
        "{err}"
    );
    let text = std::fs::read_to_string(dir.join(saved)).unwrap();
    assert!(text.contains("xvmm_exit_duration_seconds") && text.ends_with("# EOF\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quiet_json_to_stdout_is_the_only_output() {
    if !kvm_available() {
        return;
    }
    let out = xvmm(&["--samples", "10", "--warmup", "0", "--quiet", "--json", "-"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Report::from_json(&String::from_utf8(out.stdout).unwrap()).unwrap();
}

#[test]
fn bad_arguments_fail_with_one_line() {
    for (args, needle) in [
        (&["--samples", "0"][..], "--samples must be at least 1"),
        (&["--samples", "100000000"][..], "sample buffer"),
        (&["--warmup", "100000000"][..], "--warmup 100000000"),
        (&["--pin", "100000"][..], "--pin 100000"),
    ] {
        let out = xvmm(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // clap's own usage errors are shown whole: the problem, then the usage.
    // Which flags apply to which run, and --timeout's range, are clap's.
    for (args, needle) in [
        (&["--samples", "x"][..], "xvmm: usage: invalid value 'x'"),
        (&["--no-such-flag"][..], "xvmm: usage: unexpected argument"),
        (
            &["--async-pf", "on"][..],
            "xvmm: usage: the following required arguments were not provided",
        ),
        (
            &["--timeout", "0"][..],
            "xvmm: usage: invalid value '0' for '--timeout <TIMEOUT>': 0 is not in 1..=1000000",
        ),
        (
            &["--timeout", "18446744073709551615"][..],
            "xvmm: usage: invalid value '18446744073709551615' for '--timeout <TIMEOUT>'",
        ),
    ] {
        let out = xvmm(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines().next().unwrap_or("").starts_with(needle),
            "{args:?}: {err}"
        );
        assert!(err.contains("try '--help'"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn run_cannot_outlive_its_timeout() {
    if !kvm_available() {
        return;
    }
    let turn = one_run();
    let start = Instant::now();
    let out = run_in_turn(&["--samples", "400000", "--warmup", "0", "--timeout", "1"]);
    let elapsed = start.elapsed();
    drop(turn);
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("xvmm: timeout:") && err.lines().count() == 1,
        "{err}"
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

/// `--tsc-khz` either gives the guest that TSC rate (read back from KVM into
/// the report) or, on a KVM without TSC scaling, fails with one line naming
/// the missing capability: never a silent fallback. Which one is asserted
/// where README "What runs where" documents it (PVM on the AMD build
/// machine refuses).
#[test]
fn guest_tsc_rate_is_applied_or_refused_in_one_line() {
    if !kvm_available() {
        return;
    }
    let path = temp_json("tsc-khz");
    let requested = 1_234_567u32;
    let out = xvmm(&[
        "--tsc-khz",
        &requested.to_string(),
        "--samples",
        "100",
        "--warmup",
        "10",
        "--quiet",
        "--json",
        path.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    let here = Platform::probe();
    let fact = platform::expected_tsc_scaling(here);
    let documented = match fact.outcome {
        platform::Outcome::Unavailable => !out.status.success(),
        platform::Outcome::Runs => out.status.success(),
        _ => true,
    };
    assert!(
        documented,
        "{here:?}: --tsc-khz documented {:?} ({}): {err}",
        fact.outcome, fact.source
    );
    if out.status.success() {
        let report = Report::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        // KVM may round the rate by a few kHz.
        assert!(
            report.host.tsc_khz.abs_diff(u64::from(requested)) <= 1_000,
            "asked for {requested} kHz, the guest got {}",
            report.host.tsc_khz
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("KVM_CAP_TSC_CONTROL"), "{err}");
        assert!(!path.exists(), "no report is written for a refused run");
    }
}

/// A run stopped by --timeout keeps what it measured: the rows done are in the
/// JSON and the table, every row after the stop is "not measured", and xvmm
/// still fails with the one-line timeout error (124). On a host fast enough to
/// finish in a second the run is simply complete.
#[test]
fn a_stopped_run_keeps_the_rows_it_measured() {
    if !kvm_available() {
        return;
    }
    let path = temp_json("stopped");
    let out = xvmm(&["--timeout", "1", "--json", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    let stopped_reason = |s: &Status| match s {
        Status::Unsupported { reason } => reason.starts_with("not measured:"),
        _ => false,
    };
    match out.status.code() {
        Some(0) => {
            let report = Report::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(!report.crossings.iter().any(|c| stopped_reason(&c.status)));
        }
        Some(124) => {
            assert!(
                err.starts_with("xvmm: timeout:") && err.lines().count() == 1,
                "{err}"
            );
            let Ok(text) = std::fs::read_to_string(&path) else {
                // Stopped before any row: nothing to keep, nothing printed.
                assert!(table.is_empty(), "{table}");
                return;
            };
            let report = Report::from_json(&text).unwrap();
            let statuses: Vec<&Status> = report
                .crossings
                .iter()
                .map(|c| &c.status)
                .chain(report.exits.iter().map(|e| &e.status))
                .collect();
            assert!(report.notes[0].starts_with("the run stopped early"));
            // The stamp pairs always precede the rows.
            assert!(report.null_overhead.count > 0);
            // Stopped in the first round: the rows after the stop are "not
            // measured"; in a later round every row has a round or more.
            if let Some(first_stop) = statuses.iter().position(|s| stopped_reason(s)) {
                assert!(
                    statuses[first_stop..].iter().all(|s| stopped_reason(s)),
                    "{statuses:?}"
                );
                assert!(table.contains("not measured: the run stopped"), "{table}");
            }
        }
        other => panic!("exit {other:?}: {err}"),
    }
    let _ = std::fs::remove_file(&path);
}

/// What `measure` tells its progress, as lines.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl Recorder {
    fn push(&self, event: String) {
        self.0.lock().unwrap().push(event);
    }
}

impl Progress for Recorder {
    fn begin(&self, what: &str, total: u64) {
        self.push(format!("begin {what} {total}"));
    }
    fn step(&self, next: &str) {
        self.push(format!("step {next}"));
    }
    fn message(&self, text: &str) {
        self.push(format!("message {text}"));
    }
    fn finish(&self) {
        self.push("finish".into());
    }
}

/// The library run reports one step per null measurement and per row, named
/// as the row, between one begin and one finish.
#[test]
fn measure_reports_one_step_per_row() {
    if !kvm_available() {
        return;
    }
    let recorder = Recorder::default();
    let opts = Options::new(20, 2).unwrap().with_rounds(2).unwrap();
    let measured = measure(&opts, Duration::from_secs(60), &recorder).unwrap();
    assert!(measured.stopped.is_none());
    let report = measured.report;
    let mut expected = vec![
        format!("begin microguest {}", phases(2)),
        "step tsc quantum".to_string(),
    ];
    for round in 1..=2 {
        expected.push(format!("step round {round}/2: stamp pairs"));
        expected.extend(report.crossings.iter().map(|c| format!("step {}", c.name)));
        expected.extend(report.exits.iter().map(|e| format!("step {}", e.name)));
    }
    expected.push("finish".into());
    assert_eq!(expected.len() as u64, phases(2) + 2);
    assert_eq!(recorder.0.into_inner().unwrap(), expected);
}

/// `--trace` on the microguest: every measured exit row carries the traced
/// split and the probe effect, and the private tracefs instances are gone
/// afterwards. Where README "What runs where" documents no exit tracepoints
/// (PVM on the AMD build machine) every sample counts as "no exit traced";
/// where it documents them (hardware KVM; the nested harness has real
/// ones) samples are split.
#[test]
fn traced_exits_carry_the_split_and_tracefs_is_left_as_found() {
    let instances = || -> Vec<String> {
        std::fs::read_dir("/sys/kernel/tracing/instances")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("xvmm-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = instances();
    let out = xvmm(&[
        "--trace",
        "--samples",
        "20",
        "--warmup",
        "2",
        "--rounds",
        "2",
        "--quiet",
        "--json",
        "-",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = Report::from_json(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let here = Platform::of(report.machine.as_ref().expect("the machine"));
    let tracepoints = platform::expected_exit_tracepoints(here);
    let measured: Vec<_> = report
        .exits
        .iter()
        .filter(|e| e.round_trip.is_some())
        .collect();
    assert!(!measured.is_empty());
    for e in measured {
        let t = e
            .traced
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no traced split", e.name));
        assert_eq!(t.samples, 2 * 20, "{}: {t:?}", e.name);
        assert_eq!(t.split + t.negative + t.no_exit + t.more_exits, t.samples);
        assert!(t.round_trip_traced_median > 0 && t.round_trip_untraced_median > 0);
        match tracepoints.outcome {
            platform::Outcome::Unavailable => {
                assert_eq!(t.no_exit, t.samples, "{here:?} {}: {t:?}", e.name)
            }
            platform::Outcome::Runs => assert!(t.split > 0, "{here:?} {}: {t:?}", e.name),
            _ => {}
        }
    }
    assert_eq!(instances(), before, "a tracefs instance was left behind");
}

/// The rate a guest's TSC runs at, bounded by the host's clock: a tiny VM
/// reads its TSC twice, `gap` apart, and reports each reading through port
/// exits; each reading lies between the host's time before the `KVM_RUN`
/// that ran it and the exit that reported it. Returns (low, high) kHz. The
/// host clock is `CLOCK_MONOTONIC_RAW`, which on a TSC clocksource is the
/// host TSC scaled by the host kernel's own rate; no clock independent of
/// the TSC exists on these machines (no HPET, no ACPI PM timer, no RTC), so
/// this checks that the guest's TSC runs at the stated rate in the host's
/// time, not the host kernel's calibration.
fn guest_tsc_khz_bounds(gap: Duration) -> (f64, f64) {
    use vm_memory::{Bytes, GuestAddress};
    use xvmm::arch::x86_64::regs::{setup_boot_cpu, BootEntry};
    use xvmm::vcpu::{RunControl, Vcpu, VcpuConfig};
    use xvmm::vm::{Vm, VmConfig};
    const CODE_GPA: u64 = 0x10_0000;
    let vm = Vm::new(&VmConfig {
        mem_bytes: 16 << 20,
        irqchip: false,
    })
    .unwrap();
    let mut vcpu = Vcpu::new(&vm, &VcpuConfig::boot()).unwrap();
    // Twice: rdtsc; out 0x10, eax; mov eax, edx; out 0x10, eax. Then exit.
    let read = [0x0f, 0x31, 0xe7, 0x10, 0x89, 0xd0, 0xe7, 0x10];
    let mut code = [read, read].concat();
    code.extend_from_slice(&[0x66, 0xba, 0x01, 0x05, 0xb0, 0x00, 0xee]);
    vm.memory
        .write_slice(&code, GuestAddress(CODE_GPA))
        .unwrap();
    setup_boot_cpu(
        &vcpu.fd,
        &vm.memory,
        &BootEntry::Linux64 {
            entry: CODE_GPA,
            zero_page: xvmm::layout::ZERO_PAGE_GPA,
        },
    )
    .unwrap();
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
        ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
    };
    let rc = RunControl::new(Duration::from_secs(60)).unwrap();
    let mut running = rc.attach(&mut vcpu);
    // Per port write: the host time before the run that made it, and after.
    let mut outs: Vec<(u32, f64, f64)> = Vec::new();
    loop {
        let before = now();
        let exit = running.run().expect("run");
        let after = now();
        match exit {
            kvm_ioctls::VcpuExit::IoOut(0x10, data) => {
                let v = u32::from_le_bytes(data.try_into().expect("4 bytes"));
                outs.push((v, before, after));
                if outs.len() == 2 {
                    std::thread::sleep(gap);
                }
            }
            kvm_ioctls::VcpuExit::IoOut(xvmm::layout::PORT_EXIT, _) => break,
            kvm_ioctls::VcpuExit::Intr => {}
            other => panic!("unexpected exit {other:?}"),
        }
    }
    assert_eq!(outs.len(), 4, "{outs:?}");
    let tsc = |i: usize| u64::from(outs[i].0) | (u64::from(outs[i + 1].0) << 32);
    let ticks = tsc(2).wrapping_sub(tsc(0)) as f64;
    // Reading 1 ran in the first run (before outs[0]'s exit), reading 2 in
    // the run that ended with outs[2]'s exit.
    let longest = outs[2].2 - outs[0].1;
    let shortest = outs[2].1 - outs[0].2;
    (ticks / longest * 1e6, ticks / shortest * 1e6)
}
