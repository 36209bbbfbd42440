/* mm_f32_sme.c — F32-weight matmul for aarch64 SME: FMOPA outer products accumulated over all of k in the ZA
 * array (no per-block scale, so ZA holds the whole sum and is read once per tile).
 *
 * Packed weights, row_block 64: a panel is 64 consecutive rows stored k-major, [k][64] float32 (rows past the
 * matrix zero), so at every k one ZA tile's VL weight rows are one contiguous vector: at a 512-bit streaming
 * vector length the 16 x 64 tile of the paper, za0..za3 side by side (VL 4 / 8 take 4 / 2 passes of 4 tiles,
 * VL 32 / 64 use 2 / 1 tiles). Activations are float rows (act_type F32), re-laid per call, outside streaming
 * mode, into tiles of VL rows transposed ([k][VL], rows past n zero) in the scratch. Per (panel, activation
 * tile, pass): zero ZA, one FMOPA per k and tile (ZA.S[i][j] += a[i] * w[j], fused, in k order, as a scalar FMA
 * loop), then each ZA row is stored to y under a predicate of the valid columns. Streaming mode is entered once
 * per call (kernels/arm/sme_arm.h). Fewer than 8 activation rows (decode) take a NEON FMA path over the same
 * layout (16 accumulators per panel, one broadcast activation value per k). */
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm/sme_arm.h"
#include "kernels/kernels.h"

#define NR 64
#define SME_MIN_N 8

static size_t packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + NR - 1) / NR) * (size_t)cols * NR * sizeof(float);
}

static void pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
        float *o = (float *)dst + (size_t)g * (size_t)cols * NR;
        for (int r = 0; r < NR; r++) {
            const int64_t row = g * NR + r;
            const float *s = row < rows ? (const float *)(const void *)((const uint8_t *)src + (size_t)row * src_row_bytes)
                                        : NULL;
            for (int64_t k = 0; k < cols; k++) o[k * NR + r] = s ? s[k] : 0.0f;
        }
    }
}

static size_t act_row_size(int64_t cols) { return (size_t)cols * sizeof(float); }
static void act_copy(const float *x, void *dst, int64_t cols) { memcpy(dst, x, (size_t)cols * sizeof(float)); }
static size_t scratch_bytes(int64_t cols, int64_t n) {
    return n < SME_MIN_N ? 0 : (size_t)(n + 63) * (size_t)cols * sizeof(float);
}

/* one activation row against one panel (NEON): y[0 .. valid) */
static void gemv_panel(const float *wp, const float *x, int64_t cols, float *yo, int valid) {
    float32x4_t acc[16];
    for (int c = 0; c < 16; c++) acc[c] = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < cols; k++, wp += NR) {
        const float xk = x[k];
        _Pragma("GCC unroll 16")
        for (int c = 0; c < 16; c++) acc[c] = vfmaq_n_f32(acc[c], vld1q_f32(wp + 4 * c), xk);
    }
    float t[NR];
    for (int c = 0; c < 16; c++) vst1q_f32(t + 4 * c, acc[c]);
    memcpy(yo, t, (size_t)valid * sizeof(float));
}

typedef struct {
    const float *w;   /* panel p0 */
    const float *at;  /* activation tiles, [tile][k][vl] */
    float *y;         /* column p0 * NR of y */
    int64_t ldy, cols, vl, n, np, rows_left;
} f32s_args;

/* row i (w12) of ZA tile T -> y row at %[y], columns c0 + T * vl .., those below cv */
#define F32S_ST(T)                                                                \
    "mov x10, #" #T "\n"                                                          \
    "mul x10, x10, %[vl]\n"                                                       \
    "add x10, x10, %[c0]\n"                                                       \
    "whilelt p2.s, x10, %[cv]\n"                                                  \
    "mova z0.s, p0/m, za" #T "h.s[w12, 0]\n"                                      \
    "st1w {z0.s}, p2, [%[y], x10, lsl #2]\n"

RP_SME_FN void f32s_run(const f32s_args *A) {
    const int64_t vl = A->vl, cols = A->cols, tpp = NR / vl, nt = tpp < 4 ? tpp : 4, passes = tpp / nt;
    const int64_t tiles = (A->n + vl - 1) / vl;
    RP_SME_START();
    for (int64_t p = 0; p < A->np; p++) {
        const float *wp = A->w + (size_t)p * (size_t)cols * NR;
        const int64_t cv = A->rows_left - p * NR < NR ? A->rows_left - p * NR : NR;
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t rows_valid = A->n - t * vl < vl ? A->n - t * vl : vl;
            for (int64_t pass = 0; pass < passes; pass++) {
                const int64_t c0 = pass * nt * vl;
                {
                    const float *a = A->at + (size_t)t * (size_t)cols * (size_t)vl, *w = wp + c0;
                    int64_t k = cols;
                    __asm__ volatile(RP_SME_ASM
                                     "ptrue p0.s\n"
                                     "zero {za}\n"
                                     "1:\n"
                                     "ld1w {z0.s}, p0/z, [%[a]]\n"
                                     "ld1w {z1.s}, p0/z, [%[w]]\n"
                                     "fmopa za0.s, p0/m, p0/m, z0.s, z1.s\n"
                                     "cmp %[nt], #1\n"
                                     "b.eq 2f\n"
                                     "ld1w {z2.s}, p0/z, [%[w], #1, mul vl]\n"
                                     "fmopa za1.s, p0/m, p0/m, z0.s, z2.s\n"
                                     "cmp %[nt], #2\n"
                                     "b.eq 2f\n"
                                     "ld1w {z3.s}, p0/z, [%[w], #2, mul vl]\n"
                                     "ld1w {z4.s}, p0/z, [%[w], #3, mul vl]\n"
                                     "fmopa za2.s, p0/m, p0/m, z0.s, z3.s\n"
                                     "fmopa za3.s, p0/m, p0/m, z0.s, z4.s\n"
                                     "2:\n"
                                     "incb %[a]\n"
                                     "add %[w], %[w], #256\n"   /* NR floats */
                                     "subs %[k], %[k], #1\n"
                                     "b.ne 1b\n"
                                     : [a] "+r"(a), [w] "+r"(w), [k] "+r"(k)
                                     : [nt] "r"(nt)
                                     : "memory", "cc");
                }
                for (int64_t i = 0; i < rows_valid; i++) {
                    float *yo = A->y + (t * vl + i) * A->ldy + p * NR;
                    __asm__ volatile(RP_SME_ASM
                                     "ptrue p0.s\n"
                                     "mov w12, %w[i]\n"
                                     F32S_ST(0)
                                     "cmp %[nt], #1\n"
                                     "b.eq 1f\n"
                                     F32S_ST(1)
                                     "cmp %[nt], #2\n"
                                     "b.eq 1f\n"
                                     F32S_ST(2)
                                     F32S_ST(3)
                                     "1:\n"
                                     :
                                     : [i] "r"(i), [y] "r"(yo), [vl] "r"(vl), [c0] "r"(c0), [cv] "r"(cv), [nt] "r"(nt)
                                     : "x10", "x12", "memory", "cc");
                }
            }
        }
    }
    RP_SME_STOP();
}

static void gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act, size_t act_stride,
                 int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t p0 = r0 / NR, np = (r1 - p0 * NR + NR - 1) / NR;
    const float *wf = (const float *)w;
    if (n < SME_MIN_N) {
        for (int64_t p = p0; p < p0 + np; p++) {
            const int valid = r1 - p * NR < NR ? (int)(r1 - p * NR) : NR;
            for (int64_t i = 0; i < n; i++)
                gemv_panel(wf + (size_t)p * (size_t)cols * NR,
                           (const float *)(const void *)((const uint8_t *)act + (size_t)i * act_stride), cols,
                           y + i * ldy + p * NR, valid);
        }
        return;
    }
    const int64_t vl = rp_sme_vl_words(), tiles = (n + vl - 1) / vl;
    float *at = (float *)scratch;
    for (int64_t t = 0; t < tiles; t++) {
        float *o = at + (size_t)t * (size_t)cols * (size_t)vl;
        for (int64_t i = 0; i < vl; i++) {
            const int64_t row = t * vl + i;
            const float *x = (const float *)(const void *)((const uint8_t *)act + (size_t)row * act_stride);
            for (int64_t k = 0; k < cols; k++) o[k * vl + i] = row < n ? x[k] : 0.0f;
        }
    }
    const f32s_args A = {wf + (size_t)p0 * (size_t)cols * NR, at, y + p0 * NR, ldy, cols, vl, n, np, r1 - p0 * NR};
    f32s_run(&A);
    RP_SME_CALLER_SAVES();
}

const rp_mm_kernel rp_mm_f32_sme = {
    .name = "f32/sme",
    .wtype = RP_TYPE_F32,
    .level = RP_CPU_SME,
    .act_type = RP_TYPE_F32,
    .row_block = NR,
    .packed_size = packed_size,
    .pack = pack,
    .act_row_size = act_row_size,
    .quant_act = act_copy,
    .scratch_bytes = scratch_bytes,
    .gemm = gemm,
};
