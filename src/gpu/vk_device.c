/* vk_device.c — Vulkan device enumeration and selection, the device and its queue, buffers and memory. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/vk_internal.h"

rp_gpu_params rp_gpu_default_params(void) { return (rp_gpu_params){.device = NULL}; }

static const char *kind_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(e[i].extensionName, name)) return true;
    return false;
}

static int compute_queue(const rp_vk_fns *f, VkPhysicalDevice pd) {
    uint32_t n = 0;
    f->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties q[32];
    if (n > 32) n = 32;
    f->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    int any = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (!(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return (int)i;   /* a compute-only family first */
        if (any < 0) any = (int)i;
    }
    return any;
}

static void describe(const rp_vk_fns *f, VkPhysicalDevice pd, int32_t index, rp_gpu_desc *d) {
    memset(d, 0, sizeof *d);
    d->index = index;
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                             .pNext = &drv};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    f->vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;
    snprintf(d->name, sizeof d->name, "%s", p->deviceName);
    d->kind = kind_name(p->deviceType);
    d->vendor_id = p->vendorID;
    d->device_id = p->deviceID;
    snprintf(d->api_version, sizeof d->api_version, "%u.%u.%u", VK_API_VERSION_MAJOR(p->apiVersion),
             VK_API_VERSION_MINOR(p->apiVersion), VK_API_VERSION_PATCH(p->apiVersion));
    snprintf(d->driver, sizeof d->driver, "%.60s%s%.60s", drv.driverName, drv.driverInfo[0] ? " " : "", drv.driverInfo);
    d->subgroup_size = sg.subgroupSize;

    uint32_t ne = 0;
    VkExtensionProperties *ext = NULL;
    if (f->vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, NULL) == VK_SUCCESS && ne) {
        ext = calloc(ne, sizeof *ext);
        if (!ext || f->vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, ext) != VK_SUCCESS) ne = 0;
    }
    d->cooperative_matrix = has_ext(ext, ne, "VK_KHR_cooperative_matrix") ||
                            has_ext(ext, ne, "VK_NV_cooperative_matrix");
    const bool dot_ext = has_ext(ext, ne, "VK_KHR_shader_integer_dot_product");
    free(ext);

    VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceVulkan12Features v12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    const bool is13 = p->apiVersion >= VK_API_VERSION_1_3;
    if (is13 || dot_ext) v12.pNext = &dot;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &v12};
    if (p->apiVersion >= VK_API_VERSION_1_2) f->vkGetPhysicalDeviceFeatures2(pd, &f2);
    d->fp16 = v12.shaderFloat16;
    d->int8_dot = (is13 || dot_ext) && dot.shaderIntegerDotProduct;
    d->usable = p->apiVersion >= VK_API_VERSION_1_2 && v12.timelineSemaphore && compute_queue(f, pd) >= 0;

    VkPhysicalDeviceMemoryProperties mp;
    f->vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    bool shared = false;
    for (uint32_t i = 0; i < mp.memoryTypeCount && i < 32; i++) {
        const VkMemoryPropertyFlags fl = mp.memoryTypes[i].propertyFlags;
        rp_gpu_mem_type *m = &d->mem_types[d->n_mem_types++];
        m->heap_bytes = mp.memoryHeaps[mp.memoryTypes[i].heapIndex].size;
        m->device_local = fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        m->host_visible = fl & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
        m->host_coherent = fl & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        m->host_cached = fl & VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
        if (m->device_local && m->host_visible && m->host_coherent) shared = true;
    }
    for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
        if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp.memoryHeaps[h].size > d->device_local_bytes)
            d->device_local_bytes = mp.memoryHeaps[h].size;
    /* a discrete card's host-visible device-local window (resizable BAR) is not shared memory */
    d->shared_memory = shared && (p->deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                                  p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU);
}

/* Lists the physical devices of the process's instance. */
static rp_status list_devices(rp_vk_fns *f, VkInstance *inst_out, VkPhysicalDevice *pds, uint32_t *n) {
    VkInstance inst;
    RP_TRY(rp_vk_instance(f, &inst));
    uint32_t cap = *n;
    VkResult r = f->vkEnumeratePhysicalDevices(inst, n, NULL);
    if (r == VK_SUCCESS && *n) {
        if (*n > cap) *n = cap;
        r = f->vkEnumeratePhysicalDevices(inst, n, pds);
        if (r == VK_INCOMPLETE) r = VK_SUCCESS;
    }
    if (r != VK_SUCCESS)
        return rp_errorf(RP_ERR_INTERNAL, "gpu: vkEnumeratePhysicalDevices failed (%s)", rp_vk_result_name(r));
    *inst_out = inst;
    return RP_OK;
}

rp_status rp_gpu_enumerate(rp_gpu_desc *out, int32_t cap, int32_t *n_out) {
    if (n_out) *n_out = 0;
    if (cap < 0 || (cap > 0 && !out)) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: rp_gpu_list: bad out / cap");
    rp_vk_fns f;
    VkInstance inst;
    VkPhysicalDevice pds[16];
    uint32_t n = 16;
    RP_TRY(list_devices(&f, &inst, pds, &n));
    for (uint32_t i = 0; i < n && (int32_t)i < cap; i++) describe(&f, pds[i], (int32_t)i, &out[i]);
    if (n_out) *n_out = (int32_t)n;
    return RP_OK;
}

static bool name_match(const char *name, const char *want) {
    const size_t nw = strlen(want);
    for (const char *s = name; *s; s++) {
        size_t k = 0;
        while (k < nw && s[k] && tolower((unsigned char)s[k]) == tolower((unsigned char)want[k])) k++;
        if (k == nw) return true;
    }
    return false;
}

static int32_t pick(const rp_gpu_desc *d, uint32_t n, const char *want, bool no_cpu) {
    if (want && *want) {
        char *end;
        long idx = strtol(want, &end, 10);
        if (*end == '\0') return idx >= 0 && idx < (long)n ? (int32_t)idx : -1;
        for (uint32_t i = 0; i < n; i++)
            if (name_match(d[i].name, want)) return (int32_t)i;
        return -1;
    }
    int32_t best = -1, best_rank = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!d[i].usable || (no_cpu && !strcmp(d[i].kind, "cpu"))) continue;
        int rank = !strcmp(d[i].kind, "discrete") ? 4 : !strcmp(d[i].kind, "integrated") ? 3
                 : !strcmp(d[i].kind, "virtual") ? 2 : !strcmp(d[i].kind, "cpu") ? 1 : 0;
        if (rank > best_rank) best = (int32_t)i, best_rank = rank;
    }
    return best;
}

rp_status rp_gpu_create(const rp_gpu_params *p, rp_gpu **out) {
    *out = NULL;
    rp_gpu *g = calloc(1, sizeof *g);
    if (!g) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    VkPhysicalDevice pds[16];
    uint32_t n = 16;
    rp_status st = list_devices(&g->vk, &g->inst, pds, &n);
    if (st != RP_OK) {
        free(g);
        return st;
    }
    rp_gpu_desc descs[16];
    for (uint32_t i = 0; i < n; i++) describe(&g->vk, pds[i], (int32_t)i, &descs[i]);
    const char *want = p && p->device && *p->device ? p->device : getenv("RP_GPU_DEVICE");
    const bool no_cpu = p && p->no_cpu_default && !(want && *want);
    const int32_t at = n ? pick(descs, n, want, no_cpu) : -1;
    if (at < 0) {
        bool cpu_only = no_cpu;
        for (uint32_t i = 0; i < n && cpu_only; i++) cpu_only = descs[i].usable ? !strcmp(descs[i].kind, "cpu") : true;
        if (!n) st = rp_errorf(RP_ERR_NOT_FOUND, "gpu: no Vulkan device (the loader found no driver's device)");
        else if (cpu_only)
            st = rp_errorf(RP_ERR_NOT_FOUND, "gpu: no GPU: the only Vulkan device is CPU-type ('%s'), used only when "
                                             "named (--device / $RP_GPU_DEVICE)", descs[0].name);
        else if (want && *want)
            st = rp_errorf(RP_ERR_NOT_FOUND, "gpu: no Vulkan device '%s' (%u found; `reprise inspect --system` "
                                             "lists them)", want, n);
        else st = rp_errorf(RP_ERR_UNSUPPORTED, "gpu: no usable Vulkan device (needs Vulkan 1.2 with timeline "
                                                "semaphores and a compute queue)");
        goto fail;
    }
    if (!descs[at].usable) {
        st = rp_errorf(RP_ERR_UNSUPPORTED, "gpu: device %d '%s' lacks Vulkan 1.2 timeline semaphores or a compute "
                                           "queue", at, descs[at].name);
        goto fail;
    }
    g->desc = descs[at];
    pthread_mutex_init(&g->queue_mu, NULL);
    pthread_mutex_init(&g->xfer_mu, NULL);
    g->mutexes = true;
    const char *stg = getenv("RP_GPU_STAGING");
    g->staging = stg && *stg && strcmp(stg, "0");
    g->pd = pds[at];
    g->qfam = (uint32_t)compute_queue(&g->vk, g->pd);
    g->vk.vkGetPhysicalDeviceMemoryProperties(g->pd, &g->mem);
    VkPhysicalDeviceProperties props;
    g->vk.vkGetPhysicalDeviceProperties(g->pd, &props);
    g->limits = props.limits;

    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = g->qfam,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features v12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .timelineSemaphore = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &v12,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci};
    VkResult r = g->vk.vkCreateDevice(g->pd, &dci, NULL, &g->dev);
    if (r != VK_SUCCESS) {
        st = rp_errorf(RP_ERR_INTERNAL, "gpu: vkCreateDevice on '%s' failed (%s)", g->desc.name, rp_vk_result_name(r));
        goto fail;
    }
    g->vk.vkGetDeviceQueue(g->dev, g->qfam, 0, &g->queue);
    VkSemaphoreTypeCreateInfo tci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE, .initialValue = 0};
    VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &tci};
    r = g->vk.vkCreateSemaphore(g->dev, &sci, NULL, &g->timeline);
    if (r != VK_SUCCESS) {
        st = rp_errorf(RP_ERR_INTERNAL, "gpu: timeline semaphore: %s", rp_vk_result_name(r));
        goto fail;
    }
    st = rp_gpu_rec_create(g, 4, &g->xfer);
    if (st != RP_OK) goto fail;
    *out = g;
    return RP_OK;
fail:
    rp_gpu_free(g);
    return st;
}

void rp_gpu_free(rp_gpu *g) {
    if (!g) return;
    if (g->dev) {
        g->vk.vkDeviceWaitIdle(g->dev);
        rp_gpu_rec_free(g->xfer);
        if (g->timeline) g->vk.vkDestroySemaphore(g->dev, g->timeline, NULL);
        g->vk.vkDestroyDevice(g->dev, NULL);
    }
    if (g->mutexes) {
        pthread_mutex_destroy(&g->queue_mu);
        pthread_mutex_destroy(&g->xfer_mu);
    }
    free(g);   /* the instance is the process's (vk_loader.c) */
}

const rp_gpu_desc *rp_gpu_device(const rp_gpu *g) { return g ? &g->desc : NULL; }

/* ---- buffers ---- */

static int32_t mem_type(const rp_gpu *g, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < g->mem.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (g->mem.memoryTypes[i].propertyFlags & want) == want) return (int32_t)i;
    return -1;
}

rp_status rp_gpu_buf_create(rp_gpu *g, size_t bytes, rp_gpu_mem mem, rp_gpu_buf **out) {
    *out = NULL;
    if (!g) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: buffer on no device");
    size_t size = (bytes + 3) & ~(size_t)3;
    if (!size) size = 4;
    rp_gpu_buf *b = calloc(1, sizeof *b);
    if (!b) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    b->g = g;
    b->size = size;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = g->vk.vkCreateBuffer(g->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return rp_errorf(RP_ERR_NOMEM, "gpu: vkCreateBuffer of %zu bytes failed (%s)", size, rp_vk_result_name(r));
    }
    VkMemoryRequirements req;
    g->vk.vkGetBufferMemoryRequirements(g->dev, b->buf, &req);
    const VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int32_t t = -1;
    if (mem == RP_GPU_MEM_HOST) {
        t = mem_type(g, req.memoryTypeBits, HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        if (t < 0) t = mem_type(g, req.memoryTypeBits, HV);
    } else {
        if (g->desc.shared_memory) t = mem_type(g, req.memoryTypeBits, HV | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (t < 0) t = mem_type(g, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (t < 0) t = mem_type(g, req.memoryTypeBits, 0);
    }
    if (t < 0) {
        g->vk.vkDestroyBuffer(g->dev, b->buf, NULL);
        free(b);
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: no memory type for a %s buffer",
                         mem == RP_GPU_MEM_HOST ? "host-visible" : "device");
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                .memoryTypeIndex = (uint32_t)t};
    r = g->vk.vkAllocateMemory(g->dev, &mai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        g->vk.vkDestroyBuffer(g->dev, b->buf, NULL);
        free(b);
        return rp_errorf(RP_ERR_NOMEM, "gpu: cannot allocate %llu bytes of device memory (%s)",
                         (unsigned long long)req.size, rp_vk_result_name(r));
    }
    g->vk.vkBindBufferMemory(g->dev, b->buf, b->mem, 0);
    if ((g->mem.memoryTypes[t].propertyFlags & HV) == HV && (mem == RP_GPU_MEM_HOST || !g->staging)) {
        r = g->vk.vkMapMemory(g->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) b->map = NULL;
    }
    if (b->map) memset(b->map, 0, size);
    else {
        /* device memory is not guaranteed zero: clear it through staging */
        void *z = calloc(1, size);
        rp_status st = z ? rp_gpu_buf_write(b, 0, z, size) : rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
        free(z);
        if (st != RP_OK) {
            rp_gpu_buf_free(b);
            return st;
        }
    }
    *out = b;
    return RP_OK;
}

void rp_gpu_buf_free(rp_gpu_buf *b) {
    if (!b) return;
    rp_gpu *g = b->g;
    if (b->map) g->vk.vkUnmapMemory(g->dev, b->mem);
    g->vk.vkDestroyBuffer(g->dev, b->buf, NULL);
    g->vk.vkFreeMemory(g->dev, b->mem, NULL);
    free(b);
}

size_t rp_gpu_buf_size(const rp_gpu_buf *b) { return b ? b->size : 0; }
void *rp_gpu_buf_map(rp_gpu_buf *b) { return b ? b->map : NULL; }

static rp_status staged(rp_gpu_buf *b, size_t off, void *host, size_t n, bool to_dev) {
    rp_gpu *g = b->g;
    rp_gpu_buf *s;
    RP_TRY(rp_gpu_buf_create(g, n, RP_GPU_MEM_HOST, &s));
    if (to_dev) memcpy(s->map, host, n);
    pthread_mutex_lock(&g->xfer_mu);
    rp_status st = rp_gpu_rec_begin(g->xfer);
    if (st == RP_OK)
        st = to_dev ? rp_gpu_rec_copy(g->xfer, s, 0, b, off, n) : rp_gpu_rec_copy(g->xfer, b, off, s, 0, n);
    if (st == RP_OK) st = rp_gpu_rec_submit(g->xfer, NULL);
    if (st == RP_OK) st = rp_gpu_rec_wait(g->xfer);
    pthread_mutex_unlock(&g->xfer_mu);
    if (st == RP_OK && !to_dev) memcpy(host, s->map, n);
    rp_gpu_buf_free(s);
    return st;
}

rp_status rp_gpu_buf_write(rp_gpu_buf *b, size_t off, const void *src, size_t n) {
    if (!b || off > b->size || n > b->size - off)
        return rp_errorf(RP_ERR_RANGE, "gpu: write of %zu bytes at %zu past a buffer of %zu", n, off, b ? b->size : 0);
    if (!n) return RP_OK;
    if (b->map) {
        memcpy((char *)b->map + off, src, n);
        return RP_OK;
    }
    return staged(b, off, (void *)src, n, true);
}

rp_status rp_gpu_buf_read(rp_gpu_buf *b, size_t off, void *dst, size_t n) {
    if (!b || off > b->size || n > b->size - off)
        return rp_errorf(RP_ERR_RANGE, "gpu: read of %zu bytes at %zu past a buffer of %zu", n, off, b ? b->size : 0);
    if (!n) return RP_OK;
    if (b->map) {
        memcpy(dst, (const char *)b->map + off, n);
        return RP_OK;
    }
    return staged(b, off, dst, n, false);
}
