/* kv.c — per-sequence KV cache storage by KV head group, and row conversion (F32/F16/Q8_0). */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/gpu_offload.h"
#include "kernels/quant.h"

/* Heads per group: 1 for F32/F16; for Q8_0 the smallest divisor of n_head_kv
 * whose group is whole 32-element blocks; 0 when there is none. */
static int32_t group_heads(rp_type type, int32_t n_head_kv, int32_t head_dim) {
    if (type != RP_TYPE_Q8_0) return 1;
    for (int32_t gs = 1; gs <= n_head_kv; gs++)
        if (n_head_kv % gs == 0 && ((int64_t)gs * head_dim) % RP_QK8_0 == 0) return gs;
    return 0;
}

static rp_status create(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                        rp_cpu_level cpu_level, int32_t gpu_l0, rp_kv **out) {
    *out = NULL;
    if (n_ctx <= 0 || n_ctx > (1 << 24))
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: n_ctx %d not in [1, 16M]", n_ctx);
    if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: n_layer %d, n_head_kv %d, head_dim %d must be > 0", n_layer,
                         n_head_kv, head_dim);
    if (type != RP_TYPE_F32 && type != RP_TYPE_F16 && type != RP_TYPE_Q8_0)
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: cache type must be f32, f16 or q8_0");
    const int32_t gs = group_heads(type, n_head_kv, head_dim);
    if (gs == 0)
        return rp_errorf(RP_ERR_UNSUPPORTED,
                         "kv: q8_0 cache needs a group of KV heads (dividing n_head_kv %d) of whole 32-element "
                         "blocks; head_dim %d has none",
                         n_head_kv, head_dim);
    rp_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return rp_errorf(RP_ERR_NOMEM, "kv: out of memory");
    kv->type = type;
    kv->ew = rp_ew_kernel_select(cpu_level);
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->kv_dim = n_head_kv * head_dim;
    kv->group_heads = gs;
    kv->n_group = n_head_kv / gs;
    kv->group_bytes = rp_type_row_size(type, gs * head_dim);
    kv->row_bytes = (size_t)kv->n_group * kv->group_bytes;
    kv->gpu_l0 = gpu_l0;
    size_t total = (size_t)gpu_l0 * (size_t)n_ctx * kv->row_bytes;
    if (!total) total = 1;   /* every layer on the GPU */
    /* calloc: untouched cells stay as lazily-zeroed pages, so a large n_ctx
     * costs address space, not RSS, until used. */
    kv->buf[RP_KV_K] = calloc(1, total);
    kv->buf[RP_KV_V] = calloc(1, total);
    kv->pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!kv->buf[RP_KV_K] || !kv->buf[RP_KV_V] || !kv->pos) {
        rp_kv_free(kv);
        return rp_errorf(RP_ERR_NOMEM, "kv: cannot allocate %zu bytes for %d cells", 2 * total, n_ctx);
    }
    for (int32_t i = 0; i < n_ctx; i++) kv->pos[i] = -1;
    *out = kv;
    return RP_OK;
}

rp_status rp_kv_create_shape(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                             rp_cpu_level cpu_level, rp_kv **out) {
    return create(n_layer, n_head_kv, head_dim, n_ctx, type, cpu_level, n_layer, out);
}

rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out) {
    if (!m->gpu)
        return create(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, n_ctx, type, (rp_cpu_level)m->cpu_level,
                      m->hp.n_layer, out);
    *out = NULL;
    if (type != RP_TYPE_F16)
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: the GPU layers' KV cache is f16 only (%d layers offloaded): use "
                                             "--kv-type f16, or -ngl 0 / --no-gpu for a %s cache",
                         m->hp.n_layer - m->gpu_first, type == RP_TYPE_Q8_0 ? "q8_0" : "f32");
    rp_kv *kv = NULL;
    RP_TRY(create(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, n_ctx, type, (rp_cpu_level)m->cpu_level,
                  m->gpu_first, &kv));
    rp_status st = rp_gpu_kv_create(m->gpu, n_ctx, &kv->gpu);
    if (st == RP_OK) {
        kv->gpu_enc = malloc(kv->row_bytes);
        if (!kv->gpu_enc) st = rp_errorf(RP_ERR_NOMEM, "kv: out of memory");
    }
    if (st != RP_OK) {
        rp_kv_free(kv);
        return st;
    }
    *out = kv;
    return RP_OK;
}

void rp_kv_free(rp_kv *kv) {
    if (!kv) return;
    free(kv->buf[RP_KV_K]);
    free(kv->buf[RP_KV_V]);
    free(kv->pos);
    rp_gpu_kv_free(kv->gpu);
    free(kv->gpu_enc);
    free(kv);
}

void rp_kv_truncate(rp_kv *kv, int32_t n) {
    if (n < 0) n = 0;
    for (int32_t i = n; i < kv->n; i++) kv->pos[i] = -1;
    if (n < kv->n) kv->n = n;
}

size_t rp_kv_bytes(const rp_kv *kv) { return 2 * (size_t)kv->n_layer * (size_t)kv->n_ctx * kv->row_bytes; }

/* A GPU layer: its cells are on the device, row-major (the chunk format's rows). */
#define ON_GPU(kv, layer) ((layer) >= (kv)->gpu_l0)
#define GL(kv, layer) ((layer) - (kv)->gpu_l0)

/* n elements: F32 copied, F16 / Q8_0 converted (n a whole number of blocks). */
static void encode(const rp_kv *kv, uint8_t *dst, const float *src, int32_t n) {
    if (kv->type == RP_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)n);
    else if (kv->type == RP_TYPE_F16 && kv->ew) kv->ew->f32_to_f16((uint16_t *)(void *)dst, src, n);
    else rp_quantize_row(kv->type, src, dst, n);
}

static void decode(const rp_kv *kv, const uint8_t *src, float *dst, int32_t n) {
    if (kv->type == RP_TYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)n);
    else if (kv->type == RP_TYPE_F16 && kv->ew) kv->ew->f16_to_f32(dst, (const uint16_t *)(const void *)src, n);
    else rp_dequantize_row(kv->type, src, dst, n);
}

void rp_kv_encode_row(const rp_kv *kv, uint8_t *dst, const float *src) { encode(kv, dst, src, kv->kv_dim); }
void rp_kv_decode_row(const rp_kv *kv, const uint8_t *src, float *dst) { decode(kv, src, dst, kv->kv_dim); }

/* Group g's elements are [g * ge, (g + 1) * ge) of a row: Q8_0 groups are whole
 * blocks, so converting group by group gives the bytes of the whole row. */
void rp_kv_store_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, const float *src) {
    if (ON_GPU(kv, layer)) {
        encode(kv, kv->gpu_enc, src, kv->kv_dim);
        rp_gpu_kv_write(kv->gpu, (int)part, GL(kv, layer), cell, 1, kv->gpu_enc);
        return;
    }
    const int32_t ge = kv->group_heads * kv->head_dim;
    for (int32_t g = 0; g < kv->n_group; g++)
        encode(kv, rp_kv_group(kv, part, layer, g, cell), src + (size_t)g * (size_t)ge, ge);
}

void rp_kv_load_row(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell, float *dst) {
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_read(kv->gpu, (int)part, GL(kv, layer), cell, 1, kv->gpu_enc);
        decode(kv, kv->gpu_enc, dst, kv->kv_dim);
        return;
    }
    const int32_t ge = kv->group_heads * kv->head_dim;
    for (int32_t g = 0; g < kv->n_group; g++)
        decode(kv, rp_kv_group(kv, part, layer, g, cell), dst + (size_t)g * (size_t)ge, ge);
}

void rp_kv_read_rows(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, uint8_t *dst) {
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_read(kv->gpu, (int)part, GL(kv, layer), cell0, n, dst);
        return;
    }
    const size_t gb = kv->group_bytes, rb = kv->row_bytes;
    if (kv->n_group == 1) {
        memcpy(dst, rp_kv_group(kv, part, layer, 0, cell0), gb * (size_t)n);
        return;
    }
    for (int32_t g = 0; g < kv->n_group; g++) {
        const uint8_t *s = rp_kv_group(kv, part, layer, g, cell0);
        uint8_t *d = dst + (size_t)g * gb;
        for (int32_t t = 0; t < n; t++, s += gb, d += rb) memcpy(d, s, gb);
    }
}

void rp_kv_write_rows(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, const uint8_t *src) {
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_write(kv->gpu, (int)part, GL(kv, layer), cell0, n, src);
        return;
    }
    const size_t gb = kv->group_bytes, rb = kv->row_bytes;
    if (kv->n_group == 1) {
        memcpy(rp_kv_group(kv, part, layer, 0, cell0), src, gb * (size_t)n);
        return;
    }
    for (int32_t g = 0; g < kv->n_group; g++) {
        uint8_t *d = rp_kv_group(kv, part, layer, g, cell0);
        const uint8_t *s = src + (size_t)g * gb;
        for (int32_t t = 0; t < n; t++, s += rb, d += gb) memcpy(d, s, gb);
    }
}

void rp_kv_move_cells(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t dst, int32_t src, int32_t n) {
    if (n <= 0 || dst == src) return;
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_move(kv->gpu, (int)part, GL(kv, layer), dst, src, n);
        return;
    }
    for (int32_t g = 0; g < kv->n_group; g++)
        memmove(rp_kv_group(kv, part, layer, g, dst), rp_kv_group(kv, part, layer, g, src), kv->group_bytes * (size_t)n);
}

rp_status rp_kv_copy(rp_kv *dst, const rp_kv *src) {
    if (!dst || !src) return rp_errorf(RP_ERR_INVALID_ARG, "kv: copy of a NULL cache");
    if (dst == src) return RP_OK;
    if (dst->type != src->type || dst->n_layer != src->n_layer || dst->n_head_kv != src->n_head_kv ||
        dst->head_dim != src->head_dim || dst->group_heads != src->group_heads || dst->n_ctx < src->n ||
        dst->gpu_l0 != src->gpu_l0 || !dst->gpu != !src->gpu)
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: copy of %d cells into a cache of another shape or %d cells", src->n,
                         dst->n_ctx);
    const size_t bytes = src->group_bytes * (size_t)src->n;   /* one group's cells of one layer are contiguous */
    for (int p = 0; p < 2; p++)
        for (int32_t l = 0; l < src->gpu_l0; l++)
            for (int32_t g = 0; g < src->n_group; g++)
                memcpy(rp_kv_group(dst, (rp_kv_part)p, l, g, 0), rp_kv_group(src, (rp_kv_part)p, l, g, 0), bytes);
    if (src->gpu) RP_TRY(rp_gpu_kv_copy(dst->gpu, src->gpu, src->n));
    memcpy(dst->pos, src->pos, sizeof *dst->pos * (size_t)src->n);
    for (int32_t i = src->n; i < dst->n; i++) dst->pos[i] = -1;
    dst->n = src->n;
    return RP_OK;
}
