/* api_gpu.c — the GPU devices as the Vulkan backend sees them (rp_gpu_list). */
#include "reprise.h"
#include "gpu/gpu.h"

rp_status rp_gpu_list(rp_gpu_desc *out, int32_t cap, int32_t *n_out) { return rp_gpu_enumerate(out, cap, n_out); }
