/* auth.h — API keys: where they come from (a key, a key file), each key's identity (name, cache namespace), bearer matching. */
#ifndef RP_SERVER_AUTH_H
#define RP_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "reprise.h"

#define RP_SRV_KEY_NAME_MAX 64
#define RP_SRV_KEYS_MAX 4096

/* One configured key. Its identity is its index in rp_srv_keys (what a
 * request and the sessions it owns carry) and its name (for people). */
typedef struct rp_srv_key {
    char name[RP_SRV_KEY_NAME_MAX + 1];
    char *secret;
    size_t len;
    uint64_t ns;     /* the key's cache namespace: a hash of its name, never 0 (0 is the shared namespace) */
} rp_srv_key;

typedef struct rp_srv_keys {
    rp_srv_key *v;
    int n;
} rp_srv_keys;

/* The keys from `key` (one key, named "default"; NULL: none) and
 * `key_file` (NULL: none), together. Errors (RP_ERR_INVALID_ARG / RP_ERR_IO,
 * naming the source and line): an empty key ("" or an empty line's key —
 * no authentication is the absence of a key, never an empty one), a key
 * with whitespace or control characters, a duplicate key or name, a key
 * file that is not a regular file owned by the user or that group/others
 * can read or write (like ssh's private keys: chmod 600 it).
 *
 * Key file format: one key per line, `NAME:KEY` or just `KEY` (named
 * "key-N", N its 1-based position among the file's keys; a KEY containing
 * ':' needs a NAME in front); NAME is 1-64 of [A-Za-z0-9_.-]; blank lines
 * and lines starting with '#' are ignored; whitespace around NAME and KEY is
 * trimmed. A key's namespace follows its name: name keys so that editing the
 * file keeps each one's cache. */
rp_status rp_srv_keys_load(const char *key, const char *key_file, rp_srv_keys *out);
/* The key file's text alone (`origin` names it in errors), appended to *out. */
rp_status rp_srv_keys_parse(const char *text, size_t len, const char *origin, rp_srv_keys *out);
/* The index of the key an "Authorization: Bearer KEY" header value presents,
 * or -1 (also for a missing header). Every key is compared, each in time
 * that depends only on the lengths. */
int rp_srv_keys_match(const rp_srv_keys *k, const char *authorization);
void rp_srv_keys_free(rp_srv_keys *k);

#endif /* RP_SERVER_AUTH_H */
