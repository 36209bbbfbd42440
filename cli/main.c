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
            "  chat      interactive chat with the model's chat template\n"
            "  inspect   print a GGUF file's metadata and tensor table\n"
            "  tokenize  print the token ids of a text (works on vocab-only GGUFs)\n"
            "  synth     write a random-weight model with a real architecture's shape\n"
            "  serve     OpenAI-compatible HTTP server (chat, completions, tools, SSE, metrics)\n"
            "  plan      show which tokens a prompt reuses or recomputes and the calls chosen\n"
            "  bench     benchmarks: model (prefill/decode tok/s), kernels (GFLOP/s, GB/s, bandwidth)\n"
            "\n"
            "`reprise <command> --help` lists a command's options.\n",
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
