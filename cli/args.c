/* args.c — option parsing and error reporting helpers for the CLI subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reprise.h"
#include "kernels/cpu.h"
#include "reuse/blend.h"

bool cli_is(cli_args *a, const char *s1, const char *s2) {
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

int cli_unknown(cli_args *a) {
    fprintf(stderr, "reprise %s: unknown option '%s' (try: reprise %s --help)\n", a->cmd, a->argv[a->i], a->cmd);
    return 2;
}

int cli_fail(const char *cmd, const char *what, int status) {
    const char *detail = rp_last_error();
    fprintf(stderr, "reprise %s: %s: %s%s%s\n", cmd, what, rp_strerror((rp_status)status), detail[0] ? ": " : "",
            detail);
    return 1;
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
    int l = rp_cpu_level_parse(level);
    if (l < 0) {
        fprintf(stderr, "reprise %s: --cpu must be scalar, avx2, avx512 or amx, got '%s'\n", cmd, level);
        return false;
    }
    rp_status st = rp_cpu_set_level((rp_cpu_level)l);
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
