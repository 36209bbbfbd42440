/* bench_all.c — `reprise bench all`: the papers' experiments a CPU build can run, in one run, joined into one HTML report. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "report.h"

/* One step: a bench subcommand with its argv (argv[0] is its name). */
typedef struct step {
    const char *title;
    int (*fn)(int, char **);
    char *argv[40];
    int argc;
    char html[1024];   /* its report ("" if none) */
    int rc;
    double secs;
} step;

static char *dup_printf(const char *fmt, const char *a, const char *b) {
    size_t n = strlen(fmt) + strlen(a) + (b ? strlen(b) : 0) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, a, b ? b : "");
    return s;
}

/* Appends argv words (string literals or owned copies; all freed as copies). */
static void add(step *s, const char *w) {
    if (s->argc < 39) s->argv[s->argc++] = strdup(w);
}

static void add_out(step *s, const char *opt, const char *dir, const char *file) {
    add(s, opt);
    char *p = dup_printf("%s/%s", dir, file);
    if (p && s->argc < 39) s->argv[s->argc++] = p;
    else free(p);
}

/* The next step of the run, titled, running fn. */
static step *new_step(step *steps, int *n, const char *title, int (*fn)(int, char **)) {
    step *s = &steps[(*n)++];
    s->title = title;
    s->fn = fn;
    return s;
}

/* A step's reports: --json / --json-out DIR/STEM.json and --html DIR/STEM.html,
 * the HTML being the page the joined report embeds. */
static void step_reports(step *s, const char *json_opt, const char *dir, const char *stem) {
    char f[128];
    snprintf(f, sizeof f, "%s.json", stem);
    add_out(s, json_opt, dir, f);
    snprintf(f, sizeof f, "%s.html", stem);
    add_out(s, "--html", dir, f);
    snprintf(s->html, sizeof s->html, "%s/%s", dir, f);
}

/* A peer step: runs argv (node bench/peer/prompt_cache.mjs ...) as a child process. */
static int run_child(int argc, char **argv) {
    (void)argc;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "reprise bench all: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int ws = 0;
    if (waitpid(pid, &ws, 0) < 0) return 1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Whether the llama.cpp peer can run: node on PATH and DIR/prompt_cache.mjs with its node_modules. */
static bool peer_ready(const char *dir, char *why, size_t cap) {
    char p[1200];
    snprintf(p, sizeof p, "%s/prompt_cache.mjs", dir);
    if (!is_file(p)) { snprintf(why, cap, "%s not found (--peer-dir DIR)", p); return false; }
    snprintf(p, sizeof p, "%s/node_modules/node-llama-cpp/package.json", dir);
    if (!is_file(p)) { snprintf(why, cap, "node-llama-cpp is not installed (cd %s && npm ci --omit=optional)", dir); return false; }
    if (system("command -v node >/dev/null 2>&1") != 0) { snprintf(why, cap, "node is not on PATH"); return false; }
    return true;
}

/* The mean TTFT of a mode in a bench reuse JSON (NAN if absent). */
static double reuse_mean(json_t *doc, const char *mode) {
    json_t *ms = json_object_get(doc, "modes");
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *x = json_array_get(ms, i);
        const char *n = json_string_value(json_object_get(x, "mode"));
        if (n && !strcmp(n, mode)) return json_number_value(json_object_get(x, "ttft_mean_ms"));
    }
    return NAN;
}

/* Reprise's modes against llama.cpp's prompt cache per workload, from DIR/reuse-<w>.json and DIR/peer-<w>.json
 * (the same timed prompts): a table and bars in the joined report. */
static void peer_section(FILE *f, const char *dir, const char *const *wl, int n_wl) {
    static char cells[3][9][64];
    const char *cp[3 * 9];
    const char *groups[3];
    double vals[3 * 4];
    int n = 0;
    for (int w = 0; w < n_wl && n < 3; w++) {
        char rp[1200], pp[1200];
        snprintf(rp, sizeof rp, "%s/reuse-%s.json", dir, wl[w]);
        snprintf(pp, sizeof pp, "%s/peer-%s.json", dir, wl[w]);
        json_t *r = json_load_file(rp, 0, NULL), *pe = json_load_file(pp, 0, NULL);
        double fresh = NAN, reuse = NAN, reused = NAN;
        json_t *sm = json_object_get(pe, "summary");
        for (size_t i = 0; i < json_array_size(sm); i++) {
            json_t *x = json_array_get(sm, i);
            const char *mo = json_string_value(json_object_get(x, "mode"));
            if (mo && !strcmp(mo, "fresh")) fresh = json_number_value(json_object_get(x, "ttft_mean_ms"));
            if (mo && !strcmp(mo, "reuse")) {
                reuse = json_number_value(json_object_get(x, "ttft_mean_ms"));
                reused = json_number_value(json_object_get(x, "reused_mean"));
            }
        }
        if (r && pe && reuse > 0) {
            const double none = reuse_mean(r, "none"), prefix = reuse_mean(r, "prefix"), blend = reuse_mean(r, "blend");
            snprintf(cells[n][0], 64, "%s", wl[w]);
            snprintf(cells[n][1], 64, fresh > 0 ? "%.1f" : "-", fresh);
            snprintf(cells[n][2], 64, "%.1f", reuse);
            snprintf(cells[n][3], 64, "%.0f", reused);
            snprintf(cells[n][4], 64, none > 0 ? "%.1f" : "-", none);
            snprintf(cells[n][5], 64, prefix > 0 ? "%.1f" : "-", prefix);
            snprintf(cells[n][6], 64, blend > 0 ? "%.1f" : "-", blend);
            snprintf(cells[n][7], 64, blend > 0 ? "%.2fx" : "-", reuse / blend);
            snprintf(cells[n][8], 64, blend > 0 && fresh > 0 ? "%.2fx" : "-", fresh / blend);
            for (int c = 0; c < 9; c++) cp[n * 9 + c] = cells[n][c];
            groups[n] = wl[w];
            vals[n * 4 + 0] = reuse;
            vals[n * 4 + 1] = none > 0 ? none : 0;
            vals[n * 4 + 2] = prefix > 0 ? prefix : 0;
            vals[n * 4 + 3] = blend > 0 ? blend : 0;
            n++;
        }
        json_decref(r);
        json_decref(pe);
    }
    if (n == 0) return;
    rp_html_h2(f, "Reprise against llama.cpp's prompt cache (same model, same timed prompts)");
    rp_html_p(f, "llama.cpp through node-llama-cpp (bench/peer/prompt_cache.mjs --only-previous): before each timed "
                 "prompt it evaluates the prompt just before it, and keeps the KV of their longest common prefix "
                 "(llama-server's cache_prompt). Mean TTFT in ms over the timed prompts.");
    const char *head[9] = {"workload", "llama.cpp fresh", "llama.cpp prompt cache", "llama.cpp reused tok", "Reprise none",
                           "Reprise prefix", "Reprise blend", "blend vs llama.cpp cache", "blend vs llama.cpp fresh"};
    rp_html_table(f, head, 9, cp, n);
    const char *series[4] = {"llama.cpp prompt cache", "Reprise none", "Reprise prefix", "Reprise blend"};
    rp_svg_bars(f, "Mean TTFT: Reprise against llama.cpp's prompt cache", "ms", groups, n, series, 4, vals);
}

/* The q8_0 sibling of a model file (stories260K.gguf -> stories260K-q8_0.gguf) if it exists: the
 * agents step's drafter, as in RESULTS. */
static bool q8_sibling(const char *model, char *buf, size_t cap) {
    const size_t n = strlen(model);
    if (n < 5 || strcmp(model + n - 5, ".gguf") || strstr(model, "-q8_0")) return false;
    snprintf(buf, cap, "%.*s-q8_0.gguf", (int)(n - 5), model);
    return is_file(buf);
}

int bench_all(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench all"};
    const char *model = NULL, *fid = NULL, *out = "bench-report", *threads = "2", *data = NULL, *steps_s = NULL;
    const char *drafter = NULL, *peer_dir = "bench/peer", *queries_s = NULL, *docs_s = NULL;
    bool quick = false, join = false, peer = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench all -m MODEL.gguf [--fidelity-model SMALL.gguf] [--out DIR] [-t 2] [--data DIR]\n"
                   "                         [--quick] [--queries N] [--docs N]\n"
                   "                         [--steps reuse,workloads,fidelity,sweep,ablation,agents,peer]\n"
                   "                         [--drafter SPEC] [--peer [--peer-dir bench/peer]] [--join]\n"
                   "Runs the papers' experiments that a CPU build can run, one after another, and joins their\n"
                   "reports into DIR/report.html (each bench also leaves its own JSON / HTML in DIR):\n"
                   "  reuse      TTFT of none / prefix / full / blend / static / static-naive, synthetic documents (-m)\n"
                   "  workloads  doc QA (HotpotQA), long chat (LoCoMo), agent skills (SkillsBench) TTFT on -m\n"
                   "  fidelity   the same three workloads on --fidelity-model (a real trained model, e.g.\n"
                   "             stories260K): KL and greedy agreement against exact prefill\n"
                   "  sweep      prefix / non-prefix reuse ratio 0..100%% at 1k / 2k / 3k tokens (-m)\n"
                   "  ablation   the full system against each component switched off (-m): 24 documents of 256\n"
                   "             tokens, 4 per query + 32 new, 24 queries 200 ms apart, 100,000 filler rows per store\n"
                   "  agents     multi-agent makespan: Batch-AR, Seq-SD, Batch-SD, uniform, HAL, HAL+yield at 2 / 3 /\n"
                   "             4 agents and stalls 0, [0.1, 1] s, [1, 10] s (on --fidelity-model if given, else -m);\n"
                   "             generation 32,48,32, prompts 192,128,160, results 32; --drafter SPEC (default:\n"
                   "             model:<the agents model's -q8_0.gguf sibling> when it exists, else bench agents'\n"
                   "             default)\n"
                   "  peer       with --peer: llama.cpp's prompt cache (bench/peer/prompt_cache.mjs --only-previous) on\n"
                   "             the workloads step's timed prompts, on -m; skipped with a message without node or\n"
                   "             node-llama-cpp (cd bench/peer && npm ci --omit=optional)\n"
                   "Not run: the EdgeAgent paper's section 4.3 (tensor-parallel CPU+GPU prefill, the zero-copy\n"
                   "latency breakdown, kernel efficiency against a vendor GEMM) and the GPU / tensor-parallel steps\n"
                   "of its component ablation: Reprise has no GPU backend yet (`bench kernels` measures the CPU\n"
                   "kernels alone); that paper's workload-mix sweep (bench agents' mix is fixed at 1:2:2) and its\n"
                   "[1, 100] s stalls (`bench agents --stall 1:100` runs them); the KV paper's energy figures (no\n"
                   "power meter), its graph-size latency curve (`reprise plan --calibrate` measures it), its\n"
                   "five-way latency breakdown (ablation reports load / exposed load / commit times) and task\n"
                   "accuracy (`bench reuse --answer N` with an instruct model).\n"
                   "--quick shrinks every step (few queries, short prompts) to check the pipeline in minutes.\n"
                   "--queries N sets the queries of the reuse, workloads, fidelity and peer steps (default 3, and 8\n"
                   "for fidelity; --quick: 2 and 3); --docs N the passages per doc QA / chat prompt (default 6).\n"
                   "--join runs nothing: it joins the reports already in DIR (reuse-synthetic.html, reuse-<w>.html,\n"
                   "fidelity-<w>.html, sweep.html, ablation.html, agents.html, peer-<w>.json) into DIR/report.html.\n"
                   "The full run on a 1B-shape model takes 30-40 minutes on 2 cores.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model)) return 2; }
        else if (cli_is(&a, "--fidelity-model", NULL)) { if (!cli_str(&a, &fid)) return 2; }
        else if (cli_is(&a, "--out", NULL)) { if (!cli_str(&a, &out)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_str(&a, &threads)) return 2; }
        else if (cli_is(&a, "--data", NULL)) { if (!cli_str(&a, &data)) return 2; }
        else if (cli_is(&a, "--steps", NULL)) { if (!cli_str(&a, &steps_s)) return 2; }
        else if (cli_is(&a, "--drafter", NULL)) { if (!cli_str(&a, &drafter)) return 2; }
        else if (cli_is(&a, "--peer-dir", NULL)) { if (!cli_str(&a, &peer_dir)) return 2; }
        else if (cli_is(&a, "--queries", NULL)) { long v; if (!cli_int(&a, 1, 100000, &v)) return 2; queries_s = argv[a.i]; }
        else if (cli_is(&a, "--docs", NULL)) { long v; if (!cli_int(&a, 1, 64, &v)) return 2; docs_s = argv[a.i]; }
        else if (cli_is(&a, "--peer", NULL)) peer = true;
        else if (cli_is(&a, "--quick", NULL)) quick = true;
        else if (cli_is(&a, "--join", NULL)) join = true;
        else return cli_unknown(&a);
    }
    if (!model && !join) { fprintf(stderr, "reprise bench all: -m MODEL.gguf is required\n"); return 2; }
    if (!model) model = "(joined)";
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "reprise bench all: cannot create '%s': %s\n", out, strerror(errno));
        return 1;
    }
    const char *agents_model = fid ? fid : model;
    const char *queries = queries_s ? queries_s : quick ? "2" : "3";
    static step steps[24];
    int n = 0;
    step *s;
#define WANT(name) (!steps_s || strstr(steps_s, name))
    if (WANT("reuse")) {
        s = new_step(steps, &n, "reuse: synthetic documents", bench_reuse);
        add(s, "reuse"); add(s, "-m"); add(s, model); add(s, "--workload"); add(s, "synthetic");
        add(s, "--queries"); add(s, queries); add(s, "-t"); add(s, threads);
        add(s, "--modes"); add(s, "none,prefix,full,blend,static,static-naive");
        if (quick) { add(s, "--doc-len"); add(s, "64"); add(s, "--tail"); add(s, "8"); }
        step_reports(s, "--json", out, "reuse-synthetic");
    }
    static const char *wl[3] = {"docqa", "chat", "skills"};
    for (int pass = 0; pass < 2; pass++) {
        const char *m = pass == 0 ? model : fid ? fid : join ? "(joined)" : NULL;
        if (!m || !WANT(pass == 0 ? "workloads" : "fidelity")) continue;
        for (int w = 0; w < 3; w++) {
            s = new_step(steps, &n, wl[w], bench_reuse);
            add(s, "reuse"); add(s, "-m"); add(s, m); add(s, "--workload"); add(s, wl[w]);
            add(s, "--queries"); add(s, pass == 0 || queries_s ? queries : (quick ? "3" : "8"));
            if (docs_s && w < 2) { add(s, "--docs"); add(s, docs_s); }   /* doc QA and chat retrieve passages */
            add(s, "-t"); add(s, pass == 0 ? threads : "1");
            add(s, "--modes"); add(s, "none,prefix,full,blend");
            add(s, "--gen"); add(s, pass == 0 ? "4" : "16");
            if (data) { add(s, "--data"); add(s, data); }
            char stem[64];
            snprintf(stem, sizeof stem, "%s-%s", pass == 0 ? "reuse" : "fidelity", wl[w]);
            step_reports(s, "--json", out, stem);
        }
    }
    if (WANT("sweep")) {
        s = new_step(steps, &n, "sweep", bench_sweep);
        add(s, "sweep"); add(s, "-m"); add(s, model); add(s, "-t"); add(s, threads);
        add(s, "--lengths"); add(s, quick ? "128,256" : "1024,2048,3072");
        if (quick) { add(s, "--ratios"); add(s, "0,50,100"); }
        step_reports(s, "--json", out, "sweep");
    }
    if (WANT("ablation")) {
        s = new_step(steps, &n, "ablation", bench_ablation);
        add(s, "ablation"); add(s, "-m"); add(s, model); add(s, "-t"); add(s, threads);
        if (quick) { add(s, "--queries"); add(s, "6"); add(s, "--docs"); add(s, "6"); add(s, "--doc-len"); add(s, "48"); }
        else {   /* RESULTS' configuration: a corpus three times the RAM pool, a store of realistic size */
            add(s, "--docs"); add(s, "24"); add(s, "--doc-len"); add(s, "256"); add(s, "--per-query"); add(s, "4");
            add(s, "--tail"); add(s, "32"); add(s, "--queries"); add(s, "24"); add(s, "--gap"); add(s, "200");
            add(s, "--filler"); add(s, "100000");
        }
        step_reports(s, "--json", out, "ablation");
    }
    if (WANT("agents")) {
        s = new_step(steps, &n, "agents", bench_agents);
        add(s, "agents"); add(s, "-m"); add(s, agents_model);
        add(s, "--agents"); add(s, quick ? "2" : "2,3,4");
        add(s, "--stall"); add(s, quick ? "0,0.1:1" : "0,0.1:1,1:10");
        add(s, "--clock"); add(s, "cpu"); add(s, "--threads"); add(s, "1");
        if (quick) { add(s, "--turns"); add(s, "2"); add(s, "--gen"); add(s, "16,16,16"); add(s, "--prompt"); add(s, "64,64,64"); }
        else { add(s, "--gen"); add(s, "32,48,32"); add(s, "--prompt"); add(s, "192,128,160"); add(s, "--result"); add(s, "32"); }
        char dbuf[1100];
        if (drafter) { add(s, "--drafter"); add(s, drafter); }
        else if (q8_sibling(agents_model, dbuf + 6, sizeof dbuf - 6)) {
            memcpy(dbuf, "model:", 6);
            add(s, "--drafter"); add(s, dbuf);
        }
        if (data) { add(s, "--data"); add(s, data); }
        add_out(s, "--svg", out, "agents.svg");
        step_reports(s, "--json-out", out, "agents");
    }
    char why[1400];
    if (peer && !join && WANT("peer") && !peer_ready(peer_dir, why, sizeof why)) {
        fprintf(stderr, "reprise bench all: skipping the llama.cpp peer step: %s\n", why);
    } else if (peer && !join && WANT("peer")) {
        char script[1100];
        snprintf(script, sizeof script, "%s/prompt_cache.mjs", peer_dir);
        for (int w = 0; w < 3; w++) {
            char f[64];
            /* the timed prompts of the workloads step: same model, queries and data */
            static const char *t_exp[3] = {"peer: docqa prompts", "peer: chat prompts", "peer: skills prompts"};
            static const char *t_run[3] = {"peer: llama.cpp on docqa", "peer: llama.cpp on chat", "peer: llama.cpp on skills"};
            s = new_step(steps, &n, t_exp[w], bench_reuse);
            add(s, "reuse"); add(s, "-m"); add(s, model); add(s, "--workload"); add(s, wl[w]);
            add(s, "--queries"); add(s, queries);
            if (data) { add(s, "--data"); add(s, data); }
            snprintf(f, sizeof f, "prompts-%s.json", wl[w]);
            add_out(s, "--export-prompts", out, f);
            s = new_step(steps, &n, t_run[w], run_child);
            add(s, "node"); add(s, script); add(s, "-m"); add(s, model);
            add_out(s, "--prompts", out, f);
            add(s, "-t"); add(s, threads); add(s, "--mode"); add(s, "both"); add(s, "--only-previous");
            snprintf(f, sizeof f, "peer-%s.json", wl[w]);
            add_out(s, "--json", out, f);
        }
    }
#undef WANT
    int failed = 0;
    for (int i = 0; i < n && join; i++) {   /* keep the steps whose reports exist */
        struct stat sb;
        if (stat(steps[i].html, &sb) != 0) steps[i].html[0] = 0;
    }
    for (int i = 0; i < n && !join; i++) {
        s = &steps[i];
        fprintf(stderr, "\n[%d/%d] bench", i + 1, n);
        for (int k = 0; k < s->argc; k++) fprintf(stderr, " %s", s->argv[k]);
        fprintf(stderr, "\n");
        fflush(stdout);
        double t0 = cli_now();
        s->rc = s->fn(s->argc, s->argv);
        s->secs = cli_now() - t0;
        fflush(stdout);
        if (s->rc != 0) {
            failed++;
            fprintf(stderr, "[%d/%d] %s failed (exit %d); going on\n", i + 1, n, s->title, s->rc);
        }
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/report.html", out);
    FILE *f = rp_html_open(path, "Reprise: the papers' experiments (those a CPU build runs)");
    if (!f) {
        fprintf(stderr, "reprise bench all: cannot write '%s'\n", path);
        failed++;
    } else {
        char note[2048];
        if (join) snprintf(note, sizeof note, "joined from the reports in %s (each names its model, command settings and threads)", out);
        else snprintf(note, sizeof note, "speed model %s; fidelity model %s; %s threads%s", model, fid ? fid : "(none)", threads,
                      quick ? "; --quick (shrunk workloads: a pipeline check, not a measurement)" : "");
        rp_html_p(f, note);
        rp_html_p(f, "Not in this report: the EdgeAgent paper's section 4.3 (tensor-parallel CPU+GPU prefill, the "
                     "zero-copy latency breakdown, kernel efficiency against a vendor GEMM) and the GPU / tensor-parallel "
                     "steps of its component ablation, because Reprise has no GPU backend yet; its workload-mix sweep "
                     "and [1, 100] s stalls; the KV paper's energy figures, graph-size latency curve (reprise plan "
                     "--calibrate), five-way latency breakdown and task accuracy (bench reuse --answer with an instruct "
                     "model).");
        const char *head[3] = {"step", "exit", "seconds"};
        static char cells[24][3][64];
        const char *cp[24 * 3];
        for (int i = 0; i < n; i++) {
            snprintf(cells[i][0], 64, "%s", steps[i].title);
            snprintf(cells[i][1], 64, "%d", steps[i].rc);
            snprintf(cells[i][2], 64, "%.1f", steps[i].secs);
            for (int c = 0; c < 3; c++) cp[i * 3 + c] = cells[i][c];
        }
        if (!join) rp_html_table(f, head, 3, cp, n);
        for (int i = 0; i < n; i++) {
            if (steps[i].html[0]) rp_html_embed_body(f, steps[i].html);
        }
        peer_section(f, out, wl, 3);
        rp_html_close(f);
        fprintf(stderr, "\nreport: %s\n", path);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < steps[i].argc; k++) free(steps[i].argv[k]);
    return failed ? 1 : 0;
}
