/* auth.c — API keys: loading (a key, a key file checked like an ssh private key), identities, bearer matching. */
#define _GNU_SOURCE
#include "server/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/fsperm.h"

#define KEY_FILE_MAX ((size_t)1 << 20)
#define NS_SEED 0x6b65792d6e73ull   /* "key-ns" */

void rp_srv_keys_free(rp_srv_keys *k) {
    if (!k) return;
    for (int i = 0; i < k->n; i++) {
        if (k->v[i].secret) explicit_bzero(k->v[i].secret, k->v[i].len);
        free(k->v[i].secret);
    }
    free(k->v);
    k->v = NULL;
    k->n = 0;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

/* Adds one key; `where` names its source for errors ("--api-key", "FILE:LINE"). */
static rp_status add_key(rp_srv_keys *k, const char *name, size_t nl, const char *key, size_t kl, const char *where) {
    if (kl == 0)
        return rp_errorf(RP_ERR_INVALID_ARG,
                         "%s: the API key is empty; an empty key would let anyone in — for no authentication give no "
                         "key at all", where);
    for (size_t i = 0; i < kl; i++)
        if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f)
            return rp_errorf(RP_ERR_INVALID_ARG,
                             "%s: the API key has a space, control or non-ASCII character at byte %zu (keys are "
                             "printable ASCII without spaces)", where, i + 1);
    if (nl == 0 || nl > RP_SRV_KEY_NAME_MAX)
        return rp_errorf(RP_ERR_INVALID_ARG, "%s: a key name must be 1-%d characters", where, RP_SRV_KEY_NAME_MAX);
    for (size_t i = 0; i < nl; i++)
        if (!name_char(name[i]))
            return rp_errorf(RP_ERR_INVALID_ARG, "%s: the key name '%.*s' may only use A-Z a-z 0-9 _ . -", where,
                             (int)nl, name);
    if (k->n >= RP_SRV_KEYS_MAX) return rp_errorf(RP_ERR_RANGE, "%s: more than %d API keys", where, RP_SRV_KEYS_MAX);
    for (int i = 0; i < k->n; i++) {
        if (strlen(k->v[i].name) == nl && !memcmp(k->v[i].name, name, nl))
            return rp_errorf(RP_ERR_INVALID_ARG, "%s: the key name '%.*s' is used twice", where, (int)nl, name);
        if (k->v[i].len == kl && !memcmp(k->v[i].secret, key, kl))
            return rp_errorf(RP_ERR_INVALID_ARG, "%s: the same key is configured twice (also as '%s')", where,
                             k->v[i].name);
    }
    rp_srv_key *nv = realloc(k->v, sizeof *nv * (size_t)(k->n + 1));
    if (!nv) return rp_errorf(RP_ERR_NOMEM, "API keys: out of memory");
    k->v = nv;
    rp_srv_key *e = &k->v[k->n];
    memset(e, 0, sizeof *e);
    e->secret = malloc(kl + 1);
    if (!e->secret) return rp_errorf(RP_ERR_NOMEM, "API keys: out of memory");
    memcpy(e->secret, key, kl);
    e->secret[kl] = '\0';
    e->len = kl;
    memcpy(e->name, name, nl);
    e->ns = XXH3_64bits_withSeed(name, nl, NS_SEED) | 1;
    k->n++;
    return RP_OK;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

rp_status rp_srv_keys_parse(const char *text, size_t len, const char *origin, rp_srv_keys *out) {
    int line = 0, n_file = 0;
    for (size_t p = 0; p < len;) {
        size_t e = p;
        while (e < len && text[e] != '\n') e++;
        line++;
        const char *a = text + p, *z = text + e;
        p = e + 1;
        while (a < z && is_space(*a)) a++;
        while (z > a && is_space(z[-1])) z--;
        if (a == z || *a == '#') continue;
        char where[4200], name[32];
        snprintf(where, sizeof where, "%s:%d", origin, line);
        const char *colon = memchr(a, ':', (size_t)(z - a));
        const char *nm = a, *key = a;
        size_t nl, kl = (size_t)(z - a);
        n_file++;
        if (colon) {
            const char *ne = colon;
            while (ne > a && is_space(ne[-1])) ne--;
            nl = (size_t)(ne - a);
            key = colon + 1;
            while (key < z && is_space(*key)) key++;
            kl = (size_t)(z - key);
        } else {
            snprintf(name, sizeof name, "key-%d", n_file);
            nm = name;
            nl = strlen(name);
        }
        RP_TRY(add_key(out, nm, nl, key, kl, where));
    }
    return RP_OK;
}

static rp_status load_file(const char *path, rp_srv_keys *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rp_errorf(RP_ERR_IO, "--api-key-file '%s': %s", path, strerror(errno));
    struct stat sb;
    rp_status st = RP_OK;
    if (fstat(fd, &sb) != 0) st = rp_errorf(RP_ERR_IO, "--api-key-file '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = rp_errorf(RP_ERR_IO, "--api-key-file '%s' is not a regular file", path);
    else if (sb.st_size > (off_t)KEY_FILE_MAX)
        st = rp_errorf(RP_ERR_RANGE, "--api-key-file '%s' is larger than %zu bytes", path, KEY_FILE_MAX);
    else
        st = rp_fsperm_check("--api-key-file", path, &sb, S_IRWXG | S_IRWXO,
                             "the keys would be readable by other local users: chmod 600 it");
    char *buf = NULL;
    size_t n = 0;
    if (st == RP_OK) {
        buf = malloc((size_t)sb.st_size + 1);
        if (!buf) st = rp_errorf(RP_ERR_NOMEM, "--api-key-file: out of memory");
    }
    while (st == RP_OK && n < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)sb.st_size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = rp_errorf(RP_ERR_IO, "--api-key-file '%s': %s", path, strerror(errno));
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (st == RP_OK) st = rp_srv_keys_parse(buf, n, path, out);
    if (st == RP_OK && out->n == 0) st = rp_errorf(RP_ERR_INVALID_ARG, "--api-key-file '%s' has no key", path);
    if (buf) explicit_bzero(buf, n);
    free(buf);
    return st;
}

rp_status rp_srv_keys_load(const char *key, const char *key_file, rp_srv_keys *out) {
    memset(out, 0, sizeof *out);
    rp_status st = RP_OK;
    if (key) st = add_key(out, "default", 7, key, strlen(key), "--api-key / REPRISE_API_KEY");
    if (st == RP_OK && key_file) st = load_file(key_file, out);
    if (st != RP_OK) rp_srv_keys_free(out);
    return st;
}

static bool ct_equal(const char *a, size_t al, const char *b, size_t bl) {
    /* time depends only on the lengths, never on where the bytes differ */
    size_t n = al > bl ? al : bl;
    unsigned char d = (unsigned char)(al != bl);
    for (size_t i = 0; i < n; i++) d |= (unsigned char)((i < al ? a[i] : 0) ^ (i < bl ? b[i] : 0));
    return d == 0;
}

int rp_srv_keys_match(const rp_srv_keys *k, const char *h) {
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return -1;
    h += 7;
    while (*h == ' ') h++;
    const size_t hl = strlen(h);
    int hit = -1;
    for (int i = 0; i < k->n; i++)
        if (ct_equal(h, hl, k->v[i].secret, k->v[i].len)) hit = i;
    return hit;
}
