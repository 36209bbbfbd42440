/* bpe.c — byte-level BPE (GPT-2 style): byte<->unicode mapping, merge ranks, rank-ordered merging. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* ---- GPT-2 bytes_to_unicode ----
 * Printable Latin-1 bytes stand for themselves; the other 68 bytes
 * (0x00-0x20, 0x7F-0xA0, 0xAD) are assigned U+0100.. in byte order, so every
 * byte has a visible character. Closed forms of that table: */
uint32_t rp_bpe_byte_to_cp(uint8_t b) {
    if (b <= 0x20) return 256u + b;                      /* 33 bytes -> U+0100..U+0120 */
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);   /* 34 bytes -> U+0121..U+0142 */
    if (b == 0xAD) return 256u + 67u;                    /* U+0143 */
    return b;
}

int rp_bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256) return rp_bpe_byte_to_cp((uint8_t)cp) == cp ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* ---- merge map ---- */

static uint64_t pair_hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return key;
}

static const rp_tok_pair_slot *pair_find(const rp_tok_pairmap *m, int32_t left, int32_t right) {
    if (!m->slots) return NULL;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = pair_hash(key) & m->mask;; i = (i + 1) & m->mask) {
        const rp_tok_pair_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
    }
}

rp_status rp_bpe_load_merges(rp_tokenizer *t, const rp_gguf *g) {
    rp_gguf_vtype et;
    uint64_t n;
    int64_t kv;
    rp_status st = rp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &kv);
    if (st == RP_ERR_NOT_FOUND)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: BPE vocab without tokenizer.ggml.merges");
    if (st != RP_OK) return st;
    if (et != RP_GGUF_STRING)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges is an array of %s, not strings",
                         rp_gguf_vtype_name(et));
    if (n > (uint64_t)INT32_MAX)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: %llu merges is too many", (unsigned long long)n);

    uint64_t cap = 16;
    while (cap < n * 2) cap *= 2;
    t->merges.slots = malloc(cap * sizeof *t->merges.slots);
    if (!t->merges.slots) return rp_errorf(RP_ERR_NOMEM, "tokenizer: merge table of %llu slots", (unsigned long long)cap);
    memset(t->merges.slots, 0xff, cap * sizeof *t->merges.slots);   /* key = UINT64_MAX: empty */
    t->merges.mask = cap - 1;
    t->merges.count = 0;

    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        rp_str s = rp_gguf_kv_arr_str(g, (uint64_t)kv, i);
        /* "left right": split at the first space after position 0 (a merge
         * side is never empty; byte-level tokens never contain ' '). */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;   /* malformed entry: it can never apply */
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t l = rp_tok_lookup(t, s.ptr, ll);
        int32_t r = rp_tok_lookup(t, sp + 1, rl);
        if (l < 0 || r < 0) continue;
        if (ll + rl > buf_cap) {
            size_t nc = (ll + rl) * 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                return rp_errorf(RP_ERR_NOMEM, "tokenizer: merge scratch of %zu bytes", nc);
            }
            buf = nb;
            buf_cap = nc;
        }
        memcpy(buf, s.ptr, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t merged = rp_tok_lookup(t, buf, ll + rl);
        /* A merge whose result is not a token could only yield a symbol that
         * falls back to bytes; such merges do not occur in real vocabs, skip. */
        if (merged < 0) continue;

        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        for (uint64_t j = pair_hash(key) & t->merges.mask;; j = (j + 1) & t->merges.mask) {
            rp_tok_pair_slot *slot = &t->merges.slots[j];
            if (slot->key == key) break;   /* duplicate: the earlier (better) rank stays */
            if (slot->key == UINT64_MAX) {
                slot->key = key;
                slot->rank = (int32_t)i;
                slot->merged = merged;
                t->merges.count++;
                break;
            }
        }
    }
    free(buf);
    return RP_OK;
}

/* ---- encoding ---- */

typedef struct bpe_bigram {
    int32_t left, right;
    int32_t rank;
    int32_t left_id, right_id;   /* ids when queued; a change means the entry is stale */
    int32_t merged;
} bpe_bigram;

/* Per-call scratch, grown as needed and reused across pre-tokens. */
typedef struct bpe_ctx {
    const rp_tokenizer *t;
    rp_tok_out *out;
    int32_t *ids;          /* symbol token ids */
    int32_t *prev, *next;  /* linked list; ids[i] = -2 once merged away */
    size_t sym_cap;
    bpe_bigram *heap;
    size_t heap_n, heap_cap;
    char *enc;             /* byte-level encoded pre-token (ignore_merges lookup) */
    size_t enc_cap;
} bpe_ctx;

/* Heap order: lowest rank first, ties -> leftmost (as HF / llama.cpp). */
static bool bpe_before(const bpe_bigram *a, const bpe_bigram *b) {
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}

static rp_status bpe_push(bpe_ctx *c, bpe_bigram b) {
    if (c->heap_n == c->heap_cap) {
        size_t nc = c->heap_cap ? c->heap_cap * 2 : 64;
        bpe_bigram *nh = realloc(c->heap, nc * sizeof *nh);
        if (!nh) return rp_errorf(RP_ERR_NOMEM, "tokenizer: bpe queue of %zu entries", nc);
        c->heap = nh;
        c->heap_cap = nc;
    }
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bpe_before(&b, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = b;
    return RP_OK;
}

static bpe_bigram bpe_pop(bpe_ctx *c) {
    bpe_bigram top = c->heap[0];
    bpe_bigram last = c->heap[--c->heap_n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= c->heap_n) break;
        if (k + 1 < c->heap_n && bpe_before(&c->heap[k + 1], &c->heap[k])) k++;
        if (!bpe_before(&c->heap[k], &last)) break;
        c->heap[i] = c->heap[k];
        i = k;
    }
    if (c->heap_n > 0) c->heap[i] = last;
    return top;
}

static rp_status bpe_try(bpe_ctx *c, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return RP_OK;
    int32_t li = c->ids[left], ri = c->ids[right];
    if (li < 0 || ri < 0) return RP_OK;
    const rp_tok_pair_slot *s = pair_find(&c->t->merges, li, ri);
    if (!s) return RP_OK;
    bpe_bigram b = {left, right, s->rank, li, ri, s->merged};
    return bpe_push(c, b);
}

static rp_status bpe_grow(bpe_ctx *c, size_t n) {
    if (n <= c->sym_cap) return RP_OK;
    size_t nc = c->sym_cap ? c->sym_cap : 64;
    while (nc < n) nc *= 2;
    int32_t *a = realloc(c->ids, nc * sizeof *a);
    if (!a) return rp_errorf(RP_ERR_NOMEM, "tokenizer: bpe symbols for %zu bytes", n);
    c->ids = a;
    a = realloc(c->prev, nc * sizeof *a);
    if (!a) return rp_errorf(RP_ERR_NOMEM, "tokenizer: bpe symbols for %zu bytes", n);
    c->prev = a;
    a = realloc(c->next, nc * sizeof *a);
    if (!a) return rp_errorf(RP_ERR_NOMEM, "tokenizer: bpe symbols for %zu bytes", n);
    c->next = a;
    c->sym_cap = nc;
    return RP_OK;
}

/* Looks up the byte-level spelling of a whole pre-token (llama-bpe's
 * ignore_merges: HF emits such a word directly instead of merging it). */
static rp_status bpe_whole_word(bpe_ctx *c, const char *w, size_t n, int32_t *id) {
    *id = -1;
    if (n > c->t->max_piece) return RP_OK;   /* longer than any token's bytes */
    if (n * 2 > c->enc_cap) {
        size_t nc = n * 2 + 16;
        char *e = realloc(c->enc, nc);
        if (!e) return rp_errorf(RP_ERR_NOMEM, "tokenizer: bpe scratch of %zu bytes", nc);
        c->enc = e;
        c->enc_cap = nc;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = rp_bpe_byte_to_cp((uint8_t)w[i]);
        if (cp < 0x80) {
            c->enc[m++] = (char)cp;
        } else {   /* all byte characters are < U+0800: two UTF-8 bytes */
            c->enc[m++] = (char)(0xC0 | (cp >> 6));
            c->enc[m++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    *id = rp_tok_lookup(c->t, c->enc, m);
    return RP_OK;
}

static rp_status bpe_word(void *user, const char *w, size_t n) {
    bpe_ctx *c = user;
    const rp_tokenizer *t = c->t;
    if (n == 0) return RP_OK;
    if (n > INT32_MAX) return rp_errorf(RP_ERR_RANGE, "tokenizer: pre-token of %zu bytes", n);

    if (t->ignore_merges) {
        int32_t id;
        RP_TRY(bpe_whole_word(c, w, n, &id));
        if (id >= 0) {
            rp_tok_out_push(c->out, id);
            return RP_OK;
        }
    }

    RP_TRY(bpe_grow(c, n));
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++) {
        c->ids[i] = t->byte_tok[(uint8_t)w[i]];
        c->prev[i] = i - 1;
        c->next[i] = i + 1 < ns ? i + 1 : -1;
    }
    c->heap_n = 0;
    for (int32_t i = 1; i < ns; i++) RP_TRY(bpe_try(c, i - 1, i));

    while (c->heap_n > 0) {
        bpe_bigram b = bpe_pop(c);
        /* Stale: a side was merged away, or either side has since merged with
         * another neighbour (its id changed; merged ids are strictly longer
         * tokens, so an id never comes back). */
        if (c->ids[b.left] != b.left_id || c->ids[b.right] != b.right_id) continue;
        c->ids[b.left] = b.merged;
        c->ids[b.right] = -2;
        int32_t nx = c->next[b.right];
        c->next[b.left] = nx;
        if (nx >= 0) c->prev[nx] = b.left;
        RP_TRY(bpe_try(c, c->prev[b.left], b.left));
        RP_TRY(bpe_try(c, b.left, nx));
    }

    for (int32_t i = 0; i != -1; i = c->next[i])
        if (c->ids[i] >= 0) rp_tok_out_push(c->out, c->ids[i]);
    return RP_OK;
}

rp_status rp_bpe_encode(const rp_tokenizer *t, const char *text, size_t len, rp_tok_out *out) {
    if (len == 0) return RP_OK;
    char *norm = NULL;
    if (t->nfc) {
        /* NFC only changes non-ASCII text; skip the copy for pure ASCII. */
        bool ascii = true;
        for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)text[i] < 0x80;
        if (!ascii) {
            size_t nl;
            RP_TRY(rp_nfc(text, len, &norm, &nl));
            text = norm;
            len = nl;
        }
    }
    bpe_ctx c = {.t = t, .out = out};
    rp_status st = rp_pretok_split(t->pretok, text, len, bpe_word, &c);
    free(c.ids);
    free(c.prev);
    free(c.next);
    free(c.heap);
    free(c.enc);
    free(norm);
    return st;
}
