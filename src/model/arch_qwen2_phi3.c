/* arch_qwen2_phi3.c — the qwen2 and phi3 architectures as llama.cpp lays them out in GGUF.
 *
 * qwen2 (Qwen2 / Qwen2.5): the llama block with F32 biases on q, k and v (blk.N.attn_{q,k,v}.bias, required
 * as in llama.cpp), added to the projections before RoPE; NEOX RoPE; keys qwen2.*.
 * phi3 (Phi-3 / Phi-3.5 / Phi-4-mini): q, k and v fused in blk.N.attn_qkv.weight [n_embd x (q_dim + 2 kv_dim)]
 * (rows: q, then k, then v; separate attn_q/k/v are accepted too, as llama.cpp does), gate and up fused in
 * blk.N.ffn_up.weight [n_embd x 2 n_ff] (rows: gate, then up — SwiGLU silu(first half) * second half); NEOX
 * RoPE over rope.dimension_count dims (Phi-4-mini rotates 96 of 128); phi3.attention.sliding_window is read
 * and ignored, as llama.cpp does (its Phi SWA is disabled). LongRoPE (rope_factors_short/long.weight,
 * rope.scaling.original_context_length, rope.scaling.attn_factor): as llama.cpp, a cache (a sequence's context)
 * of at most the original length uses the short factors and a larger one the long factors (rp_model_rope_long);
 * a file with short factors only is limited to the original length (n_ctx_train).
 * The fused matrices are never copied: q/k/v and gate/up are views of row ranges of the mapped tensor, each
 * packed for its kernel at load like any other weight. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

int64_t rp_arch_qp_store_per_layer(const rp_hparams *hp) {
    return hp->arch == RP_ARCH_QWEN2 ? (int64_t)(hp->n_head + 2 * hp->n_head_kv) * hp->head_dim : 0;
}

static rp_status get_f32(const rp_gguf *g, const char *an, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", an, suffix);
    rp_status st = rp_gguf_get_f32(g, key, out);
    if (st == RP_ERR_NOT_FOUND) { *out = def; return RP_OK; }
    return st;
}

rp_status rp_arch_qp_hparams(const rp_gguf *g, rp_model *m, const char *an) {
    rp_hparams *hp = &m->hp;
    /* llama.cpp multiplies every architecture's RoPE attention factor by this key when present */
    RP_TRY(get_f32(g, an, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor));
    if (!(hp->rope_attn_factor > 0) || hp->rope_attn_factor > 16)
        return rp_errorf(RP_ERR_FORMAT, "model: %s.rope.scaling.attn_factor %g invalid", an, hp->rope_attn_factor);
    if (hp->arch != RP_ARCH_PHI3) return RP_OK;
    const bool has_short = rp_gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
    const bool has_long = rp_gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    if (!has_short && !has_long) return RP_OK;
    if (!has_short)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "model: phi3 LongRoPE file has rope_factors_long.weight but no rope_factors_short.weight "
                         "(Reprise needs the short ones, the factors of contexts up to the original length)");
    hp->rope_longrope = true;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", an);
    uint32_t orig = (uint32_t)hp->n_ctx_train;
    rp_status st = rp_gguf_get_u32(g, key, &orig);
    if (st != RP_OK && st != RP_ERR_NOT_FOUND) return st;
    if (orig == 0 || orig > (uint32_t)INT32_MAX)
        return rp_errorf(RP_ERR_FORMAT, "model: %s = %u invalid", key, orig);
    hp->rope_orig_ctx = (int32_t)orig;
    /* the short factors hold up to the original length; beyond it llama.cpp switches to the long ones: without
     * them the context is limited to the original length */
    if (hp->n_ctx_train <= 0 || (!has_long && hp->n_ctx_train > hp->rope_orig_ctx)) hp->n_ctx_train = hp->rope_orig_ctx;
    return RP_OK;
}

static rp_status check_factors(const rp_gguf_tensor *t, const char *name, int half) {
    if (t->type != RP_TYPE_F32 || t->ne[0] != half || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return rp_errorf(RP_ERR_FORMAT, "model: tensor '%s' must be f32 [%d] (rope.dimension_count / 2)", name, half);
    const float *f = (const float *)t->data;
    for (int i = 0; i < half; i++)
        if (!(f[i] > 0)) return rp_errorf(RP_ERR_FORMAT, "model: %s[%d] = %g invalid", name, i, f[i]);
    return RP_OK;
}

rp_status rp_arch_qp_rope_factors(const rp_gguf *g, const rp_model *m, const float **ff, const float **ff_long) {
    *ff = *ff_long = NULL;
    if (!m->hp.rope_longrope) return RP_OK;
    const int half = m->hp.n_rot / 2;
    const rp_gguf_tensor *ts = rp_gguf_find_tensor(g, "rope_factors_short.weight");
    const rp_gguf_tensor *tl = rp_gguf_find_tensor(g, "rope_factors_long.weight");
    RP_TRY(check_factors(ts, "rope_factors_short.weight", half));
    if (tl) RP_TRY(check_factors(tl, "rope_factors_long.weight", half));
    *ff = (const float *)ts->data;
    if (tl && m->hp.n_ctx_train > m->hp.rope_orig_ctx) *ff_long = (const float *)tl->data;
    return RP_OK;
}

/* rows [r0, r0 + n) of w, sharing its mapped data */
static rp_weight view_rows(const rp_weight *w, int64_t r0, int64_t n) {
    rp_weight v = *w;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    v.rows = n;
    return v;
}

static rp_status bind_qkv(const rp_gguf *g, const rp_hparams *hp, int l, rp_layer *L) {
    const int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    char nm[96];
    if (hp->arch == RP_ARCH_PHI3) {
        snprintf(nm, sizeof nm, "blk.%d.attn_qkv.weight", l);
        rp_weight f;
        rp_status st = rp_model_bind_matrix(g, nm, E, QD + 2 * KD, false, &f);
        if (st == RP_OK) {
            L->wq = view_rows(&f, 0, QD);
            L->wk = view_rows(&f, QD, KD);
            L->wv = view_rows(&f, QD + KD, KD);
            return RP_OK;
        }
        if (st != RP_ERR_NOT_FOUND) return st;   /* else separate q, k, v (llama.cpp accepts both) */
    }
    snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l);
    RP_TRY(rp_model_bind_matrix(g, nm, E, QD, true, &L->wq));
    snprintf(nm, sizeof nm, "blk.%d.attn_k.weight", l);
    RP_TRY(rp_model_bind_matrix(g, nm, E, KD, true, &L->wk));
    snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
    return rp_model_bind_matrix(g, nm, E, KD, true, &L->wv);
}

static rp_status bind_gate_up(const rp_gguf *g, const rp_hparams *hp, int l, rp_layer *L) {
    const int64_t E = hp->n_embd, F = hp->n_ff;
    char nm[96], gn[96];
    snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
    snprintf(gn, sizeof gn, "blk.%d.ffn_gate.weight", l);
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, nm);
    if (hp->arch == RP_ARCH_PHI3 && !rp_gguf_find_tensor(g, gn)) {
        /* phi3's own layout: gate | up in one [n_embd x 2 n_ff] matrix */
        if (t && t->ne[1] != 2 * F)
            return rp_errorf(RP_ERR_FORMAT,
                             "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld] (phi3 fuses gate and up)",
                             nm, (long long)t->ne[0], (long long)t->ne[1], (long long)E, (long long)(2 * F));
        rp_weight f;
        RP_TRY(rp_model_bind_matrix(g, nm, E, 2 * F, true, &f));
        L->w_gate = view_rows(&f, 0, F);
        L->w_up = view_rows(&f, F, F);
        return RP_OK;
    }
    RP_TRY(rp_model_bind_matrix(g, gn, E, F, true, &L->w_gate));
    return rp_model_bind_matrix(g, nm, E, F, true, &L->w_up);
}

rp_status rp_arch_qp_bind_layer(const rp_gguf *g, rp_model *m, int l, rp_layer *L, float **ns) {
    const rp_hparams *hp = &m->hp;
    RP_TRY(bind_qkv(g, hp, l, L));
    RP_TRY(bind_gate_up(g, hp, l, L));
    char nm[96];
    /* a bias Reprise would not apply is refused, never dropped */
    static const char *const unused[] = {"attn_output.bias", "attn_qkv.bias", "ffn_up.bias", "ffn_down.bias", "ffn_gate.bias"};
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        snprintf(nm, sizeof nm, "blk.%d.%s", l, unused[i]);
        if (rp_gguf_find_tensor(g, nm))
            return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s: tensor '%s' is not supported", rp_arch_name(hp->arch), nm);
    }
    if (hp->arch != RP_ARCH_QWEN2) {
        static const char *const qkvb[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "blk.%d.%s", l, qkvb[i]);
            if (rp_gguf_find_tensor(g, nm))
                return rp_errorf(RP_ERR_UNSUPPORTED, "model: %s: tensor '%s' is not supported", rp_arch_name(hp->arch), nm);
        }
        return RP_OK;
    }
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    snprintf(nm, sizeof nm, "blk.%d.attn_q.bias", l);
    RP_TRY(rp_model_bind_vector(g, nm, QD, true, *ns, &L->bq)); *ns += QD;
    snprintf(nm, sizeof nm, "blk.%d.attn_k.bias", l);
    RP_TRY(rp_model_bind_vector(g, nm, KD, true, *ns, &L->bk)); *ns += KD;
    snprintf(nm, sizeof nm, "blk.%d.attn_v.bias", l);
    RP_TRY(rp_model_bind_vector(g, nm, KD, true, *ns, &L->bv)); *ns += KD;
    return RP_OK;
}
