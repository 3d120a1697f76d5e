//! The kernel hooks' own instruction sequences, run here at CPL3: the stamp
//! stubs of patches/linux-6.12 (`XPERF_SC_U2K_STAMP`, `XPERF_PF_U2K_STAMP`,
//! `XPERF_K2U_STAMP`) with the 5-byte jumps that reach them and back, and
//! the code the hooks add to `do_syscall_64` (the entry stamp's pick-up and
//! its delivery, as the patched 6.12 kernel compiles them: per-CPU loads of
//! the interrupt counters, the stores into the stamp page), with the jump
//! labels that switch them.
//!
//! `PR_XPERF_KPAIR` times bare `rdtsc` / `lfence; rdtsc` back to back; the
//! hooks also park registers, jump out of line, consume the k2u pointer,
//! bump the sequence and store. The pairs here time the real sequences, and
//! the work only switched-on hooks do (everything getppid passes with the
//! hooks on and not with them off) is timed between the user stamps, on and
//! off, so that a run can hold what the hooks add to a round trip against
//! what it measured them to add ([`xvmm_results::correction::HooksCost`]).
//!
//! Faithful where it matters: the same instructions and operand forms,
//! `%gs:`-relative per-CPU accesses with a non-zero GS base (set with
//! `arch_prctl(ARCH_SET_GS)` for the measurement, restored after) at the
//! kernel's per-CPU offsets, task and page fields at the kernel's offsets.
//! Two substitutions, for user space: `XPERF_SC_U2K_STAMP` parks `%rax` in
//! `%r8` instead of `%rsp` (a signal must find a valid stack), and the #PF
//! stub's exception frame and "entry stack" are this thread's stack.

use crate::error::{Error, Result};
use std::arch::asm;
use xvmm_host::tsc::join;
use xvmm_host::{stamp_close, stamp_open};

/// What was reproduced, for the report.
pub const SOURCE: &str = "the hooks' instruction sequences (patches/linux-6.12: XPERF_SC_U2K_STAMP, \
XPERF_PF_U2K_STAMP, XPERF_K2U_STAMP with their 5-byte jumps; do_syscall_64's pick-up and delivery \
as the patched 6.12 kernel compiles them, with their jump labels) run at CPL3, %gs-relative per-CPU \
accesses at the kernel's offsets; %r8 parks %rax where the kernel uses %rsp";

/// The GS base during the measurement; every `%gs:` operand subtracts it.
const GS_BIAS: u64 = 0x10000;

/// A per-CPU area laid out as the kernel's: `cpu_tss_rw` at 0x6000 (sp1 at
/// +0xc), `kstat` at 0x1b060, `irq_stat` at 0x27140, `pcpu_hot` at 0x271c0
/// (`current_task` at +0, `cpu_number` at +0xc).
#[repr(C, align(4096))]
struct PerCpu([u8; 0x28000]);
static mut PERCPU: PerCpu = PerCpu([0; 0x28000]);

/// `current`: `thread.xperf_kaddr` at 0x960, `thread.xperf_k2u` at 0x968.
#[repr(C, align(4096))]
struct Task([u8; 4096]);
static mut TASK: Task = Task([0; 4096]);

/// The stamp page (docs/xperf-abi.md offsets).
#[repr(C, align(4096))]
struct Page([u8; 4096]);
static mut PAGE: Page = Page([0; 4096]);

const TSS_SP1: usize = 0x600c;
const PCPU_HOT: usize = 0x271c0;
const TASK_KADDR: usize = 0x960;
const TASK_K2U: usize = 0x968;

/// A `%gs:`-relative operand at per-CPU offset `$off`, as `PER_CPU_VAR`.
macro_rules! gs {
    ($off:literal) => {
        concat!("%gs:{pc}+", $off, "-0x10000(%rip)")
    };
}

/// A 5-byte `jmp` to local label `$to`, returning at label `$back`: the
/// patched ALTERNATIVE or jump label.
macro_rules! jmp5 {
    ($to:literal, $back:literal) => {
        concat!(
            ".byte 0xe9\n.long ",
            $to,
            "f - ",
            $back,
            "f\n",
            $back,
            ":\n"
        )
    };
}

/// `XPERF_SC_U2K_STAMP` (patch 3), `%rsp` replaced by `%r8`.
macro_rules! sc_u2k_stub {
    () => {
        concat!(
            "movq %rax, %r8\n",
            "movq %rdx, ",
            gs!("0x600c"),
            "\n",
            "rdtsc\n",
            "shlq $32, %rdx\n",
            "orq %rdx, %rax\n",
            "movq ",
            gs!("0x600c"),
            ", %rdx\n",
            "movq %rax, ",
            gs!("0x600c"),
            "\n",
            "movq %r8, %rax\n",
        )
    };
}

/// `XPERF_PF_U2K_STAMP` (patch 2): the frame's CS at 16(%rsp).
macro_rules! pf_u2k_stub {
    () => {
        concat!(
            "testb $3, 16(%rsp)\n",
            "jz 72f\n",
            "pushq %rax\n",
            "pushq %rdx\n",
            "rdtsc\n",
            "shlq $32, %rdx\n",
            "orq %rdx, %rax\n",
            "movq %rsp, %rdx\n",
            "andq $-4096, %rdx\n",
            "movq %rax, (%rdx)\n",
            "popq %rdx\n",
            "popq %rax\n",
            "72:\n",
        )
    };
}

/// `XPERF_K2U_STAMP` (patches 2 and 3), `$ret` the SYSRET path's extra
/// store (empty for IRET).
macro_rules! k2u_stub {
    ($ret:literal) => {
        concat!(
            "movq ",
            gs!("0x271c0"),
            ", %rcx\n",
            "movq 0x968(%rcx), %rsi\n",
            "testq %rsi, %rsi\n",
            "jz 71f\n",
            "movq $0, 0x968(%rcx)\n",
            "incq 8(%rsi)\n",
            $ret,
            "lfence\n",
            "rdtsc\n",
            "shlq $32, %rdx\n",
            "orq %rdx, %rax\n",
            "movq %rax, (%rsi)\n",
            "71:\n",
        )
    };
}

/// `XPERF_K2U_STAMP sysret=1`: with `movl $XPERF_sysret,
/// XPERF_k2u_ret_path(%rsi)` (SYSRET is 0).
macro_rules! k2u_sysret_stub {
    () => {
        k2u_stub!("movl $0, 16(%rsi)\n")
    };
}

/// `do_syscall_64`'s pick-up of the entry stamp (`xperf_syscall_entry`
/// inlined) on the path the jump label selects when on; label 84 is the
/// off path, 87 where both continue.
macro_rules! pickup_block {
    () => {
        concat!(
            "84:\n",
            "xorl %r13d, %r13d\n",
            "xorl %ebx, %ebx\n",
            "xorl %r12d, %r12d\n",
            "jmp 87f\n",
            "85:\n",
            "xorl %eax, %eax\n",
            "movq ",
            gs!("0x600c"),
            ", %r12\n",
            "movq %rax, ",
            gs!("0x600c"),
            "\n",
            "cmpq $0, 0x960(%rbp)\n",
            "je 84b\n",
            "movq ",
            gs!("0x1b060"),
            ", %rcx\n",
            "movl ",
            gs!("0x27144"),
            ", %eax\n",
            "movl ",
            gs!("0x27160"),
            ", %edx\n",
            "addq %rdx, %rax\n",
            "movl ",
            gs!("0x27164"),
            ", %edx\n",
            "addq %rcx, %rax\n",
            "addq %rdx, %rax\n",
            "movl ",
            gs!("0x27168"),
            ", %edx\n",
            "addq %rax, %rdx\n",
            "movl ",
            gs!("0x27148"),
            ", %eax\n",
            "addq %rdx, %rax\n",
            "movl ",
            gs!("0x2714c"),
            ", %edx\n",
            "addq %rax, %rdx\n",
            "movl ",
            gs!("0x2716c"),
            ", %eax\n",
            "addq %rdx, %rax\n",
            "movl ",
            gs!("0x27170"),
            ", %edx\n",
            "addq %rax, %rdx\n",
            "movl ",
            gs!("0x27178"),
            ", %eax\n",
            "addq %rdx, %rax\n",
            "movl ",
            gs!("0x27154"),
            ", %edx\n",
            "addq %rax, %rdx\n",
            "movl ",
            gs!("0x27158"),
            ", %eax\n",
            "movl ",
            gs!("0x2715c"),
            ", %ebx\n",
            "movl ",
            gs!("0x271cc"),
            ", %r13d\n",
            "addq %rdx, %rax\n",
            "addq %rax, %rbx\n",
            "87:\n",
        )
    };
}

/// `do_syscall_64`'s delivery (`xperf_syscall_exit` inlined) after
/// `syscall_exit_to_user_mode()`; 89 is where both paths continue.
macro_rules! delivery_block {
    () => {
        concat!(
            "88:\n",
            "testq %r12, %r12\n",
            "je 89f\n",
            "movq 0x960(%rbp), %rax\n",
            "testq %rax, %rax\n",
            "je 89f\n",
            "movq %rbx, 0x50(%rax)\n",
            "addq $0x38, %rax\n",
            "movl %r13d, 0x28(%rax)\n",
            "movq ",
            gs!("0x1b060"),
            ", %rsi\n",
            "movl ",
            gs!("0x27144"),
            ", %edx\n",
            "movl ",
            gs!("0x27160"),
            ", %ecx\n",
            "addq %rcx, %rdx\n",
            "movl ",
            gs!("0x27164"),
            ", %ecx\n",
            "addq %rsi, %rdx\n",
            "addq %rdx, %rcx\n",
            "movl ",
            gs!("0x27168"),
            ", %edx\n",
            "addq %rcx, %rdx\n",
            "movl ",
            gs!("0x27148"),
            ", %ecx\n",
            "addq %rdx, %rcx\n",
            "movl ",
            gs!("0x2714c"),
            ", %edx\n",
            "addq %rcx, %rdx\n",
            "movl ",
            gs!("0x2716c"),
            ", %ecx\n",
            "addq %rdx, %rcx\n",
            "movl ",
            gs!("0x27170"),
            ", %edx\n",
            "addq %rcx, %rdx\n",
            "movl ",
            gs!("0x27178"),
            ", %ecx\n",
            "addq %rdx, %rcx\n",
            "movl ",
            gs!("0x27154"),
            ", %edx\n",
            "addq %rcx, %rdx\n",
            "movl ",
            gs!("0x27158"),
            ", %ecx\n",
            "addq %rdx, %rcx\n",
            "movl ",
            gs!("0x2715c"),
            ", %edx\n",
            "addq %rcx, %rdx\n",
            "movq %rdx, 0x20(%rax)\n",
            "movl ",
            gs!("0x271cc"),
            ", %edx\n",
            "movq %r12, -0x8(%rax)\n",
            "movl %edx, 0x2c(%rax)\n",
            "movl $1, 0x10(%rax)\n",
            "movq %rax, 0x968(%rbp)\n",
            "89:\n",
        )
    };
}

/// The fields a sample starts from: `current` and its stamp page set, the
/// entry stamp left in TSS.sp1 as the SYSCALL stub leaves it, and the k2u
/// slot aimed at `k2u_field` of the page (none when 0).
fn prime(k2u_field: Option<usize>) {
    // SAFETY: single-threaded use of this module's own statics (see
    // `measure`), through raw pointers only.
    unsafe {
        let pc = std::ptr::addr_of_mut!(PERCPU).cast::<u8>();
        let task = std::ptr::addr_of_mut!(TASK).cast::<u8>();
        let page = std::ptr::addr_of_mut!(PAGE).cast::<u8>();
        pc.add(PCPU_HOT).cast::<u64>().write(task as u64);
        pc.add(TSS_SP1).cast::<u64>().write_unaligned(1);
        task.add(TASK_KADDR).cast::<u64>().write(page as u64);
        let k2u = k2u_field.map_or(0, |f| page as u64 + f as u64);
        task.add(TASK_K2U).cast::<u64>().write(k2u);
    }
}

fn page_u64(offset: usize) -> u64 {
    // SAFETY: inside the page static; see `prime`.
    unsafe {
        std::ptr::addr_of!(PAGE)
            .cast::<u8>()
            .add(offset)
            .cast::<u64>()
            .read_volatile()
    }
}

fn sp1() -> u64 {
    // SAFETY: inside the per-CPU static; see `prime`.
    unsafe {
        std::ptr::addr_of!(PERCPU)
            .cast::<u8>()
            .add(TSS_SP1)
            .cast::<u64>()
            .read_unaligned()
    }
}

/// The SYSCALL kind's two sites back to back, each its jump, stub and jump
/// back, in the order of the label pairs given: `81`/`82` is the return
/// stamp, `83`/`84` the entry stamp.
macro_rules! syscall_sites {
    ($first:literal, $first_back:literal, $second:literal, $second_back:literal) => {
        // SAFETY: the stubs touch only the declared registers and this
        // module's statics; the GS base is set (`measure`).
        unsafe {
            asm!(
                jmp5!($first, $first_back),
                jmp5!($second, $second_back),
                "jmp 99f",
                "81:", k2u_sysret_stub!(), "jmp 82b",
                "83:", sc_u2k_stub!(), "jmp 84b",
                "99:",
                pc = sym PERCPU,
                out("rax") _, out("rcx") _, out("rdx") _, out("rsi") _, out("r8") _,
                options(att_syntax, nostack),
            );
        }
    };
}

/// The SYSCALL kind: (return stamp then entry stamp, entry then return).
fn syscall_pairs() -> (u64, u64) {
    let sc_k2u = crate::abi::offset::SC_K2U_K;
    prime(Some(sc_k2u));
    syscall_sites!("81", "82", "83", "84");
    let pair = sp1().wrapping_sub(page_u64(sc_k2u));
    prime(Some(sc_k2u));
    syscall_sites!("83", "84", "81", "82");
    let inner = page_u64(sc_k2u).wrapping_sub(sp1());
    (pair, inner)
}

/// The #PF kind's two sites, likewise, on a user-mode exception frame (CS
/// 0x33) pushed on this stack; the entry stub keeps its TSC at the bottom of
/// the stack page, read back after. Gives that TSC.
macro_rules! pf_sites {
    ($first:literal, $first_back:literal, $second:literal, $second_back:literal) => {{
        let entry: u64;
        // SAFETY: as in `syscall_sites`; the frame is pushed and popped
        // here, and the stub's store lands below the stack pointer in its
        // page.
        unsafe {
            asm!(
                "pushq $0x33", "pushq $0", "pushq $0",
                jmp5!($first, $first_back),
                jmp5!($second, $second_back),
                "movq %rsp, %rdx", "subq $16, %rdx", "andq $-4096, %rdx", "movq (%rdx), {e}",
                "addq $24, %rsp",
                "jmp 99f",
                "81:", k2u_stub!(""), "jmp 82b",
                "83:", pf_u2k_stub!(), "jmp 84b",
                "99:",
                pc = sym PERCPU,
                e = out(reg) entry,
                out("rax") _, out("rcx") _, out("rdx") _, out("rsi") _,
                options(att_syntax),
            );
        }
        entry
    }};
}

/// The #PF kind: (return stamp then entry stamp, entry then return).
fn pf_pairs() -> (u64, u64) {
    let pf_k2u = crate::abi::offset::PF_K2U_K;
    prime(Some(pf_k2u));
    let entry_a = pf_sites!("81", "82", "83", "84");
    let pair = entry_a.wrapping_sub(page_u64(pf_k2u));
    prime(Some(pf_k2u));
    let entry_b = pf_sites!("83", "84", "81", "82");
    let inner = page_u64(pf_k2u).wrapping_sub(entry_b);
    (pair, inner)
}

/// What a getppid passes only with the hooks on, between the user stamps:
/// `do_syscall_64`'s pick-up and delivery through their jump labels, then
/// the SYSRET return stamp through its 5-byte jump label. `on == false`
/// takes the same code with every site a NOP, as a kernel with the hooks
/// off runs it. Returns the stamped interval (ticks).
fn getppid_hook_work(on: bool) -> u64 {
    prime(None);
    let (lo, hi, end_lo, end_hi): (u32, u32, u32, u32);
    macro_rules! work {
        ($site1:literal, $site2:literal, $site3:literal) => {
            // SAFETY: as in `syscall_pairs`; rbx and rbp, which the
            // compiler reserves, are saved in scratch registers and
            // restored before the block ends.
            unsafe {
                asm!(
                    "movq %rbx, {sbx}",
                    "movq %rbp, {sbp}",
                    "movq {task}, %rbp",
                    stamp_open!(),
                    "movl %eax, {lo:e}",
                    "movl %edx, {hi:e}",
                    $site1,
                    pickup_block!(),
                    $site2,
                    delivery_block!(),
                    $site3,
                    stamp_close!(),
                    "movq {sbx}, %rbx",
                    "movq {sbp}, %rbp",
                    "jmp 99f",
                    "81:", k2u_sysret_stub!(), "jmp 82b",
                    "99:",
                    pc = sym PERCPU,
                    task = in(reg) std::ptr::addr_of!(TASK) as u64,
                    sbx = out(reg) _,
                    sbp = out(reg) _,
                    lo = out(reg) lo,
                    hi = out(reg) hi,
                    out("rax") end_lo, out("rdx") end_hi,
                    out("rcx") _, out("rsi") _, out("r12") _, out("r13") _,
                    options(att_syntax, nostack),
                );
            }
        };
    }
    if on {
        work!(
            "jmp 85f\n",
            "jmp 88f\njmp 89f\n",
            ".byte 0xe9\n.long 81f - 82f\n82:\n"
        );
    } else {
        work!(
            "xchg %ax, %ax\n",
            "xchg %ax, %ax\njmp 89f\n",
            ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n82:\n"
        );
    }
    join(end_lo, end_hi).saturating_sub(join(lo, hi))
}

/// Everything [`measure`] times, `samples` of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timings {
    pub syscall_pair: Vec<u64>,
    pub syscall_inner: Vec<u64>,
    pub pf_pair: Vec<u64>,
    pub pf_inner: Vec<u64>,
    /// getppid's hooks-on-only work, stamped, on and off.
    pub getppid_on: Vec<u64>,
    pub getppid_off: Vec<u64>,
}

const ARCH_SET_GS: libc::c_int = 0x1001;
const ARCH_GET_GS: libc::c_int = 0x1004;

/// Times the hooks' sequences: `warmup` samples then `samples`, every kind
/// interleaved sample by sample. The GS base is set for the duration and
/// restored (an error when it cannot be).
pub fn measure(warmup: usize, samples: usize) -> Result<Timings> {
    let mut saved: u64 = 0;
    // SAFETY: arch_prctl with a pointer to a local u64 / a plain value.
    let got = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_GS, &mut saved as *mut u64) };
    if got != 0 {
        return Err(Error::last_os("arch_prctl(ARCH_GET_GS)"));
    }
    // SAFETY: as above; nothing in this process uses the GS base.
    if unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, GS_BIAS) } != 0 {
        return Err(Error::last_os("arch_prctl(ARCH_SET_GS)"));
    }
    let mut t = Timings::default();
    for i in 0..warmup + samples {
        let (sp, si) = syscall_pairs();
        let (pp, pi) = pf_pairs();
        let (on, off) = if i % 2 == 0 {
            (getppid_hook_work(true), getppid_hook_work(false))
        } else {
            let off = getppid_hook_work(false);
            (getppid_hook_work(true), off)
        };
        if i >= warmup {
            t.syscall_pair.push(sp);
            t.syscall_inner.push(si);
            t.pf_pair.push(pp);
            t.pf_inner.push(pi);
            t.getppid_on.push(on);
            t.getppid_off.push(off);
        }
    }
    // SAFETY: as above.
    if unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, saved) } != 0 {
        return Err(Error::last_os(
            "arch_prctl(ARCH_SET_GS) restoring the GS base",
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequences_run_and_store_what_the_kernel_would() {
        let t = measure(10, 200).unwrap();
        let min = |v: &[u64]| v.iter().copied().min().unwrap();
        // Every pair holds at least an rdtsc's worth and is far from a
        // wrapped subtraction.
        for (what, v) in [
            ("syscall pair", &t.syscall_pair),
            ("syscall inner", &t.syscall_inner),
            ("pf pair", &t.pf_pair),
            ("pf inner", &t.pf_inner),
        ] {
            assert!(min(v) > 0 && min(v) < 1_000_000, "{what}: {:?}", &v[..5]);
        }
        // The on variant runs ~70 more instructions than the off one.
        let med = |v: &[u64]| xvmm_results::Stats::from_samples(v).median;
        eprintln!(
            "syscall pair {} inner {}, pf pair {} inner {}, getppid hook work on {} off {}",
            med(&t.syscall_pair),
            med(&t.syscall_inner),
            med(&t.pf_pair),
            med(&t.pf_inner),
            med(&t.getppid_on),
            med(&t.getppid_off)
        );
        assert!(
            med(&t.getppid_on) > med(&t.getppid_off),
            "on {} off {}",
            med(&t.getppid_on),
            med(&t.getppid_off)
        );
        // The delivery wrote the page as the kernel does: the entry stamp
        // (1, primed in TSS.sp1) at sc_u2k_k, IRET preset, then the SYSRET
        // stub consumed the k2u slot and recorded SYSRET, bumping sc_seq.
        prime(None);
        let seq = page_u64(crate::abi::offset::SC_SEQ);
        // SAFETY: the GS base is set around the call, as `measure` does.
        unsafe {
            libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, GS_BIAS);
        }
        getppid_hook_work(true);
        // SAFETY: back to 0, Linux's initial GS base for a user thread.
        unsafe {
            libc::syscall(libc::SYS_arch_prctl, ARCH_SET_GS, 0u64);
        }
        assert_eq!(page_u64(crate::abi::offset::SC_U2K_K), 1);
        assert_eq!(page_u64(crate::abi::offset::SC_SEQ), seq + 1);
        assert_eq!(page_u64(crate::abi::offset::SC_RET_PATH) & 0xffff_ffff, 0);
        assert!(page_u64(crate::abi::offset::SC_K2U_K) > 1);
        assert_eq!(sp1(), 0, "the pick-up clears TSS.sp1");
    }
}
