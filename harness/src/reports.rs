//! Reading what a step printed: the JSON report among its output lines.

use xvmm_results::Report;

/// Whether a line can belong to serde's pretty JSON below the top level:
/// indented, then a key or string, a bracket, a number, or a literal. Table
/// notes are indented too, but start with a word.
fn json_body_line(line: &str) -> bool {
    let body = line.trim_start();
    if !line.starts_with(' ') || body.is_empty() {
        return false;
    }
    let literal = body.trim_end_matches(',');
    matches!(literal, "true" | "false" | "null")
        || body.starts_with(|c: char| "\"{}[]-".contains(c) || c.is_ascii_digit())
}

/// The pretty-printed JSON report in a step's output. The step's stdout and
/// stderr are echoed line by line from two pipes, so other lines (xvmm's
/// tables on stderr) may interleave: after the opening `{`, only lines that
/// can belong to serde's pretty JSON (`}` or a JSON body line) are kept.
pub fn report_in(lines: &[&str]) -> Result<Report, String> {
    let start = lines
        .iter()
        .rposition(|l| *l == "{")
        .ok_or("no JSON report in the output")?;
    let mut json = String::from("{\n");
    for l in &lines[start + 1..] {
        if *l == "}" || json_body_line(l) {
            json.push_str(l);
            json.push('\n');
        }
        if *l == "}" {
            break;
        }
    }
    Report::from_json(&json).map_err(|e| format!("report does not parse: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::Environment;

    #[test]
    fn json_is_found_among_interleaved_lines() {
        let report = Report::new(
            "t".into(),
            Environment::LinuxVm,
            Default::default(),
            xvmm_results::Method::standard(1, 2),
        );
        let json = report.to_json_pretty();
        let mut lines: Vec<&str> = vec!["console line", "{ not json", "{"];
        let body: Vec<&str> = json.lines().skip(1).collect();
        let (head, tail) = body.split_at(3);
        lines.extend(head);
        lines.extend([
            "host exits (kvm_exit -> kvm_entry, host TSC ticks)",
            "",
            "                   raw_syscalls:sys_enter and raw_syscalls:sys_exit",
            "            (VM: round trip only: ...)",
        ]);
        lines.extend(tail);
        lines.push("after");
        assert_eq!(report_in(&lines).unwrap(), report);
        assert!(report_in(&["no json"]).is_err());
        for json in [
            "  \"a\": 1,",
            "    12,",
            "  ],",
            "    -3",
            "    true,",
            "  {",
        ] {
            assert!(json_body_line(json), "{json}");
        }
        for note in [
            "",
            "x",
            "  ",
            "   true story",
            "                   kprobe xperf/a",
        ] {
            assert!(!json_body_line(note), "{note}");
        }
    }
}
