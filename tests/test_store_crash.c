/* test_store_crash.c — SIGKILL a process 50 times at random points while it persists chunks; the store never has a corrupt row
 * nor a term document frequency that disagrees with its rows. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "reuse/cache.h"
#include "store/store.h"

#define N_LAYER 3
#define N_CTX 4096
#define ROW_BYTES 32
#define POS_OFF 1000
#define SALT 0xc0ffeeull
#define KILLS 50

static uint32_t row_word(int32_t layer, int32_t cell, int v, int j) {
    return (uint32_t)layer << 24 | (uint32_t)cell << 4 | (uint32_t)v << 3 | (uint32_t)j;
}

/* The payload of a chunk whose first token was at cell c0 is fully determined
 * by (layer, cell): a row that was torn, misplaced or stale cannot pass. */
static bool payload_ok(const uint8_t *kv, int32_t n_tokens, int32_t pos0) {
    const int32_t c0 = pos0 - POS_OFF;
    for (int32_t l = 0; l < N_LAYER; l++)
        for (int v = 0; v < 2; v++)
            for (int32_t t = 0; t < n_tokens; t++) {
                const uint32_t *w = (const uint32_t *)(kv + (((size_t)l * 2 + (size_t)v) * (size_t)n_tokens + (size_t)t) * ROW_BYTES);
                for (int j = 0; j < 8; j++)
                    if (w[j] != row_word(l, c0 + t, v, j)) return false;
            }
    return true;
}

static rp_kv *fake_kv(void) {
    rp_kv *kv = NULL;
    if (rp_kv_create_shape(N_LAYER, 2, 4, N_CTX, RP_TYPE_F32, RP_CPU_SCALAR, &kv) != RP_OK || kv->row_bytes != ROW_BYTES)
        _exit(2);   /* the writer child's exit codes name the failed step */
    uint32_t row[8];
    for (int32_t l = 0; l < N_LAYER; l++)
        for (int32_t c = 0; c < N_CTX; c++)
            for (int v = 0; v < 2; v++) {
                for (int j = 0; j < 8; j++) row[j] = row_word(l, c, v, j);
                rp_kv_write_rows(kv, v ? RP_KV_V : RP_KV_K, l, c, 1, (const uint8_t *)row);
            }
    for (int32_t c = 0; c < N_CTX; c++) kv->pos[c] = c + POS_OFF;
    kv->n = N_CTX;
    return kv;
}

/* The victim's semantic index (no model needed): up to 8 terms from each chunk's tokens (repeats merged by the
 * store) and a 4-float vector, so that every write also updates the term rows, their document frequencies
 * and the vectors in its transaction. */
static rp_status fake_indexer(void *user, const rp_token *const *toks, const int32_t *n, int32_t n_chunks,
                              rp_store_index *out) {
    (void)user;
    for (int32_t i = 0; i < n_chunks; i++) {
        const int32_t k = n[i] < 8 ? n[i] : 8;
        out[i].terms = malloc(sizeof *out[i].terms * (size_t)k);
        out[i].vec = malloc(sizeof *out[i].vec * 4);
        if (!out[i].terms || !out[i].vec) return RP_ERR_NOMEM;
        for (int32_t j = 0; j < k; j++) out[i].terms[j] = (rp_term){1 + (uint64_t)(toks[i][j] % 97), 1};
        out[i].n_terms = k;
        for (int j = 0; j < 4; j++) out[i].vec[j] = (float)(toks[i][j % n[i]] % 13) + 1;
        out[i].dim = 4;
        out[i].vec_src = 5;
    }
    return RP_OK;
}

/* The victim: inserts prompts (chains of 1-4 chunks of 8-200 tokens, some
 * payloads big enough to be files) as fast as it can, with the writer
 * persisting in the background, a flash budget forcing evictions, explicit
 * flushes and disk evictions. Never returns. */
static void victim(const char *dir, unsigned seed) {
    srand(seed);
    rp_kv *kv = fake_kv();
    rp_cache_params cp = {.budget_bytes = 512 << 10, .n_layer = N_LAYER, .row_bytes = ROW_BYTES, .kv_type = RP_TYPE_F32};
    rp_chunk_cache *c = NULL;
    if (rp_chunk_cache_create(cp, &c) != RP_OK) _exit(3);
    rp_store_params sp = rp_store_default_params();
    sp.inline_max = 8 << 10;   /* both BLOBs and files */
    rp_store *s = NULL;
    /* the previous victim's lock is released by the kernel at its death */
    if (rp_store_open(dir, &sp, &s) != RP_OK) _exit(4);
    rp_chunk_cache_set_indexer(c, fake_indexer, NULL);
    rp_pool_params pp = rp_pool_default_params();
    pp.write_delay_ms = 0;
    pp.disk_budget = 3 << 20;
    pp.batch_bytes = 256 << 10;
    if (rp_chunk_cache_attach_store(c, s, SALT, "crash", &pp) != RP_OK) _exit(5);
    rp_token toks[4 * 200];
    rp_chunk_span sp4[4];
    for (uint64_t it = 0;; it++) {
        const int n = 1 + rand() % 4;
        int32_t off = 0;
        for (int i = 0; i < n; i++) {
            const int32_t len = 8 + rand() % 193;
            for (int32_t k = 0; k < len; k++) toks[off + k] = (rp_token)(rand() % 5000);
            sp4[i] = (rp_chunk_span){.begin = off, .len = len, .hash = rp_chunk_hash(toks + off, len, SALT)};
            off += len;
        }
        /* cells: anywhere in the fake cache; the payload encodes which */
        const int32_t base = rand() % (N_CTX - off);
        rp_chunk *parent = NULL, *held[4];
        int nh = 0;
        int32_t k = rp_chunk_cache_match_prefix(c, toks, sp4, n, held);
        nh = k;
        parent = k ? held[k - 1] : NULL;
        for (int i = k; i < n; i++) {
            rp_chunk *ch = NULL;
            if (rp_chunk_cache_insert(c, parent, toks, &sp4[i], kv, base + sp4[i].begin, 1.0, &ch) != RP_OK) _exit(6);
            if (!ch) break;
            ch->exact = rand() % 2;
            held[nh++] = ch;
            parent = ch;
        }
        for (int i = nh - 1; i >= 0; i--) rp_chunk_unpin(c, held[i]);
        if (it % 50 == 49) rp_chunk_cache_flush(c);
        if (it % 200 == 199) rp_chunk_cache_evict_disk(c, 1 << 20, NULL);
    }
}

typedef struct check_ctx {
    rp_store *s;
    uint64_t rows, bad_payload;
} check_ctx;

static bool check_row(void *user, const rp_store_chunk *c) {
    check_ctx *x = user;
    x->rows++;
    rp_store_chunk m;
    bool f = false;
    if (rp_store_get(x->s, c->id, &m, &f) != RP_OK || !f) {
        x->bad_payload++;
        return true;
    }
    uint8_t *buf = malloc(m.kv_bytes);
    if (rp_store_load(x->s, &m, buf) != RP_OK || !payload_ok(buf, m.n_tokens, m.pos0)) x->bad_payload++;
    free(buf);
    rp_store_chunk_clear(&m);
    return true;
}

static void test_sigkill_during_persistence(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/crash", rp_test_tmpdir());
    srand((unsigned)time(NULL));
    const unsigned seed0 = (unsigned)rand();
    print_message("seed %u\n", seed0);
    uint64_t max_rows = 0, total_ok = 0, orphans = 0;
    int kills = 0;
    for (int i = 0; i < KILLS; i++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) victim(dir, seed0 + (unsigned)i);
        /* a random point: 30..400 ms into the victim's life (open, attach, writes, evictions) */
        usleep(30000 + (useconds_t)(rand() % 370000));
        assert_int_equal(kill(pid, SIGKILL), 0);
        int wst = 0;
        assert_int_equal(waitpid(pid, &wst, 0), pid);
        if (WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL) kills++;
        else print_message("victim %d exited early with status %d\n", i, WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
        /* the store after the crash: opening for writing works (lock released, WAL recovered),
         * every row verifies (the term index's document frequencies too), every payload is the KV it claims to
         * be, and every row is term-indexed */
        rp_store_params sp = rp_store_default_params();
        rp_store *s = NULL;
        assert_int_equal(rp_store_open(dir, &sp, &s), RP_OK);
        uint64_t ok = 0, bad = 0;
        assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &bad), RP_OK);
        assert_int_equal(bad, 0);
        check_ctx x = {.s = s};
        if (rp_store_bind_salt(s, SALT) == RP_OK) assert_int_equal(rp_store_foreach(s, check_row, &x), RP_OK);
        assert_int_equal(x.bad_payload, 0);
        assert_true(x.rows == ok);
        rp_store_stats ss;
        assert_int_equal(rp_store_stats_get(s, &ss), RP_OK);
        assert_true(ss.n_term_docs == ok);
        assert_true(ss.n_vectors == ok);
        if (ok > max_rows) max_rows = ok;
        total_ok += ok;
        if (i % 10 == 9) {   /* orphans of killed transactions go; nothing valid does */
            uint64_t removed = 0;
            assert_int_equal(rp_store_compact(s, &removed), RP_OK);
            orphans += removed;
            assert_int_equal(rp_store_verify(s, false, NULL, NULL, &ok, &bad), RP_OK);
            assert_int_equal(bad, 0);
            assert_true(ok == x.rows);
        }
        rp_store_close(s);
    }
    assert_int_equal(kills, KILLS);
    assert_true(max_rows > 0);   /* the victims did persist something */
    print_message("%d SIGKILLs during persistence: every restart verified clean (max %llu rows, %llu row checks, "
                  "%llu orphans of interrupted transactions removed by compact)\n",
                  kills, (unsigned long long)max_rows, (unsigned long long)total_ok, (unsigned long long)orphans);
    /* and the CLI agrees */
    const char *bin = getenv("RP_BIN");
    if (bin && *bin) {
        char cmd[8192 + 64];
        snprintf(cmd, sizeof cmd, "'%s' cache verify --cache-dir '%s' > /dev/null", bin, dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* `reprise cache ...` on a store with a corrupt row, and `reprise run --cache-dir` across two processes. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool file_has(const char *path, const char *needle) {
    char *t = rp_test_read_file(path, NULL);
    bool r = t && strstr(t, needle);
    free(t);
    return r;
}

static void test_cli_cache(void **state) {
    (void)state;
    const char *bin = getenv("RP_BIN");
    if (!bin || !*bin) {
        RP_SKIP("RP_BIN not set\n");
    }
    const char *tmp = rp_test_tmpdir();
    char dir[4096], out[4096 + 16];
    snprintf(dir, sizeof dir, "%s/cli-store", tmp);
    snprintf(out, sizeof out, "%s/cli.out", tmp);
    /* a store with 6 chunks, two of them files */
    rp_kv *kv = fake_kv();
    rp_cache_params cp = {.budget_bytes = 1 << 20, .n_layer = N_LAYER, .row_bytes = ROW_BYTES, .kv_type = RP_TYPE_F32};
    rp_chunk_cache *c = NULL;
    assert_int_equal(rp_chunk_cache_create(cp, &c), RP_OK);
    rp_store_params sp = rp_store_default_params();
    sp.inline_max = 4096;
    rp_store *s = NULL;
    assert_int_equal(rp_store_open(dir, &sp, &s), RP_OK);
    assert_int_equal(rp_chunk_cache_attach_store(c, s, SALT, "cli", NULL), RP_OK);
    rp_token t[400];
    for (int i = 0; i < 400; i++) t[i] = (rp_token)(i * 7 + 3);
    rp_chunk *parent = NULL;
    for (int i = 0; i < 6; i++) {
        const int32_t len = i < 2 ? 60 : 20;
        rp_chunk_span span = {.begin = i * 60, .len = len, .hash = rp_chunk_hash(t + i * 60, len, SALT)};
        rp_chunk *ch = NULL;
        assert_int_equal(rp_chunk_cache_insert(c, parent, t, &span, kv, i * 60, 5, &ch), RP_OK);
        ch->exact = true;
        if (parent) rp_chunk_unpin(c, parent);
        parent = ch;
    }
    rp_chunk_unpin(c, parent);
    rp_chunk_cache_free(c);
    rp_kv_free(kv);

    assert_int_equal(sh("'%s' cache stats --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "chunks: 6 (2 in files, 4 as BLOBs, 0 corrupt)"));
    assert_int_equal(sh("'%s' cache ls --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "file") && file_has(out, "blob"));
    assert_int_equal(sh("'%s' cache verify --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "6 ok, 0 corrupt"));
    /* a flipped bit in a stored BLOB: verify names the row and fails; --fix removes it */
    char db[4096 + 16];
    snprintf(db, sizeof db, "%s/kv.db", dir);
    assert_int_equal(sh("sqlite3 '%s' \"UPDATE payloads SET data = zeroblob(length(data)) WHERE id = 4\" 2>/dev/null || "
                        "python3 -c \"import sqlite3; d=sqlite3.connect('%s'); "
                        "d.execute('UPDATE payloads SET data = zeroblob(length(data)) WHERE id = 4'); d.commit()\"",
                        db, db),
                     0);
    assert_int_equal(sh("'%s' cache verify --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 1);
    assert_true(file_has(out, "corrupt: chunk 4") && file_has(out, "5 ok, 1 corrupt"));
    assert_int_equal(sh("'%s' cache verify --fix --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_int_equal(sh("'%s' cache verify --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "5 ok, 0 corrupt"));
    assert_int_equal(sh("'%s' cache evict --to-mb 0.02 --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "evicted"));
    assert_int_equal(sh("'%s' cache compact --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_int_equal(sh("'%s' cache clear --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_int_equal(sh("'%s' cache stats --cache-dir '%s' > '%s' 2>&1", bin, dir, out), 0);
    assert_true(file_has(out, "chunks: 0"));
    /* bad usage */
    assert_int_equal(sh("'%s' cache frob --cache-dir '%s' > /dev/null 2>&1", bin, dir), 2);
    assert_int_equal(sh("'%s' cache stats > /dev/null 2>&1", bin), 2);
    assert_int_equal(sh("'%s' cache evict --cache-dir '%s' > /dev/null 2>&1", bin, dir), 2);

    /* two `reprise run` processes on one --cache-dir: the second reuses the first's prompt */
    const char *model = rp_test_shared("models/stories260K.gguf");
    if (!model) {
        print_message("SKIP (run part): ../shared/models/stories260K.gguf not found\n");
        return;
    }
    char rdir[4096];
    snprintf(rdir, sizeof rdir, "%s/cli-run", tmp);
    const char *prompt = "Once upon a time there was a little girl who loved to play in the park with her big dog";
    assert_int_equal(sh("'%s' run -m '%s' -p '%s' -n 4 --temp 0 --cache-dir '%s' > /dev/null 2> '%s'", bin, model, prompt,
                        rdir, out),
                     0);
    assert_true(file_has(out, "\"reused_prefix\": 0"));
    assert_int_equal(sh("'%s' run -m '%s' -p '%s' -n 4 --temp 0 --cache-dir '%s' > /dev/null 2> '%s'", bin, model, prompt,
                        rdir, out),
                     0);
    assert_false(file_has(out, "\"reused_prefix\": 0,"));
    assert_int_equal(sh("'%s' cache stats -m '%s' --cache-dir '%s' > '%s' 2>&1", bin, model, rdir, out), 0);
    assert_true(file_has(out, "stories260K"));
    assert_int_equal(sh("'%s' cache verify --cache-dir '%s' > /dev/null 2>&1", bin, rdir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_during_persistence),
        cmocka_unit_test(test_cli_cache),
    };
    return rp_test_main(tests, NULL, NULL);
}
