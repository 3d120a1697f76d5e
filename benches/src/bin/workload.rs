//! Issue 38's scale target for `xperf workload`'s reader: a synthetic trace
//! of two CPUs' pages (eight tasks' calls, faults, interrupts and times off
//! CPU) decoded as it comes, merged, followed and paired into intervals,
//! as the live reader does. Prints the intervals, the events, the time, the
//! rate and the growth of resident memory (the kernel's high-water mark,
//! reset before the run, minus the resident memory then).
//!
//! `XVMM_WORKLOAD_ROUNDS` (default 700 000: 10.5 M intervals, 15 a round)
//! sets the size.

use xvmm_benches::workload::ingest;

fn main() {
    let rounds = xvmm_benches::env_u64("XVMM_WORKLOAD_ROUNDS", 700_000);
    let run = ingest(rounds);
    const MIB: f64 = (1 << 20) as f64;
    let secs = run.memory.took.as_secs_f64();
    println!(
        "workload trace, {} intervals from {} events: {:.2} s, {:.2} M events/s; RSS growth \
         {:.1} MiB ({:.1} MiB before, peak {:.1} MiB)",
        run.intervals,
        run.events,
        secs,
        run.events as f64 / secs / 1e6,
        run.memory.growth() as f64 / MIB,
        run.memory.rss_before as f64 / MIB,
        run.memory.rss_peak as f64 / MIB,
    );
}
