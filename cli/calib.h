/* calib.h — stored static-shape calibrations (per model, machine, thread count) and how figures are labelled
 * when none is loaded (the shapes are defaults and predicted latencies are placeholders). */
#ifndef RP_CLI_CALIB_H
#define RP_CLI_CALIB_H

#include <stdbool.h>
#include <stddef.h>

struct rp_model;
struct rp_reuse;
struct rp_reuse_stats;
struct rp_static_cfg;

/* The calibration file for a model + machine + thread count: DIR/calib-<fingerprint>-<machine hash>.txt. */
void cli_calib_path(const char *cache_dir, const struct rp_model *m, int threads, char *buf, size_t cap);
/* The machine key stored in (and checked against) a calibration: CPU brand, dispatch level, threads. */
void cli_machine_key(int threads, char *buf, size_t cap);
/* The stored static shapes for this model + machine into *cfg (its r kept); false if none. Callers size
 * contexts and batches with them before creating anything (a calibrated L_S may exceed the default). */
bool cli_load_calib(const struct rp_model *m, const char *cache_dir, int threads, struct rp_static_cfg *cfg);
/* The same, into an engine's static configuration. */
bool cli_apply_calib(struct rp_reuse *e, const struct rp_model *m, const char *cache_dir, int threads);

/* Static mode without a calibration: one stderr note saying that the call shapes in *cfg are defaults and
 * that predicted latencies (plan_ms) are placeholders, with the command that calibrates (same cache dir and
 * thread count, which the lookup is keyed by). */
void cli_calib_warn(const char *cmd, const struct rp_static_cfg *cfg, const char *model_path, const char *cache_dir,
                    int threads);

/* rp_reuse_stats_json with honest labels: "plan_ms" is the static plan's predicted latency only when the
 * run was static and calibrated, null otherwise (dynamic runs plan nothing; uncalibrated latencies are
 * placeholders); static runs add "calibrated": true|false. */
void cli_stats_json(const struct rp_reuse_stats *st, bool static_mode, bool calibrated, char *buf, size_t cap);

#endif
