/* vk_loader.c — opens the Vulkan loader ($RP_VULKAN_LIB, else libvulkan.so.1) and resolves its entry points. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gpu/vk_loader.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static rp_vk_fns g_fns;
static char g_err[512];
static bool g_ok;

static void load(void) {
    const char *lib = getenv("RP_VULKAN_LIB");
    if (!lib || !*lib) lib = "libvulkan.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_err, sizeof g_err, "gpu: cannot open the Vulkan loader %s (%s); install libvulkan1 or set "
                                      "RP_VULKAN_LIB", lib, e ? e : "?");
        return;
    }
    g_fns.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(h, "vkGetInstanceProcAddr");
    if (!g_fns.vkGetInstanceProcAddr) {
        snprintf(g_err, sizeof g_err, "gpu: %s has no vkGetInstanceProcAddr", lib);
        return;
    }
#define RP_VK_GET(f) g_fns.f = (PFN_##f)g_fns.vkGetInstanceProcAddr(NULL, #f);
    RP_VK_GLOBAL_FNS(RP_VK_GET)
#undef RP_VK_GET
    if (!g_fns.vkCreateInstance) {
        snprintf(g_err, sizeof g_err, "gpu: %s gives no vkCreateInstance", lib);
        return;
    }
    g_ok = true;   /* the handle stays open for the process */
}

rp_status rp_vk_load(const rp_vk_fns **out) {
    pthread_once(&load_once, load);
    if (!g_ok) return rp_errorf(RP_ERR_NOT_FOUND, "%s", g_err);
    *out = &g_fns;
    return RP_OK;
}

static rp_status make_instance(rp_vk_fns *f, VkInstance *out);

/* One instance for the process, made at first use and kept (drivers then stay loaded: creating and destroying
 * instances over and over is slow, and a driver unloaded at vkDestroyInstance leaves what it still held as
 * leaks). */
static pthread_once_t inst_once = PTHREAD_ONCE_INIT;
static VkInstance g_inst;
static rp_vk_fns g_inst_fns;
static rp_status g_inst_st;
static char g_inst_err[512];

static void inst_init(void) {
    const rp_vk_fns *base;
    g_inst_st = rp_vk_load(&base);
    if (g_inst_st == RP_OK) {
        g_inst_fns = *base;
        g_inst_st = make_instance(&g_inst_fns, &g_inst);
    }
    if (g_inst_st != RP_OK) snprintf(g_inst_err, sizeof g_inst_err, "%s", rp_last_error());
}

rp_status rp_vk_instance(rp_vk_fns *f, VkInstance *out) {
    pthread_once(&inst_once, inst_init);
    if (g_inst_st != RP_OK) return rp_errorf(g_inst_st, "%s", g_inst_err);
    *f = g_inst_fns;
    *out = g_inst;
    return RP_OK;
}

static rp_status make_instance(rp_vk_fns *f, VkInstance *out) {
    uint32_t api = VK_API_VERSION_1_0;
    if (f->vkEnumerateInstanceVersion) f->vkEnumerateInstanceVersion(&api);
    if (api < VK_API_VERSION_1_2)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: the Vulkan loader is version %u.%u; the backend needs 1.2",
                         VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api));
    /* portability enumeration (MoltenVK-style drivers) when the loader offers it */
    bool port = false;
    uint32_t n = 0;
    if (f->vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) == VK_SUCCESS && n) {
        VkExtensionProperties *e = calloc(n, sizeof *e);
        if (e && f->vkEnumerateInstanceExtensionProperties(NULL, &n, e) == VK_SUCCESS)
            for (uint32_t i = 0; i < n; i++)
                if (!strcmp(e[i].extensionName, "VK_KHR_portability_enumeration")) port = true;
        free(e);
    }
    const char *ext[1] = {"VK_KHR_portability_enumeration"};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "reprise",
                             .pEngineName = "reprise", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                               .enabledExtensionCount = port ? 1u : 0u, .ppEnabledExtensionNames = ext,
                               .flags = port ? 0x00000001u /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */ : 0u};
    VkInstance inst;
    VkResult r = f->vkCreateInstance(&ci, NULL, &inst);
    if (r != VK_SUCCESS)
        return rp_errorf(RP_ERR_NOT_FOUND, "gpu: vkCreateInstance failed (%s): no Vulkan driver (ICD) installed?",
                         rp_vk_result_name(r));
#define RP_VK_GET(fn) f->fn = (PFN_##fn)f->vkGetInstanceProcAddr(inst, #fn);
    RP_VK_INSTANCE_FNS(RP_VK_GET)
#undef RP_VK_GET
#define RP_VK_CHECK(fn) if (!f->fn) missing = #fn;
    const char *missing = NULL;
    RP_VK_INSTANCE_FNS(RP_VK_CHECK)
#undef RP_VK_CHECK
    if (missing) {
        if (f->vkDestroyInstance) f->vkDestroyInstance(inst, NULL);
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: the Vulkan loader lacks %s (Vulkan 1.2 needed)", missing);
    }
    *out = inst;
    return RP_OK;
}

const char *rp_vk_result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
    }
}
