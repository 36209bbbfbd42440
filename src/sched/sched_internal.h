/* sched_internal.h — the scheduler's and sessions' private state, shared by session.c, batcher.c and demote.c. */
#ifndef RP_SCHED_INTERNAL_H
#define RP_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "model/forward.h"
#include "sched/sched.h"
#include "sched/spec.h"

/* One session slot. The array of these is allocated with the scheduler and
 * never moves, so rp_sched_cancel can touch cancel_gen without the lock. */
typedef struct rp_sess {
    /* identity */
    bool used;
    uint32_t gen;               /* generation of the id using this slot (>= 1) */
    int32_t slot;
    _Atomic uint32_t cancel_gen;   /* == gen: cancellation requested */

    /* scheduling state (mutex) */
    rp_sched_state state;
    bool has_slot;
    bool busy;                  /* part of the step in flight, or held */
    bool held;                  /* held outside the step (a fill, a KV read): stays busy across steps */
    bool want_wait, want_free;  /* deferred to the end of the step in flight */
    int64_t ready_seq;          /* request order, for slot admission */
    int64_t last_served;        /* step of its last prefill chunk (least recently served first) */

    /* history: toks[0..n_tok); toks[kv->n .. n_tok) are pending (not in the KV) */
    rp_token *toks;
    int32_t n_tok, cap_tok;
    int32_t caller_from;        /* toks[caller_from..) of the turn came from the caller */
    rp_kv *kv;                  /* NULL while demoted */

    /* sampling */
    rp_sampler *smp;            /* target sampler (its history = the tokens fed) */
    rp_sampler *dsmp;           /* draft sampler, temperature > 0 with a model drafter */
    rp_gen_params gp;           /* current turn's params; pointers redirected to the copies below */
    rp_logit_bias *bias;
    int32_t n_bias;
    rp_token stop_ids[RP_SCHED_MAX_STOP_IDS];
    char stop_strs[RP_SCHED_MAX_STOP_STRS][RP_SCHED_MAX_STOP_LEN + 1];
    const char *stop_ptrs[RP_SCHED_MAX_STOP_STRS];
    bool have_gp;

    /* the turn */
    int32_t turn_gen;
    int32_t n_turns;
    rp_finish_reason finish;
    char *text;                 /* [text_cap + 1] rendered text of the turn (tool calls, stop strings) */
    int32_t text_len;
    rp_detok detok;

    /* speculation */
    float hal;
    int32_t last_draft, last_accepted;
    rp_token *draft;            /* [max_len] this step's draft */
    float *q;                   /* [max_len x n_vocab] draft distributions (allocated when first needed) */
    int32_t want, got;          /* this step's allocation and proposal */
    bool q_used;                /* this step's draft was sampled: q holds its law */

    /* this step's rows */
    rp_sched_role role;
    int64_t role_step;
    int32_t row0, n_rows, out0; /* first batch row, rows, first logits row */
    int32_t kv_before;          /* KV length before the step (rollback point) */
    size_t resident_snap;       /* KV bytes when the step took the session (busy): what stats report while
                                   the step thread grows / rolls back its KV outside the lock */

    /* demotion */
    bool demoted;
    void *blob;                 /* compressed KV while demoted in memory */
    size_t blob_len;
    char *blob_path;            /* file while demoted to disk */

    rp_sched_session_info c;    /* counters (the state fields are filled on query) */
} rp_sess;

struct rp_sched {
    rp_sched_params p;
    char *demote_dir;
    const rp_model *m, *dm;
    int32_t n_vocab;
    rp_token *eog;              /* the vocabulary's end-of-generation ids (ignore_eos bans them) */
    int32_t n_eog;
    bool yield;                 /* suspend-and-yield policy */
    int32_t max_active;
    int32_t max_len;            /* per-session draft cap */

    rp_ctx *ctx;
    rp_drafter *drafter;        /* NULL for Batch-AR */
    rp_sess *sess;              /* [max_sessions] */
    rp_kv **kvs;                /* [max_sessions] target caches by slot (the forward's seq index) */
    rp_batch b;

    /* step scratch, sized at create */
    int32_t *dec, *pre;         /* [max_sessions] slots decoding / prefilling this step */
    int32_t n_dec, n_pre;
    float *a, *frac;            /* [max_sessions] HAL inputs */
    int32_t *alloc;             /* [max_sessions] */
    rp_draft_req *reqs;         /* [max_sessions] */
    int32_t *req_sess;          /* [max_sessions] */
    float *pbuf, *resid;        /* [n_vocab] */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stepping;
    bool event;
    int64_t step_no;
    int64_t ready_counter;
    rp_sched_stats st;
};

/* The logits of a session's next token after its turn's processor (gp.on_logits) and ignore_eos, in s->resid;
 * lg itself when neither applies (batcher.c). */
const float *rp_sess_constrain(rp_sched *s, rp_sess *x, const float *lg);

/* Lookup under the lock: the session of a valid id, or NULL with an error set. */
rp_sess *rp_sched_find(rp_sched *s, rp_sched_id id);

/* Frees a session's buffers and marks the slot unused (under the lock, not busy). */
void rp_sess_release(rp_sched *s, rp_sess *x);

/* Bytes of KV a resident session occupies (cells in use, target + draft). */
size_t rp_sess_kv_resident(const rp_sched *s, const rp_sess *x);

/* Demotes / restores under the lock (demote.c). */
rp_status rp_sess_demote(rp_sched *s, rp_sess *x, const char *path);
rp_status rp_sess_restore(rp_sched *s, rp_sess *x);
void rp_sess_drop_blob(rp_sess *x);

/* Serializes caches (cells [0, n) of each) into one buffer and back (demote.c;
 * exposed for tests of the byte-exact round trip). */
rp_status rp_kv_blob_write(rp_kv *const *kvs, int32_t n_kv, void **out, size_t *out_len);
rp_status rp_kv_blob_read(const void *blob, size_t len, rp_kv *const *kvs, int32_t n_kv);

#endif /* RP_SCHED_INTERNAL_H */
