//! Result files (`xvmm show`, `compare`, `--baseline`, `report`):
//! `Report::from_json`, then the text renderer, the comparison and the
//! `xvmm report` document as HTML and Markdown. Input: one report, or two
//! separated by a NUL byte (VM, then bare metal). Everything rendered must be
//! safe for a terminal, and an accepted report must survive a JSON round
//! trip.
//!
//! The HTML page is read back with an HTML parser (html5ever, through
//! `scraper`), as a browser would, after hostile markup carrying a marker
//! was planted in the file names and in free-text fields of the reports
//! (crossing names and the like come from the fuzzed files themselves).
//! Every element and attribute must be one the page's own templates write;
//! a link only to a place in the page; one style sheet and the
//! Content-Security-Policy unchanged; no comment; and the marker only in
//! text, or in the values of `title` and `aria-label`, where a browser
//! shows it as text. The planted file name must show as that text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scraper::{Html, Node};
use xvmm_fuzz::{assert_one_line, assert_terminal_safe};
use xvmm_report::html::CONTENT_SECURITY_POLICY;
use xvmm_report::{self as report, Input};
use xvmm_results::progress::Silent;
use xvmm_results::{compare, render, Report};

/// In every planted text: markup a browser would act on if it were not
/// escaped, around [`MARKER`].
const PAYLOAD: &str =
    "\"'><img src=x onerror=alert(1)><script>XVMMTAINT</script><!--XVMMTAINT--><a href=javascript:x>";
const MARKER: &str = "XVMMTAINT";

/// The elements the page's templates (`report::html`) and plotters' SVG
/// backend write.
const ELEMENTS: &[&str] = &[
    "html", "head", "meta", "title", "style", "body", "header", "nav", "main", "section", "footer",
    "h1", "h2", "h3", "p", "b", "ul", "li", "a", "div", "figure", "table", "thead", "tbody", "tr",
    "th", "td", "svg", "rect", "line", "polyline", "polygon", "circle", "text",
];

/// The attributes they write.
const ATTRIBUTES: &[&str] = &[
    "lang",
    "charset",
    "http-equiv",
    "name",
    "content",
    "class",
    "id",
    "href",
    "title",
    "aria-label",
    "data-kind",
    "role",
    "xmlns",
    "viewbox",
    "width",
    "height",
    "x",
    "y",
    "x1",
    "x2",
    "y1",
    "y2",
    "cx",
    "cy",
    "r",
    "dy",
    "points",
    "fill",
    "opacity",
    "stroke",
    "stroke-width",
    "font-family",
    "font-size",
    "font-style",
    "font-weight",
    "text-anchor",
    "transform",
    // A table's note and labelled rows span the columns after the first.
    "colspan",
];

/// Attributes whose value a browser shows as text and nothing else.
const TEXT_ATTRIBUTES: &[&str] = &["title", "aria-label"];

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

/// `report` with hostile markup in free-text fields the page shows.
fn planted(report: &Report) -> Report {
    let mut r = report.clone();
    let taint = |s: &mut String| s.insert_str(0, PAYLOAD);
    taint(&mut r.tool);
    taint(&mut r.host.cpu_model);
    taint(&mut r.host.kernel_release);
    taint(&mut r.host.hypervisor_signature);
    r.notes.push(PAYLOAD.to_string());
    if let Some(c) = r.crossings.first_mut() {
        taint(&mut c.name);
    }
    r
}

/// Checks one element of the page: what it is, its attributes.
fn check_element(e: &scraper::node::Element, html: &str) {
    let name = e.name().to_ascii_lowercase();
    assert!(
        ELEMENTS.contains(&name.as_str()),
        "element <{name}> on the page: {html}"
    );
    for (attr, value) in e.attrs() {
        let attr = attr.to_ascii_lowercase();
        assert!(
            ATTRIBUTES.contains(&attr.as_str()),
            "attribute {attr} on <{name}>: {html}"
        );
        if value.contains(MARKER) {
            assert!(
                TEXT_ATTRIBUTES.contains(&attr.as_str()),
                "file text in {attr}=: {html}"
            );
        }
        if attr == "href" {
            assert!(
                name == "a" && value.starts_with('#'),
                "a link out: {value:?}"
            );
        }
    }
    if name == "meta" && e.attr("http-equiv").is_some() {
        assert_eq!(
            e.attr("content"),
            Some(CONTENT_SECURITY_POLICY),
            "the policy changed"
        );
    }
}

/// The page as a browser reads it: see the module documentation.
fn check_html(html: &str, label: &str) {
    let doc = Html::parse_document(html);
    let (mut styles, mut policies, mut texts) = (0, 0, String::new());
    for node in doc.tree.nodes() {
        match node.value() {
            Node::Element(e) => {
                check_element(e, html);
                styles += usize::from(e.name() == "style");
                policies += usize::from(e.name() == "meta" && e.attr("http-equiv").is_some());
                for t in TEXT_ATTRIBUTES.iter().filter_map(|a| e.attr(a)) {
                    texts.push_str(t);
                    texts.push('\n');
                }
            }
            Node::Text(t) => {
                let in_style = node
                    .parent()
                    .and_then(|p| p.value().as_element())
                    .is_some_and(|p| p.name() == "style");
                assert!(
                    !(in_style && t.contains(MARKER)),
                    "file text in the style sheet"
                );
                texts.push_str(t);
            }
            Node::Comment(c) => panic!("a comment on the page: {:?}", &**c),
            _ => {}
        }
    }
    assert_eq!(
        (styles, policies),
        (1, 1),
        "style sheets and policies: {html}"
    );
    let shown = xvmm_host::escape::visible(label);
    assert!(
        texts.contains(&*shown),
        "the file name {shown:?} is not shown as text"
    );
}

/// `xvmm report`'s page of these files: the HTML read back as above, and
/// both pages free of control characters but newlines.
fn pages(reports: &[&Report]) {
    let inputs: Vec<Input> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| Input {
            label: format!("{PAYLOAD}file-{i}.json"),
            report: planted(r),
        })
        .collect();
    let html = report::html(&inputs, &Silent);
    assert_terminal_safe(&html, &['\n'], "report::html");
    check_html(&html, &inputs[0].label);
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
