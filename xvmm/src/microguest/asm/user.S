/*
 * The user blob (CPL3), copied to USER_CODE_GPA with its entry at offset 0:
 * the dispatcher the kernel entry IRETs to, and one measurement routine per
 * user kind. A crossing's routine stamps u2k_u (+0) before the crossing
 * instruction and k2u_u (+24) after it; the handler in kernel.S fills +8 and
 * +16. User mode cannot ring a port under every hypervisor: the end of a
 * phase is a UD2 at xvmm_mg_user_done, which the #UD handler turns into the
 * done doorbell.
 */

.pushsection .text.xvmm_mg_user,"ax",@progbits
.p2align 12
.globl xvmm_mg_user_start
xvmm_mg_user_start:
    mov rax, qword ptr [{ctl} + {c_kind}]
    cmp rax, {first_kernel}
    jae 3f                              // a kernel kind never comes here
    DISPATCH xvmm_mg_utable
    mov r13, {pf_page_a}                // the #PF loop's first target
    RUN_PHASE
.globl xvmm_mg_user_done
xvmm_mg_user_done:
    ud2
3:
    ud2

// The user routines, in the order of KINDS (kinds.rs) from Kind::Null.
.p2align 2
xvmm_mg_utable:
    .long xvmm_mg_u_null - xvmm_mg_utable
    .long xvmm_mg_u_pf - xvmm_mg_utable
    .long xvmm_mg_u_int3 - xvmm_mg_utable
    .long xvmm_mg_u_syscall - xvmm_mg_utable
    .long xvmm_mg_u_sysenter - xvmm_mg_utable
    .long xvmm_mg_u_intn - xvmm_mg_utable
    .long xvmm_mg_u_imul - xvmm_mg_utable
    .long xvmm_mg_u_tsc_step - xvmm_mg_utable
    .long xvmm_mg_u_int3_batch - xvmm_mg_utable
    .long xvmm_mg_u_syscall_batch - xvmm_mg_utable

/*
 * Every routine's label 1 is where NEXT_SAMPLE starts the next sample.
 * The user stamp pair with nothing between (the crossings' null overhead).
 */
.p2align 4
xvmm_mg_u_null:
1:
    USTAMP_OPEN 0
    USTAMP_CLOSE 8
    NEXT_SAMPLE

/*
 * A byte store to the not-present page of the A/B pair. r13 (the next page
 * to fault on) is set once by the dispatcher and carried from warm-up into
 * the recorded samples: restarting at page A after an odd warm-up would
 * write to a page that is already present.
 */
.p2align 4
xvmm_mg_u_pf:
1:
    USTAMP_OPEN 0
    mov byte ptr [r13], 1
    USTAMP_CLOSE 24
    xor r13, {page}                     // A <-> B
    NEXT_SAMPLE

.p2align 4
xvmm_mg_u_int3:
1:
    USTAMP_OPEN 0
    int3
    USTAMP_CLOSE 24
    NEXT_SAMPLE

// r14 = where SYSRET returns: the handler cannot use rcx (see kernel.S).
.p2align 4
xvmm_mg_u_syscall:
    lea r14, [rip + 73f]
1:
    USTAMP_OPEN 0
    syscall
73:
    USTAMP_CLOSE 24
    NEXT_SAMPLE

// r14 = where SYSEXIT returns, r13 = the user stack to return to.
.p2align 4
xvmm_mg_u_sysenter:
    lea r14, [rip + 74f]
    mov r13, rsp
1:
    USTAMP_OPEN 0
    sysenter
74:
    USTAMP_CLOSE 24
    NEXT_SAMPLE

.p2align 4
xvmm_mg_u_intn:
1:
    USTAMP_OPEN 0
    int 0x80
    USTAMP_CLOSE 24
    NEXT_SAMPLE

/*
 * Dependent imul chains for the linearity sweeps: N, 2N, ..., K x N imuls
 * in turn (CHAIN_SETUP in macros.S says how PARAM gives N and K).
 */
.p2align 4
xvmm_mg_u_imul:
    CHAIN_SETUP
1:
    USTAMP_OPEN 0
    mov rcx, r10
75:
    .rept 8
    imul rax, rax
    .endr
    sub rcx, 8
    jnz 75b
    USTAMP_CLOSE 8
    CHAIN_NEXT
    NEXT_SAMPLE

/*
 * Two plain RDTSC back to back, nothing between: the difference is one
 * read's worth of counter movement, from which the VMM estimates the TSC
 * quantum (how far the counter moves in one step).
 */
.p2align 4
xvmm_mg_u_tsc_step:
1:
    rdtsc
    mov r10d, eax
    mov r11d, edx
    rdtsc
    mov dword ptr [r15], r10d
    mov dword ptr [r15 + 4], r11d
    STORE_STAMP 8
    NEXT_SAMPLE

/*
 * Batches: PARAM crossings between one pair of stamps (the round trip
 * only; the handler's stamps at +8/+16 are the last crossing's). int3
 * keeps the count in r11 (a handler clobbers only rax, rcx, rdx); SYSCALL
 * clobbers rcx and r11, so it counts in r13, and SYSRET returns to 78 (r14).
 */
.p2align 4
xvmm_mg_u_int3_batch:
    mov r10, qword ptr [{ctl} + {c_param}]
1:
    USTAMP_OPEN 0
    mov r11, r10
77:
    int3
    dec r11
    jnz 77b
    USTAMP_CLOSE 24
    NEXT_SAMPLE

.p2align 4
xvmm_mg_u_syscall_batch:
    mov r10, qword ptr [{ctl} + {c_param}]
    lea r14, [rip + 78f]
1:
    USTAMP_OPEN 0
    mov r13, r10
79:
    syscall
78:
    dec r13
    jnz 79b
    USTAMP_CLOSE 24
    NEXT_SAMPLE

.globl xvmm_mg_user_end
xvmm_mg_user_end:
.popsection
