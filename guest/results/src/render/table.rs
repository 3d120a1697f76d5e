//! Aligned text tables: the one layout every report table uses.

use std::fmt::Write as _;

/// A table whose columns are as wide as their widest cell: the first column
/// left-aligned, the others right-aligned. `Note` rows are free text under
/// the row before them.
pub struct Table {
    rows: Vec<Row>,
}

pub enum Row {
    Cells(Vec<String>),
    Note(String),
    Labelled(String, String),
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![Row::Cells(header.iter().map(|h| h.to_string()).collect())],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Row::Cells(cells));
    }

    pub fn note(&mut self, text: String) {
        self.rows.push(Row::Note(text));
    }

    pub fn labelled(&mut self, label: String, text: String) {
        self.rows.push(Row::Labelled(label, text));
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            let cells: Vec<&str> = match row {
                Row::Cells(cells) => cells.iter().map(String::as_str).collect(),
                Row::Labelled(label, _) => vec![label.as_str()],
                Row::Note(_) => Vec::new(),
            };
            for (i, cell) in cells.iter().enumerate() {
                let w = cell.chars().count();
                match widths.get_mut(i) {
                    Some(max) => *max = (*max).max(w),
                    None => widths.push(w),
                }
            }
        }
        let indent = widths.first().copied().unwrap_or(0);
        let mut out = String::new();
        for row in &self.rows {
            match row {
                Row::Cells(cells) => {
                    let mut line = String::new();
                    for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                        let pad = w.saturating_sub(cell.chars().count());
                        if i == 0 {
                            line.push_str(cell);
                            line.extend(std::iter::repeat_n(' ', pad));
                        } else {
                            line.extend(std::iter::repeat_n(' ', pad + 2));
                            line.push_str(cell);
                        }
                    }
                    let _ = writeln!(out, "{}", line.trim_end());
                }
                Row::Note(text) => {
                    let _ = writeln!(out, "{:indent$}  {text}", "");
                }
                Row::Labelled(label, text) => {
                    let pad = indent.saturating_sub(label.chars().count());
                    let _ = writeln!(out, "{label}{:pad$}  {text}", "");
                }
            }
        }
        out
    }
}
