/* TODO(issue 15): moves to rp_engine_create per arm once the public API exposes the chunk cache's pool and
 * store parameters and stats (includes internals: it wires model, context, reuse engine, store and calibration). */
/* bench_ablation.c — `reprise bench ablation`: TTFT of the KV reuse system with each component switched off in turn. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "calib.h"
#include "calib_store.h"
#include "cli.h"
#include "progress.h"
#include "core/bigmem.h"
#include "core/error.h"
#include "kernels/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "prompt.h"
#include "report.h"
#include "reuse/chunk.h"
#include "reuse/engine.h"
#include "store/store.h"
#include "workload.h"

/* ---- variants ---- */

typedef struct variant_def {
    const char *name;
    const char *what;
    bool static_mode, fixed_shapes, naive_schedule;
    bool no_ram, naive_store, lru, no_pipeline, sync_persist, no_prefetch;
} variant_def;

static const variant_def k_variants[] = {
    {.name = "full", .what = "everything on"},
    {.name = "no-ram-pool", .what = "RAM budget 0: every hit is a flash load", .no_ram = true},
    {.name = "naive-store", .what = "store without secondary indexes", .naive_store = true},
    {.name = "lru-eviction", .what = "LRU instead of cost-aware eviction", .lru = true},
    {.name = "no-pipeline", .what = "cached KV placed before compute", .no_pipeline = true},
    {.name = "sync-persist", .what = "flash writes on the request thread", .sync_persist = true},
    {.name = "no-prefetch", .what = "no prefetch thread", .no_prefetch = true},
    {.name = "static", .what = "static shapes (calibrated)", .static_mode = true},
    {.name = "static-fixed-shapes", .what = "static, default L_P/L_S", .static_mode = true, .fixed_shapes = true},
    {.name = "static-no-merge", .what = "static, one call type per segment", .static_mode = true, .naive_schedule = true},
};
#define N_VARIANTS ((int)(sizeof k_variants / sizeof k_variants[0]))

/* What one variant measured, summed over the timed queries (means are taken at report time). */
typedef struct vrun {
    const variant_def *v;
    bool ok;
    double *ttft;              /* [n_timed], queue wait included */
    int n;
    rp_static_cfg cfg;         /* the shapes it ran with (static variants) */
    double queue_ms, commit_ms, prefill_ms;
    double n_prefix, n_nonprefix, n_recomputed, n_new, n_pad, n_rows;
    double load_ms, exposed_ms, placed_bytes;
    double ram_hits, flash_hits, misses, flash_bytes, flash_rd_ms;
    double writes_prefill, writes_commit, wms_prefill, wms_commit;
    rp_cache_stats tot;        /* pool counters over the timed queries (deltas) */
    uint64_t store_bytes;      /* the store directory after the run (flushed) */
    /* budgets, sampled after every query (warm-up included): VmRSS above the
     * baseline taken before the first query (model, context and KV pages
     * already touched), the pool's accounted bytes (budget + transient), and the
     * store directory on disk (db + WAL + payload files) */
    uint64_t rss_base, rss_growth_max, pool_max, disk_max;
    double sample_ms;          /* time the samples took (added to the gap, not to any TTFT) */
    double filler_s;
    double mean, p50, p95;
} vrun;

/* ---- small helpers ---- */

static double now_ms(void) { return cli_now() * 1e3; }

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double rng_unit(uint64_t *s) { return (double)(rng(s) >> 11) * (1.0 / 9007199254740992.0); }

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static uint64_t g_du;   /* nftw callbacks take no user pointer */

static int du_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)p;
    (void)ftw;
    if (type == FTW_F) g_du += (uint64_t)sb->st_blocks * 512;
    return 0;
}

static uint64_t dir_bytes(const char *dir) {
    g_du = 0;
    nftw(dir, du_cb, 16, FTW_PHYS);
    return g_du;
}

static int rm_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if (type == FTW_DP) rmdir(p);
    else unlink(p);
    return 0;
}

static void rm_tree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- the workload ---- */

typedef struct abl_work {
    rp_wprompt *q;             /* [n_q] */
    int n_q;
    int32_t max_tokens;
    double first_share;        /* queries whose first document is the corpus's most popular one */
} abl_work;

static void work_free(abl_work *w) {
    for (int i = 0; i < w->n_q; i++) {
        free(w->q[i].toks);
        free(w->q[i].bounds);
    }
    free(w->q);
    memset(w, 0, sizeof *w);
}

/* D random-token documents; Q queries = [BOS] + K distinct documents drawn by
 * Zipf(s) popularity (document i has weight 1/(i+1)^s), shuffled, + a new tail.
 * Caller boundaries at every document and at the tail. */
static bool work_build(const rp_model *m, int D, int32_t doc_len, int K, int32_t tail, int Q, double zipf, uint64_t seed,
                       abl_work *w) {
    memset(w, 0, sizeof *w);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 0x51ab1a7e;
    if (!s) s = 1;
    const int32_t V = m->hp.n_vocab;
    int32_t lo, hi;   /* as the synthetic workload */
    rp_workload_token_range(V, &lo, &hi);
    const rp_token bos = rp_tokenizer_bos(m->tok);
    rp_token *docs = malloc(sizeof(rp_token) * (size_t)D * (size_t)doc_len);
    double *cdf = malloc(sizeof(double) * (size_t)D);
    int *pick = malloc(sizeof(int) * (size_t)K);
    w->q = calloc((size_t)Q, sizeof *w->q);
    bool ok = docs && cdf && pick && w->q;
    if (ok) {
        for (size_t i = 0; i < (size_t)D * (size_t)doc_len; i++) docs[i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
        double acc = 0;
        for (int i = 0; i < D; i++) cdf[i] = (acc += pow(i + 1.0, -zipf));
        for (int i = 0; i < D; i++) cdf[i] /= acc;
    }
    int first_top = 0;
    for (int qi = 0; ok && qi < Q; qi++) {
        for (int k = 0; k < K; k++) {
            int d = 0;
            for (int tries = 0;; tries++) {
                double u = rng_unit(&s);
                int a = 0, b = D - 1;
                while (a < b) {
                    int mid = (a + b) / 2;
                    if (cdf[mid] < u) a = mid + 1;
                    else b = mid;
                }
                d = a;
                bool dup = false;
                for (int j = 0; j < k; j++) dup |= pick[j] == d;
                if (!dup) break;
                if (tries > 64) {   /* very skewed and K near D: take the next unused one */
                    for (d = 0; d < D; d++) {
                        dup = false;
                        for (int j = 0; j < k; j++) dup |= pick[j] == d;
                        if (!dup) break;
                    }
                    break;
                }
            }
            pick[k] = d;
        }
        for (int k = K - 1; k > 0; k--) {   /* random order: documents are reused at any position */
            int j = (int)(rng(&s) % (uint64_t)(k + 1));
            int t = pick[k];
            pick[k] = pick[j];
            pick[j] = t;
        }
        first_top += pick[0] == 0;
        rp_wprompt *p = &w->q[qi];
        const int32_t n = (bos >= 0 ? 1 : 0) + K * doc_len + tail;
        p->toks = malloc(sizeof(rp_token) * (size_t)n);
        p->bounds = malloc(sizeof(int32_t) * (size_t)(K + 1));
        w->n_q = qi + 1;   /* work_free releases this query's buffers too */
        if (!p->toks || !p->bounds) {
            ok = false;
            break;
        }
        int32_t at = 0;
        if (bos >= 0) p->toks[at++] = bos;
        for (int k = 0; k < K; k++) {
            if (at > 0) p->bounds[p->n_bounds++] = at;
            memcpy(p->toks + at, docs + (size_t)pick[k] * (size_t)doc_len, sizeof(rp_token) * (size_t)doc_len);
            at += doc_len;
        }
        if (tail > 0) {
            p->bounds[p->n_bounds++] = at;
            for (int32_t i = 0; i < tail; i++) p->toks[at++] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
        }
        p->n = at;
        if (at > w->max_tokens) w->max_tokens = at;
    }
    w->first_share = Q > 0 ? (double)first_top / Q : 0;
    free(docs);
    free(cdf);
    free(pick);
    if (!ok) work_free(w);
    return ok;
}

/* The crafted workload, where LRU and cost-aware eviction part ways: H hot
 * LONG documents (hot_len tokens), each query opening with one of them
 * (uniformly, with probability hot_share: a prefix chunk, exact, costly to
 * recompute and the parent of the rest), followed by S one-off SHORT
 * documents of short_len tokens never seen again + a new tail. The RAM pool
 * and the flash budget are smaller than the hot set, so a hot document comes
 * back after more one-off bytes than either tier holds: LRU evicts it before
 * its next use (the loop pathology), while locality x cost keeps the hot,
 * long, prefix-parent chunks and drops the one-offs. Caller boundaries at
 * every document and at the tail. */
static bool work_build_crafted(const rp_model *m, int H, int32_t hot_len, int S, int32_t short_len, int32_t tail, int Q,
                               double hot_share, uint64_t seed, abl_work *w) {
    memset(w, 0, sizeof *w);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 0xc4af7ed;
    if (!s) s = 1;
    int32_t lo, hi;
    rp_workload_token_range(m->hp.n_vocab, &lo, &hi);
    const rp_token bos = rp_tokenizer_bos(m->tok);
    rp_token *hot = malloc(sizeof(rp_token) * (size_t)H * (size_t)hot_len);
    w->q = calloc((size_t)Q, sizeof *w->q);
    bool ok = hot && w->q;
    for (size_t i = 0; ok && i < (size_t)H * (size_t)hot_len; i++) hot[i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
    int with_hot = 0;
    for (int qi = 0; ok && qi < Q; qi++) {
        const int h = rng_unit(&s) < hot_share ? (int)(rng(&s) % (uint64_t)H) : -1;
        rp_wprompt *p = &w->q[qi];
        const int32_t n = (bos >= 0 ? 1 : 0) + (h >= 0 ? hot_len : 0) + S * short_len + tail;
        p->toks = malloc(sizeof(rp_token) * (size_t)(n > 0 ? n : 1));
        p->bounds = malloc(sizeof(int32_t) * (size_t)(S + 2));
        w->n_q = qi + 1;
        if (!p->toks || !p->bounds) {
            ok = false;
            break;
        }
        int32_t at = 0;
        if (bos >= 0) p->toks[at++] = bos;
        if (h >= 0) {
            memcpy(p->toks + at, hot + (size_t)h * (size_t)hot_len, sizeof(rp_token) * (size_t)hot_len);
            at += hot_len;
            with_hot++;
        }
        for (int k = 0; k < S + 1; k++) {   /* S one-off documents, then the tail: fresh tokens each */
            const int32_t len = k < S ? short_len : tail;
            if (len <= 0) continue;
            if (at > 0) p->bounds[p->n_bounds++] = at;
            for (int32_t i = 0; i < len; i++) p->toks[at++] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
        }
        p->n = at;
        if (at > w->max_tokens) w->max_tokens = at;
    }
    w->first_share = Q > 0 ? (double)with_hot / Q : 0;
    free(hot);
    if (!ok) work_free(w);
    return ok;
}

/* ---- budgets: process RSS and the store's size on disk, sampled per query ---- */

/* VmRSS in bytes (0 if /proc is not there). */
static uint64_t rss_bytes(void) {
    const long long b = rp_bigmem_rss_bytes();
    return b > 0 ? (uint64_t)b : 0;
}

/* ---- the store: filler rows ---- */

#define FILLER_SALT 0xf111e2f111e2f111ULL
#define FILLER_TOK 16
#define FILLER_ROW 16   /* bytes per K / V row of the filler model: 512-byte payloads */

/* N rows of a separate tiny "filler" model (chains of 8, 16 random tokens,
 * 512-byte payloads, cold: heat 0), so the database is as large as a
 * long-lived store's: indexed lookups stay O(log N), a naive store scans them. */
static rp_status fill_store(const char *dir, const rp_store_params *sp, long n, uint64_t seed) {
    rp_store *s = NULL;
    RP_TRY(rp_store_open(dir, sp, &s));
    rp_status st = rp_store_bind_model(s, FILLER_SALT, RP_TYPE_F16, 1, FILLER_ROW, "ablation-filler", true);
    const int32_t B = 5000;
    rp_store_put_item *it = calloc((size_t)B, sizeof *it);
    rp_token *toks = malloc(sizeof(rp_token) * (size_t)B * FILLER_TOK);
    static const uint8_t kv[2 * FILLER_TOK * FILLER_ROW];   /* zeros: content is irrelevant */
    if (st == RP_OK && (!it || !toks)) st = rp_errorf(RP_ERR_NOMEM, "bench ablation: out of memory");
    uint64_t r = seed * 0x2545f4914f6cdd1dULL + 3, id = st == RP_OK ? rp_store_next_id(s) : 0, chain = 0;
    for (long base = 0; st == RP_OK && base < n; base += B) {
        const int32_t cnt = n - base < B ? (int32_t)(n - base) : B;
        for (int32_t j = 0; j < cnt; j++) {
            rp_token *t = toks + (size_t)j * FILLER_TOK;
            for (int k = 0; k < FILLER_TOK; k++) t[k] = (rp_token)(rng(&r) % 32000);
            const bool root = (base + j) % 8 == 0;
            const uint64_t h = rp_chunk_hash(t, FILLER_TOK, FILLER_SALT);
            chain = rp_chunk_chain(root ? 0 : chain, h);
            it[j] = (rp_store_put_item){0};
            it[j].meta = (rp_store_chunk){.id = id, .hash = h, .chain = chain, .parent_id = root ? 0 : id - 1,
                                          .n_tokens = FILLER_TOK, .exact = true, .recompute_ms = 0.01};
            it[j].tokens = t;
            it[j].kv = kv;
            id++;
        }
        st = rp_store_put(s, it, cnt, 0);
        for (int32_t j = 0; st == RP_OK && j < cnt; j++) st = it[j].status;
    }
    free(it);
    free(toks);
    rp_store_close(s);
    return st;
}

/* ---- one variant ---- */

typedef struct run_cfg {
    const rp_model *m;
    rp_ctx *ctx;
    rp_kv *kv;
    float *lg;
    rp_type kv_type;
    const abl_work *w;
    int warmup;
    double ratio, gap_ms;
    size_t ram_bytes;
    uint64_t disk_bytes;
    long filler;
    uint64_t seed;
    const char *base_dir;
    bool keep, sync_load;
    rp_static_cfg cal;
} run_cfg;

static void stats_sub(rp_cache_stats *d, const rp_cache_stats *a, const rp_cache_stats *b) {
    d->inserts = a->inserts - b->inserts;
    d->evictions = a->evictions - b->evictions;
    d->prefix_hits = a->prefix_hits - b->prefix_hits;
    d->content_hits = a->content_hits - b->content_hits;
    d->misses = a->misses - b->misses;
    d->flash_hits = a->flash_hits - b->flash_hits;
    d->loads = a->loads - b->loads;
    d->load_bytes = a->load_bytes - b->load_bytes;
    d->load_ms = a->load_ms - b->load_ms;
    d->load_failures = a->load_failures - b->load_failures;
    d->prefetched = a->prefetched - b->prefetched;
    d->prefetch_used = a->prefetch_used - b->prefetch_used;
    d->written = a->written - b->written;
    d->write_bytes = a->write_bytes - b->write_bytes;
    d->write_batches = a->write_batches - b->write_batches;
    d->write_ms = a->write_ms - b->write_ms;
    d->write_failures = a->write_failures - b->write_failures;
    d->dropped_dirty = a->dropped_dirty - b->dropped_dirty;
    d->disk_evictions = a->disk_evictions - b->disk_evictions;
    /* levels, not counters (a difference of levels can go below zero) */
    d->transient = a->transient;
    d->n_chunks = a->n_chunks;
    d->bytes = a->bytes;
    d->dirty = a->dirty;
}

static bool run_variant(const char *cmd, const run_cfg *rc, vrun *out) {
    const variant_def *v = out->v;
    const abl_work *w = rc->w;
    char dir[4200];   /* base_dir is at most 4095 bytes */
    snprintf(dir, sizeof dir, "%s/reprise-ablation-%s-XXXXXX", rc->base_dir, v->name);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "reprise %s: cannot create a directory under '%s': %s\n", cmd, rc->base_dir, strerror(errno));
        return false;
    }
    bool ok = false;
    rp_reuse *e = NULL;
    rp_store_params stp = rp_store_default_params();
    stp.naive = v->naive_store;
    if (rc->filler > 0) {
        double t0 = cli_now();
        fprintf(stderr, "  %-20s adding %ld filler rows to the store...\r", v->name, rc->filler);
        rp_status fs = fill_store(dir, &stp, rc->filler, rc->seed);
        out->filler_s = cli_now() - t0;
        if (fs != RP_OK) {
            cli_fail(cmd, "filler rows", fs);
            goto out;
        }
    }
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = RP_REUSE_BLEND;
    rp.ratio = (float)rc->ratio;
    rp.static_mode = v->static_mode;
    rp.naive_schedule = v->naive_schedule;
    rp.static_cfg = v->fixed_shapes ? rp_static_default_cfg() : rc->cal;
    rp.cache_bytes = v->no_ram ? 0 : rc->ram_bytes;
    rp.pipeline = !v->no_pipeline;
    rp_status st = rp_reuse_create(rc->m, rc->kv_type, w->max_tokens, rp, &e);
    if (st != RP_OK) {
        cli_fail(cmd, "engine", st);
        goto out;
    }
    out->cfg = rp_reuse_get_params(e)->static_cfg;
    rp_chunk_cache *pool = rp_reuse_cache(e);
    {
        rp_pool_params pp = rp_pool_default_params();
        pp.policy = v->lru ? RP_EVICT_LRU : RP_EVICT_COST;
        pp.sync_persist = v->sync_persist;
        pp.no_prefetch = v->no_prefetch;
        /* the layer-wise pipeline has two halves: flash reads (pool loader) and
         * placement (engine loader); no-pipeline switches off both */
        pp.async_load = !v->no_pipeline && !rc->sync_load;
        pp.disk_budget = rc->disk_bytes;
        rp_store *store = NULL;
        if ((st = rp_store_open(dir, &stp, &store)) != RP_OK ||
            (st = rp_chunk_cache_attach_store(pool, store, rp_reuse_salt(e), rc->m->name, &pp)) != RP_OK) {
            cli_fail(cmd, "store", st);
            goto out;
        }
    }
    out->ttft = calloc((size_t)w->n_q, sizeof(double));
    if (!out->ttft) {
        fprintf(stderr, "reprise %s: out of memory\n", cmd);
        goto out;
    }
    rp_cache_stats cs_warm = rp_chunk_cache_stats(pool);
    double t_first_prev = 0;
    out->rss_base = rss_bytes();
    double sample_ms = 0;   /* the previous query's sampling time: the gap starts after it */
    for (int q = 0; q < w->n_q; q++) {
        const rp_wprompt *p = &w->q[q];
        double queue = 0;
        if (q > 0) {   /* arrival: gap_ms after the previous first token */
            const double arrival = t_first_prev + rc->gap_ms + sample_ms, now = now_ms();
            if (now < arrival) sleep_ms(arrival - now);
            else queue = now - arrival;
        }
        if (q == rc->warmup) cs_warm = rp_chunk_cache_stats(pool);
        const rp_cache_stats c0 = rp_chunk_cache_stats(pool);
        rp_reuse_stats rs;
        st = rp_reuse_prefill(e, rc->ctx, rc->kv, p->toks, p->n, p->bounds, p->n_bounds, rc->lg, &rs);
        t_first_prev = now_ms();
        if (st != RP_OK) {
            fprintf(stderr, "\n");
            cli_fail(cmd, v->name, st);
            goto out;
        }
        const rp_cache_stats c1 = rp_chunk_cache_stats(pool);
        const double tc = now_ms();
        st = rp_reuse_commit(e, rc->kv);
        const double commit_ms = now_ms() - tc;
        if (st != RP_OK) {
            fprintf(stderr, "\n");
            cli_fail(cmd, "commit", st);
            goto out;
        }
        const rp_cache_stats c2 = rp_chunk_cache_stats(pool);
        {
            const double ts = now_ms();
            const uint64_t rss = rss_bytes(), disk = dir_bytes(dir), pool_b = c2.bytes + c2.transient_bytes;
            if (rss > out->rss_base && rss - out->rss_base > out->rss_growth_max) out->rss_growth_max = rss - out->rss_base;
            if (disk > out->disk_max) out->disk_max = disk;
            if (pool_b > out->pool_max) out->pool_max = pool_b;
            sample_ms = now_ms() - ts;
            out->sample_ms += sample_ms;
        }
        const double ttft = queue + rs.ttft_ms;
        const uint64_t fh = c1.flash_hits - c0.flash_hits;
        fprintf(stderr, "\r  %-20s query %3d/%d%s: TTFT %8.1f ms, flash hits %2llu   ", v->name, q + 1, w->n_q,
                q < rc->warmup ? " (warm-up)" : "", ttft, (unsigned long long)fh);
        if (q < rc->warmup) continue;
        out->ttft[out->n++] = ttft;
        out->queue_ms += queue;
        out->prefill_ms += rs.ttft_ms;
        out->commit_ms += commit_ms;
        out->n_prefix += rs.n_prefix;
        out->n_nonprefix += rs.n_nonprefix;
        out->n_recomputed += rs.n_recomputed;
        out->n_new += rs.n_new;
        out->n_pad += rs.n_pad;
        out->n_rows += rs.n_computed_rows;
        out->placed_bytes += (double)rs.bytes_loaded;
        /* flash reads on the request thread (sync loads) are load time the compute waited for */
        const double rd = c1.load_ms - c0.load_ms;
        out->flash_rd_ms += rd;
        out->load_ms += rs.load_ms + rd;
        out->exposed_ms += rs.load_exposed_ms + rd;
        const double hits = (double)(c1.prefix_hits - c0.prefix_hits) + (double)(c1.content_hits - c0.content_hits);
        out->flash_hits += (double)fh;
        out->ram_hits += hits - (double)fh;
        out->misses += (double)(c1.misses - c0.misses);
        out->flash_bytes += (double)(c1.load_bytes - c0.load_bytes);
        out->writes_prefill += (double)(c1.written - c0.written);
        out->wms_prefill += c1.write_ms - c0.write_ms;
        out->writes_commit += (double)(c2.written - c1.written);
        out->wms_commit += c2.write_ms - c1.write_ms;
    }
    const rp_cache_stats cs_end = rp_chunk_cache_stats(pool);
    stats_sub(&out->tot, &cs_end, &cs_warm);
    if (rp_chunk_cache_flush(pool) != RP_OK) fprintf(stderr, "\nreprise %s: %s: flush: %s\n", cmd, v->name, rp_last_error());
    ok = out->n > 0;
out:
    rp_reuse_free(e);   /* detaches: flushes and closes the store */
    if (ok) {
        out->store_bytes = dir_bytes(dir);
        double s = 0;
        for (int i = 0; i < out->n; i++) s += out->ttft[i];
        out->mean = s / out->n;
        double *srt = malloc(sizeof(double) * (size_t)out->n);
        if (srt) {
            memcpy(srt, out->ttft, sizeof(double) * (size_t)out->n);
            qsort(srt, (size_t)out->n, sizeof *srt, cli_cmp_double);
            out->p50 = cli_pct_sorted(srt, out->n, 0.5);
            out->p95 = cli_pct_sorted(srt, out->n, 0.95);
            free(srt);
        }
        fprintf(stderr, "\r  %-20s mean TTFT %8.1f ms over %d queries (store %.1f MiB)%30s\n", v->name, out->mean, out->n,
                out->store_bytes / 1048576.0, "");
    } else {
        fprintf(stderr, "\n");
    }
    if (rc->keep) fprintf(stderr, "  kept %s\n", dir);
    else rm_tree(dir);
    out->ok = ok;
    return ok;
}

/* ---- report ---- */

static const vrun *find_run(const vrun *runs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (runs[i].ok && !strcmp(runs[i].v->name, name)) return &runs[i];
    return NULL;
}

static bool is_static_derived(const variant_def *v) { return v->static_mode && (v->fixed_shapes || v->naive_schedule); }

/* Cells of the main table for run r (NUM_COLS strings), shared by stdout and HTML. */
#define NUM_COLS 20
static const char *const k_head[NUM_COLS] = {"variant",   "mean ms",    "p50 ms",      "p95 ms",    "vs full",
                                             "vs static", "RAM hits",   "flash hits",  "misses",    "hit %", "reuse %",
                                             "flash MiB", "load ms",    "exposed ms",  "path writes", "commit ms",
                                             "pad rows",  "RSS+ MiB",   "pool max MiB", "disk max MiB"};

/* Chunk lookups answered by RAM or flash, of all lookups. */
static double hit_rate(const vrun *r) {
    const double all = r->ram_hits + r->flash_hits + r->misses;
    return all > 0 ? (r->ram_hits + r->flash_hits) / all : 0;
}

/* Prompt tokens whose KV came from the cache (prefix or elsewhere), of all prompt tokens. */
static double reuse_share(const vrun *r) {
    const double all = r->n_prefix + r->n_nonprefix + r->n_new;
    return all > 0 ? (r->n_prefix + r->n_nonprefix) / all : 0;
}

static void cells_of(const vrun *r, const vrun *full, const vrun *stat, char c[NUM_COLS][32]) {
    snprintf(c[0], 32, "%s", r->v->name);
    if (!r->ok) {
        for (int i = 1; i < NUM_COLS; i++) snprintf(c[i], 32, "%s", i == 1 ? "failed" : "-");
        return;
    }
    const double n = r->n;
    snprintf(c[1], 32, "%.1f", r->mean);
    snprintf(c[2], 32, "%.1f", r->p50);
    snprintf(c[3], 32, "%.1f", r->p95);
    if (full) snprintf(c[4], 32, "%.2fx", r->mean / full->mean);
    else snprintf(c[4], 32, "-");
    if (stat && is_static_derived(r->v)) snprintf(c[5], 32, "%.2fx", r->mean / stat->mean);
    else snprintf(c[5], 32, "-");
    snprintf(c[6], 32, "%.1f", r->ram_hits / n);
    snprintf(c[7], 32, "%.1f", r->flash_hits / n);
    snprintf(c[8], 32, "%.1f", r->misses / n);
    snprintf(c[9], 32, "%.1f", 100.0 * hit_rate(r));
    snprintf(c[10], 32, "%.1f", 100.0 * reuse_share(r));
    snprintf(c[11], 32, "%.2f", r->flash_bytes / n / 1048576.0);
    snprintf(c[12], 32, "%.2f", r->load_ms / n);
    snprintf(c[13], 32, "%.2f", r->exposed_ms / n);
    snprintf(c[14], 32, "%.2f", (r->writes_prefill + r->writes_commit) / n);
    snprintf(c[15], 32, "%.2f", r->commit_ms / n);
    snprintf(c[16], 32, "%.1f", r->n_pad / n);
    snprintf(c[17], 32, "%.2f", r->rss_growth_max / 1048576.0);
    snprintf(c[18], 32, "%.2f", r->pool_max / 1048576.0);
    snprintf(c[19], 32, "%.2f", r->disk_max / 1048576.0);
}

static void write_json(FILE *f, const char *model, const vrun *runs, int nr, const vrun *full, const vrun *stat,
                       const char *params_json, size_t ram_budget, uint64_t disk_budget) {
    fprintf(f, "{\"bench\": \"ablation\", \"model\": ");
    json_str(f, model);
    fprintf(f, ", %s, \"variants\": [", params_json);
    for (int i = 0; i < nr; i++) {
        const vrun *r = &runs[i];
        fprintf(f, "%s\n  {\"variant\": \"%s\", \"ok\": %s", i ? "," : "", r->v->name, r->ok ? "true" : "false");
        if (!r->ok) {
            fprintf(f, "}");
            continue;
        }
        const double n = r->n;
        fprintf(f, ", \"queries\": %d, \"ttft_mean_ms\": %.3f, \"ttft_p50_ms\": %.3f, \"ttft_p95_ms\": %.3f", r->n, r->mean,
                r->p50, r->p95);
        if (full) fprintf(f, ", \"vs_full\": %.4f", r->mean / full->mean);
        else fprintf(f, ", \"vs_full\": null");
        if (stat && is_static_derived(r->v)) fprintf(f, ", \"vs_static\": %.4f", r->mean / stat->mean);
        else fprintf(f, ", \"vs_static\": null");
        fprintf(f, ", \"queue_ms\": %.3f, \"prefill_ms\": %.3f, \"commit_ms\": %.3f", r->queue_ms / n, r->prefill_ms / n,
                r->commit_ms / n);
        fprintf(f, ", \"ram_hits\": %.3f, \"flash_hits\": %.3f, \"misses\": %.3f, \"flash_bytes\": %.0f, \"flash_read_ms\": %.3f",
                r->ram_hits / n, r->flash_hits / n, r->misses / n, r->flash_bytes / n, r->flash_rd_ms / n);
        fprintf(f, ", \"load_ms\": %.3f, \"load_exposed_ms\": %.3f, \"placed_bytes\": %.0f", r->load_ms / n,
                r->exposed_ms / n, r->placed_bytes / n);
        fprintf(f, ", \"path_writes\": %.3f, \"writes_in_prefill\": %.3f, \"writes_in_commit\": %.3f, "
                   "\"write_ms_in_prefill\": %.3f, \"write_ms_in_commit\": %.3f",
                (r->writes_prefill + r->writes_commit) / n, r->writes_prefill / n, r->writes_commit / n,
                r->wms_prefill / n, r->wms_commit / n);
        fprintf(f, ", \"reused_prefix\": %.1f, \"reused_nonprefix\": %.1f, \"recomputed\": %.1f, \"new\": %.1f, "
                   "\"computed_rows\": %.1f, \"pad_rows\": %.1f",
                r->n_prefix / n, r->n_nonprefix / n, r->n_recomputed / n, r->n_new / n, r->n_rows / n, r->n_pad / n);
        fprintf(f, ", \"static\": %s, \"L_P\": %d, \"L_S\": %d", r->v->static_mode ? "true" : "false", r->cfg.L_P,
                r->cfg.L_S);
        const rp_cache_stats *t = &r->tot;
        fprintf(f, ", \"pool\": {\"inserts\": %llu, \"evictions\": %llu, \"loads\": %llu, \"load_bytes\": %llu, "
                   "\"prefetched\": %llu, \"prefetch_used\": %llu, \"written\": %llu, \"write_bytes\": %llu, "
                   "\"write_ms\": %.3f, \"write_failures\": %llu, \"dropped_dirty\": %llu, \"transient\": %llu, "
                   "\"disk_evictions\": %llu, \"load_failures\": %llu, \"ram_chunks\": %llu, \"ram_bytes\": %llu}",
                (unsigned long long)t->inserts, (unsigned long long)t->evictions, (unsigned long long)t->loads,
                (unsigned long long)t->load_bytes, (unsigned long long)t->prefetched,
                (unsigned long long)t->prefetch_used, (unsigned long long)t->written,
                (unsigned long long)t->write_bytes, t->write_ms, (unsigned long long)t->write_failures,
                (unsigned long long)t->dropped_dirty, (unsigned long long)t->transient,
                (unsigned long long)t->disk_evictions, (unsigned long long)t->load_failures,
                (unsigned long long)t->n_chunks, (unsigned long long)t->bytes);
        fprintf(f, ", \"reuse_share\": %.4f", reuse_share(r));
        fprintf(f, ", \"lookups\": %.3f, \"hit_rate\": %.4f, \"ram_hit_rate\": %.4f", (r->ram_hits + r->flash_hits + r->misses) / n,
                hit_rate(r), r->ram_hits + r->flash_hits + r->misses > 0
                                 ? r->ram_hits / (r->ram_hits + r->flash_hits + r->misses) : 0.0);
        fprintf(f, ", \"rss_base\": %llu, \"rss_growth_max\": %llu, \"pool_max\": %llu, \"disk_max\": %llu, "
                   "\"sample_ms\": %.3f", (unsigned long long)r->rss_base, (unsigned long long)r->rss_growth_max,
                (unsigned long long)r->pool_max, (unsigned long long)r->disk_max, r->sample_ms);
        if (ram_budget > 0) fprintf(f, ", \"rss_growth_vs_ram\": %.4f", (double)r->rss_growth_max / (double)ram_budget);
        else fprintf(f, ", \"rss_growth_vs_ram\": null");
        if (disk_budget > 0) fprintf(f, ", \"disk_vs_budget\": %.4f", (double)r->disk_max / (double)disk_budget);
        else fprintf(f, ", \"disk_vs_budget\": null");
        fprintf(f, ", \"store_bytes\": %llu, \"filler_s\": %.3f, \"ttft_ms\": [", (unsigned long long)r->store_bytes,
                r->filler_s);
        for (int q = 0; q < r->n; q++) fprintf(f, "%s%.3f", q ? ", " : "", r->ttft[q]);
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
}

static void write_html(FILE *hf, const char *note, const vrun *runs, int nr, const vrun *full, const vrun *stat) {
    rp_html_p(hf, note);
    const char *names[N_VARIANTS];
    double vals[3 * N_VARIANTS], hits[3 * N_VARIANTS];
    int k = 0;
    for (int i = 0; i < nr; i++) {
        const vrun *r = &runs[i];
        if (!r->ok) continue;
        names[k] = r->v->name;
        k++;
    }
    for (int i = 0, j = 0; i < nr; i++) {
        const vrun *r = &runs[i];
        if (!r->ok) continue;
        vals[0 * k + j] = r->mean;
        vals[1 * k + j] = r->p50;
        vals[2 * k + j] = r->p95;
        hits[0 * k + j] = r->ram_hits / r->n;
        hits[1 * k + j] = r->flash_hits / r->n;
        hits[2 * k + j] = r->misses / r->n;
        j++;
    }
    const char *g1[3] = {"mean", "p50", "p95"}, *g2[3] = {"RAM hits", "flash hits", "misses"};
    if (k > 0) {
        rp_svg_bars(hf, "Time to first token by variant", "ms", g1, 3, names, k, vals);
        rp_svg_bars(hf, "Chunk lookups per query: answered by the RAM pool, by flash, by neither", "lookups", g2, 3, names,
                    k, hits);
    }
    rp_html_h2(hf, "Results (means per timed query)");
    const char **cells = malloc(sizeof(char *) * (size_t)nr * NUM_COLS);
    char(*buf)[NUM_COLS][32] = malloc(sizeof *buf * (size_t)nr);
    if (cells && buf) {
        for (int i = 0; i < nr; i++) {
            cells_of(&runs[i], full, stat, buf[i]);
            for (int c = 0; c < NUM_COLS; c++) cells[i * NUM_COLS + c] = buf[i][c];
        }
        rp_html_table(hf, k_head, NUM_COLS, cells, nr);
    }
    free(cells);
    free(buf);
    rp_html_h2(hf, "Variants");
    for (int i = 0; i < nr; i++) {
        char line[256];
        snprintf(line, sizeof line, "%s: %s", runs[i].v->name, runs[i].v->what);
        rp_html_p(hf, line);
    }
}

static void usage(void) {
    printf("usage: reprise bench ablation -m MODEL.gguf [--variants LIST] [--workload zipf|crafted] [--docs 24]\n"
           "         [--doc-len 256] [--per-query 4] [--short 3] [--short-len 48] [--hot-share 1]\n"
           "         [--tail 32] [--queries 48] [--warmup N] [--zipf 1.0] [--gap 100] [--recompute-ratio 0.25]\n"
           "         [--cache-ram MB] [--cache-disk MB] [--filler N] [--cache-dir DIR] [--keep] [--calibrate]\n"
           "         [--no-async-load] [--kv-type f16] [-t 2] [--seed 1] [--cpu LEVEL] [--json OUT.json]\n"
           "         [--html OUT.html]\n"
           "Ablation of the KV reuse system: one reuse workload, run against the full system and against the\n"
           "system with one component switched off per row; each variant gets a fresh store directory (under\n"
           "--cache-dir DIR, else $TMPDIR or /tmp), removed afterwards unless --keep.\n"
           "Workload: a corpus of --docs random-token documents of --doc-len tokens. --queries queries run in order\n"
           "in one process; each is BOS + --per-query distinct documents drawn by Zipf(--zipf) popularity (seeded),\n"
           "in random order, + --tail new tokens. A query is prefilled (TTFT) and then committed to the cache (after\n"
           "the first token, as serve does). The next query arrives --gap ms after this one's first token (its answer\n"
           "streams meanwhile): the background writer and prefetcher use the idle part of the gap, and work still on\n"
           "the request thread by then (the commit; with sync-persist its flash writes) delays the next query and\n"
           "counts in its TTFT (with a gap under the writer's 20 ms quiet time async persistence never runs and\n"
           "chunks evicted from RAM are lost: see dropped dirty). The first --warmup queries (default queries/4)\n"
           "fill the cache and are not reported.\n"
           "Popular documents hit (as a prefix or anywhere), rare ones miss; the RAM pool (--cache-ram, default a\n"
           "third of the corpus's KV bytes) cannot hold them all, so RAM eviction and flash hits happen. --cache-disk\n"
           "bounds the store (default unlimited). --filler N first adds N small cold rows of another model to each\n"
           "store (e.g. 100000: the size of a long-lived store, where lookups need its indexes; default 0).\n"
           "--workload crafted: where LRU and cost-aware eviction differ. --docs hot LONG documents (default 6) of\n"
           "--doc-len tokens (default 512); a query opens with one of them (uniformly; with probability\n"
           "--hot-share) and goes on with --short one-off SHORT documents of --short-len tokens never seen again\n"
           "+ --tail new tokens. RAM defaults to a third of the hot set's KV and flash to three quarters of it, so\n"
           "a hot document returns after more bytes than either tier holds: LRU loses it, locality x cost keeps\n"
           "the hot, long, prefix-parent chunks (compare full with lru-eviction: hit %%, reuse %%, TTFT).\n"
           "Budgets are sampled after every query (warm-up included): RSS+ = VmRSS growth over the variant's\n"
           "baseline before its first query (compare with --cache-ram), pool max = the pool's accounted bytes\n"
           "(transient included), disk max = the store directory (db + WAL + payload files; compare with\n"
           "--cache-disk).\n"
           "Variants (--variants a,b,c; default all, in this order):\n"
           "  full                 dynamic blend, RAM pool over the SQLite store, cost-aware eviction, layer-wise\n"
           "                       pipeline (flash reads and placement alongside compute), async persistence, prefetch\n"
           "                       (--no-async-load: flash reads on the request thread in every variant, as run and\n"
           "                       serve do today)\n"
           "  no-ram-pool          RAM budget 0: every hit is a flash load\n"
           "  naive-store          the store as one BLOB table without secondary indexes: lookups scan\n"
           "  lru-eviction         LRU instead of cost-aware eviction, in RAM and on flash\n"
           "  no-pipeline          cached KV read from flash and placed before compute starts\n"
           "  sync-persist         chunks written to flash on the request thread at commit\n"
           "  no-prefetch          no prefetch thread\n"
           "  static               static-shape execution, L_P / L_S from the stored calibration (`reprise plan\n"
           "                       --calibrate`), else measured now with --calibrate, else the defaults\n"
           "  static-fixed-shapes  static with the default L_P=128 / L_S=512 (no graph-size optimisation)\n"
           "  static-no-merge      static with one call type per segment (no chunk merging by the DP)\n"
           "Columns, means per timed query: TTFT mean / p50 / p95 (queue wait included); vs full = mean TTFT over\n"
           "full's (> 1: slower without the component); vs static = the same against static (static-* rows);\n"
           "RAM hits / flash hits / misses = chunk lookups answered by the RAM pool / by flash / by neither;\n"
           "hit %% = (RAM + flash hits) / lookups; reuse %% = prompt tokens whose KV came from the cache;\n"
           "flash MiB = payload read from flash; load ms / exposed ms = moving cached KV into the prompt (flash\n"
           "reads on the request thread + placement) / the part the compute waited for; path writes = chunk\n"
           "writes completed while the request thread was in prefill or commit; commit ms = the request thread's\n"
           "time in commit; pad rows = static padding. A second table has the pool's counters. --json has\n"
           "every figure plus per-query TTFTs; --html a report with charts.\n");
}

int bench_ablation(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench ablation"};
    const char *model_path = NULL, *variants_s = NULL, *kv_name = "f16", *json_out = NULL, *html_out = NULL;
    const char *cache_dir = NULL;
    long threads = 2, n_docs = 24, doc_len = 256, per_query = 4, tail = 32, n_queries = 48, warmup = -1, seed = 1;
    long filler = 0, n_short = 3, short_len = 48;
    double zipf = 1.0, gap_ms = 100, ratio = 0.25, ram_mb = -1, disk_mb = -1, hot_share = 1.0;
    const char *workload = "zipf";
    bool set_docs = false, set_doc_len = false;
    bool keep = false, calibrate = false, sync_load = false;
    for (; a.i < argc; a.i++) {
        const char *v;
        if (cli_is(&a, "-h", "--help")) {
            usage();
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--variants", NULL)) { if (!cli_str(&a, &variants_s)) return 2; }
        else if (cli_is(&a, "--workload", NULL)) { if (!cli_str(&a, &workload)) return 2; }
        else if (cli_is(&a, "--docs", NULL)) { if (!cli_int(&a, 1, 100000, &n_docs)) return 2; set_docs = true; }
        else if (cli_is(&a, "--doc-len", NULL)) { if (!cli_int(&a, 1, 100000, &doc_len)) return 2; set_doc_len = true; }
        else if (cli_is(&a, "--short", NULL)) { if (!cli_int(&a, 0, 1024, &n_short)) return 2; }
        else if (cli_is(&a, "--short-len", NULL)) { if (!cli_int(&a, 1, 100000, &short_len)) return 2; }
        else if (cli_is(&a, "--hot-share", NULL)) { if (!cli_float(&a, 0, 1, &hot_share)) return 2; }
        else if (cli_is(&a, "--per-query", NULL)) { if (!cli_int(&a, 1, 1024, &per_query)) return 2; }
        else if (cli_is(&a, "--tail", NULL)) { if (!cli_int(&a, 0, 100000, &tail)) return 2; }
        else if (cli_is(&a, "--queries", NULL)) { if (!cli_int(&a, 1, 1000000, &n_queries)) return 2; }
        else if (cli_is(&a, "--warmup", NULL)) { if (!cli_int(&a, 0, 1000000, &warmup)) return 2; }
        else if (cli_is(&a, "--zipf", NULL)) { if (!cli_float(&a, 0, 10, &zipf)) return 2; }
        else if (cli_is(&a, "--gap", NULL)) { if (!cli_float(&a, 0, 600000, &gap_ms)) return 2; }
        else if (cli_is(&a, "--recompute-ratio", NULL)) { if (!cli_float(&a, 0, 1, &ratio)) return 2; }
        else if (cli_is(&a, "--cache-ram", NULL)) { if (!cli_float(&a, 0, 1 << 24, &ram_mb)) return 2; }
        else if (cli_is(&a, "--cache-disk", NULL)) { if (!cli_float(&a, 0, 1 << 30, &disk_mb)) return 2; }
        else if (cli_is(&a, "--filler", NULL)) { if (!cli_int(&a, 0, 100000000, &filler)) return 2; }
        else if (cli_is(&a, "--cache-dir", NULL)) { if (!cli_str(&a, &cache_dir)) return 2; }
        else if (cli_is(&a, "--keep", NULL)) keep = true;
        else if (cli_is(&a, "--calibrate", NULL)) calibrate = true;
        else if (cli_is(&a, "--no-async-load", NULL)) sync_load = true;
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--seed", NULL)) { if (!cli_int(&a, 0, 1L << 40, &seed)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--json", NULL)) { if (!cli_str(&a, &json_out)) return 2; }
        else if (cli_is(&a, "--html", NULL)) { if (!cli_str(&a, &html_out)) return 2; }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise bench ablation: -m MODEL.gguf is required\n"); return 2; }
    const bool crafted = !strcmp(workload, "crafted");
    if (!crafted && strcmp(workload, "zipf")) {
        fprintf(stderr, "reprise bench ablation: --workload must be zipf or crafted\n");
        return 2;
    }
    if (crafted) {   /* --docs / --doc-len name the hot documents: 6 x 512 tokens unless given */
        if (!set_docs) n_docs = 6;
        if (!set_doc_len) doc_len = 512;
        per_query = 1;
    }
    if (per_query > n_docs) {
        fprintf(stderr, "reprise bench ablation: --per-query %ld exceeds --docs %ld\n", per_query, n_docs);
        return 2;
    }
    if (warmup < 0) warmup = n_queries / 4;
    if (warmup >= n_queries) {
        fprintf(stderr, "reprise bench ablation: --warmup %ld leaves no timed query of %ld\n", warmup, n_queries);
        return 2;
    }
    int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_F32 && kv_type != RP_TYPE_Q8_0) {
        fprintf(stderr, "reprise bench ablation: --kv-type must be f16, f32 or q8_0\n");
        return 2;
    }
    vrun runs[N_VARIANTS];
    int nr = 0;
    memset(runs, 0, sizeof runs);
    if (!variants_s) {
        for (int i = 0; i < N_VARIANTS; i++) runs[nr++].v = &k_variants[i];
    } else {
        char vbuf[1024];
        snprintf(vbuf, sizeof vbuf, "%s", variants_s);
        char *save = NULL;
        for (char *tok = strtok_r(vbuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            const variant_def *d = NULL;
            for (int i = 0; i < N_VARIANTS; i++)
                if (!strcmp(tok, k_variants[i].name)) d = &k_variants[i];
            if (!d) {
                fprintf(stderr, "reprise bench ablation: unknown variant '%s' (full, no-ram-pool, naive-store, "
                                "lru-eviction, no-pipeline, sync-persist, no-prefetch, static, static-fixed-shapes, "
                                "static-no-merge)\n", tok);
                return 2;
            }
            bool dup = false;
            for (int i = 0; i < nr; i++) dup |= runs[i].v == d;
            if (!dup && nr < N_VARIANTS) runs[nr++].v = d;
        }
        if (nr == 0) { fprintf(stderr, "reprise bench ablation: --variants is empty\n"); return 2; }
    }
    char base_dir[4096];
    if (cache_dir) {
        if (mkdir(cache_dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "reprise bench ablation: cannot create '%s': %s\n", cache_dir, strerror(errno));
            return 1;
        }
        snprintf(base_dir, sizeof base_dir, "%s", cache_dir);
    } else {
        snprintf(base_dir, sizeof base_dir, "%s", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    }

    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    if (!m->tok) { fprintf(stderr, "reprise bench ablation: the model has no tokenizer\n"); rp_model_free(m); return 1; }
    int rc = 1;
    abl_work w;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    float *lg = NULL;
    if (crafted ? !work_build_crafted(m, (int)n_docs, (int32_t)doc_len, (int)n_short, (int32_t)short_len, (int32_t)tail,
                                      (int)n_queries, hot_share, (uint64_t)seed, &w)
                : !work_build(m, (int)n_docs, (int32_t)doc_len, (int)per_query, (int32_t)tail, (int)n_queries, zipf,
                              (uint64_t)seed, &w)) {
        fprintf(stderr, "reprise bench ablation: out of memory building the workload\n");
        rp_model_free(m);
        return 1;
    }
    const int32_t kv_dim = m->hp.n_head_kv * m->hp.head_dim;
    const double tok_kv = (double)m->hp.n_layer * 2.0 * (double)rp_type_row_size((rp_type)kv_type, kv_dim);
    const double corpus_kv = tok_kv * (double)n_docs * (double)doc_len;
    /* crafted: RAM a third of the hot set, flash three quarters of it (both tiers smaller than the hot set); zipf: RAM a
     * third of the corpus, flash unlimited */
    const size_t ram_bytes = ram_mb >= 0 ? (size_t)(ram_mb * 1048576.0) : (size_t)(corpus_kv / 3);
    const uint64_t disk_bytes = disk_mb >= 0 ? (uint64_t)(disk_mb * 1048576.0) : crafted ? (uint64_t)(corpus_kv * 0.75) : 0;

    /* static shapes: stored calibration, else measured now (--calibrate), else defaults */
    rp_static_cfg cal = rp_static_default_cfg();
    const char *cal_src = "default";
    bool want_cal = false;
    for (int i = 0; i < nr; i++) want_cal |= runs[i].v->static_mode && !runs[i].v->fixed_shapes;
    if (want_cal) {
        rp_reuse *ce = NULL;
        rp_reuse_params cp0 = rp_reuse_default_params();
        cp0.pipeline = false;
        if ((st = rp_reuse_create(m, (rp_type)kv_type, 1100, cp0, &ce)) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
        if (cli_apply_calib(ce, m, NULL, (int)threads)) {
            cal = rp_reuse_get_params(ce)->static_cfg;
            cal_src = "stored";
        } else if (calibrate) {
            static const int32_t sizes[] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
            rp_ctx_params ccp = rp_ctx_default_params();
            ccp.n_threads = (int)threads;
            ccp.n_batch = 1024;
            ccp.n_outputs = 1;
            ccp.n_ctx_max = 1100;
            rp_ctx *cc = NULL;
            rp_kv *ck = NULL;
            rp_calib cd;
            fprintf(stderr, "calibrating static shapes (not saved; `reprise plan --calibrate` stores them)...\n");
            if ((st = rp_ctx_create(m, ccp, &cc)) == RP_OK && (st = rp_kv_create(m, 1100, (rp_type)kv_type, &ck)) == RP_OK &&
                (st = rp_reuse_calibrate(ce, cc, ck, sizes, (int32_t)(sizeof sizes / sizeof sizes[0]), 2, &cd)) == RP_OK) {
                cal = cd.cfg;
                cal_src = "measured";
            }
            rp_kv_free(ck);
            rp_ctx_free(cc);
            if (st != RP_OK) {
                rp_reuse_free(ce);
                rc = cli_fail(a.cmd, "calibrate", st);
                goto out;
            }
        } else {
            fprintf(stderr, "no stored calibration for this model and machine (`reprise plan -m MODEL --calibrate`, or "
                            "--calibrate here): static uses the default shapes, as static-fixed-shapes does\n");
        }
        rp_reuse_free(ce);
    }
    {
        const rp_static_cfg dflt = rp_static_default_cfg();
        int32_t pad = dflt.L_S > dflt.L_P ? dflt.L_S : dflt.L_P;
        if (cal.L_S > pad) pad = cal.L_S;
        if (cal.L_P > pad) pad = cal.L_P;
        const int32_t n_ctx = w.max_tokens + pad + 8;
        rp_ctx_params cp = rp_ctx_default_params();
        cp.n_threads = (int)threads;
        cp.n_batch = w.max_tokens > 512 ? 1024 : 512;
        if (cp.n_batch < pad) cp.n_batch = pad;   /* a static call is one forward of L_S / L_P rows */
        cp.n_outputs = 1;
        cp.n_ctx_max = n_ctx;
        lg = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
        if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK || (st = rp_kv_create(m, n_ctx, (rp_type)kv_type, &kv)) != RP_OK ||
            !lg) {
            rc = cli_fail(a.cmd, "setup", st);
            goto out;
        }
    }
    {
        /* one plain prefill of the longest query before any variant: the context's scratch and the KV pages are
         * touched here, so each variant's RSS baseline (taken before its first query) leaves them out */
        int lq = 0;
        for (int q = 1; q < w.n_q; q++)
            if (w.q[q].n > w.q[lq].n) lq = q;
        rp_reuse *te = NULL;
        rp_reuse_params tp = rp_reuse_default_params();
        tp.mode = RP_REUSE_NONE;
        tp.cache_bytes = 0;
        tp.pipeline = false;
        rp_reuse_stats trs;
        if ((st = rp_reuse_create(m, (rp_type)kv_type, w.max_tokens, tp, &te)) != RP_OK ||
            (st = rp_reuse_prefill(te, ctx, kv, w.q[lq].toks, w.q[lq].n, w.q[lq].bounds, w.q[lq].n_bounds, lg, &trs)) !=
                RP_OK) {
            rp_reuse_free(te);
            rc = cli_fail(a.cmd, "warm-up prefill", st);
            goto out;
        }
        rp_reuse_free(te);
    }
    fprintf(stderr, "ablation: %s workload, %d docs x %ld tokens (KV %.1f MiB), %d queries of %ld docs + %ld new tokens (%d tokens), "
                    "zipf %.2f, %ld warm-up, gap %.0f ms, RAM %.2f MiB, flash %s, filler %ld, L_P/L_S %d/%d (%s)\n",
            workload, (int)n_docs, doc_len, corpus_kv / 1048576.0, w.n_q, per_query, tail, w.max_tokens, zipf, warmup, gap_ms,
            ram_bytes / 1048576.0, disk_bytes ? "bounded" : "unlimited", filler, cal.L_P, cal.L_S, cal_src);
    run_cfg rcfg = {.m = m, .ctx = ctx, .kv = kv, .lg = lg, .kv_type = (rp_type)kv_type, .w = &w, .warmup = (int)warmup,
                    .ratio = ratio, .gap_ms = gap_ms, .ram_bytes = ram_bytes, .disk_bytes = disk_bytes,
                    .filler = filler, .seed = (uint64_t)seed, .base_dir = base_dir, .keep = keep,
                    .sync_load = sync_load, .cal = cal};
    int n_failed = 0;
    for (int i = 0; i < nr; i++)
        if (!run_variant(a.cmd, &rcfg, &runs[i])) n_failed++;

    /* ---- report ---- */
    const vrun *full = find_run(runs, nr, "full"), *stat = find_run(runs, nr, "static");
    printf("\nablation on %s: %d queries (%ld timed) of %d tokens, %ld of %ld docs x %ld tokens, zipf %.2f, gap %.0f ms, "
           "r = %.2f, RAM %.2f MiB, flash %s, filler %ld rows, %ld threads, kv %s, static L_P/L_S %d/%d (%s)\n\n",
           model_path, w.n_q, n_queries - warmup, w.max_tokens, per_query, n_docs, doc_len, zipf, gap_ms, ratio,
           ram_bytes / 1048576.0, disk_bytes ? "bounded" : "unlimited", filler, threads, kv_name, cal.L_P, cal.L_S, cal_src);
    if (crafted)
        printf("crafted workload: %ld hot documents of %ld tokens opening %.0f%% of the queries, each followed by %ld "
               "one-off documents of %ld tokens + %ld new tokens; hot set %.2f MiB of KV, RAM pool %.2f MiB, flash "
               "budget %.2f MiB\n\n",
               n_docs, doc_len, 100.0 * w.first_share, n_short, short_len, tail, corpus_kv / 1048576.0,
               ram_bytes / 1048576.0, disk_bytes / 1048576.0);
    printf("budgets (sampled after every query): RSS+ = VmRSS above the variant's baseline before its first query, "
           "against --cache-ram %.2f MiB; pool max = the pool's accounted bytes incl. transient; disk max = the store "
           "directory (db + WAL + payload files), against --cache-disk %s\n\n",
           ram_bytes / 1048576.0, disk_bytes ? "(bounded)" : "(unlimited)");
    static const int wid[NUM_COLS] = {19, 8, 8, 8, 7, 9, 8, 10, 6, 5, 7, 9, 8, 10, 11, 9, 8, 8, 12, 12};
    printf("|");
    for (int c = 0; c < NUM_COLS; c++) printf(c ? " %*s |" : " %-*s |", wid[c], k_head[c]);
    printf("\n|");
    for (int c = 0; c < NUM_COLS; c++) {
        for (int k = 0; k < wid[c] + 2; k++) putchar('-');
        putchar('|');
    }
    printf("\n");
    for (int i = 0; i < nr; i++) {
        char cells[NUM_COLS][32];
        cells_of(&runs[i], full, stat, cells);
        printf("|");
        for (int c = 0; c < NUM_COLS; c++) printf(c ? " %*s |" : " %-*s |", wid[c], cells[c]);
        printf("\n");
    }
    printf("\npool over the timed queries:\n\n");
    printf("| %-19s | %8s | %9s | %8s | %12s | %10s | %13s | %13s | %9s |\n", "variant", "inserts", "evictions",
           "written", "write ms", "prefetched", "prefetch used", "dropped dirty", "store MiB");
    printf("|---------------------|----------|-----------|----------|--------------|------------|---------------|---------------|-----------|\n");
    for (int i = 0; i < nr; i++) {
        const vrun *r = &runs[i];
        if (!r->ok) continue;
        printf("| %-19s | %8llu | %9llu | %8llu | %12.1f | %10llu | %13llu | %13llu | %9.2f |\n", r->v->name,
               (unsigned long long)r->tot.inserts, (unsigned long long)r->tot.evictions,
               (unsigned long long)r->tot.written, r->tot.write_ms, (unsigned long long)r->tot.prefetched,
               (unsigned long long)r->tot.prefetch_used, (unsigned long long)r->tot.dropped_dirty,
               r->store_bytes / 1048576.0);
    }
    char params[1536];
    snprintf(params, sizeof params,
             "\"docs\": %ld, \"doc_len\": %ld, \"per_query\": %ld, \"tail\": %ld, \"queries\": %d, \"warmup\": %ld, "
             "\"max_tokens\": %d, \"zipf\": %.3f, \"gap_ms\": %.3f, \"ratio\": %.3f, \"ram_bytes\": %zu, "
             "\"disk_budget\": %llu, \"filler\": %ld, \"threads\": %ld, \"kv_type\": \"%s\", \"seed\": %ld, "
             "\"calibration\": \"%s\", \"L_P\": %d, \"L_S\": %d, \"corpus_kv_bytes\": %.0f, \"async_load\": %s, "
             "\"workload\": \"%s\", \"short\": %ld, \"short_len\": %ld, \"hot_share\": %.3f",
             n_docs, doc_len, per_query, tail, w.n_q, warmup, w.max_tokens, zipf, gap_ms, ratio, ram_bytes,
             (unsigned long long)disk_bytes, filler, threads, kv_name, seed, cal_src, cal.L_P, cal.L_S, corpus_kv,
             sync_load ? "false" : "true", workload, crafted ? n_short : 0, crafted ? short_len : 0, hot_share);
    if (json_out) {
        FILE *jf = fopen(json_out, "w");
        if (!jf) fprintf(stderr, "reprise bench ablation: cannot write '%s'\n", json_out);
        else {
            write_json(jf, model_path, runs, nr, full, stat, params, ram_bytes, disk_bytes);
            fclose(jf);
        }
    }
    if (html_out) {
        FILE *hf = rp_html_open(html_out, "Reprise ablation: the KV reuse system without each component");
        if (!hf) fprintf(stderr, "reprise bench ablation: cannot write '%s'\n", html_out);
        else {
            char note[1024];
            snprintf(note, sizeof note,
                     "model %s; %d queries (%ld timed), each BOS + %ld of %ld documents (%ld tokens, Zipf %.2f) in random "
                     "order + %ld new tokens; next query %.0f ms after the previous first token; r = %.2f; RAM pool "
                     "%.2f MiB; flash %s; %ld filler rows; %ld threads; KV %s; static L_P/L_S %d/%d (%s).",
                     model_path, w.n_q, n_queries - warmup, per_query, n_docs, doc_len, zipf, tail, gap_ms, ratio,
                     ram_bytes / 1048576.0, disk_bytes ? "bounded" : "unlimited", filler, threads, kv_name, cal.L_P,
                     cal.L_S, cal_src);
            write_html(hf, note, runs, nr, full, stat);
            rp_html_close(hf);
        }
    }
    rc = n_failed ? 1 : 0;
out:
    for (int i = 0; i < nr; i++) free(runs[i].ttft);
    free(lg);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    work_free(&w);
    rp_model_free(m);
    return rc;
}
