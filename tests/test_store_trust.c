/* test_store_trust.c — what the flash store trusts: owner and modes of its directory and files, keyed checksums,
 * the upgrade of unkeyed stores, and failed writes (a full disk) reported by their cause and counted. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "kernels/types.h"
#include "reuse/chunk.h"
#include "store/store.h"

#define N_LAYER 4
#define ROW 64
#define SALT 0x7e57ab1e5a17ull

static const char *subdir(const char *name) {
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/trust-%s", rp_test_tmpdir(), name);
    return b;
}

static const char *path_in(const char *dir, const char *rel) {
    static char buf[8][4400];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", dir, rel);
    return b;
}

static rp_status open_rw(const char *dir, rp_payload_mode mode, rp_store **s) {
    rp_store_params p = rp_store_default_params();
    p.payload = mode;
    *s = NULL;
    rp_status st = rp_store_open(dir, &p, s);
    if (st == RP_OK) assert_int_equal(rp_store_bind_model(*s, SALT, RP_TYPE_F16, N_LAYER, ROW, "fake", true), RP_OK);
    return st;
}

static rp_status open_ro(const char *dir, rp_store **s) {
    rp_store_params p = rp_store_default_params();
    p.read_only = true;
    *s = NULL;
    rp_status st = rp_store_open(dir, &p, s);
    if (st == RP_OK) assert_int_equal(rp_store_bind_salt(*s, SALT), RP_OK);
    return st;
}

/* One chunk: tokens 1..n (+ tok_add), payload bytes from `seed`. */
typedef struct chunk {
    rp_token t[1024];
    int32_t n;
    uint64_t id, hash;
    uint8_t *kv;
    size_t kv_bytes;
} chunk;

static void make_chunk(chunk *c, uint64_t id, int32_t n, int tok_add, uint8_t seed) {
    memset(c, 0, sizeof *c);
    c->id = id;
    c->n = n;
    for (int32_t i = 0; i < n; i++) c->t[i] = (rp_token)(1 + i + tok_add);
    c->hash = rp_chunk_hash(c->t, n, SALT);
    c->kv_bytes = (size_t)N_LAYER * 2 * (size_t)n * ROW;
    c->kv = malloc(c->kv_bytes);
    assert_non_null(c->kv);
    for (size_t i = 0; i < c->kv_bytes; i++) c->kv[i] = (uint8_t)(seed + i * 7);
}

static rp_status put(rp_store *s, const chunk *c) {
    rp_store_put_item it = {.meta = {.id = c->id, .hash = c->hash, .chain = rp_chunk_chain(0, c->hash),
                                     .n_tokens = c->n, .exact = true, .recompute_ms = 1, .heat = 1, .last_used = 1},
                            .tokens = c->t,
                            .kv = c->kv};
    rp_status st = rp_store_put(s, &it, 1, 10);
    if (st == RP_OK) st = it.status;
    return st;
}

/* Looks the chunk up by content and loads it; true when found and its payload equals `want`. */
static bool loads(rp_store *s, const chunk *c, const uint8_t *want) {
    rp_store_chunk m;
    bool found = false;
    assert_int_equal(rp_store_find_hash(s, c->hash, c->t, c->n, &m, &found), RP_OK);
    if (!found) return false;
    uint8_t *buf = malloc(c->kv_bytes);
    bool ok = rp_store_load(s, &m, buf) == RP_OK && memcmp(buf, want, c->kv_bytes) == 0;
    free(buf);
    rp_store_chunk_clear(&m);
    return ok;
}

static void sql(const char *db, const char *stmt) {
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(h, stmt, NULL, NULL, &msg);
    if (rc != SQLITE_OK) print_message("sql: %s: %s\n", stmt, msg ? msg : "?");
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_free(msg);
    sqlite3_close(h);
}

/* Counts corrupt rows reported by a verify on a read-only handle. */
static uint64_t verify_bad(const char *dir, uint64_t *ok) {
    rp_store *s = NULL;
    assert_int_equal(open_ro(dir, &s), RP_OK);
    uint64_t good = 0, bad = 0;
    assert_int_equal(rp_store_verify(s, false, NULL, NULL, &good, &bad), RP_OK);
    rp_store_close(s);
    if (ok) *ok = good;
    return bad;
}

static mode_t mode_of(const char *path) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_mode & 0777;
}

static void expect_refused(rp_status st, const char *path, const char *what) {
    if (getenv("RP_TEST_VERBOSE")) print_message("refused: %s\n", rp_last_error());
    if (st != RP_ERR_IO) print_message("expected a refusal of %s, got %d: %s\n", path, st, rp_last_error());
    assert_int_equal(st, RP_ERR_IO);
    const char *e = rp_last_error();
    if (!strstr(e, path) || !strstr(e, what) || !strstr(e, "refusing")) print_message("message: %s\n", e);
    assert_non_null(strstr(e, path));
    assert_non_null(strstr(e, what));
    assert_non_null(strstr(e, "refusing"));
}

/* A populated store (one BLOB chunk, one file chunk) in a fresh dir. */
static void populate(const char *dir, chunk *blob, chunk *file) {
    rp_store *s = NULL;
    assert_int_equal(open_rw(dir, RP_PAYLOAD_BLOB, &s), RP_OK);
    assert_int_equal(put(s, blob), RP_OK);
    rp_store_close(s);
    assert_int_equal(open_rw(dir, RP_PAYLOAD_FILE, &s), RP_OK);
    assert_int_equal(put(s, file), RP_OK);
    rp_store_close(s);
}

/* The one payload file of chunk `id` (kv/XX/ID-SUM.kv), found by listing the directory. */
static const char *payload_file(const char *dir, uint64_t id) {
    static char out[4700];
    char sub[4400], pre[64];
    snprintf(sub, sizeof sub, "%s/kv/%02x", dir, (unsigned)(id & 0xff));
    snprintf(pre, sizeof pre, "%llu-", (unsigned long long)id);
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | grep '^%s' | grep '\\.kv$' | head -1", sub, pre);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char name[256] = "";
    if (!fgets(name, sizeof name, f)) name[0] = 0;
    pclose(f);
    name[strcspn(name, "\n")] = 0;
    if (!name[0]) return NULL;
    snprintf(out, sizeof out, "%s/%s", sub, name);
    return out;
}

/* ------------------------------------------------------------ modes */

static void test_loose_modes_refused(void **state) {
    (void)state;
    umask(022);
    chunk a, b;
    make_chunk(&a, 1, 20, 0, 1);
    make_chunk(&b, 2, 200, 1000, 2);
    rp_store *s = NULL;

    /* a group/world-writable store directory: refused by writers and readers, and left as it is */
    const char *d1 = subdir("dir777");
    populate(d1, &a, &b);
    assert_int_equal(chmod(d1, 0777), 0);
    expect_refused(open_rw(d1, RP_PAYLOAD_AUTO, &s), d1, "mode 0777");
    assert_null(s);
    expect_refused(open_ro(d1, &s), d1, "writable by group/others");
    assert_int_equal(mode_of(d1), 0777);   /* never repaired: what may have been planted stays */
    assert_int_equal(chmod(d1, 0770), 0);
    expect_refused(open_rw(d1, RP_PAYLOAD_AUTO, &s), d1, "mode 0770");
    assert_int_equal(chmod(d1, 0755), 0);  /* readable by others only: a writer tightens it */
    assert_int_equal(open_rw(d1, RP_PAYLOAD_AUTO, &s), RP_OK);
    assert_true(loads(s, &a, a.kv));
    assert_true(loads(s, &b, b.kv));
    rp_store_close(s);
    assert_int_equal(mode_of(d1), 0700);

    /* kv/ group-writable */
    const char *kv = path_in(d1, "kv");
    assert_int_equal(chmod(kv, 0777), 0);
    expect_refused(open_rw(d1, RP_PAYLOAD_AUTO, &s), kv, "writable");
    expect_refused(open_ro(d1, &s), kv, "writable");
    assert_int_equal(chmod(kv, 0700), 0);

    /* the database, its WAL and shared memory, the lock: group/world-writable is refused */
    const char *files[] = {"kv.db", "kv.db-wal", "kv.db-shm", "lock"};
    for (int i = 0; i < 4; i++) {
        const char *f = path_in(d1, files[i]);
        int fd = open(f, O_RDWR | O_CREAT, 0600);   /* -wal / -shm may be gone after a clean close */
        assert_true(fd >= 0);
        close(fd);
        assert_int_equal(chmod(f, 0666), 0);
        expect_refused(open_rw(d1, RP_PAYLOAD_AUTO, &s), f, "mode 0666");
        if (i < 3) expect_refused(open_ro(d1, &s), f, "writable");   /* readers never touch the lock */
        assert_int_equal(chmod(f, 0620), 0);
        expect_refused(open_rw(d1, RP_PAYLOAD_AUTO, &s), f, "mode 0620");
        /* readable by others: a reader leaves it, a writer tightens it to 0600 */
        assert_int_equal(chmod(f, 0644), 0);
        if (i < 3) {
            assert_int_equal(open_ro(d1, &s), RP_OK);
            rp_store_close(s);
            if (i == 0) assert_int_equal(mode_of(f), 0644);   /* (SQLite gives -wal / -shm the database's mode) */
        }
        assert_int_equal(open_rw(d1, RP_PAYLOAD_AUTO, &s), RP_OK);
        assert_true(loads(s, &a, a.kv));
        rp_store_close(s);
        if (access(f, F_OK) == 0) assert_int_equal(mode_of(f), 0600);
    }

    /* a symlink in place of the database: refused */
    const char *d2 = subdir("dblink");
    populate(d2, &a, &b);
    char moved[4400];
    snprintf(moved, sizeof moved, "%s.real", path_in(d2, "kv.db"));
    assert_int_equal(rename(path_in(d2, "kv.db"), moved), 0);
    assert_int_equal(symlink(moved, path_in(d2, "kv.db")), 0);
    rp_store_params p = rp_store_default_params();
    assert_int_equal(rp_store_open(d2, &p, &s), RP_ERR_IO);
    assert_non_null(strstr(rp_last_error(), "not a regular file"));

    /* a payload file writable by others is a corrupt chunk: never loaded, reported by verify */
    const char *d3 = subdir("payload666");
    populate(d3, &a, &b);
    const char *pf = payload_file(d3, b.id);
    assert_non_null(pf);
    assert_int_equal(mode_of(pf), 0600);
    assert_int_equal(verify_bad(d3, NULL), 0);
    assert_int_equal(chmod(pf, 0666), 0);
    uint64_t ok = 0;
    assert_int_equal(verify_bad(d3, &ok), 1);
    assert_int_equal(ok, 1);
    assert_int_equal(open_ro(d3, &s), RP_OK);
    assert_true(loads(s, &a, a.kv));
    assert_false(loads(s, &b, b.kv));
    rp_store_close(s);
    free(a.kv);
    free(b.kv);
}

/* Another user's directory or files (only root can make them here). */
static void test_foreign_owner_refused(void **state) {
    (void)state;
    if (geteuid() != 0) RP_SKIP("chown to another user needs root\n");
    const struct passwd *pw = getpwnam("nobody");
    const uid_t other = pw ? pw->pw_uid : 65534;
    const gid_t og = pw ? pw->pw_gid : 65534;
    chunk a, b;
    make_chunk(&a, 1, 20, 0, 3);
    make_chunk(&b, 2, 200, 1000, 4);
    rp_store *s = NULL;
    const char *d = subdir("foreign");
    populate(d, &a, &b);
    /* the directory, mode 0700 and all: not ours */
    assert_int_equal(chown(d, other, og), 0);
    expect_refused(open_rw(d, RP_PAYLOAD_AUTO, &s), d, "owned by another user");
    expect_refused(open_ro(d, &s), d, "owned by another user");
    assert_int_equal(chown(d, 0, 0), 0);
    /* the database */
    const char *db = path_in(d, "kv.db");
    assert_int_equal(chown(db, other, og), 0);
    expect_refused(open_rw(d, RP_PAYLOAD_AUTO, &s), db, "owned by another user");
    expect_refused(open_ro(d, &s), db, "owned by another user");
    assert_int_equal(chown(db, 0, 0), 0);
    /* a payload file: the chunk is not used */
    const char *pf = payload_file(d, b.id);
    assert_non_null(pf);
    assert_int_equal(chown(pf, other, og), 0);
    assert_int_equal(open_ro(d, &s), RP_OK);
    assert_true(loads(s, &a, a.kv));
    assert_false(loads(s, &b, b.kv));
    rp_store_close(s);
    assert_int_equal(verify_bad(d, NULL), 1);
    free(a.kv);
    free(b.kv);
}

/* ------------------------------------------------------------ keyed checksums */

/* Replaces A's row `id` (and its payload) with B's: what someone who can write A's database, but never read
 * its secret, could plant. */
static void transplant(const char *dir_a, const char *dir_b, uint64_t id) {
    char stmt[12000];
    snprintf(stmt, sizeof stmt,
             "ATTACH '%s/kv.db' AS b;"
             "UPDATE main.chunks SET checksum = (SELECT checksum FROM b.chunks WHERE id = %llu),"
             "  layers = (SELECT layers FROM b.chunks WHERE id = %llu),"
             "  stored_bytes = (SELECT stored_bytes FROM b.chunks WHERE id = %llu) WHERE id = %llu;"
             "UPDATE main.payloads SET data = (SELECT data FROM b.payloads WHERE id = %llu) WHERE id = %llu;",
             dir_b, (unsigned long long)id, (unsigned long long)id, (unsigned long long)id, (unsigned long long)id,
             (unsigned long long)id, (unsigned long long)id);
    sql(path_in(dir_a, "kv.db"), stmt);
}

static void test_keyed_checksums(void **state) {
    (void)state;
    /* the same chunk (id, tokens, geometry) in two stores with other KV */
    chunk a1, a2, b1, b2;
    make_chunk(&a1, 1, 20, 0, 10);
    make_chunk(&a2, 2, 200, 1000, 11);
    make_chunk(&b1, 1, 20, 0, 20);
    make_chunk(&b2, 2, 200, 1000, 21);
    const char *da = subdir("key-a"), *db = subdir("key-b");
    populate(da, &a1, &a2);
    populate(db, &b1, &b2);
    uint64_t ok = 0;
    assert_int_equal(verify_bad(da, &ok), 0);   /* healthy stores verify */
    assert_int_equal(ok, 2);
    assert_int_equal(verify_bad(db, &ok), 0);
    assert_int_equal(ok, 2);

    /* B's BLOB chunk planted in A: its checksums were made with B's secret */
    transplant(da, db, 1);
    /* B's file chunk: its row, and its payload file under the name B's row gives it */
    transplant(da, db, 2);
    const char *bf = payload_file(db, 2);
    assert_non_null(bf);
    char dst[4800], cmd[9800];
    snprintf(dst, sizeof dst, "%s/kv/02/%s", da, strrchr(bf, '/') + 1);
    snprintf(cmd, sizeof cmd, "cp -p '%s' '%s'", bf, dst);
    assert_int_equal(system(cmd), 0);

    rp_store *s = NULL;
    assert_int_equal(open_ro(da, &s), RP_OK);
    assert_false(loads(s, &a1, b1.kv));   /* a miss: the keyed metadata checksum fails */
    assert_false(loads(s, &a2, b2.kv));
    rp_store_close(s);
    assert_int_equal(verify_bad(da, &ok), 2);
    assert_int_equal(ok, 0);
    /* B itself is untouched and still verifies */
    assert_int_equal(verify_bad(db, NULL), 0);
    assert_int_equal(open_ro(db, &s), RP_OK);
    assert_true(loads(s, &b1, b1.kv));
    assert_true(loads(s, &b2, b2.kv));
    rp_store_close(s);

    /* the secret: per store, SECRET_BYTES of random bytes in the database */
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(path_in(da, "kv.db"), &h), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(h, "ATTACH ?1 AS b", -1, &q, NULL), SQLITE_OK);
    sqlite3_bind_text(q, 1, path_in(db, "kv.db"), -1, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT length(m.key), m.key <> b.key FROM main.secret m, b.secret b "
                                        "WHERE m.id = 1 AND b.id = 1",
                                        -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 192);
    assert_int_equal(sqlite3_column_int(q, 1), 1);
    sqlite3_finalize(q);
    sqlite3_close(h);
    free(a1.kv);
    free(a2.kv);
    free(b1.kv);
    free(b2.kv);
}

/* A store of older builds (schema 1, unkeyed): a reader refuses it, a writer drops its chunks and upgrades it. */
static void test_unkeyed_store_upgraded(void **state) {
    (void)state;
    chunk a, b;
    make_chunk(&a, 1, 20, 0, 5);
    make_chunk(&b, 2, 200, 1000, 6);
    const char *d = subdir("unkeyed");
    populate(d, &a, &b);
    assert_non_null(payload_file(d, b.id));
    /* what a schema-1 database looks like: no secret table, schema 1 */
    sql(path_in(d, "kv.db"), "DROP TABLE secret; UPDATE meta SET value = 1 WHERE key = 'schema';");
    rp_store *s = NULL;
    rp_store_params rp = rp_store_default_params();
    rp.read_only = true;
    assert_int_equal(rp_store_open(d, &rp, &s), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "older builds"));
    assert_non_null(strstr(rp_last_error(), "upgrade"));
    assert_int_equal(open_rw(d, RP_PAYLOAD_AUTO, &s), RP_OK);
    assert_int_equal(rp_store_dropped_unkeyed(s), 2);
    assert_false(loads(s, &a, a.kv));
    assert_false(loads(s, &b, b.kv));
    assert_null(payload_file(d, b.id));   /* the dropped chunk's file went too */
    assert_int_equal(put(s, &a), RP_OK);   /* the upgraded store works */
    assert_true(loads(s, &a, a.kv));
    rp_store_close(s);
    uint64_t ok = 0;
    assert_int_equal(verify_bad(d, &ok), 0);
    assert_int_equal(ok, 1);
    assert_int_equal(open_rw(d, RP_PAYLOAD_AUTO, &s), RP_OK);   /* upgraded once */
    assert_int_equal(rp_store_dropped_unkeyed(s), 0);
    rp_store_close(s);
    free(a.kv);
    free(b.kv);
}

/* ------------------------------------------------------------ a full disk */

static char g_mnt[4096];

static int unmount_teardown(void **state) {
    (void)state;
    if (g_mnt[0]) {
        umount2(g_mnt, MNT_DETACH);
        g_mnt[0] = 0;
    }
    return 0;
}

/* A tmpfs of `kib` KiB at a fresh directory (root only); NULL when mounting is not allowed here. */
static const char *tiny_fs(const char *name, int kib) {
    const char *d = subdir(name);
    mkdir(d, 0700);
    char opt[64];
    snprintf(opt, sizeof opt, "size=%dk,mode=0700", kib);
    if (mount("tmpfs", d, "tmpfs", 0, opt) != 0) {
        print_message("cannot mount a %d KiB tmpfs at %s (%s): a full disk needs root with CAP_SYS_ADMIN\n", kib, d,
                      strerror(errno));
        return NULL;
    }
    snprintf(g_mnt, sizeof g_mnt, "%s", d);
    return d;
}

static void expect_disk_full(rp_status st, const char *dir) {
    const char *e = rp_last_error();
    print_message("full disk: %s\n", e);
    if (st != RP_ERR_IO || !strstr(e, "disk full writing chunk") || !strstr(e, dir) || strstr(e, "rollback"))
        print_message("status %d: %s\n", st, e);
    assert_int_equal(st, RP_ERR_IO);
    assert_non_null(strstr(e, "disk full writing chunk"));
    assert_non_null(strstr(e, dir));
    assert_null(strstr(e, "rollback"));
    assert_null(strstr(e, "no transaction"));
}

static void test_disk_full(void **state) {
    (void)state;
    for (int pass = 0; pass < 2; pass++) {   /* BLOBs: SQLITE_FULL; files: ENOSPC */
        const rp_payload_mode mode = pass == 0 ? RP_PAYLOAD_BLOB : RP_PAYLOAD_FILE;
        const char *d = tiny_fs(pass == 0 ? "full-blob" : "full-file", 320);
        if (!d) RP_SKIP("no tmpfs to fill\n");
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/store", d);
        rp_store *s = NULL;
        assert_int_equal(open_rw(dir, mode, &s), RP_OK);
        rp_status st = RP_OK;
        chunk c;
        int i = 0;
        for (; i < 64 && st == RP_OK; i++) {
            /* BLOBs of 64 KiB fill the WAL until a commit fails; a 256 KiB file does not fit at all */
            make_chunk(&c, 100 + (uint64_t)i, pass == 0 ? 128 : 512, 600 * i, (uint8_t)i);
            st = put(s, &c);
            free(c.kv);
        }
        assert_true(i < 64);   /* the disk filled up */
        expect_disk_full(st, dir);
        rp_store_stats ss;
        assert_int_equal(rp_store_stats_get(s, &ss), RP_OK);
        assert_true(ss.write_failures >= 1);
        /* room made (the operator frees space): the same handle goes on, and records the failure count */
        char opt[64];
        snprintf(opt, sizeof opt, "size=%dk,mode=0700", 4096);
        assert_int_equal(mount("tmpfs", d, "tmpfs", MS_REMOUNT, opt), 0);
        make_chunk(&c, 900, 4, 9000, 1);
        assert_int_equal(put(s, &c), RP_OK);
        assert_true(loads(s, &c, c.kv));
        free(c.kv);
        rp_store_close(s);
        assert_int_equal(open_ro(dir, &s), RP_OK);
        assert_int_equal(rp_store_stats_get(s, &ss), RP_OK);
        assert_int_equal(ss.write_failures, 1);   /* in the database: `reprise cache stats` shows it */
        assert_int_equal(ss.n_chunks, (uint64_t)i);   /* the i - 1 that fit, and the small one */
        rp_store_close(s);
        assert_int_equal(verify_bad(dir, NULL), 0);   /* nothing half-written was left behind */
        assert_int_equal(umount2(d, MNT_DETACH), 0);
        g_mnt[0] = 0;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loose_modes_refused),
        cmocka_unit_test(test_foreign_owner_refused),
        cmocka_unit_test(test_keyed_checksums),
        cmocka_unit_test(test_unkeyed_store_upgraded),
        cmocka_unit_test_teardown(test_disk_full, unmount_teardown),
    };
    return rp_test_main(tests, NULL, NULL);
}
