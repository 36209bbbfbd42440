/* generate.c — the smallest Reprise program: load a model, prompt it, stream greedy text to stdout.
 *
 *   generate MODEL.gguf "Once upon a time" [N]
 */
#include <reprise.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool print_piece(void *user, rp_token tok, const char *text, size_t len) {
    (void)user, (void)tok;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;   /* false would stop the generation */
}

static int fail(const char *what) {
    fprintf(stderr, "generate: %s: %s\n", what, rp_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: generate MODEL.gguf PROMPT [N]\n");
        return 2;
    }
    rp_model *m = NULL;
    if (rp_model_load(argv[1], rp_model_default_params(), &m) != RP_OK) return fail("load");
    rp_engine_params ep = rp_engine_default_params();
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    rp_prompt *p = NULL;
    int rc = 1;
    if (rp_engine_create(m, &ep, &e) != RP_OK || rp_seq_create(e, &s) != RP_OK || rp_prompt_create(&p) != RP_OK) {
        rc = fail("setup");
        goto out;
    }
    if (rp_prompt_add_text(p, m, argv[2], strlen(argv[2])) != RP_OK) {
        rc = fail("prompt");
        goto out;
    }
    rp_gen_opts o = rp_gen_default_opts();
    o.sampling.temp = 0;   /* greedy: the same text every time */
    o.max_tokens = argc > 3 ? atoi(argv[3]) : 32;
    o.on_token = print_piece;
    rp_gen_stats st;
    char text[4096];
    size_t len = 0;
    if (rp_seq_prefill(s, p, &o, &st) != RP_OK || rp_seq_generate(s, &o, text, sizeof text, &len, &st) != RP_OK) {
        rc = fail("generate");
        goto out;
    }
    printf("\n");
    fprintf(stderr, "%d prompt tokens, %d generated, %.1f tok/s\n", st.prompt_tokens, st.generated, st.gen_tok_per_s);
    rc = 0;
out:
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_model_free(m);
    return rc;
}
