//! Distributions for the histogram charts: from raw samples or from a
//! report's stored histogram, in fixed numbers of bins.

use super::TICKS;
use crate::charts;
use xvmm_results::document::{Bin, Distribution};
use xvmm_results::Stats;

/// Bins of a segment: from the raw values when the file kept them (log
/// spaced when they span more than [`charts::LOG_SPAN`]), else from the
/// stored histogram (min to p99) plus one bin for the tail to the max.
pub fn distribution(caption: &str, stats: &Stats, raw: Option<&[u64]>) -> Distribution {
    let bins = match raw.filter(|r| !r.is_empty()) {
        Some(values) => bins_of(values, stats.p99),
        None => bins_of_histogram(stats),
    };
    Distribution {
        caption: caption.to_string(),
        unit: TICKS.into(),
        bins,
        median: stats.median as f64,
        p99: stats.p99 as f64,
    }
}

pub(super) const RAW_BINS: usize = 40;

/// Bins of raw values, linear or log-spaced; the ones at or past the p99
/// are the tail.
pub fn bins_of(values: &[u64], p99: u64) -> Vec<Bin> {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Vec::new();
    };
    let (lo, hi) = (min as f64, max as f64 + 1.0);
    let log = hi / lo.max(1.0) > charts::LOG_SPAN;
    let (a, b) = if log {
        (lo.max(1.0).ln(), hi.ln())
    } else {
        (lo, hi)
    };
    let step = (b - a) / RAW_BINS as f64;
    let edge = |k: usize| {
        let e = a + step * k as f64;
        if log {
            e.exp()
        } else {
            e
        }
    };
    let mut counts = vec![0u64; RAW_BINS];
    for &v in values {
        let x = if log {
            (v as f64).max(1.0).ln()
        } else {
            v as f64
        };
        let k = if step > 0.0 {
            xvmm_results::num::usize_saturating((x - a) / step)
        } else {
            0
        };
        counts[k.min(RAW_BINS - 1)] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(k, count)| Bin {
            lo: edge(k),
            hi: edge(k + 1),
            count,
            tail: edge(k) >= p99 as f64,
        })
        .collect()
}

/// The stored histogram's buckets (merged down to at most
/// [`charts::MAX_BINS`]) and the tail above the p99 as one bin.
pub fn bins_of_histogram(stats: &Stats) -> Vec<Bin> {
    let h = &stats.histogram;
    let width = h.width.max(1) as f64;
    let merge = h.counts.len().div_ceil(charts::MAX_BINS).max(1);
    let mut bins: Vec<Bin> = h
        .counts
        .chunks(merge)
        .enumerate()
        .map(|(k, chunk)| {
            let lo = h.start as f64 + (k * merge) as f64 * width;
            Bin {
                lo,
                hi: lo + chunk.len() as f64 * width,
                count: chunk.iter().fold(0u64, |a, &c| a.saturating_add(c)),
                tail: false,
            }
        })
        .collect();
    if h.above > 0 {
        let lo = h.start as f64 + h.counts.len() as f64 * width;
        bins.push(Bin {
            lo,
            hi: (stats.max as f64).max(lo + width),
            count: h.above,
            tail: true,
        });
    }
    bins
}
