/* test_gguf.c — GGUF reader/writer tests: real files, round trips, and corruption (truncation, bad fields, byte flips). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "testutil.h"
#include "core/error.h"
#include "gguf/gguf.h"

/* ------------------------------------------------------------------------- */
/* helpers                                                                     */

/* Raw little-endian byte builder, for files the writer refuses to produce. */
typedef struct tb {
    uint8_t *p;
    size_t n, cap;
} tb;

static void tb_bytes(tb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void tb_u8(tb *b, uint8_t v) { tb_bytes(b, &v, 1); }
static void tb_u32(tb *b, uint32_t v) { tb_bytes(b, &v, 4); }
static void tb_u64(tb *b, uint64_t v) { tb_bytes(b, &v, 8); }
static void tb_str(tb *b, const char *s) { tb_u64(b, strlen(s)); tb_bytes(b, s, strlen(s)); }
static void tb_zeros(tb *b, size_t n) { for (size_t i = 0; i < n; i++) tb_u8(b, 0); }
static void tb_pad(tb *b, size_t align) { while (b->n % align) tb_u8(b, 0); }
static void tb_header(tb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    tb_bytes(b, "GGUF", 4); tb_u32(b, version); tb_u64(b, nt); tb_u64(b, nkv);
}
static void tb_kv_u32(tb *b, const char *key, uint32_t v) { tb_str(b, key); tb_u32(b, RP_GGUF_U32); tb_u32(b, v); }
static void tb_kv_str(tb *b, const char *key, const char *v) { tb_str(b, key); tb_u32(b, RP_GGUF_STRING); tb_str(b, v); }
static void tb_tensor(tb *b, const char *name, uint32_t nd, const int64_t *ne, uint32_t type, uint64_t off) {
    tb_str(b, name); tb_u32(b, nd);
    for (uint32_t d = 0; d < nd; d++) tb_u64(b, (uint64_t)ne[d]);
    tb_u32(b, type); tb_u64(b, off);
}
static void tb_free(tb *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* Opens an exactly-sized heap copy so ASan flags any read past the end. */
static rp_status open_copy(const void *buf, size_t len, rp_gguf **out) {
    void *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, buf, len);
    rp_status st = rp_gguf_open_memory(copy, len, out);
    if (st != RP_OK) free(copy);
    return st;
}
/* The copy made by open_copy must outlive the handle; we free it after close. */
static rp_gguf *open_ok(const void *buf, size_t len, void **copy_out) {
    void *copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, buf, len);
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open_memory(copy, len, &g);
    if (st != RP_OK) print_message("unexpected failure: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    *copy_out = copy;
    return g;
}

/* Expects open to fail with `want`, with a message naming `field` and a byte offset. */
static void expect_fail(const void *buf, size_t len, rp_status want, const char *field) {
    rp_gguf *g = (rp_gguf *)0x1;
    rp_error_clear();
    rp_status st = open_copy(buf, len, &g);
    const char *msg = rp_last_error();
    if (st != want || !strstr(msg, field) || !strstr(msg, "byte"))
        print_message("want %s mentioning '%s', got %s: '%s'\n", rp_strerror(want), field, rp_strerror(st), msg);
    assert_int_equal(st, want);
    assert_null(g);
    assert_true(strlen(msg) > 0);
    assert_non_null(strstr(msg, "gguf"));
    assert_non_null(strstr(msg, "byte"));
    assert_non_null(strstr(msg, field));
}

static void str_expect(rp_str s, const char *want) {
    if (!rp_str_eq(s, want)) print_message("got '%.*s', want '%s'\n", (int)s.len, s.ptr, want);
    assert_true(rp_str_eq(s, want));
}

static char *tmp_path(const char *name) {
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 4096, "%s/%s", rp_test_tmpdir(), name);
    return p;
}

/* Walks everything an opened file exposes (as the fuzzer does); returns a checksum. */
static uint64_t walk(const rp_gguf *g) {
    uint64_t sum = 0;
    char buf[256];
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        rp_str k = rp_gguf_kv_key(g, i);
        assert_true(k.len > 0);
        rp_gguf_kv_format(g, i, buf, sizeof buf);
        sum += strlen(buf);
        if (rp_gguf_kv_type(g, i) == RP_GGUF_ARRAY && rp_gguf_kv_arr_type(g, i) == RP_GGUF_STRING)
            for (uint64_t j = 0; j < rp_gguf_kv_arr_len(g, i); j++) {
                rp_str s = rp_gguf_kv_arr_str(g, i, j);
                for (uint64_t c = 0; c < s.len; c++) sum += (uint8_t)s.ptr[c];
            }
    }
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        assert_non_null(t);
        const uint8_t *d = t->data;
        if (t->nbytes) sum += d[0] + d[t->nbytes - 1];
        assert_true(t->offset + t->nbytes <= rp_gguf_file_size(g) - rp_gguf_data_offset(g));
    }
    return sum;
}

/* ------------------------------------------------------------------------- */
/* real files (expected values from ../shared/models/SOURCES.md)              */

typedef struct texp {
    const char *name;
    uint32_t n_dims;
    int64_t ne0, ne1;
    rp_type type;
    uint64_t offset;
} texp;

static rp_gguf *open_shared(const char *rel, char **file, size_t *flen) {
    const char *path = rp_test_shared(rel);
    if (!path) return NULL;
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(path, &g);
    if (st != RP_OK) print_message("%s: %s\n", rel, rp_last_error());
    assert_int_equal(st, RP_OK);
    if (file) {
        *file = rp_test_read_file(path, flen);
        assert_non_null(*file);
    }
    return g;
}

static void check_tensors(const rp_gguf *g, const char *file, const texp *e, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        assert_non_null(t);
        str_expect(t->name, e[i].name);
        assert_ptr_equal(rp_gguf_find_tensor(g, e[i].name), t);
        assert_int_equal(t->n_dims, e[i].n_dims);
        assert_int_equal(t->ne[0], e[i].ne0);
        assert_int_equal(t->ne[1], e[i].ne1);
        assert_int_equal(t->ne[2], 1);
        assert_int_equal(t->ne[3], 1);
        assert_int_equal(t->type, e[i].type);
        assert_int_equal(t->offset, e[i].offset);
        size_t want = rp_type_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
        assert_int_equal(t->nbytes, want);
        /* data points at data_offset + offset in the file; the bytes must match. */
        assert_memory_equal(t->data, file + rp_gguf_data_offset(g) + t->offset, t->nbytes);
    }
}

static void test_real_stories_f32(void **state) {
    (void)state;
    const char *rel = "models/stories260K.gguf";
    char *file = NULL;
    size_t flen = 0;
    rp_gguf *g = open_shared(rel, &file, &flen);
    RP_REQUIRE_SHARED(g, rel);
    assert_int_equal(rp_gguf_version(g), 3);
    assert_int_equal(rp_gguf_n_tensors(g), 48);
    assert_int_equal(rp_gguf_n_kv(g), 24);
    assert_int_equal(rp_gguf_file_size(g), 1185536);
    assert_int_equal(flen, 1185536);
    assert_int_equal(rp_gguf_data_offset(g), 14336);
    assert_int_equal(rp_gguf_alignment(g), 32);

    static const char *keys[24] = {
        "general.architecture", "general.name", "general.file_type", "general.license", "llama.vocab_size",
        "llama.context_length", "llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
        "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.dimension_count",
        "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
        "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
    for (int i = 0; i < 24; i++) {
        str_expect(rp_gguf_kv_key(g, (uint64_t)i), keys[i]);
        assert_int_equal(rp_gguf_find_key(g, keys[i]), i);
    }
    assert_int_equal(rp_gguf_find_key(g, "llama.nope"), -1);

    rp_str s;
    uint32_t u;
    float f;
    bool b;
    assert_int_equal(rp_gguf_get_str(g, "general.architecture", &s), RP_OK);
    str_expect(s, "llama");
    assert_int_equal(rp_gguf_get_str(g, "general.name", &s), RP_OK);
    str_expect(s, "stories260K");
    static const struct { const char *k; uint32_t v; } u32s[] = {
        {"general.file_type", 0}, {"llama.vocab_size", 512}, {"llama.context_length", 512},
        {"llama.embedding_length", 64}, {"llama.feed_forward_length", 172}, {"llama.block_count", 5},
        {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", 4},
        {"llama.rope.dimension_count", 8}, {"tokenizer.ggml.bos_token_id", 1},
        {"tokenizer.ggml.eos_token_id", 2}, {"tokenizer.ggml.unknown_token_id", 0}};
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        assert_int_equal(rp_gguf_get_u32(g, u32s[i].k, &u), RP_OK);
        assert_int_equal(u, u32s[i].v);
    }
    assert_int_equal(rp_gguf_get_f32(g, "llama.rope.freq_base", &f), RP_OK);
    assert_true(f == 10000.0f);
    assert_int_equal(rp_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), RP_OK);
    assert_true(f == 1e-5f);
    assert_int_equal(rp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), RP_OK);
    assert_true(b);
    assert_int_equal(rp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b), RP_OK);
    assert_false(b);

    rp_gguf_vtype et;
    uint64_t n;
    int64_t idx;
    assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &idx), RP_OK);
    assert_int_equal(et, RP_GGUF_STRING);
    assert_int_equal(n, 512);
    assert_int_equal(idx, 16);
    str_expect(rp_gguf_kv_arr_str(g, 16, 0), "<unk>");
    str_expect(rp_gguf_kv_arr_str(g, 16, 1), "<s>");
    str_expect(rp_gguf_kv_arr_str(g, 16, 2), "</s>");
    str_expect(rp_gguf_kv_arr_str(g, 16, 3), "<0x00>");
    str_expect(rp_gguf_kv_arr_str(g, 16, 4), "<0x01>");
    assert_int_equal(rp_gguf_kv_arr_str(g, 16, 512).len, 0);   /* out of range: empty view */
    assert_null(rp_gguf_kv_arr_data(g, 16));                   /* strings have no packed data */

    char buf[256];
    rp_gguf_kv_format(g, 16, buf, sizeof buf);
    assert_string_equal(buf, "[str x 512] ['<unk>', '<s>', '</s>', '<0x00>', '<0x01>', ...]");
    rp_gguf_kv_format(g, 18, buf, sizeof buf);
    assert_string_equal(buf, "[i32 x 512] [2, 3, 3, 6, 6, ...]");
    rp_gguf_kv_format(g, 0, buf, sizeof buf);
    assert_string_equal(buf, "'llama'");
    rp_gguf_kv_format(g, 8, buf, sizeof buf);
    assert_string_equal(buf, "5");
    rp_gguf_kv_format(g, 12, buf, sizeof buf);
    assert_string_equal(buf, "10000");
    rp_gguf_kv_format(g, 22, buf, sizeof buf);
    assert_string_equal(buf, "true");

    assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &idx), RP_OK);
    assert_int_equal(et, RP_GGUF_I32);
    const uint8_t *tt = rp_gguf_kv_arr_data(g, (uint64_t)idx);
    int32_t types[5];
    memcpy(types, tt, sizeof types);
    assert_int_equal(types[0], 2);
    assert_int_equal(types[1], 3);
    assert_int_equal(types[3], 6);
    assert_int_equal(rp_gguf_kv_arr_type(g, 17), RP_GGUF_F32);
    assert_int_equal(rp_gguf_kv_arr_len(g, 17), 512);

    static const texp t[] = {
        {"token_embd.weight", 2, 64, 512, RP_TYPE_F32, 0},
        {"output_norm.weight", 1, 64, 1, RP_TYPE_F32, 131072},
        {"output.weight", 2, 64, 512, RP_TYPE_F32, 131328},
        {"blk.0.attn_norm.weight", 1, 64, 1, RP_TYPE_F32, 262400},
        {"blk.0.attn_q.weight", 2, 64, 64, RP_TYPE_F32, 262656},
        {"blk.0.attn_k.weight", 2, 64, 32, RP_TYPE_F32, 279040},
        {"blk.0.attn_v.weight", 2, 64, 32, RP_TYPE_F32, 287232},
        {"blk.0.attn_output.weight", 2, 64, 64, RP_TYPE_F32, 295424},
        {"blk.0.ffn_norm.weight", 1, 64, 1, RP_TYPE_F32, 311808},
        {"blk.0.ffn_gate.weight", 2, 64, 172, RP_TYPE_F32, 312064},
        {"blk.0.ffn_down.weight", 2, 172, 64, RP_TYPE_F32, 356096},
        {"blk.0.ffn_up.weight", 2, 64, 172, RP_TYPE_F32, 400128},
    };
    check_tensors(g, file, t, sizeof t / sizeof t[0]);
    assert_non_null(rp_gguf_find_tensor(g, "blk.4.ffn_up.weight"));
    assert_null(rp_gguf_find_tensor(g, "blk.5.ffn_up.weight"));
    assert_null(rp_gguf_tensor_at(g, 48));
    /* The last tensor ends exactly at the end of the file. */
    const rp_gguf_tensor *last = rp_gguf_tensor_at(g, 47);
    assert_int_equal(rp_gguf_data_offset(g) + last->offset + last->nbytes, flen);
    walk(g);
    rp_gguf_close(g);
    free(file);
}

static void test_real_stories_quant(void **state) {
    (void)state;
    static const texp q8[] = {
        {"token_embd.weight", 2, 64, 512, RP_TYPE_Q8_0, 0},
        {"output_norm.weight", 1, 64, 1, RP_TYPE_F32, 34816},
        {"output.weight", 2, 64, 512, RP_TYPE_Q8_0, 35072},
        {"blk.0.attn_norm.weight", 1, 64, 1, RP_TYPE_F32, 69888},
        {"blk.0.attn_q.weight", 2, 64, 64, RP_TYPE_Q8_0, 70144},
        {"blk.0.attn_k.weight", 2, 64, 32, RP_TYPE_Q8_0, 74496},
        {"blk.0.attn_v.weight", 2, 64, 32, RP_TYPE_Q8_0, 76672},
        {"blk.0.attn_output.weight", 2, 64, 64, RP_TYPE_Q8_0, 78848},
        {"blk.0.ffn_norm.weight", 1, 64, 1, RP_TYPE_F32, 83200},
        {"blk.0.ffn_gate.weight", 2, 64, 172, RP_TYPE_Q8_0, 83456},
        {"blk.0.ffn_down.weight", 2, 172, 64, RP_TYPE_F32, 95168},
        {"blk.0.ffn_up.weight", 2, 64, 172, RP_TYPE_Q8_0, 139200},
    };
    static const texp q4[] = {
        {"token_embd.weight", 2, 64, 512, RP_TYPE_Q4_0, 0},
        {"output_norm.weight", 1, 64, 1, RP_TYPE_F32, 18432},
        {"output.weight", 2, 64, 512, RP_TYPE_Q4_0, 18688},
        {"blk.0.attn_norm.weight", 1, 64, 1, RP_TYPE_F32, 37120},
        {"blk.0.attn_q.weight", 2, 64, 64, RP_TYPE_Q4_0, 37376},
        {"blk.0.attn_k.weight", 2, 64, 32, RP_TYPE_Q4_0, 39680},
        {"blk.0.attn_v.weight", 2, 64, 32, RP_TYPE_Q4_0, 40832},
        {"blk.0.attn_output.weight", 2, 64, 64, RP_TYPE_Q4_0, 41984},
        {"blk.0.ffn_norm.weight", 1, 64, 1, RP_TYPE_F32, 44288},
        {"blk.0.ffn_gate.weight", 2, 64, 172, RP_TYPE_Q4_0, 44544},
        {"blk.0.ffn_down.weight", 2, 172, 64, RP_TYPE_F32, 50752},
        {"blk.0.ffn_up.weight", 2, 64, 172, RP_TYPE_Q4_0, 94784},
    };
    static const struct { const char *rel; uint64_t size; uint32_t ftype; const char *name; const texp *t; } files[] = {
        {"models/stories260K-q8_0.gguf", 489328, 7, "stories260K-q8_0", q8},
        {"models/stories260K-q4_0.gguf", 370800, 2, "stories260K-q4_0", q4},
    };
    for (int k = 0; k < 2; k++) {
        char *file = NULL;
        size_t flen = 0;
        rp_gguf *g = open_shared(files[k].rel, &file, &flen);
        RP_REQUIRE_SHARED(g, files[k].rel);
        assert_int_equal(rp_gguf_n_tensors(g), 48);
        assert_int_equal(rp_gguf_n_kv(g), 24);
        assert_int_equal(rp_gguf_file_size(g), files[k].size);
        assert_int_equal(rp_gguf_data_offset(g), 14336);
        uint32_t ft;
        rp_str s;
        assert_int_equal(rp_gguf_get_u32(g, "general.file_type", &ft), RP_OK);
        assert_int_equal(ft, files[k].ftype);
        assert_int_equal(rp_gguf_get_str(g, "general.name", &s), RP_OK);
        str_expect(s, files[k].name);
        check_tensors(g, file, files[k].t, 12);
        walk(g);
        rp_gguf_close(g);
        free(file);
    }
}

static void test_real_llama2_tiny(void **state) {
    (void)state;
    const char *rel = "models/llama-2-tiny-random.gguf";
    char *file = NULL;
    size_t flen = 0;
    rp_gguf *g = open_shared(rel, &file, &flen);
    RP_REQUIRE_SHARED(g, rel);
    assert_int_equal(rp_gguf_version(g), 3);
    assert_int_equal(rp_gguf_n_tensors(g), 12);
    assert_int_equal(rp_gguf_n_kv(g), 18);
    assert_int_equal(rp_gguf_file_size(g), 1750560);
    assert_int_equal(rp_gguf_data_offset(g), 724416);
    rp_str s;
    assert_int_equal(rp_gguf_get_str(g, "general.name", &s), RP_OK);
    str_expect(s, "LLaMA v2");
    uint32_t u;
    assert_int_equal(rp_gguf_get_u32(g, "llama.context_length", &u), RP_OK);
    assert_int_equal(u, 4096);
    rp_gguf_vtype et;
    uint64_t n;
    int64_t idx;
    assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &idx), RP_OK);
    assert_int_equal(n, 32000);
    str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, 0), "<unk>");
    str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, 259), "\xe2\x96\x81\xe2\x96\x81");   /* "▁▁" */
    static const texp t[] = {
        {"token_embd.weight", 2, 8, 32000, RP_TYPE_F16, 0},
        {"blk.0.attn_q.weight", 2, 8, 8, RP_TYPE_F16, 512000},
        {"blk.0.attn_k.weight", 2, 8, 8, RP_TYPE_F16, 512128},
        {"blk.0.attn_v.weight", 2, 8, 8, RP_TYPE_F16, 512256},
        {"blk.0.attn_output.weight", 2, 8, 8, RP_TYPE_F16, 512384},
        {"blk.0.ffn_gate.weight", 2, 8, 32, RP_TYPE_F16, 512512},
        {"blk.0.ffn_up.weight", 2, 8, 32, RP_TYPE_F16, 513024},
        {"blk.0.ffn_down.weight", 2, 32, 8, RP_TYPE_F16, 513536},
        {"blk.0.attn_norm.weight", 1, 8, 1, RP_TYPE_F32, 514048},
        {"blk.0.ffn_norm.weight", 1, 8, 1, RP_TYPE_F32, 514080},
        {"output_norm.weight", 1, 8, 1, RP_TYPE_F32, 514112},
        {"output.weight", 2, 8, 32000, RP_TYPE_F16, 514144},
    };
    check_tensors(g, file, t, 12);
    walk(g);
    rp_gguf_close(g);
    free(file);
}

static void test_real_vocab_only(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        uint64_t size, data_offset, n_kv, n_tok, n_merges;
        const char *tok0, *merge0, *tok_hi;
        uint64_t tok_hi_id;
        uint32_t bos;
    } v[] = {
        {"models/vocab/llama3-bpe.vocab.gguf", 7818220, 7818240, 13, 128256, 280147, "!", "\xc4\xa0 \xc4\xa0",
         "<|begin_of_text|>", 128000, 128000},
        {"models/vocab/qwen3-bpe.vocab.gguf", 5932288, 5932288, 14, 151936, 151387, "!", "\xc4\xa0 \xc4\xa0",
         "<|endoftext|>", 151643, 151643},
        {"models/vocab/ggml-vocab-llama-spm.gguf", 723869, 723872, 22, 32000, 0, "<unk>", NULL, "<s>", 1, 1},
        {"models/vocab/ggml-vocab-gpt-2.gguf", 1766807, 1766816, 16, 50257, 50000, "!", "\xc4\xa0 t",
         "<|endoftext|>", 50256, 50256},
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        rp_gguf *g = open_shared(v[k].rel, NULL, NULL);
        RP_REQUIRE_SHARED(g, v[k].rel);
        assert_int_equal(rp_gguf_n_tensors(g), 0);
        assert_int_equal(rp_gguf_file_size(g), v[k].size);
        assert_int_equal(rp_gguf_data_offset(g), v[k].data_offset);   /* may be past EOF: nothing is read there */
        assert_int_equal(rp_gguf_n_kv(g), v[k].n_kv);
        rp_gguf_vtype et;
        uint64_t n;
        int64_t idx;
        assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &idx), RP_OK);
        assert_int_equal(et, RP_GGUF_STRING);
        assert_int_equal(n, v[k].n_tok);
        str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, 0), v[k].tok0);
        str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, v[k].tok_hi_id), v[k].tok_hi);
        if (v[k].merge0) {
            assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &idx), RP_OK);
            assert_int_equal(n, v[k].n_merges);
            str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, 0), v[k].merge0);
        } else {
            assert_int_equal(rp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &idx), RP_ERR_NOT_FOUND);
        }
        uint32_t bos;
        assert_int_equal(rp_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos), RP_OK);
        assert_int_equal(bos, v[k].bos);
        walk(g);
        rp_gguf_close(g);
    }
}

/* ------------------------------------------------------------------------- */
/* writer round trip                                                           */

typedef struct fill_ctx {
    int calls;
    uint64_t last_nbytes;
    rp_status fail_with;
} fill_ctx;

static uint8_t pattern_byte(const char *name, uint64_t i) {
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    return (uint8_t)((h >> 8) + i * 131 + (i >> 8));
}

static rp_status fill_pattern(void *user, const char *name, void *dst, uint64_t nbytes) {
    fill_ctx *c = user;
    c->calls++;
    c->last_nbytes = nbytes;
    if (c->fail_with != RP_OK) return rp_errorf(c->fail_with, "fill refused '%s'", name);
    for (uint64_t i = 0; i < nbytes; i++) ((uint8_t *)dst)[i] = pattern_byte(name, i);
    return RP_OK;
}

typedef struct wtensor {
    const char *name;
    rp_type type;
    uint32_t n_dims;
    int64_t ne[4];
    bool use_fill;
} wtensor;

static const wtensor k_wt[] = {
    {"tok.f32", RP_TYPE_F32, 2, {8, 3, 1, 1}, false},
    {"norm.i32", RP_TYPE_I32, 1, {5, 1, 1, 1}, false},      /* 20 bytes: forces padding */
    {"w.f16", RP_TYPE_F16, 3, {16, 2, 3, 1}, false},
    {"w.q8_0", RP_TYPE_Q8_0, 2, {64, 2, 1, 1}, false},
    {"w.q4_0", RP_TYPE_Q4_0, 4, {32, 3, 1, 2}, false},
    {"empty.f32", RP_TYPE_F32, 2, {0, 4, 1, 1}, false},     /* zero-size tensor */
    {"w.q4_k", RP_TYPE_Q4_K, 2, {256, 1, 1, 1}, true},
    {"w.q6_k", RP_TYPE_Q6_K, 2, {256, 2, 1, 1}, true},
    {"w.bf16", RP_TYPE_BF16, 1, {48, 1, 1, 1}, false},
};
#define N_WT (sizeof k_wt / sizeof k_wt[0])

static uint64_t wt_nbytes(const wtensor *t) {
    return rp_type_row_size(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static const char *k_strs[] = {"", "a", "hello world", "\xc4\xa0the", "quote ' and \\ back", "\xe2\x96\x81\xe2\x96\x81"};
#define N_STRS (sizeof k_strs / sizeof k_strs[0])

/* Builds the reference writer: every scalar type, strings, every array type, tensors of several types. */
static rp_gguf_writer *make_full_writer(uint8_t **bufs, fill_ctx *fc, uint32_t alignment) {
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    int64_t i64 = INT64_MIN + 7; double f64 = -1.0 / 3.0;
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.u8", RP_GGUF_U8, &u8), RP_OK);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.i8", RP_GGUF_I8, &i8), RP_OK);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.u16", RP_GGUF_U16, &u16), RP_OK);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.i16", RP_GGUF_I16, &i16), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "t.u32", 4000000000u), RP_OK);
    assert_int_equal(rp_gguf_writer_set_i32(w, "t.i32", -2000000000), RP_OK);
    assert_int_equal(rp_gguf_writer_set_f32(w, "t.f32", 1e-5f), RP_OK);
    assert_int_equal(rp_gguf_writer_set_bool(w, "t.bool", true), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "t.str", "llama"), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "t.str_empty", ""), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 5), RP_OK);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.i64", RP_GGUF_I64, &i64), RP_OK);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "t.f64", RP_GGUF_F64, &f64), RP_OK);
    if (alignment) assert_int_equal(rp_gguf_writer_set_u32(w, "general.alignment", alignment), RP_OK);

    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 0, 127};
    static const uint16_t a_u16[] = {0, 65535};
    static const int16_t a_i16[] = {-32768, 5, 32767};
    static const uint32_t a_u32[] = {1, 2, 3, 4, 5, 6, 7};
    static const int32_t a_i32[] = {-1, 2, -3};
    static const float a_f32[] = {0.5f, -1.25f, 3.0e38f};
    static const bool a_bool[] = {true, false, true, true};
    static const uint64_t a_u64[] = {UINT64_MAX, 0};
    static const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -1};
    static const double a_f64[] = {1e300, -0.0};
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.u8", RP_GGUF_U8, a_u8, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.i8", RP_GGUF_I8, a_i8, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.u16", RP_GGUF_U16, a_u16, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.i16", RP_GGUF_I16, a_i16, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.u32", RP_GGUF_U32, a_u32, 7), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.i32", RP_GGUF_I32, a_i32, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.f32", RP_GGUF_F32, a_f32, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.bool", RP_GGUF_BOOL, a_bool, 4), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.u64", RP_GGUF_U64, a_u64, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.i64", RP_GGUF_I64, a_i64, 3), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.f64", RP_GGUF_F64, a_f64, 2), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr(w, "a.empty", RP_GGUF_U32, NULL, 0), RP_OK);
    rp_str strs[N_STRS];
    for (size_t i = 0; i < N_STRS; i++) strs[i] = (rp_str){k_strs[i], strlen(k_strs[i])};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "a.str", strs, N_STRS), RP_OK);
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0), RP_OK);

    for (size_t i = 0; i < N_WT; i++) {
        const wtensor *t = &k_wt[i];
        uint64_t nb = wt_nbytes(t);
        if (t->use_fill) {
            assert_int_equal(rp_gguf_writer_add_tensor_fill(w, t->name, t->type, t->n_dims, t->ne, fill_pattern, fc),
                             RP_OK);
            bufs[i] = NULL;
        } else {
            bufs[i] = malloc(nb ? nb : 1);
            for (uint64_t j = 0; j < nb; j++) bufs[i][j] = pattern_byte(t->name, j);
            assert_int_equal(rp_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, bufs[i], nb), RP_OK);
        }
    }
    return w;
}

/* Expected encoded value bytes (after the type id) for the scalar keys. */
static void expect_raw(const rp_gguf *g, const char *key, rp_gguf_vtype type, const void *bytes, uint64_t n) {
    int64_t i = rp_gguf_find_key(g, key);
    assert_true(i >= 0);
    assert_int_equal(rp_gguf_kv_type(g, (uint64_t)i), type);
    uint64_t len;
    const void *raw = rp_gguf_kv_raw(g, (uint64_t)i, &len);
    assert_int_equal(len, n);
    assert_memory_equal(raw, bytes, n);
}

static void expect_arr(const rp_gguf *g, const char *key, rp_gguf_vtype et, const void *data, uint64_t n,
                       uint64_t esz) {
    rp_gguf_vtype t;
    uint64_t len;
    int64_t idx;
    assert_int_equal(rp_gguf_get_arr(g, key, &t, &len, &idx), RP_OK);
    assert_int_equal(t, et);
    assert_int_equal(len, n);
    if (n) assert_memory_equal(rp_gguf_kv_arr_data(g, (uint64_t)idx), data, n * esz);
}

static void check_full_file(const char *path, uint32_t alignment, uint8_t **bufs) {
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(path, &g);
    if (st != RP_OK) print_message("%s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    uint32_t align = alignment ? alignment : 32;
    assert_int_equal(rp_gguf_version(g), 3);
    assert_int_equal(rp_gguf_alignment(g), align);
    assert_int_equal(rp_gguf_n_kv(g), 27 + (alignment ? 1 : 0));
    assert_int_equal(rp_gguf_n_tensors(g), N_WT);
    assert_int_equal(rp_gguf_data_offset(g) % align, 0);

    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 1e-5f; uint8_t bl = 1;
    uint64_t u64 = UINT64_MAX - 5; int64_t i64 = INT64_MIN + 7; double f64 = -1.0 / 3.0;
    expect_raw(g, "t.u8", RP_GGUF_U8, &u8, 1);
    expect_raw(g, "t.i8", RP_GGUF_I8, &i8, 1);
    expect_raw(g, "t.u16", RP_GGUF_U16, &u16, 2);
    expect_raw(g, "t.i16", RP_GGUF_I16, &i16, 2);
    expect_raw(g, "t.u32", RP_GGUF_U32, &u32, 4);
    expect_raw(g, "t.i32", RP_GGUF_I32, &i32, 4);
    expect_raw(g, "t.f32", RP_GGUF_F32, &f32, 4);
    expect_raw(g, "t.bool", RP_GGUF_BOOL, &bl, 1);
    expect_raw(g, "t.u64", RP_GGUF_U64, &u64, 8);
    expect_raw(g, "t.i64", RP_GGUF_I64, &i64, 8);
    expect_raw(g, "t.f64", RP_GGUF_F64, &f64, 8);
    expect_raw(g, "t.str", RP_GGUF_STRING, "\x05\0\0\0\0\0\0\0llama", 13);
    expect_raw(g, "t.str_empty", RP_GGUF_STRING, "\0\0\0\0\0\0\0\0", 8);

    /* Typed getters, including cross-type integer reads and range checks. */
    uint32_t gu32; int32_t gi32; uint64_t gu64; float gf; bool gb; rp_str gs;
    assert_int_equal(rp_gguf_get_u32(g, "t.u8", &gu32), RP_OK); assert_int_equal(gu32, 200);
    assert_int_equal(rp_gguf_get_i32(g, "t.i8", &gi32), RP_OK); assert_int_equal(gi32, -100);
    assert_int_equal(rp_gguf_get_u32(g, "t.u16", &gu32), RP_OK); assert_int_equal(gu32, 60000);
    assert_int_equal(rp_gguf_get_i32(g, "t.i16", &gi32), RP_OK); assert_int_equal(gi32, -30000);
    assert_int_equal(rp_gguf_get_u32(g, "t.u32", &gu32), RP_OK); assert_int_equal(gu32, 4000000000u);
    assert_int_equal(rp_gguf_get_u64(g, "t.u32", &gu64), RP_OK); assert_int_equal(gu64, 4000000000u);
    assert_int_equal(rp_gguf_get_i32(g, "t.i32", &gi32), RP_OK); assert_int_equal(gi32, -2000000000);
    assert_int_equal(rp_gguf_get_u64(g, "t.u64", &gu64), RP_OK); assert_true(gu64 == UINT64_MAX - 5);
    assert_int_equal(rp_gguf_get_f32(g, "t.f32", &gf), RP_OK); assert_true(gf == 1e-5f);
    assert_int_equal(rp_gguf_get_f32(g, "t.f64", &gf), RP_OK); assert_true(gf == (float)(-1.0 / 3.0));
    assert_int_equal(rp_gguf_get_bool(g, "t.bool", &gb), RP_OK); assert_true(gb);
    assert_int_equal(rp_gguf_get_str(g, "t.str", &gs), RP_OK); str_expect(gs, "llama");
    assert_int_equal(rp_gguf_get_str(g, "t.str_empty", &gs), RP_OK); assert_int_equal(gs.len, 0);
    /* value does not fit -> FORMAT with detail */
    rp_error_clear();
    assert_int_equal(rp_gguf_get_i32(g, "t.u32", &gi32), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "t.u32"));
    assert_int_equal(rp_gguf_get_u32(g, "t.i32", &gu32), RP_ERR_FORMAT);
    assert_int_equal(rp_gguf_get_u64(g, "t.i64", &gu64), RP_ERR_FORMAT);
    assert_int_equal(rp_gguf_get_u32(g, "t.u64", &gu32), RP_ERR_FORMAT);
    /* wrong type -> FORMAT naming the key and types */
    rp_error_clear();
    assert_int_equal(rp_gguf_get_u32(g, "t.str", &gu32), RP_ERR_FORMAT);
    assert_non_null(strstr(rp_last_error(), "t.str"));
    assert_non_null(strstr(rp_last_error(), "byte"));
    assert_int_equal(rp_gguf_get_str(g, "t.u32", &gs), RP_ERR_FORMAT);
    assert_int_equal(rp_gguf_get_bool(g, "t.u8", &gb), RP_ERR_FORMAT);
    assert_int_equal(rp_gguf_get_f32(g, "t.u32", &gf), RP_ERR_FORMAT);
    assert_int_equal(rp_gguf_get_arr(g, "t.u32", NULL, NULL, NULL), RP_ERR_FORMAT);
    /* missing -> NOT_FOUND, and the error text is left alone */
    rp_error_clear();
    assert_int_equal(rp_gguf_get_u32(g, "no.such.key", &gu32), RP_ERR_NOT_FOUND);
    assert_int_equal(rp_gguf_get_str(g, "no.such.key", &gs), RP_ERR_NOT_FOUND);
    assert_string_equal(rp_last_error(), "");

    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 0, 127};
    static const uint16_t a_u16[] = {0, 65535};
    static const int16_t a_i16[] = {-32768, 5, 32767};
    static const uint32_t a_u32[] = {1, 2, 3, 4, 5, 6, 7};
    static const int32_t a_i32[] = {-1, 2, -3};
    static const float a_f32[] = {0.5f, -1.25f, 3.0e38f};
    static const uint8_t a_bool[] = {1, 0, 1, 1};
    static const uint64_t a_u64[] = {UINT64_MAX, 0};
    static const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -1};
    static const double a_f64[] = {1e300, -0.0};
    expect_arr(g, "a.u8", RP_GGUF_U8, a_u8, 3, 1);
    expect_arr(g, "a.i8", RP_GGUF_I8, a_i8, 3, 1);
    expect_arr(g, "a.u16", RP_GGUF_U16, a_u16, 2, 2);
    expect_arr(g, "a.i16", RP_GGUF_I16, a_i16, 3, 2);
    expect_arr(g, "a.u32", RP_GGUF_U32, a_u32, 7, 4);
    expect_arr(g, "a.i32", RP_GGUF_I32, a_i32, 3, 4);
    expect_arr(g, "a.f32", RP_GGUF_F32, a_f32, 3, 4);
    expect_arr(g, "a.bool", RP_GGUF_BOOL, a_bool, 4, 1);
    expect_arr(g, "a.u64", RP_GGUF_U64, a_u64, 2, 8);
    expect_arr(g, "a.i64", RP_GGUF_I64, a_i64, 3, 8);
    expect_arr(g, "a.f64", RP_GGUF_F64, a_f64, 2, 8);
    expect_arr(g, "a.empty", RP_GGUF_U32, NULL, 0, 4);
    rp_gguf_vtype et;
    uint64_t n;
    int64_t idx;
    assert_int_equal(rp_gguf_get_arr(g, "a.str", &et, &n, &idx), RP_OK);
    assert_int_equal(et, RP_GGUF_STRING);
    assert_int_equal(n, N_STRS);
    for (size_t i = 0; i < N_STRS; i++) str_expect(rp_gguf_kv_arr_str(g, (uint64_t)idx, i), k_strs[i]);
    assert_int_equal(rp_gguf_get_arr(g, "a.str_empty", &et, &n, &idx), RP_OK);
    assert_int_equal(et, RP_GGUF_STRING);
    assert_int_equal(n, 0);

    /* Formatting of every kind. */
    char buf[256];
    static const struct { const char *k, *want; } fmts[] = {
        {"t.u8", "200"}, {"t.i8", "-100"}, {"t.u16", "60000"}, {"t.i16", "-30000"},
        {"t.u32", "4000000000"}, {"t.i32", "-2000000000"}, {"t.f32", "1e-05"}, {"t.bool", "true"},
        {"t.str", "'llama'"}, {"t.str_empty", "''"}, {"t.u64", "18446744073709551610"},
        {"t.i64", "-9223372036854775801"}, {"t.f64", "-0.3333333333333333"},
        {"a.u8", "[u8 x 3] [0, 1, 255]"}, {"a.bool", "[bool x 4] [true, false, true, true]"},
        {"a.u32", "[u32 x 7] [1, 2, 3, 4, 5, ...]"}, {"a.f32", "[f32 x 3] [0.5, -1.25, 3e+38]"},
        {"a.i64", "[i64 x 3] [-9223372036854775808, 9223372036854775807, -1]"},
        {"a.f64", "[f64 x 2] [1e+300, -0]"}, {"a.empty", "[u32 x 0] []"},
        {"a.str", "[str x 6] ['', 'a', 'hello world', '\xc4\xa0the', 'quote \\' and \\\\ back', ...]"},
        {"a.str_empty", "[str x 0] []"},
    };
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        int64_t k = rp_gguf_find_key(g, fmts[i].k);
        assert_true(k >= 0);
        rp_gguf_kv_format(g, (uint64_t)k, buf, sizeof buf);
        if (strcmp(buf, fmts[i].want) != 0) print_message("%s: got %s want %s\n", fmts[i].k, buf, fmts[i].want);
        assert_string_equal(buf, fmts[i].want);
    }
    /* Tiny buffers: always NUL-terminated, never overrun (canary after cap). */
    for (size_t cap = 1; cap < 40; cap++) {
        char small[64];
        memset(small, 'Z', sizeof small);
        rp_gguf_kv_format(g, (uint64_t)rp_gguf_find_key(g, "a.str"), small, cap);
        assert_true(strlen(small) < cap);
        assert_int_equal(small[cap], 'Z');
    }

    /* Tensors: shape, type, aligned offsets, bytes. */
    uint64_t data_off = rp_gguf_data_offset(g);
    for (size_t i = 0; i < N_WT; i++) {
        const wtensor *e = &k_wt[i];
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        assert_non_null(t);
        assert_ptr_equal(rp_gguf_find_tensor(g, e->name), t);
        str_expect(t->name, e->name);
        assert_int_equal(t->type, e->type);
        assert_int_equal(t->n_dims, e->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], e->ne[d]);
        assert_int_equal(t->nbytes, wt_nbytes(e));
        assert_int_equal(t->offset % align, 0);
        assert_int_equal((data_off + t->offset) % align, 0);
        for (uint64_t j = 0; j < t->nbytes; j++)
            if (((const uint8_t *)t->data)[j] != pattern_byte(e->name, j)) fail_msg("tensor %s byte %" PRIu64, e->name, j);
        if (bufs && bufs[i]) assert_memory_equal(t->data, bufs[i], t->nbytes);
    }
    rp_gguf_close(g);
}

static void free_bufs(uint8_t **bufs) {
    for (size_t i = 0; i < N_WT; i++) free(bufs[i]);
}

/* Lists leftover "*.tmp.*" files in the test tmpdir (none may survive a write). */
static int count_temp_files(void) {
    DIR *d = opendir(rp_test_tmpdir());
    int n = 0;
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_write_roundtrip(void **state) {
    (void)state;
    static const uint32_t aligns[] = {0, 64, 1};
    for (size_t a = 0; a < 3; a++) {
        uint8_t *bufs[N_WT] = {0};
        fill_ctx fc = {0};
        rp_gguf_writer *w = make_full_writer(bufs, &fc, aligns[a]);
        char *path = tmp_path("full.gguf");
        assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
        assert_int_equal(fc.calls, 2);   /* once per fill tensor, during write_file */
        rp_gguf_writer_free(w);
        assert_int_equal(count_temp_files(), 0);
        check_full_file(path, aligns[a], bufs);
        free_bufs(bufs);

        /* Copy every key (incl. string arrays) and every tensor through a second
         * writer: the output must be byte-identical to the input. */
        rp_gguf *g = NULL;
        assert_int_equal(rp_gguf_open(path, &g), RP_OK);
        rp_gguf_writer *w2 = NULL;
        assert_int_equal(rp_gguf_writer_create(&w2), RP_OK);
        for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) assert_int_equal(rp_gguf_writer_copy_kv(w2, g, i), RP_OK);
        assert_int_equal(rp_gguf_writer_copy_kv(w2, g, 0), RP_ERR_INVALID_ARG);   /* duplicate */
        assert_int_equal(rp_gguf_writer_copy_kv(w2, g, rp_gguf_n_kv(g)), RP_ERR_INVALID_ARG);
        for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            assert_int_equal(rp_gguf_writer_add_tensor(w2, name, t->type, t->n_dims, t->ne, t->data, t->nbytes), RP_OK);
        }
        char *path2 = tmp_path("full2.gguf");
        assert_int_equal(rp_gguf_writer_write_file(w2, path2), RP_OK);
        rp_gguf_writer_free(w2);
        rp_gguf_close(g);
        size_t l1, l2;
        char *f1 = rp_test_read_file(path, &l1), *f2 = rp_test_read_file(path2, &l2);
        assert_non_null(f1);
        assert_non_null(f2);
        assert_int_equal(l1, l2);
        assert_memory_equal(f1, f2, l1);
        assert_memory_equal(f1, "GGUF\x03\0\0\0", 8);
        /* ggml-compatible layout: data padded after every tensor, file size a multiple of the alignment. */
        uint32_t align = aligns[a] ? aligns[a] : 32;
        assert_int_equal(l1 % align, 0);
        free(f1);
        free(f2);
        unlink(path);
        unlink(path2);
    }
}

static void test_write_vocab_only(void **state) {
    (void)state;
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "general.architecture", "llama"), RP_OK);
    rp_str toks[3] = {{"<s>", 3}, {"a", 1}, {"bc", 2}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3), RP_OK);
    char *path = tmp_path("vocab.gguf");
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
    rp_gguf_writer_free(w);
    size_t len;
    char *f = rp_test_read_file(path, &len);
    assert_non_null(f);
    /* 24 header + (8+20+4+8+5) + (8+21+4+4+8 + 11+9+10) = 144: no data section, no padding. */
    assert_int_equal(len, 144);
    void *copy;
    rp_gguf *g = open_ok(f, len, &copy);
    assert_int_equal(rp_gguf_n_tensors(g), 0);
    assert_int_equal(rp_gguf_data_offset(g), 160);   /* past EOF: allowed with no tensors */
    str_expect(rp_gguf_kv_arr_str(g, 1, 2), "bc");
    rp_gguf_close(g);
    free(copy);
    free(f);
    unlink(path);
}

static void test_writer_errors(void **state) {
    (void)state;
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    float data[64] = {0};
    int64_t ne[4] = {8, 2, 1, 1};
    assert_int_equal(rp_gguf_writer_set_u32(w, "k", 1), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "k", 2), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "'k'"));
    assert_int_equal(rp_gguf_writer_set_str(w, "k", "x"), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_u32(w, "", 2), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_u32(w, "general.alignment", 48), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_u32(w, "general.alignment", 0), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_u64(w, "general.alignment", 32), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_arr(w, "s", RP_GGUF_STRING, data, 1), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_arr(w, "s", RP_GGUF_ARRAY, data, 1), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_scalar(w, "s", RP_GGUF_STRING, data), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_set_arr(w, "s", RP_GGUF_U8, NULL, 3), RP_ERR_INVALID_ARG);

    assert_int_equal(rp_gguf_writer_add_tensor(w, "t", RP_TYPE_F32, 2, ne, data, 64), RP_OK);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "t", RP_TYPE_F32, 2, ne, data, 64), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_TYPE_F32, 2, ne, data, 60), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "64"));
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_TYPE_F32, 0, ne, data, 64), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_TYPE_F32, 5, ne, data, 64), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", (rp_type)4, 2, ne, data, 64), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "u", RP_TYPE_Q8_0, 2, ne, data, 64), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "", RP_TYPE_F32, 2, ne, data, 64), RP_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    assert_int_equal(rp_gguf_writer_add_tensor(w, longname, RP_TYPE_F32, 2, ne, data, 64), RP_ERR_INVALID_ARG);
    longname[63] = '\0';   /* 63 bytes: the ggml maximum */
    assert_int_equal(rp_gguf_writer_add_tensor(w, longname, RP_TYPE_F32, 2, ne, data, 64), RP_OK);
    int64_t neg[2] = {-8, 1};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "v", RP_TYPE_F32, 2, neg, data, 0), RP_ERR_INVALID_ARG);

    /* A failing fill callback aborts the write: its status is returned, no file and no temp file remain. */
    fill_ctx fc = {.fail_with = RP_ERR_CANCELLED};
    assert_int_equal(rp_gguf_writer_add_tensor_fill(w, "f", RP_TYPE_F32, 2, ne, fill_pattern, &fc), RP_OK);
    char *path = tmp_path("aborted.gguf");
    unlink(path);
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_ERR_CANCELLED);
    assert_int_equal(fc.calls, 1);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(count_temp_files(), 0);
    /* Unwritable destination -> IO. */
    assert_int_equal(rp_gguf_writer_write_file(w, "/nonexistent-dir-rp/x.gguf"), RP_ERR_IO);
    assert_true(strlen(rp_last_error()) > 0);
    rp_gguf_writer_free(w);

    /* Re-writing an existing path replaces it atomically. */
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "x", 7), RP_OK);
    path = tmp_path("replace.gguf");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("old contents", f);
    fclose(f);
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
    rp_gguf_writer_free(w);
    rp_gguf *g = NULL;
    assert_int_equal(rp_gguf_open(path, &g), RP_OK);
    uint32_t x;
    assert_int_equal(rp_gguf_get_u32(g, "x", &x), RP_OK);
    assert_int_equal(x, 7);
    rp_gguf_close(g);
    unlink(path);
}

/* ------------------------------------------------------------------------- */
/* corruption                                                                  */

/* A small valid model file written by the writer; the last tensor's size is a
 * multiple of the alignment so the file ends exactly where its data ends. */
static char *make_small_model(size_t *len) {
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "general.architecture", "llama"), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "llama.block_count", 1), RP_OK);
    assert_int_equal(rp_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f), RP_OK);
    assert_int_equal(rp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true), RP_OK);
    rp_str toks[4] = {{"<unk>", 5}, {"<s>", 3}, {"a", 1}, {"", 0}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4), RP_OK);
    static const float scores[4] = {0, -1, -2, -3};
    assert_int_equal(rp_gguf_writer_set_arr(w, "tokenizer.ggml.scores", RP_GGUF_F32, scores, 4), RP_OK);
    static uint8_t d1[24], d2[34 * 2], d3[64];
    for (size_t i = 0; i < sizeof d3; i++) d1[i % 24] = d2[i] = d3[i] = (uint8_t)i;
    int64_t ne1[1] = {6}, ne2[2] = {32, 2}, ne3[2] = {16, 1};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "a.weight", RP_TYPE_F32, 1, ne1, d1, 24), RP_OK);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "b.weight", RP_TYPE_Q8_0, 2, ne2, d2, 68), RP_OK);
    assert_int_equal(rp_gguf_writer_add_tensor(w, "c.weight", RP_TYPE_F32, 2, ne3, d3, 64), RP_OK);
    char *path = tmp_path("small.gguf");
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
    rp_gguf_writer_free(w);
    char *f = rp_test_read_file(path, len);
    assert_non_null(f);
    unlink(path);
    return f;
}

static char *make_small_vocab(size_t *len) {
    rp_gguf_writer *w = NULL;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), RP_OK);
    rp_str toks[3] = {{"!", 1}, {"\xc4\xa0t", 3}, {"he", 2}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3), RP_OK);
    rp_str merges[1] = {{"\xc4\xa0 t", 4}};
    assert_int_equal(rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1), RP_OK);
    assert_int_equal(rp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0), RP_OK);
    char *path = tmp_path("small_vocab.gguf");
    assert_int_equal(rp_gguf_writer_write_file(w, path), RP_OK);
    rp_gguf_writer_free(w);
    char *f = rp_test_read_file(path, len);
    assert_non_null(f);
    unlink(path);
    return f;
}

static void test_truncation_every_offset(void **state) {
    (void)state;
    for (int which = 0; which < 2; which++) {
        size_t len;
        char *f = which == 0 ? make_small_model(&len) : make_small_vocab(&len);
        void *copy;
        rp_gguf *g = open_ok(f, len, &copy);   /* the full file is valid */
        if (which == 0) {
            const rp_gguf_tensor *last = rp_gguf_tensor_at(g, 2);
            assert_int_equal(rp_gguf_data_offset(g) + last->offset + last->nbytes, len);
        }
        rp_gguf_close(g);
        free(copy);
        for (size_t cut = 0; cut < len; cut++) {
            rp_gguf *h = NULL;
            rp_error_clear();
            rp_status st = open_copy(f, cut, &h);
            if (st != RP_ERR_FORMAT) print_message("cut at %zu: %s '%s'\n", cut, rp_strerror(st), rp_last_error());
            assert_int_equal(st, RP_ERR_FORMAT);
            assert_null(h);
            assert_true(strlen(rp_last_error()) > 0);
            assert_non_null(strstr(rp_last_error(), "byte"));
        }
        /* Through the file path too (0-byte file, inside the fixed header, after it, last byte). */
        size_t cuts[] = {0, 3, 7, 23, 24, len / 2, len - 1};
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            char *path = tmp_path("trunc.gguf");
            FILE *o = fopen(path, "wb");
            assert_non_null(o);
            assert_int_equal(fwrite(f, 1, cuts[k], o), cuts[k]);
            fclose(o);
            rp_gguf *h = NULL;
            assert_int_equal(rp_gguf_open(path, &h), RP_ERR_FORMAT);
            assert_non_null(strstr(rp_last_error(), "trunc.gguf"));
            assert_non_null(strstr(rp_last_error(), "byte"));
            unlink(path);
        }
        free(f);
    }
    rp_gguf *h = NULL;
    assert_int_equal(rp_gguf_open("/nonexistent-rp/x.gguf", &h), RP_ERR_IO);
    assert_int_equal(rp_gguf_open(rp_test_tmpdir(), &h), RP_ERR_IO);   /* a directory */
    assert_int_equal(rp_gguf_open_memory(NULL, 10, &h), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_gguf_open_memory(NULL, 0, &h), RP_ERR_FORMAT);
}

static void patch_u32(char *f, size_t at, uint32_t v) { memcpy(f + at, &v, 4); }
static void patch_u64(char *f, size_t at, uint64_t v) { memcpy(f + at, &v, 8); }

static void test_bad_header(void **state) {
    (void)state;
    size_t len;
    char *f = make_small_model(&len);
    char *m = malloc(len);
    void *copy;

    memcpy(m, f, len); m[0] = 'g';
    expect_fail(m, len, RP_ERR_FORMAT, "magic");
    memcpy(m, f, len); memcpy(m, "GGML", 4);
    expect_fail(m, len, RP_ERR_FORMAT, "magic");
    static const uint32_t bad_versions[] = {0, 1, 4, 0x03000000u, UINT32_MAX};
    for (size_t i = 0; i < 5; i++) {
        memcpy(m, f, len); patch_u32(m, 4, bad_versions[i]);
        expect_fail(m, len, RP_ERR_UNSUPPORTED, "version");
    }
    memcpy(m, f, len); patch_u32(m, 4, 2);   /* v2 has the same layout as v3 */
    rp_gguf *g = open_ok(m, len, &copy);
    assert_int_equal(rp_gguf_version(g), 2);
    rp_gguf_close(g);
    free(copy);

    /* Huge counts: rejected against the remaining bytes before any allocation. */
    static const uint64_t huge[] = {UINT64_MAX, (uint64_t)1 << 62, (uint64_t)1 << 40, 1000000};
    for (size_t i = 0; i < 4; i++) {
        memcpy(m, f, len); patch_u64(m, 8, huge[i]);
        expect_fail(m, len, RP_ERR_FORMAT, "tensor_count");
        memcpy(m, f, len); patch_u64(m, 16, huge[i]);
        expect_fail(m, len, RP_ERR_FORMAT, "kv_count");
    }
    /* Counts that fit the size check but not the actual content. */
    memcpy(m, f, len); patch_u64(m, 16, 7);   /* tensor #0's info is then consumed as key #6 */
    expect_fail(m, len, RP_ERR_FORMAT, "tensor #0");
    memcpy(m, f, len); patch_u64(m, 16, 5);   /* the 6th kv is then read as tensor #0 */
    expect_fail(m, len, RP_ERR_FORMAT, "tensor #0");
    memcpy(m, f, len); patch_u64(m, 8, 4);
    expect_fail(m, len, RP_ERR_FORMAT, "tensor #3");

    /* Huge first key length (key #0 length lives at byte 24). */
    memcpy(m, f, len); patch_u64(m, 24, UINT64_MAX);
    expect_fail(m, len, RP_ERR_FORMAT, "key length 18446744073709551615 exceeds remaining");
    memcpy(m, f, len); patch_u64(m, 24, len);
    expect_fail(m, len, RP_ERR_FORMAT, "key #0");
    memcpy(m, f, len); patch_u64(m, 24, 0);
    expect_fail(m, len, RP_ERR_FORMAT, "empty key");
    /* key #0 = "general.architecture" (20 bytes): type at 52, string value length at 56. */
    memcpy(m, f, len); patch_u64(m, 56, 1ull << 63);
    expect_fail(m, len, RP_ERR_FORMAT, "key #0 'general.architecture': string value length");
    memcpy(m, f, len); patch_u32(m, 52, 13);
    expect_fail(m, len, RP_ERR_FORMAT, "value type 13");
    memcpy(m, f, len); patch_u32(m, 52, UINT32_MAX);
    expect_fail(m, len, RP_ERR_FORMAT, "value type");
    free(m);
    free(f);
}

/* Builds: header, one kv (general.alignment if align != 0), tensors given, data section of data_len bytes. */
typedef struct traw {
    const char *name;
    uint32_t nd;
    int64_t ne[5];
    uint32_t type;
    uint64_t off;
} traw;

static void build(tb *b, const traw *t, size_t nt, uint32_t align, size_t data_len) {
    tb_header(b, 3, nt, align ? 2 : 1);
    tb_kv_str(b, "general.architecture", "llama");
    if (align) tb_kv_u32(b, "general.alignment", align);
    for (size_t i = 0; i < nt; i++) tb_tensor(b, t[i].name, t[i].nd, t[i].ne, t[i].type, t[i].off);
    tb_pad(b, align ? align : 32);
    tb_zeros(b, data_len);
}

static void test_bad_tensors(void **state) {
    (void)state;
    tb b = {0};
    void *copy;
    /* Baseline: two F32 tensors of 64 bytes at 0 and 64 open fine. */
    traw ok[2] = {{"a", 2, {8, 2}, 0, 0}, {"b", 1, {16}, 0, 64}};
    build(&b, ok, 2, 0, 128);
    rp_gguf *g = open_ok(b.p, b.n, &copy);
    assert_int_equal(rp_gguf_n_tensors(g), 2);
    rp_gguf_close(g);
    free(copy);
    tb_free(&b);
    /* Out of order but not overlapping is accepted. */
    traw swapped[2] = {{"a", 2, {8, 2}, 0, 64}, {"b", 1, {16}, 0, 0}};
    build(&b, swapped, 2, 0, 128);
    g = open_ok(b.p, b.n, &copy);
    assert_int_equal(rp_gguf_find_tensor(g, "a")->offset, 64);
    rp_gguf_close(g);
    free(copy);
    tb_free(&b);

    static const struct { traw t[2]; size_t nt; uint32_t align; size_t data; rp_status want; const char *field; } c[] = {
        /* (d) out of range, misaligned, overlapping, overflowing offsets */
        {{{"a", 2, {8, 2}, 0, 0}, {"b", 1, {16}, 0, 64}}, 2, 0, 127, RP_ERR_FORMAT, "beyond file end"},
        {{{"a", 2, {8, 2}, 0, 0}, {"b", 1, {16}, 0, 96}}, 2, 0, 128, RP_ERR_FORMAT, "tensor #1 'b': data"},
        {{{"a", 2, {8, 2}, 0, 16}}, 1, 0, 128, RP_ERR_FORMAT, "not a multiple of the alignment 32"},
        {{{"a", 2, {8, 2}, 0, 32}}, 1, 64, 128, RP_ERR_FORMAT, "alignment 64"},
        {{{"a", 2, {8, 2}, 0, 0}, {"b", 1, {16}, 0, 32}}, 2, 0, 128, RP_ERR_FORMAT, "overlaps tensor #0 'a'"},
        {{{"a", 2, {8, 2}, 0, 0}, {"b", 1, {16}, 0, 0}}, 2, 0, 128, RP_ERR_FORMAT, "overlaps"},
        {{{"a", 2, {8, 2}, 0, 0xFFFFFFFFFFFFFFE0ull}}, 1, 0, 128, RP_ERR_FORMAT, "offset+size overflows"},
        {{{"a", 2, {8, 2}, 0, 0x7FFFFFFFFFFFFFE0ull}}, 1, 0, 128, RP_ERR_FORMAT, "beyond file end"},
        /* (e) type ids ggml removed (named, with the tensor) and ids outside ggml's enum */
        {{{"a", 2, {8, 2}, 4, 0}}, 1, 0, 128, RP_ERR_UNSUPPORTED, "tensor #0 'a': type q4_2 (id 4) is not supported"},
        {{{"a", 2, {8, 2}, 31, 0}}, 1, 0, 128, RP_ERR_UNSUPPORTED, "'a': type q4_0_4_4 (id 31) is not supported"},
        {{{"a", 2, {8, 2}, 39, 0}}, 1, 0, 128, RP_ERR_FORMAT, "not a multiple of the mxfp4 block size 32"},
        {{{"a", 2, {8, 2}, 1000, 0}}, 1, 0, 128, RP_ERR_UNSUPPORTED, "tensor type id 1000 is not a ggml type"},
        {{{"a", 2, {8, 2}, UINT32_MAX, 0}}, 1, 0, 128, RP_ERR_UNSUPPORTED, "tensor type id 4294967295 is not a ggml type"},
        /* (f) duplicate tensor names */
        {{{"a", 2, {8, 2}, 0, 0}, {"a", 1, {16}, 0, 64}}, 2, 0, 128, RP_ERR_FORMAT, "duplicate tensor name"},
        /* (g) n_dims 0 and 5 */
        {{{"a", 0, {8}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "n_dims 0"},
        {{{"a", 5, {8, 1, 1, 1, 1}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "n_dims 5"},
        /* dims: negative, overflowing, not a block multiple; names */
        {{{"a", 2, {-8, 2}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "ne[0] = -8 is negative"},
        {{{"a", 2, {8, -1}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "ne[1]"},
        {{{"a", 3, {1ll << 40, 1ll << 20, 1ll << 10}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "element count overflows"},
        {{{"a", 2, {1ll << 61, 2}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "byte size overflows"},
        {{{"a", 2, {33, 2}, 8, 0}}, 1, 0, 128, RP_ERR_FORMAT, "not a multiple of the q8_0 block size 32"},
        {{{"", 2, {8, 2}, 0, 0}}, 1, 0, 128, RP_ERR_FORMAT, "empty tensor name"},
        {{{"0123456789012345678901234567890123456789012345678901234567890123", 1, {8}, 0, 0}}, 1, 0, 128,
         RP_ERR_FORMAT, "name length 64 exceeds 63"},
        /* bad alignment values */
        {{{"a", 1, {8}, 0, 0}}, 1, 48, 128, RP_ERR_FORMAT, "general.alignment': 48 is not a nonzero power of two"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        if (c[i].align == 48) {
            tb_header(&b, 3, 0, 1);
            tb_kv_u32(&b, "general.alignment", 48);
        } else {
            build(&b, c[i].t, c[i].nt, c[i].align, c[i].data);
        }
        expect_fail(b.p, b.n, c[i].want, c[i].field);
        tb_free(&b);
    }
    /* A 63-byte name is the maximum and a zero-size tensor may share an offset. */
    traw edge[2] = {{"012345678901234567890123456789012345678901234567890123456789012", 1, {8}, 0, 0},
                    {"z", 2, {0, 4}, 0, 0}};
    build(&b, edge, 2, 0, 32);
    g = open_ok(b.p, b.n, &copy);
    assert_int_equal(rp_gguf_find_tensor(g, "z")->nbytes, 0);
    rp_gguf_close(g);
    free(copy);
    tb_free(&b);

    /* alignment 0, and of the wrong type */
    tb_header(&b, 3, 0, 1);
    tb_kv_u32(&b, "general.alignment", 0);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "nonzero power of two");
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "general.alignment"); tb_u32(&b, RP_GGUF_U64); tb_u64(&b, 32);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "expected u32");
    tb_free(&b);
}

/* Array body nested `depth` levels: [arr x 2] [<next level>, [u16 x 0]], innermost [u16 x 2] [7, 9]. */
static void tb_nested(tb *b, int level, int depth) {
    if (level == depth) {
        uint16_t v[2] = {7, 9};
        tb_u32(b, RP_GGUF_U16); tb_u64(b, 2); tb_bytes(b, v, 4);
        return;
    }
    tb_u32(b, RP_GGUF_ARRAY); tb_u64(b, 2);
    tb_nested(b, level + 1, depth);
    tb_u32(b, RP_GGUF_U16); tb_u64(b, 0);
}

static void test_bad_kvs(void **state) {
    (void)state;
    tb b = {0};
    void *copy;
    /* (f) duplicate keys, including non-adjacent ones */
    tb_header(&b, 3, 0, 3);
    tb_kv_u32(&b, "a.b", 1);
    tb_kv_str(&b, "c", "x");
    tb_kv_u32(&b, "a.b", 2);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "key #2 'a.b': duplicate key (first defined as key #0)");
    tb_free(&b);
    /* key with an embedded NUL */
    tb_header(&b, 3, 0, 1);
    tb_u64(&b, 3); tb_bytes(&b, "a\0b", 3); tb_u32(&b, RP_GGUF_U8); tb_u8(&b, 1);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "NUL");
    tb_free(&b);
    /* bool not 0/1, scalar and in an array */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "flag"); tb_u32(&b, RP_GGUF_BOOL); tb_u8(&b, 2);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "bool value 2");
    tb_free(&b);
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "flags"); tb_u32(&b, RP_GGUF_ARRAY); tb_u32(&b, RP_GGUF_BOOL); tb_u64(&b, 3);
    tb_u8(&b, 1); tb_u8(&b, 0); tb_u8(&b, 9);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "bool value 9");
    tb_free(&b);
    /* array: bad element type, huge count, huge string length inside */
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "arr"); tb_u32(&b, RP_GGUF_ARRAY); tb_u32(&b, 99); tb_u64(&b, 1); tb_u32(&b, 0);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "array element type 99");
    tb_free(&b);
    static const uint32_t et[] = {RP_GGUF_U8, RP_GGUF_U32, RP_GGUF_F64, RP_GGUF_STRING, RP_GGUF_ARRAY};
    for (size_t i = 0; i < 5; i++) {
        tb_header(&b, 3, 0, 1);
        tb_str(&b, "arr"); tb_u32(&b, RP_GGUF_ARRAY); tb_u32(&b, et[i]); tb_u64(&b, UINT64_MAX / 2);
        tb_zeros(&b, 64);
        expect_fail(b.p, b.n, RP_ERR_FORMAT, "array count");
        tb_free(&b);
    }
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "tokens"); tb_u32(&b, RP_GGUF_ARRAY); tb_u32(&b, RP_GGUF_STRING); tb_u64(&b, 2);
    tb_str(&b, "ok"); tb_u64(&b, 1000); tb_bytes(&b, "short", 5);
    expect_fail(b.p, b.n, RP_ERR_FORMAT, "array string length 1000 exceeds remaining 5");
    tb_free(&b);

    /* Nested arrays: allowed up to 4 levels, rejected beyond. */
    for (int depth = 1; depth <= 5; depth++) {
        tb_header(&b, 3, 0, 1);
        tb_str(&b, "nest"); tb_u32(&b, RP_GGUF_ARRAY);
        tb_nested(&b, 1, depth);
        if (depth <= 4) {
            rp_gguf *g = open_ok(b.p, b.n, &copy);
            char buf[128];
            rp_gguf_kv_format(g, 0, buf, sizeof buf);
            if (depth == 1) assert_string_equal(buf, "[u16 x 2] [7, 9]");
            if (depth == 2) assert_string_equal(buf, "[arr x 2] [[u16 x 2], [u16 x 0]]");
            assert_int_equal(rp_gguf_kv_arr_type(g, 0), depth == 1 ? RP_GGUF_U16 : RP_GGUF_ARRAY);
            walk(g);
            rp_gguf_close(g);
            free(copy);
        } else {
            expect_fail(b.p, b.n, RP_ERR_FORMAT, "nested deeper than 4");
        }
        tb_free(&b);
    }
}

/* xorshift64*: deterministic per seed. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void test_random_flips(void **state) {
    (void)state;
    size_t len;
    char *files[2];
    size_t lens[2];
    files[0] = make_small_model(&lens[0]);
    files[1] = make_small_vocab(&lens[1]);
    int n_ok = 0, n_err = 0;
    for (uint64_t seed = 1; seed <= 3000; seed++) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull;
        int which = (int)(seed & 1);
        len = lens[which];
        uint8_t *m = malloc(len);
        memcpy(m, files[which], len);
        int flips = 1 + (int)(rng_next(&s) % 8);
        for (int k = 0; k < flips; k++) {
            uint64_t r = rng_next(&s);
            /* Bias half the flips into the header/metadata, where the structure lives. */
            size_t pos = (r & 1) ? (size_t)((r >> 8) % (len < 256 ? len : 256)) : (size_t)((r >> 8) % len);
            uint8_t v = (uint8_t)(r >> 40);
            if ((r >> 56) & 1) m[pos] ^= (uint8_t)(1u << (v & 7));
            else m[pos] = v;
        }
        rp_gguf *g = NULL;
        rp_error_clear();
        rp_status st = rp_gguf_open_memory(m, len, &g);
        if (st == RP_OK) {
            walk(g);
            rp_gguf_close(g);
            n_ok++;
        } else {
            assert_true(st == RP_ERR_FORMAT || st == RP_ERR_UNSUPPORTED);
            assert_null(g);
            assert_true(strlen(rp_last_error()) > 0);
            assert_non_null(strstr(rp_last_error(), "byte"));
            n_err++;
        }
        free(m);
    }
    print_message("random flips: %d opened, %d rejected\n", n_ok, n_err);
    assert_true(n_ok > 0 && n_err > 0);
    free(files[0]);
    free(files[1]);
}

static void test_str_eq_and_names(void **state) {
    (void)state;
    rp_str s = {"abc", 3};
    assert_true(rp_str_eq(s, "abc"));
    assert_false(rp_str_eq(s, "ab"));
    assert_false(rp_str_eq(s, "abcd"));
    assert_false(rp_str_eq(s, NULL));
    assert_true(rp_str_eq((rp_str){NULL, 0}, ""));
    assert_false(rp_str_eq((rp_str){"ab", 1}, "ab"));
    assert_string_equal(rp_gguf_vtype_name(RP_GGUF_STRING), "str");
    assert_string_equal(rp_gguf_vtype_name(RP_GGUF_F64), "f64");
    assert_string_equal(rp_gguf_vtype_name(RP_GGUF_VTYPE_COUNT), "invalid");
    /* Accessors tolerate out-of-range indices. */
    size_t len;
    char *f = make_small_vocab(&len);
    void *copy;
    rp_gguf *g = open_ok(f, len, &copy);
    assert_int_equal(rp_gguf_kv_key(g, 99).len, 0);
    assert_int_equal(rp_gguf_kv_type(g, 99), RP_GGUF_VTYPE_COUNT);
    assert_int_equal(rp_gguf_kv_arr_type(g, 0), RP_GGUF_VTYPE_COUNT);   /* not an array */
    assert_int_equal(rp_gguf_kv_arr_len(g, 99), 0);
    assert_null(rp_gguf_kv_arr_data(g, 99));
    assert_null(rp_gguf_kv_raw(g, 99, NULL));
    assert_null(rp_gguf_tensor_at(g, 0));
    assert_null(rp_gguf_find_tensor(g, "x"));
    char buf[8];
    rp_gguf_kv_format(g, 99, buf, sizeof buf);
    assert_int_equal(strlen(buf), 7);
    rp_gguf_close(g);
    free(copy);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_stories_f32),
        cmocka_unit_test(test_real_stories_quant),
        cmocka_unit_test(test_real_llama2_tiny),
        cmocka_unit_test(test_real_vocab_only),
        cmocka_unit_test(test_write_roundtrip),
        cmocka_unit_test(test_write_vocab_only),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_bad_kvs),
        cmocka_unit_test(test_random_flips),
        cmocka_unit_test(test_str_eq_and_names),
    };
    return rp_test_main(tests, NULL, NULL);
}
