//! The guest side of the results channel: `xvmm.results=GPA,SIZE` found in
//! a kernel command line (`xvmm_guest::channel::parse_results_param`).
//! Accepted regions are page aligned, within the channel's size and the
//! physical address space; errors are one terminal-safe line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::assert_one_line;
use xvmm_guest::channel::parse_results_param;
use xvmm_results::channel::RESULTS_SIZE;

fuzz_target!(|data: &[u8]| {
    let cmdline = String::from_utf8_lossy(data);
    match parse_results_param(&cmdline) {
        Ok(Some(r)) => {
            assert_eq!(r.gpa % 4096, 0, "{r:?}");
            assert!((1..=RESULTS_SIZE).contains(&r.size), "{r:?}");
            assert!(r
                .gpa
                .checked_add(r.size)
                .is_some_and(|end| end <= i64::MAX as u64));
        }
        Ok(None) => assert!(!cmdline
            .split_whitespace()
            .any(|w| w.starts_with("xvmm.results="))),
        Err(e) => assert_one_line(&e.to_string(), "parse_results_param"),
    }
});
