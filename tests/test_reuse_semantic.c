/* test_reuse_semantic.c — the store's semantic index through the reuse engine on stories260K (a real tokenizer):
 * a re-wrapped, paraphrased prompt finds its document through terms; with an embedding model (stories260K itself,
 * mean pooling) every stored chunk gets its truncated, re-normalised vector, which survives a restart, goes with
 * its chunk, and is nearest to a query of its text; reuse results are unchanged when nothing new is found; the
 * public engine's --embed-model parameters. */
#define _GNU_SOURCE   /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testfix.h"
#include "reuse/engine.h"
#include "reuse/semantic.h"
#include "store/lcs.h"
#include "store/store.h"
#include "store/terms.h"

static const char *stories(void) {
    static char path[4096];
    const char *p = rp_test_shared("models/stories260K.gguf");
    if (!p) return NULL;
    snprintf(path, sizeof path, "%s", p);
    return path;
}

#define OPEN_STORIES(f)                                    \
    const char *mp = stories();                            \
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");      \
    rp_test_fixture f;                                     \
    assert_true(rp_test_fixture_open(&f, mp, RP_TYPE_F32, 1024))

static const char *fresh_dir(const char *name) {
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", rp_test_tmpdir(), name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b);
    assert_int_equal(system(cmd), 0);
    return b;
}

/* An engine (blend at ratio r, sub-chunk search from `sub_min` tokens, no content-defined cut before 200 tokens) over a store in `dir`, with the semantic
 * index `sem` (NULL: none) for its writer and its searches. */
static rp_reuse *engine(rp_test_fixture *f, float r, int32_t sub_min, const char *dir, rp_semantic *sem) {
    rp_reuse_params rp = rp_reuse_default_params();
    rp.ratio = r;
    rp.subchunk_min = sub_min;
    rp.chunking.min_len = 200;   /* each cached text (under 200 tokens) one chunk after BOS */
    rp.chunking.avg_len = 256;
    rp_reuse *e = NULL;
    assert_int_equal(rp_reuse_create(f->m, f->kv->type, 1024, rp, &e), RP_OK);
    if (sem) {
        rp_reuse_set_semantic(e, sem);
        rp_chunk_cache_set_indexer(rp_reuse_cache(e), rp_semantic_index, sem);
    }
    rp_store *s = NULL;
    const rp_store_params sp = rp_store_default_params();
    assert_int_equal(rp_store_open(dir, &sp, &s), RP_OK);
    const rp_pool_params pp = rp_pool_default_params();
    assert_int_equal(rp_chunk_cache_attach_store(rp_reuse_cache(e), s, rp_reuse_salt(e), "stories", &pp), RP_OK);
    return e;
}

static rp_semantic *semantic(const rp_model *m, const rp_model *embed, int32_t dim, bool terms) {
    rp_semantic_params sp = rp_semantic_default_params();
    sp.text_model = m;
    sp.embed_model = embed;
    sp.embed_dim = dim;
    sp.terms = terms;
    rp_semantic *s = NULL;
    assert_int_equal(rp_semantic_create(&sp, &s), RP_OK);
    return s;
}

static int32_t tokenize(const rp_model *m, const char *text, rp_token *out, int32_t cap) {
    int32_t n = 0;
    assert_int_equal(rp_tokenize(m, text, strlen(text), false, false, out, cap, &n), RP_OK);
    return n;
}

/* Prefills BOS + the text (one caller segment after BOS), commits, and flushes to the store. */
static void cache_text(rp_test_fixture *f, rp_reuse *e, const char *text) {
    rp_token p[1024];
    p[0] = 1;
    const int32_t n = 1 + tokenize(f->m, text, p + 1, 1023);
    const int32_t b[1] = {1};
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(e, f->ctx, f->kv, p, n, b, 1, f->lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_commit(e, f->kv), RP_OK);
    assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(e)), RP_OK);
}

/* A read-only handle on the engine's store, bound to its model. */
static rp_store *reader_salt(const char *dir, uint64_t salt, bool write) {
    rp_store_params sp = rp_store_default_params();
    sp.read_only = !write;
    rp_store *s = NULL;
    assert_int_equal(rp_store_open(dir, &sp, &s), RP_OK);
    assert_int_equal(rp_store_bind_salt(s, salt), RP_OK);
    return s;
}

static rp_store *reader(const char *dir, const rp_reuse *e) { return reader_salt(dir, rp_reuse_salt(e), false); }

typedef struct chunk_list {
    uint64_t id[64];
    int32_t n_tokens[64];
    rp_token *toks[64];
    int32_t n;
} chunk_list;

static bool collect(void *user, const rp_store_chunk *c) {
    chunk_list *l = user;
    if (l->n < 64 && c->tokens) {
        l->id[l->n] = c->id;
        l->n_tokens[l->n] = c->n_tokens;
        l->toks[l->n] = malloc(sizeof(rp_token) * (size_t)c->n_tokens);
        memcpy(l->toks[l->n], c->tokens, sizeof(rp_token) * (size_t)c->n_tokens);
        l->n++;
    }
    return true;
}

static void list_free(chunk_list *l) {
    for (int32_t i = 0; i < l->n; i++) free(l->toks[i]);
    l->n = 0;
}

/* The stored chunk holding token run t[0..n) (a document's tokens), or 0. */
static uint64_t chunk_holding(const chunk_list *l, const rp_token *t, int32_t n) {
    for (int32_t i = 0; i < l->n; i++)
        if (l->n_tokens[i] >= 16 && memmem(t, sizeof(rp_token) * (size_t)n, l->toks[i],
                                          sizeof(rp_token) * (size_t)l->n_tokens[i]))
            return l->id[i];
    return 0;
}

static const char *const k_docs[] = {
    "Once upon a time, Zorblax the purple quokka lived in an obsidian lighthouse near Quibbleton harbor. Every "
    "morning Zorblax polished the great lantern and sang songs to the sleepy seagulls on the rocks.",
    "Tom had a red ball. He liked to play with his ball in the park with his friend Sue. One day the ball went "
    "into the pond and Tom was sad, but Sue helped him get it back.",
    "Lily wanted to bake a cake for her mom. She found flour, eggs and sugar in the kitchen. The cake was big and "
    "sweet, and her mom smiled and gave Lily a hug.",
    "A little bird lived in a tall tree. The bird sang every day. One day a cat came to the tree, and the bird "
    "flew away to find a new home in the forest.",
};

/* A preamble the prompt shares with every distractor (as a RAG prompt shares its instructions with the other
 * stored prompts): dozens of tokens in common, so the distractors outrank the document by keywords. */
#define PREAMBLE "You are a helpful assistant who tells short stories for children. Answer kindly, use simple words " \
                 "and keep every story under five sentences.\n"

/* The first document, re-wrapped (line breaks where spaces were) and paraphrased, after the preamble: its rare
 * words, in other runs of tokens. Each prompt opens with its own words, so that no stored prompt is a prefix
 * continuation of another (the preamble is then found inside them, by the sub-chunk search). */
static const char *const k_rewrapped[] = {
    "Question: " PREAMBLE "Tell me about the quokka\nnamed Zorblax,\nwho kept the lighthouse\nof obsidian by\nQuibbleton and its\nseagulls.",
    "Question: " PREAMBLE "Zorblax,\nthe quokka,\nkept an obsidian\nlighthouse by Quibbleton;\nseagulls sang.",
    "Question: " PREAMBLE "In Quibbleton\na quokka called\nZorblax guards\nthe obsidian\nlighthouse.",
};

/* Distractor prompts: the preamble and a story of common words and names of its own (none of the document's). */
static void distractor(int i, char *out, size_t cap) {
    static const char *const animal[] = {"dog", "cat", "bunny", "duck", "frog", "bear", "fox", "pig"};
    static const char *const name[] = {"Max", "Bella", "Sam", "Lucy", "Ben", "Mia", "Leo", "Zoe", "Jack", "Ann"};
    static const char *const verb[] = {"play", "run", "jump", "sing", "dance", "read"};
    static const char *const place[] = {"park", "garden", "house", "school", "forest"};
    snprintf(out, cap, "Story %d: " PREAMBLE "Once upon a time, there was a little %s named %s. %s liked to %s in the %s every day.",
             i, animal[i % 8], name[(i / 8) % 10], name[(i / 8) % 10], verb[i % 6], place[(i / 3) % 5]);
}

#define N_DISTRACT 48

/* A re-wrapped, paraphrased prompt shares no 18-token run (so no keyword is certain) with its document, and
 * indeed no keyword; its rare words still rank the document first among the candidates through terms, whose
 * document frequencies count every stored chunk; the sub-chunk search then reuses the shared runs of at least
 * sub_min tokens, which it misses without terms. */
static void test_rewrapped_found_by_terms(void **state) {
    (void)state;
    OPEN_STORIES(f);
    const char *dir = fresh_dir("sem-terms");
    rp_semantic *sem = semantic(f.m, NULL, 0, true);
    rp_reuse *e = engine(&f, 1.0f, 6, dir, sem);
    cache_text(&f, e, k_docs[0]);
    for (int i = 0; i < N_DISTRACT; i++) {
        char text[512];
        distractor(i, text, sizeof text);
        cache_text(&f, e, text);
    }
    rp_token doc[512], q[512];
    const int32_t nd = tokenize(f.m, k_docs[0], doc, 512);
    rp_store *r = reader(dir, e);
    rp_store_stats ss;
    assert_int_equal(rp_store_stats_get(r, &ss), RP_OK);
    print_message("  %llu chunks, %llu term-indexed, %llu distinct terms\n", (unsigned long long)ss.n_chunks,
                  (unsigned long long)ss.n_term_docs, (unsigned long long)ss.n_terms);
    assert_int_equal(ss.n_term_docs, ss.n_chunks);   /* every chunk written was indexed */
    chunk_list l = {0};
    assert_int_equal(rp_store_foreach(r, collect, &l), RP_OK);
    const uint64_t src = chunk_holding(&l, doc, nd);
    assert_true(src != 0);
    /* the document's terms are counted: "quokka" in one chunk of N, "story"-like words in many */
    int64_t df = 0, N = 0;
    assert_int_equal(rp_store_term_df(r, rp_term_hash("quokka", 6), &df, &N), RP_OK);
    assert_int_equal(df, 1);
    assert_int_equal(N, (int64_t)ss.n_term_docs);
    assert_int_equal(rp_store_term_df(r, rp_term_hash("helpful", 7), &df, &N), RP_OK);
    assert_int_equal(df, N_DISTRACT);
    /* the variant: shares no 18-token run with the document (so no keyword is certain) and ranks it below the
     * distractors (which share the opening) by keywords alone */
    rp_subchunk_query sq = rp_subchunk_default_query(6);
    rp_subchunk_cand cand[32];
    int32_t nc = 0, nq = 0, longest = 0, pick = -1;
    for (size_t v = 0; v < sizeof k_rewrapped / sizeof k_rewrapped[0] && pick < 0; v++) {
        nq = tokenize(f.m, k_rewrapped[v], q, 512);
        rp_sam *sam = NULL;
        assert_int_equal(rp_sam_build(q, nq, &sam), RP_OK);
        rp_lcs_run best;
        longest = rp_lcs_longest(sam, doc, nd, &best);
        rp_sam_free(sam);
        sq.terms = NULL;
        sq.n_terms = 0;
        assert_int_equal(rp_store_subchunk_candidates(r, q, nq, &sq, cand, 32, &nc), RP_OK);
        int32_t rank = -1;
        for (int32_t i = 0; i < nc; i++)
            if (cand[i].id == src) rank = i;
        print_message("  variant %zu: %d tokens, longest common run %d, keywords alone: %d candidates, the "
                      "document's rank %d\n", v, nq, longest, nc, rank);
        assert_true(longest < 18);
        if (rank < 0 && longest >= 6) pick = (int32_t)v;
    }
    assert_true(pick >= 0);
    rp_subchunk_match mt[16];
    int32_t nm = 0;
    assert_int_equal(rp_store_find_subchunks_q(r, q, nq, &sq, mt, 16, &nm), RP_OK);
    for (int32_t i = 0; i < nm; i++) assert_true(mt[i].chunk_id != src);
    const rp_term *terms = NULL;
    const float *vecs = NULL;
    int32_t nt = 0, nv = 0, dim = 0;
    assert_int_equal(rp_semantic_query(sem, q, nq, 256, true, &terms, &nt, &vecs, &nv, &dim), RP_OK);
    assert_true(nt > 0);
    assert_int_equal(nv, 0);   /* no embedding model: terms only */
    sq.terms = terms;
    sq.n_terms = nt;
    assert_int_equal(rp_store_subchunk_candidates(r, q, nq, &sq, cand, 32, &nc), RP_OK);
    assert_true(nc > 0);
    print_message("  with terms: first candidate chunk %llu (the document: %llu), keywords %d, term score %.3f; "
                  "next %.3f + %d keywords\n", (unsigned long long)cand[0].id, (unsigned long long)src,
                  cand[0].kw_votes, cand[0].term_score, nc > 1 ? cand[1].term_score : 0.0f,
                  nc > 1 ? cand[1].kw_votes : 0);
    assert_true(cand[0].id == src);
    /* and the LCS pass over it finds what the prompt shares with the document */
    assert_int_equal(rp_store_find_subchunks_q(r, q, nq, &sq, mt, 16, &nm), RP_OK);
    int32_t from_src = 0;
    for (int32_t i = 0; i < nm; i++)
        if (mt[i].chunk_id == src) from_src += mt[i].len;
    print_message("  with terms: %d matches, %d tokens from the document\n", nm, from_src);
    assert_true(from_src >= 6);
    rp_store_close(r);
    list_free(&l);
    /* the engine: the shared runs are reused with terms, none without */
    rp_token p[1024];
    p[0] = 1;
    memcpy(p + 1, q, sizeof(rp_token) * (size_t)nq);
    const int32_t n = 1 + nq, b[1] = {1};
    int32_t found[2];
    for (int with = 0; with < 2; with++) {
        rp_reuse_set_semantic(e, with ? sem : NULL);
        rp_reuse_stats st;
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b, 1, f.lg_a, &st), RP_OK);
        found[with] = st.n_subchunk;
        print_message("  terms %s: sub-chunk tokens reused %d of %d (search %.2f ms, terms %.2f ms, loaded machine)\n",
                      with ? "on" : "off", st.n_subchunk, n, st.match_ms, st.semantic_ms);
    }
    assert_int_equal(found[1], found[0] + from_src);   /* the document's runs, on top of the preamble */
    /* at r = 1 the result is exact prefill, whatever was reused */
    rp_reuse *none = rp_test_engine(&f, RP_REUSE_NONE, 0, false);
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b, 1, f.lg_a, &st), RP_OK);
    assert_int_equal(rp_reuse_prefill(none, f.ctx, f.kv, p, n, b, 1, f.lg_b, &st), RP_OK);
    assert_true(rp_test_max_diff(f.lg_a, f.lg_b, f.V) <= 1e-4f);
    rp_reuse_free(none);
    rp_reuse_free(e);
    rp_semantic_free(sem);
    rp_test_fixture_close(&f);
}

/* What a stored vector must be: the chunk's text (detokenized) embedded by an independent embedder (mean
 * pooling, not normalised), its first `dim` components, re-normalised. */
static void expected_vector(const rp_model *m, const rp_token *t, int32_t n, int32_t dim, float *out, bool *has) {
    char text[8192];
    size_t len = 0;
    assert_int_equal(rp_detokenize(m, t, n, false, text, sizeof text, &len), RP_OK);
    len = strlen(text);
    *has = len > 0;
    if (!*has) return;
    rp_token et[4096];
    int32_t ne = 0;
    assert_int_equal(rp_embed_tokenize(m, text, len, et, 4096, &ne), RP_OK);
    if (ne > 512) ne = 512;
    rp_embedder_params ep = rp_embedder_default_params();
    ep.pooling = RP_POOLING_MEAN;
    ep.normalize = false;
    ep.n_ctx = 512;
    rp_embedder *em = NULL;
    assert_int_equal(rp_embedder_create(m, &ep, &em), RP_OK);
    const int32_t E = rp_embedder_n_embd(em);
    float *v = malloc(sizeof *v * (size_t)E);
    const rp_token *in[1] = {et};
    size_t got = 0;
    assert_int_equal(rp_embed(em, in, &ne, 1, v, (size_t)E, &got), RP_OK);
    double ss = 0;
    for (int32_t i = 0; i < dim; i++) ss += (double)v[i] * v[i];
    for (int32_t i = 0; i < dim; i++) out[i] = (float)(v[i] / sqrt(ss));
    free(v);
    rp_embedder_free(em);
}

static uint64_t count_vectors(const char *dir, uint64_t salt) {
    rp_store *r = reader_salt(dir, salt, false);
    rp_store_stats ss;
    assert_int_equal(rp_store_stats_get(r, &ss), RP_OK);
    rp_store_close(r);
    return ss.n_vectors;
}

/* With an embedding model (stories260K itself, mean pooling, 64 components cut to 32): every chunk written with
 * text gets its vector — exactly the independent embedding, truncated and re-normalised, of its source —; a
 * query embedding of a document's text finds that document's chunk nearest; the vectors survive a restart and
 * go with their chunk; and through the engine, a short run of a document that shares no keyword is reused once
 * the query vectors bring the document in. */
static void test_vectors_stored_and_found(void **state) {
    (void)state;
    OPEN_STORIES(f);
    const char *dir = fresh_dir("sem-vec");
    rp_semantic *sem = semantic(f.m, f.m, 32, false);
    assert_int_equal(rp_semantic_dim(sem), 32);
    rp_reuse *e = engine(&f, 1.0f, 10, dir, sem);
    const int nd = (int)(sizeof k_docs / sizeof k_docs[0]);
    for (int i = 0; i < nd; i++) cache_text(&f, e, k_docs[i]);
    rp_cache_stats cs = rp_chunk_cache_stats(rp_reuse_cache(e));
    print_message("  indexed %llu chunks in %llu batches: %.3f ms per chunk on the writer thread (detokenize, "
                  "embed; loaded machine)\n", (unsigned long long)cs.indexed, (unsigned long long)cs.index_batches,
                  cs.indexed ? cs.index_ms / (double)cs.indexed : 0.0);
    assert_int_equal(cs.index_failures, 0);
    assert_true(cs.indexed > 0);
    rp_store *r = reader(dir, e);
    chunk_list l = {0};
    assert_int_equal(rp_store_foreach(r, collect, &l), RP_OK);
    assert_int_equal((uint64_t)l.n, cs.indexed);
    int32_t with_vec = 0;
    for (int32_t i = 0; i < l.n; i++) {
        float want[32], got[64];
        bool has = false, found = false;
        expected_vector(f.m, l.toks[i], l.n_tokens[i], 32, want, &has);
        int32_t dim = 0;
        uint64_t src = 0;
        assert_int_equal(rp_store_get_vector(r, l.id[i], got, 64, &dim, &src, &found), RP_OK);
        assert_int_equal(found, has);   /* a chunk of no text (BOS alone) has none */
        if (!has) continue;
        with_vec++;
        assert_int_equal(dim, 32);
        assert_true(src == rp_semantic_vec_src(sem) && src != 0);
        float d = rp_test_max_diff(got, want, 32);
        double norm = 0;
        for (int32_t k = 0; k < 32; k++) norm += (double)got[k] * got[k];
        assert_true(d < 1e-5f);
        assert_true(fabs(norm - 1.0) < 1e-5);
    }
    assert_true(with_vec >= nd);
    /* a query of each document's text: its own chunk is the nearest */
    for (int i = 0; i < nd; i++) {
        rp_token t[512];
        const int32_t n = tokenize(f.m, k_docs[i], t, 512);
        const uint64_t own = chunk_holding(&l, t, n);
        assert_true(own != 0);
        const rp_term *terms;
        const float *qv;
        int32_t nt, nv, dim;
        assert_int_equal(rp_semantic_query(sem, t, n, 256, true, &terms, &nt, &qv, &nv, &dim), RP_OK);
        assert_int_equal(nt, 0);   /* terms off */
        assert_int_equal(nv, 1);
        assert_int_equal(dim, 32);
        uint64_t ids[4];
        float sc[4];
        int32_t k = 0;
        assert_int_equal(rp_store_vector_topk_multi(r, qv, 1, 32, rp_semantic_vec_src(sem), 4, ids, sc, &k), RP_OK);
        print_message("  document %d: nearest chunk %llu (cosine %.4f; own %llu), next %.4f\n", i,
                      (unsigned long long)ids[0], sc[0], (unsigned long long)own, k > 1 ? sc[1] : 0.0f);
        assert_true(ids[0] == own);
        assert_true(sc[0] > 0.999f);
    }
    rp_store_close(r);
    /* the engine: a prompt with 12 tokens of document 3 that share no keyword with its chunk, after 30 of a
     * text never cached; the first offset whose run keywords alone miss */
    rp_token d1[512], d3[512], p[1024];
    const int32_t n1 = tokenize(f.m, "The old wizard counted his silver coins by the fire every night, humming.", d1, 512),
                  n3 = tokenize(f.m, k_docs[3], d3, 512);
    assert_true(n1 >= 30 && n3 >= 40);
    const int32_t b[1] = {1};
    int32_t n = 0, off = -1;
    rp_reuse_stats st;
    rp_reuse_set_semantic(e, NULL);
    for (int32_t o = 0; o + 12 <= n3 && off < 0; o++) {
        n = 0;
        p[n++] = 1;
        memcpy(p + n, d1 + 2, sizeof(rp_token) * 30);
        n += 30;
        memcpy(p + n, d3 + o, sizeof(rp_token) * 12);
        n += 12;
        for (int i = 0; i < 6; i++) p[n++] = (rp_token)(300 + i);
        assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b, 1, f.lg_a, &st), RP_OK);
        if (st.n_subchunk == 0) off = o;
    }
    assert_true(off >= 0);
    rp_reuse_set_semantic(e, sem);
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b, 1, f.lg_a, &st), RP_OK);
    print_message("  vectors on: sub-chunk tokens reused %d (document 3's run at %d; query embedding %.2f ms, "
                  "loaded machine)\n", st.n_subchunk, off, st.semantic_ms);
    assert_true(st.n_subchunk >= 12);
    const uint64_t salt = rp_reuse_salt(e);
    const uint64_t nvec = count_vectors(dir, salt);
    assert_int_equal(nvec, (uint64_t)with_vec);
    rp_reuse_free(e);
    /* a restart: the vectors are still there, and still found */
    e = engine(&f, 1.0f, 10, dir, sem);
    assert_int_equal(count_vectors(dir, salt), nvec);
    assert_int_equal(rp_reuse_prefill(e, f.ctx, f.kv, p, n, b, 1, f.lg_a, &st), RP_OK);
    assert_true(st.n_subchunk >= 12);
    rp_reuse_free(e);
    /* a chunk's delete takes its vector (and its term counts) with it */
    rp_token t0[512];
    const int32_t n0 = tokenize(f.m, k_docs[0], t0, 512);
    const uint64_t gone = chunk_holding(&l, t0, n0);
    rp_store *w = reader_salt(dir, salt, true);
    assert_int_equal(rp_store_delete(w, &gone, 1), RP_OK);
    float v[64];
    int32_t dim = 0;
    uint64_t src = 0;
    bool found = true;
    assert_int_equal(rp_store_get_vector(w, gone, v, 64, &dim, &src, &found), RP_OK);
    assert_false(found);
    uint64_t ok = 0, bad = 0;
    assert_int_equal(rp_store_verify(w, false, NULL, NULL, &ok, &bad), RP_OK);
    assert_int_equal(bad, 0);
    rp_store_close(w);
    assert_int_equal(count_vectors(dir, salt), nvec - 1);
    list_free(&l);
    rp_semantic_free(sem);
    rp_test_fixture_close(&f);
}

/* Terms and vectors only propose candidates: on a workload where they find nothing the keywords did not (the
 * documents' own runs, re-ordered; prompts sharing nothing), every reuse figure and every logit is what the
 * engine without them gives, at r = 1 and at r = 0.25. */
static void test_unchanged_without_new_candidates(void **state) {
    (void)state;
    OPEN_STORIES(f);
    rp_semantic *sem = semantic(f.m, f.m, 32, true);
    for (int ri = 0; ri < 2; ri++) {
        const float r = ri ? 0.25f : 1.0f;
        rp_reuse *a = engine(&f, r, 24, fresh_dir("sem-same-a"), NULL);
        rp_reuse *b = engine(&f, r, 24, fresh_dir("sem-same-b"), sem);
        rp_token docs[6][40], p[1024];
        int32_t bnd[16], nb;
        rp_test_make_docs(docs, 6, 4242);
        rp_test_cache_docs(&f, a, docs, f.lg_a);
        rp_test_cache_docs(&f, b, docs, f.lg_a);
        assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(a)), RP_OK);
        assert_int_equal(rp_chunk_cache_flush(rp_reuse_cache(b)), RP_OK);
        static const int orders[3][4] = {{4, 1, 5, 0}, {2, 3, 0, 1}, {5, 4, 3, 2}};
        static const rp_token tail[] = {300, 301, 302, 303};
        for (int k = 0; k < 4; k++) {
            int32_t n;
            if (k < 3) {
                n = rp_test_build(docs, orders[k], 4, tail, 4, p, bnd, &nb);
            } else {   /* one segment: 10 new tokens, document 2 inside, a tail (the sub-chunk search's case) */
                n = 0;
                p[n++] = 1;
                for (int i = 0; i < 10; i++) p[n++] = (rp_token)(260 + 7 * i);
                memcpy(p + n, docs[2], sizeof(rp_token) * 40);
                n += 40;
                for (int i = 0; i < 6; i++) p[n++] = (rp_token)(300 + i);
                bnd[0] = 1;
                nb = 1;
            }
            rp_reuse_stats sa, sb;
            assert_int_equal(rp_reuse_prefill(a, f.ctx, f.kv, p, n, bnd, nb, f.lg_a, &sa), RP_OK);
            assert_int_equal(rp_reuse_prefill(b, f.ctx, f.kv, p, n, bnd, nb, f.lg_b, &sb), RP_OK);
            print_message("  r=%.2f prompt %d: prefix %d/%d, non-prefix %d/%d, sub-chunk %d/%d, new %d/%d, recomputed "
                          "%d/%d (without / with terms and vectors)\n", (double)r, k, sa.n_prefix, sb.n_prefix,
                          sa.n_nonprefix, sb.n_nonprefix, sa.n_subchunk, sb.n_subchunk, sa.n_new, sb.n_new,
                          sa.n_recomputed, sb.n_recomputed);
            assert_int_equal(sa.n_prefix, sb.n_prefix);
            assert_int_equal(sa.n_nonprefix, sb.n_nonprefix);
            assert_int_equal(sa.n_subchunk, sb.n_subchunk);
            assert_int_equal(sa.n_new, sb.n_new);
            assert_int_equal(sa.n_recomputed, sb.n_recomputed);
            assert_memory_equal(f.lg_a, f.lg_b, sizeof(float) * (size_t)f.V);
            if (k == 3) assert_int_equal(sb.n_subchunk, 40);
        }
        rp_reuse_free(a);
        rp_reuse_free(b);
    }
    rp_semantic_free(sem);
    rp_test_fixture_close(&f);
}

/* The public engine: embed_model needs a store and a loadable file (errors say which), and with both every chunk
 * written is indexed off the request path (rp_engine_stats), a restart included. */
static void test_engine_params(void **state) {
    (void)state;
    const char *mp = stories();
    RP_REQUIRE_SHARED(mp, "models/stories260K.gguf");
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(mp, rp_model_default_params(), &m), RP_OK);
    rp_engine_params ep = rp_engine_default_params();
    assert_true(ep.cache_terms);
    assert_null(ep.embed_model);
    assert_int_equal(ep.embed_dim, 256);
    ep.n_threads = 1;
    ep.embed_model = mp;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "cache_dir"));
    const char *dir = fresh_dir("sem-engine");
    ep.cache_dir = dir;
    ep.embed_model = "/nonexistent/embed.gguf";
    assert_true(rp_engine_create(m, &ep, &e) != RP_OK);
    assert_non_null(strstr(rp_last_error(), "/nonexistent/embed.gguf"));
    ep.embed_model = mp;
    ep.embed_dim = -1;
    assert_int_equal(rp_engine_create(m, &ep, &e), RP_ERR_INVALID_ARG);
    ep.embed_dim = 48;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(rp_engine_create(m, &ep, &e), RP_OK);
        rp_seq *s = NULL;
        assert_int_equal(rp_seq_create(e, &s), RP_OK);
        rp_prompt *p = NULL;
        assert_int_equal(rp_prompt_create(&p), RP_OK);
        const char *text = round ? k_docs[2] : k_docs[1];
        assert_int_equal(rp_prompt_add_text(p, m, text, strlen(text)), RP_OK);
        rp_gen_opts o = rp_gen_default_opts();
        rp_gen_stats st;
        assert_int_equal(rp_seq_prefill(s, p, &o, &st), RP_OK);
        assert_int_equal(rp_seq_commit(s), RP_OK);
        assert_int_equal(rp_engine_flush(e), RP_OK);
        rp_engine_stats es;
        rp_engine_stats_get(e, &es);
        print_message("  round %d: %llu chunks written, %llu indexed in %.2f ms (%.3f ms per chunk, writer thread, "
                      "loaded machine)\n", round, (unsigned long long)es.written, (unsigned long long)es.indexed_chunks,
                      es.index_ms, es.indexed_chunks ? es.index_ms / (double)es.indexed_chunks : 0.0);
        assert_true(es.written > 0);
        assert_int_equal(es.indexed_chunks, es.written);
        assert_int_equal(es.index_failures, 0);
        rp_prompt_free(p);
        rp_seq_free(s);
        rp_engine_free(e);
    }
    rp_cache *c = NULL;
    assert_int_equal(rp_cache_open(dir, false, &c), RP_OK);
    rp_cache_info info;
    assert_int_equal(rp_cache_info_get(c, &info), RP_OK);
    print_message("  store: %llu chunks, %llu vectors, %llu terms in %llu chunks\n", (unsigned long long)info.chunks,
                  (unsigned long long)info.vectors, (unsigned long long)info.terms, (unsigned long long)info.term_docs);
    assert_int_equal(info.term_docs, info.chunks);
    assert_true(info.vectors >= 2 && info.vectors <= info.chunks);
    assert_true(info.terms > 10);
    rp_cache_close(c);
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rewrapped_found_by_terms),
        cmocka_unit_test(test_vectors_stored_and_found),
        cmocka_unit_test(test_unchanged_without_new_candidates),
        cmocka_unit_test(test_engine_params),
    };
    return rp_test_main(tests, NULL, NULL);
}
