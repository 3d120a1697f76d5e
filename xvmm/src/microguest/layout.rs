//! The microguest's address space: every guest address is identity-mapped
//! (virtual = physical), so the guest code needs no relocation and the VMM can
//! read what the guest wrote at the same numbers. Pure constants.
//!
//! ```text
//! 0x0_1000  GDT                        kernel only
//! 0x0_2000  IDT                        kernel only
//! 0x0_3000  TSS (RSP0, IST1)           kernel only
//! 0x0_4000  PML4, PDPT, PD (0-1 GiB), PT (0-2 MiB), PD (3-4 GiB)
//! 0x0_9000  control block              user read/write (commands in, status out)
//! 0x1_0000  kernel code                kernel only
//! 0x2_0000  user code                  user, read-only
//! 0x3_0000  user stack                 user read/write
//! 0x4_0000  kernel stack, IST1 stack   kernel only
//! 0x4_c000  the second vCPU's stack    kernel only (the IPI rows' receiver)
//! 0x5_0000  #PF target pages A and B   user, present bit toggled by the #PF handler
//! 0xd000_0000  sample buffer = the results slot (2 MiB user pages)
//! 0xe000_0000  MMIO target: a 2 MiB user page with no memory slot behind it
//! ```

use xvmm_results::channel::{RESULTS_GPA, RESULTS_SIZE};

pub const PAGE: u64 = 0x1000;
pub const LARGE_PAGE: u64 = 0x20_0000;

pub const GDT_GPA: u64 = 0x1000;
pub const IDT_GPA: u64 = 0x2000;
pub const TSS_GPA: u64 = 0x3000;
pub const PML4_GPA: u64 = 0x4000;
pub const PDPT_GPA: u64 = 0x5000;
/// Page directory for 0..1 GiB; only its first entry (the low PT) is used.
pub const PD_LOW_GPA: u64 = 0x6000;
/// 4 KiB page table for 0..2 MiB: the only place the guest has 4 KiB pages.
pub const PT_LOW_GPA: u64 = 0x7000;
/// Page directory for 3..4 GiB (sample buffer and MMIO target, 2 MiB pages).
pub const PD_HIGH_GPA: u64 = 0x8000;
pub const CONTROL_GPA: u64 = 0x9000;
pub const KERNEL_CODE_GPA: u64 = 0x1_0000;
pub const KERNEL_CODE_MAX: u64 = 0x1_0000;
pub const USER_CODE_GPA: u64 = 0x2_0000;
pub const USER_CODE_MAX: u64 = 0x1_0000;
pub const USER_STACK_GPA: u64 = 0x3_0000;
pub const USER_STACK_TOP: u64 = 0x3_8000;
pub const KERNEL_STACK_GPA: u64 = 0x4_0000;
pub const KERNEL_STACK_TOP: u64 = 0x4_8000;
pub const IST_STACK_TOP: u64 = 0x4_c000;
/// The receiver vCPU's stack (the IPI rows' second vCPU, CPL0 only).
pub const AP_STACK_TOP: u64 = 0x5_0000;
/// Two adjacent pages, 8 KiB aligned: a fault on one makes it present and the
/// other not present, so alternating writes fault every time.
pub const PF_PAGE_A: u64 = 0x5_0000;
pub const PF_PAGE_B: u64 = PF_PAGE_A + PAGE;
/// Guest RAM the microguest needs (the VM minimum).
pub const MEM_BYTES: u64 = 2 << 20;

/// Stamps land here: the results slot, mapped for user mode.
pub const SAMPLES_GPA: u64 = RESULTS_GPA;
pub const SAMPLES_SIZE: u64 = RESULTS_SIZE;
/// A guest address with no memory slot: writes to it exit to the VMM as MMIO.
pub const MMIO_GPA: u64 = 0xe000_0000;
/// The address the mmio-write-eventfd exit writes, in the 2 MiB page the
/// tables map for [`MMIO_GPA`]: an ioeventfd serves it in the kernel.
pub const MMIO_EVENTFD_GPA: u64 = MMIO_GPA + PAGE;

/// Control block fields (byte offsets from [`CONTROL_GPA`]), written by the VMM
/// before a phase and, for the status/fault fields, by the guest.
pub mod control {
    pub const KIND: u64 = 0x00;
    pub const WARMUP: u64 = 0x08;
    pub const SAMPLES: u64 = 0x10;
    pub const STRIDE: u64 = 0x18;
    pub const BUFFER: u64 = 0x20;
    /// Kind-specific parameter (the imul chain length).
    pub const PARAM: u64 = 0x28;
    /// The guest writes [`super::DONE_MAGIC`] here when a phase finished.
    pub const STATUS: u64 = 0x30;
    /// Guest address of the user loop's "done" UD2 (written by the VMM).
    pub const USER_DONE: u64 = 0x38;
    /// Unexpected exception record: vector, error code, RIP, CS, RFLAGS, RSP, CR2.
    pub const FAULT: u64 = 0x40;
    pub const FAULT_WORDS: u64 = 7;
    /// The IPI rows' mailbox between the sender (vCPU 0) and the receiver
    /// (vCPU 1). The sender puts the current sample's address here before
    /// each IPI; the receiver's handler stamps into it.
    pub const AP_SAMPLE: u64 = 0x80;
    /// Set to 1 by the receiver's handler once it ran (what the sender
    /// waits for: kvm-unit-tests' ipi_done).
    pub const AP_ACK: u64 = 0x88;
    /// Set to 1 by the receiver's handler after its EOI and last stamp.
    pub const AP_EOI: u64 = 0x90;
    /// Set to 1 by the receiver once its APIC is on and it idles.
    pub const AP_READY: u64 = 0x98;
    /// The receiver's TSC as it went to halt (STI; HLT), 0 while it runs.
    pub const AP_HALT: u64 = 0xa0;
    /// Where warm-up iterations store their stamps (one 32-byte sample).
    pub const SCRATCH: u64 = 0x100;
}

/// Marks a phase the guest completed (against stale or guessed status values).
pub const DONE_MAGIC: u64 = 0x584d_4744_4f4e_4521;

/// Guest -> VMM ports (next to the shared PORT_EXIT/PORT_RESULTS_DOORBELL).
pub const PORT_DONE: u16 = 0x510;
/// The port the pio-out/pio-in exits are measured on.
pub const PORT_MEASURE: u16 = 0x511;
pub const PORT_FAULT: u16 = 0x512;
/// The port the pio-out-eventfd exit writes: an ioeventfd (KVM_IOEVENTFD)
/// serves it in the kernel, so the write never reaches xvmm.
pub const PORT_EVENTFD: u16 = 0x513;

/// The port of the PM timer xvmm serves to the pio-in-pmtimer row: where
/// QEMU's PIIX4 ACPI puts it (PM base 0x600, timer at +8).
pub const PORT_PM_TIMER: u16 = 0x608;

/// An MSR index KVM does not know: with KVM_CAP_X86_USER_SPACE_MSR its
/// accesses exit to the VMM.
pub const PROBE_MSR: u32 = 0x4b56_4dff;

/// Selectors. The order is fixed by SYSCALL/SYSRET (STAR) and SYSENTER/SYSEXIT
/// (IA32_SYSENTER_CS): kernel CS, kernel SS = CS + 8; SYSRET's user SS = base + 8
/// and CS = base + 16 with base 0x18; SYSEXIT's CS = SYSENTER_CS + 32 and
/// SS = SYSENTER_CS + 40.
pub mod selector {
    pub const KERNEL_CS: u16 = 0x08;
    pub const KERNEL_SS: u16 = 0x10;
    /// STAR bits 63:48: SYSRET loads SS from +8 and CS from +16.
    pub const SYSRET_BASE: u16 = 0x18;
    pub const USER_SS: u16 = 0x20 | 3;
    pub const USER_CS: u16 = 0x28 | 3;
    /// Second user data descriptor, for SYSEXIT's SS.
    pub const SYSEXIT_SS: u16 = 0x30 | 3;
    pub const TSS: u16 = 0x38;
}

/// RFLAGS for user mode: bit 1 (reserved, always 1) and IOPL 3 so user code may
/// use in/out; interrupts stay off (there is no interrupt controller).
pub const USER_RFLAGS: u64 = 0x3002;

// Layout facts the guest code relies on, checked at compile time.
const _: () = {
    assert!(PF_PAGE_B + PAGE <= LARGE_PAGE && LARGE_PAGE <= MEM_BYTES);
    // The #PF handler pairs the two target pages by 8 KiB.
    assert!(PF_PAGE_A.is_multiple_of(2 * PAGE));
    assert!(SAMPLES_GPA.is_multiple_of(LARGE_PAGE) && SAMPLES_SIZE.is_multiple_of(LARGE_PAGE));
    assert!(MMIO_GPA >= SAMPLES_GPA + SAMPLES_SIZE);
    assert!(MMIO_EVENTFD_GPA + 4 <= MMIO_GPA + LARGE_PAGE);
    assert!(control::FAULT + 8 * control::FAULT_WORDS <= control::AP_SAMPLE);
    assert!(control::AP_HALT + 8 <= control::SCRATCH);
    // The scratch sample holds the widest stride (the IPI rows' 40 bytes).
    assert!(control::SCRATCH + 40 <= PAGE);
    assert!(IST_STACK_TOP < AP_STACK_TOP && AP_STACK_TOP <= PF_PAGE_A);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_page_aligned_and_disjoint() {
        let regions = [
            (GDT_GPA, PAGE),
            (IDT_GPA, PAGE),
            (TSS_GPA, PAGE),
            (PML4_GPA, PAGE),
            (PDPT_GPA, PAGE),
            (PD_LOW_GPA, PAGE),
            (PT_LOW_GPA, PAGE),
            (PD_HIGH_GPA, PAGE),
            (CONTROL_GPA, PAGE),
            (KERNEL_CODE_GPA, KERNEL_CODE_MAX),
            (USER_CODE_GPA, USER_CODE_MAX),
            (USER_STACK_GPA, USER_STACK_TOP - USER_STACK_GPA),
            (KERNEL_STACK_GPA, IST_STACK_TOP - KERNEL_STACK_GPA),
            (IST_STACK_TOP, AP_STACK_TOP - IST_STACK_TOP),
            (PF_PAGE_A, 2 * PAGE),
        ];
        for pair in regions.windows(2) {
            assert_eq!(pair[0].0 % PAGE, 0);
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:x?}");
        }
    }
}
