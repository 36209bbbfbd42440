/* pretok.c — regex pre-tokenizers (PCRE2, Unicode properties, JIT) and NFC normalization (utf8proc). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* Pre-tokenizers, as llama.cpp runs them (src/llama-vocab.cpp, src/unicode.cpp): a list of regexes
 * applied in turn, each one to every piece the previous ones made. A piece is split into the
 * regex's matches and the text between them, both kept ("Isolated" in HF terms); a match never
 * reaches past its piece, and lookaheads see the piece's end as the end of text.
 *
 * The patterns are the HF tokenizer.json ones, with the adaptations llama.cpp makes so that its
 * std::regex engine (which has no \p{..}) can run them, because its results are the ones we match:
 * - the case-insensitive contraction group (?i:'s|...) is spelled with ASCII classes ('[sS]...):
 *   under PCRE2_UCP, (?i) would also fold e.g. U+017F LATIN SMALL LETTER LONG S into 's';
 * - GPT-4o / Tekken's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]* and [\p{Ll}\p{Lm}\p{Lo}\p{M}]+ become
 *   "a letter that is not a-z" / "a letter that is not A-Z": llama.cpp has no case classes, so a
 *   non-ASCII letter counts as both cases, and combining marks are not part of a word;
 * - classes written with literal ranges (DeepSeek) never match whitespace, which llama.cpp
 *   replaces by U+000B before matching them (so U+3000 IDEOGRAPHIC SPACE is only \s).
 * \s+(?!\S) keeps the last space of a run for the following word, as backtracking engines do. */

#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_WS_TAIL "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char k_re_llama3[] =
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" RE_WS_TAIL;

/* Qwen2/3: as Llama 3 but digits are split one by one. */
static const char k_re_qwen2[] =
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" RE_WS_TAIL;

/* Qwen3.5: as Qwen2, combining marks belong to words. */
static const char k_re_qwen35[] =
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*" RE_WS_TAIL;

/* GPT-2. llama.cpp's pattern ends at \s+(?!\S); its hand-written matcher then takes a
 * remaining whitespace run whole, which is the final \s+. */
static const char k_re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A letter that is not ASCII lowercase / not ASCII uppercase (see above). */
#define RE_NOT_LOWER "(?:(?=\\p{L})[^a-z])"
#define RE_NOT_UPPER "(?:(?=\\p{L})[^A-Z])"
#define RE_O200K_WORDS(suffix)                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_NOT_LOWER "*" RE_NOT_UPPER "+" suffix                         \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_NOT_LOWER "+" RE_NOT_UPPER "*" suffix

static const char k_re_gpt4o[] =
    RE_O200K_WORDS(RE_CONTRACTIONS "?") "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" RE_WS_TAIL;

static const char k_re_tekken[] = RE_O200K_WORDS("") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" RE_WS_TAIL;

/* llama.cpp's default BPE pre-tokenizer (no or "default" tokenizer.ggml.pre). */
static const char *const k_set_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", k_re_gpt2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};

/* CJK / Hangul runs (DeepSeek); [\x{0800}-\x{4E00}] minus whitespace (U+1680, U+2000.., U+3000). */
#define RE_DS_CJK "(?:[\\x{4E00}-\\x{9FA5}\\x{AC00}-\\x{D7FF}]|(?!\\s)[\\x{0800}-\\x{4E00}])+"

static const char *const k_set_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{00B5}\\x{00C0}-\\x{00D6}\\x{00D8}-\\x{00F6}\\x{00F8}-\\x{01BA}\\x{01BC}-\\x{01BF}\\x{01C4}-"
    "\\x{0293}\\x{0295}-\\x{02AF}\\x{0370}-\\x{0373}\\x{0376}\\x{0377}\\x{037B}-\\x{037D}\\x{037F}\\x{0386}"
    "\\x{0388}-\\x{038A}\\x{038C}\\x{038E}-\\x{03A1}\\x{03A3}-\\x{03F5}\\x{03F7}-\\x{0481}\\x{048A}-\\x{052F}"
    "\\x{0531}-\\x{0556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-"
    "\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-"
    "\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-"
    "\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-"
    "\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-"
    "\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+",
    "\\s+$",
    RE_DS_CJK,
    "\\p{N}+",
    NULL,
};

static const char *const k_set_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}", NULL,
};

static const char *const k_set_deepseek3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*" RE_WS_TAIL,
    NULL,
};

static const char *const k_set_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", k_re_gpt2, "[0-9][0-9][0-9]", NULL};

/* BLOOM-style: everything up to whitespace or one of . , ! ? … 。 ， 、 । ۔ ، ( ) | */
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

static const char *const k_set_llama3[] = {k_re_llama3, NULL};
static const char *const k_set_qwen2[] = {k_re_qwen2, NULL};
static const char *const k_set_qwen35[] = {k_re_qwen35, NULL};
static const char *const k_set_gpt2[] = {k_re_gpt2, NULL};
static const char *const k_set_smollm[] = {"\\p{N}", k_re_gpt2, NULL};
static const char *const k_set_gpt4o[] = {k_re_gpt4o, NULL};
static const char *const k_set_tekken[] = {k_re_tekken, NULL};
static const char *const k_set_poro[] = {RE_PORO, NULL};
static const char *const k_set_viking[] = {RE_PORO, "\\p{N}", NULL};
static const char *const k_set_seed_coder[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+" RE_WS_TAIL, NULL};
/* BailingMoE's possessive ?+ and ++ run greedy, as in llama.cpp. */
static const char *const k_set_bailingmoe[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const k_set_exaone_moe[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const k_set_minicpm5[] = {
    "\\p{N}{1,3}",
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" RE_WS_TAIL, NULL};
/* Jais 2: Llama 3 with whitespace runs cut into power-of-two lengths. */
static const char *const k_set_jais2[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)"
    "|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    NULL};
static const char *const k_set_laguna[] = {"[^\\n]+|[\\n]+", k_re_qwen2, NULL};

static const char *const *const k_sets[RP_PRE_COUNT] = {
    [RP_PRE_DEFAULT] = k_set_default,
    [RP_PRE_LLAMA3] = k_set_llama3,
    [RP_PRE_QWEN2] = k_set_qwen2,
    [RP_PRE_GPT2] = k_set_gpt2,
    [RP_PRE_SMOLLM] = k_set_smollm,
    [RP_PRE_GPT4O] = k_set_gpt4o,
    [RP_PRE_TEKKEN] = k_set_tekken,
    [RP_PRE_DEEPSEEK_LLM] = k_set_deepseek_llm,
    [RP_PRE_DEEPSEEK_CODER] = k_set_deepseek_coder,
    [RP_PRE_DEEPSEEK3] = k_set_deepseek3,
    [RP_PRE_FALCON] = k_set_falcon,
    [RP_PRE_QWEN35] = k_set_qwen35,
    [RP_PRE_PORO] = k_set_poro,
    [RP_PRE_VIKING] = k_set_viking,
    [RP_PRE_SEED_CODER] = k_set_seed_coder,
    [RP_PRE_BAILINGMOE] = k_set_bailingmoe,
    [RP_PRE_EXAONE_MOE] = k_set_exaone_moe,
    [RP_PRE_MINICPM5] = k_set_minicpm5,
    [RP_PRE_JAIS2] = k_set_jais2,
    [RP_PRE_LAGUNA] = k_set_laguna,
};

#define RP_PRETOK_MAX 6   /* regexes in the longest list (deepseek-llm) */

struct rp_pretok {
    int n;
    pcre2_code *re[RP_PRETOK_MAX];
};

void rp_pretok_free(rp_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p);
}

rp_status rp_pretok_create(rp_tok_pre pre, rp_pretok **out) {
    *out = NULL;
    if ((unsigned)pre >= RP_PRE_COUNT || !k_sets[pre])
        return rp_errorf(RP_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer %d", (int)pre);
    rp_pretok *p = calloc(1, sizeof *p);
    if (!p) return rp_errorf(RP_ERR_NOMEM, "tokenizer: pre-tokenizer");
    for (const char *const *pat = k_sets[pre]; *pat; pat++) {
        if (p->n == RP_PRETOK_MAX) {
            rp_pretok_free(p);
            return rp_errorf(RP_ERR_INTERNAL, "tokenizer: pre-tokenizer %d has over %d regexes", (int)pre,
                             RP_PRETOK_MAX);
        }
        int err;
        PCRE2_SIZE erroff;
        /* MATCH_INVALID_UTF: invalid UTF-8 is never matched (it becomes gaps we
         * emit as their own pieces) instead of failing the whole match.
         * NO_AUTO_CAPTURE: groups only group. DOLLAR_ENDONLY: $ is the end of
         * the piece, as in std::regex, not also before a final newline. */
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)*pat, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_NO_AUTO_CAPTURE |
                                           PCRE2_DOLLAR_ENDONLY,
                                       &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            int k = p->n;
            rp_pretok_free(p);
            return rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex %d of pre-tokenizer %d: compile failed at %zu: %s", k,
                             (int)pre, (size_t)erroff, (const char *)msg);
        }
        /* JIT is an optimization only: without it pcre2_match interprets. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->re[p->n++] = re;
    }
    *out = p;
    return RP_OK;
}

typedef struct split_ctx {
    const rp_pretok *p;
    pcre2_match_data *md;        /* shared by all levels: ovector read before recursing */
    uint32_t opts[RP_PRETOK_MAX];   /* PCRE2_NO_JIT once a level's JIT stack ran out */
    rp_pretok_fn fn;
    void *user;
} split_ctx;

/* Splits piece [s, s+len) with regex k; each match and each gap goes on to regex k+1. */
static rp_status split_level(split_ctx *c, int k, const char *s, size_t len) {
    if (len == 0) return RP_OK;
    if (k == c->p->n) return c->fn(c->user, s, len);
    const pcre2_code *re = c->p->re[k];
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, c->opts[k], c->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !(c->opts[k] & PCRE2_NO_JIT)) {
            c->opts[k] |= PCRE2_NO_JIT;   /* the interpreter keeps its backtrack state on the heap */
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return split_level(c, k + 1, s + pos, len - pos);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex %d match failed at byte %zu of a piece: %s", k, pos,
                             (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (ms < pos || me < ms || me > len)
            return rp_errorf(RP_ERR_INTERNAL, "tokenizer: regex match [%zu,%zu) outside [%zu,%zu)", ms, me, pos, len);
        if (me == ms) {
            /* None of our patterns matches empty; if one ever did, take one
             * character so the loop always advances. */
            size_t cl = rp_utf8_len((unsigned char)s[ms]);
            if (cl > len - ms) cl = len - ms;
            me = ms + cl;
        }
        RP_TRY(split_level(c, k + 1, s + pos, ms - pos));
        RP_TRY(split_level(c, k + 1, s + ms, me - ms));
        pos = me;
    }
    return RP_OK;
}

rp_status rp_pretok_split(const rp_pretok *p, const char *text, size_t len, rp_pretok_fn fn, void *user) {
    if (len == 0) return RP_OK;
    /* Match data is per call so one tokenizer can encode on many threads. */
    split_ctx c = {.p = p, .fn = fn, .user = user};
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) return rp_errorf(RP_ERR_NOMEM, "tokenizer: regex match data");
    rp_status st = split_level(&c, 0, text, len);
    pcre2_match_data_free(c.md);
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
