/* cmd_cache.c — `reprise cache stats|ls|verify|evict|compact|clear`: inspect and maintain a KV store directory
 * (over the public API). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "progress.h"
#include "reprise.h"

static void cache_usage(FILE *f) {
    fprintf(f,
            "usage: reprise cache <command> --cache-dir DIR [-m MODEL.gguf [--kv-type T]] [options]\n"
            "commands:\n"
            "  stats              models, chunks, payload bytes (raw / stored), files vs BLOBs, disk use, corrupt rows\n"
            "  ls [--limit N]     chunks: id, parent, tokens, position, exact, bytes, where, hits, last use\n"
            "  verify [--fix]     SQLite's quick_check of the database, then every checksum; report a damaged database\n"
            "                     and corrupt rows, then the term index's document frequencies (exit 1 if any);\n"
            "                     --fix deletes the corrupt rows and rebuilds the frequencies\n"
            "  evict --to-mb N    cost-aware eviction until the store uses at most N MiB [--policy cost|lru]\n"
            "  compact            remove orphans (payloads, keywords, terms, vectors, files without rows), rebuild\n"
            "                     the term document frequencies, then VACUUM\n"
            "  clear              delete every chunk (of -m MODEL only, when given)\n"
            "-m MODEL restricts the command to the chunks written for that model and KV type (the reuse salt);\n"
            "without it every model in the store is included.\n"
            "The store's files are private (dir 0700, files 0600): a store directory or file that is not yours or\n"
            "is group/world-writable is refused (another user could have planted KV or read token ids); a writer\n"
            "tightens read permission for others. Checksums are keyed with a random secret of the store (in\n"
            "kv.db): KV copied from another store is corrupt here. A store of older builds (unkeyed) is refused by\n"
            "stats/ls/verify; clear, or any run/serve on it, upgrades it (its chunks are dropped). A store of the\n"
            "format before the term index (schema 2) is read as it is and upgraded in place by any writer (its\n"
            "chunks are kept).\n");
}

typedef struct ls_ctx {
    long limit, n;
} ls_ctx;

static bool ls_one(void *user, const rp_cache_entry *c) {
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
           (unsigned long long)c->parent, (long long)c->model, c->n_tokens, c->pos0, c->exact ? "yes" : "no",
           (unsigned long long)c->raw_bytes, (unsigned long long)c->stored_bytes, c->in_file ? "file" : "blob",
           c->compressed ? "zstd" : "raw", (unsigned long long)c->hits, (unsigned long long)c->last_used, when,
           c->tokens ? "" : "  (damaged)");
    if (c->tokens) {
        printf("  [");
        for (int32_t i = 0; i < c->n_tokens && i < 8; i++) printf("%s%d", i ? " " : "", c->tokens[i]);
        printf("%s]", c->n_tokens > 8 ? " ..." : "");
    }
    printf("\n");
    return true;
}

/* verify's corrupt rows, printed after the database's verdict (which the call gives at its end) */
static void bad_row(void *user, uint64_t id, const char *why) {
    if (id == 0) fprintf(user, "corrupt: %s\n", why);   /* not a chunk: the term index (its text says so) */
    else fprintf(user, "corrupt: chunk %llu: %s\n", (unsigned long long)id, why);
}

typedef struct models_ctx {
    bool only;       /* only the model of `salt` (-m) */
    uint64_t salt;
} models_ctx;

static bool model_line(void *user, const rp_cache_model *mv) {
    const models_ctx *x = user;
    if (x->only && mv->salt != x->salt) return true;
    printf("  %-3lld salt %016llx  %-24s %s, %d layers, row %llu B: %llu chunks, %.2f MiB stored\n", (long long)mv->id,
           (unsigned long long)mv->salt, mv->name[0] ? mv->name : "(unnamed)", rp_kv_type_name((rp_kv_type)mv->kv_type),
           mv->n_layer, (unsigned long long)mv->row_bytes, (unsigned long long)mv->chunks, (double)mv->bytes / 1048576.0);
    return true;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* The reuse salt of a model + KV type, computed by the library the way engines
 * compute it, so it can never drift from what `reprise run` writes. */
static int model_salt(const char *path, const char *kv_name, rp_model **m, rp_kv_type *kv, uint64_t *salt) {
    const int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
        fprintf(stderr, "reprise cache: --kv-type must be f16, q8_0 or f32, got '%s'\n", kv_name);
        return 2;
    }
    *kv = (rp_kv_type)kv_type;
    rp_status st = cli_model_load(path, rp_model_default_params(), m);
    if (st != RP_OK) return cli_fail("cache", path, st);
    if ((st = rp_cache_salt(*m, *kv, salt)) != RP_OK) return cli_fail("cache", "reuse engine", st);
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
    rp_model *m = NULL;
    rp_kv_type kv = RP_KV_F16;
    uint64_t salt = 0;
    if (model_path) {
        int rc = model_salt(model_path, kv_name, &m, &kv, &salt);
        if (rc) {
            rp_model_free(m);
            return rc;
        }
    }
    /* readers do not take the lock: stats / ls / verify work while `reprise run` uses the store */
    const bool writes = !strcmp(sub, "evict") || !strcmp(sub, "compact") || !strcmp(sub, "clear") || fix;
    rp_cache *c = NULL;
    rp_status st = rp_cache_open(dir, writes, &c);
    if (st != RP_OK) {
        rp_model_free(m);
        return cli_fail("cache", dir, st);
    }
    int rc = 1;
    if (rp_cache_is_empty(c)) {   /* created and never committed to (its first writer died at once): nothing to read, nothing corrupt */
        if (!strcmp(sub, "verify")) printf("verified 0 chunks: 0 ok, 0 corrupt (empty store)\n");
        else printf("empty store in %s (no chunk was ever committed)\n", dir);
        rc = 0;
        goto out;
    }
    if (m && (st = rp_cache_bind(c, m, kv)) != RP_OK) {
        if (st == RP_ERR_NOT_FOUND) {
            printf("no chunks for this model (salt %016llx) in %s\n", (unsigned long long)salt, dir);
            rc = 0;   /* nothing stored for it: every command trivially succeeds */
        } else {
            rc = cli_fail("cache", "model", st);
        }
        goto out;
    }

    if (!strcmp(sub, "stats")) {
        rp_cache_info info;
        if ((st = rp_cache_info_get(c, &info)) != RP_OK) {
            rc = cli_fail("cache", "stats", st);
            goto out;
        }
        printf("store: %s\n", dir);
        printf("models: %d\n", info.models);
        models_ctx mx = {m != NULL, salt};
        if ((st = rp_cache_models(c, model_line, &mx)) != RP_OK) {
            rc = cli_fail("cache", "stats", st);
            goto out;
        }
        printf("chunks: %llu (%llu in files, %llu as BLOBs, %llu corrupt)\n", (unsigned long long)info.chunks,
               (unsigned long long)info.files, (unsigned long long)info.blobs, (unsigned long long)info.corrupt);
        printf("payload: %.2f MiB raw, %.2f MiB stored (%.3fx)\n", mib(info.raw_bytes), mib(info.stored_bytes),
               info.stored_bytes ? (double)info.raw_bytes / (double)info.stored_bytes : 1.0);
        printf("keywords: %llu, vectors: %llu, terms: %llu (in %llu chunks)\n", (unsigned long long)info.keywords,
               (unsigned long long)info.vectors, (unsigned long long)info.terms, (unsigned long long)info.term_docs);
        printf("disk: %.2f MiB (database pages in use + WAL + payload files)\n", mib(info.disk_bytes));
        printf("write failures: %llu (chunk writes that failed, e.g. disk full; recorded with the next write that "
               "succeeds)\n", (unsigned long long)info.write_failures);
        rc = 0;
    } else if (!strcmp(sub, "ls")) {
        printf("%8s %8s %6s %6s %6s %5s %10s %10s %4s %-4s %6s %10s  %s\n", "id", "parent", "model", "tokens", "pos0",
               "exact", "raw_bytes", "stored", "loc", "enc", "hits", "last_used", "used at");
        ls_ctx x = {limit, 0};
        if ((st = rp_cache_list(c, ls_one, &x)) != RP_OK) rc = cli_fail("cache", "ls", st);
        else rc = 0;
    } else if (!strcmp(sub, "verify")) {
        /* the database itself first (SQLite's quick_check and the damage mark an earlier run left), then every
         * row: the rows' lines wait for the database's verdict */
        char why[512], *rows = NULL;
        size_t rows_len = 0;
        FILE *rf = open_memstream(&rows, &rows_len);
        if (!rf) {
            fprintf(stderr, "reprise cache: out of memory\n");
            goto out;
        }
        uint64_t ok = 0, bad = 0;
        bool db_ok = true;
        st = rp_cache_verify(c, fix, bad_row, rf, &db_ok, why, sizeof why, &ok, &bad);
        fclose(rf);
        if (st != RP_OK) {
            free(rows);
            rc = cli_fail("cache", "verify", st);
            goto out;
        }
        if (db_ok) printf("database: ok\n");
        else printf("database: DAMAGED: %s\n", why);
        fwrite(rows, 1, rows_len, stdout);
        free(rows);
        printf("verified %llu chunks: %llu ok, %llu corrupt%s\n", (unsigned long long)(ok + bad),
               (unsigned long long)ok, (unsigned long long)bad, bad && fix ? " (deleted)" : "");
        rc = (bad && !fix) || !db_ok ? 1 : 0;
    } else if (!strcmp(sub, "evict")) {
        const uint64_t target = (uint64_t)(to_mb * 1024.0 * 1024.0);
        const uint64_t before = rp_cache_disk_bytes(c);
        uint64_t freed = 0;
        int32_t nd = 0;
        if ((st = rp_cache_evict(c, target, !strcmp(policy, "lru"), &nd, &freed)) != RP_OK) {
            rc = cli_fail("cache", "evict", st);
            goto out;
        }
        printf("evicted %d chunks (%s): %.2f MiB -> %.2f MiB (target %.2f MiB)\n", nd, policy, mib(before),
               mib(rp_cache_disk_bytes(c)), to_mb);
        rc = 0;
    } else if (!strcmp(sub, "compact")) {
        const uint64_t before = rp_cache_disk_bytes(c);
        uint64_t removed = 0;
        if ((st = rp_cache_compact(c, &removed)) != RP_OK) {
            rc = cli_fail("cache", "compact", st);
            goto out;
        }
        printf("compacted: %llu orphans removed, %.2f MiB -> %.2f MiB\n", (unsigned long long)removed, mib(before),
               mib(rp_cache_disk_bytes(c)));
        rc = 0;
    } else {   /* clear */
        uint64_t n = 0;
        if ((st = rp_cache_clear(c, &n)) != RP_OK) {
            rc = cli_fail("cache", "clear", st);
            goto out;
        }
        printf("cleared %llu chunks\n", (unsigned long long)n);
        rc = 0;
    }
out:
    rp_cache_close(c);
    rp_model_free(m);
    return rc;
}
