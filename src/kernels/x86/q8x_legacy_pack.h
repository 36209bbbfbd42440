/* q8x_legacy_pack.h — packing of Q4_1, Q5_0, Q5_1 and IQ4_NL rows into the Q4_0 packed layout of q8_0_x86.h (plus a min array and a fifth-bit plane). */
#ifndef RP_KERNELS_X86_Q8X_LEGACY_PACK_H
#define RP_KERNELS_X86_Q8X_LEGACY_PACK_H

/* Included after q8_0_x86.h by the packed AVX2 / AVX-512 kernels of these
 * types (mm_legacy_avx2.c, mm_legacy_avx512.c). Every layout is exact (the
 * integer quants and fp16 scales of the GGUF block, reordered) and as large
 * as the GGUF row:
 *
 *   IQ4_NL  the Q4_0 layout as is (same 18-byte block, same nibble order):
 *           codes, decoded by the kernel through the 16-entry codebook.
 *           18 bytes / 32 weights = 4.5 bits/weight (file: 4.5).
 *   Q4_1    Q4_0's nibble chunks (qb = 16) and a second fp16 array per
 *           super-block, the RB mins m after the RB scales d (ns = 2).
 *           20 bytes / 32 = 5.0 bits/weight (file: 5.0).
 *   Q5_0    per block RB*16 nibble bytes as Q4_0 then an RB*4-byte plane of
 *           fifth bits (qb = 20): plane byte 4r+i, bit s = bit 4 of row r's
 *           element 4s+i, which is K step s of the nibble chunks (step s < 4:
 *           low nibbles of chunk s, s >= 4: high nibbles of chunk s - 4).
 *           22 bytes / 32 = 5.5 bits/weight (file: 5.5).
 *   Q5_1    Q5_0's quants (qb = 20) and Q4_1's two fp16 arrays (ns = 2).
 *           24 bytes / 32 = 6.0 bits/weight (file: 6.0).
 *
 * Block sizes of 20 or 24 bytes per row keep every block's quants aligned
 * to the vector width (RB * qb is a multiple of 32 for RB = 8 and of 64 for
 * RB = 16), as the super-blocks are (32 * qb + 64 * ns). */

static inline void rp_q8x_pack_legacy(const int K, const void *src, size_t src_row_bytes, int64_t rows, int64_t cols,
                                      void *dst, int64_t g0, int64_t g1, int rb) {
    const int qb = RP_Q8X_KIND_QB(K), ns = RP_Q8X_KIND_NS(K);
    /* GGUF block: d at 0, m at 2 (Q4_1, Q5_1), qh (Q5_*), then qs[16] */
    const size_t bsz = K == RP_Q8X_Q4_1 ? 20 : K == RP_Q8X_Q5_0 ? 22 : K == RP_Q8X_Q5_1 ? 24 : 18;
    const size_t oqh = K == RP_Q8X_Q5_0 ? 2 : 4;
    const size_t oqs = K == RP_Q8X_Q4_1 ? 4 : K == RP_Q8X_Q5_0 ? 6 : K == RP_Q8X_Q5_1 ? 8 : 2;
    const int64_t nb = cols / 32;
    const size_t gb = rp_q8x_group_bytes_ns(cols, rb, qb, ns);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *out = (uint8_t *)dst + (size_t)g * gb;
        const int nr = rows - g * rb < rb ? (int)(rows - g * rb) : rb;
        if (nr < rb || nb % (32 / rb)) memset(out, 0, gb);   /* padded rows or blocks */
        const uint8_t *in = (const uint8_t *)src + (size_t)(g * rb) * src_row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = out + rp_q8x_qoff_ns(b, rb, qb, ns);
            uint8_t *od = out + rp_q8x_doff_ns(b, rb, qb, ns);
            for (int r = 0; r < nr; r++) {
                const uint8_t *bl = in + (size_t)r * src_row_bytes + (size_t)b * bsz;
                for (int c = 0; c < 4; c++) memcpy(o + (size_t)(c * rb + r) * 4, bl + oqs + 4 * c, 4);
                memcpy(od + 2 * r, bl, 2);
                if (ns == 2) memcpy(od + 64 + 2 * r, bl + 2, 2);
                if (K == RP_Q8X_Q5_0 || K == RP_Q8X_Q5_1) {
                    uint32_t qh;
                    memcpy(&qh, bl + oqh, 4);
                    uint8_t pl[4] = {0, 0, 0, 0};
                    for (int s = 0; s < 8; s++)
                        for (int i = 0; i < 4; i++) pl[i] |= (uint8_t)(((qh >> (4 * s + i)) & 1u) << s);
                    memcpy(o + (size_t)rb * 16 + 4 * (size_t)r, pl, 4);
                }
            }
        }
    }
}

#endif /* RP_KERNELS_X86_Q8X_LEGACY_PACK_H */
