/* threadpool.c — persistent pthread pool: generation-counted dispatch, atomic chunk claiming. */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/error.h"

/* Workers spin on the generation counter for a short while before sleeping on
 * the condition variable: decode issues hundreds of small loops per token, and
 * a futex wake-up per loop costs more than the loop itself. */
#define RP_POOL_SPIN 20000

struct rp_pool {
    int n_threads;
    pthread_t *threads;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;

    /* current job (written by the caller before bumping `generation`) */
    rp_pool_fn fn;
    void *arg;
    int64_t n, chunk;
    bool guided;   /* chunk is the minimum; claims shrink with what is left */

    _Alignas(64) atomic_int_fast64_t next;   /* next unclaimed item */
    _Alignas(64) atomic_uint generation;     /* bumped once per job */
    _Alignas(64) atomic_int active;          /* workers still inside the job */
    atomic_bool stop;
};

typedef struct { rp_pool *p; int tid; } worker_arg;

static void run_chunks(rp_pool *p, int tid) {
    const int64_t n = p->n, chunk = p->chunk;
    if (p->guided) {
        /* guided self-scheduling: each claim takes 1/(2T) of what is left, at
         * least `chunk`, so claims are long while much is left (long
         * sequential streams) and short at the end (threads finish together) */
        const int64_t div = 2 * (int64_t)p->n_threads;
        int64_t b = atomic_load_explicit(&p->next, memory_order_relaxed);
        for (;;) {
            if (b >= n) break;
            int64_t c = (n - b) / div;
            if (c < chunk) c = chunk;
            const int64_t e = b + c < n ? b + c : n;
            if (!atomic_compare_exchange_weak_explicit(&p->next, &b, e, memory_order_relaxed, memory_order_relaxed))
                continue;   /* b now holds the current value */
            p->fn(p->arg, b, e, tid);
            b = atomic_load_explicit(&p->next, memory_order_relaxed);
        }
        return;
    }
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
        if (b >= n) break;
        int64_t e = b + chunk < n ? b + chunk : n;
        p->fn(p->arg, b, e, tid);
    }
}

/* A spin-wait hint: lets the sibling hardware thread run and saves power (x86 PAUSE, Arm YIELD); nothing
 * elsewhere. */
static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static void *worker_main(void *vp) {
    worker_arg wa = *(worker_arg *)vp;
    free(vp);
    rp_pool *p = wa.p;
    unsigned seen = 0;   /* generation is 0 at creation; a job posted before this thread runs is still seen */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop) && spins < RP_POOL_SPIN) {
            spins++;
            spin_pause();
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        run_chunks(p, wa.tid);
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

rp_status rp_pool_create(int n_threads, rp_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return rp_errorf(RP_ERR_INVALID_ARG, "threadpool: n_threads %d not in [1, 256]", n_threads);
    rp_pool *p = calloc(1, sizeof *p);
    if (!p) return rp_errorf(RP_ERR_NOMEM, "threadpool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) { free(p); return rp_errorf(RP_ERR_NOMEM, "threadpool: out of memory"); }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) { wa->p = p; wa->tid = i; }
            if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                p->n_threads = i;   /* free() joins the ones already started */
                rp_pool_free(p);
                return rp_errorf(RP_ERR_NOMEM, "threadpool: cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return RP_OK;
}

void rp_pool_free(rp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p);
}

int rp_pool_n_threads(const rp_pool *p) { return p->n_threads; }

static void parallel_for(rp_pool *p, int64_t n, int64_t chunk, bool guided, rp_pool_fn fn, void *arg) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    if (p == NULL || p->n_threads == 1 || n <= chunk) {
        fn(arg, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    p->guided = guided;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->active, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p, 0);

    /* wait for the workers: spin first, then sleep */
    int spins = 0;
    while (atomic_load_explicit(&p->active, memory_order_acquire) > 0 && spins < RP_POOL_SPIN) {
        spins++;
        spin_pause();
    }
    if (atomic_load(&p->active) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void rp_pool_parallel_for(rp_pool *p, int64_t n, int64_t chunk, rp_pool_fn fn, void *arg) {
    parallel_for(p, n, chunk, false, fn, arg);
}

void rp_pool_parallel_for_guided(rp_pool *p, int64_t n, int64_t min_chunk, rp_pool_fn fn, void *arg) {
    parallel_for(p, n, min_chunk, true, fn, arg);
}
