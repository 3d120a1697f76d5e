//! The VMM's side of a guest's interval stream (`xvmm --workload`):
//! arbitrary bytes as chunks through `IntervalSink::keep`, then joined
//! with exits made from the same bytes. A chunk is kept whole or not at
//! all; every kept interval re-encodes to its bytes; every exit is
//! counted once by the join.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::devices::interval_sink::IntervalSink;
use xvmm_results::interval_stream::RECORD;
use xvmm_results::stats::workload_join::{GuestExit, Joiner};
use xvmm_results::workload::RowExits;

fuzz_target!(|data: &[u8]| {
    let (head, body) = data.split_at(data.len().min(1));
    let cut = usize::from(head.first().copied().unwrap_or(0)) % 4 + 1;
    let mut sink = IntervalSink::default();
    for chunk in body.chunks(RECORD * cut) {
        let before = sink.intervals.len();
        match sink.keep(chunk) {
            Ok(()) => {
                let kept = &sink.intervals[before..];
                let bytes: Vec<u8> = kept.iter().flat_map(|i| i.encode()).collect();
                assert_eq!(bytes, chunk, "a kept chunk re-encodes to itself");
            }
            Err(why) => {
                assert_eq!(
                    sink.intervals.len(),
                    before,
                    "a refused chunk kept something"
                );
                assert!(!why.contains('\n'));
            }
        }
    }
    let exits: Vec<GuestExit> = body
        .chunks_exact(11)
        .map(|b| GuestExit {
            vcpu: u32::from(b[0] % 3),
            at: u64::from_le_bytes([b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8]]) % 4096,
            ticks: u64::from(b[9]),
            reason: u16::from(b[10] % 4),
        })
        .collect();
    let total = exits.len() as u64;
    let mut joiner = Joiner::new(exits);
    for i in &sink.intervals {
        joiner.add(i);
    }
    let w = joiner.finish(&[], &[], 1000, 3000);
    let counted: u64 = w.rows.iter().map(RowExits::count).sum::<u64>()
        + w.outside.iter().map(|o| o.count).sum::<u64>()
        + w.outside_window;
    assert_eq!(counted, total, "every exit counted once");
    assert_eq!(w.intervals, sink.intervals.len() as u64);
});
