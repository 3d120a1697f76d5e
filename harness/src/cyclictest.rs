//! cyclictest (Debian's rt-tests), the peer of `xperf characterize`'s
//! `timer-wakeup`: how late a `clock_nanosleep(TIMER_ABSTIME)` on
//! CLOCK_MONOTONIC wakes up, the latency cyclictest measures. Run in L1
//! through the loader like QEMU ([`crate::append_dynamic`]).

use crate::l1;

/// Where cyclictest is on the host (rt-tests) and in L1.
pub const HOST_PATH: &str = "/usr/bin/cyclictest";
pub const IN_L1: &str = "/usr/bin/cyclictest";

/// One thread pinned to CPU 0, woken every `interval_us` for `loops`
/// loops, at its default priority (SCHED_OTHER, as xperf runs: no
/// real-time priority) and without tuning the system (no
/// `/dev/cpu_dma_latency`), quiet, with a histogram in 1 µs bins up to
/// `max_us` (the overflows counted above it).
pub fn argv(interval_us: u32, loops: u64, max_us: u32) -> Vec<String> {
    let mut argv: Vec<String> = [l1::LOADER, "--library-path", l1::LIB_DIR, IN_L1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend([
        "-t1".to_string(),
        "-a0".to_string(),
        format!("-i{interval_us}"),
        format!("-l{loops}"),
        "-q".to_string(),
        format!("-h{max_us}"),
        "--default-system".to_string(),
    ]);
    argv
}

/// What cyclictest's histogram says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latencies {
    /// Wake-ups counted (`# Total`).
    pub total: u64,
    /// Above the histogram's last bin.
    pub overflows: u64,
    /// The median latency in µs, from the histogram (an overflow counts as
    /// above every bin).
    pub median_us: u64,
    pub min_us: u64,
    pub max_us: u64,
}

/// Reads `NNNNNN COUNT` bins and the `# Total`, `# Min Latencies`, `# Max
/// Latencies` and `# Histogram Overflows` lines; `None` without a total or
/// with a median past the histogram.
pub fn parse(lines: &[&str]) -> Option<Latencies> {
    let mut bins: Vec<(u64, u64)> = Vec::new();
    let field = |line: &str, name: &str| -> Option<u64> {
        line.strip_prefix(name)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (mut total, mut overflows, mut min_us, mut max_us) = (None, 0, 0, 0);
    for line in lines {
        let line = line.trim();
        if let Some(t) = field(line, "# Total:") {
            total = Some(t);
        } else if let Some(v) = field(line, "# Min Latencies:") {
            min_us = v;
        } else if let Some(v) = field(line, "# Max Latencies:") {
            max_us = v;
        } else if let Some(v) = field(line, "# Histogram Overflows:") {
            overflows = v;
        } else if let Some((us, count)) = line.split_once(' ') {
            if let (Ok(us), Ok(count)) = (us.parse::<u64>(), count.trim().parse::<u64>()) {
                bins.push((us, count));
            }
        }
    }
    let total = total?;
    let half = total.div_ceil(2);
    let mut seen = 0u64;
    let median_us = bins.iter().find_map(|&(us, count)| {
        seen = seen.saturating_add(count);
        (seen >= half && count > 0).then_some(us)
    })?;
    Some(Latencies {
        total,
        overflows,
        median_us,
        min_us,
        max_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_gives_the_median_and_the_summary_its_bounds() {
        let out = [
            "WARN: not setting cpu_dma_latency from cyclictest",
            "# Histogram",
            "000016 000000",
            "000017 000002",
            "000018 000001",
            "000019 000003",
            "000020 000000",
            "# Total: 000000007",
            "# Min Latencies: 00017",
            "# Avg Latencies: 00018",
            "# Max Latencies: 00802",
            "# Histogram Overflows: 00001",
        ];
        let l = parse(&out).unwrap();
        assert_eq!(l.total, 7);
        assert_eq!(l.median_us, 19, "the 4th of 7 wake-ups");
        assert_eq!((l.min_us, l.max_us, l.overflows), (17, 802, 1));
    }

    #[test]
    fn no_total_or_a_median_past_the_histogram_is_none() {
        assert_eq!(parse(&["000017 000002"]), None);
        // Most wake-ups overflowed: the median is not in the histogram.
        let out = [
            "000017 000001",
            "# Total: 000000005",
            "# Histogram Overflows: 00004",
        ];
        assert_eq!(parse(&out), None);
        assert_eq!(parse(&["garbage", "# Total: x"]), None);
    }

    #[test]
    fn the_command_pins_one_thread_without_tuning_the_system() {
        let a = argv(200, 2000, 2000);
        assert_eq!(&a[..4], [l1::LOADER, "--library-path", l1::LIB_DIR, IN_L1]);
        for flag in [
            "-t1",
            "-a0",
            "-i200",
            "-l2000",
            "-q",
            "-h2000",
            "--default-system",
        ] {
            assert!(a.iter().any(|x| x == flag), "{flag}: {a:?}");
        }
        assert!(
            !a.iter().any(|x| x.starts_with("-p")),
            "no real-time priority"
        );
    }
}
