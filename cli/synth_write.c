/* synth_write.c — `reprise synth`'s file writer with a progress line, cancelled cleanly by Ctrl-C (synth and demo). */
#include "synth_write.h"

#include "progress.h"

rp_status cli_synth_write(rp_model_synth_params p, const char *path, int *sig) {
    cli_cancellable c;
    cli_cancellable_begin(&c, "synth", true, &p.progress, &p.progress_user);
    rp_status st = rp_model_synth(&p, path);
    *sig = cli_cancellable_end(&c);
    return st;
}
