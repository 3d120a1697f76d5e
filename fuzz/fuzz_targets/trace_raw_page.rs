//! Host-side exit timing, binary reader: one `trace_pipe_raw` page of
//! arbitrary bytes decoded with a fixed header_page and the kvm formats
//! (`host_trace::RawDecoder`), the events paired (`ExitAggregator`); the
//! same bytes through the generic decoder (`tracefs_raw::Page`) and, as
//! text, through the header_page, format and `__print_symbolic` parsers.
//! Every record lies inside the page; a page stops at its first malformed
//! event; pairing counts add up. The bytes as pages of two CPUs, replayed
//! as a recording is (`replay_pages`, events handed on as the pages
//! allow): every event and corrupt page counted, and where each CPU's
//! times run forward, what merging the whole run at once gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::host_trace::{
    example_decoder, replay_pages, CpuMerge, ExitAggregator, PageOutcome, RawDecoder,
    EXAMPLE_HEADER_PAGE,
};
use xvmm_fuzz::CheckedAggregator;
use xvmm_host::tracefs_raw::{symbolic_tables, EventFormat, Page, PageLayout};

fn decoder() -> &'static RawDecoder {
    // One per thread: the decoder caches exit reasons in a RefCell (it is
    // Send, not Sync); libFuzzer runs the target on one thread.
    thread_local! {
        static DECODER: &'static RawDecoder =
            Box::leak(Box::new(example_decoder().expect("the example formats decode")));
    }
    DECODER.with(|d| *d)
}

fuzz_target!(|data: &[u8]| {
    let d = decoder();
    let mut checked = CheckedAggregator::default();
    let mut fast = Vec::new();
    let outcome = d.decode_page(data, |ts, event| {
        fast.push((ts, event.clone()));
        checked.push(event);
    });
    checked.checked_summary();
    // The fast path (fields resolved once, reasons cached) gives exactly
    // what the general path gives, page by page.
    let mut general = Vec::new();
    let general_outcome = d.decode_page_general(data, |ts, event| general.push((ts, event)));
    assert_eq!((outcome, &fast), (general_outcome, &general));
    let layout = PageLayout::parse(EXAMPLE_HEADER_PAGE).unwrap();
    if let Ok(page) = Page::parse(&layout, data) {
        let range = data.as_ptr_range();
        let mut errors = 0;
        for record in page.records() {
            match record {
                Ok(r) => {
                    let inside =
                        range.start <= r.data.as_ptr() && r.data.as_ptr_range().end <= range.end;
                    assert!(inside, "a record outside the page");
                }
                Err(_) => errors += 1,
            }
        }
        assert!(errors <= 1, "decoding goes on after a malformed event");
    }
    let text = String::from_utf8_lossy(data);
    let _ = PageLayout::parse(&text).map(|l| assert!(l.page_size() > 0));
    if let Ok(f) = EventFormat::parse(&text) {
        for t in &f.symbols {
            let _ = f.symbol(&t.field, data);
        }
    }
    let _ = symbolic_tables(&text);
    replay_as_two_cpus(d, data);
});

/// `data` as pages of two CPUs in turn, zero-padded to whole pages.
fn replay_as_two_cpus(d: &RawDecoder, data: &[u8]) {
    let size = d.page_size();
    let pages: Vec<Vec<u8>> = data
        .chunks(size)
        .map(|c| {
            let mut p = c.to_vec();
            p.resize(size, 0);
            p
        })
        .collect();
    let mut next = [0, 1];
    let replayed = replay_pages(d, 2, |cpu, page| {
        let Some(p) = pages.get(next[cpu]) else {
            return false;
        };
        next[cpu] += 2;
        page.clone_from(p);
        true
    });
    // The oracle: every page into the merge, CPU by CPU, released whole.
    let (mut merge, mut events, mut corrupt) = (CpuMerge::new(2), 0, 0);
    let mut forward = [true, true];
    let mut latest = [0u64, 0];
    for cpu in 0..2 {
        for p in pages.iter().skip(cpu).step_by(2) {
            d.decode_page(p, |ts, _| {
                forward[cpu] &= ts >= latest[cpu];
                latest[cpu] = latest[cpu].max(ts);
            });
            let (outcome, n) = d.decode_into(cpu, p, &mut merge);
            events += n;
            corrupt += u64::from(outcome == PageOutcome::Corrupt);
        }
    }
    assert_eq!((replayed.events, replayed.corrupt_pages), (events, corrupt));
    let mut whole = ExitAggregator::default();
    merge.release_all(|(cpu, ev)| whole.push_on(cpu, ev));
    let (got, want) = (replayed.aggregator.finish(0), whole.finish(0));
    if forward == [true, true] {
        assert_eq!(got.trace, want.trace);
        assert_eq!((got.unpaired, got.lost), (want.unpaired, want.lost));
    }
}
