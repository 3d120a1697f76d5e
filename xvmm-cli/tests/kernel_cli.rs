//! The `xvmm kernel build` and `xvmm initramfs` command lines: what a user
//! sees when the source or a build tool is missing, and the initramfs
//! writer. Real kernel builds are tested with the harness
//! (`harness/tests/kernels.rs`).

use std::process::Command;

fn xvmm_with_path(args: &[&str], path: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvmm"));
    cmd.args(args);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.output().expect("xvmm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn xvmm(args: &[&str]) -> (i32, String, String) {
    xvmm_with_path(args, None)
}

#[test]
fn kernel_build_with_a_bad_source_fails_with_one_line() {
    let (code, stdout, stderr) = xvmm(&["kernel", "build", "--source", "/nonexistent/linux"]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("xvmm: ")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("xvmm: build: kernel source /nonexistent/linux:"),
        "{stderr}"
    );
}

#[test]
fn initramfs_command_writes_a_newc_archive() {
    let dir = std::env::temp_dir().join(format!("xvmm-initramfs-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let init = dir.join("init");
    std::fs::write(&init, b"#!/bin/sh\n").unwrap();
    let out = dir.join("out.cpio");
    let (code, _, stderr) = xvmm(&[
        "initramfs",
        "-o",
        out.to_str().unwrap(),
        &format!("/init={}", init.display()),
        &format!("/etc/x={}", init.display()),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let bytes = std::fs::read(&out).unwrap();
    assert!(bytes.starts_with(b"070701"));
    assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
    assert!(bytes.windows(6).any(|w| w == b"etc/x\0"));
    let (code, _, stderr) = xvmm(&["initramfs", "-o", out.to_str().unwrap(), "/init"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("GUEST_PATH=HOST_FILE"), "{stderr}");
}

/// xvmm installs nothing: with no build tool on PATH, `kernel build` fails at
/// once with one line naming the missing tools and how to install them.
#[test]
fn kernel_build_without_tools_names_them_and_the_installer() {
    let empty = std::env::temp_dir().join(format!("xvmm-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let cache = empty.join("cache");
    let (code, stdout, stderr) = xvmm_with_path(
        &["kernel", "build", "--cache", cache.to_str().unwrap()],
        Some(empty.to_str().unwrap()),
    );
    let cache_created = cache.exists();
    std::fs::remove_dir_all(&empty).unwrap();
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line = lines[0];
    assert!(
        line.starts_with("xvmm: build: missing kernel build tools: make (make), gcc (gcc)"),
        "{line}"
    );
    assert!(
        line.contains(
            "; install them with harness/setup.sh or apt-get install \
             make gcc flex bison bc cpio patch xz-utils perl"
        ),
        "{line}"
    );
    assert!(!cache_created, "nothing may be written before the check");
}
