/* agents.c — two agents in one batch with the scheduler; one stops for a tool call, gets the tool's result and
 * goes on, while the other keeps decoding.
 *
 *   agents MODEL.gguf
 */
#include <reprise.h>
#include <stdio.h>
#include <string.h>

static int tokens_of(const rp_model *m, const char *text, rp_token *t, int32_t cap, int32_t *n, bool bos) {
    return rp_tokenize(m, text, strlen(text), bos, true, t, cap, n) == RP_OK ? 0 : -1;
}

static void print_agent(rp_agents *a, const rp_model *m, rp_agent_id id, const char *name, int32_t from) {
    rp_token t[1024];
    int32_t n = 0;
    char text[4096];
    size_t len = 0;
    rp_agent_info info;
    if (rp_agents_tokens(a, id, from, t, 1024, &n) != RP_OK || rp_detokenize(m, t, n, false, text, sizeof text, &len) != RP_OK ||
        rp_agents_info(a, id, &info) != RP_OK) {
        fprintf(stderr, "agents: %s: %s\n", name, rp_last_error());
        return;
    }
    printf("%s (%s, %d tokens this turn):%s\n", name,
           info.state == RP_AGENT_WAITING ? "waiting for a tool" : info.state == RP_AGENT_IDLE ? "done" : "running",
           info.generated, text);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: agents MODEL.gguf\n");
        return 2;
    }
    rp_model *m = NULL;
    rp_agents *a = NULL;
    int rc = 1;
    rp_agents_params ap = rp_agents_default_params();
    ap.n_ctx = 512;
    if (rp_model_load(argv[1], rp_model_default_params(), &m) != RP_OK || rp_agents_create(m, &ap, &a) != RP_OK) {
        fprintf(stderr, "agents: setup: %s\n", rp_last_error());
        goto out;
    }
    rp_agent_id writer = 0, helper = 0;
    rp_token t[256];
    int32_t n = 0, from_w = 0, from_h = 0;
    rp_turn_opts o = rp_turn_default_opts();
    o.sampling.temp = 0;
    o.max_tokens = 24;
    if (rp_agents_add(a, &writer) != RP_OK || rp_agents_add(a, &helper) != RP_OK) goto fail;
    /* the writer tells a story; the helper's turn ends waiting, as an agent does when it calls a tool */
    if (tokens_of(m, "Once upon a time, there was a little dog", t, 256, &n, true) || (from_w = n,
        rp_agents_submit(a, writer, t, n, &o) != RP_OK))
        goto fail;
    rp_turn_opts wait = o;
    wait.max_tokens = 8;
    wait.wait_after = true;   /* as if its 8 tokens were a tool call: it waits for the result */
    if (tokens_of(m, "Lily asked her mom for the weather.", t, 256, &n, true) || (from_h = n,
        rp_agents_submit(a, helper, t, n, &wait) != RP_OK))
        goto fail;
    if (rp_agents_run(a) != RP_OK) goto fail;
    print_agent(a, m, writer, "writer", from_w);
    print_agent(a, m, helper, "helper", from_h);
    /* the tool's answer comes back: the helper continues from its KV, only these tokens are computed */
    rp_agent_info hi;
    if (rp_agents_info(a, helper, &hi) != RP_OK) goto fail;
    from_h = hi.n_tokens;
    if (tokens_of(m, " The weather was sunny.", t, 256, &n, false) || rp_agents_resume(a, helper, t, n, &o) != RP_OK)
        goto fail;
    if (rp_agents_run(a) != RP_OK) goto fail;
    print_agent(a, m, helper, "helper, after the tool", from_h);
    rp_agents_stats as;
    rp_agents_stats_get(a, &as);
    printf("steps %llu, rows %llu, tokens generated %llu, drafted %llu, accepted %llu\n",
           (unsigned long long)as.steps, (unsigned long long)as.rows, (unsigned long long)as.generated,
           (unsigned long long)as.drafted, (unsigned long long)as.accepted);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "agents: %s\n", rp_last_error());
out:
    rp_agents_free(a);
    rp_model_free(m);
    return rc;
}
