/* test_synth.c — synthetic models: determinism, every weight type vs. its dequantized F32 computation, both archs. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "model/synth.h"
#include "model/quant_mix.h"

static const rp_token k_prompt[] = {1, 300, 301, 350, 260, 77, 78, 79, 290, 291, 292, 5, 6, 7, 8, 9};
#define N_PROMPT ((int)(sizeof k_prompt / sizeof k_prompt[0]))

static void synth(rp_arch arch, const char *type, uint64_t seed, int threads, const char *path) {
    rp_synth_params p = rp_synth_default_params();
    p.arch = arch;
    p.preset = "tiny";
    p.type = type;
    p.seed = seed;
    p.n_threads = threads;
    rp_status st = rp_synth_write(&p, path);
    if (st != RP_OK) print_message("synth %s: %s\n", type, rp_last_error());
    assert_int_equal(st, RP_OK);
}

/* Logits after the prompt (F32 KV so only weights differ). Returns malloc'd [n_vocab]. */
static float *prompt_logits(const char *path, int *n_vocab) {
    rp_model *m = NULL;
    rp_status st = rp_model_load(path, rp_model_default_params(), &m);
    if (st != RP_OK) print_message("load %s: %s\n", path, rp_last_error());
    assert_int_equal(st, RP_OK);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = 64;
    rp_ctx *ctx = NULL;
    assert_int_equal(rp_ctx_create(m, cp, &ctx), RP_OK);
    rp_session_params sp = rp_session_default_params();
    sp.n_ctx = 64;
    sp.kv_type = RP_TYPE_F32;
    rp_session *s = NULL;
    assert_int_equal(rp_session_create(ctx, sp, &s), RP_OK);
    assert_int_equal(rp_session_feed(s, k_prompt, N_PROMPT), RP_OK);
    *n_vocab = m->hp.n_vocab;
    float *out = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    memcpy(out, rp_session_logits(s), sizeof(float) * (size_t)m->hp.n_vocab);
    rp_session_free(s);
    rp_ctx_free(ctx);
    rp_model_free(m);
    return out;
}

/* Writes an F32 copy of `src` (every tensor dequantized, metadata copied). */
static void dequantize_file(const char *src, const char *dst) {
    rp_gguf *g = NULL;
    assert_int_equal(rp_gguf_open(src, &g), RP_OK);
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        rp_str k = rp_gguf_kv_key(g, i);
        if (rp_str_eq(k, "general.alignment")) continue;
        assert_int_equal(rp_gguf_writer_copy_kv(w, g, i), RP_OK);
    }
    uint64_t nt = rp_gguf_n_tensors(g);
    float **bufs = calloc(nt, sizeof *bufs);
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        bufs[i] = malloc(sizeof(float) * (size_t)n);
        size_t rb = rp_type_row_size(t->type, t->ne[0]);
        int64_t rows = n / t->ne[0];
        for (int64_t r = 0; r < rows; r++)
            assert_true(rp_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, bufs[i] + r * t->ne[0], t->ne[0]));
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(rp_gguf_writer_add_tensor(w, name, RP_TYPE_F32, t->n_dims, t->ne, bufs[i], sizeof(float) * (size_t)n),
                         RP_OK);
    }
    assert_int_equal(rp_gguf_writer_write_file(w, dst), RP_OK);
    for (uint64_t i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
}

static float max_abs(const float *a, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i]));
    return m;
}

static float max_diff(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static int argmax(const float *a, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (a[i] > a[b]) b = i;
    return b;
}

/* For each architecture and weight type:
 *  (1) the quantized model's logits equal those of an F32 model holding its
 *      dequantized weights: to 1e-4 of the logit scale for bf16 (exact up to
 *      rounding order), 2e-3 for f16 (its activations rounded to F16, as
 *      ggml's vec_dot_type: 3.6e-4 seen), to 3% for integer types (int8
 *      activations);
 *  (2) quantization error vs. the unquantized weights stays within a
 *      per-type bound of the logit scale (f16/bf16 tight, 8-bit, 6-bit, 4-bit looser). */
static void check_arch(rp_arch arch) {
    static const struct { const char *type; float tol_vs_f32; } types[] = {
        {"f16", 0.01f}, {"bf16", 0.05f}, {"q8_0", 0.05f}, {"q6_k", 0.1f},
        {"q4_0", 0.35f}, {"q4_k", 0.3f}, {"q4_k_m", 0.3f},
        /* the other weight types, pure, and llama.cpp's standard mixes */
        {"q4_1", 0.35f}, {"q5_0", 0.2f}, {"q5_1", 0.2f}, {"q3_k", 0.6f}, {"q5_k", 0.2f},
        {"q2_k", 0.5f}, {"q3_k_s", 0.6f}, {"q3_k_m", 0.5f}, {"q3_k_l", 0.5f}, {"q4_k_s", 0.3f},
        {"q5_k_s", 0.2f}, {"q5_k_m", 0.2f}, {"iq4_nl", 0.35f}, {"iq4_xs", 0.35f},
    };
    char ref_path[512], qpath[512], dqpath[512];
    snprintf(ref_path, sizeof ref_path, "%s/%s-f32.gguf", rp_test_tmpdir(), rp_arch_name(arch));
    synth(arch, "f32", 7, 2, ref_path);
    int nv = 0;
    float *ref = prompt_logits(ref_path, &nv);
    float scale = max_abs(ref, nv);
    assert_true(scale > 0 && isfinite(scale));
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(qpath, sizeof qpath, "%s/%s-%s.gguf", rp_test_tmpdir(), rp_arch_name(arch), types[i].type);
        snprintf(dqpath, sizeof dqpath, "%s/%s-%s-dq.gguf", rp_test_tmpdir(), rp_arch_name(arch), types[i].type);
        synth(arch, types[i].type, 7, 2, qpath);
        dequantize_file(qpath, dqpath);
        int nv2 = 0, nv3 = 0;
        float *q = prompt_logits(qpath, &nv2);
        float *dq = prompt_logits(dqpath, &nv3);
        assert_int_equal(nv, nv2);
        assert_int_equal(nv, nv3);
        float e_exact = max_diff(q, dq, nv) / scale, e_quant = max_diff(q, ref, nv) / scale;
        print_message("  %s %-6s: |q - dequant(q)| %.2e, |q - f32| %.3f of logit scale %.2f, argmax %d vs %d\n",
                      rp_arch_name(arch), types[i].type, e_exact, e_quant, scale, argmax(q, nv), argmax(ref, nv));
        /* bf16 is computed exactly; f16 rounds activations to F16 and integer kernels quantize them to int8
         * blocks (both as ggml does), which moves logits by ~0.04% / ~1% of their scale */
        bool is_q = types[i].type[0] == 'q' || types[i].type[0] == 'i';
        assert_true(e_exact < (is_q ? 0.03f : !strcmp(types[i].type, "f16") ? 2e-3f : 1e-4f));
        assert_true(e_quant < types[i].tol_vs_f32);
        free(q);
        free(dq);
        remove(qpath);
        remove(dqpath);
    }
    free(ref);
    remove(ref_path);
}

static void test_types_llama(void **state) { (void)state; check_arch(RP_ARCH_LLAMA); }
static void test_types_qwen3(void **state) { (void)state; check_arch(RP_ARCH_QWEN3); }

/* Same parameters -> byte-identical files, whatever the thread count. */
static void test_deterministic(void **state) {
    (void)state;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/det-a.gguf", rp_test_tmpdir());
    snprintf(b, sizeof b, "%s/det-b.gguf", rp_test_tmpdir());
    synth(RP_ARCH_QWEN3, "q4_k", 42, 1, a);
    synth(RP_ARCH_QWEN3, "q4_k", 42, 2, b);
    size_t la, lb;
    char *da = rp_test_read_file(a, &la), *db = rp_test_read_file(b, &lb);
    assert_non_null(da);
    assert_non_null(db);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    free(db);
    synth(RP_ARCH_QWEN3, "q4_k", 43, 2, b);
    db = rp_test_read_file(b, &lb);
    assert_int_equal(la, lb);
    assert_true(memcmp(da, db, la) != 0);
    free(da);
    free(db);
    remove(a);
    remove(b);
}

/* Progress of synth and of a model load: done only grows and ends at total;
 * a callback returning false cancels, with nothing left behind (no file, no
 * temp file; no model). */
typedef struct { uint64_t last_done, total; int calls; int stop_after; } progress_log;

static bool log_progress(void *user, uint64_t done, uint64_t total) {
    progress_log *l = user;
    assert_true(done >= l->last_done && done <= total);
    assert_true(l->calls == 0 || total == l->total);
    l->last_done = done;
    l->total = total;
    return ++l->calls != l->stop_after;
}

static int files_starting(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void test_progress_and_cancel(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/prog.gguf", rp_test_tmpdir());
    rp_synth_params p = rp_synth_default_params();
    p.preset = "small";
    progress_log l = {0};
    p.progress = log_progress;
    p.progress_user = &l;
    assert_int_equal(rp_synth_write(&p, path), RP_OK);
    assert_true(l.calls > 10 && l.last_done == l.total && l.total > 0);
    /* loading it: the same rules */
    rp_model_params mp = rp_model_default_params();
    progress_log ml = {0};
    mp.progress = log_progress;
    mp.progress_user = &ml;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, mp, &m), RP_OK);
    assert_true(ml.calls > 2 && ml.last_done == ml.total);
    rp_model_free(m);
    ml = (progress_log){.stop_after = 2};
    assert_int_equal(rp_model_load(path, mp, &m), RP_ERR_CANCELLED);
    assert_null(m);
    remove(path);
    /* a cancelled synth leaves neither the file nor its temp file */
    l = (progress_log){.stop_after = 3};
    assert_int_equal(rp_synth_write(&p, path), RP_ERR_CANCELLED);
    assert_int_equal(files_starting(rp_test_tmpdir(), "prog.gguf"), 0);
}

/* Metadata of a preset matches the real architecture; the preset name is checked against --arch. */
static void test_presets(void **state) {
    (void)state;
    rp_synth_params p = rp_synth_default_params();
    p.arch = RP_ARCH_LLAMA;
    p.preset = "qwen3-0.6b";
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gguf", rp_test_tmpdir());
    assert_int_equal(rp_synth_write(&p, path), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "qwen3"));
    p.preset = "nope";
    assert_int_equal(rp_synth_write(&p, path), RP_ERR_INVALID_ARG);
    p.preset = "tiny";
    p.type = "iq2_xxs";   /* a ggml type without kernels */
    assert_int_equal(rp_synth_write(&p, path), RP_ERR_INVALID_ARG);
    p.type = "q4_k_x";
    assert_int_equal(rp_synth_write(&p, path), RP_ERR_INVALID_ARG);
}

/* llama.cpp's per-tensor types for its mixes (src/llama-quant.cpp, no
 * imatrix), for a 32-layer model with GQA 4 (Llama 3 8B's shape) and GQA 2. */
static void test_quant_mixes(void **state) {
    (void)state;
    static const struct {
        const char *ftype; const char *role; int layer, n_gqa; rp_type want;
    } c[] = {
        {"q2_k", "attn_v", 5, 4, RP_TYPE_Q4_K},       {"q2_k", "attn_v", 5, 2, RP_TYPE_Q3_K},
        {"q2_k", "ffn_down", 5, 4, RP_TYPE_Q3_K},     {"q2_k", "attn_output", 5, 4, RP_TYPE_Q3_K},
        {"q2_k", "ffn_up", 5, 4, RP_TYPE_Q2_K},       {"q2_k", "output", 0, 4, RP_TYPE_Q6_K},
        {"q3_k_s", "attn_v", 0, 4, RP_TYPE_Q3_K},     {"q3_k_s", "ffn_down", 0, 4, RP_TYPE_Q3_K},
        {"q3_k_m", "attn_v", 1, 4, RP_TYPE_Q5_K},     {"q3_k_m", "attn_v", 2, 4, RP_TYPE_Q4_K},
        {"q3_k_m", "ffn_down", 1, 4, RP_TYPE_Q5_K},   {"q3_k_m", "ffn_down", 2, 4, RP_TYPE_Q4_K},
        {"q3_k_m", "attn_output", 9, 4, RP_TYPE_Q4_K}, {"q3_k_m", "attn_q", 9, 4, RP_TYPE_Q3_K},
        {"q3_k_l", "attn_v", 9, 4, RP_TYPE_Q5_K},     {"q3_k_l", "ffn_down", 9, 4, RP_TYPE_Q5_K},
        {"q3_k_l", "attn_output", 9, 4, RP_TYPE_Q5_K}, {"q3_k_l", "ffn_gate", 9, 4, RP_TYPE_Q3_K},
        {"q4_k_s", "attn_v", 3, 4, RP_TYPE_Q5_K},     {"q4_k_s", "attn_v", 4, 4, RP_TYPE_Q4_K},
        {"q4_k_s", "ffn_down", 3, 4, RP_TYPE_Q5_K},   {"q4_k_s", "ffn_down", 4, 4, RP_TYPE_Q4_K},
        {"q4_k_m", "attn_v", 0, 4, RP_TYPE_Q6_K},     {"q4_k_m", "attn_v", 4, 4, RP_TYPE_Q4_K},
        {"q4_k_m", "attn_v", 6, 4, RP_TYPE_Q6_K},     {"q4_k_m", "ffn_down", 28, 4, RP_TYPE_Q6_K},
        {"q4_k_m", "token_embd", 0, 4, RP_TYPE_Q6_K}, {"q5_k_s", "attn_v", 0, 4, RP_TYPE_Q5_K},
        {"q5_k_m", "ffn_down", 31, 4, RP_TYPE_Q6_K},  {"q5_k_m", "ffn_down", 5, 4, RP_TYPE_Q5_K},
        {"q6_k", "attn_v", 0, 4, RP_TYPE_Q6_K},       {"q8_0", "output", 0, 4, RP_TYPE_Q8_0},
        {"iq4_xs", "attn_v", 9, 4, RP_TYPE_Q5_K},     {"iq4_xs", "attn_v", 9, 2, RP_TYPE_IQ4_XS},
        {"iq4_xs", "ffn_down", 3, 4, RP_TYPE_Q5_K},   {"iq4_xs", "ffn_down", 4, 4, RP_TYPE_IQ4_XS},
        {"iq4_nl", "output", 0, 4, RP_TYPE_Q6_K},     {"iq4_nl", "ffn_up", 9, 4, RP_TYPE_IQ4_NL},
        {"q4_0", "output", 0, 4, RP_TYPE_Q4_0},       {"q4_k", "attn_v", 0, 4, RP_TYPE_Q4_K}, /* pure */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const rp_ftype *f = rp_ftype_find(c[i].ftype);
        assert_non_null(f);
        const rp_type got = rp_ftype_tensor_type(f, c[i].role, c[i].layer, 32, c[i].n_gqa, true, 4096);
        if (got != c[i].want)
            fail_msg("%s %s layer %d gqa %d: %s, want %s", c[i].ftype, c[i].role, c[i].layer, c[i].n_gqa,
                     rp_type_get_traits((int)got)->name, rp_type_get_traits((int)c[i].want)->name);
    }
    /* rows no block of the type divides fall back as llama.cpp does */
    const rp_ftype *q4km = rp_ftype_find("Q4_K_M");
    assert_non_null(q4km);
    assert_int_equal(rp_ftype_tensor_type(q4km, "ffn_up", 5, 32, 4, true, 96), RP_TYPE_Q5_0);
    assert_int_equal(rp_ftype_tensor_type(q4km, "ffn_up", 5, 32, 4, true, 40), RP_TYPE_F16);
    assert_int_equal(rp_ftype_tensor_type(rp_ftype_find("iq4_xs"), "ffn_up", 5, 32, 4, true, 96), RP_TYPE_IQ4_NL);
    assert_int_equal(rp_ftype_tensor_type(q4km, "output", 0, 32, 4, true, 96), RP_TYPE_Q8_0);
    assert_null(rp_ftype_find("q4_k_x"));
    assert_null(rp_ftype_find("iq2_xxs"));
}

/* A synthetic model with a real tokenizer: the Qwen3 vocab is carried over and used. */
static void test_vocab_carryover(void **state) {
    (void)state;
    const char *vp = rp_test_shared("models/vocab/qwen3-bpe.vocab.gguf");
    RP_REQUIRE_SHARED(vp, "models/vocab/qwen3-bpe.vocab.gguf");
    char path[512];
    snprintf(path, sizeof path, "%s/qwen-vocab.gguf", rp_test_tmpdir());
    rp_synth_params p = rp_synth_default_params();
    p.arch = RP_ARCH_QWEN3;
    p.type = "q8_0";
    p.vocab_path = vp;
    assert_int_equal(rp_synth_write(&p, path), RP_OK);
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    assert_int_equal(m->hp.n_vocab, 151936);
    assert_int_equal(m->chat, RP_CHAT_CHATML);
    rp_token ids[32];
    size_t n = 0;
    rp_tokenize_opts o = {.add_bos = false, .parse_special = true};
    assert_int_equal(rp_tokenizer_encode(m->tok, "<|im_start|>user\nhi<|im_end|>", 29, o, ids, 32, &n), RP_OK);
    assert_int_equal(ids[0], 151644);
    rp_model_free(m);
    remove(path);
}


/* A model missing a tensor, or with a tensor of the wrong shape, is a clear
 * error naming the tensor. Built by copying a synthetic model minus/altered one tensor. */
static void write_variant(const char *src, const char *dst, const char *drop, const char *reshape) {
    rp_gguf *g = NULL;
    assert_int_equal(rp_gguf_open(src, &g), RP_OK);
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        if (rp_str_eq(rp_gguf_kv_key(g, i), "general.alignment")) continue;
        assert_int_equal(rp_gguf_writer_copy_kv(w, g, i), RP_OK);
    }
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (drop && !strcmp(name, drop)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t nd = t->n_dims;
        if (reshape && !strcmp(name, reshape)) { ne[0] = t->ne[1]; ne[1] = t->ne[0]; }   /* transposed shape, same bytes for f32 */
        assert_int_equal(rp_gguf_writer_add_tensor(w, name, t->type, nd, ne, t->data, t->nbytes), RP_OK);
    }
    assert_int_equal(rp_gguf_writer_write_file(w, dst), RP_OK);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
}

/* synth --peak: the default files are tied with near one-hot logits that copy the input token; a peaked file has an
 * untied output.weight (gemma: still tied, as llama.cpp requires, with scaled post-norm gains instead),
 * reprise.synth.peak, and logits of std ~peak (within a factor 1.5 here) with no huge top-1 that is not the
 * input token copied. */
static void logit_stats(const float *x, int n, double *sd, double *margin) {
    double m = 0, m2 = 0, a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        m += x[i];
        m2 += (double)x[i] * x[i];
        if (x[i] > a) { b = a; a = x[i]; } else if (x[i] > b) b = x[i];
    }
    m /= n;
    *sd = sqrt(m2 / n - m * m);
    *margin = a - b;
}

static void test_peaked(void **state) {
    (void)state;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/peak-a.gguf", rp_test_tmpdir());
    snprintf(b, sizeof b, "%s/peak-b.gguf", rp_test_tmpdir());
    const rp_arch archs[] = {RP_ARCH_LLAMA, RP_ARCH_QWEN3, RP_ARCH_QWEN2, RP_ARCH_PHI3, RP_ARCH_GEMMA2, RP_ARCH_GEMMA3};
    for (int k = 0; k < (int)(sizeof archs / sizeof archs[0]); k++) {
        const bool gemma = archs[k] == RP_ARCH_GEMMA2 || archs[k] == RP_ARCH_GEMMA3;
        synth(archs[k], "f32", 1, 2, a);
        rp_synth_params p = rp_synth_default_params();
        p.arch = archs[k];
        p.type = "f32";
        p.peak = 3;
        assert_int_equal(rp_synth_write(&p, b), RP_OK);
        rp_gguf *g = NULL;
        assert_int_equal(rp_gguf_open(b, &g), RP_OK);
        if (gemma) assert_null(rp_gguf_find_tensor(g, "output.weight"));
        else assert_non_null(rp_gguf_find_tensor(g, "output.weight"));
        assert_true(rp_gguf_find_key(g, "reprise.synth.peak") >= 0);
        rp_gguf_close(g);
        assert_int_equal(rp_gguf_open(a, &g), RP_OK);
        assert_null(rp_gguf_find_tensor(g, "output.weight"));
        assert_true(rp_gguf_find_key(g, "reprise.synth.peak") < 0);
        rp_gguf_close(g);
        int nv = 0;
        float *la = prompt_logits(a, &nv), *lb = prompt_logits(b, &nv);
        double sda, ma, sdb, mb;
        logit_stats(la, nv, &sda, &ma);
        logit_stats(lb, nv, &sdb, &mb);
        print_message("%s: default std %.2f top-2 margin %.2f; peak 3: std %.2f margin %.2f\n", rp_arch_name(archs[k]), sda,
                      ma, sdb, mb);
        int top = 0;
        for (int i = 1; i < nv; i++)
            if (lb[i] > lb[top]) top = i;
        print_message("%s: peak 3: top-1 %d, input token %d\n", rp_arch_name(archs[k]), top, k_prompt[N_PROMPT - 1]);
        assert_true(sdb > 2.0 && sdb < 4.5);
        assert_true(mb < 3 * sdb);
        assert_int_not_equal(top, k_prompt[N_PROMPT - 1]);
        free(la);
        free(lb);
    }
    remove(a);
    remove(b);
}

static void test_missing_and_misshapen_tensors(void **state) {
    (void)state;
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/full.gguf", rp_test_tmpdir());
    snprintf(dst, sizeof dst, "%s/variant.gguf", rp_test_tmpdir());
    synth(RP_ARCH_QWEN3, "f32", 1, 1, src);
    rp_model *m = NULL;
    write_variant(src, dst, "blk.2.ffn_up.weight", NULL);
    assert_int_equal(rp_model_load(dst, rp_model_default_params(), &m), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "'blk.2.ffn_up.weight' missing"));
    write_variant(src, dst, "blk.1.attn_k_norm.weight", NULL);
    assert_int_equal(rp_model_load(dst, rp_model_default_params(), &m), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "attn_k_norm"));
    write_variant(src, dst, NULL, "blk.0.attn_k.weight");
    assert_int_equal(rp_model_load(dst, rp_model_default_params(), &m), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "'blk.0.attn_k.weight' has shape"));
    write_variant(src, dst, "output_norm.weight", NULL);
    assert_int_equal(rp_model_load(dst, rp_model_default_params(), &m), RP_ERR_FORMAT);
    assert_null(m);
    remove(src);
    remove(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_llama),
        cmocka_unit_test(test_types_qwen3),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_progress_and_cancel),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_vocab_carryover),
        cmocka_unit_test(test_quant_mixes),
        cmocka_unit_test(test_missing_and_misshapen_tensors),
        cmocka_unit_test(test_peaked),
    };
    return rp_test_main(tests, NULL, NULL);
}
