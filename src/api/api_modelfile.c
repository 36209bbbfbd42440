/* api_modelfile.c — rp_model_file: a GGUF file's header, metadata and tensor table as stored (`reprise inspect`). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/types.h"

struct rp_model_file {
    rp_gguf *g;
    char **keys;      /* NUL-terminated copies of the keys */
    char **names;     /* ... and of the tensor names */
    uint64_t tensor_bytes;
};

static char *dup_str(rp_str s) {
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = 0;
    }
    return c;
}

void rp_model_file_close(rp_model_file *f) {
    if (!f) return;
    const uint64_t nk = f->g ? rp_gguf_n_kv(f->g) : 0, nt = f->g ? rp_gguf_n_tensors(f->g) : 0;
    for (uint64_t i = 0; f->keys && i < nk; i++) free(f->keys[i]);
    for (uint64_t i = 0; f->names && i < nt; i++) free(f->names[i]);
    free(f->keys);
    free(f->names);
    rp_gguf_close(f->g);
    free(f);
}

rp_status rp_model_file_open(const char *path, rp_model_file **out) {
    *out = NULL;
    if (!path) return rp_errorf(RP_ERR_INVALID_ARG, "model file: no path");
    rp_model_file *f = calloc(1, sizeof *f);
    if (!f) return rp_errorf(RP_ERR_NOMEM, "model file: out of memory");
    rp_status st = rp_gguf_open(path, &f->g);
    if (st != RP_OK) {
        free(f);
        return st;
    }
    const uint64_t nk = rp_gguf_n_kv(f->g), nt = rp_gguf_n_tensors(f->g);
    f->keys = calloc(nk ? nk : 1, sizeof *f->keys);
    f->names = calloc(nt ? nt : 1, sizeof *f->names);
    bool ok = f->keys && f->names;
    for (uint64_t i = 0; ok && i < nk; i++) ok = (f->keys[i] = dup_str(rp_gguf_kv_key(f->g, i))) != NULL;
    for (uint64_t i = 0; ok && i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(f->g, i);
        ok = (f->names[i] = dup_str(t->name)) != NULL;
        f->tensor_bytes += t->nbytes;
    }
    if (!ok) {
        rp_model_file_close(f);
        return rp_errorf(RP_ERR_NOMEM, "model file: out of memory");
    }
    *out = f;
    return RP_OK;
}

rp_model_file_desc rp_model_file_describe(const rp_model_file *f) {
    rp_model_file_desc d;
    memset(&d, 0, sizeof d);
    if (!f) return d;
    d.version = rp_gguf_version(f->g);
    d.alignment = rp_gguf_alignment(f->g);
    d.file_size = rp_gguf_file_size(f->g);
    d.data_offset = rp_gguf_data_offset(f->g);
    d.n_meta = (int64_t)rp_gguf_n_kv(f->g);
    d.n_tensors = (int64_t)rp_gguf_n_tensors(f->g);
    d.tensor_bytes = f->tensor_bytes;
    return d;
}

static rp_status check_meta(const rp_model_file *f, int64_t i) {
    if (!f) return rp_errorf(RP_ERR_INVALID_ARG, "model file: NULL");
    if (i < 0 || (uint64_t)i >= rp_gguf_n_kv(f->g))
        return rp_errorf(RP_ERR_RANGE, "model file: key %lld of %llu", (long long)i,
                         (unsigned long long)rp_gguf_n_kv(f->g));
    return RP_OK;
}

rp_status rp_model_file_meta(const rp_model_file *f, int64_t i, rp_meta_entry *out) {
    memset(out, 0, sizeof *out);
    RP_TRY(check_meta(f, i));
    const rp_gguf_vtype t = rp_gguf_kv_type(f->g, (uint64_t)i);
    out->key = f->keys[i];
    out->type = (rp_meta_type)t;
    out->type_name = rp_gguf_vtype_name(t);
    uint64_t len = 0;
    const uint8_t *v = rp_gguf_kv_raw(f->g, (uint64_t)i, &len);   /* little-endian, validated at open */
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64;
            float f32; double f64; } x;
    memset(&x, 0, sizeof x);
    if (v && t != RP_GGUF_STRING && t != RP_GGUF_ARRAY) memcpy(&x, v, len < sizeof x ? len : sizeof x);
    switch (t) {
    case RP_GGUF_U8: out->u = x.u8; break;
    case RP_GGUF_U16: out->u = x.u16; break;
    case RP_GGUF_U32: out->u = x.u32; break;
    case RP_GGUF_U64: out->u = x.u64; break;
    case RP_GGUF_I8: out->i = x.i8; break;
    case RP_GGUF_I16: out->i = x.i16; break;
    case RP_GGUF_I32: out->i = x.i32; break;
    case RP_GGUF_I64: out->i = x.i64; break;
    case RP_GGUF_BOOL: out->b = x.u8 != 0; out->u = out->b; out->i = out->b; break;
    case RP_GGUF_F32: out->f = x.f32; break;
    case RP_GGUF_F64: out->f = x.f64; break;
    case RP_GGUF_STRING:
        if (v && len >= 8) {
            memcpy(&out->str_len, v, 8);
            out->str = (const char *)v + 8;
        }
        break;
    case RP_GGUF_ARRAY:
        out->elem_type = (rp_meta_type)rp_gguf_kv_arr_type(f->g, (uint64_t)i);
        out->n_elems = rp_gguf_kv_arr_len(f->g, (uint64_t)i);
        break;
    default: break;
    }
    if (t == RP_GGUF_U8 || t == RP_GGUF_U16 || t == RP_GGUF_U32 || (t == RP_GGUF_U64 && out->u <= INT64_MAX))
        out->i = (int64_t)out->u;
    if ((t == RP_GGUF_I8 || t == RP_GGUF_I16 || t == RP_GGUF_I32 || t == RP_GGUF_I64) && out->i >= 0)
        out->u = (uint64_t)out->i;
    return RP_OK;
}

int64_t rp_model_file_find_meta(const rp_model_file *f, const char *key) {
    return f && key ? rp_gguf_find_key(f->g, key) : -1;
}

rp_status rp_model_file_meta_text(const rp_model_file *f, int64_t i, char *buf, size_t cap) {
    if (buf && cap) buf[0] = 0;
    RP_TRY(check_meta(f, i));
    if (!buf || !cap) return RP_OK;
    rp_gguf_kv_format(f->g, (uint64_t)i, buf, cap);
    return RP_OK;
}

static const char *type_name(int type) {
    const rp_type_traits *tr = rp_type_get_traits(type);
    return tr ? tr->name : "?";
}

rp_status rp_model_file_tensor(const rp_model_file *f, int64_t i, rp_tensor_desc *out) {
    memset(out, 0, sizeof *out);
    if (!f) return rp_errorf(RP_ERR_INVALID_ARG, "model file: NULL");
    if (i < 0 || (uint64_t)i >= rp_gguf_n_tensors(f->g))
        return rp_errorf(RP_ERR_RANGE, "model file: tensor %lld of %llu", (long long)i,
                         (unsigned long long)rp_gguf_n_tensors(f->g));
    const rp_gguf_tensor *t = rp_gguf_tensor_at(f->g, (uint64_t)i);
    out->name = f->names[i];
    out->type = (int)t->type;
    out->type_name = type_name((int)t->type);
    out->n_dims = (int32_t)t->n_dims;
    for (int d = 0; d < 4; d++) out->ne[d] = t->ne[d];
    out->offset = t->offset;
    out->bytes = t->nbytes;
    return RP_OK;
}

static int cmp_share(const void *a, const void *b) {
    const rp_type_share *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return (x->type > y->type) - (x->type < y->type);
}

int32_t rp_model_file_type_mix(const rp_model_file *f, rp_type_share *out, int32_t cap) {
    if (!f) return 0;
    rp_type_share all[RP_TYPE_COUNT];
    memset(all, 0, sizeof all);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(f->g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(f->g, i);
        if ((unsigned)t->type >= RP_TYPE_COUNT) continue;   /* the reader accepts only known types */
        all[t->type].n_tensors++;
        all[t->type].bytes += t->nbytes;
    }
    int32_t n = 0;
    for (int t = 0; t < RP_TYPE_COUNT; t++)
        if (all[t].n_tensors) all[n++] = (rp_type_share){.type = t, .type_name = type_name(t),
                                                         .n_tensors = all[t].n_tensors, .bytes = all[t].bytes};
    qsort(all, (size_t)n, sizeof *all, cmp_share);
    for (int32_t i = 0; out && i < n && i < cap; i++) out[i] = all[i];
    return n;
}
