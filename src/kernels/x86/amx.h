/* amx.h — AMX tile configuration helpers, immune to gcc 12 dropping the config stores. */
#ifndef RP_KERNELS_X86_AMX_H
#define RP_KERNELS_X86_AMX_H

#include <stdint.h>
#include <string.h>

/* The 64-byte LDTILECFG operand (palette 1). */
typedef struct __attribute__((aligned(64))) rp_amx_cfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];   /* bytes per row of tile i */
    uint8_t rows[16];     /* rows of tile i */
} rp_amx_cfg;

_Static_assert(sizeof(rp_amx_cfg) == 64, "tile config is 64 bytes");

/* Sets tile i to rows x colsb bytes. */
static inline void rp_amx_cfg_tile(rp_amx_cfg *c, int i, int rows, int colsb) {
    c->rows[i] = (uint8_t)rows;
    c->colsb[i] = (uint16_t)colsb;
}

/* Loads a configuration. Why inline asm instead of _tile_loadconfig: with gcc
 * 12 the intrinsic's pointer argument does not tell the compiler that the 64
 * bytes are read, and it has been seen to drop the stores that fill the
 * struct (llama.cpp's AMX path faults on this machine for that reason). The
 * "m" operand covering the whole struct plus the memory clobber make every
 * store to `*c` happen before LDTILECFG. */
static inline void rp_amx_load_cfg(const rp_amx_cfg *c) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const struct { char b[64]; } *)c) : "memory");
}

static inline void rp_amx_release(void) { __asm__ volatile("tilerelease" ::: "memory"); }

/* Loads `c` unless it is already the thread's live configuration, read back
 * with STTILECFG (a per-file cache would go stale when another file's kernel
 * loads different shapes on the same thread). LDTILECFG zeroes every tile, so
 * skipping an identical reload also keeps it cheap. */
static inline void rp_amx_ensure_cfg(const rp_amx_cfg *c) {
    rp_amx_cfg cur;
    __asm__ volatile("sttilecfg %0" : "=m"(*(struct { char b[64]; } *)&cur) : : "memory");
    if (memcmp(&cur, c, sizeof cur) == 0) return;
    rp_amx_load_cfg(c);
}

#endif /* RP_KERNELS_X86_AMX_H */
