//! How fast xvmm's host trace readers turn KVM's exit tracepoints into
//! paired exits (`xvmm::host_trace`).
//!
//! First on the recorded real trace (`benches/data/kvm_trace`, L1's KVM
//! under the nested harness; `xvmm_benches::recorded`), its pages decoded
//! over and over until `XVMM_TRACE_EVENTS` events (default 10 M) have
//! been: the binary reader (decode, merge the CPUs, pair, summarise) on
//! one run as long as that (the recording's pages repeated, each copy
//! later by its span: the rate at scale, issue 38's target of 5 M
//! exits/s), the same as that many separate runs of the recording (each
//! paying a run's start and summary), the text reader on the same events
//! as `trace_pipe` prints them, and the decode alone by both paths,
//! alternating, `XVMM_TRACE_RUNS` times.
//!
//! Then on a synthetic run of `XVMM_TRACE_EXITS` exits (default 1 M) as kvm_exit + kvm_entry,
//! once as the text lines `trace_pipe` gives (`parse_line`), once as the
//! binary pages `trace_pipe_raw` gives (`RawDecoder`, `CpuMerge`), both
//! into the `ExitAggregator`; and the binary decode alone, by the fast path
//! (fields resolved once per format, exit reasons named once) and by the
//! general path (the rate before it; the fast path's oracle). The four
//! alternate, `XVMM_TRACE_RUNS` times (default 5), and the medians print
//! with their ratios. The kernel's own work (formatting the text, copying
//! the pages) is not in these figures (it needs a host whose KVM fires the
//! tracepoints).

use std::time::Duration;
use xvmm::host_trace::example_decoder;
use xvmm_benches::recorded;
use xvmm_benches::scale::median;
use xvmm_benches::trace::{decode_only, read_pages, read_text, synthetic_pages, synthetic_text};

/// The four readers on the recorded trace, alternating; prints their
/// medians. Exits 1 when the recording does not load.
fn on_the_recording(runs: u64) {
    let (recording, report) = match recorded::load() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("trace_parse: the recorded trace does not load: {e}");
            std::process::exit(1);
        }
    };
    let text = recorded::text(&recording);
    let (per_pass, _) = recorded::decode(&recording, 1, false);
    let passes = xvmm_benches::env_u64("XVMM_TRACE_EVENTS", 10_000_000).div_ceil(per_pass.max(1));
    let tiling = recorded::TiledRun::of(&recording);
    let mut times: [Vec<Duration>; 5] = Default::default();
    let (mut exits, mut events) = (0, 0);
    for _ in 0..runs {
        let (one_run, one) = tiling.replay(&recording, passes);
        let (text_exits, t) = recorded::read_text(&text, passes);
        let (raw_exits, r) = recorded::replay(&recording, passes);
        assert_eq!(text_exits, raw_exits, "both readers pair the same exits");
        // Every copy pairs what the recording pairs, and a copy's exit left
        // waiting at its end may pair with the next copy's first entry: a
        // page whose shift did not move all its events would leave exits
        // unpaired (an entry before its exit).
        let paired = one_run.trace.exits.len() as u64;
        assert!(
            paired >= raw_exits
                && paired + one_run.unpaired == passes * (tiling.exits + tiling.unpaired),
            "one long run pairs what its copies pair: {paired} + {} unpaired, {passes} x ({} + {})",
            one_run.unpaired,
            tiling.exits,
            tiling.unpaired
        );
        let (fast_events, fast) = recorded::decode(&recording, passes, false);
        let (general_events, general) = recorded::decode(&recording, passes, true);
        assert_eq!(fast_events, general_events);
        (exits, events) = (raw_exits, fast_events);
        for (i, d) in [one, t, r, fast, general].into_iter().enumerate() {
            times[i].push(d);
        }
    }
    let [one_t, text_t, raw_t, fast_t, general_t] = times.map(median);
    let per_s = |count: u64, d: Duration| count as f64 / d.as_secs_f64() / 1e6;
    let bytes: usize = recording.cpus.iter().map(Vec::len).sum();
    println!(
        "recorded trace ({}: {} CPUs, {:.2} MB of pages, {per_pass} events, report {}), \
         {passes} passes, median of {runs} alternating runs:",
        recorded::dir().display(),
        recording.cpus.len(),
        bytes as f64 / 1e6,
        report.run_id.as_deref().unwrap_or("without a run id")
    );
    println!(
        "  recorded binary reader, one run of {passes} copies (decode + merge + pair + summary): \
         {:.3} s, {:.2} M exits/s (target 5)",
        one_t.as_secs_f64(),
        per_s(exits, one_t)
    );
    println!(
        "  recorded text reader (parse + pair): {:.3} s, {:.2} M exits/s",
        text_t.as_secs_f64(),
        per_s(exits, text_t)
    );
    println!(
        "  recorded binary reader, {passes} runs (decode + merge + pair + summary each): {:.3} s, \
         {:.2} M exits/s ({:.1}x the text reader)",
        raw_t.as_secs_f64(),
        per_s(exits, raw_t),
        text_t.as_secs_f64() / raw_t.as_secs_f64()
    );
    println!(
        "  recorded binary decode alone, fast path: {:.3} s, {:.2} M events/s (CPU time; target 10)",
        fast_t.as_secs_f64(),
        per_s(events, fast_t)
    );
    println!(
        "  recorded binary decode alone, general path: {:.3} s, {:.2} M events/s (CPU time; fast path {:.1}x)",
        general_t.as_secs_f64(),
        per_s(events, general_t),
        general_t.as_secs_f64() / fast_t.as_secs_f64()
    );
}

fn main() {
    let env = xvmm_benches::env_u64;
    let n = env("XVMM_TRACE_EXITS", 1_000_000);
    let runs = env("XVMM_TRACE_RUNS", 5).max(1);
    on_the_recording(runs);
    let text = synthetic_text(n);
    let decoder = match example_decoder() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("trace_parse: the example formats do not decode: {e}");
            std::process::exit(1);
        }
    };
    let pages = synthetic_pages(&decoder, n);
    let mut times: [Vec<Duration>; 4] = Default::default();
    for _ in 0..runs {
        let t = read_text(&text);
        let r = read_pages(&decoder, &pages);
        let want = xvmm_results::num::usize_from(n);
        assert_eq!((t.exits, r.exits), (want, want));
        let (fast_events, fast) = decode_only(&decoder, pages.iter().map(Vec::as_slice), false);
        let (general_events, general) =
            decode_only(&decoder, pages.iter().map(Vec::as_slice), true);
        assert_eq!(fast_events, general_events);
        for (i, d) in [t.elapsed, r.elapsed, fast, general]
            .into_iter()
            .enumerate()
        {
            times[i].push(d);
        }
    }
    let [text_t, raw_t, fast_t, general_t] = times.map(median);
    let per_s = |count: f64, d: Duration| count / d.as_secs_f64() / 1e6;
    let exits = n as f64;
    println!(
        "{n} exits ({:.1} MB of text, {} pages of {:.1} MB), median of {runs} alternating runs:",
        text.len() as f64 / 1e6,
        pages.len(),
        (pages.len() * decoder.page_size()) as f64 / 1e6
    );
    println!(
        "  text reader (parse + pair):      {:.3} s, {:.2} M exits/s",
        text_t.as_secs_f64(),
        per_s(exits, text_t)
    );
    println!(
        "  binary reader (decode + merge + pair): {:.3} s, {:.2} M exits/s ({:.1}x the text reader)",
        raw_t.as_secs_f64(),
        per_s(exits, raw_t),
        text_t.as_secs_f64() / raw_t.as_secs_f64()
    );
    println!(
        "  binary decode alone, fast path:  {:.3} s, {:.2} M events/s (CPU time; target 10)",
        fast_t.as_secs_f64(),
        per_s(2.0 * exits, fast_t)
    );
    println!(
        "  binary decode alone, general path: {:.3} s, {:.2} M events/s (CPU time; fast path {:.1}x)",
        general_t.as_secs_f64(),
        per_s(2.0 * exits, general_t),
        general_t.as_secs_f64() / fast_t.as_secs_f64()
    );
}
