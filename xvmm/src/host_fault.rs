//! Guest RAM the host makes slow on purpose (`--host-fault-delay`).
//!
//! KVM goes asynchronous on a guest page fault only when the host cannot map
//! the page at once (`__kvm_faultin_pfn` with FOLL_NOWAIT gets VM_FAULT_RETRY),
//! which a userfaultfd-backed range gives: its fault waits for us. A guest asks
//! for pages to be dropped through [`xvmm_results::channel::PORT_DROP_PAGES`];
//! each page named is checked ([`xvmm_results::channel::parse_drop_request`]),
//! registered with a userfaultfd in MISSING mode (kernel faults included: KVM's
//! async worker faults from a kworker) and dropped with `MADV_DONTNEED`. A
//! server thread answers each fault on them after the delay with `UFFDIO_COPY`
//! of a zero page, and times it.
//!
//! Only dropped pages are registered: registering all of RAM would put every
//! first touch of the guest (its whole boot) through the server.
//!
//! If the server fails it unregisters all of RAM, which wakes every blocked
//! fault to be served as an ordinary one, so the guest never hangs on it and
//! finishes; the failure is in the summary (the run then ends with it as its
//! error, its results kept and flagged). Only if the release itself fails is
//! the run stopped ([`HostFaults::start`]'s `on_failure`).

use crate::layout::RamRange;
use crate::{Error, Result, Setting};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use xvmm_results::channel::{
    parse_drop_request, DropAnswer, DropRefusal, DROP_REQUEST_OFFSET, GUEST_PAGE, RESULTS_GPA,
};

/// Shortest delay: below it the server's own latency is the delay.
pub const MIN_DELAY: Duration = Duration::from_micros(1);
/// Longest delay: KVM's async worker and the guest's waiting task sit that
/// long per page; beyond a second a run of a few hundred pages takes minutes.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// Fault latencies kept (8 MiB); past it faults are only counted.
pub const MAX_KEPT_LATENCIES: usize = 1 << 20;

/// Page runs a VM may have registered over its life. Every run splits the
/// guest memory mapping (up to two more VMAs): a guest scattering requests
/// must not push xvmm into the host's map count limit (65530 by default),
/// where its own allocations would fail.
pub const MAX_REGISTERED_RUNS: u64 = 16_384;

/// Checks the delay before anything is built.
pub fn check_delay(delay: Duration) -> Result<()> {
    if (MIN_DELAY..=MAX_DELAY).contains(&delay) {
        Ok(())
    } else {
        Err(Setting::HostFaultDelay.invalid(format!("{delay:?} is out of range: 1us to 1s")))
    }
}

/// The userfaultfd ABI (include/uapi/linux/userfaultfd.h): not in libc.
mod uapi {
    pub const UFFD_API: u64 = 0xaa;
    pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
    pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;

    #[repr(C)]
    #[derive(Default)]
    pub struct UffdioApi {
        pub api: u64,
        pub features: u64,
        pub ioctls: u64,
    }

    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct UffdioRange {
        pub start: u64,
        pub len: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct UffdioRegister {
        pub range: UffdioRange,
        pub mode: u64,
        pub ioctls: u64,
    }

    #[repr(C)]
    #[derive(Default)]
    pub struct UffdioCopy {
        pub dst: u64,
        pub src: u64,
        pub len: u64,
        pub mode: u64,
        pub copy: i64,
    }

    /// `struct uffd_msg`: the event byte, padding, then (for a page fault)
    /// flags, address and the faulting thread.
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    pub struct UffdMsg {
        pub event: u8,
        pub reserved: [u8; 7],
        pub flags: u64,
        pub address: u64,
        pub ptid: u32,
        pub pad: u32,
    }

    const UFFDIO: u32 = 0xaa;
    vmm_sys_util::ioctl_iowr_nr!(UFFDIO_API, UFFDIO, 0x3f, UffdioApi);
    vmm_sys_util::ioctl_iowr_nr!(UFFDIO_REGISTER, UFFDIO, 0x00, UffdioRegister);
    vmm_sys_util::ioctl_ior_nr!(UFFDIO_UNREGISTER, UFFDIO, 0x01, UffdioRange);
    vmm_sys_util::ioctl_ior_nr!(UFFDIO_WAKE, UFFDIO, 0x02, UffdioRange);
    vmm_sys_util::ioctl_iowr_nr!(UFFDIO_COPY, UFFDIO, 0x03, UffdioCopy);
}

/// What is missing when no userfaultfd can be had, in one line.
fn unavailable(errno: i32) -> Error {
    let why = match errno {
        libc::ENOSYS => "this kernel has no userfaultfd (CONFIG_USERFAULTFD)".to_string(),
        libc::EPERM | libc::EACCES => "userfaultfd refused kernel-mode faults: set \
             vm.unprivileged_userfaultfd=1 or run with CAP_SYS_PTRACE (e.g. as root)"
            .to_string(),
        e => format!(
            "userfaultfd failed: {}",
            std::io::Error::from_raw_os_error(e)
        ),
    };
    Error::HostFault(why)
}

/// A userfaultfd for kernel and user faults (no UFFD_USER_MODE_ONLY), after
/// the API handshake.
fn open_userfaultfd() -> Result<OwnedFd> {
    // SAFETY: the syscall takes flags only and returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    // A descriptor (an int in the kernel) or -1.
    let fd = match RawFd::try_from(ret) {
        Ok(fd) if fd >= 0 => fd,
        _ => return Err(unavailable(errno())),
    };
    // SAFETY: a descriptor the syscall just returned, owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut api = uapi::UffdioApi {
        api: uapi::UFFD_API,
        ..Default::default()
    };
    // SAFETY: UFFDIO_API reads and writes one UffdioApi, which lives for the call.
    let ret = unsafe { vmm_sys_util::ioctl::ioctl_with_mut_ref(&fd, uapi::UFFDIO_API(), &mut api) };
    if ret < 0 {
        return Err(unavailable(errno()));
    }
    Ok(fd)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Checks before boot that a userfaultfd for kernel faults can be had.
pub fn check_userfaultfd() -> Result<()> {
    open_userfaultfd().map(drop)
}

/// What the server measured and the requests the guest made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostFaultSummary {
    pub delay: Duration,
    /// Drop requests, accepted and refused.
    pub requests: u64,
    pub pages_dropped: u64,
    pub refused: u64,
    /// Why the last refused request was refused.
    pub last_refusal: Option<String>,
    /// Faults on dropped pages the server answered.
    pub faults_served: u64,
    /// From reading each fault to its page being in place, in ns.
    pub latency_ns: Vec<u64>,
    /// Why the server stopped early, if it did.
    pub failure: Option<String>,
}

/// Host ranges of guest RAM: (host address, length).
type HostRanges = Vec<(u64, u64)>;

struct Served {
    count: u64,
    latency_ns: Vec<u64>,
    failure: Option<String>,
}

/// The fault server of one VM.
pub struct HostFaults {
    uffd: Arc<OwnedFd>,
    delay: Duration,
    /// Guest RAM as (guest-physical start, size).
    ram: Vec<(u64, u64)>,
    stop: EventFd,
    served: Arc<Mutex<Served>>,
    server: Option<JoinHandle<()>>,
    summary: HostFaultSummary,
    /// Page runs registered so far, and how many may be ([`MAX_REGISTERED_RUNS`]).
    runs_registered: u64,
    run_limit: u64,
}

impl HostFaults {
    /// Opens the userfaultfd and starts the server for the guest memory
    /// `memory` (whose RAM is `ram`). `on_failure` is called once, from the
    /// server thread, if the server fails and cannot release waiting faults.
    pub fn start(
        delay: Duration,
        memory: &GuestMemoryMmap,
        ram: &[RamRange],
        on_failure: Box<dyn Fn(String) + Send>,
    ) -> Result<HostFaults> {
        check_delay(delay)?;
        let uffd = Arc::new(open_userfaultfd()?);
        let host_ranges = ram
            .iter()
            .map(|r| Ok((host_address(memory, r.start)?, r.size)))
            .collect::<Result<HostRanges>>()?;
        let stop = EventFd::new(EFD_NONBLOCK)
            .map_err(|e| Error::HostFault(format!("cannot create an eventfd: {e}")))?;
        let served = Arc::new(Mutex::new(Served {
            count: 0,
            latency_ns: Vec::new(),
            failure: None,
        }));
        let server = {
            let (uffd, served) = (Arc::clone(&uffd), Arc::clone(&served));
            let stop = stop
                .try_clone()
                .map_err(|e| Error::HostFault(format!("cannot clone an eventfd: {e}")))?;
            std::thread::Builder::new()
                .name("xvmm-faults".into())
                .spawn(move || {
                    crate::affinity::unpin_helper_thread();
                    let result = serve(&uffd, &stop, delay, &served);
                    if let Err(why) = result {
                        // Failed first, under the lock the requests hold while
                        // they register: none registers a page after this
                        // release, which no one would serve.
                        let mut state = served.lock().unwrap_or_else(|e| e.into_inner());
                        state.failure = Some(why.clone());
                        let released = unregister_all(&uffd, &host_ranges);
                        drop(state);
                        // Released faults are served as ordinary ones and
                        // the guest finishes (its results flagged); faults
                        // that stay blocked would hang it: stop the run.
                        if !released {
                            on_failure(format!("{why}; waiting faults could not be released"));
                        }
                    }
                })
                .map_err(|e| Error::HostFault(format!("cannot start the fault server: {e}")))?
        };
        Ok(HostFaults {
            uffd,
            delay,
            ram: ram.iter().map(|r| (r.start, r.size)).collect(),
            stop,
            served,
            server: Some(server),
            summary: HostFaultSummary {
                delay,
                ..Default::default()
            },
            runs_registered: 0,
            run_limit: MAX_REGISTERED_RUNS,
        })
    }

    /// Answers the guest's drop request of `count` pages: reads the request
    /// page, checks every address, drops the pages and writes the answer back.
    /// A request refused by its checks is not acted on; one the host fails
    /// half way may have dropped (zeroed) its first pages.
    pub fn serve_request(&mut self, memory: &GuestMemoryMmap, count: u32) {
        self.summary.requests += 1;
        let answer = match self.drop_requested(memory, count) {
            Ok(n) => {
                self.summary.pages_dropped += u64::from(n);
                DropAnswer::Dropped(n)
            }
            Err(refusal) => {
                self.summary.refused += 1;
                self.summary.last_refusal = Some(refusal.to_string());
                DropAnswer::Refused(refusal.code())
            }
        };
        write_answer(memory, answer);
    }

    fn drop_requested(
        &mut self,
        memory: &GuestMemoryMmap,
        count: u32,
    ) -> std::result::Result<u32, DropRefusal> {
        let mut page = vec![0u8; xvmm_results::num::usize_from(GUEST_PAGE)];
        memory
            .read_slice(&mut page, GuestAddress(RESULTS_GPA + DROP_REQUEST_OFFSET))
            .map_err(|_| DropRefusal::HostFailed)?;
        let gpas = parse_drop_request(&page, count, &self.ram)?;
        let runs = host_runs(memory, &gpas)?;
        let total = self.runs_registered.saturating_add(runs.len() as u64);
        if total > self.run_limit {
            return Err(DropRefusal::Limit(self.run_limit));
        }
        // Held while registering: a server that failed serves nothing more.
        let state = self.served.lock().unwrap_or_else(|e| e.into_inner());
        if state.failure.is_some() {
            return Err(DropRefusal::HostFailed);
        }
        self.runs_registered = total;
        let pages: u64 = runs.iter().map(|r| r.1 / GUEST_PAGE).sum();
        for run in runs {
            register(&self.uffd, run).map_err(|_| DropRefusal::HostFailed)?;
            // SAFETY: `run` lies inside guest RAM's mapping (checked above);
            // dropping it only makes the guest's next touch fault to us.
            let ret = unsafe {
                libc::madvise(
                    run.0 as *mut libc::c_void,
                    xvmm_results::num::usize_from(run.1),
                    libc::MADV_DONTNEED,
                )
            };
            if ret != 0 {
                return Err(DropRefusal::HostFailed);
            }
        }
        drop(state);
        // Repeated addresses count once.
        Ok(u32::try_from(pages).unwrap_or(count))
    }

    /// Whether the server stopped because it failed.
    pub fn failure(&self) -> Option<String> {
        self.served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failure
            .clone()
    }

    /// Stops the server and returns what it and the requests came to.
    pub fn finish(mut self) -> HostFaultSummary {
        self.stop_server();
        let served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let mut summary = std::mem::take(&mut self.summary);
        summary.delay = self.delay;
        summary.faults_served = served.count;
        summary.latency_ns = served.latency_ns.clone();
        summary.failure = served.failure.clone();
        summary
    }

    fn stop_server(&mut self) {
        let _ = self.stop.write(1);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

impl Drop for HostFaults {
    fn drop(&mut self) {
        // The descriptor closes with the last Arc, which also unregisters
        // every range and wakes any fault still waiting.
        self.stop_server();
    }
}

fn host_address(memory: &GuestMemoryMmap, gpa: u64) -> Result<u64> {
    memory
        .get_host_address(GuestAddress(gpa))
        .map(|p| p as u64)
        .map_err(|e| Error::Memory(format!("guest address {gpa:#x} has no host mapping: {e}")))
}

/// The host runs (address, length) of checked guest pages, contiguous ones
/// merged (fewer VMAs and syscalls).
fn host_runs(
    memory: &GuestMemoryMmap,
    gpas: &[u64],
) -> std::result::Result<Vec<(u64, u64)>, DropRefusal> {
    let mut hosts = gpas
        .iter()
        .map(|&g| host_address(memory, g).map_err(|_| DropRefusal::OutsideRam(g)))
        .collect::<std::result::Result<Vec<u64>, _>>()?;
    hosts.sort_unstable();
    hosts.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for h in hosts {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == h => *len += GUEST_PAGE,
            _ => runs.push((h, GUEST_PAGE)),
        }
    }
    Ok(runs)
}

fn register(uffd: &OwnedFd, (start, len): (u64, u64)) -> std::io::Result<()> {
    let mut reg = uapi::UffdioRegister {
        range: uapi::UffdioRange { start, len },
        mode: uapi::UFFDIO_REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER reads and writes one UffdioRegister.
    let ret =
        unsafe { vmm_sys_util::ioctl::ioctl_with_mut_ref(uffd, uapi::UFFDIO_REGISTER(), &mut reg) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Unregisters all of guest RAM: every fault waiting on us wakes up and is
/// served as an ordinary one. False if any range could not be.
fn unregister_all(uffd: &OwnedFd, ranges: &HostRanges) -> bool {
    ranges.iter().all(|&(start, len)| {
        let range = uapi::UffdioRange { start, len };
        // SAFETY: UFFDIO_UNREGISTER reads one UffdioRange.
        unsafe { vmm_sys_util::ioctl::ioctl_with_ref(uffd, uapi::UFFDIO_UNREGISTER(), &range) == 0 }
    })
}

/// Answers a drop request when there is no fault server: refused.
pub fn refuse_request(memory: &GuestMemoryMmap) {
    write_answer(memory, DropAnswer::Refused(DropRefusal::NotEnabled.code()));
}

fn write_answer(memory: &GuestMemoryMmap, answer: DropAnswer) {
    // The results slot always exists; a failed write leaves the guest's 0,
    // which it reads as "no answer".
    let _ = memory.write_obj(
        answer.encode(),
        GuestAddress(RESULTS_GPA + DROP_REQUEST_OFFSET),
    );
}

/// The server loop: waits for faults or the stop event; answers each fault
/// after the delay. Returns the reason if it cannot go on.
fn serve(
    uffd: &OwnedFd,
    stop: &EventFd,
    delay: Duration,
    served: &Mutex<Served>,
) -> std::result::Result<(), String> {
    // UFFDIO_COPY needs no alignment of its source.
    let zero = vec![0u8; xvmm_results::num::usize_from(GUEST_PAGE)];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: uffd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll reads and writes the two pollfds, which live for the call.
        let ret = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ret < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(format!(
                "poll on the userfaultfd failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        if fds[1].revents != 0 {
            return Ok(());
        }
        if fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err("the userfaultfd reported an error".into());
        }
        while let Some(msg) = read_message(uffd)? {
            if msg.event != uapi::UFFD_EVENT_PAGEFAULT {
                continue;
            }
            // A stop does not wait for every queued fault's delay: closing
            // the userfaultfd releases them.
            if stop_requested(stop) {
                return Ok(());
            }
            let started = Instant::now();
            std::thread::sleep(delay);
            fill_page(uffd, msg.address & !(GUEST_PAGE - 1), &zero)?;
            let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let mut served = served.lock().unwrap_or_else(|e| e.into_inner());
            served.count += 1;
            if served.latency_ns.len() < MAX_KEPT_LATENCIES {
                served.latency_ns.push(ns);
            }
        }
    }
}

/// Whether the stop event is set, without waiting or consuming it.
fn stop_requested(stop: &EventFd) -> bool {
    let mut fd = libc::pollfd {
        fd: stop.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes one pollfd, which lives for the call.
    unsafe { libc::poll(&mut fd, 1, 0) == 1 }
}

/// One message, or None when there is none waiting.
fn read_message(uffd: &OwnedFd) -> std::result::Result<Option<uapi::UffdMsg>, String> {
    let mut msg = uapi::UffdMsg::default();
    let size = std::mem::size_of::<uapi::UffdMsg>();
    // SAFETY: reads at most `size` bytes into `msg`, a plain-data struct.
    let n = unsafe {
        libc::read(
            uffd.as_raw_fd(),
            (&mut msg as *mut uapi::UffdMsg).cast(),
            size,
        )
    };
    if n < 0 {
        return match errno() {
            libc::EAGAIN | libc::EINTR => Ok(None),
            _ => Err(format!(
                "reading the userfaultfd failed: {}",
                std::io::Error::last_os_error()
            )),
        };
    }
    if usize::try_from(n).ok() != Some(size) {
        return Err(format!("short userfaultfd message ({n} of {size} bytes)"));
    }
    Ok(Some(msg))
}

/// Puts a zero page at `page` and wakes its faults; a page already there
/// only needs the wake.
fn fill_page(uffd: &OwnedFd, page: u64, zero: &[u8]) -> std::result::Result<(), String> {
    // EAGAIN: the address space was changing (mremap, fork) and nothing was
    // copied; the kernel asks us to try again.
    for _ in 0..COPY_ATTEMPTS {
        let mut copy = uapi::UffdioCopy {
            dst: page,
            src: zero.as_ptr() as u64,
            len: GUEST_PAGE,
            mode: 0,
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY reads the zero page and writes `copy.copy`.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_mut_ref(uffd, uapi::UFFDIO_COPY(), &mut copy)
        };
        if ret == 0 {
            return Ok(());
        }
        match errno() {
            libc::EAGAIN => std::thread::yield_now(),
            libc::EEXIST => return wake(uffd, page),
            e => {
                return Err(format!(
                    "UFFDIO_COPY at {page:#x} failed: {}",
                    std::io::Error::from_raw_os_error(e)
                ))
            }
        }
    }
    Err(format!(
        "UFFDIO_COPY at {page:#x} kept answering EAGAIN ({COPY_ATTEMPTS} attempts)"
    ))
}

/// How often a copy the kernel answers with EAGAIN is tried.
const COPY_ATTEMPTS: u32 = 1000;

/// Wakes the faults waiting on `page`, already in place (a second fault on
/// it raced the first).
fn wake(uffd: &OwnedFd, page: u64) -> std::result::Result<(), String> {
    let range = uapi::UffdioRange {
        start: page,
        len: GUEST_PAGE,
    };
    // SAFETY: UFFDIO_WAKE reads one UffdioRange.
    if unsafe { vmm_sys_util::ioctl::ioctl_with_ref(uffd, uapi::UFFDIO_WAKE(), &range) } != 0 {
        return Err(format!(
            "UFFDIO_WAKE at {page:#x} failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::channel::{DROP_REQUEST_HEADER, RESULTS_SIZE};

    const RAM_SIZE: u64 = 1 << 20;

    fn memory() -> (GuestMemoryMmap, Vec<RamRange>) {
        let memory = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), xvmm_results::num::usize_from(RAM_SIZE)),
            (
                GuestAddress(RESULTS_GPA),
                xvmm_results::num::usize_from(RESULTS_SIZE),
            ),
        ])
        .unwrap();
        let ram = vec![RamRange {
            start: 0,
            size: RAM_SIZE,
        }];
        (memory, ram)
    }

    fn ask(memory: &GuestMemoryMmap, faults: &mut HostFaults, gpas: &[u64]) -> DropAnswer {
        let base = RESULTS_GPA + DROP_REQUEST_OFFSET;
        memory.write_obj(0i64, GuestAddress(base)).unwrap();
        for (i, g) in gpas.iter().enumerate() {
            let at = base + (DROP_REQUEST_HEADER + i * 8) as u64;
            memory.write_obj(*g, GuestAddress(at)).unwrap();
        }
        faults.serve_request(memory, u32::try_from(gpas.len()).unwrap());
        DropAnswer::decode(memory.read_obj::<i64>(GuestAddress(base)).unwrap())
    }

    /// A host without userfaultfd for us cannot run these: the syscall
    /// itself answers ENOSYS (no CONFIG_USERFAULTFD), EPERM or EACCES (not
    /// allowed). Those alone are a skip, recorded for the suite's summary;
    /// any other failure to start (a wrong `UFFDIO_API` layout, say) fails.
    fn faults(memory: &GuestMemoryMmap, ram: &[RamRange], delay: Duration) -> Option<HostFaults> {
        // SAFETY: the syscall takes flags only and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
        if fd < 0 {
            let e = errno();
            assert!(
                matches!(e, libc::ENOSYS | libc::EPERM | libc::EACCES),
                "userfaultfd failed unexpectedly: {}",
                std::io::Error::from_raw_os_error(e)
            );
            eprintln!("{}", xvmm_host::skip::record(&unavailable(e).to_string()));
            return None;
        }
        // SAFETY: the descriptor the syscall just returned, closed once.
        unsafe { libc::close(i32::try_from(fd).unwrap()) };
        Some(
            HostFaults::start(delay, memory, ram, Box::new(|_| {}))
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    #[test]
    fn dropped_pages_come_back_zeroed_after_the_delay() {
        let (memory, ram) = memory();
        let delay = Duration::from_millis(20);
        let Some(mut faults) = faults(&memory, &ram, delay) else {
            return;
        };
        memory.write_obj(0xabcdu64, GuestAddress(0x5000)).unwrap();
        memory.write_obj(0x1234u64, GuestAddress(0x6000)).unwrap();
        assert_eq!(ask(&memory, &mut faults, &[0x5000]), DropAnswer::Dropped(1));
        // The page not named keeps its contents and does not fault.
        let started = Instant::now();
        assert_eq!(
            memory.read_obj::<u64>(GuestAddress(0x6000)).unwrap(),
            0x1234
        );
        assert!(started.elapsed() < delay);
        let started = Instant::now();
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x5000)).unwrap(), 0);
        assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
        // Present again: no second fault.
        memory.read_obj::<u64>(GuestAddress(0x5008)).unwrap();
        let summary = faults.finish();
        assert_eq!((summary.requests, summary.pages_dropped), (1, 1));
        assert_eq!(summary.faults_served, 1);
        assert!(u128::from(summary.latency_ns[0]) >= delay.as_nanos());
        assert_eq!(summary.failure, None);
    }

    #[test]
    fn bad_requests_are_refused_counted_and_not_acted_on() {
        let (memory, ram) = memory();
        let Some(mut faults) = faults(&memory, &ram, Duration::from_secs(1)) else {
            return;
        };
        memory.write_obj(7u64, GuestAddress(0x3000)).unwrap();
        let outside = [RAM_SIZE, RESULTS_GPA, 0x3001];
        for gpa in outside {
            // A good page first: a bad one anywhere refuses the whole request.
            let answer = ask(&memory, &mut faults, &[0x3000, gpa]);
            assert!(
                matches!(answer, DropAnswer::Refused(c) if c < 0),
                "{gpa:#x}: {answer:?}"
            );
        }
        let started = Instant::now();
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x3000)).unwrap(), 7);
        assert!(started.elapsed() < Duration::from_millis(500));
        let summary = faults.finish();
        assert_eq!((summary.requests, summary.refused), (3, 3));
        assert_eq!((summary.pages_dropped, summary.faults_served), (0, 0));
        assert!(summary.last_refusal.unwrap().contains("page aligned"));
    }

    #[test]
    fn scattered_requests_stop_at_the_run_limit() {
        let (memory, ram) = memory();
        let Some(mut faults) = faults(&memory, &ram, MIN_DELAY) else {
            return;
        };
        faults.run_limit = 3;
        // Two contiguous pages make one run, a third page a second one.
        assert_eq!(
            ask(&memory, &mut faults, &[0x1000, 0x2000, 0x8000]),
            DropAnswer::Dropped(3)
        );
        assert_eq!(ask(&memory, &mut faults, &[0xa000]), DropAnswer::Dropped(1));
        let refused = ask(&memory, &mut faults, &[0xc000]);
        assert_eq!(refused, DropAnswer::Refused(DropRefusal::Limit(3).code()));
        let summary = faults.finish();
        assert_eq!((summary.pages_dropped, summary.refused), (4, 1));
        assert!(summary
            .last_refusal
            .unwrap()
            .contains("more than 3 separate page runs"));
    }

    #[test]
    fn unregistering_wakes_a_waiting_fault_at_once() {
        // What the server does when it fails: the guest must not hang.
        let (memory, ram) = memory();
        let Some(mut faults) = faults(&memory, &ram, MAX_DELAY) else {
            return;
        };
        // Stop the server first, so that only the unregistration can wake
        // the fault.
        faults.stop_server();
        assert_eq!(ask(&memory, &mut faults, &[0x7000]), DropAnswer::Dropped(1));
        let host = host_address(&memory, 0).unwrap();
        let reader = {
            let memory = memory.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                memory.read_obj::<u64>(GuestAddress(0x7000)).unwrap();
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !reader.is_finished(),
            "the fault did not wait for the server"
        );
        assert!(unregister_all(&faults.uffd, &vec![(host, RAM_SIZE)]));
        let waited = reader.join().unwrap();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[test]
    fn a_missing_userfaultfd_says_what_to_change() {
        let eperm = unavailable(libc::EPERM).to_string();
        assert!(
            eperm.contains("vm.unprivileged_userfaultfd=1") && eperm.contains("CAP_SYS_PTRACE")
        );
        assert!(unavailable(libc::ENOSYS)
            .to_string()
            .contains("CONFIG_USERFAULTFD"));
        assert!(!eperm.contains('\n'));
    }

    #[test]
    fn delays_out_of_range_are_usage_errors() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_millis(1001),
        ] {
            assert!(
                matches!(
                    check_delay(d),
                    Err(Error::Invalid {
                        setting: Setting::HostFaultDelay,
                        ..
                    })
                ),
                "{d:?}"
            );
        }
        for d in [MIN_DELAY, Duration::from_micros(200), MAX_DELAY] {
            assert!(check_delay(d).is_ok());
        }
    }
}
