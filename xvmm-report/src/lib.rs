//! `xvmm report`: result files as one self-contained HTML page with inline
//! SVG charts (or as Markdown).
//!
//! [`sections`] decides what the report shows ([`document::Document`]);
//! [`charts`] draws with plotters' SVG backend; [`html`] and [`markdown`]
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

/// How to read the page, at its end.
pub const READING_NOTE: &str =
    "Figures are TSC ticks unless a unit says otherwise; timings have the \
null overhead (the stamp pair with nothing between it) subtracted. Figures measured under QEMU TCG \
(the nested harness) are emulated: compare their shapes and relations, not their values with \
hardware. This page loads nothing and runs no script.";

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
