/*
 * Macros shared by the microguest's kernel (kernel.S) and user (user.S) code.
 *
 * guest.rs assembles macros.S, kernel.S and user.S as one global_asm! block
 * (Intel syntax). Names in curly brackets are its const operands: the
 * addresses and offsets of layout.rs, so the code refers to data only at
 * fixed addresses and to code only RIP-relatively (position independent).
 *
 * Registers, the same in both blobs (our own guest, so each side may trust
 * the other):
 *   r15  current sample; a crossing's handler stores u2k_k at +8 and k2u_k
 *        at +16 of it
 *   r12  bytes to the next sample: 0 during warm-up (every warm-up iteration
 *        reuses the scratch sample), the kind's stride afterwards
 *   r9   samples left in this pass
 *   rbp  the kind's measurement routine
 *   rax, rcx, rdx  scratch: the stamps write them (RDTSC edx:eax, RDTSCP
 *        also ecx) and a handler clobbers nothing else
 *   r11  interrupts the interrupt handler took (the APIC rows; the chain
 *        routines, which run with interrupts off, use it otherwise)
 * Kind-specific registers are described where they are used.
 */

/*
 * The stamp pair, the only place the guest spells it (the same sequences as
 * xvmm_results::tsc, checked by a test in guest.rs). The TSC ends in edx:eax.
 * STAMP_CLOSE also writes TSC_AUX to ecx.
 */
.macro STAMP_OPEN
    lfence
    rdtsc
    lfence
.endm

.macro STAMP_CLOSE
    rdtscp
    lfence
.endm

// Stores the TSC in edx:eax at byte offset off of the current sample (r15).
.macro STORE_STAMP off
    mov dword ptr [r15 + \off], eax
    mov dword ptr [r15 + \off + 4], edx
.endm

/*
 * Kernel (CPL0) stamps. Each one is counted: the VMM replaces every kernel
 * stamp with plain RDTSC where the hypervisor cannot run LFENCE/RDTSCP at
 * CPL0 and checks that it found exactly this many (xvmm_mg_kstamp_counts).
 */
.macro KSTAMP_OPEN off
    STAMP_OPEN
    .set xvmm_mg_kopen_count, xvmm_mg_kopen_count + 1
    STORE_STAMP \off
.endm

.macro KSTAMP_CLOSE off
    STAMP_CLOSE
    .set xvmm_mg_kclose_count, xvmm_mg_kclose_count + 1
    STORE_STAMP \off
.endm

// User (CPL3) stamps: never patched, so not counted.
.macro USTAMP_OPEN off
    STAMP_OPEN
    STORE_STAMP \off
.endm

.macro USTAMP_CLOSE off
    STAMP_CLOSE
    STORE_STAMP \off
.endm

/*
 * The APIC rows' set-up: x2APIC mode (IA32_APIC_BASE EN and EXTD; KVM's
 * in-kernel LAPIC starts in xAPIC mode, and EN to EN+EXTD is a legal
 * step) and software-enabled (SVR bit 8, spurious vector 0xff). Clobbers
 * rax, rcx, rdx.
 */
.macro X2APIC_ON
    mov ecx, 0x1b
    rdmsr
    or eax, 0xc00
    wrmsr
    mov ecx, 0x80f
    mov eax, 0x1ff
    xor edx, edx
    wrmsr
.endm

// A self-IPI through the x2APIC ICR (0x830: shorthand self, fixed,
// vector 0xf0). Clobbers rax, rcx, rdx.
.macro SEND_SELF_IPI
    mov ecx, 0x830
    mov eax, 0x400f0
    xor edx, edx
    wrmsr
.endm

// The same IPI through the x2APIC SELF IPI register (0x83f: the vector
// alone), kvm-unit-tests' x2apic_self_ipi. Clobbers rax, rcx, rdx.
.macro SEND_SELF_IPI_MSR
    mov ecx, 0x83f
    mov eax, 0xf0
    xor edx, edx
    wrmsr
.endm

/*
 * The LAPIC timer in TSC-deadline mode (LVT timer 0x832: mode 10b, vector
 * 0xf1), after X2APIC_ON. The MFENCE orders the LVT write before the first
 * deadline write, as the SDM asks. Clobbers rax, rcx, rdx.
 */
.macro TSC_DEADLINE_TIMER_ON
    mov ecx, 0x832
    mov eax, 0x400f1
    xor edx, edx
    wrmsr
    mfence
.endm

/*
 * An interrupt sample's end, after its closing stamp: the sample stands
 * only where exactly one interrupt (the one it asked for) reached the
 * handler since r10 was set from r11; otherwise its closing stamp becomes
 * the unfilled sentinel and the VMM drops it. Clobbers rax.
 */
.macro ONE_INTERRUPT
    mov rax, r11
    sub rax, r10
    cmp rax, 1
    je 77f
    mov qword ptr [r15 + 8], -1
77:
.endm

/*
 * Phase dispatch: rax = the kind's index into table, a list of 32-bit
 * offsets from table to each routine. Leaves the routine in rbp; clobbers
 * rax, rcx.
 */
.macro DISPATCH table
    lea rcx, [rip + \table]
    movsxd rax, dword ptr [rcx + rax * 4]
    add rax, rcx
    mov rbp, rax
.endm

/*
 * Runs a phase: the routine in rbp once over the warm-up count into the
 * scratch sample, then over the sample count into the sample buffer, then
 * marks the phase done in the control block. Sets r9, r12, r15 for the
 * routine (see the top of this file); the routine may clobber every
 * register but rbp and rsp.
 */
.macro RUN_PHASE
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

/*
 * End of one sample in a measurement routine: advance r15 by r12, count r9
 * down and go back to the routine's label 1 (its first sample instruction),
 * or return to RUN_PHASE after the last one.
 */
.macro NEXT_SAMPLE
    add r15, r12
    dec r9
    jnz 1b
    ret
.endm

/*
 * Dependent imul chains (the linearity sweeps), the user and kernel routines
 * alike. PARAM's low 32 bits are N (a positive multiple of 8), bits 32-39 K,
 * the number of chain lengths (0 means 2, the n / 2n pair): sample i times
 * (1 + i mod K) x N imuls, every length in turn, so that a change of the
 * core clock during the phase hits them all alike. r8 = N, r10 = this
 * sample's length, r11 = the longest (K x N); the routine's loop counts rcx
 * down and multiplies rax. Both macros run outside the stamps.
 */
.macro CHAIN_SETUP
    mov r8, qword ptr [{ctl} + {c_param}]
    mov r11, r8
    shr r11, 32
    mov r8d, r8d
    cmp r11, 2
    jae 73f
    mov r11d, 2
73:
    imul r11, r8
    mov r10, r8
.endm

// After a sample: the next length, back to N after the longest.
.macro CHAIN_NEXT
    add r10, r8
    cmp r10, r11
    jbe 74f
    mov r10, r8
74:
.endm

// Rings a doorbell port for the VMM (any value in al), then stops for good.
.macro DOORBELL port
    mov edx, \port
    out dx, al
99:
    hlt
    jmp 99b
.endm

/*
 * Hands an exception to xvmm_mg_fault_common with the stack it expects:
 * vector on top, then the error code (pushed here as 0 when the CPU pushes
 * none: has_error 0), then the CPU's interrupt frame.
 */
.macro REPORT_FAULT vector, has_error
    .if \has_error == 0
    push 0
    .endif
    push \vector
    jmp xvmm_mg_fault_common
.endm

// One 16-byte entry stub per listed vector, in order.
.macro EXCEPTION_STUBS has_error, vectors:vararg
    .irp v, \vectors
    .p2align 4
    REPORT_FAULT \v, \has_error
    .endr
.endm

/*
 * The fault report: copies vector, error code, the interrupted RIP, CS,
 * RFLAGS, RSP and CR2 into the control block's fault record, rings the
 * fault doorbell and stops. Expects the stack REPORT_FAULT builds; uses rax
 * and rdx (nothing is resumed).
 */
.macro FAULT_REPORT
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
    DOORBELL {port_fault}
.endm
