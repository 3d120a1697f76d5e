//! Names one crate writes into a report and others read back, typed once:
//! xperf's crossings (its report's rows, `xperf probes`, the
//! characterisation's crossing metrics) and the characterisation metrics
//! the fleet report compares. The microguest's rows have their own table,
//! `xvmm::microguest::kinds`, which also orders its assembly's dispatch.

/// A first write to an anonymous page: the kernel allocates it.
pub const PF_FIRST_TOUCH: &str = "pf-first-touch";
/// A read of a page whose mapping was dropped (`MADV_DONTNEED` of a file
/// page): the kernel maps it again.
pub const PF_REFAULT: &str = "pf-refault";
/// The system call with least work in the kernel.
pub const GETPPID: &str = "getppid";

/// `cpuid` from user mode: the cheapest exit a tenant can time.
pub const CPUID: &str = "cpuid";
/// CLOCK_MONOTONIC through libc (the vDSO where the clocksource allows).
pub const CLOCK_GETTIME_VDSO: &str = "clock_gettime-vdso";
/// CLOCK_MONOTONIC by the raw system call.
pub const CLOCK_GETTIME_SYSCALL: &str = "clock_gettime-syscall";
/// A futex ping-pong between threads asleep on two CPUs (two wake-ups a
/// sample, each an IPI and a schedule).
pub const WAKEUP_CROSS_CPU: &str = "wakeup-cross-cpu";
/// How late an absolute CLOCK_MONOTONIC sleep wakes, in ns.
pub const TIMER_WAKEUP: &str = "timer-wakeup";
/// The same sleep whole, as a crossing: TSC ticks from before the call to
/// after its return (the period, the lateness and the calls).
pub const TIMER_SLEEP: &str = "timer-sleep";
/// `mprotect` read-only and back while another thread of the process runs
/// on another CPU: each takes a TLB shootdown there.
pub const MPROTECT_SHOOTDOWN: &str = "mprotect-shootdown";
/// The same pair with no other thread running: no CPU to flush but this.
pub const MPROTECT_LOCAL: &str = "mprotect-local";
