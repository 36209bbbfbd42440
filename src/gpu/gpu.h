/* gpu.h — the GPU backend's core (Vulkan): a device, its buffers, compute kernels (pipelines), a command
 * recorder that puts many dispatches into one command buffer, and timeline-semaphore submission.
 *
 * Every object is an opaque handle with a create/free pair; every fallible call returns an rp_status with the
 * detail in rp_last_error(). Without the backend in the build (RP_VULKAN off) every create returns
 * RP_ERR_UNSUPPORTED "Vulkan backend not built"; with it but no loader or no device, RP_ERR_NOT_FOUND naming
 * what is missing. The loader is opened at run time: $RP_VULKAN_LIB, else libvulkan.so.1.
 *
 * Memory: RP_GPU_MEM_DEVICE buffers are device-local; when the device shares memory with the CPU (integrated
 * GPUs, lavapipe) they are host-visible and coherent too, so rp_gpu_buf_map gives a pointer into them and data
 * is used in place with no copy. Otherwise rp_gpu_buf_map returns NULL and rp_gpu_buf_write / _read go through a
 * staging buffer (RP_GPU_STAGING=1 forces that path everywhere, for tests). RP_GPU_MEM_HOST buffers are
 * host-visible (coherent) memory the device reads over the bus. */
#ifndef RP_GPU_GPU_H
#define RP_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"

typedef struct rp_gpu rp_gpu;
typedef struct rp_gpu_buf rp_gpu_buf;
typedef struct rp_gpu_kernel rp_gpu_kernel;
typedef struct rp_gpu_rec rp_gpu_rec;

typedef struct rp_gpu_params {
    const char *device;     /* NULL or "": $RP_GPU_DEVICE, else the best device (discrete > integrated > virtual >
                               CPU); a number: that index of rp_gpu_list; else a case-insensitive substring of the
                               device name */
    bool no_cpu_default;    /* without a device named (here or in $RP_GPU_DEVICE), CPU-type devices (lavapipe /
                               llvmpipe) are not picked: RP_ERR_NOT_FOUND instead (the offload's default, so a
                               machine without a GPU does not run on a CPU emulation of one) */
} rp_gpu_params;

rp_gpu_params rp_gpu_default_params(void);
/* Enumerates devices (public rp_gpu_list's body). */
rp_status rp_gpu_enumerate(rp_gpu_desc *out, int32_t cap, int32_t *n_out);
rp_status rp_gpu_create(const rp_gpu_params *p, rp_gpu **out);
void rp_gpu_free(rp_gpu *g);
/* The chosen device's description. */
const rp_gpu_desc *rp_gpu_device(const rp_gpu *g);

typedef enum rp_gpu_mem {
    RP_GPU_MEM_DEVICE = 0,
    RP_GPU_MEM_HOST = 1,
} rp_gpu_mem;

/* A buffer of `bytes` (rounded up to 4; zero-filled). */
rp_status rp_gpu_buf_create(rp_gpu *g, size_t bytes, rp_gpu_mem mem, rp_gpu_buf **out);
void rp_gpu_buf_free(rp_gpu_buf *b);
size_t rp_gpu_buf_size(const rp_gpu_buf *b);
/* Host pointer to the buffer's memory when it is host-visible (shared memory or RP_GPU_MEM_HOST), else NULL. */
void *rp_gpu_buf_map(rp_gpu_buf *b);
/* Copies in / out (a memcpy when mapped, a staging copy otherwise). The caller orders these against submitted
 * work (rp_gpu_wait). RP_ERR_RANGE past the end. */
rp_status rp_gpu_buf_write(rp_gpu_buf *b, size_t off, const void *src, size_t n);
rp_status rp_gpu_buf_read(rp_gpu_buf *b, size_t off, void *dst, size_t n);

/* A compute kernel: the embedded shader `name` (src/gpu/shaders; e.g. "mul_mat_q4_0") with n_bufs storage-buffer
 * bindings 0..n_bufs-1, push constants of push_bytes (<= 128) and specialization constants spec[0..n_spec)
 * (constant_id i = spec[i]; constant 0 is the workgroup size in every shader). */
rp_status rp_gpu_kernel_create(rp_gpu *g, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                               int n_spec, rp_gpu_kernel **out);
void rp_gpu_kernel_free(rp_gpu_kernel *k);

/* A command recorder: up to max_dispatches dispatches per recording into one command buffer, a memory barrier
 * after each (so a dispatch sees everything recorded before it), submitted once. begin waits for the
 * recorder's previous submission before reusing its command buffer and descriptor sets. */
rp_status rp_gpu_rec_create(rp_gpu *g, int32_t max_dispatches, rp_gpu_rec **out);
void rp_gpu_rec_free(rp_gpu_rec *r);
rp_status rp_gpu_rec_begin(rp_gpu_rec *r);
/* bufs[0..k's n_bufs) bound whole to bindings 0..; push: k's push_bytes. Grid gx x gy x gz workgroups.
 * RP_ERR_FULL past max_dispatches, RP_ERR_RANGE for a grid past the device's limits. */
rp_status rp_gpu_rec_dispatch(rp_gpu_rec *r, const rp_gpu_kernel *k, rp_gpu_buf *const *bufs, const void *push,
                              uint32_t gx, uint32_t gy, uint32_t gz);
rp_status rp_gpu_rec_copy(rp_gpu_rec *r, rp_gpu_buf *src, size_t src_off, rp_gpu_buf *dst, size_t dst_off,
                          size_t n);
/* Begins a recording that rp_gpu_rec_replay may submit again after its first submit, unchanged: the same
 * dispatches over the same buffers with the same push constants (inputs that change between submissions live in
 * buffers the host writes in between). A fixed-shape graph recorded once — the static graphs of an NPU — instead
 * of re-recording per call. */
rp_status rp_gpu_rec_begin_replayable(rp_gpu_rec *r);
/* Ends and submits the recording; *ticket (may be NULL) is the timeline value that signals its completion. */
rp_status rp_gpu_rec_submit(rp_gpu_rec *r, uint64_t *ticket);
/* Submits the last replayable recording again (after waiting for its previous submission). RP_ERR_INVALID_ARG
 * when there is none (or a recording is open). */
rp_status rp_gpu_rec_replay(rp_gpu_rec *r, uint64_t *ticket);
/* Waits for the recorder's last submission. */
rp_status rp_gpu_rec_wait(rp_gpu_rec *r);
/* Waits until the device's timeline reaches ticket. */
rp_status rp_gpu_wait(rp_gpu *g, uint64_t ticket);

#endif /* RP_GPU_GPU_H */
