//! `pf-host-miss`: touches of pages whose host backing the VMM dropped
//! (`xvmm --host-fault-delay`), and what a second task on the same CPU got
//! done meanwhile.
//!
//! Each round maps `pages` pages, touches and locks them, finds their
//! guest-physical addresses in /proc/self/pagemap and asks the VMM to drop
//! them; then times one store to each (the user stamp pair around it, as for
//! the other #PF crossings). The guest's page table entry stays present, so
//! the fault is in the host's tables: the guest sees no #PF at all, or, with
//! KVM async page faults on, an async "page not present" #PF that puts the
//! task to sleep until the page-ready interrupt (the kernel hooks count it in
//! `pf_async` but take no stamps). So the crossing is a round trip, with the
//! async flag per sample.
//!
//! The spinner is a SCHED_IDLE thread pinned to the same CPU: it runs only
//! when the measuring task sleeps, so its count during a touch is the work
//! the vCPU did for the guest while the host fetched the page.

use crate::abi::{self, StampPage};
use crate::error::{Error, Result};
use crate::sampling::Region;
use crate::stamp;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use xvmm_guest::channel::ResultsRegion;
use xvmm_guest::drop_pages::{physical_address, DropChannel};
use xvmm_results::async_pf::{AsyncPfGuest, Spinner as SpinnerFigures};
use xvmm_results::channel::DROP_REQUEST_MAX;
use xvmm_results::{Sample, Stats, UNFILLED};

/// Most pages per round (each costs at least the host's delay).
pub const MAX_PAGES: u64 = xvmm_results::xperf_args::MAX_HOST_MISS_PAGES;

/// Why the crossing is a round trip only.
pub const ROUND_TRIP_REASON: &str = "the guest's page table entry stays present: the fault is \
    in the host's (nested) page tables, so the guest takes no #PF to stamp; with async PF on it \
    takes an async 'page not present' #PF, counted in pf_async, not stamped";

/// What the rounds measured.
#[derive(Default)]
pub struct Measured {
    /// Touch round trips (raw ticks), per round.
    pub rounds: Vec<Vec<u64>>,
    pub samples: Vec<Sample>,
    pub guest: AsyncPfGuest,
    pub spinner: Vec<u64>,
    pub spinner_speed: u64,
    /// Whether the spinner ran (pinned, idle class); if not, its counts mean nothing.
    pub spinner_ran: bool,
    /// Why the rounds stopped early (the ones before are kept).
    pub stopped: Option<String>,
}

/// A count the spinner thread advances while it runs.
struct Spinner {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Set once the thread is pinned and idle-class, before it counts.
    running: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    fn start(cpu: u32) -> Result<Spinner> {
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicBool::new(false));
        let (c, s, r) = (Arc::clone(&count), Arc::clone(&stop), Arc::clone(&running));
        let thread = std::thread::Builder::new()
            .name("xperf-spinner".into())
            .spawn(move || {
                // Pinned and idle-class before it counts; if either fails it
                // ends and its count stays 0, which the report shows.
                if crate::affinity::pin(Some(cpu)).is_err() || set_idle_class().is_err() {
                    return;
                }
                r.store(true, Ordering::Release);
                while !s.load(Ordering::Relaxed) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| Error::Sys(format!("cannot start the spinner thread: {e}")))?;
        Ok(Spinner {
            count,
            stop,
            running,
            thread: Some(thread),
        })
    }

    fn read(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn set_idle_class() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: changes this thread's policy; `param` lives for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(Error::last_os("sched_setscheduler(SCHED_IDLE)"));
    }
    Ok(())
}

/// The HYP row of /proc/interrupts: KVM's page-ready (and other hypervisor
/// callback) interrupts, all CPUs. None when the row is absent.
fn page_ready_count() -> Option<u64> {
    hyp_count(&std::fs::read_to_string("/proc/interrupts").ok()?)
}

fn hyp_count(text: &str) -> Option<u64> {
    let row = text.lines().find(|l| l.trim_start().starts_with("HYP:"))?;
    let counts = row.trim_start().strip_prefix("HYP:")?;
    Some(
        counts
            .split_whitespace()
            .map_while(|w| w.parse::<u64>().ok())
            .sum(),
    )
}

fn voluntary_switches() -> u64 {
    // SAFETY: getrusage writes one rusage, which lives for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_nvcsw).unwrap_or(0)
}

/// Spinner iterations per 1000 TSC ticks while the measuring task sleeps.
fn spinner_speed(spinner: &Spinner) -> u64 {
    let (c0, t0) = (spinner.read(), stamp::null_pair().open);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (c1, t1) = (spinner.read(), stamp::null_pair().close);
    (c1 - c0).saturating_mul(1000) / t1.saturating_sub(t0).max(1)
}

/// Maps, touches, locks and locates `pages` pages.
fn prepared_region(pages: usize, pagemap: &std::fs::File) -> Result<(Region, Vec<u64>)> {
    let (region, _) = Region::map(pages)?;
    let mut gpas = Vec::with_capacity(pages);
    for i in 0..pages {
        // SAFETY: page(i) is inside the live writable mapping.
        unsafe { std::ptr::write_volatile(region.page(i), 1) };
    }
    region.lock()?;
    for i in 0..pages {
        gpas.push(physical_address(pagemap, region.page(i) as usize)?);
    }
    Ok((region, gpas))
}

/// One round: drop the pages on the host, then time a store to each.
fn round(
    m: &mut Measured,
    pages: usize,
    chan: &mut DropChannel,
    pagemap: &std::fs::File,
    spinner: &Spinner,
    page: Option<&StampPage>,
) -> Result<()> {
    let (region, gpas) = prepared_region(pages, pagemap)?;
    for chunk in gpas.chunks(DROP_REQUEST_MAX as usize) {
        chan.drop_pages(chunk)
            .map_err(|e| Error::Sys(format!("pf-host-miss: {e}")))?;
    }
    let mut trips = Vec::with_capacity(pages);
    for i in 0..pages {
        let async_before = page.map(|p| p.read_u64(abi::offset::PF_ASYNC));
        let spun_before = spinner.read();
        // SAFETY: page(i) is inside the live writable mapping.
        let s = unsafe { stamp::store_pair(region.page(i)) };
        m.spinner.push(spinner.read() - spun_before);
        if let (Some(p), Some(before)) = (page, async_before) {
            let delta = p.read_u64(abi::offset::PF_ASYNC).wrapping_sub(before);
            m.guest.sample_async.push(u8::from(delta > 0));
            *m.guest.async_pf_received.get_or_insert(0) += delta;
        }
        trips.push(s.close.saturating_sub(s.open));
        m.samples.push(Sample {
            u2k_u: s.open,
            u2k_k: UNFILLED,
            k2u_k: UNFILLED,
            k2u_u: s.close,
            cpu: s.cpu(),
            interrupts: None,
        });
    }
    m.guest.touches += pages as u64;
    m.rounds.push(trips);
    Ok(())
}

/// Every round of pf-host-miss on `cpu`, through the VMM's channel.
pub fn measure(
    pages: u64,
    rounds: u32,
    cpu: u32,
    region: ResultsRegion,
    page: Option<&StampPage>,
) -> Result<Measured> {
    let pages = usize::try_from(pages.min(MAX_PAGES)).unwrap_or(0);
    let mut chan =
        DropChannel::open(region).map_err(|e| Error::Sys(format!("pf-host-miss: {e}")))?;
    let pagemap = std::fs::File::open("/proc/self/pagemap")
        .map_err(|e| Error::Sys(format!("pf-host-miss: /proc/self/pagemap: {e}")))?;
    let spinner = Spinner::start(cpu)?;
    let mut m = Measured {
        spinner_speed: spinner_speed(&spinner),
        ..Default::default()
    };
    let (ready_before, switches_before) = (page_ready_count(), voluntary_switches());
    for _ in 0..rounds.max(1) {
        // A refused request or a lost page ends the rounds; those done stay.
        if let Err(e) = round(&mut m, pages, &mut chan, &pagemap, &spinner, page) {
            m.stopped = Some(e.to_string());
            break;
        }
    }
    m.spinner_ran = spinner.running.load(Ordering::Acquire);
    m.guest.voluntary_switches = voluntary_switches().saturating_sub(switches_before);
    m.guest.page_ready = page_ready_count()
        .zip(ready_before)
        .map(|(after, before)| after.saturating_sub(before));
    Ok(m)
}

impl Measured {
    /// The spinner's figures for the report; None when it never ran.
    pub fn spinner_figures(&self, raw: bool) -> Option<SpinnerFigures> {
        self.spinner_ran.then(|| SpinnerFigures {
            per_touch: Stats::from_samples(&self.spinner),
            iterations_per_kilotick: self.spinner_speed,
            samples: if raw {
                self.spinner.clone()
            } else {
                Vec::new()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spinner_runs_only_while_this_task_sleeps() {
        // SAFETY: no arguments.
        let cpu = u32::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu");
        crate::affinity::pin(Some(cpu)).unwrap();
        let spinner = Spinner::start(cpu).unwrap();
        // Sleeping lets it run (idle class, same CPU)...
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after_sleep = spinner.read();
        assert!(after_sleep > 0, "the spinner never ran while we slept");
        // ...busy, we keep the CPU: an idle-class thread gets (nearly) nothing.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(0);
        }
        let busy = spinner.read() - after_sleep;
        assert!(
            busy < after_sleep,
            "spinner ran {busy} while we were busy, {after_sleep} while we slept"
        );
    }

    #[test]
    fn the_hyp_row_is_summed_over_cpus() {
        let text = "           CPU0       CPU1\n  0:  5  6  IO-APIC timer\n\
                    HYP:         12          3   Hypervisor callback interrupts\n\
                    ERR:          0\n";
        assert_eq!(hyp_count(text), Some(15));
        assert_eq!(hyp_count("  0:  5  6  IO-APIC timer\n"), None);
    }
}
