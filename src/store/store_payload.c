/* store_payload.c — payloads: keyed checksums, raw / zstd layers, BLOBs or files; put, read and delete of chunks. */
#define _GNU_SOURCE
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "core/error.h"
#include "store/lcs.h"

/* ---- checksums ---- */

/* A layer's checksum: XXH3 keyed with the store's secret (see the schema comment in store_internal.h). */
static inline uint64_t layer_sum(const rp_store *s, const uint8_t *p, uint64_t n) {
    return XXH3_64bits_withSecret(p, (size_t)n, s->secret, sizeof s->secret);
}

/* The metadata checksum (see the schema comment in store_internal.h), keyed like the layers'. */
uint64_t rp_store_meta_checksum(const rp_store *s, const rp_store_chunk *c, const rp_token *toks, const uint8_t *layers,
                                size_t lb) {
    struct {
        uint64_t id, model, hash, chain, parent;
        int32_t n_tokens, pos0, exact, kv_type, n_layer, pad;
        uint64_t row_bytes, kv_bytes, stored_bytes;
        uint32_t loc, codec;
    } h;
    memset(&h, 0, sizeof h);
    h.id = c->id;
    h.model = (uint64_t)c->model;
    h.hash = c->hash;
    h.chain = c->chain;
    h.parent = c->parent_id;
    h.n_tokens = c->n_tokens;
    h.pos0 = c->pos0;
    h.exact = c->exact;
    h.kv_type = c->kv_type;
    h.n_layer = c->n_layer;
    h.row_bytes = c->row_bytes;
    h.kv_bytes = c->kv_bytes;
    h.stored_bytes = c->stored_bytes;
    h.loc = c->loc;
    h.codec = c->codec;
    XXH3_state_t st;
    XXH3_64bits_reset_withSecret(&st, s->secret, sizeof s->secret);
    XXH3_64bits_update(&st, &h, sizeof h);
    if (toks && c->n_tokens > 0) XXH3_64bits_update(&st, toks, sizeof(rp_token) * (size_t)c->n_tokens);
    if (layers && lb) XXH3_64bits_update(&st, layers, lb);
    return XXH3_64bits_digest(&st);
}

/* ---- paths ---- */

static void payload_path(const rp_store *s, uint64_t id, uint64_t checksum, char *buf, size_t cap, bool tmp) {
    snprintf(buf, cap, "%s/kv/%02x/%llu-%016llx.kv%s", s->dir, (unsigned)(id & 0xff), (unsigned long long)id,
             (unsigned long long)checksum, tmp ? ".tmp" : "");
}

/* ---- payload encode / write ---- */

static rp_status scratch_reserve(rp_store *s, size_t n) {
    if (s->scratch_cap >= n) return RP_OK;
    uint8_t *b = realloc(s->scratch, n);
    if (!b) return rp_errorf(RP_ERR_NOMEM, "store: cannot allocate %zu bytes of scratch", n);
    s->scratch = b;
    s->scratch_cap = n;
    return RP_OK;
}

/* Builds the layer table and the stored bytes of a payload. Raw: the stored
 * bytes are kv itself (*data = kv). zstd: each layer compressed into scratch
 * when that saves >= 1/16, else copied raw. */
static rp_status encode_payload(rp_store *s, rp_store_chunk *m, const uint8_t *kv, uint8_t *layers,
                                const uint8_t **data) {
    const uint64_t lraw = 2 * (uint64_t)m->n_tokens * m->row_bytes;
    uint64_t off = 0;
    m->codec = 0;
    if (s->p.zstd_level <= 0) {
        for (int32_t l = 0; l < m->n_layer; l++) {
            uint8_t *e = layers + (size_t)l * LAYER_ENTRY;
            wr64(e, off);
            wr64(e + 8, lraw);
            wr64(e + 16, layer_sum(s, kv + (size_t)l * lraw, lraw));
            off += lraw;
        }
        m->stored_bytes = off;
        *data = kv;
        return RP_OK;
    }
    const size_t bound = ZSTD_compressBound(lraw);
    RP_TRY(scratch_reserve(s, (size_t)m->n_layer * (bound > lraw ? bound : lraw)));
    for (int32_t l = 0; l < m->n_layer; l++) {
        const uint8_t *src = kv + (size_t)l * lraw;
        uint8_t *e = layers + (size_t)l * LAYER_ENTRY;
        size_t z = ZSTD_compressCCtx(s->zc, s->scratch + off, bound, src, lraw, s->p.zstd_level);
        uint64_t len;
        if (!ZSTD_isError(z) && z < lraw - lraw / 16) {
            len = z;
            m->codec = 1;
        } else {
            memcpy(s->scratch + off, src, lraw);
            len = lraw;
        }
        wr64(e, off);
        wr64(e + 8, len);
        wr64(e + 16, layer_sum(s, src, lraw));
        off += len;
    }
    m->stored_bytes = off;
    *data = s->scratch;
    return RP_OK;
}

/* ---- write errors: the cause, named ----
 * A full disk (SQLITE_FULL, ENOSPC, EDQUOT) reads "disk full writing chunk N to 'DIR'"; whatever a rollback
 * afterwards says never replaces it (rp_store_put). */

static rp_status write_err(const rp_store *s, uint64_t id, const char *what, const char *detail, bool full) {
    if (full)
        return rp_errorf(RP_ERR_IO, "store: disk full writing chunk %llu to '%s' (%s: %s)", (unsigned long long)id,
                         s->dir, what, detail);
    return rp_errorf(RP_ERR_IO, "store: %s of chunk %llu in '%s' failed: %s", what, (unsigned long long)id, s->dir,
                     detail);
}

static rp_status sql_write_err(rp_store *s, uint64_t id, const char *what) {
    return write_err(s, id, what, sqlite3_errmsg(s->db), (sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_FULL);
}

static rp_status file_write_err(const rp_store *s, uint64_t id, const char *what, const char *path, int err) {
    char detail[4400];
    snprintf(detail, sizeof detail, "'%s': %s", path, strerror(err));
    return write_err(s, id, what, detail, err == ENOSPC || err == EDQUOT);
}

/* 0, or the errno of the failed write */
static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* temp file + fdatasync + rename: the final name only ever holds a complete payload */
static rp_status write_payload_file(rp_store *s, const rp_store_chunk *m, const uint8_t *data) {
    char tmp[4096], fin[4096], sub[4096];
    snprintf(sub, sizeof sub, "%s/kv/%02x", s->dir, (unsigned)(m->id & 0xff));
    RP_TRY(rp_store_ensure_dir(sub));
    payload_path(s, m->id, m->checksum, tmp, sizeof tmp, true);
    payload_path(s, m->id, m->checksum, fin, sizeof fin, false);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return file_write_err(s, m->id, "creating the payload file", tmp, errno);
    rp_status st = RP_OK;
    int err = write_all(fd, data, m->stored_bytes);
    if (err) st = file_write_err(s, m->id, "writing the payload file", tmp, err);
    if (st == RP_OK && s->p.fsync_files && fdatasync(fd) != 0)
        st = file_write_err(s, m->id, "fdatasync of the payload file", tmp, errno);
    if (close(fd) != 0 && st == RP_OK) st = file_write_err(s, m->id, "closing the payload file", tmp, errno);
    if (st == RP_OK && rename(tmp, fin) != 0) st = file_write_err(s, m->id, "renaming the payload file", tmp, errno);
    if (st != RP_OK) unlink(tmp);
    return st;
}

static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

typedef struct unlink_list {
    char (*paths)[160];
    int32_t n, cap;
} unlink_list;

static void ul_add(unlink_list *u, const rp_store *s, uint64_t id, uint64_t checksum) {
    if (u->n == u->cap) {
        int32_t cap = u->cap ? 2 * u->cap : 16;
        char(*np)[160] = realloc(u->paths, sizeof *u->paths * (size_t)cap);
        if (!np) return;   /* an orphan file at worst; compact removes it */
        u->paths = np;
        u->cap = cap;
    }
    char full[4096];
    payload_path(s, id, checksum, full, sizeof full, false);
    /* store paths relative to dir to keep entries small */
    snprintf(u->paths[u->n++], sizeof u->paths[0], "%s", full + strlen(s->dir));
}

static void ul_run(unlink_list *u, const rp_store *s) {
    char full[4096];
    for (int32_t i = 0; i < u->n; i++) {
        snprintf(full, sizeof full, "%s%s", s->dir, u->paths[i]);
        unlink(full);
    }
    free(u->paths);
    u->paths = NULL;
    u->n = u->cap = 0;
}

static rp_status put_one(rp_store *s, rp_store_put_item *it, uint64_t *max_id, unlink_list *old_files,
                         unlink_list *new_files, int64_t *file_delta, double now, bool *dirs_touched) {
    rp_store_chunk m = it->meta;
    m.model = s->model;
    m.kv_type = s->kv_type;
    m.n_layer = s->n_layer;
    m.row_bytes = s->row_bytes;
    if (m.id == 0 || m.n_tokens <= 0 || m.n_tokens > MAX_TOKENS_PER_CHUNK || !it->tokens || !it->kv)
        return rp_errorf(RP_ERR_INVALID_ARG, "store: put of chunk %llu with %d tokens", (unsigned long long)m.id,
                         m.n_tokens);
    m.kv_bytes = (uint64_t)m.n_layer * 2 * (uint64_t)m.n_tokens * m.row_bytes;
    const size_t lb = (size_t)m.n_layer * LAYER_ENTRY;
    uint8_t *layers = malloc(lb);
    if (!layers) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    const uint8_t *data = NULL;
    rp_status st = encode_payload(s, &m, it->kv, layers, &data);
    if (st != RP_OK) {
        free(layers);
        return st;
    }
    const bool as_file = s->p.payload == RP_PAYLOAD_FILE ||
                         (s->p.payload == RP_PAYLOAD_AUTO && m.stored_bytes > s->p.inline_max && !s->p.naive);
    m.loc = as_file ? 1 : 0;
    m.checksum = rp_store_meta_checksum(s, &m, it->tokens, layers, lb);

    /* what this id had before (a re-dirtied chunk is rewritten under its id) */
    sqlite3_stmt *q;
    int old_loc = -1;
    uint64_t old_sum = 0, old_bytes = 0;
    if ((st = rp_store_stmt(s, S_OLD, &q)) == RP_OK) {
        sqlite3_bind_int64(q, 1, i64(m.id));
        if (sqlite3_step(q) == SQLITE_ROW) {
            old_loc = sqlite3_column_int(q, 0);
            old_sum = (uint64_t)sqlite3_column_int64(q, 1);
        }
        sqlite3_reset(q);
    }
    if (st == RP_OK && old_loc == 1) {
        bool f;
        rp_store_chunk oc;
        if (rp_store_get(s, m.id, &oc, &f) == RP_OK && f) {
            old_bytes = file_round(oc.stored_bytes);
            rp_store_chunk_clear(&oc);
        }
    }
    if (st == RP_OK && as_file) {
        st = write_payload_file(s, &m, data);
        if (st == RP_OK) {
            *dirs_touched = true;
            /* removed again if the transaction fails — unless the old row names
             * the very same file (identical content rewritten) */
            if (!(old_loc == 1 && old_sum == m.checksum)) ul_add(new_files, s, m.id, m.checksum);
        }
    }
    if (st == RP_OK) {
        if (as_file) {
            if ((st = rp_store_stmt(s, S_DEL_PAYLOAD, &q)) == RP_OK) {
                sqlite3_bind_int64(q, 1, i64(m.id));
                if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "deleting the old payload");
                sqlite3_reset(q);
            }
        } else if ((st = rp_store_stmt(s, S_INS_PAYLOAD, &q)) == RP_OK) {
            sqlite3_bind_int64(q, 1, i64(m.id));
            sqlite3_bind_blob64(q, 2, data, m.stored_bytes, SQLITE_STATIC);
            if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "writing the payload");
            sqlite3_reset(q);
            sqlite3_clear_bindings(q);   /* drop the reference to data */
        }
    }
    if (st == RP_OK && (st = rp_store_stmt(s, S_INS_CHUNK, &q)) == RP_OK) {
        sqlite3_bind_int64(q, 1, i64(m.id));
        sqlite3_bind_int64(q, 2, m.model);
        sqlite3_bind_int64(q, 3, i64(m.hash));
        sqlite3_bind_int64(q, 4, i64(m.chain));
        sqlite3_bind_int64(q, 5, i64(m.parent_id));
        sqlite3_bind_int(q, 6, m.n_tokens);
        sqlite3_bind_int(q, 7, m.pos0);
        sqlite3_bind_int(q, 8, m.exact ? 1 : 0);
        sqlite3_bind_int(q, 9, m.kv_type);
        sqlite3_bind_int(q, 10, m.n_layer);
        sqlite3_bind_int64(q, 11, i64(m.row_bytes));
        sqlite3_bind_int64(q, 12, i64(m.kv_bytes));
        sqlite3_bind_int64(q, 13, i64(m.stored_bytes));
        sqlite3_bind_int(q, 14, m.loc);
        sqlite3_bind_int(q, 15, m.codec);
        sqlite3_bind_int64(q, 16, i64(m.checksum));
        sqlite3_bind_double(q, 17, m.recompute_ms);
        sqlite3_bind_double(q, 18, m.heat);
        sqlite3_bind_int64(q, 19, i64(m.last_used));
        sqlite3_bind_int64(q, 20, i64(m.hits));
        sqlite3_bind_double(q, 21, m.created > 0 ? m.created : now);
        sqlite3_bind_double(q, 22, now);
        sqlite3_bind_blob(q, 23, it->tokens, (int)(sizeof(rp_token) * (size_t)m.n_tokens), SQLITE_STATIC);
        sqlite3_bind_blob(q, 24, layers, (int)lb, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "writing the chunk row");
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
    }
    free(layers);
    if (st == RP_OK && old_loc >= 0 && (st = rp_store_stmt(s, S_DEL_KW, &q)) == RP_OK) {
        sqlite3_bind_int64(q, 1, i64(m.id));
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "dropping the old keywords");
        sqlite3_reset(q);
    }
    if (st == RP_OK && !s->p.naive && m.n_tokens >= RP_KW_GRAM && (st = rp_store_stmt(s, S_INS_KW, &q)) == RP_OK) {
        /* keywords are salted with the model's salt: they never match across models */
        const int32_t cap = m.n_tokens;
        uint64_t *kw = malloc(sizeof *kw * (size_t)cap);
        if (!kw) st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        int32_t nk = kw ? rp_keywords(it->tokens, m.n_tokens, s->salt, kw, cap) : 0;
        for (int32_t i = 0; i < nk && st == RP_OK; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, i64(kw[i]));
            sqlite3_bind_int64(q, 2, i64(m.id));
            if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "writing the keywords");
        }
        sqlite3_reset(q);
        free(kw);
    }
    /* the semantic index: terms (with their document frequencies) and the vector, replaced when given */
    if (st == RP_OK && it->index && !s->p.naive) st = rp_store_index_put(s, m.id, m.model, it->index);
    if (st != RP_OK) return st;
    if (old_loc == 1 && !(as_file && old_sum == m.checksum)) ul_add(old_files, s, m.id, old_sum);
    if (old_loc == 1) *file_delta -= (int64_t)old_bytes;
    if (as_file) *file_delta += (int64_t)file_round(m.stored_bytes);
    if (m.id > *max_id) *max_id = m.id;
    it->meta.checksum = m.checksum;
    it->meta.stored_bytes = m.stored_bytes;
    it->meta.kv_bytes = m.kv_bytes;
    it->meta.loc = m.loc;
    it->meta.codec = m.codec;
    return RP_OK;
}

rp_status rp_store_put(rp_store *s, rp_store_put_item *items, int32_t n, uint64_t clock) {
    RP_TRY(rp_store_need_model(s));
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    if (n <= 0) return RP_OK;
    if (!items) return rp_errorf(RP_ERR_INVALID_ARG, "store: put of NULL items");
    /* The first failure is the one reported (its message kept in `cause`): a ROLLBACK after SQLite already
     * rolled the transaction back itself (SQLITE_FULL, I/O errors) fails too, and must not mask it. */
    char cause[512] = "";
    rp_status st = rp_store_exec(s, "BEGIN IMMEDIATE");
    if (st != RP_OK) {
        for (int32_t i = 0; i < n; i++) items[i].status = st;
        s->fail_pending += (uint64_t)n;
        return st;
    }
    uint64_t max_id = 0;
    unlink_list old_files = {0}, new_files = {0};
    int64_t file_delta = 0;
    bool dirs = false;
    int32_t n_failed = 0;
    const double now = rp_store_wall_now();
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        /* a savepoint per item: one bad item does not sink the batch */
        st = rp_store_exec(s, "SAVEPOINT item");
        if (st != RP_OK) break;
        int32_t nf = new_files.n;
        items[i].status = put_one(s, &items[i], &max_id, &old_files, &new_files, &file_delta, now, &dirs);
        if (items[i].status != RP_OK) {
            n_failed++;
            if (!cause[0]) snprintf(cause, sizeof cause, "%s", rp_last_error());
            /* this item's new file (if any) is not referenced by any row */
            char full[4096];
            for (int32_t k = nf; k < new_files.n; k++) {
                snprintf(full, sizeof full, "%s%s", s->dir, new_files.paths[k]);
                unlink(full);
            }
            new_files.n = nf;
            if (sqlite3_get_autocommit(s->db) || sqlite3_exec(s->db, "ROLLBACK TO item", NULL, NULL, NULL) != SQLITE_OK)
                st = items[i].status;   /* the transaction is gone with it: the batch fails with this cause */
        }
        if (st == RP_OK) st = rp_store_exec(s, "RELEASE item");
        if (st != RP_OK && !cause[0]) snprintf(cause, sizeof cause, "%s", rp_last_error());
    }
    if (st == RP_OK && dirs && s->p.fsync_files) {
        /* the renames must be durable before the rows that name them */
        char sub[4096];
        for (int32_t i = 0; i < n; i++)
            if (items[i].status == RP_OK && items[i].meta.loc == 1) {
                snprintf(sub, sizeof sub, "%s/kv/%02x", s->dir, (unsigned)(items[i].meta.id & 0xff));
                fsync_dir(sub);
            }
    }
    if (st == RP_OK) {
        int64_t cur = 0;
        bool f = false;
        st = rp_store_meta_get(s, "next_id", &cur, &f);
        if (st == RP_OK && (!f || (uint64_t)cur <= max_id)) st = rp_store_meta_set(s, "next_id", i64(max_id + 1));
        if (st == RP_OK && clock) st = rp_store_meta_set(s, "clock", i64(clock));
        /* failed writes, this batch's and earlier ones not yet recorded, for `reprise cache stats` */
        if (st == RP_OK && s->fail_pending + (uint64_t)n_failed > 0)
            st = rp_store_meta_add(s, "write_failures", s->fail_pending + (uint64_t)n_failed);
        if (st == RP_OK && (st = rp_store_exec(s, "COMMIT")) != RP_OK && rp_store_db_full(s) && !cause[0])
            snprintf(cause, sizeof cause, "store: disk full writing chunk %llu%s to '%s' (commit: %s)",
                     (unsigned long long)items[0].meta.id, n > 1 ? " and the rest of its batch" : "", s->dir,
                     sqlite3_errmsg(s->db));
        if (st != RP_OK && !cause[0]) snprintf(cause, sizeof cause, "%s", rp_last_error());
    }
    if (st != RP_OK) {
        if (!sqlite3_get_autocommit(s->db)) rp_store_exec_quiet(s, "ROLLBACK");
        for (int32_t i = 0; i < n; i++)
            if (items[i].status == RP_OK) items[i].status = st;
        s->fail_pending += (uint64_t)n;   /* every item failed */
        ul_run(&new_files, s);   /* none of these rows exist */
        free(old_files.paths);
        return rp_errorf(st, "%s", cause);
    }
    s->fail_pending = 0;
    if (n_failed > 0) (void)rp_errorf(RP_ERR_IO, "%s", cause);   /* what the failed items' status means */
    free(new_files.paths);
    ul_run(&old_files, s);   /* replaced payload files, after the commit that stopped naming them */
    if (s->file_bytes_ok) s->file_bytes = (uint64_t)((int64_t)s->file_bytes + file_delta);
    return RP_OK;
}

/* ---- payload read ---- */

static rp_status read_stored(rp_store *s, const rp_store_chunk *m, uint64_t off, uint64_t len, uint8_t *dst) {
    if (len == 0) return RP_OK;
    if (off + len > m->stored_bytes)
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu read [%llu, +%llu) past %llu stored bytes",
                         (unsigned long long)m->id, (unsigned long long)off, (unsigned long long)len,
                         (unsigned long long)m->stored_bytes);
    if (m->loc == 1) {
        char path[4096];
        payload_path(s, m->id, m->checksum, path, sizeof path, false);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            /* out of descriptors or memory is a failed attempt, not a damaged row */
            const int err = errno;
            const rp_status code = err == EMFILE || err == ENFILE || err == ENOMEM ? RP_ERR_NOMEM : RP_ERR_FORMAT;
            return rp_errorf(code, "store: chunk row %llu payload file '%s': %s", (unsigned long long)m->id, path,
                             strerror(err));
        }
        struct stat sb = {0};   /* not ours, or writable by others: a corrupt chunk, never used (see rp_store_check_stat) */
        if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || rp_store_check_stat(path, &sb) != RP_OK) {
            char why[600];
            snprintf(why, sizeof why, "%s", S_ISREG(sb.st_mode) ? rp_last_error() : "not a regular file");
            close(fd);
            return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu payload file not used: %s", (unsigned long long)m->id, why);
        }
        uint64_t got = 0;
        while (got < len) {
            ssize_t r = pread(fd, dst + got, (size_t)(len - got), (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (uint64_t)r;
        }
        close(fd);
        if (got != len)
            return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu payload file '%s' is short (%llu of %llu bytes)",
                             (unsigned long long)m->id, path, (unsigned long long)(off + got),
                             (unsigned long long)(off + len));
        return RP_OK;
    }
    /* BLOB: incremental I/O reads just the range */
    sqlite3_blob *b = NULL;
    int rc = sqlite3_blob_open(s->db, "main", "payloads", "data", i64(m->id), 0, &b);
    if (rc != SQLITE_OK) {
        rp_store_note_damage(s, sqlite3_extended_errcode(s->db));
        rp_status st = rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu has no payload: %s", (unsigned long long)m->id,
                                 sqlite3_errmsg(s->db));
        sqlite3_blob_close(b);
        return st;
    }
    rp_status st = RP_OK;
    if ((uint64_t)sqlite3_blob_bytes(b) != m->stored_bytes)
        st = rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu payload is %d bytes, row says %llu",
                       (unsigned long long)m->id, sqlite3_blob_bytes(b), (unsigned long long)m->stored_bytes);
    else if ((rc = sqlite3_blob_read(b, dst, (int)len, (int)off)) != SQLITE_OK) {
        rp_store_note_damage(s, rc);
        st = rp_errorf(RP_ERR_IO, "store: reading chunk row %llu payload: %s", (unsigned long long)m->id,
                       sqlite3_errmsg(s->db));
    }
    sqlite3_blob_close(b);
    return st;
}

rp_status rp_store_load_layers(rp_store *s, const rp_store_chunk *m, uint8_t *dst, int32_t l0, int32_t l1) {
    if (!s || !m || !dst || !m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "store: load of NULL");
    if (l0 < 0 || l1 > m->n_layer || l0 >= l1) return RP_OK;
    if (m->stored_bytes > (uint64_t)INT32_MAX && m->loc == 0)
        return rp_errorf(RP_ERR_UNSUPPORTED, "store: chunk row %llu BLOB over 2 GiB", (unsigned long long)m->id);
    const uint64_t lraw = 2 * (uint64_t)m->n_tokens * m->row_bytes;
    const uint8_t *e0 = m->layers + (size_t)l0 * LAYER_ENTRY, *e1 = m->layers + (size_t)(l1 - 1) * LAYER_ENTRY;
    const uint64_t off = rd64(e0), end = rd64(e1) + rd64(e1 + 8);
    if (m->codec == 0) {
        /* raw: stored layout == payload layout; one read straight into place */
        RP_TRY(read_stored(s, m, off, end - off, dst + (size_t)l0 * lraw));
    } else {
        RP_TRY(scratch_reserve(s, (size_t)(end - off)));
        RP_TRY(read_stored(s, m, off, end - off, s->scratch));
        for (int32_t l = l0; l < l1; l++) {
            const uint8_t *e = m->layers + (size_t)l * LAYER_ENTRY;
            const uint64_t lo = rd64(e) - off, ll = rd64(e + 8);
            uint8_t *d = dst + (size_t)l * lraw;
            if (ll == lraw) {
                memcpy(d, s->scratch + lo, lraw);
            } else {
                size_t r = ZSTD_decompressDCtx(s->zd, d, lraw, s->scratch + lo, ll);
                if (ZSTD_isError(r) || r != lraw)
                    return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu layer %d does not decompress (%s)",
                                     (unsigned long long)m->id, l,
                                     ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
            }
        }
    }
    for (int32_t l = l0; l < l1; l++) {
        const uint8_t *e = m->layers + (size_t)l * LAYER_ENTRY;
        if (layer_sum(s, dst + (size_t)l * lraw, lraw) != rd64(e + 16))
            return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu layer %d fails its checksum", (unsigned long long)m->id,
                             l);
    }
    return RP_OK;
}

rp_status rp_store_load(rp_store *s, const rp_store_chunk *m, uint8_t *dst) {
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "store: load of NULL");
    return rp_store_load_layers(s, m, dst, 0, m->n_layer);
}

/* ---- delete ---- */

static rp_status delete_ids(rp_store *s, const uint64_t *ids, int32_t n, unlink_list *files, int64_t *file_delta) {
    sqlite3_stmt *qo, *qd, *qp, *qk, *qv;
    RP_TRY(rp_store_stmt(s, S_OLD, &qo));
    RP_TRY(rp_store_stmt(s, S_DEL_CHUNK, &qd));
    RP_TRY(rp_store_stmt(s, S_DEL_PAYLOAD, &qp));
    RP_TRY(rp_store_stmt(s, S_DEL_KW, &qk));
    RP_TRY(rp_store_stmt(s, S_DEL_VEC, &qv));
    sqlite3_stmt *qs = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT stored_bytes FROM chunks WHERE id = ?1", -1, &qs, NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "delete");
    rp_status st = RP_OK;
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        const int64_t id = i64(ids[i]);
        sqlite3_reset(qo);
        sqlite3_bind_int64(qo, 1, id);
        const bool exists = sqlite3_step(qo) == SQLITE_ROW;
        const int64_t model = exists ? sqlite3_column_int64(qo, 2) : 0;
        if (exists && sqlite3_column_int(qo, 0) == 1) {
            ul_add(files, s, ids[i], (uint64_t)sqlite3_column_int64(qo, 1));
            sqlite3_reset(qs);
            sqlite3_bind_int64(qs, 1, id);
            if (sqlite3_step(qs) == SQLITE_ROW) *file_delta -= (int64_t)file_round((uint64_t)sqlite3_column_int64(qs, 0));
        }
        sqlite3_reset(qo);
        /* its terms count down in the document frequencies, in this transaction */
        if (exists) st = rp_store_terms_drop(s, ids[i], model);
        sqlite3_stmt *qq[4] = {qd, qp, qk, qv};
        for (int k = 0; k < 4 && st == RP_OK; k++) {
            sqlite3_reset(qq[k]);
            sqlite3_bind_int64(qq[k], 1, id);
            if (sqlite3_step(qq[k]) != SQLITE_DONE) st = rp_store_sql_err(s, "delete chunk");
            sqlite3_reset(qq[k]);
        }
    }
    sqlite3_finalize(qs);
    return st;
}

rp_status rp_store_delete(rp_store *s, const uint64_t *ids, int32_t n) {
    if (n <= 0) return RP_OK;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    unlink_list files = {0};
    int64_t delta = 0;
    rp_status st = delete_ids(s, ids, n, &files, &delta);
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) {
        rp_store_exec(s, "ROLLBACK");
        free(files.paths);
        return st;
    }
    ul_run(&files, s);
    if (s->file_bytes_ok) s->file_bytes = (uint64_t)((int64_t)s->file_bytes + delta);
    return RP_OK;
}
