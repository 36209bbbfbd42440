/* tlex.c — the template lexer. It follows jinja2's lexer rule by rule (lexer.py, jinja2 3.1) with
 * trim_blocks and lstrip_blocks on, so that whitespace comes out byte-identical. */
#include "template/tlex.h"

#include <stdio.h>
#include <string.h>

typedef struct lx {
    tarena *a;
    const char *s;
    size_t n, pos;
    ttok *t;
    size_t nt, cap;
    bool line_starting;   /* jinja2: the previous match ended with a newline */
} lx;

void tlex_linecol(const char *src, size_t n, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < n; i++) {
        if (src[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)src[i] & 0xc0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

static _Noreturn void lx_fail(lx *x, size_t off, const char *msg) {
    tlex_linecol(x->s, x->n, off, &x->a->line, &x->a->col);
    x->a->construct = NULL;
    ta_fail(x->a, "syntax error: %s", msg);
}

static ttok *lx_push(lx *x, ttype type, size_t off) {
    if (x->nt == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        ttok *nt = ta_alloc(x->a, cap * sizeof *nt);
        if (x->nt) memcpy(nt, x->t, x->nt * sizeof *nt);
        x->t = nt;
        x->cap = cap;
    }
    ttok *t = &x->t[x->nt++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->off = off;
    return t;
}

/* bytes of Python-\s whitespace at i (0 if none) */
static size_t ws_at(const lx *x, size_t i) { return i < x->n ? tu_space_len(x->s + i, x->n - i) : 0; }
static size_t skip_ws(const lx *x, size_t i) {
    size_t k;
    while ((k = ws_at(x, i)) > 0) i += k;
    return i;
}

static bool at(const lx *x, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= x->n && memcmp(x->s + i, lit, k) == 0;
}

/* text.rstrip() (Python whitespace) */
static size_t rstrip_len(const char *p, size_t n) {
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        size_t k = tu_space_len(p + i, n - i);
        if (k) { i += k; continue; }
        i++;
        while (i < n && ((unsigned char)p[i] & 0xc0) == 0x80) i++;
        end = i;
    }
    return end;
}

/* The data before a tag, with jinja2's OptionalLStrip applied for the tag's sign. */
static void emit_text(lx *x, size_t from, size_t to, char sign, bool lstrip_ok) {
    const char *p = x->s + from;
    size_t n = to - from;
    if (sign == '-') {
        n = rstrip_len(p, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = n; i-- > 0;)
            if (p[i] == '\n') { l_pos = i + 1; break; }
        if (l_pos > 0 || x->line_starting) {
            size_t j = l_pos;
            while (j < n) {
                size_t k = tu_space_len(p + j, n - j);
                if (!k) break;
                j += k;
            }
            if (j == n && n > l_pos) n = l_pos;
        }
    }
    if (n == 0) return;
    ttok *t = lx_push(x, TK_TEXT, from);
    t->p = p;
    t->n = n;
    t->v = tv_strn(p, n);
}

/* A tag's end at i: block "+%}" | "-%}\s*" | "%}\n?", variable "-}}\s*" | "}}", comment as block
 * with '#'. Returns the end offset, or 0 when none starts at i. */
static size_t tag_end(const lx *x, size_t i, char c) {
    char close[3] = {c, '}', 0};
    if (c == '%' || c == '#') {
        if (i < x->n && x->s[i] == '+' && at(x, i + 1, close)) return i + 3;
        if (i < x->n && x->s[i] == '-' && at(x, i + 1, close)) return skip_ws(x, i + 3);
        if (at(x, i, close)) return i + 2 + (i + 2 < x->n && x->s[i + 2] == '\n');
        return 0;
    }
    if (i < x->n && x->s[i] == '-' && at(x, i + 1, "}}")) return skip_ws(x, i + 3);
    if (at(x, i, "}}")) return i + 2;
    return 0;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void put_utf8(tsb *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) { u[0] = (char)cp; k = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xc0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3f)); k = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[2] = (char)(0x80 | (cp & 0x3f)); k = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[3] = (char)(0x80 | (cp & 0x3f)); k = 4;
    }
    tsb_putn(b, u, k);
}

/* A string literal's value: Python's "unicode-escape" decoding of the text between the quotes. */
static tval unescape(lx *x, size_t from, size_t to) {
    tsb b;
    tsb_init(&b, x->a, x->a->cap);
    for (size_t i = from; i < to;) {
        char c = x->s[i];
        if (c != '\\' || i + 1 >= to) { tsb_putc(&b, c); i++; continue; }
        char e = x->s[i + 1];
        i += 2;
        switch (e) {
        case '\n': break;
        case '\\': tsb_putc(&b, '\\'); break;
        case '\'': tsb_putc(&b, '\''); break;
        case '"': tsb_putc(&b, '"'); break;
        case 'a': tsb_putc(&b, '\a'); break;
        case 'b': tsb_putc(&b, '\b'); break;
        case 'f': tsb_putc(&b, '\f'); break;
        case 'n': tsb_putc(&b, '\n'); break;
        case 'r': tsb_putc(&b, '\r'); break;
        case 't': tsb_putc(&b, '\t'); break;
        case 'v': tsb_putc(&b, '\v'); break;
        case 'x': case 'u': case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < want; k++) {
                int h = i + (size_t)k < to ? hexval(x->s[i + (size_t)k]) : -1;
                if (h < 0) lx_fail(x, i - 2, "truncated \\x / \\u escape in a string");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff) lx_fail(x, i - 2, "\\U escape out of range");
            i += (size_t)want;
            put_utf8(&b, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < to && x->s[i] >= '0' && x->s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(x->s[i++] - '0');
                put_utf8(&b, cp);
            } else {
                tsb_putc(&b, '\\');
                i--;   /* an unknown escape stays as written */
            }
        }
    }
    return tsb_val(&b);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* digits with single '_' separators: (\d+_)*\d+ ; returns the end (== i when none) */
static size_t digits(const lx *x, size_t i) {
    size_t j = i;
    while (j < x->n && is_digit(x->s[j])) {
        while (j < x->n && is_digit(x->s[j])) j++;
        if (j + 1 < x->n && x->s[j] == '_' && is_digit(x->s[j + 1])) j++;
    }
    return j;
}

static tval parse_number(lx *x, size_t from, size_t to, bool is_float) {
    char buf[128];
    size_t k = 0;
    for (size_t i = from; i < to && k < sizeof buf - 1; i++)
        if (x->s[i] != '_') buf[k++] = x->s[i];
    buf[k] = 0;
    if (to - from >= sizeof buf) lx_fail(x, from, "number literal too long");
    if (is_float) return tv_float(strtod(buf, NULL));
    char *end;
    unsigned long long v;
    int base = 10;
    const char *d = buf;
    if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) base = 16, d += 2;
    else if (buf[0] == '0' && (buf[1] == 'o' || buf[1] == 'O')) base = 8, d += 2;
    else if (buf[0] == '0' && (buf[1] == 'b' || buf[1] == 'B')) base = 2, d += 2;
    v = strtoull(d, &end, base);
    if (v > (unsigned long long)INT64_MAX) lx_fail(x, from, "integer literal out of range");
    return tv_int((int64_t)v);
}

static const struct { const char *s; uint8_t op; } k_ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE}, {"<=", OP_LE},
    {"+", OP_ADD}, {"-", OP_SUB}, {"/", OP_DIV}, {"*", OP_MUL}, {"%", OP_MOD}, {"~", OP_TILDE},
    {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE},
    {"}", OP_RBRACE}, {">", OP_GT}, {"<", OP_LT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
    {"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMICOLON},
};

/* Tokens inside {{ }} or {% %} up to the matching end; returns the offset after it. */
static size_t lex_tag(lx *x, size_t i, char kind, size_t open_off) {
    char stack[64];
    int depth = 0;
    for (;;) {
        if (i >= x->n) lx_fail(x, open_off, kind == '%' ? "unexpected end of template: block tag not closed with '%}'"
                                                         : "unexpected end of template: expression not closed with '}}'");
        if (depth == 0) {
            size_t e = tag_end(x, i, kind == '%' ? '%' : '{');
            if (e) {
                lx_push(x, kind == '%' ? TK_BEND : TK_VEND, i);
                x->line_starting = x->s[e - 1] == '\n';
                return e;
            }
        }
        size_t w = skip_ws(x, i);
        if (w != i) { i = w; continue; }
        char c = x->s[i];
        if (is_digit(c)) {
            size_t j = digits(x, i);
            bool flt = false;
            bool prefixed = c == '0' && j == i + 1 && j < x->n && strchr("xXoObB", x->s[j]);
            if (prefixed) {
                j++;
                while (j < x->n && (hexval(x->s[j]) >= 0 || x->s[j] == '_')) j++;
            } else if (!(i > 0 && x->s[i - 1] == '.')) {
                size_t f = j;
                if (f + 1 < x->n && x->s[f] == '.' && is_digit(x->s[f + 1])) { f = digits(x, f + 1); flt = true; }
                if (f < x->n && (x->s[f] == 'e' || x->s[f] == 'E')) {
                    size_t g = f + 1;
                    if (g < x->n && (x->s[g] == '+' || x->s[g] == '-')) g++;
                    size_t h = digits(x, g);
                    if (h > g) { f = h; flt = true; }
                }
                if (flt) j = f;
            }
            ttok *t = lx_push(x, flt ? TK_FLOAT : TK_INT, i);
            t->v = parse_number(x, i, j, flt);
            i = j;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i + 1;
            while (j < x->n && (is_name0(x->s[j]) || is_digit(x->s[j]))) j++;
            ttok *t = lx_push(x, TK_NAME, i);
            t->p = x->s + i;
            t->n = j - i;
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < x->n && x->s[j] != c) j += x->s[j] == '\\' ? 2 : 1;
            if (j >= x->n) lx_fail(x, i, "unterminated string literal");
            ttok *t = lx_push(x, TK_STR, i);
            t->v = unescape(x, i + 1, j);
            i = j + 1;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof k_ops / sizeof k_ops[0]; k++)
            if (at(x, i, k_ops[k].s)) break;
        if (k == sizeof k_ops / sizeof k_ops[0]) {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected character '%c'", c);
            lx_fail(x, i, msg);
        }
        uint8_t op = k_ops[k].op;
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (depth == (int)sizeof stack) lx_fail(x, i, "brackets nested too deeply");
            stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            if (depth == 0 || stack[depth - 1] != c) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected '%c'", c);
                lx_fail(x, i, msg);
            }
            depth--;
        }
        ttok *t = lx_push(x, TK_OP, i);
        t->op = op;
        i += strlen(k_ops[k].s);
    }
}

void tlex(tarena *a, const char *src, size_t n, tlexed *out) {
    /* newlines: \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False) */
    char *s = ta_alloc(a, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m > 0 && s[m - 1] == '\n') m--;
    s[m] = 0;
    lx x = {.a = a, .s = s, .n = m, .line_starting = true};
    size_t pos = 0;
    while (pos < m) {
        size_t i = pos;
        while (i + 1 < m && !(s[i] == '{' && (s[i + 1] == '%' || s[i + 1] == '{' || s[i + 1] == '#'))) i++;
        if (i + 1 >= m) {   /* no more tags */
            emit_text(&x, pos, m, 0, false);
            break;
        }
        char kind = s[i + 1];
        size_t j = i + 2;
        char sign = j < m && (s[j] == '-' || s[j] == '+') ? s[j] : 0;
        if (sign) j++;
        if (kind == '%') {   /* {% raw %} ... {% endraw %} */
            size_t r = skip_ws(&x, j);
            if (at(&x, r, "raw")) {
                size_t e = skip_ws(&x, r + 3), end = 0;
                if (at(&x, e, "-%}")) end = skip_ws(&x, e + 3);
                else if (at(&x, e, "%}")) end = e + 2;
                if (end) {
                    emit_text(&x, pos, i, sign, true);
                    x.line_starting = s[end - 1] == '\n';
                    for (size_t k = end;; k++) {
                        if (k + 1 >= m) lx_fail(&x, i, "missing end of raw directive");
                        if (s[k] != '{' || s[k + 1] != '%') continue;
                        size_t q = k + 2;
                        char esign = q < m && (s[q] == '-' || s[q] == '+') ? s[q] : 0;
                        if (esign) q++;
                        q = skip_ws(&x, q);
                        if (!at(&x, q, "endraw")) continue;
                        q = skip_ws(&x, q + 6);
                        size_t qe = tag_end(&x, q, '%');
                        if (!qe) continue;
                        emit_text(&x, end, k, esign, true);
                        x.line_starting = s[qe - 1] == '\n';
                        pos = qe;
                        break;
                    }
                    continue;
                }
            }
        }
        emit_text(&x, pos, i, sign, kind != '{');
        if (kind == '#') {
            size_t k = j;
            while (k + 1 < m && !(s[k] == '#' && s[k + 1] == '}')) k++;
            if (k + 1 >= m) lx_fail(&x, i, "missing end of comment tag");
            size_t from = k > j && (s[k - 1] == '-' || s[k - 1] == '+') ? k - 1 : k;
            size_t e = tag_end(&x, from, '#');
            x.line_starting = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        lx_push(&x, kind == '%' ? TK_BBEGIN : TK_VBEGIN, i);
        pos = lex_tag(&x, j, kind, i);
    }
    lx_push(&x, TK_EOF, m);
    out->src = s;
    out->n = m;
    out->t = x.t;
    out->nt = x.nt;
}
