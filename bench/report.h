/* report.h — self-contained HTML reports with inline SVG charts (bars, lines, scatter) for the benchmarks. */
#ifndef RP_CLI_REPORT_H
#define RP_CLI_REPORT_H

#include <stdio.h>

/* Opens `path` and writes the page head (inline CSS, no external resources). */
FILE *rp_html_open(const char *path, const char *title);
void rp_html_close(FILE *f);
void rp_html_h2(FILE *f, const char *text);
void rp_html_p(FILE *f, const char *text);   /* text is escaped */
/* A table: n_cols headers, then n_rows * n_cols cell strings (escaped). */
void rp_html_table(FILE *f, const char *const *head, int n_cols, const char *const *cells, int n_rows);

/* Grouped bars: values[g * n_series + s] for group g and series s. */
void rp_svg_bars(FILE *f, const char *title, const char *ylabel, const char *const *groups, int n_groups,
                 const char *const *series, int n_series, const double *values);

/* Line chart: series s has n points x[s*n + i], y[s*n + i]. */
void rp_svg_lines(FILE *f, const char *title, const char *xlabel, const char *ylabel, const char *const *series,
                  int n_series, const double *x, const double *y, int n);

/* Scatter with a label per point. */
void rp_svg_scatter(FILE *f, const char *title, const char *xlabel, const char *ylabel, const char *const *labels,
                    const double *x, const double *y, int n);

/* Embeds the body of a report written by rp_html_open/close (its <h1> becomes
 * an <h2>), so `bench all` can join the benches' reports into one page. */
void rp_html_embed_body(FILE *f, const char *path);

/* Embeds an SVG file written by another bench (agent timelines). */
void rp_html_embed_file(FILE *f, const char *path);

#endif /* RP_CLI_REPORT_H */
