/* loadgen.c — loopback load generator for `reprise serve`: N clients x M requests mixing chat, SSE, client
 * disconnects, completions and malformed bodies; checks every answer and samples the server's RSS.
 *
 * Build: cc -O2 -pthread tests/load/loadgen.c -o loadgen
 * Run:   loadgen --port P [--clients 32] [--requests 500] [--pid SERVER_PID] [--rss-limit-mb N] [--time-limit S]
 * Exit 0 when: no transport errors (other than the disconnects it makes on purpose), no 5xx except 503,
 * every malformed request answered 4xx, every 200 well formed, RSS under the limit. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int g_port, g_clients = 32, g_requests = 500, g_pid;
static double g_rss_limit_mb = 0, g_time_limit = 170;
static _Atomic long g_status[600], g_transport, g_bad_malformed, g_bad_5xx, g_bad_body, g_done, g_disconnects;
static _Atomic long g_max_rss_kb;
static _Atomic bool g_stop;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dial(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int tries = 0; tries < 50; tries++) {
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        if (errno != EAGAIN && errno != ECONNREFUSED) break;
        usleep(20000);   /* the accept backlog was full: try again */
    }
    close(fd);
    return -1;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* One request; returns the status (-1 transport error) and the body (malloc'd) when asked.
 * content_length < 0: use the body's length. disconnect_after > 0: close after that many bytes. */
static int request(const char *method, const char *path, const char *body, long content_length, size_t send_bytes,
                   size_t disconnect_after, char **out_body) {
    int fd = dial();
    if (fd < 0) return -1;
    size_t blen = body ? strlen(body) : 0;
    if (send_bytes == 0 || send_bytes > blen) send_bytes = blen;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %ld\r\n\r\n",
                      method, path, content_length >= 0 ? content_length : (long)blen);
    if (!send_all(fd, head, (size_t)hl) || (send_bytes && !send_all(fd, body, send_bytes))) {
        close(fd);
        return -1;
    }
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t got = recv(fd, buf + len, cap - len - 1, 0);
        if (got <= 0) break;
        len += (size_t)got;
        if (disconnect_after && len >= disconnect_after) break;
    }
    close(fd);
    buf[len] = '\0';
    int status = -1;
    if (len < 12 || sscanf(buf, "HTTP/1.%*d %d", &status) != 1) status = -1;
    if (out_body) *out_body = buf;
    else free(buf);
    return status;
}

static void count(int status) {
    if (status < 0) {
        atomic_fetch_add(&g_transport, 1);
        return;
    }
    if (status < 600) atomic_fetch_add(&g_status[status], 1);
    if (status >= 500 && status != 503) atomic_fetch_add(&g_bad_5xx, 1);
}

static const char *k_chat = "{\"model\":\"local\",\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
                            "\"max_tokens\":4,\"temperature\":0.7}";
static const char *k_chat_stream = "{\"model\":\"local\",\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
                                   "\"max_tokens\":4,\"stream\":true}";
static const char *k_long_stream = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tom\"}],\"max_tokens\":64,\"stream\":true,"
                                   "\"logit_bias\":{\"1\":-100,\"2\":-100}}";
static const char *k_comp = "{\"prompt\":\"Once upon a time\",\"max_tokens\":4}";
static const char *k_comp_stream = "{\"prompt\":\"Lily had\",\"max_tokens\":4,\"stream\":true,\"stop\":[\".\"]}";

/* Malformed requests: each must be answered 4xx. */
static int malformed(int k, char *scratch) {
    switch (k % 12) {
    case 0: return request("POST", "/v1/chat/completions", "{\"messages\": [", -1, 0, 0, NULL);
    case 1: return request("POST", "/v1/chat/completions", "{\"messages\":\"hello\"}", -1, 0, 0, NULL);
    case 2: return request("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":99}", -1, 0, 0, NULL);
    case 3: {
        int n = sprintf(scratch, "{\"messages\":");
        for (int i = 0; i < 200; i++) scratch[n++] = '[';
        scratch[n] = '\0';
        return request("POST", "/v1/chat/completions", scratch, -1, 0, 0, NULL);
    }
    case 4:   /* announces 2 MB, sends 16 bytes: refused from the header */
        return request("POST", "/v1/chat/completions", "{\"messages\":[]} ", 2000000, 0, 0, NULL);
    case 5: return request("POST", "/v1/nope", "{}", -1, 0, 0, NULL);
    case 6: return request("PUT", "/v1/chat/completions", "{}", -1, 0, 0, NULL);
    case 7: return request("POST", "/v1/completions", "", -1, 0, 0, NULL);
    case 8: {
        for (int i = 0; i < 300; i++) scratch[i] = (char)(1 + (i * 37) % 250);
        scratch[300] = '\0';
        return request("POST", "/v1/chat/completions", scratch, -1, 0, 0, NULL);
    }
    case 9: return request("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":-1}", -1, 0, 0, NULL);
    case 10: return request("POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reprise_session\":\"0123456789abcdef0123456789abcdef\"}", -1, 0, 0, NULL);
    default: return request("POST", "/v1/completions", "{\"prompt\":[1,2,99999999]}", -1, 0, 0, NULL);
    }
}

static void *client(void *arg) {
    long id = (long)arg;
    char *scratch = malloc(4096);
    for (int i = 0; i < g_requests && !atomic_load(&g_stop); i++) {
        int kind = (int)((i * 7 + id * 3) % 20);
        char *body = NULL;
        int st;
        if (kind < 6) {
            st = request("POST", "/v1/chat/completions", k_chat, -1, 0, 0, &body);
            count(st);
            if (st == 200 && !strstr(body, "\"chat.completion\"")) atomic_fetch_add(&g_bad_body, 1);
        } else if (kind < 9) {
            st = request("POST", "/v1/chat/completions", k_chat_stream, -1, 0, 0, &body);
            count(st);
            if (st == 200 && !strstr(body, "data: [DONE]")) atomic_fetch_add(&g_bad_body, 1);
        } else if (kind < 11) {
            /* the client goes away mid-stream: the server must cancel and carry on */
            st = request("POST", "/v1/chat/completions", k_long_stream, -1, 0, 400, NULL);
            if (st > 0) count(st);
            atomic_fetch_add(&g_disconnects, 1);
        } else if (kind == 11) {
            st = request("POST", "/v1/completions", k_comp, -1, 0, 0, &body);
            count(st);
            if (st == 200 && !strstr(body, "\"text_completion\"")) atomic_fetch_add(&g_bad_body, 1);
        } else if (kind == 12) {
            st = request("POST", "/v1/completions", k_comp_stream, -1, 0, 0, &body);
            count(st);
            if (st == 200 && !strstr(body, "data: [DONE]")) atomic_fetch_add(&g_bad_body, 1);
        } else if (kind < 17) {
            st = malformed((int)(i + id), scratch);
            count(st);
            if (st < 400 || st >= 500) {
                atomic_fetch_add(&g_bad_malformed, 1);
                fprintf(stderr, "loadgen: malformed request %d answered %d\n", (int)((i + id) % 12), st);
            }
        } else if (kind < 19) {
            st = request("GET", kind == 17 ? "/v1/models" : "/health", NULL, -1, 0, 0, NULL);
            count(st);
        } else {
            st = request("GET", "/metrics", NULL, -1, 0, 0, NULL);
            count(st);
        }
        free(body);
        atomic_fetch_add(&g_done, 1);
    }
    free(scratch);
    return NULL;
}

static long rss_kb(void) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", g_pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    fclose(f);
    return kb;
}

static void *sampler(void *arg) {
    while (!atomic_load(&g_stop)) {
        long kb = rss_kb();
        if (kb > atomic_load(&g_max_rss_kb)) atomic_store(&g_max_rss_kb, kb);
        usleep(50000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) g_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--clients")) g_clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--requests")) g_requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pid")) g_pid = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rss-limit-mb")) g_rss_limit_mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--time-limit")) g_time_limit = atof(argv[i + 1]);
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (g_port <= 0 || g_clients < 1 || g_clients > 1024 || g_requests < 1) {
        fprintf(stderr, "usage: loadgen --port P [--clients N] [--requests M] [--pid PID] [--rss-limit-mb MB] [--time-limit S]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    long rss0 = g_pid ? rss_kb() : -1;
    pthread_t smp, *th = calloc((size_t)g_clients, sizeof *th);
    if (g_pid) pthread_create(&smp, NULL, sampler, NULL);
    double t0 = now_s();
    for (long c = 0; c < g_clients; c++) pthread_create(&th[c], NULL, client, (void *)c);
    /* a watchdog: past the time limit the clients stop after their current request */
    while (atomic_load(&g_done) < (long)g_clients * g_requests) {
        if (now_s() - t0 > g_time_limit) {
            atomic_store(&g_stop, true);
            break;
        }
        usleep(100000);
    }
    for (int c = 0; c < g_clients; c++) pthread_join(th[c], NULL);
    double dt = now_s() - t0;
    bool timed_out = atomic_load(&g_stop);
    atomic_store(&g_stop, true);
    if (g_pid) pthread_join(smp, NULL);
    long rss1 = g_pid ? rss_kb() : -1;
    long done = atomic_load(&g_done);
    printf("loadgen: %ld requests (%d clients x %d) in %.1f s = %.0f req/s%s\n", done, g_clients, g_requests, dt,
           done / (dt > 0 ? dt : 1), timed_out ? " (TIME LIMIT)" : "");
    printf("loadgen: status");
    for (int s = 0; s < 600; s++)
        if (atomic_load(&g_status[s])) printf(" %d=%ld", s, atomic_load(&g_status[s]));
    printf("; client disconnects %ld; transport errors %ld\n", atomic_load(&g_disconnects), atomic_load(&g_transport));
    if (g_pid)
        printf("loadgen: server RSS start %.1f MB, max %.1f MB, end %.1f MB (limit %.0f MB)\n", rss0 / 1024.0,
               atomic_load(&g_max_rss_kb) / 1024.0, rss1 / 1024.0, g_rss_limit_mb);
    int fail = 0;
    if (timed_out) { printf("FAIL: did not finish within %.0f s\n", g_time_limit); fail = 1; }
    if (atomic_load(&g_transport)) { printf("FAIL: %ld transport errors (connection refused/reset, no status)\n", atomic_load(&g_transport)); fail = 1; }
    if (atomic_load(&g_bad_5xx)) { printf("FAIL: %ld 5xx answers other than 503\n", atomic_load(&g_bad_5xx)); fail = 1; }
    if (atomic_load(&g_bad_malformed)) { printf("FAIL: %ld malformed requests not answered 4xx\n", atomic_load(&g_bad_malformed)); fail = 1; }
    if (atomic_load(&g_bad_body)) { printf("FAIL: %ld 200 answers without the expected body\n", atomic_load(&g_bad_body)); fail = 1; }
    if (g_pid && g_rss_limit_mb > 0 && atomic_load(&g_max_rss_kb) / 1024.0 > g_rss_limit_mb) {
        printf("FAIL: server RSS %.1f MB over the limit %.0f MB\n", atomic_load(&g_max_rss_kb) / 1024.0, g_rss_limit_mb);
        fail = 1;
    }
    if (g_pid && kill(g_pid, 0) != 0) { printf("FAIL: the server process is gone\n"); fail = 1; }
    free(th);
    return fail;
}
