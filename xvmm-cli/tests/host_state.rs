//! No way out leaves the host changed for good (README "Testing"): a traced
//! xvmm or an `xperf probes` killed with SIGKILL leaves its tracefs instance,
//! its journal and its tracefs mount, and the next start of either tool
//! undoes them, says so in one line each, and the host's tracing state is
//! then what it was before. Each test runs in a private mount namespace
//! where tracefs starts unmounted (as on a freshly booted machine), so the
//! tools mount it themselves, and nothing they mount reaches the host.

mod vm_support;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vm_support::*;
use xvmm_host::host_state::namespace::enter_private_mount_namespace;
use xvmm_host::host_state::{journal, mounts, snapshot};

/// One test at a time: each kills a tool and checks what the next start of
/// a tool restores, which would restore the other test's leftovers too.
static SERIAL: Mutex<()> = Mutex::new(());

/// Root, /dev/kvm and a private mount namespace for this test's thread
/// (the tools it starts inherit it).
fn prepared() -> Option<std::sync::MutexGuard<'static, ()>> {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } != 0 || !have_kvm() {
        let why = "killed-run recovery needs root and /dev/kvm";
        eprintln!("{}", xvmm_host::skip::record(why));
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    enter_private_mount_namespace().expect("root makes a private mount namespace");
    Some(serial)
}

fn fixture_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvmm-host-state-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fixture directory with a guest that spins forever and an initrd.
fn spin_fixture(tag: &str) -> PathBuf {
    let f = fixture_dir(tag);
    std::fs::write(f.join("spin"), bzimage(SPIN)).unwrap();
    std::fs::write(f.join("initrd"), b"text").unwrap();
    f
}

/// xvmm running the spinning guest of `f` until its timeout (124), traced
/// or not; stdin, stdout and stderr are the caller's to set.
fn spin(f: &std::path::Path, timeout: &str, trace: bool) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xvmm"));
    c.arg("--kernel")
        .arg(f.join("spin"))
        .arg("--initrd")
        .arg(f.join("initrd"))
        .args(["--timeout", timeout])
        .stdin(Stdio::null());
    if trace {
        c.arg("--trace");
    }
    c
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn has_instance(name: &str) -> bool {
    snapshot::instance_names()
        .expect("root reads tracefs privately")
        .iter()
        .any(|n| n == name)
}

fn tracefs_mounted_here() -> bool {
    mounts::mount_table()
        .unwrap()
        .iter()
        .any(|m| m.fstype == "tracefs")
}

fn journal_of(pid: u32) -> PathBuf {
    journal::dir().join(format!("journal-{pid}.json"))
}

/// The host's tracing state (read in a private namespace of its own).
fn state() -> Vec<(String, String)> {
    snapshot::snapshot(None)
}

/// Kills `child` with SIGKILL and reaps it; checks it left `instance`, its
/// journal and a tracefs mount in this namespace (else the test proves
/// nothing about recovery).
fn kill_and_check_leftovers(mut child: Child, instance: &str) -> u32 {
    let pid = child.id();
    // SAFETY: our own child, not reaped yet.
    unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGKILL) };
    child.wait().unwrap();
    assert!(
        has_instance(instance),
        "SIGKILL left no instance to recover"
    );
    assert!(journal_of(pid).is_file(), "no journal left by pid {pid}");
    assert!(tracefs_mounted_here(), "the killed run's mount is left");
    pid
}

/// What the next start must have said and restored.
fn check_recovered(
    stderr: &str,
    tool: &str,
    pid: u32,
    instance: &str,
    before: &[(String, String)],
) {
    let note = stderr
        .lines()
        .find(|l| l.contains(&format!("(pid {pid}, no longer running)")))
        .unwrap_or_else(|| panic!("no recovery note for pid {pid}: {stderr}"));
    assert!(
        note.starts_with(&format!("{tool}: note: restored what ")),
        "{note}"
    );
    assert!(
        note.contains(&format!("removed tracefs instance {instance}")),
        "{note}"
    );
    assert!(
        note.contains("unmounted tracefs at /sys/kernel/tracing"),
        "the killed run's mount is named in its line: {stderr}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.contains(": note: ")).count(),
        1,
        "one line for the killed process: {stderr}"
    );
    assert!(!has_instance(instance));
    assert!(!journal_of(pid).exists());
    assert!(!tracefs_mounted_here());
    let diff = snapshot::differences(before, &state());
    assert!(diff.is_empty(), "host state not as before: {diff:?}");
}

/// Waits for `child` to make `instance`, kills it, starts xvmm again (a
/// short untraced run, which ends at its timeout, 124) and checks that it
/// undid what the killed run left; returns that start's stderr.
fn kill_then_start_again(
    child: Child,
    instance: &str,
    f: &std::path::Path,
    before: &[(String, String)],
) -> String {
    wait_for("the run's instance", || has_instance(instance));
    let pid = kill_and_check_leftovers(child, instance);
    let out = spin(f, "1", false).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    check_recovered(&stderr, "xvmm", pid, instance, before);
    stderr
}

#[test]
fn a_killed_traced_xvmm_is_undone_by_the_next_start() {
    let Some(_serial) = prepared() else { return };
    let f = spin_fixture("xvmm");
    let before = state();
    assert!(!tracefs_mounted_here(), "tracefs starts unmounted here");
    let child = spin(&f, "60", true)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let instance = format!("xvmm-{}", child.id());
    let stderr = kill_then_start_again(child, &instance, &f, &before);
    assert!(stderr.contains("restored what xvmm (pid"), "{stderr}");
    std::fs::remove_dir_all(&f).unwrap();
}

/// xperf probes in tracepoint mode (this host's kernel has tracepoints; the
/// int3 mode with `kprobes-optimization` at 0 runs in the nested harness,
/// harness/tests/probes.rs), killed while it measures; the next start is
/// xvmm's, which undoes xperf's leftovers just as well.
#[test]
fn a_killed_xperf_probes_is_undone_by_the_next_start() {
    let Some(_serial) = prepared() else { return };
    let f = spin_fixture("xperf");
    let before = state();
    let child = Command::new(xperf_binary())
        .args(["probes", "--modes", "tracepoint", "--samples", "1000000"])
        .args(["--rounds", "1000", "--json"])
        .arg(f.join("r.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let instance = format!("xperf-{}", child.id());
    let stderr = kill_then_start_again(child, &instance, &f, &before);
    assert!(stderr.contains("restored what xperf (pid"), "{stderr}");
    std::fs::remove_dir_all(&f).unwrap();
}

/// Two traced runs at once, in two processes: the mount the first made is
/// the second's too, so the first to end must leave it (the second still
/// reads its instance through it), and the last one unmounts it.
#[test]
fn two_traced_runs_share_the_mount_and_the_last_unmounts_it() {
    let Some(_serial) = prepared() else { return };
    let f = spin_fixture("two");
    let before = state();
    let traced = || {
        spin(&f, "60", true)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = traced();
    let first_instance = format!("xvmm-{}", first.id());
    wait_for("the first run's instance", || has_instance(&first_instance));
    let second = traced();
    let second_instance = format!("xvmm-{}", second.id());
    wait_for("the second run's instance", || {
        has_instance(&second_instance)
    });
    let tracefs_mounts = || {
        mounts::mount_table()
            .unwrap()
            .iter()
            .filter(|m| m.fstype == "tracefs")
            .count()
    };
    assert_eq!(tracefs_mounts(), 1, "one mount, shared");
    let interrupt = |child: Child| {
        // SAFETY: our own child, not reaped yet.
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
        child.wait_with_output().unwrap()
    };
    let out = interrupt(first);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!has_instance(&first_instance));
    assert_eq!(tracefs_mounts(), 1, "the second run still uses the mount");
    assert!(has_instance(&second_instance));
    let out = interrupt(second);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        !stderr.contains("tracing:"),
        "the second run's trace broke: {stderr}"
    );
    assert_eq!(tracefs_mounts(), 0, "the last user unmounted it");
    let diff = snapshot::differences(&before, &state());
    assert!(diff.is_empty(), "host state not as before: {diff:?}");
    std::fs::remove_dir_all(&f).unwrap();
}

/// The mount a traced xvmm made, used meanwhile by another process that
/// holds no file open in it (this test, as `xperf probes` between two
/// modes): when xvmm ends, the mount must stay (an unmount would succeed,
/// no file being busy), and this process, its last user, unmounts it.
#[test]
fn a_mount_is_left_to_another_process_that_still_uses_it() {
    use xvmm_host::host_state::mounts::{FsKind, FsUse};
    let Some(_serial) = prepared() else { return };
    let f = spin_fixture("handover");
    let child = spin(&f, "60", true)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let instance = format!("xvmm-{}", child.id());
    wait_for("xvmm's instance", || has_instance(&instance));
    assert!(tracefs_mounted_here(), "xvmm mounted tracefs");
    let ours = FsUse::acquire(FsKind::Tracefs, None).expect("the mount xvmm made");
    // SAFETY: our own child, not reaped yet.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
    let status = child.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(130));
    assert!(
        tracefs_mounted_here() && ours.root().join("instances").is_dir(),
        "xvmm unmounted tracefs under a live user"
    );
    drop(ours);
    assert!(!tracefs_mounted_here(), "the last user unmounts it");
    std::fs::remove_dir_all(&f).unwrap();
}
