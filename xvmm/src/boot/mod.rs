//! Loading Linux: check everything first ([`plan`], pure), then write the kernel,
//! initrd, command line and boot parameters into guest memory ([`load`]).
//!
//! - [`image`]: recognising bzImage / PVH ELF images and their limits.
//! - [`e820`]: the memory map.
//! - [`cmdline`]: default command line and length limits.
//! - [`params`]: zero page, `hvm_start_info`, initrd placement.
//! - [`mptable`]: the MP table that names the vCPUs and the I/O APIC.
//!
//! bzImage: payload at `code32_start` (1 MiB), 64-bit entry at load + 0x200 with
//! RSI = zero page. ELF: segments at their physical addresses, PVH entry in 32-bit
//! protected mode with EBX = `hvm_start_info`. The initrd goes page aligned at the
//! top of low RAM, below `initrd_addr_max`, above everything the kernel uses.

pub mod cmdline;
pub mod e820;
pub mod image;
pub mod map;
pub mod mptable;
pub mod params;

use crate::arch::x86_64::regs::BootEntry;
use crate::layout;
use crate::{Error, Result, Setting};
use image::{KernelImage, BZIMAGE_ENTRY_64_OFFSET};
use linux_loader::loader::{bzimage::BzImage, elf::Elf, elf::PvhBootCapability, KernelLoader};
use params::{mib, InitrdPlacement};
use std::io::{Read, Seek};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap, ReadVolatile};

/// Everything decided before touching guest memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootPlan {
    pub image: KernelImage,
    /// Where the bzImage payload is loaded (unused for ELF).
    pub load_addr: u64,
    /// End of the memory the kernel needs while booting.
    pub kernel_end: u64,
    pub initrd: Option<InitrdPlacement>,
    /// NUL-terminated command line.
    pub cmdline: Vec<u8>,
}

/// Checks that the kernel, an initrd of `initrd_size` bytes and `cmdline` fit a
/// guest with `mem_bytes` of RAM, and decides where everything goes.
pub fn plan(
    image: KernelImage,
    mem_bytes: u64,
    initrd_size: Option<u64>,
    cmdline_text: &str,
) -> Result<BootPlan> {
    let low_end = layout::low_ram_end(mem_bytes);
    let (load_addr, kernel_end, initrd_max, cmdline) = match image {
        KernelImage::BzImage(info) => {
            let load = info.code32_start.max(layout::HIMEM_START);
            let size = info.cmdline_size.saturating_add(1);
            let cmdline = cmdline::encode(
                cmdline_text,
                size,
                &format!(
                    "cmdline_size {} in the bzImage setup header",
                    info.cmdline_size
                ),
            )?;
            (load, info.required_end(load), info.initrd_addr_max, cmdline)
        }
        KernelImage::Elf(info) => {
            if info.load_start < layout::HIMEM_START {
                return Err(Error::Kernel(format!(
                    "ELF loads at {:#x}, below 1 MiB where the boot structures live",
                    info.load_start
                )));
            }
            let cmdline = cmdline::encode(
                cmdline_text,
                cmdline::PVH_CMDLINE_SIZE,
                "Linux's x86 COMMAND_LINE_SIZE for PVH boots",
            )?;
            // PVH modules are 64-bit addresses, but keep the initrd below 4 GiB
            // like the bzImage path: low RAM ends below the MMIO hole anyway.
            (0, info.load_end, u64::from(u32::MAX), cmdline)
        }
    };
    if kernel_end > low_end {
        return Err(Setting::MemoryMib.invalid(format!(
            "{} MiB is too small for this kernel: it needs guest memory up to {kernel_end:#x} ({}) to boot",
            mem_bytes >> 20,
            mib(kernel_end)
        )));
    }
    let kernel_end_aligned = kernel_end.div_ceil(layout::PAGE_SIZE) * layout::PAGE_SIZE;
    let initrd = initrd_size
        .map(|size| params::place_initrd(size, low_end, kernel_end_aligned, initrd_max))
        .transpose()?;
    Ok(BootPlan {
        image,
        load_addr,
        kernel_end,
        initrd,
        cmdline,
    })
}

fn write(memory: &GuestMemoryMmap, what: &str, bytes: &[u8], gpa: u64) -> Result<()> {
    memory
        .write_slice(bytes, GuestAddress(gpa))
        .map_err(|e| Error::Memory(format!("cannot write the {what} at {gpa:#x}: {e}")))
}

/// A kernel or initrd source: a file, or a cursor over bytes in tests. Read
/// straight into guest memory, never buffered whole in the VMM.
pub trait ImageReader: Read + ReadVolatile + Seek {}
impl<T: Read + ReadVolatile + Seek> ImageReader for T {}

/// Loads everything `plan` decided and returns how the vCPU must start.
/// `initrd` must hold exactly the planned number of bytes. `kernel` is
/// `None` for an ELF kernel already mapped into guest memory ([`map`]).
pub fn load<K: ImageReader, I: ImageReader>(
    memory: &GuestMemoryMmap,
    ram: &[layout::RamRange],
    plan: &BootPlan,
    kernel: Option<&mut K>,
    initrd: Option<&mut I>,
) -> Result<BootEntry> {
    let e820 = e820::memory_map(ram);
    write(memory, "command line", &plan.cmdline, layout::CMDLINE_GPA)?;
    if let (Some(place), Some(reader)) = (plan.initrd, initrd) {
        reader
            .rewind()
            .and_then(|_| {
                memory
                    .read_exact_volatile_from(
                        GuestAddress(place.addr),
                        reader,
                        xvmm_results::num::usize_from(place.size),
                    )
                    .map_err(std::io::Error::other)
            })
            .map_err(|e| {
                Error::Initrd(format!(
                    "cannot load {} at {:#x}: {e}",
                    mib(place.size),
                    place.addr
                ))
            })?;
    }
    let himem = Some(GuestAddress(layout::HIMEM_START));
    match plan.image {
        KernelImage::BzImage(_) => {
            let kernel = kernel.ok_or_else(|| {
                Error::Kernel("a bzImage is copied into guest memory, never mapped".into())
            })?;
            let loaded = BzImage::load(memory, Some(GuestAddress(plan.load_addr)), kernel, himem)
                .map_err(|e| Error::Kernel(format!("loading the bzImage failed: {e}")))?;
            let header = loaded.setup_header.ok_or_else(|| {
                Error::Kernel("the bzImage loader returned no setup header".into())
            })?;
            let zero_page = params::zero_page(&header, layout::CMDLINE_GPA, plan.initrd, &e820)?;
            memory
                .write_obj(zero_page, GuestAddress(layout::ZERO_PAGE_GPA))
                .map_err(|e| Error::Memory(format!("cannot write the zero page: {e}")))?;
            Ok(BootEntry::Linux64 {
                entry: loaded.kernel_load.0 + BZIMAGE_ENTRY_64_OFFSET,
                zero_page: layout::ZERO_PAGE_GPA,
            })
        }
        KernelImage::Elf(info) => {
            let entry = match kernel {
                Some(kernel) => {
                    let loaded = Elf::load(memory, None, kernel, himem).map_err(|e| {
                        Error::Kernel(format!("loading the ELF kernel failed: {e}"))
                    })?;
                    match loaded.pvh_boot_cap {
                        PvhBootCapability::PvhEntryPresent(addr) => addr.0,
                        _ => info.pvh_entry,
                    }
                }
                // Mapped: the PVH note `image::inspect` read is the entry.
                None => info.pvh_entry,
            };
            let pvh = params::pvh_info(layout::CMDLINE_GPA, plan.initrd, &e820)?;
            memory
                .write_obj(pvh.start_info, GuestAddress(layout::PVH_START_INFO_GPA))
                .map_err(|e| Error::Memory(format!("cannot write hvm_start_info: {e}")))?;
            for (i, m) in pvh.modules.iter().enumerate() {
                let gpa = layout::PVH_MODLIST_GPA + (i * std::mem::size_of_val(m)) as u64;
                memory
                    .write_obj(*m, GuestAddress(gpa))
                    .map_err(|e| Error::Memory(format!("cannot write the PVH module list: {e}")))?;
            }
            for (i, m) in pvh.memmap.iter().enumerate() {
                let gpa = layout::PVH_MEMMAP_GPA + (i * std::mem::size_of_val(m)) as u64;
                memory
                    .write_obj(*m, GuestAddress(gpa))
                    .map_err(|e| Error::Memory(format!("cannot write the PVH memory map: {e}")))?;
            }
            Ok(BootEntry::Pvh {
                entry,
                start_info: layout::PVH_START_INFO_GPA,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::image::tests::{fake_bzimage, fake_elf};
    use super::*;
    use std::io::Cursor;

    fn mem(bytes: u64) -> (GuestMemoryMmap, Vec<layout::RamRange>) {
        let ram = layout::ram_ranges(bytes);
        let ranges: Vec<_> = ram
            .iter()
            .map(|r| (GuestAddress(r.start), xvmm_results::num::usize_from(r.size)))
            .collect();
        (GuestMemoryMmap::from_ranges(&ranges).unwrap(), ram)
    }

    #[test]
    fn bzimage_plan_and_load() {
        let kernel = fake_bzimage(&[0xf4; 0x300]);
        let image = image::inspect(kernel.as_slice()).unwrap();
        let plan = plan(image, 64 << 20, Some(0x3000), "console=ttyS0").unwrap();
        assert_eq!(plan.load_addr, 0x10_0000);
        assert_eq!(
            plan.initrd,
            Some(InitrdPlacement {
                addr: (64 << 20) - 0x3000,
                size: 0x3000
            })
        );
        let (memory, ram) = mem(64 << 20);
        let mut initrd = Cursor::new(vec![7u8; 0x3000]);
        let entry = load(
            &memory,
            &ram,
            &plan,
            Some(&mut Cursor::new(&kernel)),
            Some(&mut initrd),
        )
        .unwrap();
        assert_eq!(
            entry,
            BootEntry::Linux64 {
                entry: 0x10_0200,
                zero_page: 0x7000
            }
        );
        let zp: linux_loader::bootparam::boot_params = memory
            .read_obj(GuestAddress(layout::ZERO_PAGE_GPA))
            .unwrap();
        assert_eq!(u64::from(zp.hdr.ramdisk_image), (64 << 20) - 0x3000);
        assert_eq!({ zp.hdr.code32_start }, 0x10_0000);
        let mut cl = [0u8; 14];
        memory
            .read_slice(&mut cl, GuestAddress(layout::CMDLINE_GPA))
            .unwrap();
        assert_eq!(&cl, b"console=ttyS0\0");
        assert_eq!(
            memory.read_obj::<u8>(GuestAddress(0x10_0000)).unwrap(),
            0xf4
        );
        assert_eq!(
            memory.read_obj::<u8>(GuestAddress((64 << 20) - 1)).unwrap(),
            7
        );
    }

    #[test]
    fn pvh_plan_and_load() {
        let kernel = fake_elf(62, 0x100_0000, &[0xf4; 32], Some(0x100_0010));
        let image = image::inspect(kernel.as_slice()).unwrap();
        let plan = plan(image, 64 << 20, None, "x").unwrap();
        let (memory, ram) = mem(64 << 20);
        let entry = load(
            &memory,
            &ram,
            &plan,
            Some(&mut Cursor::new(&kernel)),
            None::<&mut Cursor<Vec<u8>>>,
        )
        .unwrap();
        assert_eq!(
            entry,
            BootEntry::Pvh {
                entry: 0x100_0010,
                start_info: 0x6000
            }
        );
        let si: linux_loader::start_info::hvm_start_info = memory
            .read_obj(GuestAddress(layout::PVH_START_INFO_GPA))
            .unwrap();
        assert_eq!(
            (si.magic, si.memmap_entries, si.nr_modules),
            (params::XEN_HVM_START_MAGIC, 4, 0)
        );
        let first: linux_loader::start_info::hvm_memmap_table_entry = memory
            .read_obj(GuestAddress(layout::PVH_MEMMAP_GPA))
            .unwrap();
        assert_eq!((first.addr, first.size, first.type_), (0, 0x9_fc00, 1));
        assert_eq!(
            memory.read_obj::<u8>(GuestAddress(0x100_0000)).unwrap(),
            0xf4
        );
    }

    #[test]
    fn plan_errors() {
        let kernel = fake_bzimage(&[0xf4; 0x300]);
        let image = image::inspect(kernel.as_slice()).unwrap();
        // init_size 4 MiB from 16 MiB: 20 MiB is exactly enough, 16 MiB is not.
        assert!(plan(image, 20 << 20, None, "").is_ok());
        let err = plan(image, 16 << 20, None, "").unwrap_err().to_string();
        assert!(
            err.starts_with("memory: guest memory 16 MiB is too small for this kernel"),
            "{err}"
        );
        let err = plan(image, 20 << 20, Some(1 << 20), "")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("initrd: initrd of 1.0 MiB does not fit"),
            "{err}"
        );
        let err = plan(image, 64 << 20, None, &"a".repeat(2048))
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 2047 (cmdline_size 2047"), "{err}");
        let elf = image::inspect(fake_elf(62, 0x100_0000, &[0; 16], Some(0x100_0000)).as_slice())
            .unwrap();
        let err = plan(elf, 64 << 20, None, &"a".repeat(2048))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("at most 2047 (Linux's x86 COMMAND_LINE_SIZE"),
            "{err}"
        );
        let low = image::inspect(fake_elf(62, 0x8000, &[0; 16], Some(0x8000)).as_slice()).unwrap();
        assert!(plan(low, 64 << 20, None, "")
            .unwrap_err()
            .to_string()
            .contains("below 1 MiB"));
    }
}
