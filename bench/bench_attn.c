/* bench_attn.c — includes internals (a kernel micro-benchmark: it times the attention kernels themselves, below the
 * public API). `reprise bench attn`: one attention call (one KV head, its GQA group of query heads) at several
 * depths, for decode (1 row) and a prefill run (64 rows), on one thread in thread CPU time, so other processes on
 * the machine move the figures less than wall time would. It reports GFLOP/s and the K+V bytes read per second:
 * decode attention is at the memory limit only when its KV GB/s per core reaches the machine's streaming bandwidth
 * per core. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

static double thread_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* One (kernel, depth, rows) point; returns 0 or -1 (out of memory). */
static int bench_point(const rp_attn_kernel *k, rp_type t, int32_t depth, int32_t rows, int32_t D, int32_t G,
                       int reps, bool json, bool *first) {
    const size_t rb = rp_type_row_size(t, D);
    uint8_t *kc = malloc(rb * (size_t)depth), *vc = malloc(rb * (size_t)depth);
    float *q = malloc(sizeof(float) * (size_t)rows * (size_t)(G * D)), *o = malloc(sizeof(float) * (size_t)rows * (size_t)(G * D));
    float *tmp = malloc(sizeof(float) * (size_t)D);
    int32_t *nc = malloc(sizeof(int32_t) * (size_t)rows);
    const size_t sb = (rp_attn_scratch_bytes(D, G, RP_ATTN_MAX_ROWS) + 63) & ~(size_t)63;
    void *scratch = aligned_alloc(64, sb);
    int rc = -1;
    if (!kc || !vc || !q || !o || !tmp || !nc || !scratch) goto out;
    uint64_t s = 7;
    for (int32_t c = 0; c < depth; c++) {
        for (int32_t d = 0; d < D; d++) tmp[d] = (float)rng_next(&s) / 2147483648.0f - 0.5f;
        rp_quantize_row(t, tmp, kc + (size_t)c * rb, D);
        for (int32_t d = 0; d < D; d++) tmp[d] = (float)rng_next(&s) / 2147483648.0f - 0.5f;
        rp_quantize_row(t, tmp, vc + (size_t)c * rb, D);
    }
    for (int64_t i = 0; i < (int64_t)rows * G * D; i++) q[i] = (float)rng_next(&s) / 2147483648.0f;
    /* the last `rows` positions of a causal prompt of `depth` cells */
    for (int32_t i = 0; i < rows; i++) nc[i] = depth - rows + i + 1;
    rp_attn_args a = {.q = q, .q_stride = (int64_t)G * D, .out = o, .out_stride = (int64_t)G * D, .n_rows = rows,
                      .n_cells = nc, .head_begin = 0, .n_heads = G, .head_dim = D, .k = kc, .v = vc,
                      .kv_row_bytes = rb, .kv_type = t, .kv_head = 0, .scale = 0.125f, .scratch = scratch};
    k->fn(&a);   /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = thread_now();
        k->fn(&a);
        const double dt = thread_now() - t0;
        if (dt < best) best = dt;
    }
    double cells = 0;
    for (int32_t i = 0; i < rows; i++) cells += nc[i];
    const double gflops = 4.0 * (double)G * D * cells / best * 1e-9;   /* QK and PV: 2 flops each per element */
    const double gbs = 2.0 * (double)rb * depth / best * 1e-9;          /* K and V, each row read once per call */
    if (json)
        printf("%s\n  {\"kernel\": \"%s\", \"kv_type\": \"%s\", \"depth\": %d, \"rows\": %d, \"head_dim\": %d, "
               "\"group\": %d, \"us\": %.3f, \"gflops\": %.4f, \"kv_gb_s\": %.4f}",
               *first ? "" : ",", k->name, rp_type_get_traits((int)t)->name, depth, rows, D, G, best * 1e6, gflops,
               gbs);
    else
        printf("| %-18s | %7d | %4d | %10.2f | %8.1f | %8.2f |\n", k->name, depth, rows, best * 1e6, gflops, gbs);
    *first = false;
    rc = 0;
out:
    free(kc); free(vc); free(q); free(o); free(tmp); free(nc); free(scratch);
    return rc;
}

int bench_attn(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench attn"};
    const char *d_s = "1024,4096,16384", *rows_s = "1,64", *kv_s = "f16,q8_0";
    long D = 64, G = 4, reps = 20;
    bool json = false, ref = false;
    for (; a.i < argc; a.i++) {
        const char *v;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench attn [-d 1024,4096,16384] [--rows 1,64] [--kv f16,q8_0] [--head-dim 64]\n"
                   "                          [-g 4] [-r 20] [--ref] [--cpu LEVEL] [--json]\n"
                   "Times one attention call (one KV head and its group of -g query heads) over a KV cache of\n"
                   "each depth, for each --rows (1: decode; 64: a prefill run at the end of a prompt), on one\n"
                   "thread, best of -r in thread CPU time. Prints GFLOP/s and the K+V GB/s it reads; --ref\n"
                   "also times the scalar reference.\n");
            return 0;
        } else if (cli_is(&a, "-d", "--depth")) { if (!cli_str(&a, &d_s)) return 2; }
        else if (cli_is(&a, "--rows", NULL)) { if (!cli_str(&a, &rows_s)) return 2; }
        else if (cli_is(&a, "--kv", NULL)) { if (!cli_str(&a, &kv_s)) return 2; }
        else if (cli_is(&a, "--head-dim", NULL)) { if (!cli_int(&a, 8, 256, &D)) return 2; }
        else if (cli_is(&a, "-g", "--group")) { if (!cli_int(&a, 1, 16, &G)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 10000, &reps)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--ref", NULL)) ref = true;
        else if (cli_is(&a, "--json", NULL)) json = true;
        else return cli_unknown(&a);
    }
    long ds[16], rs[8];
    const int nd = cli_int_list(a.cmd, "-d", d_s, ds, 16), nr = cli_int_list(a.cmd, "--rows", rows_s, rs, 8);
    if (nd < 0 || nr < 0) return 2;
    for (int i = 0; i < nr; i++)
        if (rs[i] > RP_ATTN_MAX_ROWS) {
            fprintf(stderr, "reprise bench attn: --rows %ld is more than one call takes (%d)\n", rs[i], RP_ATTN_MAX_ROWS);
            return 2;
        }
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nr; j++)
            if (ds[i] < rs[j]) {
                fprintf(stderr, "reprise bench attn: depth %ld is less than --rows %ld\n", ds[i], rs[j]);
                return 2;
            }
    rp_type kvs[3];
    int nkv = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", kv_s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        rp_type t = !strcmp(tok, "f32") ? RP_TYPE_F32 : !strcmp(tok, "f16") ? RP_TYPE_F16
                  : !strcmp(tok, "q8_0") ? RP_TYPE_Q8_0 : (rp_type)-1;
        if ((int)t < 0 || nkv == 3) {
            fprintf(stderr, "reprise bench attn: --kv takes up to three of f32, f16, q8_0 (got '%s')\n", tok);
            return 2;
        }
        kvs[nkv++] = t;
    }
    if (kvs[0] == RP_TYPE_Q8_0 && D % 32) {
        fprintf(stderr, "reprise bench attn: a Q8_0 cache needs --head-dim a multiple of 32\n");
        return 2;
    }
    const rp_cpu_level lvl = rp_cpu_level_active();
    bool first = true;
    if (json) printf("{\"cpu\": \"%s\", \"level\": \"%s\", \"points\": [", rp_cpu_info_get()->brand, rp_cpu_level_name(lvl));
    else {
        printf("cpu: %s, dispatch level %s, head_dim %ld, group %ld, one thread, best of %ld (thread CPU time)\n",
               rp_cpu_info_get()->brand, rp_cpu_level_name(lvl), D, G, reps);
        printf("| %-18s | %7s | %4s | %10s | %8s | %8s |\n", "kernel", "depth", "rows", "us", "GFLOP/s", "KV GB/s");
        printf("|--------------------|---------|------|------------|----------|----------|\n");
    }
    for (int k = 0; k < nkv; k++) {
        if (kvs[k] == RP_TYPE_Q8_0 && D % 32) continue;
        const rp_attn_kernel *ks[2] = {rp_attn_kernel_select(kvs[k], lvl), NULL};
        const rp_attn_kernel *all[8];
        const int na = rp_attn_kernel_list(kvs[k], all, 8);
        for (int i = 0; ref && i < na; i++)
            if (all[i]->level == RP_CPU_SCALAR && all[i] != ks[0]) ks[1] = all[i];
        for (int ki = 0; ki < 2 && ks[ki]; ki++)
            for (int i = 0; i < nd; i++)
                for (int j = 0; j < nr; j++)
                    if (bench_point(ks[ki], kvs[k], (int32_t)ds[i], (int32_t)rs[j], (int32_t)D, (int32_t)G, (int)reps,
                                    json, &first) != 0) {
                        fprintf(stderr, "reprise bench attn: out of memory at depth %ld\n", ds[i]);
                        return 1;
                    }
    }
    if (json) printf("\n]}\n");
    return 0;
}
