//! The microguest's measurement kinds, one table: each kind's number, the
//! routine the guest's dispatch tables (`asm/user.S`, `asm/kernel.S`) list
//! for it, and what it measures. The report's crossing and exit rows, the
//! handler a crossing lands on and how an exit reaches xvmm all come from
//! [`KINDS`]; a test checks the assembly's tables against it.

/// Declares [`Kind`] and [`KINDS`] from one list, so that a kind's number
/// is its row's position (and its index into the blob's dispatch table).
macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident => ($blob:ident, $routine:literal, $role:expr);)*) => {
        /// Measurement kinds: the index into the guest's dispatch tables. User
        /// kinds come first, then kernel (CPL0) kinds from [`Kind::FIRST_KERNEL`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u64)]
        pub enum Kind {
            $($(#[$doc])* $kind,)*
        }

        /// Every kind, in [`Kind`] order.
        pub const KINDS: [KindSpec; [$(Kind::$kind),*].len()] = [$(KindSpec {
            kind: Kind::$kind,
            blob: Blob::$blob,
            routine: $routine,
            role: $role,
        }),*];
    };
}

use xvmm_results::ExitFamily;
use ExitFamily::{Instruction, Interrupt, Mmio, Msr, PortIo, Register, Timer};

// A new kind: a row here, and its routine at the same place in its blob's
// dispatch table (a test checks). An exit that reaches xvmm in a new way
// also needs a `VmmExit` and its case in `machine::measured_exit`.
kinds! {
    Null => (User, "xvmm_mg_u_null", Role::Stamps { chain: false });
    PageFault => (User, "xvmm_mg_u_pf", crossing("pf", Handler::PageFault));
    Breakpoint => (User, "xvmm_mg_u_int3", crossing("int3", Handler::Breakpoint));
    Syscall => (User, "xvmm_mg_u_syscall", crossing("syscall", Handler::Syscall));
    Sysenter => (User, "xvmm_mg_u_sysenter", crossing("sysenter", Handler::Sysenter));
    IntN => (User, "xvmm_mg_u_intn", crossing("int-n", Handler::IntN));
    Imul => (User, "xvmm_mg_u_imul", Role::Stamps { chain: true });
    /// Two plain RDTSC back to back (the TSC quantum).
    TscStep => (User, "xvmm_mg_u_tsc_step", Role::Quantum);
    /// PARAM int3 between one pair of stamps (the batched figure).
    Int3Batch => (User, "xvmm_mg_u_int3_batch", Role::Batch { of: Kind::Breakpoint });
    /// PARAM SYSCALLs between one pair of stamps.
    SyscallBatch => (User, "xvmm_mg_u_syscall_batch", Role::Batch { of: Kind::Syscall });
    /// The kernel stamps as exit loops take them: opening, then closing.
    KernelNull => (Kernel, "xvmm_mg_k_null", Role::Stamps { chain: false });
    Cpuid => (Kernel, "xvmm_mg_k_cpuid", exit("cpuid", None, Instruction));
    PioOut => (Kernel, "xvmm_mg_k_pio_out", exit("pio-out", Some(VmmExit::IoOut), PortIo));
    PioIn => (Kernel, "xvmm_mg_k_pio_in", exit("pio-in", Some(VmmExit::IoIn), PortIo));
    /// A 32-bit IN from the PM timer xvmm serves ([`super::layout::PORT_PM_TIMER`]):
    /// the port read and the clock read of a device model in user space
    /// (kvm-unit-tests' inl_from_pmtimer, which QEMU's ACPI serves).
    PioInPmTimer => (Kernel, "xvmm_mg_k_pio_in_pmtimer", exit("pio-in-pmtimer", Some(VmmExit::PmTimerIn), PortIo));
    /// The same OUT on a port an ioeventfd serves: KVM signals the eventfd
    /// and resumes the guest without xvmm (the in-kernel twin of pio-out).
    PioOutEventfd => (Kernel, "xvmm_mg_k_pio_out_eventfd", exit_needing("pio-out-eventfd", None, Needs::Ioeventfd, PortIo));
    /// IN from the ELCR (port 0x4d0), which KVM's in-kernel PIC serves
    /// (kvm-unit-tests' inl_from_kernel, a byte read there too).
    PioInKernel => (Kernel, "xvmm_mg_k_pio_in_kernel", exit_needing("pio-in-kernel", None, Needs::Irqchip, PortIo));
    /// OUT of the value the ELCR holds back to it (kvm-unit-tests'
    /// outl_to_kernel writes 0).
    PioOutKernel => (Kernel, "xvmm_mg_k_pio_out_kernel", exit_needing("pio-out-kernel", None, Needs::Irqchip, PortIo));
    MmioWrite => (Kernel, "xvmm_mg_k_mmio", exit("mmio-write", Some(VmmExit::MmioWrite), Mmio));
    /// The same write to an address an ioeventfd serves (in-kernel twin).
    MmioWriteEventfd => (Kernel, "xvmm_mg_k_mmio_eventfd", exit_needing("mmio-write-eventfd", None, Needs::Ioeventfd, Mmio));
    Vmcall => (Kernel, "xvmm_mg_k_vmcall", hypercall("vmcall", Cpus::NotAmd));
    Vmmcall => (Kernel, "xvmm_mg_k_vmmcall", hypercall("vmmcall", Cpus::Amd));
    Rdmsr => (Kernel, "xvmm_mg_k_rdmsr", exit("rdmsr", Some(VmmExit::Rdmsr), Msr));
    Wrmsr => (Kernel, "xvmm_mg_k_wrmsr", exit("wrmsr", Some(VmmExit::Wrmsr), Msr));
    Hlt => (Kernel, "xvmm_mg_k_hlt", exit("hlt", Some(VmmExit::Hlt), Instruction));
    /// Writes 0 to CR8, the TPR it already holds. With no in-kernel APIC
    /// (the microguest has none) SVM and VMX both intercept the write and
    /// KVM handles it in the kernel; a raised TPR would go to xvmm as
    /// KVM_EXIT_SET_TPR. (A CR8 read exits on VMX only: SVM lets the guest
    /// read its virtual TPR.)
    Cr8Write => (Kernel, "xvmm_mg_k_cr8_write", exit("mov-to-cr8", None, Register));
    /// Reads CR8 (kvm-unit-tests' mov_from_cr8): VMX intercepts it without
    /// a TPR shadow; SVM lets the guest read its virtual TPR.
    Cr8Read => (Kernel, "xvmm_mg_k_cr8_read", exit("mov-from-cr8", None, Register));
    /// CR4.PGE flipped (a flush of the whole TLB, global pages too): a CR4
    /// write, intercepted and handled by KVM (kvm-unit-tests' toggle_cr4_pge
    /// writes it twice per iteration; here each sample writes it once).
    Cr4Pge => (Kernel, "xvmm_mg_k_cr4_pge", exit("toggle-cr4-pge", None, Register));
    /// WBINVD: intercepted; KVM skips it where no device does non-coherent
    /// DMA (none in the microguest).
    Wbinvd => (Kernel, "xvmm_mg_k_wbinvd", exit("wbinvd", None, Instruction));
    /// INVD: intercepted; KVM runs it as a no-op.
    Invd => (Kernel, "xvmm_mg_k_invd", exit("invd", None, Instruction));
    /// RDMSR of IA32_TSC_ADJUST (0x3b), which KVM emulates for every
    /// guest whose CPUID has it: an MSR read that stays in the kernel, the
    /// in-kernel twin of `rdmsr`.
    RdTscAdjust => (Kernel, "xvmm_mg_k_rd_tsc_adjust", exit_needing("rd-tsc-adjust", None, Needs::TscAdjust, Msr));
    /// WRMSR of IA32_TSC_ADJUST with the value it holds: KVM moves the
    /// guest's TSC offset by the difference (none) and updates its clock.
    WrTscAdjust => (Kernel, "xvmm_mg_k_wr_tsc_adjust", exit_needing("wr-tsc-adjust", None, Needs::TscAdjust, Msr));
    /// CR0.WP flipped, one CR0 write per sample (kvm-unit-tests'
    /// toggle_cr0_wp). Whether it exits is the hypervisor's choice: a
    /// hypervisor that lets the guest own CR0.WP (KVM with TDP) does not
    /// see it.
    Cr0Wp => (Kernel, "xvmm_mg_k_cr0_wp", exit("toggle-cr0-wp", None, Register));
    /// DR7 written with its reset value (kvm-unit-tests' mov_dr). KVM
    /// intercepts debug-register accesses until the guest uses them, then
    /// may stop until the next exit of any kind.
    MovDr7 => (Kernel, "xvmm_mg_k_mov_dr7", exit("mov-to-dr7", None, Register));
    /// WRMSR of IA32_KERNEL_GS_BASE with the value it holds (kvm-unit-tests'
    /// wr_kernel_gs_base): an MSR hypervisors usually let the guest write
    /// without an exit, timed beside the ones they intercept.
    WrKernelGsBase => (Kernel, "xvmm_mg_k_wr_kernel_gs_base", exit("wr-kernel-gs-base", None, Msr));
    /// WRMSR of IA32_PRED_CMD with IBPB (kvm-unit-tests' wr_ibpb_msr): a
    /// barrier the CPU runs whether or not it exits; KVM stops intercepting
    /// the MSR for a guest whose CPUID has IBPB.
    WrIbpb => (Kernel, "xvmm_mg_k_wr_ibpb", exit_needing("wr-ibpb", None, Needs::Ibpb, Msr));
    /// WRMSR of IA32_SPEC_CTRL with IBRS flipped each sample
    /// (kvm-unit-tests' wr_ibrs_msr writes 1 then 0): KVM intercepts it
    /// until the guest first sets a bit, then lets the guest own it.
    WrIbrs => (Kernel, "xvmm_mg_k_wr_ibrs", exit_needing("wr-ibrs", None, Needs::Ibrs, Msr));
    /// WRMSR of IA32_TSX_CTRL with the value it holds (kvm-unit-tests'
    /// wr_tsx_ctrl_msr): an MSR KVM offers on Intel CPUs with TSX control.
    WrTsxCtrl => (Kernel, "xvmm_mg_k_wr_tsx_ctrl", exit_needing("wr-tsx-ctrl", None, Needs::TsxCtrl, Msr));
    /// A self-IPI through the x2APIC's ICR, taken with interrupts on for
    /// one instruction (kvm-unit-tests' self_ipi_sti_nop, which writes the
    /// ICR through the x2APIC where the vCPU has one): the ICR write, the
    /// injection, the handler and its EOI.
    X2apicSelfIpi => (Kernel, "xvmm_mg_k_x2apic_self_ipi", exit_needing("x2apic-self-ipi", None, Needs::X2apic, Interrupt));
    /// The same IPI taken by a halted vCPU (self_ipi_sti_hlt).
    X2apicSelfIpiHlt => (Kernel, "xvmm_mg_k_x2apic_self_ipi_hlt", exit_needing("x2apic-self-ipi-hlt", None, Needs::X2apic, Interrupt));
    /// The self-IPI sent with the task priority (CR8) at 15, which holds it
    /// pending, taken with interrupts on when CR8 goes back to 0
    /// (self_ipi_tpr): the CR8 write that unmasks it exits.
    X2apicSelfIpiTpr => (Kernel, "xvmm_mg_k_x2apic_self_ipi_tpr", exit_needing("x2apic-self-ipi-tpr", None, Needs::X2apic, Interrupt));
    /// The same with interrupts off until an STI; NOP window after CR8 is
    /// back at 0 (self_ipi_tpr_sti_nop).
    X2apicSelfIpiTprStiNop => (Kernel, "xvmm_mg_k_x2apic_self_ipi_tpr_sti_nop", exit_needing("x2apic-self-ipi-tpr-sti-nop", None, Needs::X2apic, Interrupt));
    /// The same taken by a halted vCPU (self_ipi_tpr_sti_hlt).
    X2apicSelfIpiTprStiHlt => (Kernel, "xvmm_mg_k_x2apic_self_ipi_tpr_sti_hlt", exit_needing("x2apic-self-ipi-tpr-sti-hlt", None, Needs::X2apic, Interrupt));
    /// The five again with the IPI sent through the x2APIC's SELF IPI
    /// register (MSR 0x83f, the vector alone): kvm-unit-tests'
    /// x2apic_self_ipi_sti_nop, and so on. KVM handles both registers in
    /// its x2APIC emulation; an APIC that is virtualised may accelerate
    /// one and not the other.
    X2apicSelfIpiMsr => (Kernel, "xvmm_mg_k_x2apic_self_ipi_msr", exit_needing("x2apic-self-ipi-msr", None, Needs::X2apic, Interrupt));
    X2apicSelfIpiMsrHlt => (Kernel, "xvmm_mg_k_x2apic_self_ipi_msr_hlt", exit_needing("x2apic-self-ipi-msr-hlt", None, Needs::X2apic, Interrupt));
    X2apicSelfIpiMsrTpr => (Kernel, "xvmm_mg_k_x2apic_self_ipi_msr_tpr", exit_needing("x2apic-self-ipi-msr-tpr", None, Needs::X2apic, Interrupt));
    X2apicSelfIpiMsrTprStiNop => (Kernel, "xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_nop", exit_needing("x2apic-self-ipi-msr-tpr-sti-nop", None, Needs::X2apic, Interrupt));
    X2apicSelfIpiMsrTprStiHlt => (Kernel, "xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_hlt", exit_needing("x2apic-self-ipi-msr-tpr-sti-hlt", None, Needs::X2apic, Interrupt));
    /// An IPI from vCPU 0 to vCPU 1 through the x2APIC ICR, timed on the
    /// sender until the receiver's handler says it ran (kvm-unit-tests'
    /// ipi, whose receiver idles halted): the ICR write, the receiver's
    /// wake-up and injection. The receiver stamps its handler's entry and
    /// its EOI on the same TSC.
    Ipi => (Kernel, "xvmm_mg_k_ipi", exit_needing("ipi", None, Needs::Smp, Interrupt));
    /// The same, each IPI sent 2000 ticks after the receiver went to halt
    /// (kvm-unit-tests' ipi_halt): the halted receiver's wake-up.
    IpiHalt => (Kernel, "xvmm_mg_k_ipi_halt", exit_needing("ipi-halt", None, Needs::Smp, Interrupt));
    /// A token passed from vCPU 0 to vCPU 1 and back through memory, each
    /// side waiting in a PAUSE loop (kvm-unit-tests' ple_round_robin on two
    /// vCPUs): no exit while both run; where the hypervisor's pause-loop
    /// exiting sees a vCPU spin on one that is not running, it exits.
    PleRoundRobin => (Kernel, "xvmm_mg_k_ple_round_robin", exit_needing("ple-round-robin", None, Needs::TwoVcpus, Instruction));
    /// The LAPIC timer armed in TSC-deadline mode with a deadline already
    /// past, and its interrupt (kvm-unit-tests' tscdeadline_immed).
    TscDeadlineImmed => (Kernel, "xvmm_mg_k_tscdeadline_immed", exit_needing("tscdeadline-immed", None, Needs::TscDeadline, Timer));
    /// The same timer armed 3000 ticks ahead, waited for with interrupts
    /// on (kvm-unit-tests' tscdeadline): the round trip holds the lead.
    TscDeadline => (Kernel, "xvmm_mg_k_tscdeadline", exit_needing("tscdeadline", None, Needs::TscDeadline, Timer));
    /// XSETBV of XCR0's reset value (x87 only), which KVM handles in the
    /// kernel; it needs CR4.OSXSAVE, set where the guest's CPUID has XSAVE.
    Xsetbv => (Kernel, "xvmm_mg_k_xsetbv", exit_needing("xsetbv", None, Needs::Xsave, Instruction));
    /// The kernel stamps as a handler takes them: closing, then opening.
    KernelNullInner => (Kernel, "xvmm_mg_k_null_inner", Role::Stamps { chain: false });
    /// Dependent imul chains at CPL0 (the kernel stamps' linearity).
    KernelImul => (Kernel, "xvmm_mg_k_imul", Role::Stamps { chain: true });
}

/// One row of [`KINDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindSpec {
    pub kind: Kind,
    /// Which blob's dispatch table holds the routine.
    pub blob: Blob,
    /// The routine's label in that blob.
    pub routine: &'static str,
    pub role: Role,
}

/// The two blobs of guest code: user (CPL3) and kernel (CPL0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blob {
    User,
    Kernel,
}

/// What a kind's phase measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A stamp pair with nothing between, or with an imul chain whose
    /// lengths PARAM gives (`chain`): crosses nothing, so a fault is a bug.
    Stamps { chain: bool },
    /// Back-to-back TSC reads (the quantum).
    Quantum,
    /// A user->kernel crossing, the report's row `name`: four stamps, the
    /// kernel's two in the handler it lands on.
    Crossing {
        name: &'static str,
        handler: Handler,
    },
    /// PARAM crossings of kind `of` between one stamp pair.
    Batch { of: Kind },
    /// A VM exit timed at CPL0, the report's row `name` on `cpus`; `reaches`
    /// is how it comes to xvmm (`None`: KVM handles it).
    Exit {
        name: &'static str,
        reaches: Option<VmmExit>,
        cpus: Cpus,
        /// What the guest's CPU or VM must offer for the row to run.
        needs: Needs,
        /// What the instruction touches: the table's group.
        family: ExitFamily,
    },
}

/// What an exit needs of the guest's CPU or of its VM; where the guest
/// lacks it the row says so instead of running it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// CPUID leaf 1 ECX bit 26, and so CR4.OSXSAVE (XSETBV).
    Xsave,
    /// Not a CPU feature: KVM accepted the ioeventfds on
    /// [`PORT_EVENTFD`](super::layout::PORT_EVENTFD) and
    /// [`MMIO_EVENTFD_GPA`](super::layout::MMIO_EVENTFD_GPA).
    Ioeventfd,
    /// CPUID leaf 7 EBX bit 1: IA32_TSC_ADJUST, else an access is #GP.
    TscAdjust,
    /// IBPB in CPUID (Intel leaf 7 EDX bit 26, AMD 0x80000008 EBX bit 12).
    Ibpb,
    /// IBRS in CPUID (Intel leaf 7 EDX bit 26, AMD 0x80000008 EBX bit 14).
    Ibrs,
    /// IA32_ARCH_CAPABILITIES in CPUID with its TSX_CTRL bit set.
    TsxCtrl,
    /// KVM's in-kernel irqchip (KVM_CAP_IRQCHIP): the row's VM is created
    /// with it, and only such rows' VMs are.
    Irqchip,
    /// The irqchip, and x2APIC in CPUID (leaf 1 ECX bit 21).
    X2apic,
    /// The irqchip, x2APIC, and a second vCPU (the IPI rows' receiver).
    Smp,
    /// A second vCPU, no irqchip (the round robin through memory).
    TwoVcpus,
    /// The irqchip, x2APIC, and the LAPIC timer's TSC-deadline mode
    /// (KVM_CAP_TSC_DEADLINE_TIMER, which puts leaf 1 ECX bit 24 in an
    /// irqchip VM's CPUID).
    TscDeadline,
}

const fn crossing(name: &'static str, handler: Handler) -> Role {
    Role::Crossing { name, handler }
}

/// An exit on every CPU.
const fn exit(name: &'static str, reaches: Option<VmmExit>, family: ExitFamily) -> Role {
    exit_needing(name, reaches, Needs::Nothing, family)
}

/// An exit on every CPU that has `needs`.
const fn exit_needing(
    name: &'static str,
    reaches: Option<VmmExit>,
    needs: Needs,
    family: ExitFamily,
) -> Role {
    Role::Exit {
        name,
        reaches,
        cpus: Cpus::Any,
        needs,
        family,
    }
}

/// A hypercall (number 0, unknown to KVM, so it stays in KVM): one
/// instruction per vendor, sharing one report row.
const fn hypercall(name: &'static str, cpus: Cpus) -> Role {
    Role::Exit {
        name,
        reaches: None,
        cpus,
        needs: Needs::Nothing,
        family: ExitFamily::Instruction,
    }
}

/// The kernel entry point a crossing lands on ([`super::guest::KernelEntries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    PageFault,
    Breakpoint,
    IntN,
    Syscall,
    Sysenter,
}

/// The exit KVM hands xvmm for an exit kind's measured instruction (the port,
/// address or MSR is [`super::layout`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmmExit {
    IoOut,
    IoIn,
    /// A read of the PM timer's port, answered with its count.
    PmTimerIn,
    MmioWrite,
    Hlt,
    Rdmsr,
    Wrmsr,
}

impl VmmExit {
    /// Whether it reaches xvmm only with KVM_CAP_X86_USER_SPACE_MSR.
    pub fn needs_user_space_msr(self) -> bool {
        matches!(self, VmmExit::Rdmsr | VmmExit::Wrmsr)
    }
}

/// The CPUs an exit row is measured on (AMD: AuthenticAMD, HygonGenuine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cpus {
    Any,
    Amd,
    NotAmd,
}

impl Cpus {
    pub const fn include(self, amd: bool) -> bool {
        match self {
            Cpus::Any => true,
            Cpus::Amd => amd,
            Cpus::NotAmd => !amd,
        }
    }
}

impl Kind {
    pub const FIRST_KERNEL: u64 = first_kernel();
    pub const COUNT: u64 = KINDS.len() as u64;

    pub const fn spec(self) -> &'static KindSpec {
        &KINDS[self as usize]
    }

    pub const fn role(self) -> Role {
        self.spec().role
    }

    /// Whether each sample has four stamps (a user<->kernel crossing) rather
    /// than two (an interval measured on one side).
    pub const fn four_stamps(self) -> bool {
        matches!(self.role(), Role::Crossing { .. } | Role::Batch { .. })
    }

    /// The batched kind of a crossing, where there is one.
    pub const fn batched(self) -> Option<Kind> {
        let mut i = 0;
        while i < KINDS.len() {
            if let Role::Batch { of } = KINDS[i].role {
                if of as u64 == self as u64 {
                    return Some(KINDS[i].kind);
                }
            }
            i += 1;
        }
        None
    }

    /// Bytes per sample in the sample buffer: the IPI rows add the
    /// receiver's three words to their stamp pair.
    pub const fn stride(self) -> u64 {
        if self.has_receiver() {
            40
        } else if self.four_stamps() {
            32
        } else {
            16
        }
    }

    /// Whether vCPU 1 stamps into vCPU 0's samples: the IPI rows, whose
    /// receiver's handler and EOI are timed.
    pub const fn has_receiver(self) -> bool {
        matches!(self.needs(), Needs::Smp)
    }

    /// The vCPUs the kind's VM has: two for the IPI rows and the round
    /// robin, one for the rest.
    pub const fn vcpus(self) -> u8 {
        match self.needs() {
            Needs::Smp | Needs::TwoVcpus => 2,
            _ => 1,
        }
    }

    pub const fn runs_in_kernel(self) -> bool {
        matches!(self.spec().blob, Blob::Kernel)
    }

    /// The kernel entry point a crossing (or a batch of them) lands on.
    pub const fn handler(self) -> Option<Handler> {
        match self.role() {
            Role::Crossing { handler, .. } => Some(handler),
            Role::Batch { of } => of.handler(),
            _ => None,
        }
    }

    /// How an exit kind's measured instruction reaches xvmm, if it does.
    pub const fn reaches_vmm(self) -> Option<VmmExit> {
        match self.role() {
            Role::Exit { reaches, .. } => reaches,
            _ => None,
        }
    }

    /// What an exit kind's instruction touches (its table group).
    pub const fn family(self) -> Option<ExitFamily> {
        match self.role() {
            Role::Exit { family, .. } => Some(family),
            _ => None,
        }
    }

    /// Whether a sample turns interrupts on to take one it asked for (the
    /// APIC and timer rows).
    pub const fn takes_interrupt(self) -> bool {
        matches!(self.needs(), Needs::X2apic | Needs::TscDeadline)
    }

    /// Whether the kind's VM has KVM's in-kernel irqchip.
    pub const fn needs_irqchip(self) -> bool {
        matches!(
            self.needs(),
            Needs::Irqchip | Needs::X2apic | Needs::TscDeadline | Needs::Smp
        )
    }

    /// The CPU feature the kind's instruction needs in the guest.
    pub const fn needs(self) -> Needs {
        match self.role() {
            Role::Exit { needs, .. } => needs,
            _ => Needs::Nothing,
        }
    }
}

const fn first_kernel() -> u64 {
    let mut i = 0;
    while i < KINDS.len() && matches!(KINDS[i].blob, Blob::User) {
        i += 1;
    }
    i as u64
}

const fn crossing_count() -> usize {
    let (mut i, mut n) = (0, 0);
    while i < KINDS.len() {
        if let Role::Crossing { .. } = KINDS[i].role {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn exit_count(amd: bool) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < KINDS.len() {
        if let Role::Exit { cpus, .. } = KINDS[i].role {
            if cpus.include(amd) {
                n += 1;
            }
        }
        i += 1;
    }
    n
}

/// The report's crossing rows, in table order.
pub const CROSSINGS: [(&str, Kind); crossing_count()] = {
    let mut out = [("", Kind::Null); crossing_count()];
    let (mut i, mut n) = (0, 0);
    while i < KINDS.len() {
        if let Role::Crossing { name, .. } = KINDS[i].role {
            out[n] = (name, KINDS[i].kind);
            n += 1;
        }
        i += 1;
    }
    out
};

/// Exit rows a report has on any CPU (the same count on every vendor).
pub const EXIT_ROWS: usize = exit_count(false);

/// The report's exit rows on an AMD CPU or another one, in table order.
pub fn exit_rows(amd: bool) -> impl Iterator<Item = (&'static str, Kind)> {
    KINDS.iter().filter_map(move |s| match s.role {
        Role::Exit { name, cpus, .. } if cpus.include(amd) => Some((name, s.kind)),
        _ => None,
    })
}

// The guest dispatches by number below and from FIRST_KERNEL; progress
// counts one set of exit rows for either vendor.
const _: () = {
    let mut i = 0;
    while i < KINDS.len() {
        assert!(KINDS[i].kind as usize == i);
        assert!(
            matches!(KINDS[i].blob, Blob::User)
                == (i < xvmm_results::num::usize_from(Kind::FIRST_KERNEL))
        );
        i += 1;
    }
    assert!(exit_count(true) == exit_count(false));
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The routines a dispatch table of `asm` lists (`.long routine - table`), in order.
    fn dispatch_table(asm: &str, table: &str) -> Vec<String> {
        let start = asm
            .find(&format!("\n{table}:\n"))
            .unwrap_or_else(|| panic!("no {table}"));
        let suffix = format!(" - {table}");
        asm[start..]
            .lines()
            .skip(2)
            .map_while(|l| l.trim().strip_prefix(".long "))
            .map(|l| l.strip_suffix(&suffix).expect("an offset from the table"))
            .map(String::from)
            .collect()
    }

    fn routines(blob: Blob) -> Vec<String> {
        KINDS
            .iter()
            .filter(|s| s.blob == blob)
            .map(|s| s.routine.to_string())
            .collect()
    }

    #[test]
    fn the_dispatch_tables_list_the_routines_in_kind_order() {
        let user = dispatch_table(include_str!("asm/user.S"), "xvmm_mg_utable");
        let kernel = dispatch_table(include_str!("asm/kernel.S"), "xvmm_mg_ktable");
        assert_eq!(user, routines(Blob::User));
        assert_eq!(kernel, routines(Blob::Kernel));
        assert_eq!((user.len() + kernel.len()) as u64, Kind::COUNT);
        assert_eq!(user.len() as u64, Kind::FIRST_KERNEL);
    }

    #[test]
    fn kinds_split_four_and_two_stamp_samples() {
        assert!(Kind::PageFault.four_stamps() && Kind::IntN.four_stamps());
        assert!(!Kind::Cpuid.four_stamps() && !Kind::Null.four_stamps());
        assert_eq!(Kind::Syscall.stride(), 32);
        assert_eq!(Kind::Hlt.stride(), 16);
        assert_eq!((Kind::Ipi.stride(), Kind::IpiHalt.stride()), (40, 40));
        assert!(Kind::Ipi.has_receiver() && Kind::IpiHalt.needs_irqchip());
        assert!(!Kind::X2apicSelfIpi.has_receiver() && !Kind::Ipi.takes_interrupt());
        assert_eq!(
            (
                Kind::Ipi.vcpus(),
                Kind::PleRoundRobin.vcpus(),
                Kind::Hlt.vcpus()
            ),
            (2, 2, 1)
        );
        assert_eq!(Kind::PleRoundRobin.stride(), 16);
        assert!(!Kind::PleRoundRobin.has_receiver() && !Kind::PleRoundRobin.needs_irqchip());
        assert!(Kind::Rdmsr.runs_in_kernel() && Kind::KernelNull.runs_in_kernel());
        assert!(!Kind::Imul.runs_in_kernel());
        assert_eq!(Kind::KernelImul as u64 + 1, Kind::COUNT);
        assert!(Kind::Cpuid.runs_in_kernel() && Kind::PioOut.runs_in_kernel());
        assert_eq!(Kind::FIRST_KERNEL, Kind::KernelNull as u64);
    }

    #[test]
    fn crossings_run_in_user_mode_and_exits_in_the_kernel() {
        for s in &KINDS {
            match s.role {
                Role::Crossing { .. } | Role::Batch { .. } | Role::Quantum => {
                    assert_eq!(s.blob, Blob::User, "{:?}", s.kind)
                }
                Role::Exit { .. } => assert_eq!(s.blob, Blob::Kernel, "{:?}", s.kind),
                Role::Stamps { .. } => {}
            }
        }
    }

    #[test]
    fn batches_and_handlers_follow_their_crossing() {
        assert_eq!(Kind::Breakpoint.batched(), Some(Kind::Int3Batch));
        assert_eq!(Kind::Syscall.batched(), Some(Kind::SyscallBatch));
        assert_eq!(Kind::PageFault.batched(), None);
        assert_eq!(Kind::SyscallBatch.handler(), Some(Handler::Syscall));
        assert_eq!(Kind::Int3Batch.handler(), Some(Handler::Breakpoint));
        assert_eq!(Kind::Cpuid.handler(), None);
    }

    #[test]
    fn the_report_rows_keep_their_names_and_order() {
        let names: Vec<&str> = CROSSINGS.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["pf", "int3", "syscall", "sysenter", "int-n"]);
        let exits = |amd| exit_rows(amd).map(|(name, _)| name).collect::<Vec<_>>();
        let with = |hypercall| {
            let mut rows = vec![
                "cpuid",
                "pio-out",
                "pio-in",
                "pio-in-pmtimer",
                "pio-out-eventfd",
                "pio-in-kernel",
                "pio-out-kernel",
                "mmio-write",
                "mmio-write-eventfd",
            ];
            rows.extend([hypercall, "rdmsr", "wrmsr", "hlt"]);
            rows.extend([
                "mov-to-cr8",
                "mov-from-cr8",
                "toggle-cr4-pge",
                "wbinvd",
                "invd",
            ]);
            rows.extend(["rd-tsc-adjust", "wr-tsc-adjust"]);
            rows.extend(["toggle-cr0-wp", "mov-to-dr7", "wr-kernel-gs-base"]);
            rows.extend(["wr-ibpb", "wr-ibrs", "wr-tsx-ctrl"]);
            rows.extend([
                "x2apic-self-ipi",
                "x2apic-self-ipi-hlt",
                "x2apic-self-ipi-tpr",
                "x2apic-self-ipi-tpr-sti-nop",
                "x2apic-self-ipi-tpr-sti-hlt",
                "x2apic-self-ipi-msr",
                "x2apic-self-ipi-msr-hlt",
                "x2apic-self-ipi-msr-tpr",
                "x2apic-self-ipi-msr-tpr-sti-nop",
                "x2apic-self-ipi-msr-tpr-sti-hlt",
                "ipi",
                "ipi-halt",
                "ple-round-robin",
                "tscdeadline-immed",
                "tscdeadline",
            ]);
            rows.push("xsetbv");
            rows
        };
        assert_eq!(exits(true), with("vmmcall"));
        assert_eq!(exits(false), with("vmcall"));
        assert_eq!(EXIT_ROWS, 42);
    }

    /// Every exit row has a family, and each family holds the rows it is
    /// named for (kvm-unit-tests' kinds, grouped as the table shows them).
    #[test]
    fn exit_rows_fall_into_their_families() {
        let of = |family: ExitFamily| -> Vec<&str> {
            KINDS
                .iter()
                .filter(|s| s.kind.family() == Some(family))
                .filter_map(|s| match s.role {
                    Role::Exit { name, .. } => Some(name),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            of(Instruction),
            [
                "cpuid",
                "vmcall",
                "vmmcall",
                "hlt",
                "wbinvd",
                "invd",
                "ple-round-robin",
                "xsetbv"
            ]
        );
        assert_eq!(
            of(Register),
            [
                "mov-to-cr8",
                "mov-from-cr8",
                "toggle-cr4-pge",
                "toggle-cr0-wp",
                "mov-to-dr7"
            ]
        );
        assert_eq!(
            of(Msr),
            [
                "rdmsr",
                "wrmsr",
                "rd-tsc-adjust",
                "wr-tsc-adjust",
                "wr-kernel-gs-base",
                "wr-ibpb",
                "wr-ibrs",
                "wr-tsx-ctrl"
            ]
        );
        assert_eq!(
            of(PortIo),
            [
                "pio-out",
                "pio-in",
                "pio-in-pmtimer",
                "pio-out-eventfd",
                "pio-in-kernel",
                "pio-out-kernel"
            ]
        );
        assert_eq!(of(Mmio), ["mmio-write", "mmio-write-eventfd"]);
        assert_eq!(
            of(Interrupt),
            [
                "x2apic-self-ipi",
                "x2apic-self-ipi-hlt",
                "x2apic-self-ipi-tpr",
                "x2apic-self-ipi-tpr-sti-nop",
                "x2apic-self-ipi-tpr-sti-hlt",
                "x2apic-self-ipi-msr",
                "x2apic-self-ipi-msr-hlt",
                "x2apic-self-ipi-msr-tpr",
                "x2apic-self-ipi-msr-tpr-sti-nop",
                "x2apic-self-ipi-msr-tpr-sti-hlt",
                "ipi",
                "ipi-halt"
            ]
        );
        assert_eq!(of(Timer), ["tscdeadline-immed", "tscdeadline"]);
        // Only exits have a family.
        assert_eq!(Kind::Syscall.family(), None);
        assert_eq!(Kind::KernelNull.family(), None);
        let families = KINDS.iter().filter(|s| s.kind.family().is_some()).count();
        assert_eq!(families, EXIT_ROWS + 1, "both hypercalls");
    }
}
