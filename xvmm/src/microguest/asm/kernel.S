/*
 * The kernel blob (CPL0), copied to KERNEL_CODE_GPA: the guest's entry
 * point, the handlers of the crossings a user phase measures, the CPL0 loops
 * that time VM exits, and the exception stubs that report anything else.
 * Everything between xvmm_mg_kernel_start and xvmm_mg_kernel_end is copied;
 * guest.rs finds the entry points by their symbols.
 *
 * Handlers run on the kernel stack (RSP0 in the TSS, IST1 for #DF) and may
 * clobber only rax, rcx and rdx: the user loop keeps its state in r9, r12,
 * r13, r14, r15 and rbp across the crossing (see macros.S).
 */

.pushsection .text.xvmm_mg_kernel,"ax",@progbits
.p2align 12
.globl xvmm_mg_kernel_start
xvmm_mg_kernel_start:
.set xvmm_mg_kopen_count, 0
.set xvmm_mg_kclose_count, 0

/*
 * First instruction of the guest: CPL0, RSP = kernel stack top. A user kind
 * IRETs to the user dispatcher (user.S); a kernel kind runs its CPL0 loop
 * here and rings the done doorbell.
 */
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
    DISPATCH xvmm_mg_ktable
    RUN_PHASE
    DOORBELL {port_done}

// A kind number past the table: a fault with a made-up frame and vector.
xvmm_mg_kbad_kind:
    .rept 5
    push 0                      // SS, RSP, RFLAGS, CS, RIP
    .endr
    REPORT_FAULT ({other_vector}+1), 0

// The CPL0 loops, in the order of KINDS (kinds.rs) from Kind::KernelNull.
.p2align 2
xvmm_mg_ktable:
    .long xvmm_mg_k_null - xvmm_mg_ktable
    .long xvmm_mg_k_cpuid - xvmm_mg_ktable
    .long xvmm_mg_k_pio_out - xvmm_mg_ktable
    .long xvmm_mg_k_pio_in - xvmm_mg_ktable
    .long xvmm_mg_k_pio_in_pmtimer - xvmm_mg_ktable
    .long xvmm_mg_k_pio_out_eventfd - xvmm_mg_ktable
    .long xvmm_mg_k_pio_in_kernel - xvmm_mg_ktable
    .long xvmm_mg_k_pio_out_kernel - xvmm_mg_ktable
    .long xvmm_mg_k_mmio - xvmm_mg_ktable
    .long xvmm_mg_k_mmio_eventfd - xvmm_mg_ktable
    .long xvmm_mg_k_vmcall - xvmm_mg_ktable
    .long xvmm_mg_k_vmmcall - xvmm_mg_ktable
    .long xvmm_mg_k_rdmsr - xvmm_mg_ktable
    .long xvmm_mg_k_wrmsr - xvmm_mg_ktable
    .long xvmm_mg_k_hlt - xvmm_mg_ktable
    .long xvmm_mg_k_cr8_write - xvmm_mg_ktable
    .long xvmm_mg_k_cr8_read - xvmm_mg_ktable
    .long xvmm_mg_k_cr4_pge - xvmm_mg_ktable
    .long xvmm_mg_k_wbinvd - xvmm_mg_ktable
    .long xvmm_mg_k_invd - xvmm_mg_ktable
    .long xvmm_mg_k_rd_tsc_adjust - xvmm_mg_ktable
    .long xvmm_mg_k_wr_tsc_adjust - xvmm_mg_ktable
    .long xvmm_mg_k_cr0_wp - xvmm_mg_ktable
    .long xvmm_mg_k_mov_dr7 - xvmm_mg_ktable
    .long xvmm_mg_k_wr_kernel_gs_base - xvmm_mg_ktable
    .long xvmm_mg_k_wr_ibpb - xvmm_mg_ktable
    .long xvmm_mg_k_wr_ibrs - xvmm_mg_ktable
    .long xvmm_mg_k_wr_tsx_ctrl - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_hlt - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_tpr - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_tpr_sti_nop - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_tpr_sti_hlt - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_msr - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_msr_hlt - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_msr_tpr - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_nop - xvmm_mg_ktable
    .long xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_hlt - xvmm_mg_ktable
    .long xvmm_mg_k_ipi - xvmm_mg_ktable
    .long xvmm_mg_k_ipi_halt - xvmm_mg_ktable
    .long xvmm_mg_k_ple_round_robin - xvmm_mg_ktable
    .long xvmm_mg_k_tscdeadline_immed - xvmm_mg_ktable
    .long xvmm_mg_k_tscdeadline - xvmm_mg_ktable
    .long xvmm_mg_k_xsetbv - xvmm_mg_ktable
    .long xvmm_mg_k_null_inner - xvmm_mg_ktable
    .long xvmm_mg_k_imul - xvmm_mg_ktable

/*
 * #UD: the user loop's way to say "done" (a UD2 at the address the VMM put
 * in the control block; user mode may not touch ports under every
 * hypervisor). Any other #UD is a fault.
 */
.p2align 4
.globl xvmm_mg_ud_entry
xvmm_mg_ud_entry:
    mov rax, qword ptr [rsp]            // the faulting RIP
    cmp rax, qword ptr [{ctl} + {c_user_done}]
    jne 4f
    DOORBELL {port_done}
4:
    REPORT_FAULT 6, 0

/*
 * #PF from the user loop: stamp u2k_k, make the faulting page of the A/B pair
 * present and the other one not present (and flush it), so that the next
 * write faults again, stamp k2u_k and return. A fault anywhere else is
 * reported.
 */
.p2align 4
.globl xvmm_mg_pf_entry
xvmm_mg_pf_entry:
    KSTAMP_CLOSE 8
    mov rax, cr2
    and rax, -2 * {page}                // the pair's first page
    cmp rax, {pf_page_a}
    jne 5f
    mov rax, cr2
    shr rax, 12
    and eax, 511                        // rax = the faulting page's PTE index
    or qword ptr [{pt_low} + rax * 8], {pte_p}
    xor eax, 1                          // the other page of the pair
    and qword ptr [{pt_low} + rax * 8], ~{pte_p}
    shl rax, 12
    invlpg [rax]
    add rsp, 8                          // drop the error code
    KSTAMP_OPEN 16
    iretq
5:
    REPORT_FAULT 14, 1

// #BP (int3) and int 0x80: stamp, stamp, return.
.p2align 4
.globl xvmm_mg_bp_entry
xvmm_mg_bp_entry:
    KSTAMP_CLOSE 8
    KSTAMP_OPEN 16
    iretq

.p2align 4
.globl xvmm_mg_intn_entry
xvmm_mg_intn_entry:
    KSTAMP_CLOSE 8
    KSTAMP_OPEN 16
    iretq

/*
 * SYSCALL: the CPU put the return RIP in rcx, but RDTSCP overwrites it; the
 * user loop keeps a copy in r14. SYSRETQ (spelled as bytes: REX.W 0f 07).
 */
.p2align 4
.globl xvmm_mg_syscall_entry
xvmm_mg_syscall_entry:
    KSTAMP_CLOSE 8
    mov rcx, r14
    KSTAMP_OPEN 16
    .byte 0x48, 0x0f, 0x07

/*
 * SYSENTER (Intel only in long mode): SYSEXITQ (REX.W 0f 35) takes the user
 * RIP from rdx and RSP from rcx; the user loop left them in r14 and r13.
 */
.p2align 4
.globl xvmm_mg_sysenter_entry
xvmm_mg_sysenter_entry:
    KSTAMP_CLOSE 8
    KSTAMP_OPEN 16
    mov rdx, r14
    mov rcx, r13
    .byte 0x48, 0x0f, 0x35

/*
 * CPL0 loops: two stamps around one exiting instruction per sample (as
 * kvm-unit-tests' vmexit tests, all at CPL0: some hypervisors refuse
 * user-mode port I/O). Label 1 is where NEXT_SAMPLE starts the next sample.
 */
.p2align 4
xvmm_mg_k_cpuid:
1:
    KSTAMP_OPEN 0
    xor eax, eax
    xor ecx, ecx
    cpuid
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_pio_out:
1:
    KSTAMP_OPEN 0
    mov edx, {port_measure}
    out dx, al
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_pio_in:
1:
    KSTAMP_OPEN 0
    mov edx, {port_measure}
    in al, dx
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// A 32-bit read of the PM timer xvmm serves (inl, as kvm-unit-tests').
.p2align 4
xvmm_mg_k_pio_in_pmtimer:
1:
    KSTAMP_OPEN 0
    mov edx, {port_pm_timer}
    in eax, dx
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_pio_out_eventfd:
1:
    KSTAMP_OPEN 0
    mov edx, {port_eventfd}
    out dx, al
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// r13 = the MMIO address (a page with no memory slot behind it).
.p2align 4
xvmm_mg_k_mmio:
    mov r13, {mmio}
1:
    KSTAMP_OPEN 0
    mov dword ptr [r13], eax
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// r13 = the address an ioeventfd serves.
.p2align 4
xvmm_mg_k_mmio_eventfd:
    mov r13, {mmio_eventfd}
1:
    KSTAMP_OPEN 0
    mov dword ptr [r13], eax
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// Hypercall number 0 (rax) is none: KVM answers -KVM_ENOSYS after the exit.
.p2align 4
xvmm_mg_k_vmcall:
1:
    KSTAMP_OPEN 0
    xor eax, eax
    vmcall
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_vmmcall:
1:
    KSTAMP_OPEN 0
    xor eax, eax
    vmmcall
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// An MSR KVM does not know, so that the access exits to xvmm.
.p2align 4
xvmm_mg_k_rdmsr:
1:
    KSTAMP_OPEN 0
    mov ecx, {probe_msr}
    rdmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_wrmsr:
1:
    KSTAMP_OPEN 0
    mov ecx, {probe_msr}
    xor eax, eax
    xor edx, edx
    wrmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// The VMM wakes the halted vCPU by running it again.
.p2align 4
xvmm_mg_k_hlt:
1:
    KSTAMP_OPEN 0
    hlt
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// TPR 0, as it is: no interrupt class is masked and KVM need not ask xvmm.
.p2align 4
xvmm_mg_k_cr8_write:
1:
    KSTAMP_OPEN 0
    xor eax, eax
    mov cr8, rax
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_cr8_read:
1:
    KSTAMP_OPEN 0
    mov rax, cr8
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// r13 = CR4, read once before the loop (SVM intercepts the read too);
// each sample flips PGE and writes it.
.p2align 4
xvmm_mg_k_cr4_pge:
    mov r13, cr4
1:
    xor r13, 0x80
    KSTAMP_OPEN 0
    mov cr4, r13
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_wbinvd:
1:
    KSTAMP_OPEN 0
    wbinvd
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_invd:
1:
    KSTAMP_OPEN 0
    invd
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// IA32_TSC_ADJUST (0x3b, architectural): read; then written with the value
// read once before the loop (r13d:r14d), so the guest's TSC does not move.
.p2align 4
xvmm_mg_k_rd_tsc_adjust:
1:
    KSTAMP_OPEN 0
    mov ecx, 0x3b
    rdmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_wr_tsc_adjust:
    mov ecx, 0x3b
    rdmsr
    mov r13d, eax
    mov r14d, edx
1:
    KSTAMP_OPEN 0
    mov ecx, 0x3b
    mov eax, r13d
    mov edx, r14d
    wrmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// r13 = CR0, read once before the loop; each sample flips WP and writes
// it. (Each phase starts from the CR0 setup_cpu gives it.)
.p2align 4
xvmm_mg_k_cr0_wp:
    mov r13, cr0
1:
    xor r13, 0x10000
    KSTAMP_OPEN 0
    mov cr0, r13
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// DR7's reset value: no breakpoint enabled.
.p2align 4
xvmm_mg_k_mov_dr7:
1:
    KSTAMP_OPEN 0
    mov eax, 0x400
    mov dr7, rax
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// IA32_KERNEL_GS_BASE (0xc0000102), written back with the value read once
// before the loop (r13d:r14d); nothing in the microguest runs SWAPGS.
.p2align 4
xvmm_mg_k_wr_kernel_gs_base:
    mov ecx, 0xc0000102
    rdmsr
    mov r13d, eax
    mov r14d, edx
1:
    KSTAMP_OPEN 0
    mov ecx, 0xc0000102
    mov eax, r13d
    mov edx, r14d
    wrmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// The ELCR (port 0x4d0, edge/level of IRQs 0-7), which KVM's in-kernel PIC
// serves: read; then written with the value read once before the loop
// (r13d), so no IRQ changes its trigger mode.
.p2align 4
xvmm_mg_k_pio_in_kernel:
1:
    KSTAMP_OPEN 0
    mov edx, 0x4d0
    in al, dx
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

.p2align 4
xvmm_mg_k_pio_out_kernel:
    mov edx, 0x4d0
    in al, dx
    movzx r13d, al
1:
    KSTAMP_OPEN 0
    mov edx, 0x4d0
    mov eax, r13d
    out dx, al
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// IA32_PRED_CMD (0x49) = 1: an indirect branch prediction barrier, a
// command with no state to put back.
.p2align 4
xvmm_mg_k_wr_ibpb:
1:
    KSTAMP_OPEN 0
    mov ecx, 0x49
    mov eax, 1
    xor edx, edx
    wrmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// IA32_SPEC_CTRL (0x48) with IBRS (bit 0) flipped each sample: r13d:r14d
// the value found, r10d the one written. The value found is written back
// after the last sample, so no later phase runs with IBRS changed.
.p2align 4
xvmm_mg_k_wr_ibrs:
    mov ecx, 0x48
    rdmsr
    mov r13d, eax
    mov r14d, edx
    mov r10d, eax
1:
    xor r10d, 1
    KSTAMP_OPEN 0
    mov ecx, 0x48
    mov eax, r10d
    mov edx, r14d
    wrmsr
    KSTAMP_CLOSE 8
    add r15, r12
    dec r9
    jnz 1b
    mov ecx, 0x48
    mov eax, r13d
    mov edx, r14d
    wrmsr
    ret

// IA32_TSX_CTRL (0x122), written back with the value read once before the
// loop (r13d:r14d), so TSX stays as the VM has it.
.p2align 4
xvmm_mg_k_wr_tsx_ctrl:
    mov ecx, 0x122
    rdmsr
    mov r13d, eax
    mov r14d, edx
1:
    KSTAMP_OPEN 0
    mov ecx, 0x122
    mov eax, r13d
    mov edx, r14d
    wrmsr
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

/*
 * The APIC rows: interrupts on for one window per sample (STI, then the
 * instruction STI's shadow covers, then CLI), so the only interrupt a
 * sample can take is the one it asked for. ONE_INTERRUPT keeps the
 * sample where exactly that one arrived in the window.
 */

// A self-IPI sent by `send` (SEND_SELF_IPI or SEND_SELF_IPI_MSR), taken
// with interrupts on for `window`, the one instruction STI shadows.
.macro SELF_IPI_SAMPLES send, window
1:
    mov r10, r11
    KSTAMP_OPEN 0
    \send
    sti
    \window
    cli
    KSTAMP_CLOSE 8
    ONE_INTERRUPT
    NEXT_SAMPLE
.endm

// Taken in an STI; NOP window (kvm-unit-tests' x2apic_self_ipi_sti_nop).
.p2align 4
xvmm_mg_k_x2apic_self_ipi:
    X2APIC_ON
    SELF_IPI_SAMPLES SEND_SELF_IPI, nop

// Taken by a halted vCPU: STI; HLT, the IPI already pending
// (kvm-unit-tests' x2apic_self_ipi_sti_hlt).
.p2align 4
xvmm_mg_k_x2apic_self_ipi_hlt:
    X2APIC_ON
    SELF_IPI_SAMPLES SEND_SELF_IPI, hlt

// The task priority (CR8) at 15 masks every vector, so the self-IPI
// sent under it stays pending until CR8 goes back to 0. `early` runs
// before the ICR write, `late` after CR8 is back, then `window`: STI
// early, nothing late and NOP for x2apic_self_ipi_tpr (interrupts on
// throughout, so lowering CR8 lets the IPI in; the STI comes before the
// ICR write, so it is the only interrupt); nothing early, STI late and a
// NOP or HLT window for the _sti_ twins; `send` as in SELF_IPI_SAMPLES.
// Clobbers rax, rcx, rdx.
.macro SELF_IPI_UNDER_TPR send, early, late, window
1:
    mov r10, r11
    KSTAMP_OPEN 0
    mov eax, 15
    mov cr8, rax
    \early
    \send
    xor eax, eax
    mov cr8, rax
    \late
    \window
    cli
    KSTAMP_CLOSE 8
    ONE_INTERRUPT
    NEXT_SAMPLE
.endm

// kvm-unit-tests' x2apic_self_ipi_tpr.
.p2align 4
xvmm_mg_k_x2apic_self_ipi_tpr:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI, sti, , nop

// x2apic_self_ipi_tpr_sti_nop.
.p2align 4
xvmm_mg_k_x2apic_self_ipi_tpr_sti_nop:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI, , sti, nop

// x2apic_self_ipi_tpr_sti_hlt.
.p2align 4
xvmm_mg_k_x2apic_self_ipi_tpr_sti_hlt:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI, , sti, hlt

// The five again, the IPI sent through the SELF IPI register (0x83f):
// kvm-unit-tests' x2apic_self_ipi_* rows (its self_ipi_* ones write the
// ICR, as the rows above do, the x2APIC being on).
.p2align 4
xvmm_mg_k_x2apic_self_ipi_msr:
    X2APIC_ON
    SELF_IPI_SAMPLES SEND_SELF_IPI_MSR, nop

.p2align 4
xvmm_mg_k_x2apic_self_ipi_msr_hlt:
    X2APIC_ON
    SELF_IPI_SAMPLES SEND_SELF_IPI_MSR, hlt

.p2align 4
xvmm_mg_k_x2apic_self_ipi_msr_tpr:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI_MSR, sti, , nop

.p2align 4
xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_nop:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI_MSR, , sti, nop

.p2align 4
xvmm_mg_k_x2apic_self_ipi_msr_tpr_sti_hlt:
    X2APIC_ON
    SELF_IPI_UNDER_TPR SEND_SELF_IPI_MSR, , sti, hlt

/*
 * The IPI rows (kvm-unit-tests' ipi and ipi_halt): vCPU 0, interrupts off
 * throughout, sends vCPU 1 a fixed IPI (vector 0xf2, physical destination
 * 1) through the x2APIC ICR and spins until the receiver's handler says it
 * ran (kvm-unit-tests' ipi_done), then waits, outside the sample, for the
 * handler's EOI. The sample's words: 0 the opening stamp, 8 the closing
 * one, 16 the receiver's stamp at its handler's entry, 24 its stamp after
 * its EOI, 32 the TSC at which the receiver went to halt before this IPI
 * was sent (0: it had not yet). Both vCPUs read one TSC (the VMM gives
 * them one offset). The MFENCE makes the mailbox visible before the ICR
 * write, which is not serialising in x2APIC mode.
 */
.macro IPI_SAMPLES halted
    X2APIC_ON
70:
    pause
    cmp qword ptr [{ctl} + {c_ap_ready}], 0
    je 70b
1:
    .if \halted
    // ipi_halt: the receiver halted, then kvm-unit-tests' 2000 ticks.
71:
    pause
    cmp qword ptr [{ctl} + {c_ap_halt}], 0
    je 71b
    rdtsc
    shl rdx, 32
    or rax, rdx
    lea r10, [rax + 2000]
72:
    rdtsc
    shl rdx, 32
    or rax, rdx
    cmp rax, r10
    jb 72b
    .endif
    mov rax, qword ptr [{ctl} + {c_ap_halt}]
    mov qword ptr [r15 + 32], rax
    mov qword ptr [{ctl} + {c_ap_sample}], r15
    mov qword ptr [{ctl} + {c_ap_ack}], 0
    mov qword ptr [{ctl} + {c_ap_eoi}], 0
    mfence
    KSTAMP_OPEN 0
    mov ecx, 0x830
    mov eax, 0x40f2
    mov edx, 1
    wrmsr
73:
    cmp qword ptr [{ctl} + {c_ap_ack}], 0
    je 73b
    KSTAMP_CLOSE 8
74:
    pause
    cmp qword ptr [{ctl} + {c_ap_eoi}], 0
    je 74b
    NEXT_SAMPLE
.endm

// kvm-unit-tests' ipi: the next IPI as soon as the last one's EOI is done.
.p2align 4
xvmm_mg_k_ipi:
    IPI_SAMPLES 0

// kvm-unit-tests' ipi_halt: each IPI to a receiver that went to halt.
.p2align 4
xvmm_mg_k_ipi_halt:
    IPI_SAMPLES 1

/*
 * The round robin (kvm-unit-tests' ple_round_robin on two vCPUs): vCPU 0
 * passes token r13 to vCPU 1 (AP_ACK) and waits in a PAUSE loop until it
 * comes back (AP_EOI); vCPU 1 (xvmm_mg_ap_round_robin) waits likewise and
 * passes each token back. A sample is one round, both hand-offs.
 */
.p2align 4
xvmm_mg_k_ple_round_robin:
70:
    pause
    cmp qword ptr [{ctl} + {c_ap_ready}], 0
    je 70b
    xor r13d, r13d
1:
    inc r13
    KSTAMP_OPEN 0
    mov qword ptr [{ctl} + {c_ap_ack}], r13
2:
    pause
    cmp qword ptr [{ctl} + {c_ap_eoi}], r13
    jne 2b
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// vCPU 1's side of the round robin: no APIC, interrupts off throughout.
.p2align 4
xvmm_mg_ap_round_robin:
    xor r8d, r8d
    mov qword ptr [{ctl} + {c_ap_ready}], 1
1:
    pause
    mov rax, qword ptr [{ctl} + {c_ap_ack}]
    cmp rax, r8
    je 1b
    mov r8, rax
    mov qword ptr [{ctl} + {c_ap_eoi}], rax
    jmp 1b

/*
 * vCPU 1, the IPI rows' receiver (the round robin's goes to its loop
 * above): starts at CPL0 with interrupts off on its own stack, turns its x2APIC on, says it is ready and idles as
 * kvm-unit-tests' APs do, halted with interrupts on. Before each halt it
 * puts the TSC in AP_HALT (interrupts still off, so no IPI comes between
 * that and STI; HLT). A plain RDTSC: an order, not a measured stamp.
 */
.p2align 4
.globl xvmm_mg_ap_entry
xvmm_mg_ap_entry:
    mov rsp, {ap_stack_top}
    cmp qword ptr [{ctl} + {c_kind}], {kind_round_robin}
    je xvmm_mg_ap_round_robin
    X2APIC_ON
    mov qword ptr [{ctl} + {c_ap_ready}], 1
1:
    cli
    rdtsc
    shl rdx, 32
    or rax, rdx
    mov qword ptr [{ctl} + {c_ap_halt}], rax
    sti
    hlt
    jmp 1b

/*
 * The receiver's IPI handler: stamps its entry into the sender's sample
 * (AP_SAMPLE), marks itself running (AP_HALT 0), says it ran (AP_ACK),
 * acknowledges the IPI with an x2APIC EOI, stamps again and says so
 * (AP_EOI). Saves what it uses.
 */
.p2align 4
.globl xvmm_mg_ap_irq_entry
xvmm_mg_ap_irq_entry:
    push rax
    push rcx
    push rdx
    push r15
    mov r15, qword ptr [{ctl} + {c_ap_sample}]
    KSTAMP_CLOSE 16
    mov qword ptr [{ctl} + {c_ap_halt}], 0
    mov qword ptr [{ctl} + {c_ap_ack}], 1
    mov ecx, 0x80b
    xor eax, eax
    xor edx, edx
    wrmsr
    KSTAMP_CLOSE 24
    mov qword ptr [{ctl} + {c_ap_eoi}], 1
    pop r15
    pop rdx
    pop rcx
    pop rax
    iretq

// The LAPIC timer in TSC-deadline mode armed with a deadline already
// past: IA32_TSC_DEADLINE (0x6e0) = the opening stamp's TSC, still in
// edx:eax, then the STI; NOP window (kvm-unit-tests' tscdeadline_immed,
// which reads the TSC once more).
.p2align 4
xvmm_mg_k_tscdeadline_immed:
    X2APIC_ON
    TSC_DEADLINE_TIMER_ON
1:
    mov r10, r11
    KSTAMP_OPEN 0
    mov ecx, 0x6e0
    wrmsr
    sti
    nop
    cli
    KSTAMP_CLOSE 8
    ONE_INTERRUPT
    NEXT_SAMPLE

// The same timer armed 3000 ticks after the opening stamp (kvm-unit-tests'
// tscdeadline), then a wait with interrupts on until the handler has
// counted its interrupt: the sample holds the 3000-tick lead, the host
// timer's firing and the injection. Nothing else can interrupt: the
// timer's is the only source this VM has.
.p2align 4
xvmm_mg_k_tscdeadline:
    X2APIC_ON
    TSC_DEADLINE_TIMER_ON
1:
    mov r10, r11
    KSTAMP_OPEN 0
    add eax, 3000
    adc edx, 0
    mov ecx, 0x6e0
    wrmsr
    sti
2:
    cmp r11, r10
    je 2b
    cli
    KSTAMP_CLOSE 8
    ONE_INTERRUPT
    NEXT_SAMPLE

// XCR0 = 1 (x87 only, its value at reset): valid wherever XSAVE is, so the
// loop changes nothing the guest uses.
.p2align 4
xvmm_mg_k_xsetbv:
1:
    KSTAMP_OPEN 0
    xor ecx, ecx
    mov eax, 1
    xor edx, edx
    xsetbv
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

// The kernel stamp pair with nothing between (the exits' null overhead).
.p2align 4
xvmm_mg_k_null:
1:
    KSTAMP_OPEN 0
    KSTAMP_CLOSE 8
    NEXT_SAMPLE

/*
 * The kernel stamps in the order a crossing's handler takes them (entry
 * stamp KSTAMP_CLOSE, then return stamp KSTAMP_OPEN) with nothing between:
 * what the two add to in_kernel.
 */
.p2align 4
xvmm_mg_k_null_inner:
1:
    KSTAMP_CLOSE 0
    KSTAMP_OPEN 8
    NEXT_SAMPLE

/*
 * The user imul loop's twin at CPL0, between the kernel stamps (opening,
 * then closing, as the exit loops take them): the same chain lengths in
 * turn (CHAIN_SETUP), for the kernel stamps' linearity check.
 */
.p2align 4
xvmm_mg_k_imul:
    CHAIN_SETUP
1:
    KSTAMP_OPEN 0
    mov rcx, r10
76:
    .rept 8
    imul rax, rax
    .endr
    sub rcx, 8
    jnz 76b
    KSTAMP_CLOSE 8
    CHAIN_NEXT
    NEXT_SAMPLE

// The APIC rows' interrupts (vectors 0xf0 and 0xf1): counted in r11 and
// acknowledged with an x2APIC EOI (0x80b), nothing else touched.
.p2align 4
.globl xvmm_mg_irq_entry
xvmm_mg_irq_entry:
    push rax
    push rcx
    push rdx
    inc r11
    mov ecx, 0x80b
    xor eax, eax
    xor edx, edx
    wrmsr
    pop rdx
    pop rcx
    pop rax
    iretq

// Every unexpected exception ends here (stack: see REPORT_FAULT).
.p2align 4
xvmm_mg_fault_common:
    FAULT_REPORT

/*
 * The IDT's gates: vector v's stub is at xvmm_mg_stubs + 16 * v, then one
 * stub for every vector from 32 up. The CPU pushes an error code for
 * vectors 8, 10-14, 17, 21, 29 and 30.
 */
.p2align 4
.globl xvmm_mg_stubs
xvmm_mg_stubs:
    EXCEPTION_STUBS 0, 0, 1, 2, 3, 4, 5, 6, 7
    EXCEPTION_STUBS 1, 8
    EXCEPTION_STUBS 0, 9
    EXCEPTION_STUBS 1, 10, 11, 12, 13, 14
    EXCEPTION_STUBS 0, 15, 16
    EXCEPTION_STUBS 1, 17
    EXCEPTION_STUBS 0, 18, 19, 20
    EXCEPTION_STUBS 1, 21
    EXCEPTION_STUBS 0, 22, 23, 24, 25, 26, 27, 28
    EXCEPTION_STUBS 1, 29, 30
    EXCEPTION_STUBS 0, 31
.p2align 4
.globl xvmm_mg_stub_other
xvmm_mg_stub_other:
    REPORT_FAULT {other_vector}, 0

// How many kernel stamps the macros above emitted (for the VMM's patching).
.p2align 2
.globl xvmm_mg_kstamp_counts
xvmm_mg_kstamp_counts:
    .long xvmm_mg_kopen_count
    .long xvmm_mg_kclose_count
.globl xvmm_mg_kernel_end
xvmm_mg_kernel_end:
.popsection
