//! The built-in Linux guest userspace: an initramfs made in memory whose
//! `/init` is the static `xperf`, and the kernel command line that carries
//! xperf's options.
//!
//! Finding xperf (first match wins):
//! 1. `$XVMM_XPERF` when set: that file, which must be static (no fallback, so
//!    an explicit choice is never silently replaced);
//! 2. `xperf` next to the xvmm executable;
//! 3. the static build's directory beside it:
//!    `<target>/x86_64-unknown-linux-gnu/{<profile>,release}/xperf`.
//!
//! A candidate is used only if its ELF has no `PT_INTERP` and names no
//! shared library (`DT_NEEDED`): the initramfs has no dynamic loader or
//! libraries. A workspace `cargo build --release` puts a
//! dynamic xperf next to xvmm, so dynamic candidates are skipped and the static
//! one under the target-triple directory is found.
//!
//! Command line: init's argv is whatever follows ` -- ` on the Linux command
//! line. The default command line for the built-in xperf adds `xperf_stamps=1`
//! (turns the patched kernel's hooks on; an unpatched kernel hands a `name=value`
//! it does not know to init's environment, where it is harmless).

use crate::elf::ElfFile;
use crate::initramfs::Archive;
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use xvmm_results::channel::INIT_WORD;
use xvmm_results::xperf_args::{Parsed, XperfArgs};

/// Environment variable naming the xperf binary to use.
pub const XPERF_ENV: &str = "XVMM_XPERF";
/// The only Rust target installed on the build machines; its static builds land here.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";
/// How to build the static xperf (quoted in errors).
pub const BUILD_HINT: &str = "build it with: RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release --target x86_64-unknown-linux-gnu -p xperf (or set XVMM_XPERF)";
/// Boot parameter of the patch series that turns the stamps on at boot.
pub const STAMPS_PARAM: &str = "xperf_stamps=1";

/// Whether `elf` is an x86-64 ELF executable that runs with nothing else in
/// the initramfs: no program interpreter and no shared library to load.
/// `Err` when it is not an ELF64 x86-64 executable at all (read by
/// [`crate::elf`], which checks every header field against the file).
pub fn elf_is_static(elf: &[u8]) -> std::result::Result<bool, String> {
    let file = ElfFile::parse(elf).map_err(|e| e.to_string())?;
    if !file.is_executable() {
        return Err(format!("ELF type {} is not an executable", file.kind()));
    }
    let needs_libraries = file.needs_libraries().map_err(|e| e.to_string())?;
    Ok(!file.has_interpreter() && !needs_libraries)
}

/// Where to look for xperf, in order, given xvmm's own directory.
pub fn candidates(exe_dir: Option<&Path>) -> Vec<PathBuf> {
    let Some(dir) = exe_dir else {
        return Vec::new();
    };
    let mut out = vec![dir.join("xperf")];
    // exe in <target>/<profile>: try <target>/<triple>/<profile> and .../release.
    if let (Some(profile), Some(target)) = (dir.file_name(), dir.parent()) {
        let triple = target.join(STATIC_TARGET);
        out.push(triple.join(profile).join("xperf"));
        if profile != "release" {
            out.push(triple.join("release").join("xperf"));
        }
    }
    out
}

/// A static xperf found on disk: its file, open, and its length then.
#[derive(Debug)]
pub struct Xperf {
    pub path: PathBuf,
    pub file: std::fs::File,
    pub size: u64,
}

/// Largest xperf accepted (a static release build is a few MiB).
const MAX_XPERF_BYTES: u64 = 256 << 20;

/// Opens `path` and checks that it is a static x86-64 executable, through
/// a mapping of it: only the pages the check reads are read.
fn load_static(path: &Path) -> Result<Xperf> {
    let opened =
        xvmm_host::file::open_bounded(path, MAX_XPERF_BYTES).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::Initrd(format!("{}: no such file", path.display()))
            }
            _ => Error::Initrd(format!("{}: {e}", path.display())),
        })?;
    let (file, size) = opened;
    let view = crate::boot::map::FileView::new(&file, size)
        .map_err(|e| Error::Initrd(format!("{}: cannot map it: {e}", path.display())))?;
    let bytes = view.bytes();
    match elf_is_static(bytes) {
        Ok(true) => Ok(Xperf {
            path: path.to_path_buf(),
            file,
            size,
        }),
        Ok(false) => {
            let why = if ElfFile::parse(bytes).is_ok_and(|f| f.has_interpreter()) {
                "has PT_INTERP"
            } else {
                "needs shared libraries: DT_NEEDED"
            };
            Err(Error::Initrd(format!(
                "{} is dynamically linked ({why}) and cannot be the guest's /init; {BUILD_HINT}",
                path.display()
            )))
        }
        Err(why) => Err(Error::Initrd(format!("{}: {why}", path.display()))),
    }
}

/// Finds the static xperf: `env` (the value of `$XVMM_XPERF`) if given, else
/// the first static file among [`candidates`].
pub fn find_xperf(env: Option<PathBuf>, exe_dir: Option<&Path>) -> Result<Xperf> {
    if let Some(path) = env {
        // Only that file: an explicit choice is never silently replaced.
        return load_static(&path).map_err(|e| match e {
            Error::Initrd(m) => Error::Initrd(format!("{XPERF_ENV}={m}")),
            other => other,
        });
    }
    let found: Vec<PathBuf> = candidates(exe_dir)
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    let mut first_error = None;
    for path in &found {
        match load_static(path) {
            Ok(x) => return Ok(x),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        let looked: Vec<String> = candidates(exe_dir)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        Error::Initrd(format!(
            "no xperf for the built-in initramfs (looked in {}); {BUILD_HINT}",
            if looked.is_empty() {
                "no directory: xvmm's own path is unknown".to_string()
            } else {
                looked.join(", ")
            }
        ))
    }))
}

/// [`find_xperf`] with the real environment and executable path.
pub fn locate_xperf() -> Result<Xperf> {
    let env = std::env::var_os(XPERF_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let exe = std::env::current_exe().ok();
    find_xperf(env, exe.as_deref().and_then(Path::parent))
}

/// The initramfs holding xperf as `/init` (plus `/dev/console`, which the
/// kernel opens for init before anything is mounted), laid out so that
/// xperf can be mapped from its file into guest memory, never read or
/// copied: xperf's data starts on a page of its own
/// ([`Archive::around_file`]). Nothing is built or cached per xperf: the
/// headers around it are a few hundred bytes, made afresh each run.
#[derive(Debug)]
pub struct BuiltInInitramfs {
    pub xperf: Xperf,
    /// The bytes before xperf's and after them.
    pub before: Vec<u8>,
    pub after: Vec<u8>,
}

impl BuiltInInitramfs {
    pub fn new(xperf: Xperf) -> Result<BuiltInInitramfs> {
        Self::with_files(xperf, &[])
    }

    /// With `files` (guest path, data, mode) beside xperf, their
    /// directories made.
    pub fn with_files(xperf: Xperf, files: &[(String, Vec<u8>, u32)]) -> Result<BuiltInInitramfs> {
        let mut archive = Archive::new();
        archive.console()?;
        for (path, data, mode) in files {
            if let Some((dir, _)) = path.rsplit_once('/').filter(|(d, _)| !d.is_empty()) {
                archive.dir(dir, 0o755)?;
            }
            archive.file(path, data.clone(), *mode)?;
        }
        let page = xvmm_results::num::usize_from(crate::layout::PAGE_SIZE);
        let (before, after) = archive.around_file("/init", xperf.size, 0o755, page)?;
        Ok(BuiltInInitramfs {
            xperf,
            before,
            after,
        })
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.before.len() as u64 + self.xperf.size + self.after.len() as u64
    }

    /// The whole image in memory, xperf read from its file: for where it
    /// cannot be mapped (`--host-fault-delay`).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut bytes = self.before.clone();
        let at = bytes.len();
        bytes.resize(at + xvmm_results::num::usize_from(self.xperf.size), 0);
        std::os::unix::fs::FileExt::read_exact_at(&self.xperf.file, &mut bytes[at..], 0)
            .map_err(|e| Error::Initrd(format!("{}: {e}", self.xperf.path.display())))?;
        bytes.extend_from_slice(&self.after);
        Ok(bytes)
    }
}

/// `cmdline` with [`INIT_WORD`] before its ` -- ` (words after it are init's
/// arguments, not its environment), unless it is there already.
fn with_init_word(cmdline: &str) -> String {
    let mut words: Vec<&str> = cmdline.split_ascii_whitespace().collect();
    let kernel_part = words.iter().position(|w| *w == "--").unwrap_or(words.len());
    if words[..kernel_part].contains(&INIT_WORD) {
        return cmdline.to_string();
    }
    words.insert(kernel_part, INIT_WORD);
    words.join(" ")
}

/// Whether the command line already has the ` -- ` that starts init's argv.
pub(super) fn has_init_separator(cmdline: &str) -> bool {
    cmdline.split_ascii_whitespace().any(|w| w == "--")
}

/// What `cmdline` asks the built-in xperf for: the samples of each crossing,
/// every round together ([`XperfArgs::samples_per_crossing`] of its init
/// arguments, after ` -- `); `None` where those are not a crossing run's
/// (a subcommand, an option xperf would refuse).
pub fn asked_samples(cmdline: &str) -> Option<u64> {
    let mut words = cmdline.split_ascii_whitespace();
    // No separator: no init arguments, xperf's defaults.
    let _ = words.find(|w| *w == "--");
    match XperfArgs::parse(words.map(String::from)) {
        Ok(Parsed::Run(a)) => Some(a.samples_per_crossing()),
        _ => None,
    }
}

/// Whether the built-in xperf measures the crossings (rather than running a
/// subcommand such as `probes` or `characterize`, which take no `--raw` or
/// calibration exits): its first init argument, from the user's command line
/// after ` -- ` or else from `init_args`, is an option or absent.
pub fn runs_crossings(base: Option<&str>, init_args: &[String]) -> bool {
    let from_cmdline = base.and_then(|line| {
        let mut words = line.split_ascii_whitespace();
        words.find(|w| *w == "--")?;
        words.next()
    });
    let first = from_cmdline.or_else(|| init_args.first().map(String::as_str));
    first.is_none_or(|w| w.starts_with('-'))
}

/// The Linux command line for the built-in xperf: `base` (the user's
/// `--cmdline`, else the default plus [`STAMPS_PARAM`]) with the init word
/// ([`INIT_WORD`]: xperf takes the VM-init role only when it is there) among
/// the kernel's parameters, and `init_args` appended after ` -- ` (after the
/// user's own init arguments if `base` has a ` -- ` already).
pub fn xperf_cmdline(base: Option<&str>, default: &str, init_args: &[String]) -> String {
    let mut line = match base {
        Some(user) => with_init_word(user.trim_end()),
        None => format!("{default} {STAMPS_PARAM} {INIT_WORD}"),
    };
    if !init_args.is_empty() {
        if !has_init_separator(&line) {
            line.push_str(" --");
        }
        for a in init_args {
            line.push(' ');
            line.push_str(a);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const PT_LOAD: u32 = 1;
    const PT_INTERP: u32 = 3;
    const PT_NOTE: u32 = 4;
    const PT_PHDR: u32 = 6;
    const PT_DYNAMIC: u32 = 2;
    const DT_NEEDED: i64 = 1;
    const DT_RELA: i64 = 7;

    /// A minimal ELF64 x86-64 executable with `types` as its program headers
    /// (e_phnum at 0x38; 0x3a is e_shentsize, 0 here: no section headers).
    fn elf(types: &[u32]) -> Vec<u8> {
        let mut e = vec![0u8; 64 + 56 * types.len()];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2; // ELFCLASS64
        e[5] = 1; // little-endian
        e[6] = 1; // EV_CURRENT
        e[0x10..0x12].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        e[0x12..0x14].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&u16::try_from(types.len()).unwrap().to_le_bytes());
        for (i, t) in types.iter().enumerate() {
            let off = 64 + 56 * i;
            e[off..off + 4].copy_from_slice(&t.to_le_bytes());
        }
        e
    }

    #[test]
    fn subcommands_are_not_crossing_runs() {
        let args = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
        assert!(runs_crossings(None, &[]));
        assert!(runs_crossings(None, &args(&["--samples", "5"])));
        assert!(!runs_crossings(None, &args(&["probes"])));
        assert!(runs_crossings(Some("quiet"), &args(&["--samples", "5"])));
        assert!(!runs_crossings(
            Some("quiet -- probes --rounds 4"),
            &args(&["--samples", "5"])
        ));
        assert!(runs_crossings(Some("quiet -- --raw"), &[]));
        assert!(runs_crossings(Some("quiet --"), &args(&["--raw"])));
    }

    #[test]
    fn static_check_looks_for_pt_interp() {
        assert_eq!(elf_is_static(&elf(&[PT_LOAD, PT_LOAD, PT_NOTE])), Ok(true));
        assert_eq!(
            elf_is_static(&elf(&[PT_PHDR, PT_INTERP, PT_LOAD])),
            Ok(false)
        );
        // Issue 16: e_phnum was read at 0x3a (e_shentsize), so a binary
        // without section headers looked static, and one with them read
        // 64 program headers.
        assert_eq!(elf_is_static(&elf(&[PT_INTERP])), Ok(false));
        let mut with_sections = elf(&[PT_INTERP, PT_LOAD]);
        with_sections[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        assert_eq!(elf_is_static(&with_sections), Ok(false));
        assert_eq!(
            elf_is_static(b"#!/bin/sh\n"),
            Err("not an ELF file".to_string())
        );
        assert!(elf_is_static(b"").is_err());
        assert!(elf_is_static(&[0x7f, b'E', b'L', b'F', 2, 1, 1]).is_err());
        let mut truncated = elf(&[PT_LOAD, PT_INTERP]);
        truncated.truncate(64 + 56);
        assert!(elf_is_static(&truncated).unwrap_err().contains("outside"));
        let mut huge_offset = elf(&[PT_LOAD]);
        huge_offset[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(elf_is_static(&huge_offset).is_err());
        let mut arm = elf(&[PT_LOAD]);
        arm[0x12..0x14].copy_from_slice(&183u16.to_le_bytes());
        assert!(elf_is_static(&arm).unwrap_err().contains("not x86-64"));
        let mut object_file = elf(&[]);
        object_file[0x10] = 1; // ET_REL
        assert_eq!(
            elf_is_static(&object_file),
            Err("ELF type 1 is not an executable".to_string())
        );
    }

    /// An executable whose second program header is a PT_DYNAMIC holding
    /// one entry per tag (each with value 0).
    fn with_dynamic(tags: &[i64]) -> Vec<u8> {
        let mut e = elf(&[PT_LOAD, PT_DYNAMIC]);
        let at = e.len() as u64;
        for t in tags {
            e.extend_from_slice(&t.to_le_bytes());
            e.extend_from_slice(&0u64.to_le_bytes());
        }
        let ph = 64 + 56;
        e[ph + 8..ph + 16].copy_from_slice(&at.to_le_bytes());
        e[ph + 32..ph + 40].copy_from_slice(&(16 * tags.len() as u64).to_le_bytes());
        e
    }

    /// Found while writing the static_binary fuzz target's model: a shared library
    /// (no PT_INTERP, DT_NEEDED libc) passed as static and would have been
    /// the guest's /init.
    #[test]
    fn static_check_looks_for_needed_libraries() {
        // A static-pie: PT_DYNAMIC for its own relocations only.
        assert_eq!(elf_is_static(&with_dynamic(&[DT_RELA, 0])), Ok(true));
        assert_eq!(elf_is_static(&with_dynamic(&[])), Ok(true));
        assert_eq!(
            elf_is_static(&with_dynamic(&[DT_RELA, DT_NEEDED, 0])),
            Ok(false)
        );
        // Without DT_NULL, to the segment's end; after it, nothing counts.
        assert_eq!(elf_is_static(&with_dynamic(&[DT_NEEDED])), Ok(false));
        assert_eq!(elf_is_static(&with_dynamic(&[0, DT_NEEDED])), Ok(true));
        // A trailing partial entry is none.
        let mut partial = with_dynamic(&[DT_RELA]);
        partial.extend_from_slice(&DT_NEEDED.to_le_bytes());
        partial[64 + 56 + 32..64 + 56 + 40].copy_from_slice(&24u64.to_le_bytes());
        assert_eq!(elf_is_static(&partial), Ok(true));
        let mut outside = with_dynamic(&[DT_NEEDED]);
        outside.truncate(outside.len() - 1);
        let err = elf_is_static(&outside).unwrap_err();
        assert!(err.contains("segment 1 needs bytes"), "{err}");
        if let Ok(libm) = std::fs::read("/usr/lib/x86_64-linux-gnu/libm.so.6") {
            assert_eq!(elf_is_static(&libm), Ok(false));
            let dir = std::env::temp_dir().join(format!("xvmm-libm-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("xperf"), &libm).unwrap();
            let err = find_xperf(Some(dir.join("xperf")), None).unwrap_err();
            std::fs::remove_dir_all(&dir).unwrap();
            assert!(err.to_string().contains("DT_NEEDED"), "{err}");
        }
    }

    #[test]
    fn real_dynamic_binaries_are_not_static() {
        // Test binaries and /bin/true are linked against glibc's loader.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(elf_is_static(&std::fs::read(exe).unwrap()), Ok(false));
        for path in ["/bin/true", "/usr/bin/true"] {
            if let Ok(bytes) = std::fs::read(path) {
                assert_eq!(elf_is_static(&bytes), Ok(false), "{path}");
            }
        }
    }

    #[test]
    fn candidates_cover_the_static_target_dir() {
        let c = candidates(Some(Path::new("/w/target/debug")));
        assert_eq!(
            c,
            [
                "/w/target/debug/xperf",
                "/w/target/x86_64-unknown-linux-gnu/debug/xperf",
                "/w/target/x86_64-unknown-linux-gnu/release/xperf",
            ]
            .map(PathBuf::from)
        );
        assert_eq!(candidates(Some(Path::new("/w/target/release"))).len(), 2);
        assert!(candidates(None).is_empty());
    }

    #[test]
    fn finding_xperf() {
        let dir = std::env::temp_dir().join(format!("xvmm-guest-image-{}", std::process::id()));
        let bin = dir.join("target/release");
        std::fs::create_dir_all(&bin).unwrap();
        let err = find_xperf(None, Some(&bin)).unwrap_err().to_string();
        assert!(err.starts_with("initrd: no xperf for the built-in initramfs (looked in "));
        assert!(err.contains("crt-static") && !err.contains('\n'), "{err}");
        // A dynamic one next to xvmm is reported when it is all there is...
        std::fs::write(bin.join("xperf"), elf(&[PT_INTERP])).unwrap();
        let err = find_xperf(None, Some(&bin)).unwrap_err().to_string();
        assert!(err.contains("dynamically linked"), "{err}");
        // ...and skipped for a static one in the target-triple directory.
        let triple = dir.join("target/x86_64-unknown-linux-gnu/release");
        std::fs::create_dir_all(&triple).unwrap();
        std::fs::write(triple.join("xperf"), elf(&[PT_LOAD])).unwrap();
        let found = find_xperf(None, Some(&bin)).unwrap();
        assert_eq!(found.path, triple.join("xperf"));
        // An explicit $XVMM_XPERF is used as is, never replaced.
        let err = find_xperf(Some(bin.join("xperf")), Some(&bin)).unwrap_err();
        assert!(err.to_string().contains("dynamically linked"));
        let err = find_xperf(Some(dir.join("nope")), Some(&bin)).unwrap_err();
        assert!(err.to_string().ends_with("nope: no such file"), "{err}");
        assert!(err.to_string().contains("XVMM_XPERF="), "{err}");
        // A directory is named as one, not as a missing file.
        let err = find_xperf(Some(dir.clone()), Some(&bin)).unwrap_err();
        assert!(err.to_string().ends_with(": not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The host's own ask, read back from the command line it wrote: the
    /// samples per crossing over every round, xperf's defaults filling in.
    #[test]
    fn the_samples_asked_for_come_from_the_command_line() {
        let line = |args: &XperfArgs| xperf_cmdline(None, "console=ttyS0", &args.to_argv());
        let asked = XperfArgs {
            samples: Some(2000),
            rounds: Some(2),
            raw: true,
            ..Default::default()
        };
        assert_eq!(asked_samples(&line(&asked)), Some(4000));
        assert_eq!(asked_samples(&line(&XperfArgs::default())), Some(30_000));
        // The user's own init arguments count too.
        let user = xperf_cmdline(Some("quiet -- --samples 7"), "x", &[]);
        assert_eq!(asked_samples(&user), Some(21));
        assert_eq!(asked_samples("quiet -- characterize"), None);
    }

    #[test]
    fn xperf_options_become_init_arguments() {
        let args = xvmm_results::xperf_args::XperfArgs {
            samples: Some(2000),
            warmup: Some(0),
            raw: true,
            ..Default::default()
        }
        .to_argv();
        assert_eq!(
            xperf_cmdline(None, "console=ttyS0", &args),
            "console=ttyS0 xperf_stamps=1 xvmm_init=1 -- --samples 2000 --warmup 0 --raw"
        );
        assert_eq!(
            xperf_cmdline(None, "console=ttyS0", &[]),
            "console=ttyS0 xperf_stamps=1 xvmm_init=1"
        );
        // The user's command line is kept, with the init word among the
        // kernel's words (never among init's arguments); their own init
        // arguments first.
        assert_eq!(
            xperf_cmdline(Some("console=ttyS0 -- --cpu 0 "), "x", &args[..2]),
            "console=ttyS0 xvmm_init=1 -- --cpu 0 --samples 2000"
        );
        assert_eq!(
            xperf_cmdline(Some("quiet a--b"), "x", &args[4..]),
            "quiet a--b xvmm_init=1 -- --raw"
        );
        // Given once, it stays once.
        assert_eq!(
            xperf_cmdline(Some("xvmm_init=1 quiet"), "x", &[]),
            "xvmm_init=1 quiet"
        );
    }

    #[test]
    fn initramfs_has_console_then_init_on_a_page_of_its_own() {
        let image = elf(&[PT_LOAD]);
        let path = std::env::temp_dir().join(format!("xvmm-builtin-{}", std::process::id()));
        std::fs::write(&path, &image).unwrap();
        let xperf = find_xperf(Some(path.clone()), None).unwrap();
        let _ = std::fs::remove_file(&path);
        let cpio = BuiltInInitramfs::new(xperf).unwrap();
        assert_eq!(cpio.before.len() % 4096, 0);
        let bytes = cpio.to_bytes().unwrap();
        assert_eq!(bytes.len() as u64, cpio.size());
        assert_eq!(&bytes[cpio.before.len()..][..image.len()], &image[..]);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("070701"));
        let console = text.find("dev/console\0").unwrap();
        let init = text.find("init\0").unwrap();
        assert!(console < init && init < cpio.before.len());
        assert_eq!(text.matches("TRAILER!!!").count(), 2);
    }
}
