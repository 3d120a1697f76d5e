//! Facts about the machine the numbers describe, from the shared
//! [`xvmm_results::Machine`] probe (CPUID runs there, once, before anything is
//! measured: in a guest every CPUID exits to the hypervisor).

use xvmm_results::{Environment, HostFacts, Machine};

/// KVM's CPUID 0x40000000 signature, NULs trimmed.
pub const KVM_SIGNATURE: &str = "KVMKVMKVM";

/// The report's summary of the machine.
pub fn host_facts(machine: &Machine) -> HostFacts {
    HostFacts {
        cpu_model: machine.cpu_model.clone(),
        tsc_khz: machine.tsc_khz,
        hypervisor_signature: machine.hypervisor_signature.clone(),
        kvm_module: machine.kvm_module.clone(),
        kernel_release: machine.kernel_release.clone(),
        kpti: machine.kpti(),
    }
}

/// A Linux guest of xvmm needs both KVM underneath and xvmm's channel; KVM
/// alone (a cloud VM) counts as the bare-metal side of the comparison.
pub fn environment(machine: &Machine, vmm_channel: bool) -> Environment {
    if machine.hypervisor_signature == KVM_SIGNATURE && vmm_channel {
        Environment::LinuxVm
    } else {
        Environment::BareMetal
    }
}

/// Caveats about the machine a reader of the numbers must see.
pub fn notes(machine: &Machine) -> Vec<String> {
    let mut notes = vec![format!(
        "TSC rate {} kHz from {}",
        machine.tsc_khz,
        if machine.tsc_khz_source.is_empty() {
            "nowhere (unknown)"
        } else {
            &machine.tsc_khz_source
        }
    )];
    if machine.thp.is_empty() {
        notes.push("THP not available in this kernel".into());
    } else {
        notes.push(format!(
            "THP enabled={} (transparent_hugepage/enabled); the fault regions are MADV_NOHUGEPAGE",
            machine.thp
        ));
    }
    if !machine.flags.is_empty() && !machine.flags.iter().any(|f| f == "constant_tsc") {
        notes.push("CPU lacks constant_tsc: TSC ticks may not be a fixed time unit".into());
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(signature: &str) -> Machine {
        Machine {
            hypervisor_signature: signature.into(),
            tsc_khz: 2_445_000,
            tsc_khz_source: "calibrated".into(),
            thp: "madvise".into(),
            flags: vec!["rdtscp".into()],
            ..Machine::default()
        }
    }

    #[test]
    fn linux_vm_needs_kvm_and_the_channel() {
        assert_eq!(
            environment(&machine(KVM_SIGNATURE), true),
            Environment::LinuxVm
        );
        assert_eq!(
            environment(&machine(KVM_SIGNATURE), false),
            Environment::BareMetal
        );
        assert_eq!(
            environment(&machine("Microsoft Hv"), true),
            Environment::BareMetal
        );
        assert_eq!(environment(&machine(""), false), Environment::BareMetal);
    }

    #[test]
    fn notes_name_tsc_source_thp_and_missing_constant_tsc() {
        let notes = notes(&machine(""));
        assert!(
            notes[0].contains("2445000 kHz from calibrated"),
            "{notes:?}"
        );
        assert!(notes[1].contains("enabled=madvise"), "{notes:?}");
        assert!(notes[2].contains("constant_tsc"), "{notes:?}");
        let facts = host_facts(&machine(KVM_SIGNATURE));
        assert_eq!(
            (facts.tsc_khz, facts.hypervisor_signature.as_str()),
            (2_445_000, "KVMKVMKVM")
        );
    }
}
