/* store_evict.c — the store's size on disk, its stats, and eviction by locality x cost (cascade). */
#include "store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/error.h"

/* ---- sizes and stats ---- */

static uint64_t file_size_on_disk(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    return (uint64_t)sb.st_size;
}

/* Database pages in use + payload files, without the WAL. */
static uint64_t disk_bytes_nowal(rp_store *s);

uint64_t rp_store_disk_bytes(rp_store *s) {
    if (!s) return 0;
    char wal[4096];
    snprintf(wal, sizeof wal, "%s/kv.db-wal", s->dir);
    return disk_bytes_nowal(s) + file_size_on_disk(wal);
}

static uint64_t disk_bytes_nowal(rp_store *s) {
    if (!s->file_bytes_ok) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(s->db,
                               "SELECT coalesce(sum((stored_bytes + 4095) / 4096 * 4096), 0) FROM chunks WHERE loc = 1",
                               -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW) {
            s->file_bytes = (uint64_t)sqlite3_column_int64(q, 0);
            s->file_bytes_ok = true;
        }
        sqlite3_finalize(q);
    }
    int64_t pages = 0, free_pages = 0, psize = 4096;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "PRAGMA page_count", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        pages = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    if (sqlite3_prepare_v2(s->db, "PRAGMA freelist_count", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        free_pages = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    if (sqlite3_prepare_v2(s->db, "PRAGMA page_size", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        psize = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return (uint64_t)((pages - free_pages) * psize) + s->file_bytes;
}

uint64_t rp_store_wal_bytes(rp_store *s) {
    if (!s) return 0;
    char wal[4096];
    snprintf(wal, sizeof wal, "%s/kv.db-wal", s->dir);
    return file_size_on_disk(wal);
}

void rp_store_checkpoint(rp_store *s) {
    if (s && s->db && !s->p.read_only) sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
}

static int64_t scalar(rp_store *s, const char *sql, int64_t bind) {
    sqlite3_stmt *q = NULL;
    int64_t v = 0;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) == SQLITE_OK) {
        if (sqlite3_bind_parameter_count(q) > 0) sqlite3_bind_int64(q, 1, bind);
        if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return v;
}

rp_status rp_store_stats_get(rp_store *s, rp_store_stats *st) {
    memset(st, 0, sizeof *st);
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL store");
    const char *w = s->model ? " WHERE model = ?1" : "";
    char sql[512];
    sqlite3_stmt *q = NULL;
    snprintf(sql, sizeof sql,
             "SELECT count(*), coalesce(sum(corrupt), 0), coalesce(sum(loc = 1), 0), coalesce(sum(loc = 0), 0), "
             "coalesce(sum(kv_bytes), 0), coalesce(sum(stored_bytes), 0) FROM chunks%s",
             w);
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "stats");
    if (s->model) sqlite3_bind_int64(q, 1, s->model);
    if (sqlite3_step(q) == SQLITE_ROW) {
        st->n_chunks = (uint64_t)sqlite3_column_int64(q, 0);
        st->n_corrupt = (uint64_t)sqlite3_column_int64(q, 1);
        st->n_files = (uint64_t)sqlite3_column_int64(q, 2);
        st->n_blobs = (uint64_t)sqlite3_column_int64(q, 3);
        st->raw_bytes = (uint64_t)sqlite3_column_int64(q, 4);
        st->stored_bytes = (uint64_t)sqlite3_column_int64(q, 5);
    }
    sqlite3_finalize(q);
    st->n_models = (uint64_t)scalar(s, "SELECT count(*) FROM models", 0);
    st->write_failures = (uint64_t)scalar(s, "SELECT coalesce(max(value), 0) FROM meta WHERE key = 'write_failures'", 0) +
                         s->fail_pending;
    st->n_keywords = (uint64_t)scalar(s, "SELECT count(*) FROM keywords", 0);
    st->n_vectors = (uint64_t)scalar(s, "SELECT count(*) FROM vectors", 0);
    if (rp_store_has_terms(s)) {   /* the bound model's (all models' when unbound) */
        st->n_terms = (uint64_t)scalar(s, s->model ? "SELECT count(*) FROM term_df WHERE model = ?1 AND term != 0"
                                                   : "SELECT count(*) FROM term_df WHERE term != 0", s->model);
        st->n_term_docs = (uint64_t)scalar(s, s->model ? "SELECT coalesce(sum(df), 0) FROM term_df WHERE model = ?1 AND term = 0"
                                                       : "SELECT coalesce(sum(df), 0) FROM term_df WHERE term = 0", s->model);
    }
    s->file_bytes_ok = false;   /* recount */
    st->disk_bytes = rp_store_disk_bytes(s);
    return RP_OK;
}

/* ---- eviction ---- */

typedef struct ev_row {
    uint64_t id, parent;
    double rc, desc, score;
    uint64_t bytes;
    int corrupt;
} ev_row;

static int ev_by_score(const void *a, const void *b) {
    const ev_row *x = a, *y = b;
    if (x->corrupt != y->corrupt) return y->corrupt - x->corrupt;   /* corrupt first */
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static ev_row *ev_find(ev_row *v, int64_t n, uint64_t id) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (v[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && v[lo].id == id ? &v[lo] : NULL;
}

static bool protected_id(const rp_store_evict_params *p, uint64_t id) {
    int32_t lo = 0, hi = p->n_protect;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (p->protect[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->n_protect && p->protect[lo] == id;
}

rp_status rp_store_evict(rp_store *s, uint64_t target, const rp_store_evict_params *p, uint64_t **deleted,
                         int32_t *n_deleted, uint64_t *freed) {
    if (deleted) *deleted = NULL;
    if (n_deleted) *n_deleted = 0;
    if (freed) *freed = 0;
    if (!s || !p) return rp_errorf(RP_ERR_INVALID_ARG, "store: evict of NULL");
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    const uint64_t start = rp_store_disk_bytes(s);
    if (start <= target) return RP_OK;
    /* Rows are evicted against the database and files alone: the WAL is
     * transient (checkpointed and truncated at the end), not worth evicting for. */
    uint64_t used = disk_bytes_nowal(s);
    uint64_t *del = NULL;
    int32_t ndel = 0, cap_del = 0;
    rp_status st = RP_OK;
    /* Estimates of a row's bytes can be off (page packing), so re-measure and
     * go again a few times. */
    for (int round = 0; round < 4 && used > target && st == RP_OK; round++) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(s->db,
                               "SELECT id, parent, recompute_ms, heat, last_used, stored_bytes, loc, n_tokens, corrupt "
                               "FROM chunks ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK)
            return rp_store_sql_err(s, "evict scan");
        int64_t n = 0, cap = 0;
        ev_row *v = NULL;
        int rc;
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                ev_row *nv = realloc(v, sizeof *v * (size_t)cap);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory in eviction");
                    break;
                }
                v = nv;
            }
            ev_row *r = &v[n++];
            r->id = (uint64_t)sqlite3_column_int64(q, 0);
            r->parent = (uint64_t)sqlite3_column_int64(q, 1);
            r->rc = sqlite3_column_double(q, 2);
            if (!(r->rc > 0)) r->rc = 1e-3;
            double heat = sqlite3_column_double(q, 3);
            uint64_t last = (uint64_t)sqlite3_column_int64(q, 4);
            uint64_t sb = (uint64_t)sqlite3_column_int64(q, 5);
            int loc = sqlite3_column_int(q, 6);
            int32_t nt = sqlite3_column_int(q, 7);
            r->corrupt = sqlite3_column_int(q, 8);
            r->bytes = (loc == 1 ? file_round(sb) : sb) + (uint64_t)nt * (sizeof(rp_token) + 8) + 256;
            r->desc = 0;
            double age = p->clock > last ? (double)(p->clock - last) : 0;
            double R = heat * exp2(-age / (p->half_life > 0 ? p->half_life : 1));
            /* LRU: last use alone; COST: locality now x cost (cost filled below) */
            r->score = p->policy == RP_EVICT_LRU ? (double)last : (R > 1e-300 ? R : 1e-300);
        }
        if (st == RP_OK && rc != SQLITE_DONE) st = rp_store_sql_err(s, "evict scan");
        sqlite3_finalize(q);
        if (st != RP_OK) {
            free(v);
            break;
        }
        if (p->policy != RP_EVICT_LRU) {
            /* Cascade: a parent's id is always smaller than its children's
             * (parents are inserted first), so one pass in decreasing id order
             * sums every subtree. */
            for (int64_t i = n - 1; i >= 0; i--) {
                if (!v[i].parent) continue;
                ev_row *par = ev_find(v, n, v[i].parent);
                if (par && par < &v[i]) par->desc += v[i].rc + v[i].desc;
            }
            for (int64_t i = 0; i < n; i++) v[i].score *= v[i].rc + p->cascade_weight * v[i].desc;
        }
        if (n > 1) qsort(v, (size_t)n, sizeof *v, ev_by_score);
        uint64_t est = used;
        int32_t first = ndel;
        for (int64_t i = 0; i < n && est > target; i++) {
            if (protected_id(p, v[i].id)) continue;
            if (ndel == cap_del) {
                cap_del = cap_del ? 2 * cap_del : 256;
                uint64_t *nd = realloc(del, sizeof *del * (size_t)cap_del);
                if (!nd) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory in eviction");
                    break;
                }
                del = nd;
            }
            del[ndel++] = v[i].id;
            est = est > v[i].bytes ? est - v[i].bytes : 0;
        }
        free(v);
        if (st != RP_OK) break;
        if (ndel == first) break;   /* nothing evictable left */
        for (int32_t i = first; i < ndel && st == RP_OK; i += 512)
            st = rp_store_delete(s, del + i, ndel - i < 512 ? ndel - i : 512);
        if (st == RP_OK) rp_store_exec(s, "PRAGMA incremental_vacuum");   /* free pages go back to the file system */
        used = disk_bytes_nowal(s);
    }
    /* one checkpoint for the whole eviction: applies the deletes, shrinks the file, truncates the WAL */
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    used = rp_store_disk_bytes(s);
    if (freed) *freed = start > used ? start - used : 0;
    if (deleted && st == RP_OK) *deleted = del;
    else free(del);
    if (n_deleted) *n_deleted = ndel;
    return st;
}
