/* types.c — ggml-compatible type traits table: names, block sizes, row sizes. */
#include "kernels/types.h"

#include <stddef.h>
#include <stdint.h>

/* The block structs are read straight out of mmapped GGUF files, so their
 * sizes and field offsets must equal ggml's byte for byte. */
_Static_assert(sizeof(rp_block_q4_0) == 18, "rp_block_q4_0 must be 18 bytes (ggml block_q4_0)");
_Static_assert(sizeof(rp_block_q8_0) == 34, "rp_block_q8_0 must be 34 bytes (ggml block_q8_0)");
_Static_assert(sizeof(rp_block_q4_k) == 144, "rp_block_q4_k must be 144 bytes (ggml block_q4_K)");
_Static_assert(sizeof(rp_block_q6_k) == 210, "rp_block_q6_k must be 210 bytes (ggml block_q6_K)");
_Static_assert(sizeof(rp_block_q8_k) == 292, "rp_block_q8_k must be 292 bytes (ggml block_q8_K)");
_Static_assert(sizeof(rp_block_q4_1) == 20, "rp_block_q4_1 must be 20 bytes (ggml block_q4_1)");
_Static_assert(sizeof(rp_block_q5_0) == 22, "rp_block_q5_0 must be 22 bytes (ggml block_q5_0)");
_Static_assert(sizeof(rp_block_q5_1) == 24, "rp_block_q5_1 must be 24 bytes (ggml block_q5_1)");
_Static_assert(sizeof(rp_block_iq4_nl) == 18, "rp_block_iq4_nl must be 18 bytes (ggml block_iq4_nl)");
_Static_assert(sizeof(rp_block_q2_k) == 84, "rp_block_q2_k must be 84 bytes (ggml block_q2_K)");
_Static_assert(sizeof(rp_block_q3_k) == 110, "rp_block_q3_k must be 110 bytes (ggml block_q3_K)");
_Static_assert(sizeof(rp_block_q5_k) == 176, "rp_block_q5_k must be 176 bytes (ggml block_q5_K)");
_Static_assert(sizeof(rp_block_iq4_xs) == 136, "rp_block_iq4_xs must be 136 bytes (ggml block_iq4_xs)");
_Static_assert(offsetof(rp_block_q5_0, qs) == 6 && offsetof(rp_block_q5_1, qh) == 4 && offsetof(rp_block_q5_1, qs) == 8,
               "rp_block_q5_x field layout differs from ggml");
_Static_assert(offsetof(rp_block_q2_k, qs) == 16 && offsetof(rp_block_q2_k, d) == 80 &&
               offsetof(rp_block_q2_k, dmin) == 82, "rp_block_q2_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q3_k, qs) == 32 && offsetof(rp_block_q3_k, scales) == 96 &&
               offsetof(rp_block_q3_k, d) == 108, "rp_block_q3_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q5_k, scales) == 4 && offsetof(rp_block_q5_k, qh) == 16 &&
               offsetof(rp_block_q5_k, qs) == 48, "rp_block_q5_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_iq4_xs, scales_h) == 2 && offsetof(rp_block_iq4_xs, scales_l) == 4 &&
               offsetof(rp_block_iq4_xs, qs) == 8, "rp_block_iq4_xs field layout differs from ggml");
_Static_assert(offsetof(rp_block_q4_k, scales) == 4 && offsetof(rp_block_q4_k, qs) == 16,
               "rp_block_q4_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q6_k, qh) == 128 && offsetof(rp_block_q6_k, scales) == 192 &&
               offsetof(rp_block_q6_k, d) == 208,
               "rp_block_q6_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q8_k, qs) == 4 && offsetof(rp_block_q8_k, bsums) == 260,
               "rp_block_q8_k field layout differs from ggml");

const int8_t rp_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Indexed by ggml type id: every type of ggml's enum, with ggml's names,
 * block and byte sizes (ggml.c's type_traits). can_compute marks the types
 * with dequantize + dot kernels; the others can be read and listed
 * (reprise inspect) but a model using one is refused, naming the tensor. */
static const rp_type_traits rp_type_table[RP_TYPE_COUNT] = {
    [RP_TYPE_F32]  = {"f32", 1, 4, false, true},
    [RP_TYPE_F16]  = {"f16", 1, 2, false, true},
    [RP_TYPE_Q4_0] = {"q4_0", 32, 18, true, true},
    [RP_TYPE_Q4_1] = {"q4_1", 32, 20, true, true},
    [RP_TYPE_Q5_0] = {"q5_0", 32, 22, true, true},
    [RP_TYPE_Q5_1] = {"q5_1", 32, 24, true, true},
    [RP_TYPE_Q8_0] = {"q8_0", 32, 34, true, true},
    [RP_TYPE_Q8_1] = {"q8_1", 32, 36, true, false},
    [RP_TYPE_Q2_K] = {"q2_K", 256, 84, true, true},
    [RP_TYPE_Q3_K] = {"q3_K", 256, 110, true, true},
    [RP_TYPE_Q4_K] = {"q4_K", 256, 144, true, true},
    [RP_TYPE_Q5_K] = {"q5_K", 256, 176, true, true},
    [RP_TYPE_Q6_K] = {"q6_K", 256, 210, true, true},
    /* Q8_K is an activation-only type in ggml: we can (de)quantize it but no
     * weight tensor is ever Q8_K, so it is not a compute type. */
    [RP_TYPE_Q8_K] = {"q8_K", 256, 292, true, false},
    [RP_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, true, false},
    [RP_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, true, false},
    [RP_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, true, false},
    [RP_TYPE_IQ1_S] = {"iq1_s", 256, 50, true, false},
    [RP_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true, true},
    [RP_TYPE_IQ3_S] = {"iq3_s", 256, 110, true, false},
    [RP_TYPE_IQ2_S] = {"iq2_s", 256, 82, true, false},
    [RP_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true, true},
    [RP_TYPE_I8]   = {"i8", 1, 1, false, false},
    [RP_TYPE_I16]  = {"i16", 1, 2, false, false},
    [RP_TYPE_I32]  = {"i32", 1, 4, false, false},
    [RP_TYPE_I64]  = {"i64", 1, 8, false, false},
    [RP_TYPE_F64]  = {"f64", 1, 8, false, false},
    [RP_TYPE_IQ1_M] = {"iq1_m", 256, 56, true, false},
    [RP_TYPE_BF16] = {"bf16", 1, 2, false, true},
    [RP_TYPE_TQ1_0] = {"tq1_0", 256, 54, true, false},
    [RP_TYPE_TQ2_0] = {"tq2_0", 256, 66, true, false},
    [RP_TYPE_MXFP4] = {"mxfp4", 32, 17, true, false},
    [RP_TYPE_NVFP4] = {"nvfp4", 64, 36, true, false},
    [RP_TYPE_Q1_0] = {"q1_0", 128, 18, true, false},
    [RP_TYPE_Q2_0] = {"q2_0", 64, 18, true, false},
};

/* Ids ggml once used and removed (no block size any more). */
static const char *const rp_type_removed[RP_TYPE_COUNT] = {
    [4] = "q4_2", [5] = "q4_3", [31] = "q4_0_4_4", [32] = "q4_0_4_8", [33] = "q4_0_8_8",
    [36] = "iq4_nl_4_4", [37] = "iq4_nl_4_8", [38] = "iq4_nl_8_8",
};

const rp_type_traits *rp_type_get_traits(int type_id) {
    if (type_id < 0 || type_id >= RP_TYPE_COUNT) return NULL;
    const rp_type_traits *tr = &rp_type_table[type_id];
    return tr->name ? tr : NULL;
}

const char *rp_type_name(int type_id) {
    if (type_id < 0 || type_id >= RP_TYPE_COUNT) return NULL;
    return rp_type_table[type_id].name ? rp_type_table[type_id].name : rp_type_removed[type_id];
}

bool rp_type_is_removed(int type_id) {
    return type_id >= 0 && type_id < RP_TYPE_COUNT && rp_type_removed[type_id] != NULL;
}

size_t rp_type_row_size(rp_type t, int64_t ne0) {
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    if (!tr || ne0 < 0 || ne0 % tr->blck_size != 0) return 0;
    uint64_t nblocks = (uint64_t)(ne0 / tr->blck_size);
    /* A row whose byte size does not fit size_t is as invalid as a ragged
     * one; 0 makes the caller reject it instead of wrapping around. */
    if (nblocks > SIZE_MAX / tr->type_size) return 0;
    return (size_t)nblocks * tr->type_size;
}

/* ASCII-only case folding: type names are ASCII and this must not depend on
 * the process locale. */
static int rp_ascii_lower(int c) {
    return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

int rp_type_from_name(const char *name) {
    if (!name) return -1;
    for (int id = 0; id < RP_TYPE_COUNT; id++) {
        const char *n = rp_type_table[id].name;
        if (!n) continue;
        size_t i = 0;
        while (n[i] && name[i] && rp_ascii_lower((unsigned char)n[i]) == rp_ascii_lower((unsigned char)name[i])) i++;
        if (n[i] == '\0' && name[i] == '\0') return id;
    }
    return -1;
}
