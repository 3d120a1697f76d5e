//! Attribution throughput: 1 M samples (one crossing, four segments each)
//! against 1 M host exits, the size issue 12 names; prints the time and
//! samples per second, as the median of `XVMM_ATTRIBUTION_RUNS` runs
//! (default 5): CPU time of the attributing thread (issue 25's target, 0.5
//! s on one core) and wall time. README's claim is checked by
//! `benches/tests/claims.rs`.
//!
//! `XVMM_ATTRIBUTION_N` sets the count (default 1 000 000).

use xvmm_benches::attribution::{synthetic, time_attribution};
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
}
