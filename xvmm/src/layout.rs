//! Guest physical address layout and guest-visible port numbers.
//! Pure data: no KVM, no I/O, so it can be unit-tested and shared by every guest kind.
//!
//! ```text
//! 0x0000_0000  real-mode IVT / BIOS data area (left zero)
//! 0x0000_0500  boot GDT, 6 entries          (BOOT_GDT_GPA)
//! 0x0000_0540  boot IDT (empty)             (BOOT_IDT_GPA)
//! 0x0000_6000  PVH hvm_start_info, modules, memory map
//! 0x0000_7000  Linux zero page (boot_params) (ZERO_PAGE_GPA)
//! 0x0000_8ff0  boot stack top               (BOOT_STACK_TOP)
//! 0x0000_9000  identity page tables: PML4, PDPT, 4 PDs (PAGE_TABLES_GPA .. +0x6000)
//! 0x0002_0000  kernel command line          (CMDLINE_GPA, up to CMDLINE_MAX_SIZE)
//! 0x0009_fc00  EBDA .. 0x0010_0000: reserved (legacy ROM / VGA hole)
//! 0x000f_0000  MP table, Linux guests (MP_TABLE_GPA, boot::mptable)
//! 0x0010_0000  high memory: the kernel, then free RAM; the initrd at the top of low RAM
//! 0xc000_0000  32-bit MMIO hole (LAPIC, IOAPIC, TSS, identity map page) up to 4 GiB
//! 0xd000_0000  results slot (RESULTS_GPA, RESULTS_SIZE): own memory slot, E820 reserved
//! 0x1_0000_0000 RAM beyond 3 GiB continues here
//! ```

pub use xvmm_results::channel::{
    CMDLINE_RESULTS_PARAM, PORT_CALIBRATE, PORT_DROP_PAGES, PORT_EXIT, PORT_INTERVALS,
    PORT_RESULTS_DOORBELL, RESULTS_GPA, RESULTS_SIZE,
};

/// Guest page size.
pub const PAGE_SIZE: u64 = 0x1000;

/// Boot GDT (see `arch::x86_64::regs::BOOT_GDT`).
pub const BOOT_GDT_GPA: u64 = 0x500;
/// Boot IDT: an empty table; the guest installs its own before enabling interrupts.
pub const BOOT_IDT_GPA: u64 = 0x540;
/// PVH `hvm_start_info`, followed by the module list and the memory map.
pub const PVH_START_INFO_GPA: u64 = 0x6000;
/// PVH module list (the initrd), right after `hvm_start_info` (56 bytes).
pub const PVH_MODLIST_GPA: u64 = 0x6040;
/// PVH memory map table (24 bytes per entry, room for 64 entries below the zero page).
pub const PVH_MEMMAP_GPA: u64 = 0x6080;
/// Maximum number of PVH memory map entries that fit before the zero page.
pub const PVH_MEMMAP_MAX_ENTRIES: usize = ((ZERO_PAGE_GPA - PVH_MEMMAP_GPA) / 24) as usize;
/// Linux zero page (`struct boot_params`, 4 KiB).
pub const ZERO_PAGE_GPA: u64 = 0x7000;
/// Initial stack pointer for the boot vCPU.
pub const BOOT_STACK_TOP: u64 = 0x8ff0;
/// Identity-mapping page tables: PML4, PDPT, then 4 page directories of 2 MiB pages.
pub const PAGE_TABLES_GPA: u64 = 0x9000;
/// Bytes used by the identity-mapping page tables.
pub const PAGE_TABLES_SIZE: u64 = 6 * PAGE_SIZE;
/// Kernel command line.
pub const CMDLINE_GPA: u64 = 0x2_0000;
/// Room reserved for the command line (including its NUL); the protocol's own limit
/// may be smaller.
pub const CMDLINE_MAX_SIZE: u64 = 0x1_0000;
/// Start of the Extended BIOS Data Area; everything from here to 1 MiB is reserved.
pub const EBDA_START: u64 = 0x9_fc00;
/// The MP table's floating pointer: the start of the BIOS area Linux
/// scans for one (inside the reserved legacy hole).
pub const MP_TABLE_GPA: u64 = 0xf_0000;
/// Where "high memory" (and the kernel) starts.
pub const HIMEM_START: u64 = 0x10_0000;

/// Start of the 32-bit MMIO hole: low RAM ends here at the latest.
pub const MMIO_HOLE_START: u64 = 0xc000_0000;
/// End of the 32-bit MMIO hole: RAM above 3 GiB continues here.
pub const MMIO_HOLE_END: u64 = 1 << 32;
/// Three pages KVM needs for its real-mode TSS on Intel (KVM_SET_TSS_ADDR).
pub const TSS_GPA: u64 = 0xfffb_d000;
/// One page KVM needs for its real-mode identity map on Intel (KVM_SET_IDENTITY_MAP_ADDR).
pub const IDENTITY_MAP_GPA: u64 = 0xfffb_c000;

/// 16550 UART (COM1) base port and its ISA IRQ.
pub const UART_PORT: u16 = 0x3f8;
/// Number of UART registers.
pub const UART_PORT_COUNT: u16 = 8;
/// ISA IRQ of COM1.
pub const UART_IRQ: u32 = 4;
/// i8042 keyboard controller data port.
pub const I8042_DATA_PORT: u16 = 0x60;
/// i8042 keyboard controller command/status port.
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// i8042 command that pulses the CPU reset line.
pub const I8042_CMD_RESET: u8 = 0xfe;

// The boot stack sits between the zero page and the page tables.
const _: () =
    assert!(BOOT_STACK_TOP < PAGE_TABLES_GPA && BOOT_STACK_TOP > ZERO_PAGE_GPA + PAGE_SIZE);
// The results slot sits in the hole, clear of KVM's private pages.
const _: () =
    assert!(RESULTS_GPA >= MMIO_HOLE_START && RESULTS_GPA + RESULTS_SIZE <= IDENTITY_MAP_GPA);

/// A range of guest RAM: `[start, start + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamRange {
    pub start: u64,
    pub size: u64,
}

impl RamRange {
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

/// Splits `mem_bytes` of RAM starting at GPA 0 around the 32-bit MMIO hole.
pub fn ram_ranges(mem_bytes: u64) -> Vec<RamRange> {
    let low = mem_bytes.min(MMIO_HOLE_START);
    let mut ranges = vec![RamRange {
        start: 0,
        size: low,
    }];
    if mem_bytes > low {
        ranges.push(RamRange {
            start: MMIO_HOLE_END,
            size: mem_bytes - low,
        });
    }
    ranges
}

/// End of RAM below 4 GiB (the exclusive upper bound of the first RAM range).
pub fn low_ram_end(mem_bytes: u64) -> u64 {
    mem_bytes.min(MMIO_HOLE_START)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_memory_is_one_range() {
        assert_eq!(
            ram_ranges(512 << 20),
            vec![RamRange {
                start: 0,
                size: 512 << 20
            }]
        );
    }

    #[test]
    fn large_memory_is_split_around_the_hole() {
        let r = ram_ranges(4 << 30);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].end(), MMIO_HOLE_START);
        assert_eq!(r[1].start, MMIO_HOLE_END);
        assert_eq!(r[0].size + r[1].size, 4 << 30);
    }

    #[test]
    fn fixed_areas_do_not_overlap() {
        // Each boot structure must end before the next one starts.
        let areas = [
            (BOOT_GDT_GPA, 48),
            (BOOT_IDT_GPA, 8),
            (PVH_START_INFO_GPA, 56),
            (PVH_MODLIST_GPA, 32),
            (PVH_MEMMAP_GPA, PVH_MEMMAP_MAX_ENTRIES as u64 * 24),
            (ZERO_PAGE_GPA, PAGE_SIZE),
            (PAGE_TABLES_GPA, PAGE_TABLES_SIZE),
            (CMDLINE_GPA, CMDLINE_MAX_SIZE),
            (EBDA_START, HIMEM_START - EBDA_START),
        ];
        for pair in areas.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:x?}");
        }
    }
}
