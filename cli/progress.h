/* progress.h — progress lines on a terminal for the long calls (model load, synth), and Ctrl-C cancelling synth cleanly. */
#ifndef RP_CLI_PROGRESS_H
#define RP_CLI_PROGRESS_H

#include "model/model.h"
#include "model/synth.h"

/* rp_model_load with a "loading NAME: 45%" line on stderr while it runs,
 * when stderr is a terminal (nothing otherwise). */
rp_status cli_model_load(const char *path, rp_model_params mp, rp_model **out);

/* The same line for a load the caller does not make itself (serve's
 * backend): cli_load_line_begin gives the callback and its user pointer
 * (`l` must outlive the load), cli_load_line_end erases the line. */
typedef struct cli_load_line {
    char label[160];
    bool tty, drawn;
    double last;
} cli_load_line;
void cli_load_line_begin(cli_load_line *l, const char *path, rp_progress_fn *fn, void **user);
void cli_load_line_end(const cli_load_line *l);

/* rp_synth_write with a "synth: 45% (160/350 MiB)" line on a terminal; a
 * SIGINT or SIGTERM meanwhile cancels it (the temp file is removed) and the
 * call returns RP_ERR_CANCELLED with *sig set to the signal (else 0). A
 * second signal kills the process at once. */
rp_status cli_synth_write(rp_synth_params p, const char *path, int *sig);

#endif
