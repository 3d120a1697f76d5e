//! The text trace: one line of `trace_pipe` as an event, and lines taken
//! from reads of any size.

/// Exits and entries; the port behind an I/O exit (to find the calibration
/// exits); offset rewrites (for the timeline).
pub(super) const TRACED_EVENTS: [&str; 4] =
    ["kvm_exit", "kvm_entry", "kvm_pio", "kvm_write_tsc_offset"];

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    Exit {
        tid: i32,
        vcpu: u32,
        ts: u64,
        /// Shared: the binary reader names each distinct reason once.
        reason: std::sync::Arc<str>,
    },
    Entry {
        tid: i32,
        vcpu: u32,
        ts: u64,
    },
    /// `kvm_pio`: the port access behind the thread's pending I/O exit.
    Pio {
        tid: i32,
        write: bool,
        port: u16,
        value: u32,
    },
    /// `kvm_write_tsc_offset`: KVM gave the vCPU a new TSC offset.
    TscOffset {
        ts: u64,
        vcpu: u32,
        offset: i64,
    },
    /// `CPU:N [LOST M EVENTS]`: the ring buffer dropped events here.
    Lost {
        count: u64,
    },
    /// One of KVM's async page fault tracepoints.
    AsyncPf {
        kind: AsyncPfEvent,
        ts: u64,
    },
}

/// KVM's async page fault tracepoints (include/trace/events/kvm.h), in the
/// order a fault meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AsyncPfEvent {
    /// The vCPU's fault could not be served at once; KVM tries going async.
    TryAsyncGetPage,
    /// The guest touched a page already being fetched: the vCPU halts on it.
    RepeatedFault,
    /// KVM queued the fetch and told the guest "page not present" (or, if
    /// the guest cannot take it, halted the vCPU).
    NotPresent,
    /// The worker fetched the page (runs in a kworker, not the vCPU thread).
    Completed,
    /// KVM told the guest the page is ready.
    Ready,
}

impl AsyncPfEvent {
    pub const ALL: [AsyncPfEvent; 5] = [
        AsyncPfEvent::TryAsyncGetPage,
        AsyncPfEvent::RepeatedFault,
        AsyncPfEvent::NotPresent,
        AsyncPfEvent::Completed,
        AsyncPfEvent::Ready,
    ];

    /// The tracepoint's name under events/kvm.
    pub fn tracepoint(self) -> &'static str {
        match self {
            AsyncPfEvent::TryAsyncGetPage => "kvm_try_async_get_page",
            AsyncPfEvent::RepeatedFault => "kvm_async_pf_repeated_fault",
            AsyncPfEvent::NotPresent => "kvm_async_pf_not_present",
            AsyncPfEvent::Completed => "kvm_async_pf_completed",
            AsyncPfEvent::Ready => "kvm_async_pf_ready",
        }
    }

    pub fn from_tracepoint(name: &str) -> Option<AsyncPfEvent> {
        AsyncPfEvent::ALL
            .into_iter()
            .find(|e| e.tracepoint() == name)
    }
}

/// The head of an event line: `comm-tid [cpu] flags ts: name: ` -> (tid,
/// ts, name, rest), from the one tracefs record parser.
fn split_event(line: &str) -> Option<(i32, u64, &str, &str)> {
    let record = xvmm_host::tracefs::parse_record(line)?;
    let (name, body) = record.body.split_once(": ").unwrap_or((record.body, ""));
    Some((record.pid, record.ts, name, body))
}

/// The word after `key` in `text` (`key` a whole word), trailing commas cut.
fn word_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().map(|v| v.trim_end_matches(','));
        }
    }
    None
}

/// `key=value` in `text`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn hex_u32(text: &str) -> Option<u32> {
    u32::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// Parses one line of the text trace format, e.g.
/// `xvmm-1234 [001] d..1. 5398127362712: kvm_exit: vcpu 0 reason io rip 0x...`.
/// Lines that are none of the traced events (comments, other events) give `None`.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    if let Some(rest) = line.trim_start().strip_prefix("CPU:") {
        let count = rest.split_once("[LOST ")?.1.split_whitespace().next()?;
        return Some(TraceEvent::Lost {
            count: count.parse().ok()?,
        });
    }
    let (tid, ts, name, body) = split_event(line)?;
    match name {
        "kvm_exit" => Some(TraceEvent::Exit {
            tid,
            vcpu: word_after(body, "vcpu")?.parse().ok()?,
            ts,
            // "reason ," trims to nothing: not an exit line.
            reason: word_after(body, "reason").filter(|r| !r.is_empty())?.into(),
        }),
        "kvm_entry" => Some(TraceEvent::Entry {
            tid,
            vcpu: word_after(body, "vcpu")?.parse().ok()?,
            ts,
        }),
        "kvm_pio" => {
            let write = body.starts_with("pio_write");
            Some(TraceEvent::Pio {
                tid,
                write,
                port: u16::try_from(hex_u32(word_after(body, "at")?)?).ok()?,
                value: hex_u32(word_after(body, "val")?)?,
            })
        }
        name if AsyncPfEvent::from_tracepoint(name).is_some() => Some(TraceEvent::AsyncPf {
            kind: AsyncPfEvent::from_tracepoint(name)?,
            ts,
        }),
        "kvm_write_tsc_offset" => Some(TraceEvent::TscOffset {
            ts,
            vcpu: field(body, "vcpu")?.parse().ok()?,
            // Printed as an unsigned 64-bit number: the bits of an i64.
            offset: field(body, "next")?.parse::<u64>().ok()?.cast_signed(),
        }),
        _ => None,
    }
}

/// The CPU a text trace line is of: `CPU:N [LOST ...]` or an event's
/// `[cpu]` field.
pub(super) fn line_cpu(line: &str) -> Option<usize> {
    if let Some(rest) = line.trim_start().strip_prefix("CPU:") {
        return rest.split_whitespace().next()?.parse().ok();
    }
    let cpu = xvmm_host::tracefs::parse_record(line)?.cpu;
    usize::try_from(cpu).ok()
}

/// Longest trace line kept (a kvm_exit line is about 150 bytes); longer
/// ones are dropped whole, so a reader's memory stays bounded.
pub const MAX_TRACE_LINE: usize = 4096;

/// Cuts the `trace_pipe` byte stream into lines across reads of any size: a
/// line (or a UTF-8 sequence) split between two reads is joined before it is
/// parsed. Lines longer than [`MAX_TRACE_LINE`] are skipped.
#[derive(Debug, Default)]
pub struct TraceLines {
    partial: Vec<u8>,
    /// The current line has already passed the limit: skip to its end.
    overlong: bool,
}

impl TraceLines {
    /// Calls `each` with every line that `bytes` completes, without its `\n`
    /// (invalid UTF-8 shown as U+FFFD).
    pub fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(&str)) {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let line = &rest[..nl];
            rest = &rest[nl + 1..];
            if std::mem::take(&mut self.overlong) {
                continue;
            }
            if self.partial.is_empty() {
                if line.len() <= MAX_TRACE_LINE {
                    each(&String::from_utf8_lossy(line));
                }
            } else {
                self.partial.extend_from_slice(line);
                if self.partial.len() <= MAX_TRACE_LINE {
                    each(&String::from_utf8_lossy(&self.partial));
                }
                self.partial.clear();
            }
        }
        if self.overlong {
            return;
        }
        if self.partial.len() + rest.len() > MAX_TRACE_LINE {
            self.partial.clear();
            self.overlong = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmx_and_svm_lines() {
        let exit = "  xvmm-vcpu-0-4242  [001] d..1.  5398127362712: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip 0xfff0 info1 0x0";
        assert_eq!(
            parse_line(exit),
            Some(TraceEvent::Exit {
                tid: 4242,
                vcpu: 0,
                ts: 5398127362712,
                reason: "IO_INSTRUCTION".into()
            })
        );
        let svm = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 2 reason npf rip 0x1 info1 0x0";
        assert_eq!(
            parse_line(svm),
            Some(TraceEvent::Exit {
                tid: 7,
                vcpu: 2,
                ts: 99,
                reason: "npf".into()
            })
        );
        let entry = "  xvmm-4242  [001] d..1.  5398127364000: kvm_entry: vcpu 0, rip 0xfff0";
        assert_eq!(
            parse_line(entry),
            Some(TraceEvent::Entry {
                tid: 4242,
                vcpu: 0,
                ts: 5398127364000
            })
        );
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(
            parse_line("CPU:1 [LOST 12 EVENTS]"),
            Some(TraceEvent::Lost { count: 12 })
        );
        assert_eq!(
            parse_line("x-1 [0] .... notanumber: kvm_entry: vcpu 0"),
            None
        );
        assert_eq!(parse_line("x-1 [0] .... 5: kvm_entry: rip 0x0"), None);
    }

    #[test]
    fn a_line_names_its_cpu() {
        assert_eq!(line_cpu("CPU:3 [LOST 12 EVENTS]"), Some(3));
        let exit = "  xvmm-4242  [017] d..1.  5: kvm_exit: vcpu 0 reason io rip 0x1";
        assert_eq!(line_cpu(exit), Some(17));
        assert_eq!(line_cpu("# tracer: nop"), None);
        assert_eq!(line_cpu("CPU:x [LOST 1 EVENTS]"), None);
    }

    #[test]
    fn an_exit_without_a_reason_is_not_an_exit() {
        // Found by fuzzing (fuzz/seeds/trace_line/crash-1560e5bd...).
        let line = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 0 reason , rip 0xfff0";
        assert_eq!(parse_line(line), None);
    }

    #[test]
    fn parses_port_and_offset_events() {
        let pio = "xvmm-9 [001] d..1. 120: kvm_pio: pio_write at 0x508 size 4 count 1 val 0x2a ";
        assert_eq!(
            parse_line(pio),
            Some(TraceEvent::Pio {
                tid: 9,
                write: true,
                port: 0x508,
                value: 42
            })
        );
        let read = "xvmm-9 [001] d..1. 120: kvm_pio: pio_read at 0x3fd size 1 count 1 val 0x60 ";
        assert!(matches!(
            parse_line(read),
            Some(TraceEvent::Pio { write: false, .. })
        ));
        let offset =
            "xvmm-9 [000] ..... 77: kvm_write_tsc_offset: vcpu=0 prev=0 next=18446744073709551516";
        assert_eq!(
            parse_line(offset),
            Some(TraceEvent::TscOffset {
                ts: 77,
                vcpu: 0,
                offset: -100
            })
        );
    }

    #[test]
    fn lines_split_across_reads_are_joined_and_overlong_ones_skipped() {
        let text = "a-1 [0] . 5: kvm_entry: vcpu 0\nx\u{e9}y\n".as_bytes();
        let mut whole = Vec::new();
        TraceLines::default().feed(text, |l| whole.push(l.to_string()));
        assert_eq!(whole, ["a-1 [0] . 5: kvm_entry: vcpu 0", "x\u{e9}y"]);
        // One byte per read, splitting the two-byte e-acute too.
        let mut bytewise = Vec::new();
        let mut lines = TraceLines::default();
        for b in text {
            lines.feed(std::slice::from_ref(b), |l| bytewise.push(l.to_string()));
        }
        assert_eq!(bytewise, whole);
        let mut long = vec![b'x'; MAX_TRACE_LINE + 1];
        long.extend_from_slice(b"\nshort\n");
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        for chunk in long.chunks(1000) {
            lines.feed(chunk, |l| kept.push(l.to_string()));
        }
        assert_eq!(kept, ["short"]);
    }

    #[test]
    fn lines_up_to_the_limit_are_kept_across_reads_and_the_buffer_stays_bounded() {
        // A typical line cut in the middle by the read boundary is joined.
        let line = "xvmm-7 [000] ..... 99: kvm_exit: vcpu 2 reason npf rip 0x1 info1 0x0 info2 0x0 intr_info 0x0 error_code 0x0 requests 0x0";
        let (head, tail) = line.split_at(line.len() / 2);
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        lines.feed(head.as_bytes(), |l| kept.push(l.to_string()));
        lines.feed(format!("{tail}\n").as_bytes(), |l| kept.push(l.to_string()));
        assert_eq!(kept, [line]);
        // ... also when it comes in three reads.
        let (first, second) = head.split_at(head.len() / 2);
        let mut kept = Vec::new();
        for part in [first, second, &format!("{tail}\n")] {
            lines.feed(part.as_bytes(), |l| kept.push(l.to_string()));
        }
        assert_eq!(kept, [line]);
        // Exactly MAX_TRACE_LINE bytes, its newline in the next read: kept.
        let longest = "y".repeat(MAX_TRACE_LINE);
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        lines.feed(longest.as_bytes(), |l| kept.push(l.to_string()));
        assert_eq!(lines.partial.len(), MAX_TRACE_LINE);
        lines.feed(b"\nnext\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, [longest.as_str(), "next"]);
        // A line far past the limit is never buffered whole.
        let mut kept = Vec::new();
        let mut lines = TraceLines::default();
        for _ in 0..10 {
            lines.feed(&[b'z'; 1000], |l| kept.push(l.to_string()));
            assert!(
                lines.partial.len() <= MAX_TRACE_LINE,
                "{}",
                lines.partial.len()
            );
        }
        lines.feed(b"z\nafter\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, ["after"]);
        // ... nor when it comes in one read.
        lines.feed(&[b'z'; 10_000], |l| kept.push(l.to_string()));
        assert!(
            lines.partial.len() <= MAX_TRACE_LINE,
            "{}",
            lines.partial.len()
        );
        lines.feed(b"\nlast\n", |l| kept.push(l.to_string()));
        assert_eq!(kept, ["after", "last"]);
    }
}
