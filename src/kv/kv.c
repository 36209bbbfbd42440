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

uint64_t rp_kv_shape_bytes(int32_t n_layer, const int32_t *windows, size_t row_bytes, int32_t n_ctx, int32_t swa_cells) {
    const bool ring = swa_cells > 0 && swa_cells < n_ctx;
    uint64_t cells = 0;
    for (int32_t l = 0; l < n_layer; l++) cells += (uint64_t)(ring && windows && windows[l] > 0 ? swa_cells : n_ctx);
    return 2 * cells * (uint64_t)row_bytes;
}

/* Layers [gpu_l0, n_layer) are left to the GPU part (no CPU buffer; a model with GPU layers has no window). */
static rp_status create(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                        rp_cpu_level cpu_level, const int32_t *windows, int32_t swa_cells, int32_t gpu_l0,
                        rp_kv **out) {
    *out = NULL;
    if (n_ctx <= 0 || n_ctx > (1 << 24))
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: n_ctx %d not in [1, 16M]", n_ctx);
    if (n_layer <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: n_layer %d, n_head_kv %d, head_dim %d must be > 0", n_layer,
                         n_head_kv, head_dim);
    if (swa_cells < 0) return rp_errorf(RP_ERR_INVALID_ARG, "kv: swa_cells %d negative", swa_cells);
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
    kv->swa_cells = swa_cells > 0 && swa_cells < n_ctx ? swa_cells : n_ctx;
    kv->gpu_l0 = gpu_l0;
    kv->window = calloc((size_t)n_layer, sizeof *kv->window);
    kv->ring = calloc((size_t)n_layer, sizeof *kv->ring);
    kv->base = calloc((size_t)n_layer, sizeof *kv->base);
    kv->layer_off = calloc((size_t)n_layer, sizeof *kv->layer_off);
    kv->pos = malloc(sizeof(int32_t) * (size_t)n_ctx);
    size_t total = 0;
    if (kv->window && kv->ring && kv->base && kv->layer_off)
        for (int32_t l = 0; l < n_layer; l++) {
            kv->window[l] = windows && windows[l] > 0 ? windows[l] : 0;
            kv->ring[l] = kv->window[l] > 0 && kv->swa_cells < n_ctx;
            kv->n_ring += kv->ring[l];
            kv->layer_off[l] = total;
            if (l < gpu_l0) total += (size_t)rp_kv_layer_cap(kv, l) * kv->row_bytes;
        }
    if (!total) total = 1;   /* every layer on the GPU */
    /* calloc: untouched cells stay as lazily-zeroed pages, so a large n_ctx
     * costs address space, not RSS, until used. */
    if (kv->window && kv->ring && kv->base && kv->layer_off && kv->pos) {
        kv->buf[RP_KV_K] = calloc(1, total);
        kv->buf[RP_KV_V] = calloc(1, total);
    }
    if (!kv->buf[RP_KV_K] || !kv->buf[RP_KV_V] || !kv->pos || !kv->window || !kv->ring || !kv->base || !kv->layer_off) {
        rp_kv_free(kv);
        return rp_errorf(RP_ERR_NOMEM, "kv: cannot allocate %zu bytes for %d cells", 2 * total, n_ctx);
    }
    for (int32_t i = 0; i < n_ctx; i++) kv->pos[i] = -1;
    *out = kv;
    return RP_OK;
}

rp_status rp_kv_create_shape(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                             rp_cpu_level cpu_level, rp_kv **out) {
    return rp_kv_create_shape_swa(n_layer, n_head_kv, head_dim, n_ctx, type, cpu_level, NULL, 0, out);
}

rp_status rp_kv_create_shape_swa(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t n_ctx, rp_type type,
                                 rp_cpu_level cpu_level, const int32_t *windows, int32_t swa_cells, rp_kv **out) {
    return create(n_layer, n_head_kv, head_dim, n_ctx, type, cpu_level, windows, swa_cells, n_layer, out);
}

/* The model's per-layer windows into w[n_layer]; false when it has no sliding-window layer. */
static bool model_windows(const rp_model *m, int32_t *w) {
    bool any = false;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        w[l] = m->layers ? m->layers[l].window : 0;
        any = any || w[l] > 0;
    }
    return any;
}

rp_status rp_kv_create_swa(const rp_model *m, int32_t n_ctx, rp_type type, int32_t swa_cells, rp_kv **out) {
    *out = NULL;
    if (m->hp.n_layer <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "kv: model has no layers");
    int32_t *w = calloc((size_t)m->hp.n_layer, sizeof *w);
    if (!w) return rp_errorf(RP_ERR_NOMEM, "kv: out of memory");
    const bool any = model_windows(m, w);
    if (m->gpu && any) {   /* the model refuses GPU layers with a window: never reached */
        free(w);
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: sliding-window layers cannot be offloaded to the GPU");
    }
    if (m->gpu && type != RP_TYPE_F16 && type != RP_TYPE_Q8_0) {
        free(w);
        return rp_errorf(RP_ERR_UNSUPPORTED, "kv: the GPU layers' KV cache is f16 or q8_0 (%d layers offloaded): use "
                                             "--kv-type f16 / q8_0, or -ngl 0 / --no-gpu for an f32 cache",
                         m->hp.n_layer - m->gpu_first);
    }
    rp_kv *kv = NULL;
    rp_status st = create(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, n_ctx, type, (rp_cpu_level)m->cpu_level,
                          w, any ? swa_cells : 0, m->gpu ? m->gpu_first : m->hp.n_layer, &kv);
    free(w);
    if (st == RP_OK) kv->rope_long = rp_model_rope_long(m, n_ctx);
    if (st != RP_OK || !m->gpu) {
        *out = kv;
        return st;
    }
    st = rp_gpu_kv_create(m->gpu, n_ctx, type, &kv->gpu);
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

rp_status rp_kv_create(const rp_model *m, int32_t n_ctx, rp_type type, rp_kv **out) {
    return rp_kv_create_swa(m, n_ctx, type, 0, out);
}

int32_t rp_kv_swa_cells(const rp_model *m, int32_t n_batch) {
    if (!m || !m->layers) return 0;
    int32_t w = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].window > w) w = m->layers[l].window;
    if (w <= 0) return 0;
    const int64_t c = (int64_t)w + (n_batch > 0 ? n_batch : 1);
    return c > INT32_MAX ? INT32_MAX : (int32_t)c;
}

void rp_kv_free(rp_kv *kv) {
    if (!kv) return;
    free(kv->buf[RP_KV_K]);
    free(kv->buf[RP_KV_V]);
    free(kv->pos);
    free(kv->window);
    free(kv->ring);
    free(kv->base);
    free(kv->layer_off);
    rp_gpu_kv_free(kv->gpu);
    free(kv->gpu_enc);
    free(kv);
}

void rp_kv_truncate(rp_kv *kv, int32_t n) {
    if (n < 0) n = 0;
    for (int32_t i = n; i < kv->n; i++) kv->pos[i] = -1;
    if (n < kv->n) kv->n = n;
    /* a ring that held nothing below n restarts at n (a row there then finds its window gone, unless n = 0) */
    for (int32_t l = 0; kv->n_ring && l < kv->n_layer; l++)
        if (kv->ring[l] && kv->base[l] > kv->n) kv->base[l] = kv->n;
}

size_t rp_kv_bytes(const rp_kv *kv) {
    size_t cells = 0;
    for (int32_t l = 0; l < kv->n_layer; l++) cells += (size_t)rp_kv_layer_cap(kv, l);
    return 2 * cells * kv->row_bytes;
}

int32_t rp_kv_held_lo(const rp_kv *kv) {
    int32_t lo = 0;
    for (int32_t l = 0; kv->n_ring && l < kv->n_layer; l++)
        if (kv->ring[l] && kv->base[l] > lo) lo = kv->base[l];
    return lo;
}

bool rp_kv_can_resume(const rp_kv *kv, int32_t n) {
    for (int32_t l = 0; kv->n_ring && l < kv->n_layer; l++) {
        if (!kv->ring[l]) continue;
        const int64_t need = (int64_t)n - kv->window[l] + 1;
        if ((need > 0 ? need : 0) < kv->base[l]) return false;
    }
    return true;
}

void rp_kv_slide(rp_kv *kv, int32_t layer, int32_t new_base) {
    if (!kv->ring[layer] || new_base <= kv->base[layer]) return;
    const int32_t cap = kv->swa_cells, k = new_base - kv->base[layer];
    if (k < cap)
        for (int p = 0; p < 2; p++)
            for (int32_t g = 0; g < kv->n_group; g++) {
                uint8_t *s0 = kv->buf[p] + kv->layer_off[layer] + (size_t)g * (size_t)cap * kv->group_bytes;
                memmove(s0, s0 + (size_t)k * kv->group_bytes, (size_t)(cap - k) * kv->group_bytes);
            }
    kv->base[layer] = new_base;
}

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
    if (kv->ring[layer] && !rp_kv_holds(kv, layer, cell)) return;   /* a ring layer's cell it does not hold */
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
    if (kv->ring[layer] && !rp_kv_holds(kv, layer, cell)) {
        memset(dst, 0, sizeof(float) * (size_t)kv->kv_dim);
        return;
    }
    const int32_t ge = kv->group_heads * kv->head_dim;
    for (int32_t g = 0; g < kv->n_group; g++)
        decode(kv, rp_kv_group(kv, part, layer, g, cell), dst + (size_t)g * (size_t)ge, ge);
}

/* Rows [t0, t1) of a cells-[cell0, ...) transfer, on cells the layer holds (contiguous slots). */
static void rows_io(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t t0, int32_t t1, uint8_t *rows,
                    bool to_kv) {
    const size_t gb = kv->group_bytes, rb = kv->row_bytes;
    const int32_t n = t1 - t0;
    if (n <= 0) return;
    if (kv->n_group == 1) {
        uint8_t *c = rp_kv_group(kv, part, layer, 0, cell0 + t0), *r = rows + (size_t)t0 * rb;
        if (to_kv) memcpy(c, r, gb * (size_t)n);
        else memcpy(r, c, gb * (size_t)n);
        return;
    }
    for (int32_t g = 0; g < kv->n_group; g++) {
        uint8_t *c = rp_kv_group(kv, part, layer, g, cell0 + t0);
        uint8_t *r = rows + (size_t)t0 * rb + (size_t)g * gb;
        for (int32_t t = 0; t < n; t++, c += gb, r += rb) {
            if (to_kv) memcpy(c, r, gb);
            else memcpy(r, c, gb);
        }
    }
}

/* The part [t0, t1) of cells [cell0, cell0 + n) the layer holds. */
static void held_part(const rp_kv *kv, int32_t layer, int32_t cell0, int32_t n, int32_t *t0, int32_t *t1) {
    if (!kv->ring[layer]) { *t0 = 0; *t1 = n; return; }
    const int64_t lo = (int64_t)kv->base[layer] - cell0, hi = lo + kv->swa_cells;
    *t0 = lo > 0 ? (lo < n ? (int32_t)lo : n) : 0;
    *t1 = hi < n ? (hi > *t0 ? (int32_t)hi : *t0) : n;
}

void rp_kv_read_rows(const rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, uint8_t *dst) {
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_read(kv->gpu, (int)part, GL(kv, layer), cell0, n, dst);
        return;
    }
    int32_t t0, t1;
    held_part(kv, layer, cell0, n, &t0, &t1);
    if (t0 > 0) memset(dst, 0, (size_t)t0 * kv->row_bytes);
    if (t1 < n) memset(dst + (size_t)t1 * kv->row_bytes, 0, (size_t)(n - t1) * kv->row_bytes);
    rows_io(kv, part, layer, cell0, t0, t1, dst, false);
}

void rp_kv_write_rows(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t cell0, int32_t n, const uint8_t *src) {
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_write(kv->gpu, (int)part, GL(kv, layer), cell0, n, src);
        return;
    }
    if (kv->ring[layer] && (int64_t)cell0 + n > (int64_t)kv->base[layer] + kv->swa_cells)
        rp_kv_slide(kv, layer, cell0 + n - kv->swa_cells);   /* keep the last cells written */
    int32_t t0, t1;
    held_part(kv, layer, cell0, n, &t0, &t1);
    rows_io(kv, part, layer, cell0, t0, t1, (uint8_t *)(uintptr_t)src, true);
}

void rp_kv_move_cells(rp_kv *kv, rp_kv_part part, int32_t layer, int32_t dst, int32_t src, int32_t n) {
    if (n <= 0 || dst == src) return;
    if (ON_GPU(kv, layer)) {
        rp_gpu_kv_move(kv->gpu, (int)part, GL(kv, layer), dst, src, n);
        return;
    }
    if (!kv->ring[layer]) {
        for (int32_t g = 0; g < kv->n_group; g++)
            memmove(rp_kv_group(kv, part, layer, g, dst), rp_kv_group(kv, part, layer, g, src),
                    kv->group_bytes * (size_t)n);
        return;
    }
    /* a ring layer: slots move (or base does) so the held cells follow the move. K and V move in two calls,
     * so base changes on the second one (V, the part rerotate moves last) only, after both moved */
    const int32_t cap = kv->swa_cells, b = kv->base[layer];
    int32_t from, to, cnt, nb = b;
    if (dst > src) {   /* a move up: cells both ends hold, from the top down */
        for (int32_t t = n - 1; t >= 0; t--)
            if (rp_kv_holds(kv, layer, src + t) && rp_kv_holds(kv, layer, dst + t))
                for (int32_t g = 0; g < kv->n_group; g++)
                    memcpy(rp_kv_group(kv, part, layer, g, dst + t), rp_kv_group(kv, part, layer, g, src + t),
                           kv->group_bytes);
        return;
    }
    if (b <= dst) {            /* the held range starts below dst: slots move down by src - dst */
        from = src - b;
        to = dst - b;
        cnt = src < b + cap ? (n < b + cap - src ? n : b + cap - src) : 0;
    } else if (b >= src) {     /* every held cell moves: only base does */
        from = to = cnt = 0;
        nb = b - (src - dst);
    } else {                   /* dst < base < src: the held cells from src on move to slot 0, base to dst */
        from = src - b;
        to = 0;
        cnt = b + cap - src < n ? b + cap - src : n;
        nb = dst;
    }
    if (cnt > 0)
        for (int32_t g = 0; g < kv->n_group; g++) {
            uint8_t *s0 = kv->buf[part] + kv->layer_off[layer] + (size_t)g * (size_t)cap * kv->group_bytes;
            memmove(s0 + (size_t)to * kv->group_bytes, s0 + (size_t)from * kv->group_bytes, (size_t)cnt * kv->group_bytes);
        }
    if (part == RP_KV_V) kv->base[layer] = nb;
}

rp_status rp_kv_copy(rp_kv *dst, const rp_kv *src) {
    if (!dst || !src) return rp_errorf(RP_ERR_INVALID_ARG, "kv: copy of a NULL cache");
    if (dst == src) return RP_OK;
    bool same_ring = dst->n_ring == src->n_ring && (src->n_ring == 0 || dst->swa_cells == src->swa_cells);
    for (int32_t l = 0; same_ring && l < src->n_layer && l < dst->n_layer; l++) same_ring = dst->ring[l] == src->ring[l];
    if (dst->type != src->type || dst->n_layer != src->n_layer || dst->n_head_kv != src->n_head_kv ||
        dst->head_dim != src->head_dim || dst->group_heads != src->group_heads || dst->n_ctx < src->n || !same_ring ||
        dst->gpu_l0 != src->gpu_l0 || !dst->gpu != !src->gpu || dst->rope_long != src->rope_long)
        return rp_errorf(RP_ERR_INVALID_ARG, "kv: copy of %d cells into a cache of another shape or %d cells", src->n,
                         dst->n_ctx);
    for (int p = 0; p < 2; p++)
        for (int32_t l = 0; l < src->gpu_l0; l++) {
            /* one group's held cells of one layer are contiguous */
            const int32_t b = src->base[l], cap = rp_kv_layer_cap(src, l);
            const int32_t top = src->n < b + cap ? src->n : b + cap;
            if (p == 0) dst->base[l] = b;
            if (top <= b) continue;
            const size_t bytes = src->group_bytes * (size_t)(top - b);
            for (int32_t g = 0; g < src->n_group; g++)
                memcpy(rp_kv_group(dst, (rp_kv_part)p, l, g, b), rp_kv_group(src, (rp_kv_part)p, l, g, b), bytes);
        }
    if (src->gpu) RP_TRY(rp_gpu_kv_copy(dst->gpu, src->gpu, src->n));
    memcpy(dst->pos, src->pos, sizeof *dst->pos * (size_t)src->n);
    for (int32_t i = src->n; i < dst->n; i++) dst->pos[i] = -1;
    dst->n = src->n;
    return RP_OK;
}
