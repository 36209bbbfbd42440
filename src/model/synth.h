/* synth.h — writes random-weight GGUF models with real architectures' shapes and metadata. */
#ifndef RP_SYNTH_H
#define RP_SYNTH_H

#include <stdint.h>

#include "reprise.h"
#include "model/model.h"

typedef struct rp_synth_params {
    rp_arch arch;
    const char *preset;       /* tiny | small (llama) | llama-3.2-1b | llama-3.2-3b | qwen3-0.6b | qwen3-1.7b | qwen3-4b |
                                 gemma-2-2b | gemma-3-1b (tiny exists for every arch) */
    const char *type;         /* a file type of model/quant_mix.h: f32, q8_0, q4_k (pure), q4_k_m, q3_k_s, ... (llama.cpp's mixes) */
    const char *vocab_path;   /* a GGUF whose tokenizer.* keys are copied; NULL: built-in byte-level vocab */
    uint64_t seed;
    int n_threads;
    rp_progress_fn progress;  /* NULL, or called as tensor data is made (units: bytes of tensor data);
                                 returning false stops the write and removes the temp file */
    void *progress_user;
} rp_synth_params;

rp_synth_params rp_synth_default_params(void);

/* Writes the model to `out_path` (temp file + rename; on any failure or a
 * cancel the temp file is removed). Deterministic for a seed: the same
 * parameters give byte-identical files, whatever n_threads. */
rp_status rp_synth_write(const rp_synth_params *p, const char *out_path);

/* Names of the presets, NULL-terminated (for --help). */
extern const char *const rp_synth_preset_names[];

#endif /* RP_SYNTH_H */
