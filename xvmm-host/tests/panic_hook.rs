//! The panic hook of xvmm and xperf (`undo::install_panic_hook`) undoes
//! what the process changed on the host before it dies: the release profile
//! has `panic = "abort"`, so no destructor would. A child process (this test
//! binary, running [`panic_scenario`]) makes a tracefs instance, changes a
//! value and mounts tracefs, then panics without running a destructor; the
//! parent checks what is left. Without the hook (the control) everything is
//! left, and the next start's recovery must undo it instead.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xvmm_host::host_state::journal::{self, Change};
use xvmm_host::host_state::mounts::{mount_table, FsKind, FsUse};
use xvmm_host::host_state::namespace::enter_private_mount_namespace;
use xvmm_host::host_state::snapshot::instance_names;
use xvmm_host::host_state::undo;

const SCENARIO: &str = "XVMM_PANIC_SCENARIO";
const WITH_HOOK: &str = "XVMM_PANIC_WITH_HOOK";

/// Only as the child: changes the host, then panics.
#[test]
fn panic_scenario() {
    let Some(value) = std::env::var_os(SCENARIO).map(PathBuf::from) else {
        return;
    };
    if std::env::var_os(WITH_HOOK).is_some() {
        undo::install_panic_hook(|line| {
            let _ = writeln!(std::io::stderr(), "{line}");
        });
    }
    let tracefs = FsUse::acquire(FsKind::Tracefs, None).unwrap();
    let name = format!("xvmm-{}-panictest", std::process::id());
    journal::record(Change::Instance { name: name.clone() }).unwrap();
    std::fs::create_dir(tracefs.root().join("instances").join(&name)).unwrap();
    journal::record(Change::Value {
        path: value.clone(),
        before: "before".into(),
    })
    .unwrap();
    std::fs::write(&value, "after").unwrap();
    // As with panic = "abort": no destructor runs.
    std::mem::forget(tracefs);
    panic!("the scenario panics with the host changed");
}

fn tracefs_mounted_here() -> bool {
    mount_table().unwrap().iter().any(|m| m.fstype == "tracefs")
}

/// Runs the scenario in a child; returns its pid and the instance name.
fn run_scenario(value: &Path, hook: bool) -> (u32, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "panic_scenario",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(SCENARIO, value)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if hook {
        cmd.env(WITH_HOOK, "1");
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the scenario panics: {stderr}");
    assert!(stderr.contains("the scenario panics"), "{stderr}");
    (pid, format!("xvmm-{pid}-panictest"))
}

fn has_instance(name: &str) -> bool {
    instance_names().unwrap().iter().any(|n| n == name)
}

#[test]
fn a_panic_undoes_what_the_process_changed_and_without_the_hook_recovery_does() {
    if std::env::var_os(SCENARIO).is_some() {
        return;
    }
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } != 0 {
        let why = "the panic hook test needs root (tracefs)";
        eprintln!("{}", xvmm_host::skip::record(why));
        return;
    }
    enter_private_mount_namespace().unwrap();
    let value = std::env::temp_dir().join(format!("xvmm-panic-value-{}", std::process::id()));
    std::fs::write(&value, "before").unwrap();
    let journal_of = |pid: u32| journal::dir().join(format!("journal-{pid}.json"));

    let (pid, name) = run_scenario(&value, true);
    assert!(!has_instance(&name), "the hook removed the instance");
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "before");
    assert!(!journal_of(pid).exists(), "the hook cleared its journal");
    assert!(!tracefs_mounted_here(), "the hook unmounted tracefs");

    // The control: no hook, everything is left ...
    let (pid, name) = run_scenario(&value, false);
    assert!(has_instance(&name));
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "after");
    assert!(journal_of(pid).exists());
    assert!(tracefs_mounted_here());
    // ... until the next start's recovery.
    let recovery = undo::recover_orphans();
    assert!(recovery.failed.is_empty(), "{recovery:?}");
    assert!(!has_instance(&name));
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "before");
    assert!(!journal_of(pid).exists());
    assert!(!tracefs_mounted_here());
    std::fs::remove_file(&value).unwrap();
}
