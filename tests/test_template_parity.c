/* test_template_parity.c — chat templates render byte-identically to Python jinja2 (set up as HF transformers
 * does, tests/template_ref.py) on a fixed set of conversations (tests/data/chat_conversations.json: system
 * prompts, multi-turn, tools, tool calls and results, thinking history), with and without the generation
 * prompt, thinking on and off, and every message shape the renderer retries with. Templates: the real ones in
 * ../shared/models/vocab (Llama 3, Qwen3: tokenizer.chat_template of the vocab GGUFs) and
 * ../shared/models/templates (DeepSeek-R1-distill, Phi-4-mini), and the ones written for this test in
 * tests/data/templates (the constructs of Gemma 2/3, Mistral, Qwen2.5, Phi-3 and SmolLM templates). A render
 * that fails in Python must fail here too; any byte difference fails the test. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "template/template.h"
#include "testutil.h"
#include "tokenizer/chat_template.h"

#ifndef RP_SOURCE_DIR
#define RP_SOURCE_DIR "."
#endif

#define NOW 1721952000   /* 2024-07-26 00:00 UTC: strftime_now on both sides */

static const char *g_python;   /* an interpreter that imports jinja2, or NULL */

static const char *find_python(void) {
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    const char *env = getenv("RP_PYTHON");
    if (env && *env) return env;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import jinja2' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

typedef struct tmpl_case {
    const char *name;
    char path[1024];      /* the template's text as a file */
    const char *bos, *eos;
    rp_chat_tmpl *t;
} tmpl_case;

/* An OpenAI-shaped conversation as rp_chat_msg (pointers into the JSON, which outlives them). */
typedef struct conv {
    const char *name;
    rp_chat_msg *msgs;
    rp_tool_call **calls;
    size_t n;
    bool tools;
} conv;

/* case v: the generation prompt is !(v & 1); enable_thinking off, on, or not given (-1: undefined in the context) */
#define THINK(v) ((v) >> 1 == 2 ? -1 : (v) >> 1)

static void conv_load(const json_t *j, conv *c) {
    c->name = json_string_value(json_object_get(j, "name"));
    c->tools = json_is_true(json_object_get(j, "tools"));
    const json_t *ms = json_object_get(j, "messages");
    c->n = json_array_size(ms);
    c->msgs = calloc(c->n, sizeof *c->msgs);
    c->calls = calloc(c->n, sizeof *c->calls);
    assert_non_null(c->msgs);
    for (size_t i = 0; i < c->n; i++) {
        const json_t *m = json_array_get(ms, i), *tc = json_object_get(m, "tool_calls");
        rp_chat_msg *cm = &c->msgs[i];
        cm->role = json_string_value(json_object_get(m, "role"));
        cm->content = json_string_value(json_object_get(m, "content"));
        cm->tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
        cm->name = json_string_value(json_object_get(m, "name"));
        cm->n_tool_calls = json_array_size(tc);
        if (cm->n_tool_calls) {
            c->calls[i] = calloc(cm->n_tool_calls, sizeof **c->calls);
            for (size_t k = 0; k < cm->n_tool_calls; k++) {
                const json_t *call = json_array_get(tc, k), *fn = json_object_get(call, "function");
                c->calls[i][k].id = (char *)json_string_value(json_object_get(call, "id"));
                c->calls[i][k].name = (char *)json_string_value(json_object_get(fn, "name"));
                c->calls[i][k].arguments = (char *)json_string_value(json_object_get(fn, "arguments"));
            }
            cm->tool_calls = c->calls[i];
        }
    }
}

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n; i++) free(c->calls[i]);
    free(c->calls);
    free(c->msgs);
}

static bool write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The GGUF's tokenizer.chat_template written to a file (Python reads the same bytes). */
static bool gguf_template(const char *gguf_path, const char *out_path) {
    rp_gguf *g = NULL;
    if (rp_gguf_open(gguf_path, &g) != RP_OK) return false;
    rp_str s;
    bool ok = rp_gguf_get_str(g, "tokenizer.chat_template", &s) == RP_OK && write_file(out_path, s.ptr, s.len);
    rp_gguf_close(g);
    return ok;
}

static void show_diff(const char *id, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    print_message("MISMATCH %s at byte %zu\n  python: %.120s\n  C     : %.120s\n", id, i, want + from, got + from);
}

/* Renders every case of the given templates on both sides and compares. */
static void run_parity(tmpl_case *tc, size_t n_tmpl) {
    if (!g_python) RP_SKIP("no python3 with jinja2 (apt-get install python3-jinja2, or set RP_PYTHON)\n");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/chat_conversations.json", RP_SOURCE_DIR);
    json_error_t je;
    json_t *data = json_load_file(path, 0, &je);
    if (!data) print_message("%s: %s\n", path, je.text);
    assert_non_null(data);
    const json_t *tools = json_object_get(data, "tools"), *convs = json_object_get(data, "conversations");
    size_t n_conv = json_array_size(convs);
    conv *cv = calloc(n_conv, sizeof *cv);
    for (size_t i = 0; i < n_conv; i++) conv_load(json_array_get(convs, i), &cv[i]);

    /* every case: template x conversation x (generation prompt, thinking) x message shape */
    json_t *manifest = json_pack("{s:I, s:[]}", "now", (json_int_t)NOW, "cases");
    json_t *cases = json_object_get(manifest, "cases");
    for (size_t t = 0; t < n_tmpl; t++)
        for (size_t c = 0; c < n_conv; c++)
            for (int v = 0; v < 6; v++)   /* generation prompt (v & 1) x thinking (v >> 1: off, on, not given) */
                for (int shape = 0; shape < 8; shape++) {
                    if (!rp_chat_shape_applies(cv[c].msgs, cv[c].n, shape)) continue;
                    rp_chat_opts o = {.add_generation_prompt = !(v & 1), .enable_thinking = THINK(v),
                                      .bos_text = tc[t].bos, .eos_text = tc[t].eos};
                    json_t *ctx = rp_chat_context(cv[c].msgs, cv[c].n, &o, cv[c].tools ? tools : NULL, shape);
                    assert_non_null(ctx);
                    char id[256];
                    snprintf(id, sizeof id, "%s/%s/agp=%d,think=%d/shape=%d", tc[t].name, cv[c].name, !(v & 1), THINK(v), shape);
                    json_array_append_new(cases, json_pack("{s:s, s:s, s:o}", "id", id, "template", tc[t].path, "context", ctx));
                }
    char mpath[1024], opath[1024], cmd[3200];
    snprintf(mpath, sizeof mpath, "%s/parity_manifest.json", rp_test_tmpdir());
    snprintf(opath, sizeof opath, "%s/parity_out.json", rp_test_tmpdir());
    assert_int_equal(json_dump_file(manifest, mpath, JSON_ENSURE_ASCII), 0);
    snprintf(cmd, sizeof cmd, "%s %s/tests/template_ref.py %s %s", g_python, RP_SOURCE_DIR, mpath, opath);
    int rc = system(cmd);
    if (rc != 0) print_message("reference renderer failed: %s (status %d)\n", cmd, rc);
    assert_int_equal(rc, 0);
    json_t *ref = json_load_file(opath, 0, &je);
    assert_non_null(ref);

    size_t bad = 0;
    size_t k = 0;
    for (size_t t = 0; t < n_tmpl; t++) {
        size_t same = 0, both_err = 0, prod_ok = 0;
        char first_err[200] = "";
        rp_tmpl *tm = NULL;
        size_t tlen;
        char *src = rp_test_read_file(tc[t].path, &tlen);
        assert_non_null(src);
        char compile_err[600] = "";
        if (rp_tmpl_compile(src, tlen, &tm) != RP_OK) {   /* every case of it then fails here */
            snprintf(compile_err, sizeof compile_err, "%s", rp_last_error());
            print_message("%s: %s\n", tc[t].name, compile_err);
        }
        free(src);
        for (size_t c = 0; c < n_conv; c++)
            for (int v = 0; v < 6; v++) {
                const char *first_ok = NULL;   /* Python's output for the first shape it accepts */
                for (int shape = 0; shape < 8; shape++) {
                    char id[256];
                    snprintf(id, sizeof id, "%s/%s/agp=%d,think=%d/shape=%d", tc[t].name, cv[c].name, !(v & 1), THINK(v), shape);
                    const json_t *r = json_object_get(ref, id);
                    if (!r) continue;
                    const json_t *cs = json_array_get(cases, k++);
                    assert_string_equal(json_string_value(json_object_get(cs, "id")), id);
                    char *out = NULL;
                    size_t len = 0;
                    rp_tmpl_opts to = {.now = NOW};
                    rp_status st = tm ? rp_tmpl_render(tm, json_object_get(cs, "context"), &to, &out, &len)
                                      : rp_errorf(RP_ERR_FORMAT, "%s", compile_err);
                    const bool py_ok = json_is_true(json_object_get(r, "ok"));
                    const char *want = json_string_value(json_object_get(r, py_ok ? "out" : "error"));
                    if (py_ok && !first_ok) first_ok = want;
                    if (py_ok && st == RP_OK && strlen(want) == len && memcmp(want, out, len) == 0) {
                        same++;
                    } else if (!py_ok && st != RP_OK) {
                        both_err++;
                        if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", want);
                    } else {
                        bad++;
                        if (py_ok && st == RP_OK) show_diff(id, want, out);
                        else print_message("MISMATCH %s: python %s, C %s\n", id, py_ok ? "rendered" : want,
                                           st == RP_OK ? "rendered" : rp_last_error());
                    }
                    free(out);
                }
                /* the production path (rp_chat_tmpl_render: the shapes in turn) gives Python's first success */
                if (first_ok && tc[t].t) {
                    rp_chat_opts o = {.add_generation_prompt = !(v & 1), .enable_thinking = THINK(v),
                                      .bos_text = tc[t].bos, .eos_text = tc[t].eos,
                                      .now = NOW};
                    char *tj = cv[c].tools ? json_dumps(tools, 0) : NULL;
                    o.tools_json = tj;
                    char *out = NULL;
                    rp_status st = rp_chat_tmpl_render(tc[t].t, cv[c].msgs, cv[c].n, &o, &out);
                    if (st == RP_OK && !strcmp(out, first_ok)) prod_ok++;
                    else {
                        bad++;
                        print_message("MISMATCH %s/%s (rp_chat_tmpl_render): %s\n", tc[t].name, cv[c].name,
                                      st == RP_OK ? "different text" : rp_last_error());
                    }
                    free(out);
                    free(tj);
                }
            }
        rp_tmpl_free(tm);
        print_message("parity: %-28s %3zu renders identical to jinja2, %3zu fail on both sides%s%s%s; "
                      "%zu via rp_chat_tmpl_render\n", tc[t].name, same, both_err, first_err[0] ? " (e.g. \"" : "",
                      first_err, first_err[0] ? "\")" : "", prod_ok);
        if (!getenv("RP_TEMPLATE_PARITY_EXTRA")) assert_true(same > 0);   /* a template that only ever fails proves nothing */
    }
    assert_int_equal(bad, 0);
    json_decref(ref);
    json_decref(manifest);
    for (size_t i = 0; i < n_conv; i++) conv_free(&cv[i]);
    free(cv);
    json_decref(data);
}

static void free_cases(tmpl_case *tc, size_t n) {
    for (size_t i = 0; i < n; i++) rp_chat_tmpl_free(tc[i].t);
}

static void open_case(tmpl_case *c) {
    size_t n;
    char *src = rp_test_read_file(c->path, &n);
    assert_non_null(src);
    if (rp_chat_tmpl_from_source(src, n, c->name, &c->t) != RP_OK) print_message("%s: %s\n", c->name, rp_last_error());
    free(src);
}

/* The real templates: Llama 3 and Qwen3 from the vocab GGUFs, DeepSeek-R1-distill and Phi-4-mini files. */
static void test_real_templates(void **state) {
    (void)state;
    static const struct { const char *name, *rel, *bos, *eos; bool gguf; } real[] = {
        {"llama3 (vocab gguf)", "models/vocab/llama3-bpe.vocab.gguf", "<|begin_of_text|>", "<|end_of_text|>", true},
        {"qwen3 (vocab gguf)", "models/vocab/qwen3-bpe.vocab.gguf", "<|endoftext|>", "<|im_end|>", true},
        {"deepseek-r1-distill-qwen", "models/templates/deepseek-r1-distill-qwen.jinja", "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
         "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", false},
        {"phi-4-mini-instruct", "models/templates/phi-4-mini-instruct.jinja", "<|endoftext|>", "<|endoftext|>", false},
    };
    tmpl_case tc[4];
    memset(tc, 0, sizeof tc);
    for (size_t i = 0; i < 4; i++) {
        const char *p = rp_test_shared(real[i].rel);
        RP_REQUIRE_SHARED(p, real[i].rel);
        tc[i].name = real[i].name;
        tc[i].bos = real[i].bos;
        tc[i].eos = real[i].eos;
        if (real[i].gguf) {
            snprintf(tc[i].path, sizeof tc[i].path, "%s/real%zu.jinja", rp_test_tmpdir(), i);
            assert_true(gguf_template(p, tc[i].path));
        } else {
            snprintf(tc[i].path, sizeof tc[i].path, "%s", p);
        }
        open_case(&tc[i]);
        assert_non_null(tc[i].t);
    }
    run_parity(tc, 4);
    free_cases(tc, 4);
}

/* Templates written for this test (tests/data/templates). */
static void test_written_templates(void **state) {
    (void)state;
    static const char *const names[] = {"gemma-style", "gemma2-style", "mistral-style", "qwen25-style", "phi3-style",
                                        "smollm-style", "constructs"};
    enum { N = sizeof names / sizeof names[0] };
    tmpl_case tc[N];
    memset(tc, 0, sizeof tc);
    for (size_t i = 0; i < N; i++) {
        tc[i].name = names[i];
        tc[i].bos = "<s>";
        tc[i].eos = "</s>";
        snprintf(tc[i].path, sizeof tc[i].path, "%s/tests/data/templates/%s.jinja", RP_SOURCE_DIR, names[i]);
        open_case(&tc[i]);
        assert_non_null(tc[i].t);
    }
    run_parity(tc, N);
    free_cases(tc, N);
}

/* Any other templates: RP_TEMPLATE_PARITY_EXTRA="a.jinja:b.jinja" (e.g. llama.cpp's models/templates/). */
static void test_extra_templates(void **state) {
    (void)state;
    const char *env = getenv("RP_TEMPLATE_PARITY_EXTRA");
    if (!env || !*env) RP_SKIP("RP_TEMPLATE_PARITY_EXTRA not set (a ':'-separated list of template files)\n");
    enum { MAX = 64 };
    tmpl_case *tc = calloc(MAX, sizeof *tc);
    char *list = strdup(env), *save = NULL;
    size_t n = 0;
    for (char *p = strtok_r(list, ":", &save); p && n < MAX; p = strtok_r(NULL, ":", &save)) {
        tc[n].name = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        tc[n].bos = "<s>";
        tc[n].eos = "</s>";
        snprintf(tc[n].path, sizeof tc[n].path, "%s", p);
        open_case(&tc[n]);   /* a template the renderer refuses still gets compared render by render */
        n++;
    }
    run_parity(tc, n);
    free_cases(tc, n);
    free(tc);
    free(list);
}

int main(void) {
    g_python = find_python();
    if (!g_python) fprintf(stderr, "SKIP: no python3 that imports jinja2 (apt-get install python3-jinja2, or set RP_PYTHON)\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
        cmocka_unit_test(test_written_templates),
        cmocka_unit_test(test_extra_templates),
    };
    return rp_test_main(tests, NULL, NULL);
}
