//! Where the kernel source comes from: Debian's linux-source tarball or a
//! tree/tarball given on the command line; its identity for the cache key;
//! extracting it (cached) and applying the measurement patches.

use super::cache::{self, CacheLock};
use super::key::KeyInputs;
use crate::error::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;
use xvmm_results::progress::Progress;

use super::LinuxVersion;

/// A kernel source as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A (compressed) tar archive holding one top-level source directory.
    Tarball(PathBuf),
    /// An unpacked source tree (must not have been built in-tree).
    Tree(PathBuf),
}

impl Source {
    /// Resolves `--source`, or Debian's tarball of `version` (an error
    /// naming the package when it is not installed).
    pub fn resolve(given: Option<&Path>, version: LinuxVersion) -> Result<Source> {
        let path = match given {
            Some(p) => p.to_path_buf(),
            None => installed_default(Path::new(&version.debian_tarball()), version)?,
        };
        let path = fs::canonicalize(&path)
            .map_err(|e| Error::Build(format!("kernel source {}: {e}", path.display())))?;
        if path.is_dir() {
            if !path.join("Makefile").is_file() || !path.join("arch/x86").is_dir() {
                return Err(Error::Build(format!(
                    "kernel source {} is not a Linux source tree (no Makefile or arch/x86)",
                    path.display()
                )));
            }
            Ok(Source::Tree(path))
        } else {
            Ok(Source::Tarball(path))
        }
    }

    /// A string that changes whenever the source may have changed: tarball
    /// path+size+mtime, or tree path+kernel version from its Makefile.
    pub fn identity(&self) -> Result<String> {
        match self {
            Source::Tarball(p) => {
                let meta = fs::metadata(p).map_err(|e| Error::io("reading", p, e))?;
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                Ok(format!("tarball:{}:{}:{}", p.display(), meta.len(), mtime))
            }
            Source::Tree(p) => {
                let makefile = p.join("Makefile");
                let text = fs::read_to_string(&makefile)
                    .map_err(|e| Error::io("reading", &makefile, e))?;
                Ok(format!("tree:{}:{}", p.display(), makefile_version(&text)))
            }
        }
    }
}

/// `tarball` when it exists; otherwise one line naming it and how to install
/// it (xvmm installs nothing itself).
fn installed_default(tarball: &Path, version: LinuxVersion) -> Result<PathBuf> {
    if tarball.exists() {
        return Ok(tarball.to_path_buf());
    }
    Err(Error::Build(format!(
        "kernel source {} is missing; install it with harness/setup.sh or \
         apt-get install {}, or pass --source",
        tarball.display(),
        version.debian_package()
    )))
}

/// `VERSION.PATCHLEVEL.SUBLEVEL EXTRAVERSION` from a top-level kernel Makefile.
pub fn makefile_version(makefile: &str) -> String {
    let field = |name: &str| {
        makefile
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    format!(
        "{}.{}.{}{}",
        field("VERSION"),
        field("PATCHLEVEL"),
        field("SUBLEVEL"),
        field("EXTRAVERSION")
    )
}

/// Returns a source tree ready for an out-of-tree build with `patches`
/// applied. Tarballs are extracted once into the cache (keyed by the source
/// identity and the patches); an unpatched tree is used in place.
pub fn prepare(
    source: &Source,
    patches: &[(PathBuf, Vec<u8>)],
    cache_root: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf> {
    if let (Source::Tree(tree), true) = (source, patches.is_empty()) {
        return Ok(tree.clone());
    }
    let key = KeyInputs {
        source: source.identity()?,
        fragments: vec![],
        // Names, not paths: a moved checkout must not invalidate the cache.
        patches: patches
            .iter()
            .map(|(p, c)| {
                let name = p.file_name().unwrap_or(p.as_os_str());
                (name.to_string_lossy().into_owned(), c.clone())
            })
            .collect(),
        flavour: "source".into(),
        make_command: vec![],
        toolchain: String::new(),
    }
    .key();
    let sources = cache_root.join("src");
    let final_dir = sources.join(&key[..16]);
    let tree = final_dir.join("linux");
    if tree.join("Makefile").is_file() {
        return Ok(tree);
    }
    let _lock = CacheLock::acquire(cache_root, &key)?;
    if tree.join("Makefile").is_file() {
        return Ok(tree);
    }
    let tmp = cache::fresh_tmp_dir(&sources, &key[..16])?;
    let result = (|| {
        let staged = tmp.join("linux");
        match source {
            Source::Tarball(tarball) => extract(tarball, &tmp, &staged, progress)?,
            Source::Tree(src) => {
                progress.message(&format!("copying {} to apply patches", src.display()));
                run(Command::new("cp").arg("-a").arg(src).arg(&staged), "cp -a")?;
            }
        }
        for (patch, _) in patches {
            apply_patch(&staged, patch, progress)?;
        }
        cache::publish(&tmp, &final_dir)
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result?;
    Ok(tree)
}

/// Extracts `tarball` into `scratch` and moves its single top-level directory
/// to `dest`.
fn extract(tarball: &Path, scratch: &Path, dest: &Path, progress: &dyn Progress) -> Result<()> {
    progress.message(&format!("extracting {}", tarball.display()));
    let unpack = scratch.join("unpack");
    fs::create_dir_all(&unpack).map_err(|e| Error::io("creating", &unpack, e))?;
    run(
        Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&unpack),
        &format!("tar -xf {}", tarball.display()),
    )?;
    let top: Vec<PathBuf> = fs::read_dir(&unpack)
        .map_err(|e| Error::io("reading", &unpack, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Makefile").is_file())
        .collect();
    match top.as_slice() {
        [one] => {
            fs::rename(one, dest).map_err(|e| Error::io("moving", one, e))?;
            let _ = fs::remove_dir_all(&unpack);
            Ok(())
        }
        _ => Err(Error::Build(format!(
            "{} does not hold exactly one kernel source directory",
            tarball.display()
        ))),
    }
}

/// Applies one patch with `patch -p1` (fails on rejects or fuzzless mismatch).
fn apply_patch(tree: &Path, patch: &Path, progress: &dyn Progress) -> Result<()> {
    progress.message(&format!("applying {}", patch.display()));
    let out = Command::new("patch")
        .args(["-p1", "--batch", "--forward", "--quiet", "-i"])
        .arg(patch)
        .current_dir(tree)
        .output()
        .map_err(|e| Error::Build(format!("running patch: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let detail = String::from_utf8_lossy(&out.stdout);
    let first = detail.lines().next().unwrap_or("").trim();
    Err(Error::Build(format!(
        "patch {} does not apply: {first}",
        patch.display()
    )))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| Error::Build(format!("running {what}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Build(format!("{what} failed ({status})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_version_from_makefile() {
        let mk = "# SPDX\nVERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 117\nEXTRAVERSION = -rc1\nNAME = Baby Opossum Posse\n";
        assert_eq!(makefile_version(mk), "6.12.117-rc1");
    }

    #[test]
    fn tree_identity_changes_with_version() {
        let dir = std::env::temp_dir().join(format!("xvmm-src-id-{}", std::process::id()));
        fs::create_dir_all(dir.join("arch/x86")).unwrap();
        fs::write(
            dir.join("Makefile"),
            "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 1\n",
        )
        .unwrap();
        let src = Source::resolve(Some(&dir), LinuxVersion::V6_12).unwrap();
        let a = src.identity().unwrap();
        fs::write(
            dir.join("Makefile"),
            "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 2\n",
        )
        .unwrap();
        let b = src.identity().unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(src, Source::Tree(_)));
        assert_ne!(a, b);
    }

    #[test]
    fn rejects_directory_that_is_not_a_kernel() {
        let dir = std::env::temp_dir().join(format!("xvmm-src-bad-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let err = Source::resolve(Some(&dir), LinuxVersion::V6_12)
            .unwrap_err()
            .to_string();
        fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("not a Linux source tree"), "{err}");
    }

    #[test]
    fn missing_default_tarball_names_the_package_to_install() {
        let err = installed_default(
            Path::new("/nonexistent/linux-source-6.1.tar.xz"),
            LinuxVersion::V6_1,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "build: kernel source /nonexistent/linux-source-6.1.tar.xz is missing; \
             install it with harness/setup.sh or apt-get install linux-source-6.1, \
             or pass --source"
        );
        let here = std::env::current_exe().unwrap();
        assert_eq!(installed_default(&here, LinuxVersion::V6_12).unwrap(), here);
    }

    #[test]
    fn missing_source_is_a_clear_error() {
        let err = Source::resolve(Some(Path::new("/nonexistent/linux")), LinuxVersion::V6_12)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("build: kernel source /nonexistent/linux:"),
            "{err}"
        );
    }
}
