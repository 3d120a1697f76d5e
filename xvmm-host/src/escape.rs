//! Text that came from a file or a guest, made safe for a terminal.
//!
//! A report is untrusted input: a crossing name, a note or a CPU model string
//! may hold escape sequences (which rewrite the screen), newlines or carriage
//! returns (which forge lines), or bidirectional overrides (which reorder what
//! is shown). Every renderer passes such text through [`visible`]; the guest
//! console goes through [`ConsoleEscaper`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as itself inside one line of text.
fn is_unsafe(c: char) -> bool {
    c.is_control() // C0 (tab and newline included), DEL, C1
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` as one printable line: control characters and bidirectional
/// overrides become visible escapes (`\x1b`, `\n`, `\u{202e}`). Borrowed when
/// there is nothing to escape, which is the common case.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Escapes a byte stream (a guest's serial console) for a terminal: line
/// structure (`\n`, `\r`, `\t`) and printable UTF-8 pass, everything else is
/// shown as an escape. Bytes are buffered until they form whole characters,
/// so a UTF-8 sequence split across writes is not mangled.
#[derive(Debug, Default)]
pub struct ConsoleEscaper {
    pending: Vec<u8>,
}

/// Longest UTF-8 sequence: an incomplete tail longer than this is garbage.
const MAX_UTF8: usize = 4;

impl ConsoleEscaper {
    pub fn new() -> ConsoleEscaper {
        ConsoleEscaper::default()
    }

    /// Escapes `bytes` (after whatever was held back from the last call).
    pub fn escape(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::with_capacity(self.pending.len());
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    push_console_text(&mut out, text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // SAFETY-free: `good` is valid UTF-8 by construction.
                    push_console_text(&mut out, std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            for b in &bad[..n] {
                                let _ = write!(out, "\\x{b:02x}");
                            }
                            rest = &bad[n..];
                        }
                        // An incomplete sequence at the end: wait for more.
                        None if bad.len() < MAX_UTF8 => {
                            rest = bad;
                            break;
                        }
                        None => {
                            let _ = write!(out, "\\x{:02x}", bad[0]);
                            rest = &bad[1..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Whatever is still held back (an incomplete sequence), escaped.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        for b in self.pending.drain(..) {
            let _ = write!(out, "\\x{b:02x}");
        }
        out
    }
}

fn push_console_text(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(c),
            c if is_unsafe(c) => push_escaped(out, c),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(visible("pf-first-touch"), Cow::Borrowed(_)));
        assert_eq!(visible("AMD EPYC Processor µ"), "AMD EPYC Processor µ");
    }

    #[test]
    fn escapes_newlines_and_sequences_become_visible() {
        assert_eq!(visible("a\nb"), "a\\nb");
        assert_eq!(
            visible("\x1b[2J\x1b]0;pwned\x07"),
            "\\x1b[2J\\x1b]0;pwned\\x07"
        );
        assert_eq!(visible("x\ry"), "x\\ry");
        assert_eq!(visible("\u{9b}31m"), "\\x9b31m", "C1 CSI");
        assert_eq!(
            visible("abc\u{202e}fed"),
            "abc\\u{202e}fed",
            "bidi override"
        );
        assert_eq!(visible("\u{7f}"), "\\x7f");
    }

    #[test]
    fn console_keeps_lines_and_escapes_the_rest() {
        let mut e = ConsoleEscaper::new();
        assert_eq!(
            e.escape(b"boot ok\r\n\x1b[31mred\x1b[0m\tdone\n"),
            "boot ok\r\n\\x1b[31mred\\x1b[0m\tdone\n"
        );
        assert_eq!(e.escape(b"\xff\xfe"), "\\xff\\xfe");
    }

    #[test]
    fn console_waits_for_a_split_utf8_sequence() {
        let mut e = ConsoleEscaper::new();
        let euro = "€".as_bytes();
        assert_eq!(e.escape(&euro[..1]), "");
        assert_eq!(e.escape(&euro[1..2]), "");
        assert_eq!(e.escape(&euro[2..]), "€");
        assert_eq!(e.escape(&euro[..2]), "");
        assert_eq!(e.finish(), "\\xe2\\x82");
        assert_eq!(e.finish(), "");
    }

    #[test]
    fn console_escapes_encoded_c1_controls() {
        let mut e = ConsoleEscaper::new();
        assert_eq!(e.escape("\u{9b}2J".as_bytes()), "\\x9b2J");
    }
}
