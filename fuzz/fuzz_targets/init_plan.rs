//! The nested harness's test plan and step results (`xvmm_init::plan`):
//! the plan the host writes and `l1-init` parses (`Step::to_line`,
//! `parse`), and the result line `l1-init` prints and the host parses from
//! L1's console (`StepResult::to_line`, `StepResult::parse_line`). Input: a
//! knob byte, then plan text, a console line, or (structured) a step and a
//! step result.
//!
//! Round trips, both ways: a step that can be written reads back as
//! itself, alone or among others in a plan; every step a plan gives can be
//! written, and reads back the same; its name survives the result line,
//! whose fields split at whitespace. A result line reads back as itself,
//! and any line that gives a result gives one that prints and reads back
//! the same. Errors are one line.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::{assert_one_line, knob};
use xvmm_init::plan::{parse, Outcome, Step, StepResult};

#[derive(Arbitrary, Debug)]
struct Structured {
    step: (String, u64, Option<String>, bool, Vec<String>),
    result: (i8, i32, f64, Option<f64>, u64, Option<u64>, Option<u64>),
}

/// The step and the result line `l1-init` would print for it.
fn result_for(step: &Step) -> StepResult {
    StepResult {
        name: step.name.clone(),
        outcome: Outcome::Exited(0),
        elapsed_ms: 1.5,
        marker_ms: None,
        first_byte_ms: None,
        max_rss_kib: 1,
        guest_rss_kib: None,
        other_rss_kib: None,
    }
}

/// A parsed result, compared as printed: a NaN equals itself.
fn same(a: &Option<StepResult>, b: &Option<StepResult>) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// A plan's steps: each can be written, reads back as itself, and keeps its
/// name through a result line.
fn check_plan(text: &str) {
    let steps = match parse(text) {
        Ok(steps) => steps,
        Err(e) => return assert_one_line(&e, "plan::parse"),
    };
    for step in &steps {
        let line = step
            .to_line()
            .unwrap_or_else(|e| panic!("a parsed step cannot be written: {e} ({step:?})"));
        assert_eq!(parse(&line), Ok(vec![step.clone()]), "{line:?}");
        let r = result_for(step);
        assert_eq!(StepResult::parse_line(&r.to_line()), Some(r), "{step:?}");
    }
}

fn check_step(step: &Step) {
    let Ok(line) = step.to_line() else { return };
    assert_eq!(parse(&line), Ok(vec![step.clone()]), "{line:?}");
    let plan = format!("{line}\n{line}\r\n");
    assert_eq!(
        parse(&plan),
        Ok(vec![step.clone(), step.clone()]),
        "{plan:?}"
    );
}

/// Whether `b` is `a` printed to 0.1 ms and read back.
fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 0.05 + a.abs() * f64::EPSILON
}

/// Any result a line gives prints and reads back the same, times to 0.1
/// ms; printed once more, nothing changes.
fn check_result_line(line: &str) {
    let Some(r) = StepResult::parse_line(line) else {
        return;
    };
    let printed = StepResult::parse_line(&r.to_line()).expect("a read result prints and reads");
    assert_eq!(
        (&printed.name, &printed.outcome),
        (&r.name, &r.outcome),
        "{line:?}"
    );
    let sizes = (r.max_rss_kib, r.guest_rss_kib, r.other_rss_kib);
    assert_eq!(
        (
            printed.max_rss_kib,
            printed.guest_rss_kib,
            printed.other_rss_kib
        ),
        sizes
    );
    assert!(
        close(r.elapsed_ms, printed.elapsed_ms),
        "{line:?}: {printed:?}"
    );
    let marker_close = match (r.marker_ms, printed.marker_ms) {
        (Some(a), Some(b)) => close(a, b),
        (a, b) => a.is_none() && b.is_none(),
    };
    assert!(marker_close, "{line:?}: {printed:?}");
    let again = StepResult::parse_line(&printed.to_line());
    assert!(
        same(&again, &Some(printed.clone())),
        "{printed:?} then {again:?}"
    );
}

fn structured(s: Structured) {
    let (name, timeout_secs, marker, stop_at_marker, argv) = s.step;
    let step = Step {
        name,
        timeout_secs,
        marker,
        stop_at_marker,
        argv,
    };
    check_step(&step);
    let (kind, code, elapsed_ms, marker_ms, max_rss_kib, guest_rss_kib, other_rss_kib) = s.result;
    let outcome = match kind.rem_euclid(5) {
        0 => Outcome::Exited(code),
        1 => Outcome::Signalled(code),
        2 => Outcome::TimedOut,
        3 => Outcome::StoppedAtMarker,
        _ => Outcome::SpawnFailed,
    };
    let r = StepResult {
        name: step.name.clone(),
        outcome,
        elapsed_ms,
        marker_ms,
        first_byte_ms: marker_ms.map(|m| m / 2.0),
        max_rss_kib,
        guest_rss_kib,
        other_rss_kib,
    };
    // Names are those a plan can carry; times print to 0.1 ms.
    if step.to_line().is_ok() {
        let once = StepResult::parse_line(&r.to_line());
        let read = once.as_ref().expect("a step's result line reads back");
        assert_eq!((&read.name, &read.outcome), (&r.name, &r.outcome));
        assert_eq!(read.max_rss_kib, r.max_rss_kib);
        assert_eq!(
            (read.guest_rss_kib, read.other_rss_kib),
            (r.guest_rss_kib, r.other_rss_kib)
        );
        check_result_line(&read.to_line());
    }
}

fuzz_target!(|data: &[u8]| {
    let (k, rest) = knob(data);
    match k % 3 {
        0 => check_plan(&String::from_utf8_lossy(rest)),
        1 => String::from_utf8_lossy(rest)
            .lines()
            .for_each(check_result_line),
        _ => {
            if let Ok(s) = Structured::arbitrary(&mut Unstructured::new(rest)) {
                structured(s);
            }
        }
    }
});
