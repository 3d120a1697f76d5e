//! Result files (`xvmm show`, `compare`, `--baseline`): `Report::from_json`,
//! then the text renderer and the comparison. Input: one report, or two
//! separated by a NUL byte (VM, then bare metal). Everything rendered must be
//! safe for a terminal, and an accepted report must survive a JSON round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::{assert_one_line, assert_terminal_safe};
use xvmm_results::{compare, render, Report};

fn parse(bytes: &[u8]) -> Option<Report> {
    let text = std::str::from_utf8(bytes).ok()?;
    match Report::from_json(text) {
        Ok(report) => Some(report),
        Err(e) => {
            assert_one_line(&e.to_string(), "from_json");
            None
        }
    }
}

fn check(report: &Report) {
    assert_terminal_safe(&render::report(report), &['\n'], "render::report");
    let again = Report::from_json(&report.to_json_pretty()).expect("our own JSON parses");
    assert_eq!(&again, report, "JSON round trip changed the report");
}

fuzz_target!(|data: &[u8]| {
    let (vm, bare) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let Some(vm) = parse(vm) else { return };
    check(&vm);
    let Some(bare) = parse(bare) else { return };
    check(&bare);
    let c = compare(&vm, &bare);
    assert_terminal_safe(&render::comparison_table(&c), &['\n'], "comparison_table");
    let json = c.to_json_pretty();
    let again: xvmm_results::Comparison = serde_json::from_str(&json).expect("comparison JSON");
    assert_eq!(again.rows.len(), c.rows.len());
});
