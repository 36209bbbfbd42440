/* session_table.h — reprise_session ids (128-bit random, hex) mapped to backend KV sessions, with expiry and busy state. */
#ifndef RP_SERVER_SESSION_TABLE_H
#define RP_SERVER_SESSION_TABLE_H

#include <stdbool.h>

#include "reprise.h"
#include "server/backend.h"

typedef struct rp_session_table rp_session_table;
typedef struct rp_stab_entry rp_stab_entry;

/* At most max_sessions sessions (each holds a backend KV sequence); an idle
 * session unused for ttl_s seconds is freed. Thread-safe (one mutex). */
rp_status rp_stab_create(rp_backend *b, int max_sessions, double ttl_s, rp_session_table **out);
void rp_stab_free(rp_session_table *t);   /* no entry may be held */

/* A new session, returned held by the caller, its id (32 lowercase hex
 * digits from getrandom) in id_out. When the table is full the least
 * recently used idle session is evicted; RP_ERR_FULL if every one is busy. */
rp_status rp_stab_new(rp_session_table *t, char id_out[33], rp_stab_entry **out);
/* Holds an existing session for one request. While another request holds
 * it, waits up to wait_s for it (a client's next call often races the end of
 * the previous one). RP_ERR_NOT_FOUND: unknown or expired id (404);
 * RP_ERR_FULL: still busy (409). Ids are compared in constant time. */
rp_status rp_stab_acquire(rp_session_table *t, const char *id, double wait_s, rp_stab_entry **out);
rp_bk_session *rp_stab_backend(rp_stab_entry *e);
/* Releases a held session; `suspended`: its turn ended in tool calls, it
 * waits for the tool results (backend suspend). */
void rp_stab_release(rp_session_table *t, rp_stab_entry *e, bool suspended);
/* Frees a session now. RP_ERR_NOT_FOUND / RP_ERR_FULL (busy). */
rp_status rp_stab_delete(rp_session_table *t, const char *id);
/* Sessions in total, held by a request, and suspended waiting for a tool result. */
void rp_stab_counts(rp_session_table *t, int *total, int *active, int *suspended);
/* Frees sessions idle longer than the TTL (also done by new / acquire). */
void rp_stab_expire(rp_session_table *t);

#endif /* RP_SERVER_SESSION_TABLE_H */
