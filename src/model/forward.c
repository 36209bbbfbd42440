/* forward.c — the transformer forward pass (llama / qwen3 / qwen2 / phi3) over a multi-sequence batch. */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/gpu_offload.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

/* Flash-decoding split (attention over KV ranges, see att_plan): runs of at
 * most SPLIT_ROWS rows, aiming at ITEMS_PER_THREAD work items per thread,
 * ranges of at least MIN_CELLS cells. RP_ATTN_SPLIT=0 turns it off. */
#define RP_FWD_SPLIT_ROWS 4
#define RP_FWD_SPLIT_ITEMS_PER_THREAD 8
#define RP_FWD_SPLIT_MIN_CELLS 512

rp_status rp_batch_init(rp_batch *b, int32_t cap) {
    memset(b, 0, sizeof *b);
    if (cap <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "batch: capacity %d must be positive", cap);
    b->cap = cap;
    b->token = malloc(sizeof *b->token * (size_t)cap);
    b->seq = malloc(sizeof *b->seq * (size_t)cap);
    b->pos = malloc(sizeof *b->pos * (size_t)cap);
    b->cell = malloc(sizeof *b->cell * (size_t)cap);
    b->logits = malloc(sizeof *b->logits * (size_t)cap);
    if (!b->token || !b->seq || !b->pos || !b->cell || !b->logits) {
        rp_batch_free(b);
        return rp_errorf(RP_ERR_NOMEM, "batch: out of memory");
    }
    return RP_OK;
}

void rp_batch_free(rp_batch *b) {
    free(b->token);
    free(b->seq);
    free(b->pos);
    free(b->cell);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

rp_status rp_batch_add(rp_batch *b, rp_token tok, int32_t seq, int32_t pos, int32_t cell, bool logits) {
    if (b->n >= b->cap) return rp_errorf(RP_ERR_FULL, "batch: full at %d rows", b->cap);
    int32_t i = b->n++;
    b->token[i] = tok;
    b->seq[i] = seq;
    b->pos[i] = pos;
    b->cell[i] = cell;
    b->logits[i] = logits;
    return RP_OK;
}

rp_ctx_params rp_ctx_default_params(void) {
    rp_ctx_params p = {.n_batch = 512, .n_outputs = 64, .n_ctx_max = 4096, .n_threads = 2};
    return p;
}

struct rp_ctx {
    const rp_model *m;
    rp_ctx_params p;
    rp_pool *pool;
    /* activations, [n_batch x dim] each */
    float *x, *xb, *q, *k, *v, *att, *gate, *up;
    float *xo;            /* [n_outputs x n_embd] final hidden of output rows */
    float *logits;        /* [n_outputs x n_vocab] */
    int32_t n_out;
    int32_t n_hidden;     /* rows of xb holding output-normed hidden states (rp_forward_hidden); 0: none */
    float *rope_cs;       /* [n_batch x n_rot] cos | sin per row */
    float *rope_cs_local; /* the same for rope_local layers (gemma3); NULL when the model has one table */
    int32_t *c_begin;     /* [n_batch] sliding window: first attended cell per row (local layers) */
    int32_t *part_cb;     /* [split_cap][RP_FWD_SPLIT_ROWS] window start of each row in the item's range */
    int32_t *seq_min;     /* [n_batch] lowest cell of the row's sequence in the batch (ring layers' slide) */
    int32_t *ring_nc;     /* [n_batch] n_cells / c_begin relative to a ring layer's first held cell */
    int32_t *ring_cb;
    uint8_t *mark;        /* [n_ctx_max] validation scratch */
    rp_mm_scratch mm;     /* activation buffer + per-thread matmul scratch */
    void **att_scratch;   /* per thread, rp_attn_scratch_bytes() */
    int32_t *n_cells;     /* [n_batch] attention extent per row */
    int32_t *runs;        /* [2 * n_batch] (first row, row count) of attention runs */
    int32_t n_runs;
    /* flash-decoding: KV ranges of short runs as separate work items */
    int32_t split_cap;    /* items the partial buffers hold; 0: split off */
    float *part_out;      /* [split_cap][RP_FWD_SPLIT_ROWS x G x head_dim] unnormalized outputs */
    float *part_ml;       /* [split_cap][2 x RP_FWD_SPLIT_ROWS x G] (M, L) */
    int32_t *part_nc;     /* [split_cap][RP_FWD_SPLIT_ROWS] cells of each row in the item's range */
    int32_t last_split;   /* max ranges per (run, head) in the last forward */
    const rp_ew_kernel *ew;   /* element-wise kernels at the model's dispatch level */
    rp_layer_hook hook;
    void *hook_user;
    struct rp_gpu_fwd *gpu;   /* the model's GPU layers' side of this context (gpu/gpu_offload.h), or NULL */
};

static void *xalloc(size_t n_floats, bool *ok) {
    void *p = malloc(n_floats * sizeof(float) + 64);
    if (!p) *ok = false;
    return p;
}

rp_status rp_ctx_create(const rp_model *m, rp_ctx_params p, rp_ctx **out) {
    *out = NULL;
    if (!m || !m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "ctx: model has no weights (vocab-only?)");
    if (rp_arch_is_encoder(m->hp.arch))   /* bidirectional, no output head: encoder.c runs them, for embeddings */
        return rp_errorf(RP_ERR_UNSUPPORTED, "'%s' is a %s encoder, an embedding model: it does not generate text "
                         "(use `reprise embed`, or `reprise serve --embeddings` for /v1/embeddings)",
                         m->name[0] ? m->name : "the model", rp_arch_name(m->hp.arch));
    if (p.n_batch <= 0 || p.n_batch > 65536 || p.n_outputs <= 0 || p.n_outputs > p.n_batch || p.n_ctx_max <= 0 ||
        p.n_threads <= 0 || p.n_threads > 256)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "ctx: bad params (n_batch %d, n_outputs %d, n_ctx_max %d, n_threads %d)", p.n_batch,
                         p.n_outputs, p.n_ctx_max, p.n_threads);
    rp_ctx *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "ctx: out of memory");
    c->m = m;
    c->p = p;
    c->ew = rp_ew_kernel_select((rp_cpu_level)m->cpu_level);
    rp_status st = rp_pool_create(p.n_threads, &c->pool);
    if (st != RP_OK) { free(c); return st; }
    const rp_hparams *hp = &m->hp;
    const size_t B = (size_t)p.n_batch, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    const size_t QD = (size_t)hp->n_head * (size_t)hp->head_dim, KD = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    bool ok = true;
    c->x = xalloc(B * E, &ok);
    c->xb = xalloc(B * E, &ok);
    c->q = xalloc(B * QD, &ok);
    c->k = xalloc(B * KD, &ok);
    c->v = xalloc(B * KD, &ok);
    c->att = xalloc(B * QD, &ok);
    c->gate = xalloc(B * F, &ok);
    c->up = xalloc(B * F, &ok);
    c->xo = xalloc((size_t)p.n_outputs * E, &ok);
    c->logits = xalloc((size_t)p.n_outputs * (size_t)hp->n_vocab, &ok);
    c->rope_cs = xalloc(B * (size_t)hp->n_rot, &ok);
    if (m->rope_inv_freq_local) c->rope_cs_local = xalloc(B * (size_t)hp->n_rot, &ok);
    c->c_begin = malloc(sizeof(int32_t) * B);
    c->seq_min = malloc(sizeof(int32_t) * B);
    c->ring_nc = malloc(sizeof(int32_t) * B);
    c->ring_cb = malloc(sizeof(int32_t) * B);
    if (!c->c_begin || !c->seq_min || !c->ring_nc || !c->ring_cb) ok = false;
    c->mark = malloc((size_t)p.n_ctx_max);
    if (!c->mark) ok = false;
    int T = p.n_threads;
    c->att_scratch = calloc((size_t)T, sizeof(void *));
    c->n_cells = malloc(sizeof(int32_t) * B);
    c->runs = malloc(sizeof(int32_t) * 2 * B);
    if (!c->att_scratch || !c->n_cells || !c->runs) ok = false;
    const size_t G = (size_t)(hp->n_head / hp->n_head_kv);
    c->split_cap = RP_FWD_SPLIT_ITEMS_PER_THREAD * 2 * T;
    c->part_out = xalloc((size_t)c->split_cap * RP_FWD_SPLIT_ROWS * G * (size_t)hp->head_dim, &ok);
    c->part_ml = xalloc((size_t)c->split_cap * 2 * RP_FWD_SPLIT_ROWS * G, &ok);
    c->part_nc = malloc(sizeof(int32_t) * (size_t)c->split_cap * RP_FWD_SPLIT_ROWS);
    c->part_cb = malloc(sizeof(int32_t) * (size_t)c->split_cap * RP_FWD_SPLIT_ROWS);
    if (!c->part_nc || !c->part_cb) ok = false;
    const char *sp = getenv("RP_ATTN_SPLIT");
    if (sp && strcmp(sp, "0") == 0) c->split_cap = 0;
    size_t asz = rp_attn_scratch_bytes(hp->head_dim, hp->n_head / hp->n_head_kv, RP_ATTN_MAX_ROWS);
    for (int t = 0; ok && t < T; t++)
        if (!(c->att_scratch[t] = aligned_alloc(64, (asz + 63) & ~(size_t)63))) ok = false;
    /* matmul scratch sized for every weight at n_batch rows, once */
    for (int l = 0; ok && l < hp->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        const rp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; ok && i < sizeof ws / sizeof ws[0]; i++)
            if (rp_mm_scratch_reserve(&c->mm, T, ws[i], p.n_batch) != RP_OK) ok = false;
    }
    if (ok && rp_mm_scratch_reserve(&c->mm, T, &m->output, p.n_outputs) != RP_OK) ok = false;
    if (!ok) {
        rp_ctx_free(c);
        return rp_errorf(RP_ERR_NOMEM, "ctx: cannot allocate scratch for n_batch %d", p.n_batch);
    }
    if (m->gpu && (st = rp_gpu_fwd_create(m->gpu, p.n_batch, p.n_outputs, &c->gpu)) != RP_OK) {
        rp_ctx_free(c);
        return st;
    }
    *out = c;
    return RP_OK;
}

void rp_ctx_free(rp_ctx *c) {
    if (!c) return;
    rp_gpu_fwd_free(c->gpu);
    rp_pool_free(c->pool);
    free(c->x); free(c->xb); free(c->q); free(c->k); free(c->v); free(c->att);
    free(c->gate); free(c->up); free(c->xo); free(c->logits); free(c->rope_cs); free(c->mark);
    free(c->rope_cs_local); free(c->c_begin); free(c->part_cb);
    free(c->seq_min); free(c->ring_nc); free(c->ring_cb);
    for (int t = 0; c->att_scratch && t < c->p.n_threads; t++) free(c->att_scratch[t]);
    free(c->att_scratch);
    free(c->n_cells);
    free(c->runs);
    free(c->part_out); free(c->part_ml); free(c->part_nc);
    rp_mm_scratch_free(&c->mm);
    free(c);
}

const rp_model *rp_ctx_model(const rp_ctx *c) { return c->m; }
rp_ctx_params rp_ctx_get_params(const rp_ctx *c) { return c->p; }
int32_t rp_ctx_n_outputs(const rp_ctx *c) { return c->n_out; }
rp_pool *rp_ctx_pool(rp_ctx *c) { return c->pool; }
int32_t rp_ctx_last_attn_split(const rp_ctx *c) { return c->last_split; }

void rp_ctx_set_layer_hook(rp_ctx *c, rp_layer_hook fn, void *user) {
    c->hook = fn;
    c->hook_user = user;
}

void rp_ctx_layer_begin(rp_ctx *c, int32_t layer) {
    if (c->hook) c->hook(c->hook_user, layer);
}
const float *rp_ctx_logits(const rp_ctx *c, int32_t i) {
    if (i < 0 || i >= c->n_out) return NULL;
    return c->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

/* ---- elementwise pieces ---- */

/* ---- attention ----
 * Work items are (run, KV head, KV range): a run is up to RP_ATTN_MAX_ROWS
 * consecutive batch rows of one sequence, so a prefill's query rows share each
 * K/V tile they load; the query heads of one KV head (GQA group) go together,
 * so each KV row is read once per group. When there are few (run, head) pairs
 * for the threads (decode: one run of one row), each pair's cells are split
 * into ranges (flash-decoding): every range is an item with its own partial
 * softmax, and the ranges are merged after the loop. More, smaller items also
 * let the pool's stealing even out a descheduled worker. */

typedef struct {
    rp_ctx *c;
    const rp_batch *b;
    rp_kv *const *kvs;
    int32_t layer;
    int32_t n_runs;
    int32_t n_split;                 /* ranges per (run, head); 1: no split */
    int32_t range;                   /* cells per range (a multiple of the kernels' tile) */
    const rp_attn_kernel *kern[3];   /* by kv type: f32, f16, q8_0 */
    bool ring;                       /* a ring layer of some row's cache: cells from c->ring_nc / ring_cb */
} att_job;

static int kv_slot(rp_type t) { return t == RP_TYPE_F32 ? 0 : t == RP_TYPE_F16 ? 1 : 2; }

static void att_body(void *vp, int64_t ib, int64_t ie, int tid) {
    const att_job *j = vp;
    rp_ctx *c = j->c;
    const rp_hparams *hp = &c->m->hp;
    const int32_t HK = hp->n_head_kv, HD = hp->head_dim, G = hp->n_head / hp->n_head_kv;
    const int64_t QD = (int64_t)hp->n_head * HD;
    const int32_t S = j->n_split;
    for (int64_t it = ib; it < ie; it++) {
        int32_t run = (int32_t)(it / ((int64_t)HK * S)), g = (int32_t)(it / S % HK), piece = (int32_t)(it % S);
        int32_t r0 = c->runs[2 * run], nr = c->runs[2 * run + 1];
        const rp_kv *kv = j->kvs[j->b->seq[r0]];
        rp_attn_args a = {
            .q = c->q + (int64_t)r0 * QD, .q_stride = QD,
            .out = c->att + (int64_t)r0 * QD, .out_stride = QD,
            .n_rows = nr, .n_cells = c->n_cells + r0,
            .head_begin = g * G, .n_heads = G, .head_dim = HD,
            .scale = rp_model_attn_scale(c->m), .scratch = c->att_scratch[tid],
            .c_begin = c->m->layers[j->layer].window > 0 ? c->c_begin + r0 : NULL,
            .softcap = hp->attn_softcap,
        };
        if (j->ring) {   /* cells relative to the layer's first held one (rp_kv_attn_view's pointers) */
            a.n_cells = c->ring_nc + r0;
            a.c_begin = c->ring_cb + r0;
        }
        rp_kv_attn_view(kv, j->layer, g, &a);
        if (S > 1) {
            /* range [c0, c0 + range) of the cells: shifted cache pointers,
             * per-row cell counts clipped to the range, partial outputs */
            const int32_t c0 = piece * j->range;
            int32_t *nc = c->part_nc + it * RP_FWD_SPLIT_ROWS;
            for (int32_t i = 0; i < nr; i++) {
                int32_t v = c->n_cells[r0 + i] - c0;
                nc[i] = v < 0 ? 0 : v < j->range ? v : j->range;
            }
            if (a.c_begin) {   /* the window's start within the range; a range before it is empty */
                int32_t *cb = c->part_cb + it * RP_FWD_SPLIT_ROWS;
                for (int32_t i = 0; i < nr; i++) {
                    int32_t v = a.c_begin[i] - c0;
                    cb[i] = v < 0 ? 0 : v;
                    if (cb[i] >= nc[i]) cb[i] = nc[i] = 0;
                }
                a.c_begin = cb;
            }
            a.n_cells = nc;
            a.k += (size_t)c0 * a.kv_row_bytes;
            a.v += (size_t)c0 * a.kv_row_bytes;
            a.out = c->part_out + it * RP_FWD_SPLIT_ROWS * G * HD - (int64_t)g * G * HD;
            a.out_stride = (int64_t)G * HD;
            a.ml = c->part_ml + it * 2 * RP_FWD_SPLIT_ROWS * G;
        }
        j->kern[kv_slot(kv->type)]->fn(&a);
    }
}

/* Ranges per (run, head) for this batch: split only runs of few rows, when the
 * (run, head) pairs are fewer than RP_FWD_SPLIT_ITEMS_PER_THREAD per thread,
 * into ranges of at least RP_FWD_SPLIT_MIN_CELLS. */
static void att_plan(const rp_ctx *c, att_job *j) {
    const int32_t HK = c->m->hp.n_head_kv;
    j->n_split = 1;
    j->range = 0;
    const int64_t pairs = (int64_t)j->n_runs * HK;
    const int64_t want = (int64_t)RP_FWD_SPLIT_ITEMS_PER_THREAD * rp_pool_active(c->pool);
    if (pairs >= want || c->split_cap == 0) return;
    int32_t maxc = 0;
    for (int32_t r = 0; r < j->n_runs; r++) {
        if (c->runs[2 * r + 1] > RP_FWD_SPLIT_ROWS) return;
        for (int32_t i = 0; i < c->runs[2 * r + 1]; i++) {
            int32_t v = c->n_cells[c->runs[2 * r] + i];
            maxc = v > maxc ? v : maxc;
        }
    }
    int64_t s = (want + pairs - 1) / pairs;
    if (s > maxc / RP_FWD_SPLIT_MIN_CELLS) s = maxc / RP_FWD_SPLIT_MIN_CELLS;
    if (s * pairs > c->split_cap) s = c->split_cap / pairs;
    if (s <= 1) return;
    int32_t range = (int32_t)((maxc + s - 1) / s);
    range = (range + 63) / 64 * 64;   /* whole tiles of the SIMD kernels */
    j->n_split = (int32_t)((maxc + range - 1) / range);
    j->range = range;
}

/* After a split loop: each (run, head)'s ranges merged into c->att. */
static void att_merge(rp_ctx *c, const att_job *j) {
    const rp_hparams *hp = &c->m->hp;
    const int32_t HK = hp->n_head_kv, HD = hp->head_dim, G = hp->n_head / hp->n_head_kv, S = j->n_split;
    const int64_t QD = (int64_t)hp->n_head * HD;
    for (int32_t run = 0; run < j->n_runs; run++) {
        const int32_t r0 = c->runs[2 * run], nr = c->runs[2 * run + 1];
        for (int32_t g = 0; g < HK; g++) {
            const int64_t it0 = ((int64_t)run * HK + g) * S;
            rp_attn_merge(c->part_out + it0 * RP_FWD_SPLIT_ROWS * G * HD, (int64_t)RP_FWD_SPLIT_ROWS * G * HD,
                          c->part_ml + it0 * 2 * RP_FWD_SPLIT_ROWS * G, 2 * RP_FWD_SPLIT_ROWS * G, S, nr * G, G, HD,
                          c->att + (int64_t)r0 * QD + (int64_t)g * G * HD, QD);
        }
    }
}

/* Splits the batch into attention runs (same sequence, consecutive rows). */
static int32_t build_runs(rp_ctx *c, const rp_batch *b) {
    int32_t n_runs = 0;
    for (int32_t i = 0; i < b->n;) {
        int32_t e = i + 1;
        while (e < b->n && e - i < RP_ATTN_MAX_ROWS && b->seq[e] == b->seq[i]) e++;
        c->runs[2 * n_runs] = i;
        c->runs[2 * n_runs + 1] = e - i;
        n_runs++;
        i = e;
    }
    for (int32_t i = 0; i < b->n; i++) c->n_cells[i] = b->cell[i] + 1;
    return n_runs;
}

/* ---- the pass ---- */

static rp_status validate(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs) {
    const rp_hparams *hp = &c->m->hp;
    if (b->n <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "forward: empty batch");
    if (b->n > c->p.n_batch)
        return rp_errorf(RP_ERR_RANGE, "forward: batch of %d rows exceeds n_batch %d", b->n, c->p.n_batch);
    int32_t n_out = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab)
            return rp_errorf(RP_ERR_RANGE, "forward: row %d token id %d not in [0, %d)", i, b->token[i], hp->n_vocab);
        if (b->seq[i] < 0 || b->seq[i] >= n_kvs || !kvs[b->seq[i]])
            return rp_errorf(RP_ERR_RANGE, "forward: row %d sequence %d not in [0, %d)", i, b->seq[i], n_kvs);
        const rp_kv *kv = kvs[b->seq[i]];
        if (kv->n_layer != hp->n_layer || kv->n_head_kv != hp->n_head_kv || kv->head_dim != hp->head_dim)
            return rp_errorf(RP_ERR_INVALID_ARG, "forward: sequence %d cache was made for another model", b->seq[i]);
        if (b->cell[i] < 0 || b->cell[i] >= kv->n_ctx)
            return rp_errorf(RP_ERR_RANGE, "forward: row %d cell %d not in [0, %d) (context full?)", i, b->cell[i],
                             kv->n_ctx);
        if (b->cell[i] >= c->p.n_ctx_max)
            return rp_errorf(RP_ERR_RANGE, "forward: row %d cell %d beyond the context's n_ctx_max %d", i,
                             b->cell[i], c->p.n_ctx_max);
        if (b->pos[i] < 0) return rp_errorf(RP_ERR_RANGE, "forward: row %d position %d negative", i, b->pos[i]);
        if (b->logits[i]) n_out++;
    }
    /* Every attended cell must be filled already or written by this batch:
     * per sequence, cells [kv->n, max cell written] must all be covered.
     * O(n * distinct sequences) with a mark array, no allocation. */
    for (int32_t i = 0; i < b->n; i++) {
        int32_t s = b->seq[i];
        bool first = true;
        for (int32_t r = 0; r < i && first; r++) first = b->seq[r] != s;
        if (!first) continue;
        const rp_kv *kv = kvs[s];
        int32_t hi = -1;
        for (int32_t r = i; r < b->n; r++)
            if (b->seq[r] == s && b->cell[r] > hi) hi = b->cell[r];
        if (hi < kv->n) continue;
        memset(c->mark + kv->n, 0, (size_t)(hi - kv->n + 1));
        for (int32_t r = i; r < b->n; r++)
            if (b->seq[r] == s && b->cell[r] >= kv->n) c->mark[b->cell[r]] = 1;
        for (int32_t cc = kv->n; cc <= hi; cc++)
            if (!c->mark[cc])
                return rp_errorf(RP_ERR_RANGE, "forward: sequence %d: cell %d is attended but neither cached nor in the batch",
                                 s, cc);
    }
    /* Ring layers (sliding-window layers holding swa_cells cells): per sequence, the cells its rows attend,
     * [lowest cell - window + 1, highest cell], must be held once the layer has slid to that start. */
    for (int32_t i = 0; i < b->n; i++) {
        const int32_t s = b->seq[i];
        const rp_kv *kv = kvs[s];
        if (kv->n_ring == 0) continue;
        bool first = true;
        for (int32_t r = 0; r < i && first; r++) first = b->seq[r] != s;
        if (!first) continue;
        int32_t lo = b->cell[i], hi = b->cell[i], lo_pos = b->pos[i];
        for (int32_t r = i; r < b->n; r++)
            if (b->seq[r] == s) {
                if (b->cell[r] < lo) { lo = b->cell[r]; lo_pos = b->pos[r]; }
                if (b->cell[r] > hi) hi = b->cell[r];
            }
        for (int32_t l = 0; l < kv->n_layer; l++) {
            if (!kv->ring[l]) continue;
            const int32_t w = kv->window[l], need = lo - w + 1 > 0 ? lo - w + 1 : 0;
            if (need < kv->base[l])
                return rp_errorf(RP_ERR_RANGE,
                                 "forward: sequence %d: the sliding-window cache holds cells from %d on, but cell %d "
                                 "attends from cell %d (rolled back past the window: recompute from the start, or use "
                                 "a full cache, --swa-full)",
                                 s, kv->base[l], lo, need);
            if (hi - need >= kv->swa_cells)
                return rp_errorf(RP_ERR_RANGE,
                                 "forward: sequence %d: rows at cells %d..%d with window %d need %d cells of the "
                                 "sliding-window cache, it holds %d (a longer batch than it was made for: use --swa-full)",
                                 s, lo, hi, w, hi - need + 1, kv->swa_cells);
            /* positions strictly increase over cells: the cell before `need` is outside the lowest row's window */
            if (need > 0 && need - 1 < kv->n && (int64_t)kv->pos[need - 1] > (int64_t)lo_pos - w)
                return rp_errorf(RP_ERR_RANGE,
                                 "forward: sequence %d: positions do not increase over cells (cell %d at %d, cell %d "
                                 "at %d): the sliding-window cache cannot hold the window (use --swa-full)",
                                 s, need - 1, kv->pos[need - 1], lo, lo_pos);
        }
    }
    if (n_out > c->p.n_outputs)
        return rp_errorf(RP_ERR_RANGE, "forward: %d output rows exceed n_outputs %d", n_out, c->p.n_outputs);
    return RP_OK;
}

/* ---- the pass, in steps (the reuse layer drives them one layer at a time) ---- */

rp_status rp_fwd_begin(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs) {
    RP_TRY(validate(c, b, kvs, n_kvs));
    c->n_hidden = 0;   /* xb is scratch from here on */
    const rp_model *m = c->m;
    const rp_hparams *hp = &m->hp;
    const int32_t n = b->n, E = hp->n_embd, R = hp->n_rot;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd.data + (size_t)b->token[i] * m->tok_embd.row_bytes;
        rp_dequantize_row(m->tok_embd.type, row, c->x + (size_t)i * E, E);
        if (hp->emb_scale > 0)   /* gemma: embeddings times sqrt(n_embd) */
            for (int32_t e = 0; e < E; e++) c->x[(size_t)i * E + e] *= hp->emb_scale;
    }
    for (int32_t i = 0; i < n; i++)   /* the row's cache decides LongRoPE's short or long factors */
        rp_model_rope_cs_table(m, kvs[b->seq[i]]->rope_long ? m->rope_inv_freq_long : m->rope_inv_freq, b->pos[i],
                               c->rope_cs + (size_t)i * R, c->rope_cs + (size_t)i * R + R / 2);
    if (c->rope_cs_local)   /* gemma3's local layers: their own RoPE base */
        for (int32_t i = 0; i < n; i++)
            for (int32_t k = 0; k < R / 2; k++) {
                double th = (double)b->pos[i] * (double)m->rope_inv_freq_local[k];
                c->rope_cs_local[(size_t)i * R + k] = (float)cos(th);
                c->rope_cs_local[(size_t)i * R + R / 2 + k] = (float)sin(th);
            }
    c->n_runs = build_runs(c, b);
    c->last_split = 1;
    for (int32_t i = 0; i < n; i++) {   /* per row, its sequence's lowest cell (ring layers slide to its window) */
        int32_t lo = b->cell[i];
        if (kvs[b->seq[i]]->n_ring)
            for (int32_t r = 0; r < n; r++)
                if (b->seq[r] == b->seq[i] && b->cell[r] < lo) lo = b->cell[r];
        c->seq_min[i] = lo;
    }
    return RP_OK;
}

/* ---- row-parallel element-wise steps (norms, residuals, RoPE) ----
 * A prefill's rows split over the pool, so both cores stay busy for every
 * step of a layer; short batches (decode) run inline, cheaper than a wake-up. */

#define RP_FWD_ROWS_PAR 32   /* rows from which the steps below go parallel */

typedef enum { ROWS_NORM, ROWS_ADD, ROWS_ADD_NORM, ROWS_ROPE, ROWS_NORM_XB } rows_op;

typedef struct {
    rp_ctx *c;
    rows_op op;
    const float *w;        /* ROWS_NORM / ROWS_ADD_NORM: the norm weight */
    const rp_layer *L;     /* ROWS_ROPE: q/k norms */
} rows_job;

static void rope_rows(rp_ctx *c, const rp_layer *L, int64_t i0, int64_t i1);

static void rows_body(void *vp, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const rows_job *j = vp;
    rp_ctx *c = j->c;
    const rp_hparams *hp = &c->m->hp;
    const size_t E = (size_t)hp->n_embd;
    for (int64_t i = i0; i < i1 && j->op == ROWS_NORM_XB; i++) {   /* gemma's post-norms: xb = norm(xb) */
        float *xb = c->xb + (size_t)i * E;
        rp_rmsnorm_ref(xb, xb, j->w, (int64_t)E, hp->rms_eps);
    }
    for (int64_t i = i0; i < i1 && j->op != ROWS_ROPE && j->op != ROWS_NORM_XB; i++) {
        float *x = c->x + (size_t)i * E, *xb = c->xb + (size_t)i * E;
        if (j->op != ROWS_NORM)
            for (size_t e = 0; e < E; e++) x[e] += xb[e];
        if (j->op != ROWS_ADD) rp_rmsnorm_ref(xb, x, j->w, (int64_t)E, hp->rms_eps);
    }
    if (j->op == ROWS_ROPE) rope_rows(c, j->L, i0, i1);
}

static void rows_run(rp_ctx *c, int32_t n, rows_op op, const float *w, const rp_layer *L) {
    rows_job j = {c, op, w, L};
    if (n < RP_FWD_ROWS_PAR) rows_body(&j, 0, n, 0);
    else rp_pool_parallel_for(c->pool, n, 4, rows_body, &j);
}

void rp_fwd_qkv(rp_ctx *c, const rp_batch *b, int32_t l) {
    const rp_hparams *hp = &c->m->hp;
    const rp_layer *L = &c->m->layers[l];
    const int32_t n = b->n, E = hp->n_embd, H = hp->n_head, HK = hp->n_head_kv, HD = hp->head_dim;
    const int32_t QD = H * HD, KD = HK * HD;
    rows_run(c, n, ROWS_NORM, L->attn_norm, NULL);
    /* one activation quantization serves q, k and v when their kernels agree */
    size_t st = rp_mm_quantize(c->pool, &L->wq, c->xb, n, E, &c->mm);
    if (rp_mm_same_act(&L->wq, &L->wk) && rp_mm_same_act(&L->wq, &L->wv)) {
        const rp_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *const ys[3] = {c->q, c->k, c->v};
        const int64_t lds[3] = {QD, KD, KD};
        rp_mm_run_multi(c->pool, ws, 3, n, st, ys, lds, &c->mm);
    } else {
        rp_mm_run(c->pool, &L->wq, 0, L->wq.rows, n, st, c->q, QD, &c->mm);
        if (!rp_mm_same_act(&L->wq, &L->wk)) st = rp_mm_quantize(c->pool, &L->wk, c->xb, n, E, &c->mm);
        rp_mm_run(c->pool, &L->wk, 0, L->wk.rows, n, st, c->k, KD, &c->mm);
        if (!rp_mm_same_act(&L->wk, &L->wv)) st = rp_mm_quantize(c->pool, &L->wv, c->xb, n, E, &c->mm);
        rp_mm_run(c->pool, &L->wv, 0, L->wv.rows, n, st, c->v, KD, &c->mm);
    }
    rows_run(c, n, ROWS_ROPE, NULL, L);
}

/* Rows [i0, i1): q/k/v biases (qwen2), q/k norms (qwen3) and RoPE of this layer's q and k. */
static void rope_rows(rp_ctx *c, const rp_layer *L, int64_t i0, int64_t i1) {
    const rp_hparams *hp = &c->m->hp;
    const int32_t H = hp->n_head, HK = hp->n_head_kv, HD = hp->head_dim;
    const int32_t QD = H * HD, KD = HK * HD, R = hp->n_rot;
    const float *tab = L->rope_local && c->rope_cs_local ? c->rope_cs_local : c->rope_cs;
    for (int64_t i = i0; i < i1; i++) {
        const float *cs = tab + (size_t)i * R, *sn = cs + R / 2;
        /* ---- qwen2: q/k/v biases, added to the projections before RoPE (as llama.cpp) ---- */
        if (L->bq) {
            float *q = c->q + (size_t)i * QD, *k = c->k + (size_t)i * KD, *v = c->v + (size_t)i * KD;
            for (int32_t e = 0; e < QD; e++) q[e] += L->bq[e];
            for (int32_t e = 0; e < KD; e++) k[e] += L->bk[e];
            for (int32_t e = 0; e < KD; e++) v[e] += L->bv[e];
        }
        /* ---- end of the biases ---- */
        for (int32_t h = 0; h < H; h++) {
            float *qh = c->q + (size_t)i * QD + (size_t)h * HD;
            if (L->q_norm) rp_rmsnorm_ref(qh, qh, L->q_norm, HD, hp->rms_eps);
            rp_rope_ref(qh, cs, sn, R, hp->rope_kind == RP_ROPE_NEOX);
        }
        for (int32_t h = 0; h < HK; h++) {
            float *kh = c->k + (size_t)i * KD + (size_t)h * HD;
            if (L->k_norm) rp_rmsnorm_ref(kh, kh, L->k_norm, HD, hp->rms_eps);
            rp_rope_ref(kh, cs, sn, R, hp->rope_kind == RP_ROPE_NEOX);
        }
    }
}

const float *rp_fwd_q(const rp_ctx *c) { return c->q; }
const float *rp_fwd_k(const rp_ctx *c) { return c->k; }
const float *rp_fwd_v(const rp_ctx *c) { return c->v; }

void rp_fwd_store(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t l) {
    const int32_t KD = c->m->hp.n_head_kv * c->m->hp.head_dim;
    for (int32_t i = 0; i < b->n; i++) {
        rp_kv *kv = kvs[b->seq[i]];
        if (kv->ring[l] && b->cell[i] >= kv->base[l] + kv->swa_cells) {
            /* past the held cells: slide them to the first one the sequence's rows attend (validated to fit) */
            const int32_t need = c->seq_min[i] - kv->window[l] + 1;
            rp_kv_slide(kv, l, need > 0 ? need : 0);
        }
        rp_kv_store_row(kv, RP_KV_K, l, b->cell[i], c->k + (size_t)i * KD);
        rp_kv_store_row(kv, RP_KV_V, l, b->cell[i], c->v + (size_t)i * KD);
        kv->pos[b->cell[i]] = b->pos[i];
        if (b->cell[i] + 1 > kv->n) kv->n = b->cell[i] + 1;
    }
}

/* ---- gemma hooks (arch_gemma.c has the model side) ---- */

/* Sliding window: c->c_begin[i] = the first cell row i attends in a local
 * layer, the lowest cell whose position q has pos - q < window (llama.cpp's
 * LLAMA_SWA_TYPE_STANDARD mask). Positions are non-decreasing over a
 * sequence's cells (prefill, decode, the reuse engine's placements at
 * positions == cells, context shift all keep them so), so a binary search
 * over [0, cell] finds it; the row's own cell always qualifies. */
static void window_begin(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t window) {
    for (int32_t i = 0; i < b->n; i++) {
        const rp_kv *kv = kvs[b->seq[i]];
        const int64_t lim = (int64_t)b->pos[i] - window;   /* cells at positions <= lim are outside */
        int32_t lo = 0, hi = b->cell[i];
        while (lo < hi) {
            const int32_t mid = lo + (hi - lo) / 2;
            if ((int64_t)kv->pos[mid] > lim) hi = mid;
            else lo = mid + 1;
        }
        c->c_begin[i] = lo;
    }
}

/* Ring layers: each row's cell range relative to its cache's first held cell of this layer (the attention
 * view's origin); a window start before it is clamped (validate refused batches that would need it). Returns
 * whether some row's cache has layer l as a ring. */
static bool ring_cells(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t l) {
    bool any = false;
    for (int32_t i = 0; i < b->n && !any; i++) any = kvs[b->seq[i]]->ring[l];
    if (!any) return false;
    for (int32_t i = 0; i < b->n; i++) {
        const rp_kv *kv = kvs[b->seq[i]];
        const int32_t off = kv->base[l];
        c->ring_nc[i] = c->n_cells[i] - off;
        c->ring_cb[i] = (c->c_begin[i] > off ? c->c_begin[i] : off) - off;
    }
    return true;
}

/* GeGLU: g = gelu_tanh(g) * u (the tanh approximation gemma uses, as ggml_gelu). */
static void geglu_body(void *vp, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    rp_ctx *c = vp;
    const float k = 0.7978845608028654f;   /* sqrt(2 / pi) */
    for (int64_t i = i0; i < i1; i++) {
        const float x = c->gate[i];
        c->gate[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * c->up[i];
    }
}

static void geglu_run(rp_ctx *c, int64_t n) {
    if (n < 16384) geglu_body(c, 0, n, 0);
    else rp_pool_parallel_for(c->pool, n, 4096, geglu_body, c);
}

void rp_fwd_attn_ffn(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t l) {
    const rp_model *m = c->m;
    const rp_hparams *hp = &m->hp;
    const rp_layer *L = &m->layers[l];
    const int32_t n = b->n, E = hp->n_embd, F = hp->n_ff, HK = hp->n_head_kv;
    const int32_t QD = hp->n_head * hp->head_dim;
    const rp_cpu_level lvl = (rp_cpu_level)m->cpu_level;
    if (L->window > 0) window_begin(c, b, kvs, L->window);
    att_job aj = {c, b, kvs, l, c->n_runs, 1, 0,
                  {rp_attn_kernel_select(RP_TYPE_F32, lvl), rp_attn_kernel_select(RP_TYPE_F16, lvl),
                   rp_attn_kernel_select(RP_TYPE_Q8_0, lvl)},
                  L->window > 0 && ring_cells(c, b, kvs, l)};
    /* tiny attention (short contexts, small heads) is cheaper inline than a wake-up */
    int64_t att_work = 0;
    for (int32_t i = 0; i < n; i++) att_work += (int64_t)c->n_cells[i] * hp->n_head * hp->head_dim;
    if (att_work < (1 << 16)) {
        att_body(&aj, 0, (int64_t)aj.n_runs * HK, 0);
    } else {
        if (!aj.ring) att_plan(c, &aj);   /* a ring layer's rows attend a window: no flash-decoding split */
        rp_pool_parallel_for(c->pool, (int64_t)aj.n_runs * HK * aj.n_split, 1, att_body, &aj);
        if (aj.n_split > 1) att_merge(c, &aj);
    }
    if (aj.n_split > c->last_split) c->last_split = aj.n_split;
    /* x += att · Woᵀ  (xb reused as the projection output) */
    rp_matmul(c->pool, &L->wo, c->att, n, QD, c->xb, E, &c->mm);
    if (L->attn_post_norm) rows_run(c, n, ROWS_NORM_XB, L->attn_post_norm, NULL);
    rows_run(c, n, ROWS_ADD_NORM, L->ffn_norm, NULL);   /* x += att·Woᵀ; xb = norm(x) */
    size_t st = rp_mm_quantize(c->pool, &L->w_gate, c->xb, n, E, &c->mm);
    if (rp_mm_same_act(&L->w_gate, &L->w_up)) {
        const rp_weight *ws[2] = {&L->w_gate, &L->w_up};
        float *const ys[2] = {c->gate, c->up};
        const int64_t lds[2] = {F, F};
        rp_mm_run_multi(c->pool, ws, 2, n, st, ys, lds, &c->mm);
    } else {
        rp_mm_run(c->pool, &L->w_gate, 0, L->w_gate.rows, n, st, c->gate, F, &c->mm);
        st = rp_mm_quantize(c->pool, &L->w_up, c->xb, n, E, &c->mm);
        rp_mm_run(c->pool, &L->w_up, 0, L->w_up.rows, n, st, c->up, F, &c->mm);
    }
    if (hp->ffn_gelu) geglu_run(c, (int64_t)n * F);
    else c->ew->swiglu(c->gate, c->up, (int64_t)n * F);
    rp_matmul(c->pool, &L->w_down, c->gate, n, F, c->xb, E, &c->mm);
    if (L->ffn_post_norm) rows_run(c, n, ROWS_NORM_XB, L->ffn_post_norm, NULL);
    rows_run(c, n, ROWS_ADD, NULL, NULL);
}

void rp_fwd_compact(rp_ctx *c, rp_batch *b, const int32_t *keep, int32_t n_keep) {
    const rp_hparams *hp = &c->m->hp;
    const size_t E = (size_t)hp->n_embd, R = (size_t)hp->n_rot;
    const size_t QD = (size_t)hp->n_head * (size_t)hp->head_dim, KD = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    for (int32_t j = 0; j < n_keep; j++) {
        int32_t i = keep[j];
        if (i == j) continue;
        /* hidden state, RoPE tables and this layer's q/k/v follow the row */
        memmove(c->x + (size_t)j * E, c->x + (size_t)i * E, E * sizeof(float));
        memmove(c->rope_cs + (size_t)j * R, c->rope_cs + (size_t)i * R, R * sizeof(float));
        if (c->rope_cs_local)
            memmove(c->rope_cs_local + (size_t)j * R, c->rope_cs_local + (size_t)i * R, R * sizeof(float));
        memmove(c->q + (size_t)j * QD, c->q + (size_t)i * QD, QD * sizeof(float));
        memmove(c->k + (size_t)j * KD, c->k + (size_t)i * KD, KD * sizeof(float));
        memmove(c->v + (size_t)j * KD, c->v + (size_t)i * KD, KD * sizeof(float));
        c->seq_min[j] = c->seq_min[i];
        b->token[j] = b->token[i];
        b->seq[j] = b->seq[i];
        b->pos[j] = b->pos[i];
        b->cell[j] = b->cell[i];
        b->logits[j] = b->logits[i];
    }
    b->n = n_keep;
    c->n_runs = build_runs(c, b);
}

rp_status rp_fwd_end(rp_ctx *c, const rp_batch *b) {
    const rp_model *m = c->m;
    const int32_t E = m->hp.n_embd;
    int32_t no = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (!b->logits[i]) continue;
        if (no >= c->p.n_outputs)
            return rp_errorf(RP_ERR_RANGE, "forward: more than n_outputs %d output rows", c->p.n_outputs);
        rp_rmsnorm_ref(c->xo + (size_t)no * E, c->x + (size_t)i * E, m->out_norm, E, m->hp.rms_eps);
        no++;
    }
    c->n_out = no;
    if (no > 0) rp_matmul(c->pool, &m->output, c->xo, no, E, c->logits, m->hp.n_vocab, &c->mm);
    const float cap = m->hp.final_softcap;
    if (cap > 0)   /* gemma2: logits soft-capped, cap * tanh(z / cap) */
        for (size_t i = 0; i < (size_t)no * (size_t)m->hp.n_vocab; i++) c->logits[i] = cap * tanhf(c->logits[i] / cap);
    return RP_OK;
}

/* ---- the GPU offload's seam: the CPU runs layers [0, cpu_layers), the GPU the rest in one call ---- */

static int32_t cpu_layers(const rp_ctx *c) { return c->gpu ? c->m->gpu_first : c->m->hp.n_layer; }

/* The GPU layers of this call (after the cached KV of each is in place: the reuse engine's layer hook), and the
 * output head there when `head` and the model has it there (c->n_out set; else -1 and c->x holds the final
 * hidden states for the CPU). */
static rp_status gpu_layers(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, bool head) {
    return rp_fwd_gpu_range(c, b, kvs, c->m->gpu_first, c->m->hp.n_layer, head);
}

int32_t rp_ctx_cpu_layers(const rp_ctx *c) { return cpu_layers(c); }

rp_status rp_fwd_gpu_range(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t l0, int32_t l1, bool head) {
    if (!c->gpu || l0 < c->m->gpu_first || l1 > c->m->hp.n_layer || l0 > l1)
        return rp_errorf(RP_ERR_RANGE, "forward: layers [%d, %d) are not GPU layers", l0, l1);
    for (int32_t l = l0; l < l1; l++) rp_ctx_layer_begin(c, l);
    int32_t n_out = -1;
    const int32_t g0 = c->m->gpu_first;
    RP_TRY(rp_gpu_fwd_run_range(c->gpu, b, kvs, c->x, c->rope_cs, l0 - g0, l1 - g0, head, c->xo, c->logits, &n_out));
    c->n_out = n_out;
    for (int32_t i = 0; i < b->n; i++) {   /* what rp_fwd_store records, when no CPU layer did */
        rp_kv *kv = kvs[b->seq[i]];
        kv->pos[b->cell[i]] = b->pos[i];
        if (b->cell[i] + 1 > kv->n) kv->n = b->cell[i] + 1;
    }
    return RP_OK;
}

bool rp_ctx_layers_on_cpu(const rp_ctx *c, int32_t n) { return n <= cpu_layers(c); }

const float *rp_ctx_out_hidden(const rp_ctx *c, int32_t i) {
    if (i < 0 || i >= c->n_out) return NULL;
    return c->xo + (size_t)i * (size_t)c->m->hp.n_embd;
}

/* Embeddings: the layers as rp_forward, then the output norm of every row into xb (the rows of ROWS_NORM, the
 * same rmsnorm rp_fwd_end applies to output rows), and no logits. */
rp_status rp_forward_hidden(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs) {
    RP_TRY(rp_fwd_begin(c, b, kvs, n_kvs));
    for (int32_t l = 0; l < cpu_layers(c); l++) {
        rp_ctx_layer_begin(c, l);
        rp_fwd_qkv(c, b, l);
        rp_fwd_store(c, b, kvs, l);
        rp_fwd_attn_ffn(c, b, kvs, l);
    }
    if (c->gpu) RP_TRY(gpu_layers(c, b, kvs, false));
    rows_run(c, b->n, ROWS_NORM, c->m->out_norm, NULL);
    c->n_out = 0;
    c->n_hidden = b->n;
    return RP_OK;
}

const float *rp_ctx_hidden(const rp_ctx *c, int32_t row) {
    if (row < 0 || row >= c->n_hidden) return NULL;
    return c->xb + (size_t)row * (size_t)c->m->hp.n_embd;
}

rp_status rp_forward(rp_ctx *c, const rp_batch *b, rp_kv *const *kvs, int32_t n_kvs) {
    RP_TRY(rp_fwd_begin(c, b, kvs, n_kvs));
    for (int32_t l = 0; l < cpu_layers(c); l++) {
        rp_ctx_layer_begin(c, l);
        rp_fwd_qkv(c, b, l);
        rp_fwd_store(c, b, kvs, l);
        rp_fwd_attn_ffn(c, b, kvs, l);
    }
    if (c->gpu) {
        RP_TRY(gpu_layers(c, b, kvs, true));
        if (c->n_out >= 0) return RP_OK;   /* the output head ran on the GPU */
    }
    return rp_fwd_end(c, b);
}
