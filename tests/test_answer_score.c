/* test_answer_score.c — SQuAD answer scoring used by `bench reuse --answer`: normalisation, F1, exact match. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "testutil.h"
#include "answer_score.h"

static void check(const char *pred, const char *gold, double want_f1, bool want_exact) {
    bool ex = !want_exact;
    double f1 = cli_answer_f1(pred, gold, &ex);
    if (fabs(f1 - want_f1) > 1e-9 || ex != want_exact)
        fail_msg("'%s' vs '%s': F1 %.6f exact %d, want %.6f %d", pred, gold, f1, ex, want_f1, want_exact);
}

static void test_normalisation(void **state) {
    (void)state;
    check("The Eiffel Tower", "eiffel tower", 1.0, true);      /* case and articles */
    check("U.S.", "US", 1.0, true);                            /* punctuation deleted, not a word break */
    check("  an   apple!\n", "apple", 1.0, true);              /* white space and trailing punctuation */
    check("Zürich", "zürich", 1.0, true);                      /* UTF-8 bytes kept (ASCII lower-casing only) */
    check("1,000 km", "1000 km", 1.0, true);
}

static void test_f1(void **state) {
    (void)state;
    check("Paris, France", "Paris", 2 * 0.5 * 1.0 / 1.5, false);    /* precision 1/2, recall 1 */
    check("Paris", "Paris France", 2 * 1.0 * 0.5 / 1.5, false);     /* precision 1, recall 1/2 */
    check("b b", "b", 2 * 0.5 * 1.0 / 1.5, false);                  /* a repeated word counts once per gold word */
    check("b b", "b b c", 2 * 1.0 * (2.0 / 3) / (1 + 2.0 / 3), false);
    check("tower eiffel", "eiffel tower", 1.0, false);              /* bag-of-words F1, order only in exact */
    check("London", "Paris", 0.0, false);
}

static void test_empty(void **state) {
    (void)state;
    check("", "", 1.0, true);
    check("the", "", 1.0, true);    /* only an article: empty after normalisation */
    check("", "Paris", 0.0, false);
    check("Paris", "", 0.0, false);
    bool ex = false;
    assert_true(fabs(cli_answer_f1(NULL, "x", &ex)) < 1e-12);
    assert_true(cli_answer_f1("x", "x", NULL) == 1.0);   /* exact may be NULL */
}

static void test_bounds(void **state) {
    (void)state;
    /* words past 31 bytes are cut, more than 256 words ignored: long input never overflows */
    static char longw[4096], many[8192];
    memset(longw, 'x', sizeof longw - 1);
    check(longw, longw, 1.0, true);
    size_t k = 0;
    for (int i = 0; i < 1000 && k + 3 < sizeof many; i++) { many[k++] = 'w'; many[k++] = (char)('0' + i % 10); many[k++] = ' '; }
    many[k] = 0;
    check(many, many, 1.0, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalisation),
        cmocka_unit_test(test_f1),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_bounds),
    };
    return rp_test_main(tests, NULL, NULL);
}
