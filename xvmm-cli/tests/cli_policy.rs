//! The application layer's output and exit policy, through the built binary
//! (issue 10, defects 1-7): failing stdout, signals, output destinations
//! checked before measuring, escaping, inapplicable options, whole usage
//! errors, exit statuses.

mod vm_support;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use vm_support::*;
use xvmm_results::{Crossing, Environment, HostFacts, Method, Report, Sample, Stats};

fn xvmm_to(stdout: Stdio, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run xvmm")
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

fn sample_report(name: &str) -> Report {
    let mut r = Report::new(
        "xperf test".into(),
        Environment::BareMetal,
        HostFacts {
            cpu_model: "Test CPU".into(),
            ..Default::default()
        },
        Method::standard(0, 2),
    );
    r.null_overhead = Stats::from_samples(&[10, 10]);
    let samples = [Sample {
        u2k_u: 0,
        u2k_k: 100,
        k2u_k: 200,
        k2u_u: 300,
        ..Default::default()
    }; 2];
    r.crossings.push(Crossing::from_samples(
        name,
        2,
        &samples,
        &Default::default(),
        false,
    ));
    r
}

/// Defect 1: a failed write to stdout is one line and exit 1, not a panic.
#[test]
fn a_full_stdout_is_one_line_and_exit_one() {
    let dir = scratch("cli-full");
    let report = file(
        &dir,
        "r.json",
        sample_report("getppid").to_json_pretty().as_bytes(),
    );
    for args in [
        &["machine"][..],
        &["show", report.to_str().unwrap()],
        &[
            "compare",
            report.to_str().unwrap(),
            report.to_str().unwrap(),
        ],
        &["--help"],
    ] {
        let out = xvmm_to(dev_full(), args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(
            err, "xvmm: io: cannot write to stdout: No space left on device (os error 28)\n",
            "{args:?}"
        );
    }
}

/// Defect 1: a reader that leaves (`| head`) ends output quietly.
#[test]
fn a_broken_pipe_ends_quietly() {
    let dir = scratch("cli-pipe");
    let report = file(
        &dir,
        "r.json",
        sample_report("getppid").to_json_pretty().as_bytes(),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(["show", report.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before xvmm writes
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// Defect 1 and "never lose a measurement": the JSON file is written even
/// when the table cannot be printed; `--json -` on a closed stdout saves the
/// JSON to a fallback file and fails.
#[test]
fn results_survive_a_failing_stdout() {
    let dir = scratch("cli-survive");
    let report = file(
        &dir,
        "r.json",
        sample_report("getppid").to_json_pretty().as_bytes(),
    );
    let json = dir.join("cmp.json");
    let r = report.to_str().unwrap();
    let out = xvmm_to(
        dev_full(),
        &["compare", r, r, "--json", json.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let cmp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(cmp["schema"], "xvmm-comparison");

    let out = Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(["compare", r, r, "--json", "-"])
        .current_dir(&dir)
        .stdout(dev_full())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or("");
    let saved = last
        .split("they were saved to ")
        .nth(1)
        .unwrap_or_else(|| panic!("no fallback named: {err}"));
    let text = std::fs::read_to_string(saved).unwrap();
    assert!(text.contains("xvmm-comparison"), "{text}");
    std::fs::remove_file(saved).unwrap();
}

/// Defect 3: an unwritable `--json` is found before anything is measured.
#[test]
fn an_unwritable_json_destination_fails_before_measuring() {
    let start = Instant::now();
    let out = xvmm_to(
        Stdio::piped(),
        &["--samples", "100000", "--json", "/nonexistent/dir/out.json"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("xvmm: io: cannot write /nonexistent/dir/out.json: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(stdout(&out), "", "nothing was measured");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for bad in ["/", "/dev/zero/x"] {
        let out = xvmm_to(Stdio::piped(), &["machine", "--json", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}: {}", stderr(&out));
    }
}

/// Defect 4: names and messages from result files reach the terminal escaped.
#[test]
fn text_from_a_report_is_escaped() {
    let dir = scratch("cli-escape");
    let mut r = sample_report("pf\x1b[2J\nforged: line");
    r.notes.push("\x1b]0;owned\x07 note\r".into());
    r.tool = "xperf\u{202e}".into();
    let report = file(&dir, "evil.json", r.to_json_pretty().as_bytes());
    let out = xvmm_to(Stdio::piped(), &["show", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains('\x1b') && !text.contains('\r') && !text.contains('\x07'));
    assert!(!text.contains('\u{202e}'));
    assert!(text.contains("pf\\x1b[2J\\nforged: line"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("forged")), "{text}");
}

/// Defect 4: the guest's console is escaped too.
#[test]
fn the_guest_console_is_escaped() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("cli-console");
    let kernel = file(
        &dir,
        "bzImage",
        &bzimage(&linux64_print_then_reset(b"hi \x1b[2J\x1b]0;t\x07 there\n")),
    );
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--initrd",
        placeholder_initrd().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi \\x1b[2J\\x1b]0;t\\x07 there\n");
}

/// Defect 5: options that do not apply to a subcommand are usage errors.
#[test]
fn options_that_do_not_apply_are_usage_errors() {
    for args in [
        &["--samples", "5", "machine"][..],
        &["--trace", "show", "x.json"],
        &["--json", "x", "kernel", "hooks", "v"],
        &["--kernel", "k", "compare", "a", "b"],
    ] {
        let out = xvmm(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("xvmm: usage: "), "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
    }
}

/// Defect 6: clap's errors are shown whole; `xvmm kernel` shows its help.
#[test]
fn usage_errors_are_shown_whole() {
    let out = xvmm(&["--samples"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("xvmm: usage: a value is required for '--samples <SAMPLES>'"),
        "{err}"
    );
    assert!(err.contains("try '--help'"), "{err}");
    let out = xvmm(&["--sample", "3"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tip: a similar argument exists: '--samples'"),
        "{err}"
    );
    assert!(err.contains("Usage: xvmm"), "{err}");
    let out = xvmm(&["kernel"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("build") && err.contains("hooks"), "{err}");
    assert!(err.contains("Usage: xvmm kernel"), "{err}");
}

/// Defect 7: `--samples` is checked with `--kernel` before anything boots.
#[test]
fn sample_counts_for_linux_are_checked_up_front() {
    for bad in ["0", "1000001"] {
        let out = xvmm_to(
            Stdio::piped(),
            &["--kernel", "/nonexistent/k", "--samples", bad],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("out of range: xperf takes 1 to 1000000"),
            "{err}"
        );
    }
}

/// Defect 7: a guest cannot choose an exit status that means timeout (124),
/// usage (2) or a signal: guest status N exits 64 + N, at most 123.
#[test]
fn guest_exit_statuses_cannot_pose_as_xvmm_statuses() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("cli-guest-status");
    for (status, expected) in [(124u8, 123), (2, 66), (59, 123)] {
        let kernel = file(
            &dir,
            &format!("bz{status}"),
            &bzimage(&linux64_echo_and_exit(status)),
        );
        let out = xvmm(&[
            "--kernel",
            kernel.to_str().unwrap(),
            "--initrd",
            placeholder_initrd().to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(expected), "{}", stderr(&out));
        assert!(
            stderr(&out).ends_with(&format!("xvmm: guest: exited with status {status}\n")),
            "{}",
            stderr(&out)
        );
    }
}

/// Defect 7: `XVMM_XPERF` naming a directory says so.
#[test]
fn xvmm_xperf_naming_a_directory_says_so() {
    let dir = scratch("cli-xperf-dir");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(0)));
    let out = xvmm_env(
        &["--kernel", kernel.to_str().unwrap()],
        &[("XVMM_XPERF", dir.to_str().unwrap())],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.ends_with(": not a regular file\n"), "{err}");
    assert!(err.contains("XVMM_XPERF="), "{err}");
}

/// A guest line cut short by the end of the VM is ended with a newline, so
/// that what xvmm prints next (the JSON with `--json -`) starts on its own line.
#[test]
fn a_cut_console_line_is_ended() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("cli-cut-line");
    let kernel = file(
        &dir,
        "bzImage",
        &bzimage(&linux64_print_then_reset(b"no newline")),
    );
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--initrd",
        placeholder_initrd().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "no newline\n");
}

/// Issue 20, item 5: a fallback file never follows a planted link and never
/// removes what it did not make. xperf wrote its fallback through
/// `write_atomically` to `$TMPDIR/xperf-results-<pid>.json`, following a
/// link planted there to a file beside it (a root xperf replaced another
/// user's file); xvmm removed a file planted at its fallback name. The shell
/// plants at the names the old code used (its `$$` is the pid `exec`
/// keeps); the working directory, /proc, takes no file, so the fallback
/// goes to the temporary directory.
#[test]
fn fallback_files_leave_planted_files_alone() {
    let dir = scratch("cli-planted");
    let victim = file(&dir, "victim", b"precious");
    let report = file(
        &dir,
        "r.json",
        sample_report("getppid").to_json_pretty().as_bytes(),
    );
    let r = report.to_str().unwrap();
    let plant = r#"ln -s victim "$TMPDIR/xperf-results-$$.json" || exit 99
        s=$(date +%s)
        for t in $s $((s + 1)) $((s + 2)); do echo planted > "$TMPDIR/xvmm-results-$t-$$.json"; done
        exec "$@""#;
    let xperf = xperf_binary();
    let xperf_args = ["--json", "/dev/full", "--samples", "2", "--warmup", "0"];
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "xperf-results-",
            [&[xperf.to_str().unwrap()][..], &xperf_args].concat(),
        ),
        (
            "xvmm-results-",
            vec![
                env!("CARGO_BIN_EXE_xvmm"),
                "compare",
                r,
                r,
                "--json",
                "/dev/full",
            ],
        ),
    ];
    for (prefix, argv) in runs {
        let out = Command::new("sh")
            .args(["-c", plant, "sh"])
            .args(&argv)
            .current_dir("/proc")
            .env("TMPDIR", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{prefix}: {err}");
        let victim_now = std::fs::read_to_string(&victim).unwrap();
        assert!(victim_now == "precious", "{prefix}: victim replaced: {err}");
        let planted: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter(|e| e.file_type().unwrap().is_file() && e.path() != report)
            .collect();
        assert_eq!(planted.len(), 3, "{prefix}: planted files removed: {err}");
        for p in planted {
            assert_eq!(std::fs::read_to_string(p.path()).unwrap(), "planted\n");
            std::fs::remove_file(p.path()).unwrap();
        }
        let saved = Path::new(err.trim_end().split("saved to ").nth(1).unwrap_or_else(|| {
            panic!("{prefix}: no fallback named: {err}");
        }));
        let private = saved.parent().unwrap();
        assert_eq!(private.parent(), Some(dir.as_path()), "{err}");
        let name = private.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(prefix), "{err}");
        let mode = std::fs::metadata(private).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{err}");
        let json = std::fs::read_to_string(saved).unwrap();
        serde_json::from_str::<serde_json::Value>(&json).unwrap();
        std::fs::remove_dir_all(private).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 20, item 5: `--json /dev/stdout` into a pipe leads, through
/// `/proc/self/fd/1`, to `pipe:[N]`, which is no path: it was refused as a
/// dangling link. It is opened (by the kernel's lookup) before measuring.
#[test]
fn json_to_dev_stdout_into_a_pipe_is_written() {
    let out = xvmm_to(Stdio::piped(), &["machine", "--json", "/dev/stdout"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let machine: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(machine["logical_cpus"].as_u64() > Some(0), "{machine}");
}

/// Issue 20, item 8: with stdout closed (`>&-`) every printing command
/// ended 0 without a word. It fails as for /dev/full, in one line, and a
/// result file opened meanwhile never takes descriptor 1 (the tables would
/// land in it): the comparison file holds the JSON alone.
#[test]
fn a_closed_stdout_fails_and_keeps_result_files_whole() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("cli-closed");
    let report = file(
        &dir,
        "r.json",
        sample_report("getppid").to_json_pretty().as_bytes(),
    );
    let r = report.to_str().unwrap();
    let json = dir.join("cmp.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvmm"));
    cmd.args(["compare", r, r, "--json", json.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: close(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(1);
            Ok(())
        })
    };
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "xvmm: io: cannot write to stdout: Bad file descriptor (os error 9)\n"
    );
    let cmp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(cmp["schema"], "xvmm-comparison");
}
