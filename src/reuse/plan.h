/* plan.h — static-shape execution planning: the DP scheduler over prompt segments and call-size calibration. */
#ifndef RP_REUSE_PLAN_H
#define RP_REUSE_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"

/* Token segments of a prompt, in order. */
typedef enum rp_seg_kind {
    RP_SEG_PREFIX = 0,   /* KV reused exactly from the prefix tree: no computation */
    RP_SEG_REUSE = 1,    /* non-prefix reusable: cached KV, selective recompute */
    RP_SEG_NEW = 2,      /* no cached KV: must be computed */
} rp_seg_kind;

typedef struct rp_segment {
    rp_seg_kind kind;
    int32_t begin, len;  /* token range [begin, begin + len) in the prompt */
} rp_segment;

/* The two static call shapes (the paper's L_P, L_S, r) and their measured
 * latencies. A prefill call computes up to L_P tokens fully; a recompute call
 * takes up to L_S tokens (reusable or new) and recomputes k = floor(r * L_S)
 * of them in the layers after the check layer: every new token, the final
 * token, and the reusable tokens with the largest KV deviation. */
typedef struct rp_static_cfg {
    int32_t L_P, L_S;    /* defaults 128, 512 */
    float r;             /* default 0.25 */
    double lat_P_ms;     /* latency of one prefill call (padded to L_P) */
    double lat_S_ms;     /* latency of one recompute call (padded to L_S) */
} rp_static_cfg;

rp_static_cfg rp_static_default_cfg(void);

typedef enum rp_call_kind { RP_CALL_PREFILL = 0, RP_CALL_RECOMPUTE = 1 } rp_call_kind;

/* One call over the contiguous token range [begin, end) (end - begin <= the
 * shape's capacity; the rest is padding). Calls are in prompt order and cover
 * every non-prefix token exactly once. */
typedef struct rp_call {
    rp_call_kind kind;
    int32_t begin, end;
    int32_t n_new, n_reuse;   /* tokens of each kind in the range */
} rp_call;

/* The DP scheduler (the paper's appendix): T[i] = minimal latency to process
 * tokens before i; T[i] = 0 inside the leading prefix-reuse region;
 * T[i] = min(T[i - l_p(i)] + lat_P, T[i - l_s(i)] + lat_S), where l_p(i) packs
 * trailing tokens into one prefill call (up to L_P, not crossing the prefix
 * region) and l_s(i) packs trailing tokens into one recompute call: reusable
 * tokens use capacity, new tokens use capacity and recompute budget, so that
 * n_new <= k - r * n_reuse (the ratio stays >= r) and n_new + n_reuse <= L_S.
 * A recompute call that would hold only new tokens is allowed (new tokens are
 * always recomputed). Writes the call sequence (<= cap; RP_ERR_FULL otherwise)
 * and the predicted total latency. Segments must be in order, contiguous,
 * starting at 0, with RP_SEG_PREFIX only as a leading run. */
rp_status rp_plan_dp(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                     int32_t cap, int32_t *n_calls, double *total_ms);

/* The same recurrence restricted to maximal packings l_p(i), l_s(i) exactly as
 * the paper states it. Under this cost model T[i] is non-decreasing in i, so
 * maximal packing is optimal and both give the same latency (tests check it). */
rp_status rp_plan_dp_paper(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                           int32_t cap, int32_t *n_calls, double *total_ms);

/* k = floor(r * L_S) computed robustly (0.7f * 10 gives 7): the number of rows a
 * recompute call carries past the check layer. Executors must use this value. */
int32_t rp_static_k(const rp_static_cfg *cfg);

/* The naive schedule: one call type per segment (reusable segments in
 * recompute calls of up to L_S tokens, new segments in prefill calls of up to
 * L_P), no merging. Same output contract. */
rp_status rp_plan_naive(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                        int32_t cap, int32_t *n_calls, double *total_ms);

/* Calibration: given measured latencies lat_ms[i] of calls of sizes[i] tokens
 * (sizes increasing multiples of 32), returns the turning point: the smallest
 * size whose per-token latency is within `tolerance` (e.g. 0.05) of the best
 * per-token latency over all sizes — beyond it, larger calls only add padding. */
int32_t rp_calib_turning_point(const int32_t *sizes, const double *lat_ms, int32_t n, double tolerance);

/* Chooses the two static shapes from measured call latencies: candidates are
 * the sizes whose per-token latency is within `tolerance` of the best (the
 * turning-point region; smaller calls waste the matrix units), and among them
 * the (L_P, L_S) pair whose DP plans have the least predicted latency summed
 * over a fixed family of prompt layouts (doc QA, chat, agent skills and
 * interleaved documents at 512..4096 tokens; see calib.c). The turning point
 * alone ignores padding: a 32-token remainder padded to a 64-row prefill call
 * costs as much as 64 tokens. Sets cfg->L_P/L_S/lat_*; cfg->r is an input.
 * RP_ERR_INVALID_ARG on bad measurements. */
rp_status rp_calib_choose_shapes(const int32_t *sizes, const double *prefill_ms, const double *recompute_ms, int32_t n,
                                 double tolerance, rp_static_cfg *cfg);

/* Calibration record stored per model fingerprint and machine; text format
 * (one `key value` per line) so it survives versions. */
typedef struct rp_calib {
    uint64_t model_fingerprint;
    char machine[96];          /* cpu brand + dispatch level + threads */
    rp_static_cfg cfg;
    int32_t n_points;
    int32_t sizes[64];
    double prefill_ms[64];
    double recompute_ms[64];
} rp_calib;

rp_status rp_calib_save(const rp_calib *c, const char *path);
/* RP_ERR_NOT_FOUND if absent; RP_ERR_FORMAT naming the line if malformed. */
rp_status rp_calib_load(const char *path, rp_calib *c);

/* Where a calibration is stored: DIR/calib-<model fingerprint>-<machine key
 * hash>.txt, DIR = cache_dir, else $XDG_CACHE_HOME/reprise, else
 * ~/.cache/reprise. One file per key, so a calibration on another CPU or
 * thread count sits next to this one instead of replacing it (the key inside
 * is still checked on load). */
void rp_calib_path(const char *cache_dir, uint64_t model_fingerprint, int threads, char *buf, size_t cap);
/* The machine key stored in (and checked against) a calibration: CPU brand, dispatch level, threads. */
void rp_calib_machine_key(int threads, char *buf, size_t cap);
/* The stored static shapes for this model + machine + thread count into *cfg
 * (its recompute ratio r kept); false when there is none that matches. */
bool rp_calib_lookup(uint64_t model_fingerprint, const char *cache_dir, int threads, rp_static_cfg *cfg);

#endif /* RP_REUSE_PLAN_H */
