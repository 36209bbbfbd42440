/* kernels.h — kernel families behind one small interface: packed-weight matmul (GEMM/GEMV) and attention. */
#ifndef RP_KERNELS_KERNELS_H
#define RP_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu.h"
#include "kernels/types.h"

/* ---------------------------------------------------------------------------
 * Matmul kernels. y[i][r] = dot(x[i][:], W[r][:]) for a weight W of `rows` x
 * `cols` (GGUF: ne0 = cols). A kernel family owns:
 *   - a packed layout for W, made once at load from the GGUF rows (pack);
 *     pack == NULL means the kernel reads the GGUF rows in place;
 *   - an activation format (act_type) and how to quantize a float row to it;
 *   - gemm over a range of W's rows [r0, r1) for n activation rows. The range
 *     is what the driver hands each thread (and could hand another device);
 *     r0 and r1 are multiples of row_block except r1 == rows.
 * Kernels allocate nothing; `scratch` is per-thread memory of scratch_bytes.
 * ------------------------------------------------------------------------- */
typedef struct rp_mm_kernel {
    const char *name;           /* e.g. "q4_0/avx512" */
    rp_type wtype;              /* weight type consumed */
    rp_cpu_level level;         /* minimum dispatch level */
    rp_type act_type;           /* RP_TYPE_Q8_0, RP_TYPE_Q8_K, RP_TYPE_F32 or RP_TYPE_BF16 */
    int32_t row_block;          /* rows per packed group (1 when unpacked) */

    /* bytes of the packed matrix (rows padded up to row_block); NULL when pack == NULL */
    size_t (*packed_size)(int64_t rows, int64_t cols);
    /* packs row groups [g0, g1) (group g = rows [g*row_block, (g+1)*row_block)) from
     * GGUF rows `src` (src_row_bytes apart) into `dst`; rows past `rows` are zero.
     * Called in parallel over disjoint group ranges. */
    void (*pack)(const void *src, size_t src_row_bytes, int64_t rows, int64_t cols, void *dst, int64_t g0,
                 int64_t g1);

    /* bytes of one activation row of `cols` elements in act_type */
    size_t (*act_row_size)(int64_t cols);
    /* converts one float row to act_type (NULL: the kernel reads floats directly) */
    void (*quant_act)(const float *x, void *dst, int64_t cols);

    /* per-thread scratch gemm needs for n activation rows (0 if none) */
    size_t (*scratch_bytes)(int64_t cols, int64_t n);
    /* y[i * ldy + r] for i < n, r in [r0, r1). `w` is the packed matrix (or the
     * GGUF rows when pack == NULL, with w_row_bytes their stride); `act` holds n
     * activation rows act_stride bytes apart. */
    void (*gemm)(const void *w, size_t w_row_bytes, int64_t rows, int64_t cols, const void *act,
                 size_t act_stride, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy, void *scratch);
} rp_mm_kernel;

/* The best kernel for a weight type at or below `level` (the scalar reference
 * always exists for every computable type); NULL for a type with no kernel. */
const rp_mm_kernel *rp_mm_kernel_select(rp_type wtype, rp_cpu_level level);
/* Every registered kernel for a type (for tests: each SIMD kernel against the
 * reference). Returns the count written (<= cap). */
int rp_mm_kernel_list(rp_type wtype, const rp_mm_kernel **out, int cap);

/* ---------------------------------------------------------------------------
 * Element-wise kernels of the forward pass and the KV cache. swiglu: g[i] = silu(g[i]) * u[i]
 * with silu(x) = x / (1 + e^-x), for i < n (any n >= 0; g and u must not
 * overlap). The reference uses libm expf; the SIMD versions a polynomial e^x
 * of about 1 ulp, so they agree with it to a few ulp. Decode runs it on
 * n_ff floats per layer on one thread while the others wait, so it is worth
 * vectorizing (scalar expf was ~2 % of a 1B decode).
 * ------------------------------------------------------------------------- */
typedef struct rp_ew_kernel {
    const char *name;           /* e.g. "ew/avx512" */
    rp_cpu_level level;         /* minimum dispatch level */
    void (*swiglu)(float *g, const float *u, int64_t n);
    /* F32 <-> IEEE half rows, bit-identical to rp_fp32_to_fp16 (round to
     * nearest even) / rp_fp16_to_fp32 on every input: the F16 KV cache's
     * store, load and re-rotation paths */
    void (*f32_to_f16)(uint16_t *dst, const float *src, int64_t n);
    void (*f16_to_f32)(float *dst, const uint16_t *src, int64_t n);
} rp_ew_kernel;

const rp_ew_kernel *rp_ew_kernel_select(rp_cpu_level level);
int rp_ew_kernel_list(const rp_ew_kernel **out, int cap);

/* ---------------------------------------------------------------------------
 * Attention: rows of one sequence against its KV cache, for the query heads
 * that share one KV head (GQA). Row i attends cells [0, n_cells[i]) (or
 * [c_begin[i], n_cells[i]) for a sliding window) with a numerically stable
 * online softmax.
 * ------------------------------------------------------------------------- */
typedef struct rp_attn_args {
    const float *q;             /* row i, head h at q + i * q_stride + h * head_dim */
    int64_t q_stride;
    float *out;                 /* same layout as q */
    int64_t out_stride;
    int32_t n_rows;
    const int32_t *n_cells;     /* [n_rows], each >= 1 */
    int32_t head_begin;         /* query heads [head_begin, head_begin + n_heads) */
    int32_t n_heads;
    int32_t head_dim;
    /* the cache: K and V rows of `kv_row_bytes` per cell in kv_type, head
     * `kv_head` at element offset kv_head * head_dim within a row */
    const uint8_t *k;           /* cell c's K row at k + c * kv_row_bytes */
    const uint8_t *v;
    size_t kv_row_bytes;
    rp_type kv_type;            /* RP_TYPE_F32, RP_TYPE_F16 or RP_TYPE_Q8_0 */
    int32_t kv_head;
    float scale;                /* 1 / sqrt(head_dim) */
    void *scratch;              /* rp_attn_scratch_bytes() per thread */
    /* Partial mode (flash-decoding: one KV range of a longer sequence), when
     * non-NULL: out is left unnormalized (sum of e^(s - M) v) and, per query
     * vector qv = row * n_heads + (h - head_begin), ml[2 qv] = M (the range's
     * max score) and ml[2 qv + 1] = L (sum of e^(s - M)); rows may then have
     * n_cells 0 (M = -inf, L = 0, out = 0). rp_attn_merge combines ranges. */
    float *ml;
    /* Sliding-window attention (Gemma's local layers), when non-NULL: row i
     * attends cells [c_begin[i], n_cells[i]) only; a row with c_begin[i] >=
     * n_cells[i] has no cell (partial mode only). NULL: every row from cell 0. */
    const int32_t *c_begin;
    /* > 0: logit soft-capping (Gemma 2), each scaled score s becomes
     * softcap * tanh(s / softcap) before the softmax; 0: off. */
    float softcap;
} rp_attn_args;

typedef void (*rp_attn_fn)(const rp_attn_args *a);

typedef struct rp_attn_kernel {
    const char *name;
    rp_cpu_level level;
    rp_attn_fn fn;
} rp_attn_kernel;

/* Per-thread scratch any attention kernel needs for up to max_rows rows x
 * max_heads heads of head_dim (and a tile of cells). */
size_t rp_attn_scratch_bytes(int32_t head_dim, int32_t max_heads, int32_t max_rows);
/* Max rows one attention call may take (the forward pass splits longer runs). */
#define RP_ATTN_MAX_ROWS 64

const rp_attn_kernel *rp_attn_kernel_select(rp_type kv_type, rp_cpu_level level);
int rp_attn_kernel_list(rp_type kv_type, const rp_attn_kernel **out, int cap);

/* Reference kernels (always present). */
void rp_attn_ref(const rp_attn_args *a);

/* True when the scores of a kv_type cache round the query to Q8_0: a Q8_0
 * cache whose heads sit on whole 32-value blocks (head_dim a multiple of 32).
 * Every kernel, the reference included, then quantizes each query head as
 * rp_quantize_row(RP_TYPE_Q8_0) does (llama.cpp's vec_dot_type for a Q8_0 K
 * cache) and a score is scale * sum over blocks of d_q * d_k * (integer dot
 * of the block), as rp_vec_dot_ref(RP_TYPE_Q8_0) computes it; the SIMD
 * kernels differ from it by float rounding only, on every path (decode,
 * prefill, split). Other caches use the F32 query as it is. */
bool rp_attn_q8_query(rp_type kv_type, int32_t head_dim);

/* Combines n_parts partial results (rp_attn_args.ml) of nq query vectors of
 * head_dim: part p's unnormalized outputs at outs + p * part_stride, query
 * vector qv at + qv * head_dim, its (M, L) at mls + p * ml_stride + 2 qv. The
 * normalized result of qv goes to dst(qv) = dst + (qv / heads) * dst_stride +
 * (qv % heads) * head_dim. */
void rp_attn_merge(const float *outs, int64_t part_stride, const float *mls, int64_t ml_stride, int32_t n_parts,
                   int32_t nq,
                   int32_t heads, int32_t head_dim, float *dst, int64_t dst_stride);

/* ---------------------------------------------------------------------------
 * Row references of the forward pass (scalar; the GPU kernels are tested
 * against them). rmsnorm: out = x / sqrt(mean(x^2) + eps) * w (sum in double;
 * out may be x). rope: rotates the first n_rot dims of one head vector by
 * (cs[i], sn[i]), i < n_rot / 2; NORM pairs (2i, 2i+1), NEOX (i, i + n_rot/2).
 * ------------------------------------------------------------------------- */
void rp_rmsnorm_ref(float *out, const float *x, const float *w, int64_t n, float eps);
void rp_rope_ref(float *h, const float *cs, const float *sn, int32_t n_rot, bool neox);

#endif /* RP_KERNELS_KERNELS_H */
