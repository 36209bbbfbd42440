/* calib.c — stored static-shape calibrations for the CLI, and the labels of uncalibrated static figures. */
#include "calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kernels/cpu.h"
#include "model/model.h"
#include "reuse/engine.h"
#include "reuse/plan.h"

/* Calibration file for this model, machine and thread count:
 * DIR/calib-<fingerprint>-<machine key hash>.txt, DIR = --cache-dir, else
 * $XDG_CACHE_HOME/reprise, else ~/.cache/reprise. One file per key, so a
 * calibration on another CPU or thread count sits next to this one instead of
 * replacing it (the key inside is still checked on load). */
void cli_calib_path(const char *cache_dir, const rp_model *m, int threads, char *buf, size_t cap) {
    rp_calib_path(cache_dir, m->fingerprint, threads, buf, cap);
}

void cli_machine_key(int threads, char *buf, size_t cap) { rp_calib_machine_key(threads, buf, cap); }

bool cli_load_calib(const rp_model *m, const char *cache_dir, int threads, rp_static_cfg *cfg) {
    return rp_calib_lookup(m->fingerprint, cache_dir, threads, cfg);
}

bool cli_apply_calib(rp_reuse *e, const rp_model *m, const char *cache_dir, int threads) {
    return cli_load_calib(m, cache_dir, threads, &rp_reuse_get_params(e)->static_cfg);
}

void cli_calib_warn(const char *cmd, const rp_static_cfg *cfg, const char *model_path, const char *cache_dir,
                    int threads) {
    fprintf(stderr,
            "reprise %s: static mode: no calibration for this model/machine (%d threads), call shapes L_P=%d L_S=%d "
            "are defaults and the plan's predicted latency (plan_ms) is a placeholder (%.1f / %.1f ms per call, not "
            "measured); run `reprise plan -m %s --calibrate -t %d%s%s`\n",
            cmd, threads, cfg->L_P, cfg->L_S, cfg->lat_P_ms, cfg->lat_S_ms, model_path, threads,
            cache_dir ? " --cache-dir " : "", cache_dir ? cache_dir : "");
}

void cli_stats_json(const rp_reuse_stats *st, bool static_mode, bool calibrated, char *buf, size_t cap) {
    char raw[2048];
    rp_reuse_stats_json(st, raw, sizeof raw);
    char *close = strrchr(raw, '}');
    if (!close) { snprintf(buf, cap, "%s", raw); return; }
    /* the engine's value of "plan_ms" (up to the next ',' or '}') */
    static const char key[] = "\"plan_ms\": ";
    char *v = strstr(raw, key);
    if (v) v += sizeof key - 1;
    const char *ve = v ? v + strcspn(v, ",}") : NULL;
    const size_t tail = v ? (size_t)(close - ve) : 0;   /* what follows the value, before the closing brace */
    *close = 0;
    int w;
    if (v && !(static_mode && calibrated)) w = snprintf(buf, cap, "%.*snull%.*s", (int)(v - raw), raw, (int)tail, ve);
    else w = snprintf(buf, cap, "%s", raw);
    if (w < 0 || (size_t)w >= cap) return;
    if (static_mode) snprintf(buf + w, cap - (size_t)w, ", \"calibrated\": %s}", calibrated ? "true" : "false");
    else snprintf(buf + w, cap - (size_t)w, "}");
}
