//! Recognising and checking a kernel image before anything is loaded: a bzImage
//! (64-bit boot protocol) or an x86-64 ELF `vmlinux` with a PVH entry note.
//! Pure functions over the file's bytes, so that every malformed input gets a
//! precise one-line message and never reaches the loader half-checked.

use crate::elf::{self, ElfError, ElfFile};
use crate::{Error, Result};
use std::io::{Read, Seek, SeekFrom};

/// Setup header offsets (Documentation/arch/x86/boot.rst).
mod hdr {
    pub const SETUP_SECTS: usize = 0x1f1;
    pub const SYSSIZE: usize = 0x1f4;
    pub const HEADER: usize = 0x202;
    pub const VERSION: usize = 0x206;
    pub const LOADFLAGS: usize = 0x211;
    pub const CODE32_START: usize = 0x214;
    pub const INITRD_ADDR_MAX: usize = 0x22c;
    pub const KERNEL_ALIGNMENT: usize = 0x230;
    pub const XLOADFLAGS: usize = 0x236;
    pub const CMDLINE_SIZE: usize = 0x238;
    pub const PREF_ADDRESS: usize = 0x258;
    pub const INIT_SIZE: usize = 0x260;
    /// End of the fields read here.
    pub const END: usize = 0x264;
}

/// "HdrS".
const SETUP_MAGIC: u32 = 0x5372_6448;
const LOADFLAGS_LOADED_HIGH: u8 = 1;
const XLF_KERNEL_64: u16 = 1;
/// Offset of the 64-bit entry point from the protected-mode load address.
pub const BZIMAGE_ENTRY_64_OFFSET: u64 = 0x200;

/// What the setup header of a bzImage says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BzImageInfo {
    pub protocol: u16,
    /// Bytes of real-mode setup code before the protected-mode payload.
    pub setup_size: u64,
    /// Bytes of protected-mode payload.
    pub payload_size: u64,
    /// Default load address of the payload.
    pub code32_start: u64,
    /// Where the kernel decompresses itself (LOAD_PHYSICAL_ADDR).
    pub pref_address: u64,
    /// Memory the kernel needs from its decompression address.
    pub init_size: u64,
    pub kernel_alignment: u64,
    /// Highest address the initrd may occupy.
    pub initrd_addr_max: u64,
    /// Longest command line, including the NUL.
    pub cmdline_size: usize,
}

impl BzImageInfo {
    /// End of the memory the kernel uses while booting, when loaded at `load`.
    pub fn required_end(&self, load: u64) -> u64 {
        let align = self.kernel_alignment.max(1);
        let aligned_load = load.div_ceil(align).saturating_mul(align);
        let target = self.pref_address.max(aligned_load);
        (load + self.payload_size).max(target.saturating_add(self.init_size))
    }
}

/// What the headers of an ELF vmlinux say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfInfo {
    /// 32-bit PVH entry point (XEN_ELFNOTE_PHYS32_ENTRY).
    pub pvh_entry: u64,
    /// Lowest and end physical addresses of the loadable segments.
    pub load_start: u64,
    pub load_end: u64,
}

/// A recognised kernel image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelImage {
    BzImage(BzImageInfo),
    Elf(ElfInfo),
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from(u32_at(b, off)) | (u64::from(u32_at(b, off + 4)) << 32)
}

/// Random access to a kernel file's bytes, so that only headers are read while
/// checking (the image itself goes straight from the file into guest memory).
pub trait ImageBytes {
    /// Length of the file.
    fn size(&self) -> u64;
    /// Exactly `len` bytes at `offset` (the caller checks the range).
    fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>>;
}

impl ImageBytes for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
    }
}

impl ImageBytes for std::fs::File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(self, &mut buf, offset)?;
        Ok(buf)
    }
}

/// Bytes read from the start of the file: enough for every bzImage header
/// field used, and the ELF magic.
const HEAD_SIZE: u64 = 4096;

fn read(src: &(impl ImageBytes + ?Sized), offset: u64, len: u64) -> Result<Vec<u8>> {
    src.read_at(offset, xvmm_results::num::usize_from(len))
        .map_err(|e| Error::Kernel(format!("cannot read {len} bytes at {offset:#x}: {e}")))
}

/// Recognises a kernel file. Errors name the problem; the caller adds the path.
pub fn inspect(src: &(impl ImageBytes + ?Sized)) -> Result<KernelImage> {
    let size = src.size();
    if size == 0 {
        return Err(Error::Kernel("file is empty".into()));
    }
    let head = read(src, 0, size.min(HEAD_SIZE))?;
    if head.starts_with(b"\x7fELF") {
        return inspect_elf(src).map(KernelImage::Elf);
    }
    if head.len() >= hdr::HEADER + 4 && u32_at(&head, hdr::HEADER) == SETUP_MAGIC {
        return inspect_bzimage(&head, size).map(KernelImage::BzImage);
    }
    Err(Error::Kernel(
        "not a Linux kernel: neither an ELF vmlinux nor a bzImage (no \"HdrS\" setup header)"
            .into(),
    ))
}

fn inspect_bzimage(b: &[u8], file_size: u64) -> Result<BzImageInfo> {
    if b.len() < hdr::END {
        return Err(Error::Kernel(format!(
            "truncated bzImage: {file_size} bytes, not even the whole setup header"
        )));
    }
    let protocol = u16_at(b, hdr::VERSION);
    let proto = format!("{}.{:02}", protocol >> 8, protocol & 0xff);
    let xloadflags = u16_at(b, hdr::XLOADFLAGS);
    if protocol < 0x020c || xloadflags & XLF_KERNEL_64 == 0 {
        return Err(Error::Kernel(format!(
            "bzImage (boot protocol {proto}) has no 64-bit entry point (needs protocol 2.12+ with XLF_KERNEL_64)"
        )));
    }
    if b[hdr::LOADFLAGS] & LOADFLAGS_LOADED_HIGH == 0 {
        return Err(Error::Kernel(
            "zImage (loaded low) is not supported: need a bzImage".into(),
        ));
    }
    let sects = match b[hdr::SETUP_SECTS] {
        0 => 4,
        n => u64::from(n),
    };
    let setup_size = (sects + 1) * 512;
    let payload_size = u64::from(u32_at(b, hdr::SYSSIZE)) * 16;
    let needed = setup_size + payload_size;
    if file_size < needed {
        return Err(Error::Kernel(format!(
            "truncated bzImage: the setup header describes {needed} bytes, the file has {file_size}"
        )));
    }
    let info = BzImageInfo {
        protocol,
        setup_size,
        payload_size: file_size - setup_size,
        code32_start: u64::from(u32_at(b, hdr::CODE32_START)),
        pref_address: u64_at(b, hdr::PREF_ADDRESS),
        init_size: u64::from(u32_at(b, hdr::INIT_SIZE)),
        kernel_alignment: u64::from(u32_at(b, hdr::KERNEL_ALIGNMENT)),
        initrd_addr_max: u64::from(u32_at(b, hdr::INITRD_ADDR_MAX)),
        cmdline_size: u32_at(b, hdr::CMDLINE_SIZE) as usize,
    };
    if info.payload_size == 0 {
        return Err(Error::Kernel(
            "bzImage has no protected-mode payload".into(),
        ));
    }
    Ok(info)
}

const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// `Read + Seek` over an [`ImageBytes`], for the ELF reader: it reads the
/// header, the program headers and at most [`elf::MAX_NOTE_BYTES`] of notes,
/// never the segments themselves.
struct Cursor<'a, S: ?Sized> {
    src: &'a S,
    pos: u64,
}

impl<S: ImageBytes + ?Sized> Read for Cursor<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.src.size().saturating_sub(self.pos);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n > 0 {
            buf[..n].copy_from_slice(&self.src.read_at(self.pos, n)?);
            self.pos += n as u64;
        }
        Ok(n)
    }
}

impl<S: ImageBytes + ?Sized> Seek for Cursor<'_, S> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.src.size().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// The ELF reader's error as a kernel error, worded for kernels where the
/// generic wording would not say what xvmm accepts.
fn kernel_error(e: ElfError) -> Error {
    Error::Kernel(match e {
        ElfError::Machine(m) => format!(
            "ELF for {} (e_machine {m}), xvmm boots x86-64 kernels only",
            elf::machine_name(m)
        ),
        ElfError::BigEndian => "big-endian ELF: not an x86-64 kernel".into(),
        ElfError::Not64Bit => "32-bit ELF: need a 64-bit x86-64 vmlinux".into(),
        other => other.to_string(),
    })
}

fn inspect_elf(src: &(impl ImageBytes + ?Sized)) -> Result<ElfInfo> {
    let source = elf::StreamSource::new(Cursor { src, pos: 0 });
    let file = ElfFile::from_stream(&source).map_err(kernel_error)?;
    let Some((load_start, load_end)) = file.load_range().map_err(kernel_error)? else {
        return Err(Error::Kernel("ELF has no loadable segments".into()));
    };
    let note = file
        .find_note(b"Xen", XEN_ELFNOTE_PHYS32_ENTRY)
        .map_err(kernel_error)?;
    let pvh_entry = match note {
        None => {
            return Err(Error::Kernel(
                "ELF vmlinux has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY): build it with CONFIG_PVH=y or boot the bzImage"
                    .into(),
            ))
        }
        Some(&[a, b, c, d]) => u64::from(u32::from_le_bytes([a, b, c, d])),
        Some(&[a, b, c, d, e, f, g, h]) => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        Some(other) => {
            return Err(Error::Kernel(format!(
                "corrupt ELF: PVH entry note of {} bytes, expected 4 or 8",
                other.len()
            )))
        }
    };
    if pvh_entry >= 1 << 32 {
        return Err(Error::Kernel(format!(
            "PVH entry {pvh_entry:#x} is not a 32-bit physical address"
        )));
    }
    Ok(ElfInfo {
        pvh_entry,
        load_start,
        load_end,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const EM_X86_64: u16 = 62;
    const PT_LOAD: u32 = 1;
    const PT_NOTE: u32 = 4;

    /// A minimal bzImage: one setup sector plus header, `payload` bytes after it.
    pub(crate) fn fake_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[hdr::SETUP_SECTS] = 1;
        b[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
        b[hdr::HEADER..hdr::HEADER + 4].copy_from_slice(b"HdrS");
        b[hdr::VERSION..hdr::VERSION + 2].copy_from_slice(&0x020fu16.to_le_bytes());
        b[hdr::LOADFLAGS] = 1;
        b[hdr::SYSSIZE..hdr::SYSSIZE + 4].copy_from_slice(
            &u32::try_from(payload.len().div_ceil(16))
                .unwrap()
                .to_le_bytes(),
        );
        b[hdr::CODE32_START..hdr::CODE32_START + 4].copy_from_slice(&0x10_0000u32.to_le_bytes());
        b[hdr::INITRD_ADDR_MAX..hdr::INITRD_ADDR_MAX + 4]
            .copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        b[hdr::KERNEL_ALIGNMENT..hdr::KERNEL_ALIGNMENT + 4]
            .copy_from_slice(&0x20_0000u32.to_le_bytes());
        b[hdr::XLOADFLAGS..hdr::XLOADFLAGS + 2].copy_from_slice(&1u16.to_le_bytes());
        b[hdr::CMDLINE_SIZE..hdr::CMDLINE_SIZE + 4].copy_from_slice(&2047u32.to_le_bytes());
        b[hdr::PREF_ADDRESS..hdr::PREF_ADDRESS + 8].copy_from_slice(&0x100_0000u64.to_le_bytes());
        b[hdr::INIT_SIZE..hdr::INIT_SIZE + 4].copy_from_slice(&0x40_0000u32.to_le_bytes());
        b.extend_from_slice(payload);
        b.resize(1024 + payload.len().div_ceil(16) * 16, 0);
        b
    }

    /// A minimal ELF64 with one PT_LOAD at `paddr` and (optionally) a PVH note.
    pub(crate) fn fake_elf(machine: u16, paddr: u64, code: &[u8], pvh: Option<u32>) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[0x10..0x12].copy_from_slice(&2u16.to_le_bytes());
        b[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        b[0x18..0x20].copy_from_slice(&paddr.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        let phnum: u16 = if pvh.is_some() { 2 } else { 1 };
        b[0x38..0x3a].copy_from_slice(&phnum.to_le_bytes());
        let data_off = 64 + 56 * u64::from(phnum);
        let note: Vec<u8> = match pvh {
            Some(entry) => [4u32, 4, 18]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .chain(*b"Xen\0")
                .chain(entry.to_le_bytes())
                .collect(),
            None => Vec::new(),
        };
        let mut ph = |p_type: u32, off: u64, addr: u64, size: u64| {
            let mut p = vec![0u8; 56];
            p[..4].copy_from_slice(&p_type.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&addr.to_le_bytes());
            p[24..32].copy_from_slice(&addr.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            p[40..48].copy_from_slice(&size.to_le_bytes());
            b.extend_from_slice(&p);
        };
        ph(
            PT_LOAD,
            data_off + note.len() as u64,
            paddr,
            code.len() as u64,
        );
        if pvh.is_some() {
            ph(PT_NOTE, data_off, 0, note.len() as u64);
        }
        b.extend_from_slice(&note);
        b.extend_from_slice(code);
        b
    }

    fn err(bytes: &[u8]) -> String {
        inspect(bytes).unwrap_err().to_string()
    }

    #[test]
    fn files_and_slices_agree() {
        let elf = fake_elf(EM_X86_64, 0x100_0000, &[0xf4; 16], Some(0x100_0000));
        let path = std::env::temp_dir().join(format!("xvmm-image-test-{}", std::process::id()));
        std::fs::write(&path, &elf).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert_eq!(inspect(&file).unwrap(), inspect(elf.as_slice()).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn recognises_a_bzimage() {
        let img = fake_bzimage(&[0x90; 100]);
        let KernelImage::BzImage(info) = inspect(img.as_slice()).unwrap() else {
            panic!("not a bzImage")
        };
        assert_eq!(info.setup_size, 1024);
        assert_eq!(info.payload_size, 112);
        assert_eq!(info.cmdline_size, 2047);
        assert_eq!(info.required_end(0x10_0000), 0x140_0000);
    }

    #[test]
    fn rejects_broken_bzimages() {
        let img = fake_bzimage(&[0x90; 100]);
        assert!(err(&img[..600]).contains("truncated bzImage: 600 bytes"));
        assert_eq!(
            err(&img[..1000]),
            "kernel: truncated bzImage: the setup header describes 1136 bytes, the file has 1000"
        );
        let mut old = img.clone();
        old[hdr::XLOADFLAGS] = 0;
        assert!(err(&old).contains("no 64-bit entry point"));
    }

    #[test]
    fn recognises_a_pvh_elf() {
        let elf = fake_elf(EM_X86_64, 0x100_0000, &[0xf4; 16], Some(0x100_0000));
        assert_eq!(
            inspect(elf.as_slice()).unwrap(),
            KernelImage::Elf(ElfInfo {
                pvh_entry: 0x100_0000,
                load_start: 0x100_0000,
                load_end: 0x100_0010
            })
        );
    }

    #[test]
    fn rejects_foreign_and_broken_elves() {
        let arm = fake_elf(183, 0x4008_0000, &[0; 16], Some(0x4008_0000));
        assert_eq!(
            err(&arm),
            "kernel: ELF for AArch64 (e_machine 183), xvmm boots x86-64 kernels only"
        );
        let no_pvh = fake_elf(EM_X86_64, 0x100_0000, &[0; 16], None);
        assert!(err(&no_pvh).contains("no PVH entry note"));
        let full = fake_elf(EM_X86_64, 0x100_0000, &[0; 64], Some(0x100_0000));
        assert!(err(&full[..full.len() - 10]).contains("truncated ELF: segment 0"));
        assert!(err(&full[..40]).contains("truncated ELF: 40 bytes"));
        assert_eq!(
            err(&full[..64 + 56 + 30]),
            "kernel: truncated ELF: program headers at 0x40 (2 entries) lie outside the file's 150 bytes"
        );
        let mut big_endian = full.clone();
        big_endian[5] = 2;
        assert_eq!(
            err(&big_endian),
            "kernel: big-endian ELF: not an x86-64 kernel"
        );
        let mut elf32 = full[..52].to_vec();
        elf32[4] = 1;
        assert_eq!(
            err(&elf32),
            "kernel: 32-bit ELF: need a 64-bit x86-64 vmlinux"
        );
        let mut i386 = elf32.clone();
        i386[0x12] = 3;
        assert_eq!(
            err(&i386),
            "kernel: ELF for i386 (e_machine 3), xvmm boots x86-64 kernels only"
        );
        // A 2-byte descriptor (n_descsz follows n_namesz at the note's start).
        let mut odd = full.clone();
        odd[64 + 2 * 56 + 4] = 2;
        assert_eq!(
            err(&odd),
            "kernel: corrupt ELF: PVH entry note of 2 bytes, expected 4 or 8"
        );
    }

    /// A kernel file that counts the bytes read from it.
    struct Counting {
        bytes: Vec<u8>,
        read: std::cell::Cell<u64>,
    }

    impl ImageBytes for Counting {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
            self.read.set(self.read.get() + len as u64);
            self.bytes.as_slice().read_at(offset, len)
        }
    }

    #[test]
    fn inspecting_an_elf_reads_only_its_headers() {
        let image = Counting {
            bytes: fake_elf(EM_X86_64, 0x100_0000, &[0xf4; 8 << 20], Some(0x100_0000)),
            read: 0.into(),
        };
        assert!(matches!(inspect(&image), Ok(KernelImage::Elf(_))));
        // The 4 KiB head, then the ELF reader's header, program headers and note.
        let read = image.read.get();
        assert!(read < 4096 + 512, "read {read} bytes of an 8 MiB image");
    }

    #[test]
    fn rejects_non_kernels() {
        assert_eq!(err(b""), "kernel: file is empty");
        assert!(err(b"hello, I am a text file\n").contains("not a Linux kernel"));
        assert!(err(&[0u8; 4096]).contains("not a Linux kernel"));
    }
}
