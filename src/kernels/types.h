/* types.h — ggml-compatible tensor type ids, block layouts and type traits. */
#ifndef RP_KERNELS_TYPES_H
#define RP_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type ids are ggml's (GGUF stores them), so files written by llama.cpp load.
 * Every id of ggml's enum (ggml/include/ggml.h) has a traits entry with its
 * name and block size, so any file can be read and listed; can_compute says
 * which ones the kernels handle. Ids ggml has removed (Q4_2, Q4_0_4_4, ...)
 * are named by rp_type_name() but have no traits (no size: a file using one
 * cannot be read). */
typedef enum rp_type {
    RP_TYPE_F32 = 0,
    RP_TYPE_F16 = 1,
    RP_TYPE_Q4_0 = 2,
    RP_TYPE_Q4_1 = 3,
    RP_TYPE_Q5_0 = 6,
    RP_TYPE_Q5_1 = 7,
    RP_TYPE_Q8_0 = 8,
    RP_TYPE_Q8_1 = 9,
    RP_TYPE_Q2_K = 10,
    RP_TYPE_Q3_K = 11,
    RP_TYPE_Q4_K = 12,
    RP_TYPE_Q5_K = 13,
    RP_TYPE_Q6_K = 14,
    RP_TYPE_Q8_K = 15,
    RP_TYPE_IQ2_XXS = 16,
    RP_TYPE_IQ2_XS = 17,
    RP_TYPE_IQ3_XXS = 18,
    RP_TYPE_IQ1_S = 19,
    RP_TYPE_IQ4_NL = 20,
    RP_TYPE_IQ3_S = 21,
    RP_TYPE_IQ2_S = 22,
    RP_TYPE_IQ4_XS = 23,
    RP_TYPE_I8 = 24,
    RP_TYPE_I16 = 25,
    RP_TYPE_I32 = 26,
    RP_TYPE_I64 = 27,
    RP_TYPE_F64 = 28,
    RP_TYPE_IQ1_M = 29,
    RP_TYPE_BF16 = 30,
    RP_TYPE_TQ1_0 = 34,
    RP_TYPE_TQ2_0 = 35,
    RP_TYPE_MXFP4 = 39,
    RP_TYPE_NVFP4 = 40,
    RP_TYPE_Q1_0 = 41,
    RP_TYPE_Q2_0 = 42,
    RP_TYPE_COUNT = 43 /* ggml's GGML_TYPE_COUNT: bound of tables indexed by id */
} rp_type;

#define RP_QK4_0 32
#define RP_QK8_0 32
#define RP_QK4_1 32
#define RP_QK5_0 32
#define RP_QK5_1 32
#define RP_QK4_NL 32
#define RP_QK_K 256
#define RP_K_SCALE_SIZE 12

/* Block layouts, byte-identical to ggml's (static_asserts in types.c). */
typedef struct { uint16_t d; uint8_t qs[RP_QK4_0 / 2]; } rp_block_q4_0;          /* 18 B */
typedef struct { uint16_t d; int8_t qs[RP_QK8_0]; } rp_block_q8_0;               /* 34 B */
/* value = d*q + m, q in [0, 15]; qs[j] = element j (low nibble), j+16 (high) */
typedef struct { uint16_t d, m; uint8_t qs[RP_QK4_1 / 2]; } rp_block_q4_1;        /* 20 B */
/* value = d*(q - 16), q 5-bit: low 4 bits as Q4_0's nibbles, bit 4 of
 * element j in bit j of the little-endian qh */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[RP_QK5_0 / 2]; } rp_block_q5_0;          /* 22 B */
/* value = d*q + m, q 5-bit as Q5_0 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[RP_QK5_1 / 2]; } rp_block_q5_1;       /* 24 B */
/* value = d * rp_iq4nl_values[q], q 4-bit in Q4_0's nibble order */
typedef struct { uint16_t d; uint8_t qs[RP_QK4_NL / 2]; } rp_block_iq4_nl;       /* 18 B */
typedef struct {                                                                 /* 144 B */
    uint16_t d;                        /* super-block scale for quantized scales */
    uint16_t dmin;                     /* super-block scale for quantized mins */
    uint8_t scales[RP_K_SCALE_SIZE];   /* 8 x (6-bit scale, 6-bit min) packed */
    uint8_t qs[RP_QK_K / 2];           /* 4-bit quants */
} rp_block_q4_k;
typedef struct {                                                                 /* 210 B */
    uint8_t ql[RP_QK_K / 2];           /* low 4 bits */
    uint8_t qh[RP_QK_K / 4];           /* high 2 bits */
    int8_t scales[RP_QK_K / 16];       /* 8-bit scales per 16 values */
    uint16_t d;                        /* super-block scale (fp16) */
} rp_block_q6_k;
/* 16 sub-blocks of 16: value = d*(sc & 15)*q - dmin*(sc >> 4), q 2-bit.
 * qs[32h + l] holds, at bit pairs 0..3, elements 128h + l + 32p (p = 0..3). */
typedef struct {                                                                 /* 84 B */
    uint8_t scales[RP_QK_K / 16];      /* low nibble scale, high nibble min */
    uint8_t qs[RP_QK_K / 4];
    uint16_t d, dmin;
} rp_block_q2_k;
/* 16 sub-blocks of 16: value = d*(sc - 32)*(q - 4), q 3-bit: 2 low bits in
 * qs (as Q2_K), the high bit of element j in bit j/32 of hmask[j % 32];
 * the 6-bit sc: low nibbles in bytes 0..7 (sub-blocks 0..7 low, 8..15
 * high), top 2 bits of sub-block j in bits 2*(j/4) of byte 8 + j%4. */
typedef struct {                                                                 /* 110 B */
    uint8_t hmask[RP_QK_K / 8];
    uint8_t qs[RP_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} rp_block_q3_k;
/* Q4_K's scales and layout plus a 5th bit per element in qh. */
typedef struct {                                                                 /* 176 B */
    uint16_t d, dmin;
    uint8_t scales[RP_K_SCALE_SIZE];
    uint8_t qh[RP_QK_K / 8];
    uint8_t qs[RP_QK_K / 2];
} rp_block_q5_k;
/* 8 sub-blocks of 32: value = d*(ls - 32)*rp_iq4nl_values[q], ls 6-bit
 * (low 4 bits in scales_l nibbles, high 2 in scales_h) */
typedef struct {                                                                 /* 136 B */
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[RP_QK_K / 64];
    uint8_t qs[RP_QK_K / 2];
} rp_block_iq4_xs;
typedef struct {                                                                 /* 292 B */
    float d;
    int8_t qs[RP_QK_K];
    int16_t bsums[RP_QK_K / 16];       /* sums of groups of 16 quants */
} rp_block_q8_k;

typedef struct rp_type_traits {
    const char *name;     /* "f32", "q4_0", ... (ggml's names) */
    int64_t blck_size;    /* elements per block (1 for plain types) */
    size_t type_size;     /* bytes per block */
    bool is_quantized;
    bool can_compute;     /* we have dequant + dot kernels for it */
} rp_type_traits;

/* The non-linear 4-bit grid of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t rp_iq4nl_values[16];

/* Traits of a type id, or NULL if the id is not a type ggml has (or had
 * removed: those have no size). */
const rp_type_traits *rp_type_get_traits(int type_id);

/* ggml's name of any id it has ever used ("q4_0_4_4" for a removed one),
 * or NULL for an id outside ggml's enum. For error messages. */
const char *rp_type_name(int type_id);

/* True if id names a type ggml removed (its files cannot be read). */
bool rp_type_is_removed(int type_id);

/* Bytes of a row of `ne0` elements; 0 if ne0 is not a multiple of the block
 * size or the type is unknown. */
size_t rp_type_row_size(rp_type t, int64_t ne0);

/* Parse a type name ("q4_k", "Q8_0", "f16", ...); returns -1 if unknown. */
int rp_type_from_name(const char *name);

#endif /* RP_KERNELS_TYPES_H */
