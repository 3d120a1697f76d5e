//! Where the xperf patch series put its hooks in a built `vmlinux`, and what
//! each site holds as linked (hooks off): every `__jump_table` entry whose key
//! is `xperf_stamps_key`, and the `.altinstructions` entry on
//! `X86_FEATURE_XPERF`. This checks the series' "a NOP when off" claim on the
//! real binary instead of trusting a listing.
//!
//! Read from the ELF itself (section headers and `.symtab`, through
//! [`xvmm_host::elf`]); pure, no tools.

use crate::error::{Error, Result};
use xvmm_host::elf::{ElfError, ElfFile, Sections, Symbols};

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

fn bad(e: ElfError) -> Error {
    Error::Image(format!("not a usable vmlinux: {e}"))
}

/// Whether a symbol is worth naming a site after: not an assembler-local
/// label (`.L*`) nor a generated `__UNIQUE_ID*`.
fn is_real_name(name: &[u8]) -> bool {
    !name.starts_with(b".L") && !name.starts_with(b"__UNIQUE_ID")
}

/// The address range `start..stop` between two linker-defined symbols.
fn table_range(symbols: &Symbols, start: &str, stop: &str) -> Result<(u64, u64)> {
    let missing = |name: &str| Error::Image(format!("not a usable vmlinux: no {name} symbol"));
    let a = symbols.address_of(start).ok_or_else(|| missing(start))?;
    let b = symbols.address_of(stop).ok_or_else(|| missing(stop))?;
    if b < a {
        return Err(Error::Image(format!(
            "not a usable vmlinux: {stop} is below {start}"
        )));
    }
    Ok((a, b))
}

fn relative(base: u64, offset: i64) -> u64 {
    base.wrapping_add_signed(offset)
}

fn i32_at(entry: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(entry[at..at + 4].try_into().unwrap_or_default())
}

/// Every xperf hook site of a built vmlinux. An unpatched kernel (no
/// `xperf_stamps_key`) is an error saying so.
pub fn find(vmlinux: &[u8]) -> Result<Vec<HookSite>> {
    let elf = ElfFile::parse(vmlinux).map_err(bad)?;
    let sections = elf.sections().map_err(bad)?;
    let symbols = sections.symbols(is_real_name).map_err(bad)?;
    let key = symbols.address_of("xperf_stamps_key").ok_or_else(|| {
        Error::Image("no xperf_stamps_key symbol: not a kernel built with the xperf series (CONFIG_XPERF_STAMPS=y)".into())
    })?;
    let mut sites = jump_label_sites(&sections, &symbols, key)?;
    sites.extend(alternative_sites(&sections, &symbols)?);
    sites.sort_by_key(|s| s.address);
    Ok(sites)
}

/// The `__jump_table` entries on `key`.
fn jump_label_sites(sections: &Sections, symbols: &Symbols, key: u64) -> Result<Vec<HookSite>> {
    // struct jump_entry { s32 code; s32 target; long key; }, all relative to
    // their own field; the key's low two bits are flags.
    let (start, stop) = table_range(symbols, "__start___jump_table", "__stop___jump_table")?;
    let table = sections.bytes_at(start, stop - start).map_err(bad)?;
    let mut sites = Vec::new();
    for (i, entry) in table.chunks_exact(16).enumerate() {
        let at = start + 16 * i as u64;
        let entry_key = i64::from_le_bytes(entry[8..16].try_into().unwrap_or_default());
        if relative(at + 8, entry_key & !3) != key {
            continue;
        }
        let address = relative(at, i32_at(entry, 0).into());
        // A site is 5 bytes, or 2 where objtool shortened the jump.
        let bytes = match sections.bytes_at(address, 2).map_err(bad)? {
            b if b == NOP2 => b.to_vec(),
            _ => sections.bytes_at(address, 5).map_err(bad)?.to_vec(),
        };
        sites.push(HookSite {
            kind: HookKind::JumpLabel,
            address,
            location: symbols.describe(address),
            bytes,
        });
    }
    Ok(sites)
}

/// How `struct alt_instr` is laid out: 14 bytes since Linux 6.3 (`u32
/// ft_flags`, the feature in its low 16 bits), 12 before (`u16 cpuid`). Both
/// start with `s32 instr_offset; s32 repl_offset;` and keep the feature at
/// byte 8; the length of the original instruction follows the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AltLayout {
    stride: usize,
    instrlen_at: usize,
}

const ALT_LAYOUTS: [AltLayout; 2] = [
    AltLayout {
        stride: 14,
        instrlen_at: 12,
    },
    AltLayout {
        stride: 12,
        instrlen_at: 10,
    },
];

/// Feature numbers are below 32 words of 32 bits (capabilities and bugs
/// together: 24 words in 6.1, 25 in 6.12).
const MAX_FEATURE: u16 = 32 * 32;
/// Before 6.3, `ALT_NOT(feature)` sets bit 15 of the 16-bit feature field
/// (`ALTINSTR_FLAG_INV`); from 6.3 such flags live in the upper half.
const ALT_FLAG_INV: u16 = 1 << 15;

/// An `alt_instr` entry's feature field, at byte 8 in both layouts.
fn feature(entry: &[u8]) -> u16 {
    u16::from_le_bytes([entry[8], entry[9]])
}

/// The layout under which `table` divides into whole entries whose feature
/// fields are all feature numbers. Read with the wrong stride, the field is
/// other fields' bytes (offsets, lengths), and among a real kernel's
/// thousands of entries many are not; the instructions' bytes are not
/// needed, so a vmlinux cut down to the tables (the fuzz seeds) is read the
/// same way.
fn alt_layout(table: &[u8]) -> Result<AltLayout> {
    let fits = |layout: &AltLayout| {
        table.len().is_multiple_of(layout.stride)
            && table
                .chunks_exact(layout.stride)
                .all(|entry| feature(entry) & !ALT_FLAG_INV < MAX_FEATURE)
    };
    ALT_LAYOUTS.into_iter().find(fits).ok_or_else(|| {
        Error::Image(
            "not a usable vmlinux: .altinstructions fits neither alt_instr layout \
             (12 or 14 bytes per entry)"
                .into(),
        )
    })
}

/// The `.altinstructions` entries on `X86_FEATURE_XPERF`.
fn alternative_sites(sections: &Sections, symbols: &Symbols) -> Result<Vec<HookSite>> {
    let (start, stop) = table_range(symbols, "__alt_instructions", "__alt_instructions_end")?;
    let table = sections.bytes_at(start, stop - start).map_err(bad)?;
    let layout = alt_layout(table)?;
    let mut sites = Vec::new();
    for (i, entry) in table.chunks_exact(layout.stride).enumerate() {
        let at = start + (layout.stride * i) as u64;
        if feature(entry) != X86_FEATURE_XPERF {
            continue;
        }
        let address = relative(at, i32_at(entry, 0).into());
        sites.push(HookSite {
            kind: HookKind::Alternative,
            address,
            location: symbols.describe(address),
            bytes: sections
                .bytes_at(address, u64::from(entry[layout.instrlen_at]))
                .map_err(bad)?
                .to_vec(),
        });
    }
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
        // Symbol names are the file's bytes: escaped, a crafted vmlinux
        // cannot drive the terminal.
        out.push_str(&format!(
            "{:#018x}  {kind:<11}  {:<52} {bytes:<15} {}\n",
            s.address,
            xvmm_host::escape::visible(&s.location),
            if s.is_nop() { "NOP" } else { "NOT A NOP" }
        ));
    }
    out
}

#[cfg(test)]
#[path = "../tests/support/elf_fixture.rs"]
mod elf_fixture;

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    reason = "test fixtures: rel32 displacements between addresses a few bytes apart, as two's complement"
)]
mod tests {
    use super::*;

    use super::elf_fixture::*;

    /// SHF_ALLOC | SHF_EXECINSTR.
    const TEXT_FLAGS: u64 = 6;

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
        let mut section = |name: u32, kind: u32, bytes: &[u8]| {
            let offset = data.len() as u64;
            data.extend_from_slice(bytes);
            Section {
                name,
                kind,
                offset,
                size: bytes.len() as u64,
                ..Default::default()
            }
        };
        let text = Section {
            flags: TEXT_FLAGS,
            addr: base,
            ..section(1, SHT_PROGBITS, text)
        };
        let symtab = Section {
            link: 3,
            ..section(7, SHT_SYMTAB, &symtab)
        };
        let strtab = section(15, SHT_STRTAB, &strtab);
        let shstrtab = section(23, SHT_STRTAB, shstr);
        with_sections(
            data,
            &[Section::default(), text, symtab, strtab, shstrtab],
            4,
        )
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

    /// A kernel before 6.3 (Debian 12's 6.1) has 12-byte `alt_instr`
    /// entries. Seven of them (84 bytes) also divide into six 14-byte ones,
    /// so only the feature fields tell the layouts apart.
    #[test]
    fn alternatives_of_a_6_1_kernel_have_the_12_byte_layout() {
        let base = 0xffff_ffff_8100_0000u64;
        // 0x00 func: NOP5 (the xperf site), 0x05: NOP5 padding another
        // feature's site; 0x20 alt table (7 entries), 0x80 key.
        let mut text = vec![0xccu8; 0x90];
        text[0x00..0x05].copy_from_slice(&NOP5);
        text[0x05..0x0a].copy_from_slice(&NOP5);
        let alt = |instr: u64, feature: u16, at: u64| {
            let mut e = [0u8; 12];
            e[0..4].copy_from_slice(&((instr as i64 - at as i64) as i32).to_le_bytes());
            e[8..10].copy_from_slice(&feature.to_le_bytes());
            e[10] = 5;
            e
        };
        for i in 0..7 {
            let at = base + 0x20 + 12 * i as u64;
            // Entry 5 is an ALT_NOT one: bit 15 set, as 6.1 marks it.
            let (instr, feature) = match i {
                3 => (base, X86_FEATURE_XPERF),
                5 => (base + 5, 7 | ALT_FLAG_INV),
                _ => (base + 5, 7),
            };
            text[0x20 + 12 * i..0x2c + 12 * i].copy_from_slice(&alt(instr, feature, at));
        }
        let symbols = [
            ("func", base),
            ("__start___jump_table", base + 0x20),
            ("__stop___jump_table", base + 0x20),
            ("__alt_instructions", base + 0x20),
            ("__alt_instructions_end", base + 0x20 + 84),
            ("xperf_stamps_key", base + 0x80),
        ];
        let sites = find(&elf(base, &text, &symbols)).unwrap();
        let summary: Vec<_> = sites
            .iter()
            .map(|s| (s.kind, s.location.as_str(), s.bytes.len(), s.is_nop()))
            .collect();
        assert_eq!(summary, [(HookKind::Alternative, "func+0x0", 5, true)]);
        // Cut to 80 bytes, the table fits neither layout.
        let mut cut = symbols;
        cut[4].1 = base + 0x20 + 80;
        let err = find(&elf(base, &text, &cut)).unwrap_err().to_string();
        assert!(err.contains("fits neither alt_instr layout"), "{err}");
    }

    /// Found by fuzzing (fuzz/fuzz_targets/kernel_hooks.rs): a symbol name
    /// with a control character reached the terminal raw in the table.
    #[test]
    fn symbol_names_in_the_table_are_escaped() {
        let site = HookSite {
            kind: HookKind::JumpLabel,
            address: 0x1000,
            location: "evil\u{1}\u{1b}[2J\u{202e}+0x0".into(),
            bytes: NOP2.to_vec(),
        };
        let text = table(&[site]);
        assert!(text.contains("evil\\x01\\x1b[2J\\u{202e}+0x0"), "{text}");
        assert!(!text.trim_end_matches('\n').chars().any(char::is_control));
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

    #[test]
    fn truncated_section_tables_are_clear_errors() {
        let data = elf(0x1000, &[0u8; 16], &[("func", 0x1000)]);
        let err = find(&data[..data.len() - 100]).unwrap_err().to_string();
        assert_eq!(
            err,
            "kernel: not a usable vmlinux: corrupt ELF: section headers: Invalid ELF section header offset/size/alignment"
        );
        let mut many = data.clone();
        many[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        let err = find(&many).unwrap_err().to_string();
        assert!(err.contains("section headers"), "{err}");
    }

    /// Peak resident set size of this process, in KiB.
    fn peak_rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    const BOUNDED_CHILD: &str = "XVMM_HOOKS_BOUNDED_CHILD";

    /// Crafted symbol and string tables (issue 16, defect 2: 1 MB grew to
    /// ~1 GB RSS and aborted) give one-line errors at once. Measured in a
    /// fresh copy of this test binary, so that the peak RSS is this check's
    /// alone, with its address space capped at 2 GiB so that a regression
    /// fails instead of swapping the machine.
    #[test]
    fn crafted_table_sizes_fail_fast_in_bounded_memory() {
        if std::env::var_os(BOUNDED_CHILD).is_some() {
            let limit = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            // SAFETY: setrlimit reads a valid struct; only this process is affected.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
            let files = [crafted_symbol_tables(true), crafted_symbol_tables(false)];
            let before = peak_rss_kib();
            let started = std::time::Instant::now();
            let errors: Vec<String> = files
                .iter()
                .map(|f| find(f).unwrap_err().to_string())
                .collect();
            let millis = started.elapsed().as_millis();
            let grown = peak_rss_kib() - before;
            println!("RESULT {millis} {grown}\t{}", errors.join("\t"));
            return;
        }
        let name = module_path!().split_once("::").unwrap().1;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("{name}::crafted_table_sizes_fail_fast_in_bounded_memory"),
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(BOUNDED_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let result = stdout
            .lines()
            .find_map(|l| Some(l.split_once("RESULT ")?.1))
            .unwrap_or_else(|| {
                panic!(
                    "the check did not finish ({}): {stdout}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let mut fields = result.split('\t');
        let figures: Vec<u64> = fields
            .next()
            .unwrap()
            .split(' ')
            .map(|f| f.parse().unwrap())
            .collect();
        let (millis, grown_kib) = (figures[0], figures[1]);
        assert!(millis < 1000, "took {millis} ms");
        assert!(grown_kib < 16 << 10, "peak RSS grew by {grown_kib} KiB");
        assert_eq!(
            fields.collect::<Vec<_>>(),
            [
                "kernel: not a usable vmlinux: corrupt ELF: symbol table: Invalid ELF symbol table data",
                "kernel: no xperf_stamps_key symbol: not a kernel built with the xperf series (CONFIG_XPERF_STAMPS=y)",
            ]
        );
    }
}
