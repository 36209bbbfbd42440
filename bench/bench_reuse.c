/* bench_reuse.c — `reprise bench reuse`: TTFT of none / prefix / full / blend (dynamic and static) on reuse workloads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer_score.h"
#include "bench.h"
#include "calib.h"
#include "cli.h"
#include "progress.h"
#include "prompt.h"
#include "report.h"
#include "reprise.h"
#include "workload.h"

typedef struct mode_run {
    const char *name;
    rp_reuse_mode mode;
    bool stat, naive;
    bool calibrated;       /* static: shapes and plan latencies from a stored calibration */
    double *ttft;          /* per query */
    long reused_prefix, reused_nonprefix, recomputed, computed_rows;
    double load_ms, exposed_ms, plan_ms;
    uint64_t bytes_loaded;
    double kl_sum;         /* fidelity vs the exact (none) run: summed KL over scored steps */
    long n_scored, n_agree;
    double f1_sum;         /* answer accuracy against the dataset's gold answers (--answer) */
    long n_answered, n_exact;
} mode_run;

static int32_t argmax(const float *v, int32_t n);

/* Greedy answer from the sequence's prefilled prompt: stops at an end-of-generation token, a newline, or max_new
 * tokens; the text before the newline into out. */
static rp_status generate_answer(rp_seq *s, int max_new, char *out, size_t cap) {
    static const char *const nl[] = {"\n"};
    rp_gen_opts o = rp_gen_default_opts();
    o.sampling.temp = 0;
    o.max_tokens = max_new;
    o.stop = nl;
    o.n_stop = 1;
    size_t len = 0;
    return rp_seq_generate(s, &o, out, cap, &len, NULL);
}

/* KL(p || q) of two logit vectors' softmax distributions (nats). */
static double kl_logits(const float *p, const float *q, int32_t n) {
    double mp = -INFINITY, mq = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (p[i] > mp) mp = p[i];
        if (q[i] > mq) mq = q[i];
    }
    double zp = 0, zq = 0;
    for (int32_t i = 0; i < n; i++) {
        zp += exp((double)p[i] - mp);
        zq += exp((double)q[i] - mq);
    }
    const double lzp = mp + log(zp), lzq = mq + log(zq);
    double kl = 0;
    for (int32_t i = 0; i < n; i++) {
        double lp = p[i] - lzp, lq = q[i] - lzq;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Teacher-forced continuation after a prefill of n tokens: step 0 scores the
 * prefill's logits (`first`), step j > 0 feeds ref_tok[j-1] at position n+j-1. With
 * ref == NULL (the exact run) it records greedy tokens and logits instead. */
static rp_status continue_and_score(rp_seq *s, int gen, int32_t n_vocab, const float *first, float *ref_logits,
                                    rp_token *ref_tok, bool record, mode_run *mr) {
    const float *cur = first;
    for (int j = 0; j < gen; j++) {
        if (j > 0) {
            rp_status fs = rp_seq_feed(s, &ref_tok[j - 1], 1);
            if (fs != RP_OK) return fs;
            cur = rp_seq_logits(s);
        }
        float *ref = ref_logits + (size_t)j * n_vocab;
        if (record) {
            memcpy(ref, cur, sizeof(float) * (size_t)n_vocab);
            ref_tok[j] = argmax(cur, n_vocab);
        } else {
            mr->kl_sum += kl_logits(ref, cur, n_vocab);
            mr->n_agree += argmax(cur, n_vocab) == ref_tok[j];
            mr->n_scored++;
        }
    }
    return RP_OK;
}

/* Percentile of v (sorted in place). */
static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    return cli_pct_sorted(v, n, p);
}

static void put_prompt(FILE *f, int query, bool timed, const rp_wprompt *p, bool *first) {
    fprintf(f, "%s\n  {\"query\": %d, \"timed\": %s, \"tokens\": [", *first ? "" : ",", query, timed ? "true" : "false");
    *first = false;
    for (int32_t i = 0; i < p->n; i++) fprintf(f, "%s%d", i ? "," : "", (int)p->toks[i]);
    fprintf(f, "]}");
}

/* The workload's prompts in the order this bench runs them (warm-ups, then the
 * timed prompt, per query), as token ids, so a peer engine sees the same tokens:
 * {"prompts": [{"query", "timed", "tokens"}]}. */
static bool export_prompts(const rp_workload *w, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool first = true;
    fprintf(f, "{\"prompts\": [");
    for (int q = 0; q < rp_workload_n_queries(w); q++) {
        const rp_query *qq = rp_workload_query(w, q);
        for (int k = 0; k < qq->n_warm; k++) put_prompt(f, q, false, &qq->warm[k], &first);
        put_prompt(f, q, true, &qq->prompt, &first);
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0;
}

int bench_reuse(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench reuse"};
    const char *model_path = NULL, *workload = "synthetic", *data = NULL, *modes_s = "none,prefix,full,blend,static,static-naive";
    const char *kv_name = "f16", *json_out = NULL, *html_out = NULL, *export_path = NULL;
    const char *cache_dir = NULL;
    bool cold = false, no_commit = false;
    long gen = 8, passes = 1, answer_len = 0;
    long threads = 2, n_queries = 8, seed = 1;
    double ratio = 0.25;
    int select = RP_SELECT_HYBRID;
    rp_workload_params wp = rp_workload_default_params();
    bool modes_given = false;
    for (; a.i < argc; a.i++) {
        const char *v;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench reuse -m MODEL.gguf [--workload synthetic|repeat|docqa|chat|skills] [--data PATH]\n"
                   "         [--source hotpotqa|musique] [--embeddings VEC.json | --retrieve-model EMB.gguf]\n"
                   "         [--export-texts TEXTS.json]\n"
                   "         [--no-chat-template]\n"
                   "         [--modes none,prefix,full,blend,static,static-naive] [--queries 8] [--docs 6] [--doc-len 320]\n"
                   "         [--tail 40] [--between 0] [--recompute-ratio 0.25] [--select hybrid|dev|attn] [--kv-type f16] [-t 2] [--seed 1] [--cpu LEVEL]\n"
                   "         [--json OUT.json] [--html OUT.html] [--export-prompts OUT.json]\n"
                   "         [--cache-dir DIR [--cold] [--no-commit]] [--passes 1] [--gen 8] [--answer N]\n"
                   "Each query's reusable content is cached first (a warm-up prompt with the same pieces in another\n"
                   "order, as in RAG or chat traffic); the timed prompt then reuses it. Reports mean / p50 / p95 TTFT\n"
                   "per mode, tokens reused (prefix / non-prefix) and recomputed, load and exposed load time, and\n"
                   "fidelity against the exact (none) run: mean KL of the next-token distributions over --gen steps\n"
                   "(teacher-forced on the exact run's greedy tokens) and greedy agreement (needs mode none).\n"
                   "--answer N: every mode also answers each doc QA / chat question greedily (up to N tokens, to the\n"
                   "first newline) and is scored against the dataset's gold answer (SQuAD token F1 and exact match):\n"
                   "meaningful with an instruct model the user provides (Llama 3.x / Qwen3 GGUF). A model with a\n"
                   "Llama 3 or ChatML chat template gets its doc QA / chat prompts as one user turn (instruction,\n"
                   "passages, question) and the assistant header; the passages stay reusable segments.\n"
                   "--no-chat-template keeps plain text.\n"
                   "  synthetic: random-token documents (any model); --between N puts N new tokens before each\n"
                   "  document of the timed prompt (new text interleaved with reused text, as in RAG prompts with\n"
                   "  per-document headers);  repeat: the same prompt twice (100%% prefix hit)\n"
                   "  docqa / chat / skills: HotpotQA (or MuSiQue: --source musique), LoCoMo, SkillsBench from\n"
                   "  ../shared/data; --data FILE reads that file, --data DIR the datasets' paths under DIR\n"
                   "  docqa / chat: contexts / the chat history are split into --doc-len characters per chunk (1024);\n"
                   "  each question's prompt holds its top --docs (6) chunks in retrieval order: keyword overlap\n"
                   "  weighted by idf, or with --embeddings VEC.json (a JSON object: text -> array of numbers, one\n"
                   "  entry per question and chunk) cosine similarity, or with --retrieve-model EMB.gguf (an embedding\n"
                   "  model: bert / nomic-bert, e.g. bge-small, or a decoder pooled as its file says) the cosine of\n"
                   "  the vectors it computes, each text once. --export-texts writes the texts it needs.\n"
                   "--export-prompts writes every query's warm-up and timed prompts, in order, as {\"prompts\": [{\"query\",\n"
                   "\"timed\", \"tokens\"}]} for bench/peer/prompt_cache.mjs (llama.cpp's prompt cache on the same tokens);\n"
                   "with it and no --modes, nothing is timed.\n"
                   "--cache-dir attaches the persistent store in DIR as the flash tier under the RAM pool (modes then\n"
                   "share it: use one mode). --no-commit keeps the timed prompts out of the cache (only warm-up\n"
                   "pieces are stored); --cold skips the warm-up prompts, so a second process on the same DIR times\n"
                   "the same prompts against what the first one left on flash (restart TTFT). --passes N runs the\n"
                   "timed prompts N times in one engine (implies --no-commit; warm-ups only before the first pass),\n"
                   "prints each pass's mean TTFT and reports the last: pass 1 of a --cold run is the restart case,\n"
                   "pass 2 the warm in-memory case over the same cache contents.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--workload", NULL)) { if (!cli_str(&a, &workload)) return 2; }
        else if (cli_is(&a, "--data", NULL)) { if (!cli_str(&a, &data)) return 2; }
        else if (cli_is(&a, "--source", NULL)) { if (!cli_str(&a, &wp.source)) return 2; }
        else if (cli_is(&a, "--embeddings", NULL)) { if (!cli_str(&a, &wp.embeddings)) return 2; }
        else if (cli_is(&a, "--retrieve-model", NULL)) { if (!cli_str(&a, &wp.retrieve_model)) return 2; }
        else if (cli_is(&a, "--export-texts", NULL)) { if (!cli_str(&a, &wp.export_texts)) return 2; }
        else if (cli_is(&a, "--no-chat-template", NULL)) wp.plain = true;
        else if (cli_is(&a, "--modes", NULL)) { if (!cli_str(&a, &modes_s)) return 2; modes_given = true; }
        else if (cli_is(&a, "--queries", NULL)) { if (!cli_int(&a, 1, 100000, &n_queries)) return 2; }
        else if (cli_is(&a, "--docs", NULL)) { long x; if (!cli_int(&a, 1, 64, &x)) return 2; wp.n_docs = (int)x; }
        else if (cli_is(&a, "--doc-len", NULL)) { long x; if (!cli_int(&a, 1, 100000, &x)) return 2; wp.doc_len = (int)x; }
        else if (cli_is(&a, "--tail", NULL)) { long x; if (!cli_int(&a, 1, 100000, &x)) return 2; wp.tail_len = (int)x; }
        else if (cli_is(&a, "--between", NULL)) { long x; if (!cli_int(&a, 0, 100000, &x)) return 2; wp.between_len = (int)x; }
        else if (cli_is(&a, "--recompute-ratio", NULL)) { if (!cli_float(&a, 0, 1, &ratio)) return 2; }
        else if (cli_is(&a, "--select", NULL)) { if (!cli_select(&a, &select)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--seed", NULL)) { if (!cli_int(&a, 0, 1L << 40, &seed)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--json", NULL)) { if (!cli_str(&a, &json_out)) return 2; }
        else if (cli_is(&a, "--html", NULL)) { if (!cli_str(&a, &html_out)) return 2; }
        else if (cli_is(&a, "--export-prompts", NULL)) { if (!cli_str(&a, &export_path)) return 2; }
        else if (cli_is(&a, "--cache-dir", NULL)) { if (!cli_str(&a, &cache_dir)) return 2; }
        else if (cli_is(&a, "--cold", NULL)) cold = true;
        else if (cli_is(&a, "--gen", NULL)) { if (!cli_int(&a, 0, 256, &gen)) return 2; }
        else if (cli_is(&a, "--answer", NULL)) { if (!cli_int(&a, 0, 256, &answer_len)) return 2; }
        else if (cli_is(&a, "--passes", NULL)) { if (!cli_int(&a, 1, 100, &passes)) return 2; no_commit = passes > 1; }
        else if (cli_is(&a, "--no-commit", NULL)) no_commit = true;
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise bench reuse: -m MODEL.gguf is required\n"); return 2; }
    const int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
        fprintf(stderr, "reprise bench reuse: --kv-type must be f16, f32 or q8_0\n");
        return 2;
    }
    mode_run runs[8];
    int n_runs = 0;
    char mbuf[256];
    snprintf(mbuf, sizeof mbuf, "%s", modes_s);
    for (char *tok = strtok(mbuf, ","); tok && n_runs < 8; tok = strtok(NULL, ",")) {
        mode_run r = {0};
        if (!strcmp(tok, "static")) { r.mode = RP_REUSE_BLEND; r.stat = true; r.name = "blend-static"; }
        else if (!strcmp(tok, "static-naive")) { r.mode = RP_REUSE_BLEND; r.stat = r.naive = true; r.name = "blend-static-naive"; }
        else {
            int m = rp_reuse_mode_parse(tok);
            if (m < 0) { fprintf(stderr, "reprise bench reuse: unknown mode '%s'\n", tok); return 2; }
            r.mode = (rp_reuse_mode)m;
            r.name = rp_reuse_mode_name(r.mode);
        }
        runs[n_runs++] = r;
    }
    /* the exact run goes first: it is the fidelity reference */
    for (int r = 1; r < n_runs; r++)
        if (runs[r].mode == RP_REUSE_NONE) {
            mode_run t = runs[r];
            memmove(&runs[1], &runs[0], sizeof runs[0] * (size_t)r);
            runs[0] = t;
            break;
        }
    const bool scored = gen > 0 && n_runs > 0 && runs[0].mode == RP_REUSE_NONE;
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    if (!rp_model_describe(m).has_tokenizer) {
        fprintf(stderr, "reprise bench reuse: the model has no tokenizer\n");
        rp_model_free(m);
        return 1;
    }
    wp.seed = (uint64_t)seed;
    wp.n_queries = (int)n_queries;
    rp_workload *w = NULL;
    if (!rp_workload_build(a.cmd, workload, data, m, &wp, &w)) { rp_model_free(m); return 1; }
    const int32_t max_tok = rp_workload_max_tokens(w);
    if (export_path) {
        if (!export_prompts(w, export_path)) {
            fprintf(stderr, "reprise bench reuse: cannot write '%s'\n", export_path);
            rp_workload_free(w);
            rp_model_free(m);
            return 1;
        }
        fprintf(stderr, "wrote %s (per query: its warm-up prompt(s), then the timed one)\n", export_path);
        if (!modes_given) { rp_workload_free(w); rp_model_free(m); return 0; }
    }
    /* the engines add static mode's padding cells themselves */
    const int32_t n_ctx = max_tok + 8 + (int32_t)(gen > answer_len ? gen : answer_len);
    const int32_t n_vocab = rp_model_describe(m).n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)n_vocab);
    const int nq0 = rp_workload_n_queries(w);
    /* reference logits and tokens of the exact run, per query and step */
    float *ref_logits = scored ? malloc(sizeof(float) * (size_t)nq0 * (size_t)gen * (size_t)n_vocab) : NULL;
    rp_token *ref_tok = scored ? malloc(sizeof(rp_token) * (size_t)nq0 * (size_t)gen) : NULL;
    rp_prompt *pr = NULL;
    rp_engine *e = NULL;
    rp_seq *sq = NULL;
    bool warned = false;
    int rc = 1;
    if (scored && (!ref_logits || !ref_tok)) {
        fprintf(stderr, "reprise bench reuse: out of memory for the fidelity reference (%d queries x %ld steps)\n", nq0, gen);
        goto out;
    }
    if (!lg || (st = rp_prompt_create(&pr)) != RP_OK) {
        rc = cli_fail(a.cmd, "setup", st);
        goto out;
    }
    fprintf(stderr, "workload %s: %d queries, up to %d tokens per prompt; modes:", workload, rp_workload_n_queries(w), max_tok);
    for (int r = 0; r < n_runs; r++) fprintf(stderr, " %s", runs[r].name);
    fprintf(stderr, "\n");
    const int nq = rp_workload_n_queries(w);
    for (int r = 0; r < n_runs; r++) {
        mode_run *mr = &runs[r];
        mr->ttft = calloc((size_t)nq, sizeof(double));
        rp_engine_params ep = rp_engine_default_params();
        ep.n_threads = (int)threads;
        ep.n_ctx = n_ctx;
        ep.n_batch = max_tok > 512 ? 1024 : 512;
        ep.kv_type = (rp_kv_type)kv_type;
        ep.reuse = mr->mode;
        ep.recompute_ratio = (float)ratio;
        ep.select = (rp_select_kind)select;
        ep.static_mode = mr->stat;
        ep.naive_schedule = mr->naive;
        ep.n_ctx_over_train = true;   /* the workloads' prompts, whatever the model was trained on */
        /* with a store: flash reads overlap compute, as in run and serve; the store is opened the way they open it */
        ep.cache_dir = mr->mode != RP_REUSE_NONE ? cache_dir : NULL;
        if (!mr->ttft) { rc = cli_fail(a.cmd, "engine", RP_ERR_NOMEM); goto out; }
        if ((st = rp_engine_create(m, &ep, &e)) != RP_OK) { rc = cli_fail(a.cmd, ep.cache_dir ? ep.cache_dir : "engine", st); goto out; }
        if ((st = rp_seq_create(e, &sq)) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
        if (mr->stat) {
            mr->calibrated = rp_engine_calibrated(e);
            if (!mr->calibrated && !warned) {   /* once: the shapes are defaults, the plan latencies placeholders */
                rp_static_shapes sh;
                rp_engine_static_shapes(e, &sh);
                cli_calib_warn(a.cmd, &sh, model_path, ep.cache_dir, (int)threads);
                warned = true;
            }
        }
        rp_gen_opts timed = rp_gen_default_opts();
        timed.persist = !no_commit;
        for (int pass = 0; pass < passes; pass++) {
        if (pass > 0) {   /* report the last pass: reset the accumulators */
            double s = 0;
            for (int q = 0; q < nq; q++) s += mr->ttft[q];
            printf("%s pass %d: mean TTFT %.1f ms\n", mr->name, pass, s / nq);
            mr->reused_prefix = mr->reused_nonprefix = mr->recomputed = mr->computed_rows = 0;
            mr->load_ms = mr->exposed_ms = mr->plan_ms = mr->kl_sum = 0;
            mr->bytes_loaded = 0;
            mr->n_scored = mr->n_agree = 0;
            mr->f1_sum = 0;
            mr->n_answered = mr->n_exact = 0;
        }
        for (int q = 0; q < nq; q++) {
            const rp_query *qq = rp_workload_query(w, q);
            rp_gen_stats rs;
            /* warm-up prompts: compute and cache the reusable pieces (not timed) */
            for (int k = 0; k < qq->n_warm && mr->mode != RP_REUSE_NONE && !cold && pass == 0; k++) {
                const rp_wprompt *wq = &qq->warm[k];
                if ((st = rp_wprompt_fill(pr, wq->toks, wq->n, wq->bounds, wq->n_bounds)) != RP_OK ||
                    (st = rp_seq_prefill(sq, pr, NULL, &rs)) != RP_OK || (st = rp_seq_commit(sq)) != RP_OK) {
                    rc = cli_fail(a.cmd, "warm-up", st);
                    goto out;
                }
            }
            if ((st = rp_wprompt_fill(pr, qq->prompt.toks, qq->prompt.n, qq->prompt.bounds, qq->prompt.n_bounds)) != RP_OK ||
                (st = rp_seq_prefill(sq, pr, &timed, &rs)) != RP_OK) {
                rc = cli_fail(a.cmd, mr->name, st);
                goto out;
            }
            if (mr->mode != RP_REUSE_NONE && !no_commit) (void)rp_seq_commit(sq);   /* a failure only loses cache */
            mr->ttft[q] = rs.ttft_ms;
            memcpy(lg, rp_seq_logits(sq), sizeof(float) * (size_t)n_vocab);   /* the scoring's step 0 */
            /* the answer first, from the prefill's own logits; then the teacher-forced steps after the prompt */
            if (answer_len > 0 && qq->answer) {
                char pred[1024];
                if ((st = generate_answer(sq, (int)answer_len, pred, sizeof pred)) != RP_OK ||
                    (st = rp_seq_truncate(sq, qq->prompt.n)) != RP_OK) {
                    rc = cli_fail(a.cmd, "answer", st);
                    goto out;
                }
                bool ex = false;
                mr->f1_sum += cli_answer_f1(pred, qq->answer, &ex);
                mr->n_exact += ex;
                mr->n_answered++;
            }
            if (scored && (st = continue_and_score(sq, (int)gen, n_vocab, lg, ref_logits + (size_t)q * gen * n_vocab,
                                                   ref_tok + (size_t)q * gen, r == 0, mr)) != RP_OK) {
                rc = cli_fail(a.cmd, "fidelity", st);
                goto out;
            }
            mr->reused_prefix += rs.reused_prefix;
            mr->reused_nonprefix += rs.reused_nonprefix;
            mr->recomputed += rs.recomputed;
            mr->computed_rows += rs.computed_rows;
            mr->load_ms += rs.load_ms;
            mr->exposed_ms += rs.load_exposed_ms;
            mr->bytes_loaded += rs.bytes_loaded;
            mr->plan_ms += rs.plan_ms;
            fprintf(stderr, "\r  %-18s query %d/%d: TTFT %.1f ms   ", mr->name, q + 1, nq, rs.ttft_ms);
        }
        }
        if (passes > 1) {
            double s = 0;
            for (int q = 0; q < nq; q++) s += mr->ttft[q];
            printf("%s pass %ld: mean TTFT %.1f ms\n", mr->name, passes, s / nq);
        }
        fprintf(stderr, "\n");
        if (cache_dir && mr->mode != RP_REUSE_NONE) {
            rp_engine_stats cs;
            rp_engine_stats_get(e, &cs);
            fprintf(stderr, "  %-18s pool: %llu prefix + %llu content hits, %llu from flash, %llu prefetched (%llu used), "
                            "%llu chunks written\n", mr->name, (unsigned long long)cs.prefix_hits,
                    (unsigned long long)cs.content_hits, (unsigned long long)cs.flash_hits,
                    (unsigned long long)cs.prefetched, (unsigned long long)cs.prefetch_used,
                    (unsigned long long)cs.written);
        }
        rp_seq_free(sq);
        sq = NULL;
        rp_engine_free(e);   /* with a store: flushes and closes it */
        e = NULL;
    }
    /* report */
    double base_none = 0, base_prefix = 0;
    for (int r = 0; r < n_runs; r++) {
        double s = 0;
        for (int q = 0; q < nq; q++) s += runs[r].ttft[q];
        if (runs[r].mode == RP_REUSE_NONE) base_none = s / nq;
        if (runs[r].mode == RP_REUSE_PREFIX && !runs[r].stat) base_prefix = s / nq;
    }
    printf("\nworkload %s on %s (%d queries, up to %d tokens, %ld threads, kv %s, r = %.2f)\n\n", workload, model_path, nq,
           max_tok, threads, kv_name, ratio);
    printf("| %-18s | %9s | %9s | %9s | %8s | %9s | %12s | %10s | %10s | %9s | %10s | %9s | %7s | %6s |\n", "mode", "mean ms",
           "p50 ms", "p95 ms", "vs none", "vs prefix", "prefix tok", "reused tok", "recomputed", "load ms", "exposed ms", "KL",
           "greedy", "F1");
    printf("|--------------------|-----------|-----------|-----------|----------|-----------|--------------|------------|------------|"
           "-----------|------------|-----------|---------|--------|\n");
    FILE *jf = json_out ? fopen(json_out, "w") : NULL;
    if (json_out && !jf) fprintf(stderr, "reprise bench reuse: cannot write '%s'\n", json_out);
    if (jf) fprintf(jf, "{\"workload\": \"%s\", \"model\": \"%s\", \"queries\": %d, \"max_tokens\": %d, \"threads\": %ld, "
                        "\"kv_type\": \"%s\", \"ratio\": %.3f, \"modes\": [", workload, model_path, nq, max_tok, threads, kv_name, ratio);
    for (int r = 0; r < n_runs; r++) {
        mode_run *mr = &runs[r];
        double s = 0;
        for (int q = 0; q < nq; q++) s += mr->ttft[q];
        double mean = s / nq, p50 = pct(mr->ttft, nq, 0.5), p95 = pct(mr->ttft, nq, 0.95);
        char klb[32] = "-", agb[32] = "-";
        if (scored && r == 0) { snprintf(klb, sizeof klb, "0"); snprintf(agb, sizeof agb, "100%%"); }
        else if (scored && mr->n_scored > 0) {
            snprintf(klb, sizeof klb, "%.6f", mr->kl_sum / (double)mr->n_scored);
            snprintf(agb, sizeof agb, "%.1f%%", 100.0 * (double)mr->n_agree / (double)mr->n_scored);
        }
        char f1b[32] = "-";
        if (mr->n_answered > 0) snprintf(f1b, sizeof f1b, "%.3f", mr->f1_sum / (double)mr->n_answered);
        printf("| %-18s | %9.1f | %9.1f | %9.1f | %7.2fx | %8.2fx | %12.1f | %10.1f | %10.1f | %9.2f | %10.2f | %9s | %7s | %6s |\n",
               mr->name, mean, p50, p95, base_none > 0 ? base_none / mean : 0, base_prefix > 0 ? base_prefix / mean : 0,
               (double)mr->reused_prefix / nq, (double)mr->reused_nonprefix / nq, (double)mr->recomputed / nq,
               mr->load_ms / nq, mr->exposed_ms / nq, klb, agb, f1b);
        /* the static plan's predicted latency only from measured call latencies; null otherwise */
        char plan_b[64] = "null";
        if (mr->stat && mr->calibrated)
            snprintf(plan_b, sizeof plan_b, "%.3f, \"calibrated\": true", mr->plan_ms / nq);
        else if (mr->stat)
            snprintf(plan_b, sizeof plan_b, "null, \"calibrated\": false");
        if (jf)
            fprintf(jf, "%s\n  {\"mode\": \"%s\", \"ttft_mean_ms\": %.3f, \"ttft_p50_ms\": %.3f, \"ttft_p95_ms\": %.3f, "
                        "\"speedup_vs_none\": %.3f, \"speedup_vs_prefix\": %.3f, \"reused_prefix\": %.1f, \"reused_nonprefix\": %.1f, "
                        "\"recomputed\": %.1f, \"computed_rows\": %.1f, \"load_ms\": %.3f, \"load_exposed_ms\": %.3f, "
                        "\"bytes_loaded\": %.0f, \"plan_ms\": %s, \"kl_mean\": %.8f, \"greedy_agreement\": %.4f, "
                        "\"scored_steps\": %ld, \"answered\": %ld, \"answer_f1\": %.4f, \"answer_em\": %.4f}",
                    r ? "," : "", mr->name, mean, p50, p95, base_none > 0 ? base_none / mean : 0,
                    base_prefix > 0 ? base_prefix / mean : 0, (double)mr->reused_prefix / nq,
                    (double)mr->reused_nonprefix / nq, (double)mr->recomputed / nq, (double)mr->computed_rows / nq,
                    mr->load_ms / nq, mr->exposed_ms / nq, (double)mr->bytes_loaded / nq, plan_b,
                    mr->n_scored ? mr->kl_sum / (double)mr->n_scored : 0.0,
                    mr->n_scored ? (double)mr->n_agree / (double)mr->n_scored : (scored && r == 0 ? 1.0 : 0.0),
                    mr->n_scored, mr->n_answered, mr->n_answered ? mr->f1_sum / (double)mr->n_answered : 0.0,
                    mr->n_answered ? (double)mr->n_exact / (double)mr->n_answered : 0.0);
    }
    if (jf) {
        fprintf(jf, "\n]}\n");
        fclose(jf);
    }
    if (html_out) {
        char title[512];
        snprintf(title, sizeof title, "Reprise reuse benchmark: %s workload", workload);
        FILE *hf = rp_html_open(html_out, title);
        if (!hf) fprintf(stderr, "reprise bench reuse: cannot write '%s'\n", html_out);
        else {
            const char *groups[3] = {"mean", "p50", "p95"};
            const char *names[8];
            double vals[3 * 8];
            for (int r = 0; r < n_runs; r++) {
                names[r] = runs[r].name;
                double s = 0;
                for (int q = 0; q < nq; q++) s += runs[r].ttft[q];
                vals[0 * n_runs + r] = s / nq;
                vals[1 * n_runs + r] = pct(runs[r].ttft, nq, 0.5);
                vals[2 * n_runs + r] = pct(runs[r].ttft, nq, 0.95);
            }
            char note[1024];
            snprintf(note, sizeof note, "model %s, %d queries, up to %d tokens, %ld threads, KV %s, r = %.2f", model_path, nq,
                     max_tok, threads, kv_name, ratio);
            rp_html_p(hf, note);
            {   /* the table, as printed */
                const char *head[11] = {"mode", "mean ms", "p50 ms", "p95 ms", "vs none", "vs prefix", "reused (prefix / other)",
                                        "recomputed", "KL vs exact", "greedy agreement", "answer F1 / EM"};
                static char cells[8][11][48];
                const char *cp[8 * 11];
                bool answered = false;   /* the accuracy column only when --answer scored something */
                for (int r = 0; r < n_runs; r++) answered |= runs[r].n_answered > 0;
                const int nc = answered ? 11 : 10;
                for (int r = 0; r < n_runs; r++) {
                    const mode_run *mr = &runs[r];
                    const double mean = vals[0 * n_runs + r];
                    snprintf(cells[r][0], 48, "%s", mr->name);
                    snprintf(cells[r][1], 48, "%.1f", mean);
                    snprintf(cells[r][2], 48, "%.1f", vals[1 * n_runs + r]);
                    snprintf(cells[r][3], 48, "%.1f", vals[2 * n_runs + r]);
                    snprintf(cells[r][4], 48, base_none > 0 ? "%.2fx" : "-", base_none / mean);
                    snprintf(cells[r][5], 48, base_prefix > 0 ? "%.2fx" : "-", base_prefix / mean);
                    snprintf(cells[r][6], 48, "%.0f / %.0f", (double)mr->reused_prefix / nq, (double)mr->reused_nonprefix / nq);
                    snprintf(cells[r][7], 48, "%.0f", (double)mr->recomputed / nq);
                    if (mr->n_scored > 0) {
                        snprintf(cells[r][8], 48, "%.6f", mr->kl_sum / (double)mr->n_scored);
                        snprintf(cells[r][9], 48, "%.1f%%", 100.0 * (double)mr->n_agree / (double)mr->n_scored);
                    } else {
                        snprintf(cells[r][8], 48, "%s", scored && r == 0 ? "0 (reference)" : "-");
                        snprintf(cells[r][9], 48, "%s", scored && r == 0 ? "100%" : "-");
                    }
                    if (mr->n_answered > 0)
                        snprintf(cells[r][10], 48, "%.3f / %.3f (%ld)", mr->f1_sum / (double)mr->n_answered,
                                 (double)mr->n_exact / (double)mr->n_answered, mr->n_answered);
                    else
                        snprintf(cells[r][10], 48, "-");
                    for (int c = 0; c < nc; c++) cp[r * nc + c] = cells[r][c];
                }
                rp_html_table(hf, head, nc, cp, n_runs);
            }
            rp_svg_bars(hf, "Time to first token by mode", "ms", groups, 3, names, n_runs, vals);
            if (scored) {
                double xs[8], ys[8];
                for (int r = 0; r < n_runs; r++) {
                    xs[r] = vals[0 * n_runs + r];
                    ys[r] = runs[r].n_scored ? runs[r].kl_sum / (double)runs[r].n_scored : 0.0;
                }
                rp_svg_scatter(hf, "Quality against latency (lower left is better)", "mean TTFT (ms)",
                               "mean KL vs exact prefill (nats)", names, xs, ys, n_runs);
            }
            rp_html_close(hf);
        }
    }
    rc = 0;
out:
    for (int r = 0; r < n_runs; r++) free(runs[r].ttft);
    free(ref_logits);
    free(ref_tok);
    rp_seq_free(sq);
    rp_engine_free(e);
    rp_prompt_free(pr);
    free(lg);
    rp_workload_free(w);
    rp_model_free(m);
    return rc;
}
