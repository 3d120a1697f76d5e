//! xperf as PID 1 of a container: a new PID and mount namespace, every
//! capability dropped, `no_new_privs`, a read-only root with one writable
//! directory (the DaemonSet's security context, built with util-linux's
//! `unshare` and `setpriv`). It must measure, write its files and exit; with
//! `--every` it must keep running and stop on SIGTERM, sent from outside the
//! namespace as a container runtime does, with status 0 and its OpenMetrics
//! file removed. Only the VMM's word (`xvmm_init=1`) makes it a VM's init,
//! and where that role cannot work it exits with the reason, never parks.
//! Needs root (namespaces and mounts); harness/tests/container.rs runs the
//! same through a real OCI runtime.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this test can make namespaces (root); records a skip otherwise.
fn usable() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let why = "xperf PID 1 tests need root for PID and mount namespaces";
        eprintln!("{}", xvmm_host::skip::record(why));
        return false;
    }
    true
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xperf-pid1-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `xperf ARGS` as PID 1 of new PID and mount namespaces: a fresh /proc,
/// `dir` writable, the rest of the root read-only, no capabilities.
fn as_container_pid1(dir: &Path, env: &[(&str, &str)], args: &[String]) -> Child {
    let script = format!(
        "mount -t proc proc /proc && mount --bind {d} {d} && mount -o remount,bind,ro / \
         && exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all \
         --no-new-privs \"$@\"",
        d = dir.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount", "--propagation", "private"])
        .args(["sh", "-c", &script, "sh", env!("CARGO_BIN_EXE_xperf")])
        .args(args)
        .env_remove("xvmm_init")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("unshare (util-linux) runs")
}

/// `characterize` writing `json` and `prom` at a small sample count, then
/// `extra`.
fn characterize_to(json: &Path, prom: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["characterize", "--samples", "200", "--json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(json.display().to_string());
    args.push("--openmetrics".into());
    args.push(prom.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Waits for `child` at most `limit`; kills it and fails if it is still
/// running (a parked PID 1 ends here).
fn wait_at_most(mut child: Child, limit: Duration, what: &str) -> (i32, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout);
            return (status.code().unwrap_or(-1), text);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?} (parked?); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The PID-1 process's host PID: the only child of `unshare`.
fn pid1_of(unshare: &Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = format!("/proc/{0}/task/{0}/children", unshare.id());
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(pid) = text.split_whitespace().next() {
            return pid.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "unshare started no child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Its PID inside its own namespace (`NSpid`'s last field).
fn namespace_pid(host_pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    line.split_whitespace().last().unwrap().to_string()
}

#[test]
fn as_a_containers_pid1_xperf_measures_writes_and_exits() {
    if !usable() {
        return;
    }
    let dir = scratch("once");
    let (json, prom) = (dir.join("x.json"), dir.join("x.prom"));
    let args = characterize_to(&json, &prom, &[]);
    let child = as_container_pid1(&dir, &[], &args);
    let (code, text) = wait_at_most(child, Duration::from_secs(120), "one characterize");
    assert_eq!(code, 0, "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["characterize"]["metrics"].as_array().unwrap().len() > 10);
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(metrics.contains("xperf_machine_info{"), "{metrics}");
    // The root was read-only: nothing but the two files was written.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_every_sigterm_to_pid1_stops_it_with_status_0_and_no_stale_file() {
    if !usable() {
        return;
    }
    let dir = scratch("every");
    let (json, prom) = (dir.join("x.json"), dir.join("x.prom"));
    let every = ["--every", "1h", "--node-name", "node-a.example"];
    let args = characterize_to(&json, &prom, &every);
    let child = as_container_pid1(&dir, &[], &args);
    let pid = pid1_of(&child);
    assert_eq!(namespace_pid(pid), "1", "xperf is its namespace's PID 1");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !prom.exists() {
        assert!(
            Instant::now() < deadline,
            "no {} after 120 s",
            prom.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["characterize"]["node_name"], "node-a.example");
    // From the parent namespace, as kubelet's runtime sends it: PID 1 gets
    // it only because xperf installed a handler.
    // SAFETY: kill with a PID we just read and a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let sent = Instant::now();
    let (code, text) = wait_at_most(child, Duration::from_secs(5), "SIGTERM to PID 1");
    assert_eq!(code, 0, "{text}");
    assert!(sent.elapsed() < Duration::from_secs(5));
    assert!(text.contains("stopped by SIGTERM; removed"), "{text}");
    assert!(!prom.exists(), "the OpenMetrics file outlived the run");
    assert!(json.exists(), "the JSON is a dated record and stays");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigterm_during_the_jitter_wait_stops_it_at_once() {
    if !usable() {
        return;
    }
    let dir = scratch("jitter");
    let prom = dir.join("x.prom");
    let json = dir.join("x.json");
    let args = characterize_to(&json, &prom, &["--every", "1h", "--jitter", "1h"]);
    let child = as_container_pid1(&dir, &[], &args);
    let pid = pid1_of(&child);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (code, text) = wait_at_most(child, Duration::from_secs(5), "SIGTERM while waiting");
    assert_eq!(code, 0, "{text}");
    assert!(!prom.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn told_it_is_a_vms_init_where_it_is_not_it_exits_with_the_reason() {
    if !usable() {
        return;
    }
    // The control: with the VMM's word, PID 1 takes the init role, whose
    // first step (mounting /proc) a container without capabilities refuses.
    // It must say so and exit, not park.
    let dir = scratch("init");
    let json = dir.join("x.json");
    let args = characterize_to(&json, &dir.join("x.prom"), &[]);
    let child = as_container_pid1(&dir, &[("xvmm_init", "1")], &args);
    let (code, text) = wait_at_most(child, Duration::from_secs(30), "a failed VM init");
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("xperf: "), "{text}");
    assert!(!json.exists(), "the init role measured anyway");
    std::fs::remove_dir_all(&dir).unwrap();
}
