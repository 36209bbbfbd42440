/* siblings.h — the children of each prefix-tree node kept in token order, for longest-common-prefix lookups. */
#ifndef RP_REUSE_SIBLINGS_H
#define RP_REUSE_SIBLINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "reprise.h"
#include "reuse/cache.h"

/* For every parent id, its children sorted lexicographically by token ids
 * (a sequence sorts before its own extensions). Among sorted sequences the
 * ones sharing the longest common prefix with a query sit next to the query's
 * insertion point, so the best partial continuation of a prompt is found with
 * a binary search instead of a scan over every sibling (a shared system
 * prompt can have tens of thousands of children).
 *
 * Not thread-safe: the chunk cache calls it under its mutex. The structure
 * holds pointers only; a chunk must be removed before it is freed. */
typedef struct rp_siblings rp_siblings;

rp_status rp_siblings_create(rp_siblings **out);
void rp_siblings_free(rp_siblings *s);

/* Adds `ch` under ch->parent_id. RP_ERR_NOMEM leaves the structure as it was
 * (the chunk is then not found by rp_siblings_best, which is only a miss). */
rp_status rp_siblings_add(rp_siblings *s, rp_chunk *ch);
/* Removes `ch` (by identity); a chunk that is not there is ignored. */
void rp_siblings_del(rp_siblings *s, const rp_chunk *ch);

/* Among the children of `parent_id`, the one sharing the longest common
 * prefix with toks[0..n) (at least one token), ties broken by the most recent
 * last_used among up to `tie_scan` equally good neighbours on each side.
 * NULL (and *n_common = 0) if no child starts with toks[0]. */
rp_chunk *rp_siblings_best(const rp_siblings *s, uint64_t parent_id, const rp_token *toks, int32_t n, int32_t tie_scan,
                           int32_t *n_common);

/* Children currently held under `parent_id` (tests). */
int32_t rp_siblings_count(const rp_siblings *s, uint64_t parent_id);

#endif /* RP_REUSE_SIBLINGS_H */
