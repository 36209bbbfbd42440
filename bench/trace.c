/* TODO(issue 15): moves to the public API with bench_agents (includes internals: the tokenizer of the
 * scheduler's sessions, rp_errorf). */
/* trace.c — building multi-agent workload traces from MuSiQue, MBPP and ToolBench: prompts, turn lengths, stalls, arrivals. */
#include "trace.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

const char *rp_agent_kind_name(rp_agent_kind k) {
    static const char *n[] = {"reasoning", "code", "tool"};
    return (unsigned)k < RP_AGENT_KIND_COUNT ? n[k] : "?";
}

rp_trace_params rp_trace_default_params(void) {
    rp_trace_params p = {
        .n_agents = 3, .n_turns = 3, .seed = 1, .stall_min = 0, .stall_max = 0, .arrival_rate = 0,
        .mix = {1, 2, 2}, .prompt_max = {384, 160, 256}, .gen = {48, 64, 40}, .result_max = 48, .data_dir = NULL,
    };
    return p;
}

void rp_trace_free(rp_trace *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_agents; i++) {
        rp_trace_agent *a = &t->agents[i];
        free(a->prompt);
        for (int32_t k = 0; a->turns && k < a->n_turns; k++) free(a->turns[k].result);
        free(a->turns);
    }
    free(t->agents);
    free(t);
}

int32_t rp_trace_agent_max_tokens(const rp_trace_agent *a) {
    int32_t n = a->n_prompt;
    for (int32_t k = 0; k < a->n_turns; k++) n += a->turns[k].gen_tokens + a->turns[k].n_result;
    return n;
}

/* ---- deterministic randomness ---- */

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double unif(uint64_t *x) { return (double)(splitmix(x) >> 11) * 0x1.0p-53; }

/* ---- text helpers ---- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *t) {
    if (!t || b->oom) return;
    size_t l = strlen(t);
    if (b->n + l + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 1024);
        while (nc < b->n + l + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, t, l);
    b->n += l;
    b->s[b->n] = '\0';
}

/* Tokenizes text (malloc'd ids in *out). */
static rp_status tokenize(const rp_tokenizer *tok, const char *text, bool bos, rp_token **out, int32_t *n_out) {
    size_t len = strlen(text), n = 0;
    rp_tokenize_opts o = {.add_bos = bos, .parse_special = false};
    size_t cap = len + 8;
    rp_token *ids = malloc(sizeof *ids * cap);
    if (!ids) return rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
    rp_status st = rp_tokenizer_encode(tok, text, len, o, ids, cap, &n);
    if (st == RP_ERR_FULL) {
        rp_token *b = realloc(ids, sizeof *ids * n);
        if (!b) {
            free(ids);
            return rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
        }
        ids = b;
        cap = n;
        st = rp_tokenizer_encode(tok, text, len, o, ids, cap, &n);
    }
    if (st != RP_OK) {
        free(ids);
        return st;
    }
    *out = ids;
    *n_out = (int32_t)n;
    return RP_OK;
}

/* prompt = head (with BOS, truncated) + tail (kept whole when it fits), at
 * most max tokens: the question / instruction at the end survives clipping. */
static rp_status build_prompt(const rp_tokenizer *tok, const char *head, const char *tail, int32_t max,
                              rp_token **out, int32_t *n_out) {
    rp_token *h = NULL, *t = NULL;
    int32_t nh = 0, nt = 0;
    RP_TRY(tokenize(tok, head, true, &h, &nh));
    rp_status st = tokenize(tok, tail, false, &t, &nt);
    if (st != RP_OK) {
        free(h);
        return st;
    }
    if (nt > max / 2) nt = max / 2;
    if (nh > max - nt) nh = max - nt;
    rp_token *p = malloc(sizeof *p * (size_t)(nh + nt + 1));
    if (!p) st = rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
    else {
        memcpy(p, h, sizeof *p * (size_t)nh);
        memcpy(p + nh, t, sizeof *p * (size_t)nt);
        *out = p;
        *n_out = nh + nt;
    }
    free(h);
    free(t);
    return st;
}

static rp_status clip_tokens(const rp_tokenizer *tok, const char *text, int32_t max, rp_token **out, int32_t *n) {
    RP_TRY(tokenize(tok, text, false, out, n));
    if (*n > max) *n = max;
    return RP_OK;
}

static rp_status load_json(const char *dir, const char *rel, json_t **out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    json_error_t e;
    *out = json_load_file(path, 0, &e);
    if (!*out) return rp_errorf(RP_ERR_NOT_FOUND, "trace: cannot load %s: %s", path, e.text);
    return RP_OK;
}

/* ---- the three agent kinds ---- */

/* Reasoning: MuSiQue question with its retrieved passages; tool results are
 * further passages ("search" results). */
static rp_status agent_reasoning(const rp_tokenizer *tok, json_t *musique, uint64_t *rng, const rp_trace_params *p,
                                 rp_trace_agent *a) {
    size_t n = json_array_size(musique);
    if (n == 0) return rp_errorf(RP_ERR_FORMAT, "trace: musique has no items");
    size_t k = (size_t)(splitmix(rng) % n);
    json_t *it = json_array_get(musique, k);
    json_t *ctxs = json_object_get(it, "ctxs");
    const char *q = json_string_value(json_object_get(it, "question"));
    if (!q || !json_is_array(ctxs)) return rp_errorf(RP_ERR_FORMAT, "trace: musique item %zu malformed", k);
    snprintf(a->source, sizeof a->source, "musique[%zu]", k);
    sbuf head = {0}, tail = {0};
    sb_add(&head, "Read the passages, then answer the question. Think step by step and search when needed.\n\n");
    size_t nc = json_array_size(ctxs);
    for (size_t i = 0; i + 2 < nc; i++) {
        sb_add(&head, "Passage: ");
        sb_add(&head, json_string_value(json_object_get(json_array_get(ctxs, i), "text")));
        sb_add(&head, "\n");
    }
    sb_add(&tail, "\nQuestion: ");
    sb_add(&tail, q);
    sb_add(&tail, "\nReasoning:");
    rp_status st = head.oom || tail.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                                        : build_prompt(tok, head.s, tail.s, p->prompt_max[0], &a->prompt, &a->n_prompt);
    free(head.s);
    free(tail.s);
    for (int32_t t = 0; st == RP_OK && t + 1 < a->n_turns; t++) {
        const char *txt = json_string_value(json_object_get(json_array_get(ctxs, (nc - 1 - (size_t)t % 2)), "text"));
        sbuf r = {0};
        sb_add(&r, "\nSearch result: ");
        sb_add(&r, txt ? txt : "(nothing found)");
        sb_add(&r, "\nReasoning:");
        st = r.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                   : clip_tokens(tok, r.s, p->result_max, &a->turns[t].result, &a->turns[t].n_result);
        free(r.s);
    }
    return st;
}

/* Code: MBPP task with its tests; tool results are test runs. */
static rp_status agent_code(const rp_tokenizer *tok, json_t *mbpp, uint64_t *rng, const rp_trace_params *p,
                            rp_trace_agent *a) {
    size_t n = json_array_size(mbpp);
    if (n == 0) return rp_errorf(RP_ERR_FORMAT, "trace: mbpp has no items");
    size_t k = (size_t)(splitmix(rng) % n);
    json_t *it = json_array_get(mbpp, k);
    const char *task = json_string_value(json_object_get(it, "prompt"));
    json_t *tests = json_object_get(it, "test_list");
    if (!task || !json_is_array(tests)) return rp_errorf(RP_ERR_FORMAT, "trace: mbpp item %zu malformed", k);
    snprintf(a->source, sizeof a->source, "mbpp task %lld", (long long)json_integer_value(json_object_get(it, "task_id")));
    sbuf head = {0}, tail = {0};
    sb_add(&head, "You are a Python coding agent. Write the function, then run the tests with the run_tests tool.\n");
    sb_add(&head, "# Task: ");
    sb_add(&head, task);
    sb_add(&head, "\n# Tests:\n");
    for (size_t i = 0; i < json_array_size(tests); i++) {
        sb_add(&head, json_string_value(json_array_get(tests, i)));
        sb_add(&head, "\n");
    }
    sb_add(&tail, "# Solution:\ndef ");
    rp_status st = head.oom || tail.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                                        : build_prompt(tok, head.s, tail.s, p->prompt_max[1], &a->prompt, &a->n_prompt);
    free(head.s);
    free(tail.s);
    size_t nt = json_array_size(tests);
    for (int32_t t = 0; st == RP_OK && t + 1 < a->n_turns; t++) {
        sbuf r = {0};
        sb_add(&r, "\n# run_tests output:\n");
        sb_add(&r, nt ? json_string_value(json_array_get(tests, (size_t)t % nt)) : "assert True");
        sb_add(&r, t % 2 ? "  # passed\n# Fixed solution:\ndef " : "  # AssertionError\n# Fixed solution:\ndef ");
        st = r.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                   : clip_tokens(tok, r.s, p->result_max, &a->turns[t].result, &a->turns[t].n_result);
        free(r.s);
    }
    return st;
}

/* Tool use: a ToolBench DFS trajectory — system prompt, function schemas and
 * the user query; tool results are the recorded function responses. */
static rp_status agent_tool(const rp_tokenizer *tok, const char *dir, uint64_t *rng, const rp_trace_params *p,
                            rp_trace_agent *a) {
    /* the answer files, in a fixed (sorted) order */
    char names[64][128];
    int nn = 0;
    for (int g = 1; g <= 3; g++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/toolbench/answer/G%d_answer", dir, g);
        DIR *d = opendir(sub);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) && nn < 64) {
            size_t l = strlen(e->d_name);
            if (l > 5 && !strcmp(e->d_name + l - 5, ".json") && l < 100)
                snprintf(names[nn++], sizeof names[0], "G%d_answer/%.100s", g, e->d_name);
        }
        closedir(d);
    }
    if (nn == 0) return rp_errorf(RP_ERR_NOT_FOUND, "trace: no ToolBench answers under %s/toolbench/answer", dir);
    qsort(names, (size_t)nn, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    int k = (int)(splitmix(rng) % (uint64_t)nn);
    char rel[256];
    snprintf(rel, sizeof rel, "toolbench/answer/%s", names[k]);
    json_t *root = NULL;
    RP_TRY(load_json(dir, rel, &root));
    snprintf(a->source, sizeof a->source, "toolbench %.80s", names[k]);
    json_t *ag = json_object_get(root, "answer_generation");
    json_t *tm = json_object_get(ag, "train_messages");
    json_t *msgs = json_array_get(tm, json_array_size(tm) ? json_array_size(tm) - 1 : 0);
    json_t *funcs = json_object_get(ag, "function");
    rp_status st = RP_OK;
    if (!json_is_array(msgs)) st = rp_errorf(RP_ERR_FORMAT, "trace: %s has no train_messages", rel);
    sbuf head = {0}, tail = {0};
    const char *fresults[16];
    int nf = 0;
    for (size_t i = 0; st == RP_OK && i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !content) continue;
        if (!strcmp(role, "system")) {
            sb_add(&head, content);
            sb_add(&head, "\nTools: ");
            char *fj = funcs ? json_dumps(funcs, JSON_COMPACT) : NULL;
            sb_add(&head, fj ? fj : "[]");
            free(fj);
            sb_add(&head, "\n");
        } else if (!strcmp(role, "user")) {
            sb_add(&tail, "User: ");
            sb_add(&tail, content);
            sb_add(&tail, "\nAssistant: Thought:");
        } else if (!strcmp(role, "function") && nf < 16) {
            fresults[nf++] = content;
        }
    }
    if (st == RP_OK)
        st = head.oom || tail.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                                  : build_prompt(tok, head.s ? head.s : "", tail.s ? tail.s : "", p->prompt_max[2],
                                                 &a->prompt, &a->n_prompt);
    free(head.s);
    free(tail.s);
    for (int32_t t = 0; st == RP_OK && t + 1 < a->n_turns; t++) {
        sbuf r = {0};
        sb_add(&r, "\nFunction response: ");
        sb_add(&r, nf ? fresults[t % nf] : "{\"error\": \"\", \"response\": \"ok\"}");
        sb_add(&r, "\nAssistant: Thought:");
        st = r.oom ? rp_errorf(RP_ERR_NOMEM, "trace: out of memory")
                   : clip_tokens(tok, r.s, p->result_max, &a->turns[t].result, &a->turns[t].n_result);
        free(r.s);
    }
    json_decref(root);
    return st;
}

rp_status rp_trace_build(const rp_tokenizer *tok, const rp_trace_params *p, rp_trace **out) {
    *out = NULL;
    if (!tok || !p->data_dir) return rp_errorf(RP_ERR_INVALID_ARG, "trace: needs a tokenizer and a data directory");
    int32_t mix_total = 0;
    for (int k = 0; k < RP_AGENT_KIND_COUNT; k++) {
        if (p->mix[k] < 0 || p->prompt_max[k] < 4 || p->gen[k] < 1)
            return rp_errorf(RP_ERR_INVALID_ARG, "trace: bad mix / prompt cap / turn length for %s",
                             rp_agent_kind_name((rp_agent_kind)k));
        mix_total += p->mix[k];
    }
    if (p->n_agents < 1 || p->n_agents > 256 || p->n_turns < 1 || p->n_turns > 64 || mix_total < 1 ||
        p->result_max < 1 || p->stall_min < 0 || p->stall_max < p->stall_min)
        return rp_errorf(RP_ERR_INVALID_ARG, "trace: bad params (agents %d, turns %d, stalls [%g, %g])", p->n_agents,
                         p->n_turns, p->stall_min, p->stall_max);
    json_t *musique = NULL, *mbpp = NULL;
    rp_trace *t = calloc(1, sizeof *t);
    rp_status st = t ? RP_OK : rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
    if (st == RP_OK && !(t->agents = calloc((size_t)p->n_agents, sizeof *t->agents)))
        st = rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
    if (st == RP_OK && p->mix[RP_AGENT_REASONING] > 0) st = load_json(p->data_dir, "cacheblend/musique_s.json", &musique);
    if (st == RP_OK && p->mix[RP_AGENT_CODE] > 0) st = load_json(p->data_dir, "mbpp/sanitized-mbpp.json", &mbpp);
    /* separate streams: the same seed gives the same prompts and turn
     * lengths whatever the stall range or arrival rate, so runs that differ
     * only in stalls do the same token work */
    uint64_t rng = p->seed * 0x2545F4914F6CDD1DULL + 17;
    uint64_t rng_stall = p->seed * 0x9E3779B97F4A7C15ULL + 5, rng_arr = p->seed * 0xD1B54A32D192ED03ULL + 3;
    double clock = 0;
    for (int32_t i = 0; st == RP_OK && i < p->n_agents; i++) {
        t->n_agents = i + 1;
        rp_trace_agent *a = &t->agents[i];
        /* the mix as a repeating pattern: 1:2:2 -> R C T C T, so the first
         * agents already cover every kind */
        int32_t slot = i % mix_total, k = 0;
        int32_t left[RP_AGENT_KIND_COUNT] = {p->mix[0], p->mix[1], p->mix[2]};
        for (int32_t s2 = 0;; s2++) {
            int32_t kk = s2 % RP_AGENT_KIND_COUNT;
            if (left[kk] == 0) continue;
            left[kk]--;
            if (slot-- == 0) {
                k = kk;
                break;
            }
        }
        a->kind = (rp_agent_kind)k;
        if (p->arrival_rate > 0 && i > 0) clock += -log(1.0 - unif(&rng_arr)) / p->arrival_rate;
        a->arrival_s = clock;
        a->n_turns = p->n_turns;
        if (!(a->turns = calloc((size_t)a->n_turns, sizeof *a->turns))) {
            st = rp_errorf(RP_ERR_NOMEM, "trace: out of memory");
            break;
        }
        for (int32_t tn = 0; tn < a->n_turns; tn++) {
            double jit = 0.75 + 0.5 * unif(&rng);
            a->turns[tn].gen_tokens = (int32_t)lround(p->gen[k] * jit);
            if (a->turns[tn].gen_tokens < 1) a->turns[tn].gen_tokens = 1;
            bool last = tn + 1 == a->n_turns;
            double u = unif(&rng_stall);
            if (!last && p->stall_max > 0) {
                /* log-uniform on [lo, hi]; a range starting at 0 starts at hi / 1000 */
                double lo = p->stall_min > 0 ? p->stall_min : p->stall_max * 1e-3;
                a->turns[tn].stall_s = exp(log(lo) + u * (log(p->stall_max) - log(lo)));
            }
        }
        switch (a->kind) {
        case RP_AGENT_REASONING: st = agent_reasoning(tok, musique, &rng, p, a); break;
        case RP_AGENT_CODE: st = agent_code(tok, mbpp, &rng, p, a); break;
        default: st = agent_tool(tok, p->data_dir, &rng, p, a); break;
        }
    }
    json_decref(musique);
    json_decref(mbpp);
    if (st != RP_OK) {
        rp_trace_free(t);
        return st;
    }
    *out = t;
    return RP_OK;
}
