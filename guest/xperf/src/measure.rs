//! The measurement: pinning, hook detection, the TSC quantum, then `rounds`
//! rounds of: the user stamp pair, the kernel's stamp pairs (with hooks), the
//! three crossings (first-touch #PF, #PF after MADV_DONTNEED, getppid), and
//! getppid with the hooks off; the batched getppid where its figure is close
//! to the TSC quantum. Samples are split into u2k/k2u when the kernel has the
//! hooks, round trips otherwise; every interval is corrected by what its
//! stamps cost (`xvmm_results::correction`).

use crate::abi::{self, Hooks, StampPage};
use crate::affinity::pin;
use crate::calibrate::Calibrator;
use crate::error::{Error, Result};
use crate::hookseq;
use crate::host;
use crate::sampling::{take, Mode, Region, Taken, Verdict};
use crate::stamp;
use xvmm_results::correction::{HookSequences, HooksCost, PairCost};
use xvmm_results::{
    Batched, Corrections, Crossing, Environment, KernelStamps, Machine, Method, Report, Sample,
    StampCosts, StampPoint,
};

pub use xvmm_results::names::{GETPPID, PF_FIRST_TOUCH, PF_REFAULT};

/// getppid calls per batch for the batched figure.
pub const BATCH: u64 = 100;

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
    /// Times the whole measurement is repeated.
    pub rounds: u32,
    /// Calibration exits for the VMM's timeline ([`crate::calibrate`]).
    pub calibrate: u64,
    /// Echoed in the report for the VMM.
    pub run_id: Option<String>,
    /// pf-host-miss pages per round ([`crate::host_miss`]; 0: not measured).
    pub host_miss: u64,
    /// The interrupt path's crossings too ([`crate::interrupt_path`]).
    pub interrupt_path: bool,
    /// The VMM's results channel, if there is one.
    pub channel: Option<xvmm_guest::channel::ResultsRegion>,
}

/// Samples a crossing kept, per round, and how many each verdict rejected.
#[derive(Default)]
struct Kept {
    rounds: Vec<Vec<Sample>>,
    all: Vec<Sample>,
    /// Indices into `all` of the samples a verdict rejected.
    rejected: Vec<u64>,
    async_pf: u64,
    seq: u64,
    migrated: u64,
}

impl Kept {
    fn add_round(&mut self, taken: &[Taken]) {
        let mut round = Vec::with_capacity(taken.len());
        for (i, t) in taken.iter().enumerate() {
            match t.verdict {
                Verdict::Keep => round.push(t.sample),
                Verdict::AsyncPf => self.async_pf += 1,
                Verdict::SeqMismatch => self.seq += 1,
                Verdict::Migrated => self.migrated += 1,
            }
            if t.verdict != Verdict::Keep {
                self.rejected.push((self.all.len() + i) as u64);
            }
        }
        self.all.extend(taken.iter().map(|t| t.sample));
        self.rounds.push(round);
    }

    /// Round trips of the kept samples, per round.
    fn round_trips(&self) -> Vec<Vec<u64>> {
        self.rounds
            .iter()
            .map(|r| r.iter().map(|s| s.k2u_u.saturating_sub(s.u2k_u)).collect())
            .collect()
    }
}

/// Builds a crossing with the u2k/k2u split from samples taken with hooks.
fn split_crossing(
    name: &str,
    per_round: u64,
    kept: &Kept,
    corr: &Corrections,
    raw: bool,
) -> Crossing {
    let mut crossing = Crossing::from_rounds(name, per_round, &kept.rounds, corr, false);
    rejected(&mut crossing, kept);
    if raw {
        crossing.samples = Some(kept.all.clone());
        crossing.samples_rejected = kept.rejected.clone();
    }
    crossing
}

/// Counts what xperf itself rejected, with the reasons.
fn rejected(crossing: &mut Crossing, kept: &Kept) {
    crossing.samples_other_rejected = kept.async_pf + kept.seq;
    crossing.samples_migrated = kept.migrated;
    let mut reasons = Vec::new();
    if kept.async_pf > 0 {
        reasons.push(format!(
            "{} KVM async page fault(s) (pf_async advanced)",
            kept.async_pf
        ));
    }
    if kept.seq > 0 {
        reasons.push(format!(
            "{} sample(s) where the kernel's sequence counter did not advance by exactly one",
            kept.seq
        ));
    }
    if !reasons.is_empty() {
        crossing.other_rejected_reason = Some(reasons.join("; "));
    }
}

/// Builds a round-trip-only crossing from user-side stamps.
fn round_trip_crossing(
    name: &str,
    per_round: u64,
    kept: &Kept,
    correction: u64,
    raw: bool,
    reason: &str,
) -> Crossing {
    let trips = kept.round_trips();
    let views: Vec<&[u64]> = trips.iter().map(Vec::as_slice).collect();
    let mut crossing =
        Crossing::from_round_trip_rounds(name, per_round, &views, correction, reason.to_string());
    rejected(&mut crossing, kept);
    if raw {
        crossing.samples = Some(kept.all.clone());
        crossing.samples_rejected = kept.rejected.clone();
    }
    crossing
}

/// Decides between split and round-trip mode; the reason says why not split.
fn detect(notes: &mut Vec<String>) -> Mode {
    if let Some(why) = refusal_of(&abi::query()) {
        return Mode::RoundTrip(why);
    }
    match StampPage::register() {
        Err(e) => Mode::RoundTrip(format!("{e}: round trips only")),
        Ok(page) => {
            let (note, refused) = page_flags(page.flags());
            notes.push(note);
            match refused {
                Some(why) => Mode::RoundTrip(why),
                None => Mode::Split(page),
            }
        }
    }
}

/// Why the kernel's answer to PR_XPERF's query rules out split mode; `None`
/// when the hooks are there and speak this xperf's ABI.
fn refusal_of(hooks: &Hooks) -> Option<String> {
    match hooks {
        Hooks::Absent => Some(
            "kernel has no xperf hooks (prctl PR_XPERF answered EINVAL): round trips only".into(),
        ),
        Hooks::Failed(errno) => Some(format!(
            "prctl(PR_XPERF, QUERY) failed: {}: round trips only",
            std::io::Error::from_raw_os_error(*errno)
        )),
        Hooks::Present(v) if *v != abi::XPERF_ABI_VERSION => Some(format!(
            "kernel hooks speak ABI version {v}, this xperf speaks {}: round trips only",
            abi::XPERF_ABI_VERSION
        )),
        Hooks::Present(_) => None,
    }
}

/// Whether `flag` is set in the stamp page's `flags`.
fn has(flags: u32, flag: u32) -> bool {
    flags & flag != 0
}

/// The note the stamp page's flags give, and why they rule out split mode
/// (FRED: the hooks take no stamps under it).
fn page_flags(flags: u32) -> (String, Option<String>) {
    let note = format!(
        "xperf hooks: ABI {}, page flags {flags:#x} (KPTI {}, FRED {}, KVM guest {})",
        abi::XPERF_ABI_VERSION,
        has(flags, abi::FLAG_KPTI),
        has(flags, abi::FLAG_FRED),
        has(flags, abi::FLAG_KVM_GUEST)
    );
    let refused = has(flags, abi::FLAG_FRED).then(|| {
        "FRED is active and the hooks take no stamps under FRED: round trips only".to_string()
    });
    (note, refused)
}

/// Refuses a run whose fault regions (every page stays resident until it is
/// dropped) would not fit in the memory available: in a small guest the OOM
/// killer would otherwise end xperf, or as PID 1 panic the kernel.
pub(crate) fn check_memory(pages: u64) -> Result<()> {
    match std::fs::read_to_string("/proc/meminfo") {
        Ok(meminfo) => memory_fits(pages, &meminfo),
        Err(_) => Ok(()),
    }
}

/// [`check_memory`] against a `/proc/meminfo` text; without MemAvailable
/// nothing is refused.
fn memory_fits(pages: u64, meminfo: &str) -> Result<()> {
    let Some(available) = xvmm_results::machine::meminfo_bytes(meminfo, "MemAvailable") else {
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
    notes.extend(unreported_hypervisor(
        environment,
        &machine.hypervisor_signature,
    ));
    let mode = detect(&mut notes);
    if let Mode::Split(page) = &mode {
        host_facts.kpti = Some(has(page.flags(), abi::FLAG_KPTI));
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

/// A note when a hypervisor is seen but the run counts as bare metal (no
/// xvmm results channel): the figures include what that hypervisor adds.
fn unreported_hypervisor(environment: Environment, signature: &str) -> Option<String> {
    (environment == Environment::BareMetal && !signature.is_empty()).then(|| {
        format!(
            "running under hypervisor {signature:?}, not a KVM guest with xvmm's results channel: reported as bare metal"
        )
    })
}

/// The user stamp pair with nothing between, after `warmup` unrecorded pairs.
pub fn user_pair(warmup: usize, samples: usize) -> Vec<u64> {
    for _ in 0..warmup {
        std::hint::black_box(stamp::null_pair());
    }
    let mut null = vec![u64::MAX; samples];
    for slot in null.iter_mut() {
        let s = stamp::null_pair();
        *slot = s.close.saturating_sub(s.open);
    }
    null
}

/// The kernel's stamp pairs (PR_XPERF_KPAIR), `samples` times: (return then
/// entry, entry then return).
fn kernel_pairs(
    mut one: impl FnMut() -> Result<(u64, u64)>,
    samples: usize,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let (mut pair, mut inner) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for _ in 0..samples {
        let (p, i) = one()?;
        pair.push(p);
        inner.push(i);
    }
    Ok((pair, inner))
}

/// Everything the rounds measured.
struct Rounds {
    user_pair: Vec<Vec<u64>>,
    /// The user pair's linearity sweep, every phase of every round.
    user_sweep: Vec<xvmm_results::sweep::SweepPhase>,
    kernel_pair: Vec<Vec<u64>>,
    kernel_pair_inner: Vec<Vec<u64>>,
    getppid: Kept,
    getppid_iret: u64,
    /// getppid round trips with the hooks on and off, alternated in
    /// blocks, every round: a block each (`on[i]` then `off[i]`).
    getppid_on: Vec<Vec<u64>>,
    getppid_off: Vec<Vec<u64>>,
    /// The hooks' own sequences, per round (`hookseq`), or why not.
    hook_seq: std::result::Result<Vec<hookseq::Timings>, String>,
    first_touch: Kept,
    /// Err: why the refault crossing could not be taken.
    refault: std::result::Result<Kept, String>,
    thp_refused: bool,
}

/// One round's crossings: getppid, then the #PF pair on fresh regions.
fn round_crossings(r: &mut Rounds, mode: &mut Mode, warmup: usize, samples: usize) -> Result<()> {
    let slots = abi::SYSCALL_SLOTS;
    let mut ignored = 0u64;
    take(mode, slots, warmup, &mut ignored, |_| stamp::getppid_pair());
    let getppid = take(mode, slots, samples, &mut r.getppid_iret, |_| {
        stamp::getppid_pair()
    });
    r.getppid.add_round(&getppid);
    // #PF: a small warm-up region first, then the measured one, both never
    // touched before; then both dropped and touched again.
    let (warm_region, _) = Region::map(warmup)?;
    let (region, no_thp) = Region::map(samples)?;
    r.thp_refused |= !no_thp;
    // SAFETY: page(i) wraps into the region's writable mapping, which the
    // closure borrows, so it outlives every call.
    let warm_touch = |i: usize| unsafe { stamp::store_pair(warm_region.page(i)) };
    // SAFETY: as above, for `region`.
    let touch = |i: usize| unsafe { stamp::store_pair(region.page(i)) };
    let pf = abi::PF_SLOTS;
    take(mode, pf, warmup, &mut ignored, warm_touch);
    r.first_touch
        .add_round(&take(mode, pf, samples, &mut ignored, touch));
    // A kernel without CONFIG_ADVISE_SYSCALLS has no madvise: the refault
    // crossing is then reported unsupported, the others still measured.
    match warm_region.discard().and_then(|()| region.discard()) {
        Ok(()) => {
            take(mode, pf, warmup, &mut ignored, warm_touch);
            let taken = take(mode, pf, samples, &mut ignored, touch);
            if let Ok(kept) = r.refault.as_mut() {
                kept.add_round(&taken);
            }
        }
        Err(e) => r.refault = Err(e.to_string()),
    }
    Ok(())
}

/// Blocks of hooks-on and hooks-off getppid round trips per round.
const ON_OFF_BLOCKS: usize = 5;

/// Samples in blocks, in the order taken.
type Blocks = Vec<Vec<u64>>;

/// getppid round trips with the hooks on and off, in [`ON_OFF_BLOCKS`]
/// alternating blocks (each after a warm-up): registered, then
/// unregistered, so the static key (and every stamp but the boot-time entry
/// stamps) is off, then registered again. Alternating keeps a drift of the
/// machine's speed out of the difference, and the blocks show how much of
/// it there was. Returns (on, off), a block each.
fn hooks_on_off(
    page: &mut impl HookSwitch,
    warmup: usize,
    samples: usize,
) -> Result<(Blocks, Blocks)> {
    let per_block = samples.div_ceil(ON_OFF_BLOCKS).max(1);
    let block = || {
        for _ in 0..warmup {
            std::hint::black_box(stamp::getppid_pair());
        }
        (0..per_block).map(|_| {
            let s = stamp::getppid_pair();
            s.close.saturating_sub(s.open)
        })
    };
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..ON_OFF_BLOCKS {
        on.push(block().collect());
        page.off()?;
        off.push(block().collect());
        page.on()?;
    }
    Ok((on, off))
}

/// Every round (see the module text).
fn measure_rounds(config: &Config, mode: &mut Mode, cal: &mut Calibrator) -> Result<Rounds> {
    let samples = usize_of(config.samples)?;
    let warmup = usize_of(config.warmup)?;
    let null_samples = usize_of(config.null_samples)?;
    let mut r = Rounds {
        user_pair: Vec::new(),
        user_sweep: Vec::new(),
        kernel_pair: Vec::new(),
        kernel_pair_inner: Vec::new(),
        getppid: Kept::default(),
        getppid_iret: 0,
        getppid_on: Vec::new(),
        getppid_off: Vec::new(),
        hook_seq: Ok(Vec::new()),
        first_touch: Kept::default(),
        refault: Ok(Kept::default()),
        thp_refused: false,
    };
    for round in 0..config.rounds.max(1) {
        cal.checkpoint();
        r.user_pair.push(user_pair(warmup, null_samples));
        r.user_sweep
            .extend(crate::sweep::round(round, warmup, null_samples));
        if let Mode::Split(page) = mode {
            let (pair, inner) =
                kernel_pairs(|| page.kernel_pairs(), null_samples.min(samples.max(1000)))?;
            r.kernel_pair.push(pair);
            r.kernel_pair_inner.push(inner);
            let n = null_samples.min(samples.max(1000));
            if let Ok(rounds) = r.hook_seq.as_mut() {
                match hookseq::measure(warmup.min(1000), n) {
                    Ok(t) => rounds.push(t),
                    Err(e) => r.hook_seq = Err(e.to_string()),
                }
            }
        }
        round_crossings(&mut r, mode, warmup, samples)?;
        if let Mode::Split(page) = mode {
            let (on, off) = hooks_on_off(page, warmup, samples)?;
            r.getppid_on.extend(on);
            r.getppid_off.extend(off);
        }
    }
    cal.checkpoint();
    Ok(r)
}

/// The user pair's cost as the method decides it: the null pair, or the
/// intercept of its sweep where the two differ by more than one TSC
/// `quantum` (`xvmm_results::sweep`). Without a usable sweep phase the
/// null pair stands, as in reports before the sweep.
pub(crate) fn with_user_sweep(
    costs: StampCosts,
    phases: Vec<xvmm_results::sweep::SweepPhase>,
    quantum: Option<f64>,
) -> StampCosts {
    use xvmm_results::sweep::{decide, SweepFit};
    let null = costs.user_pair.median();
    match SweepFit::new(phases, quantum) {
        Some(fit) => costs.with_user_sweep(decide(null, fit, quantum)),
        None => costs,
    }
}

/// The stamp costs of the rounds, and the corrections from them. With the
/// hooks' own sequences timed, they are the kernel pairs (`C`, `B`: the
/// SYSCALL kind's; the #PF kind's and `PR_XPERF_KPAIR`'s bare reads in
/// `hook_sequences`), and getppid's hooks on/off figure carries what they
/// add.
fn stamp_costs(r: &Rounds, quantum: Option<f64>) -> StampCosts {
    let (open, close) = (xvmm_host::tsc::OPEN_TEXT, xvmm_host::tsc::CLOSE_TEXT);
    let user = PairCost::from_rounds(open, close, &r.user_pair);
    let bare = (!r.kernel_pair.is_empty()).then(|| {
        (
            PairCost::from_rounds("kernel return stamp", "kernel entry stamp", &r.kernel_pair),
            PairCost::from_rounds(
                "kernel entry stamp",
                "kernel return stamp",
                &r.kernel_pair_inner,
            ),
        )
    });
    let seq = r.hook_seq.as_ref().ok().filter(|t| !t.is_empty());
    let per_round = |f: fn(&hookseq::Timings) -> &Vec<u64>| -> Vec<Vec<u64>> {
        seq.map_or(Vec::new(), |t| t.iter().map(|t| f(t).clone()).collect())
    };
    let (ret_sysret, sc_entry) = (
        "XPERF_K2U_STAMP (SYSRET) through its jump label",
        "XPERF_SC_U2K_STAMP through its ALTERNATIVE",
    );
    let (ret_iret, pf_entry) = (
        "XPERF_K2U_STAMP (IRET) through its jump label",
        "XPERF_PF_U2K_STAMP through its ALTERNATIVE",
    );
    let kernel = match (seq, &bare) {
        (Some(_), Some(_)) => Some((
            PairCost::from_rounds(ret_sysret, sc_entry, &per_round(|t| &t.syscall_pair)),
            PairCost::from_rounds(sc_entry, ret_sysret, &per_round(|t| &t.syscall_inner)),
        )),
        _ => bare.clone(),
    };
    let mut costs = with_user_sweep(
        StampCosts::new(user, kernel, None),
        r.user_sweep.clone(),
        quantum,
    );
    if let (Some(_), Some((bare_pair, bare_inner))) = (seq, bare) {
        costs.hook_sequences = Some(HookSequences {
            source: hookseq::SOURCE.into(),
            pf_pair: PairCost::from_rounds(ret_iret, pf_entry, &per_round(|t| &t.pf_pair)),
            pf_inner: PairCost::from_rounds(pf_entry, ret_iret, &per_round(|t| &t.pf_inner)),
            bare_pair,
            bare_inner,
        });
    }
    if !r.getppid_off.is_empty() {
        let mut hooks = HooksCost::from_blocks(
            GETPPID,
            &r.getppid_on,
            &r.getppid_off,
            "takes the boot-time SYSCALL entry stamp",
        );
        if seq.is_some() {
            hooks = hooks.with_prediction(
                &per_round(|t| &t.getppid_on),
                &per_round(|t| &t.getppid_off),
            );
        }
        costs.hooks.push(hooks.reconcile(quantum));
    }
    costs
}

/// Switches the kernel's stamps off for the batch and on again after it.
pub(crate) trait HookSwitch {
    fn off(&mut self) -> Result<()>;
    fn on(&mut self) -> Result<()>;
}

impl HookSwitch for StampPage {
    fn off(&mut self) -> Result<()> {
        self.unregister()
    }
    fn on(&mut self) -> Result<()> {
        self.reregister()
    }
}

/// What stays in each crossing of a batch taken with the hooks off.
pub const BATCH_KEEPS_HOOKS_OFF: &str = "the boot-time SYSCALL entry stamp (a jump out of line, \
    RDTSC and a store to the TSS) on each crossing: the hooks are unregistered for the batch, \
    as for stamp_costs.hooks' off figure; only the user pair is subtracted";
/// What stays in each crossing of a batch on a kernel without the hooks.
pub const BATCH_KEEPS_NO_HOOKS: &str = "nothing of xperf's: the kernel takes no stamps";

/// The batched getppid, when its round trip is under 20 TSC quanta.
fn batched_getppid(mode: &mut Mode, samples: usize, correction: u64) -> Result<Batched> {
    let batches = samples.div_ceil(10).max(10);
    let batch = || {
        let s = stamp::getppid_batch(BATCH);
        s.close.saturating_sub(s.open)
    };
    match mode {
        Mode::Split(page) => batched(Some(page), batches, correction, batch),
        Mode::RoundTrip(_) => batched(None::<&mut StampPage>, batches, correction, batch),
    }
}

/// `batches` batches of [`BATCH`] crossings, with the hooks (where there is
/// a `switch`) off: subtracting K times a kernel stamp pair measured
/// back-to-back would multiply its error (a TSC quantum or more) by K, and
/// the hooks' full cost on a crossing is only known as a difference of two
/// medians. With the hooks off the user pair is all that is left to
/// subtract, once per batch (README "Method").
fn batched<S: HookSwitch>(
    switch: Option<&mut S>,
    batches: usize,
    correction: u64,
    mut batch: impl FnMut() -> u64,
) -> Result<Batched> {
    let Some(switch) = switch else {
        let times: Vec<u64> = (0..batches).map(|_| batch()).collect();
        return Ok(Batched::new(BATCH, correction, &times).keeping(BATCH_KEEPS_NO_HOOKS));
    };
    switch.off()?;
    // One unrecorded batch: the first syscalls after the static key flipped
    // run through freshly patched text.
    std::hint::black_box(batch());
    let times: Vec<u64> = (0..batches).map(|_| batch()).collect();
    switch.on()?;
    Ok(Batched::new(BATCH, correction, &times).keeping(BATCH_KEEPS_HOOKS_OFF))
}

/// Where the patched kernel's stamps sit (patches/linux-6.12).
fn stamp_points() -> Vec<StampPoint> {
    let pf = |name: &str| StampPoint {
        crossing: name.into(),
        entry: "asm_exc_page_fault right after ENDBR (boot-time ALTERNATIVE)".into(),
        entry_depth: "nothing (the CPU's exception delivery only)".into(),
        exit: "swapgs_restore_regs_and_return_to_usermode after IBRS_EXIT; then POP_REGS, \
               (PTI) CR3 switch, swapgs, VERW, IRETQ"
            .into(),
    };
    vec![
        pf(PF_FIRST_TOUCH),
        pf(PF_REFAULT),
        StampPoint {
            crossing: GETPPID.into(),
            entry: "entry_SYSCALL_64 after swapgs and the spill of the user RSP, before the CR3 \
                    switch (boot-time ALTERNATIVE)"
                .into(),
            entry_depth: "swapgs and one store".into(),
            exit: "syscall_return_via_sysret after IBRS_EXIT; then POP_REGS, (PTI) CR3 switch, \
                   swapgs, VERW, SYSRETQ"
                .into(),
        },
    ]
}

/// The method block of the report.
fn method(config: &Config, setup: &Setup) -> Method {
    let mut method = Method::standard(config.warmup, config.samples);
    method.pinned_cpu = Some(setup.cpu);
    method.rounds = config.rounds.max(1);
    if let Mode::Split(page) = &setup.mode {
        method.kernel_stamps = Some(KernelStamps {
            entry: page.text(abi::offset::ENTRY_INSN),
            exit: page.text(abi::offset::EXIT_INSN),
            source:
                "the running kernel's stamp page (asm/xperf.h: XPERF_ENTRY_TSC, XPERF_EXIT_TSC)"
                    .into(),
        });
        method.stamp_points = stamp_points();
    }
    method
}

/// The interrupt path's crossings between this run's CPU and another
/// online one, after the others (their second thread must not share a CPU
/// with them); inside the calibrated run, so a VMM's trace covers them.
fn interrupt_path(config: &Config, setup: &mut Setup, correction: u64, report: &mut Report) {
    let online = crate::affinity::online_cpus();
    let plan = crate::interrupt_path::Plan {
        samples: config.samples,
        rounds: config.rounds,
        cpu: setup.cpu,
        others: online.into_iter().filter(|&c| c != setup.cpu).collect(),
        correction,
        raw: config.raw,
    };
    let (crossings, notes) = crate::interrupt_path::crossings(&plan);
    report.crossings.extend(crossings);
    setup.notes.extend(notes);
}

/// pf-host-miss and the spinner, after the other crossings (its spinner
/// thread must not share their CPU).
fn host_miss(config: &Config, setup: &Setup, correction: u64, report: &mut Report) -> Result<()> {
    let region = config.channel.ok_or_else(|| {
        Error::Usage("--host-miss needs the VMM's channel (xvmm --host-fault-delay)".into())
    })?;
    let page = match &setup.mode {
        Mode::Split(page) => Some(page),
        Mode::RoundTrip(_) => None,
    };
    let name = xvmm_results::async_pf::PF_HOST_MISS;
    // Whatever goes wrong here, the crossings measured before are kept.
    match crate::host_miss::measure(config.host_miss, config.rounds, setup.cpu, region, page) {
        Ok(m) => record_host_miss(config, &m, correction, report),
        Err(e) => {
            report
                .crossings
                .push(Crossing::unsupported(name, config.host_miss, e.to_string()))
        }
    }
    Ok(())
}

/// pf-host-miss's crossing, async-PF figures and notes in the report.
fn record_host_miss(
    config: &Config,
    m: &crate::host_miss::Measured,
    correction: u64,
    report: &mut Report,
) {
    let name = xvmm_results::async_pf::PF_HOST_MISS;
    if let Some(why) = &m.stopped {
        report.notes.push(format!(
            "pf-host-miss stopped after {} of {} rounds: {why}",
            m.rounds.len(),
            config.rounds.max(1)
        ));
    }
    if !m.spinner_ran {
        report.notes.push(
            "pf-host-miss: the spinner could not be pinned or made idle-class: no spinner figures"
                .into(),
        );
    }
    let views: Vec<&[u64]> = m.rounds.iter().map(Vec::as_slice).collect();
    let mut crossing = Crossing::from_round_trip_rounds(
        name,
        config.host_miss,
        &views,
        correction,
        crate::host_miss::ROUND_TRIP_REASON.to_string(),
    );
    if config.raw {
        crossing.samples = Some(m.samples.clone());
    }
    report.crossings.push(crossing);
    report.notes.push(format!(
        "pf-host-miss: all {} samples may take an async page fault: each is a user-mode (CPL3) \
         store with interrupts on, where KVM delivers them",
        m.samples.len()
    ));
    report.async_pf = Some(xvmm_results::async_pf::AsyncPf {
        spinner: m.spinner_figures(config.raw),
        guest: m.guest.clone(),
        ..Default::default()
    });
}

/// What the setup found goes into the report: the machine, and its notes
/// ahead of those the measurement added.
fn take_setup(report: &mut Report, setup: Setup) {
    report.machine = Some(setup.machine);
    let added = std::mem::replace(&mut report.notes, setup.notes);
    report.notes.extend(added);
}

/// getppid's round trip in core cycles where a PMU can be read from user
/// mode; returns what the report says about the PMU.
fn getppid_cycles(samples: usize, report: &mut Report) -> String {
    match crate::pmu::CycleCounter::open() {
        Ok(counter) => {
            let cycles: Vec<u64> = (0..samples).map(|_| counter.getppid_cycles()).collect();
            if let Some(g) = report.crossings.iter_mut().find(|c| c.name == GETPPID) {
                g.cycles = Some(xvmm_results::Stats::from_samples(&cycles));
            }
            "core cycles read with rdpmc (getppid round trip, `cycles`)".into()
        }
        Err(why) => why,
    }
}

/// Runs the whole measurement and returns the report.
/// The three crossings' rows from the rounds taken: split where the kernel
/// stamps, round trips where it does not, or why a crossing was not taken.
fn crossings(
    config: &Config,
    r: &Rounds,
    mode: &Mode,
    corr: &Corrections,
    pf_corr: &Corrections,
) -> Vec<Crossing> {
    let runs = [
        (PF_FIRST_TOUCH, Ok(&r.first_touch)),
        (PF_REFAULT, r.refault.as_ref()),
        (GETPPID, Ok(&r.getppid)),
    ];
    runs.into_iter()
        .map(|(name, kept)| match (kept, mode) {
            (Err(why), _) => Crossing::unsupported(name, config.samples, why.clone()),
            (Ok(k), Mode::Split(_)) => {
                let c = if name == GETPPID { corr } else { pf_corr };
                split_crossing(name, config.samples, k, c, config.raw)
            }
            (Ok(k), Mode::RoundTrip(reason)) => round_trip_crossing(
                name,
                config.samples,
                k,
                corr.user_round_trip,
                config.raw,
                reason,
            ),
        })
        .collect()
}

/// getppid's batched figure, taken when its round trip is within a few TSC
/// quanta (one crossing is too short for the counter to resolve).
fn batch_getppid_if_coarse(
    config: &Config,
    setup: &mut Setup,
    user_round_trip: u64,
    report: &mut Report,
) -> Result<()> {
    let quantum = setup.machine.tsc_quantum_ticks;
    let Some(getppid) = report.crossings.iter_mut().find(|c| c.name == GETPPID) else {
        return Ok(());
    };
    let coarse = getppid
        .round_trip
        .as_ref()
        .is_some_and(|rt| xvmm_results::quantum::is_coarse(rt.corrected.median, quantum));
    if coarse {
        getppid.batched = Some(batched_getppid(
            &mut setup.mode,
            usize_of(config.samples)?,
            user_round_trip,
        )?);
    }
    Ok(())
}

/// The checkpoints [`measure_rounds`] passes: one before each round and one
/// after the last, so the calibration exits spread over the whole run.
fn calibration_checkpoints(rounds: u32) -> u32 {
    rounds.max(1) + 1
}

pub fn run(config: &Config) -> Result<Report> {
    let mut setup = set_up(config)?;
    let mut cal = Calibrator::new(config.calibrate, calibration_checkpoints(config.rounds))?;
    let r = measure_rounds(config, &mut setup.mode, &mut cal)?;
    if r.thp_refused && !setup.machine.thp.is_empty() {
        setup
            .notes
            .push("madvise(MADV_NOHUGEPAGE) was refused: huge pages may serve some faults".into());
    }
    let costs = stamp_costs(&r, setup.machine.tsc_quantum_ticks);
    let corr = costs.corrections;
    // #PF crossings take the #PF hooks' pairs where those were timed.
    let pf_corr = costs
        .hook_sequences
        .as_ref()
        .map_or(corr, |h| h.pf_corrections(&costs));
    if let Err(why) = &r.hook_seq {
        setup.notes.push(format!(
            "the hooks' own sequences could not be timed ({why}): the kernel pairs are \
             PR_XPERF_KPAIR's bare TSC reads"
        ));
    }
    let mut report = Report::new(
        format!("xperf {}", env!("CARGO_PKG_VERSION")),
        setup.environment,
        setup.host_facts.clone(),
        method(config, &setup),
    );
    report.null_overhead = costs.user_pair.stats.clone();
    report.crossings = crossings(config, &r, &setup.mode, &corr, &pf_corr);
    setup.machine.pmu = getppid_cycles(usize_of(config.samples)?, &mut report);
    batch_getppid_if_coarse(config, &mut setup, corr.user_round_trip, &mut report)?;
    match &setup.mode {
        Mode::Split(_) => setup.notes.push(format!(
            "getppid returned through IRET in {} of {} samples (SYSRET otherwise)",
            r.getppid_iret,
            config.samples * u64::from(config.rounds.max(1))
        )),
        Mode::RoundTrip(reason) => setup.notes.insert(0, reason.clone()),
    }
    if let Some(w) = setup.machine.lfence.warning() {
        setup.notes.push(w);
    }
    if config.host_miss > 0 {
        host_miss(config, &setup, corr.user_round_trip, &mut report)?;
    }
    if config.interrupt_path {
        interrupt_path(config, &mut setup, corr.user_round_trip, &mut report);
    }
    report.stamp_costs = Some(costs);
    report.calibration = cal.finish();
    report.run_id = config.run_id.clone();
    take_setup(&mut report, setup);
    Ok(report)
}

impl Config {
    /// A run on its own: no VMM channel, calibration exits, pf-host-miss
    /// or kept samples; pinned to the CPU it starts on.
    pub fn native(samples: u64, warmup: u64, null_samples: u64, rounds: u32) -> Config {
        Config {
            samples,
            warmup,
            null_samples,
            cpu: None,
            raw: false,
            vmm_channel: false,
            rounds,
            calibrate: 0,
            run_id: None,
            host_miss: 0,
            interrupt_path: false,
            channel: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::UNTAKEN;
    use xvmm_results::{names, Status, UNFILLED};

    fn s(a: u64, b: u64, c: u64, d: u64) -> Sample {
        Sample {
            u2k_u: a,
            u2k_k: b,
            k2u_k: c,
            k2u_u: d,
            cpu: Some(0),
            interrupts: Some(0),
        }
    }

    fn taken(sample: Sample, verdict: Verdict) -> Taken {
        Taken { sample, verdict }
    }

    /// An empty report of `environment`, as `run` starts one.
    fn report_in(environment: Environment) -> Report {
        Report::new(
            "xperf".into(),
            environment,
            Default::default(),
            Method::standard(0, 4),
        )
    }

    /// A set-up in round-trip mode (no hooks) on `machine`.
    fn round_trip_setup(machine: Machine, environment: Environment, notes: Vec<String>) -> Setup {
        Setup {
            cpu: 0,
            machine,
            host_facts: Default::default(),
            environment,
            mode: Mode::RoundTrip("no hooks".into()),
            notes,
        }
    }

    #[test]
    fn kernel_pairs_are_taken_one_call_a_sample_and_fail_with_the_call() {
        let mut n = 0;
        let (pair, inner) = kernel_pairs(
            || {
                n += 1;
                Ok((n, 10 * n))
            },
            3,
        )
        .unwrap();
        assert_eq!((pair, inner), (vec![1, 2, 3], vec![10, 20, 30]));
        let e = kernel_pairs(|| Err(Error::Usage("gone".into())), 2).unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
    }

    /// Blocks alternate, hooks on then off, the hooks switched between.
    #[test]
    fn hooks_on_and_off_alternate_in_blocks() {
        let on = std::rc::Rc::new(std::cell::Cell::new(true));
        let mut hooks = FakeHooks {
            on,
            switched: Vec::new(),
        };
        let samples = 3 * ON_OFF_BLOCKS;
        let (on_blocks, off_blocks) = hooks_on_off(&mut hooks, 2, samples).unwrap();
        assert_eq!(
            (on_blocks.len(), off_blocks.len()),
            (ON_OFF_BLOCKS, ON_OFF_BLOCKS)
        );
        assert!(on_blocks.iter().chain(&off_blocks).all(|b| b.len() == 3));
        assert!(on_blocks.iter().flatten().all(|&t| t > 0));
        let want: Vec<bool> = (0..ON_OFF_BLOCKS).flat_map(|_| [false, true]).collect();
        assert_eq!(hooks.switched, want);
    }

    /// The guest's and the spinner's figures reach the report; without the
    /// VMM's channel pf-host-miss is refused, not skipped in silence.
    #[test]
    fn host_miss_figures_reach_the_report_and_need_the_channel() {
        let m = crate::host_miss::Measured {
            rounds: vec![vec![5000, 6000]],
            guest: xvmm_results::async_pf::AsyncPfGuest {
                touches: 2,
                ..Default::default()
            },
            spinner: vec![10, 12],
            spinner_speed: 7,
            spinner_ran: true,
            ..Default::default()
        };
        let mut report = report_in(Environment::LinuxVm);
        record_host_miss(&config(1), &m, 70, &mut report);
        let a = report.async_pf.as_ref().unwrap();
        assert_eq!(a.guest.touches, 2);
        assert_eq!(a.spinner.as_ref().unwrap().iterations_per_kilotick, 7);
        let setup = round_trip_setup(Machine::default(), Environment::LinuxVm, Vec::new());
        let e = host_miss(&config(1), &setup, 70, &mut report).unwrap_err();
        assert!(e.to_string().contains("needs the VMM's channel"), "{e}");
    }

    /// getppid is batched where its round trip is within a few quanta of a
    /// coarse counter, and only then; a report without getppid is left be.
    #[test]
    fn getppid_is_batched_only_on_a_coarse_counter() {
        let getppid = || {
            let rounds: [&[u64]; 1] = [&[300, 310, 320]];
            Crossing::from_round_trip_rounds(GETPPID, 3, &rounds, 0, "no hooks".into())
        };
        for (quantum, batched) in [(Some(1000.0), true), (Some(1.0), false), (None, false)] {
            let mut setup = round_trip_setup(
                Machine {
                    tsc_quantum_ticks: quantum,
                    ..Machine::default()
                },
                Environment::BareMetal,
                Vec::new(),
            );
            let mut report = report_in(Environment::BareMetal);
            report.crossings.push(getppid());
            let mut other = getppid();
            other.name = PF_REFAULT.into();
            report.crossings.insert(0, other);
            batch_getppid_if_coarse(&config(1), &mut setup, 0, &mut report).unwrap();
            assert_eq!(
                report.crossings[1].batched.is_some(),
                batched,
                "{quantum:?}"
            );
            assert!(report.crossings[0].batched.is_none());
        }
    }

    /// Each crossing says where its stamps sit.
    #[test]
    fn every_crossing_has_its_stamp_points() {
        let names: Vec<String> = stamp_points().into_iter().map(|p| p.crossing).collect();
        assert_eq!(names, [PF_FIRST_TOUCH, PF_REFAULT, GETPPID]);
    }

    /// Without a PMU readable from user mode the report says why.
    #[test]
    fn the_cycle_counter_reports_what_it_found() {
        let mut report = report_in(Environment::LinuxVm);
        let said = getppid_cycles(3, &mut report);
        assert!(!said.is_empty() && said != "xyzzy", "{said}");
        if said.starts_with("core cycles") {
            // A PMU: nothing to attach it to without a getppid row.
            assert!(report.crossings.is_empty());
        }
    }

    #[test]
    fn only_hooks_of_this_abi_allow_split_mode() {
        assert!(refusal_of(&Hooks::Absent)
            .unwrap()
            .contains("no xperf hooks"));
        let failed = refusal_of(&Hooks::Failed(libc::EPERM)).unwrap();
        assert!(failed.contains("QUERY) failed"), "{failed}");
        let old = refusal_of(&Hooks::Present(abi::XPERF_ABI_VERSION + 1)).unwrap();
        assert!(old.contains("ABI version"), "{old}");
        assert_eq!(refusal_of(&Hooks::Present(abi::XPERF_ABI_VERSION)), None);
    }

    #[test]
    fn the_page_flags_are_noted_and_fred_refuses_split_mode() {
        let (note, refused) = page_flags(abi::FLAG_KPTI);
        assert!(
            note.contains("KPTI true, FRED false, KVM guest false"),
            "{note}"
        );
        assert_eq!(refused, None);
        let (note, refused) = page_flags(abi::FLAG_FRED | abi::FLAG_KVM_GUEST);
        assert!(
            note.contains("KPTI false, FRED true, KVM guest true"),
            "{note}"
        );
        assert!(refused.unwrap().contains("FRED is active"));
        assert!(has(abi::FLAG_KPTI | abi::FLAG_FRED, abi::FLAG_KPTI));
        assert!(!has(abi::FLAG_FRED, abi::FLAG_KPTI));
    }

    /// Half of MemAvailable (1000 kB here: 125 pages of 4 KiB) is the most
    /// the fault regions may take; the real check refuses a huge request.
    #[test]
    fn fault_regions_may_take_half_the_available_memory() {
        let meminfo = "MemTotal: 8000 kB\nMemAvailable: 1000 kB\n";
        assert!(memory_fits(125, meminfo).is_ok());
        let e = memory_fits(126, meminfo).unwrap_err().to_string();
        assert!(e.contains("126 fault pages"), "{e}");
        assert!(memory_fits(u64::MAX, "MemTotal: 1 kB\n").is_ok());
        assert!(check_memory(u64::MAX / 8192).is_err());
        assert!(check_memory(1).is_ok());
    }

    #[test]
    fn a_hypervisor_without_the_results_channel_is_noted() {
        let note = unreported_hypervisor(Environment::BareMetal, "VMwareVMware").unwrap();
        assert!(note.contains("\"VMwareVMware\""), "{note}");
        assert_eq!(unreported_hypervisor(Environment::BareMetal, ""), None);
        assert_eq!(
            unreported_hypervisor(Environment::LinuxVm, "KVMKVMKVM"),
            None
        );
    }

    /// Only counts above zero give a reason.
    #[test]
    fn what_xperf_rejected_is_counted_with_its_reasons() {
        let corr = Corrections::derive(73, Some((40, 30)));
        let mut c = Crossing::from_rounds("x", 1, &[vec![s(1, 2, 3, 4)]], &corr, false);
        rejected(&mut c, &Kept::default());
        assert_eq!(c.other_rejected_reason, None);
        let kept = Kept {
            async_pf: 2,
            seq: 1,
            migrated: 5,
            ..Kept::default()
        };
        rejected(&mut c, &kept);
        assert_eq!((c.samples_other_rejected, c.samples_migrated), (3, 5));
        let why = c.other_rejected_reason.unwrap();
        assert!(why.starts_with("2 KVM async page fault(s)"), "{why}");
        assert!(why.contains("; 1 sample(s) where"), "{why}");
    }

    /// Plays the stamp page: whether the hooks are on, and every switch.
    struct FakeHooks {
        on: std::rc::Rc<std::cell::Cell<bool>>,
        switched: Vec<bool>,
    }

    impl HookSwitch for FakeHooks {
        fn off(&mut self) -> Result<()> {
            self.on.set(false);
            self.switched.push(false);
            Ok(())
        }
        fn on(&mut self) -> Result<()> {
            self.on.set(true);
            self.switched.push(true);
            Ok(())
        }
    }

    /// The batch is taken with the hooks off, so its correction is the user
    /// pair alone (README "Method"): a batch taken with them on would hold
    /// K kernel stamp pairs and the hook work that `correction` leaves in.
    #[test]
    fn batched_getppid_is_taken_with_the_hooks_off_and_subtracts_the_user_pair() {
        let on = std::rc::Rc::new(std::cell::Cell::new(true));
        let mut hooks = FakeHooks {
            on: on.clone(),
            switched: Vec::new(),
        };
        let corr = Corrections::derive(73, Some((40, 30)));
        // Each crossing 150 ticks natively, 40 more while the hooks stamp it.
        let mut seen_on = 0;
        let b = batched(Some(&mut hooks), 12, corr.user_round_trip, || {
            seen_on += u64::from(on.get());
            let per = if on.get() { 190 } else { 150 };
            73 + BATCH * per
        })
        .unwrap();
        assert_eq!(seen_on, 0, "every batch with the hooks off");
        assert_eq!(hooks.switched, [false, true], "off once, then on again");
        assert!(on.get());
        assert_eq!(b.correction, corr.user_round_trip);
        assert_eq!(b.correction, 73);
        assert_eq!((b.per_crossing.median, b.per_crossing.count), (150, 12));
        assert_eq!(b.kernel_keeps, BATCH_KEEPS_HOOKS_OFF);
        // No hooks: nothing to switch, nothing kept.
        let plain = batched(None::<&mut FakeHooks>, 3, 73, || 73 + BATCH * 150).unwrap();
        assert_eq!((plain.correction, plain.per_crossing.median), (73, 150));
        assert_eq!(plain.kernel_keeps, BATCH_KEEPS_NO_HOOKS);
    }

    fn config(rounds: u32) -> Config {
        Config {
            samples: 4,
            warmup: 0,
            null_samples: 10,
            cpu: None,
            raw: false,
            vmm_channel: true,
            rounds,
            calibrate: 0,
            run_id: None,
            host_miss: 4,
            interrupt_path: false,
            channel: None,
        }
    }

    /// pf-host-miss's own notes (rounds stopped early, no spinner) survive
    /// the setup's notes joining the report.
    #[test]
    fn host_miss_notes_are_kept_beside_the_setups() {
        let m = crate::host_miss::Measured {
            rounds: vec![vec![5000, 6000, 7000, 8000]],
            stopped: Some("the VMM refused the drop".into()),
            spinner_ran: false,
            ..Default::default()
        };
        let setup = round_trip_setup(
            Machine::default(),
            Environment::LinuxVm,
            vec!["from the setup".into()],
        );
        let mut report = report_in(Environment::LinuxVm);
        record_host_miss(&config(3), &m, 70, &mut report);
        take_setup(&mut report, setup);
        let notes = &report.notes;
        assert_eq!(notes.first().map(String::as_str), Some("from the setup"));
        let has = |text: &str| notes.iter().any(|n| n.contains(text));
        assert!(
            has("pf-host-miss stopped after 1 of 3 rounds: the VMM refused the drop"),
            "{notes:?}"
        );
        assert!(has("the spinner could not be pinned"), "{notes:?}");
        assert!(
            has("all 0 samples may take an async page fault"),
            "{notes:?}"
        );
        assert_eq!(report.crossings.len(), 1);
        assert!(report.machine.is_some());
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
            taken(s(100, 400, 900, 1200), Verdict::Migrated),
        ];
        let mut kept = Kept::default();
        kept.add_round(&all);
        let corr = Corrections::derive(50, Some((50, 10)));
        let c = split_crossing(PF_FIRST_TOUCH, 7, &kept, &corr, true);
        assert_eq!(c.status, Status::Measured);
        assert_eq!(c.samples_valid, 2);
        assert_eq!(c.samples_unfilled, 1);
        assert_eq!(c.samples_out_of_order, 1);
        assert_eq!(c.samples_other_rejected, 2);
        assert_eq!(c.samples_migrated, 1);
        let reason = c.other_rejected_reason.clone().unwrap();
        assert!(reason.contains("1 KVM async page fault"), "{reason}");
        assert!(reason.contains("sequence counter"), "{reason}");
        // The async sample's huge round trip must not reach the statistics.
        assert_eq!(c.round_trip.as_ref().unwrap().raw.max, 1200);
        assert_eq!(c.u2k.as_ref().unwrap().corrected.min, 250);
        assert_eq!(c.samples.as_ref().map(Vec::len), Some(7));
        assert!(c.interrupts_counted && c.clean.is_some());
    }

    /// Each segment's attributed samples after `attribute` with an empty
    /// trace on vCPU 0: (samples looked at, exit-free).
    fn attributed(c: Crossing) -> Vec<(u64, u64)> {
        use xvmm_results::attribution::{attribute, HostTrace, Index};
        use xvmm_results::timeline::Mapping;
        let mut r = Report::new(
            "t".into(),
            xvmm_results::Environment::LinuxVm,
            Default::default(),
            xvmm_results::Method::standard(0, c.samples_requested),
        );
        r.crossings.push(c);
        let (trace, mapping) = (HostTrace::default(), Mapping::unscaled(0));
        attribute(&mut r, &Index::new(&trace, &mapping), Some(0));
        let c = &r.crossings[0];
        [&c.u2k, &c.in_kernel, &c.k2u, &c.round_trip]
            .into_iter()
            .flatten()
            .filter_map(|i| i.host.as_ref())
            .map(|h| (h.samples, h.exit_free.count))
            .collect()
    }

    #[test]
    fn attribution_sees_only_the_samples_in_the_statistics() {
        // Stamps in order all, but xperf rejected the last three: they are
        // kept with --raw, and must stay out of the attribution as they stay
        // out of the statistics the decomposition compares it with.
        let all = [
            taken(s(100, 400, 900, 1200), Verdict::Keep),
            taken(s(2100, 2450, 2950, 3300), Verdict::Keep),
            taken(s(4100, 4400, 4900, 99_000), Verdict::AsyncPf),
            taken(s(100_100, 100_400, 100_900, 101_200), Verdict::SeqMismatch),
            taken(s(102_100, 102_400, 102_900, 103_200), Verdict::Migrated),
        ];
        let mut kept = Kept::default();
        kept.add_round(&all);
        let corr = Corrections::derive(50, Some((50, 10)));
        let c = split_crossing(PF_FIRST_TOUCH, 5, &kept, &corr, true);
        assert_eq!(c.samples_valid, 2);
        let segments = attributed(c);
        assert_eq!(segments.len(), 4);
        assert!(segments.iter().all(|&s| s == (2, 2)), "{segments:?}");
        // Round trips only: the same.
        let c = round_trip_crossing(PF_FIRST_TOUCH, 5, &kept, 50, true, "no hooks");
        assert_eq!(attributed(c), [(2, 2)]);
    }

    #[test]
    fn round_trip_mode_states_the_reason_and_subtracts_the_user_pair() {
        let mut kept = Kept::default();
        kept.add_round(&[
            taken(s(1000, UNFILLED, UNFILLED, 1500), Verdict::Keep),
            taken(s(2000, UNFILLED, UNFILLED, 2600), Verdict::Keep),
        ]);
        kept.add_round(&[taken(s(3000, UNFILLED, UNFILLED, 3700), Verdict::Keep)]);
        let c = round_trip_crossing(GETPPID, 2, &kept, 70, false, "no hooks");
        assert_eq!(
            c.status,
            Status::RoundTripOnly {
                reason: "no hooks".into()
            }
        );
        assert_eq!((c.samples_valid, c.samples_requested), (3, 4));
        assert!(c.u2k.is_none() && c.k2u.is_none() && c.samples.is_none());
        let rt = c.round_trip.unwrap();
        assert_eq!((rt.raw.min, rt.raw.median, rt.raw.max), (500, 600, 700));
        assert_eq!(rt.corrected.median, 530);
        assert_eq!(rt.rounds, vec![430, 630]);
    }

    /// Five samples taken in split mode, the test playing the kernel that
    /// writes the stamp page: 0 and 1 delivered normally (1 through IRET,
    /// an interrupt before its entry), 2 with an async page fault, 3 not
    /// delivered, 4 delivered twice. Returns them and the IRET count.
    fn split_samples_with_the_test_as_kernel() -> (Vec<Taken>, u64) {
        let page = StampPage::unregistered().unwrap();
        let base = page.base_ptr();
        // The test plays the kernel: it writes the page as the hooks would.
        // SAFETY: every `off` is an `abi::offset` u64 slot (8-aligned, inside
        // the page-aligned 4 KiB mapping), which `page` and then `mode` keep
        // mapped to the end of this function; this thread alone touches it.
        let write = |off: usize, v: u64| unsafe { base.add(off).cast::<u64>().write_volatile(v) };
        // SAFETY: as for `write`.
        let read = |off: usize| unsafe { base.add(off).cast::<u64>().read_volatile() };
        let deliver = |t: u64, irqs: u64| {
            write(abi::offset::SC_U2K_K, t + 20);
            write(abi::offset::SC_K2U_K, t + 30);
            write(abi::offset::IRQ_ENTRY, read(abi::offset::IRQ_EXIT) + irqs);
            write(abi::offset::IRQ_EXIT, read(abi::offset::IRQ_ENTRY));
        };
        let mut mode = Mode::Split(page);
        let mut iret = 0;
        let taken = take(&mut mode, abi::SYSCALL_SLOTS, 5, &mut iret, |i| {
            let t = 1000 * i as u64;
            match i {
                // Delivered normally; sample 1 returned through IRET and an
                // interrupt came before its entry.
                0 | 1 => {
                    deliver(t, i as u64);
                    write(abi::offset::SC_SEQ, read(abi::offset::SC_SEQ) + 1);
                    let path = if i == 1 { abi::RET_PATH_IRET } else { 0 };
                    // SAFETY: SC_RET_PATH is the page's (4-aligned) u32 slot,
                    // in the same live mapping as `write`'s.
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
                    deliver(t, 0);
                    write(abi::offset::SC_SEQ, read(abi::offset::SC_SEQ) + 2);
                }
            }
            stamp::Stamps {
                open: t + 10,
                close: t + 40,
                aux_open: 0,
                aux_close: 0,
            }
        });
        (taken, iret)
    }

    fn assert_each_sample_judged_and_read(taken: &[Taken], iret: u64) {
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
        assert_eq!(
            (
                taken[1].sample.u2k_u,
                taken[1].sample.u2k_k,
                taken[1].sample.k2u_u
            ),
            (1010, 1020, 1040)
        );
        assert_eq!(taken[1].sample.interrupts, Some(1));
        assert_eq!(
            taken[0].sample.interrupts,
            Some(1),
            "its tail may have been hit"
        );
        assert_eq!(taken[3].sample.u2k_k, UNFILLED);
        assert_eq!(iret, 1);
    }

    /// The crossing built from the samples counts each verdict where it
    /// belongs.
    fn assert_the_crossing_counts_each_verdict(taken: &[Taken]) {
        let mut kept = Kept::default();
        kept.add_round(taken);
        let c = split_crossing(
            GETPPID,
            5,
            &kept,
            &Corrections::derive(5, Some((0, 0))),
            false,
        );
        assert_eq!(
            (
                c.samples_valid,
                c.samples_unfilled,
                c.samples_other_rejected
            ),
            (2, 1, 2)
        );
        assert_eq!(c.u2k.unwrap().raw.median, 10);
        assert_eq!(c.samples_interrupted, 2);
    }

    #[test]
    fn split_sampling_arms_reads_and_judges_each_sample() {
        let (taken, iret) = split_samples_with_the_test_as_kernel();
        assert_each_sample_judged_and_read(&taken, iret);
        assert_the_crossing_counts_each_verdict(&taken);
        let _ = UNTAKEN;
    }

    /// With the hooks' sequences timed, the kernel pairs are theirs (the
    /// SYSCALL kind's; the #PF kind's and KPAIR's bare reads kept beside),
    /// and getppid's on/off figure carries their prediction.
    #[test]
    fn the_hooks_sequences_are_the_kernel_pairs() {
        let user = || vec![vec![49u64; 9]];
        let mut r = Rounds {
            user_pair: user(),
            user_sweep: Vec::new(),
            kernel_pair: vec![vec![25; 9]],
            kernel_pair_inner: vec![vec![24; 9]],
            getppid: Kept::default(),
            getppid_iret: 0,
            getppid_on: vec![vec![1000; 9]],
            getppid_off: vec![vec![900; 9]],
            hook_seq: Ok(vec![hookseq::Timings {
                syscall_pair: vec![49; 9],
                syscall_inner: vec![73; 9],
                pf_pair: vec![74; 9],
                pf_inner: vec![98; 9],
                getppid_on: vec![147; 9],
                getppid_off: vec![73; 9],
            }]),
            first_touch: Kept::default(),
            refault: Ok(Kept::default()),
            thp_refused: false,
        };
        r.getppid
            .add_round(&[taken(s(0, 100, 400, 1000), Verdict::Keep)]);
        let costs = stamp_costs(&r, Some(24.5));
        let (c, b) = (
            costs.kernel_pair.clone().unwrap(),
            costs.kernel_pair_inner.clone().unwrap(),
        );
        assert_eq!((c.median(), b.median()), (49, 73));
        assert!(c.first.contains("XPERF_K2U_STAMP"), "{c:?}");
        assert_eq!(costs.corrections, Corrections::derive(49, Some((49, 73))));
        let seq = costs.hook_sequences.as_ref().unwrap();
        assert_eq!((seq.pf_pair.median(), seq.pf_inner.median()), (74, 98));
        assert_eq!((seq.bare_pair.median(), seq.bare_inner.median()), (25, 24));
        assert_eq!(
            seq.pf_corrections(&costs),
            Corrections::derive(49, Some((74, 98)))
        );
        let hooks = &costs.hooks[0];
        assert_eq!((hooks.delta, hooks.predicted), (100, Some(74)));
        // Not timed: KPAIR's bare reads, no prediction.
        r.hook_seq = Err("arch_prctl refused".into());
        let costs = stamp_costs(&r, Some(24.5));
        assert_eq!(costs.kernel_pair.unwrap().median(), 25);
        assert!(costs.hook_sequences.is_none() && costs.hooks[0].predicted.is_none());
    }

    /// Issue item 3: getppid's hooks on - off (613) far from what the
    /// hooks' sequences add (74) is a warning in the report's JSON; the
    /// same sequences adding 600 are within two quanta, and no warning.
    #[test]
    fn hooks_on_off_far_from_their_sequences_is_a_warning_in_the_json() {
        let rounds = |seq_on: u64| Rounds {
            user_pair: vec![vec![49u64; 9]],
            user_sweep: Vec::new(),
            kernel_pair: vec![vec![25; 9]],
            kernel_pair_inner: vec![vec![24; 9]],
            getppid: Kept::default(),
            getppid_iret: 0,
            getppid_on: vec![vec![1613; 10]],
            getppid_off: vec![vec![1000; 10]],
            hook_seq: Ok(vec![hookseq::Timings {
                syscall_pair: vec![49; 9],
                syscall_inner: vec![73; 9],
                pf_pair: vec![74; 9],
                pf_inner: vec![98; 9],
                getppid_on: vec![seq_on; 9],
                getppid_off: vec![73; 9],
            }]),
            first_touch: Kept::default(),
            refault: Ok(Kept::default()),
            thp_refused: false,
        };
        let json = |seq_on: u64| serde_json::to_string(&stamp_costs(&rounds(seq_on), Some(24.5)));
        let far = json(147).unwrap();
        assert!(far.contains("getppid: hooks on - off 613 ticks"), "{far}");
        let near = json(673).unwrap();
        assert!(!near.contains("hooks on - off"), "{near}");
    }

    #[test]
    fn small_native_run_has_every_crossing_and_count() {
        let config = Config {
            raw: true,
            ..Config::native(64, 8, 256, 2)
        };
        let report = run(&config).unwrap();
        assert_eq!(report.environment, Environment::BareMetal);
        let names: Vec<&str> = report.crossings.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [PF_FIRST_TOUCH, PF_REFAULT, GETPPID]);
        for c in &report.crossings {
            let accounted = c.samples_valid
                + c.samples_unfilled
                + c.samples_out_of_order
                + c.samples_other_rejected
                + c.samples_migrated;
            assert_eq!(accounted, 128, "{}", c.name);
            assert_eq!(c.samples.as_ref().map(Vec::len), Some(128));
        }
        assert_eq!(report.null_overhead.count, 512);
        assert_eq!(report.method.rounds, 2);
        assert!(report.method.pinned_cpu.is_some());
        let costs = report.stamp_costs.as_ref().unwrap();
        assert_eq!(costs.user_pair.round_medians.len(), 2);
        // A kernel with transparent huge pages accepts MADV_NOHUGEPAGE on
        // the fault regions, so no run there notes a refusal.
        let thp = &report.machine.as_ref().unwrap().thp;
        let refused = report.notes.iter().any(|n| n.contains("was refused"));
        assert!(thp.is_empty() || !refused, "THP {thp}: {:?}", report.notes);
        // pf-host-miss asked for without the VMM's channel: refused.
        let e = run(&Config {
            host_miss: 4,
            ..config.clone()
        })
        .unwrap_err();
        assert!(e.to_string().contains("needs the VMM's channel"), "{e}");
    }

    /// `--interrupt-path` adds its four crossings after the others, between
    /// the run's CPU and another, with their notes; the correction is the
    /// user stamp pair's round trip.
    #[test]
    fn the_interrupt_path_comes_after_the_crossings_when_asked_for() {
        let config = Config {
            interrupt_path: true,
            ..Config::native(16, 2, 64, 1)
        };
        let report = run(&config).unwrap();
        let names: Vec<&str> = report.crossings.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names[3..],
            [
                names::WAKEUP_CROSS_CPU,
                names::MPROTECT_SHOOTDOWN,
                names::MPROTECT_LOCAL,
                names::TIMER_SLEEP
            ]
        );
        let timer = &report.crossings[6];
        assert_eq!(timer.samples_valid, 16);
        let correction = report
            .stamp_costs
            .as_ref()
            .unwrap()
            .corrections
            .user_round_trip;
        let rt = timer.round_trip.as_ref().unwrap();
        assert_eq!(rt.correction, Some(correction));
        assert!(report.notes.iter().any(|n| n.starts_with("timer-sleep: ")));
        let cpu = report.method.pinned_cpu.unwrap();
        // The other CPU is another one: with none online the cross-CPU
        // kinds say so, else their note names two CPUs.
        let online = crate::affinity::online_cpus();
        let wakeup = &report.crossings[3];
        if online.iter().all(|&c| c == cpu) {
            assert!(matches!(wakeup.status, Status::Unsupported { .. }));
        } else {
            let note = report
                .notes
                .iter()
                .find(|n| n.starts_with("wakeup-cross-cpu"));
            let note = note.expect("the wake-up's note");
            assert!(!note.contains(&format!("cpu{cpu} and cpu{cpu}")), "{note}");
        }
        assert!(timer.samples.is_none(), "not raw");
        assert!(report
            .notes
            .iter()
            .any(|n| n.contains(&format!("on cpu{cpu}"))));
    }

    /// A config for the tests that run the rounds natively.
    fn small_config(rounds: u32) -> Config {
        Config::native(16, 2, 64, rounds)
    }

    /// Told fewer checkpoints than the rounds pass, the calibrator takes
    /// every exit before the last round; told more, some never.
    #[test]
    fn the_calibrator_is_told_every_checkpoint_the_rounds_pass() {
        for rounds in [0, 1, 3] {
            let mut cal = Calibrator::new(0, calibration_checkpoints(rounds)).unwrap();
            let mut mode = Mode::RoundTrip("no hooks".into());
            measure_rounds(&small_config(rounds), &mut mode, &mut cal).unwrap();
            let (passed, told) = cal.checkpoints();
            assert_eq!(passed, told, "{rounds} rounds");
        }
    }

    /// With the kernel's stamps, getppid's crossing takes the SYSCALL
    /// hooks' pairs and the two #PF crossings the #PF hooks' pairs.
    #[test]
    fn split_crossings_take_their_own_hooks_pairs() {
        let one = || {
            let mut k = Kept::default();
            k.add_round(&[taken(s(100, 400, 900, 1200), Verdict::Keep)]);
            k
        };
        let r = Rounds {
            user_pair: Vec::new(),
            user_sweep: Vec::new(),
            kernel_pair: Vec::new(),
            kernel_pair_inner: Vec::new(),
            getppid: one(),
            getppid_iret: 0,
            getppid_on: Vec::new(),
            getppid_off: Vec::new(),
            hook_seq: Ok(Vec::new()),
            first_touch: one(),
            refault: Ok(one()),
            thp_refused: false,
        };
        let config = small_config(1);
        let syscall = Corrections::derive(50, Some((50, 10)));
        let pf = Corrections::derive(50, Some((90, 40)));
        let mode = Mode::Split(StampPage::unregistered().unwrap());
        let json = |c: &Crossing| serde_json::to_value(c).unwrap();
        let built = crossings(&config, &r, &mode, &syscall, &pf);
        let kept = [&r.first_touch, r.refault.as_ref().unwrap(), &r.getppid];
        for (c, kept) in built.iter().zip(kept) {
            let (own, other) = if c.name == GETPPID {
                (&syscall, &pf)
            } else {
                (&pf, &syscall)
            };
            let expected = split_crossing(&c.name, config.samples, kept, own, false);
            let wrong = split_crossing(&c.name, config.samples, kept, other, false);
            assert_eq!(json(c), json(&expected), "{}", c.name);
            assert_ne!(json(c), json(&wrong), "{}: the pairs must tell", c.name);
        }
        assert_eq!(built.len(), 3);
    }

    /// The switch is the kernel's registration: on a kernel without the
    /// hooks (prctl's QUERY says EINVAL) neither direction can succeed.
    #[test]
    fn the_stamp_pages_switch_asks_the_kernel() {
        match abi::query() {
            Hooks::Absent => {
                let mut page = StampPage::unregistered().unwrap();
                let off = HookSwitch::off(&mut page).unwrap_err().to_string();
                assert!(off.contains("UNREGISTER"), "{off}");
                let on = HookSwitch::on(&mut page).unwrap_err().to_string();
                assert!(on.contains("PR_XPERF_REGISTER failed"), "{on}");
            }
            Hooks::Present(_) => {
                let mut page = StampPage::register().unwrap();
                HookSwitch::off(&mut page).unwrap();
                HookSwitch::on(&mut page).unwrap();
            }
            Hooks::Failed(errno) => panic!("PR_XPERF_QUERY failed with errno {errno}"),
        }
    }
}
