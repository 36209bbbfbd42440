/* test_api.c — the public API (reprise.h) end to end on stories260K: model, tokenizer, chat, prompts, engine and
 * sequences (reuse, stop strings, streaming, cancel, limits), the cache directory, the agents scheduler. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reprise.h"

#define OPEN_MODEL(m) RP_OPEN_STORIES(m)

static rp_gen_opts greedy(int32_t n) {
    rp_gen_opts o = rp_gen_default_opts();
    o.sampling.temp = 0;
    o.max_tokens = n;
    return o;
}

/* The text `reprise run` prints for the same prompt (the CLI is the reference front end). */
static void run_cli(const char *args, char *out, size_t cap) {
    const char *bin = getenv("RP_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -t 1 --temp 0 %s 2>/dev/null", bin ? bin : "reprise",
             rp_test_shared("models/stories260K.gguf"), args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    assert_int_equal(pclose(f), 0);
    if (n && out[n - 1] == '\n') out[n - 1] = 0;   /* run ends its output with a newline */
}

static void test_model_tokenizer_chat(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const rp_model_desc d = rp_model_describe(m);
    assert_string_equal(d.arch, "llama");
    assert_int_equal(d.n_vocab, 512);
    assert_true(d.n_layer > 0 && d.has_weights && d.has_tokenizer && d.fingerprint != 0);
    char buf[256];
    assert_true(rp_model_meta(m, "general.architecture", buf, sizeof buf) == 5);
    assert_string_equal(buf, "llama");
    assert_true(rp_model_meta(m, "no.such.key", buf, sizeof buf) == -1);
    assert_true(rp_model_meta(m, "llama.block_count", buf, sizeof buf) > 0);
    assert_int_equal(atoi(buf), d.n_layer);
    /* tokenize / detokenize round trip; a too small buffer says what it needs */
    const char *text = "Once upon a time, there was a cat.";
    rp_token t[64];
    int32_t n = 0;
    assert_int_equal(rp_tokenize(m, text, strlen(text), true, false, t, 64, &n), RP_OK);
    assert_true(n > 3 && t[0] == rp_token_bos(m));
    int32_t need = 0;
    assert_int_equal(rp_tokenize(m, text, strlen(text), true, false, t, 2, &need), RP_ERR_FULL);
    assert_int_equal(need, n);
    size_t len = 0;
    assert_int_equal(rp_detokenize(m, t + 1, n - 1, false, buf, sizeof buf, &len), RP_OK);
    assert_string_equal(buf, text);
    assert_int_equal(rp_detokenize(m, t + 1, n - 1, false, buf, 4, &len), RP_ERR_FULL);
    assert_int_equal(len, strlen(text));
    assert_true(rp_token_is_eog(m, rp_token_eos(m)));
    /* chat: the model's format (a plain transcript for stories260K) */
    const rp_chat_message msgs[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "Hi!"}};
    char chat[512];
    assert_int_equal(rp_chat_render(m, msgs, 2, NULL, true, chat, sizeof chat, &len), RP_OK);
    assert_non_null(strstr(chat, "Hi!"));
    assert_int_equal(strlen(chat), len);
    const rp_chat_message bad[] = {{.role = "wizard", .content = "x"}};
    assert_int_equal(rp_chat_render(m, bad, 1, NULL, true, chat, sizeof chat, &len), RP_ERR_INVALID_ARG);
    rp_model_free(m);
}

typedef struct stream {
    char text[4096];
    size_t len;
    int calls, stop_after;
} stream;

static bool on_token(void *user, rp_token tok, const char *text, size_t len) {
    (void)tok;
    stream *s = user;
    memcpy(s->text + s->len, text, len);
    s->len += len;
    s->text[s->len] = 0;
    return ++s->calls != s->stop_after;
}

static void test_generate(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_engine_n_ctx(e), 512);   /* min(4096, the model's 512) */
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *prompt = "Once upon a time, there was a little girl named Lily.";
    assert_int_equal(rp_prompt_add_text(p, m, prompt, strlen(prompt)), RP_OK);
    rp_gen_opts o = greedy(24);
    rp_gen_stats st;
    char out[4096], ref[4096];
    size_t len = 0;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(st.prompt_tokens, rp_prompt_n_tokens(p));
    assert_int_equal(st.reused_prefix, 0);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_int_equal(st.generated, 24);
    assert_int_equal(st.stop, RP_STOP_LENGTH);
    assert_int_equal(strlen(out), len);
    /* the same text `reprise run` prints */
    char args[512];
    snprintf(args, sizeof args, "-n 24 -p '%s'", prompt);
    run_cli(args, ref, sizeof ref);
    print_message("  api: \"%s\"\n", out);
    assert_string_equal(out, ref);
    /* again: the prompt's chunks were cached at the first token; all but the last token reused exactly */
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix, rp_prompt_n_tokens(p) - 1);
    assert_int_equal(st.reused_prefix_exact, st.reused_prefix);
    assert_int_equal(rp_seq_generate(s, &o, ref, sizeof ref, &len, &st), RP_OK);
    assert_string_equal(ref, out);
    /* streaming gives the same text in pieces; a stop string ends it before the string */
    stream sm = {.stop_after = -1};
    o.on_token = on_token;
    o.user = &sm;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, ref, sizeof ref, &len, &st), RP_OK);
    assert_string_equal(sm.text, out);
    assert_true(sm.calls >= 24);
    const char *cut = strstr(out + 3, " ");   /* a stop string somewhere inside the text */
    assert_non_null(cut);
    char stop[8] = {0};
    memcpy(stop, cut, 3);
    const char *stops[] = {stop};
    o.stop = stops;
    o.n_stop = 1;
    memset(&sm, 0, sizeof sm);
    sm.stop_after = -1;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, ref, sizeof ref, &len, &st), RP_OK);
    assert_int_equal(st.stop, RP_STOP_STRING);
    assert_int_equal(len, (size_t)(cut - out));
    assert_memory_equal(ref, out, len);
    assert_string_equal(sm.text, ref);   /* nothing of the stop string was streamed */
    /* the callback cancels */
    o.stop = NULL;
    o.n_stop = 0;
    memset(&sm, 0, sizeof sm);
    sm.stop_after = 3;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, ref, sizeof ref, &len, &st), RP_OK);
    assert_int_equal(st.stop, RP_STOP_CANCELLED);
    assert_int_equal(st.generated, 3);
    /* a too small buffer still counts the whole text */
    o.on_token = NULL;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, ref, 5, &len, &st), RP_OK);
    assert_int_equal(len, strlen(out));
    assert_int_equal(strlen(ref), 4);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

static void test_limits_and_errors(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 48;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *short_text = "Once upon a time";
    assert_int_equal(rp_prompt_add_text(p, m, short_text, strlen(short_text)), RP_OK);
    rp_gen_opts o = greedy(-1);   /* until the context is full */
    o.ignore_eos = true;
    rp_gen_stats st;
    char out[2048];
    size_t len;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_int_equal(st.stop, RP_STOP_CONTEXT);
    assert_int_equal(rp_seq_n_past(s), 48);
    /* a prompt that does not fit is refused, naming the sizes */
    rp_prompt_clear(p);
    char long_text[2048] = "";
    for (int i = 0; i < 30; i++) strcat(long_text, "The dog ran to the park. ");
    assert_int_equal(rp_prompt_add_text(p, m, long_text, strlen(long_text)), RP_OK);
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_ERR_RANGE);
    assert_non_null(strstr(rp_last_error(), "context"));
    /* generate with nothing in the sequence */
    rp_seq_reset(s);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_ERR_INVALID_ARG);
    /* bad engine parameters and a vocab-only model */
    ep.recompute_ratio = 2;
    rp_engine *bad = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &bad), RP_ERR_INVALID_ARG);
    assert_null(bad);
    ep.recompute_ratio = 0.25f;
    ep.check_layer = -1;
    assert_int_equal(rp_engine_create(m, &ep, &bad), RP_ERR_INVALID_ARG);
    /* a check layer past the last layer is the last one (as for any model with fewer layers than the default) */
    ep.check_layer = 100;
    assert_int_equal(rp_engine_create(m, &ep, &bad), RP_OK);
    rp_engine_free(bad);
    bad = NULL;
    rp_model_params vp = rp_model_default_params();
    vp.vocab_only = true;
    rp_model *vm = NULL;
    assert_int_equal(rp_model_load(rp_test_shared("models/stories260K.gguf"), vp, &vm), RP_OK);
    ep = rp_engine_default_params();
    assert_int_equal(rp_engine_create(vm, &ep, &bad), RP_ERR_INVALID_ARG);
    rp_model_free(vm);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

/* Documents as segments: reordered, blend reuses them non-prefix; a cache namespace sees none of another's. */
static void test_segments_and_namespaces(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    const char *docs[3] = {"Lily had a red ball and she liked to play with it in the park every day after lunch. ",
                           "Tom saw a big dog near the pond. The dog was wet and happy and it barked at the ducks. ",
                           "Sue made a cake for her mom. It was sweet and soft, and they ate it together at night. "};
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    rp_gen_opts o = greedy(4);
    o.cache_namespace = 7;
    rp_gen_stats st;
    char out[256];
    size_t len;
    for (int order = 0; order < 2; order++) {
        rp_prompt_clear(p);
        for (int i = 0; i < 3; i++) {
            const char *d = docs[order ? 2 - i : i];
            assert_int_equal(rp_prompt_add_text(p, m, d, strlen(d)), RP_OK);
        }
        assert_int_equal(rp_prompt_add_text(p, m, "Who is Lily?", 12), RP_OK);
        assert_int_equal(rp_prompt_n_segments(p), 4);
        assert_int_equal(rp_prompt_n_bounds(p), 3);
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        if (order == 1) {
            print_message("  reordered documents: %d reused non-prefix, %d recomputed\n", st.reused_nonprefix,
                          st.recomputed);
            assert_true(st.reused_nonprefix > 0);
        }
        assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    }
    /* another namespace: nothing of it */
    o.cache_namespace = 8;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix + st.reused_nonprefix, 0);
    /* reuse none for one call: nothing reused although the engine blends */
    o.cache_namespace = 7;
    o.reuse = RP_REUSE_NONE;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix + st.reused_nonprefix, 0);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

static bool count_entry(void *user, const rp_cache_entry *c) {
    int *n = user;
    assert_non_null(c->tokens);
    assert_true(c->n_tokens > 0 && c->raw_bytes > 0);
    (*n)++;
    return true;
}

typedef struct models_seen {
    int n;
    uint64_t salt, chunks;
    int kv_type;
    int32_t n_layer;
    char name[128];
} models_seen;

static bool model_entry(void *user, const rp_cache_model *cm) {
    models_seen *x = user;
    x->n++;
    x->salt = cm->salt;
    x->chunks = cm->chunks;
    x->kv_type = cm->kv_type;
    x->n_layer = cm->n_layer;
    snprintf(x->name, sizeof x->name, "%s", cm->name);
    assert_true(cm->row_bytes > 0 && cm->bytes > 0);
    return true;
}

static void test_cache_dir(void **state) {
    (void)state;
    OPEN_MODEL(m);
    char dir[256];
    snprintf(dir, sizeof dir, "%.200s/api-cache", rp_test_tmpdir());
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.cache_dir = dir;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *text = "Once upon a time there was a boy who liked trains, and every morning he went to see them.";
    assert_int_equal(rp_prompt_add_text(p, m, text, strlen(text)), RP_OK);
    rp_gen_opts o = greedy(8);
    rp_gen_stats st;
    char out[256], again[256];
    size_t len;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_int_equal(rp_engine_flush(e), RP_OK);
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);
    assert_true(es.has_store && es.written > 0 && es.store_bytes > 0 && es.prefetch_used <= es.prefetched);
    rp_seq_free(s);
    rp_engine_free(e);
    /* a new engine (a restart) reuses the prompt from flash and says the same */
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix, rp_prompt_n_tokens(p) - 1);
    assert_int_equal(rp_seq_generate(s, &o, again, sizeof again, &len, &st), RP_OK);
    assert_string_equal(again, out);
    rp_seq_free(s);
    rp_engine_free(e);
    /* maintenance */
    rp_cache *c = NULL;
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    rp_cache_info info;
    assert_int_equal(rp_cache_info_get(c, &info), RP_OK);
    assert_true(info.chunks > 0 && info.disk_bytes > 0 && info.models == 1);
    int n = 0;
    assert_int_equal(rp_cache_list(c, count_entry, &n), RP_OK);
    assert_int_equal(n, (int)info.chunks);
    assert_false(rp_cache_is_empty(c));
    assert_int_equal(rp_cache_disk_bytes(c), info.disk_bytes);
    /* the model that wrote them, under the salt rp_cache_salt computes */
    models_seen ms = {0};
    assert_int_equal(rp_cache_models(c, model_entry, &ms), RP_OK);
    uint64_t salt = 0, salt_q8 = 0;
    assert_int_equal(rp_cache_salt(m, RP_KV_F16, &salt), RP_OK);
    assert_int_equal(rp_cache_salt(m, RP_KV_Q8_0, &salt_q8), RP_OK);
    assert_true(salt != 0 && salt_q8 != salt);
    assert_int_equal(ms.n, 1);
    assert_true(ms.salt == salt && ms.kv_type == RP_KV_F16 && ms.chunks == info.chunks);
    assert_int_equal(ms.n_layer, rp_model_describe(m).n_layer);
    assert_string_equal(ms.name, rp_model_describe(m).name);
    bool db_ok = false;
    char why[128];
    uint64_t ok = 0, bad = 0;
    assert_int_equal(rp_cache_verify(c, false, NULL, NULL, &db_ok, why, sizeof why, &ok, &bad), RP_OK);
    assert_true(db_ok && ok == info.chunks && bad == 0);
    uint64_t cleared = 0;
    assert_int_equal(rp_cache_clear(c, &cleared), RP_ERR_INVALID_ARG);   /* read-only handle */
    rp_cache_close(c);
    assert_int_equal(rp_cache_open(dir, true, &c), RP_OK);
    assert_int_equal(rp_cache_bind(c, m, RP_KV_Q8_0), RP_ERR_NOT_FOUND);   /* nothing written with q8_0 */
    assert_int_equal(rp_cache_bind(c, m, RP_KV_F16), RP_OK);
    assert_int_equal(rp_cache_clear(c, &cleared), RP_OK);
    assert_int_equal(cleared, info.chunks);
    rp_cache_close(c);
    assert_int_equal(rp_cache_open("/nonexistent/reprise-store", false, &c), RP_ERR_NOT_FOUND);
    /* a store whose first writer died before committing its schema: empty, nothing to read */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -m 700 '%s' && : > '%s/kv.db' && chmod 600 '%s/kv.db'", dir, dir, dir,
             dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    assert_true(rp_cache_is_empty(c));
    assert_int_equal(rp_cache_info_get(c, &info), RP_OK);
    assert_true(info.chunks == 0 && info.models == 0);
    memset(&ms, 0, sizeof ms);
    assert_int_equal(rp_cache_models(c, model_entry, &ms), RP_OK);
    assert_int_equal(ms.n, 0);
    assert_int_equal(rp_cache_disk_bytes(c), 0);
    assert_int_equal(rp_cache_bind(c, m, RP_KV_F16), RP_ERR_NOT_FOUND);
    rp_cache_close(c);
    /* a store that cannot be used (world-writable): an error, or with cache_dir_optional RAM only and a notice */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s' && chmod 777 '%s'", dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_not_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_null(e);
    ep.cache_dir_optional = true;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_engine_stats_get(e, &es);
    assert_false(es.has_store);
    print_message("  optional store refused: %s\n", rp_engine_notice(e));
    assert_non_null(strstr(rp_engine_notice(e), "0777"));
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, again, sizeof again, &len, &st), RP_OK);
    assert_string_equal(again, out);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_prompt_free(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    rp_model_free(m);
}

/* Two agents through the scheduler: each one's greedy text equals a one-at-a-time sequence's. */
static void test_agents(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_agents_params ap = rp_agents_default_params();
    ap.n_threads = 1;
    ap.n_ctx = 256;
    ap.max_agents = 4;
    rp_agents *a = NULL;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_OK);
    const char *prompts[2] = {"Once upon a time, there was a dog", "Lily went to the park and saw"};
    rp_agent_id id[2];
    rp_turn_opts to = rp_turn_default_opts();
    to.sampling.temp = 0;
    to.max_tokens = 16;
    rp_token t[64];
    int32_t n = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rp_agents_add(a, &id[i]), RP_OK);
        assert_int_equal(rp_tokenize(m, prompts[i], strlen(prompts[i]), true, false, t, 64, &n), RP_OK);
        assert_int_equal(rp_agents_submit(a, id[i], t, n, &to), RP_OK);
    }
    assert_int_equal(rp_agents_run(a), RP_OK);
    rp_agents_stats as;
    rp_agents_stats_get(a, &as);
    assert_true(as.steps > 0 && as.agents == 2);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.reuse = RP_REUSE_NONE;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    for (int i = 0; i < 2; i++) {
        rp_agent_info info;
        assert_int_equal(rp_agents_info(a, id[i], &info), RP_OK);
        assert_int_equal(info.state, RP_AGENT_IDLE);
        assert_int_equal(info.generated, 16);
        rp_token hist[128];
        int32_t nh = 0;
        assert_int_equal(rp_agents_tokens(a, id[i], 0, hist, 128, &nh), RP_OK);
        rp_prompt_clear(p);
        assert_int_equal(rp_prompt_add_text(p, m, prompts[i], strlen(prompts[i])), RP_OK);
        const int32_t np = rp_prompt_n_tokens(p);
        rp_gen_opts o = greedy(16);
        o.ignore_eos = true;
        rp_gen_stats st;
        char ref[512], got[512];
        size_t len;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        assert_int_equal(rp_seq_generate(s, &o, ref, sizeof ref, &len, &st), RP_OK);
        assert_int_equal(rp_detokenize(m, hist + np, nh - np, false, got, sizeof got, &len), RP_OK);
        /* the sequence's text keeps a continuation's leading space; rp_detokenize starts a text (drops it) */
        const char *r = ref + (ref[0] == ' ');
        print_message("  agent %d: \"%s\"\n", i, got);
        assert_string_equal(got, r);
    }
    assert_int_equal(rp_agents_remove(a, id[0]), RP_OK);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_agents_free(a);
    rp_model_free(m);
}

/* The text of `n` greedy / seeded tokens after `prompt`, from a fresh prefill. */
static void gen_after_prefill(rp_seq *s, const rp_prompt *p, const rp_gen_opts *o, char *out, size_t cap) {
    rp_gen_stats st;
    size_t len;
    assert_int_equal(rp_seq_prefill(s, p, o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, o, out, cap, &len, &st), RP_OK);
}

/* A generation continued by a second generate (or by a feed) is the one generation: the last token of the
 * first waits to be decoded, and the sampler's random stream goes on instead of restarting at its seed. */
static void test_continue_and_truncate(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.reuse = RP_REUSE_NONE;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL, *ref = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    assert_int_equal(rp_seq_create(e, &ref), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *text = "Once upon a time, there was a little dog";
    assert_int_equal(rp_prompt_add_text(p, m, text, strlen(text)), RP_OK);
    const int32_t np = rp_prompt_n_tokens(p);
    for (int seeded = 0; seeded < 2; seeded++) {
        rp_gen_opts o = greedy(8);
        if (seeded) {
            o.sampling.temp = 0.8f;
            o.sampling.seed = 5;
        }
        char a[512], b[512], whole[1024], ab[1024];
        size_t len;
        rp_gen_stats st;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        assert_int_equal(rp_seq_generate(s, &o, a, sizeof a, &len, &st), RP_OK);
        assert_int_equal(st.stop, RP_STOP_LENGTH);
        /* the last token is in the sequence, waiting to be decoded */
        assert_int_equal(rp_seq_n_past(s), np + 8);
        assert_null(rp_seq_logits(s));
        assert_int_equal(rp_seq_generate(s, &o, b, sizeof b, &len, &st), RP_OK);
        assert_int_equal(rp_seq_n_past(s), np + 16);
        o.max_tokens = 16;
        gen_after_prefill(ref, p, &o, whole, sizeof whole);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        print_message("  %s: 8 + 8 \"%s\"\n", seeded ? "seeded" : "greedy", ab);
        assert_string_equal(ab, whole);
        /* a prefill starts over: the same seeded text again */
        gen_after_prefill(ref, p, &o, ab, sizeof ab);
        assert_string_equal(ab, whole);
    }
    /* the tokens: the prompt, then what was generated */
    const rp_token *t = rp_seq_tokens(s);
    assert_memory_equal(t, rp_prompt_tokens(p), sizeof *t * (size_t)np);
    rp_token toks[128];
    const int32_t n = rp_seq_n_past(s);
    memcpy(toks, t, sizeof *t * (size_t)n);
    /* a chat's next turn: keep a common prefix, feed what changed. The kept cells are what they were (the
     * prompt prefilled, each generated token decoded alone), so the logits equal those of a sequence built
     * the same way without the detour */
    const size_t vbytes = sizeof(float) * (size_t)rp_model_describe(m).n_vocab;
    rp_gen_opts o = greedy(0);
    rp_gen_stats st;
    assert_int_equal(rp_seq_truncate(s, n + 1), RP_ERR_RANGE);
    assert_int_equal(rp_seq_truncate(s, np + 4), RP_OK);
    assert_int_equal(rp_seq_n_past(s), np + 4);
    assert_null(rp_seq_logits(s));
    assert_int_equal(rp_seq_feed(s, toks + np + 4, 6), RP_OK);
    assert_int_equal(rp_seq_prefill(ref, p, &o, &st), RP_OK);
    for (int32_t i = 0; i < 4; i++) assert_int_equal(rp_seq_feed(ref, toks + np + i, 1), RP_OK);
    assert_int_equal(rp_seq_feed(ref, toks + np + 4, 6), RP_OK);
    assert_non_null(rp_seq_logits(s));
    assert_memory_equal(rp_seq_logits(s), rp_seq_logits(ref), vbytes);
    /* after a truncate, generate decodes the last kept token again for its logits */
    assert_int_equal(rp_seq_truncate(s, np + 3), RP_OK);
    char none[8];
    size_t len;
    assert_int_equal(rp_seq_generate(s, &o, none, sizeof none, &len, &st), RP_OK);
    assert_int_equal(len, 0);
    assert_int_equal(rp_seq_prefill(ref, p, &o, &st), RP_OK);
    for (int32_t i = 0; i < 3; i++) assert_int_equal(rp_seq_feed(ref, toks + np + i, 1), RP_OK);
    assert_non_null(rp_seq_logits(s));
    assert_memory_equal(rp_seq_logits(s), rp_seq_logits(ref), vbytes);
    rp_prompt_free(p);
    rp_seq_free(ref);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

/* Static shapes: the engine's shapes, the stats' labels and JSON line, the naive schedule's plan. */
static void test_static_and_stats_json(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const char *docs[4] = {"You are a story teller. Answer the question at the end. ",
                           "Lily had a red ball and she liked to play with it in the park every day after lunch. ",
                           "Tom saw a big dog near the pond. The dog was wet and happy and it barked at the ducks. ",
                           "Sue made a cake for her mom. It was sweet and soft, and they ate it together at night. "};
    rp_prompt *pa = NULL, *pb = NULL;
    assert_int_equal(rp_prompt_create(&pa), RP_OK);
    assert_int_equal(rp_prompt_create(&pb), RP_OK);
    const int order_b[4] = {0, 3, 1, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rp_prompt_add_text(pa, m, docs[i], strlen(docs[i])), RP_OK);
        assert_int_equal(rp_prompt_add_text(pb, m, docs[order_b[i]], strlen(docs[order_b[i]])), RP_OK);
    }
    assert_int_equal(rp_prompt_add_text(pb, m, "Who is Lily?", 12), RP_OK);
    rp_gen_stats st[2];
    for (int naive = 0; naive < 2; naive++) {
        rp_engine_params ep = rp_engine_default_params();
        ep.n_threads = 1;
        ep.static_mode = true;
        ep.naive_schedule = naive;
        ep.load_calibration = false;   /* defaults, whatever this machine has stored */
        rp_engine *e = NULL;
        assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
        rp_static_shapes sh;
        rp_engine_static_shapes(e, &sh);
        assert_true(sh.L_P == 128 && sh.L_S == 512 && !sh.calibrated && !rp_engine_calibrated(e));
        rp_seq *s = NULL;
        assert_int_equal(rp_seq_create(e, &s), RP_OK);
        rp_gen_opts o = greedy(2);
        char out[64];
        size_t len;
        assert_int_equal(rp_seq_prefill(s, pa, &o, &st[naive]), RP_OK);
        assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st[naive]), RP_OK);
        assert_int_equal(st[naive].commit_status, RP_OK);
        o.persist = false;
        assert_int_equal(rp_seq_prefill(s, pb, &o, &st[naive]), RP_OK);
        assert_true(st[naive].static_shapes && !st[naive].calibrated && st[naive].pad_rows > 0);
        assert_true(st[naive].reused_nonprefix > 0);
        rp_seq_free(s);
        rp_engine_free(e);
    }
    /* the same cache state, the same reuse; the DP plans a cheaper schedule than one call type per segment */
    print_message("  static plan: DP %.2f (%d calls), naive %.2f (%d calls), placeholder units\n", st[0].plan_ms,
                  st[0].calls, st[1].plan_ms, st[1].calls);
    assert_int_equal(st[0].reused_nonprefix, st[1].reused_nonprefix);
    assert_true(st[0].plan_ms < st[1].plan_ms);
    /* the JSON line: plan_ms null unless static and calibrated; static prefills say whether they were */
    char js[2048];
    const size_t need = rp_gen_stats_json(&st[0], js, sizeof js);
    assert_int_equal(need, strlen(js));
    print_message("  %s\n", js);
    assert_true(!strncmp(js, "{\"prompt_tokens\": ", 18));
    assert_non_null(strstr(js, "\"reused_prefix_approx\": "));
    assert_non_null(strstr(js, ", \"plan_ms\": null, \"calibrated\": false}"));
    char small[16];
    assert_int_equal(rp_gen_stats_json(&st[0], small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    rp_gen_stats x = {.prompt_tokens = 7, .static_shapes = true, .calibrated = true, .plan_ms = 1.5};
    rp_gen_stats_json(&x, js, sizeof js);
    assert_non_null(strstr(js, "\"plan_ms\": 1.500, \"calibrated\": true}"));
    x.static_shapes = x.calibrated = false;
    rp_gen_stats_json(&x, js, sizeof js);
    assert_non_null(strstr(js, "\"compute_ms\": 0.000, \"plan_ms\": null}"));
    rp_prompt_free(pa);
    rp_prompt_free(pb);
    rp_model_free(m);
}

static void test_names(void **state) {
    (void)state;
    const rp_kv_type kv[] = {RP_KV_F16, RP_KV_Q8_0, RP_KV_F32};
    for (int i = 0; i < 3; i++) assert_int_equal(rp_kv_type_parse(rp_kv_type_name(kv[i])), kv[i]);
    for (int i = RP_REUSE_NONE; i <= RP_REUSE_BLEND; i++)
        assert_int_equal(rp_reuse_mode_parse(rp_reuse_mode_name((rp_reuse_mode)i)), i);
    for (int i = RP_SELECT_HYBRID; i <= RP_SELECT_ATTN; i++)
        assert_int_equal(rp_select_kind_parse(rp_select_kind_name((rp_select_kind)i)), i);
    assert_string_equal(rp_kv_type_name(RP_KV_Q8_0), "q8_0");
    assert_int_equal(rp_kv_type_parse("q4_0"), -1);   /* a weight type, not a KV type */
    assert_int_equal(rp_reuse_mode_parse("sometimes"), -1);
    assert_int_equal(rp_select_kind_parse(NULL), -1);
    assert_int_equal(rp_reuse_mode_parse(NULL), -1);
    assert_int_equal(rp_kv_type_parse(NULL), -1);
    assert_string_equal(rp_kv_type_name((rp_kv_type)2), "?");
    assert_string_equal(rp_reuse_mode_name((rp_reuse_mode)9), "?");
    assert_string_equal(rp_select_kind_name((rp_select_kind)9), "?");
}

/* Two sequences of one engine: a prefill on the second caches the first's prompt before it (the reuse engine keeps
 * one pending prompt), so the first prompt is found again later; each sequence keeps its own KV. */
static void test_two_sequences(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *a = NULL, *b = NULL;
    assert_int_equal(rp_seq_create(e, &a), RP_OK);
    assert_int_equal(rp_seq_create(e, &b), RP_OK);
    rp_prompt *pa = NULL, *pb = NULL;
    assert_int_equal(rp_prompt_create(&pa), RP_OK);
    assert_int_equal(rp_prompt_create(&pb), RP_OK);
    const char *ta = "Once upon a time, there was a little girl named Lily who had a red ball.";
    const char *tb = "Tom and Sue went to the beach. They built a big sand castle and saw a crab.";
    assert_int_equal(rp_prompt_add_text(pa, m, ta, strlen(ta)), RP_OK);
    assert_int_equal(rp_prompt_add_text(pb, m, tb, strlen(tb)), RP_OK);
    rp_gen_opts o = greedy(8);
    rp_gen_stats st;
    char out_a[256], out_b[256], again[256];
    size_t len;
    assert_int_equal(rp_seq_prefill(a, pa, &o, &st), RP_OK);   /* no generate: its prompt stays pending */
    assert_int_equal(rp_seq_prefill(b, pb, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(a, &o, out_a, sizeof out_a, &len, &st), RP_OK);
    assert_int_equal(rp_seq_generate(b, &o, out_b, sizeof out_b, &len, &st), RP_OK);
    assert_string_not_equal(out_a, out_b);
    rp_seq_reset(a);
    assert_int_equal(rp_seq_prefill(a, pa, &o, &st), RP_OK);
    assert_int_equal(st.reused_prefix, rp_prompt_n_tokens(pa) - 1);   /* cached when b prefilled */
    assert_int_equal(rp_seq_generate(a, &o, again, sizeof again, &len, &st), RP_OK);
    assert_string_equal(again, out_a);
    rp_prompt_free(pa);
    rp_prompt_free(pb);
    rp_seq_free(a);
    rp_seq_free(b);
    rp_engine_free(e);
    rp_model_free(m);
}

/* rp_seq_fork: a fork of a prefilled sequence generates what a fresh prefill of the same prompt generates with the
 * same seed, token for token, on every KV type; the source is unchanged; a fork of a sequence whose last generated
 * token awaits decoding goes on as the source does. */
static void test_fork(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const rp_kv_type types[] = {RP_KV_F16, RP_KV_F32, RP_KV_Q8_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        rp_engine_params ep = rp_engine_default_params();
        ep.n_threads = 1;
        ep.kv_type = types[ti];
        rp_engine *e = NULL;
        assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
        rp_seq *ref = NULL, *src = NULL, *a = NULL, *b = NULL;
        assert_int_equal(rp_seq_create(e, &ref), RP_OK);
        assert_int_equal(rp_seq_create(e, &src), RP_OK);
        assert_int_equal(rp_seq_create(e, &a), RP_OK);
        assert_int_equal(rp_seq_create(e, &b), RP_OK);
        rp_prompt *p = NULL;
        assert_int_equal(rp_prompt_create(&p), RP_OK);
        const char *t = "Once upon a time, there was a little girl named Lily who had a red ball.";
        assert_int_equal(rp_prompt_add_text(p, m, t, strlen(t)), RP_OK);
        const int32_t np = rp_prompt_n_tokens(p);
        rp_gen_opts o = rp_gen_default_opts();
        o.reuse = RP_REUSE_NONE;   /* every prefill computes the prompt: the reference is a plain prefill */
        o.persist = false;
        o.sampling.temp = 0.9f;
        o.max_tokens = 24;
        const int32_t nv = rp_model_describe(m).n_vocab;
        char want[2][512], got[512];
        rp_token want_tok[2][64];
        int32_t want_n[2];
        size_t len;
        rp_gen_stats st;
        for (int k = 0; k < 2; k++) {   /* the references: a fresh prefill per seed */
            o.sampling.seed = 100 + (uint64_t)k;
            assert_int_equal(rp_seq_prefill(ref, p, &o, &st), RP_OK);
            assert_int_equal(rp_seq_generate(ref, &o, want[k], sizeof want[k], &len, &st), RP_OK);
            want_n[k] = rp_seq_n_past(ref);
            assert_true(want_n[k] > np && want_n[k] - np <= 64);
            memcpy(want_tok[k], rp_seq_tokens(ref), sizeof(rp_token) * (size_t)want_n[k]);
        }
        assert_string_not_equal(want[0], want[1]);   /* the seeds differ: so do the choices */
        assert_int_equal(rp_seq_prefill(src, p, &o, &st), RP_OK);
        assert_int_equal(st.computed, np);
        assert_int_equal(rp_seq_fork(a, src), RP_OK);
        assert_int_equal(rp_seq_fork(b, src), RP_OK);
        assert_int_equal(rp_seq_n_past(a), np);
        assert_memory_equal(rp_seq_tokens(a), rp_seq_tokens(src), sizeof(rp_token) * (size_t)np);
        assert_non_null(rp_seq_logits(a));
        assert_memory_equal(rp_seq_logits(a), rp_seq_logits(src), sizeof(float) * (size_t)nv);
        rp_seq *forks[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            o.sampling.seed = 100 + (uint64_t)k;
            assert_int_equal(rp_seq_generate(forks[k], &o, got, sizeof got, &len, &st), RP_OK);
            assert_int_equal(st.prompt_tokens, 0);   /* no prefill figures: the prompt was computed on src */
            assert_string_equal(got, want[k]);
            assert_int_equal(rp_seq_n_past(forks[k]), want_n[k]);
            assert_memory_equal(rp_seq_tokens(forks[k]), want_tok[k], sizeof(rp_token) * (size_t)want_n[k]);
        }
        o.sampling.seed = 100;   /* the source is unchanged by its forks */
        assert_int_equal(rp_seq_generate(src, &o, got, sizeof got, &len, &st), RP_OK);
        assert_string_equal(got, want[0]);
        /* a's last generated token awaits decoding (max_tokens ended it): a fork of it goes on as a does */
        o.reseed = true;
        o.sampling.seed = 5;
        o.max_tokens = 8;
        assert_int_equal(rp_seq_fork(b, a), RP_OK);
        assert_null(rp_seq_logits(b));
        char ga[512], gb[512];
        assert_int_equal(rp_seq_generate(a, &o, ga, sizeof ga, &len, &st), RP_OK);
        assert_int_equal(rp_seq_generate(b, &o, gb, sizeof gb, &len, &st), RP_OK);
        assert_string_equal(ga, gb);
        assert_int_equal(rp_seq_n_past(a), rp_seq_n_past(b));
        assert_memory_equal(rp_seq_tokens(a), rp_seq_tokens(b), sizeof(rp_token) * (size_t)rp_seq_n_past(a));
        /* errors */
        assert_int_equal(rp_seq_fork(a, a), RP_ERR_INVALID_ARG);
        assert_int_equal(rp_seq_fork(NULL, a), RP_ERR_INVALID_ARG);
        assert_int_equal(rp_seq_fork(a, NULL), RP_ERR_INVALID_ARG);
        rp_engine *e2 = NULL;
        rp_seq *other = NULL;
        assert_int_equal(rp_engine_create(m, &ep, &e2), RP_OK);
        assert_int_equal(rp_seq_create(e2, &other), RP_OK);
        assert_int_equal(rp_seq_fork(other, a), RP_ERR_INVALID_ARG);
        rp_seq_free(other);
        rp_engine_free(e2);
        rp_prompt_free(p);
        rp_seq_free(ref);
        rp_seq_free(src);
        rp_seq_free(a);
        rp_seq_free(b);
        rp_engine_free(e);
    }
    rp_model_free(m);
}

/* Separators cut chunks inside text, also where an SPM vocabulary tokenizes them otherwise than alone (its
 * dummy-prefix space: "\n\n" alone is [_ \n \n], after a word [\n \n]); a token's piece reports its whole length. */
static void test_separator_and_pieces(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *text = "Lily had a ball.\n\nTom had a dog.\n\nSue had a cake.";
    assert_int_equal(rp_prompt_add_text(p, m, text, strlen(text)), RP_OK);
    assert_int_equal(rp_prompt_n_bounds(p), 0);
    assert_int_equal(rp_prompt_split_at(p, m, "\n\n"), RP_OK);
    assert_int_equal(rp_prompt_n_bounds(p), 2);
    /* each boundary sits right after a "\n\n" */
    for (int32_t i = 0; i < 2; i++) {
        const int32_t b = rp_prompt_bounds(p)[i];
        char piece[16];
        const int32_t n = rp_token_to_piece(m, rp_prompt_tokens(p)[b - 1], false, piece, sizeof piece);
        assert_true(n >= 1 && piece[n - 1] == '\n');
    }
    /* a piece larger than the buffer: the length it needs, and the head of it */
    char full[64], head[2];
    rp_token tok = 0;
    int32_t need = 0;
    while (tok < rp_model_describe(m).n_vocab && (need = rp_token_to_piece(m, tok, false, full, sizeof full)) < 3) tok++;
    assert_true(need >= 3);
    assert_int_equal(rp_token_to_piece(m, tok, false, head, 1), need);
    assert_int_equal(head[0], full[0]);
    assert_int_equal(rp_token_to_piece(m, 1 << 30, false, full, sizeof full), 0);
    rp_prompt_free(p);
    rp_model_free(m);
}

/* ---- server support ---- */

typedef struct only_digits {
    const rp_model *m;
    int calls;
    int32_t n_hist_first;
} only_digits;

/* A logits processor allowing only tokens whose text is all digits (and end-of-generation). */
static void digits_only(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    only_digits *d = user;
    if (d->calls++ == 0) d->n_hist_first = n_hist;
    assert_non_null(hist);
    for (int32_t id = 0; id < n_vocab; id++) {
        char piece[64];
        const int32_t w = rp_token_to_piece(d->m, id, false, piece, (int32_t)sizeof piece);
        bool ok = w > 0 && w <= (int32_t)sizeof piece;
        for (int32_t k = 0; ok && k < w; k++) ok = piece[k] >= '0' && piece[k] <= '9';
        if (!ok) logits[id] = -INFINITY;
    }
}

/* The logits hook constrains what is sampled; reseed restarts the sampler on a continued sequence; the stats
 * name the last token (the end-of-generation one too); a sequence knows its exact head; KV bytes per token. */
static void test_server_support(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *prompt = "Once upon a time, there was a little girl named Lily.";
    assert_int_equal(rp_prompt_add_text(p, m, prompt, strlen(prompt)), RP_OK);
    const int32_t n = rp_prompt_n_tokens(p);
    /* without the hook the story goes on in words; with it, every sampled token is digits */
    rp_gen_opts o = greedy(12);
    rp_gen_stats st;
    char out[1024];
    size_t len = 0;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_n_exact(s), n);   /* computed from scratch: exact */
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_true(strpbrk(out, "abcdefghijklmnopqrstuvwxyz") != NULL);
    assert_int_equal(st.last_token, rp_seq_tokens(s)[rp_seq_n_past(s) - 1]);
    assert_int_equal(rp_seq_n_exact(s), rp_seq_n_past(s));   /* generated on exact KV: exact */
    only_digits d = {.m = m};
    o.on_logits = digits_only;
    o.logits_user = &d;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    print_message("  digits only: \"%s\" (%d calls)\n", out, d.calls);
    assert_true(d.calls >= 1);
    assert_int_equal(d.n_hist_first, n);   /* the first call sees the prompt */
    assert_true(len > 0);
    for (size_t i = 0; i < len; i++) assert_true((out[i] >= '0' && out[i] <= '9') || out[i] == ' ');
    /* reseed: the same seeded sampling on a continued sequence draws the same tokens again */
    rp_gen_opts t = rp_gen_default_opts();
    t.sampling.temp = 1.0f;
    t.sampling.seed = 42;
    t.max_tokens = 8;
    char a[512], b[512], c[512];
    assert_int_equal(rp_seq_prefill(s, p, &t, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &t, a, sizeof a, &len, &st), RP_OK);
    assert_int_equal(rp_seq_truncate(s, n), RP_OK);   /* back to the prompt, then a continued generation */
    assert_int_equal(rp_seq_generate(s, &t, b, sizeof b, &len, &st), RP_OK);
    assert_int_equal(rp_seq_truncate(s, n), RP_OK);
    t.reseed = true;
    assert_int_equal(rp_seq_generate(s, &t, c, sizeof c, &len, &st), RP_OK);
    print_message("  seeded: \"%s\" / continued: \"%s\" / reseeded: \"%s\"\n", a, b, c);
    assert_string_equal(c, a);
    assert_string_not_equal(b, a);
    /* an end-of-generation token: in the stats, not in the sequence */
    o = greedy(-1);
    o.on_logits = NULL;
    assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    if (st.stop == RP_STOP_EOG) {
        assert_true(rp_token_is_eog(m, st.last_token));
        assert_false(rp_token_is_eog(m, rp_seq_tokens(s)[rp_seq_n_past(s) - 1]));
    }
    /* truncating keeps the exact head within the sequence */
    assert_int_equal(rp_seq_truncate(s, 5), RP_OK);
    assert_int_equal(rp_seq_n_exact(s), 5);
    /* K and V of every layer: 2 x n_layer x n_head_kv x head_dim elements */
    const rp_model_desc md = rp_model_describe(m);
    assert_int_equal(rp_kv_bytes_per_token(m, RP_KV_F32), 2ull * md.n_layer * md.n_head_kv * md.head_dim * 4);
    assert_int_equal(rp_kv_bytes_per_token(m, RP_KV_F16), 2ull * md.n_layer * md.n_head_kv * md.head_dim * 2);
    assert_int_equal(rp_kv_bytes_per_token(NULL, RP_KV_F16), 0);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

/* Chat formats by name, rendering without a model, tool-call parsing, the streaming detokenizer. */
static void test_chat_formats_and_detokenizer(void **state) {
    (void)state;
    assert_string_equal(rp_chat_format_name(RP_CHAT_CHATML), "chatml");
    assert_string_equal(rp_chat_format_name(RP_CHAT_UNKNOWN), "unknown");
    assert_int_equal(rp_model_chat_format(NULL), RP_CHAT_UNKNOWN);
    const rp_chat_message msgs[] = {
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .tool_calls = "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                                            "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]"},
        {.role = "tool", .content = "sunny", .tool_call_id = "c1"},
    };
    char buf[2048];
    size_t len = 0;
    assert_int_equal(rp_chat_render_format(RP_CHAT_CHATML, msgs, 3, NULL, true, buf, sizeof buf, &len), RP_OK);
    assert_int_equal(strlen(buf), len);
    assert_non_null(strstr(buf, "<|im_start|>user\nWeather in Paris?<|im_end|>"));
    assert_non_null(strstr(buf, "\"get_weather\""));
    assert_non_null(strstr(buf, "Paris\"}"));
    const char *sunny = strstr(buf, "sunny");   /* the tool's result, then the assistant's header */
    assert_non_null(sunny);
    assert_non_null(strstr(sunny, "<|im_start|>assistant\n"));
    char small[8];
    assert_int_equal(rp_chat_render_format(RP_CHAT_CHATML, msgs, 3, NULL, true, small, sizeof small, &len), RP_ERR_FULL);
    assert_true(len > sizeof small);
    /* a reply with a call: parsed out of the content */
    const char *reply = "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, reply, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(calls[0].name, "get_weather");
    assert_non_null(strstr(calls[0].arguments, "Rome"));
    assert_string_equal(content, "Let me look.");
    rp_tool_calls_free(calls, n);
    free(content);
    /* the streaming detokenizer gives rp_detokenize's text, piece by piece */
    OPEN_MODEL(m);
    rp_token toks[128];
    int32_t nt = 0;
    const char *text = "Lily saw a big dog. \xe2\x80\x9cHello!\xe2\x80\x9d she said.";
    assert_int_equal(rp_tokenize(m, text, strlen(text), false, false, toks, 128, &nt), RP_OK);
    char whole[512], pieces[512];
    assert_int_equal(rp_detokenize(m, toks, nt, false, whole, sizeof whole, &len), RP_OK);
    rp_detokenizer *d = NULL;
    assert_int_equal(rp_detokenizer_create(m, false, true, &d), RP_OK);
    assert_true(rp_detokenizer_bound(d) > 0);
    size_t w = 0;
    for (int32_t i = 0; i < nt; i++) {
        const int32_t k = rp_detokenizer_push(d, toks[i], pieces + w, (int32_t)(sizeof pieces - w));
        assert_true(k >= 0);
        w += (size_t)k;
    }
    w += (size_t)rp_detokenizer_flush(d, pieces + w, (int32_t)(sizeof pieces - w));
    pieces[w] = 0;
    assert_string_equal(pieces, whole);
    assert_string_equal(pieces, text);
    rp_detokenizer_free(d);
    assert_int_equal(rp_detokenizer_create(NULL, false, true, &d), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_model_chat_format(m), RP_CHAT_LLAMA2);   /* stories: an SPM vocabulary without a template */
    rp_model_free(m);
}

/* Scheduler control: a kv limit demotes a waiting agent (restored on resume), suspend / truncate, the drafter
 * kind, the step's report. */
static void test_agents_control(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_agents_params ap = rp_agents_default_params();
    ap.n_threads = 1;
    ap.n_ctx = 256;
    ap.max_agents = 2;
    ap.kv_limit_mb = 1e-6;   /* any waiting agent's KV is over it */
    ap.drafter = RP_DRAFT_MODEL;   /* without a draft model: refused */
    rp_agents *a = NULL;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_ERR_INVALID_ARG);
    ap.drafter = RP_DRAFT_NGRAM;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_OK);
    rp_agent_id id;
    assert_int_equal(rp_agents_add(a, &id), RP_OK);
    const char *prompt = "Once upon a time, there was a dog";
    rp_token t[64];
    int32_t n = 0;
    assert_int_equal(rp_tokenize(m, prompt, strlen(prompt), true, false, t, 64, &n), RP_OK);
    rp_turn_opts to = rp_turn_default_opts();
    to.sampling.temp = 0;
    to.max_tokens = 8;
    to.wait_after = true;   /* the turn ends waiting for a "tool" */
    assert_int_equal(rp_agents_submit(a, id, t, n, &to), RP_OK);
    bool ran = false;
    assert_int_equal(rp_agents_step(a, &ran), RP_OK);
    rp_agents_step_info si;
    rp_agents_last_step(a, &si);
    assert_true(ran && si.ran);
    assert_int_equal(si.prefill_rows, n);
    assert_int_equal(rp_agents_run(a), RP_OK);
    for (int i = 0; i < 4; i++) assert_int_equal(rp_agents_step(a, &ran), RP_OK);   /* demotion at a step boundary */
    rp_agent_info info;
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_int_equal(info.state, RP_AGENT_WAITING);
    rp_agents_stats as;
    rp_agents_stats_get(a, &as);
    print_message("  waiting agent: demoted %d, %llu demotions, kv %llu B\n", info.demoted,
                  (unsigned long long)as.demotions, (unsigned long long)as.kv_bytes);
    assert_true(info.demoted && info.demotions == 1);
    assert_true(as.demotions == 1 && as.demoted == 1);
    /* resumed: restored, and the turn goes on */
    to.wait_after = false;
    assert_int_equal(rp_agents_resume(a, id, t, 2, &to), RP_OK);
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_int_equal(info.state, RP_AGENT_IDLE);
    assert_true(info.restores == 1 && !info.demoted);
    assert_int_equal(info.n_tokens, n + 8 + 2 + 8);
    /* truncate back to the prompt; a suspended turn waits */
    assert_int_equal(rp_agents_truncate(a, id, n), RP_OK);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_int_equal(info.n_tokens, n);
    assert_int_equal(rp_agents_submit(a, id, t, 1, &to), RP_OK);
    assert_int_equal(rp_agents_suspend(a, id), RP_OK);
    rp_agents_wake(a);
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_int_equal(info.state, RP_AGENT_WAITING);
    assert_false(rp_agents_wait(a, 0.001));   /* nothing happened since */
    rp_agents_free(a);
    rp_model_free(m);
}

/* rp_agents_fork: an agent forked from another's computed prompt (all but its last token) and given that token
 * generates greedily what the source generated from the whole prompt, without computing the prompt again (one
 * prefill row); a demoted source is restored for it; the errors (into itself, into a busy or non-idle agent, more
 * tokens than computed). */
static void test_agents_fork(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_agents_params ap = rp_agents_default_params();
    ap.n_threads = 1;
    ap.n_ctx = 256;
    ap.max_agents = 3;
    ap.kv_limit_mb = 1e-6;   /* a waiting agent is demoted at the next step */
    rp_agents *a = NULL;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_OK);
    rp_agent_id src, dst, dst2;
    assert_int_equal(rp_agents_add(a, &src), RP_OK);
    assert_int_equal(rp_agents_add(a, &dst), RP_OK);
    assert_int_equal(rp_agents_add(a, &dst2), RP_OK);
    const char *prompt = "Once upon a time, there was a little girl named Lily who had a red ball";
    rp_token t[64], want[128], got[128];
    int32_t n = 0, nw = 0, ng = 0;
    assert_int_equal(rp_tokenize(m, prompt, strlen(prompt), true, false, t, 64, &n), RP_OK);
    rp_turn_opts to = rp_turn_default_opts();
    to.sampling.temp = 0;
    to.max_tokens = 16;
    to.wait_after = true;
    assert_int_equal(rp_agents_submit(a, src, t, n, &to), RP_OK);
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_tokens(a, src, 0, want, 128, &nw), RP_OK);
    assert_int_equal(nw, n + 16);
    bool ran = false;
    for (int i = 0; i < 3; i++) assert_int_equal(rp_agents_step(a, &ran), RP_OK);
    rp_agent_info info;
    assert_int_equal(rp_agents_info(a, src, &info), RP_OK);
    assert_true(info.state == RP_AGENT_WAITING && info.demoted);
    /* errors first: nothing changes */
    assert_int_equal(rp_agents_fork(a, src, src, n - 1), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_agents_fork(a, dst, src, n + 40), RP_ERR_RANGE);
    assert_int_equal(rp_agents_fork(a, src, dst, 0), RP_ERR_INVALID_ARG);   /* src is waiting, not idle */
    /* the fork: the prompt but its last token, then that token as the turn */
    assert_int_equal(rp_agents_fork(a, dst, src, n - 1), RP_OK);
    assert_int_equal(rp_agents_info(a, dst, &info), RP_OK);
    assert_true(info.n_tokens == n - 1 && info.n_cached == n - 1 && info.state == RP_AGENT_IDLE);
    to.wait_after = false;
    assert_int_equal(rp_agents_submit(a, dst, t + n - 1, 1, &to), RP_OK);
    assert_int_equal(rp_agents_step(a, &ran), RP_OK);
    rp_agents_step_info si;
    rp_agents_last_step(a, &si);
    assert_int_equal(si.prefill_rows, 1);   /* only the last prompt token was computed */
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_tokens(a, dst, 0, got, 128, &ng), RP_OK);
    assert_int_equal(ng, nw);
    assert_memory_equal(got, want, sizeof(rp_token) * (size_t)nw);
    /* a fork of the fork's whole history goes on from there; what dst2 held is dropped */
    assert_int_equal(rp_agents_submit(a, dst2, t, 3, &to), RP_OK);
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_fork(a, dst2, dst, ng - 1), RP_OK);
    assert_int_equal(rp_agents_info(a, dst2, &info), RP_OK);
    assert_int_equal(info.n_tokens, ng - 1);
    rp_agents_free(a);
    rp_model_free(m);
}

/* The draft lengths and the self drafter's layers reach the scheduler, and each step's figures come back per
 * agent: what it did (prefill, then verify), its draft and accepted tokens, the step's index; bad lengths refused. */
static void test_agents_draft_params(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_agents_params ap = rp_agents_default_params();
    assert_true(ap.draft_budget == 16 && ap.draft_min == 1 && ap.draft_fixed == 16 && ap.draft_max == 16);
    assert_true(ap.self_layers == 2 && ap.prefill_share > 0.2f && ap.prefill_share < 0.3f);
    ap.n_threads = 1;
    ap.n_ctx = 256;
    ap.max_agents = 1;
    ap.policy = RP_AGENTS_BATCH_SD;
    ap.drafter = RP_DRAFT_SELF;
    ap.self_layers = 1;
    ap.draft_fixed = 3;
    ap.draft_max = RP_AGENTS_MAX_DRAFT + 1;
    rp_agents *a = NULL;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_ERR_INVALID_ARG);   /* over the cap */
    assert_non_null(strstr(rp_last_error(), "draft_max"));
    ap.draft_max = 3;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_OK);
    rp_agent_id id;
    assert_int_equal(rp_agents_add(a, &id), RP_OK);
    const char *prompt = "Once upon a time, there was a dog";
    rp_token t[64];
    int32_t n = 0;
    assert_int_equal(rp_tokenize(m, prompt, strlen(prompt), true, false, t, 64, &n), RP_OK);
    rp_turn_opts to = rp_turn_default_opts();
    to.sampling.temp = 0;
    to.max_tokens = 12;
    assert_int_equal(rp_agents_submit(a, id, t, n, &to), RP_OK);
    rp_agents_step_info si;
    rp_agent_info info;
    bool ran = false;
    assert_int_equal(rp_agents_step(a, &ran), RP_OK);
    rp_agents_last_step(a, &si);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_true(ran && info.last_step == si.step);
    assert_int_equal(info.last_role, RP_AGENT_ROLE_PREFILL);
    assert_int_equal((int)info.prompt_tokens, n);
    int64_t prev = si.step;
    assert_int_equal(rp_agents_step(a, &ran), RP_OK);
    rp_agents_last_step(a, &si);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    print_message("  step %lld: role %d, draft %d, accepted %d, hal %.2f\n", (long long)si.step, (int)info.last_role,
                  info.last_draft, info.last_accepted, info.hal);
    assert_true(ran && si.step == prev + 1 && info.last_step == si.step);
    assert_int_equal(info.last_role, RP_AGENT_ROLE_VERIFY);
    assert_int_equal(info.last_draft, 3);   /* draft_fixed, under draft_max */
    assert_int_equal(si.drafted, 3);
    assert_true(info.last_accepted >= 0 && info.last_accepted <= 3 && info.last_accepted == si.accepted);
    assert_true(info.hal > 0);
    assert_int_equal(rp_agents_run(a), RP_OK);
    assert_int_equal(rp_agents_info(a, id, &info), RP_OK);
    assert_int_equal(info.state, RP_AGENT_IDLE);
    assert_true(info.n_turns == 1 && (int)info.gen_tokens == info.generated && info.generated > 0);
    rp_agents_stats as;
    rp_agents_stats_get(a, &as);
    assert_true(as.forwards >= 2 && as.forwards <= as.steps);
    rp_agents_free(a);
    rp_model_free(m);
}

/* The reuse hand-off: an agent's prompt cached after its turn fills a fresh agent's in the same namespace, never
 * another's; the filled agent generates what an unfilled one does (greedy). */
static void test_agents_reuse(void **state) {
    (void)state;
    OPEN_MODEL(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 256;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    rp_agents_params ap = rp_agents_default_params();
    ap.n_threads = 1;
    ap.n_ctx = 256;
    ap.max_agents = 4;
    ap.policy = RP_AGENTS_BATCH_AR;
    rp_agents *a = NULL;
    assert_int_equal(rp_agents_create(m, &ap, &a), RP_OK);
    rp_prompt *p = NULL;
    assert_int_equal(rp_prompt_create(&p), RP_OK);
    const char *doc = "Lily had a red ball and she liked to play with it in the park every day after lunch. ";
    assert_int_equal(rp_prompt_add_text(p, m, doc, strlen(doc)), RP_OK);
    assert_int_equal(rp_prompt_add_text(p, m, "Who is Lily?", 12), RP_OK);
    rp_turn_opts to = rp_turn_default_opts();
    to.sampling.temp = 0;
    to.max_tokens = 8;
    rp_gen_opts ro = rp_gen_default_opts();
    ro.cache_namespace = 7;
    rp_agent_id id[3];
    rp_agents_fill f[3];
    rp_token out[3][64];
    int32_t n_out[3];
    const uint64_t ns[3] = {7, 7, 8};
    for (int i = 0; i < 3; i++) {
        ro.cache_namespace = ns[i];
        assert_int_equal(rp_agents_add(a, &id[i]), RP_OK);
        assert_int_equal(rp_agents_submit_reuse(a, id[i], e, p, &ro, &to, &f[i]), RP_OK);
        assert_int_equal(rp_agents_run(a), RP_OK);
        if (f[i].commit_after)
            assert_int_equal(rp_agents_commit_prompt(a, id[i], e, p, &ro, f[i].commit_exact), RP_OK);
        assert_int_equal(rp_agents_tokens(a, id[i], 0, out[i], 64, &n_out[i]), RP_OK);
        print_message("  agent %d (namespace %llu): filled %d, reused prefix %d, commit after %d\n", i,
                      (unsigned long long)ns[i], f[i].filled, f[i].reused_prefix, f[i].commit_after);
    }
    assert_int_equal(f[0].filled, 0);   /* nothing cached yet: the batch computed the prompt, cached after */
    assert_true(f[0].commit_after);
    assert_true(f[1].filled > 0 && f[1].reused_prefix > 0 && f[1].reused_prefix == f[1].reused_prefix_exact);
    assert_int_equal(f[2].filled, 0);   /* another namespace: nothing of namespace 7 */
    assert_int_equal(f[2].reused_prefix + f[2].reused_nonprefix, 0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(n_out[i], n_out[0]);
        assert_memory_equal(out[i], out[0], sizeof out[0][0] * (size_t)n_out[0]);
    }
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);
    assert_true(es.inserts > 0);
    rp_prompt_free(p);
    rp_agents_free(a);
    rp_engine_free(e);
    rp_model_free(m);
}

static void test_system(void **state) {
    (void)state;
    char line[512];
    assert_true(rp_system_info(line, sizeof line) > 0);
    assert_non_null(strstr(line, "active"));
    assert_int_equal(rp_cpu_select("warp-drive"), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_cpu_select("scalar"), RP_OK);
    assert_string_equal(rp_cpu_active(), "scalar");
    assert_int_equal(rp_cpu_select("auto"), RP_OK);
    assert_string_not_equal(rp_version(), "");
}

/* Long contexts: KV estimates, the refusal before allocating, and the context shift. */
static void test_long_context(void **state) {
    (void)state;
    OPEN_MODEL(m);
    const rp_model_desc md = rp_model_describe(m);
    uint64_t b = 0;
    assert_int_equal(rp_kv_estimate(m, 1000, RP_KV_F32, &b), RP_OK);
    assert_int_equal(b, 2ull * (uint64_t)md.n_layer * 1000u * (uint64_t)md.n_head_kv * (uint64_t)md.head_dim * 4u);
    assert_int_equal(rp_kv_estimate(m, 1000, RP_KV_F16, &b), RP_OK);
    assert_int_equal(b, 2ull * (uint64_t)md.n_layer * 1000u * (uint64_t)md.n_head_kv * (uint64_t)md.head_dim * 2u);
    assert_int_equal(rp_kv_estimate(m, 0, RP_KV_F16, &b), RP_ERR_RANGE);
    assert_true(rp_system_mem_available() > 0);   /* Linux: MemAvailable */
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = 1;
    ep.reuse = RP_REUSE_NONE;
    ep.n_seq_max = 1 << 30;   /* a billion full sequences do not fit anywhere */
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_ERR_NOMEM);
    assert_null(e);
    print_message("  refused: %s\n", rp_last_error());
    assert_non_null(strstr(rp_last_error(), "KV cache"));
    assert_non_null(strstr(rp_last_error(), "available"));
    ep.n_seq_max = 1;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
    assert_int_equal(rp_kv_estimate(m, rp_engine_n_ctx(e), RP_KV_F16, &b), RP_OK);
    assert_int_equal(rp_engine_kv_bytes(e), b);
    rp_seq *s = NULL;
    assert_int_equal(rp_seq_create(e, &s), RP_OK);
    rp_token t[60];
    for (int i = 0; i < 60; i++) t[i] = 1 + (i * 13 + 7) % (md.n_vocab - 1);
    assert_int_equal(rp_seq_feed(s, t, 60), RP_OK);
    assert_int_equal(rp_seq_shift(s, 10, 0), RP_ERR_RANGE);
    assert_int_equal(rp_seq_shift(s, 50, 11), RP_ERR_RANGE);
    assert_int_equal(rp_seq_shift(s, 10, 20), RP_OK);
    assert_int_equal(rp_seq_n_past(s), 40);
    const rp_token *h = rp_seq_tokens(s);
    assert_memory_equal(h, t, sizeof *t * 10);
    assert_memory_equal(h + 10, t + 30, sizeof *t * 30);
    assert_null(rp_seq_logits(s));   /* the last token is decoded again by the next generate */
    rp_gen_opts o = greedy(6);
    char out[256];
    size_t len = 0;
    rp_gen_stats st;
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_int_equal(st.generated, 6);
    assert_int_equal(rp_seq_n_past(s), 46);   /* 40 + 6, the last one pending */
    /* the pending token has no cell yet: a shift may not drop it, but moves it down */
    assert_int_equal(rp_seq_shift(s, 40, 6), RP_ERR_RANGE);
    assert_int_equal(rp_seq_shift(s, 0, 5), RP_OK);
    assert_int_equal(rp_seq_n_past(s), 41);
    assert_int_equal(rp_seq_generate(s, &o, out, sizeof out, &len, &st), RP_OK);
    assert_int_equal(rp_seq_n_past(s), 47);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_system),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_model_tokenizer_chat),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_limits_and_errors),
        cmocka_unit_test(test_segments_and_namespaces),
        cmocka_unit_test(test_continue_and_truncate),
        cmocka_unit_test(test_static_and_stats_json),
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_agents),
        cmocka_unit_test(test_two_sequences),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_separator_and_pieces),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_server_support),
        cmocka_unit_test(test_chat_formats_and_detokenizer),
        cmocka_unit_test(test_agents_control),
        cmocka_unit_test(test_agents_fork),
        cmocka_unit_test(test_agents_draft_params),
        cmocka_unit_test(test_agents_reuse),
    };
    return rp_test_main(tests, NULL, NULL);
}
