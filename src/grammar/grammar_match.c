/* grammar_match.c — the incremental GBNF matcher: a sequence's state is a set of stacks of grammar positions
 * (llama.cpp's design) plus a partial UTF-8 code point. Masking walks a trie of the vocabulary's token strings
 * built once per model (rp_grammar_vocab): a subtree is pruned at the first byte no stack accepts, so the cost
 * follows the viable prefixes, not the vocabulary's size x token length. A mask is built once per distinct state
 * (canonical: its stacks sorted) and grammar (by content), then served from the vocabulary's shared cache
 * (grammar_cache.c) to every sequence that reaches that state again; rp_grammar_allows checks one token by its
 * bytes alone (the greedy fast path and speculative drafts). Buffers grow to their high-water mark and are
 * reused: no allocation per token once warm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "core/error.h"
#include "grammar/grammar_cache.h"
#include "grammar/grammar_internal.h"

#define RP_GRAMMAR_CACHE_DEFAULT_MB 64

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
    int32_t words;       /* uint64_t words of a mask */
    rp_gcache *cache;    /* masks shared by every state on this vocabulary */
};

typedef struct glevel {
    gset set;
} glevel;

struct rp_grammar_state {
    const rp_grammar *g;
    const rp_grammar_vocab *v;
    gset cur, tmp;
    gset spare[3];       /* rp_grammar_allows / rp_grammar_accepts_prefix: the state's copy as it advances */
    uint32_t pend_cp;
    int pend_need;
    int32_t *scratch;    /* [RP_GRAMMAR_MAX_DEPTH + 2] */
    uint64_t *bits;      /* [v->words] the allowed tokens of the last mask */
    glevel *levels;      /* [max_len + 1] */
    int32_t n_levels;
    int32_t hist_seen;   /* the on_logits hook: tokens of hist already accepted (-1: not started) */
    int32_t *keybuf;     /* the current state serialised (canonical) */
    int32_t keybuf_cap;
    int32_t *ord;        /* stack order of the key */
    int32_t ord_cap;
    struct gdfa *dfa;    /* the walk's transition memo (allocated at the first walk with the cache on) */
    bool dfa_on;         /* this walk uses it */
    bool failed;
};

/* the walk's transition memo (see walk()) */
#define RP_GDFA_SETS 1024
#define RP_GDFA_UNKNOWN ((int16_t)-1)
#define RP_GDFA_REJECT ((int16_t)-2)

struct gdfa {
    gset sets[RP_GDFA_SETS];
    uint64_t h[RP_GDFA_SETS];
    int32_t n;
    int16_t slot[2 * RP_GDFA_SETS];       /* open addressing: set id or -1 */
    int16_t trans[RP_GDFA_SETS * 128];   /* [id * 128 + byte] */
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
        if (s->off[i + 1] - s->off[i] == len && (len == 0 || memcmp(s->data + s->off[i], stk, (size_t)len * sizeof *stk) == 0))
            return;
    if (s->n >= RP_GRAMMAR_MAX_STACKS || !gset_reserve(s, len)) return;
    if (s->n == 0) s->off[0] = 0;
    if (len > 0) memcpy(s->data + s->off[s->n], stk, (size_t)len * sizeof *stk);   /* an empty stack: no data */
    s->off[s->n + 1] = s->off[s->n] + len;
    s->n++;
}

/* dst = src (dst's buffers grown as needed); false when out of memory. */
static bool gset_copy(gset *dst, const gset *src) {
    const int32_t nd = src->n ? src->off[src->n] : 0;
    if (dst->cap_off < src->n + 2) {
        int32_t *no = realloc(dst->off, (size_t)(src->n + 2) * sizeof *no);
        if (!no) return false;
        dst->off = no;
        dst->cap_off = src->n + 2;
    }
    if (dst->cap_data < nd) {
        int32_t *ndp = realloc(dst->data, (size_t)nd * sizeof *ndp);
        if (!ndp) return false;
        dst->data = ndp;
        dst->cap_data = nd;
    }
    dst->off[0] = 0;
    if (src->n) memcpy(dst->off, src->off, (size_t)(src->n + 1) * sizeof *src->off);
    if (nd) memcpy(dst->data, src->data, (size_t)nd * sizeof *src->data);
    dst->n = src->n;
    return true;
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
    rp_gcache_free(v->cache);
    free(v);
}

/* The cache budget at creation: RP_GRAMMAR_CACHE_MB (0 turns it off), else the default. */
static size_t default_cache_bytes(void) {
    const char *e = getenv("RP_GRAMMAR_CACHE_MB");
    if (e && *e) {
        char *end = NULL;
        long mb = strtol(e, &end, 10);
        if (end && *end == 0 && mb >= 0 && mb <= (1L << 20)) return (size_t)mb << 20;
    }
    return (size_t)RP_GRAMMAR_CACHE_DEFAULT_MB << 20;
}

RP_API void rp_grammar_vocab_set_cache_bytes(rp_grammar_vocab *v, size_t bytes) {
    if (v && v->cache) rp_gcache_set_cap(v->cache, bytes);
}

RP_API void rp_grammar_vocab_stats(const rp_grammar_vocab *v, rp_grammar_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!v || !v->cache) return;
    rp_gcache_stats cs;
    rp_gcache_stats_get(v->cache, &cs);
    out->masks_built = cs.misses;
    out->cache_hits = cs.hits;
    out->checks = cs.checks;
    out->checks_rejected = cs.rejected;
    out->cache_entries = cs.entries;
    out->cache_bytes = cs.bytes;
    out->cache_cap_bytes = cs.cap_bytes;
    out->evictions = cs.evictions;
    out->build_ms = cs.build_ms;
    out->busy_ms = (double)cs.busy_ns * 1e-6;
}

RP_API void rp_grammar_vocab_stats_reset(rp_grammar_vocab *v) {
    if (v && v->cache) rp_gcache_stats_reset(v->cache);
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
    v->words = (n + 63) / 64;
    v->cache = rp_gcache_new(v->words, default_cache_bytes());
    if (!v->cache) goto nomem;
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
    for (int i = 0; i < 3; i++) gset_free(&s->spare[i]);
    for (int32_t i = 0; i < s->n_levels; i++) gset_free(&s->levels[i].set);
    free(s->levels);
    free(s->keybuf);
    free(s->ord);
    if (s->dfa)
        for (int i = 0; i < RP_GDFA_SETS; i++) gset_free(&s->dfa->sets[i]);
    free(s->dfa);
    free(s->scratch);
    free(s->bits);
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
        s->bits = malloc((size_t)v->words * sizeof *s->bits);
        s->n_levels = v->max_len + 1;
        s->levels = calloc((size_t)s->n_levels, sizeof *s->levels);
    }
    if (!s->scratch || (v && (!s->bits || !s->levels))) {
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

/* ---- the walk's transition memo ----
 * The walk steps the same set by the same byte over and over: inside a JSON string every ordinary character
 * leads back to the very same set, at each of the trie's ~10^5 nodes. The memo interns the sets the walk meets
 * (content and order, exactly) and remembers, per set and ASCII byte, the set it leads to (or that it is
 * rejected), so a node costs a table look-up instead of a step over every stack. Sets are held in a fixed
 * number of slots (stable addresses during a walk); when they run out the memo is cleared before the next walk.
 * It belongs to one state (no locking), and is used only when the vocabulary caches masks: with the cache off
 * the walk is the plain reference. */
static uint64_t set_hash(const gset *x) {
    if (x->n == 0) return 0x51ED27ull;
    const uint64_t ho = XXH3_64bits(x->off, (size_t)(x->n + 1) * sizeof *x->off);
    return XXH3_64bits_withSeed(x->data, (size_t)x->off[x->n] * sizeof *x->data, ho);
}

static bool set_equal(const gset *a, const gset *b) {
    if (a->n != b->n) return false;
    if (a->n == 0) return true;
    const size_t nd = (size_t)a->off[a->n] * sizeof *a->data;   /* 0: no data (the pointers may be NULL) */
    return !memcmp(a->off, b->off, (size_t)(a->n + 1) * sizeof *a->off) && (nd == 0 || !memcmp(a->data, b->data, nd));
}

static void gdfa_clear(struct gdfa *d) {
    d->n = 0;
    memset(d->slot, 0xff, sizeof d->slot);
}

/* The id of a set equal to x (interned now if new); -1 when the slots are full or memory ran out. */
static int32_t gdfa_intern(struct gdfa *d, const gset *x) {
    const uint64_t h = set_hash(x);
    uint32_t i = (uint32_t)h & (2 * RP_GDFA_SETS - 1);
    for (; d->slot[i] >= 0; i = (i + 1) & (2 * RP_GDFA_SETS - 1))
        if (d->h[d->slot[i]] == h && set_equal(&d->sets[d->slot[i]], x)) return d->slot[i];
    if (d->n >= RP_GDFA_SETS) return -1;
    if (!gset_copy(&d->sets[d->n], x)) return -1;
    d->h[d->n] = h;
    memset(d->trans + (size_t)d->n * 128, 0xff, 128 * sizeof *d->trans);
    d->slot[i] = (int16_t)d->n;
    return d->n++;
}

/* Marks the tokens of node `ni`'s subtree (whose prefix left the set `in` with `cp`/`need` pending) that the
 * grammar allows. id: in's id in the transition memo (in is then the memo's copy), or -1. */
static void walk(rp_grammar_state *s, int32_t ni, int32_t depth, const gset *in, int32_t id, uint32_t cp, int need) {
    const rp_grammar_vocab *v = s->v;
    struct gdfa *d = s->dfa_on ? s->dfa : NULL;
    const tnode *nd = &v->nodes[ni];
    if (nd->tok_n > 0 && (need == 0 ? in->n > 0 : true))
        for (int32_t k = 0; k < nd->tok_n; k++) {
            const int32_t t = v->order[nd->tok_first + k];
            s->bits[t >> 6] |= 1ull << (t & 63);
        }
    for (int32_t c = ni + 1; c < nd->end; c = v->nodes[c].end) {
        const uint8_t b = v->nodes[c].byte;
        uint32_t cp2 = cp;
        int need2 = need;
        const gset *res;
        if (id >= 0 && need == 0 && b < 0x80) {   /* a whole code point from an interned set: memoised */
            int16_t t = d->trans[id * 128 + b];
            if (t == RP_GDFA_UNKNOWN) {
                if (!step_byte(s->g, in, &cp2, &need2, b, &s->levels[depth].set, s->scratch, &res)) {
                    d->trans[id * 128 + b] = RP_GDFA_REJECT;
                    continue;
                }
                const int32_t nid = gdfa_intern(d, res);
                if (nid < 0) { walk(s, c, depth + 1, res, -1, 0, 0); continue; }
                d->trans[id * 128 + b] = t = (int16_t)nid;
            }
            if (t == RP_GDFA_REJECT) continue;
            walk(s, c, depth + 1, &d->sets[t], t, 0, 0);
            continue;
        }
        if (!step_byte(s->g, in, &cp2, &need2, b, &s->levels[depth].set, s->scratch, &res)) continue;
        int32_t nid = -1;
        if (d && need2 == 0 && res != in) nid = gdfa_intern(d, res);   /* a multi-byte code point completed */
        walk(s, c, depth + 1, nid >= 0 ? &d->sets[nid] : res, nid, cp2, need2);
    }
}

/* The walk from the state's position, with the transition memo when the vocabulary caches masks. */
static void walk_state(rp_grammar_state *s) {
    rp_gcache_stats cs;
    rp_gcache_stats_get(s->v->cache, &cs);
    s->dfa_on = false;
    if (cs.cap_bytes == 0) {   /* the reference: no memo */
        walk(s, 0, 0, &s->cur, -1, s->pend_cp, s->pend_need);
        return;
    }
    if (!s->dfa) {
        s->dfa = calloc(1, sizeof *s->dfa);
        if (s->dfa) gdfa_clear(s->dfa);
    }
    if (s->dfa && s->dfa->n > RP_GDFA_SETS - 64) gdfa_clear(s->dfa);   /* nearly full: start afresh */
    s->dfa_on = s->dfa != NULL;
    const int32_t id = s->dfa && s->pend_need == 0 ? gdfa_intern(s->dfa, &s->cur) : -1;
    walk(s, 0, 0, id >= 0 ? &s->dfa->sets[id] : &s->cur, id, s->pend_cp, s->pend_need);
}

/* Whether stack a sorts before stack b (length, then entries). */
static bool stack_before(const gset *c, int32_t a, int32_t b) {
    const int32_t la = c->off[a + 1] - c->off[a], lb = c->off[b + 1] - c->off[b];
    if (la != lb) return la < lb;
    const int32_t *x = c->data + c->off[a], *y = c->data + c->off[b];
    for (int32_t i = 0; i < la; i++)
        if (x[i] != y[i]) return x[i] < y[i];
    return false;
}

#define RP_GRAMMAR_KEY_SORT_MAX 256   /* larger sets keep their order (a valid key, only fewer hits) */

/* Serialises the state into s->keybuf: the grammar's fingerprint, the pending code point, then the stacks in a
 * canonical order (the same set reached by different paths gives the same key). Returns its length (-1: out
 * of memory) and its hash in *h. */
static int32_t state_key(rp_grammar_state *s, uint64_t *h) {
    const gset *c = &s->cur;
    const int32_t nd = c->n ? c->off[c->n] : 0;
    const int32_t len = 8 + c->n + nd;
    if (len > s->keybuf_cap) {
        int32_t *nb = realloc(s->keybuf, (size_t)len * 2 * sizeof *nb);
        if (!nb) return -1;
        s->keybuf = nb;
        s->keybuf_cap = len * 2;
    }
    if (c->n > s->ord_cap) {
        int32_t *no = realloc(s->ord, (size_t)c->n * 2 * sizeof *no);
        if (!no) return -1;
        s->ord = no;
        s->ord_cap = c->n * 2;
    }
    for (int32_t i = 0; i < c->n; i++) s->ord[i] = i;
    if (c->n <= RP_GRAMMAR_KEY_SORT_MAX)
        for (int32_t i = 1; i < c->n; i++) {   /* insertion sort: sets are small */
            const int32_t x = s->ord[i];
            int32_t j = i;
            while (j > 0 && stack_before(c, x, s->ord[j - 1])) { s->ord[j] = s->ord[j - 1]; j--; }
            s->ord[j] = x;
        }
    int32_t *k = s->keybuf;
    for (int i = 0; i < 4; i++) k[i] = (int32_t)s->g->fp[i];
    k[4] = c->n;
    k[5] = (int32_t)s->pend_cp;
    k[6] = s->pend_need;
    k[7] = s->failed;
    int32_t at = 8;
    for (int32_t i = 0; i < c->n; i++) {
        const int32_t st = s->ord[i], sl = c->off[st + 1] - c->off[st];
        k[at++] = sl;
        memcpy(k + at, c->data + c->off[st], (size_t)sl * sizeof *k);
        at += sl;
    }
    *h = XXH3_64bits(k, (size_t)at * sizeof *k);
    return at;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + 1e-6 * (double)t.tv_nsec;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* s->bits = the tokens the grammar allows now: from the shared cache, else a trie walk (then cached). */
static void build_bits(rp_grammar_state *s) {
    const rp_grammar_vocab *v = s->v;
    uint64_t h = 0;
    const int32_t klen = state_key(s, &h);
    if (klen > 0 && rp_gcache_get(v->cache, h, s->keybuf, klen, s->bits)) return;
    const double t0 = now_ms();
    memset(s->bits, 0, (size_t)v->words * sizeof *s->bits);
    if (!s->failed) walk_state(s);
    if (s->failed || rp_grammar_can_end(s))   /* a failed state lets the generation end rather than mask all */
        for (int32_t t = 0; t < v->n_vocab; t++)
            if (v->eog[t]) s->bits[t >> 6] |= 1ull << (t & 63);
    rp_gcache_note_build(v->cache, now_ms() - t0);
    if (klen > 0) rp_gcache_put(v->cache, h, s->keybuf, klen, s->bits);
}

RP_API rp_status rp_grammar_mask(rp_grammar_state *s, float *logits, int32_t n_vocab) {
    if (!s || !s->v || !logits) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_mask: NULL argument");
    const rp_grammar_vocab *v = s->v;
    const int32_t n = n_vocab < v->n_vocab ? n_vocab : v->n_vocab;
    const uint64_t t0 = now_ns();
    build_bits(s);
    for (int32_t w = 0; w * 64 < n; w++) {
        const uint64_t b = s->bits[w];
        if (b == ~0ull) continue;
        const int32_t end = w * 64 + 64 < n ? w * 64 + 64 : n;
        for (int32_t t = w * 64; t < end; t++)
            if (!((b >> (t & 63)) & 1)) logits[t] = -INFINITY;
    }
    for (int32_t t = n; t < n_vocab; t++) logits[t] = -INFINITY;
    rp_gcache_note_time(v->cache, now_ns() - t0);
    return RP_OK;
}

RP_API void rp_grammar_follow(rp_grammar_state *s, const rp_token *hist, int32_t n_hist) {
    if (!s) return;
    const uint64_t t0 = s->v ? now_ns() : 0;
    if (s->hist_seen < 0 || s->hist_seen > n_hist) s->hist_seen = n_hist;
    for (int32_t i = s->hist_seen; i < n_hist; i++)
        if (rp_grammar_accept_token(s, hist[i]) != RP_OK) s->failed = true;
    s->hist_seen = n_hist;
    if (s->v) rp_gcache_note_time(s->v->cache, now_ns() - t0);
}

RP_API void rp_grammar_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    rp_grammar_state *s = user;
    if (!s) return;
    rp_grammar_follow(s, hist, n_hist);
    rp_grammar_mask(s, logits, n_vocab);
}

/* Runs bytes b[0..n) from (*in, *cp, *need) through the spare sets (any but *in, which may itself be a spare);
 * on success *in is the resulting set. State s is not changed. */
static bool run_bytes(rp_grammar_state *s, const gset **in, uint32_t *cp, int *need, const char *b, int32_t n) {
    const gset *cur = *in;
    for (int32_t i = 0; i < n; i++) {
        gset *dst = &s->spare[0];
        if (dst == cur) dst = &s->spare[1];
        const gset *res;
        if (!step_byte(s->g, cur, cp, need, (uint8_t)b[i], dst, s->scratch, &res)) return false;
        cur = res;
    }
    *in = cur;
    return true;
}

/* Whether token t continues the set (in, cp, need), as the mask would say (end-of-generation tokens: where it
 * can end). On success *in / *cp / *need are the state after it (*in a spare set, or unchanged). */
static bool token_ok(rp_grammar_state *s, const gset **in, uint32_t *cp, int *need, rp_token t) {
    const rp_grammar_vocab *v = s->v;
    if (t < 0 || t >= v->n_vocab) return false;
    if (v->eog[t] && *need == 0 && set_can_end(*in)) return true;
    const int32_t len = v->str_off[t + 1] - v->str_off[t];
    if (len == 0) return false;
    return run_bytes(s, in, cp, need, v->blob + v->str_off[t], len);
}

RP_API bool rp_grammar_allows(rp_grammar_state *s, rp_token t) {
    if (!s || !s->v) return false;
    if (t < 0 || t >= s->v->n_vocab) return false;
    const uint64_t t0 = now_ns();
    bool ok;
    if (s->failed) {
        ok = s->v->eog[t] != 0;
    } else {
        const gset *in = &s->cur;
        uint32_t cp = s->pend_cp;
        int need = s->pend_need;
        ok = token_ok(s, &in, &cp, &need, t);
    }
    rp_gcache_note_check(s->v->cache, !ok);
    rp_gcache_note_time(s->v->cache, now_ns() - t0);
    return ok;
}

static int32_t accepts_prefix(rp_grammar_state *s, const rp_token *toks, int32_t n);

RP_API int32_t rp_grammar_accepts_prefix(rp_grammar_state *s, const rp_token *toks, int32_t n) {
    if (!s || !s->v || s->failed || (!toks && n > 0)) return 0;
    const uint64_t t0 = now_ns();
    const int32_t k = accepts_prefix(s, toks, n);
    rp_gcache_note_time(s->v->cache, now_ns() - t0);
    return k;
}

static int32_t accepts_prefix(rp_grammar_state *s, const rp_token *toks, int32_t n) {
    const gset *in = &s->cur;
    uint32_t cp = s->pend_cp;
    int need = s->pend_need;
    for (int32_t i = 0; i < n; i++) {
        const rp_token t = toks[i];
        if (t >= 0 && t < s->v->n_vocab && s->v->eog[t]) {   /* accept_token's rule: only where it can end */
            const bool end = need == 0 && set_can_end(in);
            rp_gcache_note_check(s->v->cache, !end);
            return end ? i + 1 : i;
        }
        /* the third spare keeps the set between tokens: run_bytes writes only to the two others */
        const gset *before = in;
        bool ok = token_ok(s, &in, &cp, &need, t);
        rp_gcache_note_check(s->v->cache, !ok);
        if (!ok) return i;
        if (in != before && in != &s->cur) {   /* park the result in spare[2] */
            gset tmp = s->spare[2];
            s->spare[2] = *(gset *)in;
            *(gset *)in = tmp;
            in = &s->spare[2];
        }
    }
    return n;
}
