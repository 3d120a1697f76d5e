//! The one ELF reader (`xvmm_host::elf`, re-exported as `xvmm::elf`): a
//! file parsed in memory and the same file read piecewise as a stream must
//! agree on everything asked of them; sections, symbols and address lookups
//! must stay within the file. Virtual-address reads (how xperf reads
//! `/proc/kcore`) return exactly the bytes asked for, from the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use xvmm::elf::{ElfFile, StreamSource};
use xvmm_fuzz::assert_one_line;

fuzz_target!(|data: &[u8]| {
    let source = StreamSource::new(Cursor::new(data));
    let (parsed, streamed) = match (ElfFile::parse(data), ElfFile::from_stream(&source)) {
        (Ok(p), Ok(s)) => (p, s),
        (Err(p), Err(s)) => {
            assert_eq!(p, s, "the two ways in disagree");
            return assert_one_line(&p.to_string(), "parse");
        }
        (p, s) => panic!("parse gave {:?}, from_stream {:?}", p.err(), s.err()),
    };
    assert_eq!(parsed.kind(), streamed.kind());
    assert_eq!(parsed.is_executable(), streamed.is_executable());
    assert_eq!(parsed.has_interpreter(), streamed.has_interpreter());
    let range = parsed.load_range();
    assert_eq!(range, streamed.load_range());
    if let Ok(Some((start, end))) = range {
        assert!(start <= end);
    }
    // The first program header's own address (its p_vaddr, at e_phoff +
    // 16), a kernel text address, and the top of the address space.
    let word = |at: usize| {
        data.get(at..at.checked_add(8)?)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let first_vaddr = word(0x20)
        .and_then(|phoff| usize::try_from(phoff).ok()?.checked_add(16))
        .and_then(word)
        .unwrap_or(0);
    for address in [
        0,
        0xffff_ffff_8100_0000,
        first_vaddr,
        first_vaddr.wrapping_add(1),
        u64::MAX - 3,
    ] {
        for len in [0, 1, 16, 1 << 17] {
            let read = parsed.bytes_at_virtual(address, len);
            assert_eq!(read, streamed.bytes_at_virtual(address, len));
            match read {
                Ok(bytes) => assert_eq!(bytes.len() as u64, len),
                Err(e) => assert_one_line(&e.to_string(), "bytes_at_virtual"),
            }
        }
    }
    for (name, kind) in [(&b"Xen"[..], 18), (b"GNU", 3), (b"Linux", 6)] {
        let note = parsed.find_note(name, kind);
        assert_eq!(note, streamed.find_note(name, kind));
        if let Ok(Some(desc)) = note {
            assert!(desc.len() <= data.len());
        }
    }
    let sections = match parsed.sections() {
        Ok(s) => s,
        Err(e) => return assert_one_line(&e.to_string(), "sections"),
    };
    let symbols = match sections.symbols(|_| true) {
        Ok(s) => s,
        Err(e) => return assert_one_line(&e.to_string(), "symbols"),
    };
    for name in ["xperf_stamps_key", "__start___jump_table", "_text"] {
        if let Some(address) = symbols.address_of(name) {
            let at = symbols.describe(address);
            assert!(
                at.ends_with("+0x0"),
                "{name} at {address:#x} described as {at}"
            );
            for len in [0, 1, 5, 64] {
                if let Ok(bytes) = sections.bytes_at(address, len) {
                    assert_eq!(bytes.len() as u64, len);
                }
            }
        }
    }
    let _ = symbols.describe(u64::MAX);
    let _ = sections.bytes_at(u64::MAX, 1);
});
