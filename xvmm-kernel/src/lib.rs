//! `xvmm kernel build`: builds a guest (L2) or harness host (L1) kernel out of
//! tree from tinyconfig plus the fragments in `patches/config/`, optionally
//! with the measurement patches, cached outside the checkout by its inputs.

pub mod cache;
pub mod error;
pub mod fragment;
pub mod hooks;
pub mod key;
pub mod source;
mod tools;

pub use error::{Error, Result};
use source::Source;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use xvmm_results::progress::Progress;

/// The fixed part of the build recipe; it is part of the cache key.
const MAKE_RECIPE: &[&str] = &[
    "ARCH=x86_64",
    "tinyconfig",
    "merge_config.sh -m",
    "olddefconfig",
    "vmlinux",
    "bzImage",
];

/// Patch files excluded from `--patched` (a series' cover letter is no patch).
const COVER_LETTER_PREFIX: &str = "0000-cover-letter";

/// Written last into a cache entry: its presence marks the entry complete.
const STAMP: &str = "xvmm-kernel.json";

/// Which kernel: the small L2 guest, or the nested harness's L1 host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// A small guest kernel (L2): serial console, initrd, PVH, KVM guest.
    Guest,
    /// The nested-harness host kernel (L1): the guest options plus KVM host support.
    Host,
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Guest => "guest",
            Flavour::Host => "host",
        }
    }
}

/// Which Linux release to build: where its source comes from
/// (`/usr/src/linux-source-V.tar.xz`, Debian's `linux-source-V`), which
/// patch series applies (`patches/linux-V/`), and which config fragments
/// replace the common ones (`patches/config/linux-V/NAME` over
/// `patches/config/NAME`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinuxVersion {
    /// Debian's linux-source-6.12 (the series' first home).
    #[default]
    V6_12,
    /// Debian's linux-source-6.1, the kernel of Debian 12 and its cloud images.
    V6_1,
}

impl LinuxVersion {
    pub const ALL: [LinuxVersion; 2] = [LinuxVersion::V6_12, LinuxVersion::V6_1];

    /// "6.12", "6.1".
    pub fn name(self) -> &'static str {
        match self {
            LinuxVersion::V6_12 => "6.12",
            LinuxVersion::V6_1 => "6.1",
        }
    }

    pub fn debian_package(self) -> String {
        format!("linux-source-{}", self.name())
    }

    pub fn debian_tarball(self) -> String {
        format!("/usr/src/linux-source-{}.tar.xz", self.name())
    }

    /// The directory of this version's patch series and fragment overrides.
    pub fn dir_name(self) -> String {
        format!("linux-{}", self.name())
    }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct BuildRequest {
    pub flavour: Flavour,
    pub version: LinuxVersion,
    pub patched: bool,
    pub source: Option<PathBuf>,
    pub cache: Option<PathBuf>,
    pub jobs: Option<usize>,
}

impl BuildRequest {
    /// An unpatched build of `flavour` from the default source and cache.
    pub fn new(flavour: Flavour) -> BuildRequest {
        BuildRequest {
            flavour,
            version: LinuxVersion::default(),
            patched: false,
            source: None,
            cache: None,
            jobs: None,
        }
    }
}

/// A finished build in the cache.
#[derive(Clone, Debug)]
pub struct BuiltKernel {
    pub bzimage: PathBuf,
    pub vmlinux: PathBuf,
    pub config: PathBuf,
    pub system_map: PathBuf,
    pub key: String,
    /// True when the cache already held this build.
    pub cached: bool,
    pub seconds: f64,
}

impl BuiltKernel {
    fn in_dir(dir: &Path, key: String, cached: bool, seconds: f64) -> BuiltKernel {
        BuiltKernel {
            bzimage: dir.join("bzImage"),
            vmlinux: dir.join("vmlinux"),
            config: dir.join("config"),
            system_map: dir.join("System.map"),
            key,
            cached,
            seconds,
        }
    }
}

/// The repository's `patches/` directory: `$XVMM_PATCHES`, else the one next
/// to this crate's sources, else the first `patches/config` above the cwd.
pub fn patches_dir() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XVMM_PATCHES").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../patches");
    if built_in.join("config").is_dir() {
        return Ok(fs::canonicalize(&built_in).unwrap_or(built_in));
    }
    let mut dir = std::env::current_dir().ok();
    while let Some(d) = dir {
        if d.join("patches/config").is_dir() {
            return Ok(d.join("patches"));
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    Err(Error::Build(
        "cannot find the patches/ directory (config fragments); set XVMM_PATCHES".into(),
    ))
}

/// Config fragments in merge order: guest first, host on top, then the
/// patch series' own fragment when patched and present, then the probes
/// fragment when present. Each is `config/linux-V/NAME` where the version
/// has its own, else `config/NAME`.
fn fragments(patches: &Path, req: &BuildRequest) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let config = patches.join("config");
    let own = config.join(req.version.dir_name());
    let path = |name: &str| {
        let p = own.join(name);
        if p.is_file() {
            p
        } else {
            config.join(name)
        }
    };
    let mut names = vec!["guest.config"];
    if req.flavour == Flavour::Host {
        names.push("host.config");
    }
    let mut paths: Vec<PathBuf> = names.iter().map(|n| path(n)).collect();
    let xperf = path("xperf.config");
    if req.patched && xperf.is_file() {
        paths.push(xperf);
    }
    // Instrumentation for `xperf probes`, in every kernel so that plain and
    // patched builds differ only by the patch series.
    let probes = path("probes.config");
    if probes.is_file() {
        paths.push(probes);
    }
    paths
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).map_err(|e| Error::io("reading fragment", &p, e))?;
            Ok((p, bytes))
        })
        .collect()
}

/// Every `patches/linux-V/*.patch` except the cover letter, in name order.
fn patch_series(patches: &Path, version: LinuxVersion) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let dir = patches.join(version.dir_name());
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| Error::io("reading", &dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.ends_with(".patch") && !n.starts_with(COVER_LETTER_PREFIX))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Build(format!(
            "--patched: no *.patch files in {}",
            dir.display()
        )));
    }
    files
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).map_err(|e| Error::io("reading patch", &p, e))?;
            Ok((p, bytes))
        })
        .collect()
}

/// The patch files of `version`'s series, in the order they apply.
pub fn series(version: LinuxVersion) -> Result<Vec<PathBuf>> {
    Ok(patch_series(&patches_dir()?, version)?
        .into_iter()
        .map(|(p, _)| p)
        .collect())
}

/// Debian's source of `version` with its series applied: the tree a patched
/// build compiles, extracted and patched once into the cache (`cache` as in
/// [`BuildRequest::cache`]).
pub fn patched_source(
    version: LinuxVersion,
    cache: Option<&Path>,
    progress: &dyn Progress,
) -> Result<PathBuf> {
    let series = patch_series(&patches_dir()?, version)?;
    let source = Source::resolve(None, version)?;
    let root = cache::root(cache)?;
    source::prepare(&source, &series, &root, progress)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The cache key of a build: every input that can change its result.
fn cache_key(
    source: &Source,
    frags: &[(PathBuf, Vec<u8>)],
    series: &[(PathBuf, Vec<u8>)],
    flavour: &str,
) -> Result<String> {
    let named = |files: &[(PathBuf, Vec<u8>)]| {
        files
            .iter()
            .map(|(p, c)| (file_name(p), c.clone()))
            .collect()
    };
    Ok(key::KeyInputs {
        source: source.identity()?,
        fragments: named(frags),
        patches: named(series),
        flavour: flavour.to_string(),
        make_command: MAKE_RECIPE.iter().map(|s| s.to_string()).collect(),
        toolchain: tools::compiler_identity()?,
    }
    .key())
}

/// Builds (or finds in the cache) the kernel `req` describes, reporting its
/// stages (extracting, patching, compiling) as `progress` messages.
pub fn build(req: &BuildRequest, progress: &dyn Progress) -> Result<BuiltKernel> {
    let started = Instant::now();
    let patches = patches_dir()?;
    let frags = fragments(&patches, req)?;
    let series = if req.patched {
        patch_series(&patches, req.version)?
    } else {
        Vec::new()
    };
    tools::check_build_tools()?;
    let source = Source::resolve(req.source.as_deref(), req.version)?;
    let flavour = req.flavour.name();
    let key = cache_key(&source, &frags, &series, flavour)?;
    let root = cache::root(req.cache.as_deref())?;
    let kernels = root.join("kernels");
    let variant = if req.patched { "patched" } else { "plain" };
    let entry_name = format!("{flavour}-{variant}-{}", &key[..16]);
    let entry = kernels.join(&entry_name);
    if entry.join(STAMP).is_file() {
        return Ok(BuiltKernel::in_dir(
            &entry,
            key,
            true,
            started.elapsed().as_secs_f64(),
        ));
    }
    let _lock = cache::CacheLock::acquire(&root, &key)?;
    if entry.join(STAMP).is_file() {
        return Ok(BuiltKernel::in_dir(
            &entry,
            key,
            true,
            started.elapsed().as_secs_f64(),
        ));
    }
    // One kernel build at a time per cache: each already uses every CPU
    // (make -jN), and two at once only thrash (measured: 700 s instead of 300).
    let _make = cache::CacheLock::acquire_or_wait(&root, "make", || {
        progress.message("waiting for another kernel build to finish")
    })?;
    let tree = source::prepare(&source, &series, &root, progress)?;
    let tmp = cache::fresh_tmp_dir(&kernels, &entry_name)?;
    let jobs = req
        .jobs
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1);
    let result = compile(&tree, &tmp, &frags, jobs, progress).and_then(|()| {
        let seconds = started.elapsed().as_secs_f64();
        let stamp = serde_json::json!({
            "flavour": flavour,
            "version": req.version.name(),
            "patched": req.patched,
            "key": key,
            "source": source.identity()?,
            "fragments": frags.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
            "patches": series.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
            "build_seconds": seconds,
        });
        let stamp_path = tmp.join(STAMP);
        fs::write(&stamp_path, stamp.to_string())
            .map_err(|e| Error::io("writing", &stamp_path, e))?;
        cache::publish(&tmp, &entry)?;
        Ok(seconds)
    });
    match result {
        Ok(seconds) => Ok(BuiltKernel::in_dir(&entry, key, false, seconds)),
        Err(e) => {
            // Keep the log for diagnosis; drop the half-built tree.
            let _ = fs::remove_dir_all(tmp.join("build"));
            Err(e)
        }
    }
}

/// Configures and builds in `dir/build`, then keeps only the artefacts.
fn compile(
    tree: &Path,
    dir: &Path,
    frags: &[(PathBuf, Vec<u8>)],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<()> {
    let out = dir.join("build");
    fs::create_dir_all(&out).map_err(|e| Error::io("creating", &out, e))?;
    let log_path = dir.join("build.log");
    let log = fs::File::create(&log_path).map_err(|e| Error::io("creating", &log_path, e))?;
    progress.message(&format!(
        "building kernel in {} (log: {})",
        out.display(),
        log_path.display()
    ));
    let step = |args: &[String], what: &str| -> Result<()> {
        let clone = |f: &fs::File| {
            f.try_clone()
                .map_err(|e| Error::io("logging to", &log_path, e))
        };
        let status = Command::new(args[0].as_str())
            .args(&args[1..])
            .current_dir(tree)
            .stdin(Stdio::null())
            .stdout(clone(&log)?)
            .stderr(clone(&log)?)
            .status()
            .map_err(|e| Error::Build(format!("running {what}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Build(format!(
                "{what} failed ({status}); see {}",
                log_path.display()
            )))
        }
    };
    let o = format!("O={}", out.display());
    let make = |targets: &[&str]| -> Vec<String> {
        let mut v = vec!["make".to_string(), "ARCH=x86_64".to_string(), o.clone()];
        v.extend(targets.iter().map(|s| s.to_string()));
        v
    };
    step(&make(&["tinyconfig"]), "make tinyconfig")?;
    let mut merge = vec![
        "scripts/kconfig/merge_config.sh".to_string(),
        "-m".to_string(),
        "-O".to_string(),
        out.display().to_string(),
        out.join(".config").display().to_string(),
    ];
    merge.extend(frags.iter().map(|(p, _)| p.display().to_string()));
    step(&merge, "merge_config.sh")?;
    step(&make(&["olddefconfig"]), "make olddefconfig")?;
    check_config(&out.join(".config"), frags)?;
    step(
        &make(&[&format!("-j{jobs}"), "vmlinux", "bzImage"]),
        "make vmlinux bzImage",
    )?;
    for (from, to) in [
        ("arch/x86/boot/bzImage", "bzImage"),
        ("vmlinux", "vmlinux"),
        (".config", "config"),
        ("System.map", "System.map"),
    ] {
        let src = out.join(from);
        fs::rename(&src, dir.join(to)).map_err(|e| Error::io("collecting", &src, e))?;
    }
    fs::remove_dir_all(&out).map_err(|e| Error::io("removing", &out, e))
}

/// Fails if Kconfig dropped or changed any option a fragment asked for.
fn check_config(config: &Path, frags: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    let final_config = fs::read_to_string(config).map_err(|e| Error::io("reading", config, e))?;
    let requested = fragment::requests(
        &frags
            .iter()
            .map(|(p, c)| (file_name(p), String::from_utf8_lossy(c).into_owned()))
            .collect::<Vec<_>>(),
    );
    let unmet = fragment::unmet(&requested, &final_config);
    if unmet.is_empty() {
        Ok(())
    } else {
        Err(Error::Build(format!(
            "options requested by the config fragments are not in the final .config \
             (unmet dependencies?): {}",
            unmet.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xvmm-kernel-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("linux-6.12")).unwrap();
        fs::create_dir_all(d.join("config")).unwrap();
        d
    }

    #[test]
    fn patch_series_is_sorted_and_skips_the_cover_letter() {
        let d = scratch("series");
        for name in [
            "0002-b.patch",
            "0000-cover-letter.patch",
            "0001-a.patch",
            "README.md",
        ] {
            fs::write(d.join("linux-6.12").join(name), name).unwrap();
        }
        fs::create_dir_all(d.join("linux-6.1")).unwrap();
        fs::write(d.join("linux-6.1/0001-c.patch"), "c").unwrap();
        let names = |version| -> Vec<String> {
            patch_series(&d, version)
                .unwrap()
                .iter()
                .map(|(p, _)| file_name(p))
                .collect()
        };
        assert_eq!(names(LinuxVersion::V6_12), ["0001-a.patch", "0002-b.patch"]);
        assert_eq!(names(LinuxVersion::V6_1), ["0001-c.patch"]);
        fs::remove_file(d.join("linux-6.12/0001-a.patch")).unwrap();
        fs::remove_file(d.join("linux-6.12/0002-b.patch")).unwrap();
        let err = patch_series(&d, LinuxVersion::V6_12)
            .unwrap_err()
            .to_string();
        fs::remove_dir_all(&d).unwrap();
        assert!(err.contains("no *.patch files"), "{err}");
    }

    #[test]
    fn fragments_follow_flavour_and_patching() {
        let d = scratch("frags");
        for name in [
            "guest.config",
            "host.config",
            "xperf.config",
            "probes.config",
        ] {
            fs::write(d.join("config").join(name), name).unwrap();
        }
        let names = |flavour, patched| -> Vec<String> {
            let mut req = BuildRequest::new(flavour);
            req.patched = patched;
            fragments(&d, &req)
                .unwrap()
                .iter()
                .map(|(p, _)| file_name(p))
                .collect()
        };
        assert_eq!(
            names(Flavour::Guest, false),
            ["guest.config", "probes.config"]
        );
        assert_eq!(
            names(Flavour::Host, true),
            [
                "guest.config",
                "host.config",
                "xperf.config",
                "probes.config"
            ]
        );
        fs::remove_file(d.join("config/xperf.config")).unwrap();
        fs::remove_file(d.join("config/probes.config")).unwrap();
        assert_eq!(names(Flavour::Guest, true), ["guest.config"]);
        fs::remove_dir_all(&d).unwrap();
    }

    /// A version's own fragment replaces the common one of the same name;
    /// the others stay common, and other versions are not affected.
    #[test]
    fn a_versions_own_fragment_replaces_the_common_one() {
        let d = scratch("frag-versions");
        for name in ["guest.config", "probes.config"] {
            fs::write(d.join("config").join(name), format!("common {name}")).unwrap();
        }
        fs::create_dir_all(d.join("config/linux-6.1")).unwrap();
        fs::write(d.join("config/linux-6.1/probes.config"), "6.1 probes").unwrap();
        let contents = |version| -> Vec<String> {
            let req = BuildRequest {
                version,
                ..BuildRequest::new(Flavour::Guest)
            };
            fragments(&d, &req)
                .unwrap()
                .into_iter()
                .map(|(_, c)| String::from_utf8(c).unwrap())
                .collect()
        };
        let v6_1 = contents(LinuxVersion::V6_1);
        let v6_12 = contents(LinuxVersion::V6_12);
        fs::remove_dir_all(&d).unwrap();
        assert_eq!(v6_1, ["common guest.config", "6.1 probes"]);
        assert_eq!(v6_12, ["common guest.config", "common probes.config"]);
    }

    #[test]
    fn check_config_names_dropped_options() {
        let d = scratch("check");
        let config = d.join(".config");
        fs::write(&config, "CONFIG_A=y\n# CONFIG_B is not set\n").unwrap();
        let frags = vec![(d.join("guest.config"), b"CONFIG_A=y\nCONFIG_B=y\n".to_vec())];
        let err = check_config(&config, &frags).unwrap_err().to_string();
        fs::write(&config, "CONFIG_A=y\nCONFIG_B=y\n").unwrap();
        let ok = check_config(&config, &frags);
        fs::remove_dir_all(&d).unwrap();
        assert!(
            err.ends_with("CONFIG_B=y (guest.config; final: not set)"),
            "{err}"
        );
        assert!(ok.is_ok());
    }
}
