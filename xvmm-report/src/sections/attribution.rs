//! The traced run's timeline and exit attribution in the HTML/Markdown
//! report: the verdict first (an unverified timeline says so before any
//! figure built on it), then one row per crossing segment and a chart of
//! all-sample against exit-free medians.

use crate::charts;
use xvmm_results::attribution::{TracedSample, SEGMENTS};
use xvmm_results::document::{capped, Block, Chart, MAX_TABLE_ROWS};
use xvmm_results::document::{Bar, BarChart};
use xvmm_results::document::{Event, Span, TimelineChart, TimelineRow};
use xvmm_results::render::{self, timeline_lines};
use xvmm_results::timeline::Verdict;
use xvmm_results::{Crossing, Interval, Report, UNFILLED};

/// Every attributed segment of the report, in order.
fn attributed(r: &Report) -> Vec<(&Crossing, &'static str, &Interval)> {
    let mut out = Vec::new();
    for c in &r.crossings {
        for (name, pick) in SEGMENTS {
            if let Some(i) = pick(c).as_ref().filter(|i| i.host.is_some()) {
                out.push((c, name, i));
            }
        }
    }
    out
}

/// Adds the timeline and attribution blocks when the report has them.
pub fn timeline_blocks(r: &Report, blocks: &mut Vec<Block>) {
    let Some(t) = &r.timeline else {
        if r.environment == xvmm_results::Environment::LinuxVm {
            blocks.push(Block::Paragraph(NOT_TRACED.into()));
        }
        return;
    };
    blocks.push(Block::Subheading(
        "Timeline and host exits by sample segment".into(),
    ));
    blocks.push(Block::Paragraph(timeline_lines(t)));
    let segments = attributed(r);
    if segments.is_empty() {
        return;
    }
    let bars = segments
        .iter()
        .filter_map(|(c, name, i)| {
            let h = i.host.as_ref()?;
            (h.exit_free.count > 0).then(|| Bar {
                label: format!("{} {name}", c.name),
                series: 0,
                from: None,
                to: i.corrected.median as f64,
                mark: Some(h.exit_free.median as f64),
                whisker: None,
            })
        })
        .take(MAX_TABLE_ROWS)
        .collect();
    blocks.push(Block::Chart(Chart::Bars(BarChart {
        caption: match t.verdict() {
            Verdict::Verified => "Median of all samples (bar) and of the exit-free ones (dot)",
            Verdict::Consistent => {
                "OFFSET INFERRED (consistent, not verified): median of all samples (bar) and of \
                 the exit-free ones (dot)"
            }
            Verdict::NotVerified => {
                "UNVERIFIED TIMELINE: median of all samples (bar) and of the exit-free ones (dot)"
            }
        }
        .into(),
        unit: "ticks".into(),
        series: vec![],
        bars,
        reference: None,
        omitted: 0,
    })));
    if let Some(table) = render::attribution_of(&r.crossings) {
        capped(table, segments.len(), blocks);
    }
    slowest_blocks(r, blocks);
}

/// Why a VM file has no attribution and no timeline strip.
pub const NOT_TRACED: &str = "No host attribution and no timeline strip of the slowest \
samples: this run was not traced (`xvmm --trace` joins the host's exits to the guest's samples).";

/// Crossings whose slowest samples are drawn at most.
pub const MAX_STRIPS: usize = 8;

/// Why a traced file has no timeline strip.
pub const NO_STRIP: &str = "No timeline strip of the slowest samples: this file keeps no \
per-sample exits (xvmm keeps them for the slowest samples of a traced run whose results joined \
the trace; files written before it did lack them).";

/// The slowest samples of each crossing as a timeline strip, where the
/// file keeps them; a line saying why not otherwise.
fn slowest_blocks(r: &Report, blocks: &mut Vec<Block>) {
    let kept: Vec<(&Crossing, &[TracedSample])> = r
        .crossings
        .iter()
        .filter_map(|c| {
            let h = c.round_trip.as_ref()?.host.as_ref()?;
            (!h.slowest.is_empty()).then_some((c, h.slowest.as_slice()))
        })
        .collect();
    if kept.is_empty() {
        blocks.push(Block::Paragraph(NO_STRIP.into()));
        return;
    }
    blocks.push(Block::Paragraph(format!(
        "Where every tick went in the slowest samples of each crossing: u2k, in-kernel and k2u \
         on the guest's TSC from the sample's first stamp, each host exit inside the sample \
         mapped onto it as a box with its reason and host ticks{}.",
        if kept.len() > MAX_STRIPS {
            format!(" (the first {MAX_STRIPS} of {} crossings)", kept.len())
        } else {
            String::new()
        }
    )));
    for (c, samples) in kept.into_iter().take(MAX_STRIPS) {
        blocks.push(Block::Chart(Chart::Timeline(strip(&c.name, samples))));
    }
}

/// Ticks from `origin` to `t`, whatever the stamps hold.
fn since(origin: u64, t: i128) -> f64 {
    (t - i128::from(origin)) as f64
}

/// One crossing's slowest samples as a timeline.
pub fn strip(crossing: &str, samples: &[TracedSample]) -> TimelineChart {
    let rows = samples
        .iter()
        .take(charts::MAX_ROWS)
        .enumerate()
        .map(|(k, t)| {
            let s = &t.sample;
            let o = s.u2k_u;
            let at = |v: u64| since(o, i128::from(v));
            let spans = if s.u2k_k == UNFILLED || s.k2u_k == UNFILLED {
                vec![Span {
                    series: 3,
                    from: 0.0,
                    to: at(s.k2u_u),
                }]
            } else {
                vec![
                    Span {
                        series: 0,
                        from: 0.0,
                        to: at(s.u2k_k),
                    },
                    Span {
                        series: 1,
                        from: at(s.u2k_k),
                        to: at(s.k2u_k),
                    },
                    Span {
                        series: 2,
                        from: at(s.k2u_k),
                        to: at(s.k2u_u),
                    },
                ]
            };
            let events = t
                .exits
                .iter()
                .take(charts::MAX_EVENTS)
                .map(|e| {
                    let from = since(o, i128::from(e.guest_tsc));
                    Event {
                        from,
                        to: from + e.guest_ticks as f64,
                        label: format!("{} {}", e.reason, e.host_ticks),
                    }
                })
                .collect();
            let more =
                match t.exits_left_out + t.exits.len().saturating_sub(charts::MAX_EVENTS) as u64 {
                    0 => String::new(),
                    n => format!(", +{n} exits"),
                };
            TimelineRow {
                label: format!("#{} {} ticks{more}", k + 1, t.ticks),
                spans,
                events,
            }
        })
        .collect();
    TimelineChart {
        caption: format!(
            "{crossing}: the {} slowest samples",
            samples.len().min(charts::MAX_ROWS)
        ),
        unit: "guest TSC ticks since the sample's first stamp".into(),
        series: vec![
            "u2k".into(),
            "in kernel".into(),
            "k2u".into(),
            "round trip".into(),
        ],
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::attribution::{ReasonCost, SegmentHost};
    use xvmm_results::timeline::Timeline;
    use xvmm_results::{Environment, Method, Stats};

    /// A Linux VM run of xperf, not (yet) traced.
    fn untraced_vm_report() -> Report {
        Report::new(
            "xperf".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 2),
        )
    }

    /// getppid's two round trips, the host having seen one npf exit (150
    /// host ticks) in one of them.
    fn getppid_with_one_npf_exit() -> Crossing {
        let mut c = Crossing::from_round_trips("getppid", 2, &[100, 300], 0, "x".into());
        let mut host = SegmentHost {
            samples: 2,
            samples_with_exits: 1,
            exit_free: Stats::from_samples(&[100]),
            ..Default::default()
        };
        host.exits.insert(
            "npf".into(),
            ReasonCost {
                count: 1,
                host_ticks: 150,
            },
        );
        c.round_trip.as_mut().unwrap().host = Some(host);
        c
    }

    /// A timeline whose checks found 1 violation in 4: not verified.
    fn unverified_timeline() -> Timeline {
        Timeline {
            offset: 0,
            offset_source: "KVM_VCPU_TSC_OFFSET".into(),
            ratio: 1.0,
            ratio_fixed: None,
            ratio_frac_bits: None,
            host_khz: None,
            checks: 4,
            calibrations: 4,
            violations: 1,
            bound_ticks: 10,
            verified: false,
            offset_inferred: false,
            reason: Some("1 of 4".into()),
            offset_changes: vec![],
            measured_offset: None,
            requested_offset: None,
            measured_khz: None,
            requested_khz: None,
            unmatched: 0,
            lost_events: 0,
            lost_windows: 0,
            lost_unplaced: 0,
        }
    }

    fn assert_verdict_and_chart_say_unverified(blocks: &[Block]) {
        let Block::Paragraph(p) = &blocks[1] else {
            panic!("{blocks:?}")
        };
        assert!(p.contains("NOT VERIFIED: 1 of 4"), "{p}");
        let Block::Chart(Chart::Bars(chart)) = &blocks[2] else {
            panic!("{blocks:?}")
        };
        assert!(chart.caption.starts_with("UNVERIFIED"));
    }

    /// An inferred offset's chart says so, and is not called verified.
    fn assert_an_inferred_offset_is_said_and_marked(r: &mut Report) {
        let t = r.timeline.as_mut().unwrap();
        (t.violations, t.reason, t.offset_inferred) = (0, None, true);
        let mut inferred = Vec::new();
        timeline_blocks(r, &mut inferred);
        let Block::Chart(Chart::Bars(chart)) = &inferred[2] else {
            panic!("{inferred:?}")
        };
        assert!(
            chart.caption.starts_with("OFFSET INFERRED"),
            "{}",
            chart.caption
        );
        let Block::Paragraph(p) = &inferred[1] else {
            panic!("{inferred:?}")
        };
        assert!(p.contains("consistent (offset inferred)"), "{p}");
        assert_eq!(chart.bars[0].mark, Some(100.0));
    }

    fn assert_one_row_per_attributed_segment(blocks: &[Block]) {
        let Block::Table(t) = &blocks[3] else {
            panic!("{blocks:?}")
        };
        assert_eq!(t.cell_rows().len(), 1);
        assert_eq!(t.cell_rows()[0][7].text, "npf 1/150");
    }

    #[test]
    fn a_traced_report_gets_its_verdict_a_chart_and_a_row_per_segment() {
        let mut r = untraced_vm_report();
        let mut blocks = Vec::new();
        timeline_blocks(&r, &mut blocks);
        assert_eq!(
            blocks,
            [Block::Paragraph(NOT_TRACED.into())],
            "untraced: why"
        );
        blocks.clear();
        r.crossings.push(getppid_with_one_npf_exit());
        r.timeline = Some(unverified_timeline());
        timeline_blocks(&r, &mut blocks);
        assert_verdict_and_chart_say_unverified(&blocks);
        assert_an_inferred_offset_is_said_and_marked(&mut r);
        assert_one_row_per_attributed_segment(&blocks);
    }
}
