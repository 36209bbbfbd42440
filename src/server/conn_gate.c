/* conn_gate.c — the server's connections: one thread accepts them, holds each until its first request head is
 * complete (no libmicrohttpd thread for a slow or silent client), answers bad heads itself as JSON, hands good
 * ones to libmicrohttpd, enforces absolute deadlines on every phase of every request, caps connections per
 * address and in all, and closes the idle ones first when a new client needs room. */
#define _GNU_SOURCE
#include "server/conn_gate.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/error.h"
#include "server/backend_internal.h"
#include "server/errors.h"
#include "server/http_head.h"

enum { S_FREE = 0, S_PENDING, S_CLOSING, S_HANDED, S_MHD };

typedef struct gate_conn {
    int state;                   /* S_* */
    uint32_t gen;                /* bumped at each reuse of the slot: stale epoll events are ignored */
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    unsigned char ip[16];        /* IPv4 as ::ffff:a.b.c.d */
    double since, deadline;      /* start of the current phase, and its end */
    rp_conn_phase phase;         /* S_MHD */
    bool closing;                /* S_MHD: shut down by the gate, or answered by it: libmicrohttpd closes it */
    size_t uri_len;
    rp_conn_gate *g;             /* S_MHD: libmicrohttpd's callbacks find the gate from the connection */
} gate_conn;

struct rp_conn_gate {
    rp_gate_limits lim;
    int n_slots;
    gate_conn *conns;
    char *peek;                  /* max_head + 1 bytes */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int lfd, ep, wake;
    uint16_t port;
    double accept_paused_until;  /* out of descriptors: accept again after this */
    struct MHD_Daemon *d;
    pthread_t th;
    bool running, stop, want_close_listener;
    rp_gate_reply_fn reply;
    void *reply_user;
    _Atomic uint64_t dropped[RP_DROP_COUNT];
};

#define EV_LISTEN UINT64_MAX
#define EV_WAKE (UINT64_MAX - 1)
#define CLOSING_LINGER_S 2.0     /* an answered socket is drained this long before close (no RST over the answer) */
#define HANDOFF_WAIT_S 10.0      /* libmicrohttpd takes a handed-off socket within this, or it failed to */

int rp_gate_socket_cap(const rp_gate_limits *lim) {
    int slack = lim->max_connections / 4;
    return lim->max_connections + (slack < 16 ? 16 : slack);
}

/* ------------------------------------------------------------ replies */

/* The bytes of a JSON error answer: status line, headers (Connection: close) and the OpenAI error body. */
static int format_reply(char *buf, size_t cap, int status, const char *code, const char *message) {
    rp_api_error e;
    rp_api_errorf(&e, RP_ERR_INVALID_ARG, status, code, NULL, "%s", message);
    char *body = rp_api_error_json(&e);
    const char *reason = MHD_get_reason_phrase_for((unsigned)status);
    int n = snprintf(buf, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
                     status, reason && reason[0] ? reason : "Error", body ? strlen(body) : 2,
                     status == 503 ? "Retry-After: 1\r\n" : "", body ? body : "{}");
    free(body);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Writes all of buf to a non-blocking socket within budget_s. */
static bool write_all(int fd, const char *buf, size_t n, double budget_s) {
    const double until = rp_srv_now() + budget_s;
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        double left = until - rp_srv_now();
        if (left <= 0) return false;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, (int)(left * 1e3) + 1);
    }
    return true;
}

/* Reads and drops what the client still sends, until it closes or budget_s passes. */
static void drain(int fd, double budget_s) {
    const double until = rp_srv_now() + budget_s;
    char sink[4096];
    size_t total = 0;
    while (total < ((size_t)1 << 20)) {
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r > 0) {
            total += (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
        double left = until - rp_srv_now();
        if (left <= 0) return;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1e3) + 1) <= 0) return;
    }
}

static void send_reply(rp_conn_gate *g, int fd, int status, const char *code, const char *message) {
    char buf[2048];
    int n = format_reply(buf, sizeof buf, status, code, message);
    if (n > 0) write_all(fd, buf, (size_t)n, 1.0);   /* at most 1 s: a fresh socket takes it at once */
    if (g->reply) g->reply(g->reply_user, status, code);
}

/* ------------------------------------------------------------ slots (g->mu held) */

static uint64_t ev_key(const rp_conn_gate *g, const gate_conn *c) {
    return ((uint64_t)c->gen << 32) | (uint64_t)(c - g->conns);
}

static void slot_free(rp_conn_gate *g, gate_conn *c) {
    (void)g;
    c->state = S_FREE;
    c->gen++;
    c->fd = -1;
}

/* A socket the gate holds (pending or closing): closed now. */
static void gate_close(rp_conn_gate *g, gate_conn *c) {
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    slot_free(g, c);
}

/* Answered (or refused): the write side is shut, and what the client still sends is drained for a moment,
 * so that closing with unread bytes does not reset the connection before the client read the answer. */
static void gate_linger(rp_conn_gate *g, gate_conn *c) {
    shutdown(c->fd, SHUT_WR);
    c->state = S_CLOSING;
    c->deadline = rp_srv_now() + CLOSING_LINGER_S;
}

/* Counted against the caps: open and neither closing nor shut down. */
static bool active(const gate_conn *c) {
    return c->state == S_PENDING || c->state == S_HANDED || (c->state == S_MHD && !c->closing);
}

/* Eviction class (lower goes first), or -1 for a connection that is never evicted. */
static int evict_class(const gate_conn *c) {
    if (c->state == S_PENDING) return 1;
    if (c->state != S_MHD || c->closing) return -1;
    switch (c->phase) {
    case RP_CONN_IDLE: return 0;
    case RP_CONN_HEADERS: return 2;
    case RP_CONN_BODY: return 3;
    default: return -1;   /* answering a request: never */
    }
}

/* The connection to close for room: idle ones first, then the oldest of those still sending a request. */
static gate_conn *pick_victim(rp_conn_gate *g, const unsigned char *ip) {
    gate_conn *best = NULL;
    int best_cls = 0;
    for (int i = 0; i < g->n_slots; i++) {
        gate_conn *c = &g->conns[i];
        int cls = evict_class(c);
        if (cls < 0 || (ip && memcmp(c->ip, ip, 16) != 0)) continue;
        if (!best || cls < best_cls || (cls == best_cls && c->since < best->since)) {
            best = c;
            best_cls = cls;
        }
    }
    return best;
}

/* Shuts down a connection libmicrohttpd serves (its thread sees the end and closes it), or closes a pending one. */
static void drop(rp_conn_gate *g, gate_conn *c, int why) {
    atomic_fetch_add(&g->dropped[why], 1);
    if (c->state == S_PENDING) {
        gate_close(g, c);
    } else if (c->state == S_MHD) {
        shutdown(c->fd, SHUT_RDWR);
        c->closing = true;
    }
}

/* ------------------------------------------------------------ accept */

static void ip_key(const struct sockaddr_storage *a, unsigned char out[16]) {
    memset(out, 0, 16);
    if (a->ss_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    } else if (a->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    }
}

static gate_conn *slot_get(rp_conn_gate *g, int fd) {
    gate_conn *free_slot = NULL, *oldest_closing = NULL;
    for (int i = 0; i < g->n_slots; i++) {
        gate_conn *c = &g->conns[i];
        if (c->state != S_FREE && c->fd == fd) {
            /* the descriptor is open again: libmicrohttpd closed the old one without telling (it failed to
             * start serving it), so that slot is stale */
            slot_free(g, c);
        }
        if (c->state == S_FREE && !free_slot) free_slot = c;
        if (c->state == S_CLOSING && (!oldest_closing || c->deadline < oldest_closing->deadline)) oldest_closing = c;
    }
    if (free_slot) return free_slot;
    if (oldest_closing) {   /* lingering is a courtesy: the slot is needed */
        gate_close(g, oldest_closing);
        return oldest_closing;
    }
    return NULL;
}

static void on_pending(rp_conn_gate *g, gate_conn *c, uint32_t events);

static void admit(rp_conn_gate *g, int fd, const struct sockaddr_storage *addr, socklen_t alen) {
    unsigned char ip[16];
    ip_key(addr, ip);
    int n_active = 0, n_ip = 0;
    for (int i = 0; i < g->n_slots; i++) {
        const gate_conn *c = &g->conns[i];
        if (!active(c)) continue;
        n_active++;
        n_ip += memcmp(c->ip, ip, 16) == 0;
    }
    const char *refuse = NULL;
    if (g->lim.max_per_ip > 0 && n_ip >= g->lim.max_per_ip) {
        gate_conn *v = pick_victim(g, ip);
        if (v) {
            drop(g, v, RP_DROP_EVICTED);
            n_active--;
        } else {
            refuse = "too many connections from this address, each answering a request; retry later";
        }
    }
    if (!refuse && n_active >= g->lim.max_connections) {
        gate_conn *v = pick_victim(g, NULL);
        if (v) drop(g, v, RP_DROP_EVICTED);
        else refuse = "the server's connections are all answering requests; retry later";
    }
    gate_conn *c = slot_get(g, fd);
    if (!c) {   /* every slot is a socket libmicrohttpd is closing: no room even to answer */
        atomic_fetch_add(&g->dropped[RP_DROP_REJECTED], 1);
        close(fd);
        return;
    }
    const uint32_t gen = c->gen;
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->fd = fd;
    memcpy(&c->addr, addr, alen);
    c->alen = alen;
    memcpy(c->ip, ip, 16);
    c->since = rp_srv_now();
    c->deadline = c->since + g->lim.header_timeout_s;
    c->state = S_PENDING;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u64 = ev_key(g, c)};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        slot_free(g, c);
        return;
    }
    if (refuse) {
        atomic_fetch_add(&g->dropped[RP_DROP_REJECTED], 1);
        send_reply(g, fd, 503, "too_many_connections", refuse);
        gate_linger(g, c);
        return;
    }
    on_pending(g, c, 0);   /* the request is often there already: no round through epoll for it */
}

static void accept_all(rp_conn_gate *g) {
    for (int k = 0; k < 128; k++) {   /* a bounded batch: the listener stays readable for the next round */
        struct sockaddr_storage addr;
        socklen_t alen = sizeof addr;
        int fd = accept4(g->lfd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: stop watching the listener for a moment instead of spinning on it */
                struct epoll_event ev = {.events = 0, .data.u64 = EV_LISTEN};
                epoll_ctl(g->ep, EPOLL_CTL_MOD, g->lfd, &ev);
                g->accept_paused_until = rp_srv_now() + 0.1;
            }
            return;
        }
        admit(g, fd, &addr, alen);
    }
}

/* ------------------------------------------------------------ pending: the first request head */

static void on_pending(rp_conn_gate *g, gate_conn *c, uint32_t events) {
    const bool eof = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    ssize_t n = recv(c->fd, g->peek, g->lim.max_head + 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && (eof || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)))) {
        gate_close(g, c);   /* gone before sending a request */
        return;
    }
    if (n < 0) return;
    rp_head_verdict v;
    rp_http_head_check(g->peek, (size_t)n, g->lim.max_uri, g->lim.max_head, &v);
    if (v.state == RP_HEAD_INCOMPLETE && eof) {
        if (!v.started) {
            gate_close(g, c);
            return;
        }
        v.state = RP_HEAD_BAD;
        v.status = 400;
        v.code = "malformed_request";
        snprintf(v.message, sizeof v.message, "the request head is incomplete: the client closed its side before the empty line");
    }
    if (v.state == RP_HEAD_INCOMPLETE) return;
    if (v.state == RP_HEAD_BAD) {
        send_reply(g, c->fd, v.status, v.code, v.message);
        gate_linger(g, c);
        return;
    }
    /* a complete head: libmicrohttpd serves it from here (it reads the bytes peeked here) */
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    c->state = S_HANDED;
    c->deadline = c->since + g->lim.header_timeout_s + HANDOFF_WAIT_S;
    if (MHD_add_connection(g->d, c->fd, (const struct sockaddr *)&c->addr, c->alen) != MHD_YES)
        slot_free(g, c);   /* libmicrohttpd closed the socket */
}

static void on_closing(rp_conn_gate *g, gate_conn *c) {
    char sink[4096];
    for (;;) {
        ssize_t r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r > 0) continue;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        gate_close(g, c);   /* the client closed (or reset): done */
        return;
    }
}

/* ------------------------------------------------------------ deadlines */

static double phase_timeout(const rp_conn_gate *g, rp_conn_phase p) {
    switch (p) {
    case RP_CONN_IDLE: return g->lim.idle_timeout_s;
    case RP_CONN_HEADERS: return g->lim.header_timeout_s;
    case RP_CONN_BODY: return g->lim.body_timeout_s;
    default: return g->lim.handling_timeout_s;
    }
}

static const int k_phase_drop[] = {RP_DROP_IDLE_TIMEOUT, RP_DROP_HEADER_TIMEOUT, RP_DROP_BODY_TIMEOUT, RP_DROP_WRITE_TIMEOUT};

/* Applies every deadline that passed; returns the time of the next one. */
static double sweep(rp_conn_gate *g, double now) {
    double next = now + 1.0;
    if (g->accept_paused_until > 0 && now >= g->accept_paused_until && g->lfd >= 0) {
        g->accept_paused_until = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_LISTEN};
        epoll_ctl(g->ep, EPOLL_CTL_MOD, g->lfd, &ev);
    } else if (g->accept_paused_until > 0 && g->accept_paused_until < next) {
        next = g->accept_paused_until;
    }
    for (int i = 0; i < g->n_slots; i++) {
        gate_conn *c = &g->conns[i];
        if (c->state == S_FREE || (c->state == S_MHD && c->closing)) continue;
        if (now < c->deadline) {
            if (c->deadline < next) next = c->deadline;
            continue;
        }
        switch (c->state) {
        case S_PENDING: drop(g, c, RP_DROP_HEADER_TIMEOUT); break;
        case S_CLOSING: gate_close(g, c); break;
        case S_HANDED: slot_free(g, c); break;   /* never taken: libmicrohttpd closed it (touch nothing) */
        case S_MHD: drop(g, c, k_phase_drop[c->phase]); break;
        }
    }
    return next;
}

/* ------------------------------------------------------------ thread */

static void close_listener_locked(rp_conn_gate *g) {
    if (g->lfd >= 0) {
        epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL);
        close(g->lfd);
        g->lfd = -1;
    }
    g->want_close_listener = false;
    pthread_cond_broadcast(&g->cv);
}

static void *gate_main(void *arg) {
    rp_conn_gate *g = arg;
    struct epoll_event evs[64];
    double next = rp_srv_now();
    for (;;) {
        double wait = next - rp_srv_now();
        int tmo = wait <= 0 ? 0 : wait > 1.0 ? 1000 : (int)(wait * 1e3) + 1;
        int n = epoll_wait(g->ep, evs, 64, tmo);
        pthread_mutex_lock(&g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            break;
        }
        if (g->want_close_listener) close_listener_locked(g);
        for (int i = 0; i < n; i++) {
            uint64_t k = evs[i].data.u64;
            if (k == EV_WAKE) {
                uint64_t x;
                if (read(g->wake, &x, sizeof x) < 0) {}
                continue;
            }
            if (k == EV_LISTEN) {
                if (g->lfd >= 0) accept_all(g);
                continue;
            }
            uint32_t idx = (uint32_t)k, gen = (uint32_t)(k >> 32);
            if (idx >= (uint32_t)g->n_slots || g->conns[idx].gen != gen) continue;
            gate_conn *c = &g->conns[idx];
            if (c->state == S_PENDING) on_pending(g, c, evs[i].events);
            else if (c->state == S_CLOSING) on_closing(g, c);
        }
        next = sweep(g, rp_srv_now());
        pthread_mutex_unlock(&g->mu);
    }
    return NULL;
}

static void wake(rp_conn_gate *g) {
    uint64_t one = 1;
    if (write(g->wake, &one, sizeof one) < 0) {}
}

/* ------------------------------------------------------------ lifecycle */

static rp_status fd_limit(int need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return RP_OK;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)need) return RP_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need)
        return rp_errorf(RP_ERR_RANGE,
                         "server: the connection caps need %d file descriptors but the limit is %llu (ulimit -Hn); "
                         "lower --max-connections", need, (unsigned long long)rl.rlim_max);
    rl.rlim_cur = (rlim_t)need;   /* the soft limit, raised as far as needed (never above the hard one) */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return rp_errorf(RP_ERR_IO, "server: cannot raise the file descriptor limit to %d: %s", need, strerror(errno));
    return RP_OK;
}

rp_status rp_gate_create(const struct sockaddr *addr, socklen_t alen, const rp_gate_limits *lim, rp_gate_reply_fn reply,
                         void *reply_user, rp_conn_gate **out) {
    *out = NULL;
    if (lim->max_connections < 1 || lim->max_per_ip < 0 || !(lim->header_timeout_s > 0) || !(lim->body_timeout_s > 0) ||
        !(lim->idle_timeout_s > 0) || !(lim->handling_timeout_s > 0) || lim->max_uri < 16 || lim->max_head < lim->max_uri)
        return rp_errorf(RP_ERR_INVALID_ARG, "server: bad connection limits (connections %d, per address %d)",
                         lim->max_connections, lim->max_per_ip);
    const int n_slots = rp_gate_socket_cap(lim);
    RP_TRY(fd_limit(n_slots + 64));   /* + the model, the store, libmicrohttpd's own */
    rp_conn_gate *g = calloc(1, sizeof *g);
    if (!g) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    g->lim = *lim;
    g->n_slots = n_slots;
    g->lfd = g->ep = g->wake = -1;
    g->reply = reply;
    g->reply_user = reply_user;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->conns = calloc((size_t)n_slots, sizeof *g->conns);
    g->peek = malloc(lim->max_head + 1);
    rp_status st = RP_OK;
    if (!g->conns || !g->peek) {
        st = rp_errorf(RP_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_slots; i++) g->conns[i].fd = -1;
    g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (addr->sa_family == AF_INET6 && setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(g->lfd, addr, alen) != 0 || listen(g->lfd, SOMAXCONN) != 0) {
        st = rp_errorf(RP_ERR_IO, "%s", strerror(errno));   /* the caller names the address */
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    if (getsockname(g->lfd, (struct sockaddr *)&bound, &blen) == 0)
        g->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event el = {.events = EPOLLIN, .data.u64 = EV_LISTEN}, ew = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    if (g->ep < 0 || g->wake < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &el) != 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake, &ew) != 0) {
        st = rp_errorf(RP_ERR_IO, "server: epoll: %s", strerror(errno));
        goto fail;
    }
    *out = g;
    return RP_OK;
fail:
    rp_gate_free(g);
    return st;
}

uint16_t rp_gate_port(const rp_conn_gate *g) { return g->port; }

rp_status rp_gate_start(rp_conn_gate *g, struct MHD_Daemon *d) {
    g->d = d;
    if (pthread_create(&g->th, NULL, gate_main, g) != 0) return rp_errorf(RP_ERR_IO, "server: cannot start a thread");
    g->running = true;
    return RP_OK;
}

void rp_gate_close_listener(rp_conn_gate *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    if (!g->running) {
        close_listener_locked(g);
    } else if (g->lfd >= 0) {
        g->want_close_listener = true;
        wake(g);
        while (g->lfd >= 0) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

void rp_gate_stop(rp_conn_gate *g) {
    if (!g) return;
    if (g->running) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_mutex_unlock(&g->mu);
        wake(g);
        pthread_join(g->th, NULL);
        g->running = false;
    }
    pthread_mutex_lock(&g->mu);
    close_listener_locked(g);
    for (int i = 0; i < g->n_slots; i++)
        if (g->conns[i].state == S_PENDING || g->conns[i].state == S_CLOSING) gate_close(g, &g->conns[i]);
    pthread_mutex_unlock(&g->mu);
}

void rp_gate_free(rp_conn_gate *g) {
    if (!g) return;
    rp_gate_stop(g);
    if (g->ep >= 0) close(g->ep);
    if (g->wake >= 0) close(g->wake);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->conns);
    free(g->peek);
    free(g);
}

/* ------------------------------------------------------------ libmicrohttpd's side */

static gate_conn *ctx_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void rp_gate_mhd_started(rp_conn_gate *g, struct MHD_Connection *mc, void **socket_context) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    *socket_context = NULL;
    if (!ci) return;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_slots; i++) {
        gate_conn *c = &g->conns[i];
        if (c->state == S_HANDED && c->fd == ci->connect_fd) {
            c->state = S_MHD;
            c->g = g;
            c->phase = RP_CONN_HEADERS;   /* the first request's head is in; its deadline still counts from the accept */
            c->deadline = c->since + g->lim.header_timeout_s;
            *socket_context = c;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

void rp_gate_mhd_closed(rp_conn_gate *g, void **socket_context) {
    gate_conn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->state == S_MHD) slot_free(g, c);
    pthread_mutex_unlock(&g->mu);
    *socket_context = NULL;
}

static void set_phase(rp_conn_gate *g, gate_conn *c, rp_conn_phase p) {
    if (c->phase == p) return;
    c->phase = p;
    c->since = rp_srv_now();
    c->deadline = c->since + phase_timeout(g, p);
}

void rp_gate_phase(struct MHD_Connection *mc, rp_conn_phase p) {
    gate_conn *c = ctx_of(mc);
    if (!c) return;
    rp_conn_gate *g = c->g;
    pthread_mutex_lock(&g->mu);
    if (c->state == S_MHD) set_phase(g, c, p);
    pthread_mutex_unlock(&g->mu);
}

void rp_gate_request_line(struct MHD_Connection *mc, size_t uri_len) {
    gate_conn *c = ctx_of(mc);
    if (!c) return;
    rp_conn_gate *g = c->g;
    pthread_mutex_lock(&g->mu);
    if (c->state == S_MHD) {
        c->uri_len = uri_len;
        set_phase(g, c, RP_CONN_HEADERS);   /* from idle: a later request on a kept-alive connection */
    }
    pthread_mutex_unlock(&g->mu);
}

size_t rp_gate_uri_len(struct MHD_Connection *mc) {
    gate_conn *c = ctx_of(mc);
    if (!c) return 0;
    rp_conn_gate *g = c->g;
    pthread_mutex_lock(&g->mu);
    size_t n = c->uri_len;
    pthread_mutex_unlock(&g->mu);
    return n;
}

bool rp_gate_answer(struct MHD_Connection *mc, int status, const char *code, const char *message) {
    gate_conn *c = ctx_of(mc);
    if (!c) return false;
    rp_conn_gate *g = c->g;
    pthread_mutex_lock(&g->mu);
    const bool ok = c->state == S_MHD && !c->closing && c->phase != RP_CONN_HANDLING;
    const int fd = c->fd;
    if (ok) c->closing = true;
    pthread_mutex_unlock(&g->mu);
    if (!ok) return false;
    /* the socket stays open until this thread is done: libmicrohttpd closes it after the thread ends */
    send_reply(g, fd, status, code, message);
    shutdown(fd, SHUT_WR);
    drain(fd, 1.0);
    return true;
}

void rp_gate_stats_get(rp_conn_gate *g, rp_gate_stats *out) {
    memset(out, 0, sizeof *out);
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_slots; i++) {
        const gate_conn *c = &g->conns[i];
        if (c->state == S_FREE) continue;
        out->open++;
        if (c->state == S_PENDING) out->pending++;
        if (c->state == S_HANDED) out->receiving++;
        if (c->state != S_MHD || c->closing) continue;
        if (c->phase == RP_CONN_IDLE) out->idle++;
        else if (c->phase == RP_CONN_HANDLING) out->busy++;
        else out->receiving++;
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < RP_DROP_COUNT; i++) out->dropped[i] = atomic_load(&g->dropped[i]);
}
