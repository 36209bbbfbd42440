/* cmd_run.c — `reprise run`: one prompt in, generated text on stdout, timings on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "cli.h"
#include "progress.h"
#include "gen_args.h"
#include "kernels/types.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "prompt.h"
#include "reuse/engine.h"
#include "store/store.h"
#include <errno.h>
#include <sys/stat.h>
#include "tokenizer/tokenizer.h"

static void run_usage(void) {
    printf("usage: reprise run -m MODEL.gguf (-p PROMPT | -f PROMPT_FILE) [options]\n"
           "  -m, --model PATH        GGUF model\n"
           "  -p, --prompt TEXT       prompt text (special tokens like <|im_start|> are parsed)\n"
           "  -f, --file PATH         read the prompt from a file\n"
           "  -n, --n-predict N       tokens to generate (default 128; -1 = until end-of-generation or a full context)\n"
           "  -t, --threads N         compute threads (default 2)\n"
           "  -c, --ctx-size N        context size in tokens (default: prompt + n; at most the model's training\n"
           "                          context: a larger -c is lowered to it, with a note)\n"
           "  -b, --batch-size N      max tokens per forward call (default 512)\n"
           "%s"
           "      --cpu LEVEL         force a kernel level: scalar, avx2, avx512, amx (default: best found)\n"
           "%s"
           "  (-cnv / -sys: a conversation is `reprise chat`, which takes the same options)\n"
           "KV reuse:\n"
           "      --segments FILE     JSON array of strings: explicit chunk boundaries (documents, messages);\n"
           "                          the prompt is their concatenation, followed by -p/-f text if given\n"
           "      --separator TEXT    also cut chunks after every occurrence of TEXT\n"
           "      --reuse MODE        none | prefix | full | blend (default blend)\n"
           "      --recompute-ratio R share of reused tokens recomputed by blend (default 0.25)\n"
           "      --check-layer L     layer where KV deviation is measured (default 1)\n"
           "      --select S          which reused tokens blend recomputes: hybrid (default), dev (CacheBlend's\n"
           "                          largest KV deviation) or attn (deviation x attention paid by the last tokens)\n"
           "      --static            static-shape execution (L_P prefill / L_S recompute calls, DP schedule;\n"
           "                          with --reuse full / prefix: new tokens in padded L_P calls). L_P / L_S and\n"
           "                          the plan's latencies come from `reprise plan --calibrate` for this model,\n"
           "                          machine and -t (looked up in --cache-dir, else ~/.cache/reprise); without\n"
           "                          one the shapes are defaults, stderr says so and plan_ms is null\n"
           "      --naive-schedule    with --static: one call type per segment instead of the DP\n"
           "      --cache-dir DIR     keep the chunk cache in DIR between runs (SQLite store on flash; see\n"
           "                          `reprise cache`); the RAM cache becomes its pool\n"
           "      --cache-ram MB      RAM budget of the chunk cache (default 512)\n"
           "      --cache-disk GB     flash budget of --cache-dir (default 0 = unlimited)\n"
           "The last stderr line is `stats: {json}` (prompt, reused prefix (exact / approximate) / non-prefix,\n"
           "recomputed, failed loads, TTFT ms; with --static also \"calibrated\" and the plan's predicted\n"
           "\"plan_ms\", null when it would be a placeholder).\n",
           cli_sampling_help, cli_gen_help);
}

int cmd_run(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "run"};
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    const char *segments = NULL, *separator = NULL, *reuse_mode = "blend", *cache_dir = NULL;
    double ratio = 0.25;
    long check_layer = 1, cache_mb = 512;
    int select = RP_SELECT_HYBRID;
    double cache_disk_gb = 0;
    bool static_mode = false, naive = false;
    long threads = 2, n_ctx = 0, n_batch = 512;
    cli_gen g = cli_gen_defaults(128);
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_is(&a, "-h", "--help")) { run_usage(); return 0; }
        else if ((r = cli_gen_arg(&a, &g)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "-p", "--prompt")) { if (!cli_str(&a, &prompt)) return 2; }
        else if (cli_is(&a, "-f", "--file")) { if (!cli_str(&a, &prompt_file)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-c", "--ctx-size")) { if (!cli_int(&a, 1, 1 << 24, &n_ctx)) return 2; }
        else if (cli_is(&a, "-b", "--batch-size")) { if (!cli_int(&a, 1, 65536, &n_batch)) return 2; }
        else if (cli_is(&a, "--segments", NULL)) { if (!cli_str(&a, &segments)) return 2; }
        else if (cli_is(&a, "--separator", NULL)) { if (!cli_str(&a, &separator)) return 2; }
        else if (cli_is(&a, "--reuse", NULL)) { if (!cli_str(&a, &reuse_mode)) return 2; }
        else if (cli_is(&a, "--recompute-ratio", NULL)) { if (!cli_float(&a, 0, 1, &ratio)) return 2; }
        else if (cli_is(&a, "--check-layer", NULL)) { if (!cli_int(&a, 0, 1024, &check_layer)) return 2; }
        else if (cli_is(&a, "--select", NULL)) { if (!cli_select(&a, &select)) return 2; }
        else if (cli_is(&a, "--static", NULL)) static_mode = true;
        else if (cli_is(&a, "--naive-schedule", NULL)) naive = true;
        else if (cli_is(&a, "--cache-dir", NULL)) { if (!cli_str(&a, &cache_dir)) return 2; }
        else if (cli_is(&a, "--cache-ram", NULL)) { if (!cli_int(&a, 0, 1 << 20, &cache_mb)) return 2; }
        else if (cli_is(&a, "--cache-disk", NULL)) { if (!cli_float(&a, 0, 1 << 20, &cache_disk_gb)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { const char *v; if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "-cnv", "--conversation") || cli_is(&a, "-sys", "--system-prompt") || cli_is(&a, "-i", "--interactive")) {
            fprintf(stderr, "reprise run: %s is a conversation option: use `reprise chat -m MODEL` (the same sampling options)\n",
                    argv[a.i]);
            return 2;
        }
        else return cli_unknown(&a);
    }
    if (!model_path) { fprintf(stderr, "reprise run: -m MODEL.gguf is required\n"); return 2; }
    if (!prompt && !prompt_file && !segments) {
        fprintf(stderr, "reprise run: a prompt is required (-p TEXT, -f FILE or --segments FILE)\n");
        return 2;
    }
    int mode = rp_reuse_mode_parse(reuse_mode);
    if (mode < 0) { fprintf(stderr, "reprise run: --reuse must be none, prefix, full or blend, got '%s'\n", reuse_mode); return 2; }
    const int kv_type = cli_gen_kv_type(a.cmd, &g);
    if (kv_type < 0) return 2;
    char *file_text = NULL;
    if (prompt_file) {
        if (!(file_text = cli_read_file("run", prompt_file, NULL))) return 1;
        prompt = file_text;
    }

    int rc = 1;
    rp_model *m = NULL;
    rp_ctx *ctx = NULL;
    rp_session *s = NULL;
    rp_token *toks = NULL;
    rp_reuse *reuse = NULL;
    double t0 = cli_now();
    rp_model_params mparams = rp_model_default_params();
    mparams.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mparams, &m);
    if (st != RP_OK) { rc = cli_fail("run", model_path, st); goto done; }
    if (!m->tok) { fprintf(stderr, "reprise run: '%s' has no tokenizer\n", model_path); goto done; }
    double t_load = cli_now() - t0;

    cli_prompt cp_in;
    if (!cli_prompt_build("run", m->tok, prompt, segments, separator, &cp_in)) goto done;
    toks = cp_in.toks;   /* freed below via cli_prompt_free */
    size_t ntok = (size_t)cp_in.n;

    rp_reuse_params rpp = rp_reuse_default_params();
    rpp.mode = (rp_reuse_mode)mode;
    rpp.ratio = (float)ratio;
    rpp.blend.check_layer = (int32_t)check_layer;
    rpp.blend.select = (rp_select_kind)select;
    rpp.static_mode = static_mode;
    rpp.naive_schedule = naive;
    rpp.cache_bytes = (size_t)cache_mb << 20;
    const bool calibrated = static_mode && cli_load_calib(m, cache_dir, (int)threads, &rpp.static_cfg);
    long pad = static_mode ? (rpp.static_cfg.L_S > rpp.static_cfg.L_P ? rpp.static_cfg.L_S : rpp.static_cfg.L_P) : 0;
    const long n_train = m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 1L << 24;
    if (n_ctx > n_train) {
        fprintf(stderr, "reprise run: note: -c %ld is more than the model's training context; using %ld\n", n_ctx, n_train);
        n_ctx = n_train;
    }
    const long n_predict = g.n_predict < 0 ? 1L << 30 : g.n_predict;   /* -1: until end-of-generation or a full context */
    if (n_ctx == 0) n_ctx = g.n_predict < 0 || (long)ntok + n_predict > n_train ? n_train : (long)ntok + n_predict;
    if ((long)ntok >= n_ctx) {
        fprintf(stderr, "reprise run: prompt is %zu tokens, context is %ld (raise -c)\n", ntok, n_ctx);
        goto done_prompt;
    }
    /* static mode's padding rows sit in cells past the context: scratch that is never attended by real rows */
    const long n_cells = n_ctx + pad;
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_threads = (int)threads;
    cp.n_batch = (int32_t)n_batch;
    if (static_mode && cp.n_batch < rpp.static_cfg.L_S) cp.n_batch = rpp.static_cfg.L_S;
    cp.n_outputs = 1;
    cp.n_ctx_max = (int32_t)n_cells;
    if ((st = rp_ctx_create(m, cp, &ctx)) != RP_OK) { rc = cli_fail("run", "context", st); goto done_prompt; }
    rp_session_params spp = rp_session_default_params();
    spp.n_ctx = (int32_t)n_cells;
    spp.kv_type = (rp_type)kv_type;
    spp.sampler = g.sp;
    if ((st = rp_session_create(ctx, spp, &s)) != RP_OK) { rc = cli_fail("run", "session", st); goto done_prompt; }
    if ((st = rp_reuse_create(m, (rp_type)kv_type, (int32_t)n_ctx, rpp, &reuse)) != RP_OK) {
        rc = cli_fail("run", "reuse engine", st);
        goto done_prompt;
    }
    if (calibrated)
        fprintf(stderr, "reprise run: static shapes from the stored calibration (L_P %d, L_S %d)\n",
                rp_reuse_get_params(reuse)->static_cfg.L_P, rp_reuse_get_params(reuse)->static_cfg.L_S);
    else if (static_mode)
        cli_calib_warn("run", &rp_reuse_get_params(reuse)->static_cfg, model_path, cache_dir, (int)threads);
    rp_chunk_cache *pool = rp_reuse_cache(reuse);
    if (cache_dir) {   /* the chunk cache becomes the RAM pool over the flash store in cache_dir */
        rp_store_params stp = rp_store_default_params();
        rp_store *store = NULL;
        rp_pool_params pp = rp_pool_default_params();
        pp.disk_budget = (uint64_t)(cache_disk_gb * 1073741824.0);
        pp.async_load = true;   /* flash reads overlap compute (the engine waits per layer) */
        st = rp_store_open(cache_dir, &stp, &store);
        if (st == RP_OK && rp_store_notice(store)[0]) fprintf(stderr, "reprise run: %s\n", rp_store_notice(store));
        if (st != RP_OK || (st = rp_chunk_cache_attach_store(pool, store, rp_reuse_salt(reuse), m->name, &pp)) != RP_OK) {
            fprintf(stderr, "reprise run: --cache-dir ignored: %s\n", rp_last_error());
        }
    }
    float *first_logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    if (!first_logits) goto done_prompt;
    rp_reuse_stats rst;
    double t1 = cli_now();
    st = rp_reuse_prefill(reuse, ctx, rp_session_kv(s), cp_in.toks, cp_in.n, cp_in.bounds, cp_in.n_bounds, first_logits, &rst);
    if (st == RP_OK) st = rp_session_adopt(s, cp_in.toks, cp_in.n, first_logits);
    free(first_logits);
    if (st != RP_OK) { rc = cli_fail("run", "prompt", st); goto done_prompt; }
    double t_prompt = cli_now() - t1;
    bool committed = false;

    rp_detok dt;
    rp_detok_init(&dt, m->tok, false);
    dt.at_start = false;   /* a continuation keeps its leading space */
    char out[4096];   /* >= rp_detok_bound() for every vocabulary we load (longest piece 128 bytes) */
    long n_gen = 0;
    double t2 = cli_now();
    while (n_gen < n_predict) {
        rp_token t = rp_session_sample(s);
        n_gen++;
        if (!committed) {   /* cache this prompt's chunks after the first token, off the TTFT path */
            if (rp_reuse_commit(reuse, rp_session_kv(s)) != RP_OK) fprintf(stderr, "reprise run: caching failed: %s\n", rp_last_error());
            committed = true;
        }
        if (!g.ignore_eos && rp_tokenizer_is_eog(m->tok, t)) break;
        int w = rp_detok_push(&dt, t, out, sizeof out);
        if (w > 0) { fwrite(out, 1, (size_t)w, stdout); fflush(stdout); }
        if (n_gen >= n_predict) break;
        if (rp_session_n_past(s) >= n_ctx) { fprintf(stderr, "\nreprise run: context full\n"); break; }
        if ((st = rp_session_feed(s, &t, 1)) != RP_OK) { rc = cli_fail("run", "decode", st); goto done; }
    }
    int w = rp_detok_flush(&dt, out, sizeof out);
    if (w > 0) fwrite(out, 1, (size_t)w, stdout);
    fputc('\n', stdout);
    double t_gen = cli_now() - t2;
    fprintf(stderr, "load: %.1f ms\n", t_load * 1e3);
    fprintf(stderr, "prompt: %zu tokens, %.1f ms, %.2f tok/s\n", ntok, t_prompt * 1e3, ntok / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generated: %ld tokens, %.1f ms, %.2f tok/s\n", n_gen, t_gen * 1e3, n_gen / (t_gen > 0 ? t_gen : 1e-9));
    if (!committed) rp_reuse_commit(reuse, rp_session_kv(s));
    if (rp_chunk_cache_has_store(pool)) {   /* clean shutdown: everything new reaches flash */
        if (rp_chunk_cache_flush(pool) != RP_OK) fprintf(stderr, "reprise run: saving the cache failed: %s\n", rp_last_error());
        rp_cache_stats cs = rp_chunk_cache_stats(pool);
        fprintf(stderr, "cache: %llu chunks in RAM (%.1f MiB), flash hits %llu, prefetched %llu (%llu used), written %llu, "
                        "write failures %llu, store %.1f MiB, failed loads %llu%s\n",
                (unsigned long long)cs.n_chunks, cs.bytes / 1048576.0, (unsigned long long)cs.flash_hits,
                (unsigned long long)cs.prefetched, (unsigned long long)cs.prefetch_used, (unsigned long long)cs.written,
                (unsigned long long)cs.write_failures, cs.disk_bytes / 1048576.0, (unsigned long long)cs.load_failures,
                cs.store_damaged ? " (the database is damaged: read-only now, set aside at the next start)" : "");
    }
    char js[2048];
    cli_stats_json(&rst, static_mode, calibrated, js, sizeof js);
    fprintf(stderr, "stats: %s\n", js);
    rc = 0;
done_prompt:
    cli_prompt_free(&cp_in);
    toks = NULL;
done:
    rp_reuse_free(reuse);
    rp_session_free(s);
    rp_ctx_free(ctx);
    rp_model_free(m);
    free(toks);
    free(file_text);
    return rc;
}
