/* gguf_write.c — GGUF v3 writer: metadata + aligned tensor data, written to a temp file then fsync + rename. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer assumes a little-endian host"
#endif

#define RP_GGUF_W_DEFAULT_ALIGNMENT 32u
#define RP_GGUF_W_MAX_NAME 64u     /* ggml's GGML_MAX_NAME incl. NUL: names are <= 63 bytes */
#define RP_GGUF_W_MAX_KEY 65535u   /* GGUF spec limit on key length */

/* One metadata entry, its value kept already encoded (bytes that follow the type id). */
typedef struct rp_gw_kv {
    char *key;
    rp_gguf_vtype type;
    uint8_t *val;
    uint64_t len;
} rp_gw_kv;

typedef struct rp_gw_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[RP_GGUF_MAX_DIMS];
    rp_type type;
    uint64_t nbytes;
    uint64_t offset;          /* assigned by write_file, relative to the data section */
    const void *data;         /* borrowed (add_tensor) ... */
    rp_gguf_fill_fn fill;     /* ... or produced on demand (add_tensor_fill) */
    void *user;
} rp_gw_tensor;

struct rp_gguf_writer {
    rp_gw_kv *kv;
    uint64_t n_kv, cap_kv;
    rp_gw_tensor *t;
    uint64_t n_t, cap_t;
};

rp_status rp_gguf_writer_create(rp_gguf_writer **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate");
    return RP_OK;
}

void rp_gguf_writer_free(rp_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].val); }
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- metadata ---- */

/* Validates the key, checks it is new (linear: writers hold tens of keys) and appends
 * an entry taking ownership of `val` (freed on failure). */
static rp_status add_kv(rp_gguf_writer *w, const char *key, rp_gguf_vtype type, uint8_t *val, uint64_t len) {
    rp_status st = RP_OK;
    size_t klen = key ? strlen(key) : 0;
    if (!w || !key) st = rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: NULL writer or key");
    else if (klen == 0) st = rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: empty key");
    else if (klen > RP_GGUF_W_MAX_KEY)
        st = rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key of %zu bytes exceeds %u", klen, RP_GGUF_W_MAX_KEY);
    for (uint64_t i = 0; st == RP_OK && i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) st = rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s' added twice", key);
    if (st == RP_OK && strcmp(key, "general.alignment") == 0) {
        uint32_t a = 0;
        if (type == RP_GGUF_U32) memcpy(&a, val, 4);
        if (type != RP_GGUF_U32 || a == 0 || (a & (a - 1)) != 0)
            st = rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: general.alignment must be a u32 nonzero power of two");
    }
    if (st == RP_OK && w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        rp_gw_kv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) st = rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot grow key table");
        else { w->kv = nk; w->cap_kv = cap; }
    }
    char *kcopy = st == RP_OK ? strdup(key) : NULL;
    if (st == RP_OK && !kcopy) st = rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot copy key");
    if (st != RP_OK) { free(val); return st; }
    w->kv[w->n_kv++] = (rp_gw_kv){kcopy, type, val, len};
    return RP_OK;
}

static uint64_t scalar_size(rp_gguf_vtype t) {
    switch (t) {
    case RP_GGUF_U8: case RP_GGUF_I8: case RP_GGUF_BOOL: return 1;
    case RP_GGUF_U16: case RP_GGUF_I16: return 2;
    case RP_GGUF_U32: case RP_GGUF_I32: case RP_GGUF_F32: return 4;
    case RP_GGUF_U64: case RP_GGUF_I64: case RP_GGUF_F64: return 8;
    default: return 0;
    }
}

rp_status rp_gguf_writer_set_scalar(rp_gguf_writer *w, const char *key, rp_gguf_vtype type, const void *v) {
    uint64_t sz = (unsigned)type < RP_GGUF_VTYPE_COUNT ? scalar_size(type) : 0;
    if (sz == 0 || !v)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': set_scalar needs a numeric/bool type and a value",
                         key ? key : "(null)");
    uint8_t *val = malloc(sz);
    if (!val) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate value");
    if (type == RP_GGUF_BOOL) val[0] = *(const bool *)v ? 1 : 0;   /* GGUF bools are one byte 0/1 */
    else memcpy(val, v, sz);
    return add_kv(w, key, type, val, sz);
}

rp_status rp_gguf_writer_set_u32(rp_gguf_writer *w, const char *key, uint32_t v) {
    return rp_gguf_writer_set_scalar(w, key, RP_GGUF_U32, &v);
}
rp_status rp_gguf_writer_set_i32(rp_gguf_writer *w, const char *key, int32_t v) {
    return rp_gguf_writer_set_scalar(w, key, RP_GGUF_I32, &v);
}
rp_status rp_gguf_writer_set_u64(rp_gguf_writer *w, const char *key, uint64_t v) {
    return rp_gguf_writer_set_scalar(w, key, RP_GGUF_U64, &v);
}
rp_status rp_gguf_writer_set_f32(rp_gguf_writer *w, const char *key, float v) {
    return rp_gguf_writer_set_scalar(w, key, RP_GGUF_F32, &v);
}
rp_status rp_gguf_writer_set_bool(rp_gguf_writer *w, const char *key, bool v) {
    return rp_gguf_writer_set_scalar(w, key, RP_GGUF_BOOL, &v);
}

rp_status rp_gguf_writer_set_str(rp_gguf_writer *w, const char *key, const char *v) {
    if (!v) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key ? key : "(null)");
    uint64_t n = strlen(v);
    uint8_t *val = malloc(8 + n);
    if (!val) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate a %" PRIu64 "-byte string", n);
    put_u64(val, n);
    memcpy(val + 8, v, n);
    return add_kv(w, key, RP_GGUF_STRING, val, 8 + n);
}

rp_status rp_gguf_writer_set_arr(rp_gguf_writer *w, const char *key, rp_gguf_vtype elem_type, const void *data,
                                 uint64_t n) {
    uint64_t es = (unsigned)elem_type < RP_GGUF_VTYPE_COUNT ? scalar_size(elem_type) : 0, body, total;
    if (es == 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': set_arr element type %d is not numeric/bool",
                         key ? key : "(null)", (int)elem_type);
    if (!data && n > 0) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': NULL array data", key ? key : "(null)");
    if (__builtin_mul_overflow(n, es, &body) || __builtin_add_overflow(body, 12, &total) || total > SIZE_MAX)
        return rp_errorf(RP_ERR_NOMEM, "gguf writer: key '%s': array of %" PRIu64 " elements too large", key ? key : "(null)", n);
    uint8_t *val = malloc((size_t)total);
    if (!val) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate a %" PRIu64 "-byte array", total);
    put_u32(val, (uint32_t)elem_type);
    put_u64(val + 4, n);
    if (elem_type == RP_GGUF_BOOL) {
        const bool *b = data;
        for (uint64_t i = 0; i < n; i++) val[12 + i] = b[i] ? 1 : 0;
    } else if (body) {
        memcpy(val + 12, data, (size_t)body);
    }
    return add_kv(w, key, RP_GGUF_ARRAY, val, total);
}

rp_status rp_gguf_writer_set_arr_str(rp_gguf_writer *w, const char *key, const rp_str *strs, uint64_t n) {
    uint64_t total = 12;
    if (!strs && n > 0) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string array", key ? key : "(null)");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i].ptr && strs[i].len > 0)
            return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: key '%s': string #%" PRIu64 " is NULL", key ? key : "(null)", i);
        if (__builtin_add_overflow(total, 8, &total) || __builtin_add_overflow(total, strs[i].len, &total))
            return rp_errorf(RP_ERR_NOMEM, "gguf writer: key '%s': string array too large", key ? key : "(null)");
    }
    if (total > SIZE_MAX) return rp_errorf(RP_ERR_NOMEM, "gguf writer: key '%s': string array too large", key ? key : "(null)");
    uint8_t *val = malloc((size_t)total), *p;
    if (!val) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate a %" PRIu64 "-byte string array", total);
    put_u32(val, RP_GGUF_STRING);
    put_u64(val + 4, n);
    p = val + 12;
    for (uint64_t i = 0; i < n; i++) {
        put_u64(p, strs[i].len);
        if (strs[i].len) memcpy(p + 8, strs[i].ptr, (size_t)strs[i].len);
        p += 8 + strs[i].len;
    }
    return add_kv(w, key, RP_GGUF_ARRAY, val, total);
}

rp_status rp_gguf_writer_copy_kv(rp_gguf_writer *w, const rp_gguf *src, uint64_t i) {
    if (!src || i >= rp_gguf_n_kv(src))
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: copy_kv: key index %" PRIu64 " out of range", i);
    rp_str k = rp_gguf_kv_key(src, i);
    uint64_t len = 0;
    const void *raw = rp_gguf_kv_raw(src, i, &len);
    /* The reader guarantees keys have no NUL and <= 65535 bytes, so a C copy is exact. */
    char *key = malloc((size_t)k.len + 1);
    uint8_t *val = malloc(len ? (size_t)len : 1);
    if (!key || !val) {
        free(key); free(val);
        return rp_errorf(RP_ERR_NOMEM, "gguf writer: copy_kv: cannot allocate %" PRIu64 " bytes", len);
    }
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = '\0';
    if (len) memcpy(val, raw, (size_t)len);
    rp_status st = add_kv(w, key, rp_gguf_kv_type(src, i), val, len);
    free(key);
    return st;
}

/* ---- tensors ---- */

static rp_status add_tensor_common(rp_gguf_writer *w, const char *name, rp_type type, uint32_t n_dims,
                                   const int64_t *ne, uint64_t *nbytes_out, rp_gw_tensor **slot) {
    if (!w || !name || !ne) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: add_tensor: NULL argument");
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen >= RP_GGUF_W_MAX_NAME)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor name '%s' must be 1..%u bytes", name, RP_GGUF_W_MAX_NAME - 1);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s' added twice", name);
    if (n_dims < 1 || n_dims > RP_GGUF_MAX_DIMS)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %" PRIu32 " not in 1..%d", name, n_dims,
                         RP_GGUF_MAX_DIMS);
    const rp_type_traits *tr = rp_type_get_traits((int)type);
    if (!tr || tr->blck_size <= 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type id %d", name, (int)type);
    int64_t dims[RP_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%u] = %" PRId64 " < 0", name, d, ne[d]);
        dims[d] = ne[d];
        if (__builtin_mul_overflow(nelem, (uint64_t)ne[d], &nelem) || nelem > (uint64_t)INT64_MAX)
            return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': element count overflows", name);
    }
    if (dims[0] % tr->blck_size != 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] = %" PRId64 " not a multiple of %s block %" PRId64,
                         name, dims[0], tr->name, tr->blck_size);
    uint64_t nb = (uint64_t)(dims[0] / tr->blck_size);
    bool ok = !__builtin_mul_overflow(nb, (uint64_t)tr->type_size, &nb);
    for (int d = 1; d < RP_GGUF_MAX_DIMS && ok; d++) ok = !__builtin_mul_overflow(nb, (uint64_t)dims[d], &nb);
    if (!ok || nb > SIZE_MAX) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': byte size overflows", name);
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        rp_gw_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot grow tensor table");
        w->t = nt;
        w->cap_t = cap;
    }
    char *copy = strdup(name);
    if (!copy) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot copy tensor name");
    rp_gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->n_dims = n_dims;
    memcpy(t->ne, dims, sizeof dims);
    t->type = type;
    t->nbytes = nb;
    *nbytes_out = nb;
    *slot = t;
    return RP_OK;
}

rp_status rp_gguf_writer_add_tensor(rp_gguf_writer *w, const char *name, rp_type type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t nbytes) {
    uint64_t want = 0;
    rp_gw_tensor *t = NULL;
    RP_TRY(add_tensor_common(w, name, type, n_dims, ne, &want, &t));
    if (nbytes != want || (!data && nbytes > 0)) {
        free(t->name);
        return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': %" PRIu64 " bytes given, shape needs %" PRIu64 "%s",
                         name, nbytes, want, data ? "" : " (and data is NULL)");
    }
    t->data = data;
    w->n_t++;
    return RP_OK;
}

rp_status rp_gguf_writer_add_tensor_fill(rp_gguf_writer *w, const char *name, rp_type type, uint32_t n_dims,
                                         const int64_t *ne, rp_gguf_fill_fn fill, void *user) {
    uint64_t want = 0;
    rp_gw_tensor *t = NULL;
    if (!fill) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL fill callback", name ? name : "(null)");
    RP_TRY(add_tensor_common(w, name, type, n_dims, ne, &want, &t));
    t->fill = fill;
    t->user = user;
    w->n_t++;
    return RP_OK;
}

/* ---- output ---- */

typedef struct rp_gw_out {
    FILE *f;
    const char *path;   /* temp path, for messages */
    uint64_t pos;
} rp_gw_out;

static rp_status out_bytes(rp_gw_out *o, const void *p, uint64_t n) {
    if (n && fwrite(p, 1, (size_t)n, o->f) != (size_t)n)
        return rp_errorf(RP_ERR_IO, "gguf writer: write to '%s' failed at byte %" PRIu64 ": %s", o->path, o->pos, strerror(errno));
    o->pos += n;
    return RP_OK;
}

static rp_status out_u32(rp_gw_out *o, uint32_t v) { uint8_t b[4]; put_u32(b, v); return out_bytes(o, b, 4); }
static rp_status out_u64(rp_gw_out *o, uint64_t v) { uint8_t b[8]; put_u64(b, v); return out_bytes(o, b, 8); }

static rp_status out_pad(rp_gw_out *o, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - o->pos % align) % align;
    while (pad > 0) {
        uint64_t n = pad < sizeof zeros ? pad : sizeof zeros;
        RP_TRY(out_bytes(o, zeros, n));
        pad -= n;
    }
    return RP_OK;
}

static uint32_t writer_alignment(const rp_gguf_writer *w) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0 && w->kv[i].type == RP_GGUF_U32) {
            uint32_t a;
            memcpy(&a, w->kv[i].val, 4);
            return a;   /* validated as a nonzero power of two when added */
        }
    return RP_GGUF_W_DEFAULT_ALIGNMENT;
}

static rp_status write_all(rp_gguf_writer *w, rp_gw_out *o) {
    uint32_t align = writer_alignment(w);
    /* Tensor offsets: each starts aligned; data section padded after every tensor like ggml. */
    uint64_t run = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        uint64_t pad = (align - run % align) % align;
        if (__builtin_add_overflow(run, pad, &w->t[i].offset) ||
            __builtin_add_overflow(w->t[i].offset, w->t[i].nbytes, &run))
            return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: total tensor data overflows 64 bits");
    }
    RP_TRY(out_bytes(o, "GGUF", 4));
    RP_TRY(out_u32(o, 3));
    RP_TRY(out_u64(o, w->n_t));
    RP_TRY(out_u64(o, w->n_kv));
    for (uint64_t i = 0; i < w->n_kv; i++) {
        const rp_gw_kv *kv = &w->kv[i];
        uint64_t klen = strlen(kv->key);
        RP_TRY(out_u64(o, klen));
        RP_TRY(out_bytes(o, kv->key, klen));
        RP_TRY(out_u32(o, (uint32_t)kv->type));
        RP_TRY(out_bytes(o, kv->val, kv->len));
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        const rp_gw_tensor *t = &w->t[i];
        uint64_t nlen = strlen(t->name);
        RP_TRY(out_u64(o, nlen));
        RP_TRY(out_bytes(o, t->name, nlen));
        RP_TRY(out_u32(o, t->n_dims));
        for (uint32_t d = 0; d < t->n_dims; d++) RP_TRY(out_u64(o, (uint64_t)t->ne[d]));
        RP_TRY(out_u32(o, (uint32_t)t->type));
        RP_TRY(out_u64(o, t->offset));
    }
    if (w->n_t == 0) return RP_OK;   /* vocab-only: no data section, no trailing padding */
    RP_TRY(out_pad(o, align));
    uint64_t data_start = o->pos;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const rp_gw_tensor *t = &w->t[i];
        if (o->pos != data_start + t->offset)
            return rp_errorf(RP_ERR_INTERNAL, "gguf writer: tensor '%s' lands at %" PRIu64 ", planned %" PRIu64,
                             t->name, o->pos - data_start, t->offset);
        if (t->fill) {
            /* One tensor's buffer at a time; zeroed so a partial fill never leaks heap bytes into the file. */
            void *buf = calloc(1, t->nbytes ? (size_t)t->nbytes : 1);
            if (!buf) return rp_errorf(RP_ERR_NOMEM, "gguf writer: tensor '%s': cannot allocate %" PRIu64 " bytes",
                                       t->name, t->nbytes);
            rp_status st = t->fill(t->user, t->name, buf, t->nbytes);
            if (st == RP_OK) st = out_bytes(o, buf, t->nbytes);
            free(buf);
            RP_TRY(st);
        } else {
            RP_TRY(out_bytes(o, t->data, t->nbytes));
        }
        RP_TRY(out_pad(o, align));
    }
    return RP_OK;
}

/* fsync the directory holding `path` so the rename itself is durable. */
static void sync_parent_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { (void)fsync(fd); close(fd); }
    free(copy);
}

rp_status rp_gguf_writer_write_file(rp_gguf_writer *w, const char *path) {
    if (!w || !path || !*path) return rp_errorf(RP_ERR_INVALID_ARG, "gguf writer: NULL writer or empty path");
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return rp_errorf(RP_ERR_NOMEM, "gguf writer: cannot allocate temp path");
    /* Same directory as the target, so rename() is atomic (never a half-written model). */
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rp_status st = rp_errorf(RP_ERR_IO, "gguf writer: cannot create temp file '%s': %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    (void)fchmod(fd, 0644);   /* mkstemp makes 0600; models are ordinary shareable files */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        rp_status st = rp_errorf(RP_ERR_IO, "gguf writer: fdopen '%s': %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    rp_gw_out o = {f, tmp, 0};
    rp_status st = write_all(w, &o);
    if (st == RP_OK && fflush(f) != 0)
        st = rp_errorf(RP_ERR_IO, "gguf writer: flush '%s': %s", tmp, strerror(errno));
    if (st == RP_OK && fsync(fileno(f)) != 0)
        st = rp_errorf(RP_ERR_IO, "gguf writer: fsync '%s': %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == RP_OK)
        st = rp_errorf(RP_ERR_IO, "gguf writer: close '%s': %s", tmp, strerror(errno));
    if (st == RP_OK && rename(tmp, path) != 0)
        st = rp_errorf(RP_ERR_IO, "gguf writer: rename '%s' -> '%s': %s", tmp, path, strerror(errno));
    if (st != RP_OK) unlink(tmp);
    else sync_parent_dir(path);
    free(tmp);
    return st;
}
