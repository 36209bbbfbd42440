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

/* Per-thread cache of the last loaded config: reloading the same shape costs a
 * memcmp instead of an LDTILECFG (which also zeroes all tiles). */
static inline void rp_amx_ensure_cfg(const rp_amx_cfg *c) {
    static _Thread_local rp_amx_cfg cur;
    static _Thread_local int have;
    if (have && memcmp(&cur, c, sizeof cur) == 0) return;
    memcpy(&cur, c, sizeof cur);
    rp_amx_load_cfg(&cur);
    have = 1;
}

#endif /* RP_KERNELS_X86_AMX_H */
