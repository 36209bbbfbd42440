/* store.c — the flash store: open / close, schema, secret, lock, damage set-aside, access control, models, shared helpers. */
#define _GNU_SOURCE
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "core/error.h"
#include "core/fsperm.h"

const char *const rp_store_cols =
    "id, model, hash, chain, parent, n_tokens, pos0, exact, kv_type, n_layer, row_bytes, kv_bytes, stored_bytes, "
    "loc, codec, checksum, recompute_ms, heat, last_used, hits, created, used_at, tokens, layers";

double rp_store_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define DAMAGE_MARK "kv.db.damaged"

/* SQLite answered `rc`: on corruption (SQLITE_CORRUPT / SQLITE_NOTADB) the
 * handle is marked damaged (the pool then stops writing to the store) and a
 * writer leaves DIR/kv.db.damaged behind, so that the next writer to open the
 * store sets the database aside instead of using it (set_aside_damaged). */
void rp_store_note_damage(rp_store *s, int rc) {
    if ((rc & 0xff) != SQLITE_CORRUPT && (rc & 0xff) != SQLITE_NOTADB) return;
    if (s->damaged) return;
    s->damaged = true;
    if (s->p.read_only) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/" DAMAGE_MARK, s->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    char line[600];
    int n = snprintf(line, sizeof line, "SQLite reported: %s\n", s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    if (n > 0 && write(fd, line, (size_t)n) < 0) { /* the file's existence is the mark */ }
    close(fd);
}

bool rp_store_db_full(const rp_store *s) { return s->db && (sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_FULL; }

rp_status rp_store_sql_err(rp_store *s, const char *what) {
    if (s->db) rp_store_note_damage(s, sqlite3_extended_errcode(s->db));
    if (rp_store_db_full(s)) return rp_errorf(RP_ERR_IO, "store: disk full in '%s' (%s: %s)", s->dir, what, sqlite3_errmsg(s->db));
    return rp_errorf(RP_ERR_IO, "store: %s: %s", what, s->db ? sqlite3_errmsg(s->db) : "no database");
}

rp_status rp_store_exec(rp_store *s, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        rp_store_note_damage(s, rc);
        rp_status st = rp_errorf(RP_ERR_IO, "store: %s'%.80s': %s", rp_store_db_full(s) ? "disk full: " : "", sql,
                                 msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return st;
    }
    return RP_OK;
}

static const char *stmt_sql(int which) {
    switch (which) {
    case S_EDGE: return "SELECT %s FROM chunks WHERE model = ?1 AND parent = ?2 AND chain = ?3 AND corrupt = 0";
    case S_HASH: return "SELECT %s FROM chunks WHERE model = ?1 AND hash = ?2 AND corrupt = 0";
    case S_KIDS: return "SELECT %s FROM chunks WHERE model = ?1 AND parent = ?2 AND corrupt = 0";
    /* a parent's children in the order of their heads (index chunks_kids), either side of a query's head */
    case S_KIDS_GE:
        return "SELECT %s FROM chunks WHERE model = ?1 AND parent = ?2 AND substr(tokens, 1, 64) >= ?3 AND corrupt = 0 "
               "ORDER BY substr(tokens, 1, 64) LIMIT ?4";
    case S_KIDS_LT:
        return "SELECT %s FROM chunks WHERE model = ?1 AND parent = ?2 AND substr(tokens, 1, 64) < ?3 AND corrupt = 0 "
               "ORDER BY substr(tokens, 1, 64) DESC LIMIT ?4";
    case S_KIDS_EQ:
        return "SELECT %s FROM chunks WHERE model = ?1 AND parent = ?2 AND substr(tokens, 1, 64) = ?3 AND corrupt = 0 "
               "LIMIT ?4";
    case S_GET: return "SELECT %s FROM chunks WHERE id = ?1";
    /* sub-chunk search: the (kw, chunk) primary key answers the first alone */
    /* a keyword's most recent chunks only: a common one (a phrase in every prompt) would otherwise make every
     * search read a posting per stored chunk; the newest carry the likeliest matches (edited documents) */
    case S_KW_CHUNKS: return "SELECT chunk FROM keywords WHERE kw = ?1 ORDER BY chunk DESC LIMIT " RP_KW_POSTINGS_SQL;
    case S_CAND_OK: return "SELECT 1 FROM chunks WHERE id = ?1 AND model = ?2 AND corrupt = 0";
    case S_BLOB: return "SELECT data FROM payloads WHERE id = ?1";
    case S_INS_CHUNK:
        return "INSERT OR REPLACE INTO chunks(id, model, hash, chain, parent, n_tokens, pos0, exact, kv_type, n_layer, "
               "row_bytes, kv_bytes, stored_bytes, loc, codec, checksum, recompute_ms, heat, last_used, hits, created, "
               "used_at, corrupt, tokens, layers) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
               "?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, 0, ?23, ?24)";
    case S_INS_PAYLOAD: return "INSERT OR REPLACE INTO payloads(id, data) VALUES(?1, ?2)";
    case S_DEL_PAYLOAD: return "DELETE FROM payloads WHERE id = ?1";
    case S_INS_KW: return "INSERT OR IGNORE INTO keywords(kw, chunk) VALUES(?1, ?2)";
    case S_DEL_KW: return "DELETE FROM keywords WHERE chunk = ?1";
    case S_OLD: return "SELECT loc, checksum, model FROM chunks WHERE id = ?1";
    case S_TOUCH: return "UPDATE chunks SET heat = ?2, last_used = ?3, hits = ?4, used_at = ?5 WHERE id = ?1";
    case S_META_SET: return "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)";
    case S_DEL_CHUNK: return "DELETE FROM chunks WHERE id = ?1";
    case S_DEL_VEC: return "DELETE FROM vectors WHERE chunk = ?1";
    case S_MARK_BAD: return "UPDATE chunks SET corrupt = 1 WHERE id = ?1";
    /* the term index (schema 3) */
    case S_INS_TERM: return "INSERT OR REPLACE INTO terms(term, chunk, tf) VALUES(?1, ?2, ?3)";
    case S_DF_INC:
        return "INSERT INTO term_df(model, term, df) VALUES(?1, ?2, 1) ON CONFLICT(model, term) DO UPDATE SET df = df + 1";
    case S_DF_DEC: return "UPDATE term_df SET df = df - 1 WHERE model = ?2 AND term IN (SELECT term FROM terms WHERE chunk = ?1)";
    case S_DF_GC:
        return "DELETE FROM term_df WHERE model = ?2 AND df <= 0 AND term IN (SELECT term FROM terms WHERE chunk = ?1)";
    case S_DEL_TERMS: return "DELETE FROM terms WHERE chunk = ?1";
    case S_DF_GET: return "SELECT df FROM term_df WHERE model = ?1 AND term = ?2";
    case S_TERM_CHUNKS: return "SELECT chunk FROM terms WHERE term = ?1 ORDER BY chunk DESC LIMIT " RP_TERM_POSTINGS_SQL;
    case S_INS_VEC: return "INSERT OR REPLACE INTO vectors(chunk, dim, v, src) VALUES(?1, ?2, ?3, ?4)";
    }
    return NULL;
}

/* Prepared once per handle and kept (reset after each use). */
rp_status rp_store_stmt(rp_store *s, int which, sqlite3_stmt **out) {
    if (!s->st[which]) {
        char sql[1024];
        snprintf(sql, sizeof sql, stmt_sql(which), rp_store_cols);
        if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[which], NULL) != SQLITE_OK)
            return rp_store_sql_err(s, "prepare");
    }
    *out = s->st[which];
    sqlite3_reset(*out);
    sqlite3_clear_bindings(*out);
    return RP_OK;
}

/* ---- locality function for SQL ---- */

/* rp_locality(heat, last_used, clock, half_life) = heat * 2^-((clock - last_used) / half_life) */
static void sql_locality(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    double heat = sqlite3_value_double(argv[0]);
    double last = (double)(uint64_t)sqlite3_value_int64(argv[1]);
    double clock = (double)(uint64_t)sqlite3_value_int64(argv[2]);
    double hl = sqlite3_value_double(argv[3]);
    double age = clock > last ? clock - last : 0;
    sqlite3_result_double(ctx, heat * exp2(-age / (hl > 0 ? hl : 1)));
}

/* ---- access control ----
 *
 * Everything in a store directory must be owned by us and not group/world-writable: another local user who
 * can write there could plant KV (or a WAL) that we would serve, and one who owns it can read the token ids.
 * Such a directory or file is refused, never repaired: what was planted would stay. Read and search
 * permission for others is tightened instead (directories 0700, files 0600) by a writer: once the directory
 * is 0700 nobody else reaches the files, and a refusal would not un-read what was exposed. Payload files are
 * checked when they are read (a payload file that is not ours is a corrupt chunk, never used). */

#define FORBIDDEN_MODE ((mode_t)(S_IWGRP | S_IWOTH))
#define PERM_FIX \
    "another local user could have planted KV or read token ids there: check what is in it and fix its owner " \
    "and mode (the store makes its directory 0700 and its files 0600), or use a new --cache-dir"

/* An existing directory or file of the store: ours and not writable by others (see above). */
rp_status rp_store_check_stat(const char *path, const struct stat *sb) {
    return rp_fsperm_check(S_ISDIR(sb->st_mode) ? "store: directory" : "store: file", path, sb, FORBIDDEN_MODE,
                           PERM_FIX);
}

/* A store file that may not exist yet: when it does, a regular file (no symlink), checked, and with `tighten`
 * made 0600. */
static rp_status check_file(const char *path, bool tighten) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return RP_OK;
        return rp_errorf(RP_ERR_IO, "store: cannot stat '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) return rp_errorf(RP_ERR_IO, "store: '%s' is not a regular file: refusing it", path);
    RP_TRY(rp_store_check_stat(path, &sb));
    if (tighten && (sb.st_mode & 0077) && chmod(path, 0600) != 0)
        return rp_errorf(RP_ERR_IO, "store: cannot chmod 600 '%s': %s", path, strerror(errno));
    return RP_OK;
}

/* A store directory: created 0700 when missing (with `create`), checked, and with `create` tightened to 0700. */
static rp_status check_dir(const char *path, bool create) {
    if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
        return rp_errorf(RP_ERR_IO, "store: cannot create directory '%s': %s", path, strerror(errno));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (!create && errno == ENOENT) return RP_OK;
        return rp_errorf(RP_ERR_IO, "store: cannot stat '%s': %s", path, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode)) return rp_errorf(RP_ERR_IO, "store: '%s' is not a directory", path);
    RP_TRY(rp_store_check_stat(path, &sb));
    if (create && (sb.st_mode & 0777) != 0700 && chmod(path, 0700) != 0)
        return rp_errorf(RP_ERR_IO, "store: cannot chmod 700 '%s': %s", path, strerror(errno));
    return RP_OK;
}

rp_status rp_store_ensure_dir(const char *path) { return check_dir(path, true); }

/* ---- open / close ---- */

rp_store_params rp_store_default_params(void) {
    rp_store_params p = {
        .payload = RP_PAYLOAD_AUTO,
        .inline_max = (size_t)16 << 10,
        .zstd_level = 0,
        .naive = false,
        .sync_full = false,
        .fsync_files = false,
        .read_only = false,
        .busy_timeout_ms = 5000,
    };
    return p;
}

static rp_status open_conn(rp_store *s, const char *db_path) {
    int flags = s->p.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    flags |= SQLITE_OPEN_NOMUTEX;   /* one thread per connection (see store.h) */
    if (sqlite3_open_v2(db_path, &s->db, flags, NULL) != SQLITE_OK) {
        rp_status st = rp_errorf(RP_ERR_IO, "store: cannot open '%s': %s", db_path,
                                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
        sqlite3_close(s->db);
        s->db = NULL;
        return st;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, s->p.busy_timeout_ms > 0 ? s->p.busy_timeout_ms : 5000);
    sqlite3_create_function(s->db, "rp_locality", 4, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_locality, NULL,
                            NULL);
    RP_TRY(rp_store_exec(s, s->p.sync_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
    RP_TRY(rp_store_exec(s, "PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY"));
    RP_TRY(rp_store_set_cache_kib(s, RP_STORE_CACHE_KIB));
    return RP_OK;
}

rp_status rp_store_meta_get(rp_store *s, const char *key, int64_t *v, bool *found) {
    sqlite3_stmt *q = NULL;
    *found = false;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?1", -1, &q, NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "read meta");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(q, 0);
        *found = true;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "read meta");
}

rp_status rp_store_meta_set(rp_store *s, const char *key, int64_t v) {
    sqlite3_stmt *q;
    RP_TRY(rp_store_stmt(s, S_META_SET, &q));
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, v);
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : rp_store_sql_err(s, "write meta");
}

/* Runs SQL whose failure is not the error to report (a ROLLBACK after the real failure). */
void rp_store_exec_quiet(rp_store *s, const char *sql) { sqlite3_exec(s->db, sql, NULL, NULL, NULL); }

static rp_status secret_load(rp_store *s) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT key FROM secret WHERE id = 1", -1, &q, NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "read the checksum secret");
    int rc = sqlite3_step(q);
    rp_status st = RP_OK;
    if (rc == SQLITE_ROW && sqlite3_column_bytes(q, 0) == SECRET_BYTES)
        memcpy(s->secret, sqlite3_column_blob(q, 0), SECRET_BYTES);
    else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        st = rp_errorf(RP_ERR_FORMAT,
                       "store: '%s' has no valid checksum secret: none of its chunks can be verified; it is a cache: "
                       "delete the directory", s->dir);
    else
        st = rp_store_sql_err(s, "read the checksum secret");
    sqlite3_finalize(q);
    return st;
}

/* A new store, or one of schema 1 (unkeyed checksums): a fresh random secret, the current schema. A schema-1 store's
 * chunks are dropped first: nothing tells a row its owner wrote from one planted without a key, and a cache
 * may lose entries (they are recomputed). Their payload files go after the commit. */
static rp_status make_keyed(rp_store *s) {
    uint8_t key[SECRET_BYTES];
    for (size_t got = 0; got < sizeof key;) {
        ssize_t r = getrandom(key + got, sizeof key - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return rp_errorf(RP_ERR_IO, "store: getrandom for the checksum secret failed: %s", strerror(errno));
        got += (size_t)r;
    }
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q = NULL;
    int64_t n_old = 0;
    rp_status st = RP_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM chunks", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n_old = sqlite3_column_int64(q, 0);
    else
        st = rp_store_sql_err(s, "count chunks");
    sqlite3_finalize(q);
    q = NULL;
    if (st == RP_OK && n_old > 0)
        st = rp_store_exec(s, "DELETE FROM chunks; DELETE FROM payloads; DELETE FROM keywords; DELETE FROM vectors; "
                     "DELETE FROM coaccess; DELETE FROM terms; DELETE FROM term_df;");
    if (st == RP_OK && sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO secret(id, key) VALUES(1, ?1)", -1, &q, NULL) != SQLITE_OK)
        st = rp_store_sql_err(s, "write the checksum secret");
    if (st == RP_OK) {
        sqlite3_bind_blob(q, 1, key, (int)sizeof key, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) st = rp_store_sql_err(s, "write the checksum secret");
    }
    sqlite3_finalize(q);
    if (st == RP_OK) st = rp_store_meta_set(s, "schema", SCHEMA_VERSION);
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) {
        if (!sqlite3_get_autocommit(s->db)) rp_store_exec_quiet(s, "ROLLBACK");
        return st;
    }
    s->dropped_unkeyed = (uint64_t)n_old;
    uint64_t removed = 0;
    if (n_old > 0) {
        (void)rp_store_remove_orphan_files(s, &removed);   /* files of rows that are gone; compact retries */
        const size_t l = strlen(s->notice);
        snprintf(s->notice + l, sizeof s->notice - l,
                 "%s'%.200s' was in the unkeyed format of older builds: its %lld chunks were dropped (recomputed as "
                 "needed)", l ? "; " : "", s->dir, (long long)n_old);
    }
    return RP_OK;
}

rp_status rp_store_meta_add(rp_store *s, const char *key, uint64_t d) {
    int64_t v = 0;
    bool found = false;
    RP_TRY(rp_store_meta_get(s, key, &v, &found));
    return rp_store_meta_set(s, key, i64((uint64_t)v + d));
}

/* Schema 2 -> 3 (and the vectors table of a schema-1 store before make_keyed): the term tables exist already
 * (create_schema makes them); vectors get their src column (0: the caller's, which every schema-2 vector
 * was), and a schema-2 store is marked 3 in the same transaction. Its chunks stay, with no terms: they are
 * not term-indexed (N counts only indexed chunks); chunks written from then on are. */
static rp_status migrate_terms(rp_store *s, int64_t from) {
    RP_TRY(rp_store_exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q = NULL;
    int64_t has_src = -1, n_chunks = 0;
    rp_status st = RP_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM pragma_table_info('vectors') WHERE name = 'src'", -1, &q,
                           NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        has_src = sqlite3_column_int64(q, 0);
    else
        st = rp_store_sql_err(s, "read the vectors table's columns");
    sqlite3_finalize(q);
    q = NULL;
    if (st == RP_OK && has_src == 0) st = rp_store_exec(s, "ALTER TABLE vectors ADD COLUMN src INTEGER NOT NULL DEFAULT 0");
    if (st == RP_OK && from == SCHEMA_NO_TERMS) {
        if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM chunks", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
            n_chunks = sqlite3_column_int64(q, 0);
        else
            st = rp_store_sql_err(s, "count chunks");
        sqlite3_finalize(q);
        if (st == RP_OK) st = rp_store_meta_set(s, "schema", SCHEMA_VERSION);
    }
    if (st == RP_OK) st = rp_store_exec(s, "COMMIT");
    if (st != RP_OK) {
        if (!sqlite3_get_autocommit(s->db)) rp_store_exec_quiet(s, "ROLLBACK");
        return st;
    }
    if (from == SCHEMA_NO_TERMS) {
        const size_t l = strlen(s->notice);
        snprintf(s->notice + l, sizeof s->notice - l,
                 "%s'%.200s' was upgraded from schema %d to %d (extracted-term index, vector sources); its %lld "
                 "chunks were kept (without terms: chunks written from now on are indexed)",
                 l ? "; " : "", s->dir, SCHEMA_NO_TERMS, SCHEMA_VERSION, (long long)n_chunks);
    }
    return RP_OK;
}

static rp_status create_schema(rp_store *s) {
    /* auto_vacuum must be set before the first table exists; harmless afterwards */
    RP_TRY(rp_store_exec(s, "PRAGMA auto_vacuum=INCREMENTAL"));
    char *mode = NULL;
    if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL", NULL, NULL, &mode) != SQLITE_OK) {
        sqlite3_free(mode);
        return rp_store_sql_err(s, "enable WAL");
    }
    RP_TRY(rp_store_exec(s, "PRAGMA journal_size_limit=1048576"));
    RP_TRY(rp_store_exec(s,
                "BEGIN IMMEDIATE;"
                "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER);"
                "CREATE TABLE IF NOT EXISTS models(id INTEGER PRIMARY KEY, salt INTEGER NOT NULL UNIQUE, "
                "  kv_type INTEGER NOT NULL, n_layer INTEGER NOT NULL, row_bytes INTEGER NOT NULL, name TEXT, created REAL);"
                "CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, model INTEGER NOT NULL, hash INTEGER NOT NULL, "
                "  chain INTEGER NOT NULL, parent INTEGER NOT NULL, n_tokens INTEGER NOT NULL, pos0 INTEGER NOT NULL, "
                "  exact INTEGER NOT NULL, kv_type INTEGER NOT NULL, n_layer INTEGER NOT NULL, row_bytes INTEGER NOT NULL, "
                "  kv_bytes INTEGER NOT NULL, stored_bytes INTEGER NOT NULL, loc INTEGER NOT NULL, codec INTEGER NOT NULL, "
                "  checksum INTEGER NOT NULL, recompute_ms REAL NOT NULL, heat REAL NOT NULL, last_used INTEGER NOT NULL, "
                "  hits INTEGER NOT NULL, created REAL, used_at REAL, corrupt INTEGER NOT NULL DEFAULT 0, "
                "  tokens BLOB NOT NULL, layers BLOB NOT NULL);"
                "CREATE TABLE IF NOT EXISTS payloads(id INTEGER PRIMARY KEY, data BLOB NOT NULL);"
                "CREATE TABLE IF NOT EXISTS keywords(kw INTEGER NOT NULL, chunk INTEGER NOT NULL, PRIMARY KEY(kw, chunk)) "
                "  WITHOUT ROWID;"
                "CREATE INDEX IF NOT EXISTS keywords_chunk ON keywords(chunk);"
                "CREATE TABLE IF NOT EXISTS vectors(chunk INTEGER PRIMARY KEY, dim INTEGER NOT NULL, v BLOB NOT NULL, "
                "  src INTEGER NOT NULL DEFAULT 0);"
                "CREATE TABLE IF NOT EXISTS terms(term INTEGER NOT NULL, chunk INTEGER NOT NULL, tf INTEGER NOT NULL, "
                "  PRIMARY KEY(term, chunk)) WITHOUT ROWID;"
                "CREATE INDEX IF NOT EXISTS terms_chunk ON terms(chunk);"
                "CREATE TABLE IF NOT EXISTS term_df(model INTEGER NOT NULL, term INTEGER NOT NULL, df INTEGER NOT NULL, "
                "  PRIMARY KEY(model, term)) WITHOUT ROWID;"
                "CREATE TABLE IF NOT EXISTS coaccess(model INTEGER NOT NULL, a INTEGER NOT NULL, b INTEGER NOT NULL, "
                "  n INTEGER NOT NULL, PRIMARY KEY(model, a, b)) WITHOUT ROWID;"
                "CREATE TABLE IF NOT EXISTS secret(id INTEGER PRIMARY KEY CHECK (id = 1), key BLOB NOT NULL);"
                "COMMIT;"));
    if (s->p.naive)   /* ablation: one plain table, every lookup a scan */
        RP_TRY(rp_store_exec(s, "DROP INDEX IF EXISTS chunks_hash; DROP INDEX IF EXISTS chunks_tree;"));
    else
        RP_TRY(rp_store_exec(s, "CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(model, hash);"
                       "CREATE INDEX IF NOT EXISTS chunks_tree ON chunks(model, parent, chain);"
                       /* children by the bytes of their first 16 tokens: partial matches (rp_store_best_child) */
                       "CREATE INDEX IF NOT EXISTS chunks_kids ON chunks(model, parent, substr(tokens, 1, 64));"));
    int64_t v = 0;
    bool found = false;
    RP_TRY(rp_store_meta_get(s, "schema", &v, &found));
    if (found && v != SCHEMA_VERSION && v != SCHEMA_NO_TERMS && v != SCHEMA_UNKEYED)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "store: '%s' has schema version %lld, this build reads %d (and upgrades %d and %d): it was "
                         "written by a newer build; use that build, or another --cache-dir", s->dir, (long long)v,
                         SCHEMA_VERSION, SCHEMA_NO_TERMS, SCHEMA_UNKEYED);
    if (found && (v == SCHEMA_NO_TERMS || v == SCHEMA_UNKEYED)) RP_TRY(migrate_terms(s, v));
    if (!found || v == SCHEMA_UNKEYED) RP_TRY(make_keyed(s));
    s->schema = SCHEMA_VERSION;
    return secret_load(s);
}

static rp_status take_lock(rp_store *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", s->dir);
    RP_TRY(check_file(path, true));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return rp_errorf(RP_ERR_IO, "store: cannot open '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = 0;
        close(fd);
        return rp_errorf(RP_ERR_IO, "store: '%s' is in use by another process (pid %s)", s->dir, pid[0] ? pid : "?");
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) < 0) { /* informational only */ }
    s->lock_fd = fd;
    s->owns_lock = true;
    return RP_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

/* A writer opening a store whose database an earlier process found damaged
 * (DIR/kv.db.damaged): the database, its WAL and the payload files go to
 * DIR/damaged/ (replacing what an earlier set-aside left there) and the store
 * starts empty. A KV store is derived data: recomputing beats trusting a
 * database SQLite called corrupt, and keeping the old files lets the user
 * look at them. Called with the lock held, before SQLite opens the file. */
static rp_status set_aside_damaged(rp_store *s) {
    char mark[4096], aside[4096], from[4096], to[8192];   /* dir is at most 3000 bytes (rp_store_open) */
    snprintf(mark, sizeof mark, "%s/" DAMAGE_MARK, s->dir);
    if (access(mark, F_OK) != 0) return RP_OK;
    snprintf(aside, sizeof aside, "%s/damaged", s->dir);
    if (access(aside, F_OK) == 0 && nftw(aside, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return rp_errorf(RP_ERR_IO, "store: cannot remove the earlier set-aside '%s': %s", aside, strerror(errno));
    if (mkdir(aside, 0700) != 0) return rp_errorf(RP_ERR_IO, "store: cannot create '%s': %s", aside, strerror(errno));
    static const char *const names[] = {"kv.db", "kv.db-wal", "kv.db-shm", "kv", DAMAGE_MARK};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", s->dir, names[i]);
        snprintf(to, sizeof to, "%s/%s", aside, names[i]);
        if (rename(from, to) != 0 && errno != ENOENT)
            return rp_errorf(RP_ERR_IO, "store: cannot move '%s' to '%s': %s", from, to, strerror(errno));
    }
    snprintf(s->notice, sizeof s->notice,
             "the database in '%.200s' was found damaged by an earlier run (SQLite reported corruption); it was moved "
             "to '%.200s/damaged' and the store starts empty", s->dir, s->dir);
    return RP_OK;
}

bool rp_store_damaged(const rp_store *s) { return s && s->damaged; }

void rp_store_set_skip(rp_store *s, bool (*skip)(void *user, uint64_t id), void *user) {
    s->skip = skip;
    s->skip_user = user;
}
const char *rp_store_notice(const rp_store *s) { return s ? s->notice : ""; }

rp_status rp_store_quick_check(rp_store *s, char *msg, size_t cap, bool *ok) {
    *ok = false;
    if (cap) msg[0] = 0;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "PRAGMA quick_check(1)", -1, &q, NULL) != SQLITE_OK) {
        *ok = false;
        snprintf(msg, cap, "%s", sqlite3_errmsg(s->db));
        rp_store_note_damage(s, sqlite3_extended_errcode(s->db));
        return RP_OK;
    }
    int rc = sqlite3_step(q);
    const char *r = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : sqlite3_errmsg(s->db);
    *ok = rc == SQLITE_ROW && r && !strcmp(r, "ok");
    if (!*ok) {
        snprintf(msg, cap, "%s", r ? r : "no answer");
        rp_store_note_damage(s, rc == SQLITE_ROW ? SQLITE_CORRUPT : sqlite3_extended_errcode(s->db));
    }
    sqlite3_finalize(q);
    char mark[4096];
    snprintf(mark, sizeof mark, "%s/" DAMAGE_MARK, s->dir);
    if (*ok && access(mark, F_OK) == 0) {
        *ok = false;
        snprintf(msg, cap, "an earlier run found it damaged (%s); the next writer sets it aside", mark);
    }
    return RP_OK;
}

static rp_status store_alloc(const char *dir, const rp_store_params *p, rp_store **out) {
    rp_store *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    s->p = p ? *p : rp_store_default_params();
    if (s->p.inline_max == 0 && s->p.payload == RP_PAYLOAD_AUTO) s->p.inline_max = (size_t)16 << 10;
    s->lock_fd = -1;
    s->dir = strdup(dir);
    s->zc = ZSTD_createCCtx();
    s->zd = ZSTD_createDCtx();
    if (!s->dir || !s->zc || !s->zd) {
        rp_store_close(s);
        return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    }
    *out = s;
    return RP_OK;
}

/* kv.db and its -wal / -shm, before SQLite reads any of them (a planted WAL would be replayed). */
static rp_status check_db_files(const char *dir, bool tighten) {
    static const char *sfx[] = {"", "-wal", "-shm"};
    char path[4096];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/kv.db%s", dir, sfx[i]);
        RP_TRY(check_file(path, tighten));
    }
    return RP_OK;
}

rp_status rp_store_open(const char *dir, const rp_store_params *p, rp_store **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "store: out is NULL");
    *out = NULL;
    if (!dir || !*dir) return rp_errorf(RP_ERR_INVALID_ARG, "store: no directory given");
    if (strlen(dir) > 3000) return rp_errorf(RP_ERR_INVALID_ARG, "store: directory path too long");
    rp_store *s = NULL;
    RP_TRY(store_alloc(dir, p, &s));
    char path[4096];
    snprintf(path, sizeof path, "%s/kv.db", dir);
    rp_status st = RP_OK;
    char kvdir[4096];
    snprintf(kvdir, sizeof kvdir, "%s/kv", dir);
    if (s->p.read_only) {
        struct stat sb;
        if (stat(path, &sb) != 0) st = rp_errorf(RP_ERR_NOT_FOUND, "store: no store in '%s' (%s missing)", dir, path);
        /* a reader checks and changes nothing */
        if (st == RP_OK) st = check_dir(dir, false);
        if (st == RP_OK) st = check_dir(kvdir, false);
        if (st == RP_OK) st = check_db_files(dir, false);
    } else {
        st = rp_store_ensure_dir(dir);
        if (st == RP_OK) st = rp_store_ensure_dir(kvdir);
        if (st == RP_OK) st = take_lock(s);
        if (st == RP_OK) st = set_aside_damaged(s);
        if (st == RP_OK) st = rp_store_ensure_dir(kvdir);   /* again: a set-aside took the old one */
        if (st == RP_OK) st = check_db_files(dir, true);
        if (st == RP_OK) {
            /* created 0600 before SQLite sees it: SQLite gives -wal / -shm the database file's mode */
            int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (fd < 0) st = rp_errorf(RP_ERR_IO, "store: cannot create '%s': %s", path, strerror(errno));
            else {
                fchmod(fd, 0600);
                close(fd);
            }
        }
    }
    if (st == RP_OK) st = open_conn(s, path);
    /* a reader meeting a hot rollback journal: the first writer died while switching the new database to WAL
     * (the only write that ever goes through a rollback journal here; the schema is committed after it), so
     * nothing was ever committed: an empty store, which a reader cannot roll back and must not call damaged */
    if (st != RP_OK && s->p.read_only && s->db && sqlite3_extended_errcode(s->db) == SQLITE_READONLY_ROLLBACK)
        st = rp_errorf(RP_ERR_NOT_FOUND,
                       "store: '%s' " RP_STORE_EMPTY_MSG " (kv.db's creation never committed: its first writer died "
                       "while making it)", dir);
    if (st == RP_OK && !s->p.read_only) st = create_schema(s);
    if (st == RP_OK && s->p.read_only) {
        /* a writer killed between creating kv.db and committing its schema
         * (one transaction) leaves a database without tables: an empty store,
         * told apart from a foreign or damaged file */
        sqlite3_stmt *q = NULL;
        int64_t n_tables = -1;
        if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            n_tables = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        if (n_tables == 0)
            st = rp_errorf(RP_ERR_NOT_FOUND, "store: '%s' " RP_STORE_EMPTY_MSG " (kv.db has no schema: its creation never committed)",
                           dir);
    }
    if (st == RP_OK && s->p.read_only) {
        int64_t v = 0;
        bool found = false;
        st = rp_store_meta_get(s, "schema", &v, &found);
        if (st == RP_OK && found && v == SCHEMA_UNKEYED)
            st = rp_errorf(RP_ERR_UNSUPPORTED,
                           "store: '%s' is in the format of older builds (schema 1, unkeyed checksums): its chunks "
                           "cannot be authenticated; open it once for writing (reprise run or serve --cache-dir, or "
                           "reprise cache clear) to upgrade it, which drops its chunks (they are recomputed)",
                           dir);
        else if (st == RP_OK && found && v > SCHEMA_VERSION)
            st = rp_errorf(RP_ERR_UNSUPPORTED,
                           "store: '%s' has schema version %lld, this build reads %d: it was written by a newer build",
                           dir, (long long)v, SCHEMA_VERSION);
        else if (st == RP_OK && (!found || (v != SCHEMA_VERSION && v != SCHEMA_NO_TERMS)))
            st = rp_errorf(RP_ERR_UNSUPPORTED, "store: '%s' has no schema version %d", dir, SCHEMA_VERSION);
        /* a schema-2 store is read as it is: no term index (a writer upgrades it) */
        if (st == RP_OK) s->schema = (int)v;
        if (st == RP_OK) st = secret_load(s);
    }
    if (st == RP_OK && !s->p.read_only) {
        static const char *sfx[] = {"-wal", "-shm"};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/kv.db%s", dir, sfx[i]);
            chmod(path, 0600);
        }
    }
    if (st != RP_OK) {
        rp_store_close(s);
        return st;
    }
    *out = s;
    return RP_OK;
}

rp_status rp_store_set_cache_kib(rp_store *s, int32_t kib) {
    if (!s || kib < 16) return rp_errorf(RP_ERR_INVALID_ARG, "store: cache of %d KiB (at least 16)", kib);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA cache_size=-%d", kib);
    return rp_store_exec(s, sql);
}

rp_status rp_store_clone(rp_store *src, rp_store **out) {
    if (!src || !out) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL argument to clone");
    *out = NULL;
    rp_store *s = NULL;
    RP_TRY(store_alloc(src->dir, &src->p, &s));
    char path[4096];
    snprintf(path, sizeof path, "%s/kv.db", src->dir);
    rp_status st = open_conn(s, path);
    if (st == RP_OK && !s->p.read_only) st = rp_store_exec(s, "PRAGMA journal_size_limit=1048576");
    if (st != RP_OK) {
        rp_store_close(s);
        return st;
    }
    s->model = src->model;
    s->salt = src->salt;
    s->kv_type = src->kv_type;
    s->n_layer = src->n_layer;
    s->row_bytes = src->row_bytes;
    s->schema = src->schema;
    memcpy(s->secret, src->secret, sizeof s->secret);
    *out = s;
    return RP_OK;
}

void rp_store_close(rp_store *s) {
    if (!s) return;
    if (s->db && !s->p.read_only && s->fail_pending > 0) {
        /* best effort: with the disk still full this fails too, and the count stays unrecorded */
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
            if (rp_store_meta_add(s, "write_failures", s->fail_pending) == RP_OK &&
                sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
                s->fail_pending = 0;
            if (!sqlite3_get_autocommit(s->db)) rp_store_exec_quiet(s, "ROLLBACK");
        }
    }
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(s->st[i]);
    if (s->db) {
        if (s->owns_lock) sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        sqlite3_close_v2(s->db);
    }
    if (s->lock_fd >= 0) close(s->lock_fd);   /* releases the flock */
    ZSTD_freeCCtx(s->zc);
    ZSTD_freeDCtx(s->zd);
    free(s->scratch);
    free(s->dir);
    free(s);
}

const char *rp_store_dir(const rp_store *s) { return s ? s->dir : NULL; }
uint64_t rp_store_dropped_unkeyed(const rp_store *s) { return s ? s->dropped_unkeyed : 0; }
bool rp_store_read_only(const rp_store *s) { return s && s->p.read_only; }

/* ---- models ---- */

rp_status rp_store_bind_model(rp_store *s, uint64_t salt, int32_t kv_type, int32_t n_layer, uint64_t row_bytes,
                              const char *name, bool create) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL store");
    if (n_layer <= 0 || row_bytes == 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "store: model geometry n_layer %d row_bytes %llu", n_layer,
                         (unsigned long long)row_bytes);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT id, kv_type, n_layer, row_bytes FROM models WHERE salt = ?1", -1, &q,
                           NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "read models");
    sqlite3_bind_int64(q, 1, i64(salt));
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        int32_t kt = sqlite3_column_int(q, 1), nl = sqlite3_column_int(q, 2);
        uint64_t rb = (uint64_t)sqlite3_column_int64(q, 3);
        sqlite3_finalize(q);
        if (kt != kv_type || nl != n_layer || rb != row_bytes)
            return rp_errorf(RP_ERR_FORMAT,
                             "store: model %016llx in '%s' has geometry (type %d, %d layers, row %llu B), expected "
                             "(type %d, %d layers, row %llu B); not used",
                             (unsigned long long)salt, s->dir, kt, nl, (unsigned long long)rb, kv_type, n_layer,
                             (unsigned long long)row_bytes);
        s->model = id;
    } else {
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) return rp_store_sql_err(s, "read models");
        if (!create || s->p.read_only)
            return rp_errorf(RP_ERR_NOT_FOUND, "store: no chunks for model %016llx in '%s'", (unsigned long long)salt,
                             s->dir);
        if (sqlite3_prepare_v2(s->db,
                               "INSERT INTO models(salt, kv_type, n_layer, row_bytes, name, created) "
                               "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                               -1, &q, NULL) != SQLITE_OK)
            return rp_store_sql_err(s, "add model");
        sqlite3_bind_int64(q, 1, i64(salt));
        sqlite3_bind_int(q, 2, kv_type);
        sqlite3_bind_int(q, 3, n_layer);
        sqlite3_bind_int64(q, 4, i64(row_bytes));
        sqlite3_bind_text(q, 5, name ? name : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(q, 6, rp_store_wall_now());
        rc = sqlite3_step(q);
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) return rp_store_sql_err(s, "add model");
        s->model = sqlite3_last_insert_rowid(s->db);
    }
    s->salt = salt;
    s->kv_type = kv_type;
    s->n_layer = n_layer;
    s->row_bytes = row_bytes;
    return RP_OK;
}

rp_status rp_store_bind_salt(rp_store *s, uint64_t salt) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL store");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT kv_type, n_layer, row_bytes FROM models WHERE salt = ?1", -1, &q, NULL) !=
        SQLITE_OK)
        return rp_store_sql_err(s, "read models");
    sqlite3_bind_int64(q, 1, i64(salt));
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) return rp_store_sql_err(s, "read models");
        return rp_errorf(RP_ERR_NOT_FOUND, "store: no chunks for model %016llx in '%s'", (unsigned long long)salt,
                         s->dir);
    }
    int32_t kt = sqlite3_column_int(q, 0), nl = sqlite3_column_int(q, 1);
    uint64_t rb = (uint64_t)sqlite3_column_int64(q, 2);
    sqlite3_finalize(q);
    return rp_store_bind_model(s, salt, kt, nl, rb, NULL, false);
}

rp_status rp_store_models(rp_store *s, rp_store_model **out, int32_t *n) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT m.id, m.salt, m.kv_type, m.n_layer, m.row_bytes, m.name, "
                           "(SELECT count(*) FROM chunks c WHERE c.model = m.id), "
                           "(SELECT coalesce(sum(stored_bytes), 0) FROM chunks c WHERE c.model = m.id) "
                           "FROM models m ORDER BY m.id",
                           -1, &q, NULL) != SQLITE_OK)
        return rp_store_sql_err(s, "list models");
    int32_t cap = 0;
    rp_status st = RP_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            rp_store_model *nv = realloc(*out, sizeof **out * (size_t)cap);
            if (!nv) {
                st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                break;
            }
            *out = nv;
        }
        rp_store_model *m = &(*out)[(*n)++];
        memset(m, 0, sizeof *m);
        m->id = sqlite3_column_int64(q, 0);
        m->salt = (uint64_t)sqlite3_column_int64(q, 1);
        m->kv_type = sqlite3_column_int(q, 2);
        m->n_layer = sqlite3_column_int(q, 3);
        m->row_bytes = (uint64_t)sqlite3_column_int64(q, 4);
        const unsigned char *nm = sqlite3_column_text(q, 5);
        snprintf(m->name, sizeof m->name, "%s", nm ? (const char *)nm : "");
        m->n_chunks = (uint64_t)sqlite3_column_int64(q, 6);
        m->bytes = (uint64_t)sqlite3_column_int64(q, 7);
    }
    if (st == RP_OK && rc != SQLITE_DONE) st = rp_store_sql_err(s, "list models");
    sqlite3_finalize(q);
    if (st != RP_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

rp_status rp_store_need_model(const rp_store *s) {
    if (!s || !s->model) return rp_errorf(RP_ERR_INVALID_ARG, "store: no model bound (rp_store_bind_model)");
    return RP_OK;
}
