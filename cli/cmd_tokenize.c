/* cmd_tokenize.c — `reprise tokenize`: token ids of a text, as a table or one JSON array (over the public API). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "reprise.h"

int cmd_tokenize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "tokenize"};
    const char *path = NULL, *text = NULL, *file = NULL;
    bool no_bos = false, no_special = false, json = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise tokenize -m MODEL.gguf (--text T | --file F) [--no-bos] [--no-special] [--json]\n"
                   "  --no-bos      do not add BOS even if the vocabulary asks for it\n"
                   "  --no-special  treat special-token texts (<|im_start|>, ...) as plain text\n"
                   "  --json        print one JSON array of token ids\n");
            return 0;
        } else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &path)) return 2; }
        else if (cli_is(&a, "--text", "-p")) { if (!cli_str(&a, &text)) return 2; }
        else if (cli_is(&a, "--file", "-f")) { if (!cli_str(&a, &file)) return 2; }
        else if (cli_is(&a, "--no-bos", NULL)) no_bos = true;
        else if (cli_is(&a, "--no-special", NULL)) no_special = true;
        else if (cli_is(&a, "--json", NULL)) json = true;
        else return cli_unknown(&a);
    }
    if (!path) { fprintf(stderr, "reprise tokenize: -m MODEL.gguf is required\n"); return 2; }
    if (!text == !file) { fprintf(stderr, "reprise tokenize: give exactly one of --text or --file\n"); return 2; }
    size_t len = 0;
    char *buf = NULL;
    if (file) {
        if (!(buf = cli_read_file("tokenize", file, &len))) return 1;
        text = buf;
    } else {
        len = strlen(text);
    }
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_status st = cli_model_load(path, mp, &m);
    if (st != RP_OK) { free(buf); return cli_fail("tokenize", path, st); }
    int32_t cap = len + 8 < INT32_MAX ? (int32_t)(len + 8) : INT32_MAX, n = 0;   /* at most a token a byte, + BOS */
    rp_token *ids = malloc(sizeof *ids * (size_t)cap);
    int rc = 0;
    if (!ids) { fprintf(stderr, "reprise tokenize: out of memory\n"); rc = 1; goto done; }
    st = rp_tokenize(m, text, len, !no_bos, !no_special, ids, cap, &n);
    if (st != RP_OK) { rc = cli_fail("tokenize", "encode", st); goto done; }
    if (json) {
        putchar('[');
        for (int32_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else {
        char piece[256];
        for (int32_t i = 0; i < n; i++) {
            int32_t w = rp_token_to_piece(m, ids[i], true, piece, sizeof piece - 1);
            if (w < 0) w = 0;
            if (w > (int32_t)sizeof piece - 1) w = sizeof piece - 1;
            piece[w] = 0;
            printf("%8d -> '%s'\n", ids[i], piece);
        }
        fprintf(stderr, "%d tokens\n", n);
    }
done:
    free(ids);
    free(buf);
    rp_model_free(m);
    return rc;
}
