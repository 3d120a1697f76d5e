//! `xperf characterize`: one command that measures what crossings, exits,
//! clocks and page faults cost on a Linux machine one cannot patch or run a
//! VMM on (a cloud instance), and what the machine is.
//!
//! The crossings are xperf's own measurement ([`crate::measure::run`], split
//! into u2k/k2u on a patched kernel, round trips otherwise); everything else
//! is added as metrics of the report's `characterize` block (see
//! [`xvmm_results::characterize`]). No root is needed; as root the kernel
//! log adds the kernel's TSC rate and hypervisor line. Libraries never print:
//! progress goes through [`Steps`], which the app draws.

pub mod facts;
mod groups;
pub mod options;
mod refclock;
pub mod skew;
pub mod timing;

use crate::error::Result;
use crate::measure;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use xvmm_results::{Characterization, Report};

pub use options::Options;

/// Where a long run is, for a person watching it.
pub trait Steps {
    /// Step `index` (0-based) of `total` begins; `what` names it.
    fn step(&self, index: usize, total: usize, what: &str);
    /// The run is over.
    fn finish(&self);
}

/// Nobody watching (tests, a guest's PID 1 without a terminal).
pub struct Unwatched;

impl Steps for Unwatched {
    fn step(&self, _index: usize, _total: usize, _what: &str) {}
    fn finish(&self) {}
}

/// What to measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Samples per timed metric and per crossing.
    pub samples: u64,
    /// CPU to pin to (default: the one xperf starts on).
    pub cpu: Option<u32>,
    /// Running in a guest whose VMM announced a results channel.
    pub vmm_channel: bool,
    /// The node's name, for the report (`--node-name`).
    pub node_name: Option<String>,
}

/// The stages of a run, in order, as [`Steps`] names them.
pub const STAGES: [&str; 9] = [
    "crossings (getppid, #PF first touch and refault)",
    "hypervisor (CPUID, DMI, kernel log)",
    "clock_gettime through the vDSO and as a system call",
    "rdtsc, rdtscp and cpuid",
    "pause loops",
    "TSC rate",
    "TSC skew between CPUs",
    "interrupt path (cross-CPU and timer wake-ups)",
    "machine and steal time",
];

/// Runs every measurement and returns the report with its `characterize` block.
pub fn run(config: &Config, steps: &dyn Steps) -> Result<Report> {
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let clock = Instant::now();
    let stat_before = groups::proc_stat();
    let step = |i: usize| steps.step(i, STAGES.len(), STAGES[i]);
    step(0);
    let mut report = measure::run(&crossing_config(config))?;
    let machine = report.machine.clone().unwrap_or_default();
    // What the crossings subtract for the user stamps: the null pair, or
    // its sweep's intercept where the two differ (README "Method").
    let null = report
        .stamp_costs
        .as_ref()
        .map_or(report.null_overhead.median, |c| c.user_cost());
    let n = usize::try_from(config.samples).unwrap_or(usize::MAX);
    let kernel_log = xvmm_guest::sys::kernel_log().map_err(|e| e.to_string());
    let mut metrics = Vec::new();
    step(1);
    metrics.extend(groups::hypervisor(&machine, &kernel_log));
    step(2);
    metrics.extend(groups::clocks(&machine, n, null));
    step(3);
    let cpuid = groups::cpuid(&machine, n, null);
    let cpuid_exit = cpuid.measured().map(|s| s.median);
    metrics.extend(groups::rdtsc(n, null, cpuid_exit));
    step(4);
    let hypervisor = !machine.hypervisor_signature.is_empty();
    let pause = groups::pause(config.samples, null, hypervisor, cpuid_exit);
    step(5);
    metrics.extend(groups::tsc_rate(&machine, &kernel_log));
    step(6);
    metrics.extend(groups::tsc_skew(config.samples));
    step(7);
    // The crossings' CPU (`measure::run` pins this thread to it).
    let cpu = match report.method.pinned_cpu {
        Some(cpu) => cpu,
        None => crate::affinity::pin(None)?,
    };
    let online = facts::parse_cpu_list(&facts::read_trimmed("/sys/devices/system/cpu/online"));
    metrics.extend(groups::interrupts(config.samples, cpu, &online));
    step(8);
    metrics.push(cpuid);
    metrics.push(pause);
    metrics.extend(groups::crossings(&report.crossings));
    metrics.extend(groups::machine(
        &machine,
        stat_before,
        report.method.pinned_cpu,
    ));
    steps.finish();
    report.characterize = Some(Characterization {
        started_unix: started,
        seconds: clock.elapsed().as_secs_f64(),
        hostname: facts::read_trimmed("/proc/sys/kernel/hostname"),
        node_name: config.node_name.clone().unwrap_or_default(),
        // SAFETY: geteuid has no arguments and cannot fail.
        privileged: unsafe { libc::geteuid() } == 0,
        metrics,
    });
    Ok(report)
}

/// xperf's crossing measurement at the characterisation's sample count:
/// a tenth of it as warm-up, ten times it (within 1000..=100000) as null
/// samples, in xperf's default number of rounds (so the figures carry their
/// per-round spread and confidence interval).
fn crossing_config(config: &Config) -> measure::Config {
    measure::Config {
        samples: config.samples,
        warmup: (config.samples / 10).max(1),
        null_samples: config.samples.saturating_mul(10).clamp(1000, 100_000),
        rounds: xvmm_results::xperf_args::DEFAULT_ROUNDS,
        cpu: config.cpu,
        raw: false,
        vmm_channel: config.vmm_channel,
        calibrate: 0,
        run_id: None,
        host_miss: 0,
        interrupt_path: false,
        channel: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use xvmm_results::characterize::GROUPS;

    struct Recorder(Mutex<Vec<(usize, usize)>>, Mutex<bool>);

    impl Steps for Recorder {
        fn step(&self, index: usize, total: usize, _what: &str) {
            self.0.lock().unwrap().push((index, total));
        }
        fn finish(&self) {
            *self.1.lock().unwrap() = true;
        }
    }

    #[test]
    fn a_small_run_fills_every_metric_and_reports_every_stage() {
        let config = Config {
            samples: 200,
            cpu: None,
            vmm_channel: false,
            node_name: Some("node-7".into()),
        };
        let steps = Recorder(Mutex::new(Vec::new()), Mutex::new(false));
        let report = run(&config, &steps).unwrap();
        let c = report.characterize.as_ref().unwrap();
        assert!(c.unfilled().is_empty(), "unfilled: {:?}", c.unfilled());
        assert_eq!(c.node_name, "node-7");
        assert!(c.metrics.iter().all(|m| GROUPS.contains(&m.group.as_str())));
        for name in [
            "cpuid-signature",
            "virt",
            "nested",
            "clocksource",
            "clock_gettime-vdso",
            "clock_gettime-syscall",
            "rdtsc",
            "rdtscp",
            "tsc-flags",
            "tsc-khz-measured",
            "cpuid",
            "pause",
            "getppid",
            "pf-first-touch",
            "pf-refault",
            "cpu",
            "kpti",
            "steal",
        ] {
            assert!(c.metric(name).is_some(), "no metric {name}");
        }
        assert_eq!(c.metric("cpuid").unwrap().measured().unwrap().count, 200);
        assert_eq!(report.crossings.len(), 3);
        let seen = steps.0.lock().unwrap().clone();
        let expected: Vec<(usize, usize)> = (0..STAGES.len()).map(|i| (i, STAGES.len())).collect();
        assert_eq!(seen, expected);
        assert!(*steps.1.lock().unwrap());
        assert!(c.started_unix > 1_600_000_000 && c.seconds > 0.0);
        // Pause loops say "no hypervisor" exactly when CPUID names none.
        let machine = report.machine.as_ref().unwrap();
        let pause = c.metric("pause").unwrap().value.clone().unwrap();
        assert_eq!(
            pause.starts_with("no hypervisor seen"),
            machine.hypervisor_signature.is_empty(),
            "{pause}"
        );
        // Privileged is running as root: the effective uid (the second
        // field of /proc/self/status's Uid line) is 0.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            .unwrap();
        assert_eq!(c.privileged, euid == "0", "euid {euid}");
    }

    #[test]
    fn crossing_config_scales_warmup_and_null_with_samples() {
        let c = |samples| {
            crossing_config(&Config {
                samples,
                cpu: Some(1),
                vmm_channel: true,
                node_name: None,
            })
        };
        let small = c(5);
        assert_eq!((small.warmup, small.null_samples), (1, 1000));
        let big = c(1_000_000);
        assert_eq!((big.warmup, big.null_samples), (100_000, 100_000));
        assert!(big.vmm_channel && big.cpu == Some(1) && !big.raw);
    }
}
