//! Mapping an ELF kernel's segments from its file into guest memory instead
//! of copying them: private (copy on write) file mappings over the guest RAM
//! they belong to. The VMM then neither reads the image nor faults in and
//! zeroes the guest pages it would have copied into (in the nested harness
//! that copy took most of the time before the kernel's first instruction);
//! the guest faults in, from the page cache, only what it touches, and a
//! page it writes becomes its own.
//!
//! Only whole pages are mapped: the file bytes of a segment's last partial
//! page are copied into the (zeroed) anonymous page, so that the bytes
//! after them read as zero as the ELF says, and what lies between segments
//! stays anonymous memory.

use crate::elf::{ElfFile, LoadSegment, StreamSource};
use crate::layout::PAGE_SIZE;
use crate::{Error, Result};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Whether every segment can be mapped: page aligned in the file and in
/// memory, and inside one guest memory region.
fn mappable(memory: &GuestMemoryMmap, segments: &[LoadSegment]) -> bool {
    segments.iter().all(|s| {
        let region = memory.find_region(GuestAddress(s.paddr));
        s.offset % PAGE_SIZE == 0
            && s.paddr % PAGE_SIZE == 0
            && region.is_some_and(|r| {
                let end = r.start_addr().0 + r.len();
                s.paddr.checked_add(s.mem_size).is_some_and(|e| e <= end)
            })
    })
}

/// Maps the `PT_LOAD` segments of the ELF kernel in `file` into guest
/// memory. Returns false, having changed nothing, when a segment cannot be
/// mapped (the caller copies the kernel then).
pub fn map_elf_kernel(memory: &GuestMemoryMmap, file: &std::fs::File) -> Result<bool> {
    let source = StreamSource::new(file);
    let elf = ElfFile::from_stream(&source).map_err(|e| Error::Kernel(e.to_string()))?;
    elf.load_range().map_err(|e| Error::Kernel(e.to_string()))?;
    let segments = elf.load_segments();
    if !mappable(memory, &segments) {
        return Ok(false);
    }
    for s in &segments {
        map_segment(memory, file, s)?;
    }
    Ok(true)
}

/// Maps the whole of `file` (an initrd) at `gpa` the same way. Returns
/// false, having changed nothing, when `gpa` is not page aligned or the
/// file does not fit one guest memory region there.
pub fn map_file(memory: &GuestMemoryMmap, file: &std::fs::File, gpa: u64) -> Result<bool> {
    let size = file
        .metadata()
        .map_err(|e| Error::Initrd(format!("cannot read its size: {e}")))?
        .len();
    map_around(memory, (&[], file, size, &[]), gpa)
}

/// Lays out `before`, `size` bytes of `file`, then `after` at `gpa`: the
/// two byte strings written, the file mapped (the built-in initramfs:
/// its headers, xperf, its trailer). Returns false, having changed
/// nothing, when `gpa` or the file's place is not page aligned or the
/// whole does not fit one guest memory region there.
pub fn map_around(
    memory: &GuestMemoryMmap,
    (before, file, size, after): (&[u8], &std::fs::File, u64, &[u8]),
    gpa: u64,
) -> Result<bool> {
    let at = gpa + before.len() as u64;
    let total = before.len() as u64 + size + after.len() as u64;
    let whole = LoadSegment {
        paddr: gpa,
        offset: 0,
        file_size: total,
        mem_size: total,
    };
    if !at.is_multiple_of(PAGE_SIZE) || !mappable(memory, &[whole]) {
        return Ok(false);
    }
    let write = |bytes: &[u8], to: u64| {
        memory
            .write_slice(bytes, GuestAddress(to))
            .map_err(|e| Error::Memory(format!("cannot write the initramfs at {to:#x}: {e}")))
    };
    write(before, gpa)?;
    let data = LoadSegment {
        paddr: at,
        offset: 0,
        file_size: size,
        mem_size: size,
    };
    map_segment(memory, file, &data)?;
    // After the mapping: its last partial page is anonymous memory again.
    write(after, at + size)?;
    Ok(true)
}

/// A file's bytes through a read-only private mapping: only the pages read
/// are faulted in (xperf's static check reads its headers, not its
/// megabytes).
pub struct FileView {
    addr: *mut libc::c_void,
    len: usize,
}

impl FileView {
    /// Maps the first `len` bytes of `file` (its length when opened).
    pub fn new(file: &std::fs::File, len: u64) -> std::io::Result<FileView> {
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        if len == 0 {
            return Ok(FileView {
                addr: std::ptr::null_mut(),
                len,
            });
        }
        // SAFETY: a new read-only private mapping of an open file, at an
        // address the kernel picks; it is unmapped on drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileView { addr, len })
    }

    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `len` readable bytes are mapped at `addr` until drop.
        unsafe { std::slice::from_raw_parts(self.addr.cast::<u8>(), self.len) }
    }
}

impl Drop for FileView {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly what `new` mapped.
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }
}

fn map_segment(memory: &GuestMemoryMmap, file: &std::fs::File, s: &LoadSegment) -> Result<()> {
    let whole = s.file_size / PAGE_SIZE * PAGE_SIZE;
    let fail = |what: &str, e: std::io::Error| {
        Error::Kernel(format!(
            "{what} the segment at {:#x} ({:#x} file bytes at offset {:#x}): {e}",
            s.paddr, s.file_size, s.offset
        ))
    };
    if whole > 0 {
        let host = memory
            .get_host_address(GuestAddress(s.paddr))
            .map_err(|e| Error::Memory(format!("no host mapping at {:#x}: {e}", s.paddr)))?;
        let offset = libc::off_t::try_from(s.offset)
            .map_err(|_| Error::Kernel(format!("segment offset {:#x} too large", s.offset)))?;
        // SAFETY: `mappable` checked that the range lies inside one guest
        // memory region, whose mapping this replaces in place (MAP_FIXED):
        // the region's own munmap covers it, and nothing else points there.
        let mapped = unsafe {
            libc::mmap(
                host.cast(),
                xvmm_results::num::usize_from(whole),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                file.as_raw_fd(),
                offset,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(fail("cannot map", std::io::Error::last_os_error()));
        }
    }
    let tail = xvmm_results::num::usize_from(s.file_size - whole);
    if tail > 0 {
        let mut bytes = vec![0u8; tail];
        file.read_exact_at(&mut bytes, s.offset + whole)
            .map_err(|e| fail("cannot read the end of", e))?;
        memory
            .write_slice(&bytes, GuestAddress(s.paddr + whole))
            .map_err(|e| Error::Memory(format!("cannot write the kernel's tail: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An ELF64 whose one PT_LOAD holds `code` at file offset `offset` and
    /// `mem_size` bytes at `paddr`.
    fn elf(paddr: u64, offset: u64, code: &[u8], mem_size: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4..7].copy_from_slice(&[2, 1, 1]);
        b[0x10..0x12].copy_from_slice(&2u16.to_le_bytes());
        b[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let p = &mut b[64..];
        p[..4].copy_from_slice(&1u32.to_le_bytes());
        p[8..16].copy_from_slice(&offset.to_le_bytes());
        p[16..24].copy_from_slice(&paddr.to_le_bytes());
        p[24..32].copy_from_slice(&paddr.to_le_bytes());
        p[32..40].copy_from_slice(&(code.len() as u64).to_le_bytes());
        p[40..48].copy_from_slice(&mem_size.to_le_bytes());
        b.resize(xvmm_results::num::usize_from(offset), 0);
        b.extend_from_slice(code);
        // Bytes after the segment in the file must not show in the guest.
        b.extend_from_slice(&[0xee; 0x1000]);
        b
    }

    fn mem(bytes: u64) -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), xvmm_results::num::usize_from(bytes))])
            .unwrap()
    }

    fn file_of(bytes: &[u8]) -> std::fs::File {
        // One name per call: the tests run in parallel threads.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("xvmm-map-{}-{n}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }

    #[test]
    fn a_page_aligned_kernel_is_mapped_and_reads_as_copied() {
        let code: Vec<u8> = (0..0x1800u32).map(|i| (i % 251) as u8).collect();
        let image = elf(0x20_0000, 0x2000, &code, 0x3000);
        let memory = mem(4 << 20);
        assert!(map_elf_kernel(&memory, &file_of(&image)).unwrap());
        let mut back = vec![0u8; code.len() + 0x100];
        memory
            .read_slice(&mut back, GuestAddress(0x20_0000))
            .unwrap();
        assert_eq!(&back[..code.len()], &code[..]);
        // Past the file bytes (the tail page was copied, not mapped): zero.
        assert!(back[code.len()..].iter().all(|&b| b == 0));
        // The guest's writes stay its own (private mapping).
        memory.write_obj(0xabu8, GuestAddress(0x20_0000)).unwrap();
        assert_eq!(
            memory.read_obj::<u8>(GuestAddress(0x20_0000)).unwrap(),
            0xab
        );
    }

    #[test]
    fn an_initrd_is_mapped_whole_where_it_fits() {
        let data: Vec<u8> = (0..0x2345u32).map(|i| (i % 249) as u8).collect();
        let memory = mem(4 << 20);
        assert!(map_file(&memory, &file_of(&data), 0x30_0000).unwrap());
        let mut back = vec![0u8; data.len()];
        memory
            .read_slice(&mut back, GuestAddress(0x30_0000))
            .unwrap();
        assert_eq!(back, data);
        assert!(!map_file(&memory, &file_of(&data), 0x30_0100).unwrap());
        assert!(!map_file(&memory, &file_of(&data), 0x3f_f000).unwrap());
    }

    #[test]
    fn a_kernel_that_cannot_be_mapped_is_left_to_the_copy() {
        let memory = mem(4 << 20);
        for (paddr, offset, mem_size) in [
            (0x20_0010, 0x2010, 0x1000),
            (0x20_0000, 0x2010, 0x1000),
            // Past the end of guest memory.
            (0x3f_f000, 0x2000, 0x2000),
        ] {
            let image = elf(paddr, offset, &[0x90; 64], mem_size);
            assert!(!map_elf_kernel(&memory, &file_of(&image)).unwrap());
        }
        assert!(memory.read_obj::<u64>(GuestAddress(0x20_0000)).unwrap() == 0);
    }

    #[test]
    fn a_file_between_two_byte_strings_reads_as_their_concatenation() {
        let data: Vec<u8> = (0..0x1a35u32).map(|i| (i % 247) as u8 + 1).collect();
        let (before, after) = (vec![0x11u8; 0x2000], vec![0x22u8; 127]);
        let memory = mem(4 << 20);
        let file = file_of(&data);
        let size = data.len() as u64;
        assert!(map_around(&memory, (&before, &file, size, &after), 0x30_0000).unwrap());
        let want = [before.as_slice(), &data, &after].concat();
        let mut back = vec![0u8; want.len() + 64];
        memory
            .read_slice(&mut back, GuestAddress(0x30_0000))
            .unwrap();
        assert_eq!(&back[..want.len()], &want[..]);
        assert!(back[want.len()..].iter().all(|&b| b == 0));
        // The file's place off a page, the start off a page, past the end of
        // memory: nothing is written.
        let parts = (&before[..0x1f00], &file, size, after.as_slice());
        assert!(!map_around(&memory, parts, 0x20_0000).unwrap());
        let parts = (before.as_slice(), &file, size, after.as_slice());
        assert!(!map_around(&memory, parts, 0x20_0100).unwrap());
        assert!(!map_around(&memory, parts, 0x3f_e000).unwrap());
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x20_0000)).unwrap(), 0);
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x3f_e000)).unwrap(), 0);
    }

    #[test]
    fn a_file_view_reads_the_file() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let file = file_of(&data);
        assert_eq!(FileView::new(&file, 10_000).unwrap().bytes(), &data[..]);
        assert_eq!(FileView::new(&file, 100).unwrap().bytes(), &data[..100]);
        assert!(FileView::new(&file, 0).unwrap().bytes().is_empty());
    }
}
