/* matmul.c — matmul driver: kernel choice, one-time weight packing, activation quantization and row-range split. */
#include "kernels/matmul.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bigmem.h"
#include "core/error.h"

/* Work below this many multiply-adds runs on the calling thread. */
#define RP_MM_INLINE_MACS (1 << 16)

typedef struct {
    const rp_weight *w;
} pack_job;

static void pack_body(void *vp, int64_t g0, int64_t g1, int tid) {
    (void)tid;
    const rp_weight *w = ((pack_job *)vp)->w;
    w->k->pack(w->data, w->row_bytes, w->rows, w->cols, w->packed, g0, g1);
}

rp_status rp_weight_prepare(rp_weight *w, rp_cpu_level level, rp_pool *pool, bool release_source) {
    const rp_mm_kernel *k = rp_mm_kernel_select(w->type, level);
    if (!k) return rp_errorf(RP_ERR_UNSUPPORTED, "matmul: no kernel for weight type %d", (int)w->type);
    return rp_weight_prepare_with(w, k, pool, release_source);
}

rp_status rp_weight_prepare_with(rp_weight *w, const rp_mm_kernel *k, rp_pool *pool, bool release_source) {
    if (!k || k->wtype != w->type)
        return rp_errorf(RP_ERR_INVALID_ARG, "matmul: kernel does not take weight type %d", (int)w->type);
    w->k = k;
    w->packed = NULL;
    w->packed_bytes = 0;
    if (!k->pack) return RP_OK;
    size_t bytes = k->packed_size(w->rows, w->cols);
    w->packed = rp_bigmem_alloc(bytes);
    if (!w->packed) return rp_errorf(RP_ERR_NOMEM, "matmul: cannot allocate %zu bytes for a packed weight", bytes);
    w->packed_bytes = bytes;
    int64_t groups = (w->rows + k->row_block - 1) / k->row_block;
    pack_job j = {w};
    rp_pool_parallel_for(pool, groups, 16, pack_body, &j);
    if (release_source && w->data) {
        /* Drop the mapping's pages for this tensor from our RSS: the packed
         * copy replaces them. Only whole pages inside the tensor are released. */
        long pg = sysconf(_SC_PAGESIZE);
        uintptr_t b = ((uintptr_t)w->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        uintptr_t e = ((uintptr_t)w->data + w->row_bytes * (size_t)w->rows) & ~((uintptr_t)pg - 1);
        if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
    }
    return RP_OK;
}

void rp_weight_release(rp_weight *w) {
    rp_bigmem_free(w->packed, w->packed_bytes);
    w->packed = NULL;
    w->packed_bytes = 0;
}

rp_status rp_mm_scratch_reserve(rp_mm_scratch *s, int n_threads, const rp_weight *W, int64_t n) {
    size_t act = ((W->k->act_row_size(W->cols) + 63) & ~(size_t)63) * (size_t)n + 64;
    size_t thr = W->k->scratch_bytes ? W->k->scratch_bytes(W->cols, n) : 0;
    if (act > s->act_cap) {
        free(s->act);
        s->act = aligned_alloc(64, (act + 63) & ~(size_t)63);
        s->act_cap = s->act ? act : 0;
        if (!s->act) return rp_errorf(RP_ERR_NOMEM, "matmul: cannot allocate %zu bytes of activations", act);
    }
    if (!s->thr) {
        s->thr = calloc((size_t)n_threads, sizeof(void *));
        if (!s->thr) return rp_errorf(RP_ERR_NOMEM, "matmul: out of memory");
        s->n_threads = n_threads;
    }
    if (thr > s->thr_cap) {
        for (int t = 0; t < s->n_threads; t++) {
            free(s->thr[t]);
            s->thr[t] = aligned_alloc(64, (thr + 63) & ~(size_t)63);
            if (!s->thr[t]) { s->thr_cap = 0; return rp_errorf(RP_ERR_NOMEM, "matmul: out of memory"); }
        }
        s->thr_cap = thr;
    }
    return RP_OK;
}

void rp_mm_scratch_free(rp_mm_scratch *s) {
    free(s->act);
    if (s->thr)
        for (int t = 0; t < s->n_threads; t++) free(s->thr[t]);
    free(s->thr);
    memset(s, 0, sizeof *s);
}

typedef struct {
    const rp_weight *w;
    const float *x;
    int64_t ldx;
    uint8_t *act;
    size_t stride;
} quant_job;

static void quant_body(void *vp, int64_t b, int64_t e, int tid) {
    (void)tid;
    const quant_job *j = vp;
    for (int64_t i = b; i < e; i++) j->w->k->quant_act(j->x + i * j->ldx, j->act + (size_t)i * j->stride, j->w->cols);
}

size_t rp_mm_quantize(rp_pool *pool, const rp_weight *W, const float *x, int64_t n, int64_t ldx, rp_mm_scratch *s) {
    size_t stride = (W->k->act_row_size(W->cols) + 63) & ~(size_t)63;   /* rows start on cache lines */
    quant_job j = {W, x, ldx, s->act, stride};
    if (n * W->cols < RP_MM_INLINE_MACS) quant_body(&j, 0, n, 0);
    else rp_pool_parallel_for(pool, n, n >= 64 ? 16 : 4, quant_body, &j);
    return stride;
}

typedef struct {
    const rp_weight *w;
    int64_t r0, r1, n;
    size_t act_stride;
    float *y;
    int64_t ldy;
    rp_mm_scratch *s;
} run_job;

static void run_body(void *vp, int64_t g0, int64_t g1, int tid) {
    const run_job *j = vp;
    const rp_weight *w = j->w;
    const int64_t rb = w->k->row_block;
    int64_t a = j->r0 + g0 * rb, b = j->r0 + g1 * rb;
    if (b > j->r1) b = j->r1;
    const void *data = w->packed ? w->packed : w->data;
    w->k->gemm(data, w->row_bytes, w->rows, w->cols, j->s->act, j->act_stride, j->n, a, b, j->y, j->ldy,
               j->s->thr ? j->s->thr[tid] : NULL);
}

/* Decode (n < 4) streams weights: short claims break the hardware
 * prefetcher's streams, so a claim covers at least this many row groups. */
#define RP_MM_DECODE_MIN_GROUPS 8

/* Splits `groups` row groups over the pool and runs fn over them. */
static void run_groups(rp_pool *pool, int64_t groups, int64_t n, rp_pool_fn fn, void *arg) {
    const int T = pool ? rp_pool_n_threads(pool) : 1;
    if (n < 4) {
        /* guided claims: the first ones long (1/4 of the rows with 2
         * threads), the last ones RP_MM_DECODE_MIN_GROUPS, so neither
         * thread waits long for the other at the end of a matrix */
        rp_pool_parallel_for_guided(pool, groups, RP_MM_DECODE_MIN_GROUPS, fn, arg);
        return;
    }
    /* ~8 claims per thread balances uneven cores; fewer, larger chunks when
     * each group is already a lot of work (prefill) */
    int64_t chunk = groups / ((int64_t)T * 8);
    if (n >= 32) chunk = groups / ((int64_t)T * 4);
    rp_pool_parallel_for(pool, groups, chunk < 1 ? 1 : chunk, fn, arg);
}

void rp_mm_run(rp_pool *pool, const rp_weight *W, int64_t r0, int64_t r1, int64_t n, size_t act_stride, float *y,
               int64_t ldy, rp_mm_scratch *s) {
    if (r1 <= r0 || n <= 0) return;
    const int64_t rb = W->k->row_block;
    int64_t groups = (r1 - r0 + rb - 1) / rb;
    run_job j = {W, r0, r1, n, act_stride, y, ldy, s};
    /* below ~64k multiply-adds a wake-up of the other threads costs more than the work */
    if ((r1 - r0) * W->cols * n < RP_MM_INLINE_MACS) {
        run_body(&j, 0, groups, 0);
        return;
    }
    run_groups(pool, groups, n, run_body, &j);
}

typedef struct {
    run_job part[RP_MM_MULTI_MAX];
    int64_t first[RP_MM_MULTI_MAX + 1];   /* global index of each weight's first group; first[nw] = total */
    int nw;
} multi_job;

/* Global groups [g0, g1) may span several weights: each weight's share runs
 * as one kernel call over its own rows. */
static void multi_body(void *vp, int64_t g0, int64_t g1, int tid) {
    const multi_job *j = vp;
    for (int i = 0; i < j->nw && g0 < g1; i++) {
        const int64_t s = j->first[i], e = j->first[i + 1];
        if (g0 >= e) continue;
        const int64_t b = g1 < e ? g1 : e;
        run_body((void *)&j->part[i], g0 - s, b - s, tid);
        g0 = b;
    }
}

void rp_mm_run_multi(rp_pool *pool, const rp_weight *const *W, int nw, int64_t n, size_t act_stride, float *const *y,
                     const int64_t *ldy, rp_mm_scratch *s) {
    if (nw <= 0 || n <= 0) return;
    if (nw > RP_MM_MULTI_MAX) {   /* contract says at most RP_MM_MULTI_MAX; stay correct anyway */
        for (int i = 0; i < nw; i++) rp_mm_run(pool, W[i], 0, W[i]->rows, n, act_stride, y[i], ldy[i], s);
        return;
    }
    multi_job j;
    j.nw = nw;
    j.first[0] = 0;
    int64_t macs = 0;
    for (int i = 0; i < nw; i++) {
        const int64_t rb = W[i]->k->row_block;
        j.part[i] = (run_job){W[i], 0, W[i]->rows, n, act_stride, y[i], ldy[i], s};
        j.first[i + 1] = j.first[i] + (W[i]->rows + rb - 1) / rb;
        macs += W[i]->rows * W[i]->cols * n;
    }
    const int64_t groups = j.first[nw];
    if (groups <= 0) return;
    if (macs < RP_MM_INLINE_MACS) {
        multi_body(&j, 0, groups, 0);
        return;
    }
    run_groups(pool, groups, n, multi_body, &j);
}

void rp_matmul(rp_pool *pool, const rp_weight *W, const float *x, int64_t n, int64_t ldx, float *y, int64_t ldy,
               rp_mm_scratch *s) {
    size_t stride = rp_mm_quantize(pool, W, x, n, ldx, s);
    rp_mm_run(pool, W, 0, W->rows, n, stride, y, ldy, s);
}
