//! Characterisation of the machine a measurement ran on: what a reader needs
//! to judge whether two reports are comparable (CPU, TSC, hypervisor, KVM
//! module and its halt polling, speculation mitigations, THP, clocksource).
//!
//! Works the same on a host and inside a Linux guest; everything is read from
//! /proc, /sys and CPUID, and a missing source leaves its field empty.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// CPU flags that change how crossings and stamps behave.
const FLAGS_OF_INTEREST: [&str; 14] = [
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "rdtscp",
    "hypervisor",
    "vmx",
    "svm",
    "pti",
    "smap",
    "smep",
    "pcid",
    "invpcid",
    "fsgsbase",
    "fred",
];

/// Back-to-back TSC reads for the quantum estimate (a few milliseconds).
pub const QUANTUM_READS: usize = 100_000;

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Machine {
    pub cpu_vendor: String,
    pub cpu_model: String,
    /// "family/model/stepping" in decimal, as /proc/cpuinfo gives them.
    pub cpu_signature: String,
    pub logical_cpus: u32,
    /// The subset of `FLAGS_OF_INTEREST` the CPU (as the kernel sees it) has.
    pub flags: Vec<String>,
    pub tsc_khz: u64,
    /// Where `tsc_khz` came from: "cpuid-0x15", "cpuid-0x40000010", "calibrated".
    pub tsc_khz_source: String,
    /// CPUID 0x40000000 signature, "" without the hypervisor bit.
    pub hypervisor_signature: String,
    pub kernel_release: String,
    /// "kvm_intel", "kvm_amd", "kvm_pvm", or "" when no KVM module is loaded.
    pub kvm_module: String,
    /// KVM module parameters that skew exit timing (halt polling, ...).
    pub kvm_params: BTreeMap<String, String>,
    /// /sys/devices/system/cpu/vulnerabilities/*.
    pub vulnerabilities: BTreeMap<String, String>,
    /// Selected mode of /sys/kernel/mm/transparent_hugepage/enabled.
    pub thp: String,
    pub clocksource: String,
    /// How far the TSC moves in one step, in ticks (see [`crate::quantum`]);
    /// `None` in reports written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc_quantum_ticks: Option<f64>,
    /// Whether LFENCE is dispatch-serialising, as CPUID tells.
    #[serde(default)]
    pub lfence: xvmm_host::cpu::Lfence,
    /// Whether core cycles can be read beside the TSC.
    #[serde(default)]
    pub pmu: String,
}

impl Machine {
    /// Reads everything this machine tells about itself. Takes ~50 ms when the
    /// TSC frequency has to be calibrated.
    pub fn probe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut m = parse_cpuinfo(&cpuinfo);
        m.hypervisor_signature = cpuid::hypervisor_signature();
        let (khz, source) = cpuid::tsc_khz().unwrap_or_else(|| {
            (
                xvmm_host::tsc::calibrate_khz(Duration::from_millis(50)),
                "calibrated",
            )
        });
        m.tsc_khz = khz;
        m.tsc_khz_source = source.to_string();
        m.kernel_release = read_trimmed("/proc/sys/kernel/osrelease");
        m.kvm_module = kvm_module(Path::new("/sys/module"), &m.flags);
        for param in ["halt_poll_ns", "halt_poll_ns_grow", "halt_poll_ns_shrink"] {
            let value = read_trimmed(&format!("/sys/module/kvm/parameters/{param}"));
            if !value.is_empty() {
                m.kvm_params.insert(param.to_string(), value);
            }
        }
        if let Ok(entries) = fs::read_dir("/sys/devices/system/cpu/vulnerabilities") {
            for entry in entries.flatten() {
                let value = fs::read_to_string(entry.path()).unwrap_or_default();
                m.vulnerabilities.insert(
                    entry.file_name().to_string_lossy().into_owned(),
                    value.trim().to_string(),
                );
            }
        }
        m.thp = selected_mode(&read_trimmed("/sys/kernel/mm/transparent_hugepage/enabled"));
        m.clocksource =
            read_trimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        m.tsc_quantum_ticks =
            crate::quantum::estimate(&xvmm_host::tsc::back_to_back(QUANTUM_READS));
        (m.lfence, m.pmu) = xvmm_host::cpu::probe();
        m
    }

    /// Kernel page-table isolation, from the meltdown entry or the `pti` flag.
    pub fn kpti(&self) -> Option<bool> {
        match self.vulnerabilities.get("meltdown") {
            Some(v) => Some(v.contains("PTI")),
            None if self.flags.is_empty() => None,
            None => Some(self.flags.iter().any(|f| f == "pti")),
        }
    }
}

/// A `Name:   1234 kB` field of /proc/meminfo, in bytes.
pub fn meminfo_bytes(meminfo: &str, name: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .and_then(|kib| kib.checked_mul(1024))
}

fn read_trimmed(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Parses the first processor block of /proc/cpuinfo and counts processors.
pub fn parse_cpuinfo(text: &str) -> Machine {
    let mut m = Machine::default();
    let (mut family, mut model, mut stepping) = (String::new(), String::new(), String::new());
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => m.logical_cpus += 1,
            _ if m.logical_cpus > 1 => {}
            "vendor_id" => m.cpu_vendor = value.to_string(),
            "model name" => m.cpu_model = value.to_string(),
            "cpu family" => family = value.to_string(),
            "model" => model = value.to_string(),
            "stepping" => stepping = value.to_string(),
            "flags" => {
                let present: Vec<&str> = value.split_whitespace().collect();
                m.flags = FLAGS_OF_INTEREST
                    .iter()
                    .filter(|f| present.contains(f))
                    .map(|f| f.to_string())
                    .collect();
            }
            _ => {}
        }
    }
    if !family.is_empty() {
        m.cpu_signature = format!("{family}/{model}/{stepping}");
    }
    m
}

/// The bracketed choice of a sysfs mode file: `always [madvise] never` -> `madvise`.
pub fn selected_mode(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or(text)
        .to_string()
}

/// The KVM module serving /dev/kvm, from /sys/module. A kernel with KVM_AMD
/// and KVM_INTEL both built in (the nested harness's L1) lists both, so the
/// CPU's own extension (`svm` or `vmx` in `cpu_flags`) decides; without one,
/// only PVM can be serving.
pub fn kvm_module(sys_module: &Path, cpu_flags: &[String]) -> String {
    let has_flag = |f: &str| cpu_flags.iter().any(|x| x == f);
    let candidates: &[&str] = if has_flag("svm") {
        &["kvm_amd", "kvm_pvm"]
    } else if has_flag("vmx") {
        &["kvm_intel", "kvm_pvm"]
    } else {
        &["kvm_pvm", "kvm_amd", "kvm_intel"]
    };
    candidates
        .iter()
        .find(|m| sys_module.join(m).is_dir())
        .map(|m| m.to_string())
        .unwrap_or_default()
}

/// CPUID reads done once, outside any measured region.
pub mod cpuid {
    #[cfg(target_arch = "x86_64")]
    use core::arch::x86_64::{__cpuid, CpuidResult};

    #[cfg(target_arch = "x86_64")]
    // __cpuid became a safe fn in newer toolchains; keep the block for older ones.
    #[allow(unused_unsafe)]
    fn leaf(eax: u32) -> CpuidResult {
        // SAFETY: cpuid exists on every x86-64 CPU; unknown leaves return data, not faults.
        unsafe { __cpuid(eax) }
    }

    #[cfg(target_arch = "x86_64")]
    fn has_hypervisor() -> bool {
        leaf(1).ecx & (1 << 31) != 0
    }

    /// The 12-byte vendor signature of CPUID 0x40000000, trimmed of NULs.
    #[cfg(target_arch = "x86_64")]
    pub fn hypervisor_signature() -> String {
        if !has_hypervisor() {
            return String::new();
        }
        let r = leaf(0x4000_0000);
        let bytes: Vec<u8> = [r.ebx, r.ecx, r.edx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_string()
    }

    /// TSC frequency from CPUID: the hypervisor's timing leaf, or Intel's
    /// crystal ratio leaf 0x15.
    #[cfg(target_arch = "x86_64")]
    pub fn tsc_khz() -> Option<(u64, &'static str)> {
        if has_hypervisor() && leaf(0x4000_0000).eax >= 0x4000_0010 {
            let khz = u64::from(leaf(0x4000_0010).eax);
            if khz != 0 {
                return Some((khz, "cpuid-0x40000010"));
            }
        }
        if leaf(0).eax >= 0x15 {
            let r = leaf(0x15);
            if r.eax != 0 && r.ebx != 0 && r.ecx != 0 {
                return Some((
                    u64::from(r.ecx) * u64::from(r.ebx) / u64::from(r.eax) / 1000,
                    "cpuid-0x15",
                ));
            }
        }
        None
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn hypervisor_signature() -> String {
        String::new()
    }
    #[cfg(not(target_arch = "x86_64"))]
    pub fn tsc_khz() -> Option<(u64, &'static str)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n\
model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu tsc rdtscp constant_tsc hypervisor smap pti\n\n\
processor\t: 1\nvendor_id\t: Other\nmodel name\t: ignored\n";

    #[test]
    fn cpuinfo_first_block_and_processor_count() {
        let m = parse_cpuinfo(CPUINFO);
        assert_eq!(m.logical_cpus, 2);
        assert_eq!(
            (m.cpu_vendor.as_str(), m.cpu_model.as_str()),
            ("AuthenticAMD", "AMD EPYC")
        );
        assert_eq!(m.cpu_signature, "25/1/1");
        assert_eq!(
            m.flags,
            ["constant_tsc", "rdtscp", "hypervisor", "pti", "smap"]
        );
        assert_eq!(m.kpti(), Some(true));
    }

    #[test]
    fn kpti_prefers_the_vulnerability_file() {
        let mut m = parse_cpuinfo(CPUINFO);
        m.vulnerabilities
            .insert("meltdown".into(), "Not affected".into());
        assert_eq!(m.kpti(), Some(false));
        assert_eq!(Machine::default().kpti(), None);
    }

    #[test]
    fn selected_mode_picks_the_bracketed_word() {
        assert_eq!(selected_mode("always [madvise] never"), "madvise");
        assert_eq!(selected_mode("[always] madvise never"), "always");
        assert_eq!(selected_mode(""), "");
    }

    #[test]
    fn kvm_module_follows_the_cpu_extension() {
        let dir = std::env::temp_dir().join(format!("xvmm-machine-{}", std::process::id()));
        let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for m in ["kvm_intel", "kvm_amd"] {
            std::fs::create_dir_all(dir.join(m)).unwrap();
        }
        // Both built in: the CPU's extension decides, whatever the order.
        assert_eq!(kvm_module(&dir, &flags(&["fpu", "svm"])), "kvm_amd");
        assert_eq!(kvm_module(&dir, &flags(&["vmx"])), "kvm_intel");
        // No extension (a PVM host): PVM serves.
        std::fs::create_dir_all(dir.join("kvm_pvm")).unwrap();
        assert_eq!(kvm_module(&dir, &flags(&["hypervisor"])), "kvm_pvm");
        // The CPU has svm but kvm_amd is not loaded: PVM is what is there.
        std::fs::remove_dir_all(dir.join("kvm_amd")).unwrap();
        assert_eq!(kvm_module(&dir, &flags(&["svm"])), "kvm_pvm");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(kvm_module(&dir, &flags(&["svm"])), "");
    }

    #[test]
    fn meminfo_fields_in_bytes() {
        let text = "MemTotal:        2000000 kB\nMemFree:  100 kB\nMemAvailable:    1500000 kB\nSwapFree: x kB\n";
        assert_eq!(meminfo_bytes(text, "MemAvailable"), Some(1_536_000_000));
        assert_eq!(meminfo_bytes(text, "MemFree"), Some(102_400));
        assert_eq!(meminfo_bytes(text, "Mem"), None, "whole names only");
        assert_eq!(meminfo_bytes(text, "SwapFree"), None);
        assert_eq!(meminfo_bytes(text, "SwapTotal"), None);
    }

    #[test]
    fn probe_fills_the_basics_on_linux() {
        let m = Machine::probe();
        assert!(m.logical_cpus >= 1);
        assert!(!m.cpu_model.is_empty());
        assert!(!m.kernel_release.is_empty());
        assert!(m.tsc_khz > 0);
        // A step of more than a microsecond would make the TSC useless here.
        let q = m.tsc_quantum_ticks.expect("the quantum is measured");
        assert!(q >= 1.0 && q < m.tsc_khz as f64 / 1000.0, "{q}");
        assert!(!m.lfence.source.is_empty() && !m.pmu.is_empty());
    }
}
