//! Attribution throughput: 1 M samples (one crossing, four segments each)
//! against 1 M host exits, the size issue 12 names; prints the time and
//! samples per second, as the median of `XVMM_ATTRIBUTION_RUNS` runs
//! (default 5): CPU time of the attributing thread (issue 25's target, 0.5
//! s on one core) and wall time. README's claim is checked by
//! `benches/tests/claims.rs`.
//!
//! `XVMM_ATTRIBUTION_N` sets the count (default 1 000 000).
//!
//! Then the same on the recorded real trace (`benches/data/kvm_trace`):
//! its run repeated back to back until it holds `XVMM_ATTRIBUTION_N`
//! samples and as many exits (`xvmm_benches::recorded::tiled`), attributed as a
//! traced run's join attributes.

use xvmm_benches::attribution::{synthetic, time_attribution, time_join};
use xvmm_benches::recorded;
use xvmm_benches::scale::median;

fn main() {
    let env = xvmm_benches::env_u64;
    let n = env("XVMM_ATTRIBUTION_N", 1_000_000);
    let runs = env("XVMM_ATTRIBUTION_RUNS", 5).max(1);
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    let mut with_exits = (0, 0);
    for _ in 0..runs {
        let (mut report, trace) = synthetic(n);
        let took = time_attribution(&mut report, &trace);
        cpu.push(took.cpu);
        wall.push(took.wall);
        let host = report.crossings[0]
            .round_trip
            .as_ref()
            .and_then(|i| i.host.as_ref())
            .expect("the round trip was attributed");
        with_exits = (host.samples_with_exits, host.exit_free.count);
    }
    let (cpu, wall) = (median(cpu), median(wall));
    println!(
        "attribution: {n} samples x {n} exits, median of {runs}: {:.3} s of CPU \
         ({:.2} M samples/s; target 0.5 s), {:.3} s wall; round trip: {} samples \
         with exits, {} exit-free",
        cpu.as_secs_f64(),
        n as f64 / cpu.as_secs_f64() / 1e6,
        wall.as_secs_f64(),
        with_exits.0,
        with_exits.1
    );
    on_the_recording(n, runs);
}

/// The recorded run, tiled to at least `n` samples and exits, attributed
/// `runs` times; prints the medians. Exits 1 when it does not load.
fn on_the_recording(n: u64, runs: u64) {
    let (recording, report) = match recorded::load() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("attribution: the recorded trace does not load: {e}");
            std::process::exit(1);
        }
    };
    let (tiled, trace, mapping) = recorded::tiled(&recording, &report, n, n);
    let samples: usize = tiled
        .crossings
        .iter()
        .map(|c| c.samples.as_ref().map_or(0, Vec::len))
        .sum();
    let (mut cpu, mut wall, mut with_exits) = (Vec::new(), Vec::new(), 0);
    for _ in 0..runs {
        let mut r = tiled.clone();
        let took = time_join(&mut r, &trace, &mapping);
        cpu.push(took.cpu);
        wall.push(took.wall);
        with_exits = r
            .crossings
            .iter()
            .filter_map(|c| c.round_trip.as_ref()?.host.as_ref())
            .map(|h| h.samples_with_exits)
            .sum::<u64>();
    }
    let (cpu, wall) = (median(cpu), median(wall));
    println!(
        "attribution on the recorded trace: {samples} samples x {} exits ({} crossings), \
         median of {runs}: {:.3} s of CPU ({:.2} M samples/s; target 0.5 s), {:.3} s wall; \
         {with_exits} round trips with exits",
        trace.exits.len(),
        tiled.crossings.len(),
        cpu.as_secs_f64(),
        samples as f64 / cpu.as_secs_f64() / 1e6,
        wall.as_secs_f64()
    );
}
