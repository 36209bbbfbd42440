/* wpm.c — WordPiece (tokenizer.ggml.model "bert": BERT, nomic-bert and the other encoders) as llama.cpp runs it.
 *
 * The GGUF holds the vocabulary in llama.cpp's converter's "phantom space" form: a word-initial piece "hello" is
 * stored as "▁hello", a continuation "##ing" as "ing", specials ("[CLS]") as they are. Encoding a raw-text fragment:
 *   1. BERT basic pre-tokenization over code points: with strip_accents each code point becomes the first code
 *      point of its NFD decomposition and combining marks (\p{M}) are dropped; whitespace ends a word; NUL,
 *      U+FFFD (and invalid UTF-8) and controls (\p{C}: Cc, Cf, Co, Cs) are dropped; with lowercase each code point
 *      is lowercased (simple mapping); punctuation (\p{P}), ASCII symbols (\p{S} below U+007F) and CJK ideographs
 *      are words of their own;
 *   2. each word, prefixed with "▁", is split greedily longest-match-first (byte ranges of at most the longest
 *      token's length); when some position matches no token the whole word becomes [UNK].
 * The normalizer flags come from tokenizer.ggml.normalizer.lowercase (default true) and .strip_accents (default:
 * lowercase), as llama.cpp reads them; [CLS] / [SEP] around the text are tokenizer.c's (rp_tokenizer_encode).
 * Unicode properties, NFD and lowercasing come from utf8proc. tests/test_bert.c compares against llama.cpp's ids
 * (tests/data/bert/wpm_vectors.json, made by bench/peer/bert_golden.mjs). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* White_Space, the list llama.cpp's unicode tables use */
static bool is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* the CJK blocks BERT splits per character (its ranges, 0x2B920 start included as HF's Rust code has it) */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* the first code point of c's canonical decomposition (llama.cpp's NFD table keeps only that one) */
static uint32_t nfd_first(uint32_t c) {
    utf8proc_int32_t d[8];
    int bound = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, d, 8, UTF8PROC_DECOMPOSE, &bound);
    return n >= 1 && n <= 8 ? (uint32_t)d[0] : c;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Greedy longest-match-first over w[0..n) (which starts with "▁"); [UNK] when some position has no token. */
static void emit_word(const rp_tokenizer *t, const char *w, size_t n, rp_tok_out *out) {
    if (n <= 3) return;   /* "▁" alone: an empty word */
    const size_t first = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = i + t->max_token_len + 1 < n ? i + t->max_token_len + 1 : n;
        int32_t id = -1;
        for (; j > i && id < 0; j--) id = rp_tok_lookup(t, w + i, j - i);
        if (id < 0) {
            out->n = first;   /* the whole word is unknown */
            break;
        }
        rp_tok_out_push(out, id);
        i = j + 1;   /* the loop's last j-- went one below the match's end */
    }
    if (out->n == first) rp_tok_out_push(out, t->unk);
}

rp_status rp_wpm_encode(const rp_tokenizer *t, const char *text, size_t len, rp_tok_out *out) {
    /* a word is at most every code point of the text, each at most 4 bytes, after "▁" */
    if (len > ((size_t)1 << 40)) return rp_errorf(RP_ERR_RANGE, "tokenizer: %zu bytes of text", len);
    char *w = malloc(4 * len + 8);
    if (!w) return rp_errorf(RP_ERR_NOMEM, "tokenizer: WordPiece buffer for %zu bytes", len);
    memcpy(w, "\xe2\x96\x81", 3);
    size_t wn = 3;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t sl;
        const int r = rp_utf8_check(s + i, len - i, &sl);
        uint32_t c = 0xFFFD;
        if (r == 1) {
            utf8proc_int32_t cp = 0;
            utf8proc_iterate(s + i, (utf8proc_ssize_t)sl, &cp);
            c = cp >= 0 ? (uint32_t)cp : 0xFFFD;
        }
        i += sl;
        if (t->wpm_strip_accents) c = nfd_first(c);
        if (is_space(c)) {
            emit_word(t, w, wn, out);
            wn = 3;
            continue;
        }
        const utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        if (c == 0 || c == 0xFFFD || cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
            cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS)
            continue;
        if (t->wpm_strip_accents &&
            (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME))
            continue;
        const uint32_t lc = t->wpm_lowercase ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)c) : c;
        const bool punct = cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
        const bool sym = cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
        if (punct || (c < 0x7F && sym) || is_cjk(c)) {   /* a word of its own */
            emit_word(t, w, wn, out);
            wn = 3 + put_utf8(lc, w + 3);
            emit_word(t, w, wn, out);
            wn = 3;
        } else {
            wn += put_utf8(lc, w + wn);
        }
    }
    emit_word(t, w, wn, out);
    free(w);
    return RP_OK;
}
