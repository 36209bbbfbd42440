/* server_api.c — the server's public entry (reprise.h: rp_server_params, rp_server_create, ...) over its internal
 * configuration (server.h), for `reprise serve` and any program embedding the server. */
#include "server/server.h"

rp_server_params rp_server_default_params(void) {
    const rp_server_config c = rp_server_default_config();
    const rp_backend_config *b = &c.backend;
    rp_server_params p = {
        .n_ctx = b->n_ctx,
        .n_threads = b->n_threads,
        .parallel = b->parallel,
        .queue_max = b->queue_max,
        .max_sessions = b->max_sessions,
        .cache_ram_mb = b->cache_ram_mb,
        .cache_disk_gb = b->cache_disk_gb,
        .embed_dim = b->embed_dim,
        .reuse = (rp_reuse_mode)b->reuse_mode,
        .recompute_ratio = b->recompute_ratio,
        .kv_type = b->kv_type,
        .swa_full = b->swa_full,
        .speculate = b->speculate,
        .kv_limit_mb = b->kv_limit_mb,
        .host = c.host,
        .port = c.port,
        .cache_namespace = (rp_server_cache_ns)c.cache_namespace,
        .key_max_sessions = c.key_max_sessions,
        .key_kv_mb = c.key_kv_mb,
        .max_body = c.max_body,
        .max_depth = c.max_depth,
        .max_messages = c.max_messages,
        .default_max_tokens = c.default_max_tokens,
        .timeout_s = c.timeout_s,
        .session_ttl_s = c.session_ttl_s,
        .max_connections = c.max_connections,
        .max_connections_per_ip = c.max_connections_per_ip,
        .header_timeout_s = c.header_timeout_s,
        .body_timeout_s = c.body_timeout_s,
        .idle_timeout_s = c.idle_timeout_s,
        .quiet = c.quiet,
        .embeddings = c.embeddings,
        .pooling = (rp_pooling)c.pooling,
        .n_gpu_layers = b->n_gpu_layers,
        .gpu_device = b->gpu_device,
    };
    return p;
}

rp_status rp_server_create(const rp_server_params *p, rp_server **out) {
    *out = NULL;
    const rp_server_params def = rp_server_default_params();
    if (!p) p = &def;
    rp_server_config c = rp_server_default_config();
    rp_backend_config *b = &c.backend;
    b->model_path = p->model_path;
    b->draft_path = p->draft_path;
    b->chat_template = p->chat_template;
    b->load_progress = p->load_progress;
    b->load_progress_user = p->load_progress_user;
    b->n_ctx = p->n_ctx;
    b->n_threads = p->n_threads;
    b->parallel = p->parallel;
    b->queue_max = p->queue_max;
    b->max_sessions = p->max_sessions;
    b->cache_dir = p->cache_dir;
    b->cache_ram_mb = p->cache_ram_mb;
    b->cache_disk_gb = p->cache_disk_gb;
    b->embed_model = p->embed_model;
    b->embed_dim = p->embed_dim;
    b->reuse_mode = (int)p->reuse;
    b->recompute_ratio = p->recompute_ratio;
    b->kv_type = p->kv_type;
    b->swa_full = p->swa_full;
    b->speculate = p->speculate;
    b->kv_limit_mb = p->kv_limit_mb;
    b->n_gpu_layers = p->n_gpu_layers;
    b->gpu_device = p->gpu_device;
    c.host = p->host;
    c.port = p->port;
    c.api_key = p->api_key;
    c.api_key_file = p->api_key_file;
    c.cache_namespace = (int)p->cache_namespace;
    c.key_max_sessions = p->key_max_sessions;
    c.key_kv_mb = p->key_kv_mb;
    c.model_id = p->model_id;
    c.grammar = p->grammar;
    c.max_body = p->max_body;
    c.max_depth = p->max_depth;
    c.max_messages = p->max_messages;
    c.default_max_tokens = p->default_max_tokens;
    c.timeout_s = p->timeout_s;
    c.session_ttl_s = p->session_ttl_s;
    c.max_connections = p->max_connections;
    c.max_connections_per_ip = p->max_connections_per_ip;
    c.header_timeout_s = p->header_timeout_s;
    c.body_timeout_s = p->body_timeout_s;
    c.idle_timeout_s = p->idle_timeout_s;
    c.quiet = p->quiet;
    c.on_listening = p->on_listening;
    c.on_listening_user = p->on_listening_user;
    c.cors_origins = p->cors_origins;
    c.embeddings = p->embeddings;
    c.pooling = (int)p->pooling;
    return rp_server_start(&c, out);
}

const char *rp_server_backend_kind(const rp_server *s) { return s ? rp_backend_kind(rp_server_backend((rp_server *)s)) : ""; }
int rp_server_parallel(const rp_server *s) { return s ? rp_backend_parallel(rp_server_backend((rp_server *)s)) : 0; }
int32_t rp_server_n_ctx(const rp_server *s) { return s ? rp_backend_n_ctx(rp_server_backend((rp_server *)s)) : 0; }
void rp_server_free(rp_server *s) { rp_server_stop(s); }
