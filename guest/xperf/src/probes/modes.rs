//! What each instrumentation mode puts in place, how its hits are recognised
//! in the trace, and how its presence in the kernel text is checked.
//!
//! The check reads the first byte of the probed instruction through a kprobe
//! event of its own ("peek", on `__x64_sys_getpid`, fetching `@SYMBOL+OFFSET`
//! as a byte): 0xcc is the int3 of a kprobe, 0xe9 the jump of an optimized
//! one, 0xe8 the call an ftrace site becomes; the original byte means
//! nothing is armed. `/sys/kernel/debug/kprobes/list` marks a probe
//! `[OPTIMIZED]` as soon as its optimization is *queued*, so only the byte
//! tells when the jump is really there.

use super::parse::Matcher;
use super::sampling::{Crosser, Kind};
use std::collections::BTreeMap;
use std::time::Duration;
use xvmm_results::probes::mode;

pub const INT3: u8 = 0xcc;
/// Why kprobe modes cannot run on a kernel without kprobe events.
pub const NO_KPROBES: &str = "no kprobe_events in tracefs: kernel without CONFIG_KPROBE_EVENTS";
pub const JMP32: u8 = 0xe9;
pub const CALL32: u8 = 0xe8;

/// One crossing's probed function and the instruction inside it.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: Kind,
    pub symbol: String,
    /// The function's address (0 when unknown or hidden).
    pub address: u64,
    /// Every name of the function (kallsyms aliases), for the kernel's lists.
    pub aliases: Vec<String>,
    /// The name ftrace knows it by (fprobe events, the function tracer's filter).
    pub ftrace_name: String,
    /// Whether the function has an ftrace call site, or why not.
    pub traceable: Result<(), String>,
    /// Where the kernel puts a probe given at the function's name (a
    /// kprobe on ftrace, a kretprobe), and where the ftrace site is: past
    /// the ENDBR64 a kernel built with IBT starts functions with (4), else 0.
    pub entry: u64,
    /// Offset of the instruction for the int3/optimized kprobe, or why there
    /// is none.
    pub offset: Result<u64, String>,
    /// Whether the kernel may jump-optimize a kprobe there: not known to
    /// refuse, or why it does (the search found no instruction it takes).
    pub optimizable: Result<(), String>,
}

impl Target {
    /// The event names of this target's probes.
    pub fn event(&self, what: &str) -> String {
        format!("{}_{what}", self.kind.event_prefix())
    }
}

/// The state the probed byte must reach when the mode is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    Byte(u8),
    /// Anything but the original byte (a kretprobe's entry is an ftrace call
    /// or an int3, depending on KPROBES_ON_FTRACE).
    Changed,
}

/// Where the mode's byte is read and what it must be.
#[derive(Debug, Clone)]
pub struct Site {
    /// The peek event's field that fetches the byte.
    pub field: String,
    pub armed: Armed,
    /// How long switching may take to show in the text (the optimizer works
    /// after a delay and an RCU-tasks grace period).
    pub settle: Duration,
}

/// What `kprobes/list` must say about the mode's probe.
#[derive(Debug, Clone)]
pub struct ListWant {
    pub kind: char,
    pub address: u64,
    pub names: Vec<String>,
    pub offset: u64,
    pub optimized: Option<bool>,
    pub ftrace: Option<bool>,
}

/// What a mode switches on for the probed half of each round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// An `enable` file of the instance, relative to it.
    Event(String),
    /// A dynamic event that exists only while on: (name, definition). An
    /// fprobe holds its function's ftrace site even while disabled, so off
    /// means deleted.
    Created(String, String),
    /// The instance's function tracer, filtered to one function.
    FunctionTracer(String),
}

/// One mode on one crossing, ready to be switched on and off.
#[derive(Debug, Clone)]
pub struct Plan {
    pub mode: &'static str,
    /// For the report: what sits where.
    pub probe: String,
    pub switches: Vec<Switch>,
    pub matchers: Vec<Matcher>,
    /// Records each matcher must find in every probed sample (0: a control).
    pub per_sample: u64,
    pub site: Option<Site>,
    pub list: Option<ListWant>,
    /// `kprobes-optimization` the mode needs.
    pub optimization: Option<bool>,
}

impl Plan {
    /// Hits each probed sample holds: one per matcher, `per_sample` times
    /// (0 for a control).
    pub fn hits_per_sample(&self) -> u64 {
        self.matchers.len() as u64 * self.per_sample
    }
}

/// What the kernel offered when the probes were created.
#[derive(Debug, Default)]
pub struct Kernel {
    /// Dynamic events by name: created, or why not.
    pub events: BTreeMap<String, Result<(), String>>,
    /// tracefs has `kprobe_events` (CONFIG_KPROBE_EVENTS).
    pub kprobes: bool,
    /// tracefs offers fprobe events (CONFIG_FPROBE_EVENTS).
    pub fprobes: bool,
    /// The peek event exists.
    pub peek: bool,
    /// `/proc/sys/debug/kprobes-optimization` exists.
    pub optprobes: bool,
    /// Instance files present (`events/raw_syscalls`, `set_ftrace_filter`...).
    pub has: BTreeMap<&'static str, bool>,
    /// `function` is among the instance's available tracers.
    pub function_tracer: bool,
}

impl Kernel {
    fn event(&self, name: &str) -> Result<(), String> {
        match self.events.get(name) {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => Err(why.clone()),
            None => Err("not created".into()),
        }
    }

    fn needs(&self, rel: &'static str, why: &str) -> Result<(), String> {
        if self.has.get(rel).copied().unwrap_or(false) {
            Ok(())
        } else {
            Err(why.to_string())
        }
    }
}

/// The files of the instance whose presence decides a mode.
pub const INSTANCE_FILES: [&str; 5] = [
    "events/raw_syscalls/sys_enter/enable",
    "events/syscalls/sys_enter_getpid/enable",
    "events/exceptions/page_fault_user/enable",
    "set_ftrace_filter",
    "events/xperf",
];

/// The peek field holding the byte at this target's inside offset (`s`) or
/// at its entry (`e`: +0, or +4 after an ENDBR64).
pub fn peek_field(index: usize, inside: bool) -> String {
    format!("{}{index}", if inside { 's' } else { 'e' })
}

/// The peek event's definition: one byte fetched per target and place.
pub fn peek_definition(group: &str, targets: &[Target]) -> String {
    let mut def = format!("p:{group}/peek __x64_sys_getpid");
    for (i, t) in targets.iter().enumerate() {
        if let Ok(off) = t.offset {
            def += &format!(" {}=@{}+{off}:x8", peek_field(i, true), t.symbol);
        }
        let at = match t.entry {
            0 => t.symbol.clone(),
            entry => format!("{}+{entry}", t.symbol),
        };
        def += &format!(" {}=@{at}:x8", peek_field(i, false));
    }
    def
}

/// The dynamic events this target's modes need: (name, definition).
pub fn event_definitions(group: &str, t: &Target, modes: &[&str]) -> Vec<(String, String)> {
    let mut defs = Vec::new();
    let wants = |m: &str| modes.contains(&m);
    if let Ok(off) = t.offset {
        if wants(mode::KPROBE_INT3) || wants(mode::KPROBE_OPTIMIZED) {
            let name = t.event("kprobe");
            defs.push((name.clone(), format!("p:{group}/{name} {}+{off}", t.symbol)));
        }
    }
    for (m, what, kind) in [
        (mode::KPROBE_FTRACE, "kprobe_ftrace", "p"),
        (mode::KRETPROBE, "kretprobe", "r"),
        (mode::FPROBE, "fprobe", "f"),
    ] {
        if wants(m) {
            let name = t.event(what);
            // fprobes go through ftrace's filter, which knows one name only.
            let symbol = if kind == "f" {
                &t.ftrace_name
            } else {
                &t.symbol
            };
            defs.push((name.clone(), format!("{kind}:{group}/{name} {symbol}")));
        }
    }
    defs
}

fn event_switch(group: &str, name: &str) -> Switch {
    Switch::Event(format!("events/{group}/{name}/enable"))
}

/// What a plan is made from: the target, its index (its peek fields), the
/// crossing and what the kernel offers.
pub struct Context<'a> {
    pub group: &'a str,
    pub index: usize,
    pub target: &'a Target,
    pub crosser: &'a Crosser,
    pub kernel: &'a Kernel,
}

impl Context<'_> {
    /// The peek check of the byte at the entry (`inside` false) or at the
    /// inside instruction.
    fn site(&self, inside: bool, armed: Armed, settle_ms: u64) -> Option<Site> {
        self.kernel.peek.then(|| Site {
            field: peek_field(self.index, inside),
            armed,
            settle: Duration::from_millis(settle_ms),
        })
    }

    fn list(
        &self,
        kind: char,
        offset: u64,
        optimized: Option<bool>,
        ftrace: Option<bool>,
    ) -> Option<ListWant> {
        Some(ListWant {
            kind,
            address: self.target.address.wrapping_add(offset),
            names: self.target.aliases.clone(),
            offset,
            optimized,
            ftrace,
        })
    }
}

/// The plan of `mode_name`, or why the kernel cannot do it.
pub fn plan(mode_name: &'static str, c: &Context) -> Result<Plan, String> {
    let mut p = Plan {
        mode: mode_name,
        probe: String::new(),
        switches: Vec::new(),
        matchers: Vec::new(),
        per_sample: 1,
        site: None,
        list: None,
        optimization: None,
    };
    match mode_name {
        mode::TRACEPOINT => tracepoint(&mut p, c.target, c.crosser, c.kernel)?,
        mode::SYSCALL_SLOW_PATH => slow_path(&mut p, c.target, c.kernel)?,
        mode::KPROBE_INT3 | mode::KPROBE_OPTIMIZED => inside_kprobe(&mut p, c)?,
        mode::KPROBE_FTRACE | mode::KRETPROBE | mode::FPROBE => entry_probe(&mut p, c)?,
        mode::FUNCTION => function_tracer(&mut p, c)?,
        other => return Err(format!("unknown mode {other}")),
    }
    Ok(p)
}

/// The int3 or jump-optimized kprobe on the instruction inside the function.
fn inside_kprobe(p: &mut Plan, c: &Context) -> Result<(), String> {
    let (t, k, group) = (c.target, c.kernel, c.group);
    if !k.kprobes {
        return Err(NO_KPROBES.into());
    }
    let off = t.offset.clone()?;
    let name = t.event("kprobe");
    k.event(&name)?;
    let optimized = p.mode == mode::KPROBE_OPTIMIZED;
    if optimized && !k.optprobes {
        return Err(
            "no /proc/sys/debug/kprobes-optimization: kernel without CONFIG_OPTPROBES".into(),
        );
    }
    if optimized {
        t.optimizable.clone()?;
    }
    // The optimizer works after a delay and a grace period; int3 is at once.
    let (byte, settle) = if optimized {
        (JMP32, 30_000)
    } else {
        (INT3, 2_000)
    };
    // Without OPTPROBES every kprobe is an int3 one and there is no sysctl
    // to write (writing it would fail and lose the row).
    let sysctl = if optimized || k.optprobes {
        p.optimization = Some(optimized);
        format!("kprobes-optimization={}", u8::from(optimized))
    } else {
        "int3 always (no kprobes-optimization sysctl: kernel without CONFIG_OPTPROBES)".into()
    };
    p.probe = format!("kprobe {group}/{name} at {}+{off:#x}, {sysctl}", t.symbol);
    p.switches.push(event_switch(group, &name));
    p.matchers.push(Matcher::Event(name));
    p.site = c.site(true, Armed::Byte(byte), settle);
    p.list = c.list('k', off, Some(optimized), Some(false));
    Ok(())
}

/// A kprobe on ftrace, a kretprobe or an fprobe, at the function's start.
fn entry_probe(p: &mut Plan, c: &Context) -> Result<(), String> {
    let (t, group) = (c.target, c.group);
    if p.mode != mode::KRETPROBE {
        t.traceable.clone()?;
    }
    let (what, armed) = match p.mode {
        mode::KPROBE_FTRACE => ("kprobe_ftrace", Armed::Byte(CALL32)),
        mode::KRETPROBE => ("kretprobe", Armed::Changed),
        _ => ("fprobe", Armed::Byte(CALL32)),
    };
    let name = t.event(what);
    c.kernel.event(&name)?;
    p.probe = format!("{} {group}/{name} at {}+{}", p.mode, t.symbol, t.entry);
    if p.mode == mode::FPROBE {
        let def = event_definitions(group, t, &[mode::FPROBE]);
        let (_, definition) = def.first().ok_or("no fprobe definition")?;
        p.probe += " (created for each probed half, deleted after it)";
        p.switches
            .push(Switch::Created(name.clone(), definition.clone()));
    }
    p.switches.push(event_switch(group, &name));
    p.matchers.push(Matcher::Event(name));
    p.site = c.site(false, armed, 2_000);
    p.list = match p.mode {
        mode::KPROBE_FTRACE => c.list('k', t.entry, None, Some(true)),
        mode::KRETPROBE => c.list('r', t.entry, None, None),
        _ => None,
    };
    Ok(())
}

/// The instance's function tracer, filtered to the function.
fn function_tracer(p: &mut Plan, c: &Context) -> Result<(), String> {
    let t = c.target;
    t.traceable.clone()?;
    c.kernel.needs(
        "set_ftrace_filter",
        "no set_ftrace_filter in the instance: kernel without CONFIG_DYNAMIC_FTRACE",
    )?;
    if !c.kernel.function_tracer {
        return Err(
            "the function tracer is not available in an instance (CONFIG_FUNCTION_TRACER)".into(),
        );
    }
    p.probe = format!(
        "function tracer of the instance, set_ftrace_filter={}",
        t.ftrace_name
    );
    p.switches
        .push(Switch::FunctionTracer(t.ftrace_name.clone()));
    let mut names = t.aliases.clone();
    names.push(t.ftrace_name.clone());
    p.matchers.push(Matcher::Function(names));
    p.site = c.site(false, Armed::Byte(CALL32), 2_000);
    Ok(())
}

fn tracepoint(p: &mut Plan, t: &Target, crosser: &Crosser, k: &Kernel) -> Result<(), String> {
    match t.kind {
        Kind::Getppid => {
            k.needs(
                "events/raw_syscalls/sys_enter/enable",
                "no raw_syscalls events: kernel without CONFIG_FTRACE_SYSCALLS",
            )?;
            p.probe = "raw_syscalls:sys_enter and raw_syscalls:sys_exit".into();
            for e in ["sys_enter", "sys_exit"] {
                p.switches
                    .push(Switch::Event(format!("events/raw_syscalls/{e}/enable")));
            }
            let nr = libc::SYS_getppid as u64;
            p.matchers = vec![Matcher::SysEnter(nr), Matcher::SysExit(nr)];
        }
        Kind::PfRefault => {
            k.needs(
                "events/exceptions/page_fault_user/enable",
                "no exceptions:page_fault_user event in this kernel",
            )?;
            let (start, end) = crosser
                .recorded_pages()
                .ok_or("the #PF crossing has no fault region")?;
            p.probe = "exceptions:page_fault_user".into();
            p.switches.push(Switch::Event(
                "events/exceptions/page_fault_user/enable".into(),
            ));
            p.matchers = vec![Matcher::UserFault { start, end }];
        }
    }
    Ok(())
}

fn slow_path(p: &mut Plan, t: &Target, k: &Kernel) -> Result<(), String> {
    if t.kind != Kind::Getppid {
        return Err("only syscalls have a tracepoint slow path".into());
    }
    k.needs(
        "events/syscalls/sys_enter_getpid/enable",
        "no syscalls:sys_enter_getpid event: kernel without CONFIG_FTRACE_SYSCALLS",
    )?;
    p.probe = "syscalls:sys_enter_getpid and sys_exit_getpid (never fired by getppid): \
               every syscall takes the tracing slow path"
        .into();
    for e in ["sys_enter_getpid", "sys_exit_getpid"] {
        p.switches
            .push(Switch::Event(format!("events/syscalls/{e}/enable")));
    }
    p.matchers = vec![
        Matcher::Prefix("sys_getpid(".into()),
        Matcher::Prefix("sys_getpid ->".into()),
    ];
    p.per_sample = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Kind, offset: Result<u64, String>) -> Target {
        Target {
            kind,
            symbol: "__x64_sys_getppid".into(),
            address: 0x1000,
            aliases: vec!["__x64_sys_getppid".into(), "__do_sys_getppid".into()],
            ftrace_name: "__do_sys_getppid".into(),
            traceable: Ok(()),
            entry: 0,
            offset,
            optimizable: Ok(()),
        }
    }

    #[test]
    fn definitions_and_peek_cover_what_the_modes_need() {
        let t = target(Kind::Getppid, Ok(5));
        let defs = event_definitions("xperf", &t, &mode::MEASURED);
        let lines: Vec<&str> = defs.iter().map(|(_, d)| d.as_str()).collect();
        assert_eq!(
            lines,
            [
                "p:xperf/getppid_kprobe __x64_sys_getppid+5",
                "p:xperf/getppid_kprobe_ftrace __x64_sys_getppid",
                "r:xperf/getppid_kretprobe __x64_sys_getppid",
                "f:xperf/getppid_fprobe __do_sys_getppid",
            ]
        );
        let none = target(Kind::PfRefault, Err("no ftrace site".into()));
        assert!(event_definitions("xperf", &none, &[mode::KPROBE_INT3]).is_empty());
        assert_eq!(
            peek_definition("xperf", &[t, none]),
            "p:xperf/peek __x64_sys_getpid s0=@__x64_sys_getppid+5:x8 e0=@__x64_sys_getppid:x8 \
             e1=@__x64_sys_getppid:x8"
        );
    }

    /// Without CONFIG_OPTPROBES there is no kprobes-optimization sysctl to
    /// write, and every kprobe is an int3 one: the int3 row needs no sysctl.
    #[test]
    fn int3_needs_no_optimization_sysctl_without_optprobes() {
        let crosser = Crosser::new(Kind::Getppid, 0, 1).unwrap();
        let t = target(Kind::Getppid, Ok(5));
        let mut k = Kernel {
            kprobes: true,
            optprobes: false,
            ..Kernel::default()
        };
        k.events.insert("getppid_kprobe".into(), Ok(()));
        let context = Context {
            group: "xperf",
            index: 0,
            target: &t,
            crosser: &crosser,
            kernel: &k,
        };
        let p = plan(mode::KPROBE_INT3, &context).unwrap();
        assert_eq!(p.optimization, None, "no sysctl to write");
        assert!(!p.probe.contains("kprobes-optimization=0"), "{}", p.probe);
        assert!(p.probe.contains("OPTPROBES"), "{}", p.probe);
        k.optprobes = true;
        let context = Context {
            group: "xperf",
            index: 0,
            target: &t,
            crosser: &crosser,
            kernel: &k,
        };
        let p = plan(mode::KPROBE_INT3, &context).unwrap();
        assert_eq!(p.optimization, Some(false));
    }

    #[test]
    fn plans_say_why_a_mode_cannot_run() {
        let crosser = Crosser::new(Kind::Getppid, 0, 1).unwrap();
        let t = target(Kind::Getppid, Ok(5));
        let mut k = Kernel::default();
        let plan = |m: &'static str, index: usize, t: &Target, k: &Kernel| {
            plan(
                m,
                &Context {
                    group: "xperf",
                    index,
                    target: t,
                    crosser: &crosser,
                    kernel: k,
                },
            )
        };
        let err = plan(mode::KPROBE_INT3, 0, &t, &k).unwrap_err();
        assert_eq!(err, NO_KPROBES);
        k.kprobes = true;
        let err = plan(mode::KPROBE_INT3, 0, &t, &k).unwrap_err();
        assert_eq!(err, "not created");
        k.events
            .insert("getppid_kprobe".into(), Err("no KPROBE_EVENTS".into()));
        let err = plan(mode::KPROBE_INT3, 0, &t, &k).unwrap_err();
        assert_eq!(err, "no KPROBE_EVENTS");
        k.events.insert("getppid_kprobe".into(), Ok(()));
        let err = plan(mode::KPROBE_OPTIMIZED, 0, &t, &k).unwrap_err();
        assert!(err.contains("CONFIG_OPTPROBES"), "{err}");
        k.optprobes = true;
        k.peek = true;
        let p = plan(mode::KPROBE_OPTIMIZED, 0, &t, &k).unwrap();
        assert_eq!(p.optimization, Some(true));
        // The search found no instruction the kernel optimizes: no row.
        let mut refused = t.clone();
        refused.optimizable = Err("none optimized".into());
        assert_eq!(
            plan(mode::KPROBE_OPTIMIZED, 0, &refused, &k).unwrap_err(),
            "none optimized"
        );
        assert!(plan(mode::KPROBE_INT3, 0, &refused, &k).is_ok());
        assert_eq!(p.site.as_ref().map(|s| s.armed), Some(Armed::Byte(JMP32)));
        assert_eq!(p.site.as_ref().map(|s| s.field.as_str()), Some("s0"));
        let err = plan(mode::TRACEPOINT, 0, &t, &k).unwrap_err();
        assert!(err.contains("FTRACE_SYSCALLS"), "{err}");
        k.has
            .insert("events/syscalls/sys_enter_getpid/enable", true);
        let control = plan(mode::SYSCALL_SLOW_PATH, 0, &t, &k).unwrap();
        assert_eq!(control.per_sample, 0);
        let pf = target(Kind::PfRefault, Ok(5));
        assert!(plan(mode::SYSCALL_SLOW_PATH, 1, &pf, &k).is_err());
        let err = plan(mode::FUNCTION, 0, &t, &k).unwrap_err();
        assert!(err.contains("DYNAMIC_FTRACE"), "{err}");
    }

    /// With IBT a function starts with ENDBR64: its ftrace site, and where a
    /// probe given at its name lands, are at +4, and every check of them
    /// looks there.
    #[test]
    fn on_an_ibt_kernel_every_entry_check_looks_past_the_endbr() {
        let crosser = Crosser::new(Kind::Getppid, 0, 1).unwrap();
        let mut t = target(Kind::Getppid, Ok(9));
        t.entry = 4;
        assert_eq!(
            peek_definition("xperf", std::slice::from_ref(&t)),
            "p:xperf/peek __x64_sys_getpid s0=@__x64_sys_getppid+9:x8 e0=@__x64_sys_getppid+4:x8"
        );
        let mut k = Kernel {
            kprobes: true,
            fprobes: true,
            peek: true,
            function_tracer: true,
            ..Kernel::default()
        };
        k.has.insert("set_ftrace_filter", true);
        for name in [
            "getppid_kprobe_ftrace",
            "getppid_kretprobe",
            "getppid_fprobe",
        ] {
            k.events.insert(name.into(), Ok(()));
        }
        let context = Context {
            group: "xperf",
            index: 0,
            target: &t,
            crosser: &crosser,
            kernel: &k,
        };
        for (m, list_offset) in [
            (mode::KPROBE_FTRACE, Some(4)),
            (mode::KRETPROBE, Some(4)),
            (mode::FPROBE, None),
            (mode::FUNCTION, None),
        ] {
            let p = plan(m, &context).unwrap();
            assert_eq!(p.site.as_ref().map(|s| s.field.as_str()), Some("e0"), "{m}");
            assert_eq!(p.list.as_ref().map(|l| l.offset), list_offset, "{m}");
            assert_eq!(
                p.list.as_ref().map(|l| l.address),
                list_offset.map(|o| 0x1000 + o),
                "{m}"
            );
        }
        let p = plan(mode::KRETPROBE, &context).unwrap();
        assert!(p.probe.ends_with("at __x64_sys_getppid+4"), "{}", p.probe);
    }
}
