/* bench_all.c — `reprise bench all`: every paper experiment in one run, joined into one HTML report. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int bench_all(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "bench all"};
    const char *model = NULL, *fid = NULL, *out = "bench-report", *threads = "2", *data = NULL, *steps_s = NULL;
    bool quick = false, join = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise bench all -m MODEL.gguf [--fidelity-model SMALL.gguf] [--out DIR] [-t 2] [--data DIR]\n"
                   "                         [--quick] [--steps reuse,workloads,fidelity,sweep,ablation,agents]\n"
                   "Runs the papers' experiments one after another and joins their reports into DIR/report.html\n"
                   "(each bench also leaves its own JSON / HTML in DIR):\n"
                   "  reuse      TTFT of none / prefix / full / blend / static / static-naive, synthetic documents (-m)\n"
                   "  workloads  doc QA (HotpotQA), long chat (LoCoMo), agent skills (SkillsBench) TTFT on -m\n"
                   "  fidelity   the same three workloads on --fidelity-model (a real trained model, e.g.\n"
                   "             stories260K): KL and greedy agreement against exact prefill\n"
                   "  sweep      prefix / non-prefix reuse ratio 0..100%% at 1k / 2k / 3k tokens (-m)\n"
                   "  ablation   the full system against each component switched off (-m)\n"
                   "  agents     multi-agent makespan: Batch-AR, Seq-SD, Batch-SD, HAL, HAL+yield at 2 / 3 / 4 agents\n"
                   "             and stalls 0, [0.1, 1] s, [1, 10] s (on --fidelity-model if given, else -m)\n"
                   "--quick shrinks every step (few queries, short prompts) to check the pipeline in minutes.\n"
                   "--join runs nothing: it joins the reports already in DIR (reuse-synthetic.html, reuse-<w>.html,\n"
                   "fidelity-<w>.html, sweep.html, ablation.html, agents.html) into DIR/report.html.\n"
                   "The full run on a 1B-shape model takes 30-40 minutes on 2 cores.\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &model)) return 2; }
        else if (cli_is(&a, "--fidelity-model", NULL)) { if (!cli_str(&a, &fid)) return 2; }
        else if (cli_is(&a, "--out", NULL)) { if (!cli_str(&a, &out)) return 2; }
        else if (cli_is(&a, "-t", "--threads")) { if (!cli_str(&a, &threads)) return 2; }
        else if (cli_is(&a, "--data", NULL)) { if (!cli_str(&a, &data)) return 2; }
        else if (cli_is(&a, "--steps", NULL)) { if (!cli_str(&a, &steps_s)) return 2; }
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
    const char *queries = quick ? "2" : "3";
    static step steps[16];
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
        const char *m = pass == 0 ? model : fid;
        if (!m || !WANT(pass == 0 ? "workloads" : "fidelity")) continue;
        for (int w = 0; w < 3; w++) {
            s = new_step(steps, &n, wl[w], bench_reuse);
            add(s, "reuse"); add(s, "-m"); add(s, m); add(s, "--workload"); add(s, wl[w]);
            add(s, "--queries"); add(s, pass == 0 ? queries : (quick ? "3" : "8"));
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
        step_reports(s, "--json", out, "ablation");
    }
    if (WANT("agents")) {
        s = new_step(steps, &n, "agents", bench_agents);
        add(s, "agents"); add(s, "-m"); add(s, agents_model);
        add(s, "--agents"); add(s, quick ? "2" : "2,3,4");
        add(s, "--stall"); add(s, quick ? "0,0.1:1" : "0,0.1:1,1:10");
        add(s, "--clock"); add(s, "cpu"); add(s, "--threads"); add(s, "1");
        if (quick) { add(s, "--turns"); add(s, "2"); add(s, "--gen"); add(s, "16,16,16"); add(s, "--prompt"); add(s, "64,64,64"); }
        if (data) { add(s, "--data"); add(s, data); }
        add_out(s, "--svg", out, "agents.svg");
        step_reports(s, "--json-out", out, "agents");
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
    FILE *f = rp_html_open(path, "Reprise: the papers' experiments");
    if (!f) {
        fprintf(stderr, "reprise bench all: cannot write '%s'\n", path);
        failed++;
    } else {
        char note[2048];
        if (join) snprintf(note, sizeof note, "joined from the reports in %s (each names its model, command settings and threads)", out);
        else snprintf(note, sizeof note, "speed model %s; fidelity model %s; %s threads%s", model, fid ? fid : "(none)", threads,
                      quick ? "; --quick (shrunk workloads: a pipeline check, not a measurement)" : "");
        rp_html_p(f, note);
        const char *head[3] = {"step", "exit", "seconds"};
        char cells[16][3][64];
        const char *cp[16 * 3];
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
        rp_html_close(f);
        fprintf(stderr, "\nreport: %s\n", path);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < steps[i].argc; k++) free(steps[i].argv[k]);
    return failed ? 1 : 0;
}
