//! Bad input to `xvmm --kernel`: each case must end with one line on stderr that
//! names the problem and a non-zero exit status, never a panic.

mod vm_support;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use vm_support::*;

/// Asserts a one-line `xvmm: <expected...>` error with exit status 1 (or `code`).
fn assert_error(out: &Output, code: i32, expected_start: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.starts_with(expected_start),
        "expected {expected_start:?}, got {err:?}"
    );
}

fn good_kernel(dir: &std::path::Path) -> String {
    file(dir, "bzImage", &bzimage(&linux64_echo_and_exit(0)))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn missing_kvm_device() {
    let dir = scratch("no-kvm");
    let out = xvmm_env(
        &["--kernel", &good_kernel(&dir)],
        &[("XVMM_KVM_DEVICE", "/nonexistent/kvm")],
    );
    assert_error(
        &out,
        1,
        "xvmm: kvm: /nonexistent/kvm does not exist: is the kvm module loaded?",
    );
}

#[test]
fn kvm_device_without_permission_for_an_unprivileged_user() {
    // Tests run as root, which file permissions do not stop. Run xvmm as user
    // "nobody" instead: /dev/kvm (crw------- root) then really refuses it.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || std::fs::metadata("/dev/kvm").is_err() {
        let why = "needs root and /dev/kvm to drop to an unprivileged user";
        eprintln!("{}", xvmm_host::skip::record(why));
        return;
    }
    let dir = scratch("kvm-eacces");
    let kernel = good_kernel(&dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvmm"));
    cmd.args(["--kernel", &kernel])
        .arg("--initrd")
        .arg(placeholder_initrd())
        .current_dir("/");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run xvmm as nobody");
    let mode = std::fs::metadata("/dev/kvm")
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
        .unwrap_or(0);
    if mode & 0o006 != 0 {
        let why = format!("/dev/kvm is world-accessible here ({mode:o})");
        eprintln!("{}", xvmm_host::skip::record(&why));
        return;
    }
    assert_error(&out, 1, "xvmm: kvm: no permission on /dev/kvm: ");
}

#[test]
fn kvm_device_that_even_root_cannot_open_read_write() {
    // sysfs refuses O_RDWR on a read-only attribute to everyone, root included.
    let dir = scratch("kvm-sysfs");
    let ro = "/sys/devices/system/cpu/possible";
    if std::fs::metadata(ro).is_err() {
        eprintln!("{}", xvmm_host::skip::record(&format!("{ro} missing")));
        return;
    }
    let out = xvmm_env(
        &["--kernel", &good_kernel(&dir)],
        &[("XVMM_KVM_DEVICE", ro)],
    );
    assert_error(&out, 1, &format!("xvmm: kvm: no permission on {ro}: "));
}

#[test]
fn kvm_device_that_is_not_kvm() {
    let dir = scratch("kvm-null");
    let out = xvmm_env(
        &["--kernel", &good_kernel(&dir)],
        &[("XVMM_KVM_DEVICE", "/dev/null")],
    );
    assert_error(&out, 1, "xvmm: kvm: /dev/null is not a KVM device");
}

#[test]
fn kernel_missing() {
    let out = xvmm(&["--kernel", "/nonexistent/bzImage"]);
    assert_error(&out, 1, "xvmm: kernel: /nonexistent/bzImage: no such file");
}

#[test]
fn kernel_is_a_directory() {
    let dir = scratch("kernel-dir");
    let out = xvmm(&["--kernel", dir.to_str().unwrap()]);
    assert_error(&out, 1, "xvmm: kernel: ");
    assert!(stderr(&out).ends_with(": not a regular file\n"));
}

#[test]
fn kernel_empty() {
    let dir = scratch("kernel-empty");
    let k = file(&dir, "empty", b"");
    let out = xvmm(&["--kernel", k.to_str().unwrap()]);
    assert_error(
        &out,
        1,
        &format!("xvmm: kernel: {}: file is empty", k.display()),
    );
}

#[test]
fn kernel_truncated() {
    let dir = scratch("kernel-trunc");
    let full = bzimage(&linux64_echo_and_exit(0));
    let k = file(&dir, "truncated", &full[..1000]);
    let out = xvmm(&["--kernel", k.to_str().unwrap()]);
    assert_error(
        &out,
        1,
        &format!(
            "xvmm: kernel: {}: truncated bzImage: the setup header describes {} bytes, the file has 1000",
            k.display(),
            full.len()
        ),
    );
}

#[test]
fn kernel_is_a_text_file() {
    let dir = scratch("kernel-text");
    let k = file(
        &dir,
        "README",
        b"This is not a kernel.\n".repeat(100).as_slice(),
    );
    let out = xvmm(&["--kernel", k.to_str().unwrap()]);
    assert_error(
        &out,
        1,
        &format!(
            "xvmm: kernel: {}: not a Linux kernel: neither an ELF vmlinux nor a bzImage",
            k.display()
        ),
    );
}

#[test]
fn kernel_elf_for_another_architecture() {
    let dir = scratch("kernel-arm");
    // aarch64 (EM_AARCH64 = 183): `b .` at the entry.
    let k = file(
        &dir,
        "Image.elf",
        &pvh_elf(183, 0x4008_0000, &[0x00, 0x00, 0x00, 0x14], true),
    );
    let out = xvmm(&["--kernel", k.to_str().unwrap()]);
    assert_error(
        &out,
        1,
        &format!(
            "xvmm: kernel: {}: ELF for AArch64 (e_machine 183), xvmm boots x86-64 kernels only",
            k.display()
        ),
    );
}

#[test]
fn kernel_elf_without_pvh_note() {
    let dir = scratch("kernel-nopvh");
    let k = file(
        &dir,
        "vmlinux",
        &pvh_elf(62, 0x100_0000, &pvh_echo_and_exit(0), false),
    );
    let out = xvmm(&["--kernel", k.to_str().unwrap()]);
    assert_error(
        &out,
        1,
        &format!(
            "xvmm: kernel: {}: ELF vmlinux has no PVH entry note",
            k.display()
        ),
    );
}

#[test]
fn initrd_missing() {
    let dir = scratch("initrd-missing");
    let out = xvmm(&[
        "--kernel",
        &good_kernel(&dir),
        "--initrd",
        "/nonexistent/initrd",
    ]);
    assert_error(&out, 1, "xvmm: initrd: /nonexistent/initrd: no such file");
}

#[test]
fn initrd_does_not_fit_guest_memory() {
    let dir = scratch("initrd-big");
    let path = dir.join("initrd");
    // Sparse: 40 MiB that take no disk space.
    std::fs::File::create(&path)
        .unwrap()
        .set_len(40 << 20)
        .unwrap();
    let out = xvmm(&[
        "--kernel",
        &good_kernel(&dir),
        "--initrd",
        path.to_str().unwrap(),
        "--mem",
        "32",
    ]);
    assert_error(
        &out,
        1,
        "xvmm: initrd: initrd of 40.0 MiB does not fit: guest memory has ",
    );
}

#[test]
fn cmdline_longer_than_the_protocol_allows() {
    let dir = scratch("cmdline-long");
    let long = "x".repeat(2048);
    let out = xvmm(&["--kernel", &good_kernel(&dir), "--cmdline", &long]);
    assert_error(
        &out,
        1,
        "xvmm: cmdline: command line is 2048 bytes, the kernel accepts at most 2047 (cmdline_size 2047 in the bzImage setup header)",
    );
    let pvh = file(
        &dir,
        "vmlinux",
        &pvh_elf(62, 0x100_0000, &pvh_echo_and_exit(0), true),
    );
    let out = xvmm(&["--kernel", pvh.to_str().unwrap(), "--cmdline", &long]);
    assert_error(
        &out,
        1,
        "xvmm: cmdline: command line is 2048 bytes, the kernel accepts at most 2047",
    );
}

#[test]
fn mem_too_small_for_the_kernel() {
    let dir = scratch("mem-small");
    // The test bzImage decompresses at 16 MiB and needs 1 MiB there.
    let out = xvmm(&["--kernel", &good_kernel(&dir), "--mem", "16"]);
    assert_error(
        &out,
        1,
        "xvmm: memory: --mem 16 MiB is too small for this kernel",
    );
}

#[test]
fn mem_larger_than_the_host_can_give() {
    let dir = scratch("mem-huge");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let too_much_mib = (total_kib >> 10) + (1 << 20); // host RAM + 1 TiB
    let out = xvmm(&[
        "--kernel",
        &good_kernel(&dir),
        "--mem",
        &too_much_mib.to_string(),
    ]);
    assert_error(
        &out,
        1,
        &format!("xvmm: memory: {too_much_mib} MiB of guest memory is more than the host can give"),
    );
}

#[test]
fn mem_that_overflows() {
    let dir = scratch("mem-overflow");
    let out = xvmm(&[
        "--kernel",
        &good_kernel(&dir),
        "--mem",
        "18446744073709551615",
    ]);
    assert_error(
        &out,
        1,
        "xvmm: memory: --mem 18446744073709551615 MiB is not a representable size",
    );
}
