/* cmd_run.c — `reprise run`: one prompt in, generated text on stdout, timings on stderr (over the public API). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "cli.h"
#include "gen_args.h"
#include "progress.h"
#include "prompt.h"
#include "reprise.h"

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
           "      --cpu LEVEL         force a kernel level (default: best found): scalar, avx2,\n"
           "                          avx512, amx on x86-64; neon, dotprod, i8mm, sve2, sme on aarch64\n"
           "%s%s"
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
           "      --embed-model F     with --cache-dir: embed every chunk stored, and the prompt's new text, with\n"
           "                          the embedding model F (GGUF), so the sub-chunk search also proposes the\n"
           "                          nearest stored chunks (the words of each chunk are indexed without it too)\n"
           "      --embed-dim N       components of each embedding kept (default 256; 0: all)\n"
           "      --no-cache-terms    do not index the words of stored chunks (an ablation)\n"
           "      --grammar-file F    constrain the output to the GBNF grammar in F (llama.cpp's format)\n"
           "      --json-schema-file F  constrain the output to the JSON Schema in F\n"
           "      --cache-disk GB     flash budget of --cache-dir (default 0 = unlimited)\n"
           "The last stderr line is `stats: {json}` (prompt, reused prefix (exact / approximate) / non-prefix,\n"
           "recomputed, failed loads, TTFT ms; with --static also \"calibrated\" and the plan's predicted\n"
           "\"plan_ms\", null when it would be a placeholder).\n",
           cli_sampling_help, cli_gen_help, cli_gpu_help);
}

/* Streams the generated text to stdout as it becomes printable. */
static bool print_piece(void *user, rp_token tok, const char *text, size_t len) {
    (void)user;
    (void)tok;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return true;
}

int cmd_run(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "run"};
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    const char *segments = NULL, *separator = NULL, *reuse_mode = "blend", *cache_dir = NULL, *embed_model = NULL;
    double ratio = 0.25;
    long check_layer = 1, cache_mb = 512, embed_dim = 256;
    int select = RP_SELECT_HYBRID;
    double cache_disk_gb = 0;
    bool static_mode = false, naive = false, cache_terms = true;
    long threads = 2, n_ctx = 0, n_batch = 512;
    cli_gen g = cli_gen_defaults(128);
    cli_gpu gpu = cli_gpu_defaults();
    const char *grammar_file = NULL, *schema_file = NULL;
    rp_grammar *gram = NULL;
    rp_grammar_vocab *gvocab = NULL;
    rp_grammar_state *gstate = NULL;
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_is(&a, "-h", "--help")) { run_usage(); return 0; }
        else if ((r = cli_gen_arg(&a, &g)) != 0) { if (r < 0) return 2; }
        else if ((r = cli_gpu_arg(&a, &gpu)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "-p", "--prompt")) { if (!cli_str(&a, &prompt)) return 2; }
        else if (cli_is(&a, "-f", "--file")) { if (!cli_str(&a, &prompt_file)) return 2; }
        else if (cli_is(&a, "--grammar-file", NULL)) { if (!cli_str(&a, &grammar_file)) return 2; }
        else if (cli_is(&a, "--json-schema-file", NULL)) { if (!cli_str(&a, &schema_file)) return 2; }
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
        else if (cli_is(&a, "--embed-model", NULL)) { if (!cli_str(&a, &embed_model)) return 2; }
        else if (cli_is(&a, "--embed-dim", NULL)) { if (!cli_int(&a, 0, 65536, &embed_dim)) return 2; }
        else if (cli_is(&a, "--no-cache-terms", NULL)) cache_terms = false;
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
    const int mode = rp_reuse_mode_parse(reuse_mode);
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
    rp_prompt *pr = NULL;
    rp_engine *e = NULL;
    rp_seq *s = NULL;
    double t0 = cli_now();
    rp_model_params mparams = rp_model_default_params();
    mparams.n_threads = (int)threads;
    cli_gpu_params(&gpu, kv_type, &mparams);
    rp_status st = cli_model_load(model_path, mparams, &m);
    if (st != RP_OK) { rc = cli_fail("run", model_path, st); goto done; }
    cli_gpu_note("run", m, &gpu);
    const rp_model_desc md = rp_model_describe(m);
    if (!md.has_tokenizer) { fprintf(stderr, "reprise run: '%s' has no tokenizer\n", model_path); goto done; }
    if (g.chat_template && cli_gen_chat_template("run", m, &g)) goto done;   /* checked, as chat and serve would */
    double t_load = cli_now() - t0;

    if (!cli_prompt_build("run", m, prompt, segments, separator, &pr)) goto done;
    const int32_t ntok = rp_prompt_n_tokens(pr);
    const long n_train = md.n_ctx_train > 0 ? md.n_ctx_train : 1L << 24;
    if (n_ctx > n_train) {
        fprintf(stderr, "reprise run: note: -c %ld is more than the model's training context; using %ld\n", n_ctx, n_train);
        n_ctx = n_train;
    }
    const long n_predict = g.n_predict < 0 ? 1L << 30 : g.n_predict;   /* -1: until end-of-generation or a full context */
    if (n_ctx == 0) n_ctx = g.n_predict < 0 || (long)ntok + n_predict > n_train ? n_train : (long)ntok + n_predict;
    if ((long)ntok >= n_ctx) {
        fprintf(stderr, "reprise run: prompt is %d tokens, context is %ld (raise -c)\n", ntok, n_ctx);
        goto done;
    }
    cli_kv_note("run", m, n_ctx, kv_type, n_batch, g.swa_full);   /* the KV memory this context needs, before it is allocated */
    rp_engine_params ep = rp_engine_default_params();
    ep.n_threads = (int)threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.n_batch = (int32_t)n_batch;
    ep.kv_type = (rp_kv_type)kv_type;
    ep.swa_full = g.swa_full;
    ep.reuse = (rp_reuse_mode)mode;
    ep.recompute_ratio = (float)ratio;
    ep.select = (rp_select_kind)select;
    ep.check_layer = (int32_t)check_layer;
    ep.static_mode = static_mode;
    ep.naive_schedule = naive;
    ep.cache_ram_bytes = (size_t)cache_mb << 20;
    ep.cache_dir = cache_dir;   /* the chunk cache becomes the RAM pool over the flash store in cache_dir */
    ep.cache_disk_bytes = (uint64_t)(cache_disk_gb * 1073741824.0);
    ep.cache_dir_optional = true;   /* a store that cannot be used: said below, and the run goes on in RAM */
    ep.embed_model = embed_model;   /* the store's semantic index: chunk and query embeddings */
    ep.embed_dim = (int32_t)embed_dim;
    ep.cache_terms = cache_terms;
    if ((st = rp_engine_create(m, &ep, &e)) != RP_OK) { rc = cli_fail("run", "engine", st); goto done; }
    rp_static_shapes sh;
    rp_engine_static_shapes(e, &sh);
    if (sh.calibrated)
        fprintf(stderr, "reprise run: static shapes from the stored calibration (L_P %d, L_S %d)\n", sh.L_P, sh.L_S);
    else if (static_mode)
        cli_calib_warn("run", &sh, model_path, cache_dir, (int)threads);
    rp_engine_stats es;
    rp_engine_stats_get(e, &es);
    const bool has_store = es.has_store;
    if (cache_dir && !has_store) fprintf(stderr, "reprise run: --cache-dir ignored: %s\n", rp_engine_notice(e));
    else if (rp_engine_notice(e)[0]) fprintf(stderr, "reprise run: %s\n", rp_engine_notice(e));
    if ((st = rp_seq_create(e, &s)) != RP_OK) { rc = cli_fail("run", "session", st); goto done; }

    rp_gen_opts o = rp_gen_default_opts();
    o.sampling = g.sp;
    o.max_tokens = g.n_predict < 0 ? -1 : (int32_t)n_predict;
    o.ignore_eos = g.ignore_eos;
    o.on_token = print_piece;
    if (grammar_file || schema_file) {   /* constrained decoding: the output follows the grammar */
        char *text = cli_read_file("run", grammar_file ? grammar_file : schema_file, NULL);
        if (!text) { rc = 1; goto done; }
        st = grammar_file ? rp_grammar_parse(text, NULL, &gram) : rp_grammar_from_json_schema(text, &gram);
        free(text);
        if (st == RP_OK) st = rp_grammar_vocab_new(m, &gvocab);
        if (st == RP_OK) st = rp_grammar_state_new(gram, gvocab, &gstate);
        if (st != RP_OK) { rc = cli_fail("run", grammar_file ? "--grammar-file" : "--json-schema-file", st); goto done; }
        o.on_logits = rp_grammar_on_logits;
        o.logits_user = gstate;
    }
    rp_gen_stats gs;
    if ((st = rp_seq_prefill(s, pr, &o, &gs)) != RP_OK) { rc = cli_fail("run", "prompt", st); goto done; }
    /* the prompt's chunks are cached after the first token, off the TTFT path */
    if ((st = rp_seq_generate(s, &o, NULL, 0, NULL, &gs)) != RP_OK) { rc = cli_fail("run", "decode", st); goto done; }
    if (gs.commit_status != RP_OK) fprintf(stderr, "reprise run: caching failed: %s\n", rp_last_error());
    if (gs.stop == RP_STOP_CONTEXT) fprintf(stderr, "\nreprise run: context full\n");
    fputc('\n', stdout);
    const double t_prompt = gs.prefill_ms * 1e-3, t_gen = gs.decode_ms * 1e-3;
    fprintf(stderr, "load: %.1f ms\n", t_load * 1e3);
    fprintf(stderr, "prompt: %d tokens, %.1f ms, %.2f tok/s\n", ntok, t_prompt * 1e3, ntok / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generated: %d tokens, %.1f ms, %.2f tok/s\n", gs.generated, t_gen * 1e3,
            gs.generated / (t_gen > 0 ? t_gen : 1e-9));
    (void)rp_seq_commit(s);   /* nothing generated (-n 0): cache the prompt now */
    if (has_store) {   /* clean shutdown: everything new reaches flash */
        if (rp_engine_flush(e) != RP_OK) fprintf(stderr, "reprise run: saving the cache failed: %s\n", rp_last_error());
        rp_engine_stats_get(e, &es);
        fprintf(stderr, "cache: %llu chunks in RAM (%.1f MiB), flash hits %llu, prefetched %llu (%llu used), written %llu, "
                        "write failures %llu, store %.1f MiB, failed loads %llu%s\n",
                (unsigned long long)es.cache_chunks, es.cache_bytes / 1048576.0, (unsigned long long)es.flash_hits,
                (unsigned long long)es.prefetched, (unsigned long long)es.prefetch_used, (unsigned long long)es.written,
                (unsigned long long)es.write_failures, es.store_bytes / 1048576.0, (unsigned long long)es.load_failures,
                es.store_damaged ? " (the database is damaged: read-only now, set aside at the next start)" : "");
    }
    char js[2048];
    rp_gen_stats_json(&gs, js, sizeof js);
    fprintf(stderr, "stats: %s\n", js);
    rc = 0;
done:
    rp_grammar_state_free(gstate);
    rp_grammar_vocab_free(gvocab);
    rp_grammar_free(gram);
    rp_seq_free(s);
    rp_engine_free(e);
    rp_prompt_free(pr);
    rp_model_free(m);
    free(file_text);
    return rc;
}
