/* api_synth.c — rp_model_synth: random-weight GGUF models with real architectures' shapes (`reprise synth`). */
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "model/synth.h"

rp_model_synth_params rp_model_synth_default_params(void) {
    const rp_synth_params d = rp_synth_default_params();
    rp_model_synth_params p = {.arch = rp_arch_name(d.arch), .preset = d.preset, .type = d.type,
                               .vocab_path = d.vocab_path, .seed = d.seed, .n_threads = d.n_threads,
                               .peak = d.peak};
    return p;
}

rp_status rp_model_synth(const rp_model_synth_params *p, const char *path) {
    if (!p || !path || !*path) return rp_errorf(RP_ERR_INVALID_ARG, "synth: NULL params or output path");
    if (!p->preset || !p->type) return rp_errorf(RP_ERR_INVALID_ARG, "synth: no preset or no weight type given");
    rp_synth_params sp = rp_synth_default_params();
    if (!p->arch || !strcmp(p->arch, "llama")) sp.arch = RP_ARCH_LLAMA;
    else if (!strcmp(p->arch, "qwen3")) sp.arch = RP_ARCH_QWEN3;
    else if (!strcmp(p->arch, "qwen2")) sp.arch = RP_ARCH_QWEN2;
    else if (!strcmp(p->arch, "phi3")) sp.arch = RP_ARCH_PHI3;
    else if (!strcmp(p->arch, "gemma2")) sp.arch = RP_ARCH_GEMMA2;
    else if (!strcmp(p->arch, "gemma3")) sp.arch = RP_ARCH_GEMMA3;
    else if (!strcmp(p->arch, "bert")) sp.arch = RP_ARCH_BERT;
    else if (!strcmp(p->arch, "nomic-bert")) sp.arch = RP_ARCH_NOMIC_BERT;
    else return rp_errorf(RP_ERR_INVALID_ARG, "synth: architecture '%s' unknown (llama, qwen3, qwen2, phi3, gemma2, gemma3, bert or nomic-bert)", p->arch);
    sp.preset = p->preset;
    sp.type = p->type;
    sp.vocab_path = p->vocab_path;
    sp.seed = p->seed;
    sp.n_threads = p->n_threads;
    if (!(p->peak >= 0 && p->peak <= 1000)) return rp_errorf(RP_ERR_INVALID_ARG, "synth: peak %g is not in [0, 1000]", (double)p->peak);
    sp.peak = p->peak;
    sp.progress = p->progress;
    sp.progress_user = p->progress_user;
    return rp_synth_write(&sp, path);
}
