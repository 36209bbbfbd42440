/* spm.c — SentencePiece-style tokenization: score-ordered bigram merging with byte fallback. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* One symbol of the linked list being merged: a byte span of the escaped text. */
typedef struct spm_sym {
    int32_t prev, next;   /* neighbours, -1 at the ends */
    uint32_t start, n;    /* span; n == 0 once merged into its left neighbour */
} spm_sym;

/* A candidate merge of two adjacent symbols whose concatenation is a token. */
typedef struct spm_bigram {
    int32_t left, right;
    float score;
    uint32_t size;        /* byte length when queued; a mismatch later means stale */
} spm_bigram;

typedef struct spm_heap {
    spm_bigram *v;
    size_t n, cap;
} spm_heap;

/* Heap order: higher score first; equal scores -> leftmost first (as
 * SentencePiece / llama.cpp do, so results match them exactly). */
static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static rp_status spm_heap_push(spm_heap *h, spm_bigram b) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        spm_bigram *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) return rp_errorf(RP_ERR_NOMEM, "tokenizer: spm queue of %zu entries", nc);
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!spm_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return RP_OK;
}

static spm_bigram spm_heap_pop(spm_heap *h) {
    spm_bigram top = h->v[0];
    spm_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && spm_before(&h->v[c + 1], &h->v[c])) c++;
        if (!spm_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

/* Queues the merge of symbols left and right if their concatenation is a token. */
static rp_status spm_try_bigram(const rp_tokenizer *t, const char *esc, const spm_sym *syms,
                                int32_t left, int32_t right, spm_heap *h) {
    if (left < 0 || right < 0) return RP_OK;
    uint32_t size = syms[left].n + syms[right].n;
    int32_t id = rp_tok_lookup(t, esc + syms[left].start, size);
    if (id < 0) return RP_OK;
    spm_bigram b = {left, right, t->scores[id], size};
    return spm_heap_push(h, b);
}

/* Emits the token of a final symbol, or its bytes as <0xXX> tokens when the
 * symbol (necessarily a single unmerged character) is not in the vocab. */
static void spm_emit(const rp_tokenizer *t, const char *s, uint32_t n, rp_tok_out *out) {
    int32_t id = rp_tok_lookup(t, s, n);
    if (id >= 0) {
        rp_tok_out_push(out, id);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t b = t->byte_tok[(unsigned char)s[i]];
        if (b < 0) b = t->unk;
        if (b >= 0) rp_tok_out_push(out, b);
    }
}

rp_status rp_spm_encode(const rp_tokenizer *t, const char *text, size_t len, bool dummy_prefix,
                        rp_tok_out *out) {
    if (len == 0) return RP_OK;   /* SentencePiece: "" stays empty, no lone prefix */
    if (len >= UINT32_MAX / 3 - 1)
        return rp_errorf(RP_ERR_RANGE, "tokenizer: spm fragment of %zu bytes is too long", len);

    /* Escape spaces as U+2581 (3 bytes), so the buffer needs at most 3x (+3
     * for the dummy prefix); one symbol per byte at most. */
    char *esc = malloc(len * 3 + 3);
    spm_sym *syms = malloc((len + 3) * sizeof *syms);
    spm_heap heap = {0};
    rp_status st = RP_OK;
    if (!esc || !syms) {
        st = rp_errorf(RP_ERR_NOMEM, "tokenizer: spm buffers for %zu bytes", len);
        goto done;
    }
    size_t m = 0;
    if (dummy_prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            esc[m++] = text[i];
        }
    }

    /* Split into UTF-8 characters. Invalid input is split into its maximal
     * ill-formed subparts (so a stray lead byte cannot swallow the following
     * U+2581 or ASCII, which would break the byte-exact round trip); for
     * valid text this is the same split as llama.cpp's. */
    int32_t ns = 0;
    for (size_t off = 0; off < m;) {
        size_t cl;
        (void)rp_utf8_check((const unsigned char *)esc + off, m - off, &cl);
        syms[ns].start = (uint32_t)off;
        syms[ns].n = (uint32_t)cl;
        syms[ns].prev = ns - 1;
        off += cl;
        syms[ns].next = off == m ? -1 : ns + 1;
        ns++;
    }

    for (int32_t i = 1; i < ns; i++) {
        st = spm_try_bigram(t, esc, syms, i - 1, i, &heap);
        if (st != RP_OK) goto done;
    }

    while (heap.n > 0) {
        spm_bigram b = spm_heap_pop(&heap);
        spm_sym *l = &syms[b.left], *r = &syms[b.right];
        /* Stale entry: one side was merged away or grew since it was queued. */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        st = spm_try_bigram(t, esc, syms, l->prev, b.left, &heap);
        if (st == RP_OK) st = spm_try_bigram(t, esc, syms, b.left, l->next, &heap);
        if (st != RP_OK) goto done;
    }

    for (int32_t i = 0; i != -1; i = syms[i].next) spm_emit(t, esc + syms[i].start, syms[i].n, out);

done:
    free(heap.v);
    free(syms);
    free(esc);
    return st;
}
