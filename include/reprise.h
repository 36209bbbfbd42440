/* reprise.h — public API of the Reprise on-device LLM serving engine. */
#ifndef REPRISE_H
#define REPRISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RP_API marks every function of this API. libreprise.so is built with hidden visibility by default, so these
 * are the only symbols it exports (tests/library/abi_symbols.sh checks that nothing else is, and that each
 * RP_API function is). In the static archive and in programs that include this header it changes nothing. A
 * build may predefine RP_API. */
#ifndef RP_API
#if defined(__GNUC__) || defined(__clang__)
#define RP_API __attribute__((visibility("default")))
#else
#define RP_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Status codes. Every fallible call returns one; RP_OK is 0. A human-readable
 * detail (naming the field, byte offset, or argument that was wrong) is kept
 * per thread and read with rp_last_error() right after the failing call.
 * ------------------------------------------------------------------------- */
typedef enum rp_status {
    RP_OK = 0,
    RP_ERR_INVALID_ARG,   /* caller passed something out of contract */
    RP_ERR_IO,            /* open/read/write/mmap failed */
    RP_ERR_FORMAT,        /* file or payload is malformed / corrupt */
    RP_ERR_UNSUPPORTED,   /* well-formed but not something we implement */
    RP_ERR_NOMEM,         /* allocation failed or a size would overflow */
    RP_ERR_NOT_FOUND,     /* key / tensor / token not present */
    RP_ERR_RANGE,         /* index, position or count out of range */
    RP_ERR_FULL,          /* output buffer or cache too small; retry bigger */
    RP_ERR_INTERNAL,      /* a bug: an invariant did not hold */
    RP_ERR_CANCELLED,     /* the caller asked to stop */
    RP_STATUS_COUNT
} rp_status;

/* Static name of a status code ("invalid argument", ...). Never NULL. */
RP_API const char *rp_strerror(rp_status st);

/* Detail message of the last error set on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
RP_API const char *rp_last_error(void);

/* Progress of a long call (model load, synth): `done` of `total` units so
 * far, called on the caller's thread every few percent. Returning false asks
 * the call to stop: it then fails with RP_ERR_CANCELLED and leaves nothing
 * behind (no half-written file, no half-loaded model). */
typedef bool (*rp_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Library version string, e.g. "0.1.0". */
RP_API const char *rp_version(void);

#ifdef __cplusplus
}
#endif
#endif /* REPRISE_H */
