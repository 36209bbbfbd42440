/* gguf_read.c — validating, zero-copy GGUF v2/v3 reader (mmap or caller buffer) with hashed key/tensor lookup. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

/* Values are read with memcpy in host order; GGUF v2/v3 as we accept it is LE. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

/* Fixed header: magic(4) + version(4) + tensor_count(8) + kv_count(8). */
#define RP_GGUF_HEADER_BYTES 24u
/* Smallest possible encoded kv: key length(8) + 1 key byte + type(4) + 1-byte value. */
#define RP_GGUF_MIN_KV_BYTES 14u
/* Smallest possible tensor info: name length(8) + 1 name byte + n_dims(4) + 1 dim(8) + type(4) + offset(8). */
#define RP_GGUF_MIN_TENSOR_BYTES 33u
/* Nested arrays deeper than this are rejected (bounds recursion depth). */
#define RP_GGUF_MAX_ARRAY_DEPTH 4
/* ggml's GGML_MAX_NAME is 64 including the NUL, so names are at most 63 bytes. */
#define RP_GGUF_MAX_NAME 64u
/* The GGUF spec caps keys at 2^16-1 bytes. */
#define RP_GGUF_MAX_KEY 65535u
#define RP_GGUF_DEFAULT_ALIGNMENT 32u

typedef struct rp_gguf_kv {
    rp_str key;
    uint64_t val_off;     /* absolute offset of the encoded value (just after the type id) */
    uint64_t val_len;     /* encoded length of the value */
    uint64_t arr_len;     /* arrays: element count */
    uint64_t *str_off;    /* string arrays: absolute offset of element i's u64 length prefix */
    rp_gguf_vtype type;
    rp_gguf_vtype arr_type;
} rp_gguf_kv;

/* Open-addressing hash set of names -> index. Slot idx 0 means empty (stores index+1). */
typedef struct rp_gguf_slot {
    const char *ptr;
    uint64_t len;
    uint64_t idx1;
} rp_gguf_slot;

typedef struct rp_gguf_map {
    rp_gguf_slot *slot;
    uint64_t mask;
} rp_gguf_map;

struct rp_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped;          /* base came from mmap and must be unmapped */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    rp_gguf_kv *kv;
    rp_gguf_map kv_map;
    uint64_t n_tensors;
    rp_gguf_tensor *tensors;
    rp_gguf_map t_map;
};

/* ------------------------------------------------------------------------- */
/* small helpers                                                               */

static bool ck_add(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static bool ck_mul(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

bool rp_str_eq(rp_str s, const char *cstr) {
    if (!cstr) return false;
    size_t n = strlen(cstr);
    if (s.len != n) return false;
    return n == 0 || memcmp(s.ptr, cstr, n) == 0;
}

static const char *const k_vtype_names[RP_GGUF_VTYPE_COUNT] = {
    [RP_GGUF_U8] = "u8",   [RP_GGUF_I8] = "i8",     [RP_GGUF_U16] = "u16",   [RP_GGUF_I16] = "i16",
    [RP_GGUF_U32] = "u32", [RP_GGUF_I32] = "i32",   [RP_GGUF_F32] = "f32",   [RP_GGUF_BOOL] = "bool",
    [RP_GGUF_STRING] = "str", [RP_GGUF_ARRAY] = "arr", [RP_GGUF_U64] = "u64", [RP_GGUF_I64] = "i64",
    [RP_GGUF_F64] = "f64",
};

const char *rp_gguf_vtype_name(rp_gguf_vtype t) {
    if ((unsigned)t >= RP_GGUF_VTYPE_COUNT) return "invalid";
    return k_vtype_names[t];
}

/* Encoded size of one fixed-size element; 0 for STRING/ARRAY (variable size). */
static uint64_t vtype_fixed_size(rp_gguf_vtype t) {
    switch (t) {
    case RP_GGUF_U8: case RP_GGUF_I8: case RP_GGUF_BOOL: return 1;
    case RP_GGUF_U16: case RP_GGUF_I16: return 2;
    case RP_GGUF_U32: case RP_GGUF_I32: case RP_GGUF_F32: return 4;
    case RP_GGUF_U64: case RP_GGUF_I64: case RP_GGUF_F64: return 8;
    default: return 0;
    }
}

/* Smallest encoded size of one element of type t (string: its length; array: type + count). */
static uint64_t vtype_min_size(rp_gguf_vtype t) {
    if (t == RP_GGUF_STRING) return 8;
    if (t == RP_GGUF_ARRAY) return 12;
    return vtype_fixed_size(t);
}

static uint64_t fnv1a(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

/* Capacity: power of two >= 2n (load <= 1/2); n is already capped by the file size. */
static rp_status map_init(rp_gguf_map *m, uint64_t n) {
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    m->slot = calloc(cap, sizeof *m->slot);
    if (!m->slot) return rp_errorf(RP_ERR_NOMEM, "gguf: cannot allocate a %" PRIu64 "-slot name table", cap);
    m->mask = cap - 1;
    return RP_OK;
}

/* Inserts (ptr,len)->idx; if the name is already present returns false and its index in *dup. */
static bool map_insert(rp_gguf_map *m, const char *ptr, uint64_t len, uint64_t idx, uint64_t *dup) {
    uint64_t h = fnv1a(ptr, len) & m->mask;
    for (;;) {
        rp_gguf_slot *s = &m->slot[h];
        if (s->idx1 == 0) {
            s->ptr = ptr; s->len = len; s->idx1 = idx + 1;
            return true;
        }
        if (s->len == len && memcmp(s->ptr, ptr, len) == 0) { *dup = s->idx1 - 1; return false; }
        h = (h + 1) & m->mask;
    }
}

static int64_t map_find(const rp_gguf_map *m, const char *ptr, uint64_t len) {
    if (!m->slot) return -1;
    uint64_t h = fnv1a(ptr, len) & m->mask;
    for (;;) {
        const rp_gguf_slot *s = &m->slot[h];
        if (s->idx1 == 0) return -1;
        if (s->len == len && memcmp(s->ptr, ptr, len) == 0) return (int64_t)(s->idx1 - 1);
        h = (h + 1) & m->mask;
    }
}

/* Copies up to 64 bytes of a name into out, printable ASCII only, for error messages. */
static void sanitize(char *out, size_t cap, const char *p, uint64_t len) {
    size_t j = 0;
    uint64_t n = len > 64 ? 64 : len;
    for (uint64_t i = 0; i < n && j + 4 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        out[j++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (len > n && j + 4 < cap) { out[j++] = '.'; out[j++] = '.'; out[j++] = '.'; }
    out[j] = '\0';
}

/* ------------------------------------------------------------------------- */
/* parser                                                                      */

typedef struct rp_parser {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;        /* invariant: pos <= size */
    char where[160];     /* "header", "key #3 'llama.block_count'", "tensor #5 'x'": prefix of every message */
} rp_parser;

static void set_where(rp_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_where(rp_parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->where, sizeof p->where, fmt, ap);
    va_end(ap);
}

static uint64_t remaining(const rp_parser *p) { return p->size - p->pos; }

/* Ensures `n` more bytes exist for `field`. */
static rp_status need(rp_parser *p, uint64_t n, const char *field) {
    if (n > remaining(p))
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: %s needs %" PRIu64 " bytes but only %" PRIu64
                         " remain (at byte %" PRIu64 ")", p->where, field, n, remaining(p), p->pos);
    return RP_OK;
}

static rp_status get_u32(rp_parser *p, const char *field, uint32_t *v) {
    RP_TRY(need(p, 4, field));
    *v = rd_u32(p->base + p->pos);
    p->pos += 4;
    return RP_OK;
}

static rp_status get_u64(rp_parser *p, const char *field, uint64_t *v) {
    RP_TRY(need(p, 8, field));
    *v = rd_u64(p->base + p->pos);
    p->pos += 8;
    return RP_OK;
}

static rp_status get_str(rp_parser *p, const char *field, rp_str *s) {
    uint64_t at = p->pos, len;
    RP_TRY(need(p, 8, field));
    len = rd_u64(p->base + p->pos);
    if (len > remaining(p) - 8)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: %s length %" PRIu64 " exceeds remaining %" PRIu64
                         " bytes (at byte %" PRIu64 ")", p->where, field, len, remaining(p) - 8, at);
    s->ptr = (const char *)p->base + p->pos + 8;
    s->len = len;
    p->pos += 8 + len;
    return RP_OK;
}

static rp_status get_vtype(rp_parser *p, const char *field, rp_gguf_vtype *t) {
    uint64_t at = p->pos;
    uint32_t v;
    RP_TRY(get_u32(p, field, &v));
    if (v >= RP_GGUF_VTYPE_COUNT)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: %s %" PRIu32 " is not a GGUF value type (0..%d) (at byte %" PRIu64 ")",
                         p->where, field, v, RP_GGUF_VTYPE_COUNT - 1, at);
    *t = (rp_gguf_vtype)v;
    return RP_OK;
}

/* Validates `n` packed bools: stored as one byte each and must be 0 or 1. */
static rp_status check_bools(rp_parser *p, uint64_t n) {
    const uint8_t *b = p->base + p->pos;
    for (uint64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: bool value %u is not 0 or 1 (at byte %" PRIu64 ")",
                             p->where, b[i], p->pos + i);
    return RP_OK;
}

/* Parses an array body (element type, count, elements) at p->pos. Element
 * counts are checked against the remaining bytes before any loop, and each
 * loop iteration consumes >= 8 bytes, so work is O(file size). If `str_off`
 * is non-NULL and the elements are strings, *str_off receives a malloc'd
 * offset index. depth counts array levels (1 = top-level array). */
static rp_status parse_array(rp_parser *p, int depth, rp_gguf_vtype *elem_out, uint64_t *n_out,
                             uint64_t **str_off) {
    rp_gguf_vtype et;
    uint64_t n, at_count, total;
    if (depth > RP_GGUF_MAX_ARRAY_DEPTH)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: arrays nested deeper than %d levels (at byte %" PRIu64 ")",
                         p->where, RP_GGUF_MAX_ARRAY_DEPTH, p->pos);
    RP_TRY(get_vtype(p, "array element type", &et));
    at_count = p->pos;
    RP_TRY(get_u64(p, "array count", &n));
    if (n > remaining(p) / vtype_min_size(et))
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: array count %" PRIu64 " of %s needs >= %" PRIu64
                         " bytes each but only %" PRIu64 " remain (at byte %" PRIu64 ")",
                         p->where, n, rp_gguf_vtype_name(et), vtype_min_size(et), remaining(p), at_count);
    if (elem_out) *elem_out = et;
    if (n_out) *n_out = n;
    if (et == RP_GGUF_STRING) {
        uint64_t *idx = NULL;
        if (str_off && n > 0) {
            /* n <= remaining/8, so this allocation is bounded by the file size. */
            idx = malloc(n * sizeof *idx);
            if (!idx) return rp_errorf(RP_ERR_NOMEM, "gguf: %s: cannot index %" PRIu64 " strings", p->where, n);
        }
        for (uint64_t i = 0; i < n; i++) {
            rp_str s;
            uint64_t at = p->pos;
            rp_status st = get_str(p, "array string", &s);
            if (st != RP_OK) { free(idx); return st; }
            if (idx) idx[i] = at;
        }
        if (str_off) *str_off = idx;
        return RP_OK;
    }
    if (et == RP_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++) RP_TRY(parse_array(p, depth + 1, NULL, NULL, NULL));
        return RP_OK;
    }
    total = n * vtype_fixed_size(et);   /* cannot overflow: n <= remaining / size */
    if (et == RP_GGUF_BOOL) RP_TRY(check_bools(p, n));
    p->pos += total;
    return RP_OK;
}

static rp_status parse_kv(rp_parser *p, rp_gguf_kv *kv) {
    switch (kv->type) {
    case RP_GGUF_STRING: {
        rp_str s;
        return get_str(p, "string value", &s);
    }
    case RP_GGUF_ARRAY:
        return parse_array(p, 1, &kv->arr_type, &kv->arr_len, &kv->str_off);
    default: {
        uint64_t sz = vtype_fixed_size(kv->type);
        RP_TRY(need(p, sz, "value"));
        if (kv->type == RP_GGUF_BOOL) RP_TRY(check_bools(p, 1));
        p->pos += sz;
        return RP_OK;
    }
    }
}

static rp_status parse_kvs(rp_parser *p, rp_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        rp_gguf_kv *kv = &g->kv[i];
        uint64_t at = p->pos, dup;
        char name[80];
        set_where(p, "key #%" PRIu64, i);
        RP_TRY(get_str(p, "key", &kv->key));
        if (kv->key.len == 0)
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: empty key (at byte %" PRIu64 ")", p->where, at);
        if (kv->key.len > RP_GGUF_MAX_KEY)
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: key length %" PRIu64 " exceeds %u (at byte %" PRIu64 ")",
                             p->where, kv->key.len, RP_GGUF_MAX_KEY, at);
        sanitize(name, sizeof name, kv->key.ptr, kv->key.len);
        set_where(p, "key #%" PRIu64 " '%s'", i, name);
        /* Lookups take C strings, so an embedded NUL would make a key unreachable. */
        if (memchr(kv->key.ptr, 0, kv->key.len))
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: key contains a NUL byte (at byte %" PRIu64 ")", p->where, at);
        if (!map_insert(&g->kv_map, kv->key.ptr, kv->key.len, i, &dup))
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: duplicate key (first defined as key #%" PRIu64 ") (at byte %" PRIu64 ")",
                             p->where, dup, at);
        RP_TRY(get_vtype(p, "value type", &kv->type));
        kv->arr_type = RP_GGUF_VTYPE_COUNT;
        kv->val_off = p->pos;
        RP_TRY(parse_kv(p, kv));
        kv->val_len = p->pos - kv->val_off;
    }
    return RP_OK;
}

static rp_status parse_alignment(rp_gguf *g) {
    int64_t i = rp_gguf_find_key(g, "general.alignment");
    g->alignment = RP_GGUF_DEFAULT_ALIGNMENT;
    if (i < 0) return RP_OK;
    const rp_gguf_kv *kv = &g->kv[i];
    if (kv->type != RP_GGUF_U32)
        return rp_errorf(RP_ERR_FORMAT, "gguf: key #%" PRId64 " 'general.alignment': type %s, expected u32 (at byte %" PRIu64 ")",
                         i, rp_gguf_vtype_name(kv->type), kv->val_off);
    uint32_t a = rd_u32(g->base + kv->val_off);
    if (a == 0 || (a & (a - 1)) != 0)
        return rp_errorf(RP_ERR_FORMAT, "gguf: key #%" PRId64 " 'general.alignment': %" PRIu32
                         " is not a nonzero power of two (at byte %" PRIu64 ")", i, a, kv->val_off);
    g->alignment = a;
    return RP_OK;
}

/* Per-tensor bookkeeping kept only during validation (for ordering and messages). */
typedef struct rp_tspan {
    uint64_t off, end;   /* relative to the data section */
    uint64_t info_at;    /* absolute offset of the tensor's info record */
    uint64_t idx;
} rp_tspan;

static int tspan_cmp(const void *a, const void *b) {
    const rp_tspan *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static rp_status parse_tensor(rp_parser *p, rp_gguf *g, uint64_t i, rp_tspan *span) {
    rp_gguf_tensor *t = &g->tensors[i];
    uint64_t at = p->pos, dup, at_field, nelem = 1, u;
    uint32_t nd, type_id;
    char name[80];
    span->info_at = at;
    span->idx = i;
    set_where(p, "tensor #%" PRIu64, i);
    RP_TRY(get_str(p, "name", &t->name));
    if (t->name.len == 0)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: empty tensor name (at byte %" PRIu64 ")", p->where, at);
    sanitize(name, sizeof name, t->name.ptr, t->name.len);
    set_where(p, "tensor #%" PRIu64 " '%s'", i, name);
    if (t->name.len >= RP_GGUF_MAX_NAME)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: name length %" PRIu64 " exceeds %u bytes (at byte %" PRIu64 ")",
                         p->where, t->name.len, RP_GGUF_MAX_NAME - 1, at);
    if (memchr(t->name.ptr, 0, t->name.len))
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: name contains a NUL byte (at byte %" PRIu64 ")", p->where, at);
    if (!map_insert(&g->t_map, t->name.ptr, t->name.len, i, &dup))
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: duplicate tensor name (first defined as tensor #%" PRIu64
                         ") (at byte %" PRIu64 ")", p->where, dup, at);

    at_field = p->pos;
    RP_TRY(get_u32(p, "n_dims", &nd));
    if (nd < 1 || nd > RP_GGUF_MAX_DIMS)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: n_dims %" PRIu32 " not in 1..%d (at byte %" PRIu64 ")",
                         p->where, nd, RP_GGUF_MAX_DIMS, at_field);
    t->n_dims = nd;
    for (int d = 0; d < RP_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        at_field = p->pos;
        RP_TRY(get_u64(p, "ne", &u));
        /* ggml stores dims as int64; negative sizes are corrupt. */
        if (u > (uint64_t)INT64_MAX)
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: ne[%" PRIu32 "] = %" PRId64 " is negative (at byte %" PRIu64 ")",
                             p->where, d, (int64_t)u, at_field);
        t->ne[d] = (int64_t)u;
        if (!ck_mul(nelem, u, &nelem) || nelem > (uint64_t)INT64_MAX)
            return rp_errorf(RP_ERR_FORMAT, "gguf: %s: element count overflows int64 at ne[%" PRIu32 "] (at byte %" PRIu64 ")",
                             p->where, d, at_field);
    }

    at_field = p->pos;
    RP_TRY(get_u32(p, "type", &type_id));
    const rp_type_traits *tr = type_id < RP_TYPE_COUNT ? rp_type_get_traits((int)type_id) : NULL;
    if (tr == NULL && type_id < RP_TYPE_COUNT && rp_type_is_removed((int)type_id))
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "gguf: %s: type %s (id %" PRIu32 ") is not supported: ggml removed it, so its block size is "
                         "unknown (at byte %" PRIu64 ")", p->where, rp_type_name((int)type_id), type_id, at_field);
    if (!tr || tr->blck_size <= 0 || tr->type_size == 0)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "gguf: %s: tensor type id %" PRIu32 " is not a ggml type (ggml's ids are 0..%d; at byte %" PRIu64 ")",
                         p->where, type_id, RP_TYPE_COUNT - 1, at_field);
    t->type = (rp_type)type_id;
    uint64_t blck = (uint64_t)tr->blck_size;
    if ((uint64_t)t->ne[0] % blck != 0)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu64
                         " (at byte %" PRIu64 ")", p->where, t->ne[0], tr->name, blck, at_field);
    uint64_t nb = (uint64_t)t->ne[0] / blck;
    bool ok = ck_mul(nb, (uint64_t)tr->type_size, &nb);
    for (int d = 1; d < RP_GGUF_MAX_DIMS && ok; d++) ok = ck_mul(nb, (uint64_t)t->ne[d], &nb);
    if (!ok)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: byte size overflows 64 bits (at byte %" PRIu64 ")", p->where, at_field);
    t->nbytes = nb;

    at_field = p->pos;
    RP_TRY(get_u64(p, "offset", &t->offset));
    if (t->offset % g->alignment != 0)
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: data offset 0x%" PRIx64 " is not a multiple of the alignment %" PRIu32
                         " (at byte %" PRIu64 ")", p->where, t->offset, g->alignment, at_field);
    span->off = t->offset;
    if (!ck_add(t->offset, t->nbytes, &span->end))
        return rp_errorf(RP_ERR_FORMAT, "gguf: %s: data offset+size overflows (at byte %" PRIu64 ")", p->where, at_field);
    return RP_OK;
}

static rp_status parse_tensors(rp_parser *p, rp_gguf *g) {
    rp_tspan *span = NULL;
    rp_status st = RP_OK;
    if (g->n_tensors > 0) {
        /* n_tensors <= size / 33, so these allocations are bounded by the file size. */
        g->tensors = calloc(g->n_tensors, sizeof *g->tensors);
        span = calloc(g->n_tensors, sizeof *span);
        if (!g->tensors || !span) {
            free(span);
            return rp_errorf(RP_ERR_NOMEM, "gguf: cannot allocate %" PRIu64 " tensor records", g->n_tensors);
        }
    }
    RP_TRY(map_init(&g->t_map, g->n_tensors));
    for (uint64_t i = 0; i < g->n_tensors && st == RP_OK; i++) st = parse_tensor(p, g, i, &span[i]);
    if (st != RP_OK) { free(span); return st; }

    /* The data section starts at the aligned end of the header. For vocab-only
     * files (no tensors) that may lie past EOF since nothing is read from it. */
    uint64_t pad = (g->alignment - p->pos % g->alignment) % g->alignment;
    if (!ck_add(p->pos, pad, &g->data_offset)) {
        free(span);
        return rp_errorf(RP_ERR_FORMAT, "gguf: header: data section offset overflows (at byte %" PRIu64 ")", p->pos);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        rp_gguf_tensor *t = &g->tensors[i];
        uint64_t abs_end;
        if (!ck_add(g->data_offset, span[i].end, &abs_end) || abs_end > g->size) {
            char name[80];
            sanitize(name, sizeof name, t->name.ptr, t->name.len);
            st = rp_errorf(RP_ERR_FORMAT, "gguf: tensor #%" PRIu64 " '%s': data [0x%" PRIx64 ", 0x%" PRIx64
                           ") + data section 0x%" PRIx64 " beyond file end 0x%" PRIx64 " (info at byte %" PRIu64 ")",
                           i, name, span[i].off, span[i].end, g->data_offset, g->size, span[i].info_at);
            free(span);
            return st;
        }
        t->data = g->base + g->data_offset + t->offset;
    }
    if (g->n_tensors > 1) {
        /* Sorted by (offset, end): zero-size tensors sort first and never overlap. */
        qsort(span, g->n_tensors, sizeof *span, tspan_cmp);
        for (uint64_t i = 1; i < g->n_tensors; i++) {
            if (span[i].off < span[i - 1].end) {
                const rp_gguf_tensor *a = &g->tensors[span[i - 1].idx], *b = &g->tensors[span[i].idx];
                char na[80], nb[80];
                sanitize(na, sizeof na, a->name.ptr, a->name.len);
                sanitize(nb, sizeof nb, b->name.ptr, b->name.len);
                st = rp_errorf(RP_ERR_FORMAT, "gguf: tensor #%" PRIu64 " '%s': data [0x%" PRIx64 ", 0x%" PRIx64
                               ") overlaps tensor #%" PRIu64 " '%s' [0x%" PRIx64 ", 0x%" PRIx64 ") (info at byte %" PRIu64 ")",
                               span[i].idx, nb, span[i].off, span[i].end, span[i - 1].idx, na,
                               span[i - 1].off, span[i - 1].end, span[i].info_at);
                break;
            }
        }
    }
    free(span);
    return st;
}

static rp_status parse(rp_gguf *g) {
    rp_parser p = {.base = g->base, .size = g->size, .pos = 0};
    uint32_t version;
    uint64_t nt, nkv;
    set_where(&p, "header");
    RP_TRY(need(&p, 4, "magic"));
    if (memcmp(g->base, "GGUF", 4) != 0)
        return rp_errorf(RP_ERR_FORMAT, "gguf: header: magic %02x %02x %02x %02x is not 'GGUF' (at byte 0)",
                         g->base[0], g->base[1], g->base[2], g->base[3]);
    p.pos = 4;
    RP_TRY(get_u32(&p, "version", &version));
    if (version != 2 && version != 3) {
        uint32_t sw = __builtin_bswap32(version);
        if (sw >= 1 && sw <= 3)
            return rp_errorf(RP_ERR_UNSUPPORTED, "gguf: header: version field 0x%08" PRIx32
                             " looks big-endian; only little-endian GGUF is supported (at byte 4)", version);
        return rp_errorf(RP_ERR_UNSUPPORTED, "gguf: header: version %" PRIu32 " not supported (need 2 or 3) (at byte 4)",
                         version);
    }
    g->version = version;
    RP_TRY(get_u64(&p, "tensor_count", &nt));
    RP_TRY(get_u64(&p, "kv_count", &nkv));
    /* Reject absurd counts before allocating: every kv and tensor info has a
     * minimum encoded size, so the remaining bytes bound both counts. */
    uint64_t rem = remaining(&p);
    if (nkv > rem / RP_GGUF_MIN_KV_BYTES)
        return rp_errorf(RP_ERR_FORMAT, "gguf: header: kv_count %" PRIu64 " cannot fit in the remaining %" PRIu64
                         " bytes (>= %u each) (at byte 16)", nkv, rem, RP_GGUF_MIN_KV_BYTES);
    if (nt > rem / RP_GGUF_MIN_TENSOR_BYTES ||
        nt * RP_GGUF_MIN_TENSOR_BYTES > rem - nkv * RP_GGUF_MIN_KV_BYTES)
        return rp_errorf(RP_ERR_FORMAT, "gguf: header: tensor_count %" PRIu64 " with kv_count %" PRIu64
                         " cannot fit in the remaining %" PRIu64 " bytes (at byte 8)", nt, nkv, rem);
    g->n_kv = nkv;
    g->n_tensors = nt;
    if (nkv > 0) {
        g->kv = calloc(nkv, sizeof *g->kv);   /* nkv <= size / 14: bounded by the file size */
        if (!g->kv) return rp_errorf(RP_ERR_NOMEM, "gguf: cannot allocate %" PRIu64 " kv records", nkv);
    }
    RP_TRY(map_init(&g->kv_map, nkv));
    RP_TRY(parse_kvs(&p, g));
    RP_TRY(parse_alignment(g));
    return parse_tensors(&p, g);
}

/* ------------------------------------------------------------------------- */
/* open / close                                                                */

void rp_gguf_close(rp_gguf *g) {
    if (!g) return;
    for (uint64_t i = 0; i < g->n_kv && g->kv; i++) free(g->kv[i].str_off);
    free(g->kv);
    free(g->kv_map.slot);
    free(g->tensors);
    free(g->t_map.slot);
    if (g->mapped && g->size > 0) munmap((void *)g->base, (size_t)g->size);
    free(g);
}

static rp_status open_common(const uint8_t *base, uint64_t size, bool mapped, rp_gguf **out) {
    rp_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (mapped) munmap((void *)base, (size_t)size);
        return rp_errorf(RP_ERR_NOMEM, "gguf: cannot allocate reader");
    }
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    rp_status st = parse(g);
    if (st != RP_OK) {
        rp_gguf_close(g);
        return st;
    }
    *out = g;
    return RP_OK;
}

rp_status rp_gguf_open_memory(const void *buf, size_t len, rp_gguf **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "gguf: open_memory: out is NULL");
    *out = NULL;
    if (!buf && len > 0) return rp_errorf(RP_ERR_INVALID_ARG, "gguf: open_memory: NULL buffer of %zu bytes", len);
    static const uint8_t empty[1];
    return open_common(buf ? buf : empty, len, false, out);
}

/* Prefixes the current error detail with the path, so a CLI user knows which file was bad. */
static rp_status with_path(rp_status st, const char *path) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    return rp_errorf(st, "%s: %s", path, msg);
}

rp_status rp_gguf_open(const char *path, rp_gguf **out) {
    if (!out || !path) return rp_errorf(RP_ERR_INVALID_ARG, "gguf: open: NULL path or out");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rp_errorf(RP_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rp_errorf(RP_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rp_errorf(RP_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < RP_GGUF_HEADER_BYTES) {
        /* Too short for the fixed header (and mmap of 0 bytes fails): parse a
         * copy so the message names the first missing field like any truncation. */
        uint8_t small[RP_GGUF_HEADER_BYTES] = {0};
        ssize_t got = size ? pread(fd, small, (size_t)size, 0) : 0;
        close(fd);
        if (got < 0 || (uint64_t)got != size) return rp_errorf(RP_ERR_IO, "gguf: cannot read '%s'", path);
        rp_gguf tmp = {.base = small, .size = size};
        rp_status s = parse(&tmp);   /* always fails before allocating: the header needs 24 bytes */
        free(tmp.kv); free(tmp.kv_map.slot); free(tmp.tensors); free(tmp.t_map.slot);
        if (s == RP_OK) s = rp_errorf(RP_ERR_INTERNAL, "gguf: a %" PRIu64 "-byte file parsed", size);
        return with_path(s, path);
    }
    if (size > (uint64_t)SIZE_MAX) {
        close(fd);
        return rp_errorf(RP_ERR_UNSUPPORTED, "gguf: '%s' (%" PRIu64 " bytes) exceeds the address space", path, size);
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);   /* the mapping keeps the file referenced */
    if (m == MAP_FAILED) return rp_errorf(RP_ERR_IO, "gguf: cannot mmap '%s': %s", path, strerror(e));
    rp_status s = open_common(m, size, true, out);
    return s == RP_OK ? s : with_path(s, path);
}

/* ------------------------------------------------------------------------- */
/* accessors                                                                   */

uint32_t rp_gguf_version(const rp_gguf *g) { return g ? g->version : 0; }
uint64_t rp_gguf_file_size(const rp_gguf *g) { return g ? g->size : 0; }
uint64_t rp_gguf_data_offset(const rp_gguf *g) { return g ? g->data_offset : 0; }
uint32_t rp_gguf_alignment(const rp_gguf *g) { return g ? g->alignment : 0; }
uint64_t rp_gguf_n_kv(const rp_gguf *g) { return g ? g->n_kv : 0; }
uint64_t rp_gguf_n_tensors(const rp_gguf *g) { return g ? g->n_tensors : 0; }

static const rp_gguf_kv *kv_at(const rp_gguf *g, uint64_t i) {
    return (g && i < g->n_kv) ? &g->kv[i] : NULL;
}

int64_t rp_gguf_find_key(const rp_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return map_find(&g->kv_map, key, strlen(key));
}

rp_str rp_gguf_kv_key(const rp_gguf *g, uint64_t i) {
    const rp_gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key : (rp_str){"", 0};
}

rp_gguf_vtype rp_gguf_kv_type(const rp_gguf *g, uint64_t i) {
    const rp_gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : RP_GGUF_VTYPE_COUNT;
}

rp_gguf_vtype rp_gguf_kv_arr_type(const rp_gguf *g, uint64_t i) {
    const rp_gguf_kv *kv = kv_at(g, i);
    return (kv && kv->type == RP_GGUF_ARRAY) ? kv->arr_type : RP_GGUF_VTYPE_COUNT;
}

uint64_t rp_gguf_kv_arr_len(const rp_gguf *g, uint64_t i) {
    const rp_gguf_kv *kv = kv_at(g, i);
    return (kv && kv->type == RP_GGUF_ARRAY) ? kv->arr_len : 0;
}

/* Elements follow the element type (4) and count (8). May be unaligned. */
const void *rp_gguf_kv_arr_data(const rp_gguf *g, uint64_t i) {
    const rp_gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != RP_GGUF_ARRAY || kv->arr_type == RP_GGUF_STRING) return NULL;
    return g->base + kv->val_off + 12;
}

rp_str rp_gguf_kv_arr_str(const rp_gguf *g, uint64_t i, uint64_t j) {
    const rp_gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != RP_GGUF_ARRAY || kv->arr_type != RP_GGUF_STRING || j >= kv->arr_len || !kv->str_off)
        return (rp_str){"", 0};
    uint64_t at = kv->str_off[j];
    return (rp_str){(const char *)g->base + at + 8, rd_u64(g->base + at)};
}

const void *rp_gguf_kv_raw(const rp_gguf *g, uint64_t i, uint64_t *len) {
    const rp_gguf_kv *kv = kv_at(g, i);
    if (len) *len = kv ? kv->val_len : 0;
    return kv ? g->base + kv->val_off : NULL;
}

/* ---- typed getters ---- */

static rp_status lookup(const rp_gguf *g, const char *key, const rp_gguf_kv **out) {
    if (!g || !key) return rp_errorf(RP_ERR_INVALID_ARG, "gguf: get: NULL reader or key");
    int64_t i = rp_gguf_find_key(g, key);
    if (i < 0) return RP_ERR_NOT_FOUND;   /* deliberately no error text: optional keys are common */
    *out = &g->kv[i];
    return RP_OK;
}

static rp_status wrong_type(const rp_gguf_kv *kv, const char *key, const char *want) {
    return rp_errorf(RP_ERR_FORMAT, "gguf: key '%s' has type %s, expected %s (at byte %" PRIu64 ")",
                     key, rp_gguf_vtype_name(kv->type), want, kv->val_off);
}

/* Reads an integer-typed value as either signed or unsigned 64-bit. */
static bool read_int(const rp_gguf *g, const rp_gguf_kv *kv, bool *neg, uint64_t *mag, int64_t *sval) {
    const uint8_t *p = g->base + kv->val_off;
    int64_t s = 0;
    uint64_t u = 0;
    bool is_signed = true;
    switch (kv->type) {
    case RP_GGUF_U8: u = p[0]; is_signed = false; break;
    case RP_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); u = v; is_signed = false; break; }
    case RP_GGUF_U32: u = rd_u32(p); is_signed = false; break;
    case RP_GGUF_U64: u = rd_u64(p); is_signed = false; break;
    case RP_GGUF_I8: { int8_t v; memcpy(&v, p, 1); s = v; break; }
    case RP_GGUF_I16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case RP_GGUF_I32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case RP_GGUF_I64: { int64_t v; memcpy(&v, p, 8); s = v; break; }
    default: return false;
    }
    if (is_signed) {
        *neg = s < 0;
        *mag = s < 0 ? 0 : (uint64_t)s;
        *sval = s;
    } else {
        *neg = false;
        *mag = u;
        *sval = u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    return true;
}

static rp_status get_int(const rp_gguf *g, const char *key, bool want_signed, int64_t lo, uint64_t hi,
                         const char *want, int64_t *sout, uint64_t *uout) {
    const rp_gguf_kv *kv = NULL;
    bool neg;
    uint64_t mag;
    int64_t s;
    RP_TRY(lookup(g, key, &kv));
    if (!read_int(g, kv, &neg, &mag, &s)) return wrong_type(kv, key, "an integer");
    bool fits = neg ? (want_signed && s >= lo) : (mag <= hi);
    if (!fits) {
        if (neg)
            return rp_errorf(RP_ERR_FORMAT, "gguf: key '%s' value %" PRId64 " does not fit %s (at byte %" PRIu64 ")",
                             key, s, want, kv->val_off);
        return rp_errorf(RP_ERR_FORMAT, "gguf: key '%s' value %" PRIu64 " does not fit %s (at byte %" PRIu64 ")",
                         key, mag, want, kv->val_off);
    }
    if (sout) *sout = neg ? s : (int64_t)mag;
    if (uout) *uout = mag;
    return RP_OK;
}

rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out) {
    uint64_t u = 0;
    RP_TRY(get_int(g, key, false, 0, UINT32_MAX, "u32", NULL, &u));
    if (out) *out = (uint32_t)u;
    return RP_OK;
}

rp_status rp_gguf_get_i32(const rp_gguf *g, const char *key, int32_t *out) {
    int64_t s = 0;
    RP_TRY(get_int(g, key, true, INT32_MIN, INT32_MAX, "i32", &s, NULL));
    if (out) *out = (int32_t)s;
    return RP_OK;
}

rp_status rp_gguf_get_u64(const rp_gguf *g, const char *key, uint64_t *out) {
    uint64_t u = 0;
    RP_TRY(get_int(g, key, false, 0, UINT64_MAX, "u64", NULL, &u));
    if (out) *out = u;
    return RP_OK;
}

rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out) {
    const rp_gguf_kv *kv = NULL;
    RP_TRY(lookup(g, key, &kv));
    const uint8_t *p = g->base + kv->val_off;
    float f;
    if (kv->type == RP_GGUF_F32) {
        memcpy(&f, p, 4);
    } else if (kv->type == RP_GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        /* Converting an out-of-range finite double to float is undefined behaviour. */
        if (isfinite(d) && fabs(d) > FLT_MAX)
            return rp_errorf(RP_ERR_FORMAT, "gguf: key '%s' value %g does not fit f32 (at byte %" PRIu64 ")",
                             key, d, kv->val_off);
        f = (float)d;
    } else {
        return wrong_type(kv, key, "f32 or f64");
    }
    if (out) *out = f;
    return RP_OK;
}

rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out) {
    const rp_gguf_kv *kv = NULL;
    RP_TRY(lookup(g, key, &kv));
    if (kv->type != RP_GGUF_BOOL) return wrong_type(kv, key, "bool");
    if (out) *out = g->base[kv->val_off] != 0;
    return RP_OK;
}

rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, rp_str *out) {
    const rp_gguf_kv *kv = NULL;
    RP_TRY(lookup(g, key, &kv));
    if (kv->type != RP_GGUF_STRING) return wrong_type(kv, key, "str");
    if (out) *out = (rp_str){(const char *)g->base + kv->val_off + 8, rd_u64(g->base + kv->val_off)};
    return RP_OK;
}

rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_vtype *elem_type, uint64_t *n,
                          int64_t *kv_index) {
    const rp_gguf_kv *kv = NULL;
    RP_TRY(lookup(g, key, &kv));
    if (kv->type != RP_GGUF_ARRAY) return wrong_type(kv, key, "arr");
    if (elem_type) *elem_type = kv->arr_type;
    if (n) *n = kv->arr_len;
    if (kv_index) *kv_index = kv - g->kv;
    return RP_OK;
}

/* ---- tensors ---- */

const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, uint64_t i) {
    return (g && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = map_find(&g->t_map, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* ------------------------------------------------------------------------- */
/* formatting for `reprise inspect`                                            */

/* Bounded appender: buf always NUL-terminated; `full` once something was cut. */
typedef struct rp_sb {
    char *buf;
    size_t cap, len;
    bool full;
} rp_sb;

static void sb_puts(rp_sb *s, const char *str, size_t n) {
    if (s->cap == 0) return;
    size_t room = s->cap - 1 - s->len;
    if (n > room) { n = room; s->full = true; }
    memcpy(s->buf + s->len, str, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

static void sb_printf(rp_sb *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(rp_sb *s, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_puts(s, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* If output was cut, drop a trailing incomplete UTF-8 sequence so the text stays printable. */
static void sb_fix_utf8_tail(rp_sb *s) {
    if (!s->full || s->len == 0) return;
    size_t j = s->len, back = 0;
    while (j > 0 && back < 4 && ((unsigned char)s->buf[j - 1] & 0xC0) == 0x80) { j--; back++; }
    if (j == 0) return;
    unsigned char lead = (unsigned char)s->buf[j - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && back + 1 < need) { s->len = j - 1; s->buf[s->len] = '\0'; }
}

/* Python-repr-like single-quoted string, at most `limit` bytes of content (cut on a UTF-8 boundary). */
static void sb_quote(rp_sb *s, rp_str v, uint64_t limit) {
    uint64_t n = v.len;
    if (n > limit) {
        n = limit;
        while (n > 0 && ((unsigned char)v.ptr[n] & 0xC0) == 0x80) n--;
    }
    sb_puts(s, "'", 1);
    for (uint64_t i = 0; i < n && !s->full; i++) {
        unsigned char c = (unsigned char)v.ptr[i];
        if (c == '\'' || c == '\\') { char e[2] = {'\\', (char)c}; sb_puts(s, e, 2); }
        else if (c == '\n') sb_puts(s, "\\n", 2);
        else if (c == '\t') sb_puts(s, "\\t", 2);
        else if (c == '\r') sb_puts(s, "\\r", 2);
        else if (c < 0x20 || c == 0x7f) sb_printf(s, "\\x%02x", c);
        else sb_puts(s, (const char *)&c, 1);
    }
    sb_puts(s, "'", 1);
    if (n < v.len) sb_printf(s, "... (%" PRIu64 " bytes)", v.len);
}

/* Shortest %g rendering that round-trips. */
static void sb_float(rp_sb *s, double d, bool is_f32) {
    char tmp[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        /* strtof for f32 values: parse-and-round in float, no double->float narrowing of an out-of-range value. */
        if (is_f32 ? strtof(tmp, NULL) == (float)d : strtod(tmp, NULL) == d) break;
        if (isnan(d)) break;
    }
    sb_puts(s, tmp, strlen(tmp));
}

/* Renders one fixed-size element at p. */
static void sb_scalar(rp_sb *s, rp_gguf_vtype t, const uint8_t *p) {
    switch (t) {
    case RP_GGUF_U8: sb_printf(s, "%u", p[0]); break;
    case RP_GGUF_I8: { int8_t v; memcpy(&v, p, 1); sb_printf(s, "%d", v); break; }
    case RP_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); sb_printf(s, "%u", v); break; }
    case RP_GGUF_I16: { int16_t v; memcpy(&v, p, 2); sb_printf(s, "%d", v); break; }
    case RP_GGUF_U32: sb_printf(s, "%" PRIu32, rd_u32(p)); break;
    case RP_GGUF_I32: { int32_t v; memcpy(&v, p, 4); sb_printf(s, "%" PRId32, v); break; }
    case RP_GGUF_U64: sb_printf(s, "%" PRIu64, rd_u64(p)); break;
    case RP_GGUF_I64: { int64_t v; memcpy(&v, p, 8); sb_printf(s, "%" PRId64, v); break; }
    case RP_GGUF_F32: { float v; memcpy(&v, p, 4); sb_float(s, v, true); break; }
    case RP_GGUF_F64: { double v; memcpy(&v, p, 8); sb_float(s, v, false); break; }
    case RP_GGUF_BOOL: sb_puts(s, p[0] ? "true" : "false", p[0] ? 4 : 5); break;
    default: sb_puts(s, "?", 1); break;
    }
}

/* Encoded size of an already-validated value of type t at absolute offset `at`. */
static uint64_t encoded_size(const rp_gguf *g, rp_gguf_vtype t, uint64_t at) {
    if (t == RP_GGUF_STRING) return 8 + rd_u64(g->base + at);
    if (t != RP_GGUF_ARRAY) return vtype_fixed_size(t);
    rp_gguf_vtype et = (rp_gguf_vtype)rd_u32(g->base + at);
    uint64_t n = rd_u64(g->base + at + 4), pos = at + 12;
    if (et != RP_GGUF_STRING && et != RP_GGUF_ARRAY) return 12 + n * vtype_fixed_size(et);
    for (uint64_t i = 0; i < n; i++) pos += encoded_size(g, et, pos);
    return pos - at;
}

#define RP_GGUF_FMT_ELEMS 5     /* array elements shown */
#define RP_GGUF_FMT_STR 120     /* bytes shown of a string value */
#define RP_GGUF_FMT_ELEM_STR 40 /* bytes shown of each array string */

void rp_gguf_kv_format(const rp_gguf *g, uint64_t i, char *buf, size_t cap) {
    rp_sb s = {buf, cap, 0, false};
    if (!buf || cap == 0) return;
    buf[0] = '\0';
    const rp_gguf_kv *kv = kv_at(g, i);
    if (!kv) { sb_puts(&s, "<no such key>", 13); return; }
    const uint8_t *p = g->base + kv->val_off;
    if (kv->type == RP_GGUF_STRING) {
        sb_quote(&s, (rp_str){(const char *)p + 8, rd_u64(p)}, RP_GGUF_FMT_STR);
    } else if (kv->type != RP_GGUF_ARRAY) {
        sb_scalar(&s, kv->type, p);
    } else {
        rp_gguf_vtype et = kv->arr_type;
        uint64_t n = kv->arr_len, shown = n < RP_GGUF_FMT_ELEMS ? n : RP_GGUF_FMT_ELEMS;
        uint64_t pos = kv->val_off + 12;
        sb_printf(&s, "[%s x %" PRIu64 "] [", rp_gguf_vtype_name(et), n);
        for (uint64_t j = 0; j < shown && !s.full; j++) {
            if (j) sb_puts(&s, ", ", 2);
            if (et == RP_GGUF_STRING) {
                sb_quote(&s, rp_gguf_kv_arr_str(g, i, j), RP_GGUF_FMT_ELEM_STR);
            } else if (et == RP_GGUF_ARRAY) {
                /* Nested arrays: show the element's own type and count only. */
                sb_printf(&s, "[%s x %" PRIu64 "]", rp_gguf_vtype_name((rp_gguf_vtype)rd_u32(g->base + pos)),
                          rd_u64(g->base + pos + 4));
                pos += encoded_size(g, et, pos);
            } else {
                sb_scalar(&s, et, g->base + pos);
                pos += vtype_fixed_size(et);
            }
        }
        if (n > shown) sb_puts(&s, ", ...", 5);
        sb_puts(&s, "]", 1);
    }
    sb_fix_utf8_tail(&s);
}
