//! Pure parsers of tracefs's own text files that xperf's tracing session
//! reads (`dynamic_events`, `error_log`): below both `xperf probes` and
//! `xperf workload`, which share the session. Every function takes `&str`
//! and returns plain data; none panics.

/// Event names of `group` defined in `dynamic_events`
/// (`p:xperf/getppid_kprobe __x64_sys_getppid+5`, `r10:g/e sym`, `f:g/e sym`).
pub fn dynamic_events_of(dynamic_events: &str, group: &str) -> Vec<String> {
    dynamic_events
        .lines()
        .filter_map(|line| {
            let head = line.split_whitespace().next()?;
            let (_, name) = head.split_once(':')?;
            let (g, e) = name.split_once('/')?;
            (g == group).then(|| e.to_string())
        })
        .collect()
}

/// The reason tracefs logged for the last failed `command` in `error_log`:
/// an entry is `[ts] loc: error: TEXT`, then `  Command: COMMAND`, then a caret.
pub fn error_log_reason(error_log: &str, command: &str) -> Option<String> {
    let mut last_error: Option<&str> = None;
    let mut found = None;
    for line in error_log.lines() {
        if let Some(i) = line.find(": error: ") {
            last_error = Some(line[i + ": error: ".len()..].trim());
        } else if let Some(cmd) = line.trim_start().strip_prefix("Command: ") {
            if cmd.trim_end() == command.trim_end() {
                found = last_error.map(str::to_string);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_events_and_error_log() {
        let dynamic = "p:xperf/getppid_kprobe __x64_sys_getppid+5\n\
                       r10:other/ret f\nf:xperf/pf_fprobe handle_mm_fault\ns:synth u64 x\n";
        assert_eq!(
            dynamic_events_of(dynamic, "xperf"),
            ["getppid_kprobe", "pf_fprobe"]
        );
        assert!(dynamic_events_of(dynamic, "none").is_empty());
        let log = "[  140.514226] trace_kprobe: error: Invalid probe point\n\
                   \x20 Command: p:xperf/a nosuch\n\
                   \x20                  ^\n\
                   [  141.000000] trace_kprobe: error: Probe point is not an instruction boundary\n\
                   \x20 Command: p:xperf/a sym+1\n\
                   \x20                    ^\n";
        assert_eq!(
            error_log_reason(log, "p:xperf/a sym+1").as_deref(),
            Some("Probe point is not an instruction boundary")
        );
        assert_eq!(
            error_log_reason(log, "p:xperf/a nosuch").as_deref(),
            Some("Invalid probe point")
        );
        assert_eq!(error_log_reason(log, "p:other"), None);
    }
}
