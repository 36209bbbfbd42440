/* quant_mix.c — llama.cpp's per-tensor type rules for its standard quantization mixes (llama_tensor_get_type). */
#include "model/quant_mix.h"

#include <string.h>

/* llama_ftype ids of llama.cpp (llama.h). */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17,
    FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32,
};

/* The legacy 32-element types stay pure, as Reprise's synth always wrote
 * them (llama.cpp would give their output and tied embedding Q6_K); the
 * K-quant and IQ4 file types follow llama.cpp. q3_k / q4_k / q5_k are not
 * llama.cpp file types: every matrix of that type. */
static const rp_ftype k_ftypes[] = {
    {"f32", FT_F32, RP_TYPE_F32, false},        {"f16", FT_F16, RP_TYPE_F16, false},
    {"bf16", FT_BF16, RP_TYPE_BF16, false},     {"q8_0", FT_Q8_0, RP_TYPE_Q8_0, true},
    {"q4_0", FT_Q4_0, RP_TYPE_Q4_0, false},     {"q4_1", FT_Q4_1, RP_TYPE_Q4_1, false},
    {"q5_0", FT_Q5_0, RP_TYPE_Q5_0, false},     {"q5_1", FT_Q5_1, RP_TYPE_Q5_1, false},
    {"q2_k", FT_Q2_K, RP_TYPE_Q2_K, true},      {"q3_k_s", FT_Q3_K_S, RP_TYPE_Q3_K, true},
    {"q3_k_m", FT_Q3_K_M, RP_TYPE_Q3_K, true},  {"q3_k_l", FT_Q3_K_L, RP_TYPE_Q3_K, true},
    {"q4_k_s", FT_Q4_K_S, RP_TYPE_Q4_K, true},  {"q4_k_m", FT_Q4_K_M, RP_TYPE_Q4_K, true},
    {"q5_k_s", FT_Q5_K_S, RP_TYPE_Q5_K, true},  {"q5_k_m", FT_Q5_K_M, RP_TYPE_Q5_K, true},
    {"q6_k", FT_Q6_K, RP_TYPE_Q6_K, true},      {"iq4_nl", FT_IQ4_NL, RP_TYPE_IQ4_NL, true},
    {"iq4_xs", FT_IQ4_XS, RP_TYPE_IQ4_XS, true},
    /* pure K-quant files (no llama.cpp name): the closest llama_ftype */
    {"q3_k", FT_Q3_K_S, RP_TYPE_Q3_K, false},   {"q4_k", FT_Q4_K_M, RP_TYPE_Q4_K, false},
    {"q5_k", FT_Q5_K_M, RP_TYPE_Q5_K, false},
};

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

const rp_ftype *rp_ftype_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++) {
        const char *a = k_ftypes[i].name, *b = name;
        while (*a && *b && *a == lower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return &k_ftypes[i];
    }
    return NULL;
}

const char *rp_ftype_list(void) {
    return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, q5_k (pure); q2_k, q3_k_s, q3_k_m, q3_k_l, "
           "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs (llama.cpp's mixes)";
}

/* llama.cpp's use_more_bits: the first and last eighths and every third layer between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* llama.cpp's tensor_type_fallback for a row length the type's block does not divide. */
static rp_type fallback(rp_type t, int64_t ncols) {
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    if (tr && ncols % tr->blck_size == 0) return t;
    switch (t) {
    case RP_TYPE_IQ4_XS: t = RP_TYPE_IQ4_NL; break;
    case RP_TYPE_Q2_K: case RP_TYPE_Q3_K: t = RP_TYPE_Q4_0; break;
    case RP_TYPE_Q4_K: t = RP_TYPE_Q5_0; break;
    case RP_TYPE_Q5_K: t = RP_TYPE_Q5_1; break;
    case RP_TYPE_Q6_K: t = RP_TYPE_Q8_0; break;
    default: return RP_TYPE_F16;
    }
    return ncols % rp_type_get_traits((int)t)->blck_size == 0 ? t : RP_TYPE_F16;
}

rp_type rp_ftype_tensor_type(const rp_ftype *f, const char *role, int layer, int n_layer, int n_gqa, bool tied_embd,
                             int64_t ncols) {
    rp_type t = f->base;
    if (!rp_type_get_traits((int)t)->is_quantized) return t;
    if (!f->mix) return fallback(t, ncols);
    const uint32_t ft = f->llama_ftype;
    const int i = layer, n = n_layer;
    if (!strcmp(role, "output") || (tied_embd && !strcmp(role, "token_embd"))) {
        /* the output matrix (and a tied embedding): Q6_K unless Q8_0 */
        if (ncols % rp_type_get_traits((int)t)->blck_size != 0) t = RP_TYPE_Q8_0;
        else if (t != RP_TYPE_Q8_0) t = RP_TYPE_Q6_K;
    } else if (!strcmp(role, "attn_v")) {
        if (ft == FT_Q2_K) t = n_gqa >= 4 ? RP_TYPE_Q4_K : RP_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? RP_TYPE_Q5_K : RP_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = RP_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && n_gqa >= 4) t = RP_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, n)) t = RP_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = RP_TYPE_Q5_K;
    } else if (!strcmp(role, "ffn_down")) {
        if (ft == FT_Q2_K) t = RP_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < n / 16 ? RP_TYPE_Q5_K : RP_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = RP_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) { if (use_more_bits(i, n)) t = RP_TYPE_Q6_K; }
        else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS)) t = RP_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(i, n)) t = RP_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < n / 8) t = RP_TYPE_Q5_K;
    } else if (!strcmp(role, "attn_qkv")) {   /* phi3's fused q|k|v */
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = RP_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M) t = RP_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M) t = RP_TYPE_Q6_K;
    } else if (!strcmp(role, "attn_output")) {
        if (ft == FT_Q2_K) t = RP_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = RP_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = RP_TYPE_Q5_K;
    }
    return fallback(t, ncols);
}
