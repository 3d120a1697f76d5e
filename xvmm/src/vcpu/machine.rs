//! The one way a guest's VM and its vCPUs are assembled: the VM (memory,
//! irqchip), its capabilities, then the vCPUs (TSC frequency, CPUID, TSC
//! offset policy), the boot vCPU first. What comes after (registers, memory
//! contents) is the guest's entry protocol.

use super::{Vcpu, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::{Result, Setting};
use kvm_bindings::{kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_UNKNOWN};
use kvm_ioctls::Cap;

/// What to assemble.
#[derive(Clone, Debug)]
pub struct MachineSpec {
    pub vm: VmConfig,
    pub vcpu: VcpuConfig,
    /// Ask KVM to hand accesses to MSRs it does not know to user space
    /// (KVM_CAP_X86_USER_SPACE_MSR), where it can.
    pub user_space_msr: bool,
}

/// A VM with its vCPUs, not yet running.
pub struct Machine {
    pub vm: Vm,
    /// The boot vCPU (id 0).
    pub vcpu: Vcpu,
    /// The application processors, ids 1 to `nr_vcpus - 1`: with an
    /// in-kernel irqchip KVM holds them until the guest starts them (INIT,
    /// SIPI); they get no registers from the VMM.
    pub aps: Vec<Vcpu>,
    /// Whether accesses to unknown MSRs reach user space.
    pub user_space_msr: bool,
}

impl Machine {
    /// Creates the VM, enables what `spec` asks for and creates
    /// `spec.vcpu.nr_vcpus` vCPUs, `spec.vcpu` being the boot vCPU's
    /// configuration (every vCPU shares it but for its id).
    pub fn new(spec: &MachineSpec) -> Result<Machine> {
        let vm = Vm::new(&spec.vm)?;
        check_vcpu_count(spec.vcpu.nr_vcpus, vm.kvm.get_max_vcpus())?;
        let user_space_msr = spec.user_space_msr && enable_user_space_msr(&vm);
        let vcpu = Vcpu::new(&vm, &spec.vcpu)?;
        let aps = (1..spec.vcpu.nr_vcpus)
            .map(|id| Vcpu::new(&vm, &VcpuConfig { id, ..spec.vcpu }))
            .collect::<Result<Vec<_>>>()?;
        Ok(Machine {
            vm,
            vcpu,
            aps,
            user_space_msr,
        })
    }
}

/// Refuses 0 vCPUs and more than this KVM runs in one VM
/// (`KVM_CAP_MAX_VCPUS`, `kvm_max`).
pub fn check_vcpu_count(nr_vcpus: u8, kvm_max: usize) -> Result<()> {
    if nr_vcpus == 0 {
        return Err(Setting::Cpus.invalid("0: a guest needs at least one vCPU"));
    }
    if usize::from(nr_vcpus) > kvm_max {
        return Err(Setting::Cpus.invalid(format!(
            "{nr_vcpus}: this KVM runs at most {kvm_max} vCPUs in a VM (KVM_CAP_MAX_VCPUS)"
        )));
    }
    Ok(())
}

fn enable_user_space_msr(vm: &Vm) -> bool {
    if !vm.kvm.check_extension(Cap::X86UserSpaceMsr) {
        return false;
    }
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    cap.args[0] = u64::from(KVM_MSR_EXIT_REASON_UNKNOWN);
    vm.fd.enable_cap(&cap).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_kvm_cannot_run_is_refused_naming_the_limit() {
        assert!(check_vcpu_count(1, 1).is_ok());
        assert!(check_vcpu_count(4, 4).is_ok());
        let none = check_vcpu_count(0, 4).unwrap_err().to_string();
        assert!(none.contains("at least one vCPU"), "{none}");
        let many = check_vcpu_count(5, 4).unwrap_err().to_string();
        assert!(
            many.contains("at most 4 vCPUs") && many.contains("KVM_CAP_MAX_VCPUS"),
            "{many}"
        );
    }
}
