/* api_server_support.c — the public calls a serving front end needs beside the engine's (reprise.h, "server support"). */
#include <stdint.h>
#include <stdlib.h>

#include "reprise.h"
#include "core/error.h"
#include "kernels/types.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

uint64_t rp_kv_bytes_per_token(const rp_model *m, rp_kv_type t) {
    if (!m || !m->layers) return 0;
    const rp_hparams *hp = &m->hp;
    return 2 * (uint64_t)hp->n_layer * rp_type_row_size((rp_type)t, hp->n_head_kv * hp->head_dim);
}

/* ---- streaming detokenizer ---- */

struct rp_detokenizer {
    rp_detok d;
    int32_t bound;
};

rp_status rp_detokenizer_create(const rp_model *m, bool render_special, bool at_start, rp_detokenizer **out) {
    *out = NULL;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "detokenizer: no model");
    if (!m->tok) return rp_errorf(RP_ERR_UNSUPPORTED, "detokenizer: model '%s' has no tokenizer", m->name);
    rp_detokenizer *d = calloc(1, sizeof *d);
    if (!d) return rp_errorf(RP_ERR_NOMEM, "detokenizer: out of memory");
    rp_detok_init(&d->d, m->tok, render_special);
    d->d.at_start = at_start;
    const size_t b = rp_detok_bound(m->tok);
    d->bound = b > INT32_MAX ? INT32_MAX : (int32_t)b;
    *out = d;
    return RP_OK;
}

void rp_detokenizer_free(rp_detokenizer *d) { free(d); }

int32_t rp_detokenizer_push(rp_detokenizer *d, rp_token t, char *buf, int32_t cap) {
    if (!d || cap < 0 || (cap > 0 && !buf)) return 0;
    return rp_detok_push(&d->d, t, buf, (size_t)cap);
}

int32_t rp_detokenizer_flush(rp_detokenizer *d, char *buf, int32_t cap) {
    if (!d || cap < 0 || (cap > 0 && !buf)) return 0;
    return rp_detok_flush(&d->d, buf, (size_t)cap);
}

int32_t rp_detokenizer_bound(const rp_detokenizer *d) { return d ? d->bound : 0; }
