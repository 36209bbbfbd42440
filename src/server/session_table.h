/* session_table.h — reprise_session ids (128-bit random, hex) mapped to backend KV sessions: owners, quotas, expiry, busy state. */
#ifndef RP_SERVER_SESSION_TABLE_H
#define RP_SERVER_SESSION_TABLE_H

#include <stdbool.h>

#include "reprise.h"
#include "server/backend.h"

typedef struct rp_session_table rp_session_table;
typedef struct rp_stab_entry rp_stab_entry;

/* Every session has an owner: the API key (its index) of the request that
 * created it, -1 without keys. An owner sees only its own sessions (another
 * owner's id is "not found"), and evictions — the table full, or the owner
 * over its quota — only ever take the owner's own least recently used idle
 * sessions, never another owner's. */
typedef struct rp_stab_params {
    int max_sessions;            /* sessions in all (each holds a backend KV sequence) */
    double ttl_s;                /* an idle session unused this long is freed (<= 0: never) */
    int owner_max_sessions;      /* sessions one owner may hold (0: no limit of its own) */
    uint64_t owner_max_kv_bytes; /* KV of the tokens resident in one owner's sessions (0: no limit); over it,
                                    its other idle sessions are evicted when one is released */
    uint64_t kv_bytes_per_token; /* for owner_max_kv_bytes */
} rp_stab_params;

rp_stab_params rp_stab_default_params(void);   /* 16 sessions, TTL 1800 s, no quotas */

/* Thread-safe (one mutex). */
rp_status rp_stab_create(rp_backend *b, const rp_stab_params *p, rp_session_table **out);
void rp_stab_free(rp_session_table *t);   /* no entry may be held */

/* A new session of `owner`, returned held by the caller, its id (32
 * lowercase hex digits from getrandom) in id_out. When the owner is at its
 * quota, or the table is full, the owner's least recently used idle session
 * is evicted; RP_ERR_FULL (429) if it has none. */
rp_status rp_stab_new(rp_session_table *t, int owner, char id_out[33], rp_stab_entry **out);
/* Holds an existing session of `owner` for one request. While another
 * request holds it, waits up to wait_s for it (a client's next call often
 * races the end of the previous one). RP_ERR_NOT_FOUND: unknown, expired or
 * another owner's id (404); RP_ERR_FULL: still busy (409). Ids are compared
 * in constant time. */
rp_status rp_stab_acquire(rp_session_table *t, int owner, const char *id, double wait_s, rp_stab_entry **out);
rp_bk_session *rp_stab_backend(rp_stab_entry *e);
/* Releases a held session; `suspended`: its turn ended in tool calls, it
 * waits for the tool results (backend suspend). Then applies the owner's KV
 * quota to its other idle sessions. */
void rp_stab_release(rp_session_table *t, rp_stab_entry *e, bool suspended);
/* Frees a session of `owner` now. RP_ERR_NOT_FOUND (also another owner's) /
 * RP_ERR_FULL (busy). */
rp_status rp_stab_delete(rp_session_table *t, int owner, const char *id);
/* Sessions evicted so far to keep owners within the table or their quotas. */
uint64_t rp_stab_evictions(rp_session_table *t);
/* Sessions in total, held by a request, and suspended waiting for a tool result. */
void rp_stab_counts(rp_session_table *t, int *total, int *active, int *suspended);
/* Frees sessions idle longer than the TTL (also done by new / acquire). */
void rp_stab_expire(rp_session_table *t);

#endif /* RP_SERVER_SESSION_TABLE_H */
