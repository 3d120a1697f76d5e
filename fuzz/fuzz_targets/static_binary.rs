//! The static-binary check of the built-in initramfs's xperf
//! (`linux::builtin::elf_is_static`): its answer must agree with the ELF
//! reader's view of the same file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::elf::ElfFile;
use xvmm::linux::builtin::elf_is_static;
use xvmm_fuzz::assert_one_line;

fuzz_target!(|data: &[u8]| {
    match elf_is_static(data) {
        Ok(is_static) => {
            let file = ElfFile::parse(data).expect("accepted by elf_is_static");
            assert!(file.is_executable());
            assert_eq!(is_static, !file.has_interpreter());
        }
        Err(e) => assert_one_line(&e, "elf_is_static"),
    }
});
