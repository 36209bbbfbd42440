/* teval.c — the evaluator: jinja2's runtime semantics (scopes per loop iteration and macro, Undefined,
 * Python operators, loop variables, macros / call blocks, break / continue) with bounded depth, iterations
 * and output. */
#include "template/teval.h"

#include <math.h>
#include <string.h>

typedef enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE } tflow;

static tval eval(tev *e, const tnode *n);
static tflow exec_body(tev *e, const tnodes *body);

void te_at(tev *e, const tnode *n, const char *construct) {
    if (!n) return;
    tlex_linecol(e->prog->lx.src, e->prog->lx.n, n->off, &e->a->line, &e->a->col);
    if (construct) e->a->construct = construct;
}

void te_undefined_fail(tev *e, tval v) {
    if (v.u.s.p) ta_fail(e->a, "UndefinedError: '%.*s' is undefined", (int)(v.u.s.n > 60 ? 60 : v.u.s.n), v.u.s.p);
    ta_fail(e->a, "UndefinedError: value is undefined");
}

void te_count_iters(tev *e, uint64_t n) {
    if (n > e->max_iters || e->iters > e->max_iters - n)
        ta_fail(e->a, "loop iteration limit of %llu reached", (unsigned long long)e->max_iters);
    e->iters += n;
}

/* ---- scopes ---- */

static tscope *push_scope(tev *e, tscope *parent) {
    tscope *s = ta_alloc(e->a, sizeof *s);
    s->parent = parent;
    s->vars = tv_dict_new(e->a, 4);
    return s;
}

static tval lookup(tev *e, tval name) {
    for (tscope *s = e->scope; s; s = s->parent) {
        tval *v = tv_dict_gets(s->vars, name.u.s.p, name.u.s.n);
        if (v) return *v;
    }
    return tv_undef_named(name.u.s.p, name.u.s.n);
}

static void assign(tev *e, tval name, tval v) { tv_dict_set(e->a, e->scope->vars, name, v); }

/* ---- attribute / item access ---- */

static tval loop_attr(tev *e, tval obj, tval name) {
    tloop *l = obj.u.lp;
    size_t i = l->index0, n = l->length;
    if (tv_is_str(name, "index")) return tv_int((int64_t)i + 1);
    if (tv_is_str(name, "index0")) return tv_int((int64_t)i);
    if (tv_is_str(name, "revindex")) return tv_int((int64_t)(n - i));
    if (tv_is_str(name, "revindex0")) return tv_int((int64_t)(n - i - 1));
    if (tv_is_str(name, "first")) return tv_bool(i == 0);
    if (tv_is_str(name, "last")) return tv_bool(i + 1 == n);
    if (tv_is_str(name, "length")) return tv_int((int64_t)n);
    if (tv_is_str(name, "depth")) return tv_int(1);
    if (tv_is_str(name, "depth0")) return tv_int(0);
    if (tv_is_str(name, "previtem")) return i > 0 ? l->items.u.l->v[i - 1] : tv_undef_named("previtem", 8);
    if (tv_is_str(name, "nextitem")) return i + 1 < n ? l->items.u.l->v[i + 1] : tv_undef_named("nextitem", 8);
    if (tv_is_str(name, "cycle") || tv_is_str(name, "changed")) {
        tval f = {.k = TV_FUNC};
        f.u.fn = ta_alloc(e->a, sizeof *f.u.fn);
        f.u.fn->kind = F_METHOD;
        f.u.fn->self = obj;
        f.u.fn->name = name;
        return f;
    }
    return tv_undef_named(name.u.s.p, name.u.s.n);
}

static tval method_val(tev *e, tval obj, tval name) {
    tval f = {.k = TV_FUNC};
    f.u.fn = ta_alloc(e->a, sizeof *f.u.fn);
    f.u.fn->kind = F_METHOD;
    f.u.fn->self = obj;
    f.u.fn->name = name;
    return f;
}

static const char *const k_unsafe[] = {"append", "extend", "insert", "pop", "remove", "clear", "update",
                                       "setdefault", "popitem", "sort", "reverse", "add", "discard", NULL};

tval te_getattr(tev *e, tval obj, tval name) {
    switch ((tkind)obj.k) {
    case TV_UNDEF: te_undefined_fail(e, obj);
    case TV_DICT: {
        if (!(obj.flags & TVF_NS) && tb_has_method(obj, name)) return method_val(e, obj, name);
        tval *v = tv_dict_get(obj, name);
        if (v) return *v;
        if (!(obj.flags & TVF_NS))
            for (int k = 0; k_unsafe[k]; k++)
                if (tv_is_str(name, k_unsafe[k]))
                    ta_fail(e->a, "SecurityError: access to attribute '%s' of 'dict' object is unsafe", k_unsafe[k]);
        return tv_undef_named(name.u.s.p, name.u.s.n);
    }
    case TV_LOOP: return loop_attr(e, obj, name);
    case TV_STR: case TV_LIST:
        if (tb_has_method(obj, name)) return method_val(e, obj, name);
        for (int k = 0; obj.k == TV_LIST && k_unsafe[k]; k++)
            if (tv_is_str(name, k_unsafe[k]))
                ta_fail(e->a, "SecurityError: access to attribute '%s' of '%s' object is unsafe", k_unsafe[k],
                        tv_type_name(obj));
        return tv_undef_named(name.u.s.p, name.u.s.n);
    default: return tv_undef_named(name.u.s.p, name.u.s.n);
    }
}

/* Python index normalization: negative counts from the end; false when out of range */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

/* slice bounds as Python's slice.indices(n) */
static void slice_indices(tev *e, tval *sv, size_t n, int64_t *start, int64_t *stop, int64_t *step) {
    int64_t len = (int64_t)n;
    *step = 1;
    if (sv[2].k != TV_NONE) {
        if (sv[2].k != TV_INT && sv[2].k != TV_BOOL) ta_fail(e->a, "TypeError: slice indices must be integers or None");
        *step = sv[2].k == TV_INT ? sv[2].u.i : sv[2].u.b;
        if (*step == 0) ta_fail(e->a, "ValueError: slice step cannot be zero");
    }
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? len - 1 : len;
    for (int k = 0; k < 2; k++) {
        int64_t v;
        if (sv[k].k == TV_NONE) {
            v = k == 0 ? (*step < 0 ? hi : lo) : (*step < 0 ? lo : hi);
        } else {
            if (sv[k].k != TV_INT && sv[k].k != TV_BOOL) ta_fail(e->a, "TypeError: slice indices must be integers or None");
            v = sv[k].k == TV_INT ? sv[k].u.i : sv[k].u.b;
            if (v < 0) {
                v += len;
                if (v < lo) v = lo;
            } else if (v > hi) {
                v = hi;
            }
        }
        if (k == 0) *start = v;
        else *stop = v;
    }
}

static tval do_slice(tev *e, tval obj, tval *sv) {
    if (obj.k == TV_UNDEF) te_undefined_fail(e, obj);
    if (obj.k == TV_LIST && !(obj.flags & TVF_NOINDEX)) {
        int64_t a, b, st;
        slice_indices(e, sv, obj.u.l->n, &a, &b, &st);
        tval r = tv_list_new(e->a, 0);
        r.flags = obj.flags & TVF_TUPLE;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) tv_list_push(e->a, r, obj.u.l->v[i]);
        return r;
    }
    if (obj.k == TV_STR) {
        const char *p = obj.u.s.p;
        size_t n = obj.u.s.n;
        bool ascii = tu_all_ascii(p, n);
        size_t len = ascii ? n : tu_len(p, n);
        int64_t a, b, st;
        slice_indices(e, sv, len, &a, &b, &st);
        if (st == 1) {
            if (b <= a) return tv_strn("", 0);
            size_t o1 = ascii ? (size_t)a : tu_offset(p, n, (size_t)a), o2 = ascii ? (size_t)b : tu_offset(p, n, (size_t)b);
            return tv_strn(p + o1, o2 - o1);
        }
        size_t *offs = ta_alloc(e->a, (len + 1) * sizeof *offs);
        for (size_t i = 0, o = 0; i <= len; i++) {
            offs[i] = o;
            if (i < len) o = ascii ? o + 1 : o + tu_offset(p + o, n - o, 1);
        }
        tsb b2;
        tsb_init(&b2, e->a, e->a->cap);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) tsb_putn(&b2, p + offs[i], offs[i + 1] - offs[i]);
        return tsb_val(&b2);
    }
    /* jinja2 slices directly (not through its getitem), so the TypeError stands */
    ta_fail(e->a, "TypeError: '%s' object is not subscriptable", tv_type_name(obj));
}

tval te_getitem(tev *e, tval obj, tval key) {
    switch ((tkind)obj.k) {
    case TV_UNDEF: te_undefined_fail(e, obj);
    case TV_DICT:
        if (!(obj.flags & TVF_NS)) {
            tval *v = tv_dict_get(obj, key);
            if (v) return *v;
        }
        break;
    case TV_LIST:
        if (key.k == TV_INT || key.k == TV_BOOL) {
            if (obj.flags & TVF_NOINDEX) return tv_undef_named(NULL, 0);   /* jinja2: a TypeError reads as undefined */
            size_t i;
            if (norm_index(key.k == TV_INT ? key.u.i : key.u.b, obj.u.l->n, &i)) return obj.u.l->v[i];
            return tv_undef_named(NULL, 0);
        }
        break;
    case TV_STR:
        if (key.k == TV_INT || key.k == TV_BOOL) {
            const char *p = obj.u.s.p;
            size_t n = obj.u.s.n, len = tu_all_ascii(p, n) ? n : tu_len(p, n), i;
            if (!norm_index(key.k == TV_INT ? key.u.i : key.u.b, len, &i)) return tv_undef_named(NULL, 0);
            size_t o = len == n ? i : tu_offset(p, n, i);
            return tv_strn(p + o, (len == n ? 1 : tu_offset(p + o, n - o, 1)));
        }
        break;
    default: break;
    }
    if (key.k == TV_STR) return te_getattr(e, obj, key);
    return tv_undef_named(NULL, 0);
}

/* ---- iteration ---- */

tval te_iter_list(tev *e, tval v) {
    switch ((tkind)v.k) {
    case TV_UNDEF: return tv_list_new(e->a, 0);
    case TV_LIST: return v;
    case TV_DICT: {
        if (v.flags & TVF_NS) break;
        tval l = tv_list_new(e->a, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) tv_list_push(e->a, l, v.u.d->e[i].k);
        return l;
    }
    case TV_STR: {
        tval l = tv_list_new(e->a, v.u.s.n);
        for (size_t o = 0; o < v.u.s.n;) {
            size_t k = tu_offset(v.u.s.p + o, v.u.s.n - o, 1);
            tv_list_push(e->a, l, tv_strn(v.u.s.p + o, k));
            o += k;
        }
        return l;
    }
    default: break;
    }
    ta_fail(e->a, "TypeError: '%s' object is not iterable", tv_type_name(v));
}

bool te_contains(tev *e, tval c, tval item) {
    if (c.k == TV_STR) {
        if (item.k == TV_UNDEF) te_undefined_fail(e, item);
        if (item.k != TV_STR)
            ta_fail(e->a, "TypeError: 'in <string>' requires string as left operand, not %s", tv_type_name(item));
        if (item.u.s.n == 0) return true;
        for (size_t i = 0; i + item.u.s.n <= c.u.s.n; i++)
            if (memcmp(c.u.s.p + i, item.u.s.p, item.u.s.n) == 0) return true;
        return false;
    }
    if (c.k == TV_DICT && !(c.flags & TVF_NS)) return tv_dict_get(c, item) != NULL;
    tval l = te_iter_list(e, c);
    for (size_t i = 0; i < l.u.l->n; i++)
        if (tv_equal(l.u.l->v[i], item)) return true;
    return false;
}

/* ---- operators ---- */

static bool is_intlike(tval v) { return v.k == TV_INT || v.k == TV_BOOL; }
static int64_t as_int(tval v) { return v.k == TV_INT ? v.u.i : v.u.b; }
static bool is_numv(tval v) { return is_intlike(v) || v.k == TV_FLOAT; }
static double as_f(tval v) { return v.k == TV_FLOAT ? v.u.f : (double)as_int(v); }

static const char *op_sym(uint8_t op) {
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "**";
    default: return "?";
    }
}

static tval repeat(tev *e, tval s, int64_t k) {
    if (s.k == TV_STR) {
        tsb b;
        tsb_init(&b, e->a, e->max_output);
        for (int64_t i = 0; i < k; i++) tsb_putn(&b, s.u.s.p, s.u.s.n);
        return tsb_val(&b);
    }
    tval r = tv_list_new(e->a, 0);
    r.flags = s.flags & TVF_TUPLE;
    if (k > 0) te_count_iters(e, (uint64_t)k * s.u.l->n);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < s.u.l->n; j++) tv_list_push(e->a, r, s.u.l->v[j]);
    return r;
}

static tval binop(tev *e, uint8_t op, tval x, tval y) {
    if (x.k == TV_UNDEF) te_undefined_fail(e, x);
    if (y.k == TV_UNDEF) te_undefined_fail(e, y);
    if (is_numv(x) && is_numv(y)) {
        if (is_intlike(x) && is_intlike(y) && op != OP_DIV) {
            int64_t a = as_int(x), b = as_int(y), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(a, b, &r)) goto ovf; return tv_int(r);
            case OP_SUB: if (__builtin_sub_overflow(a, b, &r)) goto ovf; return tv_int(r);
            case OP_MUL: if (__builtin_mul_overflow(a, b, &r)) goto ovf; return tv_int(r);
            case OP_FLOORDIV: case OP_MOD: {
                if (b == 0) ta_fail(e->a, "ZeroDivisionError: integer division or modulo by zero");
                if (a == INT64_MIN && b == -1) goto ovf;
                int64_t q = a / b, m = a % b;
                if (m != 0 && ((m < 0) != (b < 0))) { q--; m += b; }
                return tv_int(op == OP_FLOORDIV ? q : m);
            }
            case OP_POW:
                if (b < 0) return tv_float(pow((double)a, (double)b));
                r = 1;
                for (int64_t i = 0; i < b; i++)
                    if (__builtin_mul_overflow(r, a, &r)) goto ovf;
                return tv_int(r);
            }
        }
        double a = as_f(x), b = as_f(y);
        switch (op) {
        case OP_ADD: return tv_float(a + b);
        case OP_SUB: return tv_float(a - b);
        case OP_MUL: return tv_float(a * b);
        case OP_DIV:
            if (b == 0) ta_fail(e->a, "ZeroDivisionError: division by zero");
            return tv_float(a / b);
        case OP_FLOORDIV:
            if (b == 0) ta_fail(e->a, "ZeroDivisionError: float floor division by zero");
            return tv_float(floor(a / b));
        case OP_MOD: {
            if (b == 0) ta_fail(e->a, "ZeroDivisionError: float modulo");
            double m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0))) m += b;
            return tv_float(m);
        }
        case OP_POW: return tv_float(pow(a, b));
        }
    }
    if (op == OP_ADD && x.k == TV_STR && y.k == TV_STR) {
        const bool markup = (x.flags | y.flags) & TVF_MARKUP;   /* Markup + str escapes the str */
        if (markup && !(x.flags & TVF_MARKUP)) x = tv_html_escape(e->a, x);
        if (markup && !(y.flags & TVF_MARKUP)) y = tv_html_escape(e->a, y);
        tsb b;
        tsb_init(&b, e->a, e->max_output);
        tsb_putn(&b, x.u.s.p, x.u.s.n);
        tsb_putn(&b, y.u.s.p, y.u.s.n);
        tval r = tsb_val(&b);
        if (markup) r.flags = TVF_MARKUP;
        return r;
    }
    if (op == OP_ADD && x.k == TV_LIST && y.k == TV_LIST && x.flags == y.flags && !(x.flags & TVF_LAZY)) {
        tval r = tv_list_new(e->a, x.u.l->n + y.u.l->n);
        r.flags = x.flags & TVF_TUPLE;
        for (size_t i = 0; i < x.u.l->n; i++) tv_list_push(e->a, r, x.u.l->v[i]);
        for (size_t i = 0; i < y.u.l->n; i++) tv_list_push(e->a, r, y.u.l->v[i]);
        return r;
    }
    if (op == OP_MOD && x.k == TV_STR) return tb_percent_format(e, x, y);
    if (op == OP_MUL && (x.k == TV_STR || (x.k == TV_LIST && !(x.flags & TVF_LAZY))) && is_intlike(y)) return repeat(e, x, as_int(y));
    if (op == OP_MUL && (y.k == TV_STR || (y.k == TV_LIST && !(y.flags & TVF_LAZY))) && is_intlike(x)) return repeat(e, y, as_int(x));
    ta_fail(e->a, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), tv_type_name(x),
            tv_type_name(y));
ovf:
    ta_fail(e->a, "OverflowError: integer result does not fit in 64 bits");
}

static tval compare(tev *e, uint8_t op, tval x, tval y) {
    switch (op) {
    case OP_EQ: return tv_bool(tv_equal(x, y));
    case OP_NE: return tv_bool(!tv_equal(x, y));
    case CMP_IN: return tv_bool(te_contains(e, y, x));
    case CMP_NOTIN: return tv_bool(!te_contains(e, y, x));
    default: break;
    }
    if (x.k == TV_UNDEF) te_undefined_fail(e, x);
    if (y.k == TV_UNDEF) te_undefined_fail(e, y);
    int c = tv_compare(e->a, x, y);
    switch (op) {
    case OP_LT: return tv_bool(c < 0);
    case OP_LE: return tv_bool(c <= 0);
    case OP_GT: return tv_bool(c > 0);
    default: return tv_bool(c >= 0);
    }
}

/* ---- calls ---- */

static void eval_args(tev *e, const tnode *n, tval **args, tval **kwv) {
    *args = n->args.n ? ta_alloc(e->a, n->args.n * sizeof **args) : NULL;
    *kwv = n->kwv.n ? ta_alloc(e->a, n->kwv.n * sizeof **kwv) : NULL;
    for (size_t i = 0; i < n->args.n; i++) (*args)[i] = eval(e, n->args.v[i]);
    for (size_t i = 0; i < n->kwv.n; i++) (*kwv)[i] = eval(e, n->kwv.v[i]);
}

/* Binds a macro's (or caller's) parameters in a new scope over its closure, runs the body, returns its text. */
static tval run_macro(tev *e, const tnode *def, const tnodes *body, tscope *closure, tval caller, tval *args, size_t na,
                      tval *kwn, tval *kwv, size_t nk) {
    if (++e->depth > e->max_depth) ta_fail(e->a, "recursion limit of %d nested calls reached", e->max_depth);
    if (na > def->nn) ta_fail(e->a, "TypeError: macro takes at most %zu arguments (%zu given)", def->nn, na);
    tscope *saved = e->scope;
    tscope *s = push_scope(e, closure);
    e->scope = s;
    for (size_t k = 0; k < nk; k++) {
        size_t j;
        for (j = 0; j < def->nn; j++)
            if (tv_equal(def->names[j], kwn[k])) break;
        if (j == def->nn)
            ta_fail(e->a, "TypeError: macro got an unexpected keyword argument '%.*s'", (int)kwn[k].u.s.n, kwn[k].u.s.p);
        if (j < na) ta_fail(e->a, "TypeError: macro got multiple values for argument '%.*s'", (int)kwn[k].u.s.n, kwn[k].u.s.p);
    }
    for (size_t j = 0; j < def->nn; j++) {
        tval v = tv_undef_named(def->names[j].u.s.p, def->names[j].u.s.n);
        bool set = false;
        if (j < na) { v = args[j]; set = true; }
        for (size_t k = 0; !set && k < nk; k++)
            if (tv_equal(def->names[j], kwn[k])) { v = kwv[k]; set = true; }
        if (!set && def->kwv.v[j]) v = eval(e, def->kwv.v[j]);
        assign(e, def->names[j], v);
    }
    if (caller.k == TV_FUNC) assign(e, tv_str("caller"), caller);
    tsb *saved_out = e->out;
    tsb buf;
    tsb_init(&buf, e->a, e->max_output);
    e->out = &buf;
    exec_body(e, body);
    e->out = saved_out;
    e->scope = saved;
    e->depth--;
    return tsb_val(&buf);
}

tval te_call(tev *e, tval fn, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk) {
    if (fn.k == TV_UNDEF) te_undefined_fail(e, fn);
    if (fn.k != TV_FUNC) ta_fail(e->a, "TypeError: '%s' object is not callable", tv_type_name(fn));
    tfunc *f = fn.u.fn;
    switch ((tfkind)f->kind) {
    case F_GLOBAL: return tb_global(e, f->id, args, na, kwn, kwv, nk);
    case F_METHOD:
        if (f->self.k == TV_LOOP && tv_is_str(f->name, "changed")) {   /* loop.changed(*values) */
            tloop *lp = f->self.u.lp;
            tval now = tv_list_new(e->a, na);
            for (size_t i = 0; i < na; i++) tv_list_push(e->a, now, args[i]);
            bool differs = !lp->seen || !tv_equal(lp->changed, now);
            lp->changed = now;
            lp->seen = true;
            return tv_bool(differs);
        }
        if (f->self.k == TV_LOOP) {   /* loop.cycle(a, b, ...) */
            if (na == 0) ta_fail(e->a, "TypeError: no items for cycling given");
            return args[f->self.u.lp->index0 % na];
        }
        return tb_method(e, f->self, f->name, args, na, kwn, kwv, nk);
    case F_MACRO: return run_macro(e, f->node, &f->node->args, f->closure, f->caller, args, na, kwn, kwv, nk);
    case F_CALLER: return run_macro(e, f->node, &f->node->args, f->closure, tv_undef(), args, na, kwn, kwv, nk);
    }
    ta_fail(e->a, "TypeError: not callable");
}

/* ---- expressions ---- */

static tval eval_filter_chain(tev *e, const tnode *f, tval body_val) {
    tval v = !f->a ? body_val : f->a->kind == N_FILTER ? eval_filter_chain(e, f->a, body_val) : eval(e, f->a);
    tval *args, *kwv;
    eval_args(e, f, &args, &kwv);
    te_at(e, f, "filter");
    return tb_filter(e, f, f->lit, v, args, f->args.n, f->names, kwv, f->kwv.n);
}

#define MAX_EVAL_DEPTH 2000

static tval eval_node(tev *e, const tnode *n);

static tval eval(tev *e, const tnode *n) {
    if (++e->edepth > MAX_EVAL_DEPTH) {
        te_at(e, n, NULL);
        ta_fail(e->a, "expression nested deeper than %d", MAX_EVAL_DEPTH);
    }
    tval v = eval_node(e, n);
    e->edepth--;
    return v;
}

static tval eval_node(tev *e, const tnode *n) {
    switch ((tnkind)n->kind) {
    case N_LIT: return n->lit;
    case N_NAME: return lookup(e, n->lit);
    case N_LIST: case N_TUPLE: {
        tval l = tv_list_new(e->a, n->args.n);
        if (n->kind == N_TUPLE) l.flags = TVF_TUPLE;
        for (size_t i = 0; i < n->args.n; i++) tv_list_push(e->a, l, eval(e, n->args.v[i]));
        return l;
    }
    case N_DICT: {
        tval d = tv_dict_new(e->a, n->args.n);
        for (size_t i = 0; i < n->args.n; i++) {
            tval k = eval(e, n->args.v[i]);
            if (k.k == TV_LIST && !(k.flags & TVF_TUPLE)) {
                te_at(e, n->args.v[i], "dict literal");
                ta_fail(e->a, "TypeError: unhashable type: 'list'");
            }
            tv_dict_set(e->a, d, k, eval(e, n->kwv.v[i]));
        }
        return d;
    }
    case N_ATTR: {
        tval o = eval(e, n->a);
        te_at(e, n, "attribute");
        return te_getattr(e, o, n->lit);
    }
    case N_ITEM: {
        tval o = eval(e, n->a);
        if (n->b->kind == N_SLICE) {
            tval sv[3];
            for (int k = 0; k < 3; k++) sv[k] = n->b->args.v[k] ? eval(e, n->b->args.v[k]) : tv_none();
            te_at(e, n, "slice");
            return do_slice(e, o, sv);
        }
        tval k = eval(e, n->b);
        te_at(e, n, "subscript");
        return te_getitem(e, o, k);
    }
    case N_SLICE: te_at(e, n, "slice"); ta_fail(e->a, "a slice is only allowed inside []");
    case N_CALL: {
        tval fn = eval(e, n->a);
        tval *args, *kwv;
        eval_args(e, n, &args, &kwv);
        te_at(e, n, "call");
        return te_call(e, fn, args, n->args.n, n->names, kwv, n->kwv.n);
    }
    case N_FILTER: return eval_filter_chain(e, n, tv_undef());
    case N_TEST: {
        tval v = eval(e, n->a);
        tval *args, *kwv;
        eval_args(e, n, &args, &kwv);
        te_at(e, n, "test");
        bool r = tb_test(e, n, n->lit, v, args, n->args.n);
        return tv_bool(n->op ? !r : r);
    }
    case N_NEG: case N_POS: {
        tval v = eval(e, n->a);
        te_at(e, n, "unary operator");
        if (v.k == TV_UNDEF) te_undefined_fail(e, v);
        if (n->kind == N_POS && is_numv(v)) return is_intlike(v) ? tv_int(as_int(v)) : v;
        if (is_intlike(v)) {
            if (as_int(v) == INT64_MIN) ta_fail(e->a, "OverflowError: integer result does not fit in 64 bits");
            return tv_int(-as_int(v));
        }
        if (v.k == TV_FLOAT) return tv_float(-v.u.f);
        ta_fail(e->a, "TypeError: bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', tv_type_name(v));
    }
    case N_NOT: return tv_bool(!tv_truthy(eval(e, n->a)));
    case N_AND: {
        tval l = eval(e, n->a);
        return tv_truthy(l) ? eval(e, n->b) : l;
    }
    case N_OR: {
        tval l = eval(e, n->a);
        return tv_truthy(l) ? l : eval(e, n->b);
    }
    case N_BIN: {
        tval l = eval(e, n->a), r = eval(e, n->b);
        te_at(e, n, "operator");
        return binop(e, n->op, l, r);
    }
    case N_CMP: {
        tval l = eval(e, n->a), r = eval(e, n->b);
        te_at(e, n, "comparison");
        return compare(e, n->op, l, r);
    }
    case N_COND:
        if (tv_truthy(eval(e, n->b))) return eval(e, n->a);
        return n->c ? eval(e, n->c) : tv_undef();
    case N_CONCAT: {
        tsb b;
        tsb_init(&b, e->a, e->max_output);
        for (size_t i = 0; i < n->args.n; i++) tv_put_str(&b, eval(e, n->args.v[i]));
        return tsb_val(&b);
    }
    default: break;
    }
    te_at(e, n, NULL);
    ta_fail(e->a, "internal: node %d is not an expression", n->kind);
}

/* ---- statements ---- */

static void bind_targets(tev *e, const tnode *n, tval item) {
    if (n->nn == 1) { assign(e, n->names[0], item); return; }
    if (item.k == TV_UNDEF) te_undefined_fail(e, item);
    tval l = te_iter_list(e, item);
    if (l.u.l->n != n->nn)
        ta_fail(e->a, "ValueError: %s values to unpack (expected %zu, got %zu)", l.u.l->n < n->nn ? "not enough" : "too many",
                n->nn, l.u.l->n);
    for (size_t i = 0; i < n->nn; i++) assign(e, n->names[i], l.u.l->v[i]);
}

static void exec_for(tev *e, const tnode *n) {
    tval src = eval(e, n->a);
    te_at(e, n, "for");
    tval items = te_iter_list(e, src);
    tscope *saved = e->scope;
    if (n->b) {   /* for x in xs if cond: the loop sees only the items that pass */
        tval kept = tv_list_new(e->a, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            te_count_iters(e, 1);
            e->scope = push_scope(e, saved);
            bind_targets(e, n, items.u.l->v[i]);
            if (tv_truthy(eval(e, n->b))) tv_list_push(e->a, kept, items.u.l->v[i]);
            e->scope = saved;
        }
        items = kept;
    }
    tloop *lp = ta_alloc(e->a, sizeof *lp);
    lp->items = items;
    lp->length = items.u.l->n;
    tval loopv = {.k = TV_LOOP};
    loopv.u.lp = lp;
    if (++e->depth > e->max_depth) ta_fail(e->a, "nesting limit of %d reached", e->max_depth);
    for (size_t i = 0; i < lp->length; i++) {
        te_count_iters(e, 1);
        lp->index0 = i;
        e->scope = push_scope(e, saved);
        assign(e, tv_strn("loop", 4), loopv);
        te_at(e, n, "for");
        bind_targets(e, n, items.u.l->v[i]);
        tflow f = exec_body(e, &n->args);
        e->scope = saved;
        if (f == FLOW_BREAK) break;
    }
    e->depth--;
    if (lp->length == 0 && n->kwv.n) exec_body(e, &n->kwv);
}

static void exec_set(tev *e, const tnode *target, tval v) {
    if (target->kind == N_NAME) { assign(e, target->lit, v); return; }
    if (target->kind == N_ATTR) {
        tval ns = lookup(e, target->a->lit);
        te_at(e, target, "set");
        if (ns.k != TV_DICT || !(ns.flags & TVF_NS))
            ta_fail(e->a, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        tv_dict_set(e->a, ns, target->lit, v);
        return;
    }
    te_at(e, target, "set");
    if (v.k == TV_UNDEF) te_undefined_fail(e, v);
    tval l = te_iter_list(e, v);
    if (l.u.l->n != target->args.n)
        ta_fail(e->a, "ValueError: %s values to unpack (expected %zu, got %zu)",
                l.u.l->n < target->args.n ? "not enough" : "too many", target->args.n, l.u.l->n);
    for (size_t i = 0; i < target->args.n; i++) assign(e, target->args.v[i]->lit, l.u.l->v[i]);
}

static tval capture(tev *e, const tnodes *body) {
    tsb *saved = e->out;
    tsb buf;
    tsb_init(&buf, e->a, e->max_output);
    e->out = &buf;
    exec_body(e, body);
    e->out = saved;
    return tsb_val(&buf);
}

static tval make_func(tev *e, tfkind kind, const tnode *node) {
    tval f = {.k = TV_FUNC};
    f.u.fn = ta_alloc(e->a, sizeof *f.u.fn);
    f.u.fn->kind = (uint8_t)kind;
    f.u.fn->node = node;
    f.u.fn->closure = e->scope;
    return f;
}

static tflow exec_node(tev *e, const tnode *n) {
    switch ((tnkind)n->kind) {
    case N_TEXT: tsb_putn(e->out, n->lit.u.s.p, n->lit.u.s.n); return FLOW_NORMAL;
    case N_OUT: {
        tval v = eval(e, n->a);
        te_at(e, n, "output");
        tv_put_str(e->out, v);
        return FLOW_NORMAL;
    }
    case N_IF:
        if (tv_truthy(eval(e, n->a))) return exec_body(e, &n->args);
        return exec_body(e, &n->kwv);
    case N_FOR: exec_for(e, n); return FLOW_NORMAL;
    case N_SET: exec_set(e, n->a, eval(e, n->b)); return FLOW_NORMAL;
    case N_SETBLOCK: {
        tval v = capture(e, &n->args);
        if (n->c) v = eval_filter_chain(e, n->c, v);
        exec_set(e, n->a, v);
        return FLOW_NORMAL;
    }
    case N_MACRO: assign(e, n->lit, make_func(e, F_MACRO, n)); return FLOW_NORMAL;
    case N_CALLBLOCK: {
        const tnode *c = n->a;
        tval fn = eval(e, c->a);
        tval *args, *kwv;
        eval_args(e, c, &args, &kwv);
        te_at(e, n, "call block");
        if (fn.k != TV_FUNC || fn.u.fn->kind != F_MACRO) ta_fail(e->a, "TypeError: a call block needs a macro");
        tval callee = make_func(e, F_MACRO, fn.u.fn->node);
        callee.u.fn->closure = fn.u.fn->closure;
        callee.u.fn->caller = make_func(e, F_CALLER, n);
        tv_put_str(e->out, te_call(e, callee, args, c->args.n, c->names, kwv, c->kwv.n));
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        tval v = capture(e, &n->args);
        tv_put_str(e->out, eval_filter_chain(e, n->c, v));
        return FLOW_NORMAL;
    }
    case N_WITH: {
        tscope *saved = e->scope;
        tscope *s = push_scope(e, saved);
        for (size_t i = 0; i < n->nn; i++) {
            tval v = eval(e, n->kwv.v[i]);   /* values see the outer scope, as in jinja2 */
            tv_dict_set(e->a, s->vars, n->names[i], v);
        }
        e->scope = s;
        tflow f = exec_body(e, &n->args);
        e->scope = saved;
        return f;
    }
    case N_BODY: return exec_body(e, &n->args);
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: break;
    }
    te_at(e, n, NULL);
    ta_fail(e->a, "internal: node %d is not a statement", n->kind);
}

static tflow exec_body(tev *e, const tnodes *body) {
    for (size_t i = 0; i < body->n; i++) {
        e->a->construct = NULL;
        tflow f = exec_node(e, body->v[i]);
        if (f != FLOW_NORMAL) return f;
    }
    return FLOW_NORMAL;
}

/* entry for template.c */
void te_run(tev *e);
void te_run(tev *e) { exec_body(e, &e->prog->body); }
