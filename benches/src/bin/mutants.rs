//! Mutation testing of the measurement core: runs cargo-mutants (installed
//! by `harness/setup.sh`; settings in `.cargo/mutants.toml`) on each core
//! file and prints, per file, caught / missed / unviable / timeout, the
//! score against its target (90 %, or 100 % for timeline, attribution,
//! correction and compare), and every missed mutant README does not list as
//! equivalent. Slow (hours on two CPUs), so the suite does not run it.
//!
//!     cargo run --release -p xvmm-benches --bin mutants -- [--in-place] [--jobs N] [--read DIR...] [FILE...]
//!
//! `--in-place` mutates this checkout (cargo-mutants restores each file;
//! do not edit meanwhile), reusing its `target/`; otherwise cargo-mutants
//! copies the tree and builds it afresh. `--read DIR` only reads earlier
//! runs' `DIR/mutants.out/outcomes.json`, in order: a later run's outcome
//! replaces an earlier one's for the same mutant at the same place (a run
//! of the mutants missed before, after new tests). Exits 1 when a file misses its
//! target or a miss is unexplained.

use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm_benches::mutants::{
    below_target, merge, parse_equivalents, parse_outcomes, tally, unexplained, CoreFile, Mutant,
    CORE,
};

struct Args {
    in_place: bool,
    jobs: usize,
    read: Vec<PathBuf>,
    files: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        in_place: false,
        jobs: 1,
        read: Vec::new(),
        files: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--in-place" => args.in_place = true,
            "--jobs" => {
                let v = it.next().ok_or("--jobs needs a number")?;
                args.jobs = v
                    .parse()
                    .map_err(|_| format!("--jobs {v:?}: not a number"))?;
            }
            "--read" => args
                .read
                .push(it.next().ok_or("--read needs a directory")?.into()),
            f if !f.starts_with('-') => args.files.push(f.to_string()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.in_place && args.jobs > 1 {
        return Err("--in-place runs one mutant at a time (no --jobs)".into());
    }
    Ok(args)
}

/// Runs cargo-mutants on the core files of one package; the outcomes land in
/// `out/mutants.out/outcomes.json`.
fn run_package(repo: &Path, package: &str, files: &[&CoreFile], args: &Args, out: &Path) -> bool {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(repo)
        .args(["mutants", "--test-package", package, "--output"])
        .arg(out);
    for f in files {
        cmd.args(["--file", f.path]);
    }
    if args.in_place {
        cmd.arg("--in-place");
    } else {
        cmd.args(["--jobs", &args.jobs.to_string()]);
    }
    eprintln!("mutants: {package}: {} file(s)", files.len());
    // cargo-mutants exits 2 when mutants are missed: the outcomes decide.
    cmd.status().is_ok_and(|s| matches!(s.code(), Some(0..=3)))
}

fn selected<'a>(args: &Args) -> Vec<&'a CoreFile> {
    CORE.iter()
        .filter(|c| args.files.is_empty() || args.files.iter().any(|f| f == c.path))
        .collect()
}

fn print_tallies(mutants: &[Mutant], readme: &str) -> bool {
    let equivalents = parse_equivalents(readme);
    let tallies = tally(mutants, &equivalents);
    println!(
        "{:<44} {:>6} {:>6} {:>8} {:>7} {:>6} {:>7} {:>6}",
        "file", "caught", "missed", "unviable", "timeout", "equiv", "score", "target"
    );
    for (file, t) in &tallies {
        let score = t
            .score()
            .map(|s| format!("{:.1}%", s * 100.0))
            .unwrap_or_else(|| "-".into());
        println!(
            "{file:<44} {:>6} {:>6} {:>8} {:>7} {:>6} {score:>7} {:>5.0}%",
            t.caught,
            t.missed,
            t.unviable,
            t.timeout,
            t.equivalent,
            xvmm_benches::mutants::target_for(file) * 100.0
        );
    }
    let misses = unexplained(mutants, &equivalents);
    for m in &misses {
        println!("missed: {}", m.key());
    }
    let below = below_target(&tallies);
    for (f, score, target) in &below {
        println!(
            "below target: {f} {:.1}% < {:.0}%",
            score * 100.0,
            target * 100.0
        );
    }
    misses.is_empty() && below.is_empty()
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("mutants: {e}");
        std::process::exit(2);
    });
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = args.read.clone();
    if dirs.is_empty() {
        let files = selected(&args);
        let mut packages: Vec<&str> = files.iter().map(|f| f.package).collect();
        packages.dedup();
        for p in packages {
            let out = repo.join("target/mutants").join(p);
            let these: Vec<&CoreFile> = files.iter().copied().filter(|f| f.package == p).collect();
            if !run_package(&repo, p, &these, &args, &out) {
                eprintln!(
                    "mutants: cargo mutants failed for {p} (cargo-mutants: harness/setup.sh)"
                );
                std::process::exit(1);
            }
            dirs.push(out);
        }
    }
    let mut runs = Vec::new();
    for d in &dirs {
        let path = d.join("mutants.out/outcomes.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            eprintln!("mutants: {}: {e}", path.display());
            std::process::exit(1);
        });
        runs.push(parse_outcomes(&text).unwrap_or_else(|e| {
            eprintln!("mutants: {}: {e}", path.display());
            std::process::exit(1);
        }));
    }
    let mutants = merge(runs);
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap_or_default();
    if !print_tallies(&mutants, &readme) {
        std::process::exit(1);
    }
}
