/* kv.c — per-sequence KV cache storage and row conversion (F32/F16/Q8_0). */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/quant.h"

rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out) {
    *out = NULL;
    if (n_ctx <= 0 || n_ctx > (1 << 24))
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: n_ctx %d not in [1, 16M]", n_ctx);
    if (type != RP_TYPE_F32 && type != RP_TYPE_F16 && type != RP_TYPE_Q8_0)
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: cache type must be f32, f16 or q8_0");
    rp_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return rp_errorf(RP_ERR_NOMEM, "kv: out of memory");
    kv->type = type;
    kv->ew = rp_ew_kernel_select((rp_cpu_level)m->cpu_level);
    kv->n_layer = m->hp.n_layer;
    kv->n_ctx = n_ctx;
    kv->n_head_kv = m->hp.n_head_kv;
    kv->head_dim = m->hp.head_dim;
    kv->kv_dim = m->hp.n_head_kv * m->hp.head_dim;
    if (type == RP_TYPE_Q8_0 && kv->kv_dim % RP_QK8_0 != 0) {
        int32_t kd = kv->kv_dim;
        free(kv);
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: q8_0 cache needs kv_dim %% 32 == 0 (kv_dim is %d)", kd);
    }
    kv->row_bytes = rp_type_row_size(type, kv->kv_dim);
    size_t total = (size_t)kv->n_layer * (size_t)n_ctx * kv->row_bytes;
    /* calloc: untouched cells stay as lazily-zeroed pages, so a large n_ctx
     * costs address space, not RSS, until used. */
    kv->k = calloc(1, total);
    kv->v = calloc(1, total);
    kv->pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!kv->k || !kv->v || !kv->pos) {
        rp_kv_free(kv);
        return rp_errorf(RP_ERR_NOMEM, "kv: cannot allocate %zu bytes for %d cells", 2 * total, n_ctx);
    }
    for (int32_t i = 0; i < n_ctx; i++) kv->pos[i] = -1;
    *out = kv;
    return RP_OK;
}

void rp_kv_free(rp_kv *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv);
}

void rp_kv_truncate(rp_kv *kv, int32_t n) {
    if (n < 0) n = 0;
    for (int32_t i = n; i < kv->n; i++) kv->pos[i] = -1;
    if (n < kv->n) kv->n = n;
}

size_t rp_kv_bytes(const rp_kv *kv) { return 2 * (size_t)kv->n_layer * (size_t)kv->n_ctx * kv->row_bytes; }

void rp_kv_store_row(const rp_kv *kv, uint8_t *dst, const float *src) {
    if (kv->type == RP_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)kv->kv_dim);
    else if (kv->type == RP_TYPE_F16 && kv->ew) kv->ew->f32_to_f16((uint16_t *)(void *)dst, src, kv->kv_dim);
    else rp_quantize_row(kv->type, src, dst, kv->kv_dim);
}

void rp_kv_load_row(const rp_kv *kv, const uint8_t *src, float *dst) {
    if (kv->type == RP_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)kv->kv_dim);
    else if (kv->type == RP_TYPE_F16 && kv->ew) kv->ew->f16_to_f32(dst, (const uint16_t *)(const void *)src, kv->kv_dim);
    else rp_dequantize_row(kv->type, src, dst, kv->kv_dim);
}
