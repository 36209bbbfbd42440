/* report.c — HTML + inline SVG chart writer (no scripts, no external assets: one file opens anywhere). */
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                       "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
#define N_COLORS 10

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

FILE *rp_html_open(const char *path, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>");
    esc(f, title);
    fprintf(f, "</title>\n<style>\n"
               "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
               "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}\n"
               "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
               "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\n"
               "svg{margin:8px 0;background:#fff}.note{color:#555;font-size:13px}\n"
               "</style></head><body>\n<h1>");
    esc(f, title);
    fprintf(f, "</h1>\n");
    return f;
}

void rp_html_close(FILE *f) {
    if (!f) return;
    fprintf(f, "</body></html>\n");
    fclose(f);
}

void rp_html_h2(FILE *f, const char *text) {
    fprintf(f, "<h2>");
    esc(f, text);
    fprintf(f, "</h2>\n");
}

void rp_html_p(FILE *f, const char *text) {
    fprintf(f, "<p class=\"note\">");
    esc(f, text);
    fprintf(f, "</p>\n");
}

void rp_html_table(FILE *f, const char *const *head, int n_cols, const char *const *cells, int n_rows) {
    fprintf(f, "<table><tr>");
    for (int c = 0; c < n_cols; c++) {
        fprintf(f, "<th>");
        esc(f, head[c]);
        fprintf(f, "</th>");
    }
    fprintf(f, "</tr>\n");
    for (int r = 0; r < n_rows; r++) {
        fprintf(f, "<tr>");
        for (int c = 0; c < n_cols; c++) {
            fprintf(f, "<td>");
            esc(f, cells[r * n_cols + c]);
            fprintf(f, "</td>");
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
}

/* A "nice" axis maximum: 1, 2, 2.5 or 5 times a power of ten. */
static double nice_max(double v) {
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v))), m = v / p;
    double n = m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10;
    return n * p;
}

enum { W = 760, H = 340, ML = 70, MR = 170, MT = 36, MB = 56 };

static void frame(FILE *f, const char *title, const char *xlabel, const char *ylabel, double ymax) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-size=\"12\">\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", ML);
    esc(f, title);
    fprintf(f, "</text>\n");
    const int pw = W - ML - MR, ph = H - MT - MB;
    for (int i = 0; i <= 5; i++) {
        double v = ymax * i / 5;
        int y = MT + ph - (int)(ph * i / 5);
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e5e5e5\"/>", ML, y, ML + pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4, v);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>", ML, MT + ph, ML + pw, MT + ph);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", ML, MT, ML, MT + ph);
    fprintf(f, "<text transform=\"translate(16,%d) rotate(-90)\" text-anchor=\"middle\">", MT + ph / 2);
    esc(f, ylabel);
    fprintf(f, "</text>\n");
    if (xlabel) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 10);
        esc(f, xlabel);
        fprintf(f, "</text>\n");
    }
}

static void legend(FILE *f, const char *const *names, int n) {
    for (int s = 0; s < n; s++) {
        int y = MT + 6 + s * 18;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", W - MR + 14, y, k_colors[s % N_COLORS]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">", W - MR + 32, y + 10);
        esc(f, names[s]);
        fprintf(f, "</text>\n");
    }
}

void rp_svg_bars(FILE *f, const char *title, const char *ylabel, const char *const *groups, int n_groups,
                 const char *const *series, int n_series, const double *values) {
    double mx = 0;
    for (int i = 0; i < n_groups * n_series; i++)
        if (values[i] > mx) mx = values[i];
    mx = nice_max(mx);
    frame(f, title, NULL, ylabel, mx);
    const int pw = W - ML - MR, ph = H - MT - MB;
    const double gw = (double)pw / (n_groups > 0 ? n_groups : 1), bw = gw * 0.8 / (n_series > 0 ? n_series : 1);
    for (int g = 0; g < n_groups; g++) {
        for (int s = 0; s < n_series; s++) {
            double v = values[g * n_series + s], h = mx > 0 ? ph * v / mx : 0;
            double x = ML + g * gw + gw * 0.1 + s * bw;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s: %.3g</title></rect>\n", x,
                    MT + ph - h, bw * 0.92, h, k_colors[s % N_COLORS], series[s], v);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", ML + g * gw + gw / 2, MT + ph + 16);
        esc(f, groups[g]);
        fprintf(f, "</text>\n");
    }
    legend(f, series, n_series);
    fprintf(f, "</svg>\n");
}

void rp_svg_lines(FILE *f, const char *title, const char *xlabel, const char *ylabel, const char *const *series,
                  int n_series, const double *x, const double *y, int n) {
    double xmx = 0, ymx = 0;
    for (int i = 0; i < n_series * n; i++) {
        if (x[i] > xmx) xmx = x[i];
        if (y[i] > ymx) ymx = y[i];
    }
    ymx = nice_max(ymx);
    xmx = nice_max(xmx);
    frame(f, title, xlabel, ylabel, ymx);
    const int pw = W - ML - MR, ph = H - MT - MB;
    for (int i = 0; i <= 4; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", ML + pw * i / 4.0, MT + ph + 16, xmx * i / 4);
    for (int s = 0; s < n_series; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", k_colors[s % N_COLORS]);
        for (int i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", ML + pw * x[s * n + i] / xmx, MT + ph - ph * y[s * n + i] / ymx);
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s: (%g, %.3g)</title></circle>\n",
                    ML + pw * x[s * n + i] / xmx, MT + ph - ph * y[s * n + i] / ymx, k_colors[s % N_COLORS], series[s],
                    x[s * n + i], y[s * n + i]);
    }
    legend(f, series, n_series);
    fprintf(f, "</svg>\n");
}

void rp_svg_scatter(FILE *f, const char *title, const char *xlabel, const char *ylabel, const char *const *labels,
                    const double *x, const double *y, int n) {
    double xmx = 0, ymx = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] > xmx) xmx = x[i];
        if (y[i] > ymx) ymx = y[i];
    }
    ymx = nice_max(ymx * 1.05);
    xmx = nice_max(xmx * 1.05);
    frame(f, title, xlabel, ylabel, ymx);
    const int pw = W - ML - MR, ph = H - MT - MB;
    for (int i = 0; i <= 4; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", ML + pw * i / 4.0, MT + ph + 16, xmx * i / 4);
    for (int i = 0; i < n; i++) {
        double cx = ML + pw * x[i] / xmx, cy = MT + ph - ph * y[i] / ymx;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">", cx, cy,
                k_colors[i % N_COLORS], cx + 7, cy - 6);
        esc(f, labels[i]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

void rp_html_embed_body(FILE *f, const char *path) {
    FILE *in = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (in && fseek(in, 0, SEEK_END) == 0 && (n = ftell(in)) >= 0 && fseek(in, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, in) == (size_t)n) {
        buf[n] = 0;
    } else {
        free(buf);
        buf = NULL;
    }
    if (in) fclose(in);
    char *b = buf ? strstr(buf, "<body>") : NULL;
    char *e = b ? strstr(b, "</body>") : NULL;
    if (!b || !e) {
        fprintf(f, "<p class=\"note\">(missing or not a report: ");
        esc(f, path);
        fprintf(f, ")</p>\n");
        free(buf);
        return;
    }
    b += strlen("<body>");
    *e = 0;
    char *h = strstr(b, "<h1>"), *he = h ? strstr(h, "</h1>") : NULL;
    if (h && he) {   /* demote the sub-report's title */
        fwrite(b, 1, (size_t)(h - b), f);
        fprintf(f, "<h2>");
        fwrite(h + 4, 1, (size_t)(he - h - 4), f);
        fprintf(f, "</h2>");
        b = he + 5;
    }
    fputs(b, f);
    free(buf);
}

void rp_html_embed_file(FILE *f, const char *path) {
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(f, "<p class=\"note\">(missing: ");
        esc(f, path);
        fprintf(f, ")</p>\n");
        return;
    }
    char buf[8192];
    size_t n;
    /* skip an XML declaration: inline SVG must not carry one */
    if (fgets(buf, sizeof buf, in) && strncmp(buf, "<?xml", 5) != 0) fputs(buf, f);
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, f);
    fclose(in);
}
