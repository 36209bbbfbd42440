/* error.h — thread-local error detail and status helpers shared by every subsystem. */
#ifndef RP_CORE_ERROR_H
#define RP_CORE_ERROR_H

#include "reprise.h"

/* Records a printf-style detail for rp_last_error() and returns `code`, so a
 * failure site reads: `return rp_errorf(RP_ERR_FORMAT, "gguf: ... at offset %llu", off);`
 * The message is truncated to 512 bytes. */
rp_status rp_errorf(rp_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the thread's detail message. */
void rp_error_clear(void);

/* Propagate a non-OK status unchanged. */
#define RP_TRY(expr)                         \
    do {                                     \
        rp_status rp_try_st_ = (expr);       \
        if (rp_try_st_ != RP_OK) return rp_try_st_; \
    } while (0)

#endif /* RP_CORE_ERROR_H */
