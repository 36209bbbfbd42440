/* bench_grammar.c — `reprise-bench grammar`: decode speed with and without a JSON-schema (or GBNF) constraint on
 * the public API (rp_seq_generate with rp_grammar_on_logits): the grammar's cost per token, how many masks were
 * built by trie walks vs served from the vocabulary's cache, and how often the greedy fast path (one token
 * checked) sufficed; per repetition, so the cold first request and the warm later ones show apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "grammar_schema.h"
#include "cli.h"
#include "reprise.h"

/* the flat 4-key object of bench/RESULTS.md's first figure */
static const char *FLAT_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"ok\"],\"additionalProperties\":false}";

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The same grammar through a hook the engine does not recognise: every token masked (no greedy fast path). */
static void masked_hook(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_grammar_on_logits(user, hist, n_hist, logits, n_vocab);
}

int bench_grammar(int argc, char **argv) {
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "bench grammar"};
    const char *model_path = NULL, *schema_file = NULL, *grammar_file = NULL, *prompt = "Once upon a time";
    const char *which = "nested";
    long n_gen = 128, threads = 1, reps = 3;
    bool no_cache = false, no_fast = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise-bench grammar -m MODEL [--schema nested|flat | --json-schema-file F |"
                   " --grammar-file F] [-n N] [-t T] [-r R] [-p PROMPT] [--no-cache] [--no-fast-path]\n"
                   "Greedy decode of up to N tokens (default 128), R times (default 3), unconstrained and under the\n"
                   "constraint (default: a schema with nested objects, arrays of objects and enums); per repetition:\n"
                   "tok/s of each, the grammar's ms per token, masks built by trie walks vs cache hits, single-token\n"
                   "checks. --no-cache: every mask a walk (the reference); --no-fast-path: every token masked.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--schema", NULL)) { if (!cli_str(&a, &which)) return 2; }
        else if (cli_is(&a, "--json-schema-file", NULL)) { if (!cli_str(&a, &schema_file)) return 2; }
        else if (cli_is(&a, "--grammar-file", NULL)) { if (!cli_str(&a, &grammar_file)) return 2; }
        else if (cli_is(&a, "-p", "--prompt")) { if (!cli_str(&a, &prompt)) return 2; }
        else if (cli_is(&a, "-n", "--n-gen")) { if (!cli_int(&a, 1, 1 << 20, &n_gen)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 1000, &reps)) return 2; }
        else if (cli_is(&a, "--no-cache", NULL)) no_cache = true;
        else if (cli_is(&a, "--no-fast-path", NULL)) no_fast = true;
        else { fprintf(stderr, "reprise-bench grammar: unknown option '%s'\n", argv[a.i]); return 2; }
    }
    if (!model_path) { fprintf(stderr, "reprise-bench grammar: -m MODEL is required\n"); return 2; }
    if (strcmp(which, "nested") && strcmp(which, "flat")) {
        fprintf(stderr, "reprise-bench grammar: --schema is nested or flat, not '%s'\n", which);
        return 2;
    }
    int rc = 1;
    rp_model *m = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    rp_prompt *p = NULL;
    rp_grammar *g = NULL;
    rp_grammar_vocab *v = NULL;
    rp_grammar_state *gs = NULL;
    char *text = NULL;
    char *out = NULL;
    const size_t out_cap = 1 << 16;
    rp_status st = rp_model_load(model_path, rp_model_default_params(), &m);
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s: %s\n", model_path, rp_last_error()); return 1; }
    if (schema_file || grammar_file) {
        text = cli_read_file("bench grammar", grammar_file ? grammar_file : schema_file, NULL);
        if (!text) goto done;
    }
    const char *schema = text ? text : !strcmp(which, "flat") ? FLAT_SCHEMA : RP_NESTED_SCHEMA;
    const double tb0 = now_s();
    st = grammar_file ? rp_grammar_parse(text, NULL, &g) : rp_grammar_from_json_schema(schema, &g);
    if (st == RP_OK) st = rp_grammar_vocab_new(m, &v);
    const double t_build = now_s() - tb0;
    if (st == RP_OK && no_cache) rp_grammar_vocab_set_cache_bytes(v, 0);
    if (st == RP_OK) st = rp_grammar_state_new(g, v, &gs);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    if (st == RP_OK) st = rp_engine_create(m, &ep, &e);
    if (st == RP_OK) st = rp_seq_create(e, &s);
    if (st == RP_OK) st = rp_prompt_create(&p);
    if (st == RP_OK) st = rp_prompt_add_text(p, m, prompt, strlen(prompt));
    if (st == RP_OK && !(out = malloc(out_cap))) st = RP_ERR_NOMEM;
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s\n", rp_last_error()); goto done; }
    rp_model_desc d = rp_model_describe(m);
    printf("model %s, vocab %d, threads %ld, %ld reps of <= %ld tokens (greedy), %s, cache %s, fast path %s\n",
           d.name, d.n_vocab, threads, reps, n_gen,
           grammar_file ? grammar_file : schema_file ? schema_file : which, no_cache ? "off" : "on",
           no_fast ? "off" : "on");
    printf("grammar + vocabulary trie build: %.2f ms\n", t_build * 1e3);
    printf("ms/token: decode time per token constrained minus unconstrained; in-grammar: time inside the grammar's\n"
           "calls (follow, mask, checks, walks) per constrained token\n");
    printf("%-4s %9s %9s %6s %9s %11s %7s %7s %6s %7s %8s %9s\n", "rep", "free t/s", "gram t/s", "tokens", "ms/token",
           "in-grammar", "built", "hits", "hit %", "checks", "refused", "walk ms");
    double tot_tok[2] = {0}, tot_sec[2] = {0};
    rp_grammar_stats all = {0};
    for (long r = 0; r < reps; r++) {
        double tok[2] = {0}, sec[2] = {0};
        rp_grammar_stats gst = {0};
        for (int k = 0; k < 2; k++) {
            rp_gen_opts o = rp_gen_default_opts();
            o.sampling.temp = 0;
            o.max_tokens = (int32_t)n_gen;
            if (k == 1) {
                o.on_logits = no_fast ? masked_hook : rp_grammar_on_logits;
                o.logits_user = gs;
                rp_grammar_state_reset(gs);
                rp_grammar_vocab_stats_reset(v);
            }
            rp_gen_stats gen;
            size_t len = 0;
            if ((st = rp_seq_prefill(s, p, &o, &gen)) != RP_OK) break;
            if ((st = rp_seq_generate(s, &o, out, out_cap, &len, &gen)) != RP_OK) break;
            tok[k] = gen.generated;
            sec[k] = gen.decode_ms * 1e-3;
            if (k == 1) rp_grammar_vocab_stats(v, &gst);
        }
        if (st != RP_OK) break;
        const double per_free = sec[0] / (tok[0] > 0 ? tok[0] : 1), per_con = sec[1] / (tok[1] > 0 ? tok[1] : 1);
        const uint64_t masks = gst.masks_built + gst.cache_hits;
        printf("%-4ld %9.1f %9.1f %6.0f %9.2f %11.3f %7llu %7llu %6.1f %7llu %8llu %9.1f\n", r + 1,
               tok[0] / (sec[0] > 0 ? sec[0] : 1e-9), tok[1] / (sec[1] > 0 ? sec[1] : 1e-9), tok[1],
               (per_con - per_free) * 1e3, gst.busy_ms / (tok[1] > 0 ? tok[1] : 1),
               (unsigned long long)gst.masks_built, (unsigned long long)gst.cache_hits,
               masks ? 100.0 * (double)gst.cache_hits / (double)masks : 0.0, (unsigned long long)gst.checks,
               (unsigned long long)gst.checks_rejected, gst.build_ms);
        for (int k = 0; k < 2; k++) { tot_tok[k] += tok[k]; tot_sec[k] += sec[k]; }
        all.masks_built += gst.masks_built;
        all.cache_hits += gst.cache_hits;
        all.checks += gst.checks;
        all.checks_rejected += gst.checks_rejected;
        all.build_ms += gst.build_ms;
        all.busy_ms += gst.busy_ms;
        all.cache_entries = gst.cache_entries;
        all.cache_bytes = gst.cache_bytes;
    }
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s\n", rp_last_error()); goto done; }
    const double pf = tot_sec[0] / (tot_tok[0] > 0 ? tot_tok[0] : 1), pc = tot_sec[1] / (tot_tok[1] > 0 ? tot_tok[1] : 1);
    const uint64_t masks = all.masks_built + all.cache_hits;
    printf("all: unconstrained %.1f tok/s, constrained %.1f tok/s, grammar %.2f ms per token (%.3f ms inside its"
           " calls); %llu masks built"
           " (%.1f ms of walks, %.2f ms per built mask), %llu cache hits (%.1f %%), %llu single-token checks"
           " (%llu refused); cache %llu masks, %.1f MiB\n",
           tot_tok[0] / (tot_sec[0] > 0 ? tot_sec[0] : 1e-9), tot_tok[1] / (tot_sec[1] > 0 ? tot_sec[1] : 1e-9),
           (pc - pf) * 1e3, all.busy_ms / (tot_tok[1] > 0 ? tot_tok[1] : 1), (unsigned long long)all.masks_built,
           all.build_ms,
           all.masks_built ? all.build_ms / (double)all.masks_built : 0.0, (unsigned long long)all.cache_hits,
           masks ? 100.0 * (double)all.cache_hits / (double)masks : 0.0, (unsigned long long)all.checks,
           (unsigned long long)all.checks_rejected, (unsigned long long)all.cache_entries,
           (double)all.cache_bytes / (1 << 20));
    printf("last constrained output: %s\n", out);
    rc = 0;
done:
    free(out);
    free(text);
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_grammar_state_free(gs);
    rp_grammar_vocab_free(v);
    rp_grammar_free(g);
    rp_model_free(m);
    return rc;
}
