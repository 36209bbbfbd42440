/* grammar_match.c — the incremental GBNF matcher: a sequence's state is a set of stacks of grammar positions
 * (llama.cpp's design) plus a partial UTF-8 code point. Masking walks a trie of the vocabulary's token strings
 * built once per model (rp_grammar_vocab): a subtree is pruned at the first byte no stack accepts, so the cost
 * follows the viable prefixes, not the vocabulary's size x token length. Buffers grow to their high-water mark
 * and are reused: no allocation per token once warm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define RP_GRAMMAR_MAX_DEPTH 512   /* a stack deeper than this is dropped (left recursion, runaway nesting) */
#define RP_GRAMMAR_MAX_STACKS 4096

typedef struct gset {
    int32_t *data, *off;   /* stack i = data[off[i] .. off[i+1]) */
    int32_t n, cap_data, cap_off;
} gset;

typedef struct tnode {
    int32_t end;        /* index past this node's subtree (pre-order layout) */
    int32_t tok_first;  /* into rp_grammar_vocab.order */
    int32_t tok_n;
    uint8_t byte;
} tnode;

struct rp_grammar_vocab {
    int32_t n_vocab;
    char *blob;          /* token strings */
    int32_t *str_off;    /* [n_vocab + 1] */
    uint8_t *eog;        /* [n_vocab] */
    int32_t *order;      /* tokens in trie order */
    tnode *nodes;
    int32_t n_nodes;
    int32_t max_len;
};

typedef struct glevel {
    gset set;
} glevel;

/* Masks memoised by the state they were computed at (the stack set and the pending code point): inside a JSON
 * string, or between a schema's fixed keys, the same state recurs token after token, and a hit costs one copy of
 * [n_vocab] bytes instead of a trie walk. */
#define RP_GRAMMAR_MASK_CACHE 16
typedef struct gmemo {
    uint64_t h;
    int32_t *key;      /* the serialised state */
    int32_t key_len, key_cap;
    uint8_t *bits;     /* [n_vocab] */
    bool used;
} gmemo;

struct rp_grammar_state {
    const rp_grammar *g;
    const rp_grammar_vocab *v;
    gset cur, tmp;
    uint32_t pend_cp;
    int pend_need;
    int32_t *scratch;    /* [RP_GRAMMAR_MAX_DEPTH + 2] */
    uint8_t *allowed;    /* [n_vocab] */
    glevel *levels;      /* [max_len + 1] */
    int32_t n_levels;
    int32_t hist_seen;   /* the on_logits hook: tokens of hist already accepted (-1: not started) */
    gmemo memo[RP_GRAMMAR_MASK_CACHE];
    int32_t memo_next;   /* round-robin victim */
    int32_t *keybuf;     /* the current state serialised */
    int32_t keybuf_cap;
    uint64_t memo_hits, memo_misses;
    bool failed;
};

/* ---- stack sets ---- */

static bool gset_reserve(gset *s, int32_t more_data) {
    if (s->n + 2 > s->cap_off) {
        int32_t nc = s->cap_off ? s->cap_off * 2 : 32;
        int32_t *no = realloc(s->off, (size_t)nc * sizeof *no);
        if (!no) return false;
        s->off = no;
        s->cap_off = nc;
    }
    int32_t used = s->n ? s->off[s->n] : 0;
    if (used + more_data > s->cap_data) {
        int32_t nc = s->cap_data ? s->cap_data : 64;
        while (nc < used + more_data) nc *= 2;
        int32_t *nd = realloc(s->data, (size_t)nc * sizeof *nd);
        if (!nd) return false;
        s->data = nd;
        s->cap_data = nc;
    }
    return true;
}

static void gset_clear(gset *s) {
    s->n = 0;
    if (s->off) s->off[0] = 0;
}

static void gset_add(gset *s, const int32_t *stk, int32_t len) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->off[i + 1] - s->off[i] == len && memcmp(s->data + s->off[i], stk, (size_t)len * sizeof *stk) == 0)
            return;
    if (s->n >= RP_GRAMMAR_MAX_STACKS || !gset_reserve(s, len)) return;
    if (s->n == 0) s->off[0] = 0;
    memcpy(s->data + s->off[s->n], stk, (size_t)len * sizeof *stk);
    s->off[s->n + 1] = s->off[s->n] + len;
    s->n++;
}

static void gset_free(gset *s) {
    free(s->data);
    free(s->off);
}

static bool is_seq_end(const rp_gelem *e) { return e->type == RP_GE_END || e->type == RP_GE_ALT; }

/* Expands stk[0..len) (top last) until every top is a character element; adds the results to out. stk has room
 * for RP_GRAMMAR_MAX_DEPTH + 2 entries; entries from len-1 up are scratch and restored on return. */
static void expand(const rp_grammar *g, gset *out, int32_t *stk, int32_t len, int depth) {
    if (depth > RP_GRAMMAR_MAX_DEPTH || len > RP_GRAMMAR_MAX_DEPTH) return;
    if (len == 0) { gset_add(out, stk, 0); return; }
    int32_t pos = stk[len - 1];
    const rp_gelem *e = &g->elems[pos];
    if (e->type != RP_GE_RULE_REF) { gset_add(out, stk, len); return; }
    int32_t base = len - 1, nl = base;
    if (!is_seq_end(&g->elems[pos + 1])) stk[nl++] = pos + 1;
    int32_t a = g->rule_start[e->value];
    for (;;) {
        int32_t l2 = nl;
        if (!is_seq_end(&g->elems[a])) stk[l2++] = a;
        expand(g, out, stk, l2, depth + 1);
        if (nl > base) stk[base] = pos + 1;
        while (!is_seq_end(&g->elems[a])) a++;
        if (g->elems[a].type == RP_GE_END) break;
        a++;
    }
    stk[base] = pos;
}

static bool match_char(const rp_gelem *p, uint32_t c) {
    bool positive = p->type == RP_GE_CHAR || p->type == RP_GE_CHAR_ANY;
    do {
        if (p->type == RP_GE_CHAR_ANY) return true;
        if (p[1].type == RP_GE_CHAR_RNG_UPPER) {
            if (p->value <= c && c <= p[1].value) return positive;
            p += 2;
        } else {
            if (p->value == c) return positive;
            p += 1;
        }
    } while (p->type == RP_GE_CHAR_ALT);
    return !positive;
}

/* Whether a stack of `in` can take some code point in [lo, hi] (a partial UTF-8 sequence's completions). */
static bool may_match_range(const rp_grammar *g, const gset *in, uint32_t lo, uint32_t hi) {
    for (int32_t i = 0; i < in->n; i++) {
        int32_t len = in->off[i + 1] - in->off[i];
        if (len == 0) continue;
        const rp_gelem *p = &g->elems[in->data[in->off[i] + len - 1]];
        if (p->type != RP_GE_CHAR) return true;   /* '.', or a negated class: nearly everything */
        do {
            uint32_t a = p->value, b = p[1].type == RP_GE_CHAR_RNG_UPPER ? p[1].value : p->value;
            if (a <= hi && b >= lo) return true;
            p += p[1].type == RP_GE_CHAR_RNG_UPPER ? 2 : 1;
        } while (p->type == RP_GE_CHAR_ALT);
    }
    return false;
}

static bool pending_ok(const rp_grammar *g, const gset *in, uint32_t cp, int need, uint32_t min) {
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < min) lo = min;   /* overlong encodings are rejected */
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    return may_match_range(g, in, lo, hi);
}

static void accept_cp(const rp_grammar *g, const gset *in, gset *out, int32_t *scratch, uint32_t c) {
    gset_clear(out);
    for (int32_t i = 0; i < in->n; i++) {
        int32_t len = in->off[i + 1] - in->off[i];
        if (len == 0) continue;
        const int32_t *stk = in->data + in->off[i];
        int32_t pos = stk[len - 1];
        if (!match_char(&g->elems[pos], c)) continue;
        int32_t after = pos + 1;
        while (g->elems[after].type == RP_GE_CHAR_RNG_UPPER || g->elems[after].type == RP_GE_CHAR_ALT) after++;
        memcpy(scratch, stk, (size_t)(len - 1) * sizeof *stk);
        int32_t nl = len - 1;
        if (!is_seq_end(&g->elems[after])) scratch[nl++] = after;
        expand(g, out, scratch, nl, 0);
    }
}

/* ---- vocabulary trie ---- */

static const rp_grammar_vocab *g_sort_vocab;
static int cmp_tok(const void *a, const void *b) {
    const rp_grammar_vocab *v = g_sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int32_t lx = v->str_off[x + 1] - v->str_off[x], ly = v->str_off[y + 1] - v->str_off[y];
    int c = memcmp(v->blob + v->str_off[x], v->blob + v->str_off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

RP_API void rp_grammar_vocab_free(rp_grammar_vocab *v) {
    if (!v) return;
    free(v->blob);
    free(v->str_off);
    free(v->eog);
    free(v->order);
    free(v->nodes);
    free(v);
}

RP_API rp_status rp_grammar_vocab_new(const rp_model *m, rp_grammar_vocab **out) {
    if (!m || !out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_vocab_new: NULL argument");
    *out = NULL;
    rp_model_desc d = rp_model_describe(m);
    if (!d.has_tokenizer || d.n_vocab <= 0) return rp_errorf(RP_ERR_UNSUPPORTED, "grammar: the model has no tokenizer");
    rp_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    int32_t n = d.n_vocab;
    v->n_vocab = n;
    v->str_off = malloc(((size_t)n + 1) * sizeof *v->str_off);
    v->eog = calloc((size_t)n, 1);
    v->order = malloc((size_t)n * sizeof *v->order);
    size_t cap = (size_t)n * 8 + 64, used = 0;
    v->blob = malloc(cap);
    if (!v->str_off || !v->eog || !v->order || !v->blob) goto nomem;
    for (int32_t t = 0; t < n; t++) {
        char piece[256];
        int32_t len = rp_token_to_piece(m, t, false, piece, (int32_t)sizeof piece);
        if (len < 0) len = 0;
        if (len > (int32_t)sizeof piece) len = 0;   /* longer than any real token: never allowed */
        v->eog[t] = rp_token_is_eog(m, t) ? 1 : 0;
        if (used + (size_t)len > cap) {
            cap = cap * 2 + (size_t)len;
            char *nb = realloc(v->blob, cap);
            if (!nb) goto nomem;
            v->blob = nb;
        }
        v->str_off[t] = (int32_t)used;
        memcpy(v->blob + used, piece, (size_t)len);
        used += (size_t)len;
        if (len > v->max_len) v->max_len = len;
        v->order[t] = t;
    }
    v->str_off[n] = (int32_t)used;
    g_sort_vocab = v;   /* qsort has no context argument; the build is serialised by this being short-lived */
    qsort(v->order, (size_t)n, sizeof *v->order, cmp_tok);
    /* pre-order trie: node 0 is the root (empty prefix) */
    size_t ncap = used + 1;
    v->nodes = malloc(ncap * sizeof *v->nodes);
    int32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->nodes || !path) { free(path); goto nomem; }
    v->nodes[0] = (tnode){.end = 0, .tok_first = 0, .tok_n = 0};
    v->n_nodes = 1;
    path[0] = 0;
    int32_t depth = 0;
    const char *prev = NULL;
    int32_t prev_len = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = v->order[i];
        int32_t len = v->str_off[t + 1] - v->str_off[t];
        const char *s = v->blob + v->str_off[t];
        if (len == 0) continue;   /* empty (special) tokens: not in the trie */
        int32_t l = 0;
        while (prev && l < len && l < prev_len && s[l] == prev[l]) l++;
        while (depth > l) { v->nodes[path[depth]].end = v->n_nodes; depth--; }
        while (depth < len) {
            int32_t id = v->n_nodes++;
            v->nodes[id] = (tnode){.end = 0, .tok_first = i, .tok_n = 0, .byte = (uint8_t)s[depth]};
            path[++depth] = id;
        }
        tnode *nd = &v->nodes[path[depth]];
        if (nd->tok_n == 0) nd->tok_first = i;
        nd->tok_n++;
        prev = s;
        prev_len = len;
    }
    while (depth >= 0) { v->nodes[path[depth]].end = v->n_nodes; depth--; }
    free(path);
    *out = v;
    return RP_OK;
nomem:
    rp_grammar_vocab_free(v);
    return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
}

/* ---- state ---- */

RP_API void rp_grammar_state_free(rp_grammar_state *s) {
    if (!s) return;
    gset_free(&s->cur);
    gset_free(&s->tmp);
    for (int32_t i = 0; i < s->n_levels; i++) gset_free(&s->levels[i].set);
    free(s->levels);
    for (int i = 0; i < RP_GRAMMAR_MASK_CACHE; i++) { free(s->memo[i].key); free(s->memo[i].bits); }
    free(s->keybuf);
    free(s->scratch);
    free(s->allowed);
    free(s);
}

RP_API rp_status rp_grammar_state_reset(rp_grammar_state *s) {
    if (!s) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_state_reset: NULL state");
    gset_clear(&s->cur);
    s->scratch[0] = s->g->rule_start[s->g->root];
    /* the root's alternatives: expand a reference to it */
    const rp_grammar *g = s->g;
    int32_t a = g->rule_start[g->root];
    for (;;) {
        int32_t len = 0;
        if (!is_seq_end(&g->elems[a])) s->scratch[len++] = a;
        expand(g, &s->cur, s->scratch, len, 0);
        while (!is_seq_end(&g->elems[a])) a++;
        if (g->elems[a].type == RP_GE_END) break;
        a++;
    }
    s->pend_cp = 0;
    s->pend_need = 0;
    s->hist_seen = -1;
    s->failed = false;
    if (s->cur.n == 0) return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    return RP_OK;
}

RP_API rp_status rp_grammar_state_new(const rp_grammar *g, const rp_grammar_vocab *v, rp_grammar_state **out) {
    if (!g || !out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_state_new: NULL argument");
    *out = NULL;
    rp_grammar_state *s = calloc(1, sizeof *s);
    if (!s) return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    s->g = g;
    s->v = v;
    s->scratch = malloc((RP_GRAMMAR_MAX_DEPTH + 2) * sizeof *s->scratch);
    if (v) {
        s->allowed = malloc((size_t)v->n_vocab);
        s->n_levels = v->max_len + 1;
        s->levels = calloc((size_t)s->n_levels, sizeof *s->levels);
    }
    if (!s->scratch || (v && (!s->allowed || !s->levels))) {
        rp_grammar_state_free(s);
        return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    }
    rp_status st = rp_grammar_state_reset(s);
    if (st != RP_OK) { rp_grammar_state_free(s); return st; }
    *out = s;
    return RP_OK;
}

static bool set_can_end(const gset *s) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->off[i + 1] == s->off[i]) return true;
    return false;
}

RP_API bool rp_grammar_can_end(const rp_grammar_state *s) {
    return s && !s->failed && s->pend_need == 0 && set_can_end(&s->cur);
}

/* One byte on (set, pending); the result set is *out (which may be `in` itself when no code point completed).
 * Returns false when the byte is rejected. */
static bool step_byte(const rp_grammar *g, const gset *in, uint32_t *cp, int *need, uint8_t b, gset *dst,
                      int32_t *scratch, const gset **res) {
    if (*need == 0) {
        if (b < 0x80) { *cp = b; }
        else if ((b & 0xE0) == 0xC0) { *cp = b & 0x1F; *need = 1; *res = in; return b >= 0xC2 && pending_ok(g, in, *cp, 1, 0x80); }
        else if ((b & 0xF0) == 0xE0) { *cp = b & 0x0F; *need = 2; *res = in; return pending_ok(g, in, *cp, 2, 0x800); }
        else if ((b & 0xF8) == 0xF0 && b <= 0xF4) { *cp = b & 0x07; *need = 3; *res = in; return pending_ok(g, in, *cp, 3, 0x10000); }
        else return false;
    } else {
        if ((b & 0xC0) != 0x80) return false;
        /* overlong forms: E0 below A0, F0 below 90 (a zero lead payload at the first continuation) */
        if (*cp == 0 && ((*need == 2 && b < 0xA0) || (*need == 3 && b < 0x90))) return false;
        *cp = (*cp << 6) | (b & 0x3F);
        if (--*need > 0) { *res = in; return pending_ok(g, in, *cp, *need, *need == 1 ? 0x800 : 0x10000); }
    }
    accept_cp(g, in, dst, scratch, *cp);
    *res = dst;
    return dst->n > 0;
}

RP_API rp_status rp_grammar_accept_bytes(rp_grammar_state *s, const char *bytes, size_t n) {
    if (!s || (!bytes && n)) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_accept_bytes: NULL argument");
    if (s->failed) return rp_errorf(RP_ERR_INVALID_ARG, "grammar: the state already rejected its input");
    uint32_t cp = s->pend_cp;
    int need = s->pend_need;
    for (size_t i = 0; i < n; i++) {
        const gset *res;
        if (!step_byte(s->g, &s->cur, &cp, &need, (uint8_t)bytes[i], &s->tmp, s->scratch, &res)) {
            s->failed = true;
            return rp_errorf(RP_ERR_INVALID_ARG, "grammar: byte %zu (0x%02x) does not continue the grammar", i,
                             (unsigned)(uint8_t)bytes[i]);
        }
        if (res == &s->tmp) { gset t = s->cur; s->cur = s->tmp; s->tmp = t; }
    }
    s->pend_cp = cp;
    s->pend_need = need;
    return RP_OK;
}

RP_API rp_status rp_grammar_accept_token(rp_grammar_state *s, rp_token t) {
    if (!s || !s->v) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_accept_token: no state or no vocabulary");
    if (t < 0 || t >= s->v->n_vocab) return rp_errorf(RP_ERR_RANGE, "grammar: token %d out of range", (int)t);
    if (s->v->eog[t]) {
        if (!rp_grammar_can_end(s)) return rp_errorf(RP_ERR_INVALID_ARG, "grammar: end of generation before the grammar can end");
        return RP_OK;
    }
    int32_t len = s->v->str_off[t + 1] - s->v->str_off[t];
    if (len == 0) return rp_errorf(RP_ERR_INVALID_ARG, "grammar: token %d has no text", (int)t);
    return rp_grammar_accept_bytes(s, s->v->blob + s->v->str_off[t], (size_t)len);
}

/* Marks the tokens of node `ni`'s subtree (whose prefix left the set `in` with `cp`/`need` pending) that the
 * grammar allows. */
static void walk(rp_grammar_state *s, int32_t ni, int32_t depth, const gset *in, uint32_t cp, int need) {
    const rp_grammar_vocab *v = s->v;
    const tnode *nd = &v->nodes[ni];
    if (nd->tok_n > 0 && (need == 0 ? in->n > 0 : true))
        for (int32_t k = 0; k < nd->tok_n; k++) s->allowed[v->order[nd->tok_first + k]] = 1;
    for (int32_t c = ni + 1; c < nd->end; c = v->nodes[c].end) {
        uint32_t cp2 = cp;
        int need2 = need;
        const gset *res;
        if (!step_byte(s->g, in, &cp2, &need2, v->nodes[c].byte, &s->levels[depth].set, s->scratch, &res)) continue;
        walk(s, c, depth + 1, res, cp2, need2);
    }
}

/* Serialises the state into s->keybuf; returns its length (-1: out of memory) and its hash in *h. */
static int32_t state_key(rp_grammar_state *s, uint64_t *h) {
    const gset *c = &s->cur;
    int32_t nd = c->n ? c->off[c->n] : 0;
    int32_t len = 4 + c->n + 1 + nd;
    if (len > s->keybuf_cap) {
        int32_t *nb = realloc(s->keybuf, (size_t)len * 2 * sizeof *nb);
        if (!nb) return -1;
        s->keybuf = nb;
        s->keybuf_cap = len * 2;
    }
    int32_t *k = s->keybuf;
    k[0] = c->n;
    k[1] = (int32_t)s->pend_cp;
    k[2] = s->pend_need;
    k[3] = s->failed;
    for (int32_t i = 0; i <= c->n; i++) k[4 + i] = c->n ? c->off[i] : 0;
    if (nd) memcpy(k + 4 + c->n + 1, c->data, (size_t)nd * sizeof *k);
    uint64_t x = 1469598103934665603ull;
    for (int32_t i = 0; i < len; i++) x = (x ^ (uint32_t)k[i]) * 1099511628211ull;
    *h = x;
    return len;
}

RP_API rp_status rp_grammar_mask(rp_grammar_state *s, float *logits, int32_t n_vocab) {
    if (!s || !s->v || !logits) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_mask: NULL argument");
    const rp_grammar_vocab *v = s->v;
    int32_t n = n_vocab < v->n_vocab ? n_vocab : v->n_vocab;
    uint64_t h = 0;
    const int32_t klen = state_key(s, &h);
    gmemo *hit = NULL;
    for (int i = 0; klen > 0 && i < RP_GRAMMAR_MASK_CACHE && !hit; i++) {
        gmemo *e = &s->memo[i];
        if (e->used && e->h == h && e->key_len == klen && !memcmp(e->key, s->keybuf, (size_t)klen * sizeof *e->key))
            hit = e;
    }
    if (hit) {
        s->memo_hits++;
        memcpy(s->allowed, hit->bits, (size_t)v->n_vocab);
        goto apply;
    }
    s->memo_misses++;
    memset(s->allowed, 0, (size_t)v->n_vocab);
    if (!s->failed) walk(s, 0, 0, &s->cur, s->pend_cp, s->pend_need);
    if (s->failed || rp_grammar_can_end(s))   /* a failed state lets the generation end rather than mask all */
        for (int32_t t = 0; t < v->n_vocab; t++)
            if (v->eog[t]) s->allowed[t] = 1;
    if (klen > 0) {   /* remember it (the buffers are allocated once per slot, then reused) */
        gmemo *e = &s->memo[s->memo_next];
        if (!e->bits) e->bits = malloc((size_t)v->n_vocab);
        if (klen > e->key_cap) {
            int32_t *nk = realloc(e->key, (size_t)klen * 2 * sizeof *nk);
            if (nk) { e->key = nk; e->key_cap = klen * 2; }
        }
        if (e->bits && klen <= e->key_cap) {
            memcpy(e->key, s->keybuf, (size_t)klen * sizeof *e->key);
            memcpy(e->bits, s->allowed, (size_t)v->n_vocab);
            e->key_len = klen;
            e->h = h;
            e->used = true;
            s->memo_next = (s->memo_next + 1) % RP_GRAMMAR_MASK_CACHE;
        } else e->used = false;
    }
apply:
    for (int32_t t = 0; t < n; t++)
        if (!s->allowed[t]) logits[t] = -INFINITY;
    for (int32_t t = n; t < n_vocab; t++) logits[t] = -INFINITY;
    return RP_OK;
}

RP_API void rp_grammar_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_grammar_state *s = user;
    if (!s) return;
    if (s->hist_seen < 0 || s->hist_seen > n_hist) s->hist_seen = n_hist;
    for (int32_t i = s->hist_seen; i < n_hist; i++)
        if (rp_grammar_accept_token(s, hist[i]) != RP_OK) s->failed = true;
    s->hist_seen = n_hist;
    rp_grammar_mask(s, logits, n_vocab);
}
