//! The exits of guests that end the VM through the standard ports
//! ([`crate::devices::PortBus`]): port I/O dispatch, results doorbell, host
//! faults, halts, each handled for [`run_loop`]; a fatal exit ends the run
//! with `Error::Guest` naming the reason and RIP
//! ([`super::exit_loop::describe_fatal`]).

pub use super::exit_loop::Fatal;
use super::exit_loop::{fatal_exit, run_loop, Action, ExitHandler};
use super::RunningVcpu;
use crate::{Error, Result};
use kvm_ioctls::VcpuExit;

/// How a guest ended the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestEnd {
    /// Wrote this status to PORT_EXIT.
    Exit(u8),
    /// Reset through the i8042 or KVM_SYSTEM_EVENT_RESET (a reboot).
    Reset,
    /// KVM_SYSTEM_EVENT_SHUTDOWN (ACPI/PSCI power-off).
    PowerOff,
    /// Halted with interrupts off, at this RIP: nothing can wake it. This is
    /// how Linux powers off without ACPI ("System halted"). Only seen with
    /// [`crate::vcpu::RunControl::set_idle_probe`].
    Halted(u64),
}

/// KVM_MP_STATE_HALTED.
const MP_STATE_HALTED: u32 = 3;
/// RFLAGS.IF.
const RFLAGS_IF: u64 = 1 << 9;

/// Whether a vCPU kicked out of KVM_RUN sits in HLT with interrupts disabled
/// (its RIP then), i.e. will never run again.
fn halted_for_good(vcpu: &super::Vcpu) -> Option<u64> {
    let mp_state = vcpu.fd.get_mp_state().ok()?;
    let regs = vcpu.fd.get_regs().ok()?;
    (mp_state.mp_state == MP_STATE_HALTED && regs.rflags & RFLAGS_IF == 0).then_some(regs.rip)
}

/// What [`run_to_end`] observed. Results the guest sent are kept whatever
/// the end: a guest that reports and then crashes, or a run stopped by the
/// timeout after the report arrived, loses nothing.
#[derive(Debug)]
pub struct RunOutcome {
    /// How the guest ended the VM, or why the run ended without it (a fatal
    /// exit, the timeout, a stop signal, a KVM failure).
    pub end: Result<GuestEnd>,
    /// The last well-formed report the guest sent through the results doorbell.
    pub results: Option<xvmm_results::Report>,
    /// When it came (to pick the last of several vCPUs' reports).
    pub results_at: Option<std::time::Instant>,
    /// Why the last report the guest sent was refused, if it was.
    pub bad_results: Option<Error>,
    /// VM exits handled in user space.
    pub exits: u64,
    /// Accesses to unclaimed ports.
    pub unknown_io: crate::devices::UnknownIo,
    /// Accesses to unbacked guest-physical addresses (MMIO nobody claims).
    pub unknown_mmio: u64,
    /// A workload's intervals the guest streamed.
    pub intervals: crate::devices::interval_sink::IntervalSink,
}

impl RunOutcome {
    /// A run that failed before the vCPU ran.
    pub fn failed(why: Error) -> RunOutcome {
        RunOutcome {
            end: Err(why),
            results: None,
            results_at: None,
            bad_results: None,
            exits: 0,
            unknown_io: crate::devices::UnknownIo::default(),
            unknown_mmio: 0,
            intervals: Default::default(),
        }
    }
}

const KVM_SYSTEM_EVENT_SHUTDOWN: u32 = 1;
const KVM_SYSTEM_EVENT_RESET: u32 = 2;
const KVM_SYSTEM_EVENT_CRASH: u32 = 3;

/// What one exit asks the loop to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Io(crate::devices::IoEvent),
    Mmio,
    Kicked,
    End(GuestEnd),
    Fatal(Fatal),
}

/// Decides what one exit asks for, handing port I/O to `bus` and answering
/// MMIO reads of unclaimed addresses with all ones. Everything in `exit` is
/// guest-chosen (ports, addresses, data lengths): never panics on any of it
/// (fuzzed by `fuzz/fuzz_targets/vm_exit.rs`).
pub fn classify(exit: VcpuExit<'_>, bus: &mut crate::devices::PortBus) -> Step {
    use crate::devices::IoEvent;
    match exit {
        VcpuExit::IoIn(port, data) => {
            bus.io_in(port, data);
            Step::Io(IoEvent::Continue)
        }
        VcpuExit::IoOut(port, data) => Step::Io(bus.io_out(port, data)),
        VcpuExit::MmioRead(_, data) => {
            data.fill(0xff);
            Step::Mmio
        }
        VcpuExit::MmioWrite(..) => Step::Mmio,
        VcpuExit::Intr => Step::Kicked,
        VcpuExit::Hlt => Step::Fatal(Fatal::Hlt),
        VcpuExit::SystemEvent(kind, _) => match kind {
            KVM_SYSTEM_EVENT_SHUTDOWN => Step::End(GuestEnd::PowerOff),
            KVM_SYSTEM_EVENT_RESET => Step::End(GuestEnd::Reset),
            KVM_SYSTEM_EVENT_CRASH => Step::Fatal(Fatal::Crash),
            other => Step::Fatal(Fatal::Other(format!("system event {other}"))),
        },
        other => {
            Step::Fatal(fatal_exit(&other).unwrap_or_else(|| Fatal::Other(format!("{other:?}"))))
        }
    }
}

/// The port-bus guest's side of [`run_loop`]: what it sent and how often it
/// exited, kept whatever the end.
struct PortGuest<'a> {
    bus: &'a mut crate::devices::PortBus,
    memory: &'a vm_memory::GuestMemoryMmap,
    faults: Option<&'a mut crate::host_fault::HostFaults>,
    results: Option<xvmm_results::Report>,
    results_at: Option<std::time::Instant>,
    bad_results: Option<Error>,
    exits: u64,
    unknown_mmio: u64,
    intervals: crate::devices::interval_sink::IntervalSink,
    /// Whether halting for good ends the run: the boot vCPU's halt is
    /// Linux's power-off; an application processor's is a CPU taken
    /// offline, which INIT and SIPI bring back.
    halt_ends: bool,
}

impl ExitHandler for PortGuest<'_> {
    type End = GuestEnd;

    fn after_run(&mut self) {
        self.exits += 1;
    }

    fn handle(&mut self, exit: VcpuExit<'_>) -> Result<Action<GuestEnd>> {
        use crate::devices::IoEvent;
        Ok(match classify(exit, self.bus) {
            Step::Io(IoEvent::Continue) => Action::Resume,
            Step::Io(IoEvent::Exit(status)) => Action::End(GuestEnd::Exit(status)),
            Step::Io(IoEvent::Reset) => Action::End(GuestEnd::Reset),
            Step::Io(IoEvent::Results(len)) => {
                match read_results(self.memory, len) {
                    Ok(report) => {
                        self.results = Some(report);
                        self.results_at = Some(std::time::Instant::now());
                    }
                    Err(e) => self.bad_results = Some(e),
                }
                Action::Resume
            }
            Step::Io(IoEvent::Intervals(len)) => {
                let read = crate::vm::read_results_bytes(self.memory, u64::from(len));
                self.intervals.take_chunk(read.map_err(|e| e.to_string()));
                Action::Resume
            }
            Step::Io(IoEvent::DropPages(count)) => {
                match self.faults.as_deref_mut() {
                    Some(faults) => faults.serve_request(self.memory, count),
                    None => crate::host_fault::refuse_request(self.memory),
                }
                Action::Resume
            }
            Step::Mmio => {
                self.unknown_mmio += 1;
                Action::Resume
            }
            // The loop takes kicks itself (`kicked`).
            Step::Kicked => Action::Resume,
            Step::End(end) => Action::End(end),
            Step::Fatal(fatal) => Action::Fatal(fatal),
        })
    }

    fn kicked(&mut self, vcpu: &mut super::Vcpu) -> Action<GuestEnd> {
        // A kick is no exit.
        self.exits -= 1;
        match halted_for_good(vcpu).filter(|_| self.halt_ends) {
            Some(rip) => Action::End(GuestEnd::Halted(rip)),
            None => Action::Resume,
        }
    }
}

/// Runs the attached vCPU, dispatching port I/O to `bus`, until the guest ends
/// the VM or the run must end. Fatal guest events (triple fault, internal
/// error, failed entry, crash) become `Error::Guest` naming the exit reason and
/// RIP; a malformed report is refused (`bad_results`) and the guest runs on.
pub fn run_to_end(
    running: &mut RunningVcpu<'_>,
    bus: &mut crate::devices::PortBus,
    memory: &vm_memory::GuestMemoryMmap,
    faults: Option<&mut crate::host_fault::HostFaults>,
) -> RunOutcome {
    run_port_guest(running, bus, memory, faults, true)
}

/// [`run_to_end`] for any vCPU: `halt_ends` says whether a halt for good
/// ends the run (the boot vCPU's) or not (an application processor's).
pub(super) fn run_port_guest(
    running: &mut RunningVcpu<'_>,
    bus: &mut crate::devices::PortBus,
    memory: &vm_memory::GuestMemoryMmap,
    faults: Option<&mut crate::host_fault::HostFaults>,
    halt_ends: bool,
) -> RunOutcome {
    let mut guest = PortGuest {
        bus,
        memory,
        faults,
        results: None,
        results_at: None,
        bad_results: None,
        exits: 0,
        unknown_mmio: 0,
        intervals: Default::default(),
        halt_ends,
    };
    let end = run_loop(running, &mut guest);
    guest.bus.flush();
    RunOutcome {
        end,
        results: guest.results,
        results_at: guest.results_at,
        bad_results: guest.bad_results,
        exits: guest.exits,
        unknown_io: guest.bus.unknown,
        unknown_mmio: guest.unknown_mmio,
        intervals: guest.intervals,
    }
}

fn read_results(memory: &vm_memory::GuestMemoryMmap, len: u32) -> Result<xvmm_results::Report> {
    crate::vm::parse_results(&crate::vm::read_results_bytes(memory, u64::from(len))?)
}
