//! Results at scale (issue 25, item 3): `--json --raw` with 1 M samples
//! (write time, bytes per sample) and the release `xvmm report` on that
//! file and on 1000 characterisation files (wall time, peak RSS), each the
//! median of `XVMM_SCALE_RUNS` runs (default 5), against the issue's
//! targets: 2 s for the write, 5 s and 512 MiB for each report. README's
//! Benchmarks table gives the figures; `benches/tests/claims.rs` checks them.
//!
//! Needs the release xvmm: `cargo build --release -p xvmm-cli`.

use std::time::Duration;
use xvmm_benches::scale::{
    bytes_per_sample, fleet_files, median, raw_report, release_xvmm, time_json_write, time_report,
};

const SAMPLES: u64 = 1_000_000;
const FILES: usize = 1000;
const MIB: u64 = 1 << 20;

fn main() {
    let runs: usize = std::env::var("XVMM_SCALE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let Some(xvmm) = release_xvmm() else {
        eprintln!("report_scale: no release xvmm: cargo build --release -p xvmm-cli");
        std::process::exit(1);
    };
    let dir = std::env::temp_dir().join(format!("xvmm-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("report.html");
    // The fleet first, and the big report dropped before its own `xvmm
    // report`: a child's peak RSS counts what it shared with this process
    // before exec.
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/instances/2026-11-27-pvm-epyc-build-machine/characterize.json");
    let files = fleet_files(&dir.join("fleet"), &real, FILES);
    let fleet: Vec<_> = (0..runs)
        .map(|_| time_report(&xvmm, &files, &out))
        .collect();
    print_report("xvmm report, 1000 characterisation files", &fleet);
    let report = raw_report(SAMPLES);
    let raw = dir.join("raw.json");
    let writes: Vec<Duration> = (0..runs)
        .map(|_| time_json_write(&report, &raw).0)
        .collect();
    let size = std::fs::metadata(&raw).unwrap().len();
    let per_sample = bytes_per_sample(&report);
    drop(report);
    let write = median(writes);
    println!(
        "--json --raw, {SAMPLES} samples: {:.3} s (target 2 s), {:.1} MiB, {per_sample:.1} bytes per sample",
        write.as_secs_f64(),
        size as f64 / MIB as f64
    );
    // What the children could have inherited (their peak counts it).
    println!(
        "(this bench's own RSS before the next runs: {:.0} MiB)",
        own_rss_mib()
    );
    let one: Vec<_> = (0..runs)
        .map(|_| time_report(&xvmm, std::slice::from_ref(&raw), &out))
        .collect();
    print_report("xvmm report, one file of 1 M raw samples", &one);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn print_report(what: &str, runs: &[xvmm_benches::scale::ChildRun]) {
    let wall = median(runs.iter().map(|r| r.wall).collect());
    let rss = median(runs.iter().map(|r| r.max_rss_bytes).collect());
    println!(
        "{what}: {:.3} s (target 5 s), peak RSS {:.0} MiB (target 512 MiB), median of {}",
        wall.as_secs_f64(),
        rss as f64 / MIB as f64,
        runs.len()
    );
}

/// This process's resident set, from /proc/self/status.
fn own_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
