//! The metrics of each group, taken and read here; what they mean is decided
//! by the pure functions of [`super::facts`] and [`super::timing`].

use super::facts::{self, Dmi, RateClock, Reference};
use super::refclock;
use super::skew::{self, Skew};
use super::timing;
use crate::interrupt_path::wakeup;
use crate::interrupt_path::{shootdown, ticks};
use crate::stamp;
use std::path::Path;
use std::time::Duration;
use xvmm_results::{names, Crossing, Machine, Metric, Status};

const HYPERVISOR: &str = "hypervisor";
const TIME: &str = "time";
const EXITS: &str = "exits";
const CROSSINGS: &str = "crossings";
const MACHINE: &str = "machine";
const INTERRUPTS: &str = "interrupts";

/// Unit of timed metrics: TSC ticks with the null overhead subtracted.
const TICKS: &str = "ticks";
/// Calibration windows for the measured TSC rate.
const RATE_WINDOWS: usize = 10;
const RATE_WINDOW: Duration = Duration::from_millis(100);
/// At most this many CPU pairs are ping-ponged ([`facts::skew_pairs`]).
const MAX_SKEW_PAIRS: usize = 32;
const SKEW_ROUNDS: u64 = 2000;
const SKEW_LIMIT: Duration = Duration::from_secs(20);
/// Bursts of pauses (each [`timing::CHUNKS_PER_BURST`] chunks).
/// Cross-CPU wake-up round trips at most, and how long they may take.
const MAX_WAKEUPS: u64 = 10_000;
const WAKEUP_LIMIT: Duration = Duration::from_secs(30);
/// Timer wake-ups at most, each a sleep of this long (cyclictest's default
/// interval is 1 ms; shorter keeps the stage under a second).
const MAX_TIMER_WAKEUPS: u64 = 1000;
use crate::interrupt_path::wakeup::TIMER_PERIOD;

const PAUSE_BURSTS: u64 = 100;
/// Pauses per run that calibrates the control loop: far below Intel's PLE
/// window (4096 cycles) and AMD's pause filter count.
const SHORT_PAUSES: u32 = 16;
const SHORT_RUNS: usize = 64;

/// Why a root-only figure is missing, or the kernel log.
pub type KernelLog = Result<String, String>;

fn root_reason(error: &str) -> String {
    format!("the kernel log is needed and could not be read ({error}); run as root")
}

/// CPUID leaf `leaf`, read once outside any measured region.
fn cpuid_leaf(leaf: u32) -> std::arch::x86_64::CpuidResult {
    #[allow(unused_unsafe)] // a safe fn on newer toolchains
    // SAFETY: cpuid exists on every x86-64 CPU; unknown leaves return data.
    unsafe {
        std::arch::x86_64::__cpuid(leaf)
    }
}

fn hypervisor_bit() -> bool {
    hypervisor_present(cpuid_leaf(1).ecx)
}

/// CPUID.1:ECX bit 31: a hypervisor is present.
fn hypervisor_present(ecx: u32) -> bool {
    ecx & (1 << 31) != 0
}

/// Unrecorded samples before `n` recorded ones: a tenth, at least one.
fn warmup(n: usize) -> usize {
    (n / 10).max(1)
}

/// CPUID signature, DMI, the verdict, nested, the kernel's own word.
pub fn hypervisor(machine: &Machine, log: &KernelLog) -> Vec<Metric> {
    let bit = hypervisor_bit();
    let signature = bit.then(|| machine.hypervisor_signature.clone());
    let signature_metric = match &signature {
        None => Metric::fact(
            HYPERVISOR,
            "cpuid-signature",
            "none: CPUID.1:ECX bit 31 (hypervisor present) is clear",
        ),
        Some(sig) => Metric::fact(
            HYPERVISOR,
            "cpuid-signature",
            format!(
                "{sig:?} (CPUID 0x40000000; highest hypervisor leaf {:#x})",
                cpuid_leaf(0x4000_0000).eax
            ),
        ),
    };
    let dmi = Dmi::read(Path::new("/sys/class/dmi/id"));
    let dmi_metric = match &dmi {
        Some(d) => Metric::fact(HYPERVISOR, "dmi", d.describe()),
        None => Metric::missing(
            HYPERVISOR,
            "dmi",
            "no /sys/class/dmi/id: the firmware gave no SMBIOS table, or the kernel lacks CONFIG_DMIID",
        ),
    };
    let sys_hypervisor = facts::read_trimmed("/sys/hypervisor/type");
    let (verdict, source) = facts::detect_virt(signature.as_deref(), dmi.as_ref(), &sys_hypervisor);
    let dev_kvm = Path::new("/dev/kvm").exists();
    let kernel_says = match log {
        Err(e) => Metric::missing(HYPERVISOR, "kernel-hypervisor", root_reason(e)),
        Ok(text) => Metric::fact(
            HYPERVISOR,
            "kernel-hypervisor",
            facts::kernel_log_hypervisor(text).unwrap_or_else(|| {
                "no \"Hypervisor detected\" line in the kernel log (bare metal, or the line left the ring buffer)".into()
            }),
        ),
    };
    vec![
        signature_metric,
        dmi_metric,
        Metric::fact(
            HYPERVISOR,
            "virt",
            format!("{verdict} (from {source}; as systemd-detect-virt --vm)"),
        ),
        Metric::fact(
            HYPERVISOR,
            "nested",
            facts::nested_text(bit, &machine.flags, &machine.kvm_module, dev_kvm),
        ),
        kernel_says,
    ]
}

/// Clocksources and clock_gettime through the vDSO against the system call.
pub fn clocks(machine: &Machine, n: usize, null: u64) -> Vec<Metric> {
    let dir = "/sys/devices/system/clocksource/clocksource0";
    let current = facts::read_trimmed(format!("{dir}/current_clocksource"));
    let available = facts::read_trimmed(format!("{dir}/available_clocksource"));
    let clocksource = if current.is_empty() {
        Metric::missing(TIME, "clocksource", format!("{dir} is not readable"))
    } else {
        Metric::fact(
            TIME,
            "clocksource",
            format!("{current} (available: {available})"),
        )
    };
    let warmup = warmup(n);
    let libc_samples = timing::sample(n, warmup, null, timing::clock_gettime_libc);
    let sys_samples = timing::sample(n, warmup, null, timing::clock_gettime_syscall);
    let mut vdso = Metric::from_samples(TIME, names::CLOCK_GETTIME_VDSO, TICKS, &libc_samples);
    let syscall = Metric::from_samples(TIME, names::CLOCK_GETTIME_SYSCALL, TICKS, &sys_samples);
    if let (Some(v), Some(s)) = (vdso.measured(), syscall.measured()) {
        let verdict = timing::vdso_verdict(
            v.median,
            s.median,
            timing::vdso_mapped(),
            &machine.clocksource,
        );
        vdso = vdso.with_value(format!("CLOCK_MONOTONIC through libc: {verdict}"));
    }
    vec![clocksource, vdso, syscall]
}

/// The cpuid round trip (an exit under any hypervisor).
pub fn cpuid(machine: &Machine, n: usize, null: u64) -> Metric {
    let samples = timing::sample(n, warmup(n), null, || stamp::cpuid_pair(0));
    let m = Metric::from_samples(EXITS, names::CPUID, TICKS, &samples);
    match m.measured().map(|s| s.median) {
        Some(median) => {
            let hypervisor = hypervisor_name(hypervisor_bit(), &machine.hypervisor_signature);
            m.with_value(timing::cpuid_verdict(median, hypervisor))
        }
        None => m,
    }
}

/// The hypervisor as [`timing::cpuid_verdict`] names it: empty without the
/// CPUID bit, "unnamed" with the bit but no signature.
fn hypervisor_name(bit: bool, signature: &str) -> &str {
    match (bit, signature) {
        (false, _) => "",
        (true, "") => "unnamed",
        (true, sig) => sig,
    }
}

/// rdtsc and rdtscp: their cost, and whether they trap.
pub fn rdtsc(n: usize, null: u64, cpuid_exit: Option<u64>) -> Vec<Metric> {
    let warmup = warmup(n);
    let allowed = timing::tsc_allowed_text();
    let mut out = Vec::new();
    for (name, pair) in [
        ("rdtsc", stamp::rdtsc_pair as fn() -> (u64, u64)),
        ("rdtscp", stamp::rdtscp_pair),
    ] {
        let samples = timing::sample(n, warmup, null, pair);
        let m = Metric::from_samples(TIME, name, TICKS, &samples);
        let verdict = m
            .measured()
            .map(|s| format!("{}; {allowed}", timing::trap_verdict(s.median, cpuid_exit)));
        out.push(match verdict {
            Some(v) => m.with_value(v),
            None => m,
        });
    }
    out
}

/// Pause loops: ticks per chunk of pauses, and whether spinning exits
/// (against control loops of the same native length without pause). A
/// spike is a chunk over its burst's median by half a cpuid exit (about
/// what any exit costs), or 1500 ticks when that is unknown.
pub fn pause(samples: u64, null: u64, hypervisor: bool, cpuid_exit: Option<u64>) -> Metric {
    let bursts = PAUSE_BURSTS.min(samples.max(1));
    let chunk = timing::PAUSES_PER_CHUNK;
    // One unrecorded burst (faults in code and stack).
    std::hint::black_box(timing::burst(null, || stamp::pause_pair(chunk)));
    let spins = control_spins(null);
    let extra = spike_extra(cpuid_exit);
    let measured: Vec<(Vec<u64>, Vec<u64>)> = (0..bursts)
        .map(|_| {
            let burst = timing::burst(null, || stamp::pause_pair(chunk));
            let control = timing::burst(null, || stamp::spin_pair(spins));
            (burst, control)
        })
        .collect();
    let chunks: Vec<u64> = measured
        .iter()
        .flat_map(|(p, _)| p.iter().copied())
        .collect();
    let unit = format!("ticks/{chunk} pauses");
    let m = Metric::from_samples(EXITS, "pause", &unit, &chunks);
    let verdict = timing::pause_verdict(&timing::PauseLoops::from_bursts(&measured, extra));
    if hypervisor {
        m.with_value(verdict)
    } else {
        m.with_value(format!("no hypervisor seen, nothing to exit to; {verdict}"))
    }
}

/// Ticks over a burst's median that make a chunk a spike: half a cpuid exit
/// (at least 100), or 1500 when the exit is unknown.
fn spike_extra(cpuid_exit: Option<u64>) -> u64 {
    cpuid_exit.map_or(1500, |e| (e / 2).max(100))
}

/// The control loop's length: a chunk of pauses' native cost, from runs of
/// [`SHORT_PAUSES`] pauses each after a `dec; jnz` gap (past any pause-loop
/// detector's gap, so they never add up to a spinning loop that exits),
/// and the ticks per control iteration.
fn control_spins(null: u64) -> u32 {
    const GAP: u32 = 4096;
    let short: Vec<u64> = (0..SHORT_RUNS)
        .map(|_| {
            std::hint::black_box(stamp::spin_pair(GAP));
            let (open, close) = stamp::pause_pair(SHORT_PAUSES);
            close.saturating_sub(open).saturating_sub(null)
        })
        .collect();
    let gap = timing::median(&timing::burst(null, || stamp::spin_pair(GAP)));
    timing::control_spins(timing::median(&short), SHORT_PAUSES, gap, GAP)
}

/// TSC flags, the rate CPUID (and, as root, the kernel) reports, and the rate
/// measured against a clock ([`facts::rate_clock`]: CLOCK_MONOTONIC_RAW
/// where the clocksource is not TSC-based, CLOCK_MONOTONIC otherwise).
pub fn tsc_rate(machine: &Machine, log: &KernelLog) -> Vec<Metric> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = if cpuinfo.is_empty() {
        Metric::missing(TIME, "tsc-flags", "/proc/cpuinfo is not readable")
    } else {
        let (has, lacks) = facts::tsc_flags(&cpuinfo);
        Metric::fact(
            TIME,
            "tsc-flags",
            format!("has: {}; lacks: {}", words(&has), words(&lacks)),
        )
    };
    let reported = if machine.tsc_khz_source.starts_with("cpuid") {
        Some(machine.tsc_khz)
    } else {
        None
    };
    let reported_metric = match reported {
        Some(khz) => Metric::fact(
            TIME,
            "tsc-khz-reported",
            format!("{khz} kHz from {}", machine.tsc_khz_source),
        )
        .with_number(khz as f64, "kHz"),
        None => Metric::missing(
            TIME,
            "tsc-khz-reported",
            "CPUID gives no TSC rate (neither leaf 0x15 nor 0x40000010)",
        ),
    };
    let kernel = match log {
        Err(e) => Err(root_reason(e)),
        Ok(text) => facts::kernel_log_tsc_khz(text).ok_or_else(|| {
            "no \"tsc: Detected\" or \"Refined TSC\" line in the kernel log".to_string()
        }),
    };
    let kernel_metric = match &kernel {
        Ok((khz, line)) => Metric::fact(TIME, "tsc-khz-kernel", format!("{khz} kHz ({line})"))
            .with_number(*khz as f64, "kHz"),
        Err(reason) => Metric::missing(TIME, "tsc-khz-kernel", reason.clone()),
    };
    let clock = facts::rate_clock(Path::new("/sys/devices/system/clocksource/clocksource0"));
    let (rates, clock) = rates_against(clock);
    let measured = Metric::from_samples(TIME, "tsc-khz-measured", "kHz", &rates);
    let against = reported
        .map(|k| (k, "CPUID"))
        .or_else(|| kernel.as_ref().ok().map(|(k, _)| (*k, "the kernel")));
    let measured = match measured.measured().map(|s| s.median) {
        Some(m) => {
            let value = rate_against(m, against, &clock);
            measured.with_value(value)
        }
        None => measured,
    };
    vec![flags, reported_metric, kernel_metric, measured]
}

/// [`RATE_WINDOWS`] rates measured against `clock`; a counter read
/// directly that cannot be opened leaves no independent clock, and the
/// clock says why.
fn rates_against(clock: RateClock) -> (Vec<u64>, RateClock) {
    let counter: Result<Box<dyn refclock::Counter>, String> = match clock.reference {
        Reference::Clock(id) => {
            let rates = (0..RATE_WINDOWS)
                .map(|_| xvmm_host::tsc::calibrate_khz_on(id, RATE_WINDOW))
                .collect();
            return (rates, clock);
        }
        Reference::Hpet => refclock::Hpet::open().map(|c| Box::new(c) as _),
        Reference::AcpiPm => refclock::PmTimer::open().map(|c| Box::new(c) as _),
        Reference::Kernel => Err(String::new()),
    };
    match counter {
        Ok(c) => {
            let rates = (0..RATE_WINDOWS)
                .map(|_| refclock::calibrate_khz(c.as_ref(), RATE_WINDOW))
                .collect();
            (rates, clock)
        }
        Err(why) => {
            let clock = if why.is_empty() {
                clock
            } else {
                RateClock::kernel(&format!("{} cannot be read ({why})", clock.text))
            };
            let rates = (0..RATE_WINDOWS)
                .map(|_| xvmm_host::tsc::calibrate_khz_on(libc::CLOCK_MONOTONIC, RATE_WINDOW))
                .collect();
            (rates, clock)
        }
    }
}

/// The measured rate `khz` against a reported one (`against`: kHz and who
/// reports it), in ppm, measured against `clock`; no ppm figure where the
/// clock is not independent of the TSC (it would be the kernel's own
/// calibration against itself).
fn rate_against(khz: u64, against: Option<(u64, &str)>, clock: &RateClock) -> String {
    let ms = RATE_WINDOW.as_millis();
    if !clock.independent() {
        return format!(
            "{} ({RATE_WINDOWS} windows of {ms} ms): not compared with the reported rate",
            clock.text
        );
    }
    let windows = format!("{RATE_WINDOWS} windows of {ms} ms against {}", clock.text);
    match against {
        Some((r, from)) if r > 0 => format!(
            "{:+.0} ppm against {from}'s {r} kHz ({windows})",
            (khz as f64 - r as f64) * 1e6 / r as f64
        ),
        _ => format!("no reported rate to compare with ({windows})"),
    }
}

fn words(list: &[&str]) -> String {
    if list.is_empty() {
        "none".into()
    } else {
        list.join(" ")
    }
}

/// The interrupt path ([`wakeup`]): a thread on `cpu` waking one on
/// another of the `online` CPUs and woken back, and how late a timer wakes
/// `cpu`'s.
pub fn interrupts(samples: u64, cpu: u32, online: &[u32]) -> Vec<Metric> {
    let others: Vec<u32> = online.iter().copied().filter(|&c| c != cpu).collect();
    let name = names::WAKEUP_CROSS_CPU;
    let rounds = xvmm_results::num::usize_from(samples.clamp(1, MAX_WAKEUPS));
    let cross = if others.is_empty() {
        Metric::missing(
            INTERRUPTS,
            name,
            format!("only cpu{cpu} is online: no other CPU to wake"),
        )
    } else {
        match wakeup::cross_cpu(cpu, &others, rounds, WAKEUP_LIMIT) {
            Ok((other, trips)) => {
                Metric::from_samples(INTERRUPTS, name, "ticks/2 wake-ups", &ticks(&trips))
                    .with_value(format!(
                    "futex ping-pong between cpu{cpu} and cpu{other}: a sample is two wake-ups of \
                     a thread asleep on the other CPU (an IPI and a schedule each), timed on \
                     cpu{cpu}'s TSC"
                ))
            }
            Err(why) => Metric::missing(INTERRUPTS, name, why),
        }
    };
    let sleeps = xvmm_results::num::usize_from(samples.clamp(1, MAX_TIMER_WAKEUPS));
    let late = wakeup::timer_lateness(sleeps, TIMER_PERIOD);
    let timer =
        Metric::from_samples(INTERRUPTS, names::TIMER_WAKEUP, "ns", &late).with_value(format!(
            "how late clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) returns on cpu{cpu}, {} us \
         ahead each time, timer slack 1 ns (cyclictest's latency without its real-time \
         priority)",
            TIMER_PERIOD.as_micros()
        ));
    let mut out = vec![cross, timer];
    out.extend(shootdown::metrics(samples, cpu, &others));
    out
}

/// TSC skew between pairs of online CPUs chosen from the topology
/// ([`facts::skew_pairs`]: every package and NUMA node crossed).
pub fn tsc_skew(samples: u64) -> Vec<Metric> {
    let cpus = facts::parse_cpu_list(&facts::read_trimmed("/sys/devices/system/cpu/online"));
    let Some(&first) = cpus.first() else {
        return vec![Metric::missing(
            TIME,
            "tsc-skew",
            "/sys/devices/system/cpu/online is not readable",
        )];
    };
    let pairs = facts::skew_pairs(&facts::cpu_places(Path::new("/sys"), &cpus), MAX_SKEW_PAIRS);
    if pairs.is_empty() {
        return vec![Metric::missing(
            TIME,
            "tsc-skew",
            format!("only cpu{first} is online: no pair to compare"),
        )];
    }
    let rounds = SKEW_ROUNDS.min(samples.max(1));
    pairs
        .iter()
        .map(|&(a, b)| {
            let name = format!("tsc-skew cpu{a}-cpu{b}");
            match skew::ping_pong(a, b, rounds, SKEW_LIMIT) {
                Err(reason) => Metric::missing(TIME, &name, reason),
                Ok(rounds) => match Skew::from_rounds(&rounds) {
                    None => Metric::missing(TIME, &name, "no rounds"),
                    Some(s) => Metric::from_samples(TIME, &name, TICKS, &s.estimates)
                        .with_value(s.describe(a, b)),
                },
            }
        })
        .collect()
}

/// Each crossing's round trip, u2k and k2u (null-corrected), or why not.
pub fn crossings(crossings: &[Crossing]) -> Vec<Metric> {
    let mut out = Vec::new();
    for c in crossings {
        let parts = [("", &c.round_trip), ("-u2k", &c.u2k), ("-k2u", &c.k2u)];
        for (suffix, interval) in parts {
            let name = format!("{}{suffix}", c.name);
            let stats = interval
                .as_ref()
                .map(|i| i.corrected.clone())
                .filter(|s| s.count > 0);
            out.push(match (stats, &c.status) {
                (Some(s), _) => Metric::from_stats(CROSSINGS, &name, TICKS, s),
                (None, Status::Measured) => Metric::missing(CROSSINGS, &name, "no valid samples"),
                (None, status) => {
                    Metric::missing(CROSSINGS, &name, status.why_not().unwrap_or_default())
                }
            });
        }
    }
    out
}

/// /proc/stat now, or why not.
pub fn proc_stat() -> Result<String, String> {
    std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))
}

/// `metric` with its figure in `unit`, where there is one.
fn with_number_of(metric: Metric, number: Option<f64>, unit: &str) -> Metric {
    match number {
        Some(n) => metric.with_number(n, unit),
        None => metric,
    }
}

/// CPU, microcode, CPUs, memory, kernel, mitigations, KPTI, steal time (of
/// the `measured` CPU and of all).
pub fn machine(
    m: &Machine,
    stat_before: Result<String, String>,
    measured: Option<u32>,
) -> Vec<Metric> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let fact_or =
        |name: &str, value: Option<String>, reason: &str| match value.filter(|v| !v.is_empty()) {
            Some(v) => Metric::fact(MACHINE, name, v),
            None => Metric::missing(MACHINE, name, reason),
        };
    let cpu = (!m.cpu_model.is_empty()).then(|| {
        format!(
            "{} {} (family/model/stepping {})",
            m.cpu_vendor, m.cpu_model, m.cpu_signature
        )
    });
    let online = facts::read_trimmed("/sys/devices/system/cpu/online");
    let possible = facts::read_trimmed("/sys/devices/system/cpu/possible");
    let cpus = format!(
        "{} online ({online}), {} possible; {} in /proc/cpuinfo",
        facts::parse_cpu_list(&online).len(),
        facts::parse_cpu_list(&possible).len(),
        m.logical_cpus
    );
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_bytes = xvmm_results::machine::meminfo_bytes(&meminfo, "MemTotal");
    let memory =
        memory_bytes.map(|b| format!("{:.2} GiB (MemTotal)", b as f64 / (1u64 << 30) as f64));
    let version = facts::read_trimmed("/proc/sys/kernel/version");
    let kernel = (!m.kernel_release.is_empty()).then(|| format!("{} {version}", m.kernel_release));
    let steal = match (stat_before, proc_stat()) {
        (Ok(a), Ok(b)) => {
            facts::steal_report(&a, &b, measured).map(|text| (text, facts::steal_ratio(&a, &b)))
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    vec![
        fact_or("cpu", cpu, "/proc/cpuinfo names no CPU model"),
        fact_or(
            "microcode",
            facts::cpuinfo_field(&cpuinfo, "microcode"),
            "/proc/cpuinfo has no microcode field",
        ),
        Metric::fact(MACHINE, "cpus", cpus),
        with_number_of(
            fact_or("memory", memory, "/proc/meminfo has no MemTotal"),
            memory_bytes.map(|b| b as f64),
            "bytes",
        ),
        fact_or(
            "kernel",
            kernel,
            "/proc/sys/kernel/osrelease is not readable",
        ),
        mitigations(m),
        fact_or(
            "kpti",
            m.kpti().map(|on| {
                if on {
                    "on".to_string()
                } else {
                    "off".to_string()
                }
            }),
            "neither the meltdown vulnerability file nor the CPU flags say",
        ),
        match steal {
            Ok((v, ratio)) => with_number_of(Metric::fact(MACHINE, "steal", v), ratio, "ratio"),
            Err(e) => Metric::missing(MACHINE, "steal", e),
        },
    ]
}

/// The mitigations in effect (every vulnerability that is not "Not affected")
/// and a `mitigations=` switch on the kernel command line.
fn mitigations(m: &Machine) -> Metric {
    if m.vulnerabilities.is_empty() {
        return Metric::missing(
            MACHINE,
            "mitigations",
            "/sys/devices/system/cpu/vulnerabilities is empty or absent",
        );
    }
    let affected: Vec<String> = m
        .vulnerabilities
        .iter()
        .filter(|(_, v)| *v != "Not affected")
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let cmdline = facts::read_trimmed("/proc/cmdline");
    let switch = cmdline
        .split_whitespace()
        .find(|w| w.starts_with("mitigations="))
        .map(|w| format!(" (kernel command line: {w})"))
        .unwrap_or_default();
    let value = if affected.is_empty() {
        format!(
            "none needed: all {} vulnerabilities \"Not affected\"{switch}",
            m.vulnerabilities.len()
        )
    } else {
        format!("{}{switch}", affected.join("; "))
    };
    Metric::fact(MACHINE, "mitigations", value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::Interval;

    #[test]
    fn crossings_give_three_metrics_each_with_stats_or_the_reason() {
        let mut split = Crossing::unsupported("getppid", 3, String::new());
        split.status = Status::Measured;
        split.round_trip = Some(Interval::from_raw(&[500, 600, 700], 100));
        split.u2k = Some(Interval::from_raw(&[200, 210, 220], 100));
        split.k2u = Some(Interval::default());
        let mut rt_only =
            Crossing::from_round_trips("pf-refault", 2, &[900, 1000], 50, "no hooks".into());
        // An empty u2k still says why the crossing has no split.
        rt_only.u2k = Some(Interval::default());
        let gone = Crossing::unsupported("pf-first-touch", 2, "madvise missing".into());
        let m = crossings(&[split, rt_only, gone]);
        let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names.len(), 9);
        assert_eq!(&names[..3], ["getppid", "getppid-u2k", "getppid-k2u"]);
        assert_eq!(m[0].measured().unwrap().median, 500);
        assert_eq!(m[1].measured().unwrap().median, 110);
        assert_eq!(m[2].reason.as_deref(), Some("no valid samples"));
        assert_eq!(m[3].measured().unwrap().median, 850);
        assert_eq!(m[4].reason.as_deref(), Some("round trip only: no hooks"));
        assert_eq!(m[5].reason.as_deref(), Some("round trip only: no hooks"));
        assert_eq!(m[6].reason.as_deref(), Some("unsupported: madvise missing"));
        assert!(m.iter().all(|m| m.is_filled() && m.group == CROSSINGS));
    }

    #[test]
    fn mitigations_list_only_what_is_affected() {
        let mut m = Machine::default();
        assert!(mitigations(&m).reason.is_some());
        m.vulnerabilities
            .insert("meltdown".into(), "Not affected".into());
        assert!(mitigations(&m)
            .value
            .unwrap()
            .starts_with("none needed: all 1"));
        m.vulnerabilities
            .insert("spectre_v2".into(), "Mitigation: Retpolines".into());
        assert!(mitigations(&m)
            .value
            .unwrap()
            .starts_with("spectre_v2: Mitigation: Retpolines"));
    }

    #[test]
    fn a_missing_kernel_log_is_a_reason_naming_root() {
        let log: KernelLog = Err("syslog(READ_ALL): Operation not permitted".into());
        let m = tsc_rate(&Machine::default(), &log);
        let kernel = m.iter().find(|m| m.name == "tsc-khz-kernel").unwrap();
        assert!(kernel.reason.as_deref().unwrap().contains("run as root"));
        let h = hypervisor(
            &Machine::default(),
            &Ok("[0] Hypervisor detected: KVM\n".into()),
        );
        let k = h.iter().find(|m| m.name == "kernel-hypervisor").unwrap();
        assert_eq!(k.value.as_deref(), Some("KVM"));
    }

    #[test]
    fn the_hypervisor_bit_is_cpuid_1_ecx_bit_31() {
        assert!(hypervisor_present(1 << 31));
        assert!(hypervisor_present(u32::MAX));
        assert!(!hypervisor_present(0));
        assert!(!hypervisor_present(1));
        assert!(!hypervisor_present(0x7fff_ffff));
        // Linux sets the "hypervisor" flag from the same bit.
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags = facts::cpuinfo_field(&cpuinfo, "flags").unwrap();
        let flag = flags.split_whitespace().any(|f| f == "hypervisor");
        assert_eq!(hypervisor_bit(), flag, "{flags}");
    }

    #[test]
    fn a_tenth_of_the_samples_warm_up() {
        assert_eq!(warmup(1000), 100);
        assert_eq!(warmup(25), 2);
        assert_eq!(warmup(5), 1);
        assert_eq!(warmup(0), 1);
    }

    #[test]
    fn the_hypervisor_named_for_the_cpuid_verdict() {
        assert_eq!(hypervisor_name(false, "KVMKVMKVM"), "");
        assert_eq!(hypervisor_name(false, ""), "");
        assert_eq!(hypervisor_name(true, ""), "unnamed");
        assert_eq!(hypervisor_name(true, "KVMKVMKVM"), "KVMKVMKVM");
    }

    #[test]
    fn a_spike_is_half_a_cpuid_exit() {
        assert_eq!(spike_extra(None), 1500);
        assert_eq!(spike_extra(Some(3000)), 1500);
        assert_eq!(spike_extra(Some(1000)), 500);
        assert_eq!(spike_extra(Some(50)), 100);
    }

    #[test]
    fn the_control_loop_is_as_long_as_a_chunk_of_pauses() {
        // With no null subtracted, each short run holds 16 pauses and the
        // stamps (tens of ticks), so 128 pauses' worth is well over 128
        // iterations of a `dec; jnz` loop (about a cycle each).
        let spins = control_spins(0);
        assert!(spins >= timing::PAUSES_PER_CHUNK, "{spins}");
    }

    #[test]
    fn the_measured_rate_in_ppm_against_the_reported_one() {
        let raw = RateClock {
            reference: Reference::Clock(libc::CLOCK_MONOTONIC_RAW),
            text: "CLOCK_MONOTONIC_RAW".into(),
        };
        let v = rate_against(3_000_300, Some((3_000_000, "CPUID")), &raw);
        assert_eq!(
            v,
            "+100 ppm against CPUID's 3000000 kHz (10 windows of 100 ms against CLOCK_MONOTONIC_RAW)"
        );
        let v = rate_against(2_999_700, Some((3_000_000, "the kernel")), &raw);
        assert!(v.starts_with("-100 ppm against the kernel's"), "{v}");
        for against in [None, Some((0, "CPUID"))] {
            let v = rate_against(3_000_000, against, &raw);
            assert!(v.starts_with("no reported rate to compare with"), "{v}");
        }
    }

    /// A clocksource directory with `current` and `available` written.
    pub(super) fn clocksources(name: &str, current: &str, available: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xperf-rate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("current_clocksource"), format!("{current}\n")).unwrap();
        std::fs::write(d.join("available_clocksource"), format!("{available} \n")).unwrap();
        d
    }

    /// Issue item 6: over a TSC-derived clocksource with neither hpet nor
    /// acpi_pm available there is no clock independent of the TSC: the value
    /// says so and gives no ppm figure (it would be the kernel's own
    /// calibration read back).
    #[test]
    fn without_an_independent_clock_there_is_no_ppm_figure() {
        for current in ["tsc", "kvm-clock"] {
            let d = clocksources(current, current, "tsc kvm-clock");
            let clock = facts::rate_clock(&d);
            let v = rate_against(2_445_406, Some((2_445_400, "the kernel")), &clock);
            assert!(v.contains("no independent clock"), "{current}: {v}");
            assert!(!v.contains("ppm"), "{current}: {v}");
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn word_lists() {
        assert_eq!(words(&[]), "none");
        assert_eq!(
            words(&["constant_tsc", "nonstop_tsc"]),
            "constant_tsc nonstop_tsc"
        );
    }

    #[test]
    fn tsc_skew_gives_a_metric_per_pair_or_the_reason() {
        let m = tsc_skew(20);
        assert!(!m.is_empty());
        for m in &m {
            assert!(m.group == TIME && m.name.starts_with("tsc-skew"), "{m:?}");
            assert!(m.is_filled(), "{m:?}");
        }
    }

    #[test]
    fn proc_stat_is_the_kernels_cpu_times() {
        let text = proc_stat().unwrap();
        assert!(facts::parse_proc_stat(&text).is_some(), "{text}");
    }

    #[test]
    fn machine_names_cpu_and_kernel_from_the_probe() {
        let find = |m: &[Metric], name: &str| m.iter().find(|m| m.name == name).unwrap().clone();
        let m = machine(&Machine::default(), Err("no stat".into()), None);
        let cpu = find(&m, "cpu");
        assert_eq!(
            cpu.reason.as_deref(),
            Some("/proc/cpuinfo names no CPU model")
        );
        assert!(find(&m, "kernel").reason.is_some());
        let probe = Machine {
            cpu_vendor: "AuthenticAMD".into(),
            cpu_model: "AMD EPYC".into(),
            cpu_signature: "25/1/1".into(),
            kernel_release: "6.12.0".into(),
            ..Machine::default()
        };
        let m = machine(&probe, Err("no stat".into()), None);
        let cpu = find(&m, "cpu").value.unwrap();
        assert_eq!(cpu, "AuthenticAMD AMD EPYC (family/model/stepping 25/1/1)");
        let kernel = find(&m, "kernel").value.unwrap();
        assert!(kernel.starts_with("6.12.0 "), "{kernel}");
        assert_eq!(find(&m, "steal").reason.as_deref(), Some("no stat"));
    }

    /// Both figures are taken, the wake-up between two different CPUs;
    /// with one CPU online the wake-up says why it is missing.
    #[test]
    fn the_interrupt_path_wakes_another_cpu_and_times_a_timer() {
        let online = facts::parse_cpu_list(&facts::read_trimmed("/sys/devices/system/cpu/online"));
        let cpu = online[0];
        let alone = interrupts(30, cpu, &[cpu]);
        assert_eq!(alone[0].name, "wakeup-cross-cpu");
        let why = alone[0].reason.as_deref().unwrap();
        assert_eq!(
            why,
            format!("only cpu{cpu} is online: no other CPU to wake")
        );
        assert_eq!(alone[1].measured().map(|s| s.count), Some(30));
        // The timer's sleeps are capped, so the stage stays short.
        let capped = interrupts(MAX_TIMER_WAKEUPS + 1, cpu, &[cpu]);
        assert_eq!(
            capped[1].measured().map(|s| s.count),
            Some(MAX_TIMER_WAKEUPS)
        );
        if online.len() < 2 {
            return;
        }
        let both = interrupts(30, cpu, &online);
        let cross = &both[0];
        assert_eq!(cross.measured().map(|s| s.count), Some(30));
        assert_eq!(cross.unit, "ticks/2 wake-ups");
        let value = cross.value.as_deref().unwrap();
        let pair = format!("between cpu{cpu} and cpu{}", online[1]);
        assert!(value.contains(&pair), "{value}");
        let timer = &both[1];
        assert_eq!(
            (timer.name.as_str(), timer.unit.as_str()),
            ("timer-wakeup", "ns")
        );
        assert!(timer.value.as_deref().unwrap().contains("200 us ahead"));
    }
}
