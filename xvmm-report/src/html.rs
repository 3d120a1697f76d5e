//! The document as one self-contained HTML page: inline CSS, inline SVG, no
//! script, no external resource of any kind. A Content-Security-Policy that
//! allows nothing but inline styles makes sure of it: even a bug here could
//! not make a viewer run a script or fetch anything.
//!
//! Every text from a result file goes through [`escape`]: control
//! characters and bidirectional overrides made visible (as on a terminal),
//! then `&`, `<`, `>`, `"` and `'` as entities, so a crossing named
//! `<script>` is shown as that text.

use super::charts;
use std::fmt::Write as _;
use xvmm_host::escape::visible;
use xvmm_results::document::{Block, Cell, Chart, Document, Row, Section, Table};

/// The page's policy: inline styles, nothing else.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;\
margin:0 auto;max-width:1240px;padding:16px 24px;color:#1b1b1b;background:#fff;line-height:1.4}\
h1{margin:8px 0 2px}h2{margin-top:36px;border-bottom:2px solid #ddd;padding-bottom:4px}\
h3{margin:20px 0 6px}.sub{color:#555;margin:0 0 12px}\
nav ul{columns:2;padding-left:18px}\
table{border-collapse:collapse;margin:8px 0 12px;font-size:13px}\
th,td{border:1px solid #d6d6d6;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}tr.group th{background:#e6ecf5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td:first-child{white-space:nowrap}.wide{overflow-x:auto;max-width:100%}\
td[title]{text-decoration:underline dotted #999}\
figure.chart{margin:8px 0;display:block}figure.chart svg{max-width:100%;height:auto;display:block}\
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(580px,1fr));gap:8px}\
footer{margin-top:40px;color:#666;font-size:13px}";

/// Text from anywhere, safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let shown = visible(text);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn chart_svg(chart: &Chart) -> String {
    match chart {
        Chart::Histogram(d) => charts::histogram(d),
        Chart::Bars(b) => charts::bars(b),
        Chart::Trend(t) => charts::trend(t),
        Chart::Stacked(s) => charts::stacked(s),
        Chart::Timeline(t) => charts::timeline(t),
        Chart::Boxes(b) => charts::boxes(b),
    }
}

fn figure(out: &mut String, chart: &Chart) {
    let _ = write!(
        out,
        "<figure class=\"chart\" data-kind=\"{}\" role=\"img\" aria-label=\"{}\">\n{}</figure>\n",
        chart.kind(),
        escape(chart.caption()),
        chart_svg(chart)
    );
}

/// Whether a cell holds a figure ("1234", "+5", "1.20x", "2445 kHz"),
/// right-aligned in a table of figures; a sentence that starts with a
/// number stays left-aligned.
fn is_figure(text: &str) -> bool {
    if text.chars().count() > 24 {
        return false;
    }
    let first = text.split_whitespace().next().unwrap_or("");
    let digits = first.trim_start_matches(['+', '-']).trim_end_matches('x');
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn cell(out: &mut String, tag: &str, c: &Cell, numeric: bool) {
    let class = if numeric && is_figure(&c.text) {
        " class=\"n\""
    } else {
        ""
    };
    match &c.title {
        Some(t) => {
            let _ = write!(
                out,
                "<{tag}{class} title=\"{}\">{}</{tag}>",
                escape(t),
                escape(&c.text)
            );
        }
        None => {
            let _ = write!(out, "<{tag}{class}>{}</{tag}>", escape(&c.text));
        }
    }
}

fn table(out: &mut String, t: &Table) {
    out.push_str("<div class=\"wide\"><table>");
    out.push_str("<thead><tr>");
    for h in &t.header {
        cell(out, "th", &Cell::from(h.as_str()), false);
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    // Free text across every column after the first.
    let span = t.header.len().saturating_sub(1).max(1);
    let spanning = |out: &mut String, text: &str| {
        let _ = write!(out, "<td colspan=\"{span}\">{}</td>", escape(text));
    };
    for row in &t.rows {
        match row {
            Row::Cells(cells) => {
                out.push_str("<tr>");
                for (i, c) in cells.iter().enumerate() {
                    cell(out, "td", c, t.numeric && i > 0);
                }
            }
            // Under the row before it.
            Row::Note(text) => {
                out.push_str("<tr class=\"note\"><td></td>");
                spanning(out, text);
            }
            Row::Labelled(label, text) => {
                out.push_str("<tr>");
                cell(out, "td", &Cell::from(label.as_str()), false);
                spanning(out, text);
            }
            Row::Group(heading) => {
                let _ = write!(
                    out,
                    "<tr class=\"group\"><th colspan=\"{}\" scope=\"rowgroup\">{}</th>",
                    t.header.len().max(1),
                    escape(heading)
                );
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

fn block(out: &mut String, b: &Block) {
    match b {
        Block::Paragraph(p) => {
            let _ = writeln!(out, "<p>{}</p>", escape(p));
        }
        Block::Subheading(h) => {
            let _ = writeln!(out, "<h3>{}</h3>", escape(h));
        }
        Block::List(items) => {
            out.push_str("<ul>\n");
            for i in items {
                let _ = writeln!(out, "<li>{}</li>", escape(i));
            }
            out.push_str("</ul>\n");
        }
        Block::Table(t) => table(out, t),
        Block::Chart(c) => figure(out, c),
        Block::Grid(cs) => {
            out.push_str("<div class=\"grid\">\n");
            for c in cs {
                figure(out, c);
            }
            out.push_str("</div>\n");
        }
    }
}

fn section(out: &mut String, s: &Section, progress: &mut dyn FnMut(&str)) {
    progress(&s.title);
    let _ = writeln!(
        out,
        "<section id=\"{}\">\n<h2>{}</h2>",
        escape(&s.id),
        escape(&s.title)
    );
    for b in &s.blocks {
        block(out, b);
    }
    out.push_str("</section>\n");
}

/// The whole page; `progress` is called with each section's title before it
/// is drawn.
pub fn page(doc: &Document, progress: &mut dyn FnMut(&str)) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n\
         <p class=\"sub\">{}</p>\n</header>\n<nav>\n<ul>\n",
        escape(&doc.title),
        escape(&doc.title),
        escape(&doc.subtitle)
    );
    for s in &doc.sections {
        let _ = writeln!(
            out,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(&s.id),
            escape(&s.title)
        );
    }
    out.push_str("</ul>\n</nav>\n<main>\n");
    for s in &doc.sections {
        section(&mut out, s, progress);
    }
    let _ = write!(
        out,
        "</main>\n<footer>{}</footer>\n</body>\n</html>\n",
        escape(&doc.footer)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_markup_and_control_characters_text() {
        assert_eq!(
            escape("<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape("a & \"b\""), "a &amp; &quot;b&quot;");
        assert_eq!(escape("red\x1b[31m\u{202e}"), "red\\x1b[31m\\u{202e}");
        assert_eq!(escape("line\nforged"), "line\\nforged");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn figures_are_recognised_for_alignment() {
        for f in [
            "1234",
            "+5",
            "-12",
            "1.20x",
            "2445 kHz",
            "5660 ticks (1.02x)",
        ] {
            assert!(is_figure(f), "{f}");
        }
        for t in [
            "",
            "-",
            "kvm",
            "not measured",
            "x",
            "round trip only",
            "2 online (0-1), 2 possible",
        ] {
            assert!(!is_figure(t), "{t}");
        }
    }

    #[test]
    fn a_page_has_the_policy_no_script_and_escaped_text_everywhere() {
        let doc = Document {
            title: "t<b>".into(),
            subtitle: "s".into(),
            sections: vec![Section {
                id: "x\"y".into(),
                title: "<img src=x>".into(),
                blocks: vec![
                    Block::Paragraph("<script>alert(1)</script>".into()),
                    Block::List(vec!["<li>".into()]),
                    Block::Table(Table {
                        header: vec!["<th>".into()],
                        rows: vec![
                            Row::Cells(vec![Cell::with_title("<td>", "\"><script>")]),
                            Row::Note("<b>note</b>".into()),
                            Row::Labelled("<i>".into(), "</table>".into()),
                            Row::Group("<b>MSRs</b>".into()),
                        ],
                        numeric: false,
                    }),
                ],
            }],
            footer: "<u>".into(),
        };
        let mut seen = Vec::new();
        let html = page(&doc, &mut |t| seen.push(t.to_string()));
        assert_eq!(seen, ["<img src=x>"]);
        assert!(html.contains(CONTENT_SECURITY_POLICY));
        for raw in ["<script", "<img", "<b>", "<li><li>", "<th><th>"] {
            assert!(!html.contains(raw), "{raw} unescaped in\n{html}");
        }
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("title=\"&quot;&gt;&lt;script&gt;\""));
        assert!(html.contains("id=\"x&quot;y\""));
        // A group's heading spans the table's columns, escaped.
        assert!(
            html.contains("<th colspan=\"1\" scope=\"rowgroup\">&lt;b&gt;MSRs&lt;/b&gt;</th>"),
            "{html}"
        );
        assert!(html.contains("<footer>&lt;u&gt;</footer>"), "{html}");
        // Every row, a note's and a labelled one's too, is one whole <tr>.
        assert_eq!(html.matches("<tr").count(), 5, "{html}");
        assert_eq!(html.matches("</tr>").count(), 5, "{html}");
        assert!(html.contains(
            "<tr class=\"note\"><td></td><td colspan=\"1\">&lt;b&gt;note&lt;/b&gt;</td></tr>"
        ));
        assert!(html.contains("<tr><td>&lt;i&gt;</td><td colspan=\"1\">&lt;/table&gt;</td></tr>"));
    }
}
