//! Charts of labelled rows besides plain bars: a stacked decomposition
//! ([`stacked`]), samples on a time axis with events on top ([`timeline`])
//! and box plots per group ([`boxes`]). Each shares the bar chart's frame: a
//! segmented y axis of at most [`MAX_ROWS`] labelled rows, and an x axis that
//! turns logarithmic (and says so) when its values span more than
//! [`LOG_SPAN`](super::LOG_SPAN); the timeline's axis stays linear, since its
//! spans start at zero.

use super::{
    caption, colour, failed, frame, label, no_data, with_legend, Axis, Body, Failure, Frame,
    SegmentedRange, FONT, MAX_LABEL, MAX_ROWS,
};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use xvmm_results::document::{BoxChart, StackedChart, TimelineChart};

/// Most events drawn on one timeline row.
pub const MAX_EVENTS: usize = 16;

/// The frame of a chart of labelled rows: legend, caption, y labels.
struct Rows<'a> {
    caption: String,
    unit: &'a str,
    labels: Vec<String>,
    legend: Vec<(String, RGBColor)>,
    x: Axis,
    /// Pixels per row.
    row_px: u32,
}

impl Rows<'_> {
    fn n(&self) -> u32 {
        // At most MAX_ROWS rows.
        u32::try_from(self.labels.len()).unwrap_or(u32::MAX)
    }

    /// Draws the frame and `body` into a fresh SVG.
    fn draw<B: Body<SegmentedRange>>(&self, body: &B) -> String {
        let n = self.n();
        let widest = self
            .labels
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        let y_area = u32::try_from(widest)
            .map_or(u32::MAX, |w| w.saturating_mul(8).saturating_add(16))
            .clamp(60, 360);
        let labels = &self.labels;
        let y_format = |v: &SegmentValue<u32>| match v {
            SegmentValue::CenterOf(k) if *k < n => labels[(n - 1 - k) as usize].clone(),
            _ => String::new(),
        };
        let height = 110 + self.row_px * n;
        with_legend(height, &self.legend, |root| {
            let f = Frame {
                caption: &self.caption,
                x: self.x,
                x_desc: self.unit,
                y_desc: "",
                y_area,
                y_labels: n as usize,
                y_log: false,
            };
            frame(root, &f, (0..n).into_segmented(), &y_format, body)
        })
    }
}

/// Row `i` of `n` from the top, as the segmented axis counts (from the bottom).
fn row(n: u32, i: u32) -> u32 {
    n.saturating_sub(1).saturating_sub(i)
}

/// A rectangle over part of row `r`: `top` and `bottom` are fractions of
/// the row's height, 0 at its bottom.
fn in_row<X: Clone>(
    a: X,
    z: X,
    r: u32,
    margins: (u32, u32),
    style: ShapeStyle,
) -> Rectangle<(X, SegmentValue<u32>)> {
    let mut rect = Rectangle::new(
        [(a, SegmentValue::Exact(r)), (z, SegmentValue::Exact(r + 1))],
        style,
    );
    rect.set_margin(margins.0, margins.1, 0, 0);
    rect
}

// ------------------------------------------------------------------ stacked

struct StackedBody<'a> {
    chart: &'a StackedChart,
    n: u32,
    x: Axis,
}

/// Each part's `[start, end]` along the row, end to end from zero.
fn part_ends(parts: &[xvmm_results::document::Part]) -> Vec<(usize, f64, f64)> {
    let mut at = 0.0;
    parts
        .iter()
        .filter(|p| p.value.is_finite())
        .map(|p| {
            let from = at;
            at += p.value;
            (p.series, from, at)
        })
        .collect()
}

impl Body<SegmentedRange> for StackedBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, SegmentedRange>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let x = self.x;
        let bars = &self.chart.bars[..self.n as usize];
        for (b, i) in bars.iter().zip(0..) {
            let r = row(self.n, i);
            let rects = part_ends(&b.parts).into_iter().map(|(series, from, to)| {
                let (a, z) = (x.clamp(from.min(to)), x.clamp(from.max(to)));
                // A negative part (the VM faster than bare metal) is pale.
                let alpha = if to < from { 0.35 } else { 0.85 };
                in_row(a, z, r, (3, 3), colour(series).mix(alpha).filled())
            });
            chart.draw_series(rects).map_err(failed)?;
            if let Some((lo, hi)) = b.whisker {
                let y = SegmentValue::CenterOf(r);
                let line = PathElement::new(
                    vec![(x.clamp(lo), y.clone()), (x.clamp(hi), y)],
                    BLACK.stroke_width(2),
                );
                chart.draw_series(std::iter::once(line)).map_err(failed)?;
            }
            if let Some(m) = b.mark {
                let dot = Circle::new((x.clamp(m), SegmentValue::CenterOf(r)), 4, BLACK.filled());
                chart.draw_series(std::iter::once(dot)).map_err(failed)?;
            }
        }
        Ok(())
    }
}

/// Stacked horizontal bars: each row's parts end to end from zero, its
/// interval as a whisker and its measured total as a dot; at most
/// [`MAX_ROWS`] rows.
pub fn stacked(chart: &StackedChart) -> String {
    let shown = &chart.bars[..chart.bars.len().min(MAX_ROWS)];
    let values = shown.iter().flat_map(|b| {
        let ends = part_ends(&b.parts).into_iter().flat_map(|(_, a, z)| [a, z]);
        let whisker = b.whisker.into_iter().flat_map(|(a, z)| [a, z]);
        ends.chain(whisker).chain(b.mark).filter(|v| *v > 0.0)
    });
    let Some(x) = Axis::fit(values) else {
        return no_data(&chart.caption);
    };
    let mut caption = caption(&chart.caption);
    let total = chart.bars.len().saturating_add(chart.omitted);
    if total > shown.len() {
        caption += &format!(" (first {} of {total} rows)", shown.len());
    }
    let rows = Rows {
        caption,
        unit: &chart.unit,
        labels: shown.iter().map(|b| label(&b.label)).collect(),
        legend: chart
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (label(s), colour(i)))
            .collect(),
        x,
        row_px: 30,
    };
    let body = StackedBody {
        chart,
        n: rows.n(),
        x,
    };
    rows.draw(&body)
}

// ----------------------------------------------------------------- timeline

struct TimelineBody<'a> {
    chart: &'a TimelineChart,
    n: u32,
    x: Axis,
}

impl Body<SegmentedRange> for TimelineBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, SegmentedRange>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let x = self.x;
        let rows = &self.chart.rows[..self.n as usize];
        for (t, i) in rows.iter().zip(0..) {
            let r = row(self.n, i);
            // Segments in the lower half of the row, exits above them.
            let spans = t.spans.iter().map(|s| {
                let (a, z) = (x.clamp(s.from.min(s.to)), x.clamp(s.from.max(s.to)));
                in_row(a, z, r, (22, 4), colour(s.series).mix(0.8).filled())
            });
            chart.draw_series(spans).map_err(failed)?;
            let events = &t.events[..t.events.len().min(MAX_EVENTS)];
            let boxes = events.iter().map(|e| {
                let (a, z) = (x.clamp(e.from.min(e.to)), x.clamp(e.from.max(e.to)));
                in_row(a, z, r, (4, 22), super::TAIL.mix(0.35).filled())
            });
            chart.draw_series(boxes).map_err(failed)?;
            let texts = events.iter().map(|e| {
                Text::new(
                    label(&e.label),
                    (x.clamp(e.from), SegmentValue::Exact(r + 1)),
                    (FONT, 12).into_font(),
                )
            });
            chart.draw_series(texts).map_err(failed)?;
        }
        Ok(())
    }
}

/// Samples on one linear time axis from zero, one row each: their
/// segments, and each event inside a sample as a labelled box above them;
/// at most [`MAX_ROWS`] rows and [`MAX_EVENTS`] events a row.
pub fn timeline(chart: &TimelineChart) -> String {
    let shown = &chart.rows[..chart.rows.len().min(MAX_ROWS)];
    let hi = shown
        .iter()
        .flat_map(|t| {
            let spans = t.spans.iter().flat_map(|s| [s.from, s.to]);
            spans.chain(t.events.iter().flat_map(|e| [e.from, e.to]))
        })
        .filter(|v| v.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    if hi <= 0.0 {
        return no_data(&chart.caption);
    }
    let x = Axis {
        lo: 0.0,
        hi: hi * 1.04,
        log: false,
    };
    // The series some span uses, in their order.
    let mut used = vec![false; chart.series.len()];
    for s in shown.iter().flat_map(|t| &t.spans) {
        if let Some(u) = used.get_mut(s.series) {
            *u = true;
        }
    }
    let mut legend: Vec<(String, RGBColor)> = chart
        .series
        .iter()
        .enumerate()
        .filter(|(i, _)| used[*i])
        .map(|(i, s)| (label(s), colour(i)))
        .collect();
    legend.push(("exit (reason, host ticks)".into(), super::TAIL));
    let rows = Rows {
        caption: caption(&chart.caption),
        unit: &chart.unit,
        labels: shown.iter().map(|t| label(&t.label)).collect(),
        legend,
        x,
        row_px: 44,
    };
    let body = TimelineBody {
        chart,
        n: rows.n(),
        x,
    };
    rows.draw(&body)
}

// -------------------------------------------------------------------- boxes

struct BoxesBody<'a> {
    chart: &'a BoxChart,
    n: u32,
    x: Axis,
}

impl Body<SegmentedRange> for BoxesBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, SegmentedRange>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let x = self.x;
        let groups = &self.chart.groups[..self.n as usize];
        for (g, i) in groups.iter().zip(0..) {
            let r = row(self.n, i);
            let q = g.quartiles;
            let y = SegmentValue::CenterOf(r);
            let whisker = PathElement::new(
                vec![(x.clamp(q.min), y.clone()), (x.clamp(q.max), y.clone())],
                BLACK.stroke_width(1),
            );
            chart
                .draw_series(std::iter::once(whisker))
                .map_err(failed)?;
            let body = in_row(
                x.clamp(q.q1),
                x.clamp(q.q3),
                r,
                (5, 5),
                colour(i as usize).mix(0.7).filled(),
            );
            chart.draw_series(std::iter::once(body)).map_err(failed)?;
            let median = in_row(
                x.clamp(q.median),
                x.clamp(q.median),
                r,
                (3, 3),
                BLACK.stroke_width(3),
            );
            chart.draw_series(std::iter::once(median)).map_err(failed)?;
        }
        Ok(())
    }
}

/// One box plot per group (whisker from the minimum to the maximum, box
/// over the quartiles, the median as a bar); at most [`MAX_ROWS`] groups.
pub fn boxes(chart: &BoxChart) -> String {
    let shown = &chart.groups[..chart.groups.len().min(MAX_ROWS)];
    let values = shown.iter().flat_map(|g| {
        let q = g.quartiles;
        [q.min, q.q1, q.median, q.q3, q.max]
    });
    let Some(x) = Axis::fit(values) else {
        return no_data(&chart.caption);
    };
    let mut caption = caption(&chart.caption);
    let total = chart.groups.len().saturating_add(chart.omitted);
    if total > shown.len() {
        caption += &format!(" (first {} of {total} groups)", shown.len());
    }
    let rows = Rows {
        caption,
        unit: &chart.unit,
        labels: shown
            .iter()
            .map(|g| format!("{} (n={})", super::cut(&g.label, MAX_LABEL - 12), g.count))
            .collect(),
        legend: Vec::new(),
        x,
        row_px: 30,
    };
    let body = BoxesBody {
        chart,
        n: rows.n(),
        x,
    };
    rows.draw(&body)
}
