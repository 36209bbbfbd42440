/* vk_internal.h — the Vulkan objects behind gpu.h's handles (shared by vk_device.c and vk_exec.c). */
#ifndef RP_GPU_VK_INTERNAL_H
#define RP_GPU_VK_INTERNAL_H

#include <pthread.h>

#include "gpu/gpu.h"
#include "gpu/vk_loader.h"

#define RP_GPU_MAX_BINDINGS 8

struct rp_gpu {
    rp_vk_fns vk;
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties mem;
    VkPhysicalDeviceLimits limits;
    rp_gpu_desc desc;
    VkSemaphore timeline;      /* one timeline for every submission; value = ticket */
    uint64_t ticket;           /* last value signalled by a submission */
    rp_gpu_rec *xfer;          /* staging copies of rp_gpu_buf_write / _read */
    pthread_mutex_t queue_mu;  /* vkQueueSubmit and the ticket (contexts on several threads share the device) */
    pthread_mutex_t xfer_mu;   /* the staging recorder xfer */
    bool mutexes;              /* the two above are initialised */
    bool staging;              /* RP_GPU_STAGING=1: device buffers unmapped even in shared memory (tests the
                                  discrete-GPU path on lavapipe) */
};

struct rp_gpu_buf {
    rp_gpu *g;
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t size;
    void *map;                 /* non-NULL when host-visible */
};

struct rp_gpu_kernel {
    rp_gpu *g;
    int n_bufs;
    uint32_t push_bytes;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
};

struct rp_gpu_rec {
    rp_gpu *g;
    int32_t max;
    int32_t n;                 /* dispatches in the open recording */
    bool open;
    bool replayable;           /* the recording may be submitted again (rp_gpu_rec_replay) */
    bool recorded;             /* a replayable recording has been ended and submitted */
    uint64_t pending;          /* ticket of the last submission, 0 if none */
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkDescriptorPool dpool;
};

#endif /* RP_GPU_VK_INTERNAL_H */
