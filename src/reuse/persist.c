/* persist.c — chunk-cache snapshot file: header with the model salt, then checksummed chunk records. */
#include "reuse/persist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"

#define SNAP_MAGIC 0x4b435052u   /* "RPCK" */
#define SNAP_VERSION 1u

typedef struct snap_header {
    uint32_t magic, version;
    uint64_t salt;
    uint32_t n_layer, kv_type;
    uint64_t row_bytes;
    uint64_t n_chunks;
} snap_header;

typedef struct snap_rec {
    uint64_t id, parent_id;
    int32_t n_tokens, pos0;
    uint32_t exact, reserved;
    double recompute_ms;
    uint64_t checksum;   /* XXH3 of tokens then KV payload */
} snap_rec;

typedef struct collect_ctx {
    rp_chunk **v;
    uint64_t n, cap;
} collect_ctx;

static bool collect(void *user, rp_chunk *ch) {
    collect_ctx *c = user;
    if (c->n < c->cap) c->v[c->n++] = ch;
    return c->n < c->cap;
}

static int by_id(const void *a, const void *b) {
    uint64_t x = (*(rp_chunk *const *)a)->id, y = (*(rp_chunk *const *)b)->id;
    return x < y ? -1 : x > y;
}

static bool save_one(FILE *f, const rp_chunk *ch) {
    snap_rec r = {.id = ch->id, .parent_id = ch->parent_id, .n_tokens = ch->n_tokens, .pos0 = ch->pos0,
                  .exact = ch->exact, .recompute_ms = ch->recompute_ms};
    XXH3_state_t *h = XXH3_createState();
    if (!h) return false;
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, ch->tokens, sizeof(rp_token) * (size_t)ch->n_tokens);
    XXH3_64bits_update(h, ch->kv, ch->kv_bytes);
    r.checksum = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return fwrite(&r, sizeof r, 1, f) == 1 &&
           fwrite(ch->tokens, sizeof(rp_token), (size_t)ch->n_tokens, f) == (size_t)ch->n_tokens &&
           fwrite(ch->kv, 1, ch->kv_bytes, f) == ch->kv_bytes;
}

rp_status rp_reuse_save(rp_reuse *e, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    rp_chunk_cache *c = rp_reuse_cache(e);
    /* parents are inserted before their children, so ids order them: write
     * in id order and a loader can always link a child to an earlier record */
    collect_ctx cc = {NULL, 0, rp_chunk_cache_stats(c).n_chunks};
    cc.v = malloc(sizeof *cc.v * (size_t)(cc.cap ? cc.cap : 1));
    if (!cc.v) return rp_errorf(RP_ERR_NOMEM, "reuse: out of memory");
    if (cc.cap) rp_chunk_cache_foreach(c, collect, &cc);
    qsort(cc.v, (size_t)cc.n, sizeof *cc.v, by_id);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        free(cc.v);
        return rp_errorf(RP_ERR_IO, "reuse: cannot create '%s': %s", tmp, strerror(errno));
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) { close(fd); free(cc.v); return rp_errorf(RP_ERR_IO, "reuse: cannot open '%s'", tmp); }
    snap_header h = {SNAP_MAGIC, SNAP_VERSION, rp_reuse_salt(e), 0, 0, 0, cc.n};
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    for (uint64_t i = 0; ok && i < cc.n; i++) ok = save_one(f, cc.v[i]);
    free(cc.v);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = false;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        unlink(tmp);
        return rp_errorf(RP_ERR_IO, "reuse: writing '%s' failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return rp_errorf(RP_ERR_IO, "reuse: cannot rename to '%s': %s", path, strerror(errno));
    }
    return RP_OK;
}

typedef struct loaded {
    uint64_t old_id;
    rp_chunk *ch;   /* pinned while loading */
} loaded;

rp_status rp_reuse_load(rp_reuse *e, const char *path, int32_t *n_loaded) {
    *n_loaded = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return RP_OK;
        return rp_errorf(RP_ERR_IO, "reuse: cannot open '%s': %s", path, strerror(errno));
    }
    snap_header h;
    if (fread(&h, sizeof h, 1, f) != 1 || h.magic != SNAP_MAGIC || h.version != SNAP_VERSION) {
        fclose(f);
        return rp_errorf(RP_ERR_FORMAT, "reuse: '%s' is not a chunk snapshot (bad header)", path);
    }
    if (h.salt != rp_reuse_salt(e)) {   /* another model / KV type: never used */
        fclose(f);
        return RP_OK;
    }
    rp_chunk_cache *c = rp_reuse_cache(e);
    const rp_model *m = rp_reuse_model(e);
    const rp_type kvt = rp_reuse_kv_type(e);
    const size_t rb = rp_type_row_size(kvt, m->hp.n_head_kv * m->hp.head_dim);
    const int32_t n_layer = m->hp.n_layer;
    loaded *L = calloc(h.n_chunks ? h.n_chunks : 1, sizeof *L);
    if (!L || h.n_chunks > (1u << 24)) {
        free(L);
        fclose(f);
        return rp_errorf(RP_ERR_FORMAT, "reuse: '%s' chunk count %llu implausible", path, (unsigned long long)h.n_chunks);
    }
    rp_status st = RP_OK;
    uint64_t nl = 0;
    rp_kv tmpkv;
    memset(&tmpkv, 0, sizeof tmpkv);
    for (uint64_t i = 0; i < h.n_chunks && st == RP_OK; i++) {
        snap_rec r;
        if (fread(&r, sizeof r, 1, f) != 1) { st = rp_errorf(RP_ERR_FORMAT, "reuse: '%s' truncated at chunk %llu", path, (unsigned long long)i); break; }
        if (r.n_tokens <= 0 || r.n_tokens > (1 << 20)) { st = rp_errorf(RP_ERR_FORMAT, "reuse: '%s' chunk %llu has %d tokens", path, (unsigned long long)i, r.n_tokens); break; }
        rp_token *toks = malloc(sizeof(rp_token) * (size_t)r.n_tokens);
        if (!toks) { st = rp_errorf(RP_ERR_NOMEM, "reuse: out of memory"); break; }
        if (fread(toks, sizeof(rp_token), (size_t)r.n_tokens, f) != (size_t)r.n_tokens) {
            free(toks);
            st = rp_errorf(RP_ERR_FORMAT, "reuse: '%s' truncated in chunk %llu tokens", path, (unsigned long long)i);
            break;
        }
        /* payload size is implied by the model and KV type (the salt matched) */
        size_t bytes = (size_t)n_layer * 2 * (size_t)r.n_tokens * rb;
        uint8_t *kvb = malloc(bytes);
        if (!kvb) { free(toks); st = rp_errorf(RP_ERR_NOMEM, "reuse: out of memory"); break; }
        if (fread(kvb, 1, bytes, f) != bytes) {
            free(toks); free(kvb);
            st = rp_errorf(RP_ERR_FORMAT, "reuse: '%s' truncated in chunk %llu payload", path, (unsigned long long)i);
            break;
        }
        XXH3_state_t *hs = XXH3_createState();
        XXH3_64bits_reset(hs);
        XXH3_64bits_update(hs, toks, sizeof(rp_token) * (size_t)r.n_tokens);
        XXH3_64bits_update(hs, kvb, bytes);
        bool good = XXH3_64bits_digest(hs) == r.checksum;
        XXH3_freeState(hs);
        if (good) {
            /* a parent that was loaded keeps the link; otherwise a root orphan (content reuse only) */
            rp_chunk *parent = NULL;
            bool parent_ok = r.parent_id == 0;
            if (r.parent_id != 0) {   /* records are in increasing id order: binary search */
                uint64_t lo = 0, hi = nl;
                while (lo < hi) {
                    uint64_t mid = (lo + hi) / 2;
                    if (L[mid].old_id < r.parent_id) lo = mid + 1;
                    else hi = mid;
                }
                if (lo < nl && L[lo].old_id == r.parent_id) { parent = L[lo].ch; parent_ok = true; }
            }
            rp_chunk_span sp = {.begin = 0, .len = r.n_tokens, .hash = rp_chunk_hash(toks, r.n_tokens, rp_reuse_salt(e)),
                                .at_boundary = true};
            /* fake single-sequence KV view over the payload: K of layer l at
             * kvb + l*2*n*rb, V right after; rp_kv indexes k + (l*n_ctx + cell)*rb,
             * so point k at the payload with n_ctx = 2n and v at payload + n*rb */
            tmpkv.type = kvt;
            tmpkv.n_layer = n_layer;
            tmpkv.n_ctx = 2 * r.n_tokens;
            tmpkv.row_bytes = rb;
            tmpkv.k = kvb;
            tmpkv.v = kvb + (size_t)r.n_tokens * rb;
            int32_t *pos = malloc(sizeof(int32_t) * (size_t)r.n_tokens);
            if (!pos) { free(toks); free(kvb); st = rp_errorf(RP_ERR_NOMEM, "reuse: out of memory"); break; }
            for (int32_t t = 0; t < r.n_tokens; t++) pos[t] = r.pos0 + t;
            tmpkv.pos = pos;
            tmpkv.n = r.n_tokens;
            rp_chunk *ch = NULL;
            st = rp_chunk_cache_insert(c, parent_ok ? parent : NULL, toks, &sp, &tmpkv, 0, r.recompute_ms, &ch);
            free(pos);
            if (st == RP_OK && ch) {
                ch->exact = r.exact && parent_ok;
                L[nl].old_id = r.id;
                L[nl].ch = ch;   /* pinned until the end so later children can link */
                nl++;
                (*n_loaded)++;
            }
        }
        free(toks);
        free(kvb);
    }
    for (uint64_t k = 0; k < nl; k++) rp_chunk_unpin(c, L[k].ch);
    free(L);
    fclose(f);
    return st;
}
