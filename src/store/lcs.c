/* lcs.c — suffix automaton over token ids for linear-time common-substring matching; winnowed 3-gram keywords. */
#include "store/lcs.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"

/* States: len (longest string in the state), link (suffix link), firstpos
 * (end index in s of the first occurrence of the state's strings). Edges:
 * per-state singly linked lists (for cloning) plus an open-addressing table
 * (state, token) -> edge index (for lookups). Bounds: states <= 2n - 1,
 * edges <= 3n - 4 for n >= 3; sized 2n + 2 and 3n + 4. */

typedef struct sam_edge {
    int32_t from, to;
    rp_token tok;
    int32_t next;     /* next edge of the same state, -1 ends */
} sam_edge;

struct rp_sam {
    int32_t n_states, n_edges, cap_states, cap_edges;
    int32_t *len, *link, *firstpos, *head;
    sam_edge *edges;
    int32_t *table;   /* edge index + 1; 0 = empty */
    uint64_t mask;
};

static inline uint64_t sam_key(int32_t st, rp_token tok) {
    uint64_t k = ((uint64_t)(uint32_t)st << 32) | (uint32_t)tok;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static inline int32_t sam_get(const rp_sam *a, int32_t st, rp_token tok) {
    for (uint64_t i = sam_key(st, tok) & a->mask;; i = (i + 1) & a->mask) {
        int32_t e = a->table[i];
        if (e == 0) return -1;
        const sam_edge *x = &a->edges[e - 1];
        if (x->from == st && x->tok == tok) return x->to;
    }
}

/* Sets (st, tok) -> to, adding the edge if absent. */
static void sam_set(rp_sam *a, int32_t st, rp_token tok, int32_t to) {
    uint64_t i = sam_key(st, tok) & a->mask;
    for (;; i = (i + 1) & a->mask) {
        int32_t e = a->table[i];
        if (e == 0) break;
        sam_edge *x = &a->edges[e - 1];
        if (x->from == st && x->tok == tok) {
            x->to = to;
            return;
        }
    }
    int32_t ei = a->n_edges++;
    a->edges[ei] = (sam_edge){st, to, tok, a->head[st]};
    a->head[st] = ei;
    a->table[i] = ei + 1;
}

void rp_sam_free(rp_sam *a) {
    if (!a) return;
    free(a->len);
    free(a->link);
    free(a->firstpos);
    free(a->head);
    free(a->edges);
    free(a->table);
    free(a);
}

rp_status rp_sam_build(const rp_token *s, int32_t n, rp_sam **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "sam: out is NULL");
    *out = NULL;
    if (n < 0 || (n > 0 && !s) || n > (1 << 28)) return rp_errorf(RP_ERR_INVALID_ARG, "sam: bad string (n = %d)", n);
    rp_sam *a = calloc(1, sizeof *a);
    if (!a) return rp_errorf(RP_ERR_NOMEM, "sam: out of memory");
    a->cap_states = 2 * n + 2;
    a->cap_edges = 3 * n + 4;
    uint64_t tsz = 16;
    while (tsz < (uint64_t)a->cap_edges * 2) tsz <<= 1;   /* load factor <= 1/2 */
    a->mask = tsz - 1;
    a->len = malloc(sizeof(int32_t) * (size_t)a->cap_states);
    a->link = malloc(sizeof(int32_t) * (size_t)a->cap_states);
    a->firstpos = malloc(sizeof(int32_t) * (size_t)a->cap_states);
    a->head = malloc(sizeof(int32_t) * (size_t)a->cap_states);
    a->edges = malloc(sizeof(sam_edge) * (size_t)a->cap_edges);
    a->table = calloc(tsz, sizeof(int32_t));
    if (!a->len || !a->link || !a->firstpos || !a->head || !a->edges || !a->table) {
        rp_sam_free(a);
        return rp_errorf(RP_ERR_NOMEM, "sam: out of memory for %d tokens", n);
    }
    a->n_states = 1;
    a->len[0] = 0;
    a->link[0] = -1;
    a->firstpos[0] = -1;
    a->head[0] = -1;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        const rp_token c = s[i];
        int32_t cur = a->n_states++;
        a->len[cur] = a->len[last] + 1;
        a->firstpos[cur] = i;
        a->head[cur] = -1;
        a->link[cur] = 0;
        int32_t p = last;
        while (p != -1 && sam_get(a, p, c) < 0) {
            sam_set(a, p, c, cur);
            p = a->link[p];
        }
        if (p != -1) {
            int32_t q = sam_get(a, p, c);
            if (a->len[p] + 1 == a->len[q]) {
                a->link[cur] = q;
            } else {
                int32_t cl = a->n_states++;
                a->len[cl] = a->len[p] + 1;
                a->link[cl] = a->link[q];
                a->firstpos[cl] = a->firstpos[q];
                a->head[cl] = -1;
                for (int32_t e = a->head[q]; e != -1; e = a->edges[e].next) sam_set(a, cl, a->edges[e].tok, a->edges[e].to);
                while (p != -1 && sam_get(a, p, c) == q) {
                    sam_set(a, p, c, cl);
                    p = a->link[p];
                }
                a->link[q] = cl;
                a->link[cur] = cl;
            }
        }
        last = cur;
    }
    *out = a;
    return RP_OK;
}

/* The walk: after text[j], (v, l) is the state and length of the longest
 * suffix of text[0..j] occurring in s. A run ending at j is maximal when the
 * step to j + 1 does not extend it (l_{j+1} != l_j + 1) or j is last. */
int32_t rp_sam_match(const rp_sam *a, const rp_token *text, int32_t n, int32_t min_len, rp_lcs_run *out,
                     int32_t cap) {
    if (!a || !text || n <= 0) return 0;
    if (min_len < 1) min_len = 1;
    int32_t v = 0, l = 0, count = 0;
    int32_t pv = 0, pl = 0;   /* state / length after the previous token */
    for (int32_t j = 0; j <= n; j++) {
        int32_t nv = 0, nl = 0;
        if (j < n) {
            const rp_token c = text[j];
            nv = v;
            nl = l;
            while (nv > 0 && sam_get(a, nv, c) < 0) {
                nv = a->link[nv];
                nl = a->len[nv];
            }
            int32_t t = sam_get(a, nv, c);
            if (t >= 0) {
                nv = t;
                nl++;
            } else {
                nv = 0;
                nl = 0;
            }
        }
        /* the run ending at j - 1 (state pv, length pl) is maximal unless extended */
        if (j > 0 && pl >= min_len && !(j < n && nl == pl + 1)) {
            if (count < cap && out)
                out[count] = (rp_lcs_run){.text_off = j - pl, .s_off = a->firstpos[pv] - pl + 1, .len = pl};
            count++;
        }
        pv = nv;
        pl = nl;
        v = nv;
        l = nl;
    }
    return count;
}

int32_t rp_lcs_longest(const rp_sam *a, const rp_token *text, int32_t n, rp_lcs_run *best) {
    if (best) *best = (rp_lcs_run){0, 0, 0};
    if (!a || !text || n <= 0) return 0;
    int32_t v = 0, l = 0, bl = 0;
    for (int32_t j = 0; j < n; j++) {
        const rp_token c = text[j];
        while (v > 0 && sam_get(a, v, c) < 0) {
            v = a->link[v];
            l = a->len[v];
        }
        int32_t t = sam_get(a, v, c);
        if (t >= 0) {
            v = t;
            l++;
        } else {
            v = 0;
            l = 0;
        }
        if (l > bl) {
            bl = l;
            if (best) *best = (rp_lcs_run){.text_off = j - l + 1, .s_off = a->firstpos[v] - l + 1, .len = l};
        }
    }
    return bl;
}

int32_t rp_keywords(const rp_token *t, int32_t n, uint64_t salt, uint64_t *out, int32_t cap) {
    const int32_t ng = n - RP_KW_GRAM + 1;   /* number of 3-grams */
    if (!t || ng <= 0 || !out || cap <= 0) return 0;
    /* a window of W gram hashes; when fewer than W grams exist, the one window is all of them */
    const int32_t w = ng < RP_KW_WINDOW ? ng : RP_KW_WINDOW;
    int32_t count = 0, last_sel = -1;
    /* ring of the current window's hashes */
    uint64_t ring[RP_KW_WINDOW];
    for (int32_t g = 0; g < ng; g++) {
        rp_token gram[RP_KW_GRAM];
        memcpy(gram, t + g, sizeof gram);
        ring[g % RP_KW_WINDOW] = XXH3_64bits_withSeed(gram, sizeof gram, salt);
        if (g + 1 < w) continue;
        /* window [g - w + 1, g]: the minimum, rightmost on ties (O(w) per step; w = 16) */
        int32_t best = g;
        for (int32_t k = g - w + 1; k <= g; k++)
            if (ring[k % RP_KW_WINDOW] <= ring[best % RP_KW_WINDOW]) best = k;
        if (best != last_sel) {
            if (count < cap) out[count++] = ring[best % RP_KW_WINDOW];
            last_sel = best;
        }
    }
    return count;
}
