//! The two initramfs the harness boots: L2's (`xvmm-init` as `/init`) and
//! L1's (`l1-init`, the plan, xvmm, the L2 kernels and initramfs, and QEMU
//! with its libraries for the boot benchmark).

use crate::build::Artifacts;
use crate::{l1, Step, HOST_QEMU};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm::initramfs::Archive;
use xvmm::{Error, Result};

/// Firmware QEMU needs for a `-nodefaults` PVH boot on `pc` and on
/// `microvm` (qboot, from qemu-system-data, which qemu-system-x86 pulls in),
/// and for a multiboot `-kernel` (kvm-unit-tests' `.flat` files, the peer
/// bench's): (host file, name in L1).
const QEMU_FIRMWARE: &[(&str, &str)] = &[
    ("/usr/share/qemu/qboot.rom", "qboot.rom"),
    ("/usr/share/seabios/bios-256k.bin", "bios-256k.bin"),
    ("/usr/share/qemu/pvh.bin", "pvh.bin"),
    ("/usr/share/qemu/linuxboot_dma.bin", "linuxboot_dma.bin"),
    ("/usr/share/qemu/kvmvapic.bin", "kvmvapic.bin"),
    ("/usr/share/qemu/multiboot_dma.bin", "multiboot_dma.bin"),
];

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
        .file(l1::INIT, read(&a.l1_init)?, 0o755)?
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

/// Appends host files to an initramfs as a second, concatenated newc
/// archive (the kernel unpacks archives one after the other): (path in the
/// guest, host file, mode).
pub fn append_files(cpio: &mut Vec<u8>, files: &[(&str, &Path, u32)]) -> Result<()> {
    let mut extra = Archive::new();
    for (path, host, mode) in files {
        extra.file(path, read(host)?, *mode)?;
    }
    cpio.extend(extra.to_bytes());
    Ok(())
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
    add_dynamic(archive, Path::new(HOST_QEMU), l1::QEMU)?;
    for (host, name) in QEMU_FIRMWARE {
        archive.file(
            &format!("{}/{name}", l1::QEMU_DATA),
            read(Path::new(host))?,
            0o644,
        )?;
    }
    Ok(())
}

/// A dynamically linked host binary at `in_l1`, with the shared libraries
/// `ldd` names for it in [`l1::LIB_DIR`] and its loader at [`l1::LOADER`]
/// (L1 has no ld.so.cache: run it as `LOADER --library-path LIB_DIR
/// BINARY`).
fn add_dynamic(archive: &mut Archive, host: &Path, in_l1: &str) -> Result<()> {
    archive.file(in_l1, read(host)?, 0o755)?;
    let mut seen = BTreeSet::new();
    for lib in shared_libraries(host)? {
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
    Ok(())
}

/// Appends a dynamically linked host binary at `in_l1`, with its shared
/// libraries in [`l1::LIB_DIR`] and its loader at [`l1::LOADER`], to an
/// initramfs, as a second archive.
pub fn append_dynamic(cpio: &mut Vec<u8>, host: &Path, in_l1: &str) -> Result<()> {
    let mut extra = Archive::new();
    add_dynamic(&mut extra, host, in_l1)?;
    cpio.extend(extra.to_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lists_absolute_library_paths() {
        let libs = shared_libraries(Path::new(HOST_QEMU)).unwrap();
        assert!(libs.iter().all(|p| p.is_absolute() && p.exists()));
        assert!(libs
            .iter()
            .any(|p| p.to_string_lossy().contains("ld-linux")));
    }
}
