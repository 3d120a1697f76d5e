//! Issue 38's scale target for the VM side of a workload: the join of the
//! guest's streamed intervals with the host's exits as `xvmm --workload`
//! does it after the run (`xvmm/src/linux/workload.rs:add_workload_exits`):
//! the intervals held as the VMM keeps them, ordered by their end, then
//! claimed against each vCPU's exits (`stats/workload_join.rs:Joiner`).
//! Synthetic and deterministic: two vCPUs, system calls separated by user
//! time, every eighth with a timer interrupt inside it, exits evenly spread
//! over the same time. Prints the sizes, the join's time on one core and
//! the resident memory the inputs and the join took (the kernel's
//! high-water mark, reset before the inputs are built, minus the resident
//! memory then). The target is 10 M x 10 M within 256 MiB and 10 s; the
//! join holds every interval and exit today: on 2026-11-29 it took 1.85 s
//! and 839 MiB (`docs/results/benchmarks.md`), the time met, the memory not.
//!
//! `XVMM_JOIN_INTERVALS` and `XVMM_JOIN_EXITS` (default 10 M each) set the
//! sizes.

use std::time::Instant;
use xvmm_benches::trace::status_bytes;
use xvmm_results::schema::interval_stream::StreamedInterval;
use xvmm_results::stats::workload_join::{GuestExit, Joiner};

const CPUS: u32 = 2;
const SYSCALL_CODE: u64 = 0;
const TIMER_CODE: u64 = (2 << 32) + 236;

/// Each vCPU's intervals in closing order (an interrupt before the call
/// that holds it), and the time they span.
fn intervals(count: u64) -> (Vec<StreamedInterval>, u64) {
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut span = 0;
    for cpu in 0..CPUS {
        let mut t = 1_000_000u64;
        let mut i = 0u64;
        while i < count / u64::from(CPUS) {
            let length = 2000 + (i * 7919) % 3000;
            if i.is_multiple_of(8) {
                out.push(StreamedInterval {
                    start: t + 100,
                    end: t + 300,
                    code: TIMER_CODE,
                    cpu,
                });
                i += 1;
            }
            out.push(StreamedInterval {
                start: t,
                end: t + length,
                code: SYSCALL_CODE + i % 300,
                cpu,
            });
            i += 1;
            t += length + 1000;
        }
        span = span.max(t);
    }
    (out, span)
}

/// `count` exits spread evenly over `span` on every vCPU.
fn exits(count: u64, span: u64) -> Vec<GuestExit> {
    let per_cpu = (count / u64::from(CPUS)).max(1);
    let step = (span / per_cpu).max(1);
    (0..CPUS)
        .flat_map(|vcpu| {
            (0..per_cpu).map(move |k| GuestExit {
                vcpu,
                at: 1_000_000 + k * step + u64::from(vcpu) * 7,
                ticks: 1500 + k % 700,
                reason: u16::try_from(k % 5).unwrap_or(0),
            })
        })
        .collect()
}

fn main() {
    let n_intervals = xvmm_benches::env_u64("XVMM_JOIN_INTERVALS", 10_000_000);
    let n_exits = xvmm_benches::env_u64("XVMM_JOIN_EXITS", 10_000_000);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = status_bytes("VmRSS:").unwrap_or(0);
    let (held, span) = intervals(n_intervals);
    let exits = exits(n_exits, span);
    let start = Instant::now();
    let mut order: Vec<usize> = (0..held.len()).collect();
    order.sort_by_key(|&i| held[i].end);
    let mut joiner = Joiner::new(exits);
    for i in order {
        joiner.add(&held[i]);
    }
    let reasons: Vec<String> = (0..5).map(|r| format!("reason{r}")).collect();
    let joined = joiner.finish(&[], &reasons, 0, u64::MAX);
    let took = start.elapsed().as_secs_f64();
    let peak = status_bytes("VmHWM:").unwrap_or(0);
    let inside: u64 = joined.rows.iter().map(|r| r.count()).sum();
    let outside: u64 = joined.outside.iter().map(|r| r.count).sum();
    const MIB: f64 = (1 << 20) as f64;
    println!(
        "workload join, {} intervals x {} exits ({inside} inside, {outside} outside): {took:.2} s \
         on one core; RSS growth {:.1} MiB with the inputs ({:.1} MiB before, peak {:.1} MiB)",
        held.len(),
        n_exits,
        peak.saturating_sub(rss_before) as f64 / MIB,
        rss_before as f64 / MIB,
        peak as f64 / MIB,
    );
}
