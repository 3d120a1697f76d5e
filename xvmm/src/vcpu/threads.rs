//! Running every vCPU of a VM, one host thread each.
//!
//! The boot vCPU runs on the calling thread; each application processor
//! (AP) on a thread of its own, pinned to its host CPU where one is given
//! (else free of the caller's pinning). The AP threads start first and wait:
//! the caller's `started` hook sees every vCPU thread's id (a tracer filters
//! on them) before any vCPU runs, and a failing hook sends them home before
//! they ever enter KVM_RUN.
//!
//! The first vCPU whose run ends, however it ends, ends the run for all
//! ([`RunControl::end_run`]): the others are kicked out of KVM_RUN. Its end
//! is the run's; results come from whichever vCPU's doorbell rang last.

use super::exits::{run_port_guest, RunOutcome};
use super::{RunControl, Vcpu};
use crate::devices::PortBus;
use crate::host_fault::HostFaults;
use crate::{Error, Result};
use std::sync::mpsc;
use vm_memory::GuestMemoryMmap;

/// The boot vCPU's part: its port bus and the fault server, which only it
/// serves (a drop request from an AP is refused, as without a server).
pub struct BootVcpu<'a> {
    pub vcpu: &'a mut Vcpu,
    pub bus: &'a mut PortBus,
    pub faults: Option<&'a mut HostFaults>,
}

/// An application processor's part: its bus (sharing the UART) and the host
/// CPU its thread is pinned to.
pub struct ApVcpu<'a> {
    pub vcpu: &'a mut Vcpu,
    pub bus: PortBus,
    pub pin: Option<usize>,
}

/// This thread's id.
fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Runs `boot` here and every AP on its own thread until one ends the run
/// (see the module docs). `started` gets the vCPU threads' ids, the boot
/// vCPU's first, once every AP thread waits; what it returns comes back
/// beside the run's outcome. An error from it ends everything unstarted.
pub fn run_vcpus<T>(
    control: &RunControl,
    memory: &GuestMemoryMmap,
    boot: BootVcpu<'_>,
    aps: Vec<ApVcpu<'_>>,
    started: impl FnOnce(&[libc::pid_t]) -> Result<T>,
) -> Result<(T, RunOutcome)> {
    std::thread::scope(|scope| {
        let (tid_tx, tid_rx) = mpsc::channel();
        let mut go = Vec::with_capacity(aps.len());
        let mut threads = Vec::with_capacity(aps.len());
        for ap in aps {
            let (go_tx, go_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            let tid_tx = tid_tx.clone();
            let name = format!("xvmm-vcpu{}", ap.vcpu.id);
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn_scoped(scope, move || run_ap(control, memory, ap, &tid_tx, &go_rx))
                .map_err(|e| Error::Io(format!("cannot start a vCPU thread: {e}")))?;
            threads.push(thread);
        }
        drop(tid_tx);
        let mut tids = vec![gettid()];
        tids.extend(tid_rx.iter().take(threads.len()));
        if tids.len() != threads.len() + 1 {
            return Err(Error::Io("a vCPU thread ended before it started".into()));
        }
        // On an error here `go` drops: every AP thread ends unstarted.
        let extra = started(&tids)?;
        for tx in &go {
            let _ = tx.send(());
        }
        let mut running = control.attach(boot.vcpu);
        let outcome = run_port_guest(&mut running, boot.bus, memory, boot.faults, true);
        drop(running);
        let boot_ended = control.end_run();
        let mut ends = vec![(outcome, boot_ended)];
        for thread in threads {
            match thread.join() {
                Ok(Some(end)) => ends.push(end),
                Ok(None) => {}
                Err(_) => return Err(Error::Guest("a vCPU thread panicked".into())),
            }
        }
        Ok((extra, merge(ends)))
    })
}

/// One AP's thread: pin, say its id, wait for the go, run until the run
/// ends; its outcome and whether its end was the run's (`None`: never went).
fn run_ap(
    control: &RunControl,
    memory: &GuestMemoryMmap,
    mut ap: ApVcpu<'_>,
    tid: &mpsc::Sender<libc::pid_t>,
    go: &mpsc::Receiver<()>,
) -> Option<(RunOutcome, bool)> {
    let pinned = match ap.pin {
        Some(cpu) => crate::affinity::pin_current_thread(cpu),
        None => {
            crate::affinity::unpin_helper_thread();
            Ok(())
        }
    };
    tid.send(gettid()).ok()?;
    go.recv().ok()?;
    let outcome = match pinned {
        Ok(()) => {
            let mut running = control.attach_ap(ap.vcpu);
            let outcome = run_port_guest(&mut running, &mut ap.bus, memory, None, false);
            drop(running);
            outcome
        }
        Err(e) => RunOutcome::failed(e),
    };
    let ended = control.end_run();
    Some((outcome, ended))
}

/// The run's outcome from every vCPU's (the boot vCPU's first), each with
/// whether it ended the run: that vCPU's end (else the boot vCPU's, when
/// the run was stopped from outside), the last report any vCPU received,
/// the counts summed.
fn merge(ends: Vec<(RunOutcome, bool)>) -> RunOutcome {
    let ender = ends.iter().position(|(_, ended)| *ended).unwrap_or(0);
    let mut outcomes: Vec<RunOutcome> = ends.into_iter().map(|(o, _)| o).collect();
    let last_report = (0..outcomes.len())
        .filter(|&i| outcomes[i].results.is_some())
        .max_by_key(|&i| outcomes[i].results_at);
    let (results, results_at) = match last_report {
        Some(i) => (outcomes[i].results.take(), outcomes[i].results_at),
        None => (None, None),
    };
    let bad_results = outcomes.iter_mut().find_map(|o| o.bad_results.take());
    let mut unknown_io = crate::devices::UnknownIo::default();
    for o in &outcomes {
        unknown_io.reads += o.unknown_io.reads;
        unknown_io.writes += o.unknown_io.writes;
        if o.unknown_io.reads + o.unknown_io.writes > 0 {
            unknown_io.last_port = o.unknown_io.last_port;
        }
    }
    let exits = outcomes.iter().map(|o| o.exits).sum();
    let intervals = crate::devices::interval_sink::IntervalSink::merge(
        outcomes
            .iter_mut()
            .map(|o| std::mem::take(&mut o.intervals)),
    );
    let unknown_mmio = outcomes.iter().map(|o| o.unknown_mmio).sum();
    let end = std::mem::replace(&mut outcomes[ender].end, Ok(super::GuestEnd::Reset));
    // With several vCPUs, a fatal exit says which one took it.
    let end = match end {
        Err(Error::Guest(why)) if outcomes.len() > 1 => {
            Err(Error::Guest(format!("vCPU {ender}: {why}")))
        }
        other => other,
    };
    RunOutcome {
        end,
        results,
        results_at,
        bad_results,
        exits,
        unknown_io,
        unknown_mmio,
        intervals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcpu::GuestEnd;
    use std::time::{Duration, Instant};

    fn outcome(end: Result<GuestEnd>, exits: u64) -> RunOutcome {
        RunOutcome {
            end,
            results: None,
            results_at: None,
            bad_results: None,
            exits,
            unknown_io: Default::default(),
            unknown_mmio: 0,
            intervals: Default::default(),
        }
    }

    fn report(run_id: &str) -> xvmm_results::Report {
        let mut r = xvmm_results::Report::new(
            "xperf".into(),
            xvmm_results::Environment::LinuxVm,
            Default::default(),
            xvmm_results::Method::standard(0, 1),
        );
        r.run_id = Some(run_id.into());
        r
    }

    #[test]
    fn the_vcpu_that_ended_the_run_gives_its_end() {
        let other = || Err(Error::Guest("the run ended on another vCPU".into()));
        let merged = merge(vec![
            (outcome(other(), 10), false),
            (outcome(Ok(GuestEnd::Exit(3)), 20), true),
            (outcome(other(), 5), false),
        ]);
        assert!(matches!(merged.end, Ok(GuestEnd::Exit(3))));
        assert_eq!(merged.exits, 35);
        // A fatal exit names its vCPU.
        let merged = merge(vec![
            (outcome(other(), 1), false),
            (outcome(Err(Error::Guest("triple fault".into())), 1), true),
        ]);
        assert!(
            matches!(&merged.end, Err(Error::Guest(m)) if m == "vCPU 1: triple fault"),
            "{:?}",
            merged.end
        );
        // Stopped from outside (no vCPU ended it): the boot vCPU's end.
        let merged = merge(vec![
            (outcome(Err(Error::Timeout("t".into())), 1), false),
            (outcome(other(), 1), false),
        ]);
        assert!(matches!(merged.end, Err(Error::Timeout(_))));
    }

    #[test]
    fn unknown_accesses_are_summed_and_the_last_port_is_one_touched() {
        let with = |reads, writes, port, mmio| {
            let mut o = outcome(Ok(GuestEnd::Exit(0)), 0);
            o.unknown_io = crate::devices::UnknownIo {
                reads,
                writes,
                last_port: port,
            };
            o.unknown_mmio = mmio;
            o
        };
        let merged = merge(vec![
            (with(2, 3, 0x80, 1), true),
            (with(5, 7, 0x81, 4), false),
            (with(0, 0, 0x99, 0), false),
        ]);
        assert_eq!((merged.unknown_io.reads, merged.unknown_io.writes), (7, 10));
        assert_eq!(
            merged.unknown_io.last_port, 0x81,
            "a vCPU that touched none names none"
        );
        assert_eq!(merged.unknown_mmio, 5);
        let merged = merge(vec![
            (with(0, 1, 0x80, 0), true),
            (with(0, 0, 0x99, 0), false),
        ]);
        assert_eq!(merged.unknown_io.last_port, 0x80);
    }

    #[test]
    fn the_last_report_of_any_vcpu_is_kept() {
        let now = Instant::now();
        let mut boot = outcome(Ok(GuestEnd::Exit(0)), 1);
        boot.results = Some(report("early"));
        boot.results_at = Some(now);
        let mut ap = outcome(Ok(GuestEnd::Exit(0)), 1);
        ap.results = Some(report("late"));
        ap.results_at = Some(now + Duration::from_millis(5));
        let merged = merge(vec![(boot, true), (ap, false)]);
        assert_eq!(merged.results.unwrap().run_id.as_deref(), Some("late"));
        let mut quiet = outcome(Ok(GuestEnd::Exit(0)), 1);
        quiet.bad_results = Some(Error::Guest("bad".into()));
        let merged = merge(vec![
            (quiet, true),
            (outcome(Ok(GuestEnd::Reset), 0), false),
        ]);
        assert!(merged.results.is_none());
        assert!(merged.bad_results.is_some());
    }
}
