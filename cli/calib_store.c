/* calib_store.c — stored static-shape calibrations for `plan` and the benchmarks that drive the reuse engine directly. */
#include "calib_store.h"

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

rp_static_shapes cli_static_shapes(const rp_static_cfg *cfg) {
    const rp_static_shapes sh = {.L_P = cfg->L_P, .L_S = cfg->L_S, .lat_P_ms = cfg->lat_P_ms, .lat_S_ms = cfg->lat_S_ms};
    return sh;
}
