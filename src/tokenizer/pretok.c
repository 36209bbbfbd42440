/* pretok.c — regex pre-tokenizers (PCRE2, Unicode properties, JIT) and NFC normalization (utf8proc). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* The HF tokenizer.json patterns, with the case-insensitive contraction group
 * spelled out as ASCII classes: under PCRE2_UCP, (?i) would also fold e.g.
 * U+017F LATIN SMALL LETTER LONG S into 's', which llama.cpp (whose vectors
 * we match) does not do. \s+(?!\S) keeps the last space of a run for the
 * following word, exactly as in HF's backtracking engines. */
static const char k_re_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

/* Qwen2/3: as Llama 3 but digits are split one by one. */
static const char k_re_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

/* GPT-2 (also the BPE default). */
static const char k_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)"
    "|\\s+";

struct rp_pretok {
    pcre2_code *re;
};

rp_status rp_pretok_create(rp_tok_pre pre, rp_pretok **out) {
    *out = NULL;
    const char *pat;
    switch (pre) {
    case RP_PRE_LLAMA3: pat = k_re_llama3; break;
    case RP_PRE_QWEN2: pat = k_re_qwen2; break;
    case RP_PRE_GPT2:
    case RP_PRE_DEFAULT: pat = k_re_gpt2; break;
    default: return rp_errorf(RP_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer %d", (int)pre);
    }
    int err;
    PCRE2_SIZE erroff;
    /* MATCH_INVALID_UTF: invalid UTF-8 is never matched (it becomes gaps we
     * emit as their own pieces) instead of failing the whole match. */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex compile failed at %zu: %s", (size_t)erroff,
                         (const char *)msg);
    }
    /* JIT is an optimization only: without it pcre2_match interprets. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    rp_pretok *p = malloc(sizeof *p);
    if (!p) {
        pcre2_code_free(re);
        return rp_errorf(RP_ERR_NOMEM, "tokenizer: pre-tokenizer");
    }
    p->re = re;
    *out = p;
    return RP_OK;
}

void rp_pretok_free(rp_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->re);
    free(p);
}

rp_status rp_pretok_split(const rp_pretok *p, const char *text, size_t len, rp_pretok_fn fn, void *user) {
    if (len == 0) return RP_OK;
    /* Match data is per call so one tokenizer can encode on many threads. */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md) return rp_errorf(RP_ERR_NOMEM, "tokenizer: regex match data");
    rp_status st = RP_OK;
    uint32_t opts = 0;
    size_t pos = 0;
    while (pos < len && st == RP_OK) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)text, len, pos, opts, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT;   /* the interpreter keeps its backtrack state on the heap */
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            st = fn(user, text + pos, len - pos);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex match failed at byte %zu: %s", pos,
                           (const char *)msg);
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (s < pos || e < s || e > len) {
            st = rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex match [%zu,%zu) outside [%zu,%zu)", s, e, pos, len);
            break;
        }
        if (s > pos) {
            st = fn(user, text + pos, s - pos);
            if (st != RP_OK) break;
        }
        if (e == s) {
            /* None of our patterns matches empty; if one ever did, take one
             * character so the loop always advances. */
            size_t cl = rp_utf8_len((unsigned char)text[s]);
            if (cl > len - s) cl = len - s;
            e = s + cl;
        }
        st = fn(user, text + s, e - s);
        pos = e;
    }
    pcre2_match_data_free(md);
    return st;
}

rp_status rp_nfc(const char *text, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    /* Composition never grows text by more than a small factor; size the
     * buffer as we go. */
    size_t cap = len + 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return rp_errorf(RP_ERR_NOMEM, "tokenizer: NFC buffer of %zu bytes", cap);
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        /* Maximal valid run [i, j). */
        size_t j = i;
        while (j < len) {
            size_t sl;
            if (rp_utf8_check(s + j, len - j, &sl) != 1) break;
            j += sl;
        }
        const unsigned char *piece = s + i;
        size_t plen = j - i;
        utf8proc_uint8_t *mapped = NULL;
        if (plen > 0) {
            if (plen > (size_t)PTRDIFF_MAX / 8) {   /* utf8proc sizes are ssize_t */
                free(buf);
                return rp_errorf(RP_ERR_RANGE, "tokenizer: %zu bytes too long for NFC", plen);
            }
            utf8proc_ssize_t r = utf8proc_map(piece, (utf8proc_ssize_t)plen, &mapped,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r < 0) {
                free(buf);
                return rp_errorf(RP_ERR_INTERNAL, "tokenizer: NFC failed at byte %zu: %s", i, utf8proc_errmsg(r));
            }
            piece = mapped;
            plen = (size_t)r;
        }
        /* Then the invalid bytes after the run, kept verbatim. */
        size_t k = j;
        while (k < len) {
            size_t sl;
            if (rp_utf8_check(s + k, len - k, &sl) == 1) break;
            k += sl;
        }
        size_t need = n + plen + (k - j);
        if (need > cap) {
            size_t nc = need * 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(mapped);
                free(buf);
                return rp_errorf(RP_ERR_NOMEM, "tokenizer: NFC buffer of %zu bytes", nc);
            }
            buf = nb;
            cap = nc;
        }
        if (plen) memcpy(buf + n, piece, plen);
        n += plen;
        if (k > j) memcpy(buf + n, s + j, k - j);
        n += k - j;
        free(mapped);
        i = k;
    }
    *out = buf;
    *out_len = n;
    return RP_OK;
}
