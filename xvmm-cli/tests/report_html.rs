//! `xvmm report`, through the binary: a page from good files, and one line,
//! a non-zero exit and nothing at `-o` for every kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use xvmm_results::{
    Characterization, Crossing, Environment, HostFacts, Method, Metric, Report, Sample, Stats,
};

fn xvmm(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(args)
        .output()
        .expect("xvmm runs")
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvmm-report-html-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn report(env: Environment, u2k: u64) -> Report {
    let host = HostFacts {
        cpu_model: "Test CPU".into(),
        tsc_khz: 2_000_000,
        ..Default::default()
    };
    let mut r = Report::new("test".into(), env, host, Method::standard(1, 3));
    r.null_overhead = Stats::from_samples(&[40, 50, 60]);
    let samples: Vec<Sample> = (0..3)
        .map(|i| Sample {
            u2k_u: 0,
            u2k_k: u2k + i,
            k2u_k: 3 * u2k,
            k2u_u: 5 * u2k,
            cpu: None,
            interrupts: None,
        })
        .collect();
    r.crossings.push(Crossing::from_samples(
        "getppid",
        3,
        &samples,
        &xvmm_results::Corrections::derive(50, None),
        false,
    ));
    r
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn good_files_give_one_page_and_markdown() {
    let dir = scratch("good");
    let vm = write(
        &dir,
        "vm.json",
        &report(Environment::LinuxVm, 200).to_json_pretty(),
    );
    let mut bare = report(Environment::BareMetal, 100);
    bare.characterize = Some(Characterization {
        started_unix: 1,
        seconds: 1.0,
        hostname: "h".into(),
        node_name: String::new(),
        privileged: false,
        metrics: vec![Metric::from_samples(
            "exits",
            "cpuid",
            "ticks",
            &[900, 1000],
        )],
    });
    let bm = write(&dir, "bm.json", &bare.to_json_pretty());
    let page = dir.join("report.html");
    let out = xvmm(&[
        os("report"),
        vm.as_os_str(),
        bm.as_os_str(),
        os("-o"),
        page.as_os_str(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("VM vs bare metal: vm.json against bm.json"));
    assert!(html.matches("<svg").count() >= 5, "charts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("report of 2 file(s) written to "),
        "{stdout}"
    );

    let md = dir.join("report.md");
    let out = xvmm(&[
        os("report"),
        vm.as_os_str(),
        os("--markdown"),
        os("-o"),
        md.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.starts_with("# xvmm report") && !text.contains("<svg"));
    let out = xvmm(&[
        os("report"),
        vm.as_os_str(),
        os("--markdown"),
        os("-o"),
        os("-"),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("# xvmm report"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One line on stderr, exit 1, and the directory as it was (an existing
/// page untouched, no temporary left).
fn assert_refused(dir: &Path, input: &Path, why: &str) {
    let page = dir.join("page.html");
    std::fs::write(&page, "old page").unwrap();
    let before = files_in(dir);
    let out = xvmm(&[os("report"), input.as_os_str(), os("-o"), page.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{why}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{why}: {stderr}");
    assert!(
        stderr.starts_with("xvmm: io: result file "),
        "{why}: {stderr}"
    );
    assert!(stderr.contains(why), "expected {why:?} in {stderr}");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), "old page");
    assert_eq!(files_in(dir), before, "{why}: something was left behind");
}

#[test]
fn bad_inputs_are_one_line_and_leave_nothing_at_the_destination() {
    let dir = scratch("bad");
    let good = report(Environment::BareMetal, 100).to_json_pretty();
    let not_result = write(&dir, "not-result.json", "{\"hello\": 1}");
    assert_refused(&dir, &not_result, "results are not valid JSON");
    let other = write(
        &dir,
        "other.json",
        &good.replace("\"xvmm-results\"", "\"xvmm-comparison\""),
    );
    assert_refused(&dir, &other, "expected \"xvmm-results\"");
    let old = write(
        &dir,
        "old.json",
        &good.replace("\"schema_version\": 1", "\"schema_version\": 0"),
    );
    assert_refused(&dir, &old, "schema version 0, expected 1");
    let truncated = write(&dir, "truncated.json", &good[..good.len() / 2]);
    assert_refused(&dir, &truncated, "EOF while parsing");
    let huge = dir.join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    assert_refused(&dir, &huge, "more than the 256.0 MiB accepted here");
    std::fs::remove_file(&huge).unwrap();
    assert_refused(&dir, Path::new("/dev/zero"), "not a regular file");
    assert_refused(&dir, &dir.join("missing.json"), "no such file");
    let binary = dir.join("binary.json");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    assert_refused(&dir, &binary, "not UTF-8 text");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_destination_is_checked_before_any_file_is_read() {
    let dir = scratch("dest");
    // The input does not exist either: the destination must be named first.
    let out = xvmm(&[
        os("report"),
        os("/nonexistent/in.json"),
        os("-o"),
        os("/nonexistent/dir/r.html"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("xvmm: io: cannot write /nonexistent/dir/r.html"),
        "{stderr}"
    );
    let out = xvmm(&[os("report"), os("-o"), dir.as_os_str(), os("x.json")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    let out = xvmm(&[os("report"), os("-o"), os("r.html")]);
    assert_eq!(out.status.code(), Some(2), "no input file is a usage error");
    let out = xvmm(&[os("report"), os("x.json")]);
    assert_eq!(out.status.code(), Some(2), "no -o is a usage error");
    std::fs::remove_dir_all(&dir).unwrap();
}
