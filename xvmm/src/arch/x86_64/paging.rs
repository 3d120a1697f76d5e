//! x86-64 page-table entries: their bits (for every table xvmm builds, the
//! microguest's included) and the identity tables for a 64-bit boot: the first
//! 4 GiB mapped 1:1 with 2 MiB pages (PML4 -> one PDPT -> four page
//! directories), enough for the kernel, the boot structures, the initrd and the
//! results slot.

use crate::{Error, Result};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Present.
pub const PTE_P: u64 = 1 << 0;
/// Writable.
pub const PTE_RW: u64 = 1 << 1;
/// User-mode (CPL3) access allowed.
pub const PTE_US: u64 = 1 << 2;
/// Page size: in a page directory entry, maps a 2 MiB page instead of pointing
/// at a page table.
pub const PTE_PS: u64 = 1 << 7;
/// The physical address bits of an entry (bits 12..52).
pub const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;
/// Number of 4 KiB tables: PML4, PDPT, 4 page directories.
pub const TABLE_COUNT: u64 = 6;
/// Bytes mapped: 4 GiB.
pub const IDENTITY_MAPPED_BYTES: u64 = 4 << 30;

/// The identity-mapping tables as 512-entry arrays, placed from `base`
/// (4 KiB aligned): `[PML4, PDPT, PD0..PD3]`.
pub fn identity_tables(base: u64) -> Vec<[u64; 512]> {
    let mut tables = vec![[0u64; 512]; xvmm_results::num::usize_from(TABLE_COUNT)];
    let pdpt = base + 0x1000;
    tables[0][0] = pdpt | PTE_P | PTE_RW;
    for (pd, pd_at) in (0..4u64).zip(0..) {
        tables[1][pd_at] = (base + 0x2000 + pd * 0x1000) | PTE_P | PTE_RW;
        for (i, at) in (0..512u64).zip(0..) {
            let addr = ((pd * 512) + i) << 21;
            tables[2 + pd_at][at] = addr | PTE_P | PTE_RW | PTE_PS;
        }
    }
    tables
}

/// Writes the identity-mapping tables at `base` and returns the CR3 value.
pub fn write_identity_tables(memory: &GuestMemoryMmap, base: u64) -> Result<u64> {
    if !base.is_multiple_of(0x1000) {
        return Err(Error::Memory(format!(
            "page tables at {base:#x} are not page aligned"
        )));
    }
    for (i, table) in identity_tables(base).iter().enumerate() {
        let bytes: Vec<u8> = table.iter().flat_map(|e| e.to_le_bytes()).collect();
        let gpa = base + i as u64 * 0x1000;
        memory
            .write_slice(&bytes, GuestAddress(gpa))
            .map_err(|e| Error::Memory(format!("cannot write page table at {gpa:#x}: {e}")))?;
    }
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks the tables like the MMU does (2 MiB leaves only).
    fn translate(tables: &[[u64; 512]], base: u64, va: u64) -> Option<u64> {
        let table =
            |entry: u64| &tables[xvmm_results::num::usize_from((entry & PTE_ADDR) - base) / 0x1000];
        let pml4e = table(base)[((va >> 39) & 511) as usize];
        if pml4e & PTE_P == 0 {
            return None;
        }
        let pdpte = table(pml4e)[((va >> 30) & 511) as usize];
        if pdpte & PTE_P == 0 {
            return None;
        }
        let pde = table(pdpte)[((va >> 21) & 511) as usize];
        if pde & PTE_P == 0 || pde & PTE_PS == 0 {
            return None;
        }
        Some((pde & PTE_ADDR & !0x1f_ffff) | (va & 0x1f_ffff))
    }

    #[test]
    fn maps_the_first_4_gib_one_to_one() {
        let base = 0x9000;
        let t = identity_tables(base);
        for va in [
            0,
            0x1000,
            0x20_0000,
            0x100_0000,
            0xd000_0000,
            0xffff_ffff,
            0x1234_5678,
        ] {
            assert_eq!(translate(&t, base, va), Some(va), "{va:#x}");
        }
        assert_eq!(translate(&t, base, 1 << 32), None);
    }
}
