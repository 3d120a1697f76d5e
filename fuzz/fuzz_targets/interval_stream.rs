//! The VMM's side of a guest's interval stream (`xvmm --workload`):
//! arbitrary bytes as chunks through `IntervalSink::keep`, then joined
//! with exits made from the same bytes, in any order. A chunk is kept
//! whole or not at all; the sink gives back what it kept (less the late
//! ones it counts) in order of their ends, each record as sent; every
//! exit is counted once by the join, misordered or not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::devices::interval_sink::IntervalSink;
use xvmm_results::interval_stream::RECORD;
use xvmm_results::stats::workload_join::{join, GuestExit};
use xvmm_results::workload::RowExits;

fuzz_target!(|data: &[u8]| {
    let (head, body) = data.split_at(data.len().min(1));
    let cut = usize::from(head.first().copied().unwrap_or(0)) % 4 + 1;
    let mut sink = IntervalSink::default();
    let mut sent: Vec<[u8; RECORD]> = Vec::new();
    for chunk in body.chunks(RECORD * cut) {
        let before = (sink.len(), sink.late());
        match sink.keep(chunk) {
            Ok(()) => {
                let records = chunk.len() / RECORD;
                assert_eq!(
                    sink.len() + sink.late() as usize,
                    before.0 + before.1 as usize + records
                );
                sent.extend(chunk.chunks_exact(RECORD).map(|r| {
                    let mut a = [0u8; RECORD];
                    a.copy_from_slice(r);
                    a
                }));
            }
            Err(why) => {
                assert_eq!(
                    (sink.len(), sink.late()),
                    before,
                    "a refused chunk kept something"
                );
                assert!(!why.contains('\n'));
            }
        }
    }
    let back: Vec<_> = sink.intervals().collect();
    assert!(
        back.windows(2).all(|w| w[0].end <= w[1].end),
        "in order of ends"
    );
    let mut got: Vec<[u8; RECORD]> = back.iter().map(|i| i.encode()).collect();
    if sink.late() == 0 {
        got.sort_unstable();
        sent.sort_unstable();
        assert_eq!(got, sent, "every record kept as sent");
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
    let w = join(exits, back.iter().copied(), &[], &[], (1000, 3000));
    let counted: u64 = w.rows.iter().map(RowExits::count).sum::<u64>()
        + w.outside.iter().map(|o| o.count).sum::<u64>()
        + w.outside_window;
    assert_eq!(counted, total, "every exit counted once");
    assert_eq!(w.intervals, back.len() as u64);
});
