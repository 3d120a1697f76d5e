//! End to end through the xvmm binary on this machine's /dev/kvm: hand-built
//! bzImage (64-bit boot protocol) and PVH ELF kernels that do port I/O prove
//! format detection, loading, the zero page / hvm_start_info, the command line,
//! guest memory, device dispatch and xvmm's exit codes.

mod vm_support;
use vm_support::*;

#[test]
fn bzimage_entry_sees_zero_page_and_cmdline_and_sets_exit_status() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("bz-exit");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(42)));
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--cmdline",
        "Zebra",
        "--mem",
        "64",
    ]);
    // Guest status N exits 64 + N: it never collides with xvmm's own statuses.
    assert_eq!(out.status.code(), Some(64 + 42), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "Z\n");
    assert_eq!(stderr(&out), "xvmm: guest: exited with status 42\n");
}

#[test]
fn bzimage_exit_zero_is_success_and_default_cmdline_is_used() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("bz-zero");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(0)));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    // The default command line starts with "console=ttyS0".
    assert_eq!(stdout(&out), "c\n");
    assert_eq!(stderr(&out), "");
}

#[test]
fn more_vcpus_than_host_cpus_boot_with_a_note_and_a_spinning_smp_guest_times_out() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("bz-smp");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(0)));
    let host_cpus = std::thread::available_parallelism().unwrap().get();
    let cpus = (host_cpus + 1).min(254).to_string();
    // The boot vCPU exits; the APs, never started, are stopped with it.
    let out = xvmm(&["--kernel", kernel.to_str().unwrap(), "--cpus", &cpus]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "c\n");
    assert_eq!(
        stderr(&out),
        format!(
            "xvmm: {cpus} vCPUs on {host_cpus} host CPUs: the measurements include the host's scheduling of vCPU threads\n"
        )
    );
    // Every vCPU thread is stopped by the timeout: no thread keeps xvmm alive.
    let spin = file(&dir, "spin", &bzimage(SPIN));
    let start = std::time::Instant::now();
    let out = xvmm(&[
        "--kernel",
        spin.to_str().unwrap(),
        "--cpus",
        "2",
        "--pin",
        "0,0",
        "--timeout",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(124), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).ends_with("xvmm: timeout: guest did not finish within 1 s\n"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("--pin puts 2 vCPUs on 1 host CPUs"),
        "{}",
        stderr(&out)
    );
    assert!(
        start.elapsed().as_secs_f64() < 10.0,
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn quiet_suppresses_the_console() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("bz-quiet");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(0)));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "");
}

#[test]
fn pvh_entry_sees_start_info_and_cmdline() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("pvh");
    let kernel = file(
        &dir,
        "vmlinux",
        &pvh_elf(62, 0x100_0000, &pvh_echo_and_exit(7), true),
    );
    let out = xvmm(&["--kernel", kernel.to_str().unwrap(), "--cmdline", "Pvh"]);
    assert_eq!(out.status.code(), Some(64 + 7), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "P\n");
}

#[test]
fn initrd_is_loaded_with_the_kernel() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("initrd");
    let kernel = file(&dir, "bzImage", &bzimage(&linux64_echo_and_exit(3)));
    let initrd = file(&dir, "initrd", &vec![0x5a; 3 << 20]);
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--initrd",
        initrd.to_str().unwrap(),
        "--mem",
        "32",
    ]);
    assert_eq!(out.status.code(), Some(64 + 3), "stderr: {}", stderr(&out));
}

#[test]
fn i8042_reset_is_a_clean_exit() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("reset");
    let kernel = file(&dir, "bzImage", &bzimage(LINUX64_I8042_RESET));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
}

#[test]
fn triple_fault_names_the_exit_and_rip() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("triple");
    let kernel = file(&dir, "bzImage", &bzimage(TRIPLE_FAULT));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("xvmm: guest: triple fault (KVM_EXIT_SHUTDOWN) at RIP 0x"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn spinning_guest_times_out() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("spin");
    let kernel = file(&dir, "bzImage", &bzimage(SPIN));
    let start = std::time::Instant::now();
    let out = xvmm(&["--kernel", kernel.to_str().unwrap(), "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(
        stderr(&out),
        "xvmm: timeout: guest did not finish within 1 s\n"
    );
    assert!(
        start.elapsed().as_secs_f64() < 10.0,
        "{:?}",
        start.elapsed()
    );
}

/// Starts xvmm on a guest that spins forever (60 s timeout), with `extra`
/// options, for the Ctrl-C tests.
fn spawn_spinning_guest(name: &str, extra: &[&str]) -> std::process::Child {
    let dir = scratch(name);
    let kernel = file(&dir, "bzImage", &bzimage(SPIN));
    std::process::Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(["--kernel", kernel.to_str().unwrap(), "--timeout", "60"])
        .args(extra)
        .arg("--initrd")
        .arg(placeholder_initrd())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn xvmm")
}

#[test]
fn sigint_stops_a_running_guest_cleanly() {
    if !have_kvm() {
        return;
    }
    let child = spawn_spinning_guest("sigint", &[]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let start = std::time::Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert!(start.elapsed().as_secs_f64() < 5.0, "{:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(stderr(&out), "xvmm: interrupted by SIGINT\n");
}

/// Stop signals while `--trace` is timing exits: the private tracefs instance
/// is removed, the host's tracing state (global trace clock included) is as
/// before, and the tracefs xvmm had to mount is unmounted again; the exit
/// status is 128 + the first signal. Run in a private mount namespace where
/// tracefs starts unmounted, as on a freshly booted machine.
fn signals_during_a_traced_run_leave_tracefs_as_found(tag: &str, signals: &[libc::c_int]) {
    if !have_kvm() {
        return;
    }
    use xvmm_host::host_state::{mounts, namespace, snapshot};
    namespace::enter_private_mount_namespace().expect("root makes a private mount namespace");
    let tracefs_mounted = || {
        mounts::mount_table()
            .unwrap()
            .iter()
            .any(|m| m.fstype == "tracefs")
    };
    assert!(!tracefs_mounted());
    let before = snapshot::snapshot(None);
    let child = spawn_spinning_guest(tag, &["--trace"]);
    let instance = format!("xvmm-{}", child.id());
    let has_instance = || {
        snapshot::instance_names()
            .unwrap_or_default()
            .contains(&instance)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !has_instance() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let traced = has_instance();
    let pid = i32::try_from(child.id()).unwrap();
    for &signal in signals {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait");
    let err = stderr(&out);
    if !traced {
        // No tracefs or no kvm tracepoints here: xvmm must have said so.
        assert!(err.starts_with("xvmm: tracing: "), "{err}");
        eprintln!(
            "{}",
            xvmm_host::skip::record(&format!("no traced run here: {err}"))
        );
        return;
    }
    assert_eq!(out.status.code(), Some(128 + signals[0]), "{err}");
    assert!(!has_instance(), "{instance} left behind");
    assert!(!tracefs_mounted(), "the tracefs xvmm mounted is left");
    let diff = snapshot::differences(&before, &snapshot::snapshot(None));
    assert!(diff.is_empty(), "host tracing state changed: {diff:?}");
}

#[test]
fn sigint_during_a_traced_run_leaves_tracefs_as_found() {
    signals_during_a_traced_run_leave_tracefs_as_found("sigint-trace", &[libc::SIGINT]);
}

/// GNU timeout and impatient users send more than one signal: the second must
/// not skip the clean-up (it used to `_exit(130)` and leave tracefs behind).
#[test]
fn a_second_signal_during_a_traced_run_still_cleans_up() {
    signals_during_a_traced_run_leave_tracefs_as_found(
        "sigterm-twice",
        &[libc::SIGTERM, libc::SIGTERM, libc::SIGINT],
    );
}

fn sample_report() -> xvmm_results::Report {
    xvmm_results::Report::new(
        "vm-boot-test".into(),
        xvmm_results::Environment::LinuxVm,
        xvmm_results::HostFacts::default(),
        xvmm_results::Method::standard(1, 2),
    )
}

/// The guest's report as sent: xvmm adds the host's KVM module, a
/// "VMM host: ..." note and the vCPUs' placement, which must be there and
/// are removed here.
fn without_host_view(mut r: xvmm_results::Report) -> xvmm_results::Report {
    let before = r.notes.len();
    r.notes.retain(|n| !n.starts_with("VMM host: "));
    assert_eq!(r.notes.len() + 1, before, "one host note expected");
    let before = r.notes.len();
    r.notes
        .retain(|n| n != "VM: 1 vCPU, each on a host thread of its own, not pinned");
    assert_eq!(r.notes.len() + 1, before, "one placement note expected");
    r.host.kvm_module.clear();
    r
}

#[test]
fn results_doorbell_reaches_json_file() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("results");
    let json = serde_json::to_string(&sample_report()).unwrap();
    let code = linux64_send_results(json.as_bytes(), u32::try_from(json.len()).unwrap());
    let kernel = file(&dir, "bzImage", &bzimage(&code));
    let out_path = dir.join("out.json");
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--json",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let written = std::fs::read_to_string(&out_path).expect("--json file");
    assert_eq!(
        without_host_view(xvmm_results::Report::from_json(&written).unwrap()),
        sample_report()
    );
    // The summary goes to stdout as well.
    assert!(
        stdout(&out).contains("vm-boot-test on unknown: Linux guest under KVM"),
        "{}",
        stdout(&out)
    );

    // "--json -" prints the JSON itself on stdout.
    let out = xvmm(&["--kernel", kernel.to_str().unwrap(), "--json", "-"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        without_host_view(xvmm_results::Report::from_json(&stdout(&out)).unwrap()),
        sample_report()
    );
}

#[test]
fn malformed_or_oversized_results_are_guest_errors() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("bad-results");
    let garbage = b"{\"schema\": 1";
    let kernel = file(
        &dir,
        "k1",
        &bzimage(&linux64_send_results(
            garbage,
            u32::try_from(garbage.len()).unwrap(),
        )),
    );
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("xvmm: guest: malformed results: "),
        "{}",
        stderr(&out)
    );

    let kernel = file(
        &dir,
        "k2",
        &bzimage(&linux64_send_results(b"{}", 0x0100_0001)),
    );
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "xvmm: guest: results length 16777217 exceeds the results slot (16777216 bytes)\n"
    );
}

#[test]
fn reboot_after_a_kernel_panic_is_an_error_a_plain_reboot_is_not() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("panic");
    let panic = b"[    1.0] Kernel panic - not syncing: Attempted to kill init!\n[    1.0] Rebooting in 1 seconds..\n";
    let kernel = file(&dir, "k1", &bzimage(&linux64_print_then_reset(panic)));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "xvmm: guest: kernel panic: Kernel panic - not syncing: Attempted to kill init!\n"
    );
    assert_eq!(stdout(&out).as_bytes(), panic);

    let fine = b"reboot: Restarting system\n";
    let kernel = file(&dir, "k2", &bzimage(&linux64_print_then_reset(fine)));
    let out = xvmm(&["--kernel", kernel.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).as_bytes(), fine);
}

#[test]
fn terminal_input_reaches_the_guest_uart() {
    if !have_kvm() {
        return;
    }
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let dir = scratch("stdin");
    // Poll LSR until data is ready, read it, exit with the byte as status.
    let code = [
        0x66, 0xba, 0xfd, 0x03, // mov dx, 0x3fd
        0xec, // poll: in al, dx
        0xa8, 0x01, // test al, 1
        0x74, 0xfb, // jz poll
        0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
        0xec, // in al, dx
        0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
        0xee, // out dx, al
        0xf4,
    ];
    let kernel = file(&dir, "bzImage", &bzimage(&code));
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors are fresh and owned here.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    };
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .args(["--kernel", kernel.to_str().unwrap(), "--timeout", "20"])
        .arg("--initrd")
        .arg(placeholder_initrd())
        .stdin(slave)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn xvmm");
    std::thread::sleep(std::time::Duration::from_millis(500));
    // '1' (49): a guest status below 60 maps to 64 + 49.
    master.write_all(b"1\n").unwrap();
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(64 + i32::from(b'1')),
        "stderr: {}",
        stderr(&out)
    );
}

/// A hostile guest: `out` and `in` of every width on every I/O port but the
/// exit, results-doorbell and i8042 command ports (which end the run by
/// design), then writes and reads to unbacked MMIO below 4 GiB. xvmm must run
/// it to its clean exit: nothing a guest does to ports or MMIO may crash it
/// or end the run.
const EVERY_PORT_THEN_MMIO: &[u8] = &[
    0x31, 0xc9, //                      xor ecx, ecx
    0x66, 0x81, 0xf9, 0x01, 0x05, //    1: cmp cx, 0x501 (exit port)
    0x74, 0x19, //                      je 2f
    0x66, 0x81, 0xf9, 0x04, 0x05, //    cmp cx, 0x504 (results doorbell)
    0x74, 0x12, //                      je 2f
    0x66, 0x83, 0xf9, 0x64, //          cmp cx, 0x64 (i8042 reset)
    0x74, 0x0c, //                      je 2f
    0x89, 0xca, //                      mov edx, ecx
    0x89, 0xc8, //                      mov eax, ecx
    0xee, //                            out dx, al
    0x66, 0xef, //                      out dx, ax
    0xef, //                            out dx, eax
    0xec, //                            in al, dx
    0x66, 0xed, //                      in ax, dx
    0xed, //                            in eax, dx
    0xff, 0xc1, //                      2: inc ecx
    0x81, 0xf9, 0x00, 0x00, 0x01, 0x00, // cmp ecx, 0x10000
    0x72, 0xd6, //                      jb 1b
    0x48, 0xb8, 0x00, 0x00, 0x00, 0xe0, 0x00, 0x00, 0x00, 0x00, // mov rax, 0xe0000000
    0xc7, 0x00, 0xef, 0xbe, 0xad, 0xde, // mov dword [rax], 0xdeadbeef
    0x8b, 0x18, //                      mov ebx, [rax]
    0x48, 0xb8, 0x00, 0xf0, 0xbf, 0xfe, 0x00, 0x00, 0x00, 0x00, // mov rax, 0xfebff000
    0xc6, 0x00, 0x5a, //                mov byte [rax], 0x5a
    0x48, 0xb8, 0x00, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, // mov rax, 0xffffff00
    0x48, 0x89, 0x00, //                mov qword [rax], rax
    0x66, 0xba, 0x01, 0x05, //          mov dx, 0x501
    0xb0, 0x00, //                      mov al, 0
    0xee, //                            out dx, al
    0xf4, //                            hlt
];

#[test]
fn a_guest_poking_every_port_and_stray_mmio_cannot_disturb_xvmm() {
    if !have_kvm() {
        return;
    }
    let dir = scratch("hostile");
    let kernel = file(&dir, "bzImage", &bzimage(EVERY_PORT_THEN_MMIO));
    let start = std::time::Instant::now();
    let out = xvmm(&[
        "--kernel",
        kernel.to_str().unwrap(),
        "--initrd",
        placeholder_initrd().to_str().unwrap(),
        "--timeout",
        "120",
    ]);
    let err = stderr(&out);
    eprintln!("hostile guest ran {:?}; stderr: {err}", start.elapsed());
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
