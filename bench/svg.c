/* TODO(issue 15): moves to the public API with bench_agents (includes internals: rp_errorf). */
/* svg.c — recording agent timelines and rendering them as one self-contained SVG (state lanes + draft-budget charts). */
#include "svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct {
    double t0, t1;
    rp_tl_state st;
} seg;

typedef struct {
    double t;
    int32_t draft, accepted;
    float hal;
} bpt;

typedef struct {
    char label[64];
    seg *segs;
    int32_t n_segs, cap_segs;
    bpt *pts;
    int32_t n_pts, cap_pts;
} lane;

struct rp_timeline {
    char title[256];
    int32_t n_lanes;
    lane *lanes;
};

static const char *k_names[RP_TL_COUNT] = {"none", "prefill", "decode", "verify", "suspended", "waiting", "blocked",
                                           "queued"};
static const char *k_colors[RP_TL_COUNT] = {"#ffffff", "#4c78a8", "#9ecae9", "#54a24b", "#f2cf5b", "#e45756",
                                            "#b279a2", "#d8d8d8"};
static const char *k_lane_colors[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6",
                                      "#9d755d"};

const char *rp_tl_state_name(rp_tl_state s) { return (unsigned)s < RP_TL_COUNT ? k_names[s] : "?"; }

rp_status rp_timeline_create(int32_t n_lanes, const char *title, rp_timeline **out) {
    *out = NULL;
    if (n_lanes < 1 || n_lanes > 1024) return rp_errorf(RP_ERR_INVALID_ARG, "timeline: %d lanes", n_lanes);
    rp_timeline *t = calloc(1, sizeof *t);
    if (!t || !(t->lanes = calloc((size_t)n_lanes, sizeof *t->lanes))) {
        free(t);
        return rp_errorf(RP_ERR_NOMEM, "timeline: out of memory");
    }
    t->n_lanes = n_lanes;
    snprintf(t->title, sizeof t->title, "%s", title ? title : "");
    for (int32_t i = 0; i < n_lanes; i++) snprintf(t->lanes[i].label, sizeof t->lanes[i].label, "agent %d", i);
    *out = t;
    return RP_OK;
}

void rp_timeline_free(rp_timeline *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_lanes; i++) {
        free(t->lanes[i].segs);
        free(t->lanes[i].pts);
    }
    free(t->lanes);
    free(t);
}

rp_status rp_timeline_set_label(rp_timeline *t, int32_t l, const char *label) {
    if (l < 0 || l >= t->n_lanes) return rp_errorf(RP_ERR_RANGE, "timeline: lane %d", l);
    snprintf(t->lanes[l].label, sizeof t->lanes[l].label, "%s", label);
    return RP_OK;
}

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

rp_status rp_timeline_add(rp_timeline *t, int32_t l, double t0, double t1, rp_tl_state st) {
    if (l < 0 || l >= t->n_lanes || (unsigned)st >= RP_TL_COUNT) return rp_errorf(RP_ERR_RANGE, "timeline: lane %d", l);
    if (!(t1 > t0) || st == RP_TL_NONE) return RP_OK;
    lane *ln = &t->lanes[l];
    if (ln->n_segs > 0) {
        seg *last = &ln->segs[ln->n_segs - 1];
        if (last->st == st && fabs(last->t1 - t0) < 1e-9) {
            last->t1 = t1;
            return RP_OK;
        }
    }
    if (!grow((void **)&ln->segs, &ln->cap_segs, ln->n_segs + 1, sizeof *ln->segs))
        return rp_errorf(RP_ERR_NOMEM, "timeline: out of memory");
    ln->segs[ln->n_segs++] = (seg){t0, t1, st};
    return RP_OK;
}

rp_status rp_timeline_budget(rp_timeline *t, int32_t l, double ts, int32_t draft, int32_t accepted, float hal) {
    if (l < 0 || l >= t->n_lanes) return rp_errorf(RP_ERR_RANGE, "timeline: lane %d", l);
    lane *ln = &t->lanes[l];
    if (!grow((void **)&ln->pts, &ln->cap_pts, ln->n_pts + 1, sizeof *ln->pts))
        return rp_errorf(RP_ERR_NOMEM, "timeline: out of memory");
    ln->pts[ln->n_pts++] = (bpt){ts, draft, accepted, hal};
    return RP_OK;
}

double rp_timeline_time_in(const rp_timeline *t, int32_t l, rp_tl_state st) {
    double s = 0;
    if (l < 0 || l >= t->n_lanes) return 0;
    for (int32_t i = 0; i < t->lanes[l].n_segs; i++)
        if (t->lanes[l].segs[i].st == st) s += t->lanes[l].segs[i].t1 - t->lanes[l].segs[i].t0;
    return s;
}

int32_t rp_timeline_n_budget(const rp_timeline *t, int32_t l) {
    return l >= 0 && l < t->n_lanes ? t->lanes[l].n_pts : 0;
}

void rp_timeline_budget_at(const rp_timeline *t, int32_t l, int32_t i, double *ts, int32_t *draft,
                           int32_t *accepted, float *hal) {
    const bpt *p = &t->lanes[l].pts[i];
    *ts = p->t;
    *draft = p->draft;
    *accepted = p->accepted;
    *hal = p->hal;
}

/* ---- rendering ---- */

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A "nice" tick step for a span: 1, 2 or 5 times a power of ten, ~8 ticks. */
static double tick_step(double span) {
    double raw = span / 8, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

enum { W = 1100, LEFT = 150, RIGHT = 20, LANE_H = 18, LANE_GAP = 4, CHART_H = 110 };

static double timeline_end(const rp_timeline *t) {
    double e = 0;
    for (int32_t l = 0; l < t->n_lanes; l++) {
        const lane *ln = &t->lanes[l];
        if (ln->n_segs) e = fmax(e, ln->segs[ln->n_segs - 1].t1);
        if (ln->n_pts) e = fmax(e, ln->pts[ln->n_pts - 1].t);
    }
    return e > 0 ? e : 1;
}

static int block_height(const rp_timeline *t) { return 30 + t->n_lanes * (LANE_H + LANE_GAP) + 30 + CHART_H + 40; }

static void draw_one(const rp_timeline *t, FILE *f, int y0) {
    const double end = timeline_end(t), plot_w = W - LEFT - RIGHT;
#define X(tt) (LEFT + (tt) / end * plot_w)
    fprintf(f, "<text x=\"10\" y=\"%d\" font-weight=\"bold\">", y0 + 16);
    xml_text(f, t->title);
    fprintf(f, "</text>\n");
    int ly = y0 + 28;
    for (int32_t l = 0; l < t->n_lanes; l++) {
        const lane *ln = &t->lanes[l];
        int y = ly + l * (LANE_H + LANE_GAP);
        fprintf(f, "<text x=\"10\" y=\"%d\">", y + 13);
        xml_text(f, ln->label);
        fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%d\" fill=\"#f7f7f7\"/>\n", LEFT, y, plot_w,
                LANE_H);
        for (int32_t i = 0; i < ln->n_segs; i++) {
            const seg *s = &ln->segs[i];
            double x0 = X(s->t0), w = X(s->t1) - x0;
            if (w < 0.3) w = 0.3;
            fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>%s %.3f-%.3fs</title></rect>\n",
                    x0, y, w, LANE_H, k_colors[s->st], k_names[s->st], s->t0, s->t1);
        }
    }
    /* time axis */
    int ay = ly + t->n_lanes * (LANE_H + LANE_GAP) + 4;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, ay, W - RIGHT, ay);
    double step = tick_step(end);
    for (double tt = 0; tt <= end + 1e-9; tt += step)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/><text x=\"%.1f\" y=\"%d\" "
                   "text-anchor=\"middle\" font-size=\"10\">%g s</text>\n",
                X(tt), ay, X(tt), ay + 4, X(tt), ay + 15, tt);
    /* budget chart: L_i as steps (solid), A_i (dashed) */
    int cy = ay + 26;
    int32_t ymax = 16;
    for (int32_t l = 0; l < t->n_lanes; l++)
        for (int32_t i = 0; i < t->lanes[l].n_pts; i++) {
            const bpt *p = &t->lanes[l].pts[i];
            if (p->draft > ymax) ymax = p->draft;
            if (p->hal > ymax) ymax = (int32_t)ceilf(p->hal);
        }
    fprintf(f, "<text x=\"10\" y=\"%d\" font-size=\"11\">draft budget L (solid)</text>\n", cy + 12);
    fprintf(f, "<text x=\"10\" y=\"%d\" font-size=\"11\">HAL A (dashed)</text>\n", cy + 26);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%d\" fill=\"none\" stroke=\"#ccc\"/>\n", LEFT, cy, plot_w,
            CHART_H);
    for (int32_t v = 0; v <= ymax; v += ymax > 16 ? 8 : 4)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%d</text>\n", LEFT - 4,
                cy + CHART_H - (double)v / ymax * CHART_H + 3, v);
#define Y(v) (cy + CHART_H - (double)(v) / ymax * CHART_H)
    for (int32_t l = 0; l < t->n_lanes; l++) {
        const lane *ln = &t->lanes[l];
        if (ln->n_pts == 0) continue;
        const char *col = k_lane_colors[l % (int32_t)(sizeof k_lane_colors / sizeof k_lane_colors[0])];
        /* at most ~2 points per pixel column: long runs are thinned */
        int32_t stride = ln->n_pts / 2000 + 1;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"", col);
        for (int32_t i = 0; i < ln->n_pts; i += stride) {
            const bpt *p = &ln->pts[i];
            double x1 = i + stride < ln->n_pts ? X(ln->pts[i + stride].t) : X(p->t) + 2;
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", X(p->t), Y(p->draft), x1, Y(p->draft));
        }
        fprintf(f, "\"/>\n<polyline fill=\"none\" stroke=\"%s\" stroke-dasharray=\"3,2\" points=\"", col);
        for (int32_t i = 0; i < ln->n_pts; i += stride) fprintf(f, "%.1f,%.1f ", X(ln->pts[i].t), Y(ln->pts[i].hal));
        fprintf(f, "\"/>\n");
    }
#undef X
#undef Y
}

rp_status rp_timeline_write_svg(rp_timeline *const *tls, int32_t n, FILE *f) {
    int h = 40;
    for (int32_t i = 0; i < n; i++) h += block_height(tls[i]);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
            "fill=\"white\"/>\n",
            W, h);
    /* legend */
    int x = 10;
    for (int s = RP_TL_PREFILL; s < RP_TL_COUNT; s++) {
        fprintf(f, "<rect x=\"%d\" y=\"10\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#999\"/><text x=\"%d\" "
                   "y=\"22\">%s</text>\n",
                x, k_colors[s], x + 18, k_names[s]);
        x += 28 + 8 * (int)strlen(k_names[s]);
    }
    int y = 40;
    for (int32_t i = 0; i < n; i++) {
        draw_one(tls[i], f, y);
        y += block_height(tls[i]);
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? rp_errorf(RP_ERR_IO, "timeline: write failed") : RP_OK;
}
