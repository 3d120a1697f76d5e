//! The report's charts, drawn with plotters' SVG backend into strings: six
//! kinds cover every section.
//!
//! - [`histogram`]: a distribution (bins, the tail above the p99 in its own
//!   colour, median and p99 lines);
//! - [`bars`]: horizontal bars, one row per label, with an optional median
//!   dot and a whisker (ranges, VM against bare metal, exits by reason,
//!   ratios against a reference);
//! - [`trend`]: lines over time;
//! - [`stacked`]: horizontal bars made of parts (VM against bare metal:
//!   bare metal, what the VM adds without exits, each exit reason), an
//!   interval as a whisker;
//! - [`timeline`]: samples on a time axis, their segments, and the events
//!   inside each as labelled boxes on top (a traced run's slowest samples);
//! - [`boxes`]: one box plot per group (a fleet's files of one metric).
//!
//! An axis turns logarithmic when its values span more than [`LOG_SPAN`]
//! (long tails, figures from 50 to 500 000 ticks in one chart). Labels come
//! from result files: they are made visible ([`xvmm_host::escape`]) and
//! cut short here, and plotters escapes them for XML. No chart fails or
//! panics on its input: empty input gives a "no data" chart, a drawing error
//! a chart that says so, and more than [`MAX_ROWS`] rows are cut with the
//! number left out in the caption.

mod rows;

pub use rows::{boxes, stacked, timeline, MAX_EVENTS};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use xvmm_host::escape::visible;
use xvmm_results::document::{Bar, BarChart, Bin, Distribution, Line, TrendChart};

/// Largest max/min ratio drawn on a linear axis.
pub const LOG_SPAN: f64 = 20.0;
/// Most rows a bar chart draws.
pub const MAX_ROWS: usize = 80;
/// Most bins a histogram draws.
pub const MAX_BINS: usize = 60;
/// Most lines a trend chart draws.
pub const MAX_LINES: usize = 12;
/// Longest label drawn (characters).
pub const MAX_LABEL: usize = 48;
/// Longest caption drawn (characters).
pub const MAX_CAPTION: usize = 96;

const WIDTH: u32 = 960;
/// [`WIDTH`] as an x coordinate.
#[allow(clippy::cast_possible_wrap, reason = "960")]
const RIGHT: i32 = WIDTH as i32;
const FONT: &str = "sans-serif";
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const TAIL: RGBColor = RGBColor(214, 39, 40);

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A label from a result file, safe and short.
pub fn label(text: &str) -> String {
    cut(text, MAX_LABEL)
}

/// A caption (it may hold a file's names), safe and short.
fn caption(text: &str) -> String {
    cut(text, MAX_CAPTION)
}

fn cut(text: &str, max: usize) -> String {
    let shown = visible(text);
    if shown.chars().count() <= max {
        return shown.into_owned();
    }
    let mut cut: String = shown.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// One axis: its range and whether it is logarithmic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
}

impl Axis {
    /// An axis holding `values` (non-finite ones ignored), from zero when
    /// linear, logarithmic when they span more than [`LOG_SPAN`]; `None`
    /// without a finite value.
    pub fn fit(values: impl IntoIterator<Item = f64>) -> Option<Axis> {
        let (mut min_pos, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut any = false;
        for v in values.into_iter().filter(|v| v.is_finite()) {
            any = true;
            max = max.max(v);
            if v > 0.0 {
                min_pos = min_pos.min(v);
            }
        }
        if !any {
            return None;
        }
        if max <= 0.0 {
            return Some(Axis {
                lo: 0.0,
                hi: 1.0,
                log: false,
            });
        }
        if max / min_pos > LOG_SPAN {
            Some(Axis {
                lo: min_pos / 1.5,
                hi: max * 1.5,
                log: true,
            })
        } else {
            Some(Axis {
                lo: 0.0,
                hi: max * 1.08,
                log: false,
            })
        }
    }

    /// `v` clamped into the axis (a log axis cannot show zero).
    fn clamp(&self, v: f64) -> f64 {
        if v.is_finite() && self.lo <= self.hi {
            v.clamp(self.lo, self.hi)
        } else {
            self.lo
        }
    }
}

/// Numbers as axis labels: short, no needless decimals.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Failure = String;

fn failed<E: std::fmt::Debug>(e: E) -> Failure {
    format!("{e:?}")
}

/// Draws into a fresh SVG of `height` pixels; a drawing error yields a chart
/// that names it.
fn svg(height: u32, draw: impl FnOnce(&Area) -> Result<(), Failure>) -> String {
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        let drawn = root.fill(&WHITE).map_err(failed).and_then(|()| draw(&root));
        drawn.and_then(|()| root.present().map_err(failed))
    };
    match result {
        Ok(()) => out,
        Err(e) => message("chart", &format!("this chart could not be drawn: {e}")),
    }
}

/// A chart with a caption and one line of text instead of figures.
pub fn message(caption: &str, text: &str) -> String {
    let (caption, text) = (self::caption(caption), self::caption(text));
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, 80)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = root.draw(&Text::new(caption, (10, 10), (FONT, 20).into_font()));
        let _ = root.draw(&Text::new(
            text,
            (10, 44),
            (FONT, 17).into_font().color(&BLACK.mix(0.6)),
        ));
        let _ = root.present();
    }
    out
}

fn no_data(caption: &str) -> String {
    message(caption, "no data")
}

/// Pixels `text` takes at 8 a character, plus `pad`; the names drawn are
/// cut to [`MAX_LABEL`] characters, far from saturating.
fn text_width(text: &str, pad: i32) -> i32 {
    i32::try_from(text.chars().count())
        .map_or(i32::MAX, |n| n.saturating_mul(8).saturating_add(pad))
}

/// Labels the series of a chart at its top right.
fn legend(root: &Area, names: &[(String, RGBColor)]) -> Result<(), Failure> {
    let mut x = RIGHT - 10;
    for (name, c) in names.iter().rev() {
        let w = text_width(name, 24);
        x -= w;
        root.draw(&Rectangle::new([(x, 8), (x + 12, 20)], c.filled()))
            .map_err(failed)?;
        root.draw(&Text::new(
            name.clone(),
            (x + 16, 7),
            (FONT, 16).into_font(),
        ))
        .map_err(failed)?;
    }
    Ok(())
}

/// A chart of `height` pixels drawn by `draw`, its series named at its top
/// right, or, where they are wider than the chart, in rows under it.
fn with_legend(
    height: u32,
    names: &[(String, RGBColor)],
    draw: impl FnOnce(&Area) -> Result<(), Failure>,
) -> String {
    let width = names
        .iter()
        .map(|(name, _)| text_width(name, 28))
        .fold(0, i32::saturating_add);
    let under = width > RIGHT - 40;
    // A row under the chart is at least half full: no name is wider than
    // MAX_LABEL characters, under half a row.
    let lines = u32::try_from(width / ((RIGHT - 80) / 2)).unwrap_or(0) + 1;
    let extra = if under { 18 * lines + 12 } else { 0 };
    svg(height + extra, |whole| {
        let (root, bottom) = whole.split_vertically(height);
        if under {
            legend_row(&bottom, names)?;
        } else if !names.is_empty() {
            legend(&root, names)?;
        }
        draw(&root)
    })
}

/// Something drawn inside a cartesian chart whatever its axes' kinds.
trait Body<Y: Ranged> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>;
}

/// What a chart's frame shows besides its y axis.
struct Frame<'a> {
    caption: &'a str,
    x: Axis,
    x_desc: &'a str,
    y_desc: &'a str,
    /// Width of the y labels' area, pixels.
    y_area: u32,
    /// How many y labels at most.
    y_labels: usize,
    /// Whether the y axis is logarithmic (its description says so).
    y_log: bool,
}

/// An axis's description, saying "(log scale)" when it is logarithmic (an
/// axis without a description gets one all the same when it is).
pub fn axis_desc(desc: &str, log: bool) -> String {
    match (log, desc.is_empty()) {
        (false, _) => desc.to_string(),
        (true, true) => "(log scale)".into(),
        (true, false) => format!("{desc} (log scale)"),
    }
}

/// The chart frame: caption, mesh and axis descriptions, with `x` linear or
/// logarithmic; `y` as given.
fn frame<Y, B>(
    root: &Area,
    f: &Frame,
    y: Y,
    y_format: &dyn Fn(&Y::Value) -> String,
    body: &B,
) -> Result<(), Failure>
where
    Y: AsRangedCoord + Clone,
    Y::CoordDescType: ValueFormatter<Y::Value>,
    B: Body<Y::CoordDescType>,
{
    let Frame {
        caption,
        x,
        x_desc,
        y_desc,
        y_area,
        y_labels,
        y_log,
    } = *f;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(caption, (FONT, 20))
        .margin(10)
        .margin_top(28)
        .margin_right(30)
        .x_label_area_size(46)
        .y_label_area_size(y_area);
    let x_format = |v: &f64| number(*v);
    let x_desc = axis_desc(x_desc, x.log);
    let y_desc = axis_desc(y_desc, y_log);
    let (x_desc, y_desc) = (x_desc.as_str(), y_desc.as_str());
    if x.log {
        let mut chart = builder
            .build_cartesian_2d((x.lo..x.hi).log_scale(), y)
            .map_err(failed)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 16))
            .y_labels(y_labels)
            .x_label_formatter(&x_format)
            .y_label_formatter(y_format)
            .draw()
            .map_err(failed)?;
        body.draw(&mut chart)
    } else {
        let mut chart = builder.build_cartesian_2d(x.lo..x.hi, y).map_err(failed)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 16))
            .y_labels(y_labels)
            .x_label_formatter(&x_format)
            .y_label_formatter(y_format)
            .draw()
            .map_err(failed)?;
        body.draw(&mut chart)
    }
}

// ---------------------------------------------------------------- histogram

struct HistogramBody<'a> {
    d: &'a Distribution,
    x: Axis,
    y: Axis,
    /// The tail's text ("20 above the p99, up to 1540").
    tail_note: Option<String>,
}

impl<Y: Ranged<ValueType = f64>> Body<Y> for HistogramBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let floor = self.y.lo;
        let bars = self.d.bins.iter().filter(|b| b.count > 0).map(|b| {
            // The tail is light: it is wide on the axis but holds 1 % of the samples.
            let style = if b.tail {
                TAIL.mix(0.3).filled()
            } else {
                colour(0).mix(0.85).filled()
            };
            let (lo, hi) = (self.x.clamp(b.lo), self.x.clamp(b.hi));
            Rectangle::new([(lo, floor), (hi, self.y.clamp(b.count as f64))], style)
        });
        chart.draw_series(bars).map_err(failed)?;
        for (value, c) in [(self.d.median, BLACK), (self.d.p99, TAIL)] {
            let v = self.x.clamp(value);
            let line = PathElement::new(vec![(v, floor), (v, self.y.hi)], c.stroke_width(2));
            chart.draw_series(std::iter::once(line)).map_err(failed)?;
        }
        if let Some(note) = &self.tail_note {
            let at = (self.x.clamp(self.d.p99), self.y.hi);
            let text = Text::new(format!("  {note}"), at, (FONT, 15).into_font().color(&TAIL));
            chart.draw_series(std::iter::once(text)).map_err(failed)?;
        }
        Ok(())
    }
}

/// The x axis of a histogram: logarithmic when the bins span more than
/// [`LOG_SPAN`], else linear and tight around the body, the tail cut at
/// 60 % of the body's width past the p99 (the note gives its end).
fn histogram_x(d: &Distribution) -> Option<Axis> {
    let filled = || {
        d.bins
            .iter()
            .filter(|b| b.count > 0 && b.lo.is_finite() && b.hi.is_finite())
    };
    let lo = filled().map(|b| b.lo).fold(f64::INFINITY, f64::min);
    let hi = filled().map(|b| b.hi).fold(f64::NEG_INFINITY, f64::max);
    if !(lo.is_finite() && hi.is_finite()) {
        return None;
    }
    if hi / lo.max(1.0) > LOG_SPAN {
        return Some(Axis {
            lo: lo.max(1.0) / 1.2,
            hi: hi * 1.2,
            log: true,
        });
    }
    let body_hi = filled()
        .filter(|b| !b.tail)
        .map(|b| b.hi)
        .fold(d.p99.max(d.median), f64::max)
        .min(hi)
        // A file's p99 may lie below its own raw values: never a reversed axis.
        ;
    let span = (body_hi - lo).max(1.0);
    let right = hi.min(body_hi + span * 0.6);
    Some(Axis {
        lo: lo - span * 0.05,
        hi: right + span * 0.02,
        log: false,
    })
}

/// A distribution as a histogram (see `histogram_x` for the x axis); the
/// count axis is logarithmic when the counts span more than [`LOG_SPAN`].
pub fn histogram(d: &Distribution) -> String {
    let y = Axis::fit(
        d.bins
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| b.count as f64),
    );
    let (Some(x), Some(mut y)) = (histogram_x(d), y) else {
        return no_data(&d.caption);
    };
    if y.log {
        y.lo = 0.7;
    }
    let tail: Vec<&Bin> = d.bins.iter().filter(|b| b.tail && b.count > 0).collect();
    let tail_note = (!tail.is_empty()).then(|| {
        let n = tail.iter().fold(0u64, |a, b| a.saturating_add(b.count));
        let end = tail.iter().map(|b| b.hi).fold(f64::NEG_INFINITY, f64::max);
        format!("{n} past the p99, up to {}", number(end))
    });
    let caption = caption(&d.caption);
    let body = HistogramBody { d, x, y, tail_note };
    let legend_names = [
        ("median".to_string(), BLACK),
        ("p99, tail".to_string(), TAIL),
    ];
    let f = Frame {
        caption: &caption,
        x,
        x_desc: &d.unit,
        y_desc: "samples",
        y_area: 64,
        y_labels: 6,
        y_log: y.log,
    };
    svg(300, |root| {
        legend(root, &legend_names)?;
        let fmt = |v: &f64| number(*v);
        if y.log {
            frame(root, &f, (y.lo..y.hi).log_scale(), &fmt, &body)
        } else {
            frame(root, &f, y.lo..y.hi, &fmt, &body)
        }
    })
}

// --------------------------------------------------------------------- bars

struct BarsBody<'a> {
    bars: &'a [Bar],
    x: Axis,
    reference: Option<f64>,
}

impl Body<SegmentedRange> for BarsBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, SegmentedRange>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        // At most MAX_ROWS bars.
        let n = u32::try_from(self.bars.len()).unwrap_or(u32::MAX);
        let row = |i: u32| n - 1 - i;
        let x = self.x;
        let rects = self.bars.iter().zip(0..).map(|(b, i)| {
            let from = b.from.map_or(x.lo, |f| x.clamp(f));
            let to = x.clamp(b.to);
            let (a, z) = if from <= to { (from, to) } else { (to, from) };
            let mut r = Rectangle::new(
                [
                    (a, SegmentValue::Exact(row(i))),
                    (z, SegmentValue::Exact(row(i) + 1)),
                ],
                colour(b.series).mix(0.85).filled(),
            );
            r.set_margin(3, 3, 0, 0);
            r
        });
        chart.draw_series(rects).map_err(failed)?;
        let whiskers = self.bars.iter().zip(0..).filter_map(|(b, i)| {
            let w = b.whisker?;
            let y = SegmentValue::CenterOf(row(i));
            Some(PathElement::new(
                vec![(x.clamp(b.to), y.clone()), (x.clamp(w), y)],
                BLACK.stroke_width(1),
            ))
        });
        chart.draw_series(whiskers).map_err(failed)?;
        let marks = self.bars.iter().zip(0..).filter_map(|(b, i)| {
            Some(Circle::new(
                (x.clamp(b.mark?), SegmentValue::CenterOf(row(i))),
                3,
                BLACK.filled(),
            ))
        });
        chart.draw_series(marks).map_err(failed)?;
        if let Some(r) = self.reference {
            let v = x.clamp(r);
            let line = PathElement::new(
                vec![(v, SegmentValue::Exact(0)), (v, SegmentValue::Exact(n))],
                BLACK.mix(0.7).stroke_width(1),
            );
            chart.draw_series(std::iter::once(line)).map_err(failed)?;
        }
        Ok(())
    }
}

type SegmentedRange =
    plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordu32>;

/// Horizontal bars; x logarithmic when the values span more than
/// [`LOG_SPAN`]; at most [`MAX_ROWS`] rows.
pub fn bars(chart: &BarChart) -> String {
    let shown = &chart.bars[..chart.bars.len().min(MAX_ROWS)];
    let values = shown
        .iter()
        .flat_map(|b| [Some(b.to), b.from, b.mark, b.whisker])
        .flatten()
        .chain(chart.reference);
    let Some(x) = Axis::fit(values) else {
        return no_data(&chart.caption);
    };
    let mut caption = caption(&chart.caption);
    let total = chart.bars.len().saturating_add(chart.omitted);
    if total > shown.len() {
        caption += &format!(" (first {} of {total} rows)", shown.len());
    }
    let labels: Vec<String> = shown.iter().map(|b| label(&b.label)).collect();
    // Labels are cut to MAX_LABEL characters, and there are at most MAX_ROWS.
    let widest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let y_area = u32::try_from(widest)
        .map_or(u32::MAX, |w| w.saturating_mul(8).saturating_add(16))
        .clamp(60, 360);
    let n = u32::try_from(shown.len()).unwrap_or(u32::MAX);
    let names: Vec<(String, RGBColor)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (label(s), colour(i)))
        .collect();
    let body = BarsBody {
        bars: shown,
        x,
        reference: chart.reference,
    };
    let y_format = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(k) if *k < n => labels[(n - 1 - k) as usize].clone(),
        _ => String::new(),
    };
    let height = 110 + 26 * n;
    let names = if names.len() > 1 { names } else { Vec::new() };
    with_legend(height, &names, |root| {
        let f = Frame {
            caption: &caption,
            x,
            x_desc: &chart.unit,
            y_desc: "",
            y_area,
            y_labels: n as usize,
            y_log: false,
        };
        frame(root, &f, (0..n).into_segmented(), &y_format, &body)
    })
}

// -------------------------------------------------------------------- trend

struct TrendBody<'a> {
    lines: &'a [Line],
    x: Axis,
    y: Axis,
    reference: Option<f64>,
}

impl TrendBody<'_> {
    fn points(&self, line: &Line) -> Vec<(f64, f64)> {
        line.points
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .map(|&(a, b)| (self.x.clamp(a), self.y.clamp(b)))
            .collect()
    }
}

impl Body<LogCoord<f64>> for TrendBody<'_> {
    fn draw<X>(
        &self,
        chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, LogCoord<f64>>>,
    ) -> Result<(), Failure>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        if let Some(r) = self.reference {
            let r = self.y.clamp(r);
            let line = PathElement::new(
                vec![(self.x.lo, r), (self.x.hi, r)],
                BLACK.mix(0.5).stroke_width(1),
            );
            chart.draw_series(std::iter::once(line)).map_err(failed)?;
        }
        for (i, line) in self.lines.iter().enumerate() {
            let pts = self.points(line);
            let style = colour(i).stroke_width(2);
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(failed)?;
            let dots = pts
                .into_iter()
                .map(move |p| Circle::new(p, 3, colour(i).filled()));
            chart.draw_series(dots).map_err(failed)?;
        }
        Ok(())
    }
}

/// Lines over time; y always logarithmic (ratios), at most [`MAX_LINES`].
pub fn trend(chart: &TrendChart) -> String {
    let lines = &chart.lines[..chart.lines.len().min(MAX_LINES)];
    let finite = |v: &f64| v.is_finite();
    let xs = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .filter(finite);
    let ys: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .chain(chart.reference)
        .collect();
    let (lo_x, hi_x) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo_x.is_finite() || ys.is_empty() {
        return no_data(&chart.caption);
    }
    let pad = ((hi_x - lo_x) * 0.05).max(0.5);
    let x = Axis {
        lo: lo_x - pad,
        hi: hi_x + pad,
        log: false,
    };
    let (lo_y, hi_y) = ys
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &v| (a.min(v), b.max(v)));
    let y = Axis {
        lo: lo_y / 1.25,
        hi: hi_y * 1.25,
        log: true,
    };
    let mut caption = caption(&chart.caption);
    if chart.lines.len() > lines.len() {
        caption += &format!(" (first {} of {} lines)", lines.len(), chart.lines.len());
    }
    let names: Vec<(String, RGBColor)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (label(&l.name), colour(i)))
        .collect();
    let body = TrendBody {
        lines,
        x,
        y,
        reference: chart.reference,
    };
    let fmt = |v: &f64| number(*v);
    svg(340, |root| {
        let (top, bottom) = root.split_vertically(300);
        let f = Frame {
            caption: &caption,
            x,
            x_desc: &chart.x_unit,
            y_desc: &chart.y_unit,
            y_area: 60,
            y_labels: 6,
            y_log: true,
        };
        frame(&top, &f, (y.lo..y.hi).log_scale(), &fmt, &body)?;
        legend_row(&bottom, &names)
    })
}

/// Series names in a row under a chart (trend charts have many).
fn legend_row(area: &Area, names: &[(String, RGBColor)]) -> Result<(), Failure> {
    let mut x = 70;
    let mut y = 4;
    for (name, c) in names {
        let w = text_width(name, 28);
        if x + w > RIGHT - 10 {
            x = 70;
            y += 18;
        }
        area.draw(&Rectangle::new([(x, y + 2), (x + 10, y + 12)], c.filled()))
            .map_err(failed)?;
        area.draw(&Text::new(
            name.clone(),
            (x + 14, y),
            (FONT, 15).into_font(),
        ))
        .map_err(failed)?;
        x += w;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::document::{
        BoxChart, BoxGroup, Event, Part, Quartiles, Span, StackedBar, StackedChart, TimelineChart,
        TimelineRow,
    };

    /// The checks every chart must pass: one SVG of non-zero size, no
    /// non-finite coordinate, nothing unescaped.
    fn assert_sane(svg: &str) {
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        let attr = |name: &str| -> u32 {
            let at = svg.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            svg[at..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(attr("width") > 0 && attr("height") > 0);
        for bad in ["NaN", "inf", "<script"] {
            assert!(!svg.contains(bad), "{bad} in the SVG");
        }
    }

    fn dist(caption: &str, bins: Vec<Bin>, median: f64, p99: f64) -> Distribution {
        Distribution {
            caption: caption.into(),
            unit: "ticks".into(),
            bins,
            median,
            p99,
        }
    }

    fn bar(label: &str, to: f64) -> Bar {
        Bar {
            label: label.into(),
            series: 0,
            from: None,
            to,
            mark: None,
            whisker: None,
        }
    }

    #[test]
    fn every_chart_says_no_data_for_empty_input() {
        let h = histogram(&dist("empty", vec![], 0.0, 0.0));
        let b = bars(&BarChart {
            caption: "empty".into(),
            unit: "u".into(),
            series: vec![],
            bars: vec![],
            reference: None,
            omitted: 0,
        });
        let t = trend(&TrendChart {
            caption: "empty".into(),
            x_unit: "h".into(),
            y_unit: "r".into(),
            lines: vec![],
            reference: Some(1.0),
        });
        let zero_counts = histogram(&dist(
            "zeros",
            vec![Bin {
                lo: 1.0,
                hi: 2.0,
                count: 0,
                tail: false,
            }],
            1.0,
            1.0,
        ));
        for svg in [h, b, t, zero_counts] {
            assert_sane(&svg);
            assert!(svg.contains("no data"), "{svg}");
        }
    }

    #[test]
    fn a_p99_below_the_bins_still_draws() {
        // A file's statistics need not agree with its raw samples.
        let bins = (0..4)
            .map(|k| Bin {
                lo: 400.0 + 10.0 * f64::from(k),
                hi: 410.0 + 10.0 * f64::from(k),
                count: 3,
                tail: true,
            })
            .collect();
        let svg = histogram(&dist("odd", bins, 300.0, 310.0));
        assert_sane(&svg);
        assert!(!svg.contains("no data"), "{svg}");
    }

    #[test]
    fn a_single_sample_draws_one_bin_one_bar_one_point() {
        let h = histogram(&dist(
            "one",
            vec![Bin {
                lo: 500.0,
                hi: 501.0,
                count: 1,
                tail: false,
            }],
            500.0,
            500.0,
        ));
        assert_sane(&h);
        assert!(!h.contains("no data") && h.contains("<rect"));
        let b = bars(&BarChart {
            caption: "one".into(),
            unit: "u".into(),
            series: vec![],
            bars: vec![bar("x", 0.0)],
            reference: None,
            omitted: 0,
        });
        assert_sane(&b);
        assert!(
            b.contains(">\nx\n</text>") || b.contains(">x<"),
            "the row label is drawn"
        );
        let t = trend(&TrendChart {
            caption: "one".into(),
            x_unit: "h".into(),
            y_unit: "r".into(),
            lines: vec![Line {
                name: "cpuid".into(),
                points: vec![(0.0, 1.0)],
            }],
            reference: Some(1.0),
        });
        assert_sane(&t);
        assert!(t.contains("<circle"));
    }

    #[test]
    fn huge_inputs_stay_bounded_and_say_what_was_left_out() {
        let many: Vec<Bar> = (0..10_000)
            .map(|i| bar(&format!("row {i}"), 1.0 + f64::from(i)))
            .collect();
        let b = bars(&BarChart {
            caption: "many".into(),
            unit: "u".into(),
            series: vec!["a".into()],
            bars: many,
            reference: None,
            omitted: 0,
        });
        assert_sane(&b);
        assert!(b.contains("(first 80 of 10000 rows)"));
        assert!(b.len() < 200_000, "{} bytes", b.len());
        let bins: Vec<Bin> = (0..MAX_BINS)
            .map(|k| Bin {
                lo: k as f64 * 1e17,
                hi: (k + 1) as f64 * 1e17,
                count: u64::MAX / 100,
                tail: k > 50,
            })
            .collect();
        let h = histogram(&dist("wide", bins, 1e18, 5e18));
        assert_sane(&h);
        let lines: Vec<Line> = (0..100)
            .map(|i| Line {
                name: format!("m{i}"),
                points: (0..1000)
                    .map(|t| (f64::from(t), 1.0 + f64::from(t % 7) + f64::from(i)))
                    .collect(),
            })
            .collect();
        let t = trend(&TrendChart {
            caption: "lines".into(),
            x_unit: "h".into(),
            y_unit: "r".into(),
            lines,
            reference: Some(1.0),
        });
        assert_sane(&t);
        assert!(t.contains("(first 12 of 100 lines)"));
        // Values a hostile file can hold: non-finite, negative, u64::MAX.
        let odd = vec![
            bar("nan", f64::NAN),
            bar("neg", -5.0),
            bar("max", u64::MAX as f64),
        ];
        assert_sane(&bars(&BarChart {
            caption: "odd".into(),
            unit: "u".into(),
            series: vec![],
            bars: odd,
            reference: None,
            omitted: 0,
        }));
    }

    #[test]
    fn labels_from_files_are_text_in_the_svg() {
        let evil = "<script>alert(1)</script>";
        let b = bars(&BarChart {
            caption: evil.into(),
            unit: evil.into(),
            series: vec![evil.into(), "b".into()],
            bars: vec![bar(evil, 3.0)],
            reference: None,
            omitted: 0,
        });
        assert_sane(&b);
        assert!(b.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{b}");
        let h = histogram(&dist(
            "\x1b[2J<b>",
            vec![Bin {
                lo: 1.0,
                hi: 2.0,
                count: 3,
                tail: false,
            }],
            1.0,
            1.0,
        ));
        assert_sane(&h);
        assert!(h.contains("\\x1b[2J&lt;b&gt;") && !h.contains('\x1b'));
        let long = "x".repeat(500);
        assert!(label(&long).chars().count() == MAX_LABEL && label(&long).ends_with('…'));
    }

    fn bar_chart(bars: Vec<Bar>) -> BarChart {
        BarChart {
            caption: "c".into(),
            unit: "ticks".into(),
            series: vec![],
            bars,
            reference: None,
            omitted: 0,
        }
    }

    fn stacked_of(bars: Vec<StackedBar>) -> StackedChart {
        StackedChart {
            caption: "s".into(),
            unit: "ticks".into(),
            series: vec![
                "bare metal".into(),
                "VM without exits".into(),
                "exit: npf".into(),
            ],
            bars,
            omitted: 0,
        }
    }

    fn timeline_of(rows: Vec<TimelineRow>) -> TimelineChart {
        TimelineChart {
            caption: "t".into(),
            unit: "ticks".into(),
            series: vec!["u2k".into()],
            rows,
        }
    }

    fn boxes_of(groups: Vec<BoxGroup>) -> BoxChart {
        BoxChart {
            caption: "b".into(),
            unit: "ns".into(),
            groups,
            omitted: 0,
        }
    }

    /// A bar with a negative, a NaN and a repeated series among its parts.
    fn hostile_stacked_bar() -> StackedBar {
        let part = |series, value| Part { series, value };
        StackedBar {
            label: "getppid u2k".into(),
            parts: vec![
                part(0, 100.0),
                part(1, -20.0),
                part(2, 300.0),
                part(2, f64::NAN),
            ],
            whisker: Some((60.0, 95.0)),
            mark: Some(390.0),
        }
    }

    fn empty_stacked_timeline_and_boxes_say_no_data() {
        for svg in [
            stacked(&stacked_of(vec![])),
            timeline(&timeline_of(vec![])),
            boxes(&boxes_of(vec![])),
        ] {
            assert_sane(&svg);
            assert!(svg.contains("no data"), "{svg}");
        }
    }

    /// Many long series: the legend wraps under the chart, inside it.
    fn a_wide_legend_wraps_with_each_label_in_its_own_place(bar: StackedBar) {
        let mut wide = stacked_of(vec![bar]);
        wide.series = (0..8)
            .map(|k| format!("exit: A_LONG_EXIT_REASON_{k}"))
            .collect();
        let w = stacked(&wide);
        assert_sane(&w);
        for k in 0..8 {
            assert!(
                w.contains(&format!("A_LONG_EXIT_REASON_{k}")),
                "series {k} not drawn"
            );
        }
        // Each label at its own place (plotters clamps a label left of the
        // picture to x = 0, where they would pile up).
        let places: Vec<(&str, &str)> = w
            .split("<text x=\"")
            .skip(1)
            .map(|t| {
                let x = t.split('"').next().unwrap();
                let y = t.split("y=\"").nth(1).unwrap().split('"').next().unwrap();
                (x, y)
            })
            .collect();
        assert!(places.len() > 8, "{w}");
        let distinct: std::collections::HashSet<_> = places.iter().collect();
        assert_eq!(
            distinct.len(),
            places.len(),
            "labels on one another: {places:?}"
        );
    }

    /// A hundred events reaching far past the span: drawn up to the cap.
    fn a_timeline_draws_at_most_its_cap_of_events() {
        let row = TimelineRow {
            label: "#1".into(),
            spans: vec![Span {
                series: 0,
                from: 0.0,
                to: 500.0,
            }],
            events: (0..100)
                .map(|k| Event {
                    from: f64::from(k),
                    to: f64::from(k) + 1e300,
                    label: format!("npf {k}"),
                })
                .collect(),
        };
        let t = timeline(&timeline_of(vec![row]));
        assert_sane(&t);
        assert!(t.contains("npf 0") && !t.contains(&format!("npf {MAX_EVENTS}")));
    }

    /// The quartiles of finite values only, which the box chart then draws
    /// for more groups than it shows.
    fn quartiles_skip_non_finite_and_boxes_cap_their_groups() {
        let q = Quartiles::of(&[5.0, 1.0, f64::NAN, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (q.min, q.q1, q.median, q.q3, q.max),
            (1.0, 2.0, 3.0, 4.0, 5.0)
        );
        assert_eq!(Quartiles::of(&[f64::INFINITY]), None);
        let groups = (0..200)
            .map(|k| BoxGroup {
                label: format!("g{k}"),
                count: 1,
                quartiles: q,
            })
            .collect();
        let b = boxes(&boxes_of(groups));
        assert_sane(&b);
        assert!(b.contains("(first 80 of 200 groups)") && b.contains("g0 (n=1)"));
    }

    /// The new kinds (issue 24): "no data" for empty input, a sane SVG for
    /// the values a hostile file can hold, the rows they were given.
    #[test]
    fn stacked_timeline_and_boxes_draw_or_say_no_data() {
        empty_stacked_timeline_and_boxes_say_no_data();
        let bar = hostile_stacked_bar();
        assert_sane(&stacked(&stacked_of(vec![bar.clone(); 3])));
        a_wide_legend_wraps_with_each_label_in_its_own_place(bar);
        a_timeline_draws_at_most_its_cap_of_events();
        quartiles_skip_non_finite_and_boxes_cap_their_groups();
    }

    /// Issue 24, item 4c: a logarithmic axis says so; a linear one does not.
    #[test]
    fn log_axes_say_they_are_log() {
        let span = LOG_SPAN * 10.0;
        let wide = bars(&bar_chart(vec![bar("a", 10.0), bar("b", 10.0 * span)]));
        assert_sane(&wide);
        assert!(wide.contains("ticks (log scale)"), "{wide}");
        let narrow = bars(&bar_chart(vec![
            bar("a", 10.0),
            bar("b", 10.0 * LOG_SPAN / 2.0),
        ]));
        assert_sane(&narrow);
        assert!(narrow.contains("ticks") && !narrow.contains("log scale"));
        // A histogram whose counts span widely: its count axis is log.
        let bin = |lo: f64, count: u64| Bin {
            lo,
            hi: lo + 1.0,
            count,
            tail: false,
        };
        let h = histogram(&dist(
            "h",
            vec![bin(10.0, 1), bin(11.0, 10_000)],
            10.0,
            11.0,
        ));
        assert!(h.contains("samples (log scale)") && !h.contains("ticks (log scale)"));
        let h = histogram(&dist("h", vec![bin(10.0, 5), bin(11.0, 7)], 10.0, 11.0));
        assert!(!h.contains("log scale"), "{h}");
        assert_eq!(axis_desc("", true), "(log scale)");
        assert_eq!(axis_desc("x", false), "x");
    }

    #[test]
    fn axes_turn_logarithmic_for_wide_spans_only() {
        assert_eq!(Axis::fit([]), None);
        assert_eq!(Axis::fit([f64::NAN]), None);
        let lin = Axis::fit([10.0, 100.0]).unwrap();
        assert!(!lin.log && lin.lo == 0.0 && lin.hi > 100.0);
        let log = Axis::fit([10.0, 100_000.0]).unwrap();
        assert!(log.log && log.lo < 10.0 && log.lo > 0.0);
        assert_eq!(
            Axis::fit([0.0, -3.0]),
            Some(Axis {
                lo: 0.0,
                hi: 1.0,
                log: false
            })
        );
        assert_eq!(number(1_500_000.0), "1.5M");
        assert_eq!(number(25_000.0), "25k");
        assert_eq!(number(0.25), "0.25");
    }
}
