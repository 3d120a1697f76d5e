//! `xperf characterize` on this machine, through the binary, with its default
//! sample count: every metric filled or saying why not, the table printed,
//! the report written, within the minute the command promises; and the
//! hypervisor verdict agrees with `systemd-detect-virt --vm` (on the build
//! machines, a PVM-based KVM guest: "kvm").

use std::process::Command;
use xvmm_results::{Characterization, Report};

fn detect_virt_says() -> Option<String> {
    let out = Command::new("systemd-detect-virt")
        .arg("--vm")
        .output()
        .ok()?;
    // Exit 1 with "none" on bare metal: still an answer.
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!said.is_empty()).then_some(said)
}

/// Runs `xperf characterize` with its defaults; returns its report and
/// what it printed.
fn run_characterize_with_a_report() -> (Report, String) {
    let path = std::env::temp_dir().join(format!("xperf-characterize-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
        .arg("characterize")
        .arg("--json")
        .arg(&path)
        .output()
        .expect("xperf runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a terminal: no progress line on stderr.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("[1/"),
        "progress without a terminal"
    );
    let text = std::fs::read_to_string(&path).expect("report file");
    let _ = std::fs::remove_file(&path);
    (Report::from_json(&text).expect("report parses"), stdout)
}

fn median(c: &Characterization, name: &str) -> u64 {
    c.metric(name)
        .and_then(|m| m.measured())
        .map(|s| s.median)
        .unwrap()
}

fn assert_each_timing_has_its_sample_count(c: &Characterization) {
    // Crossings are measured in xperf's rounds, each of the sample count.
    let rounds = u64::from(xperf::args::DEFAULT_ROUNDS);
    for (name, n) in [
        ("cpuid", 10_000),
        ("rdtsc", 10_000),
        ("rdtscp", 10_000),
        ("clock_gettime-vdso", 10_000),
        ("clock_gettime-syscall", 10_000),
        ("getppid", 10_000 * rounds),
    ] {
        let m = c.metric(name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(m.measured().map(|s| s.count), Some(n), "{name}");
    }
}

fn assert_the_table_has_every_group(stdout: &str) {
    for row in ["hypervisor:", "time:", "exits:", "crossings:", "machine:"] {
        assert!(
            stdout.lines().any(|l| l == row),
            "{row} missing in the table"
        );
    }
}

fn assert_the_hypervisor_agrees_with_systemd(c: &Characterization) {
    let virt = c.metric("virt").and_then(|m| m.value.as_deref()).unwrap();
    match detect_virt_says() {
        Some(said) => assert!(
            virt.starts_with(&format!("{said} (")),
            "xperf says {virt:?}, systemd-detect-virt --vm says {said:?}"
        ),
        None => {
            eprintln!("systemd-detect-virt is not installed: verdict {virt:?} not cross-checked")
        }
    }
}

/// Whether the vDSO serves CLOCK_MONOTONIC follows from facts, not from
/// the timing the verdict is made of: the kernel mapped a vDSO and the
/// clocksource is the TSC, which the x86 vDSO reads itself. Then the
/// verdict must say so and the libc path must be cheaper than the call.
fn assert_the_vdso_verdict_follows_from_the_facts(c: &Characterization) {
    let vdso = c
        .metric("clock_gettime-vdso")
        .and_then(|m| m.value.as_deref())
        .unwrap();
    let clocksource =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    // SAFETY: getauxval only reads the auxiliary vector.
    let mapped = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } != 0;
    if mapped && clocksource.trim() == "tsc" {
        assert!(vdso.contains("served by the vDSO"), "{vdso}");
        assert!(
            median(c, "clock_gettime-vdso") * 2 < median(c, "clock_gettime-syscall"),
            "{vdso}"
        );
    } else {
        eprintln!(
            "clocksource {:?}, vDSO mapped {mapped}: whether the vDSO serves it is not known here; verdict {vdso:?}",
            clocksource.trim()
        );
    }
}

#[test]
fn characterize_fills_every_metric_and_names_the_hypervisor() {
    let (report, stdout) = run_characterize_with_a_report();
    let c = report.characterize.as_ref().expect("characterize block");
    assert!(c.unfilled().is_empty(), "unfilled: {:?}", c.unfilled());
    assert!(c.seconds < 90.0, "took {:.1} s", c.seconds);
    println!("xperf characterize took {:.1} s\n{stdout}", c.seconds);
    assert_each_timing_has_its_sample_count(c);
    assert_the_table_has_every_group(&stdout);
    assert_the_hypervisor_agrees_with_systemd(c);
    assert_the_vdso_verdict_follows_from_the_facts(c);
    assert!(
        median(c, "getppid") > median(c, "rdtsc"),
        "a system call costs more than a TSC read"
    );
}

#[test]
fn characterize_help_and_bad_options() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_xperf"))
            .args(args)
            .output()
            .expect("xperf runs")
    };
    let help = run(&["characterize", "--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).starts_with("usage: xperf characterize"));
    let bad = run(&["characterize", "--samples", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let bad = run(&["characterize", "--json", "/nonexistent/dir/x.json"]);
    assert_eq!(
        bad.status.code(),
        Some(1),
        "the destination is checked before measuring"
    );
}

/// The series of an OpenMetrics text as (name, label names and values but
/// the statistic's figure): what Prometheus keys a series by.
fn series_keys(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.rsplit_once(' ').map_or(l, |(key, _)| key).to_string())
        .collect()
}

#[test]
fn two_runs_write_the_same_series_so_label_values_stay_bounded() {
    let run = |n: u32| {
        let prom = std::env::temp_dir().join(format!("xperf-om-{}-{n}.prom", std::process::id()));
        let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
            .args(["characterize", "--samples", "300", "--json", "-"])
            .arg("--openmetrics")
            .arg(&prom)
            .output()
            .expect("xperf runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&prom).unwrap();
        let _ = std::fs::remove_file(&prom);
        text
    };
    let (first, second) = (run(1), run(2));
    let (a, b) = (series_keys(&first), series_keys(&second));
    // Reasons are codes and no label holds a figure, a time or a path: the
    // same machine gives the same series, only their values move.
    assert_eq!(a, b, "series differ between two runs");
    assert!(a.len() > 50, "only {} series", a.len());
    let codes = xvmm_results::render::openmetrics::REASON_CODES;
    for key in &a {
        assert!(!key.contains("quantile="), "{key}");
        if let Some((_, rest)) = key.split_once("reason=\"") {
            let code = rest.split('"').next().unwrap();
            assert!(
                codes.contains(&code),
                "reason {code:?} is not a code: {key}"
            );
        }
    }
}
