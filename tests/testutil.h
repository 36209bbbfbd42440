/* testutil.h — helpers shared by the cmocka tests: locating ../shared, temp dirs, file reading. */
#ifndef RP_TESTUTIL_H
#define RP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Path under the shared data dir ($RP_SHARED_DIR, else ../shared relative to
 * the source tree). Returns a static buffer (valid for the next 7 calls), or
 * NULL if the file does not exist (the caller then skips with a message). */
const char *rp_test_shared(const char *rel);

/* Skips the current cmocka test with a clear message when `path` is NULL. */
#define RP_REQUIRE_SHARED(path, rel)                                              \
    do {                                                                          \
        if (!(path)) {                                                            \
            print_message("SKIP: ../shared/%s not found (set RP_SHARED_DIR)\n", rel); \
            skip();                                                               \
        }                                                                         \
    } while (0)

/* A fresh private temp directory for this test process (created once). */
const char *rp_test_tmpdir(void);

/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *rp_test_read_file(const char *path, size_t *len);

#endif
