//! How fast xvmm's text trace reader turns `trace_pipe` lines into paired
//! exits (`xvmm::host_trace::{parse_line, ExitAggregator}`): 1 M exits as
//! kvm_exit + kvm_entry lines, the form KVM prints them in. Prints lines and
//! exits per second. The kernel's own formatting of the text is not in this
//! figure (it needs a host whose KVM fires the tracepoints).

use std::time::Instant;
use xvmm::host_trace::{parse_line, ExitAggregator};

fn main() {
    let n: u64 = std::env::var("XVMM_TRACE_EXITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut text = String::with_capacity(n as usize * 200);
    for i in 0..n {
        let ts = 5_398_127_362_712 + i * 1000;
        text += &format!(
            "  xvmm-4242  [001] d..1. {ts}: kvm_exit: vcpu 0 reason npf rip 0xffffffff81000000 \
             info1 0x0000000000000006 info2 0x0000000000001000 intr_info 0x00000000 error_code 0x00000000\n"
        );
        text += &format!(
            "  xvmm-4242  [001] d..1. {}: kvm_entry: vcpu 0, rip 0xffffffff81000000\n",
            ts + 400
        );
    }
    let start = Instant::now();
    let mut agg = ExitAggregator::default();
    for line in text.lines() {
        if let Some(ev) = parse_line(line) {
            agg.push(ev);
        }
    }
    let summary = agg.finish(0);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "trace reader: {} lines ({:.1} MB) -> {} exits in {secs:.3} s: {:.2} M lines/s, {:.2} M exits/s",
        2 * n,
        text.len() as f64 / 1e6,
        summary.trace.exits.len(),
        2.0 * n as f64 / secs / 1e6,
        n as f64 / secs / 1e6
    );
}
