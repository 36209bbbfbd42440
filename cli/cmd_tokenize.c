/* cmd_tokenize.c — `reprise tokenize`: token ids of a text, as a table or one JSON array. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

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
    rp_tokenize_opts o = {.add_bos = !no_bos && rp_tokenizer_add_bos(m->tok), .parse_special = !no_special};
    size_t cap = len + 8, n = 0;
    rp_token *ids = malloc(sizeof *ids * cap);
    int rc = 0;
    if (!ids) { fprintf(stderr, "reprise tokenize: out of memory\n"); rc = 1; goto done; }
    st = rp_tokenizer_encode(m->tok, text, len, o, ids, cap, &n);
    if (st != RP_OK) { rc = cli_fail("tokenize", "encode", st); goto done; }
    if (json) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else {
        char piece[256];
        for (size_t i = 0; i < n; i++) {
            int w = rp_tokenizer_token_to_piece(m->tok, ids[i], true, piece, sizeof piece - 1);
            if (w < 0) w = 0;
            piece[w] = 0;
            printf("%8d -> '%s'\n", ids[i], piece);
        }
        fprintf(stderr, "%zu tokens\n", n);
    }
done:
    free(ids);
    free(buf);
    rp_model_free(m);
    return rc;
}
