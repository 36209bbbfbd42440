/* args.c — option parsing and error reporting helpers for the CLI subcommands. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reprise.h"

/* Every option name cli_is was asked about while walking one cli_args: the
 * command's option table, which cli_unknown searches for a suggestion. The
 * table follows the cli_args last parsed (a command that runs another's
 * parser starts a new table). */
static struct {
    const cli_args *owner;
    const char *cmd;   /* with owner: a later cli_args in the same stack slot is a new table */
    char **argv;
    const char *name[192];
    int n;
} g_known;

static bool owns(const cli_args *a) { return g_known.owner == a && g_known.cmd == a->cmd && g_known.argv == a->argv; }

static void remember(const cli_args *a, const char *name) {
    if (!owns(a)) {
        g_known.owner = a;
        g_known.cmd = a->cmd;
        g_known.argv = a->argv;
        g_known.n = 0;
    }
    if (!name) return;
    for (int k = 0; k < g_known.n; k++)
        if (g_known.name[k] == name || strcmp(g_known.name[k], name) == 0) return;
    if (g_known.n < (int)(sizeof g_known.name / sizeof g_known.name[0])) g_known.name[g_known.n++] = name;
}

bool cli_is(cli_args *a, const char *s1, const char *s2) {
    remember(a, s1);
    remember(a, s2);
    const char *s = a->argv[a->i];
    return (s1 && strcmp(s, s1) == 0) || (s2 && strcmp(s, s2) == 0);
}

bool cli_str(cli_args *a, const char **out) {
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "reprise %s: option %s needs a value\n", a->cmd, a->argv[a->i]);
        return false;
    }
    *out = a->argv[++a->i];
    return true;
}

bool cli_int(cli_args *a, long lo, long hi, long *out) {
    const char *opt = a->argv[a->i], *v;
    if (!cli_str(a, &v)) return false;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "reprise %s: %s expects an integer in [%ld, %ld], got '%s'\n", a->cmd, opt, lo, hi, v);
        return false;
    }
    *out = x;
    return true;
}

bool cli_select(cli_args *a, int *out) {
    const char *opt = a->argv[a->i], *v;
    if (!cli_str(a, &v)) return false;
    const int k = rp_select_kind_parse(v);
    if (k < 0) {
        fprintf(stderr, "reprise %s: %s must be hybrid, dev or attn, got '%s'\n", a->cmd, opt, v);
        return false;
    }
    *out = k;
    return true;
}

bool cli_u64(cli_args *a, uint64_t *out) {
    const char *opt = a->argv[a->i], *v;
    if (!cli_str(a, &v)) return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *end || v[0] == '-') {
        fprintf(stderr, "reprise %s: %s expects a non-negative integer, got '%s'\n", a->cmd, opt, v);
        return false;
    }
    *out = x;
    return true;
}

bool cli_float(cli_args *a, double lo, double hi, double *out) {
    const char *opt = a->argv[a->i], *v;
    if (!cli_str(a, &v)) return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "reprise %s: %s expects a number in [%g, %g], got '%s'\n", a->cmd, opt, lo, hi, v);
        return false;
    }
    *out = x;
    return true;
}

/* Optimal-string-alignment distance (Levenshtein plus adjacent swaps), '_'
 * read as '-' and case ignored; -1 for names too long to bother with. */
static int edit_distance(const char *x, const char *y) {
    enum { MAXL = 48 };
    const size_t n = strlen(x), m = strlen(y);
    if (n >= MAXL || m >= MAXL) return -1;
    int d[MAXL][MAXL];
    char xs[MAXL], ys[MAXL];
    for (size_t i = 0; i < n; i++) xs[i] = x[i] == '_' ? '-' : (char)tolower((unsigned char)x[i]);
    for (size_t j = 0; j < m; j++) ys[j] = y[j] == '_' ? '-' : (char)tolower((unsigned char)y[j]);
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (xs[i - 1] != ys[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && xs[i - 1] == ys[j - 2] && xs[i - 2] == ys[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

static size_t body_len(const char *opt) {   /* the name without its leading dashes */
    while (*opt == '-') opt++;
    return strlen(opt);
}

const char *cli_closest(const cli_args *a, const char *arg) {
    if (!owns(a)) return NULL;
    const char *const *known = g_known.name;
    const int n_known = g_known.n;
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int k = 0; k < n_known; k++) {
        const char *o = known[k];
        const int d = edit_distance(arg, o);
        const size_t L = body_len(o);
        const int allowed = L <= 2 ? 0 : L <= 5 ? 1 : (int)(L / 3);   /* -x and -y are not typos of each other */
        if (d >= 0 && d <= allowed && d < best_d) { best = o; best_d = d; }
    }
    if (best) return best;
    /* --temperature for --temp, --ignore for --ignore-eos: one name starts with the other */
    size_t best_len = 0;
    for (int k = 0; k < n_known; k++) {
        const char *o = known[k];
        const size_t lo = strlen(o), la = strlen(arg);
        if (body_len(o) < 4 || body_len(arg) < 4 || o[1] != arg[1]) continue;   /* both long (or both short) options */
        if ((la > lo && strncmp(arg, o, lo) == 0) || (lo > la && strncmp(o, arg, la) == 0))
            if (lo > best_len) { best = o; best_len = lo; }
    }
    return best;
}

int cli_unknown(cli_args *a) {
    const char *arg = a->argv[a->i];
    if (arg[0] != '-' || !arg[1]) {
        fprintf(stderr, "reprise %s: unexpected argument '%s' (try: reprise %s --help)\n", a->cmd, arg, a->cmd);
        return 2;
    }
    const char *eq = strchr(arg, '=');
    if (eq) {   /* --top-k=5: options take their value as the next argument */
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
        for (int k = 0; owns(a) && k < g_known.n; k++)
            if (strcmp(g_known.name[k], name) == 0) {
                fprintf(stderr, "reprise %s: write '%s %s' (the value is the next argument, not after '=')\n", a->cmd, name, eq + 1);
                return 2;
            }
    }
    const char *near = cli_closest(a, arg);
    if (near) fprintf(stderr, "reprise %s: unknown option '%s' (did you mean %s?)\n", a->cmd, arg, near);
    else fprintf(stderr, "reprise %s: unknown option '%s' (try: reprise %s --help)\n", a->cmd, arg, a->cmd);
    return 2;
}

int cli_fail(const char *cmd, const char *what, int status) {
    const char *detail = rp_last_error();
    fprintf(stderr, "reprise %s: %s: %s%s%s\n", cmd, what, rp_strerror((rp_status)status), detail[0] ? ": " : "",
            detail);
    return 1;
}

void cli_kv_note(const char *cmd, const rp_model *m, long n_ctx, int kv_type, long n_batch, bool swa_full) {
    uint64_t kvb = 0, full = 0;
    const rp_model_desc d = rp_model_describe(m);
    const bool swa = d.n_swa_layers > 0 && rp_kv_estimate_ex(m, (int32_t)n_ctx, (rp_kv_type)kv_type, (int32_t)n_batch,
                                                             true, &full) == RP_OK;
    if ((n_ctx < 4096 && !swa) ||
        rp_kv_estimate_ex(m, (int32_t)n_ctx, (rp_kv_type)kv_type, (int32_t)n_batch, swa_full, &kvb) != RP_OK)
        return;
    char extra[192] = "";
    if (swa && !swa_full && full > kvb)
        snprintf(extra, sizeof extra, "; %d sliding-window layers hold %ld cells (window %d + batch %ld), %.1f MiB "
                                      "with --swa-full", d.n_swa_layers, (long)d.n_swa + n_batch < n_ctx ? (long)d.n_swa + n_batch : n_ctx,
                 d.n_swa, n_batch, (double)full / 1048576.0);
    else if (swa && swa_full)
        snprintf(extra, sizeof extra, "; --swa-full: its %d sliding-window layers keep every cell", d.n_swa_layers);
    fprintf(stderr, "reprise %s: context %ld tokens: KV cache up to %.1f MiB%s (%.1f MiB available)\n", cmd, n_ctx,
            (double)kvb / 1048576.0, extra, (double)rp_system_mem_available() / 1048576.0);
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "reprise %s: cannot open '%s': %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap > ((size_t)1 << 30)) { free(buf); buf = NULL; break; }   /* 1 GiB prompt cap */
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "reprise %s: cannot read '%s'\n", cmd, path);
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_pct_sorted(const double *v, int n, double p) {
    if (n <= 0) return 0;
    double idx = p * (n - 1);
    int lo = (int)floor(idx), hi = (int)ceil(idx);
    return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool cli_set_cpu(const char *cmd, const char *level) {
    rp_status st = rp_cpu_select(level);
    if (st == RP_ERR_INVALID_ARG) {
        fprintf(stderr, "reprise %s: --cpu: %s\n", cmd, rp_last_error());
        return false;
    }
    if (st != RP_OK) {
        cli_fail(cmd, "--cpu", st);
        return false;
    }
    return true;
}

int cli_int_list(const char *cmd, const char *opt, const char *s, long *out, int cap) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v <= 0 || v > (1L << 24) || n >= cap || (*end && *end != ',')) {
            fprintf(stderr, "reprise %s: %s expects a comma-separated list of positive integers, got '%s'\n", cmd, opt, s);
            return -1;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) fprintf(stderr, "reprise %s: %s is empty\n", cmd, opt);
    return n ? n : -1;
}
