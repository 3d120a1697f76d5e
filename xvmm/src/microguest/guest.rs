//! The guest code: a user-mode (CPL3) measurement loop per kind and minimal
//! ring-0 handlers, assembled into the xvmm binary and copied into guest memory.
//!
//! The assembly is in `asm/`: `macros.S` (the stamps, dispatch, the sample
//! loop, doorbells, the fault report, and the register contract between the
//! loops and the handlers), `kernel.S` and `user.S`. Two blobs, each between a
//! start and an end symbol: the kernel blob (entry point, exception/syscall
//! handlers, the CPL0 loops that time VM exits) and the user blob (dispatcher,
//! the null/imul loops and the CPL3 side of every crossing). Both are position
//! independent: code refers to code only RIP-relatively inside its own blob,
//! and to data only at the fixed addresses of [`super::layout`], so the bytes
//! run unchanged wherever the VMM copies them.
//!
//! A phase: the kernel entry reads the command from the control block and
//! either runs a CPL0 loop or IRETs to the user dispatcher; warm-up iterations
//! go to a scratch sample, then the recorded ones to the sample buffer. The
//! end is a doorbell: `out` to PORT_DONE at CPL0, or from user mode a UD2 at a
//! known address that the #UD handler turns into that `out` (user-mode port
//! I/O is not allowed under every hypervisor).
//!
//! Stamps: `lfence; rdtsc; lfence` opens an interval and `rdtscp; lfence` closes
//! it (the sequences of `xvmm_host::tsc`). The kernel blob writes them with
//! exactly those bytes so that the VMM can find them ([`KERNEL_STAMP_OPEN`],
//! [`KERNEL_STAMP_CLOSE`]) and, where the hypervisor cannot execute them at
//! CPL0, replace them with plain `rdtsc`.

use super::kinds::Handler;
pub use super::kinds::Kind;
use super::layout::{self, control};
use crate::arch::x86_64::paging::PTE_P;

/// Most chain lengths one imul phase may cycle through.
pub const MAX_CHAIN_LENGTHS: u64 = 16;
/// Longest chain one imul sample may hold.
pub const MAX_CHAIN: u64 = 1 << 20;

/// The PARAM of an imul phase ([`Kind::Imul`], [`Kind::KernelImul`]) whose
/// samples time `n`, `2n`, ..., `k n` imuls in turn (`n` a positive
/// multiple of 8; `k` 2 to [`MAX_CHAIN_LENGTHS`]); `n` alone means `k` = 2.
pub fn chain_param(n: u64, k: u64) -> u64 {
    n | (k << 32)
}

/// The chain lengths an imul PARAM asks for, or why it is refused.
pub fn chain_lengths(param: u64) -> std::result::Result<Vec<u64>, String> {
    let (n, k) = (param & 0xffff_ffff, param >> 32);
    let k = if k == 0 { 2 } else { k };
    if n == 0 || !n.is_multiple_of(8) {
        return Err(format!(
            "the imul chain length must be a positive multiple of 8, not {n}"
        ));
    }
    if !(2..=MAX_CHAIN_LENGTHS).contains(&k) || k * n > MAX_CHAIN {
        return Err(format!(
            "an imul phase takes 2 to {MAX_CHAIN_LENGTHS} chain lengths of at most {MAX_CHAIN} imuls, \
             not {k} lengths of up to {} imuls",
            k * n
        ));
    }
    Ok((1..=k).map(|j| j * n).collect())
}

/// Opening stamp as the kernel blob encodes it: lfence; rdtsc; lfence.
pub const KERNEL_STAMP_OPEN: [u8; 8] = [0x0f, 0xae, 0xe8, 0x0f, 0x31, 0x0f, 0xae, 0xe8];
/// Closing stamp as the kernel blob encodes it: rdtscp; lfence.
pub const KERNEL_STAMP_CLOSE: [u8; 6] = [0x0f, 0x01, 0xf9, 0x0f, 0xae, 0xe8];
/// Same lengths, plain rdtsc padded with NOPs.
pub const PLAIN_STAMP_OPEN: [u8; 8] = [0x90, 0x90, 0x90, 0x0f, 0x31, 0x90, 0x90, 0x90];
pub const PLAIN_STAMP_CLOSE: [u8; 6] = [0x0f, 0x31, 0x90, 0x90, 0x90, 0x90];
/// Same lengths, no stamp at all (one multi-byte NOP each): the "hooks off"
/// runs, whose kernel slots then hold whatever edx:eax held.
pub const OFF_STAMP_OPEN: [u8; 8] = [0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00];
pub const OFF_STAMP_CLOSE: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// What the kernel blob's stamps are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelStamps {
    /// As assembled: `lfence; rdtsc; lfence` and `rdtscp; lfence`.
    #[default]
    Fenced,
    /// Plain `rdtsc` (hypervisors that cannot run LFENCE/RDTSCP at CPL0).
    Plain,
    /// None: NOPs of the same length.
    Off,
}

impl KernelStamps {
    /// The instructions of the opening and the closing kernel stamp.
    pub fn text(self) -> (&'static str, &'static str) {
        match self {
            KernelStamps::Fenced => (xvmm_host::tsc::OPEN_TEXT, xvmm_host::tsc::CLOSE_TEXT),
            KernelStamps::Plain => ("rdtsc", "rdtsc"),
            KernelStamps::Off => ("none", "none"),
        }
    }
}

const FAULT_VECTOR: u64 = control::FAULT;
const FAULT_ERROR: u64 = control::FAULT + 8;
const FAULT_RIP: u64 = control::FAULT + 16;
const FAULT_CS: u64 = control::FAULT + 24;
const FAULT_RFLAGS: u64 = control::FAULT + 32;
const FAULT_RSP: u64 = control::FAULT + 40;
const FAULT_CR2: u64 = control::FAULT + 48;

/// Vector number the catch-all stub reports for vectors 32..=255.
pub const OTHER_VECTOR: u64 = 256;

// The guest code: macros.S (stamps, dispatch, sample loop, doorbells, fault
// report), kernel.S (the CPL0 blob) and user.S (the CPL3 blob), assembled as
// one block so that the macros reach both blobs. The operands are the layout
// the code may refer to; every other address is RIP-relative.
core::arch::global_asm!(
    include_str!("asm/macros.S"),
    include_str!("asm/kernel.S"),
    include_str!("asm/user.S"),
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
    port_eventfd = const layout::PORT_EVENTFD,
    port_fault = const layout::PORT_FAULT,
    port_pm_timer = const layout::PORT_PM_TIMER,
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
    mmio_eventfd = const layout::MMIO_EVENTFD_GPA,
    other_vector = const OTHER_VECTOR,
    f_vector = const FAULT_VECTOR,
    f_error = const FAULT_ERROR,
    f_rip = const FAULT_RIP,
    f_cs = const FAULT_CS,
    f_rflags = const FAULT_RFLAGS,
    f_rsp = const FAULT_RSP,
    f_cr2 = const FAULT_CR2,
    c_ap_sample = const control::AP_SAMPLE,
    c_ap_ack = const control::AP_ACK,
    c_ap_eoi = const control::AP_EOI,
    c_ap_ready = const control::AP_READY,
    c_ap_halt = const control::AP_HALT,
    ap_stack_top = const layout::AP_STACK_TOP,
    kind_round_robin = const Kind::PleRoundRobin as u64,
    pte_p = const PTE_P,
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
    static xvmm_mg_irq_entry: u8;
    static xvmm_mg_ap_entry: u8;
    static xvmm_mg_ap_irq_entry: u8;
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
    /// The APIC rows' interrupts (self-IPI, LAPIC timer).
    pub interrupt: u64,
    /// The IPI rows' receiver's handler (vector 0xf2, on vCPU 1).
    pub receiver_interrupt: u64,
    /// Where the IPI rows' receiver (vCPU 1) starts.
    pub receiver_start: u64,
    /// Vector v's stub is at `stubs + 16 * v` (v < 32).
    pub stubs: u64,
    pub other: u64,
}

impl KernelEntries {
    /// The entry point of a crossing's handler.
    pub fn handler(&self, handler: Handler) -> u64 {
        match handler {
            Handler::PageFault => self.page_fault,
            Handler::Breakpoint => self.breakpoint,
            Handler::IntN => self.int_n,
            Handler::Syscall => self.syscall,
            Handler::Sysenter => self.sysenter,
        }
    }
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
        interrupt: at(&raw const xvmm_mg_irq_entry),
        receiver_interrupt: at(&raw const xvmm_mg_ap_irq_entry),
        receiver_start: at(&raw const xvmm_mg_ap_entry),
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
    set_kernel_stamps(code, KernelStamps::Plain)
}

/// Makes every kernel stamp in `code` (a copy of the kernel blob as
/// assembled) `variant`; `None` if the count differs from what the assembler
/// emitted.
pub fn set_kernel_stamps(code: &mut [u8], variant: KernelStamps) -> Option<usize> {
    let (open, close): (&[u8], &[u8]) = match variant {
        KernelStamps::Fenced => return Some(0),
        KernelStamps::Plain => (&PLAIN_STAMP_OPEN, &PLAIN_STAMP_CLOSE),
        KernelStamps::Off => (&OFF_STAMP_OPEN, &OFF_STAMP_CLOSE),
    };
    let opens = replace_all(code, &KERNEL_STAMP_OPEN, open);
    let closes = replace_all(code, &KERNEL_STAMP_CLOSE, close);
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
    fn chain_params_carry_the_first_length_and_how_many() {
        assert_eq!(chain_lengths(800), Ok(vec![800, 1600]), "n alone: n and 2n");
        assert_eq!(chain_lengths(chain_param(16, 4)), Ok(vec![16, 32, 48, 64]));
        assert!(chain_lengths(7).unwrap_err().contains("multiple of 8"));
        assert!(chain_lengths(0).is_err());
        assert!(chain_lengths(chain_param(8, 1)).is_err());
        assert!(chain_lengths(chain_param(8, MAX_CHAIN_LENGTHS + 1)).is_err());
        assert!(chain_lengths(chain_param(MAX_CHAIN, 2)).is_err());
    }

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
        let stubs = xvmm_results::num::usize_from(kernel_entries().stubs - layout::KERNEL_CODE_GPA);
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
        let mut off = kernel_code().to_vec();
        assert_eq!(
            set_kernel_stamps(&mut off, KernelStamps::Off),
            Some(opens + closes)
        );
        let rdtsc = [0x0f, 0x31];
        let rdtscp = [0x0f, 0x01, 0xf9];
        // But the IPI rows' three plain reads, which order and wait and
        // time nothing: the receiver's halt word and ipi-halt's delay.
        let left = off.windows(2).filter(|w| *w == rdtsc).count();
        assert_eq!(left, 3, "no RDTSC left but the IPI rows' three");
        assert!(!off.windows(3).any(|w| w == rdtscp), "no RDTSCP left");
    }

    /// The body of `.macro name` in macros.S, one instruction a line.
    fn macro_body(name: &str) -> String {
        let macros = include_str!("asm/macros.S");
        let start = macros
            .find(&format!(".macro {name}\n"))
            .unwrap_or_else(|| panic!("no macro {name}"));
        let body = &macros[start..];
        let end = body.find(".endm").unwrap();
        let lines: Vec<&str> = body[..end].lines().skip(1).map(str::trim).collect();
        lines.join("\n")
    }

    #[test]
    fn guest_stamps_are_the_host_stamps() {
        assert_eq!(macro_body("STAMP_OPEN"), xvmm_host::stamp_open!());
        assert_eq!(macro_body("STAMP_CLOSE"), xvmm_host::stamp_close!());
        // Both blobs take their stamps from the one macro pair: the user blob
        // holds the kernel's byte patterns too.
        let user = user_code();
        let count = |pattern: &[u8]| {
            user.windows(pattern.len())
                .filter(|w| *w == pattern)
                .count()
        };
        assert!(count(&KERNEL_STAMP_OPEN) >= 6, "user opening stamps");
        assert!(count(&KERNEL_STAMP_CLOSE) >= 6, "user closing stamps");
    }
}
