//! Run control: a deadline watchdog plus stop-signal handling for a VM run.
//!
//! Attach a vCPU with [`RunControl::attach`] and call [`RunningVcpu::run`] in the
//! exit loop. When the deadline passes or Ctrl-C arrives, the vCPU thread is kicked
//! out of KVM_RUN (a signal whose handler sets `kvm_run.immediate_exit`) and `run`
//! returns `Error::Timeout("guest did not finish within N s")` or
//! `Error::Interrupted` (when a [`super::signals::StopSignals`] guard recorded
//! SIGINT, SIGTERM or SIGHUP). A kick that did not stop the VM shows up as
//! `VcpuExit::Intr`: just call `run` again.
//!
//! With [`RunControl::set_idle_probe`], the watchdog also kicks a vCPU thread
//! that has been asleep in the kernel (state `S` in /proc) with no exit for the
//! probe interval, so that the exit loop can look at a guest that halted for
//! good (`cli; hlt`, which an in-kernel LAPIC keeps inside KVM). A vCPU that is
//! running guest code is never kicked, so measurements are not disturbed.

use super::Vcpu;
use crate::{Error, Result};
use kvm_ioctls::VcpuExit;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why a run was stopped from outside the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Timeout,
    /// A helper of the run failed ([`Aborter::abort`]).
    Aborted,
    /// A stop signal (its number) or [`RunControl::interrupt`] (SIGINT).
    Interrupted(libc::c_int),
    /// One vCPU's run ended ([`RunControl::end_run`]): the others stop.
    Ended,
}

const RUNNING: u8 = 0;
const STOP_TIMEOUT: u8 = 1;
const STOP_INTERRUPTED: u8 = 2;
const STOP_ABORTED: u8 = 3;
const STOP_ENDED: u8 = 4;
/// How often the watchdog looks at the Ctrl-C flag.
const WATCHDOG_POLL: Duration = Duration::from_millis(100);

static KICK_HANDLER: Once = Once::new();

thread_local! {
    /// `kvm_run.immediate_exit` of the vCPU attached on this thread, for the kick handler.
    static IMMEDIATE_EXIT: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
}

fn kick_signal() -> libc::c_int {
    libc::SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int) {
    // Only an async-signal-safe store: the next (or current) KVM_RUN returns EINTR.
    let _ = IMMEDIATE_EXIT.try_with(|p| {
        let p = p.get();
        if !p.is_null() {
            // SAFETY: set by `attach` to the mapped kvm_run of a vCPU that outlives the
            // attachment; cleared before the attachment ends.
            unsafe { std::ptr::write_volatile(p, 1) };
        }
    });
}

struct Shared {
    stop: AtomicU8,
    timeout: Duration,
    /// When the watchdog stops the run (`None`: never).
    deadline: Option<Instant>,
    /// Threads with an attached vCPU; the watchdog kicks them under this lock, and a
    /// thread leaves the list (under the lock) before it ends its attachment.
    threads: Mutex<Vec<VcpuThread>>,
    /// Idle probe interval in ms, 0 = off.
    idle_probe_ms: AtomicU64,
    /// Set whenever KVM_RUN returns with an exit; cleared by the idle probe.
    active: AtomicBool,
    finished: Mutex<bool>,
    wake: Condvar,
    /// Why an [`Aborter`] stopped the run.
    aborted: Mutex<Option<String>>,
}

#[derive(Clone, Copy)]
struct VcpuThread {
    pthread: libc::pthread_t,
    tid: libc::pid_t,
    /// Whether the idle probe looks at it (the boot vCPU's thread: only its
    /// halt for good ends a run).
    probed: bool,
}

impl Shared {
    /// Stops the run for `reason` and kicks every vCPU; whether this call
    /// was the first stop.
    fn stop(&self, reason: u8) -> bool {
        let first = self
            .stop
            .compare_exchange(RUNNING, reason, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        self.kick(|_| true);
        first
    }

    /// Kicks the attached threads that `select` picks out of KVM_RUN.
    fn kick(&self, select: impl Fn(&VcpuThread) -> bool) {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        for t in threads.iter().filter(|t| select(t)) {
            // SAFETY: `t` is a live thread: it removes itself under this lock first.
            unsafe { libc::pthread_kill(t.pthread, kick_signal()) };
        }
    }

    /// The idle probe: kicks vCPU threads that sleep with no exit since the last probe.
    fn probe_idle(&self) {
        if !self.active.swap(false, Ordering::Relaxed) {
            self.kick(|t| t.probed && thread_is_sleeping(t.tid));
        }
    }
}

/// Whether thread `tid` of this process is asleep (state `S` in its stat).
fn thread_is_sleeping(tid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .is_ok_and(|stat| stat_state(&stat) == Some('S'))
}

/// The state letter of a /proc stat line (after the parenthesised name, which
/// may itself hold spaces and parentheses).
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Deadline watchdog and Ctrl-C handling for one VM run.
pub struct RunControl {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
}

impl RunControl {
    /// Starts the clock: the run fails with a timeout `timeout` from now.
    /// Installs the handler of the kick signal (process-wide, once); stop
    /// signals count only while the caller holds a [`StopSignals`] guard.
    ///
    /// [`StopSignals`]: super::signals::StopSignals
    pub fn new(timeout: Duration) -> Result<RunControl> {
        RunControl::until(timeout, Instant::now().checked_add(timeout))
    }

    /// A run control for one part of this run (a phase whose vCPUs end
    /// together without ending the run): the same deadline and timeout
    /// message, stop signals alike; its own [`RunControl::end_run`]. Fails
    /// as [`RunControl::check`] does when this run must stop already.
    pub fn part(&self) -> Result<RunControl> {
        self.check()?;
        RunControl::until(self.shared.timeout, self.shared.deadline)
    }

    fn until(timeout: Duration, deadline: Option<Instant>) -> Result<RunControl> {
        let mut installed = Ok(());
        KICK_HANDLER.call_once(|| {
            installed = super::signals::set_handler(kick_signal(), on_kick).map(|_| ());
        });
        installed?;
        let shared = Arc::new(Shared {
            stop: AtomicU8::new(RUNNING),
            timeout,
            deadline,
            threads: Mutex::new(Vec::new()),
            idle_probe_ms: AtomicU64::new(0),
            active: AtomicBool::new(true),
            finished: Mutex::new(false),
            wake: Condvar::new(),
            aborted: Mutex::new(None),
        });
        // A timeout too far away to represent is no deadline at all.
        let watched = Arc::clone(&shared);
        let watchdog = std::thread::Builder::new()
            .name("xvmm-watchdog".into())
            .spawn(move || {
                crate::affinity::unpin_helper_thread();
                watchdog(&watched, deadline)
            })
            .map_err(|e| Error::Io(format!("cannot start the watchdog thread: {e}")))?;
        Ok(RunControl {
            shared,
            watchdog: Some(watchdog),
        })
    }

    /// Why the run must stop, if it must.
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self.shared.stop.load(Ordering::Relaxed) {
            STOP_TIMEOUT => Some(StopReason::Timeout),
            STOP_ABORTED => Some(StopReason::Aborted),
            STOP_ENDED => Some(StopReason::Ended),
            STOP_INTERRUPTED => Some(StopReason::Interrupted(
                super::signals::stop_requested().unwrap_or(libc::SIGINT),
            )),
            _ => super::signals::stop_requested().map(StopReason::Interrupted),
        }
    }

    /// Whether the run must stop.
    pub fn should_stop(&self) -> bool {
        self.stop_reason().is_some()
    }

    /// `Err(Timeout)` / `Err(Interrupted)` once the run must stop.
    pub fn check(&self) -> Result<()> {
        match self.stop_reason() {
            None => Ok(()),
            Some(StopReason::Interrupted(signal)) => Err(Error::Interrupted(signal)),
            Some(StopReason::Timeout) => Err(Error::Timeout(format!(
                "guest did not finish within {} s",
                self.shared.timeout.as_secs_f64()
            ))),
            Some(StopReason::Ended) => Err(Error::Guest("the run ended on another vCPU".into())),
            Some(StopReason::Aborted) => Err(Error::HostFault(
                self.shared
                    .aborted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .unwrap_or_default(),
            )),
        }
    }

    /// Kicks a vCPU thread that has slept in KVM with no exit for `interval`
    /// (its `run` then returns `VcpuExit::Intr`); `None` turns the probe off.
    pub fn set_idle_probe(&self, interval: Option<Duration>) {
        let ms = interval.map_or(0, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.shared.idle_probe_ms.store(ms, Ordering::Relaxed);
    }

    /// Stops the run now as if Ctrl-C had been pressed (kicks attached vCPUs).
    pub fn interrupt(&self) {
        self.shared.stop(STOP_INTERRUPTED);
    }

    /// A vCPU's run is over (the guest ended the VM, or the run failed on
    /// it): every other vCPU is kicked out and stops. Whether this call
    /// ended the run, i.e. no stop came before it: that vCPU's end is the
    /// run's.
    pub fn end_run(&self) -> bool {
        self.shared.stop(STOP_ENDED)
    }

    /// A handle with which another thread of the run (the fault server) stops
    /// it with its own error.
    pub fn aborter(&self) -> Aborter {
        Aborter {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Attaches `vcpu` to the calling thread so that a stop kicks it out of KVM_RUN.
    pub fn attach<'a>(&'a self, vcpu: &'a mut Vcpu) -> RunningVcpu<'a> {
        self.attach_as(vcpu, true)
    }

    /// [`RunControl::attach`] for an application processor: stops kick it,
    /// the idle probe leaves it alone (an AP asleep in KVM is an idle CPU,
    /// and kicking it would only add exits).
    pub fn attach_ap<'a>(&'a self, vcpu: &'a mut Vcpu) -> RunningVcpu<'a> {
        self.attach_as(vcpu, false)
    }

    fn attach_as<'a>(&'a self, vcpu: &'a mut Vcpu, probed: bool) -> RunningVcpu<'a> {
        let run = vcpu.fd.get_kvm_run();
        let immediate_exit: *mut u8 = &mut run.immediate_exit;
        IMMEDIATE_EXIT.with(|p| p.set(immediate_exit));
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        // SAFETY: gettid has no preconditions either.
        let tid = unsafe { libc::gettid() };
        self.shared
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(VcpuThread {
                pthread: me,
                tid,
                probed,
            });
        RunningVcpu {
            vcpu,
            control: self,
            thread: me,
            _not_send: std::marker::PhantomData,
        }
    }
}

/// Stops a run from another thread ([`RunControl::aborter`]).
#[derive(Clone)]
pub struct Aborter {
    shared: Arc<Shared>,
}

impl Aborter {
    /// Stops the run (kicking its vCPUs); `run` then fails with
    /// `Error::HostFault(why)`. The first stop of a run wins.
    pub fn abort(&self, why: String) {
        *self
            .shared
            .aborted
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.shared.stop(STOP_ABORTED);
    }
}

fn watchdog(shared: &Shared, deadline: Option<Instant>) {
    let mut finished = shared.finished.lock().unwrap_or_else(|e| e.into_inner());
    let mut last_probe = Instant::now();
    loop {
        if *finished {
            return;
        }
        if super::signals::stop_requested().is_some() {
            drop(finished);
            shared.stop(STOP_INTERRUPTED);
            return;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            drop(finished);
            shared.stop(STOP_TIMEOUT);
            return;
        }
        let probe_ms = shared.idle_probe_ms.load(Ordering::Relaxed);
        if probe_ms > 0 && now.duration_since(last_probe) >= Duration::from_millis(probe_ms) {
            last_probe = now;
            shared.probe_idle();
        }
        let wait = deadline.map_or(WATCHDOG_POLL, |d| (d - now).min(WATCHDOG_POLL));
        finished = shared
            .wake
            .wait_timeout(finished, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

impl Drop for RunControl {
    fn drop(&mut self) {
        *self
            .shared
            .finished
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

/// A vCPU attached to a [`RunControl`] on the current thread.
pub struct RunningVcpu<'a> {
    vcpu: &'a mut Vcpu,
    control: &'a RunControl,
    thread: libc::pthread_t,
    /// The kick targets this thread's kvm_run: the attachment must stay on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl RunningVcpu<'_> {
    /// Runs the vCPU until its next exit. Fails with Timeout/Interrupted once the
    /// run must stop; returns `VcpuExit::Intr` when KVM_RUN was interrupted by a
    /// signal that did not stop the run (call `run` again).
    pub fn run(&mut self) -> Result<VcpuExit<'_>> {
        // Clear a previous kick before checking: a kick after the check still sets
        // immediate_exit, so it cannot be lost.
        self.vcpu.fd.set_kvm_immediate_exit(0);
        self.control.check()?;
        match self.vcpu.fd.run() {
            Ok(exit) => {
                self.control.shared.active.store(true, Ordering::Relaxed);
                Ok(exit)
            }
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Ok(VcpuExit::Intr),
            Err(e) => Err(Error::Kvm(format!("KVM_RUN failed: {e}"))),
        }
    }

    /// The attached vCPU (registers, RIP for error messages).
    pub fn vcpu(&mut self) -> &mut Vcpu {
        self.vcpu
    }

    /// The run control this vCPU is attached to.
    pub fn control(&self) -> &RunControl {
        self.control
    }
}

impl Drop for RunningVcpu<'_> {
    fn drop(&mut self) {
        let mut threads = self
            .control
            .shared
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // SAFETY: comparing pthread_t values.
        threads.retain(|t| unsafe { libc::pthread_equal(t.pthread, self.thread) } == 0);
        IMMEDIATE_EXIT.with(|p| p.set(std::ptr::null_mut()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_sets_timeout() {
        let rc = RunControl::new(Duration::from_millis(50)).unwrap();
        assert!(rc.check().is_ok());
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(rc.stop_reason(), Some(StopReason::Timeout));
        let err = rc.check().unwrap_err();
        assert_eq!(
            err.to_string(),
            "timeout: guest did not finish within 0.05 s"
        );
    }

    #[test]
    fn stat_state_skips_odd_thread_names() {
        assert_eq!(stat_state("42 (xvmm) S 1 42 42 0"), Some('S'));
        assert_eq!(stat_state("42 (a) b) R 1 42"), Some('R'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn a_blocked_thread_reads_as_sleeping_and_a_running_one_does_not() {
        // SAFETY: gettid has no preconditions.
        assert!(!thread_is_sleeping(unsafe { libc::gettid() }));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let blocked = std::thread::spawn(move || {
            // SAFETY: as above.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            let _ = done_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        let start = Instant::now();
        while !thread_is_sleeping(tid) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "never seen asleep"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(done_tx);
        blocked.join().unwrap();
        assert!(!thread_is_sleeping(tid), "an ended thread is not asleep");
    }

    #[test]
    fn an_aborter_stops_the_run_with_its_reason_and_the_first_stop_wins() {
        let rc = RunControl::new(Duration::from_secs(60)).unwrap();
        let aborter = rc.aborter();
        std::thread::spawn(move || aborter.abort("the fault server failed: x".into()))
            .join()
            .unwrap();
        assert_eq!(rc.stop_reason(), Some(StopReason::Aborted));
        let err = rc.check().unwrap_err();
        assert_eq!(err.to_string(), "host faults: the fault server failed: x");
        // A later stop does not replace the first.
        rc.interrupt();
        assert_eq!(rc.stop_reason(), Some(StopReason::Aborted));
    }

    #[test]
    fn the_first_vcpu_to_end_the_run_is_told_so_and_the_others_stop() {
        let rc = RunControl::new(Duration::from_secs(60)).unwrap();
        assert!(rc.end_run(), "the first end");
        assert!(!rc.end_run(), "a second end is not the run's");
        assert_eq!(rc.stop_reason(), Some(StopReason::Ended));
        assert!(matches!(rc.check(), Err(Error::Guest(m)) if m.contains("another vCPU")));
        // A stop before any vCPU ended leaves no vCPU's end the run's.
        let rc = RunControl::new(Duration::from_secs(60)).unwrap();
        rc.interrupt();
        assert!(!rc.end_run());
        assert!(matches!(rc.check(), Err(Error::Interrupted(_))));
    }

    #[test]
    fn a_part_keeps_the_runs_deadline_and_ends_alone() {
        let rc = RunControl::new(Duration::from_millis(300)).unwrap();
        let part = rc.part().unwrap();
        assert!(part.end_run());
        assert_eq!(part.stop_reason(), Some(StopReason::Ended));
        assert_eq!(rc.stop_reason(), None, "the run goes on");
        let part = rc.part().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(part.stop_reason(), Some(StopReason::Timeout));
        let err = part.check().unwrap_err().to_string();
        assert_eq!(err, "timeout: guest did not finish within 0.3 s");
        // A run that must stop gives no part.
        assert!(matches!(rc.part(), Err(Error::Timeout(_))));
    }

    #[test]
    fn interrupt_stops_the_run() {
        let rc = RunControl::new(Duration::from_secs(60)).unwrap();
        rc.interrupt();
        assert!(matches!(rc.check(), Err(Error::Interrupted(libc::SIGINT))));
    }

    #[test]
    fn drop_ends_the_watchdog_promptly() {
        let start = Instant::now();
        drop(RunControl::new(Duration::from_secs(60)).unwrap());
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
