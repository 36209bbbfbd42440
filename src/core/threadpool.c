/* threadpool.c — persistent pthread pool: per-worker shares claimed and stolen with CAS, no barrier on late workers. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"

/* How it works. A loop over [0, n) gives each taking-part worker a contiguous
 * share, held in its slot as one 64-bit word (begin << 32 | end, relative to
 * `base`). A worker claims from the front of its own share with a CAS; when
 * its share is empty it steals a piece from the back of the fullest other
 * share, again with a CAS, and runs it. `left` counts items not yet done; the
 * caller returns when it reaches 0. Nothing waits for a worker to arrive: one
 * that is asleep, preempted or slow to wake has its share taken by the others.
 *
 * Why it is safe without a barrier between loops: the caller writes a loop's
 * fn / arg / base / left before it stores the slots (release), and rewrites
 * them only after `left` reached 0. A claim is a successful CAS on a slot
 * (acquire), so a worker reads fn / arg after its claim and sees the loop its
 * items belong to, which cannot end before the claim is done. A stale worker
 * (one that read a slot in an earlier loop) either fails its CAS, or the slot
 * holds that very value again in the new loop and the items it takes are
 * items of the new loop — a valid claim either way. */

/* Waits are spin, then yield, then sleep, each phase bounded.
 * Waiting workers spin this many pauses on the loop counter by default:
 * decode runs hundreds of small loops per token, and a futex wake-up per loop
 * costs more than the loop. rp_pool_set_spin (and RP_POOL_SPIN=N in the
 * environment, read at creation) changes it: 0 suits machines where a spinner
 * takes a core another thread needs (emulators, oversubscribed machines). */
#define RP_POOL_SPIN 20000
/* Then this many sched_yield() rounds: a runnable thread of another process
 * gets the core, but the worker comes back without a futex wake-up when the
 * core was free anyway. */
#define RP_POOL_YIELDS 16
/* The caller spins a fifth of the workers' spin for the last claims in flight
 * before it yields and sleeps: sleeping leaves its core idle, so the OS can
 * move a preempted worker there. */
#define RP_POOL_WAIT_DIV 5
/* Items per loop at most (32-bit share bounds); longer loops run in pieces. */
#define RP_POOL_MAX_ITEMS 0xffffffffu

typedef struct {
    _Alignas(64) atomic_uint_fast64_t range;   /* begin << 32 | end */
} pool_slot;

struct rp_pool {
    int n_threads;
    pthread_t *threads;
    pool_slot *slots;            /* n_threads */
    atomic_uint *stall_us;       /* n_threads: rp_pool_debug_stall */

    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;

    /* the current loop (see the comment at the top for who writes what when) */
    rp_pool_fn fn;
    void *arg;
    int64_t base;
    atomic_uint chunk;
    atomic_bool guided;

    _Alignas(64) atomic_int_fast64_t left;   /* items of the loop not yet done */
    _Alignas(64) atomic_uint generation;     /* bumped once per loop: wakes the workers */
    _Alignas(64) atomic_int sleepers;        /* workers asleep on cv_work */
    atomic_int spin;                         /* pauses before a wait yields (rp_pool_set_spin) */
    atomic_bool caller_waiting;              /* the caller sleeps on cv_done */
    atomic_int active;                       /* workers taking part (rp_pool_set_active) */
    atomic_bool stop;
};

typedef struct { rp_pool *p; int tid; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t pack(uint32_t b, uint32_t e) { return (uint64_t)b << 32 | e; }
static inline uint32_t r_begin(uint64_t r) { return (uint32_t)(r >> 32); }
static inline uint32_t r_end(uint64_t r) { return (uint32_t)r; }

/* Items a claim takes out of `rem` remaining in a share. */
static inline uint32_t claim_size(uint32_t rem, uint32_t chunk, bool guided) {
    uint32_t c = chunk;
    if (guided && rem / 4 > c) c = (rem / 4 + chunk - 1) / chunk * chunk;
    return c < rem ? c : rem;
}

static void run_claim(rp_pool *p, uint32_t b, uint32_t e, int tid) {
    /* fn / arg / base belong to the loop this claim came from (see the top) */
    p->fn(p->arg, p->base + b, p->base + e, tid);
    const int64_t c = (int64_t)(e - b);
    if (atomic_fetch_sub_explicit(&p->left, c, memory_order_acq_rel) == c &&
        atomic_load(&p->caller_waiting)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Claims from the front of the worker's own share. */
static bool claim_own(rp_pool *p, int tid, uint32_t *ob, uint32_t *oe) {
    atomic_uint_fast64_t *s = &p->slots[tid].range;
    uint64_t r = atomic_load_explicit(s, memory_order_acquire);
    for (;;) {
        const uint32_t b = r_begin(r), e = r_end(r);
        if (b >= e) return false;
        const uint32_t c = claim_size(e - b, atomic_load_explicit(&p->chunk, memory_order_relaxed),
                                      atomic_load_explicit(&p->guided, memory_order_relaxed));
        if (atomic_compare_exchange_weak_explicit(s, &r, pack(b + c, e), memory_order_acq_rel, memory_order_acquire)) {
            *ob = b;
            *oe = b + c;
            return true;
        }
    }
}

/* Steals a piece from the back of the fullest other share. */
static bool steal(rp_pool *p, int tid, uint32_t *ob, uint32_t *oe) {
    for (;;) {
        int victim = -1;
        uint32_t most = 0;
        uint64_t vr = 0;
        for (int i = 0; i < p->n_threads; i++) {
            if (i == tid) continue;
            const uint64_t r = atomic_load_explicit(&p->slots[i].range, memory_order_acquire);
            const uint32_t b = r_begin(r), e = r_end(r);
            if (e > b && e - b > most) { most = e - b; victim = i; vr = r; }
        }
        if (victim < 0) return false;
        const uint32_t b = r_begin(vr), e = r_end(vr);
        const uint32_t c = claim_size(e - b, atomic_load_explicit(&p->chunk, memory_order_relaxed),
                                      atomic_load_explicit(&p->guided, memory_order_relaxed));
        if (atomic_compare_exchange_strong_explicit(&p->slots[victim].range, &vr, pack(b, e - c),
                                                    memory_order_acq_rel, memory_order_acquire)) {
            *ob = e - c;
            *oe = e;
            return true;
        }
        /* the share changed under us: look again */
    }
}

static void work(rp_pool *p, int tid) {
    uint32_t b, e;
    for (;;) {
        if (claim_own(p, tid, &b, &e) || steal(p, tid, &b, &e)) run_claim(p, b, e, tid);
        else return;
    }
}

static void *worker_main(void *vp) {
    worker_arg wa = *(worker_arg *)vp;
    free(vp);
    rp_pool *p = wa.p;
    unsigned seen = 0;   /* generation is 0 at creation; a loop posted before this thread runs is still seen */
    for (;;) {
        unsigned g;
        const int spin = atomic_load_explicit(&p->spin, memory_order_relaxed);
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_relaxed) && spins < spin + RP_POOL_YIELDS) {
            if (spins++ < spin) cpu_relax();
            else sched_yield();
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        const unsigned us = atomic_exchange(&p->stall_us[wa.tid], 0);
        if (us) {
            struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
            nanosleep(&ts, NULL);
        }
        if (wa.tid >= atomic_load_explicit(&p->active, memory_order_relaxed)) continue;
        work(p, wa.tid);
    }
    return NULL;
}

rp_status rp_pool_create(int n_threads, rp_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return rp_errorf(RP_ERR_INVALID_ARG, "threadpool: n_threads %d not in [1, 256]", n_threads);
    rp_pool *p = calloc(1, sizeof *p);
    if (!p) return rp_errorf(RP_ERR_NOMEM, "threadpool: out of memory");
    p->slots = aligned_alloc(64, (size_t)n_threads * sizeof *p->slots);
    p->stall_us = calloc((size_t)n_threads, sizeof *p->stall_us);
    if (!p->slots || !p->stall_us) {
        free(p->slots);
        free(p->stall_us);
        free(p);
        return rp_errorf(RP_ERR_NOMEM, "threadpool: out of memory");
    }
    for (int i = 0; i < n_threads; i++) {
        atomic_init(&p->slots[i].range, 0);
        atomic_init(&p->stall_us[i], 0);
    }
    p->n_threads = 1;   /* threads started so far (free() joins those) */
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->chunk, 1);
    atomic_init(&p->guided, false);
    atomic_init(&p->left, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->sleepers, 0);
    int spin = RP_POOL_SPIN;
    const char *env = getenv("RP_POOL_SPIN");
    if (env && *env) {
        char *end;
        const long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 100000000L) spin = (int)v;
        else fprintf(stderr, "reprise: RP_POOL_SPIN='%s' is not a count in [0, 100000000]; using %d\n", env, spin);
    }
    atomic_init(&p->spin, spin);
    atomic_init(&p->caller_waiting, false);
    atomic_init(&p->active, n_threads);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) { rp_pool_free(p); return rp_errorf(RP_ERR_NOMEM, "threadpool: out of memory"); }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) { wa->p = p; wa->tid = i; }
            if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                rp_pool_free(p);
                return rp_errorf(RP_ERR_NOMEM, "threadpool: cannot start thread %d", i);
            }
            p->n_threads = i + 1;
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
    free(p->slots);
    free(p->stall_us);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p);
}

int rp_pool_n_threads(const rp_pool *p) { return p->n_threads; }

void rp_pool_set_active(rp_pool *p, int n) {
    if (!p) return;
    atomic_store(&p->active, n < 1 ? 1 : n > p->n_threads ? p->n_threads : n);
}

int rp_pool_active(const rp_pool *p) { return p ? atomic_load(&((rp_pool *)p)->active) : 1; }

void rp_pool_debug_stall(rp_pool *p, int tid, unsigned usec) {
    if (p && tid >= 1 && tid < p->n_threads) atomic_store(&p->stall_us[tid], usec);
}

/* One loop of at most RP_POOL_MAX_ITEMS items starting at `base`. */
static void run_loop(rp_pool *p, int T, int64_t base, uint32_t n, uint32_t chunk, bool guided, rp_pool_fn fn,
                     void *arg) {
    /* the previous loop is done (left == 0), so nobody reads these now */
    p->fn = fn;
    p->arg = arg;
    p->base = base;
    atomic_store_explicit(&p->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&p->guided, guided, memory_order_relaxed);
    atomic_store_explicit(&p->left, (int64_t)n, memory_order_relaxed);
    /* shares on chunk boundaries */
    const uint64_t nch = ((uint64_t)n + chunk - 1) / chunk;
    for (int i = 0; i < p->n_threads; i++) {
        uint64_t b = 0, e = 0;
        if (i < T) {
            b = nch * (uint64_t)i / (uint64_t)T * chunk;
            e = nch * (uint64_t)(i + 1) / (uint64_t)T * chunk;
            if (b > n) b = n;
            if (e > n) e = n;
        }
        atomic_store_explicit(&p->slots[i].range, pack((uint32_t)b, (uint32_t)e), memory_order_release);
    }
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    work(p, 0);

    /* claims still in flight on other workers: spin briefly, yield, then sleep */
    const int wspin = atomic_load_explicit(&p->spin, memory_order_relaxed) / RP_POOL_WAIT_DIV;
    for (int spins = 0; atomic_load_explicit(&p->left, memory_order_acquire) > 0; spins++) {
        if (spins < wspin) {
            cpu_relax();
            continue;
        }
        if (spins < wspin + RP_POOL_YIELDS) {
            sched_yield();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, true);
        while (atomic_load(&p->left) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->caller_waiting, false);
        pthread_mutex_unlock(&p->mu);
        break;
    }
}

static void parallel_for(rp_pool *p, int64_t n, int64_t chunk, bool guided, rp_pool_fn fn, void *arg) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    const int T = p ? atomic_load(&p->active) : 1;
    if (p == NULL || T == 1 || n <= chunk) {
        fn(arg, 0, n, 0);
        return;
    }
    if (chunk > (int64_t)(RP_POOL_MAX_ITEMS / 2)) chunk = RP_POOL_MAX_ITEMS / 2;
    for (int64_t base = 0; base < n;) {
        int64_t m = n - base;
        if (m > (int64_t)RP_POOL_MAX_ITEMS) m = (int64_t)(RP_POOL_MAX_ITEMS / (uint64_t)chunk * (uint64_t)chunk);
        run_loop(p, T, base, (uint32_t)m, (uint32_t)chunk, guided, fn, arg);
        base += m;
    }
}

void rp_pool_parallel_for(rp_pool *p, int64_t n, int64_t chunk, rp_pool_fn fn, void *arg) {
    parallel_for(p, n, chunk, false, fn, arg);
}

void rp_pool_parallel_for_guided(rp_pool *p, int64_t n, int64_t min_chunk, rp_pool_fn fn, void *arg) {
    parallel_for(p, n, min_chunk, true, fn, arg);
}

void rp_pool_set_spin(rp_pool *p, int pauses) {
    if (!p) return;
    atomic_store_explicit(&p->spin, pauses < 0 ? 0 : pauses, memory_order_relaxed);
}

int rp_pool_spin(const rp_pool *p) { return p ? atomic_load_explicit(&((rp_pool *)p)->spin, memory_order_relaxed) : 0; }
