//! `xvmm kernel build` and `xvmm kernel hooks`.

use super::cli::{KernelBuildArgs, KernelFlavour, KernelVersion};
use super::output::{self, Stdout};
use super::progress::Terminal;
use crate::error::{Error, Result};
use std::path::Path;
use xvmm_kernel::{self as kernel, hooks, BuildRequest, Flavour, LinuxVersion};

impl From<KernelFlavour> for Flavour {
    fn from(f: KernelFlavour) -> Flavour {
        match f {
            KernelFlavour::Guest => Flavour::Guest,
            KernelFlavour::Host => Flavour::Host,
        }
    }
}

impl From<KernelVersion> for LinuxVersion {
    fn from(v: KernelVersion) -> LinuxVersion {
        match v {
            KernelVersion::V6_12 => LinuxVersion::V6_12,
            KernelVersion::V6_1 => LinuxVersion::V6_1,
        }
    }
}

/// `xvmm kernel build`: prints the artefact paths (or JSON).
pub fn build(args: &KernelBuildArgs, stdout: &Stdout) -> Result<()> {
    let flavour = Flavour::from(args.flavour);
    let version = LinuxVersion::from(args.version);
    let request = BuildRequest {
        flavour,
        version,
        patched: args.patched,
        source: args.source.clone(),
        cache: args.cache.clone(),
        jobs: args.jobs,
    };
    let built = kernel::build(&request, &Terminal::new(false))?;
    if args.json {
        let json = serde_json::json!({
            "flavour": flavour.name(),
            "version": version.name(),
            "patched": args.patched,
            "bzimage": built.bzimage,
            "vmlinux": built.vmlinux,
            "config": built.config,
            "system_map": built.system_map,
            "key": built.key,
            "cached": built.cached,
            "seconds": built.seconds,
        });
        stdout.print(&format!("{json}\n"));
    } else {
        stdout.print(&format!(
            "bzImage: {}\nvmlinux: {}\nconfig: {}\n",
            built.bzimage.display(),
            built.vmlinux.display(),
            built.config.display()
        ));
        let how = if built.cached { "cache hit" } else { "built" };
        output::eprint(&format!("xvmm: {how} in {:.2} s\n", built.seconds));
    }
    Ok(())
}

/// `xvmm kernel hooks VMLINUX`: prints every hook site; an error when one is
/// not a NOP as linked, or when there are none.
pub fn hooks(vmlinux: &Path, stdout: &Stdout) -> Result<()> {
    let data = super::input::read_regular(vmlinux, super::input::MAX_VMLINUX_BYTES, "vmlinux")?;
    let sites = hooks::find(&data).map_err(|e| match e {
        kernel::Error::Image(m) => kernel::Error::Image(format!("{}: {m}", vmlinux.display())),
        other => other,
    })?;
    stdout.print(&hooks::table(&sites));
    let not_nops = sites.iter().filter(|s| !s.is_nop()).count();
    if sites.is_empty() || not_nops > 0 {
        return Err(Error::Kernel(kernel::Error::Image(format!(
            "{}: {not_nops} of {} xperf hook sites are not NOPs as linked",
            vmlinux.display(),
            sites.len()
        ))));
    }
    stdout.print(&format!(
        "{} xperf hook sites, every one a NOP as linked (hooks off)\n",
        sites.len()
    ));
    Ok(())
}
