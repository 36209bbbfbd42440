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
