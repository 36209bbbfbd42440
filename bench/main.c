/* main.c — `reprise-bench <what>` (also `reprise bench <what>`, which forwards here): dispatch to the benchmarks. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "reprise.h"

static void usage(FILE *f) {
    fprintf(f,
            "reprise-bench %s — the benchmarks of Reprise (`reprise bench <what>` runs this program)\n"
            "usage: reprise bench <what> [options]   (or: reprise-bench <what> [options])\n"
            "  model    prefill (ppN) and decode (tgN) throughput, llama-bench style\n"
            "  kernels  per-kernel GFLOP/s and GB/s, memory bandwidth and the decode ceiling of a model\n"
            "  attn     the attention kernel alone: decode and prefill runs at several depths (GFLOP/s, KV GB/s)\n"
            "  fidelity KL / greedy agreement of full and blend reuse against exact prefill\n"
            "  grammar  decode tok/s with and without a JSON-schema / GBNF constraint, and one mask's cost\n"
            "  split    the CPU + GPU column-parallel matmul: time per CPU fraction, the calibrated split\n"
            "  agents   multi-agent trace: scheduler policies (batch-ar, seq-sd, batch-sd, hal, hal-yield)\n"
            "  reuse    TTFT of none / prefix / full / blend / static on reuse workloads\n"
            "  sweep    TTFT vs prefix and non-prefix reuse ratio at several prompt lengths\n"
            "  ablation TTFT of the KV reuse system with each component (RAM pool, indexes, eviction, pipeline,\n"
            "           async persistence, prefetch, static shapes, DP merging) switched off in turn\n"
            "  all      every experiment above that the papers report, joined into one HTML report\n"
            "`reprise bench <what> --help` lists its options.\n",
            rp_version());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("reprise-bench %s\n", rp_version());
        return 0;
    }
    if (!strcmp(argv[1], "model")) return bench_model(argc - 1, argv + 1);
    if (!strcmp(argv[1], "kernels")) return bench_kernels(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attn")) return bench_attn(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fidelity")) return bench_fidelity(argc - 1, argv + 1);
    if (!strcmp(argv[1], "agents")) return bench_agents(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reuse")) return bench_reuse(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sweep")) return bench_sweep(argc - 1, argv + 1);
    if (!strcmp(argv[1], "ablation")) return bench_ablation(argc - 1, argv + 1);
    if (!strcmp(argv[1], "all")) return bench_all(argc - 1, argv + 1);
    if (!strcmp(argv[1], "grammar")) return bench_grammar(argc - 1, argv + 1);
    if (!strcmp(argv[1], "split")) return bench_split(argc - 1, argv + 1);
    fprintf(stderr, "reprise bench: unknown benchmark '%s' (see reprise bench --help)\n", argv[1]);
    return 2;
}
