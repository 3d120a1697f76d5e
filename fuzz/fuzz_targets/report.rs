//! Result files (`xvmm show`, `compare`, `--baseline`, `report`):
//! `Report::from_json`, then the text renderer, the comparison and the
//! `xvmm report` document as HTML and Markdown. Input: one report, or two
//! separated by a NUL byte (VM, then bare metal). Everything rendered must be
//! safe for a terminal, the HTML page must hold no markup from the files,
//! and an accepted report must survive a JSON round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::progress::Silent;
use xvmm::report::{self, Input};
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

/// `xvmm report`'s page of these files: the HTML carries no script or
/// markup from a file (crossing names, CPU models and notes are escaped),
/// and both pages are free of control characters but newlines.
fn pages(reports: &[&Report]) {
    let inputs: Vec<Input> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| Input {
            label: format!("file-{i}.json"),
            report: (*r).clone(),
        })
        .collect();
    let html = report::html(&inputs, &Silent);
    assert_terminal_safe(&html, &['\n'], "report::html");
    let lower = html.to_ascii_lowercase();
    assert!(!lower.contains("<script"), "a script reached the page");
    assert_eq!(lower.matches("<html").count(), 1, "markup reached the page");
    assert_terminal_safe(
        &report::markdown(&inputs, &Silent),
        &['\n'],
        "report::markdown",
    );
}

fuzz_target!(|data: &[u8]| {
    let (vm, bare) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let Some(vm) = parse(vm) else { return };
    check(&vm);
    let Some(bare) = parse(bare) else {
        pages(&[&vm]);
        return;
    };
    check(&bare);
    pages(&[&vm, &bare]);
    let c = compare(&vm, &bare);
    assert_terminal_safe(&render::comparison_table(&c), &['\n'], "comparison_table");
    let json = c.to_json_pretty();
    let again: xvmm_results::Comparison = serde_json::from_str(&json).expect("comparison JSON");
    assert_eq!(again.rows.len(), c.rows.len());
});
