/* tvalue.c — arena, values with Python semantics, and their text forms (str, repr, json.dumps). */
#include "template/tvalue.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* arena */

struct ta_chunk {
    ta_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void ta_init(tarena *a, size_t cap, jmp_buf *jb, char *err) {
    memset(a, 0, sizeof *a);
    a->cap = cap;
    a->jb = jb;
    a->err = err;
}

void ta_free(tarena *a) {
    for (ta_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

void *ta_alloc(tarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > a->cap || a->used > a->cap - n) ta_fail(a, "memory limit of %zu bytes reached", a->cap);
    ta_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 60000 ? n : 60000;
        c = malloc(sizeof *c + sz);
        if (!c) ta_fail(a, "out of memory");
        c->size = sz;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *ta_strndup(tarena *a, const char *s, size_t n) {
    char *p = ta_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ta_fail(tarena *a, const char *fmt, ...) {
    char msg[TERR_CAP - 96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (a->err) {
        if (a->line > 0 && a->construct)
            snprintf(a->err, TERR_CAP, "line %d column %d (%s): %s", a->line, a->col, a->construct, msg);
        else if (a->line > 0)
            snprintf(a->err, TERR_CAP, "line %d column %d: %s", a->line, a->col, msg);
        else
            snprintf(a->err, TERR_CAP, "%s", msg);
    }
    longjmp(*a->jb, 1);
}

/* ------------------------------------------------------------------------- */
/* values */

tval tv_str(const char *s) { return tv_strn(s ? s : "", s ? strlen(s) : 0); }

tval tv_undef_named(const char *name, size_t n) {
    tval v = {.k = TV_UNDEF};
    v.u.s.p = name;
    v.u.s.n = n;
    return v;
}

tval tv_list_new(tarena *a, size_t cap) {
    tval v = {.k = TV_LIST};
    v.u.l = ta_alloc(a, sizeof *v.u.l);
    if (cap) {
        v.u.l->v = ta_alloc(a, cap * sizeof(tval));
        v.u.l->cap = cap;
    }
    return v;
}

/* nesting depth of a value, and the check when a container takes a child */
static int nest_of(tval v) { return v.k == TV_LIST ? v.u.l->depth : v.k == TV_DICT ? v.u.d->depth : 0; }
static void nest_into(tarena *a, int *depth, tval child, tval key) {
    int d = nest_of(child) + 1;
    if (nest_of(key) + 1 > d) d = nest_of(key) + 1;
    if (d > *depth) *depth = d;
    if (*depth > TV_MAX_NESTING) ta_fail(a, "values nested deeper than %d", TV_MAX_NESTING);
}

void tv_list_push(tarena *a, tval list, tval v) {
    tlist *l = list.u.l;
    nest_into(a, &l->depth, v, tv_none());
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tval *nv = ta_alloc(a, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

tval tv_dict_new(tarena *a, size_t cap) {
    tval v = {.k = TV_DICT};
    v.u.d = ta_alloc(a, sizeof *v.u.d);
    if (cap) {
        v.u.d->e = ta_alloc(a, cap * sizeof(tkv));
        v.u.d->cap = cap;
    }
    return v;
}

tval *tv_dict_get(tval dict, tval key) {
    tdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->e[i].k, key)) return &d->e[i].v;
    return NULL;
}

tval *tv_dict_gets(tval dict, const char *key, size_t n) {
    tdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].k.k == TV_STR && d->e[i].k.u.s.n == n && memcmp(d->e[i].k.u.s.p, key, n) == 0)
            return &d->e[i].v;
    return NULL;
}

void tv_dict_set(tarena *a, tval dict, tval key, tval v) {
    nest_into(a, &dict.u.d->depth, v, key);
    tval *old = tv_dict_get(dict, key);
    if (old) { *old = v; return; }
    tdict *d = dict.u.d;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tkv *ne = ta_alloc(a, cap * sizeof *ne);
        if (d->n) memcpy(ne, d->e, d->n * sizeof *ne);
        d->e = ne;
        d->cap = cap;
    }
    d->e[d->n++] = (tkv){key, v};
}

const char *tv_type_name(tval v) {
    switch ((tkind)v.k) {
    case TV_UNDEF: return "undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST:
        return v.flags & TVF_GEN ? "generator" : v.flags & TVF_ITEMS ? "dict_items" : v.flags & TVF_KEYS ? "dict_keys"
             : v.flags & TVF_VALUES ? "dict_values" : v.flags & TVF_RANGE ? "range" : v.flags & TVF_TUPLE ? "tuple" : "list";
    case TV_DICT: return v.flags & TVF_NS ? "Namespace" : "dict";
    case TV_FUNC: return "function";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

bool tv_truthy(tval v) {
    switch ((tkind)v.k) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.n != 0;
    case TV_LIST: return (v.flags & TVF_GEN) || v.u.l->n != 0;
    case TV_DICT: return (v.flags & TVF_NS) || v.u.d->n != 0;
    case TV_FUNC: case TV_LOOP: return true;
    }
    return false;
}

bool tv_is_str(tval v, const char *s) {
    size_t n = strlen(s);
    return v.k == TV_STR && v.u.s.n == n && memcmp(v.u.s.p, s, n) == 0;
}

static bool is_num(tval v) { return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL; }
static double num_f(tval v) { return v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(tval v) { return v.k == TV_INT ? v.u.i : (int64_t)v.u.b; }

bool tv_equal(tval a, tval b) {
    if (is_num(a) && is_num(b)) {
        if (a.k == TV_FLOAT || b.k == TV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.k != b.k) return false;
    switch ((tkind)a.k) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case TV_LIST:
        if ((a.flags & TVF_GEN) || (b.flags & TVF_GEN)) return a.u.l == b.u.l;
        if (a.flags != b.flags || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case TV_DICT:
        if ((a.flags & TVF_NS) || (b.flags & TVF_NS)) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tval *o = tv_dict_get(b, a.u.d->e[i].k);
            if (!o || !tv_equal(a.u.d->e[i].v, *o)) return false;
        }
        return true;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_LOOP: return a.u.lp == b.u.lp;
    default: return false;
    }
}

int tv_compare(tarena *a, tval x, tval y) {
    if (is_num(x) && is_num(y)) {
        if (x.k == TV_FLOAT || y.k == TV_FLOAT) {
            double p = num_f(x), q = num_f(y);
            return p < q ? -1 : p > q ? 1 : 0;
        }
        int64_t p = num_i(x), q = num_i(y);
        return p < q ? -1 : p > q ? 1 : 0;
    }
    if (x.k == TV_STR && y.k == TV_STR) {
        size_t n = x.u.s.n < y.u.s.n ? x.u.s.n : y.u.s.n;
        int c = n ? memcmp(x.u.s.p, y.u.s.p, n) : 0;   /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return x.u.s.n < y.u.s.n ? -1 : x.u.s.n > y.u.s.n ? 1 : 0;
    }
    if (x.k == TV_LIST && y.k == TV_LIST && x.flags == y.flags && !(x.flags & TVF_LAZY)) {
        size_t n = x.u.l->n < y.u.l->n ? x.u.l->n : y.u.l->n;
        for (size_t i = 0; i < n; i++)
            if (!tv_equal(x.u.l->v[i], y.u.l->v[i])) return tv_compare(a, x.u.l->v[i], y.u.l->v[i]);
        return x.u.l->n < y.u.l->n ? -1 : x.u.l->n > y.u.l->n ? 1 : 0;
    }
    ta_fail(a, "TypeError: '<' not supported between instances of '%s' and '%s'", tv_type_name(x),
            tv_type_name(y));
}

/* ------------------------------------------------------------------------- */
/* builder */

void tsb_init(tsb *b, tarena *a, size_t limit) {
    memset(b, 0, sizeof *b);
    b->a = a;
    b->limit = limit;
}

void tsb_putn(tsb *b, const char *s, size_t n) {
    if (n == 0) return;
    if (n > b->limit || b->n > b->limit - n) ta_fail(b->a, "output limit of %zu bytes reached", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = ta_alloc(b->a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tsb_puts(tsb *b, const char *s) { tsb_putn(b, s, strlen(s)); }
void tsb_putc(tsb *b, char c) { tsb_putn(b, &c, 1); }
tval tsb_val(tsb *b) { return tv_strn(b->p ? b->p : "", b->n); }

/* ------------------------------------------------------------------------- */
/* UTF-8 */

static size_t u8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n) { *cp = c; return 1; }
    uint32_t v = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) { *cp = c; return 1; }
        v = (v << 6) | (s[i] & 0x3f);
    }
    *cp = v;
    return k;
}

size_t tu_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += u8_decode((const unsigned char *)p + i, n - i, &cp);
        c++;
    }
    return c;
}

size_t tu_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0;
    while (cp-- > 0 && i < n) {
        uint32_t c;
        i += u8_decode((const unsigned char *)p + i, n - i, &c);
    }
    return i;
}

bool tu_all_ascii(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80) return false;
    return true;
}

size_t tu_space_len(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    unsigned c = s[0];
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
    if (c == 0xc2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && c == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3;   /* U+1680 */
    if (n >= 3 && c == 0xe2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;   /* U+2000..200A, U+2028, U+2029, U+202F */
    if (n >= 3 && c == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3;   /* U+205F */
    if (n >= 3 && c == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3;   /* U+3000 */
    return 0;
}

/* ------------------------------------------------------------------------- */
/* str() / repr() */

void tv_put_pyfloat(tsb *b, double v, bool json) {
    if (isnan(v)) { tsb_puts(b, json ? "NaN" : "nan"); return; }
    if (isinf(v)) { tsb_puts(b, v < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf")); return; }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < sizeof digits - 1) digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    if (neg) tsb_putc(b, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            tsb_puts(b, "0.");
            for (int i = -1; i > exp10; i--) tsb_putc(b, '0');
            tsb_putn(b, digits, nd);
        } else {
            size_t int_len = (size_t)exp10 + 1;
            if (nd <= int_len) {
                tsb_putn(b, digits, nd);
                for (size_t i = nd; i < int_len; i++) tsb_putc(b, '0');
                tsb_puts(b, ".0");
            } else {
                tsb_putn(b, digits, int_len);
                tsb_putc(b, '.');
                tsb_putn(b, digits + int_len, nd - int_len);
            }
        }
    } else {
        tsb_putc(b, digits[0]);
        if (nd > 1) {
            tsb_putc(b, '.');
            tsb_putn(b, digits + 1, nd - 1);
        }
        char x[16];
        snprintf(x, sizeof x, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        tsb_puts(b, x);
    }
}

static void put_int(tsb *b, int64_t i) {
    char x[32];
    snprintf(x, sizeof x, "%lld", (long long)i);
    tsb_puts(b, x);
}

static void put_str_repr(tsb *b, const char *p, size_t n) {
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    tsb_putc(b, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = u8_decode((const unsigned char *)p + i, n - i, &cp);
        char x[16];
        if (cp == (uint32_t)q || cp == '\\') { tsb_putc(b, '\\'); tsb_putc(b, (char)cp); }
        else if (cp == '\n') tsb_puts(b, "\\n");
        else if (cp == '\r') tsb_puts(b, "\\r");
        else if (cp == '\t') tsb_puts(b, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
            snprintf(x, sizeof x, "\\x%02x", cp);
            tsb_puts(b, x);
        } else if (cp == 0x2028 || cp == 0x2029) {
            snprintf(x, sizeof x, "\\u%04x", cp);
            tsb_puts(b, x);
        } else tsb_putn(b, p + i, k);
        i += k;
    }
    tsb_putc(b, q);
}

/* the namespaces being printed, outermost first: a namespace can hold what holds it, and Python's repr then
 * shows {...} for the inner one */
typedef struct ns_stack { const tdict *d[TV_MAX_NESTING + 2]; int n; } ns_stack;

static void put_seq(tsb *b, tval v, ns_stack *st);
/* an element inside a container: repr, and containers walked with the same stack */
static void put_elem(tsb *b, tval v, ns_stack *st) {
    if (v.k == TV_LIST || v.k == TV_DICT) put_seq(b, v, st);
    else tv_put_repr(b, v);
}

static void put_seq(tsb *b, tval v, ns_stack *st) {
    if (v.k == TV_LIST && (v.flags & TVF_GEN)) {
        tsb_puts(b, "<generator object>");
        return;
    }
    if (v.k == TV_LIST && (v.flags & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))) {
        tsb_puts(b, tv_type_name(v));
        tsb_puts(b, "([");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tsb_puts(b, ", ");
            put_elem(b, v.u.l->v[i], st);
        }
        tsb_puts(b, "])");
        return;
    }
    if (v.k == TV_LIST) {
        bool tup = v.flags & TVF_TUPLE;
        tsb_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tsb_puts(b, ", ");
            put_elem(b, v.u.l->v[i], st);
        }
        if (tup && v.u.l->n == 1) tsb_putc(b, ',');
        tsb_putc(b, tup ? ')' : ']');
        return;
    }
    if (v.flags & TVF_NS) {
        for (int i = 0; i < st->n; i++)
            if (st->d[i] == v.u.d) {
                tsb_puts(b, "<Namespace {...}>");
                return;
            }
        if (st->n == TV_MAX_NESTING + 2) {   /* cannot happen: values nest at most TV_MAX_NESTING deep */
            tsb_puts(b, "<Namespace {...}>");
            return;
        }
        st->d[st->n++] = v.u.d;
        tsb_puts(b, "<Namespace ");
    }
    tsb_putc(b, '{');
    for (size_t i = 0; i < v.u.d->n; i++) {
        if (i) tsb_puts(b, ", ");
        put_elem(b, v.u.d->e[i].k, st);
        tsb_puts(b, ": ");
        put_elem(b, v.u.d->e[i].v, st);
    }
    tsb_putc(b, '}');
    if (v.flags & TVF_NS) {
        tsb_putc(b, '>');
        st->n--;
    }
}

void tv_put_str(tsb *b, tval v) {
    switch ((tkind)v.k) {
    case TV_UNDEF: return;
    case TV_NONE: tsb_puts(b, "None"); return;
    case TV_BOOL: tsb_puts(b, v.u.b ? "True" : "False"); return;
    case TV_INT: put_int(b, v.u.i); return;
    case TV_FLOAT: tv_put_pyfloat(b, v.u.f, false); return;
    case TV_STR: tsb_putn(b, v.u.s.p, v.u.s.n); return;
    case TV_LIST: case TV_DICT: {
        ns_stack st;
        st.n = 0;
        put_seq(b, v, &st);
        return;
    }
    case TV_FUNC: tsb_puts(b, "<function>"); return;
    case TV_LOOP: tsb_puts(b, "<LoopContext>"); return;
    }
}

void tv_put_repr(tsb *b, tval v) {
    if (v.k == TV_STR) put_str_repr(b, v.u.s.p, v.u.s.n);
    else if (v.k == TV_UNDEF) tsb_puts(b, "Undefined");
    else tv_put_str(b, v);
}

tval tv_to_str(tarena *a, tval v) {
    if (v.k == TV_STR) return v;
    tsb b;
    tsb_init(&b, a, a->cap);
    tv_put_str(&b, v);
    return tsb_val(&b);
}

tval tv_html_escape(tarena *a, tval v) {
    tsb b;
    tsb_init(&b, a, a->cap);
    for (size_t i = 0; i < v.u.s.n; i++) {
        char c = v.u.s.p[i];
        switch (c) {
        case '&': tsb_puts(&b, "&amp;"); break;
        case '<': tsb_puts(&b, "&lt;"); break;
        case '>': tsb_puts(&b, "&gt;"); break;
        case '"': tsb_puts(&b, "&#34;"); break;
        case '\'': tsb_puts(&b, "&#39;"); break;
        default: tsb_putc(&b, c);
        }
    }
    tval r = tsb_val(&b);
    r.flags = TVF_MARKUP;
    return r;
}

/* ------------------------------------------------------------------------- */
/* json.dumps */

static void json_str(tsb *b, const char *p, size_t n, bool ascii) {
    static const char hex[] = "0123456789abcdef";
    tsb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char u[16];
        size_t k = 1;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
                esc = u;
            } else if (c >= 0x80 && ascii) {
                uint32_t cp;
                k = u8_decode((const unsigned char *)p + i, n - i, &cp);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(u, sizeof u, "\\u%04x", cp);
                }
                esc = u;
            }
        }
        if (esc) {
            tsb_putn(b, p + run, i - run);
            tsb_puts(b, esc);
            run = i + k;
        }
        i += k;
    }
    tsb_putn(b, p + run, n - run);
    tsb_putc(b, '"');
}

static void json_newline(tsb *b, const tjson_opts *o, int depth) {
    tsb_putc(b, '\n');
    for (long i = 0; i < (long)o->indent * depth; i++) tsb_putc(b, ' ');
}

static void json_key(tsb *b, tval k, const tjson_opts *o) {
    switch ((tkind)k.k) {
    case TV_STR: json_str(b, k.u.s.p, k.u.s.n, o->ensure_ascii); return;
    case TV_INT: tsb_putc(b, '"'); put_int(b, k.u.i); tsb_putc(b, '"'); return;
    case TV_FLOAT: tsb_putc(b, '"'); tv_put_pyfloat(b, k.u.f, true); tsb_putc(b, '"'); return;
    case TV_BOOL: tsb_puts(b, k.u.b ? "\"true\"" : "\"false\""); return;
    case TV_NONE: tsb_puts(b, "\"null\""); return;
    default: ta_fail(b->a, "TypeError: keys must be str, int, float, bool or None, not %s", tv_type_name(k));
    }
}

void tv_put_json(tsb *b, tval v, const tjson_opts *o, int depth) {
    if (depth > 64) ta_fail(b->a, "tojson: nesting deeper than 64");
    const bool ind = o->indent >= 0;
    const char *isep = o->item_sep ? o->item_sep : ind ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    switch ((tkind)v.k) {
    case TV_NONE: tsb_puts(b, "null"); return;
    case TV_BOOL: tsb_puts(b, v.u.b ? "true" : "false"); return;
    case TV_INT: put_int(b, v.u.i); return;
    case TV_FLOAT: tv_put_pyfloat(b, v.u.f, true); return;
    case TV_STR: json_str(b, v.u.s.p, v.u.s.n, o->ensure_ascii); return;
    case TV_LIST: {
        if (v.flags & TVF_LAZY) break;
        size_t n = v.u.l->n;
        if (n == 0) { tsb_puts(b, "[]"); return; }
        tsb_putc(b, '[');
        for (size_t i = 0; i < n; i++) {
            if (i) tsb_puts(b, isep);
            if (ind) json_newline(b, o, depth + 1);
            tv_put_json(b, v.u.l->v[i], o, depth + 1);
        }
        if (ind) json_newline(b, o, depth);
        tsb_putc(b, ']');
        return;
    }
    case TV_DICT: {
        if (v.flags & TVF_NS) break;
        size_t n = v.u.d->n;
        if (n == 0) { tsb_puts(b, "{}"); return; }
        size_t *ord = ta_alloc(b->a, n * sizeof *ord);
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (o->sort_keys)   /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && tv_compare(b->a, v.u.d->e[ord[j]].k, v.u.d->e[ord[j - 1]].k) < 0; j--) {
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        tsb_putc(b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) tsb_puts(b, isep);
            if (ind) json_newline(b, o, depth + 1);
            json_key(b, v.u.d->e[ord[i]].k, o);
            tsb_puts(b, ksep);
            tv_put_json(b, v.u.d->e[ord[i]].v, o, depth + 1);
        }
        if (ind) json_newline(b, o, depth);
        tsb_putc(b, '}');
        return;
    }
    default: break;
    }
    ta_fail(b->a, "TypeError: Object of type %s is not JSON serializable", tv_type_name(v));
}

tval tv_from_json(tarena *a, const json_t *j, int depth) {
    if (depth > 64) ta_fail(a, "context: JSON nested deeper than 64");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tval d = tv_dict_new(a, json_object_size(j));
        for (void *it = json_object_iter((json_t *)j); it; it = json_object_iter_next((json_t *)j, it)) {
            const char *k = json_object_iter_key(it);
            tval key = tv_strn(ta_strndup(a, k, json_object_iter_key_len(it)), json_object_iter_key_len(it));
            tv_dict_set(a, d, key, tv_from_json(a, json_object_iter_value(it), depth + 1));
        }
        return d;
    }
    case JSON_ARRAY: {
        tval l = tv_list_new(a, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++) tv_list_push(a, l, tv_from_json(a, json_array_get(j, i), depth + 1));
        return l;
    }
    case JSON_STRING: return tv_strn(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return tv_int(json_integer_value(j));
    case JSON_REAL: return tv_float(json_real_value(j));
    case JSON_TRUE: return tv_bool(true);
    case JSON_FALSE: return tv_bool(false);
    case JSON_NULL: return tv_none();
    }
    return tv_none();
}
