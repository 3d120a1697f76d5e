//! The document as Markdown (`xvmm report --markdown`): the same sections
//! and tables, charts named by their caption (they are drawn only in HTML).
//!
//! Text from result files is made visible (no control characters) and every
//! character Markdown or an HTML-rendering viewer would interpret is
//! backslash-escaped or written as an entity, so a name like `<script>` or
//! `*a*|b` is shown as that text and cannot break a table.

use std::fmt::Write as _;
use xvmm_host::escape::visible;
use xvmm_results::document::{Block, Cell, Document, Row, Section, Table};

/// Text safe in a Markdown paragraph or table cell.
pub fn escape(text: &str) -> String {
    let shown = visible(text);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '!' | '~' | '{' | '}' | '(' | ')' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn cell_text(c: &Cell) -> String {
    match &c.title {
        Some(t) => format!("{} ({})", escape(&c.text), escape(t)),
        None => escape(&c.text),
    }
}

fn table(out: &mut String, t: &Table) {
    let columns = t
        .cell_rows()
        .iter()
        .map(|r| r.len())
        .chain([t.header.len()])
        .max()
        .unwrap_or(0);
    if columns == 0 {
        return;
    }
    let header: Vec<String> = (0..columns)
        .map(|i| t.header.get(i).map(|h| escape(h)).unwrap_or_default())
        .collect();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let rule: Vec<&str> = (0..columns)
        .map(|i| if t.numeric && i > 0 { "---:" } else { "---" })
        .collect();
    let _ = writeln!(out, "|{}|", rule.join("|"));
    for row in &t.rows {
        // A Markdown table has no spanning cell: a note or a labelled row
        // puts its text in the second column.
        let cells: Vec<String> = match row {
            Row::Cells(row) => (0..columns)
                .map(|i| row.get(i).map(cell_text).unwrap_or_default())
                .collect(),
            Row::Note(text) => (0..columns)
                .map(|i| {
                    if i == 1.min(columns - 1) {
                        escape(text)
                    } else {
                        String::new()
                    }
                })
                .collect(),
            Row::Labelled(label, text) => (0..columns)
                .map(|i| match i {
                    0 => escape(label),
                    1 => escape(text),
                    _ => String::new(),
                })
                .collect(),
            // Nor a heading row: the heading in bold in the first column.
            Row::Group(heading) => (0..columns)
                .map(|i| match i {
                    0 => format!("**{}**", escape(heading)),
                    _ => String::new(),
                })
                .collect(),
        };
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

fn section(out: &mut String, s: &Section) {
    let _ = writeln!(out, "## {}\n", escape(&s.title));
    for b in &s.blocks {
        match b {
            Block::Paragraph(p) => {
                let _ = writeln!(out, "{}\n", escape(p));
            }
            Block::Subheading(h) => {
                let _ = writeln!(out, "### {}\n", escape(h));
            }
            Block::List(items) => {
                for i in items {
                    let _ = writeln!(out, "- {}", escape(i));
                }
                out.push('\n');
            }
            Block::Table(t) => table(out, t),
            Block::Chart(c) => {
                let _ = writeln!(
                    out,
                    "*Chart (in the HTML report): {}*\n",
                    escape(c.caption())
                );
            }
            Block::Grid(cs) => {
                for c in cs {
                    let _ = writeln!(
                        out,
                        "- *Chart (in the HTML report): {}*",
                        escape(c.caption())
                    );
                }
                out.push('\n');
            }
        }
    }
}

/// The whole document.
pub fn page(doc: &Document, progress: &mut dyn FnMut(&str)) -> String {
    let mut out = format!("# {}\n\n{}\n\n", escape(&doc.title), escape(&doc.subtitle));
    for s in &doc.sections {
        progress(&s.title);
        section(&mut out, s);
    }
    let _ = writeln!(out, "---\n\n{}", escape(&doc.footer));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escapes_markup_and_keeps_tables_whole() {
        assert_eq!(escape("<script>"), "&lt;script&gt;");
        assert_eq!(escape("*a*|b_c"), "\\*a\\*\\|b\\_c");
        assert_eq!(escape("x\ny"), "x\\\\ny");
        let doc = Document {
            title: "r".into(),
            subtitle: "s".into(),
            sections: vec![Section {
                id: "a".into(),
                title: "#1".into(),
                blocks: vec![Block::Table(Table {
                    header: vec!["name".into(), "median".into()],
                    rows: vec![
                        Row::Cells(vec![Cell::from("a|b"), Cell::with_title("-", "why|not")]),
                        Row::Cells(vec![]),
                        Row::Note("n|ote".into()),
                        Row::Group("port I/O|*".into()),
                    ],
                    numeric: true,
                })],
            }],
            footer: "*f*".into(),
        };
        let md = page(&doc, &mut |_| {});
        assert!(md.contains("## \\#1\n"), "{md}");
        assert!(md.contains("| a\\|b | - (why\\|not) |"), "{md}");
        assert!(md.contains("|---|---:|"), "{md}");
        // A short row is padded to the table's width.
        assert!(md.contains("|  |  |"), "{md}");
        assert!(md.ends_with("---\n\n\\*f\\*\n"), "{md}");
        // A group heading: bold in the first column, escaped inside.
        assert!(md.contains("| **port I/O\\|\\*** |  |"), "{md}");
    }
}
