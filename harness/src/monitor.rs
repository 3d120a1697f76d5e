//! What each CPU of a hung L1 was doing: QEMU's human monitor, asked over a
//! Unix socket just before the harness ends a run that went idle or ran out
//! of time. A nested step that hangs leaves its consoles and this dump in
//! `target/harness/<group>.log`, so the next occurrence says where the guest
//! stopped: which CPU halted, at which instruction (named from L1's
//! `System.map` when it falls in L1's kernel), with which interrupts pending.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The monitor of one QEMU run.
#[derive(Clone, Debug)]
pub struct Monitor {
    socket: PathBuf,
}

/// HMP's prompt, which ends every reply.
const PROMPT: &str = "(qemu) ";

impl Monitor {
    /// A socket under /tmp: a Unix socket's path must fit in 108 bytes,
    /// which a checkout's `target/` may not.
    pub fn for_run(tag: &str) -> Monitor {
        Monitor {
            socket: std::env::temp_dir()
                .join(format!("xvmm-harness-{}-{tag}.mon", std::process::id())),
        }
    }

    /// QEMU's `-monitor` argument: a server that never waits for a client.
    pub fn qemu_arg(&self) -> String {
        format!("unix:{},server=on,wait=off", self.socket.display())
    }

    /// Each command's reply, in order, without the echoed command or the
    /// prompt; an error names what failed (no socket, no prompt in time).
    pub fn ask(&self, commands: &[&str], timeout: Duration) -> Result<Vec<String>, String> {
        let mut s = UnixStream::connect(&self.socket)
            .map_err(|e| format!("monitor {}: {e}", self.socket.display()))?;
        let deadline = Instant::now() + timeout;
        // The banner, ended by the first prompt.
        read_to_prompt(&mut s, deadline)?;
        let mut replies = Vec::new();
        for c in commands {
            s.write_all(format!("{c}\n").as_bytes())
                .map_err(|e| format!("monitor: sending {c:?}: {e}"))?;
            replies.push(clean_reply(&read_to_prompt(&mut s, deadline)?));
        }
        Ok(replies)
    }

    /// The state of each of `cpus` CPUs: registers, then each local APIC.
    pub fn cpu_state(&self, cpus: usize) -> Result<String, String> {
        let mut commands = vec!["info registers -a".to_string()];
        commands.extend((0..cpus).map(|c| format!("info lapic {c}")));
        let refs: Vec<&str> = commands.iter().map(String::as_str).collect();
        Ok(self.ask(&refs, Duration::from_secs(10))?.join("\n"))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Reads until the stream's text ends with the prompt, or fails at `deadline`.
fn read_to_prompt(s: &mut UnixStream, deadline: Instant) -> Result<String, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "monitor: no prompt in time; got {:?}",
                String::from_utf8_lossy(&got)
            ));
        }
        s.set_read_timeout(Some(left))
            .map_err(|e| format!("monitor: {e}"))?;
        match s.read(&mut buf) {
            Ok(0) => return Err("monitor: QEMU closed the socket".into()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("monitor: {e}")),
        }
        if got.ends_with(PROMPT.as_bytes()) {
            return Ok(String::from_utf8_lossy(&got).into_owned());
        }
    }
}

/// A reply without the prompt and without the first line, which is HMP's
/// echo of the command drawn with terminal escapes; carriage returns go.
pub fn clean_reply(raw: &str) -> String {
    let body = raw.strip_suffix(PROMPT).unwrap_or(raw);
    let body = body.split_once('\n').map_or("", |(_, rest)| rest);
    body.replace('\r', "").trim_end().to_string()
}

/// Each thread of process `pid`: its name, state (R running, S sleeping,
/// D in uninterruptible wait) and the kernel function it waits in. A QEMU
/// whose monitor does not answer while every thread sleeps in a futex is
/// stuck itself, not its guest.
pub fn threads(pid: u32) -> Vec<String> {
    let dir = format!("/proc/{pid}/task");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![format!("{dir}: unreadable")];
    };
    let mut tids: Vec<u64> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids.iter()
        .map(|tid| {
            let read = |f: &str| {
                std::fs::read_to_string(format!("{dir}/{tid}/{f}"))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            let stat = read("stat");
            // The state follows the name's closing parenthesis.
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            format!(
                "thread {tid} {} state {state} waiting in {}",
                read("comm"),
                read("wchan")
            )
        })
        .collect()
}

/// One CPU of an `info registers -a` dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuAt {
    pub cpu: usize,
    /// RIP (EIP outside long mode).
    pub ip: u64,
    pub halted: bool,
    /// RFLAGS.IF: a halted CPU with interrupts off waits for an NMI only.
    pub interrupts_on: bool,
}

/// Each CPU's instruction pointer and state from `info registers -a`.
pub fn cpus_at(dump: &str) -> Vec<CpuAt> {
    let mut cpus = Vec::new();
    let mut cpu = None;
    for line in dump.lines() {
        if let Some(n) = line.trim().strip_prefix("CPU#") {
            cpu = n.trim().parse().ok();
            continue;
        }
        let Some(c) = cpu else { continue };
        let ip = field(line, "RIP=").or_else(|| field(line, "EIP="));
        let flags = field(line, "RFL=").or_else(|| field(line, "EFL="));
        if let (Some(ip), Some(flags)) = (ip, flags) {
            cpus.push(CpuAt {
                cpu: c,
                ip,
                halted: line.contains("HLT=1"),
                interrupts_on: flags & (1 << 9) != 0,
            });
            cpu = None;
        }
    }
    cpus
}

/// One CPU's local APIC from `info lapic`: the vectors pending in its IRR
/// and its processor priority (PPR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LapicAt {
    pub cpu: usize,
    pub irr: Vec<u8>,
    pub ppr: u8,
}

/// Each local APIC of an `info lapic` dump (QEMU prints `IRR\t 236 251 `,
/// a level-triggered vector as `34(level)`, or `(none)`, then a line of
/// `APR .. TPR .. PPR 0x..`).
pub fn lapics_at(dump: &str) -> Vec<LapicAt> {
    let mut lapics = Vec::new();
    let (mut cpu, mut irr) = (None, Vec::new());
    for line in dump.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("dumping local APIC state for CPU") {
            cpu = rest.trim().parse().ok();
            irr.clear();
        } else if let Some(rest) = line.strip_prefix("IRR") {
            irr = rest
                .split_whitespace()
                .filter_map(|v| v.trim_end_matches("(level)").parse().ok())
                .collect();
        } else if let (Some(c), Some(ppr)) = (cpu, field(line, "PPR 0x")) {
            lapics.push(LapicAt {
                cpu: c,
                irr: std::mem::take(&mut irr),
                ppr: u8::try_from(ppr).unwrap_or(u8::MAX),
            });
            cpu = None;
        }
    }
    lapics
}

/// The CPUs of a `cpu_state` dump that are halted with interrupts on
/// while their local APIC holds an interrupt above their priority (its
/// class, vector / 16, above PPR's): such a CPU should already have
/// woken. Seen in a hung L1 under multi-threaded TCG, a missed wake-up
/// (docs/testing/harness.md, "An L1 that hangs busy").
pub fn sleeping_through_interrupts(dump: &str) -> Vec<usize> {
    let lapics = lapics_at(dump);
    cpus_at(dump)
        .into_iter()
        .filter(|c| c.halted && c.interrupts_on)
        .filter(|c| {
            lapics
                .iter()
                .filter(|l| l.cpu == c.cpu)
                .any(|l| l.irr.iter().any(|&v| v >> 4 > l.ppr >> 4))
        })
        .map(|c| c.cpu)
        .collect()
}

/// The hex value after `key` on `line`.
fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(key)? + key.len();
    let hex: String = line[at..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&hex, 16).ok()
}

/// A kernel's text symbols from its `System.map`, sorted by address.
pub struct Symbols(Vec<(u64, String)>);

impl Symbols {
    pub fn parse(system_map: &str) -> Symbols {
        let mut v: Vec<(u64, String)> = system_map
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let kind = f.next()?;
                let name = f.next()?;
                matches!(kind, "t" | "T" | "w" | "W").then(|| (addr, name.to_string()))
            })
            .collect();
        v.sort();
        Symbols(v)
    }

    pub fn read(path: &Path) -> Option<Symbols> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| Symbols::parse(&s))
    }

    /// `name+0xoff` for an address inside the kernel's text: at or after a
    /// symbol and before `_etext`, the text's end.
    pub fn name(&self, addr: u64) -> Option<String> {
        let end = self
            .0
            .iter()
            .find(|(_, n)| n == "_etext")
            .map_or(u64::MAX, |e| e.0);
        if addr >= end {
            return None;
        }
        let i = self.0.partition_point(|(a, _)| *a <= addr).checked_sub(1)?;
        let (a, n) = &self.0[i];
        Some(format!("{n}+{:#x}", addr - a))
    }
}

/// One line per CPU: where it is, halted or running, interrupts on or
/// off, and the L1 kernel function when the address is L1's (otherwise it
/// is L2's or user space: the CPU was running the nested guest).
pub fn summarize(cpus: &[CpuAt], l1: Option<&Symbols>) -> String {
    cpus.iter()
        .map(|c| {
            let place = l1.and_then(|s| s.name(c.ip)).map_or_else(
                || "not in L1's kernel text".to_string(),
                |n| format!("L1 {n}"),
            );
            format!(
                "CPU#{} ip={:#x} ({place}) {} interrupts {}",
                c.cpu,
                c.ip,
                if c.halted { "halted" } else { "running" },
                if c.interrupts_on { "on" } else { "off" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A QEMU with no kernel (its firmware soon halts both CPUs), serial on
/// stdio, its monitor on `monitor`'s socket: what the tests ask.
#[cfg(test)]
pub(crate) fn firmware_only_qemu(monitor: &Monitor) -> std::process::Command {
    let mut qemu = std::process::Command::new(crate::HOST_QEMU);
    qemu.args(["-accel", "tcg", "-m", "64", "-smp", "2", "-nodefaults"])
        .args(["-display", "none", "-serial", "stdio", "-monitor"])
        .arg(monitor.qemu_arg());
    qemu
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    const DUMP: &str = "\
CPU#0
RAX=0000000000000000 RBX=ffffffff82a0c940 RCX=0000000000000001
RIP=ffffffff81e1a2cf RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1
CR0=80050033
CPU#1
EIP=000fd0cf EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0
";

    #[test]
    fn each_cpus_place_and_state_come_from_the_dump() {
        assert_eq!(
            cpus_at(DUMP),
            vec![
                CpuAt {
                    cpu: 0,
                    ip: 0xffff_ffff_81e1_a2cf,
                    halted: true,
                    interrupts_on: true
                },
                CpuAt {
                    cpu: 1,
                    ip: 0xfd0cf,
                    halted: false,
                    interrupts_on: false
                },
            ]
        );
        assert!(cpus_at("no cpus here\nRIP=1 RFL=2").is_empty());
    }

    /// `info lapic` as QEMU 10 prints it (the header, then the lines the
    /// parser reads), for CPU 0 as the hung L1 of 2026-11-29 had it.
    fn lapic(cpu: usize, irr: &str, ppr: u8) -> String {
        format!(
            "dumping local APIC state for CPU {cpu} \n\n\
             LVTT\t 0x000400ec active-hi edge                 tsc-deadline Fixed  (vec 236)\n\
             ISR\t (none)\n\
             IRR\t {irr}\n\n\
             APR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x{ppr:02x}\n"
        )
    }

    #[test]
    fn a_halted_cpu_with_an_interrupt_above_its_priority_sleeps_through_it() {
        let hung = format!(
            "{DUMP}{}{}",
            lapic(0, "236 251 ", 0x10),
            lapic(1, "(none)", 0)
        );
        assert_eq!(
            lapics_at(&hung),
            vec![
                LapicAt {
                    cpu: 0,
                    irr: vec![236, 251],
                    ppr: 0x10
                },
                LapicAt {
                    cpu: 1,
                    irr: vec![],
                    ppr: 0
                },
            ]
        );
        assert_eq!(sleeping_through_interrupts(&hung), [0]);
        // At or under its priority's class, a pending vector waits rightly.
        let masked = format!("{DUMP}{}", lapic(0, "236 239(level) ", 0xe0));
        assert_eq!(lapics_at(&masked)[0].irr, [236, 239]);
        assert!(sleeping_through_interrupts(&masked).is_empty());
        // CPU 1 is running (and its interrupts are off): not stuck.
        let running = format!("{DUMP}{}", lapic(1, "251 ", 0));
        assert!(sleeping_through_interrupts(&running).is_empty());
        let off = DUMP.replace("RFL=00000246", "RFL=00000046");
        assert!(sleeping_through_interrupts(&format!("{off}{}", lapic(0, "251", 0))).is_empty());
    }

    #[test]
    fn an_address_is_named_by_the_text_symbol_at_or_below_it() {
        let map = "ffffffff81000000 T _text\n\
                   ffffffff81e1a2c0 t default_idle\n\
                   ffffffff81e1a2c0 D not_text\n\
                   ffffffff81e1a300 T arch_cpu_idle\n\
                   ffffffff82000000 T _etext\n";
        let s = Symbols::parse(map);
        assert_eq!(
            s.name(0xffff_ffff_81e1_a2cf).as_deref(),
            Some("default_idle+0xf")
        );
        assert_eq!(
            s.name(0xffff_ffff_81e1_a300).as_deref(),
            Some("arch_cpu_idle+0x0")
        );
        assert_eq!(s.name(0xffff_ffff_8200_0010), None, "past _etext");
        assert_eq!(s.name(0x1000), None, "below the text");
        let line = summarize(&cpus_at(DUMP), Some(&s));
        assert_eq!(
            line,
            "CPU#0 ip=0xffffffff81e1a2cf (L1 default_idle+0xf) halted interrupts on\n\
             CPU#1 ip=0xfd0cf (not in L1's kernel text) running interrupts off"
        );
    }

    #[test]
    fn this_process_threads_are_listed_with_their_state() {
        let t = std::thread::spawn(|| std::thread::sleep(Duration::from_millis(300)));
        let lines = threads(std::process::id());
        t.join().unwrap();
        assert!(lines.len() >= 2, "{lines:?}");
        // The thread listing them is running.
        assert!(lines.iter().any(|l| l.contains(" state R ")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains(" state S ")), "{lines:?}");
        assert_eq!(threads(u32::MAX), ["/proc/4294967295/task: unreadable"]);
    }

    #[test]
    fn the_echo_and_prompt_leave_the_reply() {
        let raw = "i\x1b[K\x1b[Dinfo lapic 0\x1b[K\r\nLVTT\t 0x00010000\r\nIRR\t (none)\r\n(qemu) ";
        assert_eq!(clean_reply(raw), "LVTT\t 0x00010000\nIRR\t (none)");
    }

    /// A real QEMU (firmware only, both CPUs soon halted) answers through
    /// the socket; a monitor nobody serves fails with the reason.
    #[test]
    fn a_real_qemu_tells_where_its_cpus_are() {
        let m = Monitor::for_run("selftest");
        let mut qemu = firmware_only_qemu(&m)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("QEMU starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let state = loop {
            match m.cpu_state(2) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let _ = qemu.kill();
        let _ = qemu.wait();
        let cpus = cpus_at(&state);
        assert_eq!(cpus.iter().map(|c| c.cpu).collect::<Vec<_>>(), [0, 1]);
        assert!(state.contains("local APIC state for CPU 1"), "{state}");
        // Its local APICs parse, and halted firmware sleeps through nothing.
        let lapics = lapics_at(&state);
        assert_eq!(lapics.iter().map(|l| l.cpu).collect::<Vec<_>>(), [0, 1]);
        assert!(sleeping_through_interrupts(&state).is_empty(), "{state}");
        assert!(!state.contains(PROMPT), "{state}");
        let gone = Monitor::for_run("nobody").cpu_state(1).unwrap_err();
        assert!(gone.contains("xvmm-harness-"), "{gone}");
    }
}
