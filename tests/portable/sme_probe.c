/* sme_probe.c — does this (emulated) CPU compute SME's 4-way SMOPA as the architecture defines it?
 * scripts/arm_test.sh runs it under qemu-aarch64 -cpu max before the SME kernel tests: Debian 12's qemu 7.2 gets
 * the 32-bit-accumulator SMOPA wrong (only the "diagonal" row pairs, written to even rows: ZA[2r][2c] =
 * a[2r].b[2c], ZA[2r][2c + 1] = a[2r + 1].b[2c + 1], odd rows zero), which would fail every SME int8 kernel for
 * the emulator's fault; qemu 10 (Debian 13) computes it right. Exit 0: correct; 1: wrong (prints the first
 * difference); 77: no SME here. Built only for aarch64 (inline SME assembly, as in src/kernels/arm/sme_arm.h). */
#include <stdint.h>
#include <stdio.h>
#include <sys/auxv.h>

#define SME_ASM ".arch_extension sve2\n.arch_extension sme\n"

/* ZA0.S = a (x) b over one 4-way group, rows read back with ST1W; general-regs-only: no NEON in streaming mode */
static __attribute__((noinline, target("general-regs-only"))) void outer(const int8_t *a, const int8_t *b, int32_t *za,
                                                                       int64_t vl) {
    __asm__ volatile(SME_ASM "smstart" ::: "memory");
    __asm__ volatile(SME_ASM
                     "ptrue p0.b\n"
                     "zero {za}\n"
                     "ld1b {z0.b}, p0/z, [%[a]]\n"
                     "ld1b {z1.b}, p0/z, [%[b]]\n"
                     "smopa za0.s, p0/m, p0/m, z0.b, z1.b\n"
                     :
                     : [a] "r"(a), [b] "r"(b)
                     : "memory");
    for (int64_t i = 0; i < vl; i++) {
        int32_t *o = za + i * vl;
        __asm__ volatile(SME_ASM "ptrue p1.s\n mov w12, %w[i]\n st1w {za0h.s[w12, 0]}, p1, [%[o]]\n"
                         :
                         : [i] "r"(i), [o] "r"(o)
                         : "x12", "memory");
    }
    __asm__ volatile(SME_ASM "smstop" ::: "memory");
    __asm__ volatile("" ::: "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "memory");
}

int main(void) {
    if (!(getauxval(AT_HWCAP2) & (1UL << 23))) {
        printf("sme_probe: no SME on this CPU\n");
        return 77;
    }
    int64_t bytes;
    __asm__ volatile(SME_ASM "rdsvl %0, #1" : "=r"(bytes));
    const int64_t vl = bytes / 4;
    static int8_t a[256], b[256];
    static int32_t za[64 * 64];
    if (vl > 64) return 77;
    for (int i = 0; i < 4 * vl; i++) {
        a[i] = (int8_t)(i % 7 - 3 + i / 4);
        b[i] = (int8_t)(i % 5 - 2);
    }
    outer(a, b, za, vl);
    for (int64_t i = 0; i < vl; i++)
        for (int64_t j = 0; j < vl; j++) {
            int32_t want = 0;
            for (int k = 0; k < 4; k++) want += a[4 * i + k] * b[4 * j + k];
            if (za[i * vl + j] != want) {
                printf("sme_probe: SMOPA wrong at SVL %lld bits: ZA[%lld][%lld] = %d, want %d\n", (long long)(bytes * 8),
                       (long long)i, (long long)j, za[i * vl + j], want);
                return 1;
            }
        }
    printf("sme_probe: SMOPA correct at SVL %lld bits\n", (long long)(bytes * 8));
    return 0;
}
