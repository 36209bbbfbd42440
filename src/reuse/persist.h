/* persist.h — a single-file snapshot of the chunk cache (until the SQLite store replaces it). */
#ifndef RP_REUSE_PERSIST_H
#define RP_REUSE_PERSIST_H

#include "reprise.h"
#include "reuse/engine.h"

/* Writes every chunk (tokens, KV, prefix links, exactness) to `path` via a
 * temp file + rename, mode 0600, with a checksum per chunk. */
rp_status rp_reuse_save(rp_reuse *e, const char *path);

/* Loads a snapshot into the engine's cache. A file for another model or KV
 * type (different salt) is ignored with RP_ERR_NOT_FOUND-free success and
 * *n_loaded = 0; a missing file is RP_OK with 0; a chunk failing its checksum
 * is skipped (and its descendants lose their prefix link). */
rp_status rp_reuse_load(rp_reuse *e, const char *path, int32_t *n_loaded);

#endif /* RP_REUSE_PERSIST_H */
