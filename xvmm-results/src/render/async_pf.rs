//! Async page faults as text: one run's block, and the on/off table.

use crate::async_pf::{AsyncPf, OnOff, OnOffSide};
use crate::document::Table;
use xvmm_host::escape::visible;

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// One run's async page fault figures: what was offered and turned on, the
/// host's counts, the guest's, the spinner.
pub fn async_pf_lines(a: &AsyncPf) -> String {
    let h = &a.host;
    let enabled = match a.enabled_by_guest {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    };
    let mut out = format!(
        "async page faults: offered {}, guest turned them {enabled} (MSR_KVM_ASYNC_PF_EN); \
         host fault delay {} us\n",
        if a.offered { "yes" } else { "no" },
        a.host_fault_delay_ns as f64 / 1000.0
    );
    let latency = h
        .uffd_latency_ns
        .as_ref()
        .map_or("-".into(), |s| format!("{:.1}", s.median as f64 / 1000.0));
    out += &format!(
        "  host: pages dropped {} ({} requests, {} refused); uffd faults served {} (median {latency} us)\n",
        h.pages_dropped, h.drop_requests, h.drop_requests_refused, h.uffd_faults_served
    );
    out += &format!(
        "  host kvm events: try_async_get_page {}, not_present {}, repeated_fault {}, completed {}, ready {}\n",
        opt(h.try_async_get_page),
        opt(h.not_present),
        opt(h.repeated_fault),
        opt(h.completed),
        opt(h.ready)
    );
    let g = &a.guest;
    out += &format!(
        "  guest: touches {}, async #PFs received {}, page-ready interrupts {}, voluntary switches {}\n",
        g.touches,
        opt(g.async_pf_received),
        opt(g.page_ready),
        g.voluntary_switches
    );
    if let Some(n) = h.samples_with_not_present {
        let agree = h.samples_agreeing.map_or(String::new(), |k| {
            format!("; host and guest agree on {k} of {}", g.sample_async.len())
        });
        out += &format!(
            "  joined on the timeline: {n} samples hold a kvm_async_pf_not_present{agree}\n"
        );
    }
    if let Some(s) = &a.spinner {
        out += &format!(
            "  spinner (SCHED_IDLE, same CPU): {} iterations per touch (median; mean {:.0}), {} per 1000 ticks alone\n",
            s.per_touch.median, s.per_touch.mean, s.iterations_per_kilotick
        );
    }
    for (label, text) in [
        ("refused", &h.last_refusal),
        ("fault server failed", &h.failure),
    ] {
        if let Some(t) = text {
            out += &format!("  {label}: {}\n", visible(t));
        }
    }
    out
}

fn side_cells(name: &str, s: &OnOffSide) -> Vec<String> {
    vec![
        name.into(),
        s.touch_median.to_string(),
        format!("{}-{}", s.touch_ci.0, s.touch_ci.1),
        format!("{:.0}", s.touch_mean),
        s.spinner_mean.map_or("-".into(), |m| format!("{m:.0}")),
        opt(s.async_pf_received),
        opt(s.not_present),
    ]
}

/// `--async-pf both`: the two runs side by side and the difference.
pub fn on_off_table(c: &OnOff) -> String {
    let mut t = Table::new(&[
        "pf-host-miss",
        "touch median",
        "95% CI",
        "mean",
        "spinner/touch",
        "guest async #PF",
        "host not_present",
    ]);
    t.row(side_cells("async PF on", &c.on));
    t.row(side_cells("async PF off", &c.off));
    t.row(vec![
        "on - off".into(),
        format!("{:+}", c.touch_difference),
        format!(
            "{:+}..{:+}",
            c.touch_difference_ci.0, c.touch_difference_ci.1
        ),
        format!("{:+.0}", c.on.touch_mean - c.off.touch_mean),
        c.spinner_difference
            .map_or("-".into(), |d| format!("{d:+.0}")),
        String::new(),
        String::new(),
    ]);
    t.note(
        "(touch: TSC ticks from the user stamp before the store to the one after; spinner: \
         iterations a SCHED_IDLE task on the same vCPU made during a touch, i.e. guest work \
         while the host fetched the page)"
            .into(),
    );
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(median: u64, spin: f64) -> OnOffSide {
        OnOffSide {
            touch_median: median,
            touch_ci: (median - 10, median + 10),
            touch_mean: median as f64,
            spinner_median: Some(crate::num::u64_saturating(spin)),
            spinner_mean: Some(spin),
            async_pf_received: Some(3),
            not_present: Some(4),
        }
    }

    #[test]
    fn the_table_shows_both_sides_and_the_signed_difference() {
        let c = OnOff {
            on: side(5000, 900.0),
            off: side(4000, 0.0),
            touch_difference: 1000,
            touch_difference_ci: (980, 1020),
            spinner_difference: Some(900.0),
        };
        let text = on_off_table(&c);
        let diff = text.lines().find(|l| l.starts_with("on - off")).unwrap();
        assert!(
            diff.contains("+1000") && diff.contains("+980..+1020") && diff.contains("+900"),
            "{text}"
        );
        assert!(text
            .lines()
            .any(|l| l.starts_with("async PF off") && l.contains("4000")));
    }

    #[test]
    fn unknown_counts_are_dashes_and_guest_text_is_escaped() {
        let mut a = AsyncPf::default();
        a.host.failure = Some("boom\x1b[2J".into());
        let text = async_pf_lines(&a);
        assert!(text.contains("not_present -"), "{text}");
        assert!(text.contains("guest turned them unknown"));
        assert!(!text.contains('\x1b'), "{text}");
    }
}
