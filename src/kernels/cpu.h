/* cpu.h — run-time CPU feature detection (CPUID, XGETBV, AMX permission) and the dispatch level. */
#ifndef RP_KERNELS_CPU_H
#define RP_KERNELS_CPU_H

#include <stdbool.h>

#include "reprise.h"

/* Dispatch levels, each a superset of the one below. */
typedef enum rp_cpu_level {
    RP_CPU_SCALAR = 0,   /* portable C reference kernels */
    RP_CPU_AVX2 = 1,     /* AVX2 + FMA + F16C */
    RP_CPU_AVX512 = 2,   /* AVX-512 F/BW/DQ/VL + VNNI (+ BF16 when present) */
    RP_CPU_AMX = 3,      /* AVX512 level + AMX tiles (int8, bf16), OS permission granted */
    RP_CPU_LEVEL_COUNT
} rp_cpu_level;

typedef struct rp_cpu_info {
    char brand[64];
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16, avx512fp16;
    bool avxvnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx, os_avx512, os_amx;   /* XGETBV: the OS saves these register states */
    bool amx_permitted;               /* arch_prctl(ARCH_REQ_XCOMP_PERM) succeeded */
    rp_cpu_level best;                /* highest level this machine supports */
} rp_cpu_info;

/* Detects once (thread-safe) and returns the machine's features. */
const rp_cpu_info *rp_cpu_info_get(void);

const char *rp_cpu_level_name(rp_cpu_level l);
/* Parses "scalar" | "ref" | "avx2" | "avx512" | "amx"; -1 if unknown. */
int rp_cpu_level_parse(const char *s);

/* The level kernels dispatch on: the best available, or lower when forced by
 * RP_FORCE_REF=1 (scalar), RP_CPU=<level>, or rp_cpu_set_level(). */
rp_cpu_level rp_cpu_level_active(void);
/* Forces a level for everything loaded afterwards (models pack their weights
 * for the level active at load). Asking for more than the machine has is
 * RP_ERR_UNSUPPORTED naming what is missing. */
rp_status rp_cpu_set_level(rp_cpu_level l);

#endif /* RP_KERNELS_CPU_H */
