/* test_cache.c — RAM chunk cache: prefix/content/partial matching, KV copies, dedupe, LRU eviction, pins, collisions, random ops. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "reuse/cache.h"

/* An rp_kv from its geometry (two KV heads of 4). Each K/V row holds 8
 * uint32 words encoding (layer, cell, k-or-v, word), so copies can be checked
 * byte-exactly; pos[cell] = cell + POS_OFF. */
#define N_LAYER 3
#define N_CTX 4096
#define KV_DIM 8
#define ROW_BYTES 32
#define POS_OFF 1000
#define SALT 0x5eedull

static uint32_t row_word(int32_t layer, int32_t cell, int v, int j) {
    return (uint32_t)layer << 24 | (uint32_t)cell << 4 | (uint32_t)v << 3 | (uint32_t)j;
}

static rp_kv *fake_kv(void) {
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_shape(N_LAYER, 2, KV_DIM / 2, N_CTX, RP_TYPE_F32, RP_CPU_SCALAR, &kv), RP_OK);
    assert_int_equal(kv->row_bytes, ROW_BYTES);
    uint32_t row[KV_DIM];
    for (int32_t l = 0; l < N_LAYER; l++)
        for (int32_t c = 0; c < N_CTX; c++)
            for (int v = 0; v < 2; v++) {
                for (int j = 0; j < KV_DIM; j++) row[j] = row_word(l, c, v, j);
                rp_kv_write_rows(kv, v ? RP_KV_V : RP_KV_K, l, c, 1, (const uint8_t *)row);
            }
    for (int32_t c = 0; c < N_CTX; c++) kv->pos[c] = c + POS_OFF;
    kv->n = N_CTX;
    return kv;
}

static void free_kv(rp_kv *kv) { rp_kv_free(kv); }

/* The chunk's payload equals the kv rows of cells [cell0, cell0 + n) and its
 * position is that of cell0. */
static void check_payload(const rp_chunk *ch, int32_t cell0) {
    assert_int_equal(ch->n_layer, N_LAYER);
    assert_int_equal(ch->row_bytes, ROW_BYTES);
    assert_int_equal(ch->kv_type, RP_TYPE_F32);
    assert_int_equal(ch->pos0, cell0 + POS_OFF);
    assert_int_equal(ch->kv_bytes, (size_t)N_LAYER * 2 * (size_t)ch->n_tokens * ROW_BYTES);
    assert_int_equal((uintptr_t)ch->kv % 64, 0);
    for (int32_t l = 0; l < N_LAYER; l++)
        for (int32_t t = 0; t < ch->n_tokens; t++) {
            const uint32_t *k = (const uint32_t *)(rp_chunk_k(ch, l) + (size_t)t * ROW_BYTES);
            const uint32_t *v = (const uint32_t *)(rp_chunk_v(ch, l) + (size_t)t * ROW_BYTES);
            for (int j = 0; j < KV_DIM; j++) {
                assert_int_equal(k[j], row_word(l, cell0 + t, 0, j));
                assert_int_equal(v[j], row_word(l, cell0 + t, 1, j));
            }
        }
}

static rp_test_rng g_rng = {12345};
static uint64_t rnd(void) { return rp_test_rng_next(&g_rng); }

static void random_tokens(rp_token *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) t[i] = (rp_token)(rnd() % 32000);
}

/* n equal spans of len tokens each, hashed. */
static void make_spans(const rp_token *t, int32_t n, int32_t len, rp_chunk_span *s) {
    for (int32_t i = 0; i < n; i++) {
        s[i].begin = i * len;
        s[i].len = len;
        s[i].hash = rp_chunk_hash(t + i * len, len, SALT);
        s[i].at_boundary = i == 0;
    }
}

static rp_chunk_cache *new_cache(size_t budget) {
    rp_cache_params p = {.budget_bytes = budget, .n_layer = N_LAYER, .row_bytes = ROW_BYTES, .kv_type = RP_TYPE_F32};
    rp_chunk_cache *c = NULL;
    assert_int_equal(rp_chunk_cache_create(p, &c), RP_OK);
    assert_non_null(c);
    return c;
}

/* Inserts spans[0..n) as a prefix chain (cells = prompt offsets) and unpins them. */
static void insert_chain(rp_chunk_cache *c, rp_kv *kv, const rp_token *t, const rp_chunk_span *s, int32_t n,
                         rp_chunk **out) {
    rp_chunk *parent = NULL;
    rp_chunk *tmp[64];
    for (int32_t i = 0; i < n; i++) {
        rp_chunk *ch = NULL;
        assert_int_equal(rp_chunk_cache_insert(c, parent, t, &s[i], kv, s[i].begin, 1.5, &ch), RP_OK);
        assert_non_null(ch);
        tmp[i] = ch;
        parent = ch;
    }
    /* release in reverse so that under pressure children go before parents */
    for (int32_t i = n - 1; i >= 0; i--) rp_chunk_unpin(c, tmp[i]);
    if (out)
        for (int32_t i = 0; i < n; i++) out[i] = tmp[i];
}

static void unpin_all(rp_chunk_cache *c, rp_chunk **chs, int32_t n) {
    for (int32_t i = 0; i < n; i++) rp_chunk_unpin(c, chs[i]);
}

static size_t chunk_size(int32_t len) {
    /* measured, not assumed: the size of one chunk of len tokens */
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(SIZE_MAX);
    rp_token t[256];
    random_tokens(t, len);
    rp_chunk_span s;
    make_spans(t, 1, len, &s);
    rp_chunk *ch = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 0, 0, &ch), RP_OK);
    size_t b = rp_chunk_cache_stats(c).bytes;
    assert_true(b >= ch->kv_bytes + (size_t)len * sizeof(rp_token) + sizeof(rp_chunk));
    rp_chunk_unpin(c, ch);
    rp_chunk_cache_free(c);
    free_kv(kv);
    return b;
}

/* ------------------------------------------------------------------------ */

static void test_prefix_chain(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[100];
    random_tokens(t, 100);
    rp_chunk_span s[5];
    make_spans(t, 5, 20, s);
    rp_chunk *ins[5];
    insert_chain(c, kv, t, s, 5, ins);
    assert_int_equal(ins[0]->parent_id, 0);
    for (int i = 1; i < 5; i++) assert_true(ins[i]->parent_id == ins[i - 1]->id);
    assert_true(ins[0]->chain == rp_chunk_chain(0, s[0].hash));
    assert_true(ins[3]->chain == rp_chunk_chain(ins[2]->chain, s[3].hash));

    /* the same prompt matches all 5, with exact payloads */
    rp_chunk *m[5] = {0};
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);
    for (int i = 0; i < 5; i++) {
        assert_ptr_equal(m[i], ins[i]);
        assert_int_equal(m[i]->refs, 1);
        assert_int_equal(m[i]->hits, 1);
        assert_int_equal(m[i]->n_tokens, 20);
        assert_memory_equal(m[i]->tokens, t + 20 * i, 20 * sizeof(rp_token));
        assert_true(m[i]->recompute_ms == 1.5);
        check_payload(m[i], 20 * i);
    }
    unpin_all(c, m, 5);

    /* a prompt sharing the first 3 chunks matches 3 */
    rp_token t2[100];
    memcpy(t2, t, sizeof t2);
    t2[65] ^= 1;
    rp_chunk_span s2[5];
    make_spans(t2, 5, 20, s2);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t2, s2, 5, m), 3);
    for (int i = 0; i < 3; i++) assert_ptr_equal(m[i], ins[i]);
    unpin_all(c, m, 3);

    /* reordered chunks: no prefix match, but each is found by content */
    const int order[5] = {3, 0, 4, 1, 2};
    rp_token t3[100];
    for (int i = 0; i < 5; i++) memcpy(t3 + 20 * i, t + 20 * order[i], 20 * sizeof(rp_token));
    rp_chunk_span s3[5];
    make_spans(t3, 5, 20, s3);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t3, s3, 5, m), 0);
    for (int i = 0; i < 5; i++) {
        rp_chunk *f = rp_chunk_cache_find(c, t3, &s3[i]);
        assert_ptr_equal(f, ins[order[i]]);
        check_payload(f, 20 * order[i]);   /* KV as computed in its original context */
        rp_chunk_unpin(c, f);
    }
    /* a span of other tokens is not found */
    rp_token other[20];
    random_tokens(other, 20);
    rp_chunk_span so;
    make_spans(other, 1, 20, &so);
    assert_null(rp_chunk_cache_find(c, other, &so));

    /* all unpinned again */
    for (int i = 0; i < 5; i++) assert_int_equal(ins[i]->refs, 0);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_partial(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[100];
    random_tokens(t, 100);
    rp_chunk_span s[5];
    make_spans(t, 5, 20, s);
    rp_chunk *ins[5];
    insert_chain(c, kv, t, s, 5, ins);

    /* diverges 7 tokens into chunk 3 */
    rp_token t2[100];
    memcpy(t2, t, sizeof t2);
    t2[67] ^= 1;
    rp_chunk_span s2[5];
    make_spans(t2, 5, 20, s2);
    rp_chunk *m[5];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t2, s2, 5, m), 3);
    int32_t nc = -1;
    rp_chunk *p = rp_chunk_cache_match_partial(c, m[2], t2 + 60, 40, &nc);
    assert_ptr_equal(p, ins[3]);
    assert_int_equal(nc, 7);
    assert_int_equal(p->refs, 1);
    rp_chunk_unpin(c, p);
    unpin_all(c, m, 3);

    /* root level: the first chunk shared for 12 tokens */
    memcpy(t2, t, sizeof t2);
    t2[12] ^= 1;
    p = rp_chunk_cache_match_partial(c, NULL, t2, 100, &nc);
    assert_ptr_equal(p, ins[0]);
    assert_int_equal(nc, 12);
    rp_chunk_unpin(c, p);
    /* fewer tokens than the chunk: the common length is capped by n */
    p = rp_chunk_cache_match_partial(c, NULL, t, 5, &nc);
    assert_ptr_equal(p, ins[0]);
    assert_int_equal(nc, 5);
    rp_chunk_unpin(c, p);
    /* a full match is also a partial match */
    p = rp_chunk_cache_match_partial(c, ins[0], t + 20, 80, &nc);
    assert_ptr_equal(p, ins[1]);
    assert_int_equal(nc, 20);
    rp_chunk_unpin(c, p);
    /* no shared first token: nothing */
    t2[0] = t[0] + 1;
    nc = -1;
    assert_null(rp_chunk_cache_match_partial(c, NULL, t2, 100, &nc));
    assert_int_equal(nc, 0);
    /* chunk 1's tokens are not a root child */
    nc = -1;
    assert_null(rp_chunk_cache_match_partial(c, NULL, t + 20, 20, &nc));
    assert_int_equal(nc, 0);

    /* several children: the longest common prefix wins */
    rp_token t3[100];
    memcpy(t3, t, sizeof t3);
    t3[30] ^= 1;   /* second child of ins[0], shares 10 tokens with ins[1] */
    rp_chunk_span s3[5];
    make_spans(t3, 5, 20, s3);
    rp_chunk *sib = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, ins[0], t3, &s3[1], kv, 20, 0, &sib), RP_OK);
    assert_non_null(sib);
    assert_ptr_not_equal(sib, ins[1]);
    rp_chunk_unpin(c, sib);
    rp_token q[20];
    memcpy(q, t3 + 20, sizeof q);
    q[15] ^= 1;   /* shares 15 with sib, 10 with ins[1] */
    p = rp_chunk_cache_match_partial(c, ins[0], q, 20, &nc);
    assert_ptr_equal(p, sib);
    assert_int_equal(nc, 15);
    rp_chunk_unpin(c, p);
    memcpy(q, t + 20, sizeof q);
    q[18] ^= 1;   /* shares 18 with ins[1], 10 with sib */
    p = rp_chunk_cache_match_partial(c, ins[0], q, 20, &nc);
    assert_ptr_equal(p, ins[1]);
    assert_int_equal(nc, 18);
    rp_chunk_unpin(c, p);

    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_dedupe(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[40];
    random_tokens(t, 40);
    rp_chunk_span s[2];
    make_spans(t, 2, 20, s);
    rp_chunk *a = NULL, *a2 = NULL, *b = NULL, *b2 = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[0], kv, 0, 0, &a), RP_OK);
    assert_false(a->exact);   /* insert leaves it false; the reuse engine sets it */
    a->exact = true;
    rp_cache_stats st = rp_chunk_cache_stats(c);
    const uint64_t used = a->last_used;
    /* same parent (root) and tokens, from other cells: refreshed, not copied */
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[0], kv, 500, 0, &a2), RP_OK);
    assert_ptr_equal(a, a2);
    assert_true(a->exact);   /* a refresh keeps the engine's flag */
    assert_int_equal(a->refs, 2);
    assert_true(a->last_used > used);
    check_payload(a, 0);
    rp_cache_stats st2 = rp_chunk_cache_stats(c);
    assert_int_equal(st2.n_chunks, 1);
    assert_int_equal(st2.inserts, st.inserts);
    assert_int_equal(st2.bytes, st.bytes);
    /* same tokens under a different parent: a distinct chunk */
    assert_int_equal(rp_chunk_cache_insert(c, a, t, &s[0], kv, 20, 0, &b), RP_OK);
    assert_non_null(b);
    assert_ptr_not_equal(b, a);
    assert_true(b->parent_id == a->id);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 2);
    assert_int_equal(rp_chunk_cache_insert(c, a, t, &s[0], kv, 20, 0, &b2), RP_OK);
    assert_ptr_equal(b, b2);
    /* insert with out == NULL leaves nothing pinned */
    assert_int_equal(rp_chunk_cache_insert(c, a, t, &s[1], kv, 20, 0, NULL), RP_OK);
    assert_int_equal(rp_chunk_cache_insert(c, a, t, &s[1], kv, 20, 0, NULL), RP_OK);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 3);
    /* find among equal-content chunks (a at the root, b under a) picks the most
     * recently used: b was inserted last, then a root prefix match touches a */
    rp_chunk *f = rp_chunk_cache_find(c, t, &s[0]);
    assert_ptr_equal(f, b);
    rp_chunk_unpin(c, f);
    rp_chunk *m[1];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, &s[0], 1, m), 1);
    assert_ptr_equal(m[0], a);
    rp_chunk_unpin(c, m[0]);
    f = rp_chunk_cache_find(c, t, &s[0]);
    assert_ptr_equal(f, a);
    rp_chunk_unpin(c, f);
    rp_chunk_unpin(c, a);
    rp_chunk_unpin(c, a);
    rp_chunk_unpin(c, b);
    rp_chunk_unpin(c, b);
    /* with nothing pinned, everything can be cleared */
    assert_int_equal(rp_chunk_cache_clear(c), st2.bytes * 3);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 0);
    assert_int_equal(rp_chunk_cache_stats(c).bytes, 0);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_lru_order(void **state) {
    (void)state;
    const size_t sz = chunk_size(20);
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(3 * sz + sz / 2);   /* room for 3 */
    rp_token t[120];
    random_tokens(t, 120);
    rp_chunk_span s[6];
    make_spans(t, 6, 20, s);
    rp_chunk *ch[6];
    for (int i = 0; i < 3; i++) {   /* A, B, C: independent roots */
        assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, s[i].begin, 0, &ch[i]), RP_OK);
        rp_chunk_unpin(c, ch[i]);
    }
    assert_int_equal(rp_chunk_cache_stats(c).bytes, 3 * sz);
    /* touch A: B becomes least recent */
    rp_chunk *f = rp_chunk_cache_find(c, t, &s[0]);
    assert_ptr_equal(f, ch[0]);
    rp_chunk_unpin(c, f);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[3], kv, s[3].begin, 0, &ch[3]), RP_OK);   /* D */
    rp_chunk_unpin(c, ch[3]);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.n_chunks, 3);
    assert_int_equal(st.evictions, 1);
    assert_null(rp_chunk_cache_find(c, t, &s[1]));   /* B gone */
    /* order now (least recent first): C, A, D; touching C by prefix match makes A next */
    rp_chunk *m[1];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t + 40, (rp_chunk_span[]){{0, 20, s[2].hash, true}}, 1, m), 1);
    rp_chunk_unpin(c, m[0]);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[4], kv, s[4].begin, 0, &ch[4]), RP_OK);   /* E */
    rp_chunk_unpin(c, ch[4]);
    assert_null(rp_chunk_cache_find(c, t, &s[0]));   /* A gone */
    /* a re-insert (dedupe refresh) also counts as use: refresh D, then F evicts C */
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[3], kv, s[3].begin, 0, NULL), RP_OK);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[5], kv, s[5].begin, 0, NULL), RP_OK);   /* F */
    assert_null(rp_chunk_cache_find(c, t, &s[2]));   /* C gone */
    const int live[3] = {3, 4, 5};
    for (int i = 0; i < 3; i++) {
        f = rp_chunk_cache_find(c, t, &s[live[i]]);
        assert_non_null(f);
        check_payload(f, s[live[i]].begin);
        rp_chunk_unpin(c, f);
    }
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.evictions, 3);
    assert_true(st.bytes <= 3 * sz + sz / 2);
    /* evict_to: down to one chunk evicts the two least recent */
    assert_int_equal(rp_chunk_cache_evict_to(c, sz), 2 * sz);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 1);
    f = rp_chunk_cache_find(c, t, &s[5]);
    assert_non_null(f);   /* F was found last above */
    rp_chunk_unpin(c, f);
    assert_int_equal(rp_chunk_cache_evict_to(c, sz), 0);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_pinned_never_evicted(void **state) {
    (void)state;
    const size_t sz = chunk_size(20);
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(3 * sz);
    rp_token t[200];
    random_tokens(t, 200);
    rp_chunk_span s[10];
    make_spans(t, 10, 20, s);
    rp_chunk *ch[10] = {0};
    for (int i = 0; i < 3; i++) assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, 0, 0, &ch[i]), RP_OK);
    /* full of pinned chunks: further inserts are refused (RP_OK, NULL) */
    for (int i = 3; i < 10; i++) {
        rp_chunk *x = (rp_chunk *)&x;
        assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, 0, 0, &x), RP_OK);
        assert_null(x);
    }
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.n_chunks, 3);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(rp_chunk_cache_clear(c), 0);
    assert_int_equal(rp_chunk_cache_evict_to(c, 0), 0);
    for (int i = 0; i < 3; i++) check_payload(ch[i], 0);
    /* release one: the next insert evicts exactly it */
    rp_chunk_unpin(c, ch[1]);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[3], kv, 0, 0, &ch[3]), RP_OK);
    assert_non_null(ch[3]);
    assert_int_equal(rp_chunk_cache_stats(c).evictions, 1);
    assert_null(rp_chunk_cache_find(c, t, &s[1]));
    /* a chunk larger than the whole budget is never cached */
    rp_chunk_cache *small = new_cache(sz - 1);
    rp_chunk *x = (rp_chunk *)&x;
    assert_int_equal(rp_chunk_cache_insert(small, NULL, t, &s[0], kv, 0, 0, &x), RP_OK);
    assert_null(x);
    assert_int_equal(rp_chunk_cache_stats(small).n_chunks, 0);
    rp_chunk_cache_free(small);
    /* a pinned chunk with two pins stays pinned after one unpin */
    rp_chunk *again = rp_chunk_cache_find(c, t, &s[0]);
    assert_ptr_equal(again, ch[0]);
    assert_int_equal(ch[0]->refs, 2);
    rp_chunk_unpin(c, ch[0]);
    assert_int_equal(rp_chunk_cache_evict_to(c, 0), 0);
    rp_chunk_unpin(c, again);
    rp_chunk_unpin(c, ch[2]);
    rp_chunk_unpin(c, ch[3]);
    assert_int_equal(rp_chunk_cache_evict_to(c, 0), 3 * sz);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_parent_eviction(void **state) {
    (void)state;
    const size_t sz = chunk_size(20);
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[60];
    random_tokens(t, 60);
    rp_chunk_span s[3];
    make_spans(t, 3, 20, s);
    rp_chunk *ins[3];
    rp_chunk *parent = NULL;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rp_chunk_cache_insert(c, parent, t, &s[i], kv, s[i].begin, 0, &ins[i]), RP_OK);
        parent = ins[i];
    }
    unpin_all(c, ins, 3);   /* parent first: it is the least recent */
    const uint64_t old_root = ins[0]->id;
    assert_int_equal(rp_chunk_cache_evict_to(c, 2 * sz), sz);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 2);
    rp_chunk *m[3];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 3, m), 0);
    /* the children are still found by content */
    for (int i = 1; i < 3; i++) {
        rp_chunk *f = rp_chunk_cache_find(c, t, &s[i]);
        assert_ptr_equal(f, ins[i]);
        rp_chunk_unpin(c, f);
    }
    /* re-inserting the root gives it a fresh id: the orphaned children stay
     * unreachable by prefix (their KV continued the old root's path) */
    rp_chunk *root = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[0], kv, 0, 0, &root), RP_OK);
    assert_true(root->id != old_root);
    rp_chunk_unpin(c, root);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 3, m), 1);
    rp_chunk_unpin(c, m[0]);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_hash_collision(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[60];
    random_tokens(t, 60);
    /* three spans with the same (forced) hash value, different tokens */
    rp_chunk_span s[3];
    for (int i = 0; i < 3; i++) s[i] = (rp_chunk_span){.begin = 20 * i, .len = 20, .hash = 42, .at_boundary = true};
    rp_chunk *a = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[0], kv, 0, 0, &a), RP_OK);
    rp_chunk_unpin(c, a);
    rp_chunk *m[1];
    int32_t nc;
    /* B has A's hash and chain but not its tokens: never a hit */
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, &s[1], 1, m), 0);
    assert_null(rp_chunk_cache_find(c, t, &s[1]));
    /* same length, different tokens: not deduped with A */
    rp_chunk *b = NULL;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[1], kv, 20, 0, &b), RP_OK);
    assert_ptr_not_equal(a, b);
    assert_true(a->chain == b->chain);
    rp_chunk_unpin(c, b);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 2);
    for (int i = 0; i < 2; i++) {
        rp_chunk *want = i == 0 ? a : b;
        assert_int_equal(rp_chunk_cache_match_prefix(c, t, &s[i], 1, m), 1);
        assert_ptr_equal(m[0], want);
        rp_chunk_unpin(c, m[0]);
        rp_chunk *f = rp_chunk_cache_find(c, t, &s[i]);
        assert_ptr_equal(f, want);
        check_payload(f, 20 * i);
        rp_chunk_unpin(c, f);
    }
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, &s[2], 1, m), 0);
    assert_null(rp_chunk_cache_find(c, t, &s[2]));
    /* shorter span with the same hash and a matching head: still a miss */
    rp_chunk_span shorter = {.begin = 0, .len = 19, .hash = 42, .at_boundary = true};
    assert_null(rp_chunk_cache_find(c, t, &shorter));
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, &shorter, 1, m), 0);
    /* partial matching compares tokens too */
    rp_chunk *p = rp_chunk_cache_match_partial(c, NULL, t + 40, 20, &nc);
    assert_null(p);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_invalid_insert(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[40];
    random_tokens(t, 40);
    rp_chunk_span s;
    make_spans(t, 1, 20, &s);
    rp_chunk *x = NULL;
    kv->type = RP_TYPE_F16;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 0, 0, &x), RP_ERR_INVALID_ARG);
    kv->type = RP_TYPE_F32;
    kv->row_bytes = 16;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 0, 0, &x), RP_ERR_INVALID_ARG);
    kv->row_bytes = ROW_BYTES;
    kv->n_layer = 2;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 0, 0, &x), RP_ERR_INVALID_ARG);
    kv->n_layer = N_LAYER;
    kv->n = 30;   /* cells [20, 40) not all filled */
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 20, 0, &x), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 11, 0, &x), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, -1, 0, &x), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, kv, 10, 0, &x), RP_OK);   /* [10, 30): fine */
    assert_non_null(x);
    check_payload(x, 10);
    rp_chunk_unpin(c, x);
    rp_chunk_span bad = s;
    bad.len = 0;
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &bad, kv, 0, 0, &x), RP_ERR_INVALID_ARG);
    assert_null(x);
    assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s, NULL, 0, 0, &x), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_cache_stats(c).n_chunks, 1);
    /* create */
    rp_chunk_cache *d = NULL;
    rp_cache_params p = {.budget_bytes = 100, .n_layer = 0, .row_bytes = 32, .kv_type = RP_TYPE_F32};
    assert_int_equal(rp_chunk_cache_create(p, &d), RP_ERR_INVALID_ARG);
    assert_null(d);
    p.n_layer = 2;
    p.row_bytes = 0;
    assert_int_equal(rp_chunk_cache_create(p, &d), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chunk_cache_create(p, NULL), RP_ERR_INVALID_ARG);
    /* lookups with degenerate input miss without crashing */
    rp_chunk *m[1];
    int32_t nc = 5;
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, &s, 0, m), 0);
    assert_null(rp_chunk_cache_match_partial(c, NULL, t, 0, &nc));
    assert_int_equal(nc, 0);
    rp_chunk_cache_free(NULL);
    rp_chunk_unpin(c, NULL);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

static void test_stats(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 20);
    rp_token t[100];
    random_tokens(t, 100);
    rp_chunk_span s[5];
    make_spans(t, 5, 20, s);
    insert_chain(c, kv, t, s, 5, NULL);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.n_chunks, 5);
    assert_int_equal(st.inserts, 5);
    assert_int_equal(st.prefix_hits, 0);
    assert_int_equal(st.content_hits, 0);
    assert_int_equal(st.misses, 0);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.bytes, 5 * chunk_size(20));
    rp_chunk *m[5];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 5, m), 5);   /* 5 hits, no miss */
    unpin_all(c, m, 5);
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s + 1, 4, m), 0);   /* a miss */
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 3, m), 3);
    unpin_all(c, m, 3);
    rp_chunk *f = rp_chunk_cache_find(c, t, &s[2]);
    rp_chunk_unpin(c, f);
    rp_chunk_span miss = s[2];
    miss.begin = 1;
    assert_null(rp_chunk_cache_find(c, t, &miss));
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.prefix_hits, 8);
    assert_int_equal(st.content_hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(m[2]->hits, 3);   /* 2 prefix hits + 1 content hit */
    assert_int_equal(rp_chunk_cache_clear(c), st.bytes);
    st = rp_chunk_cache_stats(c);
    assert_int_equal(st.evictions, 5);
    assert_int_equal(st.n_chunks, 0);
    assert_int_equal(st.bytes, 0);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

typedef struct {
    int n;
    uint64_t last_id;
    bool ordered;
    int stop_after;
} foreach_ctx;

static bool count_fn(void *user, rp_chunk *ch) {
    foreach_ctx *x = user;
    if (ch->id <= x->last_id) x->ordered = false;
    x->last_id = ch->id;
    x->n++;
    return x->stop_after == 0 || x->n < x->stop_after;
}

static void test_foreach(void **state) {
    (void)state;
    rp_kv *kv = fake_kv();
    rp_chunk_cache *c = new_cache(1 << 22);
    rp_token t[2000];
    random_tokens(t, 2000);
    rp_chunk_span s[100];
    make_spans(t, 100, 20, s);
    insert_chain(c, kv, t, s, 50, NULL);   /* 50 chained + 50 roots: forces rehashing */
    for (int i = 50; i < 100; i++) assert_int_equal(rp_chunk_cache_insert(c, NULL, t, &s[i], kv, 0, 0, NULL), RP_OK);
    foreach_ctx x = {0, 0, true, 0};
    rp_chunk_cache_foreach(c, count_fn, &x);
    assert_int_equal(x.n, 100);
    assert_true(x.ordered);   /* id order: parents before children */
    foreach_ctx y = {0, 0, true, 7};
    rp_chunk_cache_foreach(c, count_fn, &y);
    assert_int_equal(y.n, 7);
    /* still all reachable after rehashing */
    rp_chunk *m[50];
    assert_int_equal(rp_chunk_cache_match_prefix(c, t, s, 50, m), 50);
    unpin_all(c, m, 50);
    rp_chunk_cache_free(c);
    free_kv(kv);
}

/* ---- random operations ------------------------------------------------ */

#define R_DOCS 24
#define R_HELD 256

typedef struct {
    rp_chunk *held[R_HELD];
    int n_held;
} pins;

static bool sum_refs(void *user, rp_chunk *ch) {
    int64_t *acc = user;
    acc[0] += ch->refs;
    acc[1]++;
    /* each chunk's payload is the rows it was copied from (pos0 names the cell) */
    const uint32_t *k = (const uint32_t *)rp_chunk_k(ch, N_LAYER - 1);
    const uint32_t *v = (const uint32_t *)(rp_chunk_v(ch, 1) + (size_t)(ch->n_tokens - 1) * ROW_BYTES);
    if (k[3] != row_word(N_LAYER - 1, ch->pos0 - POS_OFF, 0, 3)) acc[2]++;
    if (v[5] != row_word(1, ch->pos0 - POS_OFF + ch->n_tokens - 1, 1, 5)) acc[2]++;
    return true;
}

static void hold(pins *p, rp_chunk_cache *c, rp_chunk *ch) {
    if (!ch) return;
    if (p->n_held == R_HELD) {   /* full: drop it right away */
        rp_chunk_unpin(c, ch);
        return;
    }
    p->held[p->n_held++] = ch;
}

static void release_random(pins *p, rp_chunk_cache *c) {
    if (!p->n_held) return;
    int i = (int)(rnd() % (uint64_t)p->n_held);
    rp_chunk_unpin(c, p->held[i]);
    p->held[i] = p->held[--p->n_held];
}

static void test_random_ops(void **state) {
    (void)state;
    const size_t sz = chunk_size(16);
    rp_kv *kv = fake_kv();
    const size_t budget = 40 * sz;
    rp_chunk_cache *c = new_cache(budget);
    /* documents of 1-3 chunks of 8-24 tokens; prompts are sequences of docs */
    rp_token docs[R_DOCS][24];
    int32_t dlen[R_DOCS];
    for (int d = 0; d < R_DOCS; d++) {
        dlen[d] = 8 + (int32_t)(rnd() % 17);
        random_tokens(docs[d], dlen[d]);
        if (d % 5 == 4) {   /* near-duplicates: same head, different tail */
            memcpy(docs[d], docs[d - 1], sizeof(rp_token) * 6);
        }
    }
    pins p = {.n_held = 0};
    int refused = 0, max_held = 0;
    rp_token prompt[8 * 24];
    rp_chunk_span sp[8];
    for (int op = 0; op < 10000; op++) {
        /* a random prompt of 1..8 docs (each doc one span) */
        const int nd = 1 + (int)(rnd() % 8);
        int32_t off = 0;
        for (int i = 0; i < nd; i++) {
            int d = (int)(rnd() % R_DOCS);
            if (i > 0 && rnd() % 2) d = (int)((unsigned)(op / 50 + i) % R_DOCS);   /* recurring structure */
            memcpy(prompt + off, docs[d], sizeof(rp_token) * (size_t)dlen[d]);
            sp[i] = (rp_chunk_span){.begin = off, .len = dlen[d], .hash = rp_chunk_hash(docs[d], dlen[d], SALT)};
            if (rnd() % 64 == 0) sp[i].hash = 7;   /* occasional forced collisions */
            off += dlen[d];
        }
        const uint64_t r = rnd() % 100;
        if (r < 40) {   /* prefix match, then insert the rest, as a request would */
            rp_chunk *m[8];
            int32_t k = rp_chunk_cache_match_prefix(c, prompt, sp, nd, m);
            for (int32_t i = 0; i < k; i++) {
                assert_int_equal(m[i]->n_tokens, sp[i].len);
                assert_memory_equal(m[i]->tokens, prompt + sp[i].begin, sizeof(rp_token) * (size_t)sp[i].len);
                if (i > 0) assert_true(m[i]->parent_id == m[i - 1]->id);
            }
            rp_chunk *parent = k ? m[k - 1] : NULL;
            rp_chunk *mine[8];
            int n_mine = 0;
            for (int32_t i = k; i < nd; i++) {
                rp_chunk *ch = NULL;
                assert_int_equal(rp_chunk_cache_insert(c, parent, prompt, &sp[i], kv, sp[i].begin, 0, &ch), RP_OK);
                if (!ch) {   /* no room: the rest of the chain is not cached */
                    refused++;
                    break;
                }
                mine[n_mine++] = ch;
                parent = ch;
            }
            /* keep some pins (a request in flight), release the rest, children first */
            const bool keep = rnd() % 4 == 0;
            for (int i = n_mine - 1; i >= 0; i--) keep ? hold(&p, c, mine[i]) : rp_chunk_unpin(c, mine[i]);
            for (int32_t i = k - 1; i >= 0; i--) keep ? hold(&p, c, m[i]) : rp_chunk_unpin(c, m[i]);
        } else if (r < 60) {   /* content lookup */
            const int i = (int)(rnd() % (uint64_t)nd);
            rp_chunk *f = rp_chunk_cache_find(c, prompt, &sp[i]);
            if (f) {
                assert_int_equal(f->n_tokens, sp[i].len);
                assert_memory_equal(f->tokens, prompt + sp[i].begin, sizeof(rp_token) * (size_t)sp[i].len);
                hold(&p, c, f);
            }
        } else if (r < 70) {   /* partial */
            int32_t nc = -1;
            rp_chunk *f = rp_chunk_cache_match_partial(c, NULL, prompt, off, &nc);
            if (f) {
                assert_true(nc >= 1 && nc <= f->n_tokens);
                assert_memory_equal(f->tokens, prompt, sizeof(rp_token) * (size_t)nc);
                assert_int_equal(f->parent_id, 0);
                hold(&p, c, f);
            } else {
                assert_int_equal(nc, 0);
            }
        } else if (r < 90) {
            release_random(&p, c);
            release_random(&p, c);
        } else if (r < 97) {
            rp_chunk_cache_evict_to(c, (size_t)(rnd() % (budget + 1)));
        } else if (r < 99) {
            rp_chunk_cache_clear(c);
        } else {   /* drain all pins */
            while (p.n_held) release_random(&p, c);
        }
        if (p.n_held > max_held) max_held = p.n_held;
        /* invariants */
        rp_cache_stats st = rp_chunk_cache_stats(c);
        assert_true(st.bytes <= budget);
        int64_t acc[3] = {0, 0, 0};
        rp_chunk_cache_foreach(c, sum_refs, acc);
        assert_int_equal(acc[0], p.n_held);
        assert_int_equal(acc[1], (int64_t)st.n_chunks);
        assert_int_equal(acc[2], 0);
        assert_int_equal(st.inserts - st.evictions, st.n_chunks);
        if (p.n_held == 0 && op % 97 == 0) {
            /* nothing pinned: everything can go */
            rp_chunk_cache_clear(c);
            assert_int_equal(rp_chunk_cache_stats(c).bytes, 0);
        }
    }
    while (p.n_held) release_random(&p, c);
    rp_chunk_cache_clear(c);
    rp_cache_stats st = rp_chunk_cache_stats(c);
    assert_int_equal(st.n_chunks, 0);
    assert_int_equal(st.bytes, 0);
    if (getenv("RP_TEST_VERBOSE"))
        print_message("random ops: inserts %llu evictions %llu prefix_hits %llu content_hits %llu misses %llu "
                      "refused %d max_held %d\n",
                      (unsigned long long)st.inserts, (unsigned long long)st.evictions,
                      (unsigned long long)st.prefix_hits, (unsigned long long)st.content_hits,
                      (unsigned long long)st.misses, refused, max_held);
    assert_true(st.evictions > 100);
    assert_true(st.prefix_hits > 100);
    assert_true(st.content_hits > 100);
    assert_true(refused > 0);   /* some inserts hit a cache full of pinned chunks */
    rp_chunk_cache_free(c);
    free_kv(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_chain),   cmocka_unit_test(test_partial),
        cmocka_unit_test(test_dedupe),         cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_pinned_never_evicted), cmocka_unit_test(test_parent_eviction),
        cmocka_unit_test(test_hash_collision), cmocka_unit_test(test_invalid_insert),
        cmocka_unit_test(test_stats),          cmocka_unit_test(test_foreach),
        cmocka_unit_test(test_random_ops),
    };
    return rp_test_main(tests, NULL, NULL);
}
