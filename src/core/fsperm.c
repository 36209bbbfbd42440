/* fsperm.c — ownership and mode checks of private files and directories, with messages that say what to do. */
#include "core/fsperm.h"

#include <pwd.h>
#include <stdio.h>
#include <unistd.h>

#include "core/error.h"

static void user_name(uid_t uid, char *out, size_t cap) {
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
        snprintf(out, cap, "'%s', uid %u", res->pw_name, (unsigned)uid);
    else
        snprintf(out, cap, "uid %u", (unsigned)uid);
}

rp_status rp_fsperm_check(const char *what, const char *path, const struct stat *sb, mode_t forbidden, const char *fix) {
    const uid_t me = geteuid();
    const unsigned mode = (unsigned)(sb->st_mode & 07777);
    char owner[160], self[160];
    user_name(sb->st_uid, owner, sizeof owner);
    user_name(me, self, sizeof self);
    if (sb->st_uid != me)
        return rp_errorf(RP_ERR_IO,
                         "%s '%s' is owned by another user (%s; mode %04o): refusing it; it must be owned by the user "
                         "running reprise (%s)%s%s",
                         what, path, owner, mode, self, fix ? "; " : "", fix ? fix : "");
    const unsigned bad = mode & (unsigned)forbidden;
    if (bad) {
        const bool w = bad & (S_IWGRP | S_IWOTH), r = bad & (S_IRGRP | S_IROTH);
        return rp_errorf(RP_ERR_IO,
                         "%s '%s' is %s by group/others (mode %04o, owner %s): refusing it; it must not be (none "
                         "of the mode bits %04o)%s%s",
                         what, path, w && r ? "readable and writable" : w ? "writable" : r ? "readable" : "accessible",
                         mode, owner, (unsigned)forbidden, fix ? "; " : "", fix ? fix : "");
    }
    return RP_OK;
}
