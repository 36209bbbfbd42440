/* synth.c — random-weight GGUF writer for real architecture shapes (speed work, embedded default; encoders too). */
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "model/quant_mix.h"

typedef struct preset {
    const char *name;
    rp_arch arch;
    int32_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    float rope_base, rms_eps;
    bool llama3_rope;    /* writes rope_freqs.weight with Llama 3.2's scaling (factor 32, 1, 4, 8192) */
    int32_t n_rot;       /* rotated dims per head; 0: head_dim (Phi-4-mini rotates 96 of 128) */
    int32_t longrope_orig;   /* phi3 LongRoPE: rope_factors_short/long.weight, original context length; 0: none */
    int32_t n_swa;       /* gemma: attention.sliding_window */
} preset;

/* Shapes from the published configs of each model. */
static const preset k_presets[] = {
    {"tiny", RP_ARCH_LLAMA, 256, 768, 4, 8, 4, 32, 512, 2048, 10000.0f, 1e-5f, false, 0, 0, 0},
    {"tiny", RP_ARCH_QWEN3, 256, 768, 4, 4, 2, 64, 512, 2048, 1000000.0f, 1e-6f, false, 0, 0, 0},
    /* a small llama for the demo: big enough that prefill dominates, quick to make */
    {"small", RP_ARCH_LLAMA, 512, 1536, 8, 8, 4, 64, 8192, 4096, 10000.0f, 1e-5f, false, 0, 0, 0},
    /* tiny shapes with Llama 3's RoPE (base 500000, llama3 scaling in rope_freqs): tests of exact re-rotation */
    {"tiny-llama3", RP_ARCH_LLAMA, 256, 768, 4, 8, 4, 32, 512, 2048, 500000.0f, 1e-5f, true, 0, 0, 0},
    {"llama-3.2-1b", RP_ARCH_LLAMA, 2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000.0f, 1e-5f, true, 0, 0, 0},
    {"llama-3.2-3b", RP_ARCH_LLAMA, 3072, 8192, 28, 24, 8, 128, 128256, 131072, 500000.0f, 1e-5f, true, 0, 0, 0},
    {"qwen3-0.6b", RP_ARCH_QWEN3, 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, false, 0, 0, 0},
    {"qwen3-1.7b", RP_ARCH_QWEN3, 2048, 6144, 28, 16, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, false, 0, 0, 0},
    {"qwen3-4b", RP_ARCH_QWEN3, 2560, 9728, 36, 32, 8, 128, 151936, 40960, 1000000.0f, 1e-6f, false, 0, 0, 0},
    /* qwen2: q/k/v biases; tied embeddings as the 0.5B / 1.5B models */
    {"tiny", RP_ARCH_QWEN2, 256, 768, 4, 4, 2, 64, 512, 2048, 1000000.0f, 1e-6f, false, 0, 0, 0},
    {"qwen2.5-0.5b", RP_ARCH_QWEN2, 896, 4864, 24, 14, 2, 64, 151936, 32768, 1000000.0f, 1e-6f, false, 0, 0, 0},
    {"qwen2.5-1.5b", RP_ARCH_QWEN2, 1536, 8960, 28, 12, 2, 128, 151936, 32768, 1000000.0f, 1e-6f, false, 0, 0, 0},
    /* phi3: fused attn_qkv and gate|up; tiny-longrope has Phi-4-mini's partial rotary and LongRoPE factors */
    {"tiny", RP_ARCH_PHI3, 256, 768, 4, 8, 4, 32, 512, 4096, 10000.0f, 1e-5f, false, 0, 0, 0},
    {"tiny-longrope", RP_ARCH_PHI3, 256, 768, 4, 4, 2, 64, 512, 131072, 10000.0f, 1e-5f, false, 48, 4096, 0},
    {"phi-3-mini", RP_ARCH_PHI3, 3072, 8192, 32, 32, 32, 96, 32064, 4096, 10000.0f, 1e-5f, false, 0, 0, 0},
    {"phi-4-mini", RP_ARCH_PHI3, 3072, 8192, 32, 24, 8, 128, 200064, 131072, 10000.0f, 1e-5f, false, 96, 4096, 0},
    /* gemma tiny shapes with a 32-position window, so tests run contexts longer than it: gemma2 layers
     * 0, 2 local and 1, 3 global; gemma3 layers 0-4 local, 5 global */
    {"tiny", RP_ARCH_GEMMA2, 256, 512, 4, 4, 2, 64, 512, 8192, 10000.0f, 1e-6f, false, 0, 0, 32},
    {"tiny", RP_ARCH_GEMMA3, 256, 512, 6, 4, 1, 64, 512, 32768, 1000000.0f, 1e-6f, false, 0, 0, 32},
    {"gemma-2-2b", RP_ARCH_GEMMA2, 2304, 9216, 26, 8, 4, 256, 256000, 8192, 10000.0f, 1e-6f, false, 0, 0, 4096},
    {"gemma-3-1b", RP_ARCH_GEMMA3, 1152, 6912, 26, 4, 1, 256, 262144, 32768, 1000000.0f, 1e-6f, false, 0, 0, 512},
    /* encoders (embedding models), rms_eps holding the LayerNorm epsilon: tiny ones with the built-in 1024-token
     * WordPiece vocabulary (bert: uncased, CLS pooling; nomic-bert: cased, mean pooling), and the shapes (uncased) of
     * bge-small-en-v1.5 (CLS), all-MiniLM-L6-v2 (mean) and nomic-embed-text-v1.5 (mean, RoPE base 1000) */
    {"tiny", RP_ARCH_BERT, 128, 512, 2, 4, 4, 32, 1024, 512, 10000.0f, 1e-12f, false, 0, 0, 0},
    {"bge-small", RP_ARCH_BERT, 384, 1536, 12, 12, 12, 32, 30522, 512, 10000.0f, 1e-12f, false, 0, 0, 0},
    {"all-minilm-l6", RP_ARCH_BERT, 384, 1536, 6, 12, 12, 32, 30522, 512, 10000.0f, 1e-12f, false, 0, 0, 0},
    {"tiny", RP_ARCH_NOMIC_BERT, 128, 384, 2, 4, 4, 32, 1024, 2048, 1000.0f, 1e-12f, false, 0, 0, 0},
    {"nomic-embed-text-v1.5", RP_ARCH_NOMIC_BERT, 768, 3072, 12, 12, 12, 64, 30522, 2048, 1000.0f, 1e-12f, false, 0, 0, 0},
};

/* llama.cpp's pooling_type of an encoder preset: 2 (cls) for bert's tiny and bge-small, else 1 (mean) */
static uint32_t encoder_pooling(const preset *pr) {
    return pr->arch == RP_ARCH_BERT && strcmp(pr->name, "all-minilm-l6") != 0 ? 2 : 1;
}

const char *const rp_synth_preset_names[] = {"tiny", "tiny-llama3", "small", "llama-3.2-1b", "llama-3.2-3b", "qwen3-0.6b",
                                             "qwen3-1.7b", "qwen3-4b", "qwen2.5-0.5b", "qwen2.5-1.5b",
                                             "tiny-longrope", "phi-3-mini", "phi-4-mini", "gemma-2-2b",
                                             "gemma-3-1b", "bge-small", "all-minilm-l6", "nomic-embed-text-v1.5", NULL};

rp_synth_params rp_synth_default_params(void) {
    rp_synth_params p = {.arch = RP_ARCH_LLAMA, .preset = "tiny", .type = "q8_0", .seed = 1, .n_threads = 2};
    return p;
}

/* ---- deterministic values: each row has its own generator seeded by
 * (seed, tensor name, row), so threads can fill rows in any order ---- */

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef enum { FILL_UNIFORM, FILL_NORM, FILL_ROPE, FILL_LONGROPE_SHORT, FILL_LONGROPE_LONG } fill_kind;

typedef struct tensor_spec {
    char name[64];
    rp_type type;
    int64_t ne[2];
    fill_kind kind;
    float scale;          /* uniform half-width */
    float mul;            /* FILL_NORM: the values are (1 + v) * mul (peaked models); 0 is 1 */
    uint64_t seed;
    const preset *pr;
    /* a fused matrix (phi3 attn_qkv, ffn_up = gate|up): rows of part i get the values the separate tensor
     * part_seed[i] would have at the same row, so fused and unfused files hold the same weights */
    int n_parts;
    int64_t part_rows[3];
    uint64_t part_seed[3];
    float part_mul[3];    /* the part's values are its separate tensor's: uniform(-scale, scale) * part_mul */
} tensor_spec;

typedef struct {
    const tensor_spec *ts;
    uint8_t *dst;
    size_t row_bytes;
    float **rowbuf;       /* per thread [ne0] */
    bool ok;
    int64_t row0;         /* the first row of dst in the tensor (a row's values depend on its index) */
} fill_job;

static void fill_rows(void *vp, int64_t rb, int64_t re, int tid) {
    fill_job *j = vp;
    const tensor_spec *ts = j->ts;
    float *buf = j->rowbuf[tid];
    for (int64_t r = rb; r < re; r++) {
        uint64_t seed = ts->seed;
        float scale = ts->scale;
        int64_t row = j->row0 + r;
        for (int p = 0; p < ts->n_parts; p++) {   /* a fused matrix: the part's own seed, scale and row */
            if (row < ts->part_rows[p]) { seed = ts->part_seed[p]; scale *= ts->part_mul[p]; break; }
            row -= ts->part_rows[p];
        }
        uint64_t st = mix64(seed ^ mix64((uint64_t)row + 0x51ed27));
        for (int64_t i = 0; i < ts->ne[0]; i++) {
            st += 0x9e3779b97f4a7c15ULL;
            double u = (double)(mix64(st) >> 11) * 0x1.0p-53;   /* [0, 1) */
            float v = (float)(2.0 * u - 1.0) * scale;
            buf[i] = ts->kind == FILL_NORM ? (1.0f + v) * (ts->mul != 0 ? ts->mul : 1.0f) : v;
        }
        if (!rp_quantize_row(ts->type, buf, j->dst + (size_t)r * j->row_bytes, ts->ne[0])) j->ok = false;
    }
}

typedef struct {
    rp_pool *pool;
    float **rowbuf;
    tensor_spec *specs;
    size_t n_specs;
    const rp_synth_params *p;   /* progress callback */
    uint64_t done, total;       /* tensor bytes made / to make */
} synth_ctx;

static rp_status report(synth_ctx *sc, uint64_t add) {
    sc->done += add;
    if (sc->p->progress && !sc->p->progress(sc->p->progress_user, sc->done, sc->total))
        return rp_errorf(RP_ERR_CANCELLED, "synth: cancelled");
    return RP_OK;
}

static rp_status fill_cb(void *user, const char *name, void *dst, uint64_t nbytes) {
    synth_ctx *sc = user;
    const tensor_spec *ts = NULL;
    for (size_t i = 0; i < sc->n_specs && !ts; i++)
        if (strcmp(sc->specs[i].name, name) == 0) ts = &sc->specs[i];
    if (!ts) return rp_errorf(RP_ERR_INTERNAL, "synth: no spec for tensor '%s'", name);
    if (ts->kind == FILL_LONGROPE_SHORT || ts->kind == FILL_LONGROPE_LONG) {
        /* LongRoPE per-pair factors: short ones near 1, long ones rising to the context ratio (the shape of
         * Phi-3.5's; the values are made up) */
        const preset *pr = ts->pr;
        float *f = dst;
        const int half = (pr->n_rot ? pr->n_rot : pr->head_dim) / 2;
        const double ratio = (double)pr->n_ctx / pr->longrope_orig;
        for (int i = 0; i < half; i++) {
            double x = half > 1 ? (double)i / (half - 1) : 0;
            f[i] = (float)(ts->kind == FILL_LONGROPE_SHORT ? 1.0 + 0.25 * x * x : 1.0 + (ratio - 1.0) * x * x);
        }
        return report(sc, nbytes);
    }
    if (ts->kind == FILL_ROPE) {
        /* Llama 3.2's llama3 scaling as per-pair frequency factors, the way
         * llama.cpp's converter stores it (rope_freqs.weight). */
        const preset *pr = ts->pr;
        float *f = dst;
        int half = pr->head_dim / 2;
        const double factor = 32, lo = 1, hi = 4, orig = 8192;
        for (int i = 0; i < half; i++) {
            double freq = pow((double)pr->rope_base, -2.0 * i / pr->head_dim);
            double wl = 2 * M_PI / freq;
            double ff;
            if (wl < orig / hi) ff = 1;
            else if (wl > orig / lo) ff = factor;
            else {
                double smooth = (orig / wl - lo) / (hi - lo);
                ff = 1.0 / ((1 - smooth) / factor + smooth);
            }
            f[i] = (float)ff;
        }
        return report(sc, nbytes);
    }
    size_t rb = rp_type_row_size(ts->type, ts->ne[0]);
    if (rb * (size_t)ts->ne[1] != nbytes) return rp_errorf(RP_ERR_INTERNAL, "synth: size mismatch for '%s'", name);
    /* in slices of ~8 MiB, so progress (and a cancel) is never far away */
    const int64_t slice = rb >= ((size_t)8 << 20) ? 1 : (int64_t)(((size_t)8 << 20) / rb);
    for (int64_t r0 = 0; r0 < ts->ne[1]; r0 += slice) {
        const int64_t nr = ts->ne[1] - r0 < slice ? ts->ne[1] - r0 : slice;
        fill_job j = {ts, (uint8_t *)dst + (size_t)r0 * rb, rb, sc->rowbuf, true, r0};
        rp_pool_parallel_for(sc->pool, nr, 16, fill_rows, &j);
        if (!j.ok) return rp_errorf(RP_ERR_INTERNAL, "synth: cannot quantize '%s' to %s", name, rp_type_get_traits((int)ts->type)->name);
        RP_TRY(report(sc, (uint64_t)nr * rb));
    }
    return RP_OK;
}

/* ---- built-in byte-level SentencePiece vocabulary ----
 * <unk> <s> </s>, 256 byte-fallback tokens, then printable ASCII characters
 * and "▁x" pieces so plain English does not fall back to bytes entirely;
 * padded with UNUSED "[PADn]" tokens up to the preset's vocab size, so the
 * embedding and output matrices have the real model's cost. */
static rp_status write_builtin_vocab(rp_gguf_writer *w, int32_t n_vocab, char ***strs_out, rp_str **views_out) {
    char **s = calloc((size_t)n_vocab, sizeof *s);
    rp_str *v = calloc((size_t)n_vocab, sizeof *v);
    float *scores = calloc((size_t)n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)n_vocab, sizeof *types);
    *strs_out = s;
    *views_out = v;
    if (!s || !v || !scores || !types) { free(scores); free(types); return rp_errorf(RP_ERR_NOMEM, "synth: out of memory"); }
    int32_t n = 0;
    char tmp[32];
#define ADD(str, score, type)                   \
    do {                                        \
        if (n < n_vocab) {                      \
            s[n] = strdup(str);                 \
            scores[n] = (score);                \
            types[n] = (type);                  \
            n++;                                \
        }                                       \
    } while (0)
    ADD("<unk>", 0, RP_TOKTYPE_UNKNOWN);
    ADD("<s>", 0, RP_TOKTYPE_CONTROL);
    ADD("</s>", 0, RP_TOKTYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        snprintf(tmp, sizeof tmp, "<0x%02X>", b);
        ADD(tmp, 0, RP_TOKTYPE_BYTE);
    }
    ADD("\xe2\x96\x81", -1, RP_TOKTYPE_NORMAL);   /* ▁ */
    for (int ch = 33; ch < 127; ch++) {
        tmp[0] = (char)ch; tmp[1] = 0;
        ADD(tmp, -2, RP_TOKTYPE_NORMAL);
    }
    for (int ch = 'a'; ch <= 'z'; ch++) {
        snprintf(tmp, sizeof tmp, "\xe2\x96\x81%c", ch);
        ADD(tmp, -3, RP_TOKTYPE_NORMAL);
    }
    for (int k = 0; n < n_vocab; k++) {
        snprintf(tmp, sizeof tmp, "[PAD%d]", k);
        ADD(tmp, -10000, RP_TOKTYPE_UNUSED);
    }
#undef ADD
    for (int32_t i = 0; i < n; i++) {
        if (!s[i]) { free(scores); free(types); return rp_errorf(RP_ERR_NOMEM, "synth: out of memory"); }
        v[i].ptr = s[i];
        v[i].len = strlen(s[i]);
    }
    rp_status st = RP_OK;
    if (n != n_vocab) st = rp_errorf(RP_ERR_INVALID_ARG, "synth: vocab size %d too small for the built-in vocab", n_vocab);
    if (st == RP_OK) st = rp_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == RP_OK) st = rp_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    if (st == RP_OK) st = rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v, (uint64_t)n);
    if (st == RP_OK) st = rp_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RP_GGUF_F32, scores, (uint64_t)n);
    if (st == RP_OK) st = rp_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_I32, types, (uint64_t)n);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == RP_OK) st = rp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (st == RP_OK) st = rp_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    free(scores);
    free(types);
    return st;
}

static uint64_t name_seed(uint64_t seed, const char *name) { return mix64(seed ^ XXH3_64bits(name, strlen(name))); }

/* Marks *t as the fusion of blk.l.<a|b|c>.weight (rows ra, rb, rc; c may be NULL): see tensor_spec. */
static void fuse_parts(tensor_spec *t, uint64_t seed, int l, const char *a, const char *b, const char *c, int64_t ra,
                       int64_t rb, int64_t rc, float mul_a) {
    const char *parts[3] = {a, b, c};
    const int64_t rows[3] = {ra, rb, rc};
    t->n_parts = 0;
    for (int i = 0; i < 3 && parts[i]; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, parts[i]);
        t->part_rows[t->n_parts] = rows[i];
        t->part_seed[t->n_parts] = name_seed(seed, nm);
        t->part_mul[t->n_parts] = i == 0 ? mul_a : 1.0f;
        t->n_parts++;
    }
}

rp_status rp_synth_write(const rp_synth_params *p, const char *out_path) {
    const preset *pr = NULL;
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (strcmp(k_presets[i].name, p->preset) == 0 && k_presets[i].arch == p->arch) pr = &k_presets[i];
    if (!pr) {
        for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
            if (strcmp(k_presets[i].name, p->preset) == 0)
                return rp_errorf(RP_ERR_INVALID_ARG, "synth: preset '%s' is a %s model, not --arch %s", p->preset,
                                 rp_arch_name(k_presets[i].arch), rp_arch_name(p->arch));
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "synth: unknown preset '%s' (tiny, small, tiny-llama3, llama-3.2-1b, llama-3.2-3b; qwen3-0.6b, "
                         "qwen3-1.7b, qwen3-4b; qwen2.5-0.5b, qwen2.5-1.5b; tiny-longrope, phi-3-mini, phi-4-mini; gemma-2-2b, gemma-3-1b; "
                         "bge-small, all-minilm-l6 (bert); nomic-embed-text-v1.5 (nomic-bert))",
                         p->preset);
    }
    if (rp_arch_is_encoder(pr->arch) && p->peak > 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "synth: --peak shapes next-token logits; %s has no output head", rp_arch_name(pr->arch));
    const rp_ftype *ft = rp_ftype_find(p->type);
    if (!ft) return rp_errorf(RP_ERR_INVALID_ARG, "synth: --type '%s' not one of %s", p->type, rp_ftype_list());

    rp_gguf_writer *w = NULL;
    RP_TRY(rp_gguf_writer_create(&w));
    rp_status st = RP_OK;
    rp_gguf *vocab = NULL;
    char **strs = NULL;
    rp_str *views = NULL;
    tensor_spec *specs = NULL;
    synth_ctx sc = {0};
    int32_t n_vocab = pr->n_vocab;
    const char *an = rp_arch_name(pr->arch);
    char key[128], name[96];

#define K(suffix) (snprintf(key, sizeof key, "%s.%s", an, suffix), key)
#define CHK(expr) do { if (st == RP_OK) st = (expr); } while (0)
    CHK(rp_gguf_writer_set_str(w, "general.architecture", an));
    snprintf(name, sizeof name, "reprise-synth-%s-%s", pr->name, p->type);
    CHK(rp_gguf_writer_set_str(w, "general.name", name));
    CHK(rp_gguf_writer_set_u32(w, "general.file_type", ft->llama_ftype));
    CHK(rp_gguf_writer_set_u64(w, "reprise.synth.seed", p->seed));
    if (p->peak > 0) CHK(rp_gguf_writer_set_f32(w, "reprise.synth.peak", p->peak));

    if (p->vocab_path) {
        CHK(rp_gguf_open(p->vocab_path, &vocab));
        if (st == RP_OK) {
            rp_gguf_vtype et;
            uint64_t nt;
            int64_t ki;
            st = rp_gguf_get_arr(vocab, "tokenizer.ggml.tokens", &et, &nt, &ki);
            if (st == RP_ERR_NOT_FOUND) st = rp_errorf(RP_ERR_FORMAT, "synth: '%s' has no tokenizer.ggml.tokens", p->vocab_path);
            if (st == RP_OK) n_vocab = (int32_t)nt;
        }
        for (uint64_t i = 0; st == RP_OK && i < rp_gguf_n_kv(vocab); i++) {
            rp_str k = rp_gguf_kv_key(vocab, i);
            if (k.len > 10 && memcmp(k.ptr, "tokenizer.", 10) == 0) st = rp_gguf_writer_copy_kv(w, vocab, i);
        }
    } else if (rp_arch_is_encoder(pr->arch)) {
        /* uncased as BERT's and nomic-embed's; the tiny nomic-bert cased, so tests cover both normalizer settings */
        CHK(rp_synth_wpm_vocab(w, n_vocab, !(pr->arch == RP_ARCH_NOMIC_BERT && !strcmp(pr->name, "tiny"))));
    } else {
        CHK(write_builtin_vocab(w, n_vocab, &strs, &views));
    }

    CHK(rp_gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)n_vocab));
    CHK(rp_gguf_writer_set_u32(w, K("context_length"), (uint32_t)pr->n_ctx));
    CHK(rp_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)pr->n_embd));
    CHK(rp_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)pr->n_ff));
    CHK(rp_gguf_writer_set_u32(w, K("block_count"), (uint32_t)pr->n_layer));
    CHK(rp_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)pr->n_head));
    CHK(rp_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)pr->n_head_kv));
    CHK(rp_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)pr->head_dim));
    CHK(rp_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)pr->head_dim));
    const int32_t n_rot = pr->n_rot ? pr->n_rot : pr->head_dim;
    CHK(rp_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)n_rot));
    if (pr->longrope_orig) {   /* as llama.cpp's converter writes Phi-3.5 / Phi-4-mini */
        const double scale = (double)pr->n_ctx / pr->longrope_orig;
        CHK(rp_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)pr->longrope_orig));
        CHK(rp_gguf_writer_set_f32(w, K("rope.scaling.attn_factor"),
                                   (float)sqrt(1.0 + log(scale) / log((double)pr->longrope_orig))));
    }
    const bool enc = rp_arch_is_encoder(pr->arch);
    if (pr->arch != RP_ARCH_BERT) CHK(rp_gguf_writer_set_f32(w, K("rope.freq_base"), pr->rope_base));
    if (enc) {   /* as llama.cpp's converter writes BERT-family files */
        CHK(rp_gguf_writer_set_f32(w, K("attention.layer_norm_epsilon"), pr->rms_eps));
        CHK(rp_gguf_writer_set_bool(w, K("attention.causal"), false));
        CHK(rp_gguf_writer_set_u32(w, K("pooling_type"), encoder_pooling(pr)));
    } else {
        CHK(rp_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), pr->rms_eps));
    }
    const bool gemma = pr->arch == RP_ARCH_GEMMA2 || pr->arch == RP_ARCH_GEMMA3;
    if (gemma) CHK(rp_gguf_writer_set_u32(w, K("attention.sliding_window"), (uint32_t)pr->n_swa));
    if (pr->arch == RP_ARCH_GEMMA2) {   /* the values of Gemma 2's config, as llama.cpp's converter writes them */
        CHK(rp_gguf_writer_set_f32(w, K("attn_logit_softcapping"), 50.0f));
        CHK(rp_gguf_writer_set_f32(w, K("final_logit_softcapping"), 30.0f));
    }

    /* tensor specs */
    size_t n_specs = 0, cap = 9 + (size_t)pr->n_layer * 20;
    specs = calloc(cap, sizeof *specs);
    if (!specs && st == RP_OK) st = rp_errorf(RP_ERR_NOMEM, "synth: out of memory");
    const int64_t E = pr->n_embd, F = pr->n_ff, QD = (int64_t)pr->n_head * pr->head_dim,
                  KD = (int64_t)pr->n_head_kv * pr->head_dim;
    /* uniform(-a, a) with std ~ 1/sqrt(fan_in) * 0.5 keeps activations bounded through the layers */
#define SPEC(nm, ty, c, r, kd, sc_)                                              \
    do {                                                                         \
        if (st == RP_OK) {                                                       \
            tensor_spec *t_ = &specs[n_specs++];                                 \
            snprintf(t_->name, sizeof t_->name, "%s", nm);                       \
            t_->type = (ty); t_->ne[0] = (c); t_->ne[1] = (r);                   \
            t_->kind = (kd); t_->scale = (sc_); t_->pr = pr;                     \
            t_->seed = name_seed(p->seed, t_->name);                          \
        }                                                                        \
    } while (0)
    /* tensor types as llama.cpp's quantize gives them; no output.weight: the embedding is tied (unless peaked) */
    const int n_gqa = pr->n_head / pr->n_head_kv;
    const bool peaked = p->peak > 0;
    /* peaked: logits = output . rmsnorm(h), rms(rmsnorm(h)) ~ 1, so rows uniform(-a, a) with a = peak * sqrt(3 / E)
     * give logits of std ~peak; queries scaled by peak make attention scores spread over ~peak units */
    const float qmul = peaked ? p->peak : 1.0f;
#define MTYPE(role, layer, ncols) rp_ftype_tensor_type(ft, role, layer, pr->n_layer, n_gqa, !peaked, ncols)
    rp_type emb_t = MTYPE("token_embd", 0, E);
    /* gemma multiplies the (tied) embeddings by sqrt(n_embd) on input: at 1.0 each token's own row would
     * dominate its logits by ~100 units; 0.1 leaves logits spread over a few units that depend on every layer.
     * Peaked gemma stays tied (llama.cpp's gemma2/gemma3 always tie the output to token_embd and refuse a file
     * with an output.weight): rows uniform(-a, a), a = peak * sqrt(3 / E), give logits of std ~peak, and the
     * post-norm gains (gemma_post below) make the layers' sum outweigh the input token's own row. */
    const float emb_a = !gemma ? 1.0f : peaked ? p->peak * sqrtf(3.0f / (float)E) : 0.1f;
    SPEC("token_embd.weight", emb_t, E, n_vocab, FILL_UNIFORM, emb_a);
    if (enc) {   /* bert / nomic-bert: input embeddings and post-LayerNorm blocks, F32 vectors (biases ~0.1) */
        const bool bert = pr->arch == RP_ARCH_BERT;
        const float se = 1.7f / sqrtf((float)E), sf = 1.7f / sqrtf((float)F);
        SPEC("token_types.weight", RP_TYPE_F32, E, 2, FILL_UNIFORM, 0.5f);
        if (bert) SPEC("position_embd.weight", RP_TYPE_F32, E, pr->n_ctx, FILL_UNIFORM, 0.5f);
        SPEC("token_embd_norm.weight", RP_TYPE_F32, E, 1, FILL_NORM, 0.05f);
        SPEC("token_embd_norm.bias", RP_TYPE_F32, E, 1, FILL_UNIFORM, 0.05f);
        for (int l = 0; l < pr->n_layer && st == RP_OK; l++) {
            char nm[64];
#define ESPEC(suffix, role, c, r, kd, sc_)                                           \
            do {                                                                     \
                snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                     \
                SPEC(nm, !*(role) ? RP_TYPE_F32 : MTYPE(role, l, c), c, r, kd, sc_); \
            } while (0)
            if (bert) {
                ESPEC("attn_q.weight", "attn_q", E, QD, FILL_UNIFORM, se);
                ESPEC("attn_k.weight", "attn_k", E, KD, FILL_UNIFORM, se);
                ESPEC("attn_v.weight", "attn_v", E, KD, FILL_UNIFORM, se);
                ESPEC("attn_q.bias", "", QD, 1, FILL_UNIFORM, 0.1f);
                ESPEC("attn_k.bias", "", KD, 1, FILL_UNIFORM, 0.1f);
                ESPEC("attn_v.bias", "", KD, 1, FILL_UNIFORM, 0.1f);
            } else {
                ESPEC("attn_qkv.weight", "attn_qkv", E, QD + 2 * KD, FILL_UNIFORM, se);
            }
            ESPEC("attn_output.weight", "attn_output", QD, E, FILL_UNIFORM, 1.7f / sqrtf((float)QD));
            if (bert) ESPEC("attn_output.bias", "", E, 1, FILL_UNIFORM, 0.1f);
            ESPEC("attn_output_norm.weight", "", E, 1, FILL_NORM, 0.05f);
            ESPEC("attn_output_norm.bias", "", E, 1, FILL_UNIFORM, 0.05f);
            ESPEC("ffn_up.weight", "ffn_up", E, F, FILL_UNIFORM, se);
            if (bert) ESPEC("ffn_up.bias", "", F, 1, FILL_UNIFORM, 0.1f);
            else ESPEC("ffn_gate.weight", "ffn_gate", E, F, FILL_UNIFORM, se);
            ESPEC("ffn_down.weight", "ffn_down", F, E, FILL_UNIFORM, sf);
            if (bert) ESPEC("ffn_down.bias", "", E, 1, FILL_UNIFORM, 0.1f);
            ESPEC("layer_output_norm.weight", "", E, 1, FILL_NORM, 0.05f);
            ESPEC("layer_output_norm.bias", "", E, 1, FILL_UNIFORM, 0.05f);
#undef ESPEC
        }
    }
    if (peaked && !gemma)
        SPEC("output.weight", MTYPE("output", 0, E), E, n_vocab, FILL_UNIFORM, p->peak * sqrtf(3.0f / (float)E));
    /* gemma, peaked: the input row enters the residual as e * sqrt(E) (rms ~peak) and adds ~sqrt(E) * peak units to
     * its own logit through the tied output, the 2 * n_layer post-normed layer outputs (rms ~gain each) spread
     * the others over ~peak; gains of 2 * peak * sqrt(E / (2 * n_layer)) make the residual's rms ~2 * sqrt(E) * peak,
     * so the copy term is ~peak / 2 and the next token depends on the context */
    const float gemma_post = gemma && peaked ? 2.0f * p->peak * sqrtf((float)E / (2.0f * (float)pr->n_layer)) : 0.0f;
    if (!enc) SPEC("output_norm.weight", RP_TYPE_F32, E, 1, FILL_NORM, 0.05f);
    if (pr->llama3_rope) SPEC("rope_freqs.weight", RP_TYPE_F32, pr->head_dim / 2, 1, FILL_ROPE, 0);
    if (pr->longrope_orig) {
        SPEC("rope_factors_long.weight", RP_TYPE_F32, n_rot / 2, 1, FILL_LONGROPE_LONG, 0);
        SPEC("rope_factors_short.weight", RP_TYPE_F32, n_rot / 2, 1, FILL_LONGROPE_SHORT, 0);
    }
    const bool fused = pr->arch == RP_ARCH_PHI3 && !p->unfused;
    for (int l = 0; l < pr->n_layer && st == RP_OK && !enc; l++) {
        char nm[64];
        float se = 1.7f / sqrtf((float)E), sf = 1.7f / sqrtf((float)F), sq = 1.7f / sqrtf((float)QD);
#define LSPEC(suffix, role, c, r, kd, sc_)                                           \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                             \
        SPEC(nm, (kd) == FILL_NORM || !*(role) ? RP_TYPE_F32 : MTYPE(role, l, c), c, r, kd, sc_)
        LSPEC("attn_norm.weight", "", E, 1, FILL_NORM, 0.05f);
        if (fused) {
            LSPEC("attn_qkv.weight", "attn_qkv", E, QD + 2 * KD, FILL_UNIFORM, se);
            if (st == RP_OK) fuse_parts(&specs[n_specs - 1], p->seed, l, "attn_q", "attn_k", "attn_v", QD, KD, KD, qmul);
        } else {
            LSPEC("attn_q.weight", "attn_q", E, QD, FILL_UNIFORM, pr->arch == RP_ARCH_QWEN3 ? se : se * qmul);
            LSPEC("attn_k.weight", "attn_k", E, KD, FILL_UNIFORM, se);
            LSPEC("attn_v.weight", "attn_v", E, KD, FILL_UNIFORM, se);
        }
        if (pr->arch == RP_ARCH_QWEN2) {   /* biases: F32, spread like real Qwen2.5 k biases (a few units) */
            LSPEC("attn_q.bias", "", QD, 1, FILL_UNIFORM, 0.5f);
            LSPEC("attn_k.bias", "", KD, 1, FILL_UNIFORM, 2.0f);
            LSPEC("attn_v.bias", "", KD, 1, FILL_UNIFORM, 0.1f);
        }
        LSPEC("attn_output.weight", "attn_output", QD, E, FILL_UNIFORM, sq);
        if (pr->arch == RP_ARCH_QWEN3 || pr->arch == RP_ARCH_GEMMA3) {
            LSPEC("attn_q_norm.weight", "", pr->head_dim, 1, FILL_NORM, 0.05f);
            if (st == RP_OK) specs[n_specs - 1].mul = qmul;   /* q is normalized after the projection: scale its gains */
            LSPEC("attn_k_norm.weight", "", pr->head_dim, 1, FILL_NORM, 0.05f);
        }
        if (gemma) {   /* norms as stored in GGUF: llama.cpp's converter has added Gemma's 1 already */
            LSPEC("post_attention_norm.weight", "", E, 1, FILL_NORM, 0.05f);
            if (st == RP_OK) specs[n_specs - 1].mul = gemma_post;
            LSPEC("post_ffw_norm.weight", "", E, 1, FILL_NORM, 0.05f);
            if (st == RP_OK) specs[n_specs - 1].mul = gemma_post;
        }
        LSPEC("ffn_norm.weight", "", E, 1, FILL_NORM, 0.05f);
        if (fused) {
            LSPEC("ffn_up.weight", "ffn_up", E, 2 * F, FILL_UNIFORM, se);
            if (st == RP_OK) fuse_parts(&specs[n_specs - 1], p->seed, l, "ffn_gate", "ffn_up", NULL, F, F, 0, 1.0f);
        } else {
            LSPEC("ffn_gate.weight", "ffn_gate", E, F, FILL_UNIFORM, se);
            LSPEC("ffn_up.weight", "ffn_up", E, F, FILL_UNIFORM, se);
        }
        LSPEC("ffn_down.weight", "ffn_down", F, E, FILL_UNIFORM, sf);
#undef LSPEC
    }
#undef MTYPE
#undef SPEC
    for (size_t i = 0; st == RP_OK && i < n_specs; i++) {
        tensor_spec *t = &specs[i];
        uint32_t nd = t->ne[1] == 1 ? 1 : 2;
        st = rp_gguf_writer_add_tensor_fill(w, t->name, t->type, nd, t->ne, fill_cb, &sc);
    }
    if (st == RP_OK) {
        int T = p->n_threads > 0 ? p->n_threads : 1;
        st = rp_pool_create(T, &sc.pool);
        sc.rowbuf = calloc((size_t)T, sizeof(float *));
        if (st == RP_OK && !sc.rowbuf) st = rp_errorf(RP_ERR_NOMEM, "synth: out of memory");
        int64_t maxc = F > E ? F : E;
        if (QD > maxc) maxc = QD;
        for (int t = 0; st == RP_OK && t < T; t++)
            if (!(sc.rowbuf[t] = malloc(sizeof(float) * (size_t)maxc))) st = rp_errorf(RP_ERR_NOMEM, "synth: out of memory");
        sc.specs = specs;
        sc.n_specs = n_specs;
        sc.p = p;
        for (size_t i = 0; i < n_specs; i++) sc.total += rp_type_row_size(specs[i].type, specs[i].ne[0]) * (uint64_t)specs[i].ne[1];
    }
    if (st == RP_OK) st = rp_gguf_writer_write_file(w, out_path);
#undef K
#undef CHK

    if (sc.rowbuf)
        for (int t = 0; t < (p->n_threads > 0 ? p->n_threads : 1); t++) free(sc.rowbuf[t]);
    free(sc.rowbuf);
    rp_pool_free(sc.pool);
    free(specs);
    if (strs)
        for (int32_t i = 0; i < n_vocab; i++) free(strs[i]);
    free(strs);
    free(views);
    rp_gguf_close(vocab);
    rp_gguf_writer_free(w);
    return st;
}
