/* cmd_embed.c — `reprise embed`: embeddings of texts as one JSON document (over the public API). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "reprise.h"

#define EMBED_MAX_INPUTS 1024

static void usage(void) {
    printf("usage: reprise embed -m MODEL.gguf [-p] TEXT [[-p] TEXT ...] [--pooling mean|cls|last|none] [--no-normalize]\n"
           "                    [-c N] [-b N] [-t N] [--kv-type f16|q8_0|f32]\n"
           "Prints one JSON object: {\"model\", \"pooling\", \"normalized\", \"n_embd\", \"data\": [{\"index\", \"n_tokens\",\n"
           "\"embedding\"}]}; with --pooling none each embedding is an array of per-token vectors.\n"
           "  -p, --prompt TEXT  an input (repeat for several; they are embedded together, several per pass); a bare\n"
           "                     TEXT argument is an input too\n"
           "  --pooling P        mean, cls (first token), last or none (default: the model's <arch>.pooling_type,\n"
           "                     mean when it has none); the states pooled are the final ones after the output norm\n"
           "                     (encoders, bert and nomic-bert: the last layer's, which are normed)\n"
           "  --no-normalize     skip the L2 normalization (default: every vector has unit norm)\n"
           "  -c, --ctx-size N   the longest input in tokens (default min(4096, the model's context))\n"
           "  -b, --batch-size N tokens per forward pass (default 512)\n"
           "  -t, --threads N    default 2\n");
}

int cmd_embed(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "embed"};
    const char *path = NULL, *texts[EMBED_MAX_INPUTS];
    int n_texts = 0;
    rp_embedder_params ep = rp_embedder_default_params();
    long v;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            usage();
            return 0;
        } else if (cli_is(&a, "-m", "--model")) {
            if (!cli_str(&a, &path)) return 2;
        } else if (cli_is(&a, "-p", "--prompt")) {
            if (n_texts == EMBED_MAX_INPUTS) {
                fprintf(stderr, "reprise embed: more than %d inputs\n", EMBED_MAX_INPUTS);
                return 2;
            }
            if (!cli_str(&a, &texts[n_texts])) return 2;
            n_texts++;
        } else if (cli_is(&a, "--pooling", NULL)) {
            const char *s;
            if (!cli_str(&a, &s)) return 2;
            int p = rp_pooling_parse(s);
            if (p < 0) {
                fprintf(stderr, "reprise embed: --pooling '%s' (mean, cls, last or none)\n", s);
                return 2;
            }
            ep.pooling = (rp_pooling)p;
        } else if (cli_is(&a, "--no-normalize", NULL)) {
            ep.normalize = false;
        } else if (cli_is(&a, "-c", "--ctx-size")) {
            if (!cli_int(&a, 1, 1 << 20, &v)) return 2;
            ep.n_ctx = (int32_t)v;
        } else if (cli_is(&a, "-b", "--batch-size")) {
            if (!cli_int(&a, 1, 65536, &v)) return 2;
            ep.n_batch = (int32_t)v;
        } else if (cli_is(&a, "-t", "--threads")) {
            if (!cli_int(&a, 1, 256, &v)) return 2;
            ep.n_threads = (int)v;
        } else if (cli_is(&a, "--kv-type", NULL)) {
            const char *s;
            if (!cli_str(&a, &s)) return 2;
            int t = rp_kv_type_parse(s);
            if (t < 0) {
                fprintf(stderr, "reprise embed: --kv-type '%s' (f16, q8_0 or f32)\n", s);
                return 2;
            }
            ep.kv_type = (rp_kv_type)t;
        } else if (argv[a.i][0] != '-' && n_texts < EMBED_MAX_INPUTS) {   /* a bare TEXT: as -p TEXT */
            texts[n_texts++] = argv[a.i];
        } else {
            return cli_unknown(&a);
        }
    }
    if (!path) { fprintf(stderr, "reprise embed: -m MODEL.gguf is required\n"); return 2; }
    if (n_texts == 0) { fprintf(stderr, "reprise embed: give at least one -p TEXT\n"); return 2; }
    for (int i = 0; i < n_texts; i++)
        if (!texts[i][0]) { fprintf(stderr, "reprise embed: input %d is empty\n", i); return 2; }

    rp_model *m = NULL;
    rp_embedder *e = NULL;
    rp_token *toks[EMBED_MAX_INPUTS] = {0};
    int32_t lens[EMBED_MAX_INPUTS];
    float *out = NULL;
    int rc = 1;
    rp_status st = cli_model_load(path, rp_model_default_params(), &m);
    if (st != RP_OK) { rc = cli_fail("embed", path, st); goto done; }
    if ((st = rp_embedder_create(m, &ep, &e)) != RP_OK) { rc = cli_fail("embed", "embedder", st); goto done; }
    for (int i = 0; i < n_texts; i++) {
        const size_t len = strlen(texts[i]);
        const int32_t cap = len + 8 < INT32_MAX ? (int32_t)(len + 8) : INT32_MAX;   /* a token a byte, BOS, EOS */
        if (!(toks[i] = malloc(sizeof *toks[i] * (size_t)cap))) { fprintf(stderr, "reprise embed: out of memory\n"); goto done; }
        if ((st = rp_embed_tokenize(m, texts[i], len, toks[i], cap, &lens[i])) != RP_OK) {
            rc = cli_fail("embed", "tokenize", st);
            goto done;
        }
    }
    size_t need = 0;
    st = rp_embed(e, (const rp_token *const *)toks, lens, n_texts, NULL, 0, &need);
    if (st != RP_OK && st != RP_ERR_FULL) { rc = cli_fail("embed", "embed", st); goto done; }
    if (!(out = malloc(sizeof *out * (need ? need : 1)))) { fprintf(stderr, "reprise embed: out of memory\n"); goto done; }
    if ((st = rp_embed(e, (const rp_token *const *)toks, lens, n_texts, out, need, &need)) != RP_OK) {
        rc = cli_fail("embed", "embed", st);
        goto done;
    }
    const rp_model_desc md = rp_model_describe(m);
    const rp_pooling pool = rp_embedder_pooling(e);
    const int32_t E = rp_embedder_n_embd(e);
    printf("{\"model\": \"");
    for (const char *c = md.name; *c; c++)   /* a JSON string: quotes, backslashes and controls escaped */
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if ((unsigned char)*c < 0x20) printf("\\u%04x", (unsigned char)*c);
        else putchar(*c);
    printf("\", \"pooling\": \"%s\", \"normalized\": %s, \"n_embd\": %d, \"data\": [", rp_pooling_name(pool),
           ep.normalize ? "true" : "false", E);
    const float *vp = out;
    for (int i = 0; i < n_texts; i++) {
        printf("%s\n  {\"index\": %d, \"n_tokens\": %d, \"embedding\": ", i ? "," : "", i, lens[i]);
        const int32_t rows = pool == RP_POOLING_NONE ? lens[i] : 1;
        if (pool == RP_POOLING_NONE) putchar('[');
        for (int32_t r = 0; r < rows; r++, vp += E) {
            printf(r ? ", [" : "[");
            for (int32_t k = 0; k < E; k++) printf(k ? ", %.9g" : "%.9g", (double)vp[k]);
            putchar(']');
        }
        if (pool == RP_POOLING_NONE) putchar(']');
        putchar('}');
    }
    printf("\n]}\n");
    rc = 0;
done:
    free(out);
    for (int i = 0; i < n_texts; i++) free(toks[i]);
    rp_embedder_free(e);
    rp_model_free(m);
    return rc;
}
