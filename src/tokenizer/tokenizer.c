/* tokenizer.c — vocabulary loading from GGUF (SentencePiece, byte-level BPE, WordPiece), special tokens, encode driver,
 * decode and streaming detokenization. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------------------
 * Hashing and the string -> id map
 * ------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

uint64_t rp_tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ mix64(v)) * 0x9e3779b97f4a7c15ULL;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, s, n);
        h = (h ^ mix64(v ^ n)) * 0x9e3779b97f4a7c15ULL;
    }
    return mix64(h);
}

int32_t rp_tok_lookup(const rp_tokenizer *t, const char *s, size_t n) {
    if (!t->map.slots) return -1;
    uint64_t h = rp_tok_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & t->map.mask;; i = (i + 1) & t->map.mask) {
        const rp_tok_slot *sl = &t->map.slots[i];
        if (sl->id < 0) return -1;
        if (sl->tag == tag && t->str_len[sl->id] == n && memcmp(t->arena + t->str_off[sl->id], s, n) == 0)
            return sl->id;
    }
}

rp_status rp_tok_strmap_build(rp_tokenizer *t) {
    uint64_t cap = 16;
    while (cap < (uint64_t)t->n_vocab * 2) cap *= 2;
    t->map.slots = malloc(cap * sizeof *t->map.slots);
    if (!t->map.slots) return rp_errorf(RP_ERR_NOMEM, "tokenizer: vocab map of %llu slots", (unsigned long long)cap);
    for (uint64_t i = 0; i < cap; i++) t->map.slots[i].id = -1;
    t->map.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t n = t->str_len[id];
        if (n == 0) continue;   /* empty strings are never looked up */
        const char *s = t->arena + t->str_off[id];
        uint64_t h = rp_tok_hash(s, n);
        uint32_t tag = (uint32_t)(h >> 32);
        for (uint64_t i = h & t->map.mask;; i = (i + 1) & t->map.mask) {
            rp_tok_slot *sl = &t->map.slots[i];
            if (sl->id < 0) {
                sl->id = id;
                sl->tag = tag;
                break;
            }
            /* Duplicate string: the first id keeps it (as llama.cpp's emplace). */
            if (sl->tag == tag && t->str_len[sl->id] == n && memcmp(t->arena + t->str_off[sl->id], s, n) == 0)
                break;
        }
    }
    return RP_OK;
}

/* ---------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------- */

int rp_utf8_check(const unsigned char *s, size_t n, size_t *len) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *len = 1;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;        /* no overlongs */
        if (c == 0xED) hi = 0x9F;        /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;        /* <= U+10FFFF */
    } else {
        *len = 1;                        /* continuation byte, C0/C1, F5..FF */
        return -1;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return 0;
        }
        unsigned char b = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *len = i;
            return -1;
        }
    }
    *len = need;
    return 1;
}

/* Decodes the valid sequence at s (rp_utf8_check said 1, length n). */
static uint32_t utf8_cp(const unsigned char *s, size_t n) {
    switch (n) {
    case 1: return s[0];
    case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default: return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

/* ---------------------------------------------------------------------------
 * GGUF helpers
 * ------------------------------------------------------------------------- */

static bool vtype_is_int(rp_gguf_vtype t) {
    return t == RP_GGUF_U8 || t == RP_GGUF_I8 || t == RP_GGUF_U16 || t == RP_GGUF_I16 || t == RP_GGUF_U32 ||
           t == RP_GGUF_I32 || t == RP_GGUF_U64 || t == RP_GGUF_I64;
}

/* Element i of a packed little-endian numeric array, widened (memcpy: the
 * mapping gives no alignment guarantee). */
static double arr_num(const void *data, rp_gguf_vtype t, uint64_t i) {
    const unsigned char *p = data;
    switch (t) {
    case RP_GGUF_U8: return p[i];
    case RP_GGUF_I8: return (int8_t)p[i];
    case RP_GGUF_U16: { uint16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case RP_GGUF_I16: { int16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case RP_GGUF_U32: { uint32_t v; memcpy(&v, p + i * 4, 4); return v; }
    case RP_GGUF_I32: { int32_t v; memcpy(&v, p + i * 4, 4); return v; }
    case RP_GGUF_F32: { float v; memcpy(&v, p + i * 4, 4); return v; }
    case RP_GGUF_U64: { uint64_t v; memcpy(&v, p + i * 8, 8); return (double)v; }
    case RP_GGUF_I64: { int64_t v; memcpy(&v, p + i * 8, 8); return (double)v; }
    case RP_GGUF_F64: { double v; memcpy(&v, p + i * 8, 8); return v; }
    default: return 0;
    }
}

/* Optional numeric array of at least n elements: *data NULL when absent. */
static rp_status get_num_arr(const rp_gguf *g, const char *key, uint64_t n, bool allow_float,
                             const void **data, rp_gguf_vtype *type) {
    *data = NULL;
    rp_gguf_vtype et;
    uint64_t len;
    int64_t kv;
    rp_status st = rp_gguf_get_arr(g, key, &et, &len, &kv);
    if (st == RP_ERR_NOT_FOUND) {
        rp_error_clear();
        return RP_OK;
    }
    if (st != RP_OK) return st;
    if (!vtype_is_int(et) && !(allow_float && (et == RP_GGUF_F32 || et == RP_GGUF_F64)))
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: %s is an array of %s", key, rp_gguf_vtype_name(et));
    if (len < n)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: %s has %llu entries for %llu tokens", key,
                         (unsigned long long)len, (unsigned long long)n);
    *data = rp_gguf_kv_arr_data(g, (uint64_t)kv);
    *type = et;
    if (!*data && n > 0) return rp_errorf(RP_ERR_FORMAT, "tokenizer: %s has no data", key);
    return RP_OK;
}

/* Optional special-token id. Absent keeps *id; a value outside the vocab also
 * keeps the default (llama.cpp does the same, with a warning); a non-integer
 * value is a format error. */
static rp_status get_tok_id(const rp_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t kv = rp_gguf_find_key(g, key);
    if (kv < 0) return RP_OK;
    rp_gguf_vtype vt = rp_gguf_kv_type(g, (uint64_t)kv);
    if (!vtype_is_int(vt))
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: %s is a %s, not an integer", key, rp_gguf_vtype_name(vt));
    int32_t v;
    if (rp_gguf_get_i32(g, key, &v) != RP_OK) {   /* does not fit int32: out of any vocab */
        rp_error_clear();
        return RP_OK;
    }
    if (v >= 0 && v < n_vocab) *id = v;
    return RP_OK;
}

static rp_status get_flag(const rp_gguf *g, const char *key, bool *out) {
    bool v;
    rp_status st = rp_gguf_get_bool(g, key, &v);
    if (st == RP_ERR_NOT_FOUND) {
        rp_error_clear();
        return RP_OK;
    }
    if (st != RP_OK) return st;
    *out = v;
    return RP_OK;
}

/* ---------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------- */

/* "<0xXX>" -> byte value, or -1. */
static int parse_byte_token(const char *s, uint32_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Writes the detokenized bytes of token id into dst (NULL: only count);
 * returns the length. Never longer than 3 * the token string. */
static size_t make_piece(const rp_tokenizer *t, int32_t id, char *dst) {
    const char *s = t->arena + t->str_off[id];
    uint32_t n = t->str_len[id];
    switch (t->types[id]) {
    case RP_TOKTYPE_CONTROL:
    case RP_TOKTYPE_UNKNOWN:
    case RP_TOKTYPE_USER_DEFINED:
        if (dst) memcpy(dst, s, n);
        return n;
    case RP_TOKTYPE_BYTE: {
        int b = parse_byte_token(s, n);
        if (b < 0) {   /* a BYTE token not spelled <0xXX>: render its text */
            if (dst) memcpy(dst, s, n);
            return n;
        }
        if (dst) dst[0] = (char)b;
        return 1;
    }
    case RP_TOKTYPE_NORMAL:
        break;
    default:
        return 0;   /* UNUSED / undefined types render as nothing (llama.cpp) */
    }
    size_t m = 0;
    const unsigned char *u = (const unsigned char *)s;
    if (t->kind == RP_TOK_SPM || t->kind == RP_TOK_WPM) {   /* WordPiece: "▁" starts a word, as llama.cpp renders it */
        for (uint32_t i = 0; i < n;) {
            if (n - i >= 3 && memcmp(u + i, "\xe2\x96\x81", 3) == 0) {
                if (dst) dst[m] = ' ';
                m++;
                i += 3;
            } else {
                if (dst) dst[m] = (char)u[i];
                m++;
                i++;
            }
        }
        return m;
    }
    /* Byte-level BPE: each character stands for one byte. Characters outside
     * the 256-entry table (not produced by real vocabs) are kept verbatim. */
    for (uint32_t i = 0; i < n;) {
        size_t sl;
        int r = rp_utf8_check(u + i, n - i, &sl);
        int b = r == 1 ? rp_bpe_cp_to_byte(utf8_cp(u + i, sl)) : -1;
        if (b >= 0) {
            if (dst) dst[m] = (char)b;
            m++;
        } else {
            if (dst) memcpy(dst + m, u + i, sl);
            m += sl;
        }
        i += (uint32_t)sl;
    }
    return m;
}

static rp_status build_pieces(rp_tokenizer *t) {
    uint64_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) total += make_piece(t, id, NULL);
    t->piece_arena = malloc(total + 1);
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    if (!t->piece_arena || !t->piece_off || !t->piece_len)
        return rp_errorf(RP_ERR_NOMEM, "tokenizer: piece cache of %llu bytes", (unsigned long long)total);
    uint64_t off = 0;
    t->max_piece = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t m = make_piece(t, id, t->piece_arena + off);
        t->piece_off[id] = off;
        t->piece_len[id] = (uint32_t)m;
        if (m > t->max_piece) t->max_piece = (uint32_t)m;
        off += m;
    }
    return RP_OK;
}

static rp_status build_specials(rp_tokenizer *t) {
    size_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->types[id];
        if ((ty == RP_TOKTYPE_CONTROL || ty == RP_TOKTYPE_USER_DEFINED || ty == RP_TOKTYPE_UNKNOWN) && t->str_len[id] > 0)
            n++;
    }
    t->specials = malloc((n ? n : 1) * sizeof *t->specials);
    if (!t->specials) return rp_errorf(RP_ERR_NOMEM, "tokenizer: %zu special tokens", n);
    size_t k = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->types[id];
        if ((ty == RP_TOKTYPE_CONTROL || ty == RP_TOKTYPE_USER_DEFINED || ty == RP_TOKTYPE_UNKNOWN) && t->str_len[id] > 0) {
            t->specials[k].id = id;
            t->specials[k].len = t->str_len[id];
            t->specials[k].always = ty == RP_TOKTYPE_USER_DEFINED;
            k++;
        }
    }
    /* Bucket by first byte (counting sort), then order each bucket. */
    uint32_t count[257] = {0};
    for (size_t i = 0; i < n; i++) count[(unsigned char)t->arena[t->str_off[t->specials[i].id]] + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    memcpy(t->special_start, count, sizeof count);
    rp_tok_special *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return rp_errorf(RP_ERR_NOMEM, "tokenizer: %zu special tokens", n);
    uint32_t fill[256];
    memcpy(fill, count, sizeof fill);
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)t->arena[t->str_off[t->specials[i].id]];
        tmp[fill[b]++] = t->specials[i];
    }
    /* Within a bucket: longest first, then lowest id (ids were visited in
     * increasing order, so a stable sort by length suffices). */
    for (int b = 0; b < 256; b++) {
        uint32_t lo = count[b], hi = count[b + 1];
        for (uint32_t i = lo + 1; i < hi; i++) {   /* insertion sort: buckets are small */
            rp_tok_special v = tmp[i];
            uint32_t j = i;
            while (j > lo && tmp[j - 1].len < v.len) {
                tmp[j] = tmp[j - 1];
                j--;
            }
            tmp[j] = v;
        }
    }
    free(t->specials);
    t->specials = tmp;
    return RP_OK;
}

/* Texts that end a turn in common chat formats (llama.cpp's list, minus
 * model-specific workarounds). Counted only when the vocab marks the token
 * as control / user-defined, so ordinary text tokens never stop generation. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "<end_of_utterance>", "</s>", "<eos>",
    /* Qwen FIM separators: llama.cpp ends generation on these as well */
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};

static void build_eog(rp_tokenizer *t) {
    for (size_t i = 0; i < sizeof k_eog_texts / sizeof *k_eog_texts; i++) {
        int32_t id = rp_tok_lookup(t, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id < 0) continue;
        uint8_t ty = t->types[id];
        if (ty == RP_TOKTYPE_CONTROL || ty == RP_TOKTYPE_USER_DEFINED) t->flags[id] |= RP_TOKF_EOG;
    }
    if (t->eos >= 0) t->flags[t->eos] |= RP_TOKF_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= RP_TOKF_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= RP_TOKF_EOG;
}

/* BPE pre-tokenizer names (tokenizer.ggml.pre) as llama.cpp spells them, each with the regex list
 * (pretok.c) and the options llama.cpp gives it. PRE_NFC is ours: HF's Qwen2 tokenizer normalizes
 * to NFC (llama.cpp does not). tests/data/pretok_vectors.json holds llama.cpp's ids for each name. */
enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2, PRE_NFC = 4 };
#define PRE_LLAMA3_FLAGS (PRE_IGNORE_MERGES | PRE_ADD_BOS)

typedef struct rp_pre_name {
    const char *name;
    rp_tok_pre pre;
    unsigned flags;
} rp_pre_name;

static const rp_pre_name k_pre_names[] = {
    {"default", RP_PRE_DEFAULT, 0},   /* first: also used when the key is missing */
    {"llama-bpe", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS}, {"llama3", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS},
    {"llama-v3", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS}, {"falcon3", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS},
    {"falcon-h1", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS}, {"pixtral", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS},
    {"midm-2.0", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS}, {"lfm2", RP_PRE_LLAMA3, PRE_LLAMA3_FLAGS},
    {"dbrx", RP_PRE_LLAMA3, 0}, {"smaug-bpe", RP_PRE_LLAMA3, 0},
    {"qwen2", RP_PRE_QWEN2, PRE_NFC}, {"deepseek-r1-qwen", RP_PRE_QWEN2, PRE_NFC},
    {"kormo", RP_PRE_QWEN2, 0}, {"f2llmv2", RP_PRE_QWEN2, 0}, {"megrez", RP_PRE_QWEN2, 0},
    {"stablelm2", RP_PRE_QWEN2, 0}, {"hunyuan", RP_PRE_QWEN2, 0}, {"solar-open", RP_PRE_QWEN2, 0},
    {"grok-2", RP_PRE_QWEN2, 0},
    {"qwen35", RP_PRE_QWEN35, 0},
    {"gpt-2", RP_PRE_GPT2, 0}, {"phi-2", RP_PRE_GPT2, 0}, {"mpt", RP_PRE_GPT2, 0}, {"olmo", RP_PRE_GPT2, 0},
    {"jais", RP_PRE_GPT2, 0}, {"gigachat", RP_PRE_GPT2, 0}, {"a.x-4.0", RP_PRE_GPT2, 0}, {"mellum", RP_PRE_GPT2, 0},
    {"exaone4", RP_PRE_GPT2, 0}, {"trillion", RP_PRE_GPT2, 0}, {"granite-docling", RP_PRE_GPT2, 0},
    {"smollm", RP_PRE_SMOLLM, 0}, {"starcoder", RP_PRE_SMOLLM, 0}, {"refact", RP_PRE_SMOLLM, 0},
    {"command-r", RP_PRE_SMOLLM, 0}, {"codeshell", RP_PRE_SMOLLM, 0}, {"exaone", RP_PRE_SMOLLM, 0},
    {"minerva-7b", RP_PRE_SMOLLM, 0}, {"mellum2", RP_PRE_SMOLLM, 0},
    {"gpt-4o", RP_PRE_GPT4O, 0}, {"llama4", RP_PRE_GPT4O, 0}, {"kanana2", RP_PRE_GPT4O, 0},
    {"talkie", RP_PRE_GPT4O, 0}, {"minimax-m2", RP_PRE_GPT4O, 0},
    {"tekken", RP_PRE_TEKKEN, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"deepseek-llm", RP_PRE_DEEPSEEK_LLM, 0}, {"deepseek-coder", RP_PRE_DEEPSEEK_CODER, 0},
    {"deepseek-v3", RP_PRE_DEEPSEEK3, 0}, {"hunyuan-dense", RP_PRE_DEEPSEEK3, 0}, {"joyai-llm", RP_PRE_DEEPSEEK3, 0},
    {"falcon", RP_PRE_FALCON, 0},
    {"poro-chat", RP_PRE_PORO, 0}, {"bloom", RP_PRE_PORO, 0}, {"gpt3-finnish", RP_PRE_PORO, 0},
    {"viking", RP_PRE_VIKING, 0},
    {"seed-coder", RP_PRE_SEED_CODER, 0},
    {"bailingmoe", RP_PRE_BAILINGMOE, 0}, {"bailingmoe2", RP_PRE_BAILINGMOE, 0}, {"llada-moe", RP_PRE_BAILINGMOE, 0},
    {"exaone-moe", RP_PRE_EXAONE_MOE, 0},
    {"minicpm5", RP_PRE_MINICPM5, PRE_IGNORE_MERGES},
    {"jais-2", RP_PRE_JAIS2, 0},
    {"laguna", RP_PRE_LAGUNA, 0},
};

static rp_status load_impl(rp_tokenizer *t, const rp_gguf *g) {
    /* ---- model / pre-tokenizer ---- */
    rp_str model;
    rp_status st = rp_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st == RP_ERR_NOT_FOUND) return rp_errorf(RP_ERR_FORMAT, "tokenizer: no tokenizer.ggml.model key");
    if (st != RP_OK) return st;
    if (rp_str_eq(model, "llama")) {
        t->kind = RP_TOK_SPM;
    } else if (rp_str_eq(model, "gpt2")) {
        t->kind = RP_TOK_BPE;
    } else if (rp_str_eq(model, "bert")) {
        t->kind = RP_TOK_WPM;   /* tokenizer.ggml.pre is not read (llama.cpp ignores it for WordPiece) */
    } else {
        return rp_errorf(RP_ERR_UNSUPPORTED, "tokenizer: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, bert)",
                         (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }
    rp_str pre = {"", 0};
    st = rp_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (st == RP_ERR_NOT_FOUND) {
        rp_error_clear();
        pre.ptr = "";
        pre.len = 0;
    } else if (st != RP_OK) {
        return st;
    }
    t->pre = RP_PRE_DEFAULT;
    bool bos_default = t->kind == RP_TOK_SPM || t->kind == RP_TOK_WPM;
    if (t->kind == RP_TOK_BPE) {
        /* A missing name gets the default regexes, as in llama.cpp. */
        const rp_pre_name *pn = NULL;
        if (pre.len == 0) {
            pn = &k_pre_names[0];
        } else {
            for (size_t i = 0; i < sizeof k_pre_names / sizeof *k_pre_names && !pn; i++)
                if (rp_str_eq(pre, k_pre_names[i].name)) pn = &k_pre_names[i];
        }
        if (!pn) {
            char names[1536];
            size_t m = 0;
            names[0] = '\0';
            /* one name per family (the first in the table): every alias would not fit in an error message */
            for (size_t i = 0; i < sizeof k_pre_names / sizeof *k_pre_names && m < sizeof names; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++) seen = k_pre_names[j].pre == k_pre_names[i].pre;
                if (seen) continue;
                int w = snprintf(names + m, sizeof names - m, "%s%s", m ? ", " : "", k_pre_names[i].name);
                if (w < 0) break;
                m += (size_t)w;
            }
            return rp_errorf(RP_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.*s' is not supported (families: %s; README.md, Supported models, lists every accepted name)",
                             (int)(pre.len > 64 ? 64 : pre.len), pre.ptr, names);
        }
        t->pre = pn->pre;
        t->ignore_merges = (pn->flags & PRE_IGNORE_MERGES) != 0;
        t->nfc = (pn->flags & PRE_NFC) != 0;
        bos_default = (pn->flags & PRE_ADD_BOS) != 0;
    }

    /* ---- tokens ---- */
    rp_gguf_vtype et;
    uint64_t n;
    int64_t tok_kv;
    st = rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &tok_kv);
    if (st == RP_ERR_NOT_FOUND) return rp_errorf(RP_ERR_FORMAT, "tokenizer: no tokenizer.ggml.tokens key");
    if (st != RP_OK) return st;
    if (et != RP_GGUF_STRING)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is an array of %s, not strings",
                         rp_gguf_vtype_name(et));
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %llu entries", (unsigned long long)n);
    t->n_vocab = (int32_t)n;

    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        rp_str s = rp_gguf_kv_arr_str(g, (uint64_t)tok_kv, i);
        if (s.len > UINT32_MAX / 4)
            return rp_errorf(RP_ERR_FORMAT, "tokenizer: token %llu is %llu bytes long", (unsigned long long)i,
                             (unsigned long long)s.len);
        total += s.len + 1;
    }
    t->arena = malloc(total);
    t->str_off = malloc(n * sizeof *t->str_off);
    t->str_len = malloc(n * sizeof *t->str_len);
    t->scores = calloc(n, sizeof *t->scores);
    t->types = malloc(n);
    t->flags = calloc(n, 1);
    if (!t->arena || !t->str_off || !t->str_len || !t->scores || !t->types || !t->flags)
        return rp_errorf(RP_ERR_NOMEM, "tokenizer: vocab of %llu tokens (%llu bytes)", (unsigned long long)n,
                         (unsigned long long)total);
    uint64_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        rp_str s = rp_gguf_kv_arr_str(g, (uint64_t)tok_kv, i);
        if (s.len) memcpy(t->arena + off, s.ptr, s.len);
        t->arena[off + s.len] = '\0';
        if (s.len > t->max_token_len) t->max_token_len = (uint32_t)s.len;
        t->str_off[i] = off;
        t->str_len[i] = (uint32_t)s.len;
        off += s.len + 1;
    }

    const void *data;
    rp_gguf_vtype dt;
    RP_TRY(get_num_arr(g, "tokenizer.ggml.scores", n, true, &data, &dt));
    if (data)
        for (uint64_t i = 0; i < n; i++) t->scores[i] = (float)arr_num(data, dt, i);
    RP_TRY(get_num_arr(g, "tokenizer.ggml.token_type", n, false, &data, &dt));
    for (uint64_t i = 0; i < n; i++) {
        double v = data ? arr_num(data, dt, i) : RP_TOKTYPE_NORMAL;
        /* Unknown type values become 0 ("undefined": renders as nothing). */
        t->types[i] = (v >= RP_TOKTYPE_NORMAL && v <= RP_TOKTYPE_BYTE) ? (uint8_t)v : 0;
    }

    RP_TRY(rp_tok_strmap_build(t));

    /* ---- special ids and flags ---- */
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = -1;
    if (t->kind == RP_TOK_SPM) {
        /* SentencePiece defaults (llama.cpp): <unk>=0, <s>=1, </s>=2. */
        if (n > 0) t->unk = 0;
        if (n > 1) t->bos = 1;
        if (n > 2) t->eos = 2;
        t->add_space_prefix = true;
    } else {
        t->add_space_prefix = false;
    }
    if (t->kind == RP_TOK_WPM) {
        /* BERT's ids (llama.cpp's defaults): [PAD] 0, [UNK] 100, [CLS] 101 (the BOS), [SEP] 102 */
        if (n > 0) t->pad = 0;
        if (n > 100) t->unk = 100;
        if (n > 101) t->bos = 101;
        if (n > 102) t->sep = 102;
        t->wpm_lowercase = true;
        RP_TRY(get_flag(g, "tokenizer.ggml.normalizer.lowercase", &t->wpm_lowercase));
        t->wpm_strip_accents = t->wpm_lowercase;
        RP_TRY(get_flag(g, "tokenizer.ggml.normalizer.strip_accents", &t->wpm_strip_accents));
        RP_TRY(get_tok_id(g, "tokenizer.ggml.seperator_token_id", t->n_vocab, &t->sep));
    }
    t->add_bos = bos_default;   /* tokenizer.ggml.add_bos_token may override */
    RP_TRY(get_tok_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos));
    RP_TRY(get_tok_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos));
    RP_TRY(get_tok_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot));
    RP_TRY(get_tok_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &t->eom));
    RP_TRY(get_tok_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk));
    RP_TRY(get_tok_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad));
    RP_TRY(get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos));
    RP_TRY(get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos));
    if (t->kind == RP_TOK_SPM) RP_TRY(get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix));
    if (t->kind == RP_TOK_WPM && (t->unk < 0 || t->bos < 0 || t->sep < 0))
        return rp_errorf(RP_ERR_FORMAT, "tokenizer: WordPiece vocabulary of %d tokens without [UNK] (%d), [CLS] (%d) and "
                         "[SEP] (%d) ids (tokenizer.ggml.unknown_token_id, bos_token_id, seperator_token_id)",
                         t->n_vocab, t->unk, t->bos, t->sep);
    if (t->eot < 0) t->eot = rp_tok_lookup(t, "<|eot_id|>", 10);
    if (t->eot < 0) t->eot = rp_tok_lookup(t, "<|im_end|>", 10);
    if (t->eom < 0) t->eom = rp_tok_lookup(t, "<|eom_id|>", 10);

    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->types[id] == RP_TOKTYPE_CONTROL || t->types[id] == RP_TOKTYPE_UNKNOWN) t->flags[id] |= RP_TOKF_HIDDEN;
    build_eog(t);

    /* ---- byte tokens ---- */
    for (int b = 0; b < 256; b++) {
        if (t->kind == RP_TOK_SPM) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = rp_tok_lookup(t, hex, 6);
            if (id < 0) {   /* some vocabs spell the byte itself */
                char c = (char)b;
                id = rp_tok_lookup(t, &c, 1);
            }
            t->byte_tok[b] = id;
        } else if (t->kind == RP_TOK_WPM) {
            t->byte_tok[b] = -1;   /* WordPiece has no byte tokens: a word without a split is [UNK] */
        } else {
            uint32_t cp = rp_bpe_byte_to_cp((uint8_t)b);
            char u[2];
            size_t ul;
            if (cp < 0x80) {
                u[0] = (char)cp;
                ul = 1;
            } else {
                u[0] = (char)(0xC0 | (cp >> 6));
                u[1] = (char)(0x80 | (cp & 0x3F));
                ul = 2;
            }
            t->byte_tok[b] = rp_tok_lookup(t, u, ul);
        }
    }

    RP_TRY(build_pieces(t));
    RP_TRY(build_specials(t));

    if (t->kind == RP_TOK_BPE) {
        RP_TRY(rp_bpe_load_merges(t, g));
        RP_TRY(rp_pretok_create(t->pre, &t->pretok));
    }
    return RP_OK;
}

rp_status rp_tokenizer_load(const rp_gguf *g, rp_tokenizer **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: load: out is NULL");
    *out = NULL;
    if (!g) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: load: gguf is NULL");
    rp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return rp_errorf(RP_ERR_NOMEM, "tokenizer: load");
    rp_status st = load_impl(t, g);
    if (st != RP_OK) {
        rp_tokenizer_free(t);
        return st;
    }
    *out = t;
    return RP_OK;
}

void rp_tokenizer_free(rp_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->scores);
    free(t->types);
    free(t->flags);
    free(t->map.slots);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->specials);
    free(t->merges.slots);
    rp_pretok_free(t->pretok);
    free(t);
}

/* ---------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------- */

rp_tok_kind rp_tokenizer_kind(const rp_tokenizer *t) { return t->kind; }
rp_tok_pre rp_tokenizer_pre(const rp_tokenizer *t) { return t->pre; }
int32_t rp_tokenizer_n_vocab(const rp_tokenizer *t) { return t->n_vocab; }
rp_token rp_tokenizer_bos(const rp_tokenizer *t) { return t->bos; }
rp_token rp_tokenizer_eos(const rp_tokenizer *t) { return t->eos; }
rp_token rp_tokenizer_eot(const rp_tokenizer *t) { return t->eot; }
bool rp_tokenizer_add_bos(const rp_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool rp_tokenizer_add_eos(const rp_tokenizer *t) { return t->add_eos && t->eos >= 0; }

bool rp_tokenizer_is_eog(const rp_tokenizer *t, rp_token id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & RP_TOKF_EOG);
}

bool rp_tokenizer_is_control(const rp_tokenizer *t, rp_token id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & RP_TOKF_HIDDEN);
}

const char *rp_tokenizer_token_str(const rp_tokenizer *t, rp_token id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return t->arena + t->str_off[id];
}

rp_token rp_tokenizer_find(const rp_tokenizer *t, const char *piece) {
    if (!piece) return -1;
    return rp_tok_lookup(t, piece, strlen(piece));
}

size_t rp_tokenizer_max_piece_len(const rp_tokenizer *t) { return t->max_piece; }

size_t rp_detok_bound(const rp_tokenizer *t) {
    /* Worst case: 3 held bytes + a piece, every byte invalid -> U+FFFD each. */
    return 3 * ((size_t)t->max_piece + 3) + 1;
}

/* ---------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------- */

static rp_status encode_fragment(const rp_tokenizer *t, const char *s, size_t n, bool after_special,
                                 rp_tok_out *out) {
    if (n == 0) return RP_OK;
    if (t->kind == RP_TOK_SPM) return rp_spm_encode(t, s, n, t->add_space_prefix && after_special, out);
    if (t->kind == RP_TOK_WPM) return rp_wpm_encode(t, s, n, out);
    return rp_bpe_encode(t, s, n, out);
}

rp_status rp_tokenizer_encode(const rp_tokenizer *t, const char *text, size_t len, rp_tokenize_opts opts,
                              rp_token *ids, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: encode: NULL tokenizer or n_out");
    if (!text && len > 0) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: encode: NULL text with length %zu", len);
    if (!ids && cap > 0) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: encode: NULL ids with cap %zu", cap);

    rp_tok_out out = {ids, cap, 0};
    bool after_special = true;   /* SPM: the first fragment gets the dummy prefix */
    const bool wpm = t->kind == RP_TOK_WPM;   /* llama.cpp: [CLS] ... [SEP] whenever special tokens are added */
    if (opts.add_bos && (t->add_bos || wpm) && t->bos >= 0) rp_tok_out_push(&out, t->bos);

    /* Split the text at special-token texts (leftmost match, longest first at
     * a position); the pieces between are tokenized normally. User-defined
     * tokens (<think>, <tool_call>, ...) match even without parse_special, as
     * in HF tokenizers and llama.cpp; control tokens only with it. */
    size_t frag = 0, pos = 0;
    while (pos < len) {
        unsigned char b = (unsigned char)text[pos];
        uint32_t lo = t->special_start[b], hi = t->special_start[b + 1];
        const rp_tok_special *hit = NULL;
        for (uint32_t k = lo; k < hi; k++) {
            const rp_tok_special *sp = &t->specials[k];
            if (!opts.parse_special && !sp->always) continue;
            if (sp->len <= len - pos && memcmp(text + pos, t->arena + t->str_off[sp->id], sp->len) == 0) {
                hit = sp;
                break;
            }
        }
        if (!hit) {
            pos++;
            continue;
        }
        if (pos > frag) {
            RP_TRY(encode_fragment(t, text + frag, pos - frag, after_special, &out));
        }
        rp_tok_out_push(&out, hit->id);
        after_special = true;
        pos += hit->len;
        frag = pos;
    }
    if (len > frag) RP_TRY(encode_fragment(t, text + frag, len - frag, after_special, &out));
    if (opts.add_bos && wpm && t->sep >= 0) rp_tok_out_push(&out, t->sep);

    *n_out = out.n;
    if (out.n > cap)
        return rp_errorf(RP_ERR_FULL, "tokenizer: encode needs %zu ids, buffer holds %zu", out.n, cap);
    return RP_OK;
}

/* ---------------------------------------------------------------------------
 * Decoding
 * ------------------------------------------------------------------------- */

int rp_tokenizer_token_to_piece(const rp_tokenizer *t, rp_token id, bool render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    if (!render_special && (t->flags[id] & RP_TOKF_HIDDEN)) return 0;
    size_t n = t->piece_len[id];
    if (n > cap) n = cap;
    if (n) memcpy(buf, t->piece_arena + t->piece_off[id], n);
    return (int)n;
}

/* Piece of id as decoded text, honouring the dummy-prefix strip: *strip is
 * true until the first non-control token has been seen. */
static void piece_of(const rp_tokenizer *t, rp_token id, bool render_special, bool *strip, const char **p,
                     size_t *n) {
    *p = t->piece_arena + t->piece_off[id];
    *n = t->piece_len[id];
    bool hidden = (t->flags[id] & RP_TOKF_HIDDEN) != 0;
    if (hidden && !render_special) *n = 0;
    if (*strip && !hidden && *n > 0) {
        if (**p == ' ') {
            (*p)++;
            (*n)--;
        }
        *strip = false;
    }
}

rp_status rp_tokenizer_decode(const rp_tokenizer *t, const rp_token *ids, size_t n, bool render_special,
                              bool strip_leading_space, char *buf, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: decode: NULL tokenizer or n_out");
    if (!ids && n > 0) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: decode: NULL ids with n %zu", n);
    if (!buf && cap > 0) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: decode: NULL buf with cap %zu", cap);
    bool strip = strip_leading_space && ((t->kind == RP_TOK_SPM && t->add_space_prefix) || t->kind == RP_TOK_WPM);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return rp_errorf(RP_ERR_RANGE, "tokenizer: decode: id %d at position %zu outside vocab of %d", ids[i],
                             i, t->n_vocab);
        const char *p;
        size_t m;
        piece_of(t, ids[i], render_special, &strip, &p, &m);
        /* Copy what fits while leaving room for the NUL; keep counting. */
        if (total < cap) {
            size_t room = cap - 1 - total;
            size_t c = m < room ? m : room;
            if (c) memcpy(buf + total, p, c);
        }
        total += m;
    }
    *n_out = total;
    if (cap > 0) buf[total < cap ? total : cap - 1] = '\0';
    if (total + 1 > cap)
        return rp_errorf(RP_ERR_FULL, "tokenizer: decode needs %zu bytes + NUL, buffer holds %zu", total, cap);
    return RP_OK;
}

/* ---------------------------------------------------------------------------
 * Streaming detokenizer
 * ------------------------------------------------------------------------- */

void rp_detok_init(rp_detok *d, const rp_tokenizer *t, bool render_special) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->render_special = render_special;
    d->at_start = t && ((t->kind == RP_TOK_SPM && t->add_space_prefix) || t->kind == RP_TOK_WPM);
}

static void emit(char *out, size_t *m, const void *p, size_t n) {
    if (out) memcpy(out + *m, p, n);
    *m += n;
}

/* Streams pending[0..np) ++ in[0..n) into out (NULL: count only): complete
 * characters pass through, each maximal invalid subpart becomes U+FFFD, and a
 * trailing incomplete character goes to hold[0..*nhold) (<= 3 bytes). */
static size_t detok_run(const char *pending, int np, const char *in, size_t n, char *out, char *hold,
                        int *nhold) {
    size_t m = 0, i = 0;
    *nhold = 0;
    if (np > 0) {
        /* Only the first character can straddle the held bytes and the new piece. */
        unsigned char tmp[8];
        size_t k = (size_t)np;
        memcpy(tmp, pending, k);
        size_t take = n < 4 - k ? n : 4 - k;
        memcpy(tmp + k, in, take);
        size_t sl;
        int r = rp_utf8_check(tmp, k + take, &sl);
        if (r == 0) {   /* still incomplete (the piece was 0..2 bytes) */
            if (hold) memcpy(hold, tmp, k + take);
            *nhold = (int)(k + take);
            return 0;
        }
        if (r == 1) {
            emit(out, &m, tmp, sl);
            i = sl - k;   /* sl > k: held bytes are an incomplete prefix */
        } else {
            emit(out, &m, "\xef\xbf\xbd", 3);
            /* The maximal subpart is the held prefix itself (plus any piece
             * bytes that still continued it, if the check consumed them). */
            i = sl > k ? sl - k : 0;
        }
    }
    while (i < n) {
        size_t sl;
        int r = rp_utf8_check((const unsigned char *)in + i, n - i, &sl);
        if (r == 1) {
            emit(out, &m, in + i, sl);
        } else if (r == 0) {
            if (hold) memcpy(hold, in + i, sl);
            *nhold = (int)sl;
        } else {
            emit(out, &m, "\xef\xbf\xbd", 3);
        }
        i += sl;
    }
    return m;
}

int rp_detok_push(rp_detok *d, rp_token id, char *out, size_t cap) {
    const rp_tokenizer *t = d->tok;
    if (!t || id < 0 || id >= t->n_vocab) return 0;   /* nothing to render */
    bool strip = d->at_start;
    const char *p;
    size_t n;
    piece_of(t, id, d->render_special, &strip, &p, &n);
    int nh;
    size_t need = detok_run(d->pending, d->n_pending, p, n, NULL, NULL, &nh);
    if (need > cap || need > (size_t)INT32_MAX) return -(int)(need > (size_t)INT32_MAX ? INT32_MAX : need);
    char hold[8];
    size_t m = detok_run(d->pending, d->n_pending, p, n, out, hold, &nh);
    memcpy(d->pending, hold, (size_t)nh);
    d->n_pending = nh;
    d->at_start = strip;
    return (int)m;
}

int rp_detok_flush(rp_detok *d, char *out, size_t cap) {
    if (d->n_pending == 0) return 0;
    /* Held bytes are always a valid but unfinished prefix: one U+FFFD. */
    if (cap < 3) return -3;
    memcpy(out, "\xef\xbf\xbd", 3);
    d->n_pending = 0;
    return 3;
}
