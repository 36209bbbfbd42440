/* docqa.c — document QA with reuse: the same documents behind several questions, in changing orders, with a cache
 * directory, so every question after the first computes little more than itself (and a second run of the
 * program, a restart, reuses the documents from disk).
 *
 *   docqa MODEL.gguf CACHE_DIR
 */
#include <reprise.h>
#include <stdio.h>
#include <string.h>

static const char *const docs[] = {
    "Tom lives in a small house near the river. Every morning he walks to the bridge and watches the boats.",
    "Anna has a big brown dog called Max. Max likes to run in the park and to swim in the lake.",
    "The bakery on Main Street opens at seven. It sells bread, cakes and hot chocolate in winter.",
};
static const char *const questions[] = {" Who has a dog?", " Where does Tom live?", " When does the bakery open?"};

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: docqa MODEL.gguf CACHE_DIR\n");
        return 2;
    }
    rp_model *m = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    rp_prompt *p = NULL;
    int rc = 1;
    rp_engine_params ep = rp_engine_default_params();
    ep.cache_dir = argv[2];
    if (rp_model_load(argv[1], rp_model_default_params(), &m) != RP_OK || rp_engine_create(m, &ep, &e) != RP_OK ||
        rp_seq_create(e, &s) != RP_OK || rp_prompt_create(&p) != RP_OK) {
        fprintf(stderr, "docqa: setup: %s\n", rp_last_error());
        goto out;
    }
    if (rp_engine_notice(e)[0]) fprintf(stderr, "docqa: %s\n", rp_engine_notice(e));
    for (int q = 0; q < 3; q++) {
        rp_prompt_clear(p);
        for (int i = 0; i < 3; i++) {   /* each question sees the documents in another order */
            const char *d = docs[(i + q) % 3];
            rp_prompt_add_text(p, m, d, strlen(d));
        }
        rp_prompt_add_text(p, m, questions[q], strlen(questions[q]));
        rp_gen_opts o = rp_gen_default_opts();
        o.sampling.temp = 0;
        o.max_tokens = 16;
        rp_gen_stats st;
        char answer[1024];
        size_t len;
        if (rp_seq_prefill(s, p, &o, &st) != RP_OK || rp_seq_generate(s, &o, answer, sizeof answer, &len, &st) != RP_OK) {
            fprintf(stderr, "docqa: question %d: %s\n", q, rp_last_error());
            goto out;
        }
        printf("Q%d:%s\nA%d:%s\n", q, questions[q], q, answer);
        printf("reuse: prompt %d tokens, reused %d prefix + %d non-prefix, computed %d, ttft %.1f ms\n",
               st.prompt_tokens, st.reused_prefix, st.reused_nonprefix, st.computed, st.ttft_ms);
    }
    rc = 0;
out:
    rp_prompt_free(p);
    rp_seq_free(s);
    rp_engine_free(e);   /* writes what the store has not yet persisted */
    rp_model_free(m);
    return rc;
}
