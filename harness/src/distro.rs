//! Debian's stock kernels, as users run them: fetched with `apt-get
//! download` and unpacked with `dpkg-deb` (never installed), kept in the
//! kernel cache (`<cache>/distro/<the .deb's file name>/`) so a second run
//! neither downloads nor unpacks. Only `/boot` is kept (the compressed
//! kernel, its config and System.map), and the `kvm` modules with what they
//! depend on, for booting the kernel as the L1 host.

use crate::build::kernel_error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xvmm::{Error, Result};
use xvmm_kernel::cache::{self, CacheLock};

/// Debian 12's kernel (6.1), by the metapackage that follows its updates.
pub const DEBIAN_12_KERNEL: &str = "linux-image-amd64";
/// Debian's 6.12 kernel (Debian 13's line, in Debian 12's backports),
/// built with `CONFIG_X86_KERNEL_IBT`: every function that may be called
/// indirectly starts with ENDBR64, on any CPU.
pub const DEBIAN_612_KERNEL: &str = "linux-image-6.12-amd64";

/// One unpacked kernel package.
#[derive(Clone, Debug)]
pub struct DistroKernel {
    /// The versioned package (`linux-image-6.1.0-56-amd64`).
    pub package: String,
    /// The .deb it came from.
    pub deb: String,
    /// `boot/vmlinuz-<release>`: a bzImage.
    pub vmlinuz: PathBuf,
    /// `boot/config-<release>`.
    pub config: PathBuf,
    /// `uname -r` of the kernel (`6.1.0-56-amd64`).
    pub release: String,
    /// The `kvm` modules and what they need, in load order.
    pub modules: Vec<PathBuf>,
}

impl DistroKernel {
    /// Whether the kernel's config sets `option` (`CONFIG_X86_KERNEL_IBT`) to y.
    pub fn config_has(&self, option: &str) -> Result<bool> {
        let text = std::fs::read_to_string(&self.config)
            .map_err(|e| Error::io("reading", &self.config, e))?;
        Ok(config_sets(&text, option))
    }
}

/// Whether a kernel config text sets `option=y`.
pub fn config_sets(config: &str, option: &str) -> bool {
    config
        .lines()
        .any(|l| l.strip_prefix(option).and_then(|r| r.strip_prefix('=')) == Some("y"))
}

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Build(format!("{what}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Build(format!(
            "{what} failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The package a metapackage depends on (`Depends: linux-image-6.1.0-56-amd64`
/// in `apt-cache depends`), or the package itself when it is not one.
pub fn versioned_package(depends: &str, package: &str) -> String {
    depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(str::trim)
        .find(|d| d.starts_with("linux-image-") && !d.starts_with('<'))
        .unwrap_or(package)
        .to_string()
}

/// The .deb's file name in `apt-get download --print-uris` output
/// (`'URI' NAME SIZE SHA256:...`).
pub fn deb_file_name(print_uris: &str) -> Option<String> {
    print_uris.lines().find_map(|l| {
        let name = l.split_whitespace().nth(1)?;
        (name.ends_with(".deb") && !name.contains('/')).then(|| name.to_string())
    })
}

/// The versioned package behind `package` and its .deb's file name, as
/// apt's lists name them.
fn candidate(package: &str) -> Result<(String, String)> {
    let depends = run(
        Command::new("apt-cache").args(["depends", package]),
        "apt-cache depends",
    )?;
    let versioned = versioned_package(&depends, package);
    let uris = run(
        Command::new("apt-get").args(["download", "--print-uris", &versioned]),
        "apt-get download --print-uris",
    )?;
    let deb = deb_file_name(&uris).ok_or_else(|| {
        Error::Build(format!(
            "apt-get names no .deb for {versioned} (apt-get update first?)"
        ))
    })?;
    Ok((versioned, deb))
}

/// The kernel of `package` (a metapackage is followed to its kernel),
/// downloaded and unpacked once. A version the cache lacks is looked up
/// again after `apt-get update`: lists from an earlier day may name a .deb
/// the archive has replaced.
pub fn debian_kernel(package: &str) -> Result<DistroKernel> {
    let root = cache::root(None).map_err(kernel_error)?.join("distro");
    let mut named = candidate(package);
    let cached = |deb: &str| find_kernel(&root.join(deb.trim_end_matches(".deb")));
    if named
        .as_ref()
        .map_or(true, |(_, deb)| cached(deb).is_none())
    {
        // Without root the old lists stay, and the download says why.
        let _ = run(
            Command::new("apt-get").args(["update", "-q"]),
            "apt-get update",
        );
        named = candidate(package);
    }
    let (versioned, deb) = named?;
    let dir = root.join(deb.trim_end_matches(".deb"));
    let _lock = CacheLock::acquire(&root, &deb).map_err(kernel_error)?;
    if find_kernel(&dir).is_none() || !dir.join(MODULE_ORDER).exists() {
        let tmp = cache::fresh_tmp_dir(&root, &deb).map_err(kernel_error)?;
        unpack(&versioned, &tmp)?;
        cache::publish(&tmp, &dir).map_err(kernel_error)?;
    }
    let (vmlinuz, release) =
        find_kernel(&dir).ok_or_else(|| Error::Build(format!("{deb} holds no boot/vmlinuz-*")))?;
    let modules = std::fs::read_to_string(dir.join(MODULE_ORDER))
        .unwrap_or_default()
        .lines()
        .map(|l| dir.join(l))
        .collect();
    Ok(DistroKernel {
        package: versioned,
        modules,
        config: dir.join("boot").join(format!("config-{release}")),
        deb,
        vmlinuz,
        release,
    })
}

/// Downloads `package` into `tmp` and keeps its `/boot` and the KVM
/// modules with what they need ([`MODULE_ORDER`]) there.
fn unpack(package: &str, tmp: &Path) -> Result<()> {
    run(
        Command::new("apt-get")
            .args(["download", package])
            .current_dir(tmp),
        "apt-get download",
    )?;
    let deb = std::fs::read_dir(tmp)
        .map_err(|e| Error::io("reading", tmp, e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| Error::Build(format!("apt-get download left no .deb for {package}")))?;
    extract(&deb, tmp, "./boot")?;
    unpack_kvm_modules(&deb, tmp)?;
    std::fs::remove_file(&deb).map_err(|e| Error::io("removing", &deb, e))
}

/// Extracts `member` (a file or directory of the package) into `dir`.
fn extract(deb: &Path, dir: &Path, member: &str) -> Result<()> {
    let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -x -C \"$2\" \"$3\"";
    run(
        Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(deb)
            .arg(dir)
            .arg(member),
        "dpkg-deb | tar",
    )
    .map(drop)
}

/// The modules an L1 loads to serve `/dev/kvm`.
const KVM_MODULES: [&str; 2] = ["kvm_amd", "kvm_intel"];
/// In a cache entry: the module files to load, relative to it, one a line,
/// each after the modules it depends on.
pub const MODULE_ORDER: &str = "modules.order";

/// A module's name as `depends=` writes it (`kvm-amd.ko` is `kvm_amd`).
fn module_name(file: &str) -> Option<String> {
    let stem = file.rsplit('/').next()?.strip_suffix(".ko")?;
    Some(stem.replace('-', "_"))
}

/// The `depends=` list of a module file's `.modinfo` (NUL-separated
/// `key=value` strings).
pub fn module_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .find_map(|field| field.strip_prefix(b"depends="))
        .map(|list| {
            String::from_utf8_lossy(list)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// Extracts [`KVM_MODULES`] and, depth first, every module they depend on,
/// and writes [`MODULE_ORDER`]. A package whose modules are compressed
/// (`.ko.xz`) gives an empty order: `finit_module` would need the kernel's
/// own decompression.
fn unpack_kvm_modules(deb: &Path, dir: &Path) -> Result<()> {
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(deb), "dpkg-deb -c")?;
    let paths: std::collections::BTreeMap<String, String> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|p| Some((module_name(p)?, p.to_string())))
        .collect();
    let mut order = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for name in KVM_MODULES {
        add_module(deb, dir, &paths, name, &mut seen, &mut order)?;
    }
    let file = dir.join(MODULE_ORDER);
    std::fs::write(&file, order.join("\n")).map_err(|e| Error::io("writing", &file, e))
}

fn add_module(
    deb: &Path,
    dir: &Path,
    paths: &std::collections::BTreeMap<String, String>,
    name: &str,
    seen: &mut std::collections::BTreeSet<String>,
    order: &mut Vec<String>,
) -> Result<()> {
    if !seen.insert(name.to_string()) {
        return Ok(());
    }
    let Some(path) = paths.get(name) else {
        return Ok(()); // built in, or not in this package
    };
    extract(deb, dir, path)?;
    let file = dir.join(path);
    let ko = std::fs::read(&file).map_err(|e| Error::io("reading", &file, e))?;
    for dep in module_depends(&ko) {
        add_module(deb, dir, paths, &dep, seen, order)?;
    }
    order.push(path.trim_start_matches("./").to_string());
    Ok(())
}

/// `boot/vmlinuz-<release>` in an unpacked package, and the release.
fn find_kernel(dir: &Path) -> Option<(PathBuf, String)> {
    std::fs::read_dir(dir.join("boot"))
        .ok()?
        .flatten()
        .find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let release = name.strip_prefix("vmlinuz-")?.to_string();
            Some((e.path(), release))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_output_names_the_kernel_and_its_deb() {
        let depends = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            versioned_package(depends, "linux-image-amd64"),
            "linux-image-6.1.0-56-amd64"
        );
        // A virtual package's alternatives (<...>) and other dependencies are no kernel.
        let odd = "x\n  Depends: <linux-image-virtual>\n  Depends: initramfs-tools\n";
        assert_eq!(versioned_package(odd, "x"), "x");
        let uris = "'http://deb.debian.org/debian/pool/main/l/linux-signed-amd64/linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb' linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb 70550672 SHA256:00\n";
        assert_eq!(
            deb_file_name(uris).as_deref(),
            Some("linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb")
        );
        assert_eq!(deb_file_name("'u' ../evil.deb 1 SHA256:0\n"), None);
        assert_eq!(deb_file_name(""), None);
    }

    #[test]
    fn module_dependencies_come_from_modinfo() {
        let ko = b"\x7fELF...\0license=GPL\0depends=kvm,ccp-x\0retpoline=Y\0intree=Y\0";
        assert_eq!(module_depends(ko), ["kvm", "ccp_x"]);
        assert!(module_depends(b"\0depends=\0name=ccp\0").is_empty());
        assert!(module_depends(b"no modinfo").is_empty());
        assert_eq!(
            module_name("./lib/modules/6.1.0-56-amd64/kernel/arch/x86/kvm/kvm-amd.ko").as_deref(),
            Some("kvm_amd")
        );
        assert_eq!(module_name("./lib/modules/x/kvm.ko.xz"), None);
    }

    #[test]
    fn a_config_option_is_set_only_by_its_own_line() {
        let config = "CONFIG_KPROBES=y\n# CONFIG_X86_KERNEL_IBT is not set\nCONFIG_KVM=m\nCONFIG_KPROBES_ON_FTRACE=y\n";
        assert!(config_sets(config, "CONFIG_KPROBES"));
        assert!(!config_sets(config, "CONFIG_X86_KERNEL_IBT"));
        assert!(!config_sets(config, "CONFIG_KVM"), "a module is not y");
        assert!(
            !config_sets(config, "CONFIG_KPROBE"),
            "a prefix is not the option"
        );
    }
}
