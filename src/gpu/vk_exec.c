/* vk_exec.c — compute kernels (pipelines with specialization constants), the command recorder (many dispatches,
 * one command buffer, barriers between them) and submission on the device's timeline semaphore. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/vk_internal.h"
#include "gpu/vk_shaders.h"

static const rp_vk_shader *find_shader(const char *name) {
    for (int i = 0; i < rp_vk_n_shaders; i++)
        if (!strcmp(rp_vk_shaders[i].name, name)) return &rp_vk_shaders[i];
    return NULL;
}

rp_status rp_gpu_kernel_create(rp_gpu *g, const char *name, int n_bufs, uint32_t push_bytes, const uint32_t *spec,
                               int n_spec, rp_gpu_kernel **out) {
    *out = NULL;
    const rp_vk_shader *sh = find_shader(name);
    if (!sh) return rp_errorf(RP_ERR_NOT_FOUND, "gpu: no shader '%s' in this build", name);
    if (n_bufs < 1 || n_bufs > RP_GPU_MAX_BINDINGS || push_bytes > 128 || (push_bytes & 3) || n_spec < 0 ||
        n_spec > 8)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: kernel '%s': %d buffers, %u push bytes, %d constants", name,
                         n_bufs, push_bytes, n_spec);
    rp_gpu_kernel *k = calloc(1, sizeof *k);
    if (!k) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    k->g = g;
    k->n_bufs = n_bufs;
    k->push_bytes = push_bytes;
    VkDescriptorSetLayoutBinding bind[RP_GPU_MAX_BINDINGS];
    for (int i = 0; i < n_bufs; i++)
        bind[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                                 .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = (uint32_t)n_bufs, .pBindings = bind};
    VkResult r = g->vk.vkCreateDescriptorSetLayout(g->dev, &dci, NULL, &k->dsl);
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = push_bytes};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &k->dsl, .pushConstantRangeCount = push_bytes ? 1u : 0u,
                                      .pPushConstantRanges = &pcr};
    if (r == VK_SUCCESS) r = g->vk.vkCreatePipelineLayout(g->dev, &lci, NULL, &k->layout);
    VkShaderModule mod = VK_NULL_HANDLE;
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sh->n_words * 4, .pCode = sh->words};
    if (r == VK_SUCCESS) r = g->vk.vkCreateShaderModule(g->dev, &mci, NULL, &mod);
    VkSpecializationMapEntry me[8];
    for (int i = 0; i < n_spec; i++)
        me[i] = (VkSpecializationMapEntry){.constantID = (uint32_t)i, .offset = (uint32_t)(4 * i), .size = 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)n_spec, .pMapEntries = me, .dataSize = 4 * (size_t)n_spec,
                               .pData = spec};
    VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod, .pName = "main", .pSpecializationInfo = n_spec ? &si : NULL},
        .layout = k->layout};
    if (r == VK_SUCCESS) r = g->vk.vkCreateComputePipelines(g->dev, VK_NULL_HANDLE, 1, &pci, NULL, &k->pipe);
    if (mod) g->vk.vkDestroyShaderModule(g->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        rp_gpu_kernel_free(k);
        return rp_errorf(RP_ERR_INTERNAL, "gpu: pipeline for shader '%s' failed (%s)", name, rp_vk_result_name(r));
    }
    *out = k;
    return RP_OK;
}

void rp_gpu_kernel_free(rp_gpu_kernel *k) {
    if (!k) return;
    rp_gpu *g = k->g;
    if (k->pipe) g->vk.vkDestroyPipeline(g->dev, k->pipe, NULL);
    if (k->layout) g->vk.vkDestroyPipelineLayout(g->dev, k->layout, NULL);
    if (k->dsl) g->vk.vkDestroyDescriptorSetLayout(g->dev, k->dsl, NULL);
    free(k);
}

/* ---- recorder ---- */

rp_status rp_gpu_rec_create(rp_gpu *g, int32_t max_dispatches, rp_gpu_rec **out) {
    *out = NULL;
    if (!g || max_dispatches < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: recorder of %d dispatches", max_dispatches);
    rp_gpu_rec *rc = calloc(1, sizeof *rc);
    if (!rc) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    rc->g = g;
    rc->max = max_dispatches;
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = g->qfam};
    VkResult r = g->vk.vkCreateCommandPool(g->dev, &pci, NULL, &rc->pool);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = rc->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = g->vk.vkAllocateCommandBuffers(g->dev, &cai, &rc->cb);
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = (uint32_t)max_dispatches * RP_GPU_MAX_BINDINGS};
    VkDescriptorPoolCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = (uint32_t)max_dispatches, .poolSizeCount = 1, .pPoolSizes = &ps};
    if (r == VK_SUCCESS) r = g->vk.vkCreateDescriptorPool(g->dev, &dci, NULL, &rc->dpool);
    if (r != VK_SUCCESS) {
        rp_gpu_rec_free(rc);
        return rp_errorf(RP_ERR_NOMEM, "gpu: command recorder: %s", rp_vk_result_name(r));
    }
    *out = rc;
    return RP_OK;
}

void rp_gpu_rec_free(rp_gpu_rec *rc) {
    if (!rc) return;
    rp_gpu *g = rc->g;
    if (rc->pending) rp_gpu_wait(g, rc->pending);
    if (rc->dpool) g->vk.vkDestroyDescriptorPool(g->dev, rc->dpool, NULL);
    if (rc->pool) g->vk.vkDestroyCommandPool(g->dev, rc->pool, NULL);
    free(rc);
}

static rp_status begin(rp_gpu_rec *rc, bool replayable) {
    rp_gpu *g = rc->g;
    if (rc->open) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: recorder already open");
    RP_TRY(rp_gpu_rec_wait(rc));
    g->vk.vkResetDescriptorPool(g->dev, rc->dpool, 0);
    g->vk.vkResetCommandBuffer(rc->cb, 0);
    rc->replayable = replayable;
    rc->recorded = false;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = replayable ? 0u : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = g->vk.vkBeginCommandBuffer(rc->cb, &bi);
    if (r != VK_SUCCESS) return rp_errorf(RP_ERR_INTERNAL, "gpu: vkBeginCommandBuffer: %s", rp_vk_result_name(r));
    /* host writes (mapped buffers) before the submission are visible to it by the submit's own guarantee */
    rc->open = true;
    rc->n = 0;
    return RP_OK;
}

rp_status rp_gpu_rec_begin(rp_gpu_rec *rc) { return begin(rc, false); }
rp_status rp_gpu_rec_begin_replayable(rp_gpu_rec *rc) { return begin(rc, true); }

/* everything before is visible to everything after (compute and transfer, read and write) */
static void barrier(rp_gpu_rec *rc) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    rc->g->vk.vkCmdPipelineBarrier(rc->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

rp_status rp_gpu_rec_dispatch(rp_gpu_rec *rc, const rp_gpu_kernel *k, rp_gpu_buf *const *bufs, const void *push,
                              uint32_t gx, uint32_t gy, uint32_t gz) {
    rp_gpu *g = rc->g;
    if (!rc->open) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: dispatch into a recorder not begun");
    if (rc->n >= rc->max) return rp_errorf(RP_ERR_FULL, "gpu: recorder holds %d dispatches at most", rc->max);
    if (!gx || !gy || !gz || gx > g->limits.maxComputeWorkGroupCount[0] || gy > g->limits.maxComputeWorkGroupCount[1] ||
        gz > g->limits.maxComputeWorkGroupCount[2])
        return rp_errorf(RP_ERR_RANGE, "gpu: grid %u x %u x %u outside the device's %u x %u x %u", gx, gy, gz,
                         g->limits.maxComputeWorkGroupCount[0], g->limits.maxComputeWorkGroupCount[1],
                         g->limits.maxComputeWorkGroupCount[2]);
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = rc->dpool, .descriptorSetCount = 1, .pSetLayouts = &k->dsl};
    VkDescriptorSet set;
    VkResult r = g->vk.vkAllocateDescriptorSets(g->dev, &ai, &set);
    if (r != VK_SUCCESS) return rp_errorf(RP_ERR_FULL, "gpu: descriptor sets: %s", rp_vk_result_name(r));
    VkDescriptorBufferInfo bi[RP_GPU_MAX_BINDINGS];
    VkWriteDescriptorSet w[RP_GPU_MAX_BINDINGS];
    for (int i = 0; i < k->n_bufs; i++) {
        if (!bufs[i]) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: dispatch: buffer %d missing", i);
        bi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i]->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                      .dstBinding = (uint32_t)i, .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i]};
    }
    g->vk.vkUpdateDescriptorSets(g->dev, (uint32_t)k->n_bufs, w, 0, NULL);
    g->vk.vkCmdBindPipeline(rc->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
    g->vk.vkCmdBindDescriptorSets(rc->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0, NULL);
    if (k->push_bytes) g->vk.vkCmdPushConstants(rc->cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, k->push_bytes, push);
    g->vk.vkCmdDispatch(rc->cb, gx, gy, gz);
    barrier(rc);
    rc->n++;
    return RP_OK;
}

rp_status rp_gpu_rec_copy(rp_gpu_rec *rc, rp_gpu_buf *src, size_t src_off, rp_gpu_buf *dst, size_t dst_off,
                          size_t n) {
    if (!rc->open) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: copy into a recorder not begun");
    if (src_off > src->size || n > src->size - src_off || dst_off > dst->size || n > dst->size - dst_off)
        return rp_errorf(RP_ERR_RANGE, "gpu: copy of %zu bytes outside its buffers", n);
    if (!n) return RP_OK;
    VkBufferCopy c = {.srcOffset = src_off, .dstOffset = dst_off, .size = n};
    rc->g->vk.vkCmdCopyBuffer(rc->cb, src->buf, dst->buf, 1, &c);
    barrier(rc);
    return RP_OK;
}

static rp_status queue_submit(rp_gpu_rec *rc, uint64_t *ticket);

rp_status rp_gpu_rec_submit(rp_gpu_rec *rc, uint64_t *ticket) {
    rp_gpu *g = rc->g;
    if (!rc->open) return rp_errorf(RP_ERR_INVALID_ARG, "gpu: submit of a recorder not begun");
    /* results visible to the host once the timeline signals */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    g->vk.vkCmdPipelineBarrier(rc->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                               VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    rc->open = false;
    const VkResult r = g->vk.vkEndCommandBuffer(rc->cb);
    if (r != VK_SUCCESS) return rp_errorf(RP_ERR_INTERNAL, "gpu: vkEndCommandBuffer: %s", rp_vk_result_name(r));
    rc->recorded = rc->replayable;
    return queue_submit(rc, ticket);
}

rp_status rp_gpu_rec_replay(rp_gpu_rec *rc, uint64_t *ticket) {
    if (rc->open || !rc->recorded)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: replay without a submitted replayable recording");
    RP_TRY(rp_gpu_rec_wait(rc));   /* not pending twice: no simultaneous-use flag */
    return queue_submit(rc, ticket);
}

static rp_status queue_submit(rp_gpu_rec *rc, uint64_t *ticket) {
    rp_gpu *g = rc->g;
    pthread_mutex_lock(&g->queue_mu);
    const uint64_t value = g->ticket + 1;
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .signalSemaphoreValueCount = 1, .pSignalSemaphoreValues = &value};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ti, .commandBufferCount = 1,
                       .pCommandBuffers = &rc->cb, .signalSemaphoreCount = 1, .pSignalSemaphores = &g->timeline};
    const VkResult r = g->vk.vkQueueSubmit(g->queue, 1, &si, VK_NULL_HANDLE);
    if (r == VK_SUCCESS) g->ticket = value;
    pthread_mutex_unlock(&g->queue_mu);
    if (r != VK_SUCCESS) return rp_errorf(RP_ERR_INTERNAL, "gpu: vkQueueSubmit: %s", rp_vk_result_name(r));
    rc->pending = value;
    if (ticket) *ticket = value;
    return RP_OK;
}

rp_status rp_gpu_wait(rp_gpu *g, uint64_t ticket) {
    if (!ticket) return RP_OK;
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
                              .pSemaphores = &g->timeline, .pValues = &ticket};
    VkResult r = g->vk.vkWaitSemaphores(g->dev, &wi, UINT64_MAX);
    if (r != VK_SUCCESS) return rp_errorf(RP_ERR_INTERNAL, "gpu: vkWaitSemaphores: %s", rp_vk_result_name(r));
    return RP_OK;
}

rp_status rp_gpu_rec_wait(rp_gpu_rec *rc) {
    RP_TRY(rp_gpu_wait(rc->g, rc->pending));
    rc->pending = 0;
    return RP_OK;
}
