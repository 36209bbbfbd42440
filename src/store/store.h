/* store.h — the flash tier: a SQLite (WAL) database of KV chunks per model, payloads as BLOBs or files, checksummed. */
#ifndef RP_STORE_STORE_H
#define RP_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "store/terms.h"
#include "tokenizer/tokenizer.h"

/* Layout of a store directory DIR (created 0700; every file 0600):
 *   DIR/kv.db (+ -wal, -shm)   the SQLite database (schema in store_internal.h), with the store's checksum secret
 *   DIR/kv/XX/<id>.kv          payloads kept as files (XX = id % 256 in hex)
 *   DIR/lock                   flock()ed exclusively by the one writing process
 *
 * Access control: a directory or file of the store that is not owned by the
 * effective user, or is group/world-writable, is refused on open (RP_ERR_IO
 * naming the path, the owner and mode found and what is required) — another
 * local user could have planted KV there or could read the token ids; a
 * payload file failing the same check when read is a corrupt chunk. Read
 * permission for others is tightened (0700 / 0600) by a writer instead.
 *
 * Rows are chunks: a salted content hash, the chained prefix hash, the token
 * ids, the parent chunk's row id (the prefix tree; 0 = root), the RoPE
 * position of the first token, exactness, the KV geometry, a per-layer table
 * (offset, stored length, XXH3 of the raw layer) and one metadata checksum
 * (XXH3 over every identifying column + the tokens + the layer table), both
 * keyed with the store's random secret (not a cryptographic MAC, see store_internal.h), the
 * measured recompute cost and locality state (heat, logical clock of last
 * use, hits). A chunk's row id is its id in the RAM pool too: ids are
 * allocated by the pool from rp_store_next_id() and never reused.
 *
 * Integrity: a chunk is trusted only after its metadata checksum and the
 * checksum of every layer read match; any mismatch is reported as
 * RP_ERR_FORMAT naming the row and the lookup treats it as a miss. Payload
 * files are written to a temp name (fdatasync'ed when fsync_files) and
 * renamed into place before the transaction that adds their rows commits, so
 * a process crash leaves at worst an orphan file (removed by compact), never
 * a row whose payload is missing or torn. The durability class follows
 * synchronous: with NORMAL (default) a power loss may roll back the last
 * transactions and, without fsync_files, leave a committed row's file short
 * or empty — its checksum catches that and the chunk is a miss; with
 * sync_full + fsync_files nothing committed is lost.
 *
 * Threads: one rp_store handle is one SQLite connection and must be used by
 * one thread at a time. rp_store_clone() opens another connection on the same
 * database for another thread (WAL lets readers run during a write). Only the
 * handle opened with write access (and its clones) may write; the process
 * holding DIR/lock is the only writer. */

typedef enum rp_payload_mode {
    RP_PAYLOAD_AUTO = 0,   /* BLOB up to inline_max bytes, file above (the measured default) */
    RP_PAYLOAD_BLOB = 1,   /* always a BLOB in the payloads table */
    RP_PAYLOAD_FILE = 2,   /* always a file named by row id */
} rp_payload_mode;

typedef struct rp_store_params {
    rp_payload_mode payload;  /* where payloads go (default AUTO) */
    size_t inline_max;        /* AUTO: payloads of at most this many bytes are BLOBs (default 16 KiB: measured,
                                 BLOBs win below ~16-32 KiB, files above; see tests/test_store.c) */
    int zstd_level;           /* 0: store raw (default); >0: each layer a zstd frame at this level, kept
                                 only when it saves >= 1/16 of the layer */
    bool naive;               /* ablation: a plain BLOB table without secondary indexes (lookups scan) */
    bool sync_full;           /* PRAGMA synchronous=FULL (fsync the WAL on every commit); default NORMAL */
    bool fsync_files;         /* fdatasync payload files before their rows commit (default false, the same
                                 durability class as synchronous=NORMAL; set it with sync_full) */
    bool read_only;           /* open for reading only: no lock, no creation, no writes */
    int busy_timeout_ms;      /* SQLite busy timeout (default 5000) */
} rp_store_params;

rp_store_params rp_store_default_params(void);

typedef struct rp_store rp_store;

/* Opens (creating if needed, unless read_only) the store in `dir`. A writer
 * takes DIR/lock; RP_ERR_IO naming the directory if another process holds it.
 * Creates the directory 0700 and tightens an existing one to 0700; refuses
 * one that is not ours or is group/world-writable (see above). A store of
 * older builds (schema 1: unkeyed checksums) is upgraded by a writer, which
 * drops its chunks (rp_store_notice says so, rp_store_dropped_unkeyed how
 * many), and refused by a reader (RP_ERR_UNSUPPORTED saying how to upgrade it).
 * A schema-2 store (before extracted terms and vector sources) is migrated
 * in place by a writer, in one transaction, keeping every chunk (they have no
 * terms; chunks written afterwards do; rp_store_notice says so); a reader uses it as it is
 * (no term index; its vectors are all the caller's). A newer schema than this
 * build's is refused (RP_ERR_UNSUPPORTED naming both versions), never read. */
rp_status rp_store_open(const char *dir, const rp_store_params *p, rp_store **out);
/* Damage. A handle on which SQLite reported corruption (SQLITE_CORRUPT /
 * SQLITE_NOTADB) is marked damaged; a writer handle also leaves
 * DIR/kv.db.damaged, and the next writer to open the store moves the
 * database, its WAL and payload files to DIR/damaged/ and starts empty
 * (rp_store_notice then says so). Payloads are verified by checksums either
 * way; this keeps a process from writing into, and later ones from reading,
 * a database SQLite called corrupt. */
bool rp_store_damaged(const rp_store *s);
/* Rows the lookups of this handle pass over (find_edge / find_hash /
 * best_child / get): skip(user, id) true hides row `id`, so that an older
 * healthy duplicate is found instead of a row the owner found damaged. It is
 * called during those lookups, on the caller's thread, with no store lock
 * held. NULL clears it. */
void rp_store_set_skip(rp_store *s, bool (*skip)(void *user, uint64_t id), void *user);
/* What opening the store did that the user should be told ("" if nothing). */
const char *rp_store_notice(const rp_store *s);
/* SQLite's PRAGMA quick_check, plus the damage mark: *ok false with the first
 * problem in msg. */
rp_status rp_store_quick_check(rp_store *s, char *msg, size_t cap, bool *ok);
/* Chunks dropped by this open's upgrade of a schema-1 store (0 otherwise). */
uint64_t rp_store_dropped_unkeyed(const rp_store *s);
/* Another connection on the same store (same model binding), for another thread. */
rp_status rp_store_clone(rp_store *s, rp_store **out);
/* In the error of a read-only rp_store_open (RP_ERR_NOT_FOUND) of a kv.db
 * whose schema was never committed (its first writer died at once): an empty
 * store, not a damaged one. */
#define RP_STORE_EMPTY_MSG "is empty"
/* This connection's SQLite page cache, in KiB (opened at RP_STORE_CACHE_KIB).
 * The pool pays its connections' caches out of its RAM budget. */
#define RP_STORE_CACHE_KIB 2048
rp_status rp_store_set_cache_kib(rp_store *s, int32_t kib);
void rp_store_close(rp_store *s);
const char *rp_store_dir(const rp_store *s);
bool rp_store_read_only(const rp_store *s);

/* ---- models ---- */

typedef struct rp_store_model {
    int64_t id;
    uint64_t salt;
    int32_t kv_type, n_layer;
    uint64_t row_bytes;
    char name[128];
    uint64_t n_chunks, bytes;   /* filled by rp_store_models */
} rp_store_model;

/* Binds this handle to the model with `salt` (the reuse engine's salt: model
 * fingerprint + KV type). Every lookup and write afterwards sees only this
 * model's chunks, so a store written for another model is never used for this
 * one. With `create`, a missing model row is added; otherwise RP_ERR_NOT_FOUND.
 * A row with this salt but another geometry is RP_ERR_FORMAT (never used). */
rp_status rp_store_bind_model(rp_store *s, uint64_t salt, int32_t kv_type, int32_t n_layer, uint64_t row_bytes,
                              const char *name, bool create);
/* Binds to an existing model row by salt alone (CLI tools that do not know the geometry). */
rp_status rp_store_bind_salt(rp_store *s, uint64_t salt);
/* Lists models with their chunk counts and stored bytes. *out is malloc'd. */
rp_status rp_store_models(rp_store *s, rp_store_model **out, int32_t *n);

/* ---- chunk rows ---- */

typedef struct rp_store_chunk {
    uint64_t id, hash, chain, parent_id;
    int64_t model;
    int32_t n_tokens, pos0;
    bool exact;
    int32_t kv_type, n_layer;
    uint64_t row_bytes;
    uint64_t kv_bytes;        /* raw payload bytes: n_layer * 2 * n_tokens * row_bytes */
    uint64_t stored_bytes;    /* bytes on flash (after compression) */
    uint8_t loc;              /* 0 BLOB, 1 file */
    uint8_t codec;            /* 0 raw layers, 1 some layers zstd */
    uint64_t checksum;        /* metadata checksum */
    double recompute_ms;      /* measured full-prefill cost of the chunk */
    double heat;              /* decayed access count as of last_used */
    uint64_t last_used;       /* logical clock (the pool's; persisted in meta) */
    uint64_t hits;
    double created, used_at;  /* unix seconds (for people) */
    rp_token *tokens;         /* malloc'd by lookups (rp_store_chunk_clear frees) */
    uint8_t *layers;          /* the layer table, malloc'd by lookups */
    uint32_t layers_bytes;
} rp_store_chunk;

void rp_store_chunk_clear(rp_store_chunk *c);

/* What the semantic index holds for one chunk, from its text (the pool's
 * indexer computes it, see rp_chunk_cache_set_indexer): its extracted terms
 * (rp_terms_extract: distinct, with counts; the store salts them with the
 * model) and a dense vector (e.g. the chunk's embedding, truncated and
 * re-normalised) tagged with `vec_src`, the identity of what computed it, so
 * that a query only meets vectors of its own kind (0: the caller's own, as
 * rp_store_put_vector writes them). */
typedef struct rp_store_index {
    rp_term *terms;
    int32_t n_terms;
    float *vec;               /* NULL: no vector */
    int32_t dim;
    uint64_t vec_src;
} rp_store_index;

/* One chunk to write: metadata (id, hash, chain, parent_id, n_tokens, pos0,
 * exact, recompute_ms, heat, last_used, hits; geometry comes from the bound
 * model), its tokens and raw payload [n_layer][2][n_tokens][row_bytes], and
 * optionally its semantic index: with `index` the chunk's terms and vector
 * are replaced by it (it is then "term-indexed": counted in the document
 * frequencies, even with no terms); NULL leaves what the row had (a rewrite
 * of the same tokens keeps its terms and vector; a new row has none). */
typedef struct rp_store_put_item {
    rp_store_chunk meta;
    const rp_token *tokens;
    const uint8_t *kv;
    const rp_store_index *index;
    rp_status status;         /* out: RP_OK, or why this item failed (the batch goes on without it) */
} rp_store_put_item;

/* Writes n chunks in one transaction (an existing row with the same id is
 * replaced). Payload files are durable before the commit (see above). An
 * item that fails alone (e.g. a file write error) gets its status set and
 * is left out; a failing transaction fails every item and returns the error.
 * Errors name their cause: a full disk (SQLITE_FULL, ENOSPC) is "disk full
 * writing chunk N to 'DIR'", never what a rollback after it said. Failed
 * items are counted (rp_store_stats.write_failures). `clock` (the pool's
 * logical clock) is persisted with the batch. */
rp_status rp_store_put(rp_store *s, rp_store_put_item *items, int32_t n, uint64_t clock);

/* Locality updates for rows already stored (hits, heat, last_used), one transaction. */
typedef struct rp_store_touch {
    uint64_t id;
    double heat;
    uint64_t last_used, hits;
} rp_store_touch;
rp_status rp_store_touch_rows(rp_store *s, const rp_store_touch *t, int32_t n, uint64_t clock);

/* Lookups in the bound model. Each compares the tokens (a hash never
 * decides alone); *found false on a miss. On a hit *out is filled (tokens and
 * layer table malloc'd). Rows marked corrupt are skipped. */
rp_status rp_store_find_edge(rp_store *s, uint64_t parent_id, uint64_t chain, const rp_token *toks, int32_t n,
                             rp_store_chunk *out, bool *found);
/* Content lookup: the most recently used chunk with these tokens, any parent. */
rp_status rp_store_find_hash(rp_store *s, uint64_t hash, const rp_token *toks, int32_t n, rp_store_chunk *out,
                             bool *found);
/* Among the children of parent_id (0 = roots), the one sharing the longest
 * common token prefix with toks[0..n) (at least `min_common` tokens, >= 1). */
rp_status rp_store_best_child(rp_store *s, uint64_t parent_id, const rp_token *toks, int32_t n, int32_t min_common,
                              rp_store_chunk *out, int32_t *n_common, bool *found);
/* Rows that lookups on this handle found corrupt (metadata checksum or
 * geometry) and skipped; drains up to cap of them. Lookups never write, so
 * the caller deletes or marks them (rp_store_delete / rp_store_mark_corrupt)
 * from its writing thread. */
int32_t rp_store_take_bad(rp_store *s, uint64_t *out, int32_t cap);
/* A row by id (any state except deleted); *found false if absent. */
rp_status rp_store_get(rp_store *s, uint64_t id, rp_store_chunk *out, bool *found);
/* Ids of the children of any of parents[0..n) not in `skip` (callback filter);
 * used by prefetch. Writes up to cap rows (metadata, no tokens) to out. */
rp_status rp_store_children_of(rp_store *s, const uint64_t *parents, int32_t n, rp_store_chunk *out, int32_t cap,
                               int32_t *n_out);
/* The rows with the highest locality R(c) = heat * 2^-((clock - last_used)/half_life)
 * (metadata only), best first: what a fresh process prefetches. */
rp_status rp_store_hottest(rp_store *s, uint64_t clock, double half_life, rp_store_chunk *out, int32_t cap,
                           int32_t *n_out);

/* Reads and verifies the payload of `meta` into dst (kv_bytes). Layers
 * [l0, l1) only with rp_store_load_layers (dst is still the whole payload
 * buffer; other layers untouched). RP_ERR_FORMAT names the row and layer on
 * a checksum or decode failure. Reads need no transaction (WAL snapshot per
 * statement); the metadata checksum is checked by the lookups. */
rp_status rp_store_load(rp_store *s, const rp_store_chunk *meta, uint8_t *dst);
rp_status rp_store_load_layers(rp_store *s, const rp_store_chunk *meta, uint8_t *dst, int32_t l0, int32_t l1);

/* Deletes rows (and their payloads / keywords / vectors); files are unlinked
 * after the commit. Used for eviction and for rows found corrupt. */
rp_status rp_store_delete(rp_store *s, const uint64_t *ids, int32_t n);

/* The next unused row id (the pool allocates ids upward from here). */
uint64_t rp_store_next_id(rp_store *s);
/* The persisted logical clock (the pool continues from it). */
uint64_t rp_store_clock(rp_store *s);

/* ---- budgets, eviction, maintenance ---- */

typedef struct rp_store_stats {
    uint64_t n_chunks, n_corrupt, n_files, n_blobs;
    uint64_t write_failures;            /* chunk writes that failed (disk full, I/O), all processes: recorded
                                           with the next write that succeeds (or at close) */
    uint64_t raw_bytes, stored_bytes;   /* payload bytes, raw and on flash */
    uint64_t disk_bytes;                /* db + wal + payload files, as allocated on disk */
    uint64_t n_models, n_keywords, n_vectors;
    uint64_t n_terms;                   /* distinct extracted terms (document frequencies kept) */
    uint64_t n_term_docs;               /* chunks indexed for terms (the N of the idf) */
} rp_store_stats;

/* Stats of the bound model (all models when unbound). disk_bytes is always the whole directory. */
rp_status rp_store_stats_get(rp_store *s, rp_store_stats *st);
/* Bytes the store occupies on disk: database pages in use + WAL + payload
 * files (rounded up to 4 KiB). Cheap (kept incrementally by this handle after
 * the first call). */
uint64_t rp_store_disk_bytes(rp_store *s);
/* Bytes of the WAL file now (part of rp_store_disk_bytes). */
uint64_t rp_store_wal_bytes(rp_store *s);
/* Checkpoints and truncates the WAL (no-op read-only). */
void rp_store_checkpoint(rp_store *s);

typedef enum rp_evict_policy {
    RP_EVICT_AUTO = 0,   /* rp_chunk_cache: LRU with no store attached, cost-aware with one */
    RP_EVICT_LRU = 1,    /* least recently used first (ablation: "no eviction policy") */
    RP_EVICT_COST = 2,   /* lowest locality x cost first */
} rp_evict_policy;

typedef struct rp_store_evict_params {
    rp_evict_policy policy;   /* LRU or COST (AUTO = COST) */
    uint64_t clock;           /* now, on the logical clock */
    double half_life;         /* of the locality decay, in clock ticks */
    double cascade_weight;    /* share of a descendant's recompute cost lost when its prefix path breaks */
    const uint64_t *protect;  /* ids never evicted (pinned / in use), sorted ascending */
    int32_t n_protect;
} rp_store_evict_params;

/* Flash eviction down to `target` disk bytes, all models (scores are in ms
 * and comparable). Cost-aware: score = R(c) * C(c), R the decayed locality,
 * C(c) = recompute_ms(c) + cascade_weight * sum over descendants d of
 * recompute_ms(d) (descendants lose prefix reuse when c goes). Lowest scores
 * go first; corrupt rows before anything. Writes deleted ids to `deleted`
 * (malloc'd; NULL to skip). */
rp_status rp_store_evict(rp_store *s, uint64_t target, const rp_store_evict_params *p, uint64_t **deleted,
                         int32_t *n_deleted, uint64_t *freed);

/* Checks every row (of the bound model, or all): metadata checksum and every
 * layer. Calls `bad` for each corrupt row (may be NULL); with `fix`, corrupt
 * rows are deleted. Then the term index: document frequencies that disagree
 * with a count over the indexed rows are reported as id 0 (counted in
 * *n_bad) and, with fix, rebuilt. *n_ok / *n_bad are counts. */
rp_status rp_store_verify(rp_store *s, bool fix, void (*bad)(void *user, uint64_t id, const char *why), void *user,
                          uint64_t *n_ok, uint64_t *n_bad);

/* Removes orphans (payload rows, keyword / term / vector / co-access rows,
 * payload files without a chunk row, stale temp files), rebuilds the term
 * document frequencies from the rows, then VACUUMs. *removed counts orphans. */
rp_status rp_store_compact(rp_store *s, uint64_t *removed);

/* Deletes every chunk of the bound model (all models when unbound). */
rp_status rp_store_clear(rp_store *s, uint64_t *n_deleted);

/* Marks a row corrupt (lookups skip it until it is deleted). */
rp_status rp_store_mark_corrupt(rp_store *s, uint64_t id);

/* Row iteration (metadata + tokens) for `reprise cache ls`, in id order. */
rp_status rp_store_foreach(rp_store *s, bool (*fn)(void *user, const rp_store_chunk *c), void *user);

/* ---- sub-chunk candidates: sparse keywords, dense vectors, LCS ---- */

/* Keywords are winnowed token-id 3-grams (window 16): for any run of >= 18
 * equal tokens shared by a prompt and a chunk, both select at least one common
 * keyword, so candidates cannot miss such a run. rp_store_put indexes them.
 *
 * Terms (schema 3) are words of the chunk's detokenized text (rp_terms_extract),
 * indexed per chunk with their counts when the put carries an rp_store_index,
 * and weighted by their inverse document frequency over the bound model's
 * term-indexed chunks: idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) (BM25's),
 * N the term-indexed chunks and df those containing t. The document
 * frequencies live in the database, updated in the transaction of every put,
 * replacement and delete (eviction, verify --fix and clear included), so they
 * survive restarts and always equal a count over the indexed rows (verify
 * checks that; compact rebuilds them). A paraphrased or re-wrapped prompt
 * shares few token runs with its source but its rare words still: they rank
 * the source among the candidates. Terms and vectors only propose
 * candidates; the LCS pass over the tokens decides what is reused. */
typedef struct rp_subchunk_match {
    uint64_t chunk_id;
    int32_t chunk_off;        /* offset of the match in the chunk's tokens */
    int32_t prompt_off;       /* offset of the match in the prompt */
    int32_t len;
} rp_subchunk_match;

/* Sub-chunk reuse: finds stored chunks sharing keywords with toks[0..n),
 * takes the `max_candidates` with most shared keywords, and runs a
 * linear-time longest-common-substring pass (suffix automaton of the prompt)
 * over each, returning non-overlapping (in the prompt) matches of at least
 * min_len tokens, longest first then by prompt offset. */
rp_status rp_store_find_subchunks(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                  int32_t max_candidates, rp_subchunk_match *out, int32_t cap, int32_t *n_out);

/* The same, with the caller's dense query vector (e.g. the RAG pipeline's
 * embedding of the prompt; NULL / dim 0 / k_vec 0: none): the k_vec chunks
 * whose stored vectors (rp_store_put_vector, same dim) are nearest by cosine
 * join the keyword candidates, so a chunk sharing no keyword still gets the
 * LCS pass. */
rp_status rp_store_find_subchunks_vec(rp_store *s, const rp_token *toks, int32_t n, int32_t min_len,
                                      int32_t max_candidates, const float *qvec, int32_t dim, int32_t k_vec,
                                      rp_subchunk_match *out, int32_t cap, int32_t *n_out);

/* Everything a sub-chunk search may use beyond the prompt's tokens. */
typedef struct rp_subchunk_query {
    int32_t min_len;          /* matches of at least this many tokens (>= RP_KW_GRAM) */
    int32_t max_candidates;   /* chunks ranked by keywords + terms that get the LCS pass (<= 0: 16) */
    const rp_term *terms;     /* the prompt's extracted terms (rp_terms_extract), or NULL */
    int32_t n_terms;
    const float *qvec;        /* n_qvec query vectors of dim floats, row-major, or NULL */
    int32_t n_qvec, dim;
    int32_t k_vec;            /* the k_vec nearest chunks of each query vector join the candidates */
    uint64_t vec_src;         /* only stored vectors of this source are compared (0: the caller's own) */
} rp_subchunk_query;

rp_subchunk_query rp_subchunk_default_query(int32_t min_len);

/* The general search: candidates ranked by score = shared keywords (one per
 * winnowed 3-gram) + the idf-weighted overlap of terms (the sum of idf(t) over
 * the prompt's terms the chunk contains), the best max_candidates of the
 * bound model kept, then each query vector's k_vec nearest chunks added; then
 * the LCS pass and cover as rp_store_find_subchunks. */
rp_status rp_store_find_subchunks_q(rp_store *s, const rp_token *toks, int32_t n, const rp_subchunk_query *q,
                                    rp_subchunk_match *out, int32_t cap, int32_t *n_out);

/* The candidates alone, in the order the LCS pass would take them (tests, tools). */
typedef struct rp_subchunk_cand {
    uint64_t id;
    int32_t kw_votes;         /* shared keywords */
    float term_score;         /* sum of the idf of shared terms */
    float vec_score;          /* best cosine to a query vector (-2: not among the nearest) */
} rp_subchunk_cand;
rp_status rp_store_subchunk_candidates(rp_store *s, const rp_token *toks, int32_t n, const rp_subchunk_query *q,
                                       rp_subchunk_cand *out, int32_t cap, int32_t *n_out);

/* Document frequency of a term (its raw hash from rp_terms_extract) among the
 * bound model's term-indexed chunks, and N, their number. */
rp_status rp_store_term_df(rp_store *s, uint64_t term, int64_t *df, int64_t *n_docs);
/* idf(t) as the search weighs it (see above) for df and N. */
double rp_store_idf(int64_t df, int64_t n_docs);

/* Dense vectors supplied by the caller (e.g. RAG embeddings), one per chunk
 * (vec_src 0; a chunk's vector replaces any other it had, of any source). */
rp_status rp_store_put_vector(rp_store *s, uint64_t chunk_id, const float *v, int32_t dim);
/* The stored vector of a chunk (up to cap floats) and its source; *found false when it has none. */
rp_status rp_store_get_vector(rp_store *s, uint64_t chunk_id, float *v, int32_t cap, int32_t *dim, uint64_t *src,
                              bool *found);
/* Brute-force cosine top-k over the bound model's vectors of this dimension (of source 0). */
rp_status rp_store_vector_topk(rp_store *s, const float *q, int32_t dim, int32_t k, uint64_t *ids, float *scores,
                               int32_t *n_out);
/* The same over vectors of source `src`, for nq query vectors at once (one scan): the k nearest of each, query
 * i's in ids / scores [i * k, i * k + n_out[i]). */
rp_status rp_store_vector_topk_multi(rp_store *s, const float *q, int32_t nq, int32_t dim, uint64_t src, int32_t k,
                                     uint64_t *ids, float *scores, int32_t *n_out);

/* Co-access counts (chunk a used shortly before b), persisted for prefetch after restart. */
typedef struct rp_store_coaccess {
    uint64_t a, b;
    uint32_t n;
} rp_store_coaccess;
rp_status rp_store_put_coaccess(rp_store *s, const rp_store_coaccess *v, int32_t n);
rp_status rp_store_get_coaccess(rp_store *s, rp_store_coaccess *out, int32_t cap, int32_t *n_out);

#endif /* RP_STORE_STORE_H */
