//! The host tools a kernel build needs. xvmm never installs packages: a
//! missing tool is an error naming it and how to install it
//! (`harness/setup.sh` installs everything the project needs).

use crate::error::{Error, Result};
use std::path::Path;
use std::process::Command;

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

/// Fails, naming every missing tool and its package, unless all of `tools`
/// are present.
fn check(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&(&str, &str)> = tools.iter().filter(|(file, _)| !present(file)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = missing
        .iter()
        .map(|(file, pkg)| {
            let file = Path::new(file)
                .file_name()
                .map_or(*file, |n| n.to_str().unwrap_or(file));
            format!("{file} ({pkg})")
        })
        .collect();
    let packages: Vec<&str> = missing.iter().map(|(_, pkg)| *pkg).collect();
    Err(Error::Build(format!(
        "missing kernel build tools: {}; install them with harness/setup.sh or \
         apt-get install {}",
        names.join(", "),
        packages.join(" ")
    )))
}

/// Fails with one line naming what to install unless every kernel build
/// tool is present.
pub fn check_build_tools() -> Result<()> {
    check(BUILD_TOOLS)
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

    #[test]
    fn missing_tools_are_named_with_their_packages_in_one_line() {
        assert!(check(&[("sh", "dash"), ("/", "base-files")]).is_ok());
        let err = check(&[
            ("sh", "dash"),
            ("xvmm-no-such-tool", "xvmm-tool-pkg"),
            ("/nonexistent/include/nosuch.h", "libnosuch-dev"),
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "build: missing kernel build tools: xvmm-no-such-tool (xvmm-tool-pkg), \
             nosuch.h (libnosuch-dev); install them with harness/setup.sh or \
             apt-get install xvmm-tool-pkg libnosuch-dev"
        );
    }
}
