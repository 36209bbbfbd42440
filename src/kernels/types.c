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
_Static_assert(offsetof(rp_block_q4_k, scales) == 4 && offsetof(rp_block_q4_k, qs) == 16,
               "rp_block_q4_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q6_k, qh) == 128 && offsetof(rp_block_q6_k, scales) == 192 &&
               offsetof(rp_block_q6_k, d) == 208,
               "rp_block_q6_k field layout differs from ggml");
_Static_assert(offsetof(rp_block_q8_k, qs) == 4 && offsetof(rp_block_q8_k, bsums) == 260,
               "rp_block_q8_k field layout differs from ggml");

/* Indexed by ggml type id; entries with a NULL name are ids we do not know
 * (ggml's removed Q4_2/Q4_3, the IQ types, ...). Block and byte sizes are
 * ggml's; can_compute marks the types with reference dequant + dot kernels. */
static const rp_type_traits rp_type_table[RP_TYPE_COUNT] = {
    [RP_TYPE_F32]  = {"f32", 1, 4, false, true},
    [RP_TYPE_F16]  = {"f16", 1, 2, false, true},
    [RP_TYPE_Q4_0] = {"q4_0", 32, 18, true, true},
    [RP_TYPE_Q4_1] = {"q4_1", 32, 20, true, false},
    [RP_TYPE_Q5_0] = {"q5_0", 32, 22, true, false},
    [RP_TYPE_Q5_1] = {"q5_1", 32, 24, true, false},
    [RP_TYPE_Q8_0] = {"q8_0", 32, 34, true, true},
    [RP_TYPE_Q8_1] = {"q8_1", 32, 36, true, false},
    [RP_TYPE_Q2_K] = {"q2_K", 256, 84, true, false},
    [RP_TYPE_Q3_K] = {"q3_K", 256, 110, true, false},
    [RP_TYPE_Q4_K] = {"q4_K", 256, 144, true, true},
    [RP_TYPE_Q5_K] = {"q5_K", 256, 176, true, false},
    [RP_TYPE_Q6_K] = {"q6_K", 256, 210, true, true},
    /* Q8_K is an activation-only type in ggml: we can (de)quantize it but no
     * weight tensor is ever Q8_K, so it is not a compute type. */
    [RP_TYPE_Q8_K] = {"q8_K", 256, 292, true, false},
    [RP_TYPE_I8]   = {"i8", 1, 1, false, false},
    [RP_TYPE_I16]  = {"i16", 1, 2, false, false},
    [RP_TYPE_I32]  = {"i32", 1, 4, false, false},
    [RP_TYPE_I64]  = {"i64", 1, 8, false, false},
    [RP_TYPE_F64]  = {"f64", 1, 8, false, false},
    [RP_TYPE_BF16] = {"bf16", 1, 2, false, true},
};

const rp_type_traits *rp_type_get_traits(int type_id) {
    if (type_id < 0 || type_id >= RP_TYPE_COUNT) return NULL;
    const rp_type_traits *tr = &rp_type_table[type_id];
    return tr->name ? tr : NULL;
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
