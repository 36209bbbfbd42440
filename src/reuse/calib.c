/* calib.c — static call-size calibration: the per-token-latency turning point and the rp_calib text file. */
#include "reuse/plan.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"
#include "kernels/cpu.h"

#define CALIB_VERSION 1
#define CALIB_MAX_POINTS ((int32_t)(sizeof ((rp_calib *)0)->sizes / sizeof ((rp_calib *)0)->sizes[0]))

/* ---- turning point -------------------------------------------------------- */

/* Per-token latency q_i = lat_ms[i] / sizes[i]; best = min_i q_i. Returns the
 * smallest sizes[i] with q_i <= best * (1 + tolerance): past it, bigger calls
 * no longer improve utilisation and only add padding (paper §4.1, Fig. 7a).
 * Returns -1 on bad input (NULL arrays, n <= 0, a size <= 0, a latency that
 * is negative / not finite, tolerance < 0 or not finite). */
int32_t rp_calib_turning_point(const int32_t *sizes, const double *lat_ms, int32_t n, double tolerance) {
    if (!sizes || !lat_ms || n <= 0 || !(tolerance >= 0.0 && isfinite(tolerance))) return -1;
    double best = INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (sizes[i] <= 0 || !(lat_ms[i] >= 0.0 && isfinite(lat_ms[i]))) return -1;
        double q = lat_ms[i] / sizes[i];
        if (q < best) best = q;
    }
    double limit = best * (1.0 + tolerance);
    int32_t out = -1;
    for (int32_t i = 0; i < n; i++)
        if (lat_ms[i] / sizes[i] <= limit && (out < 0 || sizes[i] < out)) out = sizes[i];
    return out;
}

/* ---- shape choice -------------------------------------------------------- */

/* One synthetic prompt layout: `n` segments of the given kinds and lengths. */
typedef struct layout { int32_t n; rp_segment seg[16]; } layout;

static void lay_add(layout *L, rp_seg_kind k, int32_t len) {
    if (len <= 0 || L->n >= 16) return;
    int32_t b = L->n ? L->seg[L->n - 1].begin + L->seg[L->n - 1].len : 0;
    L->seg[L->n++] = (rp_segment){k, b, len};
}

/* The layout family (per prompt length N): doc QA — a one-token prefix, six
 * reused documents, a 5% new question; long chat — half the prompt a prefix,
 * 40% reused dialogue chunks, a 10% new turn; agent skills — a 70% reused
 * skill description and a 30% new task; interleaved — reused documents
 * separated by short new glue text. Sizes are not multiples of anything on
 * purpose: remainders are what the choice is about. */
static int32_t build_layouts(layout *out, int32_t cap) {
    static const int32_t lens[] = {512, 1024, 2048, 4096};
    int32_t n = 0;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0] && n + 4 <= cap; i++) {
        const int32_t N = lens[i] - 1 - (int32_t)(i * 37 % 61);
        layout *L = &out[n++];
        L->n = 0;
        int32_t q = N / 20 > 16 ? N / 20 : 16, d = (N - 1 - q) / 6;
        lay_add(L, RP_SEG_PREFIX, 1);
        lay_add(L, RP_SEG_REUSE, 6 * d);
        lay_add(L, RP_SEG_NEW, N - 1 - 6 * d);
        L = &out[n++];
        L->n = 0;
        lay_add(L, RP_SEG_PREFIX, N / 2);
        lay_add(L, RP_SEG_REUSE, N * 2 / 5);
        lay_add(L, RP_SEG_NEW, N - N / 2 - N * 2 / 5);
        L = &out[n++];
        L->n = 0;
        lay_add(L, RP_SEG_REUSE, N * 7 / 10);
        lay_add(L, RP_SEG_NEW, N - N * 7 / 10);
        L = &out[n++];
        L->n = 0;
        lay_add(L, RP_SEG_PREFIX, 1);
        int32_t glue = 9, doc = (N - 1) / 5 - glue;
        for (int k = 0; k < 5; k++) {
            lay_add(L, RP_SEG_REUSE, doc);
            lay_add(L, RP_SEG_NEW, glue);
        }
        lay_add(L, RP_SEG_NEW, N - 1 - 5 * (doc + glue));
    }
    return n;
}

rp_status rp_calib_choose_shapes(const int32_t *sizes, const double *prefill_ms, const double *recompute_ms, int32_t n,
                                 double tolerance, rp_static_cfg *cfg) {
    if (!cfg) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: cfg is NULL");
    const int32_t lp0 = rp_calib_turning_point(sizes, prefill_ms, n, tolerance);
    const int32_t ls0 = rp_calib_turning_point(sizes, recompute_ms, n, tolerance);
    if (lp0 <= 0 || ls0 <= 0) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: no usable measurements");
    double qp = INFINITY, qs = INFINITY;   /* best per-token latencies */
    for (int32_t i = 0; i < n; i++) {
        if (prefill_ms[i] / sizes[i] < qp) qp = prefill_ms[i] / sizes[i];
        if (recompute_ms[i] / sizes[i] < qs) qs = recompute_ms[i] / sizes[i];
    }
    layout lay[16];
    const int32_t n_lay = build_layouts(lay, 16);
    enum { CAP = 4096 };
    rp_call *calls = malloc(sizeof *calls * CAP);
    if (!calls) return rp_errorf(RP_ERR_NOMEM, "calibrate: out of memory");
    double best = INFINITY;
    rp_static_cfg pick = *cfg;
    for (int32_t a = 0; a < n; a++) {
        if (prefill_ms[a] / sizes[a] > qp * (1.0 + tolerance)) continue;
        for (int32_t b = 0; b < n; b++) {
            if (recompute_ms[b] / sizes[b] > qs * (1.0 + tolerance)) continue;
            rp_static_cfg c = *cfg;
            c.L_P = sizes[a];
            c.L_S = sizes[b];
            c.lat_P_ms = prefill_ms[a];
            c.lat_S_ms = recompute_ms[b];
            if (rp_static_k(&c) < 1) continue;
            double total = 0;
            bool ok = true;
            for (int32_t j = 0; j < n_lay && ok; j++) {
                int32_t nc = 0;
                double ms = 0;
                ok = rp_plan_dp(lay[j].seg, lay[j].n, &c, calls, CAP, &nc, &ms) == RP_OK;
                total += ms;
            }
            /* ties go to the turning point's (smaller) shapes: less padding on short prompts */
            if (ok && total < best * (1.0 - 1e-9)) {
                best = total;
                pick = c;
            }
        }
    }
    free(calls);
    if (!isfinite(best)) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: no feasible shape pair (r = %g)", (double)cfg->r);
    *cfg = pick;
    return RP_OK;
}

/* ---- file format ----------------------------------------------------------
 * UTF-8/ASCII text, one `key value` per line, '#' comments and blank lines
 * ignored, unknown keys ignored (forward compatibility), CRLF tolerated:
 *   version 1
 *   fingerprint <1..16 hex digits>
 *   machine <rest of the line, <= 95 bytes, no control characters>
 *   L_P <int > 0>    L_S <int > 0>    r <float in (0, 1]>
 *   lat_P_ms <double >= 0>    lat_S_ms <double >= 0>
 *   n_points <0..64>
 *   point <size > 0> <prefill_ms >= 0> <recompute_ms >= 0>   (n_points lines)
 * Every listed key is required exactly once; the number of point lines must
 * equal n_points. Errors name the 1-based line number.
 */

static rp_status validate_calib(const rp_calib *c) {
    if (!memchr(c->machine, '\0', sizeof c->machine))
        return rp_errorf(RP_ERR_INVALID_ARG, "calib: machine string is not NUL-terminated");
    for (const char *m = c->machine; *m; m++)
        if ((unsigned char)*m < 0x20 || *m == 0x7f)
            return rp_errorf(RP_ERR_INVALID_ARG, "calib: machine string has a control character at %d",
                             (int)(m - c->machine));
    if (c->cfg.L_P <= 0 || c->cfg.L_S <= 0)
        return rp_errorf(RP_ERR_INVALID_ARG, "calib: L_P = %d / L_S = %d must be > 0", (int)c->cfg.L_P,
                         (int)c->cfg.L_S);
    if (!(c->cfg.r > 0.0f && c->cfg.r <= 1.0f))
        return rp_errorf(RP_ERR_INVALID_ARG, "calib: r = %g must be in (0, 1]", (double)c->cfg.r);
    if (!(c->cfg.lat_P_ms >= 0 && isfinite(c->cfg.lat_P_ms)) || !(c->cfg.lat_S_ms >= 0 && isfinite(c->cfg.lat_S_ms)))
        return rp_errorf(RP_ERR_INVALID_ARG, "calib: latencies must be finite and >= 0");
    if (c->n_points < 0 || c->n_points > CALIB_MAX_POINTS)
        return rp_errorf(RP_ERR_INVALID_ARG, "calib: n_points = %d out of [0, %d]", (int)c->n_points,
                         (int)CALIB_MAX_POINTS);
    for (int32_t i = 0; i < c->n_points; i++)
        if (c->sizes[i] <= 0 || !(c->prefill_ms[i] >= 0 && isfinite(c->prefill_ms[i])) ||
            !(c->recompute_ms[i] >= 0 && isfinite(c->recompute_ms[i])))
            return rp_errorf(RP_ERR_INVALID_ARG, "calib: point %d is invalid", (int)i);
    return RP_OK;
}

/* Writes to `<path>.tmpXXXXXX` (mode 0600) in the same directory, fsyncs,
 * then rename()s over `path`, so readers see the old or the new file, never a
 * torn one. */
rp_status rp_calib_save(const rp_calib *c, const char *path) {
    if (!c || !path || !*path) return rp_errorf(RP_ERR_INVALID_ARG, "calib: NULL record or path");
    RP_TRY(validate_calib(c));
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (!tmp) return rp_errorf(RP_ERR_NOMEM, "calib: temp path");
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmpXXXXXX", sizeof ".tmpXXXXXX");
    int fd = mkstemp(tmp); /* created 0600 */
    if (fd < 0) {
        rp_status st = rp_errorf(RP_ERR_IO, "calib: cannot create temp file for %s: %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        rp_status st = rp_errorf(RP_ERR_IO, "calib: fdopen %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return st;
    }
    bool ok = fchmod(fd, 0600) == 0;
    ok = ok && fprintf(f, "# reprise static-shape calibration\n") > 0;
    ok = ok && fprintf(f, "version %d\n", CALIB_VERSION) > 0;
    ok = ok && fprintf(f, "fingerprint %016" PRIx64 "\n", c->model_fingerprint) > 0;
    ok = ok && fprintf(f, "machine %s\n", c->machine) > 0;
    ok = ok && fprintf(f, "L_P %d\nL_S %d\n", (int)c->cfg.L_P, (int)c->cfg.L_S) > 0;
    ok = ok && fprintf(f, "r %.9g\n", (double)c->cfg.r) > 0;
    ok = ok && fprintf(f, "lat_P_ms %.17g\nlat_S_ms %.17g\n", c->cfg.lat_P_ms, c->cfg.lat_S_ms) > 0;
    ok = ok && fprintf(f, "n_points %d\n", (int)c->n_points) > 0;
    for (int32_t i = 0; ok && i < c->n_points; i++)
        ok = fprintf(f, "point %d %.17g %.17g\n", (int)c->sizes[i], c->prefill_ms[i], c->recompute_ms[i]) > 0;
    ok = ok && fflush(f) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        unlink(tmp);
        rp_status st = rp_errorf(RP_ERR_IO, "calib: writing %s: %s", path, strerror(saved));
        free(tmp);
        return st;
    }
    free(tmp);
    return RP_OK;
}

/* Strict number parsers: the whole token must be consumed. */
static bool parse_i32(const char *s, int32_t *out) {
    if (!*s) return false;
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || *e || v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_f64(const char *s, double *out) {
    if (!*s) return false;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || *e || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_hex64(const char *s, uint64_t *out) {
    size_t n = strlen(s);
    if (n == 0 || n > 16) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d;
        char ch = s[i];
        if (ch >= '0' && ch <= '9') d = ch - '0';
        else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
        else return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Splits `s` in place at spaces/tabs into up to `max` tokens; returns the count
 * (max + 1 if there were more). */
static int split_ws(char *s, char **tok, int max) {
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t') *s++ = '\0';
        if (!*s) break;
        if (n == max) return max + 1;
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t') s++;
    }
    return n;
}

enum { K_VERSION, K_FP, K_MACHINE, K_LP, K_LS, K_R, K_LATP, K_LATS, K_NPOINTS, K_COUNT };
static const char *const k_keys[K_COUNT] = {"version", "fingerprint", "machine", "L_P", "L_S",
                                            "r", "lat_P_ms", "lat_S_ms", "n_points"};

rp_status rp_calib_load(const char *path, rp_calib *out) {
    if (!path || !out) return rp_errorf(RP_ERR_INVALID_ARG, "calib: NULL path or record");
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return rp_errorf(RP_ERR_NOT_FOUND, "calib: %s does not exist", path);
        return rp_errorf(RP_ERR_IO, "calib: cannot open %s: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (1 << 20)) {
        fclose(f);
        return rp_errorf(RP_ERR_FORMAT, "calib: %s is not a regular file of at most 1 MiB", path);
    }
    rp_calib c;
    memset(&c, 0, sizeof c);
    int seen[K_COUNT] = {0};   /* line number where each key was seen, 0 = not yet */
    int32_t n_pt = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    int ln = 0;
    rp_status st = RP_OK;

#define FAIL(code, ...)                         \
    do {                                        \
        st = rp_errorf(code, __VA_ARGS__);      \
        goto done;                              \
    } while (0)

    errno = 0;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        ln++;
        size_t len = (size_t)got;
        if (len > 4096) FAIL(RP_ERR_FORMAT, "calib: %s:%d: line longer than 4096 bytes", path, ln);
        if (memchr(line, '\0', len)) FAIL(RP_ERR_FORMAT, "calib: %s:%d: NUL byte in line", path, ln);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *key = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = '\0';
        while (*p == ' ' || *p == '\t') p++;
        char *val = p; /* rest of the line */
        for (char *q = val; *q; q++)
            if ((unsigned char)*q < 0x20 && *q != '\t')
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: control character in value", path, ln);

        if (strcmp(key, "point") == 0) {
            char *t[4];
            int n = split_ws(val, t, 3);
            int32_t sz;
            double a, b;
            if (n != 3 || !parse_i32(t[0], &sz) || !parse_f64(t[1], &a) || !parse_f64(t[2], &b))
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: expected `point <size> <prefill_ms> <recompute_ms>`", path, ln);
            if (sz <= 0 || a < 0 || b < 0)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: point values out of range", path, ln);
            if (n_pt >= CALIB_MAX_POINTS)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: more than %d points", path, ln, (int)CALIB_MAX_POINTS);
            c.sizes[n_pt] = sz;
            c.prefill_ms[n_pt] = a;
            c.recompute_ms[n_pt] = b;
            n_pt++;
            continue;
        }
        int k = -1;
        for (int i = 0; i < K_COUNT; i++)
            if (strcmp(key, k_keys[i]) == 0) k = i;
        if (k < 0) continue; /* unknown key: ignored */
        if (seen[k]) FAIL(RP_ERR_FORMAT, "calib: %s:%d: duplicate key %s (first on line %d)", path, ln, key, seen[k]);
        seen[k] = ln;

        if (k == K_MACHINE) {
            size_t vl = strlen(val);
            while (vl > 0 && (val[vl - 1] == ' ' || val[vl - 1] == '\t')) val[--vl] = '\0';
            if (vl >= sizeof c.machine)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: machine string longer than %d bytes", path, ln,
                     (int)sizeof c.machine - 1);
            memcpy(c.machine, val, vl + 1);
            continue;
        }
        char *t[2];
        if (split_ws(val, t, 1) != 1) FAIL(RP_ERR_FORMAT, "calib: %s:%d: %s needs exactly one value", path, ln, key);
        const char *v = t[0];
        int32_t iv;
        double dv;
        switch (k) {
        case K_VERSION:
            if (!parse_i32(v, &iv) || iv < 1) FAIL(RP_ERR_FORMAT, "calib: %s:%d: bad version '%s'", path, ln, v);
            if (iv > CALIB_VERSION)
                FAIL(RP_ERR_UNSUPPORTED, "calib: %s:%d: version %d is newer than %d", path, ln, (int)iv,
                     CALIB_VERSION);
            break;
        case K_FP:
            if (!parse_hex64(v, &c.model_fingerprint))
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: fingerprint '%s' is not 1-16 hex digits", path, ln, v);
            break;
        case K_LP:
        case K_LS:
            if (!parse_i32(v, &iv) || iv <= 0)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: %s '%s' must be an integer > 0", path, ln, key, v);
            if (k == K_LP) c.cfg.L_P = iv;
            else c.cfg.L_S = iv;
            break;
        case K_R:
            if (!parse_f64(v, &dv) || !(dv > 0.0 && dv <= 1.0))
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: r '%s' must be a number in (0, 1]", path, ln, v);
            c.cfg.r = (float)dv;
            if (!(c.cfg.r > 0.0f)) FAIL(RP_ERR_FORMAT, "calib: %s:%d: r '%s' underflows a float", path, ln, v);
            break;
        case K_LATP:
        case K_LATS:
            if (!parse_f64(v, &dv) || dv < 0)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: %s '%s' must be a finite number >= 0", path, ln, key, v);
            if (k == K_LATP) c.cfg.lat_P_ms = dv;
            else c.cfg.lat_S_ms = dv;
            break;
        case K_NPOINTS:
            if (!parse_i32(v, &iv) || iv < 0 || iv > CALIB_MAX_POINTS)
                FAIL(RP_ERR_FORMAT, "calib: %s:%d: n_points '%s' must be in [0, %d]", path, ln, v,
                     (int)CALIB_MAX_POINTS);
            c.n_points = iv;
            break;
        default:
            break;
        }
    }
    if (ferror(f) || !feof(f)) FAIL(RP_ERR_IO, "calib: reading %s failed after line %d", path, ln);
    for (int i = 0; i < K_COUNT; i++)
        if (!seen[i]) FAIL(RP_ERR_FORMAT, "calib: %s:%d: missing required key %s (end of file)", path, ln, k_keys[i]);
    if (((double)c.cfg.r * c.cfg.L_S) * (1.0 + 1.0 / 1048576.0) < 1.0)
        FAIL(RP_ERR_FORMAT, "calib: %s:%d: r * L_S < 1 leaves no recompute slot", path, seen[K_R]);
    if (n_pt != c.n_points)
        FAIL(RP_ERR_FORMAT, "calib: %s:%d: n_points is %d (line %d) but %d point lines were read", path, ln,
             (int)c.n_points, seen[K_NPOINTS], (int)n_pt);
    *out = c;
done:
#undef FAIL
    free(line);
    fclose(f);
    return st;
}

/* ---- where calibrations are stored ---- */

void rp_calib_path(const char *cache_dir, uint64_t model_fingerprint, int threads, char *buf, size_t cap) {
    char dir[3072], key[96];
    if (cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
    else if (getenv("XDG_CACHE_HOME")) snprintf(dir, sizeof dir, "%s/reprise", getenv("XDG_CACHE_HOME"));
    else snprintf(dir, sizeof dir, "%s/.cache/reprise", getenv("HOME") ? getenv("HOME") : "/tmp");
    rp_calib_machine_key(threads, key, sizeof key);
    snprintf(buf, cap, "%s/calib-%016llx-%08llx.txt", dir, (unsigned long long)model_fingerprint,
             (unsigned long long)(XXH3_64bits(key, strlen(key)) & 0xffffffffu));
}

void rp_calib_machine_key(int threads, char *buf, size_t cap) {
    snprintf(buf, cap, "%s|%s|t%d", rp_cpu_info_get()->brand, rp_cpu_level_name(rp_cpu_level_active()), threads);
}

bool rp_calib_lookup(uint64_t model_fingerprint, const char *cache_dir, int threads, rp_static_cfg *cfg) {
    char path[4096], key[96];
    rp_calib_path(cache_dir, model_fingerprint, threads, path, sizeof path);
    rp_calib_machine_key(threads, key, sizeof key);
    rp_calib cal;
    if (rp_calib_load(path, &cal) != RP_OK) return false;
    if (cal.model_fingerprint != model_fingerprint || strcmp(cal.machine, key) != 0) return false;
    const float r = cfg->r;
    *cfg = cal.cfg;
    cfg->r = r;
    return true;
}
