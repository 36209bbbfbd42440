/* api_prompt.c — rp_prompt: a prompt's tokens and the segment boundaries the reuse engine chunks at. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "api/api_internal.h"
#include "core/error.h"
#include "reuse/chunk.h"
#include "tokenizer/tokenizer.h"

#define PROMPT_MAX_TOKENS (1 << 26)

rp_status rp_prompt_create(rp_prompt **out) {
    *out = calloc(1, sizeof **out);
    return *out ? RP_OK : rp_errorf(RP_ERR_NOMEM, "prompt: out of memory");
}

void rp_prompt_free(rp_prompt *p) {
    if (!p) return;
    free(p->toks);
    free(p->bounds);
    free(p);
}

void rp_prompt_clear(rp_prompt *p) {
    if (!p) return;
    p->n = p->n_bounds = p->n_segments = 0;
}

/* Room for `more` tokens (and as many boundaries). */
static rp_status reserve(rp_prompt *p, size_t more) {
    if ((size_t)p->n + more <= (size_t)p->cap) return RP_OK;
    const size_t want = (size_t)p->cap * 2 + more;
    if (want > PROMPT_MAX_TOKENS) return rp_errorf(RP_ERR_RANGE, "prompt: more than %d tokens", PROMPT_MAX_TOKENS);
    rp_token *t = realloc(p->toks, sizeof *t * want);
    if (t) p->toks = t;
    int32_t *b = realloc(p->bounds, sizeof *b * want);
    if (b) p->bounds = b;
    if (!t || !b) return rp_errorf(RP_ERR_NOMEM, "prompt: out of memory");
    p->cap = (int32_t)want;
    return RP_OK;
}

rp_status rp_prompt_add_text(rp_prompt *p, const rp_model *m, const char *text, size_t len) {
    if (!p || !m || (!text && len)) return rp_errorf(RP_ERR_INVALID_ARG, "prompt: NULL argument");
    if (!m->tok) return rp_errorf(RP_ERR_UNSUPPORTED, "prompt: model '%s' has no tokenizer", m->name);
    RP_TRY(reserve(p, len + 8));   /* a byte-level tokenizer makes at most one token a byte (+ BOS) */
    /* BOS goes before the first segment that has tokens, as `reprise run` builds prompts */
    const rp_tokenize_opts o = {.add_bos = p->n == 0 && rp_tokenizer_add_bos(m->tok), .parse_special = true};
    size_t got = 0;
    RP_TRY(rp_tokenizer_encode(m->tok, text ? text : "", len, o, p->toks + p->n, (size_t)(p->cap - p->n), &got));
    if (got == 0) return RP_OK;
    if (p->n > 0) p->bounds[p->n_bounds++] = p->n;
    p->n += (int32_t)got;
    p->n_segments++;
    return RP_OK;
}

rp_status rp_prompt_add_tokens(rp_prompt *p, const rp_token *t, int32_t n, bool new_segment) {
    if (!p || n < 0 || (n > 0 && !t)) return rp_errorf(RP_ERR_INVALID_ARG, "prompt: %d tokens", n);
    if (n == 0) return RP_OK;
    RP_TRY(reserve(p, (size_t)n));
    if (new_segment || p->n_segments == 0) {
        if (p->n > 0) p->bounds[p->n_bounds++] = p->n;
        p->n_segments++;
    }
    memcpy(p->toks + p->n, t, sizeof *t * (size_t)n);
    p->n += n;
    return RP_OK;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

rp_status rp_prompt_split_at(rp_prompt *p, const rp_model *m, const char *separator) {
    if (!p || !m || !separator) return rp_errorf(RP_ERR_INVALID_ARG, "prompt: NULL argument");
    if (!separator[0] || p->n == 0) return RP_OK;
    if (!m->tok) return rp_errorf(RP_ERR_UNSUPPORTED, "prompt: model '%s' has no tokenizer", m->name);
    rp_token sep[256], ctx[260], lead[8];
    size_t ns = 0, nc = 0, nl = 0;
    const rp_tokenize_opts o = {.add_bos = false, .parse_special = true};
    if (rp_tokenizer_encode(m->tok, separator, strlen(separator), o, sep, 256, &ns) != RP_OK || ns == 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "prompt: the separator must tokenize to 1..256 tokens");
    int32_t room = p->cap - p->n_bounds;
    p->n_bounds += rp_chunk_find_separators(p->toks, p->n, sep, (int32_t)ns, p->bounds + p->n_bounds, room);
    /* inside text a separator can tokenize otherwise than alone: an SPM vocabulary gives text a dummy-prefix
     * space ("\n\n" alone is [_ \n \n], after a word [\n \n]); so also its tokens after a full stop */
    char buf[600];
    const int bl = snprintf(buf, sizeof buf, ".%s", separator);
    if (bl > 0 && (size_t)bl < sizeof buf && rp_tokenizer_encode(m->tok, ".", 1, o, lead, 8, &nl) == RP_OK &&
        rp_tokenizer_encode(m->tok, buf, (size_t)bl, o, ctx, 260, &nc) == RP_OK && nc > nl &&
        memcmp(ctx, lead, sizeof *lead * nl) == 0 && (nc - nl != ns || memcmp(ctx + nl, sep, sizeof *sep * ns) != 0)) {
        room = p->cap - p->n_bounds;
        p->n_bounds += rp_chunk_find_separators(p->toks, p->n, ctx + nl, (int32_t)(nc - nl), p->bounds + p->n_bounds, room);
    }
    qsort(p->bounds, (size_t)p->n_bounds, sizeof *p->bounds, cmp_i32);
    int32_t w = 0;   /* in (0, n), strictly increasing */
    for (int32_t i = 0; i < p->n_bounds; i++)
        if (p->bounds[i] > 0 && p->bounds[i] < p->n && (w == 0 || p->bounds[i] != p->bounds[w - 1]))
            p->bounds[w++] = p->bounds[i];
    p->n_bounds = w;
    return RP_OK;
}

int32_t rp_prompt_n_tokens(const rp_prompt *p) { return p ? p->n : 0; }
const rp_token *rp_prompt_tokens(const rp_prompt *p) { return p ? p->toks : NULL; }
int32_t rp_prompt_n_bounds(const rp_prompt *p) { return p ? p->n_bounds : 0; }
const int32_t *rp_prompt_bounds(const rp_prompt *p) { return p ? p->bounds : NULL; }
int32_t rp_prompt_n_segments(const rp_prompt *p) { return p ? p->n_segments : 0; }
