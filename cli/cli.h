/* cli.h — shared pieces of the `reprise` command-line tool: subcommands and option parsing. */
#ifndef RP_CLI_H
#define RP_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rp_model rp_model;   /* reprise.h */

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);   /* forwards to the reprise-bench program beside this one */
int cmd_plan(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_demo(int argc, char **argv);

/* Applies a --cpu LEVEL option (scalar|avx2|avx512|amx on x86-64, scalar|neon|dotprod|i8mm|sve2|sme on
 * aarch64, or auto) before models load; prints the error and returns false if the machine lacks it. */
bool cli_set_cpu(const char *cmd, const char *level);
/* Parses "128,512,2048" into at most `cap` positive integers; returns the count or -1. */
int cli_int_list(const char *cmd, const char *opt, const char *s, long *out, int cap);

/* Option parsing: each subcommand walks argv with these. They print a clear
 * message and return false on a missing or malformed value. */
typedef struct cli_args {
    int argc, i;
    char **argv;
    const char *cmd;
} cli_args;

bool cli_is(cli_args *a, const char *s1, const char *s2);   /* current arg is s1 or s2 (and records both names) */
bool cli_str(cli_args *a, const char **out);                /* value after the current option */
bool cli_int(cli_args *a, long lo, long hi, long *out);
bool cli_float(cli_args *a, double lo, double hi, double *out);
bool cli_u64(cli_args *a, uint64_t *out);
bool cli_select(cli_args *a, int *out);   /* --select hybrid|dev|attn -> rp_select_kind */
/* Reports the current argument as unknown, with the closest option of the
 * command ("did you mean --top-k?"; edit distance over the names cli_is saw
 * for it), and returns 2. Call it after the whole if-chain of cli_is. */
int cli_unknown(cli_args *a);
/* The known option closest to `arg`, or NULL when none is close. */
const char *cli_closest(const cli_args *a, const char *arg);

/* Prints "reprise <cmd>: <what>: <rp_last_error>" and returns 1. */
int cli_fail(const char *cmd, const char *what, int status);

/* Before a context is allocated: "reprise <cmd>: context N tokens: KV cache up to X MiB (Y MiB available)" for
 * contexts of 4096+ tokens (the engine refuses what cannot fit, naming both). */
/* The KV memory a context needs (said before it is allocated), with the sliding-window saving when the model
 * has such layers (n_batch: the forward calls' rows; swa_full: --swa-full). */
void cli_kv_note(const char *cmd, const rp_model *m, long n_ctx, int kv_type, long n_batch, bool swa_full);

/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL with a message on error. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

double cli_now(void);   /* monotonic seconds */
int cli_cmp_double(const void *a, const void *b);            /* qsort: ascending */
double cli_pct_sorted(const double *sorted, int n, double p); /* linear-interpolated percentile, p in [0, 1]; 0 if n <= 0 */

#endif
