//! The host tools a kernel build needs, installed with apt-get when missing
//! (as root on Debian); otherwise a clear error naming the packages.

use crate::{Error, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Once;

/// (file that proves the tool is there, Debian package providing it).
const BUILD_TOOLS: &[(&str, &str)] = &[
    ("make", "make"),
    ("gcc", "gcc"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("cpio", "cpio"),
    ("patch", "patch"),
    ("xz", "xz-utils"),
    ("perl", "perl"),
    ("/usr/include/libelf.h", "libelf-dev"),
    ("/usr/include/openssl/ssl.h", "libssl-dev"),
];

/// Whether `name` (a command, or an absolute path) exists.
fn present(name: &str) -> bool {
    if name.starts_with('/') {
        return Path::new(name).exists();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Makes sure every kernel build tool is installed.
pub fn ensure_build_tools() -> Result<()> {
    let missing: Vec<&str> = BUILD_TOOLS
        .iter()
        .filter(|(file, _)| !present(file))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(&missing)
}

/// `apt-get install` as root (running `apt-get update` once per process
/// first); without root or apt-get, an error naming what to install.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let list = packages.join(" ");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !present("apt-get") {
        return Err(Error::Build(format!(
            "missing kernel build dependencies; install them with: apt-get install {list}"
        )));
    }
    eprintln!("xvmm: installing {list}");
    static UPDATE: Once = Once::new();
    UPDATE.call_once(|| {
        let _ = apt_get(&["update", "-q"]);
    });
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend_from_slice(packages);
    if apt_get(&args)? {
        Ok(())
    } else {
        Err(Error::Build(format!("apt-get install {list} failed")))
    }
}

fn apt_get(args: &[&str]) -> Result<bool> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| Error::Build(format!("running apt-get: {e}")))?;
    Ok(status.success())
}

/// First line of `gcc --version`: part of the cache key.
pub fn compiler_identity() -> Result<String> {
    let out = Command::new("gcc")
        .arg("--version")
        .output()
        .map_err(|e| Error::Build(format!("running gcc --version: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_commands_on_path_and_absolute_files() {
        assert!(present("sh"));
        assert!(present("/"));
        assert!(!present("xvmm-no-such-tool"));
        assert!(!present("/nonexistent/file"));
    }
}
