//! Booting L1 under QEMU TCG and reading what it printed: the console (kept
//! in `target/harness/<group>.log`) and the `XVMM-STEP` lines of the plan.

use crate::build::{workspace_root, Artifacts};
use crate::lock::HarnessLock;
use crate::monitor::{cpus_at, summarize, Monitor, Symbols};
use crate::{Outcome, StepResult, HOST_QEMU};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use xvmm::{Error, Result};

/// How long the host TSC is counted against the monotonic clock.
const TSC_CALIBRATION: Duration = Duration::from_millis(200);

/// A report from a step's stdout lines (see [`HarnessRun::report`]).
pub fn report_from_stdout(stdout: &[&str]) -> std::result::Result<xvmm_results::Report, String> {
    if stdout.is_empty() {
        return Err("no JSON report: the step wrote nothing to stdout".into());
    }
    xvmm_results::Report::from_json(&stdout.join("\n"))
        .map_err(|e| format!("stdout is not the report alone: {e}"))
}

/// L1's kernel command line. A TCG guest without ACPI has no HPET or PM
/// timer, so L1 cannot calibrate its TSC, falls back to jiffies (its clock
/// then drifts by a factor of several under load) and KVM has no TSC rate
/// for L2; hence the measured host rate is given explicitly (QEMU TCG passes
/// the host TSC through unscaled). With a true TSC the IO-APIC timer check
/// (4 ticks within 40 ms) fails whenever the emulating host is busy, and the
/// kernel panics: `no_timer_check`. `nokaslr`: a hung run's CPU dump names
/// L1's functions from its `System.map` ([`crate::monitor`]).
pub fn l1_cmdline(tsc_khz: u64) -> String {
    format!(
        "console=ttyS0 quiet panic=-1 rdinit=/init tsc_early_khz={tsc_khz} tsc=reliable \
         nokaslr no_timer_check"
    )
}

/// What one L1 boot printed and measured.
#[derive(Clone, Debug)]
pub struct HarnessRun {
    /// Everything L1 printed (QEMU's stdout).
    pub console: Vec<String>,
    pub steps: Vec<StepResult>,
    /// `l1-init` found `/dev/kvm`.
    pub kvm_present: bool,
    /// `l1-init` reached the end of the plan.
    pub finished: bool,
    pub seconds: f64,
    /// Where the console was saved.
    pub log: PathBuf,
}

impl HarnessRun {
    /// What a test prints of the run: `what`, how long L1 took, where its
    /// console is, and one line per step.
    pub fn summary(&self, what: &str) -> String {
        let mut out = format!(
            "{what}: L1 run took {:.1} s, log {}",
            self.seconds,
            self.log.display()
        );
        for s in &self.steps {
            out.push('\n');
            out.push_str(&s.to_line());
        }
        out
    }

    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The console from the last run of step `name` on: `l1-init` runs a
    /// step once more after an early L2 triple fault
    /// ([`xvmm_init::plan::Seen::retry`]), and only that run's lines count.
    fn last_run_of(&self, name: &str) -> &[String] {
        let retry = format!("{}{name} ", xvmm_init::plan::RETRY_PREFIX);
        let from = self
            .console
            .iter()
            .rposition(|l| l.contains(&retry))
            .map_or(0, |i| i + 1);
        &self.console[from..]
    }

    /// Why step `name` was run once more, if it was.
    pub fn retried(&self, name: &str) -> Option<&str> {
        let retry = format!("{}{name} ", xvmm_init::plan::RETRY_PREFIX);
        self.console
            .iter()
            .find_map(|l| l.find(&retry).map(|i| &l[i + retry.len()..]))
    }

    /// The output lines (stdout and stderr) of one step's process.
    pub fn output(&self, name: &str) -> Vec<&str> {
        let out = format!("{}{name}| ", xvmm_init::plan::OUT_PREFIX);
        let err = format!("{}{name}| ", xvmm_init::plan::ERR_PREFIX);
        self.last_run_of(name)
            .iter()
            .filter_map(|l| {
                let (i, len) = match l.find(&out) {
                    Some(i) => (i, out.len()),
                    None => (l.find(&err)?, err.len()),
                };
                Some(&l[i + len..])
            })
            .collect()
    }

    /// The result report step `name` wrote with `--json -`: its stdout is the
    /// report alone (xvmm and xperf send the guest console and every table to
    /// stderr then), so the whole of stdout must parse.
    pub fn report(&self, name: &str) -> std::result::Result<xvmm_results::Report, String> {
        report_from_stdout(&self.stdout(name))
    }

    /// The report of step `name`, which must have run and exited 0; the
    /// error holds what went wrong and the step's output.
    pub fn exited_report(&self, name: &str) -> std::result::Result<xvmm_results::Report, String> {
        self.exited(name)?;
        self.report(name).map_err(|e| {
            let out = self.output(name).join("\n");
            format!("step {name}: {e}; output:\n{out}")
        })
    }

    /// Whether step `name` ran and exited 0; the error holds what went
    /// wrong and the step's output.
    pub fn exited(&self, name: &str) -> std::result::Result<(), String> {
        let step = self
            .step(name)
            .ok_or_else(|| format!("step {name} did not run:\n{}", self.tail(40)))?;
        if step.outcome != Outcome::Exited(0) {
            // The last lines first: they hold the error, and a CI digest
            // keeps only the head of a failure's message.
            let out = self.output(name);
            let tail = out[out.len().saturating_sub(12)..].join("\n");
            let retried = self
                .retried(name)
                .map_or(String::new(), |why| format!(" (run again after: {why})"));
            return Err(format!(
                "step {name} ended with {}{retried}; its last lines:\n{tail}\n\
                 its whole output:\n{}",
                step.outcome,
                out.join("\n")
            ));
        }
        Ok(())
    }

    /// What step `name` wrote to its stdout alone, line by line.
    pub fn stdout(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{}{name}| ", xvmm_init::plan::OUT_PREFIX);
        self.last_run_of(name)
            .iter()
            .filter_map(|l| l.find(&prefix).map(|i| &l[i + prefix.len()..]))
            .collect()
    }

    /// What step `name` wrote to stderr, line by line.
    pub fn stderr(&self, name: &str) -> Vec<&str> {
        let prefix = format!("{}{name}| ", xvmm_init::plan::ERR_PREFIX);
        self.last_run_of(name)
            .iter()
            .filter_map(|l| l.find(&prefix).map(|i| &l[i + prefix.len()..]))
            .collect()
    }

    /// The files step `name` carried out of L1 on its stderr
    /// ([`xvmm_init::record`]), each checked against its length and SHA-256.
    pub fn files(&self, name: &str) -> std::result::Result<xvmm_init::record::Files, String> {
        xvmm_init::record::decode_files(self.stderr(name))
    }

    /// The L2 kernel's uptime (seconds) when its `/init` printed the marker.
    pub fn guest_uptime(&self, name: &str) -> Option<f64> {
        self.output(name)
            .iter()
            .find_map(|l| xvmm_init::marker_uptime(l))
    }

    /// The last `n` console lines, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let from = self.console.len().saturating_sub(n);
        self.console[from..].join("\n")
    }
}

/// Boots L1 under QEMU TCG with `initramfs`, waits for it to finish (it
/// reboots, which ends QEMU because of `-no-reboot`) or kills it after
/// `timeout`. `group` names the log file, `target/harness/<group>.log`
/// (`<group>-<pid>.log` while running). Waits for the machine-wide harness
/// lock first ([`crate::lock`]).
pub fn run_l1(
    a: &Artifacts,
    initramfs: &[u8],
    group: &str,
    timeout: Duration,
) -> Result<HarnessRun> {
    run_l1_with_cmdline(a, initramfs, group, timeout, "")
}

/// Why an L1 run that ended as `ended` is booted again, and which kind
/// of end it was; `None`: it is not.
fn boot_again_because(
    ended: &Result<(Vec<String>, Ended)>,
    timeout: Duration,
) -> Option<(String, Again)> {
    match ended {
        Ok((_, Ended::Idle)) => Some((
            format!("L1 went idle for {} s (hung)", IDLE_LIMIT.as_secs()),
            Again::Hung,
        )),
        Ok((_, Ended::Wedged)) => Some((
            "an L1 CPU slept through a pending interrupt (hung busy)".into(),
            Again::Hung,
        )),
        Ok((_, Ended::TimedOut)) => Some((
            format!("L1 was still running after {} s", timeout.as_secs()),
            Again::OutOfTime,
        )),
        Ok((console, Ended::Exited)) => ended_early(console).map(|why| (why, Again::Early)),
        Err(_) => None,
    }
}

/// The kinds of end that boot L1 again, each with its own count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    /// L1 ended before its plan was done (a crash or a reset): seconds.
    Early,
    /// L1 hung and the harness saw it ([`Ended::Idle`], [`Ended::Wedged`]):
    /// two minutes.
    Hung,
    /// The group outlived its limit: a hang the harness did not recognise,
    /// or a step too slow, which a new boot would not cure.
    OutOfTime,
}

impl Again {
    /// How many more boots an end of this kind gets: each costs the
    /// minute or two to the fault, but for a group out of time, which
    /// costs its limit. Four early ends: three in a row lost `xperf.rs`
    /// once, its `vm` step's two-vCPU L2 resetting L1, with both host CPUs
    /// busy besides. Two hangs seen: CI's run of 2026-11-30 lost
    /// `xperf.rs` to two ten-minute limits in a row (docs/testing/harness.md).
    fn limit(self) -> usize {
        match self {
            Again::Early => 4,
            Again::Hung => 2,
            Again::OutOfTime => 1,
        }
    }
}

/// Whether an L1 run that ended as `ended` is booted again, given the
/// kinds of end that already were (`again`, which it extends): why, or
/// `None` where it is not or that kind has had its [`Again::limit`].
fn boot_again(
    ended: &Result<(Vec<String>, Ended)>,
    timeout: Duration,
    again: &mut Vec<Again>,
) -> Option<String> {
    let (why, kind) = boot_again_because(ended, timeout)?;
    if again.iter().filter(|&&k| k == kind).count() >= kind.limit() {
        return None;
    }
    again.push(kind);
    Some(why)
}

/// [`run_l1`] with `extra` appended to L1's kernel command line (e.g.
/// `xperf_stamps` for the patched L1 kernel of `tests/xperf.rs`).
pub fn run_l1_with_cmdline(
    a: &Artifacts,
    initramfs: &[u8],
    group: &str,
    timeout: Duration,
    extra: &str,
) -> Result<HarnessRun> {
    let dir = workspace_root().join("target").join("harness");
    fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    // Per-process names: a run waiting for the lock must not overwrite the
    // files of the one holding it.
    let pid = std::process::id();
    let initrd = dir.join(format!("{group}-{pid}-l1.cpio"));
    fs::write(&initrd, initramfs).map_err(|e| Error::io("writing", &initrd, e))?;
    let running_log = dir.join(format!("{group}-{pid}.log"));
    let log_file =
        fs::File::create(&running_log).map_err(|e| Error::io("creating", &running_log, e))?;

    let lock = HarnessLock::acquire()?;
    // Calibrated under the lock: another QEMU run would disturb it.
    let tsc_khz = xvmm_host::tsc::calibrate_khz(TSC_CALIBRATION);
    let cmdline = format!("{} {extra}", l1_cmdline(tsc_khz));
    let started = Instant::now();
    let mut ended = boot_once(a, &initrd, cmdline.trim_end(), &log_file, started, timeout);
    // Two ways the emulator itself has hung, each seen now and then: QEMU
    // stops using the CPU with the guest waiting on nothing (about once in
    // twenty boots under load), or a halted vCPU misses its wake-up while
    // another spins waiting on it (docs/testing/harness.md: `WedgeWatch`
    // ends such a boot, or else the group outlives its limit). Rarer, L1 ends before its plan is done: its
    // kernel oopsed on an int3 its own text patching left (a static key
    // flipped as tracing stopped, the other CPU running the patched code:
    // once, as a traced step ended) and panicked, or it reset without a
    // word (as an L2 booted; two-vCPU L2s corrupt L1 on some hosts). A new
    // boot is a new machine: a transient fault passes there, a step that is
    // merely too slow times out again. The log keeps every console, the
    // hang probe's dump included.
    let mut again: Vec<Again> = Vec::new();
    while let Some(why) = boot_again(&ended, timeout, &mut again) {
        let boot = 1 + again.len();
        eprintln!("nested harness group {group}: {why}; booting it again (boot {boot})");
        let _ = writeln!(&log_file, "=== {why}; boot {boot}");
        ended = boot_once(
            a,
            &initrd,
            cmdline.trim_end(),
            &log_file,
            Instant::now(),
            timeout,
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(lock);

    let _ = fs::remove_file(&initrd);
    // The latest complete console of the group, under a stable name.
    let log = dir.join(format!("{group}.log"));
    let _ = fs::copy(&running_log, &log);
    let _ = fs::remove_file(&running_log);
    let (console, how) = ended?;
    let still = match how {
        Ended::Exited => None,
        Ended::TimedOut => Some(format!("still running after {} s", timeout.as_secs())),
        Ended::Idle => Some(format!(
            "idle for {} s (QEMU used no CPU: hung), boot after boot",
            IDLE_LIMIT.as_secs()
        )),
        Ended::Wedged => {
            Some("hung busy (a CPU slept through a pending interrupt), boot after boot".into())
        }
    };
    if let Some(why) = still {
        return Err(Error::Timeout(format!(
            "nested harness group {group} {why}; console in {}",
            log.display()
        )));
    }
    Ok(HarnessRun {
        steps: console
            .iter()
            .filter_map(|l| StepResult::parse_line(l))
            .collect(),
        kvm_present: console
            .iter()
            .any(|l| l.contains("XVMM-L1: up kvm=present")),
        finished: console.iter().any(|l| l.contains("XVMM-L1: done")),
        console,
        seconds,
        log,
    })
}

/// L1's CPU count: 2, or `XVMM_HARNESS_SMP`.
fn l1_cpus() -> usize {
    std::env::var("XVMM_HARNESS_SMP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

/// QEMU's `-accel` for L1: TCG, its threading from `XVMM_HARNESS_TCG`
/// (`single` or `multi`) when set.
fn l1_accel() -> String {
    match std::env::var("XVMM_HARNESS_TCG") {
        Ok(t) if !t.is_empty() => format!("tcg,thread={t}"),
        _ => "tcg".into(),
    }
}

/// Starts QEMU TCG on the L1 kernel, its console on stdout, its monitor on
/// `monitor`'s socket.
fn spawn_l1(a: &Artifacts, initrd: &Path, cmdline: &str, monitor: &Monitor) -> Result<Child> {
    Command::new(HOST_QEMU)
        .arg("-accel")
        .arg(l1_accel())
        .args(["-cpu", "EPYC", "-m", "2048", "-smp"])
        .arg(l1_cpus().to_string())
        .arg("-monitor")
        .arg(monitor.qemu_arg())
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&a.l1_kernel.bzimage)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(cmdline)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Build(format!("starting {HOST_QEMU}: {e}")))
}

/// Sends every line of `stream` (prefixed) to `tx`, from its own thread.
fn forward_lines(
    stream: impl Read + Send + 'static,
    prefix: &'static str,
    tx: mpsc::Sender<String>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).split(b'\n').map_while(|l| l.ok()) {
            let line = String::from_utf8_lossy(&line);
            if tx
                .send(format!("{prefix}{}", line.trim_end_matches('\r')))
                .is_err()
            {
                return;
            }
        }
    })
}

/// How a QEMU run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited,
    TimedOut,
    /// QEMU used (almost) no CPU for [`IDLE_LIMIT`]: the machine hung.
    Idle,
    /// A CPU slept through a pending interrupt at two probes of a silent
    /// console ([`WedgeWatch`]): the machine hung busy.
    Wedged,
}

/// How long the console is silent before the harness asks where L1's
/// CPUs are, and how often it asks again while it stays silent.
const WEDGE_SILENCE: Duration = Duration::from_secs(60);
const WEDGE_PROBE_EVERY: Duration = Duration::from_secs(30);

/// Watches for the busy hang of docs/testing/harness.md: an L1 CPU halted
/// with interrupts on and an interrupt pending above its priority (a
/// missed wake-up under multi-threaded TCG) while the other spins waiting
/// for it. Seen at two probes [`WEDGE_PROBE_EVERY`] apart with the console
/// silent between, it ends the boot in about two minutes where the group's
/// limit would take ten. Once is not enough: a probe can catch a wake-up
/// on its way.
#[derive(Debug)]
struct WedgeWatch {
    next_probe: Instant,
    /// The CPUs the last probe found sleeping through an interrupt.
    suspects: Vec<usize>,
}

impl WedgeWatch {
    fn new(now: Instant) -> WedgeWatch {
        WedgeWatch {
            next_probe: now + WEDGE_SILENCE,
            suspects: Vec::new(),
        }
    }

    fn line(&mut self, now: Instant) {
        self.next_probe = now + WEDGE_SILENCE;
        self.suspects.clear();
    }

    /// Probes with `dump` (the monitor's `cpu_state`) when it is time;
    /// `Some(cpus)` where the same CPUs slept through an interrupt at this
    /// probe and the one before.
    fn check(&mut self, now: Instant, dump: impl FnOnce() -> Option<String>) -> Option<Vec<usize>> {
        if now < self.next_probe {
            return None;
        }
        self.next_probe = now + WEDGE_PROBE_EVERY;
        let asleep = dump().map_or_else(Vec::new, |d| {
            crate::monitor::sleeping_through_interrupts(&d)
        });
        let both: Vec<usize> = asleep
            .iter()
            .copied()
            .filter(|c| self.suspects.contains(c))
            .collect();
        self.suspects = asleep;
        (!both.is_empty()).then_some(both)
    }
}

/// A TCG machine that is up uses CPU even when its guest idles (timer
/// ticks); this long with under [`IDLE_CPU`] of it is a hang. No step waits
/// idle nearly as long.
const IDLE_LIMIT: Duration = Duration::from_secs(120);
const IDLE_CPU: Duration = Duration::from_millis(50);

/// Why L1 ended before its plan was done, where it did: its kernel
/// panicked, or it reset (QEMU's `-no-reboot` ends the run there).
fn ended_early(console: &[String]) -> Option<String> {
    if console.iter().any(|l| l.contains("XVMM-L1: done")) {
        return None;
    }
    Some(
        match console
            .iter()
            .find(|l| l.contains("Kernel panic - not syncing"))
        {
            Some(panic) => format!("L1's kernel panicked ({})", panic.trim()),
            None => "L1 ended before its plan was done, with no panic: it reset".into(),
        },
    )
}

/// CPU time a process has used (`/proc/PID/stat` utime + stime).
fn cpu_used(pid: u32) -> Option<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_of_stat(&stat)
}

/// utime + stime of a `/proc/PID/stat` line (fields 14 and 15, counted
/// after the command name's closing parenthesis), in clock ticks of
/// `_SC_CLK_TCK`.
fn cpu_of_stat(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&hz| hz > 0)?;
    Some(Duration::from_millis(ticks * 1000 / hz))
}

/// Boots L1 once and collects its console into `log`.
fn boot_once(
    a: &Artifacts,
    initrd: &Path,
    cmdline: &str,
    log: &fs::File,
    started: Instant,
    timeout: Duration,
) -> Result<(Vec<String>, Ended)> {
    let log = log
        .try_clone()
        .map_err(|e| Error::Build(format!("log: {e}")))?;
    let probe = HangProbe {
        monitor: Monitor::for_run("l1"),
        system_map: a.l1_kernel.system_map.clone(),
        cpus: l1_cpus(),
    };
    spawn_l1(a, initrd, cmdline, &probe.monitor)
        .map(|child| collect_console(child, log, started, timeout, IDLE_LIMIT, Some(&probe)))
}

/// Asks a run the harness is about to end where its CPUs are.
struct HangProbe {
    monitor: Monitor,
    system_map: PathBuf,
    cpus: usize,
}

impl HangProbe {
    /// Lines for the log: each CPU's place and state, QEMU's dump, then
    /// QEMU's threads (`pid`).
    fn describe(&self, ended: Ended, pid: u32) -> Vec<String> {
        let mut lines = vec![format!(
            "=== L1 ended by the harness ({ended:?}); its CPUs:"
        )];
        match self.monitor.cpu_state(self.cpus) {
            Ok(state) => {
                let symbols = Symbols::read(&self.system_map);
                lines.extend(
                    summarize(&cpus_at(&state), symbols.as_ref())
                        .lines()
                        .map(String::from),
                );
                lines.push("=== QEMU monitor: info registers -a, info lapic".into());
                lines.extend(state.lines().map(String::from));
            }
            Err(e) => lines.push(format!("=== no CPU state: {e}")),
        }
        lines.push("=== QEMU's threads".into());
        lines.extend(crate::monitor::threads(pid));
        lines
    }
}

/// Reads QEMU's stdout (the console) and stderr (prefixed `qemu: `) into
/// memory and `log` until QEMU ends, or kills it after `timeout` from
/// `started` or once it has used under [`IDLE_CPU`] in `idle_limit`.
fn collect_console(
    mut child: Child,
    mut log: fs::File,
    started: Instant,
    timeout: Duration,
    idle_limit: Duration,
    probe: Option<&HangProbe>,
) -> (Vec<String>, Ended) {
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(forward_lines(out, "", tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(forward_lines(err, "qemu: ", tx.clone()));
    }
    drop(tx);
    let verbose = std::env::var_os("XVMM_HARNESS_VERBOSE").is_some();
    let mut console = Vec::new();
    let mut ended = Ended::Exited;
    // The CPU time at the start of the current idle stretch.
    let mut busy = (Instant::now(), cpu_used(child.id()));
    let mut wedge = WedgeWatch::new(Instant::now());
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if verbose {
                    // Opt-in debugging aid for the person running the tests.
                    eprintln!("L1| {line}");
                }
                // Written as it comes, so a long run can be watched.
                let _ = writeln!(log, "{line}");
                console.push(line);
                wedge.line(Instant::now());
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(p) = probe {
            let dump = || p.monitor.cpu_state(p.cpus).ok();
            if let Some(cpus) = wedge.check(Instant::now(), dump) {
                let _ = writeln!(
                    log,
                    "=== L1 CPUs {cpus:?} slept through a pending interrupt at two probes"
                );
                ended = Ended::Wedged;
            }
        }
        match (cpu_used(child.id()), busy.1) {
            (Some(now), Some(then)) if now.saturating_sub(then) < IDLE_CPU => {
                if busy.0.elapsed() > idle_limit {
                    ended = Ended::Idle;
                }
            }
            (Some(now), _) => busy = (Instant::now(), Some(now)),
            (None, _) => {}
        }
        if started.elapsed() > timeout {
            ended = Ended::TimedOut;
        }
        if ended != Ended::Exited {
            // Where it stopped, asked before the kill ends the machine.
            let pid = child.id();
            for line in probe.map(|p| p.describe(ended, pid)).unwrap_or_default() {
                let _ = writeln!(log, "{line}");
                console.push(line);
            }
            let _ = child.kill();
            break;
        }
    }
    let _ = child.wait();
    for r in readers {
        let _ = r.join();
    }
    while let Ok(line) = rx.try_recv() {
        let _ = writeln!(log, "{line}");
        console.push(line);
    }
    (console, ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_run_again_shows_only_its_last_run() {
        let console: Vec<String> = [
            "XVMM-OUT a| first",
            "XVMM-ERR a| xvmm: guest: vCPU 0: triple fault (KVM_EXIT_SHUTDOWN)",
            "XVMM-OUT ab| other step",
            "XVMM-RETRY a L2 triple-faulted before its init started",
            "XVMM-OUT a| second",
            "XVMM-STEP name=a outcome=exit:0 elapsed_ms=1.0 marker_ms=- first_byte_ms=- max_rss_kib=1 guest_rss_kib=- other_rss_kib=-",
        ]
        .map(String::from)
        .to_vec();
        let run = HarnessRun {
            steps: Vec::new(),
            kvm_present: true,
            finished: true,
            console,
            seconds: 1.0,
            log: PathBuf::new(),
        };
        assert_eq!(run.output("a"), ["second"]);
        assert_eq!(run.stdout("a"), ["second"]);
        assert!(run.stderr("a").is_empty());
        assert_eq!(
            run.retried("a"),
            Some("L2 triple-faulted before its init started")
        );
        // Another step's lines are its own; a step run once shows all.
        assert_eq!(run.retried("ab"), None);
        assert_eq!(run.output("ab"), ["other step"]);
    }

    /// A failed step's message leads with its error, not the head of a
    /// long output, and says it was run again.
    #[test]
    fn a_failed_step_says_its_last_lines_first() {
        let mut console: Vec<String> =
            vec!["XVMM-RETRY vm L2 triple-faulted before its init started".into()];
        console.extend((0..30).map(|i| format!("XVMM-OUT vm| table row {i}")));
        console.push("XVMM-ERR vm| xvmm: the timeline is not verified".into());
        let end = "XVMM-STEP name=vm outcome=exit:1 elapsed_ms=1.0 marker_ms=- first_byte_ms=- \
                   max_rss_kib=1 guest_rss_kib=- other_rss_kib=-";
        console.push(end.into());
        let run = HarnessRun {
            steps: vec![StepResult::parse_line(end).unwrap()],
            kvm_present: true,
            finished: true,
            console,
            seconds: 1.0,
            log: PathBuf::new(),
        };
        let e = run.exited("vm").unwrap_err();
        let head: Vec<&str> = e.lines().take(3).collect();
        assert!(
            head[0].contains("exit:1") && head[0].contains("run again after: L2"),
            "{e}"
        );
        assert!(!e.lines().take(13).any(|l| l == "table row 0"), "{e}");
        assert!(
            e.lines().take(14).any(|l| l.contains("not verified")),
            "{e}"
        );
        assert!(e.contains("table row 0"), "the whole output follows: {e}");
    }

    #[test]
    fn an_end_before_the_plan_is_done_asks_for_a_second_boot() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let panicked = lines(&[
            "XVMM-STEP name=a outcome=exit:0",
            "[   60.266111] Kernel panic - not syncing: Fatal exception in interrupt",
        ]);
        let why = ended_early(&panicked).expect("a panic");
        assert!(why.contains("Fatal exception in interrupt"), "{why}");
        // A silent end (a reset) is one too; after the plan, nothing is.
        let reset = ended_early(&lines(&[
            "XVMM-STEP name=a outcome=exit:0",
            "[ 9.0] kvm: x",
        ]));
        assert!(reset.expect("a reset").contains("no panic"));
        let mut done = panicked.clone();
        done.insert(1, "XVMM-L1: done".into());
        assert_eq!(ended_early(&done), None);
        assert_eq!(ended_early(&lines(&["XVMM-L1: done"])), None);
        // Which ends boot L1 again, and which of them are early ones.
        let t = Duration::from_secs(600);
        let again = |e: Result<(Vec<String>, Ended)>| boot_again_because(&e, t);
        assert!(
            matches!(again(Ok((vec![], Ended::Idle))), Some((w, Again::Hung)) if w.contains("hung"))
        );
        assert!(matches!(
            again(Ok((vec![], Ended::Wedged))),
            Some((w, Again::Hung)) if w.contains("pending interrupt")
        ));
        assert!(matches!(
            again(Ok((vec![], Ended::TimedOut))),
            Some((w, Again::OutOfTime)) if w.contains("600 s")
        ));
        assert!(matches!(
            again(Ok((panicked.clone(), Ended::Exited))),
            Some((_, Again::Early))
        ));
        assert!(again(Ok((done, Ended::Exited))).is_none());
        assert!(again(Err(Error::Build("no qemu".into()))).is_none());
        // Each kind counts apart: two hangs seen, one limit outlived, four
        // early ends, whatever came between.
        let mut seen = Vec::new();
        let mut boot = |e: Ended, console: &[String]| {
            boot_again(&Ok((console.to_vec(), e)), t, &mut seen).is_some()
        };
        let ends = [
            (Ended::Wedged, true),
            (Ended::TimedOut, true),
            (Ended::Idle, true),
            (Ended::Wedged, false),
            (Ended::TimedOut, false),
        ];
        for (e, want) in ends {
            assert_eq!(boot(e, &[]), want, "{e:?}");
        }
        for want in [true, true, true, true, false] {
            assert_eq!(boot(Ended::Exited, &panicked), want);
        }
    }

    /// The watch asks only after a minute of silence and then every half
    /// minute, and ends the boot only where the same CPU slept through an
    /// interrupt at two probes in a row with no line between.
    #[test]
    fn a_cpu_asleep_through_an_interrupt_twice_in_silence_is_a_hang() {
        let asleep = |cpu: usize| {
            format!(
                "CPU#{cpu}\nRIP=ffffffff81e1a2cf RFL=00000246 [---Z-P-] CPL=0 HLT=1\n\
                 dumping local APIC state for CPU {cpu}\nIRR\t 236 251 \n\
                 APR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x10\n"
            )
        };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = WedgeWatch::new(t0);
        let never = || -> Option<String> { panic!("asked before its time") };
        assert_eq!(w.check(at(59), never), None);
        assert_eq!(w.check(at(60), || Some(asleep(0))), None, "once");
        assert_eq!(w.check(at(89), never), None);
        assert_eq!(w.check(at(90), || Some(asleep(0))), Some(vec![0]));
        // A line clears the suspicion and the minute starts again.
        w.line(at(100));
        assert_eq!(w.check(at(159), never), None);
        assert_eq!(w.check(at(160), || Some(asleep(0))), None);
        // Another CPU, a monitor that does not answer, or an awake CPU
        // between: no two probes in a row agree.
        assert_eq!(w.check(at(190), || Some(asleep(1))), None);
        assert_eq!(w.check(at(220), || None), None);
        assert_eq!(w.check(at(250), || Some(asleep(1))), None);
        let awake = asleep(1).replace("HLT=1", "HLT=0");
        assert_eq!(w.check(at(280), || Some(awake)), None);
        assert_eq!(w.check(at(310), || Some(asleep(1))), None);
        assert_eq!(w.check(at(340), || Some(asleep(1))), Some(vec![1]));
    }

    /// Runs `child` through [`collect_console`]: its console, how it ended,
    /// what the log file kept and how long it took.
    fn collect_child(
        child: Child,
        timeout: Duration,
        idle: Duration,
        probe: Option<&HangProbe>,
    ) -> (Vec<String>, Ended, String, Duration) {
        // Tests run side by side: a log file each.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!("harness-collect-{}-{n}", std::process::id()));
        let file = fs::File::create(&log).unwrap();
        let t = Instant::now();
        let (lines, ended) = collect_console(child, file, t, timeout, idle, probe);
        let saved = fs::read_to_string(&log).unwrap_or_default();
        let _ = fs::remove_file(&log);
        (lines, ended, saved, t.elapsed())
    }

    fn collect(script: &str, timeout_s: u64, idle_s: u64) -> (Vec<String>, Ended, Duration) {
        let child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let timeout = Duration::from_secs(timeout_s);
        let (lines, ended, _, took) =
            collect_child(child, timeout, Duration::from_secs(idle_s), None);
        (lines, ended, took)
    }

    /// A machine that stops using the CPU is ended as hung long before its
    /// timeout; a busy one runs to its timeout; one that ends, ends.
    #[test]
    fn an_idle_machine_is_hung_a_busy_one_is_not() {
        let (lines, ended, took) = collect("echo up; exec sleep 60", 30, 1);
        assert_eq!(
            (lines.as_slice(), ended),
            (&["up".to_string()][..], Ended::Idle)
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
        let (_, ended, took) = collect("while :; do :; done", 3, 1);
        assert_eq!(ended, Ended::TimedOut);
        assert!(took >= Duration::from_secs(3), "{took:?}");
        let (lines, ended, _) = collect("echo a; echo b >&2", 30, 1);
        assert_eq!(ended, Ended::Exited);
        assert_eq!(lines.len(), 2, "{lines:?}");
    }

    /// A QEMU the harness ends leaves, in the console and the log, where
    /// each of its CPUs was (from its monitor) before the kill.
    #[test]
    fn a_run_the_harness_ends_leaves_its_cpus_state() {
        let probe = HangProbe {
            monitor: Monitor::for_run("ended"),
            system_map: PathBuf::from("/nonexistent/System.map"),
            cpus: 2,
        };
        let child = crate::monitor::firmware_only_qemu(&probe.monitor)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, ended, saved, _) = collect_child(
            child,
            Duration::from_secs(3),
            Duration::from_secs(600),
            Some(&probe),
        );
        assert_eq!(ended, Ended::TimedOut);
        let text = lines.join("\n");
        assert!(
            text.contains("=== L1 ended by the harness (TimedOut); its CPUs:"),
            "{text}"
        );
        for cpu in [
            "CPU#0 ip=",
            "CPU#1 ip=",
            "local APIC state for CPU 1",
            "=== QEMU's threads",
            "qemu-system-x86",
        ] {
            assert!(text.contains(cpu), "{cpu} missing:\n{text}");
        }
        assert!(
            saved.contains("CPU#1 ip="),
            "the log lacks the dump:\n{saved}"
        );
    }

    #[test]
    fn cpu_time_is_utime_plus_stime_after_the_name() {
        // A command name holding ") " and spaces cannot shift the fields.
        // SAFETY: sysconf only reads a configuration value.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
        let stat = format!(
            "1234 (qemu) x (y) S 1 1234 1234 0 -1 4194560 100 0 0 0 {} {} 0 0 20 0 4 0",
            3 * hz,
            hz / 2
        );
        assert_eq!(cpu_of_stat(&stat), Some(Duration::from_millis(3500)));
        assert_eq!(cpu_of_stat("1234 (qemu) S 1"), None);
        assert_eq!(cpu_of_stat("garbage"), None);
        // This process has used some CPU, and the figure only grows.
        let me = cpu_used(std::process::id()).unwrap();
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(60) {}
        assert!(cpu_used(std::process::id()).unwrap() >= me);
    }

    #[test]
    fn l1_cmdline_gives_the_measured_tsc_rate() {
        let khz = xvmm_host::tsc::calibrate_khz(TSC_CALIBRATION);
        assert!((500_000..10_000_000).contains(&khz), "{khz} kHz");
        let cmdline = l1_cmdline(khz);
        assert!(
            cmdline.contains(&format!(" tsc_early_khz={khz} ")),
            "{cmdline}"
        );
        assert!(cmdline.ends_with(" no_timer_check"), "{cmdline}");
    }

    #[test]
    fn step_output_and_marker_uptime_come_from_the_prefixed_lines() {
        let out = xvmm_init::plan::OUT_PREFIX;
        let err = xvmm_init::plan::ERR_PREFIX;
        let run = HarnessRun {
            console: vec![
                format!("{out}a| first"),
                "[    1.0] kernel line".into(),
                format!("{out}b| other"),
                format!("{err}a| on stderr"),
                format!("{out}a| {} uptime=1.25", xvmm_init::MARKER),
            ],
            steps: vec![],
            kvm_present: true,
            finished: true,
            seconds: 0.0,
            log: PathBuf::new(),
        };
        let marker = format!("{} uptime=1.25", xvmm_init::MARKER);
        assert_eq!(run.output("a"), ["first", "on stderr", &marker]);
        assert_eq!(run.stdout("a"), ["first", &marker]);
        assert_eq!(run.output("b"), ["other"]);
        assert_eq!(run.guest_uptime("a"), Some(1.25));
        assert_eq!(run.guest_uptime("b"), None);
        assert_eq!(run.tail(2), format!("{err}a| on stderr\n{out}a| {marker}"));
    }
}
