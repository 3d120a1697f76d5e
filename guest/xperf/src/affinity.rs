//! Where xperf's threads run: every measurement (the crossings, the
//! pf-host-miss spinner, the probes, the TSC skew ping-pong) pins itself.

use crate::error::{Error, Result};

/// Pins the calling thread to `cpu` (default: the current CPU); returns it.
pub(crate) fn pin(cpu: Option<u32>) -> Result<u32> {
    let cpu = match cpu {
        Some(c) => c,
        None => {
            // SAFETY: no arguments.
            let c = unsafe { libc::sched_getcpu() };
            u32::try_from(c).map_err(|_| Error::last_os("sched_getcpu"))?
        }
    };
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(Error::Usage(format!("--cpu {cpu} is beyond CPU_SETSIZE")));
    }
    // SAFETY: a zeroed cpu_set_t is empty; cpu is below CPU_SETSIZE.
    let ret = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if ret != 0 {
        return Err(Error::last_os(&format!("cannot pin to CPU {cpu}")));
    }
    Ok(cpu)
}

/// The online CPUs (`/sys/devices/system/cpu/online`); empty where that
/// file is missing or not a CPU list.
pub fn online_cpus() -> Vec<u32> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    // As many CPUs as a cpu_set_t can pin to.
    xvmm_host::cpu_list::parse(&list, libc::CPU_SETSIZE as usize).unwrap_or_default()
}
