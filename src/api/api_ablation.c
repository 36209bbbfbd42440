/* api_ablation.c — benchmark support of the public API: filler rows that give a fresh store a long-lived one's size. */
#include <stdlib.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "kernels/types.h"
#include "reuse/chunk.h"
#include "store/store.h"

#define FILLER_SALT 0xf111e2f111e2f111ULL
#define FILLER_TOK 16
#define FILLER_ROW 16   /* bytes per K / V row of the filler model: 512-byte payloads */

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

rp_status rp_cache_add_filler(const char *dir, bool naive, int64_t n, uint64_t seed) {
    if (!dir || !*dir) return rp_errorf(RP_ERR_INVALID_ARG, "cache filler: no store directory");
    if (n < 0) return rp_errorf(RP_ERR_INVALID_ARG, "cache filler: %lld rows", (long long)n);
    rp_store_params sp = rp_store_default_params();
    sp.naive = naive;
    rp_store *s = NULL;
    RP_TRY(rp_store_open(dir, &sp, &s));
    rp_status st = rp_store_bind_model(s, FILLER_SALT, RP_TYPE_F16, 1, FILLER_ROW, "ablation-filler", true);
    const int32_t B = 5000;
    rp_store_put_item *it = calloc((size_t)B, sizeof *it);
    rp_token *toks = malloc(sizeof(rp_token) * (size_t)B * FILLER_TOK);
    static const uint8_t kv[2 * FILLER_TOK * FILLER_ROW];   /* zeros: content is irrelevant */
    if (st == RP_OK && (!it || !toks)) st = rp_errorf(RP_ERR_NOMEM, "cache filler: out of memory");
    uint64_t r = seed * 0x2545f4914f6cdd1dULL + 3, id = st == RP_OK ? rp_store_next_id(s) : 0, chain = 0;
    for (int64_t base = 0; st == RP_OK && base < n; base += B) {
        const int32_t cnt = n - base < B ? (int32_t)(n - base) : B;
        for (int32_t j = 0; j < cnt; j++) {
            rp_token *t = toks + (size_t)j * FILLER_TOK;
            for (int k = 0; k < FILLER_TOK; k++) t[k] = (rp_token)(rng(&r) % 32000);
            const bool root = (base + j) % 8 == 0;
            const uint64_t h = rp_chunk_hash(t, FILLER_TOK, FILLER_SALT);
            chain = rp_chunk_chain(root ? 0 : chain, h);
            it[j] = (rp_store_put_item){0};
            it[j].meta = (rp_store_chunk){.id = id, .hash = h, .chain = chain, .parent_id = root ? 0 : id - 1,
                                          .n_tokens = FILLER_TOK, .exact = true, .recompute_ms = 0.01};
            it[j].tokens = t;
            it[j].kv = kv;
            id++;
        }
        st = rp_store_put(s, it, cnt, 0);
        for (int32_t j = 0; st == RP_OK && j < cnt; j++) st = it[j].status;
    }
    free(it);
    free(toks);
    rp_store_close(s);
    return st;
}
