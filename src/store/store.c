/* store.c — the flash tier: SQLite schema, model binding, checksummed chunk rows, BLOB/file payloads, eviction, verify. */
#define _GNU_SOURCE
#include "store/store.h"

#include <dirent.h>
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
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <zstd.h>

#include "core/error.h"
#include "core/fsperm.h"
#include "store/lcs.h"

/* Schema (version 2). uint64 values are stored as their int64 bit pattern.
 *
 *   meta(key TEXT PRIMARY KEY, value INTEGER)      schema, next_id, clock, write_failures
 *   secret(id = 1, key BLOB)                       the store's checksum key (SECRET_BYTES random bytes, made
 *                                                  with the store)
 *   models(id, salt UNIQUE, kv_type, n_layer, row_bytes, name, created)
 *   chunks(id INTEGER PRIMARY KEY, model, hash, chain, parent, n_tokens, pos0, exact, kv_type, n_layer,
 *          row_bytes, kv_bytes, stored_bytes, loc, codec, checksum, recompute_ms, heat, last_used, hits,
 *          created, used_at, corrupt, tokens BLOB, layers BLOB)
 *     index chunks_hash(model, hash)           content lookups
 *     index chunks_tree(model, parent, chain)  prefix-tree edges and children
 *   payloads(id INTEGER PRIMARY KEY, data BLOB)   BLOB payloads, apart from the metadata so scans of chunks
 *                                                 never touch payload pages
 *   keywords(kw, chunk) WITHOUT ROWID, PK(kw, chunk) + index on chunk: winnowed 3-gram keywords
 *   vectors(chunk INTEGER PRIMARY KEY, dim, v BLOB)
 *   coaccess(model, a, b, n) WITHOUT ROWID, PK(model, a, b)
 *
 * Layer table (chunks.layers): per layer { u64 offset, u64 stored_len, u64 xxh3 of the raw layer }, where a
 * layer is K then V of that layer ([2][n_tokens][row_bytes]) and stored_len < raw length means a zstd frame.
 * chunks.checksum = XXH3 of (id, model, hash, chain, parent, n_tokens, pos0, exact, kv_type, n_layer,
 * row_bytes, kv_bytes, stored_bytes, loc, codec) + tokens + layer table: a flipped bit anywhere in what
 * identifies or locates the KV is caught, and every layer's bytes are caught by its own checksum.
 *
 * Both checksums are keyed: XXH3 with the store's secret (XXH3_64bits_withSecret), so a row or payload copied
 * from another store, or written by someone who never read this store's secret, fails verification. This is
 * not a cryptographic MAC (XXH3 is not built to resist an adversary who sees many keyed digests); what keeps
 * other local users out is the access control on open (the directory and files must be ours and not
 * group/world-writable, see check_path); the key defeats planting KV without reading the secret, and KV copied
 * between stores. Schema 1 (older builds) had unkeyed checksums: a writer that opens such a store drops its
 * chunks (they cannot be authenticated, and a cache may lose entries) and upgrades it; a reader refuses it.
 *
 * Pragmas: WAL; synchronous=NORMAL by default — in WAL mode a commit is atomic and the database is never
 * corrupted by a crash or power loss under NORMAL; only the last transactions may roll back on power loss,
 * which loses cached chunks (a cache may lose entries) but never damages stored ones. FULL is available.
 * auto_vacuum=INCREMENTAL so eviction returns pages to the file system; the WAL is checkpointed automatically
 * (every 1000 pages) and truncated to journal_size_limit (1 MiB) when it restarts, so it adds at most a few MiB
 * plus one write batch to the flash footprint (counted in rp_store_disk_bytes; eviction ends with a truncating
 * checkpoint). Page cache: 2 MiB per connection. */

#define SCHEMA_VERSION 2
#define SCHEMA_UNKEYED 1          /* older builds: unkeyed checksums */
#define SECRET_BYTES 192          /* XXH3_SECRET_DEFAULT_SIZE */
#define LAYER_ENTRY 24
#define FILE_ROUND 4096ull
/* postings read per keyword by the sub-chunk search (S_KW_CHUNKS): bounds a search at RP_KW_POSTINGS per keyword
 * of the prompt, whatever the store holds */
#define RP_KW_POSTINGS_SQL "64"
#define MAX_TOKENS_PER_CHUNK (1 << 22)

enum {
    S_EDGE, S_HASH, S_KIDS, S_KIDS_GE, S_KIDS_LT, S_KIDS_EQ, S_GET, S_BLOB, S_INS_CHUNK, S_INS_PAYLOAD, S_DEL_PAYLOAD, S_INS_KW, S_DEL_KW,
    S_OLD, S_TOUCH, S_META_SET, S_DEL_CHUNK, S_DEL_VEC, S_MARK_BAD, S_KW_CHUNKS, S_CAND_OK, S_COUNT
};

struct rp_store {
    sqlite3 *db;
    char *dir;
    rp_store_params p;
    int lock_fd;              /* >= 0 on the handle that holds DIR/lock (not on clones) */
    bool owns_lock;
    int64_t model;            /* bound model row, 0 = unbound */
    uint64_t salt;
    int32_t kv_type, n_layer;
    uint64_t row_bytes;
    sqlite3_stmt *st[S_COUNT];
    uint64_t file_bytes;      /* sum of payload file sizes rounded to 4 KiB (valid when file_bytes_ok) */
    bool file_bytes_ok;
    uint8_t *scratch;         /* encode / decode buffer */
    size_t scratch_cap;
    ZSTD_CCtx *zc;
    ZSTD_DCtx *zd;
    uint64_t bad[32];         /* corrupt rows met by lookups on this handle (rp_store_take_bad) */
    int n_bad;
    bool damaged;             /* SQLite reported corruption on this handle (see note_damage) */
    bool (*skip)(void *user, uint64_t id);   /* rows lookups pass over (rp_store_set_skip) */
    void *skip_user;
    char notice[640];         /* what open did that the user should hear about ("" if nothing) */
    uint8_t secret[SECRET_BYTES];   /* the checksum key (table secret) */
    uint64_t dropped_unkeyed; /* chunks dropped when this open upgraded a schema-1 store */
    uint64_t fail_pending;    /* failed chunk writes not yet added to meta.write_failures */
};

static const char *k_cols =
    "id, model, hash, chain, parent, n_tokens, pos0, exact, kv_type, n_layer, row_bytes, kv_bytes, stored_bytes, "
    "loc, codec, checksum, recompute_ms, heat, last_used, hits, created, used_at, tokens, layers";

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define DAMAGE_MARK "kv.db.damaged"

/* SQLite answered `rc`: on corruption (SQLITE_CORRUPT / SQLITE_NOTADB) the
 * handle is marked damaged (the pool then stops writing to the store) and a
 * writer leaves DIR/kv.db.damaged behind, so that the next writer to open the
 * store sets the database aside instead of using it (set_aside_damaged). */
static void note_damage(rp_store *s, int rc) {
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

static bool db_full(const rp_store *s) { return s->db && (sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_FULL; }

static rp_status sql_err(rp_store *s, const char *what) {
    if (s->db) note_damage(s, sqlite3_extended_errcode(s->db));
    if (db_full(s)) return rp_errorf(RP_ERR_IO, "store: disk full in '%s' (%s: %s)", s->dir, what, sqlite3_errmsg(s->db));
    return rp_errorf(RP_ERR_IO, "store: %s: %s", what, s->db ? sqlite3_errmsg(s->db) : "no database");
}

static rp_status exec(rp_store *s, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        note_damage(s, rc);
        rp_status st = rp_errorf(RP_ERR_IO, "store: %s'%.80s': %s", db_full(s) ? "disk full: " : "", sql,
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
    case S_OLD: return "SELECT loc, checksum FROM chunks WHERE id = ?1";
    case S_TOUCH: return "UPDATE chunks SET heat = ?2, last_used = ?3, hits = ?4, used_at = ?5 WHERE id = ?1";
    case S_META_SET: return "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)";
    case S_DEL_CHUNK: return "DELETE FROM chunks WHERE id = ?1";
    case S_DEL_VEC: return "DELETE FROM vectors WHERE chunk = ?1";
    case S_MARK_BAD: return "UPDATE chunks SET corrupt = 1 WHERE id = ?1";
    }
    return NULL;
}

/* Prepared once per handle and kept (reset after each use). */
static rp_status stmt(rp_store *s, int which, sqlite3_stmt **out) {
    if (!s->st[which]) {
        char sql[1024];
        snprintf(sql, sizeof sql, stmt_sql(which), k_cols);
        if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->st[which], NULL) != SQLITE_OK)
            return sql_err(s, "prepare");
    }
    *out = s->st[which];
    sqlite3_reset(*out);
    sqlite3_clear_bindings(*out);
    return RP_OK;
}

static inline int64_t i64(uint64_t x) { return (int64_t)x; }

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

/* ---- paths ---- */

static void payload_path(const rp_store *s, uint64_t id, uint64_t checksum, char *buf, size_t cap, bool tmp) {
    snprintf(buf, cap, "%s/kv/%02x/%llu-%016llx.kv%s", s->dir, (unsigned)(id & 0xff), (unsigned long long)id,
             (unsigned long long)checksum, tmp ? ".tmp" : "");
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
static rp_status check_stat(const char *path, const struct stat *sb) {
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
    RP_TRY(check_stat(path, &sb));
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
    RP_TRY(check_stat(path, &sb));
    if (create && (sb.st_mode & 0777) != 0700 && chmod(path, 0700) != 0)
        return rp_errorf(RP_ERR_IO, "store: cannot chmod 700 '%s': %s", path, strerror(errno));
    return RP_OK;
}

static rp_status ensure_dir(const char *path) { return check_dir(path, true); }

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
    RP_TRY(exec(s, s->p.sync_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
    RP_TRY(exec(s, "PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY"));
    RP_TRY(rp_store_set_cache_kib(s, RP_STORE_CACHE_KIB));
    return RP_OK;
}

static rp_status meta_get(rp_store *s, const char *key, int64_t *v, bool *found) {
    sqlite3_stmt *q = NULL;
    *found = false;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?1", -1, &q, NULL) != SQLITE_OK)
        return sql_err(s, "read meta");
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(q, 0);
        *found = true;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? RP_OK : sql_err(s, "read meta");
}

static rp_status meta_set(rp_store *s, const char *key, int64_t v) {
    sqlite3_stmt *q;
    RP_TRY(stmt(s, S_META_SET, &q));
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, v);
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : sql_err(s, "write meta");
}

static rp_status remove_orphan_files(rp_store *s, uint64_t *removed);

/* Runs SQL whose failure is not the error to report (a ROLLBACK after the real failure). */
static void exec_quiet(rp_store *s, const char *sql) { sqlite3_exec(s->db, sql, NULL, NULL, NULL); }

static rp_status secret_load(rp_store *s) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT key FROM secret WHERE id = 1", -1, &q, NULL) != SQLITE_OK)
        return sql_err(s, "read the checksum secret");
    int rc = sqlite3_step(q);
    rp_status st = RP_OK;
    if (rc == SQLITE_ROW && sqlite3_column_bytes(q, 0) == SECRET_BYTES)
        memcpy(s->secret, sqlite3_column_blob(q, 0), SECRET_BYTES);
    else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        st = rp_errorf(RP_ERR_FORMAT,
                       "store: '%s' has no valid checksum secret: none of its chunks can be verified; it is a cache: "
                       "delete the directory", s->dir);
    else
        st = sql_err(s, "read the checksum secret");
    sqlite3_finalize(q);
    return st;
}

/* A new store, or one of schema 1 (unkeyed checksums): a fresh random secret, schema 2. A schema-1 store's
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
    RP_TRY(exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q = NULL;
    int64_t n_old = 0;
    rp_status st = RP_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM chunks", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n_old = sqlite3_column_int64(q, 0);
    else
        st = sql_err(s, "count chunks");
    sqlite3_finalize(q);
    q = NULL;
    if (st == RP_OK && n_old > 0)
        st = exec(s, "DELETE FROM chunks; DELETE FROM payloads; DELETE FROM keywords; DELETE FROM vectors; "
                     "DELETE FROM coaccess;");
    if (st == RP_OK && sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO secret(id, key) VALUES(1, ?1)", -1, &q, NULL) != SQLITE_OK)
        st = sql_err(s, "write the checksum secret");
    if (st == RP_OK) {
        sqlite3_bind_blob(q, 1, key, (int)sizeof key, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_err(s, "write the checksum secret");
    }
    sqlite3_finalize(q);
    if (st == RP_OK) st = meta_set(s, "schema", SCHEMA_VERSION);
    if (st == RP_OK) st = exec(s, "COMMIT");
    if (st != RP_OK) {
        if (!sqlite3_get_autocommit(s->db)) exec_quiet(s, "ROLLBACK");
        return st;
    }
    s->dropped_unkeyed = (uint64_t)n_old;
    uint64_t removed = 0;
    if (n_old > 0) {
        (void)remove_orphan_files(s, &removed);   /* files of rows that are gone; compact retries */
        const size_t l = strlen(s->notice);
        snprintf(s->notice + l, sizeof s->notice - l,
                 "%s'%.200s' was in the unkeyed format of older builds: its %lld chunks were dropped (recomputed as "
                 "needed)", l ? "; " : "", s->dir, (long long)n_old);
    }
    return RP_OK;
}

static rp_status meta_add(rp_store *s, const char *key, uint64_t d) {
    int64_t v = 0;
    bool found = false;
    RP_TRY(meta_get(s, key, &v, &found));
    return meta_set(s, key, i64((uint64_t)v + d));
}

static rp_status create_schema(rp_store *s) {
    /* auto_vacuum must be set before the first table exists; harmless afterwards */
    RP_TRY(exec(s, "PRAGMA auto_vacuum=INCREMENTAL"));
    char *mode = NULL;
    if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL", NULL, NULL, &mode) != SQLITE_OK) {
        sqlite3_free(mode);
        return sql_err(s, "enable WAL");
    }
    RP_TRY(exec(s, "PRAGMA journal_size_limit=1048576"));
    RP_TRY(exec(s,
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
                "CREATE TABLE IF NOT EXISTS vectors(chunk INTEGER PRIMARY KEY, dim INTEGER NOT NULL, v BLOB NOT NULL);"
                "CREATE TABLE IF NOT EXISTS coaccess(model INTEGER NOT NULL, a INTEGER NOT NULL, b INTEGER NOT NULL, "
                "  n INTEGER NOT NULL, PRIMARY KEY(model, a, b)) WITHOUT ROWID;"
                "CREATE TABLE IF NOT EXISTS secret(id INTEGER PRIMARY KEY CHECK (id = 1), key BLOB NOT NULL);"
                "COMMIT;"));
    if (s->p.naive)   /* ablation: one plain table, every lookup a scan */
        RP_TRY(exec(s, "DROP INDEX IF EXISTS chunks_hash; DROP INDEX IF EXISTS chunks_tree;"));
    else
        RP_TRY(exec(s, "CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(model, hash);"
                       "CREATE INDEX IF NOT EXISTS chunks_tree ON chunks(model, parent, chain);"
                       /* children by the bytes of their first 16 tokens: partial matches (rp_store_best_child) */
                       "CREATE INDEX IF NOT EXISTS chunks_kids ON chunks(model, parent, substr(tokens, 1, 64));"));
    int64_t v = 0;
    bool found = false;
    RP_TRY(meta_get(s, "schema", &v, &found));
    if (found && v != SCHEMA_VERSION && v != SCHEMA_UNKEYED)
        return rp_errorf(RP_ERR_UNSUPPORTED, "store: '%s' has schema version %lld, this build reads %d", s->dir,
                         (long long)v, SCHEMA_VERSION);
    if (!found || v == SCHEMA_UNKEYED) RP_TRY(make_keyed(s));
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
        note_damage(s, sqlite3_extended_errcode(s->db));
        return RP_OK;
    }
    int rc = sqlite3_step(q);
    const char *r = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : sqlite3_errmsg(s->db);
    *ok = rc == SQLITE_ROW && r && !strcmp(r, "ok");
    if (!*ok) {
        snprintf(msg, cap, "%s", r ? r : "no answer");
        note_damage(s, rc == SQLITE_ROW ? SQLITE_CORRUPT : sqlite3_extended_errcode(s->db));
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
        st = ensure_dir(dir);
        if (st == RP_OK) st = ensure_dir(kvdir);
        if (st == RP_OK) st = take_lock(s);
        if (st == RP_OK) st = set_aside_damaged(s);
        if (st == RP_OK) st = ensure_dir(kvdir);   /* again: a set-aside took the old one */
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
        st = meta_get(s, "schema", &v, &found);
        if (st == RP_OK && found && v == SCHEMA_UNKEYED)
            st = rp_errorf(RP_ERR_UNSUPPORTED,
                           "store: '%s' is in the format of older builds (schema 1, unkeyed checksums): its chunks "
                           "cannot be authenticated; open it once for writing (reprise run or serve --cache-dir, or "
                           "reprise cache clear) to upgrade it, which drops its chunks (they are recomputed)",
                           dir);
        else if (st == RP_OK && (!found || v != SCHEMA_VERSION))
            st = rp_errorf(RP_ERR_UNSUPPORTED, "store: '%s' has no schema version %d", dir, SCHEMA_VERSION);
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
    return exec(s, sql);
}

rp_status rp_store_clone(rp_store *src, rp_store **out) {
    if (!src || !out) return rp_errorf(RP_ERR_INVALID_ARG, "store: NULL argument to clone");
    *out = NULL;
    rp_store *s = NULL;
    RP_TRY(store_alloc(src->dir, &src->p, &s));
    char path[4096];
    snprintf(path, sizeof path, "%s/kv.db", src->dir);
    rp_status st = open_conn(s, path);
    if (st == RP_OK && !s->p.read_only) st = exec(s, "PRAGMA journal_size_limit=1048576");
    if (st != RP_OK) {
        rp_store_close(s);
        return st;
    }
    s->model = src->model;
    s->salt = src->salt;
    s->kv_type = src->kv_type;
    s->n_layer = src->n_layer;
    s->row_bytes = src->row_bytes;
    memcpy(s->secret, src->secret, sizeof s->secret);
    *out = s;
    return RP_OK;
}

void rp_store_close(rp_store *s) {
    if (!s) return;
    if (s->db && !s->p.read_only && s->fail_pending > 0) {
        /* best effort: with the disk still full this fails too, and the count stays unrecorded */
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
            if (meta_add(s, "write_failures", s->fail_pending) == RP_OK &&
                sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
                s->fail_pending = 0;
            if (!sqlite3_get_autocommit(s->db)) exec_quiet(s, "ROLLBACK");
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
        return sql_err(s, "read models");
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
        if (rc != SQLITE_DONE) return sql_err(s, "read models");
        if (!create || s->p.read_only)
            return rp_errorf(RP_ERR_NOT_FOUND, "store: no chunks for model %016llx in '%s'", (unsigned long long)salt,
                             s->dir);
        if (sqlite3_prepare_v2(s->db,
                               "INSERT INTO models(salt, kv_type, n_layer, row_bytes, name, created) "
                               "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                               -1, &q, NULL) != SQLITE_OK)
            return sql_err(s, "add model");
        sqlite3_bind_int64(q, 1, i64(salt));
        sqlite3_bind_int(q, 2, kv_type);
        sqlite3_bind_int(q, 3, n_layer);
        sqlite3_bind_int64(q, 4, i64(row_bytes));
        sqlite3_bind_text(q, 5, name ? name : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(q, 6, wall_now());
        rc = sqlite3_step(q);
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) return sql_err(s, "add model");
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
        return sql_err(s, "read models");
    sqlite3_bind_int64(q, 1, i64(salt));
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) return sql_err(s, "read models");
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
        return sql_err(s, "list models");
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
    if (st == RP_OK && rc != SQLITE_DONE) st = sql_err(s, "list models");
    sqlite3_finalize(q);
    if (st != RP_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

/* ---- rows ---- */

void rp_store_chunk_clear(rp_store_chunk *c) {
    if (!c) return;
    free(c->tokens);
    free(c->layers);
    c->tokens = NULL;
    c->layers = NULL;
    c->layers_bytes = 0;
}

/* A layer's checksum: XXH3 keyed with the store's secret (see the schema comment). */
static inline uint64_t layer_sum(const rp_store *s, const uint8_t *p, uint64_t n) {
    return XXH3_64bits_withSecret(p, (size_t)n, s->secret, sizeof s->secret);
}

/* The metadata checksum (see the schema comment), keyed like the layers'. */
static uint64_t meta_checksum(const rp_store *s, const rp_store_chunk *c, const rp_token *toks, const uint8_t *layers,
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

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Reads the current row of a SELECT of k_cols. With blobs, tokens and layers
 * are copied (malloc'd). */
static rp_status row_read(rp_store *s, sqlite3_stmt *q, rp_store_chunk *c, bool blobs) {
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
static rp_status row_check(const rp_store *s, const rp_store_chunk *c) {
    if (meta_checksum(s, c, c->tokens, c->layers, c->layers_bytes) != c->checksum)
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
 * row_check, takes the most recently used. Rows failing row_check are
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
        rp_status rs = row_read(s, q, &c, true);
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
        if (row_check(s, &c) != RP_OK) {
            note_bad(s, c.id);
            rp_store_chunk_clear(&c);
            continue;
        }
        if (*found) rp_store_chunk_clear(out);
        *out = c;
        *found = true;
    }
    if (st == RP_OK && rc != SQLITE_DONE) st = sql_err(s, "lookup");
    sqlite3_reset(q);
    if (st != RP_OK && *found) {
        rp_store_chunk_clear(out);
        *found = false;
    }
    return st;
}

static rp_status need_model(const rp_store *s) {
    if (!s || !s->model) return rp_errorf(RP_ERR_INVALID_ARG, "store: no model bound (rp_store_bind_model)");
    return RP_OK;
}

rp_status rp_store_find_edge(rp_store *s, uint64_t parent_id, uint64_t chain, const rp_token *toks, int32_t n,
                             rp_store_chunk *out, bool *found) {
    *found = false;
    RP_TRY(need_model(s));
    if (!toks || n <= 0) return RP_OK;
    sqlite3_stmt *q;
    RP_TRY(stmt(s, S_EDGE, &q));
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(parent_id));
    sqlite3_bind_int64(q, 3, i64(chain));
    return lookup_rows(s, q, toks, n, out, found);
}

rp_status rp_store_find_hash(rp_store *s, uint64_t hash, const rp_token *toks, int32_t n, rp_store_chunk *out,
                             bool *found) {
    *found = false;
    RP_TRY(need_model(s));
    if (!toks || n <= 0) return RP_OK;
    sqlite3_stmt *q;
    RP_TRY(stmt(s, S_HASH, &q));
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
        rp_status rs = row_read(s, q, &c, true);
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        if (rs != RP_OK || row_check(s, &c) != RP_OK) {
            note_bad(s, c.id ? c.id : (uint64_t)sqlite3_column_int64(q, 0));
            rp_store_chunk_clear(&c);
            continue;
        }
        if (*found) rp_store_chunk_clear(out);
        *out = c;
        *n_common = k;
        *found = true;
    }
    if (st == RP_OK && rc != SQLITE_DONE) st = sql_err(s, "children lookup");
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
    RP_TRY(need_model(s));
    if (!toks || n <= 0) return RP_OK;
    if (min_common < 1) min_common = 1;
    const int head_bytes = (int)sizeof(rp_token) * (n < HEAD_TOKENS ? n : HEAD_TOKENS);
    static const int which[3] = {S_KIDS_GE, S_KIDS_LT, S_KIDS_EQ};
    rp_status st = RP_OK;
    for (int i = 0; i < 3 && st == RP_OK; i++) {
        if (which[i] == S_KIDS_EQ && !(*found && *n_common >= HEAD_TOKENS)) break;
        sqlite3_stmt *q;
        RP_TRY(stmt(s, which[i], &q));
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
    RP_TRY(stmt(s, S_GET, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    int rc = sqlite3_step(q);
    rp_status st = RP_OK;
    if (rc == SQLITE_ROW && s->model && sqlite3_column_int64(q, 1) != s->model) {
        /* another model's row: not visible through this binding */
    } else if (rc == SQLITE_ROW && s->skip && s->skip(s->skip_user, id)) {
        /* a row the owner knows to be bad */
    } else if (rc == SQLITE_ROW) {
        st = row_read(s, q, out, true);
        if (st == RP_OK) st = row_check(s, out);
        if (st == RP_OK) *found = true;
        else rp_store_chunk_clear(out);
    } else if (rc != SQLITE_DONE) {
        st = sql_err(s, "get row");
    }
    sqlite3_reset(q);
    return st;
}

/* Metadata-only rows from an arbitrary SELECT of k_cols. */
static rp_status collect_rows(rp_store *s, sqlite3_stmt *q, rp_store_chunk *out, int32_t cap, int32_t *n_out) {
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n_out >= cap) break;
        rp_store_chunk *c = &out[*n_out];
        if (row_read(s, q, c, false) == RP_OK) (*n_out)++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return sql_err(s, "scan rows");
    return RP_OK;
}

rp_status rp_store_children_of(rp_store *s, const uint64_t *parents, int32_t n, rp_store_chunk *out, int32_t cap,
                               int32_t *n_out) {
    *n_out = 0;
    RP_TRY(need_model(s));
    sqlite3_stmt *q;
    RP_TRY(stmt(s, S_KIDS, &q));
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
    RP_TRY(need_model(s));
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM chunks WHERE model = ?1 AND corrupt = 0 "
             "ORDER BY rp_locality(heat, last_used, ?2, ?3) DESC, id LIMIT ?4",
             k_cols);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_err(s, "hottest rows");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int64(q, 2, i64(clock));
    sqlite3_bind_double(q, 3, half_life);
    sqlite3_bind_int(q, 4, cap);
    rp_status st = collect_rows(s, q, out, cap, n_out);
    sqlite3_finalize(q);
    return st;
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
    RP_TRY(ensure_dir(sub));
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

static inline uint64_t file_round(uint64_t b) { return (b + FILE_ROUND - 1) / FILE_ROUND * FILE_ROUND; }

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
    m.checksum = meta_checksum(s, &m, it->tokens, layers, lb);

    /* what this id had before (a re-dirtied chunk is rewritten under its id) */
    sqlite3_stmt *q;
    int old_loc = -1;
    uint64_t old_sum = 0, old_bytes = 0;
    if ((st = stmt(s, S_OLD, &q)) == RP_OK) {
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
            if ((st = stmt(s, S_DEL_PAYLOAD, &q)) == RP_OK) {
                sqlite3_bind_int64(q, 1, i64(m.id));
                if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "deleting the old payload");
                sqlite3_reset(q);
            }
        } else if ((st = stmt(s, S_INS_PAYLOAD, &q)) == RP_OK) {
            sqlite3_bind_int64(q, 1, i64(m.id));
            sqlite3_bind_blob64(q, 2, data, m.stored_bytes, SQLITE_STATIC);
            if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "writing the payload");
            sqlite3_reset(q);
            sqlite3_clear_bindings(q);   /* drop the reference to data */
        }
    }
    if (st == RP_OK && (st = stmt(s, S_INS_CHUNK, &q)) == RP_OK) {
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
    if (st == RP_OK && old_loc >= 0 && (st = stmt(s, S_DEL_KW, &q)) == RP_OK) {
        sqlite3_bind_int64(q, 1, i64(m.id));
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_write_err(s, m.id, "dropping the old keywords");
        sqlite3_reset(q);
    }
    if (st == RP_OK && !s->p.naive && m.n_tokens >= RP_KW_GRAM && (st = stmt(s, S_INS_KW, &q)) == RP_OK) {
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
    RP_TRY(need_model(s));
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    if (n <= 0) return RP_OK;
    if (!items) return rp_errorf(RP_ERR_INVALID_ARG, "store: put of NULL items");
    /* The first failure is the one reported (its message kept in `cause`): a ROLLBACK after SQLite already
     * rolled the transaction back itself (SQLITE_FULL, I/O errors) fails too, and must not mask it. */
    char cause[512] = "";
    rp_status st = exec(s, "BEGIN IMMEDIATE");
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
    const double now = wall_now();
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        /* a savepoint per item: one bad item does not sink the batch */
        st = exec(s, "SAVEPOINT item");
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
        if (st == RP_OK) st = exec(s, "RELEASE item");
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
        st = meta_get(s, "next_id", &cur, &f);
        if (st == RP_OK && (!f || (uint64_t)cur <= max_id)) st = meta_set(s, "next_id", i64(max_id + 1));
        if (st == RP_OK && clock) st = meta_set(s, "clock", i64(clock));
        /* failed writes, this batch's and earlier ones not yet recorded, for `reprise cache stats` */
        if (st == RP_OK && s->fail_pending + (uint64_t)n_failed > 0)
            st = meta_add(s, "write_failures", s->fail_pending + (uint64_t)n_failed);
        if (st == RP_OK && (st = exec(s, "COMMIT")) != RP_OK && db_full(s) && !cause[0])
            snprintf(cause, sizeof cause, "store: disk full writing chunk %llu%s to '%s' (commit: %s)",
                     (unsigned long long)items[0].meta.id, n > 1 ? " and the rest of its batch" : "", s->dir,
                     sqlite3_errmsg(s->db));
        if (st != RP_OK && !cause[0]) snprintf(cause, sizeof cause, "%s", rp_last_error());
    }
    if (st != RP_OK) {
        if (!sqlite3_get_autocommit(s->db)) exec_quiet(s, "ROLLBACK");
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

rp_status rp_store_touch_rows(rp_store *s, const rp_store_touch *t, int32_t n, uint64_t clock) {
    if (n <= 0) return RP_OK;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    RP_TRY(exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q;
    rp_status st = stmt(s, S_TOUCH, &q);
    const double now = wall_now();
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, i64(t[i].id));
        sqlite3_bind_double(q, 2, t[i].heat);
        sqlite3_bind_int64(q, 3, i64(t[i].last_used));
        sqlite3_bind_int64(q, 4, i64(t[i].hits));
        sqlite3_bind_double(q, 5, now);
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_err(s, "touch rows");
    }
    if (st == RP_OK) sqlite3_reset(q);
    if (st == RP_OK && clock) st = meta_set(s, "clock", i64(clock));
    if (st == RP_OK) st = exec(s, "COMMIT");
    if (st != RP_OK) exec(s, "ROLLBACK");
    return st;
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
        struct stat sb = {0};   /* not ours, or writable by others: a corrupt chunk, never used (see check_stat) */
        if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || check_stat(path, &sb) != RP_OK) {
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
        note_damage(s, sqlite3_extended_errcode(s->db));
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
        note_damage(s, rc);
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

/* ---- delete / mark ---- */

static rp_status delete_ids(rp_store *s, const uint64_t *ids, int32_t n, unlink_list *files, int64_t *file_delta) {
    sqlite3_stmt *qo, *qd, *qp, *qk, *qv;
    RP_TRY(stmt(s, S_OLD, &qo));
    RP_TRY(stmt(s, S_DEL_CHUNK, &qd));
    RP_TRY(stmt(s, S_DEL_PAYLOAD, &qp));
    RP_TRY(stmt(s, S_DEL_KW, &qk));
    RP_TRY(stmt(s, S_DEL_VEC, &qv));
    sqlite3_stmt *qs = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT stored_bytes FROM chunks WHERE id = ?1", -1, &qs, NULL) != SQLITE_OK)
        return sql_err(s, "delete");
    rp_status st = RP_OK;
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        const int64_t id = i64(ids[i]);
        sqlite3_reset(qo);
        sqlite3_bind_int64(qo, 1, id);
        if (sqlite3_step(qo) == SQLITE_ROW && sqlite3_column_int(qo, 0) == 1) {
            ul_add(files, s, ids[i], (uint64_t)sqlite3_column_int64(qo, 1));
            sqlite3_reset(qs);
            sqlite3_bind_int64(qs, 1, id);
            if (sqlite3_step(qs) == SQLITE_ROW) *file_delta -= (int64_t)file_round((uint64_t)sqlite3_column_int64(qs, 0));
        }
        sqlite3_reset(qo);
        sqlite3_stmt *qq[4] = {qd, qp, qk, qv};
        for (int k = 0; k < 4 && st == RP_OK; k++) {
            sqlite3_reset(qq[k]);
            sqlite3_bind_int64(qq[k], 1, id);
            if (sqlite3_step(qq[k]) != SQLITE_DONE) st = sql_err(s, "delete chunk");
            sqlite3_reset(qq[k]);
        }
    }
    sqlite3_finalize(qs);
    return st;
}

rp_status rp_store_delete(rp_store *s, const uint64_t *ids, int32_t n) {
    if (n <= 0) return RP_OK;
    if (s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    RP_TRY(exec(s, "BEGIN IMMEDIATE"));
    unlink_list files = {0};
    int64_t delta = 0;
    rp_status st = delete_ids(s, ids, n, &files, &delta);
    if (st == RP_OK) st = exec(s, "COMMIT");
    if (st != RP_OK) {
        exec(s, "ROLLBACK");
        free(files.paths);
        return st;
    }
    ul_run(&files, s);
    if (s->file_bytes_ok) s->file_bytes = (uint64_t)((int64_t)s->file_bytes + delta);
    return RP_OK;
}

rp_status rp_store_mark_corrupt(rp_store *s, uint64_t id) {
    sqlite3_stmt *q;
    RP_TRY(stmt(s, S_MARK_BAD, &q));
    sqlite3_bind_int64(q, 1, i64(id));
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? RP_OK : sql_err(s, "mark corrupt");
}

uint64_t rp_store_next_id(rp_store *s) {
    int64_t v = 0, mx = 0;
    bool f = false;
    if (meta_get(s, "next_id", &v, &f) != RP_OK || !f) v = 1;
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
    if (meta_get(s, "clock", &v, &f) != RP_OK || !f) return 0;
    return (uint64_t)v;
}

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
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_err(s, "stats");
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
            return sql_err(s, "evict scan");
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
        if (st == RP_OK && rc != SQLITE_DONE) st = sql_err(s, "evict scan");
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
        if (st == RP_OK) exec(s, "PRAGMA incremental_vacuum");   /* free pages go back to the file system */
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

/* ---- verify / compact / clear / iterate ---- */

rp_status rp_store_verify(rp_store *s, bool fix, void (*bad)(void *user, uint64_t id, const char *why), void *user,
                          uint64_t *n_ok, uint64_t *n_bad) {
    *n_ok = *n_bad = 0;
    if (fix && s->p.read_only) return rp_errorf(RP_ERR_INVALID_ARG, "store: '%s' is open read-only", s->dir);
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT %s FROM chunks%s ORDER BY id", k_cols, s->model ? " WHERE model = ?1" : "");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_err(s, "verify scan");
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
        rp_status rs = row_read(s, q, &c, true);
        if (rs == RP_ERR_NOMEM) {
            st = rs;
            break;
        }
        if (rs == RP_OK) {
            if (!bound) s->model = 0;
            rs = row_check(s, &c);
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
    if (st == RP_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) st = sql_err(s, "verify scan");
    sqlite3_finalize(q);
    free(buf);
    if (st == RP_OK && nb > 0) st = rp_store_delete(s, badv, nb);
    free(badv);
    return st;
}

/* Payload files whose name does not match a row (id, checksum, loc = file), and temp files. */
static rp_status remove_orphan_files(rp_store *s, uint64_t *removed) {
    char kvdir[4096];
    snprintf(kvdir, sizeof kvdir, "%s/kv", s->dir);
    DIR *top = opendir(kvdir);
    if (!top) return RP_OK;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM chunks WHERE id = ?1 AND loc = 1 AND checksum = ?2", -1, &q, NULL) !=
        SQLITE_OK) {
        closedir(top);
        return sql_err(s, "compact");
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
        "DELETE FROM coaccess WHERE a NOT IN (SELECT id FROM chunks) OR b NOT IN (SELECT id FROM chunks)",
        "DELETE FROM chunks WHERE model NOT IN (SELECT id FROM models)",
    };
    RP_TRY(exec(s, "BEGIN IMMEDIATE"));
    rp_status st = RP_OK;
    for (size_t i = 0; i < sizeof orphans / sizeof orphans[0] && st == RP_OK; i++) {
        st = exec(s, orphans[i]);
        if (st == RP_OK) *removed += (uint64_t)sqlite3_changes(s->db);
    }
    if (st == RP_OK) st = exec(s, "COMMIT");
    if (st != RP_OK) {
        exec(s, "ROLLBACK");
        return st;
    }
    RP_TRY(remove_orphan_files(s, removed));
    RP_TRY(exec(s, "VACUUM"));
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
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_err(s, "clear");
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
        RP_TRY(exec(s, "DELETE FROM coaccess"));
    }
    exec(s, "PRAGMA incremental_vacuum");
    sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    return RP_OK;
}

rp_status rp_store_foreach(rp_store *s, bool (*fn)(void *user, const rp_store_chunk *c), void *user) {
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT %s FROM chunks%s ORDER BY id", k_cols, s->model ? " WHERE model = ?1" : "");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_err(s, "list chunks");
    if (s->model) sqlite3_bind_int64(q, 1, s->model);
    rp_status st = RP_OK;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        rp_store_chunk c;
        if (row_read(s, q, &c, true) != RP_OK) {
            /* a damaged row is still listed, without tokens */
            row_read(s, q, &c, false);
            c.tokens = NULL;
        }
        bool go = fn(user, &c);
        rp_store_chunk_clear(&c);
        if (!go) break;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) st = sql_err(s, "list chunks");
    sqlite3_finalize(q);
    return st;
}

/* ---- sub-chunks ---- */

typedef struct cand {
    uint64_t id;
    int32_t votes;
} cand;

static int cand_by_votes(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->votes != y->votes) return y->votes - x->votes;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cand_by_id(const void *a, const void *b) {
    uint64_t x = ((const cand *)a)->id, y = ((const cand *)b)->id;
    return x < y ? -1 : x > y;
}

static int match_by_len(const void *a, const void *b) {
    const rp_subchunk_match *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    if (x->prompt_off != y->prompt_off) return x->prompt_off - y->prompt_off;
    return x->chunk_id < y->chunk_id ? -1 : x->chunk_id > y->chunk_id;
}

static int match_by_off(const void *a, const void *b) {
    return ((const rp_subchunk_match *)a)->prompt_off - ((const rp_subchunk_match *)b)->prompt_off;
}

rp_status rp_store_find_subchunks(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                  int32_t max_candidates, rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    return rp_store_find_subchunks_vec(s, toks, n, min_len, max_candidates, NULL, 0, 0, out, cap, n_out);
}

rp_status rp_store_find_subchunks_vec(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                      int32_t max_candidates, const float *qvec, int32_t dim, int32_t k_vec,
                                      rp_subchunk_match *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(need_model(s));
    if (!toks || n < RP_KW_GRAM || cap <= 0 || !out) return RP_OK;
    if (min_len < RP_KW_GRAM) min_len = RP_KW_GRAM;
    if (max_candidates <= 0) max_candidates = 16;
    uint64_t *kw = malloc(sizeof *kw * (size_t)n);
    if (!kw) return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    int32_t nk = rp_keywords(toks, n, s->salt, kw, n);
    /* votes per chunk over the prompt's keywords (one indexed probe per keyword) */
    cand *cv = NULL;
    int64_t nc = 0, capc = 0;
    sqlite3_stmt *q = NULL;
    rp_status st = RP_OK;
    /* the (kw, chunk) primary key answers this alone; the model / corrupt
     * check runs below on the few top-ranked candidates only (keywords are
     * salted per model, so another model's rows almost never share one) */
    st = stmt(s, S_KW_CHUNKS, &q);
    for (int32_t i = 0; i < nk && st == RP_OK; i++) {
        bool dup = false;   /* a repeated keyword votes once */
        for (int32_t j = i - 1; j >= 0 && j >= i - 32; j--)
            if (kw[j] == kw[i]) dup = true;
        if (dup) continue;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, i64(kw[i]));
        while (sqlite3_step(q) == SQLITE_ROW) {
            if (nc == capc) {
                capc = capc ? 2 * capc : 256;
                cand *nv = realloc(cv, sizeof *cv * (size_t)capc);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                cv = nv;
            }
            cv[nc++] = (cand){(uint64_t)sqlite3_column_int64(q, 0), 1};
        }
    }
    if (q) sqlite3_reset(q);   /* cached statement: reset, never finalized here */
    free(kw);
    if (st != RP_OK) {
        free(cv);
        return st;
    }
    /* merge equal ids, rank by votes */
    if (nc > 1) qsort(cv, (size_t)nc, sizeof *cv, cand_by_id);
    int64_t m = 0;
    for (int64_t i = 0; i < nc; i++) {
        if (m > 0 && cv[m - 1].id == cv[i].id) cv[m - 1].votes++;
        else cv[m++] = cv[i];
    }
    if (m > 1) qsort(cv, (size_t)m, sizeof *cv, cand_by_votes);
    {   /* the best max_candidates that are this model's and not marked corrupt */
        sqlite3_stmt *ok = NULL;
        if (m > 0 && (st = stmt(s, S_CAND_OK, &ok)) != RP_OK) {
            free(cv);
            return st;
        }
        int64_t kept = 0;
        for (int64_t i = 0; i < m && kept < max_candidates; i++) {
            sqlite3_reset(ok);
            sqlite3_bind_int64(ok, 1, i64(cv[i].id));
            sqlite3_bind_int64(ok, 2, s->model);
            if (sqlite3_step(ok) == SQLITE_ROW) cv[kept++] = cv[i];
        }
        if (ok) sqlite3_reset(ok);
        m = kept;
    }
    /* the caller's dense vector: its top k_vec chunks join the keyword
     * candidates (a paraphrase or a chunk whose shared runs are too short for
     * a common keyword still gets the LCS pass); the LCS decides what is reused */
    if (qvec && dim > 0 && k_vec > 0) {
        uint64_t *vid = malloc(sizeof *vid * (size_t)k_vec);
        float *vsc = malloc(sizeof *vsc * (size_t)k_vec);
        cand *nv = realloc(cv, sizeof *cv * (size_t)(m + k_vec));
        int32_t nvk = 0;
        if (!vid || !vsc || !nv) st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
        if (nv) cv = nv;
        if (st == RP_OK) st = rp_store_vector_topk(s, qvec, dim, k_vec, vid, vsc, &nvk);
        for (int32_t i = 0; st == RP_OK && i < nvk; i++) {
            bool dup = false;
            for (int64_t j = 0; j < m && !dup; j++) dup = cv[j].id == vid[i];
            if (!dup) cv[m++] = (cand){vid[i], 0};
        }
        free(vid);
        free(vsc);
        if (st != RP_OK) {
            free(cv);
            return st;
        }
    }

    rp_sam *sam = NULL;
    st = rp_sam_build(toks, n, &sam);
    rp_subchunk_match *all = NULL;
    int32_t na = 0, capa = 0;
    rp_lcs_run runs[256];
    for (int64_t i = 0; i < m && st == RP_OK; i++) {
        rp_store_chunk c;
        bool found = false;
        if (rp_store_get(s, cv[i].id, &c, &found) != RP_OK || !found) continue;
        int32_t nr = rp_sam_match(sam, c.tokens, c.n_tokens, min_len, runs, 256);
        if (nr > 256) nr = 256;
        for (int32_t r = 0; r < nr; r++) {
            if (na == capa) {
                capa = capa ? 2 * capa : 64;
                rp_subchunk_match *nv = realloc(all, sizeof *all * (size_t)capa);
                if (!nv) {
                    st = rp_errorf(RP_ERR_NOMEM, "store: out of memory");
                    break;
                }
                all = nv;
            }
            all[na++] = (rp_subchunk_match){c.id, runs[r].text_off, runs[r].s_off, runs[r].len};
        }
        rp_store_chunk_clear(&c);
    }
    rp_sam_free(sam);
    free(cv);
    if (st != RP_OK) {
        free(all);
        return st;
    }
    /* greedy cover of the prompt: longest first, trimmed to the uncovered part */
    if (na > 1) qsort(all, (size_t)na, sizeof *all, match_by_len);
    uint8_t *covered = calloc((size_t)n, 1);
    if (!covered) {
        free(all);
        return rp_errorf(RP_ERR_NOMEM, "store: out of memory");
    }
    int32_t no = 0;
    for (int32_t i = 0; i < na && no < cap; i++) {
        rp_subchunk_match x = all[i];
        /* first uncovered run inside x's prompt range */
        int32_t a = x.prompt_off, e = x.prompt_off + x.len;
        while (a < e && covered[a]) a++;
        int32_t b = a;
        while (b < e && !covered[b]) b++;
        if (b - a < min_len) continue;
        x.chunk_off += a - x.prompt_off;
        x.prompt_off = a;
        x.len = b - a;
        memset(covered + a, 1, (size_t)x.len);
        out[no++] = x;
    }
    free(covered);
    free(all);
    if (no > 1) qsort(out, (size_t)no, sizeof *out, match_by_off);
    *n_out = no;
    return RP_OK;
}

/* ---- dense vectors ---- */

rp_status rp_store_put_vector(rp_store *s, uint64_t chunk_id, const float *v, int32_t dim) {
    RP_TRY(need_model(s));
    if (!v || dim <= 0 || dim > 65536) return rp_errorf(RP_ERR_INVALID_ARG, "store: vector of dimension %d", dim);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO vectors(chunk, dim, v) VALUES(?1, ?2, ?3)", -1, &q, NULL) !=
        SQLITE_OK)
        return sql_err(s, "write vector");
    sqlite3_bind_int64(q, 1, i64(chunk_id));
    sqlite3_bind_int(q, 2, dim);
    sqlite3_bind_blob(q, 3, v, (int)(sizeof(float) * (size_t)dim), SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? RP_OK : sql_err(s, "write vector");
}

rp_status rp_store_vector_topk(rp_store *s, const float *qv, int32_t dim, int32_t k, uint64_t *ids, float *scores,
                               int32_t *n_out) {
    *n_out = 0;
    RP_TRY(need_model(s));
    if (!qv || dim <= 0 || k <= 0 || !ids || !scores) return RP_OK;
    double qn = 0;
    for (int32_t i = 0; i < dim; i++) qn += (double)qv[i] * qv[i];
    qn = sqrt(qn);
    if (qn == 0) return RP_OK;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT v.chunk, v.v FROM vectors v JOIN chunks c ON c.id = v.chunk "
                           "WHERE c.model = ?1 AND v.dim = ?2 AND c.corrupt = 0",
                           -1, &q, NULL) != SQLITE_OK)
        return sql_err(s, "vector scan");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int(q, 2, dim);
    int32_t n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const float *v = sqlite3_column_blob(q, 1);
        if (!v || sqlite3_column_bytes(q, 1) != (int)(sizeof(float) * (size_t)dim)) continue;
        double dot = 0, vn = 0;
        for (int32_t i = 0; i < dim; i++) {
            dot += (double)qv[i] * v[i];
            vn += (double)v[i] * v[i];
        }
        if (vn == 0) continue;
        float sc = (float)(dot / (qn * sqrt(vn)));
        /* insertion into the sorted top-k */
        int32_t pos = n < k ? n : k;
        if (pos == k && sc <= scores[k - 1]) continue;
        if (pos == k) pos = k - 1;
        while (pos > 0 && scores[pos - 1] < sc) {
            scores[pos] = scores[pos - 1];
            ids[pos] = ids[pos - 1];
            pos--;
        }
        scores[pos] = sc;
        ids[pos] = (uint64_t)sqlite3_column_int64(q, 0);
        if (n < k) n++;
    }
    sqlite3_finalize(q);
    *n_out = n;
    return RP_OK;
}

/* ---- co-access ---- */

rp_status rp_store_put_coaccess(rp_store *s, const rp_store_coaccess *v, int32_t n) {
    RP_TRY(need_model(s));
    if (n <= 0) return RP_OK;
    RP_TRY(exec(s, "BEGIN IMMEDIATE"));
    sqlite3_stmt *q = NULL;
    rp_status st = RP_OK;
    if (sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO coaccess(model, a, b, n) VALUES(?1, ?2, ?3, ?4)", -1, &q,
                           NULL) != SQLITE_OK)
        st = sql_err(s, "write co-access");
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, s->model);
        sqlite3_bind_int64(q, 2, i64(v[i].a));
        sqlite3_bind_int64(q, 3, i64(v[i].b));
        sqlite3_bind_int64(q, 4, v[i].n);
        if (sqlite3_step(q) != SQLITE_DONE) st = sql_err(s, "write co-access");
    }
    sqlite3_finalize(q);
    if (st == RP_OK) st = exec(s, "COMMIT");
    if (st != RP_OK) exec(s, "ROLLBACK");
    return st;
}

rp_status rp_store_get_coaccess(rp_store *s, rp_store_coaccess *out, int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(need_model(s));
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT a, b, n FROM coaccess WHERE model = ?1 ORDER BY n DESC LIMIT ?2", -1, &q,
                           NULL) != SQLITE_OK)
        return sql_err(s, "read co-access");
    sqlite3_bind_int64(q, 1, s->model);
    sqlite3_bind_int(q, 2, cap);
    while (*n_out < cap && sqlite3_step(q) == SQLITE_ROW) {
        out[*n_out] = (rp_store_coaccess){(uint64_t)sqlite3_column_int64(q, 0), (uint64_t)sqlite3_column_int64(q, 1),
                                          (uint32_t)sqlite3_column_int64(q, 2)};
        (*n_out)++;
    }
    sqlite3_finalize(q);
    return RP_OK;
}
