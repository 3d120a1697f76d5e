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
    let whole = LoadSegment {
        paddr: gpa,
        offset: 0,
        file_size: size,
        mem_size: size,
    };
    if !mappable(memory, &[whole]) {
        return Ok(false);
    }
    map_segment(memory, file, &whole)?;
    Ok(true)
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
}
