/* threadpool.h — one persistent worker pool: per-worker ranges with lock-free work stealing. */
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
/* The upper bound given at creation (what per-thread scratch must be sized for). */
int rp_pool_n_threads(const rp_pool *p);

/* Workers that take part in the next loops: clamped to [1, rp_pool_n_threads].
 * The others sleep. Call between loops (from the thread that runs them). */
void rp_pool_set_active(rp_pool *p, int n);
int rp_pool_active(const rp_pool *p);

/* Runs fn over [0, n). Each taking part worker owns a contiguous share of the
 * items and claims `chunk` items at a time from its front; a worker whose
 * share is done steals the back half of the fullest other share (lock-free),
 * so uneven items, uneven cores and a descheduled worker balance: a worker
 * that has not started yet (or is preempted) loses its unclaimed items to the
 * others and never holds the loop up, only a claim it already runs does.
 * Returns when every item is done. Not reentrant: one loop at a time per pool
 * (the body must not call back into the same pool). Allocates nothing. */
void rp_pool_parallel_for(rp_pool *p, int64_t n, int64_t chunk, rp_pool_fn fn, void *arg);

/* As rp_pool_parallel_for, but claims from a worker's own share take
 * max(min_chunk, a quarter of what is left of it): long contiguous claims
 * while much is left (one sequential stream per worker, which the hardware
 * prefetcher follows across claims), short ones at the end, so workers finish
 * together. Same contract otherwise. */
void rp_pool_parallel_for_guided(rp_pool *p, int64_t n, int64_t min_chunk, rp_pool_fn fn, void *arg);

/* Pauses a waiting worker spins before it yields its core (then a few
 * sched_yield rounds, then it sleeps on a condition variable). Default 20000,
 * or RP_POOL_SPIN=N from the environment at creation; 0 yields at once (for
 * emulators and oversubscribed machines, where a spinner takes a core another
 * thread needs). Any thread, any time; the next waits use it. */
void rp_pool_set_spin(rp_pool *p, int pauses);
int rp_pool_spin(const rp_pool *p);

/* For tests: worker `tid` (>= 1) sleeps `usec` microseconds before it looks at
 * its next loop (a worker descheduled by another process, simulated). */
void rp_pool_debug_stall(rp_pool *p, int tid, unsigned usec);

#endif /* RP_CORE_THREADPOOL_H */
