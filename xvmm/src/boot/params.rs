//! What the guest kernel reads at entry: the zero page (`struct boot_params`) for
//! the 64-bit Linux boot protocol, `hvm_start_info` with its module list and
//! memory map for PVH, and where the initrd goes. Pure builders, unit-tested.

use super::e820::E820Entry;
use crate::layout;
use crate::{Error, Result};
use linux_loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use linux_loader::start_info::{hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info};

/// `type_of_loader` for a boot loader without an assigned id.
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
/// `hvm_start_info.magic`.
pub const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
/// Version 1 has the memory map fields.
const HVM_START_INFO_VERSION: u32 = 1;

/// A placed initrd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitrdPlacement {
    pub addr: u64,
    pub size: u64,
}

/// Places an initrd of `size` bytes page aligned at the top of low RAM, below
/// `addr_max` (the last byte it may occupy) and above `kernel_end`.
pub fn place_initrd(
    size: u64,
    low_ram_end: u64,
    kernel_end: u64,
    addr_max: u64,
) -> Result<InitrdPlacement> {
    let top = low_ram_end.min(addr_max.saturating_add(1));
    let fits = top
        .checked_sub(size)
        .map(|a| a & !(layout::PAGE_SIZE - 1))
        .filter(|a| *a >= kernel_end);
    // More guest memory helps only while low RAM, not the kernel's
    // initrd_addr_max or the 32-bit MMIO hole, is what limits the top.
    let hint = if low_ram_end <= addr_max && low_ram_end < layout::MMIO_HOLE_START {
        "raise --mem"
    } else if addr_max < low_ram_end {
        "the kernel accepts no initrd above that address (initrd_addr_max): use a smaller initrd"
    } else {
        "low memory ends at the 32-bit MMIO hole there: use a smaller initrd"
    };
    match fits {
        Some(addr) => Ok(InitrdPlacement { addr, size }),
        None => Err(Error::Initrd(format!(
            "initrd of {} does not fit: guest memory has {} free between the kernel (ending at {kernel_end:#x}) and {top:#x}; {hint}",
            mib(size),
            mib(top.saturating_sub(kernel_end))
        ))),
    }
}

/// Human-readable size in MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Builds the zero page from the kernel's setup header.
pub fn zero_page(
    header: &setup_header,
    cmdline_gpa: u64,
    initrd: Option<InitrdPlacement>,
    e820: &[E820Entry],
) -> Result<boot_params> {
    let mut params = boot_params {
        hdr: *header,
        ..Default::default()
    };
    params.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    params.hdr.cmd_line_ptr = u32::try_from(cmdline_gpa)
        .map_err(|_| Error::Cmdline(format!("command line at {cmdline_gpa:#x} is above 4 GiB")))?;
    params.ext_cmd_line_ptr = 0;
    if let Some(rd) = initrd {
        let addr = u32::try_from(rd.addr)
            .map_err(|_| Error::Initrd(format!("initrd at {:#x} is above 4 GiB", rd.addr)))?;
        let size = u32::try_from(rd.size)
            .map_err(|_| Error::Initrd(format!("initrd of {} is too large", mib(rd.size))))?;
        params.hdr.ramdisk_image = addr;
        params.hdr.ramdisk_size = size;
    }
    let entries = match u8::try_from(e820.len()) {
        Ok(n) if e820.len() <= params.e820_table.len() => n,
        _ => {
            return Err(Error::Memory(format!(
                "{} memory map entries, the zero page holds {}",
                e820.len(),
                params.e820_table.len()
            )))
        }
    };
    for (slot, e) in params.e820_table.iter_mut().zip(e820) {
        *slot = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind,
        };
    }
    params.e820_entries = entries;
    Ok(params)
}

/// PVH boot information: the start info, its module list (the initrd) and the
/// memory map, to be written at the given addresses.
pub struct PvhInfo {
    pub start_info: hvm_start_info,
    pub modules: Vec<hvm_modlist_entry>,
    pub memmap: Vec<hvm_memmap_table_entry>,
}

/// Builds the PVH start info (modules at [`layout::PVH_MODLIST_GPA`], memory map at
/// [`layout::PVH_MEMMAP_GPA`]).
pub fn pvh_info(
    cmdline_gpa: u64,
    initrd: Option<InitrdPlacement>,
    e820: &[E820Entry],
) -> Result<PvhInfo> {
    let memmap_entries = match u32::try_from(e820.len()) {
        Ok(n) if e820.len() <= layout::PVH_MEMMAP_MAX_ENTRIES => n,
        _ => {
            return Err(Error::Memory(format!(
                "{} memory map entries, room for {}",
                e820.len(),
                layout::PVH_MEMMAP_MAX_ENTRIES
            )))
        }
    };
    let memmap: Vec<hvm_memmap_table_entry> = e820
        .iter()
        .map(|e| hvm_memmap_table_entry {
            addr: e.addr,
            size: e.size,
            type_: e.kind,
            reserved: 0,
        })
        .collect();
    let modules: Vec<hvm_modlist_entry> = initrd
        .iter()
        .map(|rd| hvm_modlist_entry {
            paddr: rd.addr,
            size: rd.size,
            cmdline_paddr: 0,
            reserved: 0,
        })
        .collect();
    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: HVM_START_INFO_VERSION,
        flags: 0,
        // The initrd is the one module there can be.
        nr_modules: u32::from(initrd.is_some()),
        modlist_paddr: if modules.is_empty() {
            0
        } else {
            layout::PVH_MODLIST_GPA
        },
        cmdline_paddr: cmdline_gpa,
        rsdp_paddr: 0,
        memmap_paddr: layout::PVH_MEMMAP_GPA,
        memmap_entries,
        reserved: 0,
    };
    Ok(PvhInfo {
        start_info,
        modules,
        memmap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::e820::{memory_map, E820_RAM, E820_RESERVED};

    #[test]
    fn initrd_goes_to_the_top_of_low_ram_page_aligned() {
        let p = place_initrd(0x1800, 512 << 20, 0x200_0000, 0x7fff_ffff).unwrap();
        assert_eq!(p.addr, (512 << 20) - 0x2000);
        assert_eq!(p.addr % 4096, 0);
        // initrd_addr_max is the last byte the initrd may use.
        let p = place_initrd(0x1000, 1 << 30, 0x200_0000, 0x37ff_ffff).unwrap();
        assert_eq!(p.addr + p.size, 0x3800_0000);
    }

    #[test]
    fn initrd_that_does_not_fit_is_an_initrd_error() {
        let err = place_initrd(100 << 20, 64 << 20, 0x200_0000, 0x7fff_ffff).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("initrd: initrd of 100.0 MiB does not fit"),
            "{msg}"
        );
        assert!(msg.contains("32.0 MiB free"), "{msg}");
        assert!(msg.ends_with("; raise --mem"), "{msg}");
        assert!(place_initrd(u64::MAX, 64 << 20, 0, u64::MAX).is_err());
    }

    #[test]
    fn the_hint_names_the_limit_that_applies() {
        // initrd_addr_max (896 MiB here) caps the top of a 2 GiB guest.
        let err = place_initrd(1 << 30, 2 << 30, 0x200_0000, 0x37ff_ffff).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("initrd_addr_max") && !msg.contains("--mem"),
            "{msg}"
        );
        // Low RAM ends at the MMIO hole, whatever --mem says.
        let low = crate::layout::low_ram_end(8 << 30);
        let err = place_initrd(4 << 30, low, 0x200_0000, u64::MAX).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("MMIO hole") && !msg.contains("--mem"), "{msg}");
    }

    #[test]
    fn zero_page_fields() {
        let header = setup_header {
            header: 0x5372_6448,
            version: 0x020f,
            cmdline_size: 2047,
            ..Default::default()
        };
        let map = memory_map(&layout::ram_ranges(512 << 20));
        let rd = InitrdPlacement {
            addr: 0x1f00_0000,
            size: 0x12345,
        };
        let zp = zero_page(&header, layout::CMDLINE_GPA, Some(rd), &map).unwrap();
        assert_eq!({ zp.hdr.type_of_loader }, 0xff);
        assert_eq!({ zp.hdr.cmd_line_ptr }, 0x2_0000);
        assert_eq!(
            ({ zp.hdr.ramdisk_image }, { zp.hdr.ramdisk_size }),
            (0x1f00_0000, 0x12345)
        );
        assert_eq!({ zp.hdr.header }, 0x5372_6448, "header copied");
        assert_eq!(zp.e820_entries, 4);
        let results = zp.e820_table[3];
        assert_eq!(
            ({ results.addr }, { results.size }, { results.r#type }),
            (0xd000_0000, 16 << 20, E820_RESERVED)
        );
        assert_eq!({ zp.e820_table[2].r#type }, E820_RAM);
        // The struct is the 4 KiB zero page.
        assert_eq!(std::mem::size_of::<boot_params>(), 4096);
    }

    #[test]
    fn pvh_start_info_fields() {
        let map = memory_map(&layout::ram_ranges(512 << 20));
        let rd = InitrdPlacement {
            addr: 0x1f00_0000,
            size: 0x1000,
        };
        let info = pvh_info(layout::CMDLINE_GPA, Some(rd), &map).unwrap();
        let si = info.start_info;
        assert_eq!((si.magic, si.version, si.nr_modules), (0x336e_c578, 1, 1));
        assert_eq!(
            (si.cmdline_paddr, si.modlist_paddr),
            (0x2_0000, layout::PVH_MODLIST_GPA)
        );
        assert_eq!(
            (si.memmap_paddr, si.memmap_entries),
            (layout::PVH_MEMMAP_GPA, 4)
        );
        assert_eq!(
            (info.modules[0].paddr, info.modules[0].size),
            (0x1f00_0000, 0x1000)
        );
        assert_eq!(info.memmap[3].type_, E820_RESERVED);

        let none = pvh_info(layout::CMDLINE_GPA, None, &map).unwrap();
        assert_eq!(
            (none.start_info.nr_modules, none.start_info.modlist_paddr),
            (0, 0)
        );
    }
}
