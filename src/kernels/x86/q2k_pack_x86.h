/* q2k_pack_x86.h — the packed Q2_K layout (16-row groups) shared by mm_q2_k_avx2.c and mm_q2_k_avx512.c, and its packing. */
#ifndef RP_KERNELS_X86_Q2K_PACK_X86_H
#define RP_KERNELS_X86_Q2K_PACK_X86_H

#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/x86/kquant_x86.h"

/* ------------------------------------------------------------------ pack
 * Q2_K: value = d * sc[j] * q - dmin * m[j], q 2-bit, sc and m 4-bit per
 * 16 K (sub-block j = 0..15), fp16 d and dmin per 256 K. One group-block =
 * 16 rows x 256 K:
 *   +0     qs  16 lines, line j (64 bytes) = sub-block j: byte 4r+c, bits
 *              2t..2t+1 = q[r][16j+4t+c] (K-quad t, VNNI order)
 *   +1024  sc  [16][16] u8: GGUF's scale byte (sc | m << 4) of sub-block j,
 *              row r
 *   +1280  d   [16] fp16 per row
 *   +1312  dmin [16] fp16 per row
 *   = 1344 bytes (21 lines): 2.625 bits/weight, the same as GGUF's 84-byte
 *   blocks. Exact: the same integers and fp16 scales, reordered. */
#define RP_Q2K_GB 1344
#define RP_Q2K_OFF_SC 1024
#define RP_Q2K_OFF_D 1280
#define RP_Q2K_OFF_DMIN 1312

static inline size_t rp_q2k_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + RP_KQ_ROWS - 1) / RP_KQ_ROWS) * (size_t)(cols / RP_QK_K) * RP_Q2K_GB;
}

/* GGUF Q2_K rows -> group-blocks. Scalar: once at load, in parallel over groups. */
static inline void rp_q2k_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst,
                               int64_t g0, int64_t g1) {
    const int64_t nb = cols / RP_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * RP_Q2K_GB;
            memset(o, 0, RP_Q2K_GB);
            for (int r = 0; r < RP_KQ_ROWS; r++) {
                const int64_t R = g * RP_KQ_ROWS + r;
                if (R >= rows) break;
                const rp_block_q2_k *blk =
                    (const rp_block_q2_k *)((const uint8_t *)src + (size_t)R * src_row_bytes) + b;
                for (int j = 0; j < 16; j++) {
                    o[RP_Q2K_OFF_SC + 16 * j + r] = blk->scales[j];
                    for (int t = 0; t < 4; t++)
                        for (int c = 0; c < 4; c++) {
                            /* ggml's element order (dequantize_row_q2_K) */
                            const int e = 16 * j + 4 * t + c;
                            const int q = (blk->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                            o[64 * j + 4 * r + c] |= (uint8_t)(q << (2 * t));
                        }
                }
                memcpy(o + RP_Q2K_OFF_D + 2 * r, &blk->d, 2);
                memcpy(o + RP_Q2K_OFF_DMIN + 2 * r, &blk->dmin, 2);
            }
        }
    }
}

#endif /* RP_KERNELS_X86_Q2K_PACK_X86_H */
