//! Thread placement: pinning the vCPU thread (`--pin`) and keeping helper
//! threads off the CPU it was pinned to.

use crate::{Result, Setting};

/// The CPU mask the pinned thread had before [`pin_current_thread`]. Threads
/// spawned after pinning inherit the single CPU; helpers (watchdog, trace
/// reader, stdin forwarder) go back to this mask so that they do not compete
/// with the vCPU on the measured CPU.
static MASK_BEFORE_PIN: std::sync::Mutex<Option<libc::cpu_set_t>> = std::sync::Mutex::new(None);

/// Gives the calling helper thread the CPU mask from before `--pin`, if the
/// process pinned a thread (a no-op otherwise).
pub fn unpin_helper_thread() {
    let saved = *MASK_BEFORE_PIN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(set) = saved {
        // SAFETY: a valid cpu_set_t obtained from sched_getaffinity. Failure
        // only leaves the helper on the pinned CPU.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    }
}

/// The calling thread's CPU mask, where the kernel gives it.
fn current_mask() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size given.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    (ok == 0).then_some(set)
}

/// The CPUs a mask holds, in order.
fn cpus_in(set: &libc::cpu_set_t) -> impl Iterator<Item = usize> + '_ {
    // SAFETY: CPU_ISSET reads a valid cpu_set_t within CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(move |&cpu| unsafe { libc::CPU_ISSET(cpu, set) })
}

/// The host CPUs this process may run on (its affinity mask from before
/// any `--pin`), in order.
pub fn usable_cpus() -> Vec<usize> {
    let saved = *MASK_BEFORE_PIN.lock().unwrap_or_else(|e| e.into_inner());
    match saved.or_else(current_mask) {
        Some(set) => cpus_in(&set).collect(),
        None => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// The one host CPU the calling thread may run on, when its mask has one.
pub fn pinned_cpu() -> Option<usize> {
    let set = current_mask()?;
    let mut cpus = cpus_in(&set);
    match (cpus.next(), cpus.next()) {
        (Some(cpu), None) => Some(cpu),
        _ => None,
    }
}

/// Pins the calling thread to host CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Setting::PinCpu.invalid(format!("{cpu}: no such CPU")));
    }
    {
        let mut saved = MASK_BEFORE_PIN.lock().unwrap_or_else(|e| e.into_inner());
        if saved.is_none() {
            *saved = current_mask();
        }
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET is bounds-checked above.
    let ret = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if ret != 0 {
        return Err(Setting::PinCpu.invalid(format!(
            "{cpu}: cannot pin to that CPU ({}; this host has {ncpus} usable CPUs)",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}
