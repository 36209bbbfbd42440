/* bandwidth.h — the memory-bandwidth probe and the decode ceiling it implies (shared by `bench kernels` and `bench model`). */
#ifndef RP_CLI_BANDWIDTH_H
#define RP_CLI_BANDWIDTH_H

#include <stddef.h>

/* Access patterns the probe reads (the ceiling is the best of them). */
enum { CLI_BW_SINGLE, CLI_BW_FOUR, CLI_BW_PREFETCH, CLI_BW_WIDE, CLI_BW_PATTERNS };
const char *cli_bw_pattern_name(int pattern);

/* A probe owns one buffer (from rp_bigmem_alloc, like the packed weights),
 * filled once, so repeated measurements read the same pages. */
typedef struct cli_bw_probe cli_bw_probe;
cli_bw_probe *cli_bw_create(size_t bytes);   /* NULL when out of memory */
void cli_bw_free(cli_bw_probe *p);

/* Best of `reps` full passes per pattern, read by `threads` threads (<= 64);
 * GB/s per pattern into gbs[CLI_BW_PATTERNS] when not NULL (0 for a pattern
 * the CPU cannot run); returns the best. */
double cli_bw_measure(cli_bw_probe *p, int threads, int reps, double *gbs);

/* The bytes one decode step streams, over which a bandwidth gives the decode ceiling, are
 * rp_model_perf.decode_bytes_per_token (reprise.h). */

#endif /* RP_CLI_BANDWIDTH_H */
