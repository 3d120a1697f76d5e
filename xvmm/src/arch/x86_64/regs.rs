//! Register state for the two entry protocols xvmm starts guests with:
//! - [`BootEntry::Linux64`]: 64-bit Linux boot protocol: long mode, paging with an
//!   identity map, `__BOOT_CS` = 0x10 and `__BOOT_DS` = 0x18, RSI = zero page.
//! - [`BootEntry::Pvh`]: PVH: 32-bit protected mode without paging, flat segments,
//!   a 32-bit TSS, EBX = `hvm_start_info`.
//!
//! The vCPU's CPUID must already be set (see [`crate::vcpu::Vcpu::new`]): real KVM
//! rejects long-mode sregs before KVM_SET_CPUID2.

use super::gdt::{flags, gdt_entry, kvm_segment_from_gdt};
use super::msr::{EFER_LMA, EFER_LME};
use super::paging;
use crate::layout;
use crate::{Error, Result};
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_sregs};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub const X86_CR0_PE: u64 = 1 << 0;
pub const X86_CR0_ET: u64 = 1 << 4;
pub const X86_CR0_NE: u64 = 1 << 5;
pub const X86_CR0_PG: u64 = 1 << 31;
pub const X86_CR4_PAE: u64 = 1 << 5;
/// XSETBV and XGETBV allowed (needs XSAVE in the guest's CPUID).
pub const X86_CR4_OSXSAVE: u64 = 1 << 18;
/// RFLAGS bit 1 is reserved and always set.
pub const RFLAGS_RESERVED: u64 = 1 << 1;

/// GDT indices of the boot GDT.
pub const GDT_CODE64: u8 = 2;
pub const GDT_DATA: u8 = 3;
pub const GDT_TSS: u8 = 4;
pub const GDT_CODE32: u8 = 5;

/// The boot GDT: the Linux boot protocol wants `__BOOT_CS` at 0x10 and
/// `__BOOT_DS` at 0x18; PVH wants flat 32-bit code (0x28 here) and a TSS.
pub const BOOT_GDT: [u64; 6] = [
    0,
    0,
    gdt_entry(flags::CODE64_KERNEL, 0, 0xfffff),
    gdt_entry(flags::DATA_KERNEL, 0, 0xfffff),
    gdt_entry(flags::TSS64, 0, 0x67),
    gdt_entry(flags::CODE32_KERNEL, 0, 0xfffff),
];

/// The boot GDT's size in bytes less one.
#[allow(clippy::cast_possible_truncation, reason = "6 entries of 8 bytes: 47")]
const BOOT_GDT_LIMIT: u16 = (BOOT_GDT.len() * 8 - 1) as u16;

/// How a guest starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootEntry {
    /// 64-bit Linux boot protocol: RIP = `entry`, RSI = `zero_page`.
    Linux64 { entry: u64, zero_page: u64 },
    /// PVH: 32-bit protected mode, RIP = `entry`, RBX = `start_info`.
    Pvh { entry: u64, start_info: u64 },
}

/// Writes the boot GDT and an empty IDT into guest memory.
pub fn write_boot_gdt_idt(memory: &GuestMemoryMmap) -> Result<()> {
    let gdt: Vec<u8> = BOOT_GDT.iter().flat_map(|e| e.to_le_bytes()).collect();
    memory
        .write_slice(&gdt, GuestAddress(layout::BOOT_GDT_GPA))
        .map_err(|e| Error::Memory(format!("cannot write the boot GDT: {e}")))?;
    memory
        .write_obj(0u64, GuestAddress(layout::BOOT_IDT_GPA))
        .map_err(|e| Error::Memory(format!("cannot write the boot IDT: {e}")))
}

fn set_flat_segments(sregs: &mut kvm_sregs, code_index: u8) {
    let code = kvm_segment_from_gdt(BOOT_GDT[code_index as usize], code_index);
    let data = kvm_segment_from_gdt(BOOT_GDT[GDT_DATA as usize], GDT_DATA);
    let mut tss = kvm_segment_from_gdt(BOOT_GDT[GDT_TSS as usize], GDT_TSS);
    // VM entry requires TR to be a busy TSS (type 11: 32-bit busy, or 64-bit busy
    // in long mode).
    tss.type_ = 11;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    sregs.gdt.base = layout::BOOT_GDT_GPA;
    sregs.gdt.limit = BOOT_GDT_LIMIT;
    sregs.idt.base = layout::BOOT_IDT_GPA;
    sregs.idt.limit = 7;
}

/// Long mode with paging through the identity map whose PML4 is at `cr3`.
pub fn long_mode_sregs(sregs: &mut kvm_sregs, cr3: u64) {
    set_flat_segments(sregs, GDT_CODE64);
    sregs.cr0 = X86_CR0_PE | X86_CR0_ET | X86_CR0_NE | X86_CR0_PG;
    sregs.cr3 = cr3;
    sregs.cr4 = X86_CR4_PAE;
    sregs.efer = EFER_LME | EFER_LMA;
}

/// 32-bit protected mode, paging off (PVH: "CR0: PE and ET set, all others clear").
pub fn protected_mode_sregs(sregs: &mut kvm_sregs) {
    set_flat_segments(sregs, GDT_CODE32);
    sregs.cr0 = X86_CR0_PE | X86_CR0_ET;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
}

/// General-purpose registers for `entry`.
pub fn boot_regs(entry: &BootEntry) -> kvm_regs {
    let mut regs = kvm_regs {
        rflags: RFLAGS_RESERVED,
        rsp: layout::BOOT_STACK_TOP,
        rbp: layout::BOOT_STACK_TOP,
        ..Default::default()
    };
    match *entry {
        BootEntry::Linux64 { entry, zero_page } => {
            regs.rip = entry;
            regs.rsi = zero_page;
        }
        BootEntry::Pvh { entry, start_info } => {
            regs.rip = entry;
            regs.rbx = start_info;
        }
    }
    regs
}

/// x87 and SSE control words as after FNINIT / reset.
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

/// Puts the vCPU into the state `entry` asks for: GDT/IDT (and page tables for
/// 64-bit) in memory, sregs, regs, FPU.
pub fn setup_boot_cpu(vcpu: &VcpuFd, memory: &GuestMemoryMmap, entry: &BootEntry) -> Result<()> {
    write_boot_gdt_idt(memory)?;
    let mut sregs = vcpu
        .get_sregs()
        .map_err(|e| Error::Kvm(format!("KVM_GET_SREGS failed: {e}")))?;
    match entry {
        BootEntry::Linux64 { .. } => {
            let cr3 = paging::write_identity_tables(memory, layout::PAGE_TABLES_GPA)?;
            long_mode_sregs(&mut sregs, cr3);
        }
        BootEntry::Pvh { .. } => protected_mode_sregs(&mut sregs),
    }
    vcpu.set_sregs(&sregs)
        .map_err(|e| Error::Kvm(format!("KVM_SET_SREGS failed: {e}")))?;
    vcpu.set_regs(&boot_regs(entry))
        .map_err(|e| Error::Kvm(format!("KVM_SET_REGS failed: {e}")))?;
    vcpu.set_fpu(&boot_fpu())
        .map_err(|e| Error::Kvm(format!("KVM_SET_FPU failed: {e}")))
}

/// Local APIC LVT registers and delivery modes.
const APIC_LVT_LINT0: usize = 0x350;
const APIC_LVT_LINT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

fn set_delivery_mode(reg: u32, mode: u32) -> u32 {
    (reg & !0x700) | (mode << 8)
}

/// Wires LINT0 to ExtINT (the legacy PIC) and LINT1 to NMI, as a BIOS does.
/// Needs the in-kernel irqchip.
pub fn setup_lint(vcpu: &VcpuFd) -> Result<()> {
    let mut lapic = vcpu
        .get_lapic()
        .map_err(|e| Error::Kvm(format!("KVM_GET_LAPIC failed: {e}")))?;
    for (offset, mode) in [
        (APIC_LVT_LINT0, APIC_MODE_EXTINT),
        (APIC_LVT_LINT1, APIC_MODE_NMI),
    ] {
        let bytes: Vec<u8> = lapic.regs[offset..offset + 4]
            .iter()
            .map(|b| b.to_ne_bytes()[0])
            .collect();
        let value = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let new = set_delivery_mode(value, mode).to_le_bytes();
        for (dst, src) in lapic.regs[offset..offset + 4].iter_mut().zip(new) {
            *dst = libc::c_char::from_ne_bytes([src]);
        }
    }
    vcpu.set_lapic(&lapic)
        .map_err(|e| Error::Kvm(format!("KVM_SET_LAPIC failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_mode_state() {
        let mut s = kvm_sregs::default();
        long_mode_sregs(&mut s, 0x9000);
        assert_eq!(s.cs.selector, 0x10, "__BOOT_CS");
        assert_eq!(s.ds.selector, 0x18, "__BOOT_DS");
        assert_eq!((s.cs.l, s.cs.db), (1, 0));
        assert_eq!(s.efer & (EFER_LME | EFER_LMA), EFER_LME | EFER_LMA);
        assert_ne!(s.cr0 & X86_CR0_PG, 0);
        assert_ne!(s.cr4 & X86_CR4_PAE, 0);
        assert_eq!(s.cr3, 0x9000);
        assert_eq!(s.gdt.limit, 47);
        assert_eq!((s.tr.type_, s.tr.limit, s.tr.present), (11, 0x67, 1));
    }

    #[test]
    fn pvh_state() {
        let mut s = kvm_sregs::default();
        protected_mode_sregs(&mut s);
        assert_eq!(
            (s.cs.l, s.cs.db, s.cs.limit, s.cs.base),
            (0, 1, 0xffff_ffff, 0)
        );
        assert_eq!((s.ss.limit, s.ss.type_), (0xffff_ffff, 3));
        assert_eq!(s.cr0, X86_CR0_PE | X86_CR0_ET);
        assert_eq!(s.efer, 0);
        let r = boot_regs(&BootEntry::Pvh {
            entry: 0x100_0000,
            start_info: 0x6000,
        });
        assert_eq!((r.rip, r.rbx, r.rflags), (0x100_0000, 0x6000, 2));
        let r = boot_regs(&BootEntry::Linux64 {
            entry: 0x100_0200,
            zero_page: 0x7000,
        });
        assert_eq!((r.rip, r.rsi), (0x100_0200, 0x7000));
    }

    #[test]
    fn lint_delivery_modes() {
        // Masked LINT0 with fixed mode becomes ExtINT, mask and other bits kept.
        assert_eq!(
            set_delivery_mode(0x0001_0000, APIC_MODE_EXTINT),
            0x0001_0700
        );
        assert_eq!(set_delivery_mode(0x0000_07ff, APIC_MODE_NMI), 0x0000_04ff);
    }
}
