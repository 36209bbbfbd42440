/* test_sampler.c — sampler semantics (greedy, top-k/p, min-p, penalty, bias, presence/frequency, seed). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "model/sampler.h"

#define V 1000

static void fill_logits(float *l, unsigned seed) {
    srand(seed);
    for (int i = 0; i < V; i++) l[i] = (float)rand() / RAND_MAX * 10.0f - 5.0f;
}

/* Defaults with every truncation off (top-k 0, top-p 1, min-p 0) at temperature `temp`. */
static rp_sampler_params untruncated(float temp) {
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    return p;
}

static int argmax(const float *l) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static void test_greedy_and_ties(void **state) {
    (void)state;
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 0;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float l[V];
    fill_logits(l, 1);
    assert_int_equal(rp_sampler_sample(s, l), argmax(l));
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    l[17] = l[400] = 3.0f;   /* tie: lowest id wins */
    assert_int_equal(rp_sampler_sample(s, l), 17);
    rp_sampler_free(s);
}

/* Empirical frequencies over 20k draws match softmax(l / T) restricted to the
 * top-k, renormalized (chi-square style bound per token). */
static void test_top_k_distribution(void **state) {
    (void)state;
    rp_sampler_params p = untruncated(0.7f);
    p.top_k = 5;
    p.seed = 99;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float l[V];
    fill_logits(l, 2);
    float probs[V];
    rp_sampler_dist(s, l, probs);
    int nz = 0;
    double tot = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] > 0) nz++;
        tot += probs[i];
    }
    assert_int_equal(nz, 5);
    assert_float_equal(tot, 1.0, 1e-5);
    /* expected from first principles */
    int idx[V];
    for (int i = 0; i < V; i++) idx[i] = i;
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < V; b++)
            if (l[idx[b]] > l[idx[a]]) { int t = idx[a]; idx[a] = idx[b]; idx[b] = t; }
    double e[5], z = 0;
    for (int a = 0; a < 5; a++) z += (e[a] = exp((l[idx[a]] - l[idx[0]]) / 0.7));
    for (int a = 0; a < 5; a++) assert_float_equal(probs[idx[a]], e[a] / z, 1e-5);
    int counts[V] = {0};
    const int N = 20000;
    for (int k = 0; k < N; k++) counts[rp_sampler_sample(s, l)]++;
    for (int a = 0; a < 5; a++) {
        double pexp = e[a] / z, sd = sqrt(N * pexp * (1 - pexp));
        assert_true(fabs(counts[idx[a]] - N * pexp) < 5 * sd + 1);
    }
    rp_sampler_free(s);
}

static void test_top_p_min_p(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -20.0f;
    l[3] = log(0.5f); l[7] = log(0.3f); l[9] = log(0.15f); l[11] = log(0.05f);
    rp_sampler_params p = untruncated(1.0f);
    p.top_p = 0.75f;   /* 0.5 + 0.3 reaches it: keeps two */
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    float probs[V];
    rp_sampler_dist(s, l, probs);
    assert_float_equal(probs[3], 0.5 / 0.8, 1e-4);
    assert_float_equal(probs[7], 0.3 / 0.8, 1e-4);
    assert_float_equal(probs[9], 0, 0);
    rp_sampler_free(s);
    p.top_p = 1.0f;
    p.min_p = 0.2f;    /* keeps p >= 0.1: tokens 3, 7, 9 */
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_dist(s, l, probs);
    assert_true(probs[9] > 0 && probs[11] == 0);
    assert_float_equal(probs[3] + probs[7] + probs[9], 1.0, 1e-5);
    rp_sampler_free(s);
}

static void test_penalty_and_bias(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 0;
    l[5] = 2.0f;
    l[6] = 1.5f;
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 2.0f;   /* 2.0 / 2 = 1.0 < 1.5 */
    p.repeat_last_n = 4;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    assert_int_equal(rp_sampler_sample(s, l), 5);
    rp_sampler_accept(s, 5);
    assert_int_equal(rp_sampler_sample(s, l), 6);
    /* the window forgets after repeat_last_n other tokens */
    for (int k = 0; k < 4; k++) rp_sampler_accept(s, 100 + k);
    assert_int_equal(rp_sampler_sample(s, l), 5);
    rp_sampler_free(s);
    rp_logit_bias bias[2] = {{5, -INFINITY}, {900, 10.0f}};
    p.repeat_penalty = 1.0f;
    p.bias = bias;
    p.n_bias = 2;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    assert_int_equal(rp_sampler_sample(s, l), 900);
    rp_sampler_free(s);
    rp_logit_bias badb = {V + 3, 1.0f};
    p.bias = &badb;
    p.n_bias = 1;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_ERR_RANGE);
}


/* OpenAI presence / frequency penalties over the repeat window: logit -=
 * count * frequency + presence, for each distinct token in it. */
static void test_presence_frequency(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -10;
    l[0] = 2.0f;
    l[1] = 1.9f;
    l[2] = 0.5f;
    rp_sampler_params p = untruncated(1.0f);
    p.repeat_last_n = 8;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.1f;
    rp_sampler *s = NULL;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 0);
    rp_sampler_accept(s, 1);
    rp_sampler_accept(s, 0);
    static float pr[V];
    rp_sampler_dist(s, l, pr);
    /* token 0: 2.0 - 2 * 0.5 - 0.1 = 0.9; token 1: 1.9 - 0.5 - 0.1 = 1.3; token 2: 0.5 */
    assert_true(fabs(log(pr[1] / pr[0]) - 0.4) < 1e-4);
    assert_true(fabs(log(pr[0] / pr[2]) - 0.4) < 1e-4);
    rp_sampler_free(s);
    /* greedy: the penalties move the argmax; negative values encourage repeats */
    p.temp = 0;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 0);
    rp_sampler_accept(s, 0);
    assert_int_equal(rp_sampler_sample(s, l), 1);
    rp_sampler_free(s);
    p.frequency_penalty = -0.5f;
    p.presence_penalty = 0;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_OK);
    rp_sampler_accept(s, 2);
    assert_int_equal(rp_sampler_sample(s, l), 0);   /* 0.5 + 0.5 = 1.0 < 2.0 */
    rp_sampler_accept(s, 2);
    rp_sampler_accept(s, 2);
    rp_sampler_accept(s, 2);
    assert_int_equal(rp_sampler_sample(s, l), 2);   /* 0.5 + 4 * 0.5 = 2.5 */
    /* the window forgets */
    for (int k = 0; k < 8; k++) rp_sampler_accept(s, 100 + k);
    assert_int_equal(rp_sampler_sample(s, l), 0);
    rp_sampler_free(s);
    p.presence_penalty = NAN;
    assert_int_equal(rp_sampler_create(p, V, &s), RP_ERR_INVALID_ARG);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    float l[V];
    fill_logits(l, 3);
    rp_sampler_params p = untruncated(1.5f);
    p.seed = 7;
    rp_sampler *a = NULL, *b = NULL;
    assert_int_equal(rp_sampler_create(p, V, &a), RP_OK);
    assert_int_equal(rp_sampler_create(p, V, &b), RP_OK);
    int same = 0, diff_seed_same = 0;
    rp_token seq[64];
    for (int k = 0; k < 64; k++) {
        seq[k] = rp_sampler_sample(a, l);
        same += seq[k] == rp_sampler_sample(b, l);
    }
    assert_int_equal(same, 64);
    rp_sampler_reset(a);
    for (int k = 0; k < 64; k++) assert_int_equal(rp_sampler_sample(a, l), seq[k]);
    rp_sampler_free(b);
    p.seed = 8;
    assert_int_equal(rp_sampler_create(p, V, &b), RP_OK);
    for (int k = 0; k < 64; k++) diff_seed_same += seq[k] == rp_sampler_sample(b, l);
    assert_true(diff_seed_same < 32);
    rp_sampler_free(a);
    rp_sampler_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_ties),
        cmocka_unit_test(test_top_k_distribution),
        cmocka_unit_test(test_top_p_min_p),
        cmocka_unit_test(test_penalty_and_bias),
        cmocka_unit_test(test_presence_frequency),
        cmocka_unit_test(test_seed_reproducible),
    };
    return rp_test_main(tests, NULL, NULL);
}
