//! The user-side stamps, each crossing in one `asm!` block so the compiler can
//! neither move work into the measured window nor spill a stamp to memory
//! inside it (a spill could itself fault). Both stamps stay in registers until
//! the block ends.
//!
//! Every block has the same shape:
//!
//! ```text
//!   rdtscp; mov aux, ecx           <- the CPU the sample starts on (TSC_AUX), before the window
//!   stamp_open!()                  <- opening stamp (u2k_u): lfence; rdtsc; lfence
//!   mov lo, eax; mov hi, edx       <- keep it in registers
//!   <crossing>                     <- nothing, one store, or mov eax,NR; syscall (K times for a batch)
//!   stamp_close!()                 <- closing stamp (k2u_u): rdtscp; lfence (TSC_AUX again)
//! ```
//!
//! so the null measurement carries the same two moves and subtracting its
//! median leaves the crossing (plus `mov eax, 110` for getppid). The stamps
//! are `xvmm_host::tsc`'s, the ones every user-mode producer uses. The
//! leading RDTSCP is outside the window: the opening stamp's first LFENCE
//! waits for it.

use std::arch::asm;
use xvmm_host::tsc::join;
use xvmm_host::{stamp_close, stamp_open};

/// Instructions between the opening stamp and the crossing, for the report.
pub const TAIL_AFTER_OPEN: &str = "mov r32, eax; mov r32, edx (getppid adds mov eax, 110)";

/// Linux keeps the CPU number in the low 12 bits of TSC_AUX.
pub const AUX_CPU_MASK: u32 = 0xfff;

/// One sample's user stamps and the CPU each was taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub open: u64,
    pub close: u64,
    /// TSC_AUX right before the opening stamp.
    pub aux_open: u32,
    /// TSC_AUX of the closing stamp.
    pub aux_close: u32,
}

impl Stamps {
    /// The CPU of the closing stamp, or `None` when the two stamps came from
    /// different CPUs.
    pub fn cpu(&self) -> Option<u32> {
        let (a, b) = (self.aux_open & AUX_CPU_MASK, self.aux_close & AUX_CPU_MASK);
        (a == b).then_some(b)
    }
}

/// One stamped `asm!` block: the opening stamp, the `crossing`
/// instructions, the closing stamp, with the stamps kept in registers (the
/// module comment's shape). `cpu` adds the leading RDTSCP whose TSC_AUX
/// names the CPU the sample starts on and returns [`Stamps`]; `plain`
/// returns (open, close). The operands the crossing needs come in a second
/// bracket (each ending in a comma), then the block's `options(...)`. Expands to an `asm!`, so it
/// must be used inside `unsafe`.
macro_rules! stamped {
    (cpu [$($crossing:expr),* $(,)?] [$($operand:tt)*] options($($option:ident),*)) => {{
        let (lo, hi, aux0): (u32, u32, u32);
        let (end_lo, end_hi, aux1): (u32, u32, u32);
        asm!(
            "rdtscp",
            "mov {aux0:e}, ecx",
            stamp_open!(),
            "mov {lo:e}, eax",
            "mov {hi:e}, edx",
            $($crossing,)*
            stamp_close!(),
            $($operand)*
            aux0 = out(reg) aux0,
            lo = out(reg) lo,
            hi = out(reg) hi,
            out("eax") end_lo,
            out("edx") end_hi,
            out("ecx") aux1,
            options($($option),*),
        );
        Stamps {
            open: join(lo, hi),
            close: join(end_lo, end_hi),
            aux_open: aux0,
            aux_close: aux1,
        }
    }};
    (plain [$($crossing:expr),* $(,)?] [$($operand:tt)*] options($($option:ident),*)) => {{
        let (lo, hi): (u32, u32);
        let (end_lo, end_hi): (u32, u32);
        asm!(
            stamp_open!(),
            "mov {lo:e}, eax",
            "mov {hi:e}, edx",
            $($crossing,)*
            stamp_close!(),
            $($operand)*
            lo = out(reg) lo,
            hi = out(reg) hi,
            out("eax") end_lo,
            out("edx") end_hi,
            out("ecx") _,
            options($($option),*),
        );
        (join(lo, hi), join(end_lo, end_hi))
    }};
}

/// The stamp pair with nothing between.
#[inline(always)]
pub fn null_pair() -> Stamps {
    // SAFETY: the stamps only (rdtsc, rdtscp, lfence); every clobbered register is declared.
    unsafe { stamped!(cpu [] [] options(nostack, preserves_flags)) }
}

/// A dependent chain of `n` `imul` (a positive multiple of 8, as the
/// microguest's chain: `mov` of the count, 8 imul per `sub; jnz` turn)
/// between the stamps, for the user pair's linearity sweep; the rest of the
/// block is [`null_pair`]'s, so that the two differ by the chain alone.
#[inline(always)]
pub fn chain_pair(n: u64) -> Stamps {
    // SAFETY: register arithmetic and the stamps; every clobbered register
    // is declared. A count of 0 would wrap: it is raised to 8.
    unsafe {
        stamped!(cpu [
            "mov {count}, {n}",
            "2:",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "imul rax, rax", "imul rax, rax", "imul rax, rax", "imul rax, rax",
            "sub {count}, 8",
            "jnz 2b",
        ] [
            n = in(reg) n.max(8) & !7,
            count = out(reg) _,
        ] options(nostack))
    }
}

/// One byte store to `addr` between the stamps; the store is the crossing when
/// the page is not present (#PF).
///
/// # Safety
/// `addr` must be writable memory of this process (mapped, possibly not yet
/// populated).
#[inline(always)]
pub unsafe fn store_pair(addr: *mut u8) -> Stamps {
    stamped!(cpu ["mov byte ptr [{addr}], 1"] [addr = in(reg) addr,]
        options(nostack, preserves_flags))
}

/// `getppid` through a raw `syscall` between the stamps. Its result is not
/// kept: reading it would put a move into the return window.
#[inline(always)]
pub fn getppid_pair() -> Stamps {
    getppid_batch(1)
}

/// `k` (at least 1) `getppid` syscalls back to back between one pair of
/// stamps: the batched figure, as perf bench times syscalls.
#[inline(always)]
pub fn getppid_batch(k: u64) -> Stamps {
    // SAFETY: getppid has no arguments and no side effects; syscall clobbers
    // rcx, r11 and rax (the result, overwritten by rdtscp), all declared.
    unsafe {
        stamped!(cpu ["2:", "mov eax, {nr}", "syscall", "dec {k}", "jnz 2b"] [
            nr = const libc::SYS_getppid,
            k = inout(reg) k.max(1) => _,
            out("r11") _,
        ] options(nostack))
    }
}

/// `cpuid` (leaf `leaf`, subleaf 0) between the stamps: (open, close). Under
/// a hypervisor CPUID always exits, so this is the cheapest VM-exit round
/// trip user space can time. RBX, which LLVM reserves, is saved in a scratch
/// register around it.
#[inline(always)]
pub fn cpuid_pair(leaf: u32) -> (u64, u64) {
    // SAFETY: cpuid and the stamps touch only declared registers; rbx is restored.
    unsafe {
        stamped!(plain [
            "mov eax, {leaf:e}",
            "xor ecx, ecx",
            "mov {rbx}, rbx",
            "cpuid",
            "mov rbx, {rbx}",
        ] [
            leaf = in(reg) leaf,
            rbx = out(reg) _,
        ] options(nostack, preserves_flags))
    }
}

/// One more `rdtsc` between the stamps: (open, close).
#[inline(always)]
pub fn rdtsc_pair() -> (u64, u64) {
    // SAFETY: the stamps and rdtsc only; every clobbered register is declared.
    unsafe { stamped!(plain ["rdtsc"] [] options(nostack, preserves_flags)) }
}

/// One more `rdtscp` between the stamps: (open, close).
#[inline(always)]
pub fn rdtscp_pair() -> (u64, u64) {
    // SAFETY: the stamps and rdtscp only; every clobbered register is declared.
    unsafe { stamped!(plain ["rdtscp"] [] options(nostack, preserves_flags)) }
}

/// `count` (at least 1) `pause` instructions in a loop between the stamps:
/// (open, close). A hypervisor with pause-loop exiting intercepts a long
/// enough run of them.
#[inline(always)]
pub fn pause_pair(count: u32) -> (u64, u64) {
    // SAFETY: pause, a counted loop and the stamps; every register is declared.
    unsafe {
        stamped!(plain ["2:", "pause", "dec {n:e}", "jnz 2b"] [n = inout(reg) count.max(1) => _,]
            options(nostack))
    }
}

/// A `dec; jnz` loop of `count` (at least 1) iterations between the stamps:
/// the control for [`pause_pair`] (same shape, no pause).
#[inline(always)]
pub fn spin_pair(count: u32) -> (u64, u64) {
    // SAFETY: a counted loop and the stamps; every register is declared.
    unsafe {
        stamped!(plain ["2:", "dec {n:e}", "jnz 2b"] [n = inout(reg) count.max(1) => _,]
            options(nostack))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_ordered_and_a_syscall_costs_more_than_nothing() {
        // Minimum over many pairs: robust against interrupts in single samples.
        let null = (0..2000)
            .map(|_| null_pair())
            .map(|s| s.close - s.open)
            .min();
        let sys = (0..2000)
            .map(|_| getppid_pair())
            .map(|s| s.close - s.open)
            .min();
        let (null, sys) = (null.unwrap_or(0), sys.unwrap_or(0));
        assert!(null > 0, "null pair not ordered");
        assert!(sys > null, "getppid {sys} ticks <= null pair {null} ticks");
        let batch = (0..200)
            .map(|_| getppid_batch(10))
            .map(|s| s.close - s.open)
            .min();
        assert!(batch.unwrap_or(0) > 5 * sys, "10 syscalls cost more than 5");
    }

    #[test]
    fn probe_pairs_are_ordered_and_cpuid_names_the_vendor_as_before() {
        for (a, b) in [
            cpuid_pair(0),
            rdtsc_pair(),
            rdtscp_pair(),
            pause_pair(1),
            spin_pair(1),
        ] {
            assert!(a < b, "{a} then {b}");
        }
        let (a, b) = pause_pair(1000);
        let (c, d) = pause_pair(1);
        assert!(b - a > d - c, "1000 pauses no slower than one");
        // rbx survives: the vendor string still reads the same afterwards.
        #[allow(unused_unsafe)] // a safe fn on newer toolchains
        let vendor = || {
            // SAFETY: cpuid exists on every x86-64 CPU.
            let r = unsafe { std::arch::x86_64::__cpuid(0) };
            (r.ebx, r.ecx, r.edx)
        };
        let before = vendor();
        let _ = cpuid_pair(0);
        assert_eq!(vendor(), before);
    }

    #[test]
    fn store_pair_writes_the_byte() {
        let mut cell = [0u8; 64];
        // SAFETY: a live, writable local buffer.
        let s = unsafe { store_pair(cell.as_mut_ptr().wrapping_add(5)) };
        assert!(s.open < s.close);
        assert_eq!(cell[5], 1);
    }

    #[test]
    fn the_stamps_name_the_cpu_the_thread_is_pinned_to() {
        // Pinned, the thread cannot move: TSC_AUX's low 12 bits (Linux
        // writes node << 12 | cpu) must name the CPU the kernel reports.
        // SAFETY: no arguments.
        let cpu = u32::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu");
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
        // sched_setaffinity only touch it and this thread's affinity.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                0
            );
        }
        let mut cell = [0u8; 64];
        for _ in 0..100 {
            // SAFETY: a live, writable local buffer.
            let s = unsafe { store_pair(cell.as_mut_ptr()) };
            assert_eq!(s.cpu(), Some(cpu), "{s:?}");
        }
        // The node bits above the mask are not the CPU; differing CPUs are
        // no CPU.
        let node1 = |cpu: u32| (1 << 12) | cpu;
        let s = Stamps {
            open: 1,
            close: 2,
            aux_open: node1(3),
            aux_close: node1(3),
        };
        assert_eq!(s.cpu(), Some(3));
        assert_eq!(
            Stamps {
                aux_close: node1(4),
                ..s
            }
            .cpu(),
            None
        );
    }

    #[test]
    fn longer_chains_take_longer() {
        let min = |n: u64| {
            (0..500)
                .map(|_| chain_pair(n))
                .map(|s| s.close - s.open)
                .min()
                .unwrap_or(0)
        };
        let (short, long) = (min(8), min(1024));
        assert!(short > 0 && long > short + 500, "8: {short}, 1024: {long}");
    }

    #[test]
    fn a_cpu_change_between_the_stamps_has_no_cpu() {
        let s = Stamps {
            open: 1,
            close: 2,
            aux_open: 3,
            aux_close: 4,
        };
        assert_eq!(s.cpu(), None);
        let s = Stamps {
            aux_open: (1 << 12) | 4,
            ..s
        };
        assert_eq!(s.cpu(), Some(4), "the node bits do not count");
    }
}
