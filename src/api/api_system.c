/* api_system.c — this machine as the kernels see it: CPU features, levels, huge pages, the kernels dispatched to. */
#include <stdio.h>
#include <string.h>

#include "reprise.h"
#include "core/bigmem.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

void rp_cpu_describe(rp_cpu_desc *out) {
    memset(out, 0, sizeof *out);
    const rp_cpu_info *c = rp_cpu_info_get();
    out->brand = c->brand;
    out->avx2 = c->avx2;
    out->fma = c->fma;
    out->f16c = c->f16c;
    out->avx512f = c->avx512f;
    out->avx512bw = c->avx512bw;
    out->avx512dq = c->avx512dq;
    out->avx512vl = c->avx512vl;
    out->avx512vnni = c->avx512vnni;
    out->avx512bf16 = c->avx512bf16;
    out->avx512fp16 = c->avx512fp16;
    out->avxvnni = c->avxvnni;
    out->amx_tile = c->amx_tile;
    out->amx_int8 = c->amx_int8;
    out->amx_bf16 = c->amx_bf16;
    out->os_avx = c->os_avx;
    out->os_avx512 = c->os_avx512;
    out->os_amx = c->os_amx;
    out->amx_permitted = c->amx_permitted;
    out->amx_opt_in = c->amx_permitted && c->best < RP_CPU_AMX;
    out->best = rp_cpu_level_name(c->best);
    out->active = rp_cpu_level_name(rp_cpu_level_active());
    rp_bigmem_thp_mode(out->thp, sizeof out->thp);
    out->huge_pages = rp_bigmem_huge_enabled();
}

int32_t rp_kernel_table(rp_kernel_desc *out, int32_t cap) {
    /* every weight type with kernels (in type id order), then the KV types of attention */
    rp_type mm[RP_TYPE_COUNT];
    int32_t n_mm = 0;
    for (int t = 0; t < RP_TYPE_COUNT; t++) {
        const rp_type_traits *tr = rp_type_get_traits(t);
        if (tr && tr->can_compute) mm[n_mm++] = (rp_type)t;
    }
    static const rp_type kv[] = {RP_TYPE_F16, RP_TYPE_Q8_0, RP_TYPE_F32};
    const int32_t n = n_mm + (int32_t)(sizeof kv / sizeof kv[0]);
    const rp_cpu_level act = rp_cpu_level_active();
    for (int32_t i = 0; out && i < n && i < cap; i++) {
        const bool is_mm = i < n_mm;
        const rp_type t = is_mm ? mm[i] : kv[i - n_mm];
        const char *k = NULL;
        if (is_mm) {
            const rp_mm_kernel *mk = rp_mm_kernel_select(t, act);
            k = mk ? mk->name : NULL;
        } else {
            const rp_attn_kernel *ak = rp_attn_kernel_select(t, act);
            k = ak ? ak->name : NULL;
        }
        out[i] = (rp_kernel_desc){.op = is_mm ? "matmul" : "attention", .type = rp_type_get_traits((int)t)->name,
                                  .kernel = k};
    }
    return n;
}
