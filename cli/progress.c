/* progress.c — progress lines on a terminal for the long calls (model load, synth), and Ctrl-C cancelling synth cleanly. */
#include "progress.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *label;
    bool tty;        /* draw only on a terminal */
    bool bytes;      /* units are bytes of output: show MiB too */
    double last;     /* when the line was last drawn */
    bool drawn;
} line;

static bool draw(void *user, uint64_t done, uint64_t total);

static volatile sig_atomic_t g_signal;   /* set by the handler while cli_synth_write runs */

static void on_signal(int sig) { g_signal = sig; }

static bool draw(void *user, uint64_t done, uint64_t total) {
    line *l = user;
    if (!l->tty) return g_signal == 0;
    const double now = cli_now();
    if (l->drawn && now - l->last < 0.1 && done < total) return g_signal == 0;   /* at most ~10 lines a second */
    const int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (l->bytes)
        fprintf(stderr, "\r%s: %3d%% (%.0f/%.0f MiB)", l->label, pct, done / 1048576.0, total / 1048576.0);
    else
        fprintf(stderr, "\r%s: %3d%%", l->label, pct);
    fflush(stderr);
    l->last = now;
    l->drawn = true;
    return g_signal == 0;
}

static void erase(const line *l) {
    if (l->drawn) fputs("\r\033[K", stderr);
}

static bool draw_load(void *user, uint64_t done, uint64_t total) {
    cli_load_line *c = user;
    line l = {.label = c->label, .tty = c->tty, .last = c->last, .drawn = c->drawn};
    const bool go = draw(&l, done, total);
    c->last = l.last;
    c->drawn = l.drawn;
    return go;
}

void cli_load_line_begin(cli_load_line *l, const char *path, rp_progress_fn *fn, void **user) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(l->label, sizeof l->label, "loading %s", base);
    l->tty = isatty(STDERR_FILENO);
    l->drawn = false;
    l->last = 0;
    *fn = draw_load;
    *user = l;
}

void cli_load_line_end(const cli_load_line *l) {
    if (l->drawn) fputs("\r\033[K", stderr);
}

rp_status cli_model_load(const char *path, rp_model_params mp, rp_model **out) {
    cli_load_line l;
    cli_load_line_begin(&l, path, &mp.progress, &mp.progress_user);
    rp_status st = rp_model_load(path, mp, out);
    cli_load_line_end(&l);
    return st;
}

rp_status cli_synth_write(rp_synth_params p, const char *path, int *sig) {
    line l = {.label = "synth", .tty = isatty(STDERR_FILENO), .bytes = true};
    p.progress = draw;   /* on a terminal or not: it is where a signal becomes a cancel */
    p.progress_user = &l;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;   /* writes carry on; a second signal is the default (kill) */
    g_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rp_status st = rp_synth_write(&p, path);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    erase(&l);
    *sig = g_signal;
    return st;
}
