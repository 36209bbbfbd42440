/* blend.c — selective recompute: full layers up to the check layer, KV deviation ranking, then selected rows only. */
#include "reuse/blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

rp_blend_params rp_blend_default_params(void) {
    rp_blend_params p = {.check_layer = 1, .dev = RP_DEV_KV, .select = RP_SELECT_HYBRID};
    return p;
}

int rp_select_kind_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "hybrid")) return RP_SELECT_HYBRID;
    if (!strcmp(s, "dev")) return RP_SELECT_DEV;
    if (!strcmp(s, "attn")) return RP_SELECT_ATTN;
    return -1;
}

const char *rp_select_kind_name(rp_select_kind k) {
    return k == RP_SELECT_HYBRID ? "hybrid" : k == RP_SELECT_DEV ? "dev" : k == RP_SELECT_ATTN ? "attn" : "?";
}

rp_status rp_blend_ws_init(rp_blend_ws *ws, int32_t cap, int32_t n_cells, int32_t n_head, int32_t kv_dim) {
    memset(ws, 0, sizeof *ws);
    if (n_cells < cap) n_cells = cap;
    ws->cap = cap;
    ws->n_cells = n_cells;
    ws->n_head = n_head;
    ws->kv_dim = kv_dim;
    ws->dev = malloc(sizeof(float) * (size_t)cap);
    ws->imp = malloc(sizeof(float) * (size_t)cap);
    ws->rank = malloc(sizeof(rp_blend_rank) * (size_t)cap);
    ws->rank2 = malloc(sizeof(rp_blend_rank) * (size_t)cap);
    ws->keep = malloc(sizeof(int32_t) * (size_t)cap);
    ws->score = malloc(sizeof(float) * (size_t)n_head * (size_t)n_cells);
    ws->tmp = malloc(sizeof(float) * (size_t)kv_dim);
    if (!ws->dev || !ws->imp || !ws->rank || !ws->rank2 || !ws->keep || !ws->score || !ws->tmp) {
        rp_blend_ws_free(ws);
        return rp_errorf(RP_ERR_NOMEM, "blend: out of memory");
    }
    return RP_OK;
}

void rp_blend_ws_free(rp_blend_ws *ws) {
    free(ws->dev);
    free(ws->imp);
    free(ws->rank);
    free(ws->rank2);
    free(ws->keep);
    free(ws->score);
    free(ws->tmp);
    free(ws->gpu_rows);
    memset(ws, 0, sizeof *ws);
}

/* squared distance between a fresh row and a cached one (tmp) */
static float dev_of(const rp_kv *kv, const float *fresh, const float *tmp) {
    /* per KV head, squared error relative to the head's cached energy, summed:
     * heads with large activations would otherwise drown the others */
    double s = 0;
    for (int32_t h = 0; h < kv->n_head_kv; h++) {
        double e2 = 0, c2 = 1e-6;
        for (int32_t d = h * kv->head_dim; d < (h + 1) * kv->head_dim; d++) {
            double e = (double)fresh[d] - tmp[d];
            e2 += e * e;
            c2 += (double)tmp[d] * tmp[d];
        }
        s += e2 / c2;
    }
    return (float)s;
}

/* ... and the cached row in a cell */
static float row_dev(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, const float *fresh, float *tmp) {
    rp_kv_load_row(kv, part, layer, cell, tmp);
    return dev_of(kv, fresh, tmp);
}

static int by_rank_desc(const void *a, const void *b) {
    const rp_blend_rank *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->i - y->i;
}

static inline float dot(const float *a, const float *b, int32_t n) {
    /* four partial sums: lets the compiler vectorise without -ffast-math */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int32_t d = 0;
    for (; d + 4 <= n; d += 4) {
        s0 += a[d] * b[d];
        s1 += a[d + 1] * b[d + 1];
        s2 += a[d + 2] * b[d + 2];
        s3 += a[d + 3] * b[d + 3];
    }
    for (; d < n; d++) s0 += a[d] * b[d];
    return (s0 + s1) + (s2 + s3);
}

/* A forced row: a new row or the final row. Always computed past the check
 * layer, and the rows whose attention weighs the others' deviation. */
static inline bool is_forced(const rp_batch *b, const uint8_t *kinds, int32_t i) {
    return kinds[i] == RP_ROW_NEW || (kinds[i] != RP_ROW_PAD && b->logits[i]);
}

/* ws->imp[j] = attention the last RP_BLEND_QUERY_ROWS query rows pay batch
 * row j at layer l, summed over query rows and heads: softmax(q.k/sqrt(d))
 * over the cells each query row sees (the sequence's cells before the batch
 * and the batch rows up to it, PAD rows excluded), computed from the fresh
 * q/k of this layer. Cost: query rows x cells x n_head x head_dim.
 * Returns the number of query rows (0: a call of reused rows only, e.g. an
 * early window of a long prompt; the caller then ranks by deviation alone). */
static int32_t attention_paid(const rp_model *m, const rp_kv *kv, const rp_batch *b, const uint8_t *kinds, int32_t l,
                              const float *q, const float *k, rp_blend_ws *ws) {
    const int32_t H = m->hp.n_head, HK = m->hp.n_head_kv, HD = m->hp.head_dim;
    const int32_t KD = HK * HD, QD = H * HD, group = H / HK, n = b->n;
    const int32_t n_prior = b->cell[0] < ws->n_cells - n ? b->cell[0] : ws->n_cells - n;
    const int32_t W = n_prior + n;   /* score columns: prior cells, then batch rows */
    const float scale = rp_model_attn_scale(m), cap = m->hp.attn_softcap;
    const int32_t win = m->layers[l].window;   /* gemma's local layers: cells beyond the window get nothing */
    for (int32_t j = 0; j < n; j++) ws->imp[j] = 0;
    int32_t nq = 0;
    for (int32_t qi = n - 1; qi >= 0 && nq < RP_BLEND_QUERY_ROWS; qi--) {
        if (!is_forced(b, kinds, qi)) continue;
        nq++;
        const float *qr = q + (size_t)qi * QD;
        for (int32_t j = 0; j < n_prior; j++) {
            const int32_t cell = b->cell[0] - n_prior + j;
            if (win > 0 && (int64_t)b->pos[qi] - kv->pos[cell] >= win) {
                for (int32_t h = 0; h < H; h++) ws->score[(size_t)h * W + j] = -INFINITY;
                continue;
            }
            rp_kv_load_row(kv, RP_KV_K, l, cell, ws->tmp);
            for (int32_t h = 0; h < H; h++) {
                float sc = scale * dot(qr + (size_t)h * HD, ws->tmp + (size_t)(h / group) * HD, HD);
                ws->score[(size_t)h * W + j] = cap > 0 ? cap * tanhf(sc / cap) : sc;
            }
        }
        for (int32_t j = 0; j <= qi; j++) {
            const float *kr = k + (size_t)j * KD;
            const bool out = kinds[j] == RP_ROW_PAD || (win > 0 && (int64_t)b->pos[qi] - b->pos[j] >= win);
            for (int32_t h = 0; h < H; h++) {
                float sc = out ? -INFINITY : scale * dot(qr + (size_t)h * HD, kr + (size_t)(h / group) * HD, HD);
                ws->score[(size_t)h * W + n_prior + j] = cap > 0 && !out ? cap * tanhf(sc / cap) : sc;
            }
        }
        const int32_t w = n_prior + qi + 1;   /* causal: columns this row sees */
        for (int32_t h = 0; h < H; h++) {
            float *sc = ws->score + (size_t)h * W, mx = -INFINITY;
            for (int32_t j = 0; j < w; j++) mx = sc[j] > mx ? sc[j] : mx;
            double sum = 0;
            for (int32_t j = 0; j < w; j++) sum += (sc[j] = expf(sc[j] - mx));
            const float inv = (float)(1.0 / sum);
            for (int32_t j = 0; j <= qi; j++) ws->imp[j] += sc[n_prior + j] * inv;
        }
    }
    return nq;
}

/* Marks `take` candidate rows in ws->keep (zeroed by the caller) by the
 * selection rule; ws->rank holds the candidates with their deviation. */
static void select_rows(const rp_blend_params *p, rp_blend_ws *ws, int32_t n_cand, int32_t take) {
    if (p->select == RP_SELECT_DEV || take <= 0) {
        qsort(ws->rank, (size_t)n_cand, sizeof *ws->rank, by_rank_desc);
        for (int32_t k = 0; k < take; k++) ws->keep[ws->rank[k].i] = 1;
        return;
    }
    for (int32_t k = 0; k < n_cand; k++) {
        ws->rank2[k].i = ws->rank[k].i;
        ws->rank2[k].v = ws->rank[k].v * ws->imp[ws->rank[k].i];
    }
    qsort(ws->rank2, (size_t)n_cand, sizeof *ws->rank2, by_rank_desc);
    if (p->select == RP_SELECT_ATTN) {
        for (int32_t k = 0; k < take; k++) ws->keep[ws->rank2[k].i] = 1;
        return;
    }
    /* hybrid: alternately the next unchosen row of each ranking */
    qsort(ws->rank, (size_t)n_cand, sizeof *ws->rank, by_rank_desc);
    int32_t got = 0, a = 0, w = 0;
    while (got < take) {
        const bool from_w = (got & 1) == 0;
        int32_t *at = from_w ? &w : &a;
        const rp_blend_rank *r = from_w ? ws->rank2 : ws->rank;
        while (*at < n_cand && ws->keep[r[*at].i]) (*at)++;
        if (*at == n_cand) {   /* one ranking exhausted: the other has the rest */
            at = from_w ? &a : &w;
            r = from_w ? ws->rank : ws->rank2;
            while (*at < n_cand && ws->keep[r[*at].i]) (*at)++;
        }
        ws->keep[r[*at].i] = 1;
        got++;
    }
}

/* The check layer's choice, from ws->rank[0..n_cand) (deviations in ws->dev): the budget's best reuse rows (q / fk:
 * the layer's fresh queries and keys for the attention-weighted rules; NULL q: deviation alone), then every forced
 * row and the static shapes' PAD fillers, listed in ws->keep[0..nk) in row order. Returns nk. */
static int32_t choose(const rp_model *m, const rp_kv *kv, const rp_batch *b, const uint8_t *kinds, int32_t l,
                      const float *q, const float *fk, int32_t n_cand, int32_t budget, const rp_blend_params *p,
                      rp_blend_ws *ws, rp_blend_stats *st) {
    int32_t take = budget < n_cand ? (budget > 0 ? budget : 0) : n_cand;
    rp_blend_params sp = *p;
    if (p->select != RP_SELECT_DEV && take > 0 && take < n_cand &&
        (!q || attention_paid(m, kv, b, kinds, l, q, fk, ws) == 0))
        sp.select = RP_SELECT_DEV;   /* nothing in this call attends (or no queries here): deviation alone */
    /* mark the chosen rows, then list survivors in row order (nk <= i, so in place) */
    for (int32_t i = 0; i < b->n; i++) ws->keep[i] = 0;
    if (take < n_cand) select_rows(&sp, ws, n_cand, take);
    else for (int32_t k = 0; k < n_cand; k++) ws->keep[ws->rank[k].i] = 1;
    for (int32_t i = 0; i < b->n; i++)
        st->n_forced += is_forced(b, kinds, i);
    /* static shapes: PAD rows (never ranked above) fill the call up to
     * fixed_rows; their KV goes to cells past the prompt, dropped after */
    int32_t fill = p->fixed_rows > 0 ? p->fixed_rows - st->n_forced - take : 0;
    int32_t nk = 0;
    for (int32_t i = 0; i < b->n; i++) {
        bool forced = is_forced(b, kinds, i);
        bool filler = kinds[i] == RP_ROW_PAD && st->n_pad_kept < fill;
        st->n_pad_kept += filler;
        if (forced || filler || ws->keep[i]) ws->keep[nk++] = i;
    }
    st->n_selected = take;
    return nk;
}

/* The check layer on the GPU (the model's offload): layers [l0, check] run there for every row (they store fresh
 * KV at the check layer for every row, as the CPU path does), the deviation compares the check layer's cached rows,
 * read before, with the fresh ones read after, and the chosen rows are compacted for the layers after it. The
 * check layer's queries stay on the device, so the selection is by deviation alone (RP_SELECT_DEV). */
static rp_status gpu_check(rp_ctx *c, rp_kv *kv, rp_batch *b, const uint8_t *kinds, int32_t budget,
                           const rp_blend_params *p, rp_blend_ws *ws, rp_blend_stats *st, int32_t l0, int32_t check,
                           int32_t *nk) {
    const rp_model *m = rp_ctx_model(c);
    rp_kv *kvs[1] = {kv};
    const size_t rb = kv->row_bytes;
    if (!ws->gpu_rows) {   /* the first blend over GPU layers: the check layer's cached rows, a fresh one decoded */
        ws->gpu_rows = malloc(2 * rb * (size_t)ws->cap + rb + sizeof(float) * (size_t)kv->kv_dim + 16);
        if (!ws->gpu_rows) return rp_errorf(RP_ERR_NOMEM, "blend: out of memory");
    }
    uint8_t *cached = ws->gpu_rows, *fresh = ws->gpu_rows + 2 * rb * (size_t)ws->cap;
    float *fv = (float *)(((uintptr_t)(fresh + rb) + 15) & ~(uintptr_t)15);
    for (int32_t l = l0; l <= check; l++) rp_ctx_layer_begin(c, l);   /* the cached rows in place before reading */
    int32_t n_cand = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (kinds[i] != RP_ROW_REUSE || b->logits[i]) continue;
        for (int part = 0; part < 2; part++)
            rp_kv_read_rows(kv, (rp_kv_part)part, check, b->cell[i], 1, cached + (2 * (size_t)n_cand + part) * rb);
        ws->rank[n_cand++] = (rp_blend_rank){0, i};
    }
    RP_TRY(rp_fwd_gpu_range(c, b, kvs, l0, check + 1, false));
    for (int32_t k = 0; k < n_cand; k++) {
        const int32_t i = ws->rank[k].i;
        float d = 0;
        for (int part = 0; part < 2; part++) {
            if (!(p->dev & (part == 0 ? RP_DEV_K : RP_DEV_V))) continue;
            rp_kv_read_rows(kv, (rp_kv_part)part, check, b->cell[i], 1, fresh);
            rp_kv_decode_row(kv, fresh, fv);
            rp_kv_decode_row(kv, cached + (2 * (size_t)k + (size_t)part) * rb, ws->tmp);
            d += dev_of(kv, fv, ws->tmp);
        }
        ws->dev[i] = d;
        ws->rank[k].v = d;
    }
    *nk = choose(m, kv, b, kinds, check, NULL, NULL, n_cand, budget, p, ws, st);
    if (*nk > 0) rp_fwd_compact(c, b, ws->keep, *nk);
    return RP_OK;
}

rp_status rp_blend_run(rp_ctx *c, rp_kv *kv, rp_batch *b, const uint8_t *kinds, int32_t budget,
                       const rp_blend_params *p, rp_blend_ws *ws, rp_blend_stats *st) {
    const rp_model *m = rp_ctx_model(c);
    const int32_t n_layer = m->hp.n_layer, n = b->n, cpu_n = rp_ctx_cpu_layers(c);
    if (n > ws->cap) return rp_errorf(RP_ERR_RANGE, "blend: %d rows exceed the workspace's %d", n, ws->cap);
    if (m->hp.n_head > ws->n_head)
        return rp_errorf(RP_ERR_INVALID_ARG, "blend: workspace sized for %d heads, model has %d", ws->n_head, m->hp.n_head);
    if (p->check_layer < 0) return rp_errorf(RP_ERR_INVALID_ARG, "blend: check layer %d negative", p->check_layer);
    memset(st, 0, sizeof *st);
    st->n_rows = n;
    for (int32_t i = 0; i < n; i++) {
        if (b->seq[i] != 0) return rp_errorf(RP_ERR_INVALID_ARG, "blend: row %d is not in sequence 0", i);
        if (kinds[i] == RP_ROW_REUSE) st->n_reuse++;
        else if (kinds[i] == RP_ROW_NEW) st->n_new++;
        else st->n_pad++;
    }
    rp_kv *kvs[1] = {kv};
    RP_TRY(rp_fwd_begin(c, b, kvs, 1));
    const int32_t check = p->check_layer < n_layer ? p->check_layer : n_layer - 1;
    const int32_t KD = kv->kv_dim;
    bool checked = false;

    for (int32_t l = 0; l < cpu_n; l++) {
        rp_ctx_layer_begin(c, l);   /* the load pipeline may still be placing this layer */
        rp_fwd_qkv(c, b, l);
        if (l == check) {
            /* rank reuse rows by how far their cached KV is from the fresh one */
            const float *fk = rp_fwd_k(c), *fv = rp_fwd_v(c);
            int32_t n_cand = 0;
            for (int32_t i = 0; i < b->n; i++) {
                if (kinds[i] != RP_ROW_REUSE || b->logits[i]) continue;
                float d = 0;
                if (p->dev & RP_DEV_K) d += row_dev(kv, RP_KV_K, l, b->cell[i], fk + (size_t)i * KD, ws->tmp);
                if (p->dev & RP_DEV_V) d += row_dev(kv, RP_KV_V, l, b->cell[i], fv + (size_t)i * KD, ws->tmp);
                ws->dev[i] = d;
                ws->rank[n_cand++] = (rp_blend_rank){d, i};
            }
            const int32_t nk = choose(m, kv, b, kinds, l, rp_fwd_q(c), fk, n_cand, budget, p, ws, st);
            checked = true;
            rp_fwd_store(c, b, kvs, l);   /* fresh KV at the check layer for every row */
            if (nk == 0) {                 /* nothing left to compute (cannot happen with a final row) */
                b->n = 0;
                break;
            }
            /* from here every remaining row is computed: kinds are no longer consulted */
            rp_fwd_compact(c, b, ws->keep, nk);
            rp_fwd_attn_ffn(c, b, kvs, l);
            continue;
        }
        rp_fwd_store(c, b, kvs, l);
        rp_fwd_attn_ffn(c, b, kvs, l);
    }
    if (cpu_n < n_layer && b->n > 0) {   /* the GPU layers (the model's offload) */
        int32_t l0 = cpu_n;
        if (!checked) {
            int32_t nk = 0;
            RP_TRY(gpu_check(c, kv, b, kinds, budget, p, ws, st, cpu_n, check, &nk));
            if (nk == 0) return RP_OK;
            l0 = check + 1;
        }
        RP_TRY(rp_fwd_gpu_range(c, b, kvs, l0, n_layer, true));
        if (rp_ctx_n_outputs(c) >= 0) return RP_OK;   /* the output head ran on the GPU */
    }
    /* padding rows wrote KV into their cells (placed past the prompt by the
     * caller, who resets them afterwards) */
    return b->n > 0 ? rp_fwd_end(c, b) : RP_OK;
}
