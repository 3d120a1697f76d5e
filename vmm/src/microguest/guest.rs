//! The guest code: a user-mode (CPL3) measurement loop per kind and minimal
//! ring-0 handlers, assembled into the xvmm binary and copied into guest memory.
//!
//! Two blobs, each between a start and an end symbol: the kernel blob (entry
//! point, exception/syscall handlers, the CPL0 loops that time VM exits) and
//! the user blob (dispatcher, the null/imul loops and the CPL3 side of every
//! crossing). Both are position independent: code refers to code only
//! RIP-relatively inside its own blob, and to data only at the fixed addresses of
//! [`super::layout`], so the bytes run unchanged wherever the VMM copies them.
//!
//! Register contract between the loops and the handlers (our own guest, so the
//! handlers may trust it): r15 points at the current sample, which the handler
//! fills at +8 (u2k_k) and +16 (k2u_k); handlers clobber rax, rcx, rdx only;
//! r14 holds the user return RIP for SYSCALL/SYSENTER (RDTSCP clobbers rcx,
//! the stamp clobbers rdx) and r13 the user RSP for SYSENTER.
//!
//! A phase: the kernel entry reads the command from the control block and
//! either runs a CPL0 loop or IRETs to the user dispatcher; warm-up iterations
//! go to a scratch sample, then the recorded ones to the sample buffer. The
//! end is a doorbell: `out` to PORT_DONE at CPL0, or from user mode a UD2 at a
//! known address that the #UD handler turns into that `out` (user-mode port
//! I/O is not allowed under every hypervisor).
//!
//! Stamps: `lfence; rdtsc; lfence` opens an interval and `rdtscp; lfence` closes
//! it. The kernel blob writes them with exactly those bytes so that the VMM can
//! find them ([`KERNEL_STAMP_OPEN`], [`KERNEL_STAMP_CLOSE`]) and, where the
//! hypervisor cannot execute them at CPL0, replace them with plain `rdtsc`.

use super::layout::{self, control};

/// Measurement kinds: the index into the guest's dispatch tables. User kinds
/// come first, then kernel (CPL0) kinds from [`Kind::FIRST_KERNEL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Kind {
    Null = 0,
    PageFault = 1,
    Breakpoint = 2,
    Syscall = 3,
    Sysenter = 4,
    IntN = 5,
    Imul = 6,
    KernelNull = 7,
    Cpuid = 8,
    PioOut = 9,
    PioIn = 10,
    MmioWrite = 11,
    Vmcall = 12,
    Vmmcall = 13,
    Rdmsr = 14,
    Wrmsr = 15,
    Hlt = 16,
}

impl Kind {
    pub const FIRST_KERNEL: u64 = Kind::KernelNull as u64;
    pub const COUNT: u64 = 17;

    /// Whether each sample has four stamps (a user<->kernel crossing) rather
    /// than two (an interval measured on one side).
    pub fn four_stamps(self) -> bool {
        matches!(
            self,
            Kind::PageFault | Kind::Breakpoint | Kind::Syscall | Kind::Sysenter | Kind::IntN
        )
    }

    /// Bytes per sample in the sample buffer.
    pub fn stride(self) -> u64 {
        if self.four_stamps() {
            32
        } else {
            16
        }
    }

    pub fn runs_in_kernel(self) -> bool {
        self as u64 >= Self::FIRST_KERNEL
    }
}

/// Opening stamp as the kernel blob encodes it: lfence; rdtsc; lfence.
pub const KERNEL_STAMP_OPEN: [u8; 8] = [0x0f, 0xae, 0xe8, 0x0f, 0x31, 0x0f, 0xae, 0xe8];
/// Closing stamp as the kernel blob encodes it: rdtscp; lfence.
pub const KERNEL_STAMP_CLOSE: [u8; 6] = [0x0f, 0x01, 0xf9, 0x0f, 0xae, 0xe8];
/// Same lengths, plain rdtsc padded with NOPs.
pub const PLAIN_STAMP_OPEN: [u8; 8] = [0x90, 0x90, 0x90, 0x0f, 0x31, 0x90, 0x90, 0x90];
pub const PLAIN_STAMP_CLOSE: [u8; 6] = [0x0f, 0x31, 0x90, 0x90, 0x90, 0x90];

const FAULT_VECTOR: u64 = control::FAULT;
const FAULT_ERROR: u64 = control::FAULT + 8;
const FAULT_RIP: u64 = control::FAULT + 16;
const FAULT_CS: u64 = control::FAULT + 24;
const FAULT_RFLAGS: u64 = control::FAULT + 32;
const FAULT_RSP: u64 = control::FAULT + 40;
const FAULT_CR2: u64 = control::FAULT + 48;

/// Vector number the catch-all stub reports for vectors 32..=255.
pub const OTHER_VECTOR: u64 = 256;

core::arch::global_asm!(
    r#"
.macro XVMM_MG_KOPEN
    lfence
    rdtsc
    lfence
    .set xvmm_mg_kopen_count, xvmm_mg_kopen_count + 1
.endm
.macro XVMM_MG_KCLOSE
    rdtscp
    lfence
    .set xvmm_mg_kclose_count, xvmm_mg_kclose_count + 1
.endm
.macro XVMM_MG_STORE off
    mov dword ptr [r15 + \off], eax
    mov dword ptr [r15 + \off + 4], edx
.endm
// Warm-up into the scratch sample, then the recorded samples; rbp = routine.
.macro XVMM_MG_RUN_PHASE
    mov r9, qword ptr [{ctl} + {c_warmup}]
    test r9, r9
    jz 71f
    mov r15, {scratch}
    xor r12d, r12d
    call rbp
71:
    mov r9, qword ptr [{ctl} + {c_samples}]
    test r9, r9
    jz 72f
    mov r15, qword ptr [{ctl} + {c_buffer}]
    mov r12, qword ptr [{ctl} + {c_stride}]
    call rbp
72:
    mov rax, {done_magic}
    mov qword ptr [{ctl} + {c_status}], rax
.endm
// Loop bookkeeping after a sample: next slot, count down.
.macro XVMM_MG_NEXT
    add r15, r12
    dec r9
    jnz 1b
    ret
.endm

.pushsection .text.xvmm_mg_kernel,"ax",@progbits
.p2align 12
.globl xvmm_mg_kernel_start
xvmm_mg_kernel_start:
.set xvmm_mg_kopen_count, 0
.set xvmm_mg_kclose_count, 0

// First instruction of the guest (CPL0, RSP = kernel stack top).
.globl xvmm_mg_kentry
xvmm_mg_kentry:
    mov rax, qword ptr [{ctl} + {c_kind}]
    cmp rax, {first_kernel}
    jae 2f
    push {user_ss}
    push {user_stack_top}
    push {user_rflags}
    push {user_cs}
    push {user_code}
    iretq
2:
    sub rax, {first_kernel}
    cmp rax, {kind_count} - {first_kernel}
    jae xvmm_mg_kbad_kind
    lea rcx, [rip + xvmm_mg_ktable]
    movsxd rax, dword ptr [rcx + rax * 4]
    add rax, rcx
    mov rbp, rax
    XVMM_MG_RUN_PHASE
    mov edx, {port_done}
    out dx, al
3:
    hlt
    jmp 3b
xvmm_mg_kbad_kind:
    push 0
    push 0
    push 0
    push 0
    push 0
    push 0
    push {other_vector} + 1
    jmp xvmm_mg_fault_common

.p2align 2
xvmm_mg_ktable:
    .long xvmm_mg_k_null - xvmm_mg_ktable
    .long xvmm_mg_k_cpuid - xvmm_mg_ktable
    .long xvmm_mg_k_pio_out - xvmm_mg_ktable
    .long xvmm_mg_k_pio_in - xvmm_mg_ktable
    .long xvmm_mg_k_mmio - xvmm_mg_ktable
    .long xvmm_mg_k_vmcall - xvmm_mg_ktable
    .long xvmm_mg_k_vmmcall - xvmm_mg_ktable
    .long xvmm_mg_k_rdmsr - xvmm_mg_ktable
    .long xvmm_mg_k_wrmsr - xvmm_mg_ktable
    .long xvmm_mg_k_hlt - xvmm_mg_ktable

// #UD: the user loop's way to say "done" (user mode may not touch ports under
// every hypervisor); any other #UD is unexpected.
.p2align 4
.globl xvmm_mg_ud_entry
xvmm_mg_ud_entry:
    mov rax, qword ptr [rsp]
    cmp rax, qword ptr [{ctl} + {c_user_done}]
    jne 4f
    mov edx, {port_done}
    out dx, al
3:
    hlt
    jmp 3b
4:
    push 0
    push 6
    jmp xvmm_mg_fault_common

// #PF from the user loop: make the faulting page of the A/B pair present and
// the other one not present (and flush it), so the next write faults again.
.p2align 4
.globl xvmm_mg_pf_entry
xvmm_mg_pf_entry:
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    mov rax, cr2
    and rax, -8192
    cmp rax, {pf_page_a}
    jne 5f
    mov rax, cr2
    shr rax, 12
    and eax, 511
    or qword ptr [{pt_low} + rax * 8], 1
    xor eax, 1
    and qword ptr [{pt_low} + rax * 8], -2
    shl rax, 12
    invlpg [rax]
    add rsp, 8
    XVMM_MG_KOPEN
    XVMM_MG_STORE 16
    iretq
5:
    push 14
    jmp xvmm_mg_fault_common

// #BP (int3) and int 0x80: stamp, stamp, return.
.p2align 4
.globl xvmm_mg_bp_entry
xvmm_mg_bp_entry:
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_KOPEN
    XVMM_MG_STORE 16
    iretq

.p2align 4
.globl xvmm_mg_intn_entry
xvmm_mg_intn_entry:
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_KOPEN
    XVMM_MG_STORE 16
    iretq

// SYSCALL: RCX held the return RIP but RDTSCP overwrote it; r14 has it too.
.p2align 4
.globl xvmm_mg_syscall_entry
xvmm_mg_syscall_entry:
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    mov rcx, r14
    XVMM_MG_KOPEN
    XVMM_MG_STORE 16
    .byte 0x48, 0x0f, 0x07

// SYSENTER (Intel only in long mode): SYSEXIT takes RIP from RDX, RSP from RCX.
.p2align 4
.globl xvmm_mg_sysenter_entry
xvmm_mg_sysenter_entry:
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_KOPEN
    XVMM_MG_STORE 16
    mov rdx, r14
    mov rcx, r13
    .byte 0x48, 0x0f, 0x35

// CPL0 loops: two stamps around one exiting instruction (as kvm-unit-tests'
// vmexit tests, all at CPL0: some hypervisors refuse user-mode port I/O).
.macro XVMM_MG_KLOOP_OPEN
1:
    XVMM_MG_KOPEN
    XVMM_MG_STORE 0
.endm
.macro XVMM_MG_KLOOP_CLOSE
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_NEXT
.endm
.p2align 4
xvmm_mg_k_cpuid:
    XVMM_MG_KLOOP_OPEN
    xor eax, eax
    xor ecx, ecx
    cpuid
    XVMM_MG_KLOOP_CLOSE
.p2align 4
xvmm_mg_k_pio_out:
    XVMM_MG_KLOOP_OPEN
    mov edx, {port_measure}
    out dx, al
    XVMM_MG_KLOOP_CLOSE
.p2align 4
xvmm_mg_k_pio_in:
    XVMM_MG_KLOOP_OPEN
    mov edx, {port_measure}
    in al, dx
    XVMM_MG_KLOOP_CLOSE
.p2align 4
xvmm_mg_k_mmio:
    mov r13, {mmio}
    XVMM_MG_KLOOP_OPEN
    mov dword ptr [r13], eax
    XVMM_MG_KLOOP_CLOSE
// Hypercall number 0 is none: KVM answers -KVM_ENOSYS after the exit.
.p2align 4
xvmm_mg_k_vmcall:
    XVMM_MG_KLOOP_OPEN
    xor eax, eax
    vmcall
    XVMM_MG_KLOOP_CLOSE
.p2align 4
xvmm_mg_k_vmmcall:
    XVMM_MG_KLOOP_OPEN
    xor eax, eax
    vmmcall
    XVMM_MG_KLOOP_CLOSE
.p2align 4
xvmm_mg_k_rdmsr:
1:
    XVMM_MG_KOPEN
    XVMM_MG_STORE 0
    mov ecx, {probe_msr}
    rdmsr
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_NEXT
.p2align 4
xvmm_mg_k_wrmsr:
1:
    XVMM_MG_KOPEN
    XVMM_MG_STORE 0
    mov ecx, {probe_msr}
    xor eax, eax
    xor edx, edx
    wrmsr
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_NEXT
.p2align 4
xvmm_mg_k_hlt:
1:
    XVMM_MG_KOPEN
    XVMM_MG_STORE 0
    hlt
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_NEXT
.p2align 4
xvmm_mg_k_null:
1:
    XVMM_MG_KOPEN
    XVMM_MG_STORE 0
    XVMM_MG_KCLOSE
    XVMM_MG_STORE 8
    XVMM_MG_NEXT

// Unexpected exception: record vector, error code, the interrupted frame and
// CR2 in the control block, tell the VMM, stop.
// Stack: vector, error code, RIP, CS, RFLAGS, RSP, SS.
.p2align 4
xvmm_mg_fault_common:
    pop rax
    mov qword ptr [{ctl} + {f_vector}], rax
    pop rax
    mov qword ptr [{ctl} + {f_error}], rax
    mov rax, qword ptr [rsp]
    mov qword ptr [{ctl} + {f_rip}], rax
    mov rax, qword ptr [rsp + 8]
    mov qword ptr [{ctl} + {f_cs}], rax
    mov rax, qword ptr [rsp + 16]
    mov qword ptr [{ctl} + {f_rflags}], rax
    mov rax, qword ptr [rsp + 24]
    mov qword ptr [{ctl} + {f_rsp}], rax
    mov rax, cr2
    mov qword ptr [{ctl} + {f_cr2}], rax
    mov edx, {port_fault}
    out dx, al
6:
    hlt
    jmp 6b

// One 16-byte stub per exception vector, then one for everything else.
.p2align 4
.globl xvmm_mg_stubs
xvmm_mg_stubs:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
.p2align 4
.if (\v == 8) || (\v == 10) || (\v == 11) || (\v == 12) || (\v == 13) || (\v == 14) || (\v == 17) || (\v == 21) || (\v == 29) || (\v == 30)
.else
    push 0
.endif
    push \v
    jmp xvmm_mg_fault_common
.endr
.p2align 4
.globl xvmm_mg_stub_other
xvmm_mg_stub_other:
    push 0
    push {other_vector}
    jmp xvmm_mg_fault_common

.p2align 2
.globl xvmm_mg_kstamp_counts
xvmm_mg_kstamp_counts:
    .long xvmm_mg_kopen_count
    .long xvmm_mg_kclose_count
.globl xvmm_mg_kernel_end
xvmm_mg_kernel_end:
.popsection

.pushsection .text.xvmm_mg_user,"ax",@progbits
.p2align 12
.globl xvmm_mg_user_start
xvmm_mg_user_start:
    mov rax, qword ptr [{ctl} + {c_kind}]
    cmp rax, {first_kernel}
    jae 3f
    lea rcx, [rip + xvmm_mg_utable]
    movsxd rax, dword ptr [rcx + rax * 4]
    add rax, rcx
    mov rbp, rax
    mov r13, {pf_page_a}
    XVMM_MG_RUN_PHASE
.globl xvmm_mg_user_done
xvmm_mg_user_done:
    ud2
3:
    ud2

.p2align 2
xvmm_mg_utable:
    .long xvmm_mg_u_null - xvmm_mg_utable
    .long xvmm_mg_u_pf - xvmm_mg_utable
    .long xvmm_mg_u_int3 - xvmm_mg_utable
    .long xvmm_mg_u_syscall - xvmm_mg_utable
    .long xvmm_mg_u_sysenter - xvmm_mg_utable
    .long xvmm_mg_u_intn - xvmm_mg_utable
    .long xvmm_mg_u_imul - xvmm_mg_utable

.macro XVMM_MG_UOPEN
1:
    lfence
    rdtsc
    lfence
    XVMM_MG_STORE 0
.endm
.macro XVMM_MG_UCLOSE off
    rdtscp
    lfence
    XVMM_MG_STORE \off
.endm

.p2align 4
xvmm_mg_u_null:
    XVMM_MG_UOPEN
    XVMM_MG_UCLOSE 8
    XVMM_MG_NEXT

// r13 (the next page to fault on) is set once by the dispatcher and carried
// from warm-up into the recorded samples: restarting at page A after an odd
// warm-up would write to a page that is already present.
.p2align 4
xvmm_mg_u_pf:
    XVMM_MG_UOPEN
    mov byte ptr [r13], 1
    XVMM_MG_UCLOSE 24
    xor r13, {page}
    XVMM_MG_NEXT

.p2align 4
xvmm_mg_u_int3:
    XVMM_MG_UOPEN
    int3
    XVMM_MG_UCLOSE 24
    XVMM_MG_NEXT

.p2align 4
xvmm_mg_u_syscall:
    lea r14, [rip + 73f]
    XVMM_MG_UOPEN
    syscall
73:
    XVMM_MG_UCLOSE 24
    XVMM_MG_NEXT

.p2align 4
xvmm_mg_u_sysenter:
    lea r14, [rip + 74f]
    mov r13, rsp
    XVMM_MG_UOPEN
    sysenter
74:
    XVMM_MG_UCLOSE 24
    XVMM_MG_NEXT

.p2align 4
xvmm_mg_u_intn:
    XVMM_MG_UOPEN
    int 0x80
    XVMM_MG_UCLOSE 24
    XVMM_MG_NEXT

// Dependent imul chains for the linearity check, alternating PARAM and
// 2 * PARAM imuls (PARAM a multiple of 8): even samples hold the short chain,
// odd ones the long chain, so frequency drift hits both alike.
.p2align 4
xvmm_mg_u_imul:
    mov r10, qword ptr [{ctl} + {c_param}]
    lea r11, [r10 + r10]
    xor r11, r10
    XVMM_MG_UOPEN
    mov rcx, r10
75:
    imul rax, rax
    imul rax, rax
    imul rax, rax
    imul rax, rax
    imul rax, rax
    imul rax, rax
    imul rax, rax
    imul rax, rax
    sub rcx, 8
    jnz 75b
    XVMM_MG_UCLOSE 8
    xor r10, r11
    XVMM_MG_NEXT

.globl xvmm_mg_user_end
xvmm_mg_user_end:
.popsection
"#,
    ctl = const layout::CONTROL_GPA,
    c_kind = const control::KIND,
    c_warmup = const control::WARMUP,
    c_samples = const control::SAMPLES,
    c_stride = const control::STRIDE,
    c_buffer = const control::BUFFER,
    c_param = const control::PARAM,
    c_status = const control::STATUS,
    c_user_done = const control::USER_DONE,
    scratch = const layout::CONTROL_GPA + control::SCRATCH,
    done_magic = const layout::DONE_MAGIC,
    port_done = const layout::PORT_DONE,
    port_measure = const layout::PORT_MEASURE,
    port_fault = const layout::PORT_FAULT,
    first_kernel = const Kind::FIRST_KERNEL,
    kind_count = const Kind::COUNT,
    user_ss = const layout::selector::USER_SS,
    user_cs = const layout::selector::USER_CS,
    user_stack_top = const layout::USER_STACK_TOP,
    user_rflags = const layout::USER_RFLAGS,
    user_code = const layout::USER_CODE_GPA,
    pf_page_a = const layout::PF_PAGE_A,
    pt_low = const layout::PT_LOW_GPA,
    page = const layout::PAGE,
    probe_msr = const layout::PROBE_MSR,
    mmio = const layout::MMIO_GPA,
    other_vector = const OTHER_VECTOR,
    f_vector = const FAULT_VECTOR,
    f_error = const FAULT_ERROR,
    f_rip = const FAULT_RIP,
    f_cs = const FAULT_CS,
    f_rflags = const FAULT_RFLAGS,
    f_rsp = const FAULT_RSP,
    f_cr2 = const FAULT_CR2,
);

extern "C" {
    static xvmm_mg_kernel_start: u8;
    static xvmm_mg_kernel_end: u8;
    static xvmm_mg_kentry: u8;
    static xvmm_mg_pf_entry: u8;
    static xvmm_mg_bp_entry: u8;
    static xvmm_mg_intn_entry: u8;
    static xvmm_mg_syscall_entry: u8;
    static xvmm_mg_sysenter_entry: u8;
    static xvmm_mg_ud_entry: u8;
    static xvmm_mg_user_done: u8;
    static xvmm_mg_stubs: u8;
    static xvmm_mg_stub_other: u8;
    static xvmm_mg_kstamp_counts: [u32; 2];
    static xvmm_mg_user_start: u8;
    static xvmm_mg_user_end: u8;
}

/// Bytes between two symbols of this module's assembly. Only called with the
/// start/end pairs defined above, in one section each, start before end: the
/// bytes are part of the immutable, always mapped text segment.
fn blob(start: *const u8, end: *const u8) -> &'static [u8] {
    let len = (end as usize).saturating_sub(start as usize);
    // SAFETY: see above.
    unsafe { std::slice::from_raw_parts(start, len) }
}

/// The kernel blob, to be copied to [`layout::KERNEL_CODE_GPA`].
pub fn kernel_code() -> &'static [u8] {
    blob(
        &raw const xvmm_mg_kernel_start,
        &raw const xvmm_mg_kernel_end,
    )
}

/// The user blob, to be copied to [`layout::USER_CODE_GPA`]; its entry is at offset 0.
pub fn user_code() -> &'static [u8] {
    blob(&raw const xvmm_mg_user_start, &raw const xvmm_mg_user_end)
}

fn kernel_offset(symbol: *const u8) -> u64 {
    let start = (&raw const xvmm_mg_kernel_start) as usize;
    (symbol as usize - start) as u64
}

/// Guest addresses of the kernel entry points.
#[derive(Clone, Copy, Debug)]
pub struct KernelEntries {
    pub start: u64,
    pub page_fault: u64,
    pub breakpoint: u64,
    pub int_n: u64,
    pub syscall: u64,
    pub sysenter: u64,
    pub invalid_opcode: u64,
    /// Vector v's stub is at `stubs + 16 * v` (v < 32).
    pub stubs: u64,
    pub other: u64,
}

/// Where each entry point lands once the kernel blob is at [`layout::KERNEL_CODE_GPA`].
pub fn kernel_entries() -> KernelEntries {
    let at = |p: *const u8| layout::KERNEL_CODE_GPA + kernel_offset(p);
    KernelEntries {
        start: at(&raw const xvmm_mg_kentry),
        page_fault: at(&raw const xvmm_mg_pf_entry),
        breakpoint: at(&raw const xvmm_mg_bp_entry),
        int_n: at(&raw const xvmm_mg_intn_entry),
        syscall: at(&raw const xvmm_mg_syscall_entry),
        sysenter: at(&raw const xvmm_mg_sysenter_entry),
        invalid_opcode: at(&raw const xvmm_mg_ud_entry),
        stubs: at(&raw const xvmm_mg_stubs),
        other: at(&raw const xvmm_mg_stub_other),
    }
}

/// Guest address of the user loop's "done" UD2 (see the #UD handler).
pub fn user_done_rip() -> u64 {
    let start = (&raw const xvmm_mg_user_start) as usize;
    let done = (&raw const xvmm_mg_user_done) as usize;
    layout::USER_CODE_GPA + (done - start) as u64
}

/// How many opening and closing stamps the kernel blob holds, as the assembler counted.
pub fn kernel_stamp_counts() -> (usize, usize) {
    // SAFETY: a plain read of two u32s the assembler emitted.
    let counts = unsafe { std::ptr::read(&raw const xvmm_mg_kstamp_counts) };
    (counts[0] as usize, counts[1] as usize)
}

/// Replaces every kernel stamp in `code` (a copy of the kernel blob) with plain
/// `rdtsc`, for hypervisors that cannot run LFENCE/RDTSCP at CPL0. Returns how
/// many were replaced, or `None` if the count differs from what the assembler
/// emitted (which would mean a pattern also matched something else).
pub fn patch_kernel_stamps(code: &mut [u8]) -> Option<usize> {
    let opens = replace_all(code, &KERNEL_STAMP_OPEN, &PLAIN_STAMP_OPEN);
    let closes = replace_all(code, &KERNEL_STAMP_CLOSE, &PLAIN_STAMP_CLOSE);
    ((opens, closes) == kernel_stamp_counts()).then_some(opens + closes)
}

fn replace_all(code: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i + from.len() <= code.len() {
        if &code[i..i + from.len()] == from {
            code[i..i + to.len()].copy_from_slice(to);
            count += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const ERROR_CODE_VECTORS: [u8; 10] = [8, 10, 11, 12, 13, 14, 17, 21, 29, 30];

    #[test]
    fn blobs_fit_their_regions() {
        assert!(!kernel_code().is_empty());
        assert!((kernel_code().len() as u64) <= layout::KERNEL_CODE_MAX);
        assert!(!user_code().is_empty());
        assert!((user_code().len() as u64) <= layout::USER_CODE_MAX);
        let e = kernel_entries();
        let end = layout::KERNEL_CODE_GPA + kernel_code().len() as u64;
        for addr in [
            e.start,
            e.page_fault,
            e.breakpoint,
            e.int_n,
            e.syscall,
            e.sysenter,
            e.other,
        ] {
            assert!((layout::KERNEL_CODE_GPA..end).contains(&addr));
        }
        assert_eq!(e.start, layout::KERNEL_CODE_GPA, "the entry opens the blob");
    }

    #[test]
    fn exception_stubs_are_sixteen_bytes_apart() {
        let code = kernel_code();
        let stubs = (kernel_entries().stubs - layout::KERNEL_CODE_GPA) as usize;
        for v in 0..32u8 {
            let stub = &code[stubs + 16 * v as usize..];
            // push imm8 is 6a ib; vectors without a CPU error code push 0 first.
            let expected: &[u8] = if ERROR_CODE_VECTORS.contains(&v) {
                &[0x6a, v]
            } else {
                &[0x6a, 0, 0x6a, v]
            };
            assert_eq!(&stub[..expected.len()], expected, "stub {v}");
        }
    }

    #[test]
    fn stamp_patching_finds_exactly_the_assembled_stamps() {
        let (opens, closes) = kernel_stamp_counts();
        assert!(opens >= 6 && closes >= 6, "{opens} {closes}");
        let mut code = kernel_code().to_vec();
        assert_eq!(patch_kernel_stamps(&mut code), Some(opens + closes));
        assert_eq!(
            replace_all(&mut code, &KERNEL_STAMP_OPEN, &PLAIN_STAMP_OPEN),
            0
        );
        assert_eq!(code.len(), kernel_code().len());
        // A second pass finds nothing left and reports the mismatch.
        assert_eq!(patch_kernel_stamps(&mut code), None);
    }

    #[test]
    fn kinds_split_four_and_two_stamp_samples() {
        assert!(Kind::PageFault.four_stamps() && Kind::IntN.four_stamps());
        assert!(!Kind::Cpuid.four_stamps() && !Kind::Null.four_stamps());
        assert_eq!(Kind::Syscall.stride(), 32);
        assert_eq!(Kind::Hlt.stride(), 16);
        assert!(Kind::Rdmsr.runs_in_kernel() && Kind::KernelNull.runs_in_kernel());
        assert!(!Kind::Imul.runs_in_kernel());
        assert_eq!(Kind::Hlt as u64 + 1, Kind::COUNT);
        assert!(Kind::Cpuid.runs_in_kernel() && Kind::PioOut.runs_in_kernel());
    }
}
