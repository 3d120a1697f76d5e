//! Identity page tables for a 64-bit boot: the first 4 GiB mapped 1:1 with 2 MiB
//! pages (PML4 -> one PDPT -> four page directories), enough for the kernel, the
//! boot structures, the initrd and the results slot.

use crate::{Error, Result};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const PRESENT: u64 = 1 << 0;
const WRITABLE: u64 = 1 << 1;
const PAGE_SIZE_2M: u64 = 1 << 7;
/// Number of 4 KiB tables: PML4, PDPT, 4 page directories.
pub const TABLE_COUNT: u64 = 6;
/// Bytes mapped: 4 GiB.
pub const IDENTITY_MAPPED_BYTES: u64 = 4 << 30;

/// The identity-mapping tables as 512-entry arrays, placed from `base`
/// (4 KiB aligned): `[PML4, PDPT, PD0..PD3]`.
pub fn identity_tables(base: u64) -> Vec<[u64; 512]> {
    let mut tables = vec![[0u64; 512]; TABLE_COUNT as usize];
    let pdpt = base + 0x1000;
    tables[0][0] = pdpt | PRESENT | WRITABLE;
    for pd in 0..4u64 {
        tables[1][pd as usize] = (base + 0x2000 + pd * 0x1000) | PRESENT | WRITABLE;
        for i in 0..512u64 {
            let addr = ((pd * 512) + i) << 21;
            tables[2 + pd as usize][i as usize] = addr | PRESENT | WRITABLE | PAGE_SIZE_2M;
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
        let table = |addr: u64| &tables[((addr & !0xfff) - base) as usize / 0x1000];
        let pml4e = table(base)[((va >> 39) & 511) as usize];
        if pml4e & PRESENT == 0 {
            return None;
        }
        let pdpte = table(pml4e)[((va >> 30) & 511) as usize];
        if pdpte & PRESENT == 0 {
            return None;
        }
        let pde = table(pdpte)[((va >> 21) & 511) as usize];
        if pde & PRESENT == 0 || pde & PAGE_SIZE_2M == 0 {
            return None;
        }
        Some((pde & !0x1f_ffff & 0x000f_ffff_ffff_ffff) | (va & 0x1f_ffff))
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
