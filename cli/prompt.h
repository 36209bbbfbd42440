/* prompt.h — building a prompt (an rp_prompt: tokens and chunk boundaries) from -p / -f / --segments / --separator. */
#ifndef RP_CLI_PROMPT_H
#define RP_CLI_PROMPT_H

#include <stdbool.h>

#include "reprise.h"

/* Segments (a JSON array of strings, from a file) are added one by one, each
 * starting a chunk boundary; a plain prompt text (-p / -f) is added as the
 * last segment; BOS (per the vocabulary) goes first. With a separator, every
 * occurrence of its tokens also ends a chunk. Prints a message naming the
 * problem and returns false on bad input; *out is the caller's to
 * rp_prompt_free. */
bool cli_prompt_build(const char *cmd, const rp_model *m, const char *text, const char *segments_path,
                      const char *separator, rp_prompt **out);

#endif
