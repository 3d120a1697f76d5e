//! xperf on the patched Linux 6.12, bare metal against VM, in one nested
//! run (the checks: support/xperf_checks.rs, shared with xperf_6_1.rs).
//!
//! Needs qemu-system-x86 and the kernel build tools (`./test.sh` installs
//! them); XVMM_SKIP_HARNESS=1 skips. Console: target/harness/xperf.log; the
//! two reports and the comparison: target/harness/xperf-{bm,vm,compare}.json.

use xvmm_harness as harness;
use xvmm_kernel::LinuxVersion;
use xvmm_results::{Environment, Report};

const VERSION: LinuxVersion = LinuxVersion::V6_12;
const GROUP: &str = "xperf";

#[path = "support/xperf_checks.rs"]
mod xperf_checks;

#[test]
fn the_report_is_the_whole_of_stdout() {
    let report = Report::new(
        "t".into(),
        Environment::LinuxVm,
        Default::default(),
        xvmm_results::Method::standard(1, 2),
    );
    let json = report.to_json_pretty();
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(harness::report_from_stdout(&lines).unwrap(), report);
    let mut polluted = lines.clone();
    polluted.insert(3, "a console line");
    assert!(
        harness::report_from_stdout(&polluted).is_err(),
        "anything else on stdout is a failure"
    );
    assert!(harness::report_from_stdout(&[]).is_err());
}
