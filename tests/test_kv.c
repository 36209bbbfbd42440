/* test_kv.c — KV cache layout by head group: geometry, row store/load, row-major read/write, cell moves, attention views. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "kv/kv.h"

#define N_LAYER 3
#define N_CTX 40

typedef struct {
    rp_type type;
    int32_t n_head_kv, head_dim;
    int32_t gs;   /* expected heads per group */
} shape;

/* odd head counts, groups of one head, Q8_0 heads smaller and larger than a block */
static const shape k_shapes[] = {
    {RP_TYPE_F32, 3, 8, 1},   {RP_TYPE_F16, 3, 8, 1},    {RP_TYPE_F32, 5, 12, 1},  {RP_TYPE_F16, 1, 64, 1},
    {RP_TYPE_Q8_0, 4, 8, 4},  {RP_TYPE_Q8_0, 12, 8, 4},  {RP_TYPE_Q8_0, 6, 16, 2}, {RP_TYPE_Q8_0, 3, 64, 1},
    {RP_TYPE_Q8_0, 6, 48, 2}, {RP_TYPE_Q8_0, 3, 32, 1},
};

static rp_kv *make(const shape *s) {
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_shape(N_LAYER, s->n_head_kv, s->head_dim, N_CTX, s->type,
                                        rp_cpu_info_get()->best, &kv),
                     RP_OK);
    return kv;
}

/* a deterministic, distinct row per (layer, part, cell, salt) */
static void fill_row(float *row, int32_t n, int32_t layer, int part, int32_t cell, uint64_t salt) {
    rp_test_rng r = {((uint64_t)layer * 1000003u + (uint64_t)part * 7919u + (uint64_t)cell * 31u + salt) | 1};
    for (int32_t i = 0; i < 3; i++) rp_test_rng_next(&r);
    for (int32_t i = 0; i < n; i++) row[i] = rp_test_rng_gauss(&r) * (1.0f + (float)(i % 5));
}

static void test_geometry(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
        const shape *s = &k_shapes[i];
        rp_kv *kv = make(s);
        const int32_t kd = s->n_head_kv * s->head_dim;
        assert_int_equal(kv->group_heads, s->gs);
        assert_int_equal(kv->n_group, s->n_head_kv / s->gs);
        assert_int_equal(kv->group_bytes, rp_type_row_size(s->type, (int64_t)s->gs * s->head_dim));
        /* a whole row's bytes are those of the row-major format */
        assert_int_equal(kv->row_bytes, rp_type_row_size(s->type, kd));
        assert_int_equal(rp_kv_bytes(kv), 2 * (size_t)N_LAYER * N_CTX * kv->row_bytes);
        /* a group's cells are contiguous: one head streams group_bytes per cell */
        for (int32_t g = 0; g < kv->n_group; g++) {
            assert_ptr_equal(rp_kv_group(kv, RP_KV_K, 1, g, 5) + kv->group_bytes, rp_kv_group(kv, RP_KV_K, 1, g, 6));
            if (g + 1 < kv->n_group)
                assert_ptr_equal(rp_kv_group(kv, RP_KV_V, 2, g, N_CTX - 1) + kv->group_bytes,
                                 rp_kv_group(kv, RP_KV_V, 2, g + 1, 0));
        }
        rp_kv_free(kv);
    }
    /* Q8_0 without whole blocks in any group of heads: refused, naming the geometry */
    const int32_t bad[][2] = {{2, 8}, {3, 16}, {6, 8}, {1, 48}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_kv *kv = (rp_kv *)1;
        assert_int_equal(rp_kv_create_shape(2, bad[i][0], bad[i][1], 8, RP_TYPE_Q8_0, RP_CPU_SCALAR, &kv),
                         RP_ERR_UNSUPPORTED);
        assert_null(kv);
        assert_non_null(strstr(rp_last_error(), "q8_0"));
        /* the same heads in F16 are fine */
        assert_int_equal(rp_kv_create_shape(2, bad[i][0], bad[i][1], 8, RP_TYPE_F16, RP_CPU_SCALAR, &kv), RP_OK);
        rp_kv_free(kv);
    }
    rp_kv *kv = NULL;
    assert_int_equal(rp_kv_create_shape(0, 4, 8, 8, RP_TYPE_F32, RP_CPU_SCALAR, &kv), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_kv_create_shape(2, 4, 8, 0, RP_TYPE_F32, RP_CPU_SCALAR, &kv), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_kv_create_shape(2, 4, 8, 8, RP_TYPE_Q4_0, RP_CPU_SCALAR, &kv), RP_ERR_UNSUPPORTED);
}

/* store_row / load_row per cell agree with the whole-row conversion, the
 * gathered rows (read_rows) are byte for byte the row-major encoding, and
 * write_rows of those bytes elsewhere reproduces the rows. */
static void test_rows_round_trip(void **state) {
    (void)state;
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        const shape *s = &k_shapes[si];
        rp_kv *kv = make(s), *other = make(s);
        const int32_t kd = kv->kv_dim;
        const size_t rb = kv->row_bytes;
        float *row = malloc(sizeof(float) * (size_t)kd), *want = malloc(sizeof(float) * (size_t)kd),
              *got = malloc(sizeof(float) * (size_t)kd);
        uint8_t *enc = malloc(rb * N_CTX), *rows = malloc(rb * N_CTX);
        for (int32_t l = 0; l < N_LAYER; l++)
            for (int part = 0; part < 2; part++)
                for (int32_t c = 0; c < N_CTX; c++) {
                    fill_row(row, kd, l, part, c, si);
                    rp_kv_store_row(kv, (rp_kv_part)part, l, c, row);
                }
        for (int32_t l = 0; l < N_LAYER; l++)
            for (int part = 0; part < 2; part++) {
                for (int32_t c = 0; c < N_CTX; c++) {
                    fill_row(row, kd, l, part, c, si);
                    rp_kv_encode_row(kv, enc + (size_t)c * rb, row);
                    rp_kv_decode_row(kv, enc + (size_t)c * rb, want);
                    rp_kv_load_row(kv, (rp_kv_part)part, l, c, got);
                    assert_memory_equal(got, want, sizeof(float) * (size_t)kd);
                    if (s->type == RP_TYPE_F32) assert_memory_equal(got, row, sizeof(float) * (size_t)kd);
                }
                /* all cells, and a range ending at the last cell (ASan: no read past it) */
                rp_kv_read_rows(kv, (rp_kv_part)part, l, 0, N_CTX, rows);
                assert_memory_equal(rows, enc, rb * N_CTX);
                memset(rows, 0, rb * N_CTX);
                rp_kv_read_rows(kv, (rp_kv_part)part, l, N_CTX - 7, 7, rows);
                assert_memory_equal(rows, enc + (size_t)(N_CTX - 7) * rb, rb * 7);
                /* cells [3, 3 + 11) placed at [20, 31) of another cache */
                rp_kv_write_rows(other, (rp_kv_part)part, l, 20, 11, enc + 3 * rb);
                for (int32_t t = 0; t < 11; t++) {
                    rp_kv_decode_row(kv, enc + (size_t)(3 + t) * rb, want);
                    rp_kv_load_row(other, (rp_kv_part)part, l, 20 + t, got);
                    assert_memory_equal(got, want, sizeof(float) * (size_t)kd);
                }
                rp_kv_read_rows(other, (rp_kv_part)part, l, 20, 11, rows);
                assert_memory_equal(rows, enc + 3 * rb, rb * 11);
                /* the cells around stay empty (zero) */
                rp_kv_read_rows(other, (rp_kv_part)part, l, 19, 1, rows);
                rp_kv_read_rows(other, (rp_kv_part)part, l, 31, 1, rows + rb);
                for (size_t b = 0; b < 2 * rb; b++) assert_int_equal(rows[b], 0);
            }
        free(row);
        free(want);
        free(got);
        free(enc);
        free(rows);
        rp_kv_free(kv);
        rp_kv_free(other);
    }
}

/* move_cells: overlapping moves both ways, only the named layer and part change. */
static void test_move_cells(void **state) {
    (void)state;
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        rp_kv *kv = make(&k_shapes[si]);
        const int32_t kd = kv->kv_dim;
        const size_t rb = kv->row_bytes;
        float *row = malloc(sizeof(float) * (size_t)kd);
        uint8_t *before[N_LAYER][2], *now = malloc(rb * N_CTX), *want = malloc(rb * N_CTX);
        for (int32_t l = 0; l < N_LAYER; l++)
            for (int part = 0; part < 2; part++) {
                for (int32_t c = 0; c < N_CTX; c++) {
                    fill_row(row, kd, l, part, c, 77 + si);
                    rp_kv_store_row(kv, (rp_kv_part)part, l, c, row);
                }
                before[l][part] = malloc(rb * N_CTX);
                rp_kv_read_rows(kv, (rp_kv_part)part, l, 0, N_CTX, before[l][part]);
            }
        /* forward overlap: [2, 14) -> [5, 17) */
        rp_kv_move_cells(kv, RP_KV_V, 1, 5, 2, 12);
        memcpy(want, before[1][1], rb * N_CTX);
        memmove(want + 5 * rb, want + 2 * rb, 12 * rb);
        rp_kv_read_rows(kv, RP_KV_V, 1, 0, N_CTX, now);
        assert_memory_equal(now, want, rb * N_CTX);
        /* backward overlap to the end: [N_CTX - 10, N_CTX) -> [N_CTX - 13, N_CTX - 3) */
        rp_kv_move_cells(kv, RP_KV_V, 1, N_CTX - 13, N_CTX - 10, 10);
        memmove(want + (N_CTX - 13) * rb, want + (N_CTX - 10) * rb, 10 * rb);
        rp_kv_read_rows(kv, RP_KV_V, 1, 0, N_CTX, now);
        assert_memory_equal(now, want, rb * N_CTX);
        rp_kv_move_cells(kv, RP_KV_V, 1, 4, 4, 3);   /* no-op */
        rp_kv_move_cells(kv, RP_KV_V, 1, 0, 9, 0);
        rp_kv_read_rows(kv, RP_KV_V, 1, 0, N_CTX, now);
        assert_memory_equal(now, want, rb * N_CTX);
        for (int32_t l = 0; l < N_LAYER; l++)
            for (int part = 0; part < 2; part++) {
                if (l == 1 && part == 1) continue;
                rp_kv_read_rows(kv, (rp_kv_part)part, l, 0, N_CTX, now);
                assert_memory_equal(now, before[l][part], rb * N_CTX);
            }
        for (int32_t l = 0; l < N_LAYER; l++) free(before[l][0]), free(before[l][1]);
        free(row);
        free(now);
        free(want);
        rp_kv_free(kv);
    }
}

/* The attention kernel on each KV head's view of the grouped cache equals the
 * reference on the same values laid out as plain F32 rows. */
static void test_attn_view(void **state) {
    (void)state;
    const int32_t G = 2, n = 33;   /* query heads per KV head, cells attended */
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        const shape *s = &k_shapes[si];
        rp_kv *kv = make(s);
        const int32_t kd = kv->kv_dim, HD = s->head_dim, QD = s->n_head_kv * G * HD;
        float *kf = malloc(sizeof(float) * (size_t)kd * n), *vf = malloc(sizeof(float) * (size_t)kd * n);
        float *q = malloc(sizeof(float) * (size_t)QD), *out = malloc(sizeof(float) * (size_t)QD),
              *ref = malloc(sizeof(float) * (size_t)QD), *row = malloc(sizeof(float) * (size_t)kd);
        for (int32_t c = 0; c < n; c++) {
            fill_row(row, kd, 2, 0, c, 5);
            rp_kv_store_row(kv, RP_KV_K, 2, c, row);
            rp_kv_load_row(kv, RP_KV_K, 2, c, kf + (size_t)c * kd);
            fill_row(row, kd, 2, 1, c, 5);
            rp_kv_store_row(kv, RP_KV_V, 2, c, row);
            rp_kv_load_row(kv, RP_KV_V, 2, c, vf + (size_t)c * kd);
        }
        rp_test_rng r = {99 + si};
        for (int32_t i = 0; i < QD; i++) q[i] = rp_test_rng_gauss(&r) * 0.3f;
        if (rp_attn_q8_query(s->type, HD)) {
            /* a Q8_0 cache's scores round the query to Q8_0 (as llama.cpp): give both sides an already rounded
             * query (rounding it again changes nothing), so the F32 reference sees what the kernel computes */
            void *qb = malloc((size_t)QD / 32 * 34);
            assert_non_null(qb);
            assert_true(rp_quantize_row(RP_TYPE_Q8_0, q, qb, QD));
            assert_true(rp_dequantize_row(RP_TYPE_Q8_0, qb, q, QD));
            free(qb);
        }
        const rp_attn_kernel *k = rp_attn_kernel_select(s->type, rp_cpu_info_get()->best);
        assert_non_null(k);
        const size_t sb = rp_attn_scratch_bytes(HD, G, 1);
        void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
        assert_non_null(scratch);
        for (int32_t h = 0; h < s->n_head_kv; h++) {
            rp_attn_args a = {.q = q, .q_stride = QD, .out = out, .out_stride = QD, .n_rows = 1, .n_cells = &n,
                              .head_begin = h * G, .n_heads = G, .head_dim = HD,
                              .scale = 1.0f / sqrtf((float)HD), .scratch = scratch};
            rp_kv_attn_view(kv, 2, h, &a);
            k->fn(&a);
            rp_attn_args b = a;
            b.out = ref;
            b.k = (const uint8_t *)kf;
            b.v = (const uint8_t *)vf;
            b.kv_row_bytes = sizeof(float) * (size_t)kd;
            b.kv_type = RP_TYPE_F32;
            b.kv_head = h;
            rp_attn_ref(&b);
            for (int32_t e = h * G * HD; e < (h + 1) * G * HD; e++)
                if (fabsf(out[e] - ref[e]) > 2e-3f * (1.0f + fabsf(ref[e])))
                    fail_msg("%s: head %d element %d: %g vs reference %g", k->name, h, e, out[e], ref[e]);
        }
        free(scratch);
        free(kf);
        free(vf);
        free(q);
        free(out);
        free(ref);
        free(row);
        rp_kv_free(kv);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_rows_round_trip),
        cmocka_unit_test(test_move_cells),
        cmocka_unit_test(test_attn_view),
    };
    return rp_test_main(tests, NULL, NULL);
}
