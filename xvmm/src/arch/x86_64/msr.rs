//! Model-specific registers: indices (including KVM's, which kvm-bindings lacks)
//! and the values a booting vCPU starts with.

use crate::{Error, Result};
use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;

pub const MSR_IA32_TSC: u32 = 0x10;
pub const MSR_IA32_APICBASE: u32 = 0x1b;
pub const MSR_IA32_ARCH_CAPABILITIES: u32 = 0x10a;
/// IA32_ARCH_CAPABILITIES bit 7: IA32_TSX_CTRL (0x122) exists.
pub const ARCH_CAP_TSX_CTRL_MSR: u64 = 1 << 7;
pub const MSR_IA32_SYSENTER_CS: u32 = 0x174;
pub const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
pub const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
pub const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
pub const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
pub const MSR_EFER: u32 = 0xc000_0080;
pub const MSR_STAR: u32 = 0xc000_0081;
pub const MSR_LSTAR: u32 = 0xc000_0082;
pub const MSR_CSTAR: u32 = 0xc000_0083;
pub const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
pub const MSR_FS_BASE: u32 = 0xc000_0100;
pub const MSR_GS_BASE: u32 = 0xc000_0101;
pub const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
pub const MSR_TSC_AUX: u32 = 0xc000_0103;

/// KVM paravirtual MSRs (Linux `arch/x86/include/uapi/asm/kvm_para.h`).
pub const MSR_KVM_WALL_CLOCK_NEW: u32 = 0x4b56_4d00;
pub const MSR_KVM_SYSTEM_TIME_NEW: u32 = 0x4b56_4d01;
pub const MSR_KVM_ASYNC_PF_EN: u32 = 0x4b56_4d02;
pub const MSR_KVM_STEAL_TIME: u32 = 0x4b56_4d03;
pub const MSR_KVM_PV_EOI_EN: u32 = 0x4b56_4d04;
pub const MSR_KVM_POLL_CONTROL: u32 = 0x4b56_4d05;
pub const MSR_KVM_ASYNC_PF_INT: u32 = 0x4b56_4d06;
pub const MSR_KVM_ASYNC_PF_ACK: u32 = 0x4b56_4d07;

/// IA32_MISC_ENABLE bit 0: fast string operations.
pub const MISC_ENABLE_FAST_STRING: u64 = 1;
/// MTRRdefType: MTRRs enabled (bit 11), default type write-back (6).
pub const MTRR_DEF_TYPE_ENABLED_WB: u64 = (1 << 11) | 6;
/// EFER bits.
pub const EFER_SCE: u64 = 1 << 0;
pub const EFER_LME: u64 = 1 << 8;
pub const EFER_LMA: u64 = 1 << 10;
pub const EFER_NXE: u64 = 1 << 11;

/// The MSR values a vCPU boots with: SYSCALL/SYSENTER cleared, fast strings on,
/// MTRRs enabled with write-back default (Linux otherwise maps RAM uncached).
pub fn boot_msr_entries() -> Vec<kvm_msr_entry> {
    let e = |index, data| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    };
    vec![
        e(MSR_IA32_SYSENTER_CS, 0),
        e(MSR_IA32_SYSENTER_ESP, 0),
        e(MSR_IA32_SYSENTER_EIP, 0),
        e(MSR_STAR, 0),
        e(MSR_CSTAR, 0),
        e(MSR_LSTAR, 0),
        e(MSR_KERNEL_GS_BASE, 0),
        e(MSR_SYSCALL_MASK, 0),
        e(MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        e(MSR_MTRR_DEF_TYPE, MTRR_DEF_TYPE_ENABLED_WB),
    ]
}

/// Writes `entries` into the vCPU; fails naming the first MSR KVM refused.
pub fn set_msrs(vcpu: &VcpuFd, entries: &[kvm_msr_entry]) -> Result<()> {
    let msrs = Msrs::from_entries(entries)
        .map_err(|e| Error::Kvm(format!("too many MSRs ({}): {e:?}", entries.len())))?;
    let written = vcpu
        .set_msrs(&msrs)
        .map_err(|e| Error::Kvm(format!("KVM_SET_MSRS failed: {e}")))?;
    if written != entries.len() {
        let refused = entries.get(written).map_or(0, |e| e.index);
        return Err(Error::Kvm(format!(
            "KVM_SET_MSRS refused MSR {refused:#x} ({written} of {} written)",
            entries.len()
        )));
    }
    Ok(())
}

/// Reads one MSR of the vCPU.
pub fn get_msr(vcpu: &VcpuFd, index: u32) -> Result<u64> {
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
        index,
        ..Default::default()
    }])
    .map_err(|e| Error::Kvm(format!("MSR buffer: {e:?}")))?;
    match vcpu.get_msrs(&mut msrs) {
        Ok(1) => Ok(msrs.as_slice()[0].data),
        Ok(_) => Err(Error::Kvm(format!("KVM_GET_MSRS refused MSR {index:#x}"))),
        Err(e) => Err(Error::Kvm(format!("KVM_GET_MSRS {index:#x} failed: {e}"))),
    }
}

/// Sets the boot MSRs ([`boot_msr_entries`]).
pub fn setup_boot_msrs(vcpu: &VcpuFd) -> Result<()> {
    set_msrs(vcpu, &boot_msr_entries())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_msrs_are_unique_and_enable_write_back_mtrrs() {
        let entries = boot_msr_entries();
        let mut indices: Vec<u32> = entries.iter().map(|e| e.index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), entries.len());
        let mtrr = entries
            .iter()
            .find(|e| e.index == MSR_MTRR_DEF_TYPE)
            .unwrap();
        assert_eq!(mtrr.data, 0x806);
    }
}
