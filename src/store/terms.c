/* terms.c — keyword terms of a text (Unicode words via utf8proc, case-folded, stop words out, light stemming). */
#include "store/terms.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

/* English function words (and the stems that contractions leave: "don't" -> "don"), sorted for bsearch. Words
 * under RP_TERM_MIN_CHARS letters never reach the list. */
static const char *const k_stop[] = {
    "about", "above", "after", "again", "against", "all", "also", "and", "any", "are", "aren", "because", "been",
    "before", "being", "below", "between", "both", "but", "can", "cannot", "could", "couldn", "did", "didn", "does",
    "doesn", "doing", "don", "down", "during", "each", "either", "else", "ever", "every", "few", "for", "from",
    "further", "had", "hadn", "has", "hasn", "have", "haven", "having", "her", "here", "hers", "herself", "him",
    "himself", "his", "how", "however", "into", "isn", "its", "itself", "just", "let", "may", "might", "mine",
    "more", "most", "much", "must", "mustn", "myself", "neither", "nor", "not", "now", "off", "once", "one", "only",
    "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shall", "she", "should", "shouldn",
    "since", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there",
    "these", "they", "this", "those", "though", "through", "too", "under", "until", "upon", "very", "was", "wasn",
    "were", "weren", "what", "when", "where", "whether", "which", "while", "who", "whom", "whose", "why", "will",
    "with", "within", "without", "won", "would", "wouldn", "yes", "yet", "you", "your", "yours", "yourself",
    "yourselves",
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static bool is_stop(const char *w) {
    return bsearch(&w, k_stop, sizeof k_stop / sizeof k_stop[0], sizeof k_stop[0], cmp_str) != NULL;
}

static bool is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'y'; }

static bool has_vowel(const char *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_vowel(w[i])) return true;
    return false;
}

/* Light English stemming of a lower-case ASCII word in place (Porter's step 1a and a guarded 1b): plurals
 * ("stories" -> "story", "caches" -> "cache", "glass" stays), then "-ed" / "-ing" when a stem of at least three
 * letters with a vowel remains, a doubled final consonant undone ("running" -> "run"). Both sides of a match
 * are stemmed alike, so a stem need not be a word. Returns the new length. */
static size_t stem(char *w, size_t n) {
    if (n > 4 && !memcmp(w + n - 3, "ies", 3)) {
        w[n - 3] = 'y';
        n -= 2;
    } else if (n > 4 && !memcmp(w + n - 4, "sses", 4)) {
        n -= 2;
    } else if (n > 3 && w[n - 1] == 's' && w[n - 2] != 's' && w[n - 2] != 'u' && w[n - 2] != 'i') {
        n -= 1;
    }
    size_t cut = 0;
    if (n > 5 && !memcmp(w + n - 3, "ing", 3)) cut = 3;
    else if (n > 4 && !memcmp(w + n - 2, "ed", 2) && w[n - 3] != 'e') cut = 2;
    if (cut && n - cut >= 3 && has_vowel(w, n - cut)) {
        n -= cut;
        const char c = w[n - 1];
        if (c == w[n - 2] && !is_vowel(c) && c != 'l' && c != 's' && c != 'z') n--;
    }
    w[n] = 0;
    return n;
}

static bool word_cp(utf8proc_int32_t cp, bool inside) {
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return true;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return inside;   /* a combining mark belongs to the word it follows */
    default: return false;
    }
}

/* Folds the word text[0..len) (all word code points) into out (NUL-terminated): lower case, cut at
 * RP_TERM_MAX_BYTES; filters and stems it. Returns its length or 0 (dropped). */
static size_t fold_word(const uint8_t *text, size_t len, char *out) {
    size_t o = 0, chars = 0;
    bool ascii = true;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(text + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) break;   /* the caller passes valid code points only */
        i += (size_t)k;
        cp = utf8proc_tolower(cp);
        uint8_t enc[4];
        const utf8proc_ssize_t e = utf8proc_encode_char(cp, enc);
        if (e <= 0 || o + (size_t)e > RP_TERM_MAX_BYTES) break;
        memcpy(out + o, enc, (size_t)e);
        o += (size_t)e;
        chars++;
        if (cp >= 0x80 || !((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9'))) ascii = false;
    }
    out[o] = 0;
    if (chars < RP_TERM_MIN_CHARS) return 0;
    if (!ascii) return o;
    bool letters = true;
    for (size_t i = 0; i < o; i++) letters = letters && out[i] >= 'a' && out[i] <= 'z';
    if (letters && is_stop(out)) return 0;
    return letters ? stem(out, o) : o;
}

uint64_t rp_term_hash(const char *norm, size_t len) {
    const uint64_t h = XXH3_64bits(norm, len);
    return h ? h : 1;
}

size_t rp_term_normalize(const char *word, size_t len, char *out, size_t cap) {
    char buf[RP_TERM_MAX_BYTES + 8];
    if (cap == 0) return 0;
    out[0] = 0;
    /* the first word of `word` only */
    const uint8_t *t = (const uint8_t *)word;
    size_t i = 0, end = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(t + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0 || !word_cp(cp, i > 0)) break;
        i += (size_t)k;
        end = i;
    }
    const size_t n = end ? fold_word(t, end, buf) : 0;
    if (n == 0 || n + 1 > cap) return 0;
    memcpy(out, buf, n + 1);
    return n;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int32_t rp_terms_extract(const char *text, size_t len, rp_term *out, int32_t cap) {
    if (!text || len == 0) return 0;
    /* at most one word per RP_TERM_MIN_CHARS + 1 bytes */
    const size_t max_words = len / (RP_TERM_MIN_CHARS + 1) + 1;
    uint64_t *h = malloc(sizeof *h * max_words);
    if (!h) return 0;
    size_t nh = 0;
    const uint8_t *t = (const uint8_t *)text;
    char buf[RP_TERM_MAX_BYTES + 8];
    size_t i = 0;
    while (i < len) {
        /* skip to a word start */
        size_t w0 = i, w1 = i;
        bool in = false;
        while (i < len) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate(t + i, (utf8proc_ssize_t)(len - i), &cp);
            if (k <= 0) {   /* an invalid byte ends a word */
                i++;
                if (in) break;
                continue;
            }
            if (word_cp(cp, in)) {
                if (!in) w0 = i;
                in = true;
                i += (size_t)k;
                w1 = i;
            } else {
                i += (size_t)k;
                if (in) break;
            }
        }
        if (!in) break;
        const size_t n = fold_word(t + w0, w1 - w0, buf);
        if (n > 0 && nh < max_words) h[nh++] = rp_term_hash(buf, n);
    }
    if (nh > 1) qsort(h, nh, sizeof *h, cmp_u64);
    int32_t nd = 0;
    for (size_t k = 0; k < nh;) {
        size_t e = k + 1;
        while (e < nh && h[e] == h[k]) e++;
        if (out && nd < cap) out[nd] = (rp_term){h[k], (uint32_t)(e - k)};
        nd++;
        k = e;
    }
    free(h);
    return nd;
}
