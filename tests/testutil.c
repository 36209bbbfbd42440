/* testutil.c — helpers shared by the cmocka tests. */
#include "testutil.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *rp_test_shared_dir(void) {
    const char *dir = getenv("RP_SHARED_DIR");
    return dir && *dir ? dir : "../shared";
}

const char *rp_test_shared(const char *rel) {
    /* a ring of buffers so a test can hold a few paths at once */
    static char ring[8][4096];
    static int next;
    char *buf = ring[next++ % 8];
    snprintf(buf, sizeof ring[0], "%s/%s", rp_test_shared_dir(), rel);
    struct stat st;
    if (stat(buf, &st) != 0) return NULL;
    return buf;
}

const char *rp_test_tmpdir(void) {
    static char dir[4096];
    if (dir[0]) return dir;
    const char *base = getenv("RP_TEST_TMP");
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0700);
    snprintf(dir, sizeof dir, "%s/rp-test-%d", base, (int)getpid());
    mkdir(dir, 0700);
    return dir;
}

char *rp_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (!b) { fclose(f); return NULL; }
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = '\0';
    if (len) *len = got;
    return b;
}

static int g_skipped;

void rp_test_count_skip(void) { g_skipped++; }

void rp_test_filter(const struct CMUnitTest *tests, int n) {
    const char *pat = getenv("RP_TEST_SKIP");
    if (!pat || !*pat) return;
    cmocka_set_skip_filter(pat);
    for (int i = 0; i < n; i++)
        if (tests[i].name && fnmatch(pat, tests[i].name, 0) == 0) {
            printf("SKIP: %s (RP_TEST_SKIP=%s)\n", tests[i].name, pat);
            g_skipped++;
        }
}

int rp_test_finish(int n_failed, int n_tests) {
    const int passed = n_tests - n_failed - g_skipped;
    printf("%d passed, %d failed, %d skipped\n", passed > 0 ? passed : 0, n_failed, g_skipped);
    if (n_failed == 0 && g_skipped > 0 && g_skipped >= n_tests) return RP_TEST_SKIPPED;
    return n_failed ? 1 : 0;   /* not the count: 77 failures would read as skipped, 256 as success */
}
