//! xvmm's command line: clap's parse of `app::cli::Cli` with the value
//! parsers it calls (`parse_delay` for `--host-fault-delay`), the range
//! check of that delay (`host_fault::check_delay`) and the usage message
//! the app prints for a refused command line (`app::usage_message`).
//! Input: the arguments, any bytes (argv need not be UTF-8), separated by
//! NUL bytes.
//!
//! `parse_delay` is checked against a model written here: a whole number
//! of ASCII digits and one of the units ns, us, ms, s, nothing else, worth
//! at most 2^64 - 1 ns (computed in u128). An accepted command line obeys
//! the relations the struct declares (run options stay at their defaults
//! beside a subcommand; `--initrd`, `--cmdline`, `--host-fault-delay` and
//! `--baseline` only with `--kernel`); a refused one prints a message free
//! of control characters but newlines, that ends with a newline.
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use xvmm::host_fault::check_delay;
use xvmm_cli::cli::{parse_delay, AsyncPf, Cli, RunArgs, MAX_TIMEOUT_SECS};
use xvmm_cli::usage_message;
use xvmm_fuzz::{assert_one_line, assert_terminal_safe};

/// The model of `parse_delay`: the delay in nanoseconds, if the text is one.
fn delay_model(text: &str) -> Option<u128> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(unit_at);
    let per_unit: u128 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: u128 = 0;
    for d in digits.bytes() {
        n = n.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
        if n > u128::from(u64::MAX) {
            return None;
        }
    }
    let ns = n * per_unit;
    (ns <= u128::from(u64::MAX)).then_some(ns)
}

fn check_delay_text(text: &str) {
    let parsed = parse_delay(text);
    let model = delay_model(text);
    match &parsed {
        Ok(d) => assert_eq!(Some(d.as_nanos()), model, "{text:?}"),
        Err(e) => {
            assert_eq!(model, None, "{text:?} refused: {e}");
            assert_one_line(e, "parse_delay");
        }
    }
    if let Ok(d) = parsed {
        let in_range = (1_000..=1_000_000_000).contains(&d.as_nanos());
        assert_eq!(check_delay(d).is_ok(), in_range, "{d:?}");
    }
}

fn args(data: &[u8]) -> Vec<OsString> {
    let mut out = vec![OsString::from("xvmm")];
    if !data.is_empty() {
        out.extend(
            data.split(|&b| b == 0)
                .map(|a| OsString::from_vec(a.to_vec())),
        );
    }
    out
}

/// The value given to `--host-fault-delay`, when the arguments name it once.
fn delay_argument(args: &[OsString]) -> Option<String> {
    const OPT: &str = "--host-fault-delay";
    let texts: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    let mut found = texts.iter().enumerate().filter(|(_, t)| t.starts_with(OPT));
    let (i, t) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    match t.strip_prefix(OPT)? {
        "" => texts.get(i + 1).map(|v| v.to_string()),
        rest => rest.strip_prefix('=').map(str::to_string),
    }
}

fn check_accepted(cli: &Cli, args: &[OsString]) {
    let run: &RunArgs = &cli.run;
    if cli.command.is_some() {
        let defaults = Cli::try_parse_from(["xvmm"])
            .expect("no arguments parse")
            .run;
        assert_eq!(format!("{run:?}"), format!("{defaults:?}"), "{args:?}");
    }
    let needs_kernel = run.initrd.is_some()
        || run.cmdline.is_some()
        || run.host_fault_delay.is_some()
        || run.baseline.is_some()
        || run.mem.is_some()
        || run.async_pf != AsyncPf::Off;
    assert!(!needs_kernel || run.kernel.is_some(), "{args:?}");
    // The built-in xperf's options never reach a user's initrd.
    let xperf_options =
        run.samples.is_some() || run.warmup.is_some() || run.rounds.is_some() || run.raw;
    assert!(run.initrd.is_none() || !xperf_options, "{args:?}");
    assert!(
        run.async_pf != AsyncPf::Both || run.host_fault_delay.is_some(),
        "{args:?}"
    );
    assert!((1..=MAX_TIMEOUT_SECS).contains(&run.timeout), "{args:?}");
    if let (Some(d), Some(text)) = (run.host_fault_delay, delay_argument(args)) {
        assert_eq!(delay_model(&text), Some(d.as_nanos()), "{args:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let args = args(data);
    for a in &args[1..] {
        check_delay_text(&a.to_string_lossy());
    }
    match Cli::try_parse_from(&args) {
        Ok(cli) => check_accepted(&cli, &args),
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                let text = usage_message(&e);
                assert_terminal_safe(&text, &['\n'], "usage_message");
                assert!(text.ends_with('\n') && !text.trim().is_empty(), "{text:?}");
            }
        }
    }
});
