/* siblings.c — per-parent sorted child arrays (binary search for the longest common token prefix). */
#include "reuse/siblings.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct group {
    uint64_t parent;
    int32_t n, cap;
    rp_chunk **v;              /* sorted by tokens */
} group;

struct rp_siblings {
    group **slot;              /* open addressing by parent id, linear probing; NULL = empty */
    size_t n_slot;             /* a power of two */
    size_t n_group;
};

static size_t slot_of(uint64_t parent, size_t n_slot) {
    uint64_t z = parent + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(z ^ (z >> 31)) & (n_slot - 1);
}

rp_status rp_siblings_create(rp_siblings **out) {
    *out = NULL;
    rp_siblings *s = calloc(1, sizeof *s);
    if (s) s->n_slot = 64;
    if (s) s->slot = calloc(s->n_slot, sizeof *s->slot);
    if (!s || !s->slot) {
        free(s);
        return rp_errorf(RP_ERR_NOMEM, "siblings: out of memory");
    }
    *out = s;
    return RP_OK;
}

void rp_siblings_free(rp_siblings *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_slot; i++)
        if (s->slot[i]) {
            free(s->slot[i]->v);
            free(s->slot[i]);
        }
    free(s->slot);
    free(s);
}

static size_t find_slot(const rp_siblings *s, uint64_t parent) {
    size_t i = slot_of(parent, s->n_slot);
    while (s->slot[i] && s->slot[i]->parent != parent) i = (i + 1) & (s->n_slot - 1);
    return i;
}

static group *find_group(const rp_siblings *s, uint64_t parent) { return s->slot[find_slot(s, parent)]; }

static bool grow_slots(rp_siblings *s) {
    size_t n = s->n_slot * 2;
    group **ns = calloc(n, sizeof *ns);
    if (!ns) return false;
    for (size_t i = 0; i < s->n_slot; i++) {
        group *g = s->slot[i];
        if (!g) continue;
        size_t j = slot_of(g->parent, n);
        while (ns[j]) j = (j + 1) & (n - 1);
        ns[j] = g;
    }
    free(s->slot);
    s->slot = ns;
    s->n_slot = n;
    return true;
}

/* Empties slot i and shifts the following run back (no tombstones). */
static void remove_slot(rp_siblings *s, size_t i) {
    const size_t mask = s->n_slot - 1;
    s->slot[i] = NULL;
    for (size_t j = (i + 1) & mask; s->slot[j]; j = (j + 1) & mask) {
        const size_t home = slot_of(s->slot[j]->parent, s->n_slot);
        /* j's entry may move to the hole when the hole lies cyclically in [home, j) */
        const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            s->slot[i] = s->slot[j];
            s->slot[j] = NULL;
            i = j;
        }
    }
    s->n_group--;
}

/* Lexicographic order of token sequences (ids compared as unsigned). */
static int cmp_tokens(const rp_token *a, int32_t na, const rp_token *b, int32_t nb) {
    const int32_t m = na < nb ? na : nb;
    for (int32_t i = 0; i < m; i++)
        if (a[i] != b[i]) return (uint32_t)a[i] < (uint32_t)b[i] ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

static int32_t common_prefix(const rp_chunk *ch, const rp_token *t, int32_t n) {
    const int32_t m = ch->n_tokens < n ? ch->n_tokens : n;
    int32_t k = 0;
    while (k < m && ch->tokens[k] == t[k]) k++;
    return k;
}

/* First index whose sequence is >= t[0..n). */
static int32_t lower_bound(const group *g, const rp_token *t, int32_t n) {
    int32_t lo = 0, hi = g->n;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (cmp_tokens(g->v[mid]->tokens, g->v[mid]->n_tokens, t, n) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

rp_status rp_siblings_add(rp_siblings *s, rp_chunk *ch) {
    if (!ch || ch->n_tokens <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "siblings: empty chunk");
    size_t i = find_slot(s, ch->parent_id);
    group *g = s->slot[i];
    if (!g) {
        if ((s->n_group + 1) * 2 > s->n_slot) {
            if (!grow_slots(s)) return rp_errorf(RP_ERR_NOMEM, "siblings: out of memory");
            i = find_slot(s, ch->parent_id);
        }
        g = calloc(1, sizeof *g);
        if (!g) return rp_errorf(RP_ERR_NOMEM, "siblings: out of memory");
        g->parent = ch->parent_id;
        s->slot[i] = g;
        s->n_group++;
    }
    if (g->n == g->cap) {
        const int32_t cap = g->cap ? 2 * g->cap : 4;
        rp_chunk **v = realloc(g->v, sizeof *v * (size_t)cap);
        if (!v) {
            if (g->n == 0) {
                free(g);
                remove_slot(s, i);
            }
            return rp_errorf(RP_ERR_NOMEM, "siblings: out of memory");
        }
        g->v = v;
        g->cap = cap;
    }
    const int32_t at = lower_bound(g, ch->tokens, ch->n_tokens);
    memmove(g->v + at + 1, g->v + at, sizeof *g->v * (size_t)(g->n - at));
    g->v[at] = ch;
    g->n++;
    return RP_OK;
}

void rp_siblings_del(rp_siblings *s, const rp_chunk *ch) {
    if (!ch) return;
    const size_t i = find_slot(s, ch->parent_id);
    group *g = s->slot[i];
    if (!g) return;
    /* equal sequences are adjacent: search that run for the pointer */
    int32_t at = lower_bound(g, ch->tokens, ch->n_tokens);
    while (at < g->n && g->v[at] != ch && cmp_tokens(g->v[at]->tokens, g->v[at]->n_tokens, ch->tokens, ch->n_tokens) == 0)
        at++;
    if (at >= g->n || g->v[at] != ch) return;
    memmove(g->v + at, g->v + at + 1, sizeof *g->v * (size_t)(g->n - at - 1));
    if (--g->n == 0) {
        free(g->v);
        free(g);
        remove_slot(s, i);
    }
}

rp_chunk *rp_siblings_best(const rp_siblings *s, uint64_t parent_id, const rp_token *toks, int32_t n, int32_t tie_scan,
                           int32_t *n_common) {
    *n_common = 0;
    const group *g = find_group(s, parent_id);
    if (!g || !toks || n <= 0) return NULL;
    const int32_t pos = lower_bound(g, toks, n);
    const int32_t kl = pos > 0 ? common_prefix(g->v[pos - 1], toks, n) : 0;
    const int32_t kr = pos < g->n ? common_prefix(g->v[pos], toks, n) : 0;
    const int32_t k = kl > kr ? kl : kr;
    if (k == 0) return NULL;
    /* every child sharing k tokens is in one run around pos: the most recently used of its nearest ones */
    rp_chunk *best = NULL;
    for (int32_t i = pos - 1, steps = 0; i >= 0 && steps <= tie_scan; i--, steps++) {
        if (common_prefix(g->v[i], toks, n) < k) break;
        if (!best || g->v[i]->last_used > best->last_used) best = g->v[i];
    }
    for (int32_t i = pos, steps = 0; i < g->n && steps <= tie_scan; i++, steps++) {
        if (common_prefix(g->v[i], toks, n) < k) break;
        if (!best || g->v[i]->last_used > best->last_used) best = g->v[i];
    }
    *n_common = k;
    return best;
}

int32_t rp_siblings_count(const rp_siblings *s, uint64_t parent_id) {
    const group *g = find_group(s, parent_id);
    return g ? g->n : 0;
}
