//! Mutation testing of the measurement core: runs cargo-mutants (installed
//! by `harness/setup.sh`; settings in `.cargo/mutants.toml`) on each core
//! file and prints, per file, caught / missed / unviable / timeout, the
//! score against its target (100 %), and every missed mutant
//! `docs/mutants.md` does not list as equivalent. With `--markdown`, the
//! rows of that document's table instead (counting each file's mutants with
//! `cargo mutants --list`). Slow (hours on two CPUs), so the suite does not
//! run it.
//!
//!     cargo run --release -p xvmm-benches --bin mutants -- [--in-place] [--jobs N] [--read DIR...] [--markdown] [FILE...]
//!
//! `--in-place` mutates this checkout (cargo-mutants restores each file;
//! do not edit meanwhile), reusing its `target/`; otherwise cargo-mutants
//! copies the tree and builds it afresh. `--read DIR` only reads earlier
//! runs' `DIR/mutants.out/outcomes.json`, in order: a later run's outcome
//! replaces an earlier one's for the same mutant at the same place (a run
//! of the mutants missed before, after new tests). Exits 1 when a file misses its
//! target or a miss is unexplained.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm_benches::mutants::{
    below_target, caught_on_rerun, core_files, generated_today, merge, parse_equivalents,
    parse_outcomes, tally, unexplained, Mutant, Row, DOC, TABLE_HEADER, TARGET,
};

struct Args {
    in_place: bool,
    markdown: bool,
    jobs: usize,
    read: Vec<PathBuf>,
    files: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        in_place: false,
        markdown: false,
        jobs: 1,
        read: Vec::new(),
        files: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--in-place" => args.in_place = true,
            "--markdown" => args.markdown = true,
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
fn run_package(repo: &Path, package: &str, files: &[&str], args: &Args, out: &Path) -> bool {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(repo)
        .args(["mutants", "--test-package", package, "--output"])
        .arg(out);
    for f in files {
        cmd.args(["--file", f]);
    }
    if args.in_place {
        cmd.arg("--in-place");
    } else {
        cmd.args(["--jobs", &args.jobs.to_string()]);
    }
    eprintln!("mutants: {package}: {} file(s)", files.len());
    // cargo-mutants creates `out` but not its parent (target/mutants on a
    // fresh clone).
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("mutants: {}: {e}", out.display());
        return false;
    }
    // cargo-mutants exits 2 when mutants are missed: the outcomes decide.
    cmd.status().is_ok_and(|s| matches!(s.code(), Some(0..=3)))
}

/// The core files asked for (all of them when none is named), with their
/// packages.
fn selected(repo: &Path, args: &Args) -> Vec<(String, &'static str)> {
    let all = core_files(repo).unwrap_or_else(|e| {
        eprintln!("mutants: {e}");
        std::process::exit(1);
    });
    all.into_iter()
        .filter(|(p, _)| args.files.is_empty() || args.files.contains(p))
        .collect()
}

/// The mutants cargo-mutants generates for `file` today, by name.
fn listed(repo: &Path, file: &str) -> Vec<String> {
    let out = Command::new("cargo")
        .current_dir(repo)
        .args(["mutants", "--list", "--file", file])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        _ => {
            eprintln!("mutants: cargo mutants --list --file {file} failed");
            std::process::exit(1);
        }
    }
}

/// The rows of `docs/mutants.md`'s table: every core file, and any other
/// file with outcomes.
/// Only outcomes of mutants generated today count: those of a file
/// changed since its run that moved or went away are left out (and said).
fn print_markdown(repo: &Path, runs: Vec<Vec<Mutant>>, doc: &str) {
    // Every core file, those not run yet with no outcomes.
    let core = core_files(repo).unwrap_or_default();
    let mut files: Vec<String> = core.into_iter().map(|(f, _)| f).collect();
    files.extend(runs.iter().flatten().map(|m| m.file.clone()));
    files.sort_unstable();
    files.dedup();
    let listed: BTreeMap<String, Vec<String>> =
        files.iter().map(|f| (f.clone(), listed(repo, f))).collect();
    let names = listed.values().flatten().cloned().collect();
    let (runs, stale) = generated_today(runs, &names);
    if stale > 0 {
        eprintln!("mutants: {stale} outcome(s) of mutants no longer generated left out");
    }
    let tallies = tally(&merge(runs.clone()), &parse_equivalents(doc));
    let reruns = caught_on_rerun(&runs);
    println!("{TABLE_HEADER}");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (file, today) in &listed {
        let t = tallies.get(file).copied().unwrap_or_default();
        let again = reruns.get(file).copied().unwrap_or(0);
        println!("{}", Row::new(file, today.len(), &t, again).markdown());
    }
}

fn print_tallies(mutants: &[Mutant], doc: &str) -> bool {
    let equivalents = parse_equivalents(doc);
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
            TARGET * 100.0
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
        let files = selected(&repo, &args);
        let mut packages: Vec<&str> = files.iter().map(|f| f.1).collect();
        packages.dedup();
        for p in packages {
            let out = repo.join("target/mutants").join(p);
            let these: Vec<&str> = files
                .iter()
                .filter(|f| f.1 == p)
                .map(|f| f.0.as_str())
                .collect();
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
    let doc = std::fs::read_to_string(repo.join(DOC)).unwrap_or_default();
    if args.markdown {
        print_markdown(&repo, runs, &doc);
    } else if !print_tallies(&merge(runs), &doc) {
        std::process::exit(1);
    }
}
