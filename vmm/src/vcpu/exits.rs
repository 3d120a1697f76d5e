//! The exit loop for guests that end the VM through the standard ports
//! ([`crate::devices::PortBus`]): port I/O dispatch, results doorbell, and every
//! fatal exit turned into a one-line `Error::Guest` naming the reason and RIP.

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
    /// Why the last report the guest sent was refused, if it was.
    pub bad_results: Option<Error>,
    /// VM exits handled in user space.
    pub exits: u64,
    /// Accesses to unclaimed ports.
    pub unknown_io: crate::devices::UnknownIo,
    /// Accesses to unbacked guest-physical addresses (MMIO nobody claims).
    pub unknown_mmio: u64,
}

const KVM_SYSTEM_EVENT_SHUTDOWN: u32 = 1;
const KVM_SYSTEM_EVENT_RESET: u32 = 2;
const KVM_SYSTEM_EVENT_CRASH: u32 = 3;

/// Describes KVM_EXIT_INTERNAL_ERROR's suberror.
pub fn internal_error_name(suberror: u32) -> &'static str {
    match suberror {
        1 => "emulation failure",
        2 => "exception while delivering an exception",
        3 => "cannot deliver an event",
        4 => "unexpected exit reason",
        _ => "unknown suberror",
    }
}

/// Exits that end the run; described once the exit's borrow of kvm_run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fatal {
    Shutdown,
    Internal,
    FailEntry(u64),
    Crash,
    Hlt,
    Other(String),
}

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
        VcpuExit::Shutdown => Step::Fatal(Fatal::Shutdown),
        VcpuExit::InternalError => Step::Fatal(Fatal::Internal),
        VcpuExit::FailEntry(reason, _cpu) => Step::Fatal(Fatal::FailEntry(reason)),
        VcpuExit::Hlt => Step::Fatal(Fatal::Hlt),
        VcpuExit::SystemEvent(kind, _) => match kind {
            KVM_SYSTEM_EVENT_SHUTDOWN => Step::End(GuestEnd::PowerOff),
            KVM_SYSTEM_EVENT_RESET => Step::End(GuestEnd::Reset),
            KVM_SYSTEM_EVENT_CRASH => Step::Fatal(Fatal::Crash),
            other => Step::Fatal(Fatal::Other(format!("system event {other}"))),
        },
        other => Step::Fatal(Fatal::Other(format!("{other:?}"))),
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
    mut faults: Option<&mut crate::host_fault::HostFaults>,
) -> RunOutcome {
    use crate::devices::IoEvent;
    let mut outcome = RunOutcome {
        end: Err(Error::Guest("the run has not started".into())),
        results: None,
        bad_results: None,
        exits: 0,
        unknown_io: Default::default(),
        unknown_mmio: 0,
    };
    let ended: std::result::Result<GuestEnd, Fatal> = loop {
        let step = match running.run() {
            Ok(exit) => classify(exit, bus),
            Err(e) => {
                bus.flush();
                outcome.unknown_io = bus.unknown;
                outcome.end = Err(e);
                return outcome;
            }
        };
        outcome.exits += 1;
        match step {
            Step::Io(IoEvent::Continue) => {}
            Step::Io(IoEvent::Exit(status)) => break Ok(GuestEnd::Exit(status)),
            Step::Io(IoEvent::Reset) => break Ok(GuestEnd::Reset),
            Step::Io(IoEvent::Results(len)) => match read_results(memory, len) {
                Ok(report) => outcome.results = Some(report),
                Err(e) => outcome.bad_results = Some(e),
            },
            Step::Io(IoEvent::DropPages(count)) => match faults.as_deref_mut() {
                Some(faults) => faults.serve_request(memory, count),
                None => crate::host_fault::refuse_request(memory),
            },
            Step::Mmio => outcome.unknown_mmio += 1,
            Step::Kicked => {
                outcome.exits -= 1;
                if let Some(rip) = halted_for_good(running.vcpu()) {
                    break Ok(GuestEnd::Halted(rip));
                }
            }
            Step::End(end) => break Ok(end),
            Step::Fatal(fatal) => break Err(fatal),
        }
    };
    bus.flush();
    outcome.unknown_io = bus.unknown;
    outcome.end = ended.map_err(|fatal| Error::Guest(describe_fatal(running.vcpu(), fatal)));
    outcome
}

fn read_results(memory: &vm_memory::GuestMemoryMmap, len: u32) -> Result<xvmm_results::Report> {
    crate::vm::parse_results(&crate::vm::read_results_bytes(memory, u64::from(len))?)
}

/// One line naming a fatal exit and where the guest was.
fn describe_fatal(vcpu: &mut super::Vcpu, fatal: Fatal) -> String {
    let rip = vcpu.rip();
    match fatal {
        Fatal::Shutdown => {
            // SVM reinitialises the vCPU on a shutdown intercept: its state then
            // shows the reset vector instead of where the fault was.
            let reset = vcpu.fd.get_sregs().is_ok_and(|s| s.cs.base == 0xffff_0000);
            if reset && rip == 0xfff0 {
                "triple fault (KVM_EXIT_SHUTDOWN); KVM reset the vCPU, so the faulting RIP is lost (RIP reads 0xfff0)".to_string()
            } else {
                format!("triple fault (KVM_EXIT_SHUTDOWN) at RIP {rip:#x}")
            }
        }
        Fatal::Internal => {
            let run = vcpu.fd.get_kvm_run();
            // SAFETY: exit_reason was KVM_EXIT_INTERNAL_ERROR, so `internal` is
            // the union member KVM filled in.
            let internal = unsafe { run.__bindgen_anon_1.internal };
            let n = (internal.ndata as usize).min(internal.data.len());
            let data: Vec<String> = internal.data[..n]
                .iter()
                .map(|d| format!("{d:#x}"))
                .collect();
            format!(
                "KVM internal error (KVM_EXIT_INTERNAL_ERROR, suberror {}: {}) at RIP {rip:#x}, data [{}]",
                internal.suberror,
                internal_error_name(internal.suberror),
                data.join(", ")
            )
        }
        Fatal::FailEntry(reason) => format!(
            "VM entry failed (KVM_EXIT_FAIL_ENTRY, hardware reason {reason:#x}) at RIP {rip:#x}"
        ),
        Fatal::Crash => {
            format!("guest reported a crash (KVM_SYSTEM_EVENT_CRASH) at RIP {rip:#x}")
        }
        Fatal::Hlt => {
            format!("guest halted (HLT) at RIP {rip:#x} with no interrupt controller to wake it")
        }
        Fatal::Other(what) => format!("unexpected VM exit {what} at RIP {rip:#x}"),
    }
}
