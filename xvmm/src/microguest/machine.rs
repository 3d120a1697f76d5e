//! The microguest's VM for each measurement phase: create it (or take the
//! one the last phase ended well in, [`VmPolicy::Reuse`]), put the tables,
//! the code and the command into guest memory, set the registers, run it to
//! its doorbell and collect the stamps. A phase the hypervisor refuses
//! (triple fault, emulation failure) or that faults loses its VM, so it
//! costs only that crossing: the next phase gets a fresh one. Every phase
//! rewrites all the state it runs on (memory, registers from the vCPU's
//! state as created, the MSRs it uses), so a reused VM starts a phase as a
//! fresh one does; the one state a rewrite cannot reset, page tables the
//! guest changed (the #PF loop), costs the next phase a fresh VM.
//!
//! The guest is untrusted: it can only end a phase through a fixed set of ports,
//! the VMM reads exactly the sample bytes it asked for (never a guest-supplied
//! length), and the number of exits a phase may make is bounded.

use super::guest::{self, Kind};
use super::kinds::{Role, VmmExit};
use super::layout::{self, control, selector};
use super::receiver::{self, start_now, ReceiverEnd};
use super::tables;
use crate::arch::x86_64::cpuid;
use crate::arch::x86_64::gdt::kvm_segment_from_gdt;
use crate::arch::x86_64::msr::{self, EFER_LMA, EFER_LME, EFER_SCE};
use crate::arch::x86_64::regs::{
    X86_CR0_ET, X86_CR0_NE, X86_CR0_PE, X86_CR0_PG, X86_CR4_OSXSAVE, X86_CR4_PAE,
};
use crate::devices::pm_timer::PmTimer;
use crate::host_trace::{ExitTracer, TraceSummary};
use crate::vcpu::stats::ExitCounter;
use crate::vcpu::{
    run_loop, Action, ExitHandler, Fatal, Machine, MachineSpec, RunControl, TscOffset, Vcpu,
    VcpuConfig,
};
use crate::vm::VmConfig;
use crate::{Error, Result};
use kvm_bindings::{kvm_msr_entry, kvm_regs, kvm_sregs};
use kvm_ioctls::VcpuExit;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use xvmm_host::tsc;

const X86_CR0_WP: u64 = 1 << 16;
/// RFLAGS bits SYSCALL clears: TF, IF, DF, AC.
const SYSCALL_MASK: u64 = (1 << 8) | (1 << 9) | (1 << 10) | (1 << 18);

/// How every phase VM is set up.
#[derive(Clone, Debug, Default)]
pub struct MachineConfig {
    /// KVM_SET_TSC_KHZ for the guest.
    pub tsc_khz: Option<u32>,
    /// Guest TSC offset; `None` uses 0 where KVM lets us set it, so guest and
    /// host stamps share one clock.
    pub tsc_offset: Option<i64>,
    /// What the kernel's stamps are: as assembled, plain RDTSC (for
    /// hypervisors that cannot execute LFENCE/RDTSCP at CPL0), or none.
    pub kernel_stamps: guest::KernelStamps,
    /// Trace the phase's exits on the host (`kvm_exit`/`kvm_entry`).
    pub trace: bool,
    /// The host CPU the IPI rows' receiver vCPU thread is pinned to; `None`:
    /// the first usable CPU other than the sender's ([`super::receiver::receiver_cpu`]).
    pub receiver_cpu: Option<usize>,
}

/// What the VMM learnt about the VM it created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestFacts {
    /// The guest CPU vendor string (CPUID 0).
    pub vendor: String,
    /// CPUID 0x40000000 EBX/ECX/EDX as the guest sees it.
    pub hypervisor_signature: String,
    pub tsc_khz: u32,
    /// KVM_CAP_X86_USER_SPACE_MSR: unknown-MSR accesses reach the VMM.
    pub user_space_msr: bool,
    /// XSAVE in the guest's CPUID (so CR4.OSXSAVE is set and XSETBV runs).
    pub xsave: bool,
    /// KVM took the ioeventfds on [`layout::PORT_EVENTFD`] and
    /// [`layout::MMIO_EVENTFD_GPA`].
    pub ioeventfds: bool,
    /// IA32_TSC_ADJUST in the guest's CPUID.
    pub tsc_adjust: bool,
    /// IBPB (IA32_PRED_CMD) in the guest's CPUID.
    pub ibpb: bool,
    /// IBRS (IA32_SPEC_CTRL bit 0) in the guest's CPUID.
    pub ibrs: bool,
    /// IA32_TSX_CTRL: IA32_ARCH_CAPABILITIES in the guest's CPUID, and its
    /// TSX_CTRL bit in the value KVM gives the vCPU.
    pub tsx_ctrl: bool,
    /// KVM_CAP_IRQCHIP: KVM can emulate the PIC, IOAPIC and LAPIC.
    pub irqchip: bool,
    /// x2APIC in the guest's CPUID.
    pub x2apic: bool,
    /// KVM_CAP_TSC_DEADLINE_TIMER: the LAPIC timer's TSC-deadline mode.
    pub tsc_deadline: bool,
    /// KVM_CAP_MAX_VCPUS: the most vCPUs KVM runs in one VM.
    pub max_vcpus: usize,
    /// Why KVM's count of the vCPU's exits cannot be read; `None` when
    /// every phase has it ([`PhaseEnd::Done`]'s `kvm_exits`).
    pub no_exit_count: Option<String>,
}

impl GuestFacts {
    /// AMD (and Hygon) CPUs: VMMCALL, and no SYSENTER in long mode.
    pub fn is_amd(&self) -> bool {
        self.vendor == "AuthenticAMD" || self.vendor == "HygonGenuine"
    }
}

/// One measurement the guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    pub kind: Kind,
    pub warmup: u64,
    pub samples: u64,
    /// Kind-specific parameter (imul chain length).
    pub param: u64,
}

/// Host stamps around one exit that reached the VMM: right after KVM_RUN
/// returned, and right before it was called again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostStamps {
    pub exited: u64,
    pub reentered: u64,
}

/// An exception the guest did not expect, as its handler recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestFault {
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub cr2: u64,
}

impl std::fmt::Display for GuestFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = vector_name(self.vector);
        write!(
            f,
            "unexpected exception {name} (vector {}) at RIP {:#x} (CPL {}, error code {:#x}, CR2 {:#x}, RSP {:#x})",
            self.vector,
            self.rip,
            self.cs & 3,
            self.error,
            self.cr2,
            self.rsp
        )
    }
}

/// Mnemonic of an exception vector.
pub fn vector_name(vector: u64) -> &'static str {
    const NAMES: [&str; 32] = [
        "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "#CSO", "#TS", "#NP", "#SS",
        "#GP", "#PF", "#15", "#MF", "#AC", "#MC", "#XM", "#VE", "#CP", "#22", "#23", "#24", "#25",
        "#26", "#27", "#HV", "#VC", "#SX", "#31",
    ];
    match vector {
        v if v < 32 => NAMES[xvmm_results::num::usize_from(v)],
        guest::OTHER_VECTOR => "interrupt >= 32",
        _ => "invalid command",
    }
}

/// How a phase ended.
#[derive(Debug)]
pub enum PhaseEnd {
    /// The guest rang the doorbell: `stamps` holds `samples * stride / 8` words.
    Done {
        stamps: Vec<u64>,
        host: Vec<HostStamps>,
        /// The guest TSC offset (guest TSC = host TSC + offset) when KVM
        /// reported the same value before and after the phase; `None` when
        /// unknown or when it moved (KVM re-bases it on hosts whose TSC is
        /// unstable), so host and guest stamps cannot be related.
        tsc_offset: Option<i64>,
        /// With [`MachineConfig::trace`]: every traced exit as (`kvm_exit`,
        /// `kvm_entry`) host TSC, in order.
        traced: Option<Vec<(u64, u64)>>,
        /// The exits KVM counted for the (sending) vCPU from the phase's
        /// first KVM_RUN to its doorbell, warm-up and the doorbell's
        /// included ([`crate::vcpu::stats`]); `None` where it cannot say.
        kvm_exits: Option<u64>,
    },
    /// The hypervisor stopped the VM (triple fault, emulation failure...).
    Refused { reason: String },
    /// The guest reported an exception it did not expect.
    Fault(GuestFault),
}

/// Traces this (the vCPU) thread's exits.
fn start_tracer() -> Result<ExitTracer> {
    // SAFETY: gettid has no arguments and cannot fail.
    ExitTracer::start(&[unsafe { libc::gettid() }])
}

/// The traced exits as (exit, entry) host times, sorted by exit.
fn exit_pairs(t: &TraceSummary) -> Vec<(u64, u64)> {
    let mut pairs: Vec<(u64, u64)> = t.trace.exits.iter().map(|e| (e.exit, e.entry)).collect();
    pairs.sort_unstable();
    pairs
}

/// How a run's phases get their VM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VmPolicy {
    /// The VM of the last phase that reached its doorbell, when it was
    /// created with the same TSC settings; else a fresh one.
    #[default]
    Reuse,
    /// A VM of its own for every phase (the runs before reuse, kept as the
    /// benchmark's peer and the tests' oracle).
    FreshPerPhase,
}

/// Where one phase's wall time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// KVM_CREATE_VM, its memory and memory slots, the vCPU (zero when reused).
    pub create: Duration,
    /// Guest memory (tables, code, control block, the sample buffer's fill)
    /// and the vCPU's registers.
    pub load: Duration,
    /// The exit loop: the guest in KVM_RUN (warm-up and samples) and xvmm's
    /// handling of each exit.
    pub run: Duration,
    /// Exits the phase took (KVM_RUN returns, the doorbell's included).
    pub exits: u64,
    /// Of `exits`, those on the measured path (warm-up's and samples').
    pub measured_exits: u64,
    /// Host TSC ticks in xvmm from each measured exit's return from KVM_RUN
    /// to the next KVM_RUN (the report's "in VMM"), summed.
    pub vmm_ticks: u64,
    /// Reading the stamps back, and the VM's teardown when it is not kept.
    pub collect: Duration,
}

impl PhaseTimes {
    /// The phase's wall time.
    pub fn total(&self) -> Duration {
        self.create + self.load + self.run + self.collect
    }
}

/// One phase a [`Vms`] ran, and its times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseRecord {
    pub kind: Kind,
    pub warmup: u64,
    pub samples: u64,
    /// Whether it ran in the VM of an earlier phase.
    pub reused: bool,
    pub times: PhaseTimes,
}

/// A created VM and what the phases need of it.
struct Loaded {
    machine: Machine,
    facts: GuestFacts,
    /// The vCPU's special registers as KVM created them: every phase starts
    /// from these, whatever the last phase left.
    sregs: kvm_sregs,
    /// KVM's count of the (sending) vCPU's exits, where it has one.
    exit_counter: Option<ExitCounter>,
    /// The receiver vCPU's (the IPI rows' vCPU 1), as KVM created them.
    receiver_sregs: Option<kvm_sregs>,
    /// What it was created for: the TSC settings (`MachineConfig::tsc_khz`,
    /// `tsc_offset`) and whether it has the in-kernel irqchip.
    made_for: MadeFor,
}

/// The settings a VM is created with; a VM is reused only for a phase that
/// wants the same: TSC rate and offset, the irqchip, the vCPU count.
type MadeFor = (Option<u32>, Option<i64>, bool, u8);

fn made_for(cfg: &MachineConfig, kind: Kind) -> MadeFor {
    (
        cfg.tsc_khz,
        cfg.tsc_offset,
        kind.needs_irqchip(),
        kind.vcpus(),
    )
}

impl Loaded {
    fn new(cfg: &MachineConfig, made_for: MadeFor) -> Result<Loaded> {
        let machine = new_machine(cfg, made_for.2, made_for.3)?;
        let ioeventfds = register_ioeventfds(&machine.vm.fd);
        let vcpu = &machine.vcpu;
        let exit_counter = ExitCounter::open(&vcpu.fd);
        let facts = GuestFacts {
            vendor: cpuid_string(vcpu, 0, [1, 3, 2]),
            hypervisor_signature: cpuid_string(vcpu, 0x4000_0000, [1, 2, 3]),
            tsc_khz: vcpu.tsc_khz,
            user_space_msr: machine.user_space_msr,
            xsave: cpuid::has_xsave(vcpu.cpuid.as_slice()),
            ioeventfds,
            tsc_adjust: cpuid::has_tsc_adjust(vcpu.cpuid.as_slice()),
            ibpb: cpuid::has_ibpb(vcpu.cpuid.as_slice()),
            ibrs: cpuid::has_ibrs(vcpu.cpuid.as_slice()),
            tsx_ctrl: has_tsx_ctrl(vcpu),
            irqchip: machine.vm.kvm.check_extension(kvm_ioctls::Cap::Irqchip),
            x2apic: cpuid::has_x2apic(vcpu.cpuid.as_slice()),
            tsc_deadline: machine
                .vm
                .kvm
                .check_extension(kvm_ioctls::Cap::TscDeadlineTimer),
            max_vcpus: machine.vm.kvm.get_max_vcpus(),
            no_exit_count: exit_counter.as_ref().err().cloned(),
        };
        let sregs = vcpu
            .fd
            .get_sregs()
            .map_err(|e| Error::Kvm(format!("KVM_GET_SREGS failed: {e}")))?;
        let receiver_sregs = machine
            .aps
            .first()
            .map(|ap| ap.fd.get_sregs())
            .transpose()
            .map_err(|e| Error::Kvm(format!("KVM_GET_SREGS (vCPU 1) failed: {e}")))?;
        Ok(Loaded {
            machine,
            facts,
            sregs,
            exit_counter: exit_counter.ok(),
            receiver_sregs,
            made_for,
        })
    }
}

/// Whether the vCPU has IA32_TSX_CTRL: its CPUID offers
/// IA32_ARCH_CAPABILITIES and the value KVM gives it has the TSX_CTRL bit.
fn has_tsx_ctrl(vcpu: &Vcpu) -> bool {
    cpuid::has_arch_capabilities(vcpu.cpuid.as_slice())
        && msr::get_msr(&vcpu.fd, msr::MSR_IA32_ARCH_CAPABILITIES)
            .is_ok_and(|caps| caps & msr::ARCH_CAP_TSX_CTRL_MSR != 0)
}

/// The VMs of a run's phases ([`VmPolicy`]) and where each phase's time went.
pub struct Vms {
    policy: VmPolicy,
    /// The VM the last phase ended well in, when reusing.
    idle: RefCell<Option<Loaded>>,
    records: RefCell<Vec<PhaseRecord>>,
    /// Refusals a fresh VM did not repeat, with their phase's kind.
    passing: RefCell<Vec<PassingRefusal>>,
    /// The longest a one-sample phase that ended well took, VM included.
    slowest_sample: Cell<Duration>,
}

/// How many more times a refused phase runs, each in a fresh VM, before
/// the refusal counts as the hypervisor's answer. A refusal that real
/// hardware gives is given again; a fault of the moment is not (nested
/// under QEMU's emulator, a rare triple fault hit one phase in about three
/// thousand: docs/testing/harness.md), and it must not cost the row.
pub const REFUSAL_RERUNS: usize = 2;

/// A phase the hypervisor refused, then ran when asked again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassingRefusal {
    pub kind: Kind,
    /// Why each refused run ended, in order.
    pub reasons: Vec<String>,
}

impl PassingRefusal {
    /// The refusals a phase of `kind` got before it ended as `end`: a
    /// passing refusal where it ended other than refused.
    fn of(kind: Kind, end: &PhaseEnd, refused: Vec<String>) -> Option<PassingRefusal> {
        let lasted = matches!(end, PhaseEnd::Refused { .. });
        (!refused.is_empty() && !lasted).then_some(PassingRefusal {
            kind,
            reasons: refused,
        })
    }
}

/// Runs a phase through `run` until it ends other than refused or has been
/// refused `1 + reruns` times; with the refusals it got before it ran.
fn rerun_refused<F>(
    reruns: usize,
    mut run: impl FnMut() -> Result<(PhaseEnd, F)>,
) -> Result<(PhaseEnd, F, Vec<String>)> {
    let mut refused = Vec::new();
    loop {
        match run()? {
            (PhaseEnd::Refused { reason }, _) if refused.len() < reruns => refused.push(reason),
            (end, facts) => return Ok((end, facts, refused)),
        }
    }
}

impl Vms {
    pub fn new(policy: VmPolicy) -> Vms {
        Vms {
            policy,
            idle: RefCell::new(None),
            records: RefCell::new(Vec::new()),
            passing: RefCell::new(Vec::new()),
            slowest_sample: Cell::new(Duration::ZERO),
        }
    }

    /// A VM of its own for every phase.
    pub fn fresh() -> Vms {
        Vms::new(VmPolicy::FreshPerPhase)
    }

    /// The phases run so far, in order; the record starts again empty.
    pub fn take_records(&self) -> Vec<PhaseRecord> {
        std::mem::take(&mut self.records.borrow_mut())
    }

    /// The longest a phase of one sample and no warm-up that ended well has
    /// taken so far, its VM's creation included: what a probe of one
    /// sample costs on this machine, at its slowest.
    pub fn slowest_sample(&self) -> Duration {
        self.slowest_sample.get()
    }

    /// The refusals that a rerun did not repeat so far; the list starts
    /// again empty.
    pub fn take_passing_refusals(&self) -> Vec<PassingRefusal> {
        std::mem::take(&mut self.passing.borrow_mut())
    }

    /// Runs `phase` in a VM and returns how it ended; a refused phase runs
    /// again in a fresh VM, up to [`REFUSAL_RERUNS`] times, and a refusal
    /// that did not last is kept for [`Vms::take_passing_refusals`].
    pub fn run(
        &self,
        rc: &RunControl,
        cfg: &MachineConfig,
        phase: &Phase,
    ) -> Result<(PhaseEnd, GuestFacts)> {
        let (end, facts, refused) =
            rerun_refused(REFUSAL_RERUNS, || self.run_once(rc, cfg, phase))?;
        self.passing
            .borrow_mut()
            .extend(PassingRefusal::of(phase.kind, &end, refused));
        Ok((end, facts))
    }

    /// Runs `phase` once. Only a phase that reached its doorbell leaves its
    /// VM for the next one.
    fn run_once(
        &self,
        rc: &RunControl,
        cfg: &MachineConfig,
        phase: &Phase,
    ) -> Result<(PhaseEnd, GuestFacts)> {
        let buffer_bytes = check_phase(phase)?;
        let start = Instant::now();
        let made_for = made_for(cfg, phase.kind);
        let kept = self
            .idle
            .borrow_mut()
            .take()
            .filter(|l| self.policy == VmPolicy::Reuse && l.made_for == made_for);
        let reused = kept.is_some();
        let mut loaded = match kept {
            Some(loaded) => loaded,
            None => Loaded::new(cfg, made_for)?,
        };
        let mut times = PhaseTimes {
            create: start.elapsed(),
            ..PhaseTimes::default()
        };
        let end = run_loaded(rc, cfg, phase, buffer_bytes, &mut loaded, &mut times);
        let facts = loaded.facts.clone();
        let teardown = Instant::now();
        let done = matches!(end, Ok(PhaseEnd::Done { .. }));
        if self.policy == VmPolicy::Reuse && done && !changes_page_tables(phase.kind) {
            *self.idle.borrow_mut() = Some(loaded);
        } else {
            drop(loaded);
        }
        times.collect += teardown.elapsed();
        if done && phase.samples <= 1 && phase.warmup == 0 {
            let slowest = self.slowest_sample.get().max(times.total());
            self.slowest_sample.set(slowest);
        }
        self.records.borrow_mut().push(PhaseRecord {
            kind: phase.kind,
            warmup: phase.warmup,
            samples: phase.samples,
            reused,
            times,
        });
        Ok((end?, facts))
    }
}

/// Whether a phase of `kind` changes its page tables from the guest: the
/// #PF loop toggles its pages' present bits. A hypervisor that shadows the
/// guest's page tables (PVM) tracks the guest's writes to them but not the
/// VMM's, so the next phase's rewrite would go unseen there (its first
/// access then does not fault: `xvmm/tests/microguest_reuse.rs`); such a
/// phase's VM is not reused.
fn changes_page_tables(kind: Kind) -> bool {
    kind.handler() == Some(super::kinds::Handler::PageFault)
}

/// Creates a VM for `phase`, runs it and returns how it ended.
pub fn run_phase(
    rc: &RunControl,
    cfg: &MachineConfig,
    phase: &Phase,
) -> Result<(PhaseEnd, GuestFacts)> {
    Vms::fresh().run(rc, cfg, phase)
}

/// The sample buffer's bytes `phase` fills, when the phase makes sense.
fn check_phase(phase: &Phase) -> Result<u64> {
    let buffer_bytes = phase
        .samples
        .checked_mul(phase.kind.stride())
        .filter(|&b| b <= layout::SAMPLES_SIZE)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{} samples do not fit the {} MiB sample buffer",
                phase.samples,
                layout::SAMPLES_SIZE >> 20
            ))
        })?;
    let role = phase.kind.role();
    if role == (Role::Stamps { chain: true }) {
        guest::chain_lengths(phase.param).map_err(Error::Usage)?;
    }
    if matches!(role, Role::Batch { .. }) && phase.param == 0 {
        return Err(Error::Usage("a batch needs at least one crossing".into()));
    }
    Ok(buffer_bytes)
}

/// Loads `phase` into `loaded`, runs it to its end and collects its stamps,
/// timing each step into `times`.
fn run_loaded(
    rc: &RunControl,
    cfg: &MachineConfig,
    phase: &Phase,
    buffer_bytes: u64,
    loaded: &mut Loaded,
    times: &mut PhaseTimes,
) -> Result<PhaseEnd> {
    let step = Instant::now();
    let Machine { vm, vcpu, aps, .. } = &mut loaded.machine;
    write_guest(&vm.memory, cfg, phase, buffer_bytes)?;
    let entries = guest::kernel_entries();
    setup_cpu(vcpu, &loaded.sregs, entries.start, layout::KERNEL_STACK_TOP)?;
    let mut receiver = match (aps.first_mut(), &loaded.receiver_sregs) {
        (Some(ap), Some(sregs)) => {
            setup_cpu(ap, sregs, entries.receiver_start, layout::AP_STACK_TOP)?;
            start_now(ap)?;
            Some(ap)
        }
        _ => None,
    };
    times.load = step.elapsed();

    let step = Instant::now();
    let offset_before = vcpu.tsc_offset().ok();
    let counter = loaded.exit_counter.as_ref();
    let counted_before = counter.and_then(|c| c.read().ok());
    let tracer = cfg.trace.then(start_tracer).transpose()?;
    let (end, exits) = match receiver.as_deref_mut() {
        Some(ap) => run_with_receiver(rc, vcpu, ap, cfg.receiver_cpu, phase),
        None => run_to_doorbell(rc, vcpu, phase),
    };
    // Finished (and the instance removed) whatever the run's end.
    let traced = tracer.map(ExitTracer::finish).transpose();
    // Timed before a stop or failure returns: a probe's timeout is run time.
    (times.run, times.exits) = (step.elapsed(), exits);
    let counted_after = counter.and_then(|c| c.read().ok());
    let kvm_exits = counted_before
        .zip(counted_after)
        .and_then(|(before, after)| after.checked_sub(before));
    let (end, traced) = (end?, traced?.map(|t| exit_pairs(&t)));
    let offset_after = vcpu.tsc_offset().ok();
    // With a receiver, both vCPUs' stamps must read one clock too.
    let receiver_offset = receiver.map(|ap| ap.tsc_offset().ok());
    let tsc_offset = offset_before
        .filter(|_| offset_before == offset_after)
        .filter(|_| receiver_offset.is_none_or(|r| r == offset_after));

    let step = Instant::now();
    let end = match end {
        RunEnd::Done(host) => {
            times.measured_exits = host.len() as u64;
            times.vmm_ticks = host
                .iter()
                .map(|h| h.reentered.saturating_sub(h.exited))
                .sum();
            let stamps = read_stamps(&vm.memory, phase, buffer_bytes)?;
            PhaseEnd::Done {
                stamps,
                host,
                tsc_offset,
                traced,
                kvm_exits,
            }
        }
        RunEnd::Refused(reason) => PhaseEnd::Refused { reason },
        RunEnd::Fault => PhaseEnd::Fault(read_fault(&vm.memory)?),
    };
    times.collect = step.elapsed();
    Ok(end)
}

/// The sample buffer's words after `phase` rang its done doorbell: exactly
/// the bytes it was asked for, whatever the guest claims.
fn read_stamps(memory: &GuestMemoryMmap, phase: &Phase, buffer_bytes: u64) -> Result<Vec<u64>> {
    let status: u64 = read_obj(memory, layout::CONTROL_GPA + control::STATUS)?;
    if status != layout::DONE_MAGIC {
        return Err(Error::Guest(format!(
            "the guest rang the done doorbell without finishing the {:?} phase (status {status:#x})",
            phase.kind
        )));
    }
    let mut bytes = vec![0u8; xvmm_results::num::usize_from(buffer_bytes)];
    memory
        .read_slice(&mut bytes, GuestAddress(layout::SAMPLES_GPA))
        .map_err(|e| Error::Guest(format!("cannot read the sample buffer: {e}")))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])))
        .collect())
}

/// One ioeventfd on [`layout::PORT_EVENTFD`] and one on
/// [`layout::MMIO_EVENTFD_GPA`], any value written: KVM keeps its own
/// reference to each eventfd, so ours can go (nothing reads them; a
/// counter, 2^64 - 2 at most, does not fill in any run). Whether KVM took
/// both.
fn register_ioeventfds(vm: &kvm_ioctls::VmFd) -> bool {
    use kvm_ioctls::{IoEventAddress, NoDatamatch};
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
    let register = |at: IoEventAddress| {
        EventFd::new(EFD_NONBLOCK)
            .is_ok_and(|evt| vm.register_ioevent(&evt, &at, NoDatamatch).is_ok())
    };
    register(IoEventAddress::Pio(u64::from(layout::PORT_EVENTFD)))
        && register(IoEventAddress::Mmio(layout::MMIO_EVENTFD_GPA))
}

/// A phase's VM and `vcpus` vCPUs, with KVM's in-kernel irqchip (PIC,
/// IOAPIC, LAPIC and PIT, none of them programmed to interrupt) where
/// `irqchip`.
fn new_machine(cfg: &MachineConfig, irqchip: bool, vcpus: u8) -> Result<Machine> {
    Machine::new(&MachineSpec {
        vm: VmConfig {
            mem_bytes: layout::MEM_BYTES,
            irqchip,
        },
        vcpu: VcpuConfig {
            tsc_khz: cfg.tsc_khz,
            // By default guest and host stamps share one clock where KVM lets
            // them; where it moves the offset anyway the phase reports it as
            // unknown (the read-back in `run_phase`).
            tsc_offset: cfg
                .tsc_offset
                .map_or(TscOffset::ZeroIfPossible, TscOffset::Exact),
            nr_vcpus: vcpus,
            ..VcpuConfig::boot()
        },
        user_space_msr: true,
    })
}

/// Concatenates CPUID registers of `function` (0=EAX..3=EDX in `order`) as text.
fn cpuid_string(vcpu: &Vcpu, function: u32, order: [usize; 3]) -> String {
    let Some(e) = vcpu
        .cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == function)
    else {
        return String::new();
    };
    let regs = [e.eax, e.ebx, e.ecx, e.edx];
    let bytes: Vec<u8> = order.iter().flat_map(|&i| regs[i].to_le_bytes()).collect();
    String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .to_string()
}

fn write_bytes(memory: &GuestMemoryMmap, gpa: u64, bytes: &[u8], what: &str) -> Result<()> {
    memory
        .write_slice(bytes, GuestAddress(gpa))
        .map_err(|e| Error::Memory(format!("cannot write the microguest {what}: {e}")))
}

fn read_obj(memory: &GuestMemoryMmap, gpa: u64) -> Result<u64> {
    memory
        .read_obj(GuestAddress(gpa))
        .map_err(|e| Error::Guest(format!("cannot read guest memory at {gpa:#x}: {e}")))
}

fn write_guest(
    memory: &GuestMemoryMmap,
    cfg: &MachineConfig,
    phase: &Phase,
    buffer_bytes: u64,
) -> Result<()> {
    let gdt: Vec<u8> = tables::gdt().iter().flat_map(|e| e.to_le_bytes()).collect();
    write_bytes(memory, layout::GDT_GPA, &gdt, "GDT")?;
    write_bytes(memory, layout::TSS_GPA, &tables::tss(), "TSS")?;
    write_bytes(
        memory,
        layout::IDT_GPA,
        &tables::idt(&guest::kernel_entries()),
        "IDT",
    )?;
    for (gpa, table) in tables::page_tables() {
        let bytes: Vec<u8> = table.iter().flat_map(|e| e.to_le_bytes()).collect();
        write_bytes(memory, gpa, &bytes, "page tables")?;
    }
    let mut kernel = guest::kernel_code().to_vec();
    if guest::set_kernel_stamps(&mut kernel, cfg.kernel_stamps).is_none() {
        return Err(Error::Guest(format!(
            "could not locate every kernel stamp to make it {:?}",
            cfg.kernel_stamps
        )));
    }
    write_bytes(memory, layout::KERNEL_CODE_GPA, &kernel, "kernel code")?;
    write_bytes(
        memory,
        layout::USER_CODE_GPA,
        guest::user_code(),
        "user code",
    )?;

    let mut block = vec![0u8; xvmm_results::num::usize_from(layout::PAGE)];
    let mut put = |offset: u64, value: u64| {
        let o = xvmm_results::num::usize_from(offset);
        block[o..o + 8].copy_from_slice(&value.to_le_bytes());
    };
    put(control::KIND, phase.kind as u64);
    put(control::WARMUP, phase.warmup);
    put(control::SAMPLES, phase.samples);
    put(control::STRIDE, phase.kind.stride());
    put(control::BUFFER, layout::SAMPLES_GPA);
    put(control::PARAM, phase.param);
    put(control::USER_DONE, guest::user_done_rip());
    write_bytes(memory, layout::CONTROL_GPA, &block, "control block")?;
    // Kernel slots the handler never fills keep this sentinel.
    let fill = vec![0xffu8; xvmm_results::num::usize_from(buffer_bytes)];
    write_bytes(memory, layout::SAMPLES_GPA, &fill, "sample buffer")
}

/// Long mode from `created`, the vCPU's special registers as KVM created
/// it, entering at `rip` with the stack at `rsp`.
fn setup_cpu(vcpu: &Vcpu, created: &kvm_sregs, rip: u64, rsp: u64) -> Result<()> {
    let fd = &vcpu.fd;
    let mut sregs = *created;
    let gdt = tables::gdt();
    let seg = |sel: u16| {
        // The selectors index the 9-entry GDT.
        let index = u8::try_from(sel >> 3).expect("a microguest selector");
        kvm_segment_from_gdt(gdt[usize::from(index)], index)
    };
    let data = seg(selector::KERNEL_SS);
    sregs.cs = seg(selector::KERNEL_CS);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    let mut tr = seg(selector::TSS);
    // VM entry wants TR to be a busy 64-bit TSS.
    tr.type_ = 11;
    sregs.tr = tr;
    sregs.gdt.base = layout::GDT_GPA;
    sregs.gdt.limit = tables::GDT_LIMIT;
    sregs.idt.base = layout::IDT_GPA;
    sregs.idt.limit = 256 * 16 - 1;
    sregs.cr0 = X86_CR0_PE | X86_CR0_ET | X86_CR0_NE | X86_CR0_WP | X86_CR0_PG;
    sregs.cr3 = layout::PML4_GPA;
    // OSXSAVE where the guest has XSAVE, for the xsetbv row (without it
    // XSETBV raises #UD and the row says so).
    let osxsave = if crate::arch::x86_64::cpuid::has_xsave(vcpu.cpuid.as_slice()) {
        X86_CR4_OSXSAVE
    } else {
        0
    };
    sregs.cr4 = X86_CR4_PAE | osxsave;
    sregs.efer = EFER_LME | EFER_LMA | EFER_SCE;
    fd.set_sregs(&sregs)
        .map_err(|e| Error::Kvm(format!("KVM_SET_SREGS (long mode) failed: {e}")))?;

    let entries = guest::kernel_entries();
    let e = |index, data| kvm_msr_entry {
        index,
        data,
        ..Default::default()
    };
    let star = (u64::from(selector::SYSRET_BASE) << 48) | (u64::from(selector::KERNEL_CS) << 32);
    msr::set_msrs(
        fd,
        &[
            e(msr::MSR_STAR, star),
            e(msr::MSR_LSTAR, entries.syscall),
            e(msr::MSR_SYSCALL_MASK, SYSCALL_MASK),
            e(msr::MSR_IA32_SYSENTER_CS, u64::from(selector::KERNEL_CS)),
            e(msr::MSR_IA32_SYSENTER_ESP, layout::KERNEL_STACK_TOP),
            e(msr::MSR_IA32_SYSENTER_EIP, entries.sysenter),
        ],
    )?;

    let regs = kvm_regs {
        rip,
        rsp,
        rflags: 2,
        ..Default::default()
    };
    fd.set_regs(&regs)
        .map_err(|e| Error::Kvm(format!("KVM_SET_REGS failed: {e}")))
}

enum RunEnd {
    Done(Vec<HostStamps>),
    Refused(String),
    Fault,
}

/// Whether an exit is the one on this kind's measured path (its
/// [`Kind::reaches_vmm`], at the port, address or MSR the guest uses).
fn measured_exit(kind: Kind, exit: &VcpuExit<'_>) -> bool {
    let Some(expected) = kind.reaches_vmm() else {
        return false;
    };
    match (expected, exit) {
        (VmmExit::IoOut, VcpuExit::IoOut(port, _)) => *port == layout::PORT_MEASURE,
        (VmmExit::IoIn, VcpuExit::IoIn(port, _)) => *port == layout::PORT_MEASURE,
        (VmmExit::PmTimerIn, VcpuExit::IoIn(port, _)) => *port == layout::PORT_PM_TIMER,
        (VmmExit::MmioWrite, VcpuExit::MmioWrite(addr, _)) => *addr == layout::MMIO_GPA,
        (VmmExit::Hlt, VcpuExit::Hlt) => true,
        (VmmExit::Rdmsr, VcpuExit::X86Rdmsr(e)) => e.index == layout::PROBE_MSR,
        (VmmExit::Wrmsr, VcpuExit::X86Wrmsr(e)) => e.index == layout::PROBE_MSR,
        _ => false,
    }
}

/// The microguest's side of [`run_loop`]: answers the exits on the kind's
/// measured path and stamps them; the doorbells end the phase.
struct Doorbell {
    kind: Kind,
    expected_exits: u64,
    host: Vec<HostStamps>,
    /// When the last measured exit returned from KVM_RUN.
    pending: Option<u64>,
    /// When the latest KVM_RUN returned.
    exited: u64,
    /// Exits so far (for the profile, counted after the host stamp).
    exits: u64,
    /// The PM timer the pio-in-pmtimer row reads.
    pm_timer: PmTimer,
}

impl ExitHandler for Doorbell {
    type End = RunEnd;

    // Host stamps bracket KVM_RUN: the interval from `exited` to the next
    // `reentered` is the time spent in xvmm for that exit.
    fn before_run(&mut self) {
        let reentered = tsc::open();
        if let Some(exited) = self.pending.take() {
            self.host.push(HostStamps { exited, reentered });
        }
    }

    fn after_run(&mut self) {
        (self.exited, _) = tsc::close();
    }

    fn handle(&mut self, mut exit: VcpuExit<'_>) -> Result<Action<RunEnd>> {
        self.exits += 1;
        if measured_exit(self.kind, &exit) {
            if self.host.len() as u64 >= self.expected_exits {
                return Err(Error::Guest(format!(
                    "the guest made more than the {} exits its {:?} phase needs",
                    self.expected_exits, self.kind
                )));
            }
            match &mut exit {
                VcpuExit::IoIn(layout::PORT_PM_TIMER, data) => {
                    let count = self.pm_timer.read().to_le_bytes();
                    let n = data.len().min(count.len());
                    data[..n].copy_from_slice(&count[..n]);
                }
                VcpuExit::IoIn(_, data) => data.fill(0),
                VcpuExit::X86Rdmsr(e) => {
                    *e.data = 0;
                    *e.error = 0;
                }
                VcpuExit::X86Wrmsr(e) => *e.error = 0,
                _ => {}
            }
            self.pending = Some(self.exited);
            return Ok(Action::Resume);
        }
        Ok(match exit {
            VcpuExit::IoOut(layout::PORT_DONE, _) => {
                Action::End(RunEnd::Done(std::mem::take(&mut self.host)))
            }
            VcpuExit::IoOut(layout::PORT_FAULT, _) => Action::End(RunEnd::Fault),
            other => Action::Fatal(Fatal::Other(format!("{other:?}"))),
        })
    }

    /// What the hypervisor refuses costs only this phase; an exit the guest
    /// never makes ends the run.
    fn fatal(&mut self, fatal: Fatal, why: String) -> Result<RunEnd> {
        match fatal {
            Fatal::Shutdown | Fatal::Internal | Fatal::FailEntry(..) => Ok(RunEnd::Refused(why)),
            _ => Err(Error::Guest(format!(
                "{why} during the {:?} phase",
                self.kind
            ))),
        }
    }
}

/// How the phase ended, and the exits it took.
fn run_to_doorbell(rc: &RunControl, vcpu: &mut Vcpu, phase: &Phase) -> (Result<RunEnd>, u64) {
    let expected_exits = phase.warmup.saturating_add(phase.samples);
    let mut doorbell = Doorbell {
        kind: phase.kind,
        expected_exits,
        host: Vec::with_capacity(expected_exits.min(1 << 20) as usize),
        pending: None,
        exited: 0,
        exits: 0,
        pm_timer: PmTimer::new(),
    };
    let end = run_loop(&mut rc.attach(vcpu), &mut doorbell);
    (end, doorbell.exits)
}

/// Runs the phase's vCPU 0 to its doorbell as [`run_to_doorbell`] does,
/// with vCPU 1, the IPI rows' receiver, beside it on a thread of its own
/// ([`receiver::run_beside`]); a receiver's fault or refusal is the
/// phase's end.
fn run_with_receiver(
    rc: &RunControl,
    vcpu: &mut Vcpu,
    ap: &mut Vcpu,
    cpu: Option<usize>,
    phase: &Phase,
) -> (Result<RunEnd>, u64) {
    let ran = receiver::run_beside(rc, ap, cpu, |part| run_to_doorbell(part, vcpu, phase));
    let ((end, exits), receiver_end) = match ran {
        Ok(ran) => ran,
        Err(e) => return (Err(e), 0),
    };
    let end = match receiver_end {
        ReceiverEnd::Stopped => end,
        ReceiverEnd::Fault => Ok(RunEnd::Fault),
        ReceiverEnd::Refused(why) => Ok(RunEnd::Refused(format!("vCPU 1: {why}"))),
        ReceiverEnd::Failed(e) => Err(e),
    };
    (end, exits)
}

fn read_fault(memory: &GuestMemoryMmap) -> Result<GuestFault> {
    let word = |i: u64| read_obj(memory, layout::CONTROL_GPA + control::FAULT + 8 * i);
    Ok(GuestFault {
        vector: word(0)?,
        error: word(1)?,
        rip: word(2)?,
        cs: word(3)?,
        rflags: word(4)?,
        rsp: word(5)?,
        cr2: word(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `ends` in turn through [`rerun_refused`]: the end it gives, the
    /// refusals before it, and how many runs it took.
    fn rerun(reruns: usize, ends: &[Option<&str>]) -> (String, Vec<String>, usize) {
        let mut runs = 0;
        let got = rerun_refused(reruns, || {
            let end = match ends[runs] {
                Some(why) => PhaseEnd::Refused { reason: why.into() },
                None => PhaseEnd::Done {
                    stamps: vec![runs as u64],
                    host: Vec::new(),
                    tsc_offset: None,
                    traced: None,
                    kvm_exits: None,
                },
            };
            runs += 1;
            Ok((end, ()))
        })
        .expect("no error");
        let end = match got.0 {
            PhaseEnd::Done { stamps, .. } => format!("done {stamps:?}"),
            PhaseEnd::Refused { reason } => format!("refused {reason}"),
            PhaseEnd::Fault(f) => format!("fault {f}"),
        };
        (end, got.2, runs)
    }

    #[test]
    fn a_refusal_that_a_rerun_does_not_repeat_gives_the_reruns_end() {
        assert_eq!(rerun(2, &[None]), ("done [0]".into(), vec![], 1));
        assert_eq!(
            rerun(2, &[Some("triple fault"), None]),
            ("done [1]".into(), vec!["triple fault".to_string()], 2)
        );
        assert_eq!(
            rerun(2, &[Some("a"), Some("b"), None]),
            ("done [2]".into(), vec!["a".to_string(), "b".to_string()], 3)
        );
    }

    #[test]
    fn a_refusal_every_run_repeats_is_the_answer_after_the_last_rerun() {
        // Refused three times with two reruns: the third reason is the end,
        // the first two are the refusals before it; no fourth run.
        let ends = [Some("a"), Some("b"), Some("c"), None];
        assert_eq!(
            rerun(2, &ends),
            (
                "refused c".into(),
                vec!["a".to_string(), "b".to_string()],
                3
            )
        );
        assert_eq!(rerun(0, &ends), ("refused a".into(), vec![], 1));
    }

    #[test]
    fn a_refusal_passes_where_the_phase_then_ended_otherwise() {
        let refused = || PhaseEnd::Refused {
            reason: "again".into(),
        };
        let done = PhaseEnd::Done {
            stamps: Vec::new(),
            host: Vec::new(),
            tsc_offset: None,
            traced: None,
            kvm_exits: None,
        };
        let why = || vec!["triple fault".to_string()];
        assert_eq!(
            PassingRefusal::of(Kind::Hlt, &done, why()),
            Some(PassingRefusal {
                kind: Kind::Hlt,
                reasons: why()
            })
        );
        assert_eq!(PassingRefusal::of(Kind::Hlt, &done, Vec::new()), None);
        assert_eq!(PassingRefusal::of(Kind::Hlt, &refused(), why()), None);
        let fault = PhaseEnd::Fault(fault_at_zero(6));
        assert!(PassingRefusal::of(Kind::Hlt, &fault, why()).is_some());
    }

    fn fault_at_zero(vector: u64) -> GuestFault {
        GuestFault {
            vector,
            error: 0,
            rip: 0,
            cs: 0,
            rflags: 0,
            rsp: 0,
            cr2: 0,
        }
    }

    #[test]
    fn a_fault_or_an_error_is_not_rerun() {
        let mut runs = 0;
        let fault = fault_at_zero(13);
        let got = rerun_refused(2, || {
            runs += 1;
            Ok((PhaseEnd::Fault(fault), ()))
        })
        .unwrap();
        assert!(matches!(got.0, PhaseEnd::Fault(_)) && got.2.is_empty() && runs == 1);
        let mut runs = 0;
        let got: Result<(PhaseEnd, (), Vec<String>)> = rerun_refused(2, || {
            runs += 1;
            Err(Error::Guest("gone".into()))
        });
        assert!(got.is_err() && runs == 1);
    }

    #[test]
    fn fault_messages_name_vector_and_rip() {
        let f = GuestFault {
            vector: 13,
            error: 0x18,
            rip: 0x2_0042,
            cs: 0x2b,
            rflags: 0x3002,
            rsp: 0x3_7ff8,
            cr2: 0,
        };
        let text = f.to_string();
        assert!(text.contains("#GP (vector 13) at RIP 0x20042"), "{text}");
        assert!(text.contains("CPL 3"), "{text}");
        assert_eq!(vector_name(guest::OTHER_VECTOR), "interrupt >= 32");
        assert_eq!(vector_name(guest::OTHER_VECTOR + 1), "invalid command");
        assert_eq!(vector_name(14), "#PF");
    }

    fn doorbell(kind: Kind) -> Doorbell {
        Doorbell {
            kind,
            expected_exits: 1,
            host: Vec::new(),
            pending: None,
            exited: 42,
            exits: 0,
            pm_timer: PmTimer::new(),
        }
    }

    #[test]
    fn a_measured_exit_is_answered_and_stamped_within_the_phase_budget() {
        let mut d = doorbell(Kind::PioIn);
        let mut data = [0xaa; 4];
        let exit = VcpuExit::IoIn(layout::PORT_MEASURE, &mut data);
        assert!(matches!(d.handle(exit), Ok(Action::Resume)));
        assert_eq!((data, d.pending), ([0; 4], Some(42)));
        d.before_run();
        assert_eq!(d.host.len(), 1);
        let exit = VcpuExit::IoIn(layout::PORT_MEASURE, &mut data);
        let err = d.handle(exit).err().expect("over budget");
        assert!(err.to_string().contains("more than the 1 exits"), "{err}");
        let done = d.handle(VcpuExit::IoOut(layout::PORT_DONE, &[0]));
        assert!(matches!(done, Ok(Action::End(RunEnd::Done(h))) if h.len() == 1));
    }

    #[test]
    fn the_pm_timer_row_reads_a_running_24_bit_count() {
        let mut d = doorbell(Kind::PioInPmTimer);
        d.expected_exits = 2;
        let mut read = || {
            let mut data = [0xaa; 4];
            let exit = VcpuExit::IoIn(layout::PORT_PM_TIMER, &mut data);
            assert!(matches!(d.handle(exit), Ok(Action::Resume)));
            u32::from_le_bytes(data)
        };
        let first = read();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let second = read();
        assert!(second < 1 << 24, "{second:#x}");
        // 3 ms at 3.579545 MHz: 10738 ticks at least.
        assert!(second - first >= 10_738, "{first} {second}");
        // Another port is not this row's.
        let mut data = [0; 4];
        let exit = VcpuExit::IoIn(layout::PORT_MEASURE, &mut data);
        assert!(matches!(d.handle(exit), Ok(Action::Fatal(_))));
    }

    #[test]
    fn refused_exits_cost_the_phase_and_unexpected_ones_the_run() {
        let mut d = doorbell(Kind::KernelNull);
        for fatal in [Fatal::Shutdown, Fatal::Internal, Fatal::FailEntry(7, 0)] {
            let end = d.fatal(fatal, "why".into());
            assert!(matches!(end, Ok(RunEnd::Refused(r)) if r == "why"));
        }
        let exit = d.handle(VcpuExit::Hlt);
        assert!(matches!(exit, Ok(Action::Fatal(Fatal::Other(ref w))) if w == "Hlt"));
        let err = d.fatal(
            Fatal::Other("Hlt".into()),
            "unexpected VM exit Hlt at RIP 0x1".into(),
        );
        assert_eq!(
            err.err().map(|e| e.to_string()).as_deref(),
            Some("guest: unexpected VM exit Hlt at RIP 0x1 during the KernelNull phase")
        );
    }

    #[test]
    fn amd_detection() {
        let mut facts = GuestFacts {
            vendor: "AuthenticAMD".into(),
            ..Default::default()
        };
        assert!(facts.is_amd());
        facts.vendor = "GenuineIntel".into();
        assert!(!facts.is_amd());
    }
}
