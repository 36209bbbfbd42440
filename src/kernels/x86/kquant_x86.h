/* kquant_x86.h — packed Q4_K / Q6_K layouts and the Q8_K activation layout shared by the x86 K-quant kernels. */
#ifndef RP_KERNELS_X86_KQUANT_X86_H
#define RP_KERNELS_X86_KQUANT_X86_H

/* Plain C only: included by the avx2, avx512 and amx files alike, so nothing
 * here may use an intrinsic above AVX2. Every level of one weight type shares
 * one packing (row_block 16), and every kernel of one level shares one
 * activation format, so Q4_K and Q6_K weights fed by the same input (q/k/v)
 * quantize it once (rp_mm_same_act compares the function pointers). */

#include <stddef.h>
#include <stdint.h>

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
 * (the weight is q - 32). Eight spans s of 32 K, 384 bytes each:
 *
 *   +384s + 64t  ql line t (t = 0..3), K [32s+8t, 32s+8t+8):
 *                  byte 4r+c = lo4(q[r][32s+8t+c]) | lo4(q[r][32s+8t+4+c]) << 4
 *   +384s + 256 + 64h  qh line h (h = 0, 1), K [32s+16h, 32s+16h+16):
 *                  byte 4r+c = hi2(q[r][32s+16h+c])       << 0
 *                            | hi2(q[r][32s+16h+4+c])     << 2
 *                            | hi2(q[r][32s+16h+8+c])     << 4
 *                            | hi2(q[r][32s+16h+12+c])    << 6
 *   so sub-block g = 2s+h (16 K) is ql lines 2h, 2h+1 plus qh line h.
 *   +3072  sc  [16][16] int8: sc[g][r]
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

/* The AVX-512 VNNI gemm bodies (mm_q*_k_avx512.c), which the AMX kernels use
 * for small n and for activation rows left over after whole 16-row tiles.
 * Same contract as rp_mm_kernel.gemm; they need no scratch. */
void rp_q4_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch);
void rp_q6_k_gemm_avx512(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                         size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch);

#endif /* RP_KERNELS_X86_KQUANT_X86_H */
