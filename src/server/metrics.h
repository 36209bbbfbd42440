/* metrics.h — server counters and their Prometheus text exposition (/metrics). */
#ifndef RP_SERVER_METRICS_H
#define RP_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "server/backend.h"
#include "server/conn_gate.h"

enum {
    RP_M_CHAT = 0, RP_M_COMPLETIONS, RP_M_MODELS, RP_M_HEALTH, RP_M_METRICS, RP_M_SESSIONS, RP_M_OTHER,
    RP_M_EP_COUNT
};
#define RP_M_N_STATUS 13   /* 200 400 401 404 405 409 413 429 500 503 other-2xx other-4xx other-5xx */
#define RP_M_N_TTFT 12     /* histogram buckets incl. +Inf */

/* Lock-free counters, updated from any thread. */
typedef struct rp_metrics {
    _Atomic uint64_t requests[RP_M_EP_COUNT][RP_M_N_STATUS];
    _Atomic uint64_t ttft_bucket[RP_M_N_TTFT];   /* cumulative buckets are summed at render time */
    _Atomic uint64_t ttft_count;
    _Atomic uint64_t ttft_sum_us;
    _Atomic uint64_t disconnects;   /* generations cancelled because the client went away */
    _Atomic uint64_t timeouts;      /* requests that hit the per-request timeout */
    _Atomic uint64_t rejected;      /* 429 / 503 from a full queue or draining */
    _Atomic int64_t inflight;       /* requests being handled */
    double started;                 /* monotonic time of start */
} rp_metrics;

void rp_metrics_init(rp_metrics *m);
void rp_metrics_request(rp_metrics *m, int endpoint, int status);
void rp_metrics_ttft(rp_metrics *m, double seconds);

typedef struct rp_metrics_extra {
    const char *model;
    const char *backend;
    int sessions, sessions_active, sessions_suspended;
    uint64_t session_evictions;     /* sessions evicted to keep an API key within the table or its quota */
    int draining;
    rp_gate_stats conns;
} rp_metrics_extra;

/* Prometheus text format 0.0.4 (malloc'd, NUL-terminated; NULL if out of memory). */
char *rp_metrics_render(rp_metrics *m, const rp_backend_stats *bs, const rp_metrics_extra *x);

#endif /* RP_SERVER_METRICS_H */
