/* chunk.c — prompt chunking (caller boundaries + gear-hash content-defined cuts) and salted XXH3 chunk hashes. */
#include "reuse/chunk.h"

#include <string.h>
#include <xxhash.h>

#include "core/error.h"

/* Fixed constants: changing any of them changes every chunk boundary and hash,
 * which invalidates persisted caches, so they are part of the on-disk format. */
#define RP_CHUNK_GEAR_KEY 0x9e6c63d0676a9a99ull   /* mixed into token ids for gear values */
#define RP_CHUNK_CHAIN_SEED 0x52505f434841494eull /* "RP_CHAIN": seed of the chain hash */

rp_chunk_params rp_chunk_default_params(void) {
    rp_chunk_params p = {.min_len = 64, .avg_len = 256, .max_len = 1024};
    return p;
}

/* Hashes the little-endian bytes of the int32 ids. On little-endian hosts the
 * array is already in that layout; elsewhere ids are byte-swapped through a
 * small stack buffer into XXH3's streaming state (which gives the same value
 * as the one-shot call over the same bytes). */
uint64_t rp_chunk_hash(const rp_token *toks, int32_t n, uint64_t salt) {
    if (!toks || n <= 0) return XXH3_64bits_withSeed(NULL, 0, salt);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return XXH3_64bits_withSeed(toks, (size_t)n * sizeof(rp_token), salt);
#else
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, salt);
    uint8_t buf[4 * 256];
    for (int32_t i = 0; i < n;) {
        int32_t m = n - i < 256 ? n - i : 256;
        for (int32_t j = 0; j < m; j++) {
            uint32_t t = (uint32_t)toks[i + j];
            buf[4 * j + 0] = (uint8_t)t;
            buf[4 * j + 1] = (uint8_t)(t >> 8);
            buf[4 * j + 2] = (uint8_t)(t >> 16);
            buf[4 * j + 3] = (uint8_t)(t >> 24);
        }
        XXH3_64bits_update(&st, buf, (size_t)m * 4);
        i += m;
    }
    return XXH3_64bits_digest(&st);
#endif
}

static void rp_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* XXH3 over (parent_chain, chunk_hash) as 16 little-endian bytes, so a chain
 * value commits to the whole path and chain(0, h) != h (a root chunk's chain
 * is not its content hash). */
uint64_t rp_chunk_chain(uint64_t parent_chain, uint64_t chunk_hash) {
    uint8_t buf[16];
    rp_put_le64(buf, parent_chain);
    rp_put_le64(buf + 8, chunk_hash);
    return XXH3_64bits_withSeed(buf, sizeof buf, RP_CHUNK_CHAIN_SEED);
}

/* Per-token gear value: splitmix64 of the id, so any vocab size works
 * without a table and the values are well spread over all 64 bits. */
static inline uint64_t rp_gear(rp_token t) {
    uint64_t z = (uint64_t)(uint32_t)t ^ RP_CHUNK_GEAR_KEY;
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Emits one span (hashing only the spans that are written). */
static inline void rp_emit(const rp_token *toks, int32_t begin, int32_t end, bool at_boundary, uint64_t salt,
                           rp_chunk_span *out, int32_t cap, int32_t *count) {
    if (*count < cap) {
        rp_chunk_span *s = &out[*count];
        s->begin = begin;
        s->len = end - begin;
        s->hash = rp_chunk_hash(toks + begin, end - begin, salt);
        s->at_boundary = at_boundary;
    }
    (*count)++;
}

/* Cut rule. The gear hash h = (h << 1) + gear(tok) forgets a token after 64
 * steps, so h depends only on the last 64 tokens of the current segment (it
 * is reset at each caller boundary but not at content cuts). A cut is made
 * after token i when the chunk so far has >= min_len tokens and
 * h <= UINT64_MAX / (avg_len - min_len): a test on the high bits of h (the
 * ones that depend on the full 64-token window, whereas low bit b depends on
 * only b + 1 tokens), with probability 1 / (avg_len - min_len) per token, so
 * the expected chunk length is min_len + (avg_len - min_len) (slightly less
 * because of the forced cut at max_len). avg_len == min_len cuts at every
 * min_len. This is the mask test (h & mask) == 0 generalized to rates that
 * are not a power of two. */
rp_status rp_chunk_split(const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds,
                         rp_chunk_params p, uint64_t salt, rp_chunk_span *out, int32_t cap, int32_t *n_out) {
    if (!n_out) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: n_out is NULL");
    *n_out = 0;
    if (n < 0) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: n = %d < 0", n);
    if (n > 0 && !toks) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: toks is NULL");
    if (cap < 0 || (cap > 0 && !out)) return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: bad output buffer (cap %d)", cap);
    if (p.min_len <= 0 || p.avg_len < p.min_len || p.max_len < p.avg_len)
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: params need 0 < min_len <= avg_len <= max_len (got %d, %d, %d)",
                         p.min_len, p.avg_len, p.max_len);
    if (n_bounds < 0 || (n_bounds > 0 && !bounds))
        return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: bad bounds (n_bounds %d)", n_bounds);
    for (int32_t i = 0; i < n_bounds; i++) {
        if (bounds[i] <= 0 || bounds[i] >= n)
            return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: bounds[%d] = %d not in (0, %d)", i, bounds[i], n);
        if (i > 0 && bounds[i] <= bounds[i - 1])
            return rp_errorf(RP_ERR_INVALID_ARG, "chunk_split: bounds[%d] = %d not above bounds[%d] = %d", i, bounds[i],
                             i - 1, bounds[i - 1]);
    }
    if (n == 0) return RP_OK;

    const uint64_t d = (uint64_t)(p.avg_len - p.min_len);
    const bool always = d <= 1;                 /* cut as soon as min_len is reached */
    const uint64_t thresh = always ? UINT64_MAX : UINT64_MAX / d;
    int32_t count = 0;
    for (int32_t seg = 0; seg <= n_bounds; seg++) {
        const int32_t s = seg == 0 ? 0 : bounds[seg - 1];
        const int32_t e = seg == n_bounds ? n : bounds[seg];
        uint64_t h = 0;
        int32_t start = s;
        for (int32_t i = s; i < e; i++) {
            h = (h << 1) + rp_gear(toks[i]);
            const int32_t len = i + 1 - start;
            if (len >= p.max_len || (len >= p.min_len && (always || h <= thresh))) {
                rp_emit(toks, start, i + 1, start == s, salt, out, cap, &count);
                start = i + 1;
            }
        }
        /* tail of the segment (possibly shorter than min_len): its own chunk,
         * never merged across the caller boundary */
        if (start < e) rp_emit(toks, start, e, start == s, salt, out, cap, &count);
    }
    *n_out = count;
    if (count > cap) return rp_errorf(RP_ERR_FULL, "chunk_split: %d spans needed, cap %d", count, cap);
    return RP_OK;
}

/* Naive O(n * n_sep) scan: separators are a few tokens long. Occurrences are
 * taken left to right without overlap; one that ends at n yields no bound
 * (bounds must lie in (0, n)). */
int32_t rp_chunk_find_separators(const rp_token *toks, int32_t n, const rp_token *sep, int32_t n_sep,
                                 int32_t *bounds, int32_t cap) {
    if (!toks || !sep || n_sep <= 0 || n <= 0 || cap <= 0 || !bounds) return 0;
    int32_t count = 0;
    for (int32_t i = 0; i + n_sep <= n && count < cap;) {
        if (toks[i] == sep[0] && memcmp(toks + i, sep, (size_t)n_sep * sizeof(rp_token)) == 0) {
            const int32_t end = i + n_sep;
            if (end < n) bounds[count++] = end;
            i = end;
        } else {
            i++;
        }
    }
    return count;
}
