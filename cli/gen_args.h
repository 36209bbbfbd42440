/* gen_args.h — the generation options `run` and `chat` share, and the sampling options `bench model` takes too. */
#ifndef RP_CLI_GEN_ARGS_H
#define RP_CLI_GEN_ARGS_H

#include <stdbool.h>

#include "cli.h"
#include "reprise.h"

typedef struct cli_gen {
    rp_sampler_params sp;
    long n_predict;          /* -n; -1: until end-of-generation or a full context */
    const char *kv_name;     /* --kv-type */
    const char *ctk, *ctv;   /* -ctk / -ctv (llama-cli): they must agree */
    bool ignore_eos;
    bool swa_full;           /* --swa-full: sliding-window layers keep every cell */
    const char *chat_template;   /* --chat-template NAME|FILE, or NULL: the model's own */
} cli_gen;

cli_gen cli_gen_defaults(long n_predict);

/* Each returns 1 when the current argument was one of its options (consumed
 * with its value), 0 when it is not, -1 on a bad value (reported). */
int cli_sampling_arg(cli_args *a, rp_sampler_params *sp);   /* --temp --top-k --top-p --min-p, penalties, --seed */
int cli_gen_arg(cli_args *a, cli_gen *g);                   /* the above, -n, --kv-type, -ctk/-ctv, --ignore-eos, --swa-full, -fa, --jinja,
                                                               --chat-template */
/* Applies --chat-template to the model (or checks the model's own template): 0, or 1 with the error printed.
 * A model without any template passes (chat then shows a plain transcript and says so). */
int cli_gen_chat_template(const char *cmd, rp_model *m, const cli_gen *g);

/* The KV cache type (rp_kv_type) from --kv-type / -ctk / -ctv, or -1 with a message. */
int cli_gen_kv_type(const char *cmd, const cli_gen *g);

/* GPU offload options (`run`, `chat`, `serve`, `bench model`): -ngl / --gpu-layers N|all, --device NAME|INDEX,
 * --no-gpu. */
typedef struct cli_gpu {
    long ngl;                /* -1: default (all layers when a GPU is present; lavapipe only when named) */
    bool ngl_set;            /* -ngl / --no-gpu given */
    const char *device;      /* --device, or NULL */
} cli_gpu;

cli_gpu cli_gpu_defaults(void);
int cli_gpu_arg(cli_args *a, cli_gpu *g);
/* Sets the model params' GPU fields; a KV type other than f16 turns the default offload off (the GPU's KV cache is
 * f16 only; an explicit -ngl with it fails when the cache is made, naming both). */
void cli_gpu_params(const cli_gpu *g, int kv_type, rp_model_params *mp);
/* Prints the model's start-up line ("reprise CMD: gpu: ...") to stderr: always when layers are on the GPU or a
 * GPU option was given; otherwise only when a GPU was there but not used (a machine without one hears nothing). */
void cli_gpu_note(const char *cmd, const rp_model *m, const cli_gpu *g);

extern const char cli_gpu_help[];        /* help lines of cli_gpu_arg's options */
extern const char cli_sampling_help[];   /* help lines of cli_sampling_arg's options */
extern const char cli_gen_help[];        /* help lines of the rest of cli_gen_arg's options (not -n) */

#endif
