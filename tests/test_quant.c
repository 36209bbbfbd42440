/* test_quant.c — type traits, fp16/bf16 conversion, reference (de)quantization and dot kernels, ggml bit-compatibility. */
#include "testutil.h"

#include "kernels/quant.h"
#include "kernels/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seeds per (type, size) in the randomized tests; raise it (-D) to soak the
 * error bounds, which were checked with 20000. */
#ifndef RP_QUANT_TEST_SEEDS
#define RP_QUANT_TEST_SEEDS 12
#endif

/* ------------------------------------------------------------ helpers */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* xorshift64*: deterministic across platforms, so every failure reproduces. */
typedef struct { uint64_t s; } rng_t;

static uint64_t rng_next(rng_t *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

static float rng_uniform(rng_t *r) { /* [0, 1) */
    return (float)((rng_next(r) >> 40) * (1.0 / 16777216.0));
}

static float rng_gauss(rng_t *r) {
    const float u = rng_uniform(r) + 1e-7f, v = rng_uniform(r);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* Weight-like rows: gaussian, heavy-tailed, uniform, all one sign, with
 * zero runs, at a per-row scale spanning 1e-3 .. 1e2. `kind` picks the mix. */
static void gen_row(rng_t *r, float *x, int64_t n, int kind) {
    const float scale = powf(10.0f, (float)(rng_next(r) % 6) - 3.0f);
    for (int64_t i = 0; i < n; i++) {
        float g = rng_gauss(r);
        switch (kind % 6) {
        case 0: x[i] = g; break;
        case 1: x[i] = g * g * g; break;
        case 2: x[i] = 2.0f * rng_uniform(r) - 1.0f; break;
        case 3: x[i] = fabsf(g) + 0.5f; break;
        case 4: x[i] = ((i / 16) % 5 == 1) ? 0.0f : g; break;
        default: x[i] = ((i / 32) % 4 == 0) ? 0.01f * g : g; break;
        }
        x[i] *= scale;
    }
}

static float max_abs(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Half an fp16 ulp at |v|: how far rounding a scale to fp16 may move it
 * (2^-25 in the subnormal range, where K-quant super-scales often land). */
static float fp16_half_ulp(float v) {
    v = fabsf(v);
    if (v < 0x1p-14f) return 0x1p-25f;
    int k;
    frexpf(v, &k); /* v = m * 2^k, m in [0.5, 1): ulp = 2^(k-11) */
    return ldexpf(1.0f, k - 12);
}

/* Q4_K 6-bit scale/min of sub-block j, decoded here straight from the layout
 * definition (independently of rp_q4_k_scale_min, which the kernels use). */
static void q4k_spec_scale_min(const uint8_t s[12], int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 0x3F;
        *m = s[j + 4] & 0x3F;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* ------------------------------------------------------------ traits */

static void test_type_traits(void **state) {
    (void)state;
    static const struct {
        int id; const char *name; int64_t blck; size_t size; bool quant; bool compute;
    } want[] = {
        /* every type of ggml's enum (ggml.h / ggml.c type_traits) */
        {0, "f32", 1, 4, false, true},      {1, "f16", 1, 2, false, true},
        {2, "q4_0", 32, 18, true, true},    {3, "q4_1", 32, 20, true, true},
        {6, "q5_0", 32, 22, true, true},    {7, "q5_1", 32, 24, true, true},
        {8, "q8_0", 32, 34, true, true},    {9, "q8_1", 32, 36, true, false},
        {10, "q2_K", 256, 84, true, true},  {11, "q3_K", 256, 110, true, true},
        {12, "q4_K", 256, 144, true, true}, {13, "q5_K", 256, 176, true, true},
        {14, "q6_K", 256, 210, true, true}, {15, "q8_K", 256, 292, true, false},
        {16, "iq2_xxs", 256, 66, true, false}, {17, "iq2_xs", 256, 74, true, false},
        {18, "iq3_xxs", 256, 98, true, false}, {19, "iq1_s", 256, 50, true, false},
        {20, "iq4_nl", 32, 18, true, true},    {21, "iq3_s", 256, 110, true, false},
        {22, "iq2_s", 256, 82, true, false},   {23, "iq4_xs", 256, 136, true, true},
        {24, "i8", 1, 1, false, false},     {25, "i16", 1, 2, false, false},
        {26, "i32", 1, 4, false, false},    {27, "i64", 1, 8, false, false},
        {28, "f64", 1, 8, false, false},    {29, "iq1_m", 256, 56, true, false},
        {30, "bf16", 1, 2, false, true},
        {34, "tq1_0", 256, 54, true, false}, {35, "tq2_0", 256, 66, true, false},
        {39, "mxfp4", 32, 17, true, false},  {40, "nvfp4", 64, 36, true, false},
        {41, "q1_0", 128, 18, true, false},  {42, "q2_0", 64, 18, true, false},
    };
    int known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const rp_type_traits *tr = rp_type_get_traits(want[i].id);
        assert_non_null(tr);
        assert_string_equal(tr->name, want[i].name);
        assert_string_equal(rp_type_name(want[i].id), want[i].name);
        assert_false(rp_type_is_removed(want[i].id));
        assert_int_equal(tr->blck_size, want[i].blck);
        assert_int_equal(tr->type_size, want[i].size);
        assert_int_equal(tr->is_quantized, want[i].quant);
        assert_int_equal(tr->can_compute, want[i].compute);
        known++;
    }
    /* Every other id, and out-of-range ids, have no traits; the ids ggml
     * removed still have a name for messages. */
    int found = 0;
    for (int id = -5; id < RP_TYPE_COUNT + 5; id++) found += rp_type_get_traits(id) != NULL;
    assert_int_equal(found, known);
    static const struct { int id; const char *name; } removed[] = {
        {4, "q4_2"}, {5, "q4_3"}, {31, "q4_0_4_4"}, {32, "q4_0_4_8"}, {33, "q4_0_8_8"},
        {36, "iq4_nl_4_4"}, {37, "iq4_nl_4_8"}, {38, "iq4_nl_8_8"},
    };
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        assert_null(rp_type_get_traits(removed[i].id));
        assert_true(rp_type_is_removed(removed[i].id));
        assert_string_equal(rp_type_name(removed[i].id), removed[i].name);
    }
    assert_int_equal(known + (int)(sizeof removed / sizeof removed[0]), RP_TYPE_COUNT);  /* every id 0..42 */
    assert_null(rp_type_name(RP_TYPE_COUNT));
    assert_null(rp_type_name(-1));
    assert_null(rp_type_get_traits(RP_TYPE_COUNT));
    assert_null(rp_type_get_traits(-1));
}

static void test_row_size(void **state) {
    (void)state;
    assert_int_equal(rp_type_row_size(RP_TYPE_F32, 10), 40);
    assert_int_equal(rp_type_row_size(RP_TYPE_BF16, 7), 14);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q4_0, 64), 36);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q8_0, 4096), 128 * 34);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q4_K, 4096), 16 * 144);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q6_K, 256 * 3), 630);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q8_K, 256), 292);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q4_0, 0), 0);
    assert_int_equal(rp_type_row_size(RP_TYPE_Q4_0, 33), 0);   /* ragged */
    assert_int_equal(rp_type_row_size(RP_TYPE_Q4_K, 4000), 0); /* ragged */
    assert_int_equal(rp_type_row_size(RP_TYPE_F32, -4), 0);
    assert_int_equal(rp_type_row_size((rp_type)4, 32), 0);     /* unknown id */
    assert_int_equal(rp_type_row_size(RP_TYPE_COUNT, 32), 0);
    /* 2^62 f64 elements = 2^65 bytes: does not fit size_t -> 0, no wrap. */
    if (sizeof(size_t) == 8) assert_int_equal(rp_type_row_size(RP_TYPE_F64, (int64_t)1 << 62), 0);
}

static void test_type_from_name(void **state) {
    (void)state;
    for (int id = 0; id < RP_TYPE_COUNT; id++) {
        const rp_type_traits *tr = rp_type_get_traits(id);
        if (!tr) continue;
        assert_int_equal(rp_type_from_name(tr->name), id);
        char upper[16];
        size_t i = 0;
        for (; i < sizeof upper - 1 && tr->name[i]; i++) {
            char c = tr->name[i];
            upper[i] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
        }
        upper[i] = '\0';
        assert_int_equal(rp_type_from_name(upper), id);
    }
    assert_int_equal(rp_type_from_name("q4_k"), RP_TYPE_Q4_K);
    assert_int_equal(rp_type_from_name("Q4_K"), RP_TYPE_Q4_K);
    assert_int_equal(rp_type_from_name("Q6_k"), RP_TYPE_Q6_K);
    assert_int_equal(rp_type_from_name("Bf16"), RP_TYPE_BF16);
    assert_int_equal(rp_type_from_name("q4_k_m"), -1); /* a file type, not a tensor type */
    assert_int_equal(rp_type_from_name("q4"), -1);
    assert_int_equal(rp_type_from_name("f32 "), -1);
    assert_int_equal(rp_type_from_name(""), -1);
    assert_int_equal(rp_type_from_name(NULL), -1);
}

/* ------------------------------------------------------------ fp16 / bf16 */

static void test_fp16_known_values(void **state) {
    (void)state;
    static const struct { float f; uint16_t h; } kv[] = {
        {1.0f, 0x3c00},     {-2.0f, 0xc000},         {0.5f, 0x3800},
        {65504.0f, 0x7bff}, /* largest finite half */ {-65504.0f, 0xfbff},
        {0.0f, 0x0000},     {-0.0f, 0x8000},
        {0x1p-14f, 0x0400}, /* smallest normal */
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {0x3ffp-24f, 0x03ff}, /* largest subnormal */
        {-0x1p-24f, 0x8001},
        {0.333251953125f, 0x3555}, {1.0009765625f, 0x3c01},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        assert_int_equal(rp_fp32_to_fp16(kv[i].f), kv[i].h);
        assert_true(f2u(rp_fp16_to_fp32(kv[i].h)) == f2u(kv[i].f)); /* bitwise: keeps -0 */
    }
    assert_int_equal(rp_fp32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(rp_fp32_to_fp16(-INFINITY), 0xfc00);
    assert_true(isinf(rp_fp16_to_fp32(0x7c00)) && rp_fp16_to_fp32(0x7c00) > 0);
    assert_true(isinf(rp_fp16_to_fp32(0xfc00)) && rp_fp16_to_fp32(0xfc00) < 0);
    assert_int_equal(rp_fp32_to_fp16(0.1f), 0x2e66);   /* 0.0999755859375 */
    assert_int_equal(rp_fp32_to_fp16(1e6f), 0x7c00);   /* overflow -> inf */
    assert_int_equal(rp_fp32_to_fp16(1e-9f), 0x0000);  /* underflow -> +0 */
    assert_int_equal(rp_fp32_to_fp16(-1e-9f), 0x8000); /* ... keeping the sign */
    /* NaNs stay NaN (quiet), sign kept, even when the payload is only in
     * the low bits that do not survive the narrowing. */
    uint16_t hn = rp_fp32_to_fp16(u2f(0x7f800001u));
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x03ff) != 0 && !(hn & 0x8000));
    hn = rp_fp32_to_fp16(u2f(0xffc00000u));
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x03ff) != 0 && (hn & 0x8000));
    assert_true(isnan(rp_fp16_to_fp32(0x7e00)) && isnan(rp_fp16_to_fp32(0xfd01)));
}

/* All 65536 halves: the fp32 value equals the IEEE formula exactly, and
 * fp16 -> fp32 -> fp16 is the identity except that a NaN only stays a NaN. */
static void test_fp16_exhaustive_roundtrip(void **state) {
    (void)state;
    int nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = rp_fp16_to_fp32((uint16_t)h);
        const int sign = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f && m != 0) {
            assert_true(isnan(f));
            const uint16_t back = rp_fp32_to_fp16(f);
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
            assert_int_equal(back >> 15, sign);
            nans++;
            continue;
        }
        double want;
        if (e == 0x1f) want = INFINITY;
        else if (e == 0) want = ldexp((double)m, -24);
        else want = ldexp((double)(m + 1024), e - 25);
        if (sign) want = -want;
        if ((double)f != want || (signbit(f) != 0) != (sign != 0)) {
            fail_msg("fp16 0x%04x -> %.9g, want %.9g", (unsigned)h, (double)f, want);
        }
        if (rp_fp32_to_fp16(f) != h) {
            fail_msg("fp16 0x%04x -> %.9g -> 0x%04x", (unsigned)h, (double)f, (unsigned)rp_fp32_to_fp16(f));
        }
    }
    assert_int_equal(nans, 2 * 1023);
}

/* fp32 -> fp16 rounds to nearest with ties to even: for every pair of
 * adjacent finite halves (normal and subnormal, both signs) the exact
 * midpoint (representable in fp32: one more bit than fp16) goes to the even
 * one, and one fp32 ulp either side of it goes to the nearer one. */
static void test_fp16_round_ties_to_even(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        for (int s = 0; s < 2; s++) {
            const uint16_t sg = s ? 0x8000 : 0;
            const float lo = rp_fp16_to_fp32((uint16_t)(h | sg));
            const float hi = rp_fp16_to_fp32((uint16_t)((h + 1) | sg));
            const float mid = (float)(((double)lo + (double)hi) / 2.0);
            assert_true((double)mid == ((double)lo + (double)hi) / 2.0); /* exact */
            const uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | sg);
            if (rp_fp32_to_fp16(mid) != even) {
                fail_msg("tie between 0x%04x and 0x%04x: got 0x%04x", (unsigned)(h | sg),
                         (unsigned)((h + 1) | sg), (unsigned)rp_fp32_to_fp16(mid));
            }
            assert_int_equal(rp_fp32_to_fp16(nextafterf(mid, 0.0f)), h | sg);
            assert_int_equal(rp_fp32_to_fp16(nextafterf(mid, s ? -INFINITY : INFINITY)), (h + 1) | sg);
        }
    }
    /* Constructed cases around the edges. */
    assert_int_equal(rp_fp32_to_fp16(65520.0f), 0x7c00);                  /* tie above max -> even = inf */
    assert_int_equal(rp_fp32_to_fp16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(rp_fp32_to_fp16(0x1p-25f), 0x0000);                  /* tie 0 / 2^-24 -> 0 */
    assert_int_equal(rp_fp32_to_fp16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(rp_fp32_to_fp16(0x3p-25f), 0x0002);                  /* tie 1 / 2 ulp -> 2 */
    assert_int_equal(rp_fp32_to_fp16(1.00048828125f), 0x3c00);            /* 1 + 2^-11: tie -> 1.0 */
    assert_int_equal(rp_fp32_to_fp16(1.00146484375f), 0x3c02);            /* 1 + 3*2^-11 -> up */
    assert_int_equal(rp_fp32_to_fp16(0x7fep-25f + 0x1p-25f), 0x0400);     /* rounds up into normal */
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(rp_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(rp_fp32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(rp_fp32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(rp_fp32_to_bf16(INFINITY), 0x7f80);
    assert_true(rp_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(rp_bf16_to_fp32(0x4049) == 3.140625f);
    /* Ties to even on the dropped 16 bits. */
    assert_int_equal(rp_fp32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even below */
    assert_int_equal(rp_fp32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, even above */
    assert_int_equal(rp_fp32_to_bf16(u2f(0x3f808001u)), 0x3f81);
    assert_int_equal(rp_fp32_to_bf16(u2f(0x3f807fffu)), 0x3f80);
    assert_int_equal(rp_fp32_to_bf16(u2f(0x00018000u)), 0x0002); /* subnormal tie */
    assert_int_equal(rp_fp32_to_bf16(u2f(0x00008000u)), 0x0000);
    assert_int_equal(rp_fp32_to_bf16(u2f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    /* NaN: quiet, sign kept, never turned into Inf by truncation. */
    assert_int_equal(rp_fp32_to_bf16(u2f(0x7f800001u)), 0x7fc0);
    assert_int_equal(rp_fp32_to_bf16(u2f(0xff800001u)), 0xffc0);
    assert_int_equal(rp_fp32_to_bf16(u2f(0x7fc00000u)), 0x7fc0);
    /* Exhaustive: every bf16 widens exactly and narrows back to itself. */
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = rp_bf16_to_fp32((uint16_t)h);
        assert_true(f2u(f) == h << 16);
        const uint16_t back = rp_fp32_to_bf16(f);
        if (isnan(f)) assert_true((back & 0x7f80) == 0x7f80 && (back & 0x7f) && (back >> 15) == (h >> 15));
        else if (back != h) fail_msg("bf16 0x%04x -> 0x%04x", (unsigned)h, (unsigned)back);
    }
}

/* ------------------------------------------------------------ quantize -> dequantize */

/* Per-element error bounds. Every bound is stated against the parameters the
 * encoder wrote into the block, plus `slack` for the float rounding of the
 * decode itself (a few ulps of the values involved). Returns the max |err|. */

/* F16: half an ulp, |err| <= |x| * 2^-11 (2^-25 absolute for subnormal halves). */
/* BF16: half an ulp, |err| <= |x| * 2^-8. */

/* Q8_0: d = amax/127, q = round(x/d): |err| <= d/2 with the exact d; the fp16
 * rounding of d moves each value by |q| * |d - fp16(d)| <= 127 * |d - d16|. */
static void check_q8_0_row(const float *x, const float *y, const rp_block_q8_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float amax = max_abs(x + 32 * i, 32);
        const float d = amax / 127.0f, d16 = rp_fp16_to_fp32(b[i].d);
        assert_true(fabsf(d16 - d) <= d * 0x1p-11f + 0x1p-24f); /* d stored as fp16 */
        const float bound = 0.5f * d + 127.0f * fabsf(d16 - d) + amax * 1e-6f;
        for (int j = 0; j < 32; j++) {
            const float err = fabsf(x[32 * i + j] - y[32 * i + j]);
            if (err > bound) fail_msg("q8_0 block %lld elem %d: x=%g y=%g err=%g > %g", (long long)i, j,
                                      (double)x[32 * i + j], (double)y[32 * i + j], (double)err, (double)bound);
        }
    }
}

/* Q4_0: d = max/-8 (max = signed value of largest |x|), q = min(15, trunc(x/d + 8.5)):
 * |err| <= |d|/2 where x/d <= 7.5; values of the opposite sign to max with
 * x/d in (7.5, 8] clamp to q = 15 and err <= |d|. fp16(d) adds <= 8*|d - d16|. */
static void check_q4_0_row(const float *x, const float *y, const rp_block_q4_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *xb = x + 32 * i;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
        }
        const float d = max / -8.0f, d16 = rp_fp16_to_fp32(b[i].d);
        const float fp16_err = 8.0f * fabsf(d16 - d) + amax * 1e-6f;
        for (int j = 0; j < 32; j++) {
            const float r = d != 0.0f ? xb[j] / d : 0.0f;
            const float bound = (r <= 7.5f ? 0.5f : 1.0f) * fabsf(d) + fp16_err;
            const float err = fabsf(xb[j] - y[32 * i + j]);
            if (err > bound) fail_msg("q4_0 block %lld elem %d: x=%g y=%g err=%g > %g", (long long)i, j,
                                      (double)xb[j], (double)y[32 * i + j], (double)err, (double)bound);
        }
    }
}

/* Q4_K: value = d*sc*q - dmin*m, q in [0, 15], per sub-block of 32. The
 * encoder re-quantizes each x against the stored (d*sc, dmin*m), so where
 * t = (x + dmin*m)/(d*sc) lies in [-0.5, 15.5] the error is <= d*sc/2 (exact
 * property). Values outside the sub-block's grid are clamped: the scale/min
 * fit trades range for resolution, 6-bit scales round, and rounding d and
 * dmin to fp16 moves every value by up to F = 63*15*ulp16(d)/2 +
 * 63*ulp16(dmin)/2. Their error is bounded empirically by 2B + F, with
 * B = the block's largest step max_j d*sc_j (observed <= 1.14 B over 400k
 * random blocks with normal-range scales), and any error by amax/4 + F
 * (observed <= 0.125 amax). */
static void check_q4_k_row(const float *x, const float *y, const rp_block_q4_k *b, int64_t n) {
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + 256 * i, *yb = y + 256 * i;
        const float d = rp_fp16_to_fp32(b[i].d), dmin = rp_fp16_to_fp32(b[i].dmin);
        const float amax = max_abs(xb, 256);
        float B = 0.0f;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            q4k_spec_scale_min(b[i].scales, j, &sc, &m);
            B = d * sc > B ? d * sc : B;
        }
        const float slack = amax * 1e-6f;
        const float F = 945.0f * fp16_half_ulp(d) + 63.0f * fp16_half_ulp(dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            q4k_spec_scale_min(b[i].scales, j, &sc, &m);
            const float ds = d * sc, ms = dmin * m;
            for (int l = 0; l < 32; l++) {
                const float xv = xb[32 * j + l], err = fabsf(xv - yb[32 * j + l]);
                const float t = ds > 0.0f ? (xv + ms) / ds : -1.0f;
                const float bound = (t >= -0.5f && t <= 15.5f) ? 0.5f * ds + slack : 2.0f * B + F + slack;
                if (err > bound || err > 0.25f * amax + F + slack) {
                    fail_msg("q4_K block %lld elem %d: x=%g y=%g err=%g > %g", (long long)i, 32 * j + l,
                             (double)xv, (double)yb[32 * j + l], (double)err, (double)bound);
                }
            }
        }
    }
}

/* Q6_K: value = d*sc*q, q in [-32, 31], per group of 16. In-grid values
 * (x/(d*sc) in [-32.5, 31.5]) have error <= |d*sc|/2 (exact property).
 * Clamped ones (the asymmetric range's top, least-squares group scales that
 * sacrifice the extremes, rounded int8 scales, and the fp16 super-scale
 * moving every value by up to F = 128*32*ulp16(d)/2 -- d is often subnormal)
 * are bounded empirically by 2B + F, B = the block's largest step
 * max_g |d*sc_g| (observed <= 0.76 B); all errors by amax/16 + F
 * (observed <= 0.025 amax). */
static void check_q6_k_row(const float *x, const float *y, const rp_block_q6_k *b, int64_t n) {
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xb = x + 256 * i, *yb = y + 256 * i;
        const float d = rp_fp16_to_fp32(b[i].d);
        const float amax = max_abs(xb, 256);
        float B = 0.0f;
        for (int g = 0; g < 16; g++) B = fabsf(d * b[i].scales[g]) > B ? fabsf(d * b[i].scales[g]) : B;
        const float slack = amax * 1e-6f;
        const float F = 4096.0f * fp16_half_ulp(d);
        for (int e = 0; e < 256; e++) {
            const float ds = d * b[i].scales[e / 16];
            const float t = ds != 0.0f ? xb[e] / ds : 1e9f;
            const float err = fabsf(xb[e] - yb[e]);
            const float bound = (t >= -32.5f && t <= 31.5f) ? 0.5f * fabsf(ds) + slack : 2.0f * B + F + slack;
            if (err > bound || err > amax / 16.0f + F + slack) {
                fail_msg("q6_K block %lld elem %d: x=%g y=%g err=%g > %g", (long long)i, e, (double)xb[e],
                         (double)yb[e], (double)err, (double)bound);
            }
        }
    }
}

/* Q8_K: d = max/-127 kept in fp32, q = nearest(x/d): |err| <= |d|/2; bsums
 * are the exact sums of each 16 quants. */
static void check_q8_k_row(const float *x, const float *y, const rp_block_q8_k *b, int64_t n) {
    for (int64_t i = 0; i < n / 256; i++) {
        const float amax = max_abs(x + 256 * i, 256);
        assert_true(fabsf(fabsf(b[i].d) - amax / 127.0f) <= amax * 1e-6f);
        const float bound = 0.5f * fabsf(b[i].d) + amax * 1e-6f;
        for (int e = 0; e < 256; e++) {
            const float err = fabsf(x[256 * i + e] - y[256 * i + e]);
            if (err > bound) fail_msg("q8_K block %lld elem %d: err=%g > %g", (long long)i, e, (double)err, (double)bound);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * g + l];
            assert_int_equal(b[i].bsums[g], s);
        }
    }
}

static void test_quantize_roundtrip_bounds(void **state) {
    (void)state;
    static const rp_type types[] = {RP_TYPE_F16, RP_TYPE_BF16, RP_TYPE_Q8_0, RP_TYPE_Q4_0,
                                    RP_TYPE_Q4_K, RP_TYPE_Q6_K, RP_TYPE_Q8_K};
    static const int64_t sizes[] = {32, 32 * 3, 32 * 7, 256, 256 * 3, 256 * 7};
    /* Whole-row bound max|err| <= rel * max|x| + abs, implied by the
     * per-element bounds: the rel part with a normal-range fp16 scale, the
     * abs part for a subnormal one (half-ulp 2^-25 times the largest code).
     * Q4_K / Q6_K are bounded against their block's amax in the per-element
     * checks already. */
    static const float row_rel[] = {0x1p-11f, 0x1p-8f, 0.00445f /* (0.5 + 127*2^-11)/127 */,
                                    0.127f /* (1 + 8*2^-11)/8 */, INFINITY, INFINITY,
                                    0.5f / 127};
    static const float row_abs[] = {0x1p-25f, 0.0f, 127 * 0x1p-25f, 8 * 0x1p-25f, 0.0f, 0.0f, 0.0f};
    enum { NMAX = 256 * 7 };
    float *x = malloc(NMAX * sizeof(float)), *y = malloc(NMAX * sizeof(float));
    void *q = malloc(NMAX * 4 + 16), *q2 = malloc(NMAX * 4);
    assert_true(x && y && q && q2);
    int rows = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const rp_type t = types[ti];
        const rp_type_traits *tr = rp_type_get_traits(t);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t n = sizes[si];
            if (n % tr->blck_size) continue;
            for (uint64_t seed = 1; seed <= RP_QUANT_TEST_SEEDS; seed++) {
                rng_t r = {seed * 0x9E3779B97F4A7C15ull + (uint64_t)n};
                gen_row(&r, x, n, (int)seed);
                const size_t rs = rp_type_row_size(t, n);
                assert_true(rs > 0);
                memset(q, 0xA5, rs + 16);
                assert_true(rp_quantize_row(t, x, q, n));
                /* Writes exactly row_size bytes. */
                for (size_t k = rs; k < rs + 16; k++) assert_int_equal(((uint8_t *)q)[k], 0xA5);
                assert_true(rp_dequantize_row(t, q, y, n));
                switch (t) {
                case RP_TYPE_F16: /* subnormal halves: absolute half-ulp 2^-25 */
                    for (int64_t k = 0; k < n; k++) assert_true(fabsf(x[k] - y[k]) <= fmaxf(fabsf(x[k]) * 0x1p-11f, 0x1p-25f));
                    break;
                case RP_TYPE_BF16:
                    for (int64_t k = 0; k < n; k++) assert_true(fabsf(x[k] - y[k]) <= fabsf(x[k]) * 0x1p-8f);
                    break;
                case RP_TYPE_Q8_0: check_q8_0_row(x, y, q, n); break;
                case RP_TYPE_Q4_0: check_q4_0_row(x, y, q, n); break;
                case RP_TYPE_Q4_K: check_q4_k_row(x, y, q, n); break;
                case RP_TYPE_Q6_K: check_q6_k_row(x, y, q, n); break;
                case RP_TYPE_Q8_K: check_q8_k_row(x, y, q, n); break;
                default: fail();
                }
                float maxerr = 0.0f;
                for (int64_t k = 0; k < n; k++) maxerr = fmaxf(maxerr, fabsf(x[k] - y[k]));
                const float amax = max_abs(x, n);
                if (maxerr > row_rel[ti] * amax + row_abs[ti] + amax * 1e-6f /* decode rounding */) {
                    fail_msg("%s n=%lld seed=%llu: max err %g > %g * amax %g", tr->name, (long long)n,
                             (unsigned long long)seed, (double)maxerr, (double)row_rel[ti], (double)amax);
                }
                /* Deterministic: same input, same bytes. */
                assert_true(rp_quantize_row(t, x, q2, n));
                assert_memory_equal(q, q2, rs);
                rows++;
            }
        }
    }
    print_message("quantize->dequantize bounds held on %d rows\n", rows);
    free(x);
    free(y);
    free(q);
    free(q2);
}

/* All-zero input: zero scales, decodes to exact zeros (no NaN from 0/0). */
static void test_quantize_zero_rows(void **state) {
    (void)state;
    static const rp_type types[] = {RP_TYPE_Q8_0, RP_TYPE_Q4_0, RP_TYPE_Q4_K, RP_TYPE_Q6_K, RP_TYPE_Q8_K};
    float x[512] = {0}, y[512];
    uint8_t q[1024];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        assert_true(rp_quantize_row(types[ti], x, q, 512));
        assert_true(rp_dequantize_row(types[ti], q, y, 512));
        for (int i = 0; i < 512; i++) assert_true(y[i] == 0.0f);
    }
    /* Q8_K of zeros is all zero bytes, bsums included. */
    rp_block_q8_k b8;
    memset(&b8, 0x5A, sizeof b8);
    assert_true(rp_quantize_row(RP_TYPE_Q8_K, x, &b8, 256));
    const uint8_t *p = (const uint8_t *)&b8;
    for (size_t i = 0; i < sizeof b8; i++) assert_int_equal(p[i], 0);
}

/* Known-answer checks of the rounding rules that make files bit-identical. */
static void test_quantize_rounding_rules(void **state) {
    (void)state;
    /* Q8_0: amax 127 gives d = 1 exactly; roundf rounds halves away from 0. */
    float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f};
    rp_block_q8_0 b8;
    assert_true(rp_quantize_row(RP_TYPE_Q8_0, x, &b8, 32));
    assert_int_equal(b8.d, 0x3c00);
    const int q8_want[7] = {127, 3, -3, 1, -1, 1, -127};
    for (int i = 0; i < 7; i++) assert_int_equal(b8.qs[i], q8_want[i]);

    /* Q4_0: the first value of largest magnitude fixes d = max/-8; codes are
     * trunc(x/d + 8.5) clamped to 15. max = 4 -> d = -0.5, x/d = -2x:
     * 4 -> 0.5 -> 0; -4 -> 16.5 -> clamp 15; 1 -> 6.5 -> 6; -1.25 -> 11;
     * 0.25 -> 8; -0.25 -> 9; 0 -> 8.5 -> 8. */
    float x4[32] = {4.0f, -4.0f, 1.0f, -1.25f, 0.25f, -0.25f, 0.0f};
    rp_block_q4_0 b4;
    assert_true(rp_quantize_row(RP_TYPE_Q4_0, x4, &b4, 32));
    assert_int_equal(b4.d, 0xb800); /* -0.5 */
    const int q4_want[7] = {0, 15, 6, 11, 8, 9, 8};
    for (int i = 0; i < 7; i++) assert_int_equal(b4.qs[i] & 0x0F, q4_want[i]);
    for (int i = 0; i < 16; i++) assert_int_equal(b4.qs[i] >> 4, 8); /* x[16..31] = 0 -> code 8 */
    float y4[32];
    assert_true(rp_dequantize_row(RP_TYPE_Q4_0, &b4, y4, 32));
    assert_true(y4[0] == 4.0f && y4[1] == -3.5f && y4[2] == 1.0f && y4[3] == -1.5f);

    /* Q8_K: nearest-int rounds ties to even. max = 127 -> d = -1. */
    float xk[256] = {127.0f, 2.5f, 3.5f, -2.5f, 0.5f};
    rp_block_q8_k bk;
    assert_true(rp_quantize_row(RP_TYPE_Q8_K, xk, &bk, 256));
    assert_true(bk.d == -1.0f);
    const int qk_want[5] = {-127, -2, -4, 2, 0};
    for (int i = 0; i < 5; i++) assert_int_equal(bk.qs[i], qk_want[i]);
    assert_int_equal(bk.bsums[0], -127 - 2 - 4 + 2);
}

/* ------------------------------------------------------------ hand-built blocks */

static void test_dequant_hand_built_q4_0_q8_0(void **state) {
    (void)state;
    rp_block_q4_0 b4;
    b4.d = 0x3c00; /* 1.0 */
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)((j & 0xF) | ((15 - j) << 4));
    float y[32];
    assert_true(rp_dequantize_row(RP_TYPE_Q4_0, &b4, y, 32));
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)(j - 8));       /* low nibble -> element j */
        assert_true(y[j + 16] == (float)(7 - j));  /* high nibble -> element j+16 */
    }
    rp_block_q8_0 b8;
    b8.d = 0xb400; /* -0.25 */
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(4 * j - 64);
    assert_true(rp_dequantize_row(RP_TYPE_Q8_0, &b8, y, 32));
    for (int j = 0; j < 32; j++) assert_true(y[j] == -0.25f * (float)(4 * j - 64));
}

/* A Q4_K block assembled byte by byte from the layout definition:
 *   d = 0.5 (0x3800), dmin = 0.25 (0x3400)
 *   sub-block j:   0  1  2   3   4   5   6   7
 *   scale sc_j:    1  2  3  10  17  33  48  63
 *   min    m_j:    0  5 63   1  20  40  16  62
 * scales[0..3] = sc_j | (sc_{j+4} >> 4) << 6; scales[4..7] = m_j | (m_{j+4} >> 4) << 6;
 * scales[8..11] = (sc_{j+4} & 15) | (m_{j+4} & 15) << 4.
 * qs[32c + l]: low nibble = element 64c + l, high = element 64c + 32 + l.
 * Value = d*sc*q - dmin*m; every value below is exact in fp32. */
static void test_dequant_hand_built_q4_k(void **state) {
    (void)state;
    rp_block_q4_k b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;
    b.dmin = 0x3400;
    const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xCA, 0x40, 0x85, 0x7F, 0xC1, 0x41, 0x81, 0x00, 0xEF};
    memcpy(b.scales, scales, 12);
    b.qs[0] = 0x3F;       /* e0: q=15 (sb0), e32: q=3 (sb1) */
    b.qs[32 + 5] = 0xA7;  /* e69: q=7 (sb2), e101: q=10 (sb3) */
    b.qs[64 + 31] = 0x5C; /* e159: q=12 (sb4), e191: q=5 (sb5) */
    b.qs[96] = 0xF0;      /* e192: q=0 (sb6), e224: q=15 (sb7) */

    const int sc[8] = {1, 2, 3, 10, 17, 33, 48, 63}, mn[8] = {0, 5, 63, 1, 20, 40, 16, 62};
    for (int j = 0; j < 8; j++) { /* the packing above is what the spec decodes */
        int s, m;
        q4k_spec_scale_min(b.scales, j, &s, &m);
        assert_int_equal(s, sc[j]);
        assert_int_equal(m, mn[j]);
        uint8_t s8, m8;
        rp_q4_k_scale_min(j, b.scales, &s8, &m8);
        assert_int_equal(s8, sc[j]);
        assert_int_equal(m8, mn[j]);
    }
    float y[256];
    assert_true(rp_dequantize_row(RP_TYPE_Q4_K, &b, y, 256));
    /* Elements with q = 0 decode to -dmin*m of their sub-block. */
    for (int e = 0; e < 256; e++) {
        if (e == 0 || e == 32 || e == 69 || e == 101 || e == 159 || e == 191 || e == 224) continue;
        if (y[e] != -0.25f * mn[e / 32]) fail_msg("q4_K elem %d = %g, want %g", e, (double)y[e], -0.25 * mn[e / 32]);
    }
    assert_true(y[0] == 7.5f);     /* 0.5*1*15 - 0 */
    assert_true(y[32] == 1.75f);   /* 0.5*2*3 - 0.25*5 */
    assert_true(y[69] == -5.25f);  /* 0.5*3*7 - 0.25*63 */
    assert_true(y[101] == 49.75f); /* 0.5*10*10 - 0.25*1 */
    assert_true(y[159] == 97.0f);  /* 0.5*17*12 - 0.25*20 */
    assert_true(y[191] == 72.5f);  /* 0.5*33*5 - 0.25*40 */
    assert_true(y[192] == -4.0f);  /* 0.5*48*0 - 0.25*16 */
    assert_true(y[224] == 457.0f); /* 0.5*63*15 - 0.25*62 */
}

/* A Q6_K block from the layout definition: d = 0.125 (0x3000), int8 group
 * scales below. Element e: half h = e/128, r = e%128, k = r/32, l = r%32; its
 * low 4 bits are in ql[64h + 32(k&1) + l] (low nibble for k < 2, high for
 * k >= 2), its top 2 bits in qh[32h + l] at bit 2k; q = code - 32;
 * value = d * scales[e/16] * q. All-zero bytes mean q = -32 (value -4*sc). */
static void test_dequant_hand_built_q6_k(void **state) {
    (void)state;
    rp_block_q6_k b;
    memset(&b, 0, sizeof b);
    b.d = 0x3000;
    const int8_t scales[16] = {1, -1, 2, -2, 4, -4, 8, -8, 16, -16, 32, -32, 64, -64, 127, -128};
    memcpy(b.scales, scales, 16);
    b.ql[0] = 0xAF;  /* e0 low4 = 15, e64 low4 = 10 */
    b.qh[0] = 0x23;  /* e0 hi2 = 3 (code 63, q 31), e64 hi2 = 2 (code 42, q 10) */
    b.ql[49] = 0x05; /* e49 (h0 k1 l17): code 5, q -27 */
    b.ql[127] = 0x80; /* e255 (h1 k3 l31) low4 = 8 */
    b.qh[63] = 0x80;  /* e255 hi2 = 2: code 40, q 8 */
    b.qh[37] = 0x02;  /* e133 (h1 k0 l5) hi2 = 2: code 32, q 0 */
    float y[256];
    assert_true(rp_dequantize_row(RP_TYPE_Q6_K, &b, y, 256));
    for (int e = 0; e < 256; e++) {
        if (e == 0 || e == 64 || e == 49 || e == 255 || e == 133) continue;
        if (y[e] != -4.0f * scales[e / 16]) fail_msg("q6_K elem %d = %g, want %g", e, (double)y[e], -4.0 * scales[e / 16]);
    }
    assert_true(y[0] == 3.875f);   /* 0.125 * 1 * 31 */
    assert_true(y[64] == 5.0f);    /* 0.125 * 4 * 10 */
    assert_true(y[49] == 6.75f);   /* 0.125 * -2 * -27 */
    assert_true(y[255] == -128.0f); /* 0.125 * -128 * 8 */
    assert_true(y[133] == 0.0f);   /* q = 0 */
    assert_true(y[191] == 128.0f); /* shares ql[127]/qh[63] with e255: q -32, sc -32 */
}

static void test_dequant_hand_built_q8_k(void **state) {
    (void)state;
    rp_block_q8_k b;
    memset(&b, 0, sizeof b);
    b.d = 0.5f;
    for (int j = 0; j < 256; j++) b.qs[j] = (int8_t)(j - 128);
    float y[256];
    assert_true(rp_dequantize_row(RP_TYPE_Q8_K, &b, y, 256));
    for (int j = 0; j < 256; j++) assert_true(y[j] == 0.5f * (float)(j - 128));
}

/* ------------------------------------------------------------ dot products */

static void test_vec_dot_types(void **state) {
    (void)state;
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_F32), RP_TYPE_F32);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_F16), RP_TYPE_F32);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_BF16), RP_TYPE_F32);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q4_0), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q8_0), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q4_K), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q6_K), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q4_1), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q5_0), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q5_1), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_IQ4_NL), RP_TYPE_Q8_0);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q2_K), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q3_K), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_Q5_K), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_IQ4_XS), RP_TYPE_Q8_K);
    assert_int_equal(rp_type_vec_dot_type(RP_TYPE_IQ2_XXS), RP_TYPE_COUNT); /* no kernel */
    /* Unsupported type, ragged n: NaN. */
    uint8_t buf[1024] = {0};
    assert_true(isnan(rp_vec_dot_ref(RP_TYPE_IQ2_XXS, 256, buf, buf)));
    assert_true(isnan(rp_vec_dot_ref(RP_TYPE_Q8_1, 32, buf, buf)));
    assert_true(isnan(rp_vec_dot_ref(RP_TYPE_Q8_K, 256, buf, buf)));
    assert_true(isnan(rp_vec_dot_ref((rp_type)4, 32, buf, buf)));
    assert_true(isnan(rp_vec_dot_ref(RP_TYPE_Q4_0, 48, buf, buf)));
    assert_true(isnan(rp_vec_dot_ref(RP_TYPE_Q4_K, 32, buf, buf)));
    assert_true(rp_vec_dot_ref(RP_TYPE_Q8_0, 0, NULL, NULL) == 0.0f);
}

/* For every compute type and odd block counts: the integer-domain dot equals
 * the float dot of the two dequantized rows, to 1e-4 of sum |w_i * a_i| (the
 * magnitude that bounds accumulated rounding; equals 1e-4 relative when the
 * terms do not cancel). */
static void test_vec_dot_matches_dequantized(void **state) {
    (void)state;
    static const rp_type types[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_BF16, RP_TYPE_Q8_0, RP_TYPE_Q4_0,
                                    RP_TYPE_Q4_K, RP_TYPE_Q6_K, RP_TYPE_Q4_1, RP_TYPE_Q5_0, RP_TYPE_Q5_1,
                                    RP_TYPE_IQ4_NL, RP_TYPE_Q2_K, RP_TYPE_Q3_K, RP_TYPE_Q5_K, RP_TYPE_IQ4_XS};
    static const int nblocks[] = {1, 3, 7, 9};
    enum { NMAX = 256 * 9 };
    float *w = malloc(NMAX * sizeof(float)), *a = malloc(NMAX * sizeof(float));
    float *wd = malloc(NMAX * sizeof(float)), *ad = malloc(NMAX * sizeof(float));
    void *wq = malloc(NMAX * 4), *aq = malloc(NMAX * 4);
    assert_true(w && a && wd && ad && wq && aq);
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const rp_type t = types[ti], vt = rp_type_vec_dot_type(t);
        const rp_type_traits *tr = rp_type_get_traits(t);
        assert_true(tr->can_compute);
        for (size_t bi = 0; bi < sizeof nblocks / sizeof nblocks[0]; bi++) {
            /* Plain types: use 32-element "blocks" so n is not trivially 1. */
            const int64_t n = nblocks[bi] * (tr->blck_size > 1 ? tr->blck_size : 32);
            for (uint64_t seed = 1; seed <= (RP_QUANT_TEST_SEEDS + 1) / 2; seed++) {
                rng_t r = {seed * 0xD1B54A32D192ED03ull + (uint64_t)(n * 131 + (int64_t)ti)};
                gen_row(&r, w, n, (int)seed);
                gen_row(&r, a, n, (int)seed + 1);
                assert_true(rp_quantize_row(t, w, wq, n));
                assert_true(rp_quantize_row(vt, a, aq, n));
                assert_true(rp_dequantize_row(t, wq, wd, n));
                assert_true(rp_dequantize_row(vt, aq, ad, n));
                double ref = 0.0, mag = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)wd[i] * (double)ad[i];
                    mag += fabs((double)wd[i] * (double)ad[i]);
                }
                const float got = rp_vec_dot_ref(t, n, wq, aq);
                if (!(fabs((double)got - ref) <= 1e-4 * mag + 1e-30)) {
                    fail_msg("%s n=%lld seed=%llu: dot %.9g, dequantized dot %.9g (mag %.3g)", tr->name,
                             (long long)n, (unsigned long long)seed, (double)got, ref, mag);
                }
                checked++;
            }
        }
    }
    print_message("vec_dot_ref matched dequantized dot on %d rows\n", checked);
    free(w); free(a); free(wd); free(ad); free(wq); free(aq);
}

static void test_dot_f32_ref(void **state) {
    (void)state;
    float a[100], b[100];
    double want = 0.0;
    for (int i = 0; i < 100; i++) {
        a[i] = (float)(i - 50) * 0.25f;
        b[i] = (float)(i % 7) - 3.0f;
        want += (double)a[i] * b[i];
    }
    assert_true(rp_dot_f32_ref(100, a, b) == (float)want); /* small integers * 0.25: exact */
    assert_true(rp_dot_f32_ref(0, a, b) == 0.0f);
}

/* ------------------------------------------------------------ API contract */

static void test_row_api_contract(void **state) {
    (void)state;
    float x[64] = {1.0f}, y[64];
    uint8_t q[256];
    memset(q, 0x77, sizeof q);
    assert_false(rp_quantize_row(RP_TYPE_Q8_1, x, q, 32)); /* no reference kernel */
    assert_false(rp_quantize_row(RP_TYPE_Q4_0, x, q, 33)); /* ragged */
    assert_false(rp_quantize_row(RP_TYPE_Q4_K, x, q, 64)); /* ragged for 256 */
    assert_false(rp_quantize_row(RP_TYPE_Q8_0, x, q, -32));
    assert_false(rp_quantize_row((rp_type)5, x, q, 32));
    for (size_t i = 0; i < sizeof q; i++) assert_int_equal(q[i], 0x77); /* untouched */
    for (int i = 0; i < 64; i++) y[i] = 42.0f;
    assert_false(rp_dequantize_row(RP_TYPE_IQ2_XXS, q, y, 256));
    assert_false(rp_dequantize_row(RP_TYPE_Q8_0, q, y, 31));
    assert_false(rp_dequantize_row(RP_TYPE_I32, q, y, 4));
    for (int i = 0; i < 64; i++) assert_true(y[i] == 42.0f); /* untouched */
    assert_true(rp_quantize_row(RP_TYPE_Q8_0, x, q, 0));
    assert_true(rp_dequantize_row(RP_TYPE_Q8_0, q, y, 0));
    /* F32 "quantization" is a copy. */
    assert_true(rp_quantize_row(RP_TYPE_F32, x, q, 8));
    assert_memory_equal(q, x, 8 * sizeof(float));
}

/* ------------------------------------------------------------ ggml bit-compatibility */

/* Golden row (512 super-blocks, enough that the rarely taken branches of the
 * scale searches are exercised): integer-derived values, bit-identical on
 * every platform (no libm, no a*b+c a compiler could fuse). Mixes uniform,
 * cubed (heavy-tailed), one-signed (offset, both signs), zero-group and
 * bell-shaped data, and sub-blocks of very different magnitude, at scales
 * 2^-9 .. 2^-3. */
static void golden_row(float *x, int n) {
    rng_t r = {0x5EED5EED12345678ull};
    for (int i = 0; i < n; i++) {
        float u[3];
        for (int k = 0; k < 3; k++) u[k] = (float)((int32_t)(rng_next(&r) >> 43) - (1 << 20)) * 0x1p-20f;
        const float scale = ldexpf(1.0f, (int)((i / 256) % 7) - 9);
        float v;
        switch ((i / 256) % 8) {
        case 0: v = u[0]; break;
        case 1: v = u[0] * u[0] * u[0]; break;
        case 2: v = fabsf(u[0]) + 0.25f; break;
        case 3: v = ((i / 16) % 5 == 2) ? 0.0f : u[0]; break;
        case 4: v = u[0] + u[1] + u[2]; break;
        case 5: v = (u[0] + u[1] + u[2]) * ldexpf(1.0f, -((i / 32) % 8)); break;
        case 6: v = fabsf(u[0] + u[1] + u[2]) + 1.0f; break;
        default: v = -(fabsf(u[0] + u[1] + u[2]) + 1.0f); break;
        }
        x[i] = v * scale;
    }
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* FNV-1a of the bytes ggml's own reference quantizers (quantize_row_*_ref in
 * ggml-quants.c, run outside this repo on the golden row) produce; ours must
 * match byte for byte. This pins Q4_K / Q6_K / Q8_K, whose scale searches are
 * the easiest to get subtly wrong. */
static void test_ggml_golden_bytes(void **state) {
    (void)state;
    enum { N = 256 * 512 };
    static const struct { rp_type t; uint64_t fnv; uint8_t head[8]; } want[] = {
        {RP_TYPE_Q8_0, 0x7e1c75802ec8db6aull, {0xf2, 0x00, 0x85, 0x19, 0xf1, 0xf5, 0xb0, 0xfb}},
        {RP_TYPE_Q4_0, 0xeba421553248fe08ull, {0x80, 0x8b, 0xef, 0x86, 0x89, 0x09, 0x8d, 0xa8}},
        {RP_TYPE_Q4_K, 0x75bc6b5e18180ca2ull, {0x47, 0x00, 0x16, 0x02, 0xfc, 0xf9, 0xff, 0xf9}},
        {RP_TYPE_Q6_K, 0x4d692f85b9e9ba46ull, {0x30, 0x77, 0x3c, 0x8d, 0x5b, 0x0f, 0x7a, 0xd0}},
        {RP_TYPE_Q8_K, 0x2b3ddc82899a5c02ull, {0xe4, 0x55, 0x80, 0x37, 0x8c, 0x17, 0xf1, 0xf5}},
    };
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 2);
    assert_true(x && q);
    golden_row(x, N);
    assert_true(f2u(x[0]) == f2u(-0x1.cf9ap-10f)); /* the generator itself is pinned */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const size_t rs = rp_type_row_size(want[i].t, N);
        assert_true(rp_quantize_row(want[i].t, x, q, N));
        assert_memory_equal(q, want[i].head, 8);
        if (fnv1a64(q, rs) != want[i].fnv) {
            fail_msg("%s: bytes differ from ggml's reference (fnv %016llx)", rp_type_get_traits(want[i].t)->name,
                     (unsigned long long)fnv1a64(q, rs));
        }
    }
    free(x);
    free(q);
}

/* The types added for llama.cpp's standard mixes, and again Q4_0/Q4_K/Q6_K:
 * FNV-1a of ggml's bytes (ggml_quantize_chunk, as llama.cpp's quantize runs
 * it, no importance matrix) for the golden row, and of ggml's dequantization
 * (dequantize_row_*) of those bytes, from node-llama-cpp's libggml (llama.cpp
 * 80fb11ac73e6) by bench/peer/ggml_golden.sh, which prints this table. Ours
 * must produce the same bytes and, from them, the same floats bit for bit. */
static void test_ggml_golden_new_types(void **state) {
    (void)state;
    enum { N = 256 * 512 };
    static const struct { rp_type t; uint64_t fnv_q, fnv_f; uint8_t head[8]; } want[] = {
        {RP_TYPE_Q4_1, 0x0c6c96e71197dc1aull, 0x3c2e46d419f40a1bull, {0xdd, 0x0b, 0x3e, 0x97, 0x20, 0x89, 0x76, 0xf7}},
        {RP_TYPE_Q5_0, 0x51d9c73a4a1a7cc8ull, 0xc8b196dd151d5648ull, {0x80, 0x87, 0xbd, 0x20, 0xa7, 0x8f, 0xbf, 0x0d}},
        {RP_TYPE_Q5_1, 0xcdcd741de0494bfbull, 0x5fc8435c92964744ull, {0x9c, 0x07, 0x3e, 0x97, 0x42, 0xdf, 0x5a, 0x70}},
        {RP_TYPE_Q2_K, 0x266c3490fbb09687ull, 0x0058ad7ef212fd13ull, {0xdf, 0x7c, 0x9c, 0xce, 0xbe, 0xdf, 0xce, 0xcc}},
        {RP_TYPE_Q3_K, 0x84a841f45e629bebull, 0x5ce567e75b5b909bull, {0x00, 0xef, 0x39, 0x71, 0xec, 0xdb, 0xab, 0x70}},
        {RP_TYPE_Q5_K, 0xb2d1f5277936972dull, 0x1e0b9f731385e99aull, {0x21, 0x00, 0x07, 0x02, 0xfb, 0xfc, 0xff, 0xfc}},
        {RP_TYPE_IQ4_NL, 0xf1ed2ae370b0f86eull, 0x4bbcebb2725e76a3ull, {0xf3, 0x80, 0xef, 0x86, 0x89, 0x09, 0x7e, 0xa8}},
        {RP_TYPE_IQ4_XS, 0x2099a8f7e816d9baull, 0x53dbfd76e911cb3dull, {0x09, 0x80, 0x03, 0x00, 0x3c, 0x20, 0x04, 0x10}},
        {RP_TYPE_Q4_0, 0xeba421553248fe08ull, 0xcc3aa6b20d212c84ull, {0x80, 0x8b, 0xef, 0x86, 0x89, 0x09, 0x8d, 0xa8}},
        {RP_TYPE_Q4_K, 0x75bc6b5e18180ca2ull, 0x23402c754b63ae99ull, {0x47, 0x00, 0x16, 0x02, 0xfc, 0xf9, 0xff, 0xf9}},
        {RP_TYPE_Q6_K, 0x4d692f85b9e9ba46ull, 0x647ad205f54d076aull, {0x30, 0x77, 0x3c, 0x8d, 0x5b, 0x0f, 0x7a, 0xd0}},
    };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 2);
    assert_true(x && y && q);
    golden_row(x, N);
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *name = rp_type_get_traits(want[i].t)->name;
        const size_t rs = rp_type_row_size(want[i].t, N);
        assert_true(rp_quantize_row(want[i].t, x, q, N));
        const uint64_t hq = fnv1a64(q, rs);
        if (hq != want[i].fnv_q || memcmp(q, want[i].head, 8) != 0) {
            print_message("%s: quantized bytes differ from ggml's (fnv %016llx)\n", name, (unsigned long long)hq);
            bad++;
            continue; /* the floats are ggml's dequantization of ggml's bytes */
        }
        assert_true(rp_dequantize_row(want[i].t, q, y, N));
        const uint64_t hf = fnv1a64((const uint8_t *)y, N * sizeof(float));
        if (hf != want[i].fnv_f) {
            print_message("%s: dequantized floats differ from ggml's (fnv %016llx)\n", name, (unsigned long long)hf);
            bad++;
        }
    }
    free(x);
    free(y);
    free(q);
    assert_int_equal(bad, 0);
}

/* The stories260K GGUFs (see shared/models/SOURCES.md) all have their data
 * section at 14336, and the same tensors at these data-relative offsets.
 * Their Q8_0/Q4_0 versions were produced with ggml's reference rounding, so
 * re-quantizing the F32 tensors must reproduce their bytes exactly. The
 * offsets come from the files' tensor tables (no GGUF reader here). */
#define STORIES_DATA_OFFSET 14336
static const struct {
    const char *name;
    int64_t ne0, ne1;
    size_t off_f32, off_q8_0, off_q4_0;
} stories_tensors[] = {
    {"token_embd.weight", 64, 512, 0, 0, 0},
    {"output.weight", 64, 512, 131328, 35072, 18688},
    {"blk.0.attn_q.weight", 64, 64, 262656, 70144, 37376},
    {"blk.0.attn_k.weight", 64, 32, 279040, 74496, 39680},
    {"blk.0.attn_v.weight", 64, 32, 287232, 76672, 40832},
    {"blk.0.attn_output.weight", 64, 64, 295424, 78848, 41984},
    {"blk.0.ffn_gate.weight", 64, 172, 312064, 83456, 44544},
    {"blk.0.ffn_up.weight", 64, 172, 400128, 139200, 94784},
};

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void check_stories_bitexact(rp_type t, const char *qrel) {
    const char *rel = "models/stories260K.gguf";
    const char *p = rp_test_shared(rel);
    RP_REQUIRE_SHARED(p, rel);
    if (!host_is_little_endian()) RP_SKIP("big-endian host (GGUF payloads are little-endian)\n");
    size_t f32_len = 0, q_len = 0;
    char *f32 = rp_test_read_file(p, &f32_len);
    assert_non_null(f32);
    const char *qp = rp_test_shared(qrel);
    if (!qp) free(f32);
    RP_REQUIRE_SHARED(qp, qrel);
    char *qf = rp_test_read_file(qp, &q_len);
    assert_non_null(qf);
    assert_memory_equal(f32, "GGUF", 4);
    assert_memory_equal(qf, "GGUF", 4);

    const rp_type_traits *tr = rp_type_get_traits(t);
    size_t total_blocks = 0, mismatched_blocks = 0;
    for (size_t ti = 0; ti < sizeof stories_tensors / sizeof stories_tensors[0]; ti++) {
        const int64_t ne0 = stories_tensors[ti].ne0, ne1 = stories_tensors[ti].ne1, n = ne0 * ne1;
        const size_t qoff = STORIES_DATA_OFFSET + (t == RP_TYPE_Q8_0 ? stories_tensors[ti].off_q8_0 : stories_tensors[ti].off_q4_0);
        const size_t foff = STORIES_DATA_OFFSET + stories_tensors[ti].off_f32;
        const size_t qbytes = rp_type_row_size(t, n);
        assert_true(foff + (size_t)n * sizeof(float) <= f32_len);
        assert_true(qoff + qbytes <= q_len);

        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        uint8_t *mine = malloc(qbytes);
        assert_true(x && y && mine);
        memcpy(x, f32 + foff, (size_t)n * sizeof(float));
        const uint8_t *theirs = (const uint8_t *)qf + qoff;

        /* 1. The file's blocks decode to the F32 weights within the
         *    quantizer's error bound (also proves the offsets are right). */
        void *blocks = malloc(qbytes);
        assert_non_null(blocks);
        memcpy(blocks, theirs, qbytes); /* aligned copy for the block structs */
        assert_true(rp_dequantize_row(t, blocks, y, n));
        if (t == RP_TYPE_Q8_0) check_q8_0_row(x, y, blocks, n);
        else check_q4_0_row(x, y, blocks, n);

        /* 2. Re-quantizing the F32 weights row by row reproduces the bytes. */
        for (int64_t r = 0; r < ne1; r++) {
            assert_true(rp_quantize_row(t, x + r * ne0, mine + (size_t)r * rp_type_row_size(t, ne0), ne0));
        }
        const size_t nb = qbytes / tr->type_size;
        size_t bad = 0;
        for (size_t b = 0; b < nb; b++) {
            if (memcmp(mine + b * tr->type_size, theirs + b * tr->type_size, tr->type_size) != 0) {
                if (bad++ < 3) print_message("%s %s: block %zu differs\n", tr->name, stories_tensors[ti].name, b);
            }
        }
        total_blocks += nb;
        mismatched_blocks += bad;
        free(blocks);
        free(x);
        free(y);
        free(mine);
    }
    print_message("%s: %zu/%zu blocks of %zu stories260K tensors byte-identical to the file\n", tr->name,
                  total_blocks - mismatched_blocks, total_blocks, sizeof stories_tensors / sizeof stories_tensors[0]);
    free(f32);
    free(qf);
    assert_int_equal(mismatched_blocks, 0);
}

static void test_stories260k_q8_0_bitexact(void **state) {
    (void)state;
    check_stories_bitexact(RP_TYPE_Q8_0, "models/stories260K-q8_0.gguf");
}

static void test_stories260k_q4_0_bitexact(void **state) {
    (void)state;
    check_stories_bitexact(RP_TYPE_Q4_0, "models/stories260K-q4_0.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_traits),
        cmocka_unit_test(test_row_size),
        cmocka_unit_test(test_type_from_name),
        cmocka_unit_test(test_fp16_known_values),
        cmocka_unit_test(test_fp16_exhaustive_roundtrip),
        cmocka_unit_test(test_fp16_round_ties_to_even),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_quantize_roundtrip_bounds),
        cmocka_unit_test(test_quantize_zero_rows),
        cmocka_unit_test(test_quantize_rounding_rules),
        cmocka_unit_test(test_dequant_hand_built_q4_0_q8_0),
        cmocka_unit_test(test_dequant_hand_built_q4_k),
        cmocka_unit_test(test_dequant_hand_built_q6_k),
        cmocka_unit_test(test_dequant_hand_built_q8_k),
        cmocka_unit_test(test_vec_dot_types),
        cmocka_unit_test(test_vec_dot_matches_dequantized),
        cmocka_unit_test(test_dot_f32_ref),
        cmocka_unit_test(test_row_api_contract),
        cmocka_unit_test(test_ggml_golden_bytes),
        cmocka_unit_test(test_ggml_golden_new_types),
        cmocka_unit_test(test_stories260k_q8_0_bitexact),
        cmocka_unit_test(test_stories260k_q4_0_bitexact),
    };
    return rp_test_main(tests, NULL, NULL);
}
