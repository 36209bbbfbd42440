/* vk_forward.c — decode of one sequence on the GPU, one command buffer per token (gpu_forward.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_ops.h"
#include "kernels/quant.h"
#include "gpu/vk_weights.h"

struct rp_gpu_model {
    rp_gpu *g;
    const rp_model *m;
    rp_gpu_ops *ops;
    rp_gpu_rec *rec;
    int32_t n_ctx;
    glayer *layers;
    gweight tok_embd, output;
    bool embd_on_gpu;            /* get_rows takes the embedding's type; else the CPU dequantizes the row */
    rp_gpu_buf *out_norm;
    rp_gpu_buf *kc, *vc;         /* F16 [n_layer][n_ctx][n_head_kv * head_dim] */
    /* activations (device) */
    rp_gpu_buf *x, *xb, *xn, *q, *k, *v, *att, *gate, *up;
    /* per token, written by the host before the submit */
    rp_gpu_buf *tok, *cell, *n_cells, *cs, *logits;
    float *cs_host, *row_host;
    int32_t last_dispatches;
    bool replay;                 /* record the token graph once, then resubmit it (default) */
    bool recorded;
};

static rp_status up_weight(rp_gpu_model *gm, const rp_weight *w, const char *what, int32_t layer, gweight *out) {
    if (!rp_gpu_ops_has_type(w->type)) {
        const rp_type_traits *tr = rp_type_get_traits((int)w->type);
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: %s (layer %d) is %s, which has no GPU kernel yet", what, layer,
                         tr ? tr->name : "?");
    }
    if (w->row_bytes > UINT32_MAX || w->rows > UINT32_MAX || w->cols > UINT32_MAX)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: %s (layer %d) is too large for 32-bit offsets", what, layer);
    return rp_vkw_upload(gm->g, w, out);
}

static rp_status up_floats(rp_gpu_model *gm, const float *src, size_t n, rp_gpu_buf **out) {
    return rp_vkw_floats(gm->g, src, n, out);
}

static rp_status dev(rp_gpu_model *gm, size_t floats, rp_gpu_mem mem, rp_gpu_buf **out) {
    return rp_gpu_buf_create(gm->g, floats * sizeof(float), mem, out);
}

static rp_status build(rp_gpu_model *gm) {
    const rp_model *m = gm->m;
    const rp_hparams *hp = &m->hp;
    if (hp->head_dim > 256 || hp->n_head % hp->n_head_kv || hp->head_dim % 2 || hp->n_rot > hp->head_dim)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: heads of %d (n_head %d, n_head_kv %d, n_rot %d) do not fit the "
                                             "GPU attention (head_dim <= 256, even)", hp->head_dim, hp->n_head,
                         hp->n_head_kv, hp->n_rot);
    RP_TRY(rp_gpu_ops_create(gm->g, &gm->ops));
    RP_TRY(rp_gpu_rec_create(gm->g, 16 * hp->n_layer + 8, &gm->rec));
    const size_t E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, HD = (size_t)hp->head_dim;
    const size_t QD = (size_t)hp->n_head * HD, KD = (size_t)hp->n_head_kv * HD;
    gm->layers = calloc((size_t)hp->n_layer, sizeof *gm->layers);
    if (!gm->layers) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        glayer *G = &gm->layers[l];
        RP_TRY(up_floats(gm, L->attn_norm, E, &G->attn_norm));
        RP_TRY(up_floats(gm, L->ffn_norm, E, &G->ffn_norm));
        if (L->q_norm) RP_TRY(up_floats(gm, L->q_norm, HD, &G->q_norm));
        if (L->k_norm) RP_TRY(up_floats(gm, L->k_norm, HD, &G->k_norm));
        RP_TRY(up_weight(gm, &L->wq, "attn_q", l, &G->wq));
        RP_TRY(up_weight(gm, &L->wk, "attn_k", l, &G->wk));
        RP_TRY(up_weight(gm, &L->wv, "attn_v", l, &G->wv));
        RP_TRY(up_weight(gm, &L->wo, "attn_output", l, &G->wo));
        RP_TRY(up_weight(gm, &L->w_gate, "ffn_gate", l, &G->gate));
        RP_TRY(up_weight(gm, &L->w_up, "ffn_up", l, &G->up));
        RP_TRY(up_weight(gm, &L->w_down, "ffn_down", l, &G->down));
    }
    RP_TRY(up_floats(gm, m->out_norm, E, &gm->out_norm));
    RP_TRY(up_weight(gm, &m->output, "output", -1, &gm->output));
    gm->embd_on_gpu = rp_gpu_ops_has_type(m->tok_embd.type);
    if (gm->embd_on_gpu) {
        if (m->tied_output) gm->tok_embd = gm->output;   /* the same buffer */
        else RP_TRY(up_weight(gm, &m->tok_embd, "token_embd", -1, &gm->tok_embd));
    }
    const size_t cache = (size_t)hp->n_layer * (size_t)gm->n_ctx * KD;   /* halves */
    if (cache / 2 > UINT32_MAX)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: a KV cache of %d cells exceeds 32-bit offsets", gm->n_ctx);
    RP_TRY(rp_gpu_buf_create(gm->g, cache * 2, RP_GPU_MEM_DEVICE, &gm->kc));
    RP_TRY(rp_gpu_buf_create(gm->g, cache * 2, RP_GPU_MEM_DEVICE, &gm->vc));
    RP_TRY(dev(gm, E, RP_GPU_MEM_DEVICE, &gm->x));
    RP_TRY(dev(gm, E > QD ? E : QD, RP_GPU_MEM_DEVICE, &gm->xb));
    RP_TRY(dev(gm, E, RP_GPU_MEM_DEVICE, &gm->xn));
    RP_TRY(dev(gm, QD, RP_GPU_MEM_DEVICE, &gm->q));
    RP_TRY(dev(gm, KD, RP_GPU_MEM_DEVICE, &gm->k));
    RP_TRY(dev(gm, KD, RP_GPU_MEM_DEVICE, &gm->v));
    RP_TRY(dev(gm, QD, RP_GPU_MEM_DEVICE, &gm->att));
    RP_TRY(dev(gm, F, RP_GPU_MEM_DEVICE, &gm->gate));
    RP_TRY(dev(gm, F, RP_GPU_MEM_DEVICE, &gm->up));
    RP_TRY(dev(gm, 1, RP_GPU_MEM_HOST, &gm->tok));
    RP_TRY(dev(gm, 1, RP_GPU_MEM_HOST, &gm->cell));
    RP_TRY(dev(gm, 1, RP_GPU_MEM_HOST, &gm->n_cells));
    RP_TRY(dev(gm, (size_t)hp->n_rot, RP_GPU_MEM_HOST, &gm->cs));
    RP_TRY(dev(gm, (size_t)hp->n_vocab, RP_GPU_MEM_HOST, &gm->logits));
    gm->cs_host = malloc(sizeof(float) * (size_t)hp->n_rot);
    gm->row_host = malloc(sizeof(float) * E);
    if (!gm->cs_host || !gm->row_host) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    return RP_OK;
}

rp_status rp_gpu_model_create(rp_gpu *g, const rp_model *m, int32_t n_ctx, rp_gpu_model **out) {
    *out = NULL;
    if (!g || !m || n_ctx < 1) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: model on the GPU: n_ctx %d", n_ctx);
    rp_gpu_model *gm = calloc(1, sizeof *gm);
    if (!gm) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    gm->g = g;
    gm->m = m;
    gm->n_ctx = n_ctx;
    gm->replay = true;
    const rp_status st = build(gm);
    if (st != RP_OK) {
        rp_gpu_model_free(gm);
        return st;
    }
    *out = gm;
    return RP_OK;
}

static void free_w(gweight *w) { rp_gpu_buf_free(w->b); }

void rp_gpu_model_free(rp_gpu_model *gm) {
    if (!gm) return;
    rp_gpu_rec_free(gm->rec);   /* waits for its last submission */
    if (gm->layers)
        for (int32_t l = 0; l < gm->m->hp.n_layer; l++) rp_vkw_layer_free(&gm->layers[l]);
    free(gm->layers);
    if (gm->tok_embd.b != gm->output.b) free_w(&gm->tok_embd);
    free_w(&gm->output);
    rp_gpu_buf *bs[] = {gm->out_norm, gm->kc, gm->vc, gm->x, gm->xb, gm->xn, gm->q, gm->k, gm->v, gm->att, gm->gate,
                        gm->up, gm->tok, gm->cell, gm->n_cells, gm->cs, gm->logits};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) rp_gpu_buf_free(bs[i]);
    rp_gpu_ops_free(gm->ops);
    free(gm->cs_host);
    free(gm->row_host);
    free(gm);
}

int32_t rp_gpu_model_last_dispatches(const rp_gpu_model *gm) { return gm ? gm->last_dispatches : 0; }

void rp_gpu_model_set_replay(rp_gpu_model *gm, bool on) {
    gm->replay = on;
    gm->recorded = false;
}

static rp_status mm(rp_gpu_model *gm, const gweight *w, rp_gpu_buf *x, rp_gpu_buf *y) {
    const rp_gpu_mm a = {.w = w->b, .x = x, .y = y, .wtype = w->type, .rows = w->rows, .cols = w->cols, .n = 1,
                         .row_bytes = w->row_bytes, .ldx = w->cols, .ldy = w->rows};
    gm->last_dispatches++;
    return rp_gpu_op_mul_mat(gm->ops, gm->rec, &a);
}

#define OP(expr) do { RP_TRY(expr); gm->last_dispatches++; } while (0)

rp_status rp_gpu_decode(rp_gpu_model *gm, rp_token tok, int32_t pos, float *logits) {
    const rp_model *m = gm->m;
    const rp_hparams *hp = &m->hp;
    if (pos < 0 || pos >= gm->n_ctx) return rp_errorf(RP_ERR_RANGE, "gpu: position %d outside the GPU KV cache of %d "
                                                                    "cells", pos, gm->n_ctx);
    if (tok < 0 || tok >= hp->n_vocab) return rp_errorf(RP_ERR_RANGE, "gpu: token %d outside the vocabulary", tok);
    const uint32_t E = (uint32_t)hp->n_embd, H = (uint32_t)hp->n_head, HK = (uint32_t)hp->n_head_kv;
    const uint32_t HD = (uint32_t)hp->head_dim, R = (uint32_t)hp->n_rot, KD = HK * HD, F = (uint32_t)hp->n_ff;
    const bool neox = hp->rope_kind == RP_ROPE_NEOX;
    RP_TRY(rp_gpu_rec_wait(gm->rec));   /* the host-written buffers below are free again */
    const int32_t one[3] = {tok, pos, pos + 1};
    RP_TRY(rp_gpu_buf_write(gm->tok, 0, &one[0], 4));
    RP_TRY(rp_gpu_buf_write(gm->cell, 0, &one[1], 4));
    RP_TRY(rp_gpu_buf_write(gm->n_cells, 0, &one[2], 4));
    rp_model_rope_cs(m, pos, gm->cs_host, gm->cs_host + R / 2);
    RP_TRY(rp_gpu_buf_write(gm->cs, 0, gm->cs_host, sizeof(float) * R));
    if (!gm->embd_on_gpu) {
        rp_dequantize_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tok * m->tok_embd.row_bytes,
                          gm->row_host, E);
        RP_TRY(rp_gpu_buf_write(gm->x, 0, gm->row_host, sizeof(float) * E));
    }
    if (gm->replay && gm->recorded) {
        /* every per-token input (token, cell, cell count, RoPE table) is in a buffer written above */
        RP_TRY(rp_gpu_rec_replay(gm->rec, NULL));
        RP_TRY(rp_gpu_rec_wait(gm->rec));
        return rp_gpu_buf_read(gm->logits, 0, logits, sizeof(float) * (size_t)hp->n_vocab);
    }
    gm->last_dispatches = 0;
    rp_gpu_ops *o = gm->ops;
    rp_gpu_rec *r = gm->rec;
    RP_TRY(gm->replay ? rp_gpu_rec_begin_replayable(r) : rp_gpu_rec_begin(r));
    if (gm->embd_on_gpu)
        OP(rp_gpu_op_get_rows(o, r, gm->tok_embd.b, gm->tok_embd.type, 0, gm->tok_embd.row_bytes, E, gm->tok, 1,
                              gm->x, 0, E));
    const float scale = 1.0f / sqrtf((float)HD);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const glayer *G = &gm->layers[l];
        /* x += the previous layer's FFN output (xb), then xb = norm(x) */
        OP(rp_gpu_op_rmsnorm(o, r, gm->x, l ? gm->xb : NULL, G->attn_norm, gm->xb, E, 1, E, E, hp->rms_eps));
        RP_TRY(mm(gm, &G->wq, gm->xb, gm->q));
        RP_TRY(mm(gm, &G->wk, gm->xb, gm->k));
        RP_TRY(mm(gm, &G->wv, gm->xb, gm->v));
        if (G->q_norm) OP(rp_gpu_op_rmsnorm(o, r, gm->q, NULL, G->q_norm, gm->q, HD, H, HD, HD, hp->rms_eps));
        if (G->k_norm) OP(rp_gpu_op_rmsnorm(o, r, gm->k, NULL, G->k_norm, gm->k, HD, HK, HD, HD, hp->rms_eps));
        OP(rp_gpu_op_rope(o, r, gm->q, 0, H * HD, 1, H, HD, R, neox, gm->cs));
        OP(rp_gpu_op_rope(o, r, gm->k, 0, KD, 1, HK, HD, R, neox, gm->cs));
        const uint32_t off = (uint32_t)l * (uint32_t)gm->n_ctx * KD;
        OP(rp_gpu_op_kv_store_f16(o, r, gm->k, 0, KD, 1, KD, gm->cell, gm->kc, off));
        OP(rp_gpu_op_kv_store_f16(o, r, gm->v, 0, KD, 1, KD, gm->cell, gm->vc, off));
        const rp_gpu_attn at = {.q = gm->q, .k = gm->kc, .v = gm->vc, .n_cells = gm->n_cells, .out = gm->att,
                                .n_rows = 1, .n_head = H, .n_head_kv = HK, .head_dim = HD, .ldq = H * HD,
                                .ldo = H * HD, .k_off = off, .v_off = off, .scale = scale};
        OP(rp_gpu_op_attn_f16(o, r, &at));
        RP_TRY(mm(gm, &G->wo, gm->att, gm->xb));
        /* x += att·Woᵀ; xb = norm(x) (the FFN's input; gate / up read it) */
        OP(rp_gpu_op_rmsnorm(o, r, gm->x, gm->xb, G->ffn_norm, gm->xn, E, 1, E, E, hp->rms_eps));
        RP_TRY(mm(gm, &G->gate, gm->xn, gm->gate));
        RP_TRY(mm(gm, &G->up, gm->xn, gm->up));
        OP(rp_gpu_op_swiglu(o, r, gm->gate, gm->up, F));
        RP_TRY(mm(gm, &G->down, gm->gate, gm->xb));
    }
    OP(rp_gpu_op_rmsnorm(o, r, gm->x, gm->xb, gm->out_norm, gm->xn, E, 1, E, E, hp->rms_eps));
    RP_TRY(mm(gm, &gm->output, gm->xn, gm->logits));
    RP_TRY(rp_gpu_rec_submit(r, NULL));
    gm->recorded = gm->replay;
    RP_TRY(rp_gpu_rec_wait(r));
    return rp_gpu_buf_read(gm->logits, 0, logits, sizeof(float) * (size_t)hp->n_vocab);
}
