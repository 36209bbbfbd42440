/* tbuiltins.c — the built-in filters, tests, str / dict / list methods and globals (range, namespace, dict,
 * raise_exception, strftime_now) with jinja2 3.1 and Python 3 semantics, and HF's tojson. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/teval.h"

#define NAME_IS(v, s) tv_is_str(v, s)

static _Noreturn void argfail(tev *e, const char *what, const char *why) { ta_fail(e->a, "TypeError: %s: %s", what, why); }

/* keyword-or-positional argument lookup: position pos, or keyword name */
static tval arg(tval *args, size_t na, tval *kwn, tval *kwv, size_t nk, size_t pos, const char *name, tval dflt) {
    for (size_t k = 0; k < nk; k++)
        if (NAME_IS(kwn[k], name)) return kwv[k];
    return pos < na ? args[pos] : dflt;
}

static tval need_str(tev *e, tval v, const char *what) {
    if (v.k == TV_UNDEF) te_undefined_fail(e, v);
    if (v.k != TV_STR) ta_fail(e->a, "TypeError: %s expects a string, got %s", what, tv_type_name(v));
    return v;
}

/* ---- Python str helpers ---- */

static size_t dec(const char *p, size_t n, utf8proc_int32_t *cp) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, cp);
    if (k <= 0) { *cp = (unsigned char)p[0]; return 1; }
    return (size_t)k;
}

static void put_cp(tsb *b, utf8proc_int32_t cp) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, u);
    tsb_putn(b, (const char *)u, (size_t)k);
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE } tcase;

static bool is_cased(utf8proc_int32_t cp) {
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* Python's full case mappings where they differ from the simple ones utf8proc gives (SpecialCasing.txt's
 * unconditional entries that templates may meet) */
static const char *special_case(utf8proc_int32_t cp, bool upper) {
    if (upper)
        switch (cp) {
        case 0xdf: return "SS";
        case 0xfb00: return "FF";
        case 0xfb01: return "FI";
        case 0xfb02: return "FL";
        case 0xfb03: return "FFI";
        case 0xfb04: return "FFL";
        case 0xfb05: case 0xfb06: return "ST";
        case 0x149: return "\xca\xbcN";
        default: return NULL;
        }
    return cp == 0x130 ? "i\xcc\x87" : NULL;
}

static tval recase(tev *e, tval s, tcase mode) {
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s.u.s.n;) {
        utf8proc_int32_t cp;
        size_t k = dec(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_int32_t out = cp;
        switch (mode) {
        case CASE_UPPER: out = utf8proc_toupper(cp); break;
        case CASE_LOWER: out = utf8proc_tolower(cp); break;
        case CASE_TITLE:   /* str.title(): upper after an uncased character, lower after a cased one */
            out = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
            prev_cased = is_cased(cp);
            break;
        case CASE_CAPITALIZE: out = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
        case CASE_JTITLE: {   /* jinja's title: words start after [-\s({\[<]+ */
            bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || tu_space_len(s.u.s.p + i, s.u.s.n - i);
            out = sep ? cp : prev_cased ? utf8proc_tolower(cp) : utf8proc_toupper(cp);
            prev_cased = !sep;
            break;
        }
        }
        const char *sp = mode == CASE_UPPER ? special_case(cp, true) : mode == CASE_LOWER ? special_case(cp, false) : NULL;
        if (sp) tsb_puts(&b, sp);
        else put_cp(&b, out);
        first = false;
        i += k;
    }
    return tsb_val(&b);
}

tval tb_py_lower(tev *e, tval s) { return recase(e, s, CASE_LOWER); }

static bool in_chars(tval chars, const char *p, size_t n, size_t *k) {
    utf8proc_int32_t cp;
    *k = dec(p, n, &cp);
    for (size_t i = 0; i < chars.u.s.n;) {
        utf8proc_int32_t c;
        i += dec(chars.u.s.p + i, chars.u.s.n - i, &c);
        if (c == cp) return true;
    }
    return false;
}

/* strip / lstrip / rstrip with chars (None: Python whitespace) */
static tval do_strip(tev *e, tval s, tval chars, bool left, bool right) {
    if (chars.k != TV_NONE && chars.k != TV_UNDEF) need_str(e, chars, "strip");
    bool ws = chars.k != TV_STR;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, a = 0, z = n;
    if (left)
        while (a < n) {
            size_t k;
            if (ws) { k = tu_space_len(p + a, n - a); if (!k) break; }
            else if (!in_chars(chars, p + a, n - a, &k)) break;
            a += k;
        }
    if (right) {
        /* scan code points from a, remembering the end of the last kept one */
        size_t last = a;
        for (size_t i = a; i < z;) {
            size_t k;
            bool strip = ws ? (k = tu_space_len(p + i, n - i)) > 0 : in_chars(chars, p + i, n - i, &k);
            if (!k) k = 1;
            i += k;
            if (!strip) last = i;
        }
        z = last;
    }
    return tv_strn(p + a, z - a);
}

static const char *find_sub(const char *p, size_t n, const char *q, size_t m) {
    if (m == 0) return p;
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(p + i, q, m) == 0) return p + i;
    return NULL;
}

static tval do_split(tev *e, tval s, tval sep, int64_t maxsplit) {
    tval l = tv_list_new(e->a, 4);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (sep.k == TV_NONE || sep.k == TV_UNDEF) {   /* runs of whitespace, no empty strings */
        size_t i = 0;
        for (;;) {
            while (i < n && tu_space_len(p + i, n - i)) i += tu_space_len(p + i, n - i);
            if (i >= n) break;
            if (maxsplit >= 0 && (int64_t)l.u.l->n >= maxsplit) {   /* the rest, trailing whitespace kept */
                tv_list_push(e->a, l, tv_strn(p + i, n - i));
                break;
            }
            size_t j = i;
            while (j < n && !tu_space_len(p + j, n - j)) j += tu_offset(p + j, n - j, 1);
            te_count_iters(e, 1);
            tv_list_push(e->a, l, tv_strn(p + i, j - i));
            i = j;
        }
        return l;
    }
    need_str(e, sep, "split");
    if (sep.u.s.n == 0) ta_fail(e->a, "ValueError: empty separator");
    size_t i = 0;
    for (;;) {
        const char *f = maxsplit >= 0 && (int64_t)l.u.l->n >= maxsplit ? NULL : find_sub(p + i, n - i, sep.u.s.p, sep.u.s.n);
        if (!f) {
            tv_list_push(e->a, l, tv_strn(p + i, n - i));
            return l;
        }
        te_count_iters(e, 1);
        tv_list_push(e->a, l, tv_strn(p + i, (size_t)(f - (p + i))));
        i = (size_t)(f - p) + sep.u.s.n;
    }
}

static tval do_replace(tev *e, tval s, tval old, tval new_, int64_t count) {
    need_str(e, old, "replace");
    new_ = need_str(e, new_, "replace");
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (old.u.s.n == 0) {   /* Python inserts between every character */
        int64_t done = 0;
        for (size_t i = 0; i <= n;) {
            if (count < 0 || done < count) { tsb_putn(&b, new_.u.s.p, new_.u.s.n); done++; }
            if (i == n) break;
            size_t k = tu_offset(p + i, n - i, 1);
            tsb_putn(&b, p + i, k);
            i += k;
        }
        return tsb_val(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *f = count >= 0 && done >= count ? NULL : find_sub(p + i, n - i, old.u.s.p, old.u.s.n);
        if (!f) break;
        tsb_putn(&b, p + i, (size_t)(f - (p + i)));
        tsb_putn(&b, new_.u.s.p, new_.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
    }
    tsb_putn(&b, p + i, n - i);
    return tsb_val(&b);
}

static bool affix(tev *e, tval s, tval x, bool start) {
    if (x.k == TV_LIST && (x.flags & TVF_TUPLE)) {
        for (size_t i = 0; i < x.u.l->n; i++)
            if (affix(e, s, x.u.l->v[i], start)) return true;
        return false;
    }
    need_str(e, x, start ? "startswith" : "endswith");
    if (x.u.s.n > s.u.s.n) return false;
    return memcmp(start ? s.u.s.p : s.u.s.p + s.u.s.n - x.u.s.n, x.u.s.p, x.u.s.n) == 0;
}

static int64_t to_int(tev *e, tval v, const char *what) {
    if (v.k == TV_INT) return v.u.i;
    if (v.k == TV_BOOL) return v.u.b;
    ta_fail(e->a, "TypeError: %s: an integer is required, got %s", what, tv_type_name(v));
}

/* ---- formatting: str % args and str.format (no format specs) ---- */

static tval fmt_int(tev *e, tval v, const char *what) {
    if (v.k == TV_FLOAT) {
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) ta_fail(e->a, "ValueError: %s: cannot convert float", what);
        return tv_int((int64_t)v.u.f);
    }
    if (v.k != TV_INT && v.k != TV_BOOL) ta_fail(e->a, "TypeError: %s: a number is required, not %s", what, tv_type_name(v));
    return tv_int(v.k == TV_INT ? v.u.i : v.u.b);
}

tval tb_percent_format(tev *e, tval fmt, tval args) {
    const bool tuple = args.k == TV_LIST && (args.flags & TVF_TUPLE);
    size_t next = 0, n = tuple ? args.u.l->n : 1;
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    for (size_t i = 0; i < fmt.u.s.n; i++) {
        char c = fmt.u.s.p[i];
        if (c != '%') { tsb_putc(&b, c); continue; }
        if (++i >= fmt.u.s.n) ta_fail(e->a, "ValueError: incomplete format");
        char k = fmt.u.s.p[i];
        if (k == '%') { tsb_putc(&b, '%'); continue; }
        if (!strchr("srdi", k)) ta_fail(e->a, "'%%%c' formatting is not supported (only %%s %%r %%d %%i)", k);
        if (next >= n) ta_fail(e->a, "TypeError: not enough arguments for format string");
        tval v = tuple ? args.u.l->v[next] : args;
        next++;
        if (k == 's') tv_put_str(&b, v);
        else if (k == 'r') tv_put_repr(&b, v);
        else tv_put_str(&b, fmt_int(e, v, "%d format"));
    }
    if (next < n) ta_fail(e->a, "TypeError: not all arguments converted during string formatting");
    return tsb_val(&b);
}

static tval str_format(tev *e, tval fmt, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    size_t auto_i = 0;
    bool manual = false;
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') { tsb_putc(&b, '}'); i++; continue; }
            ta_fail(e->a, "ValueError: Single '}' encountered in format string");
        }
        if (p[i] != '{') { tsb_putc(&b, p[i]); continue; }
        if (i + 1 < n && p[i + 1] == '{') { tsb_putc(&b, '{'); i++; continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}' && p[j] != ':' && p[j] != '!') j++;
        if (j >= n || p[j] != '}') ta_fail(e->a, "str.format: conversions and format specs are not supported");
        tval field = tv_strn(p + i + 1, j - i - 1), v;
        if ((field.u.s.n == 0 && manual) || (field.u.s.n && field.u.s.p[0] >= '0' && field.u.s.p[0] <= '9' && auto_i))
            ta_fail(e->a, "ValueError: cannot switch between manual and automatic field numbering");
        if (field.u.s.n == 0) {
            if (auto_i >= na) ta_fail(e->a, "IndexError: Replacement index %zu out of range", auto_i);
            v = args[auto_i++];
        } else if (field.u.s.p[0] >= '0' && field.u.s.p[0] <= '9') {
            size_t k = (size_t)atoi(field.u.s.p);
            manual = true;
            if (k >= na) ta_fail(e->a, "IndexError: Replacement index %zu out of range", k);
            v = args[k];
        } else {
            size_t k;
            for (k = 0; k < nk && !tv_equal(kwn[k], field); k++) {}
            if (k == nk) ta_fail(e->a, "KeyError: '%.*s'", (int)field.u.s.n, field.u.s.p);
            v = kwv[k];
        }
        tv_put_str(&b, v);
        i = j;
    }
    return tsb_val(&b);
}

/* ---- methods ---- */

static const char *const k_str_methods[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                                            "replace", "upper", "lower", "title", "capitalize", "find", "rfind",
                                            "count", "join", "isdigit", "isalpha", "isspace", "isupper", "islower",
                                            "isalnum", "splitlines", "format", NULL};
static const char *const k_dict_methods[] = {"get", "items", "keys", "values", NULL};
static const char *const k_list_methods[] = {"index", "count", NULL};

bool tb_has_method(tval self, tval name) {
    const char *const *m = self.k == TV_STR ? k_str_methods : self.k == TV_DICT ? k_dict_methods
                           : self.k == TV_LIST ? k_list_methods : NULL;
    for (int i = 0; m && m[i]; i++)
        if (NAME_IS(name, m[i])) return true;
    return false;
}

static tval dict_items(tev *e, tval d) {
    tval l = tv_list_new(e->a, d.u.d->n);
    l.flags = TVF_ITEMS;
    for (size_t i = 0; i < d.u.d->n; i++) {
        tval t = tv_list_new(e->a, 2);
        t.flags = TVF_TUPLE;
        tv_list_push(e->a, t, d.u.d->e[i].k);
        tv_list_push(e->a, t, d.u.d->e[i].v);
        tv_list_push(e->a, l, t);
    }
    return l;
}

static tval splitlines(tev *e, tval s) {
    tval l = tv_list_new(e->a, 4);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0, start = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        size_t k = 0;
        if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) k = 1;
        else if (c == '\r') k = i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
        else if (c == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) k = 2;
        else if (c == 0xe2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
                 ((unsigned char)p[i + 2] == 0xa8 || (unsigned char)p[i + 2] == 0xa9)) k = 3;
        if (k) {
            tv_list_push(e->a, l, tv_strn(p + start, i - start));
            i += k;
            start = i;
        } else {
            i++;
        }
    }
    if (start < n) tv_list_push(e->a, l, tv_strn(p + start, n - start));
    return l;
}

static bool all_cp(tval s, int kind) {
    if (s.u.s.n == 0) return false;
    bool any_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        utf8proc_int32_t cp;
        i += dec(s.u.s.p + i, s.u.s.n - i, &cp);
        utf8proc_category_t c = utf8proc_category(cp);
        bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool digit = c == UTF8PROC_CATEGORY_ND;
        switch (kind) {
        case 0: if (!digit) return false; break;
        case 1: if (!letter) return false; break;
        case 2: if (!(cp == ' ' || (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x1f) || c == UTF8PROC_CATEGORY_ZS ||
                      c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP || cp == 0x85)) return false;
            break;
        case 3: if (c == UTF8PROC_CATEGORY_LL) return false; any_cased |= c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT; break;
        case 4: if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return false; any_cased |= c == UTF8PROC_CATEGORY_LL; break;
        case 5: if (!letter && !digit) return false; break;
        }
    }
    return kind == 3 || kind == 4 ? any_cased : true;
}

static int64_t find_cp(tval s, tval sub, bool rev) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, m = sub.u.s.n;
    int64_t found = -1;
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(p + i, sub.u.s.p, m) == 0) {
            found = (int64_t)tu_len(p, i);
            if (!rev) break;
        }
    return found;
}

tval tb_method(tev *e, tval self, tval name, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    tval none = tv_none();
    if (self.k == TV_STR) {
        tval a0 = arg(args, na, kwn, kwv, nk, 0, "", none);
        if (NAME_IS(name, "startswith") || NAME_IS(name, "endswith")) {
            if (na < 1) argfail(e, "startswith/endswith", "takes at least 1 argument");
            return tv_bool(affix(e, self, args[0], NAME_IS(name, "startswith")));
        }
        if (NAME_IS(name, "split") || NAME_IS(name, "rsplit")) {
            tval sep = arg(args, na, kwn, kwv, nk, 0, "sep", none);
            int64_t maxs = to_int(e, arg(args, na, kwn, kwv, nk, 1, "maxsplit", tv_int(-1)), "split");
            if (NAME_IS(name, "rsplit") && maxs >= 0) ta_fail(e->a, "str.rsplit with maxsplit is not supported");
            return do_split(e, self, sep, maxs);
        }
        if (NAME_IS(name, "strip")) return do_strip(e, self, a0, true, true);
        if (NAME_IS(name, "lstrip")) return do_strip(e, self, a0, true, false);
        if (NAME_IS(name, "rstrip")) return do_strip(e, self, a0, false, true);
        if (NAME_IS(name, "replace")) {
            if (na < 2) argfail(e, "replace", "takes at least 2 arguments");
            return do_replace(e, self, args[0], args[1], na > 2 ? to_int(e, args[2], "replace") : -1);
        }
        if (NAME_IS(name, "upper")) return recase(e, self, CASE_UPPER);
        if (NAME_IS(name, "lower")) return recase(e, self, CASE_LOWER);
        if (NAME_IS(name, "title")) return recase(e, self, CASE_TITLE);
        if (NAME_IS(name, "capitalize")) return recase(e, self, CASE_CAPITALIZE);
        if (NAME_IS(name, "find") || NAME_IS(name, "rfind"))
            return tv_int(find_cp(self, need_str(e, a0, "find"), NAME_IS(name, "rfind")));
        if (NAME_IS(name, "count")) {
            tval sub = need_str(e, a0, "count");
            if (sub.u.s.n == 0) return tv_int((int64_t)tu_len(self.u.s.p, self.u.s.n) + 1);
            int64_t c = 0;
            for (size_t i = 0; i + sub.u.s.n <= self.u.s.n;)
                if (memcmp(self.u.s.p + i, sub.u.s.p, sub.u.s.n) == 0) { c++; i += sub.u.s.n; }
                else i++;
            return tv_int(c);
        }
        if (NAME_IS(name, "join")) {
            tval l = te_iter_list(e, a0);
            tsb b;
            tsb_init(&b, e->a, e->max_output);
            for (size_t i = 0; i < l.u.l->n; i++) {
                if (l.u.l->v[i].k != TV_STR)
                    ta_fail(e->a, "TypeError: sequence item %zu: expected str instance, %s found", i, tv_type_name(l.u.l->v[i]));
                if (i) tsb_putn(&b, self.u.s.p, self.u.s.n);
                tsb_putn(&b, l.u.l->v[i].u.s.p, l.u.l->v[i].u.s.n);
            }
            return tsb_val(&b);
        }
        if (NAME_IS(name, "isdigit")) return tv_bool(all_cp(self, 0));
        if (NAME_IS(name, "isalpha")) return tv_bool(all_cp(self, 1));
        if (NAME_IS(name, "isspace")) return tv_bool(all_cp(self, 2));
        if (NAME_IS(name, "isupper")) return tv_bool(all_cp(self, 3));
        if (NAME_IS(name, "islower")) return tv_bool(all_cp(self, 4));
        if (NAME_IS(name, "isalnum")) return tv_bool(all_cp(self, 5));
        if (NAME_IS(name, "splitlines")) return splitlines(e, self);
        if (NAME_IS(name, "format")) return str_format(e, self, args, na, kwn, kwv, nk);
    } else if (self.k == TV_DICT) {
        if (NAME_IS(name, "get")) {
            if (na < 1) argfail(e, "dict.get", "takes at least 1 argument");
            tval *v = tv_dict_get(self, args[0]);
            return v ? *v : na > 1 ? args[1] : none;
        }
        if (NAME_IS(name, "items")) return dict_items(e, self);
        if (NAME_IS(name, "keys")) {
            tval l = tv_list_new(e->a, self.u.d->n);
            l.flags = TVF_KEYS;
            for (size_t i = 0; i < self.u.d->n; i++) tv_list_push(e->a, l, self.u.d->e[i].k);
            return l;
        }
        if (NAME_IS(name, "values")) {
            tval l = tv_list_new(e->a, self.u.d->n);
            l.flags = TVF_VALUES;
            for (size_t i = 0; i < self.u.d->n; i++) tv_list_push(e->a, l, self.u.d->e[i].v);
            return l;
        }
    } else if (self.k == TV_LIST) {
        if (na < 1) argfail(e, "list method", "takes 1 argument");
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tv_equal(self.u.l->v[i], args[0])) {
                if (NAME_IS(name, "index")) return tv_int((int64_t)i);
                c++;
            }
        if (NAME_IS(name, "index")) ta_fail(e->a, "ValueError: value is not in list");
        return tv_int(c);
    }
    ta_fail(e->a, "'%s' object has no method '%.*s'", tv_type_name(self), (int)name.u.s.n, name.u.s.p);
}

/* ---- tests ---- */

static bool do_test(tev *e, tval name, tval v, tval *args, size_t na) {
    tval a0 = na > 0 ? args[0] : tv_undef();
    if (NAME_IS(name, "defined")) return v.k != TV_UNDEF;
    if (NAME_IS(name, "undefined")) return v.k == TV_UNDEF;
    if (NAME_IS(name, "none")) return v.k == TV_NONE;
    if (NAME_IS(name, "boolean")) return v.k == TV_BOOL;
    if (NAME_IS(name, "true")) return v.k == TV_BOOL && v.u.b;
    if (NAME_IS(name, "false")) return v.k == TV_BOOL && !v.u.b;
    if (NAME_IS(name, "integer")) return v.k == TV_INT;
    if (NAME_IS(name, "float")) return v.k == TV_FLOAT;
    if (NAME_IS(name, "number")) return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL;
    if (NAME_IS(name, "string")) return v.k == TV_STR;
    if (NAME_IS(name, "mapping")) return v.k == TV_DICT && !(v.flags & TVF_NS);
    if (NAME_IS(name, "iterable")) return v.k == TV_UNDEF || v.k == TV_STR || v.k == TV_LIST || (v.k == TV_DICT && !(v.flags & TVF_NS));
    if (NAME_IS(name, "sequence"))
        return v.k == TV_UNDEF || v.k == TV_STR || (v.k == TV_LIST && !(v.flags & TVF_NOINDEX)) || (v.k == TV_DICT && !(v.flags & TVF_NS));
    if (NAME_IS(name, "callable")) return v.k == TV_FUNC;
    if (NAME_IS(name, "sameas")) {
        if (v.k != a0.k) return false;
        if (v.k == TV_NONE || v.k == TV_UNDEF) return true;
        if (v.k == TV_BOOL) return v.u.b == a0.u.b;
        if (v.k == TV_INT) return v.u.i == a0.u.i && v.u.i >= -5 && v.u.i <= 256;   /* CPython's small-int cache */
        return v.k == TV_STR ? v.u.s.p == a0.u.s.p && v.u.s.n == a0.u.s.n : v.u.l == a0.u.l;
    }
    if (NAME_IS(name, "odd") || NAME_IS(name, "even")) {
        int64_t i = to_int(e, v, "odd/even");
        return NAME_IS(name, "odd") ? (i % 2 != 0) : (i % 2 == 0);
    }
    if (NAME_IS(name, "divisibleby")) {
        int64_t d = to_int(e, a0, "divisibleby");
        if (d == 0) ta_fail(e->a, "ZeroDivisionError: integer division or modulo by zero");
        return to_int(e, v, "divisibleby") % d == 0;
    }
    if (NAME_IS(name, "eq") || NAME_IS(name, "equalto") || NAME_IS(name, "==")) return tv_equal(v, a0);
    if (NAME_IS(name, "ne") || NAME_IS(name, "!=")) return !tv_equal(v, a0);
    if (NAME_IS(name, "lt") || NAME_IS(name, "lessthan") || NAME_IS(name, "<")) return tv_compare(e->a, v, a0) < 0;
    if (NAME_IS(name, "le") || NAME_IS(name, "<=")) return tv_compare(e->a, v, a0) <= 0;
    if (NAME_IS(name, "gt") || NAME_IS(name, "greaterthan") || NAME_IS(name, ">")) return tv_compare(e->a, v, a0) > 0;
    if (NAME_IS(name, "ge") || NAME_IS(name, ">=")) return tv_compare(e->a, v, a0) >= 0;
    if (NAME_IS(name, "in")) return te_contains(e, a0, v);
    if (NAME_IS(name, "lower") || NAME_IS(name, "upper")) {
        tval s = tv_to_str(e->a, v);
        return all_cp(s, NAME_IS(name, "lower") ? 4 : 3);
    }
    ta_fail(e->a, "TemplateAssertionError: no test named '%.*s'", (int)name.u.s.n, name.u.s.p);
}

bool tb_test(tev *e, const tnode *n, tval name, tval v, tval *args, size_t na) {
    (void)n;
    return do_test(e, name, v, args, na);
}

/* ---- filters ---- */

/* attribute path "a.b.0" as jinja's make_attrgetter: dots split, integer parts index */
static tval get_path(tev *e, tval item, tval path) {
    if (path.k == TV_INT) return te_getitem(e, item, path);
    need_str(e, path, "attribute");
    const char *p = path.u.s.p;
    size_t n = path.u.s.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '.') j++;
        tval part = tv_strn(p + i, j - i);
        bool digits = j > i;
        for (size_t k = i; k < j; k++) digits &= p[k] >= '0' && p[k] <= '9';
        if (digits) {
            int64_t v = 0;
            for (size_t k = i; k < j && v < (int64_t)1e15; k++) v = v * 10 + (p[k] - '0');
            item = te_getitem(e, item, tv_int(v));
        } else {
            item = te_getitem(e, item, part);
        }
        i = j + 1;
    }
    return item;
}

static tval filter_items(tev *e, tval name, tval v, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk);

static tval select_like(tev *e, tval v, tval *args, size_t na, bool by_attr, bool keep) {
    tval r = tv_list_new(e->a, 0);
    r.flags = TVF_GEN;   /* a generator, over nothing when the input is false (None, undefined, empty) */
    if (!tv_truthy(v)) return r;
    tval l = te_iter_list(e, v);
    size_t first = by_attr ? 1 : 0;
    if (by_attr && na < 1) argfail(e, "selectattr/rejectattr", "missing the attribute");
    for (size_t i = 0; i < l.u.l->n; i++) {
        te_count_iters(e, 1);
        tval x = by_attr ? get_path(e, l.u.l->v[i], args[0]) : l.u.l->v[i];
        bool t = na > first ? do_test(e, need_str(e, args[first], "test name"), x, args + first + 1, na - first - 1)
                            : tv_truthy(x);
        if (t == keep) tv_list_push(e->a, r, l.u.l->v[i]);
    }
    return r;
}

static int sort_cmp(tev *e, tval x, tval y, bool cs) {
    if (!cs && x.k == TV_STR) x = recase(e, x, CASE_LOWER);
    if (!cs && y.k == TV_STR) y = recase(e, y, CASE_LOWER);
    return tv_compare(e->a, x, y);
}

static tval do_tojson(tev *e, tval v, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    tval ea = arg(args, na, kwn, kwv, nk, 0, "ensure_ascii", tv_bool(false));
    tval ind = arg(args, na, kwn, kwv, nk, 1, "indent", tv_none());
    tval seps = arg(args, na, kwn, kwv, nk, 2, "separators", tv_none());
    tval sk = arg(args, na, kwn, kwv, nk, 3, "sort_keys", tv_bool(false));
    tjson_opts o = {.indent = -1, .ensure_ascii = tv_truthy(ea), .sort_keys = tv_truthy(sk)};
    if (ind.k == TV_INT || ind.k == TV_BOOL) o.indent = (int)(to_int(e, ind, "tojson indent") < 0 ? 0 : to_int(e, ind, "indent"));
    else if (ind.k != TV_NONE) ta_fail(e->a, "tojson: indent must be an integer or None");
    if (o.indent > 64) o.indent = 64;
    if (seps.k == TV_LIST) {
        if (seps.u.l->n != 2) ta_fail(e->a, "ValueError: tojson separators must be a pair");
        tval s0 = need_str(e, seps.u.l->v[0], "separators"), s1 = need_str(e, seps.u.l->v[1], "separators");
        o.item_sep = ta_strndup(e->a, s0.u.s.p, s0.u.s.n);
        o.key_sep = ta_strndup(e->a, s1.u.s.p, s1.u.s.n);
    } else if (seps.k != TV_NONE) {
        ta_fail(e->a, "tojson: separators must be a pair of strings");
    }
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    tv_put_json(&b, v, &o, 0);
    return tsb_val(&b);
}

static tval do_indent(tev *e, tval s, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    tval w = arg(args, na, kwn, kwv, nk, 0, "width", tv_int(4));
    bool first = tv_truthy(arg(args, na, kwn, kwv, nk, 1, "first", tv_bool(false)));
    bool blank = tv_truthy(arg(args, na, kwn, kwv, nk, 2, "blank", tv_bool(false)));
    tval ind;
    if (w.k == TV_STR) ind = w;
    else {
        int64_t k = to_int(e, w, "indent width");
        ind = tv_strn("", 0);
        if (k > 0) {
            if (k > 4096) k = 4096;
            char *sp = ta_alloc(e->a, (size_t)k);
            memset(sp, ' ', (size_t)k);
            ind = tv_strn(sp, (size_t)k);
        }
    }
    s = tv_to_str(e->a, s);
    tsb t;
    tsb_init(&t, e->a, e->max_output);
    tsb_putn(&t, s.u.s.p, s.u.s.n);
    tsb_putc(&t, '\n');
    tval lines = splitlines(e, tsb_val(&t));
    tsb b;
    tsb_init(&b, e->a, e->max_output);
    if (first) tsb_putn(&b, ind.u.s.p, ind.u.s.n);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        tval line = lines.u.l->v[i];
        if (i) {
            tsb_putc(&b, '\n');
            if (blank || line.u.s.n) tsb_putn(&b, ind.u.s.p, ind.u.s.n);
        }
        tsb_putn(&b, line.u.s.p, line.u.s.n);
    }
    return tsb_val(&b);
}

static tval do_int(tev *e, tval v, tval dflt) {
    switch ((tkind)v.k) {
    case TV_INT: return v;
    case TV_BOOL: return tv_int(v.u.b);
    case TV_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) return dflt;
        return tv_int((int64_t)v.u.f);
    case TV_STR: {
        tval s = do_strip(e, v, tv_none(), true, true);
        char buf[64];
        if (s.u.s.n == 0 || s.u.s.n >= sizeof buf) return dflt;
        memcpy(buf, s.u.s.p, s.u.s.n);
        buf[s.u.s.n] = 0;
        char *end;
        long long i = strtoll(buf, &end, 10);
        if (*end == 0) return tv_int(i);
        if (strpbrk(buf, "xXpP")) return dflt;   /* C reads hex floats; Python's float() does not */
        double d = strtod(buf, &end);
        if (*end == 0 && !isnan(d) && fabs(d) < 9.2e18) return tv_int((int64_t)d);
        return dflt;
    }
    default: return dflt;
    }
}

static tval do_float(tev *e, tval v, tval dflt) {
    switch ((tkind)v.k) {
    case TV_INT: return tv_float((double)v.u.i);
    case TV_BOOL: return tv_float(v.u.b);
    case TV_FLOAT: return v;
    case TV_STR: {
        tval s = do_strip(e, v, tv_none(), true, true);
        char buf[64];
        if (s.u.s.n == 0 || s.u.s.n >= sizeof buf) return dflt;
        memcpy(buf, s.u.s.p, s.u.s.n);
        buf[s.u.s.n] = 0;
        char *end;
        if (strpbrk(buf, "xXpP")) return dflt;
        double d = strtod(buf, &end);
        return *end == 0 ? tv_float(d) : dflt;
    }
    default: return dflt;
    }
}

/* filters on a Markup give a Markup (markupsafe's str methods do) */
static tval keep_markup(tval src, tval r) {
    if (src.k == TV_STR && (src.flags & TVF_MARKUP) && r.k == TV_STR) r.flags |= TVF_MARKUP;
    return r;
}

static tval filter_items(tev *e, tval name, tval v, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    tval none = tv_none(), a0 = arg(args, na, kwn, kwv, nk, 0, "", tv_undef());
    if (NAME_IS(name, "tojson")) return do_tojson(e, v, args, na, kwn, kwv, nk);
    if (NAME_IS(name, "default") || NAME_IS(name, "d")) {
        tval dv = arg(args, na, kwn, kwv, nk, 0, "default_value", tv_strn("", 0));
        bool boolean = tv_truthy(arg(args, na, kwn, kwv, nk, 1, "boolean", tv_bool(false)));
        return v.k == TV_UNDEF || (boolean && !tv_truthy(v)) ? dv : v;
    }
    if (NAME_IS(name, "length") || NAME_IS(name, "count")) {
        switch ((tkind)v.k) {
        case TV_UNDEF: return tv_int(0);
        case TV_STR: return tv_int((int64_t)tu_len(v.u.s.p, v.u.s.n));
        case TV_LIST:
            if (v.flags & TVF_GEN) break;
            return tv_int((int64_t)v.u.l->n);
        case TV_DICT: if (!(v.flags & TVF_NS)) return tv_int((int64_t)v.u.d->n); break;
        case TV_LOOP: break;
        default: break;
        }
        ta_fail(e->a, "TypeError: object of type '%s' has no len()", tv_type_name(v));
    }
    if (NAME_IS(name, "string")) return tv_to_str(e->a, v);
    if (NAME_IS(name, "safe")) {
        tval s = tv_to_str(e->a, v);
        s.flags |= TVF_MARKUP;
        return s;
    }
    if (NAME_IS(name, "trim")) {
        tval chars = arg(args, na, kwn, kwv, nk, 0, "chars", none);
        return keep_markup(v, do_strip(e, tv_to_str(e->a, v), chars, true, true));
    }
    if (NAME_IS(name, "upper")) return keep_markup(v, recase(e, tv_to_str(e->a, v), CASE_UPPER));
    if (NAME_IS(name, "lower")) return keep_markup(v, recase(e, tv_to_str(e->a, v), CASE_LOWER));
    if (NAME_IS(name, "capitalize")) return keep_markup(v, recase(e, tv_to_str(e->a, v), CASE_CAPITALIZE));
    if (NAME_IS(name, "title")) return keep_markup(v, recase(e, tv_to_str(e->a, v), CASE_JTITLE));
    if (NAME_IS(name, "replace")) {
        if (na < 2) argfail(e, "replace", "takes at least 2 arguments");
        tval cnt = arg(args, na, kwn, kwv, nk, 2, "count", none);
        return keep_markup(v, do_replace(e, tv_to_str(e->a, v), tv_to_str(e->a, args[0]), tv_to_str(e->a, args[1]),
                                         cnt.k == TV_NONE ? -1 : to_int(e, cnt, "replace count")));
    }
    if (NAME_IS(name, "items")) {
        tval r = tv_list_new(e->a, 0);
        r.flags = TVF_GEN;
        if (v.k == TV_UNDEF) return r;
        if (v.k != TV_DICT || (v.flags & TVF_NS)) ta_fail(e->a, "TypeError: can only get item pairs from a mapping");
        r = dict_items(e, v);
        r.flags = TVF_GEN;
        return r;
    }
    if (NAME_IS(name, "list")) {
        tval l = te_iter_list(e, v), r = tv_list_new(e->a, l.u.l->n);
        for (size_t i = 0; i < l.u.l->n; i++) tv_list_push(e->a, r, l.u.l->v[i]);
        return r;
    }
    if (NAME_IS(name, "join")) {
        tval d = arg(args, na, kwn, kwv, nk, 0, "d", tv_strn("", 0));
        tval attr = arg(args, na, kwn, kwv, nk, 1, "attribute", none);
        d = tv_to_str(e->a, d);
        tval l = te_iter_list(e, v);
        tsb b;
        tsb_init(&b, e->a, e->max_output);
        for (size_t i = 0; i < l.u.l->n; i++) {
            if (i) tsb_putn(&b, d.u.s.p, d.u.s.n);
            tv_put_str(&b, attr.k == TV_NONE ? l.u.l->v[i] : get_path(e, l.u.l->v[i], attr));
        }
        return tsb_val(&b);
    }
    if (NAME_IS(name, "first") || NAME_IS(name, "last")) {
        if (NAME_IS(name, "last") && v.k == TV_LIST && (v.flags & TVF_GEN))
            ta_fail(e->a, "TypeError: 'generator' object is not reversible");
        tval l = te_iter_list(e, v);
        if (l.u.l->n == 0) return tv_undef_named(NULL, 0);
        return l.u.l->v[NAME_IS(name, "first") ? 0 : l.u.l->n - 1];
    }
    if (NAME_IS(name, "reverse")) {
        if (v.k == TV_STR) {
            tval l = te_iter_list(e, v);
            tsb b;
            tsb_init(&b, e->a, e->max_output);
            for (size_t i = l.u.l->n; i-- > 0;) tsb_putn(&b, l.u.l->v[i].u.s.p, l.u.l->v[i].u.s.n);
            return tsb_val(&b);
        }
        tval l = te_iter_list(e, v), r = tv_list_new(e->a, l.u.l->n);
        for (size_t i = l.u.l->n; i-- > 0;) tv_list_push(e->a, r, l.u.l->v[i]);
        r.flags = TVF_GEN;   /* reversed(): an iterator */
        return r;
    }
    if (NAME_IS(name, "int")) return do_int(e, v, arg(args, na, kwn, kwv, nk, 0, "default", tv_int(0)));
    if (NAME_IS(name, "float")) return do_float(e, v, arg(args, na, kwn, kwv, nk, 0, "default", tv_float(0)));
    if (NAME_IS(name, "abs")) {
        if (v.k == TV_INT) return tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        if (v.k == TV_FLOAT) return tv_float(fabs(v.u.f));
        if (v.k == TV_BOOL) return tv_int(v.u.b);
        ta_fail(e->a, "TypeError: bad operand type for abs(): '%s'", tv_type_name(v));
    }
    if (NAME_IS(name, "round")) {
        int64_t prec = to_int(e, arg(args, na, kwn, kwv, nk, 0, "precision", tv_int(0)), "round");
        tval method = arg(args, na, kwn, kwv, nk, 1, "method", tv_str("common"));
        if (v.k != TV_INT && v.k != TV_FLOAT && v.k != TV_BOOL) ta_fail(e->a, "TypeError: round needs a number");
        double x = v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : v.u.b, m = pow(10, (double)prec);
        if (NAME_IS(method, "common")) {   /* Python's round(): the exact value, half to even (glibc's printf rounds so) */
            if (prec >= 0 && prec <= 300 && isfinite(x)) {
                char buf[400];
                snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
                x = strtod(buf, NULL);
            } else {
                x = nearbyint(x * m) / m;
            }
        }
        else if (NAME_IS(method, "floor")) x = floor(x * m) / m;
        else if (NAME_IS(method, "ceil")) x = ceil(x * m) / m;
        else ta_fail(e->a, "FilterArgumentError: method must be common, ceil or floor");
        return tv_float(x);
    }
    if (NAME_IS(name, "selectattr") || NAME_IS(name, "rejectattr"))
        return select_like(e, v, args, na, true, NAME_IS(name, "selectattr"));
    if (NAME_IS(name, "select") || NAME_IS(name, "reject")) return select_like(e, v, args, na, false, NAME_IS(name, "select"));
    if (NAME_IS(name, "map")) {
        tval r = tv_list_new(e->a, 0);
        r.flags = TVF_GEN;
        if (!tv_truthy(v)) return r;
        tval l = te_iter_list(e, v);
        tval attr = arg(NULL, 0, kwn, kwv, nk, 0, "attribute", tv_undef());
        tval dflt = arg(NULL, 0, kwn, kwv, nk, 0, "default", tv_undef());
        for (size_t i = 0; i < l.u.l->n; i++) {
            te_count_iters(e, 1);
            tval x;
            if (attr.k != TV_UNDEF) {
                x = get_path(e, l.u.l->v[i], attr);
                if (x.k == TV_UNDEF && dflt.k != TV_UNDEF) x = dflt;
            } else {
                if (na < 1) argfail(e, "map", "needs a filter name or attribute=");
                x = filter_items(e, need_str(e, args[0], "map"), l.u.l->v[i], args + 1, na - 1, NULL, NULL, 0);
            }
            tv_list_push(e->a, r, x);
        }
        return r;
    }
    if (NAME_IS(name, "indent")) return keep_markup(v, do_indent(e, v, args, na, kwn, kwv, nk));
    if (NAME_IS(name, "unique")) {
        bool cs = tv_truthy(arg(args, na, kwn, kwv, nk, 0, "case_sensitive", tv_bool(false)));
        tval attr = arg(args, na, kwn, kwv, nk, 1, "attribute", none);
        tval l = te_iter_list(e, v), r = tv_list_new(e->a, l.u.l->n), seen = tv_list_new(e->a, l.u.l->n);
        for (size_t i = 0; i < l.u.l->n; i++) {
            te_count_iters(e, seen.u.l->n + 1);
            tval key = attr.k == TV_NONE ? l.u.l->v[i] : get_path(e, l.u.l->v[i], attr);
            if (!cs && key.k == TV_STR) key = recase(e, key, CASE_LOWER);
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = tv_equal(seen.u.l->v[j], key);
            if (!dup) { tv_list_push(e->a, seen, key); tv_list_push(e->a, r, l.u.l->v[i]); }
        }
        r.flags = TVF_GEN;
        return r;
    }
    if (NAME_IS(name, "sort") || NAME_IS(name, "dictsort")) {
        bool dictsort = NAME_IS(name, "dictsort");
        bool rev = tv_truthy(arg(args, na, kwn, kwv, nk, dictsort ? 2 : 0, "reverse", tv_bool(false)));
        bool cs = tv_truthy(arg(args, na, kwn, kwv, nk, dictsort ? 0 : 1, "case_sensitive", tv_bool(false)));
        tval attr = dictsort ? none : arg(args, na, kwn, kwv, nk, 2, "attribute", none);
        bool by_value = dictsort && NAME_IS(arg(args, na, kwn, kwv, nk, 1, "by", tv_str("key")), "value");
        tval l;
        if (dictsort) {
            if (v.k != TV_DICT || (v.flags & TVF_NS)) ta_fail(e->a, "TypeError: dictsort needs a mapping");
            l = dict_items(e, v);
            l.flags = 0;   /* sorted(): a list */
        } else {
            tval src = te_iter_list(e, v);
            l = tv_list_new(e->a, src.u.l->n);
            for (size_t i = 0; i < src.u.l->n; i++) tv_list_push(e->a, l, src.u.l->v[i]);
        }
        size_t n = l.u.l->n;
        te_count_iters(e, (uint64_t)n * n);
        tval *keys = ta_alloc(e->a, (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++) {
            tval x = l.u.l->v[i];
            keys[i] = dictsort ? x.u.l->v[by_value ? 1 : 0] : attr.k == TV_NONE ? x : get_path(e, x, attr);
        }
        for (size_t i = 1; i < n; i++)   /* stable insertion sort */
            for (size_t j = i; j > 0; j--) {
                int c = sort_cmp(e, keys[j - 1], keys[j], cs);
                if (rev ? c >= 0 : c <= 0) break;
                tval t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
                t = l.u.l->v[j]; l.u.l->v[j] = l.u.l->v[j - 1]; l.u.l->v[j - 1] = t;
            }
        return l;
    }
    if (NAME_IS(name, "sum")) {
        tval attr = arg(args, na, kwn, kwv, nk, 0, "attribute", none);
        tval acc = arg(args, na, kwn, kwv, nk, 1, "start", tv_int(0));
        tval l = te_iter_list(e, v);
        for (size_t i = 0; i < l.u.l->n; i++) {
            tval x = attr.k == TV_NONE ? l.u.l->v[i] : get_path(e, l.u.l->v[i], attr);
            if ((acc.k != TV_INT && acc.k != TV_FLOAT && acc.k != TV_BOOL) || (x.k != TV_INT && x.k != TV_FLOAT && x.k != TV_BOOL))
                ta_fail(e->a, "TypeError: sum needs numbers");
            if (acc.k == TV_FLOAT || x.k == TV_FLOAT)
                acc = tv_float((acc.k == TV_FLOAT ? acc.u.f : (double)(acc.k == TV_INT ? acc.u.i : acc.u.b)) +
                               (x.k == TV_FLOAT ? x.u.f : (double)(x.k == TV_INT ? x.u.i : x.u.b)));
            else
                acc = tv_int((acc.k == TV_INT ? acc.u.i : acc.u.b) + (x.k == TV_INT ? x.u.i : x.u.b));
        }
        return acc;
    }
    if (NAME_IS(name, "attr")) return te_getattr(e, v, need_str(e, a0, "attr"));
    if (NAME_IS(name, "center")) {   /* str.center(width): CPython puts the odd space left when width is odd */
        tval s = tv_to_str(e->a, v);
        int64_t w = to_int(e, arg(args, na, kwn, kwv, nk, 0, "width", tv_int(80)), "center"), len = (int64_t)tu_len(s.u.s.p, s.u.s.n);
        if (w > 4096) w = 4096;
        if (w <= len) return s;
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        tsb b;
        tsb_init(&b, e->a, e->max_output);
        for (int64_t i = 0; i < left; i++) tsb_putc(&b, ' ');
        tsb_putn(&b, s.u.s.p, s.u.s.n);
        for (int64_t i = 0; i < pad - left; i++) tsb_putc(&b, ' ');
        return tsb_val(&b);
    }
    if (NAME_IS(name, "escape") || NAME_IS(name, "e") || NAME_IS(name, "forceescape")) {
        if (v.k == TV_STR && (v.flags & TVF_MARKUP) && !NAME_IS(name, "forceescape")) return v;
        return tv_html_escape(e->a, tv_to_str(e->a, v));
    }
    ta_fail(e->a, "TemplateAssertionError: no filter named '%.*s'", (int)name.u.s.n, name.u.s.p);
}

tval tb_filter(tev *e, const tnode *n, tval name, tval v, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    (void)n;
    /* filters that take a string fail on Undefined as jinja2's do (only in arithmetic-like uses); most
     * print it as "" */
    return filter_items(e, name, v, args, na, kwn, kwv, nk);
}

/* ---- globals ---- */

tval tb_global(tev *e, int id, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    switch (id) {
    case G_RANGE: {
        if (nk) argfail(e, "range", "takes no keyword arguments");
        if (na < 1 || na > 3) argfail(e, "range", "expected 1 to 3 arguments");
        int64_t a = 0, b, st = 1;
        if (na == 1) b = to_int(e, args[0], "range");
        else { a = to_int(e, args[0], "range"); b = to_int(e, args[1], "range"); }
        if (na == 3) st = to_int(e, args[2], "range");
        if (st == 0) ta_fail(e->a, "ValueError: range() arg 3 must not be zero");
        tval l = tv_list_new(e->a, 0);
        l.flags = TVF_RANGE;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
            te_count_iters(e, 1);
            tv_list_push(e->a, l, tv_int(i));
        }
        return l;
    }
    case G_NAMESPACE: case G_DICT: {
        tval d = tv_dict_new(e->a, nk + 4);
        if (id == G_NAMESPACE) d.flags = TVF_NS;
        for (size_t i = 0; i < na; i++) {
            if (args[i].k != TV_DICT) argfail(e, id == G_NAMESPACE ? "namespace" : "dict", "positional argument must be a mapping");
            for (size_t j = 0; j < args[i].u.d->n; j++) tv_dict_set(e->a, d, args[i].u.d->e[j].k, args[i].u.d->e[j].v);
        }
        for (size_t i = 0; i < nk; i++) tv_dict_set(e->a, d, kwn[i], kwv[i]);
        return d;
    }
    case G_RAISE: {
        tval m = na > 0 ? tv_to_str(e->a, args[0]) : tv_strn("", 0);
        ta_fail(e->a, "raise_exception: %.*s", (int)(m.u.s.n > 400 ? 400 : m.u.s.n), m.u.s.p);
    }
    case G_STRFTIME: {
        if (na < 1) argfail(e, "strftime_now", "takes a format");
        tval f = need_str(e, args[0], "strftime_now");
        char fmt[256], out[512];
        if (f.u.s.n >= sizeof fmt) ta_fail(e->a, "strftime_now: format too long");
        memcpy(fmt, f.u.s.p, f.u.s.n);
        fmt[f.u.s.n] = 0;
        struct tm tm;
        gmtime_r(&e->now, &tm);
        size_t n = f.u.s.n ? strftime(out, sizeof out, fmt, &tm) : 0;
        return tv_strn(ta_strndup(e->a, out, n), n);
    }
    }
    ta_fail(e->a, "internal: unknown global %d", id);
}
