//! `xperf workload` on this machine's own kernel, as a user runs it: its
//! system call counts against strace's (`strace -f -c`, an independent
//! tracer using ptrace, not tracefs) on the same command; the command's
//! status, a timeout and signals passed through with the record kept; bad
//! input in one line; the host's tracing state as found after each run.
//! Needs root and tracefs (skipped with a message otherwise) and strace
//! (harness/setup.sh installs it). Each test runs in a private mount
//! namespace where tracefs starts unmounted, as on a fresh machine.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use xvmm_results::schema::workload::{Workload, FAMILY_OFF_CPU, FAMILY_SYSCALL};
use xvmm_results::Report;

#[path = "support/host_tracing.rs"]
mod host_tracing;
use host_tracing::{state, usable};

/// One run at a time: they share the host's tracing state.
static SERIAL: Mutex<()> = Mutex::new(());

/// A command whose system calls are the same from run to run: a shell,
/// two programs it forks and execs, a file read, a directory listed.
const SHELL: &str = "cat /etc/hostname > /dev/null; ls / > /dev/null";

fn temp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xperf-workload-{tag}-{}", std::process::id()))
}

/// `xperf workload --json FILE -- command`: its output and its report.
fn workload(tag: &str, options: &[&str], command: &[&str]) -> (Output, Option<Workload>) {
    let json = temp(tag);
    let out = Command::new(env!("CARGO_BIN_EXE_xperf"))
        .arg("workload")
        .args(options)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .output()
        .expect("xperf runs");
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| Report::from_json(&t).ok())
        .and_then(|r| r.workload);
    let _ = std::fs::remove_file(&json);
    (out, report)
}

/// strace's count of each system call of `command` and its children.
fn strace_counts(command: &[&str]) -> BTreeMap<String, u64> {
    let file = temp("strace");
    let status = Command::new("strace")
        .args(["-f", "-c", "-o"])
        .arg(&file)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("strace runs (harness/setup.sh installs it)");
    assert!(status.success(), "strace {command:?}: {status}");
    let text = std::fs::read_to_string(&file).expect("strace's summary");
    let _ = std::fs::remove_file(&file);
    // "% time seconds usecs/call calls [errors] syscall": calls is the
    // fourth column; the errors column is empty when there were none.
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.last()?;
            let calls = f.get(3)?.parse().ok()?;
            (f.first()?.parse::<f64>().is_ok() && name != "total")
                .then(|| (name.to_string(), calls))
        })
        .collect()
}

/// The calls that returned, by name: what strace counts (it leaves out
/// `exit_group`, which never returns).
fn returned(w: &Workload) -> BTreeMap<String, u64> {
    w.family(FAMILY_SYSCALL)
        .filter(|r| r.length.count > 0)
        .map(|r| (r.name.clone(), r.length.count))
        .collect()
}

/// Each call whose two counts differ: (name, xperf's, strace's).
fn differences(
    xperf: &BTreeMap<String, u64>,
    strace: &BTreeMap<String, u64>,
) -> Vec<(String, Option<u64>, Option<u64>)> {
    let names: std::collections::BTreeSet<&String> = xperf.keys().chain(strace.keys()).collect();
    names
        .into_iter()
        .filter(|n| xperf.get(*n) != strace.get(*n))
        .map(|n| (n.clone(), xperf.get(n).copied(), strace.get(n).copied()))
        .collect()
}

#[test]
fn system_call_counts_agree_with_strace_exactly() {
    if !usable("xperf workload") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let command = ["sh", "-c", SHELL];
    let before = state();
    let (out, w) = workload("strace", &[], &command);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(state(), before, "the tracing state changed");
    let w = w.expect("the report");
    let strace = strace_counts(&command);
    assert!(strace.len() > 10, "{strace:?}");
    let xperf = returned(&w);
    assert_eq!(
        differences(&xperf, &strace),
        [],
        "xperf {xperf:?}\nstrace {strace:?}"
    );
    // rt_sigreturn's exit carries the number -1: it must still count.
    assert_eq!(xperf.get("execve"), Some(&3), "sh, cat, ls");
    assert_eq!(w.lost_events, 0);
    assert_eq!(w.unpaired.cut_by_loss, 0);
    // The control: another command's strace counts disagree with this
    // report, so the comparison can fail on real data.
    let other = strace_counts(&["sh", "-c", "ls / > /dev/null"]);
    assert!(!differences(&xperf, &other).is_empty());
    // Three tasks (sh and the two it forked), each ending in exit_group.
    assert_eq!(w.tasks, 3);
    let exit_group = w.row(FAMILY_SYSCALL, "exit_group").expect("exit_group");
    assert_eq!((exit_group.untimed, exit_group.length.count), (3, 0));
}

#[test]
fn the_commands_status_and_time_off_cpu_are_reported() {
    if !usable("xperf workload") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = state();
    let (out, w) = workload("status", &[], &["sh", "-c", "sleep 0.2; exit 3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("xperf: the command: exit 3"), "{stderr}");
    assert_eq!(state(), before);
    let w = w.expect("the report, written before xperf failed");
    assert_eq!(w.ended.code, Some(3));
    // The sleep: 0.2 s off CPU in one of the tasks, within the wall time.
    let tsc_khz = xvmm_host::tsc::kernel_khz().unwrap_or(0);
    let off = w.family_total(FAMILY_OFF_CPU);
    assert!(off <= w.wall_ticks * u64::from(w.tasks > 0) * w.tasks);
    if tsc_khz > 0 {
        let ms = |t: u64| t as f64 / tsc_khz as f64;
        assert!(ms(w.wall_ticks) >= 200.0, "wall {} ms", ms(w.wall_ticks));
        assert!(ms(off) >= 190.0, "off CPU {} ms", ms(off));
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("workload: sh -c sleep 0.2; exit 3"));
}

#[test]
fn a_timeout_or_a_signal_stops_the_command_and_keeps_the_record() {
    if !usable("xperf workload") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = state();
    let started = Instant::now();
    let (out, w) = workload("timeout", &["--timeout", "1"], &["sleep", "30"]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL));
    let w = w.expect("the report of what was recorded");
    assert_eq!(w.ended.stopped_by.as_deref(), Some("timeout after 1 s"));
    assert_eq!(w.ended.signal, Some(libc::SIGKILL));
    // The sleep's call returns (interrupted) before SIGKILL ends the task:
    // one call, about the second the timeout allowed.
    let sleep = w.row(FAMILY_SYSCALL, "clock_nanosleep").expect("the sleep");
    assert_eq!(sleep.length.count, 1);
    if let Some(khz) = xvmm_host::tsc::kernel_khz() {
        let ms = sleep.total_ticks as f64 / khz as f64;
        assert!((900.0..5000.0).contains(&ms), "{ms} ms");
    }
    assert_eq!(state(), before);
    // A SIGINT to xperf alone reaches the command, which ends by it.
    let (status, w) = interrupted("signal", &["sleep", "30"], 1);
    assert_eq!(status, Some(128 + libc::SIGINT));
    assert_eq!(w.ended.stopped_by, Some(format!("signal {}", libc::SIGINT)));
    assert_eq!(w.ended.signal, Some(libc::SIGINT));
    // A command that ignores it: the second SIGINT kills every task of it,
    // and what was recorded is still reported.
    let (status, w) = interrupted("second", &["sh", "-c", "trap '' INT; sleep 30"], 2);
    assert_eq!(status, Some(128 + libc::SIGKILL));
    assert_eq!(w.ended.stopped_by, Some(format!("signal {}", libc::SIGINT)));
    assert_eq!(w.ended.signal, Some(libc::SIGKILL));
    assert!(w.row(FAMILY_SYSCALL, "execve").is_some());
    assert_eq!(state(), before);
}

/// `xperf workload -- command`, sent `sigints` SIGINTs 300 ms apart once
/// it runs: xperf's exit code and its report. xperf starts with SIGINT at
/// its default, as from a terminal: the suite may run as a background job,
/// whose SIGINT is ignored, and xperf hands its command the state it
/// started with (an ignored SIGINT would stay ignored in the command).
fn interrupted(tag: &str, command: &[&str], sigints: usize) -> (Option<i32>, Workload) {
    let json = temp(tag);
    let mut xperf = Command::new(env!("CARGO_BIN_EXE_xperf"));
    xperf
        .args(["workload", "--json"])
        .arg(&json)
        .arg("--")
        .args(command)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: signal is async-signal-safe, called between fork and exec.
    unsafe {
        xperf.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = xperf.spawn().expect("xperf starts");
    std::thread::sleep(Duration::from_millis(500));
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits");
    for _ in 0..sigints {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(300));
    }
    let status = child.wait().expect("xperf ends");
    let report = std::fs::read_to_string(&json).expect("the report");
    let _ = std::fs::remove_file(&json);
    let w = Report::from_json(&report).unwrap().workload.unwrap();
    (status.code(), w)
}

#[test]
fn bad_input_is_one_line_and_changes_nothing() {
    if !usable("xperf workload") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = state();
    for (command, code, needle) in [
        (&["xperf-no-such-command"][..], 1, "not found in PATH"),
        (&["/etc/passwd"][..], 1, "Permission denied"),
        (&[][..], 2, "needs a command"),
    ] {
        let (out, w) = workload("bad", &[], command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{command:?}: {stderr}");
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("xperf: "))
            .collect();
        assert_eq!(lines.len(), 1, "{command:?}: {stderr}");
        assert!(lines[0].contains(needle), "{command:?}: {stderr}");
        assert!(w.is_none(), "no report for a command that never ran");
        assert_eq!(state(), before, "{command:?}");
    }
}
