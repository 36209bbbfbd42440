/* bench_fidelity.c — `reprise bench fidelity`: KL and greedy agreement of full / blend reuse against exact prefill. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/sampler.h"
#include "reuse/engine.h"

#define MAX_DOCS 64
#define MAX_DOC_TOK 256

typedef struct doc {
    rp_token t[MAX_DOC_TOK];
    int32_t n;
} doc;

/* log-softmax of logits into lp */
static void log_softmax(const float *x, int32_t n, double *lp) {
    double mx = x[0];
    for (int32_t i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp(x[i] - mx);
    double ls = log(s) + mx;
    for (int32_t i = 0; i < n; i++) lp[i] = x[i] - ls;
}

static double kl_div(const double *lp, const double *lq, int32_t n) {   /* KL(p || q) */
    double k = 0;
    for (int32_t i = 0; i < n; i++) k += exp(lp[i]) * (lp[i] - lq[i]);
    return k > 0 ? k : 0;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

typedef struct mode_spec {
    const char *name;
    rp_reuse_mode mode;
    float ratio;
    double kl_sum;
    long agree, steps;
    double ttft_sum;
    long reused, recomputed;
} mode_spec;

/* Feeds one token at position/cell `pos` and returns its logits. */
static const float *step(rp_ctx *ctx, rp_kv *kv, rp_batch *b, rp_token t, int32_t pos) {
    rp_batch_clear(b);
    rp_batch_add(b, t, 0, pos, pos, true);
    if (rp_forward(ctx, b, &kv, 1) != RP_OK) return NULL;
    return rp_ctx_logits(ctx, 0);
}

int bench_fidelity(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench fidelity"};
    const char *model_path = NULL, *kv_name = "f16", *dev_name = "kv";
    int select = RP_SELECT_HYBRID;
    long n_docs = 12, n_prompts = 50, n_gen = 32, doc_len = 64, threads = 2, seed = 1, check_layer = 1;
    bool json = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench fidelity -m MODEL.gguf [--docs 12] [--prompts 50] [--gen 32] [--doc-len 64]\n"
                   "                              [--seed 1] [--kv-type f16|f32|q8_0] [--check-layer 1] [--dev k|v|kv]\n"
                   "                              [--select hybrid|dev|attn]\n"
                   "                              [-t 2] [--json]\n"
                   "The model writes --docs stories (sampled, temp 0.8); each prompt is 4-6 of them in random order\n"
                   "plus a short tail. Documents are cached once (as a retrieval system would); then each prompt is\n"
                   "run exactly (no reuse) and with full reuse and blend at r = 0.1, 0.25, 0.5: mean KL(exact || mode)\n"
                   "of the next-token distributions over --gen steps teacher-forced on the exact run's greedy tokens,\n"
                   "greedy agreement, and TTFT.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--docs", NULL)) { if (!cli_int(&a, 6, MAX_DOCS, &n_docs)) return 2; }
        else if (cli_is(&a, "--prompts", NULL)) { if (!cli_int(&a, 1, 100000, &n_prompts)) return 2; }
        else if (cli_is(&a, "--gen", NULL)) { if (!cli_int(&a, 1, 256, &n_gen)) return 2; }
        else if (cli_is(&a, "--doc-len", NULL)) { if (!cli_int(&a, 8, MAX_DOC_TOK, &doc_len)) return 2; }
        else if (cli_is(&a, "--seed", NULL)) { if (!cli_int(&a, 0, 1L << 40, &seed)) return 2; }
        else if (cli_is(&a, "--check-layer", NULL)) { if (!cli_int(&a, 0, 1024, &check_layer)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "--dev", NULL)) { if (!cli_str(&a, &dev_name)) return 2; }
        else if (cli_is(&a, "--select", NULL)) { if (!cli_select(&a, &select)) return 2; }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise bench fidelity: -m MODEL.gguf is required\n"); return 2; }
    rp_dev_kind dev = !strcmp(dev_name, "k") ? RP_DEV_K : !strcmp(dev_name, "v") ? RP_DEV_V : !strcmp(dev_name, "kv") ? RP_DEV_KV : 0;
    if (!dev) { fprintf(stderr, "reprise bench fidelity: --dev must be k, v or kv\n"); return 2; }
    int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_F32 && kv_type != RP_TYPE_Q8_0) {
        fprintf(stderr, "reprise bench fidelity: --kv-type must be f16, f32 or q8_0\n");
        return 2;
    }
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    const int32_t V = m->hp.n_vocab;
    const int32_t max_prompt = 1 + 6 * (int32_t)doc_len + 8;
    const int32_t n_ctx = max_prompt + (int32_t)n_gen + 8;
    if (n_ctx > m->hp.n_ctx_train)
        fprintf(stderr, "reprise bench fidelity: note: %d cells exceed the model's training context %d\n", n_ctx,
                m->hp.n_ctx_train);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = (int)threads;
    cp.n_batch = n_ctx;
    cp.n_outputs = 1;
    cp.n_ctx_max = n_ctx;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    rp_batch b = {0};
    rp_sampler *smp = NULL;
    rp_reuse *eng[4] = {NULL}, *exact = NULL;
    doc *docs = calloc((size_t)n_docs, sizeof *docs);
    rp_token *prompt = malloc(sizeof(rp_token) * (size_t)max_prompt);
    rp_token *ref = malloc(sizeof(rp_token) * (size_t)n_gen);
    float *ref_logits = malloc(sizeof(float) * (size_t)V * (size_t)n_gen);
    float *lg0 = malloc(sizeof(float) * (size_t)V);
    double *lp = malloc(sizeof(double) * (size_t)V), *lq = malloc(sizeof(double) * (size_t)V);
    int rc = 1;
    if (!docs || !prompt || !ref || !ref_logits || !lg0 || !lp || !lq) { fprintf(stderr, "out of memory\n"); goto out; }
    if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK || (st = rp_kv_create(m, n_ctx, (rp_type)kv_type, &kv)) != RP_OK ||
        (st = rp_batch_init(&b, n_ctx)) != RP_OK) {
        rc = cli_fail(a.cmd, "setup", st);
        goto out;
    }
    /* 1. the model writes the documents */
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 0.8f;
    sp.seed = (uint64_t)seed;
    if ((st = rp_sampler_create(sp, V, &smp)) != RP_OK) { rc = cli_fail(a.cmd, "sampler", st); goto out; }
    const rp_token bos = m->tok ? rp_tokenizer_bos(m->tok) : 1;
    for (long d = 0; d < n_docs; d++) {
        rp_kv_clear(kv);
        const float *lg = step(ctx, kv, &b, bos, 0);
        int32_t n = 0;
        while (lg && n < doc_len) {
            rp_token t = rp_sampler_sample(smp, lg);
            if (m->tok && rp_tokenizer_is_eog(m->tok, t)) {
                if (n >= doc_len / 2) break;
                continue;   /* resample: keep documents long enough */
            }
            docs[d].t[n++] = t;
            lg = step(ctx, kv, &b, t, n);
        }
        docs[d].n = n;
    }
    /* 2. engines, one per mode, each warmed with every document cached once */
    mode_spec modes[5] = {
        {"exact", RP_REUSE_NONE, 0, 0, 0, 0, 0, 0, 0},
        {"full", RP_REUSE_FULL, 0, 0, 0, 0, 0, 0, 0},
        {"blend r=0.10", RP_REUSE_BLEND, 0.10f, 0, 0, 0, 0, 0, 0},
        {"blend r=0.25", RP_REUSE_BLEND, 0.25f, 0, 0, 0, 0, 0, 0},
        {"blend r=0.50", RP_REUSE_BLEND, 0.50f, 0, 0, 0, 0, 0, 0},
    };
    rp_reuse_params ep = rp_reuse_default_params();
    ep.mode = RP_REUSE_NONE;
    if ((st = rp_reuse_create(m, (rp_type)kv_type, max_prompt, ep, &exact)) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
    for (int k = 0; k < 4; k++) {
        rp_reuse_params pp = rp_reuse_default_params();
        pp.mode = modes[k + 1].mode;
        pp.ratio = modes[k + 1].ratio;
        pp.blend.check_layer = (int32_t)check_layer;
        pp.blend.dev = dev;
        pp.blend.select = (rp_select_kind)select;
        if ((st = rp_reuse_create(m, (rp_type)kv_type, max_prompt, pp, &eng[k])) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
        for (long d = 0; d < n_docs; d++) {   /* [BOS][doc]: the document is its own chunk */
            prompt[0] = bos;
            memcpy(prompt + 1, docs[d].t, sizeof(rp_token) * (size_t)docs[d].n);
            int32_t bnd = 1;
            rp_reuse_stats rs;
            rp_reuse_params save = *rp_reuse_get_params(eng[k]);
            rp_reuse_get_params(eng[k])->mode = RP_REUSE_PREFIX;   /* warm-up computes exactly */
            st = rp_reuse_prefill(eng[k], ctx, kv, prompt, 1 + docs[d].n, &bnd, 1, lg0, &rs);
            *rp_reuse_get_params(eng[k]) = save;
            if (st == RP_OK) st = rp_reuse_commit(eng[k], kv);
            if (st != RP_OK) { rc = cli_fail(a.cmd, "warm-up", st); goto out; }
        }
    }
    /* 3. prompts */
    uint64_t rs_state = 0x9e3779b97f4a7c15ULL ^ (uint64_t)seed;
    for (long p = 0; p < n_prompts; p++) {
        int32_t nd = 4 + (int32_t)(rng_next(&rs_state) % 3), pick[6], n = 0, bounds[8], nb = 0;
        for (int32_t i = 0; i < nd; i++) {
            int32_t d;
            bool dup;
            do {
                d = (int32_t)(rng_next(&rs_state) % (uint64_t)n_docs);
                dup = false;
                for (int32_t j = 0; j < i; j++) dup |= pick[j] == d;
            } while (dup);
            pick[i] = d;
        }
        prompt[n++] = bos;
        for (int32_t i = 0; i < nd; i++) {
            bounds[nb++] = n;
            memcpy(prompt + n, docs[pick[i]].t, sizeof(rp_token) * (size_t)docs[pick[i]].n);
            n += docs[pick[i]].n;
        }
        /* tail: the first 4 tokens of another document (a question in RAG terms: new text) */
        bounds[nb++] = n;
        const doc *td = &docs[rng_next(&rs_state) % (uint64_t)n_docs];
        for (int32_t i = 0; i < 4 && i < td->n; i++) prompt[n++] = td->t[i];
        /* exact run: greedy reference and its logits */
        rp_reuse_stats rs;
        if ((st = rp_reuse_prefill(exact, ctx, kv, prompt, n, bounds, nb, lg0, &rs)) != RP_OK) { rc = cli_fail(a.cmd, "exact", st); goto out; }
        modes[0].ttft_sum += rs.ttft_ms;
        const float *lg = lg0;
        for (long g = 0; g < n_gen; g++) {
            memcpy(ref_logits + (size_t)g * V, lg, sizeof(float) * (size_t)V);
            ref[g] = argmax(lg, V);
            if (g + 1 < n_gen) lg = step(ctx, kv, &b, ref[g], n + (int32_t)g);
            if (!lg) { rc = cli_fail(a.cmd, "decode", 1); goto out; }
        }
        for (int k = 0; k < 4; k++) {
            mode_spec *ms = &modes[k + 1];
            if ((st = rp_reuse_prefill(eng[k], ctx, kv, prompt, n, bounds, nb, lg0, &rs)) != RP_OK) { rc = cli_fail(a.cmd, ms->name, st); goto out; }
            ms->ttft_sum += rs.ttft_ms;
            ms->reused += rs.n_prefix + rs.n_nonprefix;
            ms->recomputed += rs.n_recomputed;
            lg = lg0;
            for (long g = 0; g < n_gen; g++) {
                log_softmax(ref_logits + (size_t)g * V, V, lp);
                log_softmax(lg, V, lq);
                ms->kl_sum += kl_div(lp, lq, V);
                ms->agree += argmax(lg, V) == ref[g];
                ms->steps++;
                if (g + 1 < n_gen) lg = step(ctx, kv, &b, ref[g], n + (int32_t)g);   /* teacher forcing */
                if (!lg) { rc = cli_fail(a.cmd, "decode", 1); goto out; }
            }
        }
        if (!json && (p + 1) % 10 == 0) fprintf(stderr, "  %ld/%ld prompts\n", p + 1, n_prompts);
    }
    if (json) {
        printf("[");
        for (int k = 0; k < 5; k++)
            printf("%s\n  {\"mode\": \"%s\", \"mean_kl\": %.6f, \"greedy_agreement\": %.4f, \"mean_ttft_ms\": %.3f, "
                   "\"reused_tokens\": %ld, \"recomputed_tokens\": %ld}",
                   k ? "," : "", modes[k].name, k ? modes[k].kl_sum / (double)modes[k].steps : 0.0,
                   k ? (double)modes[k].agree / (double)modes[k].steps : 1.0, modes[k].ttft_sum / (double)n_prompts,
                   modes[k].reused, modes[k].recomputed);
        printf("\n]\n");
    } else {
        printf("fidelity of reuse vs exact prefill: %s, %ld documents, %ld prompts of 4-6 documents + 4-token tail, "
               "%ld teacher-forced steps, kv %s, check layer %ld, deviation %s, selection %s\n\n",
               model_path, n_docs, n_prompts, n_gen, kv_name, check_layer, dev_name, rp_select_kind_name((rp_select_kind)select));
        printf("| %-13s | %12s | %16s | %13s | %15s | %17s |\n", "mode", "mean KL", "greedy agreement", "mean TTFT ms",
               "reused tokens", "recomputed tokens");
        printf("|---------------|--------------|------------------|---------------|-----------------|-------------------|\n");
        for (int k = 0; k < 5; k++)
            printf("| %-13s | %12.6f | %15.2f%% | %13.3f | %15ld | %17ld |\n", modes[k].name,
                   k ? modes[k].kl_sum / (double)modes[k].steps : 0.0,
                   k ? 100.0 * (double)modes[k].agree / (double)modes[k].steps : 100.0,
                   modes[k].ttft_sum / (double)n_prompts, modes[k].reused, modes[k].recomputed);
        double kf = modes[1].kl_sum / (double)modes[1].steps, kb = modes[3].kl_sum / (double)modes[3].steps;
        printf("\nblend r=0.25 cuts full's KL by %.1fx\n", kb > 0 ? kf / kb : INFINITY);
    }
    rc = 0;
out:
    rp_reuse_free(exact);
    for (int k = 0; k < 4; k++) rp_reuse_free(eng[k]);
    rp_sampler_free(smp);
    rp_batch_free(&b);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    rp_model_free(m);
    free(docs); free(prompt); free(ref); free(ref_logits); free(lg0); free(lp); free(lq);
    return rc;
}
