/* smoke.c — the smallest program on the installed library, built by tests/library/install.sh with nothing but
 * `pkg-config --cflags --libs reprise` (shared, and --static) and through find_package(reprise). argv[1] is the
 * version pkg-config reports, which rp_version() must match. Prints "reprise VERSION: not found". */
#include <reprise.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *v = rp_version();
    if (argc > 1 && strcmp(v, argv[1]) != 0) {
        fprintf(stderr, "rp_version() is %s, pkg-config says %s\n", v, argv[1]);
        return 1;
    }
    if (strcmp(rp_strerror(RP_OK), "ok") != 0 || strcmp(rp_strerror(RP_STATUS_COUNT), "unknown status") != 0 ||
        rp_last_error()[0] != '\0') {
        fprintf(stderr, "rp_strerror / rp_last_error answer wrong\n");
        return 1;
    }
    printf("reprise %s: %s\n", v, rp_strerror(RP_ERR_NOT_FOUND));
    return 0;
}
