/* store_internal.h — the flash store's private state, shared by store.c and store_{rows,payload,evict,verify,search}.c. */
#ifndef RP_STORE_INTERNAL_H
#define RP_STORE_INTERNAL_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "store/store.h"

/* Schema (version 3). uint64 values are stored as their int64 bit pattern.
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
 *   terms(term, chunk, tf) WITHOUT ROWID, PK(term, chunk) + index on chunk: extracted terms of term-indexed
 *                                                 chunks (term = the raw hash salted with the model, never 0),
 *                                                 plus one row (term 0, tf 0) per term-indexed chunk
 *   term_df(model, term, df) WITHOUT ROWID, PK(model, term): document frequencies, df = the rows of `terms`
 *                                                 with that term among the model's chunks (term 0: N, the
 *                                                 model's term-indexed chunks); rows with df 0 are removed
 *   vectors(chunk INTEGER PRIMARY KEY, dim, v BLOB, src): src = what computed the vector (0: the caller)
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
 * group/world-writable, see rp_store_check_stat); the key defeats planting KV without reading the secret, and
 * KV copied between stores. Schema 1 (older builds) had unkeyed checksums: a writer that opens such a store drops its
 * chunks (they cannot be authenticated, and a cache may lose entries) and upgrades it; a reader refuses it.
 * Schema 2 had neither `terms` / `term_df` nor vectors.src: a writer adds them in one transaction (its chunks
 * stay, without terms; its vectors get src 0, the caller's, which they were); a reader reads it without the term
 * index (s->schema says which). A schema above 3 is refused by both.
 *
 * Pragmas: WAL; synchronous=NORMAL by default — in WAL mode a commit is atomic and the database is never
 * corrupted by a crash or power loss under NORMAL; only the last transactions may roll back on power loss,
 * which loses cached chunks (a cache may lose entries) but never damages stored ones. FULL is available.
 * auto_vacuum=INCREMENTAL so eviction returns pages to the file system; the WAL is checkpointed automatically
 * (every 1000 pages) and truncated to journal_size_limit (1 MiB) when it restarts, so it adds at most a few MiB
 * plus one write batch to the flash footprint (counted in rp_store_disk_bytes; eviction ends with a truncating
 * checkpoint). Page cache: 2 MiB per connection. */

#define SCHEMA_VERSION 3
#define SCHEMA_NO_TERMS 2         /* before the term index and vector sources: migrated in place */
#define SCHEMA_UNKEYED 1          /* older builds: unkeyed checksums */
#define SECRET_BYTES 192          /* XXH3_SECRET_DEFAULT_SIZE */
#define LAYER_ENTRY 24
#define FILE_ROUND 4096ull
/* postings read per keyword by the sub-chunk search (S_KW_CHUNKS): bounds a search at RP_KW_POSTINGS per keyword
 * of the prompt, whatever the store holds */
#define RP_KW_POSTINGS_SQL "64"
/* postings read per term of the prompt (S_TERM_CHUNKS), the most recent chunks first */
#define RP_TERM_POSTINGS_SQL "64"
#define MAX_TOKENS_PER_CHUNK (1 << 22)

enum {
    S_EDGE, S_HASH, S_KIDS, S_KIDS_GE, S_KIDS_LT, S_KIDS_EQ, S_GET, S_BLOB, S_INS_CHUNK, S_INS_PAYLOAD, S_DEL_PAYLOAD, S_INS_KW, S_DEL_KW,
    S_OLD, S_TOUCH, S_META_SET, S_DEL_CHUNK, S_DEL_VEC, S_MARK_BAD, S_KW_CHUNKS, S_CAND_OK,
    S_INS_TERM, S_DF_INC, S_DF_DEC, S_DF_GC, S_DEL_TERMS, S_DF_GET, S_TERM_CHUNKS, S_INS_VEC, S_COUNT
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
    bool damaged;             /* SQLite reported corruption on this handle (see rp_store_note_damage) */
    bool (*skip)(void *user, uint64_t id);   /* rows lookups pass over (rp_store_set_skip) */
    void *skip_user;
    char notice[640];         /* what open did that the user should hear about ("" if nothing) */
    uint8_t secret[SECRET_BYTES];   /* the checksum key (table secret) */
    uint64_t dropped_unkeyed; /* chunks dropped when this open upgraded a schema-1 store */
    uint64_t fail_pending;    /* failed chunk writes not yet added to meta.write_failures */
    int schema;               /* the database's schema version (SCHEMA_VERSION, or SCHEMA_NO_TERMS for a reader) */
};

/* The columns of a chunk row, in the order rp_store_row_read reads them. */
extern const char *const rp_store_cols;

static inline int64_t i64(uint64_t x) { return (int64_t)x; }

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint64_t file_round(uint64_t b) { return (b + FILE_ROUND - 1) / FILE_ROUND * FILE_ROUND; }

/* ---- shared helpers ---- */

/* store.c */
double rp_store_wall_now(void);                          /* seconds since the epoch (created, used_at) */
void rp_store_note_damage(rp_store *s, int rc);          /* SQLite said rc: on corruption, marks the store damaged */
bool rp_store_db_full(const rp_store *s);                /* the last SQLite error was SQLITE_FULL */
rp_status rp_store_sql_err(rp_store *s, const char *what);   /* the last SQLite error as an rp_status */
rp_status rp_store_exec(rp_store *s, const char *sql);       /* SQL without results */
void rp_store_exec_quiet(rp_store *s, const char *sql);      /* the same, its failure not the one to report */
rp_status rp_store_stmt(rp_store *s, int which, sqlite3_stmt **out);   /* the handle's prepared S_* statement */
rp_status rp_store_check_stat(const char *path, const struct stat *sb);   /* ours, not writable by others */
rp_status rp_store_ensure_dir(const char *path);             /* a store directory, created 0700 if missing */
rp_status rp_store_meta_get(rp_store *s, const char *key, int64_t *v, bool *found);
rp_status rp_store_meta_set(rp_store *s, const char *key, int64_t v);
rp_status rp_store_meta_add(rp_store *s, const char *key, uint64_t d);
rp_status rp_store_need_model(const rp_store *s);            /* RP_ERR_INVALID_ARG unless a model is bound */

/* store_rows.c */
rp_status rp_store_row_read(rp_store *s, sqlite3_stmt *q, rp_store_chunk *c, bool blobs);
rp_status rp_store_row_check(const rp_store *s, const rp_store_chunk *c);

/* store_payload.c */
uint64_t rp_store_meta_checksum(const rp_store *s, const rp_store_chunk *c, const rp_token *toks,
                                const uint8_t *layers, size_t lb);

/* store_verify.c */
rp_status rp_store_remove_orphan_files(rp_store *s, uint64_t *removed);

/* store_terms.c: the term index and vectors inside a write transaction (the caller's) */
bool rp_store_has_terms(const rp_store *s);   /* schema 3: the term tables exist */
rp_status rp_store_terms_drop(rp_store *s, uint64_t id, int64_t model);   /* df -= its terms; its term rows go */
rp_status rp_store_index_put(rp_store *s, uint64_t id, int64_t model, const rp_store_index *ix);
/* the postings of the prompt's rarest terms: (chunk, idf of the term) pairs in *v (malloc'd), *nv of them */
typedef struct rp_term_hit {
    uint64_t id;
    float score;
} rp_term_hit;
rp_status rp_store_term_hits(rp_store *s, const rp_term *terms, int32_t n, rp_term_hit **v, int64_t *nv);
/* term_df against the rows of `terms`: *n_wrong (model, term) pairs disagree; with fix, rebuilt */
rp_status rp_store_terms_check(rp_store *s, bool fix, uint64_t *n_wrong);
rp_status rp_store_terms_rebuild(rp_store *s);   /* term_df from `terms` (no transaction of its own) */

#endif
