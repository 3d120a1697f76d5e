//! The one ELF reader: 64-bit little-endian x86-64 files, read through the
//! `object` crate (fuzzed upstream) instead of hand-written header arithmetic.
//! Users: the kernel image check (`boot::image`, program headers and the PVH
//! note), the hook finder (`kernel::hooks`, sections and symbols) and the
//! static-binary check (`linux::builtin`, `PT_INTERP` and `DT_NEEDED`).
//!
//! Every offset and size the file states is checked against the file before
//! it is used, and nothing is allocated from a size the file claims: memory
//! use is bounded by the input size. Errors are [`ElfError`]s, each one line.
//!
//! Two ways in: [`ElfFile::parse`] over bytes in memory, and
//! [`ElfFile::from_stream`] over a `Read + Seek` stream (a kernel file), which
//! reads only what is asked for: the ELF header, the program header table
//! (at most 65,535 x 56 bytes, never past the end of the file) and at most
//! [`MAX_NOTE_BYTES`] of notes.

use object::elf::{
    Dyn64, FileHeader32, FileHeader64, ProgramHeader64, SectionHeader64, DT_NEEDED, DT_NULL,
    ELFCLASS32, ELFCLASS64, ELFDATA2LSB, ELFDATA2MSB, ELFMAG, EM_X86_64, ET_DYN, ET_EXEC,
    PT_DYNAMIC, PT_INTERP, PT_LOAD, PT_NOTE, SHF_ALLOC, SHT_PROGBITS, SHT_SYMTAB,
};
use object::read::elf::{
    Dyn, FileHeader, NoteIterator, ProgramHeader, SectionHeader, SectionTable, Sym,
};
use object::read::{ReadCache, ReadRef, StringTable};
use object::{LittleEndian, SectionIndex};
use std::fmt;
use std::io::{Read, Seek};

type Header = FileHeader64<LittleEndian>;
const LE: LittleEndian = LittleEndian;

/// Notes are searched in at most this many bytes of `PT_NOTE` segments in all
/// (Linux's are a few hundred bytes); larger segments are skipped unread.
pub const MAX_NOTE_BYTES: u64 = 1 << 20;
/// The most [`ElfFile::bytes_at_virtual`] reads at once (a function's first
/// instructions are what it is for).
pub const MAX_VIRTUAL_READ: u64 = 1 << 16;
/// Symbol names longer than this are treated as absent. A kernel's are at
/// most 511 bytes (KSYM_NAME_LEN); the bound keeps lookups linear in the file.
pub const MAX_SYMBOL_NAME: usize = 1024;
#[allow(
    clippy::cast_possible_truncation,
    reason = "an ELF64 program header is 56 bytes (object's repr(C) struct)"
)]
const PROGRAM_HEADER_SIZE: u16 = std::mem::size_of::<ProgramHeader64<LittleEndian>>() as u16;

/// Why a file is not a usable ELF file. Each renders as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// No `\x7fELF` magic.
    NotElf,
    /// The file, of this many bytes, ends inside the ELF header.
    TooShort(u64),
    BigEndian,
    /// `EI_DATA` is neither little- nor big-endian.
    UnknownEncoding(u8),
    /// `EI_CLASS` is neither 32- nor 64-bit.
    UnknownClass(u8),
    /// `e_machine` is not x86-64.
    Machine(u16),
    /// A 32-bit x86-64 file.
    Not64Bit,
    /// `e_phentsize` is not the size of an ELF64 program header.
    ProgramHeaderSize(u16),
    ProgramHeadersOutside {
        offset: u64,
        count: u64,
        file_size: u64,
    },
    /// Segment `index`'s file bytes end at `end`, past the file's end.
    SegmentOutside {
        index: usize,
        end: u64,
        file_size: u64,
    },
    /// A `PT_LOAD` segment with more file bytes than memory bytes.
    SegmentFileLargerThanMemory(usize),
    /// A `PT_LOAD` segment whose physical range wraps around.
    SegmentWraps(usize),
    NoSections,
    NoSymbols,
    /// No allocated `PROGBITS` section holds `len` bytes at `address`.
    Unmapped {
        address: u64,
        len: u64,
    },
    /// `object` rejected a structure: `what` it was and `why`.
    Corrupt {
        what: &'static str,
        why: String,
    },
    /// The stream's length cannot be read.
    Unreadable,
    /// No `PT_LOAD` segment's file bytes hold `len` bytes at virtual
    /// address `address` (or `len` is over [`MAX_VIRTUAL_READ`]).
    NotLoaded {
        address: u64,
        len: u64,
    },
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::NotElf => write!(f, "not an ELF file"),
            ElfError::TooShort(size) => write!(
                f,
                "truncated ELF: {size} bytes, shorter than an ELF header"
            ),
            ElfError::BigEndian => write!(f, "big-endian ELF: not x86-64"),
            ElfError::UnknownEncoding(d) => write!(f, "corrupt ELF: unknown data encoding {d}"),
            ElfError::UnknownClass(c) => write!(f, "corrupt ELF: unknown class {c}"),
            ElfError::Machine(m) => write!(
                f,
                "ELF for {} (e_machine {m}), not x86-64",
                machine_name(*m)
            ),
            ElfError::Not64Bit => write!(f, "32-bit ELF: need a 64-bit x86-64 file"),
            ElfError::ProgramHeaderSize(n) => write!(
                f,
                "corrupt ELF: program header size {n}, expected {PROGRAM_HEADER_SIZE}"
            ),
            ElfError::ProgramHeadersOutside {
                offset,
                count,
                file_size,
            } => write!(
                f,
                "truncated ELF: program headers at {offset:#x} ({count} entries) lie outside the file's {file_size} bytes"
            ),
            ElfError::SegmentOutside {
                index,
                end,
                file_size,
            } => write!(
                f,
                "truncated ELF: segment {index} needs bytes up to {end:#x}, the file has {file_size}"
            ),
            ElfError::SegmentFileLargerThanMemory(i) => write!(
                f,
                "corrupt ELF: segment {i} has more file bytes than memory bytes"
            ),
            ElfError::SegmentWraps(i) => write!(
                f,
                "corrupt ELF: segment {i} wraps around the address space"
            ),
            ElfError::NoSections => write!(f, "no section headers (stripped?)"),
            ElfError::NoSymbols => write!(f, "no .symtab (stripped?)"),
            ElfError::Unmapped { address, len } => {
                write!(f, "no section holds {len} bytes at address {address:#x}")
            }
            ElfError::Corrupt { what, why } => write!(f, "corrupt ELF: {what}: {why}"),
            ElfError::Unreadable => write!(f, "cannot read the file's length"),
            ElfError::NotLoaded { address, len } => write!(
                f,
                "no loaded segment holds {len} bytes at virtual address {address:#x}"
            ),
        }
    }
}

impl std::error::Error for ElfError {}

type Result<T> = std::result::Result<T, ElfError>;

fn corrupt(what: &'static str) -> impl Fn(object::read::Error) -> ElfError {
    move |e| ElfError::Corrupt {
        what,
        why: e.to_string(),
    }
}

/// ELF machine numbers worth naming in an error.
pub fn machine_name(machine: u16) -> &'static str {
    match machine {
        3 => "i386",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC64",
        22 => "s390",
        40 => "ARM",
        62 => "x86-64",
        183 => "AArch64",
        243 => "RISC-V",
        258 => "LoongArch",
        _ => "an unknown architecture",
    }
}

/// A stream read piecewise for [`ElfFile::from_stream`]: each read is checked
/// against the stream's length and kept as long as the source lives.
pub struct StreamSource<S: Read + Seek>(ReadCache<S>);

impl<S: Read + Seek> StreamSource<S> {
    pub fn new(stream: S) -> Self {
        StreamSource(ReadCache::new(stream))
    }
}

/// Where a `PT_LOAD` segment's bytes are in the file and go in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub paddr: u64,
    pub offset: u64,
    pub file_size: u64,
    pub mem_size: u64,
}

/// A 64-bit little-endian x86-64 ELF file: its header and program headers,
/// checked. `R` is where the bytes come from (a slice, or a [`StreamSource`]).
pub struct ElfFile<'data, R: ReadRef<'data> = &'data [u8]> {
    data: R,
    size: u64,
    header: &'data Header,
    segments: &'data [ProgramHeader64<LittleEndian>],
}

impl<'data> ElfFile<'data> {
    /// Parses a whole file in memory.
    pub fn parse(data: &'data [u8]) -> Result<Self> {
        Self::parse_from(data)
    }
}

impl<'data, S: Read + Seek> ElfFile<'data, &'data ReadCache<S>> {
    /// Parses a file from a stream, reading only the header and the program
    /// header table now (see the module documentation for what later calls read).
    pub fn from_stream(source: &'data StreamSource<S>) -> Result<Self> {
        Self::parse_from(&source.0)
    }
}

impl<'data, R: ReadRef<'data>> ElfFile<'data, R> {
    fn parse_from(data: R) -> Result<Self> {
        let size = data.len().map_err(|()| ElfError::Unreadable)?;
        let header = check_header(data, size)?;
        let segments = program_headers(header, data, size)?;
        Ok(ElfFile {
            data,
            size,
            header,
            segments,
        })
    }

    /// Whether `e_type` says executable (`ET_EXEC`, or `ET_DYN` for PIE).
    pub fn is_executable(&self) -> bool {
        matches!(self.kind(), ET_EXEC | ET_DYN)
    }

    /// `e_type`.
    pub fn kind(&self) -> u16 {
        self.header.e_type(LE)
    }

    /// Whether a `PT_INTERP` segment names a program interpreter (a
    /// dynamically linked executable).
    pub fn has_interpreter(&self) -> bool {
        self.segments.iter().any(|p| p.p_type(LE) == PT_INTERP)
    }

    /// Whether a `PT_DYNAMIC` segment names a shared library (`DT_NEEDED`
    /// before its `DT_NULL`): such a file needs a loader even without
    /// `PT_INTERP` (a shared library such as libm). A static-pie has a
    /// `PT_DYNAMIC` for its own relocations, with no `DT_NEEDED`. A
    /// segment's trailing partial entry is no entry; every `PT_DYNAMIC`
    /// must lie in the file.
    pub fn needs_libraries(&self) -> Result<bool> {
        let mut needs = false;
        for (index, p) in self.segments.iter().enumerate() {
            if p.p_type(LE) != PT_DYNAMIC {
                continue;
            }
            let bytes = p.data(LE, self.data).map_err(|()| {
                let (offset, size) = p.file_range(LE);
                ElfError::SegmentOutside {
                    index,
                    end: offset.saturating_add(size),
                    file_size: self.size,
                }
            })?;
            let count = bytes.len() / std::mem::size_of::<Dyn64<LittleEndian>>();
            let entries = object::pod::slice_from_bytes::<Dyn64<LittleEndian>>(bytes, count)
                .map_or(&[][..], |(entries, _)| entries);
            needs |= entries
                .iter()
                .map(|d| d.tag(LE))
                .take_while(|&tag| tag != DT_NULL)
                .any(|tag| tag == DT_NEEDED);
        }
        Ok(needs)
    }

    /// The physical address range `start..end` of the `PT_LOAD` segments with
    /// memory bytes, or `None` when there are none. Checks first that every
    /// segment's file bytes lie inside the file, and that load segments have
    /// no more file than memory bytes and do not wrap around.
    pub fn load_range(&self) -> Result<Option<(u64, u64)>> {
        let mut range: Option<(u64, u64)> = None;
        for (index, p) in self.segments.iter().enumerate() {
            let (offset, file_size) = p.file_range(LE);
            if offset
                .checked_add(file_size)
                .is_none_or(|end| end > self.size)
            {
                return Err(ElfError::SegmentOutside {
                    index,
                    end: offset.saturating_add(file_size),
                    file_size: self.size,
                });
            }
            let mem_size = p.p_memsz(LE);
            if p.p_type(LE) != PT_LOAD || mem_size == 0 {
                continue;
            }
            if file_size > mem_size {
                return Err(ElfError::SegmentFileLargerThanMemory(index));
            }
            let start = p.p_paddr(LE);
            let end = start
                .checked_add(mem_size)
                .ok_or(ElfError::SegmentWraps(index))?;
            range = Some(range.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
        }
        Ok(range)
    }

    /// The `PT_LOAD` segments with memory bytes, in file order (call
    /// [`ElfFile::load_range`] first: it checks them).
    pub fn load_segments(&self) -> Vec<LoadSegment> {
        self.segments
            .iter()
            .filter(|p| p.p_type(LE) == PT_LOAD && p.p_memsz(LE) > 0)
            .map(|p| LoadSegment {
                paddr: p.p_paddr(LE),
                offset: p.p_offset(LE),
                file_size: p.p_filesz(LE),
                mem_size: p.p_memsz(LE),
            })
            .collect()
    }

    /// `len` bytes at virtual address `address`, from the `PT_LOAD` segment
    /// whose file bytes hold them all: how a core file such as `/proc/kcore`
    /// maps the kernel's text. Reads only those bytes; at most
    /// [`MAX_VIRTUAL_READ`].
    pub fn bytes_at_virtual(&self, address: u64, len: u64) -> Result<&'data [u8]> {
        let not_loaded = ElfError::NotLoaded { address, len };
        if len > MAX_VIRTUAL_READ {
            return Err(not_loaded);
        }
        for (index, p) in self.segments.iter().enumerate() {
            let (offset, file_size) = p.file_range(LE);
            let inside = address
                .checked_sub(p.p_vaddr(LE))
                .filter(|delta| delta.checked_add(len).is_some_and(|end| end <= file_size));
            let (PT_LOAD, Some(delta)) = (p.p_type(LE), inside) else {
                continue;
            };
            let at = offset.saturating_add(delta);
            return self
                .data
                .read_bytes_at(at, len)
                .map_err(|()| ElfError::SegmentOutside {
                    index,
                    end: at.saturating_add(len),
                    file_size: self.size,
                });
        }
        Err(not_loaded)
    }

    /// The descriptor of the first note named `name` of type `kind` in the
    /// `PT_NOTE` segments (at most [`MAX_NOTE_BYTES`] of them are read). A
    /// malformed note ends the search in its segment.
    pub fn find_note(&self, name: &[u8], kind: u32) -> Result<Option<&'data [u8]>> {
        let mut budget = MAX_NOTE_BYTES;
        for (index, p) in self.segments.iter().enumerate() {
            let (offset, size) = p.file_range(LE);
            if p.p_type(LE) != PT_NOTE || size > budget {
                continue;
            }
            budget -= size;
            let bytes = p
                .data(LE, self.data)
                .map_err(|()| ElfError::SegmentOutside {
                    index,
                    end: offset.saturating_add(size),
                    file_size: self.size,
                })?;
            // binutils reads notes 4-aligned unless the segment says 8.
            let align = if p.p_align(LE) == 8 { 8 } else { 4 };
            let notes =
                NoteIterator::<Header>::new(LE, align, bytes).map_err(corrupt("note segment"))?;
            for note in notes.map_while(std::result::Result::ok) {
                if note.name() == name && note.n_type(LE) == kind {
                    return Ok(Some(note.desc()));
                }
            }
        }
        Ok(None)
    }

    /// The section table (an error when there is none).
    pub fn sections(&self) -> Result<Sections<'data, R>> {
        let headers = self
            .header
            .section_headers(LE, self.data)
            .map_err(corrupt("section headers"))?;
        if headers.is_empty() {
            return Err(ElfError::NoSections);
        }
        // Section names are not needed: no section-name string table.
        let table = SectionTable::new(headers, StringTable::default());
        let mut mapped: Vec<(u64, u64, SectionIndex)> = table
            .enumerate()
            .filter(|(i, s): &(SectionIndex, &SectionHeader64<LittleEndian>)| {
                i.0 != 0
                    && s.sh_type(LE) == SHT_PROGBITS
                    && s.sh_flags(LE) & u64::from(SHF_ALLOC) != 0
                    && s.sh_size(LE) > 0
            })
            .filter_map(|(i, s)| {
                let start = s.sh_addr(LE);
                Some((start, start.checked_add(s.sh_size(LE))?, i))
            })
            .collect();
        mapped.sort_unstable_by_key(|&(start, end, _)| (start, end));
        Ok(Sections {
            data: self.data,
            table,
            mapped,
        })
    }
}

/// Checks the identification and the header, in the order that names the
/// problem best: magic, endianness, machine, class.
fn check_header<'data, R: ReadRef<'data>>(data: R, size: u64) -> Result<&'data Header> {
    let magic = data.read_bytes_at(0, size.min(4)).unwrap_or_default();
    if magic != ELFMAG {
        return Err(ElfError::NotElf);
    }
    // The identification, e_type and e_machine are laid out alike in both
    // classes; the 32-bit header is the shorter one to read them from.
    let too_short = |()| ElfError::TooShort(size);
    let common = data
        .read_at::<FileHeader32<LittleEndian>>(0)
        .map_err(too_short)?;
    let ident = common.e_ident();
    match ident.data {
        ELFDATA2LSB => {}
        ELFDATA2MSB => return Err(ElfError::BigEndian),
        other => return Err(ElfError::UnknownEncoding(other)),
    }
    if ident.class != ELFCLASS32 && ident.class != ELFCLASS64 {
        return Err(ElfError::UnknownClass(ident.class));
    }
    let machine = common.e_machine(LE);
    if machine != EM_X86_64 {
        return Err(ElfError::Machine(machine));
    }
    if ident.class != ELFCLASS64 {
        return Err(ElfError::Not64Bit);
    }
    // Not `Header::parse`, which also insists on EI_VERSION 1: Linux's loader
    // ignores that byte, and so does xvmm.
    data.read_at::<Header>(0).map_err(too_short)
}

fn program_headers<'data, R: ReadRef<'data>>(
    header: &'data Header,
    data: R,
    size: u64,
) -> Result<&'data [ProgramHeader64<LittleEndian>]> {
    let entry_size = header.e_phentsize(LE);
    if header.e_phnum(LE) > 0 && header.e_phoff(LE) != 0 && entry_size != PROGRAM_HEADER_SIZE {
        return Err(ElfError::ProgramHeaderSize(entry_size));
    }
    header.program_headers(LE, data).map_err(|_| {
        let count = header.phnum(LE, data).unwrap_or(header.e_phnum(LE).into());
        ElfError::ProgramHeadersOutside {
            offset: header.e_phoff(LE),
            count: count as u64,
            file_size: size,
        }
    })
}

/// The section table of an [`ElfFile`].
pub struct Sections<'data, R: ReadRef<'data> = &'data [u8]> {
    data: R,
    table: SectionTable<'data, Header, R>,
    /// (start, end, index) of every allocated, non-empty `PROGBITS` section,
    /// by address.
    mapped: Vec<(u64, u64, SectionIndex)>,
}

impl<'data, R: ReadRef<'data>> Sections<'data, R> {
    /// `len` bytes at virtual address `address`, as linked: from the allocated
    /// `PROGBITS` section holding them. Linked sections do not overlap; where
    /// a crafted file's do, the one starting last at or below `address` counts.
    pub fn bytes_at(&self, address: u64, len: u64) -> Result<&'data [u8]> {
        let unmapped = ElfError::Unmapped { address, len };
        let below = self
            .mapped
            .partition_point(|&(start, _, _)| start <= address);
        let &(start, end, index) = below
            .checked_sub(1)
            .and_then(|i| self.mapped.get(i))
            .ok_or_else(|| unmapped.clone())?;
        if address.checked_add(len).is_none_or(|last| last > end) {
            return Err(unmapped);
        }
        let bytes = self
            .table
            .section(index)
            .and_then(|s| s.data(LE, self.data))
            .map_err(corrupt("section"))?;
        let from = usize::try_from(address - start).map_err(|_| unmapped.clone())?;
        let to = usize::try_from(len)
            .ok()
            .and_then(|n| from.checked_add(n))
            .ok_or_else(|| unmapped.clone())?;
        bytes.get(from..to).ok_or(unmapped)
    }

    /// The `.symtab` symbols with a name and a non-zero value for which `keep`
    /// holds, for lookups by name and by address.
    pub fn symbols(&self, keep: impl Fn(&[u8]) -> bool) -> Result<Symbols<'data>> {
        let symtab = self
            .table
            .symbols(LE, self.data, SHT_SYMTAB)
            .map_err(corrupt("symbol table"))?;
        if symtab.is_empty() {
            return Err(ElfError::NoSymbols);
        }
        let strings = self
            .table
            .section(symtab.string_section())
            .and_then(|s| s.data(LE, self.data))
            .map_err(corrupt("symbol string table"))?;
        // At most one entry per 24-byte symbol the file holds.
        let mut by_address: Vec<(u64, &'data [u8])> = symtab
            .iter()
            .filter(|s| s.st_name(LE) != 0 && s.st_value(LE) != 0)
            .filter_map(|s| Some((s.st_value(LE), c_string(strings, s.st_name(LE))?)))
            .filter(|(_, name)| keep(name))
            .collect();
        by_address.sort_unstable();
        Ok(Symbols { by_address })
    }
}

/// The NUL-terminated name at `offset` in a string table, if it ends within
/// [`MAX_SYMBOL_NAME`] bytes.
fn c_string(strings: &[u8], offset: u32) -> Option<&[u8]> {
    let end = usize::try_from(offset)
        .ok()?
        .saturating_add(MAX_SYMBOL_NAME + 1)
        .min(strings.len());
    StringTable::new(strings, 0, end as u64).get(offset).ok()
}

/// Symbols of a file, sorted by (address, name).
pub struct Symbols<'data> {
    by_address: Vec<(u64, &'data [u8])>,
}

impl Symbols<'_> {
    /// The lowest address of a symbol called `name`.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.by_address
            .iter()
            .find(|(_, n)| *n == name.as_bytes())
            .map(|&(a, _)| a)
    }

    /// `symbol+0xoffset` for an address: the symbol at the highest address at
    /// or below it (the greatest name among several there), or the bare
    /// address when no symbol lies below it.
    pub fn describe(&self, address: u64) -> String {
        let below = self.by_address.partition_point(|&(a, _)| a <= address);
        match below.checked_sub(1).map(|i| self.by_address[i]) {
            Some((at, name)) => format!("{}+{:#x}", String::from_utf8_lossy(name), address - at),
            None => format!("{address:#x}"),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "test fixtures: ELF files of a few headers, names and bytes"
)]
mod tests {
    use super::*;

    /// Builds ELF64 x86-64 files for tests: header fields, program headers
    /// and sections, laid out at their natural offsets.
    pub(crate) struct Builder {
        pub machine: u16,
        pub class: u8,
        pub kind: u16,
        /// (p_type, offset, address, file size, memory size, align)
        pub segments: Vec<(u32, u64, u64, u64, u64, u64)>,
        pub body: Vec<u8>,
        /// (sh_type, flags, address, offset, size, link)
        pub sections: Vec<(u32, u64, u64, u64, u64, u32)>,
    }

    impl Builder {
        pub(crate) fn new() -> Self {
            Builder {
                machine: EM_X86_64,
                class: ELFCLASS64,
                kind: ET_EXEC,
                segments: Vec::new(),
                body: Vec::new(),
                sections: Vec::new(),
            }
        }

        /// Offset in the output of the next byte appended to `body`.
        pub(crate) fn offset(&self) -> u64 {
            (64 + 56 * self.segments.len() + self.body.len()) as u64
        }

        pub(crate) fn build(&self) -> Vec<u8> {
            let phnum = self.segments.len() as u16;
            let shoff = self.offset();
            let mut b = Vec::new();
            b.extend_from_slice(&ELFMAG);
            b.extend_from_slice(&[self.class, ELFDATA2LSB, object::elf::EV_CURRENT, 0]);
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(&self.kind.to_le_bytes());
            b.extend_from_slice(&self.machine.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&0x100_0000u64.to_le_bytes()); // e_entry
            b.extend_from_slice(&if phnum > 0 { 64u64 } else { 0 }.to_le_bytes());
            let shnum = self.sections.len() as u16;
            b.extend_from_slice(&if shnum > 0 { shoff } else { 0 }.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
            for v in [64u16, 56, phnum, 64, shnum, 0] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            for &(kind, offset, addr, filesz, memsz, align) in &self.segments {
                b.extend_from_slice(&kind.to_le_bytes());
                b.extend_from_slice(&5u32.to_le_bytes());
                for v in [offset, addr, addr, filesz, memsz, align] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            b.extend_from_slice(&self.body);
            for &(kind, flags, addr, offset, size, link) in &self.sections {
                let mut h = [0u8; 64];
                h[4..8].copy_from_slice(&kind.to_le_bytes());
                h[8..16].copy_from_slice(&flags.to_le_bytes());
                h[16..24].copy_from_slice(&addr.to_le_bytes());
                h[24..32].copy_from_slice(&offset.to_le_bytes());
                h[32..40].copy_from_slice(&size.to_le_bytes());
                h[40..44].copy_from_slice(&link.to_le_bytes());
                b.extend_from_slice(&h);
            }
            b
        }
    }

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(4), 0);
        let mut n = Vec::new();
        for v in [name.len() as u32, desc.len() as u32, kind] {
            n.extend_from_slice(&v.to_le_bytes());
        }
        n.extend_from_slice(name);
        pad(&mut n);
        n.extend_from_slice(desc);
        pad(&mut n);
        n
    }

    fn err(bytes: &[u8]) -> String {
        ElfFile::parse(bytes).err().expect("an error").to_string()
    }

    #[test]
    fn header_checks_name_the_problem() {
        let good = Builder::new().build();
        assert!(ElfFile::parse(&good).is_ok());
        assert_eq!(err(b""), "not an ELF file");
        assert_eq!(err(b"#!/bin/sh\necho hi\n"), "not an ELF file");
        assert_eq!(
            err(&good[..40]),
            "truncated ELF: 40 bytes, shorter than an ELF header"
        );
        assert_eq!(
            err(&good[..10]),
            "truncated ELF: 10 bytes, shorter than an ELF header"
        );
        let mut big = good.clone();
        big[5] = ELFDATA2MSB;
        assert_eq!(err(&big), "big-endian ELF: not x86-64");
        let mut arm = Builder::new();
        arm.machine = 183;
        assert_eq!(
            err(&arm.build()),
            "ELF for AArch64 (e_machine 183), not x86-64"
        );
        // A 32-bit i386 file is named by its machine, not its class.
        let mut i386 = good[..52].to_vec();
        i386[4] = ELFCLASS32;
        i386[0x12..0x14].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(err(&i386), "ELF for i386 (e_machine 3), not x86-64");
        i386[0x12..0x14].copy_from_slice(&EM_X86_64.to_le_bytes());
        assert_eq!(err(&i386), "32-bit ELF: need a 64-bit x86-64 file");
        // EI_VERSION is not checked (Linux's loader does not either).
        let mut version = good.clone();
        version[6] = 0;
        assert!(ElfFile::parse(&version).is_ok());
    }

    #[test]
    fn program_headers_are_checked_against_the_file() {
        let mut b = Builder::new();
        b.segments = vec![(PT_LOAD, 0, 0x100_0000, 0x10, 0x20, 0x1000); 2];
        let file = b.build();
        let elf = ElfFile::parse(&file).unwrap();
        assert_eq!(elf.load_range(), Ok(Some((0x100_0000, 0x100_0020))));
        let segment = LoadSegment {
            paddr: 0x100_0000,
            offset: 0,
            file_size: 0x10,
            mem_size: 0x20,
        };
        assert_eq!(elf.load_segments(), [segment; 2]);
        assert!(!elf.has_interpreter());
        assert_eq!(
            err(&file[..100]),
            "truncated ELF: program headers at 0x40 (2 entries) lie outside the file's 100 bytes"
        );
        let mut wrong_size = file.clone();
        wrong_size[0x36] = 32;
        assert_eq!(
            err(&wrong_size),
            "corrupt ELF: program header size 32, expected 56"
        );
        let mut far = file.clone();
        far[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(&far).contains("lie outside"), "{}", err(&far));
        // e_phnum at 0x38, not 0x3a (e_shentsize).
        let mut more = file.clone();
        more[0x38] = 3;
        assert!(err(&more).contains("(3 entries) lie outside"));
    }

    #[test]
    fn segments_must_lie_in_the_file_and_not_wrap() {
        let mut b = Builder::new();
        b.segments = vec![(PT_LOAD, 0, 0x1000, 0x10, 0x10, 0)];
        let ok = b.build();
        let segment_error = |b: &Builder| {
            let bytes = b.build();
            let elf = ElfFile::parse(&bytes).unwrap();
            elf.load_range().unwrap_err().to_string()
        };
        assert!(ElfFile::parse(&ok).unwrap().load_range().is_ok());
        b.segments[0].1 = 0x80;
        assert_eq!(
            segment_error(&b),
            "truncated ELF: segment 0 needs bytes up to 0x90, the file has 120"
        );
        b.segments[0] = (PT_LOAD, 0, 0x1000, 0x10, 0x8, 0);
        assert!(segment_error(&b).contains("more file bytes than memory bytes"));
        b.segments[0] = (PT_LOAD, 0, u64::MAX - 4, 0x8, 0x8, 0);
        assert!(segment_error(&b).contains("wraps around"));
        b.segments[0] = (4, u64::MAX, 0, 2, 2, 0);
        assert!(segment_error(&b).contains("segment 0 needs bytes up to 0xffffffffffffffff"));
    }

    #[test]
    fn interpreter_and_type() {
        let mut b = Builder::new();
        b.segments = vec![(6, 0, 0, 0, 0, 8), (PT_INTERP, 0, 0, 0, 0, 1)];
        let dynamic = b.build();
        assert!(ElfFile::parse(&dynamic).unwrap().has_interpreter());
        assert!(ElfFile::parse(&dynamic).unwrap().is_executable());
        b.kind = 1; // ET_REL
        assert!(!ElfFile::parse(&b.build()).unwrap().is_executable());
    }

    #[test]
    fn notes_by_name_and_type() {
        let mut b = Builder::new();
        let mut notes = note(b"GNU", 3, &[1, 2, 3, 4, 5]);
        notes.extend(note(b"Xen", 18, &0x100_0000u32.to_le_bytes()));
        // Alignments other than 8 read as 4, like binutils (and today's kernels).
        b.segments = vec![(PT_NOTE, 64 + 56, 0, notes.len() as u64, 0, 0x1000)];
        b.body = notes;
        let file = b.build();
        let elf = ElfFile::parse(&file).unwrap();
        assert_eq!(
            elf.find_note(b"Xen", 18),
            Ok(Some(&0x100_0000u32.to_le_bytes()[..]))
        );
        assert_eq!(elf.find_note(b"Xen", 17), Ok(None));
        assert_eq!(elf.find_note(b"GNU", 3), Ok(Some(&[1, 2, 3, 4, 5][..])));
        // A note whose descriptor runs past its segment ends that segment's search.
        let mut cut = file.clone();
        cut[64 + 56 + 4] = 200;
        assert_eq!(
            ElfFile::parse(&cut).unwrap().find_note(b"Xen", 18),
            Ok(None)
        );
    }

    #[test]
    fn note_segments_beyond_the_budget_are_not_read() {
        // A 2 MiB file whose 1000 note segments each claim 1 MiB of it.
        let mut b = Builder::new();
        b.segments = vec![(PT_NOTE, 0, 0, MAX_NOTE_BYTES, 0, 4); 1000];
        b.body = vec![0; 2 << 20];
        let counting = CountingStream::new(b.build());
        let source = StreamSource::new(&counting);
        let elf = ElfFile::from_stream(&source).unwrap();
        assert_eq!(elf.find_note(b"Xen", 18), Ok(None));
        let read = counting.read.get();
        // The magic, the header (its common part, then all of it), the
        // program headers and one segment's worth of notes.
        assert_eq!(read, 4 + 52 + 64 + 1000 * 56 + MAX_NOTE_BYTES);
    }

    /// A stream that counts the bytes read from it.
    pub(crate) struct CountingStream {
        pub bytes: Vec<u8>,
        pub pos: std::cell::Cell<u64>,
        pub read: std::cell::Cell<u64>,
    }

    impl CountingStream {
        pub(crate) fn new(bytes: Vec<u8>) -> Self {
            CountingStream {
                bytes,
                pos: 0.into(),
                read: 0.into(),
            }
        }
    }

    impl Read for &CountingStream {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let pos = self.pos.get() as usize;
            let n = buf.len().min(self.bytes.len().saturating_sub(pos));
            buf[..n].copy_from_slice(&self.bytes[pos..pos + n]);
            self.pos.set((pos + n) as u64);
            self.read.set(self.read.get() + n as u64);
            Ok(n)
        }
    }

    impl Seek for &CountingStream {
        fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
            let pos = match to {
                std::io::SeekFrom::Start(p) => p,
                std::io::SeekFrom::End(d) => (self.bytes.len() as u64).saturating_add_signed(d),
                std::io::SeekFrom::Current(d) => self.pos.get().saturating_add_signed(d),
            };
            self.pos.set(pos);
            Ok(pos)
        }
    }

    /// A file with one allocated PROGBITS section at `base` holding `text`,
    /// and a symbol table over `strings` with `(name offset, value)` symbols.
    fn with_symbols(base: u64, text: &[u8], symbols: &[(u32, u64)], strings: &[u8]) -> Vec<u8> {
        let mut b = Builder::new();
        let text_at = b.offset();
        b.body.extend_from_slice(text);
        let symtab_at = b.offset();
        b.body.extend_from_slice(&[0; 24]);
        for &(name, value) in symbols {
            let mut e = [0u8; 24];
            e[0..4].copy_from_slice(&name.to_le_bytes());
            e[8..16].copy_from_slice(&value.to_le_bytes());
            b.body.extend_from_slice(&e);
        }
        let strtab_at = b.offset();
        b.body.extend_from_slice(strings);
        let alloc = u64::from(SHF_ALLOC);
        b.sections = vec![
            (0, 0, 0, 0, 0, 0),
            (SHT_PROGBITS, alloc, base, text_at, text.len() as u64, 0),
            (
                SHT_SYMTAB,
                0,
                0,
                symtab_at,
                24 * (symbols.len() as u64 + 1),
                3,
            ),
            (3, 0, 0, strtab_at, strings.len() as u64, 0),
        ];
        b.build()
    }

    #[test]
    fn symbols_by_name_and_by_address() {
        let base = 0xffff_ffff_8100_0000u64;
        let strings = b"\0func_a\0func_b\0.Llocal\0zeta\0";
        let file = with_symbols(
            base,
            &[0x90; 0x40],
            &[
                (1, base),
                (8, base + 0x10),
                (15, base + 0x18),
                (23, base + 0x10),
            ],
            strings,
        );
        let elf = ElfFile::parse(&file).unwrap();
        let sections = elf.sections().unwrap();
        let all = sections.symbols(|_| true).unwrap();
        assert_eq!(all.address_of("func_b"), Some(base + 0x10));
        assert_eq!(all.address_of("nope"), None);
        assert_eq!(all.describe(base + 3), "func_a+0x3");
        // Two symbols at one address: the greatest name.
        assert_eq!(all.describe(base + 0x12), "zeta+0x2");
        assert_eq!(all.describe(base + 0x19), ".Llocal+0x1");
        assert_eq!(all.describe(base - 1), "0xffffffff80ffffff");
        let named = sections.symbols(|n| !n.starts_with(b".L")).unwrap();
        assert_eq!(named.describe(base + 0x19), "zeta+0x9");
        assert_eq!(named.address_of(".Llocal"), None);
        assert_eq!(sections.bytes_at(base + 0x3f, 1), Ok(&[0x90][..]));
        assert_eq!(
            sections.bytes_at(base + 0x3f, 2).unwrap_err().to_string(),
            "no section holds 2 bytes at address 0xffffffff8100003f"
        );
        assert!(sections.bytes_at(base - 1, 1).is_err());
        assert!(sections.bytes_at(u64::MAX, 2).is_err());
    }

    #[test]
    fn names_without_an_end_are_absent() {
        let long = [b"\0".as_slice(), &[b'x'; MAX_SYMBOL_NAME + 1], b"\0"].concat();
        let file = with_symbols(0x1000, &[0; 4], &[(1, 0x1000)], &long);
        let elf = ElfFile::parse(&file).unwrap();
        let symbols = elf.sections().unwrap().symbols(|_| true).unwrap();
        assert_eq!(symbols.describe(0x1001), "0x1001");
        let unterminated = with_symbols(0x1000, &[0; 4], &[(1, 0x1000)], b"\0abc");
        let elf = ElfFile::parse(&unterminated).unwrap();
        let symbols = elf.sections().unwrap().symbols(|_| true).unwrap();
        assert_eq!(symbols.address_of("abc"), None);
    }

    /// A core file laid out as `/proc/kcore` lays out the kernel: a note,
    /// then load segments at the kernel's virtual addresses.
    fn kcore_like() -> Vec<u8> {
        let mut b = Builder::new();
        b.kind = object::elf::ET_CORE;
        let text = b.offset() + 3 * 56;
        b.segments = vec![
            (PT_NOTE, text, 0, 0, 0, 4),
            (PT_LOAD, text, 0xffff_ffff_8100_0000, 8, 0x1000, 0x1000),
            (PT_LOAD, text + 8, 0xffff_ffff_a000_0000, 4, 4, 0x1000),
        ];
        b.body = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 1, 2, 3, 4];
        b.build()
    }

    #[test]
    fn a_core_files_bytes_are_read_at_their_virtual_address() {
        let file = kcore_like();
        let counting = CountingStream::new(file.clone());
        let source = StreamSource::new(&counting);
        let streamed = ElfFile::from_stream(&source).unwrap();
        let parsed = ElfFile::parse(&file).unwrap();
        let both = |a: u64, l: u64| {
            let p = parsed.bytes_at_virtual(a, l).map(<[u8]>::to_vec);
            assert_eq!(p, streamed.bytes_at_virtual(a, l).map(<[u8]>::to_vec));
            p
        };
        assert_eq!(
            both(0xffff_ffff_8100_0000, 4),
            Ok(vec![0xf3, 0x0f, 0x1e, 0xfa])
        );
        assert_eq!(
            both(0xffff_ffff_8100_0004, 4),
            Ok(vec![0x0f, 0x1f, 0x44, 0])
        );
        assert_eq!(both(0xffff_ffff_a000_0001, 3), Ok(vec![2, 3, 4]));
        // Past a segment's file bytes (its memory goes on), before it, across
        // two segments, and more than the limit: not loaded.
        for (address, len) in [
            (0xffff_ffff_8100_0006, 4),
            (0xffff_ffff_80ff_ffff, 2),
            (0xffff_ffff_a000_0000, 5),
            (0xffff_ffff_8100_0000, MAX_VIRTUAL_READ + 1),
            (u64::MAX, 2),
        ] {
            assert_eq!(
                both(address, len),
                Err(ElfError::NotLoaded { address, len })
            );
        }
        assert_eq!(
            ElfError::NotLoaded {
                address: 0x10,
                len: 4
            }
            .to_string(),
            "no loaded segment holds 4 bytes at virtual address 0x10"
        );
        // A note segment at the same place is no load segment.
        assert!(both(0, 0).is_err());
    }

    #[test]
    fn a_load_segment_past_the_files_end_is_outside_not_read() {
        let mut file = kcore_like();
        let cut = file.len() - 4;
        file.truncate(cut);
        let elf = ElfFile::parse(&file).unwrap();
        assert_eq!(
            elf.bytes_at_virtual(0xffff_ffff_a000_0000, 2),
            Err(ElfError::SegmentOutside {
                index: 2,
                end: cut as u64 + 2,
                file_size: cut as u64,
            })
        );
    }
}
