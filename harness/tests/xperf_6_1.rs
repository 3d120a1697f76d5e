//! xperf on the patched Linux 6.1 (patches/linux-6.1, Debian's
//! linux-source-6.1), bare metal against VM, in one nested run: the same
//! checks as on 6.12 (support/xperf_checks.rs), L1 and L2 both built from
//! the 6.1 series.
//!
//! Needs qemu-system-x86 and the kernel build tools (`./test.sh` installs
//! them); XVMM_SKIP_HARNESS=1 skips. Console: target/harness/xperf-6.1.log;
//! the reports and the comparison: target/harness/xperf-6.1-{bm,vm,compare}.json.

use xvmm_kernel::LinuxVersion;

const VERSION: LinuxVersion = LinuxVersion::V6_1;
const GROUP: &str = "xperf-6.1";

#[path = "support/xperf_checks.rs"]
mod xperf_checks;
