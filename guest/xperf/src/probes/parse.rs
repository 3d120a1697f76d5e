//! Pure parsers for what `xperf probes` reads: its own probe-point option and
//! the kernel's tracefs/debugfs/procfs files. Every function takes `&str` and
//! returns plain data, so a fuzz target can call it on any input; none of
//! them panics or allocates more than its input's size.

/// Longest symbol accepted (the kernel's KSYM_NAME_LEN is 512).
pub const MAX_SYMBOL: usize = 255;
/// Largest offset accepted in `SYMBOL+OFFSET`: a probe point lies inside its
/// function, and no function probed here is larger.
pub const MAX_OFFSET: u64 = 1 << 20;

/// A probe point as the user gives it: `SYMBOL` or `SYMBOL+OFFSET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub symbol: String,
    /// Where the int3/jump-optimized kprobe goes; `None`: right after the
    /// function's ftrace call site (found from `available_filter_functions_addrs`).
    pub offset: Option<u64>,
}

fn is_symbol(s: &str) -> bool {
    let first_ok = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok
        && s.len() <= MAX_SYMBOL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// Parses `SYMBOL[+OFFSET]`, the offset decimal or `0x` hexadecimal.
pub fn probe_point(text: &str) -> Result<ProbePoint, String> {
    let (symbol, offset) = match text.split_once('+') {
        Some((s, o)) => (s, Some(o)),
        None => (text, None),
    };
    if !is_symbol(symbol) {
        return Err(format!(
            "{text:?} is not SYMBOL[+OFFSET] (a symbol is letters, digits, '_' and '.', not starting with a digit)"
        ));
    }
    let offset = match offset {
        None => None,
        Some(o) => {
            let parsed = match o.strip_prefix("0x").or_else(|| o.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => o.parse::<u64>(),
            };
            match parsed {
                Ok(v) if v <= MAX_OFFSET => Some(v),
                _ => {
                    return Err(format!(
                        "{text:?}: the offset must be a number from 0 to {MAX_OFFSET:#x}"
                    ))
                }
            }
        }
    };
    Ok(ProbePoint {
        symbol: symbol.to_string(),
        offset,
    })
}

/// Addresses of the text symbols (`t`/`T`) named `symbol` in `/proc/kallsyms`
/// (several when the name is not unique; addresses are 0 when the kernel
/// hides them from this reader).
pub fn kallsyms_text_addresses(kallsyms: &str, symbol: &str) -> Vec<u64> {
    kallsyms
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (name == symbol && (kind == "t" || kind == "T"))
                .then(|| u64::from_str_radix(addr, 16).ok())
                .flatten()
        })
        .collect()
}

/// The text symbols at `address` in `/proc/kallsyms`: a function often has
/// aliases (`__x64_sys_getppid` and `__do_sys_getppid`), and the kernel's
/// lists name it by any of them.
pub fn kallsyms_aliases(kallsyms: &str, address: u64) -> Vec<String> {
    kallsyms
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (u64::from_str_radix(addr, 16).ok()? == address && (kind == "t" || kind == "T"))
                .then(|| name.to_string())
        })
        .collect()
}

/// How far past a function's start its ftrace call site may lie (an ENDBR
/// comes first with IBT).
pub const FTRACE_SITE_WINDOW: u64 = 16;

/// The ftrace call site of the function starting at `start`, from
/// `available_filter_functions_addrs` (`ffffffff810447be __do_sys_getppid`):
/// its address and the name ftrace knows the function by.
pub fn ftrace_site(addrs: &str, start: u64) -> Option<(u64, String)> {
    addrs.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (addr, name) = (f.next()?, f.next()?);
        let addr = u64::from_str_radix(addr, 16).ok()?;
        (start..start.saturating_add(FTRACE_SITE_WINDOW))
            .contains(&addr)
            .then(|| (addr, name.to_string()))
    })
}

/// ENDBR64: the first instruction of a function that may be called
/// indirectly, on a kernel built with `CONFIG_X86_KERNEL_IBT`. A probe given
/// at such a function's name lands after it, and so does its ftrace site.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
/// The 5-byte NOP (P6 `nopl 0x0(%rax,%rax,1)`) an idle ftrace call site
/// holds; `call` (0xe8) while ftrace uses it.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// How many of a function's first bytes [`function_start`] needs.
pub const FUNCTION_START_BYTES: u64 = 16;

/// What a function's first bytes say about where probes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionStart {
    /// Where the kernel puts a probe given at the function's name: past an
    /// ENDBR64 (4), else the start (0).
    pub entry: u64,
    /// The instruction at `entry` is an ftrace call site (a 5-byte NOP, or
    /// the call it becomes while traced).
    pub ftrace_site: bool,
}

/// Reads a function's first bytes (from `/proc/kcore`): its ENDBR64, and
/// whether its ftrace call site follows. What kernels without
/// `available_filter_functions_addrs` (before 6.5) leave to be decoded.
pub fn function_start(bytes: &[u8]) -> FunctionStart {
    let entry = if bytes.starts_with(&ENDBR64) { 4 } else { 0 };
    let at = bytes.get(entry..).unwrap_or_default();
    let ftrace_site = at.starts_with(&NOP5) || (at.len() >= 5 && at[0] == 0xe8);
    FunctionStart {
        entry: entry as u64,
        ftrace_site,
    }
}

/// The name ftrace lists the function by in `available_filter_functions`
/// (`name` or `name [module]` a line), the first of `names` found there.
pub fn filter_function_name(list: &str, names: &[String]) -> Option<String> {
    let listed = |n: &String| {
        list.lines()
            .any(|l| l.split_whitespace().next() == Some(n.as_str()))
    };
    names.iter().find(|n| listed(n)).cloned()
}

/// One probe of `/sys/kernel/debug/kprobes/list`:
/// `ffffffff810447c3  k  __x64_sys_getppid+0x5    [OPTIMIZED]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedProbe {
    /// The probed address (0 when hidden from the reader).
    pub address: u64,
    /// 'k' (kprobe) or 'r' (kretprobe).
    pub kind: char,
    pub symbol: String,
    pub offset: u64,
    pub optimized: bool,
    pub ftrace: bool,
    pub disabled: bool,
    pub gone: bool,
}

fn listed_probe(line: &str) -> Option<ListedProbe> {
    let mut f = line.split_whitespace();
    let address = u64::from_str_radix(f.next()?, 16).ok()?;
    let kind = f.next()?;
    let place = f.next()?;
    let (symbol, offset) = place.split_once("+0x")?;
    let flags: String = f.collect::<Vec<_>>().join(" ");
    Some(ListedProbe {
        address,
        kind: kind.chars().next().filter(|_| kind.len() == 1)?,
        symbol: symbol.to_string(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        optimized: flags.contains("[OPTIMIZED]"),
        ftrace: flags.contains("[FTRACE]"),
        disabled: flags.contains("[DISABLED]"),
        gone: flags.contains("[GONE]"),
    })
}

/// The entries of the kprobes list of `kind` at `address` or, when the list
/// hides addresses, at `offset` into any of `names` (the function's aliases).
pub fn kprobe_list(
    list: &str,
    kind: char,
    address: u64,
    names: &[String],
    offset: u64,
) -> Vec<ListedProbe> {
    list.lines()
        .filter_map(listed_probe)
        .filter(|p| p.kind == kind)
        .filter(|p| {
            if p.address != 0 {
                p.address == address
            } else {
                p.offset == offset && names.contains(&p.symbol)
            }
        })
        .collect()
}

/// Whether any of `names` is on the kprobe blacklist (debugfs
/// `kprobes/blacklist`: `0xffffffff81000000-0xffffffff81000040\tname`).
pub fn kprobe_blacklisted(blacklist: &str, names: &[String]) -> bool {
    blacklist.lines().any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|n| names.iter().any(|m| m == n))
    })
}

/// Whether `set_ftrace_filter` holds exactly `name` (one function, perhaps
/// with a ` [module]` or ftrace's comment lines).
pub fn filter_is(filter: &str, name: &str) -> bool {
    let entries: Vec<&str> = filter
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    entries.len() == 1 && entries[0].split_whitespace().next() == Some(name)
}

/// `(nhit, nmissed)` of `event` in `kprobe_profile` (`  name  nhit  nmissed`).
pub fn kprobe_profile(profile: &str, event: &str) -> Option<(u64, u64)> {
    profile.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        if f.next()? != event {
            return None;
        }
        Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
    })
}

/// `name=0xHH` fields of a kprobe event record's body, e.g. of
/// `peek: (__x64_sys_getpid+0x0/0x10) a0=0xcc a1=0x48` (only byte values).
pub fn byte_fields(body: &str) -> Vec<(String, u8)> {
    body.split_whitespace()
        .filter_map(|f| {
            let (name, value) = f.split_once('=')?;
            let hex = value.strip_prefix("0x")?;
            Some((name.to_string(), u8::from_str_radix(hex, 16).ok()?))
        })
        .collect()
}

/// Events lost by one CPU's ring buffer, from `per_cpu/cpuN/stats`
/// (`overrun:` plus `dropped events:`); `None` when neither line is there.
pub fn lost_events(stats: &str) -> Option<u64> {
    let mut lost = None;
    for line in stats.lines() {
        let value = line
            .strip_prefix("overrun:")
            .or_else(|| line.strip_prefix("dropped events:"));
        if let Some(v) = value.and_then(|v| v.trim().parse::<u64>().ok()) {
            lost = Some(lost.unwrap_or(0u64).saturating_add(v));
        }
    }
    lost
}

/// Whether tracefs's README documents fprobe events (`f[:[<group>/][<event>]]`).
pub fn readme_has_fprobe_events(readme: &str) -> bool {
    readme.contains("f[:[<group>/][<event>]]")
}

/// What a trace record body must look like to count as a hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// A dynamic or static event by name (`name: ...`).
    Event(String),
    /// `raw_syscalls:sys_enter`/`sys_exit` of one syscall number.
    SysEnter(u64),
    SysExit(u64),
    /// `exceptions:page_fault_user` at an address in `[start, end)`.
    UserFault {
        start: u64,
        end: u64,
    },
    /// The function tracer's record of one function, by any of its names
    /// (`func <-caller`).
    Function(Vec<String>),
    /// Any record whose body starts with this text (`sys_getpid(`).
    Prefix(String),
}

impl Matcher {
    pub fn matches(&self, body: &str) -> bool {
        match self {
            Matcher::Event(name) => body
                .strip_prefix(name.as_str())
                .is_some_and(|r| r.starts_with(": ") || r == ":"),
            Matcher::SysEnter(nr) => body
                .strip_prefix("sys_enter: NR ")
                .and_then(|r| r.split_whitespace().next())
                .is_some_and(|n| n.parse() == Ok(*nr)),
            Matcher::SysExit(nr) => body
                .strip_prefix("sys_exit: NR ")
                .and_then(|r| r.split_whitespace().next())
                .is_some_and(|n| n.parse() == Ok(*nr)),
            Matcher::UserFault { start, end } => body
                .strip_prefix("page_fault_user: address=0x")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|a| u64::from_str_radix(a, 16).ok())
                .is_some_and(|a| (*start..*end).contains(&a)),
            Matcher::Function(names) => {
                body.split_whitespace()
                    .next()
                    .is_some_and(|f| names.iter().any(|n| n == f))
                    && body.contains(" <-")
            }
            Matcher::Prefix(text) => body.starts_with(text.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_points_with_and_without_offsets() {
        assert_eq!(
            probe_point("__x64_sys_getppid").unwrap(),
            ProbePoint {
                symbol: "__x64_sys_getppid".into(),
                offset: None
            }
        );
        assert_eq!(probe_point("handle_mm_fault+0x9").unwrap().offset, Some(9));
        assert_eq!(probe_point("f.cold+12").unwrap().offset, Some(12));
        for bad in [
            "",
            "+5",
            "9abc",
            "a b",
            "sym+",
            "sym+x",
            "sym+0x",
            "sym+-1",
            "sym+1+2",
            "a/b",
            "sym+0x100001",
            "é",
        ] {
            let err = probe_point(bad).unwrap_err();
            assert!(!err.contains('\n'), "{bad:?}");
        }
        assert!(probe_point(&"a".repeat(MAX_SYMBOL + 1)).is_err());
    }

    #[test]
    fn kallsyms_and_ftrace_sites() {
        let kallsyms = "ffffffff810447be T __x64_sys_getppid\n\
                        ffffffff81000000 D __x64_sys_getppid\n\
                        ffffffff81234000 t dup\nffffffff81235000 t dup\n\
                        ffffffffc0000000 t modfn\t[kvm]\nbroken\nzz T x\n";
        assert_eq!(
            kallsyms_text_addresses(kallsyms, "__x64_sys_getppid"),
            [0xffffffff810447be]
        );
        assert_eq!(kallsyms_text_addresses(kallsyms, "dup").len(), 2);
        assert_eq!(kallsyms_text_addresses(kallsyms, "modfn").len(), 1);
        assert!(kallsyms_text_addresses(kallsyms, "missing").is_empty());
        let addrs = "ffffffff810447be __do_sys_getppid\nffffffff810b16f9 handle_mm_fault [x]\n";
        assert_eq!(
            ftrace_site(addrs, 0xffffffff810447be),
            Some((0xffffffff810447be, "__do_sys_getppid".to_string()))
        );
        assert_eq!(
            ftrace_site(addrs, 0xffffffff810b16f5).map(|s| s.0),
            Some(0xffffffff810b16f9)
        );
        assert_eq!(ftrace_site(addrs, 0xffffffff810b16e0), None);
        assert_eq!(ftrace_site(addrs, u64::MAX), None);
        let aliased = "ffffffff810447be T __x64_sys_getppid\nffffffff810447be t __do_sys_getppid\nffffffff810447be d data\n";
        assert_eq!(
            kallsyms_aliases(aliased, 0xffffffff810447be),
            ["__x64_sys_getppid", "__do_sys_getppid"]
        );
    }

    #[test]
    fn a_function_start_names_its_endbr_and_its_ftrace_site() {
        let ibt = [0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55];
        assert_eq!(
            function_start(&ibt),
            FunctionStart {
                entry: 4,
                ftrace_site: true
            }
        );
        // Traced: the NOP is a call now.
        let traced = [0xe8, 1, 2, 3, 4, 0x55];
        assert_eq!(
            function_start(&traced),
            FunctionStart {
                entry: 0,
                ftrace_site: true
            }
        );
        // notrace: a push where the site would be; a NOP of another length;
        // too few bytes to hold a call; nothing read.
        for (bytes, entry) in [
            (
                &[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x90][..],
                4,
            ),
            (&[0x0f, 0x1f, 0x40, 0x00, 0x55][..], 0),
            (&[0xe8, 1, 2, 3][..], 0),
            (&[0xf3, 0x0f, 0x1e][..], 0),
            (&[][..], 0),
        ] {
            assert_eq!(
                function_start(bytes),
                FunctionStart {
                    entry,
                    ftrace_site: false
                },
                "{bytes:x?}"
            );
        }
    }

    #[test]
    fn ftrace_names_a_function_by_the_first_alias_it_lists() {
        let list = "do_one\n__do_sys_getppid\nhandle_mm_fault [kvm]\nx\n";
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            filter_function_name(list, &names(&["__x64_sys_getppid", "__do_sys_getppid"])),
            Some("__do_sys_getppid".into())
        );
        assert_eq!(
            filter_function_name(list, &names(&["handle_mm_fault"])),
            Some("handle_mm_fault".into())
        );
        // A prefix of a listed name is not the name.
        assert_eq!(
            filter_function_name(list, &names(&["do_on", "__do_sys"])),
            None
        );
        assert_eq!(filter_function_name("", &names(&["x"])), None);
    }

    #[test]
    fn kprobe_list_flags() {
        let list = "ffffffff810447c3  k  __do_sys_getppid+0x5    [OPTIMIZED]\n\
                    ffffffff810447be  r  __do_sys_getppid+0x0    [FTRACE]\n\
                    ffffffff810447be  k  __do_sys_getppid+0x0    [DISABLED][FTRACE]\n\
                    0000000000000000  k  handle_mm_fault+0x5  [kvm]  [GONE]\n\
                    garbage line\n";
        let names = ["__x64_sys_getppid".to_string()];
        let opt = kprobe_list(list, 'k', 0xffffffff810447c3, &names, 5);
        assert_eq!(opt.len(), 1);
        assert!(opt[0].optimized && !opt[0].ftrace && !opt[0].disabled);
        let ret = kprobe_list(list, 'r', 0xffffffff810447be, &names, 0);
        assert!(ret[0].ftrace && !ret[0].optimized);
        let k0 = kprobe_list(list, 'k', 0xffffffff810447be, &names, 0);
        assert!(k0[0].disabled && k0[0].ftrace);
        let hidden = kprobe_list(list, 'k', 1, &["handle_mm_fault".to_string()], 5);
        assert!(hidden[0].gone);
        assert!(kprobe_list(list, 'k', 1, &names, 5).is_empty());
    }

    #[test]
    fn kprobe_profile_lines() {
        let profile = "  getppid_kprobe                                            12               3\n  x 1\n";
        assert_eq!(kprobe_profile(profile, "getppid_kprobe"), Some((12, 3)));
        assert_eq!(kprobe_profile(profile, "x"), None);
    }

    #[test]
    fn blacklist_and_filter() {
        let bl = "0xffffffff81bb7770-0xffffffff81bb7b00\texc_page_fault\n0x1-0x2\tother [mod]\n";
        assert!(kprobe_blacklisted(
            bl,
            &["x".into(), "exc_page_fault".into()]
        ));
        assert!(!kprobe_blacklisted(bl, &["handle_mm_fault".into()]));
        assert!(filter_is("handle_mm_fault\n", "handle_mm_fault"));
        assert!(filter_is("#### all functions enabled ####\nf [m]\n", "f"));
        assert!(!filter_is("", "f"), "an empty filter traces everything");
        assert!(!filter_is("#### all functions enabled ####\n", "f"));
        assert!(!filter_is("f\ng\n", "f"));
    }

    #[test]
    fn fields_stats_and_readme() {
        assert_eq!(
            byte_fields("peek: (__x64_sys_getpid+0x0/0x10) a0=0xcc a1=0x48 s=\"x\" b=0x1ff"),
            [("a0".to_string(), 0xcc), ("a1".to_string(), 0x48)]
        );
        assert_eq!(
            lost_events("entries: 5\noverrun: 2\ncommit overrun: 0\ndropped events: 1\n"),
            Some(3)
        );
        assert_eq!(lost_events("entries: 5\n"), None);
        assert!(readme_has_fprobe_events(
            "\t           f[:[<group>/][<event>]] <func-name>[%return] [<args>]\n"
        ));
        assert!(!readme_has_fprobe_events("p[:[<group>/][<event>]] <place>"));
    }

    #[test]
    fn matchers_pick_their_own_records() {
        let sys = Matcher::SysEnter(110);
        assert!(sys.matches("sys_enter: NR 110 (0, 0, 0, 0, 0, 0)"));
        assert!(!sys.matches("sys_enter: NR 1101 (0)"));
        assert!(!sys.matches("sys_exit: NR 110 = 5"));
        assert!(Matcher::SysExit(110).matches("sys_exit: NR 110 = 5"));
        let pf = Matcher::UserFault {
            start: 0x1000,
            end: 0x3000,
        };
        assert!(pf.matches("page_fault_user: address=0x2fff ip=0x1 error_code=0x6"));
        assert!(!pf.matches("page_fault_user: address=0x3000 ip=0x1 error_code=0x6"));
        assert!(!pf.matches("page_fault_kernel: address=0x2000 ip=0x1 error_code=0x6"));
        let ev = Matcher::Event("getppid_kprobe".into());
        assert!(ev.matches("getppid_kprobe: (__x64_sys_getppid+0x5/0x21)"));
        assert!(!ev.matches("getppid_kprobe_ftrace: (__x64_sys_getppid+0x0/0x21)"));
        let f = Matcher::Function(vec!["x".into(), "__x64_sys_getppid".into()]);
        assert!(f.matches("__x64_sys_getppid <-do_syscall_64"));
        assert!(!f.matches("__x64_sys_getppid: (x)"));
        // A function tracer's line names its caller after " <-"; another
        // function's line, or the name without a caller, is not it.
        assert!(!f.matches("do_other <-do_syscall_64"));
        assert!(!f.matches("__x64_sys_getppid (x)"));
        assert!(Matcher::Prefix("sys_getpid(".into()).matches("sys_getpid()"));
        assert!(!Matcher::Prefix("sys_getpid(".into()).matches("sys_getppid()"));
    }
}
