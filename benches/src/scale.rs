//! Results at scale (issue 25, item 3): what a user waits for when the
//! files are many or large. `--json --raw` with 1 M samples (the write, and
//! the bytes per sample), and the release `xvmm report` binary on that file
//! and on 1000 characterisation files, timed with its peak memory (the
//! child's `ru_maxrss`, from `wait4`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use xvmm_results::Report;

/// One measured run of a child: its wall time and peak resident set.
#[derive(Debug, Clone, Copy)]
pub struct ChildRun {
    pub wall: Duration,
    pub max_rss_bytes: u64,
    pub success: bool,
}

/// Runs `cmd` to its end, returning wall time and the child's peak RSS.
pub fn run_child(cmd: &mut Command) -> std::io::Result<ChildRun> {
    let start = Instant::now();
    let child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    let mut status = 0;
    // SAFETY: rusage is plain data, zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals above;
    // std's Child is not waited on again (it is forgotten below).
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    std::mem::forget(child);
    if waited != pid {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ChildRun {
        wall,
        // ru_maxrss is in KiB on Linux.
        max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

/// The median of `runs` figures.
pub fn median<T: Copy + Ord>(mut runs: Vec<T>) -> T {
    runs.sort_unstable();
    runs[runs.len() / 2]
}

/// A report with one crossing of `n` raw samples (the attribution bench's
/// synthetic run: stamps a thousand ticks apart, as a traced getppid run).
pub fn raw_report(n: u64) -> Report {
    crate::attribution::synthetic(n).0
}

/// What writing a report's JSON costs: the time to serialise and write it
/// atomically to `path`, and its size.
pub fn time_json_write(report: &Report, path: &Path) -> (Duration, usize) {
    let start = Instant::now();
    let text = report.to_json_pretty();
    xvmm_host::write_atomically(path, text.as_bytes()).expect("the JSON is written");
    (start.elapsed(), text.len())
}

/// Bytes per raw sample: the JSON with the samples minus without, over n.
pub fn bytes_per_sample(report: &Report) -> f64 {
    let with = report.to_json_pretty().len();
    let mut without = report.clone();
    let mut n = 0usize;
    for c in &mut without.crossings {
        n += c.samples.take().map_or(0, |s| s.len());
    }
    let less = without.to_json_pretty().len();
    (with - less) as f64 / n.max(1) as f64
}

/// `n` characterisation files in `dir`, made from a real one (`docs/instances/`)
/// under a few instance types and kernels with every median varied, as
/// the browser test's fleet page.
pub fn fleet_files(dir: &Path, real: &Path, n: usize) -> Vec<PathBuf> {
    let base = Report::from_json(&std::fs::read_to_string(real).expect("the real file"))
        .expect("the real file parses");
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let mut r = base.clone();
            r.host.cpu_model = format!("{} type {}", base.host.cpu_model, i % 5);
            r.host.kernel_release = format!("6.{}.0", i % 3);
            if let Some(c) = r.characterize.as_mut() {
                c.hostname = format!("node-{i}");
                c.started_unix += i as u64;
                for m in &mut c.metrics {
                    if let Some(s) = m.stats.as_mut() {
                        s.median += (i % 97) as u64;
                    }
                }
            }
            let path = dir.join(format!("node-{i:04}.json"));
            std::fs::write(&path, r.to_json_pretty()).unwrap();
            path
        })
        .collect()
}

/// The workspace's cargo target directory (`CARGO_TARGET_DIR`, else
/// `target/` at the workspace root).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    )
}

/// The release `xvmm` next to this bench (built by `cargo build --release
/// -p xvmm-cli`), or `None`.
pub fn release_xvmm() -> Option<PathBuf> {
    let p = target_dir().join("release/xvmm");
    p.is_file().then_some(p)
}

/// `xvmm report FILES -o OUT`, measured.
pub fn time_report(xvmm: &Path, files: &[PathBuf], out: &Path) -> ChildRun {
    let run = run_child(
        Command::new(xvmm)
            .arg("report")
            .args(files)
            .arg("-o")
            .arg(out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .expect("xvmm report runs");
    assert!(run.success, "xvmm report failed");
    run
}
