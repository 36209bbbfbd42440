/* progress.h — progress lines on a terminal for the long calls (model load, synth), and Ctrl-C cancelling synth cleanly. */
#ifndef RP_CLI_PROGRESS_H
#define RP_CLI_PROGRESS_H

#include "model/model.h"
#include "model/synth.h"

/* rp_model_load with a "loading NAME: 45%" line on stderr while it runs,
 * when stderr is a terminal (nothing otherwise). */
rp_status cli_model_load(const char *path, rp_model_params mp, rp_model **out);

/* rp_synth_write with a "synth: 45% (160/350 MiB)" line on a terminal; a
 * SIGINT or SIGTERM meanwhile cancels it (the temp file is removed) and the
 * call returns RP_ERR_CANCELLED with *sig set to the signal (else 0). A
 * second signal kills the process at once. */
rp_status cli_synth_write(rp_synth_params p, const char *path, int *sig);

#endif
