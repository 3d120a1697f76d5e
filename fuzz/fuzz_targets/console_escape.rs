//! Terminal escaping of untrusted text (`xvmm_host::escape`): `visible`
//! for one line of a report, `ConsoleEscaper` for a guest's console stream.
//! Input: a byte choosing the write size, then the bytes. Escaped text holds
//! no control character (the console keeps `\n`, `\r`, `\t`) nor
//! bidirectional override, and writes of any size escape alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;
use xvmm_fuzz::{assert_terminal_safe, is_terminal_unsafe, knob};
use xvmm_host::escape::{visible, ConsoleEscaper};

fn console(bytes: &[u8], write_size: usize) -> String {
    let mut e = ConsoleEscaper::new();
    let mut out: String = bytes.chunks(write_size).map(|c| e.escape(c)).collect();
    out += &e.finish();
    out
}

fuzz_target!(|data: &[u8]| {
    let (write_size, bytes) = knob(data);
    let text = String::from_utf8_lossy(bytes);
    let shown = visible(&text);
    assert_terminal_safe(&shown, &[], "visible");
    match &shown {
        Cow::Borrowed(s) => assert!(!s.chars().any(is_terminal_unsafe)),
        Cow::Owned(s) => assert!(s.len() > text.len()),
    }
    let whole = console(bytes, bytes.len().max(1));
    assert_terminal_safe(&whole, &['\n', '\r', '\t'], "ConsoleEscaper");
    assert_eq!(whole, console(bytes, usize::from(write_size).max(1)));
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !text
            .chars()
            .any(|c| is_terminal_unsafe(c) && !matches!(c, '\n' | '\r' | '\t'))
        {
            assert_eq!(whole, text, "clean text must pass unchanged");
        }
    }
});
