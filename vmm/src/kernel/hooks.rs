//! Where the xperf patch series put its hooks in a built `vmlinux`, and what
//! each site holds as linked (hooks off): every `__jump_table` entry whose key
//! is `xperf_stamps_key`, and the `.altinstructions` entry on
//! `X86_FEATURE_XPERF`. This checks the series' "a NOP when off" claim on the
//! real binary instead of trusting a listing.
//!
//! Read from the ELF itself (section headers and `.symtab`); pure, no tools.

use crate::{Error, Result};

/// `X86_FEATURE_XPERF` = word 21, bit 31 (the series' cpufeatures.h).
pub const X86_FEATURE_XPERF: u16 = 21 * 32 + 31;
/// The 5-byte NOP the kernel uses for jump labels and ALTERNATIVE padding.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// The 2-byte NOP objtool leaves where the compiler emitted a short jump.
pub const NOP2: [u8; 2] = [0x66, 0x90];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// A `static_branch`/`STATIC_JUMP_IF_*` site on `xperf_stamps_key`.
    JumpLabel,
    /// An `ALTERNATIVE` patched at boot when `X86_FEATURE_XPERF` is set.
    Alternative,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSite {
    pub kind: HookKind,
    pub address: u64,
    /// `symbol+0xoffset`, from `.symtab`.
    pub location: String,
    /// The instruction at the site as linked: 5 bytes, or 2 where objtool
    /// shortened a jump label.
    pub bytes: Vec<u8>,
}

impl HookSite {
    /// Whether the site is a NOP as linked (the hook costs nothing when off).
    pub fn is_nop(&self) -> bool {
        self.bytes == NOP5 || self.bytes == NOP2
    }
}

/// One ELF section: where it is in memory and in the file.
struct Section {
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;

fn bad(what: &str) -> Error {
    Error::Kernel(format!("not a usable vmlinux: {what}"))
}

fn read<const N: usize>(data: &[u8], at: u64) -> Result<[u8; N]> {
    let start = usize::try_from(at).map_err(|_| bad("offset out of range"))?;
    data.get(start..start.saturating_add(N))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("truncated"))
}

fn u16_at(d: &[u8], at: u64) -> Result<u16> {
    read::<2>(d, at).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], at: u64) -> Result<u32> {
    read::<4>(d, at).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], at: u64) -> Result<u64> {
    read::<8>(d, at).map(u64::from_le_bytes)
}

/// A parsed vmlinux: its sections and symbols.
struct Vmlinux<'a> {
    data: &'a [u8],
    sections: Vec<Section>,
    /// (address, name) of every named symbol, sorted by address.
    symbols: Vec<(u64, String)>,
}

impl<'a> Vmlinux<'a> {
    fn parse(data: &'a [u8]) -> Result<Self> {
        if data.get(..5) != Some(b"\x7fELF\x02") || data.get(5) != Some(&1) {
            return Err(bad("not a 64-bit little-endian ELF file"));
        }
        let shoff = u64_at(data, 0x28)?;
        let shentsize = u64::from(u16_at(data, 0x3a)?);
        let shnum = u64::from(u16_at(data, 0x3c)?);
        if shentsize < 64 || shnum == 0 {
            return Err(bad("no section headers (stripped?)"));
        }
        let mut sections = Vec::new();
        for i in 0..shnum {
            let h = shoff.saturating_add(i.saturating_mul(shentsize));
            sections.push(Section {
                kind: u32_at(data, h + 4)?,
                addr: u64_at(data, h + 16)?,
                offset: u64_at(data, h + 24)?,
                size: u64_at(data, h + 32)?,
                link: u32_at(data, h + 40)?,
            });
        }
        let mut vmlinux = Vmlinux {
            data,
            sections,
            symbols: Vec::new(),
        };
        vmlinux.symbols = vmlinux.read_symbols()?;
        Ok(vmlinux)
    }

    fn read_symbols(&self) -> Result<Vec<(u64, String)>> {
        let symtab = self
            .sections
            .iter()
            .find(|s| s.kind == SHT_SYMTAB)
            .ok_or_else(|| bad("no .symtab (stripped?)"))?;
        let strtab = self
            .sections
            .get(symtab.link as usize)
            .ok_or_else(|| bad("bad .symtab link"))?;
        let mut symbols = Vec::new();
        for i in 0..symtab.size / 24 {
            let e = symtab.offset.saturating_add(i * 24);
            let name = u32_at(self.data, e)?;
            let value = u64_at(self.data, e + 8)?;
            if name != 0 && value != 0 {
                symbols.push((
                    value,
                    c_string(self.data, strtab.offset.saturating_add(u64::from(name))),
                ));
            }
        }
        symbols.sort();
        Ok(symbols)
    }

    fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols
            .iter()
            .find(|(_, n)| n == name)
            .map(|(a, _)| *a)
    }

    /// `symbol+0xoff` for an address, preferring real names over local labels.
    fn locate(&self, address: u64) -> String {
        let before = self.symbols.partition_point(|(a, _)| *a <= address);
        self.symbols[..before]
            .iter()
            .rev()
            .find(|(_, n)| !n.starts_with(".L") && !n.starts_with("__UNIQUE_ID"))
            .map_or_else(
                || format!("{address:#x}"),
                |(a, n)| format!("{n}+{:#x}", address - a),
            )
    }

    /// `len` bytes at virtual address `address`, from the section holding them.
    fn bytes_at(&self, address: u64, len: u64) -> Result<&'a [u8]> {
        let s = self
            .sections
            .iter()
            .find(|s| {
                s.kind == SHT_PROGBITS
                    && s.addr <= address
                    && address.saturating_add(len) <= s.addr.saturating_add(s.size)
            })
            .ok_or_else(|| bad(&format!("no section holds address {address:#x}")))?;
        let start = s.offset.saturating_add(address - s.addr);
        let start = usize::try_from(start).map_err(|_| bad("offset out of range"))?;
        let end = start.saturating_add(usize::try_from(len).map_err(|_| bad("length"))?);
        self.data.get(start..end).ok_or_else(|| bad("truncated"))
    }

    fn table(&self, start: &str, stop: &str) -> Result<(u64, u64)> {
        let a = self
            .symbol(start)
            .ok_or_else(|| bad(&format!("no {start} symbol")))?;
        let b = self
            .symbol(stop)
            .ok_or_else(|| bad(&format!("no {stop} symbol")))?;
        if b < a {
            return Err(bad(&format!("{stop} is below {start}")));
        }
        Ok((a, b))
    }
}

fn c_string(data: &[u8], at: u64) -> String {
    let Some(tail) = usize::try_from(at).ok().and_then(|a| data.get(a..)) else {
        return String::new();
    };
    let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
    String::from_utf8_lossy(&tail[..end]).into_owned()
}

fn relative(base: u64, offset: i64) -> u64 {
    base.wrapping_add_signed(offset)
}

/// Every xperf hook site of a built vmlinux. An unpatched kernel (no
/// `xperf_stamps_key`) is an error saying so.
pub fn find(vmlinux: &[u8]) -> Result<Vec<HookSite>> {
    let elf = Vmlinux::parse(vmlinux)?;
    let key = elf.symbol("xperf_stamps_key").ok_or_else(|| {
        Error::Kernel("no xperf_stamps_key symbol: not a kernel built with the xperf series (CONFIG_XPERF_STAMPS=y)".into())
    })?;
    let mut sites = Vec::new();

    // struct jump_entry { s32 code; s32 target; long key; }, all relative to
    // their own field; the key's low two bits are flags.
    let (start, stop) = elf.table("__start___jump_table", "__stop___jump_table")?;
    let table = elf.bytes_at(start, stop - start)?;
    for (i, entry) in table.chunks_exact(16).enumerate() {
        let at = start + 16 * i as u64;
        let code = i32::from_le_bytes(entry[0..4].try_into().unwrap_or_default());
        let entry_key = i64::from_le_bytes(entry[8..16].try_into().unwrap_or_default());
        if relative(at + 8, entry_key & !3) != key {
            continue;
        }
        let address = relative(at, code.into());
        // A site is 5 bytes, or 2 where objtool shortened the jump.
        let bytes = match elf.bytes_at(address, 2)? {
            b if b == NOP2 => b.to_vec(),
            _ => elf.bytes_at(address, 5)?.to_vec(),
        };
        sites.push(HookSite {
            kind: HookKind::JumpLabel,
            address,
            location: elf.locate(address),
            bytes,
        });
    }

    // struct alt_instr { s32 instr_offset; s32 repl_offset; u32 ft_flags;
    // u8 instrlen; u8 replacementlen; } __packed; cpuid = ft_flags & 0xffff.
    let (start, stop) = elf.table("__alt_instructions", "__alt_instructions_end")?;
    let table = elf.bytes_at(start, stop - start)?;
    for (i, entry) in table.chunks_exact(14).enumerate() {
        let at = start + 14 * i as u64;
        let instr = i32::from_le_bytes(entry[0..4].try_into().unwrap_or_default());
        let flags = u32::from_le_bytes(entry[8..12].try_into().unwrap_or_default());
        if flags & 0xffff != u32::from(X86_FEATURE_XPERF) {
            continue;
        }
        let address = relative(at, instr.into());
        sites.push(HookSite {
            kind: HookKind::Alternative,
            address,
            location: elf.locate(address),
            bytes: elf.bytes_at(address, u64::from(entry[12]))?.to_vec(),
        });
    }
    sites.sort_by_key(|s| s.address);
    Ok(sites)
}

/// The sites as a table: address, kind, location, bytes, and whether a NOP.
pub fn table(sites: &[HookSite]) -> String {
    let mut out = String::new();
    for s in sites {
        let bytes = s
            .bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        let kind = match s.kind {
            HookKind::JumpLabel => "jump label",
            HookKind::Alternative => "alternative",
        };
        out.push_str(&format!(
            "{:#018x}  {kind:<11}  {:<52} {bytes:<15} {}\n",
            s.address,
            s.location,
            if s.is_nop() { "NOP" } else { "NOT A NOP" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF: one PROGBITS section at `base` holding `text`, a
    /// symtab with the given symbols, and the section-name table.
    fn elf(base: u64, text: &[u8], symbols: &[(&str, u64)]) -> Vec<u8> {
        let shstr = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for (name, value) in symbols {
            let mut e = [0u8; 24];
            e[0..4].copy_from_slice(&(strtab.len() as u32).to_le_bytes());
            e[8..16].copy_from_slice(&value.to_le_bytes());
            symtab.extend_from_slice(&e);
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
        }
        let mut data = vec![0u8; 64];
        let text_off = data.len() as u64;
        data.extend_from_slice(text);
        let symtab_off = data.len() as u64;
        data.extend_from_slice(&symtab);
        let strtab_off = data.len() as u64;
        data.extend_from_slice(&strtab);
        let shstr_off = data.len() as u64;
        data.extend_from_slice(shstr);
        let shoff = data.len() as u64;
        // (name, type, addr, offset, size, link)
        let headers = [
            (0u32, 0u32, 0u64, 0u64, 0u64, 0u32),
            (1, SHT_PROGBITS, base, text_off, text.len() as u64, 0),
            (7, SHT_SYMTAB, 0, symtab_off, symtab.len() as u64, 3),
            (15, 3, 0, strtab_off, strtab.len() as u64, 0),
            (23, 3, 0, shstr_off, shstr.len() as u64, 0),
        ];
        for (name, kind, addr, off, size, link) in headers {
            let mut h = [0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[16..24].copy_from_slice(&addr.to_le_bytes());
            h[24..32].copy_from_slice(&off.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            data.extend_from_slice(&h);
        }
        data[..6].copy_from_slice(b"\x7fELF\x02\x01");
        data[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        data[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        data[0x3c..0x3e].copy_from_slice(&5u16.to_le_bytes());
        data[0x3e..0x40].copy_from_slice(&4u16.to_le_bytes());
        data
    }

    #[test]
    fn finds_jump_labels_of_the_key_and_the_feature_alternative() {
        let base = 0xffff_ffff_8100_0000u64;
        // 0x00 func_a: NOP5 (site 1), 0x05 func_b: NOP2 (site 2),
        // 0x07: jmp rel32 (site 3, on), 0x0c: another key's NOP5,
        // 0x20 jump table (4 entries), 0x60 alt table (2 entries), 0x80 key.
        let mut text = vec![0xccu8; 0x90];
        text[0x00..0x05].copy_from_slice(&NOP5);
        text[0x05..0x07].copy_from_slice(&NOP2);
        text[0x07..0x0c].copy_from_slice(&[0xe9, 1, 0, 0, 0]);
        text[0x0c..0x11].copy_from_slice(&NOP5);
        let key = base + 0x80;
        let other_key = base + 0x88;
        let jump = |code: u64, key: u64, flags: i64, at: u64| {
            let mut e = [0u8; 16];
            e[0..4].copy_from_slice(&((code as i64 - at as i64) as i32).to_le_bytes());
            let rel = key as i64 - (at + 8) as i64;
            e[8..16].copy_from_slice(&(rel | flags).to_le_bytes());
            e
        };
        for (i, (code, k, f)) in [
            (0x00, key, 0),
            (0x05, key, 1),
            (0x07, key, 2),
            (0x0c, other_key, 0),
        ]
        .into_iter()
        .enumerate()
        {
            let at = base + 0x20 + 16 * i as u64;
            text[0x20 + 16 * i..0x30 + 16 * i].copy_from_slice(&jump(base + code, k, f, at));
        }
        let alt = |instr: u64, feature: u16, at: u64| {
            let mut e = [0u8; 14];
            e[0..4].copy_from_slice(&((instr as i64 - at as i64) as i32).to_le_bytes());
            e[8..12].copy_from_slice(&u32::from(feature).to_le_bytes());
            e[12] = 5;
            e
        };
        text[0x60..0x6e].copy_from_slice(&alt(base, X86_FEATURE_XPERF, base + 0x60));
        text[0x6e..0x7c].copy_from_slice(&alt(base + 0x0c, 7, base + 0x6e));
        let data = elf(
            base,
            &text,
            &[
                ("func_a", base),
                ("func_b", base + 5),
                ("__start___jump_table", base + 0x20),
                ("__stop___jump_table", base + 0x60),
                ("__alt_instructions", base + 0x60),
                ("__alt_instructions_end", base + 0x7c),
                ("xperf_stamps_key", key),
            ],
        );
        let sites = find(&data).unwrap();
        let summary: Vec<_> = sites
            .iter()
            .map(|s| (s.kind, s.location.as_str(), s.is_nop()))
            .collect();
        assert_eq!(
            summary,
            [
                (HookKind::JumpLabel, "func_a+0x0", true),
                (HookKind::Alternative, "func_a+0x0", true),
                (HookKind::JumpLabel, "func_b+0x0", true),
                (HookKind::JumpLabel, "func_b+0x2", false),
            ]
        );
        assert!(table(&sites).contains("NOT A NOP"));
    }

    #[test]
    fn unpatched_and_broken_images_are_clear_errors() {
        let data = elf(0x1000, &[0u8; 16], &[("func", 0x1000)]);
        let err = find(&data).unwrap_err().to_string();
        assert!(err.contains("no xperf_stamps_key"), "{err}");
        let err = find(b"not an elf").unwrap_err().to_string();
        assert!(err.contains("not a usable vmlinux"), "{err}");
        let err = find(&data[..100]).unwrap_err().to_string();
        assert!(err.contains("not a usable vmlinux"), "{err}");
    }
}
