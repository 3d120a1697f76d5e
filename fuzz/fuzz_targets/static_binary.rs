//! The static-binary check of the built-in initramfs's xperf
//! (`linux::builtin::elf_is_static`), against a model written here from
//! the ELF-64 specification (gABI) alone, reading the bytes by their
//! offsets: none of xvmm's ELF reader or the `object` crate it uses.
//!
//! "Static" means the kernel can run the file as /init with nothing else in
//! the initramfs: an x86-64 executable (`ET_EXEC`, or `ET_DYN` for PIE)
//! with no `PT_INTERP` program header and no `DT_NEEDED` entry before the
//! `DT_NULL` of a `PT_DYNAMIC` segment. The two must agree on every input:
//! accepted or refused, and static or not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::linux::builtin::elf_is_static;
use xvmm_fuzz::assert_one_line;

const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
/// `e_phnum` saying the real count is in section header 0's `sh_info`.
const PN_XNUM: u16 = 0xffff;

fn u16_at(b: &[u8], at: u64) -> Option<u16> {
    let at = usize::try_from(at).ok()?;
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: u64) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The number of program headers: `e_phnum`, or with `PN_XNUM` the
/// `sh_info` of section header 0, which must then lie whole in the file
/// (64 bytes each).
fn program_header_count(b: &[u8]) -> Option<u64> {
    let phnum = u16_at(b, 56)?;
    if phnum != PN_XNUM {
        return Some(u64::from(phnum));
    }
    let shoff = u64_at(b, 40)?;
    if shoff == 0 || u16_at(b, 58)? != 64 || shoff.checked_add(64)? > b.len() as u64 {
        return None;
    }
    u32_at(b, shoff + 44).map(u64::from)
}

/// Whether the file bytes `offset..offset + size` hold a `DT_NEEDED`
/// entry (16 bytes each: tag, value) before a `DT_NULL`; `None` when the
/// range lies outside the file (an empty one lies nowhere).
fn dynamic_needs(b: &[u8], offset: u64, size: u64) -> Option<bool> {
    if size == 0 {
        return Some(false);
    }
    let end = offset.checked_add(size)?;
    if end > b.len() as u64 {
        return None;
    }
    for entry in 0..size / 16 {
        match u64_at(b, offset + 16 * entry)? {
            DT_NULL => return Some(false),
            DT_NEEDED => return Some(true),
            _ => {}
        }
    }
    Some(false)
}

/// The model: `Some(static)` for an ELF-64 little-endian x86-64
/// executable whose program headers (and dynamic segments) lie in the
/// file, `None` for anything else.
fn model(b: &[u8]) -> Option<bool> {
    let ident_ok = b.get(..4)? == b"\x7fELF" && b.len() >= 64 && b[4] == 2 && b[5] == 1;
    let executable = matches!(u16_at(b, 16)?, 2 | 3);
    if !ident_ok || u16_at(b, 18)? != 62 || !executable {
        return None;
    }
    let phoff = u64_at(b, 32)?;
    // A file without a program header table says so with a zero e_phoff
    // or e_phnum; a table's entries are 56 bytes.
    let has_table = phoff != 0 && u16_at(b, 56)? != 0;
    if has_table && u16_at(b, 54)? != 56 {
        return None;
    }
    let count = if has_table {
        program_header_count(b)?
    } else {
        0
    };
    let table_end = count.checked_mul(56)?.checked_add(phoff)?;
    if count > 0 && table_end > b.len() as u64 {
        return None;
    }
    let (mut interp, mut needed) = (false, false);
    for i in 0..count {
        let ph = phoff + 56 * i;
        match u32_at(b, ph)? {
            PT_INTERP => interp = true,
            PT_DYNAMIC => needed |= dynamic_needs(b, u64_at(b, ph + 8)?, u64_at(b, ph + 32)?)?,
            _ => {}
        }
    }
    Some(!interp && !needed)
}

fuzz_target!(|data: &[u8]| {
    let ours = elf_is_static(data);
    if let Err(e) = &ours {
        assert_one_line(e, "elf_is_static");
    }
    assert_eq!(
        ours.ok(),
        model(data),
        "elf_is_static disagrees with the model"
    );
});
