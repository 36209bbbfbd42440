/* error.c — status names and the per-thread error detail buffer. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char tl_msg[512];

static const char *const k_names[RP_STATUS_COUNT] = {
    [RP_OK] = "ok",
    [RP_ERR_INVALID_ARG] = "invalid argument",
    [RP_ERR_IO] = "i/o error",
    [RP_ERR_FORMAT] = "malformed input",
    [RP_ERR_UNSUPPORTED] = "unsupported",
    [RP_ERR_NOMEM] = "out of memory",
    [RP_ERR_NOT_FOUND] = "not found",
    [RP_ERR_RANGE] = "out of range",
    [RP_ERR_FULL] = "buffer or cache full",
    [RP_ERR_INTERNAL] = "internal error",
    [RP_ERR_CANCELLED] = "cancelled",
};

const char *rp_strerror(rp_status st) {
    if ((unsigned)st >= RP_STATUS_COUNT) return "unknown status";
    return k_names[st];
}

const char *rp_last_error(void) { return tl_msg; }

void rp_error_clear(void) { tl_msg[0] = '\0'; }

rp_status rp_errorf(rp_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    return code;
}

#ifndef RP_VERSION_STRING
#error "RP_VERSION_STRING comes from CMakeLists.txt (the project VERSION)"
#endif
const char *rp_version(void) { return RP_VERSION_STRING; }
