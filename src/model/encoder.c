/* encoder.c — the bidirectional forward pass of the bert / nomic-bert encoders (arch_bert.c has the tensors) over
 * several sequences packed in one pass (each attends to itself only).
 *
 * Per pass: embed (token + type 0 + learned position for bert), LayerNorm; per layer: q / k / v (+ biases; NEOX
 * RoPE for nomic-bert), softmax(q kᵀ / sqrt(head_dim)) v over the row's own sequence, output projection (+ bias),
 * residual and LayerNorm, FFN (bert: GELU with biases; nomic-bert: SwiGLU), residual and LayerNorm. The matmuls
 * are the decoders' kernels (every weight packed at load); attention, norms and activations are plain C here,
 * parallel over rows (attention over (row, head) items). Matches llama.cpp's graph for these architectures
 * (bench/peer/bert_golden.mjs, tests/test_bert.c), except that GELU is computed exactly where ggml looks it up
 * in an F16 table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/encoder.h"

struct rp_bert_ctx {
    const rp_model *m;
    int32_t cap;           /* rows per pass */
    int T;
    rp_pool *pool;
    float *x, *y;          /* [cap x n_embd] hidden states, block outputs */
    float *q, *k, *v, *att;   /* [cap x n_embd] */
    float *up, *gate;      /* [cap x n_ff] */
    float *rope_cs;        /* [cap x n_rot] cos | sin of each row's position (nomic-bert) */
    float *scores;         /* [T x cap] attention weights, per thread */
    int32_t *lo, *hi;      /* [cap] the row range of each row's sequence */
    int32_t n_rows;        /* rows of the last pass (rp_bert_hidden) */
    rp_mm_scratch mm;
    const rp_ew_kernel *ew;
};

static float *falloc(size_t n, bool *ok) {
    float *p = malloc(n * sizeof(float) + 64);
    if (!p) *ok = false;
    return p;
}

rp_status rp_bert_ctx_create(const rp_model *m, int32_t cap, int n_threads, rp_bert_ctx **out) {
    *out = NULL;
    if (!m || !m->bert || !m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "encoder: not an encoder model with weights");
    if (cap < 1 || cap > 65536 || n_threads < 1 || n_threads > 256)
        return rp_errorf(RP_ERR_INVALID_ARG, "encoder: rows %d (1..65536), threads %d (1..256)", cap, n_threads);
    rp_bert_ctx *c = calloc(1, sizeof *c);
    if (!c) return rp_errorf(RP_ERR_NOMEM, "encoder: out of memory");
    c->m = m;
    c->cap = cap;
    c->T = n_threads;
    c->ew = rp_ew_kernel_select((rp_cpu_level)m->cpu_level);
    rp_status st = rp_pool_create(n_threads, &c->pool);
    if (st != RP_OK) { free(c); return st; }
    const rp_hparams *hp = &m->hp;
    const size_t B = (size_t)cap, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    bool ok = true;
    c->x = falloc(B * E, &ok);
    c->y = falloc(B * E, &ok);
    c->q = falloc(B * E, &ok);
    c->k = falloc(B * E, &ok);
    c->v = falloc(B * E, &ok);
    c->att = falloc(B * E, &ok);
    c->up = falloc(B * F, &ok);
    c->gate = falloc(B * F, &ok);
    c->rope_cs = falloc(B * (size_t)hp->n_rot, &ok);
    c->scores = falloc((size_t)n_threads * B, &ok);
    c->lo = malloc(sizeof(int32_t) * B);
    c->hi = malloc(sizeof(int32_t) * B);
    if (!c->lo || !c->hi) ok = false;
    for (int l = 0; ok && l < hp->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        const rp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; ok && i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data && rp_mm_scratch_reserve(&c->mm, n_threads, ws[i], cap) != RP_OK) ok = false;
    }
    if (!ok) {
        rp_bert_ctx_free(c);
        return rp_errorf(RP_ERR_NOMEM, "encoder: cannot allocate scratch for %d rows", cap);
    }
    *out = c;
    return RP_OK;
}

void rp_bert_ctx_free(rp_bert_ctx *c) {
    if (!c) return;
    rp_pool_free(c->pool);
    free(c->x); free(c->y); free(c->q); free(c->k); free(c->v); free(c->att);
    free(c->up); free(c->gate); free(c->rope_cs); free(c->scores);
    free(c->lo); free(c->hi);
    rp_mm_scratch_free(&c->mm);
    free(c);
}

int32_t rp_bert_ctx_cap(const rp_bert_ctx *c) { return c ? c->cap : 0; }

const float *rp_bert_hidden(const rp_bert_ctx *c, int32_t row) {
    if (!c || row < 0 || row >= c->n_rows) return NULL;
    return c->x + (size_t)row * (size_t)c->m->hp.n_embd;
}

/* out = LayerNorm(x) * w + b (ggml_norm: mean and variance in double, then 1 / sqrt(var + eps)) */
static void layer_norm(float *out, const float *x, const float *w, const float *b, int32_t n, float eps) {
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += x[i];
    const float mean = (float)(s / n);
    double ss = 0;
    for (int32_t i = 0; i < n; i++) {
        const float d = x[i] - mean;
        ss += (double)d * d;
    }
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int32_t i = 0; i < n; i++) out[i] = (x[i] - mean) * scale * w[i] + b[i];
}

/* ---- row-parallel element-wise steps ---- */

typedef enum { OP_EMBED, OP_QKV_BIAS_ROPE, OP_ADD_NORM, OP_UP_GELU, OP_BIAS_Y } row_op;

typedef struct {
    rp_bert_ctx *c;
    row_op op;
    const rp_token *tok;        /* OP_EMBED */
    const int32_t *pos;         /* OP_EMBED: position of each row (rope table, learned position) */
    const rp_layer *L;
    const float *w, *b;         /* OP_ADD_NORM: the norm; OP_BIAS_Y: the bias (or NULL) */
    const float *b_up;          /* OP_UP_GELU */
} row_job;

static void row_body(void *vp, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const row_job *j = vp;
    rp_bert_ctx *c = j->c;
    const rp_model *m = c->m;
    const rp_hparams *hp = &m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff, R = hp->n_rot, HD = hp->head_dim;
    const rp_bert_weights *bw = m->bert;
    for (int64_t i = i0; i < i1; i++) {
        float *x = c->x + (size_t)i * E, *y = c->y + (size_t)i * E;
        switch (j->op) {
        case OP_EMBED: {
            const uint8_t *row = (const uint8_t *)m->tok_embd.data + (size_t)j->tok[i] * m->tok_embd.row_bytes;
            rp_dequantize_row(m->tok_embd.type, row, y, E);
            if (bw->type_embd0)
                for (int32_t e = 0; e < E; e++) y[e] += bw->type_embd0[e];
            if (bw->pos_embd.data) {   /* bert: learned positions */
                float *pe = c->att + (size_t)i * E;   /* att is free until the first attention */
                rp_dequantize_row(bw->pos_embd.type, (const uint8_t *)bw->pos_embd.data + (size_t)j->pos[i] * bw->pos_embd.row_bytes, pe, E);
                for (int32_t e = 0; e < E; e++) y[e] += pe[e];
            } else {                   /* nomic-bert: this row's RoPE angles */
                rp_model_rope_cs(m, j->pos[i], c->rope_cs + (size_t)i * R, c->rope_cs + (size_t)i * R + R / 2);
            }
            layer_norm(x, y, bw->embd_norm, bw->embd_norm_b, E, hp->rms_eps);
            break;
        }
        case OP_QKV_BIAS_ROPE: {
            float *q = c->q + (size_t)i * E, *k = c->k + (size_t)i * E, *v = c->v + (size_t)i * E;
            if (j->L->bq)
                for (int32_t e = 0; e < E; e++) { q[e] += j->L->bq[e]; k[e] += j->L->bk[e]; v[e] += j->L->bv[e]; }
            if (!bw->pos_embd.data) {
                const float *cs = c->rope_cs + (size_t)i * R, *sn = cs + R / 2;
                for (int32_t h = 0; h < hp->n_head; h++) {
                    rp_rope_ref(q + (size_t)h * HD, cs, sn, R, true);
                    rp_rope_ref(k + (size_t)h * HD, cs, sn, R, true);
                }
            }
            break;
        }
        case OP_ADD_NORM:   /* x = LN(x + y) */
            for (int32_t e = 0; e < E; e++) y[e] += x[e];
            layer_norm(x, y, j->w, j->b, E, hp->rms_eps);
            break;
        case OP_UP_GELU: {  /* bert: up = gelu(up + b), tanh form (ggml_gelu) */
            float *u = c->up + (size_t)i * F;
            const float k0 = 0.7978845608028654f;   /* sqrt(2 / pi) */
            for (int32_t f = 0; f < F; f++) {
                const float a = u[f] + (j->b_up ? j->b_up[f] : 0.0f);
                u[f] = 0.5f * a * (1.0f + tanhf(k0 * a * (1.0f + 0.044715f * a * a)));
            }
            break;
        }
        case OP_BIAS_Y:
            if (j->b)
                for (int32_t e = 0; e < E; e++) y[e] += j->b[e];
            break;
        }
    }
}

static void rows_run(rp_bert_ctx *c, int32_t n, const row_job *j) {
    if (n < 16) row_body((void *)j, 0, n, 0);
    else rp_pool_parallel_for(c->pool, n, 4, row_body, (void *)j);
}

/* ---- attention: item = (row, head), over the row's own sequence ---- */

static void att_body(void *vp, int64_t i0, int64_t i1, int tid) {
    rp_bert_ctx *c = vp;
    const rp_hparams *hp = &c->m->hp;
    const int32_t E = hp->n_embd, H = hp->n_head, HD = hp->head_dim;
    const float scale = 1.0f / sqrtf((float)HD);
    float *p = c->scores + (size_t)tid * (size_t)c->cap;
    for (int64_t it = i0; it < i1; it++) {
        const int32_t i = (int32_t)(it / H), h = (int32_t)(it % H);
        const float *q = c->q + (size_t)i * E + (size_t)h * HD;
        const int32_t lo = c->lo[i], hi = c->hi[i];
        float mx = -INFINITY;
        for (int32_t r = lo; r < hi; r++) {
            const float *k = c->k + (size_t)r * E + (size_t)h * HD;
            float d = 0;
            for (int32_t e = 0; e < HD; e++) d += q[e] * k[e];
            p[r - lo] = d * scale;
            mx = p[r - lo] > mx ? p[r - lo] : mx;
        }
        double sum = 0;
        for (int32_t r = 0; r < hi - lo; r++) {
            p[r] = expf(p[r] - mx);
            sum += p[r];
        }
        const float inv = (float)(1.0 / sum);
        float *o = c->att + (size_t)i * E + (size_t)h * HD;
        memset(o, 0, sizeof(float) * (size_t)HD);
        for (int32_t r = lo; r < hi; r++) {
            const float w = p[r - lo] * inv;
            const float *v = c->v + (size_t)r * E + (size_t)h * HD;
            for (int32_t e = 0; e < HD; e++) o[e] += w * v[e];
        }
    }
}

/* y[n x rows(W)] = x · Wᵀ for several weights over the same input (one activation quantization when they agree) */
static void mm_multi(rp_bert_ctx *c, const rp_weight *const *ws, float *const *ys, int nw, const float *x, int32_t n) {
    const int32_t E = c->m->hp.n_embd;
    bool same = true;
    for (int i = 1; i < nw; i++) same = same && rp_mm_same_act(ws[0], ws[i]);
    if (same) {
        const size_t st = rp_mm_quantize(c->pool, ws[0], x, n, E, &c->mm);
        int64_t lds[RP_MM_MULTI_MAX];
        for (int i = 0; i < nw; i++) lds[i] = ws[i]->rows;
        rp_mm_run_multi(c->pool, ws, nw, n, st, ys, lds, &c->mm);
        return;
    }
    for (int i = 0; i < nw; i++) rp_matmul(c->pool, ws[i], x, n, E, ys[i], ws[i]->rows, &c->mm);
}

rp_status rp_bert_encode(rp_bert_ctx *c, const rp_token *tok, const int32_t *start, int32_t n_seq) {
    if (!c || !tok || !start || n_seq < 1) return rp_errorf(RP_ERR_INVALID_ARG, "encoder: no input");
    const rp_model *m = c->m;
    const rp_hparams *hp = &m->hp;
    const int32_t E = hp->n_embd, F = hp->n_ff;
    if (start[0] != 0) return rp_errorf(RP_ERR_INVALID_ARG, "encoder: start[0] = %d, not 0", start[0]);
    for (int32_t s = 0; s < n_seq; s++) {
        const int32_t len = start[s + 1] - start[s];
        if (len < 1) return rp_errorf(RP_ERR_INVALID_ARG, "encoder: sequence %d is empty", s);
        if (start[s + 1] > c->cap)
            return rp_errorf(RP_ERR_RANGE, "encoder: %d rows exceed the context's %d", start[s + 1], c->cap);
        if (m->bert->pos_embd.data && len > hp->n_ctx_train)
            return rp_errorf(RP_ERR_RANGE, "encoder: sequence %d has %d tokens; %s has %d learned positions", s, len,
                             rp_arch_name(hp->arch), hp->n_ctx_train);
    }
    const int32_t n = start[n_seq];
    for (int32_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= hp->n_vocab)
            return rp_errorf(RP_ERR_RANGE, "encoder: token %d: id %d not in [0, %d)", i, tok[i], hp->n_vocab);
    int32_t *pos = c->hi;   /* positions first (the embedding step), sequence ranges after */
    for (int32_t s = 0; s < n_seq; s++)
        for (int32_t i = start[s]; i < start[s + 1]; i++) pos[i] = i - start[s];
    row_job j = {.c = c, .op = OP_EMBED, .tok = tok, .pos = pos};
    rows_run(c, n, &j);
    for (int32_t s = 0; s < n_seq; s++)
        for (int32_t i = start[s]; i < start[s + 1]; i++) { c->lo[i] = start[s]; c->hi[i] = start[s + 1]; }

    for (int32_t l = 0; l < hp->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        const rp_bert_layer *B = &m->bert->layers[l];
        const rp_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_y[3] = {c->q, c->k, c->v};
        mm_multi(c, qkv, qkv_y, 3, c->x, n);
        j = (row_job){.c = c, .op = OP_QKV_BIAS_ROPE, .L = L};
        rows_run(c, n, &j);
        const int64_t items = (int64_t)n * hp->n_head;
        if (items * (int64_t)n < 4096) att_body(c, 0, items, 0);
        else rp_pool_parallel_for(c->pool, items, 4, att_body, c);
        rp_matmul(c->pool, &L->wo, c->att, n, E, c->y, E, &c->mm);
        j = (row_job){.c = c, .op = OP_BIAS_Y, .b = B->bo};
        rows_run(c, n, &j);
        j = (row_job){.c = c, .op = OP_ADD_NORM, .w = B->attn_out_norm, .b = B->attn_out_norm_b};
        rows_run(c, n, &j);
        if (L->w_gate.data) {   /* nomic-bert: silu(gate) * up */
            const rp_weight *gu[2] = {&L->w_gate, &L->w_up};
            float *const gu_y[2] = {c->gate, c->up};
            mm_multi(c, gu, gu_y, 2, c->x, n);
            c->ew->swiglu(c->gate, c->up, (int64_t)n * F);
            rp_matmul(c->pool, &L->w_down, c->gate, n, F, c->y, E, &c->mm);
        } else {                /* bert: gelu(up + b) */
            rp_matmul(c->pool, &L->w_up, c->x, n, E, c->up, F, &c->mm);
            j = (row_job){.c = c, .op = OP_UP_GELU, .b_up = B->b_up};
            rows_run(c, n, &j);
            rp_matmul(c->pool, &L->w_down, c->up, n, F, c->y, E, &c->mm);
        }
        j = (row_job){.c = c, .op = OP_BIAS_Y, .b = B->b_down};
        rows_run(c, n, &j);
        j = (row_job){.c = c, .op = OP_ADD_NORM, .w = B->out_norm, .b = B->out_norm_b};
        rows_run(c, n, &j);
    }
    c->n_rows = n;
    return RP_OK;
}
