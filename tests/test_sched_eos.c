/* test_sched_eos.c — the scheduler's per-turn ignore_eos (rp_gen_params): end-of-generation tokens are never
 * sampled, for each policy and drafter (drafts verified against the ban), greedy and sampled; sessions of one
 * scheduler with and without it side by side; a logits processor that allows only the end still ends the turn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "sched/sched.h"
#include "testutil.h"

typedef struct fixture {
    rp_model *m, *dm;
    rp_token prompt[64];
    int32_t n_prompt;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    const char *path = rp_test_shared("models/stories260K.gguf"), *dpath = rp_test_shared("models/stories260K-q8_0.gguf");
    if (!path || !dpath) return 0;
    assert_int_equal(rp_model_load(path, rp_model_default_params(), &f->m), RP_OK);
    assert_int_equal(rp_model_load(dpath, rp_model_default_params(), &f->dm), RP_OK);
    const char *text = "Once upon a time there was a little dog";
    assert_int_equal(rp_tokenize(f->m, text, strlen(text), true, false, f->prompt, 64, &f->n_prompt), RP_OK);
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rp_model_free(f->m);
    rp_model_free(f->dm);
    free(f);
    return 0;
}

typedef struct seen {
    int32_t n, n_eog;
    const rp_model *m;
} seen;

static bool count(void *user, rp_sched_id id, rp_token t) {
    (void)id;
    seen *s = user;
    s->n++;
    s->n_eog += rp_token_is_eog(s->m, t);
    return true;
}

/* A processor that allows only the end-of-generation tokens (a grammar at its end). */
static void only_end(void *user, const rp_token *hist, int32_t n_hist, float *logits, int32_t n_vocab) {
    const rp_model *m = user;
    (void)hist;
    (void)n_hist;
    for (int32_t i = 0; i < n_vocab; i++)
        if (!rp_token_is_eog(m, i)) logits[i] = -INFINITY;
}

static void run(fixture *f, rp_sched_policy pol, rp_drafter_kind dr, float temp) {
    rp_sched_params p = rp_sched_default_params();
    p.max_sessions = 3;
    p.n_ctx = 256;
    p.n_threads = 1;
    p.policy = pol;
    p.drafter = pol == RP_POLICY_BATCH_AR ? RP_DRAFTER_NONE : dr;
    rp_sched *s = NULL;
    assert_int_equal(rp_sched_create(f->m, dr == RP_DRAFTER_MODEL ? f->dm : NULL, p, &s), RP_OK);
    /* the end-of-generation token made the most likely by far: without ignore_eos the turn ends at once */
    const rp_logit_bias bias = {rp_token_eos(f->m), 100.0f};
    rp_sched_id ids[3];
    seen sn[3];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(rp_sched_session_create(s, &ids[k]), RP_OK);
        sn[k] = (seen){.m = f->m};
        rp_gen_params g = rp_gen_default_params();
        g.sampler.temp = temp;
        g.sampler.seed = 7 + (uint64_t)k;
        g.sampler.bias = &bias;
        g.sampler.n_bias = 1;
        g.max_tokens = 40;
        g.ignore_eos = k >= 1;
        g.on_token = count;
        g.user = &sn[k];
        if (k == 2) {   /* ignore_eos, but the processor leaves nothing but the end */
            g.on_logits = only_end;
            g.logits_user = f->m;
        }
        assert_int_equal(rp_sched_submit(s, ids[k], f->prompt, f->n_prompt, &g), RP_OK);
    }
    rp_sched_session_info si[3];
    for (int steps = 0; steps < 400; steps++) {
        bool busy = false;
        assert_int_equal(rp_sched_step(s, NULL), RP_OK);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(rp_sched_session_info_get(s, ids[k], &si[k]), RP_OK);
            busy |= si[k].state == RP_SESS_PREFILL || si[k].state == RP_SESS_DECODE;
        }
        if (!busy) break;
    }
    print_message("  %s / %s, temp %.1f: plain %d tokens (%s), ignore_eos %d (%s, %d eog), only-end %d (%s); "
                  "drafted %llu\n", rp_sched_policy_name(pol), rp_drafter_kind_name(p.drafter), temp, sn[0].n,
                  rp_finish_reason_name(si[0].finish), sn[1].n, rp_finish_reason_name(si[1].finish), sn[1].n_eog, sn[2].n,
                  rp_finish_reason_name(si[2].finish), (unsigned long long)si[1].drafted);
    assert_int_equal(si[0].finish, RP_FINISH_EOG);
    assert_int_equal(sn[0].n, 1);
    assert_int_equal(si[1].finish, RP_FINISH_LENGTH);
    assert_int_equal(sn[1].n, 40);
    assert_int_equal(sn[1].n_eog, 0);
    assert_int_equal(si[2].finish, RP_FINISH_EOG);
    assert_int_equal(sn[2].n, 1);
    rp_sched_free(s);
}

static void test_ignore_eos(void **state) {
    fixture *f = *state;
    if (!f->m) RP_REQUIRE_SHARED(NULL, "models/stories260K.gguf (+ stories260K-q8_0.gguf)");
    for (int t = 0; t < 2; t++) {
        const float temp = t ? 0.9f : 0.0f;
        run(f, RP_POLICY_BATCH_AR, RP_DRAFTER_NONE, temp);
        run(f, RP_POLICY_HAL_YIELD, RP_DRAFTER_NGRAM, temp);
        run(f, RP_POLICY_BATCH_SD, RP_DRAFTER_MODEL, temp);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test_setup_teardown(test_ignore_eos, setup, teardown)};
    return rp_test_main(tests, NULL, NULL);
}
