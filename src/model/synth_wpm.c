/* synth_wpm.c — the built-in WordPiece vocabulary of synthetic bert / nomic-bert files (`reprise synth`).
 *
 * BERT's layout in llama.cpp's converter's form ("▁" marks a word-initial piece, continuations lose their "##"):
 * [PAD] 0, [unused0..98] 1-99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then word-initial and continuation
 * pieces of every printable ASCII character, a few hundred English words and suffixes, some letters beyond ASCII
 * (Latin, Greek, Cyrillic), CJK ideographs and kana, then two- and three-letter pieces until the preset's size.
 * Enough that lowercasing, accent stripping, punctuation, CJK, unknown words and long words all tokenize
 * differently (tests/test_bert.c checks the ids against llama.cpp's on this vocabulary). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

static const char *const k_words[] = {
    "the", "of", "and", "in", "to", "was", "he", "is", "as", "for", "on", "with", "that", "it", "by", "at", "from",
    "his", "an", "were", "are", "which", "this", "also", "be", "or", "has", "had", "first", "one", "their", "its",
    "after", "new", "who", "they", "two", "her", "she", "been", "other", "when", "there", "all", "during", "into",
    "school", "time", "may", "years", "more", "most", "only", "over", "city", "some", "world", "would", "where",
    "later", "up", "such", "used", "many", "can", "state", "about", "national", "out", "known", "university",
    "united", "then", "made", "not", "what", "how", "why", "we", "you", "i", "me", "my", "our", "do", "does", "did",
    "a", "hello", "good", "morning", "night", "day", "cat", "dog", "house", "water", "fire", "book", "read", "write",
    "play", "run", "walk", "talk", "search", "query", "document", "passage", "answer", "question", "retrieval",
    "model", "embed", "token", "text", "vector", "paris", "france", "capital", "london", "berlin", "tokyo",
    "music", "science", "history", "language", "computer", "learning", "machine", "deep", "network", "data",
    "cafe", "resume", "naive", "uber", "strasse", "ecole", "munchen", "zurich", "sao", "paulo",
    "un", "re", "pre", "dis", "over", "under", "inter", "trans", "super", "anti",
};

static const char *const k_suffixes[] = {
    "s", "es", "ed", "ing", "er", "ers", "est", "ly", "ion", "tion", "ation", "ness", "ment", "able", "ible", "al",
    "ful", "less", "ous", "ive", "ize", "ise", "ity", "ism", "ist", "y", "en", "ic", "ical", "ward", "wise",
    "ability", "ization", "ational", "fulness", "lessly", "ology", "graph", "phobia",
};

/* beyond ASCII: lowercase letters (some only reachable without accent stripping), marks, CJK, kana */
static const char *const k_chars[] = {
    "\xc3\xa9", "\xc3\xa8", "\xc3\xa0", "\xc3\xbc", "\xc3\xb6", "\xc3\xa4", "\xc3\xb1", "\xc3\xa7", "\xc3\x9f",
    "\xc3\xb8", "\xc3\xa6", "\xc5\x93", "\xce\xb1", "\xce\xb2", "\xce\xb3", "\xce\xb4", "\xcf\x80", "\xcf\x89",
    "\xd0\xb0", "\xd0\xb1", "\xd0\xb2", "\xd0\xbc", "\xd0\xb8", "\xd1\x80", "\xd0\xbf", "\xd0\xb5", "\xd1\x82",
    "\xe4\xb8\xad", "\xe6\x96\x87", "\xe4\xbd\xa0", "\xe5\xa5\xbd", "\xe4\xb8\x96", "\xe7\x95\x8c", "\xe4\xba\xba",
    "\xe5\xa4\xa7", "\xe5\xad\xa6", "\xe6\x97\xa5", "\xe6\x9c\xac", "\xe8\xaa\x9e", "\xe5\x9b\xbd", "\xe6\xb0\xb4",
    "\xe3\x81\x82", "\xe3\x81\x84", "\xe3\x81\x86", "\xe3\x81\xae", "\xe3\x82\xab", "\xe3\x82\xbf", "\xe3\x83\x8a",
    "\xea\xb0\x80", "\xed\x95\x9c", "\xe1\x84\x92",   /* Hangul syllables, and the leading jamo of 한 (its NFD's first) */
    "\xe2\x82\xac", "\xc2\xa3", "\xc2\xb0", "\xc2\xa7", "\xe2\x80\x94", "\xe2\x80\x9c", "\xe2\x80\x9d",
};

typedef struct {
    char **s;
    int32_t *types;
    int32_t n, cap;
    int32_t core;   /* pieces [104, core) are checked for duplicates (the generated ones are unique among themselves) */
    bool oom;
} vocab;

static void add(vocab *v, const char *text, int32_t type) {
    if (v->n >= v->cap || v->oom) return;
    for (int32_t i = 104; i < v->n && i < v->core; i++)   /* no duplicate pieces (a lookup takes the first) */
        if (!strcmp(v->s[i], text)) return;
    if (!(v->s[v->n] = strdup(text))) { v->oom = true; return; }
    v->types[v->n++] = type;
}

/* the word-initial piece "▁text" */
static void add_initial(vocab *v, const char *text) {
    char buf[64];
    snprintf(buf, sizeof buf, "\xe2\x96\x81%s", text);
    add(v, buf, RP_TOKTYPE_NORMAL);
}

rp_status rp_synth_wpm_vocab(rp_gguf_writer *w, int32_t n_vocab, bool lowercase) {
    if (n_vocab < 600) return rp_errorf(RP_ERR_INVALID_ARG, "synth: a WordPiece vocabulary needs at least 600 tokens, not %d", n_vocab);
    vocab v = {calloc((size_t)n_vocab, sizeof(char *)), calloc((size_t)n_vocab, sizeof(int32_t)), 0, n_vocab, n_vocab, false};
    rp_str *views = calloc((size_t)n_vocab, sizeof *views);
    rp_status st = RP_OK;
    if (!v.s || !v.types || !views) { st = rp_errorf(RP_ERR_NOMEM, "synth: out of memory"); goto done; }
    char buf[64];
    add(&v, "[PAD]", RP_TOKTYPE_CONTROL);
    for (int i = 0; i < 99; i++) {
        snprintf(buf, sizeof buf, "[unused%d]", i);
        add(&v, buf, RP_TOKTYPE_UNUSED);
    }
    add(&v, "[UNK]", RP_TOKTYPE_UNKNOWN);
    add(&v, "[CLS]", RP_TOKTYPE_CONTROL);
    add(&v, "[SEP]", RP_TOKTYPE_CONTROL);
    add(&v, "[MASK]", RP_TOKTYPE_CONTROL);
    for (int c = 33; c < 127; c++) {   /* every printable character, initial and continuation */
        if (lowercase && c >= 'A' && c <= 'Z') continue;
        buf[0] = (char)c;
        buf[1] = 0;
        add_initial(&v, buf);
    }
    for (int c = 33; c < 127; c++) {
        if (lowercase && c >= 'A' && c <= 'Z') continue;
        buf[0] = (char)c;
        buf[1] = 0;
        add(&v, buf, RP_TOKTYPE_NORMAL);
    }
    for (size_t i = 0; i < sizeof k_words / sizeof *k_words; i++) add_initial(&v, k_words[i]);
    if (!lowercase) {   /* a cased vocabulary has capitalized words too */
        for (size_t i = 0; i < 40 && i < sizeof k_words / sizeof *k_words; i++) {
            snprintf(buf, sizeof buf, "%s", k_words[i]);
            buf[0] = (char)(buf[0] - 'a' + 'A');
            add_initial(&v, buf);
        }
    }
    for (size_t i = 0; i < sizeof k_suffixes / sizeof *k_suffixes; i++) add(&v, k_suffixes[i], RP_TOKTYPE_NORMAL);
    for (size_t i = 0; i < sizeof k_chars / sizeof *k_chars; i++) {
        add_initial(&v, k_chars[i]);
        add(&v, k_chars[i], RP_TOKTYPE_NORMAL);
    }
    v.core = v.n;
    /* pieces of two, then three letters (continuations first: they split long and unknown-looking words) */
    for (int len = 2; len <= 3 && v.n < n_vocab; len++)
        for (int k = 0; k < (len == 2 ? 26 * 26 : 26 * 26 * 26) && v.n < n_vocab; k++) {
            int r = k;
            for (int i = len - 1; i >= 0; i--) { buf[i] = (char)('a' + r % 26); r /= 26; }
            buf[len] = 0;
            add(&v, buf, RP_TOKTYPE_NORMAL);
            if (len == 2) add_initial(&v, buf);
        }
    for (int k = 0; v.n < n_vocab; k++) {   /* only past 18k pieces: the real shapes' sizes */
        snprintf(buf, sizeof buf, "[unused%d]", 99 + k);
        add(&v, buf, RP_TOKTYPE_UNUSED);
    }
    if (v.oom) { st = rp_errorf(RP_ERR_NOMEM, "synth: out of memory"); goto done; }
    for (int32_t i = 0; i < v.n; i++) {
        views[i].ptr = v.s[i];
        views[i].len = strlen(v.s[i]);
    }
    /* the keys llama.cpp's converter writes for BERT (tokenizer.ggml.pre is not read for WordPiece) */
    st = rp_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2);
    if (st == RP_OK) st = rp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", views, (uint64_t)v.n);
    if (st == RP_OK) st = rp_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_I32, v.types, (uint64_t)v.n);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 100);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 102);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 101);
    if (st == RP_OK) st = rp_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 103);
    if (st == RP_OK && !lowercase) st = rp_gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase", false);
done:
    for (int32_t i = 0; v.s && i < v.n; i++) free(v.s[i]);
    free(v.s);
    free(v.types);
    free(views);
    return st;
}
