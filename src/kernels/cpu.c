/* cpu.c — feature detection (x86-64: CPUID/XGETBV, AMX state permission; aarch64: getauxval hwcaps) and the
 * active dispatch level. */
#include "kernels/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <stdio.h>
#include <sys/auxv.h>
#endif
#if defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static rp_cpu_info g_info;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_level = -1;

#if defined(__x86_64__)
static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

/* Linux refuses AMX tile data (XFEATURE 18) to a process until it asks. */
static bool request_amx(void) {
    const int ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return false;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return false;
    return (bitmask & (1UL << XFEATURE_XTILEDATA)) != 0;
}
#endif

#if defined(__aarch64__)
/* Linux arm64 hwcap bits (arch/arm64/include/uapi/asm/hwcap.h), spelled out so older headers build too */
#define RP_HWCAP_ASIMD (1UL << 1)
#define RP_HWCAP_FPHP (1UL << 9)
#define RP_HWCAP_ASIMDDP (1UL << 20)
#define RP_HWCAP_SVE (1UL << 22)
#define RP_HWCAP2_SVE2 (1UL << 1)
#define RP_HWCAP2_I8MM (1UL << 13)
#define RP_HWCAP2_BF16 (1UL << 14)
#define RP_HWCAP2_SME (1UL << 23)

#if defined(__APPLE__)
static bool apple_feat(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}
#endif

static void detect_arm(rp_cpu_info *c) {
    strcpy(c->brand, "aarch64");
#if defined(__linux__)
    const unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    c->neon = (h1 & RP_HWCAP_ASIMD) != 0;
    c->fphp = (h1 & RP_HWCAP_FPHP) != 0;
    c->dotprod = (h1 & RP_HWCAP_ASIMDDP) != 0;
    c->sve = (h1 & RP_HWCAP_SVE) != 0;
    c->sve2 = (h2 & RP_HWCAP2_SVE2) != 0;
    c->i8mm = (h2 & RP_HWCAP2_I8MM) != 0;
    c->bf16 = (h2 & RP_HWCAP2_BF16) != 0;
    c->sme = (h2 & RP_HWCAP2_SME) != 0;
    /* the core's MIDR (implementer, part) names it where the kernel exposes it */
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", "r");
    if (f) {
        unsigned long long midr = 0;
        if (fscanf(f, "%llx", &midr) == 1)
            snprintf(c->brand, sizeof c->brand, "aarch64 implementer 0x%02llx part 0x%03llx", (midr >> 24) & 0xff,
                     (midr >> 4) & 0xfff);
        fclose(f);
    }
#elif defined(__APPLE__)
    /* macOS: hw.optional.arm.FEAT_* (1 when present; absent on older releases = not present). Apple's cores
     * have no SVE outside streaming mode: M4's SME runs streaming SVE only, which is what the SME kernels use. */
    c->neon = true;
    c->fphp = apple_feat("hw.optional.arm.FEAT_FP16");
    c->dotprod = apple_feat("hw.optional.arm.FEAT_DotProd");
    c->i8mm = apple_feat("hw.optional.arm.FEAT_I8MM");
    c->bf16 = apple_feat("hw.optional.arm.FEAT_BF16");
    c->sme = apple_feat("hw.optional.arm.FEAT_SME");
    char name[64] = {0};
    size_t len = sizeof name - 1;
    if (sysctlbyname("machdep.cpu.brand_string", name, &len, NULL, 0) == 0 && name[0])
        snprintf(c->brand, sizeof c->brand, "%s", name);   /* "Apple M4" */
#else
    c->neon = true;   /* Advanced SIMD is architectural on AArch64; the rest is not probed here */
#endif
}
#endif

static void detect(void) {
    rp_cpu_info *c = &g_info;
    memset(c, 0, sizeof *c);
    strcpy(c->brand, "unknown");
#if defined(__aarch64__)
    detect_arm(c);
#endif
#if defined(__x86_64__)
    unsigned a, b, cx, d, max = __get_cpuid_max(0, NULL);
    unsigned ext = __get_cpuid_max(0x80000000, NULL);
    if (ext >= 0x80000004) {
        unsigned *w = (unsigned *)c->brand;
        for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &w[4 * i], &w[4 * i + 1], &w[4 * i + 2], &w[4 * i + 3]);
        c->brand[48] = 0;
        char *s = c->brand;
        while (*s == ' ') s++;
        memmove(c->brand, s, strlen(s) + 1);
    }
    if (max < 7) goto done;
    __cpuid(1, a, b, cx, d);
    bool osxsave = (cx >> 27) & 1;
    c->fma = (cx >> 12) & 1;
    c->f16c = (cx >> 29) & 1;
    bool avx = (cx >> 28) & 1;
    if (osxsave) {
        unsigned long long x = xgetbv0();
        c->os_avx = avx && (x & 0x6) == 0x6;               /* XMM | YMM */
        c->os_avx512 = c->os_avx && (x & 0xe0) == 0xe0;    /* opmask | ZMM_Hi256 | Hi16_ZMM */
        c->os_amx = (x & 0x60000) == 0x60000;              /* XTILECFG | XTILEDATA */
    }
    __cpuid_count(7, 0, a, b, cx, d);
    c->avx2 = (b >> 5) & 1;
    c->avx512f = (b >> 16) & 1;
    c->avx512dq = (b >> 17) & 1;
    c->avx512bw = (b >> 30) & 1;
    c->avx512vl = (b >> 31) & 1;
    c->avx512vnni = (cx >> 11) & 1;
    c->avx512fp16 = (d >> 23) & 1;
    c->amx_bf16 = (d >> 22) & 1;
    c->amx_tile = (d >> 24) & 1;
    c->amx_int8 = (d >> 25) & 1;
    __cpuid_count(7, 1, a, b, cx, d);
    c->avxvnni = (a >> 4) & 1;
    c->avx512bf16 = (a >> 5) & 1;
    if (c->amx_tile && c->os_amx) c->amx_permitted = request_amx();
done:
#endif
    c->best = RP_CPU_SCALAR;
#if defined(__aarch64__)
    /* each level needs everything below it */
    if (c->neon) c->best = RP_CPU_NEON;
    if (c->best == RP_CPU_NEON && c->dotprod) c->best = RP_CPU_DOTPROD;
    if (c->best == RP_CPU_DOTPROD && c->i8mm) c->best = RP_CPU_I8MM;
    if (c->best == RP_CPU_I8MM && c->sve && c->sve2) c->best = RP_CPU_SVE2;
    if (c->best == RP_CPU_SVE2 && c->sme) c->best = RP_CPU_SME;
    /* Apple M4 has SME but no SVE outside streaming mode, so it stops at i8mm here: the SME kernels are checked
     * under emulation only with SVE2 present (qemu -cpu max), not yet on an SME-without-SVE core */
#endif
    if (c->avx2 && c->fma && c->f16c && c->os_avx) c->best = RP_CPU_AVX2;
    if (c->best == RP_CPU_AVX2 && c->avx512f && c->avx512bw && c->avx512dq && c->avx512vl && c->avx512vnni &&
        c->os_avx512)
        c->best = RP_CPU_AVX512;
    /* The AMX kernels have only run under an emulator so far (no AMX machine
     * has been available to this project): they are opt-in until validated on
     * real hardware. */
    const char *amx_on = getenv("RP_ENABLE_AMX");
    if (c->best == RP_CPU_AVX512 && c->amx_tile && c->amx_int8 && c->amx_bf16 && c->amx_permitted && amx_on &&
        !strcmp(amx_on, "1"))
        c->best = RP_CPU_AMX;

    int lvl = c->best;
    const char *force = getenv("RP_FORCE_REF");
    if (force && force[0] && strcmp(force, "0") != 0) lvl = RP_CPU_SCALAR;
    const char *want = getenv("RP_CPU");
    if (want && want[0]) {
        int w = rp_cpu_level_parse(want);
        if (w >= 0 && w < lvl) lvl = w;
    }
    atomic_store(&g_level, lvl);
}

const rp_cpu_info *rp_cpu_info_get(void) {
    pthread_once(&g_once, detect);
    return &g_info;
}

/* this build's chain, indexed by level */
#if defined(__x86_64__)
static const char *const k_names[] = {"scalar", "avx2", "avx512", "amx"};
#define RP_LEVEL_NAMES "scalar, avx2, avx512, amx"
#elif defined(__aarch64__)
static const char *const k_names[] = {"scalar", "neon", "dotprod", "i8mm", "sve2", "sme"};
#define RP_LEVEL_NAMES "scalar, neon, dotprod, i8mm, sve2, sme"
#else
static const char *const k_names[] = {"scalar"};
#define RP_LEVEL_NAMES "scalar"
#endif
#define RP_N_LEVELS ((int)(sizeof k_names / sizeof k_names[0]))
_Static_assert(RP_N_LEVELS <= RP_CPU_LEVEL_COUNT, "cpu: RP_CPU_LEVEL_COUNT bounds every chain");

rp_cpu_level rp_cpu_level_top(void) { return (rp_cpu_level)(RP_N_LEVELS - 1); }

const char *rp_cpu_level_name(rp_cpu_level l) { return (int)l >= 0 && (int)l < RP_N_LEVELS ? k_names[l] : "?"; }

const char *rp_cpu_level_names(void) { return RP_LEVEL_NAMES; }

int rp_cpu_level_parse(const char *s) {
    if (!strcmp(s, "ref")) return RP_CPU_SCALAR;
    for (int i = 0; i < RP_N_LEVELS; i++)
        if (!strcmp(s, k_names[i])) return i;
    return -1;
}

rp_cpu_level rp_cpu_level_active(void) {
    rp_cpu_info_get();
    return (rp_cpu_level)atomic_load(&g_level);
}

rp_status rp_cpu_set_level(rp_cpu_level l) {
    const rp_cpu_info *c = rp_cpu_info_get();
    if ((int)l < 0 || (int)l >= RP_N_LEVELS) return rp_errorf(RP_ERR_INVALID_ARG, "cpu: level %d unknown", (int)l);
    if (l > c->best)
        return rp_errorf(RP_ERR_UNSUPPORTED, "cpu: level %s not available on this machine (best: %s)",
                         rp_cpu_level_name(l), rp_cpu_level_name(c->best));
    atomic_store(&g_level, (int)l);
    return RP_OK;
}
