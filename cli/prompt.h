/* prompt.h — building a prompt's tokens and chunk boundaries from -p / -f / --segments / --separator. */
#ifndef RP_CLI_PROMPT_H
#define RP_CLI_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

typedef struct cli_prompt {
    rp_token *toks;
    int32_t n;
    int32_t *bounds;     /* token offsets where caller segments start (> 0, increasing) */
    int32_t n_bounds;
    int32_t n_segments;
} cli_prompt;

/* Segments (a JSON array of strings, from a file) are tokenized one by one and
 * concatenated; each starts a chunk boundary. A plain prompt text (-p / -f) is
 * appended as the last segment. BOS (per the vocabulary) goes first. With a
 * separator, every occurrence of its tokens also ends a chunk. Prints a
 * message naming the problem and returns false on bad input. */
bool cli_prompt_build(const char *cmd, const rp_tokenizer *tok, const char *text, const char *segments_path,
                      const char *separator, cli_prompt *out);
void cli_prompt_free(cli_prompt *p);

/* Calibration files (cmd_plan.c): path for a model + machine + thread count, the machine key, and
 * applying a stored calibration to an engine (false when none matches). */
struct rp_model;
struct rp_reuse;
struct rp_static_cfg;
void cli_calib_path(const char *cache_dir, const struct rp_model *m, int threads, char *buf, size_t cap);
void cli_machine_key(int threads, char *buf, size_t cap);
bool cli_apply_calib(struct rp_reuse *e, const struct rp_model *m, const char *cache_dir, int threads);
/* The stored static shapes for this model + machine into *cfg (its r kept); false if none. Callers size
 * contexts and batches with them before creating anything (a calibrated L_S may exceed the default). */
bool cli_load_calib(const struct rp_model *m, const char *cache_dir, int threads, struct rp_static_cfg *cfg);

#endif
