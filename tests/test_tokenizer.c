/* test_tokenizer.c — tokenizer tests: llama.cpp / HF reference vectors, round trips, specials, streaming detok. */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tok_internal.h"   /* rp_utf8_check, the nfc flag */

#ifndef RP_SOURCE_DIR
#define RP_SOURCE_DIR "."
#endif

/* ---- helpers ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens a shared vocab GGUF and loads its tokenizer; NULL (test skipped) if absent. */
static rp_tokenizer *load_tok(const char *rel, double *secs) {
    const char *p = rp_test_shared(rel);
    RP_REQUIRE_SHARED(p, rel);
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(p, &g);
    if (st != RP_OK) print_message("gguf open %s: %s\n", rel, rp_last_error());
    assert_int_equal(st, RP_OK);
    rp_tokenizer *t = NULL;
    double t0 = now_s();
    st = rp_tokenizer_load(g, &t);
    double dt = now_s() - t0;
    if (st != RP_OK) print_message("tokenizer load %s: %s\n", rel, rp_last_error());
    assert_int_equal(st, RP_OK);
    rp_gguf_close(g);   /* the tokenizer must not depend on the mapping */
    if (secs) *secs = dt;
    return t;
}

/* Encodes into a malloc'd array (exercising the RP_ERR_FULL sizing protocol). */
static rp_token *encode_all(const rp_tokenizer *t, const char *s, size_t len, bool bos, bool special, size_t *n) {
    rp_tokenize_opts o = {.add_bos = bos, .parse_special = special};
    size_t need = 0;
    rp_status st = rp_tokenizer_encode(t, s, len, o, NULL, 0, &need);
    assert_true(st == RP_OK || st == RP_ERR_FULL);
    if (st == RP_OK) assert_int_equal(need, 0);
    rp_token *ids = malloc((need ? need : 1) * sizeof *ids);
    assert_non_null(ids);
    size_t got = 0;
    st = rp_tokenizer_encode(t, s, len, o, ids, need, &got);
    assert_int_equal(st, RP_OK);
    assert_int_equal(got, need);
    *n = got;
    return ids;
}

static char *decode_all(const rp_tokenizer *t, const rp_token *ids, size_t n, bool special, bool strip,
                        size_t *len) {
    size_t need = 0;
    char dummy[1];
    rp_status st = rp_tokenizer_decode(t, ids, n, special, strip, dummy, 1, &need);
    assert_true(st == RP_OK || st == RP_ERR_FULL);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    size_t got = 0;
    st = rp_tokenizer_decode(t, ids, n, special, strip, buf, need + 1, &got);
    assert_int_equal(st, RP_OK);
    assert_int_equal(got, need);
    assert_int_equal(buf[got], '\0');
    *len = got;
    return buf;
}

/* Streams ids through rp_detok one at a time; malloc'd result. */
static char *stream_all(const rp_tokenizer *t, const rp_token *ids, size_t n, bool special, size_t *len) {
    size_t bound = rp_detok_bound(t);
    char *tmp = malloc(bound);
    size_t cap = 64, m = 0;
    char *acc = malloc(cap);
    assert_non_null(tmp);
    assert_non_null(acc);
    rp_detok d;
    rp_detok_init(&d, t, special);
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? rp_detok_push(&d, ids[i], tmp, bound) : rp_detok_flush(&d, tmp, bound);
        assert_true(k >= 0);
        if (m + (size_t)k + 1 > cap) {
            while (m + (size_t)k + 1 > cap) cap *= 2;
            acc = realloc(acc, cap);
            assert_non_null(acc);
        }
        memcpy(acc + m, tmp, (size_t)k);
        m += (size_t)k;
    }
    acc[m] = '\0';
    free(tmp);
    *len = m;
    return acc;
}

static char *nfc(const char *s, size_t len, size_t *out_len) {
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &o,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    assert_true(r >= 0);
    *out_len = (size_t)r;
    return (char *)o;
}

static void print_ids(const char *what, const rp_token *ids, size_t n) {
    char line[2048];
    size_t m = 0;
    for (size_t i = 0; i < n && m + 16 < sizeof line; i++) m += (size_t)snprintf(line + m, sizeof line - m, " %d", ids[i]);
    print_message("  %s:%s\n", what, line);
}

typedef struct vec_stats {
    int enc_ok, rt_ok, stream_ok, total;
} vec_stats;

/* Checks one case: exact ids, decode round trip, streaming == whole decode. */
static void check_case(const rp_tokenizer *t, const char *text, size_t len, const rp_token *want, size_t n_want,
                       bool bos, bool special, vec_stats *vs) {
    size_t n;
    rp_token *got = encode_all(t, text, len, bos, special, &n);
    vs->total++;
    bool ok = n == n_want && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    if (ok) {
        vs->enc_ok++;
    } else {
        print_message("MISMATCH for '%.*s'\n", (int)len, text);
        print_ids("want", want, n_want);
        print_ids("got ", got, n);
    }

    /* Round trip: decode(encode(text)) == text (NFC text for qwen2; the SPM
     * dummy prefix is stripped). */
    bool spm = rp_tokenizer_kind(t) == RP_TOK_SPM;
    size_t dl;
    char *dec = decode_all(t, got, n, special, spm, &dl);
    const char *ref = text;
    size_t rl = len;
    char *norm = NULL;
    if (t->nfc) {
        norm = nfc(text, len, &rl);
        ref = norm;
    }
    if (dl == rl && memcmp(dec, ref, rl) == 0) {
        vs->rt_ok++;
    } else {
        print_message("ROUND TRIP for '%.*s' gave '%.*s'\n", (int)len, text, (int)dl, dec);
    }
    size_t sl;
    char *str = stream_all(t, got, n, special, &sl);
    if (sl == dl && memcmp(str, dec, dl) == 0) {
        vs->stream_ok++;
    } else {
        print_message("STREAM for '%.*s' gave '%.*s'\n", (int)len, text, (int)sl, str);
    }
    free(str);
    free(norm);
    free(dec);
    free(got);
}

/* llama.cpp test-tokenizer-0 vectors: .inp cases separated by
 * "\n__ggml_vocab_test__\n" (the file ends with one), .out one line of
 * space-separated ids per case; encoded without BOS, parse_special off. */
static void run_ggml_vectors(const char *vocab_rel, const char *vec_rel) {
    double load_s;
    rp_tokenizer *t = load_tok(vocab_rel, &load_s);
    char inp_rel[256], out_rel[256];
    snprintf(inp_rel, sizeof inp_rel, "%s.inp", vec_rel);
    snprintf(out_rel, sizeof out_rel, "%s.out", vec_rel);
    const char *p = rp_test_shared(inp_rel);
    RP_REQUIRE_SHARED(p, inp_rel);
    size_t inp_len;
    char *inp = rp_test_read_file(p, &inp_len);
    assert_non_null(inp);
    p = rp_test_shared(out_rel);
    RP_REQUIRE_SHARED(p, out_rel);
    char *out = rp_test_read_file(p, NULL);
    assert_non_null(out);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    vec_stats vs = {0};
    char *line = out;
    size_t pos = 0;
    rp_token want[1024];
    while (pos < inp_len) {
        char *next = strstr(inp + pos, sep);
        size_t end = next ? (size_t)(next - inp) : inp_len;
        /* the matching .out line */
        assert_true(*line != '\0');
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        size_t nw = 0;
        for (char *q = line;;) {
            while (*q == ' ') q++;
            if (!*q) break;
            char *e;
            long v = strtol(q, &e, 10);
            assert_true(e != q);
            assert_true(nw < 1024);
            want[nw++] = (rp_token)v;
            q = e;
        }
        check_case(t, inp + pos, end - pos, want, nw, false, false, &vs);
        line = nl ? nl + 1 : line + strlen(line);
        pos = next ? end + sep_len : inp_len;
    }
    print_message("%s: %d/%d ids exact, %d/%d round trips, %d/%d streaming (vocab load %.1f ms)\n", vec_rel,
                  vs.enc_ok, vs.total, vs.rt_ok, vs.total, vs.stream_ok, vs.total, load_s * 1e3);
    assert_true(vs.total >= 40);
    assert_int_equal(vs.enc_ok, vs.total);
    assert_int_equal(vs.rt_ok, vs.total);
    assert_int_equal(vs.stream_ok, vs.total);
    free(inp);
    free(out);
    rp_tokenizer_free(t);
}

static void test_vectors_llama_bpe(void **state) {
    (void)state;
    run_ggml_vectors("models/vocab/llama3-bpe.vocab.gguf", "models/vocab/ggml-vocab-llama-bpe.gguf");
}

static void test_vectors_qwen2(void **state) {
    (void)state;
    run_ggml_vectors("models/vocab/qwen3-bpe.vocab.gguf", "models/vocab/ggml-vocab-qwen2.gguf");
}

static void test_vectors_llama_spm(void **state) {
    (void)state;
    run_ggml_vectors("models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-llama-spm.gguf");
}

static void test_vectors_gpt2(void **state) {
    (void)state;
    run_ggml_vectors("models/vocab/ggml-vocab-gpt-2.gguf", "models/vocab/ggml-vocab-gpt-2.gguf");
}

/* {text, ids[, parse_special]} per line, no BOS. */
static void run_jsonl(const char *vocab_rel, const char *jsonl_rel) {
    rp_tokenizer *t = load_tok(vocab_rel, NULL);
    const char *p = rp_test_shared(jsonl_rel);
    RP_REQUIRE_SHARED(p, jsonl_rel);
    char *all = rp_test_read_file(p, NULL);
    assert_non_null(all);
    vec_stats vs = {0};
    for (char *line = all; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            json_error_t err;
            json_t *o = json_loads(line, 0, &err);
            assert_non_null(o);
            json_t *jt = json_object_get(o, "text"), *jids = json_object_get(o, "ids");
            assert_true(json_is_string(jt) && json_is_array(jids));
            bool special = json_is_true(json_object_get(o, "parse_special"));
            size_t nw = json_array_size(jids);
            rp_token *want = malloc((nw ? nw : 1) * sizeof *want);
            assert_non_null(want);
            for (size_t i = 0; i < nw; i++) want[i] = (rp_token)json_integer_value(json_array_get(jids, i));
            check_case(t, json_string_value(jt), json_string_length(jt), want, nw, false, special, &vs);
            free(want);
            json_decref(o);
        }
        line = nl ? nl + 1 : line + strlen(line);
    }
    print_message("%s: %d/%d ids exact, %d/%d round trips, %d/%d streaming\n", jsonl_rel, vs.enc_ok, vs.total,
                  vs.rt_ok, vs.total, vs.stream_ok, vs.total);
    assert_true(vs.total >= 40);
    assert_int_equal(vs.enc_ok, vs.total);
    assert_int_equal(vs.rt_ok, vs.total);
    assert_int_equal(vs.stream_ok, vs.total);
    free(all);
    rp_tokenizer_free(t);
}

static void test_extra_llama3(void **state) {
    (void)state;
    run_jsonl("models/vocab/llama3-bpe.vocab.gguf", "models/vocab/llama3-bpe.extra-tests.jsonl");
}

static void test_extra_qwen3(void **state) {
    (void)state;
    run_jsonl("models/vocab/qwen3-bpe.vocab.gguf", "models/vocab/qwen3-bpe.extra-tests.jsonl");
}

/* stories260K golden: tokenizer_cases [{text, ids_with_bos}] (SPM, 512 tokens). */
static void test_stories260k(void **state) {
    (void)state;
    rp_tokenizer *t = load_tok("models/stories260K.gguf", NULL);
    const char *p = rp_test_shared("models/stories260K.golden.json");
    RP_REQUIRE_SHARED(p, "models/stories260K.golden.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "tokenizer_cases");
    assert_true(json_is_array(cases));
    assert_int_equal(rp_tokenizer_kind(t), RP_TOK_SPM);
    assert_true(rp_tokenizer_add_bos(t));
    vec_stats vs = {0};
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids_with_bos");
        assert_true(json_is_string(jt) && json_is_array(jids));
        size_t nw = json_array_size(jids);
        rp_token *want = malloc((nw ? nw : 1) * sizeof *want);
        assert_non_null(want);
        for (size_t k = 0; k < nw; k++) want[k] = (rp_token)json_integer_value(json_array_get(jids, k));
        check_case(t, json_string_value(jt), json_string_length(jt), want, nw, true, false, &vs);
        free(want);
    }
    print_message("stories260K tokenizer_cases: %d/%d ids exact, %d/%d round trips, %d/%d streaming\n", vs.enc_ok,
                  vs.total, vs.rt_ok, vs.total, vs.stream_ok, vs.total);
    assert_true(vs.total > 0);
    assert_int_equal(vs.enc_ok, vs.total);
    assert_int_equal(vs.rt_ok, vs.total);
    assert_int_equal(vs.stream_ok, vs.total);
    json_decref(root);
    rp_tokenizer_free(t);
}

/* ---- special tokens, EOG ---- */

static void test_specials_llama3(void **state) {
    (void)state;
    rp_tokenizer *t = load_tok("models/vocab/llama3-bpe.vocab.gguf", NULL);
    assert_int_equal(rp_tokenizer_kind(t), RP_TOK_BPE);
    assert_int_equal(rp_tokenizer_pre(t), RP_PRE_LLAMA3);
    assert_int_equal(rp_tokenizer_n_vocab(t), 128256);
    assert_int_equal(rp_tokenizer_bos(t), 128000);
    assert_int_equal(rp_tokenizer_eos(t), 128001);
    assert_int_equal(rp_tokenizer_eot(t), 128009);
    assert_true(rp_tokenizer_add_bos(t));
    assert_true(rp_tokenizer_is_eog(t, 128001));
    assert_true(rp_tokenizer_is_eog(t, 128009));
    assert_false(rp_tokenizer_is_eog(t, 128008));   /* Llama 3.0: <|reserved_special_token_4|> */
    assert_false(rp_tokenizer_is_eog(t, 128006));   /* <|start_header_id|> */
    assert_false(rp_tokenizer_is_eog(t, 9906));
    assert_false(rp_tokenizer_is_eog(t, -1));
    assert_true(rp_tokenizer_is_control(t, 128000));
    assert_false(rp_tokenizer_is_control(t, 9906));
    assert_int_equal(rp_tokenizer_find(t, "<|eot_id|>"), 128009);
    assert_int_equal(rp_tokenizer_find(t, "Hello"), 9906);
    assert_int_equal(rp_tokenizer_find(t, "no-such-token-xyz"), -1);
    assert_string_equal(rp_tokenizer_token_str(t, 22691), "ĠHello");
    assert_null(rp_tokenizer_token_str(t, 128256));

    /* add_bos, and parse_special on / off */
    const char *s = "<|begin_of_text|>Hello";
    size_t n;
    rp_token *ids = encode_all(t, s, strlen(s), true, true, &n);
    assert_int_equal(n, 3);   /* BOS + <|begin_of_text|> (double BOS, as llama.cpp) + Hello */
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[1], 128000);
    assert_int_equal(ids[2], 9906);
    free(ids);
    ids = encode_all(t, s, strlen(s), false, false, &n);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] < 128000);   /* plain text pieces */
    size_t dl;
    char *dec = decode_all(t, ids, n, false, false, &dl);
    assert_string_equal(dec, s);
    free(dec);
    free(ids);

    /* Control tokens render only with render_special. */
    rp_token seq[] = {128000, 9906, 128009};
    dec = decode_all(t, seq, 3, false, false, &dl);
    assert_string_equal(dec, "Hello");
    free(dec);
    dec = decode_all(t, seq, 3, true, false, &dl);
    assert_string_equal(dec, "<|begin_of_text|>Hello<|eot_id|>");
    free(dec);
    char piece[8];
    assert_int_equal(rp_tokenizer_token_to_piece(t, 128009, false, piece, sizeof piece), 0);
    assert_int_equal(rp_tokenizer_token_to_piece(t, 22691, false, piece, sizeof piece), 6);
    assert_memory_equal(piece, " Hello", 6);
    assert_int_equal(rp_tokenizer_token_to_piece(t, 22691, false, piece, 3), 3);   /* truncated */
    assert_int_equal(rp_tokenizer_token_to_piece(t, 128256, false, piece, sizeof piece), -1);
    assert_int_equal(rp_tokenizer_token_to_piece(t, -5, false, piece, sizeof piece), -1);
    assert_true(rp_tokenizer_max_piece_len(t) >= 128);
    rp_tokenizer_free(t);
}

static void test_specials_qwen3(void **state) {
    (void)state;
    rp_tokenizer *t = load_tok("models/vocab/qwen3-bpe.vocab.gguf", NULL);
    assert_int_equal(rp_tokenizer_pre(t), RP_PRE_QWEN2);
    assert_int_equal(rp_tokenizer_n_vocab(t), 151936);
    assert_false(rp_tokenizer_add_bos(t));
    assert_int_equal(rp_tokenizer_eos(t), 151645);
    assert_int_equal(rp_tokenizer_eot(t), 151645);
    assert_true(rp_tokenizer_is_eog(t, 151645));   /* <|im_end|> */
    assert_true(rp_tokenizer_is_eog(t, 151643));   /* <|endoftext|> */
    assert_false(rp_tokenizer_is_eog(t, 151644));  /* <|im_start|> */
    assert_false(rp_tokenizer_is_eog(t, 151667));  /* <think> */
    assert_false(rp_tokenizer_is_control(t, 151667));   /* user-defined: always rendered */

    /* add_bos requested but the vocab says no: no BOS. */
    size_t n;
    rp_token *ids = encode_all(t, "Hi", 2, true, false, &n);
    assert_int_equal(n, 1);
    free(ids);

    /* Control texts are plain text without parse_special ... */
    const char *s = "<|im_start|>user";
    ids = encode_all(t, s, strlen(s), false, false, &n);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 151644);
    free(ids);
    ids = encode_all(t, s, strlen(s), false, true, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 151644);
    assert_int_equal(ids[1], 872);
    free(ids);
    /* ... while user-defined tokens (<think>) are matched either way, as HF and llama.cpp do. */
    s = "a<think>b";
    ids = encode_all(t, s, strlen(s), false, false, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 151667);
    size_t dl;
    char *dec = decode_all(t, ids, n, false, false, &dl);
    assert_string_equal(dec, s);
    free(dec);
    free(ids);
    /* NFC first: e + U+0301 encodes like the precomposed U+00E9 */
    rp_token *a = encode_all(t, "caf\x65\xcc\x81", 6, false, false, &n);
    size_t n2;
    rp_token *b = encode_all(t, "caf\xc3\xa9", 5, false, false, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(a, b, n * sizeof *a);
    free(a);
    free(b);
    /* UNUSED padding rows render as nothing */
    char piece[16];
    assert_int_equal(rp_tokenizer_token_to_piece(t, 151935, true, piece, sizeof piece), 0);
    rp_tokenizer_free(t);
}

static void test_specials_spm(void **state) {
    (void)state;
    rp_tokenizer *t = load_tok("models/vocab/ggml-vocab-llama-spm.gguf", NULL);
    assert_int_equal(rp_tokenizer_kind(t), RP_TOK_SPM);
    assert_int_equal(rp_tokenizer_bos(t), 1);
    assert_int_equal(rp_tokenizer_eos(t), 2);
    assert_int_equal(rp_tokenizer_eot(t), -1);
    assert_true(rp_tokenizer_add_bos(t));
    assert_true(rp_tokenizer_is_eog(t, 2));
    assert_false(rp_tokenizer_is_eog(t, 1));
    /* BOS + dummy prefix; a fragment after a special token gets the prefix again. */
    const char *s = "Hello</s>world";
    size_t n;
    rp_token *ids = encode_all(t, s, strlen(s), true, true, &n);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043);   /* ▁Hello */
    assert_int_equal(ids[2], 2);
    assert_int_equal(ids[3], 3186);    /* ▁world */
    free(ids);
    /* empty input: just BOS / nothing */
    ids = encode_all(t, "", 0, true, false, &n);
    assert_int_equal(n, 1);
    free(ids);
    ids = encode_all(t, "", 0, false, false, &n);
    assert_int_equal(n, 0);
    free(ids);
    /* decode: BOS hidden, dummy space stripped (only the first piece) */
    rp_token seq[] = {1, 15043, 3186};
    size_t dl;
    char *dec = decode_all(t, seq, 3, false, true, &dl);
    assert_string_equal(dec, "Hello world");
    free(dec);
    dec = decode_all(t, seq, 3, false, false, &dl);
    assert_string_equal(dec, " Hello world");
    free(dec);
    dec = decode_all(t, seq, 3, true, true, &dl);
    assert_string_equal(dec, "<s>Hello world");
    free(dec);
    rp_tokenizer_free(t);
}

/* ---- streaming detok ---- */

static void test_detok_stream(void **state) {
    (void)state;
    rp_tokenizer *t = load_tok("models/vocab/ggml-vocab-llama-spm.gguf", NULL);
    /* 🦙 is not in the Llama 2 vocab: four byte tokens <0xF0><0x9F><0xA6><0x99>. */
    const char *s = "a 🦙!";
    size_t n;
    rp_token *ids = encode_all(t, s, strlen(s), true, false, &n);
    int bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += rp_tokenizer_token_to_piece(t, ids[i], false, (char[8]){0}, 8) == 1;
    assert_true(bytes >= 4);
    rp_detok d;
    rp_detok_init(&d, t, false);
    char out[64];
    char acc[64];
    size_t m = 0;
    bool held = false;
    for (size_t i = 0; i < n; i++) {
        int k = rp_detok_push(&d, ids[i], out, sizeof out);
        assert_true(k >= 0);
        if (d.n_pending > 0) held = true;
        /* never a partial character in the output */
        for (int j = 0; j < k; j++) acc[m++] = out[j];
        size_t vl;
        for (size_t q = 0; q < m; q += vl) {
            assert_int_equal(rp_utf8_check((const unsigned char *)acc + q, m - q, &vl), 1);
        }
    }
    assert_true(held);
    assert_int_equal(rp_detok_flush(&d, out, sizeof out), 0);
    acc[m] = '\0';
    assert_string_equal(acc, s);
    free(ids);

    /* A dangling lead byte is flushed as U+FFFD; an invalid continuation
     * mid-stream is replaced and the next character survives. */
    rp_token f0 = rp_tokenizer_find(t, "<0xF0>"), x9f = rp_tokenizer_find(t, "<0x9F>");
    rp_token a = rp_tokenizer_find(t, "a");
    assert_true(f0 >= 0 && x9f >= 0 && a >= 0);
    rp_detok_init(&d, t, false);
    assert_int_equal(rp_detok_push(&d, f0, out, sizeof out), 0);
    assert_int_equal(rp_detok_push(&d, x9f, out, sizeof out), 0);
    assert_int_equal(d.n_pending, 2);
    assert_int_equal(rp_detok_flush(&d, out, sizeof out), 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    rp_detok_init(&d, t, false);
    d.at_start = false;
    assert_int_equal(rp_detok_push(&d, f0, out, sizeof out), 0);
    int k = rp_detok_push(&d, a, out, sizeof out);
    assert_int_equal(k, 4);
    assert_memory_equal(out, "\xef\xbf\xbd" "a", 4);
    /* too small a buffer: negative size needed, state untouched */
    rp_detok_init(&d, t, false);
    d.at_start = false;
    assert_int_equal(rp_detok_push(&d, f0, out, sizeof out), 0);
    assert_int_equal(rp_detok_push(&d, a, out, 2), -4);
    assert_int_equal(d.n_pending, 1);
    assert_int_equal(rp_detok_push(&d, a, out, 4), 4);
    rp_tokenizer_free(t);

    /* BPE: a multi-byte character split across tokens (Llama 3: 🦙 -> 3 tokens). */
    t = load_tok("models/vocab/llama3-bpe.vocab.gguf", NULL);
    s = " this is 🦙.cpp";
    ids = encode_all(t, s, strlen(s), false, false, &n);
    size_t sl;
    char *str = stream_all(t, ids, n, false, &sl);
    assert_string_equal(str, s);
    free(str);
    free(ids);
    rp_tokenizer_free(t);
}

/* ---- buffers, invalid input, errors ---- */

static void test_buffers_and_invalid_utf8(void **state) {
    (void)state;
    const char *names[] = {"models/vocab/llama3-bpe.vocab.gguf", "models/vocab/qwen3-bpe.vocab.gguf",
                           "models/vocab/ggml-vocab-llama-spm.gguf"};
    for (int v = 0; v < 3; v++) {
        rp_tokenizer *t = load_tok(names[v], NULL);
        /* invalid UTF-8 is encoded byte-wise and decodes back exactly */
        static const char bad[] = "ok \xff\xfe x\xe2\x82 \xc0\xaf end\xf0\x9f";
        size_t bl = sizeof bad - 1, n;
        rp_token *ids = encode_all(t, bad, bl, false, false, &n);
        size_t dl;
        char *dec = decode_all(t, ids, n, false, true, &dl);
        assert_int_equal(dl, bl);
        assert_memory_equal(dec, bad, bl);
        free(dec);

        /* RP_ERR_FULL reports the needed count and leaves ids beyond cap alone */
        rp_token small[2] = {-7, -7};
        size_t need;
        rp_tokenize_opts o = {0};
        assert_int_equal(rp_tokenizer_encode(t, bad, bl, o, small, 1, &need), RP_ERR_FULL);
        assert_int_equal(need, n);
        assert_int_equal(small[0], ids[0]);
        assert_int_equal(small[1], -7);
        char buf[4];
        assert_int_equal(rp_tokenizer_decode(t, ids, n, false, true, buf, sizeof buf, &need), RP_ERR_FULL);
        assert_int_equal(need, bl);
        assert_int_equal(buf[3], '\0');
        rp_token badid = rp_tokenizer_n_vocab(t);
        assert_int_equal(rp_tokenizer_decode(t, &badid, 1, false, false, buf, sizeof buf, &need), RP_ERR_RANGE);
        assert_int_equal(rp_tokenizer_encode(t, NULL, 3, o, small, 2, &need), RP_ERR_INVALID_ARG);
        free(ids);

        /* embedded NUL */
        ids = encode_all(t, "a\0b", 3, false, false, &n);
        dec = decode_all(t, ids, n, false, true, &dl);
        assert_int_equal(dl, 3);
        assert_memory_equal(dec, "a\0b", 3);
        free(dec);
        free(ids);
        rp_tokenizer_free(t);
    }
}

/* ---- pre-tokenizers: llama.cpp's ids for every supported tokenizer.ggml.pre name ----
 * tests/data/pretok_vectors.json (bench/peer/pretok_vectors.mjs) holds the ids llama.cpp gives for a
 * fixed set of texts with the llama3-bpe vocab relabelled to each name and its add_bos_token key
 * dropped. The split does not depend on the vocab, so we relabel the same vocab the same way. */

/* Copies the GGUF at src_path to dst_path with tokenizer.ggml.pre = pre and no add_bos_token key. */
static void relabel_vocab(const char *src_path, const char *dst_path, const char *pre) {
    rp_gguf *g = NULL;
    assert_int_equal(rp_gguf_open(src_path, &g), RP_OK);
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        rp_str k = rp_gguf_kv_key(g, i);
        if (rp_str_eq(k, "tokenizer.ggml.pre") || rp_str_eq(k, "tokenizer.ggml.add_bos_token")) continue;
        assert_int_equal(rp_gguf_writer_copy_kv(w, g, i), RP_OK);
    }
    assert_int_equal(rp_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), RP_OK);
    assert_int_equal(rp_gguf_writer_write_file(w, dst_path), RP_OK);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
}

static rp_status load_path(const char *path, rp_tokenizer **t);

static void test_pretok_vectors(void **state) {
    (void)state;
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s/tests/data/pretok_vectors.json", RP_SOURCE_DIR);
    json_error_t err;
    json_t *root = json_load_file(jpath, 0, &err);
    if (!root) print_message("%s: %s (line %d)\n", jpath, err.text, err.line);
    assert_non_null(root);
    const char *vocab_rel = json_string_value(json_object_get(root, "vocab"));
    assert_non_null(vocab_rel);
    const char *vocab = rp_test_shared(vocab_rel);
    if (!vocab) json_decref(root);
    RP_REQUIRE_SHARED(vocab, vocab_rel);
    json_t *texts = json_object_get(root, "texts"), *results = json_object_get(root, "results");
    json_t *pres = json_object_get(root, "pre");
    assert_true(json_is_array(texts) && json_is_array(results) && json_is_object(pres));
    assert_true(json_array_size(texts) >= 60);
    assert_true(json_object_size(pres) >= 40);

    char path[4096];
    snprintf(path, sizeof path, "%s/tok-pretok.gguf", rp_test_tmpdir());
    const char *name;
    json_t *entry;
    int names = 0, cases = 0, skipped_nfc = 0, bad_names = 0;
    json_object_foreach(pres, name, entry) {
        relabel_vocab(vocab, path, name);
        rp_tokenizer *t = NULL;
        rp_status st = load_path(path, &t);
        if (st != RP_OK) print_message("pre '%s': %s\n", name, rp_last_error());
        assert_int_equal(st, RP_OK);
        json_t *ids = json_array_get(results, (size_t)json_integer_value(json_object_get(entry, "result")));
        assert_true(json_is_array(ids));
        assert_int_equal(json_array_size(ids), json_array_size(texts));
        vec_stats vs = {0};
        int skipped = 0;
        for (size_t i = 0; i < json_array_size(texts); i++) {
            json_t *jt = json_array_get(texts, i), *jw = json_array_get(ids, i);
            const char *text = json_string_value(jt);
            size_t len = json_string_length(jt);
            if (t->nfc) {
                /* llama.cpp does not normalize; we do (as HF) where the name says so: texts
                 * that NFC changes are not comparable there. */
                size_t nl;
                char *n = nfc(text, len, &nl);
                bool same = nl == len && memcmp(n, text, len) == 0;
                free(n);
                if (!same) {
                    skipped++;
                    continue;
                }
            }
            size_t nw = json_array_size(jw);
            rp_token *want = malloc((nw ? nw : 1) * sizeof *want);
            assert_non_null(want);
            for (size_t j = 0; j < nw; j++) want[j] = (rp_token)json_integer_value(json_array_get(jw, j));
            check_case(t, text, len, want, nw, false, false, &vs);
            free(want);
        }
        bool want_bos = json_is_true(json_object_get(entry, "add_bos"));
        bool bos_ok = rp_tokenizer_add_bos(t) == want_bos;
        if (!bos_ok) print_message("pre '%s': add_bos %d, llama.cpp %d\n", name, !want_bos, want_bos);
        if (vs.enc_ok != vs.total || vs.rt_ok != vs.total || vs.stream_ok != vs.total || !bos_ok) {
            print_message("pre '%s': %d/%d ids exact, %d/%d round trips, %d/%d streaming\n", name, vs.enc_ok,
                          vs.total, vs.rt_ok, vs.total, vs.stream_ok, vs.total);
            bad_names++;
        }
        names++;
        cases += vs.total;
        skipped_nfc += skipped;
        rp_tokenizer_free(t);
    }
    print_message("pretok vectors (llama.cpp %s): %d names, %d cases, %d names wrong; %d NFC-changed cases not "
                  "compared\n",
                  json_string_value(json_object_get(root, "llama_cpp")), names, cases, bad_names, skipped_nfc);
    assert_int_equal(bad_names, 0);
    remove(path);
    json_decref(root);
}

/* Writes a small vocab-only GGUF: byte-level characters for 'a'..'c' and ' '. */
static void write_vocab(const char *path, const char *model, const char *pre, uint64_t n_types) {
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "tokenizer.ggml.model", model), RP_OK);
    if (pre) assert_int_equal(rp_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), RP_OK);
    rp_str toks[] = {{"a", 1}, {"b", 1}, {"c", 1}, {"\xc4\xa0", 2}, {"ab", 2}, {"\xc4\xa0" "ab", 4}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6), RP_OK);
    int32_t types[6] = {1, 1, 1, 1, 1, 1};
    assert_int_equal(rp_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_I32, types, n_types), RP_OK);
    rp_str merges[] = {{"a b", 3}, {"\xc4\xa0 ab", 5}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
    rp_gguf_writer_free(w);
}

static rp_status load_path(const char *path, rp_tokenizer **t) {
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(path, &g);
    if (st != RP_OK) {
        print_message("gguf open: %s\n", rp_last_error());
        return st;
    }
    st = rp_tokenizer_load(g, t);
    rp_gguf_close(g);
    return st;
}

static void test_load_errors(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/tok-vocab.gguf", rp_test_tmpdir());
    rp_tokenizer *t = NULL;

    write_vocab(path, "gpt2", "no-such-pre", 6);
    assert_int_equal(load_path(path, &t), RP_ERR_UNSUPPORTED);
    assert_null(t);
    /* the error names the value and lists what is supported */
    assert_non_null(strstr(rp_last_error(), "'no-such-pre'"));
    assert_non_null(strstr(rp_last_error(), "llama-bpe"));
    assert_non_null(strstr(rp_last_error(), "tekken"));
    assert_non_null(strstr(rp_last_error(), "laguna"));

    write_vocab(path, "t5", NULL, 6);
    assert_int_equal(load_path(path, &t), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "t5"));
    assert_non_null(strstr(rp_last_error(), "bert"));   /* the supported ones are listed */

    write_vocab(path, "bert", NULL, 6);   /* WordPiece needs [UNK], [CLS] and [SEP] (BERT's 100-102 by default) */
    assert_int_equal(load_path(path, &t), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "[UNK]"));

    write_vocab(path, "gpt2", "qwen2", 3);   /* token_type shorter than tokens */
    assert_int_equal(load_path(path, &t), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "token_type"));

    /* a tiny well-formed vocab works, with merges applied by rank */
    write_vocab(path, "gpt2", "qwen2", 6);
    assert_int_equal(load_path(path, &t), RP_OK);
    assert_int_equal(rp_tokenizer_bos(t), -1);
    assert_false(rp_tokenizer_add_bos(t));
    size_t n;
    rp_token *ids = encode_all(t, "ab abc", 6, true, true, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 4);   /* ab */
    assert_int_equal(ids[1], 5);   /* Ġab */
    assert_int_equal(ids[2], 2);   /* c */
    free(ids);
    rp_tokenizer_free(t);
    t = NULL;

    assert_int_equal(rp_tokenizer_load(NULL, &t), RP_ERR_INVALID_ARG);
    remove(path);
}

/* ---- performance: load time, linear encoding of long / pathological input ---- */

static void test_performance(void **state) {
    (void)state;
    double load_s;
    rp_tokenizer *t = load_tok("models/vocab/llama3-bpe.vocab.gguf", &load_s);
    const char *p = rp_test_shared("models/vocab/llama3-bpe.extra-tests.jsonl");
    RP_REQUIRE_SHARED(p, "models/vocab/llama3-bpe.extra-tests.jsonl");
    size_t jl;
    char *j = rp_test_read_file(p, &jl);
    assert_non_null(j);
    /* ~1 MiB of mixed English / code / JSON / unicode text */
    size_t cap = 1 << 20, m = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    while (m + jl <= cap) {
        memcpy(big + m, j, jl);
        m += jl;
    }
    double t0 = now_s();
    size_t n;
    rp_token *ids = encode_all(t, big, m, false, false, &n);
    double enc_s = (now_s() - t0) / 2;   /* encode_all runs the encoder twice (size, then fill) */
    print_message("llama3: load %.1f ms; encode %zu bytes -> %zu tokens in %.1f ms (%.1f MB/s)\n", load_s * 1e3, m, n,
                  enc_s * 1e3, (double)m / enc_s / 1e6);
    free(ids);

    /* Pathological single pre-tokens must not be quadratic. */
    const size_t big_n = 256 * 1024;
    const char fills[] = {' ', 'a', '7', '\n', '!'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(big, fills[f], big_n);
        t0 = now_s();
        ids = encode_all(t, big, big_n, false, false, &n);
        double dt = now_s() - t0;
        print_message("  %zu x '%s': %zu tokens in %.1f ms\n", big_n, fills[f] == '\n' ? "\\n" : (char[]){fills[f], 0},
                      n, dt * 1e3);
        assert_true(dt < 20.0);
        size_t dl;
        char *dec = decode_all(t, ids, n, false, false, &dl);
        assert_int_equal(dl, big_n);
        assert_memory_equal(dec, big, big_n);
        free(dec);
        free(ids);
    }
    rp_tokenizer_free(t);

    t = load_tok("models/vocab/ggml-vocab-llama-spm.gguf", &load_s);
    memset(big, 'a', big_n);
    t0 = now_s();
    ids = encode_all(t, big, big_n, false, false, &n);
    print_message("spm: load %.1f ms; %zu x 'a' -> %zu tokens in %.1f ms\n", load_s * 1e3, big_n, n,
                  (now_s() - t0) * 1e3);
    free(ids);
    rp_tokenizer_free(t);
    free(big);
    free(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_llama_bpe),
        cmocka_unit_test(test_vectors_qwen2),
        cmocka_unit_test(test_vectors_llama_spm),
        cmocka_unit_test(test_vectors_gpt2),
        cmocka_unit_test(test_extra_llama3),
        cmocka_unit_test(test_extra_qwen3),
        cmocka_unit_test(test_pretok_vectors),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_specials_llama3),
        cmocka_unit_test(test_specials_qwen3),
        cmocka_unit_test(test_specials_spm),
        cmocka_unit_test(test_detok_stream),
        cmocka_unit_test(test_buffers_and_invalid_utf8),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_performance),
    };
    return rp_test_main(tests, NULL, NULL);
}
