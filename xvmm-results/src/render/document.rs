//! What a report says, independent of how it is written: sections of
//! paragraphs, tables and charts. One model for every backend: the text
//! renderer (`crate::render`, what xvmm and xperf print) lays its tables out
//! as aligned text ([`Table::render`]); `xvmm report` builds whole documents
//! and writes them as HTML (with the charts drawn) or Markdown. A table is
//! defined once, by the function that builds it, for all of them. Text here
//! is raw (as it came from the files): each backend escapes it.

use std::borrow::Cow;

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

/// A table of the first [`MAX_TABLE_ROWS`] of `total` rows (builders take
/// no more, so a huge file costs no more than that); a note says when rows
/// were left out.
pub fn capped(mut t: Table, total: usize, blocks: &mut Vec<Block>) {
    t.truncate(MAX_TABLE_ROWS);
    blocks.push(Block::Table(t));
    if total > MAX_TABLE_ROWS {
        blocks.push(Block::Paragraph(format!(
            "(the first {MAX_TABLE_ROWS} of {total} rows)"
        )));
    }
}

/// A chart, drawn by `xvmm_report::charts` in HTML; named only in Markdown.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    Histogram(Distribution),
    Bars(BarChart),
    Trend(TrendChart),
    /// Horizontal bars made of parts (a decomposition).
    Stacked(StackedChart),
    /// Samples drawn along their time axis, with events on top.
    Timeline(TimelineChart),
    /// Many values per group: one box plot per group.
    Boxes(BoxChart),
}

impl Chart {
    pub fn caption(&self) -> &str {
        match self {
            Chart::Histogram(d) => &d.caption,
            Chart::Bars(b) => &b.caption,
            Chart::Trend(t) => &t.caption,
            Chart::Stacked(s) => &s.caption,
            Chart::Timeline(t) => &t.caption,
            Chart::Boxes(b) => &b.caption,
        }
    }

    /// What kind of chart, for the page's structure (and its tests).
    pub fn kind(&self) -> &'static str {
        match self {
            Chart::Histogram(_) => "histogram",
            Chart::Bars(_) => "bars",
            Chart::Trend(_) => "trend",
            Chart::Stacked(_) => "stacked",
            Chart::Timeline(_) => "timeline",
            Chart::Boxes(_) => "boxes",
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
    /// How to read the page, at its end (built from the inputs).
    pub footer: String,
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

/// Widest cell shown, in characters: a longer one (a name from a file) is
/// cut, ending in `…`, so that one cannot push every row off the screen.
pub const MAX_CELL_CHARS: usize = 64;

/// A table: a header, rows of cells, and free-text rows. As text
/// ([`Table::render`]) its columns are as wide as their widest cell, the
/// first left-aligned, the others right-aligned, and a `Note` row is
/// indented under the row before it; HTML and Markdown write the same rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Row>,
    /// Columns (after the first) that hold figures: right-aligned in HTML
    /// and Markdown (as text every column after the first is).
    pub numeric: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Cells(Vec<Cell>),
    /// Free text about the row before it.
    Note(String),
    /// A label in the first column, then free text across the rest.
    Labelled(String, String),
    /// The heading of the rows after it, up to the next heading.
    Group(String),
}

impl Table {
    /// An empty table of figures with this header.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numeric: true,
        }
    }

    /// A table of these rows of cells.
    pub fn of_cells(header: &[&str], rows: Vec<Vec<Cell>>, numeric: bool) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: rows.into_iter().map(Row::Cells).collect(),
            numeric,
        }
    }

    /// A row of plain cells.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(Row::Cells(cells.into_iter().map(Cell::from).collect()));
    }

    /// A row of cells that may carry titles.
    pub fn cells(&mut self, cells: Vec<Cell>) {
        self.rows.push(Row::Cells(cells));
    }

    pub fn note(&mut self, text: String) {
        self.rows.push(Row::Note(text));
    }

    pub fn labelled(&mut self, label: String, text: String) {
        self.rows.push(Row::Labelled(label, text));
    }

    /// A heading for the rows that follow.
    pub fn group(&mut self, heading: String) {
        self.rows.push(Row::Group(heading));
    }

    /// The rows of cells (notes and labelled rows left out).
    pub fn cell_rows(&self) -> Vec<&[Cell]> {
        self.rows
            .iter()
            .filter_map(|r| match r {
                Row::Cells(c) => Some(c.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// Keeps the first `n` rows of cells, with the notes under them.
    pub fn truncate(&mut self, n: usize) {
        let mut seen = 0;
        let keep = self
            .rows
            .iter()
            .position(|r| {
                if matches!(r, Row::Cells(_)) {
                    seen += 1;
                }
                seen > n
            })
            .unwrap_or(self.rows.len());
        self.rows.truncate(keep);
    }

    /// The table as aligned text, one line per row, the header first.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let indent = widths.first().copied().unwrap_or(0);
        let mut out = String::new();
        // Padding by hand: a `{:width$}` over 65535 panics.
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        let line_of = |cells: &mut dyn Iterator<Item = &str>| {
            let mut line = String::new();
            for (i, (cell, w)) in cells.zip(&widths).enumerate() {
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
            line.trim_end().to_string()
        };
        out.push_str(&line_of(&mut self.header.iter().map(String::as_str)));
        out.push('\n');
        for row in &self.rows {
            match row {
                Row::Cells(cells) => {
                    out.push_str(&line_of(&mut cells.iter().map(|c| c.text.as_str())));
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
                Row::Group(heading) => {
                    out.push_str("-- ");
                    out.push_str(&shown(heading));
                }
            }
            out.push('\n');
        }
        out
    }

    /// Each column's width: its widest cell as shown, the header's included.
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = Vec::new();
        let mut widen = |i: usize, cell: &str| {
            let w = shown(cell).chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        };
        for (i, h) in self.header.iter().enumerate() {
            widen(i, h);
        }
        for row in &self.rows {
            match row {
                Row::Cells(cells) => {
                    for (i, c) in cells.iter().enumerate() {
                        widen(i, &c.text);
                    }
                }
                Row::Labelled(label, _) => widen(0, label),
                Row::Note(_) | Row::Group(_) => {}
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

// ------------------------------------------------------- chart data
// What a chart shows; `xvmm report` draws it (plotters SVG).

/// One bin of a distribution: `[lo, hi)` holds `count` samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: u64,
    /// Above the p99 (drawn in its own colour).
    pub tail: bool,
}

/// A distribution to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    pub caption: String,
    /// What the x axis counts ("TSC ticks").
    pub unit: String,
    pub bins: Vec<Bin>,
    pub median: f64,
    pub p99: f64,
}

/// One row of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    /// Index into [`BarChart::series`] (the colour).
    pub series: usize,
    /// Where the bar starts (`None`: the axis start).
    pub from: Option<f64>,
    /// Where the bar ends: the value.
    pub to: f64,
    /// A dot on the bar (the median of a range).
    pub mark: Option<f64>,
    /// A thin line from the bar's end to here (a p99, a maximum).
    pub whisker: Option<f64>,
}

/// Horizontal bars, one per row.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub caption: String,
    /// What the x axis counts.
    pub unit: String,
    /// Series names (the legend), by colour.
    pub series: Vec<String>,
    pub bars: Vec<Bar>,
    /// A vertical reference line (1.0 for ratios).
    pub reference: Option<f64>,
    /// Rows left out before the chart was built (the caption counts them).
    pub omitted: usize,
}

/// One line of a trend chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    /// (x, y) points; non-finite ones are left out.
    pub points: Vec<(f64, f64)>,
}

/// Lines over an x axis (time).
#[derive(Debug, Clone, PartialEq)]
pub struct TrendChart {
    pub caption: String,
    pub x_unit: String,
    pub y_unit: String,
    pub lines: Vec<Line>,
    /// A horizontal reference line (1.0 for ratios).
    pub reference: Option<f64>,
}

/// One part of a stacked bar: `value` long, in the colour of `series`
/// (a negative part is drawn back from where the parts before it end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    pub series: usize,
    pub value: f64,
}

/// One row of a stacked chart: its parts end to end from zero.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBar {
    pub label: String,
    pub parts: Vec<Part>,
    /// An interval drawn as a whisker across the row (low, high).
    pub whisker: Option<(f64, f64)>,
    /// A dot on the row (the measured total, to set the parts against).
    pub mark: Option<f64>,
}

/// Horizontal bars of parts, one row per label.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedChart {
    pub caption: String,
    pub unit: String,
    /// Series names (the legend), by colour.
    pub series: Vec<String>,
    pub bars: Vec<StackedBar>,
    /// Rows left out before the chart was built.
    pub omitted: usize,
}

/// A span of one timeline row: `[from, to)` in the colour of `series`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub series: usize,
    pub from: f64,
    pub to: f64,
}

/// An event over a timeline row: a box from `from` to `to` with a label.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub from: f64,
    pub to: f64,
    pub label: String,
}

/// One sample on a timeline: its segments, the events inside it on top.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    pub label: String,
    pub spans: Vec<Span>,
    pub events: Vec<Event>,
}

/// Samples along one time axis, one row each.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineChart {
    pub caption: String,
    pub unit: String,
    /// Span series names (the legend), by colour.
    pub series: Vec<String>,
    pub rows: Vec<TimelineRow>,
}

/// The five figures of one group's box: minimum, quartiles, median, maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quartiles {
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
}

impl Quartiles {
    /// Nearest-rank quartiles of finite `values` (sorted here); `None`
    /// without one.
    pub fn of(values: &[f64]) -> Option<Quartiles> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable_by(f64::total_cmp);
        let at = |q: f64| {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "q in [0, 1]: an index into v"
            )]
            let i = ((v.len() - 1) as f64 * q).round() as usize;
            v[i.min(v.len() - 1)]
        };
        Some(Quartiles {
            min: v[0],
            q1: at(0.25),
            median: at(0.5),
            q3: at(0.75),
            max: v[v.len() - 1],
        })
    }
}

/// One group of a box chart: its box, and how many values it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxGroup {
    pub label: String,
    pub count: usize,
    pub quartiles: Quartiles,
}

/// One box plot per group, side by side on one value axis.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxChart {
    pub caption: String,
    pub unit: String,
    pub groups: Vec<BoxGroup>,
    /// Groups left out before the chart was built.
    pub omitted: usize,
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
