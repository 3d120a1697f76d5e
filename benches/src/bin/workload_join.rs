//! Issue 38's scale target for the VM side of a workload: 10 M guest
//! intervals joined with 10 M host exits within 256 MiB and 10 s on one
//! core, the way `xvmm --workload` does it (`xvmm/src/linux/workload.rs:
//! add_workload_exits`).
//!
//! The exits are the recorded real trace's (`benches/data/kvm_trace`,
//! read by the binary reader) repeated back to back, kept in the trace's
//! exit log as the host side keeps them. The intervals are synthetic and
//! deterministic, over the same time on the trace's vCPUs: system calls
//! filling two thirds of the time, every eighth with a timer interrupt
//! inside it, sent as the guest sends them (32-byte records in 8 MiB
//! chunks, in order of their ends) into the VMM's [`IntervalSink`]. Then
//! the one-sweep join. Prints the sizes, each stage's time, and the
//! resident memory the inputs and the join took (the kernel's high-water
//! mark, reset before the inputs are built, minus the resident memory
//! then), which `claims.rs` holds to the targets.
//!
//! `XVMM_JOIN_INTERVALS` and `XVMM_JOIN_EXITS` (default 10 M each) set the
//! sizes.

use std::collections::BTreeSet;
use std::time::Instant;
use xvmm::devices::interval_sink::IntervalSink;
use xvmm_benches::trace::status_bytes;
use xvmm_results::interval_stream::RECORD;
use xvmm_results::stats::workload_join::{join, GuestExit, StreamedInterval};

const SYSCALL_CODE: u64 = 1 << 32;
const TIMER_CODE: u64 = (3 << 32) + 236;
/// The guest's chunk (`guest/xperf/src/workload/stream.rs`).
const CHUNK: usize = 8 << 20;

/// One vCPU's intervals in the order they close.
struct CpuIntervals {
    cpu: u32,
    at: u64,
    period: u64,
    k: u64,
    left: u64,
    timer: Option<StreamedInterval>,
}

impl Iterator for CpuIntervals {
    type Item = StreamedInterval;

    fn next(&mut self) -> Option<StreamedInterval> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let Some(t) = self.timer.take() {
            return Some(t);
        }
        let length = self.period / 2 + (self.k * 7919) % (self.period / 4).max(1);
        let call = StreamedInterval {
            start: self.at,
            end: self.at + length,
            code: SYSCALL_CODE + self.k % 300,
            cpu: self.cpu,
        };
        self.at += self.period;
        self.k += 1;
        if self.k.is_multiple_of(8) && self.left > 0 {
            // The timer closes first; the call comes after it.
            let quarter = length / 4;
            self.timer = Some(call);
            return Some(StreamedInterval {
                start: call.start + quarter,
                end: call.start + quarter + length / 8,
                code: TIMER_CODE,
                cpu: self.cpu,
            });
        }
        Some(call)
    }
}

/// The intervals of every vCPU over `[from, to)`, merged by end as the
/// guest sends them, in chunks into a sink.
fn stream_intervals(count: u64, cpus: &[u32], (from, to): (u64, u64)) -> IntervalSink {
    let n = cpus.len().max(1) as u64;
    let per_cpu = count / n;
    let period = ((to - from) / per_cpu.max(1)).max(16);
    let mut heads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            let mut it = CpuIntervals {
                cpu,
                at: from + u64::from(cpu) * 7,
                period,
                k: 0,
                left: per_cpu,
                timer: None,
            };
            let first = it.next();
            (it, first)
        })
        .collect();
    let mut sink = IntervalSink::default();
    let mut chunk = Vec::with_capacity(CHUNK);
    while let Some((it, head)) = heads
        .iter_mut()
        .filter(|(_, h)| h.is_some())
        .min_by_key(|(_, h)| h.map_or(u64::MAX, |h| h.end))
    {
        let Some(i) = head.take() else { break };
        *head = it.next();
        chunk.extend_from_slice(&i.encode());
        if chunk.len() + RECORD > CHUNK {
            sink.take_chunk(Ok(std::mem::take(&mut chunk)));
        }
    }
    sink.take_chunk(Ok(chunk));
    sink
}

fn main() {
    let n_intervals = xvmm_benches::env_u64("XVMM_JOIN_INTERVALS", 10_000_000);
    let n_exits = xvmm_benches::env_u64("XVMM_JOIN_EXITS", 10_000_000);
    let recording = match xvmm_benches::recorded::load() {
        Ok((recording, _)) => recording,
        Err(e) => {
            eprintln!("workload_join: the recorded trace: {e}");
            std::process::exit(1);
        }
    };
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = status_bytes("VmRSS:").unwrap_or(0);
    let start = Instant::now();
    let (trace, _) = xvmm_benches::recorded::tiled_exits(&recording, n_exits, 1);
    let (first, last) = trace
        .exits
        .iter()
        .fold((u64::MAX, 0), |(f, l), e| (f.min(e.exit), l.max(e.entry)));
    let cpus: Vec<u32> = trace
        .exits
        .iter()
        .map(|e| e.vcpu)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let exits_took = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let sink = stream_intervals(n_intervals, &cpus, (first, last));
    let intervals_took = start.elapsed().as_secs_f64();
    let start = Instant::now();
    // The guest's timeline is the host's here (offset 0, one rate).
    let exits = trace.exits.iter().map(|e| GuestExit {
        vcpu: e.vcpu,
        at: e.exit,
        ticks: e.entry.saturating_sub(e.exit),
        reason: e.reason,
    });
    let joined = join(exits, sink.intervals(), &[], &trace.reasons, (first, last));
    let join_took = start.elapsed().as_secs_f64();
    let peak = status_bytes("VmHWM:").unwrap_or(0);
    let inside: u64 = joined.rows.iter().map(|r| r.count()).sum();
    let outside: u64 = joined.outside.iter().map(|r| r.count).sum();
    const MIB: f64 = (1 << 20) as f64;
    println!(
        "workload join, {} intervals x {} exits on {} vCPUs ({inside} inside, {outside} outside, \
         {} late, {} misordered): join {join_took:.2} s on one core (exit log {exits_took:.2} s, \
         interval log {intervals_took:.2} s); exit log {:.1} MiB, interval log {:.1} MiB; \
         RSS growth {:.1} MiB with the inputs ({:.1} MiB before, peak {:.1} MiB)",
        joined.intervals,
        trace.exits.len(),
        cpus.len(),
        sink.late(),
        joined.exits_misordered,
        trace.exits.bytes() as f64 / MIB,
        sink.logs.iter().map(|l| l.bytes()).sum::<usize>() as f64 / MIB,
        peak.saturating_sub(rss_before) as f64 / MIB,
        rss_before as f64 / MIB,
        peak as f64 / MIB,
    );
}
