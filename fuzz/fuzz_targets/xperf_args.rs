//! xperf's command line (`xperf::args::parse`, `characterize`'s and
//! `probes`' options included): often PID 1 with arguments from the kernel command line, so
//! any bytes. Input: the arguments,
//! separated by NUL bytes. Accepted options stay in range; errors are one
//! terminal-safe line with the usage status.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xperf::args::{parse, Command, MAX_SAMPLES};
use xvmm_fuzz::{assert_one_line, split_args};

fuzz_target!(|data: &[u8]| {
    match parse(split_args(data)) {
        Ok(Command::Run(o)) => {
            assert!((1..=MAX_SAMPLES).contains(&o.samples), "{o:?}");
            assert!(o.warmup <= MAX_SAMPLES, "{o:?}");
            assert!((1..=MAX_SAMPLES).contains(&o.null_samples), "{o:?}");
            assert!(o.json.as_ref().is_none_or(|p| !p.as_os_str().is_empty()));
        }
        Ok(Command::Characterize(o)) => {
            assert!((1..=MAX_SAMPLES).contains(&o.samples), "{o:?}");
            assert!(o.json.as_ref().is_none_or(|p| !p.as_os_str().is_empty()));
        }
        Ok(Command::Probes(o)) => {
            assert!((1..=MAX_SAMPLES).contains(&o.samples), "{o:?}");
            assert!(o.rounds >= 1, "{o:?}");
            assert!(!o.modes.is_empty() && !o.crossings.is_empty(), "{o:?}");
            assert!(o.json.as_ref().is_none_or(|p| !p.as_os_str().is_empty()));
        }
        Ok(Command::Help | Command::Version | Command::ProbesHelp) => {}
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{e}");
            assert_one_line(&e.to_string(), "parse");
        }
    }
});
