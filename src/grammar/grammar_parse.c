/* grammar_parse.c — a GBNF parser (llama.cpp's grammar format): `name ::= alternatives` rules, sequences,
 * "literals" with escapes, [char classes] with ranges and ^negation, `.`, (groups), name references, and the
 * repetitions * + ? {m} {m,} {m,n}, rewritten into helper rules as llama.cpp does. Errors name line:column. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define RP_GRAMMAR_MAX_REPEAT 10000

typedef struct gvec {
    rp_gelem *v;
    int32_t n, cap;
} gvec;

typedef struct gparser {
    const char *src, *p;
    char **names;      /* symbol names, [n_sym]; synthetic rules get generated names */
    gvec *rules;       /* [n_sym]; cap_sym */
    uint8_t *defined;  /* [n_sym] */
    int32_t *ref_at;   /* [n_sym]: offset of the first reference, for "undefined rule" errors */
    int32_t n_sym, cap_sym;
    rp_status st;
} gparser;

static rp_status gp_fail(gparser *g, const char *at, const char *fmt, const char *arg) {
    if (g->st != RP_OK) return g->st;
    int line = 1, col = 1;
    for (const char *q = g->src; q < at && *q; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    g->st = rp_errorf(RP_ERR_FORMAT, "grammar: %d:%d: %s", line, col, msg);
    return g->st;
}

static int gv_push(gvec *v, uint32_t type, uint32_t value) {
    if (v->n == v->cap) {
        int32_t nc = v->cap ? v->cap * 2 : 16;
        rp_gelem *nv = realloc(v->v, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n].type = type;
    v->v[v->n].value = value;
    v->n++;
    return 0;
}

static int32_t gp_symbol(gparser *g, const char *name, size_t len, const char *at) {
    for (int32_t i = 0; i < g->n_sym; i++)
        if (strlen(g->names[i]) == len && memcmp(g->names[i], name, len) == 0) return i;
    if (g->n_sym == g->cap_sym) {
        int32_t nc = g->cap_sym ? g->cap_sym * 2 : 32;
        char **nn = realloc(g->names, (size_t)nc * sizeof *nn);
        if (nn) g->names = nn;
        gvec *nr = realloc(g->rules, (size_t)nc * sizeof *nr);
        if (nr) g->rules = nr;
        uint8_t *nd = realloc(g->defined, (size_t)nc);
        if (nd) g->defined = nd;
        int32_t *na = realloc(g->ref_at, (size_t)nc * sizeof *na);
        if (na) g->ref_at = na;
        if (!nn || !nr || !nd || !na) { g->st = rp_errorf(RP_ERR_NOMEM, "grammar: out of memory"); return -1; }
        g->cap_sym = nc;
    }
    char *s = malloc(len + 1);
    if (!s) { g->st = rp_errorf(RP_ERR_NOMEM, "grammar: out of memory"); return -1; }
    memcpy(s, name, len);
    s[len] = 0;
    int32_t id = g->n_sym++;
    g->names[id] = s;
    memset(&g->rules[id], 0, sizeof g->rules[id]);
    g->defined[id] = 0;
    g->ref_at[id] = (int32_t)(at - g->src);
    return id;
}

static int32_t gp_synthetic(gparser *g, const char *base) {
    char name[160];
    snprintf(name, sizeof name, "%.120s-%d", base, g->n_sym);
    int32_t id = gp_symbol(g, name, strlen(name), g->p);
    if (id >= 0) g->defined[id] = 1;
    return id;
}

static int is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static const char *skip_space(const char *p, int newline_ok) {
    for (;;) {
        if (*p == ' ' || *p == '\t') p++;
        else if (*p == '#') { while (*p && *p != '\n' && *p != '\r') p++; }
        else if (newline_ok && (*p == '\n' || *p == '\r')) p++;
        else return p;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One (possibly escaped) character of a literal or class; advances g->p. */
static int gp_char(gparser *g, uint32_t *cp) {
    const char *p = g->p;
    if (*p == '\\') {
        p++;
        int nhex = 0;
        switch (*p) {
        case 'n': *cp = '\n'; g->p = p + 1; return 0;
        case 't': *cp = '\t'; g->p = p + 1; return 0;
        case 'r': *cp = '\r'; g->p = p + 1; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': case '.':
            *cp = (unsigned char)*p; g->p = p + 1; return 0;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: gp_fail(g, p, "unknown escape '\\%s'", (char[]){*p ? *p : '0', 0}); return -1;
        }
        uint32_t v = 0;
        p++;
        for (int i = 0; i < nhex; i++, p++) {
            int h = hexval(*p);
            if (h < 0) { gp_fail(g, p, "expected %s hex digits in escape", nhex == 2 ? "2" : nhex == 4 ? "4" : "8"); return -1; }
            v = v * 16 + (uint32_t)h;
        }
        if (v > 0x10FFFF) { gp_fail(g, p, "code point out of range%s", NULL); return -1; }
        *cp = v;
        g->p = p;
        return 0;
    }
    if (!*p) { gp_fail(g, p, "unexpected end of input%s", NULL); return -1; }
    int n = rp_grammar_utf8_decode((const unsigned char *)p, strlen(p), cp);
    if (n == 0) { gp_fail(g, p, "invalid UTF-8%s", NULL); return -1; }
    g->p = p + n;
    return 0;
}

static int gp_alternates(gparser *g, int32_t rule, const char *rule_name, int nested);

/* Rewrites out[start..] (one symbol) as its repetition {min,max} (max < 0: unbounded). */
static int gp_repeat(gparser *g, gvec *out, int32_t start, int min, int max, const char *rule_name) {
    int32_t len = out->n - start;
    rp_gelem *sym = malloc((size_t)len * sizeof *sym);
    if (!sym) { g->st = rp_errorf(RP_ERR_NOMEM, "grammar: out of memory"); return -1; }
    memcpy(sym, out->v + start, (size_t)len * sizeof *sym);
    out->n = start;
    int rc = 0;
    for (int i = 0; i < min && rc == 0; i++)
        for (int32_t j = 0; j < len && rc == 0; j++) rc = gv_push(out, sym[j].type, sym[j].value);
    if (rc == 0 && max < 0) {
        /* R ::= sym R | ε */
        int32_t r = gp_synthetic(g, rule_name);
        if (r < 0) rc = -1;
        for (int32_t j = 0; j < len && rc == 0; j++) rc = gv_push(&g->rules[r], sym[j].type, sym[j].value);
        if (rc == 0) rc = gv_push(&g->rules[r], RP_GE_RULE_REF, (uint32_t)r);
        if (rc == 0) rc = gv_push(&g->rules[r], RP_GE_ALT, 0);
        if (rc == 0) rc = gv_push(&g->rules[r], RP_GE_END, 0);
        if (rc == 0) rc = gv_push(out, RP_GE_RULE_REF, (uint32_t)r);
    } else if (rc == 0 && max > min) {
        /* R1 ::= sym | ε ; Rk ::= sym R(k-1) | ε ; out += R(max-min) */
        int32_t prev = -1;
        for (int k = 0; k < max - min && rc == 0; k++) {
            int32_t r = gp_synthetic(g, rule_name);
            if (r < 0) { rc = -1; break; }
            for (int32_t j = 0; j < len && rc == 0; j++) rc = gv_push(&g->rules[r], sym[j].type, sym[j].value);
            if (rc == 0 && prev >= 0) rc = gv_push(&g->rules[r], RP_GE_RULE_REF, (uint32_t)prev);
            if (rc == 0) rc = gv_push(&g->rules[r], RP_GE_ALT, 0);
            if (rc == 0) rc = gv_push(&g->rules[r], RP_GE_END, 0);
            prev = r;
        }
        if (rc == 0) rc = gv_push(out, RP_GE_RULE_REF, (uint32_t)prev);
    }
    free(sym);
    if (rc != 0 && g->st == RP_OK) g->st = rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    return rc;
}

static int gp_int(gparser *g, int *v) {
    const char *p = g->p;
    if (*p < '0' || *p > '9') { gp_fail(g, p, "expected a number%s", NULL); return -1; }
    long x = 0;
    while (*p >= '0' && *p <= '9') {
        x = x * 10 + (*p - '0');
        if (x > RP_GRAMMAR_MAX_REPEAT) { gp_fail(g, g->p, "repetition count over 10000%s", NULL); return -1; }
        p++;
    }
    *v = (int)x;
    g->p = p;
    return 0;
}

static int gp_sequence(gparser *g, gvec *out, const char *rule_name, int nested) {
    int32_t last_start = -1;
    for (;;) {
        const char *p = g->p;
        if (*p == '"') {
            g->p = p + 1;
            last_start = out->n;
            while (*g->p != '"') {
                if (!*g->p) return gp_fail(g, p, "unterminated literal%s", NULL), -1;
                uint32_t cp;
                if (gp_char(g, &cp) != 0) return -1;
                if (gv_push(out, RP_GE_CHAR, cp) != 0) return -1;
            }
            g->p = skip_space(g->p + 1, nested);
        } else if (*p == '[') {
            g->p = p + 1;
            last_start = out->n;
            uint32_t first = RP_GE_CHAR;
            if (*g->p == '^') { first = RP_GE_CHAR_NOT; g->p++; }
            int count = 0;
            while (*g->p != ']') {
                if (!*g->p) return gp_fail(g, p, "unterminated character class%s", NULL), -1;
                uint32_t cp;
                if (gp_char(g, &cp) != 0) return -1;
                if (gv_push(out, count ? RP_GE_CHAR_ALT : first, cp) != 0) return -1;
                count++;
                if (g->p[0] == '-' && g->p[1] && g->p[1] != ']') {
                    g->p++;
                    uint32_t hi;
                    if (gp_char(g, &hi) != 0) return -1;
                    if (hi < cp) return gp_fail(g, g->p, "range end below its start%s", NULL), -1;
                    if (gv_push(out, RP_GE_CHAR_RNG_UPPER, hi) != 0) return -1;
                }
            }
            if (count == 0 && first == RP_GE_CHAR) return gp_fail(g, p, "empty character class%s", NULL), -1;
            if (count == 0) { /* [^] : any */
                if (gv_push(out, RP_GE_CHAR_ANY, 0) != 0) return -1;
            }
            g->p = skip_space(g->p + 1, nested);
        } else if (is_word(*p)) {
            const char *e = p;
            while (is_word(*e)) e++;
            int32_t id = gp_symbol(g, p, (size_t)(e - p), p);
            if (id < 0) return -1;
            last_start = out->n;
            if (gv_push(out, RP_GE_RULE_REF, (uint32_t)id) != 0) return -1;
            g->p = skip_space(e, nested);
        } else if (*p == '(') {
            g->p = skip_space(p + 1, 1);
            int32_t id = gp_synthetic(g, rule_name);
            if (id < 0) return -1;
            if (gp_alternates(g, id, rule_name, 1) != 0) return -1;
            last_start = out->n;
            if (gv_push(out, RP_GE_RULE_REF, (uint32_t)id) != 0) return -1;
            if (*g->p != ')') return gp_fail(g, g->p, "expected ')'%s", NULL), -1;
            g->p = skip_space(g->p + 1, nested);
        } else if (*p == '.') {
            last_start = out->n;
            if (gv_push(out, RP_GE_CHAR_ANY, 0) != 0) return -1;
            g->p = skip_space(p + 1, nested);
        } else if (*p == '*' || *p == '+' || *p == '?' || *p == '{') {
            if (last_start < 0) return gp_fail(g, p, "'%s' without a preceding item", (char[]){*p, 0}), -1;
            int min = 0, max = -1;
            if (*p == '+') min = 1;
            else if (*p == '?') max = 1;
            else if (*p == '{') {
                g->p = skip_space(p + 1, nested);
                if (gp_int(g, &min) != 0) return -1;
                g->p = skip_space(g->p, nested);
                if (*g->p == ',') {
                    g->p = skip_space(g->p + 1, nested);
                    if (*g->p != '}') {
                        if (gp_int(g, &max) != 0) return -1;
                        g->p = skip_space(g->p, nested);
                    }
                } else max = min;
                if (*g->p != '}') return gp_fail(g, g->p, "expected '}'%s", NULL), -1;
                if (max >= 0 && max < min) return gp_fail(g, g->p, "repetition {m,n} with n < m%s", NULL), -1;
                p = g->p;
            }
            if (gp_repeat(g, out, last_start, min, max, rule_name) != 0) return -1;
            g->p = skip_space(p + 1, nested);
            last_start = -1;
        } else {
            return 0;
        }
    }
}

static int gp_alternates(gparser *g, int32_t rule, const char *rule_name, int nested) {
    gvec v = {0};
    for (;;) {
        if (gp_sequence(g, &v, rule_name, nested) != 0) { free(v.v); return -1; }
        if (*g->p != '|') break;
        if (gv_push(&v, RP_GE_ALT, 0) != 0) { free(v.v); return -1; }
        g->p = skip_space(g->p + 1, 1);
    }
    if (gv_push(&v, RP_GE_END, 0) != 0) { free(v.v); g->st = rp_errorf(RP_ERR_NOMEM, "grammar: out of memory"); return -1; }
    free(g->rules[rule].v);
    g->rules[rule] = v;
    return 0;
}

static void gp_free(gparser *g) {
    for (int32_t i = 0; i < g->n_sym; i++) { free(g->names[i]); free(g->rules[i].v); }
    free(g->names);
    free(g->rules);
    free(g->defined);
    free(g->ref_at);
}

RP_API rp_status rp_grammar_parse(const char *text, const char *root, rp_grammar **out) {
    if (!text || !out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_parse: NULL argument");
    *out = NULL;
    if (!root) root = "root";
    gparser g = {.src = text, .p = text, .st = RP_OK};
    g.p = skip_space(g.p, 1);
    while (*g.p && g.st == RP_OK) {
        const char *name = g.p;
        if (!is_word(*name)) { gp_fail(&g, name, "expected a rule name%s", NULL); break; }
        const char *e = name;
        while (is_word(*e)) e++;
        int32_t id = gp_symbol(&g, name, (size_t)(e - name), name);
        if (id < 0) break;
        if (g.defined[id]) { gp_fail(&g, name, "rule '%s' defined twice", g.names[id]); break; }
        g.defined[id] = 1;
        g.p = skip_space(e, 0);
        if (strncmp(g.p, "::=", 3) != 0) { gp_fail(&g, g.p, "expected '::=' after rule '%s'", g.names[id]); break; }
        g.p = skip_space(g.p + 3, 1);
        char rn[128];
        snprintf(rn, sizeof rn, "%s", g.names[id]);
        if (gp_alternates(&g, id, rn, 0) != 0) break;
        if (*g.p == '\r') g.p++;
        if (*g.p == '\n') g.p++;
        else if (*g.p) { gp_fail(&g, g.p, "unexpected character '%s'", (char[]){*g.p, 0}); break; }
        g.p = skip_space(g.p, 1);
    }
    int32_t root_id = -1;
    if (g.st == RP_OK) {
        for (int32_t i = 0; i < g.n_sym; i++)
            if (!g.defined[i]) { gp_fail(&g, g.src + g.ref_at[i], "undefined rule '%s'", g.names[i]); break; }
    }
    if (g.st == RP_OK) {
        for (int32_t i = 0; i < g.n_sym; i++)
            if (strcmp(g.names[i], root) == 0) root_id = i;
        if (root_id < 0) g.st = rp_errorf(RP_ERR_FORMAT, "grammar: no rule named '%s'", root);
    }
    if (g.st != RP_OK) { gp_free(&g); return g.st; }
    rp_grammar *gr = calloc(1, sizeof *gr);
    int32_t total = 0;
    for (int32_t i = 0; i < g.n_sym; i++) total += g.rules[i].n;
    if (gr) {
        gr->elems = malloc((size_t)total * sizeof *gr->elems);
        gr->rule_start = malloc((size_t)g.n_sym * sizeof *gr->rule_start);
    }
    if (!gr || !gr->elems || !gr->rule_start) {
        if (gr) { free(gr->elems); free(gr->rule_start); free(gr); }
        gp_free(&g);
        return rp_errorf(RP_ERR_NOMEM, "grammar: out of memory");
    }
    int32_t off = 0;
    for (int32_t i = 0; i < g.n_sym; i++) {
        gr->rule_start[i] = off;
        memcpy(gr->elems + off, g.rules[i].v, (size_t)g.rules[i].n * sizeof *gr->elems);
        off += g.rules[i].n;
    }
    gr->n_elems = total;
    gr->n_rules = g.n_sym;
    gr->root = root_id;
    /* chained one-shot hashes (no allocation): the elements, then the rule starts seeded by them and the root */
    XXH128_hash_t fh = XXH3_128bits(gr->elems, (size_t)total * sizeof *gr->elems);
    fh = XXH3_128bits_withSeed(gr->rule_start, (size_t)g.n_sym * sizeof *gr->rule_start,
                               fh.low64 ^ (fh.high64 * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uint32_t)root_id);
    gr->fp[0] = (uint32_t)fh.low64;
    gr->fp[1] = (uint32_t)(fh.low64 >> 32);
    gr->fp[2] = (uint32_t)fh.high64;
    gr->fp[3] = (uint32_t)(fh.high64 >> 32);
    gp_free(&g);
    *out = gr;
    return RP_OK;
}

RP_API void rp_grammar_free(rp_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->rule_start);
    free(g);
}

int rp_grammar_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    int len;
    uint32_t v;
    if (c < 0x80) { *cp = c; return 1; }
    if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}
