/* bench_grammar.c — `reprise-bench grammar`: decode speed with and without a JSON-schema (or GBNF) constraint on
 * the public API (rp_seq_generate with rp_grammar_on_logits), plus the cost of a repeated mask in a string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "reprise.h"

static const char *DEFAULT_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"ok\"],\"additionalProperties\":false}";

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int bench_grammar(int argc, char **argv) {
    cli_args a = {.argc = argc, .argv = argv, .i = 1, .cmd = "bench grammar"};
    const char *model_path = NULL, *schema_file = NULL, *grammar_file = NULL, *prompt = "Once upon a time";
    long n_gen = 128, threads = 1, reps = 3;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise-bench grammar -m MODEL [--json-schema-file F | --grammar-file F] [-n N] [-t T] [-r R]"
                   " [-p PROMPT]\n"
                   "Greedy decode of up to N tokens (default 128), R times (default 3), unconstrained and under the\n"
                   "constraint (default: a 4-key object schema); prints tok/s of each and the mean time of one mask.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--json-schema-file", NULL)) { if (!cli_str(&a, &schema_file)) return 2; }
        else if (cli_is(&a, "--grammar-file", NULL)) { if (!cli_str(&a, &grammar_file)) return 2; }
        else if (cli_is(&a, "-p", "--prompt")) { if (!cli_str(&a, &prompt)) return 2; }
        else if (cli_is(&a, "-n", "--n-gen")) { if (!cli_int(&a, 1, 1 << 20, &n_gen)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 1000, &reps)) return 2; }
        else { fprintf(stderr, "reprise-bench grammar: unknown option '%s'\n", argv[a.i]); return 2; }
    }
    if (!model_path) { fprintf(stderr, "reprise-bench grammar: -m MODEL is required\n"); return 2; }
    int rc = 1;
    rp_model *m = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    rp_prompt *p = NULL;
    rp_grammar *g = NULL;
    rp_grammar_vocab *v = NULL;
    rp_grammar_state *gs = NULL;
    char *text = NULL;
    float *lg = NULL;
    rp_status st = rp_model_load(model_path, rp_model_default_params(), &m);
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s: %s\n", model_path, rp_last_error()); return 1; }
    if (schema_file || grammar_file) {
        text = cli_read_file("bench grammar", grammar_file ? grammar_file : schema_file, NULL);
        if (!text) goto done;
    }
    const double tb0 = now_s();
    st = grammar_file ? rp_grammar_parse(text, NULL, &g) : rp_grammar_from_json_schema(text ? text : DEFAULT_SCHEMA, &g);
    if (st == RP_OK) st = rp_grammar_vocab_new(m, &v);
    const double t_build = now_s() - tb0;
    if (st == RP_OK) st = rp_grammar_state_new(g, v, &gs);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    if (st == RP_OK) st = rp_engine_create(m, &ep, &e);
    if (st == RP_OK) st = rp_seq_create(e, &s);
    if (st == RP_OK) st = rp_prompt_create(&p);
    if (st == RP_OK) st = rp_prompt_add_text(p, m, prompt, strlen(prompt));
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s\n", rp_last_error()); goto done; }
    double tok[2] = {0}, sec[2] = {0};
    for (long r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            rp_gen_opts o = rp_gen_default_opts();
            o.sampling.temp = 0;
            o.max_tokens = (int32_t)n_gen;
            if (k == 1) {
                o.on_logits = rp_grammar_on_logits;
                o.logits_user = gs;
                rp_grammar_state_reset(gs);
            }
            rp_gen_stats gst;
            if ((st = rp_seq_prefill(s, p, &o, &gst)) != RP_OK) break;
            if ((st = rp_seq_generate(s, &o, NULL, 0, NULL, &gst)) != RP_OK) break;
            tok[k] += gst.generated;
            sec[k] += gst.decode_ms * 1e-3;
        }
    if (st != RP_OK) { fprintf(stderr, "reprise-bench grammar: %s\n", rp_last_error()); goto done; }
    /* one mask's cost, in a string (the widest set of allowed tokens for JSON) */
    rp_model_desc d = rp_model_describe(m);
    lg = malloc(sizeof *lg * (size_t)d.n_vocab);
    if (!lg) goto done;
    double t_mask = 0;
    int n_mask = 0;
    rp_grammar_state_reset(gs);
    if (!grammar_file && rp_grammar_accept_bytes(gs, "{\"name\": \"a", 11) != RP_OK) rp_grammar_state_reset(gs);
    for (int it = 0; it < 200; it++) {
        memset(lg, 0, sizeof *lg * (size_t)d.n_vocab);
        const double t0 = now_s();
        rp_grammar_mask(gs, lg, d.n_vocab);
        t_mask += now_s() - t0;
        n_mask++;
    }
    printf("model %s, vocab %d, threads %ld, %ld reps of <= %ld tokens (greedy)\n", d.name, d.n_vocab, threads, reps, n_gen);
    printf("grammar + vocabulary trie build: %.2f ms\n", t_build * 1e3);
    printf("unconstrained: %.0f tokens, %.1f tok/s\n", tok[0], tok[0] / (sec[0] > 0 ? sec[0] : 1e-9));
    printf("constrained:   %.0f tokens, %.1f tok/s\n", tok[1], tok[1] / (sec[1] > 0 ? sec[1] : 1e-9));
    printf("one mask (in a string, the same state 200 times: after the first, a memo hit): %.1f us\n",
           t_mask / n_mask * 1e6);
    rc = 0;
done:
    free(lg);
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
