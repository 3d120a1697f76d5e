//! Aligned text tables: the one layout every report table uses.

use std::borrow::Cow;

/// Widest cell shown, in characters: a longer one (a name from a file) is
/// cut, ending in `…`, so that one cannot push every row off the screen.
pub const MAX_CELL_CHARS: usize = 64;

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
        let widths = self.widths();
        let indent = widths.first().copied().unwrap_or(0);
        let mut out = String::new();
        // Padding by hand: a `{:width$}` over 65535 panics.
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        for row in &self.rows {
            match row {
                Row::Cells(cells) => {
                    let mut line = String::new();
                    for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                        let cell = shown(cell);
                        let gap = w.saturating_sub(cell.chars().count());
                        if i == 0 {
                            line.push_str(&cell);
                            pad(&mut line, gap);
                        } else {
                            pad(&mut line, gap + 2);
                            line.push_str(&cell);
                        }
                    }
                    out.push_str(line.trim_end());
                }
                Row::Note(text) => {
                    pad(&mut out, indent + 2);
                    out.push_str(text);
                }
                Row::Labelled(label, text) => {
                    let label = shown(label);
                    out.push_str(&label);
                    pad(&mut out, indent.saturating_sub(label.chars().count()) + 2);
                    out.push_str(text);
                }
            }
            out.push('\n');
        }
        out
    }

    /// Each column's width: its widest cell as shown.
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            let cells: &[String] = match row {
                Row::Cells(cells) => cells,
                Row::Labelled(label, _) => std::slice::from_ref(label),
                Row::Note(_) => &[],
            };
            for (i, cell) in cells.iter().enumerate() {
                let w = shown(cell).chars().count();
                match widths.get_mut(i) {
                    Some(max) => *max = (*max).max(w),
                    None => widths.push(w),
                }
            }
        }
        widths
    }
}

/// A cell as shown: cut to [`MAX_CELL_CHARS`], the last one `…`.
fn shown(cell: &str) -> Cow<'_, str> {
    match cell.char_indices().nth(MAX_CELL_CHARS) {
        None => Cow::Borrowed(cell),
        Some(_) => {
            let keep: String = cell.chars().take(MAX_CELL_CHARS - 1).collect();
            Cow::Owned(keep + "…")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 20, item 8: a 4 MB crossing name panicked `xvmm show` (a
    /// format width over 65535); a long cell is now cut with `…` and the
    /// columns stay as wide as what is shown.
    #[test]
    fn a_huge_cell_is_cut_not_a_panic() {
        let huge = "x".repeat(4 << 20);
        let mut t = Table::new(&["crossing", "median"]);
        t.row(vec![huge.clone(), "12".into()]);
        t.note("a note".into());
        t.labelled(huge, "text".into());
        t.row(vec!["pf".into(), "3".into()]);
        let text = t.render();
        let cut = format!("{}…", "x".repeat(MAX_CELL_CHARS - 1));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], format!("{cut}{:>8}", "12"));
        assert_eq!(
            lines[2],
            format!("{}a note", " ".repeat(MAX_CELL_CHARS + 2))
        );
        assert_eq!(lines[3], format!("{cut}  text"));
        let pf = format!("pf{}", " ".repeat(MAX_CELL_CHARS - 2));
        assert_eq!(lines[4], format!("{pf}{:>8}", "3"));
        assert_eq!(lines.len(), 5, "{text}");
    }

    #[test]
    fn a_cell_at_the_limit_is_whole() {
        let name = "é".repeat(MAX_CELL_CHARS);
        assert_eq!(shown(&name), name.as_str());
        let longer = "é".repeat(MAX_CELL_CHARS + 1);
        assert_eq!(shown(&longer).chars().count(), MAX_CELL_CHARS);
    }
}
