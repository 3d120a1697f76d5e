//! The nested KVM harness (host side). `/dev/kvm` on the build machines cannot
//! boot Linux, so Linux-guest tests run one level down: QEMU TCG (`-cpu EPYC`,
//! emulated SVM) boots the L1 host kernel, whose initramfs holds a static
//! xvmm, the L2 kernels and initramfs, and `l1-init`, which runs a plan of
//! steps and prints one `XVMM-STEP` line per step (see `xvmm_init::plan`).
//!
//! One QEMU run per group of steps keeps the nested time small.

use crate::initramfs::Archive;
use crate::kernel::Flavour as KernelFlavour;
use crate::kernel::{self, BuildRequest, BuiltKernel};
use crate::{Error, Result};
use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
pub use xvmm_init::plan::{Outcome, Step, StepResult};
pub use xvmm_init::MARKER;

/// Where things live inside L1.
pub mod l1 {
    pub const XVMM: &str = "/bin/xvmm";
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

/// Firmware QEMU needs for a `-nodefaults` PVH boot: (host file, name in L1).
const QEMU_FIRMWARE: &[(&str, &str)] = &[
    ("/usr/share/seabios/bios-256k.bin", "bios-256k.bin"),
    ("/usr/share/qemu/pvh.bin", "pvh.bin"),
    ("/usr/share/qemu/linuxboot_dma.bin", "linuxboot_dma.bin"),
    ("/usr/share/qemu/kvmvapic.bin", "kvmvapic.bin"),
];

/// Everything the harness boots, built (or found in the caches).
#[derive(Clone, Debug)]
pub struct Artifacts {
    pub l1_kernel: BuiltKernel,
    pub l2_kernel: BuiltKernel,
    pub xvmm: PathBuf,
    pub xvmm_init: PathBuf,
    pub l1_init: PathBuf,
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Builds static (`+crt-static`, gnu target) release binaries with cargo and
/// returns their directory. The separate `--target` build directory keeps
/// these flags from invalidating normal builds.
pub fn build_static(packages: &[&str]) -> Result<PathBuf> {
    let root = workspace_root();
    let target = "x86_64-unknown-linux-gnu";
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--release", "--target", target])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .stdin(Stdio::null());
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd
        .status()
        .map_err(|e| Error::Build(format!("running cargo: {e}")))?;
    if !status.success() {
        return Err(Error::Build(format!(
            "static build of {} failed ({status})",
            packages.join(", ")
        )));
    }
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(dir.join(target).join("release"))
}

/// Builds (or reuses) the L1 and L2 kernels and the static binaries.
pub fn prepare() -> Result<Artifacts> {
    let l1_kernel = kernel::build(&BuildRequest::new(KernelFlavour::Host))?;
    let l2_kernel = kernel::build(&BuildRequest::new(KernelFlavour::Guest))?;
    let bin = build_static(&["xvmm", "xvmm-init"])?;
    Ok(Artifacts {
        l1_kernel,
        l2_kernel,
        xvmm: bin.join("xvmm"),
        xvmm_init: bin.join("xvmm-init"),
        l1_init: bin.join("l1-init"),
    })
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| Error::io("reading", path, e))
}

/// The L2 initramfs: the static `xvmm-init` as `/init`.
pub fn l2_initramfs(a: &Artifacts) -> Result<Vec<u8>> {
    let mut archive = Archive::new();
    archive
        .console()?
        .file("/init", read(&a.xvmm_init)?, 0o755)?;
    Ok(archive.to_bytes())
}

/// The L2 kernel command line for one `xvmm.init=` action.
pub fn l2_cmdline(action: &str) -> String {
    format!("{L2_CMDLINE} xvmm.init={action}")
}

/// argv of an xvmm run inside L1.
pub fn xvmm_argv(kernel: &str, cmdline: &str, timeout_secs: u64) -> Vec<String> {
    [
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
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// argv of a QEMU/KVM PVH boot inside L1 (through the dynamic loader, since
/// L1 has no ld.so.cache). `isa-debug-exit` at the exit port lets the same
/// `xvmm.init=exit:N` end QEMU too.
pub fn qemu_argv(kernel: &str, cmdline: &str) -> Vec<String> {
    [
        l1::LOADER,
        "--library-path",
        l1::LIB_DIR,
        l1::QEMU,
        "-L",
        l1::QEMU_DATA,
        "-enable-kvm",
        "-nodefaults",
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
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The shared libraries `ldd` reports for `binary` (absolute paths).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| Error::Build(format!("running ldd: {e}")))?;
    if !out.status.success() {
        return Err(Error::Build(format!("ldd {} failed", binary.display())));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Adds QEMU, its libraries and firmware to an L1 archive.
fn add_qemu(archive: &mut Archive) -> Result<()> {
    let qemu = Path::new(HOST_QEMU);
    archive.file(l1::QEMU, read(qemu)?, 0o755)?;
    let mut seen = BTreeSet::new();
    for lib in shared_libraries(qemu)? {
        let name = lib
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !seen.insert(name.clone()) {
            continue;
        }
        let data = read(&lib)?;
        if name.starts_with("ld-linux") {
            archive.file(l1::LOADER, data, 0o755)?;
        } else {
            archive.file(&format!("{}/{name}", l1::LIB_DIR), data, 0o755)?;
        }
    }
    for (host, name) in QEMU_FIRMWARE {
        archive.file(
            &format!("{}/{name}", l1::QEMU_DATA),
            read(Path::new(host))?,
            0o644,
        )?;
    }
    Ok(())
}

/// The L1 initramfs: `l1-init`, the plan, xvmm, the L2 kernels and
/// initramfs, and QEMU when `with_qemu`.
pub fn l1_initramfs(a: &Artifacts, steps: &[Step], with_qemu: bool) -> Result<Vec<u8>> {
    let mut plan = String::new();
    for s in steps {
        plan.push_str(&s.to_line().map_err(Error::Usage)?);
        plan.push('\n');
    }
    let mut archive = Archive::new();
    archive
        .console()?
        .file("/init", read(&a.l1_init)?, 0o755)?
        .file("/plan", plan.into_bytes(), 0o644)?
        .file(l1::XVMM, read(&a.xvmm)?, 0o755)?
        .file(l1::L2_BZIMAGE, read(&a.l2_kernel.bzimage)?, 0o644)?
        .file(l1::L2_VMLINUX, read(&a.l2_kernel.vmlinux)?, 0o644)?
        .file(l1::L2_INITRD, l2_initramfs(a)?, 0o644)?
        .dir("/tmp", 0o1777)?;
    if with_qemu {
        add_qemu(&mut archive)?;
    }
    Ok(archive.to_bytes())
}

/// The host's TSC frequency, measured against CLOCK_MONOTONIC over 200 ms.
/// QEMU TCG passes the host TSC through to L1 unscaled.
pub fn host_tsc_khz() -> u64 {
    let start = Instant::now();
    // SAFETY: rdtsc has no preconditions on x86-64.
    let t0 = unsafe { std::arch::x86_64::_rdtsc() };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: as above.
    let t1 = unsafe { std::arch::x86_64::_rdtsc() };
    let micros = start.elapsed().as_micros().max(1) as u64;
    t1.wrapping_sub(t0) * 1000 / micros
}

/// L1's kernel command line. A TCG guest without ACPI has no HPET or PM
/// timer, so L1 cannot calibrate its TSC, falls back to jiffies (its clock
/// then drifts by a factor of several under load) and KVM has no TSC rate
/// for L2; hence the measured host rate is given explicitly. With a true
/// TSC the IO-APIC timer check (4 ticks within 40 ms) fails whenever the
/// emulating host is busy, and the kernel panics: `no_timer_check`.
pub fn l1_cmdline(tsc_khz: u64) -> String {
    format!(
        "console=ttyS0 quiet panic=-1 rdinit=/init tsc_early_khz={tsc_khz} tsc=reliable \
         no_timer_check"
    )
}

/// What one L1 boot printed and measured.
#[derive(Clone, Debug)]
pub struct HarnessRun {
    /// Everything L1 printed (QEMU's stdout).
    pub console: Vec<String>,
    pub steps: Vec<StepResult>,
    /// `l1-init` found `/dev/kvm`.
    pub kvm_present: bool,
    /// `l1-init` reached the end of the plan.
    pub finished: bool,
    pub seconds: f64,
    /// Where the console was saved.
    pub log: PathBuf,
}

impl HarnessRun {
    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The output lines (stdout and stderr) of one step's process.
    pub fn output(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{}{name}| ", xvmm_init::plan::OUT_PREFIX);
        self.console
            .iter()
            .filter_map(|l| l.find(&prefix).map(|i| &l[i + prefix.len()..]))
            .collect()
    }

    /// The L2 kernel's uptime (seconds) when its `/init` printed the marker.
    pub fn guest_uptime(&self, name: &str) -> Option<f64> {
        self.output(name)
            .iter()
            .find_map(|l| xvmm_init::marker_uptime(l))
    }

    /// The last `n` console lines, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let from = self.console.len().saturating_sub(n);
        self.console[from..].join("\n")
    }
}

/// Boots L1 under QEMU TCG with `initramfs`, waits for it to finish (it
/// reboots, which ends QEMU because of `-no-reboot`) or kills it after
/// `timeout`. `group` names the log file, `target/harness/<group>.log`
/// (`<group>-<pid>.log` while running).
pub fn run_l1(
    a: &Artifacts,
    initramfs: &[u8],
    group: &str,
    timeout: Duration,
) -> Result<HarnessRun> {
    run_l1_with_cmdline(a, initramfs, group, timeout, "")
}

/// [`run_l1`] with `extra` appended to L1's kernel command line (e.g.
/// `xperf_stamps` for the patched L1 kernel of `tests/harness_xperf.rs`).
pub fn run_l1_with_cmdline(
    a: &Artifacts,
    initramfs: &[u8],
    group: &str,
    timeout: Duration,
    extra: &str,
) -> Result<HarnessRun> {
    let dir = workspace_root().join("target").join("harness");
    fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    // Per-process names: several engineers' (or tests') runs may overlap.
    let pid = std::process::id();
    let initrd = dir.join(format!("{group}-{pid}-l1.cpio"));
    fs::write(&initrd, initramfs).map_err(|e| Error::io("writing", &initrd, e))?;
    let log = dir.join(format!("{group}-{pid}.log"));
    let mut log_file = fs::File::create(&log).map_err(|e| Error::io("creating", &log, e))?;
    let smp = std::env::var("XVMM_HARNESS_SMP").unwrap_or_else(|_| "2".into());
    let started = Instant::now();
    let mut child = Command::new(HOST_QEMU)
        .args(["-accel", "tcg", "-cpu", "EPYC", "-m", "2048", "-smp", &smp])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&a.l1_kernel.bzimage)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(format!("{} {extra}", l1_cmdline(host_tsc_khz())).trim_end())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Build(format!("starting {HOST_QEMU}: {e}")))?;
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(out).split(b'\n').map_while(|l| l.ok()) {
                let line = String::from_utf8_lossy(&line)
                    .trim_end_matches('\r')
                    .to_string();
                if tx.send(line).is_err() {
                    return;
                }
            }
        }));
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                if tx.send(format!("qemu: {line}")).is_err() {
                    return;
                }
            }
        }));
    }
    drop(tx);
    let mut console = Vec::new();
    let mut timed_out = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if std::env::var_os("XVMM_HARNESS_VERBOSE").is_some() {
                    eprintln!("L1| {line}");
                }
                // Written as it comes, so a long run can be watched.
                let _ = writeln!(log_file, "{line}");
                console.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break;
        }
    }
    let _ = child.wait();
    for r in readers {
        let _ = r.join();
    }
    while let Ok(line) = rx.try_recv() {
        let _ = writeln!(log_file, "{line}");
        console.push(line);
    }
    let _ = fs::remove_file(&initrd);
    // The latest complete console of the group, under a stable name.
    let latest = dir.join(format!("{group}.log"));
    let _ = fs::copy(&log, &latest);
    let _ = fs::remove_file(&log);
    let log = latest;
    let steps = console
        .iter()
        .filter_map(|l| StepResult::parse_line(l))
        .collect();
    let run = HarnessRun {
        kvm_present: console
            .iter()
            .any(|l| l.contains("XVMM-L1: up kvm=present")),
        finished: console.iter().any(|l| l.contains("XVMM-L1: done")),
        console,
        steps,
        seconds: started.elapsed().as_secs_f64(),
        log,
    };
    if timed_out {
        return Err(Error::Timeout(format!(
            "nested harness group {group} still running after {} s; console in {}",
            timeout.as_secs(),
            run.log.display()
        )));
    }
    Ok(run)
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
    }

    #[test]
    fn host_tsc_rate_is_plausible() {
        let khz = host_tsc_khz();
        assert!((500_000..10_000_000).contains(&khz), "{khz} kHz");
        assert!(l1_cmdline(khz).contains(&format!("tsc_early_khz={khz} ")));
    }

    #[test]
    fn ldd_lists_absolute_library_paths() {
        let libs = shared_libraries(Path::new(HOST_QEMU)).unwrap();
        assert!(libs.iter().all(|p| p.is_absolute() && p.exists()));
        assert!(libs
            .iter()
            .any(|p| p.to_string_lossy().contains("ld-linux")));
    }
}
