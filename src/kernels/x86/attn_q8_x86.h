/* attn_q8_x86.h — the int8 decode QK of the attention template on x86: Q8_0 query x Q8_0 K block dot products
 * (AVX-512 VNNI vpdpbusd, AVX2 maddubs), included by kernels/float_tmpl.h through FX_QK8. */
#ifndef RP_KERNELS_X86_ATTN_Q8_X86_H
#define RP_KERNELS_X86_ATTN_Q8_X86_H

/* A block of NQA query vectors x NCA cells (NQC = NQA * NCA (query, cell)
 * pairs): every (pair, piece) of K is one integer vector of partial sums,
 * 16 (AVX-512) or 8 (AVX2) of them; one integer reduction tree (the integer
 * form of fx_reduce) turns them into the block sums of every (pair, block),
 * exact in int32; only then are they converted to float and multiplied by
 * d_q * d_k * scale (the scale lanes built once per tile and query block:
 * Zq, and per cell block from Kn by one permute), and the blocks of a pair
 * added in float. The same products as rp_vec_dot_ref(RP_TYPE_Q8_0) up to
 * the order of the float additions over blocks. Cells past tn repeat cell
 * tn - 1 (their scores are masked by the softmax). */

#if FX_W == 16
/* ---------------------------------------------------------------- AVX-512 VNNI
 * A piece is a block pair (64 bytes, one zmm: the two blocks' 32 quants side
 * by side), P = D / 64 pieces per head, NQC = 16 / P pairs. vpdpbusd takes
 * K unsigned (k ^ 0x80 = k + 128) and q signed: each int32 lane sums 4
 * products, seeded with Qc = -128 x the sum of its 4 q bytes, so the lane is
 * exactly the signed sum. Input vector i = p * NQC + pair. */
RP_FX_INLINE __m512i fx_ri_pair(__m512i x, __m512i y) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
RP_FX_INLINE __m512i fx_ri_quad(__m512i a, __m512i b) {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x44)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xEE)));
}

RP_FX_INLINE void fx_qk8_run(const fx_actx *x, int32_t qv0, const uint8_t *kb, int64_t ks, int tn, const int NQA,
                             const int P) {
    const int NQC = 16 / P, NCA = NQC / NQA, nb = 2 * P, D = x->D;
    /* lane l of (e0, e1) after the integer tree: input i = (l / 16) * 8 +
     * (l % 16 / 8) * 4 + l % 4, half h = l / 4 % 2 (block 2p + h) */
    float zq[32];
    int32_t ki[32];
    for (int l = 0; l < 32; l++) {
        const int i = (l / 16) * 8 + (l % 16 / 8) * 4 + l % 4, h = l / 4 % 2;
        const int p = i / NQC, q = i % NQC / NCA, c = i % NCA, b = 2 * p + h;
        zq[l] = x->Qd[(size_t)(qv0 + q) * (size_t)nb + (size_t)b] * x->a->scale;
        ki[l] = c * nb + b;
    }
    const __m512 zq0 = _mm512_loadu_ps(zq), zq1 = _mm512_loadu_ps(zq + 16);
    const __m512i ki0 = _mm512_loadu_si512(ki), ki1 = _mm512_loadu_si512(ki + 16);
    const int8_t *qi[4];
    const int32_t *qc[4];
    FX_FOR(q, 4, NQA) {
        qi[q] = x->Qi + (size_t)(qv0 + q) * (size_t)D;
        qc[q] = x->Qc + (size_t)(qv0 + q) * (size_t)(D / 4);
    }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    float *S = x->S + (size_t)qv0 * RP_FX_AT;
    for (int t0 = 0; t0 < tn; t0 += NCA) {
        __m512i acc[16];
        FX_FOR(c, 16, NCA) {
            const int t = t0 + c < tn ? t0 + c : tn - 1;
            const rp_block_q8_0 *b = (const rp_block_q8_0 *)(const void *)(kb + (int64_t)t * ks);
            FX_FOR(p, 4, P) {
                const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)b[2 * p].qs);
                const __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)b[2 * p + 1].qs);
                const __m512i k = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
                FX_FOR(q, 4, NQA) {
                    const __m512i qq = _mm512_loadu_si512((const void *)(qi[q] + p * 64));
                    const __m512i cc = _mm512_loadu_si512((const void *)(qc[q] + p * 16));
                    acc[p * NQC + q * NCA + c] = _mm512_dpbusd_epi32(cc, k, qq);
                }
            }
        }
        const __m512i u0 = fx_ri_quad(fx_ri_pair(acc[0], acc[1]), fx_ri_pair(acc[2], acc[3]));
        const __m512i u1 = fx_ri_quad(fx_ri_pair(acc[4], acc[5]), fx_ri_pair(acc[6], acc[7]));
        const __m512i u2 = fx_ri_quad(fx_ri_pair(acc[8], acc[9]), fx_ri_pair(acc[10], acc[11]));
        const __m512i u3 = fx_ri_quad(fx_ri_pair(acc[12], acc[13]), fx_ri_pair(acc[14], acc[15]));
        /* u[m], 128-bit lane L: lane L's sums of inputs 4m..4m+3; L0+L1 is the first block of the pair */
        const __m512i e0 = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xDD));
        const __m512i e1 = _mm512_add_epi32(_mm512_shuffle_i32x4(u2, u3, 0x88), _mm512_shuffle_i32x4(u2, u3, 0xDD));
        const float *kd = x->Kn + (size_t)t0 * (size_t)nb;   /* NCA cells x nb scales = 32 / NQA <= 32 */
        const __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16);
        const __m512 f0 = _mm512_mul_ps(_mm512_cvtepi32_ps(e0),
                                        _mm512_mul_ps(zq0, _mm512_permutex2var_ps(k0, ki0, k1)));
        const __m512 f1 = _mm512_mul_ps(_mm512_cvtepi32_ps(e1),
                                        _mm512_mul_ps(zq1, _mm512_permutex2var_ps(k0, ki1, k1)));
        /* lane i: input i (both blocks of its pair), then the pieces of a pair added */
        __m512 f = _mm512_add_ps(_mm512_shuffle_f32x4(f0, f1, 0x88), _mm512_shuffle_f32x4(f0, f1, 0xDD));
        if (P >= 2) f = _mm512_add_ps(f, _mm512_shuffle_f32x4(f, f, 0x4E));
        if (P >= 4) f = _mm512_add_ps(f, _mm512_shuffle_f32x4(f, f, 0xB1));
        /* lanes q * NCA + c -> S[q][t0 + c] (t0 + c < RP_FX_AT) */
        FX_FOR(q, 4, NQA)
            _mm512_mask_storeu_ps(S + q * RP_FX_AT + t0 - q * NCA, (__mmask16)(((1u << NCA) - 1u) << (q * NCA)), f);
    }
}
typedef void (*fx_qk8_fn)(const fx_actx *x, int32_t qv, const uint8_t *kb, int64_t ks, int tn);
#define RP_FX_QK8(NQA, P)                                                                                  \
    RP_FX_NOINLINE void fx_qk8_##NQA##_##P(const fx_actx *x, int32_t qv, const uint8_t *kb, int64_t ks, int tn) { \
        fx_qk8_run(x, qv, kb, ks, tn, NQA, P);                                                             \
    }
#define RP_FX_QK8P(P) RP_FX_QK8(4, P) RP_FX_QK8(2, P) RP_FX_QK8(1, P)
RP_FX_QK8P(1)
RP_FX_QK8P(2)
RP_FX_QK8P(4)
#undef RP_FX_QK8P
#undef RP_FX_QK8
/* [P = 1, 2, 4][4, 2, 1 query vectors] */
static const fx_qk8_fn fx_qk8_tab[3][3] = {
    {fx_qk8_4_1, fx_qk8_2_1, fx_qk8_1_1}, {fx_qk8_4_2, fx_qk8_2_2, fx_qk8_1_2}, {fx_qk8_4_4, fx_qk8_2_4, fx_qk8_1_4}};
static int fx_qk8_ok(int32_t D) { return D == 64 || D == 128 || D == 256; }
static void fx_qk8_blocks(const fx_actx *x, const uint8_t *kb, int64_t ks, int tn) {
    const fx_qk8_fn *t = fx_qk8_tab[x->D == 64 ? 0 : x->D == 128 ? 1 : 2];
    int32_t qv = 0;
    for (; qv + 4 <= x->NQ; qv += 4) t[0](x, qv, kb, ks, tn);
    for (; qv + 2 <= x->NQ; qv += 2) t[1](x, qv, kb, ks, tn);
    for (; qv < x->NQ; qv++) t[2](x, qv, kb, ks, tn);
}

#else
/* ---------------------------------------------------------------- AVX2
 * A piece is one block (32 bytes, one ymm), nb = D / 32 pieces per head,
 * NQC = 8 / nb pairs. The sign trick: maddubs(|k|, sign(q, k)) = pairs of
 * q * k in int16 (|q| <= 127, |k| <= 128: no saturation), madd with ones
 * gives 8 int32 lanes of 4 products. Input vector i = b * NQC + pair. */
RP_FX_INLINE __m256i fx_ri_reduce(const __m256i v[8]) {   /* lane j = sum of the lanes of v[j] */
    const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i k0 = _mm256_hadd_epi32(h0, h1), k1 = _mm256_hadd_epi32(h2, h3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(k0, k1, 0x20), _mm256_permute2x128_si256(k0, k1, 0x31));
}

RP_FX_INLINE void fx_qk8_run(const fx_actx *x, int32_t qv0, const uint8_t *kb, int64_t ks, int tn, const int NQA,
                             const int NB) {
    const int NQC = 8 / NB, NCA = NQC / NQA, D = x->D;
    float zq[8];
    int32_t ki[8];
    for (int l = 0; l < 8; l++) {
        const int b = l / NQC, q = l % NQC / NCA, c = l % NCA;
        zq[l] = x->Qd[(size_t)(qv0 + q) * (size_t)NB + (size_t)b] * x->a->scale;
        ki[l] = c * NB + b;
    }
    const __m256 zqv = _mm256_loadu_ps(zq);
    const __m256i kiv = _mm256_loadu_si256((const __m256i *)(const void *)ki);
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *qi[4];
    FX_FOR(q, 4, NQA) qi[q] = x->Qi + (size_t)(qv0 + q) * (size_t)D;
    float *S = x->S + (size_t)qv0 * RP_FX_AT;
    for (int t0 = 0; t0 < tn; t0 += NCA) {
        __m256i acc[8];
        FX_FOR(c, 8, NCA) {
            const int t = t0 + c < tn ? t0 + c : tn - 1;
            const rp_block_q8_0 *blk = (const rp_block_q8_0 *)(const void *)(kb + (int64_t)t * ks);
            FX_FOR(b, 8, NB) {
                const __m256i k = _mm256_loadu_si256((const __m256i *)(const void *)blk[b].qs);
                const __m256i ka = _mm256_abs_epi8(k);
                FX_FOR(q, 4, NQA) {
                    const __m256i qq = _mm256_loadu_si256((const __m256i *)(const void *)(qi[q] + b * 32));
                    acc[b * NQC + q * NCA + c] =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(ka, _mm256_sign_epi8(qq, k)), ones);
                }
            }
        }
        const __m256i r = fx_ri_reduce(acc);
        /* NCA cells x NB scales <= 8 floats from t0 (Kn holds 64 x Dp floats) */
        const __m256 kd = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x->Kn + (size_t)t0 * (size_t)NB), kiv);
        float f[8];
        _mm256_storeu_ps(f, _mm256_mul_ps(_mm256_cvtepi32_ps(r), _mm256_mul_ps(zqv, kd)));
        FX_FOR(q, 4, NQA) FX_FOR(c, 8, NCA) {
            float s = f[q * NCA + c];
            for (int b = 1; b < NB; b++) s += f[b * NQC + q * NCA + c];
            S[q * RP_FX_AT + t0 + c] = s;
        }
    }
}
typedef void (*fx_qk8_fn)(const fx_actx *x, int32_t qv, const uint8_t *kb, int64_t ks, int tn);
#define RP_FX_QK8(NQA, NB)                                                                                   \
    RP_FX_NOINLINE void fx_qk8_##NQA##_##NB(const fx_actx *x, int32_t qv, const uint8_t *kb, int64_t ks, int tn) { \
        fx_qk8_run(x, qv, kb, ks, tn, NQA, NB);                                                              \
    }
RP_FX_QK8(4, 1) RP_FX_QK8(2, 1) RP_FX_QK8(1, 1)
RP_FX_QK8(4, 2) RP_FX_QK8(2, 2) RP_FX_QK8(1, 2)
RP_FX_QK8(2, 4) RP_FX_QK8(1, 4)
RP_FX_QK8(1, 8)
#undef RP_FX_QK8
/* [NB = 1, 2, 4, 8][4, 2, 1 query vectors]; NULL: more query vectors than pairs */
static const fx_qk8_fn fx_qk8_tab[4][3] = {{fx_qk8_4_1, fx_qk8_2_1, fx_qk8_1_1},
                                           {fx_qk8_4_2, fx_qk8_2_2, fx_qk8_1_2},
                                           {NULL, fx_qk8_2_4, fx_qk8_1_4},
                                           {NULL, NULL, fx_qk8_1_8}};
static int fx_qk8_ok(int32_t D) { return D == 32 || D == 64 || D == 128 || D == 256; }
static void fx_qk8_blocks(const fx_actx *x, const uint8_t *kb, int64_t ks, int tn) {
    const fx_qk8_fn *t = fx_qk8_tab[x->D == 32 ? 0 : x->D == 64 ? 1 : x->D == 128 ? 2 : 3];
    int32_t qv = 0;
    if (t[0])
        for (; qv + 4 <= x->NQ; qv += 4) t[0](x, qv, kb, ks, tn);
    if (t[1])
        for (; qv + 2 <= x->NQ; qv += 2) t[1](x, qv, kb, ks, tn);
    for (; qv < x->NQ; qv++) t[2](x, qv, kb, ks, tn);
}
#endif

#endif /* RP_KERNELS_X86_ATTN_Q8_X86_H */
