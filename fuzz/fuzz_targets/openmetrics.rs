//! A result file's figures as OpenMetrics (`xperf characterize
//! --openmetrics`, `xvmm --openmetrics`): `Report::from_json`, then the
//! encoder, under both prefixes. A report is untrusted (a guest wrote it), so
//! whatever it holds, the text must stay valid exposition: every line a
//! `# HELP`/`# TYPE`/`# UNIT` comment or a sample `name{labels} value`, with
//! a sanitised name, every label value quoted and escaped (no raw quote,
//! backslash or newline), a number as the value, each family once, and
//! `# EOF` last.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use xvmm_results::render::openmetrics::openmetrics;
use xvmm_results::Report;

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Reads `key="value",...` to its end; panics on anything malformed.
fn check_labels(text: &str, line: &str) {
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("label: {line}"));
        assert!(is_name(key), "label name {key:?}: {line}");
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    other => panic!("escape {other:?}: {line}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => assert!(!c.is_control(), "control {c:?}: {line}"),
                None => panic!("unterminated label value: {line}"),
            }
        };
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn check(text: &str) {
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end");
    let mut families = BTreeSet::new();
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let (kind, rest) = comment.split_once(' ').expect(line);
            let name = rest.split(' ').next().unwrap();
            assert!(is_name(name), "{line}");
            assert!(line.chars().all(|c| !c.is_control()), "{line:?}");
            match kind {
                "TYPE" => assert!(families.insert(name.to_string()), "family twice: {line}"),
                "HELP" | "UNIT" => {}
                other => panic!("comment {other}: {line}"),
            }
            continue;
        }
        let (head, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let _: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        let name = match head.split_once('{') {
            Some((name, labels)) => {
                check_labels(labels.strip_suffix('}').expect(line), line);
                name
            }
            None => head,
        };
        assert!(is_name(name), "{line}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(report) = Report::from_json(text) else {
        return;
    };
    check(&openmetrics(&report, "xvmm"));
    check(&openmetrics(&report, "xperf"));
});
