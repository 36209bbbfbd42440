/* api_calib.c — static mode's calibration: measuring call latencies, choosing L_P / L_S, storing and finding them. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "api/api_internal.h"
#include "core/error.h"
#include "reuse/plan.h"

static const int32_t k_sizes[] = {32, 64, 96, 128, 192, 256, 384, 512, 768, 1024};

rp_calibrate_params rp_calibrate_default_params(void) {
    rp_calibrate_params p = {.sizes = k_sizes, .n_sizes = (int32_t)(sizeof k_sizes / sizeof k_sizes[0]), .reps = 3};
    return p;
}

rp_status rp_calibrate(const rp_model *m, const rp_engine_params *p, const rp_calibrate_params *cp,
                       rp_calibration *out) {
    memset(out, 0, sizeof *out);
    const rp_engine_params dp = rp_engine_default_params();
    const rp_calibrate_params dc = rp_calibrate_default_params();
    if (!p) p = &dp;
    if (!cp) cp = &dc;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: no model");
    if (!m->layers) return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: model '%s' was loaded vocab-only", m->name);
    if (!cp->sizes || cp->n_sizes <= 0 || cp->n_sizes > 64 || cp->reps < 1)
        return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: %d sizes (1..64), %d runs each (>= 1)", cp->n_sizes, cp->reps);
    int32_t max = 0;
    for (int32_t i = 0; i < cp->n_sizes; i++) {
        if (cp->sizes[i] <= max || cp->sizes[i] % 32)
            return rp_errorf(RP_ERR_INVALID_ARG, "calibrate: size %d: sizes must be increasing multiples of 32",
                             cp->sizes[i]);
        max = cp->sizes[i];
    }
    rp_reuse_params rp = rp_reuse_default_params();
    rp.mode = p->reuse;
    rp.ratio = p->recompute_ratio;
    rp.blend.check_layer = p->check_layer;
    rp.blend.select = p->select;
    rp_ctx_params xp = rp_ctx_default_params();
    xp.n_threads = p->n_threads;
    xp.n_batch = max;
    xp.n_outputs = 1;
    xp.n_ctx_max = max + 1;
    rp_reuse *e = NULL;
    rp_ctx *ctx = NULL;
    rp_kv *kv = NULL;
    rp_calib cal;
    rp_status st = rp_reuse_create(m, (rp_type)p->kv_type, max, rp, &e);
    if (st == RP_OK) st = rp_ctx_create(m, xp, &ctx);
    if (st == RP_OK) st = rp_kv_create(m, max + 1, (rp_type)p->kv_type, &kv);
    if (st == RP_OK) st = rp_reuse_calibrate(e, ctx, kv, cp->sizes, cp->n_sizes, cp->reps, &cal);
    rp_kv_free(kv);
    rp_ctx_free(ctx);
    rp_reuse_free(e);
    if (st != RP_OK) return st;
    out->n_points = cal.n_points;
    memcpy(out->sizes, cal.sizes, sizeof out->sizes);
    memcpy(out->prefill_ms, cal.prefill_ms, sizeof out->prefill_ms);
    memcpy(out->recompute_ms, cal.recompute_ms, sizeof out->recompute_ms);
    out->shapes = (rp_static_shapes){.L_P = cal.cfg.L_P, .L_S = cal.cfg.L_S, .lat_P_ms = cal.cfg.lat_P_ms,
                                     .lat_S_ms = cal.cfg.lat_S_ms, .calibrated = true};
    out->recompute_ratio = cal.cfg.r;
    out->n_threads = p->n_threads;
    return RP_OK;
}

rp_status rp_calibration_save(const rp_model *m, const rp_calibration *c, const char *cache_dir, char *path,
                              size_t cap) {
    if (path && cap) path[0] = 0;
    if (!m || !c) return rp_errorf(RP_ERR_INVALID_ARG, "calibration: NULL model or calibration");
    if (c->n_points <= 0 || c->n_points > 64)
        return rp_errorf(RP_ERR_INVALID_ARG, "calibration: %d points (1..64)", c->n_points);
    rp_calib cal;
    memset(&cal, 0, sizeof cal);
    cal.model_fingerprint = m->fingerprint;
    rp_calib_machine_key(c->n_threads, cal.machine, sizeof cal.machine);
    cal.cfg = (rp_static_cfg){.L_P = c->shapes.L_P, .L_S = c->shapes.L_S, .r = c->recompute_ratio,
                              .lat_P_ms = c->shapes.lat_P_ms, .lat_S_ms = c->shapes.lat_S_ms};
    cal.n_points = c->n_points;
    memcpy(cal.sizes, c->sizes, sizeof cal.sizes);
    memcpy(cal.prefill_ms, c->prefill_ms, sizeof cal.prefill_ms);
    memcpy(cal.recompute_ms, c->recompute_ms, sizeof cal.recompute_ms);
    char file[4096];
    rp_calib_path(cache_dir, m->fingerprint, c->n_threads, file, sizeof file);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) {   /* mkdir -p of the directory, private; a failure shows as the save's */
        *slash = 0;
        for (char *q = dir + 1; *q; q++)
            if (*q == '/') {
                *q = 0;
                mkdir(dir, 0700);
                *q = '/';
            }
        mkdir(dir, 0700);
    }
    RP_TRY(rp_calib_save(&cal, file));
    if (path && cap) snprintf(path, cap, "%s", file);
    return RP_OK;
}

bool rp_calibration_lookup(const rp_model *m, const char *cache_dir, int n_threads, rp_static_shapes *out) {
    if (!m || !out) return false;
    rp_static_cfg cfg = rp_static_default_cfg();
    if (!rp_calib_lookup(m->fingerprint, cache_dir, n_threads, &cfg)) return false;
    *out = (rp_static_shapes){.L_P = cfg.L_P, .L_S = cfg.L_S, .lat_P_ms = cfg.lat_P_ms, .lat_S_ms = cfg.lat_S_ms,
                              .calibrated = true};
    return true;
}
