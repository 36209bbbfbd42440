/* test_api_analysis.c — the public API's analysis, calibration and model-file calls (reprise.h's section
 * "analysis, calibration, model files"): plans against a prefill's figures, calibrations stored and found,
 * synthetic models against the shapes asked for, GGUF listings against the file's own header, the CPU and kernel
 * description; and the engine options they brought (a read-only store, a context past the training one, the
 * recompute marks). Apart from test_api.c, which is long already. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "reprise.h"

static rp_model *load(const char *path) {
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &m), RP_OK);
    return m;
}

#define OPEN_MODEL(m) RP_OPEN_STORIES(m)

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%.200s/%s", rp_test_tmpdir(), name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", buf);
    assert_int_equal(system(cmd), 0);
}

/* A system segment, three documents, a question: in order (A) and reordered (B). */
static const char *k_sys = "You are a story teller. Read the stories and answer the question at the end.";
static const char *k_docs[3] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her big red ball.",
    "One day, a small dog named Max found a shiny stick near the pond. He ran home to show his friend the stick.",
    "Tom and Sue went to the beach. They built a big sand castle and saw a crab. The crab was happy and sunny."};

static rp_prompt *prompt_of(const rp_model *m, const int order[3], const char *question) {
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    assert_int_equal(rp_prompt_add_text(p, m, k_sys, strlen(k_sys)), RP_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(rp_prompt_add_text(p, m, k_docs[order[i]], strlen(k_docs[order[i]])), RP_OK);
    assert_int_equal(rp_prompt_add_text(p, m, question, strlen(question)), RP_OK);
    return p;
}

/* The plan's parts agree with each other: chunks and segments tile the prompt, token kinds add up to the counts,
 * each schedule covers every non-prefix token once with its padding up to the shapes. */
static void check_consistent(const rp_plan_desc *d) {
    int32_t at = 0;
    for (int32_t i = 0; i < d->n_chunks; i++) {
        assert_int_equal(d->chunks[i].begin, at);
        assert_true(d->chunks[i].len > 0);
        at += d->chunks[i].len;
    }
    assert_int_equal(at, d->n_tokens);
    at = 0;
    for (int32_t i = 0; i < d->n_segments; i++) {
        assert_int_equal(d->segments[i].begin, at);
        for (int32_t t = at; t < at + d->segments[i].len; t++) assert_int_equal(d->token_kind[t], d->segments[i].kind);
        at += d->segments[i].len;
    }
    assert_int_equal(at, d->n_tokens);
    int32_t k[3] = {0, 0, 0};
    for (int32_t t = 0; t < d->n_tokens; t++) k[d->token_kind[t]]++;
    assert_int_equal(k[RP_PLAN_PREFIX], d->reused_prefix);
    assert_int_equal(k[RP_PLAN_REUSE], d->reused_nonprefix);
    assert_int_equal(k[RP_PLAN_NEW], d->computed);
    const rp_plan_call *sched[2] = {d->dp_calls, d->naive_calls};
    const int32_t n_sched[2] = {d->n_dp_calls, d->n_naive_calls};
    for (int s = 0; s < 2; s++) {
        at = d->reused_prefix;
        for (int32_t i = 0; i < n_sched[s]; i++) {
            const rp_plan_call *c = &sched[s][i];
            assert_int_equal(c->begin, at);
            assert_int_equal(c->n_new + c->n_reuse, c->end - c->begin);
            assert_int_equal(c->padding, (c->recompute ? d->shapes.L_S : d->shapes.L_P) - (c->end - c->begin));
            assert_true(c->padding >= 0);
            at = c->end;
        }
        assert_int_equal(at, d->n_tokens);
    }
    assert_true(d->dp_cost > 0 && d->dp_cost <= d->naive_cost + 1e-9);
}

static void test_plan(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    const int in_order[3] = {0, 1, 2}, reordered[3] = {2, 0, 1};
    rp_prompt *a = prompt_of(m, in_order, " Who is Lily?"), *b = prompt_of(m, reordered, " Who found the stick?");
    /* nothing cached: every chunk new */
    rp_plan *pl = NULL;
    assert_int_equal(rp_engine_plan(e, a, NULL, &pl), RP_OK);
    rp_plan_desc d = rp_plan_describe(pl);
    assert_int_equal(d.n_tokens, rp_prompt_n_tokens(a));
    assert_int_equal(d.computed, d.n_tokens);
    assert_int_equal(d.reused_prefix + d.reused_nonprefix, 0);
    assert_int_equal(d.n_chunks, 5);   /* a chunk per segment: the segments are short */
    for (int32_t i = 0; i < d.n_chunks; i++) assert_int_equal(d.chunks[i].label, RP_CHUNK_NEW);
    assert_int_equal(d.n_segments, 1);
    assert_false(d.shapes.calibrated);
    rp_static_shapes sh;
    rp_engine_static_shapes(e, &sh);
    assert_int_equal(d.shapes.L_P, sh.L_P);
    assert_int_equal(d.shapes.L_S, sh.L_S);
    check_consistent(&d);
    rp_plan_free(pl);
    /* A prefilled, not yet cached: a plan caches it first (the analysis would forget it otherwise), so a plan of
     * A again finds all of it but the last token in the prefix */
    rp_gen_opts o = rp_gen_default_opts();
    rp_gen_stats st;
    assert_int_equal(rp_seq_prefill(s, a, &o, &st), RP_OK);
    assert_int_equal(rp_engine_plan(e, a, NULL, &pl), RP_OK);
    d = rp_plan_describe(pl);
    assert_int_equal(d.reused_prefix, d.n_tokens - 1);
    assert_int_equal(d.reused_prefix_exact, d.reused_prefix);
    assert_int_equal(d.chunks[0].label, RP_CHUNK_PREFIX_EXACT);
    check_consistent(&d);
    rp_plan_free(pl);
    /* B reorders the documents: the plan's counts are what the prefill then does */
    assert_int_equal(rp_engine_plan(e, b, NULL, &pl), RP_OK);
    d = rp_plan_describe(pl);
    check_consistent(&d);
    assert_int_equal(d.chunks[0].label, RP_CHUNK_PREFIX_EXACT);
    for (int32_t i = 1; i < 4; i++) assert_int_equal(d.chunks[i].label, RP_CHUNK_REUSED);
    assert_int_equal(d.chunks[4].label, RP_CHUNK_NEW);
    assert_string_equal(rp_chunk_label_name(d.chunks[1].label), "reused (re-rotated)");
    uint8_t *marks = malloc((size_t)d.n_tokens);
    assert_non_null(marks);
    memset(marks, 7, (size_t)d.n_tokens);
    o.recompute_marks = marks;
    o.persist = false;
    assert_int_equal(rp_seq_prefill(s, b, &o, &st), RP_OK);
    assert_int_equal(st.prompt_tokens, d.n_tokens);
    assert_int_equal(st.reused_prefix, d.reused_prefix);
    assert_int_equal(st.reused_prefix_exact, d.reused_prefix_exact);
    assert_int_equal(st.reused_nonprefix, d.reused_nonprefix);
    assert_int_equal(st.computed, d.computed);
    assert_int_equal(st.chunks, d.n_chunks);
    assert_true(d.reused_nonprefix > 0 && d.recompute_dynamic > 0);
    assert_int_equal(st.recomputed, d.recompute_dynamic);
    /* the marks: exactly the recomputed tokens, all of them reused non-prefix ones */
    int32_t n_marked = 0;
    for (int32_t t = 0; t < d.n_tokens; t++) {
        assert_true(marks[t] <= 1);
        if (marks[t]) assert_int_equal(d.token_kind[t], RP_PLAN_REUSE);
        n_marked += marks[t];
    }
    assert_int_equal(n_marked, st.recomputed);
    rp_plan_free(pl);
    /* per-call options: no reuse plans every token new; prefix reuse stops at the first reordered document */
    rp_gen_opts none = rp_gen_default_opts();
    none.reuse = RP_REUSE_NONE;
    assert_int_equal(rp_engine_plan(e, b, &none, &pl), RP_OK);
    d = rp_plan_describe(pl);
    assert_int_equal(d.computed, d.n_tokens);
    rp_plan_free(pl);
    none.reuse = RP_REUSE_PREFIX;
    assert_int_equal(rp_engine_plan(e, b, &none, &pl), RP_OK);
    d = rp_plan_describe(pl);
    assert_int_equal(d.reused_nonprefix, 0);
    assert_true(d.reused_prefix > 0 && d.computed == d.n_tokens - d.reused_prefix);
    rp_plan_free(pl);
    /* bad input */
    rp_prompt *empty = NULL;
    assert_int_equal(rp_prompt_create(&empty), RP_OK);
    assert_int_equal(rp_engine_plan(e, empty, NULL, &pl), RP_ERR_INVALID_ARG);
    assert_null(pl);
    rp_token many[600];
    for (int i = 0; i < 600; i++) many[i] = 100 + i % 50;
    assert_int_equal(rp_prompt_add_tokens(empty, many, 600, true), RP_OK);   /* past the 512-token context */
    assert_int_equal(rp_engine_plan(e, empty, NULL, &pl), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "600 tokens"));
    assert_string_equal(rp_chunk_label_name((rp_chunk_label)99), "?");
    assert_null(rp_plan_describe(NULL).chunks);
    rp_plan_free(NULL);
    free(marks);
    rp_prompt_free(empty);
    rp_prompt_free(a);
    rp_prompt_free(b);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

/* A store written by one engine, read by a read-only one: it finds the chunks, writes nothing, takes no lock (a
 * writer holds the store meanwhile); a directory without a store is refused, or skipped when optional. A context
 * past the model's training one only when asked. */
static void test_read_only_store_and_long_context(void **state) {
    (void)state;
    OPEN_MODEL(m);
    char dir[256];
    tmp_path(dir, sizeof dir, "ro-store");
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.cache_dir = dir;
    rp_engine *w = NULL, *r = NULL;
    rp_seq *s = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &w), RP_OK);
    const int order[3] = {0, 1, 2};
    rp_prompt *a = prompt_of(m, order, " Who is Lily?");
    assert_int_equal(rp_seq_create(w, &s), RP_OK);
    rp_gen_opts o = rp_gen_default_opts();
    rp_gen_stats st;
    assert_int_equal(rp_seq_prefill(s, a, &o, &st), RP_OK);
    assert_int_equal(rp_seq_commit(s), RP_OK);
    assert_int_equal(rp_engine_flush(w), RP_OK);
    rp_seq_free(s);
    rp_cache *c = NULL;
    rp_cache_info before, after;
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    assert_int_equal(rp_cache_info_get(c, &before), RP_OK);
    rp_cache_close(c);
    assert_true(before.chunks > 0);
    /* the writer still holds the store: a second writer is refused, a reader is not */
    assert_int_not_equal(rp_engine_create(m, &ep, &r), RP_OK);
    ep.cache_read_only = true;
    assert_int_equal(rp_engine_create(m, &ep, &r), RP_OK);
    rp_engine_stats es;
    rp_engine_stats_get(r, &es);
    assert_true(es.has_store);
    assert_int_equal(rp_seq_create(r, &s), RP_OK);
    assert_int_equal(rp_seq_prefill(s, a, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix, rp_prompt_n_tokens(a) - 1);   /* from flash */
    const int reordered[3] = {1, 2, 0};
    rp_prompt *b = prompt_of(m, reordered, " Who found the stick?");
    char out[128];
    size_t len;
    o.max_tokens = 4;
    assert_int_equal(rp_seq_prefill(s, b, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);   /* b's chunks: RAM only */
    assert_int_equal(rp_engine_flush(r), RP_OK);
    rp_seq_free(s);
    rp_engine_free(r);
    rp_engine_free(w);
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    assert_int_equal(rp_cache_info_get(c, &after), RP_OK);
    rp_cache_close(c);
    assert_int_equal(after.chunks, before.chunks);
    /* no store there: refused, or skipped with a notice when optional */
    char none[256];
    tmp_path(none, sizeof none, "ro-none");
    assert_int_equal(mkdir(none, 0700), 0);
    ep.cache_dir = none;
    assert_int_not_equal(rp_engine_create(m, &ep, &r), RP_OK);
    assert_null(r);
    ep.cache_dir_optional = true;
    assert_int_equal(rp_engine_create(m, &ep, &r), RP_OK);
    rp_engine_stats_get(r, &es);
    assert_false(es.has_store);
    assert_non_null(strstr(rp_engine_notice(r), "no store"));
    rp_engine_free(r);
    struct stat sb;
    char db[400];
    snprintf(db, sizeof db, "%s/kv.db", none);
    assert_int_not_equal(stat(db, &sb), 0);   /* a reader creates nothing */
    /* n_ctx past the training context (512) */
    rp_engine_params lp = rp_engine_default_params();
    lp.n_threads = 1;
    lp.n_ctx = 1024;
    assert_int_equal(rp_engine_create(m, &lp, &r), RP_OK);
    assert_int_equal(rp_engine_n_ctx(r), 512);
    rp_engine_free(r);
    lp.n_ctx_over_train = true;
    assert_int_equal(rp_engine_create(m, &lp, &r), RP_OK);
    assert_int_equal(rp_engine_n_ctx(r), 1024);
    rp_token many[600];
    for (int i = 0; i < 600; i++) many[i] = 100 + i % 50;
    rp_prompt *longp = NULL;
    assert_int_equal(rp_prompt_create(&longp), RP_OK);
    assert_int_equal(rp_prompt_add_tokens(longp, many, 600, true), RP_OK);
    assert_int_equal(rp_seq_create(r, &s), RP_OK);
    rp_gen_opts plain = rp_gen_default_opts();
    plain.reuse = RP_REUSE_NONE;
    assert_int_equal(rp_seq_prefill(s, longp, &plain, &st), RP_OK);
    assert_int_equal(st.computed, 600);
    rp_seq_free(s);
    rp_engine_free(r);
    rp_prompt_free(longp);
    rp_prompt_free(a);
    rp_prompt_free(b);
    rp_model_free(m);
}

static void test_calibration(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const rp_calibrate_params def = rp_calibrate_default_params();
    assert_int_equal(def.n_sizes, 10);
    assert_int_equal(def.sizes[0], 32);
    assert_int_equal(def.sizes[9], 1024);
    assert_int_equal(def.reps, 3);
    static const int32_t sizes[] = {32, 64, 96};
    rp_calibrate_params cp = {.sizes = sizes, .n_sizes = 3, .reps = 1};
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.recompute_ratio = 0.5f;
    rp_calibration cal;
    assert_int_equal(rp_calibrate(m, &ep, &cp, &cal), RP_OK);
    assert_int_equal(cal.n_points, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cal.sizes[i], sizes[i]);
        assert_true(cal.prefill_ms[i] > 0 && cal.recompute_ms[i] > 0);
    }
    assert_true(cal.shapes.calibrated);
    assert_true(cal.shapes.L_P >= 32 && cal.shapes.L_P <= 96 && cal.shapes.L_S >= 32 && cal.shapes.L_S <= 96);
    assert_true(cal.shapes.lat_P_ms > 0 && cal.shapes.lat_S_ms > 0);
    assert_true(cal.recompute_ratio == 0.5f);
    assert_int_equal(cal.n_threads, 1);
    /* stored under the cache directory (made), found for this model and thread count only */
    char dir[256], path[1024];
    tmp_path(dir, sizeof dir, "calib/nested");
    rp_static_shapes found;
    assert_false(rp_calibration_lookup(m, dir, 1, &found));
    assert_int_equal(rp_calibration_save(m, &cal, dir, path, sizeof path), RP_OK);
    assert_int_equal(strncmp(path, dir, strlen(dir)), 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0);   /* private */
    assert_true(rp_calibration_lookup(m, dir, 1, &found));
    assert_int_equal(found.L_P, cal.shapes.L_P);
    assert_int_equal(found.L_S, cal.shapes.L_S);
    assert_true(found.lat_P_ms == cal.shapes.lat_P_ms && found.lat_S_ms == cal.shapes.lat_S_ms && found.calibrated);
    assert_false(rp_calibration_lookup(m, dir, 2, &found));
    /* a static engine with that cache directory (and thread count) takes the shapes */
    ep.static_mode = true;
    ep.cache_dir = dir;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_true(rp_engine_calibrated(e));
    rp_static_shapes sh;
    rp_engine_static_shapes(e, &sh);
    assert_int_equal(sh.L_P, cal.shapes.L_P);
    assert_int_equal(sh.L_S, cal.shapes.L_S);
    rp_engine_free(e);
    /* bad input */
    static const int32_t odd[] = {48}, down[] = {64, 32};
    cp = (rp_calibrate_params){.sizes = odd, .n_sizes = 1, .reps = 1};
    assert_int_equal(rp_calibrate(m, &ep, &cp, &cal), RP_ERR_INVALID_ARG);
    cp = (rp_calibrate_params){.sizes = down, .n_sizes = 2, .reps = 1};
    assert_int_equal(rp_calibrate(m, &ep, &cp, &cal), RP_ERR_INVALID_ARG);
    cp.reps = 0;
    assert_int_equal(rp_calibrate(m, &ep, &cp, &cal), RP_ERR_INVALID_ARG);
    rp_model_free(m);
    rp_model_params vp = rp_model_default_params();
    vp.vocab_only = true;
    assert_int_equal(rp_model_load(m_path, vp, &m), RP_OK);
    assert_int_equal(rp_calibrate(m, NULL, NULL, &cal), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "vocab-only"));
    rp_model_free(m);
}

/* The GGUF header's own counts (version, tensors, keys: the first 24 bytes of a v3 file). */
static void header_counts(const char *path, uint32_t *version, uint64_t *n_tensors, uint64_t *n_kv) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char h[24];
    assert_int_equal(fread(h, 1, 24, f), 24);
    fclose(f);
    assert_memory_equal(h, "GGUF", 4);
    memcpy(version, h + 4, 4);
    memcpy(n_tensors, h + 8, 8);
    memcpy(n_kv, h + 16, 8);
}

static void test_model_file(void **state) {
    (void)state;
    const char *path = rp_test_shared("models/stories260K-q8_0.gguf");
    RP_REQUIRE_SHARED(path, "models/stories260K-q8_0.gguf");
    rp_model_file *f = NULL;
    assert_int_equal(rp_model_file_open(path, &f), RP_OK);
    const rp_model_file_desc d = rp_model_file_describe(f);
    uint32_t version;
    uint64_t nt, nk;
    header_counts(path, &version, &nt, &nk);
    assert_int_equal(d.version, version);
    assert_int_equal(d.n_tensors, nt);
    assert_int_equal(d.n_meta, nk);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(d.file_size, (uint64_t)sb.st_size);
    assert_true(d.alignment > 0 && d.data_offset % d.alignment == 0 && d.data_offset < d.file_size);
    /* metadata, typed */
    rp_meta_entry e;
    const int64_t ia = rp_model_file_find_meta(f, "general.architecture");
    assert_true(ia >= 0);
    assert_int_equal(rp_model_file_meta(f, ia, &e), RP_OK);
    assert_string_equal(e.key, "general.architecture");
    assert_int_equal(e.type, RP_META_STR);
    assert_string_equal(e.type_name, "str");
    assert_int_equal(e.str_len, 5);
    assert_memory_equal(e.str, "llama", 5);
    assert_int_equal(rp_model_file_meta(f, rp_model_file_find_meta(f, "llama.block_count"), &e), RP_OK);
    assert_true(e.type == RP_META_U32 && e.u == 5 && e.i == 5);
    assert_int_equal(rp_model_file_meta(f, rp_model_file_find_meta(f, "llama.attention.layer_norm_rms_epsilon"), &e),
                     RP_OK);
    assert_int_equal(e.type, RP_META_F32);
    assert_true(fabs(e.f - 1e-5) < 1e-9);
    assert_int_equal(rp_model_file_meta(f, rp_model_file_find_meta(f, "tokenizer.ggml.tokens"), &e), RP_OK);
    assert_true(e.type == RP_META_ARRAY && e.elem_type == RP_META_STR && e.n_elems == 512);
    char text[512];
    assert_int_equal(rp_model_file_meta_text(f, ia, text, sizeof text), RP_OK);
    assert_string_equal(text, "'llama'");
    assert_int_equal(rp_model_file_meta_text(f, ia, text, 4), RP_OK);   /* cut to fit */
    assert_true(strlen(text) <= 3);
    assert_int_equal(rp_model_file_find_meta(f, "no.such.key"), -1);
    assert_int_equal(rp_model_file_meta(f, d.n_meta, &e), RP_ERR_RANGE);
    assert_int_equal(rp_model_file_meta(f, -1, &e), RP_ERR_RANGE);
    assert_int_equal(rp_model_file_meta_text(f, d.n_meta, text, sizeof text), RP_ERR_RANGE);
    /* the tensor table: contiguous in the data section, bytes adding up, a known shape */
    uint64_t total = 0, end = 0;
    bool saw_embd = false;
    rp_tensor_desc t;
    for (int64_t i = 0; i < d.n_tensors; i++) {
        assert_int_equal(rp_model_file_tensor(f, i, &t), RP_OK);
        assert_true(t.name && t.name[0] && t.bytes > 0 && t.n_dims >= 1 && t.n_dims <= 4);
        assert_true(t.offset >= end && t.offset % d.alignment == 0);
        end = t.offset + t.bytes;
        total += t.bytes;
        if (!strcmp(t.name, "token_embd.weight")) {
            saw_embd = true;
            assert_int_equal(t.n_dims, 2);
            assert_int_equal(t.ne[0], 64);
            assert_int_equal(t.ne[1], 512);
            assert_string_equal(t.type_name, "q8_0");
            assert_int_equal(t.bytes, 512 * (64 / 32) * 34);   /* q8_0: 34 bytes per 32 values */
        }
    }
    assert_true(saw_embd);
    assert_int_equal(total, d.tensor_bytes);
    assert_true(d.data_offset + end <= d.file_size);
    assert_int_equal(rp_model_file_tensor(f, d.n_tensors, &t), RP_ERR_RANGE);
    /* the type mix: f32 norms and q8_0 matrices, most bytes first, adding up to the table */
    rp_type_share mix[8];
    const int32_t nm = rp_model_file_type_mix(f, mix, 8);
    assert_int_equal(nm, 2);
    assert_string_equal(mix[0].type_name, "q8_0");
    assert_string_equal(mix[1].type_name, "f32");
    assert_true(mix[0].bytes >= mix[1].bytes);
    assert_int_equal(mix[0].n_tensors + mix[1].n_tensors, d.n_tensors);
    assert_int_equal(mix[0].bytes + mix[1].bytes, d.tensor_bytes);
    assert_int_equal(rp_model_file_type_mix(f, mix, 1), 2);   /* the count, one written */
    rp_model_file_close(f);
    rp_model_file_close(NULL);
    /* errors name the file */
    char bad[256];
    tmp_path(bad, sizeof bad, "not-a-gguf.bin");
    FILE *g = fopen(bad, "wb");
    assert_non_null(g);
    fputs("this is not a model file at all, just some text", g);
    fclose(g);
    assert_int_equal(rp_model_file_open(bad, &f), RP_ERR_FORMAT);
    assert_null(f);
    assert_int_equal(rp_model_file_open("/nonexistent/x.gguf", &f), RP_ERR_IO);
    assert_non_null(strstr(rp_last_error(), "/nonexistent/x.gguf"));
}

static bool stop_half(void *user, uint64_t done, uint64_t total) {
    (void)user;
    return done < total / 2;
}

static void test_synth(void **state) {
    (void)state;
    const rp_model_synth_params def = rp_model_synth_default_params();
    assert_string_equal(def.arch, "llama");
    assert_string_equal(def.preset, "tiny");
    assert_string_equal(def.type, "q8_0");
    rp_model_synth_params p = def;
    p.type = "q4_k_m";
    p.n_threads = 1;
    char a[256], b[256], c[256];
    tmp_path(a, sizeof a, "synth-a.gguf");
    tmp_path(b, sizeof b, "synth-b.gguf");
    tmp_path(c, sizeof c, "synth-c.gguf");
    assert_int_equal(rp_model_synth(&p, a), RP_OK);
    p.n_threads = 3;
    assert_int_equal(rp_model_synth(&p, b), RP_OK);
    size_t la = 0, lb = 0, lc = 0;
    char *fa = rp_test_read_file(a, &la), *fb = rp_test_read_file(b, &lb);
    assert_true(fa && fb && la == lb && la > 0);
    assert_memory_equal(fa, fb, la);   /* the same parameters, the same bytes (whatever the threads) */
    p.seed = 2;
    assert_int_equal(rp_model_synth(&p, c), RP_OK);
    char *fc = rp_test_read_file(c, &lc);
    assert_true(fc && lc == la && memcmp(fa, fc, la) != 0);   /* another seed: other weights, same layout */
    free(fa);
    free(fb);
    free(fc);
    /* the tensor table has the tiny llama's shapes: n_embd 256, n_ff 768, 4 layers, 8 heads of 32, 4 KV heads,
     * a 512-token vocabulary, the output tied to the embeddings; Q4_K with Q6_K for the sensitive tensors */
    rp_model_file *f = NULL;
    assert_int_equal(rp_model_file_open(a, &f), RP_OK);
    const rp_model_file_desc fd = rp_model_file_describe(f);
    assert_int_equal(fd.n_tensors, 2 + 4 * 9);   /* embeddings (tied to the output), output norm; 9 per layer */
    static const struct { const char *name; int64_t ne0, ne1; } want[] = {
        {"token_embd.weight", 256, 512},    {"output_norm.weight", 256, 1},       {"blk.0.attn_q.weight", 256, 256},
        {"blk.0.attn_k.weight", 256, 128},  {"blk.3.attn_v.weight", 256, 128},    {"blk.2.attn_output.weight", 256, 256},
        {"blk.1.ffn_gate.weight", 256, 768}, {"blk.1.ffn_up.weight", 256, 768},   {"blk.3.ffn_down.weight", 768, 256},
    };
    int found = 0;
    rp_tensor_desc t;
    for (int64_t i = 0; i < fd.n_tensors; i++) {
        assert_int_equal(rp_model_file_tensor(f, i, &t), RP_OK);
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (!strcmp(t.name, want[k].name)) {
                assert_int_equal(t.ne[0], want[k].ne0);
                assert_int_equal(t.ne[1], want[k].ne1);
                found++;
            }
    }
    assert_int_equal(found, (int)(sizeof want / sizeof want[0]));
    rp_type_share mix[8];
    const int32_t nm = rp_model_file_type_mix(f, mix, 8);
    bool q4k = false, q6k = false;
    for (int32_t i = 0; i < nm && i < 8; i++) {
        q4k |= !strcmp(mix[i].type_name, "q4_K");
        q6k |= !strcmp(mix[i].type_name, "q6_K");
    }
    assert_true(q4k && q6k);
    char text[64];
    assert_int_equal(rp_model_file_meta_text(f, rp_model_file_find_meta(f, "llama.block_count"), text, sizeof text),
                     RP_OK);
    assert_string_equal(text, "4");
    rp_model_file_close(f);
    /* ... and it loads as that model */
    rp_model *m = load(a);
    const rp_model_desc md = rp_model_describe(m);
    assert_string_equal(md.arch, "llama");
    assert_true(md.n_embd == 256 && md.n_ff == 768 && md.n_layer == 4 && md.n_head == 8 && md.n_head_kv == 4 &&
                md.head_dim == 32 && md.n_vocab == 512 && md.n_rot == 32 && !md.rope_neox && md.tied_output);
    assert_string_equal(md.tokenizer, "spm");
    rp_model_free(m);
    /* qwen3's tiny preset is another model */
    p = def;
    p.arch = "qwen3";
    assert_int_equal(rp_model_synth(&p, c), RP_OK);
    m = load(c);
    assert_string_equal(rp_model_describe(m).arch, "qwen3");
    assert_true(rp_model_describe(m).rope_neox);
    rp_model_free(m);
    /* bad parameters and a cancel leave nothing behind */
    char d[256];
    tmp_path(d, sizeof d, "synth-d.gguf");
    struct stat sb;
    p = def;
    p.arch = "gpt2";
    assert_int_equal(rp_model_synth(&p, d), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "gpt2"));
    p = def;
    p.preset = "small";
    p.arch = "qwen3";
    assert_int_equal(rp_model_synth(&p, d), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "llama model"));
    p = def;
    p.type = "q9_9";
    assert_int_equal(rp_model_synth(&p, d), RP_ERR_INVALID_ARG);
    p.type = NULL;
    assert_int_equal(rp_model_synth(&p, d), RP_ERR_INVALID_ARG);
    p = def;
    p.progress = stop_half;
    assert_int_equal(rp_model_synth(&p, d), RP_ERR_CANCELLED);
    assert_int_not_equal(stat(d, &sb), 0);
}

/* A model's description has every hyper-parameter `reprise inspect` shows; they agree with the file's keys. */
static void test_model_desc(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const rp_model_desc d = rp_model_describe(m);
    assert_int_equal(d.n_rot, 8);
    assert_false(d.rope_neox || d.rope_llama3 || d.tied_output);
    assert_true(d.rope_base == 10000.0f);
    assert_string_equal(d.tokenizer, "spm");
    assert_int_equal(d.n_tokens, 512);
    char buf[64];
    assert_true(rp_model_meta(m, "llama.attention.layer_norm_rms_epsilon", buf, sizeof buf) > 0);
    assert_true(d.rms_eps == strtof(buf, NULL));
    rp_model_free(m);
}

static void test_cpu_and_kernels(void **state) {
    (void)state;
    rp_cpu_desc c;
    rp_cpu_describe(&c);
    assert_non_null(c.brand);
    assert_string_equal(c.active, rp_cpu_active());
    assert_non_null(c.best);
    assert_true(c.thp[0] != 0);
    if (c.avx512f) assert_true(c.avx2);   /* levels nest */
    char info[512];
    rp_system_info(info, sizeof info);
    assert_non_null(strstr(info, c.brand));
    rp_kernel_desc k[64];
    memset(k, 0, sizeof k);
    const int32_t n = rp_kernel_table(k, 64);
    /* every computable weight type's matmul (at least the seven of the first round), then 3 attention KV types */
    assert_true(n >= 10 && n <= 64);
    const int32_t n_mm = n - 3;
    static const char *const must[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q6_K"};
    for (size_t j = 0; j < sizeof must / sizeof must[0]; j++) {
        bool found = false;
        for (int32_t i = 0; i < n_mm; i++) found |= !strcmp(k[i].type, must[j]);
        if (!found) fail_msg("rp_kernel_table lacks matmul %s", must[j]);
    }
    for (int32_t i = 0; i < n; i++) assert_string_equal(k[i].op, i < n_mm ? "matmul" : "attention");
    static const char *const kv[] = {"f16", "q8_0", "f32"};
    for (int32_t i = n_mm; i < n; i++) {
        assert_string_equal(k[i].type, kv[i - n_mm]);
        assert_non_null(k[i].kernel);   /* every level has attention kernels */
    }
    for (int32_t i = 0; i < n_mm; i++)
        if (!strcmp(k[i].type, "q8_0")) assert_non_null(k[i].kernel);   /* ... and a q8_0 matmul */
    rp_kernel_desc one[2];
    memset(one, 0, sizeof one);
    assert_int_equal(rp_kernel_table(one, 1), n);
    assert_non_null(one[0].op);
    assert_null(one[1].op);   /* only cap entries written */
    assert_int_equal(rp_kernel_table(NULL, 0), n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_read_only_store_and_long_context),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_model_file),
        cmocka_unit_test(test_synth),
        cmocka_unit_test(test_model_desc),
        cmocka_unit_test(test_cpu_and_kernels),
    };
    return rp_test_main(tests, NULL, NULL);
}
