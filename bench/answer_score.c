/* answer_score.c — SQuAD-style answer normalisation, token F1 and exact match. */
#include "answer_score.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MAX_WORDS 256
#define WORD_CAP 32

/* Writes the normalised words of s into words; returns their count. */
static int norm_words(const char *s, char words[][WORD_CAP], int cap) {
    int n = 0;
    char w[WORD_CAP];
    size_t k = 0;
    for (const char *p = s;; p++) {
        const unsigned char ch = (unsigned char)*p;
        if (ch && ch < 0x80 && ispunct(ch)) continue;   /* deleted, as SQuAD does: "U.S." is "us" */
        if (ch && (isalnum(ch) || ch >= 0x80)) {        /* UTF-8 bytes stay in the word */
            if (k + 1 < sizeof w) w[k++] = (char)tolower(ch);
            continue;
        }
        if (k > 0) {
            w[k] = 0;
            if (strcmp(w, "a") && strcmp(w, "an") && strcmp(w, "the") && n < cap) snprintf(words[n++], WORD_CAP, "%s", w);
            k = 0;
        }
        if (!ch) break;
    }
    return n;
}

double cli_answer_f1(const char *pred, const char *gold, bool *exact) {
    char pw[MAX_WORDS][WORD_CAP], gw[MAX_WORDS][WORD_CAP];
    const int np = norm_words(pred ? pred : "", pw, MAX_WORDS), ng = norm_words(gold ? gold : "", gw, MAX_WORDS);
    bool ex = np == ng;
    for (int i = 0; ex && i < np; i++) ex = !strcmp(pw[i], gw[i]);
    if (exact) *exact = ex;
    if (np == 0 || ng == 0) return np == ng ? 1.0 : 0.0;
    /* common words counted as a multiset intersection */
    bool used[MAX_WORDS] = {0};
    int common = 0;
    for (int i = 0; i < np; i++)
        for (int j = 0; j < ng; j++)
            if (!used[j] && !strcmp(pw[i], gw[j])) {
                used[j] = true;
                common++;
                break;
            }
    if (common == 0) return 0.0;
    const double prec = (double)common / np, rec = (double)common / ng;
    return 2 * prec * rec / (prec + rec);
}
