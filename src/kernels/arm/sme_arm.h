/* sme_arm.h — what the SME families (mm_*_sme.c) share: the streaming vector length and the entry to and exit
 * from streaming mode.
 *
 * GCC 12 (Debian 12's aarch64 cross compiler) has neither -march=...+sme nor the SME ACLE (arm_sme.h, GCC 14);
 * its assembler (binutils 2.40) knows SME, so the kernels are inline assembly behind `.arch_extension sme`.
 * Streaming mode is entered once per gemm call (smstart) and left at its end (smstop); in between, Advanced
 * SIMD instructions are not allowed (they trap unless FEAT_SME_FA64), so the loop nest between the two runs in a
 * function compiled with target("general-regs-only"): its C is integer only, and every vector or ZA instruction
 * is in the asm statements, which leave nothing in vector registers from one statement to the next except ZA
 * (untouched by anything else: the function calls nothing). smstart and smstop zero the vector registers,
 * d8-d15 included, which AAPCS64 has the caller keep: RP_SME_CALLER_SAVES() after the call makes the compiler
 * save them in the calling function's prologue and keep nothing in them across it. */
#ifndef RP_KERNELS_ARM_SME_ARM_H
#define RP_KERNELS_ARM_SME_ARM_H

#include <stdint.h>

#define RP_SME_ASM ".arch_extension sve2\n.arch_extension sme\n"
#define RP_SME_FN static __attribute__((noinline, target("general-regs-only")))

/* the streaming vector length in 32-bit lanes (SVL / 32: 16 at SVL 512); RDSVL runs outside streaming mode */
static inline int64_t rp_sme_vl_words(void) {
    int64_t b;
    __asm__ volatile(RP_SME_ASM "rdsvl %0, #1" : "=r"(b));
    return b / 4;
}

#define RP_SME_START() __asm__ volatile(RP_SME_ASM "smstart" ::: "memory")
#define RP_SME_STOP() __asm__ volatile(RP_SME_ASM "smstop" ::: "memory")
#define RP_SME_CALLER_SAVES() \
    __asm__ volatile("" ::: "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "memory")

#endif /* RP_KERNELS_ARM_SME_ARM_H */
