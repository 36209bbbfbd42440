/* api_bench.c — the public API's benchmark support: the machine's and a model's figures for throughput reports,
 * and sampling a sequence's logits without generating text (reprise.h, "benchmark support"). */
#include <string.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/cpu.h"
#include "kernels/types.h"


/* Bytes a weight streams per use: packed, or its GGUF rows when the kernel reads those. */
static double weight_bytes(const rp_weight *w) {
    return (double)(w->packed_bytes ? w->packed_bytes : w->row_bytes * (size_t)w->rows);
}

void rp_model_perf_get(const rp_model *m, rp_model_perf *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->main_type = "?";
    out->cpu_level = "?";
    if (!m) return;
    uint64_t bytes[RP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < rp_gguf_n_tensors(m->gguf); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(m->gguf, i);
        if ((unsigned)t->type < RP_TYPE_COUNT) bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int t = 1; t < RP_TYPE_COUNT; t++)
        if (bytes[t] > bytes[best]) best = t;
    const rp_type_traits *tr = rp_type_get_traits(best);
    if (tr) out->main_type = tr->name;
    out->cpu_level = rp_cpu_level_name((rp_cpu_level)m->cpu_level);
    if (!m->layers) return;
    double b = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        const rp_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int k = 0; k < 7; k++) b += weight_bytes(ws[k]);
    }
    out->decode_bytes_per_token = b + weight_bytes(&m->output);
}

rp_status rp_seq_sample(rp_seq *s, const rp_sampler_params *p, rp_token *out) {
    if (!s || !p || !out) return rp_errorf(RP_ERR_INVALID_ARG, "seq: sample: NULL argument");
    *out = -1;
    const float *lg = rp_seq_logits(s);
    if (!lg) return rp_errorf(RP_ERR_INVALID_ARG, "seq: sample: no logits (prefill or feed tokens first)");
    RP_TRY(rp_api_seq_sampler(s, p));
    *out = rp_sampler_sample(s->smp, lg);
    return RP_OK;
}
