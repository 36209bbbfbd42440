/* plan.c — static-shape call planning: the DP scheduler over prompt segments (paper §4.2 + appendix) and the naive schedule. */
#include "reuse/plan.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

/*
 * Model (what "feasible" and "latency" mean here)
 * -----------------------------------------------
 * N = total prompt length, P = end of the leading RP_SEG_PREFIX run (those
 * tokens need no call). Every token in [P, N) is covered by exactly one call
 * over a contiguous range [j, i), P <= j < i <= N:
 *   - prefill call:   i - j <= L_P; any mix of reusable / new tokens (reusable
 *                     tokens are then simply computed in full). Cost lat_P.
 *   - recompute call: with k = floor(r * L_S) recompute slots (>= 1, checked),
 *                     n_new + n_reuse <= L_S and
 *                         n_new * L_S + n_reuse * k <= k * L_S        (RS)
 *                     Cost lat_S.
 * (RS) is the paper's "n_new <= k - r * n_reuse" with r taken as the graph's
 * realised ratio k / L_S, evaluated in exact 64-bit integers. It equals the
 * paper's rule whenever r * L_S is an integer (the defaults: 0.25 * 512 = 128).
 * When r * L_S is not an integer, using the raw r would make even a full call
 * of L_S reusable tokens infeasible (ceil(r*L_S) = k+1 > k slots), so the
 * realised ratio is the only self-consistent reading: a call never recomputes a
 * smaller share of its reusable tokens than a full all-reusable call does.
 * Consequences: an all-new recompute call holds at most k tokens; with
 * n_reuse reusable tokens at most floor(k * (L_S - n_reuse) / L_S) new ones.
 * (RS) implies n_new + n_reuse <= L_S when k >= 1; both are checked anyway.
 *
 * Both feasibility sets are closed under shrinking the range from the left
 * (counts only drop), so for a call ending at i the feasible starts form an
 * interval [i - l(i), i - 1]; l_p(i) = min(L_P, i - P) and l_s(i) (the maximal
 * backward packing under RS) are its lengths, and the left ends i - l(i) are
 * non-decreasing in i (two pointers, O(N) overall).
 *
 * Latency of a plan = n_prefill * lat_P + n_recompute * lat_S; this is always
 * evaluated from the two counts (never accumulated step by step), so equal
 * call mixes give bit-identical totals regardless of call order.
 */

/* ---- configuration -------------------------------------------------------- */

rp_static_cfg rp_static_default_cfg(void) {
    rp_static_cfg c;
    c.L_P = 128;
    c.L_S = 512;
    c.r = 0.25f;
    /* Placeholders until calibration (rp_calib_*) measures the real machine:
     * one padded 512-token recompute call costs ~1.6 prefill calls of 128
     * tokens, i.e. ~2.5x cheaper per token, mid-range of the paper's 2-3x. */
    c.lat_P_ms = 1.0;
    c.lat_S_ms = 1.6;
    return c;
}

/* k = floor(r * L_S). r is a float, so r*L_S can land a few ulps below an
 * intended integer (0.7f * 10 = 6.99999988); a relative nudge of 2^-20, far
 * above float rounding (2^-24) and far below any meaningful fraction, makes
 * the floor land on the intended value. */
static int64_t static_k(const rp_static_cfg *cfg) {
    double x = (double)cfg->r * (double)cfg->L_S;
    return (int64_t)floor(x + x * (1.0 / 1048576.0));
}

/* Recompute slots per call, k = floor(r * L_S), as the planner uses it (the
 * executor must select the same k). 0 if cfg is NULL or has r*L_S < 1;
 * clamped to [0, L_S]. Not (yet) declared in plan.h. */
int32_t rp_static_k(const rp_static_cfg *cfg);
int32_t rp_static_k(const rp_static_cfg *cfg) {
    if (!cfg || cfg->L_S <= 0 || !(cfg->r > 0.0f && cfg->r <= 1.0f)) return 0;
    int64_t k = static_k(cfg);
    return (int32_t)(k < 0 ? 0 : k > cfg->L_S ? cfg->L_S : k);
}

static rp_status check_cfg(const rp_static_cfg *cfg) {
    if (!cfg) return rp_errorf(RP_ERR_INVALID_ARG, "plan: cfg is NULL");
    if (cfg->L_P <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "plan: L_P = %d must be > 0", (int)cfg->L_P);
    if (cfg->L_S <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "plan: L_S = %d must be > 0", (int)cfg->L_S);
    if (!(cfg->r > 0.0f && cfg->r <= 1.0f))
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: r = %g must be in (0, 1]", (double)cfg->r);
    if (static_k(cfg) < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: floor(r * L_S) = 0 (r = %g, L_S = %d): no recompute slot",
                         (double)cfg->r, (int)cfg->L_S);
    if (!(cfg->lat_P_ms >= 0.0 && isfinite(cfg->lat_P_ms)))
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: lat_P_ms = %g must be finite and >= 0", cfg->lat_P_ms);
    if (!(cfg->lat_S_ms >= 0.0 && isfinite(cfg->lat_S_ms)))
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: lat_S_ms = %g must be finite and >= 0", cfg->lat_S_ms);
    return RP_OK;
}

/* Checks order/contiguity/kinds; returns N (total tokens) and P (end of the
 * leading prefix run). */
static rp_status check_segs(const rp_segment *segs, int32_t n_segs, int32_t *n_tok, int32_t *p_end) {
    if (n_segs < 0) return rp_errorf(RP_ERR_INVALID_ARG, "plan: n_segs = %d < 0", (int)n_segs);
    if (n_segs > 0 && !segs) return rp_errorf(RP_ERR_INVALID_ARG, "plan: segs is NULL with n_segs = %d", (int)n_segs);
    int64_t pos = 0;
    int32_t p = 0;
    bool in_prefix = true;
    for (int32_t s = 0; s < n_segs; s++) {
        const rp_segment *g = &segs[s];
        if (g->kind != RP_SEG_PREFIX && g->kind != RP_SEG_REUSE && g->kind != RP_SEG_NEW)
            return rp_errorf(RP_ERR_INVALID_ARG, "plan: segment %d has invalid kind %d", (int)s, (int)g->kind);
        if (g->len <= 0)
            return rp_errorf(RP_ERR_INVALID_ARG, "plan: segment %d has len %d (must be > 0)", (int)s, (int)g->len);
        if ((int64_t)g->begin != pos)
            return rp_errorf(RP_ERR_INVALID_ARG, "plan: segment %d begins at %d, expected %lld (segments must be "
                             "contiguous from 0)", (int)s, (int)g->begin, (long long)pos);
        if (g->kind == RP_SEG_PREFIX) {
            if (!in_prefix)
                return rp_errorf(RP_ERR_INVALID_ARG, "plan: segment %d is PREFIX after a non-prefix segment "
                                 "(prefix reuse must be a leading run)", (int)s);
        } else {
            in_prefix = false;
        }
        pos += g->len;
        if (pos > INT32_MAX - 1)
            return rp_errorf(RP_ERR_INVALID_ARG, "plan: segment %d ends past INT32_MAX tokens", (int)s);
        if (in_prefix) p = (int32_t)pos;
    }
    *n_tok = (int32_t)pos;
    *p_end = p;
    return RP_OK;
}

/* ---- the DP --------------------------------------------------------------- */

/* Per position: the best plan for tokens [P, i) as counts of each call kind,
 * and the last call (from[i], kind[i]) for backtracking. */
typedef struct dp_state {
    double *cost;          /* nP * lat_P + nS * lat_S */
    int32_t *nP, *nS;
    int32_t *from;
    uint8_t *kind;
    int32_t *cnew;         /* cnew[i] = new tokens in [0, i) */
    int32_t *dq_p, *dq_s;  /* sliding-window deques of candidate starts */
} dp_state;

static void dp_free(dp_state *st) {
    free(st->cost);
    free(st->nP);
    free(st->nS);
    free(st->from);
    free(st->kind);
    free(st->cnew);
    free(st->dq_p);
    free(st->dq_s);
}

static double plan_cost(const rp_static_cfg *cfg, int64_t nP, int64_t nS) {
    return (double)nP * cfg->lat_P_ms + (double)nS * cfg->lat_S_ms;
}

/* Lexicographic key of a start position j as predecessor: (cost, calls).
 * Returns <0 if a is strictly better than b, 0 if equal, >0 if worse. */
static int key_cmp(const dp_state *st, int32_t a, int32_t b) {
    if (st->cost[a] < st->cost[b]) return -1;
    if (st->cost[a] > st->cost[b]) return 1;
    int64_t ca = (int64_t)st->nP[a] + st->nS[a], cb = (int64_t)st->nP[b] + st->nS[b];
    return ca < cb ? -1 : ca > cb ? 1 : 0;
}

/* (RS) and capacity for a recompute call with the given counts. */
static bool rs_ok(int64_t n_new, int64_t n_reuse, int64_t L_S, int64_t k) {
    return n_new + n_reuse <= L_S && n_new * L_S + n_reuse * k <= k * L_S;
}

/* Appends j to the monotone deque dq[h, *t) ordered by key_cmp: strictly
 * worse entries are dropped from the back, so the front is the window minimum
 * and, among equal keys, the EARLIEST start (the longest call) stays ahead. */
static void dq_push(const dp_state *st, int32_t *dq, int32_t h, int32_t *t, int32_t j) {
    while (*t > h && key_cmp(st, dq[*t - 1], j) > 0) (*t)--;
    dq[(*t)++] = j;
}

/*
 * The recurrence, for i in (P, N]:
 *   T[i] = 0                                                   for i <= P
 *   T[i] = min( min_{1 <= l <= l_p(i)} T[i - l] + lat_P,
 *               min_{1 <= l <= l_s(i)} T[i - l] + lat_S )      (exhaustive)
 *   T[i] = min( T[i - l_p(i)] + lat_P, T[i - l_s(i)] + lat_S ) (paper)
 * "min" is lexicographic on (latency, number of calls). The exhaustive
 * variant takes the window minima with monotone deques (O(N) total; every
 * feasible length is considered because feasible starts form an interval).
 * Note: T is non-decreasing in i (truncating an optimal plan for [P, i) at
 * i' < i keeps every call feasible and drops none of its cost), so the window
 * minimum is always attained at the maximal packing and both variants give
 * the same (latency, calls); the exhaustive one is kept as the default because
 * it does not rely on that argument. Ties between the two call kinds at equal
 * (latency, calls): prefill if its range holds no reusable token, otherwise
 * recompute (the paper's default graph for reusable tokens).
 */
static rp_status plan_dp(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                         int32_t cap, int32_t *n_calls, double *total_ms, bool exhaustive) {
    if (!n_calls || !total_ms) return rp_errorf(RP_ERR_INVALID_ARG, "plan: n_calls / total_ms is NULL");
    if (cap < 0 || (cap > 0 && !calls))
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: calls is NULL or cap = %d < 0", (int)cap);
    RP_TRY(check_cfg(cfg));
    int32_t N = 0, P = 0;
    RP_TRY(check_segs(segs, n_segs, &N, &P));

    if (N == P) { /* nothing to compute */
        *n_calls = 0;
        *total_ms = 0.0;
        return RP_OK;
    }

    const size_t n1 = (size_t)N + 1;
    dp_state st = {0};
    st.cost = malloc(n1 * sizeof *st.cost);
    st.nP = malloc(n1 * sizeof *st.nP);
    st.nS = malloc(n1 * sizeof *st.nS);
    st.from = malloc(n1 * sizeof *st.from);
    st.kind = malloc(n1 * sizeof *st.kind);
    st.cnew = malloc(n1 * sizeof *st.cnew);
    st.dq_p = malloc(n1 * sizeof *st.dq_p);
    st.dq_s = malloc(n1 * sizeof *st.dq_s);
    if (!st.cost || !st.nP || !st.nS || !st.from || !st.kind || !st.cnew || !st.dq_p || !st.dq_s) {
        dp_free(&st);
        return rp_errorf(RP_ERR_NOMEM, "plan: DP tables for %d tokens", (int)N);
    }

    /* prefix sums of new tokens */
    st.cnew[0] = 0;
    for (int32_t s = 0, i = 0; s < n_segs; s++)
        for (int32_t t = 0; t < segs[s].len; t++, i++) st.cnew[i + 1] = st.cnew[i] + (segs[s].kind == RP_SEG_NEW);

    for (int32_t i = 0; i <= P; i++) {
        st.cost[i] = 0.0;
        st.nP[i] = st.nS[i] = 0;
        st.from[i] = i;
        st.kind[i] = 0;
    }

    const int64_t L_S = cfg->L_S, k = static_k(cfg);
    int32_t hp = 0, tp = 0, hs = 0, ts = 0; /* deque heads/tails */
    int32_t js = P;                         /* smallest feasible recompute start for the current i */
    for (int32_t i = P + 1; i <= N; i++) {
        /* prefill window: starts in [max(P, i - L_P), i - 1] */
        int32_t jp = (i - P > cfg->L_P) ? i - cfg->L_P : P;
        /* recompute window: advance js until [js, i) satisfies (RS) */
        for (;;) {
            int64_t nn = st.cnew[i] - st.cnew[js], nr = (int64_t)(i - js) - nn;
            if (rs_ok(nn, nr, L_S, k)) break;
            js++; /* terminates: a single token is always feasible (k >= 1) */
        }
        int32_t bp, bs; /* chosen predecessor for each kind */
        if (exhaustive) {
            dq_push(&st, st.dq_p, hp, &tp, i - 1);
            while (st.dq_p[hp] < jp) hp++;
            dq_push(&st, st.dq_s, hs, &ts, i - 1);
            while (st.dq_s[hs] < js) hs++;
            bp = st.dq_p[hp];
            bs = st.dq_s[hs];
        } else {
            bp = jp;
            bs = js;
        }
        double cp = plan_cost(cfg, (int64_t)st.nP[bp] + 1, st.nS[bp]);
        double cs = plan_cost(cfg, st.nP[bs], (int64_t)st.nS[bs] + 1);
        int64_t kp = (int64_t)st.nP[bp] + st.nS[bp], ks = (int64_t)st.nP[bs] + st.nS[bs];
        bool take_p;
        if (cp != cs) take_p = cp < cs;
        else if (kp != ks) take_p = kp < ks;
        else take_p = (st.cnew[i] - st.cnew[bp]) == i - bp; /* prefill only for all-new ranges */
        if (take_p) {
            st.nP[i] = st.nP[bp] + 1;
            st.nS[i] = st.nS[bp];
            st.cost[i] = cp;
            st.from[i] = bp;
            st.kind[i] = RP_CALL_PREFILL;
        } else {
            st.nP[i] = st.nP[bs];
            st.nS[i] = st.nS[bs] + 1;
            st.cost[i] = cs;
            st.from[i] = bs;
            st.kind[i] = RP_CALL_RECOMPUTE;
        }
    }

    int32_t need = st.nP[N] + st.nS[N];
    *n_calls = need;
    *total_ms = st.cost[N];
    if (need > cap) {
        dp_free(&st);
        return rp_errorf(RP_ERR_FULL, "plan: %d calls needed, cap is %d", (int)need, (int)cap);
    }
    /* backtrack: the last call ends at N */
    int32_t c = need, i = N;
    while (i > P) {
        int32_t j = st.from[i];
        if (j >= i || c <= 0) { /* cannot happen: every i > P got a predecessor < i */
            dp_free(&st);
            return rp_errorf(RP_ERR_INTERNAL, "plan: broken backtrack at %d", (int)i);
        }
        rp_call *o = &calls[--c];
        o->kind = (rp_call_kind)st.kind[i];
        o->begin = j;
        o->end = i;
        o->n_new = st.cnew[i] - st.cnew[j];
        o->n_reuse = (i - j) - o->n_new;
        i = j;
    }
    dp_free(&st);
    if (c != 0) return rp_errorf(RP_ERR_INTERNAL, "plan: backtrack produced %d of %d calls", (int)(need - c), (int)need);
    return RP_OK;
}

rp_status rp_plan_dp(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                     int32_t cap, int32_t *n_calls, double *total_ms) {
    return plan_dp(segs, n_segs, cfg, calls, cap, n_calls, total_ms, true);
}

/* The paper's literal recurrence: only the maximal packings l_p(i), l_s(i).
 * Same contract as rp_plan_dp. Not (yet) declared in plan.h. */
rp_status rp_plan_dp_paper(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                           int32_t cap, int32_t *n_calls, double *total_ms);
rp_status rp_plan_dp_paper(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                           int32_t cap, int32_t *n_calls, double *total_ms) {
    return plan_dp(segs, n_segs, cfg, calls, cap, n_calls, total_ms, false);
}

/* ---- the naive schedule --------------------------------------------------- */

rp_status rp_plan_naive(const rp_segment *segs, int32_t n_segs, const rp_static_cfg *cfg, rp_call *calls,
                        int32_t cap, int32_t *n_calls, double *total_ms) {
    if (!n_calls || !total_ms) return rp_errorf(RP_ERR_INVALID_ARG, "plan: n_calls / total_ms is NULL");
    if (cap < 0 || (cap > 0 && !calls))
        return rp_errorf(RP_ERR_INVALID_ARG, "plan: calls is NULL or cap = %d < 0", (int)cap);
    RP_TRY(check_cfg(cfg));
    int32_t N = 0, P = 0;
    RP_TRY(check_segs(segs, n_segs, &N, &P));

    int64_t nP = 0, nS = 0;
    for (int32_t s = 0; s < n_segs; s++) {
        if (segs[s].kind == RP_SEG_REUSE) nS += (segs[s].len + (int64_t)cfg->L_S - 1) / cfg->L_S;
        else if (segs[s].kind == RP_SEG_NEW) nP += (segs[s].len + (int64_t)cfg->L_P - 1) / cfg->L_P;
    }
    int64_t need = nP + nS; /* <= N, fits int32 */
    *n_calls = (int32_t)need;
    *total_ms = plan_cost(cfg, nP, nS);
    if (need > cap) return rp_errorf(RP_ERR_FULL, "plan: %lld calls needed, cap is %d", (long long)need, (int)cap);

    int32_t c = 0;
    for (int32_t s = 0; s < n_segs; s++) {
        const rp_segment *g = &segs[s];
        if (g->kind == RP_SEG_PREFIX) continue;
        bool re = g->kind == RP_SEG_REUSE;
        int32_t step = re ? cfg->L_S : cfg->L_P;
        for (int32_t off = 0; off < g->len; off += step) {
            int32_t n = g->len - off < step ? g->len - off : step;
            rp_call *o = &calls[c++];
            o->kind = re ? RP_CALL_RECOMPUTE : RP_CALL_PREFILL;
            o->begin = g->begin + off;
            o->end = o->begin + n;
            o->n_new = re ? 0 : n;
            o->n_reuse = re ? n : 0;
            if (n < step) break; /* last piece; also keeps off + step from overflowing */
        }
    }
    return RP_OK;
}
