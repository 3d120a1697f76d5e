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

/// What [`run_to_end`] observed.
#[derive(Debug)]
pub struct RunOutcome {
    pub end: GuestEnd,
    /// The last report the guest sent through the results doorbell.
    pub results: Option<xvmm_results::Report>,
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

/// Runs the attached vCPU, dispatching port I/O to `bus`, until the guest ends the
/// VM. Fatal guest events (triple fault, internal error, failed entry, crash) and
/// malformed results become `Error::Guest` naming the exit reason and RIP.
pub fn run_to_end(
    running: &mut RunningVcpu<'_>,
    bus: &mut crate::devices::PortBus,
    memory: &vm_memory::GuestMemoryMmap,
) -> Result<RunOutcome> {
    use crate::devices::IoEvent;
    let mut results = None;
    let mut exits: u64 = 0;
    let mut unknown_mmio: u64 = 0;
    // Fatal exits are described after the exit's borrow of kvm_run has ended.
    enum Fatal {
        Shutdown,
        Internal,
        FailEntry(u64),
        Crash,
        Hlt,
        Other(String),
    }
    let end_or_fatal: std::result::Result<GuestEnd, Fatal> = loop {
        let event = match running.run()? {
            VcpuExit::IoIn(port, data) => {
                bus.io_in(port, data);
                IoEvent::Continue
            }
            VcpuExit::IoOut(port, data) => bus.io_out(port, data),
            VcpuExit::MmioRead(_, data) => {
                data.fill(0xff);
                unknown_mmio += 1;
                IoEvent::Continue
            }
            VcpuExit::MmioWrite(..) => {
                unknown_mmio += 1;
                IoEvent::Continue
            }
            VcpuExit::Intr => match halted_for_good(running.vcpu()) {
                Some(rip) => break Ok(GuestEnd::Halted(rip)),
                None => continue,
            },
            VcpuExit::Shutdown => break Err(Fatal::Shutdown),
            VcpuExit::InternalError => break Err(Fatal::Internal),
            VcpuExit::FailEntry(reason, _cpu) => break Err(Fatal::FailEntry(reason)),
            VcpuExit::Hlt => break Err(Fatal::Hlt),
            VcpuExit::SystemEvent(kind, _) => match kind {
                KVM_SYSTEM_EVENT_SHUTDOWN => break Ok(GuestEnd::PowerOff),
                KVM_SYSTEM_EVENT_RESET => break Ok(GuestEnd::Reset),
                KVM_SYSTEM_EVENT_CRASH => break Err(Fatal::Crash),
                other => break Err(Fatal::Other(format!("system event {other}"))),
            },
            other => break Err(Fatal::Other(format!("{other:?}"))),
        };
        exits += 1;
        match event {
            IoEvent::Continue => {}
            IoEvent::Exit(status) => break Ok(GuestEnd::Exit(status)),
            IoEvent::Reset => break Ok(GuestEnd::Reset),
            IoEvent::Results(len) => {
                results = Some(crate::vm::parse_results(&crate::vm::read_results_bytes(
                    memory,
                    u64::from(len),
                )?)?);
            }
        }
    };
    bus.flush();
    let fatal = match end_or_fatal {
        Ok(end) => {
            return Ok(RunOutcome {
                end,
                results,
                exits,
                unknown_io: bus.unknown,
                unknown_mmio,
            })
        }
        Err(fatal) => fatal,
    };
    let vcpu = running.vcpu();
    let rip = vcpu.rip();
    Err(Error::Guest(match fatal {
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
    }))
}
