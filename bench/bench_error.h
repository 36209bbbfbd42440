/* bench_error.h — how bench/ pieces report an error: the message on stderr, the status returned (the library's
 * rp_last_error is the library's own; a front end does not set it). */
#ifndef RP_BENCH_ERROR_H
#define RP_BENCH_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include "reprise.h"

/* Prints "reprise bench: <message>" on stderr and returns st. */
static inline rp_status bench_errorf(rp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline rp_status bench_errorf(rp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("reprise bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return st;
}

#endif
