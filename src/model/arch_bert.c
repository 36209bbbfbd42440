/* arch_bert.c — the bert and nomic-bert encoders' hyper-parameters and tensors, as llama.cpp names them in GGUF.
 *
 * bert (BERT, bge, all-MiniLM, ...):
 *   input  = token_embd[t] + token_types[0] + position_embd[pos], then LayerNorm token_embd_norm (weight, bias);
 *   layer  = x1 = LN(x + attn_output(attention(q, k, v)), attn_output_norm); x = LN(x1 + ffn(x1), layer_output_norm)
 *            with q / k / v from attn_q / attn_k / attn_v (or one fused attn_qkv, rows q | k | v), each with an
 *            optional bias, attn_output with an optional bias, ffn = ffn_down(gelu(ffn_up(x) + b) ) + b (GELU of
 *            the tanh form, as ggml's), bidirectional attention scaled by 1/sqrt(head_dim);
 *   no output norm and no output head: the last layer's states are the embeddings llama.cpp pools.
 * nomic-bert (nomic-embed-text): the same block with NEOX RoPE on q and k (rope.freq_base) instead of learned
 *   positions, fused attn_qkv, and ffn = ffn_down(silu(ffn_gate(x)) * ffn_up(x)) without biases.
 * Keys: <arch>.attention.layer_norm_epsilon (required), <arch>.attention.causal (false; a causal file is refused),
 * <arch>.pooling_type, tokenizer.ggml.token_type_count (required > 0, as llama.cpp). Tensors llama.cpp would
 * not apply (nomic-bert's FFN biases), classifier heads (cls.*: rerankers) and MoE layers are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/quant.h"
#include "model/arch.h"
#include "model/encoder.h"

rp_status rp_bert_hparams(const rp_gguf *g, rp_model *m, const char *an) {
    rp_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", an);
    rp_status st = rp_gguf_get_f32(g, key, &hp->rms_eps);
    if (st == RP_ERR_NOT_FOUND) return rp_errorf(RP_ERR_FORMAT, "model: required key '%s' missing", key);
    if (st != RP_OK) return st;
    if (!(hp->rms_eps >= 0 && hp->rms_eps < 1))
        return rp_errorf(RP_ERR_FORMAT, "model: %s = %g invalid", key, (double)hp->rms_eps);
    snprintf(key, sizeof key, "%s.attention.causal", an);
    bool causal = false;
    st = rp_gguf_get_bool(g, key, &causal);
    if (st != RP_OK && st != RP_ERR_NOT_FOUND) return st;
    if (causal)
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s = true: Reprise runs %s encoders with bidirectional attention only",
                         key, an);
    snprintf(key, sizeof key, "%s.moe_every_n_layers", an);
    uint32_t moe = 0;
    st = rp_gguf_get_u32(g, key, &moe);
    if (st != RP_OK && st != RP_ERR_NOT_FOUND) return st;
    if (moe > 0) return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s = %u: mixture-of-experts encoders are not supported", key, moe);
    if (hp->n_head_kv != hp->n_head || hp->n_head * hp->head_dim != hp->n_embd)
        return rp_errorf(RP_ERR_FORMAT, "model: %s needs head_count x head size = embedding_length (%d x %d vs %d) and no GQA",
                         an, hp->n_head, hp->head_dim, hp->n_embd);
    if (hp->arch == RP_ARCH_BERT) hp->n_rot = hp->head_dim;   /* unused: bert has no RoPE */
    return RP_OK;
}

/* rows [r0, r0 + n) of w, sharing its mapped data */
static rp_weight view_rows(const rp_weight *w, int64_t r0, int64_t n) {
    rp_weight v = *w;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    v.rows = n;
    return v;
}

/* an optional vector: NULL when absent */
static rp_status opt_vector(const rp_gguf *g, const char *name, int64_t n, float **ns, const float **out) {
    rp_status st = rp_model_bind_vector(g, name, n, false, *ns, out);
    if (st == RP_ERR_NOT_FOUND) { *out = NULL; return RP_OK; }
    if (st == RP_OK) *ns += n;
    return st;
}

static rp_status req_vector(const rp_gguf *g, const char *name, int64_t n, float **ns, const float **out) {
    RP_TRY(rp_model_bind_vector(g, name, n, true, *ns, out));
    *ns += n;
    return RP_OK;
}

static rp_status bind_layer(const rp_gguf *g, rp_model *m, int l, float **ns) {
    const rp_hparams *hp = &m->hp;
    rp_layer *L = &m->layers[l];
    rp_bert_layer *B = &m->bert->layers[l];
    const int64_t E = hp->n_embd, F = hp->n_ff, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    char nm[96];
#define LNAME(fmt) (snprintf(nm, sizeof nm, "blk.%d." fmt, l), nm)
    rp_weight f;
    rp_status st = rp_model_bind_matrix(g, LNAME("attn_qkv.weight"), E, QD + 2 * KD, false, &f);
    if (st == RP_OK) {   /* fused: rows q | k | v, as llama.cpp splits them */
        L->wq = view_rows(&f, 0, QD);
        L->wk = view_rows(&f, QD, KD);
        L->wv = view_rows(&f, QD + KD, KD);
        const float *b = NULL;
        RP_TRY(opt_vector(g, LNAME("attn_qkv.bias"), QD + 2 * KD, ns, &b));
        if (b) { L->bq = b; L->bk = b + QD; L->bv = b + QD + KD; }
    } else if (st == RP_ERR_NOT_FOUND) {
        RP_TRY(rp_model_bind_matrix(g, LNAME("attn_q.weight"), E, QD, true, &L->wq));
        RP_TRY(rp_model_bind_matrix(g, LNAME("attn_k.weight"), E, KD, true, &L->wk));
        RP_TRY(rp_model_bind_matrix(g, LNAME("attn_v.weight"), E, KD, true, &L->wv));
        RP_TRY(opt_vector(g, LNAME("attn_q.bias"), QD, ns, &L->bq));
        RP_TRY(opt_vector(g, LNAME("attn_k.bias"), KD, ns, &L->bk));
        RP_TRY(opt_vector(g, LNAME("attn_v.bias"), KD, ns, &L->bv));
        if (!L->bq != !L->bk || !L->bq != !L->bv)
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: layer %d has biases on some of q, k and v only", l);
    } else {
        return st;
    }
    RP_TRY(rp_model_bind_matrix(g, LNAME("attn_output.weight"), QD, E, true, &L->wo));
    RP_TRY(opt_vector(g, LNAME("attn_output.bias"), E, ns, &B->bo));
    RP_TRY(req_vector(g, LNAME("attn_output_norm.weight"), E, ns, &B->attn_out_norm));
    RP_TRY(req_vector(g, LNAME("attn_output_norm.bias"), E, ns, &B->attn_out_norm_b));
    RP_TRY(rp_model_bind_matrix(g, LNAME("ffn_up.weight"), E, F, true, &L->w_up));
    RP_TRY(rp_model_bind_matrix(g, LNAME("ffn_down.weight"), F, E, true, &L->w_down));
    if (hp->arch == RP_ARCH_NOMIC_BERT) {
        RP_TRY(rp_model_bind_matrix(g, LNAME("ffn_gate.weight"), E, F, true, &L->w_gate));
        static const char *const unused[] = {"ffn_up.bias", "ffn_down.bias", "ffn_gate.bias"};
        for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s", l, unused[i]);
            if (rp_gguf_find_tensor(g, nm))
                return rp_errorf(RP_ERR_UNSUPPORTED, "model: nomic-bert: tensor '%s' is not supported (llama.cpp does not apply it)", nm);
        }
    } else {
        if (rp_gguf_find_tensor(g, LNAME("ffn_gate.weight")))
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: bert: tensor '%s' is not supported (a gated FFN)", nm);
        RP_TRY(opt_vector(g, LNAME("ffn_up.bias"), F, ns, &B->b_up));
        RP_TRY(opt_vector(g, LNAME("ffn_down.bias"), E, ns, &B->b_down));
    }
    RP_TRY(req_vector(g, LNAME("layer_output_norm.weight"), E, ns, &B->out_norm));
    RP_TRY(req_vector(g, LNAME("layer_output_norm.bias"), E, ns, &B->out_norm_b));
    if (rp_gguf_find_tensor(g, LNAME("attn_q_norm.weight")) || rp_gguf_find_tensor(g, LNAME("attn_norm_2.weight")))
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s: tensor '%s' is not supported (a jina-bert layout?)",
                         rp_arch_name(hp->arch), nm);
#undef LNAME
    return RP_OK;
}

rp_status rp_bert_bind(const rp_gguf *g, rp_model *m) {
    rp_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    const char *an = rp_arch_name(hp->arch);
    uint32_t ntt = 0;
    rp_status st = rp_gguf_get_u32(g, "tokenizer.ggml.token_type_count", &ntt);
    if (st != RP_OK && st != RP_ERR_NOT_FOUND) return st;
    if (ntt == 0 || ntt > 1024)
        return rp_errorf(RP_ERR_FORMAT, "model: %s needs tokenizer.ggml.token_type_count (1..1024; got %u)", an, ntt);

    const rp_gguf_tensor *te = rp_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return rp_errorf(RP_ERR_FORMAT, "model: tensor 'token_embd.weight' missing");
    if (te->ne[0] != E || te->ne[1] <= 0 || te->ne[1] > INT32_MAX || (m->tok && te->ne[1] < rp_tokenizer_n_vocab(m->tok)))
        return rp_errorf(RP_ERR_FORMAT, "model: token_embd.weight is [%lld, %lld]: rows of %d, at least the vocabulary's %d",
                         (long long)te->ne[0], (long long)te->ne[1], hp->n_embd, m->tok ? rp_tokenizer_n_vocab(m->tok) : 0);
    hp->n_vocab = (int32_t)te->ne[1];
    RP_TRY(rp_model_bind_matrix(g, "token_embd.weight", E, hp->n_vocab, true, &m->tok_embd));
    static const char *const heads[] = {"cls.weight", "cls.output.weight", "output.weight"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        if (rp_gguf_find_tensor(g, heads[i]))
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s: tensor '%s' (a classification or output head: a reranker?) is "
                             "not supported; Reprise runs %s files as embedding models", an, heads[i], an);

    m->bert = calloc(1, sizeof *m->bert);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->bert || !m->layers) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    rp_bert_weights *bw = m->bert;
    bw->n_token_types = (int32_t)ntt;
    bw->layers = calloc((size_t)hp->n_layer, sizeof *bw->layers);
    const size_t store_n = 3 * (size_t)E + (size_t)hp->n_layer * ((size_t)(QD + 2 * KD) + 6 * (size_t)E + (size_t)F);
    bw->store = malloc(store_n * sizeof(float));
    if (!bw->layers || !bw->store) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    float *ns = bw->store;

    const rp_gguf_tensor *tt = rp_gguf_find_tensor(g, "token_types.weight");
    if (tt) {   /* llama.cpp adds row 0 to every token */
        if (tt->ne[0] != E || tt->ne[1] != (int64_t)ntt || tt->ne[2] != 1 || tt->ne[3] != 1)
            return rp_errorf(RP_ERR_FORMAT, "model: token_types.weight is [%lld, %lld], expected [%d, %u]",
                             (long long)tt->ne[0], (long long)tt->ne[1], hp->n_embd, ntt);
        if (!rp_dequantize_row(tt->type, tt->data, ns, E))
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: token_types.weight has an unsupported type");
        bw->type_embd0 = ns;
        ns += E;
    }
    if (hp->arch == RP_ARCH_BERT) {
        RP_TRY(rp_model_bind_matrix(g, "position_embd.weight", E, hp->n_ctx_train, true, &bw->pos_embd));
        if (!rp_dequantize_row(bw->pos_embd.type, bw->pos_embd.data, ns, E))   /* gathered with it, row by row */
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: position_embd.weight has an unsupported type");
    } else if (rp_gguf_find_tensor(g, "position_embd.weight")) {
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: nomic-bert: tensor 'position_embd.weight' is not supported (RoPE positions)");
    }
    RP_TRY(req_vector(g, "token_embd_norm.weight", E, &ns, &bw->embd_norm));
    RP_TRY(req_vector(g, "token_embd_norm.bias", E, &ns, &bw->embd_norm_b));
    for (int l = 0; l < hp->n_layer; l++) RP_TRY(bind_layer(g, m, l, &ns));
    if ((size_t)(ns - bw->store) > store_n) return rp_errorf(RP_ERR_INTERNAL, "model: bert vector store overrun");
    m->tied_output = false;   /* no output head: m->output stays empty */
    return RP_OK;
}

void rp_bert_free(rp_model *m) {
    if (!m || !m->bert) return;
    free(m->bert->layers);
    free(m->bert->store);
    free(m->bert);
    m->bert = NULL;
}
