//! The nested KVM harness (host side), for tests and benches. `/dev/kvm` on
//! the build machines cannot boot Linux, so Linux-guest tests run one level
//! down: QEMU TCG (`-cpu EPYC`, emulated SVM) boots the L1 host kernel, whose
//! initramfs holds a static xvmm, the L2 kernels and initramfs, and
//! `l1-init`, which runs a plan of steps and prints one `XVMM-STEP` line per
//! step (see `xvmm_init::plan`).
//!
//! One QEMU run per group of steps keeps the nested time small; one run at a
//! time per machine (a lock) keeps TCG's timings meaningful.
//!
//! - [`build`]: the kernels (through xvmm's cache) and the static binaries;
//! - [`distro`]: Debian's stock kernels, downloaded and unpacked once;
//! - [`initramfs`]: the L1 and L2 initramfs;
//! - [`run`]: booting L1 and reading what it printed;
//! - [`lock`]: the machine-wide lock around a QEMU run;
//! - [`cyclictest`]: the timer wake-up's peer, run in L1.

pub mod build;
pub mod cyclictest;
pub mod distro;
pub mod initramfs;
pub mod lock;
pub mod monitor;
pub mod oci;
pub mod run;
pub mod workloads;

pub use build::{
    build_static, prepare, prepare_patched_with_xperf, with_static_binaries, workspace_root,
    Artifacts,
};
pub use initramfs::{append_dynamic, append_files, l1_initramfs, l2_initramfs};
pub use run::{l1_cmdline, report_from_stdout, run_l1, run_l1_with_cmdline, HarnessRun};
pub use xvmm_init::plan::{Outcome, Step, StepResult};
pub use xvmm_init::MARKER;

/// Where things live inside L1.
pub mod l1 {
    /// l1-init, which also records traces (`/init --record-trace ...`).
    pub const INIT: &str = "/init";
    pub const XVMM: &str = "/bin/xvmm";
    /// The static xperf, beside xvmm, where xvmm looks for it.
    pub const XPERF: &str = "/bin/xperf";
    pub const L2_BZIMAGE: &str = "/l2/bzImage";
    pub const L2_VMLINUX: &str = "/l2/vmlinux";
    pub const L2_INITRD: &str = "/l2/init.cpio";
    pub const QEMU: &str = "/usr/bin/qemu-system-x86_64";
    pub const QEMU_DATA: &str = "/usr/share/qemu";
    pub const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
    pub const LIB_DIR: &str = "/lib/x86_64-linux-gnu";
}

/// Guest memory given to every L2 VM, MiB.
pub const L2_MEM_MIB: u64 = 256;

/// Kernel command line of the L2 guests; `xvmm.init=` is appended per step.
/// `no_timer_check`: under QEMU (which has an IO-APIC) the timer check can
/// fail when the nested emulation is slow, as in L1.
pub const L2_CMDLINE: &str = "console=ttyS0 quiet panic=-1 no_timer_check";

/// The QEMU binary used for L1 (and copied into L1 for the boot benchmark).
pub const HOST_QEMU: &str = "/usr/bin/qemu-system-x86_64";

/// The L2 kernel command line for one `xvmm.init=` action.
pub fn l2_cmdline(action: &str) -> String {
    format!("{L2_CMDLINE} xvmm.init={action}")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// argv of an xvmm run inside L1 booting the L2 kernel with the built-in
/// initramfs: `cmdline`, L2's memory and `timeout_secs`, then `rest`.
pub fn xvmm_l2_argv(cmdline: &str, timeout_secs: u64, rest: &[&str]) -> Vec<String> {
    xvmm_kernel_argv(l1::L2_BZIMAGE, cmdline, timeout_secs, rest)
}

/// [`xvmm_l2_argv`] booting `kernel`, a path in L1.
pub fn xvmm_kernel_argv(
    kernel: &str,
    cmdline: &str,
    timeout_secs: u64,
    rest: &[&str],
) -> Vec<String> {
    let (mem, timeout) = (L2_MEM_MIB.to_string(), timeout_secs.to_string());
    let head = [
        l1::XVMM,
        "--kernel",
        kernel,
        "--cmdline",
        cmdline,
        "--mem",
        &mem,
        "--timeout",
        &timeout,
    ];
    strings(&[&head[..], rest].concat())
}

/// argv of an xvmm run inside L1.
pub fn xvmm_argv(kernel: &str, cmdline: &str, timeout_secs: u64) -> Vec<String> {
    strings(&[
        l1::XVMM,
        "--kernel",
        kernel,
        "--initrd",
        l1::L2_INITRD,
        "--cmdline",
        cmdline,
        "--mem",
        &L2_MEM_MIB.to_string(),
        "--timeout",
        &timeout_secs.to_string(),
    ])
}

/// argv of a QEMU/KVM PVH boot inside L1 on the default `pc` machine
/// (SeaBIOS, ACPI, option ROMs), through the dynamic loader, since L1 has
/// no ld.so.cache. `isa-debug-exit` at the exit port lets the same
/// `xvmm.init=exit:N` end QEMU too.
pub fn qemu_argv(kernel: &str, cmdline: &str) -> Vec<String> {
    qemu_machine_argv(&["-nodefaults"], kernel, cmdline)
}

/// QEMU's minimal machine as the boot benchmark's fastest peer: `microvm`
/// with qboot, no ACPI, no option ROMs, no RTC, only the ISA serial port.
pub const MICROVM: &[&str] = &[
    "-M",
    "microvm,x-option-roms=off,isa-serial=on,rtc=off,acpi=off",
    "-bios",
    "qboot.rom",
    "-nodefaults",
    "-no-user-config",
];

/// argv of a QEMU/KVM PVH boot inside L1 on [`MICROVM`].
pub fn qemu_microvm_argv(kernel: &str, cmdline: &str) -> Vec<String> {
    qemu_machine_argv(MICROVM, kernel, cmdline)
}

/// QEMU/KVM as L1 starts it: through the dynamic loader (L1 has no
/// ld.so.cache), with its firmware directory; the machine's options follow.
pub fn l1_qemu_kvm() -> Vec<String> {
    strings(&[
        l1::LOADER,
        "--library-path",
        l1::LIB_DIR,
        l1::QEMU,
        "-L",
        l1::QEMU_DATA,
        "-enable-kvm",
    ])
}

fn qemu_machine_argv(machine: &[&str], kernel: &str, cmdline: &str) -> Vec<String> {
    let mut argv = l1_qemu_kvm();
    argv.extend(strings(machine));
    argv.extend(strings(&[
        "-cpu",
        "host",
        "-smp",
        "1",
        "-m",
        &L2_MEM_MIB.to_string(),
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
        "-device",
        "isa-debug-exit,iobase=0x501,iosize=1",
        "-kernel",
        kernel,
        "-initrd",
        l1::L2_INITRD,
        "-append",
        cmdline,
    ]));
    argv
}

/// Every (mode, crossing) that `xperf probes` measures (the syscall slow
/// path on getppid only), with the report's row for it; panics naming
/// `side` and the first row missing.
pub fn probe_rows<'a>(
    report: &'a xvmm_results::Report,
    side: &str,
) -> Vec<(&'static str, &'static str, &'a xvmm_results::Probe)> {
    use xvmm_results::probes::mode;
    let mut rows = Vec::new();
    for crossing in ["getppid", "pf-refault"] {
        for m in mode::MEASURED {
            if m == mode::SYSCALL_SLOW_PATH && crossing != "getppid" {
                continue;
            }
            let p = report
                .probes
                .iter()
                .find(|p| p.mode == m && p.crossing == crossing)
                .unwrap_or_else(|| panic!("{side}: no row {m} on {crossing}"));
            rows.push((m, crossing, p));
        }
    }
    rows
}

/// Whether `XVMM_SKIP_HARNESS=1` asks to skip the nested tests; a skip of
/// `what` is recorded (`xvmm_host::skip`, which the suite's summary
/// counts) and said on stderr.
pub fn skipped(what: &str) -> bool {
    if std::env::var("XVMM_SKIP_HARNESS").is_ok_and(|v| v == "1") {
        eprintln!(
            "{}",
            xvmm_host::skip::record(&format!("XVMM_SKIP_HARNESS=1: {what} skipped"))
        );
        return true;
    }
    false
}

/// `xvmm compare VM BARE --json JSON` with the static `xvmm` the harness
/// built: its table (stdout) and the comparison it wrote. A failed run is
/// an error carrying its stderr.
pub fn xvmm_compare(
    xvmm: &std::path::Path,
    vm: &std::path::Path,
    bare: &std::path::Path,
    json: &std::path::Path,
) -> std::result::Result<(String, xvmm_results::Comparison), String> {
    let out = std::process::Command::new(xvmm)
        .arg("compare")
        .arg(vm)
        .arg(bare)
        .arg("--json")
        .arg(json)
        .output()
        .map_err(|e| format!("running {}: {e}", xvmm.display()))?;
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "xvmm compare failed ({}): {}{table}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let cmp = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    Ok((table, cmp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_carries_kernel_cmdline_and_limits() {
        let argv = xvmm_argv(l1::L2_VMLINUX, &l2_cmdline("exit:0"), 30);
        assert_eq!(argv[0], l1::XVMM);
        let after = |flag: &str| {
            argv.iter()
                .position(|a| a == flag)
                .map(|i| argv[i + 1].clone())
        };
        assert_eq!(after("--kernel").as_deref(), Some(l1::L2_VMLINUX));
        assert_eq!(
            after("--cmdline").as_deref(),
            Some("console=ttyS0 quiet panic=-1 no_timer_check xvmm.init=exit:0")
        );
        assert_eq!(after("--timeout").as_deref(), Some("30"));
        let q = qemu_argv(l1::L2_VMLINUX, "x");
        assert!(q
            .windows(2)
            .any(|w| w[0] == "-kernel" && w[1] == l1::L2_VMLINUX));
        assert!(q.contains(&"-enable-kvm".to_string()) && q.contains(&"-nodefaults".to_string()));
        let m = qemu_microvm_argv(l1::L2_VMLINUX, "x");
        assert!(m.windows(2).any(|w| w[0] == "-bios" && w[1] == "qboot.rom"));
        assert!(m
            .windows(2)
            .any(|w| w[0] == "-M" && w[1].starts_with("microvm,") && w[1].contains("acpi=off")));
        assert!(m.windows(2).any(|w| w[0] == "-append" && w[1] == "x"));
    }
}
