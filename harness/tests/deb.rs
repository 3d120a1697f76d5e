//! The Debian package (deploy/deb/build.sh): built, its control fields
//! checked, installed with `dpkg -i` into a scratch root with a database of
//! its own, used (`xvmm --version`, `man -w` on its pages), and purged,
//! leaving no file of it behind.
//!
//! What it must hold is read from what it installs, not listed here: a page
//! for every subcommand the installed `xvmm --help` and `xperf --help` name,
//! every option of `xperf --help` in xperf's page, every systemd unit and
//! Prometheus file of deploy/, the program each unit runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let out: Output = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (harness/setup.sh installs it)"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `dpkg` on the scratch root, with its own database and log.
fn dpkg(root: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("dpkg");
    cmd.arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", root.join("var/log/dpkg.log").display()));
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        cmd.arg("--force-not-root");
    }
    run(cmd.args(args))
}

/// An empty dpkg database under `root` (dpkg(1): --admindir's layout).
fn scratch_root(root: &Path) {
    let db = root.join("var/lib/dpkg");
    for dir in ["info", "updates"] {
        std::fs::create_dir_all(db.join(dir)).unwrap();
    }
    std::fs::create_dir_all(root.join("var/log")).unwrap();
    for file in ["status", "available"] {
        std::fs::write(db.join(file), "").unwrap();
    }
}

/// The subcommands a `--help` lists under "Commands:" (clap's layout).
fn clap_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every page xvmm's subcommands call for: `xvmm-kernel-build` and so on.
fn xvmm_pages(xvmm: &Path, words: &[String], out: &mut Vec<String>) {
    out.push(
        std::iter::once("xvmm".to_string())
            .chain(words.iter().cloned())
            .collect::<Vec<_>>()
            .join("-"),
    );
    let help = run(Command::new(xvmm).args(words).arg("--help"));
    for sub in clap_commands(&help) {
        let mut deeper = words.to_vec();
        deeper.push(sub);
        xvmm_pages(xvmm, &deeper, out);
    }
}

/// The subcommands xperf's usage forms name (`xperf probes [OPTIONS]`).
fn xperf_subcommands(help: &str) -> Vec<String> {
    help.lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim_start_matches("usage:").trim())
        .filter_map(|l| l.strip_prefix("xperf ")?.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase()))
        .map(str::to_string)
        .collect()
}

/// The long options an xperf usage text lists (`  --samples N  ...`).
fn xperf_options(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.starts_with("  -"))
        .flat_map(|l| l.split_whitespace().map(|w| w.trim_end_matches(',')))
        .filter(|w| w.starts_with("--"))
        .map(str::to_string)
        .collect()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Builds the package into `work/out` with deploy/deb/build.sh; its path.
fn build_package(work: &Path) -> PathBuf {
    let built = run(Command::new(repo().join("deploy/deb/build.sh")).arg(work.join("out")));
    PathBuf::from(built.lines().last().expect("build.sh printed no path"))
}

/// Debian's control fields (policy 5.3), the version the workspace's.
fn check_control_fields(deb: &str) {
    let field = |name: &str| run(Command::new("dpkg-deb").args(["--field", deb, name]));
    for name in [
        "Package",
        "Version",
        "Architecture",
        "Maintainer",
        "Installed-Size",
        "Section",
        "Priority",
        "Description",
    ] {
        assert!(!field(name).trim().is_empty(), "no {name} field");
    }
    assert_eq!(field("Package").trim(), "xvmm");
    assert_eq!(field("Version").trim(), env!("CARGO_PKG_VERSION"));
    assert_eq!(field("Architecture").trim(), "amd64");
    // Static binaries: nothing to depend on.
    assert_eq!(field("Depends").trim(), "");
}

/// The regular files the package holds, as paths relative to `/`.
fn package_contents(deb: &str) -> BTreeSet<String> {
    run(Command::new("dpkg-deb").args(["--contents", deb]))
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches("./").to_string())
        .collect()
}

/// `dpkg -i` into a fresh scratch root, which dpkg then reports installed.
fn install_into_scratch_root(root: &Path, deb: &str) {
    scratch_root(root);
    dpkg(root, &["-i", deb]);
    let status = dpkg(root, &["--status", "xvmm"]);
    assert!(status.contains("Status: install ok installed"), "{status}");
}

/// Both installed binaries are static, and `xvmm --version` is the workspace's.
fn check_installed_binaries(xvmm: &Path, xperf: &Path) {
    for bin in [xvmm, xperf] {
        let bytes = std::fs::read(bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        assert_eq!(
            xvmm::linux::builtin::elf_is_static(&bytes),
            Ok(true),
            "{}",
            bin.display()
        );
    }
    assert_eq!(
        run(Command::new(xvmm).arg("--version")).trim(),
        format!("xvmm {}", env!("CARGO_PKG_VERSION"))
    );
}

/// The man pages the installed binaries call for, read from their `--help`.
struct PromisedPages {
    /// Every page name: `xvmm`, `xvmm-kernel-build`, ..., `xperf`, `xperf-probes`, ...
    pages: Vec<String>,
    /// xperf's subcommands, as its usage names them.
    xperf_subs: Vec<String>,
    /// `xperf --help`, kept for checking xperf's own page.
    xperf_help: String,
}

fn promised_pages(xvmm: &Path, xperf: &Path) -> PromisedPages {
    let mut pages = Vec::new();
    xvmm_pages(xvmm, &[], &mut pages);
    assert!(pages.iter().any(|p| p == "xvmm-kernel-build"), "{pages:?}");
    let xperf_help = run(Command::new(xperf).arg("--help"));
    let xperf_subs = xperf_subcommands(&xperf_help);
    assert!(
        xperf_subs.iter().any(|s| s == "characterize"),
        "{xperf_help}"
    );
    pages.push("xperf".into());
    pages.extend(xperf_subs.iter().map(|s| format!("xperf-{s}")));
    PromisedPages {
        pages,
        xperf_subs,
        xperf_help,
    }
}

/// Every file the package promises: binaries, pages, completions, copyright,
/// and each systemd unit and Prometheus file of deploy/.
fn promised_files(pages: &[String]) -> Vec<String> {
    let mut promised: Vec<String> = ["usr/bin/xvmm", "usr/bin/xperf"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    promised.extend(pages.iter().map(|p| format!("usr/share/man/man1/{p}.1.gz")));
    promised.extend([
        "usr/share/bash-completion/completions/xvmm".to_string(),
        "usr/share/zsh/vendor-completions/_xvmm".to_string(),
        "usr/share/fish/vendor_completions.d/xvmm.fish".to_string(),
        "usr/share/doc/xvmm/copyright".to_string(),
    ]);
    for (dir, to) in [
        ("systemd", "usr/lib/systemd/system"),
        ("prometheus", "usr/share/xvmm/prometheus"),
    ] {
        for entry in std::fs::read_dir(repo().join("deploy").join(dir)).unwrap() {
            let name = entry.unwrap().file_name();
            promised.push(format!("{to}/{}", name.to_string_lossy()));
        }
    }
    promised
}

/// The package holds every promised file, and installing it put each in place.
fn check_promised_files_installed(promised: &[String], contents: &BTreeSet<String>, root: &Path) {
    let missing: Vec<&String> = promised.iter().filter(|p| !contents.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "the package lacks {missing:?}; it holds {contents:?}"
    );
    for p in promised {
        assert!(root.join(p).is_file(), "{p} not installed");
    }
}

/// `man` finds each page where the package put it.
fn check_man_finds_pages(manpath: &Path, pages: &[String]) {
    for page in pages {
        let found = run(Command::new("man")
            .env("MANPATH", manpath)
            .args(["-w", page]));
        assert_eq!(
            found.trim(),
            manpath.join(format!("man1/{page}.1.gz")).to_str().unwrap(),
            "man -w {page}"
        );
    }
}

/// Each xperf page documents every option its binary's usage lists.
fn check_xperf_pages_document_options(manpath: &Path, xperf: &Path, promised: &PromisedPages) {
    for sub in std::iter::once(None).chain(promised.xperf_subs.iter().map(Some)) {
        let (page, help) = match sub {
            None => ("xperf".to_string(), promised.xperf_help.clone()),
            Some(s) => (
                format!("xperf-{s}"),
                run(Command::new(xperf).args([s.as_str(), "--help"])),
            ),
        };
        let text = run(Command::new("man")
            .env("MANPATH", manpath)
            .env("MANWIDTH", "200")
            .args(["-P", "cat", &page]));
        for opt in xperf_options(&help) {
            assert!(text.contains(&opt), "man {page} lacks {opt}:\n{text}");
        }
    }
}

/// Each unit runs a program of the package (not /usr/local's).
fn check_units_run_packaged_programs(contents: &BTreeSet<String>, root: &Path) {
    for unit in contents.iter().filter(|p| p.ends_with(".service")) {
        let text = std::fs::read_to_string(root.join(unit)).unwrap();
        for line in text.lines().filter_map(|l| l.strip_prefix("ExecStart=")) {
            let program = line.split_whitespace().next().unwrap();
            let program = program.trim_start_matches('/');
            assert!(
                contents.contains(program),
                "{unit} runs {program}, not in the package"
            );
        }
    }
}

/// `dpkg --purge` removes every file of the package from the scratch root.
fn purge_and_check_nothing_left(root: &Path, contents: &BTreeSet<String>) {
    dpkg(root, &["--purge", "xvmm"]);
    let mut left = Vec::new();
    files_under(root, &mut left);
    // Only dpkg's own database and log remain.
    left.retain(|p| {
        !p.starts_with(root.join("var/lib/dpkg")) && !p.starts_with(root.join("var/log"))
    });
    assert!(left.is_empty(), "purging xvmm left {left:?}");
    let still: Vec<&String> = contents.iter().filter(|p| root.join(p).exists()).collect();
    assert!(still.is_empty(), "purging xvmm left {still:?}");
    assert!(!root.join("usr").exists(), "purging xvmm left usr/");
}

#[test]
fn the_package_installs_serves_and_purges_cleanly() {
    let work = std::env::temp_dir().join(format!("xvmm-deb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    let deb = build_package(&work);
    let deb_str = deb.to_str().unwrap();
    check_control_fields(deb_str);
    let contents = package_contents(deb_str);

    let root = work.join("root");
    install_into_scratch_root(&root, deb_str);
    let xvmm = root.join("usr/bin/xvmm");
    let xperf = root.join("usr/bin/xperf");
    check_installed_binaries(&xvmm, &xperf);

    // What the package promises, from what it installed.
    let promised = promised_pages(&xvmm, &xperf);
    let files = promised_files(&promised.pages);
    check_promised_files_installed(&files, &contents, &root);

    let manpath = root.join("usr/share/man");
    check_man_finds_pages(&manpath, &promised.pages);
    check_xperf_pages_document_options(&manpath, &xperf, &promised);
    check_units_run_packaged_programs(&contents, &root);

    purge_and_check_nothing_left(&root, &contents);
    std::fs::remove_dir_all(&work).unwrap();
}
