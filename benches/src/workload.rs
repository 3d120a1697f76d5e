//! `xperf workload`'s reader on a synthetic trace, for the `workload` bench
//! and its claim (issue 38, item 5): pages of two CPUs in the kernel's
//! layout (the example formats), each decoded as it comes, merged by time,
//! the tasks followed and the intervals built, as the live reader does;
//! the time and the resident memory it takes.
//!
//! The mix, per round of each of eight tasks: a system call with a timer
//! interrupt inside every fourth, a user fault and its end every second,
//! a switch out and back every eighth: 15 intervals and 30 events a round
//! of all eight.

use crate::trace::{status_bytes, MemoryRun};
use std::time::Instant;
use xperf::workload::decode::{
    example_decoder, example_formats, Decoder, Follow, EXAMPLE_HEADER_PAGE, FAULT_DONE,
};
use xvmm_host::tracefs_pipes::CpuMerge;
use xvmm_host::tracefs_raw::{encode_record, EventFormat, Missed, PageLayout, PageWriter};
use xvmm_results::stats::workload::Builder;

const START: u64 = 9_000_000_000;
/// The command, and the tasks it forked (each on CPU `pid % 2`).
const ROOT: i32 = 100;
const TASKS: i32 = 8;

/// The encoded records of one task's events.
struct Records {
    enter: Vec<u8>,
    exit: Vec<u8>,
    fault: Vec<u8>,
    done: Vec<u8>,
    irq_in: Vec<u8>,
    irq_out: Vec<u8>,
    out: Vec<u8>,
    back: Vec<u8>,
}

fn records(formats: &[EventFormat], pid: i32) -> Option<Records> {
    let f = |name: &str, fields: &[(&str, u64)]| -> Option<Vec<u8>> {
        let format = formats.iter().find(|f| f.name == name)?;
        Some(encode_record(format, fields))
    };
    let p = u64::try_from(pid).ok()?;
    Some(Records {
        enter: f("sys_enter", &[("common_pid", p), ("id", 0)])?,
        exit: f("sys_exit", &[("common_pid", p), ("id", 0)])?,
        fault: f("page_fault_user", &[("common_pid", p), ("error_code", 6)])?,
        done: f(FAULT_DONE, &[("common_pid", p)])?,
        irq_in: f("local_timer_entry", &[("common_pid", p), ("vector", 0xec)])?,
        irq_out: f("local_timer_exit", &[("common_pid", p), ("vector", 0xec)])?,
        out: f(
            "sched_switch",
            &[("common_pid", p), ("prev_pid", p), ("next_pid", 0)],
        )?,
        back: f(
            "sched_switch",
            &[("common_pid", 0), ("prev_pid", 0), ("next_pid", p)],
        )?,
    })
}

/// One CPU's page being written, and its last time.
struct Cpu {
    page: PageWriter,
    last: u64,
}

impl Cpu {
    fn put(
        &mut self,
        layout: &PageLayout,
        at: u64,
        record: &[u8],
        each: &mut impl FnMut(usize, Vec<u8>),
        cpu: usize,
    ) {
        let delta = u32::try_from(at - self.last).unwrap_or(u32::MAX);
        self.last = at;
        if !self.page.event(delta, record) {
            let full = std::mem::replace(&mut self.page, PageWriter::new(layout, at));
            each(cpu, full.finish(Missed::None));
            self.page.event(0, record);
        }
    }
}

/// The synthetic trace's pages, `rounds` rounds of every task, each page
/// handed to `each` with its CPU as it is written: the two CPUs' pages
/// interleave as a reader draining both would get them.
pub fn for_each_page(rounds: u64, mut each: impl FnMut(usize, Vec<u8>)) {
    let Ok(layout) = PageLayout::parse(EXAMPLE_HEADER_PAGE) else {
        return;
    };
    let formats: Vec<EventFormat> = example_formats()
        .iter()
        .filter_map(|f| EventFormat::parse(f).ok())
        .collect();
    let tasks: Vec<Records> = (0..TASKS)
        .filter_map(|i| records(&formats, ROOT + i))
        .collect();
    let Some(fork) = formats.iter().find(|f| f.name == "sched_process_fork") else {
        return;
    };
    let mut cpus: Vec<Cpu> = (0..2)
        .map(|_| Cpu {
            page: PageWriter::new(&layout, START),
            last: START,
        })
        .collect();
    for child in 1..TASKS {
        let r = encode_record(
            fork,
            &[
                ("common_pid", 100),
                ("parent_pid", 100),
                ("child_pid", u64::from(child.unsigned_abs()) + 100),
            ],
        );
        cpus[0].put(&layout, START, &r, &mut each, 0);
    }
    for round in 0..rounds {
        let base = START + 1000 + round * 4000;
        for (i, t) in tasks.iter().enumerate() {
            let cpu = i % 2;
            // Each task's events in order inside its slot of the round.
            let at = base + (i as u64 / 2) * 1000;
            let mut events: Vec<(u64, &[u8])> = vec![(at, &t.enter)];
            if round % 4 == 0 {
                events.extend([(at + 100, &t.irq_in[..]), (at + 150, &t.irq_out[..])]);
            }
            events.push((at + 300, &t.exit));
            if round % 2 == 0 {
                events.extend([(at + 400, &t.fault[..]), (at + 600, &t.done[..])]);
            }
            if round % 8 == 0 {
                events.extend([(at + 700, &t.out[..]), (at + 900, &t.back[..])]);
            }
            for (ts, r) in events {
                cpus[cpu].put(&layout, ts, r, &mut each, cpu);
            }
        }
    }
    for (cpu, c) in cpus.into_iter().enumerate() {
        each(cpu, c.page.finish(Missed::None));
    }
}

/// What the reader made of the synthetic trace.
pub struct WorkloadRun {
    pub events: u64,
    pub intervals: u64,
    pub memory: MemoryRun,
}

/// Reads `rounds` rounds as the live reader does: each page decoded as it
/// comes, merged by time (released once both CPUs are past), the tasks
/// followed and the intervals built; the peak resident memory on the way.
pub fn ingest(rounds: u64) -> WorkloadRun {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = status_bytes("VmRSS:").unwrap_or(0);
    let start = Instant::now();
    let mut decoder: Decoder = example_decoder();
    let mut merge = CpuMerge::new(2);
    let mut follow = Follow::new(ROOT);
    let mut builder = Builder::new();
    let mut events = 0u64;
    let mut intervals = 0u64;
    for_each_page(rounds, |cpu, page| {
        let index = u32::try_from(cpu).unwrap_or(u32::MAX);
        let count = decoder.decode_page(index, &page, |s| merge.push(cpu, s.ts, s));
        events += count.events;
        // Both CPUs write as the run goes: release what neither can still
        // precede (the live reader's horizon, without the commit slack).
        let horizon = merge.latest(0).min(merge.latest(1));
        merge.release_drained(horizon + (1 << 25), |s| {
            follow.push(&s, |r| builder.push(&r, &mut |_| intervals += 1));
        });
    });
    merge.release_all(|s| follow.push(&s, |r| builder.push(&r, &mut |_| intervals += 1)));
    let finished = builder.finish();
    let counted: u64 = finished.figures.iter().map(|f| f.length.count).sum();
    debug_assert_eq!(counted, intervals);
    WorkloadRun {
        events,
        intervals,
        memory: MemoryRun {
            exits: 0,
            samples_with_exits: 0,
            log_bytes: 0,
            rss_before,
            rss_peak: status_bytes("VmHWM:").unwrap_or(0),
            took: start.elapsed(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_gives_its_intervals_and_none_is_lost() {
        let run = ingest(64);
        // 8 tasks x 64 rounds: 512 calls, 256 faults, 128 interrupts, 64
        // times off CPU.
        assert_eq!(run.intervals, 512 + 256 + 128 + 64);
        assert_eq!(run.events, 7 + 2 * 512 + 2 * 256 + 2 * 128 + 2 * 64);
    }
}
