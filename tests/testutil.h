/* testutil.h — helpers shared by the cmocka tests: locating ../shared, temp dirs, file reading. */
#ifndef RP_TESTUTIL_H
#define RP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

/* Path under the shared data dir ($RP_SHARED_DIR, else ../shared relative to
 * the source tree). Returns a static buffer (valid for the next 7 calls), or
 * NULL if the file does not exist (the caller then skips with a message). */
const char *rp_test_shared(const char *rel);
/* The shared data dir itself ($RP_SHARED_DIR, else ../shared). */
const char *rp_test_shared_dir(void);

/* Skips the current cmocka test with a clear message ("SKIP: " + printf
 * arguments), counted for rp_test_main. Every skip goes through it. */
#define RP_SKIP(...)                      \
    do {                                  \
        print_message("SKIP: " __VA_ARGS__); \
        rp_test_count_skip();             \
        skip();                           \
    } while (0)
void rp_test_count_skip(void);

/* Skips the current cmocka test with a clear message when `path` is NULL. */
#define RP_REQUIRE_SHARED(path, rel)                                                   \
    do {                                                                               \
        if (!(path)) RP_SKIP("%s/%s not found (set RP_SHARED_DIR)\n", rp_test_shared_dir(), rel); \
    } while (0)

/* The public-API tests' prologue: declares `m`, stories260K loaded with rp_model_load (reprise.h), or skips the
 * test when ../shared lacks it. */
#define RP_OPEN_STORIES(m)                                               \
    const char *m##_path = rp_test_shared("models/stories260K.gguf");    \
    RP_REQUIRE_SHARED(m##_path, "models/stories260K.gguf");              \
    rp_model *m = NULL;                                                  \
    assert_int_equal(rp_model_load(m##_path, rp_model_default_params(), &m), RP_OK)

/* Every test program's main: runs the group, then prints "P passed, F failed,
 * S skipped" (the line the shell tests print too; scripts/test.sh sums them)
 * and returns 1 if any test failed, 0 if none, or RP_TEST_SKIPPED when nothing failed
 * and every test skipped (ctest's SKIP_RETURN_CODE: the program shows as
 * skipped, not passed). */
#define RP_TEST_SKIPPED 77
#define rp_test_main(tests, setup, teardown)                                          \
    (rp_test_filter(tests, (int)(sizeof(tests) / sizeof((tests)[0]))),               \
     rp_test_finish(cmocka_run_group_tests(tests, setup, teardown), (int)(sizeof(tests) / sizeof((tests)[0]))))
int rp_test_finish(int n_failed, int n_tests);
/* RP_TEST_SKIP=PATTERN (a glob, e.g. "*distribution*"): tests whose name matches are left out and counted as
 * skipped, said on stdout (emulated runs leave out the statistical tests that take minutes under qemu). */
void rp_test_filter(const struct CMUnitTest *tests, int n);

/* A fresh private temp directory for this test process (created once). */
const char *rp_test_tmpdir(void);

/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *rp_test_read_file(const char *path, size_t *len);

/* xorshift64*: deterministic, so every failure reproduces from its seed. */
typedef struct { uint64_t s; } rp_test_rng;
static inline uint64_t rp_test_rng_next(rp_test_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
/* uniform in [0, 1) with 24 bits */
static inline float rp_test_rng_uniform(rp_test_rng *r) { return (float)((rp_test_rng_next(r) >> 40) * (1.0 / 16777216.0)); }
/* standard normal (Box-Muller) */
static inline float rp_test_rng_gauss(rp_test_rng *r) {
    const float u = rp_test_rng_uniform(r) + 1e-7f, v = rp_test_rng_uniform(r);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

#endif
