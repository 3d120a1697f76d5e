//! The one way a guest's VM and its vCPU are assembled: the VM (memory,
//! irqchip), its capabilities, then the vCPU (TSC frequency, CPUID, TSC
//! offset policy). What comes after (registers, memory contents) is the
//! guest's entry protocol.

use super::{Vcpu, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::Result;
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

/// A VM with its one vCPU, not yet running.
pub struct Machine {
    pub vm: Vm,
    pub vcpu: Vcpu,
    /// Whether accesses to unknown MSRs reach user space.
    pub user_space_msr: bool,
}

impl Machine {
    /// Creates the VM, enables what `spec` asks for and creates the vCPU.
    pub fn new(spec: &MachineSpec) -> Result<Machine> {
        let vm = Vm::new(&spec.vm)?;
        let user_space_msr = spec.user_space_msr && enable_user_space_msr(&vm);
        let vcpu = Vcpu::new(&vm, &spec.vcpu)?;
        Ok(Machine {
            vm,
            vcpu,
            user_space_msr,
        })
    }
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
