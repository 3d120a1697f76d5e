//! The second vCPU of the microguest's two-vCPU rows (the IPI rows'
//! receiver, the round robin's other side): made runnable where the VMM
//! put it, run on a thread of its own pinned to a host CPU of its own, and
//! ended with the phase. It makes no exit but the fault doorbell.

use super::layout;
use crate::vcpu::{Fatal, RunControl, RunningVcpu, Vcpu};
use crate::{Error, Result};
use kvm_ioctls::VcpuExit;

/// Makes a vCPU other than the boot one runnable at the registers the VMM
/// gave it: with an in-kernel LAPIC KVM holds it for INIT and SIPI, which
/// the microguest does not send.
pub fn start_now(vcpu: &Vcpu) -> Result<()> {
    let state = kvm_bindings::kvm_mp_state {
        mp_state: kvm_bindings::KVM_MP_STATE_RUNNABLE,
    };
    vcpu.fd
        .set_mp_state(state)
        .map_err(|e| Error::Kvm(format!("KVM_SET_MP_STATE (vCPU {}) failed: {e}", vcpu.id)))
}

/// How the IPI rows' receiver vCPU's thread ended.
#[derive(Debug)]
pub enum ReceiverEnd {
    /// Kicked out when the phase ended (or the run stopped).
    Stopped,
    /// It rang the fault doorbell: the fault record is its.
    Fault,
    /// The hypervisor stopped it (triple fault...).
    Refused(String),
    /// An exit the receiver never makes, or its thread could not be pinned.
    Failed(Error),
}

/// Runs `main` here (vCPU 0's run) with `receiver`, vCPU 1, on a thread
/// of its own pinned to `cpu` (else to [`receiver_cpu`]'s). The two share a
/// run control of the phase's own ([`RunControl::part`]), which keeps the
/// run's deadline and stop signals: when `main` returns, the receiver is
/// kicked out of KVM_RUN, and a receiver that ends first kicks vCPU 0 out
/// of its, without ending the run. Returns `main`'s result and how the
/// receiver ended.
pub fn run_beside<T>(
    rc: &RunControl,
    receiver: &mut Vcpu,
    cpu: Option<usize>,
    main: impl FnOnce(&RunControl) -> T,
) -> Result<(T, ReceiverEnd)> {
    let part = rc.part()?;
    let cpu = cpu.or_else(receiver_cpu);
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("xvmm-vcpu1".into())
            .spawn_scoped(scope, || run_receiver(&part, receiver, cpu))
            .map_err(|e| Error::Io(format!("cannot start the receiver vCPU's thread: {e}")))?;
        let out = main(&part);
        part.end_run();
        let end = thread.join().unwrap_or_else(|_| {
            ReceiverEnd::Failed(Error::Guest("the receiver vCPU's thread panicked".into()))
        });
        Ok((out, end))
    })
}

/// The host CPU for the receiver's thread when none was asked for: the
/// first CPU this process may use other than the one the calling (sender's)
/// thread is pinned to; that one where it is the only one (both vCPUs then
/// share it, and the host's scheduling is in every sample); none when the
/// caller is not pinned to one CPU.
pub fn receiver_cpu() -> Option<usize> {
    let sender = crate::affinity::pinned_cpu()?;
    let usable = crate::affinity::usable_cpus();
    usable
        .iter()
        .copied()
        .find(|&c| c != sender)
        .or(Some(sender))
}

/// The receiver's thread: pinned, it runs vCPU 1 until the phase's end
/// kicks it out. It makes no exit but the fault doorbell.
fn run_receiver(part: &RunControl, vcpu: &mut Vcpu, cpu: Option<usize>) -> ReceiverEnd {
    let pinned = cpu.map_or(Ok(()), crate::affinity::pin_current_thread);
    let end = match pinned {
        Ok(()) => receiver_loop(&mut part.attach_ap(vcpu)),
        Err(e) => ReceiverEnd::Failed(e),
    };
    part.end_run();
    end
}

fn receiver_loop(running: &mut RunningVcpu<'_>) -> ReceiverEnd {
    loop {
        let fatal = match running.run() {
            Ok(VcpuExit::Intr) => continue,
            Ok(VcpuExit::IoOut(layout::PORT_FAULT, _)) => return ReceiverEnd::Fault,
            Ok(exit) => match crate::vcpu::exit_loop::fatal_exit(&exit) {
                Some(fatal @ (Fatal::Shutdown | Fatal::Internal | Fatal::FailEntry(..))) => fatal,
                _ => {
                    let what = format!("{exit:?}");
                    return ReceiverEnd::Failed(Error::Guest(format!(
                        "the receiver vCPU made an exit it never makes: {what}"
                    )));
                }
            },
            Err(_) => return ReceiverEnd::Stopped,
        };
        let why = crate::vcpu::exit_loop::describe_fatal(running.vcpu(), &fatal);
        return ReceiverEnd::Refused(why);
    }
}
