/* reprise.h — public API of the Reprise on-device LLM serving engine.
 *
 * One header, the way llama.h is: every front end (the `reprise` CLI, the
 * server, the benchmarks, the Python package) is meant to be built on it.
 *
 *   rp_model   an immutable model (weights, tokenizer, chat format), loaded
 *              once and shared by any number of threads.
 *   rp_engine  what serving one model needs: compute context, the reuse
 *              engine and its chunk cache (RAM pool, and the persistent store
 *              with a cache directory), calibration. One thread at a time.
 *   rp_seq     a sequence (conversation) of an engine: its KV cache and
 *              sampler state. prefill / generate take per-call options.
 *   rp_prompt  a prompt under construction: tokens plus the boundaries of the
 *              segments (documents, messages) the reuse engine chunks at.
 *   rp_agents  the multi-agent scheduler: many sequences batched together,
 *              speculative decoding, suspend-and-yield on tool calls.
 *   rp_cache   maintenance of a cache directory (stats, list, verify, evict,
 *              compact, clear).
 *
 * Conventions. Handles are opaque, with create/free pairs; free(NULL) is a
 * no-op. Params structs come from rp_*_default_params() and are changed field
 * by field. Every fallible call returns an rp_status (RP_OK is 0); the detail
 * of a failure is read with rp_last_error() on the same thread. Output
 * buffers: a call that writes text or ids into a caller buffer returns
 * RP_ERR_FULL with the size it needs when the buffer is too small.
 * Thread safety is stated for each group below.
 */
#ifndef REPRISE_H
#define REPRISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RP_API marks every function of this API. libreprise.so is built with hidden visibility by default, so these
 * are the only symbols it exports (tests/library/abi_symbols.sh checks that nothing else is, and that each
 * RP_API function is). In the static archive and in programs that include this header it changes nothing. A
 * build may predefine RP_API. */
#ifndef RP_API
#if defined(__GNUC__) || defined(__clang__)
#define RP_API __attribute__((visibility("default")))
#else
#define RP_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ===========================================================================
 * Status codes and errors (thread-safe; the detail message is per thread)
 * ========================================================================= */
typedef enum rp_status {
    RP_OK = 0,
    RP_ERR_INVALID_ARG,   /* caller passed something out of contract */
    RP_ERR_IO,            /* open/read/write/mmap failed */
    RP_ERR_FORMAT,        /* file or payload is malformed / corrupt */
    RP_ERR_UNSUPPORTED,   /* well-formed but not something we implement */
    RP_ERR_NOMEM,         /* allocation failed or a size would overflow */
    RP_ERR_NOT_FOUND,     /* key / tensor / token not present */
    RP_ERR_RANGE,         /* index, position or count out of range */
    RP_ERR_FULL,          /* output buffer or cache too small; retry bigger */
    RP_ERR_INTERNAL,      /* a bug: an invariant did not hold */
    RP_ERR_CANCELLED,     /* the caller asked to stop */
    RP_STATUS_COUNT
} rp_status;

/* Static name of a status code ("invalid argument", ...). Never NULL. */
RP_API const char *rp_strerror(rp_status st);

/* Detail message of the last error set on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
RP_API const char *rp_last_error(void);

/* Library version string, e.g. "0.1.0". */
RP_API const char *rp_version(void);

/* ===========================================================================
 * Basic types
 * ========================================================================= */

/* A vocabulary id. */
typedef int32_t rp_token;

/* Progress of a long call (model load, synth): `done` of `total` units so
 * far, called on the caller's thread every few percent. Returning false asks
 * the call to stop: it then fails with RP_ERR_CANCELLED and leaves nothing
 * behind (no half-written file, no half-loaded model). */
typedef bool (*rp_progress_fn)(void *user, uint64_t done, uint64_t total);

/* KV cache element types (the values are ggml's type ids). */
typedef enum rp_kv_type {
    RP_KV_F32 = 0,
    RP_KV_F16 = 1,    /* the default */
    RP_KV_Q8_0 = 8,
} rp_kv_type;

/* How a prompt's KV is obtained from the chunk cache. */
typedef enum rp_reuse_mode {
    RP_REUSE_NONE = 0,     /* compute everything (no cache reads or writes) */
    RP_REUSE_PREFIX = 1,   /* exact prefix reuse only (llama.cpp / vLLM / SGLang style) */
    RP_REUSE_FULL = 2,     /* prefix + non-prefix chunks reused as-is, re-rotated, no recompute (Prompt Cache) */
    RP_REUSE_BLEND = 3,    /* prefix + non-prefix with CacheBlend selective recompute (default) */
} rp_reuse_mode;

/* Which reused tokens blend recomputes past its check layer. */
typedef enum rp_select_kind {
    RP_SELECT_HYBRID = 0,  /* half the budget from each ranking below (default) */
    RP_SELECT_DEV = 1,     /* CacheBlend's rule: largest KV deviation at the check layer */
    RP_SELECT_ATTN = 2,    /* deviation weighted by the attention the prompt's last tokens pay */
} rp_select_kind;

/* Names of the enums above, for command lines and config files (thread-safe; static strings). The parsers
 * return the value, or -1 for a name (or NULL) that is not one of them; the namers return "?" for a value out
 * of range. KV types: "f16", "q8_0", "f32". Reuse modes: "none", "prefix", "full", "blend". Selection rules:
 * "hybrid", "dev", "attn". */
RP_API int rp_kv_type_parse(const char *name);
RP_API const char *rp_kv_type_name(rp_kv_type t);
RP_API int rp_reuse_mode_parse(const char *name);
RP_API const char *rp_reuse_mode_name(rp_reuse_mode m);
RP_API int rp_select_kind_parse(const char *name);
RP_API const char *rp_select_kind_name(rp_select_kind k);

/* A logit bias: added to token's logit before sampling (-INFINITY bans it). */
typedef struct rp_logit_bias {
    rp_token token;
    float bias;
} rp_logit_bias;

/* Sampling. The defaults are llama.cpp's (temperature 0.8, top_k 40, top_p
 * 0.95, min_p 0.05, no penalties). */
typedef struct rp_sampler_params {
    float temp;              /* <= 0: greedy (argmax, ties to the lowest id); must be finite */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off; keeps tokens with p >= min_p * p_max */
    float repeat_penalty;    /* 1: off; llama.cpp semantics (divide positive, multiply negative logits) */
    int32_t repeat_last_n;   /* how many recent tokens the penalties look at */
    float presence_penalty;  /* 0: off; subtracted once from the logit of every token in the window (OpenAI) */
    float frequency_penalty; /* 0: off; subtracted per occurrence in the window (OpenAI) */
    uint64_t seed;
    const rp_logit_bias *bias;   /* copied where the params are taken */
    int32_t n_bias;
} rp_sampler_params;

RP_API rp_sampler_params rp_sampler_default_params(void);

/* ===========================================================================
 * System (call before loading models; not thread-safe with loads)
 * ========================================================================= */

/* Selects the kernel level later loads pack weights for: "auto" (the best
 * this CPU and OS allow; also RP_CPU / RP_FORCE_REF=1 in the environment),
 * "scalar", and this architecture's levels: "avx2", "avx512", "amx" on x86-64;
 * "neon", "dotprod", "i8mm", "sve2", "sme" on aarch64 (elsewhere only scalar).
 * RP_ERR_UNSUPPORTED if the machine lacks it, RP_ERR_INVALID_ARG for an
 * unknown name (another architecture's included). */
RP_API rp_status rp_cpu_select(const char *level);
/* The active level's name ("avx512", "dotprod", ...). */
RP_API const char *rp_cpu_active(void);
/* One line: CPU brand, features, this build's levels, the best and the active
 * level. Returns the length the full line needs (truncated to cap - 1 bytes,
 * NUL-terminated). */
RP_API size_t rp_system_info(char *buf, size_t cap);

/* ===========================================================================
 * Model (thread-safe once loaded: immutable, shared by any number of threads)
 * ========================================================================= */
typedef struct rp_model rp_model;

typedef struct rp_model_params {
    bool vocab_only;          /* load tokenizer + metadata, no weights (tokenize on vocab GGUFs) */
    int n_threads;            /* threads used to pack weights at load */
    int cpu_level;            /* -1: the active level (rp_cpu_select); else an internal level id */
    rp_progress_fn progress;  /* NULL, or called while the weights are read (hashed) and packed: units are
                                 bytes, hashed then packed; returning false cancels the load */
    void *progress_user;
} rp_model_params;

RP_API rp_model_params rp_model_default_params(void);

/* Loads and validates a GGUF model: architecture known, every tensor present
 * with the shape the hyper-parameters imply, weight types computable. Errors
 * name the tensor / key at fault. */
RP_API rp_status rp_model_load(const char *path, rp_model_params params, rp_model **out);
RP_API void rp_model_free(rp_model *m);

typedef struct rp_model_desc {
    const char *name;         /* general.name, else the file's base name */
    const char *arch;         /* "llama", "qwen3" */
    const char *chat_format;  /* "llama3", "chatml", "llama2", "none" */
    int32_t n_vocab, n_ctx_train, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim;
    uint64_t weight_bytes;    /* bytes of weight data */
    uint64_t fingerprint;     /* digest of architecture, shapes and weights (cache keys are salted with it) */
    bool has_weights;         /* false for vocab_only loads */
    bool has_tokenizer;       /* false for a GGUF without one: nothing to tokenize, prompt or chat with */
} rp_model_desc;

/* Hyper-parameters and identity; the strings live as long as the model. */
RP_API rp_model_desc rp_model_describe(const rp_model *m);

/* A GGUF metadata value as text (numbers in decimal, booleans true/false,
 * arrays as "[n items]"). Returns the length the value needs (the text is
 * truncated to cap - 1 bytes, NUL-terminated), or -1 when the key is absent. */
RP_API long rp_model_meta(const rp_model *m, const char *key, char *buf, size_t cap);

/* ---- tokenizer ---- */

/* Encodes `len` bytes of UTF-8 text (invalid UTF-8 is encoded byte-wise).
 * add_bos: prepend BOS when the vocabulary asks for one; parse_special:
 * control-token texts like "<|im_start|>" become their ids. Writes up to cap
 * ids; RP_ERR_FULL with *n_out = the count needed when cap is too small. */
RP_API rp_status rp_tokenize(const rp_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                             rp_token *out, int32_t cap, int32_t *n_out);
/* The text of one token (control tokens rendered only with render_special).
 * Returns the bytes the whole piece takes (0 for an id out of range); writes
 * at most cap of them (no NUL). */
RP_API int32_t rp_token_to_piece(const rp_model *m, rp_token t, bool render_special, char *buf, int32_t cap);
/* The text of n tokens, NUL-terminated; RP_ERR_FULL with *len = bytes needed. */
RP_API rp_status rp_detokenize(const rp_model *m, const rp_token *t, int32_t n, bool render_special, char *buf,
                               size_t cap, size_t *len);
RP_API rp_token rp_token_bos(const rp_model *m);   /* -1 when the vocabulary has none */
RP_API rp_token rp_token_eos(const rp_model *m);
RP_API rp_token rp_token_eot(const rp_model *m);   /* <|eot_id|>, <|im_end|>, ... (-1 if none) */
RP_API bool rp_token_is_eog(const rp_model *m, rp_token t);   /* ends a generation */

/* ---- chat templates ---- */

/* A message in OpenAI's shape. role: "system" | "user" | "assistant" | "tool". */
typedef struct rp_chat_message {
    const char *role;
    const char *content;        /* may be NULL (an assistant message with only tool calls) */
    const char *tool_calls;     /* assistant: JSON array of OpenAI tool calls, or NULL */
    const char *tool_call_id;   /* tool: which call this answers, or NULL */
    const char *name;           /* tool: the function's name, or NULL */
} rp_chat_message;

/* Renders messages with the model's chat template into prompt text (control
 * tokens as their texts: tokenize with parse_special). tools_json: a JSON
 * array of OpenAI tool definitions, or NULL. add_generation_prompt ends with
 * the assistant's header. NUL-terminated; RP_ERR_FULL with *len = bytes
 * needed; RP_ERR_INVALID_ARG naming the message at fault. */
RP_API rp_status rp_chat_render(const rp_model *m, const rp_chat_message *msgs, int32_t n, const char *tools_json,
                                bool add_generation_prompt, char *buf, size_t cap, size_t *len);

/* ===========================================================================
 * Prompts (one thread at a time per prompt)
 * ========================================================================= */
typedef struct rp_prompt rp_prompt;

RP_API rp_status rp_prompt_create(rp_prompt **out);
RP_API void rp_prompt_free(rp_prompt *p);
RP_API void rp_prompt_clear(rp_prompt *p);
/* Appends a segment (a document, a message, a question): tokenized on its own
 * (control-token texts parsed), starting a chunk boundary, so its KV is
 * cached and found again wherever it sits in a later prompt. The first
 * segment gets BOS when the vocabulary asks for one. Empty text adds nothing. */
RP_API rp_status rp_prompt_add_text(rp_prompt *p, const rp_model *m, const char *text, size_t len);
/* Appends tokens, as a new segment (boundary before them) or continuing the last one. */
RP_API rp_status rp_prompt_add_tokens(rp_prompt *p, const rp_token *t, int32_t n, bool new_segment);
/* Also cuts a chunk after every occurrence of `separator`'s tokens (e.g. "\n\n"). */
RP_API rp_status rp_prompt_split_at(rp_prompt *p, const rp_model *m, const char *separator);
RP_API int32_t rp_prompt_n_tokens(const rp_prompt *p);
RP_API const rp_token *rp_prompt_tokens(const rp_prompt *p);      /* valid until the prompt changes */
RP_API int32_t rp_prompt_n_bounds(const rp_prompt *p);
RP_API const int32_t *rp_prompt_bounds(const rp_prompt *p);       /* token offsets where segments start (> 0) */
RP_API int32_t rp_prompt_n_segments(const rp_prompt *p);

/* ===========================================================================
 * Engine (one thread at a time: calls on an engine and its sequences must be
 * serialized by the caller; rp_engine_stats may be called from any thread)
 * ========================================================================= */
typedef struct rp_engine rp_engine;

typedef struct rp_engine_params {
    int n_threads;             /* compute threads (default 2) */
    int32_t n_ctx;             /* KV cells per sequence (0: min(4096, the model's training context)) */
    int32_t n_batch;           /* rows per forward call (default 512) */
    rp_kv_type kv_type;        /* default RP_KV_F16 */
    /* reuse defaults (each call may override them, rp_gen_opts) */
    rp_reuse_mode reuse;       /* default RP_REUSE_BLEND */
    float recompute_ratio;     /* blend's r (default 0.25) */
    rp_select_kind select;     /* default RP_SELECT_HYBRID */
    int32_t check_layer;       /* blend's check layer (default 1; past the model's last layer: its last one) */
    bool static_mode;          /* fixed call shapes (L_P / L_S) planned by the DP scheduler (default false) */
    bool naive_schedule;       /* static mode: one call shape per segment instead of the DP plan (an ablation;
                                  default false) */
    size_t cache_ram_bytes;    /* RAM budget of the chunk cache (default 512 MiB) */
    const char *cache_dir;     /* persistent chunk store (flash tier), or NULL for RAM only; copied */
    uint64_t cache_disk_bytes; /* its disk budget (0: unlimited) */
    bool cache_dir_optional;   /* a store that cannot be used (refused, locked, unreadable) is skipped: the
                                  engine runs on the RAM cache, rp_engine_notice says why and
                                  rp_engine_stats.has_store is false (default false: rp_engine_create fails) */
    bool load_calibration;     /* static mode: the stored calibration for this model, machine and n_threads
                                  (in cache_dir, else $XDG_CACHE_HOME/reprise) sets L_P / L_S (default true) */
} rp_engine_params;

RP_API rp_engine_params rp_engine_default_params(void);

/* The model must outlive the engine. With a cache_dir the store is opened
 * (refused when not the user's or group/world-writable) and attached; a
 * store that cannot be used is an error here, not a silent fallback (unless
 * cache_dir_optional). */
RP_API rp_status rp_engine_create(rp_model *model, const rp_engine_params *p, rp_engine **out);
/* Writes what the store has not yet persisted, then frees everything. */
RP_API void rp_engine_free(rp_engine *e);
/* What opening the store did that a user should hear (e.g. a damaged
 * database set aside), why an optional store is not used, or "". */
RP_API const char *rp_engine_notice(const rp_engine *e);
RP_API int32_t rp_engine_n_ctx(const rp_engine *e);
/* Static mode: whether a stored calibration set the call shapes. */
RP_API bool rp_engine_calibrated(const rp_engine *e);

/* Static mode's call shapes: rows of a prefill call (L_P) and of a selective-recompute call (L_S), padded to
 * them, and each call's latency. From the stored calibration when `calibrated`; otherwise defaults, and the
 * latencies are placeholders (not measured: do not report them as predictions). */
typedef struct rp_static_shapes {
    int32_t L_P, L_S;
    double lat_P_ms, lat_S_ms;
    bool calibrated;
} rp_static_shapes;

RP_API void rp_engine_static_shapes(const rp_engine *e, rp_static_shapes *out);
/* Waits until everything cached so far is on flash (no-op without a store). */
RP_API rp_status rp_engine_flush(rp_engine *e);

typedef struct rp_engine_stats {
    uint64_t cache_chunks, cache_bytes;       /* the RAM pool now */
    uint64_t inserts, evictions, prefix_hits, content_hits, misses;
    uint64_t flash_hits, loads, load_failures, prefetched, prefetch_used, written, write_failures;
    bool has_store;                           /* a store (cache_dir) is attached */
    uint64_t store_bytes;                     /* the store on disk (0 without one) */
    bool store_damaged;                       /* SQLite called its database corrupt: nothing more is written */
} rp_engine_stats;

RP_API void rp_engine_stats_get(rp_engine *e, rp_engine_stats *out);

/* ===========================================================================
 * Sequences and generation (as the engine: one thread at a time)
 * ========================================================================= */
typedef struct rp_seq rp_seq;

RP_API rp_status rp_seq_create(rp_engine *e, rp_seq **out);   /* a KV cache of rp_engine_n_ctx cells */
RP_API void rp_seq_free(rp_seq *s);
RP_API void rp_seq_reset(rp_seq *s);                          /* empty again (a new conversation) */
/* Tokens in the sequence: the prompt, fed tokens and generated tokens (the last generated one included while
 * it awaits decoding, see rp_seq_generate). */
RP_API int32_t rp_seq_n_past(const rp_seq *s);
/* The sequence's tokens ([rp_seq_n_past]); valid until the sequence changes. */
RP_API const rp_token *rp_seq_tokens(const rp_seq *s);
/* The logits of the sequence's last token ([n_vocab]); NULL before any, and while the last generated token
 * awaits decoding. */
RP_API const float *rp_seq_logits(const rp_seq *s);
/* Keeps the first n tokens and forgets the rest (their KV cells are reused by what comes next): a chat that
 * re-renders its conversation keeps the common prefix and feeds only what changed. n > rp_seq_n_past is
 * RP_ERR_RANGE. A prefilled prompt whose chunks were not cached yet is cached first when n cuts into it. The
 * sampler's penalty window keeps the tokens it took in (as llama.cpp's sampler history does). */
RP_API rp_status rp_seq_truncate(rp_seq *s, int32_t n);

/* Streaming: each generated piece of text as it becomes printable (UTF-8
 * complete, and never part of a stop string). Return false to stop: the
 * generation ends with RP_STOP_CANCELLED. Runs on the caller's thread. */
typedef bool (*rp_token_fn)(void *user, rp_token tok, const char *text, size_t len);

/* Per-call options: nothing here changes the engine's defaults. */
typedef struct rp_gen_opts {
    rp_sampler_params sampling;   /* default: rp_sampler_default_params() */
    int32_t max_tokens;           /* tokens to generate; < 0: until end-of-generation or a full context (default 128) */
    bool ignore_eos;              /* keep going past end-of-generation tokens */
    const char *const *stop;      /* strings that end the generation (not included in the text), or NULL */
    int32_t n_stop;
    /* reuse for this call (-1 / < 0: the engine's) */
    int reuse;                    /* rp_reuse_mode or -1 */
    float recompute_ratio;        /* < 0: the engine's */
    int select;                   /* rp_select_kind or -1 */
    int static_mode;              /* 1 on, 0 off, -1 the engine's */
    uint64_t cache_namespace;     /* 0: shared; chunks cached under one namespace are never found by calls with
                                     another (e.g. one per tenant) */
    bool persist;                 /* cache the prompt's chunks (default true) */
    rp_token_fn on_token;         /* NULL: no streaming */
    void *user;
} rp_gen_opts;

RP_API rp_gen_opts rp_gen_default_opts(void);

typedef enum rp_stop_reason {
    RP_STOP_NONE = 0,     /* not generated yet (prefill only) */
    RP_STOP_EOG,          /* an end-of-generation token */
    RP_STOP_LENGTH,       /* max_tokens */
    RP_STOP_STRING,       /* a stop string */
    RP_STOP_CONTEXT,      /* the context is full */
    RP_STOP_CANCELLED,    /* the token callback returned false */
} rp_stop_reason;

/* What one call did. Reuse counts are prompt tokens. */
typedef struct rp_gen_stats {
    int32_t prompt_tokens;
    int32_t reused_prefix;        /* from the cache's prefix tree (exact or approximate, below) */
    int32_t reused_prefix_exact;  /* of those, exactly what a plain prefill computes */
    int32_t reused_nonprefix;     /* chunks cached elsewhere, re-rotated (approximate) */
    int32_t recomputed;           /* reused tokens blend recomputed past its check layer */
    int32_t computed;             /* prompt tokens computed from scratch */
    int32_t load_failed;          /* cached chunks that failed to load or verify (never used; recomputed) */
    int32_t generated;            /* tokens sampled (an end-of-generation token included) */
    double ttft_ms;               /* from the call to the first token's logits */
    double prefill_ms, decode_ms;
    double prompt_tok_per_s, gen_tok_per_s;
    rp_stop_reason stop;
    /* how the prefill went (what `reprise run`'s stats line shows) */
    int32_t chunks;               /* the prompt's chunks */
    int32_t subchunk;             /* of the non-prefix tokens, matched inside stored chunks */
    int32_t computed_rows;        /* rows through the first layer (padding included) */
    int32_t calls;                /* forward / recompute calls */
    int32_t pad_rows;             /* static mode's padding rows */
    int32_t attempts;             /* prefill attempts (> 1 when cached chunks failed to load) */
    double match_ms, load_ms, load_exposed_ms, compute_ms;
    double plan_ms;               /* static mode: the plan's predicted latency (meaningful when calibrated) */
    uint64_t bytes_loaded;        /* KV bytes placed from the cache */
    bool static_shapes;           /* the prefill ran in static mode (fixed call shapes) */
    bool calibrated;              /* ... with shapes from a stored calibration (rp_static_shapes) */
    rp_status commit_status;      /* caching the prompt's chunks at the first generated token: RP_OK, or why they
                                     were not cached (the generation went on; after a generate that returned RP_OK,
                                     rp_last_error() has the detail) */
} rp_gen_stats;

/* The stats as one JSON object, the `stats: {json}` line of `reprise run`: the prompt's reuse (prompt_tokens,
 * chunks, reused_prefix, reused_prefix_exact, reused_prefix_approx, reused_nonprefix, subchunk, recomputed,
 * new, computed_rows, calls, pad_rows, load_failed, attempts) and its times in ms (ttft_ms, match_ms, load_ms,
 * load_exposed_ms, bytes_loaded, compute_ms, plan_ms). "plan_ms" is null unless the prefill was static and
 * calibrated (a dynamic prefill plans nothing; uncalibrated latencies are placeholders); a static prefill adds
 * "calibrated": true|false. Returns the length the text needs (truncated to cap - 1 bytes, NUL-terminated).
 * Thread-safe. */
RP_API size_t rp_gen_stats_json(const rp_gen_stats *st, char *buf, size_t cap);

/* Replaces the sequence's content with the prompt, reusing cached KV per the
 * options (the sequence is cleared first); afterwards rp_seq_logits holds the
 * last prompt token's logits. The prompt's chunks are cached at the first
 * generated token (off the time-to-first-token path), by rp_seq_commit, or
 * when a prefill on another sequence of the engine comes first. A prefill
 * starts a new generation: the next generate's sampler starts from its seed. */
RP_API rp_status rp_seq_prefill(rp_seq *s, const rp_prompt *p, const rp_gen_opts *o, rp_gen_stats *st);
/* Appends tokens to the sequence (a next user turn, a tool result), decoding
 * a generated token that awaits it first. The generation continues: the
 * sampler keeps its random state (see rp_seq_generate). */
RP_API rp_status rp_seq_feed(rp_seq *s, const rp_token *t, int32_t n);
/* Caches the last prefilled prompt's chunks now (a no-op when already done). */
RP_API rp_status rp_seq_commit(rp_seq *s);
/* Generates from the sequence's state: text into buf (NUL-terminated; text
 * beyond cap - 1 bytes is counted in *len but not written; buf may be NULL
 * with cap 0), streamed to o->on_token when set. st gets the generation's
 * figures (the prefill's are kept when a prefill came just before).
 * The generated tokens join the sequence, except one that ends it (an
 * end-of-generation token, a stop string's, one past a full context). When
 * max_tokens or the callback ends it, the last token joins undecoded (its
 * logits would go unused): the next feed or generate decodes it first.
 * Sampling: one sampler per sequence. It starts from o->sampling's seed at
 * the first generate after a prefill or reset, or when o->sampling differs
 * from the last call's; otherwise it goes on (a conversation continued with
 * rp_seq_feed draws one random stream, not the same draws every turn). Its
 * penalty window holds the last repeat_last_n tokens it took in. */
RP_API rp_status rp_seq_generate(rp_seq *s, const rp_gen_opts *o, char *buf, size_t cap, size_t *len, rp_gen_stats *st);

/* ===========================================================================
 * Multi-agent scheduler (every call thread-safe except rp_agents_step, which
 * one thread — the loop — calls; token callbacks run on that thread)
 * ========================================================================= */
typedef struct rp_agents rp_agents;
typedef int64_t rp_agent_id;

typedef enum rp_agents_policy {
    RP_AGENTS_BATCH_AR = 0,    /* continuous batching, no speculation */
    RP_AGENTS_SEQ_SD = 1,      /* one agent at a time with speculation */
    RP_AGENTS_BATCH_SD = 2,    /* batched speculation, a fixed draft length each */
    RP_AGENTS_HAL = 3,         /* global draft budget split by Historical Accepted Length */
    RP_AGENTS_HAL_YIELD = 4,   /* HAL plus suspend-and-yield on tool calls (default) */
    RP_AGENTS_UNIFORM = 5,     /* HAL's budget split evenly */
} rp_agents_policy;

typedef struct rp_agents_params {
    int32_t max_agents;        /* sequences that may exist at once (default 8) */
    int32_t max_active;        /* admitted to the batch at once (<= 0: max_agents) */
    int32_t n_ctx;             /* KV cells per agent (default 2048) */
    int32_t n_batch;           /* rows per step (default 512) */
    rp_kv_type kv_type;
    int n_threads;
    rp_agents_policy policy;
    const rp_model *draft;     /* a draft model with the same vocabulary, or NULL (n-gram drafts from history) */
} rp_agents_params;

RP_API rp_agents_params rp_agents_default_params(void);
/* The model (and draft) must outlive the scheduler. */
RP_API rp_status rp_agents_create(const rp_model *m, const rp_agents_params *p, rp_agents **out);
RP_API void rp_agents_free(rp_agents *a);
RP_API rp_status rp_agents_add(rp_agents *a, rp_agent_id *out);   /* RP_ERR_FULL when max_agents exist */
RP_API rp_status rp_agents_remove(rp_agents *a, rp_agent_id id);

typedef struct rp_turn_opts {
    rp_sampler_params sampling;
    int32_t max_tokens;              /* < 0: until the context is full (default 128) */
    const char *const *stop;         /* stop strings, or NULL */
    int32_t n_stop;
    bool suspend_on_tool_call;       /* a turn ending in a tool call (chat format) waits for its result (default true) */
    bool wait_after;                 /* the turn ends waiting whatever it generated: the caller runs a tool and
                                        rp_agents_resume()s with its result (default false) */
    /* each token as it is generated, on the stepping thread with the scheduler's lock held: quick (copy it
     * out), and no rp_agents_* call from inside it except rp_agents_cancel; false cancels the turn */
    bool (*on_token)(void *user, rp_agent_id id, rp_token tok);
    void *user;
} rp_turn_opts;

RP_API rp_turn_opts rp_turn_default_opts(void);
/* Queues tokens for an agent's next turn (appended to its history). */
RP_API rp_status rp_agents_submit(rp_agents *a, rp_agent_id id, const rp_token *t, int32_t n, const rp_turn_opts *o);
/* A waiting agent's tool result: appended, and its turn continues. */
RP_API rp_status rp_agents_resume(rp_agents *a, rp_agent_id id, const rp_token *t, int32_t n, const rp_turn_opts *o);
RP_API void rp_agents_cancel(rp_agents *a, rp_agent_id id);
/* One step: a batch over every admitted agent's work. *ran false when there
 * was none. */
RP_API rp_status rp_agents_step(rp_agents *a, bool *ran);
/* Steps until no agent has work (waiting agents have none). */
RP_API rp_status rp_agents_run(rp_agents *a);

typedef enum rp_agent_state {
    RP_AGENT_IDLE = 0, RP_AGENT_PREFILL, RP_AGENT_DECODE, RP_AGENT_WAITING,
} rp_agent_state;

typedef struct rp_agent_info {
    rp_agent_state state;
    int32_t n_tokens;          /* history length */
    int32_t generated;         /* tokens of the current / last turn */
    uint64_t drafted, accepted;
    rp_stop_reason stop;       /* how the last turn ended (RP_STOP_NONE while running or waiting) */
} rp_agent_info;

RP_API rp_status rp_agents_info(rp_agents *a, rp_agent_id id, rp_agent_info *out);
/* The agent's history from token `from`: up to cap ids, *n = the count copied. */
RP_API rp_status rp_agents_tokens(rp_agents *a, rp_agent_id id, int32_t from, rp_token *buf, int32_t cap, int32_t *n);

typedef struct rp_agents_stats {
    uint64_t steps, rows, generated, drafted, accepted;
    int32_t agents, active, waiting;
} rp_agents_stats;

RP_API void rp_agents_stats_get(rp_agents *a, rp_agents_stats *out);

/* ===========================================================================
 * Cache directory maintenance (a handle is used by one thread at a time;
 * readers work while a writer — an engine, or a writing handle — uses the
 * store, and another writer is refused while one holds it)
 * ========================================================================= */
typedef struct rp_cache rp_cache;

/* Opens the store in `dir`: read-only (stats, list, verify) or for writing
 * (verify with fix, evict, compact, clear; takes the store's lock). A store
 * directory or file that is not the user's or is group/world-writable is
 * refused. A directory holding no store is RP_ERR_NOT_FOUND. */
RP_API rp_status rp_cache_open(const char *dir, bool write, rp_cache **out);
RP_API void rp_cache_close(rp_cache *c);
/* Restricts the handle to the chunks one model wrote with one KV type (the
 * reuse engine's salt); RP_ERR_NOT_FOUND when the store has none. */
RP_API rp_status rp_cache_bind(rp_cache *c, const rp_model *m, rp_kv_type kv_type);

typedef struct rp_cache_info {
    uint64_t chunks, corrupt, files, blobs;
    uint64_t raw_bytes, stored_bytes, disk_bytes;
    uint64_t keywords, vectors, write_failures;
    int32_t models;
} rp_cache_info;

RP_API rp_status rp_cache_info_get(rp_cache *c, rp_cache_info *out);
/* A store whose first writer died before committing anything: opened (read-only) but with nothing to read;
 * every call sees no chunks and rp_cache_bind is RP_ERR_NOT_FOUND. */
RP_API bool rp_cache_is_empty(const rp_cache *c);
/* The store's disk use now: database pages in use + WAL + payload files (cheap, unlike rp_cache_info_get). */
RP_API uint64_t rp_cache_disk_bytes(rp_cache *c);

/* The key a model's chunks are stored under with a KV type (its fingerprint salted with the KV type and the
 * chunking): what rp_cache_bind selects and rp_cache_model.salt shows. Thread-safe. */
RP_API rp_status rp_cache_salt(const rp_model *m, rp_kv_type kv_type, uint64_t *salt);

typedef struct rp_cache_model {
    int64_t id;
    uint64_t salt;             /* rp_cache_salt of the model that wrote the chunks */
    const char *name;          /* the model's name when it wrote them ("" if none); valid during the callback */
    int kv_type;               /* rp_kv_type (rp_kv_type_name) */
    int32_t n_layer;
    uint64_t row_bytes;        /* KV bytes of one token */
    uint64_t chunks, bytes;    /* its chunks and their stored bytes */
} rp_cache_model;

/* Every model (salt) the store holds chunks of, in id order; return false from fn to stop. */
RP_API rp_status rp_cache_models(rp_cache *c, bool (*fn)(void *user, const rp_cache_model *m), void *user);

typedef struct rp_cache_entry {
    uint64_t id, parent;
    int64_t model;
    int32_t n_tokens, pos0;
    bool exact, in_file, compressed;
    uint64_t raw_bytes, stored_bytes, hits, last_used;
    double used_at;            /* Unix time of the last use */
    const rp_token *tokens;    /* NULL for a damaged row; valid during the callback */
} rp_cache_entry;

/* Every chunk row, in id order; return false from fn to stop. */
RP_API rp_status rp_cache_list(rp_cache *c, bool (*fn)(void *user, const rp_cache_entry *e), void *user);
/* SQLite's quick_check of the database first (*db_ok; the first problem in
 * `why` when it fails), then every row's checksums; `bad` is called for each
 * corrupt row; fix (a writing handle) deletes them. */
RP_API rp_status rp_cache_verify(rp_cache *c, bool fix, void (*bad)(void *user, uint64_t id, const char *why),
                                 void *user, bool *db_ok, char *why, size_t why_cap, uint64_t *ok, uint64_t *corrupt);
/* Cost-aware (or LRU) eviction until the store uses at most target_bytes. */
RP_API rp_status rp_cache_evict(rp_cache *c, uint64_t target_bytes, bool lru, int32_t *n_evicted, uint64_t *freed_bytes);
/* Removes orphans (payloads, keywords, vectors, files without rows), then VACUUM. */
RP_API rp_status rp_cache_compact(rp_cache *c, uint64_t *removed);
/* Deletes every chunk the handle sees (all, or the bound model's). */
RP_API rp_status rp_cache_clear(rp_cache *c, uint64_t *n_deleted);

#ifdef __cplusplus
}
#endif
#endif /* REPRISE_H */
