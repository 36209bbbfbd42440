/* demote.c — moving a suspended session's KV out of memory (zstd in memory or a file) and back, byte for byte. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/error.h"
#include "sched/sched_internal.h"

/* Blob layout (little-endian host order; the blob never leaves this machine):
 *   "RPKVDEM2" | u32 n_kv | per cache: i32 type, n_layer, n_ctx, kv_dim, n, held_lo (rp_kv_held_lo);
 *   u64 row_bytes; i32 pos[n]; then per layer K rows [0, n), then per layer
 *   V rows [0, n) (whole rows, rp_kv_read_rows) — only the filled cells, so a short history is small.
 * The whole blob is zstd-compressed (level 1: demotion sits on the step path
 * under memory pressure, so speed matters more than ratio). */

static const char k_magic[8] = {'R', 'P', 'K', 'V', 'D', 'E', 'M', '2'};

typedef struct {
    int32_t type, n_layer, n_ctx, kv_dim, n, held_lo;
    uint64_t row_bytes;
} blob_hdr;

static size_t kv_payload(const rp_kv *kv) {
    return sizeof(blob_hdr) + sizeof(int32_t) * (size_t)kv->n + 2 * (size_t)kv->n_layer * (size_t)kv->n * kv->row_bytes;
}

rp_status rp_kv_blob_write(rp_kv *const *kvs, int32_t n_kv, void **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t raw_len = sizeof k_magic + sizeof(uint32_t);
    for (int32_t i = 0; i < n_kv; i++) raw_len += kv_payload(kvs[i]);
    uint8_t *raw = malloc(raw_len);
    if (!raw) return rp_errorf(RP_ERR_NOMEM, "demote: cannot allocate %zu bytes", raw_len);
    uint8_t *w = raw;
    memcpy(w, k_magic, sizeof k_magic);
    w += sizeof k_magic;
    uint32_t nk = (uint32_t)n_kv;
    memcpy(w, &nk, sizeof nk);
    w += sizeof nk;
    for (int32_t i = 0; i < n_kv; i++) {
        const rp_kv *kv = kvs[i];
        /* a sliding-window cache's cells before held_lo are gone on its ring layers: written as zero rows */
        blob_hdr h = {(int32_t)kv->type, kv->n_layer, kv->n_ctx, kv->kv_dim, kv->n, rp_kv_held_lo(kv), kv->row_bytes};
        memcpy(w, &h, sizeof h);
        w += sizeof h;
        memcpy(w, kv->pos, sizeof(int32_t) * (size_t)kv->n);
        w += sizeof(int32_t) * (size_t)kv->n;
        const size_t layer_bytes = (size_t)kv->n * kv->row_bytes;
        for (int32_t l = 0; l < kv->n_layer; l++, w += layer_bytes) rp_kv_read_rows(kv, RP_KV_K, l, 0, kv->n, w);
        for (int32_t l = 0; l < kv->n_layer; l++, w += layer_bytes) rp_kv_read_rows(kv, RP_KV_V, l, 0, kv->n, w);
    }
    size_t cap = ZSTD_compressBound(raw_len);
    void *z = malloc(cap);
    if (!z) {
        free(raw);
        return rp_errorf(RP_ERR_NOMEM, "demote: cannot allocate %zu bytes", cap);
    }
    size_t zl = ZSTD_compress(z, cap, raw, raw_len, 1);
    free(raw);
    if (ZSTD_isError(zl)) {
        free(z);
        return rp_errorf(RP_ERR_INTERNAL, "demote: zstd: %s", ZSTD_getErrorName(zl));
    }
    void *shrunk = realloc(z, zl ? zl : 1);
    *out = shrunk ? shrunk : z;
    *out_len = zl;
    return RP_OK;
}

rp_status rp_kv_blob_read(const void *blob, size_t len, rp_kv *const *kvs, int32_t n_kv) {
    unsigned long long raw_len = ZSTD_getFrameContentSize(blob, len);
    if (raw_len == ZSTD_CONTENTSIZE_ERROR || raw_len == ZSTD_CONTENTSIZE_UNKNOWN || raw_len > ((size_t)1 << 40))
        return rp_errorf(RP_ERR_FORMAT, "restore: not a zstd frame with a known size");
    uint8_t *raw = malloc((size_t)raw_len ? (size_t)raw_len : 1);
    if (!raw) return rp_errorf(RP_ERR_NOMEM, "restore: cannot allocate %llu bytes", raw_len);
    size_t got = ZSTD_decompress(raw, (size_t)raw_len, blob, len);
    rp_status st = RP_OK;
    const uint8_t *r = raw, *end = raw + (ZSTD_isError(got) ? 0 : got);
    uint32_t nk = 0;
    if (ZSTD_isError(got) || got != raw_len) st = rp_errorf(RP_ERR_FORMAT, "restore: corrupt compressed KV");
    else if (got < sizeof k_magic + sizeof nk || memcmp(r, k_magic, sizeof k_magic) != 0)
        st = rp_errorf(RP_ERR_FORMAT, "restore: bad KV blob magic");
    if (st == RP_OK) {
        r += sizeof k_magic;
        memcpy(&nk, r, sizeof nk);
        r += sizeof nk;
        if (nk != (uint32_t)n_kv) st = rp_errorf(RP_ERR_FORMAT, "restore: blob holds %u caches, expected %d", nk, n_kv);
    }
    for (int32_t i = 0; st == RP_OK && i < n_kv; i++) {
        rp_kv *kv = kvs[i];
        blob_hdr h;
        if ((size_t)(end - r) < sizeof h) { st = rp_errorf(RP_ERR_FORMAT, "restore: truncated header %d", i); break; }
        memcpy(&h, r, sizeof h);
        r += sizeof h;
        if (h.type != (int32_t)kv->type || h.n_layer != kv->n_layer || h.kv_dim != kv->kv_dim ||
            h.row_bytes != kv->row_bytes || h.n < 0 || h.n > kv->n_ctx || h.held_lo < 0 ||
            (h.held_lo > 0 && h.held_lo > h.n)) {
            st = rp_errorf(RP_ERR_FORMAT, "restore: cache %d shape differs (type %d, layers %d, dim %d, cells %d)", i,
                           h.type, h.n_layer, h.kv_dim, h.n);
            break;
        }
        const size_t layer_bytes = (size_t)h.n * kv->row_bytes;
        if ((size_t)(end - r) < sizeof(int32_t) * (size_t)h.n + 2 * (size_t)kv->n_layer * layer_bytes) {
            st = rp_errorf(RP_ERR_FORMAT, "restore: truncated cache %d", i);
            break;
        }
        rp_kv_clear(kv);
        memcpy(kv->pos, r, sizeof(int32_t) * (size_t)h.n);
        r += sizeof(int32_t) * (size_t)h.n;
        for (int32_t l = 0; l < kv->n_layer; l++, r += layer_bytes) rp_kv_write_rows(kv, RP_KV_K, l, 0, h.n, r);
        for (int32_t l = 0; l < kv->n_layer; l++, r += layer_bytes) rp_kv_write_rows(kv, RP_KV_V, l, 0, h.n, r);
        for (int32_t l = 0; l < kv->n_layer; l++) rp_kv_slide(kv, l, h.held_lo);   /* ring layers: what was held */
        kv->n = h.n;
    }
    free(raw);
    return st;
}

void rp_sess_drop_blob(rp_sess *x) {
    free(x->blob);
    x->blob = NULL;
    x->blob_len = 0;
    if (x->blob_path) {
        remove(x->blob_path);
        free(x->blob_path);
        x->blob_path = NULL;
    }
    x->demoted = false;
}

/* The caches a session demotes: its target KV and, with a draft model, its
 * draft KV. */
static int32_t sess_kvs(rp_sched *s, rp_sess *x, rp_kv **kvs) {
    int32_t n = 0;
    kvs[n++] = x->kv;
    rp_kv *dk = s->drafter ? s->drafter->kv(s->drafter, x->slot) : NULL;
    if (dk) kvs[n++] = dk;
    return n;
}

rp_status rp_sess_demote(rp_sched *s, rp_sess *x, const char *path) {
    if (x->demoted || !x->kv) return RP_OK;
    rp_kv *kvs[2];
    int32_t nk = sess_kvs(s, x, kvs);
    void *blob = NULL;
    size_t len = 0;
    RP_TRY(rp_kv_blob_write(kvs, nk, &blob, &len));
    char auto_path[4096];
    if (!path && s->demote_dir) {
        snprintf(auto_path, sizeof auto_path, "%s/rp-sess-%p-%d-%u.kv", s->demote_dir, (void *)s, x->slot, x->gen);
        path = auto_path;
    }
    if (path) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            free(blob);
            return rp_errorf(RP_ERR_IO, "demote: cannot create '%s': %s", path, strerror(errno));
        }
        size_t put = fwrite(blob, 1, len, f);
        int cerr = fclose(f);
        free(blob);
        blob = NULL;
        if (put != len || cerr != 0) {
            remove(path);
            return rp_errorf(RP_ERR_IO, "demote: cannot write '%s'", path);
        }
        if (!(x->blob_path = strdup(path))) {
            remove(path);
            return rp_errorf(RP_ERR_NOMEM, "demote: out of memory");
        }
        x->blob_len = len;
    } else {
        x->blob = blob;
        x->blob_len = len;
    }
    /* free the caches: the point of demotion is the memory */
    rp_kv_free(x->kv);
    x->kv = NULL;
    s->kvs[x->slot] = NULL;
    if (nk > 1) s->drafter->close(s->drafter, x->slot);
    x->demoted = true;
    x->c.demotions++;
    s->st.demotions++;   /* callers hold s->mu, as for every s->st update */
    return RP_OK;
}

rp_status rp_sess_restore(rp_sched *s, rp_sess *x) {
    if (!x->demoted) return RP_OK;
    void *blob = x->blob;
    size_t len = x->blob_len;
    if (x->blob_path) {
        FILE *f = fopen(x->blob_path, "rb");
        if (!f) return rp_errorf(RP_ERR_IO, "restore: cannot open '%s': %s", x->blob_path, strerror(errno));
        blob = malloc(len ? len : 1);
        size_t got = blob ? fread(blob, 1, len, f) : 0;
        fclose(f);
        if (!blob || got != len) {
            free(blob);
            return rp_errorf(RP_ERR_IO, "restore: cannot read '%s'", x->blob_path);
        }
    }
    rp_kv *kv = NULL;
    rp_status st = rp_kv_create_swa(s->m, s->p.n_ctx, s->p.kv_type, s->p.swa_cells, &kv);
    bool reopened = false;
    if (st == RP_OK && s->p.drafter == RP_DRAFTER_MODEL && s->drafter) {
        st = s->drafter->open(s->drafter, x->slot);
        reopened = st == RP_OK;
    }
    if (st == RP_OK) {
        rp_kv *kvs[2] = {kv, reopened ? s->drafter->kv(s->drafter, x->slot) : NULL};
        st = rp_kv_blob_read(blob, len, kvs, reopened ? 2 : 1);
    }
    if (blob != x->blob) free(blob);
    if (st != RP_OK) {
        rp_kv_free(kv);
        if (reopened) s->drafter->close(s->drafter, x->slot);
        return st;
    }
    x->kv = kv;
    s->kvs[x->slot] = kv;
    rp_sess_drop_blob(x);
    x->c.restores++;
    s->st.restores++;
    return RP_OK;
}
