/* fuzz_gguf.c — libFuzzer target: validates arbitrary bytes as GGUF, then walks every key, string and tensor. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gguf/gguf.h"

static uint64_t elem_size(rp_gguf_vtype t) {
    switch (t) {
    case RP_GGUF_U8: case RP_GGUF_I8: case RP_GGUF_BOOL: return 1;
    case RP_GGUF_U16: case RP_GGUF_I16: return 2;
    case RP_GGUF_U32: case RP_GGUF_I32: case RP_GGUF_F32: return 4;
    case RP_GGUF_U64: case RP_GGUF_I64: case RP_GGUF_F64: return 8;
    default: return 0;
    }
}

/* Reads every byte of [p, p+n) so ASan checks the whole range the reader vouched for. */
static uint64_t touch(const void *p, uint64_t n) {
    const volatile uint8_t *b = p;
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++) s += b[i];
    return s;
}

/* Invariant violations are bugs: crash loudly so libFuzzer records the input. */
#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static void walk_kv(const rp_gguf *g, uint64_t i, volatile uint64_t *sink) {
    char buf[512], tiny[9];
    rp_str k = rp_gguf_kv_key(g, i);
    CHECK(k.len > 0);
    char *key = malloc(k.len + 1);
    CHECK(key != NULL);
    memcpy(key, k.ptr, k.len);
    key[k.len] = '\0';
    CHECK(rp_gguf_find_key(g, key) == (int64_t)i);   /* keys are unique and NUL-free */

    rp_gguf_kv_format(g, i, buf, sizeof buf);
    CHECK(strlen(buf) < sizeof buf);
    rp_gguf_kv_format(g, i, tiny, sizeof tiny);
    CHECK(strlen(tiny) < sizeof tiny);
    *sink += strlen(buf);

    uint64_t raw_len = 0;
    const void *raw = rp_gguf_kv_raw(g, i, &raw_len);
    *sink += touch(raw, raw_len);

    /* Typed getters must answer (OK or a clean error) for any value type. */
    uint32_t u32; int32_t i32; uint64_t u64; float f; bool b; rp_str s;
    rp_gguf_vtype et; uint64_t n; int64_t idx;
    (void)rp_gguf_get_u32(g, key, &u32);
    (void)rp_gguf_get_i32(g, key, &i32);
    (void)rp_gguf_get_u64(g, key, &u64);
    (void)rp_gguf_get_f32(g, key, &f);
    (void)rp_gguf_get_bool(g, key, &b);
    if (rp_gguf_get_str(g, key, &s) == RP_OK) *sink += touch(s.ptr, s.len);
    if (rp_gguf_get_arr(g, key, &et, &n, &idx) == RP_OK) {
        CHECK(idx == (int64_t)i);
        CHECK(et == rp_gguf_kv_arr_type(g, i) && n == rp_gguf_kv_arr_len(g, i));
        if (et == RP_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                rp_str e = rp_gguf_kv_arr_str(g, i, j);
                *sink += touch(e.ptr, e.len);
            }
        } else if (et != RP_GGUF_ARRAY) {
            *sink += touch(rp_gguf_kv_arr_data(g, i), n * elem_size(et));
        }
    }
    free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rp_gguf *g = NULL;
    rp_error_clear();
    rp_status st = rp_gguf_open_memory(data, size, &g);
    if (st != RP_OK) {
        CHECK(g == NULL);
        CHECK(st == RP_ERR_FORMAT || st == RP_ERR_UNSUPPORTED || st == RP_ERR_NOMEM);
        CHECK(rp_last_error()[0] != '\0');   /* every rejection explains itself */
        return 0;
    }
    volatile uint64_t sink = 0;
    uint32_t align = rp_gguf_alignment(g);
    CHECK(align != 0 && (align & (align - 1)) == 0);
    CHECK(rp_gguf_data_offset(g) % align == 0);
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) walk_kv(g, i, &sink);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        char name[64];
        CHECK(t != NULL && t->name.len > 0 && t->name.len < sizeof name);
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = '\0';
        CHECK(rp_gguf_find_tensor(g, name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= RP_GGUF_MAX_DIMS);
        CHECK(t->offset % align == 0);
        CHECK(rp_gguf_data_offset(g) + t->offset + t->nbytes <= rp_gguf_file_size(g));
        CHECK((const uint8_t *)t->data == data + rp_gguf_data_offset(g) + t->offset);
        sink += touch(t->data, t->nbytes);
    }
    (void)sink;
    rp_gguf_close(g);
    return 0;
}
