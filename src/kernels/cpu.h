/* cpu.h — run-time CPU feature detection (x86-64: CPUID, XGETBV, AMX permission; aarch64: getauxval hwcaps) and
 * the dispatch level. */
#ifndef RP_KERNELS_CPU_H
#define RP_KERNELS_CPU_H

#include <stdbool.h>

#include "reprise.h"

/* Dispatch levels: one chain per architecture, each level a superset of the one below. A level is an ordinal
 * within the chain of the architecture the library was built for, so the two chains share values (AVX2 and NEON
 * are both 1): only the chain of the build's architecture is ever named, parsed or selected (kernels of the other
 * one are not compiled in), and "every level up to best" is 0..best on every machine. Any other architecture has
 * only RP_CPU_SCALAR. */
typedef enum rp_cpu_level {
    RP_CPU_SCALAR = 0,   /* portable C reference kernels */
    /* x86-64 */
    RP_CPU_AVX2 = 1,     /* AVX2 + FMA + F16C */
    RP_CPU_AVX512 = 2,   /* AVX-512 F/BW/DQ/VL + VNNI (+ BF16 when present) */
    RP_CPU_AMX = 3,      /* AVX512 level + AMX tiles (int8, bf16), OS permission granted */
    /* aarch64 */
    RP_CPU_NEON = 1,     /* Advanced SIMD, F16 conversions included (every AArch64 core: Cortex-A53/A72 on) */
    RP_CPU_DOTPROD = 2,  /* NEON + SDOT/UDOT (Armv8.2 DotProd: Cortex-A55/A76 and later, Neoverse N1) */
    RP_CPU_I8MM = 3,     /* DOTPROD + SMMLA (Armv8.6 I8MM: Neoverse V1/N2, Cortex-X2/A710 and later) */
    RP_CPU_SVE2 = 4,     /* I8MM + SVE2 (Armv9: Neoverse N2/V2, Cortex-X2 and later) */
    RP_CPU_SME = 5,      /* SME (streaming mode, ZA tiles: Apple M4, Arm C1 (Lumex) cores and later; Cortex-X925 /
                            A725 have none) */
    RP_CPU_LEVEL_COUNT = 6   /* bound of every chain (array sizes); rp_cpu_level_top() is this build's top */
} rp_cpu_level;

typedef struct rp_cpu_info {
    char brand[64];
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16, avx512fp16;
    bool avxvnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx, os_avx512, os_amx;   /* XGETBV: the OS saves these register states */
    bool amx_permitted;               /* arch_prctl(ARCH_REQ_XCOMP_PERM) succeeded */
    /* aarch64 (getauxval AT_HWCAP / AT_HWCAP2) */
    bool neon, fphp, dotprod, i8mm, bf16, sve, sve2, sme;
    rp_cpu_level best;                /* highest level this machine supports */
} rp_cpu_info;

/* Detects once (thread-safe) and returns the machine's features. */
const rp_cpu_info *rp_cpu_info_get(void);

/* The highest level of this build's architecture's chain (RP_CPU_AMX on x86-64, RP_CPU_SME on aarch64,
 * RP_CPU_SCALAR elsewhere). */
rp_cpu_level rp_cpu_level_top(void);
/* The level's name in this build's chain ("?" past its top). */
const char *rp_cpu_level_name(rp_cpu_level l);
/* Parses "scalar" | "ref" and this architecture's names: "avx2" | "avx512" | "amx" on x86-64, "neon" |
 * "dotprod" | "i8mm" | "sve2" | "sme" on aarch64; -1 if unknown here. */
int rp_cpu_level_parse(const char *s);
/* "scalar, avx2, avx512, amx" (this build's names, for messages). */
const char *rp_cpu_level_names(void);

/* The level kernels dispatch on: the best available, or lower when forced by
 * RP_FORCE_REF=1 (scalar), RP_CPU=<level>, or rp_cpu_set_level(). */
rp_cpu_level rp_cpu_level_active(void);
/* Forces a level for everything loaded afterwards (models pack their weights
 * for the level active at load). Asking for more than the machine has is
 * RP_ERR_UNSUPPORTED naming what is missing. */
rp_status rp_cpu_set_level(rp_cpu_level l);

#endif /* RP_KERNELS_CPU_H */
