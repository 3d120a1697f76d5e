//! `xvmm report`: result files as one self-contained HTML page with inline
//! SVG charts (or as Markdown).
//!
//! [`sections`] decides what the report shows (`xvmm_results::render::document::Document`);
//! [`charts`] draws with plotters' SVG backend; [`mod@html`] and [`mod@markdown`]
//! write the document. Reading the files and writing the page belong to the
//! app layer; this module takes parsed reports and returns a string. The
//! functions here are pure and never panic on a report's content, so a fuzz
//! target can call them on any parsed file.

pub mod basis;
pub mod charts;
pub mod html;
pub mod markdown;
pub mod sections;

use xvmm_results::progress::Progress;
use xvmm_results::Report;

/// One result file: the name it is shown under, and its content.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub label: String,
    pub report: Report,
}

/// How to read the page, at its end, whatever the inputs.
pub const READING_NOTE: &str =
    "Figures are TSC ticks unless a unit says otherwise; timings have the \
null overhead (the stamp pair with nothing between it) subtracted. This page loads nothing and \
runs no script.";

/// QEMU TCG's CPUID hypervisor signature (leaf 0x40000000).
pub const TCG_SIGNATURE: &str = "TCGTCGTCGTCG";

/// Whether a file says it was measured under emulation: its host's or its
/// machine's hypervisor signature is QEMU TCG's.
pub fn emulated(report: &Report) -> bool {
    let tcg = |s: &str| s.trim() == TCG_SIGNATURE;
    tcg(&report.host.hypervisor_signature)
        || report
            .machine
            .as_ref()
            .is_some_and(|m| tcg(&m.hypervisor_signature))
}

/// Files named in the footer's caveat at most.
const MAX_NAMED: usize = 8;

/// The footer: [`READING_NOTE`], and the emulation caveat only when an
/// input's environment says it was measured under QEMU TCG (naming which).
pub fn reading_note(inputs: &[Input]) -> String {
    let tcg: Vec<usize> = inputs
        .iter()
        .enumerate()
        .filter(|(_, i)| emulated(&i.report))
        .map(|(k, _)| k + 1)
        .collect();
    if tcg.is_empty() {
        return READING_NOTE.into();
    }
    let mut named: Vec<String> = tcg
        .iter()
        .take(MAX_NAMED)
        .map(|k| format!("#{k}"))
        .collect();
    if tcg.len() > MAX_NAMED {
        named.push(format!("and {} more", tcg.len() - MAX_NAMED));
    }
    format!(
        "{READING_NOTE} Measured under QEMU TCG (hypervisor signature {TCG_SIGNATURE}, as in \
         the nested harness): file(s) {}. Their figures, and those of KVM guests nested in such \
         a machine, are emulated: compare their shapes and relations, not their values with \
         hardware.",
        named.join(", ")
    )
}

/// The report as an HTML page; `progress` sees one step per section.
pub fn html(inputs: &[Input], progress: &dyn Progress) -> String {
    let doc = sections::document(inputs);
    progress.begin("drawing the report", doc.sections.len() as u64);
    let page = html::page(&doc, &mut |title| progress.step(title));
    progress.finish();
    page
}

/// The report as Markdown (tables only; the charts are named).
pub fn markdown(inputs: &[Input], progress: &dyn Progress) -> String {
    let doc = sections::document(inputs);
    progress.begin("writing the report", doc.sections.len() as u64);
    let page = markdown::page(&doc, &mut |title| progress.step(title));
    progress.finish();
    page
}
