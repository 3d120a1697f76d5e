//! The CPU tables of the microguest, built as plain data: GDT, TSS, IDT and the
//! page tables with user (U/S=1) and kernel-only pages. Pure and unit-tested;
//! [`super::machine`] writes them into guest memory.

use super::guest::KernelEntries;
use super::layout::{self, selector, PAGE};
use crate::arch::x86_64::gdt::{flags, gdt_entry};
use crate::arch::x86_64::paging::{PTE_ADDR, PTE_P, PTE_PS, PTE_RW, PTE_US};

/// 32-bit user code (unused, but SYSRET's layout needs the slot).
const CODE32_USER: u16 = 0xc0fb;

/// GDT: null, kernel code/data, user code32/data/code64, the SYSEXIT data
/// copy, then the two-slot 64-bit TSS descriptor (see [`layout::selector`]).
pub fn gdt() -> [u64; GDT_ENTRIES] {
    let tss_base = layout::TSS_GPA;
    [
        0,
        gdt_entry(flags::CODE64_KERNEL, 0, 0xfffff),
        gdt_entry(flags::DATA_KERNEL, 0, 0xfffff),
        gdt_entry(CODE32_USER, 0, 0xfffff),
        gdt_entry(flags::DATA_USER, 0, 0xfffff),
        gdt_entry(flags::CODE64_USER, 0, 0xfffff),
        gdt_entry(flags::DATA_USER, 0, 0xfffff),
        // A 64-bit TSS descriptor: the base's low half here, its high half
        // in the next slot.
        gdt_entry(flags::TSS64, (tss_base & 0xffff_ffff) as u32, TSS_LIMIT),
        tss_base >> 32,
    ]
}

/// Entries in [`gdt`].
pub const GDT_ENTRIES: usize = 9;
/// [`gdt`]'s limit: its size in bytes less one.
#[allow(clippy::cast_possible_truncation, reason = "9 entries of 8 bytes: 71")]
pub const GDT_LIMIT: u16 = (GDT_ENTRIES * 8 - 1) as u16;

/// Size of the 64-bit TSS without an I/O permission bitmap.
pub const TSS_SIZE: usize = 104;
/// The TSS descriptor's limit: the TSS's size less one.
#[allow(clippy::cast_possible_truncation, reason = "TSS_SIZE is 104")]
const TSS_LIMIT: u32 = TSS_SIZE as u32 - 1;
/// The TSS's I/O bitmap offset: its size (no bitmap).
#[allow(clippy::cast_possible_truncation, reason = "TSS_SIZE is 104")]
const TSS_IOMAP_BASE: u16 = TSS_SIZE as u16;

/// The TSS: RSP0 for entries from user mode, IST1 for double faults, and an
/// I/O bitmap offset past the limit (none: user port access relies on IOPL 3).
pub fn tss() -> [u8; TSS_SIZE] {
    let mut t = [0u8; TSS_SIZE];
    t[4..12].copy_from_slice(&layout::KERNEL_STACK_TOP.to_le_bytes());
    t[36..44].copy_from_slice(&layout::IST_STACK_TOP.to_le_bytes());
    t[102..104].copy_from_slice(&TSS_IOMAP_BASE.to_le_bytes());
    t
}

/// One 16-byte 64-bit interrupt gate.
pub fn idt_gate(handler: u64, dpl: u8, ist: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0..2].copy_from_slice(&((handler & 0xffff) as u16).to_le_bytes());
    g[2..4].copy_from_slice(&selector::KERNEL_CS.to_le_bytes());
    g[4] = ist & 7;
    // Present, DPL, type 0xE (64-bit interrupt gate: IF cleared on entry).
    g[5] = 0x80 | ((dpl & 3) << 5) | 0xe;
    g[6..8].copy_from_slice(&(((handler >> 16) & 0xffff) as u16).to_le_bytes());
    g[8..12].copy_from_slice(&((handler >> 32) as u32).to_le_bytes());
    g
}

pub const VECTOR_DF: usize = 8;
pub const VECTOR_UD: usize = 6;
pub const VECTOR_BP: usize = 3;
pub const VECTOR_PF: usize = 14;
pub const VECTOR_INT_N: usize = 0x80;
/// The self-IPI the APIC rows send (`asm/kernel.S` spells it too).
pub const VECTOR_IPI: usize = 0xf0;
/// The LAPIC timer's vector in the timer rows.
pub const VECTOR_TIMER: usize = 0xf1;
/// The IPI the IPI rows' sender sends the receiver vCPU.
pub const VECTOR_AP_IPI: usize = 0xf2;

/// The IDT: the measured vectors go to their handlers (#BP and int 0x80 with
/// DPL 3 so user code may raise them), the APIC rows' two interrupt vectors
/// to the handler that counts and acknowledges them, #DF runs on IST1,
/// every other vector reports itself as unexpected.
pub fn idt(entries: &KernelEntries) -> Vec<u8> {
    let mut idt = Vec::with_capacity(256 * 16);
    for vector in 0..256usize {
        let gate = match vector {
            VECTOR_PF => idt_gate(entries.page_fault, 0, 0),
            VECTOR_BP => idt_gate(entries.breakpoint, 3, 0),
            VECTOR_INT_N => idt_gate(entries.int_n, 3, 0),
            VECTOR_UD => idt_gate(entries.invalid_opcode, 0, 0),
            VECTOR_IPI | VECTOR_TIMER => idt_gate(entries.interrupt, 0, 0),
            VECTOR_AP_IPI => idt_gate(entries.receiver_interrupt, 0, 0),
            VECTOR_DF => idt_gate(entries.stubs + 16 * vector as u64, 0, 1),
            0..32 => idt_gate(entries.stubs + 16 * vector as u64, 0, 0),
            _ => idt_gate(entries.other, 0, 0),
        };
        idt.extend_from_slice(&gate);
    }
    idt
}

/// How a 4 KiB page of the low 2 MiB is mapped (`None`: not at all).
pub fn low_page_flags(gpa: u64) -> Option<u64> {
    let kernel = PTE_P | PTE_RW;
    let user = PTE_P | PTE_RW | PTE_US;
    match gpa {
        layout::GDT_GPA..layout::CONTROL_GPA => Some(kernel),
        layout::CONTROL_GPA => Some(user),
        _ if (layout::KERNEL_CODE_GPA..layout::KERNEL_CODE_GPA + layout::KERNEL_CODE_MAX)
            .contains(&gpa) =>
        {
            Some(kernel)
        }
        _ if (layout::USER_CODE_GPA..layout::USER_CODE_GPA + layout::USER_CODE_MAX)
            .contains(&gpa) =>
        {
            Some(PTE_P | PTE_US)
        }
        layout::USER_STACK_GPA..layout::USER_STACK_TOP => Some(user),
        layout::KERNEL_STACK_GPA..layout::AP_STACK_TOP => Some(kernel),
        // Not present until the #PF handler maps them.
        layout::PF_PAGE_A | layout::PF_PAGE_B => Some(PTE_RW | PTE_US),
        _ => None,
    }
}

/// The five page-table pages, each with the guest address it goes to.
pub fn page_tables() -> Vec<(u64, [u64; 512])> {
    let link = PTE_P | PTE_RW | PTE_US;
    let mut pml4 = [0u64; 512];
    pml4[0] = layout::PDPT_GPA | link;
    let mut pdpt = [0u64; 512];
    pdpt[0] = layout::PD_LOW_GPA | link;
    pdpt[3] = layout::PD_HIGH_GPA | link;
    let mut pd_low = [0u64; 512];
    pd_low[0] = layout::PT_LOW_GPA | link;
    let mut pt_low = [0u64; 512];
    for (i, pte) in pt_low.iter_mut().enumerate() {
        let gpa = i as u64 * PAGE;
        if let Some(flags) = low_page_flags(gpa) {
            *pte = gpa | flags;
        }
    }
    let mut pd_high = [0u64; 512];
    let high_index = |gpa: u64| ((gpa - (3 << 30)) / layout::LARGE_PAGE) as usize;
    let mut gpa = layout::SAMPLES_GPA;
    while gpa < layout::SAMPLES_GPA + layout::SAMPLES_SIZE {
        pd_high[high_index(gpa)] = gpa | link | PTE_PS;
        gpa += layout::LARGE_PAGE;
    }
    pd_high[high_index(layout::MMIO_GPA)] = layout::MMIO_GPA | link | PTE_PS;
    vec![
        (layout::PML4_GPA, pml4),
        (layout::PDPT_GPA, pdpt),
        (layout::PD_LOW_GPA, pd_low),
        (layout::PT_LOW_GPA, pt_low),
        (layout::PD_HIGH_GPA, pd_high),
    ]
}

/// Walks `tables` like the MMU: the physical address and whether user mode may
/// write `va`, or `None` if it is not mapped. For tests and sanity checks.
pub fn translate(tables: &[(u64, [u64; 512])], va: u64) -> Option<(u64, bool, bool)> {
    let table = |gpa: u64| tables.iter().find(|(a, _)| *a == gpa).map(|(_, t)| t);
    let mut entry_table = table(layout::PML4_GPA)?;
    let mut user = true;
    let mut writable = true;
    for level in (0..4).rev() {
        let index = ((va >> (12 + 9 * level)) & 511) as usize;
        let e = entry_table[index];
        if e & PTE_P == 0 {
            return None;
        }
        user &= e & PTE_US != 0;
        writable &= e & PTE_RW != 0;
        let base = e & PTE_ADDR;
        if level == 1 && e & PTE_PS != 0 {
            return Some((base + (va & (layout::LARGE_PAGE - 1)), user, writable));
        }
        if level == 0 {
            return Some((base + (va & (PAGE - 1)), user, writable));
        }
        entry_table = table(base)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::gdt::kvm_segment_from_gdt;

    #[test]
    fn gdt_matches_the_selectors_syscall_and_sysexit_use() {
        let g = gdt();
        let seg = |sel: u16| {
            let index = u8::try_from(sel >> 3).unwrap();
            kvm_segment_from_gdt(g[usize::from(index)], index)
        };
        let kcs = seg(selector::KERNEL_CS);
        assert_eq!((kcs.l, kcs.dpl, kcs.type_ & 8), (1, 0, 8));
        assert_eq!(seg(selector::KERNEL_SS).dpl, 0);
        // SYSRET: SS = base + 8, CS = base + 16, both DPL 3, CS 64-bit.
        assert_eq!(selector::SYSRET_BASE + 8 + 3, selector::USER_SS);
        assert_eq!(selector::SYSRET_BASE + 16 + 3, selector::USER_CS);
        let ucs = seg(selector::USER_CS);
        assert_eq!((ucs.l, ucs.dpl, ucs.selector), (1, 3, selector::USER_CS));
        assert_eq!(seg(selector::USER_SS).selector, selector::USER_SS);
        // SYSEXIT (64-bit): CS = SYSENTER_CS + 32, SS = SYSENTER_CS + 40.
        assert_eq!(selector::KERNEL_CS + 32 + 3, selector::USER_CS);
        assert_eq!(selector::KERNEL_CS + 40 + 3, selector::SYSEXIT_SS);
        let sysexit_ss = seg(selector::SYSEXIT_SS);
        assert_eq!((sysexit_ss.dpl, sysexit_ss.type_ & 8), (3, 0));
        let tss = kvm_segment_from_gdt(g[7], 7);
        assert_eq!((tss.base, tss.limit, tss.type_), (layout::TSS_GPA, 103, 9));
        assert_eq!(selector::TSS, 7 * 8);
    }

    #[test]
    fn tss_holds_the_stacks() {
        let t = tss();
        assert_eq!(
            u64::from_le_bytes(t[4..12].try_into().unwrap()),
            layout::KERNEL_STACK_TOP
        );
        assert_eq!(
            u64::from_le_bytes(t[36..44].try_into().unwrap()),
            layout::IST_STACK_TOP
        );
        assert_eq!(u16::from_le_bytes([t[102], t[103]]), 104);
    }

    #[test]
    fn idt_gate_encoding() {
        let g = idt_gate(0x1234_5678_9abc_def0, 3, 1);
        assert_eq!(
            g,
            [0xf0, 0xde, 0x08, 0x00, 0x01, 0xee, 0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0]
        );
        assert_eq!(idt_gate(0x10000, 0, 0)[5], 0x8e);
    }

    #[test]
    fn idt_routes_vectors() {
        let e = KernelEntries {
            start: 0x10000,
            page_fault: 0x10100,
            breakpoint: 0x10200,
            int_n: 0x10300,
            syscall: 0x10400,
            sysenter: 0x10500,
            invalid_opcode: 0x10600,
            interrupt: 0x10700,
            receiver_interrupt: 0x10800,
            receiver_start: 0x10900,
            stubs: 0x11000,
            other: 0x11200,
        };
        let idt = idt(&e);
        assert_eq!(idt.len(), 4096);
        let handler = |v: usize| {
            let g = &idt[v * 16..v * 16 + 16];
            u64::from(u16::from_le_bytes([g[0], g[1]]))
                | (u64::from(u16::from_le_bytes([g[6], g[7]])) << 16)
        };
        let dpl = |v: usize| (idt[v * 16 + 5] >> 5) & 3;
        assert_eq!((handler(14), dpl(14)), (0x10100, 0));
        assert_eq!((handler(3), dpl(3)), (0x10200, 3));
        assert_eq!((handler(0x80), dpl(0x80)), (0x10300, 3));
        assert_eq!(handler(13), 0x11000 + 13 * 16);
        assert_eq!(handler(6), 0x10600);
        assert_eq!(idt[8 * 16 + 4], 1, "#DF on IST1");
        assert_eq!((handler(0xf0), dpl(0xf0)), (0x10700, 0));
        assert_eq!((handler(0xf1), dpl(0xf1)), (0x10700, 0));
        assert_eq!((handler(0xf2), dpl(0xf2)), (0x10800, 0));
        assert_eq!(handler(0xef), 0x11200);
        assert_eq!(handler(0xf3), 0x11200);
        assert_eq!(handler(0x81), 0x11200);
        assert_eq!(handler(32), 0x11200);
    }

    #[test]
    fn page_tables_separate_user_and_kernel() {
        let t = page_tables();
        let map = |va| translate(&t, va);
        // Kernel-only structures and code.
        for va in [
            layout::GDT_GPA,
            layout::IDT_GPA,
            layout::PT_LOW_GPA,
            layout::KERNEL_CODE_GPA,
        ] {
            assert_eq!(map(va), Some((va, false, true)), "{va:#x}");
        }
        assert_eq!(map(layout::KERNEL_STACK_TOP - 8).map(|m| m.1), Some(false));
        // User pages: code read-only, stack and control block writable.
        assert_eq!(
            map(layout::USER_CODE_GPA + 0x10),
            Some((layout::USER_CODE_GPA + 0x10, true, false))
        );
        assert_eq!(
            map(layout::USER_STACK_TOP - 8),
            Some((layout::USER_STACK_TOP - 8, true, true))
        );
        assert_eq!(
            map(layout::CONTROL_GPA),
            Some((layout::CONTROL_GPA, true, true))
        );
        // The #PF pair starts not present; the null page is unmapped.
        assert_eq!(map(layout::PF_PAGE_A), None);
        assert_eq!(map(layout::PF_PAGE_B), None);
        assert_eq!(map(0), None);
        assert_eq!(
            map(layout::USER_STACK_TOP),
            None,
            "guard above the user stack"
        );
        // Samples and MMIO target: user-writable 2 MiB pages.
        let last = layout::SAMPLES_GPA + layout::SAMPLES_SIZE - 8;
        assert_eq!(map(last), Some((last, true, true)));
        assert_eq!(map(layout::SAMPLES_GPA + layout::SAMPLES_SIZE), None);
        assert_eq!(map(layout::MMIO_GPA), Some((layout::MMIO_GPA, true, true)));
        // The PF handler toggles PT entries by index: the pair lives in the low PT.
        let pt = &t.iter().find(|(a, _)| *a == layout::PT_LOW_GPA).unwrap().1;
        assert_eq!(
            pt[(layout::PF_PAGE_A / PAGE) as usize],
            layout::PF_PAGE_A | PTE_RW | PTE_US
        );
    }
}
