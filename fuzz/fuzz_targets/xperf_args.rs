//! xperf's command line (`xperf::args::parse`, `characterize`'s and
//! `probes`' options included): often PID 1 with arguments from the kernel command line, so
//! any bytes. Input: the arguments,
//! separated by NUL bytes. Accepted options stay in range; errors are one
//! terminal-safe line with the usage status. The crossing run's options
//! (`xvmm_results::xperf_args::XperfArgs`, which xvmm writes the built-in
//! xperf's arguments with) read back from their own `to_argv` unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xperf::args::{parse, Command, MAX_SAMPLES};
use xvmm_fuzz::{assert_one_line, split_args};
use xvmm_results::xperf_args::{Parsed, XperfArgs};

fuzz_target!(|data: &[u8]| {
    if let Ok(Parsed::Run(a)) = XperfArgs::parse(split_args(data)) {
        assert_eq!(a.out_of_range(), None, "{a:?}");
        assert_eq!(XperfArgs::parse(a.to_argv()), Ok(Parsed::Run(a.clone())));
    }
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
        Ok(Command::Workload(o)) => {
            assert!(!o.command.is_empty(), "{o:?}");
            assert!(o.json.as_ref().is_none_or(|p| !p.as_os_str().is_empty()));
            assert!(o.timeout.is_none_or(|t| t.as_secs() >= 1), "{o:?}");
        }
        Ok(Command::Help | Command::Version | Command::ProbesHelp | Command::WorkloadHelp) => {}
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "{e}");
            assert_one_line(&e.to_string(), "parse");
        }
    }
});
