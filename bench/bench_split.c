/* bench_split.c — includes internals (the split executor below the public API). `reprise bench split`: the CPU +
 * GPU column-parallel matmul (src/gpu/gpu_split.h) on weight shapes of a model (default: the Llama-3.2-1B shape's
 * q, k/v, o, gate/up, down), for decode (n = 1) and prefill (n = 512) rows: the median wall time at each CPU fraction
 * f (f = 0: all on the GPU, f = 1: all on the CPU), the fraction the calibration picks and its gain over the better
 * single device, and the bus contention: the CPU half's time inside the split call against the CPU doing the same
 * rows with the GPU idle. On lavapipe the "GPU" is the CPU itself: the figures say nothing about a real GPU. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "core/error.h"
#include "gpu/gpu_split.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"

#define MAX_F 12

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* One shape at one n: every fraction timed, the calibration's pick, contention. 0, or 1 on an error (printed). */
static int bench_shape(rp_gpu *g, rp_split *sp, rp_pool *pool, rp_type t, int64_t rows, int64_t cols, uint32_t n,
                       const double *fs, int nf, int reps, bool json, bool *first) {
    const size_t rb = rp_type_row_size(t, cols);
    uint8_t *bytes = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    rp_gpu_buf *gw = NULL, *x = NULL, *y = NULL;
    rp_weight w = {0};
    int rc = 1;
    double *ts = malloc(sizeof(double) * (size_t)reps), *cs = malloc(sizeof(double) * (size_t)reps);
    double med[MAX_F], cpu_in[MAX_F];
    if (!bytes || !row || !ts || !cs) goto out;
    uint64_t s = 11;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = ((float)rng_next(&s) / 2147483648.0f - 0.5f) * 0.1f;
        rp_quantize_row(t, row, bytes + (size_t)r * rb, cols);
    }
    w = (rp_weight){.data = bytes, .type = t, .rows = rows, .cols = cols, .row_bytes = rb};
    if (rp_weight_prepare(&w, rp_cpu_level_active(), pool, false) != RP_OK ||
        rp_gpu_buf_create(g, rb * (size_t)rows, RP_GPU_MEM_DEVICE, &gw) != RP_OK ||
        rp_gpu_buf_write(gw, 0, bytes, rb * (size_t)rows) != RP_OK ||
        rp_gpu_buf_create(g, sizeof(float) * (size_t)n * (size_t)cols, RP_GPU_MEM_DEVICE, &x) != RP_OK ||
        rp_gpu_buf_create(g, sizeof(float) * (size_t)n * (size_t)rows, RP_GPU_MEM_DEVICE, &y) != RP_OK)
        goto out;
    float *xm = rp_gpu_buf_map(x);
    if (!xm) {
        rp_errorf(RP_ERR_UNSUPPORTED, "the device's buffers cannot be mapped: the split needs shared memory");
        goto out;
    }
    for (size_t i = 0; i < (size_t)n * (size_t)cols; i++) xm[i] = (float)rng_next(&s) / 2147483648.0f - 0.5f;
    rp_split_mm_args a = {.w = &w, .gw = gw, .x = x, .y = y, .ldx = (uint32_t)cols, .ldy = (uint32_t)rows, .n = n};
    for (int i = 0; i < nf; i++) {
        a.split = rp_split_point(&w, fs[i]);
        rp_split_times tm;
        if (rp_split_mm(sp, &a, &tm) != RP_OK) goto out;   /* warm-up (and the scratch grows here) */
        for (int r = 0; r < reps; r++) {
            if (rp_split_mm(sp, &a, &tm) != RP_OK) goto out;
            ts[r] = tm.total_s;
            cs[r] = tm.cpu_s;
        }
        med[i] = median(ts, reps);
        cpu_in[i] = median(cs, reps);
    }
    double best_f = 0;
    a.split = 0;
    if (rp_split_calibrate(sp, &a, fs, nf, reps, NULL, NULL, &best_f, NULL) != RP_OK) goto out;
    /* the better single device, and the CPU half alone: the same rows with the GPU idle (f = 1 on a weight of
     * those rows only would need another weight; the CPU-only time scaled by the rows is the estimate) */
    double cpu_only = -1, gpu_only = -1;
    for (int i = 0; i < nf; i++) {
        if (fs[i] >= 1.0) cpu_only = med[i];
        if (fs[i] <= 0.0) gpu_only = med[i];
    }
    int bi = 0;
    for (int i = 0; i < nf; i++)
        if (fs[i] == best_f) bi = i;
    const double single = cpu_only < 0 ? gpu_only : gpu_only < 0 ? cpu_only : cpu_only < gpu_only ? cpu_only : gpu_only;
    const int64_t bsplit = rp_split_point(&w, best_f);
    const double alone = cpu_only > 0 ? cpu_only * (double)bsplit / (double)rows : -1;
    const double contention = bsplit > 0 && bsplit < rows && alone > 0 ? cpu_in[bi] / alone : 1.0;
    const char *tn = rp_type_get_traits((int)t)->name;
    if (json) {
        printf("%s{\"type\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"n\": %u, \"f\": [", *first ? "" : ", ", tn,
               (long long)rows, (long long)cols, n);
        for (int i = 0; i < nf; i++) printf("%s{\"f\": %g, \"ms\": %.4f}", i ? ", " : "", fs[i], 1e3 * med[i]);
        printf("], \"best_f\": %g, \"gain_vs_single\": %.4f, \"cpu_half_contention\": %.4f}",
               best_f, single > 0 ? single / med[bi] : 0.0, contention);
    } else {
        printf("| %-7s | %5lldx%-5lld | %4u |", tn, (long long)rows, (long long)cols, n);
        for (int i = 0; i < nf; i++) printf(" %8.3f |", 1e3 * med[i]);
        printf(" %5.3g | %5.2fx | %5.2fx |\n", best_f, single > 0 ? single / med[bi] : 0.0, contention);
    }
    *first = false;
    rc = 0;
out:
    if (rc) fprintf(stderr, "reprise bench split: %s x %lld x %lld: %s\n", rp_type_get_traits((int)t)->name,
                    (long long)rows, (long long)cols, rp_last_error());
    rp_weight_release(&w);
    rp_gpu_buf_free(gw);
    rp_gpu_buf_free(x);
    rp_gpu_buf_free(y);
    free(bytes);
    free(row);
    free(ts);
    free(cs);
    return rc;
}

int bench_split(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench split"};
    const char *shapes_s = "2048x2048,512x2048,8192x2048,2048x8192", *n_s = "1,512", *f_s = "0,0.25,0.5,0.75,1";
    const char *type_s = "q4_0", *device = NULL;
    long reps = 5, threads = 2;
    bool json = false;
    for (; a.i < argc; a.i++) {
        const char *v;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench split [--shapes 2048x2048,512x2048,8192x2048,2048x8192] [-n 1,512]\n"
                   "                           [--type q4_0] [--f 0,0.25,0.5,0.75,1] [-t 2] [-r 5] [--device NAME|INDEX]\n"
                   "                           [--json]\n"
                   "The CPU + GPU column-parallel matmul on each ROWSxCOLS weight shape (default: the Llama-3.2-1B\n"
                   "shape's q, k/v, gate/up, down) with -n activation rows: the median wall ms of -r calls at each CPU\n"
                   "fraction --f (0: all on the GPU, 1: all on the CPU), the fraction the calibration picks, its gain\n"
                   "over the better single device, and the CPU half's slowdown while the GPU runs (bus contention;\n"
                   "against the CPU-only time scaled by its rows). Needs a GPU whose memory the CPU maps (integrated,\n"
                   "lavapipe); on lavapipe the GPU is the CPU and the figures say nothing about speed.\n");
            return 0;
        } else if (cli_is(&a, "--shapes", NULL)) { if (!cli_str(&a, &shapes_s)) return 2; }
        else if (cli_is(&a, "-n", NULL)) { if (!cli_str(&a, &n_s)) return 2; }
        else if (cli_is(&a, "--f", NULL)) { if (!cli_str(&a, &f_s)) return 2; }
        else if (cli_is(&a, "--type", NULL)) { if (!cli_str(&a, &type_s)) return 2; }
        else if (cli_is(&a, "--device", NULL)) { if (!cli_str(&a, &device)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 512, &threads)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 10000, &reps)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else return cli_unknown(&a);
    }
    const int ti = rp_type_from_name(type_s);
    if (ti < 0 || !rp_type_get_traits(ti)) {
        fprintf(stderr, "reprise bench split: --type '%s' is not a weight type\n", type_s);
        return 2;
    }
    long ns[8];
    const int nn = cli_int_list(a.cmd, "-n", n_s, ns, 8);
    if (nn < 0) return 2;
    double fs[MAX_F];
    int nf = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", f_s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        const double f = strtod(tok, &end);
        if (*end || f < 0 || f > 1 || nf == MAX_F) {
            fprintf(stderr, "reprise bench split: --f takes up to %d fractions in [0, 1] (got '%s')\n", MAX_F, tok);
            return 2;
        }
        fs[nf++] = f;
    }
    int64_t sr[16], sc[16];
    int nsh = 0;
    char sbuf[512];
    snprintf(sbuf, sizeof sbuf, "%s", shapes_s);
    for (char *tok = strtok(sbuf, ","); tok; tok = strtok(NULL, ",")) {
        long long r, c;
        char tail;
        if (sscanf(tok, "%lldx%lld%c", &r, &c, &tail) != 2 || r <= 0 || c <= 0 || nsh == 16 ||
            c % rp_type_get_traits(ti)->blck_size) {
            fprintf(stderr, "reprise bench split: --shapes takes up to 16 ROWSxCOLS with COLS a multiple of %s's "
                            "block (got '%s')\n", type_s, tok);
            return 2;
        }
        sr[nsh] = r, sc[nsh] = c, nsh++;
    }
    rp_gpu_params gp = rp_gpu_default_params();
    gp.device = device;
    rp_gpu *g = NULL;
    rp_gpu_ops *ops = NULL;
    rp_pool *pool = NULL;
    rp_split *sp = NULL;
    int rc = 1;
    if (rp_gpu_create(&gp, &g) != RP_OK || rp_gpu_ops_create(g, &ops) != RP_OK ||
        rp_pool_create((int)threads, &pool) != RP_OK || rp_split_create(g, ops, pool, &sp) != RP_OK) {
        fprintf(stderr, "reprise bench split: %s\n", rp_last_error());
        goto out;
    }
    const rp_gpu_desc *d = rp_gpu_device(g);
    bool first = true;
    if (json) printf("{\"cpu\": \"%s\", \"gpu\": \"%s\", \"gpu_kind\": \"%s\", \"threads\": %ld, \"points\": [",
                     rp_cpu_info_get()->brand, d->name, d->kind, threads);
    else {
        printf("cpu: %s (%ld threads), gpu: %s (%s)%s; median of %ld calls, ms\n", rp_cpu_info_get()->brand, threads,
               d->name, d->kind, !strcmp(d->kind, "cpu") ? " — a CPU device: these figures say nothing about a GPU" : "",
               reps);
        printf("| type    | shape       |    n |");
        for (int i = 0; i < nf; i++) printf(" f=%-6.3g |", fs[i]);
        printf(" best  | gain   | contention |\n");
    }
    rc = 0;
    for (int i = 0; i < nsh && rc == 0; i++)
        for (int j = 0; j < nn && rc == 0; j++)
            rc = bench_shape(g, sp, pool, (rp_type)ti, sr[i], sc[i], (uint32_t)ns[j], fs, nf, (int)reps, json, &first);
    if (json) printf("]}\n");
out:
    rp_split_free(sp);
    rp_pool_free(pool);
    rp_gpu_ops_free(ops);
    rp_gpu_free(g);
    return rc;
}
