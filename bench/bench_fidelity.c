/* bench_fidelity.c — `reprise bench fidelity`: KL and greedy agreement of full / blend reuse against exact prefill. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "reprise.h"
#include "workload.h"

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

/* Appends one token to the sequence and returns its logits (NULL on failure). */
static const float *step(rp_seq *s, rp_token t) {
    return rp_seq_feed(s, &t, 1) == RP_OK ? rp_seq_logits(s) : NULL;
}

/* An engine of one reuse mode with its sequence. */
static rp_status make_engine(rp_model *m, const rp_engine_params *ep, rp_engine **e, rp_seq **s) {
    rp_status st = rp_engine_create(m, ep, e);
    return st == RP_OK ? rp_seq_create(*e, s) : st;
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
    const int dev = !strcmp(dev_name, "k") ? RP_DEVIATION_K : !strcmp(dev_name, "v") ? RP_DEVIATION_V
                    : !strcmp(dev_name, "kv") ? RP_DEVIATION_KV : -1;
    if (dev < 0) { fprintf(stderr, "reprise bench fidelity: --dev must be k, v or kv\n"); return 2; }
    const int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
        fprintf(stderr, "reprise bench fidelity: --kv-type must be f16, f32 or q8_0\n");
        return 2;
    }
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    const rp_model_desc md = rp_model_describe(m);
    const int32_t V = md.n_vocab;
    const int32_t max_prompt = 1 + 6 * (int32_t)doc_len + 8;
    const int32_t n_ctx = max_prompt + (int32_t)n_gen + 8;
    if (n_ctx > md.n_ctx_train)
        fprintf(stderr, "reprise bench fidelity: note: %d cells exceed the model's training context %d\n", n_ctx,
                md.n_ctx_train);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    ep.n_batch = n_ctx;
    ep.n_ctx = n_ctx;
    ep.kv_type = (rp_kv_type)kv_type;
    ep.reuse = RP_REUSE_NONE;
    ep.load_calibration = false;
    ep.n_ctx_over_train = true;   /* noted below when the prompts need it */
    rp_engine *exact = NULL, *eng[4] = {NULL};
    rp_seq *xs = NULL, *es[4] = {NULL};
    rp_prompt *pr = NULL;
    doc *docs = calloc((size_t)n_docs, sizeof *docs);
    rp_token *prompt = malloc(sizeof(rp_token) * (size_t)max_prompt);
    rp_token *ref = malloc(sizeof(rp_token) * (size_t)n_gen);
    float *ref_logits = malloc(sizeof(float) * (size_t)V * (size_t)n_gen);
    double *lp = malloc(sizeof(double) * (size_t)V), *lq = malloc(sizeof(double) * (size_t)V);
    int rc = 1;
    if (!docs || !prompt || !ref || !ref_logits || !lp || !lq) { fprintf(stderr, "out of memory\n"); goto out; }
    if ((st = rp_prompt_create(&pr)) != RP_OK || (st = make_engine(m, &ep, &exact, &xs)) != RP_OK) {
        rc = cli_fail(a.cmd, "setup", st);
        goto out;
    }
    /* 1. the model writes the documents: one sampler all along (a truncate keeps it; a reset would restart it) */
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 0.8f;
    sp.seed = (uint64_t)seed;
    const rp_token bos = md.has_tokenizer ? rp_token_bos(m) : 1;
    for (long d = 0; d < n_docs; d++) {
        (void)rp_seq_truncate(xs, 0);
        const float *lg = step(xs, bos);
        int32_t n = 0;
        while (lg && n < doc_len) {
            rp_token t;
            if ((st = rp_seq_sample(xs, &sp, &t)) != RP_OK) { rc = cli_fail(a.cmd, "sampler", st); goto out; }
            if (md.has_tokenizer && rp_token_is_eog(m, t)) {
                if (n >= doc_len / 2) break;
                continue;   /* resample: keep documents long enough */
            }
            docs[d].t[n++] = t;
            lg = step(xs, t);
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
    rp_gen_opts warm = rp_gen_default_opts();
    warm.reuse = RP_REUSE_PREFIX;   /* warm-up computes exactly */
    rp_gen_opts timed = rp_gen_default_opts();
    timed.persist = false;          /* only the documents are cached */
    rp_gen_stats gs;
    for (int k = 0; k < 4; k++) {
        rp_engine_params pp = ep;
        pp.reuse = modes[k + 1].mode;
        pp.recompute_ratio = modes[k + 1].ratio;
        pp.check_layer = (int32_t)check_layer;
        pp.deviation = dev;
        pp.select = (rp_select_kind)select;
        if ((st = make_engine(m, &pp, &eng[k], &es[k])) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
        for (long d = 0; d < n_docs; d++) {   /* [BOS][doc]: the document is its own chunk */
            prompt[0] = bos;
            memcpy(prompt + 1, docs[d].t, sizeof(rp_token) * (size_t)docs[d].n);
            int32_t bnd = 1;
            st = rp_wprompt_fill(pr, prompt, 1 + docs[d].n, &bnd, 1);
            if (st == RP_OK) st = rp_seq_prefill(es[k], pr, &warm, &gs);
            if (st == RP_OK) st = rp_seq_commit(es[k]);
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
        if ((st = rp_wprompt_fill(pr, prompt, n, bounds, nb)) != RP_OK ||
            (st = rp_seq_prefill(xs, pr, &timed, &gs)) != RP_OK) { rc = cli_fail(a.cmd, "exact", st); goto out; }
        modes[0].ttft_sum += gs.ttft_ms;
        const float *lg = rp_seq_logits(xs);
        for (long g = 0; g < n_gen; g++) {
            memcpy(ref_logits + (size_t)g * V, lg, sizeof(float) * (size_t)V);
            ref[g] = argmax(lg, V);
            if (g + 1 < n_gen) lg = step(xs, ref[g]);
            if (!lg) { rc = cli_fail(a.cmd, "decode", 1); goto out; }
        }
        for (int k = 0; k < 4; k++) {
            mode_spec *ms = &modes[k + 1];
            if ((st = rp_seq_prefill(es[k], pr, &timed, &gs)) != RP_OK) { rc = cli_fail(a.cmd, ms->name, st); goto out; }
            ms->ttft_sum += gs.ttft_ms;
            ms->reused += gs.reused_prefix + gs.reused_nonprefix;
            ms->recomputed += gs.recomputed;
            lg = rp_seq_logits(es[k]);
            for (long g = 0; g < n_gen; g++) {
                log_softmax(ref_logits + (size_t)g * V, V, lp);
                log_softmax(lg, V, lq);
                ms->kl_sum += kl_div(lp, lq, V);
                ms->agree += argmax(lg, V) == ref[g];
                ms->steps++;
                if (g + 1 < n_gen) lg = step(es[k], ref[g]);   /* teacher forcing */
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
    rp_seq_free(xs);
    rp_engine_free(exact);
    for (int k = 0; k < 4; k++) {
        rp_seq_free(es[k]);
        rp_engine_free(eng[k]);
    }
    rp_prompt_free(pr);
    rp_model_free(m);
    free(docs); free(prompt); free(ref); free(ref_logits); free(lp); free(lq);
    return rc;
}
