//! Checks shared by the fuzz targets (one target per file in `fuzz_targets/`).
//!
//! Every target feeds untrusted bytes to one parser and asserts, beyond "no
//! panic": errors are one line, text meant for a terminal carries no control
//! characters or bidirectional overrides, and results obey the invariants the
//! callers rely on. A new parser gets a new file in `fuzz_targets/`, a
//! `[[bin]]` in Cargo.toml, an entry in `TARGETS` of
//! `benches/src/fuzz/mod.rs` and, for seeds of its own, a case in
//! `benches/src/fuzz/seeds.rs`.

/// Whether `c` would change what a terminal shows beyond its own glyph:
/// a control character or a bidirectional override/isolate/mark.
pub fn is_terminal_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// Asserts that `text` is safe for a terminal, allowing only the characters
/// in `allowed` (e.g. the newlines between a table's rows).
pub fn assert_terminal_safe(text: &str, allowed: &[char], what: &str) {
    if let Some(c) = text
        .chars()
        .find(|&c| is_terminal_unsafe(c) && !allowed.contains(&c))
    {
        panic!("{what}: {c:?} reaches the terminal in {text:?}");
    }
}

/// Asserts that an error message is one non-empty, terminal-safe line.
pub fn assert_one_line(message: &str, what: &str) {
    assert!(!message.is_empty(), "{what}: empty error message");
    assert_terminal_safe(message, &[], what);
}

/// An exit aggregator fed parsed trace events (by either trace reader):
/// checks that exit reasons are one word and that the pairing counts add up.
#[derive(Default)]
pub struct CheckedAggregator {
    pub agg: xvmm::host_trace::ExitAggregator,
    events: u64,
}

impl CheckedAggregator {
    pub fn push(&mut self, event: xvmm::host_trace::TraceEvent) {
        if let xvmm::host_trace::TraceEvent::Exit { reason, .. } = &event {
            assert!(!reason.is_empty() && !reason.contains(char::is_whitespace));
        }
        self.events += 1;
        self.agg.push(event);
    }

    /// The per-reason summary, once every pair and unpaired event is counted
    /// no more than its events allow.
    pub fn checked_summary(&self) -> Vec<xvmm_results::HostExit> {
        let summary = self.agg.summary();
        let paired: u64 = summary.iter().map(|e| e.exit_to_entry.count).sum();
        assert!(2 * paired + self.agg.unpaired <= self.events);
        summary
    }
}

/// Splits fuzz input into command-line arguments at NUL bytes (argv can hold
/// any bytes but NUL), as the program would see them.
pub fn split_args(data: &[u8]) -> Vec<String> {
    if data.is_empty() {
        return Vec::new();
    }
    data.split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Splits `data` at its first byte into a small control value and the rest.
pub fn knob(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&k, rest)) => (k, rest),
        None => (0, data),
    }
}
