/* gpu_ops.h — the forward pass's operations on the GPU: one kernel (pipeline) per shader variant, created once
 * (rp_gpu_ops_create, at load), and record helpers that put one dispatch each into a recorder. Buffers hold
 * F32 activations unless named otherwise; offsets and strides are in elements (floats, halves) except weight
 * offsets / row strides, which are bytes. The shapes are checked: RP_ERR_INVALID_ARG names what was wrong.
 * Every op has a CPU reference it is tested against (tests/test_gpu_ops.c). */
#ifndef RP_GPU_GPU_OPS_H
#define RP_GPU_GPU_OPS_H

#include "gpu/gpu.h"
#include "kernels/types.h"

typedef struct rp_gpu_ops rp_gpu_ops;

rp_status rp_gpu_ops_create(rp_gpu *g, rp_gpu_ops **out);
void rp_gpu_ops_free(rp_gpu_ops *o);
/* Whether mul_mat / get_rows take weights of this type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: every type the CPU computes). */
bool rp_gpu_ops_has_type(rp_type t);

/* y[j * ldy + r] = dot(W row r, x[j * ldx ..]) for r < rows, j < n; W's row r at byte w_off + r * row_bytes in
 * the GGUF block layout of wtype (cols a multiple of its block). One dispatch serves decode (n = 1) and
 * prefill. */
typedef struct rp_gpu_mm {
    rp_gpu_buf *w, *x, *y;
    rp_type wtype;
    uint32_t rows, cols, n;
    uint32_t w_off, row_bytes;
    uint32_t x_off, ldx, y_off, ldy;
} rp_gpu_mm;
rp_status rp_gpu_op_mul_mat(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_mm *a);
/* Makes mul_mat's kernel for weight type t now rather than at its first use, so that contexts on several threads
 * can then share the ops (the offload prepares every type it uploaded). */
rp_status rp_gpu_ops_prepare(rp_gpu_ops *o, rp_type t);

/* Embedding lookup: y row i (ldy apart from y_off) = W row ids[i] (int32 buffer) dequantized, i < n. */
rp_status rp_gpu_op_get_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *w, rp_type wtype, uint32_t w_off,
                             uint32_t row_bytes, uint32_t cols, rp_gpu_buf *ids, uint32_t n, rp_gpu_buf *y,
                             uint32_t y_off, uint32_t ldy);

/* out row i = rmsnorm(x row i) * w for i < rows (rows of n, ldx / ldo apart; out may be x). With add non-NULL,
 * x += add first (written back; add has x's layout). */
rp_status rp_gpu_op_rmsnorm(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, rp_gpu_buf *add, rp_gpu_buf *w,
                            rp_gpu_buf *out, uint32_t n, uint32_t rows, uint32_t ldx, uint32_t ldo, float eps);

/* RoPE in place over rows of x (ldx apart from x_off) of n_heads heads of head_dim, first n_rot dims, by the
 * table cs (row i: cos[n_rot/2] then sin[n_rot/2]). */
rp_status rp_gpu_op_rope(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx, uint32_t rows,
                         uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, rp_gpu_buf *cs);

/* g[i] = silu(g[i]) * u[i], i < n. */
rp_status rp_gpu_op_swiglu(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *g, rp_gpu_buf *u, uint32_t n);

/* Softmax in place of rows of n (ldx apart). */
rp_status rp_gpu_op_softmax(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t n, uint32_t rows, uint32_t ldx);

/* F32 rows i < n of kd (x, ldx apart from x_off) into F16 cache k at cell cells[i] (kd halves per cell from
 * k_off halves; kd and k_off even). */
rp_status rp_gpu_op_kv_store_f16(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                 uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k, uint32_t k_off);
/* The same for rows r0 + i (of x and cells), i < n: one run of a multi-sequence batch into its sequence's cache. */
rp_status rp_gpu_op_kv_store_f16_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                      uint32_t r0, uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k,
                                      uint32_t k_off);

/* F32 rows r0 + i, i < n, of kd (a multiple of 32, <= 8192) into a Q8_0 cache k at cell cells[r0 + i]: ggml's
 * Q8_0 blocks (kd / 32 * 34 bytes per cell, from k_off bytes, even), as quantize_row_q8_0. */
rp_status rp_gpu_op_kv_store_q8_0_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                       uint32_t r0, uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k,
                                       uint32_t k_off);

/* Attention over an F16 KV cache with GQA: q rows i < n_rows (ldq apart) of n_head heads of head_dim; K and V
 * cells of kd = n_head_kv * head_dim halves (from k_off / v_off halves); row i attends cells [0, n_cells[i])
 * (int32 buffer, each >= 1); out like q (ldo apart). With r0 > 0 the rows are r0 + i (of q, n_cells and out): one run of
 * a multi-sequence batch over its sequence's cache. */
typedef struct rp_gpu_attn {
    rp_gpu_buf *q, *k, *v, *n_cells, *out;
    uint32_t n_rows, n_head, n_head_kv, head_dim;
    uint32_t ldq, ldo, k_off, v_off;
    float scale;
    uint32_t r0;
} rp_gpu_attn;
rp_status rp_gpu_op_attn_f16(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_attn *a);
/* The same over a Q8_0 cache: each cell ggml's Q8_0 blocks of its n_head_kv * head_dim elements (34 bytes per 32),
 * k_off / v_off in bytes (even); the query rounded to Q8_0 first when its heads sit on whole blocks, as the CPU
 * does (rp_attn_q8_query). */
rp_status rp_gpu_op_attn_q8_0(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_attn *a);

#endif /* RP_GPU_GPU_OPS_H */
