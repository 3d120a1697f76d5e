//! Microguest benchmark: the cost of the stamps themselves (natively in this
//! process and at CPL3 inside the microguest), and the wall time of a full
//! default-style run with 100k samples per row. Prints figures; never fails
//! on numbers.
//!
//! `XVMM_BENCH_SAMPLES` overrides the 100k samples of the full run.

use std::time::{Duration, Instant};
use xvmm::microguest::guest::Kind;
use xvmm::microguest::{measure, Options};
use xvmm_results::{Stats, Status};

/// The stamp pair with nothing between (xperf's null measurement).
fn native_null() -> u64 {
    let s = xperf::stamp::null_pair();
    s.close - s.open
}

fn show(label: &str, s: &Stats) {
    println!(
        "{label:<34} min {:>6}  median {:>6}  p99 {:>6}  mean {:>8.1}  stddev {:>7.1}  (n={})",
        s.min, s.median, s.p99, s.mean, s.stddev, s.count
    );
}

fn main() {
    let samples: u64 = std::env::var("XVMM_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);

    for _ in 0..10_000 {
        native_null();
    }
    let native: Vec<u64> = (0..100_000).map(|_| native_null()).collect();
    show("stamp pair, native (ticks)", &Stats::from_samples(&native));

    match measure::user_intervals(Kind::Null, 0, 10_000, 100_000, Duration::from_secs(60)) {
        Ok(guest) => show(
            "stamp pair, microguest CPL3 (ticks)",
            &Stats::from_samples(&guest),
        ),
        Err(e) => println!("stamp pair, microguest CPL3: failed: {e}"),
    }

    let opts = match Options::new(samples, 1_000) {
        Ok(o) => o,
        Err(e) => {
            println!("full run: {e}");
            return;
        }
    };
    let start = Instant::now();
    match measure::measure(&opts, Duration::from_secs(600), &xvmm::progress::Silent) {
        Ok(measure::Measured { report, stopped }) => {
            let wall = start.elapsed();
            if let Some(e) = stopped {
                println!("full run stopped early: {e}");
            }
            let measured = report
                .crossings
                .iter()
                .filter(|c| c.status == Status::Measured)
                .count()
                + report
                    .exits
                    .iter()
                    .filter(|e| e.status == Status::Measured)
                    .count();
            println!(
                "full run, {samples} samples per row: {:.2} s wall ({} rows measured, {} unsupported)",
                wall.as_secs_f64(),
                measured,
                report.crossings.len() + report.exits.len() - measured
            );
            print!("{}", xvmm_results::render::report(&report));
        }
        Err(e) => println!(
            "full run, {samples} samples per row: failed after {:.2} s: {e}",
            start.elapsed().as_secs_f64()
        ),
    }
}
