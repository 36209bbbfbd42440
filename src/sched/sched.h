/* sched.h — multi-session scheduler: continuous batching, batched speculative decoding with HAL budgets, suspend-and-yield. */
#ifndef RP_SCHED_H
#define RP_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "kernels/types.h"
#include "kv/kv.h"
#include "model/model.h"
#include "model/sampler.h"
#include "sched/hal.h"

/* ---------------------------------------------------------------------------
 * Model of operation
 *
 * A scheduler serves up to max_sessions conversations ("sessions") over one
 * target model (plus an optional draft model). Each session owns its KV cache,
 * its token history and its sampler; the model weights and the compute
 * context are shared. rp_sched_step() runs one scheduler step: it builds ONE
 * target batch holding every admitted session's work — the last token plus
 * the draft tokens of each decoding session (all rows with logits) and chunks
 * of pending prompt for prefilling sessions, within a per-step row budget
 * (n_batch) — and runs one rp_forward over it. Decode rows are planned first,
 * but while any prompt is pending, ceil(prefill_share * n_batch) rows (or
 * what is pending, if less) are kept for it: drafts are shaved to fit. Drafts for all decoding
 * sessions are produced before that, batched across sessions per draft step.
 *
 * Session states:
 *   IDLE     no work; KV kept (a new submit continues the conversation).
 *   PREFILL  has pending tokens (prompt / tool result) to run through the model.
 *   DECODE   generating; exactly one pending token (the last one sampled).
 *   WAITING  waiting for a tool result: its turn ended with a tool call in the
 *            chat template's format (at the token completing it), the caller asked for it (gen params
 *            wait_after), or rp_sched_mark_waiting(). Its KV stays in place;
 *            rp_sched_resume() appends the tool result and only those tokens
 *            (plus the one pending sampled token) are prefilled.
 *
 * Slots: at most max_active sessions are admitted ("hold a slot") at once;
 * sessions with work queue for a slot, oldest request first. A session keeps
 * its slot until it goes IDLE. What a WAITING session does with its slot is
 * the difference between the policies:
 *   - yield (RP_POLICY_HAL_YIELD): it leaves the batch at the next step
 *     boundary and releases its slot and its draft budget to the others;
 *   - no yield (every other policy): it keeps its slot and the batch is
 *     synchronous — no step runs while an admitted session waits on a tool
 *     (the tool call blocks the batch, as in a synchronous agent loop). This
 *     is the baseline behaviour the paper measures against.
 *
 * Policies (draft length L_i per decoding session and step):
 *   BATCH_AR   no speculation (L_i = 0), continuous batching.
 *   SEQ_SD     one session at a time (max_active forced to 1), L = hal.fixed_len.
 *   BATCH_SD   every decoding session L_i = hal.fixed_len (16).
 *   HAL        global budget M = hal.budget split by Historical Accepted Length.
 *   HAL_YIELD  HAL plus suspend-and-yield.
 *   UNIFORM    the same global budget M split evenly (rp_hal_allocate_uniform):
 *              HAL's total without its history, so HAL vs UNIFORM isolates the
 *              split from the budget size (Batch-SD drafts fixed_len each).
 *
 * Sampling: at temperature <= 0 drafts are greedy and verified greedily (the
 * output is token-identical to one-at-a-time greedy decoding). At temperature
 * > 0 drafts are verified with the rejection rule (accept x with probability
 * min(1, p(x)/q(x)), else sample norm(max(0, p - q))), so the output follows
 * the target's sampling distribution exactly; a session that drafts nothing
 * samples exactly as rp_session_sample would.
 *
 * Threading contract:
 *   - rp_sched_step() is called by ONE thread (the loop); a concurrent second
 *     call returns RP_ERR_INVALID_ARG.
 *   - Every other function may be called from any thread at any time. They
 *     take the scheduler mutex, which the step holds only while planning and
 *     committing, not during the draft and target forwards, so an API call
 *     waits at most for the short commit of one step.
 *   - rp_sched_cancel() takes no lock at all (an atomic flag).
 *   - Per-token callbacks run on the stepping thread inside the commit, with
 *     the mutex held: they must be quick (copy the token into a queue) and
 *     must not call rp_sched_* functions except rp_sched_cancel. Returning
 *     false from the callback cancels the generation.
 *   - A session taking part in the step in flight ("busy") cannot be
 *     submitted to, truncated or demoted (RP_ERR_INVALID_ARG); freeing it or
 *     marking it waiting is deferred to the end of that step.
 *
 * Allocation: everything a step touches is allocated by rp_sched_create and
 * rp_sched_session_create (KV, token history, draft buffers, batch). A step
 * allocates nothing, except when it demotes KV under memory pressure
 * (kv_resident_limit), which compresses into fresh buffers.
 * ------------------------------------------------------------------------- */

typedef enum rp_sched_policy {
    RP_POLICY_BATCH_AR = 0,
    RP_POLICY_SEQ_SD = 1,
    RP_POLICY_BATCH_SD = 2,
    RP_POLICY_HAL = 3,
    RP_POLICY_HAL_YIELD = 4,
    RP_POLICY_UNIFORM = 5,
    RP_POLICY_COUNT
} rp_sched_policy;

const char *rp_sched_policy_name(rp_sched_policy p);   /* "batch-ar", "seq-sd", ... */
int rp_sched_policy_parse(const char *s);               /* -1 if unknown */

typedef enum rp_drafter_kind {
    RP_DRAFTER_NONE = 0,    /* only valid with BATCH_AR */
    RP_DRAFTER_NGRAM = 1,   /* prompt lookup in the session's own history (no model) */
    RP_DRAFTER_SELF = 2,    /* first self_layers layers of the target + its output head */
    RP_DRAFTER_MODEL = 3,   /* a separate draft model with the same vocabulary */
} rp_drafter_kind;

const char *rp_drafter_kind_name(rp_drafter_kind k);

/* Upper bounds that size fixed per-session arrays. */
#define RP_SCHED_MAX_SESSIONS 256
#define RP_SCHED_MAX_DRAFT 64        /* per session and step */
#define RP_SCHED_MAX_STOP_IDS 16
#define RP_SCHED_MAX_STOP_STRS 4
#define RP_SCHED_MAX_STOP_LEN 64     /* bytes per stop string */

typedef struct rp_sched_params {
    int32_t max_sessions;      /* sessions that may exist at once (default 8, <= RP_SCHED_MAX_SESSIONS) */
    int32_t max_active;        /* sessions admitted to the batch at once (<= 0: max_sessions) */
    int32_t n_ctx;             /* KV cells per session (default 2048) */
    int32_t n_batch;           /* row budget of one target forward (default 512) */
    rp_type kv_type;           /* default RP_TYPE_F16 */
    int32_t swa_cells;         /* cells of sliding-window layers per session (rp_kv_create_swa; 0, default: all) */
    int n_threads;             /* compute threads (default 2) */
    rp_sched_policy policy;    /* default RP_POLICY_HAL_YIELD */
    rp_drafter_kind drafter;   /* default RP_DRAFTER_NGRAM */
    int32_t self_layers;       /* RP_DRAFTER_SELF: layers run for a draft (default 2) */
    int32_t ngram_min, ngram_max;   /* RP_DRAFTER_NGRAM suffix lengths tried, longest first (1, 3) */
    rp_hal_params hal;         /* budget M, L_min, tau, gamma, A(0), fixed L, cap */
    size_t kv_resident_limit;  /* bytes of KV in use above which WAITING sessions are demoted (0: never) */
    const char *demote_dir;    /* demote to files here (NULL: compressed in memory); copied */
    int32_t text_cap;          /* bytes of a turn's text kept for stop strings / tool calls (default 16384) */
    float prefill_share;       /* part of n_batch kept for prompt rows while a prompt is pending, so drafts
                                  filling the batch cannot starve prefill (default 0.25; 0: decode first) */
} rp_sched_params;

rp_sched_params rp_sched_default_params(void);

/* kv_resident_limit from a size in MiB: 0 stays 0 (never), anything above
 * demotes from at least 1 byte on (a tiny limit must not round to "never"). */
size_t rp_sched_kv_limit_bytes(double mib);

/* True if the last `added` bytes of a turn's text text[0..len) complete a tool
 * call in chat format f: ChatML's </tool_call> (after a <tool_call> that
 * rp_chat_has_tool_call counts) or Llama-3's bare {"name": ...} JSON object.
 * The scheduler ends a turn (RP_FINISH_TOOL_CALL, WAITING) at that token when
 * suspend_on_tool_call is set; exposed so a one-at-a-time reference decoder
 * can stop at the same token. */
bool rp_sched_tool_call_closed(rp_chat_format f, const char *text, int32_t len, int32_t added);

typedef struct rp_sched rp_sched;
typedef int64_t rp_sched_id;   /* > 0; encodes slot and generation, never reused while valid */

/* The target must have weights. `draft` is required for RP_DRAFTER_MODEL
 * (same n_vocab), ignored otherwise. Both models must outlive the scheduler. */
rp_status rp_sched_create(const rp_model *target, const rp_model *draft, rp_sched_params p, rp_sched **out);
void rp_sched_free(rp_sched *s);
rp_sched_params rp_sched_get_params(const rp_sched *s);

/* ---- sessions ---- */

rp_status rp_sched_session_create(rp_sched *s, rp_sched_id *out);   /* RP_ERR_FULL when max_sessions exist */
/* Frees a session; deferred to the end of the step when it is busy. */
rp_status rp_sched_session_free(rp_sched *s, rp_sched_id id);

/* Called for each generated token, in order. Return false to stop (finish
 * reason CANCELLED). See the threading contract above. */
typedef bool (*rp_sched_token_cb)(void *user, rp_sched_id id, rp_token tok);

typedef struct rp_gen_params {
    rp_sampler_params sampler;   /* temp <= 0: greedy; bias array is copied */
    int32_t max_tokens;          /* tokens to generate this turn; < 0: until the context is full; 0: prefill only */
    bool stop_at_eog;            /* end at an end-of-generation token (default true) */
    bool ignore_eos;             /* end-of-generation tokens are never sampled this turn (llama-server's ignore_eos:
                                    their logits -inf, drafts verified against that too), so it runs to max_tokens
                                    or the context; with on_logits, after it, unless it allows nothing else (a
                                    grammar's end still ends the turn). Default false */
    const rp_token *stop_ids;    /* extra ids that end the turn (copied, <= RP_SCHED_MAX_STOP_IDS) */
    int32_t n_stop_ids;
    const char *const *stop_strs;   /* strings that end the turn when generated (copied, <= MAX_STOP_STRS) */
    int32_t n_stop_strs;
    bool suspend_on_tool_call;   /* a turn with a tool call in the chat format goes WAITING; it ends at the
                                    token that completes the call (default true) */
    bool wait_after;             /* the turn always ends WAITING (trace-driven tool calls; default false) */
    rp_sched_token_cb on_token;  /* may be NULL */
    void *user;
    /* a logits processor (a grammar) before each token is sampled, with the session's tokens so far; a session
     * with one gets no drafts (its tokens are sampled one at a time, never speculated). NULL: none */
    rp_logits_fn on_logits;
    void *logits_user;
    rp_chosen_fn on_chosen;      /* each chosen token with its raw logits (drafts accepted included), or NULL */
    void *chosen_user;
} rp_gen_params;

rp_gen_params rp_gen_default_params(void);   /* greedy, max_tokens 128 */

/* Appends toks[0..n) to an IDLE or WAITING session and starts a turn with
 * `gp` (NULL: the previous turn's params). Tokens already in the KV are
 * never recomputed: only the pending ones are prefilled. RP_ERR_FULL if the
 * history would exceed n_ctx. A demoted session is restored first. */
rp_status rp_sched_submit(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp);
/* Fills the KV of a turn from outside the batch, then submits it: the hand-off
 * from a prefill engine (the server's reuse engine) to continuous batching.
 * `fill` gets the session's KV (empty) and the whole prompt, and may put into
 * the KV the cells of any prefix toks[0..k), 0 <= k <= n, exactly as a forward
 * over those tokens would, or approximately (reuse), and returns RP_OK (a fill
 * of all n cells is cut back to n - 1: the batch needs the last token); it is
 * called with no scheduler lock held and the session marked busy (steps skip
 * it, a free is deferred). The remaining tokens toks[k..n) — at least the last
 * one, whose logits give the first generated token — are prefilled by the
 * batch as with rp_sched_submit. A fill that fails, or leaves the KV in any
 * other state, is discarded (KV cleared) and the whole prompt is prefilled.
 * The session must be fresh (IDLE, empty). Safe beside a step in flight (the
 * session stays held across it), but best called from the thread that runs
 * rp_sched_step, between steps: the fill computes on the same cores.
 * *n_filled (may be NULL) gets k (at most n - 1). */
typedef rp_status (*rp_sched_fill_fn)(void *user, rp_kv *kv, const rp_token *toks, int32_t n);
rp_status rp_sched_submit_filled(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp,
                                 rp_sched_fill_fn fill, void *user, int32_t *n_filled);
/* Calls fn with an IDLE or WAITING session's KV and history (toks[0..n),
 * the last one possibly pending, not in the KV), e.g. to cache its prompt's
 * chunks after its turn. fn must not change either; it runs with no scheduler
 * lock held and the session marked busy (a free is deferred). RP_ERR_INVALID_ARG
 * when the session is running, busy or demoted. */
typedef rp_status (*rp_sched_kv_fn)(void *user, const rp_kv *kv, const rp_token *toks, int32_t n);
rp_status rp_sched_session_read_kv(rp_sched *s, rp_sched_id id, rp_sched_kv_fn fn, void *user);
/* The session leaves the batch at the next step boundary and waits for a
 * tool result (KV in place). Valid in PREFILL/DECODE (deferred if busy). */
rp_status rp_sched_mark_waiting(rp_sched *s, rp_sched_id id);
/* Appends a tool result to a WAITING session and continues: the same as
 * rp_sched_submit, counted as a resume (see rp_sched_session_info). */
rp_status rp_sched_resume(rp_sched *s, rp_sched_id id, const rp_token *toks, int32_t n, const rp_gen_params *gp);
/* Requests cancellation of the current turn (lock-free; takes effect at the
 * next step boundary; finish reason CANCELLED, state IDLE). */
void rp_sched_cancel(rp_sched *s, rp_sched_id id);
/* Drops the history back to n tokens (KV rolled back); IDLE or WAITING only. */
rp_status rp_sched_truncate(rp_sched *s, rp_sched_id id, int32_t n);

/* Makes dst (an idle session, not in the step in flight) hold src's first n tokens and their KV (and draft KV),
 * copied: what dst held is dropped. src, in any state but not in the step in flight, must have computed them (its
 * KV holds at least n cells); a demoted src is restored first. Its next submit continues from there (n > 1
 * choices of one prompt: the prompt computed once). */
rp_status rp_sched_fork(rp_sched *s, rp_sched_id dst, rp_sched_id src, int32_t n);

/* Moves a non-busy IDLE or WAITING session's KV (and draft KV) out of memory:
 * to `path` (a file; NULL: the params' demote_dir or, without one, a
 * zstd-compressed copy in memory). The KV buffers are freed. */
rp_status rp_sched_demote(rp_sched *s, rp_sched_id id, const char *path);
/* Brings a demoted session's KV back, byte for byte. */
rp_status rp_sched_restore(rp_sched *s, rp_sched_id id);

typedef enum rp_sched_state {
    RP_SESS_IDLE = 0,
    RP_SESS_PREFILL = 1,
    RP_SESS_DECODE = 2,
    RP_SESS_WAITING = 3,
} rp_sched_state;

const char *rp_sched_state_name(rp_sched_state st);

/* What the session did in its most recent step. */
typedef enum rp_sched_role {
    RP_ROLE_NONE = 0,
    RP_ROLE_PREFILL = 1,   /* ran a prompt chunk */
    RP_ROLE_DECODE = 2,    /* one token, no draft */
    RP_ROLE_VERIFY = 3,    /* its last token + a draft verified */
} rp_sched_role;

typedef enum rp_finish_reason {
    RP_FINISH_NONE = 0,    /* turn not finished */
    RP_FINISH_EOG = 1,
    RP_FINISH_STOP = 2,    /* stop id or stop string */
    RP_FINISH_LENGTH = 3,  /* max_tokens */
    RP_FINISH_CTX = 4,     /* context full */
    RP_FINISH_TOOL_CALL = 5,
    RP_FINISH_CANCELLED = 6,
} rp_finish_reason;

const char *rp_finish_reason_name(rp_finish_reason r);

typedef struct rp_sched_session_info {
    rp_sched_state state;
    bool has_slot;           /* admitted to the batch */
    bool busy;               /* part of the step in flight */
    bool demoted;
    rp_sched_role last_role;
    int64_t last_step;       /* step index of last_role (-1: never ran) */
    rp_finish_reason finish; /* of the latest turn */
    int32_t n_tokens;        /* history length (prompt + generated, incl. the pending token) */
    int32_t n_cached;        /* KV cells filled */
    int32_t n_turns;         /* turns finished */
    int32_t turn_generated;  /* tokens generated in the current / latest turn */
    float hal;               /* Historical Accepted Length A_i */
    int32_t last_draft;      /* L_i of its latest verify step */
    int32_t last_accepted;   /* k_i of its latest verify step */
    /* counters over the session's life */
    uint64_t prompt_tokens;  /* caller-supplied tokens run through the target */
    uint64_t filled_tokens;  /* prompt tokens whose KV a fill put in place (rp_sched_submit_filled) */
    uint64_t gen_tokens;     /* tokens generated */
    uint64_t prefill_rows;   /* prefill rows (caller tokens + pending sampled tokens fed with them) */
    uint64_t decode_steps;   /* steps in which it decoded (with or without a draft) */
    uint64_t drafted;        /* draft tokens proposed and verified */
    uint64_t accepted;       /* draft tokens accepted */
    uint64_t resumes;        /* rp_sched_resume calls */
    uint64_t resume_tokens;  /* tokens appended by rp_sched_resume */
    uint64_t demotions, restores;
} rp_sched_session_info;

rp_status rp_sched_session_info_get(rp_sched *s, rp_sched_id id, rp_sched_session_info *out);
/* Copies up to cap history tokens from index `from`; *n_out gets the count
 * copied. The pending (last sampled) token is included. */
rp_status rp_sched_session_tokens(rp_sched *s, rp_sched_id id, int32_t from, rp_token *buf, int32_t cap,
                                  int32_t *n_out);

/* ---- the loop ---- */

typedef struct rp_sched_step_info {
    int64_t step;            /* index of this step */
    bool ran;                /* a target forward ran */
    bool blocked;            /* no-yield policy: an admitted session waits on a tool, nothing ran */
    bool idle;               /* nothing to do */
    int32_t n_rows;          /* target rows */
    int32_t n_prefill_rows;
    int32_t n_decode;        /* sessions decoding (with or without a draft) */
    int32_t n_drafted;       /* draft tokens verified */
    int32_t n_accepted;
    int32_t n_emitted;       /* tokens generated */
    int32_t n_admitted;      /* sessions holding a slot */
    int32_t n_waiting;       /* sessions WAITING */
    int32_t n_draft_fwd;     /* draft forwards (self / model drafter) */
    double t_draft, t_target, t_total;   /* seconds */
} rp_sched_step_info;

/* Runs one step (see the model of operation). `info` may be NULL. On an
 * error from a forward, the step's sessions are rolled back to their state
 * before it (KV, drafts) and the error is returned. */
rp_status rp_sched_step(rp_sched *s, rp_sched_step_info *info);

/* Blocks until a submit / resume / mark_waiting / free happened since the
 * last step began, or `timeout_s` passed (for a loop with nothing to do; a
 * lock-free rp_sched_cancel only nudges it, so keep the timeout short).
 * Returns true if woken by an event. */
bool rp_sched_wait_event(rp_sched *s, double timeout_s);
/* Wakes rp_sched_wait_event: work for the loop arrived outside the scheduler. */
void rp_sched_wake(rp_sched *s);

typedef struct rp_sched_stats {
    int64_t steps, forwards, blocked_steps, idle_steps;
    uint64_t rows, prefill_rows, emitted, drafted, accepted, draft_forwards;
    double t_draft, t_target, t_total;
    size_t kv_resident;      /* bytes of KV in use by resident sessions */
    int32_t n_sessions, n_admitted, n_waiting, n_demoted;
    uint64_t demotions, restores;   /* KV demotions / restores since creation, all sessions */
} rp_sched_stats;

void rp_sched_stats_get(rp_sched *s, rp_sched_stats *out);

#endif /* RP_SCHED_H */
