//! x86-64 vCPU state.
//! - [`cpuid`]: guest CPUID from KVM_GET_SUPPORTED_CPUID plus the KVM hypervisor leaves.
//! - [`gdt`]: descriptor encoding and `kvm_segment` conversion.
//! - [`paging`]: identity page tables for a 64-bit boot.
//! - [`msr`]: MSR indices (KVM's included) and boot values.
//! - [`regs`]: sregs/regs/FPU for the Linux 64-bit and PVH entries, LAPIC LINT setup.

pub mod cpuid;
pub mod gdt;
pub mod msr;
pub mod paging;
pub mod regs;
