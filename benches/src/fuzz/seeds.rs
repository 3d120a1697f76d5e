//! Seed inputs for the fuzz targets, made when the fuzzers run: from the real
//! files on this machine (the kernels in the xvmm cache, shrunk to what the
//! parsers read; the static xperf; a dynamic system binary; the harness's
//! reports; the characterize reports of the tests' data; this machine's
//! /proc and sysfs files) and from small hand-made examples of each format. Small real
//! files are committed under `fuzz/seeds/<target>/` instead.

use object::elf::{FileHeader64, SHF_ALLOC, SHT_PROGBITS, SHT_SYMTAB};
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;
use std::path::{Path, PathBuf};

/// A seed: a file name and its bytes.
pub type Seed = (String, Vec<u8>);

/// Where real files are looked for.
pub struct Sources {
    /// `~/.cache/xvmm/kernels` (or `$XVMM_CACHE/kernels`).
    pub kernels: PathBuf,
    /// The main workspace's target directory (for the static xperf and the
    /// harness's reports).
    pub target: PathBuf,
    /// The repository (for the reports in `xvmm-cli/tests/data/report`).
    pub repo: PathBuf,
}

impl Sources {
    pub fn from_env(repo: &Path) -> Sources {
        let cache = std::env::var_os("XVMM_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/xvmm")))
            .unwrap_or_else(|| PathBuf::from("/nonexistent"));
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target"));
        Sources {
            kernels: cache.join("kernels"),
            target,
            repo: repo.to_path_buf(),
        }
    }

    /// `(cache entry name, file)` for every `name` file of a cached kernel.
    fn kernel_files(&self, name: &str) -> Vec<(String, Vec<u8>)> {
        let Ok(dirs) = std::fs::read_dir(&self.kernels) else {
            return Vec::new();
        };
        let mut out: Vec<_> = dirs
            .flatten()
            .filter_map(|d| {
                let bytes = std::fs::read(d.path().join(name)).ok()?;
                Some((d.file_name().to_string_lossy().into_owned(), bytes))
            })
            .collect();
        out.sort();
        out
    }
}

/// A page of exits and entries as the binary trace reader gets it, and
/// the kvm_exit format (as text) for the format parsers.
fn raw_trace_pages() -> Vec<Seed> {
    let Ok(decoder) = xvmm::host_trace::example_decoder() else {
        return Vec::new();
    };
    let mut seeds: Vec<Seed> = crate::trace::synthetic_pages(&decoder, 50)
        .into_iter()
        .map(|p| ("page".into(), p))
        .collect();
    // Real pages: the recorded nested trace's first few (another kernel's
    // event ids and layouts than the example formats').
    if let Ok(pages) = std::fs::read(crate::recorded::dir().join("cpu0.raw")) {
        seeds.extend(
            pages
                .chunks(decoder.page_size())
                .take(4)
                .map(|p| ("recorded".into(), p.to_vec())),
        );
    }
    let formats = xvmm::host_trace::example_formats();
    seeds.extend(
        formats
            .into_iter()
            .take(1)
            .map(|f| ("format".into(), f.into_bytes())),
    );
    seeds
}

/// A chunk of three intervals (a call holding an interrupt, a fault) as
/// a guest streams them, led by the byte that picks the chunk size.
fn interval_stream() -> Vec<Seed> {
    use xvmm_results::interval_stream::StreamedInterval;
    let intervals = [
        (150, 160, 3 << 32 | 236),
        (100, 200, 1 << 32),
        (1500, 1600, 2 << 32),
    ];
    let mut bytes = vec![2u8];
    for (start, end, code) in intervals {
        let i = StreamedInterval {
            start,
            end,
            code,
            cpu: 0,
        };
        bytes.extend_from_slice(&i.encode());
    }
    vec![("three".into(), bytes)]
}

/// Two pages of a workload's events in the example formats: a call, a
/// fault and its end, a timer interrupt inside, a fork and a switch.
fn workload_pages() -> Vec<Seed> {
    use xperf::workload::decode::{example_formats, EXAMPLE_HEADER_PAGE, FAULT_DONE};
    use xvmm_host::tracefs_raw::{encode_record, EventFormat, Missed, PageLayout, PageWriter};
    let formats: Vec<EventFormat> = example_formats()
        .iter()
        .filter_map(|f| EventFormat::parse(f).ok())
        .collect();
    let Ok(layout) = PageLayout::parse(EXAMPLE_HEADER_PAGE) else {
        return Vec::new();
    };
    let record = |name: &str, fields: &[(&str, u64)]| {
        let f = formats.iter().find(|f| f.name == name)?;
        Some(encode_record(f, fields))
    };
    let events: [(&str, &[(&str, u64)]); 8] = [
        ("sys_enter", &[("common_pid", 7), ("id", 0)]),
        ("local_timer_entry", &[("common_pid", 7), ("vector", 0xec)]),
        ("local_timer_exit", &[("common_pid", 7), ("vector", 0xec)]),
        ("sys_exit", &[("common_pid", 7), ("id", 0)]),
        ("page_fault_user", &[("common_pid", 7), ("error_code", 6)]),
        (FAULT_DONE, &[("common_pid", 7)]),
        (
            "sched_process_fork",
            &[("common_pid", 7), ("parent_pid", 7), ("child_pid", 8)],
        ),
        (
            "sched_switch",
            &[("common_pid", 7), ("prev_pid", 7), ("next_pid", 8)],
        ),
    ];
    let mut page = PageWriter::new(&layout, 1000);
    for (name, fields) in events {
        if let Some(r) = record(name, fields) {
            page.event(50, &r);
        }
    }
    let first = page.finish(Missed::None);
    let mut second = PageWriter::new(&layout, 1200);
    if let Some(r) = record(
        "sched_switch",
        &[("common_pid", 8), ("prev_pid", 8), ("next_pid", 7)],
    ) {
        second.event(0, &r);
    }
    let two = [first.clone(), second.finish(Missed::Count(3))].concat();
    vec![("page".into(), first), ("two-cpus".into(), two)]
}

/// The seeds of `target` (see `super::TARGETS`).
pub fn for_target(target: &str, src: &Sources) -> Vec<Seed> {
    match target {
        "kernel_image" => kernel_images(src),
        "elf_reader" | "static_binary" => elves(src),
        "kernel_hooks" => hook_elves(src),
        "report" | "openmetrics" | "results_channel" => reports(src, target == "results_channel"),
        "trace_line" => vec![("trace".into(), [b"\x07".as_slice(), TRACE].concat())],
        "trace_raw_page" => raw_trace_pages(),
        "workload_pages" => workload_pages(),
        "interval_stream" => interval_stream(),
        "xperf_args" => ARGS
            .iter()
            .map(|a| (format!("args-{}", a.len()), a.to_vec()))
            .collect(),
        "results_param" => CMDLINES
            .iter()
            .map(|c| (format!("cmdline-{}", c.len()), c.to_vec()))
            .collect(),
        "console_escape" => vec![("console".into(), CONSOLE.to_vec())],
        "machine_facts" => machine_facts(),
        // Structured (arbitrary-derived) inputs: libFuzzer starts from nothing.
        _ => vec![("empty".into(), Vec::new())],
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    b[at..at + bytes.len()].copy_from_slice(bytes);
}

/// A bzImage cut to its setup code and `payload` bytes of its payload, with
/// `syssize` saying so: real headers, a few KiB.
pub fn shrink_bzimage(bz: &[u8], payload: usize) -> Option<Vec<u8>> {
    let sects = match *bz.get(0x1f1)? {
        0 => 4,
        n => usize::from(n),
    };
    let end = (sects + 1) * 512 + payload;
    let mut out = bz.get(..end)?.to_vec();
    put(
        &mut out,
        0x1f4,
        &u32::try_from(payload / 16).ok()?.to_le_bytes(),
    );
    Some(out)
}

/// An ELF64 cut to its header, program headers and at most `keep` bytes of
/// each segment (notes whole, up to 4 KiB), laid out anew; no sections.
pub fn shrink_elf(elf: &[u8], keep: u64) -> Option<Vec<u8>> {
    let phoff = usize::try_from(u64_at(elf, 0x20)?).ok()?;
    let phnum = usize::from(u16_at(elf, 0x38)?);
    let mut headers = elf.get(phoff..phoff + 56 * phnum)?.to_vec();
    let mut out = elf.get(..64)?.to_vec();
    put(&mut out, 0x20, &64u64.to_le_bytes());
    put(&mut out, 0x28, &0u64.to_le_bytes());
    put(&mut out, 0x3c, &[0; 4]);
    let mut body = Vec::new();
    for ph in headers.chunks_exact_mut(56) {
        let p_type = u32::from_le_bytes(ph[..4].try_into().ok()?);
        let (offset, filesz) = (u64_at(ph, 8)?, u64_at(ph, 32)?);
        let limit = if p_type == 4 { 4096 } else { keep };
        let len = filesz.min(limit);
        let from = usize::try_from(offset).ok()?;
        let bytes = elf.get(from..from + xvmm_results::num::usize_from(len))?;
        put(
            ph,
            8,
            &((64 + 56 * phnum + body.len()) as u64).to_le_bytes(),
        );
        put(ph, 32, &len.to_le_bytes());
        body.extend_from_slice(bytes);
        body.resize(body.len().next_multiple_of(8), 0);
    }
    out.extend_from_slice(&headers);
    out.extend_from_slice(&body);
    Some(out)
}

/// A small x86-64 bzImage as the integration tests build them.
fn tiny_bzimage() -> Vec<u8> {
    let mut b = vec![0u8; 1024];
    b[0x1f1] = 1;
    put(&mut b, 0x1f4, &32u32.to_le_bytes());
    put(&mut b, 0x202, b"HdrS");
    put(&mut b, 0x206, &0x020fu16.to_le_bytes());
    b[0x211] = 1;
    put(&mut b, 0x214, &0x10_0000u32.to_le_bytes());
    put(&mut b, 0x22c, &0x7fff_ffffu32.to_le_bytes());
    put(&mut b, 0x230, &0x20_0000u32.to_le_bytes());
    put(&mut b, 0x236, &1u16.to_le_bytes());
    put(&mut b, 0x238, &2047u32.to_le_bytes());
    put(&mut b, 0x258, &0x100_0000u64.to_le_bytes());
    put(&mut b, 0x260, &0x10_0000u32.to_le_bytes());
    b.resize(1024 + 512, 0xf4);
    b
}

/// A small PVH ELF: one PT_LOAD at 16 MiB and the Xen entry note.
fn tiny_pvh() -> Vec<u8> {
    let note: Vec<u8> = [4u32, 4, 18]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .chain(*b"Xen\0")
        .chain(0x100_0000u32.to_le_bytes())
        .collect();
    let segments = [
        (1u32, 64 + 112 + note.len() as u64, 0x100_0000u64, 16u64),
        (4, 64 + 112, 0, note.len() as u64),
    ];
    let mut b = elf_header(
        2,
        64,
        u16::try_from(segments.len()).expect("two segments"),
        0,
        0,
    );
    for (kind, off, addr, size) in segments {
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&5u32.to_le_bytes());
        for v in [off, addr, addr, size, size, 4] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b.extend_from_slice(&note);
    b.extend_from_slice(&[0xf4; 16]);
    b
}

fn elf_header(kind: u16, phoff: u64, phnum: u16, shoff: u64, shnum: u16) -> Vec<u8> {
    let mut b = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&62u16.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&0x100_0000u64.to_le_bytes());
    b.extend_from_slice(&phoff.to_le_bytes());
    b.extend_from_slice(&shoff.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    for v in [64u16, 56, phnum, 64, shnum, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

fn kernel_images(src: &Sources) -> Vec<Seed> {
    let mut seeds = vec![
        (
            "tiny-bzimage".to_string(),
            [&[0u8][..], &tiny_bzimage()].concat(),
        ),
        (
            "tiny-pvh".to_string(),
            [&[0x21u8][..], &tiny_pvh()].concat(),
        ),
    ];
    for (entry, bz) in src.kernel_files("bzImage") {
        if let Some(small) = shrink_bzimage(&bz, 8192) {
            seeds.push((format!("{entry}-bzImage"), [&[0u8][..], &small].concat()));
        }
    }
    for (entry, elf) in src.kernel_files("vmlinux") {
        if let Some(small) = shrink_elf(&elf, 256) {
            seeds.push((format!("{entry}-vmlinux"), [&[0x11u8][..], &small].concat()));
        }
    }
    seeds
}

fn elves(src: &Sources) -> Vec<Seed> {
    let mut seeds = vec![
        ("tiny-pvh".to_string(), tiny_pvh()),
        ("hooks".into(), synthetic_hooks()),
    ];
    let candidates = [
        src.target.join("x86_64-unknown-linux-gnu/release/xperf"),
        PathBuf::from("/bin/true"),
        PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        // A shared library: no PT_INTERP, but DT_NEEDED.
        PathBuf::from("/usr/lib/x86_64-linux-gnu/libm.so.6"),
    ];
    for path in candidates {
        if let Some(small) = std::fs::read(&path).ok().and_then(|b| shrink_elf(&b, 128)) {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            seeds.push((format!("{name}-headers"), small));
        }
    }
    for (entry, elf) in src.kernel_files("vmlinux").into_iter().take(1) {
        if let Some(small) = shrink_elf(&elf, 256) {
            seeds.push((format!("{entry}-vmlinux"), small));
        }
    }
    seeds
}

/// An ELF of allocated PROGBITS sections `(address, bytes)` and a symbol
/// table of `(name, value)`, in the layout `xvmm kernel hooks` reads.
pub fn elf_with_sections(sections: &[(u64, Vec<u8>)], symbols: &[(String, u64)]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut headers: Vec<[u8; 64]> = vec![[0; 64]];
    let header = |kind: u32, flags: u64, addr: u64, offset: u64, size: u64, link: u32| {
        let mut h = [0u8; 64];
        put(&mut h, 4, &kind.to_le_bytes());
        put(&mut h, 8, &flags.to_le_bytes());
        put(&mut h, 16, &addr.to_le_bytes());
        put(&mut h, 24, &offset.to_le_bytes());
        put(&mut h, 32, &size.to_le_bytes());
        put(&mut h, 40, &link.to_le_bytes());
        put(
            &mut h,
            56,
            &(if kind == SHT_SYMTAB { 24u64 } else { 1 }).to_le_bytes(),
        );
        h
    };
    for (addr, bytes) in sections {
        let offset = 64 + body.len() as u64;
        body.extend_from_slice(bytes);
        headers.push(header(
            SHT_PROGBITS,
            u64::from(SHF_ALLOC) | 4,
            *addr,
            offset,
            bytes.len() as u64,
            0,
        ));
    }
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24];
    for (name, value) in symbols {
        let mut e = [0u8; 24];
        let name_at = u32::try_from(strtab.len()).expect("a string table below 4 GiB");
        put(&mut e, 0, &name_at.to_le_bytes());
        put(&mut e, 8, &value.to_le_bytes());
        symtab.extend_from_slice(&e);
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
    }
    body.resize(body.len().next_multiple_of(8), 0);
    let symtab_at = 64 + body.len() as u64;
    body.extend_from_slice(&symtab);
    let strtab_at = 64 + body.len() as u64;
    body.extend_from_slice(&strtab);
    let strtab_index = u32::try_from(headers.len()).expect("fewer than 65535 sections") + 1;
    headers.push(header(
        SHT_SYMTAB,
        0,
        0,
        symtab_at,
        symtab.len() as u64,
        strtab_index,
    ));
    headers.push(header(3, 0, 0, strtab_at, strtab.len() as u64, 0));
    body.resize(body.len().next_multiple_of(8), 0);
    let shoff = 64 + body.len() as u64;
    let shnum = u16::try_from(headers.len()).expect("fewer than 65536 sections");
    let mut out = elf_header(2, 0, 0, shoff, shnum);
    out.extend_from_slice(&body);
    for h in headers {
        out.extend_from_slice(&h);
    }
    out
}

/// Hook sites as the xperf series lays them out: two jump labels on the key,
/// one on another key, and the feature's alternative.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    reason = "rel32 and rel64 displacements between kernel addresses 0x90 bytes apart, as two's complement"
)]
fn synthetic_hooks() -> Vec<u8> {
    let base = 0xffff_ffff_8100_0000u64;
    let mut text = vec![0xccu8; 0x90];
    put(&mut text, 0, &[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    put(&mut text, 5, &[0x66, 0x90]);
    let key = base + 0x80;
    for (i, (code, k)) in [(0u64, key), (5, key), (7, key + 8)]
        .into_iter()
        .enumerate()
    {
        let at = base + 0x20 + 16 * i as u64;
        put(
            &mut text,
            0x20 + 16 * i,
            &((code as i64 + base as i64 - at as i64) as i32).to_le_bytes(),
        );
        put(
            &mut text,
            0x28 + 16 * i,
            &(k as i64 - (at + 8) as i64).to_le_bytes(),
        );
    }
    put(&mut text, 0x60, &(-0x60i32).to_le_bytes());
    put(
        &mut text,
        0x68,
        &u32::from(xvmm_kernel::hooks::X86_FEATURE_XPERF).to_le_bytes(),
    );
    text[0x6c] = 5;
    let symbols = [
        ("func_a", base),
        ("__start___jump_table", base + 0x20),
        ("__stop___jump_table", base + 0x50),
        ("__alt_instructions", base + 0x60),
        ("__alt_instructions_end", base + 0x6e),
        ("xperf_stamps_key", key),
    ];
    let symbols: Vec<(String, u64)> = symbols.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    elf_with_sections(&[(base, text)], &symbols)
}

/// A real patched vmlinux reduced to what the hook finder reads: the jump
/// and alternatives tables, a few bytes around each site, the key and the
/// symbols naming them (tens of KiB instead of tens of MiB).
pub fn shrink_vmlinux_for_hooks(vmlinux: &[u8]) -> Option<Vec<u8>> {
    let sites = xvmm_kernel::hooks::find(vmlinux).ok()?;
    let header = FileHeader64::<LE>::parse(vmlinux).ok()?;
    let sections = header.sections(LE, vmlinux).ok()?;
    let symtab = sections.symbols(LE, vmlinux, SHT_SYMTAB).ok()?;
    let mut wanted: Vec<String> = [
        "xperf_stamps_key",
        "__start___jump_table",
        "__stop___jump_table",
        "__alt_instructions",
        "__alt_instructions_end",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    wanted.extend(
        sites
            .iter()
            .filter_map(|s| Some(s.location.rsplit_once('+')?.0.to_string())),
    );
    let mut symbols: Vec<(String, u64)> = Vec::new();
    for sym in symtab.iter() {
        let Ok(name) = symtab.symbol_name(LE, sym) else {
            continue;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        if wanted.contains(&name) && !symbols.iter().any(|(n, _)| *n == name) {
            symbols.push((name, sym.st_value.get(LE)));
        }
    }
    let address = |name: &str| symbols.iter().find(|(n, _)| n == name).map(|s| s.1);
    // The tables whole, a few bytes around each site (the key's own bytes
    // are never read: it may live in .bss).
    let mut ranges = vec![
        (
            address("__start___jump_table")?,
            address("__stop___jump_table")?,
        ),
        (
            address("__alt_instructions")?,
            address("__alt_instructions_end")?,
        ),
    ];
    ranges.extend(sites.iter().map(|s| (s.address - 16, s.address + 16)));
    ranges.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    // Each range's bytes from the PROGBITS section(s) holding it, cut at
    // section ends.
    let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
    for (start, end) in merged {
        for s in sections.iter().filter(|s| s.sh_type(LE) == SHT_PROGBITS) {
            let (addr, size) = (s.sh_addr(LE), s.sh_size(LE));
            let (from, to) = (start.max(addr), end.min(addr + size));
            if from >= to {
                continue;
            }
            let data = s.data(LE, vmlinux).ok()?;
            pieces.push((
                from,
                data.get(
                    xvmm_results::num::usize_from(from - addr)
                        ..xvmm_results::num::usize_from(to - addr),
                )?
                .to_vec(),
            ));
        }
    }
    Some(elf_with_sections(&pieces, &symbols))
}

fn hook_elves(src: &Sources) -> Vec<Seed> {
    let mut seeds = vec![("synthetic".to_string(), synthetic_hooks())];
    for (entry, vmlinux) in src.kernel_files("vmlinux") {
        if let Some(small) = shrink_vmlinux_for_hooks(&vmlinux) {
            seeds.push((format!("{entry}-hooks"), small));
        }
    }
    seeds
}

/// Reports of real runs in the target directory (the nested harness's), as
/// they are and, for `report`, VM and bare metal as a pair.
fn reports(src: &Sources, doorbell: bool) -> Vec<Seed> {
    let dir = src.target.join("harness");
    let read = |name: &str| std::fs::read(dir.join(name)).ok();
    let mut seeds = Vec::new();
    for name in ["xperf-vm.json", "xperf-bm.json"] {
        if let Some(r) = read(name) {
            let seed = if doorbell {
                [&[0u8][..], &r].concat()
            } else {
                r
            };
            seeds.push((name.to_string(), seed));
        }
    }
    if let (false, Some(vm), Some(bm)) = (doorbell, read("xperf-vm.json"), read("xperf-bm.json")) {
        seeds.push(("vm-bm-pair".into(), [vm.as_slice(), b"\0", &bm].concat()));
    }
    if !doorbell {
        seeds.extend(characterize_reports(src));
    }
    seeds
}

/// The `xperf characterize` reports the `xvmm report` tests render (bare
/// metal, VM, L1, L2), each alone and VM with bare metal as a pair, and
/// the workload pair.
fn characterize_reports(src: &Sources) -> Vec<Seed> {
    let dir = src.repo.join("xvmm-cli/tests/data/report");
    let read = |name: &str| std::fs::read(dir.join(format!("characterize-{name}.json"))).ok();
    let mut seeds: Vec<Seed> = ["bm", "vm", "l1", "l2"]
        .iter()
        .filter_map(|n| Some((format!("characterize-{n}"), read(n)?)))
        .collect();
    if let (Some(vm), Some(bm)) = (read("vm"), read("bm")) {
        seeds.push((
            "characterize-pair".into(),
            [vm.as_slice(), b"\0", &bm].concat(),
        ));
    }
    // A workload in L2 and in L1: the workload comparison and its waterfall.
    let workload = |side: &str| std::fs::read(dir.join(format!("workload-{side}.json"))).ok();
    if let (Some(vm), Some(bm)) = (workload("vm"), workload("bm")) {
        seeds.push(("workload-pair".into(), [vm.as_slice(), b"\0", &bm].concat()));
    }
    seeds
}

/// This machine's own facts as `xperf characterize` reads them, each file
/// alone and /proc/stat twice (the readings before and after a run).
fn machine_facts() -> Vec<Seed> {
    let files = [
        "/proc/cpuinfo",
        "/proc/stat",
        "/proc/meminfo",
        "/sys/devices/system/cpu/online",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ];
    let mut seeds: Vec<Seed> = files
        .iter()
        .filter_map(|f| {
            let bytes = std::fs::read(f).ok()?;
            Some((f.trim_start_matches('/').replace('/', "-"), bytes))
        })
        .collect();
    if let Ok(stat) = std::fs::read("/proc/stat") {
        seeds.push((
            "stat-twice".into(),
            [stat.as_slice(), b"\0", &stat].concat(),
        ));
    }
    seeds.push(("kernel-log".into(), KERNEL_LOG.to_vec()));
    seeds
}

const KERNEL_LOG: &[u8] = b"[    0.000000] Hypervisor detected: KVM\n\
[    0.000000] tsc: Detected 2994.374 MHz processor\n\
[    1.234567] tsc: Refined TSC clocksource calibration: 2994.380 MHz\n";

const TRACE: &[u8] = b"# tracer: nop\n\
  xvmm-vcpu-0-4242  [001] d..1.  5398127362712: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip 0xfff0 info1 0x0\n\
  xvmm-vcpu-0-4242  [001] d..1.  5398127364000: kvm_entry: vcpu 0, rip 0xfff0\n\
xvmm-7 [000] ..... 99: kvm_exit: vcpu 0 reason npf rip 0x1 info1 0x0\n\
xvmm-7 [000] ..... 120: kvm_entry: vcpu 0, rip 0x1\n\
CPU:1 [LOST 12 EVENTS]\n";

const ARGS: &[&[u8]] = &[
    b"--samples\x00100\x00--warmup=0\x00--raw",
    b"--json\x00-\x00--cpu\x001\x00--null-samples\x0050",
    b"--help",
    b"-V",
    b"characterize\x00--samples=100\x00--cpu\x000\x00--json\x00-",
];

const CMDLINES: &[&[u8]] = &[
    b"console=ttyS0 reboot=k panic=-1 xvmm.results=0xd0000000,0x1000000 xperf_stamps=1 -- --samples 10",
    b"xvmm.results=d0000000,1000 xvmm.results=0x2000,0x2000",
];

const CONSOLE: &[u8] = b"\x07\x1b[2J\x1b]0;title\x07 [    0.000000] Linux version 6.12\r\n\
caf\xc3\xa9 \xe2\x80\xae reversed \xff\xfe\n";

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_kernel::hooks;

    #[test]
    fn shrunk_images_keep_what_their_parsers_read() {
        let bz = tiny_bzimage();
        let small = shrink_bzimage(&bz, 256).unwrap();
        assert_eq!(small.len(), 1024 + 256);
        assert!(xvmm::boot::image::inspect(small.as_slice()).is_ok());
        let pvh = tiny_pvh();
        let small = shrink_elf(&pvh, 4).unwrap();
        let (a, b) = (
            xvmm::boot::image::inspect(pvh.as_slice()).unwrap(),
            xvmm::boot::image::inspect(small.as_slice()).unwrap(),
        );
        assert_eq!(a, b);
        let sites = hooks::find(&synthetic_hooks()).unwrap();
        assert_eq!(sites.len(), 3, "{sites:?}");
    }

    /// On a machine with a patched kernel in the cache: the shrunk vmlinux
    /// has the same hook sites as the real one.
    #[test]
    fn a_shrunk_patched_vmlinux_has_the_real_hook_sites() {
        let src = Sources::from_env(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").as_path());
        let patched: Vec<_> = src
            .kernel_files("vmlinux")
            .into_iter()
            .filter(|(entry, _)| entry.contains("-patched-"))
            .collect();
        if patched.is_empty() {
            eprintln!("SKIPPED: no patched kernel in {}", src.kernels.display());
        }
        for (entry, vmlinux) in patched {
            let small = shrink_vmlinux_for_hooks(&vmlinux).unwrap_or_else(|| panic!("{entry}"));
            assert!(small.len() < 256 << 10, "{entry}: {} bytes", small.len());
            assert_eq!(
                hooks::find(&small).unwrap(),
                hooks::find(&vmlinux).unwrap(),
                "{entry}"
            );
        }
    }
}
