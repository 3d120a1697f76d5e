//! CPU facts that decide how far the stamps can be trusted, read once with
//! CPUID outside any measured region: whether LFENCE is dispatch-serialising
//! (the stamps rely on it to keep work out of, and in, their window) and
//! whether user mode could read core cycles (a PMU).

use serde::{Deserialize, Serialize};

/// Whether LFENCE holds later instructions until earlier ones complete.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Lfence {
    /// `Some(true)` when the CPU says so, `None` when it cannot tell.
    pub serializing: Option<bool>,
    /// How that was decided.
    pub source: String,
}

impl Lfence {
    /// The warning a report carries when the stamps' fences may not hold.
    /// `None` also when nothing was probed (reports written before it).
    pub fn warning(&self) -> Option<String> {
        (self.serializing != Some(true) && !self.source.is_empty()).then(|| {
            format!(
                "LFENCE may not be dispatch-serialising here ({}): the stamps' fences may let work \
                 leak into or out of the measured window",
                self.source
            )
        })
    }
}

/// Decides from the vendor and CPUID 0x80000021 EAX (AMD: bit 2, "LFENCE is
/// always dispatch serializing").
pub fn lfence_from(vendor: &str, max_extended_leaf: u32, leaf_80000021_eax: u32) -> Lfence {
    match vendor {
        "GenuineIntel" => Lfence {
            serializing: Some(true),
            source: "Intel: LFENCE is architecturally dispatch-serialising".into(),
        },
        "AuthenticAMD" | "HygonGenuine"
            if max_extended_leaf >= 0x8000_0021 && leaf_80000021_eax & 4 != 0 =>
        {
            Lfence {
                serializing: Some(true),
                source: "CPUID 0x80000021 EAX bit 2 (LFENCE always serialising)".into(),
            }
        }
        "AuthenticAMD" | "HygonGenuine" => Lfence {
            serializing: None,
            source: "AMD CPU without CPUID 0x80000021 EAX bit 2: serialising only if the OS set \
                     MSR C001_1029 bit 1 (Linux does when it can; a hypervisor may not pass it on)"
                .into(),
        },
        other => Lfence {
            serializing: None,
            source: format!("vendor {other:?}: unknown"),
        },
    }
}

/// What is known about core-cycle counters, from CPUID: Intel's
/// architectural PMU (leaf 0xA) or AMD's core performance counters
/// (0x80000001 ECX bit 23).
pub fn pmu_from(vendor: &str, leaf_a_eax: u32, ext_1_ecx: u32) -> String {
    let present = match vendor {
        "GenuineIntel" => leaf_a_eax & 0xff != 0,
        "AuthenticAMD" | "HygonGenuine" => ext_1_ecx & (1 << 23) != 0,
        _ => false,
    };
    if present {
        "PMU present (CPUID): core cycles only where the producer can read them".into()
    } else {
        "no PMU (CPUID reports no core performance counters): TSC ticks only".into()
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)]
fn leaf(eax: u32) -> core::arch::x86_64::CpuidResult {
    // SAFETY: cpuid exists on every x86-64 CPU; unknown leaves return data.
    unsafe { core::arch::x86_64::__cpuid(eax) }
}

/// This CPU's LFENCE and PMU facts.
#[cfg(target_arch = "x86_64")]
pub fn probe() -> (Lfence, String) {
    let l0 = leaf(0);
    let vendor: Vec<u8> = [l0.ebx, l0.edx, l0.ecx]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let vendor = String::from_utf8_lossy(&vendor).into_owned();
    let max_ext = leaf(0x8000_0000).eax;
    let ext21 = if max_ext >= 0x8000_0021 {
        leaf(0x8000_0021).eax
    } else {
        0
    };
    let leaf_a = if l0.eax >= 0xa { leaf(0xa).eax } else { 0 };
    let ext1 = if max_ext >= 0x8000_0001 {
        leaf(0x8000_0001).ecx
    } else {
        0
    };
    (
        lfence_from(&vendor, max_ext, ext21),
        pmu_from(&vendor, leaf_a, ext1),
    )
}

#[cfg(not(target_arch = "x86_64"))]
pub fn probe() -> (Lfence, String) {
    (lfence_from("", 0, 0), pmu_from("", 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfence_by_vendor_and_cpuid() {
        assert_eq!(lfence_from("GenuineIntel", 0, 0).serializing, Some(true));
        let zen = lfence_from("AuthenticAMD", 0x8000_0022, 0x1800_0265);
        assert_eq!(zen.serializing, Some(true));
        assert!(zen.warning().is_none());
        // Leaf present but bit 2 clear, or the leaf beyond the maximum.
        for (max, eax) in [(0x8000_0022, 0x1800_0261), (0x8000_0020, 0x4)] {
            let l = lfence_from("AuthenticAMD", max, eax);
            assert_eq!(l.serializing, None);
            assert!(l.warning().unwrap().contains("C001_1029"));
        }
    }

    #[test]
    fn pmu_from_cpuid() {
        assert!(pmu_from("AuthenticAMD", 0, 0).starts_with("no PMU"));
        assert!(pmu_from("AuthenticAMD", 0, 1 << 23).starts_with("PMU present"));
        assert!(pmu_from("GenuineIntel", 0x0804_3004, 0).starts_with("PMU present"));
        assert!(pmu_from("GenuineIntel", 0, 0).starts_with("no PMU"));
    }

    #[test]
    fn this_machine_is_probed_without_a_fault() {
        let (lfence, pmu) = probe();
        assert!(!lfence.source.is_empty() && !pmu.is_empty());
    }
}
