/* session_table.c — the reprise_session table: random ids, constant-time lookup, owners, quotas, LRU eviction, TTL. */
#include "server/session_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/error.h"
#include "server/backend_internal.h"

struct rp_stab_entry {
    bool used, busy, suspended;
    int owner;                /* API key index, -1 without keys */
    uint8_t raw[16];
    char hex[33];
    double last_used;
    rp_bk_session *bs;
};

struct rp_session_table {
    rp_backend *b;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int cap;
    double ttl;
    rp_stab_params p;
    uint64_t evictions;
    rp_stab_entry *e;
};

rp_stab_params rp_stab_default_params(void) {
    rp_stab_params p = {.max_sessions = 16, .ttl_s = 1800};
    return p;
}

rp_status rp_stab_create(rp_backend *b, const rp_stab_params *p, rp_session_table **out) {
    *out = NULL;
    const int max_sessions = p->max_sessions;
    const double ttl_s = p->ttl_s;
    if (max_sessions < 0 || max_sessions > 4096 || p->owner_max_sessions < 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "sessions: %d (per owner %d)", max_sessions, p->owner_max_sessions);
    rp_session_table *t = calloc(1, sizeof *t);
    if (!t) return rp_errorf(RP_ERR_NOMEM, "sessions: out of memory");
    t->e = calloc((size_t)(max_sessions ? max_sessions : 1), sizeof *t->e);
    if (!t->e) {
        free(t);
        return rp_errorf(RP_ERR_NOMEM, "sessions: out of memory");
    }
    t->b = b;
    t->cap = max_sessions;
    t->ttl = ttl_s;
    t->p = *p;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    *out = t;
    return RP_OK;
}

void rp_stab_free(rp_session_table *t) {
    if (!t) return;
    for (int i = 0; i < t->cap; i++)
        if (t->e[i].used) rp_backend_session_free(t->b, t->e[i].bs);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->e);
    free(t);
}

static void drop(rp_session_table *t, rp_stab_entry *e) {
    rp_backend_session_free(t->b, e->bs);
    memset(e, 0, sizeof *e);
}

static void expire_locked(rp_session_table *t, double now) {
    for (int i = 0; i < t->cap; i++)
        if (t->e[i].used && !t->e[i].busy && t->ttl > 0 && now - t->e[i].last_used > t->ttl) drop(t, &t->e[i]);
}

void rp_stab_expire(rp_session_table *t) {
    pthread_mutex_lock(&t->mu);
    expire_locked(t, rp_srv_now());
    pthread_mutex_unlock(&t->mu);
}

static rp_status random_id(uint8_t raw[16]) {
    size_t got = 0;
    while (got < 16) {
        ssize_t r = getrandom(raw + got, 16 - got, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return rp_errorf(RP_ERR_IO, "sessions: getrandom failed: %s", strerror(errno));
        }
        got += (size_t)r;
    }
    return RP_OK;
}

/* The owner's least recently used idle session other than `keep` (mu held); *n_own counts its sessions. */
static rp_stab_entry *owner_lru(rp_session_table *t, int owner, const rp_stab_entry *keep, int *n_own) {
    rp_stab_entry *lru = NULL;
    int n = 0;
    for (int i = 0; i < t->cap; i++) {
        rp_stab_entry *e = &t->e[i];
        if (!e->used || e->owner != owner) continue;
        n++;
        if (e != keep && !e->busy && (!lru || e->last_used < lru->last_used)) lru = e;
    }
    if (n_own) *n_own = n;
    return lru;
}

static void evict(rp_session_table *t, rp_stab_entry *e) {
    drop(t, e);
    t->evictions++;
}

rp_status rp_stab_new(rp_session_table *t, int owner, char id_out[33], rp_stab_entry **out) {
    *out = NULL;
    uint8_t raw[16];
    RP_TRY(random_id(raw));
    pthread_mutex_lock(&t->mu);
    double now = rp_srv_now();
    expire_locked(t, now);
    rp_stab_entry *slot = NULL;
    for (int i = 0; i < t->cap && !slot; i++)
        if (!t->e[i].used) slot = &t->e[i];
    int n_own = 0;
    rp_stab_entry *lru = owner_lru(t, owner, NULL, &n_own);
    const bool at_quota = t->p.owner_max_sessions > 0 && n_own >= t->p.owner_max_sessions;
    if ((at_quota || !slot) && lru) {   /* only ever the owner's own session goes */
        evict(t, lru);
        slot = lru;
    } else if (at_quota || !slot) {
        pthread_mutex_unlock(&t->mu);
        if (at_quota)
            return rp_errorf(RP_ERR_FULL, "sessions: this API key holds its %d sessions, all busy", n_own);
        return rp_errorf(RP_ERR_FULL, "sessions: all %d sessions are in use%s", t->cap,
                         n_own ? ", this key's all busy" : " by others");
    }
    rp_bk_session *bs = NULL;
    rp_status st = rp_backend_session_create(t->b, &bs);
    if (st != RP_OK) {
        pthread_mutex_unlock(&t->mu);
        return st;
    }
    slot->used = slot->busy = true;
    slot->suspended = false;
    slot->owner = owner;
    memcpy(slot->raw, raw, 16);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        slot->hex[2 * i] = hx[raw[i] >> 4];
        slot->hex[2 * i + 1] = hx[raw[i] & 15];
    }
    slot->hex[32] = '\0';
    slot->last_used = now;
    slot->bs = bs;
    memcpy(id_out, slot->hex, 33);
    pthread_mutex_unlock(&t->mu);
    *out = slot;
    return RP_OK;
}

static bool parse_hex(const char *s, uint8_t raw[16]) {
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i & 1) raw[i / 2] |= (uint8_t)v;
        else raw[i / 2] = (uint8_t)(v << 4);
    }
    return s[32] == '\0';
}

/* Constant-time scan: every used entry is compared in full. Another owner's session is not found. */
static rp_stab_entry *find_locked(rp_session_table *t, int owner, const uint8_t raw[16]) {
    rp_stab_entry *hit = NULL;
    for (int i = 0; i < t->cap; i++) {
        uint8_t d = 0;
        for (int k = 0; k < 16; k++) d |= (uint8_t)(t->e[i].raw[k] ^ raw[k]);
        volatile bool match = t->e[i].used && d == 0 && t->e[i].owner == owner;
        if (match) hit = &t->e[i];
    }
    return hit;
}

rp_status rp_stab_acquire(rp_session_table *t, int owner, const char *id, double wait_s, rp_stab_entry **out) {
    *out = NULL;
    uint8_t raw[16];
    if (!id || !parse_hex(id, raw)) return rp_errorf(RP_ERR_NOT_FOUND, "sessions: malformed id");
    pthread_mutex_lock(&t->mu);
    expire_locked(t, rp_srv_now());
    double until = rp_srv_now() + wait_s;
    rp_stab_entry *e;
    while ((e = find_locked(t, owner, raw)) && e->busy && rp_srv_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    rp_status st = RP_OK;
    if (!e) st = rp_errorf(RP_ERR_NOT_FOUND, "sessions: no session %.32s (unknown or expired)", id);
    else if (e->busy) st = rp_errorf(RP_ERR_FULL, "sessions: session %.32s is busy with another request", id);
    else {
        e->busy = true;
        e->last_used = rp_srv_now();
        *out = e;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

rp_bk_session *rp_stab_backend(rp_stab_entry *e) { return e ? e->bs : NULL; }

/* KV of the tokens resident in the owner's sessions (mu held). */
static uint64_t owner_kv(rp_session_table *t, int owner) {
    uint64_t tok = 0;
    for (int i = 0; i < t->cap; i++)
        if (t->e[i].used && t->e[i].owner == owner) tok += (uint64_t)rp_backend_session_resident(t->b, t->e[i].bs);
    return tok * t->p.kv_bytes_per_token;
}

void rp_stab_release(rp_session_table *t, rp_stab_entry *e, bool suspended) {
    if (!e) return;
    if (suspended) rp_backend_session_suspend(t->b, e->bs);
    pthread_mutex_lock(&t->mu);
    e->busy = false;
    e->suspended = suspended;
    e->last_used = rp_srv_now();
    /* over its KV quota: the owner's other idle sessions go, oldest first (this one stays: it is the newest,
     * and one session is bounded by the context anyway) */
    if (t->p.owner_max_kv_bytes > 0)
        for (rp_stab_entry *v; owner_kv(t, e->owner) > t->p.owner_max_kv_bytes && (v = owner_lru(t, e->owner, e, NULL));)
            evict(t, v);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

uint64_t rp_stab_evictions(rp_session_table *t) {
    pthread_mutex_lock(&t->mu);
    const uint64_t n = t->evictions;
    pthread_mutex_unlock(&t->mu);
    return n;
}

rp_status rp_stab_delete(rp_session_table *t, int owner, const char *id) {
    uint8_t raw[16];
    if (!id || !parse_hex(id, raw)) return rp_errorf(RP_ERR_NOT_FOUND, "sessions: malformed id");
    pthread_mutex_lock(&t->mu);
    rp_stab_entry *e = find_locked(t, owner, raw);
    rp_status st = RP_OK;
    if (!e) st = rp_errorf(RP_ERR_NOT_FOUND, "sessions: no session %.32s", id);
    else if (e->busy) st = rp_errorf(RP_ERR_FULL, "sessions: session %.32s is busy", id);
    else drop(t, e);
    pthread_mutex_unlock(&t->mu);
    return st;
}

void rp_stab_counts(rp_session_table *t, int *total, int *active, int *suspended) {
    int n = 0, a = 0, s = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->cap; i++) {
        if (!t->e[i].used) continue;
        n++;
        a += t->e[i].busy;
        s += !t->e[i].busy && t->e[i].suspended;
    }
    pthread_mutex_unlock(&t->mu);
    if (total) *total = n;
    if (active) *active = a;
    if (suspended) *suspended = s;
}
