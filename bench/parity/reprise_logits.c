/* reprise_logits.c — prints Reprise's next-token logits at given positions of a fixed token sequence, on the
 * public API only (include/reprise.h). The llama.cpp side of bench/parity/parity.mjs.
 *
 *   reprise_logits MODEL.gguf TOKENS.i32 OUT.f32 -p 1,100,1000 [-c N_CTX] [-t THREADS] [-b N_BATCH]
 *
 * TOKENS.i32: int32 token ids (little-endian). For each position p (ascending) the sequence holds tokens[0..p]
 * (positions 0..p) and the logits of token p (those of the next token) are appended to OUT.f32 as n_vocab float32.
 * Prints one line to stdout: `n_vocab N`. Exit 1 on any failure, naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"

static int fail(const char *what) {
    fprintf(stderr, "reprise_logits: %s: %s\n", what, rp_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: reprise_logits MODEL.gguf TOKENS.i32 OUT.f32 -p P1,P2,... [-c N_CTX] [-t THREADS] [-b N_BATCH]\n");
        return 2;
    }
    const char *model_path = argv[1], *tok_path = argv[2], *out_path = argv[3];
    int32_t pos[64];
    int npos = 0;
    long n_ctx = 0, threads = 2, n_batch = 0;
    for (int i = 4; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "reprise_logits: %s needs a value\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "-p")) {
            for (char *s = argv[++i]; *s && npos < 64;) {
                char *e;
                long p = strtol(s, &e, 10);
                if (e == s || p < 0 || (npos && p <= pos[npos - 1])) {
                    fprintf(stderr, "reprise_logits: -p wants ascending non-negative integers, got '%s'\n", v);
                    return 2;
                }
                pos[npos++] = (int32_t)p;
                s = *e == ',' ? e + 1 : e;
            }
        } else if (!strcmp(argv[i], "-c")) n_ctx = atol(argv[++i]);
        else if (!strcmp(argv[i], "-t")) threads = atol(argv[++i]);
        else if (!strcmp(argv[i], "-b")) n_batch = atol(argv[++i]);
        else { fprintf(stderr, "reprise_logits: unknown option '%s'\n", argv[i]); return 2; }
    }
    if (!npos) { fprintf(stderr, "reprise_logits: -p is required\n"); return 2; }

    FILE *f = fopen(tok_path, "rb");
    if (!f) { perror(tok_path); return 1; }
    fseek(f, 0, SEEK_END);
    long nb = ftell(f);
    fseek(f, 0, SEEK_SET);
    int32_t n_tok = (int32_t)(nb / 4);
    rp_token *tok = malloc(sizeof *tok * (size_t)(n_tok > 0 ? n_tok : 1));
    if (!tok || fread(tok, 4, (size_t)n_tok, f) != (size_t)n_tok) { fclose(f); fprintf(stderr, "reprise_logits: cannot read %s\n", tok_path); return 1; }
    fclose(f);
    if (pos[npos - 1] >= n_tok) {
        fprintf(stderr, "reprise_logits: position %d is past the %d tokens\n", pos[npos - 1], n_tok);
        free(tok);
        return 2;
    }

    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_model *m = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    FILE *o = NULL;
    int rc = 1;
    if (rp_model_load(model_path, mp, &m) != RP_OK) { fail(model_path); goto done; }
    rp_model_desc d = rp_model_describe(m);
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    ep.n_ctx = n_ctx > 0 ? (int32_t)n_ctx : pos[npos - 1] + 1;
    ep.n_ctx_over_train = true;
    ep.reuse = RP_REUSE_NONE;
    if (n_batch > 0) ep.n_batch = (int32_t)n_batch;
    if (rp_engine_create(m, &ep, &e) != RP_OK) { fail("engine"); goto done; }
    if (rp_seq_create(e, &s) != RP_OK) { fail("sequence"); goto done; }
    if (!(o = fopen(out_path, "wb"))) { perror(out_path); goto done; }
    int32_t fed = 0;
    for (int k = 0; k < npos; k++) {
        if (rp_seq_feed(s, tok + fed, pos[k] + 1 - fed) != RP_OK) { fail("feed"); goto done; }
        fed = pos[k] + 1;
        const float *lg = rp_seq_logits(s);
        if (!lg) { fprintf(stderr, "reprise_logits: no logits at position %d\n", pos[k]); goto done; }
        if (fwrite(lg, sizeof *lg, (size_t)d.n_vocab, o) != (size_t)d.n_vocab) { fprintf(stderr, "reprise_logits: write failed\n"); goto done; }
    }
    int cl = fclose(o);
    o = NULL;
    if (cl != 0) { fprintf(stderr, "reprise_logits: write failed\n"); goto done; }
    printf("n_vocab %d\n", d.n_vocab);
    rc = 0;
done:
    if (o) fclose(o);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
    free(tok);
    return rc;
}
