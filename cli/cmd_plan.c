/* cmd_plan.c — `reprise plan`: which tokens a prompt reuses or recomputes, and the static calls chosen. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib.h"
#include "calib_store.h"
#include "cli.h"
#include "progress.h"
#include "kernels/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "prompt.h"
#include "reuse/engine.h"
#include "store/store.h"

static const char *kind_name(rp_seg_kind k) {
    return k == RP_SEG_PREFIX ? "prefix" : k == RP_SEG_REUSE ? "reuse" : "new";
}

static void preview(const rp_tokenizer *tok, const rp_token *t, int32_t n, char *out, size_t cap) {
    size_t w = 0;
    char piece[256];
    for (int32_t i = 0; i < n && w + 1 < cap; i++) {
        int k = rp_tokenizer_token_to_piece(tok, t[i], true, piece, sizeof piece);
        for (int j = 0; j < k && w + 1 < cap; j++) out[w++] = (piece[j] == '\n' || piece[j] == '\t') ? ' ' : piece[j];
    }
    out[w] = 0;
    if (w >= 40) strcpy(out + 37, "...");
}

/* `calibrated`: the latencies are measured ones, so the plan's total is a predicted time; otherwise it is
 * a cost in placeholder units (the default per-call latencies), printed as such. */
static void print_calls(const char *title, const rp_call *calls, int32_t n, double ms, const rp_static_cfg *cfg,
                        bool calibrated) {
    int32_t np = 0, nr = 0;
    for (int32_t i = 0; i < n; i++) {
        if (calls[i].kind == RP_CALL_PREFILL) np++;
        else nr++;
    }
    printf("\n%s: %d calls (%d prefill x L_P=%d, %d recompute x L_S=%d), ", title, n, np, cfg->L_P, nr, cfg->L_S);
    if (calibrated) printf("predicted %.2f ms\n", ms);
    else printf("uncalibrated: cost %.2f in placeholder units (%.1f per prefill, %.1f per recompute call), not ms\n", ms,
                cfg->lat_P_ms, cfg->lat_S_ms);
    for (int32_t i = 0; i < n && i < 64; i++)
        printf("  %3d  %-9s tokens [%5d, %5d)  %4d new  %4d reused  %4d padding\n", i,
               calls[i].kind == RP_CALL_PREFILL ? "prefill" : "recompute", calls[i].begin, calls[i].end,
               calls[i].n_new, calls[i].n_reuse,
               (calls[i].kind == RP_CALL_PREFILL ? cfg->L_P : cfg->L_S) - (calls[i].end - calls[i].begin));
    if (n > 64) printf("  ... %d more\n", n - 64);
}

/* --show-tokens: runs the blend prefill (the engine's placements, layers
 * 0..check for every non-prefix token, then the selected rows) with the
 * selection traced, and lists per chunk the reused tokens recomputed. */
static bool show_selection(rp_reuse *e, const rp_model *m, const rp_prompt *pr, const rp_reuse_analysis *an,
                           int threads, rp_type kv_type) {
    if (rp_reuse_get_params(e)->mode != RP_REUSE_BLEND) {
        fprintf(stderr, "reprise plan: --show-tokens needs --reuse blend\n");
        return false;
    }
    bool ok = false;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    const rp_token *toks = rp_prompt_tokens(pr);
    const int32_t n = rp_prompt_n_tokens(pr);
    uint8_t *mark = calloc((size_t)n, 1);
    float *logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = threads;
    cp.n_outputs = 1;
    cp.n_ctx_max = n + 1;
    rp_status st;
    if (!mark || !logits) { fprintf(stderr, "reprise plan: out of memory\n"); goto out; }
    if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK || (st = rp_kv_create(m, n + 1, kv_type, &kv)) != RP_OK) {
        cli_fail("plan", "show-tokens setup", st);
        goto out;
    }
    rp_reuse_trace_selection(e, mark);
    rp_reuse_stats rs;
    st = rp_reuse_prefill(e, ctx, kv, toks, n, rp_prompt_bounds(pr), rp_prompt_n_bounds(pr), logits, &rs);
    rp_reuse_trace_selection(e, NULL);
    if (st != RP_OK) { cli_fail("plan", "show-tokens prefill", st); goto out; }
    printf("\nrecomputed reused tokens (dynamic blend, check layer %d): %d of %d\n",
           rp_reuse_get_params(e)->blend.check_layer, rs.n_recomputed, rs.n_nonprefix);
    char piece[256];
    for (int32_t i = 0; i < an->n_spans; i++) {
        const rp_chunk_span *sp = &an->spans[i];
        int32_t n_sel = 0, n_re = 0;
        for (int32_t t = sp->begin; t < sp->begin + sp->len; t++) {
            n_sel += mark[t];
            n_re += t >= rs.n_prefix && an->tok_kind[t] == RP_ROW_REUSE;
        }
        if (n_re == 0) continue;
        printf("  chunk %3d  [%5d, %5d)  %4d of %4d:", i, sp->begin, sp->begin + sp->len, n_sel, n_re);
        int32_t shown = 0;
        for (int32_t t = sp->begin; t < sp->begin + sp->len && shown < 24; t++) {
            if (!mark[t]) continue;
            int k = rp_tokenizer_token_to_piece(m->tok, toks[t], true, piece, sizeof piece - 1);
            piece[k > 0 ? k : 0] = 0;
            for (char *q = piece; *q; q++)
                if (*q == '\n' || *q == '\t') *q = ' ';
            printf(" %d'%s'", t, piece);
            shown++;
        }
        printf("%s\n", n_sel > shown ? " ..." : "");
    }
    ok = true;
out:
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    free(mark);
    free(logits);
    return ok;
}

int cmd_plan(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "plan"};
    const char *model_path = NULL, *segments = NULL, *text = NULL, *separator = NULL, *cache_dir = NULL, *mode_s = "blend";
    const char *kv_name = "f16";
    int select = RP_SELECT_HYBRID;
    double ratio = 0.25;
    long threads = 2, check_layer = 1;
    bool calibrate = false, show_tokens = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise plan -m MODEL.gguf (--segments FILE.json | -p TEXT) [--cache-dir DIR]\n"
                   "                    [--reuse none|prefix|full|blend] [--recompute-ratio R] [--separator TEXT]\n"
                   "                    [--check-layer L] [--select hybrid|dev|attn] [--kv-type f16|q8_0|f32] [--calibrate] [--show-tokens]\n"
                   "                    [-t THREADS]\n"
                   "Shows the prompt's chunks and segments (prefix-reused / reusable / new) against the chunk cache\n"
                   "in --cache-dir, how many tokens blend would recompute, and the static-shape calls chosen by the\n"
                   "DP scheduler next to the naive one-call-type-per-segment schedule. --calibrate measures call\n"
                   "latencies over sizes (multiples of 32), picks L_P / L_S among the sizes near the per-token turning\n"
                   "point (the pair with the least predicted latency over doc-QA / chat / skills layouts) and stores\n"
                   "them for this model, machine and thread count (best of 3 runs per size). --kv-type must match\n"
                   "the `reprise run --kv-type` that wrote the cache (chunk hashes include it). --show-tokens runs\n"
                   "the blend prefill (dynamic shapes, as `reprise run`) and lists the reused tokens whose KV\n"
                   "deviation at the check layer gets them recomputed.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--segments", NULL)) { if (!cli_str(&a, &segments)) return 2; }
        else if (cli_is(&a, "-p", "--prompt")) { if (!cli_str(&a, &text)) return 2; }
        else if (cli_is(&a, "--separator", NULL)) { if (!cli_str(&a, &separator)) return 2; }
        else if (cli_is(&a, "--cache-dir", NULL)) { if (!cli_str(&a, &cache_dir)) return 2; }
        else if (cli_is(&a, "--reuse", NULL)) { if (!cli_str(&a, &mode_s)) return 2; }
        else if (cli_is(&a, "--recompute-ratio", NULL)) { if (!cli_float(&a, 0, 1, &ratio)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "--check-layer", NULL)) { if (!cli_int(&a, 0, 1024, &check_layer)) return 2; }
        else if (cli_is(&a, "--select", NULL)) { if (!cli_select(&a, &select)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "--calibrate", NULL)) calibrate = true;
        else if (cli_is(&a, "--show-tokens", NULL)) show_tokens = true;
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise plan: -m MODEL.gguf is required\n"); return 2; }
    if (!segments && !text && !calibrate) { fprintf(stderr, "reprise plan: --segments FILE or -p TEXT is required\n"); return 2; }
    int mode = rp_reuse_mode_parse(mode_s);
    if (mode < 0) { fprintf(stderr, "reprise plan: --reuse must be none, prefix, full or blend, got '%s'\n", mode_s); return 2; }
    const int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_Q8_0 && kv_type != RP_TYPE_F32) {
        fprintf(stderr, "reprise plan: --kv-type must be f16, q8_0 or f32, got '%s'\n", kv_name);
        return 2;
    }
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    int rc = 1;
    rp_reuse *e = NULL;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    rp_prompt *pr = NULL;
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = (rp_reuse_mode)mode;
    rp.ratio = (float)ratio;
    rp.blend.check_layer = (int32_t)check_layer;
    rp.blend.select = (rp_select_kind)select;
    const int32_t max_tok = 32768;
    if ((st = rp_reuse_create(m, (rp_type)kv_type, max_tok, rp, &e)) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
    if (calibrate) {
        static const int32_t sizes[] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
        const int32_t ns = sizeof sizes / sizeof sizes[0];
        rp_ctx_params cp = rp_ctx_default_params();
        cp.n_threads = (int)threads;
        cp.n_batch = 1024;
        cp.n_outputs = 1;
        cp.n_ctx_max = 1100;
        if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK || (st = rp_kv_create(m, 1100, (rp_type)kv_type, &kv)) != RP_OK) {
            rc = cli_fail(a.cmd, "setup", st);
            goto out;
        }
        rp_calib cal;
        fprintf(stderr, "calibrating %d sizes (prefill and selective-recompute calls)...\n", ns);
        if ((st = rp_reuse_calibrate(e, ctx, kv, sizes, ns, 3, &cal)) != RP_OK) { rc = cli_fail(a.cmd, "calibrate", st); goto out; }
        cli_machine_key((int)threads, cal.machine, sizeof cal.machine);
        char path[4096];
        cli_calib_path(cache_dir, m, (int)threads, path, sizeof path);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) {   /* mkdir -p of the directory, private */
            *slash = 0;
            for (char *q = dir + 1; *q; q++)
                if (*q == '/') { *q = 0; mkdir(dir, 0700); *q = '/'; }
            mkdir(dir, 0700);
        }
        printf("| size | prefill ms | ms/token | recompute ms | ms/token |\n|------|------------|----------|--------------|----------|\n");
        for (int32_t i = 0; i < cal.n_points; i++)
            printf("| %4d | %10.2f | %8.3f | %12.2f | %8.3f |\n", cal.sizes[i], cal.prefill_ms[i],
                   cal.prefill_ms[i] / cal.sizes[i], cal.recompute_ms[i], cal.recompute_ms[i] / cal.sizes[i]);
        printf("shapes: L_P = %d (%.2f ms per call), L_S = %d (%.2f ms per call), r = %.2f\n", cal.cfg.L_P,
               cal.cfg.lat_P_ms, cal.cfg.L_S, cal.cfg.lat_S_ms, cal.cfg.r);
        if ((st = rp_calib_save(&cal, path)) != RP_OK) { rc = cli_fail(a.cmd, "save calibration", st); goto out; }
        printf("saved %s\n", path);
        if (!segments && !text) { rc = 0; goto out; }
    }
    const bool calibrated = calibrate || cli_apply_calib(e, m, cache_dir, (int)threads);
    if (!calibrate && calibrated) fprintf(stderr, "using the calibration stored for this model and machine\n");
    else if (!calibrated) {
        const rp_static_shapes sh = cli_static_shapes(&rp_reuse_get_params(e)->static_cfg);
        cli_calib_warn(a.cmd, &sh, model_path, cache_dir, (int)threads);
    }
    if (cache_dir) {   /* a reader of the store: lookups hit flash, nothing is written */
        rp_store_params stp = rp_store_default_params();
        stp.read_only = true;
        rp_store *store = NULL;
        rp_status cs = rp_store_open(cache_dir, &stp, &store);
        if (cs == RP_OK) cs = rp_chunk_cache_attach_store(rp_reuse_cache(e), store, rp_reuse_salt(e), m->name, NULL);
        if (cs != RP_OK) fprintf(stderr, "reprise plan: cache ignored: %s\n", rp_last_error());
        else fprintf(stderr, "chunk cache: store %s (read-only)\n", cache_dir);
    }
    if (!cli_prompt_build(a.cmd, m, text, segments, separator, &pr)) goto out;
    const rp_token *ptoks = rp_prompt_tokens(pr);
    rp_reuse_analysis an;
    if ((st = rp_reuse_analyze(e, ptoks, rp_prompt_n_tokens(pr), rp_prompt_bounds(pr), rp_prompt_n_bounds(pr), &an)) != RP_OK) {
        rc = cli_fail(a.cmd, "analyze", st);
        goto out;
    }
    printf("prompt: %d tokens in %d chunks (%d caller segments), mode %s, r = %.2f, check layer %d, KV %s\n\n",
           an.n_tokens, an.n_spans, rp_prompt_n_segments(pr), rp_reuse_mode_name((rp_reuse_mode)mode), ratio,
           rp.blend.check_layer, rp_type_get_traits(kv_type)->name);
    printf("chunks:\n");
    char pv[64];
    for (int32_t i = 0; i < an.n_spans; i++) {
        const rp_chunk_span *sp = &an.spans[i];
        /* exact chunks only ever hang off exact ones, so the exact part of the prefix is its head [0, n_prefix_exact) */
        const int32_t end = sp->begin + sp->len, px = an.stats.n_prefix_exact;
        const char *what;
        if (end <= an.n_prefix) what = end <= px ? "prefix (exact)" : sp->begin >= px ? "prefix (approx.)" : "prefix (part exact)";
        else if (sp->begin < an.n_prefix) what = px > sp->begin ? "partial prefix (exact)" : "partial prefix (approx.)";
        else what = an.tok_kind[sp->begin] == RP_ROW_REUSE ? "reused (re-rotated)" : "new";
        preview(m->tok, ptoks + sp->begin, sp->len < 24 ? sp->len : 24, pv, sizeof pv);
        printf("  %3d  [%5d, %5d)  %4d tokens  %016llx  %-20s \"%s\"\n", i, sp->begin, sp->begin + sp->len, sp->len,
               (unsigned long long)sp->hash, what, pv);
    }
    printf("\nsegments:\n");
    for (int32_t i = 0; i < an.n_segs; i++)
        printf("  %3d  %-6s [%5d, %5d)  %d tokens\n", i, kind_name(an.segs[i].kind), an.segs[i].begin,
               an.segs[i].begin + an.segs[i].len, an.segs[i].len);
    printf("\nreuse: %d prefix tokens (%d exact, %d approximate: written by an earlier blend / full run at r < 1), "
           "%d non-prefix tokens re-rotated, %d new tokens\n",
           an.stats.n_prefix, an.stats.n_prefix_exact, an.stats.n_prefix - an.stats.n_prefix_exact, an.stats.n_nonprefix,
           an.stats.n_new);
    if (mode == RP_REUSE_BLEND)
        printf("dynamic blend recomputes %d of the %d non-prefix reused tokens past the check layer, plus every new\n"
               "token and the final one; layers 0..%d run for all %d non-prefix tokens\n",
               an.n_recompute_dynamic, an.stats.n_nonprefix, rp.blend.check_layer, an.n_tokens - an.stats.n_prefix);
    const rp_static_cfg *cfg = &rp_reuse_get_params(e)->static_cfg;
    print_calls("static plan, DP scheduler", an.dp_calls, an.n_dp_calls, an.dp_ms, cfg, calibrated);
    print_calls("static plan, naive (one call type per segment)", an.naive_calls, an.n_naive_calls, an.naive_ms, cfg,
                calibrated);
    if (show_tokens && !show_selection(e, m, pr, &an, (int)threads, (rp_type)kv_type)) goto out;
    rc = 0;
out:
    rp_prompt_free(pr);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    rp_reuse_free(e);
    rp_model_free(m);
    return rc;
}
