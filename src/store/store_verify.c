/* store_verify.c — maintenance over every row: verify (and fix), compact, clear, iterate. */
#include "store/store_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

/* ---- verify / compact / clear / iterate ---- */

/* rp_store_verify reports a term index whose document frequencies disagree with its rows as item 0 (not a
 * chunk id: ids start at 1). */

rp_status rp_store_verify(rp_store *s, bool fix, void (*bad)(void *user, uint64_t id, const char *why), void *user,
                          uint64_t *n_ok, uint64_t *n_bad) {
    *n_ok = *n_bad = 0;
    if (fix && s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT %s FROM chunks%s ORDER BY id", rp_store_cols, s->model ? " WHERE model = ?1" : "");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "verify scan");
    if (s->model) sqlite3_bind_int64(q, 1, s->model);
    uint64_t *badv = NULL;
    int32_t nb = 0, capb = 0;
    uint8_t *buf = NULL;
    size_t bufcap = 0;
    rp_status st = RP_OK;
    int rc;
    /* the binding (if any) is checked per row; unbound verification checks rows against their own model */
    const int64_t bound = s->model;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        rp_store_chunk c;
        rp_status rs = rp_store_row_read(s, q, &c, true);
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        if (rs == RP_OK) {
            if (!bound) s->model = 0;
            rs = rp_store_row_check(s, &c);
        }
        if (rs == RP_OK) {
            if (c.kv_bytes > bufcap) {
                uint8_t *nbuf = realloc(buf, (size_t)c.kv_bytes);
                if (!nbuf) {
                    rp_store_chunk_clear(&c);
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory verifying row %llu", (unsigned long long)c.id);
                    break;
                }
                buf = nbuf;
                bufcap = (size_t)c.kv_bytes;
            }
            rs = rp_store_load(s, &c, buf);
        }
        const uint64_t id = (uint64_t)sqlite3_column_int64(q, 0);
        rp_store_chunk_clear(&c);
        if (rs == RP_OK) {
            (*n_ok)++;
            continue;
        }
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        (*n_bad)++;
        if (bad) bad(user, id, rp_last_error());
        if (fix) {
            if (nb == capb) {
                capb = capb ? 2 * capb : 64;
                uint64_t *nv = realloc(badv, sizeof *badv * (size_t)capb);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                badv = nv;
            }
            badv[nb++] = id;
        }
    }
    s->model = bound;
    if (st == RP_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) st = rp_store_sql_err(s, "verify scan");
    sqlite3_finalize(q);
    free(buf);
    if (st == RP_OK && nb > 0) st = rp_store_delete(s, badv, nb);
    free(badv);
    /* the term index (after the deletes, which keep it consistent): document frequencies equal to a count over
     * the indexed rows; a disagreement is reported as item 0 and, with fix, the frequencies are rebuilt */
    uint64_t wrong = 0;
    if (st == RP_OK) st = rp_store_terms_check(s, fix, &wrong);
    if (st == RP_OK && wrong > 0) {
        char why[160];
        snprintf(why, sizeof why, "term index: %llu document frequencies disagree with the indexed rows%s",
                 (unsigned long long)wrong, fix ? " (rebuilt)" : "");
        (*n_bad)++;
        if (bad) bad(user, 0, why);
    }
    return st;
}

/* Payload files whose name does not match a row (id, checksum, loc = file), and temp files. */
rp_status rp_store_remove_orphan_files(rp_store *s, uint64_t *removed) {
    char kvdir[4096];
    snprintf(kvdir, sizeof kvdir, "%s/kv", s->dir);
    DIR *top = opendir(kvdir);
    if (!top) return RP_OK;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM chunks WHERE id = ?1 AND loc = 1 AND checksum = ?2", -1, &q, NULL) !=
        SQLITE_OK) {
        closedir(top);
        return rp_store_sql_err(s, "compact");
    }
    struct dirent *d;
    while ((d = readdir(top))) {
        if (d->d_name[0] == '.') continue;
        char sub[4096 + 16];
        snprintf(sub, sizeof sub, "%s/%.8s", kvdir, d->d_name);
        DIR *dd = opendir(sub);
        if (!dd) continue;
        struct dirent *f;
        while ((f = readdir(dd))) {
            if (f->d_name[0] == '.') continue;
            unsigned long long id = 0, sum = 0;
            int used = 0;
            bool keep = false;
            if (sscanf(f->d_name, "%llu-%16llx.kv%n", &id, &sum, &used) == 2 && f->d_name[used] == 0) {
                sqlite3_reset(q);
                sqlite3_bind_int64(q, 1, (int64_t)id);
                sqlite3_bind_int64(q, 2, (int64_t)sum);
                keep = sqlite3_step(q) == SQLITE_ROW;
            }
            if (!keep) {
                char path[4096 + 300];
                snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
                if (unlink(path) == 0) (*removed)++;
            }
        }
        closedir(dd);
    }
    sqlite3_finalize(q);
    closedir(top);
    return RP_OK;
}

rp_status rp_store_compact(rp_store *s, uint64_t *removed) {
    *removed = 0;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    static const char *orphans[] = {
        "DELETE FROM payloads WHERE id NOT IN (SELECT id FROM chunks WHERE loc = 0)",
        "DELETE FROM keywords WHERE chunk NOT IN (SELECT id FROM chunks)",
        "DELETE FROM vectors WHERE chunk NOT IN (SELECT id FROM chunks)",
        "DELETE FROM terms WHERE chunk NOT IN (SELECT id FROM chunks)",
        "DELETE FROM coaccess WHERE a NOT IN (SELECT id FROM chunks) OR b NOT IN (SELECT id FROM chunks)",
        "DELETE FROM chunks WHERE model NOT IN (SELECT id FROM models)",
    };
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    rp_status st = RP_OK;
    for (size_t i = 0; i < sizeof orphans / sizeof orphans[0] && st == RP_OK; i++) {
        st = rp_store_exec(s, orphans[i]);
        if (st == RP_OK) *removed += (uint64_t)sqlite3_changes(s->db);
    }
    if (st == RP_OK) st = rp_store_terms_rebuild(s);   /* the frequencies from the rows that remain */
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) {
        rp_store_exec(s, "ROLLBACK");
        return st;
    }
    RP_TRY(rp_store_remove_orphan_files(s, removed));
    RP_TRY(rp_store_exec(s, "VACUUM"));
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    s->file_bytes_ok = false;
    return RP_OK;
}

rp_status rp_store_clear(rp_store *s, uint64_t *n_deleted) {
    *n_deleted = 0;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT id FROM chunks%s", s->model ? " WHERE model = ?1" : "");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "clear");
    if (s->model) sqlite3_bind_int64(q, 1, s->model);
    uint64_t *ids = NULL;
    int32_t n = 0, cap = 0;
    rp_status st = RP_OK;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            uint64_t *nv = realloc(ids, sizeof *ids * (size_t)cap);
            if (!nv) {
                st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                break;
            }
            ids = nv;
        }
        ids[n++] = (uint64_t)sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    for (int32_t i = 0; i < n && st == RP_OK; i += 1024) st = rp_store_delete(s, ids + i, n - i < 1024 ? n - i : 1024);
    free(ids);
    if (st != RP_OK) return st;
    *n_deleted = (uint64_t)n;
    if (s->model) {
        sqlite3_stmt *d = NULL;
        if (sqlite3_prepare_v2(s->db, "DELETE FROM coaccess WHERE model = ?1", -1, &d, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(d, 1, s->model);
            sqlite3_step(d);
        }
        sqlite3_finalize(d);
    } else {
        RP_TRY(rp_store_exec(s, "DELETE FROM coaccess"));
    }
    rp_store_exec(s, "PRAGMA incremental_vacuum");
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    return RP_OK;
}

rp_status rp_store_foreach(rp_store *s, bool (*fn)(void *user, const rp_store_chunk *c), void *user) {
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT %s FROM chunks%s ORDER BY id", rp_store_cols, s->model ? " WHERE model = ?1" : "");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "list chunks");
    if (s->model) sqlite3_bind_int64(q, 1, s->model);
    rp_status st = RP_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        rp_store_chunk c;
        if (rp_store_row_read(s, q, &c, true) != RP_OK) {
            /* a damaged row is still listed, without tokens */
            rp_store_row_read(s, q, &c, false);
            c.tokens = NULL;
        }
        bool go = fn(user, &c);
        rp_store_chunk_clear(&c);
        if (!go) break;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) st = rp_store_sql_err(s, "list chunks");
    sqlite3_finalize(q);
    return st;
}
