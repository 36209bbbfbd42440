/* prompt.c — prompt assembly for the CLI: segments file, plain text, separators -> an rp_prompt. */
#include "prompt.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static bool add(const char *cmd, rp_prompt *p, const rp_model *m, const char *text, size_t len) {
    rp_status st = rp_prompt_add_text(p, m, text, len);
    if (st != RP_OK) cli_fail(cmd, "tokenize", st);
    return st == RP_OK;
}

/* Each string of the JSON array in `path` as a segment. */
static bool add_segments(const char *cmd, rp_prompt *p, const rp_model *m, const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "reprise %s: --segments '%s': %s (line %d, column %d)\n", cmd, path, err.text, err.line,
                err.column);
        return false;
    }
    bool ok = json_is_array(root);
    if (!ok) fprintf(stderr, "reprise %s: --segments '%s' must be a JSON array of strings\n", cmd, path);
    for (size_t i = 0; ok && i < json_array_size(root); i++) {
        const json_t *s = json_array_get(root, i);
        if (!json_is_string(s)) {
            fprintf(stderr, "reprise %s: --segments '%s': element %zu is not a string\n", cmd, path, i);
            ok = false;
        } else {
            ok = add(cmd, p, m, json_string_value(s), json_string_length(s));
        }
    }
    json_decref(root);
    return ok;
}

bool cli_prompt_build(const char *cmd, const rp_model *m, const char *text, const char *segments_path,
                      const char *separator, rp_prompt **out) {
    *out = NULL;
    rp_prompt *p = NULL;
    rp_status st = rp_prompt_create(&p);
    if (st != RP_OK) {
        cli_fail(cmd, "prompt", st);
        return false;
    }
    bool ok = !segments_path || add_segments(cmd, p, m, segments_path);
    if (ok && text) ok = add(cmd, p, m, text, strlen(text));
    if (ok && rp_prompt_n_tokens(p) == 0) {
        fprintf(stderr, "reprise %s: the prompt is empty\n", cmd);
        ok = false;
    }
    if (ok && separator && separator[0] && rp_prompt_split_at(p, m, separator) != RP_OK) {
        fprintf(stderr, "reprise %s: --separator must tokenize to 1..256 tokens\n", cmd);
        ok = false;
    }
    if (!ok) {
        rp_prompt_free(p);
        return false;
    }
    *out = p;
    return true;
}
