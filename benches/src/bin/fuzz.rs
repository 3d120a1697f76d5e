//! Runs every fuzz target in `fuzz/` (cargo-fuzz, libFuzzer) for a given time
//! and prints, per target, executions, executions per second, coverage, peak
//! RSS and crashes. Needs the nightly toolchain and cargo-fuzz
//! (`harness/setup.sh` installs both).
//!
//!     cargo run --release -p xvmm-benches --bin fuzz -- [--seconds N] [--seeds-only] [TARGET...]
//!
//! Seeds (see `xvmm_benches::fuzz::seeds`) are written to
//! `fuzz/corpus/<target>/` first; libFuzzer also reads the committed seeds in
//! `fuzz/seeds/<target>/` and adds what it finds to the corpus, which stays
//! for the next run. A crash, timeout or out-of-memory input is kept in
//! `fuzz/artifacts/<target>/`; the run then goes on with the next target and
//! the bench exits 1 at the end. Figures never fail it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use xvmm_benches::fuzz::{parse_output, seeds, RunStats, TARGETS};

struct Args {
    seconds: u64,
    seeds_only: bool,
    targets: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seconds: 60,
        seeds_only: false,
        targets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a number")?;
                args.seconds = v
                    .parse()
                    .map_err(|_| format!("--seconds {v:?}: not a number"))?;
            }
            "--seeds-only" => args.seeds_only = true,
            t if TARGETS.iter().any(|k| k.name == t) => args.targets.push(t.to_string()),
            other => {
                return Err(format!(
                    "unknown argument {other:?} (targets: {})",
                    TARGETS
                        .iter()
                        .map(|t| t.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
    if args.targets.is_empty() {
        args.targets = TARGETS.iter().map(|t| t.name.to_string()).collect();
    }
    Ok(args)
}

fn write_seeds(fuzz: &Path, target: &str, sources: &seeds::Sources) -> std::io::Result<usize> {
    let dir = fuzz.join("corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    let seeds = seeds::for_target(target, sources);
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
    }
    Ok(seeds.len())
}

fn cargo_fuzz(fuzz_dir: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.args(["+nightly", "fuzz"])
        .current_dir(fuzz_dir.parent().unwrap_or(fuzz_dir));
    // The fuzz crate has its own target directory, not the workspace's.
    cmd.env("CARGO_TARGET_DIR", fuzz_dir.join("target"));
    cmd
}

fn run_target(fuzz: &Path, target: &str, seconds: u64) -> std::io::Result<RunStats> {
    let corpus = fuzz.join("corpus").join(target);
    let committed = fuzz.join("seeds").join(target);
    let artifacts = fuzz.join("artifacts").join(target);
    std::fs::create_dir_all(&artifacts)?;
    let mut cmd = cargo_fuzz(fuzz);
    cmd.args(["run", target]).arg(&corpus);
    if committed.is_dir() {
        cmd.arg(&committed);
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .args([
            "-print_final_stats=1",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-max_len=65536",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.output()?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let mut stats = parse_output(&text);
    if !out.status.success() && stats.crashes.is_empty() {
        stats.crashes.push(format!(
            "libFuzzer failed ({}): {}",
            out.status,
            text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(stats)
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("fuzz: {e}");
        std::process::exit(2);
    });
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fuzz: PathBuf = repo.join("fuzz");
    let sources = seeds::Sources::from_env(&repo);
    for t in &args.targets {
        match write_seeds(&fuzz, t, &sources) {
            Ok(n) => eprintln!("fuzz: {t}: {n} generated seeds"),
            Err(e) => eprintln!("fuzz: {t}: cannot write seeds: {e}"),
        }
    }
    if args.seeds_only {
        return;
    }
    let started = Instant::now();
    let built = cargo_fuzz(&fuzz).args(["build"]).status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!(
            "fuzz: `cargo +nightly fuzz build` failed (nightly and cargo-fuzz: harness/setup.sh)"
        );
        std::process::exit(1);
    }
    eprintln!(
        "fuzz: targets built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:<16} {:>11} {:>9} {:>6} {:>7} {:>6} {:>7} {:>7}",
        "target", "execs", "execs/s", "cov", "ft", "corpus", "rss MB", "crashes"
    );
    let mut total = RunStats::default();
    for t in &args.targets {
        let stats = run_target(&fuzz, t, args.seconds).unwrap_or_else(|e| RunStats {
            crashes: vec![format!("cannot run cargo fuzz: {e}")],
            ..Default::default()
        });
        println!(
            "{:<16} {:>11} {:>9} {:>6} {:>7} {:>6} {:>7} {:>7}",
            t,
            stats.execs,
            stats.execs_per_sec,
            stats.coverage,
            stats.features,
            stats.corpus,
            stats.peak_rss_mb,
            stats.crashes.len()
        );
        for c in &stats.crashes {
            println!("  crash: {c}");
        }
        total.execs += stats.execs;
        total.coverage += stats.coverage;
        total.crashes.extend(stats.crashes);
    }
    let secs = started.elapsed().as_secs_f64();
    // Executions per second of fuzzing, not counting the build.
    let fuzzing = (args.seconds * args.targets.len() as u64).max(1);
    println!(
        "{:<16} {:>11} {:>9} {:>6} {:>7} {:>6} {:>7} {:>7}",
        "total",
        total.execs,
        total.execs / fuzzing,
        total.coverage,
        "",
        "",
        "",
        total.crashes.len()
    );
    println!(
        "({} targets, {} s each, {:.0} s in all with the build)",
        args.targets.len(),
        args.seconds,
        secs
    );
    if !total.crashes.is_empty() {
        std::process::exit(1);
    }
}
