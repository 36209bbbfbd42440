/* TODO(issue 15): moves to the public API with bench_agents (includes internals: the tokenizer). */
/* trace.h — synthetic multi-agent workload traces (EdgeAgent §4.1): reasoning / code / tool agents from shared datasets. */
#ifndef RP_SCHED_TRACE_H
#define RP_SCHED_TRACE_H

#include <stdint.h>

#include "reprise.h"
#include "tokenizer/tokenizer.h"

/* An agent is one conversation: a prompt, then n_turns turns. Every turn but
 * the last ends in a tool call — a real one when the model emits it in its
 * chat format, otherwise (tiny / random-weight models never do) the trace
 * defines it: the turn generates up to gen_tokens and is then treated as a
 * tool call. The tool "runs" for stall_s seconds and its result's tokens are
 * appended before the next turn. */
typedef enum rp_agent_kind {
    RP_AGENT_REASONING = 0,   /* long context, hard to draft (MuSiQue passages + question) */
    RP_AGENT_CODE = 1,        /* structured output (MBPP task + tests) */
    RP_AGENT_TOOL = 2,        /* tool use (ToolBench API list + query, tool responses) */
    RP_AGENT_KIND_COUNT
} rp_agent_kind;

const char *rp_agent_kind_name(rp_agent_kind k);

typedef struct rp_trace_turn {
    int32_t gen_tokens;   /* tokens the turn generates before its (simulated) tool call */
    double stall_s;       /* tool latency after the turn (0 for the last turn) */
    rp_token *result;     /* tool result appended before the next turn (NULL for the last) */
    int32_t n_result;
} rp_trace_turn;

typedef struct rp_trace_agent {
    rp_agent_kind kind;
    double arrival_s;
    rp_token *prompt;
    int32_t n_prompt;
    int32_t n_turns;
    rp_trace_turn *turns;
    char source[96];      /* dataset item the prompt came from */
} rp_trace_agent;

typedef struct rp_trace {
    int32_t n_agents;
    rp_trace_agent *agents;
} rp_trace;

typedef struct rp_trace_params {
    int32_t n_agents;
    int32_t n_turns;             /* turns per agent (default 3) */
    uint64_t seed;
    double stall_min, stall_max; /* log-uniform tool stalls in seconds; max <= 0: none */
    double arrival_rate;         /* Poisson arrivals per second; <= 0: everyone at t = 0 */
    int32_t mix[RP_AGENT_KIND_COUNT];          /* reasoning : code : tool (default 1:2:2) */
    int32_t prompt_max[RP_AGENT_KIND_COUNT];   /* prompt token caps (default 384, 160, 256) */
    int32_t gen[RP_AGENT_KIND_COUNT];          /* mean tokens per turn (default 48, 64, 40), +-25% */
    int32_t result_max;          /* tool result token cap (default 48) */
    const char *data_dir;        /* .../shared/data */
} rp_trace_params;

rp_trace_params rp_trace_default_params(void);

/* Builds a trace: agent i's kind follows the mix as a repeating pattern (1:2:2
 * gives R C T C T ...), prompts and tool results come from the datasets under
 * data_dir (cacheblend/musique_s.json, mbpp/sanitized-mbpp.json,
 * toolbench/...), picked by seed. Deterministic for a given seed. A missing
 * dataset is RP_ERR_NOT_FOUND naming the file. */
rp_status rp_trace_build(const rp_tokenizer *tok, const rp_trace_params *p, rp_trace **out);
void rp_trace_free(rp_trace *t);

/* Tokens the agent's history reaches at most (prompt + every turn + results). */
int32_t rp_trace_agent_max_tokens(const rp_trace_agent *a);

#endif /* RP_SCHED_TRACE_H */
