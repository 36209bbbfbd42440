/* bench_kernels.c — includes internals (kernel micro-benchmarks: it times the matmul / attention kernels themselves,
 * below the public API). `reprise bench kernels`: their throughput and the memory-bandwidth decode ceiling. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bandwidth.h"
#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "core/threadpool.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/model.h"

/* ---- matmul kernels ---- */

/* Every weight type with matmul kernels (rp_type_traits.can_compute), the default of --types. */
#define RP_BENCH_ALL_TYPES "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_xs"

/* Times kernel `k` of type t (NULL: the one rp_weight_prepare picks for lvl). */
static void bench_matmul(rp_pool *pool, rp_type t, const rp_mm_kernel *k, int64_t rows, int64_t cols, int64_t n,
                         int reps, rp_cpu_level lvl, bool json, bool *first) {
    size_t rb = rp_type_row_size(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    float *x = malloc(sizeof(float) * (size_t)(cols * n));
    float *y = malloc(sizeof(float) * (size_t)(rows * n));
    if (!w || !row || !x || !y) goto out;
    uint64_t s = 12345;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            row[c] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23) * 0.05f;
        }
        rp_quantize_row(t, row, w + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < cols * n; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    rp_weight W = {.data = w, .type = t, .rows = rows, .cols = cols, .row_bytes = rb};
    if ((k ? rp_weight_prepare_with(&W, k, pool, false) : rp_weight_prepare(&W, lvl, pool, false)) != RP_OK) goto out;
    rp_mm_scratch sc = {0};
    if (rp_mm_scratch_reserve(&sc, rp_pool_n_threads(pool), &W, n) != RP_OK) { rp_weight_release(&W); goto out; }
    rp_matmul(pool, &W, x, n, cols, y, rows, &sc);   /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = cli_now();
        rp_matmul(pool, &W, x, n, cols, y, rows, &sc);
        double dt = cli_now() - t0;
        if (dt < best) best = dt;
    }
    double bytes = (double)(W.packed_bytes ? W.packed_bytes : rb * (size_t)rows);
    double gflops = 2.0 * (double)rows * (double)cols * (double)n / best / 1e9, gbs = bytes / best / 1e9;
    if (json)
        printf("%s\n  {\"kernel\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"n\": %lld, \"threads\": %d, \"ms\": %.4f, "
               "\"gflops\": %.2f, \"weight_gb_s\": %.2f}",
               *first ? "" : ",", W.k->name, (long long)rows, (long long)cols, (long long)n, rp_pool_n_threads(pool),
               best * 1e3, gflops, gbs);
    else
        printf("| %-16s | %6lld x %-6lld | %5lld | %7d | %10.3f | %10.1f | %9.2f |\n", W.k->name, (long long)rows,
               (long long)cols, (long long)n, rp_pool_n_threads(pool), best * 1e3, gflops, gbs);
    fflush(stdout);
    *first = false;
    rp_mm_scratch_free(&sc);
    rp_weight_release(&W);
out:
    free(w); free(row); free(x); free(y);
}

/* ---- huge pages against 4 KiB pages, in one process ----
 * The same packed weight twice: as rp_weight_prepare left it (2 MiB pages
 * where the OS allows) and copied into a mapping advised MADV_NOHUGEPAGE.
 * GEMVs alternate between the two, so both see the same bandwidth phase of a
 * shared machine; GB/s are summed over the timed calls. Use a weight larger
 * than the last-level cache (e.g. --rows 262144 --cols 2048). */
static int bench_pages_ab(rp_pool *pool, rp_type t, int64_t rows, int64_t cols, int reps, rp_cpu_level lvl, bool json,
                          bool *first) {
    size_t rb = rp_type_row_size(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)cols);
    float *y = malloc(sizeof(float) * (size_t)rows);
    int rc = 1;
    rp_weight W = {.data = w, .type = t, .rows = rows, .cols = cols, .row_bytes = rb};
    rp_mm_scratch sc = {0};
    void *small = MAP_FAILED;
    size_t bytes = 0;
    if (!w || !row || !x || !y) goto out;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = (float)((r * 31 + c * 7) % 201 - 100) * 0.01f;
        rp_quantize_row(t, row, w + (size_t)r * rb, cols);
    }
    for (int64_t c = 0; c < cols; c++) x[c] = (float)(c % 13 - 6) * 0.1f;
    if (rp_weight_prepare(&W, lvl, pool, false) != RP_OK) goto out;
    if (!W.packed) { rc = 2; goto out; }   /* the kernel reads the GGUF rows: nothing packed to compare */
    bytes = W.packed_bytes;
    small = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (small == MAP_FAILED) goto out;
#ifdef MADV_NOHUGEPAGE
    madvise(small, bytes, MADV_NOHUGEPAGE);
#endif
    memcpy(small, W.packed, bytes);
    if (rp_mm_scratch_reserve(&sc, rp_pool_n_threads(pool), &W, 1) != RP_OK) goto out;
    void *huge = W.packed;
    double t_huge = 0, t_small = 0;
    for (int i = 0; i < 2 * reps + 4; i++) {
        const bool use_small = i & 1;
        W.packed = use_small ? small : huge;
        double t0 = cli_now();
        rp_matmul(pool, &W, x, 1, cols, y, rows, &sc);
        double dt = cli_now() - t0;
        if (i >= 4) *(use_small ? &t_small : &t_huge) += dt;   /* the first two of each are warm-up */
    }
    W.packed = huge;
    const double g_huge = (double)bytes * reps / t_huge / 1e9, g_small = (double)bytes * reps / t_small / 1e9;
    if (json)
        printf("%s\n  {\"kernel\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"threads\": %d, \"huge_gb_s\": %.4f, "
               "\"small_gb_s\": %.4f, \"ratio\": %.4f}",
               *first ? "" : ",", W.k->name, (long long)rows, (long long)cols, rp_pool_n_threads(pool), g_huge, g_small,
               g_huge / g_small);
    else
        printf("| %-16s | %6lld x %-6lld | %7d | %12.2f | %12.2f | %6.3f |\n", W.k->name, (long long)rows,
               (long long)cols, rp_pool_n_threads(pool), g_huge, g_small, g_huge / g_small);
    fflush(stdout);
    *first = false;
    rc = 0;
out:
    if (small != MAP_FAILED) munmap(small, bytes);
    rp_mm_scratch_free(&sc);
    rp_weight_release(&W);
    free(w); free(row); free(x); free(y);
    return rc;
}

/* Parses a comma-separated list of computable weight types into out (at most
 * cap); returns the count, or -1 after naming an unknown type. */
static int parse_types(const char *list, rp_type *out, int cap) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < cap; tok = strtok(NULL, ",")) {
        int t = rp_type_from_name(tok);
        const rp_type_traits *tr = t >= 0 ? rp_type_get_traits(t) : NULL;
        if (!tr || !tr->can_compute) { fprintf(stderr, "reprise bench kernels: unknown type '%s'\n", tok); return -1; }
        out[n++] = (rp_type)t;
    }
    return n;
}

int bench_kernels(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench kernels"};
    const char *model_path = NULL, *types_s = RP_BENCH_ALL_TYPES, *t_s = "1,2";
    long rows = 4096, cols = 4096, n_big = 512, reps = 5, mem_mb = 1024;
    bool json = false, pages_ab = false, each = false;
    for (; a.i < argc; a.i++) {
        const char *v;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench kernels [-m MODEL.gguf] [--types T,T,...] [-t 1,2]\n"
                   "                             [--rows R] [--cols C] [--n-big N] [-r 5] [--mem-mb 1024]\n"
                   "                             [--cpu LEVEL] [--each] [--pages-ab] [--json]\n"
                   "Measures streaming memory bandwidth, each weight type's matmul kernel at n = 1 (decode,\n"
                   "GB/s of weights) and n = N (prefill, GFLOP/s); with -m, the model's decode ceiling\n"
                   "(weight bytes read per token / bandwidth). --pages-ab: only the n = 1 kernel, its packed\n"
                   "weight on 2 MiB pages and on 4 KiB pages, alternating in one process (-r pairs).\n"
                   "--types defaults to every computable weight type (" RP_BENCH_ALL_TYPES ").\n"
                   "--each: also every other registered SIMD kernel of each type the CPU runs (e.g. the\n"
                   "unpacked kernel a packed one replaced), right after the selected one.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--types", NULL)) { if (!cli_str(&a, &types_s)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_str(&a, &t_s)) return 2; }
        else if (cli_is(&a, "--rows", NULL)) { if (!cli_int(&a, 1, 1 << 20, &rows)) return 2; }
        else if (cli_is(&a, "--cols", NULL)) { if (!cli_int(&a, 256, 1 << 16, &cols)) return 2; }
        else if (cli_is(&a, "--n-big", NULL)) { if (!cli_int(&a, 1, 8192, &n_big)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 1000, &reps)) return 2; }
        else if (cli_is(&a, "--mem-mb", NULL)) { if (!cli_int(&a, 16, 1 << 16, &mem_mb)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--pages-ab", NULL)) pages_ab = true;
        else if (cli_is(&a, "--each", NULL)) each = true;
        else return cli_unknown(&a);
    }
    if (cols % 256) { fprintf(stderr, "reprise bench kernels: --cols must be a multiple of 256\n"); return 2; }
    long ths[16];
    int nth = cli_int_list(a.cmd, "-t", t_s, ths, 16);
    if (nth < 0) return 2;
    const rp_cpu_info *ci = rp_cpu_info_get();
    rp_cpu_level lvl = rp_cpu_level_active();
    bool first = true;
    rp_type types[16];
    const int ntypes = parse_types(types_s, types, 16);
    if (ntypes < 0) return 2;
    if (pages_ab) {
        if (json) printf("{\"cpu\": \"%s\", \"level\": \"%s\", \"pages_ab\": [", ci->brand, rp_cpu_level_name(lvl));
        else {
            printf("cpu: %s, dispatch level %s\npacked weight on 2 MiB pages vs 4 KiB pages, n = 1, %ld alternating pairs:\n",
                   ci->brand, rp_cpu_level_name(lvl), reps);
            printf("| %-16s | %-15s | %7s | %12s | %12s | %6s |\n", "kernel", "rows x cols", "threads", "2 MiB GB/s",
                   "4 KiB GB/s", "ratio");
            printf("|------------------|-----------------|---------|--------------|--------------|--------|\n");
        }
        for (int k = 0; k < ntypes; k++) {
            const char *tname = rp_type_get_traits((int)types[k])->name;
            for (int i = 0; i < nth; i++) {
                rp_pool *pool = NULL;
                if (rp_pool_create((int)ths[i], &pool) != RP_OK) return cli_fail(a.cmd, "pool", 1);
                int rc = bench_pages_ab(pool, types[k], rows, cols, (int)reps, lvl, json, &first);
                rp_pool_free(pool);
                if (rc == 2) fprintf(stderr, "reprise bench kernels: %s at %s keeps no packed copy: skipped\n", tname,
                                     rp_cpu_level_name(lvl));
                else if (rc) { fprintf(stderr, "reprise bench kernels: %s: out of memory\n", tname); return 1; }
            }
        }
        if (json) printf("\n]}\n");
        return 0;
    }
    if (json) printf("{\"cpu\": \"%s\", \"level\": \"%s\", \"bandwidth\": [", ci->brand, rp_cpu_level_name(lvl));
    else printf("cpu: %s, dispatch level %s\n\nmemory bandwidth (streaming read of %ld MiB):\n", ci->brand,
                rp_cpu_level_name(lvl), mem_mb);
    double bw_max = 0;
    cli_bw_probe *bw = cli_bw_create((size_t)mem_mb << 20);
    if (!bw) { fprintf(stderr, "reprise bench kernels: cannot allocate %ld MiB for the bandwidth probe\n", mem_mb); return 1; }
    for (int i = 0; i < nth; i++) {
        double pat[CLI_BW_PATTERNS] = {0};
        double gbs = cli_bw_measure(bw, (int)ths[i], 3, pat);
        if (gbs > bw_max) bw_max = gbs;
        if (json)
            printf("%s{\"threads\": %ld, \"gb_s\": %.2f, \"one_stream_gb_s\": %.2f, \"four_streams_gb_s\": %.2f, "
                   "\"l2_prefetch_gb_s\": %.2f, \"vector_gb_s\": %.2f}", i ? ", " : "", ths[i], gbs, pat[CLI_BW_SINGLE],
                   pat[CLI_BW_FOUR], pat[CLI_BW_PREFETCH], pat[CLI_BW_WIDE]);
        else
            printf("  %ld thread(s): %.2f GB/s (%s %.2f, %s %.2f, %s %.2f, %s %.2f)\n", ths[i], gbs,
                   cli_bw_pattern_name(CLI_BW_SINGLE), pat[CLI_BW_SINGLE], cli_bw_pattern_name(CLI_BW_FOUR),
                   pat[CLI_BW_FOUR], cli_bw_pattern_name(CLI_BW_PREFETCH), pat[CLI_BW_PREFETCH],
                   cli_bw_pattern_name(CLI_BW_WIDE), pat[CLI_BW_WIDE]);
    }
    cli_bw_free(bw);
    if (json) printf("], \"kernels\": [");
    else {
        printf("\nmatmul kernels (best of %ld):\n", reps);
        printf("| %-16s | %-15s | %5s | %7s | %10s | %10s | %9s |\n", "kernel", "rows x cols", "n", "threads", "ms",
               "GFLOP/s", "W GB/s");
        printf("|------------------|-----------------|-------|---------|------------|------------|-----------|\n");
    }
    for (int k = 0; k < ntypes; k++) {
        for (int i = 0; i < nth; i++) {
            rp_pool *pool = NULL;
            if (rp_pool_create((int)ths[i], &pool) != RP_OK) return cli_fail(a.cmd, "pool", 1);
            /* --each: every registered SIMD kernel of the type the CPU runs at lvl (the selected one first),
             * e.g. a packed kernel against the unpacked one it replaced, in one run */
            const rp_mm_kernel *ks[8], *sel = rp_mm_kernel_select(types[k], lvl);
            int nk = 0;
            if (each) {
                const int na = rp_mm_kernel_list(types[k], ks, 8);
                for (int j = 0; j < na; j++)
                    if (ks[j] != sel && ks[j]->level <= lvl && ks[j]->level > RP_CPU_SCALAR) ks[nk++] = ks[j];
            }
            for (int j = -1; j < nk; j++) {
                const rp_mm_kernel *kk = j < 0 ? NULL : ks[j];
                bench_matmul(pool, types[k], kk, rows, cols, 1, (int)reps * 4, lvl, json, &first);
                bench_matmul(pool, types[k], kk, rows, cols, n_big, (int)reps, lvl, json, &first);
            }
            rp_pool_free(pool);
        }
    }
    if (json) printf("\n]");
    if (model_path) {
        rp_model *m = NULL;
        rp_model_params mp = rp_model_default_params();
        rp_status st = cli_model_load(model_path, mp, &m);
        if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
        rp_model_perf perf;
        rp_model_perf_get(m, &perf);
        const double bytes = perf.decode_bytes_per_token;
        double ceil = bw_max * 1e9 / bytes;
        if (json)
            printf(", \"model\": {\"path\": \"%s\", \"bytes_per_token\": %.0f, \"bandwidth_gb_s\": %.2f, "
                   "\"decode_ceiling_tok_s\": %.2f}", model_path, bytes, bw_max, ceil);
        else
            printf("\ndecode ceiling for %s: %.1f MiB of weights per token / %.2f GB/s = %.2f tok/s\n", model_path,
                   bytes / 1048576.0, bw_max, ceil);
        rp_model_free(m);
    }
    if (json) printf("}\n");
    return 0;
}
