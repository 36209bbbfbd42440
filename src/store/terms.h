/* terms.h — keyword terms of a text for the store's sparse index: Unicode words, case-folded, stop words and short
 * words dropped, lightly stemmed, hashed. */
#ifndef RP_STORE_TERMS_H
#define RP_STORE_TERMS_H

#include <stddef.h>
#include <stdint.h>

/* One distinct term of a text: the 64-bit hash of its normalised form (never 0: 0 is the store's "indexed
 * document" marker) and how often it occurs. The store salts the hash with its model before indexing. */
typedef struct rp_term {
    uint64_t h;
    uint32_t tf;
} rp_term;

/* Terms are maximal runs of letters and digits (Unicode categories L*, N*, and the combining marks M* inside a
 * word), simple-case-folded to lower case (utf8proc), of at least RP_TERM_MIN_CHARS code points, not an English
 * stop word, and stemmed by a light English plural / -ed / -ing rule on ASCII words. Words of more than
 * RP_TERM_MAX_BYTES bytes are cut there. */
#define RP_TERM_MIN_CHARS 3
#define RP_TERM_MAX_BYTES 64

/* The distinct terms of text[0..len) (invalid UTF-8 bytes separate words), sorted by hash, each with its
 * count. Writes up to cap of them; returns how many the text has in all (may exceed cap: the first cap by
 * hash are written). */
int32_t rp_terms_extract(const char *text, size_t len, rp_term *out, int32_t cap);

/* The normalised form of one word as rp_terms_extract indexes it (NUL-terminated in out[cap]); returns its
 * length, or 0 when the word is dropped (too short, a stop word). For tests and tools. */
size_t rp_term_normalize(const char *word, size_t len, char *out, size_t cap);

/* The hash rp_terms_extract gives a normalised word. */
uint64_t rp_term_hash(const char *norm, size_t len);

#endif /* RP_STORE_TERMS_H */
