/* float_tmpl.h — the F32/F16/BF16 matmul, attention and element-wise templates over a float vector layer
 * (fx_v of FX_W lanes and the fx_* functions), shared by the architectures: included at the end of
 * kernels/x86/float_x86.h (AVX2, AVX-512) and kernels/arm/float_arm.h (NEON). Everything here is static, so each
 * including translation unit gets its own copy at its own width. Besides arithmetic, the layer provides loads and
 * stores (masked: fx_loadn / fx_storen), F16 conversions, fx_exp, fx_transpose / fx_reduce, fx_load_bf16x2 (the
 * two F32 vectors of a BF16 column pair), fx_load_i8 (FX_W int8 as floats), fx_h2f and fx_prefetch. */
#ifndef RP_KERNELS_FLOAT_TMPL_H
#define RP_KERNELS_FLOAT_TMPL_H



/* ===================================================================== matmul
 * Packed layout (row_block RP_FX_RB = 2 * FX_W rows per group): group g holds
 * rows [g*RB, (g+1)*RB) column-interleaved, cols x RB elements: for column k
 * the RB weights of the group's rows are contiguous, so one (F32/F16) or two
 * vector loads give the weights of every row of the group for that k, and
 * y[i][rows] = sum_k x[i][k] * w[k][rows] is a chain of broadcast-FMAs with no
 * horizontal sums. Rows past `rows` are zero. Group g starts at element
 * g * cols * RB (64-byte aligned for AVX-512 F16/BF16: 64 bytes per column).
 *   F32, F16: element (k, j) at k*RB + j (j = row in the group).
 *   BF16: the RB halves of column k form FX_W 32-bit lanes; lane j carries
 *     row j in its low half and row j + FX_W in its high half, so `x << 16`
 *     and `x & 0xffff0000` are the two exact F32 vectors (no shuffles).
 * Activations are F32 rows (act_type F32, copied by quant_act; for F16 weights rounded to F16 first, as ggml's
 * vec_dot_type is).
 * ===================================================================== */
#if defined(RP_FX_MM_WT)

#define RP_FX_RB (2 * FX_W)
#if RP_FX_MM_WT == 0
typedef float rp_fx_welem;
#else
typedef uint16_t rp_fx_welem;
#endif

/* GEMM register block: NR activation rows x 2 weight vectors (RB rows) of
 * accumulators: 12 x 2 = 24 of 32 zmm registers, 6 x 2 = 12 of 16 ymm. */
#if FX_W == 16
#define RP_FX_NR 12
#else
#define RP_FX_NR 6
#endif
/* Columns per k-block when n > 1: a packed block of NR activation rows (NR *
 * KC floats = 24 KiB) stays in L1 while the weight panels stream past it; y
 * carries the partial sums between k-blocks. */
#define RP_FX_KC 512

static size_t rp_fx_mm_packed_size(int64_t rows, int64_t cols) {
    int64_t groups = (rows + RP_FX_RB - 1) / RP_FX_RB;
    return (size_t)groups * (size_t)cols * RP_FX_RB * sizeof(rp_fx_welem);
}

/* Position of row j of a group within one column's RB elements. */
static inline int rp_fx_slot(int j) {
#if RP_FX_MM_WT == 2
    return j < FX_W ? 2 * j : 2 * (j - FX_W) + 1;
#else
    return j;
#endif
}

static void rp_fx_mm_pack(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                          int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
        rp_fx_welem *pg = (rp_fx_welem *)dst + (size_t)g * (size_t)cols * RP_FX_RB;
        /* 64 columns at a time: the destination block (64 x RB elements,
         * <= 8 KiB) stays in L1 while each source row is read sequentially */
        for (int64_t kb = 0; kb < cols; kb += 64) {
            const int64_t ke = kb + 64 < cols ? kb + 64 : cols;
            for (int j = 0; j < RP_FX_RB; j++) {
                const int64_t r = g * RP_FX_RB + j;
                rp_fx_welem *d = pg + rp_fx_slot(j);
                if (r < rows) {
                    const rp_fx_welem *s = (const rp_fx_welem *)((const uint8_t *)src + (size_t)r * src_row_bytes);
                    for (int64_t k = kb; k < ke; k++) d[k * RP_FX_RB] = s[k];
                } else {
                    for (int64_t k = kb; k < ke; k++) d[k * RP_FX_RB] = 0;
                }
            }
        }
    }
}

static size_t rp_fx_mm_act_size(int64_t cols) { return (size_t)cols * sizeof(float); }
/* F16 weights: the activations rounded to F16, as ggml's vec_dot_type for F16 is (so F16 files give llama.cpp's
 * logits; BF16 weights keep exact F32 activations, as the AMX kernel's three BF16 planes do) */
static void rp_fx_mm_act_copy(const float *x, void *dst, int64_t cols) {
#if RP_FX_MM_WT == 1
    rp_round_row(RP_TYPE_F16, x, (float *)dst, cols);
#else
    memcpy(dst, x, (size_t)cols * sizeof(float));
#endif
}

/* The two weight vectors (rows j < FX_W and j >= FX_W) of column k of a panel. */
RP_FX_INLINE void rp_fx_wload(const rp_fx_welem *p, int64_t k, fx_v *w0, fx_v *w1) {
    p += k * RP_FX_RB;
#if RP_FX_MM_WT == 0
    *w0 = fx_load(p);
    *w1 = fx_load(p + FX_W);
#elif RP_FX_MM_WT == 1
    *w0 = fx_load_f16(p);
    *w1 = fx_load_f16(p + FX_W);
#else
    fx_load_bf16x2(p, w0, w1);
#endif
}

/* y[i][0..nv) (+)= sum_{k in [k0,k1)} x[i][k] * panel[k][0..nv) for i < NR,
 * nv <= RB valid rows of the group. Activation (i, k) is x[(k - k0) * xk + i]
 * (a packed block: xk = NR; one row read in place: xk = 1). S independent
 * accumulator sets over alternating k hide the FMA latency when NR is small
 * (S * NR * 2 vectors). first: start from 0, else from the partial sums in y. */
RP_FX_INLINE void rp_fx_mm_tile(const rp_fx_welem *panel, int64_t k0, int64_t k1, const float *x, int64_t xk,
                                float *y, int64_t ldy, int nv, int first, const int NR, const int S) {
    fx_v c0[4][RP_FX_NR], c1[4][RP_FX_NR];
    const int n0 = nv < FX_W ? nv : FX_W, n1 = nv - n0;
    FX_FOR(s, 4, S) {
        FX_FOR(i, RP_FX_NR, NR) {
            if (first || s > 0) {
                c0[s][i] = fx_zero();
                c1[s][i] = fx_zero();
            } else if (nv == RP_FX_RB) {
                c0[s][i] = fx_load(y + i * ldy);
                c1[s][i] = fx_load(y + i * ldy + FX_W);
            } else {
                c0[s][i] = fx_loadn(y + i * ldy, n0);
                c1[s][i] = fx_loadn(y + i * ldy + FX_W, n1);
            }
        }
    }
    int64_t k = k0;
    x -= k0 * xk;   /* activation (i, k) at x[k * xk + i] */
    for (; k + S <= k1; k += S) {
        FX_FOR(s, 4, S) {
            fx_v w0, w1;
            rp_fx_wload(panel, k + s, &w0, &w1);
            FX_FOR(i, RP_FX_NR, NR) {
                const fx_v b = fx_set1(x[(k + s) * xk + i]);
                c0[s][i] = fx_fma(w0, b, c0[s][i]);
                c1[s][i] = fx_fma(w1, b, c1[s][i]);
            }
        }
    }
    for (; k < k1; k++) {
        fx_v w0, w1;
        rp_fx_wload(panel, k, &w0, &w1);
        FX_FOR(i, RP_FX_NR, NR) {
            const fx_v b = fx_set1(x[k * xk + i]);
            c0[0][i] = fx_fma(w0, b, c0[0][i]);
            c1[0][i] = fx_fma(w1, b, c1[0][i]);
        }
    }
    FX_FOR(i, RP_FX_NR, NR) {
        fx_v a0 = c0[0][i], a1 = c1[0][i];
        FX_FOR(s, 4, S) {
            if (s == 0) continue;
            a0 = fx_add(a0, c0[s][i]);
            a1 = fx_add(a1, c1[s][i]);
        }
        if (nv == RP_FX_RB) {
            fx_store(y + i * ldy, a0);
            fx_store(y + i * ldy + FX_W, a1);
        } else {
            fx_storen(y + i * ldy, a0, n0);
            fx_storen(y + i * ldy + FX_W, a1, n1);
        }
    }
}

/* One instantiation per row count: NR is a constant inside each, so the
 * accumulator arrays live in registers. GEMV (one row, memory-bound) gets
 * four accumulator sets; every block of a GEMM gets one, whatever its row
 * count, so a row's sums are added in the same order whichever block of
 * whichever batch it falls in (prefix reuse stays exact: a prompt's new rows
 * equal the same rows of a full prefill bit for bit). */
static void rp_fx_mm_tile_n(int nr, const rp_fx_welem *panel, int64_t k0, int64_t k1, const float *x, int64_t xk,
                            float *y, int64_t ldy, int nv, int first) {
#define RP_FX_T(N, S) rp_fx_mm_tile(panel, k0, k1, x, xk, y, ldy, nv, first, N, S); break
    switch (nr) {
    case 0: RP_FX_T(1, 4);   /* GEMV */
    case 1: RP_FX_T(1, 1);
    case 2: RP_FX_T(2, 1);
    case 3: RP_FX_T(3, 1);
#if FX_W == 16
    case 4: RP_FX_T(4, 1);
    case 5: RP_FX_T(5, 1);
    case 6: RP_FX_T(6, 1);
    case 7: RP_FX_T(7, 1);
    case 8: RP_FX_T(8, 1);
    case 9: RP_FX_T(9, 1);
    case 10: RP_FX_T(10, 1);
    case 11: RP_FX_T(11, 1);
    case 12: RP_FX_T(12, 1);
#else
    case 4: RP_FX_T(4, 1);
    case 5: RP_FX_T(5, 1);
    case 6: RP_FX_T(6, 1);
#endif
    default: break;
    }
#undef RP_FX_T
}

/* Scratch: the activations of one k-block, packed per block of NR rows as
 * [k][NR] (one pointer walks them; rows act_stride apart would often share
 * L1 sets: 8 KiB strides put all 12 in one set). */
static size_t rp_fx_mm_scratch(int64_t cols, int64_t n) {
    /* any call with up to n rows: a few rows (<= NR) pack whole rows, more
     * pack KC columns of every row (rounded up to NR) */
    const int64_t few = (n < RP_FX_NR ? n : RP_FX_NR) * cols;
    const int64_t many = n <= RP_FX_NR ? 0 : (n + RP_FX_NR - 1) / RP_FX_NR * RP_FX_NR * (cols < RP_FX_KC ? cols : RP_FX_KC);
    return (size_t)(few > many ? few : many) * sizeof(float) + 64;
}

/* d[k * nr + i] = x[i * xs + k] for i < nr, k < kn. Full blocks go through
 * in-register transposes of W rows (NR real + zero rows) x W columns; each
 * transposed vector is one k's NR values (its extra lanes are overwritten by
 * the next k, the last one is stored masked). */
static void rp_fx_pack_act(const float *x, int64_t xs, int64_t kn, int nr, float *d) {
    int64_t k = 0;
    if (nr == RP_FX_NR) {
        for (; k + FX_W <= kn; k += FX_W) {
            fx_v r[FX_W];
            FX_UNROLL(16)
            for (int c = 0; c < FX_W; c++) r[c] = c < RP_FX_NR ? fx_load(x + c * xs + k) : fx_zero();
            fx_transpose(r);
            FX_UNROLL(16)
            for (int j = 0; j < FX_W; j++) {
                if (k + j + 1 < kn) fx_store(d + (k + j) * RP_FX_NR, r[j]);
                else fx_storen(d + (k + j) * RP_FX_NR, r[j], RP_FX_NR);
            }
        }
    }
    for (; k < kn; k++)
        for (int i = 0; i < nr; i++) d[k * nr + i] = x[i * xs + k];
}

static void rp_fx_mm_gemm(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                          size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy,
                          void *scratch) {
    (void)w_row_bytes; (void)rows;
    const int64_t g0 = r0 / RP_FX_RB, g1 = (r1 + RP_FX_RB - 1) / RP_FX_RB;
    const int64_t xs = (int64_t)(act_stride / sizeof(float));
    const float *x = act;
    if (n == 1) {
        /* GEMV: each weight read once, in storage order; memory-bound */
        for (int64_t g = g0; g < g1; g++) {
            const int64_t rb = g * RP_FX_RB;
            const int nv = (int)(r1 - rb < RP_FX_RB ? r1 - rb : RP_FX_RB);
            rp_fx_mm_tile_n(0, (const rp_fx_welem *)w + (size_t)g * (size_t)cols * RP_FX_RB, 0, cols, x, 1, y + rb,
                            ldy, nv, 1);
        }
        return;
    }
    /* A few rows (n <= NR, memory-bound): one k-block, so each weight is
     * read once in storage order. Otherwise BLIS order: per k-block (KC
     * columns) the activations are packed once; then a block of groups whose
     * k-slices (<= 256 KiB) stay in L2 while every block of NR packed
     * activation rows (in L1) passes over them. */
    float *xp = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int64_t kc = n <= RP_FX_NR ? cols : RP_FX_KC;
    int64_t gbn = (int64_t)(256 * 1024 / (RP_FX_KC * RP_FX_RB * sizeof(rp_fx_welem)));
    if (gbn < 1 || n <= RP_FX_NR) gbn = 1;
    for (int64_t kb = 0; kb < cols; kb += kc) {
        const int64_t ke = kb + kc < cols ? kb + kc : cols, kn = ke - kb;
        for (int64_t i0 = 0; i0 < n; i0 += RP_FX_NR) {
            const int nr = (int)(n - i0 < RP_FX_NR ? n - i0 : RP_FX_NR);
            rp_fx_pack_act(x + i0 * xs + kb, xs, kn, nr, xp + i0 * kn);
        }
        for (int64_t gb = g0; gb < g1; gb += gbn) {
            const int64_t ge = gb + gbn < g1 ? gb + gbn : g1;
            for (int64_t i0 = 0; i0 < n; i0 += RP_FX_NR) {
                const int nr = (int)(n - i0 < RP_FX_NR ? n - i0 : RP_FX_NR);
                for (int64_t g = gb; g < ge; g++) {
                    const int64_t rb = g * RP_FX_RB;
                    const int nv = (int)(r1 - rb < RP_FX_RB ? r1 - rb : RP_FX_RB);
                    const rp_fx_welem *panel = (const rp_fx_welem *)w + (size_t)g * (size_t)cols * RP_FX_RB;
                    rp_fx_mm_tile_n(nr, panel, kb, ke, xp + i0 * kn, nr, y + i0 * ldy + rb, ldy, nv, kb == 0);
                }
            }
        }
    }
}

#endif /* RP_FX_MM_WT */

/* ================================================================== attention
 * Flash-style attention for one run of query rows x the G query heads of one
 * KV head. The cells [0, max n_cells) are streamed in tiles of RP_FX_AT (64);
 * per tile:
 *   1. K/V source: F32 and F16 caches are read in place (F16 converted by
 *      VCVTPH2PS as it is loaded); Q8_0 heads are dequantized once into F32
 *      tiles Kn/Vn [64][Dp] (Dp = head_dim rounded up to the vector width),
 *      except in decode over whole blocks, where each int8 vector is
 *      dequantized as it is loaded (fx_q8v; same rounding, same results);
 *   2. scores S[qv][t] = scale * q_qv . k_t for every query vector qv = row *
 *      G + head, either
 *      A (few query vectors, decode): vector dot products over head_dim for a
 *        block of qv x cells, the W partial-sum vectors reduced together in
 *        one shuffle tree (fx_reduce), or
 *      B (many query vectors, prefill): K transposed once per tile into Kt
 *        [Dp][64] (16x16 / 8x8 in-register transposes), then broadcast-FMAs
 *        of q[d] against 64 cells at a time — no horizontal sums;
 *   3. online softmax per qv over its valid cells t < n_cells[row] - c0:
 *      running max M, sum L, and the rescale factor C = e^(M_old - M_new);
 *      S becomes the probabilities (0 past the valid cells);
 *   4. out[qv] = C * out[qv] + sum_t S[qv][t] * v_t, register-blocked over
 *      query vectors x head_dim vectors (the output is the accumulator).
 * At the end out[qv] /= L. Scratch (rp_attn_scratch_bytes): S (NQ x 64),
 * M/L/C/valid (4 x NQ), Kt (Dp x 64), Kn and Vn (64 x Dp). The next tile's
 * K/V head slices are prefetched while each tile is computed. e^x is a
 * polynomial (about 1 ulp), so results match rp_attn_ref to float rounding
 * (score order, softmax grouping). Any head_dim works with AVX-512 (masked
 * last vector); AVX2 takes multiples of 8 and hands others to rp_attn_ref.
 * ========================================================================== */
#if defined(RP_FX_ATTN)

#define RP_FX_AT 64 /* cells per tile */
#if FX_W == 16
#define RP_FX_QB 6  /* path B: query vectors per block (6 x 4 accumulators) */
#define RP_FX_PQ 4  /* PV: query vectors per block ... */
#define RP_FX_PD 4  /* ... x head_dim vectors (4 x 4 accumulators) */
#else
#define RP_FX_QB 3
/* 4 x 3 accumulators: each V vector (converted from F16 once) serves four
 * query vectors, a GQA group of 4 in one pass over the cells */
#define RP_FX_PQ 4
#define RP_FX_PD 3
#endif
/* Path A up to this many query vectors: its reduction costs ~3 ops per cell
 * and query vector, path B's transpose ~head_dim/4 per cell for all of them. */
#define RP_FX_NQ_A 8

typedef struct {
    const rp_attn_args *a;
    int32_t D, DV, Dp, G, NQ, ln;   /* ln: lanes of the last head_dim vector */
    int32_t pn;                     /* cells of the next tile to prefetch (0: none) */
    float *S, *M, *L, *C, *Kt, *Kn, *Vn;
    int32_t *VC;                    /* valid cells of each qv in the current tile */
    int32_t *VB;                    /* sliding window: cells t < VB[qv] of the tile are masked */
    /* Q8_0 query (rp_attn_q8_query): qv's head rounded to Q8_0, as floats Qf
     * [qv][Dp] (d * q, exact; what every F32 path reads, else NULL: a->q), as
     * int8 Qi [qv][D] with block scales Qd [qv][D / 32], and Qc [qv][D / 4]:
     * -128 x the sum of each 4 bytes of Qi (the correction of an unsigned K).
     * qk8: the int8 decode QK of the vector layer (FX_QK8) runs the fused tiles. */
    float *Qf, *Qd;
    int8_t *Qi;
    int32_t *Qc;
    int qk8;
} fx_actx;

RP_FX_INLINE const float *fx_qin(const fx_actx *x, int32_t qv) {
    const rp_attn_args *a = x->a;
    return a->q + (int64_t)(qv / x->G) * a->q_stride + (int64_t)(a->head_begin + qv % x->G) * x->D;
}
RP_FX_INLINE const float *fx_qptr(const fx_actx *x, int32_t qv) {
    return x->Qf ? x->Qf + (size_t)qv * (size_t)x->Dp : fx_qin(x, qv);
}

/* Rounds every query vector's head to Q8_0 (rp_quantize_row's rounding)
 * into Qf / Qi / Qd / Qc; D is a multiple of 32. */
static void fx_q8_query(fx_actx *x, float *qf) {
    const int32_t D = x->D, nb = D / RP_QK8_0;
    rp_block_q8_0 blk[8];
    for (int32_t qv = 0; qv < x->NQ; qv++) {
        const float *q = fx_qin(x, qv);
        float *f = qf + (size_t)qv * (size_t)x->Dp, *qd = x->Qd + (size_t)qv * (size_t)nb;
        int8_t *qi = x->Qi + (size_t)qv * (size_t)D;
        int32_t *qc = x->Qc + (size_t)qv * (size_t)(D / 4);
        for (int32_t b0 = 0; b0 < nb; b0 += 8) {
            const int32_t n = nb - b0 < 8 ? nb - b0 : 8;
            rp_quantize_row(RP_TYPE_Q8_0, q + b0 * RP_QK8_0, blk, (int64_t)n * RP_QK8_0);
            for (int32_t b = 0; b < n; b++) {
                const float d = rp_fp16_to_fp32(blk[b].d);
                qd[b0 + b] = d;
                for (int j = 0; j < RP_QK8_0; j++) {
                    const int32_t e = (b0 + b) * RP_QK8_0 + j;
                    qi[e] = blk[b].qs[j];
                    f[e] = d * (float)blk[b].qs[j];
                }
            }
        }
        for (int32_t e = D; e < x->Dp; e++) f[e] = 0.0f;
        for (int32_t e = 0; e < D / 4; e++) qc[e] = -128 * (qi[4 * e] + qi[4 * e + 1] + qi[4 * e + 2] + qi[4 * e + 3]);
    }
    x->Qf = qf;
}
RP_FX_INLINE float *fx_optr(const fx_actx *x, int32_t qv) {
    const rp_attn_args *a = x->a;
    return a->out + (int64_t)(qv / x->G) * a->out_stride + (int64_t)(a->head_begin + qv % x->G) * x->D;
}

/* n lanes (1..W) at element i of a float or half source; on AVX2 head_dim is a
 * multiple of 8 (checked at entry) so n is always W there. */
RP_FX_INLINE fx_v fx_ldm(const void *p, int64_t i, int n, const int f16) {
#if FX_W == 16
    return f16 ? fx_loadn_f16((const uint16_t *)p + i, n) : fx_loadn((const float *)p + i, n);
#else
    (void)n;
    return f16 ? fx_load_f16((const uint16_t *)p + i) : fx_load((const float *)p + i);
#endif
}
RP_FX_INLINE fx_v fx_ldqm(const float *p, int n) {
#if FX_W == 16
    return fx_loadn(p, n);
#else
    (void)n;
    return fx_load(p);
#endif
}
RP_FX_INLINE void fx_stm(float *p, fx_v v, int n) {
#if FX_W == 16
    fx_storen(p, v, n);
#else
    (void)n;
    fx_store(p, v);
#endif
}

/* Vectors of head_dim per 64-byte line of the source (F16: 2 on AVX-512). */
#define FX_VPL(f16) (64 / (FX_W * ((f16) ? 2 : 4)))

/* Prefetches the line holding element i of the source row `t` cells into
 * the next tile, if that cell exists (x->pn). The compute loops call it as
 * they walk this tile, so the next tile's K/V lines arrive spread over the
 * tile's work (one bulk prefetch of a whole tile was measured slower). */
RP_FX_INLINE void fx_pf_next(const fx_actx *x, const void *base, int64_t stride, int t, int64_t i, const int f16) {
    if (t < x->pn)
        fx_prefetch(base + ((int64_t)(t + RP_FX_AT) * stride + i) * (f16 ? 2 : 4));
}

/* One Q8_0 cache row's head [off, off + D) as floats, zero-padded to Dp.
 * Same products as the reference (fp16 scale x int8, one rounding). */
static void fx_deq_q8(const uint8_t *row, int32_t off, int32_t D, int32_t Dp, float *dst) {
    const rp_block_q8_0 *b = (const rp_block_q8_0 *)row;
    if (off % RP_QK8_0 == 0 && D % RP_QK8_0 == 0) {
        for (int32_t e = 0; e < D; e += RP_QK8_0) {
            const rp_block_q8_0 *bk = b + (off + e) / RP_QK8_0;
            uint16_t dh;
            memcpy(&dh, &bk->d, 2);
            const fx_v d = fx_set1(fx_h2f(dh));
            for (int j = 0; j < RP_QK8_0; j += FX_W) {
                fx_store(dst + e + j, fx_mul(d, fx_load_i8(bk->qs + j)));
            }
        }
    } else {
        /* heads that cut through blocks (head_dim 8: four heads per block) */
        for (int32_t i = 0; i < D; i++) {
            const int32_t e = off + i;
            dst[i] = rp_fp16_to_fp32(b[e / RP_QK8_0].d) * (float)b[e / RP_QK8_0].qs[e % RP_QK8_0];
        }
    }
    for (int32_t i = D; i < Dp; i++) dst[i] = 0.0f;
}

/* Path A: S[q][t0 + c] for NQA (<= 8) query vectors x NCA cells (NQA * NCA
 * = W): NQA x NCA accumulators over head_dim, then one reduction tree.
 * Cells past tn - 1 repeat cell tn - 1 (finite; softmax masks them). */
RP_FX_INLINE void fx_qk_dot(const fx_actx *x, int32_t qv0, const void *kb, int64_t ks, int t0, int tn,
                            const int NQA, const int NCA, const int f16) {
    const float scale = x->a->scale;
    const float *qp[8];
    int64_t ko[FX_W];
    FX_FOR(q, 8, NQA) qp[q] = fx_qptr(x, qv0 + q);
    FX_FOR(c, FX_W, NCA) ko[c] = (int64_t)(t0 + c < tn ? t0 + c : tn - 1) * ks;
    fx_v acc[FX_W];
    FX_UNROLL(16)
    for (int i = 0; i < FX_W; i++) acc[i] = fx_zero();
    for (int dv = 0; dv < x->DV; dv++) {
        const int n = dv == x->DV - 1 ? x->ln : FX_W;
        if (qv0 == 0 && dv % FX_VPL(f16) == 0)   /* the first block walks the cells first */
            FX_FOR(c, FX_W, NCA) fx_pf_next(x, kb, ks, t0 + c, (int64_t)dv * FX_W, f16);
        fx_v qv[8];
        FX_FOR(q, 8, NQA) qv[q] = fx_ldqm(qp[q] + dv * FX_W, n);
        FX_FOR(c, FX_W, NCA) {
            const fx_v k = fx_ldm(kb, ko[c] + dv * FX_W, n, f16);
            FX_FOR(q, 8, NQA) acc[q * NCA + c] = fx_fma(qv[q], k, acc[q * NCA + c]);
        }
    }
    float tmp[FX_W];
    fx_store(tmp, fx_mul(fx_reduce(acc), fx_set1(scale)));
    FX_FOR(q, 8, NQA) memcpy(x->S + (size_t)(qv0 + q) * RP_FX_AT + t0, tmp + q * NCA, sizeof(float) * NCA);
}

/* One specialization per block shape and source: separate functions keep
 * each one's accumulators in registers and the code (and compile time,
 * sanitizers included) linear in the number of shapes. */
#define RP_FX_NOINLINE static __attribute__((noinline))
typedef void (*fx_qk_a_fn)(const fx_actx *x, int32_t qv, const void *kb, int64_t ks, int tn);
#define RP_FX_QKA(NQA, NCA, F16)                                                                       \
    RP_FX_NOINLINE void fx_qk_a_##NQA##_##F16(const fx_actx *x, int32_t qv, const void *kb, int64_t ks, int tn) { \
        for (int t0 = 0; t0 < tn; t0 += NCA) fx_qk_dot(x, qv, kb, ks, t0, tn, NQA, NCA, F16);          \
    }
#if FX_W == 16
RP_FX_QKA(8, 2, 0)
RP_FX_QKA(8, 2, 1)
#endif
#if FX_W != 8   /* AVX2 / NEON: fx_qk_run below */
RP_FX_QKA(4, FX_W / 4, 0)
RP_FX_QKA(4, FX_W / 4, 1)
RP_FX_QKA(2, FX_W / 2, 0)
RP_FX_QKA(2, FX_W / 2, 1)
RP_FX_QKA(1, FX_W, 0)
RP_FX_QKA(1, FX_W, 1)
#endif
#undef RP_FX_QKA

/* Fused Q8_0 decode (all widths): K and V vectors are dequantized as they
 * are loaded (int8 -> float, times the block's scale: the same single
 * rounding as fx_deq_q8, so results are bit-identical to the tiled path),
 * saving the tile stores and reloads. A tile's block scales are converted
 * once into Kn / Vn [cell][block] (the dequantization scratch, unused here).
 * Heads must sit on whole blocks (off and head_dim multiples of 32). */
#define FX_VPB (RP_QK8_0 / FX_W) /* vectors per Q8_0 block */
RP_FX_INLINE fx_v fx_q8v(const uint8_t *row, int dv, const float *sc) {
    const rp_block_q8_0 *b = (const rp_block_q8_0 *)row + dv / FX_VPB;
    return fx_mul(fx_load_i8(b->qs + (dv % FX_VPB) * FX_W), fx_set1(sc[dv / FX_VPB]));
}

/* Decode QK block (AVX2 / NEON for every KV type, all widths for fused
 * Q8_0): NQA query vectors x NCA = W / NQA cells per block, the query
 * pointers taken once per tile (no per-block divisions), no software prefetch
 * (each KV head's cells are contiguous, so the hardware prefetcher streams
 * them), the W scores of a block stored straight into S. The dv loop is
 * unrolled for head_dim 64 and 128 so that consecutive blocks overlap in the
 * out-of-order window (each block's accumulators are a chain of head_dim / W
 * FMAs). K (kind 0 F32, 1 F16: element stride ks; kind 2 Q8_0: row bytes ks,
 * block scales in Kn) is loaded by one rule per kind. */
RP_FX_INLINE void fx_qk_run(const fx_actx *x, int32_t qv0, const void *kb, int64_t ks, int tn, const int NQA,
                            const int DVC, const int kind) {
    const int NCA = FX_W / NQA, DV = DVC ? DVC : x->DV, nb = x->D / RP_QK8_0;
    const float *qp[4];
    for (int q = 0; q < NQA; q++) qp[q] = fx_qptr(x, qv0 + q);
    const fx_v sc = fx_set1(x->a->scale);
    float *S = x->S + (size_t)qv0 * RP_FX_AT;
    for (int t0 = 0; t0 < tn; t0 += NCA) {
        int64_t ko[FX_W];
        const float *ksc[FX_W];
        FX_FOR(c, FX_W, NCA) {
            const int t = t0 + c < tn ? t0 + c : tn - 1;
            ko[c] = (int64_t)t * ks;
            ksc[c] = x->Kn + (size_t)t * nb;
        }
        fx_v acc[FX_W];
        FX_UNROLL(16)
        for (int i = 0; i < FX_W; i++) acc[i] = fx_zero();
        FX_UNROLL(16)
        for (int dv = 0; dv < DV; dv++) {
            fx_v k[FX_W];
            if (kind == 2) {   /* braces: FX_FOR ends in an if */
                FX_FOR(c, FX_W, NCA) k[c] = fx_q8v((const uint8_t *)kb + ko[c], dv, ksc[c]);
            } else {
                FX_FOR(c, FX_W, NCA) k[c] = fx_ldm(kb, ko[c] + dv * FX_W, FX_W, kind == 1);
            }
            FX_FOR(q, 4, NQA) {
                const fx_v qq = fx_load(qp[q] + dv * FX_W);
                FX_FOR(c, FX_W, NCA) acc[q * NCA + c] = fx_fma(qq, k[c], acc[q * NCA + c]);
            }
        }
        float tmp[FX_W];
        fx_store(tmp, fx_mul(fx_reduce(acc), sc));
        /* t0 + c < RP_FX_AT always (tn <= RP_FX_AT, NCA divides it); cells
         * past tn are masked by the softmax */
        FX_FOR(q, 4, NQA) FX_FOR(c, FX_W, NCA) S[q * RP_FX_AT + t0 + c] = tmp[q * NCA + c];
    }
}
#define RP_FX_QKR(NQA, DVC, K)                                                                            \
    RP_FX_NOINLINE void fx_qk_##NQA##_##DVC##_##K(const fx_actx *x, int32_t qv, const void *kb, int64_t ks, \
                                                  int tn) {                                             \
        fx_qk_run(x, qv, kb, ks, tn, NQA, DVC, K);                                                      \
    }
#define RP_FX_QKD(DVC, K) RP_FX_QKR(4, DVC, K) RP_FX_QKR(2, DVC, K) RP_FX_QKR(1, DVC, K)
#define RP_FX_QKK(DVC) RP_FX_QKD(DVC, 0) RP_FX_QKD(DVC, 1) RP_FX_QKD(DVC, 2)
#if FX_W == 16
RP_FX_QKK(4)
RP_FX_QKK(8)
#else
RP_FX_QKK(8)
RP_FX_QKK(16)
#endif
RP_FX_QKK(0)
#define RP_FX_QKT1(DVC, K) {fx_qk_4_##DVC##_##K, fx_qk_2_##DVC##_##K, fx_qk_1_##DVC##_##K}
#define RP_FX_QKT(DVC) {RP_FX_QKT1(DVC, 0), RP_FX_QKT1(DVC, 1), RP_FX_QKT1(DVC, 2)}
/* [head_dim 64 / 128 / other][kind F32, F16, Q8_0][4, 2 or 1 query vectors] */
#if FX_W == 16
static const fx_qk_a_fn fx_qk_tab[3][3][3] = {RP_FX_QKT(4), RP_FX_QKT(8), RP_FX_QKT(0)};
#else
static const fx_qk_a_fn fx_qk_tab[3][3][3] = {RP_FX_QKT(8), RP_FX_QKT(16), RP_FX_QKT(0)};
#endif
#undef RP_FX_QKR
#undef RP_FX_QKD
#undef RP_FX_QKK
#undef RP_FX_QKT1
#undef RP_FX_QKT

/* Decode QK over kind's cells for every query vector: 4, then 2, then 1 at a time. */
static void fx_qk_blocks(const fx_actx *x, const void *kb, int64_t ks, int tn, int kind) {
    const fx_qk_a_fn(*t)[3] = fx_qk_tab[x->D == 64 ? 0 : x->D == 128 ? 1 : 2];
    int32_t qv = 0;
    for (; qv + 4 <= x->NQ; qv += 4) t[kind][0](x, qv, kb, ks, tn);
    for (; qv + 2 <= x->NQ; qv += 2) t[kind][1](x, qv, kb, ks, tn);
    for (; qv < x->NQ; qv++) t[kind][2](x, qv, kb, ks, tn);
}

static void fx_qk_a(const fx_actx *x, const void *kb, int64_t ks, int tn, int f16) {
#if FX_W == 8
    fx_qk_blocks(x, kb, ks, tn, f16 != 0);
#else
    /* whole vectors (head_dim a multiple of 16): fx_qk_run's blocks, 1.1-1.2x
     * faster than fx_qk_dot's in `bench attn` for 4 query vectors */
    if (x->ln == FX_W && x->NQ < 8) {
        fx_qk_blocks(x, kb, ks, tn, f16 != 0);
        return;
    }
    int32_t qv = 0;
#if FX_W == 16
    /* 8 query vectors (a GQA group of 8) x 2 cells: each K row loaded once */
    for (; qv + 8 <= x->NQ; qv += 8) (f16 ? fx_qk_a_8_1 : fx_qk_a_8_0)(x, qv, kb, ks, tn);
#endif
    for (; qv + 4 <= x->NQ; qv += 4) (f16 ? fx_qk_a_4_1 : fx_qk_a_4_0)(x, qv, kb, ks, tn);
    for (; qv + 2 <= x->NQ; qv += 2) (f16 ? fx_qk_a_2_1 : fx_qk_a_2_0)(x, qv, kb, ks, tn);
    for (; qv < x->NQ; qv++) (f16 ? fx_qk_a_1_1 : fx_qk_a_1_0)(x, qv, kb, ks, tn);
#endif
}

/* Path B, step 1: Kt[d][t] for d < D, t < tn rounded up to 4 vectors (the
 * cells past tn are 0). */
RP_FX_INLINE void fx_transpose_k_t(const fx_actx *x, const void *kb, int64_t ks, int tn, const int f16) {
    const int tend = (tn + 4 * FX_W - 1) / (4 * FX_W) * (4 * FX_W);
    for (int tb = 0; tb < tend; tb += FX_W) {
        for (int dv = 0; dv < x->DV; dv++) {
            const int n = dv == x->DV - 1 ? x->ln : FX_W;
            if (dv % FX_VPL(f16) == 0)
                FX_UNROLL(16)
                for (int c = 0; c < FX_W; c++) fx_pf_next(x, kb, ks, tb + c, (int64_t)dv * FX_W, f16);
            fx_v r[FX_W];
            FX_UNROLL(16)
            for (int c = 0; c < FX_W; c++)
                r[c] = tb + c < tn ? fx_ldm(kb, (int64_t)(tb + c) * ks + dv * FX_W, n, f16) : fx_zero();
            fx_transpose(r);
            FX_UNROLL(16)
            for (int j = 0; j < FX_W; j++)
                if (j < n) fx_store(x->Kt + (size_t)(dv * FX_W + j) * RP_FX_AT + tb, r[j]);
        }
    }
}

RP_FX_NOINLINE void fx_transpose_k_0(const fx_actx *x, const void *kb, int64_t ks, int tn) {
    fx_transpose_k_t(x, kb, ks, tn, 0);
}
RP_FX_NOINLINE void fx_transpose_k_1(const fx_actx *x, const void *kb, int64_t ks, int tn) {
    fx_transpose_k_t(x, kb, ks, tn, 1);
}

/* Path B, step 2: S for NQB query vectors x 4 cell vectors at tb. */
RP_FX_INLINE void fx_qk_t(const fx_actx *x, int32_t qv0, int tb, const int NQB) {
    const float *qp[RP_FX_QB];
    FX_FOR(q, RP_FX_QB, NQB) qp[q] = fx_qptr(x, qv0 + q);
    fx_v acc[RP_FX_QB][4];
    FX_FOR(q, RP_FX_QB, NQB)
        FX_UNROLL(4)
        for (int j = 0; j < 4; j++) acc[q][j] = fx_zero();
    const float *kt = x->Kt + tb;
    for (int d = 0; d < x->D; d++, kt += RP_FX_AT) {
        fx_v k[4];
        FX_UNROLL(4)
        for (int j = 0; j < 4; j++) k[j] = fx_load(kt + j * FX_W);
        FX_FOR(q, RP_FX_QB, NQB) {
            const fx_v b = fx_set1(qp[q][d]);
            FX_UNROLL(4)
            for (int j = 0; j < 4; j++) acc[q][j] = fx_fma(b, k[j], acc[q][j]);
        }
    }
    const fx_v sc = fx_set1(x->a->scale);
    FX_FOR(q, RP_FX_QB, NQB)
        FX_UNROLL(4)
        for (int j = 0; j < 4; j++) fx_store(x->S + (size_t)(qv0 + q) * RP_FX_AT + tb + j * FX_W, fx_mul(acc[q][j], sc));
}

typedef void (*fx_qk_t_fn)(const fx_actx *x, int32_t qv0, int tb);
#define RP_FX_QKT(N) \
    RP_FX_NOINLINE void fx_qk_t_##N(const fx_actx *x, int32_t qv0, int tb) { fx_qk_t(x, qv0, tb, N); }
RP_FX_QKT(1)
RP_FX_QKT(2)
RP_FX_QKT(3)
#if RP_FX_QB > 3
RP_FX_QKT(4)
RP_FX_QKT(5)
RP_FX_QKT(6)
static const fx_qk_t_fn fx_qk_t_tab[RP_FX_QB] = {fx_qk_t_1, fx_qk_t_2, fx_qk_t_3, fx_qk_t_4, fx_qk_t_5, fx_qk_t_6};
#else
static const fx_qk_t_fn fx_qk_t_tab[RP_FX_QB] = {fx_qk_t_1, fx_qk_t_2, fx_qk_t_3};
#endif
#undef RP_FX_QKT

static void fx_qk_b(const fx_actx *x, int tn) {
    for (int tb = 0; tb < tn; tb += 4 * FX_W)
        for (int32_t qv = 0; qv < x->NQ; qv += RP_FX_QB) {
            const int nq = x->NQ - qv < RP_FX_QB ? x->NQ - qv : RP_FX_QB;
            int any = 0;   /* skip blocks whose rows have no cells from tb on */
            for (int q = 0; q < nq; q++) any |= x->VC[qv + q] > tb;
            if (any) fx_qk_t_tab[nq - 1](x, qv, tb);
        }
}

/* Step 3 for one query vector with v >= 1 valid cells (of tn) in the tile. */
static void fx_softmax(const fx_actx *x, int32_t qv, int v, int lo, int first) {
    float *s = x->S + (size_t)qv * RP_FX_AT;
    const int nvec = (v + FX_W - 1) / FX_W;
    /* soft-capping (scalar tanh) and the window's masked head of the tile */
    const float cap = x->a->softcap;
    if (cap > 0)
        for (int t = lo; t < v; t++) s[t] = cap * tanhf(s[t] / cap);
    for (int t = 0; t < lo; t++) s[t] = -INFINITY;
    fx_v mx = fx_set1(-INFINITY);
    for (int j = 0; j < nvec; j++) {
        const int n = v - j * FX_W < FX_W ? v - j * FX_W : FX_W;
        mx = fx_max(mx, fx_keep(fx_loadn(s + j * FX_W, n), n, -INFINITY));
    }
    const float tmax = fx_hmax(mx);
    const float mnew = first || tmax > x->M[qv] ? tmax : x->M[qv];
    const float corr = first ? 0.0f : expf(x->M[qv] - mnew);
    const fx_v mv = fx_set1(mnew);
    fx_v sum = fx_zero();
    for (int j = 0; j < nvec; j++) {
        const int n = v - j * FX_W < FX_W ? v - j * FX_W : FX_W;
        fx_v p = fx_exp(fx_sub(fx_loadn(s + j * FX_W, n), mv));
        p = fx_keep(p, n, 0.0f);
        fx_store(s + j * FX_W, p);
        sum = fx_add(sum, p);
    }
    for (int j = nvec; j < RP_FX_AT / FX_W; j++) fx_store(s + j * FX_W, fx_zero());
    float l = fx_hsum(sum);
    for (int t = 0; t < lo; t++) {   /* exactly 0 whatever fx_exp gives for -inf */
        l -= s[t];
        s[t] = 0.0f;
    }
    x->L[qv] = first ? l : x->L[qv] * corr + l;
    x->M[qv] = mnew;
    x->C[qv] = corr;
}

/* Step 4 for NPQ query vectors x NPD head_dim vectors at dv0, cells t < tv.
 * V rows by kind: 0 F32 / 1 F16 (element stride vs, prefetched ahead), 2 Q8_0
 * dequantized as loaded (row bytes vs, block scales in Vn; whole blocks). */
RP_FX_INLINE void fx_pv(const fx_actx *x, int32_t qv0, int dv0, const void *vb, int64_t vs, int tv, int first,
                        const int NPQ, const int NPD, const int kind) {
    const int f16 = kind == 1, nb = x->D / RP_QK8_0;
    int nl[RP_FX_PD];
    FX_FOR(j, RP_FX_PD, NPD) nl[j] = dv0 + j == x->DV - 1 ? x->ln : FX_W;
    fx_v acc[RP_FX_PQ][RP_FX_PD];
    FX_FOR(q, RP_FX_PQ, NPQ)
        FX_FOR(j, RP_FX_PD, NPD) acc[q][j] = fx_zero();
    const float *s = x->S + (size_t)qv0 * RP_FX_AT;
    for (int t = 0; t < tv; t++) {
        fx_v v[RP_FX_PD];
        if (kind == 2) {
            const uint8_t *row = (const uint8_t *)vb + (size_t)t * (size_t)vs;
            const float *sc = x->Vn + (size_t)t * nb;
            FX_FOR(j, RP_FX_PD, NPD) v[j] = fx_q8v(row, dv0 + j, sc);
        } else {
            if (qv0 == 0)   /* the first block walks the V rows first */
                FX_FOR(j, RP_FX_PD, NPD) if (j % FX_VPL(f16) == 0)
                    fx_pf_next(x, vb, vs, t, (int64_t)(dv0 + j) * FX_W, f16);
            FX_FOR(j, RP_FX_PD, NPD) v[j] = fx_ldm(vb, (int64_t)t * vs + (dv0 + j) * FX_W, nl[j], f16);
        }
        FX_FOR(q, RP_FX_PQ, NPQ) {
            const fx_v p = fx_set1(s[q * RP_FX_AT + t]);
            FX_FOR(j, RP_FX_PD, NPD) acc[q][j] = fx_fma(p, v[j], acc[q][j]);
        }
    }
    FX_FOR(q, RP_FX_PQ, NPQ) {
        if (x->VC[qv0 + q] == 0) continue;   /* finished rows keep their output */
        float *o = fx_optr(x, qv0 + q) + dv0 * FX_W;
        const fx_v c = fx_set1(x->C[qv0 + q]);
        FX_FOR(j, RP_FX_PD, NPD) {
            fx_v r = acc[q][j];
            if (!first) r = fx_fma(fx_ldqm(o + j * FX_W, nl[j]), c, r);
            fx_stm(o + j * FX_W, r, nl[j]);
        }
    }
}

typedef void (*fx_pv_fn)(const fx_actx *x, int32_t qv0, int dv0, const void *vb, int64_t vs, int tv, int first);
#define RP_FX_PVF(Q, D, K)                                                                                \
    RP_FX_NOINLINE void fx_pv_##Q##_##D##_##K(const fx_actx *x, int32_t qv0, int dv0, const void *vb, int64_t vs, \
                                              int tv, int first) {                                        \
        fx_pv(x, qv0, dv0, vb, vs, tv, first, Q, D, K);                                                   \
    }
#if RP_FX_PD == 4
#define RP_FX_PVD(Q, K) RP_FX_PVF(Q, 1, K) RP_FX_PVF(Q, 2, K) RP_FX_PVF(Q, 3, K) RP_FX_PVF(Q, 4, K)
#define RP_FX_PVT(Q, K) {fx_pv_##Q##_1_##K, fx_pv_##Q##_2_##K, fx_pv_##Q##_3_##K, fx_pv_##Q##_4_##K}
#else
#define RP_FX_PVD(Q, K) RP_FX_PVF(Q, 1, K) RP_FX_PVF(Q, 2, K) RP_FX_PVF(Q, 3, K)
#define RP_FX_PVT(Q, K) {fx_pv_##Q##_1_##K, fx_pv_##Q##_2_##K, fx_pv_##Q##_3_##K}
#endif
#define RP_FX_PVK(Q) RP_FX_PVD(Q, 0) RP_FX_PVD(Q, 1) RP_FX_PVD(Q, 2)
RP_FX_PVK(1)
RP_FX_PVK(2)
RP_FX_PVK(3)
RP_FX_PVK(4)
#define RP_FX_PVTK(K) {RP_FX_PVT(1, K), RP_FX_PVT(2, K), RP_FX_PVT(3, K), RP_FX_PVT(4, K)}
static const fx_pv_fn fx_pv_tab[3][RP_FX_PQ][RP_FX_PD] = {RP_FX_PVTK(0), RP_FX_PVTK(1), RP_FX_PVTK(2)};
#undef RP_FX_PVF
#undef RP_FX_PVD
#undef RP_FX_PVT
#undef RP_FX_PVK
#undef RP_FX_PVTK

static void fx_pv_all(const fx_actx *x, const void *vb, int64_t vs, int first, int kind) {
    for (int32_t qv = 0; qv < x->NQ; qv += RP_FX_PQ) {
        const int nq = x->NQ - qv < RP_FX_PQ ? x->NQ - qv : RP_FX_PQ;
        int tv = 0;
        for (int q = 0; q < nq; q++) tv = x->VC[qv + q] > tv ? x->VC[qv + q] : tv;
        if (tv == 0) continue;
        for (int dv0 = 0; dv0 < x->DV; dv0 += RP_FX_PD) {
            const int nd = x->DV - dv0 < RP_FX_PD ? x->DV - dv0 : RP_FX_PD;
            fx_pv_tab[kind][nq - 1][nd - 1](x, qv, dv0, vb, vs, tv, first);
        }
    }
}

/* The vector layer's int8 decode QK (x86: kernels/x86/attn_q8_x86.h): fx_qk8_ok(D) says whether it takes
 * head_dim D, fx_qk8_blocks(x, kb, ks, tn) writes S for every query vector from Qi / Qd / Qc and the tile's
 * K block scales in Kn, as fx_qk_blocks(..., 2) does from Qf. */
#if defined(FX_QK8)
#include FX_QK8
#endif

/* One tile of the fused Q8_0 decode: block scales, QK, softmax, PV. No
 * software prefetch: each KV group's cells are contiguous and the hardware
 * prefetcher streams them (prefetching the next tile's rows here was 4-8 %
 * slower in `bench attn`, Zen 4, 2026-12-03). */
static void fx_q8_tile(fx_actx *x, const uint8_t *krow, const uint8_t *vrow, size_t rb, size_t hoff, int tn,
                       int first) {
    const int nb = x->D / RP_QK8_0;
    /* the tile's block scales gathered as halves, then converted FX_W at a
     * time (Kn / Vn hold 64 x Dp floats, Dp >= 32 nb) */
    uint16_t hk[RP_FX_AT * 8], hv[RP_FX_AT * 8];   /* nb <= 8: head_dim <= 256 */
    for (int t = 0; t < tn; t++) {
        const rp_block_q8_0 *kb = (const rp_block_q8_0 *)(krow + (size_t)t * rb + hoff);
        const rp_block_q8_0 *vb = (const rp_block_q8_0 *)(vrow + (size_t)t * rb + hoff);
        if (nb > 8) {   /* head_dim > 256: converted one by one */
            for (int b = 0; b < nb; b++) {
                uint16_t dk, dv;
                memcpy(&dk, &kb[b].d, 2);
                memcpy(&dv, &vb[b].d, 2);
                x->Kn[t * nb + b] = fx_h2f(dk);
                x->Vn[t * nb + b] = fx_h2f(dv);
            }
            continue;
        }
        for (int b = 0; b < nb; b++) {
            memcpy(&hk[t * nb + b], &kb[b].d, 2);
            memcpy(&hv[t * nb + b], &vb[b].d, 2);
        }
    }
    float *const kn = x->Kn, *const vn = x->Vn;
    const int ns = nb > 8 ? 0 : tn * nb, nv = ns / FX_W * FX_W;
    for (int i = 0; i < nv; i += FX_W) {
        fx_store(kn + i, fx_load_f16(hk + i));
        fx_store(vn + i, fx_load_f16(hv + i));
    }
    for (int i = nv; i < ns; i++) {
        kn[i] = fx_h2f(hk[i]);
        vn[i] = fx_h2f(hv[i]);
    }
#if defined(FX_QK8)
    if (x->qk8) fx_qk8_blocks(x, krow + hoff, (int64_t)rb, tn);
    else
#endif
        fx_qk_blocks(x, krow + hoff, (int64_t)rb, tn, 2);
    for (int32_t qv = 0; qv < x->NQ; qv++)
        if (x->VC[qv] > 0) fx_softmax(x, qv, x->VC[qv], x->VB[qv], first);
    fx_pv_all(x, vrow + hoff, (int64_t)rb, first, 2);
}

/* Prefetches the head's bytes [hoff, hoff + hbytes) of cells [c0, c1): the
 * cache rows hold every KV head, so a head is a short piece every
 * kv_row_bytes, a stride the hardware prefetchers follow poorly. */
static inline void fx_prefetch_cells(const uint8_t *base, size_t row_bytes, size_t hoff, size_t hbytes, int32_t c0,
                                     int32_t c1) {
    for (int32_t c = c0; c < c1; c++) {
        const uint8_t *r = base + (size_t)c * row_bytes + hoff;
        for (size_t o = 0; o < hbytes; o += 64) fx_prefetch((r + o));
        fx_prefetch((r + hbytes - 1));
    }
}

/* f16: the cache is F16 (converted as loaded), else F32 values are read:
 * the cache itself (F32) or the tiles Q8_0 rows are dequantized into. */
static void fx_attn_run(fx_actx *x, const int f16) {
    const rp_attn_args *a = x->a;
    const int kind = f16 ? 1 : a->kv_type == RP_TYPE_Q8_0 ? 2 : 0;
    const int32_t off = a->kv_head * x->D;
    int32_t maxc = 0;
    for (int32_t i = 0; i < a->n_rows; i++) maxc = a->n_cells[i] > maxc ? a->n_cells[i] : maxc;
    const int path_a = x->NQ <= RP_FX_NQ_A;
    /* A sliding window (c_begin) starts the tiles at the first attended cell;
     * a query vector may then see its first cell in a later tile, so every
     * one starts from M = -inf, L = 0, out = 0 (first = 0 throughout): the
     * rescale e^(M - M_new) is 0 for it and its sums start exactly as with
     * first = 1. */
    const int win = a->c_begin != NULL;
    int32_t cstart = 0;
    if (win) {
        cstart = maxc;
        for (int32_t i = 0; i < a->n_rows; i++) {
            const int32_t b = a->c_begin[i] < 0 ? 0 : a->c_begin[i];
            if (b < a->n_cells[i] && b < cstart) cstart = b;
        }
        for (int32_t qv = 0; qv < x->NQ; qv++) {
            x->M[qv] = -INFINITY;
            x->L[qv] = 0.0f;
            float *o = fx_optr(x, qv);
            for (int dv = 0; dv < x->DV; dv++) fx_stm(o + dv * FX_W, fx_zero(), dv == x->DV - 1 ? x->ln : FX_W);
        }
    }
    /* byte range of this head within a cache row (Q8_0: its whole blocks) */
    size_t hoff, hbytes;
    if (kind == 2) {
        const int32_t b0 = off / RP_QK8_0, b1 = (off + x->D + RP_QK8_0 - 1) / RP_QK8_0;
        hoff = (size_t)b0 * sizeof(rp_block_q8_0);
        hbytes = (size_t)(b1 - b0) * sizeof(rp_block_q8_0);
    } else {
        hoff = (size_t)off * (kind == 1 ? 2 : 4);
        hbytes = (size_t)x->D * (kind == 1 ? 2 : 4);
    }
    /* decode over whole Q8_0 blocks: dequantized as loaded, no tiles */
    const int fused_q8 = kind == 2 && path_a && off % RP_QK8_0 == 0 && x->D % RP_QK8_0 == 0;
#if defined(FX_QK8)
    x->qk8 = fused_q8 && x->Qf && fx_qk8_ok(x->D);
#endif
    for (int32_t c0 = cstart; c0 < maxc; c0 += RP_FX_AT) {
        const int tn = maxc - c0 < RP_FX_AT ? maxc - c0 : RP_FX_AT;
        const int first = !win && c0 == 0;
        for (int32_t qv = 0; qv < x->NQ; qv++) {
            const int32_t v = a->n_cells[qv / x->G] - c0;
            x->VC[qv] = v <= 0 ? 0 : v < tn ? v : tn;
            x->VB[qv] = 0;
            if (win) {
                const int32_t b = a->c_begin[qv / x->G] - c0;
                x->VB[qv] = b <= 0 ? 0 : b < tn ? b : tn;
                if (x->VB[qv] >= x->VC[qv]) x->VC[qv] = 0;   /* nothing of this tile */
            }
        }
        const uint8_t *krow = a->k + (size_t)c0 * a->kv_row_bytes, *vrow = a->v + (size_t)c0 * a->kv_row_bytes;
        /* cells of the next tile: F32/F16 prefill runs prefetch them as they
         * go (fx_pf_next); decode (one row) streams them with the hardware
         * prefetcher alone (each KV group's cells are contiguous: 1-12 %
         * faster in `bench attn` at d4096 / d16384, Zen 4), as the fused
         * Q8_0 tiles do */
        const int32_t nxt = maxc - (c0 + RP_FX_AT);
        x->pn = kind == 2 || a->n_rows == 1 || nxt <= 0 ? 0 : nxt < RP_FX_AT ? nxt : RP_FX_AT;
        if (fused_q8) {
            fx_q8_tile(x, krow, vrow, a->kv_row_bytes, hoff, tn, first);
            continue;
        }
        const void *kb, *vb;
        int64_t ks, vs;
        if (kind == 2) {
            for (int t = 0; t < tn; t++) {
                if (c0 + RP_FX_AT + t < maxc) {
                    fx_prefetch_cells(a->k, a->kv_row_bytes, hoff, hbytes, c0 + RP_FX_AT + t, c0 + RP_FX_AT + t + 1);
                    fx_prefetch_cells(a->v, a->kv_row_bytes, hoff, hbytes, c0 + RP_FX_AT + t, c0 + RP_FX_AT + t + 1);
                }
                fx_deq_q8(krow + (size_t)t * a->kv_row_bytes, off, x->D, x->Dp, x->Kn + (size_t)t * x->Dp);
                fx_deq_q8(vrow + (size_t)t * a->kv_row_bytes, off, x->D, x->Dp, x->Vn + (size_t)t * x->Dp);
            }
            kb = x->Kn; vb = x->Vn; ks = vs = x->Dp;
        } else if (kind == 1) {
            kb = (const uint16_t *)krow + off;
            vb = (const uint16_t *)vrow + off;
            ks = vs = (int64_t)(a->kv_row_bytes / 2);
        } else {
            kb = (const float *)krow + off;
            vb = (const float *)vrow + off;
            ks = vs = (int64_t)(a->kv_row_bytes / 4);
        }
        if (path_a) {
            fx_qk_a(x, kb, ks, tn, f16);
        } else {
            (f16 ? fx_transpose_k_1 : fx_transpose_k_0)(x, kb, ks, tn);
            fx_qk_b(x, tn);
        }
        for (int32_t qv = 0; qv < x->NQ; qv++)
            if (x->VC[qv] > 0) fx_softmax(x, qv, x->VC[qv], x->VB[qv], first);
        fx_pv_all(x, vb, vs, first, kind == 1);
    }
    for (int32_t qv = 0; qv < x->NQ; qv++) {
        float *o = fx_optr(x, qv);
        if (a->ml) {   /* partial mode: unnormalized, with (M, L); empty rows are zero */
            const int has = win ? x->L[qv] > 0 : a->n_cells[qv / x->G] > 0;
            a->ml[2 * qv] = has ? x->M[qv] : -INFINITY;
            a->ml[2 * qv + 1] = has ? x->L[qv] : 0.0f;
            if (!has)
                for (int dv = 0; dv < x->DV; dv++) fx_stm(o + dv * FX_W, fx_zero(), dv == x->DV - 1 ? x->ln : FX_W);
            continue;
        }
        const fx_v inv = fx_set1((float)(1.0 / (double)x->L[qv]));
        for (int dv = 0; dv < x->DV; dv++) {
            const int n = dv == x->DV - 1 ? x->ln : FX_W;
            fx_stm(o + dv * FX_W, fx_mul(fx_ldqm(o + dv * FX_W, n), inv), n);
        }
    }
}

static inline float *fx_carve(uint8_t **p, size_t floats) {
    float *r = (float *)*p;
    *p += (floats * sizeof(float) + 63) & ~(size_t)63;
    return r;
}

static void rp_fx_attn(const rp_attn_args *a) {
    if (a->n_rows <= 0 || a->n_heads <= 0) return;
#if FX_W == 8
    if (a->head_dim % 8 != 0) { rp_attn_ref(a); return; }
#endif
    fx_actx x;
    x.a = a;
    x.D = a->head_dim;
    x.DV = (x.D + FX_W - 1) / FX_W;
    x.Dp = x.DV * FX_W;
    x.ln = x.D - (x.DV - 1) * FX_W;
    x.G = a->n_heads;
    x.NQ = a->n_rows * a->n_heads;
    uint8_t *p = (uint8_t *)(((uintptr_t)a->scratch + 63) & ~(uintptr_t)63);
    x.S = fx_carve(&p, (size_t)x.NQ * RP_FX_AT);
    x.M = fx_carve(&p, (size_t)x.NQ);
    x.L = fx_carve(&p, (size_t)x.NQ);
    x.C = fx_carve(&p, (size_t)x.NQ);
    x.VC = (int32_t *)fx_carve(&p, (size_t)x.NQ);
    x.VB = (int32_t *)fx_carve(&p, (size_t)x.NQ);
    x.Kt = fx_carve(&p, (size_t)x.Dp * RP_FX_AT);
    x.Kn = fx_carve(&p, (size_t)x.Dp * RP_FX_AT);
    x.Vn = fx_carve(&p, (size_t)x.Dp * RP_FX_AT);
    x.Qf = NULL;
    x.Qi = NULL;
    x.Qd = NULL;
    x.Qc = NULL;
    x.qk8 = 0;
    if (rp_attn_q8_query(a->kv_type, x.D)) {
        float *qf = fx_carve(&p, (size_t)x.NQ * (size_t)x.Dp);
        x.Qi = (int8_t *)fx_carve(&p, (size_t)x.NQ * (size_t)x.D / 4);
        x.Qd = fx_carve(&p, (size_t)x.NQ * (size_t)(x.D / RP_QK8_0));
        x.Qc = (int32_t *)fx_carve(&p, (size_t)x.NQ * (size_t)(x.D / 4));
        fx_q8_query(&x, qf);
    }
    switch (a->kv_type) {
    case RP_TYPE_F16: fx_attn_run(&x, 1); break;
    case RP_TYPE_F32:
    case RP_TYPE_Q8_0: fx_attn_run(&x, 0); break;
    default: rp_attn_ref(a); break;
    }
}

#endif /* RP_FX_ATTN */


/* ===========================================================================
 * Element-wise template (RP_FX_EW): SwiGLU g = g / (1 + e^-g) * u, FX_W lanes
 * at a time; the tail through masked loads and stores (no read or write past
 * n). fx_exp clamps its argument, so large |g| gives g (g > 0) or a value
 * near -0 (g < 0) as the reference does.
 * ========================================================================= */
#if defined(RP_FX_EW)
static void rp_fx_swiglu(float *g, const float *u, int64_t n) {
    const fx_v one = fx_set1(1.0f), zero = fx_zero();
    int64_t i = 0;
    for (; i + FX_W <= n; i += FX_W) {
        const fx_v x = fx_load(g + i);
        const fx_v d = fx_add(one, fx_exp(fx_sub(zero, x)));
        fx_store(g + i, fx_mul(fx_div(x, d), fx_load(u + i)));
    }
    if (i < n) {
        const int r = (int)(n - i);
        const fx_v x = fx_loadn(g + i, r);
        const fx_v d = fx_add(one, fx_exp(fx_sub(zero, x)));
        fx_storen(g + i, fx_mul(fx_div(x, d), fx_loadn(u + i, r)), r);
    }
}

/* F32 <-> F16 rows through the hardware converters (F16C / AVX-512):
 * bit-identical to rp_fp32_to_fp16 / rp_fp16_to_fp32 on every input. */
static void rp_fx_f32_to_f16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + FX_W <= n; i += FX_W) fx_store_f16(dst + i, fx_load(src + i));
    if (i < n) fx_storen_f16(dst + i, fx_loadn(src + i, (int)(n - i)), (int)(n - i));
}
static void rp_fx_f16_to_f32(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
    for (; i + FX_W <= n; i += FX_W) fx_store(dst + i, fx_load_f16(src + i));
    if (i < n) fx_storen(dst + i, fx_loadn_f16(src + i, (int)(n - i)), (int)(n - i));
}
#endif /* RP_FX_EW */

#endif /* RP_KERNELS_FLOAT_TMPL_H */
