/* test_pool.c — the RAM pool over the flash store: restart, salts, checksums, re-dirty, budgets, eviction policies, threads, ablations. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "core/bigmem.h"
#include "kernels/types.h"
#include "model/model.h"
#include "reuse/cache.h"
#include "reuse/engine.h"
#include "store/store.h"

/* A hand-built rp_kv as in test_cache.c: each K/V row holds 8 uint32 words
 * encoding (layer, cell, k-or-v, word); pos[cell] = cell + POS_OFF. */
#define N_LAYER 3
#define N_CTX 4096
#define KV_DIM 8
#define ROW_BYTES 32
#define POS_OFF 1000
#define SALT 0x5eedull

/* sanitizers inflate RSS (quarantine, shadow memory): the RSS bound is checked without them */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RP_ASAN 1
#endif
#endif

static uint32_t row_word(int32_t layer, int32_t cell, int v, int j) {
    return (uint32_t)layer << 24 | (uint32_t)cell << 4 | (uint32_t)v << 3 | (uint32_t)j;
}

static rp_kv *fake_kv_ctx(int32_t n_layer, size_t row_bytes, int32_t n_ctx);
static rp_kv *fake_kv_geo(int32_t n_layer, size_t row_bytes) { return fake_kv_ctx(n_layer, row_bytes, N_CTX); }

static rp_kv *fake_kv_ctx(int32_t n_layer, size_t row_bytes, int32_t n_ctx) {
    rp_kv *kv = NULL;   /* two F32 KV heads of row_bytes / 8 */
    assert_int_equal(
        rp_kv_create_shape(n_layer, 2, (int32_t)(row_bytes / 4 / 2), n_ctx, RP_TYPE_F32, RP_CPU_SCALAR, &kv), RP_OK);
    assert_int_equal(kv->row_bytes, row_bytes);
    uint32_t *row = malloc(row_bytes);
    assert_non_null(row);
    for (int32_t l = 0; l < n_layer; l++)
        for (int32_t c = 0; c < n_ctx; c++)
            for (int v = 0; v < 2; v++) {
                for (size_t j = 0; j < row_bytes / 4; j++) row[j] = row_word(l, c, v, (int)j & 7);
                rp_kv_write_rows(kv, v ? RP_KV_V : RP_KV_K, l, c, 1, (const uint8_t *)row);
            }
    free(row);
    for (int32_t c = 0; c < n_ctx; c++) kv->pos[c] = c + POS_OFF;
    kv->n = n_ctx;
    return kv;
}

static rp_kv *fake_kv(void) { return fake_kv_geo(N_LAYER, ROW_BYTES); }

static void free_kv(rp_kv *kv) { rp_kv_free(kv); }

/* The chunk's payload equals the rows of cells [cell0, ...), cell0 = pos0 - POS_OFF. */
static bool payload_ok(const rp_chunk *ch) {
    const int32_t cell0 = ch->pos0 - POS_OFF;
    for (int32_t l = 0; l < ch->n_layer; l++)
        for (int32_t t = 0; t < ch->n_tokens; t++) {
            const uint32_t *k = (const uint32_t *)(rp_chunk_k(ch, l) + (size_t)t * ch->row_bytes);
            const uint32_t *v = (const uint32_t *)(rp_chunk_v(ch, l) + (size_t)t * ch->row_bytes);
            for (int j = 0; j < KV_DIM; j++)
                if (k[j] != row_word(l, cell0 + t, 0, j) || v[j] != row_word(l, cell0 + t, 1, j)) return false;
        }
    return true;
}

static rp_test_rng g_rng = {4242};
static uint64_t rnd(void) { return rp_test_rng_next(&g_rng); }

static void random_tokens(rp_token *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) t[i] = (rp_token)(rnd() % 32000);
}

static void make_spans(const rp_token *t, int32_t n, int32_t len, rp_chunk_span *s) {
    for (int32_t i = 0; i < n; i++) {
        s[i].begin = i * len;
        s[i].len = len;
        s[i].hash = rp_chunk_hash(t + i * len, len, SALT);
        s[i].at_boundary = i == 0;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *subdir(const char *name) {
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", rp_test_tmpdir(), name);
    return b;
}

static rp_chunk_cache *pool_geo(const char *dir, size_t budget, const rp_pool_params *pp, uint64_t salt,
                                rp_evict_policy pol, int32_t n_layer, size_t row, const rp_store_params *sp) {
    rp_cache_params p = {.budget_bytes = budget, .n_layer = n_layer, .row_bytes = row, .kv_type = RP_TYPE_F32,
                         .policy = pol};
    rp_chunk_cache *c = NULL;
    assert_int_equal(rp_chunk_cache_create(p, &c), RP_OK);
    if (dir) {
        rp_store_params def = rp_store_default_params();
        rp_store *s = NULL;
        assert_int_equal(rp_store_open(dir, sp ? sp : &def, &s), RP_OK);
        assert_int_equal(rp_chunk_cache_attach_store(c, s, salt, "fake", pp), RP_OK);
    }
    return c;
}

static rp_chunk_cache *pool(const char *dir, size_t budget, const rp_pool_params *pp) {
    return pool_geo(dir, budget, pp, SALT, RP_EVICT_AUTO, N_LAYER, ROW_BYTES, NULL);
}

/* Inserts spans[0..n) as a prefix chain (cells = prompt offsets), exact as the
 * engine would mark a full prefill, and unpins them. */
static void insert_chain(rp_chunk_cache *c, rp_kv *kv, const rp_token *t, const rp_chunk_span *s, int32_t n,
                         uint64_t *ids) {
    rp_chunk *parent = NULL, *held[64];
    for (int32_t i = 0; i < n; i++) {
        rp_chunk *ch = NULL;
        assert_int_equal(rp_chunk_cache_insert(c, parent, t, &s[i], kv, s[i].begin, 2.0 * s[i].len, &ch), RP_OK);
        assert_non_null(ch);
        ch->exact = true;
        held[i] = ch;
        parent = ch;
        if (ids) ids[i] = ch->id;
    }
    for (int32_t i = n - 1; i >= 0; i--) rp_chunk_unpin(c, held[i]);
}

static rp_pool_params quiet_params(void) {
    rp_pool_params pp = rp_pool_default_params();
    pp.no_prefetch = true;
    pp.write_delay_ms = 0;
    return pp;
}

/* ------------------------------------------------------------------------ */

static void test_restart(void **state) {
    (void)state;
    const char *dir = subdir("restart");
    rp_kv *kv = fake_kv();
    rp_token t[160];
    random_tokens(t, 160);
    rp_chunk_span s[8];
    make_spans(t, 8, 20, s);
    uint64_t ids[8];
    rp_pool_params pp = quiet_params();
    rp_chunk_cache *c = pool(dir, 1 << 20, &pp);
    insert_chain(c, kv, t, s, 5, ids);              /* a chain of 5 */
    for (int i = 5; i < 8; i++) {                     /* 3 roots */
        rp_chunk *ch = NULL;
        assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, s[i].begin, 40, &ch), RP_OK);
        ids[i] = ch->id;
        rp_chunk_unpin(c, ch);
    }
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.written, 8);
    assert_int_equal(st.dirty, 0);
    rp_chunk_cache_free(c);   /* clean shutdown */

    /* a new process (pool) on the same directory: flash hits, same ids, exact kept */
    c = pool(dir, 1 << 20, &pp);
    rp_chunk *m[5];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 0; i < 5; i++) {
        assert_true(m[i]->id == ids[i]);
        assert_true(m[i]->exact);
        assert_int_equal(m[i]->pos0, s[i].begin + POS_OFF);
        assert_true(payload_ok(m[i]));
        assert_true(m[i]->recompute_ms == 40.0);
        if (i) assert_true(m[i]->parent_id == m[i - 1]->id);
        rp_chunk_unpin(c, m[i]);
    }
    for (int i = 5; i < 8; i++) {
        rp_chunk *f = rp_chunk_cache_find(c, t, &s[i]);
        assert_non_null(f);
        assert_true(f->id == ids[i]);
        assert_false(f->exact);
        assert_true(payload_ok(f));
        rp_chunk_unpin(c, f);
    }
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.flash_hits, 8);
    assert_int_equal(st.loads, 8);
    /* the second time they are RAM hits */
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 0; i < 5; i++) rp_chunk_unpin(c, m[i]);
    assert_int_equal(rp_chunk_cache_stats(c).flash_hits, 8);
    /* new chunks continue the id sequence */
    rp_chunk *nw = NULL;
    rp_token t2[20];
    random_tokens(t2, 20);
    rp_chunk_span s2;
    make_spans(t2, 1, 20, &s2);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t2, &s2, kv, 0, 1, &nw), RP_OK);
    assert_true(nw->id > ids[7]);
    rp_chunk_unpin(c, nw);
    rp_chunk_cache_free(c);

    /* with prefetch: the hottest chunks are in RAM before anyone asks */
    rp_pool_params pf = rp_pool_default_params();
    c = pool(dir, 1 << 20, &pf);
    rp_chunk_cache_prefetch_sync(c);
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.prefetched, 9);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 0; i < 5; i++) rp_chunk_unpin(c, m[i]);
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.flash_hits, 0);
    assert_int_equal(st.prefetch_used, 5);
    print_message("restart: 8 chunks written; cold pool: 8 flash hits; warm start: %llu prefetched, %llu used, 0 flash reads at lookup\n",
                  (unsigned long long)st.prefetched, (unsigned long long)st.prefetch_used);
    rp_chunk_cache_free(c);

    /* prefetch credit: the warm start loads at most 4x the credit (here 1), hottest first */
    pf.prefetch_credit = 1;
    c = pool(dir, 1 << 20, &pf);
    rp_chunk_cache_prefetch_sync(c);
    assert_int_equal(rp_chunk_cache_stats(c).prefetched, 4);
    rp_chunk_cache_free(c);

    /* another model (salt) on the same directory sees nothing */
    c = pool_geo(dir, 1 << 20, &pp, SALT ^ 1, RP_EVICT_AUTO, N_LAYER, ROW_BYTES, NULL);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 0);
    assert_null(rp_chunk_cache_find(c, t, &s[5]));
    assert_null(rp_chunk_cache_get(c, ids[0]));
    rp_chunk_cache_free(c);
    /* nor does a pool of another geometry under the same salt: attach fails */
    rp_cache_params bad = {.budget_bytes = 1 << 20, .n_layer = N_LAYER + 1, .row_bytes = ROW_BYTES, .kv_type = RP_TYPE_F32};
    rp_chunk_cache *cb = NULL;
    assert_int_equal(rp_chunk_cache_create(bad, &cb), RP_OK);
    rp_store *sto = NULL;
    rp_store_params sp = rp_store_default_params();
    assert_int_equal(rp_store_open(dir, &sp, &sto), RP_OK);
    assert_int_equal(rp_chunk_cache_attach_store(cb, sto, SALT, "x", &pp), RP_ERR_FORMAT);
    rp_chunk_cache_free(cb);
    free_kv(kv);
}

static void flip_payload(const char *dir, uint64_t id, size_t byte) {
    char db[4096 + 16];
    snprintf(db, sizeof db, "%s/kv.db", dir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_blob *b = NULL;
    assert_int_equal(sqlite3_blob_open(h, "main", "payloads", "data", (int64_t)id, 1, &b), SQLITE_OK);
    uint8_t x;
    assert_int_equal(sqlite3_blob_read(b, &x, 1, (int)byte), SQLITE_OK);
    x ^= 1;
    assert_int_equal(sqlite3_blob_write(b, &x, 1, (int)byte), SQLITE_OK);
    sqlite3_blob_close(b);
    sqlite3_close(h);
}

static void test_bitflip_is_a_miss(void **state) {
    (void)state;
    for (int async = 0; async < 2; async++) {
        const char *dir = subdir(async ? "flip-async" : "flip");
        rp_kv *kv = fake_kv();
        rp_token t[100];
        random_tokens(t, 100);
        rp_chunk_span s[5];
        make_spans(t, 5, 20, s);
        uint64_t ids[5];
        rp_pool_params pp = quiet_params();
        rp_chunk_cache *c = pool(dir, 1 << 20, &pp);
        insert_chain(c, kv, t, s, 5, ids);
        rp_chunk_cache_free(c);
        /* one bit of chunk 3's layer 1 (payload bytes: per layer 2 * 20 * 32) */
        flip_payload(dir, ids[2], 2 * 20 * 32 + 100);
        pp.async_load = async;
        c = pool(dir, 1 << 20, &pp);
        rp_chunk *m[5];
        if (!async) {
            /* the checksum catches it: the walk stops there, a miss */
            assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 2);
            for (int i = 0; i < 2; i++) {
                assert_true(payload_ok(m[i]));
                rp_chunk_unpin(c, m[i]);
            }
            assert_null(rp_chunk_cache_find(c, t, &s[2]));
        } else {
            /* async: the chunk is handed out, and its layer 1 wait reports the failure */
            assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
            for (int i = 0; i < 5; i++) {
                rp_status st = RP_OK;
                for (int32_t l = 0; l < N_LAYER && st == RP_OK; l++) st = rp_chunk_cache_wait_layer(c, m[i], l);
                if (i == 2) {
                    assert_int_equal(st, RP_ERR_FORMAT);
                } else {
                    assert_int_equal(st, RP_OK);
                    assert_true(payload_ok(m[i]));
                }
            }
            for (int i = 4; i >= 0; i--) rp_chunk_unpin(c, m[i]);
            /* the failed one is gone from the pool; a new lookup misses it */
            assert_null(rp_chunk_cache_find(c, t, &s[2]));
        }
        assert_true(rp_chunk_cache_stats(c).load_failures >= 1);
        assert_int_equal(rp_chunk_cache_flush(c), RP_OK);   /* the writer removes the corrupt row */
        rp_chunk_cache_free(c);
        rp_store *sto = NULL;
        rp_store_params sp = rp_store_default_params();
        sp.read_only = true;
        assert_int_equal(rp_store_open(dir, &sp, &sto), RP_OK);
        uint64_t ok = 0, bad = 0;
        assert_int_equal(rp_store_verify(sto, false, NULL, NULL, &ok, &bad), RP_OK);
        assert_int_equal(ok, 4);
        assert_int_equal(bad, 0);
        rp_store_close(sto);
        free_kv(kv);
    }
}

/* The engine upgrades an approximate chunk in place (payload, pos0, exact)
 * while pinned: the pool notices at unpin and rewrites it. */
static void test_redirty(void **state) {
    (void)state;
    const char *dir = subdir("redirty");
    rp_kv *kv = fake_kv();
    rp_token t[40];
    random_tokens(t, 40);
    rp_chunk_span s[2];
    make_spans(t, 2, 20, s);
    rp_pool_params pp = quiet_params();
    /* the writer waits for a flush (urgent) so the dirty count can be read
     * before it runs: with no delay it could write the re-dirtied chunk first */
    pp.write_delay_ms = 600000;
    rp_chunk_cache *c = pool(dir, 1 << 20, &pp);
    rp_chunk *ch = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[1], kv, 500, 1, &ch), RP_OK);   /* approximate, cells 500.. */
    rp_chunk_unpin(c, ch);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    ch = rp_chunk_cache_find(c, t, &s[1]);
    for (int32_t l = 0; l < N_LAYER; l++) {   /* overwrite_payload from cells 20.. */
        rp_kv_read_rows(kv, RP_KV_K, l, 20, 20, rp_chunk_k(ch, l));
        rp_kv_read_rows(kv, RP_KV_V, l, 20, 20, rp_chunk_v(ch, l));
    }
    ch->pos0 = 20 + POS_OFF;
    ch->exact = true;
    rp_chunk_unpin(c, ch);
    assert_int_equal(rp_chunk_cache_stats(c).dirty, 1);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    assert_int_equal(rp_chunk_cache_stats(c).written, 2);
    rp_chunk_cache_free(c);
    c = pool(dir, 1 << 20, &pp);
    ch = rp_chunk_cache_find(c, t, &s[1]);
    assert_non_null(ch);
    assert_true(ch->exact);
    assert_int_equal(ch->pos0, 20 + POS_OFF);
    assert_true(payload_ok(ch));
    /* an edit reported explicitly is rewritten too */
    rp_chunk_cache_mark_modified(c, ch);
    rp_chunk_unpin(c, ch);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    assert_int_equal(rp_chunk_cache_stats(c).written, 1);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static uint64_t dir_bytes(const char *dir) {
    uint64_t sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096 + 300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) sum += dir_bytes(p);
        else if (strcmp(e->d_name, "kv.db-shm") && strcmp(e->d_name, "lock")) sum += (uint64_t)sb.st_size;
    }
    closedir(d);
    return sum;
}

static long rss_kib(void) {
    const long long b = rp_bigmem_rss_bytes();
    return b > 0 ? (long)(b / 1024) : 0;
}

/* Under steady traffic (an insert every 20 ms, never the writer's quiet
 * time) chunks pushed out of a small pool before they were written are not
 * lost: the backlog makes the writer write at once, and a dirty victim waits
 * for it outside the pool. Before that, every evicted chunk was dropped. */
static void test_dirty_eviction_kept(void **state) {
    (void)state;
    const char *dir = subdir("dirty_evict");
    rp_kv *kv = fake_kv();
    rp_pool_params pp = rp_pool_default_params();
    pp.write_delay_ms = 60000;   /* the writer never sees an idle moment */
    pp.no_prefetch = true;
    rp_chunk_cache *c = pool(dir, 40 << 10, &pp);   /* ~10 chunks of 20 tokens */
    enum { N = 40 };
    static rp_token t[N * 20];
    random_tokens(t, N * 20);
    rp_chunk_span s[N];
    make_spans(t, N, 20, s);
    for (int i = 0; i < N; i++) {
        s[i].at_boundary = true;
        rp_chunk *ch = NULL;
        assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, s[i].begin, 1.0, &ch), RP_OK);
        if (ch) rp_chunk_unpin(c, ch);
        usleep(20000);
    }
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    print_message("dirty eviction: %llu inserts, %llu evictions, %llu written, %llu dropped dirty\n",
                  (unsigned long long)st.inserts, (unsigned long long)st.evictions, (unsigned long long)st.written,
                  (unsigned long long)st.dropped_dirty);
    assert_true(st.evictions >= N / 2);   /* the pool really overflowed */
    assert_int_equal(st.dropped_dirty, 0);
    assert_int_equal(st.written, N);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

/* A long synthetic workload: RAM pool bytes never exceed the budget; the
 * store stays within its flash budget (+10%) at every check. */
static void test_budgets_hold(void **state) {
    (void)state;
    const char *dir = subdir("budgets");
    rp_kv *kv = fake_kv_geo(N_LAYER, 512);   /* 3 KiB per token: chunks of 48-192 KiB */
    /* large enough that the fixed part of the RSS (3-5 MiB) fits in half the 10% slack */
    const size_t ram = (size_t)96 << 20;
    const uint64_t disk = (uint64_t)64 << 20;
    rp_pool_params pp = rp_pool_default_params();
    pp.disk_budget = disk;
    pp.write_delay_ms = 1;
    rp_chunk_cache *c = pool_geo(dir, ram, &pp, SALT, RP_EVICT_AUTO, N_LAYER, 512, NULL);
    enum { DOCS = 600, REQ = 2000 };
    static rp_token docs[DOCS][64];
    int32_t dlen[DOCS];
    for (int d = 0; d < DOCS; d++) {
        dlen[d] = 16 + (int32_t)(rnd() % 49);
        random_tokens(docs[d], dlen[d]);
    }
    const long rss0 = rss_kib();
    long rss_max = rss0;
    uint64_t max_disk = 0, max_ram = 0, hits = 0, looked = 0;
    rp_token prompt[6 * 64];
    rp_chunk_span sp[6];
    for (int r = 0; r < REQ; r++) {
        const int nd = 1 + (int)(rnd() % 6);
        int32_t off = 0;
        for (int i = 0; i < nd; i++) {
            /* skewed popularity: a few documents are common */
            int d = (int)((rnd() % 100 < 60) ? rnd() % 20 : rnd() % DOCS);
            memcpy(prompt + off, docs[d], sizeof(rp_token) * (size_t)dlen[d]);
            sp[i] = (rp_chunk_span){.begin = off, .len = dlen[d], .hash = rp_chunk_hash(docs[d], dlen[d], SALT)};
            off += dlen[d];
        }
        rp_chunk_cache_busy(c, true);
        rp_chunk *m[6];
        int32_t k = rp_chunk_cache_match_prefix(c, prompt, sp, nd, m);
        looked += (uint64_t)nd;
        hits += (uint64_t)k;
        rp_chunk_cache_busy(c, false);
        rp_chunk *parent = k ? m[k - 1] : NULL, *mine[6];
        int n_mine = 0;
        for (int32_t i = k; i < nd; i++) {
            rp_chunk *ch = NULL;
            assert_int_equal(rp_chunk_cache_insert(c, parent, prompt, &sp[i], kv, sp[i].begin, 0.5 * sp[i].len, &ch),
                             RP_OK);
            if (!ch) break;
            ch->exact = true;
            mine[n_mine++] = ch;
            parent = ch;
        }
        for (int i = n_mine - 1; i >= 0; i--) rp_chunk_unpin(c, mine[i]);
        for (int32_t i = k - 1; i >= 0; i--) rp_chunk_unpin(c, m[i]);
        rp_cache_stats st = rp_chunk_cache_stats(c);
        assert_true(st.bytes <= ram);
        /* outside the budget (transient: dirty victims, over-budget inserts and loads) at most a twentieth */
        assert_true(st.transient_bytes <= ram / 20);
        if (st.bytes + st.transient_bytes > max_ram) max_ram = st.bytes + st.transient_bytes;
        /* every request, while the writer runs: the store on disk (db + WAL + payload files) and the RSS */
        const uint64_t db = dir_bytes(dir);
        if (db > max_disk) max_disk = db;
        assert_true(db <= disk + disk / 10);
        long rs = rss_kib();
        if (rs > rss_max) rss_max = rs;
        if (r % 200 == 199) assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    }
    rp_cache_stats st = rp_chunk_cache_stats(c);
    print_message("budgets: %d requests, RAM pool max (budget + transient) %.2f / %.2f MiB, store max %.2f / %.2f MiB (on disk), "
                  "%llu flash evictions, %llu written, prefix hit rate %.2f, RSS growth %.1f MiB\n",
                  REQ, max_ram / 1048576.0, ram / 1048576.0, max_disk / 1048576.0, disk / 1048576.0,
                  (unsigned long long)st.disk_evictions, (unsigned long long)st.written, (double)hits / (double)looked,
                  (rss_max - rss0) / 1024.0);
    assert_true(st.disk_evictions > 0);   /* the budget was actually exercised */
    /* the RAM reload cost runs on the measured flash read rate, not the default */
    assert_true(st.loads >= 4 && st.reload_measured && st.reload_ms_per_mib > 0 &&
                st.reload_ms_per_mib != rp_pool_default_params().reload_ms_per_mib);   /* measured, not the default */
    print_message("budgets: measured reload %.4f ms/MiB over %llu loads (default %.2f)\n", st.reload_ms_per_mib,
                  (unsigned long long)st.loads, rp_pool_default_params().reload_ms_per_mib);
#ifndef RP_ASAN
    /* RSS over the baseline taken before the pool filled: within the RAM budget +10%, everything included —
     * the pool and its transient chunks, SQLite connections (4 x 2 MiB page cache), the WAL index, thread
     * stacks, per-thread malloc arenas (sampled after every request) */
    assert_true((rss_max - rss0) * 1024L <= (long)(ram + ram / 10));
#endif
    rp_chunk_cache_free(c);
    rp_store *sto = NULL;
    rp_store_params sp2 = rp_store_default_params();
    sp2.read_only = true;
    assert_int_equal(rp_store_open(dir, &sp2, &sto), RP_OK);
    uint64_t ok, bad;
    assert_int_equal(rp_store_verify(sto, false, NULL, NULL, &ok, &bad), RP_OK);
    assert_int_equal(bad, 0);
    rp_store_close(sto);
    free_kv(kv);
}

/* Prefetch loads a chunk before it is demanded: B always used together with
 * A (co-access), C the prefix child of P. With everything on flash and
 * nothing in RAM, using A alone brings B into RAM, and using P brings C,
 * so the later lookups of B and of [P, C] are RAM hits (no flash hit, no
 * demand load) that count as prefetch_used. */
static void test_prefetch_coaccess_children(void **state) {
    (void)state;
    const char *dir = subdir("prefetch-co");
    rp_kv *kv = fake_kv();
    rp_pool_params pp = rp_pool_default_params();   /* prefetch on */
    pp.write_delay_ms = 0;
    rp_chunk_cache *c = pool(dir, (size_t)4 << 20, &pp);
    enum { L = 24, ND = 20 };
    rp_token t[4 * L + ND * L];
    random_tokens(t, 4 * L + ND * L);
    /* P, C: a prefix chain; A, B: roots of their own; D0..: unrelated roots */
    rp_chunk_span pc[2] = {{.begin = 0, .len = L}, {.begin = L, .len = L}};
    rp_chunk_span a = {.begin = 2 * L, .len = L}, b = {.begin = 3 * L, .len = L};
    for (int i = 0; i < 2; i++) pc[i].hash = rp_chunk_hash(t + pc[i].begin, L, SALT);
    a.hash = rp_chunk_hash(t + a.begin, L, SALT);
    b.hash = rp_chunk_hash(t + b.begin, L, SALT);
    uint64_t ids[2];
    insert_chain(c, kv, t, pc, 2, ids);
    insert_chain(c, kv, t, &a, 1, NULL);
    insert_chain(c, kv, t, &b, 1, NULL);
    for (int r = 0; r < 3; r++) {   /* A and B, always together */
        rp_chunk *x = rp_chunk_cache_find(c, t, &a), *y = rp_chunk_cache_find(c, t, &b);
        assert_non_null(x);
        assert_non_null(y);
        rp_chunk_unpin(c, y);
        rp_chunk_unpin(c, x);
    }
    /* unrelated chunks push A, B, P, C out of the recently-used ring (each pair co-accessed once: no partners) */
    for (int i = 0; i < ND; i++) {
        rp_chunk_span d = {.begin = 4 * L + i * L, .len = L};
        d.hash = rp_chunk_hash(t + d.begin, L, SALT);
        insert_chain(c, kv, t, &d, 1, NULL);
    }
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    rp_chunk_cache_prefetch_sync(c);
    rp_chunk_cache_clear(c);   /* all on flash, none in RAM */
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 0);

    /* co-access: A demanded (a flash hit); the prefetcher brings B */
    rp_cache_stats s0 = rp_chunk_cache_stats(c);
    rp_chunk *x = rp_chunk_cache_find(c, t, &a);
    assert_non_null(x);
    rp_chunk_unpin(c, x);
    rp_cache_stats s1 = rp_chunk_cache_stats(c);
    assert_int_equal(s1.flash_hits - s0.flash_hits, 1);
    rp_chunk_cache_prefetch_sync(c);
    rp_cache_stats s2 = rp_chunk_cache_stats(c);
    assert_true(s2.prefetched > s0.prefetched);   /* by the background round the access started, or by this one */
    rp_chunk *y = rp_chunk_cache_find(c, t, &b);
    assert_non_null(y);
    rp_chunk_unpin(c, y);
    rp_cache_stats s3 = rp_chunk_cache_stats(c);
    assert_int_equal(s3.flash_hits, s2.flash_hits);           /* B came from RAM */
    assert_int_equal(s3.prefetch_used - s2.prefetch_used, 1);  /* ... because it was prefetched */

    /* prefix child: P demanded; the prefetcher brings C, its continuation */
    rp_chunk *m[2];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, pc, 1, m), 1);
    rp_chunk_unpin(c, m[0]);
    rp_cache_stats s4 = rp_chunk_cache_stats(c);
    assert_int_equal(s4.flash_hits - s3.flash_hits, 1);
    rp_chunk_cache_prefetch_sync(c);
    rp_cache_stats s5 = rp_chunk_cache_stats(c);
    assert_true(s5.prefetched > s3.prefetched);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, pc, 2, m), 2);
    assert_true(m[1]->id == ids[1]);
    rp_chunk_unpin(c, m[1]);
    rp_chunk_unpin(c, m[0]);
    rp_cache_stats s6 = rp_chunk_cache_stats(c);
    assert_int_equal(s6.flash_hits, s5.flash_hits);            /* C came from RAM */
    assert_int_equal(s6.prefetch_used - s5.prefetch_used, 1);
    print_message("prefetch: co-access partner and prefix child each loaded before demand (%llu prefetched, %llu used)\n",
                  (unsigned long long)s6.prefetched, (unsigned long long)s6.prefetch_used);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

/* A workload where LRU and cost-aware eviction differ: a hot set of long
 * (expensive) documents reused at random intervals, interleaved with a
 * stream of one-off short documents. LRU lets the stream flush the hot set;
 * locality x cost keeps it. Hit rate and saved recompute (ms) are reported. */
static void run_policy(rp_evict_policy pol, bool flash, double *hit_rate, double *saved) {
    rp_kv *kv = fake_kv();
    const int32_t hot_len = 60, cold_len = 20;
    const size_t sz_hot = 4096 + (size_t)N_LAYER * 2 * hot_len * ROW_BYTES;   /* approximate entry sizes */
    (void)sz_hot;
    enum { HOT = 12 };
    const int REQ = flash ? 600 : 1500;
    static rp_token hot[HOT][60];
    g_rng.s = 777;
    for (int i = 0; i < HOT; i++) random_tokens(hot[i], hot_len);
    rp_pool_params pp = quiet_params();
    pp.policy = pol;
    const char *dir = NULL;
    if (flash) {
        dir = subdir(pol == RP_EVICT_LRU ? "policy-flash-lru" : "policy-flash-cost");
        pp.disk_budget = 160 << 10;   /* flash holds ~ 10 hot chunks' worth */
    }
    /* RAM: room for ~8 hot chunks worth of bytes */
    const size_t budget = flash ? 24 << 10 : 8 * ((size_t)N_LAYER * 2 * hot_len * ROW_BYTES + 1024);
    rp_chunk_cache *c = pool_geo(dir, budget, &pp, SALT, pol, N_LAYER, ROW_BYTES, NULL);
    double want_ms = 0, got_ms = 0;
    int64_t lookups = 0, hits = 0;
    rp_token doc[64];
    for (int r = 0; r < REQ; r++) {
        /* each request: one hot document with probability 0.5, then 3 one-off short documents */
        const int nd = 4;
        for (int i = 0; i < nd; i++) {
            int32_t len;
            if (i == 0) {
                if (rnd() % 2) continue;
                int h = (int)(rnd() % HOT);
                memcpy(doc, hot[h], sizeof(rp_token) * hot_len);
                len = hot_len;
            } else {
                random_tokens(doc, cold_len);
                len = cold_len;
            }
            rp_chunk_span s = {.begin = 0, .len = len, .hash = rp_chunk_hash(doc, len, SALT)};
            const double cost = 1.0 * len * len / 20.0;   /* attention makes long chunks superlinear */
            lookups++;
            want_ms += cost;
            rp_chunk *f = rp_chunk_cache_find(c, doc, &s);
            if (f) {
                hits++;
                got_ms += cost;
                rp_chunk_unpin(c, f);
            } else {
                rp_chunk *ch = NULL;
                assert_int_equal(rp_chunk_cache_insert(c, NULL, doc, &s, kv, 0, cost, &ch), RP_OK);
                if (ch) {
                    ch->exact = true;
                    rp_chunk_unpin(c, ch);
                }
            }
        }
        if (flash && r % 4 == 3) assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    }
    *hit_rate = (double)hits / (double)lookups;
    *saved = got_ms / want_ms;
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_lru_vs_cost(void **state) {
    (void)state;
    double h_lru, s_lru, h_cost, s_cost;
    run_policy(RP_EVICT_LRU, false, &h_lru, &s_lru);
    run_policy(RP_EVICT_COST, false, &h_cost, &s_cost);
    print_message("RAM tier:   LRU hit rate %.3f (recompute saved %.3f) | cost-aware hit rate %.3f (saved %.3f)\n",
                  h_lru, s_lru, h_cost, s_cost);
    assert_true(s_cost > s_lru + 0.1);
    assert_true(h_cost > h_lru);
    run_policy(RP_EVICT_LRU, true, &h_lru, &s_lru);
    run_policy(RP_EVICT_COST, true, &h_cost, &s_cost);
    print_message("two tiers:  LRU hit rate %.3f (recompute saved %.3f) | cost-aware hit rate %.3f (saved %.3f)\n",
                  h_lru, s_lru, h_cost, s_cost);
    assert_true(s_cost > s_lru);
}

/* ---- threads ---- */

typedef struct stress_ctx {
    rp_chunk_cache *c;
    rp_token (*docs)[24];
    int32_t *dlen;
    int ndocs;
    atomic_int stop;
    int64_t hits, bad;
} stress_ctx;

static void *reader_main(void *arg) {
    stress_ctx *x = arg;
    uint64_t r = 12345;
    while (!atomic_load(&x->stop)) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int d = (int)((r >> 33) % (uint64_t)x->ndocs);
        rp_chunk_span s = {.begin = 0, .len = x->dlen[d], .hash = rp_chunk_hash(x->docs[d], x->dlen[d], SALT)};
        rp_chunk *f = rp_chunk_cache_find(x->c, x->docs[d], &s);
        if (f) {
            x->hits++;
            if (f->n_tokens != x->dlen[d] || memcmp(f->tokens, x->docs[d], sizeof(rp_token) * (size_t)f->n_tokens) ||
                !payload_ok(f))
                x->bad++;
            rp_chunk_unpin(x->c, f);
        }
        if ((r >> 40) % 7 == 0) {
            int32_t nc = 0;
            rp_chunk *p = rp_chunk_cache_match_partial(x->c, NULL, x->docs[d], x->dlen[d], &nc);
            if (p) rp_chunk_unpin(x->c, p);
        }
    }
    return NULL;
}

static void test_concurrent_stress(void **state) {
    (void)state;
    const char *dir = subdir("stress");
    rp_kv *kv = fake_kv();
    rp_pool_params pp = rp_pool_default_params();
    pp.write_delay_ms = 0;
    pp.disk_budget = 256 << 10;
    pp.half_life = 64;
    rp_chunk_cache *c = pool(dir, 48 << 10, &pp);
    enum { DOCS = 64 };
    static rp_token docs[DOCS][24];
    static int32_t dlen[DOCS];
    for (int d = 0; d < DOCS; d++) {
        dlen[d] = 8 + (int32_t)(rnd() % 17);
        random_tokens(docs[d], dlen[d]);
    }
    stress_ctx x = {.c = c, .docs = docs, .dlen = dlen, .ndocs = DOCS};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader_main, &x), 0);
    rp_token prompt[8 * 24];
    rp_chunk_span sp[8];
    rp_chunk *held[64];
    int nheld = 0;
    const double t_end = now_s() + 3.0;
    int ops = 0;
    while (now_s() < t_end) {
        ops++;
        const int nd = 1 + (int)(rnd() % 6);
        int32_t off = 0;
        for (int i = 0; i < nd; i++) {
            int d = (int)(rnd() % DOCS);
            memcpy(prompt + off, docs[d], sizeof(rp_token) * (size_t)dlen[d]);
            sp[i] = (rp_chunk_span){.begin = off, .len = dlen[d], .hash = rp_chunk_hash(docs[d], dlen[d], SALT)};
            off += dlen[d];
        }
        const uint64_t op = rnd() % 100;
        if (op < 60) {
            rp_chunk_cache_busy(c, true);
            rp_chunk *m[8];
            int32_t k = rp_chunk_cache_match_prefix(c, prompt, sp, nd, m);
            rp_chunk_cache_busy(c, false);
            for (int32_t i = 0; i < k; i++) {
                assert_true(payload_ok(m[i]) || m[i]->pos0 - POS_OFF != sp[i].begin);
                assert_memory_equal(m[i]->tokens, prompt + sp[i].begin, sizeof(rp_token) * (size_t)sp[i].len);
            }
            rp_chunk *parent = k ? m[k - 1] : NULL, *mine[8];
            int n_mine = 0;
            for (int32_t i = k; i < nd; i++) {
                rp_chunk *ch = NULL;
                assert_int_equal(rp_chunk_cache_insert(c, parent, prompt, &sp[i], kv, sp[i].begin, 1.0 * sp[i].len, &ch),
                                 RP_OK);
                if (!ch) break;
                ch->exact = rnd() % 2;
                mine[n_mine++] = ch;
                parent = ch;
            }
            for (int i = n_mine - 1; i >= 0; i--) {
                if (nheld < 64 && rnd() % 8 == 0) held[nheld++] = mine[i];
                else rp_chunk_unpin(c, mine[i]);
            }
            for (int32_t i = k - 1; i >= 0; i--) rp_chunk_unpin(c, m[i]);
        } else if (op < 80 && nheld) {
            int i = (int)(rnd() % (uint64_t)nheld);
            assert_true(payload_ok(held[i]));
            rp_chunk_unpin(c, held[i]);
            held[i] = held[--nheld];
        } else if (op < 85) {
            rp_chunk_cache_evict_to(c, (size_t)(rnd() % (48 << 10)));
        } else if (op < 87) {
            assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
        } else if (op < 88) {
            uint64_t freed;
            assert_int_equal(rp_chunk_cache_evict_disk(c, 128 << 10, &freed), RP_OK);
        } else {
            rp_subchunk_match sm[4];
            int32_t nsm = 0;
            assert_int_equal(rp_chunk_cache_find_subchunks(c, prompt, off, 8, sm, 4, &nsm), RP_OK);
        }
        assert_true(rp_chunk_cache_stats(c).bytes <= (48 << 10));
    }
    atomic_store(&x.stop, 1);
    pthread_join(th, NULL);
    while (nheld) rp_chunk_unpin(c, held[--nheld]);
    assert_int_equal(x.bad, 0);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    print_message("stress: %d ops + %lld reader hits; written %llu, loads %llu, prefetched %llu, evictions %llu, flash "
                  "evictions %llu\n",
                  ops, (long long)x.hits, (unsigned long long)st.written, (unsigned long long)st.loads,
                  (unsigned long long)st.prefetched, (unsigned long long)st.evictions,
                  (unsigned long long)st.disk_evictions);
    rp_chunk_cache_free(c);
    rp_store *sto = NULL;
    rp_store_params sp2 = rp_store_default_params();
    assert_int_equal(rp_store_open(dir, &sp2, &sto), RP_OK);
    uint64_t ok, bad;
    assert_int_equal(rp_store_verify(sto, false, NULL, NULL, &ok, &bad), RP_OK);
    assert_int_equal(bad, 0);
    rp_store_close(sto);
    free_kv(kv);
}

/* Ablation switches: synchronous persistence, no RAM pool, naive store. */
static void test_ablations(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_token t[100];
    random_tokens(t, 100);
    rp_chunk_span s[5];
    make_spans(t, 5, 20, s);
    /* synchronous persistence: on flash as soon as the last pin goes */
    rp_pool_params pp = quiet_params();
    pp.sync_persist = true;
    pp.write_delay_ms = 100000;   /* the background writer would wait "forever" */
    rp_chunk_cache *c = pool(subdir("abl-sync"), 1 << 20, &pp);
    insert_chain(c, kv, t, s, 5, NULL);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.written, 5);
    assert_int_equal(st.dirty, 0);
    assert_true(st.write_ms > 0);
    rp_chunk_cache_free(c);

    /* no RAM pool: budget 0, every chunk transient; lookups read flash each time */
    pp = quiet_params();
    c = pool(subdir("abl-nopool"), 0, &pp);
    insert_chain(c, kv, t, s, 5, NULL);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.written, 5);
    assert_int_equal(st.n_chunks, 0);
    assert_int_equal(st.transient, 0);
    for (int rep = 0; rep < 2; rep++) {
        rp_chunk *m[5];
        assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
        for (int i = 0; i < 5; i++) {
            assert_true(payload_ok(m[i]));
            assert_true(m[i]->exact);
        }
        for (int i = 4; i >= 0; i--) rp_chunk_unpin(c, m[i]);
    }
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.flash_hits, 10);
    assert_int_equal(st.transient, 0);
    assert_int_equal(st.bytes, 0);
    rp_chunk_cache_free(c);

    /* naive store and LRU: same answers */
    rp_store_params sp = rp_store_default_params();
    sp.naive = true;
    pp = quiet_params();
    pp.policy = RP_EVICT_LRU;
    const char *dir = subdir("abl-naive");
    c = pool_geo(dir, 1 << 20, &pp, SALT, RP_EVICT_LRU, N_LAYER, ROW_BYTES, &sp);
    insert_chain(c, kv, t, s, 5, NULL);
    rp_chunk_cache_free(c);
    c = pool_geo(dir, 1 << 20, &pp, SALT, RP_EVICT_LRU, N_LAYER, ROW_BYTES, &sp);
    rp_chunk *m[5];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 4; i >= 0; i--) {
        assert_true(payload_ok(m[i]));
        rp_chunk_unpin(c, m[i]);
    }
    rp_chunk_cache_free(c);

    /* a read-only store: lookups only */
    sp = rp_store_default_params();
    sp.read_only = true;
    c = pool_geo(subdir("abl-sync"), 1 << 20, NULL, SALT, RP_EVICT_AUTO, N_LAYER, ROW_BYTES, &sp);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 4; i >= 0; i--) rp_chunk_unpin(c, m[i]);
    rp_chunk *nw = NULL;
    rp_chunk_span extra = s[0];
    extra.hash ^= 5;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &extra, kv, 0, 1, &nw), RP_OK);
    rp_chunk_unpin(c, nw);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    assert_int_equal(rp_chunk_cache_stats(c).written, 0);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

/* Sub-chunks through the pool, then placed from a chunk fetched by id. */
static void test_pool_subchunks(void **state) {
    (void)state;
    const char *dir = subdir("pool-sub");
    rp_kv *kv = fake_kv();
    rp_token t[400];
    random_tokens(t, 400);
    rp_chunk_span s[2] = {{.begin = 0, .len = 200}, {.begin = 200, .len = 200}};
    for (int i = 0; i < 2; i++) s[i].hash = rp_chunk_hash(t + s[i].begin, 200, SALT);
    rp_pool_params pp = quiet_params();
    rp_chunk_cache *c = pool(dir, 8 << 20, &pp);
    for (int i = 0; i < 2; i++) assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, s[i].begin, 1, NULL), RP_OK);
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    rp_token p[150];
    random_tokens(p, 150);
    memcpy(p + 40, t + 250, 80 * sizeof(rp_token));   /* tokens 50..130 of chunk 2 */
    rp_subchunk_match m[4];
    int32_t n = 0;
    assert_int_equal(rp_chunk_cache_find_subchunks(c, p, 150, 32, m, 4, &n), RP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(m[0].chunk_off, 50);
    assert_int_equal(m[0].prompt_off, 40);
    assert_int_equal(m[0].len, 80);
    rp_chunk *ch = rp_chunk_cache_get(c, m[0].chunk_id);
    assert_non_null(ch);
    assert_memory_equal(ch->tokens + m[0].chunk_off, p + 40, 80 * sizeof(rp_token));
    const uint64_t id2 = ch->id;
    rp_chunk_unpin(c, ch);
    /* the caller's dense vectors through the pool: with the query vector nearest to chunk 2's, chunk 2 is a
     * candidate whatever the keywords say, and a short shared run (12 tokens, minimum 10) is found in it */
    const float v2[4] = {0, 1, 0, 0}, q[4] = {0.1f, 1, 0, 0};
    assert_int_equal(rp_chunk_cache_put_vector(c, id2, v2, 4), RP_OK);
    /* a 12-token run of chunk 2 that shares no keyword with it (the first such
     * offset: whether a run holds a keyword depends on the random tokens) */
    random_tokens(p, 150);
    int32_t off = -1;
    for (int32_t o = 0; o + 12 <= 200 && off < 0; o++) {
        memcpy(p + 60, t + 200 + o, 12 * sizeof(rp_token));
        assert_int_equal(rp_chunk_cache_find_subchunks(c, p, 150, 10, m, 4, &n), RP_OK);
        if (n == 0) off = o;   /* keywords alone miss the run: the vector must bring chunk 2 in */
    }
    assert_true(off >= 0);
    assert_int_equal(rp_chunk_cache_find_subchunks_vec(c, p, 150, 10, q, 4, 1, m, 4, &n), RP_OK);
    assert_int_equal(n, 1);
    assert_true(m[0].chunk_id == id2);
    assert_int_equal(m[0].chunk_off, off);
    assert_int_equal(m[0].prompt_off, 60);
    assert_int_equal(m[0].len, 12);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

/* Lookup latency of a prompt against 100k chunks: in the RAM pool, and on flash through the pool. */
static void test_bench_pool_lookup_100k(void **state) {
    (void)state;
    const int32_t N = 100000, TOK = 16;
    rp_kv *kv = fake_kv_geo(1, 16);
    rp_token *toks = malloc(sizeof(rp_token) * (size_t)N * TOK);
    random_tokens(toks, N * TOK);
    rp_chunk_span *sp = malloc(sizeof *sp * (size_t)N);
    for (int32_t i = 0; i < N; i++)
        sp[i] = (rp_chunk_span){.begin = i * TOK, .len = TOK, .hash = rp_chunk_hash(toks + (size_t)i * TOK, TOK, SALT)};
    const char *dir = subdir("pool100k");
    rp_pool_params pp = quiet_params();
    rp_chunk_cache *c = pool_geo(dir, (size_t)256 << 20, &pp, SALT, RP_EVICT_AUTO, 1, 16, NULL);
    /* chains of 8; cells: a fake kv has 4096 cells, so copy from cell (i % 256) * 16 */
    double t0 = now_s();
    rp_chunk *parent = NULL;
    for (int32_t i = 0; i < N; i++) {
        rp_chunk_span s1 = sp[i];
        rp_chunk *ch = NULL;
        kv->n = N_CTX;
        assert_int_equal(rp_chunk_cache_insert(c, i % 8 ? parent : NULL, toks, &s1, kv, (i % 256) * TOK, 1, &ch), RP_OK);
        assert_non_null(ch);
        ch->exact = true;
        if (parent) rp_chunk_unpin(c, parent);
        parent = ch;
    }
    rp_chunk_unpin(c, parent);
    const double t_ins = now_s() - t0;
    t0 = now_s();
    assert_int_equal(rp_chunk_cache_flush(c), RP_OK);
    const double t_flush = now_s() - t0;
    const int reps = 200;
    double t_ram = 0, t_flash = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {   /* empty the pool: every lookup goes to flash */
            rp_chunk_cache_free(c);
            c = pool_geo(dir, (size_t)256 << 20, &pp, SALT, RP_EVICT_AUTO, 1, 16, NULL);
        }
        t0 = now_s();
        for (int r = 0; r < reps; r++) {
            const int32_t c0 = (int32_t)(rnd() % (uint64_t)(N / 8)) * 8;
            rp_chunk *m[8];
            rp_chunk_span s8[8];
            for (int k = 0; k < 8; k++) s8[k] = sp[c0 + k];
            assert_int_equal(rp_chunk_cache_match_prefix(c, toks, s8, 8, m), 8);
            for (int k = 7; k >= 0; k--) rp_chunk_unpin(c, m[k]);
            for (int k = 0; k < 24; k++) {
                const int32_t i = (int32_t)(rnd() % (uint64_t)N);
                rp_chunk *f = rp_chunk_cache_find(c, toks, &sp[i]);
                assert_non_null(f);
                rp_chunk_unpin(c, f);
            }
        }
        *(pass ? &t_flash : &t_ram) = (now_s() - t0) / reps * 1e3;
    }
    print_message("pool with 100k chunks (insert %.2f s, flush to flash %.2f s): 32-lookup prompt %.4f ms from RAM, "
                  "%.3f ms from flash (empty pool, incl. payload loads)\n",
                  t_ins, t_flush, t_ram, t_flash);
    /* timing is reported, not asserted: unit tests run on shared, loaded
     * machines; the < 2 ms figure is checked in bench/RESULTS.md */
    assert_true(t_ram > 0 && t_flash > 0);
    rp_chunk_cache_free(c);
    free(sp);
    free(toks);
    free_kv(kv);
}

/* The engine's whole match for one prompt — prefix lookups, content lookups,
 * and the sub-chunk pass (keyword candidates + LCS over each) on the runs
 * left new — against a store of 100k chunks OF THE SAME MODEL whose keywords
 * overlap the prompt's (chunks are built from a bank of 8-token phrases that
 * the prompt's documents also use), timed through rp_reuse_analyze (the
 * match without compute). Cold: an empty pool, hits load from flash; warm:
 * the same prompt again. Printed, not asserted (shared machines). */
static void test_bench_engine_match_100k(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    const int32_t V = m->hp.n_vocab, n_layer = m->hp.n_layer;
    const size_t row = rp_type_row_size(RP_TYPE_F16, m->hp.n_head_kv * m->hp.head_dim);
    rp_reuse_params rp = rp_reuse_default_params();   /* blend, sub-chunks of >= 32 tokens */
    rp.cache_bytes = (size_t)64 << 20;
    rp_reuse *e = NULL;
    assert_int_equal(rp_reuse_create(m, RP_TYPE_F16, 2048, rp, &e), RP_OK);
    const uint64_t salt = rp_reuse_salt(e);
    enum { N = 100000, TOK = 32, PH = 8, BANK = 4000, B = 5000 };
    static rp_token bank[BANK][PH];
    for (int i = 0; i < BANK; i++)
        for (int k = 0; k < PH; k++) bank[i][k] = 3 + (rp_token)(rnd() % (uint64_t)(V - 3));
    const char *dir = subdir("engine100k");
    rp_store_params sp = rp_store_default_params();
    sp.zstd_level = 1;   /* zero payloads: ~nothing on disk, the rows and keyword index are what is measured */
    rp_store *s = NULL;
    assert_int_equal(rp_store_open(dir, &sp, &s), RP_OK);
    assert_int_equal(rp_store_bind_model(s, salt, RP_TYPE_F16, n_layer, row, m->name, true), RP_OK);
    const rp_token bos = rp_tokenizer_bos(m->tok);
    /* the prompt: BOS + 4 documents of 4 x 32 tokens made of bank phrases + a 16-token tail. Document 0's first
     * chunk is stored as the root (a prefix hit), document 2's second chunk is stored under another parent (a
     * content hit); the rest shares phrases (keywords) with thousands of stored chunks */
    rp_token prompt[1 + 4 * 4 * TOK + 16];
    int32_t bnd[5], nb = 0, n = 0;
    prompt[n++] = bos >= 0 ? bos : 1;
    for (int d = 0; d < 4; d++) {
        bnd[nb++] = n;
        for (int k = 0; k < 4 * TOK / PH; k++) {
            memcpy(prompt + n, bank[rnd() % BANK], sizeof(rp_token) * PH);
            n += PH;
        }
    }
    bnd[nb++] = n;
    for (int k = 0; k < 16; k++) prompt[n++] = 3 + (rp_token)(rnd() % (uint64_t)(V - 3));
    rp_store_put_item *it = calloc(B, sizeof *it);
    rp_token *toks = malloc(sizeof(rp_token) * (size_t)B * TOK);
    const size_t kv_bytes = (size_t)n_layer * 2 * TOK * row;
    uint8_t *zero = calloc(1, kv_bytes + (size_t)n_layer * 2 * row);   /* also fits the 33-token root */
    assert_non_null(it);
    assert_non_null(toks);
    assert_non_null(zero);
    uint64_t id = rp_store_next_id(s), chain = 0;
    double t0 = now_s();
    for (int32_t base = 0; base < N; base += B) {
        for (int32_t j = 0; j < B; j++) {
            const int32_t i = base + j;
            rp_token *t = toks + (size_t)j * TOK;
            int32_t len = TOK;
            bool root = i % 4 == 0;
            int32_t pos0 = 1 + (i % 4) * TOK;
            if (i == 0) {   /* the prompt's first chunk: BOS + document 0's first 32 tokens, at position 0 */
                len = bnd[0] + TOK;
                pos0 = 0;
            } else if (i == 1) {   /* document 2's second chunk, under another parent */
                memcpy(t, prompt + bnd[2] + TOK, sizeof(rp_token) * TOK);
            } else {
                for (int k = 0; k < TOK / PH; k++) memcpy(t + k * PH, bank[rnd() % BANK], sizeof(rp_token) * PH);
            }
            const rp_token *tt = i == 0 ? prompt : t;
            const uint64_t h = rp_chunk_hash(tt, len, salt);
            chain = rp_chunk_chain(root ? 0 : chain, h);
            it[j] = (rp_store_put_item){0};
            it[j].meta = (rp_store_chunk){.id = id, .hash = h, .chain = chain, .parent_id = root ? 0 : id - 1,
                                          .n_tokens = len, .pos0 = pos0, .exact = true, .recompute_ms = 1};
            it[j].tokens = tt;
            it[j].kv = zero;
            id++;
        }
        assert_int_equal(rp_store_put(s, it, B, 0), RP_OK);
        for (int32_t j = 0; j < B; j++) assert_int_equal(it[j].status, RP_OK);
    }
    const double t_fill = now_s() - t0;
    rp_store_close(s);
    free(it);
    free(toks);
    free(zero);
    /* the engine's chunking must cut where the stored chunks were cut: document boundaries + 32-token pieces */
    int32_t cuts[1 + 4 * 4 + 1], nc = 0;
    for (int d = 0; d < 4; d++)
        for (int k = d == 0 ? 1 : 0; k < 4; k++) cuts[nc++] = bnd[d] + k * TOK;
    cuts[nc++] = bnd[4];
    double cold = 0, warm = 1e9, match_cold = 0, warm_nosub = 1e9;
    rp_reuse_analysis an;
    for (int rep = 0; rep < 9; rep++) {
        if (rep == 6) {   /* the same without the sub-chunk pass: prefix + content lookups alone */
            rp_reuse_get_params(e)->subchunk_min = 0;
        }
        if (rep == 0 || rep == 3) {   /* a fresh engine and pool over the store: cold */
            rp_reuse_free(e);
            assert_int_equal(rp_reuse_create(m, RP_TYPE_F16, 2048, rp, &e), RP_OK);
            rp_pool_params pp = rp_pool_default_params();
            pp.no_prefetch = true;
            rp_store_params sp2 = rp_store_default_params();
            assert_int_equal(rp_store_open(dir, &sp2, &s), RP_OK);
            assert_int_equal(rp_chunk_cache_attach_store(rp_reuse_cache(e), s, salt, m->name, &pp), RP_OK);
        }
        t0 = now_s();
        assert_int_equal(rp_reuse_analyze(e, prompt, n, cuts, nc, &an), RP_OK);
        const double dt = (now_s() - t0) * 1e3;
        if (rep == 0 || rep == 3) {
            if (rep == 0 || dt < cold) {
                cold = dt;
                match_cold = an.stats.match_ms;
            }
        } else if (rep >= 6) {
            if (dt < warm_nosub) warm_nosub = dt;
        } else if (dt < warm) {
            warm = dt;
        }
        if (rep == 5) assert_true(an.stats.n_nonprefix >= TOK);   /* the stored content chunk */
    }
    print_message("engine match vs 100k stored chunks of this model (filled in %.1f s): prompt of %d tokens in %d "
                  "chunks, reused %d prefix + %d non-prefix (%d via sub-chunks): whole match %.3f ms cold (empty pool, "
                  "match %.3f ms), %.3f ms warm (prefix + content + keyword/LCS sub-chunk pass); without the "
                  "sub-chunk pass %.3f ms warm\n",
                  t_fill, n, an.n_spans, an.n_prefix, an.stats.n_nonprefix, an.stats.n_subchunk, cold, match_cold, warm,
                  warm_nosub);
    assert_int_equal(an.n_spans, nc + 1);
    assert_true(an.n_prefix >= 1 + TOK);           /* the stored root */
    rp_reuse_free(e);
    rp_model_free(m);
}

/* async_load: flash -> RAM layer by layer on the pool's loader while the
 * caller "computes" layer by layer; how much of the load time stays exposed.
 * (Payloads come from the page cache here; on a phone the load is flash-bound
 * and larger, so the overlap matters more.) */
static void test_bench_async_pipeline(void **state) {
    (void)state;
    const int32_t L = 16, TOK = 256, NCH = 4;
    const size_t ROW = 1024;   /* a 1B-class model: 16 layers, F16 K/V rows of 512 dims */
    rp_kv *kv = fake_kv_ctx(L, ROW, NCH * TOK);
    rp_token t[4 * 256];
    random_tokens(t, NCH * TOK);
    rp_chunk_span s[4];
    make_spans(t, NCH, TOK, s);
    const char *dir = subdir("pipeline");
    rp_pool_params pp = quiet_params();
    rp_chunk_cache *c = pool_geo(dir, (size_t)256 << 20, &pp, SALT, RP_EVICT_AUTO, L, ROW, NULL);
    insert_chain(c, kv, t, s, NCH, NULL);
    rp_chunk_cache_free(c);
    const double bytes = (double)NCH * L * 2 * TOK * ROW;
    /* demand loads on the caller's thread (the default): all exposed */
    c = pool_geo(dir, (size_t)256 << 20, &pp, SALT, RP_EVICT_AUTO, L, ROW, NULL);
    rp_chunk *m[4];
    double t0 = now_s();
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, NCH, m), NCH);
    const double sync_ms = (now_s() - t0) * 1e3;
    for (int i = NCH - 1; i >= 0; i--) rp_chunk_unpin(c, m[i]);
    rp_chunk_cache_free(c);
    /* async: the lookup returns at once; each layer waits only for its own bytes */
    pp.async_load = true;
    c = pool_geo(dir, (size_t)256 << 20, &pp, SALT, RP_EVICT_AUTO, L, ROW, NULL);
    t0 = now_s();
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, NCH, m), NCH);
    const double match_ms = (now_s() - t0) * 1e3;
    const double compute_ms_per_layer = sync_ms / L;   /* compute about as long as the load */
    double wait_ms = 0;
    for (int32_t l = 0; l < L; l++) {
        double tw = now_s();
        for (int i = 0; i < NCH; i++) assert_int_equal(rp_chunk_cache_wait_layer(c, m[i], l), RP_OK);
        wait_ms += (now_s() - tw) * 1e3;
        double tc = now_s();
        while ((now_s() - tc) * 1e3 < compute_ms_per_layer) {}
    }
    for (int i = 0; i < NCH; i++) assert_true(payload_ok(m[i]));
    for (int i = NCH - 1; i >= 0; i--) rp_chunk_unpin(c, m[i]);
    const double exposed = match_ms + wait_ms;
    print_message("pipeline: %.1f MiB in %d chunks x %d layers; demand load %.2f ms (%.0f MiB/s, all exposed); "
                  "async: lookup %.3f ms + waits %.2f ms exposed = %.0f%% of the load hidden behind %.2f ms/layer compute\n",
                  bytes / 1048576.0, NCH, L, sync_ms, bytes / 1048576.0 / (sync_ms / 1e3), match_ms, wait_ms,
                  100.0 * (1.0 - exposed / sync_ms), compute_ms_per_layer);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);   /* e.g. ./test_pool test_restart */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart),          cmocka_unit_test(test_bitflip_is_a_miss),
        cmocka_unit_test(test_redirty),          cmocka_unit_test(test_budgets_hold),
        cmocka_unit_test(test_dirty_eviction_kept),
        cmocka_unit_test(test_lru_vs_cost),      cmocka_unit_test(test_concurrent_stress),
        cmocka_unit_test(test_prefetch_coaccess_children),
        cmocka_unit_test(test_ablations),        cmocka_unit_test(test_pool_subchunks),
        cmocka_unit_test(test_bench_pool_lookup_100k), cmocka_unit_test(test_bench_engine_match_100k),
        cmocka_unit_test(test_bench_async_pipeline),
    };
    return rp_test_main(tests, NULL, NULL);
}
