/* ggml_golden.c — prints the golden hashes tests/test_quant.c pins: ggml's own quantization (ggml_quantize_chunk,
 * as llama.cpp's quantize calls it, no importance matrix) of the test's golden row, and ggml's dequantization of
 * those bytes. Loads the libggml-base.so that node-llama-cpp ships (bench/peer/node_modules), so it needs
 * `npm ci --omit=optional` here first; run it through ggml_golden.sh. Not part of the build or the tests. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The golden row of tests/test_quant.c (golden_row), repeated here exactly. */
typedef struct { uint64_t s; } rng_t;
static uint64_t rng_next(rng_t *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
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

typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                    int64_t n_per_row, const float *imatrix);
typedef void (*dequant_fn)(const void *x, float *y, int64_t k);

int main(int argc, char **argv) {
    const char *lib = argc > 1 ? argv[1] : "libggml-base.so";
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    quantize_chunk_fn qc = (quantize_chunk_fn)dlsym(h, "ggml_quantize_chunk");
    if (!qc) { fprintf(stderr, "no ggml_quantize_chunk\n"); return 1; }
    /* ggml type id, its name, the dequantizer's symbol, bytes per block, block size */
    static const struct { int id; const char *name, *deq; size_t bytes; int blck; } t[] = {
        {3, "Q4_1", "dequantize_row_q4_1", 20, 32},     {6, "Q5_0", "dequantize_row_q5_0", 22, 32},
        {7, "Q5_1", "dequantize_row_q5_1", 24, 32},     {10, "Q2_K", "dequantize_row_q2_K", 84, 256},
        {11, "Q3_K", "dequantize_row_q3_K", 110, 256},  {13, "Q5_K", "dequantize_row_q5_K", 176, 256},
        {20, "IQ4_NL", "dequantize_row_iq4_nl", 18, 32}, {23, "IQ4_XS", "dequantize_row_iq4_xs", 136, 256},
        {2, "Q4_0", "dequantize_row_q4_0", 18, 32},     {12, "Q4_K", "dequantize_row_q4_K", 144, 256},
        {14, "Q6_K", "dequantize_row_q6_K", 210, 256},
    };
    enum { N = 256 * 512 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 2);
    golden_row(x, N);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        dequant_fn dq = (dequant_fn)dlsym(h, t[i].deq);
        if (!dq) { fprintf(stderr, "no %s\n", t[i].deq); return 1; }
        const size_t rs = (size_t)(N / t[i].blck) * t[i].bytes;
        memset(q, 0, rs);
        if (qc(t[i].id, x, q, 0, 1, N, NULL) != rs) { fprintf(stderr, "%s: size\n", t[i].name); return 1; }
        dq(q, y, N);
        printf("        {RP_TYPE_%s, 0x%016llxull, 0x%016llxull, {", t[i].name, (unsigned long long)fnv1a64(q, rs),
               (unsigned long long)fnv1a64((const uint8_t *)y, N * sizeof(float)));
        for (int k = 0; k < 8; k++) printf("0x%02x%s", q[k], k < 7 ? ", " : "}},\n");
    }
    free(x); free(y); free(q);
    return 0;
}
