//! The human-readable summary of a report: one row per crossing, figures in
//! TSC ticks with the null overhead's median subtracted.

use std::fmt::Write;
use xvmm_results::{Crossing, Interval, Report, Status};

fn med_p99(interval: Option<&Interval>) -> String {
    match interval {
        Some(i) if i.corrected.count > 0 => format!("{} / {}", i.corrected.median, i.corrected.p99),
        _ => "-".into(),
    }
}

fn status_word(status: &Status) -> &'static str {
    match status {
        Status::Measured => "split",
        Status::RoundTripOnly { .. } => "round trip",
        Status::Unsupported { .. } => "unsupported",
    }
}

fn row(c: &Crossing, null_median: u64) -> [String; 7] {
    [
        c.name.clone(),
        status_word(&c.status).into(),
        format!("{}/{}", c.samples_valid, c.samples_requested),
        med_p99(c.u2k.as_ref()),
        med_p99(c.k2u.as_ref()),
        med_p99(c.round_trip.as_ref()),
        null_median.to_string(),
    ]
}

/// Renders the table, the rejection counts and the notes.
pub fn render(report: &Report) -> String {
    let null = &report.null_overhead;
    let mut out = String::new();
    let host = &report.host;
    let _ = writeln!(
        out,
        "{} on {}: {} | kernel {} | TSC {} kHz | hypervisor {:?} | KPTI {}",
        report.tool,
        report.environment.describe(),
        host.cpu_model,
        host.kernel_release,
        host.tsc_khz,
        host.hypervisor_signature,
        host.kpti.map_or("unknown".to_string(), |k| if k {
            "on".into()
        } else {
            "off".into()
        }),
    );
    let _ = writeln!(
        out,
        "TSC ticks, median / p99, null overhead (median {}, min {}, p99 {}) subtracted",
        null.median, null.min, null.p99
    );
    let header = [
        "crossing",
        "mode",
        "valid",
        "u2k",
        "k2u",
        "round trip",
        "null",
    ]
    .map(String::from);
    let rows: Vec<[String; 7]> = std::iter::once(header)
        .chain(report.crossings.iter().map(|c| row(c, null.median)))
        .collect();
    let mut widths = [0usize; 7];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "  {}", line.join("  "));
    }
    for c in &report.crossings {
        if let Status::Unsupported { reason } = &c.status {
            let _ = writeln!(out, "  {}: not measured: {reason}", c.name);
        }
        let rejected = c.samples_unfilled + c.samples_out_of_order + c.samples_other_rejected;
        if rejected > 0 {
            let _ = writeln!(
                out,
                "  {}: rejected {} unfilled, {} out of order, {} other{}",
                c.name,
                c.samples_unfilled,
                c.samples_out_of_order,
                c.samples_other_rejected,
                c.other_rejected_reason
                    .as_ref()
                    .map_or(String::new(), |r| format!(" ({r})")),
            );
        }
    }
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{Environment, HostFacts, Method, Sample, Stats};

    #[test]
    fn table_has_one_aligned_row_per_crossing() {
        let mut report = Report::new(
            "xperf test".into(),
            Environment::BareMetal,
            HostFacts::default(),
            Method::standard(1, 2),
        );
        report.null_overhead = Stats::from_samples(&[70, 73, 80]);
        report.crossings.push(Crossing::from_round_trips(
            "getppid",
            2,
            &[573, 600],
            73,
            "no hooks".into(),
        ));
        let samples = [Sample {
            u2k_u: 0,
            u2k_k: 400,
            k2u_k: 900,
            k2u_u: 1200,
        }];
        report.crossings.push(Crossing::from_samples(
            "pf-first-touch",
            2,
            &samples,
            73,
            false,
        ));
        report.crossings.push(Crossing::unsupported(
            "pf-refault",
            2,
            "madvise: ENOSYS".into(),
        ));
        let text = render(&report);
        assert!(
            text.contains("pf-refault: not measured: madvise: ENOSYS"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("median 73"));
        let getppid = lines
            .iter()
            .find(|l| l.trim_start().starts_with("getppid"))
            .unwrap();
        assert!(
            getppid.contains("round trip") && getppid.contains("500 / 527"),
            "{getppid}"
        );
        let pf = lines
            .iter()
            .find(|l| l.trim_start().starts_with("pf-first"))
            .unwrap();
        assert!(
            pf.contains("327 / 327") && pf.contains("227 / 227") && pf.contains("1/2"),
            "{pf}"
        );
        assert_eq!(getppid.len(), pf.len(), "rows are aligned");
    }
}
