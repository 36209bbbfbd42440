/* cmd_synth.c — `reprise synth`: random-weight GGUF models with real architectures' shapes. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "reprise.h"
#include "synth_write.h"

int cmd_synth(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "synth"};
    rp_model_synth_params p = rp_model_synth_default_params();
    const char *arch = "llama", *out = NULL;
    long threads = 2;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise synth --arch llama|qwen3|qwen2|phi3|gemma2|gemma3|bert|nomic-bert --preset PRESET --type TYPE [--vocab VOCAB.gguf] [--seed S] "
                   "[--peak F] [-t THREADS] -o OUT.gguf\n"
                   "  presets: tiny, small, tiny-llama3, llama-3.2-1b, llama-3.2-3b (llama); tiny, qwen3-0.6b, qwen3-1.7b,\n"
                   "           qwen3-4b (qwen3); tiny, qwen2.5-0.5b, qwen2.5-1.5b (qwen2); tiny, tiny-longrope, phi-3-mini,\n"
                   "           phi-4-mini (phi3); tiny, gemma-2-2b (gemma2); tiny, gemma-3-1b (gemma3; the gemma tiny shapes have a\n"
                   "           32-position window); embedding models: tiny, bge-small, all-minilm-l6 (bert);\n"
                   "           tiny, nomic-embed-text-v1.5 (nomic-bert), with a built-in WordPiece vocabulary\n"
                   "  types:   f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, q5_k: every matrix of that type;\n"
                   "           q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, q8_0, iq4_nl, iq4_xs:\n"
                   "           llama.cpp's mixes (its quantize's per-tensor types, e.g. Q6_K output)\n"
                   "  --peak F peaked weights (F > 0, e.g. 3): an untied output matrix giving next-token logits of\n"
                   "           std ~F, and queries scaled by F (sharp attention); gemma stays tied (llama.cpp requires it)\n"
                   "           with scaled embeddings and post-norm gains instead; default 0: off (flat-ish, tied)\n"
                   "  --vocab  copy the tokenizer of a (vocab-only) GGUF; default: a built-in byte-level vocabulary\n"
                   "The same arguments always give the same file. It is written to a temp file renamed at the end;\n"
                   "Ctrl-C (or an error) removes the temp file. On a terminal a progress line shows on stderr.\n");
            return 0;
        } else if (cli_is(&a, "--arch", NULL)) { if (!cli_str(&a, &arch)) return 2; }
        else if (cli_is(&a, "--preset", NULL)) { if (!cli_str(&a, &p.preset)) return 2; }
        else if (cli_is(&a, "--type", NULL)) { if (!cli_str(&a, &p.type)) return 2; }
        else if (cli_is(&a, "--vocab", NULL)) { if (!cli_str(&a, &p.vocab_path)) return 2; }
        else if (cli_is(&a, "--seed", "-s")) { if (!cli_u64(&a, &p.seed)) return 2; }
        else if (cli_is(&a, "--peak", NULL)) {
            double v;
            if (!cli_float(&a, 0, 1000, &v)) return 2;
            p.peak = (float)v;
        }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-o", "--output")) { if (!cli_str(&a, &out)) return 2; }
        else return cli_unknown(&a);
    }
    if (!out) { fprintf(stderr, "reprise synth: -o OUT.gguf is required\n"); return 2; }
    if (strcmp(arch, "llama") && strcmp(arch, "qwen3") && strcmp(arch, "qwen2") && strcmp(arch, "phi3") &&
        strcmp(arch, "gemma2") && strcmp(arch, "gemma3") && strcmp(arch, "bert") && strcmp(arch, "nomic-bert")) {
        fprintf(stderr, "reprise synth: --arch must be llama, qwen3, qwen2, phi3, gemma2, gemma3, bert or nomic-bert, got '%s'\n", arch);
        return 2;
    }
    p.arch = arch;
    p.n_threads = (int)threads;
    double t0 = cli_now();
    int sig = 0;
    rp_status st = cli_synth_write(p, out, &sig);
    if (st == RP_ERR_CANCELLED && sig) {
        fprintf(stderr, "reprise synth: interrupted; nothing written (the partial file is removed)\n");
        return 128 + sig;
    }
    if (st != RP_OK) return cli_fail("synth", out, st);
    fprintf(stderr, "synth: wrote %s (%s %s %s) in %.1f s\n", out, arch, p.preset, p.type, cli_now() - t0);
    return 0;
}
