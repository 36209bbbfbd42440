/* test_workload.c — doc QA / chat workloads of `bench reuse`: top-k retrieval over every chunk, idf, embeddings, --data. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "model/model.h"
#include "tokenizer/chat.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "workload.h"
#include "retrieve_embed.h"
#include "model/synth.h"

#define LINE 64   /* characters per hand-made chunk (newline included) = --doc-len */

static void expect_order(const int *got, int n_got, const int *want, int n_want) {
    assert_int_equal(n_got, n_want);
    for (int i = 0; i < n_want; i++)
        if (got[i] != want[i]) fail_msg("retrieved[%d] = %d, want %d", i, got[i], want[i]);
}

static void test_retrieve_keywords(void **state) {
    (void)state;
    /* the best chunks sit late in the list: retrieval must look at all of them */
    const char *c[12];
    for (int i = 0; i < 12; i++) c[i] = "nothing relevant here at all";
    c[10] = "The violinist played Brandenburg concertos in Leipzig";
    c[4] = "Brandenburg concertos, all six";
    c[1] = "Which one? nobody knows";
    c[7] = "a night in Leipzig";
    int out[12];
    const int want[4] = {10, 4, 1, 7};   /* 3 words, 2 words, then 1 word each: the earlier chunk first */
    int n = rp_retrieve("Which violinist played the Brandenburg concertos in Leipzig?", c, 12, 4, NULL, out);
    expect_order(out, n, want, 4);
    /* k larger than the list: every chunk, ranked */
    assert_int_equal(rp_retrieve("Leipzig", c, 3, 6, NULL, out), 3);
    /* idf: a word in one chunk outweighs a word in four */
    const char *d[5] = {"common words", "a rare word", "common again", "common still", "common too"};
    const int want_idf[2] = {1, 0};
    n = rp_retrieve("common rare", d, 5, 2, NULL, out);
    expect_order(out, n, want_idf, 2);
}

static void test_retrieve_embeddings(void **state) {
    (void)state;
    const char *c[4] = {"alpha", "beta", "gamma", "delta"};
    json_t *emb = json_pack("{s:[f,f,f], s:[f,f,f], s:[f,f,f], s:[f,f,f], s:[f,f,f]}", "question alpha", 1.0, 0.0, 0.0,
                            "alpha", 0.0, 1.0, 0.0, "beta", 0.9, 0.1, 0.0, "gamma", 0.5, 0.5, 0.0, "delta", -1.0, 0.0, 0.0);
    assert_non_null(emb);
    int out[4];
    const int want[3] = {1, 2, 0};   /* cosine order, not the keyword match on "alpha" */
    int n = rp_retrieve("question alpha", c, 4, 3, emb, out);
    expect_order(out, n, want, 3);
    json_object_del(emb, "gamma");
    assert_int_equal(rp_retrieve("question alpha", c, 4, 3, emb, out), -1);   /* a missing vector is an error */
    json_decref(emb);
}

/* A line of exactly LINE characters: prefix + words, padded with spaces, '\n'. */
static void line_of(char *buf, const char *prefix, const char *words) {
    int n = snprintf(buf, LINE + 1, "%s%s", prefix, words);
    while (n < LINE - 1) buf[n++] = ' ';
    buf[LINE - 1] = '\n';
    buf[LINE] = 0;
}

static rp_model *load_stories(void) {
    const char *path = rp_test_shared("models/stories260K.gguf");
    if (!path) return NULL;
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = 1;
    assert_int_equal(rp_model_load(path, mp, &m), RP_OK);
    return m;
}

/* Whether prompt segment `s` (1 = the first chunk after BOS + system) holds exactly the tokens of text. */
static void expect_segment(const rp_model *m, const rp_wprompt *p, int s, const char *text) {
    rp_token t[256];
    size_t n = 0;
    rp_tokenize_opts o = {.add_bos = false, .parse_special = false};
    assert_int_equal(rp_tokenizer_encode(m->tok, text, strlen(text), o, t, 256, &n), RP_OK);
    assert_true(s >= 1 && s <= p->n_bounds);
    const int32_t at = p->bounds[s - 1], end = s < p->n_bounds ? p->bounds[s] : p->n;
    assert_int_equal(end - at, (int32_t)n);
    assert_memory_equal(p->toks + at, t, sizeof(rp_token) * n);
}

/* docqa chunk texts: 12 paragraphs "Pnn: words" of LINE characters */
static char para[12][LINE + 1];

static const char *write_hotpot(const char *dir) {
    static const char *words[12] = {"ordinary filler text", "more filler", "weather report", "garden notes",
                                    "shipping news", "river Danube concert", "cooking hints", "bridge traffic",
                                    "famous Danube composer", "market prices", "sports results",
                                    "Vienna waltz composer Danube river concert"};
    static char path[512];
    char sub[400];
    snprintf(sub, sizeof sub, "%s/hotpotqa", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/hot.json", sub);
    json_t *titles = json_array(), *sents = json_array();
    for (int i = 0; i < 12; i++) {
        char title[8];
        snprintf(title, sizeof title, "P%02d", i);
        char pre[16];
        snprintf(pre, sizeof pre, "%s: ", title);
        line_of(para[i], pre, words[i]);
        char body[LINE + 1];
        snprintf(body, sizeof body, "%.*s", LINE - 1 - (int)strlen(pre), para[i] + strlen(pre));   /* without '\n' */
        json_array_append_new(titles, json_string(title));
        json_array_append_new(sents, json_pack("[s]", body));
    }
    json_t *root = json_pack("[{s:s, s:s, s:{s:o, s:o}}]", "question", "Which composer wrote a concert on the Danube river?",
                             "answer", "Strauss", "context", "title", titles, "sentences", sents);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    char std[512];   /* the same file at the dataset's own path, for --data DIR */
    snprintf(std, sizeof std, "%s/hotpot_dev_distractor_first100.json", sub);
    assert_int_equal(json_dump_file(root, std, 0), 0);
    json_decref(root);
    return path;
}

static void test_docqa_retrieval_and_data(void **state) {
    (void)state;
    rp_model *m = load_stories();
    if (!m) RP_SKIP("stories260K not found (set RP_SHARED_DIR)\n");
    const char *dir = rp_test_tmpdir();
    const char *file = write_hotpot(dir);
    rp_workload_params p = rp_workload_default_params();
    p.n_docs = 3;
    p.doc_len = LINE;
    p.n_queries = 4;
    const char *datas[2] = {file, dir};   /* --data FILE and --data DIR give the same workload */
    for (int d = 0; d < 2; d++) {
        rp_workload *w = NULL;
        assert_true(rp_workload_build("test", "docqa", datas[d], m, &p, &w));
        assert_int_equal(rp_workload_n_queries(w), 1);
        const rp_query *q = rp_workload_query(w, 0);
        const int want[3] = {11, 5, 8};   /* 5 question words, then 3 (river, concert, danube), then 2 */
        expect_order(q->retrieved, q->n_retrieved, want, 3);
        assert_int_equal(q->n_warm, 12);   /* every chunk of the context is cached */
        for (int i = 0; i < 3; i++) expect_segment(m, &q->prompt, 1 + i, para[want[i]]);
        assert_string_equal(q->answer, "Strauss");
        rp_workload_free(w);
    }
    /* a directory without the dataset is a clear failure */
    rp_workload *w = NULL;
    char empty[512];
    snprintf(empty, sizeof empty, "%s/none", dir);
    mkdir(empty, 0755);
    assert_false(rp_workload_build("test", "docqa", empty, m, &p, &w));
    assert_null(w);
    rp_model_free(m);
}

static void test_docqa_embeddings(void **state) {
    (void)state;
    rp_model *m = load_stories();
    if (!m) RP_SKIP("stories260K not found (set RP_SHARED_DIR)\n");
    const char *dir = rp_test_tmpdir();
    const char *file = write_hotpot(dir);
    char texts_path[512], emb_path[512];
    snprintf(texts_path, sizeof texts_path, "%s/texts.json", dir);
    snprintf(emb_path, sizeof emb_path, "%s/emb.json", dir);
    rp_workload_params p = rp_workload_default_params();
    p.n_docs = 3;
    p.doc_len = LINE;
    p.export_texts = texts_path;
    rp_workload *w = NULL;
    assert_true(rp_workload_build("test", "docqa", file, m, &p, &w));
    rp_workload_free(w);
    /* the exported texts: the question, then the 12 chunks; give chunk i the vector (cos(i), sin(i)) */
    json_error_t err;
    json_t *texts = json_load_file(texts_path, 0, &err);
    assert_true(json_is_array(texts));
    assert_int_equal(json_array_size(texts), 13);
    json_t *emb = json_object();
    json_object_set_new(emb, json_string_value(json_array_get(texts, 0)), json_pack("[f,f]", 0.0, 1.0));
    for (int i = 0; i < 12; i++) {
        assert_string_equal(json_string_value(json_array_get(texts, 1 + (size_t)i)), para[i]);
        /* chunk 2 points along the question, then 9, then 0; the rest away from it */
        double x = i == 2 ? 0.0 : i == 9 ? 0.3 : i == 0 ? 0.6 : -1.0, y = i == 2 || i == 9 || i == 0 ? 1.0 : -0.1 * i;
        json_object_set_new(emb, para[i], json_pack("[f,f]", x, y));
    }
    assert_int_equal(json_dump_file(emb, emb_path, 0), 0);
    p.export_texts = NULL;
    p.embeddings = emb_path;
    assert_true(rp_workload_build("test", "docqa", file, m, &p, &w));
    const rp_query *q = rp_workload_query(w, 0);
    const int want[3] = {2, 9, 0};
    expect_order(q->retrieved, q->n_retrieved, want, 3);
    for (int i = 0; i < 3; i++) expect_segment(m, &q->prompt, 1 + i, para[want[i]]);
    rp_workload_free(w);
    /* a chunk without a vector fails the build */
    json_object_del(emb, para[7]);
    assert_int_equal(json_dump_file(emb, emb_path, 0), 0);
    w = NULL;
    assert_false(rp_workload_build("test", "docqa", file, m, &p, &w));
    json_decref(emb);
    json_decref(texts);
    rp_model_free(m);
}

/* --retrieve-model: vectors from an embedding model (a tiny synthetic BERT: its ranking means nothing, but a text
 * equal to the question has cosine 1, and the workload ranks exactly as rp_retrieve over the embedder's vectors). */
static void test_docqa_retrieve_model(void **state) {
    (void)state;
    char bert[512];
    snprintf(bert, sizeof bert, "%s/bert-tiny.gguf", rp_test_tmpdir());
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = RP_ARCH_BERT;
    sp.preset = "tiny";
    sp.type = "f32";
    assert_int_equal(rp_synth_write(&sp, bert), RP_OK);
    rp_model *em = NULL;
    assert_int_equal(rp_model_load(bert, rp_model_default_params(), &em), RP_OK);
    rp_embedder_params epp = rp_embedder_default_params();
    rp_embedder *e = NULL;
    assert_int_equal(rp_embedder_create(em, &epp, &e), RP_OK);
    const char *c[4] = {"the cat sat on the mat", "a dog", "the quick brown fox jumps over the lazy dog", "a dog"};
    json_t *emb = json_object();
    assert_true(rp_retrieve_embed_fill(e, em, emb, c, 4));
    assert_int_equal(json_object_size(emb), 3);   /* "a dog" once */
    const json_t *v = json_object_get(emb, c[0]);
    assert_int_equal(json_array_size(v), rp_embedder_n_embd(e));
    double nn = 0;
    for (size_t i = 0; i < json_array_size(v); i++) nn += json_number_value(json_array_get(v, i)) * json_number_value(json_array_get(v, i));
    assert_true(nn > 0.999 && nn < 1.001);   /* normalised, as the embedder says */
    int out[4];
    assert_true(rp_retrieve_embed_fill(e, em, emb, &c[2], 1));   /* already there: nothing to do */
    assert_int_equal(rp_retrieve(c[2], c, 4, 1, emb, out), 1);
    assert_int_equal(out[0], 2);                                  /* the same text: cosine 1, first */
    /* a text longer than the embedder's input is cut to its first tokens, not refused */
    char *longt = malloc(20000);
    size_t o = 0;
    while (o + 8 < 20000) o += (size_t)snprintf(longt + o, 20000 - o, "word%zu ", o % 97);
    const char *lt = longt;
    assert_true(rp_retrieve_embed_fill(e, em, emb, &lt, 1));
    free(longt);
    json_decref(emb);
    rp_embedder_free(e);
    rp_model_free(em);

    rp_model *m = load_stories();
    if (!m) RP_SKIP("stories260K not found (set RP_SHARED_DIR)\n");
    const char *file = write_hotpot(rp_test_tmpdir());
    rp_workload_params p = rp_workload_default_params();
    p.n_docs = 3;
    p.doc_len = LINE;
    p.retrieve_model = bert;
    rp_workload *w = NULL;
    assert_true(rp_workload_build("test", "docqa", file, m, &p, &w));
    const rp_query *q = rp_workload_query(w, 0);
    assert_int_equal(q->n_retrieved, 3);
    /* the same ranking from the embedder's vectors directly */
    assert_int_equal(rp_model_load(bert, rp_model_default_params(), &em), RP_OK);
    assert_int_equal(rp_embedder_create(em, &epp, &e), RP_OK);
    emb = json_object();
    const char *question = "Which composer wrote a concert on the Danube river?", *pp[12];
    for (int i = 0; i < 12; i++) pp[i] = para[i];
    assert_true(rp_retrieve_embed_fill(e, em, emb, &question, 1));
    assert_true(rp_retrieve_embed_fill(e, em, emb, pp, 12));
    int want[3];
    assert_int_equal(rp_retrieve(question, pp, 12, 3, emb, want), 3);
    expect_order(q->retrieved, q->n_retrieved, want, 3);
    rp_workload_free(w);
    json_decref(emb);
    rp_embedder_free(e);
    rp_model_free(em);
    /* --embeddings and --retrieve-model together: refused */
    p.embeddings = bert;
    w = NULL;
    assert_false(rp_workload_build("test", "docqa", file, m, &p, &w));
    rp_model_free(m);
}

/* An instruct template wraps instruction + passages + question in one user turn; the passages stay segments of
 * their own and the head (BOS + template + instruction) is the same segment in the warm-ups and the prompt. */
static void test_docqa_chat_template(void **state) {
    (void)state;
    rp_model *m = load_stories();
    if (!m) RP_SKIP("stories260K not found (set RP_SHARED_DIR)\n");
    const char *file = write_hotpot(rp_test_tmpdir());
    rp_workload_params p = rp_workload_default_params();
    p.n_docs = 3;
    p.doc_len = LINE;
    int32_t head_n[2], tail_n[2];
    for (int t = 0; t < 2; t++) {
        m->chat = t ? RP_CHAT_LLAMA3 : RP_CHAT_LLAMA2;   /* LLAMA2 (no template) stays plain text */
        rp_workload *w = NULL;
        assert_true(rp_workload_build("test", "docqa", file, m, &p, &w));
        const rp_query *q = rp_workload_query(w, 0);
        assert_int_equal(q->prompt.n_bounds, 4);   /* head | 3 chunks | question */
        const int want[3] = {11, 5, 8};
        for (int i = 0; i < 3; i++) expect_segment(m, &q->prompt, 1 + i, para[want[i]]);
        head_n[t] = q->prompt.bounds[0];
        tail_n[t] = q->prompt.n - q->prompt.bounds[3];
        for (int k = 0; k < q->n_warm; k++) {
            assert_int_equal(q->warm[k].bounds[0], head_n[t]);
            assert_memory_equal(q->warm[k].toks, q->prompt.toks, sizeof(rp_token) * (size_t)head_n[t]);
        }
        rp_workload_free(w);
    }
    assert_true(head_n[1] > head_n[0] && tail_n[1] > tail_n[0]);   /* the user / assistant headers */
    rp_model_free(m);
}

static void test_chat_retrieval_over_whole_history(void **state) {
    (void)state;
    rp_model *m = load_stories();
    if (!m) RP_SKIP("stories260K not found (set RP_SHARED_DIR)\n");
    const char *dir = rp_test_tmpdir();
    char sub[512], path[600];
    snprintf(sub, sizeof sub, "%s/locomo", dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/26.json", sub);
    /* 30 turns over 3 sessions, "Ann: ..." / "Bob: ..." lines of LINE characters */
    static char turn[30][LINE + 1];
    json_t *root = json_object();
    for (int s = 0; s < 3; s++) {
        json_t *sess = json_array();
        for (int t = 0; t < 10; t++) {
            const int i = s * 10 + t;
            const char *spk = i % 2 ? "Bob" : "Ann";
            const char *words = i == 25 ? "my trip to Lisbon was sunny and the tram was fun"
                              : i == 3  ? "Lisbon tram rides are cheap"
                              : i == 17 ? "I loved the Lisbon food"
                              : i == 28 ? "the violin lessons with Marta start in June"
                              : i == 0  ? "Marta teaches violin"
                              : i == 12 ? "June is busy"
                                        : "just small talk about nothing";
            char pre[8];
            snprintf(pre, sizeof pre, "%s: ", spk);
            line_of(turn[i], pre, words);
            char body[LINE + 1];
            snprintf(body, sizeof body, "%.*s", LINE - 1 - (int)strlen(pre), turn[i] + strlen(pre));
            json_array_append_new(sess, json_pack("{s:s, s:s}", "speaker", spk, "text", body));
        }
        char key[16];
        snprintf(key, sizeof key, "session_%d", s + 1);
        json_object_set_new(root, key, sess);
    }
    json_object_set_new(root, "qa", json_pack("[{s:s, s:s}, {s:s, s:i}]", "question", "What was sunny on the Lisbon trip, the tram?",
                                              "answer", "Lisbon", "question", "When do the violin lessons with Marta start, June?",
                                              "answer", 6));
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);
    rp_workload_params p = rp_workload_default_params();
    p.n_docs = 3;
    p.doc_len = LINE;
    p.n_queries = 2;
    rp_workload *w = NULL;
    assert_true(rp_workload_build("test", "chat", dir, m, &p, &w));
    assert_int_equal(rp_workload_n_queries(w), 2);
    const int want0[3] = {25, 3, 17}, want1[3] = {28, 0, 12};
    const rp_query *q = rp_workload_query(w, 0);
    expect_order(q->retrieved, q->n_retrieved, want0, 3);
    for (int i = 0; i < 3; i++) expect_segment(m, &q->prompt, 1 + i, turn[want0[i]]);
    q = rp_workload_query(w, 1);
    expect_order(q->retrieved, q->n_retrieved, want1, 3);   /* not picked from the first question's top chunks */
    for (int i = 0; i < 3; i++) expect_segment(m, &q->prompt, 1 + i, turn[want1[i]]);
    assert_string_equal(q->answer, "6");
    rp_workload_free(w);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retrieve_keywords),
        cmocka_unit_test(test_retrieve_embeddings),
        cmocka_unit_test(test_docqa_retrieval_and_data),
        cmocka_unit_test(test_docqa_embeddings),
        cmocka_unit_test(test_docqa_retrieve_model),
        cmocka_unit_test(test_docqa_chat_template),
        cmocka_unit_test(test_chat_retrieval_over_whole_history),
    };
    return rp_test_main(tests, NULL, NULL);
}
