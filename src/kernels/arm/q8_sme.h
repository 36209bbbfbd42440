/* q8_sme.h — the Q4_0 / Q8_0 matmul families for aarch64 SME (SMOPA into the ZA array), included once per family
 * file (mm_q4_0_sme.c with RP_Q8S_Q4 and QB 16, mm_q8_0_sme.c with QB 32), compiled with +dotprod+i8mm.
 *
 * Packed weights, row_block 64 (the paper's 16 x 64 tile at a 512-bit streaming vector length: 16 activation
 * rows x 64 weight rows, ZA's four 32-bit tiles za0..za3 side by side). A panel is 64 consecutive rows; per
 * 32-value block it holds the rows' quants as [group][row][4 bytes] (a group is 4 consecutive bytes of each
 * GGUF row: Q8_0 values 4g .. 4g + 3, g < 8; Q4_0 bytes 4g .. 4g + 3, g < 4, whose low nibbles are values
 * 4g .. and high nibbles 16 + 4g ..), then the 64 rows' scales as float32: 64 * QB + 256 bytes, the same layout
 * at every vector length. One group of one ZA tile's VL rows is then one contiguous vector of SVL bytes, SMOPA's
 * operand (4-way: ZA.S[i][j] += sum of 4 int8 products).
 *
 * Activations: quant_act makes rp_quantize_row(Q8_0)'s quants and scales (cols bytes, then one float32 scale and
 * one int32 0 per block, the layout of the other ARM families); gemm re-lays them per call, outside streaming
 * mode, into tiles of VL rows as [block][group][row][4] + VL scales in the scratch (rows past n are zero).
 *
 * Per (weight panel, activation tile, block): zero ZA, 8 SMOPA per ZA tile (Q4_0: the nibbles split and offset
 * in streaming mode, 4 loads for 8 groups), then each tile row (an activation row against VL weight rows, the
 * exact int32 block sums) is moved out, converted and added, times d_w * d_a, to a float tile in the scratch —
 * ggml's per-block integer sum as the reference, so the block scales force one pass over ZA per block (as
 * KleidiAI's qsi8d32 SME kernels do). Streaming mode is entered once per call. Fewer than SME_MIN_N activation
 * rows (decode) take the NEON SDOT-by-lane path over the same layout instead (no streaming mode). */
#ifndef RP_KERNELS_ARM_Q8_SME_H
#define RP_KERNELS_ARM_Q8_SME_H

#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/sme_arm.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#define NR 64                     /* weight rows per panel */
#define NG (QB / 4)               /* stored groups per block: 8 (Q8_0), 4 (Q4_0: two value groups per byte) */
#define WBB (NR * QB + NR * 4)    /* bytes per panel block */
#define SME_MIN_N 8

static size_t packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + NR - 1) / NR) * (size_t)(cols / 32) * WBB;
}

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    const int64_t nb = cols / 32;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = (uint8_t *)dst + (size_t)g * (size_t)nb * WBB;
        for (int64_t b = 0; b < nb; b++, o += WBB)
            for (int r = 0; r < NR; r++) {
                const int64_t row = g * NR + r;
                float d = 0.0f;
                if (row < rows) {
                    const uint8_t *rp = (const uint8_t *)src + (size_t)row * src_row_bytes;
#if defined(RP_Q8S_Q4)
                    const rp_block_q4_0 *blk = (const rp_block_q4_0 *)(const void *)rp + b;
#else
                    const rp_block_q8_0 *blk = (const rp_block_q8_0 *)(const void *)rp + b;
#endif
                    for (int gi = 0; gi < NG; gi++) memcpy(o + gi * NR * 4 + r * 4, blk->qs + 4 * gi, 4);
                    uint16_t h;
                    memcpy(&h, &blk->d, 2);
                    d = rp_fp16_to_fp32(h);
                } else {
                    for (int gi = 0; gi < NG; gi++) memset(o + gi * NR * 4 + r * 4, 0, 4);
                }
                memcpy(o + NR * QB + 4 * r, &d, 4);
            }
    }
}

static size_t act_row_size(int64_t cols) { return (size_t)cols + (size_t)(cols / 32) * 8; }

/* rp_quantize_row(Q8_0) block by block: its bytes exactly, the scale widened to float32 */
static void quant_act(const float *x, void *dst, int64_t cols) {
    const int64_t nb = cols / 32;
    uint8_t *qs = (uint8_t *)dst, *dd = qs + cols, *bias = dd + 4 * nb;
    for (int64_t b = 0; b < nb; b++) {
        rp_block_q8_0 blk;
        rp_quantize_row(RP_TYPE_Q8_0, x + 32 * b, &blk, 32);
        memcpy(qs + 32 * b, blk.qs, 32);
        uint16_t h;
        memcpy(&h, &blk.d, 2);
        const float d = rp_fp16_to_fp32(h);
        memcpy(dd + 4 * b, &d, 4);
        memset(bias + 4 * b, 0, 4);
    }
}

/* scratch: the activation tiles (at most n + 63 rows: VL <= 64) and one float tile of VL x 64 */
static size_t scratch_bytes(int64_t cols, int64_t n) {
    if (n < SME_MIN_N) return 0;
    return (size_t)(n + 63) * (size_t)(cols / 32) * 36 + 64 * NR * 4 + 64;
}

/* ---------------------------------------------------------------- decode: NEON, SDOT by lane */

#if defined(RP_Q8S_Q4)
#define Q8S_G(g)                                                                              \
    do {                                                                                      \
        const uint8x16_t raw = vld1q_u8(w + (g) * NR * 4);                                    \
        s = vdotq_laneq_s32(s, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, m4)), eight), a0, g); \
        s = vdotq_laneq_s32(s, vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight), a1, g); \
    } while (0)
#else
#define Q8S_G(g)                                                                                    \
    do {                                                                                            \
        s = vdotq_laneq_s32(s, vld1q_s8((const int8_t *)(w + (g) * NR * 4)), a0, g);                \
        s = vdotq_laneq_s32(s, vld1q_s8((const int8_t *)(w + ((g) + 4) * NR * 4)), a1, g);          \
    } while (0)
#endif

/* one activation row against one panel: y[0 .. valid) */
static void gemv_panel(const uint8_t *wp, int64_t nb, const uint8_t *a, int64_t cols, float *yo, int valid) {
#if defined(RP_Q8S_Q4)
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
#endif
    for (int h = 0; h < 2; h++) {   /* rows 32h .. 32h + 31: 8 accumulators of 4 rows */
        float32x4_t acc[8];
        for (int j = 0; j < 8; j++) acc[j] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wp + (size_t)b * WBB;
            const int8x16_t a0 = vld1q_s8((const int8_t *)(a + 32 * b)), a1 = vld1q_s8((const int8_t *)(a + 32 * b + 16));
            float da;
            memcpy(&da, a + cols + 4 * b, 4);
            _Pragma("GCC unroll 16")
            for (int j = 0; j < 8; j++) {
                const uint8_t *w = wb + (32 * h + 4 * j) * 4;
                int32x4_t s = vdupq_n_s32(0);
                Q8S_G(0);
                Q8S_G(1);
                Q8S_G(2);
                Q8S_G(3);
                const float32x4_t dw = vld1q_f32((const float *)(const void *)(wb + NR * QB + (32 * h + 4 * j) * 4));
                acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(s), vmulq_n_f32(dw, da));
            }
        }
        for (int j = 0; j < 8; j++) {
            float t[4];
            vst1q_f32(t, acc[j]);
            for (int l = 0; l < 4; l++)
                if (32 * h + 4 * j + l < valid) yo[32 * h + 4 * j + l] = t[l];
        }
    }
}
#undef Q8S_G

/* ---------------------------------------------------------------- prefill: SME */

typedef struct {
    const uint8_t *w;   /* panel p0's first block */
    const uint8_t *at;  /* activation tiles */
    float *f;           /* float tile, vl x NR */
    float *y;           /* column p0 * NR of y */
    int64_t ldy, nb, vl, n, np, rows_left;   /* np panels from p0; rows_left = r1 - p0 * NR */
} q8s_args;

/* ZA <- sum over the block's groups of act (x) weights, nt tiles of vl columns from w */
#if defined(RP_Q8S_Q4)
#define Q8S_MOPA_BODY                                                             \
    "ptrue p0.b\n"                                                                \
    "mov z7.b, #15\n"                                                             \
    "zero {za}\n"                                                                 \
    "mov x9, #4\n"                                                                \
    "1:\n"                                                                        \
    "ld1b {z0.b}, p0/z, [%[a]]\n"            /* group g */                        \
    "ld1b {z1.b}, p0/z, [%[a4]]\n"           /* group g + 4 */                    \
    "ld1b {z2.b}, p0/z, [%[w]]\n"                                                 \
    "and z3.d, z2.d, z7.d\n"                                                      \
    "lsr z4.b, z2.b, #4\n"                                                        \
    "sub z3.b, z3.b, #8\n"                                                        \
    "sub z4.b, z4.b, #8\n"                                                        \
    "smopa za0.s, p0/m, p0/m, z0.b, z3.b\n"                                       \
    "smopa za0.s, p0/m, p0/m, z1.b, z4.b\n"                                       \
    "cmp %[nt], #1\n"                                                             \
    "b.eq 2f\n"                                                                   \
    "ld1b {z2.b}, p0/z, [%[w], #1, mul vl]\n"                                     \
    "and z3.d, z2.d, z7.d\n"                                                      \
    "lsr z4.b, z2.b, #4\n"                                                        \
    "sub z3.b, z3.b, #8\n"                                                        \
    "sub z4.b, z4.b, #8\n"                                                        \
    "smopa za1.s, p0/m, p0/m, z0.b, z3.b\n"                                       \
    "smopa za1.s, p0/m, p0/m, z1.b, z4.b\n"                                       \
    "cmp %[nt], #2\n"                                                             \
    "b.eq 2f\n"                                                                   \
    "ld1b {z2.b}, p0/z, [%[w], #2, mul vl]\n"                                     \
    "and z3.d, z2.d, z7.d\n"                                                      \
    "lsr z4.b, z2.b, #4\n"                                                        \
    "sub z3.b, z3.b, #8\n"                                                        \
    "sub z4.b, z4.b, #8\n"                                                        \
    "smopa za2.s, p0/m, p0/m, z0.b, z3.b\n"                                       \
    "smopa za2.s, p0/m, p0/m, z1.b, z4.b\n"                                       \
    "ld1b {z2.b}, p0/z, [%[w], #3, mul vl]\n"                                     \
    "and z3.d, z2.d, z7.d\n"                                                      \
    "lsr z4.b, z2.b, #4\n"                                                        \
    "sub z3.b, z3.b, #8\n"                                                        \
    "sub z4.b, z4.b, #8\n"                                                        \
    "smopa za3.s, p0/m, p0/m, z0.b, z3.b\n"                                       \
    "smopa za3.s, p0/m, p0/m, z1.b, z4.b\n"                                       \
    "2:\n"                                                                        \
    "incb %[a]\n"                                                                 \
    "incb %[a4]\n"                                                                \
    "add %[w], %[w], #256\n"                                                      \
    "subs x9, x9, #1\n"                                                           \
    "b.ne 1b\n"
#else
#define Q8S_MOPA_BODY                                                             \
    "ptrue p0.b\n"                                                                \
    "zero {za}\n"                                                                 \
    "mov x9, #8\n"                                                                \
    "1:\n"                                                                        \
    "ld1b {z0.b}, p0/z, [%[a]]\n"                                                 \
    "ld1b {z1.b}, p0/z, [%[w]]\n"                                                 \
    "smopa za0.s, p0/m, p0/m, z0.b, z1.b\n"                                       \
    "cmp %[nt], #1\n"                                                             \
    "b.eq 2f\n"                                                                   \
    "ld1b {z2.b}, p0/z, [%[w], #1, mul vl]\n"                                     \
    "smopa za1.s, p0/m, p0/m, z0.b, z2.b\n"                                       \
    "cmp %[nt], #2\n"                                                             \
    "b.eq 2f\n"                                                                   \
    "ld1b {z3.b}, p0/z, [%[w], #2, mul vl]\n"                                     \
    "ld1b {z4.b}, p0/z, [%[w], #3, mul vl]\n"                                     \
    "smopa za2.s, p0/m, p0/m, z0.b, z3.b\n"                                       \
    "smopa za3.s, p0/m, p0/m, z0.b, z4.b\n"                                       \
    "2:\n"                                                                        \
    "incb %[a]\n"                                                                 \
    "add %[w], %[w], #256\n"                                                      \
    "subs x9, x9, #1\n"                                                           \
    "b.ne 1b\n"
#endif

/* f[i][0 .. nt * vl) += float(ZA tile t row i) * dw[t] * da[i], i < vl */
#define Q8S_DEQ_TILE(T, OFF)                                                      \
    "mova z0.s, p1/m, za" #T "h.s[w12, 0]\n"                                      \
    "scvtf z0.s, p1/m, z0.s\n"                                                    \
    "fmul z1.s, z" #OFF ".s, z16.s\n"                                             \
    "ld1w {z2.s}, p1/z, [%[f], #" #T ", mul vl]\n"                                \
    "fmla z2.s, p1/m, z0.s, z1.s\n"                                               \
    "st1w {z2.s}, p1, [%[f], #" #T ", mul vl]\n"

RP_SME_FN void q8s_run(const q8s_args *A) {
    const int64_t vl = A->vl, nb = A->nb, tpp = NR / vl, nt = tpp < 4 ? tpp : 4, passes = tpp / nt;
    const int64_t tiles = (A->n + vl - 1) / vl, tb = 36 * vl;   /* activation bytes per tile block */
    RP_SME_START();
    for (int64_t p = 0; p < A->np; p++) {
        const uint8_t *wp = A->w + (size_t)p * (size_t)nb * WBB;
        const int64_t cols_valid = A->rows_left - p * NR < NR ? A->rows_left - p * NR : NR;
        for (int64_t t = 0; t < tiles; t++) {
            const uint8_t *at = A->at + (size_t)t * (size_t)nb * (size_t)tb;
            const int64_t rows_valid = A->n - t * vl < vl ? A->n - t * vl : vl;
            {   /* zero the float tile (NR vectors of vl floats) */
                float *f = A->f;
                int64_t cnt = NR;
                __asm__ volatile(RP_SME_ASM
                                 "ptrue p1.s\n"
                                 "mov z0.s, #0\n"
                                 "1:\n"
                                 "st1w {z0.s}, p1, [%[f]]\n"
                                 "incb %[f]\n"
                                 "subs %[c], %[c], #1\n"
                                 "b.ne 1b\n"
                                 : [f] "+r"(f), [c] "+r"(cnt)
                                 :
                                 : "memory", "cc");
            }
            for (int64_t pass = 0; pass < passes; pass++) {
                const int64_t c0 = pass * nt * vl;   /* first weight row (of the panel) of this pass */
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *wb = wp + (size_t)b * WBB;
                    const uint8_t *ab = at + (size_t)b * (size_t)tb;
                    {
                        const uint8_t *a = ab, *w = wb + c0 * 4;
#if defined(RP_Q8S_Q4)
                        const uint8_t *a4 = ab + 4 * 4 * vl;
                        __asm__ volatile(RP_SME_ASM Q8S_MOPA_BODY
                                         : [a] "+r"(a), [a4] "+r"(a4), [w] "+r"(w)
                                         : [nt] "r"(nt)
                                         : "x9", "memory", "cc");
#else
                        __asm__ volatile(RP_SME_ASM Q8S_MOPA_BODY
                                         : [a] "+r"(a), [w] "+r"(w)
                                         : [nt] "r"(nt)
                                         : "x9", "memory", "cc");
#endif
                    }
                    {
                        float *f = A->f + c0;
                        const uint8_t *dw = wb + NR * QB + c0 * 4, *da = ab + 32 * vl;
                        int64_t i = vl;
                        __asm__ volatile(RP_SME_ASM
                                         "ptrue p1.s\n"
                                         "mov w12, #0\n"
                                         "ld1w {z8.s}, p1/z, [%[dw]]\n"
                                         "cmp %[nt], #1\n"
                                         "b.eq 1f\n"
                                         "ld1w {z9.s}, p1/z, [%[dw], #1, mul vl]\n"
                                         "cmp %[nt], #2\n"
                                         "b.eq 1f\n"
                                         "ld1w {z10.s}, p1/z, [%[dw], #2, mul vl]\n"
                                         "ld1w {z11.s}, p1/z, [%[dw], #3, mul vl]\n"
                                         "1:\n"
                                         "ld1rw {z16.s}, p1/z, [%[da]]\n"
                                         Q8S_DEQ_TILE(0, 8)
                                         "cmp %[nt], #1\n"
                                         "b.eq 2f\n"
                                         Q8S_DEQ_TILE(1, 9)
                                         "cmp %[nt], #2\n"
                                         "b.eq 2f\n"
                                         Q8S_DEQ_TILE(2, 10)
                                         Q8S_DEQ_TILE(3, 11)
                                         "2:\n"
                                         "add %[da], %[da], #4\n"
                                         "add %[f], %[f], #256\n"   /* NR floats */
                                         "add w12, w12, #1\n"
                                         "subs %[i], %[i], #1\n"
                                         "b.ne 1b\n"
                                         : [f] "+r"(f), [da] "+r"(da), [i] "+r"(i)
                                         : [dw] "r"(dw), [nt] "r"(nt)
                                         : "x12", "memory", "cc");
                    }
                }
            }
            for (int64_t i = 0; i < rows_valid; i++) {   /* the float tile -> y, cols_valid columns */
                const float *f = A->f + i * NR;
                float *yo = A->y + (t * vl + i) * A->ldy + p * NR;
                int64_t c = 0;
                __asm__ volatile(RP_SME_ASM
                                 "1:\n"
                                 "whilelt p2.s, %[c], %[cv]\n"
                                 "b.none 2f\n"
                                 "ld1w {z0.s}, p2/z, [%[f], %[c], lsl #2]\n"
                                 "st1w {z0.s}, p2, [%[y], %[c], lsl #2]\n"
                                 "incw %[c]\n"
                                 "b 1b\n"
                                 "2:\n"
                                 : [c] "+r"(c)
                                 : [f] "r"(f), [y] "r"(yo), [cv] "r"(cols_valid)
                                 : "memory", "cc");
            }
        }
    }
    RP_SME_STOP();
}

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t nb = cols / 32, p0 = r0 / NR, np = (r1 - p0 * NR + NR - 1) / NR;
    const uint8_t *a = (const uint8_t *)act;
    if (n < SME_MIN_N) {
        for (int64_t p = p0; p < p0 + np; p++) {
            const int valid = r1 - p * NR < NR ? (int)(r1 - p * NR) : NR;
            for (int64_t i = 0; i < n; i++)
                gemv_panel((const uint8_t *)w + (size_t)p * (size_t)nb * WBB, nb, a + (size_t)i * act_stride, cols,
                           y + i * ldy + p * NR, valid);
        }
        return;
    }
    const int64_t vl = rp_sme_vl_words(), tiles = (n + vl - 1) / vl, tb = 36 * vl;
    uint8_t *at = (uint8_t *)scratch;
    for (int64_t t = 0; t < tiles; t++)
        for (int64_t i = 0; i < vl; i++) {
            const int64_t row = t * vl + i;
            const uint8_t *ar = a + (size_t)row * act_stride;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *o = at + (size_t)(t * nb + b) * (size_t)tb;
                if (row < n) {
                    for (int g = 0; g < 8; g++) memcpy(o + g * vl * 4 + i * 4, ar + 32 * b + 4 * g, 4);
                    memcpy(o + 32 * vl + 4 * i, ar + cols + 4 * b, 4);
                } else {
                    for (int g = 0; g < 8; g++) memset(o + g * vl * 4 + i * 4, 0, 4);
                    memset(o + 32 * vl + 4 * i, 0, 4);
                }
            }
        }
    const size_t fo = ((size_t)tiles * (size_t)nb * (size_t)tb + 63) & ~(size_t)63;
    const q8s_args A = {(const uint8_t *)w + (size_t)p0 * (size_t)nb * WBB, at, (float *)(void *)(at + fo), y + p0 * NR,
                        ldy, nb, vl, n, np, r1 - p0 * NR};
    q8s_run(&A);
    RP_SME_CALLER_SAVES();
}

#endif /* RP_KERNELS_ARM_Q8_SME_H */
