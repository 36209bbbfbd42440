/* bench_model.c — `reprise bench model`: llama-bench-style prefill (ppN) and decode (tgN) throughput. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench.h"
#include "busy.h"
#include "cli.h"
#include "gen_args.h"
#include "progress.h"
#include "reprise.h"

#define MAX_LIST 16
#define MAX_TEMPS 8

/* Puts the sequence at `depth` tokens of context (dtoks): kept when it already holds them, else prefilled
 * (not timed). 0 on success. */
static int at_depth(rp_seq *s, const rp_token *dtoks, int depth) {
    const int32_t have = rp_seq_n_past(s);
    if (depth == 0) {
        rp_seq_reset(s);
        return 0;
    }
    if (have >= depth && !memcmp(rp_seq_tokens(s), dtoks, sizeof *dtoks * (size_t)depth))
        return rp_seq_truncate(s, depth) == RP_OK ? 0 : -1;
    rp_seq_reset(s);
    return rp_seq_feed(s, dtoks, depth) == RP_OK ? 0 : -1;
}

/* One measurement after `depth` tokens of context: N prompt tokens fed at once, in batches of the engine's
 * n_batch (pp), or N single tokens one after another (tg): the fixed tokens, or with sampling params each token
 * drawn from the previous one's logits (decode as generation runs it). Returns tokens per second, -1 on failure. */
static double measure(rp_seq *s, const rp_token *dtoks, int depth, const rp_token *toks, int n, bool pp,
                      const rp_sampler_params *smp) {
    if (at_depth(s, dtoks, depth) != 0) return -1;
    double t0 = cli_now();
    if (pp) {
        if (rp_seq_feed(s, toks, n) != RP_OK) return -1;
    } else {
        rp_token t = toks[0];
        for (int i = 0; i < n; i++) {
            if (rp_seq_feed(s, &t, 1) != RP_OK) return -1;
            if (smp) {
                if (rp_seq_sample(s, smp, &t) != RP_OK) return -1;
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
    const char *model_path = NULL, *pp_s = "512", *tg_s = "64", *t_s = "2", *kv_name = "f16", *temp_s = NULL,
               *d_s = "0";
    long reps = 5, n_batch = 512, busy = 0;
    bool json = false, ceiling = false;
    cli_gpu gpu = cli_gpu_defaults();
    /* the server's sampling (OpenAI semantics): temperature and top_p only */
    rp_sampler_params sp = rp_sampler_default_params();
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    for (; a.i < argc; a.i++) {
        const char *v;
        int r;
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench model -m MODEL.gguf [-p 128,512,2048] [-n 64] [-d 0,4096] [-t 1,2] [-r 5]\n"
                   "                           [-b 512] [--kv-type f16|q8_0] [--cpu LEVEL] [--ceiling]\n"
                   "                           [--busy N] [--json] [-ngl N|all] [--device D] [--no-gpu]\n"
                   "                           [--temp 0,1 [--top-k K] [--top-p P] [--min-p P] [--seed S] ...]\n"
                   "  ppN: N prompt tokens evaluated in batches of -b (logits for the last only)\n"
                   "  tgN: N tokens decoded one at a time\n"
                   "-d D,...: each test after D tokens of context (prefilled once, not timed), as llama-bench's -d;\n"
                   "rows read \"pp512 @ d4096\".\n"
                   "--busy N: every run twice, alternating: quiet, then with another process spinning N threads on\n"
                   "the machine (contention, as a phone or laptop always has); the busy rows give their paired median\n"
                   "ratio to the quiet ones.\n"
                   "--temp T,...: tg with sampling, as generation runs: each token is drawn from the last one's\n"
                   "logits at each temperature in turn (0 = greedy; one tg row per temperature, the runs of the\n"
                   "temperatures alternate so drift hits them alike, and with two or more a line gives each one's\n"
                   "median paired ratio to the first). The sampler is the server's: top_k 0, top_p 1, min_p 0,\n"
                   "unless --top-k / --top-p / --min-p / the penalties (run's sampling options) say otherwise.\n"
                   "Median, min and max tok/s over -r runs after one warm-up; --json prints one JSON array.\n"
                   "--ceiling: before every tg run, a bandwidth probe (512 MiB, the same threads) gives that\n"
                   "run's decode ceiling ((weight bytes + the KV bytes read at that depth) per token / bandwidth);\n"
                   "prints the median ceiling and the\n"
                   "median, min and max of the paired ratios tok/s / ceiling.\n"
                   "-ngl / --device / --no-gpu: the GPU offload, as `reprise run` (the JSON rows' \"gpu_layers\" say how many\n"
                   "layers ran there; stderr names the device).\n");
            return 0;
        } else if ((r = cli_gpu_arg(&a, &gpu)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "-p", "--n-prompt")) { if (!cli_str(&a, &pp_s)) return 2; }
        else if (cli_is(&a, "-n", "--n-gen")) { if (!cli_str(&a, &tg_s)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_str(&a, &t_s)) return 2; }
        else if (cli_is(&a, "-d", "--n-depth")) { if (!cli_str(&a, &d_s)) return 2; }
        else if (cli_is(&a, "--busy", NULL)) { if (!cli_int(&a, 1, 256, &busy)) return 2; }
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
    long pps[MAX_LIST], tgs[MAX_LIST], ths[MAX_LIST], ds[MAX_LIST];
    int npp = strcmp(pp_s, "0") ? cli_int_list(a.cmd, "-p", pp_s, pps, MAX_LIST) : 0;
    int ntg = strcmp(tg_s, "0") ? cli_int_list(a.cmd, "-n", tg_s, tgs, MAX_LIST) : 0;
    int nth = cli_int_list(a.cmd, "-t", t_s, ths, MAX_LIST);
    if (npp < 0 || ntg < 0 || nth < 0) return 2;
    int nd = 0;   /* -d: depths >= 0 (cli_int_list takes positive ones only) */
    long max_d = 0;
    for (const char *q = d_s; *q;) {
        char *end;
        const long d = strtol(q, &end, 10);
        if (end == q || d < 0 || d > (1L << 24) || nd >= MAX_LIST || (*end && *end != ',')) {
            fprintf(stderr, "reprise bench model: -d expects up to %d comma-separated depths >= 0, got '%s'\n", MAX_LIST, d_s);
            return 2;
        }
        ds[nd++] = d;
        if (d > max_d) max_d = d;
        q = *end ? end + 1 : end;
    }
    if (nd == 0) ds[nd++] = 0;
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
    const int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
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
    cli_gpu_params(&gpu, kv_type, &mp);
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    cli_gpu_note(a.cmd, m, &gpu);
    const int32_t n_gpu = rp_model_gpu_layers(m);
    const char *mname = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    rp_model_perf perf;
    rp_model_perf_get(m, &perf);
    const char *mtype = perf.main_type;
    const int32_t n_vocab = rp_model_describe(m).n_vocab;
    rp_token *toks = malloc(sizeof *toks * (size_t)max_tok), *dtoks = malloc(sizeof *dtoks * (size_t)(max_d + 1));
    const size_t nvar = (size_t)MAX_TEMPS * 2 * (size_t)reps;   /* temperatures x quiet / busy */
    double *samples = malloc(sizeof(double) * nvar), *ratios = malloc(sizeof(double) * nvar);
    double *ceils = malloc(sizeof(double) * (size_t)reps), *fracs = malloc(sizeof(double) * nvar);
    rp_sampler_params smps[MAX_TEMPS];
    for (int v = 0; v < ntemp; v++) {
        smps[v] = sp;
        smps[v].temp = (float)temps[v];
    }
    /* the probe's buffer is made once, so every probe reads the same (warm) pages, as decode reads the weights */
    cli_bw_probe *bw = ceiling && ntg > 0 ? cli_bw_create((size_t)512 << 20) : NULL;
    const double bytes_tok = perf.decode_bytes_per_token;
    if (!toks || !dtoks || !samples || !ratios || !ceils || !fracs || (ceiling && ntg > 0 && !bw)) {
        fprintf(stderr, "reprise bench model: out of memory\n");
        free(toks); free(dtoks); free(samples); free(ratios); free(ceils); free(fracs); cli_bw_free(bw);
        rp_model_free(m);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (long i = 0; i < max_tok; i++) {   /* fixed pseudo-random prompt */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        toks[i] = (rp_token)(x % (uint64_t)n_vocab);
    }
    for (long i = 0; i < max_d; i++) {   /* and a different fixed context for -d */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        dtoks[i] = (rp_token)(x % (uint64_t)n_vocab);
    }
    if (json) printf("[");
    else {
        rp_cpu_desc cpu;
        rp_cpu_describe(&cpu);
        fprintf(stderr, "cpu: %s (%s), weights packed for %s\n", cpu.brand, cpu.best, perf.cpu_level);
        printf("| %-28s | %-6s | %7s | %8s | %12s | %10s | %10s |\n", "model", "type", "threads", "test", "tok/s median",
               "min", "max");
        printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------------", "--------", "---------", "----------",
               "--------------", "------------", "------------");
    }
    int rc = 0, first = 1;
    for (int ti = 0; ti < nth && rc == 0; ti++) {
        /* an engine that only runs the model: no reuse, no calibration */
        rp_engine *eng = NULL;
        rp_seq *seq = NULL;
        rp_engine_params ep = rp_engine_default_params();
        ep.n_threads = (int)ths[ti];
        ep.n_batch = (int32_t)(n_batch < max_tok ? n_batch : max_tok);
        ep.n_ctx = (int32_t)(max_tok + max_d);
        ep.kv_type = (rp_kv_type)kv_type;
        ep.reuse = RP_REUSE_NONE;
        ep.load_calibration = false;
        ep.n_ctx_over_train = true;   /* as llama-bench: any -p / -n, whatever the model was trained on */
        if ((st = rp_engine_create(m, &ep, &eng)) != RP_OK || (st = rp_seq_create(eng, &seq)) != RP_OK) {
            rc = cli_fail(a.cmd, "setup", st);
        } else if (rp_engine_n_ctx(eng) < max_tok + max_d) {
            fprintf(stderr, "reprise bench model: %ld tokens exceed the model's context of %d\n", max_tok + max_d,
                    rp_engine_n_ctx(eng));
            rc = 2;
        }
        for (int di = 0; di < nd && rc == 0; di++)
        for (int kind = 0; kind < 2 && rc == 0; kind++) {
            const int depth = (int)ds[di];
            int cnt = kind == 0 ? npp : ntg;
            for (int k = 0; k < cnt && rc == 0; k++) {
                int n = (int)(kind == 0 ? pps[k] : tgs[k]);
                /* variants: tg once per temperature (the fixed tokens without --temp), pp once; each quiet and,
                 * with --busy, busy: sample index ((v * nb) + b) * reps + r */
                const int nv = kind == 1 && ntemp > 0 ? ntemp : 1, nb = busy > 0 ? 2 : 1;
                const rp_sampler_params *smp = kind == 1 && ntemp > 0 ? smps : NULL;
                if (measure(seq, dtoks, depth, toks, n, kind == 0, smp) < 0) { rc = cli_fail(a.cmd, "forward", 1); break; }
                const bool with_ceiling = bw && kind == 1;
                /* KV bytes a decode step reads at this depth (on average over the run) */
                uint64_t kv_tok = 0;
                if (with_ceiling && rp_kv_estimate(m, 1, (rp_kv_type)kv_type, &kv_tok) != RP_OK) kv_tok = 0;
                const double bytes_step = bytes_tok + (double)kv_tok * ((double)depth + n / 2.0);
                for (long r = 0; r < reps && rc == 0; r++) {
                    if (with_ceiling) ceils[r] = cli_bw_measure(bw, (int)ths[ti], 1, NULL) * 1e9 / bytes_step;
                    for (int v = 0; v < nv; v++)   /* alternating, so drift hits every variant alike */
                        for (int b = 0; b < nb; b++) {
                            const size_t at = ((size_t)(v * nb + b)) * (size_t)reps + (size_t)r;
                            if (at_depth(seq, dtoks, depth) != 0) { rc = cli_fail(a.cmd, "forward", 1); break; }
                            pid_t bp = 0;
                            if (b == 1 && (bp = bench_busy_start((int)busy)) < 0) {
                                perror("reprise bench model: --busy: fork");
                                rc = 1;
                                break;
                            }
                            samples[at] = measure(seq, dtoks, depth, toks, n, kind == 0, smp ? &smp[v] : NULL);
                            bench_busy_stop(bp);
                            if (samples[at] < 0) { rc = cli_fail(a.cmd, "forward", 1); break; }
                            if (with_ceiling) fracs[at] = samples[at] / ceils[r];
                            /* paired: busy with its quiet run, a temperature with the first one's */
                            ratios[at] = samples[at] / (b == 1 ? samples[at - (size_t)reps] : samples[(size_t)b * (size_t)reps + (size_t)r]);
                        }
                }
                if (rc != 0) break;
                if (with_ceiling) qsort(ceils, (size_t)reps, sizeof *ceils, cli_cmp_double);
                const double ceil_med = with_ceiling ? cli_pct_sorted(ceils, (int)reps, 0.5) : 0;
                for (int v = 0; v < nv; v++)
                    for (int b = 0; b < nb; b++) {
                        const size_t at = ((size_t)(v * nb + b)) * (size_t)reps;
                        double *sv = samples + at, *fv = fracs + at, *rv = ratios + at;
                        qsort(sv, (size_t)reps, sizeof *sv, cli_cmp_double);
                        qsort(rv, (size_t)reps, sizeof *rv, cli_cmp_double);
                        const double med = cli_pct_sorted(sv, (int)reps, 0.5);
                        double frac_med = 0;
                        if (with_ceiling) {
                            qsort(fv, (size_t)reps, sizeof *fv, cli_cmp_double);
                            frac_med = cli_pct_sorted(fv, (int)reps, 0.5);
                        }
                        char test[80], dep[24] = "", bz[24] = "";
                        if (depth > 0) snprintf(dep, sizeof dep, " @ d%d", depth);
                        if (b == 1) snprintf(bz, sizeof bz, " busy=%ld", busy);
                        if (smp) snprintf(test, sizeof test, "tg%d%s t=%g%s", n, dep, temps[v], bz);
                        else snprintf(test, sizeof test, "%s%d%s%s", kind == 0 ? "pp" : "tg", n, dep, bz);
                        if (json) {
                            printf("%s\n  {\"model\": \"%s\", \"type\": \"%s\", \"test\": \"%s\", \"threads\": %ld, "
                                   "\"tok_s_median\": %.3f, \"tok_s_min\": %.3f, \"tok_s_max\": %.3f, \"cpu\": \"%s\"",
                                   first ? "" : ",", mname, mtype, test, ths[ti], med, sv[0], sv[reps - 1], perf.cpu_level);
                            printf(", \"gpu_layers\": %d", (int)n_gpu);
                            if (depth > 0) printf(", \"depth\": %d", depth);
                            if (b == 1)
                                printf(", \"busy\": %ld, \"vs_quiet_median\": %.4f, \"vs_quiet_min\": %.4f, \"vs_quiet_max\": %.4f",
                                       busy, cli_pct_sorted(rv, (int)reps, 0.5), rv[0], rv[reps - 1]);
                            if (smp)
                                printf(", \"temp\": %g, \"top_k\": %d, \"top_p\": %g, \"min_p\": %g, \"vs_first_median\": %.4f",
                                       temps[v], sp.top_k, sp.top_p, sp.min_p, b == 0 ? cli_pct_sorted(rv, (int)reps, 0.5) : 0.0);
                            if (with_ceiling)
                                printf(", \"bytes_per_token\": %.0f, \"ceiling_tok_s_median\": %.3f, \"of_ceiling_median\": %.4f, "
                                       "\"of_ceiling_min\": %.4f, \"of_ceiling_max\": %.4f",
                                       bytes_step, ceil_med, frac_med, fv[0], fv[reps - 1]);
                            printf("}");
                            first = 0;
                        } else {
                            printf("| %-28.28s | %-6s | %7ld | %8s | %12.2f | %10.2f | %10.2f |\n", mname, mtype, ths[ti], test,
                                   med, sv[0], sv[reps - 1]);
                            if (with_ceiling)
                                printf("|   ceiling (probe before each run): median %.2f tok/s; decode at %.0f %% of it "
                                       "(paired median; min %.0f %%, max %.0f %%)\n",
                                       ceil_med, 100 * frac_med, 100 * fv[0], 100 * fv[reps - 1]);
                            if (b == 1)
                                printf("|   busy=%ld / quiet: %.3fx (median of %ld paired runs; min %.3fx, max %.3fx)\n", busy,
                                       cli_pct_sorted(rv, (int)reps, 0.5), reps, rv[0], rv[reps - 1]);
                            else if (smp && v > 0)
                                printf("|   t=%g / t=%g: %.3fx (median of %ld paired runs; min %.3fx, max %.3fx)\n", temps[v], temps[0],
                                       cli_pct_sorted(rv, (int)reps, 0.5), reps, rv[0], rv[reps - 1]);
                        }
                    }
                fflush(stdout);
            }
        }
        rp_seq_free(seq);
        rp_engine_free(eng);
    }
    if (json) printf("\n]\n");
    free(toks);
    free(dtoks);
    free(samples);
    free(ratios);
    free(ceils);
    free(fracs);
    cli_bw_free(bw);
    rp_model_free(m);
    return rc;
}
