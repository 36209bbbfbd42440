/* testfix.c — the reuse tests' shared fixture (see testfix.h). */
#include "testfix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool rp_test_fixture_open(rp_test_fixture *f, const char *path, rp_type kv_type, int32_t n_ctx) {
    memset(f, 0, sizeof *f);
    if (rp_model_load(path, rp_model_default_params(), &f->m) != RP_OK) return false;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = n_ctx;
    cp.n_batch = 512;
    cp.n_outputs = 1;
    assert_int_equal(rp_ctx_create(f->m, cp, &f->ctx), RP_OK);
    assert_int_equal(rp_kv_create(f->m, n_ctx, kv_type, &f->kv), RP_OK);
    f->V = f->m->hp.n_vocab;
    f->lg_a = malloc(sizeof(float) * (size_t)f->V);
    f->lg_b = malloc(sizeof(float) * (size_t)f->V);
    assert_non_null(f->lg_a);
    assert_non_null(f->lg_b);
    return true;
}

void rp_test_fixture_close(rp_test_fixture *f) {
    free(f->lg_a);
    free(f->lg_b);
    rp_kv_free(f->kv);
    rp_ctx_free(f->ctx);
    rp_model_free(f->m);
}

rp_reuse *rp_test_engine(const rp_test_fixture *f, rp_reuse_mode mode, float ratio, bool stat) {
    rp_reuse_params p = rp_reuse_default_params();
    p.mode = mode;
    p.ratio = ratio;
    p.static_mode = stat;
    if (stat) { p.static_cfg.L_P = 32; p.static_cfg.L_S = 64; }
    rp_reuse *e = NULL;
    p.kv_cells = f->kv->n_ctx;   /* the fixture's cache (LongRoPE models: its size picks the factors) */
    assert_int_equal(rp_reuse_create(f->m, f->kv->type, 1024, p, &e), RP_OK);
    return e;
}

void rp_test_make_docs(rp_token docs[][40], int nd, uint64_t seed) {
    uint64_t s = seed;
    for (int d = 0; d < nd; d++)
        for (int i = 0; i < 40; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            docs[d][i] = 259 + (rp_token)((s >> 33) % 250);
        }
}

int32_t rp_test_build(rp_token docs[][40], const int *order, int nd, const rp_token *tail, int nt, rp_token *out,
                      int32_t *bounds, int32_t *nb) {
    int32_t n = 0;
    *nb = 0;
    out[n++] = 1;
    for (int i = 0; i < nd; i++) {
        bounds[(*nb)++] = n;
        memcpy(out + n, docs[order[i]], sizeof(rp_token) * 40);
        n += 40;
    }
    if (nt) {
        bounds[(*nb)++] = n;
        memcpy(out + n, tail, sizeof(rp_token) * (size_t)nt);
    }
    return n + nt;
}

void rp_test_cache_docs(rp_test_fixture *f, rp_reuse *e, rp_token docs[][40], float *logits) {
    rp_token p[64];
    int32_t bnd[4], nb;
    rp_reuse_stats st;
    for (int d = 0; d < 6; d++) {
        const int32_t n = rp_test_build(docs, &d, 1, NULL, 0, p, bnd, &nb);
        assert_int_equal(rp_reuse_prefill(e, f->ctx, f->kv, p, n, bnd, nb, logits, &st), RP_OK);
        assert_int_equal(rp_reuse_commit(e, f->kv), RP_OK);
    }
}

double rp_test_k_rel_error(rp_test_fixture *f, rp_reuse *exact, const rp_token *p, int32_t n, const int32_t *bnd,
                           int32_t nb, int32_t layer, int32_t cell0, int32_t n_cells) {
    const int32_t kd = f->kv->kv_dim;
    float *reused = malloc(sizeof(float) * (size_t)kd * (size_t)n_cells), *row = malloc(sizeof(float) * (size_t)kd);
    assert_non_null(reused);
    assert_non_null(row);
    for (int32_t t = 0; t < n_cells; t++) rp_kv_load_row(f->kv, RP_KV_K, layer, cell0 + t, reused + (size_t)t * kd);
    rp_reuse_stats st;
    assert_int_equal(rp_reuse_prefill(exact, f->ctx, f->kv, p, n, bnd, nb, f->lg_b, &st), RP_OK);
    double worst = 0;
    for (int32_t t = 0; t < n_cells; t++) {
        rp_kv_load_row(f->kv, RP_KV_K, layer, cell0 + t, row);
        double num = 0, den = 0;
        for (int32_t i = 0; i < kd; i++) {
            const double e = reused[(size_t)t * kd + i] - row[i];
            num += e * e;
            den += (double)row[i] * row[i];
        }
        worst = fmax(worst, sqrt(num / (den + 1e-30)));
    }
    free(reused);
    free(row);
    return worst;
}
