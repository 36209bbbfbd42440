/* lcs.h — linear-time common-substring matching over token ids (suffix automaton) and winnowed keyword selection. */
#ifndef RP_STORE_LCS_H
#define RP_STORE_LCS_H

#include <stdint.h>

#include "reprise.h"
#include "tokenizer/tokenizer.h"

/* A suffix automaton of one token string (the prompt): at most 2n states and
 * 3n transitions; transitions live in an open-addressing hash keyed by
 * (state, token), so the alphabet size does not matter. Building is O(n)
 * expected, matching a text against it O(|text|) expected. */
typedef struct rp_sam rp_sam;

rp_status rp_sam_build(const rp_token *s, int32_t n, rp_sam **out);
void rp_sam_free(rp_sam *a);

/* One maximal common run: text[text_off .. +len) == s[s_off .. +len). */
typedef struct rp_lcs_run {
    int32_t text_off, s_off, len;
} rp_lcs_run;

/* Walks text[0..n) through the automaton and writes every maximal run (one
 * that cannot be extended to the right in the text) of at least min_len
 * tokens, up to cap; returns how many there were in all (may exceed cap). */
int32_t rp_sam_match(const rp_sam *a, const rp_token *text, int32_t n, int32_t min_len, rp_lcs_run *out,
                     int32_t cap);

/* The longest common substring of s and text (its length; 0 if none). */
int32_t rp_lcs_longest(const rp_sam *a, const rp_token *text, int32_t n, rp_lcs_run *best);

/* Winnowing: hashes of token 3-grams (salted), selecting the minimum of each
 * window of 16 consecutive 3-gram hashes (rightmost on ties, each position
 * once). Any run of >= 18 tokens shared by two strings yields at least one
 * keyword selected in both. Writes up to cap keywords (in order, duplicates
 * possible); returns the count written. */
#define RP_KW_GRAM 3
#define RP_KW_WINDOW 16
int32_t rp_keywords(const rp_token *t, int32_t n, uint64_t salt, uint64_t *out, int32_t cap);

#endif /* RP_STORE_LCS_H */
