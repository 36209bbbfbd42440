/* vk_loader.h — the Vulkan entry points, loaded at run time from the loader library (no link-time dependency:
 * a build with the backend still runs where no Vulkan loader is installed). */
#ifndef RP_GPU_VK_LOADER_H
#define RP_GPU_VK_LOADER_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "reprise.h"

/* entry points resolved with vkGetInstanceProcAddr(NULL, ...) */
#define RP_VK_GLOBAL_FNS(X) \
    X(vkCreateInstance)     \
    X(vkEnumerateInstanceVersion) \
    X(vkEnumerateInstanceExtensionProperties)

/* entry points resolved with vkGetInstanceProcAddr(instance, ...) (device ones through the loader's trampolines) */
#define RP_VK_INSTANCE_FNS(X)                    \
    X(vkDestroyInstance)                         \
    X(vkEnumeratePhysicalDevices)                \
    X(vkGetPhysicalDeviceProperties)             \
    X(vkGetPhysicalDeviceProperties2)            \
    X(vkGetPhysicalDeviceFeatures2)              \
    X(vkGetPhysicalDeviceMemoryProperties)       \
    X(vkGetPhysicalDeviceQueueFamilyProperties)  \
    X(vkEnumerateDeviceExtensionProperties)      \
    X(vkCreateDevice)                            \
    X(vkDestroyDevice)                           \
    X(vkGetDeviceQueue)                          \
    X(vkCreateBuffer)                            \
    X(vkDestroyBuffer)                           \
    X(vkGetBufferMemoryRequirements)             \
    X(vkAllocateMemory)                          \
    X(vkFreeMemory)                              \
    X(vkBindBufferMemory)                        \
    X(vkMapMemory)                               \
    X(vkUnmapMemory)                             \
    X(vkCreateShaderModule)                      \
    X(vkDestroyShaderModule)                     \
    X(vkCreateDescriptorSetLayout)               \
    X(vkDestroyDescriptorSetLayout)              \
    X(vkCreatePipelineLayout)                    \
    X(vkDestroyPipelineLayout)                   \
    X(vkCreateComputePipelines)                  \
    X(vkDestroyPipeline)                         \
    X(vkCreateDescriptorPool)                    \
    X(vkDestroyDescriptorPool)                   \
    X(vkResetDescriptorPool)                     \
    X(vkAllocateDescriptorSets)                  \
    X(vkUpdateDescriptorSets)                    \
    X(vkCreateCommandPool)                       \
    X(vkDestroyCommandPool)                      \
    X(vkAllocateCommandBuffers)                  \
    X(vkBeginCommandBuffer)                      \
    X(vkEndCommandBuffer)                        \
    X(vkResetCommandBuffer)                      \
    X(vkCmdBindPipeline)                         \
    X(vkCmdBindDescriptorSets)                   \
    X(vkCmdPushConstants)                        \
    X(vkCmdDispatch)                             \
    X(vkCmdPipelineBarrier)                      \
    X(vkCmdCopyBuffer)                           \
    X(vkQueueSubmit)                             \
    X(vkCreateSemaphore)                         \
    X(vkDestroySemaphore)                        \
    X(vkWaitSemaphores)                          \
    X(vkDeviceWaitIdle)

typedef struct rp_vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define RP_VK_DECL(f) PFN_##f f;
    RP_VK_GLOBAL_FNS(RP_VK_DECL)
    RP_VK_INSTANCE_FNS(RP_VK_DECL)
#undef RP_VK_DECL
} rp_vk_fns;

/* Opens the loader once (thread-safe) and resolves the global entry points into *out. RP_ERR_NOT_FOUND naming
 * the library when it cannot be opened. */
rp_status rp_vk_load(const rp_vk_fns **out);
/* The process's instance (Vulkan 1.2 asked for; portability enumeration when offered), made at the first call
 * and never destroyed, with the instance entry points resolved into *f. Thread-safe; the first failure is the
 * answer for the process. */
rp_status rp_vk_instance(rp_vk_fns *f, VkInstance *out);
const char *rp_vk_result_name(VkResult r);

#endif /* RP_GPU_VK_LOADER_H */
