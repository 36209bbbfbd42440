/* calib.c — the labels of uncalibrated static figures. */
#include "calib.h"

#include <stdio.h>

void cli_calib_warn(const char *cmd, const rp_static_shapes *sh, const char *model_path, const char *cache_dir,
                    int threads) {
    fprintf(stderr,
            "reprise %s: static mode: no calibration for this model/machine (%d threads), call shapes L_P=%d L_S=%d "
            "are defaults and the plan's predicted latency (plan_ms) is a placeholder (%.1f / %.1f ms per call, not "
            "measured); run `reprise plan -m %s --calibrate -t %d%s%s`\n",
            cmd, threads, sh->L_P, sh->L_S, sh->lat_P_ms, sh->lat_S_ms, model_path, threads,
            cache_dir ? " --cache-dir " : "", cache_dir ? cache_dir : "");
}
