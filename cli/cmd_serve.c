/* cmd_serve.c — `reprise serve`: the OpenAI-compatible HTTP server until SIGINT / SIGTERM (then a graceful drain). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "cli.h"
#include "gen_args.h"
#include "progress.h"

static void serve_usage(void) {
    printf("usage: reprise serve -m MODEL.gguf [options]\n"
           "OpenAI-compatible API: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
           "POST /tokenize, POST /detokenize, GET /props (llama-server's),\n"
           "GET /health, GET /metrics (Prometheus), DELETE /v1/sessions/ID. See docs/server.md.\n"
           "  -m, --model PATH        GGUF model\n"
           "      --draft PATH        draft model for speculative decoding (with --parallel > 1)\n"
           "      --chat-template T   a built-in (llama3, chatml, qwen3, llama2) or a Jinja file instead of the model's own\n"
           "                          tokenizer.chat_template (a template that fails is an error at start-up)\n"
           "      --host ADDR         bind address (default 127.0.0.1; 0.0.0.0 exposes the server)\n"
           "      --port N            TCP port (default 8080; 0 picks a free one)\n"
           "      --port-file PATH    write the port actually bound to PATH, once the model is loaded (connections are\n"
           "                          accepted before: /health answers 503 loading until then)\n"
           "      --api-key-file FILE API keys, one per line: NAME:KEY or KEY (# comments); the file must not be\n"
           "                          readable by group/others (chmod 600). Each request carries its key's identity:\n"
           "                          it sees only its own sessions, and with per-key namespaces its own cache\n"
           "      --grammar-file F    requests without a grammar / json_schema / response_format follow the GBNF in F\n"
           "      --api-key KEY       one key (named default); visible to other local users in the process list:\n"
           "                          prefer --api-key-file or the environment variable REPRISE_API_KEY (used when\n"
           "                          neither option is given). No option and no variable: no authentication.\n"
           "                          An empty key is an error, never \"no authentication\"\n"
           "      --cache-namespace M per-key | shared: whether a request may reuse KV cached for another API key\n"
           "                          (default: per-key with more than one key, so that cached_tokens never\n"
           "                          tells one client what another sent; shared with one key or none)\n"
           "      --key-sessions N    reprise_session sessions one API key may hold; over it, its own least recently\n"
           "                          used idle session is evicted, never another key's (default: --sessions / keys)\n"
           "      --key-kv-mb MB      KV one key's sessions may hold; over it, its older idle sessions are evicted\n"
           "                          (default 0: no limit)\n"
           "      --model-id NAME     model name reported by /v1/models (default: the file's base name)\n"
           "      --cors ORIGIN       let browser pages from ORIGIN call the API (CORS; repeatable or comma-separated,\n"
           "                          e.g. http://localhost:3000; * allows any origin). Default: none\n"
           "      --embeddings        answer POST /v1/embeddings (OpenAI's shape) and /embedding (llama-server's);\n"
           "                          without it they answer 501. Keeps one more KV cache of the context's size\n"
           "      --pooling P         their pooling: mean, cls, last or none (default: the model's <arch>.pooling_type,\n"
           "                          mean when it has none; none is refused by /v1/embeddings, as llama-server)\n"
           "  -c, --ctx-size N        context per sequence (default min(4096, the model's))\n"
           "  -t, --threads N         compute threads (default 2)\n"
           "      --parallel N|auto   sequences decoded together (1: serial; N > 1: the scheduler with continuous\n"
           "                          batching; both prefill through the KV reuse engine). Default auto: min(4,\n"
           "                          cores / 2, what half the available memory holds at the full context), >= 1\n"
           "      --queue N           requests waiting beyond the running ones; more get 429 (default 64)\n"
           "      --sessions N        reprise_session sessions kept (default 16)\n"
           "      --session-ttl S     idle session lifetime in seconds (default 1800)\n"
           "      --timeout S         per-request limit in seconds, queueing included (default 600)\n"
           "      --max-body BYTES    request body limit (default 1048576)\n"
           "      --max-tokens N      reply length when a request gives none (default 2048)\n"
           "      --max-connections N open client connections in all (default 256); when full, a new client\n"
           "                          closes an idle one first, else the one sending its request the longest\n"
           "      --max-connections-per-ip N  from one address (default 64; 0: no cap, e.g. behind a proxy)\n"
           "      --header-timeout S  a request's line and headers must arrive within S s (default 10)\n"
           "      --body-timeout S    its body within S s of the headers (default 30)\n"
           "      --idle-timeout S    a kept-alive connection without a request is closed after S s (default 15)\n"
           "      --reuse MODE        default KV reuse: none | prefix | full | blend (default blend)\n"
           "      --recompute-ratio R default blend recompute ratio (default 0.25)\n"
           "      --cache-dir DIR     persistent KV chunk store (flash tier) in DIR\n"
           "      --cache-ram MB      RAM budget of the chunk cache (default 512)\n"
           "      --cache-disk GB     disk budget of the store (default: unlimited)\n"
           "      --embed-model F     with --cache-dir: embed every chunk stored, and each prompt's new text, with\n"
           "                          the embedding model F (GGUF) for the store's sub-chunk search\n"
           "      --embed-dim N       components of each embedding kept (default 256; 0: all)\n"
           "      --kv-limit MB       with --parallel > 1: KV in use above which sessions waiting on a tool result\n"
           "                          are demoted (compressed in memory) and restored when the result comes\n"
           "                          (default 0: never)\n"
           "      --kv-type T         f16 (default), q8_0, f32\n"
           "      --swa-full          sliding-window layers (Gemma 2 / 3) keep every cell, not only their window +\n"
           "                          the batch size (more KV memory; whole long prompts stay cacheable)\n"
           "      --no-spec           no speculative decoding (scheduler)\n"
           "      --drain-timeout S   on SIGTERM, seconds in-flight requests may finish (default 30)\n"
           "      --quiet             no access log\n"
           "      --cpu LEVEL         force a kernel level: scalar, avx2, avx512, amx (x86-64);\n"
           "                          neon, dotprod, i8mm, sve2, sme (aarch64)\n"
           "%s",
           cli_gpu_help);
}

/* The port is bound and answered (503 "loading") while the model loads. */
static void on_listening(void *user, uint16_t port) {
    (void)user;
    fprintf(stderr, "reprise serve: accepting connections on port %u while the model loads (/health: 503 loading)\n",
            (unsigned)port);
}

int cmd_serve(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "serve"};
    rp_server_params cfg = rp_server_default_params();
    cfg.parallel = 0;   /* auto unless told */
    const char *kv_name = "f16", *reuse = "blend", *port_file = NULL, *grammar_file = NULL;
    long port = 8080, l;
    double d, drain = 30;
    const char *ns = NULL;
    bool key_flag = false;
    char cors[4096] = "";   /* every --cors, comma-joined */
    cli_gpu gpu = cli_gpu_defaults();
    for (; a.i < argc; a.i++) {
        int r;
        if (cli_is(&a, "-h", "--help")) { serve_usage(); return 0; }
        else if ((r = cli_gpu_arg(&a, &gpu)) != 0) { if (r < 0) return 2; }
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &cfg.model_path)) return 2; }
        else if (cli_is(&a, "--draft", NULL)) { if (!cli_str(&a, &cfg.draft_path)) return 2; }
        else if (cli_is(&a, "--chat-template", NULL)) { if (!cli_str(&a, &cfg.chat_template)) return 2; }
        else if (cli_is(&a, "--grammar-file", NULL)) { if (!cli_str(&a, &grammar_file)) return 2; }
        else if (cli_is(&a, "--host", NULL)) { if (!cli_str(&a, &cfg.host)) return 2; }
        else if (cli_is(&a, "--port", NULL)) { if (!cli_int(&a, 0, 65535, &port)) return 2; }
        else if (cli_is(&a, "--port-file", NULL)) { if (!cli_str(&a, &port_file)) return 2; }
        else if (cli_is(&a, "--api-key", NULL)) { if (!cli_str(&a, &cfg.api_key)) return 2; key_flag = true; }
        else if (cli_is(&a, "--api-key-file", NULL)) { if (!cli_str(&a, &cfg.api_key_file)) return 2; }
        else if (cli_is(&a, "--cache-namespace", NULL)) { if (!cli_str(&a, &ns)) return 2; }
        else if (cli_is(&a, "--key-sessions", NULL)) { if (!cli_int(&a, 1, 128, &l)) return 2; cfg.key_max_sessions = (int)l; }
        else if (cli_is(&a, "--key-kv-mb", NULL)) { if (!cli_float(&a, 0, 1e9, &cfg.key_kv_mb)) return 2; }
        else if (cli_is(&a, "--model-id", NULL)) { if (!cli_str(&a, &cfg.model_id)) return 2; }
        else if (cli_is(&a, "--cors", NULL)) {
            const char *v;
            if (!cli_str(&a, &v)) return 2;
            if (!v[0] || strlen(cors) + strlen(v) + 2 > sizeof cors) {
                fprintf(stderr, "reprise serve: --cors needs an origin (scheme://host[:port], or *)\n");
                return 2;
            }
            if (cors[0]) strcat(cors, ",");
            strcat(cors, v);
        }
        else if (cli_is(&a, "--embeddings", "--embedding")) cfg.embeddings = true;
        else if (cli_is(&a, "--pooling", NULL)) {
            const char *v;
            if (!cli_str(&a, &v)) return 2;
            int p = rp_pooling_parse(v);
            if (p < 0) { fprintf(stderr, "reprise serve: --pooling must be mean, cls, last or none, got '%s'\n", v); return 2; }
            cfg.pooling = (rp_pooling)p;
        }
        else if (cli_is(&a, "-c", "--ctx-size")) { if (!cli_int(&a, 16, 1 << 20, &l)) return 2; cfg.n_ctx = (int32_t)l; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &l)) return 2; cfg.n_threads = (int)l; }
        else if (cli_is(&a, "--parallel", "-np")) {
            if (a.i + 1 < argc && !strcmp(argv[a.i + 1], "auto")) {
                a.i++;
                cfg.parallel = 0;
            } else if (!cli_int(&a, 1, 64, &l)) {
                return 2;
            } else {
                cfg.parallel = (int)l;
            }
        }
        else if (cli_is(&a, "--queue", NULL)) { if (!cli_int(&a, 0, 4096, &l)) return 2; cfg.queue_max = (int)l; }
        else if (cli_is(&a, "--sessions", NULL)) { if (!cli_int(&a, 0, 128, &l)) return 2; cfg.max_sessions = (int)l; }
        else if (cli_is(&a, "--session-ttl", NULL)) { if (!cli_float(&a, 1, 1e7, &cfg.session_ttl_s)) return 2; }
        else if (cli_is(&a, "--timeout", NULL)) { if (!cli_float(&a, 0.1, 1e6, &cfg.timeout_s)) return 2; }
        else if (cli_is(&a, "--max-body", NULL)) { if (!cli_int(&a, 1024, 1L << 30, &l)) return 2; cfg.max_body = (size_t)l; }
        else if (cli_is(&a, "--max-tokens", NULL)) { if (!cli_int(&a, 1, 1 << 20, &l)) return 2; cfg.default_max_tokens = (int32_t)l; }
        else if (cli_is(&a, "--max-connections", NULL)) { if (!cli_int(&a, 1, 65536, &l)) return 2; cfg.max_connections = (int)l; }
        else if (cli_is(&a, "--max-connections-per-ip", NULL)) { if (!cli_int(&a, 0, 65536, &l)) return 2; cfg.max_connections_per_ip = (int)l; }
        else if (cli_is(&a, "--header-timeout", NULL)) { if (!cli_float(&a, 0.1, 3600, &cfg.header_timeout_s)) return 2; }
        else if (cli_is(&a, "--body-timeout", NULL)) { if (!cli_float(&a, 0.1, 3600, &cfg.body_timeout_s)) return 2; }
        else if (cli_is(&a, "--idle-timeout", NULL)) { if (!cli_float(&a, 0.1, 3600, &cfg.idle_timeout_s)) return 2; }
        else if (cli_is(&a, "--reuse", NULL)) { if (!cli_str(&a, &reuse)) return 2; }
        else if (cli_is(&a, "--recompute-ratio", NULL)) { if (!cli_float(&a, 0, 1, &d)) return 2; cfg.recompute_ratio = (float)d; }
        else if (cli_is(&a, "--cache-dir", NULL)) { if (!cli_str(&a, &cfg.cache_dir)) return 2; }
        else if (cli_is(&a, "--cache-ram", NULL)) { if (!cli_int(&a, 1, 1 << 20, &l)) return 2; cfg.cache_ram_mb = (size_t)l; }
        else if (cli_is(&a, "--cache-disk", NULL)) { if (!cli_float(&a, 0, 1e6, &cfg.cache_disk_gb)) return 2; }
        else if (cli_is(&a, "--embed-model", NULL)) { if (!cli_str(&a, &cfg.embed_model)) return 2; }
        else if (cli_is(&a, "--embed-dim", NULL)) { if (!cli_int(&a, 0, 65536, &l)) return 2; cfg.embed_dim = (int32_t)l; }
        else if (cli_is(&a, "--kv-limit", NULL)) { if (!cli_float(&a, 0, 1e9, &cfg.kv_limit_mb)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "--no-spec", NULL)) cfg.speculate = false;
        else if (cli_is(&a, "--swa-full", NULL)) cfg.swa_full = true;
        else if (cli_is(&a, "--drain-timeout", NULL)) { if (!cli_float(&a, 0, 3600, &drain)) return 2; }
        else if (cli_is(&a, "--quiet", "-q")) cfg.quiet = true;
        else if (cli_is(&a, "--cpu", NULL)) { const char *v; if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else return cli_unknown(&a);
    }
    if (!cfg.model_path) { fprintf(stderr, "reprise serve: -m MODEL.gguf is required\n"); return 2; }
    /* the environment's key only when no option names keys */
    const char *env_key = getenv("REPRISE_API_KEY");
    if (!key_flag && !cfg.api_key_file && env_key) {
        if (!env_key[0]) {
            fprintf(stderr, "reprise serve: REPRISE_API_KEY is set but empty: an empty key would let anyone in; "
                            "unset it for no authentication, or set a key\n");
            return 2;
        }
        cfg.api_key = env_key;
    }
    if (key_flag && !cfg.api_key[0]) {
        fprintf(stderr, "reprise serve: --api-key is empty: an empty key would let anyone in; leave the option out "
                        "for no authentication, or give a key (better: --api-key-file FILE)\n");
        return 2;
    }
    if (key_flag)
        fprintf(stderr, "reprise serve: note: --api-key is visible to other local users (ps, /proc/PID/cmdline); "
                        "prefer --api-key-file FILE or REPRISE_API_KEY\n");
    if (ns && strcmp(ns, "per-key") && strcmp(ns, "shared")) {
        fprintf(stderr, "reprise serve: --cache-namespace must be per-key or shared, got '%s'\n", ns);
        return 2;
    }
    cfg.cache_namespace = !ns ? RP_SERVER_NS_AUTO : !strcmp(ns, "per-key") ? RP_SERVER_NS_PER_KEY : RP_SERVER_NS_SHARED;
    cfg.port = (uint16_t)port;
    cfg.cors_origins = cors[0] ? cors : NULL;
    int mode = rp_reuse_mode_parse(reuse);
    if (mode < 0) { fprintf(stderr, "reprise serve: --reuse must be none, prefix, full or blend, got '%s'\n", reuse); return 2; }
    cfg.reuse = (rp_reuse_mode)mode;
    int kv_type = rp_kv_type_parse(kv_name);
    if (kv_type < 0) {
        fprintf(stderr, "reprise serve: --kv-type must be f16, q8_0 or f32, got '%s'\n", kv_name);
        return 2;
    }
    cfg.kv_type = (rp_kv_type)kv_type;
    rp_model_params gmp = rp_model_default_params();
    cli_gpu_params(&gpu, kv_type, &gmp);
    cfg.n_gpu_layers = gmp.n_gpu_layers;
    cfg.gpu_device = gmp.gpu_device;

    /* every thread started from here on inherits the mask: the signals wait for sigwait below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char *grammar_text = NULL;   /* outlives the server, which keeps it by pointer */
    if (grammar_file) {
        if (!(grammar_text = cli_read_file("serve", grammar_file, NULL))) return 1;
        rp_grammar *gcheck = NULL;
        rp_status gst = rp_grammar_parse(grammar_text, NULL, &gcheck);
        rp_grammar_free(gcheck);
        if (gst != RP_OK) { free(grammar_text); return cli_fail("serve", grammar_file, gst); }
        cfg.grammar = grammar_text;
    }
    rp_server *srv = NULL;
    if (!cfg.quiet) cfg.on_listening = on_listening;
    cli_load_line ll;   /* "loading NAME: 45%" on a terminal while the model loads */
    cli_load_line_begin(&ll, cfg.model_path, &cfg.load_progress, &cfg.load_progress_user);
    rp_status st = rp_server_create(&cfg, &srv);
    cli_load_line_end(&ll);
    if (st != RP_OK) { free(grammar_text); return cli_fail("serve", "start", st); }
    unsigned bound = rp_server_port(srv);
    const char *host = cfg.host ? cfg.host : "127.0.0.1";
    const int n_keys = rp_server_n_keys(srv);
    char auth[96];
    if (n_keys) snprintf(auth, sizeof auth, "%d API key%s, %s cache", n_keys, n_keys > 1 ? "s" : "",
                         rp_server_cache_per_key(srv) ? "per-key" : "shared");
    else snprintf(auth, sizeof auth, "no API key");
    fprintf(stderr, "reprise serve: listening on http://%s%s%s:%u (backend %s, parallel %d, context %d, %s)\n",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound,
            rp_server_backend_kind(srv), rp_server_parallel(srv), rp_server_n_ctx(srv), auth);
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (!f || fprintf(f, "%u\n", bound) < 0 || fclose(f) != 0) {
            fprintf(stderr, "reprise serve: cannot write --port-file '%s': %s\n", port_file, strerror(errno));
            rp_server_free(srv);
            free(grammar_text);
            return 1;
        }
    }
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    fprintf(stderr, "reprise serve: %s: draining (up to %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", drain);
    rp_server_drain(srv, drain);
    rp_server_free(srv);
    free(grammar_text);
    fprintf(stderr, "reprise serve: stopped\n");
    return 0;
}
