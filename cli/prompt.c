/* prompt.c — prompt assembly for the CLI: segments file, plain text, separators -> tokens + boundaries. */
#include "prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reuse/chunk.h"

static bool append_text(const char *cmd, const rp_tokenizer *tok, const char *text, size_t len, bool bos,
                        cli_prompt *p, int32_t *cap) {
    size_t need = len + 8;
    if ((size_t)p->n + need > (size_t)*cap) {
        int64_t nc = (int64_t)*cap * 2 + (int64_t)need;
        if (nc > (1 << 26)) { fprintf(stderr, "reprise %s: prompt too long\n", cmd); return false; }
        rp_token *nt = realloc(p->toks, sizeof *nt * (size_t)nc);
        int32_t *nb = realloc(p->bounds, sizeof *nb * (size_t)nc);
        if (!nt || !nb) {
            if (nt) p->toks = nt;
            if (nb) p->bounds = nb;
            fprintf(stderr, "reprise %s: out of memory\n", cmd);
            return false;
        }
        p->toks = nt;
        p->bounds = nb;
        *cap = (int32_t)nc;
    }
    size_t got = 0;
    rp_tokenize_opts o = {.add_bos = bos && rp_tokenizer_add_bos(tok), .parse_special = true};
    rp_status st = rp_tokenizer_encode(tok, text, len, o, p->toks + p->n, (size_t)(*cap - p->n), &got);
    if (st != RP_OK) { cli_fail(cmd, "tokenize", st); return false; }
    if (got == 0) return true;
    if (p->n > 0) p->bounds[p->n_bounds++] = p->n;
    p->n += (int32_t)got;
    p->n_segments++;
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

bool cli_prompt_build(const char *cmd, const rp_tokenizer *tok, const char *text, const char *segments_path,
                      const char *separator, cli_prompt *p) {
    memset(p, 0, sizeof *p);
    int32_t cap = 0;
    bool first = true;
    if (segments_path) {
        json_error_t err;
        json_t *root = json_load_file(segments_path, 0, &err);
        if (!root) {
            fprintf(stderr, "reprise %s: --segments '%s': %s (line %d, column %d)\n", cmd, segments_path, err.text,
                    err.line, err.column);
            return false;
        }
        if (!json_is_array(root)) {
            fprintf(stderr, "reprise %s: --segments '%s' must be a JSON array of strings\n", cmd, segments_path);
            json_decref(root);
            return false;
        }
        for (size_t i = 0; i < json_array_size(root); i++) {
            json_t *s = json_array_get(root, i);
            if (!json_is_string(s)) {
                fprintf(stderr, "reprise %s: --segments '%s': element %zu is not a string\n", cmd, segments_path, i);
                json_decref(root);
                cli_prompt_free(p);
                return false;
            }
            if (!append_text(cmd, tok, json_string_value(s), json_string_length(s), first, p, &cap)) {
                json_decref(root);
                cli_prompt_free(p);
                return false;
            }
            first = first && p->n == 0;
        }
        json_decref(root);
    }
    if (text && !append_text(cmd, tok, text, strlen(text), first, p, &cap)) {
        cli_prompt_free(p);
        return false;
    }
    if (p->n == 0) {
        fprintf(stderr, "reprise %s: the prompt is empty\n", cmd);
        cli_prompt_free(p);
        return false;
    }
    if (separator && separator[0]) {
        rp_token sep[256];
        size_t ns = 0;
        rp_tokenize_opts o = {.add_bos = false, .parse_special = true};
        if (rp_tokenizer_encode(tok, separator, strlen(separator), o, sep, 256, &ns) != RP_OK || ns == 0) {
            fprintf(stderr, "reprise %s: --separator must tokenize to 1..256 tokens\n", cmd);
            cli_prompt_free(p);
            return false;
        }
        int32_t room = cap - p->n_bounds;
        int32_t k = rp_chunk_find_separators(p->toks, p->n, sep, (int32_t)ns, p->bounds + p->n_bounds, room);
        p->n_bounds += k;
        qsort(p->bounds, (size_t)p->n_bounds, sizeof *p->bounds, cmp_i32);
        int32_t w = 0;
        for (int32_t i = 0; i < p->n_bounds; i++)
            if (p->bounds[i] > 0 && p->bounds[i] < p->n && (w == 0 || p->bounds[i] != p->bounds[w - 1]))
                p->bounds[w++] = p->bounds[i];
        p->n_bounds = w;
    }
    return true;
}

void cli_prompt_free(cli_prompt *p) {
    free(p->toks);
    free(p->bounds);
    memset(p, 0, sizeof *p);
}
