/* store_rows.c — chunk rows: read and checked, lookups (edge, hash, best child, id), scans, locality, counters. */
#include "store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

/* ---- rows ---- */

void rp_store_chunk_clear(rp_store_chunk *c) {
    if (!c) return;
    free(c->tokens);
    free(c->layers);
    c->tokens = NULL;
    c->layers = NULL;
    c->layers_bytes = 0;
}

/* Reads the current row of a SELECT of rp_store_cols. With blobs, tokens and layers
 * are copied (malloc'd). */
rp_status rp_store_row_read(rp_store *s, sqlite3_stmt *q, rp_store_chunk *c, bool blobs) {
    memset(c, 0, sizeof *c);
    c->id = (uint64_t)sqlite3_column_int64(q, 0);
    c->model = sqlite3_column_int64(q, 1);
    c->hash = (uint64_t)sqlite3_column_int64(q, 2);
    c->chain = (uint64_t)sqlite3_column_int64(q, 3);
    c->parent_id = (uint64_t)sqlite3_column_int64(q, 4);
    c->n_tokens = sqlite3_column_int(q, 5);
    c->pos0 = sqlite3_column_int(q, 6);
    c->exact = sqlite3_column_int(q, 7) != 0;
    c->kv_type = sqlite3_column_int(q, 8);
    c->n_layer = sqlite3_column_int(q, 9);
    c->row_bytes = (uint64_t)sqlite3_column_int64(q, 10);
    c->kv_bytes = (uint64_t)sqlite3_column_int64(q, 11);
    c->stored_bytes = (uint64_t)sqlite3_column_int64(q, 12);
    c->loc = (uint8_t)sqlite3_column_int(q, 13);
    c->codec = (uint8_t)sqlite3_column_int(q, 14);
    c->checksum = (uint64_t)sqlite3_column_int64(q, 15);
    c->recompute_ms = sqlite3_column_double(q, 16);
    c->heat = sqlite3_column_double(q, 17);
    c->last_used = (uint64_t)sqlite3_column_int64(q, 18);
    c->hits = (uint64_t)sqlite3_column_int64(q, 19);
    c->created = sqlite3_column_double(q, 20);
    c->used_at = sqlite3_column_double(q, 21);
    if (!blobs) return RP_OK;
    const void *tb = sqlite3_column_blob(q, 22);
    int tn = sqlite3_column_bytes(q, 22);
    const void *lb = sqlite3_column_blob(q, 23);
    int ln = sqlite3_column_bytes(q, 23);
    if (c->n_tokens <= 0 || c->n_tokens > MAX_TOKENS_PER_CHUNK || tn != c->n_tokens * (int)sizeof(rp_token) ||
        c->n_layer <= 0 || c->n_layer > 4096 || ln != c->n_layer * LAYER_ENTRY)
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu has inconsistent sizes (tokens %d / %d B, layers %d / %d B)",
                         (unsigned long long)c->id, c->n_tokens, tn, c->n_layer, ln);
    c->tokens = malloc((size_t)tn);
    c->layers = malloc((size_t)ln);
    if (!c->tokens || !c->layers) {
        rp_store_chunk_clear(c);
        return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    }
    memcpy(c->tokens, tb, (size_t)tn);
    memcpy(c->layers, lb, (size_t)ln);
    c->layers_bytes = (uint32_t)ln;
    return RP_OK;
}

/* Full consistency of a row's metadata: checksum and geometry. */
rp_status rp_store_row_check(const rp_store *s, const rp_store_chunk *c) {
    if (rp_store_meta_checksum(s, c, c->tokens, c->layers, c->layers_bytes) != c->checksum)
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu fails its metadata checksum", (unsigned long long)c->id);
    const uint64_t raw = (uint64_t)c->n_layer * 2 * (uint64_t)c->n_tokens * c->row_bytes;
    if (raw != c->kv_bytes || c->row_bytes == 0)
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu payload size %llu != geometry %llu",
                         (unsigned long long)c->id, (unsigned long long)c->kv_bytes, (unsigned long long)raw);
    if (s->model && (c->model != s->model || c->kv_type != s->kv_type || c->n_layer != s->n_layer ||
                     c->row_bytes != s->row_bytes))
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu does not belong to the bound model",
                         (unsigned long long)c->id);
    const uint64_t lraw = 2 * (uint64_t)c->n_tokens * c->row_bytes;
    uint64_t end = 0;
    for (int32_t l = 0; l < c->n_layer; l++) {
        const uint8_t *e = c->layers + (size_t)l * LAYER_ENTRY;
        uint64_t off = rd64(e), len = rd64(e + 8);
        if (off != end || len == 0 || len > lraw || (c->codec == 0 && len != lraw))
            return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu layer %d table entry is invalid",
                             (unsigned long long)c->id, l);
        end = off + len;
    }
    if (end != c->stored_bytes)
        return rp_errorf(RP_ERR_FORMAT, "store: chunk row %llu layer table covers %llu of %llu stored bytes",
                         (unsigned long long)c->id, (unsigned long long)end, (unsigned long long)c->stored_bytes);
    return RP_OK;
}

static inline bool same_tokens(const rp_store_chunk *c, const rp_token *t, int32_t n) {
    return c->n_tokens == n && memcmp(c->tokens, t, sizeof(rp_token) * (size_t)n) == 0;
}

/* Rows found corrupt by lookups, for rp_store_take_bad (a small ring: a
 * lookup never writes, the pool's writer deletes them later). */
static void note_bad(rp_store *s, uint64_t id) {
    for (int i = 0; i < s->n_bad; i++)
        if (s->bad[i] == id) return;
    if (s->n_bad < (int)(sizeof s->bad / sizeof s->bad[0])) s->bad[s->n_bad++] = id;
}

int32_t rp_store_take_bad(rp_store *s, uint64_t *out, int32_t cap) {
    int32_t n = 0;
    if (!s) return 0;
    for (; n < s->n_bad && n < cap; n++) out[n] = s->bad[n];
    memmove(s->bad, s->bad + n, sizeof s->bad[0] * (size_t)(s->n_bad - n));
    s->n_bad -= n;
    return n;
}

/* Runs a lookup statement; among rows whose tokens equal t[0..n) and pass
 * rp_store_row_check, takes the most recently used. Rows failing rp_store_row_check are
 * skipped and noted for rp_store_take_bad. */
static rp_status lookup_rows(rp_store *s, sqlite3_stmt *q, const rp_token *t, int32_t n, rp_store_chunk *out,
                             bool *found) {
    *found = false;
    rp_status st = RP_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        /* cheap pre-filter on the token count before copying blobs */
        if (sqlite3_column_int(q, 5) != n) continue;
        if (*found && (uint64_t)sqlite3_column_int64(q, 18) <= out->last_used) continue;
        if (s->skip && s->skip(s->skip_user, (uint64_t)sqlite3_column_int64(q, 0))) continue;
        rp_store_chunk c;
        rp_status rs = rp_store_row_read(s, q, &c, true);
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        if (rs != RP_OK) {
            note_bad(s, (uint64_t)sqlite3_column_int64(q, 0));
            continue;
        }
        if (!same_tokens(&c, t, n)) {
            rp_store_chunk_clear(&c);
            continue;
        }
        if (rp_store_row_check(s, &c) != RP_OK) {
            note_bad(s, c.id);
            rp_store_chunk_clear(&c);
            continue;
        }
        if (*found) rp_store_chunk_clear(out);
        *out = c;
        *found = true;
    }
    if (st == RP_OK && rc != SQLITE_DONE) st = rp_store_sql_err(s, "lookup");
    sqlite3_reset(q);
    if (st != RP_OK && *found) {
        rp_store_chunk_clear(out);
        *found = false;
    }
    return st;
}

rp_status rp_store_find_edge(rp_store *s, uint64_t parent_id, uint64_t chain, const rp_token *toks, int32_t n,
                             rp_store_chunk *out, bool *found) {
    *found = false;
    RP_TRY(rp_store_need_model(s));
    if (!toks || n <= 0) return RP_OK;
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_EDGE, &q));
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(parent_id));
    sqlite3_bind_int64(q, 3, i64(chain));
    return lookup_rows(s, q, toks, n, out, found);
}

rp_status rp_store_find_hash(rp_store *s, uint64_t hash, const rp_token *toks, int32_t n, rp_store_chunk *out,
                             bool *found) {
    *found = false;
    RP_TRY(rp_store_need_model(s));
    if (!toks || n <= 0) return RP_OK;
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_HASH, &q));
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(hash));
    return lookup_rows(s, q, toks, n, out, found);
}

/* Rows of q (children of one parent) that share at least min_common leading
 * tokens with toks[0..n): keeps the one sharing the most (the most recently
 * used among equals) in *out. */
static rp_status consider_children(rp_store *s, sqlite3_stmt *q, const rp_token *toks, int32_t n, int32_t min_common,
                                   rp_store_chunk *out, int32_t *n_common, bool *found) {
    rp_status st = RP_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        /* compare tokens straight from the column before copying anything */
        const rp_token *ct = sqlite3_column_blob(q, 22);
        int32_t cn = sqlite3_column_bytes(q, 22) / (int)sizeof(rp_token);
        if (!ct || cn <= 0 || ct[0] != toks[0]) continue;
        int32_t m = cn < n ? cn : n, k = 1;
        while (k < m && ct[k] == toks[k]) k++;
        if (k < min_common) continue;
        if (*found && (k < *n_common || (k == *n_common && (uint64_t)sqlite3_column_int64(q, 18) <= out->last_used)))
            continue;
        if (*found && (uint64_t)sqlite3_column_int64(q, 0) == out->id) continue;   /* met again by another query */
        if (s->skip && s->skip(s->skip_user, (uint64_t)sqlite3_column_int64(q, 0))) continue;
        rp_store_chunk c;
        rp_status rs = rp_store_row_read(s, q, &c, true);
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        if (rs != RP_OK || rp_store_row_check(s, &c) != RP_OK) {
            note_bad(s, c.id ? c.id : (uint64_t)sqlite3_column_int64(q, 0));
            rp_store_chunk_clear(&c);
            continue;
        }
        if (*found) rp_store_chunk_clear(out);
        *out = c;
        *n_common = k;
        *found = true;
    }
    if (st == RP_OK && rc != SQLITE_DONE) st = rp_store_sql_err(s, "children lookup");
    sqlite3_reset(q);
    return st;
}

/* A child's head: the bytes of its first HEAD_TOKENS tokens (the chunks_kids
 * key). Byte order of the ids is not token order, but any total order does:
 * heads sharing more leading bytes sort closer, so the children sharing the
 * most leading tokens with a query sit next to its place in the index (a
 * token prefix is a byte prefix of 4 bytes a token). HEAD_NEAR children each
 * side are compared; when the whole head is shared, every child with that
 * head (up to HEAD_TIES) is, since their order past the head is arbitrary. */
#define HEAD_TOKENS 16
#define HEAD_NEAR 8
#define HEAD_TIES 1024

rp_status rp_store_best_child(rp_store *s, uint64_t parent_id, const rp_token *toks, int32_t n, int32_t min_common,
                              rp_store_chunk *out, int32_t *n_common, bool *found) {
    *found = false;
    *n_common = 0;
    RP_TRY(rp_store_need_model(s));
    if (!toks || n <= 0) return RP_OK;
    if (min_common < 1) min_common = 1;
    const int head_bytes = (int)sizeof(rp_token) * (n < HEAD_TOKENS ? n : HEAD_TOKENS);
    static const int which[3] = {S_KIDS_GE, S_KIDS_LT, S_KIDS_EQ};
    rp_status st = RP_OK;
    for (int i = 0; i < 3 && st == RP_OK; i++) {
        if (which[i] == S_KIDS_EQ && !(*found && *n_common >= HEAD_TOKENS)) break;
        sqlite3_stmt *q;
        RP_TRY(rp_store_stmt(s, which[i], &q));
        sqlite3_bind_int64(q, 1, s->model);
        sqlite3_bind_int64(q, 2, i64(parent_id));
        sqlite3_bind_blob(q, 3, toks, head_bytes, SQLITE_STATIC);
        sqlite3_bind_int(q, 4, which[i] == S_KIDS_EQ ? HEAD_TIES : HEAD_NEAR);
        st = consider_children(s, q, toks, n, min_common, out, n_common, found);
    }
    if (st != RP_OK && *found) {
        rp_store_chunk_clear(out);
        *found = false;
        *n_common = 0;
    }
    return st;
}

rp_status rp_store_get(rp_store *s, uint64_t id, rp_store_chunk *out, bool *found) {
    *found = false;
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_GET, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    int rc = sqlite3_step(q);
    rp_status st = RP_OK;
    if (rc == SQLITE_ROW && s->model && sqlite3_column_int64(q, 1) != s->model) {
        /* another model's row: not visible through this binding */
    } else if (rc == SQLITE_ROW && s->skip && s->skip(s->skip_user, id)) {
        /* a row the owner knows to be bad */
    } else if (rc == SQLITE_ROW) {
        st = rp_store_row_read(s, q, out, true);
        if (st == RP_OK) st = rp_store_row_check(s, out);
        if (st == RP_OK) *found = true;
        else rp_store_chunk_clear(out);
    } else if (rc != SQLITE_DONE) {
        st = rp_store_sql_err(s, "get row");
    }
    sqlite3_reset(q);
    return st;
}

/* Metadata-only rows from an arbitrary SELECT of rp_store_cols. */
static rp_status collect_rows(rp_store *s, sqlite3_stmt *q, rp_store_chunk *out, int32_t cap, int32_t *n_out) {
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n_out >= cap) break;
        rp_store_chunk *c = &out[*n_out];
        if (rp_store_row_read(s, q, c, false) == RP_OK) (*n_out)++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return rp_store_sql_err(s, "scan rows");
    return RP_OK;
}

rp_status rp_store_children_of(rp_store *s, const uint64_t *parents, int32_t n, rp_store_chunk *out, int32_t cap,
                               int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_KIDS, &q));
    rp_status st = RP_OK;
    for (int32_t i = 0; i < n && *n_out < cap && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, s->model);
        sqlite3_bind_int64(q, 2, i64(parents[i]));
        st = collect_rows(s, q, out, cap, n_out);
    }
    sqlite3_reset(q);
    return st;
}

rp_status rp_store_hottest(rp_store *s, uint64_t clock, double half_life, rp_store_chunk *out, int32_t cap,
                           int32_t *n_out) {
    *n_out = 0;
    RP_TRY(rp_store_need_model(s));
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM chunks WHERE model = ?1 AND corrupt = 0 "
             "ORDER BY rp_locality(heat, last_used, ?2, ?3) DESC, id LIMIT ?4",
             rp_store_cols);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return rp_store_sql_err(s, "hottest rows");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(clock));
    sqlite3_bind_double(q, 3, half_life);
    sqlite3_bind_int(q, 4, cap);
    rp_status st = collect_rows(s, q, out, cap, n_out);
    sqlite3_finalize(q);
    return st;
}

rp_status rp_store_touch_rows(rp_store *s, const rp_store_touch *t, int32_t n, uint64_t clock) {
    if (n <= 0) return RP_OK;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q;
    rp_status st = rp_store_stmt(s, S_TOUCH, &q);
    const double now = rp_store_wall_now();
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, i64(t[i].id));
        sqlite3_bind_double(q, 2, t[i].heat);
        sqlite3_bind_int64(q, 3, i64(t[i].last_used));
        sqlite3_bind_int64(q, 4, i64(t[i].hits));
        sqlite3_bind_double(q, 5, now);
        if (sqlite3_step(q) != SQLITE_DONE) st = rp_store_sql_err(s, "touch rows");
    }
    if (st == RP_OK) sqlite3_reset(q);
    if (st == RP_OK && clock) st = rp_store_meta_set(s, "clock", i64(clock));
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) rp_store_exec(s, "ROLLBACK");
    return st;
}

/* ---- marks and counters ---- */

rp_status rp_store_mark_corrupt(rp_store *s, uint64_t id) {
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_MARK_BAD, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "mark corrupt");
}

uint64_t rp_store_next_id(rp_store *s) {
    int64_t v = 0, mx = 0;
    bool f = false;
    if (rp_store_meta_get(s, "next_id", &v, &f) != RP_OK || !f) v = 1;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT coalesce(max(id), 0) FROM chunks", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        mx = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    uint64_t next = (uint64_t)v;
    if ((uint64_t)mx + 1 > next) next = (uint64_t)mx + 1;
    return next ? next : 1;
}

uint64_t rp_store_clock(rp_store *s) {
    int64_t v = 0;
    bool f = false;
    if (rp_store_meta_get(s, "clock", &v, &f) != RP_OK || !f) return 0;
    return (uint64_t)v;
}
