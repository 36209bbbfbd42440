/* main.c — `reprise` entry point: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "reprise.h"

static void usage(FILE *f) {
    fprintf(f,
            "reprise %s — on-device LLM engine that never computes the same context twice\n"
            "\n"
            "usage: reprise <command> [options]\n"
            "\n"
            "commands:\n"
            "  demo      three requests sharing documents in new orders: TTFT for none / prefix / blend\n"
            "  run       generate text from a prompt           reprise run -m MODEL.gguf -p PROMPT -n 64\n"
            "  chat      interactive chat with the model's chat template (same sampling options as run)\n"
            "  serve     OpenAI-compatible HTTP server (chat, completions, tools, SSE, metrics)\n"
            "  plan      show which tokens a prompt reuses or recomputes and the calls chosen\n"
            "  cache     inspect and maintain a persistent KV store: stats, ls, verify, evict, compact, clear\n"
            "  inspect   print a GGUF file's metadata and tensor table (--system: the CPU features found)\n"
            "  tokenize  print the token ids of a text (works on vocab-only GGUFs)\n"
            "  embed     embeddings of texts as JSON (--pooling mean|cls|last|none)\n"
            "  synth     write a random-weight model with a real architecture's shape\n"
            "  bench     benchmarks:\n"
            "    bench model     prefill (ppN) and decode (tgN) tok/s, llama-bench style (--temp: decode with sampling)\n"
            "    bench kernels   per-kernel GFLOP/s and GB/s, memory bandwidth, a model's decode ceiling\n"
            "    bench attn      the attention kernel alone at several depths: GFLOP/s and KV GB/s, decode and prefill\n"
            "    bench fidelity  KL / greedy agreement of full and blend reuse against exact prefill\n"
            "    bench reuse     TTFT of none / prefix / full / blend / static on reuse workloads\n"
            "    bench sweep     TTFT vs prefix and non-prefix reuse ratio at several prompt lengths\n"
            "    bench ablation  TTFT with each component of the KV reuse system switched off in turn\n"
            "    bench agents    multi-agent trace: scheduler policies, speculative decoding\n"
            "    bench grammar   decode tok/s with and without a JSON-schema / GBNF constraint\n"
            "    bench split     the CPU + GPU column-parallel matmul: time per CPU fraction, the calibrated split\n"
            "    bench all       reuse, workloads, fidelity, sweep, ablation and agents in turn, one HTML report\n"
            "\n"
            "`reprise <command> --help` (and `reprise bench <what> --help`) lists a command's options.\n",
            rp_version());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("reprise %s\n", rp_version());
        return 0;
    }
    const char *c = argv[1];
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(c, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(c, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(c, "embed")) return cmd_embed(argc - 1, argv + 1);
    if (!strcmp(c, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(c, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(c, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(c, "cache")) return cmd_cache(argc - 1, argv + 1);
    if (!strcmp(c, "demo")) return cmd_demo(argc - 1, argv + 1);
    fprintf(stderr, "reprise: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
