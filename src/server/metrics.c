/* metrics.c — request / TTFT / throughput / reuse / cache / session counters rendered as Prometheus text. */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/backend_internal.h"

static const char *k_ep[RP_M_EP_COUNT] = {"chat_completions", "completions", "models", "health", "metrics", "sessions", "other"};
static const int k_status[RP_M_N_STATUS] = {200, 400, 401, 404, 405, 409, 413, 429, 500, 503, 2, 4, 5};
static const double k_ttft_le[RP_M_N_TTFT] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 1e300};

void rp_metrics_init(rp_metrics *m) {
    memset(m, 0, sizeof *m);
    m->started = rp_srv_now();
}

void rp_metrics_request(rp_metrics *m, int ep, int status) {
    if (ep < 0 || ep >= RP_M_EP_COUNT) ep = RP_M_OTHER;
    int k = -1;
    for (int i = 0; i < 10; i++)
        if (k_status[i] == status) k = i;
    if (k < 0) k = status < 300 ? 10 : status < 500 ? 11 : 12;
    atomic_fetch_add(&m->requests[ep][k], 1);
}

void rp_metrics_ttft(rp_metrics *m, double s) {
    int b = 0;
    while (b < RP_M_N_TTFT - 1 && s > k_ttft_le[b]) b++;
    atomic_fetch_add(&m->ttft_bucket[b], 1);
    atomic_fetch_add(&m->ttft_count, 1);
    atomic_fetch_add(&m->ttft_sum_us, (uint64_t)(s > 0 ? s * 1e6 : 0));
}

typedef struct out {
    char *p;
    size_t n, cap;
    bool oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (w < 0) { o->oom = true; return; }
        if ((size_t)w < o->cap - o->n) {
            o->n += (size_t)w;
            return;
        }
        size_t nc = o->cap * 2 + (size_t)w;
        char *np = realloc(o->p, nc);
        if (!np) { o->oom = true; return; }
        o->p = np;
        o->cap = nc;
    }
}

static void gauge(out *o, const char *name, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.6g\n", name, help, name, name, v);
}
static void counter(out *o, const char *name, const char *help, uint64_t v) {
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

char *rp_metrics_render(rp_metrics *m, const rp_backend_stats *bs, const rp_metrics_extra *x) {
    out o = {.cap = 8192};
    o.p = malloc(o.cap);
    if (!o.p) return NULL;
    o.p[0] = '\0';
    put(&o, "# HELP reprise_info Model and backend served.\n# TYPE reprise_info gauge\n"
            "reprise_info{model=\"%s\",backend=\"%s\"} 1\n", x->model, x->backend);
    gauge(&o, "reprise_uptime_seconds", "Seconds since the server started.", rp_srv_now() - m->started);
    put(&o, "# HELP reprise_requests_total HTTP requests by endpoint and status code.\n"
            "# TYPE reprise_requests_total counter\n");
    for (int e = 0; e < RP_M_EP_COUNT; e++)
        for (int k = 0; k < RP_M_N_STATUS; k++) {
            uint64_t v = atomic_load(&m->requests[e][k]);
            if (!v) continue;
            if (k < 10) put(&o, "reprise_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", k_ep[e], k_status[k], (unsigned long long)v);
            else put(&o, "reprise_requests_total{endpoint=\"%s\",status=\"%dxx\"} %llu\n", k_ep[e], k_status[k], (unsigned long long)v);
        }
    gauge(&o, "reprise_requests_inflight", "Requests being handled now.", (double)atomic_load(&m->inflight));
    counter(&o, "reprise_client_disconnects_total", "Generations cancelled because the client disconnected.", atomic_load(&m->disconnects));
    counter(&o, "reprise_request_timeouts_total", "Requests that reached the per-request timeout.", atomic_load(&m->timeouts));
    counter(&o, "reprise_requests_rejected_total", "Requests refused with 429 (queue full) or 503 (draining, or no connection to spare).", atomic_load(&m->rejected));
    const rp_gate_stats *cs = &x->conns;
    put(&o, "# HELP reprise_connections Client connections by state.\n# TYPE reprise_connections gauge\n"
            "reprise_connections{state=\"pending\"} %d\nreprise_connections{state=\"idle\"} %d\n"
            "reprise_connections{state=\"receiving\"} %d\nreprise_connections{state=\"answering\"} %d\n"
            "reprise_connections{state=\"closing\"} %d\n",
        cs->pending, cs->idle, cs->receiving, cs->busy, cs->open - cs->pending - cs->idle - cs->receiving - cs->busy);
    static const char *k_drop[RP_DROP_COUNT] = {"header_timeout", "body_timeout", "idle_timeout", "write_timeout", "evicted", "rejected"};
    put(&o, "# HELP reprise_connections_dropped_total Connections the server closed, by reason.\n"
            "# TYPE reprise_connections_dropped_total counter\n");
    for (int i = 0; i < RP_DROP_COUNT; i++)
        put(&o, "reprise_connections_dropped_total{reason=\"%s\"} %llu\n", k_drop[i], (unsigned long long)cs->dropped[i]);

    put(&o, "# HELP reprise_ttft_seconds Time to first token (from request to first generated token).\n"
            "# TYPE reprise_ttft_seconds histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < RP_M_N_TTFT; b++) {
        cum += atomic_load(&m->ttft_bucket[b]);
        if (b == RP_M_N_TTFT - 1) put(&o, "reprise_ttft_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        else put(&o, "reprise_ttft_seconds_bucket{le=\"%g\"} %llu\n", k_ttft_le[b], (unsigned long long)cum);
    }
    put(&o, "reprise_ttft_seconds_sum %.6f\nreprise_ttft_seconds_count %llu\n",
        (double)atomic_load(&m->ttft_sum_us) * 1e-6, (unsigned long long)atomic_load(&m->ttft_count));

    counter(&o, "reprise_prompt_tokens_total", "Prompt tokens of finished generations.", bs->prompt_tokens);
    counter(&o, "reprise_generated_tokens_total", "Tokens generated.", bs->gen_tokens);
    /* prefix: exact prefix KV (what a plain prefill computes); prefix_approx: prefix-path KV that approximate
     * reuse wrote (blend / full at r < 1, in this or an earlier request); blended: non-prefix chunks re-rotated,
     * of which recomputed went through selective recompute; computed: from scratch */
    put(&o, "# HELP reprise_reused_tokens_total Prompt tokens by how their KV was obtained.\n"
            "# TYPE reprise_reused_tokens_total counter\n"
            "reprise_reused_tokens_total{kind=\"prefix\"} %llu\n"
            "reprise_reused_tokens_total{kind=\"prefix_approx\"} %llu\n"
            "reprise_reused_tokens_total{kind=\"blended\"} %llu\n"
            "reprise_reused_tokens_total{kind=\"recomputed\"} %llu\n"
            "reprise_reused_tokens_total{kind=\"computed\"} %llu\n",
        (unsigned long long)bs->reused_prefix_exact, (unsigned long long)(bs->reused_prefix - bs->reused_prefix_exact),
        (unsigned long long)bs->reused_nonprefix, (unsigned long long)bs->recomputed, (unsigned long long)bs->computed);
    gauge(&o, "reprise_prefill_tokens_per_second", "Prompt tokens computed per second of prefill time (cumulative).",
          bs->prefill_s > 0 ? (double)bs->computed / bs->prefill_s : 0);
    gauge(&o, "reprise_decode_tokens_per_second", "Tokens generated per second of decode time (cumulative).",
          bs->decode_s > 0 ? (double)bs->gen_tokens / bs->decode_s : 0);
    counter(&o, "reprise_draft_tokens_total", "Draft tokens proposed and verified (speculative decoding).", bs->drafted);
    counter(&o, "reprise_draft_accepted_tokens_total", "Draft tokens accepted.", bs->accepted);
    gauge(&o, "reprise_queue_depth", "Generations waiting for the model.", bs->queued);
    gauge(&o, "reprise_running", "Generations running.", bs->running);
    gauge(&o, "reprise_kv_resident_bytes", "Bytes of KV held by sessions (scheduler).", (double)bs->kv_bytes);
    counter(&o, "reprise_kv_demotions_total", "Waiting sessions' KV demoted under --kv-limit (scheduler).", bs->kv_demotions);
    counter(&o, "reprise_kv_restores_total", "Demoted KV restored on resume (scheduler).", bs->kv_restores);
    put(&o, "# HELP reprise_sessions reprise_session sessions by state.\n# TYPE reprise_sessions gauge\n"
            "reprise_sessions{state=\"active\"} %d\nreprise_sessions{state=\"suspended\"} %d\n"
            "reprise_sessions{state=\"idle\"} %d\n",
        x->sessions_active, x->sessions_suspended, x->sessions - x->sessions_active - x->sessions_suspended);
    counter(&o, "reprise_session_evictions_total",
            "reprise_session sessions evicted for a new one of the same API key (table full or the key's quota).",
            x->session_evictions);
    gauge(&o, "reprise_cache_chunks", "KV chunks in the RAM cache.", (double)bs->cache_chunks);
    gauge(&o, "reprise_cache_bytes", "Bytes of KV chunks in the RAM cache.", (double)bs->cache_bytes);
    counter(&o, "reprise_cache_inserts_total", "Chunks inserted into the RAM cache.", bs->cache_inserts);
    counter(&o, "reprise_cache_evictions_total", "Chunks evicted from the RAM cache.", bs->cache_evictions);
    gauge(&o, "reprise_store_bytes", "Bytes of the flash store on disk (0 without --cache-dir).", (double)bs->store_bytes);
    counter(&o, "reprise_store_evictions_total", "Chunks evicted from the flash store.", bs->store_evictions);
    counter(&o, "reprise_store_written_total", "Chunks written to the flash store.", bs->store_written);
    counter(&o, "reprise_store_write_failures_total",
            "Chunk writes to the flash store that failed (disk full, I/O error); the chunks stay recomputable.",
            bs->store_write_failures);
    gauge(&o, "reprise_draining", "1 while the server drains for shutdown.", x->draining);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
