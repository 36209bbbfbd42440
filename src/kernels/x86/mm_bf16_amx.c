/* mm_bf16_amx.c — BF16-weight matmul on AMX tiles (TDPBF16PS), F32 activations split into three BF16 planes so the result keeps F32 accuracy. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/amx.h"

/* Layouts
 * -------
 * Weights, row_block 32: group g = rows [32g, 32g + 32), K padded with zeros
 * to Kp = cols rounded up to 32. Per 32-column chunk kc the group holds two
 * 1 KiB B tiles (rows 0-15 and 16-31 of the group), in VNNI pair order:
 *     tile[kk][n][j] = W[32g + 16h + n][32kc + 2kk + j]   (kk < 16, n < 16, j < 2)
 * i.e. 16 tile rows of 64 bytes, at byte (g * nkc + kc) * 2048 + h * 1024.
 * Rows past `rows` are zero.
 *
 * Activations (act_type BF16), one row of 6 * Kp bytes: three BF16 planes
 * hi[Kp], mid[Kp], lo[Kp] with hi = bf16(x), mid = bf16(x - hi), lo =
 * bf16(x - hi - mid) (round-to-nearest-even; every difference is exact in
 * F32). Each step keeps 8 more significant bits, so |x - hi - mid - lo| <=
 * 2^-24 |x|: the three products W.hi + W.mid + W.lo reproduce the reference
 * (exact BF16 weights times F32 activations) to F32 accumulation error, where
 * rounding x to one BF16 would give ~3 significant digits (2^-9 relative) and
 * a hi + lo pair 2^-16. Each BF16 x BF16 product is exact in F32 and the
 * tiles accumulate in F32. The hardware flushes denormal inputs and results:
 * pieces below 2^-126 (activations under ~1e-33) lose their low bits, which
 * the scalar model (below) does not reproduce. Columns past `cols` are 0.
 *
 * Tiles: C 0-3 (2 activation blocks of 16 rows x 2 weight tiles of 16 rows),
 * A 4-5 (activation blocks), B 6-7 (weight tiles). Per 32-column chunk: load
 * B0 B1, then for each plane (hi, mid, lo) the two A tiles and 4 TDPBF16PS
 * (12 per chunk: still several times the AVX-512 FMA rate). A final
 * activation block of m < 16 rows uses a tile configuration with m-row A and
 * C tiles (rp_amx_ensure_cfg reloads only when the shape changes).
 *
 * The same gemm is also built over a scalar model of the tile instructions'
 * documented semantics and exported as rp_mm_bf16_amx_emu (AVX512 level, not
 * in the registry): tests run it on machines without AMX, so the layouts,
 * tile shapes and edge handling are checked everywhere. */

#define AMX_RB 32
#define AMX_KC 32 /* bf16 columns per tile row (64 bytes) */

static inline int64_t amx_kp(int64_t cols) { return (cols + AMX_KC - 1) / AMX_KC * AMX_KC; }

/* ---- scalar model of the tile unit (per thread, like the real state) ---- */
typedef struct { uint8_t b[16][64]; } emu_tile;
static _Thread_local emu_tile emu_t[8];
static _Thread_local rp_amx_cfg emu_cfg;

static void emu_set_cfg(const rp_amx_cfg *c) {
    emu_cfg = *c;
    memset(emu_t, 0, sizeof emu_t);   /* LDTILECFG zeroes the tiles */
}
static void emu_load(int t, const void *p, size_t stride) {
    for (int r = 0; r < emu_cfg.rows[t]; r++) memcpy(emu_t[t].b[r], (const uint8_t *)p + (size_t)r * stride, emu_cfg.colsb[t]);
}
static void emu_store(int t, void *p, size_t stride) {
    for (int r = 0; r < emu_cfg.rows[t]; r++) memcpy((uint8_t *)p + (size_t)r * stride, emu_t[t].b[r], emu_cfg.colsb[t]);
}
static void emu_zero(int t) { memset(&emu_t[t], 0, sizeof emu_t[t]); }
static float emu_bf(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return rp_bf16_to_fp32(h);
}
/* TDPBF16PS: C[m][n] += sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] */
static void emu_dp(int c, int a, int b) {
    for (int m = 0; m < emu_cfg.rows[c]; m++)
        for (int n = 0; n < emu_cfg.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, emu_t[c].b[m] + 4 * n, 4);
            for (int k = 0; k < emu_cfg.colsb[a] / 4; k++) {
                acc += emu_bf(emu_t[a].b[m] + 4 * k) * emu_bf(emu_t[b].b[k] + 4 * n);
                acc += emu_bf(emu_t[a].b[m] + 4 * k + 2) * emu_bf(emu_t[b].b[k] + 4 * n + 2);
            }
            memcpy(emu_t[c].b[m] + 4 * n, &acc, 4);
        }
}

/* Tile operations of the gemm template: `emu` is a constant in each of its
 * two instantiations, so only one side is compiled into each. Tile numbers
 * are literals (the instructions encode them). */
#define T_LOAD(t, p, s)                                     \
    do {                                                    \
        if (emu) emu_load(t, p, s);                         \
        else _tile_loadd(t, p, (long)(s));                  \
    } while (0)
#define T_STORE(t, p, s)                                    \
    do {                                                    \
        if (emu) emu_store(t, p, s);                        \
        else _tile_stored(t, p, (long)(s));                 \
    } while (0)
#define T_ZERO(t)                                           \
    do {                                                    \
        if (emu) emu_zero(t);                               \
        else _tile_zero(t);                                 \
    } while (0)
#define T_DP(c, a, b)                                       \
    do {                                                    \
        if (emu) emu_dp(c, a, b);                           \
        else _tile_dpbf16ps(c, a, b);                       \
    } while (0)

static size_t amx_packed_size(int64_t rows, int64_t cols) {
    const int64_t groups = (rows + AMX_RB - 1) / AMX_RB;
    return (size_t)groups * (size_t)(amx_kp(cols) / AMX_KC) * 2048;
}

static void amx_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                     int64_t g1) {
    const int64_t nkc = amx_kp(cols) / AMX_KC;
    for (int64_t g = g0; g < g1; g++) {
        uint16_t *pg = (uint16_t *)dst + (size_t)g * (size_t)nkc * 1024;
        for (int h = 0; h < 2; h++)
            for (int n = 0; n < 16; n++) {
                const int64_t r = g * AMX_RB + h * 16 + n;
                const uint16_t *s = r < rows ? (const uint16_t *)((const uint8_t *)src + (size_t)r * src_row_bytes) : NULL;
                /* element k of this row: chunk k/32, tile row (k%32)/2, pair slot k%2 */
                for (int64_t kc = 0; kc < nkc; kc++) {
                    uint16_t *t = pg + (size_t)kc * 1024 + (size_t)h * 512 + (size_t)n * 2;
                    for (int kk = 0; kk < 32; kk++) {
                        const int64_t k = kc * AMX_KC + kk;
                        t[(kk / 2) * 32 + (kk % 2)] = (s && k < cols) ? s[k] : 0;
                    }
                }
            }
    }
}

static size_t amx_act_size(int64_t cols) { return (size_t)amx_kp(cols) * 6; }

#if defined(__AVX512F__)
/* bf16(v) for 16 lanes as 32-bit words (value in the top half), round to
 * nearest even; non-finite lanes keep their top half (NaNs made quiet). */
static inline __m512i amx_bf16_rne(__m512i u) {
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000), top = _mm512_set1_epi32((int)0xffff0000u);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_and_si512(r, top);
    const __mmask16 fin = _mm512_cmpneq_epi32_mask(_mm512_and_si512(u, exp_mask), exp_mask);
    const __mmask16 nan = _mm512_mask_test_epi32_mask((__mmask16)~fin, u, _mm512_set1_epi32(0x007fffff));
    r = _mm512_mask_blend_epi32(fin, _mm512_and_si512(u, top), r);
    return _mm512_mask_or_epi32(r, nan, r, _mm512_set1_epi32(0x00400000));
}
static inline __mmask16 amx_finite(__m512i u) {
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
    return _mm512_cmpneq_epi32_mask(_mm512_and_si512(u, exp_mask), exp_mask);
}
#endif

/* x -> (hi, mid, lo) BF16 planes as rp_fp32_to_bf16 rounds; where x or a
 * rounded piece is not finite (hi can round up to infinity) the later pieces
 * are 0. */
static void amx_quant_act(const float *x, void *dst, int64_t cols) {
    const int64_t kp = amx_kp(cols);
    uint16_t *hi = dst, *mid = hi + kp, *lo = mid + kp;
    int64_t k = 0;
#if defined(__AVX512F__)
    for (; k + 16 <= cols; k += 16) {
        const __m512 v = _mm512_loadu_ps(x + k);
        const __m512i h = amx_bf16_rne(_mm512_castps_si512(v));
        const __mmask16 f1 = amx_finite(_mm512_castps_si512(v)) & amx_finite(h);
        const __m512 r1 = _mm512_maskz_sub_ps(f1, v, _mm512_castsi512_ps(h));
        const __m512i m = amx_bf16_rne(_mm512_castps_si512(r1));
        const __m512 r2 = _mm512_maskz_sub_ps(f1, r1, _mm512_castsi512_ps(m));
        const __m512i l = amx_bf16_rne(_mm512_castps_si512(r2));
        _mm256_storeu_si256((__m256i *)(hi + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
        _mm256_storeu_si256((__m256i *)(mid + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(m, 16)));
        _mm256_storeu_si256((__m256i *)(lo + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(l, 16)));
    }
#endif
    for (; k < cols; k++) {
        const uint16_t h = rp_fp32_to_bf16(x[k]);
        const float hf = rp_bf16_to_fp32(h);
        hi[k] = h;
        mid[k] = lo[k] = 0;
        if (isfinite(x[k]) && isfinite(hf)) {
            const float r1 = x[k] - hf;
            mid[k] = rp_fp32_to_bf16(r1);
            lo[k] = rp_fp32_to_bf16(r1 - rp_bf16_to_fp32(mid[k]));
        }
    }
    for (; k < kp; k++) hi[k] = mid[k] = lo[k] = 0;
}

static size_t amx_scratch(int64_t cols, int64_t n) {
    (void)cols; (void)n;
    return 16 * 16 * sizeof(float) + 64;
}

/* Tiles 0..3 = C[mi][h] (mi: activation block, h: weight tile), 4/5 = A[mi],
 * 6/7 = B[h]; m0/m1 rows in the two activation blocks (m1 may be 0). */
static void amx_config(int m0, int m1, int emu) {
    rp_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int m1r = m1 > 0 ? m1 : 1;
    rp_amx_cfg_tile(&c, 0, m0, 64);
    rp_amx_cfg_tile(&c, 1, m0, 64);
    rp_amx_cfg_tile(&c, 2, m1r, 64);
    rp_amx_cfg_tile(&c, 3, m1r, 64);
    rp_amx_cfg_tile(&c, 4, m0, 64);
    rp_amx_cfg_tile(&c, 5, m1r, 64);
    rp_amx_cfg_tile(&c, 6, 16, 64);
    rp_amx_cfg_tile(&c, 7, 16, 64);
    if (emu) emu_set_cfg(&c);
    else rp_amx_ensure_cfg(&c);
}

/* Writes C tile `t` (m rows) to y rows [0, m), columns [0, nv) of this
 * weight tile: straight from the tile when all 16 columns are ours, else via
 * the scratch buffer. */
#define AMX_STORE_C(t, m, nv, yp)                                                       \
    do {                                                                                \
        if ((nv) >= 16) {                                                               \
            T_STORE(t, (yp), (size_t)ldy * sizeof(float));                              \
        } else if ((nv) > 0) {                                                          \
            T_STORE(t, buf, 64);                                                        \
            for (int r_ = 0; r_ < (m); r_++)                                            \
                memcpy((yp) + (int64_t)r_ * ldy, buf + 16 * r_, sizeof(float) * (size_t)(nv)); \
        }                                                                               \
    } while (0)

static inline __attribute__((always_inline)) void amx_gemm_t(const void *w, int64_t cols, const void *act,
                                                               size_t act_stride, int64_t n, int64_t r0, int64_t r1,
                                                               float *y, int64_t ldy, void *scratch, const int emu) {
    const int64_t kp = amx_kp(cols), nkc = kp / AMX_KC;
    const int64_t g0 = r0 / AMX_RB, g1 = (r1 + AMX_RB - 1) / AMX_RB;
    float *buf = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const uint8_t *wb = w, *ab = act;
    for (int64_t i0 = 0; i0 < n; i0 += 32) {
        const int mr = (int)(n - i0 < 32 ? n - i0 : 32);
        const int m0 = mr < 16 ? mr : 16, m1 = mr - m0;
        amx_config(m0, m1, emu);
        const uint8_t *a0 = ab + (size_t)i0 * act_stride, *a1 = m1 > 0 ? a0 + 16 * act_stride : a0;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *wg = wb + (size_t)g * (size_t)nkc * 2048;
            T_ZERO(0);
            T_ZERO(1);
            T_ZERO(2);
            T_ZERO(3);
            for (int64_t kc = 0; kc < nkc; kc++) {
                T_LOAD(6, wg + kc * 2048, 64);
                T_LOAD(7, wg + kc * 2048 + 1024, 64);
                for (int pl = 0; pl < 3; pl++) {   /* hi, mid, lo planes, Kp * 2 bytes apart */
                    const size_t ao = (size_t)pl * (size_t)kp * 2 + (size_t)kc * 64;
                    T_LOAD(4, a0 + ao, act_stride);
                    T_DP(0, 4, 6);
                    T_DP(1, 4, 7);
                    if (m1 > 0) {
                        T_LOAD(5, a1 + ao, act_stride);
                        T_DP(2, 5, 6);
                        T_DP(3, 5, 7);
                    }
                }
            }
            const int64_t rb = g * AMX_RB;
            const int nv0 = (int)(r1 - rb < 16 ? r1 - rb : 16);
            const int nv1 = (int)(r1 - rb - 16 < 16 ? r1 - rb - 16 : 16);
            float *y0 = y + i0 * ldy + rb, *y1 = y0 + 16 * ldy;
            AMX_STORE_C(0, m0, nv0, y0);
            AMX_STORE_C(1, m0, nv1, y0 + 16);
            if (m1 > 0) {
                AMX_STORE_C(2, m1, nv0, y1);
                AMX_STORE_C(3, m1, nv1, y1 + 16);
            }
        }
    }
}

static void amx_gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                     size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    amx_gemm_t(w, cols, act, act_stride, n, r0, r1, y, ldy, scratch, 0);
}

static void amx_gemm_emu(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch) {
    (void)w_row_bytes; (void)rows;
    amx_gemm_t(w, cols, act, act_stride, n, r0, r1, y, ldy, scratch, 1);
}

const rp_mm_kernel rp_mm_bf16_amx = {
    .name = "bf16/amx",
    .wtype = RP_TYPE_BF16,
    .level = RP_CPU_AMX,
    .act_type = RP_TYPE_BF16,
    .row_block = AMX_RB,
    .packed_size = amx_packed_size,
    .pack = amx_pack,
    .act_row_size = amx_act_size,
    .quant_act = amx_quant_act,
    .scratch_bytes = amx_scratch,
    .gemm = amx_gemm,
};

/* The scalar tile model (tests only; see the top of the file). */
const rp_mm_kernel rp_mm_bf16_amx_emu = {
    .name = "bf16/amx-emu",
    .wtype = RP_TYPE_BF16,
    .level = RP_CPU_AVX512,
    .act_type = RP_TYPE_BF16,
    .row_block = AMX_RB,
    .packed_size = amx_packed_size,
    .pack = amx_pack,
    .act_row_size = amx_act_size,
    .quant_act = amx_quant_act,
    .scratch_bytes = amx_scratch,
    .gemm = amx_gemm_emu,
};
