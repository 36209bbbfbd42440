/* test_store_crash_e2e.c — a real model's reuse engine SIGKILLed while persisting, over and over: `reprise cache verify` stays clean and reused chunks give prefill's logits. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "reuse/cache.h"
#include "reuse/engine.h"
#include "store/store.h"

#define N_DOCS 6
#define N_PROMPTS 10
#define PER_PROMPT 3
#define TAIL 8
#define MIN_ROUNDS 20
#define MAX_ROUNDS 200
#define TIME_BUDGET_S 60.0
#define N_CTX 1024
#define LOGIT_TOL 1e-4f   /* as tests/test_reuse.c for reuse that must equal prefill */

/* The prompts: BOS + PER_PROMPT of N_DOCS random-token documents (40-90
 * tokens) in different orders + a new tail; caller boundaries at each
 * document, so documents are chunks reused as prefix or elsewhere. Fixed
 * (seeded): the killed processes and the checking ones share them. */
typedef struct prompts {
    rp_token toks[N_PROMPTS][1 + PER_PROMPT * 90 + TAIL];
    int32_t n[N_PROMPTS];
    int32_t bnd[N_PROMPTS][PER_PROMPT + 1];
    int32_t nb[N_PROMPTS];
} prompts;

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void make_prompts(const rp_model *m, prompts *p) {
    uint64_t s = 0x5eed5eedull;
    const int32_t V = m->hp.n_vocab;
    rp_token docs[N_DOCS][90];
    int32_t dlen[N_DOCS];
    for (int d = 0; d < N_DOCS; d++) {
        dlen[d] = 40 + (int32_t)(xs(&s) % 51);
        for (int32_t i = 0; i < dlen[d]; i++) docs[d][i] = 3 + (rp_token)(xs(&s) % (uint64_t)(V - 3));
    }
    const rp_token bos = rp_tokenizer_bos(m->tok);
    for (int q = 0; q < N_PROMPTS; q++) {
        int pick[PER_PROMPT];
        for (int k = 0; k < PER_PROMPT; k++) {
            bool dup;
            do {
                pick[k] = (int)(xs(&s) % N_DOCS);
                dup = false;
                for (int j = 0; j < k; j++) dup |= pick[j] == pick[k];
            } while (dup);
        }
        int32_t at = 0;
        p->nb[q] = 0;
        if (bos >= 0) p->toks[q][at++] = bos;
        for (int k = 0; k < PER_PROMPT; k++) {
            if (at > 0) p->bnd[q][p->nb[q]++] = at;
            memcpy(p->toks[q] + at, docs[pick[k]], sizeof(rp_token) * (size_t)dlen[pick[k]]);
            at += dlen[pick[k]];
        }
        p->bnd[q][p->nb[q]++] = at;
        for (int i = 0; i < TAIL; i++) p->toks[q][at++] = 3 + (rp_token)(xs(&s) % (uint64_t)(V - 3));
        p->n[q] = at;
    }
}

typedef struct proc {
    rp_model *m;
    rp_ctx *ctx;
    rp_kv *kv;
    float *lg;
    prompts pr;
} proc;

/* Model, context and F32 KV (stored chunks are then bit-exact copies). Exits on failure (child processes only). */
static void proc_open(proc *p, const char *model_path) {
    memset(p, 0, sizeof *p);
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = 1;
    if (rp_model_load(model_path, mp, &p->m) != RP_OK) _exit(20);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = 1;
    cp.n_ctx_max = N_CTX;
    cp.n_batch = 512;
    cp.n_outputs = 1;
    if (rp_ctx_create(p->m, cp, &p->ctx) != RP_OK || rp_kv_create(p->m, N_CTX, RP_TYPE_F32, &p->kv) != RP_OK) _exit(21);
    p->lg = malloc(sizeof(float) * (size_t)p->m->hp.n_vocab);
    if (!p->lg) _exit(22);
    make_prompts(p->m, &p->pr);
}

/* An engine over the store in `dir` (fresh RAM pool: every hit at start is a flash hit). */
static rp_reuse *engine_on(proc *p, const char *dir, rp_reuse_mode mode, float ratio, size_t ram,
                           const rp_pool_params *pp) {
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = mode;
    rp.ratio = ratio;
    rp.cache_bytes = ram;
    rp_reuse *e = NULL;
    if (rp_reuse_create(p->m, RP_TYPE_F32, N_CTX, rp, &e) != RP_OK) _exit(23);
    rp_store_params sp = rp_store_default_params();
    sp.inline_max = 16 << 10;   /* both BLOBs and payload files */
    rp_store *s = NULL;
    /* a killed writer's lock is released by the kernel at its death */
    if (rp_store_open(dir, &sp, &s) != RP_OK ||
        rp_chunk_cache_attach_store(rp_reuse_cache(e), s, rp_reuse_salt(e), p->m->name, pp) != RP_OK)
        _exit(24);
    return e;
}

/* The victim: blend (r = 0.25, so approximate chunks are stored too) over
 * the prompts in random order as fast as it can, with a small RAM pool
 * (dirty victims to the writer), the writer persisting without delay and a
 * flash budget forcing flash evictions. Never returns. */
static void victim(const char *model_path, const char *dir, uint64_t seed) {
    proc p;
    proc_open(&p, model_path);
    rp_pool_params pp = rp_pool_default_params();
    pp.write_delay_ms = 0;
    pp.batch_bytes = 64 << 10;
    pp.disk_budget = 3 << 20;
    rp_reuse *e = engine_on(&p, dir, RP_REUSE_BLEND, 0.25f, 256 << 10, &pp);
    uint64_t s = seed | 1;
    for (;;) {
        const int q = (int)(xs(&s) % N_PROMPTS);
        rp_reuse_stats st;
        if (rp_reuse_prefill(e, p.ctx, p.kv, p.pr.toks[q], p.pr.n[q], p.pr.bnd[q], p.pr.nb[q], p.lg, &st) != RP_OK)
            _exit(25);
        if (rp_reuse_commit(e, p.kv) != RP_OK) _exit(26);
        if (xs(&s) % 4 == 0) usleep((useconds_t)(xs(&s) % 3000));   /* idle moments: the writer's turn */
    }
}

/* After a restart: every prompt through prefix reuse over the store (a
 * fresh process, empty pool: chunks come from flash) against a plain
 * prefill. Prefix mode takes only chunks stored as exact, whose KV must be
 * what a prefill computes: a torn, stale or misfiled row, or an approximate
 * chunk passed off as exact, shows in the logits. (Not blend at r = 1: blend
 * deliberately reuses approximate chunks along an identical token path,
 * see rp_reuse_resolve() in src/reuse/engine_match.c, so it repeats the earlier blended
 * result rather than a prefill.) Writes "reused_prefix reused_nonprefix
 * flash_hits worst_diff" to `out`; exit 0 if every logit is within
 * LOGIT_TOL, 1 if not. */
static void checker(const char *model_path, const char *dir, const char *out) {
    proc p;
    proc_open(&p, model_path);
    rp_pool_params pp = rp_pool_default_params();
    pp.no_prefetch = true;   /* hits from lookups, not a warm start */
    rp_reuse *e = engine_on(&p, dir, RP_REUSE_PREFIX, 1.0f, 8 << 20, &pp);
    rp_reuse_params np = rp_reuse_default_params();
    np.mode = RP_REUSE_NONE;
    rp_reuse *none = NULL;
    if (rp_reuse_create(p.m, RP_TYPE_F32, N_CTX, np, &none) != RP_OK) _exit(27);
    float *ref = malloc(sizeof(float) * (size_t)p.m->hp.n_vocab);
    if (!ref) _exit(28);
    long pre = 0, non = 0;
    float worst = 0;
    for (int q = 0; q < N_PROMPTS; q++) {
        rp_reuse_stats st;
        if (rp_reuse_prefill(e, p.ctx, p.kv, p.pr.toks[q], p.pr.n[q], p.pr.bnd[q], p.pr.nb[q], p.lg, &st) != RP_OK)
            _exit(29);
        pre += st.n_prefix;
        non += st.n_nonprefix;
        if (rp_reuse_prefill(none, p.ctx, p.kv, p.pr.toks[q], p.pr.n[q], p.pr.bnd[q], p.pr.nb[q], ref, &st) != RP_OK)
            _exit(30);
        float wq = 0;
        for (int32_t i = 0; i < p.m->hp.n_vocab; i++) {
            const float d = fabsf(p.lg[i] - ref[i]);
            if (!(d <= wq)) wq = d;   /* NaN counts as worst */
        }
        if (!(wq <= worst)) worst = wq;
    }
    const rp_cache_stats cs = rp_chunk_cache_stats(rp_reuse_cache(e));
    FILE *f = fopen(out, "w");
    if (!f) _exit(31);
    fprintf(f, "%ld %ld %llu %g\n", pre, non, (unsigned long long)cs.flash_hits, (double)worst);
    fclose(f);
    _exit(worst <= LOGIT_TOL ? 0 : 1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_sigkill_real_model(void **state) {
    (void)state;
    const char *mp = rp_test_shared("models/stories260K.gguf");
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    const char *bin = getenv("RP_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        RP_SKIP("RP_BIN does not name the reprise binary (ctest sets it)\n");
    }
    char dir[1024], out[1200], vout[1200], cmd[4096];
    snprintf(dir, sizeof dir, "%s/crash-e2e-%d", rp_test_tmpdir(), (int)getpid());
    snprintf(out, sizeof out, "%s.check", dir);
    snprintf(vout, sizeof vout, "%s.verify", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    fflush(NULL);   /* nothing buffered is written twice by the children */
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u;
    const double t0 = now_s();
    int rounds = 0, with_reuse = 0, no_store = 0;   /* no_store: kills that came before the store existed */
    long pre_all = 0, non_all = 0;
    unsigned long long flash_all = 0;
    float worst_all = 0;
    while (rounds < MAX_ROUNDS && no_store < 4 * MAX_ROUNDS && (rounds < MIN_ROUNDS || now_s() - t0 < TIME_BUDGET_S)) {
        /* 1. a process persisting chunks, killed at a random point (model load + setup take a few ms) */
        const pid_t v = fork();
        assert_true(v >= 0);
        if (v == 0) victim(mp, dir, seed + (uint64_t)rounds);
        usleep((useconds_t)(10000 + xs(&seed) % 290000));
        kill(v, SIGKILL);
        int ws = 0;
        assert_int_equal(waitpid(v, &ws, 0), v);
        if (!(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL))
            fail_msg("round %d: the victim exited on its own (status %d) before the kill", rounds, ws);
        /* 2. `reprise cache verify`: every checksum of every stored row (a victim killed before it created
         * the store — a slow start, e.g. under a sanitizer — left nothing to verify or reuse) */
        snprintf(cmd, sizeof cmd, "%s/kv.db", dir);
        if (access(cmd, F_OK) != 0) {
            no_store++;
            continue;
        }
        snprintf(cmd, sizeof cmd, "'%s' cache verify --cache-dir '%s' > '%s' 2>&1", bin, dir, vout);
        const int vr = system(cmd);
        char *txt = rp_test_read_file(vout, NULL);
        if (vr != 0 || !txt || !strstr(txt, " 0 corrupt"))
            fail_msg("round %d: cache verify exit %d: %s", rounds, vr, txt ? txt : "(no output)");
        free(txt);
        /* 3. a restarted process reuses the stored chunks: logits as a full prefill */
        const pid_t c = fork();
        assert_true(c >= 0);
        if (c == 0) checker(mp, dir, out);
        assert_int_equal(waitpid(c, &ws, 0), c);
        long pre = 0, non = 0;
        unsigned long long fh = 0;
        float worst = 0;
        FILE *f = fopen(out, "r");
        const bool got = f && fscanf(f, "%ld %ld %llu %f", &pre, &non, &fh, &worst) == 4;
        if (f) fclose(f);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || !got)
            fail_msg("round %d: checker status %d (exit %d), max |logit diff| %g (tolerance %g)", rounds, ws,
                     WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, (double)worst, (double)LOGIT_TOL);
        pre_all += pre;
        non_all += non;
        flash_all += fh;
        with_reuse += pre + non > 0;
        if (worst > worst_all) worst_all = worst;
        rounds++;
    }
    print_message("crash e2e: %d SIGKILLs in %.1f s (and %d before any store existed); cache verify clean after each; "
                  "restarts reused %ld exact prefix tokens (+ %ld non-prefix) (%llu flash hits; %d of %d rounds "
                  "reused), max |logit diff| vs prefill %g\n",
                  rounds, now_s() - t0, no_store, pre_all, non_all, flash_all, with_reuse, rounds, (double)worst_all);
    assert_true(rounds >= MIN_ROUNDS);
    /* the check is not vacuous: stored chunks were found and reused after most restarts */
    assert_true(flash_all > 0);
    assert_true(pre_all > 0);
    assert_true(with_reuse >= rounds / 2);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", dir, out, vout);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_real_model),
    };
    return rp_test_main(tests, NULL, NULL);
}
