//! The host trace readers on a synthetic run, for the `trace_parse` bench
//! and its claim: `n` exits, each a `kvm_exit` then a `kvm_entry` of one
//! vCPU thread, as the text lines KVM prints and as the binary ring-buffer
//! pages the kernel writes; both read into the same aggregator.

use std::time::{Duration, Instant};
use xvmm::host_trace::{parse_line, CpuMerge, ExitAggregator, RawDecoder};
use xvmm_results::tracefs_raw::{encode_record, Missed, PageWriter};

/// The first exit's time, the exits' spacing and each exit's duration.
const START: u64 = 5_398_127_362_712;
const SPACING: u64 = 1000;
const IN_HOST: u64 = 400;

/// What one reader did with the run.
pub struct ReadRun {
    pub exits: usize,
    pub elapsed: Duration,
}

impl ReadRun {
    pub fn exits_per_sec(&self) -> f64 {
        self.exits as f64 / self.elapsed.as_secs_f64()
    }
}

pub fn synthetic_text(n: u64) -> String {
    let mut text = String::with_capacity(xvmm_results::num::usize_from(n) * 200);
    for i in 0..n {
        let ts = START + i * SPACING;
        text += &format!(
            "  xvmm-4242  [001] d..1. {ts}: kvm_exit: vcpu 0 reason npf rip 0xffffffff81000000 \
             info1 0x0000000000000006 info2 0x0000000000001000 intr_info 0x00000000 error_code 0x00000000\n"
        );
        text += &format!(
            "  xvmm-4242  [001] d..1. {}: kvm_entry: vcpu 0, rip 0xffffffff81000000\n",
            ts + IN_HOST
        );
    }
    text
}

/// The same run as pages of `decoder`'s layout and formats (an SVM host:
/// `npf` is exit code 0x400).
pub fn synthetic_pages(decoder: &RawDecoder, n: u64) -> Vec<Vec<u8>> {
    let (Some(exit_format), Some(entry_format)) =
        (decoder.format("kvm_exit"), decoder.format("kvm_entry"))
    else {
        return Vec::new();
    };
    let common = [("common_pid", 4242), ("vcpu_id", 0)];
    let exit = encode_record(
        exit_format,
        &[common[0], common[1], ("isa", 2), ("exit_reason", 0x400)],
    );
    let entry = encode_record(entry_format, &common);
    let mut pages = Vec::new();
    let mut page = PageWriter::new(decoder.layout(), START);
    let mut last = START;
    for i in 0..n {
        let ts = START + i * SPACING;
        for (at, record) in [(ts, &exit), (ts + IN_HOST, &entry)] {
            let delta = u32::try_from(at - last).expect("SPACING and IN_HOST are small");
            if !page.event(delta, record) {
                let full = std::mem::replace(&mut page, PageWriter::new(decoder.layout(), at));
                pages.push(full.finish(Missed::None));
                page.event(0, record);
            }
            last = at;
        }
    }
    pages.push(page.finish(Missed::None));
    pages
}

pub fn read_text(text: &str) -> ReadRun {
    let start = Instant::now();
    let mut agg = ExitAggregator::default();
    for line in text.lines() {
        if let Some(ev) = parse_line(line) {
            agg.push(ev);
        }
    }
    let exits = agg.finish(0).trace.exits.len();
    ReadRun {
        exits,
        elapsed: start.elapsed(),
    }
}

/// Decodes, merges (one CPU) and aggregates, as the binary reader does.
pub fn read_pages(decoder: &RawDecoder, pages: &[Vec<u8>]) -> ReadRun {
    let start = Instant::now();
    let mut agg = ExitAggregator::default();
    let mut merge = CpuMerge::new(1);
    for page in pages {
        decoder.decode_page(page, |ts, ev| merge.push(0, ts, ev));
        merge.release_all(|ev| agg.push(ev));
    }
    let exits = agg.finish(0).trace.exits.len();
    ReadRun {
        exits,
        elapsed: start.elapsed(),
    }
}

/// Decodes every page and counts the events, nothing else: the decode
/// rate issue 25 sets a target for (events, time).
/// `general`: by the general path (`decode_page_general`), the fast
/// path's oracle and the rate before it.
pub fn decode_only(decoder: &RawDecoder, pages: &[Vec<u8>], general: bool) -> (usize, Duration) {
    let start = Instant::now();
    let mut events = 0usize;
    let mut count = |_, ev| {
        std::hint::black_box(&ev);
        events += 1;
    };
    for page in pages {
        if general {
            decoder.decode_page_general(page, &mut count);
        } else {
            decoder.decode_page(page, &mut count);
        }
    }
    (events, start.elapsed())
}
