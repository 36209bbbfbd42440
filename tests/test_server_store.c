/* test_server_store.c — the server over a flash store (--cache-dir): the store-size gauge stays current without a
 * disk budget, and a full disk is reported by its cause, counted, and does not stop the serving. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/backend.h"
#include "server/server.h"
#include "srvtest.h"
#include "testutil.h"

#define NEED_MODEL() RP_REQUIRE_SHARED(rp_test_shared(SRVTEST_MODEL), SRVTEST_MODEL)

static char g_dir[4400];
static int g_parallel = 1;

static void with_store(rp_server_config *c) {
    c->backend.cache_dir = g_dir;
    c->backend.parallel = g_parallel;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls a metric until it reaches `at_least` (up to `seconds`); returns the last value. */
static double wait_metric(uint16_t port, const char *name, double at_least, double seconds) {
    double v = metric(port, name);
    for (int i = 0; v < at_least && i < (int)(seconds * 20); i++) {
        sleep_ms(50);
        v = metric(port, name);
    }
    return v;
}

/* A prompt of some 300 tokens, different for each n. */
static void long_prompt(char *out, size_t cap, int n) {
    int w = snprintf(out, cap, "Story %d.", n);
    for (int i = 0; i < 12 && w > 0 && (size_t)w < cap; i++)
        w += snprintf(out + w, cap - (size_t)w, " Tom had a red ball number %d and he liked to play with it.", n * 31 + i);
}

static void ask(uint16_t port, const char *text) {
    char body[8192];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":2,\"temperature\":0}",
             text);
    resp r = post(port, "/v1/chat/completions", body);
    if (r.status != 200) print_message("status %d: %.300s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* reprise_store_bytes follows what is written, with no --cache-disk (it used to stay at its size at start). */
static void test_store_bytes_gauge(void **state) {
    (void)state;
    NEED_MODEL();
    for (int backend = 0; backend < 2; backend++) {
        g_parallel = backend ? 2 : 1;
        snprintf(g_dir, sizeof g_dir, "%s/gauge-%d", rp_test_tmpdir(), backend);
        fixture f;
        start(&f, with_store);
        const double g0 = metric(f.port, "reprise_store_bytes");
        assert_true(g0 > 0);
        char text[4096];
        long_prompt(text, sizeof text, backend);
        ask(f.port, text);
        /* written in the background shortly after the request; the gauge follows without another request */
        const double written = wait_metric(f.port, "reprise_store_written_total", 1, 20);
        const double g1 = wait_metric(f.port, "reprise_store_bytes", g0 + 100000, 20);
        print_message("%s: store %.0f B at start, %.0f B after %.0f chunk(s) written\n", backend ? "sched" : "core",
                      g0, g1, written);
        assert_true(written >= 1);
        assert_true(g1 >= g0 + 100000);   /* the prompt's KV: ~300 tokens x 1280 B */
        assert_int_equal(metric(f.port, "reprise_store_write_failures_total"), 0);
        stop(&f);
    }
}

static char g_mnt[4200];

static int unmount_teardown(void **state) {
    (void)state;
    if (g_mnt[0]) umount2(g_mnt, MNT_DETACH);
    g_mnt[0] = 0;
    return 0;
}

/* A full disk under the store: requests keep being answered, the failure is counted and its cause named. */
static void test_full_disk_keeps_serving(void **state) {
    (void)state;
    NEED_MODEL();
    snprintf(g_mnt, sizeof g_mnt, "%s/full", rp_test_tmpdir());
    mkdir(g_mnt, 0700);
    if (mount("tmpfs", g_mnt, "tmpfs", 0, "size=256k,mode=0700") != 0) {
        const int err = errno;
        g_mnt[0] = 0;
        RP_SKIP("cannot mount a tmpfs under %s (%s): a full disk needs root with CAP_SYS_ADMIN\n", rp_test_tmpdir(),
                strerror(err));
    }
    snprintf(g_dir, sizeof g_dir, "%s/store", g_mnt);
    g_parallel = 1;
    fixture f;
    start(&f, with_store);
    char text[4096];
    for (int i = 0; i < 3; i++) {
        long_prompt(text, sizeof text, 10 + i);
        ask(f.port, text);   /* each prompt's KV is larger than the whole disk */
    }
    rp_status st = rp_backend_flush(rp_server_backend(f.srv));
    const char *e = rp_last_error();
    print_message("flush: %s\n", e);
    assert_int_equal(st, RP_ERR_IO);
    assert_non_null(strstr(e, "disk full writing chunk"));
    assert_non_null(strstr(e, g_dir));
    assert_null(strstr(e, "rollback"));
    assert_true(metric(f.port, "reprise_store_write_failures_total") >= 1);
    long_prompt(text, sizeof text, 10);
    ask(f.port, text);   /* still serving */
    resp r = http(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    stop(&f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_bytes_gauge),
        cmocka_unit_test_teardown(test_full_disk_keeps_serving, unmount_teardown),
    };
    return rp_test_main(tests, NULL, NULL);
}
