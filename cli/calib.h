/* calib.h — how static-shape figures are labelled when no calibration is loaded (the call shapes are defaults and
 * predicted latencies are placeholders). */
#ifndef RP_CLI_CALIB_H
#define RP_CLI_CALIB_H

#include "reprise.h"

/* Static mode without a calibration: one stderr note saying that the call shapes in *sh are defaults and
 * that predicted latencies (plan_ms) are placeholders, with the command that calibrates (same cache dir and
 * thread count, which the lookup is keyed by). */
void cli_calib_warn(const char *cmd, const rp_static_shapes *sh, const char *model_path, const char *cache_dir,
                    int threads);

#endif
