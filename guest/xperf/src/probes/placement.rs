//! Where the probes go: the probed function's address, names and ftrace
//! site, and the instruction inside it for the int3 and jump-optimized
//! kprobes (the same instruction for both).
//!
//! Unless the user names the instruction (`SYMBOL+OFFSET`), it is the first
//! one after the ftrace call site that the kernel can jump-optimize, so that
//! the int3/optimized pair compares one address: instructions are tried in
//! order (the kernel's decoder refuses offsets that are no instruction
//! boundary) until one is marked `[OPTIMIZED]` when enabled with
//! optimization on — the kernel sets that mark only for a probe it has
//! prepared for optimization. Each try is a kprobe enabled for a moment and
//! deleted again.

use super::modes::Target;
use super::parse::{self, ProbePoint};
use super::sampling::Kind;
use crate::trace_session::{read_text, Session, GROUP};
use std::path::Path;
use xvmm_host::elf::{ElfFile, StreamSource};

/// The ftrace call site at a function's start (`call __fentry__`, NOPed).
const FENTRY_CALL_SIZE: u64 = 5;
/// How many bytes past the first instruction the search looks.
const SEARCH_BYTES: u64 = 64;

/// Where the kernel's own files are (tests point them at fixtures).
pub struct KernelFiles<'a> {
    /// The tracefs mount (`available_filter_functions[_addrs]`).
    pub tracefs: &'a Path,
    /// `/proc/kcore`: the kernel's text, for kernels without the ftrace
    /// address list.
    pub kcore: &'a Path,
}

/// The ftrace site of the function at `address`, and where a probe given at
/// its name lands.
struct Site {
    /// `(address, the name ftrace knows it by)`, or why there is none.
    site: Result<(u64, String), String>,
    /// Offset of the probe's landing place: 4 after an ENDBR64, else 0.
    entry: u64,
}

/// The function of `point`: address and names from kallsyms, ftrace site
/// from `available_filter_functions_addrs` (Linux 6.5+) or else from the
/// function's first bytes in `/proc/kcore` and `available_filter_functions`,
/// and the inside instruction (the given offset, else the one after the
/// ftrace call site).
pub fn resolve(
    kind: Kind,
    point: &ProbePoint,
    kallsyms: Option<&str>,
    files: &KernelFiles,
) -> Target {
    let address = kallsyms
        .map(|k| parse::kallsyms_text_addresses(k, &point.symbol))
        .and_then(|a| a.first().copied())
        .unwrap_or(0);
    let mut aliases = match kallsyms {
        Some(k) if address != 0 => parse::kallsyms_aliases(k, address),
        _ => Vec::new(),
    };
    if !aliases.contains(&point.symbol) {
        aliases.insert(0, point.symbol.clone());
    }
    let Site { site, entry } = if address == 0 {
        Site {
            site: Err(format!(
                "the address of {} is hidden or unknown",
                point.symbol
            )),
            entry: 0,
        }
    } else {
        ftrace_site(files, address, &aliases)
    };
    let ftrace_name = site
        .as_ref()
        .map(|(_, name)| name.clone())
        .unwrap_or_else(|_| point.symbol.clone());
    let traceable = site.as_ref().map(|_| ()).map_err(String::clone);
    let offset = match point.offset {
        Some(off) => Ok(off),
        None => site
            .map(|(at, _)| at - address + FENTRY_CALL_SIZE)
            .map_err(|why| format!("{why}: give the instruction as {}+OFFSET", point.symbol)),
    };
    Target {
        kind,
        symbol: point.symbol.clone(),
        address,
        aliases,
        ftrace_name,
        traceable,
        entry,
        offset,
        optimizable: Ok(()),
    }
}

/// The function's ftrace site: from the kernel's address list where it has
/// one, else decoded from the function's first bytes.
fn ftrace_site(files: &KernelFiles, address: u64, aliases: &[String]) -> Site {
    let symbol = &aliases[0];
    let untraceable = || format!("{symbol} has no ftrace call site (notrace, noinstr or inlined)");
    match read_text(&files.tracefs.join("available_filter_functions_addrs")) {
        Ok(addrs) => {
            let site = parse::ftrace_site(&addrs, address).ok_or_else(untraceable);
            let entry = match &site {
                Ok((at, _)) => at - address,
                Err(_) => function_start(files, address).map_or(0, |f| f.entry),
            };
            Site { site, entry }
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Site {
            site: Err(format!("no ftrace call-site list ({e})")),
            entry: function_start(files, address).map_or(0, |f| f.entry),
        },
        // Before Linux 6.5.
        Err(_) => decoded_site(files, address, aliases, untraceable),
    }
}

/// The site from `/proc/kcore`'s bytes at `address`, named by
/// `available_filter_functions`.
fn decoded_site(
    files: &KernelFiles,
    address: u64,
    aliases: &[String],
    untraceable: impl Fn() -> String,
) -> Site {
    let start = match function_start(files, address) {
        Ok(start) => start,
        Err(why) => {
            return Site {
                site: Err(format!(
                "no ftrace call-site list (available_filter_functions_addrs, Linux 6.5+) and {why}"
            )),
                entry: 0,
            }
        }
    };
    let listed = read_text(&files.tracefs.join("available_filter_functions"))
        .map_err(|e| format!("no ftrace function list (available_filter_functions: {e})"))
        .and_then(|list| parse::filter_function_name(&list, aliases).ok_or_else(&untraceable));
    let site = listed.and_then(|name| {
        if start.ftrace_site {
            Ok((address + start.entry, name))
        } else {
            Err(format!(
                "{}+{} holds no ftrace call site in /proc/kcore",
                aliases[0], start.entry
            ))
        }
    });
    Site {
        site,
        entry: start.entry,
    }
}

/// The function's first bytes, decoded (see [`parse::function_start`]).
fn function_start(files: &KernelFiles, address: u64) -> Result<parse::FunctionStart, String> {
    let kcore = files.kcore.display();
    let file = std::fs::File::open(files.kcore).map_err(|e| format!("{kcore}: {e}"))?;
    let source = StreamSource::new(file);
    let elf = ElfFile::from_stream(&source).map_err(|e| format!("{kcore}: {e}"))?;
    let bytes = elf
        .bytes_at_virtual(address, parse::FUNCTION_START_BYTES)
        .map_err(|e| format!("{kcore}: {e}"))?;
    Ok(parse::function_start(bytes))
}

/// Checks a user-given `SYMBOL+OFFSET` with the kernel's own decoder by
/// creating (and deleting) a kprobe there: an offset that is no
/// instruction boundary, a blacklisted function... is the user's error.
pub fn check_given(session: &mut Session, t: &Target) -> Result<(), String> {
    let Ok(off) = t.offset else { return Ok(()) };
    let name = t.event("check");
    let place = format!("{}+{off}", t.symbol);
    session
        .create_event(&name, &format!("p:{GROUP}/{name} {place}"))
        .map_err(|why| format!("cannot probe {place}: {}", refusal(session, t, why)))?;
    session.remove_event(&name).map_err(|e| e.to_string())
}

/// Why the kernel refused a probe on `t`: the blacklist says more than
/// EINVAL when the function is on it.
pub fn refusal(session: &mut Session, t: &Target, why: String) -> String {
    match session.debugfs("kprobes/blacklist") {
        Some(list) if parse::kprobe_blacklisted(&list, &t.aliases) => format!(
            "{} is on the kprobe blacklist (kprobes/blacklist): {why}",
            t.symbol
        ),
        _ => why,
    }
}

/// One try: is `off` an instruction the kernel prepares for jump
/// optimization? `Err` for offsets it refuses outright.
fn optimizable_at(session: &mut Session, t: &Target, off: u64) -> Result<bool, String> {
    let name = t.event("search");
    session.create_event(&name, &format!("p:{GROUP}/{name} {}+{off}", t.symbol))?;
    let enable = format!("events/{GROUP}/{name}/enable");
    let listed = session
        .set(&enable, "1")
        .map(|()| session.debugfs("kprobes/list").unwrap_or_default());
    let _ = session.set(&enable, "0");
    let _ = session.remove_event(&name);
    let list = listed.map_err(|e| e.to_string())?;
    let address = t.address.wrapping_add(off);
    Ok(parse::kprobe_list(&list, 'k', address, &t.aliases, off)
        .first()
        .is_some_and(|p| p.optimized))
}

/// Moves an automatically chosen inside offset to the first instruction
/// the kernel can jump-optimize. Needs kprobe events, OPTPROBES and the
/// kprobes list; otherwise the offset stays, and the optimized mode will say
/// why it cannot run. When no instruction qualifies, the optimized mode is
/// refused with the reason. Returns a note.
pub fn find_optimizable(session: &mut Session, t: &mut Target) -> Option<String> {
    let first = t.offset.clone().ok()?;
    session.optimization()?;
    session.debugfs("kprobes/list")?;
    session.set_optimization(true).ok()?;
    for off in first..first + SEARCH_BYTES {
        // Not optimizable, or no instruction boundary: the next byte.
        if optimizable_at(session, t, off) == Ok(true) {
            t.offset = Ok(off);
            return Some(format!(
                "{}: int3 and optimized kprobes at +{off:#x}, the first instruction after the ftrace call site that the kernel jump-optimizes",
                t.symbol
            ));
        }
    }
    let mitigations: String = ["retbleed", "spec_rstack_overflow"]
        .iter()
        .filter_map(|f| read_text(&Path::new(VULNERABILITIES).join(f)).ok())
        .collect();
    t.optimizable = Err(never_optimized(&t.symbol, first, &mitigations));
    Some(format!(
        "{}: no instruction in +{first:#x}..+{:#x} is jump-optimizable; the kprobes stay at +{first:#x}",
        t.symbol,
        first + SEARCH_BYTES
    ))
}

/// Where the kernel says which CPU mitigations it applies.
const VULNERABILITIES: &str = "/sys/devices/system/cpu/vulnerabilities";

/// Why the optimized mode cannot run when the search found nothing; the
/// likely cause when the kernel returns through a return thunk (its retbleed
/// or SRSO mitigation, `mitigations`, says so).
pub fn never_optimized(symbol: &str, first: u64, mitigations: &str) -> String {
    let mut why = format!(
        "the kernel jump-optimizes no instruction of {symbol} in +{first:#x}..+{:#x} (kprobes/list marked none [OPTIMIZED])",
        first + SEARCH_BYTES
    );
    let mitigations = mitigations.to_ascii_lowercase();
    if mitigations.contains("return thunk") || mitigations.contains("safe ret") {
        why.push_str(
            ": it returns through a return thunk (CONFIG_RETHUNK), and a kernel without upstream's 2023 fix \"x86/retpoline,kprobes: Skip optprobe check for indirect jumps with retpolines and IBT\" takes each jmp to the thunk for an indirect jump, which rules out every function that returns",
        );
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const GETPPID: u64 = 0xffff_ffff_8104_47be;

    /// A scratch tracefs and `/proc/kcore` of a kernel without the ftrace
    /// address list (Linux 6.1): `text` holds the function's first bytes.
    struct Fixture {
        dir: PathBuf,
    }

    impl Fixture {
        fn new(name: &str, filter_functions: Option<&str>, text: Option<&[u8]>) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xperf-site-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("tracing")).unwrap();
            if let Some(list) = filter_functions {
                std::fs::write(dir.join("tracing/available_filter_functions"), list).unwrap();
            }
            if let Some(text) = text {
                std::fs::write(dir.join("kcore"), kcore(GETPPID, text)).unwrap();
            }
            Fixture { dir }
        }

        fn resolve(&self, point: &str) -> Target {
            let kallsyms =
                format!("{GETPPID:x} T __x64_sys_getppid\n{GETPPID:x} t __do_sys_getppid\n");
            let files = KernelFiles {
                tracefs: &self.dir.join("tracing"),
                kcore: &self.dir.join("kcore"),
            };
            let point = parse::probe_point(point).unwrap();
            resolve(Kind::Getppid, &point, Some(&kallsyms), &files)
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// An ELF core file as `/proc/kcore` is: one load segment of kernel text
    /// at its virtual address (written from the ELF-64 layout, not by the
    /// reader under test).
    fn kcore(address: u64, text: &[u8]) -> Vec<u8> {
        let mut b = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
        b.extend_from_slice(&4u16.to_le_bytes()); // ET_CORE
        b.extend_from_slice(&62u16.to_le_bytes()); // x86-64
        b.extend_from_slice(&1u32.to_le_bytes());
        for v in [0u64, 64, 0] {
            b.extend_from_slice(&v.to_le_bytes()); // entry, phoff, shoff
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [64u16, 56, 1, 64, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        b.extend_from_slice(&7u32.to_le_bytes());
        let len = text.len() as u64;
        for v in [120u64, address, 0, len, len, 0x1000] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(text);
        b
    }

    const IBT_START: [u8; 16] = [
        0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5, 0x65, 0x48,
        0x8b,
    ];
    const LIST: &str = "do_exit\n__do_sys_getppid\n";

    #[test]
    fn without_the_address_list_the_site_is_decoded_from_kcore() {
        let ibt = Fixture::new("ibt", Some(LIST), Some(&IBT_START));
        let t = ibt.resolve("__x64_sys_getppid");
        assert_eq!(t.traceable, Ok(()));
        assert_eq!((t.entry, t.offset), (4, Ok(9)));
        assert_eq!(t.ftrace_name, "__do_sys_getppid");
        // Without ENDBR64 the site is the first instruction.
        let mut no_endbr = IBT_START[4..].to_vec();
        no_endbr.extend_from_slice(&[0x90; 4]);
        let plain = Fixture::new("plain", Some(LIST), Some(&no_endbr));
        let t = plain.resolve("__x64_sys_getppid");
        assert_eq!((t.entry, t.offset, t.traceable), (0, Ok(5), Ok(())));
        // A given offset stays.
        assert_eq!(plain.resolve("__x64_sys_getppid+0x20").offset, Ok(0x20));
    }

    #[test]
    fn each_missing_piece_is_named() {
        let no_kcore = Fixture::new("nokcore", Some(LIST), None);
        let t = no_kcore.resolve("__x64_sys_getppid");
        let why = t.traceable.unwrap_err();
        assert!(why.contains("Linux 6.5+") && why.contains("kcore"), "{why}");
        assert!(t.offset.unwrap_err().contains("+OFFSET"));
        // Not in ftrace's list: untraceable, but the ENDBR64 still counts.
        let unlisted = Fixture::new("unlisted", Some("do_exit\n"), Some(&IBT_START));
        let t = unlisted.resolve("__x64_sys_getppid");
        assert!(t.traceable.unwrap_err().contains("no ftrace call site"));
        assert_eq!(t.entry, 4);
        // Listed, but what follows the ENDBR64 is no call site.
        let mut pushed = IBT_START;
        pushed[4] = 0x55;
        let notrace = Fixture::new("notrace", Some(LIST), Some(&pushed));
        let why = notrace.resolve("__x64_sys_getppid").traceable.unwrap_err();
        assert!(
            why.contains("__x64_sys_getppid+4 holds no ftrace call site"),
            "{why}"
        );
        // No ftrace at all.
        let none = Fixture::new("noftrace", None, Some(&IBT_START));
        let why = none.resolve("__x64_sys_getppid").traceable.unwrap_err();
        assert!(why.contains("available_filter_functions"), "{why}");
        // Too few bytes of text in the core file.
        let short = Fixture::new("short", Some(LIST), Some(&IBT_START[..8]));
        let why = short.resolve("__x64_sys_getppid").traceable.unwrap_err();
        assert!(why.contains("no loaded segment"), "{why}");
    }

    #[test]
    fn the_address_list_wins_and_places_the_entry_past_the_endbr() {
        let f = Fixture::new("addrs", Some(LIST), Some(&IBT_START));
        let addrs = format!("{:x} __do_sys_getppid\n", GETPPID + 4);
        std::fs::write(
            f.dir.join("tracing/available_filter_functions_addrs"),
            addrs,
        )
        .unwrap();
        let t = f.resolve("__x64_sys_getppid");
        assert_eq!((t.entry, t.offset, t.traceable), (4, Ok(9), Ok(())));
        // A function the list lacks: untraceable; the entry from kcore.
        std::fs::write(f.dir.join("tracing/available_filter_functions_addrs"), "").unwrap();
        let t = f.resolve("__x64_sys_getppid");
        assert!(t.traceable.is_err());
        assert_eq!(t.entry, 4);
    }

    #[test]
    fn a_function_never_optimized_names_the_return_thunk_only_when_one_is_used() {
        let thunk = "Mitigation: untrained return thunk; SMT disabled\n";
        let why = never_optimized("handle_mm_fault", 5, thunk);
        assert!(
            why.starts_with(
                "the kernel jump-optimizes no instruction of handle_mm_fault in +0x5..+0x45"
            ),
            "{why}"
        );
        assert!(why.contains("CONFIG_RETHUNK"), "{why}");
        assert!(never_optimized("f", 5, "Mitigation: Safe RET\n").contains("CONFIG_RETHUNK"));
        assert!(
            never_optimized("f", 5, "Mitigation: safe RET, no microcode\n")
                .contains("CONFIG_RETHUNK")
        );
        let plain = never_optimized("f", 5, "Not affected\n");
        assert!(!plain.contains("CONFIG_RETHUNK"), "{plain}");
    }
}
