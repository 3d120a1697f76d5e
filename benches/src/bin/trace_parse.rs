//! How fast xvmm's host trace readers turn KVM's exit tracepoints into
//! paired exits (`xvmm::host_trace`): 1 M exits as kvm_exit + kvm_entry,
//! once as the text lines `trace_pipe` gives (`parse_line`), once as the
//! binary pages `trace_pipe_raw` gives (`RawDecoder`, `CpuMerge`), both
//! into the `ExitAggregator`. Prints exits per second of each. The kernel's
//! own work (formatting the text, copying the pages) is not in these
//! figures (it needs a host whose KVM fires the tracepoints).

use xvmm::host_trace::example_decoder;
use xvmm_benches::trace::{read_pages, read_text, synthetic_pages, synthetic_text};

fn main() {
    let n: u64 = std::env::var("XVMM_TRACE_EXITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let text = synthetic_text(n);
    let t = read_text(&text);
    println!(
        "text reader: {} lines ({:.1} MB) -> {} exits in {:.3} s: {:.2} M lines/s, {:.2} M exits/s",
        2 * n,
        text.len() as f64 / 1e6,
        t.exits,
        t.elapsed.as_secs_f64(),
        2.0 * n as f64 / t.elapsed.as_secs_f64() / 1e6,
        t.exits_per_sec() / 1e6
    );
    let decoder = match example_decoder() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("trace_parse: the example formats do not decode: {e}");
            std::process::exit(1);
        }
    };
    let pages = synthetic_pages(&decoder, n);
    let r = read_pages(&decoder, &pages);
    println!(
        "binary reader: {} pages ({:.1} MB) -> {} exits in {:.3} s: {:.2} M exits/s ({:.1}x the text reader)",
        pages.len(),
        (pages.len() * decoder.page_size()) as f64 / 1e6,
        r.exits,
        r.elapsed.as_secs_f64(),
        r.exits_per_sec() / 1e6,
        r.exits_per_sec() / t.exits_per_sec()
    );
}
