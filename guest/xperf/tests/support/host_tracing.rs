//! What the tests of xperf's tracing commands share: whether this machine
//! can run them (root, tracefs), each in a private mount namespace where
//! tracefs starts unmounted, and the host's tracing state to compare
//! before and after a run.

use xvmm_host::host_state::namespace::enter_private_mount_namespace;
use xvmm_host::host_state::snapshot::snapshot;

/// Root and tracefs, in a private mount namespace of this test's thread
/// (the xperf it starts inherits it) where tracefs is not mounted; else a
/// skip recorded for `what`.
pub fn usable(what: &str) -> bool {
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    let tracefs = std::fs::read_to_string("/proc/filesystems")
        .is_ok_and(|f| f.lines().any(|l| l.ends_with("\ttracefs")));
    if !root || !tracefs {
        let why = format!("{what} tests need root and a kernel with tracefs");
        eprintln!("{}", xvmm_host::skip::record(&why));
        return false;
    }
    enter_private_mount_namespace().expect("root makes a private mount namespace");
    true
}

/// The snapshot, without instances other tools (xvmm --trace) may create
/// meanwhile.
pub fn state() -> Vec<(String, String)> {
    snapshot(None)
        .into_iter()
        .map(|(k, v)| {
            if k == "instances" {
                let ours: Vec<&str> = v.split(' ').filter(|i| i.starts_with("xperf")).collect();
                (k, ours.join(" "))
            } else {
                (k, v)
            }
        })
        .collect()
}
