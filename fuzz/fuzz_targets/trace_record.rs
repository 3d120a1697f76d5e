//! One record of tracefs's text output (`xvmm_host::tracefs::parse_record`,
//! read by `xperf probes` and by the host trace's text reader). Input: a
//! knob byte, then either text (each line parsed) or a record's fields,
//! printed as the kernel prints them (`trace_print_context`:
//! `"%16s-%-7d "`, `"(%7d) "` with record-tgid, `"[%03d] "`, the irq-info
//! flags, `" %12llu: "` for a counter clock or `" %5lu.%06lu: "` for a
//! nanosecond one).
//!
//! A printed record parses back to exactly its pid, CPU, timestamp and
//! body; a nanosecond clock's record is refused (the callers need ticks).
//! The one ambiguity of the format is a command name holding ` [`, which
//! can pose as the CPU field: any task can name itself so. Then the record
//! may be refused or misread, but its true body is still the end of what
//! is read. Any line that parses gives a record that parses back the same
//! when printed anew.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::knob;
use xvmm_host::tracefs::{parse_record, Record};

/// Linux's `PID_MAX_LIMIT` on 64-bit: pids are at most this.
const PID_MAX: u32 = 4 << 20;

#[derive(Arbitrary, Debug)]
struct Printed {
    comm: String,
    pid: u32,
    /// The record-tgid column: `None` without it, `Some(None)` for a task
    /// whose tgid is unknown (`(-------)`).
    tgid: Option<Option<u32>>,
    cpu: u16,
    /// The irq-info flags (`d..1.`), when that option is on.
    flags: Option<[u8; 5]>,
    ts: u64,
    nanosecond_clock: bool,
    body: String,
}

/// A kernel task name: at most 15 bytes (TASK_COMM_LEN), no NUL, and no
/// newline (the callers split the text into lines first).
fn comm(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars().filter(|&c| c != '\0' && c != '\n') {
        if out.len() + c.len_utf8() > 15 {
            break;
        }
        out.push(c);
    }
    out
}

fn print(p: &Printed, comm: &str, body: &str) -> String {
    let pid = p.pid % (PID_MAX + 1);
    let mut line = format!("{comm:>16}-{pid:<7} ");
    match p.tgid {
        None => {}
        Some(None) => line.push_str("(-------) "),
        Some(Some(t)) => line.push_str(&format!("({:>7}) ", t % (PID_MAX + 1))),
    }
    line.push_str(&format!("[{:03}] ", p.cpu));
    if let Some(flags) = p.flags {
        // What trace_print_lat_fmt can print in each column.
        let columns: [&[u8]; 5] = [
            b"dDX.",
            b"NnPpBLb.",
            b"ZHhSs.",
            b"123456789abcdef.",
            b"12345.+",
        ];
        for (col, f) in columns.iter().zip(flags) {
            line.push(char::from(col[usize::from(f) % col.len()]));
        }
    }
    if p.nanosecond_clock {
        line.push_str(&format!(
            " {:5}.{:06}: ",
            p.ts / 1_000_000_000,
            p.ts % 1_000_000_000 / 1000
        ));
    } else {
        line.push_str(&format!(" {:12}: ", p.ts));
    }
    line.push_str(body);
    line
}

fn check_printed(p: &Printed) {
    let comm = comm(&p.comm);
    let body: String = p.body.chars().filter(|&c| c != '\n').collect();
    let line = print(p, &comm, &body);
    let parsed = parse_record(&line);
    // Printed right-aligned in 16 columns: a name shorter than that that
    // starts with `[` follows a space too.
    let forgeable = format!(" {comm:>16}").contains(" [");
    if forgeable {
        if let Some(r) = parsed {
            assert!(r.body.ends_with(&body), "{line:?} -> {r:?}");
        }
    } else if p.nanosecond_clock {
        assert_eq!(
            parsed, None,
            "a nanosecond timestamp read as ticks: {line:?}"
        );
    } else {
        let expected = Record {
            pid: i32::try_from(p.pid % (PID_MAX + 1)).expect("at most PID_MAX"),
            cpu: u32::from(p.cpu),
            ts: p.ts,
            body: &body,
        };
        assert_eq!(parsed, Some(expected), "{line:?}");
    }
}

/// Whatever a line gives must be what the line says, and print anew.
fn check_line(line: &str) {
    let Some(r) = parse_record(line) else { return };
    assert!(
        !line.starts_with('#'),
        "a comment read as a record: {line:?}"
    );
    assert!(r.pid >= 0, "{line:?} -> {r:?}");
    let head = line
        .strip_suffix(r.body)
        .and_then(|h| h.strip_suffix(": "))
        .unwrap_or_else(|| panic!("the body is not what ends the line: {line:?} -> {r:?}"));
    assert!(
        head.trim_end().ends_with(&r.ts.to_string()),
        "{line:?} -> {r:?}"
    );
    let again = format!("x-{} [{:03}] {}: {}", r.pid, r.cpu, r.ts, r.body);
    assert_eq!(
        parse_record(&again),
        Some(r),
        "{line:?} printed as {again:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let (k, rest) = knob(data);
    if k % 2 == 0 {
        for line in String::from_utf8_lossy(rest).lines() {
            check_line(line);
        }
    } else if let Ok(p) = Printed::arbitrary(&mut Unstructured::new(rest)) {
        check_printed(&p);
    }
});
