// shim.mjs — an LD_PRELOAD shim between node-llama-cpp and llama.cpp, for two things
// node-llama-cpp cannot be told to do: (1) a persistent ggml threadpool per context,
// (2) loading one chosen ggml CPU variant library.
//
// (1) Persistent threadpool (--threadpool persistent, the default).
// Why: ggml's CPU backend runs every graph on a threadpool. llama-bench,
// llama-cli and llama-server (through common.cpp) create one persistent pool per
// context (ggml_threadpool_new + llama_attach_threadpool). node-llama-cpp
// attaches none, so ggml creates and joins a *disposable* pool of n_threads
// threads for every llama_decode. With -t 2 on a small VM that costs up to tens
// of milliseconds per decode (the new thread often waits for the creator's time
// slice while the creator spins in ggml_barrier), which would make llama.cpp look
// far slower than llama-bench shows.
//
// How: a tiny LD_PRELOAD shim (C source below, compiled on first use with the
// system C compiler into node_modules/.cache/, which git ignores) interposes
// llama_decode/llama_free: on a context's first decode it creates a
// ggml_threadpool of llama_n_threads(ctx) threads with ggml's default parameters
// (poll 50, normal priority — llama-bench's defaults) and attaches it; it frees
// it in llama_free. The script re-executes itself under LD_PRELOAD.
// --threadpool disposable leaves llama_decode alone and measures node-llama-cpp as shipped.
//
// (2) CPU variant (--cpu-variant NAME). The prebuilt linux-x64 package ships llama.cpp built
// with GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS: one libggml-cpu-<variant>.so per x86
// micro-architecture (x64, sse42, sandybridge, ivybridge, piledriver, haswell, skylakex,
// cannonlake, cascadelake, icelake, cooperlake, zen4, alderlake, sapphirerapids).
// node-llama-cpp calls ggml_backend_load_all_from_path(<bins dir>), which dlopens every
// variant, asks each for its score on this CPU and keeps the best; there is no env var or
// option to pick another. The shim interposes ggml_backend_load_all_from_path and, when
// REPRISE_PEER_CPU_VARIANT is set, loads only <bins dir>/libggml-cpu-<variant>.so with
// ggml_backend_load() (which still refuses a variant whose score on this CPU is 0, e.g.
// sapphirerapids without AMX).
//
// The shim is only preloaded when one of the two is wanted; with --threadpool disposable
// and no --cpu-variant the benchmark runs on node-llama-cpp exactly as shipped.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { listCpuVariants } from "./common.mjs";

const SHIM_C = String.raw`/* reprise-peer-shim: see bench/peer/shim.mjs */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ggml_threadpool;
struct llama_context;
/* ggml.h's struct ggml_threadpool_params (GGML_MAX_N_THREADS 512); only used with --pin. */
struct tp_params {
    _Bool cpumask[512];
    int n_threads;
    int prio;
    uint32_t poll;
    _Bool strict_cpu;
    _Bool paused;
};
/* llama.h's llama_batch, passed by value to llama_decode. */
typedef struct llama_batch {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch;

typedef int32_t (*decode_fn)(struct llama_context *, llama_batch);
typedef void (*free_fn)(struct llama_context *);
typedef int32_t (*n_threads_fn)(struct llama_context *);
typedef void (*attach_fn)(struct llama_context *, struct ggml_threadpool *, struct ggml_threadpool *);
typedef void (*detach_fn)(struct llama_context *);
typedef void (*params_init_fn)(void *, int);
typedef void *(*reg_by_name_fn)(const char *);
typedef void *(*get_proc_fn)(void *, const char *);
typedef struct ggml_threadpool *(*tp_new_fn)(void *);
typedef void (*tp_free_fn)(struct ggml_threadpool *);
typedef void (*load_all_fn)(const char *);
typedef void *(*load_fn)(const char *);

static struct {
    int ready, verbose, persistent, pin;
    decode_fn decode;
    free_fn free_ctx;
    n_threads_fn n_threads;
    attach_fn attach;
    detach_fn detach;
    params_init_fn params_init;
    tp_new_fn tp_new;
    tp_free_fn tp_free;
} R;

#define MAX_CTX 64
static struct { struct llama_context *ctx; struct ggml_threadpool *tp; int n; int main_cpu; } pools[MAX_CTX];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct find_arg { const char *prefix; char path[4096]; };
static int find_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct find_arg *a = data;
    const char *n = info->dlpi_name;
    if (n && *n) {
        const char *base = strrchr(n, '/');
        base = base ? base + 1 : n;
        if (strncmp(base, a->prefix, strlen(a->prefix)) == 0) {
            snprintf(a->path, sizeof a->path, "%s", n);
            return 1;
        }
    }
    return 0;
}
static void *open_loaded(const char *prefix) {
    struct find_arg a = {prefix, {0}};
    dl_iterate_phdr(find_cb, &a);
    return a.path[0] ? dlopen(a.path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
}
static void fail(const char *what) {
    fprintf(stderr, "reprise-peer-shim: %s\n", what);
    abort();
}
static void init_syms(void) {
    if (R.ready) return;
    void *llama = open_loaded("libllama.");
    void *ggml = open_loaded("libggml.");
    void *base = open_loaded("libggml-base.");
    if (!llama || !ggml || !base) fail("cannot find libllama / libggml / libggml-base in the process");
    R.decode = (decode_fn)dlsym(llama, "llama_decode");
    R.free_ctx = (free_fn)dlsym(llama, "llama_free");
    R.n_threads = (n_threads_fn)dlsym(llama, "llama_n_threads");
    R.attach = (attach_fn)dlsym(llama, "llama_attach_threadpool");
    R.detach = (detach_fn)dlsym(llama, "llama_detach_threadpool");
    R.params_init = (params_init_fn)dlsym(base, "ggml_threadpool_params_init");
    reg_by_name_fn reg_by_name = (reg_by_name_fn)dlsym(ggml, "ggml_backend_reg_by_name");
    get_proc_fn get_proc = (get_proc_fn)dlsym(base, "ggml_backend_reg_get_proc_address");
    if (!R.decode || !R.free_ctx || !R.n_threads || !R.attach || !R.detach || !R.params_init || !reg_by_name || !get_proc)
        fail("missing llama.cpp/ggml symbols");
    void *cpu = reg_by_name("CPU");
    if (!cpu) fail("no CPU backend registered");
    R.tp_new = (tp_new_fn)get_proc(cpu, "ggml_threadpool_new");
    R.tp_free = (tp_free_fn)get_proc(cpu, "ggml_threadpool_free");
    if (!R.tp_new || !R.tp_free) fail("the CPU backend lacks ggml_threadpool_new/free");
    const char *v = getenv("REPRISE_PEER_SHIM_VERBOSE");
    R.verbose = v && *v && strcmp(v, "0") != 0;
    const char *tp = getenv("REPRISE_PEER_THREADPOOL");
    R.persistent = tp && strcmp(tp, "persistent") == 0;
    const char *pin = getenv("REPRISE_PEER_PIN");
    R.pin = R.persistent && pin && *pin && strcmp(pin, "0") != 0;
    R.ready = 1;
}
static void drop_locked(int i) {
    R.detach(pools[i].ctx);
    R.tp_free(pools[i].tp);
    pools[i].ctx = NULL;
    pools[i].tp = NULL;
}

int32_t llama_decode(struct llama_context *ctx, llama_batch batch) {
    pthread_mutex_lock(&mu);
    init_syms();
    if (!R.persistent) {
        pthread_mutex_unlock(&mu);
        return R.decode(ctx, batch);
    }
    int n = R.n_threads(ctx), slot = -1, freeslot = -1;
    for (int i = 0; i < MAX_CTX; i++) {
        if (pools[i].ctx == ctx) slot = i;
        else if (!pools[i].ctx && freeslot < 0) freeslot = i;
    }
    if (slot >= 0 && pools[slot].n != n) { drop_locked(slot); freeslot = slot; slot = -1; }
    if (slot < 0 && freeslot >= 0) {
        /* Without --pin, struct ggml_threadpool_params is treated as opaque (it is ~0.5 KiB). */
        _Alignas(64) unsigned char params[16384];
        struct tp_params *tpp = (struct tp_params *)params;
        R.params_init(params, n); /* ggml defaults: poll 50, normal priority, no affinity */
        int main_cpu = -1;
        cpu_set_t saved;
        CPU_ZERO(&saved);
        if (R.pin) {
            /* strict placement on the first n allowed CPUs: workers 1..n-1 get the first
             * n-1, the decoding thread (worker 0) the n-th (ggml places it last). */
            if (tpp->n_threads != n || tpp->poll != 50) fail("unexpected ggml_threadpool_params layout");
            if (pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) != 0) fail("pthread_getaffinity_np failed");
            int k = 0;
            for (int c = 0; c < CPU_SETSIZE && c < 512 && k < n; c++)
                if (CPU_ISSET(c, &saved)) { tpp->cpumask[c] = 1; main_cpu = c; k++; }
            if (k < n) fail("--pin: fewer allowed CPUs than threads");
            tpp->strict_cpu = 1;
        }
        struct ggml_threadpool *tp = R.tp_new(params);
        if (!tp) fail("ggml_threadpool_new failed");
        if (R.pin) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved); /* tp_new pinned the caller */
        R.attach(ctx, tp, NULL);
        pools[freeslot].ctx = ctx;
        pools[freeslot].tp = tp;
        pools[freeslot].n = n;
        pools[freeslot].main_cpu = main_cpu;
        slot = freeslot;
        if (R.verbose)
            fprintf(stderr, "# threadpool: attached a persistent %d-thread ggml threadpool to llama_context %p%s\n", n,
                    (void *)ctx, R.pin ? " (threads pinned to the first CPUs, the decoding thread last)" : "");
    }
    int main_cpu = slot >= 0 ? pools[slot].main_cpu : -1;
    pthread_mutex_unlock(&mu);
    if (main_cpu < 0) return R.decode(ctx, batch);
    /* node-llama-cpp decodes on whichever libuv worker thread is free: pin it for this call only. */
    cpu_set_t saved, one;
    int have = pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    CPU_ZERO(&one);
    CPU_SET(main_cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    int32_t rc = R.decode(ctx, batch);
    if (have) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    return rc;
}

void llama_free(struct llama_context *ctx) {
    pthread_mutex_lock(&mu);
    init_syms();
    for (int i = 0; i < MAX_CTX; i++)
        if (pools[i].ctx == ctx) drop_locked(i);
    pthread_mutex_unlock(&mu);
    R.free_ctx(ctx);
}

void ggml_backend_load_all_from_path(const char *dir) {
    void *ggml = open_loaded("libggml.");
    if (!ggml) fail("cannot find libggml in the process");
    load_all_fn real = (load_all_fn)dlsym(ggml, "ggml_backend_load_all_from_path");
    load_fn load = (load_fn)dlsym(ggml, "ggml_backend_load");
    if (!real || !load) fail("missing ggml_backend_load_all_from_path / ggml_backend_load");
    const char *variant = getenv("REPRISE_PEER_CPU_VARIANT");
    if (!variant || !*variant || !dir) {
        real(dir);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, variant);
    if (!load(path))
        fprintf(stderr, "reprise-peer-shim: ggml could not load %s (missing, or not supported by this CPU)\n", path);
}
`;

const here = path.dirname(fileURLToPath(import.meta.url));
const ACTIVE_ENV = "REPRISE_PEER_SHIM";

function buildShim() {
    const hash = crypto.createHash("sha256").update(SHIM_C).digest("hex").slice(0, 16);
    const dir = path.join(here, "node_modules", ".cache", "reprise-peer");
    const so = path.join(dir, `reprise-peer-shim-${hash}.so`);
    if (fs.existsSync(so)) return so;
    fs.mkdirSync(dir, { recursive: true });
    const src = path.join(dir, `reprise-peer-shim-${hash}.c`);
    fs.writeFileSync(src, SHIM_C);
    const cc = process.env.CC || "cc";
    const tmp = `${so}.${process.pid}.tmp`;
    const r = spawnSync(cc, ["-O2", "-std=gnu11", "-shared", "-fPIC", "-o", tmp, src, "-ldl", "-lpthread"], { encoding: "utf8" });
    if (r.error || r.status !== 0) {
        process.stderr.write(`reprise-peer-shim: '${cc}' failed to compile ${src}: ${r.error?.message ?? r.stderr}\n` +
            "install a C compiler, or pass --threadpool disposable (and no --cpu-variant)\n");
        process.exit(1);
    }
    fs.renameSync(tmp, so);
    return so;
}

// Make sure this process runs with the shim preloaded when the options need it,
// re-executing itself under LD_PRELOAD if needed (the parent then never returns).
// threadpool: "persistent" | "disposable"; cpuVariant: a variant name or undefined.
export function ensureShim({ threadpool = "persistent", cpuVariant, pin = false } = {}) {
    if (threadpool !== "persistent" && threadpool !== "disposable") {
        process.stderr.write("--threadpool must be 'persistent' or 'disposable'\n");
        process.exit(2);
    }
    if (cpuVariant && !listCpuVariants().includes(cpuVariant)) {
        process.stderr.write(`--cpu-variant: unknown variant '${cpuVariant}'; available: ${listCpuVariants().join(", ")}\n`);
        process.exit(2);
    }
    if (pin && threadpool !== "persistent") {
        process.stderr.write("--pin needs --threadpool persistent\n");
        process.exit(2);
    }
    if (threadpool === "disposable" && !cpuVariant) return { threadpool, pin, shim: null };
    if (process.env[ACTIVE_ENV]) {
        const maps = fs.readFileSync("/proc/self/maps", "utf8");
        if (!maps.includes("reprise-peer-shim-")) {
            process.stderr.write("reprise-peer-shim: expected it to be preloaded, but it is not mapped\n");
            process.exit(1);
        }
        return { threadpool, pin, shim: process.env[ACTIVE_ENV] };
    }
    const so = buildShim();
    const env = {
        ...process.env,
        [ACTIVE_ENV]: so,
        LD_PRELOAD: process.env.LD_PRELOAD ? `${so}:${process.env.LD_PRELOAD}` : so,
        REPRISE_PEER_THREADPOOL: threadpool,
        REPRISE_PEER_SHIM_VERBOSE: process.env.REPRISE_PEER_SHIM_VERBOSE ?? "1"
    };
    if (pin) env.REPRISE_PEER_PIN = "1";
    else delete env.REPRISE_PEER_PIN;
    if (cpuVariant) env.REPRISE_PEER_CPU_VARIANT = cpuVariant;
    else delete env.REPRISE_PEER_CPU_VARIANT;
    const r = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { stdio: "inherit", env });
    if (r.error) {
        process.stderr.write(`reprise-peer-shim: cannot re-execute node: ${r.error.message}\n`);
        process.exit(1);
    }
    if (r.signal) {
        process.stderr.write(`reprise-peer-shim: the benchmark process was killed by ${r.signal}\n`);
        process.exit(128 + (os.constants.signals[r.signal] ?? 0));
    }
    process.exit(r.status ?? 1);
}
