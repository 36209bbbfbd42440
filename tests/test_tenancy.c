/* test_tenancy.c — several API keys on one server: key configuration (no empty key, private key files), each
 * request's identity, sessions owned per key (404 for others, per-key quotas, evictions of one's own only), and
 * per-key cache namespaces (cached_tokens never tells one key what another sent). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/auth.h"
#include "server/server.h"
#include "srvtest.h"
#include "testutil.h"

/* The reuse engine mixes a request's cache namespace into its chunk hashes (rp_reuse_opts.ns, handed over by
 * backend_reuse.c rp_backend_reuse_opts): 0 skips test_namespace_engine with a message. */
#ifndef RP_TEST_NS_ENGINE_WIRED
#define RP_TEST_NS_ENGINE_WIRED 1
#endif

#define NEED_MODEL() RP_REQUIRE_SHARED(rp_test_shared(SRVTEST_MODEL), SRVTEST_MODEL)

/* A key file with `text`, mode `mode`; returns its path (static, one at a time). */
static const char *key_file(const char *name, const char *text, mode_t mode) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", rp_test_tmpdir(), name);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static void expect_bad_keys(const char *key, const char *file, const char *what) {
    rp_srv_keys k;
    rp_status st = rp_srv_keys_load(key, file, &k);
    if (st == RP_OK || !strstr(rp_last_error(), what))
        print_message("expected an error with '%s', got %d: %s\n", what, st, rp_last_error());
    assert_true(st != RP_OK);
    assert_non_null(strstr(rp_last_error(), what));
    assert_int_equal(k.n, 0);
}

/* ------------------------------------------------------------ key configuration */

static void test_key_sources(void **state) {
    (void)state;
    rp_srv_keys k;
    /* an explicitly empty key is an error, never "no authentication" */
    expect_bad_keys("", NULL, "empty");
    expect_bad_keys("two words", NULL, "space");
    assert_int_equal(rp_srv_keys_load(NULL, NULL, &k), RP_OK);   /* no key at all: no auth */
    assert_int_equal(k.n, 0);

    /* the file: comments, blank lines, NAME:KEY and bare keys, whitespace trimmed */
    const char *f = key_file("keys-ok", "# tenants\n\nalice:k-alice-123\n  k-bare-456  \n bob : k:bob:789 \r\n#x:y\n",
                             0600);
    assert_int_equal(rp_srv_keys_load("k-default", f, &k), RP_OK);
    assert_int_equal(k.n, 4);
    assert_string_equal(k.v[0].name, "default");
    assert_string_equal(k.v[1].name, "alice");
    assert_string_equal(k.v[2].name, "key-2");
    assert_string_equal(k.v[3].name, "bob");
    assert_string_equal(k.v[3].secret, "k:bob:789");
    for (int i = 0; i < k.n; i++) {
        assert_true(k.v[i].ns != 0);
        for (int j = 0; j < i; j++) assert_true(k.v[i].ns != k.v[j].ns);
    }
    /* bearer matching: each key its own index */
    assert_int_equal(rp_srv_keys_match(&k, "Bearer k-alice-123"), 1);
    assert_int_equal(rp_srv_keys_match(&k, "bearer   k:bob:789"), 3);
    assert_int_equal(rp_srv_keys_match(&k, "Bearer k-default"), 0);
    assert_int_equal(rp_srv_keys_match(&k, "Bearer k-alice-12"), -1);
    assert_int_equal(rp_srv_keys_match(&k, "Bearer k-alice-1234"), -1);
    assert_int_equal(rp_srv_keys_match(&k, "Basic k-alice-123"), -1);
    assert_int_equal(rp_srv_keys_match(&k, NULL), -1);
    rp_srv_keys_free(&k);
    /* a key's namespace follows its name, not its place in the file */
    rp_srv_keys k2;
    f = key_file("keys-reordered", "bob:k:bob:789\nalice:k-alice-123\n", 0600);
    assert_int_equal(rp_srv_keys_load(NULL, f, &k2), RP_OK);
    rp_srv_keys k3;
    f = key_file("keys-ordered", "alice:k-alice-123\nbob:k:bob:789\n", 0600);
    assert_int_equal(rp_srv_keys_load(NULL, f, &k3), RP_OK);
    assert_true(k2.v[0].ns == k3.v[1].ns && k2.v[1].ns == k3.v[0].ns);
    rp_srv_keys_free(&k2);
    rp_srv_keys_free(&k3);

    /* bad files, named with their line */
    f = key_file("keys-empty-key", "alice:k1\ncarol:\n", 0600);
    expect_bad_keys(NULL, f, ":2: the API key is empty");
    f = key_file("keys-dup-key", "alice:same\nbob:same\n", 0600);
    expect_bad_keys(NULL, f, "configured twice");
    f = key_file("keys-dup-name", "alice:k1\nalice:k2\n", 0600);
    expect_bad_keys(NULL, f, "used twice");
    f = key_file("keys-bad-name", "al ice:k1\n", 0600);
    expect_bad_keys(NULL, f, "may only use");
    f = key_file("keys-none", "# nothing\n\n", 0600);
    expect_bad_keys(NULL, f, "has no key");
    expect_bad_keys(NULL, "/nonexistent/keys", "No such file");
    /* readable or writable by group/others: refused like an ssh private key */
    const mode_t loose[] = {0644, 0640, 0604, 0660, 0602};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        f = key_file("keys-loose", "alice:k1\n", loose[i]);
        expect_bad_keys(NULL, f, "chmod 600");
    }
    f = key_file("keys-0400", "alice:k1\n", 0400);
    assert_int_equal(rp_srv_keys_load(NULL, f, &k), RP_OK);
    rp_srv_keys_free(&k);
    if (geteuid() == 0) {   /* another user's file (only root can make one here) */
        const struct passwd *pw = getpwnam("nobody");
        f = key_file("keys-foreign", "alice:k1\n", 0600);
        assert_int_equal(chown(f, pw ? pw->pw_uid : 65534, pw ? pw->pw_gid : 65534), 0);
        expect_bad_keys(NULL, f, "owned by another user");
    } else {
        print_message("(another user's key file: needs root, not checked)\n");
    }
}

static const char *g_api_key, *g_key_file, *g_cache_dir;
static int g_ns = RP_SRV_NS_AUTO, g_parallel = 1, g_sessions = 16, g_key_sessions;
static double g_key_kv_mb;

static void tweak(rp_server_config *c) {
    c->api_key = g_api_key;
    c->api_key_file = g_key_file;
    c->cache_namespace = g_ns;
    c->backend.parallel = g_parallel;
    c->backend.max_sessions = g_sessions;
    c->key_max_sessions = g_key_sessions;
    c->key_kv_mb = g_key_kv_mb;
    c->backend.cache_dir = g_cache_dir;
}

static void reset_config(void) {
    g_api_key = g_key_file = g_cache_dir = NULL;
    g_ns = RP_SRV_NS_AUTO;
    g_parallel = 1;
    g_sessions = 16;
    g_key_sessions = 0;
    g_key_kv_mb = 0;
}

/* The server refuses configurations that would silently weaken auth. */
static void test_server_refuses_empty_key(void **state) {
    (void)state;
    NEED_MODEL();
    rp_server_config cfg = rp_server_default_config();
    cfg.backend.model_path = rp_test_shared(SRVTEST_MODEL);
    cfg.backend.n_threads = 1;
    cfg.port = 0;
    cfg.quiet = true;
    rp_server *srv = NULL;
    cfg.api_key = "";
    assert_int_equal(rp_server_start(&cfg, &srv), RP_ERR_INVALID_ARG);
    assert_null(srv);
    assert_non_null(strstr(rp_last_error(), "empty"));
    cfg.api_key = NULL;
    cfg.cache_namespace = RP_SRV_NS_PER_KEY;   /* per key, and no keys */
    assert_int_equal(rp_server_start(&cfg, &srv), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "needs API keys"));
    cfg.cache_namespace = RP_SRV_NS_AUTO;
    cfg.api_key_file = key_file("keys-srv-loose", "a:k1\n", 0644);
    assert_true(rp_server_start(&cfg, &srv) != RP_OK);
    assert_non_null(strstr(rp_last_error(), "chmod 600"));
}

/* ------------------------------------------------------------ requests and sessions per key */

#define KEY_A "Authorization: Bearer key-of-alice\r\n"
#define KEY_B "Authorization: Bearer key-of-bob\r\n"
static const char *k_two_keys = "alice:key-of-alice\nbob:key-of-bob\n";

/* A chat turn as `key`; returns the response (status checked). */
static json_t *turn(uint16_t port, const char *key, const char *text, const char *extra, int want) {
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":2,\"temperature\":0%s%s}", text,
             extra ? "," : "", extra ? extra : "");
    resp r = http(port, "POST", "/v1/chat/completions", key, body);
    if (r.status != want) print_message("status %d: %.400s\n", r.status, r.body);
    assert_int_equal(r.status, want);
    json_t *j = parse(&r);
    resp_free(&r);
    return j;
}

/* A new session of `key`: its id in id[33]. */
static void new_session(uint16_t port, const char *key, char id[33]) {
    json_t *j = turn(port, key, "Once upon a time", "\"reprise_session\":true", 200);
    const char *sid = json_string_value(json_object_get(j, "reprise_session"));
    assert_non_null(sid);
    snprintf(id, 33, "%s", sid);
    json_decref(j);
}

/* A turn in session `id` as `key`: the HTTP status. */
static int use_session(uint16_t port, const char *key, const char *id) {
    char extra[128];
    snprintf(extra, sizeof extra, "\"reprise_session\":\"%s\"", id);
    char body[8192];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":2,"
             "\"temperature\":0,%s}", extra);
    resp r = http(port, "POST", "/v1/chat/completions", key, body);
    const int st = r.status;
    resp_free(&r);
    return st;
}

static void test_requests_carry_their_key(void **state) {
    (void)state;
    NEED_MODEL();
    reset_config();
    g_key_file = key_file("keys-two", k_two_keys, 0600);
    fixture f;
    start(&f, tweak);
    assert_int_equal(rp_server_n_keys(f.srv), 2);
    assert_true(rp_server_cache_per_key(f.srv));   /* more than one key: per-key by default */
    expect_error(f.port, "POST", "/v1/chat/completions", NULL, "{}", 401, "invalid_api_key");
    expect_error(f.port, "GET", "/v1/models", "Authorization: Bearer key-of-eve\r\n", NULL, 401, "invalid_api_key");
    resp r = http(f.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    json_decref(turn(f.port, KEY_A, "Hello", NULL, 200));
    json_decref(turn(f.port, KEY_B, "Hello", NULL, 200));

    /* a session is its key's: another key gets 404 for it (use and delete), its own key keeps it */
    char a1[33];
    new_session(f.port, KEY_A, a1);
    assert_int_equal(use_session(f.port, KEY_B, a1), 404);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", a1);
    expect_error(f.port, "DELETE", path, KEY_B, NULL, 404, "session_not_found");
    assert_int_equal(use_session(f.port, KEY_A, a1), 200);
    r = http(f.port, "DELETE", path, KEY_A, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(use_session(f.port, KEY_A, a1), 404);
    stop(&f);
}

static void test_session_quota_per_key(void **state) {
    (void)state;
    NEED_MODEL();
    reset_config();
    g_key_file = key_file("keys-two", k_two_keys, 0600);
    g_sessions = 4;   /* two keys: at most 2 each by default */
    fixture f;
    start(&f, tweak);
    char a1[33], a2[33], a3[33], b1[33], b2[33];
    new_session(f.port, KEY_A, a1);
    new_session(f.port, KEY_A, a2);
    new_session(f.port, KEY_B, b1);
    new_session(f.port, KEY_B, b2);   /* the table is full */
    /* A touches its own: B's sessions are now the least recently used of the table */
    assert_int_equal(use_session(f.port, KEY_A, a1), 200);
    assert_int_equal(use_session(f.port, KEY_A, a2), 200);
    const double ev0 = metric_as(f.port, KEY_A, "reprise_session_evictions_total");
    /* A's third: over its quota, its own least recently used goes (a1) — never one of B's */
    new_session(f.port, KEY_A, a3);
    assert_int_equal(use_session(f.port, KEY_B, b1), 200);
    assert_int_equal(use_session(f.port, KEY_B, b2), 200);
    assert_int_equal(use_session(f.port, KEY_A, a1), 404);
    assert_int_equal(use_session(f.port, KEY_A, a2), 200);
    assert_int_equal(use_session(f.port, KEY_A, a3), 200);
    assert_true(metric_as(f.port, KEY_A, "reprise_session_evictions_total") >= ev0 + 1);
    stop(&f);

    /* an explicit quota of one: each new session of a key replaces that key's previous one */
    g_key_sessions = 1;
    start(&f, tweak);
    new_session(f.port, KEY_A, a1);
    new_session(f.port, KEY_B, b1);
    new_session(f.port, KEY_A, a2);
    assert_int_equal(use_session(f.port, KEY_A, a1), 404);
    assert_int_equal(use_session(f.port, KEY_A, a2), 200);
    assert_int_equal(use_session(f.port, KEY_B, b1), 200);
    stop(&f);

    /* a KV quota: over it, the key's older idle sessions go when a turn ends (the current one stays) */
    g_key_sessions = 0;
    g_sessions = 16;
    g_key_kv_mb = 0.001;   /* ~1 KB: less than one session's prompt */
    start(&f, tweak);
    new_session(f.port, KEY_A, a1);
    new_session(f.port, KEY_B, b1);
    new_session(f.port, KEY_A, a2);
    assert_int_equal(use_session(f.port, KEY_A, a1), 404);
    assert_int_equal(use_session(f.port, KEY_B, b1), 200);   /* B's own quota, untouched by A */
    assert_int_equal(use_session(f.port, KEY_A, a2), 200);
    stop(&f);
}

/* ------------------------------------------------------------ cache namespaces */

static const char *k_story = "Tom had a red ball. He liked to play with it in the park every day with his dog.";

static json_int_t cached(json_t *j) { return jint(j, "usage.prompt_tokens_details.cached_tokens"); }

/* Scheduler backend: a finished request's sequence is kept for the next one (llama-server's slot cache). A
 * sequence kept for one key is never continued by another's request (persist off: the reuse engine caches
 * nothing, so only the kept sequences could carry KV across). */
static void test_namespace_kept_sequences(void **state) {
    (void)state;
    NEED_MODEL();
    reset_config();
    g_key_file = key_file("keys-two", k_two_keys, 0600);
    g_parallel = 2;
    const char *np = "\"reprise_cache\":{\"persist\":false}";
    for (int shared = 0; shared < 2; shared++) {
        g_ns = shared ? RP_SRV_NS_SHARED : RP_SRV_NS_AUTO;
        fixture f;
        start(&f, tweak);
        assert_true(rp_server_cache_per_key(f.srv) == !shared);
        json_t *a = turn(f.port, KEY_A, k_story, np, 200);
        assert_int_equal(cached(a), 0);
        json_t *b = turn(f.port, KEY_B, k_story, np, 200);
        json_t *a2 = turn(f.port, KEY_A, k_story, np, 200);
        print_message("%s: A %lld, then B %lld, then A %lld cached tokens\n", shared ? "shared" : "per-key",
                      (long long)cached(a), (long long)cached(b), (long long)cached(a2));
        if (shared) assert_true(cached(b) > 0);   /* one cache for all: B reuses what A left */
        else assert_int_equal(cached(b), 0);       /* B is never told that A sent this prompt */
        assert_true(cached(a2) > 0);               /* A reuses its own */
        json_decref(a);
        json_decref(b);
        json_decref(a2);
        stop(&f);
    }
}

/* The reuse engine's cache (and the store behind it): what one key's requests cached is reused by its own
 * later requests, never reported as cached to another key's. */
static void test_namespace_engine(void **state) {
    (void)state;
    NEED_MODEL();
    if (!RP_TEST_NS_ENGINE_WIRED) {
        RP_SKIP("namespace not wired into the reuse engine (src/server/backend_reuse.c rp_backend_reuse_opts; "
                "build with -DRP_TEST_NS_ENGINE_WIRED=1 to run)\n");
    }
    reset_config();
    g_key_file = key_file("keys-two", k_two_keys, 0600);
    for (int backend = 0; backend < 2; backend++) {
        g_parallel = backend ? 2 : 1;
        fixture f;
        start(&f, tweak);
        json_t *a = turn(f.port, KEY_A, k_story, NULL, 200);
        json_t *b = turn(f.port, KEY_B, k_story, NULL, 200);
        json_t *b2 = turn(f.port, KEY_B, k_story, NULL, 200);
        json_t *a2 = turn(f.port, KEY_A, k_story, NULL, 200);
        print_message("%s: A %lld, B %lld, B again %lld, A again %lld cached tokens\n", backend ? "sched" : "core",
                      (long long)cached(a), (long long)cached(b), (long long)cached(b2), (long long)cached(a2));
        assert_int_equal(cached(b), 0);
        assert_int_equal(jint(b, "usage.reprise.reused_nonprefix"), 0);
        assert_true(cached(b2) > 0);
        assert_true(cached(a2) > 0);
        json_decref(a);
        json_decref(b);
        json_decref(b2);
        json_decref(a2);
        stop(&f);
    }
    /* the flash store keeps the namespaces: after a restart, B still finds nothing of A's, A all of it */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ns-store", rp_test_tmpdir());
    g_cache_dir = dir;
    g_parallel = 1;
    fixture f;
    start(&f, tweak);
    json_decref(turn(f.port, KEY_A, k_story, NULL, 200));
    stop(&f);   /* flushes the store */
    start(&f, tweak);
    json_t *b = turn(f.port, KEY_B, k_story, NULL, 200);
    json_t *a = turn(f.port, KEY_A, k_story, NULL, 200);
    print_message("store, restarted: B %lld, A %lld cached tokens\n", (long long)cached(b), (long long)cached(a));
    assert_int_equal(cached(b), 0);
    assert_true(cached(a) > 0);
    json_decref(a);
    json_decref(b);
    stop(&f);
}

/* Shared namespace (one key, or --cache-namespace shared): the one cache serves every request — the
 * behaviour per-key namespaces exist to remove, checked so the test above cannot pass by reusing nothing. */
static void test_namespace_shared_reuses(void **state) {
    (void)state;
    NEED_MODEL();
    reset_config();
    g_key_file = key_file("keys-two", k_two_keys, 0600);
    g_ns = RP_SRV_NS_SHARED;
    fixture f;
    start(&f, tweak);
    json_t *a = turn(f.port, KEY_A, k_story, NULL, 200);
    json_t *b = turn(f.port, KEY_B, k_story, NULL, 200);
    assert_true(cached(b) > 0);
    json_decref(a);
    json_decref(b);
    stop(&f);
    /* one key: shared by default */
    reset_config();
    g_api_key = "only-key";
    start(&f, tweak);
    assert_false(rp_server_cache_per_key(f.srv));
    stop(&f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_sources),
        cmocka_unit_test(test_server_refuses_empty_key),
        cmocka_unit_test(test_requests_carry_their_key),
        cmocka_unit_test(test_session_quota_per_key),
        cmocka_unit_test(test_namespace_kept_sequences),
        cmocka_unit_test(test_namespace_engine),
        cmocka_unit_test(test_namespace_shared_reuses),
    };
    return rp_test_main(tests, NULL, NULL);
}
