//! Attribution throughput: 1 M samples (one crossing, four segments each)
//! against 1 M host exits, the size issue 12 names; prints the time and
//! samples and exits per second. README's claim (under 2 s) is checked by
//! `benches/tests/claims.rs`.
//!
//! `XVMM_ATTRIBUTION_N` sets the count (default 1 000 000).

use xvmm_benches::attribution::{synthetic, time_attribution};

fn main() {
    let n: u64 = std::env::var("XVMM_ATTRIBUTION_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let (mut report, trace) = synthetic(n);
    let took = time_attribution(&mut report, &trace);
    let host = report.crossings[0]
        .round_trip
        .as_ref()
        .and_then(|i| i.host.as_ref())
        .expect("the round trip was attributed");
    println!(
        "attribution: {n} samples x {n} exits in {:.3} s ({:.2} M samples/s); \
         round trip: {} samples with exits, {} exit-free",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64() / 1e6,
        host.samples_with_exits,
        host.exit_free.count
    );
}
