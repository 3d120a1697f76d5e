//! What the harness boots: the L1 (host) and L2 (guest) kernels through
//! xvmm's kernel cache, and static builds of xvmm, `xvmm-init` and
//! `l1-init`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xvmm::progress::Silent;
use xvmm::{Error, Result};
use xvmm_kernel::{self as kernel, BuildRequest, BuiltKernel, Flavour, LinuxVersion};

/// Everything the harness boots, built (or found in the caches).
#[derive(Clone, Debug)]
pub struct Artifacts {
    pub l1_kernel: BuiltKernel,
    pub l2_kernel: BuiltKernel,
    /// The static xvmm (runs in L1; runs on the host as well).
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

/// The kernel builder's error in the harness's terms (xvmm's), with the
/// same text: the harness runs both, and neither library knows the other's
/// errors.
pub fn kernel_error(e: xvmm_kernel::Error) -> Error {
    match e {
        xvmm_kernel::Error::Build(m) => Error::Build(m),
        xvmm_kernel::Error::Image(m) => Error::Kernel(m),
        xvmm_kernel::Error::Io(m) => Error::Io(m),
    }
}

/// Builds (or reuses) the unpatched L1 and L2 kernels and the static
/// binaries.
pub fn prepare() -> Result<Artifacts> {
    let l1_kernel =
        kernel::build(&BuildRequest::new(Flavour::Host), &Silent).map_err(kernel_error)?;
    let l2_kernel =
        kernel::build(&BuildRequest::new(Flavour::Guest), &Silent).map_err(kernel_error)?;
    with_static_binaries(l1_kernel, l2_kernel, &[])
}

/// The patched L1 and L2 kernels of `version` and the static binaries with
/// xperf, and where the static xperf is (next to xvmm, where xvmm looks for
/// it).
pub fn prepare_patched_with_xperf(version: LinuxVersion) -> Result<(Artifacts, PathBuf)> {
    let build = |flavour| {
        let request = BuildRequest {
            patched: true,
            version,
            ..BuildRequest::new(flavour)
        };
        kernel::build(&request, &Silent).map_err(kernel_error)
    };
    let artifacts =
        with_static_binaries(build(Flavour::Host)?, build(Flavour::Guest)?, &["xperf"])?;
    let xperf = artifacts.xvmm.with_file_name("xperf");
    Ok((artifacts, xperf))
}

/// The artefacts for these kernels, after a static build of xvmm,
/// `xvmm-init`, `l1-init` and the `extra` packages (found in the same
/// directory as xvmm).
pub fn with_static_binaries(
    l1_kernel: BuiltKernel,
    l2_kernel: BuiltKernel,
    extra: &[&str],
) -> Result<Artifacts> {
    let mut packages = vec!["xvmm-cli", "xvmm-init"];
    packages.extend_from_slice(extra);
    let bin = build_static(&packages)?;
    Ok(Artifacts {
        l1_kernel,
        l2_kernel,
        xvmm: bin.join("xvmm"),
        xvmm_init: bin.join("xvmm-init"),
        l1_init: bin.join("l1-init"),
    })
}
