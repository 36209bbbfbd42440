/* bench_model.c — `reprise bench model`: llama-bench-style prefill (ppN) and decode (tgN) throughput. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "cli.h"
#include "gen_args.h"
#include "progress.h"
#include "kernels/cpu.h"
#include "kernels/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/sampler.h"

#define MAX_LIST 16
#define MAX_TEMPS 8

/* The weight type holding most bytes ("q4_0", "q4_k", ...). */
static const char *main_type(const rp_model *m) {
    uint64_t bytes[RP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < rp_gguf_n_tensors(m->gguf); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(m->gguf, i);
        if ((unsigned)t->type < RP_TYPE_COUNT) bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int t = 1; t < RP_TYPE_COUNT; t++)
        if (bytes[t] > bytes[best]) best = t;
    const rp_type_traits *tr = rp_type_get_traits(best);
    return tr ? tr->name : "?";
}

/* One measurement: N prompt tokens in batches of n_batch (pp), or N single
 * tokens one after another (tg): the fixed tokens, or with a sampler each
 * token drawn from the previous one's logits (decode as generation runs it).
 * Returns tokens per second. */
static double measure(rp_ctx *ctx, rp_kv *kv, rp_batch *b, const rp_token *toks, int n, bool pp, int n_batch, rp_sampler *smp) {
    rp_kv_clear(kv);
    double t0 = cli_now();
    if (pp) {
        for (int off = 0; off < n; off += n_batch) {
            int cnt = n - off < n_batch ? n - off : n_batch;
            rp_batch_clear(b);
            for (int i = 0; i < cnt; i++) rp_batch_add(b, toks[off + i], 0, off + i, off + i, off + i == n - 1);
            if (rp_forward(ctx, b, &kv, 1) != RP_OK) return -1;
        }
    } else {
        if (smp) rp_sampler_reset(smp);
        rp_token t = toks[0];
        for (int i = 0; i < n; i++) {
            rp_batch_clear(b);
            rp_batch_add(b, t, 0, i, i, true);
            if (rp_forward(ctx, b, &kv, 1) != RP_OK) return -1;
            if (smp) {
                t = rp_sampler_sample(smp, rp_ctx_logits(ctx, 0));
                rp_sampler_accept(smp, t);
            } else if (i + 1 < n) {
                t = toks[i + 1];
            }
        }
    }
    double dt = cli_now() - t0;
    return n / (dt > 0 ? dt : 1e-9);
}

int bench_model(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench model"};
    const char *model_path = NULL, *pp_s = "512", *tg_s = "64", *t_s = "2", *kv_name = "f16", *temp_s = NULL;
    long reps = 5, n_batch = 512;
    bool json = false, ceiling = false;
    /* the server's sampling (OpenAI semantics): temperature and top_p only */
    rp_sampler_params sp = rp_sampler_default_params();
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    for (; a.i < argc; a.i++) {
        const char *v;
        int r;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench model -m MODEL.gguf [-p 128,512,2048] [-n 64] [-t 1,2] [-r 5] [-b 512]\n"
                   "                           [--kv-type f16|q8_0] [--cpu LEVEL] [--ceiling] [--json]\n"
                   "                           [--temp 0,1 [--top-k K] [--top-p P] [--min-p P] [--seed S] ...]\n"
                   "  ppN: N prompt tokens evaluated in batches of -b (logits for the last only)\n"
                   "  tgN: N tokens decoded one at a time from an empty context\n"
                   "--temp T,...: tg with sampling, as generation runs: each token is drawn from the last one's\n"
                   "logits at each temperature in turn (0 = greedy; one tg row per temperature, the runs of the\n"
                   "temperatures alternate so drift hits them alike, and with two or more a line gives each one's\n"
                   "median paired ratio to the first). The sampler is the server's: top_k 0, top_p 1, min_p 0,\n"
                   "unless --top-k / --top-p / --min-p / the penalties (run's sampling options) say otherwise.\n"
                   "Median, min and max tok/s over -r runs after one warm-up; --json prints one JSON array.\n"
                   "--ceiling: before every tg run, a bandwidth probe (512 MiB, the same threads) gives that\n"
                   "run's decode ceiling (weight bytes per token / bandwidth); prints the median ceiling and the\n"
                   "median, min and max of the paired ratios tok/s / ceiling.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "-p", "--n-prompt")) { if (!cli_str(&a, &pp_s)) return 2; }
        else if (cli_is(&a, "-n", "--n-gen")) { if (!cli_str(&a, &tg_s)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_str(&a, &t_s)) return 2; }
        else if (cli_is(&a, "-r", "--repetitions")) { if (!cli_int(&a, 1, 1000, &reps)) return 2; }
        else if (cli_is(&a, "-b", "--batch-size")) { if (!cli_int(&a, 1, 65536, &n_batch)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "--temp", NULL)) { if (!cli_str(&a, &temp_s)) return 2; }
        else if ((r = cli_sampling_arg(&a, &sp)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--ceiling", NULL)) ceiling = true;
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise bench model: -m MODEL.gguf is required\n"); return 2; }
    long pps[MAX_LIST], tgs[MAX_LIST], ths[MAX_LIST];
    int npp = strcmp(pp_s, "0") ? cli_int_list(a.cmd, "-p", pp_s, pps, MAX_LIST) : 0;
    int ntg = strcmp(tg_s, "0") ? cli_int_list(a.cmd, "-n", tg_s, tgs, MAX_LIST) : 0;
    int nth = cli_int_list(a.cmd, "-t", t_s, ths, MAX_LIST);
    if (npp < 0 || ntg < 0 || nth < 0) return 2;
    double temps[MAX_TEMPS];
    int ntemp = 0;
    if (temp_s) {
        const char *q = temp_s;
        while (*q) {
            char *end;
            const double t = strtod(q, &end);
            if (end == q || !(t >= 0 && t <= 100) || ntemp >= MAX_TEMPS || (*end && *end != ',')) {
                fprintf(stderr, "reprise bench model: --temp expects up to %d comma-separated temperatures in [0, 100], got '%s'\n",
                        MAX_TEMPS, temp_s);
                return 2;
            }
            temps[ntemp++] = t;
            q = *end ? end + 1 : end;
        }
        if (ntemp == 0) { fprintf(stderr, "reprise bench model: --temp is empty\n"); return 2; }
    }
    int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_Q8_0 && kv_type != RP_TYPE_F32) {
        fprintf(stderr, "reprise bench model: --kv-type must be f16, q8_0 or f32\n");
        return 2;
    }
    long max_tok = 1;
    for (int i = 0; i < npp; i++) if (pps[i] > max_tok) max_tok = pps[i];
    for (int i = 0; i < ntg; i++) if (tgs[i] > max_tok) max_tok = tgs[i];
    long max_th = 1;
    for (int i = 0; i < nth; i++) if (ths[i] > max_th) max_th = ths[i];

    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)max_th;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    const char *mname = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    const char *mtype = main_type(m);
    rp_token *toks = malloc(sizeof *toks * (size_t)max_tok);
    double *samples = malloc(sizeof(double) * MAX_TEMPS * (size_t)reps), *ratios = malloc(sizeof(double) * MAX_TEMPS * (size_t)reps);
    double *ceils = malloc(sizeof(double) * (size_t)reps), *fracs = malloc(sizeof(double) * MAX_TEMPS * (size_t)reps);
    rp_sampler *smps[MAX_TEMPS] = {0};
    bool smp_ok = true;
    for (int v = 0; v < ntemp; v++) {
        rp_sampler_params p = sp;
        p.temp = (float)temps[v];
        if (rp_sampler_create(p, m->hp.n_vocab, &smps[v]) != RP_OK) smp_ok = false;
    }
    /* the probe's buffer is made once, so every probe reads the same (warm) pages, as decode reads the weights */
    cli_bw_probe *bw = ceiling && ntg > 0 ? cli_bw_create((size_t)512 << 20) : NULL;
    const double bytes_tok = cli_decode_bytes_per_token(m);
    if (!toks || !samples || !ratios || !ceils || !fracs || (ceiling && ntg > 0 && !bw) || !smp_ok) {
        fprintf(stderr, "reprise bench model: %s\n", smp_ok ? "out of memory" : rp_last_error());
        free(toks); free(samples); free(ratios); free(ceils); free(fracs); cli_bw_free(bw);
        for (int v = 0; v < ntemp; v++) rp_sampler_free(smps[v]);
        rp_model_free(m);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (long i = 0; i < max_tok; i++) {   /* fixed pseudo-random prompt */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        toks[i] = (rp_token)(x % (uint64_t)m->hp.n_vocab);
    }
    if (json) printf("[");
    else {
        fprintf(stderr, "cpu: %s (%s), weights packed for %s\n", rp_cpu_info_get()->brand,
                rp_cpu_level_name(rp_cpu_info_get()->best), rp_cpu_level_name((rp_cpu_level)m->cpu_level));
        printf("| %-28s | %-6s | %7s | %8s | %12s | %10s | %10s |\n", "model", "type", "threads", "test", "tok/s median",
               "min", "max");
        printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------------", "--------", "---------", "----------",
               "--------------", "------------", "------------");
    }
    int rc = 0, first = 1;
    for (int ti = 0; ti < nth && rc == 0; ti++) {
        rp_ctx *ctx = NULL;
        rp_kv *kv = NULL;
        rp_batch b = {0};
        rp_ctx_params cp = rp_ctx_default_params();
        cp.n_threads = (int)ths[ti];
        cp.n_batch = (int32_t)(n_batch < max_tok ? n_batch : max_tok);
        cp.n_outputs = 1;
        cp.n_ctx_max = (int32_t)max_tok;
        if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK || (st = rp_kv_create(m, (int32_t)max_tok, (rp_type)kv_type, &kv)) != RP_OK ||
            (st = rp_batch_init(&b, cp.n_batch)) != RP_OK) {
            rc = cli_fail(a.cmd, "setup", st);
        }
        for (int kind = 0; kind < 2 && rc == 0; kind++) {
            int cnt = kind == 0 ? npp : ntg;
            for (int k = 0; k < cnt && rc == 0; k++) {
                int n = (int)(kind == 0 ? pps[k] : tgs[k]);
                /* variants: tg once per temperature (the fixed tokens without --temp), pp once */
                const int nv = kind == 1 && ntemp > 0 ? ntemp : 1;
                rp_sampler *const *smp = kind == 1 && ntemp > 0 ? smps : NULL;
                if (measure(ctx, kv, &b, toks, n, kind == 0, cp.n_batch, smp ? smp[0] : NULL) < 0) { rc = cli_fail(a.cmd, "forward", 1); break; }
                const bool with_ceiling = bw && kind == 1;
                for (long r = 0; r < reps; r++) {
                    if (with_ceiling) ceils[r] = cli_bw_measure(bw, (int)ths[ti], 1, NULL) * 1e9 / bytes_tok;
                    for (int v = 0; v < nv; v++) {   /* alternating, so drift hits every variant alike */
                        samples[v * reps + r] = measure(ctx, kv, &b, toks, n, kind == 0, cp.n_batch, smp ? smp[v] : NULL);
                        if (with_ceiling) fracs[v * reps + r] = samples[v * reps + r] / ceils[r];
                        ratios[v * reps + r] = samples[v * reps + r] / samples[r];   /* paired with the first variant */
                    }
                }
                if (with_ceiling) {
                    qsort(ceils, (size_t)reps, sizeof *ceils, cli_cmp_double);
                }
                const double ceil_med = with_ceiling ? cli_pct_sorted(ceils, (int)reps, 0.5) : 0;
                for (int v = 0; v < nv; v++) {
                    double *sv = samples + v * reps, *fv = fracs + v * reps, *rv = ratios + v * reps;
                    qsort(sv, (size_t)reps, sizeof *sv, cli_cmp_double);
                    qsort(rv, (size_t)reps, sizeof *rv, cli_cmp_double);
                    const double med = cli_pct_sorted(sv, (int)reps, 0.5);
                    double frac_med = 0;
                    if (with_ceiling) {
                        qsort(fv, (size_t)reps, sizeof *fv, cli_cmp_double);
                        frac_med = cli_pct_sorted(fv, (int)reps, 0.5);
                    }
                    char test[48];
                    if (smp) snprintf(test, sizeof test, "tg%d t=%g", n, temps[v]);
                    else snprintf(test, sizeof test, "%s%d", kind == 0 ? "pp" : "tg", n);
                    if (json) {
                        printf("%s\n  {\"model\": \"%s\", \"type\": \"%s\", \"test\": \"%s\", \"threads\": %ld, "
                               "\"tok_s_median\": %.3f, \"tok_s_min\": %.3f, \"tok_s_max\": %.3f, \"cpu\": \"%s\"",
                               first ? "" : ",", mname, mtype, test, ths[ti], med, sv[0], sv[reps - 1],
                               rp_cpu_level_name((rp_cpu_level)m->cpu_level));
                        if (smp)
                            printf(", \"temp\": %g, \"top_k\": %d, \"top_p\": %g, \"min_p\": %g, \"vs_first_median\": %.4f",
                                   temps[v], sp.top_k, sp.top_p, sp.min_p, cli_pct_sorted(rv, (int)reps, 0.5));
                        if (with_ceiling)
                            printf(", \"bytes_per_token\": %.0f, \"ceiling_tok_s_median\": %.3f, \"of_ceiling_median\": %.4f, "
                                   "\"of_ceiling_min\": %.4f, \"of_ceiling_max\": %.4f",
                                   bytes_tok, ceil_med, frac_med, fv[0], fv[reps - 1]);
                        printf("}");
                        first = 0;
                    } else {
                        printf("| %-28.28s | %-6s | %7ld | %8s | %12.2f | %10.2f | %10.2f |\n", mname, mtype, ths[ti], test,
                               med, sv[0], sv[reps - 1]);
                        if (with_ceiling)
                            printf("|   ceiling (probe before each run): median %.2f tok/s; decode at %.0f %% of it "
                                   "(paired median; min %.0f %%, max %.0f %%)\n",
                                   ceil_med, 100 * frac_med, 100 * fv[0], 100 * fv[reps - 1]);
                        if (smp && v > 0)
                            printf("|   t=%g / t=%g: %.3fx (median of %ld paired runs; min %.3fx, max %.3fx)\n", temps[v], temps[0],
                                   cli_pct_sorted(rv, (int)reps, 0.5), reps, rv[0], rv[reps - 1]);
                    }
                }
                fflush(stdout);
            }
        }
        rp_batch_free(&b);
        rp_kv_free(kv);
        rp_ctx_free(ctx);
    }
    if (json) printf("\n]\n");
    free(toks);
    free(samples);
    free(ratios);
    free(ceils);
    free(fracs);
    cli_bw_free(bw);
    for (int v = 0; v < ntemp; v++) rp_sampler_free(smps[v]);
    rp_model_free(m);
    return rc;
}
