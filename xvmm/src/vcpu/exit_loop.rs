//! The one KVM_RUN loop ([`run_loop`]) and the one description of a fatal
//! exit ([`describe_fatal`]), shared by every guest.
//!
//! As in Firecracker's `handle_kvm_exit`, the loop handles the exits every
//! guest treats alike (a kick out of KVM_RUN, a triple fault, an internal
//! error, a failed entry) and hands the rest to the guest's [`ExitHandler`],
//! whose hooks run right before and right after each KVM_RUN.

use super::{RunningVcpu, Vcpu};
use crate::Result;
use kvm_ioctls::VcpuExit;

/// Exits that end the run; described once the exit's borrow of kvm_run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fatal {
    Shutdown,
    Internal,
    /// KVM_EXIT_FAIL_ENTRY: the hardware reason and the host CPU.
    FailEntry(u64, u32),
    Crash,
    Hlt,
    Other(String),
}

/// The exits KVM reports when it cannot (or will not) run the guest on:
/// every guest's run ends on them.
pub fn fatal_exit(exit: &VcpuExit<'_>) -> Option<Fatal> {
    match exit {
        VcpuExit::Shutdown => Some(Fatal::Shutdown),
        VcpuExit::InternalError => Some(Fatal::Internal),
        VcpuExit::FailEntry(reason, cpu) => Some(Fatal::FailEntry(*reason, *cpu)),
        _ => None,
    }
}

/// What the loop does after an exit.
#[derive(Debug)]
pub enum Action<E> {
    /// Run the vCPU again.
    Resume,
    /// The run is over.
    End(E),
    /// A fatal exit: the loop describes it and asks [`ExitHandler::fatal`].
    Fatal(Fatal),
}

/// One guest's side of [`run_loop`].
pub trait ExitHandler {
    /// How this guest's run ends.
    type End;

    /// Runs right before each KVM_RUN (only [`RunningVcpu::run`]'s stop
    /// check comes between).
    fn before_run(&mut self) {}

    /// Runs right after each KVM_RUN that returned an exit, before anything
    /// looks at the exit.
    fn after_run(&mut self) {}

    /// An exit the loop does not handle itself; an error ends the run.
    fn handle(&mut self, exit: VcpuExit<'_>) -> Result<Action<Self::End>>;

    /// KVM_RUN was interrupted by a kick that did not stop the run.
    fn kicked(&mut self, _vcpu: &mut Vcpu) -> Action<Self::End> {
        Action::Resume
    }

    /// How the run ends on `fatal`, which `why` describes
    /// ([`describe_fatal`]). By default, as that error.
    fn fatal(&mut self, _fatal: Fatal, why: String) -> Result<Self::End> {
        Err(crate::Error::Guest(why))
    }
}

/// Runs the attached vCPU until `handler` ends the run, a fatal exit does, or
/// the run must stop (timeout, stop signal, KVM_RUN failure: `Err`).
pub fn run_loop<H: ExitHandler>(running: &mut RunningVcpu<'_>, handler: &mut H) -> Result<H::End> {
    loop {
        handler.before_run();
        let exit = running.run()?;
        handler.after_run();
        let action = match exit {
            VcpuExit::Intr => None,
            exit => match fatal_exit(&exit) {
                Some(fatal) => Some(Action::Fatal(fatal)),
                None => Some(handler.handle(exit)?),
            },
        };
        match action.unwrap_or_else(|| handler.kicked(running.vcpu())) {
            Action::Resume => {}
            Action::End(end) => return Ok(end),
            Action::Fatal(fatal) => {
                let why = describe_fatal(running.vcpu(), &fatal);
                return handler.fatal(fatal, why);
            }
        }
    }
}

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

/// One line naming a fatal exit and where the guest was.
pub fn describe_fatal(vcpu: &mut Vcpu, fatal: &Fatal) -> String {
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
        Fatal::FailEntry(reason, cpu) => format!(
            "VM entry failed (KVM_EXIT_FAIL_ENTRY, hardware reason {reason:#x}, host CPU {cpu}) at RIP {rip:#x}"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_fatal_exits_and_nothing_else() {
        assert_eq!(fatal_exit(&VcpuExit::Shutdown), Some(Fatal::Shutdown));
        assert_eq!(fatal_exit(&VcpuExit::InternalError), Some(Fatal::Internal));
        assert_eq!(
            fatal_exit(&VcpuExit::FailEntry(0x21, 3)),
            Some(Fatal::FailEntry(0x21, 3))
        );
        for exit in [VcpuExit::Hlt, VcpuExit::Intr, VcpuExit::IoOut(0x80, &[0])] {
            assert_eq!(fatal_exit(&exit), None, "{exit:?}");
        }
    }

    #[test]
    fn suberrors_have_names() {
        assert_eq!(internal_error_name(1), "emulation failure");
        assert_eq!(internal_error_name(99), "unknown suberror");
    }
}
