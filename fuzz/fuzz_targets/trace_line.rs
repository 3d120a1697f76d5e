//! Host-side exit timing (`--trace`): the trace_pipe text cut into lines
//! across reads (`host_trace::TraceLines`), each line parsed
//! (`host_trace::parse_line`), exits paired with entries
//! (`ExitAggregator`), rendered, and joined with a guest report on the
//! timeline (`linux::add_timeline`: calibration pairs, verification,
//! attribution). Input: a byte choosing the read size, then the text. Reads
//! of any size must give the lines of the whole text; every attributed
//! sample is counted exactly once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::host_trace::{parse_line, TraceLines, TraceSummary, MAX_TRACE_LINE};
use xvmm::linux::{add_timeline, TscFacts};
use xvmm_fuzz::{assert_terminal_safe, knob, CheckedAggregator};
use xvmm_results::timeline::GuestCalibration;
use xvmm_results::{render, Corrections, Crossing, Environment, Method, Report, Sample};

fuzz_target!(|data: &[u8]| {
    let (read_size, text) = knob(data);
    let mut whole = Vec::new();
    TraceLines::default().feed(text, |l| whole.push(l.to_owned()));
    let mut pieces = Vec::new();
    let mut lines = TraceLines::default();
    for chunk in text.chunks(usize::from(read_size).max(1)) {
        lines.feed(chunk, |l| pieces.push(l.to_owned()));
    }
    assert_eq!(whole, pieces, "reads of {read_size} bytes");
    let expected: Vec<String> = match text.iter().rposition(|&b| b == b'\n') {
        Some(end) => text[..end]
            .split(|&b| b == b'\n')
            .filter(|l| l.len() <= MAX_TRACE_LINE)
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect(),
        None => Vec::new(),
    };
    assert_eq!(whole, expected);
    let mut checked = CheckedAggregator::default();
    whole
        .iter()
        .filter_map(|l| parse_line(l))
        .for_each(|e| checked.push(e));
    let table = xvmm_results::render::host_exit_table(&checked.checked_summary());
    assert_terminal_safe(&table, &['\n'], "host_exit_table");
    joined(&checked.agg.finish(0));
});

/// The trace joined with a small guest report whose calibration exits and
/// samples sit where the fuzzed trace may put exits.
fn joined(trace: &TraceSummary) {
    let samples: Vec<Sample> = (0..8u64)
        .map(|i| Sample {
            u2k_u: i * 1000,
            u2k_k: i * 1000 + 100,
            k2u_k: i * 1000 + 300,
            k2u_u: i * 1000 + 400,
            cpu: Some(0),
            interrupts: None,
        })
        .collect();
    let mut r = Report::new(
        "fuzz".into(),
        Environment::LinuxVm,
        Default::default(),
        Method::standard(0, 8),
    );
    r.run_id = Some("f".into());
    r.calibration = (0..4)
        .map(|i| GuestCalibration(i, u64::from(i) * 50, u64::from(i) * 50 + 40))
        .collect();
    let mut c = Crossing::from_samples("c", 8, &samples, &Corrections::default(), true);
    c.samples = Some(samples);
    r.crossings.push(c);
    let tsc = TscFacts {
        offset_before: Some(0),
        offset_after: Some(0),
        ..Default::default()
    };
    add_timeline(&mut r, trace, &tsc, "f", None, 4);
    let t = r.timeline.as_ref().expect("a timeline");
    assert!(!t.verified || t.violations == 0);
    for i in [&r.crossings[0].u2k, &r.crossings[0].round_trip] {
        let h = i
            .as_ref()
            .and_then(|i| i.host.as_ref())
            .expect("attributed");
        // Every sample is counted, once: with exits, exit-free or
        // unattributable (out of order included).
        assert_eq!(h.samples, 8);
        assert_eq!(
            h.samples_with_exits + h.exit_free.count + h.unattributable,
            h.samples
        );
    }
    assert_terminal_safe(&render::report(&r), &['\n'], "render::report");
}
