//! What a report says, independent of how it is written: sections of
//! paragraphs, tables and charts. [`super::sections`] builds it from the
//! result files; [`super::html`] and [`super::markdown`] write it. Text here
//! is raw (as it came from the files): the writers escape it.

use super::charts::{BarChart, Distribution, TrendChart};

/// A table cell: its text, and a longer explanation (a reason a figure is
/// missing) the HTML shows on hover and Markdown after the text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cell {
    pub text: String,
    pub title: Option<String>,
}

impl Cell {
    pub fn with_title(text: impl Into<String>, title: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            title: Some(title.into()),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, title: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::from(text.to_string())
    }
}

/// Most rows of any table.
pub const MAX_TABLE_ROWS: usize = 400;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// Columns (after the first) that hold figures: right-aligned.
    pub numeric: bool,
}

/// A table of the first [`MAX_TABLE_ROWS`] of `total` rows (builders take
/// no more, so a huge file costs no more than that); a note says when rows
/// were left out.
pub(super) fn capped(mut t: Table, total: usize, blocks: &mut Vec<Block>) {
    t.rows.truncate(MAX_TABLE_ROWS);
    blocks.push(Block::Table(t));
    if total > MAX_TABLE_ROWS {
        blocks.push(Block::Paragraph(format!(
            "(the first {MAX_TABLE_ROWS} of {total} rows)"
        )));
    }
}

/// A chart, drawn by [`super::charts`] in HTML; named only in Markdown.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    Histogram(Distribution),
    Bars(BarChart),
    Trend(TrendChart),
}

impl Chart {
    pub fn caption(&self) -> &str {
        match self {
            Chart::Histogram(d) => &d.caption,
            Chart::Bars(b) => &b.caption,
            Chart::Trend(t) => &t.caption,
        }
    }

    /// What kind of chart, for the page's structure (and its tests).
    pub fn kind(&self) -> &'static str {
        match self {
            Chart::Histogram(_) => "histogram",
            Chart::Bars(_) => "bars",
            Chart::Trend(_) => "trend",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Paragraph(String),
    /// Items of a bulleted list.
    List(Vec<String>),
    Table(Table),
    Chart(Chart),
    /// Small charts side by side.
    Grid(Vec<Chart>),
    /// A heading inside a section.
    Subheading(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Anchor, unique in the document (made of ASCII letters, digits, '-').
    pub id: String,
    pub title: String,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Document {
    pub title: String,
    /// One line under the title.
    pub subtitle: String,
    pub sections: Vec<Section>,
}

impl Document {
    /// Every chart, in order (grids included).
    pub fn charts(&self) -> Vec<&Chart> {
        let mut out = Vec::new();
        for s in &self.sections {
            for b in &s.blocks {
                match b {
                    Block::Chart(c) => out.push(c),
                    Block::Grid(cs) => out.extend(cs),
                    _ => {}
                }
            }
        }
        out
    }
}
