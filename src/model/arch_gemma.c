/* arch_gemma.c — gemma2 / gemma3 (text, dense) hyper-parameters and tensors, as llama.cpp defines them in GGUF.
 *
 * What differs from llama (the forward pass reads these fields, forward.c):
 *   - token embeddings scaled by sqrt(n_embd); the output is tied to them;
 *   - RMSNorm weights are used as stored: llama.cpp's converter bakes Gemma's (1 + w) into the GGUF;
 *   - a post-norm on each block's output before the residual add (post_attention_norm, post_ffw_norm);
 *   - GeGLU: gelu-tanh(gate) * up;
 *   - NEOX RoPE; queries scaled by 1/sqrt(head_dim) (1/sqrt(n_embd / n_head) for the 27B shapes, the
 *     rule llama.cpp applies by layer count, after gemma_pytorch's query_pre_attn_scalar);
 *   - gemma2: attention logits soft-capped (attn_logit_softcapping, default 50) and output logits
 *     (final_logit_softcapping, default 30); gemma3: per-head q/k RMSNorm before RoPE, no soft-capping
 *     unless the file sets final_logit_softcapping;
 *   - sliding-window (local) layers interleaved with global ones: layer l is local when
 *     l % pattern < pattern - 1, pattern 2 (gemma2: even layers local) or 6 (gemma3: 5 local, then 1
 *     global); a local layer's row at position p attends cells at positions q with p - q < n_swa
 *     (attention.sliding_window; gemma2 default 4096; a gemma3 file without it has no local layers);
 *   - gemma3's local layers rotate with base 10000 and no scaling (rope.freq_base_swa when present),
 *     its global ones with rope.freq_base and the file's scaling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/model.h"

static rp_status opt_u32(const rp_gguf *g, const char *an, const char *suffix, uint32_t def, uint32_t *out, bool *found) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", an, suffix);
    rp_status st = rp_gguf_get_u32(g, key, out);
    if (found) *found = st == RP_OK;
    if (st == RP_ERR_NOT_FOUND) { *out = def; return RP_OK; }
    return st;
}

static rp_status opt_f32(const rp_gguf *g, const char *an, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", an, suffix);
    rp_status st = rp_gguf_get_f32(g, key, out);
    if (st == RP_ERR_NOT_FOUND) { *out = def; return RP_OK; }
    if (st == RP_OK && !(*out >= 0 && isfinite(*out)))
        return rp_errorf(RP_ERR_FORMAT, "model: key '%s' = %g invalid", key, (double)*out);
    return st;
}

rp_status rp_gemma_hparams(const rp_gguf *g, rp_model *m, const char *an) {
    rp_hparams *hp = &m->hp;
    const bool g2 = hp->arch == RP_ARCH_GEMMA2;
    hp->emb_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = true;
    hp->post_norms = true;
    /* llama.cpp: the 27B shapes (46 layers gemma2, 62 gemma3) scale by n_embd / n_head */
    const bool big = hp->n_layer == (g2 ? 46 : 62);
    hp->attn_scale = 1.0f / sqrtf(big ? (float)(hp->n_embd / hp->n_head) : (float)hp->head_dim);
    uint32_t swa = 0;
    bool found = false;
    RP_TRY(opt_u32(g, an, "attention.sliding_window", g2 ? 4096 : 0, &swa, &found));
    if (swa > (uint32_t)INT32_MAX) return rp_errorf(RP_ERR_FORMAT, "model: %s.attention.sliding_window %u too large", an, swa);
    hp->n_swa = (int32_t)swa;
    hp->swa_pattern = hp->n_swa > 0 ? (g2 ? 2 : 6) : 0;
    if (g2) {
        RP_TRY(opt_f32(g, an, "attn_logit_softcapping", 50.0f, &hp->attn_softcap));
        RP_TRY(opt_f32(g, an, "final_logit_softcapping", 30.0f, &hp->final_softcap));
    } else {
        hp->attn_softcap = 0;
        RP_TRY(opt_f32(g, an, "final_logit_softcapping", 0.0f, &hp->final_softcap));
        if (hp->n_swa > 0) RP_TRY(opt_f32(g, an, "rope.freq_base_swa", 10000.0f, &hp->rope_base_local));
        if (hp->n_swa > 0 && !(hp->rope_base_local > 0))
            return rp_errorf(RP_ERR_FORMAT, "model: %s.rope.freq_base_swa must be positive", an);
    }
    (void)found;
    return RP_OK;
}

rp_status rp_gemma_bind_layer(const rp_gguf *g, rp_model *m, int32_t l, float *store, size_t *used) {
    const rp_hparams *hp = &m->hp;
    rp_layer *L = &m->layers[l];
    const int64_t E = hp->n_embd, HD = hp->head_dim;
    char nm[96];
    float *ns = store;
    snprintf(nm, sizeof nm, "blk.%d.post_attention_norm.weight", l);
    RP_TRY(rp_model_bind_vector(g, nm, E, true, ns, &L->attn_post_norm));
    ns += E;
    snprintf(nm, sizeof nm, "blk.%d.post_ffw_norm.weight", l);
    RP_TRY(rp_model_bind_vector(g, nm, E, true, ns, &L->ffn_post_norm));
    ns += E;
    if (hp->arch == RP_ARCH_GEMMA3) {
        snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
        RP_TRY(rp_model_bind_vector(g, nm, HD, true, ns, &L->q_norm));
        ns += HD;
        snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", l);
        RP_TRY(rp_model_bind_vector(g, nm, HD, true, ns, &L->k_norm));
        ns += HD;
    }
    const bool local = hp->swa_pattern > 0 && l % hp->swa_pattern < hp->swa_pattern - 1;
    L->window = local ? hp->n_swa : 0;
    L->rope_local = local && hp->rope_base_local > 0;
    *used = (size_t)(ns - store);
    return RP_OK;
}

rp_status rp_gemma_build_rope(rp_model *m) {
    const rp_hparams *hp = &m->hp;
    if (!(hp->rope_base_local > 0)) return RP_OK;
    const int half = hp->n_rot / 2;
    m->rope_inv_freq_local = malloc(sizeof(float) * (size_t)half);
    if (!m->rope_inv_freq_local) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < half; i++) m->rope_inv_freq_local[i] = (float)pow((double)hp->rope_base_local, -2.0 * i / hp->n_rot);
    return RP_OK;
}
