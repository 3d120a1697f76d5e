//! Hand-built kernel images for the integration tests: a bzImage whose 64-bit
//! entry runs `code`, and an x86-64 ELF with a PVH note whose 32-bit entry runs
//! `code`. Tiny, because CPL0 guest code is emulated on this machine's /dev/kvm.

#![allow(dead_code)]

#[path = "../../../xvmm-kernel/tests/support/elf_fixture.rs"]
pub mod elf_fixture;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Offset of the 64-bit entry in the bzImage payload.
pub const ENTRY_64_OFFSET: usize = 0x200;

/// A bzImage (boot protocol 2.15, 64-bit entry) with `code` at the 64-bit entry.
pub fn bzimage(code: &[u8]) -> Vec<u8> {
    let mut payload = vec![0xf4u8; ENTRY_64_OFFSET]; // hlt filler before the entry
    payload.extend_from_slice(code);
    payload.resize(payload.len().div_ceil(16) * 16, 0xf4);
    let mut b = vec![0u8; 1024]; // boot sector + 1 setup sector
    let put = |b: &mut Vec<u8>, off: usize, bytes: &[u8]| {
        b[off..off + bytes.len()].copy_from_slice(bytes)
    };
    b[0x1f1] = 1; // setup_sects
    let syssize = u32::try_from(payload.len() / 16).unwrap();
    put(&mut b, 0x1f4, &syssize.to_le_bytes());
    put(&mut b, 0x1fe, &[0x55, 0xaa]);
    put(&mut b, 0x202, b"HdrS");
    put(&mut b, 0x206, &0x020fu16.to_le_bytes()); // protocol 2.15
    b[0x211] = 0x01; // LOADED_HIGH
    put(&mut b, 0x214, &0x10_0000u32.to_le_bytes()); // code32_start
    put(&mut b, 0x22c, &0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    put(&mut b, 0x230, &0x20_0000u32.to_le_bytes()); // kernel_alignment
    put(&mut b, 0x236, &0x0001u16.to_le_bytes()); // XLF_KERNEL_64
    put(&mut b, 0x238, &2047u32.to_le_bytes()); // cmdline_size
    put(&mut b, 0x258, &0x100_0000u64.to_le_bytes()); // pref_address
    put(&mut b, 0x260, &0x10_0000u32.to_le_bytes()); // init_size: 1 MiB
    b.extend_from_slice(&payload);
    b
}

/// An x86-64 ELF: one PT_LOAD of `code` at `paddr`, plus a PT_NOTE with
/// XEN_ELFNOTE_PHYS32_ENTRY = `paddr` unless `pvh` is false.
pub fn pvh_elf(machine: u16, paddr: u64, code: &[u8], pvh: bool) -> Vec<u8> {
    let phnum: u16 = if pvh { 2 } else { 1 };
    let note: Vec<u8> = if pvh {
        [4u32, 4, 18]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .chain(*b"Xen\0")
            .chain(u32::try_from(paddr).unwrap().to_le_bytes())
            .collect()
    } else {
        Vec::new()
    };
    let data_off = 64 + 56 * u64::from(phnum);
    let mut b = Vec::new();
    b.extend_from_slice(b"\x7fELF");
    b.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little endian, version 1
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b.extend_from_slice(&machine.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&paddr.to_le_bytes()); // e_entry
    b.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    b.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    b.extend_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b.extend_from_slice(&56u16.to_le_bytes()); // e_phentsize
    b.extend_from_slice(&phnum.to_le_bytes());
    b.extend_from_slice(&[0; 6]); // shentsize, shnum, shstrndx
    assert_eq!(b.len(), 64);
    let ph = |b: &mut Vec<u8>, p_type: u32, off: u64, addr: u64, size: u64| {
        b.extend_from_slice(&p_type.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes()); // R+X
        for v in [off, addr, addr, size, size, 0x1000] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    };
    ph(
        &mut b,
        1,
        data_off + note.len() as u64,
        paddr,
        code.len() as u64,
    );
    if pvh {
        ph(&mut b, 4, data_off, 0, note.len() as u64);
    }
    b.extend_from_slice(&note);
    b.extend_from_slice(code);
    b
}

/// 64-bit guest: checks RSI points at a zero page ("HdrS" at 0x202), prints the
/// first command-line byte and a newline, then writes `status` to PORT_EXIT.
/// A wrong zero page triple-faults (ud2 with no IDT).
pub fn linux64_echo_and_exit(status: u8) -> Vec<u8> {
    vec![
        0x81, 0xbe, 0x02, 0x02, 0x00, 0x00, 0x48, 0x64, 0x72,
        0x53, // cmp dword [rsi+0x202], "HdrS"
        0x75, 0x18, // jne fail
        0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
        0x8b, 0x86, 0x28, 0x02, 0x00, 0x00, // mov eax, [rsi+0x228] (cmd_line_ptr)
        0x8a, 0x00, // mov al, [rax]
        0xee, // out dx, al
        0xb0, 0x0a, 0xee, // mov al, '\n'; out dx, al
        0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
        0xb0, status, 0xee, // mov al, status; out dx, al
        0xf4, // hlt
        0x0f, 0x0b, // fail: ud2
    ]
}

/// 32-bit PVH guest: checks EBX points at hvm_start_info (its magic), prints the
/// first command-line byte and a newline, then writes `status` to PORT_EXIT.
pub fn pvh_echo_and_exit(status: u8) -> Vec<u8> {
    vec![
        0x81, 0x3b, 0x78, 0xc5, 0x6e, 0x33, // cmp dword [ebx], 0x336ec578
        0x75, 0x15, // jne fail
        0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
        0x8b, 0x43, 0x18, // mov eax, [ebx+0x18] (cmdline_paddr)
        0x8a, 0x00, // mov al, [eax]
        0xee, // out dx, al
        0xb0, 0x0a, 0xee, // mov al, '\n'; out dx, al
        0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
        0xb0, status, 0xee, // mov al, status; out dx, al
        0xf4, // hlt
        0x0f, 0x0b, // fail: ud2
    ]
}

/// 64-bit guest: copies `json` (appended to the code) to the results slot, rings
/// the doorbell with `announced_len`, then exits with status 0.
pub fn linux64_send_results(json: &[u8], announced_len: u32) -> Vec<u8> {
    let mut code = vec![
        0x48, 0x8d, 0x35, 0, 0, 0, 0, // lea rsi, [rip + json] (patched below)
        0xbf, 0x00, 0x00, 0x00, 0xd0, // mov edi, 0xd0000000
        0xb9, 0, 0, 0, 0, // mov ecx, len(json)
        0xf3, 0xa4, // rep movsb
        0x66, 0xba, 0x04, 0x05, // mov dx, 0x504
        0xb8, 0, 0, 0, 0,    // mov eax, announced_len
        0xef, // out dx, eax
        0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
        0xb0, 0x00, 0xee, // mov al, 0; out dx, al
        0xf4, // hlt
    ];
    // json follows the code; RIP-relative from after lea
    let rel = u32::try_from(code.len() - 7).unwrap();
    code[3..7].copy_from_slice(&rel.to_le_bytes());
    code[13..17].copy_from_slice(&u32::try_from(json.len()).unwrap().to_le_bytes());
    code[24..28].copy_from_slice(&announced_len.to_le_bytes());
    code.extend_from_slice(json);
    code
}

/// 64-bit guest that pulses the reset line through the i8042.
pub const LINUX64_I8042_RESET: &[u8] = &[0xb0, 0xfe, 0xe6, 0x64, 0xf4]; // mov al,0xfe; out 0x64,al; hlt
/// `ud2` with no IDT: #UD, #GP, double fault, triple fault.
pub const TRIPLE_FAULT: &[u8] = &[0x0f, 0x0b];
/// `jmp $`.
pub const SPIN: &[u8] = &[0xeb, 0xfe];

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvmm-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

/// Runs the xvmm binary with `args`.
pub fn xvmm(args: &[&str]) -> Output {
    xvmm_env(args, &[])
}

/// A non-empty file to pass as `--initrd` to the hand-built kernels, which
/// ignore it: without `--initrd` xvmm would build the xperf initramfs and
/// expect xperf's results.
pub fn placeholder_initrd() -> PathBuf {
    let path = std::env::temp_dir().join(format!("xvmm-placeholder-initrd-{}", std::process::id()));
    if !path.is_file() {
        // Tests run in parallel: write a private file, then rename it in place.
        let tmp = path.with_extension(format!("{:?}", std::thread::current().id()));
        std::fs::write(&tmp, b"placeholder initrd").expect("write placeholder initrd");
        std::fs::rename(&tmp, &path).expect("rename placeholder initrd");
    }
    path
}

/// Runs the xvmm binary with `args` and extra environment variables. A
/// `--kernel` run gets [`placeholder_initrd`] unless `args` name an initrd or
/// `env` sets `XVMM_XPERF` (a test of the built-in xperf initramfs).
pub fn xvmm_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvmm"));
    cmd.args(args).stdin(std::process::Stdio::null());
    let boots_linux = args.contains(&"--kernel") && !args.contains(&"--initrd");
    if boots_linux && !env.iter().any(|(k, _)| *k == "XVMM_XPERF") {
        cmd.arg("--initrd").arg(placeholder_initrd());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run xvmm")
}

/// The xperf binary beside xvmm, built or brought up to date first (a test run of the
/// xvmm package alone does not build it).
pub fn xperf_binary() -> PathBuf {
    let xvmm = PathBuf::from(env!("CARGO_BIN_EXE_xvmm"));
    let xperf = xvmm.with_file_name("xperf");
    // Always asked for: a test run of the xvmm package alone does not build
    // xperf, and an xperf left from an older tree would be tested silently
    // (cargo answers at once when it is up to date).
    let built = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "-q", "-p", "xperf", "--bin", "xperf"])
        .status();
    assert!(built.is_ok_and(|s| s.success()), "cannot build xperf");
    xperf
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether this machine has a usable /dev/kvm (tests needing it are skipped,
/// loudly, when it does not).
pub fn have_kvm() -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !ok {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm is not usable here"));
    }
    ok
}

/// 64-bit guest: prints `msg` to the UART with `rep outsb`, then resets through
/// the i8042 (what `reboot=k` does, also after a panic with `panic=-1`).
pub fn linux64_print_then_reset(msg: &[u8]) -> Vec<u8> {
    let mut code = vec![
        0x48, 0x8d, 0x35, 16, 0, 0, 0, // lea rsi, [rip + msg]
        0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
        0xb9, 0, 0, 0, 0, // mov ecx, len(msg)
        0xf3, 0x6e, // rep outsb
        0xb0, 0xfe, 0xe6, 0x64, // mov al, 0xfe; out 0x64, al
        0xf4, // hlt
    ];
    code[12..16].copy_from_slice(&u32::try_from(msg.len()).unwrap().to_le_bytes());
    code.extend_from_slice(msg);
    code
}
