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
    /* GPU offload (Vulkan; docs/gpu.md). The last n_gpu_layers layers run on the GPU with their KV cells in
     * device memory (F16 KV only), the first ones on the CPU; the output head too when every layer is
     * offloaded. -1 (default): all of them when a GPU is present — a CPU-type Vulkan device (lavapipe /
     * llvmpipe) is never picked by default, only when asked for (gpu_device, $RP_GPU_DEVICE or N > 0) — else
     * CPU only; 0: CPU only; N: the last N (capped at the layer count). Layers whose weight types have no GPU kernel, and
     * architectures the GPU forward lacks, stay on the CPU (rp_model_gpu_notice says so). A device asked for
     * (N > 0, or named) that cannot be used fails the load. Reuse mode blend is refused with GPU layers. */
    int32_t n_gpu_layers;
    const char *gpu_device;   /* NULL: $RP_GPU_DEVICE, else the best non-CPU device; an index of rp_gpu_list or a
                                 case-insensitive piece of a device name */
} rp_model_params;

RP_API rp_model_params rp_model_default_params(void);

/* Loads and validates a GGUF model: architecture known, every tensor present
 * with the shape the hyper-parameters imply, weight types computable. Errors
 * name the tensor / key at fault. */
RP_API rp_status rp_model_load(const char *path, rp_model_params params, rp_model **out);
RP_API void rp_model_free(rp_model *m);
/* Layers on the GPU (0: CPU only), and the start-up line saying which device and layers, or why CPU only
 * ("gpu: ..."; "" for a vocab-only load). */
RP_API int32_t rp_model_gpu_layers(const rp_model *m);
RP_API const char *rp_model_gpu_notice(const rp_model *m);

typedef struct rp_model_desc {
    const char *name;         /* general.name, else the file's base name */
    const char *arch;         /* "llama", "qwen3" */
    const char *chat_format;  /* "llama3", "chatml", "llama2", "none" */
    int32_t n_vocab, n_ctx_train, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim;
    uint64_t weight_bytes;    /* bytes of weight data */
    uint64_t fingerprint;     /* digest of architecture, shapes and weights (cache keys are salted with it) */
    bool has_weights;         /* false for vocab_only loads */
    bool has_tokenizer;       /* false for a GGUF without one: nothing to tokenize, prompt or chat with */
    /* the rest of the hyper-parameters (`reprise inspect` shows them) */
    int32_t n_rot;            /* rotated dimensions per head (<= head_dim) */
    bool rope_neox;           /* NeoX-style rotation (the halves of a head) rather than adjacent pairs */
    bool rope_llama3;         /* Llama 3's per-frequency scaling (rope_freqs) */
    float rope_base;
    float rms_eps;
    bool tied_output;         /* the output projection is the token embedding (no output.weight) */
    const char *tokenizer;    /* "spm", "bpe", "wpm" (WordPiece), or "" without a tokenizer */
    int32_t n_tokens;         /* the tokenizer's vocabulary size (0 without one) */
    int32_t n_swa;            /* the sliding window of local layers (Gemma 2 / 3), 0: none */
    int32_t n_swa_layers;     /* layers with that window (the others attend the whole context) */
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

/* The template rp_chat_render (and the server) use: by default the model's own tokenizer.chat_template, run by
 * a Jinja2 interpreter that renders as Python jinja2 does under HF transformers; for a SentencePiece vocabulary
 * without one, the "llama2" built-in. rp_chat_template_set replaces it: spec is a built-in's name ("llama3",
 * "chatml", "qwen3", "llama2") or the path of a Jinja template file (NULL: back to the model's own). The
 * template is compiled and test-rendered now: an unknown name, an unreadable file or a template that fails is
 * an error naming line:column, and the model keeps the template it had. Call it before the model is shared
 * (no render may run meanwhile). */
RP_API rp_status rp_chat_template_set(rp_model *m, const char *spec);
/* RP_OK when the model has a chat template that renders; the error of its own tokenizer.chat_template when
 * that fails to compile or render (RP_ERR_FORMAT), RP_ERR_UNSUPPORTED when it has none. For start-up checks. */
RP_API rp_status rp_chat_template_check(const rp_model *m);
/* Where the template comes from: "gguf", a built-in's name, "file", or "none". */
RP_API const char *rp_chat_template_name(const rp_model *m);
/* Whether the template renders the tool definitions it is given (a front end that wants the model to see tools
 * states them itself, e.g. in the system message, when it does not: the plain Llama 3 template ignores them).
 * Thread-safe. */
RP_API bool rp_chat_template_shows_tools(const rp_model *m);

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
 * serialized by the caller; rp_engine_stats_get and rp_engine_flush may be
 * called from any thread)
 * ========================================================================= */
typedef struct rp_engine rp_engine;

/* How the chunk cache chooses what to evict, from RAM and from flash, when it has a store (without one: LRU). */
typedef enum rp_cache_policy {
    RP_CACHE_POLICY_COST = 0,  /* locality x the cost of recomputing or reloading it (default) */
    RP_CACHE_POLICY_LRU = 1,   /* least recently used (an ablation) */
} rp_cache_policy;

/* Static mode's call shapes: rows of a prefill call (L_P) and of a selective-recompute call (L_S), padded to
 * them, and each call's latency. From the stored calibration when `calibrated`; otherwise defaults, and the
 * latencies are placeholders (not measured: do not report them as predictions). */
typedef struct rp_static_shapes {
    int32_t L_P, L_S;
    double lat_P_ms, lat_S_ms;
    bool calibrated;
} rp_static_shapes;


typedef struct rp_engine_params {
    int n_threads;             /* compute threads (default 2) */
    int32_t n_ctx;             /* KV cells per sequence (0: min(4096, the model's training context)) */
    int32_t n_batch;           /* rows per forward call (default 512) */
    rp_kv_type kv_type;        /* default RP_KV_F16 */
    bool swa_full;             /* sliding-window layers (Gemma 2 / 3's local ones) keep all n_ctx cells, as llama.cpp's
                                  --swa-full; default false: only their window + n_batch cells (rp_kv_estimate) */
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
    bool cache_read_only;      /* open the store in cache_dir for reading only: lookups hit flash, nothing is
                                  written to it, no lock is taken (another process may write it meanwhile), and a
                                  directory holding no store is an error (default false) */
    bool n_ctx_over_train;     /* n_ctx may exceed the model's training context (positions past it extrapolate
                                  RoPE: quality degrades, as in llama.cpp); default false: n_ctx is capped at it */
    int32_t deviation;         /* blend's deviation measure at the check layer: an rp_deviation (benchmark
                                  support, below; default RP_DEVIATION_KV) */
    int32_t n_seq_max;         /* sequences expected to fill their context at once (default 1): rp_engine_create
                                  refuses (RP_ERR_NOMEM, naming the bytes) when their KV cache would not fit in
                                  the memory available (rp_system_mem_available); 0 skips the check */
    /* ablations: each component of the reuse system switched off alone (`reprise bench ablation`; the defaults
     * have everything on) */
    rp_cache_policy cache_policy; /* with a store (cache_dir): eviction from RAM and from flash (default
                                  RP_CACHE_POLICY_COST); a RAM-only cache evicts least recently used */
    bool cache_prefetch;       /* a thread loads chunks likely to be hit from flash ahead of demand, and warms the
                                  RAM pool at start (default true) */
    bool pipeline;             /* cached KV is placed layer by layer alongside the compute (default true); false:
                                  placed, flash reads included, before the compute starts */
    bool async_load;           /* with pipeline, flash reads run on a loader thread (default true); false: on the
                                  calling thread, before the compute */
    bool cache_sync_persist;   /* chunks are written to flash on the calling thread at commit, not by the
                                  background writer (default false) */
    bool cache_naive_store;    /* the store as one table without secondary indexes: lookups scan (default false;
                                  only for a store made so, e.g. by rp_cache_add_filler with naive) */
    rp_static_shapes static_shapes;   /* static mode: L_P, L_S (both > 0) and the latencies to plan with, taking
                                  precedence over a stored calibration (e.g. an rp_calibrate result not stored;
                                  `calibrated` says whether they were measured); default zero: the stored ones,
                                  else the defaults */
    /* the store's semantic index (with cache_dir): the sub-chunk search proposes stored chunks that share rare
     * words with a prompt's new text, or whose embedding is nearest to it; the token LCS still decides what is
     * reused */
    bool cache_terms;          /* chunks written to the store are indexed by the words of their text (detokenized
                                  with the model's vocabulary), weighted by idf over the store (default true) */
    const char *embed_model;   /* a GGUF the embedder accepts (rp_embedder), or NULL (default): with it, every
                                  chunk written gets a dense vector (its text embedded, the first embed_dim
                                  components re-normalised), and each new run of a prompt a query vector; copied.
                                  Needs cache_dir */
    int32_t embed_dim;         /* components kept of each embedding (default 256; 0 or more than the model's
                                  n_embd: all) */
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
/* Static mode: whether a stored calibration (or static_shapes marked calibrated) set the call shapes. */
RP_API bool rp_engine_calibrated(const rp_engine *e);


RP_API void rp_engine_static_shapes(const rp_engine *e, rp_static_shapes *out);
/* The shapes static mode uses without a calibration (L_P 128, L_S 512; placeholder latencies, calibrated false).
 * Thread-safe. */
RP_API rp_static_shapes rp_static_default_shapes(void);
/* Waits until everything cached so far is on flash (no-op without a store). Thread-safe. */
RP_API rp_status rp_engine_flush(rp_engine *e);

typedef struct rp_engine_stats {
    uint64_t cache_chunks, cache_bytes;       /* the RAM pool now */
    uint64_t inserts, evictions, prefix_hits, content_hits, misses;
    uint64_t flash_hits, loads, load_failures, prefetched, prefetch_used, written, write_failures;
    bool has_store;                           /* a store (cache_dir) is attached */
    uint64_t store_bytes;                     /* the store on disk (0 without one) */
    bool store_damaged;                       /* SQLite called its database corrupt: nothing more is written */
    uint64_t store_evictions;                 /* chunks evicted from the store to keep its disk budget */
    uint64_t load_bytes;                      /* payload bytes read from flash (demand and prefetch) */
    double load_ms;                           /* time in flash reads on the calling thread */
    uint64_t write_bytes;                     /* payload bytes written to flash */
    double write_ms;                          /* time in write transactions (the writer's, or the caller's with
                                                 cache_sync_persist) */
    uint64_t dropped_dirty;                   /* chunks evicted from RAM before they were written to flash */
    uint64_t transient_chunks, transient_bytes;   /* chunks held outside the RAM budget now (over-budget loads
                                                 and inserts, until released) */
    uint64_t dirty_chunks;                    /* chunks not yet on flash now */
    uint64_t indexed_chunks;                  /* chunks written with their terms / vector (cache_terms, embed_model) */
    uint64_t index_failures;                  /* chunks whose indexing failed (written without terms / vector) */
    double index_ms;                          /* time the store's writer spent indexing them (detokenizing, terms,
                                                 embedding; off the request path) */
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
/* Forks: dst (another sequence of the same engine) becomes a copy of src — its tokens, their KV cells (copied:
 * each sequence owns its cache) and its last logits — so that several continuations of one prompt are generated
 * without prefilling it again (a server's n > 1 choices). What dst held is dropped (its uncommitted prompt is
 * cached first). dst's sampler starts from the seed of its next generate, as after a prefill: a generate on a
 * fork of a freshly prefilled sequence gives what a generate after prefilling the same prompt gives, token for
 * token, with the same options. The fork's generate reports no prefill figures (the prompt was computed once,
 * on src); src's prompt stays src's to cache. src is not changed. RP_ERR_INVALID_ARG for NULL, dst == src or
 * another engine's sequence. As the engine: one thread at a time. */
RP_API rp_status rp_seq_fork(rp_seq *dst, const rp_seq *src);

/* Streaming: each generated piece of text as it becomes printable (UTF-8
 * complete, and never part of a stop string). Return false to stop: the
 * generation ends with RP_STOP_CANCELLED. Runs on the caller's thread. */
typedef bool (*rp_token_fn)(void *user, rp_token tok, const char *text, size_t len);

/* A logits processor: called before each token is sampled with a writable copy of that token's logits
 * ([n_vocab]) and the sequence so far (hist[0..n_hist)); it may change them (-INFINITY forbids a token: a
 * grammar, a JSON constraint). Runs on the caller's thread. */
typedef void (*rp_logits_fn)(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab);

/* A chosen-token observer: called once per generated token (an end-of-generation token included; with
 * speculative decoding, every accepted draft token too), on the generating thread, right after the token was
 * chosen, with the model's raw logits at its position ([n_vocab]): before temperature, penalties, logit bias,
 * top-k / top-p / min-p and any rp_logits_fn. Read-only, valid during the call. What log-probabilities are
 * computed from (rp_logprobs). */
typedef void (*rp_chosen_fn)(void *user, rp_token chosen, const float *logits, int32_t n_vocab);

#define RP_LOGPROBS_MAX_TOP 20   /* OpenAI's top_logprobs limit */

/* Log-probabilities: the log-softmax of logits[0..n_vocab) at `chosen` (*chosen_lp, may be NULL), and the k most
 * likely tokens (0 <= k <= RP_LOGPROBS_MAX_TOP) into top[0..k) / top_lp[0..k), most likely first (ties: the lower
 * id first), found in one pass without sorting the vocabulary (O(n_vocab k) worst case, O(n_vocab) typically);
 * no allocation. -INFINITY logits have log-probability -INFINITY. RP_ERR_INVALID_ARG for a bad size, k or
 * chosen (chosen < 0 is allowed when chosen_lp is NULL). */
RP_API rp_status rp_logprobs(const float *logits, int32_t n_vocab, rp_token chosen, int32_t k, float *chosen_lp,
                             rp_token *top, float *top_lp);

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
    uint8_t *recompute_marks;     /* NULL, or [the prompt's tokens] bytes that rp_seq_prefill sets to 1 for each
                                     reused (non-prefix) token blend's selection recomputed past its check layer,
                                     0 for every other token (which tokens a prompt's recompute chose) */
    rp_logits_fn on_logits;       /* NULL: sample the model's logits as they are */
    void *logits_user;
    bool reseed;                  /* the sampler starts from sampling.seed even when the generation goes on (each
                                     request of a server independent of the last, on a continued sequence) */
    rp_chosen_fn on_chosen;       /* NULL, or each chosen token with its raw logits (log-probabilities) */
    void *chosen_user;
} rp_gen_opts;

RP_API rp_gen_opts rp_gen_default_opts(void);

/* ---------------------------------------------------------------------------
 * Constrained decoding: GBNF grammars (llama.cpp's format) and JSON Schema
 * ------------------------------------------------------------------------- */
typedef struct rp_grammar rp_grammar;              /* a compiled grammar (immutable, shareable) */
typedef struct rp_grammar_vocab rp_grammar_vocab;  /* a model's token strings as a trie (built once per model) */
typedef struct rp_grammar_state rp_grammar_state;  /* one sequence's position in a grammar (not thread-safe) */

/* Parses GBNF text; `root` names the start rule (NULL: "root"). RP_ERR_FORMAT with "grammar: LINE:COL: ..." in
 * rp_last_error on a syntax error or an undefined rule. */
RP_API rp_status rp_grammar_parse(const char *gbnf, const char *root, rp_grammar **out);
RP_API void rp_grammar_free(rp_grammar *g);
/* JSON Schema (text) -> GBNF text (malloc'd; free()), the subset llama.cpp's json-schema-to-grammar accepts.
 * schema NULL or "{}": any JSON value (response_format json_object). RP_ERR_UNSUPPORTED names the keyword. */
RP_API rp_status rp_grammar_schema_to_gbnf(const char *schema_json, char **gbnf_out);
/* rp_grammar_schema_to_gbnf then rp_grammar_parse. */
RP_API rp_status rp_grammar_from_json_schema(const char *schema_json, rp_grammar **out);

RP_API rp_status rp_grammar_vocab_new(const rp_model *m, rp_grammar_vocab **out);
RP_API void rp_grammar_vocab_free(rp_grammar_vocab *v);
/* A state at the grammar's start; v may be NULL for byte-level use only (accept_bytes, can_end). g and v must
 * outlive the state. */
RP_API rp_status rp_grammar_state_new(const rp_grammar *g, const rp_grammar_vocab *v, rp_grammar_state **out);
RP_API rp_status rp_grammar_state_reset(rp_grammar_state *s);
RP_API void rp_grammar_state_free(rp_grammar_state *s);
/* Advances by UTF-8 bytes / one token; RP_ERR_INVALID_ARG when they cannot continue the grammar (the state is
 * then failed). An end-of-generation token is accepted only where the grammar can end. */
RP_API rp_status rp_grammar_accept_bytes(rp_grammar_state *s, const char *bytes, size_t n);
RP_API rp_status rp_grammar_accept_token(rp_grammar_state *s, rp_token t);
RP_API bool rp_grammar_can_end(const rp_grammar_state *s);
/* Sets logits[t] = -INFINITY for every token that cannot continue the grammar (end-of-generation tokens stay
 * allowed only where it can end). A state's mask is built by a walk of the vocabulary trie the first time any
 * state on the same vocabulary and an equal grammar (by content: another request's compilation of the same
 * schema too) is there; after that it comes from the vocabulary's cache (thread-safe). */
RP_API rp_status rp_grammar_mask(rp_grammar_state *s, float *logits, int32_t n_vocab);
/* Whether rp_grammar_mask would leave token t allowed, found from t's bytes alone (no mask); s is unchanged. */
RP_API bool rp_grammar_allows(rp_grammar_state *s, rp_token t);
/* How many of toks[0..n), taken in order from the state's position, the grammar accepts (as
 * rp_grammar_accept_token would, an end-of-generation token ending the count); s is unchanged. Speculative
 * drafts are cut there. */
RP_API int32_t rp_grammar_accepts_prefix(rp_grammar_state *s, const rp_token *toks, int32_t n);
/* The on_logits hook's bookkeeping alone: on the first call (after new / reset) hist is taken as the prompt,
 * later calls accept hist's tokens since the last call (a token the grammar rejects fails the state). */
RP_API void rp_grammar_follow(rp_grammar_state *s, const rp_token *hist, int32_t n_hist);
/* An rp_logits_fn (rp_gen_opts.on_logits, logits_user = the state): rp_grammar_follow, then rp_grammar_mask.
 * Use a fresh or reset state per call. rp_seq_generate and the scheduler (rp_agents) recognise this hook: with
 * greedy sampling they take the model's own choice when the grammar allows it (the same token the masked
 * logits give) and mask only when it does not; the scheduler speculates such turns, cutting each draft at the
 * first token the grammar rejects and verifying the rest under the mask (output identical to unspeculated
 * constrained decoding for greedy, the same distribution when sampling). Another hook is never speculated. */
RP_API void rp_grammar_on_logits(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab);

/* The vocabulary's mask cache: budget in bytes (default 64 MiB, or RP_GRAMMAR_CACHE_MB at rp_grammar_vocab_new;
 * 0: none, every mask is a trie walk), least recently used masks out. A mask costs n_vocab / 8 bytes plus its
 * state's key. */
RP_API void rp_grammar_vocab_set_cache_bytes(rp_grammar_vocab *v, size_t bytes);
typedef struct rp_grammar_stats {
    uint64_t masks_built;       /* masks built by a trie walk (cache misses) */
    uint64_t cache_hits;        /* masks served from the cache */
    uint64_t checks;            /* single tokens checked (rp_grammar_allows, rp_grammar_accepts_prefix) */
    uint64_t checks_rejected;   /* ... of which the grammar refused */
    uint64_t cache_entries, cache_bytes, cache_cap_bytes, evictions;
    double build_ms;            /* time spent in trie walks */
    double busy_ms;             /* time spent in rp_grammar_follow / mask / allows / accepts_prefix (walks included):
                                   the grammar's own cost */
} rp_grammar_stats;
/* Counters since the vocabulary was made (or the last reset), over every state on it. */
RP_API void rp_grammar_vocab_stats(const rp_grammar_vocab *v, rp_grammar_stats *out);
RP_API void rp_grammar_vocab_stats_reset(rp_grammar_vocab *v);

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
    rp_token last_token;          /* the last token sampled, -1 if none: with RP_STOP_EOG the end-of-generation
                                     token (which neither joins the sequence nor reaches on_token) */
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
 * Embeddings (an embedder is used by one thread at a time; the model it reads is shared)
 * ========================================================================= */

/* How the per-token hidden states of an input become its embedding (llama.cpp's --pooling, the GGUF key
 * `<arch>.pooling_type`, same numbers). The hidden states are the final ones after the output norm, what the
 * logits are computed from; attention stays causal (decoder models), so CLS is the first token's state, which
 * has seen only itself, and LAST the only one that has seen the whole input. Encoder models (bert, nomic-bert)
 * attend both ways and have no output norm: the states are the last layer's, and every one has seen the whole
 * input. */
typedef enum rp_pooling {
    RP_POOLING_MODEL = -1,   /* the model's <arch>.pooling_type; MEAN when the file has none (llama.cpp: NONE) */
    RP_POOLING_NONE = 0,     /* one vector per token */
    RP_POOLING_MEAN = 1,
    RP_POOLING_CLS = 2,      /* the first token's */
    RP_POOLING_LAST = 3,     /* the last token's */
} rp_pooling;

/* "none", "mean", "cls", "last" (-1 for any other name or NULL); the namer returns "?" out of range and
 * "model" for RP_POOLING_MODEL. */
RP_API int rp_pooling_parse(const char *name);
RP_API const char *rp_pooling_name(rp_pooling p);
/* The pooling the model's file asks for (RP_POOLING_MEAN when it says nothing, and for a reranker's RANK (4),
 * which needs a classification head: rp_embedder_create refuses RP_POOLING_MODEL on such a file). */
RP_API rp_pooling rp_model_pooling(const rp_model *m);

typedef struct rp_embedder_params {
    rp_pooling pooling;       /* default RP_POOLING_MODEL */
    bool normalize;           /* L2-normalize every output vector (default true, as llama-server's /v1/embeddings) */
    int32_t n_ctx;            /* the longest input, tokens (0, default: min(4096, the model's training context);
                                 bert: at most its training context, its learned positions) */
    int32_t n_batch;          /* rows per forward pass (default 512) */
    int32_t n_seq;            /* inputs of at most n_batch tokens packed into one pass (default 4; each has a KV
                                 cache of n_batch cells, plus one of n_ctx cells for a longer input) */
    int n_threads;            /* default 2 */
    rp_kv_type kv_type;       /* default RP_KV_F16 (encoders have no KV cache: each input is one pass, several
                                 short ones, up to n_seq + 1, packed in max(n_ctx, n_batch) rows) */
} rp_embedder_params;

typedef struct rp_embedder rp_embedder;

RP_API rp_embedder_params rp_embedder_default_params(void);
/* Allocates everything the passes need (compute scratch, the KV caches, a thread pool); the model must outlive
 * the embedder and have weights. */
RP_API rp_status rp_embedder_create(const rp_model *m, const rp_embedder_params *p, rp_embedder **out);
RP_API void rp_embedder_free(rp_embedder *e);
RP_API int32_t rp_embedder_n_embd(const rp_embedder *e);   /* floats per vector */
RP_API int32_t rp_embedder_n_ctx(const rp_embedder *e);    /* the longest input accepted */
RP_API rp_pooling rp_embedder_pooling(const rp_embedder *e);   /* never RP_POOLING_MODEL */

/* Tokenizes a text as embeddings expect (llama.cpp's): BOS and EOS when the vocabulary asks for them ([CLS] and
 * [SEP] for WordPiece), special token texts parsed. RP_ERR_FULL with *n_out = the count needed when cap is too small. */
RP_API rp_status rp_embed_tokenize(const rp_model *m, const char *text, size_t len, rp_token *out, int32_t cap,
                                   int32_t *n_out);

/* Embeds n_inputs token sequences (inputs[i] of n_tokens[i] tokens, each 1..rp_embedder_n_ctx), several per
 * forward pass, each its own causal sequence. Writes to out (cap floats): pooled, n_inputs vectors in input
 * order; RP_POOLING_NONE, one vector per token, input after input. *n_out: the floats written, or needed (with
 * RP_ERR_FULL, before any work). Every input is checked before any pass (an empty one, one too long, a token
 * out of the vocabulary: RP_ERR_INVALID_ARG / RP_ERR_RANGE naming the input). Allocates nothing. */
RP_API rp_status rp_embed(rp_embedder *e, const rp_token *const *inputs, const int32_t *n_tokens, int32_t n_inputs,
                          float *out, size_t cap, size_t *n_out);

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

/* Who proposes the draft tokens a speculative step verifies. */
typedef enum rp_draft_kind {
    RP_DRAFT_AUTO = 0,    /* none for RP_AGENTS_BATCH_AR, the draft model when given, else n-grams (default) */
    RP_DRAFT_NONE = 1,    /* no speculation (only with RP_AGENTS_BATCH_AR) */
    RP_DRAFT_NGRAM = 2,   /* prompt lookup in the agent's own history */
    RP_DRAFT_SELF = 3,    /* the target's first layers and its output head */
    RP_DRAFT_MODEL = 4,   /* rp_agents_params.draft */
} rp_draft_kind;

typedef struct rp_agents_params {
    int32_t max_agents;        /* sequences that may exist at once (default 8) */
    int32_t max_active;        /* admitted to the batch at once (<= 0: max_agents) */
    int32_t n_ctx;             /* KV cells per agent (default 2048) */
    int32_t n_batch;           /* rows per step (default 512) */
    rp_kv_type kv_type;
    bool swa_full;             /* sliding-window layers keep every cell (as rp_engine_params.swa_full; default false) */
    int n_threads;
    rp_agents_policy policy;
    const rp_model *draft;     /* a draft model with the same vocabulary, or NULL (n-gram drafts from history) */
    rp_draft_kind drafter;     /* default RP_DRAFT_AUTO */
    double kv_limit_mb;        /* KV in use above which agents waiting on a tool result are demoted (compressed
                                  in memory) until resumed (0: never; default) */
    int32_t self_layers;       /* RP_DRAFT_SELF: target layers a draft runs (default 2) */
    float prefill_share;       /* part of n_batch kept for pending prompts while drafts would fill it (0.25) */
    /* draft lengths: HAL splits draft_budget (M) over the decoding agents by Historical Accepted Length (at least
     * draft_min each; softmax temperature hal_tau, EMA weight of the newest step hal_gamma), uniform splits it
     * evenly, Batch-SD / Seq-SD draft draft_fixed each; no agent more than draft_max (<= RP_AGENTS_MAX_DRAFT) */
    int32_t draft_budget;      /* default 16 */
    int32_t draft_min;         /* default 1 */
    float hal_tau;             /* default 1 */
    float hal_gamma;           /* default 0.3 */
    int32_t draft_fixed;       /* default 16 */
    int32_t draft_max;         /* default 16 */
} rp_agents_params;

/* The longest draft one agent verifies in a step. */
#define RP_AGENTS_MAX_DRAFT 64

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
    /* a logits processor before each token of the turn is sampled (e.g. rp_grammar_on_logits with a per-agent
     * rp_grammar_state, reset per turn), on the stepping thread; hist is the agent's tokens so far. A turn with
     * rp_grammar_on_logits is speculated, its drafts checked against the grammar (see there); one with any
     * other hook is not: its drafts are off (its tokens are sampled one by one). NULL: none */
    rp_logits_fn on_logits;
    void *logits_user;
    /* each chosen token with its raw logits (log-probabilities; drafts stay on), on the stepping thread with the
     * scheduler's lock held: quick, no rp_agents_* call from inside. NULL: none */
    rp_chosen_fn on_chosen;
    void *chosen_user;
    /* end-of-generation tokens are never sampled this turn (llama-server's ignore_eos: their logits -inf, drafts
     * verified against that), so it runs to max_tokens or the context; with on_logits, after it, unless it allows
     * nothing else (a grammar's end still ends the turn). Unlike rp_gen_opts.ignore_eos, which samples them and
     * goes on past them. Default false */
    bool ignore_eos;
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

/* What an agent did in the step it last took part in. */
typedef enum rp_agent_role {
    RP_AGENT_ROLE_NONE = 0,      /* nothing yet */
    RP_AGENT_ROLE_PREFILL = 1,   /* ran a prompt chunk */
    RP_AGENT_ROLE_DECODE = 2,    /* one token, no draft */
    RP_AGENT_ROLE_VERIFY = 3,    /* its last token and a draft verified */
} rp_agent_role;

typedef struct rp_agent_info {
    rp_agent_state state;
    int32_t n_tokens;          /* history length */
    int32_t generated;         /* tokens of the current / last turn */
    uint64_t drafted, accepted;
    rp_stop_reason stop;       /* how the last turn ended (RP_STOP_NONE while running or waiting) */
    int32_t n_cached;          /* KV cells filled */
    bool has_slot;             /* admitted to the batch */
    bool demoted;              /* its KV is demoted (kv_limit_mb) */
    uint64_t demotions, restores;
    int64_t last_step;         /* the step it last took part in (-1: none yet) */
    rp_stop_reason turn_stop;  /* how the latest turn ended, also while it waits (RP_STOP_NONE while it runs) */
    rp_agent_role last_role;   /* what it did in last_step */
    int32_t last_draft;        /* draft length of its latest verify step */
    int32_t last_accepted;     /* draft tokens accepted in it */
    float hal;                 /* its Historical Accepted Length (what HAL splits the budget by) */
    int32_t n_turns;           /* turns finished */
    uint64_t prompt_tokens;    /* over its life: caller tokens (prompts, tool results) run through the target */
    uint64_t gen_tokens;       /* over its life: tokens generated */
} rp_agent_info;

RP_API rp_status rp_agents_info(rp_agents *a, rp_agent_id id, rp_agent_info *out);
/* The agent's history from token `from`: up to cap ids, *n = the count copied. */
RP_API rp_status rp_agents_tokens(rp_agents *a, rp_agent_id id, int32_t from, rp_token *buf, int32_t cap, int32_t *n);

typedef struct rp_agents_stats {
    uint64_t steps, rows, generated, drafted, accepted;
    int32_t agents, active, waiting;
    int32_t demoted;                  /* agents whose KV is demoted now */
    uint64_t kv_bytes;                /* KV resident in memory */
    uint64_t demotions, restores;     /* since creation */
    uint64_t prefill_rows;
    double draft_s, target_s, total_s;   /* time in draft / target forwards and in steps */
    uint64_t forwards;                /* target forwards (steps that ran) */
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
    uint64_t terms, term_docs;   /* distinct extracted terms, and the chunks indexed by their terms */
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
/* Benchmark support: adds n cold rows of a placeholder model ("ablation-filler": 16-token chunks in chains of 8,
 * 512-byte zero payloads, seeded token ids) to the store in dir (made, private, when missing), so a fresh store is
 * as large as a long-lived one: indexed lookups stay O(log n), a naive store (naive: one table without secondary
 * indexes, as rp_engine_params.cache_naive_store opens it) scans them. No engine ever hits them (another model's
 * salt). The same seed gives the same rows. One writer at a time per store (it takes the store's lock). */
RP_API rp_status rp_cache_add_filler(const char *dir, bool naive, int64_t n, uint64_t seed);

/* ---- analysis, calibration, model files ---- */

/* A plan: what rp_seq_prefill would do with a prompt on an engine, as a dry run. Nothing is computed; no KV cache
 * is written; nothing is cached or evicted (the chunk cache's lookups count in rp_engine_stats as a prefill's do).
 * Where each token's KV would come from, the prompt's chunks and segments, and the calls of static mode's schedule
 * (the DP plan, and the naive one-call-type-per-segment plan beside it) sized by the engine's static shapes. */
typedef enum rp_plan_kind {
    RP_PLAN_PREFIX = 0,   /* from the cache's prefix tree (the same tokens at the same positions) */
    RP_PLAN_REUSE = 1,    /* from a chunk cached elsewhere, re-rotated (approximate; blend recomputes some) */
    RP_PLAN_NEW = 2,      /* computed from scratch */
} rp_plan_kind;

/* A chunk's place in the plan (rp_chunk_label_name: the words `reprise plan` prints). The prefix's exact part is
 * its head: exactly what a plain prefill computes; after it, chunks an approximate run (full, or blend at r < 1)
 * wrote. */
typedef enum rp_chunk_label {
    RP_CHUNK_PREFIX_EXACT = 0,       /* "prefix (exact)": inside the prefix's exact head */
    RP_CHUNK_PREFIX_APPROX,          /* "prefix (approx.)": inside the prefix, after its exact head */
    RP_CHUNK_PREFIX_PART_EXACT,      /* "prefix (part exact)": inside the prefix; the exact head ends inside it */
    RP_CHUNK_PARTIAL_EXACT,          /* "partial prefix (exact)": the prefix ends inside it, its head exact */
    RP_CHUNK_PARTIAL_APPROX,         /* "partial prefix (approx.)": the prefix ends inside it, its head approximate */
    RP_CHUNK_REUSED,                 /* "reused (re-rotated)": found cached elsewhere */
    RP_CHUNK_NEW,                    /* "new" */
} rp_chunk_label;

/* Thread-safe; a static string ("?" for a value out of range). */
RP_API const char *rp_chunk_label_name(rp_chunk_label l);

typedef struct rp_plan_chunk {
    int32_t begin, len;        /* tokens [begin, begin + len) */
    uint64_t hash;             /* its key in the cache (its tokens and everything before them, salted) */
    rp_chunk_label label;
} rp_plan_chunk;

typedef struct rp_plan_segment {   /* a maximal run of tokens of one kind, in prompt order */
    rp_plan_kind kind;
    int32_t begin, len;
} rp_plan_segment;

typedef struct rp_plan_call {      /* one call of a static schedule: tokens [begin, end), padded to its shape */
    bool recompute;            /* a selective-recompute call (L_S rows) rather than a prefill call (L_P rows) */
    int32_t begin, end;
    int32_t n_new, n_reuse;    /* its tokens of each kind */
    int32_t padding;           /* padding rows up to the shape */
} rp_plan_call;

typedef struct rp_plan_desc {
    int32_t n_tokens;
    /* what rp_gen_stats would count */
    int32_t reused_prefix, reused_prefix_exact, reused_nonprefix, computed;
    int32_t recompute_dynamic;        /* reused tokens a (dynamic) blend prefill recomputes past its check layer:
                                         ceil(r * reused_nonprefix); every new token and the last one besides */
    const uint8_t *token_kind;        /* [n_tokens] each token's rp_plan_kind */
    const rp_plan_chunk *chunks;
    int32_t n_chunks;
    const rp_plan_segment *segments;
    int32_t n_segments;
    rp_static_shapes shapes;          /* what the calls are sized by (rp_engine_static_shapes) */
    const rp_plan_call *dp_calls;     /* static mode's plan (the DP scheduler) */
    int32_t n_dp_calls;
    double dp_cost;                   /* its predicted latency in ms when shapes.calibrated; otherwise a cost in
                                         placeholder units (the default per-call latencies), not a time */
    const rp_plan_call *naive_calls;  /* one call type per segment, for comparison */
    int32_t n_naive_calls;
    double naive_cost;
} rp_plan_desc;

typedef struct rp_plan rp_plan;

/* Plans the prompt with the call's reuse options (o: reuse, recompute_ratio, select, cache_namespace; NULL: the
 * engine's). A prompt prefilled on one of the engine's sequences and not yet cached is cached first (as a prefill
 * on another sequence does). RP_ERR_RANGE for a prompt longer than the engine's context. As the engine: one thread
 * at a time; the plan itself is immutable (any thread) and independent of the engine once made. */
RP_API rp_status rp_engine_plan(rp_engine *e, const rp_prompt *p, const rp_gen_opts *o, rp_plan **out);
RP_API void rp_plan_free(rp_plan *pl);
/* The plan's figures; the arrays live as long as the plan. */
RP_API rp_plan_desc rp_plan_describe(const rp_plan *pl);

/* Calibration of static mode: the latency of prefill calls and of selective-recompute calls over a range of sizes,
 * measured on this machine, and the two call shapes chosen from them (L_P, L_S: among the sizes near the per-token
 * turning point, the pair whose DP plans cost least over doc-QA / chat / agent-skill layouts). Engines in static
 * mode look it up (rp_engine_params.load_calibration) by model, CPU, kernel level and thread count. */
typedef struct rp_calibrate_params {
    const int32_t *sizes;      /* call sizes, increasing multiples of 32, at most 64 of them (default: 32, 64, 96,
                                  128, 192, 256, 384, 512, 768, 1024); the array must outlive the call */
    int32_t n_sizes;
    int32_t reps;              /* runs per size, the fastest kept (default 3) */
} rp_calibrate_params;

RP_API rp_calibrate_params rp_calibrate_default_params(void);

typedef struct rp_calibration {
    int32_t n_points;
    int32_t sizes[64];
    double prefill_ms[64];     /* a plain prefill call of sizes[i] tokens */
    double recompute_ms[64];   /* a selective-recompute call over sizes[i] reused tokens */
    rp_static_shapes shapes;   /* the chosen L_P / L_S and their measured latencies (calibrated: true) */
    float recompute_ratio;     /* the r the shapes were chosen for */
    int n_threads;             /* the threads it was measured with */
} rp_calibration;

/* Measures with an engine's settings (p: n_threads, kv_type, recompute_ratio, check_layer, select; NULL: the
 * defaults; no cache is opened) on a context of its own; seconds on a large model. Changes nothing stored: see
 * rp_calibration_save. Thread-safe (the model is only read). */
RP_API rp_status rp_calibrate(const rp_model *m, const rp_engine_params *p, const rp_calibrate_params *cp,
                              rp_calibration *out);
/* Stores a calibration where engines look it up: DIR/calib-<model fingerprint>-<machine key hash>.txt with DIR =
 * cache_dir, else $XDG_CACHE_HOME/reprise, else ~/.cache/reprise (made, private, when missing); one file per
 * model, CPU, kernel level and thread count (c->n_threads), replacing an earlier one. Its path goes to path (cap
 * bytes, NUL-terminated; NULL for none). Thread-safe (one writer per file). */
RP_API rp_status rp_calibration_save(const rp_model *m, const rp_calibration *c, const char *cache_dir, char *path,
                                     size_t cap);
/* The stored shapes for this model, machine and thread count (calibrated: true), or false (and *out untouched)
 * when none matches; cache_dir as for rp_calibration_save. Thread-safe. */
RP_API bool rp_calibration_lookup(const rp_model *m, const char *cache_dir, int n_threads, rp_static_shapes *out);

/* Random-weight models with real architectures' shapes and metadata (`reprise synth`): for speed work without
 * downloading weights, and for tests. */
typedef struct rp_model_synth_params {
    const char *arch;          /* "llama" (default), "qwen3", "qwen2", "phi3", "gemma2", "gemma3", or the encoders
                                  (embedding models, with a built-in WordPiece vocabulary) "bert" and "nomic-bert" */
    const char *preset;        /* shapes: "tiny" (default; every architecture), "tiny-llama3", "small" (llama),
                                  "llama-3.2-1b", "llama-3.2-3b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
                                  "qwen2.5-0.5b", "qwen2.5-1.5b" (qwen2), "tiny-longrope", "phi-3-mini",
                                  "phi-4-mini" (phi3; fused attn_qkv and gate|up; LongRoPE factors in
                                  tiny-longrope and phi-4-mini), "gemma-2-2b",
                                  "gemma-3-1b", "bge-small", "all-minilm-l6" (bert), "nomic-embed-text-v1.5"
                                  (nomic-bert) */
    const char *type;          /* weights: "f32", "f16", "bf16", "q8_0" (default), "q4_0", "q4_k", "q6_k",
                                  "q4_k_m" (Q4_K, with Q6_K for the sensitive tensors) */
    const char *vocab_path;    /* a GGUF whose tokenizer is copied, or NULL: a built-in byte-level vocabulary */
    uint64_t seed;             /* default 1 */
    int n_threads;             /* default 2 (the file does not depend on it) */
    float peak;                /* 0 (default): off. > 0: "peaked" weights — an untied output.weight scaled so the
                                  next-token logits have a std of ~peak units, and the attention queries (attn_q,
                                  or qwen3's attn_q_norm) scaled by peak so attention is sharp; for parity tests */
    rp_progress_fn progress;   /* NULL, or called as tensor data is made (units: bytes); false cancels the write */
    void *progress_user;
} rp_model_synth_params;

RP_API rp_model_synth_params rp_model_synth_default_params(void);
/* Writes the model to `path` through a temp file renamed at the end: on any failure or a cancel nothing is left
 * behind. The same parameters give byte-identical files. RP_ERR_INVALID_ARG naming an unknown architecture,
 * preset (or one of the other architecture) or type. Thread-safe. */
RP_API rp_status rp_model_synth(const rp_model_synth_params *p, const char *path);

/* A GGUF file's contents as stored, without loading a model (`reprise inspect`): the header, metadata and tensor
 * table, validated at open (errors name the field and byte offset). Read-only after open: any number of threads. */
typedef struct rp_model_file rp_model_file;

RP_API rp_status rp_model_file_open(const char *path, rp_model_file **out);
RP_API void rp_model_file_close(rp_model_file *f);

typedef struct rp_model_file_desc {
    uint32_t version;          /* GGUF version */
    uint32_t alignment;        /* of tensor data */
    uint64_t file_size;
    uint64_t data_offset;      /* where tensor data starts */
    int64_t n_meta;            /* metadata keys */
    int64_t n_tensors;
    uint64_t tensor_bytes;     /* every tensor's data */
} rp_model_file_desc;

RP_API rp_model_file_desc rp_model_file_describe(const rp_model_file *f);

/* Metadata value types (GGUF's ids). */
typedef enum rp_meta_type {
    RP_META_U8 = 0, RP_META_I8, RP_META_U16, RP_META_I16, RP_META_U32, RP_META_I32, RP_META_F32, RP_META_BOOL,
    RP_META_STR, RP_META_ARRAY, RP_META_U64, RP_META_I64, RP_META_F64,
} rp_meta_type;

typedef struct rp_meta_entry {
    const char *key;           /* NUL-terminated; lives as long as the file handle */
    rp_meta_type type;
    const char *type_name;     /* GGUF's name of it ("u32", "str", "arr", ...) */
    /* the value, by type: unsigned integers in u (and i when it fits), signed ones in i, bool in b (and u, i),
     * f32 / f64 in f, a string in str / str_len (its bytes in the file, not NUL-terminated), an array's element
     * type and count in elem_type / n_elems (the elements: rp_model_file_meta_text) */
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    const char *str;
    uint64_t str_len;
    rp_meta_type elem_type;
    uint64_t n_elems;
} rp_meta_entry;

/* Key i (0 <= i < n_meta) in file order; RP_ERR_RANGE otherwise. */
RP_API rp_status rp_model_file_meta(const rp_model_file *f, int64_t i, rp_meta_entry *out);
/* The index of a key, or -1. */
RP_API int64_t rp_model_file_find_meta(const rp_model_file *f, const char *key);
/* Key i's value for display: numbers in decimal, strings quoted with escapes and long ones shortened, arrays as
 * "[type x n] [first elements, ...]"; NUL-terminated, cut to fit cap at a UTF-8 boundary. RP_ERR_RANGE for a bad
 * index. */
RP_API rp_status rp_model_file_meta_text(const rp_model_file *f, int64_t i, char *buf, size_t cap);

typedef struct rp_tensor_desc {
    const char *name;          /* NUL-terminated; lives as long as the file handle */
    int type;                  /* ggml's type id */
    const char *type_name;     /* "f32", "q8_0", "q4_K", ... */
    int32_t n_dims;
    int64_t ne[4];             /* ne[0] is the contiguous (row) dimension; unused ones are 1 */
    uint64_t offset;           /* from the start of the data section */
    uint64_t bytes;
} rp_tensor_desc;

/* Tensor i (0 <= i < n_tensors) in file order; RP_ERR_RANGE otherwise. */
RP_API rp_status rp_model_file_tensor(const rp_model_file *f, int64_t i, rp_tensor_desc *out);

typedef struct rp_type_share {
    int type;                  /* ggml's type id */
    const char *type_name;
    int64_t n_tensors;
    uint64_t bytes;
} rp_type_share;

/* The file's weight types: one entry per type its tensors use, most bytes first (ties: lower type id first).
 * Writes min(count, cap) entries and returns the count. */
RP_API int32_t rp_model_file_type_mix(const rp_model_file *f, rp_type_share *out, int32_t cap);

/* This machine as the kernels see it (`reprise inspect --system`). Thread-safe. */
typedef struct rp_cpu_desc {
    const char *brand;
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16, avx512fp16, avxvnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx, os_avx512, os_amx;   /* the OS saves these register states */
    bool amx_permitted;               /* Linux granted the AMX tile state */
    bool amx_opt_in;                  /* AMX is usable but its kernels stay off until RP_ENABLE_AMX=1 */
    const char *best;                 /* the best kernel level this CPU and OS allow */
    const char *active;               /* the level loads pack weights for (rp_cpu_active) */
    char thp[32];                     /* transparent huge pages' mode ("always", "madvise", "never", "unknown") */
    bool huge_pages;                  /* packed weights may ask for 2 MiB pages (false under RP_NO_HUGEPAGES) */
} rp_cpu_desc;

RP_API void rp_cpu_describe(rp_cpu_desc *out);

typedef struct rp_kernel_desc {
    const char *op;            /* "matmul" (over weights of `type`) or "attention" (over a KV cache of `type`) */
    const char *type;          /* the type's name */
    const char *kernel;        /* the kernel the active level uses, or NULL when it has none */
} rp_kernel_desc;

/* The kernels the active level dispatches to, one entry per operation and type: matmul over every weight type
 * with kernels (type id order), then attention over f16, q8_0, f32 KV caches. Writes min(count, cap) entries
 * and returns the count. Thread-safe. */
RP_API int32_t rp_kernel_table(rp_kernel_desc *out, int32_t cap);

/* GPU devices (Vulkan) as the GPU backend sees them (`reprise inspect --system`). */
typedef struct rp_gpu_mem_type {
    uint64_t heap_bytes;       /* size of the heap the type allocates from */
    bool device_local, host_visible, host_coherent, host_cached;
} rp_gpu_mem_type;

typedef struct rp_gpu_desc {
    int32_t index;             /* the index a --device option takes */
    char name[256];
    const char *kind;          /* "discrete", "integrated", "virtual", "cpu" or "other" */
    uint32_t vendor_id, device_id;
    char api_version[24];      /* "1.3.230" */
    char driver[128];          /* driver name and info */
    uint32_t subgroup_size;
    bool usable;               /* has what the backend needs: Vulkan 1.2, timeline semaphores, a compute queue */
    bool shared_memory;        /* integrated / CPU device with host-visible device-local memory: buffers are used
                                  in place, no copies */
    bool fp16;                 /* shaderFloat16 */
    bool int8_dot;             /* 8-bit integer dot product (VK_KHR_shader_integer_dot_product / Vulkan 1.3) */
    bool cooperative_matrix;   /* VK_KHR_cooperative_matrix (or VK_NV_cooperative_matrix) */
    uint64_t device_local_bytes;   /* the largest device-local heap */
    int32_t n_mem_types;
    rp_gpu_mem_type mem_types[32];
} rp_gpu_desc;

/* The Vulkan devices: writes min(count, cap) entries, *n_out = count (0 when there are none). RP_ERR_UNSUPPORTED
 * "Vulkan backend not built" when the build has no GPU backend; RP_ERR_NOT_FOUND when the Vulkan loader
 * (libvulkan.so.1, or $RP_VULKAN_LIB) cannot be opened or makes no instance. Thread-safe. */
RP_API rp_status rp_gpu_list(rp_gpu_desc *out, int32_t cap, int32_t *n_out);
/* ---- benchmark support ----
 * What the benchmarks (reprise-bench) need beyond serving calls: a model's figures for throughput reports,
 * blend's deviation measure (an ablation), and sampling a sequence's logits token by token (decode loops timed
 * without text). The machine's figures: rp_cpu_describe above. */

/* A model's figures for throughput reports. Thread-safe; static strings. */
typedef struct rp_model_perf {
    const char *main_type;           /* the GGUF weight type holding most bytes ("q4_0", "q8_0", "f32", ...) */
    const char *cpu_level;           /* the kernel level its weights were packed for ("avx512", ...) */
    double decode_bytes_per_token;   /* weight bytes one decode step streams: every layer matrix and the output
                                        matrix, as packed (as mapped where a kernel reads GGUF rows); 0 for a
                                        vocab-only load. Over a memory bandwidth: the decode ceiling. */
} rp_model_perf;

RP_API void rp_model_perf_get(const rp_model *m, rp_model_perf *out);

/* Blend's deviation measure at the check layer (rp_engine_params.deviation): which of the recomputed vs cached
 * K and V rank the tokens to recompute. */
typedef enum rp_deviation {
    RP_DEVIATION_KV = 0,   /* both (default) */
    RP_DEVIATION_K = 1,
    RP_DEVIATION_V = 2,
} rp_deviation;

/* Samples the next token from the sequence's last logits with its sampler — rp_seq_generate's, under the same
 * rules (it starts from p's seed after a prefill or reset, or when p differs from the last call's; otherwise it
 * goes on) — without adding the token: rp_seq_feed it to go on (feeding takes it into the penalty window).
 * RP_ERR_INVALID_ARG when the sequence has no logits yet. As the engine: one thread at a time. */
RP_API rp_status rp_seq_sample(rp_seq *s, const rp_sampler_params *p, rp_token *out);

/* ===========================================================================
 * Long contexts
 * ========================================================================= */

/* Bytes of one sequence's KV cache (K and V, every layer) at n_ctx cells of
 * kv_type, allocated when the sequence fills (pages are touched lazily), as a
 * default engine allocates it: a model's sliding-window layers (Gemma 2 / 3's
 * local ones) hold only their window + 512 (the default n_batch) cells.
 * Thread-safe. */
RP_API rp_status rp_kv_estimate(const rp_model *m, int32_t n_ctx, rp_kv_type kv_type, uint64_t *bytes);
/* The same for forward calls of n_batch rows (sliding-window layers: window + n_batch cells), or with
 * swa_full every layer at n_ctx cells (rp_engine_params.swa_full). Thread-safe. */
RP_API rp_status rp_kv_estimate_ex(const rp_model *m, int32_t n_ctx, rp_kv_type kv_type, int32_t n_batch, bool swa_full,
                                   uint64_t *bytes);
/* What rp_kv_estimate gives for one of the engine's sequences. Thread-safe. */
RP_API uint64_t rp_engine_kv_bytes(const rp_engine *e);
/* Memory the system can give without swapping (Linux: MemAvailable), 0 if
 * unknown. Thread-safe. */
RP_API uint64_t rp_system_mem_available(void);

/* Context shift: drops tokens [keep, keep + n_drop) of the sequence and moves
 * the ones after them down, their K re-rotated to the new positions, instead
 * of recomputing them (a conversation that filled its context drops its
 * oldest turns and goes on). The moved tokens' KV attended to the dropped
 * ones when it was computed: it is approximate from `keep` on, as with
 * llama.cpp's context shift. The last token's logits are computed again by
 * the next generate. RP_ERR_RANGE unless keep >= 0, n_drop >= 1 and
 * keep + n_drop <= rp_seq_n_past. One thread at a time per sequence. */
RP_API rp_status rp_seq_shift(rp_seq *s, int32_t keep, int32_t n_drop);
/* ===========================================================================
 * ---- server support ----
 * What a front end serving many independent requests over one model needs
 * beside the calls above (src/server, the HTTP server, is built on them).
 * Thread safety is stated per call.
 * ========================================================================= */

/* Tokens at the start of the sequence whose KV is exactly what a plain
 * prefill of them computes (the rest was written after approximate reuse:
 * full, or blend at r < 1, in this or an earlier call): prefix reuse of a
 * continued conversation may keep only these. Feeding or generating on an
 * exact sequence keeps it exact. As the engine: one thread at a time. */
RP_API int32_t rp_seq_n_exact(const rp_seq *s);

/* KV bytes one token of a sequence takes (K and V, every layer) with KV type t; 0 for a model without weights.
 * Thread-safe. */
RP_API uint64_t rp_kv_bytes_per_token(const rp_model *m, rp_kv_type t);

/* ---- chat formats and tool calls ----
 * The chat-template families (what rp_model_desc.chat_format names), rendering by family without a model (a
 * front end that prepares prompts before, or apart from, a model), and parsing tool calls out of a reply.
 * Thread-safe. */
typedef enum rp_chat_format {
    RP_CHAT_UNKNOWN = 0,  /* no template: a plain transcript is the front end's choice */
    RP_CHAT_LLAMA3 = 1,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    RP_CHAT_CHATML = 2,   /* Qwen 2/3: <|im_start|>role\n...<|im_end|>, <tool_call> JSON </tool_call> */
    RP_CHAT_LLAMA2 = 3,   /* [INST] ... [/INST] (stories / Llama 2 SPM models without a template) */
    RP_CHAT_MISTRAL = 4,  /* a template with [TOOL_CALLS]: [TOOL_CALLS][{"name", "arguments"}] or name[ARGS]{...};
                           * rendered only by its own Jinja template (no built-in) */
} rp_chat_format;

/* "llama3", "chatml", "llama2", "mistral", "unknown". */
RP_API const char *rp_chat_format_name(rp_chat_format f);
/* The model's chat format (RP_CHAT_UNKNOWN for NULL or a model without a template). */
RP_API rp_chat_format rp_model_chat_format(const rp_model *m);
/* rp_chat_render with the template of format f (RP_CHAT_UNKNOWN is RP_ERR_UNSUPPORTED). */
RP_API rp_status rp_chat_render_format(rp_chat_format f, const rp_chat_message *msgs, int32_t n,
                                       const char *tools_json, bool add_generation_prompt, char *buf, size_t cap,
                                       size_t *len);

/* One tool call of an assistant reply. */
typedef struct rp_tool_call {
    char *id;          /* "call_..." (may be NULL) */
    char *name;
    char *arguments;   /* JSON object text */
} rp_tool_call;

/* Parses the tool calls out of generated assistant text in format f: *calls gets a malloc'd array of *n_calls
 * (free with rp_tool_calls_free), *content (malloc'd, free()) the text without them. Text without calls gives
 * no calls and the text as content; a call whose JSON is malformed stays in the content. */
RP_API rp_status rp_chat_parse_tool_calls(rp_chat_format f, const char *text, rp_tool_call **calls, size_t *n_calls,
                                          char **content);
RP_API void rp_tool_calls_free(rp_tool_call *calls, size_t n);
/* Checks a parsed call against the request's tool definitions (tools_json: an OpenAI tools array; NULL checks only
 * that the arguments are a JSON object): the tool exists, and its arguments fit the parameters schema's required
 * keys, "type", "enum", nested "properties" and "items" (no other keywords). RP_OK, or RP_ERR_INVALID_ARG with
 * why (cap bytes, may be NULL) saying what is wrong ("arguments.city is not of type string"). Thread-safe. */
RP_API rp_status rp_tool_call_check(const char *tools_json, const rp_tool_call *call, char *why, size_t cap);

/* ---- reasoning (the <think>...</think> family: Qwen3, DeepSeek-R1 distills) ----
 * llama-server's --reasoning-format deepseek: the thinking goes to reasoning_content, the rest is the content.
 * started: the prompt already opened the block (the template's generation prompt ends with "<think>", see
 * rp_chat_prompt_opens_thinking); otherwise a reply that opens with <think> (after white space) has one. */
typedef struct rp_reasoning_span {
    size_t reasoning_begin, reasoning_end;   /* the thinking text (tags and the white space after <think> out) */
    size_t content_begin, content_end;       /* the answer: [content_begin, content_end) */
    bool has_reasoning;                      /* a think block opened */
    bool in_reasoning;                       /* the block is not closed yet */
} rp_reasoning_span;
/* Spans of text[0..len) as generated so far. final false (streaming): bytes that may still be the start of a
 * tag are in neither span (held back until more text decides), so each span only grows as text does (its
 * begin is fixed once it is non-empty: white space after a tag may still move an empty one); final
 * true: the whole reply (an unclosed block is all reasoning). No allocation. Thread-safe. */
RP_API void rp_chat_reasoning_span(const char *text, size_t len, bool started, bool final, rp_reasoning_span *s);
/* The whole reply split: *reasoning (malloc'd, NULL when there is no think block; trailing white space trimmed)
 * and *content (malloc'd). */
RP_API rp_status rp_chat_split_reasoning(const char *text, bool started, char **reasoning, char **content);
/* Whether a rendered prompt ends inside an opened think block (its last non-space text is "<think>"). */
RP_API bool rp_chat_prompt_opens_thinking(const char *prompt, size_t len);

/* rp_chat_render with template variables: enable_thinking (-1: not given, as rp_chat_render: left undefined, so the
 * template's own default applies — Qwen3's thinks, as with HF, vLLM and llama-server; 0 off, 1 on; Qwen3's template
 * adds an empty think block when off), reasoning_effort ("low"|"medium"|"high" or NULL) and vars_json,
 * a JSON object of more variables (chat_template_kwargs), set after the others, or NULL. */
typedef struct rp_chat_vars {
    int enable_thinking;
    const char *reasoning_effort;
    const char *vars_json;
} rp_chat_vars;
RP_API rp_status rp_chat_render_vars(const rp_model *m, const rp_chat_message *msgs, int32_t n,
                                     const char *tools_json, bool add_generation_prompt, const rp_chat_vars *vars,
                                     char *buf, size_t cap, size_t *len);

/* ---- streaming detokenizer ----
 * Text of tokens fed one at a time, as complete UTF-8 only: bytes of a character split across tokens are held
 * until its last byte comes (rp_detokenize does the same for a whole array). One thread at a time per handle. */
typedef struct rp_detokenizer rp_detokenizer;

/* render_special: control tokens as their text; at_start: the text starts here (an SPM vocabulary's leading
 * space of the first piece is dropped; false for a continuation, which keeps it). */
RP_API rp_status rp_detokenizer_create(const rp_model *m, bool render_special, bool at_start, rp_detokenizer **out);
RP_API void rp_detokenizer_free(rp_detokenizer *d);
/* Writes the bytes token t completes into buf and returns their count; a cap of rp_detokenizer_bound always
 * suffices, a smaller one that cannot hold them returns -(bytes needed) and changes nothing (retry). */
RP_API int32_t rp_detokenizer_push(rp_detokenizer *d, rp_token t, char *buf, int32_t cap);
/* At the end: the held bytes (an incomplete character as U+FFFD); the same return convention. */
RP_API int32_t rp_detokenizer_flush(rp_detokenizer *d, char *buf, int32_t cap);
RP_API int32_t rp_detokenizer_bound(const rp_detokenizer *d);

/* ---- the OpenAI-compatible HTTP server ----
 * `reprise serve` as a library call (docs/server.md describes the HTTP API): the server loads the model, runs
 * generation on the engine (one sequence at a time, --parallel 1) or on the agents scheduler (parallel > 1),
 * and answers on its own threads until drained and freed. Every call is thread-safe; rp_server_free waits for
 * the server's threads. */
typedef struct rp_server rp_server;

/* Whose cached KV a request may reuse. PER_KEY: only KV computed for requests of the same API key (no client
 * can confirm another's prompt from cached_tokens or timing); SHARED: one cache for everyone; AUTO: PER_KEY with
 * more than one key, else SHARED. */
typedef enum rp_server_cache_ns { RP_SERVER_NS_AUTO = 0, RP_SERVER_NS_SHARED = 1, RP_SERVER_NS_PER_KEY = 2 } rp_server_cache_ns;

typedef struct rp_server_params {
    /* the model and its generation */
    const char *model_path;
    const char *draft_path;      /* draft model for speculative decoding (parallel > 1), or NULL */
    rp_progress_fn load_progress;   /* NULL, or the model loads' progress */
    void *load_progress_user;
    int32_t n_ctx;               /* tokens per sequence (0: min(4096, the model's)) */
    int n_threads;               /* default 2 */
    int parallel;                /* sequences decoded together (default 1; 1..64; 0: auto, rp_server_parallel says
                                    what it chose: min(4, cores / 2, what half the available memory holds at
                                    the full context), at least 1) */
    int queue_max;               /* requests waiting beyond the running ones; more get 429 (default 64) */
    int max_sessions;            /* reprise_session sessions kept (default 16) */
    const char *cache_dir;       /* persistent KV chunk store, or NULL (RAM only) */
    size_t cache_ram_mb;         /* RAM budget of the chunk cache (default 512) */
    double cache_disk_gb;        /* disk budget of the store (0: unlimited) */
    const char *embed_model;     /* the store's embedding model (rp_engine_params.embed_model; needs cache_dir), or NULL */
    int32_t embed_dim;           /* its embeddings' components kept (default 256; 0: all) */
    rp_reuse_mode reuse;         /* default reuse of requests (default RP_REUSE_BLEND) */
    float recompute_ratio;       /* default blend ratio (0.25) */
    rp_kv_type kv_type;          /* default RP_KV_F16 */
    bool swa_full;               /* sliding-window layers keep every cell (rp_engine_params.swa_full; default false) */
    bool speculate;              /* parallel > 1: speculative decoding (default true) */
    double kv_limit_mb;          /* parallel > 1: KV in use above which sessions waiting on a tool result are
                                    demoted until resumed (0: never) */
    /* HTTP */
    const char *host;            /* bind address (default "127.0.0.1") */
    uint16_t port;               /* default 8080; 0: an ephemeral port (rp_server_port) */
    const char *api_key;         /* one key (named "default"), or NULL; an empty key is an error */
    const char *api_key_file;    /* keys, one per line (NAME:KEY or KEY), mode 600; or NULL */
    rp_server_cache_ns cache_namespace;
    int key_max_sessions;        /* sessions one key may hold (0: max(1, sessions / keys) with several keys) */
    double key_kv_mb;            /* KV one key's sessions may hold (0: no limit) */
    const char *model_id;        /* the name /v1/models reports (NULL: the file's base name) */
    size_t max_body;             /* request body bytes (default 1 MiB) */
    int max_depth;               /* JSON nesting (64) */
    int max_messages;            /* 1024 */
    int32_t default_max_tokens;  /* chat replies without max_tokens (2048, capped by the context) */
    double timeout_s;            /* per request, queueing included (600) */
    double session_ttl_s;        /* idle session lifetime (1800) */
    int max_connections;         /* open connections in all (256) */
    int max_connections_per_ip;  /* from one address (64; 0: no cap) */
    double header_timeout_s, body_timeout_s, idle_timeout_s;   /* 10, 30, 15 */
    bool quiet;                  /* no access log on stderr */
    const char *chat_template;   /* a built-in's name or a Jinja file instead of the model's own template, or NULL */
    const char *grammar;         /* GBNF every request without a grammar of its own follows (`--grammar-file`), or
                                    NULL; kept by pointer: it must outlive the server */
    /* called once, on the creating thread, as soon as the port is bound and connections are accepted, before
     * the model loads (until it has, /health answers 503 {"status":"loading"} and everything else 503
     * model_loading): user, the port. NULL: none */
    void (*on_listening)(void *user, uint16_t port);
    void *on_listening_user;
    const char *cors_origins;    /* browser origins allowed (CORS): comma-separated, "*" any; NULL or "": none */
    bool embeddings;             /* POST /v1/embeddings and /embedding (default false: they answer 501) */
    rp_pooling pooling;          /* their pooling (default RP_POOLING_MODEL) */
    int32_t n_gpu_layers;        /* the model's GPU offload (rp_model_params.n_gpu_layers; default -1: every layer
                                    when a GPU is present); the draft model stays on the CPU. With GPU layers a
                                    default reuse of blend becomes prefix (said on stderr) */
    const char *gpu_device;      /* rp_model_params.gpu_device (NULL: $RP_GPU_DEVICE, else the best GPU) */
} rp_server_params;

RP_API rp_server_params rp_server_default_params(void);
/* Binds the port and starts the HTTP daemon (on_listening), then loads the model(s) and starts the backend;
 * returns once they are loaded. Errors name what was wrong (a file, a key file's mode, the port). */
RP_API rp_status rp_server_create(const rp_server_params *p, rp_server **out);
RP_API uint16_t rp_server_port(const rp_server *s);          /* the port bound */
RP_API int rp_server_n_keys(const rp_server *s);              /* API keys configured (0: no authentication) */
RP_API bool rp_server_cache_per_key(const rp_server *s);      /* the namespace in effect is per key */
RP_API const char *rp_server_backend_kind(const rp_server *s);   /* "core" (parallel 1) or "sched" */
RP_API int32_t rp_server_n_ctx(const rp_server *s);           /* tokens per sequence */
RP_API int rp_server_parallel(const rp_server *s);            /* sequences decoded together (parallel 0 resolved) */
/* Graceful shutdown: stops accepting connections, answers new requests with 503, lets requests in flight finish
 * for up to deadline_s, cancels the rest (finish_reason "length") and flushes the store. Idempotent. */
RP_API void rp_server_drain(rp_server *s, double deadline_s);
/* Stops the daemon (closing connections) and frees everything. */
RP_API void rp_server_free(rp_server *s);

/* ---- scheduler control ----
 * What a loop serving agents from other threads needs (the server's --parallel N). Thread-safe, except
 * rp_agents_last_step (the stepping thread). */

/* Drops an idle or waiting agent's history back to n tokens (its KV with it): the next submit continues from
 * there. RP_ERR_INVALID_ARG while it runs. */
RP_API rp_status rp_agents_truncate(rp_agents *a, rp_agent_id id, int32_t n);
/* Makes dst (an idle agent) hold src's first n tokens and their KV, copied (what dst held is dropped), so that
 * several continuations of one prompt run without computing it again (a server's n > 1 choices): src may be in
 * any state, between steps (its KV must hold the n cells: RP_ERR_RANGE otherwise); dst's next submit continues
 * from there. RP_ERR_INVALID_ARG for dst == src, a dst that is not idle, or either in the step in flight. */
RP_API rp_status rp_agents_fork(rp_agents *a, rp_agent_id dst, rp_agent_id src, int32_t n);
/* The agent's turn ends waiting for a tool result at the next step boundary (RP_AGENT_WAITING; its KV stays);
 * rp_agents_resume continues it. */
RP_API rp_status rp_agents_suspend(rp_agents *a, rp_agent_id id);
/* Blocks until a submit / resume / suspend / remove happened since the last step began, or timeout_s passed
 * (a loop with nothing to do; keep it short: a cancel only nudges it). True when woken by one. */
RP_API bool rp_agents_wait(rp_agents *a, double timeout_s);
/* Wakes rp_agents_wait (work arrived from outside the scheduler). */
RP_API void rp_agents_wake(rp_agents *a);

/* What the last rp_agents_step did. */
typedef struct rp_agents_step_info {
    bool ran;                  /* a target forward ran */
    bool blocked;              /* a policy without yield: an admitted agent waits on a tool, nothing ran */
    bool idle;                 /* nothing to do */
    int32_t rows, prefill_rows, decoding, drafted, accepted, generated, active, waiting;
    double draft_s, target_s, total_s;
    int64_t step;              /* its index (rp_agent_info.last_step of the agents that took part) */
} rp_agents_step_info;

RP_API void rp_agents_last_step(const rp_agents *a, rp_agents_step_info *out);

/* The most agents a scheduler holds (rp_agents_params.max_agents). */
#define RP_AGENTS_MAX 256

/* ---- reuse in the scheduler ----
 * An engine's chunk cache (prefix and non-prefix reuse, blend, the store) feeding agents' prompts: the
 * hand-off from a prefill engine to continuous batching. The engine (same model and KV type, a context of at
 * least the agents') is used on the calling thread: call these from the stepping thread, between steps (they
 * compute on the same cores), and use the engine for nothing else meanwhile (rp_engine_stats_get and
 * rp_engine_flush excepted). */

/* What a reuse submit did. */
typedef struct rp_agents_fill {
    int32_t filled;               /* prompt tokens whose KV the engine put in place (the batch computes the rest) */
    int32_t reused_prefix;        /* of those, from the cache's prefix tree */
    int32_t reused_prefix_exact;  /* ... exactly what a plain prefill computes */
    int32_t reused_nonprefix;     /* chunks cached elsewhere, re-rotated */
    int32_t recomputed;           /* of those, recomputed past blend's check layer */
    int32_t exact_head;           /* after the turn, the agent's first exact_head tokens hold exact KV (INT32_MAX:
                                     all of them) */
    bool commit_after;            /* the batch computes part of the prompt: cache it after the turn
                                     (rp_agents_commit_prompt with commit_exact) */
    bool commit_exact;            /* ... as exact KV (nothing before it was reused approximately) */
    rp_status fill_status;        /* the engine's prefill: RP_OK, or why it failed (then nothing was filled) */
    rp_status cache_status;       /* caching the filled chunks: RP_OK, or why they were not cached */
} rp_agents_fill;

/* Starts a fresh (empty) agent's turn on prompt p: the engine fills its KV up to the end of the prompt's last
 * reusable chunk (reuse per the options: mode, ratio, rule, namespace; with persist, those chunks are cached at
 * once) and the batch computes the rest beside the other agents, as rp_agents_submit. A prompt with nothing to
 * reuse is not filled; a fill that fails is discarded (the batch computes everything; out->fill_status says
 * why). */
RP_API rp_status rp_agents_submit_reuse(rp_agents *a, rp_agent_id id, rp_engine *e, const rp_prompt *p,
                                        const rp_gen_opts *reuse, const rp_turn_opts *o, rp_agents_fill *out);
/* Caches the chunks of an idle or waiting agent's prompt p (its history starts with p) from its KV, in the
 * options' namespace; exact: its KV is exactly a plain prefill's. A history that does not start with p (a turn
 * cancelled before its prompt was computed) caches nothing and is RP_OK. */
RP_API rp_status rp_agents_commit_prompt(rp_agents *a, rp_agent_id id, rp_engine *e, const rp_prompt *p,
                                         const rp_gen_opts *reuse, bool exact);

#ifdef __cplusplus
}
#endif
#endif /* REPRISE_H */
