/* fsperm.h — ownership and mode checks of private files and directories (the store, API key files). */
#ifndef RP_CORE_FSPERM_H
#define RP_CORE_FSPERM_H

#include <sys/stat.h>

#include "reprise.h"

/* Checks what `sb` (the stat of `path`) says against a private object of
 * this process: owned by the effective user, and none of the `forbidden`
 * mode bits (e.g. S_IWGRP | S_IWOTH) set. On a
 * failure RP_ERR_IO with a message naming `what`, the path, the owner and
 * mode found and what is required, e.g.
 *   "store: directory '/x' is writable by group/others (mode 0777, owner 'root', uid 0): refusing it; it must
 *    have none of the mode bits 0022; check what is in it, then chmod 700 it, or use a new directory"
 * `fix` is the hint appended (may be NULL). */
rp_status rp_fsperm_check(const char *what, const char *path, const struct stat *sb, mode_t forbidden, const char *fix);

#endif /* RP_CORE_FSPERM_H */
