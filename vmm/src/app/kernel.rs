//! `xvmm kernel build` and `xvmm kernel hooks`.

use super::cli::{KernelBuildArgs, KernelFlavour};
use crate::kernel::{self, hooks, BuildRequest, Flavour};
use crate::progress::Progress;
use crate::{Error, Result};
use std::path::Path;

/// Prints a kernel build's messages to stderr as `xvmm: ...` lines (a build
/// reports only messages, no stages).
struct BuildMessages;

impl Progress for BuildMessages {
    fn begin(&self, _what: &str, _total: u64) {}
    fn step(&self, _next: &str) {}
    fn message(&self, text: &str) {
        eprintln!("xvmm: {text}");
    }
    fn finish(&self) {}
}

impl From<KernelFlavour> for Flavour {
    fn from(f: KernelFlavour) -> Flavour {
        match f {
            KernelFlavour::Guest => Flavour::Guest,
            KernelFlavour::Host => Flavour::Host,
        }
    }
}

/// `xvmm kernel build`: prints the artefact paths (or JSON).
pub fn build(args: &KernelBuildArgs) -> Result<()> {
    if args.jobs == Some(0) {
        return Err(Error::Usage("--jobs must be at least 1".into()));
    }
    let flavour = Flavour::from(args.flavour);
    let request = BuildRequest {
        flavour,
        patched: args.patched,
        source: args.source.clone(),
        cache: args.cache.clone(),
        jobs: args.jobs,
    };
    let built = kernel::build(&request, &BuildMessages)?;
    if args.json {
        let json = serde_json::json!({
            "flavour": flavour.name(),
            "patched": args.patched,
            "bzimage": built.bzimage,
            "vmlinux": built.vmlinux,
            "config": built.config,
            "system_map": built.system_map,
            "key": built.key,
            "cached": built.cached,
            "seconds": built.seconds,
        });
        println!("{json}");
    } else {
        println!("bzImage: {}", built.bzimage.display());
        println!("vmlinux: {}", built.vmlinux.display());
        println!("config: {}", built.config.display());
        let how = if built.cached { "cache hit" } else { "built" };
        eprintln!("xvmm: {how} in {:.2} s", built.seconds);
    }
    Ok(())
}

/// `xvmm kernel hooks VMLINUX`: prints every hook site; an error when one is
/// not a NOP as linked, or when there are none.
pub fn hooks(vmlinux: &Path) -> Result<()> {
    let data = std::fs::read(vmlinux).map_err(|e| Error::io("cannot read", vmlinux, e))?;
    let sites = hooks::find(&data).map_err(|e| match e {
        Error::Kernel(m) => Error::Kernel(format!("{}: {m}", vmlinux.display())),
        other => other,
    })?;
    print!("{}", hooks::table(&sites));
    let not_nops = sites.iter().filter(|s| !s.is_nop()).count();
    if sites.is_empty() || not_nops > 0 {
        return Err(Error::Kernel(format!(
            "{}: {not_nops} of {} xperf hook sites are not NOPs as linked",
            vmlinux.display(),
            sites.len()
        )));
    }
    println!(
        "{} xperf hook sites, every one a NOP as linked (hooks off)",
        sites.len()
    );
    Ok(())
}
