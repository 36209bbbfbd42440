/* answer_score.h — SQuAD-style answer scoring (token F1 and exact match) for `bench reuse --answer`. */
#ifndef RP_CLI_ANSWER_SCORE_H
#define RP_CLI_ANSWER_SCORE_H

#include <stdbool.h>

/* Token-level F1 of a predicted answer against a gold one, after SQuAD's
 * normalisation (lower case, ASCII punctuation deleted, the articles a / an /
 * the dropped, split at white space); *exact (may be NULL) when the normalised
 * word sequences are equal. Both empty scores 1, one empty 0. Bounds: the
 * first 256 words of each, words cut at 31 bytes. */
double cli_answer_f1(const char *pred, const char *gold, bool *exact);

#endif
