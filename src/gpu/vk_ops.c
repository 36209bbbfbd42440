/* vk_ops.c — the forward pass's operations as dispatches (gpu_ops.h): kernels made once, push constants laid
 * out as each shader's `P` block (src/gpu/shaders). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/gpu_ops.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

#define WG 64u

/* every weight type the CPU computes (the mul_mat_* / get_rows_* modules of CMakeLists.txt) */
static const struct { rp_type t; const char *name; } wtypes[] = {
    {RP_TYPE_F32, "f32"},   {RP_TYPE_F16, "f16"},   {RP_TYPE_BF16, "bf16"},   {RP_TYPE_Q8_0, "q8_0"},
    {RP_TYPE_Q4_0, "q4_0"}, {RP_TYPE_Q4_1, "q4_1"}, {RP_TYPE_Q5_0, "q5_0"},   {RP_TYPE_Q5_1, "q5_1"},
    {RP_TYPE_IQ4_NL, "iq4_nl"}, {RP_TYPE_Q2_K, "q2_k"}, {RP_TYPE_Q3_K, "q3_k"}, {RP_TYPE_Q4_K, "q4_k"},
    {RP_TYPE_Q5_K, "q5_k"}, {RP_TYPE_Q6_K, "q6_k"}, {RP_TYPE_IQ4_XS, "iq4_xs"},
};
enum { MM_N = (int)(sizeof wtypes / sizeof wtypes[0]) };

struct rp_gpu_ops {
    rp_gpu *g;
    rp_gpu_kernel *mm[MM_N], *rows[MM_N];
    rp_gpu_kernel *rmsnorm, *rmsnorm_add, *rope, *rope_neox, *swiglu, *softmax, *kv_store_f16, *attn_f16;
    rp_gpu_kernel *kv_store_q8_0, *attn_q8_0;
};

static int wslot(rp_type t) {
    for (int i = 0; i < MM_N; i++)
        if (wtypes[i].t == t) return i;
    return -1;
}

bool rp_gpu_ops_has_type(rp_type t) { return wslot(t) >= 0; }

rp_status rp_gpu_ops_create(rp_gpu *g, rp_gpu_ops **out) {
    *out = NULL;
    rp_gpu_ops *o = calloc(1, sizeof *o);
    if (!o) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    o->g = g;
    const uint32_t wg[1] = {WG}, off[2] = {WG, 0}, on[2] = {WG, 1};
    rp_status st;
    /* the weight-type kernels (mul_mat_*, get_rows_*) are made on first use (weight_kernel): a model uses
     * a few of the 15 types, and each pipeline costs a shader compile in the driver */
    st = rp_gpu_kernel_create(g, "rmsnorm", 4, 5 * 4, off, 2, &o->rmsnorm);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "rmsnorm", 4, 5 * 4, on, 2, &o->rmsnorm_add);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "rope", 2, 6 * 4, off, 2, &o->rope);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "rope", 2, 6 * 4, on, 2, &o->rope_neox);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "swiglu", 2, 4, wg, 1, &o->swiglu);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "softmax", 1, 3 * 4, wg, 1, &o->softmax);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "kv_store_f16", 3, 6 * 4, wg, 1, &o->kv_store_f16);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "attn_f16", 5, 11 * 4, wg, 1, &o->attn_f16);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "kv_store_q8_0", 3, 6 * 4, wg, 1, &o->kv_store_q8_0);
    if (st == RP_OK) st = rp_gpu_kernel_create(g, "attn_q8_0", 5, 12 * 4, wg, 1, &o->attn_q8_0);
    if (st != RP_OK) {
        rp_gpu_ops_free(o);
        return st;
    }
    *out = o;
    return RP_OK;
}

void rp_gpu_ops_free(rp_gpu_ops *o) {
    if (!o) return;
    for (int i = 0; i < MM_N; i++) {
        rp_gpu_kernel_free(o->mm[i]);
        rp_gpu_kernel_free(o->rows[i]);
    }
    rp_gpu_kernel_free(o->rmsnorm);
    rp_gpu_kernel_free(o->rmsnorm_add);
    rp_gpu_kernel_free(o->rope);
    rp_gpu_kernel_free(o->rope_neox);
    rp_gpu_kernel_free(o->swiglu);
    rp_gpu_kernel_free(o->softmax);
    rp_gpu_kernel_free(o->kv_store_f16);
    rp_gpu_kernel_free(o->attn_f16);
    rp_gpu_kernel_free(o->kv_store_q8_0);
    rp_gpu_kernel_free(o->attn_q8_0);
    free(o);
}

/* bytes [off, off + n) lie inside b */
static bool fits(const rp_gpu_buf *b, uint64_t off, uint64_t n) {
    return b && off <= rp_gpu_buf_size(b) && n <= rp_gpu_buf_size(b) - off;
}
#define F4 4ull

static rp_status weight_check(const char *op, rp_type t, uint32_t cols, uint32_t row_bytes, int *slot) {
    *slot = wslot(t);
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    if (*slot < 0 || !tr) return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: %s: weight type %d has no GPU kernel", op, (int)t);
    if (cols % tr->blck_size) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: %s: %u columns is not a multiple of %s's "
                                                "block of %d", op, cols, tr->name, (int)tr->blck_size);
    if (row_bytes < rp_type_row_size(t, cols) || row_bytes % 2)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: %s: row stride %u bytes for %u %s columns", op, row_bytes, cols,
                         tr->name);
    return RP_OK;
}

/* The mul_mat (rows = 0) or get_rows (rows = 1) kernel of weight slot s, made on first use. */
static rp_status weight_kernel(rp_gpu_ops *o, int s, int rows, rp_gpu_kernel **out) {
    rp_gpu_kernel **k = rows ? &o->rows[s] : &o->mm[s];
    if (!*k) {
        const uint32_t wg[1] = {WG};
        char name[32];
        snprintf(name, sizeof name, "%s_%s", rows ? "get_rows" : "mul_mat", wtypes[s].name);
        RP_TRY(rp_gpu_kernel_create(o->g, name, 3, (rows ? 6 : 9) * 4, wg, 1, k));
    }
    *out = *k;
    return RP_OK;
}

rp_status rp_gpu_ops_prepare(rp_gpu_ops *o, rp_type t) {
    const int s = wslot(t);
    if (s < 0) return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: weight type %d has no GPU kernel", (int)t);
    rp_gpu_kernel *k;
    return weight_kernel(o, s, 0, &k);
}

rp_status rp_gpu_op_mul_mat(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_mm *a) {
    int s;
    rp_gpu_kernel *k;
    RP_TRY(weight_check("mul_mat", a->wtype, a->cols, a->row_bytes, &s));
    RP_TRY(weight_kernel(o, s, 0, &k));
    if (!a->rows || !a->n || a->w_off % 2 || a->ldx < a->cols || (a->n > 1 && a->ldy < a->rows))
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: mul_mat: %u x %u by %u rows (ldx %u, ldy %u, w_off %u)", a->rows,
                         a->cols, a->n, a->ldx, a->ldy, a->w_off);
    if (!fits(a->w, a->w_off, (uint64_t)a->rows * a->row_bytes) ||
        !fits(a->x, F4 * a->x_off, F4 * ((uint64_t)(a->n - 1) * a->ldx + a->cols)) ||
        !fits(a->y, F4 * a->y_off, F4 * ((uint64_t)(a->n - 1) * a->ldy + a->rows)))
        return rp_errorf(RP_ERR_RANGE, "gpu: mul_mat: a buffer is smaller than its shape");
    const uint32_t p[9] = {a->rows, a->cols, a->n, a->w_off, a->row_bytes, a->x_off, a->ldx, a->y_off, a->ldy};
    rp_gpu_buf *b[3] = {a->w, a->x, a->y};
    const uint32_t gx = a->rows < 32768 ? a->rows : 32768, gz = (a->rows + 32767) / 32768;
    return rp_gpu_rec_dispatch(r, k, b, p, gx, (a->n + 3) / 4, gz);
}

rp_status rp_gpu_op_get_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *w, rp_type wtype, uint32_t w_off,
                             uint32_t row_bytes, uint32_t cols, rp_gpu_buf *ids, uint32_t n, rp_gpu_buf *y,
                             uint32_t y_off, uint32_t ldy) {
    int s;
    rp_gpu_kernel *k;
    RP_TRY(weight_check("get_rows", wtype, cols, row_bytes, &s));
    RP_TRY(weight_kernel(o, s, 1, &k));
    if (!n || ldy < cols || w_off % 2) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: get_rows: %u ids, ldy %u", n, ldy);
    if (!fits(ids, 0, F4 * n) || !fits(y, F4 * y_off, F4 * ((uint64_t)(n - 1) * ldy + cols)))
        return rp_errorf(RP_ERR_RANGE, "gpu: get_rows: a buffer is smaller than its shape");
    /* the ids themselves are the caller's to keep within the matrix (the shader reads W row ids[i]) */
    const uint32_t p[6] = {n, cols, w_off, row_bytes, y_off, ldy};
    rp_gpu_buf *b[3] = {w, ids, y};
    return rp_gpu_rec_dispatch(r, k, b, p, n, 1, 1);
}

rp_status rp_gpu_op_rmsnorm(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, rp_gpu_buf *add, rp_gpu_buf *w,
                            rp_gpu_buf *out, uint32_t n, uint32_t rows, uint32_t ldx, uint32_t ldo, float eps) {
    if (!n || !rows || ldx < n || ldo < n) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: rmsnorm: %u rows of %u", rows, n);
    const uint64_t xb = F4 * ((uint64_t)(rows - 1) * ldx + n);
    if (!fits(x, 0, xb) || !fits(w, 0, F4 * n) || !fits(out, 0, F4 * ((uint64_t)(rows - 1) * ldo + n)) ||
        (add && !fits(add, 0, xb)))
        return rp_errorf(RP_ERR_RANGE, "gpu: rmsnorm: a buffer is smaller than its shape");
    struct { uint32_t n, rows, ldx, ldo; float eps; } p = {n, rows, ldx, ldo, eps};
    rp_gpu_buf *b[4] = {x, w, out, add ? add : x};
    return rp_gpu_rec_dispatch(r, add ? o->rmsnorm_add : o->rmsnorm, b, &p, rows, 1, 1);
}

rp_status rp_gpu_op_rope(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx, uint32_t rows,
                         uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, rp_gpu_buf *cs) {
    if (!rows || !n_heads || n_rot % 2 || n_rot > head_dim || ldx < n_heads * head_dim)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: rope: %u rows, %u heads of %u, n_rot %u, ldx %u", rows, n_heads,
                         head_dim, n_rot, ldx);
    if (!fits(x, F4 * x_off, F4 * ((uint64_t)(rows - 1) * ldx + (uint64_t)n_heads * head_dim)) ||
        !fits(cs, 0, F4 * rows * n_rot))
        return rp_errorf(RP_ERR_RANGE, "gpu: rope: a buffer is smaller than its shape");
    const uint32_t p[6] = {rows, n_heads, head_dim, n_rot, ldx, x_off};
    rp_gpu_buf *b[2] = {x, cs};
    return rp_gpu_rec_dispatch(r, neox ? o->rope_neox : o->rope, b, p, rows, 1, 1);
}

rp_status rp_gpu_op_swiglu(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *g, rp_gpu_buf *u, uint32_t n) {
    if (!n) return RP_OK;
    if (!fits(g, 0, F4 * n) || !fits(u, 0, F4 * n)) return rp_errorf(RP_ERR_RANGE, "gpu: swiglu: buffers < %u", n);
    const uint32_t groups = (n + WG - 1) / WG, gx = groups < 32768 ? groups : 32768, gy = (groups + gx - 1) / gx;
    const uint32_t p[1] = {n};
    rp_gpu_buf *b[2] = {g, u};
    return rp_gpu_rec_dispatch(r, o->swiglu, b, p, gx, gy, 1);
}

rp_status rp_gpu_op_softmax(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t n, uint32_t rows, uint32_t ldx) {
    if (!n || !rows || ldx < n) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: softmax: %u rows of %u", rows, n);
    if (!fits(x, 0, F4 * ((uint64_t)(rows - 1) * ldx + n))) return rp_errorf(RP_ERR_RANGE, "gpu: softmax: buffer");
    const uint32_t p[3] = {n, rows, ldx};
    rp_gpu_buf *b[1] = {x};
    return rp_gpu_rec_dispatch(r, o->softmax, b, p, rows, 1, 1);
}

rp_status rp_gpu_op_kv_store_f16_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                      uint32_t r0, uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k,
                                      uint32_t k_off) {
    if (!n || !kd || kd % 2 || k_off % 2 || ldx < kd)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: kv_store: %u rows of %u (k_off %u)", n, kd, k_off);
    if (!fits(x, F4 * x_off, F4 * ((uint64_t)(r0 + n - 1) * ldx + kd)) || !fits(cells, 0, F4 * ((uint64_t)r0 + n)))
        return rp_errorf(RP_ERR_RANGE, "gpu: kv_store: a buffer is smaller than its shape");
    const uint32_t p[6] = {n, kd, ldx, x_off, k_off, r0};
    rp_gpu_buf *b[3] = {x, cells, k};
    return rp_gpu_rec_dispatch(r, o->kv_store_f16, b, p, n, 1, 1);
}

rp_status rp_gpu_op_kv_store_f16(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                 uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k, uint32_t k_off) {
    return rp_gpu_op_kv_store_f16_rows(o, r, x, x_off, ldx, 0, n, kd, cells, k, k_off);
}

rp_status rp_gpu_op_kv_store_q8_0_rows(rp_gpu_ops *o, rp_gpu_rec *r, rp_gpu_buf *x, uint32_t x_off, uint32_t ldx,
                                       uint32_t r0, uint32_t n, uint32_t kd, rp_gpu_buf *cells, rp_gpu_buf *k,
                                       uint32_t k_off) {
    if (!n || !kd || kd % 32 || kd > 8192 || k_off % 2 || ldx < kd)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: kv_store q8_0: %u rows of %u (a multiple of 32, <= 8192; k_off %u "
                                             "even)", n, kd, k_off);
    if (!fits(x, F4 * x_off, F4 * ((uint64_t)(r0 + n - 1) * ldx + kd)) || !fits(cells, 0, F4 * ((uint64_t)r0 + n)))
        return rp_errorf(RP_ERR_RANGE, "gpu: kv_store q8_0: a buffer is smaller than its shape");
    const uint32_t p[6] = {n, kd, ldx, x_off, k_off, r0};
    rp_gpu_buf *b[3] = {x, cells, k};
    return rp_gpu_rec_dispatch(r, o->kv_store_q8_0, b, p, n, 1, 1);
}

static rp_status attn(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_attn *a, bool q8) {
    if (!a->n_rows || !a->n_head || !a->n_head_kv || a->n_head % a->n_head_kv || !a->head_dim || a->head_dim > 256 ||
        a->ldq < a->n_head * a->head_dim || a->ldo < a->n_head * a->head_dim)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: attention: %u rows, %u / %u heads of %u (head_dim <= 256)",
                         a->n_rows, a->n_head, a->n_head_kv, a->head_dim);
    const uint64_t last = (uint64_t)a->r0 + a->n_rows - 1;
    const uint64_t qb = F4 * (last * a->ldq + (uint64_t)a->n_head * a->head_dim);
    if (!fits(a->q, 0, qb) || !fits(a->n_cells, 0, F4 * (last + 1)) ||
        !fits(a->out, 0, F4 * (last * a->ldo + (uint64_t)a->n_head * a->head_dim)) || !a->k ||
        !a->v)
        return rp_errorf(RP_ERR_RANGE, "gpu: attention: a buffer is smaller than its shape");
    const uint32_t kd = a->n_head_kv * a->head_dim, cell = q8 ? kd / 32 * 34 : kd;   /* halves, or Q8_0 bytes */
    if (q8 && (kd % 32 || a->k_off % 2 || a->v_off % 2))
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: attention over a Q8_0 cache: n_head_kv * head_dim %u is not whole "
                                             "32-element blocks (or an odd offset)", kd);
    /* q8q: the query rounded to Q8_0 (rp_attn_q8_query: heads on whole blocks) */
    struct { uint32_t n_rows, n_head, n_head_kv, head_dim, ldq, ldo, kd, k_off, v_off; float scale; uint32_t r0, q8q; } p = {
        a->n_rows, a->n_head, a->n_head_kv, a->head_dim, a->ldq, a->ldo, cell, a->k_off, a->v_off, a->scale, a->r0,
        rp_attn_q8_query(RP_TYPE_Q8_0, (int32_t)a->head_dim)};
    rp_gpu_buf *b[5] = {a->q, a->k, a->v, a->n_cells, a->out};
    return rp_gpu_rec_dispatch(r, q8 ? o->attn_q8_0 : o->attn_f16, b, &p, a->n_rows, a->n_head, 1);
}

rp_status rp_gpu_op_attn_f16(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_attn *a) { return attn(o, r, a, false); }
rp_status rp_gpu_op_attn_q8_0(rp_gpu_ops *o, rp_gpu_rec *r, const rp_gpu_attn *a) { return attn(o, r, a, true); }
