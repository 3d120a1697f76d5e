//! A TLB shootdown as a program meets it, on any kernel and without root:
//! `mprotect` taking write permission away from a page while another
//! thread of the process runs on another CPU. Before `mprotect` returns the
//! kernel must flush that CPU's TLB: an IPI (in a VM: the sender's ICR
//! write, an exit unless the APIC is virtualised, or KVM's paravirtual
//! flush, and an injection into the receiver) and a wait for its answer.
//! A sample is one `mprotect` to read-only and one back to read-write,
//! timed on the calling CPU's TSC; the same pair while no other thread of
//! the process runs is the local figure, so the difference is what the
//! shootdown adds. Both are taken by one thread pinned to one CPU.

use super::ticks;
use super::Window;
use crate::affinity::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xvmm_host::tsc;
use xvmm_results::{names, Metric};

/// Samples of each kind at most, and how long both may take together.
const MAX_SAMPLES: u64 = 10_000;
const LIMIT: Duration = Duration::from_secs(30);
/// The characterisation group the metrics belong to.
const GROUP: &str = "interrupts";
/// Their unit: a sample is two `mprotect` calls.
const UNIT: &str = "ticks/2 mprotect";

/// The page's name in `/proc/self/maps` (a memfd, so a test can find it).
const PAGE_NAME: &std::ffi::CStr = c"xperf-tlb-shootdown";

/// One page the process's threads share, mapped read-write: a memfd's, or
/// anonymous memory where the kernel has no memfd (a tinyconfig guest);
/// unmapped on drop.
struct Page {
    addr: *mut libc::c_void,
    len: usize,
}

impl Page {
    fn new() -> Result<Page, String> {
        let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: sysconf reads a constant.
        let len = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| "no page size".to_string())?;
        // SAFETY: a valid C string; the fd is closed below.
        let fd = unsafe { libc::memfd_create(PAGE_NAME.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOSYS) => Page::anonymous(len),
                _ => Err(format!("memfd_create: {err}")),
            };
        }
        let size = libc::off_t::try_from(len).unwrap_or(4096);
        // SAFETY: plain calls on the fd just created.
        let addr = unsafe {
            if libc::ftruncate(fd, size) == 0 {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            }
        };
        let mapped = os("mmap of the page");
        // SAFETY: the mapping, if any, keeps the memory; the fd goes.
        unsafe { libc::close(fd) };
        if addr == libc::MAP_FAILED {
            return Err(mapped);
        }
        Ok(Page { addr, len })
    }

    /// `len` bytes of anonymous memory: the threads of one process share
    /// it as they share every mapping, so its TLB entries need the same
    /// shootdown.
    fn anonymous(len: usize) -> Result<Page, String> {
        // SAFETY: a new anonymous mapping, owned by the Page from here on.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(format!(
                "mmap of the page: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Page { addr, len })
    }

    fn protect(&self, prot: libc::c_int) -> Result<(), String> {
        // SAFETY: the range is this page's, mapped until drop.
        if unsafe { libc::mprotect(self.addr, self.len, prot) } == 0 {
            Ok(())
        } else {
            Err(format!("mprotect: {}", std::io::Error::last_os_error()))
        }
    }

    /// Reads the page's first word (a load the TLB serves).
    fn read(&self) -> u64 {
        // SAFETY: mapped and readable in every protection used here.
        unsafe { std::ptr::read_volatile(self.addr.cast::<u64>()) }
    }

    /// Writes the page's first word (a store that needs write permission).
    fn write(&self, value: u64) {
        // SAFETY: mapped; called only while the page is read-write.
        unsafe { std::ptr::write_volatile(self.addr.cast::<u64>(), value) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

// SAFETY: the page is plain shared memory; its users read or write it with
// volatile accesses only.
unsafe impl Sync for Page {}

/// `rounds` samples (read-only, then read-write again; each after a write,
/// so the second thread's CPU and this one hold the page's translation),
/// in ticks of this CPU's TSC; fewer where `deadline` passes.
fn pairs(page: &Page, rounds: usize, deadline: Instant) -> Result<Vec<Window>, String> {
    let mut out = Vec::with_capacity(rounds);
    for i in 0..rounds {
        if Instant::now() > deadline {
            break;
        }
        page.write(i as u64);
        let t0 = tsc::open();
        page.protect(libc::PROT_READ)?;
        page.protect(libc::PROT_READ | libc::PROT_WRITE)?;
        out.push(Window {
            start: t0,
            end: tsc::open(),
        });
    }
    Ok(out)
}

/// The second thread: reads the page on its CPU until told to stop, so
/// that CPU runs this process (and holds the translation) whenever the
/// first thread changes the page's protection.
fn keep_reading(page: &Page, running: &AtomicBool, stop: &AtomicBool, deadline: Instant) {
    running.store(true, Ordering::Release);
    let mut sum = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() <= deadline {
        for _ in 0..64 {
            sum = sum.wrapping_add(page.read());
        }
    }
    std::hint::black_box(sum);
}

/// CPU `cpu`'s count of TLB shootdown IPIs in `interrupts` (the text of
/// `/proc/interrupts`: a header of `CPUn` columns, then the `TLB:` row).
fn tlb_count(interrupts: &str, cpu: u32) -> Option<u64> {
    let mut lines = interrupts.lines();
    let header = lines.next()?;
    let column = header
        .split_whitespace()
        .position(|c| c == format!("CPU{cpu}"))?;
    let row = lines.find(|l| l.trim_start().starts_with("TLB:"))?;
    row.split_whitespace().nth(column + 1)?.parse().ok()
}

/// The same, read now.
fn tlb_shootdowns_received(cpu: u32) -> Option<u64> {
    tlb_count(&interrupts_now()?, cpu)
}

fn interrupts_now() -> Option<String> {
    std::fs::read_to_string("/proc/interrupts").ok()
}

/// The TLB shootdowns `cpu` has taken since `before` (`/proc/interrupts`
/// as it was read then).
fn received_since(before: Option<&str>, cpu: u32) -> Option<u64> {
    let then = tlb_count(before?, cpu)?;
    Some(tlb_shootdowns_received(cpu)?.saturating_sub(then))
}

/// What [`tlb_shootdown`] measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shootdowns {
    /// The CPU the second thread ran on.
    pub other: u32,
    /// Samples while the second thread ran there.
    pub remote: Vec<Window>,
    /// Samples before it started, the process running on one CPU.
    pub local: Vec<Window>,
    /// TLB shootdown IPIs the other CPU took while the remote samples ran
    /// (`/proc/interrupts`, any process's), where the kernel counts them.
    pub received: Option<u64>,
}

/// `rounds` samples on CPU `a` with no other thread running, then `rounds`
/// while a thread on the first of `others` this process may use reads the
/// page, within `limit`. Both threads are new; the caller's CPU affinity
/// is left as it was.
pub fn tlb_shootdown(
    a: u32,
    others: &[u32],
    rounds: usize,
    limit: Duration,
) -> Result<Shootdowns, String> {
    let page = Page::new()?;
    let deadline = Instant::now() + limit;
    let (running, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let sampling = AtomicBool::new(false);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            pin(Some(a)).map_err(|e| e.to_string())?;
            let local = pairs(&page, rounds, deadline)?;
            let reader = s.spawn(|| {
                let Some(b) = others.iter().copied().find(|&b| pin(Some(b)).is_ok()) else {
                    return Err(format!("no CPU of {others:?} allows this process"));
                };
                // Every remote sample must find this thread running.
                if sampling.load(Ordering::Acquire) {
                    return Err("the reading thread started after the samples".into());
                }
                keep_reading(&page, &running, &stop, deadline);
                Ok(b)
            });
            while !running.load(Ordering::Acquire) && !reader.is_finished() {
                std::hint::spin_loop();
            }
            sampling.store(true, Ordering::Release);
            // One read, whichever CPU the reader took.
            let before = interrupts_now();
            let remote = pairs(&page, rounds, deadline);
            stop.store(true, Ordering::Relaxed);
            let other = reader
                .join()
                .unwrap_or_else(|_| Err("the reading thread panicked".into()))?;
            let received = received_since(before.as_deref(), other);
            Ok::<_, String>(Shootdowns {
                other,
                remote: remote?,
                local,
                received,
            })
        });
        let out = first
            .join()
            .unwrap_or_else(|_| Err("the first thread panicked".into()));
        stop.store(true, Ordering::Relaxed);
        out
    })
    .and_then(|m| {
        let short = m.local.len().min(m.remote.len());
        if short < rounds {
            return Err(format!(
                "only {short} of {rounds} samples on cpu{a} within {} s",
                limit.as_secs()
            ));
        }
        Ok(m)
    })
}

/// The `interrupts` group's shootdown metrics for `samples` samples on
/// `cpu` against the first of `others` this process may use: the pair with
/// the other CPU running a thread of the process, and alone; both missing,
/// with the reason, where there is no other CPU or the measurement failed.
pub fn metrics(samples: u64, cpu: u32, others: &[u32]) -> Vec<Metric> {
    let missing = |why: String| {
        vec![
            Metric::missing(GROUP, names::MPROTECT_SHOOTDOWN, why.clone()),
            Metric::missing(GROUP, names::MPROTECT_LOCAL, why),
        ]
    };
    if others.is_empty() {
        return missing(format!("only cpu{cpu} is online: no other CPU to flush"));
    }
    let rounds = xvmm_results::num::usize_from(samples.clamp(1, MAX_SAMPLES));
    match tlb_shootdown(cpu, others, rounds, LIMIT) {
        Ok(m) => vec![
            Metric::from_samples(GROUP, names::MPROTECT_SHOOTDOWN, UNIT, &ticks(&m.remote))
                .with_value(format!(
                    "mprotect of a page read-only and back on cpu{cpu} while a thread of this \
                     process reads it on cpu{}: each call flushes that CPU's TLB (an IPI and its \
                     answer), timed on cpu{cpu}'s TSC; cpu{} took {} TLB shootdowns meanwhile \
                     ({} calls; fewer where other work held it)",
                    m.other,
                    m.other,
                    m.received
                        .map_or("an uncounted number of".to_string(), |n| n.to_string()),
                    2 * m.remote.len()
                )),
            Metric::from_samples(GROUP, names::MPROTECT_LOCAL, UNIT, &ticks(&m.local)).with_value(
                format!(
                    "the same pair on cpu{cpu} with no other thread of this process running: no \
                 other TLB to flush"
                ),
            ),
        ],
        Err(why) => missing(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex, MutexGuard};

    /// Tests that map the named page take turns: each checks that its own
    /// page is gone from `/proc/self/maps`, which another's would defeat.
    fn maps_to_myself() -> MutexGuard<'static, ()> {
        static MAPS: Mutex<()> = Mutex::new(());
        MAPS.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn online() -> Vec<u32> {
        crate::affinity::online_cpus()
    }

    #[test]
    fn an_anonymous_page_takes_the_same_protections() {
        let page = Page::anonymous(4096).unwrap();
        page.write(7);
        page.protect(libc::PROT_READ).unwrap();
        assert_eq!(page.read(), 7);
        page.protect(libc::PROT_READ | libc::PROT_WRITE).unwrap();
        page.write(8);
        assert_eq!(page.read(), 8);
        assert!(Page::anonymous(0).is_err(), "mmap refuses an empty mapping");
    }

    fn maps_hold_the_page() -> bool {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .contains("xperf-tlb-shootdown")
    }

    /// With another CPU, both sample sets are full, the other thread ran
    /// on that CPU, a sample costs at least half as much again when that
    /// thread runs (the shootdown's IPI) as when it does not, and the page
    /// is unmapped afterwards. Measured in a forked child: the test harness's other
    /// threads, running on the other CPU in this process, would make the
    /// local samples shootdowns too (one run: 51064 against 50674 ticks).
    /// While they run the reader shares the other CPU with them, and where
    /// it is not on it no IPI goes there (4680 against 4706 ticks once),
    /// so the child tries again, up to 10 times 300 ms apart, until the
    /// other tests have ended.
    #[test]
    fn a_shootdown_costs_more_than_the_same_mprotect_alone() {
        let _maps = maps_to_myself();
        let cpus = online();
        let (a, others) = (cpus[0], cpus[1..].to_vec());
        if others.is_empty() {
            eprintln!("only one CPU online: no shootdown to measure");
            return;
        }
        let once = move || -> Result<(), String> {
            let m = tlb_shootdown(a, &others, 400, Duration::from_secs(20))?;
            if (m.local.len(), m.remote.len()) != (400, 400) || !others.contains(&m.other) {
                return Err(format!("{m:?}"));
            }
            let median = |w: &[Window]| {
                let mut v = ticks(w);
                v.sort_unstable();
                v[v.len() / 2]
            };
            let (local, remote) = (median(&m.local), median(&m.remote));
            eprintln!(
                "local {local} ticks, remote {remote} ticks (cpu{a} -> cpu{})",
                m.other
            );
            // An IPI and its answer cost more than the calls themselves
            // (bare metal: microseconds; PVM: 49296 against 4550 ticks).
            if local == 0 || remote * 2 < local * 3 {
                return Err(format!("local {local}, remote {remote}"));
            }
            if maps_hold_the_page() {
                return Err("the page is still mapped".into());
            }
            // Each of the 800 calls flushed the other CPU: its own count
            // says so too, where the kernel keeps one.
            if m.received.is_none_or(|n| n < 400) {
                return Err(format!(
                    "cpu{} took only {:?} shootdowns",
                    m.other, m.received
                ));
            }
            Ok(())
        };
        let check = move || {
            let mut last = Ok(());
            for _ in 0..10 {
                last = once();
                if last.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            last
        };
        // SAFETY: the child runs `check` (its own threads, glibc's
        // fork-safe allocator) and leaves by _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let code = match check() {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            };
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's check failed (status {status:#x}; its stderr above)"
        );
    }

    /// The count comes from the CPU's own column of the TLB row, and a
    /// CPU or row that is not there gives none.
    #[test]
    fn tlb_shootdowns_are_read_from_the_cpus_column() {
        let text = "           CPU0       CPU2       \n\
                    \x20 0:         44          0   IO-APIC   2-edge      timer\n\
                    TLB:   10103632   10387638   TLB shootdowns\n";
        assert_eq!(tlb_count(text, 0), Some(10_103_632));
        assert_eq!(tlb_count(text, 2), Some(10_387_638));
        assert_eq!(tlb_count(text, 1), None);
        assert_eq!(tlb_count("           CPU0\n  0: 1 timer\n", 0), None);
        assert_eq!(tlb_count("", 0), None);
        // This machine's own file: x86 Linux prints the row on every SMP
        // kernel.
        let n = tlb_shootdowns_received(online()[0]).expect("a TLB row for the first CPU");
        assert!(n > 0 || online().len() == 1, "{n}");
    }

    /// A page whose protection changes as asked: read-only refuses a write
    /// (seen as a write fault in a child), read-write takes it.
    #[test]
    fn the_page_is_mapped_by_name_and_takes_its_protections() {
        let _maps = maps_to_myself();
        let page = Page::new().unwrap();
        assert!(maps_hold_the_page());
        page.write(7);
        assert_eq!(page.read(), 7);
        page.protect(libc::PROT_READ).unwrap();
        assert_eq!(page.read(), 7);
        // SAFETY: the child only writes the page and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            page.write(8);
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFSIGNALED(status), "status {status:#x}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
        page.protect(libc::PROT_READ | libc::PROT_WRITE).unwrap();
        page.write(9);
        assert_eq!(page.read(), 9);
        drop(page);
        assert!(!maps_hold_the_page());
    }

    #[test]
    fn no_usable_other_cpu_and_no_time_are_errors() {
        let _maps = maps_to_myself();
        let cpus = online();
        let e = tlb_shootdown(cpus[0], &[100_000], 10, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("no CPU of [100000]"), "{e}");
        let e = tlb_shootdown(cpus[0], &cpus, 10, Duration::ZERO).unwrap_err();
        assert!(e.starts_with("only 0 of 10 samples on cpu"), "{e}");
        let e = tlb_shootdown(100_000, &cpus, 10, Duration::from_secs(5)).unwrap_err();
        assert!(!e.is_empty());
    }

    /// Both metrics, in the interrupts group, per two calls; both missing
    /// with the reason where no other CPU is online or usable.
    #[test]
    fn the_metrics_are_the_pair_with_and_without_the_other_cpu() {
        let _maps = maps_to_myself();
        let cpus = online();
        let alone = metrics(10, cpus[0], &[]);
        assert_eq!(alone.len(), 2);
        for m in &alone {
            assert_eq!(m.group, "interrupts");
            assert!(m.stats.is_none());
            assert!(m
                .reason
                .as_deref()
                .unwrap()
                .contains("no other CPU to flush"));
        }
        let unusable = metrics(10, cpus[0], &[100_000]);
        assert!(unusable[0].reason.as_deref().unwrap().contains("no CPU of"));
        if cpus.len() < 2 {
            return;
        }
        let m = metrics(50, cpus[0], &cpus[1..]);
        let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, [names::MPROTECT_SHOOTDOWN, names::MPROTECT_LOCAL]);
        for x in &m {
            assert_eq!((x.group.as_str(), x.unit.as_str()), ("interrupts", UNIT));
            assert_eq!(x.stats.as_ref().unwrap().count, 50);
        }
        assert!(m[0].value.as_deref().unwrap().contains("reads it on cpu"));
        // At most MAX_SAMPLES, at least one.
        assert_eq!(
            metrics(0, cpus[0], &cpus[1..])[1]
                .stats
                .as_ref()
                .unwrap()
                .count,
            1
        );
    }

    /// The reader keeps going until told to stop, and stops at the
    /// deadline without being told.
    #[test]
    fn the_reader_runs_until_stopped_or_the_deadline() {
        let _maps = maps_to_myself();
        let page = Page::new().unwrap();
        let (running, stop) = (AtomicBool::new(false), AtomicBool::new(false));
        let start = Instant::now();
        keep_reading(&page, &running, &stop, start + Duration::from_millis(50));
        assert!(running.load(Ordering::Acquire));
        assert!(start.elapsed() >= Duration::from_millis(50));
        let stopped = AtomicBool::new(true);
        let start = Instant::now();
        keep_reading(&page, &running, &stopped, start + Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(5));
        let far = Instant::now() + Duration::from_secs(30);
        let samples = pairs(&page, 3, far).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(page.read(), 2, "each sample writes its index first");
    }
}
