/* gpu_none.c — the GPU backend when the build has none (RP_VULKAN off, or no Vulkan headers / glslc): every
 * entry point says so. */
#include "core/error.h"
#include "gpu/gpu.h"
#include "gpu/gpu_split.h"

#define NOT_BUILT rp_errorf(RP_ERR_UNSUPPORTED, "gpu: Vulkan backend not built (configure with -DRP_VULKAN=ON; " \
                                                "needs libvulkan-dev and glslc)")

rp_gpu_params rp_gpu_default_params(void) { return (rp_gpu_params){0}; }
rp_status rp_gpu_enumerate(rp_gpu_desc *out, int32_t cap, int32_t *n_out) {
    (void)out; (void)cap;
    if (n_out) *n_out = 0;
    return NOT_BUILT;
}
rp_status rp_gpu_create(const rp_gpu_params *p, rp_gpu **out) {
    (void)p;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_free(rp_gpu *g) { (void)g; }
const rp_gpu_desc *rp_gpu_device(const rp_gpu *g) { (void)g; return NULL; }
rp_status rp_gpu_buf_create(rp_gpu *g, size_t bytes, rp_gpu_mem mem, rp_gpu_buf **out) {
    (void)g; (void)bytes; (void)mem;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_buf_free(rp_gpu_buf *b) { (void)b; }
size_t rp_gpu_buf_size(const rp_gpu_buf *b) { (void)b; return 0; }
void *rp_gpu_buf_map(rp_gpu_buf *b) { (void)b; return NULL; }
rp_status rp_gpu_buf_write(rp_gpu_buf *b, size_t off, const void *src, size_t n) {
    (void)b; (void)off; (void)src; (void)n;
    return NOT_BUILT;
}
rp_status rp_gpu_buf_read(rp_gpu_buf *b, size_t off, void *dst, size_t n) {
    (void)b; (void)off; (void)dst; (void)n;
    return NOT_BUILT;
}
rp_status rp_gpu_kernel_create(rp_gpu *g, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                               int n_spec, rp_gpu_kernel **out) {
    (void)g; (void)name; (void)n_bufs; (void)push_bytes; (void)spec; (void)n_spec;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_kernel_free(rp_gpu_kernel *k) { (void)k; }
rp_status rp_gpu_rec_create(rp_gpu *g, int32_t max_dispatches, rp_gpu_rec **out) {
    (void)g; (void)max_dispatches;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_rec_free(rp_gpu_rec *r) { (void)r; }
rp_status rp_gpu_rec_begin(rp_gpu_rec *r) { (void)r; return NOT_BUILT; }
rp_status rp_gpu_rec_dispatch(rp_gpu_rec *r, const rp_gpu_kernel *k, rp_gpu_buf *const *bufs, const void *push,
                              uint32_t gx, uint32_t gy, uint32_t gz) {
    (void)r; (void)k; (void)bufs; (void)push; (void)gx; (void)gy; (void)gz;
    return NOT_BUILT;
}
rp_status rp_gpu_rec_copy(rp_gpu_rec *r, rp_gpu_buf *src, size_t src_off, rp_gpu_buf *dst, size_t dst_off,
                          size_t n) {
    (void)r; (void)src; (void)src_off; (void)dst; (void)dst_off; (void)n;
    return NOT_BUILT;
}
rp_status rp_gpu_rec_submit(rp_gpu_rec *r, uint64_t *ticket) {
    (void)r;
    if (ticket) *ticket = 0;
    return NOT_BUILT;
}
rp_status rp_gpu_rec_wait(rp_gpu_rec *r) { (void)r; return NOT_BUILT; }
rp_status rp_gpu_wait(rp_gpu *g, uint64_t ticket) { (void)g; (void)ticket; return NOT_BUILT; }

/* gpu_ops.h: no kernels without the backend */
rp_status rp_gpu_ops_create(rp_gpu *g, rp_gpu_ops **out) {
    (void)g;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_ops_free(rp_gpu_ops *o) { (void)o; }

/* gpu_split.h (its cut and calibration are device-independent: split.c) */
rp_status rp_split_create(rp_gpu *g, rp_gpu_ops *ops, rp_pool *pool, rp_split **out) {
    (void)g; (void)ops; (void)pool;
    if (out) *out = NULL;
    return NOT_BUILT;
}
void rp_split_free(rp_split *s) { (void)s; }
void rp_split_set_cpu_hook(rp_split *s, void (*fn)(void *user), void *user) { (void)s; (void)fn; (void)user; }
rp_status rp_split_mm(rp_split *s, const rp_split_mm_args *a, rp_split_times *t) {
    (void)s; (void)a; (void)t;
    return NOT_BUILT;
}

/* ---- the offload (gpu_offload.h): without the backend a model runs on the CPU; a GPU asked for is an error ---- */
#include <stdio.h>
#include <stdlib.h>

#include "gpu/gpu_offload.h"

rp_status rp_gpu_offload_create(const struct rp_model *m, int32_t n_layers, const char *device, rp_gpu_offload **out,
                                char *notice, size_t cap) {
    (void)m;
    *out = NULL;
    const char *env = getenv("RP_GPU_DEVICE");
    if (n_layers > 0 || (device && *device) || (env && *env)) return NOT_BUILT;
    if (notice && cap) snprintf(notice, cap, "gpu: CPU only (%s)", n_layers == 0 ? "0 layers offloaded"
                                                                                 : "Vulkan backend not built");
    return RP_OK;
}
void rp_gpu_offload_free(rp_gpu_offload *o) { (void)o; }
int32_t rp_gpu_offload_first(const rp_gpu_offload *o) { (void)o; return 0; }
bool rp_gpu_offload_has_output(const rp_gpu_offload *o) { (void)o; return false; }
rp_status rp_gpu_fwd_create(rp_gpu_offload *o, int32_t n_batch, int32_t n_outputs, rp_gpu_fwd **out) {
    (void)o; (void)n_batch; (void)n_outputs;
    *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_fwd_free(rp_gpu_fwd *f) { (void)f; }
rp_status rp_gpu_fwd_run(rp_gpu_fwd *f, const struct rp_batch *b, struct rp_kv *const *kvs, float *x,
                         const float *rope_cs, bool head, float *xo, float *logits, int32_t *n_out) {
    (void)f; (void)b; (void)kvs; (void)x; (void)rope_cs; (void)head; (void)xo; (void)logits;
    *n_out = -1;
    return NOT_BUILT;
}
rp_status rp_gpu_fwd_run_range(rp_gpu_fwd *f, const struct rp_batch *b, struct rp_kv *const *kvs, float *x,
                               const float *rope_cs, int32_t gl0, int32_t gl1, bool head, float *xo, float *logits,
                               int32_t *n_out) {
    (void)f; (void)b; (void)kvs; (void)x; (void)rope_cs; (void)gl0; (void)gl1; (void)head; (void)xo; (void)logits;
    *n_out = -1;
    return NOT_BUILT;
}
rp_status rp_gpu_kv_create(rp_gpu_offload *o, int32_t n_ctx, rp_type type, rp_gpu_kv **out) {
    (void)o; (void)n_ctx; (void)type;
    *out = NULL;
    return NOT_BUILT;
}
void rp_gpu_kv_free(rp_gpu_kv *k) { (void)k; }
void rp_gpu_kv_read(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, void *dst) {
    (void)k; (void)part; (void)layer; (void)cell0; (void)n; (void)dst;
}
void rp_gpu_kv_write(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, const void *src) {
    (void)k; (void)part; (void)layer; (void)cell0; (void)n; (void)src;
}
void rp_gpu_kv_move(rp_gpu_kv *k, int part, int32_t layer, int32_t dst, int32_t src, int32_t n) {
    (void)k; (void)part; (void)layer; (void)dst; (void)src; (void)n;
}
rp_status rp_gpu_kv_copy(rp_gpu_kv *dst, const rp_gpu_kv *src, int32_t n) {
    (void)dst; (void)src; (void)n;
    return NOT_BUILT;
}
