/* vk_split.c — the CPU + GPU column-parallel matmul of gpu_split.h: the GPU shard submitted first, the CPU shard
 * computed meanwhile into the same mapped output, one timeline wait as the barrier (the cut and the calibration,
 * which need no device code, are in split.c; gpu_none.c answers for builds without Vulkan). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/gpu_split.h"

struct rp_split {
    rp_gpu *g;
    rp_gpu_ops *ops;
    rp_pool *pool;
    rp_gpu_rec *rec;
    rp_mm_scratch mm;
    void (*hook)(void *user);
    void *hook_user;
};

rp_status rp_split_create(rp_gpu *g, rp_gpu_ops *ops, rp_pool *pool, rp_split **out) {
    *out = NULL;
    if (!g || !ops || !pool) return rp_errorf(RP_ERR_INVALID_ARG, "split: needs a GPU, its ops and a thread pool");
    rp_split *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "split: out of memory");
    s->g = g;
    s->ops = ops;
    s->pool = pool;
    rp_status st = rp_gpu_rec_create(g, 4, &s->rec);
    if (st != RP_OK) {
        rp_split_free(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

void rp_split_free(rp_split *s) {
    if (!s) return;
    rp_gpu_rec_free(s->rec);
    rp_mm_scratch_free(&s->mm);
    free(s);
}

void rp_split_set_cpu_hook(rp_split *s, void (*fn)(void *user), void *user) {
    s->hook = fn;
    s->hook_user = user;
}

rp_status rp_split_mm(rp_split *s, const rp_split_mm_args *a, rp_split_times *t) {
    const double t0 = rp_split_clock_now(NULL);
    const rp_weight *w = a->w;
    if (!w || !w->k || !a->gw || !a->x || !a->y || a->n == 0 || a->ldx < w->cols || (a->n > 1 && a->ldy < w->rows))
        return rp_errorf(RP_ERR_INVALID_ARG, "split: a prepared weight, GPU buffers and n >= 1 rows (ldx %u, ldy %u) "
                                             "are needed", a->ldx, a->ldy);
    if (a->split < 0 || a->split > w->rows)
        return rp_errorf(RP_ERR_INVALID_ARG, "split: split row %lld outside [0, %lld]", (long long)a->split,
                         (long long)w->rows);
    const int64_t rb = w->k->row_block > 0 ? w->k->row_block : 1;
    if (a->split % rb && a->split != w->rows)
        return rp_errorf(RP_ERR_INVALID_ARG, "split: split row %lld is not a multiple of the CPU kernel's row block "
                                             "%lld (rp_split_point rounds it)", (long long)a->split, (long long)rb);
    float *x = rp_gpu_buf_map(a->x), *y = rp_gpu_buf_map(a->y);
    if (a->split > 0 && (!x || !y))
        return rp_errorf(RP_ERR_UNSUPPORTED, "split: the device's buffers cannot be mapped (a discrete GPU or "
                                             "RP_GPU_STAGING): the CPU half needs the shared output, not written yet");
    const size_t xneed = (size_t)a->x_off + (size_t)(a->n - 1) * a->ldx + (size_t)w->cols;
    const size_t yneed = (size_t)a->y_off + (size_t)(a->n - 1) * a->ldy + (size_t)w->rows;
    if (xneed * 4 > rp_gpu_buf_size(a->x) || yneed * 4 > rp_gpu_buf_size(a->y))
        return rp_errorf(RP_ERR_RANGE, "split: x or y is smaller than its shape");
    uint64_t ticket = 0;
    const int gpu = a->split < w->rows;
    if (gpu) {   /* the GPU shard first: rows [split, rows) of W and of each output row */
        if (w->row_bytes > UINT32_MAX || (uint64_t)a->gw_off + (uint64_t)a->split * w->row_bytes > UINT32_MAX)
            return rp_errorf(RP_ERR_RANGE, "split: the GPU shard starts past 4 GiB of its buffer");
        rp_gpu_mm m = {
            .w = a->gw, .x = a->x, .y = a->y, .wtype = w->type,
            .rows = (uint32_t)(w->rows - a->split), .cols = (uint32_t)w->cols, .n = a->n,
            .w_off = (uint32_t)(a->gw_off + (uint64_t)a->split * w->row_bytes), .row_bytes = (uint32_t)w->row_bytes,
            .x_off = a->x_off, .ldx = a->ldx, .y_off = a->y_off + (uint32_t)a->split, .ldy = a->ldy,
        };
        RP_TRY(rp_gpu_rec_begin(s->rec));
        rp_status st = rp_gpu_op_mul_mat(s->ops, s->rec, &m);
        if (st == RP_OK) st = rp_gpu_rec_submit(s->rec, &ticket);
        else (void)rp_gpu_rec_submit(s->rec, NULL);   /* close the recording; nothing in it */
        RP_TRY(st);
    }
    double tc = rp_split_clock_now(NULL);
    if (a->split > 0) {   /* the CPU shard meanwhile: rows [0, split) into the same output rows */
        rp_status st = rp_mm_scratch_reserve(&s->mm, rp_pool_n_threads(s->pool), w, a->n);
        if (st != RP_OK) {
            if (gpu) (void)rp_gpu_wait(s->g, ticket);
            return st;
        }
        if (s->hook) s->hook(s->hook_user);
        const size_t stride = rp_mm_quantize(s->pool, w, x + a->x_off, a->n, a->ldx, &s->mm);
        rp_mm_run(s->pool, w, 0, a->split, a->n, stride, y + a->y_off, a->ldy, &s->mm);
    }
    const double tw = rp_split_clock_now(NULL);
    if (gpu) RP_TRY(rp_gpu_wait(s->g, ticket));   /* the one barrier: both halves are written after it */
    const double te = rp_split_clock_now(NULL);
    if (t) {
        t->cpu_s = tw - tc;
        t->wait_s = te - tw;
        t->total_s = te - t0;
    }
    return RP_OK;
}
