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

#endif
