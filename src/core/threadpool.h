/* threadpool.h — one persistent worker pool with lock-free chunked parallel-for. */
#ifndef RP_CORE_THREADPOOL_H
#define RP_CORE_THREADPOOL_H

#include <stdint.h>

#include "reprise.h"

typedef struct rp_pool rp_pool;

/* Body of a parallel loop: processes items [begin, end). `tid` is the worker
 * index in [0, n_threads) (0 is the calling thread), so bodies can use
 * per-thread scratch buffers allocated up front. */
typedef void (*rp_pool_fn)(void *arg, int64_t begin, int64_t end, int tid);

/* Creates a pool of n_threads total workers (the caller counts as one, so
 * n_threads - 1 OS threads are started). n_threads in [1, 256]. */
rp_status rp_pool_create(int n_threads, rp_pool **out);
void rp_pool_free(rp_pool *p);
int rp_pool_n_threads(const rp_pool *p);

/* Runs fn over [0, n) split into chunks of `chunk` items claimed through an
 * atomic counter, so uneven items and uneven cores balance. Returns when all
 * items are done. Not reentrant: one parallel_for at a time per pool (the
 * body must not call back into the same pool). Allocates nothing. */
void rp_pool_parallel_for(rp_pool *p, int64_t n, int64_t chunk, rp_pool_fn fn, void *arg);

/* As rp_pool_parallel_for, but each claim takes max(min_chunk, remaining /
 * (2 * n_threads)) items (guided self-scheduling, claimed with a CAS loop):
 * long claims first, short ones at the end, so threads of uneven speed
 * finish together without every claim being short. Same contract otherwise. */
void rp_pool_parallel_for_guided(rp_pool *p, int64_t n, int64_t min_chunk, rp_pool_fn fn, void *arg);

#endif /* RP_CORE_THREADPOOL_H */
