//! What a machine tells about itself in /proc, /sys, DMI and the kernel log,
//! and what that means: a `systemd-detect-virt`-like verdict, nested
//! virtualisation, TSC flags, steal time.
//!
//! The parsers are pure functions of the text they are given (fuzz targets
//! can call them); the readers around them only fetch the text.

use std::path::Path;

/// Longest CPU list accepted from sysfs (a hostile "0-4294967295" stays small).
pub const MAX_CPUS: usize = 4096;

/// CPU flags that say how far the TSC can be trusted, as /proc/cpuinfo names them.
pub const TSC_FLAGS: [&str; 7] = [
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "tsc_reliable",
    "tsc_adjust",
    "rdtscp",
    "tsc_deadline_timer",
];

/// A sysfs file, trimmed; empty when absent or unreadable.
pub fn read_trimmed(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A CPU list as sysfs writes it ("0-3,8,10-11"), at most [`MAX_CPUS`] CPUs;
/// empty when the text is not one (an unreadable file reads as "").
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    xvmm_host::cpu_list::parse(text, MAX_CPUS).unwrap_or_default()
}

/// A field of the first processor block of /proc/cpuinfo.
pub fn cpuinfo_field(cpuinfo: &str, name: &str) -> Option<String> {
    cpuinfo
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim().to_string())
}

/// The TSC flags of [`TSC_FLAGS`] the CPU has and those it lacks.
pub fn tsc_flags(cpuinfo: &str) -> (Vec<&'static str>, Vec<&'static str>) {
    let flags = cpuinfo_field(cpuinfo, "flags").unwrap_or_default();
    let present: Vec<&str> = flags.split_whitespace().collect();
    TSC_FLAGS.iter().partition(|f| present.contains(f))
}

/// CPU time counters of the `cpu` line of /proc/stat, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest
    /// time is already inside user and nice).
    pub total: u64,
    pub steal: u64,
}

/// The aggregate `cpu` line of /proc/stat; `None` when absent or malformed.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    parse_proc_stat_cpu(text, None)
}

/// The `cpuN` line of /proc/stat (the aggregate `cpu` line for `None`);
/// `None` when absent or malformed.
pub fn parse_proc_stat_cpu(text: &str, cpu: Option<u32>) -> Option<CpuTimes> {
    let name = cpu.map_or_else(|| "cpu".to_string(), |c| format!("cpu{c}"));
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse::<u64>())
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 8 {
        return None;
    }
    Some(CpuTimes {
        total: fields.iter().fold(0u64, |a, &b| a.saturating_add(b)),
        steal: fields[7],
    })
}

/// The share of time stolen between two readings: (percent, steal, total).
fn share(before: CpuTimes, after: CpuTimes) -> Result<(f64, u64, u64), String> {
    let total = after.total.checked_sub(before.total);
    let steal = after.steal.checked_sub(before.steal);
    match (total, steal) {
        (Some(total), Some(steal)) if total > 0 => {
            Ok((steal as f64 * 100.0 / total as f64, steal, total))
        }
        (Some(0), _) => Err("no CPU time passed between the two readings of /proc/stat".into()),
        _ => Err("the /proc/stat counters went backwards during the run".into()),
    }
}

/// Steal time between two readings, as one line.
pub fn steal_text(before: CpuTimes, after: CpuTimes) -> Result<String, String> {
    let (pct, steal, total) = share(before, after)?;
    Ok(format!(
        "{pct:.2} % of all CPUs' time stolen by the hypervisor during the run ({steal} of {total} ticks)"
    ))
}

/// All CPUs' stolen share of time between two /proc/stat texts, as a
/// fraction (0.0123 for the 1.23 % that [`steal_report`] says).
pub fn steal_ratio(before: &str, after: &str) -> Option<f64> {
    let (pct, _, _) = share(parse_proc_stat(before)?, parse_proc_stat(after)?).ok()?;
    Some(pct / 100.0)
}

/// Steal time between two /proc/stat texts: the measured CPU's own share
/// (its `cpuN` line), beside all CPUs' (diluted by idle CPUs), as one line.
pub fn steal_report(before: &str, after: &str, cpu: Option<u32>) -> Result<String, String> {
    let all = |t: &str| parse_proc_stat(t).ok_or("/proc/stat has no readable cpu line");
    let all = steal_text(all(before)?, all(after)?)?;
    let Some(cpu) = cpu else {
        return Ok(all);
    };
    let own = match (
        parse_proc_stat_cpu(before, Some(cpu)),
        parse_proc_stat_cpu(after, Some(cpu)),
    ) {
        (Some(a), Some(b)) => share(a, b),
        _ => return Ok(format!("{all}; no cpu{cpu} line in /proc/stat")),
    };
    Ok(match own {
        Ok((pct, steal, total)) => format!(
            "{pct:.2} % of cpu{cpu}'s time (the measured CPU) stolen by the hypervisor during \
             the run ({steal} of {total} ticks); {all}"
        ),
        Err(why) => format!("{all}; cpu{cpu}: {why}"),
    })
}

/// Where a CPU sits: its package and NUMA node (`None`: not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuPlace {
    pub cpu: u32,
    pub package: Option<u32>,
    pub node: Option<u32>,
}

/// The places of the `online` CPUs under a sysfs root (normally `/sys`):
/// `devices/system/cpu/cpuN/topology/physical_package_id` and the
/// `cpulist` of each `devices/system/node/nodeM`.
pub fn cpu_places(sys: &Path, online: &[u32]) -> Vec<CpuPlace> {
    let mut node_of = std::collections::BTreeMap::new();
    let nodes = sys.join("devices/system/node");
    for entry in std::fs::read_dir(&nodes).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(node) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        for cpu in parse_cpu_list(&read_trimmed(entry.path().join("cpulist"))) {
            node_of.entry(cpu).or_insert(node);
        }
    }
    online
        .iter()
        .map(|&cpu| CpuPlace {
            cpu,
            // -1 where the firmware does not say.
            package: read_trimmed(sys.join(format!(
                "devices/system/cpu/cpu{cpu}/topology/physical_package_id"
            )))
            .parse::<u32>()
            .ok(),
            node: node_of.get(&cpu).copied(),
        })
        .collect()
}

/// The CPU pairs whose TSCs are compared (at most `max`): the first CPU
/// against the first CPU of every other (package, NUMA node), so that every
/// package and node boundary is crossed, then against a CPU of its own
/// package and node (firmware can still set TSC_ADJUST per CPU). Without
/// any topology, the first CPU against the next ones.
pub fn skew_pairs(places: &[CpuPlace], max: usize) -> Vec<(u32, u32)> {
    let Some((first, others)) = places.split_first() else {
        return Vec::new();
    };
    if places
        .iter()
        .all(|p| p.package.is_none() && p.node.is_none())
    {
        return others
            .iter()
            .take(max)
            .map(|o| (first.cpu, o.cpu))
            .collect();
    }
    let group = |p: &CpuPlace| (p.package, p.node);
    let mut seen = vec![group(first)];
    let mut pairs = Vec::new();
    for o in others {
        if !seen.contains(&group(o)) {
            seen.push(group(o));
            pairs.push((first.cpu, o.cpu));
        }
    }
    if let Some(same) = others.iter().find(|o| group(o) == group(first)) {
        pairs.push((first.cpu, same.cpu));
    }
    pairs.truncate(max);
    pairs
}

/// What the TSC rate is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// A `clock_gettime` clock over a current clocksource that is not
    /// TSC-based: CLOCK_MONOTONIC_RAW, its counter without NTP's
    /// corrections.
    Clock(libc::clockid_t),
    /// The HPET, read directly (`refclock::Hpet`): available, not current.
    Hpet,
    /// The ACPI PM timer, read directly (`refclock::PmTimer`).
    AcpiPm,
    /// No clock independent of the TSC: CLOCK_MONOTONIC, which then gives
    /// the kernel's own calibration back. No ppm figure comes of it.
    Kernel,
}

/// The clock the TSC rate is measured against, and what that means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateClock {
    pub reference: Reference,
    /// The clock, the clocksource, and whether it is independent of the TSC.
    pub text: String,
}

impl RateClock {
    /// Whether a rate measured against it says anything the kernel's own
    /// calibration does not.
    pub fn independent(&self) -> bool {
        self.reference != Reference::Kernel
    }

    /// No independent clock, and why.
    pub fn kernel(why: &str) -> RateClock {
        RateClock {
            reference: Reference::Kernel,
            text: format!(
                "no independent clock: {why}; measured against CLOCK_MONOTONIC, the kernel's own \
                 TSC calibration read back"
            ),
        }
    }
}

/// Clocksources whose reading is the TSC scaled (paravirtual clocks read
/// the TSC and the hypervisor's scale): a clock built on them cannot
/// measure the TSC's rate, only give the kernel's own calibration back.
pub const TSC_CLOCKSOURCES: [&str; 5] = [
    "tsc",
    "tsc-early",
    "kvm-clock",
    "hyperv_clocksource_tsc_page",
    "xen",
];

/// The clock to measure the TSC rate against, from the clocksources in
/// `dir` (normally /sys/devices/system/clocksource/clocksource0): the
/// current one through CLOCK_MONOTONIC_RAW where it is not TSC-based; else
/// hpet, then acpi_pm, read directly where the kernel offers them; else
/// none independent ([`Reference::Kernel`]).
pub fn rate_clock(dir: &Path) -> RateClock {
    let current = read_trimmed(dir.join("current_clocksource"));
    let available = read_trimmed(dir.join("available_clocksource"));
    if !current.is_empty() && !TSC_CLOCKSOURCES.contains(&current.as_str()) {
        return RateClock {
            reference: Reference::Clock(libc::CLOCK_MONOTONIC_RAW),
            text: format!("CLOCK_MONOTONIC_RAW, clocksource {current}, not TSC-based"),
        };
    }
    let why = if current.is_empty() {
        "the clocksource is unknown (it may itself be TSC-derived)".to_string()
    } else {
        format!("clocksource {current} is itself TSC-derived")
    };
    let offered = |name: &str| available.split_ascii_whitespace().any(|a| a == name);
    for (name, reference, how) in [
        (
            "hpet",
            Reference::Hpet,
            "the HPET's counter, read through /dev/hpet",
        ),
        (
            "acpi_pm",
            Reference::AcpiPm,
            "the ACPI PM timer, read from its port",
        ),
    ] {
        if offered(name) {
            return RateClock {
                reference,
                text: format!("{how} ({name} is available; {why})"),
            };
        }
    }
    let listed = if available.is_empty() {
        "none listed".to_string()
    } else {
        available
    };
    RateClock::kernel(&format!(
        "{why}, and neither hpet nor acpi_pm is available ({listed})"
    ))
}

/// The DMI identity strings under /sys/class/dmi/id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dmi {
    pub sys_vendor: String,
    pub product_name: String,
    pub product_version: String,
    pub board_vendor: String,
    pub bios_vendor: String,
}

impl Dmi {
    /// Reads `dir` (normally /sys/class/dmi/id); `None` when it does not exist.
    pub fn read(dir: &Path) -> Option<Dmi> {
        if !dir.is_dir() {
            return None;
        }
        let f = |name: &str| read_trimmed(dir.join(name));
        Some(Dmi {
            sys_vendor: f("sys_vendor"),
            product_name: f("product_name"),
            product_version: f("product_version"),
            board_vendor: f("board_vendor"),
            bios_vendor: f("bios_vendor"),
        })
    }

    /// The fields systemd looks at, in its order.
    fn fields(&self) -> [&str; 5] {
        [
            &self.product_name,
            &self.sys_vendor,
            &self.board_vendor,
            &self.bios_vendor,
            &self.product_version,
        ]
    }

    pub fn describe(&self) -> String {
        let named = [
            ("sys_vendor", &self.sys_vendor),
            ("product_name", &self.product_name),
            ("product_version", &self.product_version),
            ("board_vendor", &self.board_vendor),
            ("bios_vendor", &self.bios_vendor),
        ];
        let parts: Vec<String> = named
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        if parts.is_empty() {
            "present but every identity field is empty".into()
        } else {
            parts.join(" ")
        }
    }
}

/// DMI vendor prefixes and what `systemd-detect-virt` calls them.
const DMI_VENDORS: [(&str, &str); 17] = [
    ("KVM", "kvm"),
    ("OpenStack", "kvm"),
    ("KubeVirt", "kvm"),
    ("Amazon EC2", "amazon"),
    ("QEMU", "qemu"),
    ("VMware", "vmware"),
    ("VMW", "vmware"),
    ("innotek GmbH", "oracle"),
    ("VirtualBox", "oracle"),
    ("Oracle Corporation", "oracle"),
    ("Xen", "xen"),
    ("Bochs", "bochs"),
    ("Parallels", "parallels"),
    ("BHYVE", "bhyve"),
    ("Hyper-V", "microsoft"),
    ("Apple Virtualization", "apple"),
    ("Google Compute Engine", "google"),
];

/// CPUID 0x40000000 signatures and what `systemd-detect-virt` calls them.
const CPUID_VENDORS: [(&str, &str); 11] = [
    ("XenVMMXenVMM", "xen"),
    ("KVMKVMKVM", "kvm"),
    ("Linux KVM Hv", "kvm"),
    ("TCGTCGTCGTCG", "qemu"),
    ("VMwareVMware", "vmware"),
    ("Microsoft Hv", "microsoft"),
    ("bhyve bhyve", "bhyve"),
    ("QNXQVMBSQG", "qnx"),
    ("ACRNACRNACRN", "acrn"),
    ("SRESRESRESRE", "sre"),
    ("Apple VZ", "apple"),
];

/// DMI's verdict: the first field that starts with a known vendor.
fn dmi_verdict(dmi: &Dmi) -> Option<&'static str> {
    dmi.fields().iter().find_map(|field| {
        DMI_VENDORS
            .iter()
            .find(|(prefix, _)| field.starts_with(prefix))
            .map(|(_, name)| *name)
    })
}

/// CPUID's verdict: `None` without the hypervisor bit, "vm-other" for an
/// unknown signature.
fn cpuid_verdict(signature: Option<&str>) -> Option<&'static str> {
    let sig = signature?.trim_end_matches(['\0', ' ']);
    Some(
        CPUID_VENDORS
            .iter()
            .find(|(s, _)| *s == sig)
            .map_or("vm-other", |(_, name)| *name),
    )
}

/// What `systemd-detect-virt --vm` would print, and from which source, in
/// its order: DMI first for the vendors that run KVM or cloak as Hyper-V
/// (Oracle, Xen, Amazon, Parallels, Google), then CPUID (which names the
/// hypervisor even when DMI is rewritten), then DMI, then
/// /sys/hypervisor/type. `signature` is `None` without the CPUID
/// hypervisor bit.
pub fn detect_virt(
    signature: Option<&str>,
    dmi: Option<&Dmi>,
    sys_hypervisor: &str,
) -> (&'static str, &'static str) {
    let dmi_says = dmi.and_then(dmi_verdict);
    if let Some(v @ ("oracle" | "xen" | "amazon" | "parallels" | "google")) = dmi_says {
        return (v, "DMI");
    }
    let cpuid_says = cpuid_verdict(signature);
    if let Some(v) = cpuid_says.filter(|v| !matches!(*v, "microsoft" | "vm-other")) {
        return (v, "CPUID 0x40000000");
    }
    if let Some(v) = dmi_says {
        return (v, "DMI");
    }
    if sys_hypervisor.trim() == "xen" {
        return ("xen", "/sys/hypervisor/type");
    }
    match cpuid_says {
        Some(v) => (v, "CPUID 0x40000000"),
        None => ("none", "no CPUID hypervisor bit, no DMI vendor"),
    }
}

/// Whether this machine is a guest that can run guests itself.
pub fn nested_text(hypervisor: bool, flags: &[String], kvm_module: &str, dev_kvm: bool) -> String {
    let ext = flags
        .iter()
        .find(|f| *f == "vmx" || *f == "svm")
        .map(String::as_str);
    let kvm = match (dev_kvm, kvm_module) {
        (false, _) => "no /dev/kvm".to_string(),
        (true, "") => "/dev/kvm present".to_string(),
        (true, m) => format!("/dev/kvm served by {m}"),
    };
    match (hypervisor, ext) {
        (false, Some(e)) => format!("not a guest; the CPU offers {e} ({kvm})"),
        (false, None) => format!("not a guest; no vmx/svm ({kvm})"),
        (true, Some(e)) => format!(
            "a guest offered {e}: nested virtualisation available ({kvm}); \
             whether this guest is itself nested cannot be seen from inside"
        ),
        (true, None) if kvm_module == "kvm_pvm" => {
            format!("a guest without vmx/svm; {kvm}: software (PVM) virtualisation only")
        }
        (true, None) => format!("a guest without vmx/svm: no nested virtualisation ({kvm})"),
    }
}

/// "2445.432" MHz as kHz, exactly.
fn mhz_to_khz(text: &str) -> Option<u64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    // Digits only: `parse` would also take a sign ("+5").
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        return None;
    }
    let int: u64 = int.parse().ok()?;
    let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
    let frac: u64 = frac3.parse().ok()?;
    int.checked_mul(1000)?.checked_add(frac)
}

/// The TSC rate the kernel settled on, from its log: the refined
/// calibration when there is one, else the detected rate; with its line.
pub fn kernel_log_tsc_khz(log: &str) -> Option<(u64, String)> {
    let rate = |needle: &str| {
        log.lines().filter(|l| l.contains(needle)).find_map(|l| {
            // The number right before " MHz"; a line without one, or a
            // rate of 0, says nothing (found by fuzzing: the last word of
            // a cut line was read as the rate).
            let (before, _) = l.split_once(" MHz")?;
            let number = before.rsplit(' ').next()?;
            let text = l.split("] ").nth(1).unwrap_or(l).trim().to_string();
            Some((mhz_to_khz(number).filter(|&khz| khz > 0)?, text))
        })
    };
    rate("tsc: Refined TSC clocksource calibration:").or_else(|| rate("tsc: Detected "))
}

/// The kernel's "Hypervisor detected: X" line, X only.
pub fn kernel_log_hypervisor(log: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let rest = l.split("Hypervisor detected: ").nth(1)?;
        Some(rest.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_expand_and_stay_bounded() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0"), [0]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        // Not a list: nothing of it is trusted.
        assert_eq!(parse_cpu_list("x,2,3-y"), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("0-4294967295"), Vec::<u32>::new());
    }

    const CPUINFO: &str = "processor\t: 0\nmicrocode\t: 0x1000065\n\
flags\t\t: fpu tsc rdtscp constant_tsc nonstop_tsc tsc_known_freq hypervisor\n\n\
processor\t: 1\nmicrocode\t: 0xdead\n";

    #[test]
    fn cpuinfo_fields_and_tsc_flags_of_the_first_cpu() {
        assert_eq!(
            cpuinfo_field(CPUINFO, "microcode").as_deref(),
            Some("0x1000065")
        );
        assert_eq!(cpuinfo_field(CPUINFO, "model name"), None);
        let (has, lacks) = tsc_flags(CPUINFO);
        assert_eq!(
            has,
            ["constant_tsc", "nonstop_tsc", "tsc_known_freq", "rdtscp"]
        );
        assert_eq!(lacks, ["tsc_reliable", "tsc_adjust", "tsc_deadline_timer"]);
    }

    #[test]
    fn steal_time_from_two_readings() {
        let text =
            |steal: u64| format!("cpu  100 0 50 1000 0 0 0 {steal} 7 0\ncpu0 1 2 3 4 5 6 7 8\n");
        let a = parse_proc_stat(&text(10)).unwrap();
        assert_eq!(
            a,
            CpuTimes {
                total: 1160,
                steal: 10
            }
        );
        let mut b = a;
        b.total += 200;
        b.steal += 5;
        let line = steal_text(a, b).unwrap();
        assert!(line.starts_with("2.50 % of all CPUs' time"), "{line}");
        let back = steal_text(b, a).unwrap_err();
        assert!(back.contains("went backwards"), "{back}");
        let still = steal_text(a, a).unwrap_err();
        assert!(still.starts_with("no CPU time passed"), "{still}");
        assert_eq!(parse_proc_stat("cpu 1 2 3\n"), None);
        assert_eq!(parse_proc_stat("intr 5\n"), None);
        assert_eq!(parse_proc_stat("cpu  a b c d e f g h\n"), None);
    }

    /// cpu1 (the measured CPU) lost 20 of its 200 ticks; the other CPU
    /// idled, so all CPUs lost 20 of 400.
    #[test]
    fn steal_of_the_measured_cpu_beside_all_cpus() {
        let stat = |steal: u64, busy: u64, idle0: u64| {
            format!(
                "cpu  {busy} 0 0 {} 0 0 0 {steal} 0 0\n\
                 cpu0 0 0 0 {idle0} 0 0 0 0 0 0\n\
                 cpu1 {busy} 0 0 0 0 0 0 {steal} 0 0\nintr 5\n",
                idle0
            )
        };
        let (before, after) = (stat(10, 100, 100), stat(30, 280, 300));
        assert_eq!(
            parse_proc_stat_cpu(&after, Some(1)),
            Some(CpuTimes {
                total: 310,
                steal: 30
            })
        );
        assert_eq!(parse_proc_stat_cpu(&after, Some(0)).unwrap().total, 300);
        assert_eq!(parse_proc_stat_cpu(&after, Some(7)), None);
        assert_eq!(parse_proc_stat_cpu(&after, None), parse_proc_stat(&after));
        let line = steal_report(&before, &after, Some(1)).unwrap();
        assert!(
            line.starts_with("10.00 % of cpu1's time (the measured CPU)"),
            "{line}"
        );
        assert!(line.contains("5.00 % of all CPUs' time"), "{line}");
        // Without the measured CPU's line, all CPUs' share alone, saying so.
        let line = steal_report(&before, &after, Some(7)).unwrap();
        assert!(line.starts_with("5.00 % of all CPUs' time"), "{line}");
        assert!(line.contains("no cpu7 line"), "{line}");
        assert!(steal_report("intr 5\n", &after, Some(1)).is_err());
        // The same share as a fraction, for the metrics.
        let ratio = steal_ratio(&before, &after).unwrap();
        assert!((ratio - 0.05).abs() < 1e-12, "{ratio}");
        assert_eq!(steal_ratio("intr 5\n", &after), None);
    }

    /// A sysfs tree with `packages[i]` the package of cpu i and `nodes` the
    /// NUMA nodes' CPU lists.
    fn topology(name: &str, packages: &[u32], nodes: &[&str]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("xperf-topo-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (cpu, package) in packages.iter().enumerate() {
            let dir = root.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("physical_package_id"), format!("{package}\n")).unwrap();
        }
        for (node, list) in nodes.iter().enumerate() {
            let dir = root.join(format!("devices/system/node/node{node}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cpulist"), format!("{list}\n")).unwrap();
        }
        root
    }

    /// Every package and node other than the first CPU's is paired with it.
    fn crossed(places: &[CpuPlace], pairs: &[(u32, u32)]) -> (Vec<u32>, Vec<u32>) {
        let place = |cpu: u32| *places.iter().find(|p| p.cpu == cpu).unwrap();
        let (mut packages, mut nodes) = (Vec::new(), Vec::new());
        for &(a, b) in pairs {
            let (a, b) = (place(a), place(b));
            for (p, q) in [(a, b), (b, a)] {
                if p.package != q.package && !packages.contains(&p.package.unwrap()) {
                    packages.push(p.package.unwrap());
                }
                if p.node != q.node && !nodes.contains(&p.node.unwrap()) {
                    nodes.push(p.node.unwrap());
                }
            }
        }
        packages.sort_unstable();
        nodes.sort_unstable();
        (packages, nodes)
    }

    #[test]
    fn packages_without_numa_nodes_still_group() {
        let place = |cpu, package| CpuPlace {
            cpu,
            package: Some(package),
            node: None,
        };
        let places = [place(0, 0), place(1, 0), place(2, 1), place(3, 1)];
        // Across the package boundary first, then within cpu0's package.
        assert_eq!(skew_pairs(&places, 32), [(0, 2), (0, 1)]);
    }

    #[test]
    fn skew_pairs_cross_every_package_and_node() {
        // Two packages of 12 CPUs, numbered package by package.
        let packages: Vec<u32> = (0..24).map(|c| c / 12).collect();
        let root = topology("two-packages", &packages, &["0-11", "12-23"]);
        let online: Vec<u32> = (0..24).collect();
        let places = cpu_places(&root, &online);
        assert_eq!(places[13].package, Some(1));
        assert_eq!(places[13].node, Some(1));
        let pairs = skew_pairs(&places, 8);
        assert_eq!(crossed(&places, &pairs), (vec![0, 1], vec![0, 1]));
        assert!(pairs.len() <= 8, "{pairs:?}");
        // And one pair inside the first package (TSCs of one package can
        // still differ when firmware wrote TSC_ADJUST).
        assert!(pairs.iter().any(|&(a, b)| a < 12 && b < 12), "{pairs:?}");
        std::fs::remove_dir_all(&root).unwrap();

        // One package, four NUMA nodes of 8 CPUs (sub-NUMA clustering).
        let root = topology("snc", &[0; 32], &["0-7", "8-15", "16-23", "24-31"]);
        let online: Vec<u32> = (0..32).collect();
        let places = cpu_places(&root, &online);
        let pairs = skew_pairs(&places, 8);
        assert_eq!(crossed(&places, &pairs).1, [0, 1, 2, 3], "{pairs:?}");
        std::fs::remove_dir_all(&root).unwrap();

        // Four packages, CPUs interleaved, no NUMA directory, cpu0 offline:
        // the pairs start from the first online CPU.
        let packages: Vec<u32> = (0..64).map(|c| c % 4).collect();
        let root = topology("interleaved", &packages, &[]);
        let online: Vec<u32> = (1..64).collect();
        let places = cpu_places(&root, &online);
        assert!(places.iter().all(|p| p.node.is_none()));
        let pairs = skew_pairs(&places, 8);
        assert!(pairs.iter().all(|&(a, _)| a == 1), "{pairs:?}");
        let packages_crossed: Vec<u32> = {
            let mut v: Vec<u32> = pairs.iter().map(|&(_, b)| b % 4).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        assert_eq!(packages_crossed, [0, 1, 2, 3], "{pairs:?}");
        std::fs::remove_dir_all(&root).unwrap();

        // Without topology files: CPUs in order, up to the limit.
        let bare = cpu_places(Path::new("/nonexistent"), &[0, 1, 2]);
        assert_eq!(skew_pairs(&bare, 8), [(0, 1), (0, 2)]);
        assert!(skew_pairs(&bare[..1], 8).is_empty());
    }

    #[test]
    fn the_tsc_rate_is_measured_against_a_clock_not_derived_from_it() {
        let dir = |name: &str, current: Option<&str>| {
            let d = std::env::temp_dir().join(format!("xperf-cs-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            if let Some(c) = current {
                std::fs::write(d.join("current_clocksource"), format!("{c}\n")).unwrap();
            }
            d
        };
        for source in ["tsc", "kvm-clock", "hyperv_clocksource_tsc_page"] {
            let d = dir(source, Some(source));
            let c = rate_clock(&d);
            assert_eq!(c.reference, Reference::Kernel, "{source}");
            assert!(!c.independent());
            assert!(
                c.text.starts_with("no independent clock: ")
                    && c.text
                        .contains(&format!("clocksource {source} is itself TSC-derived")),
                "{}",
                c.text
            );
            std::fs::remove_dir_all(&d).unwrap();
        }
        for source in ["hpet", "acpi_pm"] {
            let d = dir(source, Some(source));
            let c = rate_clock(&d);
            assert_eq!(c.reference, Reference::Clock(libc::CLOCK_MONOTONIC_RAW));
            assert!(
                c.text
                    .contains(&format!("clocksource {source}, not TSC-based")),
                "{}",
                c.text
            );
            std::fs::remove_dir_all(&d).unwrap();
        }
        let d = dir("none", None);
        let c = rate_clock(&d);
        assert_eq!(c.reference, Reference::Kernel);
        assert!(c.text.contains("clocksource is unknown"), "{}", c.text);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Issue item 6: hpet or acpi_pm is measured against wherever the
    /// kernel offers it, not only where it is the current clocksource.
    #[test]
    fn an_available_hpet_or_pm_timer_is_the_reference_even_when_not_current() {
        let d = std::env::temp_dir().join(format!("xperf-cs-avail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("current_clocksource"), "tsc\n").unwrap();
        for (available, want) in [("tsc hpet acpi_pm ", "hpet"), ("tsc acpi_pm ", "acpi_pm")] {
            std::fs::write(d.join("available_clocksource"), available).unwrap();
            let c = rate_clock(&d);
            assert!(c.text.contains(want), "{available}: {}", c.text);
            assert!(c.independent(), "{available}: {c:?}");
            let reference = if want == "hpet" {
                Reference::Hpet
            } else {
                Reference::AcpiPm
            };
            assert_eq!(c.reference, reference);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn dmi(vendor: &str, product: &str) -> Dmi {
        Dmi {
            sys_vendor: vendor.into(),
            product_name: product.into(),
            ..Dmi::default()
        }
    }

    #[test]
    fn virt_verdict_follows_systemds_order() {
        // CPUID names KVM even when DMI says QEMU.
        assert_eq!(
            detect_virt(Some("KVMKVMKVM"), Some(&dmi("QEMU", "Standard PC")), ""),
            ("kvm", "CPUID 0x40000000")
        );
        // Amazon runs KVM (Nitro) but DMI wins.
        assert_eq!(
            detect_virt(Some("KVMKVMKVM"), Some(&dmi("Amazon EC2", "m5.large")), ""),
            ("amazon", "DMI")
        );
        // Xen cloaking as Hyper-V: DMI wins too.
        assert_eq!(
            detect_virt(Some("Microsoft Hv"), Some(&dmi("Xen", "HVM domU")), ""),
            ("xen", "DMI")
        );
        assert_eq!(
            detect_virt(Some("Microsoft Hv"), None, ""),
            ("microsoft", "CPUID 0x40000000")
        );
        assert_eq!(detect_virt(Some("TCGTCGTCGTCG"), None, "").0, "qemu");
        assert_eq!(detect_virt(Some("bhyve bhyve "), None, "").0, "bhyve");
        assert_eq!(
            detect_virt(Some("Nobody\0\0"), None, ""),
            ("vm-other", "CPUID 0x40000000")
        );
        assert_eq!(
            detect_virt(None, Some(&dmi("", "VMware7,1")), "").0,
            "vmware"
        );
        assert_eq!(
            detect_virt(None, None, "xen\n"),
            ("xen", "/sys/hypervisor/type")
        );
        assert_eq!(
            detect_virt(None, Some(&dmi("Dell Inc.", "R640")), "").0,
            "none"
        );
    }

    #[test]
    fn nested_says_what_this_guest_can_run() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = nested_text(true, &f(&["svm"]), "kvm_amd", true);
        assert!(
            t.starts_with("a guest offered svm: nested") && t.contains("kvm_amd"),
            "{t}"
        );
        let t = nested_text(true, &f(&[]), "kvm_pvm", true);
        assert!(t.contains("PVM"), "{t}");
        let t = nested_text(true, &f(&[]), "", false);
        assert!(t.contains("no nested virtualisation (no /dev/kvm)"), "{t}");
        assert!(nested_text(false, &f(&["vmx"]), "", false).starts_with("not a guest"));
        // The extension is found among the other flags.
        let t = nested_text(true, &f(&["constant_tsc", "vmx"]), "kvm_intel", true);
        assert!(t.starts_with("a guest offered vmx: nested"), "{t}");
        let t = nested_text(false, &f(&["vmx"]), "", false);
        assert!(t.starts_with("not a guest; the CPU offers vmx"), "{t}");
    }

    #[test]
    fn kernel_log_rates_and_hypervisor() {
        let log = "<6>[    0.000000] Hypervisor detected: KVM\n\
<6>[    0.000010] tsc: Detected 2445.406 MHz processor\n\
<6>[    1.100000] tsc: Refined TSC clocksource calibration: 2445.4 MHz\n";
        let (khz, line) = kernel_log_tsc_khz(log).unwrap();
        assert_eq!(khz, 2_445_400);
        assert!(line.starts_with("tsc: Refined"), "{line}");
        let only = "[0.0] tsc: Detected 3000.000 MHz TSC\n";
        assert_eq!(kernel_log_tsc_khz(only).unwrap().0, 3_000_000);
        assert_eq!(kernel_log_tsc_khz("tsc: Detected x MHz\n"), None);
        assert_eq!(kernel_log_hypervisor(log).as_deref(), Some("KVM"));
        assert_eq!(kernel_log_hypervisor("nothing"), None);
        assert_eq!(mhz_to_khz("99999999999999999999"), None);
    }

    /// Found by fuzzing (fuzz/fuzz_targets/machine_facts.rs): a line cut
    /// before " MHz" gave its last word as the rate, 0 kHz included.
    #[test]
    fn a_kernel_log_line_without_a_rate_gives_none() {
        assert_eq!(kernel_log_tsc_khz("[0.0] tsc: Detected 0 0 0\n"), None);
        assert_eq!(kernel_log_tsc_khz("tsc: Detected 2445\n"), None);
        assert_eq!(kernel_log_tsc_khz("tsc: Detected 0.000 MHz\n"), None);
        assert_eq!(kernel_log_tsc_khz("tsc: Detected +2445 MHz\n"), None);
        assert_eq!(kernel_log_tsc_khz("tsc: Detected 1.-5 MHz\n"), None);
        assert_eq!(mhz_to_khz("2445.5"), Some(2_445_500));
    }

    #[test]
    fn dmi_reads_a_directory_and_describes_what_is_set() {
        assert_eq!(Dmi::read(Path::new("/nonexistent/dmi")), None);
        let dir = std::env::temp_dir().join(format!("xperf-dmi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("sys_vendor"), "QEMU\n").unwrap();
        let d = Dmi::read(&dir).unwrap();
        assert_eq!(d.describe(), "sys_vendor=\"QEMU\"");
        assert_eq!(detect_virt(None, Some(&d), "").0, "qemu");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Dmi::default()
            .describe()
            .contains("every identity field is empty"));
    }
}
