/* gen_args.c — the generation options `run` and `chat` share (sampling, KV type, -n, llama-cli spellings), parsed once. */
#include "gen_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_sampling_help[] =
    "      --temp T            temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K           (default 40; 0 = off)\n"
    "      --top-p P           (default 0.95; 1 = off)\n"
    "      --min-p P           (default 0.05; 0 = off)\n"
    "      --repeat-penalty R  (default 1.0 = off)\n"
    "      --repeat-last-n N   (default 64; also the window of the two penalties below)\n"
    "      --presence-penalty P  subtracted once per token in the window (default 0, -2..2)\n"
    "      --frequency-penalty F subtracted per occurrence in the window (default 0, -2..2)\n"
    "  -s, --seed S            RNG seed (default 0x1234)\n";

const char cli_gen_help[] =
    "      --kv-type T         KV cache type: f16 (default), q8_0, f32\n"
    "      --ignore-eos        keep generating past end-of-generation tokens\n"
    "      --swa-full          sliding-window layers (Gemma 2 / 3) keep every cell of the context, not only\n"
    "                          their window + the batch size (more KV memory; as llama.cpp's --swa-full)\n"
    "llama-cli spellings:\n"
    "  -ctk, --cache-type-k T / -ctv, --cache-type-v T   = --kv-type T (K and V share one type: give both the same)\n"
    "  -fa, --flash-attn [on|off|auto]  accepted; attention is always flash-style here (tiled, online softmax)\n"
    "      --chat-template T   the chat template: a built-in (llama3, chatml, qwen3, llama2) or a Jinja file;\n"
    "                          default: the model's own tokenizer.chat_template (an error at start-up if it fails)\n"
    "      --jinja             accepted; the model's Jinja chat template is always used\n";

const char cli_gpu_help[] =
    "GPU offload (Vulkan, docs/gpu.md):\n"
    "  -ngl, --gpu-layers N    the last N layers on the GPU, or all (default: all when a GPU is present;\n"
    "                          a CPU-type Vulkan device such as lavapipe only when asked for: -ngl, --device\n"
    "                          or $RP_GPU_DEVICE); 0 = CPU only\n"
    "      --device D          the Vulkan device: an index or a piece of its name (`reprise inspect --system`)\n"
    "      --no-gpu            CPU only (= -ngl 0)\n";

cli_gpu cli_gpu_defaults(void) {
    cli_gpu g = {.ngl = -1, .ngl_set = false, .device = NULL};
    return g;
}

int cli_gpu_arg(cli_args *a, cli_gpu *g) {
    if (cli_is(a, "-ngl", "--gpu-layers") || cli_is(a, "--n-gpu-layers", NULL)) {
        const char *v;
        if (!cli_str(a, &v)) return -1;
        char *end = NULL;
        long n = strtol(v, &end, 10);
        if (!strcmp(v, "all") || !strcmp(v, "auto")) n = 1L << 20;   /* capped at the layer count */
        else if (!*v || *end || n < 0) {
            fprintf(stderr, "reprise %s: -ngl takes a layer count or 'all', got '%s'\n", a->cmd, v);
            return -1;
        }
        g->ngl = n > (1L << 20) ? 1L << 20 : n;
        g->ngl_set = true;
    } else if (cli_is(a, "--device", NULL)) {
        if (!cli_str(a, &g->device)) return -1;
    } else if (cli_is(a, "--no-gpu", NULL)) {
        g->ngl = 0;
        g->ngl_set = true;
    } else {
        return 0;
    }
    return 1;
}

void cli_gpu_params(const cli_gpu *g, int kv_type, rp_model_params *mp) {
    mp->n_gpu_layers = (int32_t)g->ngl;
    mp->gpu_device = g->device;
    /* a named device with no -ngl: every layer there */
    if (g->device && !g->ngl_set) mp->n_gpu_layers = -1;
    if (kv_type == RP_KV_F32 && !g->ngl_set && !g->device) mp->n_gpu_layers = 0;   /* GPU caches: f16, q8_0 */
}

void cli_gpu_note(const char *cmd, const rp_model *m, const cli_gpu *g) {
    const char *n = rp_model_gpu_notice(m), *env = getenv("RP_GPU_DEVICE");
    if (!n || !*n) return;
    const bool asked = g->ngl_set || g->device || (env && *env);
    /* "gpu: CPU only (" : no GPU found, the default's usual case on a machine without one */
    if (rp_model_gpu_layers(m) > 0 || asked || strncmp(n, "gpu: CPU only (", 15) != 0)
        fprintf(stderr, "reprise %s: %s\n", cmd, n);
}


cli_gen cli_gen_defaults(long n_predict) {
    cli_gen g = {.sp = rp_sampler_default_params(), .n_predict = n_predict, .kv_name = "f16"};
    return g;
}

int cli_sampling_arg(cli_args *a, rp_sampler_params *sp) {
    double d;
    long l;
    if (cli_is(a, "--temp", NULL)) { if (!cli_float(a, 0, 100, &d)) return -1; sp->temp = (float)d; }
    /* the smallest positive top_p (1.4e-45 as a float; anything smaller rounds up to it) keeps just the best token */
    else if (cli_is(a, "--top-p", NULL)) {
        if (!cli_float(a, 0, 1, &d)) return -1;
        if (d <= 0) { fprintf(stderr, "reprise %s: --top-p must be greater than 0 (1 = off)\n", a->cmd); return -1; }
        sp->top_p = d < 0x1p-149 ? 0x1p-149f : (float)d;
    }
    else if (cli_is(a, "--top-k", NULL)) { if (!cli_int(a, 0, 1 << 30, &l)) return -1; sp->top_k = (int32_t)l; }
    else if (cli_is(a, "--min-p", NULL)) { if (!cli_float(a, 0, 1, &d)) return -1; sp->min_p = (float)d; }
    else if (cli_is(a, "--repeat-penalty", NULL)) { if (!cli_float(a, 1e-3, 100, &d)) return -1; sp->repeat_penalty = (float)d; }
    else if (cli_is(a, "--repeat-last-n", NULL)) { if (!cli_int(a, 0, 1 << 20, &l)) return -1; sp->repeat_last_n = (int32_t)l; }
    else if (cli_is(a, "--presence-penalty", NULL)) { if (!cli_float(a, -2, 2, &d)) return -1; sp->presence_penalty = (float)d; }
    else if (cli_is(a, "--frequency-penalty", NULL)) { if (!cli_float(a, -2, 2, &d)) return -1; sp->frequency_penalty = (float)d; }
    else if (cli_is(a, "--seed", "-s")) { if (!cli_u64(a, &sp->seed)) return -1; }
    else return 0;
    return 1;
}

int cli_gen_arg(cli_args *a, cli_gen *g) {
    const int r = cli_sampling_arg(a, &g->sp);
    if (r != 0) return r;
    if (cli_is(a, "-n", "--n-predict")) {
        if (!cli_int(a, -1, 1 << 24, &g->n_predict)) return -1;
    } else if (cli_is(a, "--kv-type", NULL)) {
        if (!cli_str(a, &g->kv_name)) return -1;
    } else if (cli_is(a, "-ctk", "--cache-type-k")) {
        if (!cli_str(a, &g->ctk)) return -1;
    } else if (cli_is(a, "-ctv", "--cache-type-v")) {
        if (!cli_str(a, &g->ctv)) return -1;
    } else if (cli_is(a, "--ignore-eos", NULL)) {
        g->ignore_eos = true;
    } else if (cli_is(a, "--swa-full", NULL)) {
        g->swa_full = true;
    } else if (cli_is(a, "-fa", "--flash-attn")) {
        static const char *const vals[] = {"on", "off", "auto", "1", "0", "true", "false"};
        const char *v = a->i + 1 < a->argc ? a->argv[a->i + 1] : "";
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
            if (strcmp(v, vals[k]) == 0) {
                a->i++;
                if (!strcmp(v, "off") || !strcmp(v, "0") || !strcmp(v, "false"))
                    fprintf(stderr, "reprise %s: note: attention is always flash-style here; '%s %s' changes nothing\n",
                            a->cmd, a->argv[a->i - 1], v);
                break;
            }
    } else if (cli_is(a, "--jinja", NULL)) {
        /* templates come from the model's tokenizer.chat_template */
    } else if (cli_is(a, "--chat-template", NULL)) {
        if (!cli_str(a, &g->chat_template)) return -1;
    } else {
        return 0;
    }
    return 1;
}

int cli_gen_chat_template(const char *cmd, rp_model *m, const cli_gen *g) {
    rp_status st = g->chat_template ? rp_chat_template_set(m, g->chat_template) : rp_chat_template_check(m);
    if (st == RP_OK || (!g->chat_template && st == RP_ERR_UNSUPPORTED)) return 0;
    fprintf(stderr, "reprise %s: %s\n", cmd, rp_last_error());
    if (!g->chat_template) fprintf(stderr, "reprise %s: give another template with --chat-template NAME|FILE\n", cmd);
    return 1;
}

int cli_gen_kv_type(const char *cmd, const cli_gen *g) {
    const char *k = g->ctk ? g->ctk : g->kv_name, *v = g->ctv ? g->ctv : g->kv_name;
    if (strcmp(k, v) != 0) {
        fprintf(stderr, "reprise %s: K and V share one cache type here, got %s for K and %s for V (give -ctk and -ctv the same type, or --kv-type)\n",
                cmd, k, v);
        return -1;
    }
    const int t = rp_kv_type_parse(k);
    if (t < 0) {
        fprintf(stderr, "reprise %s: the KV cache type must be f16, q8_0 or f32, got '%s'\n", cmd, k);
        return -1;
    }
    return t;
}
