//! `xperf workload`'s reader: arbitrary bytes cut into `trace_pipe_raw`
//! pages of two CPUs, decoded with the example formats
//! (`workload::decode::Decoder`), merged by time, the tasks followed
//! (`Follow`) and the intervals paired (`stats::workload::Builder`).
//! Every event keeps its CPU; a page's count is what it gave; the
//! intervals are ordered and the figures count each once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xperf::workload::decode::{example_decoder, Follow};
use xvmm_host::tracefs_pipes::CpuMerge;
use xvmm_results::stats::workload::{Builder, Interval};

fuzz_target!(|data: &[u8]| {
    let mut decoder = example_decoder();
    let page = decoder.page_size();
    let mut merge = CpuMerge::new(2);
    let mut events = 0u64;
    for (i, chunk) in data.chunks(page.max(1)).enumerate() {
        let cpu = i % 2;
        let mut given = 0u64;
        let index = u32::try_from(cpu).unwrap_or(u32::MAX);
        let count = decoder.decode_page(index, chunk, |s| {
            assert_eq!(s.cpu, index, "an event moved CPU");
            if s.raw != xperf::workload::decode::Raw::Lost {
                given += 1;
            }
            merge.push(cpu, s.ts, s);
        });
        assert_eq!(count.events, given, "a page's count is what it gave");
        events += given;
    }
    // The first event's task is the command, as the real reader's is.
    let mut follow = Follow::new(7);
    let mut builder = Builder::new();
    let mut closed = 0u64;
    merge.release_all(|s| {
        follow.push(&s, |r| {
            builder.push(&r, &mut |i: &Interval| {
                assert!(i.start <= i.end, "an interval ends before it starts");
                closed += 1;
            })
        })
    });
    let finished = builder.finish();
    let counted: u64 = finished.figures.iter().map(|f| f.length.count).sum();
    assert_eq!(counted, closed, "the figures count each interval once");
    assert!(closed <= events, "more intervals than events");
});
