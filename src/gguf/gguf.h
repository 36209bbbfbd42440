/* gguf.h — validating, zero-copy GGUF v2/v3 reader (mmap) and a GGUF v3 writer. */
#ifndef RP_GGUF_H
#define RP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kernels/types.h"

/* A string view into the mapped file. NOT NUL-terminated. */
typedef struct rp_str {
    const char *ptr;
    uint64_t len;
} rp_str;

bool rp_str_eq(rp_str s, const char *cstr);

typedef enum rp_gguf_vtype {
    RP_GGUF_U8 = 0, RP_GGUF_I8 = 1, RP_GGUF_U16 = 2, RP_GGUF_I16 = 3,
    RP_GGUF_U32 = 4, RP_GGUF_I32 = 5, RP_GGUF_F32 = 6, RP_GGUF_BOOL = 7,
    RP_GGUF_STRING = 8, RP_GGUF_ARRAY = 9, RP_GGUF_U64 = 10, RP_GGUF_I64 = 11,
    RP_GGUF_F64 = 12,
    RP_GGUF_VTYPE_COUNT
} rp_gguf_vtype;

const char *rp_gguf_vtype_name(rp_gguf_vtype t);

#define RP_GGUF_MAX_DIMS 4

typedef struct rp_gguf_tensor {
    rp_str name;
    uint32_t n_dims;
    int64_t ne[RP_GGUF_MAX_DIMS];   /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    rp_type type;
    uint64_t offset;                /* relative to the start of the data section */
    uint64_t nbytes;                /* exact size implied by type and ne */
    const void *data;               /* points into the mapping; NULL for vocab-only readers */
} rp_gguf_tensor;

typedef struct rp_gguf rp_gguf;

/* Opens and validates a GGUF file by mmap (read-only, zero-copy). On any
 * malformation returns RP_ERR_FORMAT (or RP_ERR_UNSUPPORTED for an unknown
 * tensor type / version) and rp_last_error() names the field and byte offset,
 * e.g. "gguf: tensor 'blk.0.attn_q.weight': data offset+size 0x... beyond file end 0x... (at byte 1234)". */
rp_status rp_gguf_open(const char *path, rp_gguf **out);

/* Same validation over a caller-owned buffer (fuzzing, tests). The buffer
 * must outlive the handle; nothing is copied. */
rp_status rp_gguf_open_memory(const void *buf, size_t len, rp_gguf **out);

void rp_gguf_close(rp_gguf *g);

uint32_t rp_gguf_version(const rp_gguf *g);
uint64_t rp_gguf_file_size(const rp_gguf *g);
uint64_t rp_gguf_data_offset(const rp_gguf *g);   /* absolute byte offset of the data section */
uint32_t rp_gguf_alignment(const rp_gguf *g);

/* ---- key/value metadata ---- */
uint64_t rp_gguf_n_kv(const rp_gguf *g);
int64_t rp_gguf_find_key(const rp_gguf *g, const char *key);   /* index, or -1 */
rp_str rp_gguf_kv_key(const rp_gguf *g, uint64_t i);
rp_gguf_vtype rp_gguf_kv_type(const rp_gguf *g, uint64_t i);
/* For arrays: element type and count (type RP_GGUF_ARRAY for nested arrays). */
rp_gguf_vtype rp_gguf_kv_arr_type(const rp_gguf *g, uint64_t i);
uint64_t rp_gguf_kv_arr_len(const rp_gguf *g, uint64_t i);
/* Pointer to the packed little-endian elements of a numeric array (not for strings). */
const void *rp_gguf_kv_arr_data(const rp_gguf *g, uint64_t i);
/* i-th string of a string array (O(1): an offset index is built at open). */
rp_str rp_gguf_kv_arr_str(const rp_gguf *g, uint64_t kv, uint64_t i);

/* Typed getters by key. Missing key -> RP_ERR_NOT_FOUND (no error text set, so
 * callers can treat optional keys cheaply). Wrong type -> RP_ERR_FORMAT with
 * detail. Integer getters accept any integer vtype whose value fits. */
rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out);
rp_status rp_gguf_get_i32(const rp_gguf *g, const char *key, int32_t *out);
rp_status rp_gguf_get_u64(const rp_gguf *g, const char *key, uint64_t *out);
rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out);   /* accepts f32/f64 */
rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out);
rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, rp_str *out);
/* Array by key: element type and count; index for rp_gguf_kv_arr_*. */
rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_vtype *elem_type,
                          uint64_t *n, int64_t *kv_index);

/* Human-readable rendering of a value (arrays abbreviated), for `reprise inspect`. */
void rp_gguf_kv_format(const rp_gguf *g, uint64_t i, char *buf, size_t cap);

/* Encoded bytes of value `i` exactly as stored (just after its type id; for
 * arrays this starts at the element type), *len set to their count. Used to
 * copy a value verbatim (rp_gguf_writer_copy_kv). NULL if i is out of range. */
const void *rp_gguf_kv_raw(const rp_gguf *g, uint64_t i, uint64_t *len);

/* ---- tensors ---- */
uint64_t rp_gguf_n_tensors(const rp_gguf *g);
const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, uint64_t i);
const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name);  /* NULL if absent */

/* ---- writer ---- */
typedef struct rp_gguf_writer rp_gguf_writer;

rp_status rp_gguf_writer_create(rp_gguf_writer **out);
void rp_gguf_writer_free(rp_gguf_writer *w);
/* Keys are copied. Adding a key twice is RP_ERR_INVALID_ARG. */
rp_status rp_gguf_writer_set_u32(rp_gguf_writer *w, const char *key, uint32_t v);
rp_status rp_gguf_writer_set_i32(rp_gguf_writer *w, const char *key, int32_t v);
rp_status rp_gguf_writer_set_u64(rp_gguf_writer *w, const char *key, uint64_t v);
rp_status rp_gguf_writer_set_f32(rp_gguf_writer *w, const char *key, float v);
rp_status rp_gguf_writer_set_bool(rp_gguf_writer *w, const char *key, bool v);
rp_status rp_gguf_writer_set_str(rp_gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not STRING/ARRAY): `v` points to one value of that C type
 * (uint8_t, int16_t, ..., bool for BOOL, double for F64). */
rp_status rp_gguf_writer_set_scalar(rp_gguf_writer *w, const char *key, rp_gguf_vtype type,
                                    const void *v);
/* Numeric array (elem_type not STRING/ARRAY); data copied. */
rp_status rp_gguf_writer_set_arr(rp_gguf_writer *w, const char *key, rp_gguf_vtype elem_type,
                                 const void *data, uint64_t n);
rp_status rp_gguf_writer_set_arr_str(rp_gguf_writer *w, const char *key,
                                     const rp_str *strs, uint64_t n);
/* Copies key `i` of an open reader verbatim (used to carry a tokenizer over). */
rp_status rp_gguf_writer_copy_kv(rp_gguf_writer *w, const rp_gguf *src, uint64_t i);
/* Tensor data is NOT copied: `data` must stay valid until write_file returns.
 * nbytes must equal rp_type_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]. */
rp_status rp_gguf_writer_add_tensor(rp_gguf_writer *w, const char *name, rp_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes);
/* Streaming variant for large synthetic models: `fill` is called once while
 * writing, with a buffer of exactly nbytes to fill (avoids holding every
 * tensor in memory at once). Returns RP_OK or an error that aborts the write. */
typedef rp_status (*rp_gguf_fill_fn)(void *user, const char *name, void *dst, uint64_t nbytes);
rp_status rp_gguf_writer_add_tensor_fill(rp_gguf_writer *w, const char *name, rp_type type,
                                         uint32_t n_dims, const int64_t *ne,
                                         rp_gguf_fill_fn fill, void *user);
/* Writes to `path` via a temp file + rename (never a half-written model). */
rp_status rp_gguf_writer_write_file(rp_gguf_writer *w, const char *path);

#endif /* RP_GGUF_H */
