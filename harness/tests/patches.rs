//! The kernel patch series as a kernel maintainer would take them: every
//! patch of every series (patches/linux-6.12, patches/linux-6.1) applies in
//! order to Debian's source of its release (the cached tree a patched build
//! compiles, `kernel::patched_source`) and is clean under that tree's
//! `scripts/checkpatch.pl --strict`, with its SPDX check running (python3-ply
//! and python3-git, installed by harness/setup.sh). A patch with a style
//! fault fails the same check.
//!
//! That each patch builds on its own is checked by hand (builds of every
//! prefix of the series take tens of minutes); see each series' README.

use std::path::Path;
use std::process::Command;
use xvmm::progress::Silent;
use xvmm_kernel::{self as kernel, LinuxVersion};

/// checkpatch's verdict on `patch`, run from `tree`: (clean, its output).
fn checkpatch(tree: &Path, patch: &Path) -> (bool, String) {
    let out = Command::new("perl")
        .arg("scripts/checkpatch.pl")
        .args(["--strict", "--no-color", "--no-summary-file"])
        .arg(patch)
        .current_dir(tree)
        .output()
        .expect("run perl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The SPDX check runs a Python helper; without its modules checkpatch
    // prints the traceback and goes on as if clean.
    let clean = out.status.success()
        && text.contains("total: 0 errors, 0 warnings, 0 checks")
        && !text.contains("ModuleNotFoundError");
    (clean, text)
}

fn skipped() -> bool {
    xvmm_harness::skipped("kernel patch style test")
}

#[test]
fn every_patch_applies_and_is_checkpatch_strict_clean() {
    if skipped() {
        return;
    }
    for version in LinuxVersion::ALL {
        let tree = kernel::patched_source(version, None, &Silent)
            .unwrap_or_else(|e| panic!("{}: {e}", version.name()));
        let series = kernel::series(version).unwrap();
        assert!(series.len() >= 4, "{}: {series:?}", version.name());
        for patch in &series {
            let (clean, text) = checkpatch(&tree, patch);
            assert!(clean, "{}: {}\n{text}", version.name(), patch.display());
            println!("{}: {} clean", version.name(), patch.display());
        }
    }
}

/// The same check on a patch with a style fault (trailing whitespace, a
/// missing Signed-off-by) says so.
#[test]
fn a_patch_with_a_style_fault_is_not_clean() {
    if skipped() {
        return;
    }
    let tree = kernel::patched_source(LinuxVersion::V6_12, None, &Silent).unwrap();
    let bad = std::env::temp_dir().join(format!("xvmm-bad-{}.patch", std::process::id()));
    std::fs::write(
        &bad,
        "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\nSubject: [PATCH] x86: bad\n\n\
         A commit message.\n---\n arch/x86/kernel/xperf.c | 1 +\n\n\
         diff --git a/arch/x86/kernel/xperf.c b/arch/x86/kernel/xperf.c\n\
         --- a/arch/x86/kernel/xperf.c\n+++ b/arch/x86/kernel/xperf.c\n\
         @@ -1,1 +1,2 @@\n // SPDX-License-Identifier: GPL-2.0\n+int x = 1; \n",
    )
    .unwrap();
    let (clean, text) = checkpatch(&tree, &bad);
    let _ = std::fs::remove_file(&bad);
    assert!(!clean, "{text}");
    assert!(text.contains("trailing whitespace"), "{text}");
}
