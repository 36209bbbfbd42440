/* attn_ref.c — scalar reference attention: two-pass softmax per row and head over dequantized K/V. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

size_t rp_attn_scratch_bytes(int32_t head_dim, int32_t max_heads, int32_t max_rows) {
    /* an upper bound shared by all kernels. The reference needs 2 x head_dim
     * floats (a K/V head and the Q8_0 query head). The SIMD kernels
     * (float_tmpl.h) need, with nq = rows x heads, a tile of 64 cells and
     * head_dim padded to 16 (dp): scores nq x 64, five per-query-vector arrays
     * (max, sum, rescale, valid cells, window start) nq x 5, three 64 x dp
     * tiles (transposed K, dequantized K and V) and, for Q8_0 caches, the
     * queries rounded to Q8_0: nq x dp floats, nq x dp int8 and their scales
     * and correction terms (nq x (dp / 32 + dp / 4) floats); each of the 13
     * pieces is 64-byte aligned (<= 16 floats of padding) plus 64 bytes to
     * align the start. */
    size_t hd = (size_t)(head_dim > 0 ? head_dim : 0), rows = (size_t)max_rows * (size_t)max_heads;
    size_t dp = (hd + 15) & ~(size_t)15;
    size_t floats = rows * (hd + 69) + rows * (dp + dp / 4 + dp / 32 + dp / 4) + 3 * 64 * dp + 4096;
    return floats * sizeof(float) + 256;
}

/* Loads head `h` (head_dim values) of a cache row into out; Q8_0 heads that
 * are not block-aligned are cut out of their whole blocks. */
static void load_head(const rp_attn_args *a, const uint8_t *row, float *out) {
    const int32_t hd = a->head_dim, off = a->kv_head * hd;
    switch (a->kv_type) {
    case RP_TYPE_F32: memcpy(out, (const float *)row + off, sizeof(float) * (size_t)hd); break;
    case RP_TYPE_F16: {
        const uint16_t *p = (const uint16_t *)row + off;
        for (int32_t i = 0; i < hd; i++) out[i] = rp_fp16_to_fp32(p[i]);
        break;
    }
    case RP_TYPE_Q8_0: {
        const rp_block_q8_0 *b = (const rp_block_q8_0 *)row;
        for (int32_t i = 0; i < hd; i++) {
            int32_t e = off + i;
            out[i] = rp_fp16_to_fp32(b[e / RP_QK8_0].d) * (float)b[e / RP_QK8_0].qs[e % RP_QK8_0];
        }
        break;
    }
    default: memset(out, 0, sizeof(float) * (size_t)hd);
    }
}

bool rp_attn_q8_query(rp_type kv_type, int32_t head_dim) {
    return kv_type == RP_TYPE_Q8_0 && head_dim > 0 && head_dim % RP_QK8_0 == 0;
}

void rp_attn_ref(const rp_attn_args *a) {
    const int32_t hd = a->head_dim;
    float *kh = a->scratch;
    /* Q8_0 K on whole blocks: each query head is rounded to Q8_0 and the
     * scores are integer block dot products (llama.cpp's vec_dot_q8_0_q8_0) */
    const bool q8 = rp_attn_q8_query(a->kv_type, hd);
    rp_block_q8_0 *qb = (rp_block_q8_0 *)(void *)(kh + hd);
    for (int32_t i = 0; i < a->n_rows; i++) {
        const int32_t nc = a->n_cells[i], c0 = a->c_begin ? a->c_begin[i] : 0;
        for (int32_t hh = 0; hh < a->n_heads; hh++) {
            const int32_t h = a->head_begin + hh;
            const float *q = a->q + i * a->q_stride + (int64_t)h * hd;
            float *o = a->out + i * a->out_stride + (int64_t)h * hd;
            /* online softmax, one cell at a time (exact, order-stable) */
            float m = -INFINITY;
            double l = 0;
            memset(o, 0, sizeof(float) * (size_t)hd);
            if (q8) rp_quantize_row(RP_TYPE_Q8_0, q, qb, hd);
            for (int32_t c = c0 < 0 ? 0 : c0; c < nc; c++) {
                float s = 0;
                if (q8) {
                    const rp_block_q8_0 *kb = (const rp_block_q8_0 *)(const void *)(a->k + (size_t)c * a->kv_row_bytes);
                    s = rp_vec_dot_ref(RP_TYPE_Q8_0, hd, kb + (int64_t)a->kv_head * hd / RP_QK8_0, qb);
                } else {
                    load_head(a, a->k + (size_t)c * a->kv_row_bytes, kh);
                    for (int32_t d = 0; d < hd; d++) s += q[d] * kh[d];
                }
                s *= a->scale;
                if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
                float mn = s > m ? s : m;
                float corr = expf(m - mn), p = expf(s - mn);
                l = l * corr + p;
                load_head(a, a->v + (size_t)c * a->kv_row_bytes, kh);
                for (int32_t d = 0; d < hd; d++) o[d] = o[d] * corr + p * kh[d];
                m = mn;
            }
            if (a->ml) {
                float *ml = a->ml + 2 * ((int64_t)i * a->n_heads + hh);
                ml[0] = m;
                ml[1] = (float)l;
                continue;
            }
            float inv = (float)(1.0 / l);
            for (int32_t d = 0; d < hd; d++) o[d] *= inv;
        }
    }
}

void rp_attn_merge(const float *outs, int64_t part_stride, const float *mls, int64_t ml_stride, int32_t n_parts,
                   int32_t nq,
                   int32_t heads, int32_t head_dim, float *dst, int64_t dst_stride) {
    for (int32_t qv = 0; qv < nq; qv++) {
        float m = -INFINITY;
        for (int32_t p = 0; p < n_parts; p++) {
            const float mp = mls[(int64_t)p * ml_stride + 2 * qv];
            m = mp > m ? mp : m;
        }
        float *o = dst + (int64_t)(qv / heads) * dst_stride + (int64_t)(qv % heads) * head_dim;
        memset(o, 0, sizeof(float) * (size_t)head_dim);
        double l = 0;
        for (int32_t p = 0; p < n_parts; p++) {
            const float *ml = mls + (int64_t)p * ml_stride + 2 * qv;
            if (ml[1] == 0.0f) continue;   /* an empty range */
            const float w = expf(ml[0] - m);
            const float *src = outs + (int64_t)p * part_stride + (int64_t)qv * head_dim;
            l += (double)w * ml[1];
            for (int32_t d = 0; d < head_dim; d++) o[d] += w * src[d];
        }
        const float inv = l > 0 ? (float)(1.0 / l) : 0.0f;
        for (int32_t d = 0; d < head_dim; d++) o[d] *= inv;
    }
}
