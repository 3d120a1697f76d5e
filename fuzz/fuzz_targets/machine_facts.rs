//! What `xperf characterize`, `xperf` and `xvmm machine` read of a machine:
//! /proc/cpuinfo, /proc/stat, /proc/meminfo, sysfs CPU lists and mode files,
//! the kernel log. Inside a guest these come from a kernel the host does not
//! control, so any bytes. Input: texts separated by NUL bytes, each given to
//! every parser; the first two also as the /proc/stat readings before and
//! after a run (all CPUs' and cpu0's, cpu1's). Results stay within their
//! bounds and the steal-time text is one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xperf::characterize::facts;
use xvmm_fuzz::assert_one_line;
use xvmm_results::machine;

fn parse_all(text: &str) {
    assert!(facts::parse_cpu_list(text).len() <= facts::MAX_CPUS);
    let (present, absent) = facts::tsc_flags(text);
    assert_eq!(present.len() + absent.len(), facts::TSC_FLAGS.len());
    if let Some(value) = facts::cpuinfo_field(text, "model name") {
        assert_eq!(value, value.trim());
    }
    let m = machine::parse_cpuinfo(text);
    assert!(m.flags.iter().all(|f| text.contains(f.as_str())), "{m:?}");
    if let Some(bytes) = machine::meminfo_bytes(text, "MemTotal") {
        assert_eq!(bytes % 1024, 0);
    }
    assert!(text.contains(machine::selected_mode(text).as_str()));
    if let Some((khz, line)) = facts::kernel_log_tsc_khz(text) {
        assert!(khz > 0, "{khz} from {line:?}");
        assert!(
            text.contains(line.as_str()) && !line.contains('\n'),
            "{line:?}"
        );
    }
    if let Some(name) = facts::kernel_log_hypervisor(text) {
        assert!(!name.contains('\n'), "{name:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parts: Vec<&str> = text.split('\0').collect();
    for part in &parts {
        parse_all(part);
    }
    if let (Some(before), Some(after)) = (parts.first(), parts.get(1)) {
        for cpu in [None, Some(0), Some(1)] {
            let (Ok(line) | Err(line)) = facts::steal_report(before, after, cpu);
            assert_one_line(&line, "steal_report");
        }
    }
    let stat = |i: usize| parts.get(i).and_then(|t| facts::parse_proc_stat(t));
    if let Some(before) = stat(0) {
        assert!(before.steal <= before.total, "{before:?}");
        if let Some(after) = stat(1) {
            let (Ok(line) | Err(line)) = facts::steal_text(before, after);
            assert_one_line(&line, "steal_text");
        }
    }
});
