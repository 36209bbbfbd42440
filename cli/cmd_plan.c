/* cmd_plan.c — `reprise plan`: which tokens a prompt reuses or recomputes, and the static calls chosen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "cli.h"
#include "progress.h"
#include "prompt.h"
#include "reprise.h"

static const char *kind_name(rp_plan_kind k) {
    return k == RP_PLAN_PREFIX ? "prefix" : k == RP_PLAN_REUSE ? "reuse" : "new";
}

/* One token's text for a listing: control tokens rendered, newlines and tabs as spaces; NUL-terminated. */
static void piece_of(const rp_model *m, rp_token t, char *out, int32_t cap) {
    int32_t k = rp_token_to_piece(m, t, true, out, cap - 1);
    if (k > cap - 1) k = cap - 1;
    for (int32_t j = 0; j < k; j++)
        if (out[j] == '\n' || out[j] == '\t') out[j] = ' ';
    out[k] = 0;
}

static void preview(const rp_model *m, const rp_token *t, int32_t n, char *out, size_t cap) {
    size_t w = 0;
    char piece[256];
    for (int32_t i = 0; i < n && w + 1 < cap; i++) {
        piece_of(m, t[i], piece, sizeof piece);
        for (const char *q = piece; *q && w + 1 < cap; q++) out[w++] = *q;
    }
    out[w] = 0;
    if (w >= 40) strcpy(out + 37, "...");
}

/* `calibrated`: the latencies are measured ones, so the plan's total is a predicted time; otherwise it is
 * a cost in placeholder units (the default per-call latencies), printed as such. */
static void print_calls(const char *title, const rp_plan_call *calls, int32_t n, double cost, const rp_static_shapes *sh) {
    int32_t np = 0, nr = 0;
    for (int32_t i = 0; i < n; i++) {
        if (calls[i].recompute) nr++;
        else np++;
    }
    printf("\n%s: %d calls (%d prefill x L_P=%d, %d recompute x L_S=%d), ", title, n, np, sh->L_P, nr, sh->L_S);
    if (sh->calibrated) printf("predicted %.2f ms\n", cost);
    else printf("uncalibrated: cost %.2f in placeholder units (%.1f per prefill, %.1f per recompute call), not ms\n", cost,
                sh->lat_P_ms, sh->lat_S_ms);
    for (int32_t i = 0; i < n && i < 64; i++)
        printf("  %3d  %-9s tokens [%5d, %5d)  %4d new  %4d reused  %4d padding\n", i,
               calls[i].recompute ? "recompute" : "prefill", calls[i].begin, calls[i].end, calls[i].n_new,
               calls[i].n_reuse, calls[i].padding);
    if (n > 64) printf("  ... %d more\n", n - 64);
}

/* --show-tokens: runs the blend prefill (the engine's placements, layers 0..check for every non-prefix token,
 * then the selected rows; dynamic shapes, as `reprise run`) with the selection marked, and lists per chunk the
 * reused tokens recomputed. Nothing is cached. */
static bool show_selection(rp_engine *e, const rp_model *m, const rp_prompt *pr, const rp_plan_desc *pd, int mode,
                           int32_t check_layer) {
    if (mode != RP_REUSE_BLEND) {
        fprintf(stderr, "reprise plan: --show-tokens needs --reuse blend\n");
        return false;
    }
    bool ok = false;
    rp_seq *s = NULL;
    const rp_token *toks = rp_prompt_tokens(pr);
    const int32_t n = rp_prompt_n_tokens(pr);
    uint8_t *mark = calloc((size_t)n, 1);
    rp_gen_opts o = rp_gen_default_opts();
    o.static_mode = 0;
    o.persist = false;
    o.recompute_marks = mark;
    rp_gen_stats rs;
    rp_status st;
    if (!mark) { fprintf(stderr, "reprise plan: out of memory\n"); goto out; }
    if ((st = rp_seq_create(e, &s)) != RP_OK) { cli_fail("plan", "show-tokens setup", st); goto out; }
    if ((st = rp_seq_prefill(s, pr, &o, &rs)) != RP_OK) { cli_fail("plan", "show-tokens prefill", st); goto out; }
    printf("\nrecomputed reused tokens (dynamic blend, check layer %d): %d of %d\n", check_layer, rs.recomputed,
           rs.reused_nonprefix);
    char piece[256];
    for (int32_t i = 0; i < pd->n_chunks; i++) {
        const rp_plan_chunk *c = &pd->chunks[i];
        int32_t n_sel = 0, n_re = 0;
        for (int32_t t = c->begin; t < c->begin + c->len; t++) {
            n_sel += mark[t];
            n_re += t >= rs.reused_prefix && pd->token_kind[t] == RP_PLAN_REUSE;
        }
        if (n_re == 0) continue;
        printf("  chunk %3d  [%5d, %5d)  %4d of %4d:", i, c->begin, c->begin + c->len, n_sel, n_re);
        int32_t shown = 0;
        for (int32_t t = c->begin; t < c->begin + c->len && shown < 24; t++) {
            if (!mark[t]) continue;
            piece_of(m, toks[t], piece, sizeof piece);
            printf(" %d'%s'", t, piece);
            shown++;
        }
        printf("%s\n", n_sel > shown ? " ..." : "");
    }
    ok = true;
out:
    rp_seq_free(s);
    free(mark);
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
    const int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
        fprintf(stderr, "reprise plan: --kv-type must be f16, q8_0 or f32, got '%s'\n", kv_name);
        return 2;
    }
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    int rc = 1;
    rp_engine *e = NULL;
    rp_prompt *pr = NULL;
    rp_plan *pl = NULL;
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    ep.kv_type = (rp_kv_type)kv_type;
    ep.reuse = (rp_reuse_mode)mode;
    ep.recompute_ratio = (float)ratio;
    ep.check_layer = (int32_t)check_layer;
    ep.select = (rp_select_kind)select;
    if (calibrate) {
        const rp_calibrate_params cp = rp_calibrate_default_params();
        rp_calibration cal;
        fprintf(stderr, "calibrating %d sizes (prefill and selective-recompute calls)...\n", cp.n_sizes);
        if ((st = rp_calibrate(m, &ep, &cp, &cal)) != RP_OK) { rc = cli_fail(a.cmd, "calibrate", st); goto out; }
        printf("| size | prefill ms | ms/token | recompute ms | ms/token |\n|------|------------|----------|--------------|----------|\n");
        for (int32_t i = 0; i < cal.n_points; i++)
            printf("| %4d | %10.2f | %8.3f | %12.2f | %8.3f |\n", cal.sizes[i], cal.prefill_ms[i],
                   cal.prefill_ms[i] / cal.sizes[i], cal.recompute_ms[i], cal.recompute_ms[i] / cal.sizes[i]);
        printf("shapes: L_P = %d (%.2f ms per call), L_S = %d (%.2f ms per call), r = %.2f\n", cal.shapes.L_P,
               cal.shapes.lat_P_ms, cal.shapes.L_S, cal.shapes.lat_S_ms, cal.recompute_ratio);
        char path[4096];
        if ((st = rp_calibration_save(m, &cal, cache_dir, path, sizeof path)) != RP_OK) {
            rc = cli_fail(a.cmd, "save calibration", st);
            goto out;
        }
        printf("saved %s\n", path);
        if (!segments && !text) { rc = 0; goto out; }
    }
    /* a planning engine: static shapes (the stored calibration, when there is one) for the schedules; a reader of
     * the store in --cache-dir (lookups hit flash, nothing is written); a context as long as any prompt */
    ep.static_mode = true;
    ep.cache_dir = cache_dir;
    ep.cache_read_only = true;
    ep.cache_dir_optional = true;
    ep.n_ctx = 32768;
    ep.n_ctx_over_train = true;
    if ((st = rp_engine_create(m, &ep, &e)) != RP_OK) { rc = cli_fail(a.cmd, "engine", st); goto out; }
    rp_static_shapes sh;
    rp_engine_static_shapes(e, &sh);
    if (!calibrate && sh.calibrated) fprintf(stderr, "using the calibration stored for this model and machine\n");
    else if (!sh.calibrated) cli_calib_warn(a.cmd, &sh, model_path, cache_dir, (int)threads);
    if (cache_dir) {
        rp_engine_stats es;
        rp_engine_stats_get(e, &es);
        if (!es.has_store) fprintf(stderr, "reprise plan: cache ignored: %s\n", rp_engine_notice(e));
        else fprintf(stderr, "chunk cache: store %s (read-only)\n", cache_dir);
    }
    if (!cli_prompt_build(a.cmd, m, text, segments, separator, &pr)) goto out;
    if ((st = rp_engine_plan(e, pr, NULL, &pl)) != RP_OK) { rc = cli_fail(a.cmd, "analyze", st); goto out; }
    const rp_plan_desc pd = rp_plan_describe(pl);
    const rp_token *ptoks = rp_prompt_tokens(pr);
    printf("prompt: %d tokens in %d chunks (%d caller segments), mode %s, r = %.2f, check layer %d, KV %s\n\n",
           pd.n_tokens, pd.n_chunks, rp_prompt_n_segments(pr), rp_reuse_mode_name((rp_reuse_mode)mode), ratio,
           (int)check_layer, rp_kv_type_name((rp_kv_type)kv_type));
    printf("chunks:\n");
    char pv[64];
    for (int32_t i = 0; i < pd.n_chunks; i++) {
        const rp_plan_chunk *c = &pd.chunks[i];
        preview(m, ptoks + c->begin, c->len < 24 ? c->len : 24, pv, sizeof pv);
        printf("  %3d  [%5d, %5d)  %4d tokens  %016llx  %-20s \"%s\"\n", i, c->begin, c->begin + c->len, c->len,
               (unsigned long long)c->hash, rp_chunk_label_name(c->label), pv);
    }
    printf("\nsegments:\n");
    for (int32_t i = 0; i < pd.n_segments; i++)
        printf("  %3d  %-6s [%5d, %5d)  %d tokens\n", i, kind_name(pd.segments[i].kind), pd.segments[i].begin,
               pd.segments[i].begin + pd.segments[i].len, pd.segments[i].len);
    printf("\nreuse: %d prefix tokens (%d exact, %d approximate: written by an earlier blend / full run at r < 1), "
           "%d non-prefix tokens re-rotated, %d new tokens\n",
           pd.reused_prefix, pd.reused_prefix_exact, pd.reused_prefix - pd.reused_prefix_exact, pd.reused_nonprefix,
           pd.computed);
    if (mode == RP_REUSE_BLEND)
        printf("dynamic blend recomputes %d of the %d non-prefix reused tokens past the check layer, plus every new\n"
               "token and the final one; layers 0..%d run for all %d non-prefix tokens\n",
               pd.recompute_dynamic, pd.reused_nonprefix, (int)check_layer, pd.n_tokens - pd.reused_prefix);
    print_calls("static plan, DP scheduler", pd.dp_calls, pd.n_dp_calls, pd.dp_cost, &pd.shapes);
    print_calls("static plan, naive (one call type per segment)", pd.naive_calls, pd.n_naive_calls, pd.naive_cost,
                &pd.shapes);
    if (show_tokens && !show_selection(e, m, pr, &pd, mode, (int32_t)check_layer)) goto out;
    rc = 0;
out:
    rp_plan_free(pl);
    rp_prompt_free(pr);
    rp_engine_free(e);
    rp_model_free(m);
    return rc;
}
