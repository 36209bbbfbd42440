/* svg.h — agent timelines (states over time, draft budget and HAL per verify step) and their self-contained SVG rendering. */
#ifndef RP_SCHED_SVG_H
#define RP_SCHED_SVG_H

#include <stdint.h>
#include <stdio.h>

#include "reprise.h"

typedef enum rp_tl_state {
    RP_TL_NONE = 0,      /* not arrived / finished */
    RP_TL_PREFILL,       /* ran a prompt chunk */
    RP_TL_DECODE,        /* one token, no draft */
    RP_TL_VERIFY,        /* verified a draft */
    RP_TL_SUSPENDED,     /* waiting on a tool, out of the batch (yield) */
    RP_TL_WAITING,       /* waiting on a tool, holding its slot (no yield: blocks the batch) */
    RP_TL_BLOCKED,       /* ready but the batch is blocked by another agent's tool wait */
    RP_TL_QUEUED,        /* ready but not served this step (no slot / no rows left) */
    RP_TL_COUNT
} rp_tl_state;

const char *rp_tl_state_name(rp_tl_state s);

typedef struct rp_timeline rp_timeline;

/* A timeline of n_lanes agents; title is copied. Allocation grows with the
 * recorded events (this is bench-side bookkeeping, not the engine). */
rp_status rp_timeline_create(int32_t n_lanes, const char *title, rp_timeline **out);
void rp_timeline_free(rp_timeline *t);
rp_status rp_timeline_set_label(rp_timeline *t, int32_t lane, const char *label);
/* Records lane's state over [t0, t1]; merged with the previous interval when
 * the state is the same and the two touch. */
rp_status rp_timeline_add(rp_timeline *t, int32_t lane, double t0, double t1, rp_tl_state st);
/* Records a verify step: draft length L, accepted k, HAL A at time t. */
rp_status rp_timeline_budget(rp_timeline *t, int32_t lane, double ts, int32_t draft, int32_t accepted, float hal);
/* Total seconds lane spent in state st. */
double rp_timeline_time_in(const rp_timeline *t, int32_t lane, rp_tl_state st);

/* Budget points of a lane, for JSON output. */
int32_t rp_timeline_n_budget(const rp_timeline *t, int32_t lane);
void rp_timeline_budget_at(const rp_timeline *t, int32_t lane, int32_t i, double *ts, int32_t *draft,
                           int32_t *accepted, float *hal);

/* Writes one SVG document with every timeline stacked: per timeline a lane
 * per agent coloured by state, a time axis, and below it each agent's draft
 * budget L_i (steps) and HAL A_i over time; a legend at the top. */
rp_status rp_timeline_write_svg(rp_timeline *const *tls, int32_t n, FILE *f);

#endif /* RP_SCHED_SVG_H */
