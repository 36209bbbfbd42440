/* cmd_cache.c — `reprise cache stats|ls|verify|evict|compact|clear`: inspect and maintain a KV store directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "progress.h"
#include "core/error.h"
#include "kernels/types.h"
#include "model/model.h"
#include "reuse/engine.h"
#include "store/store.h"

static void cache_usage(FILE *f) {
    fprintf(f,
            "usage: reprise cache <command> --cache-dir DIR [-m MODEL.gguf [--kv-type T]] [options]\n"
            "commands:\n"
            "  stats              models, chunks, payload bytes (raw / stored), files vs BLOBs, disk use, corrupt rows\n"
            "  ls [--limit N]     chunks: id, parent, tokens, position, exact, bytes, where, hits, last use\n"
            "  verify [--fix]     SQLite's quick_check of the database, then every checksum; report a damaged database\n"
            "                     and corrupt rows (exit 1 if any); --fix deletes the corrupt rows\n"
            "  evict --to-mb N    cost-aware eviction until the store uses at most N MiB [--policy cost|lru]\n"
            "  compact            remove orphans (payloads, keywords, vectors, files without rows), then VACUUM\n"
            "  clear              delete every chunk (of -m MODEL only, when given)\n"
            "-m MODEL restricts the command to the chunks written for that model and KV type (the reuse salt);\n"
            "without it every model in the store is included.\n"
            "The store's files are private (dir 0700, files 0600): a store directory or file that is not yours or\n"
            "is group/world-writable is refused (another user could have planted KV or read token ids); a writer\n"
            "tightens read permission for others. Checksums are keyed with a random secret of the store (in\n"
            "kv.db): KV copied from another store is corrupt here. A store of older builds (unkeyed) is refused by\n"
            "stats/ls/verify; clear, or any run/serve on it, upgrades it (its chunks are dropped).\n");
}

typedef struct ls_ctx {
    long limit, n;
} ls_ctx;

static bool ls_one(void *user, const rp_store_chunk *c) {
    ls_ctx *x = user;
    if (x->limit > 0 && x->n >= x->limit) return false;
    x->n++;
    char when[32] = "-";
    if (c->used_at > 0) {
        time_t t = (time_t)c->used_at;
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    }
    printf("%8llu %8llu %6lld %6d %6d %5s %10llu %10llu %4s %-4s %6llu %10llu  %s%s", (unsigned long long)c->id,
           (unsigned long long)c->parent_id, (long long)c->model, c->n_tokens, c->pos0, c->exact ? "yes" : "no",
           (unsigned long long)c->kv_bytes, (unsigned long long)c->stored_bytes, c->loc ? "file" : "blob",
           c->codec ? "zstd" : "raw", (unsigned long long)c->hits, (unsigned long long)c->last_used, when,
           c->tokens ? "" : "  (damaged)");
    if (c->tokens) {
        printf("  [");
        for (int32_t i = 0; i < c->n_tokens && i < 8; i++) printf("%s%d", i ? " " : "", c->tokens[i]);
        printf("%s]", c->n_tokens > 8 ? " ..." : "");
    }
    printf("\n");
    return true;
}

static void bad_row(void *user, uint64_t id, const char *why) {
    (void)user;
    printf("corrupt: chunk %llu: %s\n", (unsigned long long)id, why);
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* The reuse salt of a model + KV type, computed by the reuse engine itself
 * so it can never drift from what `reprise run` writes. */
static int model_salt(const char *path, const char *kv_name, uint64_t *salt) {
    int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_Q8_0 && kv_type != RP_TYPE_F32) {
        fprintf(stderr, "reprise cache: --kv-type must be f16, q8_0 or f32, got '%s'\n", kv_name);
        return 2;
    }
    rp_model *m = NULL;
    rp_status st = cli_model_load(path, rp_model_default_params(), &m);
    if (st != RP_OK) return cli_fail("cache", path, st);
    rp_reuse_params rp = rp_reuse_default_params();
    rp.pipeline = false;
    rp.cache_bytes = 1 << 20;
    rp_reuse *e = NULL;
    st = rp_reuse_create(m, (rp_type)kv_type, 1, rp, &e);
    if (st != RP_OK) {
        rp_model_free(m);
        return cli_fail("cache", "reuse engine", st);
    }
    *salt = rp_reuse_salt(e);
    rp_reuse_free(e);
    rp_model_free(m);
    return 0;
}

int cmd_cache(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        cache_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    const bool known = !strcmp(sub, "stats") || !strcmp(sub, "ls") || !strcmp(sub, "verify") ||
                       !strcmp(sub, "evict") || !strcmp(sub, "compact") || !strcmp(sub, "clear");
    if (!known) {
        fprintf(stderr, "reprise cache: unknown command '%s'\n\n", sub);
        cache_usage(stderr);
        return 2;
    }
    cli_args a = {argc, 2, argv, "cache"};
    const char *dir = NULL, *model_path = NULL, *kv_name = "f16", *policy = "cost";
    long limit = 0;
    double to_mb = -1;
    bool fix = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            cache_usage(stdout);
            return 0;
        } else if (cli_is(&a, "--cache-dir", NULL)) {
            if (!cli_str(&a, &dir)) return 2;
        } else if (cli_is(&a, "-m", "--model")) {
            if (!cli_str(&a, &model_path)) return 2;
        } else if (cli_is(&a, "--kv-type", NULL)) {
            if (!cli_str(&a, &kv_name)) return 2;
        } else if (cli_is(&a, "--limit", NULL)) {
            if (!cli_int(&a, 0, 1L << 40, &limit)) return 2;
        } else if (cli_is(&a, "--to-mb", NULL)) {
            if (!cli_float(&a, 0, 1e9, &to_mb)) return 2;
        } else if (cli_is(&a, "--policy", NULL)) {
            if (!cli_str(&a, &policy)) return 2;
        } else if (cli_is(&a, "--fix", NULL)) {
            fix = true;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!dir) {
        fprintf(stderr, "reprise cache: --cache-dir DIR is required\n");
        return 2;
    }
    if (!strcmp(sub, "evict") && to_mb < 0) {
        fprintf(stderr, "reprise cache: evict needs --to-mb N\n");
        return 2;
    }
    if (strcmp(policy, "cost") && strcmp(policy, "lru")) {
        fprintf(stderr, "reprise cache: --policy must be cost or lru, got '%s'\n", policy);
        return 2;
    }
    uint64_t salt = 0;
    if (model_path) {
        int rc = model_salt(model_path, kv_name, &salt);
        if (rc) return rc;
    }
    /* readers do not take the lock: stats / ls / verify work while `reprise run` uses the store */
    const bool writes = !strcmp(sub, "evict") || !strcmp(sub, "compact") || !strcmp(sub, "clear") || fix;
    rp_store_params sp = rp_store_default_params();
    sp.read_only = !writes;
    rp_store *s = NULL;
    rp_status st = rp_store_open(dir, &sp, &s);
    if (st == RP_ERR_NOT_FOUND && sp.read_only && strstr(rp_last_error(), RP_STORE_EMPTY_MSG)) {
        /* created and never committed to (its first writer died at once): nothing to read, nothing corrupt */
        if (!strcmp(sub, "verify")) printf("verified 0 chunks: 0 ok, 0 corrupt (empty store)\n");
        else printf("empty store in %s (no chunk was ever committed)\n", dir);
        return 0;
    }
    if (st != RP_OK) return cli_fail("cache", dir, st);
    int rc = 1;
    if (model_path && (st = rp_store_bind_salt(s, salt)) != RP_OK) {
        if (st == RP_ERR_NOT_FOUND) {
            printf("no chunks for this model (salt %016llx) in %s\n", (unsigned long long)salt, dir);
            rc = 0;   /* nothing stored for it: every command trivially succeeds */
        } else {
            rc = cli_fail("cache", "model", st);
        }
        rp_store_close(s);
        return rc;
    }

    if (!strcmp(sub, "stats")) {
        rp_store_model *mv = NULL;
        int32_t nm = 0;
        if ((st = rp_store_models(s, &mv, &nm)) != RP_OK) {
            rc = cli_fail("cache", "stats", st);
            goto out;
        }
        rp_store_stats ss;
        if ((st = rp_store_stats_get(s, &ss)) != RP_OK) {
            free(mv);
            rc = cli_fail("cache", "stats", st);
            goto out;
        }
        printf("store: %s\n", dir);
        printf("models: %llu\n", (unsigned long long)ss.n_models);
        for (int32_t i = 0; i < nm; i++) {
            if (model_path && mv[i].salt != salt) continue;
            printf("  %-3lld salt %016llx  %-24s %s, %d layers, row %llu B: %llu chunks, %.2f MiB stored\n",
                   (long long)mv[i].id, (unsigned long long)mv[i].salt, mv[i].name[0] ? mv[i].name : "(unnamed)",
                   rp_type_get_traits(mv[i].kv_type) ? rp_type_get_traits(mv[i].kv_type)->name : "?", mv[i].n_layer, (unsigned long long)mv[i].row_bytes,
                   (unsigned long long)mv[i].n_chunks, mib(mv[i].bytes));
        }
        free(mv);
        printf("chunks: %llu (%llu in files, %llu as BLOBs, %llu corrupt)\n", (unsigned long long)ss.n_chunks,
               (unsigned long long)ss.n_files, (unsigned long long)ss.n_blobs, (unsigned long long)ss.n_corrupt);
        printf("payload: %.2f MiB raw, %.2f MiB stored (%.3fx)\n", mib(ss.raw_bytes), mib(ss.stored_bytes),
               ss.stored_bytes ? (double)ss.raw_bytes / (double)ss.stored_bytes : 1.0);
        printf("keywords: %llu, vectors: %llu\n", (unsigned long long)ss.n_keywords, (unsigned long long)ss.n_vectors);
        printf("disk: %.2f MiB (database pages in use + WAL + payload files)\n", mib(ss.disk_bytes));
        printf("write failures: %llu (chunk writes that failed, e.g. disk full; recorded with the next write that "
               "succeeds)\n", (unsigned long long)ss.write_failures);
        rc = 0;
    } else if (!strcmp(sub, "ls")) {
        printf("%8s %8s %6s %6s %6s %5s %10s %10s %4s %-4s %6s %10s  %s\n", "id", "parent", "model", "tokens", "pos0",
               "exact", "raw_bytes", "stored", "loc", "enc", "hits", "last_used", "used at");
        ls_ctx x = {limit, 0};
        if ((st = rp_store_foreach(s, ls_one, &x)) != RP_OK) rc = cli_fail("cache", "ls", st);
        else rc = 0;
    } else if (!strcmp(sub, "verify")) {
        uint64_t ok = 0, bad = 0;
        /* the database itself first (SQLite's quick_check and the damage mark an earlier run left), then every row */
        char why[512];
        bool db_ok = true;
        if ((st = rp_store_quick_check(s, why, sizeof why, &db_ok)) != RP_OK) {
            rc = cli_fail("cache", "verify", st);
            goto out;
        }
        if (db_ok) printf("database: ok\n");
        else printf("database: DAMAGED: %s\n", why);
        if ((st = rp_store_verify(s, fix, bad_row, NULL, &ok, &bad)) != RP_OK) {
            rc = cli_fail("cache", "verify", st);
            goto out;
        }
        printf("verified %llu chunks: %llu ok, %llu corrupt%s\n", (unsigned long long)(ok + bad),
               (unsigned long long)ok, (unsigned long long)bad, bad && fix ? " (deleted)" : "");
        rc = (bad && !fix) || !db_ok ? 1 : 0;
    } else if (!strcmp(sub, "evict")) {
        rp_store_evict_params ep = {.policy = !strcmp(policy, "lru") ? RP_EVICT_LRU : RP_EVICT_COST,
                                    .clock = rp_store_clock(s),
                                    .half_life = 256,
                                    .cascade_weight = 1.0};
        const uint64_t target = (uint64_t)(to_mb * 1024.0 * 1024.0);
        const uint64_t before = rp_store_disk_bytes(s);
        int32_t nd = 0;
        uint64_t freed = 0;
        if ((st = rp_store_evict(s, target, &ep, NULL, &nd, &freed)) != RP_OK) {
            rc = cli_fail("cache", "evict", st);
            goto out;
        }
        printf("evicted %d chunks (%s): %.2f MiB -> %.2f MiB (target %.2f MiB)\n", nd, policy, mib(before),
               mib(rp_store_disk_bytes(s)), to_mb);
        rc = 0;
    } else if (!strcmp(sub, "compact")) {
        const uint64_t before = rp_store_disk_bytes(s);
        uint64_t removed = 0;
        if ((st = rp_store_compact(s, &removed)) != RP_OK) {
            rc = cli_fail("cache", "compact", st);
            goto out;
        }
        printf("compacted: %llu orphans removed, %.2f MiB -> %.2f MiB\n", (unsigned long long)removed, mib(before),
               mib(rp_store_disk_bytes(s)));
        rc = 0;
    } else {   /* clear */
        uint64_t n = 0;
        if ((st = rp_store_clear(s, &n)) != RP_OK) {
            rc = cli_fail("cache", "clear", st);
            goto out;
        }
        printf("cleared %llu chunks\n", (unsigned long long)n);
        rc = 0;
    }
out:
    rp_store_close(s);
    return rc;
}
