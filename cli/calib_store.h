/* calib_store.h — stored static-shape calibrations (per model, machine, thread count) for the benchmarks that
 * drive the reuse engine directly, in its internal structs (the commands use the public rp_calibration_* calls;
 * rp_calibration_lookup is what these become once the benchmarks are on the public API). */
#ifndef RP_CLI_CALIB_STORE_H
#define RP_CLI_CALIB_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "reprise.h"

struct rp_reuse;
struct rp_static_cfg;

/* The stored static shapes for this model + machine into *cfg (its r kept); false if none. Callers size
 * contexts and batches with them before creating anything (a calibrated L_S may exceed the default). */
bool cli_load_calib(const rp_model *m, const char *cache_dir, int threads, struct rp_static_cfg *cfg);
/* The same, into an engine's static configuration. */
bool cli_apply_calib(struct rp_reuse *e, const rp_model *m, const char *cache_dir, int threads);
/* cli_calib_warn's view of a static configuration. */
rp_static_shapes cli_static_shapes(const struct rp_static_cfg *cfg);

#endif
