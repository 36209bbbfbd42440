/* types.h — ggml-compatible tensor type ids, block layouts and type traits. */
#ifndef RP_KERNELS_TYPES_H
#define RP_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type ids are ggml's (GGUF stores them), so files written by llama.cpp load.
 * Only the ids listed here are recognized; any other id in a file is an error. */
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
    RP_TYPE_I8 = 24,
    RP_TYPE_I16 = 25,
    RP_TYPE_I32 = 26,
    RP_TYPE_I64 = 27,
    RP_TYPE_F64 = 28,
    RP_TYPE_BF16 = 30,
    RP_TYPE_COUNT = 40 /* upper bound for tables indexed by id */
} rp_type;

#define RP_QK4_0 32
#define RP_QK8_0 32
#define RP_QK_K 256
#define RP_K_SCALE_SIZE 12

/* Block layouts, byte-identical to ggml's (static_asserts in types.c). */
typedef struct { uint16_t d; uint8_t qs[RP_QK4_0 / 2]; } rp_block_q4_0;          /* 18 B */
typedef struct { uint16_t d; int8_t qs[RP_QK8_0]; } rp_block_q8_0;               /* 34 B */
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

/* Traits of a type id, or NULL if the id is not one we recognize. */
const rp_type_traits *rp_type_get_traits(int type_id);

/* Bytes of a row of `ne0` elements; 0 if ne0 is not a multiple of the block
 * size or the type is unknown. */
size_t rp_type_row_size(rp_type t, int64_t ne0);

/* Parse a type name ("q4_k", "Q8_0", "f16", ...); returns -1 if unknown. */
int rp_type_from_name(const char *name);

#endif /* RP_KERNELS_TYPES_H */
