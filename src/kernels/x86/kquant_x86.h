/* kquant_x86.h — packed Q4_K / Q6_K layouts and the Q8_K activation layout shared by the x86 K-quant kernels. */
#ifndef RP_KERNELS_X86_KQUANT_X86_H
#define RP_KERNELS_X86_KQUANT_X86_H

/* Included by the avx2, avx512 and amx files alike: plain C, except two
 * guarded sections at the end (AVX-512 helpers, the AMX driver) that only
 * files compiled for those levels see. Every level of one weight type shares
 * one packing (row_block 16), and every kernel of one level shares one
 * activation format, so Q4_K and Q6_K weights fed by the same input (q/k/v)
 * quantize it once (rp_mm_same_act compares the function pointers). */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/types.h"

/* Weight rows per packed group: one 64-byte line holds 16 rows x 4 K bytes
 * once unpacked to u8 (lane r = dword r = row r), which is a zmm for VPDPBUSD,
 * two ymm halves (rows 0-7, 8-15) for AVX2, and one row of an AMX B tile. */
#define RP_KQ_ROWS 16

/* ------------------------------------------------------------------ Q4_K
 * One group-block = 16 rows x 256 K, RP_Q4K_GB bytes, 64-byte aligned:
 *
 *   +0     qs   32 lines: line 4j+t (sub-block j = 0..7, t = 0..3) holds
 *               K [32j+8t, 32j+8t+8) of the 16 rows:
 *                 byte 4r+c = q[r][32j+8t+c] | q[r][32j+8t+4+c] << 4
 *               so (v & 0x0F) is K-quad 2t and (v >> 4) K-quad 2t+1 of
 *               sub-block j, each in VNNI order (4 K per row per dword).
 *   +2048  sc   [8][16] u8: sc[j][r], the 6-bit scale of sub-block j, row r
 *   +2176  m    [4][16][2] u8: pair p, row r = (m[r][2p], m[r][2p+1]), so a
 *               VPMOVZXBW of 32 bytes gives int16 pairs for VPDPWSSD against
 *               the activation's (s32[2p], s32[2p+1])
 *   +2304  d    [16] fp16 super-scale per row
 *   +2336  dmin [16] fp16
 *   = 2368 bytes (37 lines): 4.625 bits/weight vs GGUF's 4.5 (+2.8%).
 * Groups are consecutive, each holding its nb = cols/256 blocks in order:
 * group g, block b at (g * nb + b) * RP_Q4K_GB. Rows past `rows` are zero. */
#define RP_Q4K_GB 2368
#define RP_Q4K_OFF_SC 2048
#define RP_Q4K_OFF_M 2176
#define RP_Q4K_OFF_D 2304
#define RP_Q4K_OFF_DMIN 2336

/* ------------------------------------------------------------------ Q6_K
 * One group-block = 16 rows x 256 K, RP_Q6K_GB bytes. Values q in [0, 63]
 * (the weight is q - 32). Sub-block g (16 K) is three lines at 192g:
 *
 *   +192g + 64i  (i = 0, 1, 2), byte 4r+c:
 *                  bits 0-5 = q[r][16g + 4i + c]          (K-quad i)
 *                  bits 6-7 = bits 2i, 2i+1 of q[r][16g + 12 + c] (K-quad 3)
 *   so quads 0-2 are one AND each and quad 3 gathers three 2-bit fields
 *   (why: ggml's 4+2-bit split costs ~13 vector ops per 4 quads, this 9, and
 *   decode of Q6_K, e.g. the output matrix, is compute-bound otherwise).
 *   +3072  sc  [8][16][2] int8: pair p, row r = (sc[r][2p], sc[r][2p+1]), so a
 *              VPMOVSXBW of 32 bytes gives the int16 pairs VPDPWSSD takes
 *              against (bsum[2p], bsum[2p+1]), and shifts give each scale
 *   +3328  d   [16] fp16 per row, then 32 bytes of zero padding
 *   = 3392 bytes (53 lines): 6.625 bits/weight vs GGUF's 6.5625 (+1%). */
#define RP_Q6K_GB 3392
#define RP_Q6K_OFF_SC 3072
#define RP_Q6K_OFF_D 3328

/* ------------------------------------------------------------ activations
 * One activation row of `cols` (nb = cols/256 blocks):
 *   [nb x rp_block_q8_k]  exactly rp_quantize_row(RP_TYPE_Q8_K) bytes
 *   [nb x 8 int16]        s32[b][j] = bsums[2j] + bsums[2j+1], the sum of
 *                         sub-block j's 32 quants (|s32| <= 4064), which the
 *                         Q4_K min term multiplies by m[j].
 * Block b's quants are at row + b * 292 + 4, its d at row + b * 292. */
#define RP_Q8K_BLOCK 292
#define RP_Q8K_QS 4
#define RP_Q8K_BSUMS 260

static inline size_t rp_q8k_x86_s32_off(int64_t cols) { return (size_t)(cols / 256) * RP_Q8K_BLOCK; }

/* Shared entry points (one definition each, so kernels of one level share
 * function pointers). Packing is plain C, done once at load. */
size_t rp_q8k_x86_act_row_size(int64_t cols);            /* mm_q4_k_avx2.c */
void rp_q8k_quant_act_avx2(const float *x, void *dst, int64_t cols);   /* mm_q4_k_avx2.c */
void rp_q8k_quant_act_avx512(const float *x, void *dst, int64_t cols); /* mm_q4_k_avx512.c */

size_t rp_q4_k_x86_packed_size(int64_t rows, int64_t cols);           /* mm_q4_k_avx2.c */
void rp_q4_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1);
size_t rp_q6_k_x86_packed_size(int64_t rows, int64_t cols);           /* mm_q6_k_avx2.c */
void rp_q6_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1);
/* Q3_K rows into the Q6_K layout, exactly (q3 + 32, sc - 32; mm_q6_k_avx2.c) */
void rp_q3_k_x86_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                      int64_t g1);

/* The AVX-512 VNNI gemm bodies (mm_q*_k_avx512.c), which the AMX kernels use
 * for small n and for activation rows left over after whole 16-row tiles.
 * Same contract as rp_mm_kernel.gemm; they need no scratch. */
void rp_q4_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch);
void rp_q6_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch);

/* ---------------------------------------------------- AVX-512 helpers
 * Q6_K unpacking shared by the avx512 and amx files (guarded: AVX-512 only). */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

/* The four u8 K-quad lines (16 rows x 16 K, q in [0, 63]) of a sub-block
 * from its three packed lines (kquant_x86.h): quads 0-2 are the low 6 bits;
 * quad 3 gathers the top 2 bits of each line, each 16-bit shift's spill from
 * the neighbouring byte falling outside the bits the VPTERNLOG selects:
 * t = (l0 >> 6 : bits 0-1) | (l1 >> 4 : bits 2-7), then bits 0-3 of t and
 * 4-7 of l2 >> 2, then & 0x3F. */
static inline __attribute__((always_inline)) void rp_q6k_unpack(const uint8_t *p, __m512i q[4]) {
    const __m512i m3f = _mm512_set1_epi8(0x3F);
    const __m512i l0 = _mm512_load_si512((const void *)p);
    const __m512i l1 = _mm512_load_si512((const void *)(p + 64));
    const __m512i l2 = _mm512_load_si512((const void *)(p + 128));
    q[0] = _mm512_and_si512(l0, m3f);
    q[1] = _mm512_and_si512(l1, m3f);
    q[2] = _mm512_and_si512(l2, m3f);
    __m512i t = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 6), _mm512_srli_epi16(l1, 4), _mm512_set1_epi8(0x03), 0xE4);
    t = _mm512_ternarylogic_epi32(t, _mm512_srli_epi16(l2, 2), _mm512_set1_epi8(0x0F), 0xE4);   /* C ? A : B */
    q[3] = _mm512_and_si512(t, m3f);
}

/* (sc[r][2p], sc[r][2p+1]) as int16 pairs per lane: the VPDPWSSD operand for
 * the bsums offset; the scales themselves are its sign-extended halves. */
static inline __m512i rp_q6k_sc_pair(const uint8_t *wb, int p) {
    return _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(wb + RP_Q6K_OFF_SC + 32 * p)));
}
static inline __m512i rp_q6k_sc_even(__m512i pair) { return _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16); }
static inline __m512i rp_q6k_sc_odd(__m512i pair) { return _mm512_srai_epi32(pair, 16); }
#endif /* AVX-512 */

/* ------------------------------------------------------------------ AMX
 * Shared by mm_q4_k_amx.c and mm_q6_k_amx.c (guarded: AMX files only).
 *
 * Why "digit planes": TDPBSSD sums 64 K per tile row with no way to apply a
 * per-sub-block scale inside, and storing C tiles to rescale per 32-K (Q4_K)
 * or 16-K (Q6_K) sub-block costs far more vector work than the tile op. So
 * the scale goes into the int8 B operand exactly, split into digits small
 * enough that digit * q fits int8:
 *   Q4_K: sc (0..63) = s0 + 8 s1 with s0, s1 in 0..7; B0 = s0*q, B1 = s1*q
 *         (q in 0..15, so <= 105), and B2 = m (the min, <= 63) broadcast over
 *         its sub-block, so C2 = sum_j m_j * s32_j is the min term:
 *           y += d*da*(C0 + 8 C1) - dmin*da*C2
 *   Q6_K: x = q - 32 in -32..31, sc (int8) = e0 + 8 e1 + 64 e2 with balanced
 *         digits e in -3..4, so e*x is in -128..124; Bi = ei*x:
 *           y += d*da*(C0 + 8 C1 + 64 C2)
 * Three TDPBSSD per 64-K step instead of one-with-rescaling; C tiles hold a
 * whole 256-K block (|C0 + 8 C1| <= 256*15*127*63, |C2| <= 256*127*63;
 * Q6_K |sum| <= 256*32*128*128: all < 2^31) and are converted once per block.
 *
 * Tiles: C0..C2 = tmm0..2 (16 act rows x 16 weight rows int32), A = tmm3
 * (16 act rows x 64 K), B0..B2 = tmm4..6 (16 K-quads x 16 rows x 4 K: one
 * packed-layout line per tile row). The planes of one group x RP_KQ_AMX_KCB
 * blocks (24 KB: L1-resident) are built once into scratch and used by every
 * 16-row activation tile, whose 16 x 292-byte blocks stream from L2; the
 * chunk's partial sums are added into y.
 * Scratch: [step (64 K)][plane][1 KB tile], then 3 KB for the C stores. */
#define RP_KQ_AMX_KCB 2                      /* 256-K blocks per chunk */
#define RP_KQ_AMX_STEPS (RP_KQ_AMX_KCB * 4)  /* 64-K steps per chunk */
#define RP_KQ_AMX_PLANES ((size_t)RP_KQ_AMX_STEPS * 3 * 1024)
#define RP_KQ_AMX_SCRATCH (RP_KQ_AMX_PLANES + 3 * 1024)

/* gcc spells the macros __AMX_INT8__ / __AMX_TILE__, clang __AMXINT8__ / __AMXTILE__ */
#if (defined(__AMX_INT8__) || defined(__AMXINT8__)) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && \
    defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/x86/amx.h"

/* Reads the live tile configuration (all zero when tiles are in INIT state). */
#ifndef RP_KQ_AMX_STORE_CFG
#define RP_KQ_AMX_STORE_CFG(p) __asm__ volatile("sttilecfg %0" : "=m"(*(struct { char b[64]; } *)(p)) : : "memory")
#endif

/* Loads our tile shapes unless they are live, and returns what was live so
 * rp_kq_amx_leave can put it back. Why not rp_amx_ensure_cfg alone: its
 * per-thread cache is per translation unit (a static inside a static inline
 * function), so after another file's kernel loads other shapes, it still
 * believes ours are loaded. Comparing against STTILECFG is always right, and
 * restoring keeps other kernels' caches true as well. */
static inline int rp_kq_amx_enter(rp_amx_cfg *saved) {
    rp_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    #pragma GCC unroll 16
    for (int t = 0; t < 7; t++) rp_amx_cfg_tile(&c, t, 16, 64);
    RP_KQ_AMX_STORE_CFG(saved);
    if (memcmp(saved, &c, sizeof c) == 0) return 0;
    rp_amx_load_cfg(&c);
    return 1;
}

static inline void rp_kq_amx_leave(const rp_amx_cfg *saved, int changed) {
    if (!changed) return;
    if (saved->palette == 0) rp_amx_release();
    else rp_amx_load_cfg(saved);
}

/* Builds the three B planes of blocks [b0, b0 + nblk) of one group (group
 * data at wg) into planes[step][plane][1 KB]. */
typedef void (*rp_kq_amx_build_fn)(const uint8_t *wg, int64_t b0, int nblk, uint8_t *planes);

/* y[i][r] for the first `ntile` * 16 activation rows and weight rows [r0, r1).
 * q6 selects the combine; gb_bytes, off_d, off_dmin locate the fp16 scales. */
static inline __attribute__((always_inline)) void rp_kq_amx_gemm(const uint8_t *w, size_t gb_bytes, int64_t cols,
                                                                  const uint8_t *act, size_t stride, int64_t ntile,
                                                                  int64_t r0, int64_t r1, float *y, int64_t ldy,
                                                                  uint8_t *scratch, rp_kq_amx_build_fn build,
                                                                  const int q6, const int off_d, const int off_dmin) {
    const int64_t nb = cols / RP_QK_K;
    uint8_t *cbuf = scratch + RP_KQ_AMX_PLANES;
    const int64_t ge = (r1 + RP_KQ_ROWS - 1) / RP_KQ_ROWS;
    for (int64_t g = r0 / RP_KQ_ROWS; g < ge; g++) {
        const uint8_t *wg = w + (size_t)(g * nb) * gb_bytes;
        const int64_t rb = g * RP_KQ_ROWS;
        const int64_t cnt = r1 - rb;
        const __mmask16 km = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
        for (int64_t b0 = 0; b0 < nb; b0 += RP_KQ_AMX_KCB) {
            const int nblk = nb - b0 < RP_KQ_AMX_KCB ? (int)(nb - b0) : RP_KQ_AMX_KCB;
            build(wg, b0, nblk, scratch);
            for (int64_t it = 0; it < ntile; it++) {
                const uint8_t *at = act + (size_t)(16 * it) * stride;
                __m512 acc[16];
                #pragma GCC unroll 16
                for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
                for (int bi = 0; bi < nblk; bi++) {
                    const uint8_t *ab = at + (size_t)(b0 + bi) * RP_Q8K_BLOCK;
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    #pragma GCC unroll 4
                    for (int s = 0; s < 4; s++) {
                        const uint8_t *ps = scratch + (size_t)((4 * bi + s) * 3) * 1024;
                        _tile_loadd(3, ab + RP_Q8K_QS + 64 * s, (long)stride);
                        _tile_loadd(4, ps, 64);
                        _tile_loadd(5, ps + 1024, 64);
                        _tile_loadd(6, ps + 2048, 64);
                        _tile_dpbssd(0, 3, 4);
                        _tile_dpbssd(1, 3, 5);
                        _tile_dpbssd(2, 3, 6);
                    }
                    _tile_stored(0, cbuf, 64);
                    _tile_stored(1, cbuf + 1024, 64);
                    _tile_stored(2, cbuf + 2048, 64);
                    const uint8_t *wb = wg + (size_t)(b0 + bi) * gb_bytes;
                    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + off_d)));
                    const __m512 dm = q6 ? d : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + off_dmin)));
                    #pragma GCC unroll 16
                    for (int m = 0; m < 16; m++) {
                        float da;
                        memcpy(&da, ab + (size_t)m * stride, sizeof da);
                        const __m512 vda = _mm512_set1_ps(da);
                        const __m512i c0 = _mm512_load_si512((const void *)(cbuf + 64 * m));
                        const __m512i c1 = _mm512_load_si512((const void *)(cbuf + 1024 + 64 * m));
                        const __m512i c2 = _mm512_load_si512((const void *)(cbuf + 2048 + 64 * m));
                        __m512i t = _mm512_add_epi32(c0, _mm512_slli_epi32(c1, 3));
                        if (q6) {
                            t = _mm512_add_epi32(t, _mm512_slli_epi32(c2, 6));
                            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(d, vda), acc[m]);
                        } else {
                            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(d, vda), acc[m]);
                            acc[m] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c2), _mm512_mul_ps(dm, vda), acc[m]);
                        }
                    }
                }
                #pragma GCC unroll 16
                for (int m = 0; m < 16; m++) {
                    float *yp = y + (16 * it + m) * ldy + rb;
                    if (b0 == 0) _mm512_mask_storeu_ps(yp, km, acc[m]);
                    else _mm512_mask_storeu_ps(yp, km, _mm512_add_ps(_mm512_maskz_loadu_ps(km, yp), acc[m]));
                }
            }
        }
    }
}
#endif /* AMX */

#endif /* RP_KERNELS_X86_KQUANT_X86_H */
