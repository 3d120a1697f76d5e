//! tracefs's text output, parsed: one record of `trace`, `trace_pipe` or
//! `per_cpu/cpuN/trace`. Shared by xvmm's host exit trace and `xperf probes`.
//! A pure function over `&str`, so a fuzz target can call it directly.

/// One trace record, `<comm>-<pid> [<cpu>] <flags> <timestamp>: <body>`, e.g.
/// `xvmm-4242 [001] d..1. 5398127362712: kvm_exit: vcpu 0 reason io ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The task's thread id.
    pub pid: i32,
    pub cpu: u32,
    /// The timestamp as a whole number: the callers set a counter clock
    /// (`x86-tsc`), whose values are raw TSC ticks.
    pub ts: u64,
    /// What follows the timestamp: `event: fields` for trace events,
    /// `function <-caller` for the function tracer.
    pub body: &'a str,
}

/// Where the `[cpu]` field of a record starts: the first `[` that follows a
/// space and holds only digits. The comm before it may hold spaces, `-` or
/// brackets of its own.
fn cpu_field(line: &str) -> Option<(usize, usize, u32)> {
    let mut from = 0;
    while let Some(rel) = line[from..].find('[') {
        let open = from + rel;
        if let Some(len) = line[open + 1..].find(']') {
            let digits = &line[open + 1..open + 1 + len];
            let after_space = open > 0 && line.as_bytes()[open - 1] == b' ';
            if after_space && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return Some((open, open + 1 + len, digits.parse().ok()?));
            }
        }
        from = open + 1;
    }
    None
}

/// Parses one line; `None` for comments, lost-event notes and anything that
/// is not a record with a whole-number timestamp.
pub fn parse_record(line: &str) -> Option<Record<'_>> {
    if line.starts_with('#') {
        return None;
    }
    let (open, close, cpu) = cpu_field(line)?;
    // "comm-pid", or "comm-pid (tgid)" with the record-tgid option.
    let mut task = line[..open].trim_end();
    if task.ends_with(')') {
        task = task[..task.rfind('(')?].trim_end();
    }
    let pid: i32 = task.rsplit('-').next()?.trim().parse().ok()?;
    let rest = &line[close + 1..];
    let colon = rest.find(": ")?;
    let ts: u64 = rest[..colon].split_whitespace().last()?.parse().ok()?;
    Some(Record {
        pid,
        cpu,
        ts,
        body: &rest[colon + 2..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_events_and_of_the_function_tracer() {
        let r = parse_record(
            "            bash-23614   [000] d.... 9643056007914: page_fault_user: address=0x5 ip=0x6 error_code=0x7",
        )
        .unwrap();
        assert_eq!((r.pid, r.cpu, r.ts), (23614, 0, 9643056007914));
        assert_eq!(r.body, "page_fault_user: address=0x5 ip=0x6 error_code=0x7");
        let f = parse_record("  my-comm-x-17 [012] ..... 99: __x64_sys_getppid <-do_syscall_64")
            .unwrap();
        assert_eq!((f.pid, f.cpu, f.ts), (17, 12, 99));
        assert_eq!(f.body, "__x64_sys_getppid <-do_syscall_64");
        // A comm with brackets and spaces, and the record-tgid column.
        let t = parse_record("a [b] c-5 (    5) [001] d..1. 7: sys_exit: NR 110 = 1").unwrap();
        assert_eq!(
            (t.pid, t.cpu, t.ts, t.body),
            (5, 1, 7, "sys_exit: NR 110 = 1")
        );
    }

    #[test]
    fn comments_notes_and_nanosecond_clocks_are_not_records() {
        for line in [
            "# tracer: nop",
            "CPU:1 [LOST 12 EVENTS]",
            "x-1 [0] .... notanumber: kvm_entry: vcpu 0",
            "bash-1 [000] d.... 123.456789: sys_enter: NR 1",
            "no-bracket 5: x",
            "",
            "[",
            "-[1]",
        ] {
            assert_eq!(parse_record(line), None, "{line:?}");
        }
    }
}
