/* synth.h — writes random-weight GGUF models with real architectures' shapes and metadata. */
#ifndef RP_SYNTH_H
#define RP_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "model/model.h"

typedef struct rp_synth_params {
    rp_arch arch;
    const char *preset;       /* tiny (every arch) | small | tiny-llama3 | llama-3.2-1b | llama-3.2-3b (llama) | qwen3-0.6b |
                                 qwen3-1.7b | qwen3-4b | qwen2.5-0.5b | qwen2.5-1.5b | tiny-longrope | phi-3-mini | phi-4-mini |
                                 gemma-2-2b | gemma-3-1b | bge-small | all-minilm-l6 (bert) | nomic-embed-text-v1.5 */
    const char *type;         /* a file type of model/quant_mix.h: f32, q8_0, q4_k (pure), q4_k_m, q3_k_s, ... (llama.cpp's mixes) */
    const char *vocab_path;   /* a GGUF whose tokenizer.* keys are copied; NULL: built-in byte-level vocab */
    uint64_t seed;
    bool unfused;             /* phi3: separate attn_q/k/v and ffn_gate/ffn_up holding the fused files' values (tests) */
    int n_threads;
    float peak;               /* 0: off; > 0: an untied output.weight scaled so next-token logits have a std of
                                 ~peak units, and attention queries scaled by peak (sharper, position-sensitive
                                 attention): distributions that tell kernels apart (bench/parity). gemma2/gemma3
                                 stay tied (llama.cpp refuses their output.weight): the embedding is scaled for
                                 the logit std and the post-norm gains so the context outweighs the input token */
    rp_progress_fn progress;  /* NULL, or called as tensor data is made (units: bytes of tensor data);
                                 returning false stops the write and removes the temp file */
    void *progress_user;
} rp_synth_params;

rp_synth_params rp_synth_default_params(void);

/* Writes the model to `out_path` (temp file + rename; on any failure or a
 * cancel the temp file is removed). Deterministic for a seed: the same
 * parameters give byte-identical files, whatever n_threads. */
rp_status rp_synth_write(const rp_synth_params *p, const char *out_path);

/* The built-in WordPiece vocabulary of the encoder presets (synth_wpm.c): BERT's special ids, n_vocab tokens;
 * a cased one (no uppercase folding: tokenizer.ggml.normalizer.lowercase false) unless `lowercase`. */
rp_status rp_synth_wpm_vocab(rp_gguf_writer *w, int32_t n_vocab, bool lowercase);

/* Names of the presets, NULL-terminated (for --help). */
extern const char *const rp_synth_preset_names[];

#endif /* RP_SYNTH_H */
