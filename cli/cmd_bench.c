/* cmd_bench.c — `reprise bench <what> ...`: forwards to the reprise-bench program (bench/), which holds the
 * benchmarks: the one beside this binary, else the first on PATH. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define BENCH_NAME "reprise-bench"

/* DIR/reprise-bench for the directory this program runs from (/proc/self/exe), into buf; false when unknown. */
static bool beside_self(char *buf, size_t cap) {
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return false;
    *slash = '\0';
    const int w = snprintf(buf, cap, "%s/%s", self, BENCH_NAME);
    return w > 0 && (size_t)w < cap;
}

int cmd_bench(int argc, char **argv) {
    /* argv[0] is "bench"; the program gets the same words after its own name */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "reprise bench: out of memory\n");
        return 1;
    }
    args[0] = (char *)BENCH_NAME;
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    fflush(stdout);
    fflush(stderr);
    char path[PATH_MAX + 32];
    if (beside_self(path, sizeof path) && access(path, X_OK) == 0) {
        execv(path, args);
        fprintf(stderr, "reprise bench: cannot run %s: %s\n", path, strerror(errno));
        free(args);
        return 127;
    }
    execvp(BENCH_NAME, args);   /* returns only on failure */
    const int err = errno;
    free(args);
    if (err == ENOENT)
        fprintf(stderr, "reprise bench: the benchmark program '%s' is not installed: it was not found beside this "
                        "binary (%s) nor on PATH (build it with the project, or run `cmake --install`)\n",
                BENCH_NAME, beside_self(path, sizeof path) ? path : "?");
    else
        fprintf(stderr, "reprise bench: cannot run '%s' from PATH: %s\n", BENCH_NAME, strerror(err));
    return 127;
}
