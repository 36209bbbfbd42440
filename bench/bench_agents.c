/* TODO(issue 15): moves to the public rp_agents once it exposes drafter/kv-limit/trace (includes internals: the
 * scheduler's policies, drafter, KV limit and timeline). */
/* bench_agents.c — `reprise bench agents`: trace-driven multi-agent workload over the scheduler, policies compared. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "progress.h"
#include "kernels/types.h"
#include "model/model.h"
#include "model/session.h"
#include "sched/sched.h"
#include "report.h"
#include "svg.h"
#include "trace.h"

#define MAX_LIST 16

typedef struct {
    double lo, hi;
} stall_range;

/* "0,0.1:1,1:10" -> ranges; "X" alone is [X, X] (0: no stalls). */
static int parse_stalls(const char *s, stall_range *out, int cap) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double a = strtod(p, &end), b = a;
        if (end == p || errno || a < 0) return -1;
        if (*end == ':') {
            const char *q = end + 1;
            b = strtod(q, &end);
            if (end == q || b < a) return -1;
        }
        if (n >= cap || (*end && *end != ',')) return -1;
        out[n++] = (stall_range){a, b};
        p = *end ? end + 1 : end;
    }
    return n;
}

typedef enum { AG_PENDING, AG_RUN, AG_STALL, AG_DONE } ag_state;

typedef struct {
    ag_state st;
    rp_sched_id id;
    int32_t turn;            /* current turn index */
    double resume_at, finish_s;
    int64_t gen, verify_steps, draft_sum, accepted;
    uint64_t hash;
    uint64_t demotions, restores;
    bool same_seq;           /* history equals the one-at-a-time reference */
    int32_t n_prompt_total;
} agent_run;

typedef struct {
    rp_sched_policy policy;
    int n_agents;
    stall_range stall;
    double makespan, compute, tok_s;
    int64_t steps, forwards, blocked, gen, drafted, accepted, verify_steps;
    uint64_t hash_all;
    uint64_t demotions, restores;
    int same_seq;            /* every agent equals the sequential reference: 1, 0; -1 not checked */
    agent_run *ag;
    const rp_trace *trace;
    rp_timeline *tl;
    bool failed;
} run_result;

static uint64_t fnv(uint64_t h, const rp_token *t, int32_t n);

/* What a trace gives the model: agents, prompts, turn lengths, tool results
 * (not stall or arrival times). Equal keys: equal one-at-a-time references. */
static uint64_t trace_key(const rp_trace *tr) {
    uint64_t h = fnv(0xcbf29ce484222325ULL, &tr->n_agents, 1);
    for (int32_t i = 0; i < tr->n_agents; i++) {
        const rp_trace_agent *a = &tr->agents[i];
        h = fnv(h, a->prompt, a->n_prompt);
        for (int32_t t = 0; t < a->n_turns; t++) {
            h = fnv(h, &a->turns[t].gen_tokens, 1);
            if (a->turns[t].result) h = fnv(h, a->turns[t].result, a->turns[t].n_result);
        }
    }
    return h;
}

static uint64_t fnv(uint64_t h, const rp_token *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ULL;
        }
    }
    return h;
}

static double now_s(void) { return cli_now(); }

/* CPU seconds of this process: with --clock cpu a step costs the CPU time it
 * used, which other processes on a shared machine cannot inflate (exact with
 * -t 1; with more threads it sums the threads' time). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct {
    const rp_model *m, *dm;
    rp_sched_params sp;
    rp_gen_params gp;
    bool realtime;
    bool cpu_clock;
    int64_t max_steps;
    float temp[RP_AGENT_KIND_COUNT];   /* sampling temperature per agent kind */
} bench_cfg;

static rp_gen_params turn_params(const bench_cfg *c, const rp_trace_agent *a, int32_t turn) {
    rp_gen_params g = c->gp;
    g.sampler.temp = c->temp[a->kind];
    g.max_tokens = a->turns[turn].gen_tokens;
    /* every turn but the last ends in a (trace-simulated) tool call when the
     * model did not emit a real one in its chat format */
    g.wait_after = turn + 1 < a->n_turns;
    return g;
}

/* The one-at-a-time reference of a trace: each agent alone through
 * rp_session with plain greedy decoding (feed, argmax, feed the token, ...),
 * every turn ending where the scheduler's would (end of generation, the
 * trace's length, a complete tool call in the chat format, a full context)
 * and the same tool result appended; ref[i] gets the FNV hash of agent i's
 * whole history, as run_trace hashes it. Greedy only. */
static int reference_pass(const bench_cfg *cfg, const rp_trace *tr, uint64_t *ref) {
    const int32_t n_ctx = cfg->sp.n_ctx;
    const rp_tokenizer *tok = cfg->m->tok;
    const size_t bound = rp_detok_bound(tok);
    rp_ctx_params cp = rp_ctx_default_params();
    cp.n_ctx_max = n_ctx;
    cp.n_threads = cfg->sp.n_threads;
    rp_ctx *ctx = NULL;
    rp_status st = rp_ctx_create(cfg->m, cp, &ctx);
    if (st != RP_OK) return cli_fail("bench agents", "reference context", st);
    rp_token *h = malloc(sizeof(rp_token) * ((size_t)n_ctx + 8));
    rp_token *feed = malloc(sizeof(rp_token) * ((size_t)n_ctx + 8));
    int rc = h && feed ? 0 : 1;
    for (int32_t i = 0; i < tr->n_agents && rc == 0; i++) {
        const rp_trace_agent *a = &tr->agents[i];
        rp_session_params ssp = rp_session_default_params();
        ssp.n_ctx = n_ctx;
        ssp.kv_type = cfg->sp.kv_type;
        ssp.sampler = cfg->gp.sampler;
        ssp.sampler.temp = 0;
        rp_session *ss = NULL;
        if ((st = rp_session_create(ctx, ssp, &ss)) != RP_OK) {
            rc = cli_fail("bench agents", "reference session", st);
            break;
        }
        int32_t n = 0, n_feed = 0;
        bool pending = false;   /* h[n - 1] was sampled, not fed yet */
        for (int32_t t = 0; t < a->n_turns && rc == 0; t++) {
            const rp_token *add = t == 0 ? a->prompt : a->turns[t - 1].result;
            const int32_t n_add = t == 0 ? a->n_prompt : a->turns[t - 1].n_result;
            n_feed = 0;
            if (pending) feed[n_feed++] = h[n - 1];
            if (n + n_add > n_ctx) {
                rc = 1;
                break;
            }
            memcpy(feed + n_feed, add, sizeof(rp_token) * (size_t)n_add);
            memcpy(h + n, add, sizeof(rp_token) * (size_t)n_add);
            n_feed += n_add;
            n += n_add;
            pending = false;
            const rp_gen_params g = turn_params(cfg, a, t);
            size_t cap = ((size_t)(g.max_tokens > 0 ? g.max_tokens : 0) + 1) * bound + 1;
            char *text = malloc(cap);
            if (!text || (st = rp_session_feed(ss, feed, n_feed)) != RP_OK) {
                rc = text ? cli_fail("bench agents", "reference feed", st) : 1;
                free(text);
                break;
            }
            rp_detok d;
            rp_detok_init(&d, tok, true);
            size_t len = 0;
            for (int32_t k = 0; k < g.max_tokens; k++) {
                if (pending && (st = rp_session_feed(ss, &h[n - 1], 1)) != RP_OK) {
                    rc = cli_fail("bench agents", "reference feed", st);
                    break;
                }
                rp_token x = rp_session_sample(ss);
                h[n++] = x;
                pending = true;
                int w = rp_detok_push(&d, x, text + len, cap - len);
                if (w < 0) w = 0;
                len += (size_t)w;
                text[len] = '\0';
                if (g.stop_at_eog && rp_tokenizer_is_eog(tok, x)) break;
                if (g.suspend_on_tool_call && cfg->m->chat != RP_CHAT_UNKNOWN &&
                    rp_sched_tool_call_closed(cfg->m->chat, text, (int32_t)len, w))
                    break;
                if (n >= n_ctx) break;
            }
            free(text);
        }
        ref[i] = fnv(0xcbf29ce484222325ULL, h, n);
        rp_session_free(ss);
    }
    if (rc == 1 && (!h || !feed)) fprintf(stderr, "reprise bench agents: out of memory\n");
    free(h);
    free(feed);
    rp_ctx_free(ctx);
    return rc;
}

/* Runs one trace under one policy. Time is virtual by default: each step
 * advances the clock by its measured wall time, and when nothing can run
 * (everyone stalled, or the batch blocked) the clock jumps to the next
 * arrival or tool completion — stalls cost no real waiting, so long stall
 * ranges stay cheap to benchmark. --realtime sleeps instead. */
static int run_trace(const bench_cfg *cfg, const rp_trace *tr, rp_sched_policy pol, run_result *R) {
    const int32_t N = tr->n_agents;
    rp_sched_params sp = cfg->sp;
    sp.policy = pol;
    sp.max_sessions = N;
    if (pol == RP_POLICY_BATCH_AR) sp.drafter = RP_DRAFTER_NONE;
    rp_sched *s = NULL;
    rp_status st = rp_sched_create(cfg->m, cfg->dm, sp, &s);
    if (st != RP_OK) return cli_fail("bench agents", "scheduler", st);
    agent_run *ag = calloc((size_t)N, sizeof *ag);
    R->ag = ag;
    R->trace = tr;
    char title[256];
    snprintf(title, sizeof title, "%s, %d agents, stalls [%g, %g] s, drafter %s", rp_sched_policy_name(pol), N,
             R->stall.lo, R->stall.hi, rp_drafter_kind_name(sp.drafter));
    if (rp_timeline_create(N, title, &R->tl) != RP_OK || !ag) {
        rp_sched_free(s);
        fprintf(stderr, "reprise bench agents: out of memory\n");
        return 1;
    }
    for (int32_t i = 0; i < N; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "%d %s", i, rp_agent_kind_name(tr->agents[i].kind));
        rp_timeline_set_label(R->tl, i, lab);
        ag[i].hash = 0xcbf29ce484222325ULL;
    }
    const double t_start = now_s();
    double clock = 0;
    int done = 0, rc = 0;
    int64_t steps = 0;
    rp_token *buf = malloc(sizeof(rp_token) * (size_t)sp.n_ctx + 8);
    while (done < N && rc == 0) {
        if (cfg->realtime) clock = now_s() - t_start;
        /* arrivals and tool completions due now */
        for (int32_t i = 0; i < N && rc == 0; i++) {
            const rp_trace_agent *a = &tr->agents[i];
            if (ag[i].st == AG_PENDING && a->arrival_s <= clock) {
                rp_gen_params g = turn_params(cfg, a, 0);
                if ((st = rp_sched_session_create(s, &ag[i].id)) != RP_OK ||
                    (st = rp_sched_submit(s, ag[i].id, a->prompt, a->n_prompt, &g)) != RP_OK)
                    rc = cli_fail("bench agents", "submit", st);
                ag[i].st = AG_RUN;
            } else if (ag[i].st == AG_STALL && ag[i].resume_at <= clock) {
                const rp_trace_turn *prev = &a->turns[ag[i].turn - 1];
                rp_gen_params g = turn_params(cfg, a, ag[i].turn);
                if ((st = rp_sched_resume(s, ag[i].id, prev->result, prev->n_result, &g)) != RP_OK)
                    rc = cli_fail("bench agents", "resume", st);
                ag[i].st = AG_RUN;
            }
        }
        if (rc) break;
        rp_sched_step_info info;
        double t0 = cfg->cpu_clock ? cpu_s() : now_s();
        if ((st = rp_sched_step(s, &info)) != RP_OK) {
            rc = cli_fail("bench agents", "step", st);
            break;
        }
        double dt = (cfg->cpu_clock ? cpu_s() : now_s()) - t0, before = clock;
        steps++;
        R->steps++;
        R->blocked += info.blocked;
        if (info.ran) {
            R->compute += dt;
            clock = cfg->realtime ? now_s() - t_start : clock + dt;
        } else {
            /* nothing ran: jump (or sleep) to the next event */
            double next = INFINITY;
            for (int32_t i = 0; i < N; i++) {
                if (ag[i].st == AG_PENDING) next = fmin(next, tr->agents[i].arrival_s);
                if (ag[i].st == AG_STALL) next = fmin(next, ag[i].resume_at);
            }
            if (isinf(next)) {
                fprintf(stderr, "reprise bench agents: nothing can run and nothing is pending (step %lld)\n",
                        (long long)steps);
                rc = 1;
                break;
            }
            if (cfg->realtime) {
                sleep_s(fmin(next - (now_s() - t_start), 0.05));
                clock = now_s() - t_start;
            } else {
                clock = fmax(clock, next);
            }
        }
        /* states over [before, clock], turn ends, budgets */
        for (int32_t i = 0; i < N; i++) {
            if (ag[i].st == AG_PENDING || ag[i].st == AG_DONE) continue;
            if (ag[i].st == AG_STALL) {
                rp_timeline_add(R->tl, i, before, clock, pol == RP_POLICY_HAL_YIELD ? RP_TL_SUSPENDED : RP_TL_WAITING);
                continue;
            }
            rp_sched_session_info si;
            if (rp_sched_session_info_get(s, ag[i].id, &si) != RP_OK) continue;
            rp_tl_state ts = RP_TL_QUEUED;
            if (si.last_step == info.step && info.ran)
                ts = si.last_role == RP_ROLE_PREFILL ? RP_TL_PREFILL
                     : si.last_role == RP_ROLE_VERIFY ? RP_TL_VERIFY : RP_TL_DECODE;
            else if (info.blocked && si.has_slot) ts = RP_TL_BLOCKED;
            rp_timeline_add(R->tl, i, before, clock, ts);
            if (si.last_step == info.step && info.ran && si.last_role != RP_ROLE_PREFILL) {
                ag[i].verify_steps++;
                ag[i].draft_sum += si.last_draft;
                ag[i].accepted += si.last_accepted;
                if (sp.drafter != RP_DRAFTER_NONE && pol != RP_POLICY_BATCH_AR)
                    rp_timeline_budget(R->tl, i, clock, si.last_draft, si.last_accepted, si.hal);
            }
            bool last_turn = ag[i].turn + 1 >= tr->agents[i].n_turns;
            if (si.state == RP_SESS_WAITING && si.n_turns > ag[i].turn && !last_turn) {
                /* the turn ended in a tool call: stall, then the result */
                ag[i].resume_at = clock + tr->agents[i].turns[ag[i].turn].stall_s;
                ag[i].turn++;
                ag[i].st = AG_STALL;
            } else if (si.n_turns >= tr->agents[i].n_turns &&
                       (si.state == RP_SESS_IDLE || si.state == RP_SESS_WAITING)) {
                /* done (a real tool call on the last turn also ends the agent) */
                int32_t n = 0;
                rp_sched_session_tokens(s, ag[i].id, 0, buf, sp.n_ctx + 8, &n);
                ag[i].hash = fnv(ag[i].hash, buf, n);
                ag[i].gen = (int64_t)si.gen_tokens;
                ag[i].n_prompt_total = (int32_t)si.prompt_tokens;
                ag[i].finish_s = clock;
                ag[i].demotions = si.demotions;
                ag[i].restores = si.restores;
                ag[i].st = AG_DONE;
                rp_sched_session_free(s, ag[i].id);
                done++;
            }
        }
        if (steps >= cfg->max_steps) {
            fprintf(stderr, "reprise bench agents: --max-steps %lld reached\n", (long long)cfg->max_steps);
            rc = 1;
        }
    }
    free(buf);
    rp_sched_stats ss;
    rp_sched_stats_get(s, &ss);
    R->forwards = ss.forwards;
    R->drafted = (int64_t)ss.drafted;
    R->accepted = (int64_t)ss.accepted;
    R->makespan = 0;
    R->hash_all = 0xcbf29ce484222325ULL;
    for (int32_t i = 0; i < N; i++) {
        R->makespan = fmax(R->makespan, ag[i].finish_s);
        R->gen += ag[i].gen;
        R->verify_steps += ag[i].verify_steps;
        R->demotions += ag[i].demotions;
        R->restores += ag[i].restores;
        R->hash_all = (R->hash_all ^ ag[i].hash) * 0x100000001b3ULL;
    }
    R->tok_s = R->makespan > 0 ? (double)R->gen / R->makespan : 0;
    R->failed = rc != 0;
    rp_sched_free(s);
    return rc;
}

static void usage(void) {
    printf("usage: reprise bench agents -m MODEL.gguf [options]\n"
           "Trace-driven multi-agent workload (EdgeAgent-style): reasoning : code : tool agents 1:2:2 (MuSiQue, MBPP,\n"
           "ToolBench prompts), each running --turns turns; every turn but the last ends in a tool call with a\n"
           "log-uniform stall, after which the tool result is appended and the agent continues. Models that never\n"
           "emit tool calls in their chat format (tiny / random weights) get the boundary from the trace: a turn\n"
           "generates its trace length, then counts as a tool call. Time is virtual unless --realtime: steps\n"
           "advance the clock by their measured time, stalls and arrivals by jumping to the next event.\n"
           "  --policy LIST       batch-ar,seq-sd,batch-sd,uniform,hal,hal-yield (default: all); uniform splits\n"
           "                      HAL's budget M evenly (the equal-budget baseline for HAL)\n"
           "  --drafter D         ngram | self:K | model:PATH (default ngram)\n"
           "  --agents LIST       concurrent agents, e.g. 2,3,4 (default 3)\n"
           "  --stall LIST        stall ranges in seconds: 0 | LO:HI, comma-separated (default 0,0.1:1)\n"
           "  --turns N           turns per agent (default 3)\n"
           "  --arrival RATE      Poisson arrivals per second (default 0: all at t=0)\n"
           "  --gen R,C,T         mean tokens per turn for reasoning,code,tool (default 48,64,40)\n"
           "  --prompt R,C,T      prompt token caps (default 384,160,256)\n"
           "  --result N          tool result token cap (default 48)\n"
           "  --budget M --lmin L --tau T --gamma G --fixed-len L   HAL / Batch-SD constants (16, 1, 1, 0.3, 16)\n"
           "  --temp T | R,C,T    sampling temperature, one for all or per kind: reasoning,code,tool (e.g. 1,0,0:\n"
           "                      a sampling orchestrator beside greedy workers, agents that differ in\n"
           "                      predictability); default 0: greedy, outputs comparable across policies and\n"
           "                      checked against a one-at-a-time greedy reference: column \"same seq\")\n"
           "  --kv-limit MB       KV bytes in use above which waiting sessions are demoted (compressed in memory)\n"
           "                      and restored on resume; demotions/restores reported (default 0: never)\n"
           "  --prefill-share F   part of the row budget kept for pending prompts when drafts fill it (0.25)\n"
           "  --threads N --n-batch N --n-ctx N --kv-type f16|f32|q8_0 --cpu LEVEL --seed N --data DIR\n"
           "  --realtime          really wait for stalls and arrivals\n"
           "  --clock wall|cpu    what a step costs on the virtual clock: wall time (default) or process CPU\n"
           "                      time (robust on a busy machine; use with -t 1)\n"
           "  --json              print the results as JSON (the table goes to stderr)\n"
           "  --svg OUT.svg       timelines of every run (agent states, draft budget and HAL over time)\n"
           "  --json-out F.json   the JSON (as --json) written to a file\n"
           "  --html OUT.html     a report: the table, makespan bars per configuration and policy, timelines\n");
}

static int parse_triple(const char *cmd, const char *opt, const char *s, int32_t out[3]) {
    long v[3];
    if (cli_int_list(cmd, opt, s, v, 3) != 3) {
        fprintf(stderr, "reprise %s: %s expects three comma-separated integers\n", cmd, opt);
        return -1;
    }
    for (int i = 0; i < 3; i++) out[i] = (int32_t)v[i];
    return 0;
}

static void print_json(FILE *f, const char *model, const char *drafter, run_result *rs, int n) {
    fprintf(f, "[");
    for (int r = 0; r < n; r++) {
        run_result *R = &rs[r];
        fprintf(f,
                "%s\n  {\"model\": \"%s\", \"policy\": \"%s\", \"drafter\": \"%s\", \"agents\": %d, "
                "\"stall\": [%g, %g], \"makespan_s\": %.4f, \"compute_s\": %.4f, \"gen_tokens\": %lld, "
                "\"tok_s\": %.2f, \"steps\": %lld, \"blocked_steps\": %lld, \"forwards\": %lld, \"drafted\": %lld, "
                "\"accepted\": %lld, \"verify_steps\": %lld, \"outputs_hash\": \"%016llx\", \"same_as_sequential\": %s, "
                "\"demotions\": %llu, \"restores\": %llu, \"failed\": %s,\n"
                "   \"per_agent\": [",
                r ? "," : "", model, rp_sched_policy_name(R->policy), R->policy == RP_POLICY_BATCH_AR ? "none" : drafter,
                R->n_agents, R->stall.lo, R->stall.hi, R->makespan, R->compute, (long long)R->gen, R->tok_s,
                (long long)R->steps, (long long)R->blocked, (long long)R->forwards, (long long)R->drafted,
                (long long)R->accepted, (long long)R->verify_steps, (unsigned long long)R->hash_all,
                R->same_seq < 0 ? "null" : R->same_seq ? "true" : "false", (unsigned long long)R->demotions,
                (unsigned long long)R->restores, R->failed ? "true" : "false");
        for (int i = 0; i < R->n_agents; i++) {
            const agent_run *a = &R->ag[i];
            const rp_trace_agent *ta = &R->trace->agents[i];
            double vs = a->verify_steps > 0 ? (double)a->verify_steps : 1;
            fprintf(f,
                    "%s\n    {\"agent\": %d, \"kind\": \"%s\", \"source\": \"%s\", \"arrival_s\": %.4f, "
                    "\"prompt_tokens\": %d, \"gen_tokens\": %lld, \"finish_s\": %.4f, \"decode_steps\": %lld, "
                    "\"mean_draft\": %.3f, \"mean_accepted\": %.3f, \"tokens_per_step\": %.3f, "
                    "\"suspended_s\": %.4f, \"waiting_s\": %.4f, \"blocked_s\": %.4f, \"hash\": \"%016llx\", "
                    "\"same_as_sequential\": %s, "
                    "\"budget\": [",
                    i ? "," : "", i, rp_agent_kind_name(ta->kind), ta->source, ta->arrival_s, a->n_prompt_total,
                    (long long)a->gen, a->finish_s, (long long)a->verify_steps, a->draft_sum / vs, a->accepted / vs,
                    a->verify_steps ? (double)a->gen / vs : 0, rp_timeline_time_in(R->tl, i, RP_TL_SUSPENDED),
                    rp_timeline_time_in(R->tl, i, RP_TL_WAITING), rp_timeline_time_in(R->tl, i, RP_TL_BLOCKED),
                    (unsigned long long)a->hash, R->same_seq < 0 ? "null" : a->same_seq ? "true" : "false");
            int32_t nb = rp_timeline_n_budget(R->tl, i);
            for (int32_t k = 0; k < nb; k++) {
                double ts;
                int32_t L, acc;
                float A;
                rp_timeline_budget_at(R->tl, i, k, &ts, &L, &acc, &A);
                fprintf(f, "%s[%.4f, %d, %d, %.3f]", k ? ", " : "", ts, L, acc, A);
            }
            fprintf(f, "]}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]\n");
}

/* The HTML report: the results table, makespan bars (one group per agent
 * count and stall range, one bar per policy) and every run's timeline. */
static int write_html(const char *path, const char *model, const char *drafter, run_result *rs, int n, int npol,
                      double temp) {
    char title[256];
    snprintf(title, sizeof title, "Reprise multi-agent benchmark: %s", model);
    FILE *f = rp_html_open(path, title);
    if (!f) return -1;
    char note[512];
    snprintf(note, sizeof note, "drafter %s; makespan of N agents under tool stalls drawn log-uniformly from the range; "
             "\"vs Batch-SD\" = Batch-SD's makespan / this policy's.", drafter);
    rp_html_p(f, note);
    const char *head[10] = {"N", "stall s", "policy", "makespan s", "tok/s", "drafted", "accepted %", "vs Batch-SD",
                            "same outputs", "same as sequential"};
    char (*cells)[10][32] = calloc((size_t)n, sizeof *cells);
    const char **cp = calloc((size_t)n * 10, sizeof *cp);
    const int ng = npol > 0 ? n / npol : 0;
    const char **groups = calloc((size_t)(ng > 0 ? ng : 1), sizeof *groups);
    char (*gname)[48] = calloc((size_t)(ng > 0 ? ng : 1), sizeof *gname);
    const char **series = calloc((size_t)(npol > 0 ? npol : 1), sizeof *series);
    double *vals = calloc((size_t)(n > 0 ? n : 1), sizeof *vals);
    if (!cells || !cp || !groups || !gname || !series || !vals) {
        free(cells); free(cp); free(groups); free(gname); free(series); free(vals);
        rp_html_close(f);
        return -1;
    }
    for (int r = 0; r < n; r++) {
        const run_result *R = &rs[r];
        const int g = r / npol, first = g * npol;
        double ref = 0;
        bool same = true;
        for (int q = first; q < first + npol && q < n; q++) {
            if (rs[q].policy == RP_POLICY_BATCH_SD) ref = rs[q].makespan;
            same &= rs[q].hash_all == R->hash_all;
        }
        char stall[32];
        if (R->stall.hi > 0) snprintf(stall, sizeof stall, "%g:%g", R->stall.lo, R->stall.hi);
        else snprintf(stall, sizeof stall, "0");
        snprintf(cells[r][0], 32, "%d", R->n_agents);
        snprintf(cells[r][1], 32, "%s", stall);
        snprintf(cells[r][2], 32, "%s", rp_sched_policy_name(R->policy));
        snprintf(cells[r][3], 32, "%.3f", R->makespan);
        snprintf(cells[r][4], 32, "%.1f", R->tok_s);
        snprintf(cells[r][5], 32, "%lld", (long long)R->drafted);
        snprintf(cells[r][6], 32, "%.1f", R->drafted ? 100.0 * (double)R->accepted / (double)R->drafted : 0.0);
        if (ref > 0 && R->makespan > 0) snprintf(cells[r][7], 32, "%.2fx", ref / R->makespan);
        else snprintf(cells[r][7], 32, "-");
        snprintf(cells[r][8], 32, "%s", temp > 0 ? "n/a" : same ? "yes" : "NO");
        snprintf(cells[r][9], 32, "%s", R->same_seq < 0 ? "n/a" : R->same_seq ? "yes" : "NO");
        for (int c = 0; c < 10; c++) cp[r * 10 + c] = cells[r][c];
        if (g < ng) {
            snprintf(gname[g], sizeof gname[g], "N=%d stall %s", R->n_agents, stall);
            groups[g] = gname[g];
            if (g == 0) series[r - first] = rp_sched_policy_name(R->policy);
            vals[g * npol + (r - first)] = R->makespan;
        }
    }
    rp_html_table(f, head, 10, cp, n);
    if (ng > 0) rp_svg_bars(f, "Makespan by configuration and policy", "s", groups, ng, series, npol, vals);
    rp_html_h2(f, "Timelines (agent states, draft budget and HAL over time)");
    rp_timeline **tls = malloc(sizeof *tls * (size_t)n);
    int nt = 0;
    for (int r = 0; tls && r < n; r++)
        if (rs[r].tl) tls[nt++] = rs[r].tl;
    if (tls && nt > 0) rp_timeline_write_svg(tls, nt, f);
    free(tls);
    free(cells); free(cp); free(groups); free(gname); free(series); free(vals);
    rp_html_close(f);
    return 0;
}

int bench_agents(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench agents"};
    const char *model_path = NULL, *drafter_s = "ngram", *policy_s = "batch-ar,seq-sd,batch-sd,uniform,hal,hal-yield";
    const char *agents_s = "3", *stall_s = "0,0.1:1", *svg_path = NULL, *data_dir = NULL, *kv_name = "f16";
    const char *json_path = NULL, *html_path = NULL;
    const char *gen_s = NULL, *prompt_s = NULL, *temp_s = NULL, *v;
    double temps[RP_AGENT_KIND_COUNT] = {0, 0, 0};
    long turns = 3, threads = 2, n_batch = 256, n_ctx = 0, result_max = 48, budget = 16, lmin = 1, fixed_len = 16;
    long max_steps = 10000000;
    double arrival = 0, tau = 1.0, gamma = 0.3, temp = 0, kv_limit_mb = 0, prefill_share = 0.25;
    uint64_t seed = 1;
    bool json = false, realtime = false, cpu_clock = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            usage();
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model_path)) return 2; }
        else if (cli_is(&a, "--drafter", NULL)) { if (!cli_str(&a, &drafter_s)) return 2; }
        else if (cli_is(&a, "--policy", NULL)) { if (!cli_str(&a, &policy_s)) return 2; }
        else if (cli_is(&a, "--agents", NULL)) { if (!cli_str(&a, &agents_s)) return 2; }
        else if (cli_is(&a, "--stall", NULL)) { if (!cli_str(&a, &stall_s)) return 2; }
        else if (cli_is(&a, "--turns", NULL)) { if (!cli_int(&a, 1, 64, &turns)) return 2; }
        else if (cli_is(&a, "--arrival", NULL)) { if (!cli_float(&a, 0, 1e6, &arrival)) return 2; }
        else if (cli_is(&a, "--gen", NULL)) { if (!cli_str(&a, &gen_s)) return 2; }
        else if (cli_is(&a, "--prompt", NULL)) { if (!cli_str(&a, &prompt_s)) return 2; }
        else if (cli_is(&a, "--result", NULL)) { if (!cli_int(&a, 1, 65536, &result_max)) return 2; }
        else if (cli_is(&a, "--budget", NULL)) { if (!cli_int(&a, 0, 4096, &budget)) return 2; }
        else if (cli_is(&a, "--lmin", NULL)) { if (!cli_int(&a, 0, 64, &lmin)) return 2; }
        else if (cli_is(&a, "--fixed-len", NULL)) { if (!cli_int(&a, 0, RP_SCHED_MAX_DRAFT, &fixed_len)) return 2; }
        else if (cli_is(&a, "--tau", NULL)) { if (!cli_float(&a, 1e-3, 1e6, &tau)) return 2; }
        else if (cli_is(&a, "--gamma", NULL)) { if (!cli_float(&a, 0, 1, &gamma)) return 2; }
        else if (cli_is(&a, "--temp", NULL)) { if (!cli_str(&a, &temp_s)) return 2; }
        else if (cli_is(&a, "--kv-limit", NULL)) { if (!cli_float(&a, 0, 1e9, &kv_limit_mb)) return 2; }
        else if (cli_is(&a, "--prefill-share", NULL)) { if (!cli_float(&a, 0, 1, &prefill_share)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_int(&a, 1, 256, &threads)) return 2; }
        else if (cli_is(&a, "-b", "--n-batch")) { if (!cli_int(&a, 1, 65536, &n_batch)) return 2; }
        else if (cli_is(&a, "-c", "--n-ctx")) { if (!cli_int(&a, 16, 1 << 20, &n_ctx)) return 2; }
        else if (cli_is(&a, "--kv-type", NULL)) { if (!cli_str(&a, &kv_name)) return 2; }
        else if (cli_is(&a, "--seed", NULL)) { if (!cli_u64(&a, &seed)) return 2; }
        else if (cli_is(&a, "--data", NULL)) { if (!cli_str(&a, &data_dir)) return 2; }
        else if (cli_is(&a, "--max-steps", NULL)) { if (!cli_int(&a, 1, 1L << 40, &max_steps)) return 2; }
        else if (cli_is(&a, "--cpu", NULL)) { if (!cli_str(&a, &v) || !cli_set_cpu(a.cmd, v)) return 2; }
        else if (cli_is(&a, "--svg", NULL)) { if (!cli_str(&a, &svg_path)) return 2; }
        else if (cli_is(&a, "--json-out", NULL)) { if (!cli_str(&a, &json_path)) return 2; }
        else if (cli_is(&a, "--html", NULL)) { if (!cli_str(&a, &html_path)) return 2; }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--realtime", NULL)) realtime = true;
        else if (cli_is(&a, "--clock", NULL)) {
            if (!cli_str(&a, &v) || (strcmp(v, "wall") && strcmp(v, "cpu"))) {
                fprintf(stderr, "reprise bench agents: --clock must be wall or cpu\n");
                return 2;
            }
            cpu_clock = !strcmp(v, "cpu");
        }
        else return cli_unknown(&a);
    }
    if (!model_path) {
        fprintf(stderr, "reprise bench agents: -m MODEL.gguf is required\n");
        return 2;
    }
    /* lists */
    rp_sched_policy pols[RP_POLICY_COUNT];
    int npol = 0;
    {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", policy_s);
        for (char *tok = strtok(tmp, ","); tok; tok = strtok(NULL, ",")) {
            int p = rp_sched_policy_parse(tok);
            if (p < 0 || npol >= RP_POLICY_COUNT) {
                fprintf(stderr, "reprise bench agents: unknown policy '%s' (batch-ar, seq-sd, batch-sd, uniform, hal, hal-yield)\n",
                        tok);
                return 2;
            }
            pols[npol++] = (rp_sched_policy)p;
        }
    }
    long agents[MAX_LIST];
    int nag = cli_int_list(a.cmd, "--agents", agents_s, agents, MAX_LIST);
    stall_range stalls[MAX_LIST];
    int nst = parse_stalls(stall_s, stalls, MAX_LIST);
    if (nag < 0 || npol == 0) return 2;
    if (nst <= 0) {
        fprintf(stderr, "reprise bench agents: --stall expects e.g. 0,0.1:1,1:10 (seconds)\n");
        return 2;
    }
    rp_trace_params tp = rp_trace_default_params();
    if (temp_s) {   /* one temperature, or reasoning,code,tool; `temp` (the largest) gates the greedy checks */
        char *end = NULL;
        const char *q = temp_s;
        int k = 0;
        for (; k < RP_AGENT_KIND_COUNT && *q; k++) {
            temps[k] = strtod(q, &end);
            if (end == q || temps[k] < 0 || temps[k] > 100) break;
            q = *end == ',' ? end + 1 : end;
        }
        if (*q || (k != 1 && k != RP_AGENT_KIND_COUNT)) {
            fprintf(stderr, "reprise %s: --temp expects T or R,C,T (numbers in [0, 100]), got '%s'\n", a.cmd, temp_s);
            return 2;
        }
        if (k == 1) temps[1] = temps[2] = temps[0];
        for (k = 0; k < RP_AGENT_KIND_COUNT; k++) temp = temps[k] > temp ? temps[k] : temp;
    }
    if ((gen_s && parse_triple(a.cmd, "--gen", gen_s, tp.gen) < 0) ||
        (prompt_s && parse_triple(a.cmd, "--prompt", prompt_s, tp.prompt_max) < 0))
        return 2;
    tp.n_turns = (int32_t)turns;
    tp.seed = seed;
    tp.arrival_rate = arrival;
    tp.result_max = (int32_t)result_max;
    char data_buf[4096];
    if (!data_dir) {
        const char *sh = getenv("RP_SHARED_DIR");
        snprintf(data_buf, sizeof data_buf, "%s/data", sh && *sh ? sh : "../shared");
        data_dir = data_buf;
    }
    tp.data_dir = data_dir;
    int kv_type = rp_type_from_name(kv_name);
    if (kv_type != RP_TYPE_F16 && kv_type != RP_TYPE_Q8_0 && kv_type != RP_TYPE_F32) {
        fprintf(stderr, "reprise bench agents: --kv-type must be f16, q8_0 or f32\n");
        return 2;
    }

    /* drafter */
    rp_sched_params sp = rp_sched_default_params();
    const char *draft_path = NULL;
    if (!strcmp(drafter_s, "ngram")) sp.drafter = RP_DRAFTER_NGRAM;
    else if (!strncmp(drafter_s, "self:", 5) && atoi(drafter_s + 5) > 0) {
        sp.drafter = RP_DRAFTER_SELF;
        sp.self_layers = atoi(drafter_s + 5);
    } else if (!strncmp(drafter_s, "model:", 6) && drafter_s[6]) {
        sp.drafter = RP_DRAFTER_MODEL;
        draft_path = drafter_s + 6;
    } else {
        fprintf(stderr, "reprise bench agents: --drafter must be ngram, self:K or model:PATH\n");
        return 2;
    }
    rp_model *m = NULL, *dm = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.n_threads = (int)threads;
    rp_status st = cli_model_load(model_path, mp, &m);
    if (st != RP_OK) return cli_fail(a.cmd, model_path, st);
    if (!m->tok) {
        rp_model_free(m);
        fprintf(stderr, "reprise bench agents: the model has no tokenizer (the trace needs one)\n");
        return 1;
    }
    if (draft_path && (st = cli_model_load(draft_path, mp, &dm)) != RP_OK) {
        rp_model_free(m);
        return cli_fail(a.cmd, draft_path, st);
    }
    sp.n_batch = (int32_t)n_batch;
    sp.n_threads = (int)threads;
    sp.kv_type = (rp_type)kv_type;
    sp.prefill_share = (float)prefill_share;
    /* at least one byte: a tiny limit demotes every waiting session */
    sp.kv_resident_limit = rp_sched_kv_limit_bytes(kv_limit_mb);
    sp.hal.budget = (int32_t)budget;
    sp.hal.l_min = (int32_t)lmin;
    sp.hal.tau = (float)tau;
    sp.hal.gamma = (float)gamma;
    sp.hal.fixed_len = (int32_t)fixed_len;
    if (sp.hal.max_len < sp.hal.fixed_len) sp.hal.max_len = sp.hal.fixed_len;
    if (sp.hal.max_len < sp.hal.budget) sp.hal.max_len = sp.hal.budget < RP_SCHED_MAX_DRAFT ? sp.hal.budget : RP_SCHED_MAX_DRAFT;
    if (realtime && cpu_clock) {
        fprintf(stderr, "reprise bench agents: --realtime uses the wall clock; drop --clock cpu\n");
        rp_model_free(dm);
        rp_model_free(m);
        return 2;
    }
    bench_cfg cfg = {.m = m, .dm = dm, .sp = sp, .gp = rp_gen_default_params(), .realtime = realtime,
                     .cpu_clock = cpu_clock, .max_steps = max_steps};
    for (int k = 0; k < RP_AGENT_KIND_COUNT; k++) cfg.temp[k] = (float)temps[k];
    cfg.gp.sampler.temp = (float)temp;
    cfg.gp.sampler.seed = seed;

    const char *mname = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    int n_runs = npol * nag * nst, nr = 0, rc = 0;
    run_result *rs = calloc((size_t)n_runs, sizeof *rs);
    rp_trace **traces = calloc((size_t)(nag * nst), sizeof *traces);
    FILE *tab = json ? stderr : stdout;
    fprintf(tab, "model %s, drafter %s, budget M=%d L_min=%d tau=%g gamma=%g, fixed L=%d, %ld turns/agent, %s\n",
            mname, drafter_s, sp.hal.budget, sp.hal.l_min, sp.hal.tau, sp.hal.gamma, sp.hal.fixed_len, turns,
            realtime ? "real time" : cpu_clock ? "virtual time (steps cost CPU time)" : "virtual time (steps cost wall time)");
    if (sp.kv_resident_limit > 0)
        fprintf(tab, "KV limit %.3f MB: waiting sessions demoted (zstd in memory) above it, restored on resume\n",
                kv_limit_mb);
    fprintf(tab, "| %2s | %-9s | %-9s | %9s | %8s | %8s | %6s | %6s | %6s | %7s | %6s | %8s | %-8s | %-8s | %7s |\n",
            "N", "stall s", "policy", "makespan", "tok/s", "compute", "steps", "blockd", "gen", "drafted", "acc%",
            "vs b-sd", "same out", "same seq", "dem/res");
    fprintf(tab, "|----|-----------|-----------|-----------|----------|----------|--------|--------|--------|---------|"
                 "--------|----------|----------|----------|---------|\n");
    /* the reference of the last trace: stall ranges change only the stall
     * times, so its tokens (and reference) repeat across them */
    uint64_t ref_hash[RP_SCHED_MAX_SESSIONS], ref_key = 0;
    int32_t ref_ctx = 0;
    for (int ia = 0; ia < nag && rc == 0; ia++) {
        for (int is = 0; is < nst && rc == 0; is++) {
            tp.n_agents = (int32_t)agents[ia];
            tp.stall_min = stalls[is].lo;
            tp.stall_max = stalls[is].hi;
            rp_trace **trp = &traces[ia * nst + is];
            if ((st = rp_trace_build(m->tok, &tp, trp)) != RP_OK) {
                rc = cli_fail(a.cmd, "trace", st);
                break;
            }
            int32_t need = 0;
            for (int32_t i = 0; i < (*trp)->n_agents; i++) {
                int32_t t = rp_trace_agent_max_tokens(&(*trp)->agents[i]);
                if (t > need) need = t;
            }
            cfg.sp.n_ctx = n_ctx > 0 ? (int32_t)n_ctx : need + 8;
            if (cfg.sp.n_ctx < need + 2) {
                fprintf(stderr, "reprise bench agents: --n-ctx %ld is below the trace's %d tokens\n", n_ctx, need + 2);
                rc = 2;
                break;
            }
            /* the one-at-a-time greedy reference every policy is checked against */
            bool have_ref = temp <= 0 && (*trp)->n_agents <= RP_SCHED_MAX_SESSIONS;
            const uint64_t key = trace_key(*trp);
            if (have_ref && (key != ref_key || cfg.sp.n_ctx != ref_ctx)) {
                ref_key = key;
                ref_ctx = cfg.sp.n_ctx;
                double tr0 = now_s();
                if ((rc = reference_pass(&cfg, *trp, ref_hash)) != 0) break;
                fprintf(stderr, "  N=%ld stall %g:%g: sequential reference %.1f s\n", agents[ia], stalls[is].lo,
                        stalls[is].hi, now_s() - tr0);
            }
            int first = nr;
            for (int ip = 0; ip < npol && rc == 0; ip++) {
                run_result *R = &rs[nr++];
                R->policy = pols[ip];
                R->n_agents = (int)agents[ia];
                R->stall = stalls[is];
                double tr0 = now_s();
                rc = run_trace(&cfg, *trp, pols[ip], R);
                R->same_seq = -1;
                if (have_ref && rc == 0) {
                    R->same_seq = 1;
                    for (int32_t i = 0; i < R->n_agents; i++) {
                        R->ag[i].same_seq = R->ag[i].hash == ref_hash[i];
                        R->same_seq &= R->ag[i].same_seq;
                    }
                }
                fprintf(stderr, "  run %d/%d: %-9s N=%d stall %g:%g  makespan %.3f s, same as sequential %s (%.1f s)\n",
                        nr, n_runs, rp_sched_policy_name(R->policy), R->n_agents, R->stall.lo, R->stall.hi,
                        R->makespan, R->same_seq < 0 ? "n/a" : R->same_seq ? "yes" : "NO", now_s() - tr0);
            }
            /* comparison against Batch-SD (when run) and output agreement */
            double ref = 0;
            for (int r = first; r < nr; r++)
                if (rs[r].policy == RP_POLICY_BATCH_SD) ref = rs[r].makespan;
            for (int r = first; r < nr; r++) {
                run_result *R = &rs[r];
                char stall_txt[32], vs[16] = "-";
                if (R->stall.hi > 0) snprintf(stall_txt, sizeof stall_txt, "%g:%g", R->stall.lo, R->stall.hi);
                else snprintf(stall_txt, sizeof stall_txt, "0");
                if (ref > 0 && R->makespan > 0) snprintf(vs, sizeof vs, "%.2fx", ref / R->makespan);
                bool same = true;
                for (int q = first; q < nr; q++) same &= rs[q].hash_all == R->hash_all;
                char dr[32];
                snprintf(dr, sizeof dr, "%llu/%llu", (unsigned long long)R->demotions, (unsigned long long)R->restores);
                fprintf(tab, "| %2d | %-9s | %-9s | %8.3fs | %8.1f | %7.3fs | %6lld | %6lld | %6lld | %7lld | %5.1f%% | %8s | %-8s | %-8s | %7s |\n",
                        R->n_agents, stall_txt, rp_sched_policy_name(R->policy), R->makespan, R->tok_s, R->compute,
                        (long long)R->steps, (long long)R->blocked, (long long)R->gen, (long long)R->drafted,
                        R->drafted ? 100.0 * (double)R->accepted / (double)R->drafted : 0.0, vs,
                        temp > 0 ? "n/a" : same ? "yes" : "NO",
                        R->same_seq < 0 ? "n/a" : R->same_seq ? "yes" : "NO", dr);
            }
            fflush(tab);
        }
    }
    if (rc == 0) {
        /* per-agent detail of the last group, the most recent comparison */
        fprintf(tab, "\nper agent (mean draft L / accepted k per decode step), last configuration:\n");
        int first = nr - npol < 0 ? 0 : nr - npol;
        for (int r = first; r < nr; r++) {
            run_result *R = &rs[r];
            fprintf(tab, "  %-9s", rp_sched_policy_name(R->policy));
            for (int i = 0; i < R->n_agents; i++) {
                const agent_run *ar = &R->ag[i];
                double vs = ar->verify_steps ? (double)ar->verify_steps : 1;
                fprintf(tab, "  %d:%s L %.1f k %.2f", i, rp_agent_kind_name(R->trace->agents[i].kind),
                        ar->draft_sum / vs, ar->accepted / vs);
            }
            fprintf(tab, "\n");
        }
    }
    if (json && nr > 0) print_json(stdout, mname, drafter_s, rs, nr);
    if (json_path && nr > 0) {
        FILE *f = fopen(json_path, "w");
        if (f) print_json(f, mname, drafter_s, rs, nr);
        if (!f || fclose(f) != 0) {
            fprintf(stderr, "reprise bench agents: cannot write '%s'\n", json_path);
            rc = 1;
        }
    }
    if (html_path && nr > 0 && write_html(html_path, mname, drafter_s, rs, nr, npol, temp) != 0) {
        fprintf(stderr, "reprise bench agents: cannot write '%s'\n", html_path);
        rc = 1;
    }
    if (svg_path && nr > 0) {
        FILE *f = fopen(svg_path, "w");
        if (!f) {
            fprintf(stderr, "reprise bench agents: cannot write '%s': %s\n", svg_path, strerror(errno));
            rc = 1;
        } else {
            rp_timeline **tls = malloc(sizeof *tls * (size_t)nr);
            int nt = 0;
            for (int r = 0; r < nr; r++)
                if (rs[r].tl) tls[nt++] = rs[r].tl;
            if (rp_timeline_write_svg(tls, nt, f) != RP_OK) rc = 1;
            if (fclose(f) != 0) rc = 1;
            free(tls);
            if (rc == 0) fprintf(tab, "timeline: %s\n", svg_path);
        }
    }
    for (int r = 0; r < nr; r++) {
        rp_timeline_free(rs[r].tl);
        free(rs[r].ag);
    }
    for (int i = 0; i < nag * nst; i++) rp_trace_free(traces[i]);
    free(traces);
    free(rs);
    rp_model_free(dm);
    rp_model_free(m);
    return rc;
}
