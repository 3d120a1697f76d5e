//! Issue 25's memory target for traced runs: the host side of `--trace`
//! (each `trace_pipe_raw` page decoded as it comes, merged, aggregated;
//! then the join of the guest's samples) on 10 M synthetic exits keeps the
//! process's resident memory growth at most 64 MiB. Prints the growth (the
//! kernel's high-water mark, reset before the run, minus the resident
//! memory then), the exit log's bytes per exit and the time.
//!
//! `XVMM_TRACE_EXITS` (default 10 000 000) and `XVMM_TRACE_SAMPLES`
//! (default 1 000 000) set the sizes.

use xvmm::host_trace::example_decoder;
use xvmm_benches::trace::{ingest_and_join, samples_over_run};

fn main() {
    let env = xvmm_benches::env_u64;
    let exits = env("XVMM_TRACE_EXITS", 10_000_000);
    let samples = env("XVMM_TRACE_SAMPLES", 1_000_000);
    let decoder = match example_decoder() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("trace_memory: the example formats do not decode: {e}");
            std::process::exit(1);
        }
    };
    let mut report = samples_over_run(exits, samples);
    let run = ingest_and_join(&decoder, exits, &mut report);
    const MIB: f64 = (1 << 20) as f64;
    println!(
        "traced run, {} exits and {samples} samples: RSS growth {:.1} MiB (target 64; \
         {:.1} MiB before, peak {:.1} MiB); exit log {:.1} MiB, {:.2} bytes an exit; \
         {} samples with exits; {:.2} s",
        run.exits,
        run.growth() as f64 / MIB,
        run.rss_before as f64 / MIB,
        run.rss_peak as f64 / MIB,
        run.log_bytes as f64 / MIB,
        run.log_bytes as f64 / run.exits.max(1) as f64,
        run.samples_with_exits,
        run.took.as_secs_f64()
    );
}
