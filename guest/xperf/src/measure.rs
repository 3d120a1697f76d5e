//! The measurement: pinning, hook detection, warm-up, null calibration, and
//! the three crossings (first-touch #PF, #PF after MADV_DONTNEED, getppid),
//! split into u2k/k2u when the kernel has the hooks, round trips otherwise.

use crate::abi::{self, Hooks, Slots, StampPage};
use crate::error::{Error, Result};
use crate::host;
use crate::stamp;
use xvmm_results::{Crossing, Environment, Machine, Method, Report, Sample, Stats, UNFILLED};

pub const PF_FIRST_TOUCH: &str = "pf-first-touch";
pub const PF_REFAULT: &str = "pf-refault";
pub const GETPPID: &str = "getppid";

/// What to measure and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub samples: u64,
    pub warmup: u64,
    pub null_samples: u64,
    /// CPU to pin to; None pins to the CPU xperf is running on.
    pub cpu: Option<u32>,
    /// Keep every sample's stamps in the report.
    pub raw: bool,
    /// Running in a guest whose VMM announced a results channel.
    pub vmm_channel: bool,
}

/// Whether each sample can be split into u2k/k2u.
enum Mode {
    Split(StampPage),
    RoundTrip(String),
}

/// How xperf judged one sample before the shared validation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Goes to `Crossing::from_samples` (which still rejects unfilled and
    /// out-of-order stamps).
    Keep,
    /// A KVM async page fault happened during the sample: it is not a fault
    /// of ours and its timing is not a crossing.
    AsyncPf,
    /// The kernel's sequence counter did not advance by exactly one, so the
    /// slots may hold another crossing's stamps.
    SeqMismatch,
}

/// One sample as taken, with xperf's own verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub sample: Sample,
    pub verdict: Verdict,
}

const UNTAKEN: Taken = Taken {
    sample: Sample {
        u2k_u: UNFILLED,
        u2k_k: UNFILLED,
        k2u_k: UNFILLED,
        k2u_u: UNFILLED,
    },
    verdict: Verdict::Keep,
};

/// Judges a sample from the counters read before and after it.
pub fn classify(seq_delta: u64, async_delta: u64, sample: &Sample) -> Verdict {
    let unfilled = sample.u2k_k == UNFILLED || sample.k2u_k == UNFILLED;
    if async_delta != 0 {
        Verdict::AsyncPf
    } else if seq_delta == 1 || (seq_delta == 0 && unfilled) {
        // seq 0 with a sentinel left: the shared validation counts it unfilled.
        Verdict::Keep
    } else {
        Verdict::SeqMismatch
    }
}

/// Builds a crossing with the u2k/k2u split from samples taken with hooks.
pub fn split_crossing(
    name: &str,
    requested: u64,
    taken: &[Taken],
    null_ticks: u64,
    keep_raw: bool,
) -> Crossing {
    let kept: Vec<Sample> = taken
        .iter()
        .filter(|t| t.verdict == Verdict::Keep)
        .map(|t| t.sample)
        .collect();
    let mut crossing = Crossing::from_samples(name, requested, &kept, null_ticks, false);
    let count = |v: Verdict| taken.iter().filter(|t| t.verdict == v).count() as u64;
    let (async_pf, seq) = (count(Verdict::AsyncPf), count(Verdict::SeqMismatch));
    crossing.samples_other_rejected = async_pf + seq;
    let mut reasons = Vec::new();
    if async_pf > 0 {
        reasons.push(format!(
            "{async_pf} KVM async page fault(s) (pf_async advanced)"
        ));
    }
    if seq > 0 {
        reasons.push(format!(
            "{seq} sample(s) where the kernel's sequence counter did not advance by exactly one"
        ));
    }
    if !reasons.is_empty() {
        crossing.other_rejected_reason = Some(reasons.join("; "));
    }
    if keep_raw {
        crossing.samples = Some(taken.iter().map(|t| t.sample).collect());
    }
    crossing
}

/// Builds a round-trip-only crossing from user-side stamps.
pub fn round_trip_crossing(
    name: &str,
    requested: u64,
    taken: &[Taken],
    null_ticks: u64,
    keep_raw: bool,
    reason: &str,
) -> Crossing {
    let trips: Vec<u64> = taken
        .iter()
        .map(|t| t.sample.k2u_u.saturating_sub(t.sample.u2k_u))
        .collect();
    let mut crossing =
        Crossing::from_round_trips(name, requested, &trips, null_ticks, reason.to_string());
    if keep_raw {
        crossing.samples = Some(taken.iter().map(|t| t.sample).collect());
    }
    crossing
}

/// Pins the calling thread to `cpu` (default: the current CPU); returns it.
pub(crate) fn pin(cpu: Option<u32>) -> Result<u32> {
    let cpu = match cpu {
        Some(c) => c,
        None => {
            // SAFETY: no arguments.
            let c = unsafe { libc::sched_getcpu() };
            u32::try_from(c).map_err(|_| Error::last_os("sched_getcpu"))?
        }
    };
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(Error::Usage(format!("--cpu {cpu} is beyond CPU_SETSIZE")));
    }
    // SAFETY: a zeroed cpu_set_t is empty; cpu is below CPU_SETSIZE.
    let ret = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if ret != 0 {
        return Err(Error::last_os(&format!("cannot pin to CPU {cpu}")));
    }
    Ok(cpu)
}

/// An anonymous region whose pages are faulted in one at a time.
pub(crate) struct Region {
    base: *mut u8,
    len: usize,
}

impl Region {
    /// Maps `pages` pages without populating them and opts out of THP, so
    /// every first touch is one 4 KiB fault. Returns whether the THP opt-out
    /// was accepted.
    pub(crate) fn map(pages: usize) -> Result<(Region, bool)> {
        let len = pages
            .checked_mul(abi::PAGE_SIZE)
            .ok_or_else(|| Error::Usage("region size overflows".into()))?
            .max(abi::PAGE_SIZE);
        // SAFETY: fresh private anonymous mapping, checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os(&format!("mmap of {pages} pages")));
        }
        // SAFETY: advice on our own mapping.
        let no_thp = unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) } == 0;
        Ok((
            Region {
                base: base.cast(),
                len,
            },
            no_thp,
        ))
    }

    pub(crate) fn page(&self, index: usize) -> *mut u8 {
        self.base.wrapping_add((index * abi::PAGE_SIZE) % self.len)
    }

    /// Drops every page, so the next touch of each faults again.
    pub(crate) fn discard(&self) -> Result<()> {
        // SAFETY: advice on our own mapping.
        if unsafe { libc::madvise(self.base.cast(), self.len, libc::MADV_DONTNEED) } != 0 {
            return Err(Error::last_os("madvise(MADV_DONTNEED)"));
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping we created.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Takes `n` samples of one crossing. In split mode the kernel slots are armed
/// with the sentinel before and read after each sample, with the counters.
fn take(
    mode: &mut Mode,
    slots: Slots,
    n: usize,
    ret_path_iret: &mut u64,
    mut cross: impl FnMut(usize) -> (u64, u64),
) -> Vec<Taken> {
    // Filled with a non-zero value so every page of the array is written (and
    // faulted in) now, never by a store inside the measured loop.
    let mut taken = vec![UNTAKEN; n];
    match mode {
        Mode::RoundTrip(_) => {
            for (i, slot) in taken.iter_mut().enumerate() {
                let (open, close) = cross(i);
                slot.sample.u2k_u = open;
                slot.sample.k2u_u = close;
            }
        }
        Mode::Split(page) => {
            for (i, slot) in taken.iter_mut().enumerate() {
                page.arm(slots);
                let seq0 = page.read_u64(slots.seq);
                let async0 = page.read_u64(abi::offset::PF_ASYNC);
                let (open, close) = cross(i);
                let sample = Sample {
                    u2k_u: open,
                    u2k_k: page.read_u64(slots.u2k_k),
                    k2u_k: page.read_u64(slots.k2u_k),
                    k2u_u: close,
                };
                let seq_delta = page.read_u64(slots.seq).wrapping_sub(seq0);
                let async_delta = page.read_u64(abi::offset::PF_ASYNC).wrapping_sub(async0);
                let verdict = classify(seq_delta, async_delta, &sample);
                // The return path is only this sample's when it was delivered.
                if slots == abi::SYSCALL_SLOTS
                    && verdict == Verdict::Keep
                    && seq_delta == 1
                    && page.read_u32(abi::offset::SC_RET_PATH) == abi::RET_PATH_IRET
                {
                    *ret_path_iret += 1;
                }
                *slot = Taken { sample, verdict };
            }
        }
    }
    taken
}

/// Decides between split and round-trip mode; the reason says why not split.
fn detect(notes: &mut Vec<String>) -> Mode {
    match abi::query() {
        Hooks::Absent => Mode::RoundTrip(
            "kernel has no xperf hooks (prctl PR_XPERF answered EINVAL): round trips only".into(),
        ),
        Hooks::Failed(errno) => Mode::RoundTrip(format!(
            "prctl(PR_XPERF, QUERY) failed: {}: round trips only",
            std::io::Error::from_raw_os_error(errno)
        )),
        Hooks::Present(v) if v != abi::XPERF_ABI_VERSION => Mode::RoundTrip(format!(
            "kernel hooks speak ABI version {v}, this xperf speaks {}: round trips only",
            abi::XPERF_ABI_VERSION
        )),
        Hooks::Present(_) => match StampPage::register() {
            Err(e) => Mode::RoundTrip(format!("{e}: round trips only")),
            Ok(page) => {
                let flags = page.flags();
                notes.push(format!(
                    "xperf hooks: ABI {}, page flags {flags:#x} (KPTI {}, FRED {}, KVM guest {})",
                    abi::XPERF_ABI_VERSION,
                    flags & abi::FLAG_KPTI != 0,
                    flags & abi::FLAG_FRED != 0,
                    flags & abi::FLAG_KVM_GUEST != 0
                ));
                if flags & abi::FLAG_FRED != 0 {
                    Mode::RoundTrip(
                        "FRED is active and the hooks take no stamps under FRED: round trips only"
                            .into(),
                    )
                } else {
                    Mode::Split(page)
                }
            }
        },
    }
}

/// Refuses a run whose fault regions (every page stays resident until it is
/// dropped) would not fit in the memory available: in a small guest the OOM
/// killer would otherwise end xperf, or as PID 1 panic the kernel.
pub(crate) fn check_memory(pages: u64) -> Result<()> {
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
        return Ok(());
    };
    let Some(available) = xvmm_results::machine::meminfo_bytes(&meminfo, "MemAvailable") else {
        return Ok(());
    };
    let needed = pages.saturating_mul(abi::PAGE_SIZE as u64);
    // Keep half of what is available for everything else.
    if needed > available / 2 {
        return Err(Error::Usage(format!(
            "{pages} fault pages need {} MiB, more than half of the {} MiB available: use fewer --samples/--warmup",
            needed >> 20,
            available >> 20
        )));
    }
    Ok(())
}

pub(crate) fn usize_of(n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::Usage(format!("{n} does not fit in usize")))
}

/// What the run found out before measuring: where it runs and how.
struct Setup {
    cpu: u32,
    machine: Machine,
    host_facts: xvmm_results::HostFacts,
    environment: Environment,
    mode: Mode,
    notes: Vec<String>,
}

/// Pins, probes the machine (CPUID happens here, before any measured region)
/// and decides between split and round-trip mode.
fn set_up(config: &Config) -> Result<Setup> {
    check_memory(config.samples.saturating_add(config.warmup))?;
    let cpu = pin(config.cpu)?;
    let machine = Machine::probe();
    let mut host_facts = host::host_facts(&machine);
    let environment = host::environment(&machine, config.vmm_channel);
    let mut notes = host::notes(&machine);
    if environment == Environment::BareMetal && !machine.hypervisor_signature.is_empty() {
        notes.push(format!(
            "running under hypervisor {:?}, not a KVM guest with xvmm's results channel: reported as bare metal",
            machine.hypervisor_signature
        ));
    }
    let mode = detect(&mut notes);
    if let Mode::Split(page) = &mode {
        host_facts.kpti = Some(page.flags() & abi::FLAG_KPTI != 0);
        notes.push("KPTI state from the stamp page's flag".into());
    } else if host_facts.kpti.is_some() {
        notes.push("KPTI state from /sys/devices/system/cpu/vulnerabilities/meltdown".into());
    }
    notes.push(format!(
        "between the opening stamp and the crossing: {}",
        stamp::TAIL_AFTER_OPEN
    ));
    Ok(Setup {
        cpu,
        machine,
        host_facts,
        environment,
        mode,
        notes,
    })
}

/// The same stamps with nothing between, after `warmup` unrecorded pairs.
pub(crate) fn null_overhead(warmup: usize, samples: usize) -> Stats {
    for _ in 0..warmup {
        std::hint::black_box(stamp::null_pair());
    }
    let mut null = vec![u64::MAX; samples];
    for slot in null.iter_mut() {
        let (open, close) = stamp::null_pair();
        *slot = close.saturating_sub(open);
    }
    Stats::from_samples(&null)
}

/// The samples of the three crossings, and how often getppid left by IRET.
struct Crossings {
    getppid: Vec<Taken>,
    getppid_iret: u64,
    first_touch: Vec<Taken>,
    /// Err: why the refault crossing could not be taken.
    refault: std::result::Result<Vec<Taken>, String>,
}

fn take_crossings(mode: &mut Mode, warmup: usize, samples: usize) -> Result<(Crossings, bool)> {
    let (mut iret, mut ignored) = (0u64, 0u64);
    take(mode, abi::SYSCALL_SLOTS, warmup, &mut ignored, |_| {
        stamp::getppid_pair()
    });
    let getppid = take(mode, abi::SYSCALL_SLOTS, samples, &mut iret, |_| {
        stamp::getppid_pair()
    });
    // #PF: a small warm-up region first, then the measured one, both never
    // touched before; then both dropped and touched again.
    let (warm_region, _) = Region::map(warmup)?;
    let (region, no_thp) = Region::map(samples)?;
    // SAFETY (both closures): page(i) is inside a live writable mapping.
    let warm_touch = |i: usize| unsafe { stamp::store_pair(warm_region.page(i)) };
    let touch = |i: usize| unsafe { stamp::store_pair(region.page(i)) };
    take(mode, abi::PF_SLOTS, warmup, &mut ignored, warm_touch);
    let first_touch = take(mode, abi::PF_SLOTS, samples, &mut ignored, touch);
    // A kernel without CONFIG_ADVISE_SYSCALLS has no madvise: the refault
    // crossing is then reported unsupported, the others still measured.
    let refault = match warm_region.discard().and_then(|()| region.discard()) {
        Ok(()) => {
            take(mode, abi::PF_SLOTS, warmup, &mut ignored, warm_touch);
            Ok(take(mode, abi::PF_SLOTS, samples, &mut ignored, touch))
        }
        Err(e) => Err(e.to_string()),
    };
    let crossings = Crossings {
        getppid,
        getppid_iret: iret,
        first_touch,
        refault,
    };
    Ok((crossings, no_thp))
}

/// Runs the whole measurement and returns the report.
pub fn run(config: &Config) -> Result<Report> {
    let samples = usize_of(config.samples)?;
    let warmup = usize_of(config.warmup)?;
    let null_samples = usize_of(config.null_samples)?;
    let mut setup = set_up(config)?;
    let null_overhead = null_overhead(warmup, null_samples);
    let null_ticks = null_overhead.median;
    let (taken, no_thp) = take_crossings(&mut setup.mode, warmup, samples)?;
    if !no_thp && !setup.machine.thp.is_empty() {
        setup
            .notes
            .push("madvise(MADV_NOHUGEPAGE) was refused: huge pages may serve some faults".into());
    }
    let mut method = Method::standard(config.warmup, config.samples);
    method.pinned_cpu = Some(setup.cpu);
    let mut report = Report::new(
        format!("xperf {}", env!("CARGO_PKG_VERSION")),
        setup.environment,
        setup.host_facts,
        method,
    );
    report.machine = Some(setup.machine);
    report.null_overhead = null_overhead;
    let runs = [
        (PF_FIRST_TOUCH, Ok(&taken.first_touch)),
        (PF_REFAULT, taken.refault.as_ref()),
        (GETPPID, Ok(&taken.getppid)),
    ];
    for (name, samples_taken) in runs {
        report.crossings.push(match (samples_taken, &setup.mode) {
            (Err(why), _) => Crossing::unsupported(name, config.samples, why.clone()),
            (Ok(t), Mode::Split(_)) => {
                split_crossing(name, config.samples, t, null_ticks, config.raw)
            }
            (Ok(t), Mode::RoundTrip(reason)) => {
                round_trip_crossing(name, config.samples, t, null_ticks, config.raw, reason)
            }
        });
    }
    match &setup.mode {
        Mode::Split(_) => setup.notes.push(format!(
            "getppid returned through IRET in {} of {} samples (SYSRET otherwise)",
            taken.getppid_iret, config.samples
        )),
        Mode::RoundTrip(reason) => setup.notes.insert(0, reason.clone()),
    }
    report.notes = setup.notes;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::Status;

    fn s(a: u64, b: u64, c: u64, d: u64) -> Sample {
        Sample {
            u2k_u: a,
            u2k_k: b,
            k2u_k: c,
            k2u_u: d,
        }
    }

    #[test]
    fn classification_prefers_async_then_sequence() {
        let good = s(1, 2, 3, 4);
        let unfilled = s(1, UNFILLED, UNFILLED, 4);
        assert_eq!(classify(1, 0, &good), Verdict::Keep);
        assert_eq!(classify(1, 1, &good), Verdict::AsyncPf);
        assert_eq!(classify(0, 1, &unfilled), Verdict::AsyncPf);
        assert_eq!(classify(0, 0, &unfilled), Verdict::Keep);
        assert_eq!(classify(2, 0, &good), Verdict::SeqMismatch);
        assert_eq!(classify(0, 0, &good), Verdict::SeqMismatch);
    }

    fn taken(sample: Sample, verdict: Verdict) -> Taken {
        Taken { sample, verdict }
    }

    #[test]
    fn split_crossing_counts_every_sample_once() {
        let all = [
            taken(s(100, 400, 900, 1200), Verdict::Keep),
            taken(s(100, 450, 950, 1300), Verdict::Keep),
            taken(s(100, UNFILLED, UNFILLED, 1200), Verdict::Keep),
            taken(s(100, 90, 900, 1200), Verdict::Keep),
            taken(s(100, 400, 900, 99_000), Verdict::AsyncPf),
            taken(s(100, 400, 900, 1200), Verdict::SeqMismatch),
        ];
        let c = split_crossing(PF_FIRST_TOUCH, 6, &all, 50, true);
        assert_eq!(c.status, Status::Measured);
        assert_eq!(c.samples_valid, 2);
        assert_eq!(c.samples_unfilled, 1);
        assert_eq!(c.samples_out_of_order, 1);
        assert_eq!(c.samples_other_rejected, 2);
        let reason = c.other_rejected_reason.clone().unwrap();
        assert!(reason.contains("1 KVM async page fault"), "{reason}");
        assert!(reason.contains("sequence counter"), "{reason}");
        // The async sample's huge round trip must not reach the statistics.
        assert_eq!(c.round_trip.as_ref().unwrap().raw.max, 1200);
        assert_eq!(c.u2k.as_ref().unwrap().corrected.min, 250);
        assert_eq!(c.samples.as_ref().map(Vec::len), Some(6));
    }

    #[test]
    fn round_trip_mode_states_the_reason_and_subtracts_the_null() {
        let all = [
            taken(s(1000, UNFILLED, UNFILLED, 1500), Verdict::Keep),
            taken(s(2000, UNFILLED, UNFILLED, 2600), Verdict::Keep),
            taken(s(3000, UNFILLED, UNFILLED, 3700), Verdict::Keep),
        ];
        let c = round_trip_crossing(GETPPID, 3, &all, 70, false, "no hooks");
        assert_eq!(
            c.status,
            Status::RoundTripOnly {
                reason: "no hooks".into()
            }
        );
        assert_eq!(c.samples_valid, 3);
        assert!(c.u2k.is_none() && c.k2u.is_none() && c.samples.is_none());
        let rt = c.round_trip.unwrap();
        assert_eq!((rt.raw.min, rt.raw.median, rt.raw.max), (500, 600, 700));
        assert_eq!(rt.corrected.median, 530);
    }

    #[test]
    fn split_sampling_arms_reads_and_judges_each_sample() {
        let page = StampPage::unregistered().unwrap();
        let base = page.base_ptr();
        // The test plays the kernel: it writes the page as the hooks would.
        let write = |off: usize, v: u64| unsafe { base.add(off).cast::<u64>().write_volatile(v) };
        let read = |off: usize| unsafe { base.add(off).cast::<u64>().read_volatile() };
        let mut mode = Mode::Split(page);
        let mut iret = 0;
        let taken = take(&mut mode, abi::SYSCALL_SLOTS, 5, &mut iret, |i| {
            let t = 1000 * i as u64;
            match i {
                // Delivered normally; sample 1 returned through IRET.
                0 | 1 => {
                    write(abi::offset::SC_U2K_K, t + 20);
                    write(abi::offset::SC_K2U_K, t + 30);
                    write(abi::offset::SC_SEQ, read(abi::offset::SC_SEQ) + 1);
                    let path = if i == 1 { abi::RET_PATH_IRET } else { 0 };
                    unsafe {
                        base.add(abi::offset::SC_RET_PATH)
                            .cast::<u32>()
                            .write_volatile(path)
                    };
                }
                // An async page fault arrived during the sample.
                2 => write(abi::offset::PF_ASYNC, read(abi::offset::PF_ASYNC) + 1),
                // Nothing delivered: the slots must still hold the sentinel.
                3 => {}
                // Two deliveries: the stamps may not be ours.
                _ => {
                    write(abi::offset::SC_U2K_K, t + 20);
                    write(abi::offset::SC_K2U_K, t + 30);
                    write(abi::offset::SC_SEQ, read(abi::offset::SC_SEQ) + 2);
                }
            }
            (t + 10, t + 40)
        });
        let verdicts: Vec<Verdict> = taken.iter().map(|t| t.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Keep,
                Verdict::Keep,
                Verdict::AsyncPf,
                Verdict::Keep,
                Verdict::SeqMismatch
            ]
        );
        assert_eq!(taken[1].sample, s(1010, 1020, 1030, 1040));
        assert_eq!(taken[3].sample, s(3010, UNFILLED, UNFILLED, 3040));
        assert_eq!(iret, 1);
        let c = split_crossing(GETPPID, 5, &taken, 5, false);
        assert_eq!(
            (
                c.samples_valid,
                c.samples_unfilled,
                c.samples_other_rejected
            ),
            (2, 1, 2)
        );
        assert_eq!(c.u2k.unwrap().raw.median, 10);
    }

    #[test]
    fn small_native_run_has_every_crossing_and_count() {
        let config = Config {
            samples: 64,
            warmup: 8,
            null_samples: 256,
            cpu: None,
            raw: true,
            vmm_channel: false,
        };
        let report = run(&config).unwrap();
        assert_eq!(report.environment, Environment::BareMetal);
        let names: Vec<&str> = report.crossings.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [PF_FIRST_TOUCH, PF_REFAULT, GETPPID]);
        for c in &report.crossings {
            let accounted = c.samples_valid
                + c.samples_unfilled
                + c.samples_out_of_order
                + c.samples_other_rejected;
            assert_eq!(accounted, 64, "{}", c.name);
            assert_eq!(c.samples.as_ref().map(Vec::len), Some(64));
        }
        assert_eq!(report.null_overhead.count, 256);
        assert!(report.method.pinned_cpu.is_some());
    }
}
