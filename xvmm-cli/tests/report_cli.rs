//! `xvmm machine` and `xvmm show`, through the binary.

use std::process::{Command, Output};
use xvmm_results::{Crossing, Environment, HostFacts, Machine, Method, Report, Sample};

fn xvmm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(args)
        .output()
        .expect("xvmm runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("xvmm-report-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn machine_characterises_this_host_as_a_table_and_as_json() {
    let out = xvmm(&["machine", "--json", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let m: Machine = serde_json::from_slice(&out.stdout).expect("machine JSON parses");
    assert!(
        !m.cpu_vendor.is_empty() && m.logical_cpus > 0 && m.tsc_khz > 0,
        "{m:?}"
    );
    assert!(!m.kernel_release.is_empty());

    let out = xvmm(&["machine"]);
    assert_eq!(out.status.code(), Some(0));
    let table = text(&out.stdout);
    for key in [
        "cpu",
        "tsc",
        "hypervisor",
        "kernel",
        "kvm module",
        "kpti",
        "thp",
    ] {
        assert!(
            table.lines().any(|l| l.trim_start().starts_with(key)),
            "{key} missing:\n{table}"
        );
    }
    // The rate may be recalibrated between the two runs; its source is named.
    let tsc = table
        .lines()
        .find(|l| l.trim_start().starts_with("tsc"))
        .unwrap();
    assert!(tsc.contains(" kHz (") && tsc.ends_with(')'), "{tsc}");
}

#[test]
fn show_prints_a_saved_report_with_its_machine() {
    let dir = scratch("show");
    let mut report = Report::new(
        "test 1".into(),
        Environment::BareMetal,
        HostFacts {
            cpu_model: "Test CPU".into(),
            tsc_khz: 1_000_000,
            ..HostFacts::default()
        },
        Method::standard(10, 3),
    );
    let samples: Vec<Sample> = (0..3)
        .map(|i| Sample {
            u2k_u: 1000 * i,
            u2k_k: 1000 * i + 100,
            k2u_k: 1000 * i + 300,
            k2u_u: 1000 * i + 450,
            ..Default::default()
        })
        .collect();
    report.crossings.push(Crossing::from_samples(
        "getppid",
        3,
        &samples,
        &Default::default(),
        false,
    ));
    report.machine = Some(Machine {
        cpu_vendor: "TestVendor".into(),
        kernel_release: "9.9.9-test".into(),
        ..Machine::default()
    });
    let path = dir.join("r.json");
    std::fs::write(&path, report.to_json_pretty()).unwrap();
    let out = xvmm(&["show", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let row = shown
        .lines()
        .find(|l| l.starts_with("getppid"))
        .unwrap_or_else(|| panic!("no getppid row:\n{shown}"));
    // valid 3/3, u2k median 100, k2u median 150, round trip 450.
    assert!(
        row.contains("3/3") && row.contains(" 100 ") && row.contains(" 150 "),
        "{row}"
    );
    assert!(
        shown.contains("measured on:") && shown.contains("9.9.9-test"),
        "{shown}"
    );

    std::fs::write(&path, "{ not json").unwrap();
    for (args, start) in [
        (vec!["show", path.to_str().unwrap()], "xvmm: io: "),
        (
            vec!["show", "/nonexistent/r.json"],
            "xvmm: io: report /nonexistent/r.json: no such file",
        ),
        (
            vec!["show", "/dev/zero"],
            "xvmm: io: report /dev/zero: not a regular file",
        ),
    ] {
        let out = xvmm(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(start), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A report written before stamp costs, rounds and per-sample CPU ids (the
/// first schema-1 form: samples as objects, one null for every interval)
/// still parses and renders, its figures as written.
#[test]
fn show_renders_a_report_written_before_stamp_costs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/report-before-stamp-costs.json"
    );
    let out = xvmm(&["show", path]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("pf "))
        .unwrap_or_else(|| panic!("no pf row:\n{table}"))
        .split_whitespace()
        .collect();
    // Corrected as the old report wrote them: 100 - 73, 150 - 73, 450 - 73.
    assert_eq!(
        row[..8],
        ["pf", "2/2", "27", "27", "77", "77", "377", "377"]
    );
    assert!(
        table.contains("unsupported: hypervisor refused it"),
        "{table}"
    );
    assert!(table.contains("null overhead (stamp pair, nothing between): median 73"));
    // The exit's parts are the raw ones it had, and no exit count (KVM's
    // count came later).
    let pio: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("pio-out"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(pio[5..], ["24966", "122", "14601", "-"]);
    assert!(
        !table.contains("stamp costs ("),
        "no costs to show:\n{table}"
    );
    let report = xvmm_results::Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(report.method.rounds, 1);
    assert_eq!(report.crossings[0].samples.as_ref().unwrap()[1].k2u_u, 2450);
}

#[test]
fn kernel_hooks_rejects_bad_input_in_one_line() {
    let dir = scratch("hooks");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "not a kernel").unwrap();
    for (path, code, start) in [
        (
            "/nonexistent/vmlinux",
            1,
            "xvmm: io: vmlinux /nonexistent/vmlinux: no such file",
        ),
        (
            "/dev/zero",
            1,
            "xvmm: io: vmlinux /dev/zero: not a regular file",
        ),
        (notes.to_str().unwrap(), 1, "xvmm: kernel: "),
    ] {
        let out = xvmm(&["kernel", "hooks", path]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(start), "{err}");
        assert!(out.stdout.is_empty());
    }
    let err = text(&xvmm(&["kernel", "hooks", notes.to_str().unwrap()]).stderr);
    assert!(err.contains("not a usable vmlinux"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
