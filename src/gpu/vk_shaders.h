/* vk_shaders.h — the SPIR-V modules embedded by the build (cmake/embed_spv.cmake writes the table). */
#ifndef RP_GPU_VK_SHADERS_H
#define RP_GPU_VK_SHADERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct rp_vk_shader {
    const char *name;
    const uint32_t *words;
    size_t n_words;
} rp_vk_shader;

extern const rp_vk_shader rp_vk_shaders[];
extern const int rp_vk_n_shaders;

#endif /* RP_GPU_VK_SHADERS_H */
