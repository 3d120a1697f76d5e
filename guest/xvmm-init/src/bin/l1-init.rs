//! `/init` of the nested harness's L1 host: mounts what xvmm needs, loads
//! the modules `/modules/order` lists (a distribution kernel's `kvm` and
//! `kvm_amd`), checks `/dev/kvm`, runs every step of `/plan` (see [`xvmm_init::plan`]) printing
//! one `XVMM-STEP` line per step, then reboots, which ends QEMU
//! (`-no-reboot`). `l1-init --record-trace PROGRAM ARGS...`, a step's
//! program, runs PROGRAM with L1's KVM exits recorded
//! ([`xvmm_init::record`]).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};
use xvmm_guest::sys;
use xvmm_init::plan::{
    self, Outcome, Seen, Step, StepResult, ERR_PREFIX, OUT_PREFIX, RETRY_PREFIX,
};
use xvmm_init::{memory, record};

const PLAN: &str = "/plan";
/// Module files to load, one path a line, dependencies first.
const MODULES: &str = "/modules/order";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(("--record-trace", argv)) = args.split_first().map(|(f, r)| (f.as_str(), r)) {
        // A step of the plan, run by this init as a program of its own.
        std::process::exit(record::record_trace(argv));
    }
    for (fs, dir) in [
        ("proc", "/proc"),
        ("sysfs", "/sys"),
        ("devtmpfs", "/dev"),
        ("tracefs", "/sys/kernel/tracing"),
        ("tmpfs", "/tmp"),
    ] {
        if let Err(e) = sys::mount(fs, dir) {
            println!("XVMM-L1: warning: {e}");
        }
    }
    if let Ok(order) = std::fs::read_to_string(MODULES) {
        for path in order.lines().filter(|l| !l.trim().is_empty()) {
            match sys::load_module(path.trim()) {
                Ok(()) => println!("XVMM-L1: module {} loaded", path.trim()),
                Err(e) => println!("XVMM-L1: warning: {e}"),
            }
        }
    }
    let kvm = std::path::Path::new("/dev/kvm").exists();
    println!(
        "XVMM-L1: up kvm={}",
        if kvm { "present" } else { "missing" }
    );
    match std::fs::read_to_string(PLAN)
        .map_err(|e| e.to_string())
        .and_then(|t| plan::parse(&t))
    {
        Ok(steps) => {
            for step in &steps {
                let (mut result, mut seen) = run_step(step);
                for _ in 0..plan::MAX_RETRIES {
                    let Some(why) = seen.retry(&result.outcome) else {
                        break;
                    };
                    println!("{RETRY_PREFIX}{} {why}", step.name);
                    (result, seen) = run_step(step);
                }
                println!("{}", result.to_line());
            }
        }
        Err(e) => println!("XVMM-L1: bad plan {PLAN}: {e}"),
    }
    println!("XVMM-L1: done");
    let err = sys::reboot(libc::RB_AUTOBOOT);
    println!("XVMM-L1: {err}");
    sys::park();
}

/// Echoes each output line of a step behind `prefix`, reports when the
/// marker shows up, and notes when the first byte arrived in `first_byte`.
fn forward(
    prefix: &'static str,
    name: String,
    marker: Option<String>,
    out: impl Read,
    seen: mpsc::Sender<Instant>,
    first_byte: Option<Arc<OnceLock<Instant>>>,
    watch: Arc<Mutex<Seen>>,
) {
    let mut reader = BufReader::new(out);
    if let Some(first) = &first_byte {
        // Returns as soon as anything arrives, a whole line or not (QEMU
        // writes its serial port byte by byte).
        if reader.fill_buf().is_ok_and(|b| !b.is_empty()) {
            let _ = first.set(Instant::now());
        }
    }
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let now = Instant::now();
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if marker.as_deref().is_some_and(|m| line.contains(m)) {
            let _ = seen.send(now);
        }
        watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .line(line, prefix == ERR_PREFIX);
        println!("{prefix}{name}| {line}");
    }
}

/// Runs a step; its result, and what its output showed.
fn run_step(step: &Step) -> (StepResult, Seen) {
    let start = Instant::now();
    let mut result = StepResult {
        name: step.name.clone(),
        outcome: Outcome::SpawnFailed,
        elapsed_ms: 0.0,
        marker_ms: None,
        first_byte_ms: None,
        max_rss_kib: 0,
        guest_rss_kib: None,
        other_rss_kib: None,
    };
    let mut child = match Command::new(&step.argv[0])
        .args(&step.argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            println!("{OUT_PREFIX}{}| spawn {}: {e}", step.name, step.argv[0]);
            return (result, Seen::default());
        }
    };
    let (tx, rx) = mpsc::channel();
    let stdout = child
        .stdout
        .take()
        .map(|o| Box::new(o) as Box<dyn Read + Send>);
    let stderr = child
        .stderr
        .take()
        .map(|e| Box::new(e) as Box<dyn Read + Send>);
    // A VMM's guest console is its stdout: its first byte is the guest's.
    let first_byte = Arc::new(OnceLock::new());
    let watch = Arc::new(Mutex::new(Seen::default()));
    let readers: Vec<_> = [
        (OUT_PREFIX, stdout, Some(first_byte.clone())),
        (ERR_PREFIX, stderr, None),
    ]
    .into_iter()
    .filter_map(|(prefix, out, first)| Some((prefix, out?, first)))
    .map(|(prefix, out, first)| {
        let marker = step.marker_text().map(str::to_string);
        let (name, tx, watch) = (step.name.clone(), tx.clone(), watch.clone());
        thread::spawn(move || forward(prefix, name, marker, out, tx, first, watch))
    })
    .collect();
    drop(tx);
    // Pids stay below PID_MAX_LIMIT (2^22).
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    let (killed_for, status, rusage) = wait_step(step, pid, start, &rx, &mut result);
    result.elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
    for r in readers {
        let _ = r.join();
    }
    result.first_byte_ms = first_byte
        .get()
        .map(|at| at.duration_since(start).as_secs_f64() * 1e3);
    result.max_rss_kib = u64::try_from(rusage.ru_maxrss).unwrap_or(0);
    result.outcome = match (killed_for, status) {
        (Some(why), _) => why,
        (None, Some(s)) if libc::WIFEXITED(s) => Outcome::Exited(libc::WEXITSTATUS(s)),
        (None, Some(s)) if libc::WIFSIGNALED(s) => Outcome::Signalled(libc::WTERMSIG(s)),
        _ => Outcome::SpawnFailed,
    };
    let seen = *watch.lock().unwrap_or_else(|e| e.into_inner());
    (result, seen)
}

/// The files a step's process is given (its kernel and initrd): absolute
/// paths among its arguments.
fn inputs(step: &Step) -> Vec<&str> {
    step.argv[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| a.starts_with('/'))
        .collect()
}

/// Waits for the step's process: notes when its marker appears (and its RSS
/// split then), kills it at the marker or the deadline as the plan says.
/// Returns why it was killed, its wait status and its resource usage.
fn wait_step(
    step: &Step,
    pid: libc::pid_t,
    start: Instant,
    marker_seen: &mpsc::Receiver<Instant>,
    result: &mut StepResult,
) -> (Option<Outcome>, Option<libc::c_int>, libc::rusage) {
    let deadline = start + Duration::from_secs(step.timeout_secs);
    let mut killed_for: Option<Outcome> = None;
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data, zero is a valid value.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child with valid out-pointers.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut rusage) };
        if rc == pid {
            return (killed_for, Some(status), rusage);
        }
        if rc < 0 {
            return (killed_for, None, rusage);
        }
        if result.marker_ms.is_none() {
            if let Ok(at) = marker_seen.try_recv() {
                result.marker_ms = Some(at.duration_since(start).as_secs_f64() * 1e3);
                if let Some(split) = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
                    .ok()
                    .and_then(|s| memory::split_rss(&s, &inputs(step)))
                {
                    result.guest_rss_kib = Some(split.largest_rss_kib);
                    result.other_rss_kib = Some(split.other_rss_kib);
                }
                if step.interrupts() {
                    // Ctrl-C, then an impatient second one during the clean
                    // stop; the process ends on its own.
                    // SAFETY: signalling our own (not yet reaped) child.
                    unsafe { libc::kill(pid, libc::SIGINT) };
                    thread::sleep(Duration::from_millis(100));
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, libc::SIGINT) };
                } else if step.stop_at_marker && killed_for.is_none() {
                    killed_for = Some(Outcome::StoppedAtMarker);
                    // SAFETY: signalling our own (not yet reaped) child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        if killed_for.is_none() && Instant::now() > deadline {
            killed_for = Some(Outcome::TimedOut);
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        thread::sleep(Duration::from_millis(2));
    }
}
