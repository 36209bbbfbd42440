/* api_server_support.c — the public calls a serving front end needs beside the engine's (reprise.h, "server support"). */
#include "reprise.h"
#include "kernels/types.h"
#include "model/model.h"

uint64_t rp_kv_bytes_per_token(const rp_model *m, rp_kv_type t) {
    if (!m || !m->layers) return 0;
    const rp_hparams *hp = &m->hp;
    return 2 * (uint64_t)hp->n_layer * rp_type_row_size((rp_type)t, hp->n_head_kv * hp->head_dim);
}
