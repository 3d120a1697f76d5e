//! Host-side exit timing (`--trace`): the trace_pipe text cut into lines
//! across reads (`host_trace::TraceLines`), each line parsed
//! (`host_trace::parse_line`), exits paired with entries
//! (`ExitAggregator`) and rendered. Input: a byte choosing the read size,
//! then the text. Reads of any size must give the lines of the whole text.
//!
//! The binary trace-page parser (issue 12) gets a target of its own,
//! `fuzz_targets/trace_page.rs`, beside this one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::host_trace::{parse_line, ExitAggregator, TraceEvent, TraceLines, MAX_TRACE_LINE};
use xvmm_fuzz::{assert_terminal_safe, knob};

fuzz_target!(|data: &[u8]| {
    let (read_size, text) = knob(data);
    let mut whole = Vec::new();
    TraceLines::default().feed(text, |l| whole.push(l.to_owned()));
    let mut pieces = Vec::new();
    let mut lines = TraceLines::default();
    for chunk in text.chunks(usize::from(read_size).max(1)) {
        lines.feed(chunk, |l| pieces.push(l.to_owned()));
    }
    assert_eq!(whole, pieces, "reads of {read_size} bytes");
    let expected: Vec<String> = match text.iter().rposition(|&b| b == b'\n') {
        Some(end) => text[..end]
            .split(|&b| b == b'\n')
            .filter(|l| l.len() <= MAX_TRACE_LINE)
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect(),
        None => Vec::new(),
    };
    assert_eq!(whole, expected);
    let mut agg = ExitAggregator::default();
    let mut events = 0u64;
    for line in &whole {
        let Some(event) = parse_line(line) else {
            continue;
        };
        if let TraceEvent::Exit { reason, .. } = &event {
            assert!(!reason.is_empty() && !reason.contains(char::is_whitespace));
        }
        events += 1;
        agg.push(event);
    }
    let summary = agg.summary();
    let paired: u64 = summary.iter().map(|e| e.exit_to_entry.count).sum();
    assert!(2 * paired + agg.unpaired <= events);
    let table = xvmm_results::render::host_exit_table(&summary);
    assert_terminal_safe(&table, &['\n'], "host_exit_table");
});
