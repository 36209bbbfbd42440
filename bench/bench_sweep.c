/* bench_sweep.c — `reprise bench sweep`: TTFT vs prefix and non-prefix reuse ratio at several prompt lengths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "report.h"
#include "reprise.h"
#include "workload.h"

#define MAX_PTS 16

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void fill(rp_token *t, int32_t n, uint64_t *s, int32_t V) {
    int32_t lo, hi;
    rp_workload_token_range(V, &lo, &hi);
    for (int32_t i = 0; i < n; i++) t[i] = lo + (rp_token)(rng(s) % (uint64_t)(hi - lo));
}

/* One timed prompt after a warm-up prompt (cached) in a fresh engine of `mode` (an empty chunk cache). With no
 * warm-up prompt the timed one runs once untimed first, so every mode meets warm buffers. Returns the TTFT. */
static double timed(rp_model *m, int threads, rp_reuse_mode mode, int32_t max_tok, const rp_token *warm, int32_t nw,
                    const int32_t *wb, int32_t nwb, const rp_token *p, int32_t np, const int32_t *pb, int32_t npb,
                    rp_prompt *pr) {
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = threads;
    ep.n_batch = 1024;
    ep.n_ctx = max_tok + 1;
    ep.reuse = mode;
    ep.load_calibration = false;
    ep.n_ctx_over_train = true;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    double r = -1;
    rp_gen_stats st;
    if (rp_engine_create(m, &ep, &e) != RP_OK || rp_seq_create(e, &s) != RP_OK) goto out;
    if (nw > 0 ? rp_wprompt_fill(pr, warm, nw, wb, nwb) != RP_OK || rp_seq_prefill(s, pr, NULL, &st) != RP_OK ||
                     rp_seq_commit(s) != RP_OK
               : rp_wprompt_fill(pr, p, np, pb, npb) != RP_OK || rp_seq_prefill(s, pr, NULL, &st) != RP_OK)
        goto out;
    rp_gen_opts o = rp_gen_default_opts();
    o.persist = false;   /* the timed prompt is not cached (nothing comes after it) */
    if (rp_wprompt_fill(pr, p, np, pb, npb) == RP_OK && rp_seq_prefill(s, pr, &o, &st) == RP_OK) r = st.ttft_ms;
out:
    rp_seq_free(s);
    rp_engine_free(e);
    return r;
}

int bench_sweep(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench sweep"};
    const char *model_path = NULL, *lens_s = "1024,2048,3072", *ratios_s = "0,25,50,75,100", *json_out = NULL, *html_out = NULL;
    long threads = 2, seed = 1;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench sweep -m MODEL.gguf [--lengths 1024,2048,3072] [--ratios 0,25,50,75,100]\n"
                   "                           [-t 2] [--seed 1] [--json OUT.json] [--html OUT.html]\n"
                   "Prefix sweep: the first ratio%% of the prompt is a cached prefix (prefix reuse).\n"
                   "Non-prefix sweep: ratio%% of the prompt is cached documents placed after new text (blend).\n"
                   "Both against no reuse at each prompt length (the paper's sensitivity figures).\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--lengths", NULL)) { if (!cli_str(&a, &lens_s)) return 2; }
        else if (cli_is(&a, "--ratios", NULL)) { if (!cli_str(&a, &ratios_s)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--seed", NULL)) { if (!cli_int(&a, 0, 1L << 40, &seed)) return 2; }
        else if (cli_is(&a, "--json", NULL)) { if (!cli_str(&a, &json_out)) return 2; }
        else if (cli_is(&a, "--html", NULL)) { if (!cli_str(&a, &html_out)) return 2; }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise bench sweep: -m MODEL.gguf is required\n"); return 2; }
    long lens[MAX_PTS], rat[MAX_PTS];
    int nl = cli_int_list(a.cmd, "--lengths", lens_s, lens, MAX_PTS);
    int nr = -1;
    {   /* ratios may include 0 */
        char buf[128];
        snprintf(buf, sizeof buf, "%s", ratios_s);
        nr = 0;
        for (char *t = strtok(buf, ","); t && nr < MAX_PTS; t = strtok(NULL, ",")) {
            char *end;
            long v = strtol(t, &end, 10);
            if (*end || v < 0 || v > 100) { fprintf(stderr, "reprise bench sweep: --ratios are percentages 0..100\n"); return 2; }
            rat[nr++] = v;
        }
    }
    if (nl < 0 || nr <= 0) return 2;
    long max_len = 0;
    for (int i = 0; i < nl; i++) if (lens[i] > max_len) max_len = lens[i];
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    int rc = 1;
    /* the non-prefix warm-up prompt has 16 extra tokens */
    rp_token *p = malloc(sizeof(rp_token) * (size_t)(max_len + 32)), *w = malloc(sizeof(rp_token) * (size_t)(max_len + 32));
    rp_prompt *pr = NULL;
    double none[MAX_PTS], pre[MAX_PTS][MAX_PTS], npre[MAX_PTS][MAX_PTS];
    const int tt = (int)threads;
    if (!p || !w || (st = rp_prompt_create(&pr)) != RP_OK) {
        rc = cli_fail(a.cmd, "setup", st);
        goto out;
    }
    const rp_model_desc md = rp_model_describe(m);
    uint64_t s = (uint64_t)seed * 0x9e3779b97f4a7c15ULL + 7;
    const int32_t V = md.n_vocab, DOC = 256;
    for (int li = 0; li < nl; li++) {
        int32_t L = (int32_t)lens[li];
        fill(p, L, &s, V);
        int32_t b0 = 1;
        if (li == 0) timed(m, tt, RP_REUSE_NONE, L, NULL, 0, NULL, 0, p, L, &b0, 1, pr);   /* warm caches and pages */
        none[li] = timed(m, tt, RP_REUSE_NONE, L, NULL, 0, NULL, 0, p, L, &b0, 1, pr);
        for (int ri = 0; ri < nr; ri++) {
            int32_t R = (int32_t)(L * rat[ri] / 100);
            /* prefix: warm prompt shares the first R tokens (cut on chunk boundaries: bounds every DOC tokens) */
            int32_t bounds[64], nb = 0;
            for (int32_t b = DOC; b < L && nb < 64; b += DOC) bounds[nb++] = b;
            memcpy(w, p, sizeof(rp_token) * (size_t)L);
            if (R < L) fill(w + R, L - R, &s, V);
            pre[li][ri] = timed(m, tt, RP_REUSE_PREFIX, L, w, L, bounds, nb, p, L, bounds, nb, pr);
            /* non-prefix: [new head (L - R)] [R tokens of cached documents]; documents cached by an earlier
             * prompt in which they were preceded by other text */
            int32_t head = L - R;
            if (head < 1) head = 1;   /* the BOS-like first token is always new */
            int32_t R2 = L - head;
            fill(p, head, &s, V);
            nb = 0;
            for (int32_t b = head; b < L && nb < 64; b += DOC) bounds[nb++] = b;
            int32_t wn = 0, wb[64], nwb = 0;
            fill(w, 16, &s, V);   /* other text first, so the documents are not a prefix */
            wn = 16;
            for (int32_t b = 0; b < R2; b += DOC) {
                wb[nwb++] = wn;
                int32_t k = R2 - b < DOC ? R2 - b : DOC;
                memcpy(w + wn, p + head + b, sizeof(rp_token) * (size_t)k);
                wn += k;
            }
            npre[li][ri] = timed(m, tt, RP_REUSE_BLEND, L + 16, w, wn, wb, nwb, p, L, bounds, nb, pr);
            fprintf(stderr, "\r  L=%d ratio %ld%%: none %.0f ms, prefix %.0f ms, non-prefix blend %.0f ms   ", L, rat[ri],
                    none[li], pre[li][ri], npre[li][ri]);
        }
        fprintf(stderr, "\n");
    }
    printf("\nTTFT (ms) vs reuse ratio, %s, %ld threads\n\n", model_path, threads);
    printf("| length | ratio | no reuse | prefix reuse | reduction | non-prefix (blend) | reduction |\n");
    printf("|--------|-------|----------|--------------|-----------|--------------------|-----------|\n");
    for (int li = 0; li < nl; li++)
        for (int ri = 0; ri < nr; ri++)
            printf("| %6ld | %4ld%% | %8.1f | %12.1f | %8.1f%% | %18.1f | %8.1f%% |\n", lens[li], rat[ri], none[li], pre[li][ri],
                   100.0 * (1 - pre[li][ri] / none[li]), npre[li][ri], 100.0 * (1 - npre[li][ri] / none[li]));
    if (json_out) {
        FILE *jf = fopen(json_out, "w");
        if (jf) {
            fprintf(jf, "{\"model\": \"%s\", \"threads\": %ld, \"points\": [", model_path, threads);
            for (int li = 0; li < nl; li++)
                for (int ri = 0; ri < nr; ri++)
                    fprintf(jf, "%s\n  {\"length\": %ld, \"ratio\": %ld, \"none_ms\": %.3f, \"prefix_ms\": %.3f, \"nonprefix_blend_ms\": %.3f}",
                            li + ri ? "," : "", lens[li], rat[ri], none[li], pre[li][ri], npre[li][ri]);
            fprintf(jf, "\n]}\n");
            fclose(jf);
        }
    }
    if (html_out) {
        FILE *hf = rp_html_open(html_out, "Reprise reuse-ratio sweep");
        if (hf) {
            const char *names[MAX_PTS];
            char nbuf[MAX_PTS][32];
            double x[MAX_PTS * MAX_PTS], y[MAX_PTS * MAX_PTS], y2[MAX_PTS * MAX_PTS];
            for (int li = 0; li < nl; li++) {
                snprintf(nbuf[li], sizeof nbuf[li], "%ld tokens", lens[li]);
                names[li] = nbuf[li];
                for (int ri = 0; ri < nr; ri++) {
                    x[li * nr + ri] = (double)rat[ri];
                    y[li * nr + ri] = pre[li][ri];
                    y2[li * nr + ri] = npre[li][ri];
                }
            }
            rp_svg_lines(hf, "Prefix reuse: TTFT vs prefix reuse ratio", "prefix reuse ratio (%)", "TTFT ms", names, nl, x, y, nr);
            rp_svg_lines(hf, "Non-prefix reuse (blend): TTFT vs reuse ratio", "non-prefix reuse ratio (%)", "TTFT ms", names, nl, x,
                         y2, nr);
            rp_html_close(hf);
        }
    }
    rc = 0;
out:
    free(p);
    free(w);
    rp_prompt_free(pr);
    rp_model_free(m);
    return rc;
}
