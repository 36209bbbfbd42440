/* retrieve_embed.c — vectors for the workloads' retrieval, computed by an embedding model (see retrieve_embed.h). */
#include "retrieve_embed.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 16 };   /* texts per rp_embed call */

static bool embed_batch(rp_embedder *e, const rp_model *m, json_t *emb, const char *const *texts, int n) {
    const int32_t cap = rp_embedder_n_ctx(e), dim = rp_embedder_n_embd(e);
    rp_token *toks[BATCH] = {0};
    int32_t nt[BATCH] = {0};
    float *out = malloc(sizeof(float) * (size_t)dim * (size_t)n);
    bool ok = out != NULL;
    for (int i = 0; ok && i < n; i++) {
        const size_t len = strlen(texts[i]);
        int32_t need = 0;
        rp_status st = rp_embed_tokenize(m, texts[i], len, NULL, 0, &need);
        if (st != RP_OK && st != RP_ERR_FULL) {
            fprintf(stderr, "reprise: --retrieve-model: cannot tokenize \"%.40s...\": %s\n", texts[i], rp_last_error());
            ok = false;
            break;
        }
        toks[i] = malloc(sizeof(rp_token) * (size_t)(need > 0 ? need : 1));
        ok = toks[i] && rp_embed_tokenize(m, texts[i], len, toks[i], need, &nt[i]) == RP_OK;
        if (ok && nt[i] > cap) {   /* the passage's first tokens, all the model can see (its EOS / [SEP] kept) */
            const rp_token last = toks[i][nt[i] - 1];
            nt[i] = cap;
            if (last == rp_token_eos(m)) toks[i][cap - 1] = last;
        }
        if (ok && nt[i] == 0) {
            fprintf(stderr, "reprise: --retrieve-model: the text \"%.40s\" has no tokens\n", texts[i]);
            ok = false;
        }
    }
    size_t got = 0;
    if (ok && rp_embed(e, (const rp_token *const *)toks, nt, n, out, (size_t)dim * (size_t)n, &got) != RP_OK) {
        fprintf(stderr, "reprise: --retrieve-model: embedding failed: %s\n", rp_last_error());
        ok = false;
    }
    for (int i = 0; ok && i < n; i++) {
        json_t *v = json_array();
        for (int32_t d = 0; v && d < dim; d++) json_array_append_new(v, json_real(out[(size_t)i * dim + d]));
        ok = v && json_object_set_new(emb, texts[i], v) == 0;
    }
    for (int i = 0; i < n; i++) free(toks[i]);
    free(out);
    return ok;
}

bool rp_retrieve_embed_fill(rp_embedder *e, const rp_model *m, json_t *emb, const char *const *texts, int n) {
    const char *todo[BATCH];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (json_object_get(emb, texts[i])) continue;
        bool dup = false;   /* a text twice in one batch is embedded once */
        for (int j = 0; j < k && !dup; j++) dup = !strcmp(todo[j], texts[i]);
        if (dup) continue;
        todo[k++] = texts[i];
        if (k == BATCH) {
            if (!embed_batch(e, m, emb, todo, k)) return false;
            k = 0;
        }
    }
    return k == 0 || embed_batch(e, m, emb, todo, k);
}
