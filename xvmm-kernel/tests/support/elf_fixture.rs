//! Hand-built vmlinux-like ELF files with section headers: the hook finder's
//! unit tests (`xvmm-kernel/src/hooks.rs`, through `#[path]`) and the bad-input
//! corpus (`tests/bad_inputs.rs`) share them.

pub const SHT_PROGBITS: u32 = 1;
pub const SHT_SYMTAB: u32 = 2;
pub const SHT_STRTAB: u32 = 3;

/// One section header; `name` is an offset into the section-name table.
#[derive(Clone, Copy, Default)]
pub struct Section {
    pub name: u32,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
}

/// `body` (whose first 64 bytes are left for the ELF header) with the
/// section headers appended and an ELF64 little-endian x86-64 header that
/// points at them; `shstrndx` names the section-name table (0: none).
pub fn with_sections(mut body: Vec<u8>, sections: &[Section], shstrndx: u16) -> Vec<u8> {
    let shoff = body.len() as u64;
    for s in sections {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&s.name.to_le_bytes());
        h[4..8].copy_from_slice(&s.kind.to_le_bytes());
        h[8..16].copy_from_slice(&s.flags.to_le_bytes());
        h[16..24].copy_from_slice(&s.addr.to_le_bytes());
        h[24..32].copy_from_slice(&s.offset.to_le_bytes());
        h[32..40].copy_from_slice(&s.size.to_le_bytes());
        h[40..44].copy_from_slice(&s.link.to_le_bytes());
        body.extend_from_slice(&h);
    }
    body[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    body[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
    body[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    body[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    body[0x3c..0x3e].copy_from_slice(&u16::try_from(sections.len()).unwrap().to_le_bytes());
    body[0x3e..0x40].copy_from_slice(&shstrndx.to_le_bytes());
    body
}

/// Issue 16, defect 2 (`xvmm kernel hooks` trusted the table sizes: 1 MB
/// grew to ~1 GB RSS and aborted): a 1 MiB ELF whose 24,000 symbols all
/// name the same 400,000-byte string; with `claim_huge`, .symtab and
/// .strtab also claim 1 TiB each.
pub fn crafted_symbol_tables(claim_huge: bool) -> Vec<u8> {
    const SYMBOLS: u64 = 24_000;
    let mut data = vec![0u8; 64];
    let symtab_off = data.len() as u64;
    for i in 0..SYMBOLS {
        let mut e = [0u8; 24];
        e[0..4].copy_from_slice(&1u32.to_le_bytes());
        e[8..16].copy_from_slice(&(0x1000 + i).to_le_bytes());
        data.extend_from_slice(&e);
    }
    let strtab_off = data.len() as u64;
    data.push(0);
    data.extend(std::iter::repeat_n(b'A', 400_000));
    data.push(0);
    let (symtab_size, strtab_size) = if claim_huge {
        (1 << 40, 1 << 40)
    } else {
        (SYMBOLS * 24, data.len() as u64 - strtab_off)
    };
    let sections = [
        Section::default(),
        Section {
            kind: SHT_SYMTAB,
            offset: symtab_off,
            size: symtab_size,
            link: 2,
            ..Default::default()
        },
        Section {
            kind: SHT_STRTAB,
            offset: strtab_off,
            size: strtab_size,
            ..Default::default()
        },
    ];
    with_sections(data, &sections, 0)
}
