/* progress.h — progress lines on a terminal for the long calls (model load, synth), and Ctrl-C cancelling one cleanly. */
#ifndef RP_CLI_PROGRESS_H
#define RP_CLI_PROGRESS_H

#include <signal.h>
#include <stdbool.h>

#include "reprise.h"

/* rp_model_load with a "loading NAME: 45%" line on stderr while it runs,
 * when stderr is a terminal (nothing otherwise). */
rp_status cli_model_load(const char *path, rp_model_params mp, rp_model **out);

/* A progress line (drawn on a terminal only, at most ~10 times a second). */
typedef struct cli_line {
    char label[160];
    bool tty, drawn;
    bool bytes;      /* units are bytes: show MiB too */
    double last;     /* when it was last drawn */
} cli_line;

/* The same line for a load the caller does not make itself (serve's
 * backend): cli_load_line_begin gives the callback and its user pointer
 * (`l` must outlive the load), cli_load_line_end erases the line. */
typedef cli_line cli_load_line;
void cli_load_line_begin(cli_load_line *l, const char *path, rp_progress_fn *fn, void **user);
void cli_load_line_end(const cli_load_line *l);

/* A long call that a SIGINT or SIGTERM cancels cleanly (synth: the temp file
 * is removed), with a "LABEL: 45% (160/350 MiB)" line on a terminal:
 * cli_cancellable_begin installs the handlers and gives the progress callback
 * (it returns false once a signal came) and its user pointer;
 * cli_cancellable_end restores the handlers, erases the line and returns the
 * signal that came (0 if none). A second signal kills the process at once. */
typedef struct cli_cancellable {
    cli_line line;
    struct sigaction old_int, old_term;
} cli_cancellable;
void cli_cancellable_begin(cli_cancellable *c, const char *label, bool bytes, rp_progress_fn *fn, void **user);
int cli_cancellable_end(cli_cancellable *c);

#endif
