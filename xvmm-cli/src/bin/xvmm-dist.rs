//! Writes what a package installs beside the binaries (deploy/deb/build.sh):
//!
//!     xvmm-dist OUT_DIR XPERF
//!
//! OUT_DIR/man1/*.1: xvmm's pages from its clap definitions, xperf's from
//! the usage texts that the XPERF binary prints (`--help`, `SUB --help`),
//! so that the pages describe the very binary packaged;
//! OUT_DIR/completions/{bash/xvmm,zsh/_xvmm,fish/xvmm.fish}.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use xvmm_cli::dist;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [out, xperf] = args.as_slice() else {
        eprintln!("usage: xvmm-dist OUT_DIR XPERF (the xperf binary to read the usage texts of)");
        return ExitCode::from(2);
    };
    match write_all(out, xperf) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xvmm-dist: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_all(out: &Path, xperf: &Path) -> Result<(), String> {
    let man = out.join("man1");
    let mut pages = dist::xvmm_pages();
    let version = run(xperf, &["--version"])?;
    let version = version.trim().strip_prefix("xperf ").ok_or_else(|| {
        format!(
            "{} --version printed {version:?}, not \"xperf VERSION\"",
            xperf.display()
        )
    })?;
    let main_usage = run(xperf, &["--help"])?;
    pages.extend(dist::xperf_pages(&main_usage, version, |sub| {
        run(xperf, &[sub, "--help"])
    })?);
    for page in &pages {
        write(&man, &page.name, &page.bytes)?;
    }
    for (shell, file) in dist::xvmm_completions() {
        write(
            &out.join("completions").join(shell.to_string()),
            &file.name,
            &file.bytes,
        )?;
    }
    Ok(())
}

/// XPERF's stdout for `args`, which must succeed.
fn run(xperf: &Path, args: &[&str]) -> Result<String, String> {
    let what = format!("{} {}", xperf.display(), args.join(" "));
    let output = Command::new(xperf)
        .args(args)
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("{what}: {e}"))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
