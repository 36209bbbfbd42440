/* synth_write.h — `reprise synth`'s file writer with a progress line, cancelled cleanly by Ctrl-C (synth and demo). */
#ifndef RP_CLI_SYNTH_WRITE_H
#define RP_CLI_SYNTH_WRITE_H

#include "reprise.h"

/* rp_model_synth with a "synth: 45% (160/350 MiB)" line on a terminal; a
 * SIGINT or SIGTERM meanwhile cancels it (the temp file is removed) and the
 * call returns RP_ERR_CANCELLED with *sig set to the signal (else 0). A
 * second signal kills the process at once. */
rp_status cli_synth_write(rp_model_synth_params p, const char *path, int *sig);

#endif
