/* model.c — loads llama / qwen3 (and, through arch_qwen2_phi3.c, qwen2 / phi3; arch_gemma.c, gemma2 / gemma3;
 * arch_bert.c, the bert / nomic-bert encoders) GGUF models: hyper-parameters, tensor shape checks, RoPE tables. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "gpu/gpu_offload.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "model/arch.h"
#include "model/encoder.h"

const char *rp_arch_name(rp_arch a) {
    switch (a) {
    case RP_ARCH_LLAMA: return "llama";
    case RP_ARCH_QWEN3: return "qwen3";
    case RP_ARCH_QWEN2: return "qwen2";
    case RP_ARCH_PHI3: return "phi3";
    case RP_ARCH_GEMMA2: return "gemma2";
    case RP_ARCH_GEMMA3: return "gemma3";
    case RP_ARCH_BERT: return "bert";
    case RP_ARCH_NOMIC_BERT: return "nomic-bert";
    }
    return "?";
}

rp_model_params rp_model_default_params(void) {
    rp_model_params p = {.vocab_only = false, .n_threads = 2, .cpu_level = -1, .n_gpu_layers = -1, .gpu_device = NULL};
    return p;
}

/* ---- metadata helpers: "<arch>.<suffix>" keys ---- */

static rp_status get_arch_u32(const rp_gguf *g, const char *arch, const char *suffix, bool required,
                              uint32_t def, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    rp_status st = rp_gguf_get_u32(g, key, &v);
    if (st == RP_ERR_NOT_FOUND) {
        if (required) return rp_errorf(RP_ERR_FORMAT, "model: required key '%s' missing", key);
        v = def;
    } else if (st != RP_OK) {
        return st;
    }
    if (v > (uint32_t)INT32_MAX) return rp_errorf(RP_ERR_FORMAT, "model: key '%s' = %u too large", key, v);
    *out = (int32_t)v;
    return RP_OK;
}

static rp_status get_arch_f32(const rp_gguf *g, const char *arch, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    rp_status st = rp_gguf_get_f32(g, key, out);
    if (st == RP_ERR_NOT_FOUND) { *out = def; return RP_OK; }
    return st;
}

/* ---- tensors ---- */

/* Finds `name`, checks it is 2-D [cols x rows] (ggml order) of a computable
 * type, and fills *w. */
static rp_status bind_matrix(const rp_gguf *g, const char *name, int64_t cols, int64_t rows, bool required,
                             rp_weight *w) {
    memset(w, 0, sizeof *w);
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, name);
    if (!t) {
        if (!required) return RP_ERR_NOT_FOUND;
        return rp_errorf(RP_ERR_FORMAT, "model: tensor '%s' missing", name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return rp_errorf(RP_ERR_FORMAT,
                         "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)cols, (long long)rows);
    const rp_type_traits *tr = rp_type_get_traits((int)t->type);
    if (!tr || !tr->can_compute)
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: tensor '%s': type %s is not supported (Reprise has no kernels for it)",
                         name, tr ? tr->name : "?");
    w->data = t->data;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = rp_type_row_size(t->type, cols);
    return RP_OK;
}

/* A 1-D vector of n floats; non-F32 storage is converted into `store` (which
 * must have room for n floats) and *out points there. */
static rp_status bind_vector(const rp_gguf *g, const char *name, int64_t n, bool required, float *store,
                             const float **out) {
    *out = NULL;
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, name);
    if (!t) {
        if (!required) return RP_ERR_NOT_FOUND;
        return rp_errorf(RP_ERR_FORMAT, "model: tensor '%s' missing", name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return rp_errorf(RP_ERR_FORMAT, "model: tensor '%s' has %lld elements (dims %u), expected a vector of %lld",
                         name, (long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), t->n_dims, (long long)n);
    if (t->type == RP_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)t->data;
        return RP_OK;
    }
    if (!rp_dequantize_row(t->type, t->data, store, n))
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: tensor '%s' has an unsupported vector type", name);
    *out = store;
    return RP_OK;
}

rp_status rp_model_bind_matrix(const rp_gguf *g, const char *name, int64_t cols, int64_t rows, bool required,
                               rp_weight *w) {
    return bind_matrix(g, name, cols, rows, required, w);
}

rp_status rp_model_bind_vector(const rp_gguf *g, const char *name, int64_t n, bool required, float *store,
                               const float **out) {
    return bind_vector(g, name, n, required, store, out);
}

static bool arch_known(rp_str a) {
    return rp_str_eq(a, "llama") || rp_str_eq(a, "qwen3") || rp_str_eq(a, "qwen2") || rp_str_eq(a, "phi3") ||
           rp_str_eq(a, "gemma2") || rp_str_eq(a, "gemma3") || rp_str_eq(a, "bert") || rp_str_eq(a, "nomic-bert");
}

static rp_status load_hparams(const rp_gguf *g, rp_model *m) {
    rp_hparams *hp = &m->hp;
    rp_str arch;
    rp_status st = rp_gguf_get_str(g, "general.architecture", &arch);
    if (st == RP_ERR_NOT_FOUND) return rp_errorf(RP_ERR_FORMAT, "model: key 'general.architecture' missing");
    if (st != RP_OK) return st;
    const char *an;
    if (rp_str_eq(arch, "llama")) { hp->arch = RP_ARCH_LLAMA; an = "llama"; }
    else if (rp_str_eq(arch, "qwen3")) { hp->arch = RP_ARCH_QWEN3; an = "qwen3"; }
    else if (rp_str_eq(arch, "qwen2")) { hp->arch = RP_ARCH_QWEN2; an = "qwen2"; }
    else if (rp_str_eq(arch, "phi3")) { hp->arch = RP_ARCH_PHI3; an = "phi3"; }
    else if (rp_str_eq(arch, "gemma2")) { hp->arch = RP_ARCH_GEMMA2; an = "gemma2"; }
    else if (rp_str_eq(arch, "gemma3")) { hp->arch = RP_ARCH_GEMMA3; an = "gemma3"; }
    else if (rp_str_eq(arch, "bert")) { hp->arch = RP_ARCH_BERT; an = "bert"; }
    else if (rp_str_eq(arch, "nomic-bert")) { hp->arch = RP_ARCH_NOMIC_BERT; an = "nomic-bert"; }
    else
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: unknown architecture '%.*s' (supported: llama, qwen3, qwen2, phi3, gemma2, "
                         "gemma3; embedding models: bert, nomic-bert)",
                         (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);

    rp_str name;
    if (rp_gguf_get_str(g, "general.name", &name) == RP_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 120 ? 120 : name.len), name.ptr);

    RP_TRY(get_arch_u32(g, an, "context_length", false, 2048, &hp->n_ctx_train));
    {   /* embedding models say how their vectors are pooled; a bad value is the file's error */
        char key[128];
        snprintf(key, sizeof key, "%s.pooling_type", an);
        uint32_t v;
        rp_status pst = rp_gguf_get_u32(g, key, &v);
        if (pst != RP_OK && pst != RP_ERR_NOT_FOUND) return pst;
        if (pst == RP_OK && v > 4)
            return rp_errorf(RP_ERR_FORMAT, "model: key '%s' = %u is not a pooling type (0..4)", key, v);
        hp->has_pooling = pst == RP_OK;
        hp->pooling_type = pst == RP_OK ? (int32_t)v : 0;
    }
    RP_TRY(get_arch_u32(g, an, "embedding_length", true, 0, &hp->n_embd));
    RP_TRY(get_arch_u32(g, an, "feed_forward_length", true, 0, &hp->n_ff));
    RP_TRY(get_arch_u32(g, an, "block_count", true, 0, &hp->n_layer));
    RP_TRY(get_arch_u32(g, an, "attention.head_count", true, 0, &hp->n_head));
    RP_TRY(get_arch_u32(g, an, "attention.head_count_kv", false, (uint32_t)hp->n_head, &hp->n_head_kv));
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_ff <= 0 || hp->n_head_kv <= 0)
        return rp_errorf(RP_ERR_FORMAT, "model: zero dimension (n_embd %d, n_ff %d, n_layer %d, n_head %d, n_head_kv %d)",
                         hp->n_embd, hp->n_ff, hp->n_layer, hp->n_head, hp->n_head_kv);
    if (hp->n_layer > 1024 || hp->n_embd > 65536 || hp->n_head > 1024 || hp->n_ff > 1 << 20)
        return rp_errorf(RP_ERR_FORMAT, "model: implausible dimensions (n_embd %d, n_layer %d, n_head %d, n_ff %d)",
                         hp->n_embd, hp->n_layer, hp->n_head, hp->n_ff);
    if (hp->n_head % hp->n_head_kv != 0)
        return rp_errorf(RP_ERR_FORMAT, "model: head_count %d not a multiple of head_count_kv %d", hp->n_head,
                         hp->n_head_kv);
    int32_t def_hd = hp->n_embd / hp->n_head;
    RP_TRY(get_arch_u32(g, an, "attention.key_length", false, (uint32_t)def_hd, &hp->head_dim));
    int32_t vlen;
    RP_TRY(get_arch_u32(g, an, "attention.value_length", false, (uint32_t)hp->head_dim, &vlen));
    if (vlen != hp->head_dim)
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: key_length %d != value_length %d", hp->head_dim, vlen);
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return rp_errorf(RP_ERR_FORMAT, "model: head_dim %d invalid", hp->head_dim);
    RP_TRY(get_arch_u32(g, an, "rope.dimension_count", false, (uint32_t)hp->head_dim, &hp->n_rot));
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return rp_errorf(RP_ERR_FORMAT, "model: rope.dimension_count %d invalid for head_dim %d", hp->n_rot,
                         hp->head_dim);
    RP_TRY(get_arch_f32(g, an, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps));
    RP_TRY(get_arch_f32(g, an, "rope.freq_base", hp->arch == RP_ARCH_QWEN3 ? 1000000.0f : 10000.0f,
                        &hp->rope_base));
    const bool gemma = hp->arch == RP_ARCH_GEMMA2 || hp->arch == RP_ARCH_GEMMA3;
    hp->rope_kind = hp->arch == RP_ARCH_LLAMA ? RP_ROPE_NORM : RP_ROPE_NEOX;
    hp->rope_freq_scale = 1.0f;
    hp->rope_attn_factor = 1.0f;

    char key[128];
    rp_str stype = {0};
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    rp_status sst = rp_gguf_get_str(g, key, &stype);
    if (sst != RP_OK && sst != RP_ERR_NOT_FOUND) return sst;
    float factor = 1.0f;
    RP_TRY(get_arch_f32(g, an, "rope.scaling.factor", 1.0f, &factor));
    if (sst == RP_OK && rp_str_eq(stype, "linear")) {
        if (!(factor > 0)) return rp_errorf(RP_ERR_FORMAT, "model: rope.scaling.factor %g invalid", factor);
        hp->rope_freq_scale = 1.0f / factor;
    } else if (sst == RP_OK && rp_str_eq(stype, "llama3")) {
        hp->rope_llama3 = true;
        hp->rope_factor = factor;
        RP_TRY(get_arch_f32(g, an, "rope.scaling.low_freq_factor", 1.0f, &hp->rope_low_freq));
        RP_TRY(get_arch_f32(g, an, "rope.scaling.high_freq_factor", 4.0f, &hp->rope_high_freq));
        RP_TRY(get_arch_u32(g, an, "rope.scaling.original_context_length", false, 8192, &hp->rope_orig_ctx));
    } else if (sst == RP_OK && !rp_str_eq(stype, "none") && !(hp->arch == RP_ARCH_PHI3 && rp_str_eq(stype, "longrope"))) {
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: rope scaling type '%.*s' not supported (none, linear, llama3)",
                         (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    }
    if (rp_arch_is_qwen2_phi3(hp->arch)) RP_TRY(rp_arch_qp_hparams(g, m, an));
    if (gemma) RP_TRY(rp_gemma_hparams(g, m, an));
    if (rp_arch_is_encoder(hp->arch)) RP_TRY(rp_bert_hparams(g, m, an));
    return RP_OK;
}

/* inv_freq[i] = base^(-2i/n_rot) * freq_scale / factor_i, computed in double.
 * factor_i comes from a rope_freqs.weight tensor (how llama.cpp's converter
 * stores Llama 3.1+ scaling) or from the llama3 formula on the metadata. */
static rp_status build_rope(const rp_gguf *g, rp_model *m) {
    const rp_hparams *hp = &m->hp;
    int half = hp->n_rot / 2;
    m->rope_inv_freq = malloc(sizeof(float) * (size_t)half);
    if (!m->rope_inv_freq) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    const float *ff = NULL, *ff_long = NULL;
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, "rope_freqs.weight");
    if (t) {
        if (t->type != RP_TYPE_F32 || t->ne[0] != half || t->ne[1] != 1)
            return rp_errorf(RP_ERR_FORMAT, "model: tensor 'rope_freqs.weight' must be f32 [%d]", half);
        ff = (const float *)t->data;
    } else if (rp_arch_is_qwen2_phi3(hp->arch)) {
        RP_TRY(rp_arch_qp_rope_factors(g, m, &ff, &ff_long));   /* phi3 LongRoPE: the short and long factors */
    }
    if (ff_long) {   /* the same formula over the long factors (the file's checks passed in rp_arch_qp_rope_factors) */
        m->rope_inv_freq_long = malloc(sizeof(float) * (size_t)half);
        if (!m->rope_inv_freq_long) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
        for (int i = 0; i < half; i++)
            m->rope_inv_freq_long[i] =
                (float)(pow((double)hp->rope_base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale / ff_long[i]);
    }
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale;
        if (ff) {
            if (!(ff[i] > 0)) return rp_errorf(RP_ERR_FORMAT, "model: rope_freqs[%d] = %g invalid", i, ff[i]);
            f /= ff[i];
        } else if (hp->rope_llama3) {
            double wavelen = 2.0 * M_PI / f;
            double lo_wl = hp->rope_orig_ctx / hp->rope_low_freq;
            double hi_wl = hp->rope_orig_ctx / hp->rope_high_freq;
            if (wavelen > lo_wl) {
                f = f / hp->rope_factor;
            } else if (wavelen >= hi_wl) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq) /
                                (hp->rope_high_freq - hp->rope_low_freq);
                f = (1.0 - smooth) * f / hp->rope_factor + smooth * f;
            }
        }
        m->rope_inv_freq[i] = (float)f;
    }
    return RP_OK;
}

void rp_model_rope_cs(const rp_model *m, int32_t pos, float *c, float *s) {
    rp_model_rope_cs_table(m, m->rope_inv_freq, pos, c, s);
}

void rp_model_rope_cs_table(const rp_model *m, const float *inv_freq, int32_t pos, float *c, float *s) {
    int half = m->hp.n_rot / 2;
    const double af = m->hp.rope_attn_factor;   /* 1 unless the file sets rope.scaling.attn_factor */
    for (int i = 0; i < half; i++) {
        double th = (double)pos * (double)inv_freq[i];
        c[i] = (float)(cos(th) * af);
        s[i] = (float)(sin(th) * af);
    }
}

static rp_status bind_weights(const rp_gguf *g, rp_model *m) {
    const rp_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, HD = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * HD, KD = (int64_t)hp->n_head_kv * HD;

    const rp_gguf_tensor *te = rp_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return rp_errorf(RP_ERR_FORMAT, "model: tensor 'token_embd.weight' missing");
    if (te->ne[0] != E)
        return rp_errorf(RP_ERR_FORMAT, "model: token_embd.weight row length %lld != embedding_length %d",
                         (long long)te->ne[0], hp->n_embd);
    /* Converters may pad the embedding beyond the tokenizer (Qwen pads to a
     * multiple of 128); fewer rows than tokens would index out of bounds. */
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX || (m->tok && te->ne[1] < rp_tokenizer_n_vocab(m->tok)))
        return rp_errorf(RP_ERR_FORMAT, "model: token_embd.weight has %lld rows, vocabulary has %d tokens",
                         (long long)te->ne[1], m->tok ? rp_tokenizer_n_vocab(m->tok) : 0);
    m->hp.n_vocab = (int32_t)te->ne[1];
    RP_TRY(bind_matrix(g, "token_embd.weight", E, hp->n_vocab, true, &m->tok_embd));

    /* room for every non-F32 norm vector: 2 per layer + q/k norms + output, + gemma's 2 post-norms
     * and q/k norms per layer */
    size_t store_n = (size_t)E * (4 * (size_t)hp->n_layer + 1) + 4 * (size_t)HD * hp->n_layer;
    if (rp_arch_is_qwen2_phi3(hp->arch)) store_n += (size_t)rp_arch_qp_store_per_layer(hp) * (size_t)hp->n_layer;
    m->norm_store = malloc(store_n * sizeof(float));
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->norm_store || !m->layers) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    float *ns = m->norm_store;

    RP_TRY(bind_vector(g, "output_norm.weight", E, true, ns, &m->out_norm));
    ns += E;
    rp_status st = bind_matrix(g, "output.weight", E, hp->n_vocab, false, &m->output);
    if (st == RP_ERR_NOT_FOUND) {
        m->output = m->tok_embd;
        m->tied_output = true;
    } else if (st != RP_OK) {
        return st;
    }

    char nm[96];
#define LNAME(fmt) (snprintf(nm, sizeof nm, "blk.%d." fmt, l), nm)
    for (int l = 0; l < hp->n_layer; l++) {
        rp_layer *L = &m->layers[l];
        RP_TRY(bind_vector(g, LNAME("attn_norm.weight"), E, true, ns, &L->attn_norm)); ns += E;
        if (rp_arch_is_qwen2_phi3(hp->arch)) {   /* q/k/v, biases, gate/up: arch_qwen2_phi3.c */
            RP_TRY(rp_arch_qp_bind_layer(g, m, l, L, &ns));
        } else {
            RP_TRY(bind_matrix(g, LNAME("attn_q.weight"), E, QD, true, &L->wq));
            RP_TRY(bind_matrix(g, LNAME("attn_k.weight"), E, KD, true, &L->wk));
            RP_TRY(bind_matrix(g, LNAME("attn_v.weight"), E, KD, true, &L->wv));
        }
        RP_TRY(bind_matrix(g, LNAME("attn_output.weight"), QD, E, true, &L->wo));
        if (hp->arch == RP_ARCH_QWEN3) {
            RP_TRY(bind_vector(g, LNAME("attn_q_norm.weight"), HD, true, ns, &L->q_norm)); ns += HD;
            RP_TRY(bind_vector(g, LNAME("attn_k_norm.weight"), HD, true, ns, &L->k_norm)); ns += HD;
        }
        RP_TRY(bind_vector(g, LNAME("ffn_norm.weight"), E, true, ns, &L->ffn_norm)); ns += E;
        if (!rp_arch_is_qwen2_phi3(hp->arch)) {
            RP_TRY(bind_matrix(g, LNAME("ffn_gate.weight"), E, F, true, &L->w_gate));
            RP_TRY(bind_matrix(g, LNAME("ffn_up.weight"), E, F, true, &L->w_up));
        }
        RP_TRY(bind_matrix(g, LNAME("ffn_down.weight"), F, E, true, &L->w_down));
        if (hp->arch == RP_ARCH_GEMMA2 || hp->arch == RP_ARCH_GEMMA3) {
            size_t used = 0;
            RP_TRY(rp_gemma_bind_layer(g, m, l, ns, &used));
            ns += used;
        }
    }
#undef LNAME
    return RP_OK;
}

typedef struct {   /* progress over the hash pass, then the packing pass */
    rp_progress_fn fn;
    void *user;
    uint64_t done, total;
} load_progress;

static rp_status report(load_progress *lp, uint64_t add) {
    lp->done += add;
    if (lp->fn && !lp->fn(lp->user, lp->done, lp->total)) return rp_errorf(RP_ERR_CANCELLED, "model: loading cancelled");
    return RP_OK;
}

/* Fingerprint: architecture, hyper-parameters (RoPE base / scaling among
 * them), every tensor's name/type/shape, and a digest of every weight byte:
 * the reuse salt must change when any weight changes (a fine-tune touching a
 * few rows would otherwise serve KV computed by other weights). Cost on the
 * 1B-shape Q4_0 model (/tmp/models/l1b-bpe-q4_0.gguf, 703 MB, page cache warm,
 * one core): 99-110 ms in rp_model_load (4 runs; ~40 ms of it is XXH3, the
 * rest the first touch of the freshly mapped pages, which packing would pay
 * next), against 0.4 ms for the 4-KiB-per-MiB sample used before; the whole
 * load takes 0.9-2 s there. */
static rp_status compute_fingerprint(const rp_gguf *g, rp_model *m, load_progress *lp) {
    XXH3_state_t *s = XXH3_createState();
    if (!s) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    XXH3_64bits_reset_withSeed(s, 0x5265707269736521ULL);
    XXH3_64bits_update(s, &m->hp, sizeof m->hp);
    rp_status st = RP_OK;
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g) && st == RP_OK; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        XXH3_64bits_update(s, t->name.ptr, t->name.len);
        XXH3_64bits_update(s, &t->type, sizeof t->type);
        XXH3_64bits_update(s, t->ne, sizeof t->ne);
        if (!t->data) continue;
        const uint64_t step = (uint64_t)16 << 20;   /* the first touch of the pages: report every 16 MiB */
        for (uint64_t off = 0; off < t->nbytes && st == RP_OK; off += step) {
            const uint64_t len = t->nbytes - off < step ? t->nbytes - off : step;
            XXH3_64bits_update(s, (const uint8_t *)t->data + off, (size_t)len);
            st = report(lp, len);
        }
    }
    m->fingerprint = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return st;
}

static uint64_t weights_bytes(const rp_gguf *g) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) total += rp_gguf_tensor_at(g, i)->nbytes;
    return total;
}

/* bytes of a weight's GGUF rows (what packing reads) */
static uint64_t source_bytes(const rp_weight *w) { return (uint64_t)w->rows * w->row_bytes; }

/* Picks each matmul weight's kernel for the dispatch level and packs it
 * (in parallel). The token embedding is only gathered from, never multiplied,
 * so it stays in the mapping unless it doubles as the tied output. */
static rp_status prepare_weights(rp_model *m, rp_model_params params, load_progress *lp) {
    int lvl = params.cpu_level >= 0 ? params.cpu_level : (int)rp_cpu_level_active();
    if (lvl > (int)rp_cpu_info_get()->best)
        return rp_errorf(RP_ERR_UNSUPPORTED, "model: cpu level %s not available here", rp_cpu_level_name((rp_cpu_level)lvl));
    m->cpu_level = lvl;
    rp_pool *pool = NULL;
    RP_TRY(rp_pool_create(params.n_threads > 0 ? params.n_threads : 1, &pool));
    rp_status st = RP_OK;
    for (int l = 0; l < m->hp.n_layer && st == RP_OK; l++) {
        rp_layer *L = &m->layers[l];
        rp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && st == RP_OK; i++) {
            if (!ws[i]->data) continue;   /* a weight the architecture has not (bert's gate) */
            st = rp_weight_prepare(ws[i], (rp_cpu_level)lvl, pool, true);
            m->packed_bytes += ws[i]->packed_bytes;
            if (st == RP_OK) st = report(lp, source_bytes(ws[i]));
        }
    }
    if (st == RP_OK && m->output.data) {   /* encoders have no output head */
        st = rp_weight_prepare(&m->output, (rp_cpu_level)lvl, pool, !m->tied_output);
        m->packed_bytes += m->output.packed_bytes;
        if (st == RP_OK) st = report(lp, source_bytes(&m->output));
    }
    rp_pool_free(pool);
    return st;
}

rp_status rp_model_load(const char *path, rp_model_params params, rp_model **out) {
    *out = NULL;
    rp_model *m = calloc(1, sizeof *m);
    if (!m) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
    rp_status st = rp_gguf_open(path, &m->gguf);
    if (st != RP_OK) { free(m); return st; }
    const rp_gguf *g = m->gguf;

    if (!params.vocab_only) {
        rp_str arch;
        if (rp_gguf_get_str(g, "general.architecture", &arch) == RP_OK && !arch_known(arch)) {
            st = load_hparams(g, m);   /* names the unknown architecture */
            goto fail;
        }
        if (rp_gguf_n_tensors(g) == 0) {
            st = rp_errorf(RP_ERR_FORMAT, "model: '%s' has no tensors (a vocab-only file? use it with `reprise tokenize`)", path);
            goto fail;
        }
        if ((st = load_hparams(g, m)) != RP_OK) goto fail;
    }
    if (rp_gguf_find_key(g, "tokenizer.ggml.model") >= 0) {
        if ((st = rp_tokenizer_load(g, &m->tok)) != RP_OK) goto fail;
        m->hp.n_vocab = rp_tokenizer_n_vocab(m->tok);   /* refined from token_embd below */
        if ((st = rp_model_chat_init(m)) != RP_OK) goto fail;
    }
    if (params.vocab_only) {
        if (!m->tok) { st = rp_errorf(RP_ERR_FORMAT, "model: no tokenizer in '%s'", path); goto fail; }
        *out = m;
        return RP_OK;
    }
    if ((st = rp_arch_is_encoder(m->hp.arch) ? rp_bert_bind(g, m) : bind_weights(g, m)) != RP_OK) goto fail;
    if ((st = build_rope(g, m)) != RP_OK) goto fail;
    if ((st = rp_gemma_build_rope(m)) != RP_OK) goto fail;
    load_progress lp = {params.progress, params.progress_user, 0, 0};
    m->weight_bytes = weights_bytes(g);
    lp.total = m->weight_bytes + source_bytes(&m->output);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        lp.total += source_bytes(&L->wq) + source_bytes(&L->wk) + source_bytes(&L->wv) + source_bytes(&L->wo) +
                    source_bytes(&L->w_gate) + source_bytes(&L->w_up) + source_bytes(&L->w_down);
    }
    if ((st = compute_fingerprint(g, m, &lp)) != RP_OK) goto fail;
    if ((st = prepare_weights(m, params, &lp)) != RP_OK) goto fail;
    m->gpu_first = m->hp.n_layer;
    if ((st = rp_gpu_offload_create(m, params.n_gpu_layers, params.gpu_device, &m->gpu, m->gpu_notice,
                                    sizeof m->gpu_notice)) != RP_OK)
        goto fail;
    if (m->gpu) m->gpu_first = rp_gpu_offload_first(m->gpu);
    *out = m;
    return RP_OK;
fail:
    rp_model_free(m);
    return st;
}

int32_t rp_model_gpu_layers(const rp_model *m) { return m && m->gpu ? m->hp.n_layer - m->gpu_first : 0; }
const char *rp_model_gpu_notice(const rp_model *m) { return m ? m->gpu_notice : ""; }

void rp_model_free(rp_model *m) {
    if (!m) return;
    rp_gpu_offload_free(m->gpu);   /* the model outlives its contexts and caches, which hold GPU parts */
    rp_model_chat_free(m);
    rp_tokenizer_free(m->tok);
    if (m->layers)
        for (int l = 0; l < m->hp.n_layer; l++) {
            rp_layer *L = &m->layers[l];
            rp_weight_release(&L->wq); rp_weight_release(&L->wk); rp_weight_release(&L->wv);
            rp_weight_release(&L->wo); rp_weight_release(&L->w_gate); rp_weight_release(&L->w_up);
            rp_weight_release(&L->w_down);
        }
    rp_weight_release(&m->output);
    rp_bert_free(m);
    free(m->layers);
    free(m->norm_store);
    free(m->rope_inv_freq);
    free(m->rope_inv_freq_local);
    free(m->rope_inv_freq_long);
    rp_gguf_close(m->gguf);
    free(m);
}
