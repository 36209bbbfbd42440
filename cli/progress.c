/* progress.c — progress lines on a terminal for the long calls (model load, synth), and Ctrl-C cancelling one cleanly. */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t g_signal;   /* set by the handler while a cancellable call runs */

static void on_signal(int sig) { g_signal = sig; }

static bool draw(void *user, uint64_t done, uint64_t total) {
    cli_line *l = user;
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

static void erase(const cli_line *l) {
    if (l->drawn) fputs("\r\033[K", stderr);
}

static void line_init(cli_line *l, const char *label, bool bytes) {
    memset(l, 0, sizeof *l);
    snprintf(l->label, sizeof l->label, "%s", label);
    l->tty = isatty(STDERR_FILENO);
    l->bytes = bytes;
}

void cli_load_line_begin(cli_load_line *l, const char *path, rp_progress_fn *fn, void **user) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char label[sizeof l->label];
    snprintf(label, sizeof label, "loading %s", base);
    line_init(l, label, false);
    *fn = draw;
    *user = l;
}

void cli_load_line_end(const cli_load_line *l) { erase(l); }

rp_status cli_model_load(const char *path, rp_model_params mp, rp_model **out) {
    cli_load_line l;
    cli_load_line_begin(&l, path, &mp.progress, &mp.progress_user);
    rp_status st = rp_model_load(path, mp, out);
    cli_load_line_end(&l);
    return st;
}

void cli_cancellable_begin(cli_cancellable *c, const char *label, bool bytes, rp_progress_fn *fn, void **user) {
    line_init(&c->line, label, bytes);
    *fn = draw;   /* on a terminal or not: it is where a signal becomes a cancel */
    *user = &c->line;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;   /* writes carry on; a second signal is the default (kill) */
    g_signal = 0;
    sigaction(SIGINT, &sa, &c->old_int);
    sigaction(SIGTERM, &sa, &c->old_term);
}

int cli_cancellable_end(cli_cancellable *c) {
    sigaction(SIGINT, &c->old_int, NULL);
    sigaction(SIGTERM, &c->old_term, NULL);
    erase(&c->line);
    return g_signal;
}
