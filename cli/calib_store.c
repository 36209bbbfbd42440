/* calib_store.c — stored static-shape calibrations for the benchmarks that drive the reuse engine directly. */
#include "calib_store.h"

#include "model/model.h"
#include "reuse/engine.h"
#include "reuse/plan.h"

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
