/* tparse.c — recursive-descent parser for the Jinja2 subset: jinja2's parser.py, function by function
 * (the same precedence, tuple rules, subscripts and test-argument rules), with a nesting bound. */
#include "template/tast.h"

#include <stdio.h>
#include <string.h>

#define MAX_NEST 100

typedef struct ps {
    tarena *a;
    const tlexed *lx;
    size_t i;
    int nest;
    int loops;   /* enclosing for-loops (break / continue need one) */
} ps;

static const ttok *cur(ps *p) { return &p->lx->t[p->i]; }
static const ttok *peek(ps *p, size_t k) {
    size_t j = p->i + k;
    return &p->lx->t[j < p->lx->nt ? j : p->lx->nt - 1];
}
static void adv(ps *p) {
    if (p->i + 1 < p->lx->nt) p->i++;
}

static const char *tok_desc(const ttok *t, char *buf, size_t cap) {
    switch ((ttype)t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template data";
    case TK_VBEGIN: return "'{{'";
    case TK_VEND: return "'}}'";
    case TK_BBEGIN: return "'{%'";
    case TK_BEND: return "'%}'";
    case TK_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    case TK_STR: return "string";
    case TK_INT: case TK_FLOAT: return "number";
    case TK_OP: return "operator";
    }
    return "token";
}

static _Noreturn void pfail_at(ps *p, size_t off, const char *fmt, const char *arg) {
    tlex_linecol(p->lx->src, p->lx->n, off, &p->a->line, &p->a->col);
    p->a->construct = NULL;
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    ta_fail(p->a, "syntax error: %s", msg);
}

static _Noreturn void pfail(ps *p, const char *what) {
    char buf[64];
    char msg[200];
    snprintf(msg, sizeof msg, "%s, got %s", what, tok_desc(cur(p), buf, sizeof buf));
    pfail_at(p, cur(p)->off, "%s", msg);
}

static bool is_op(ps *p, uint8_t op) { return cur(p)->type == TK_OP && cur(p)->op == op; }
static bool is_name(const ttok *t, const char *s) {
    size_t n = strlen(s);
    return t->type == TK_NAME && t->n == n && memcmp(t->p, s, n) == 0;
}
static bool skip_op(ps *p, uint8_t op) {
    if (!is_op(p, op)) return false;
    adv(p);
    return true;
}
static bool skip_name(ps *p, const char *s) {
    if (!is_name(cur(p), s)) return false;
    adv(p);
    return true;
}
static void expect_op(ps *p, uint8_t op, const char *what) {
    if (!skip_op(p, op)) pfail(p, what);
}

static tnode *mk(ps *p, tnkind k, size_t off) {
    tnode *n = ta_alloc(p->a, sizeof *n);
    n->kind = (uint8_t)k;
    n->off = off;
    return n;
}

static void push(ps *p, tnodes *v, tnode *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        tnode **nv = ta_alloc(p->a, cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static tval name_val(ps *p, const ttok *t) { return tv_strn(ta_strndup(p->a, t->p, t->n), t->n); }

static void add_name(ps *p, tnode *n, tval name) {
    tval *nv = ta_alloc(p->a, (n->nn + 1) * sizeof *nv);
    if (n->nn) memcpy(nv, n->names, n->nn * sizeof *nv);
    nv[n->nn++] = name;
    n->names = nv;
}

static void enter(ps *p) {
    if (++p->nest > MAX_NEST) pfail_at(p, cur(p)->off, "%s", "expression or blocks nested too deeply");
}

static tnode *parse_expression(ps *p, bool with_condexpr);
static tnode *parse_unary(ps *p, bool with_filter);
static tnode *parse_primary(ps *p);
static tnode *parse_postfix(ps *p, tnode *n);

/* ---- expressions ---- */

static bool tuple_end(ps *p, const char *extra) {
    const ttok *t = cur(p);
    if (t->type == TK_VEND || t->type == TK_BEND || t->type == TK_EOF) return true;
    if (t->type == TK_OP && t->op == OP_RPAREN) return true;
    return extra && is_name(t, extra);
}

static tnode *parse_tuple(ps *p, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    size_t off = cur(p)->off;
    tnode *t = mk(p, N_TUPLE, off);
    bool is_tuple = false;
    for (;;) {
        if (t->args.n) expect_op(p, OP_COMMA, "expected ','");
        if (tuple_end(p, extra_end)) break;
        push(p, &t->args, simplified ? parse_primary(p) : parse_expression(p, with_condexpr));
        if (is_op(p, OP_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (t->args.n) return t->args.v[0];
        if (!explicit_parens) pfail(p, "expected an expression");
    }
    return t;
}

static void parse_call_args(ps *p, tnode *n) {
    expect_op(p, OP_LPAREN, "expected '('");
    while (!is_op(p, OP_RPAREN)) {
        if (n->args.n || n->kwv.n) {
            expect_op(p, OP_COMMA, "expected ',' between arguments");
            if (is_op(p, OP_RPAREN)) break;
        }
        if (is_op(p, OP_MUL) || is_op(p, OP_POW)) pfail(p, "*args / **kwargs in calls are not supported");
        if (cur(p)->type == TK_NAME && peek(p, 1)->type == TK_OP && peek(p, 1)->op == OP_ASSIGN) {
            add_name(p, n, name_val(p, cur(p)));
            adv(p);
            adv(p);
            push(p, &n->kwv, parse_expression(p, true));
        } else {
            if (n->kwv.n) pfail(p, "positional argument after keyword argument");
            push(p, &n->args, parse_expression(p, true));
        }
    }
    adv(p);
}

static tval dotted_name(ps *p) {
    if (cur(p)->type != TK_NAME) pfail(p, "expected a name");
    tsb b;
    tsb_init(&b, p->a, 1 << 16);
    tsb_putn(&b, cur(p)->p, cur(p)->n);
    adv(p);
    while (is_op(p, OP_DOT) && peek(p, 1)->type == TK_NAME) {
        adv(p);
        tsb_putc(&b, '.');
        tsb_putn(&b, cur(p)->p, cur(p)->n);
        adv(p);
    }
    return tsb_val(&b);
}

static tnode *parse_filter(ps *p, tnode *operand) {
    size_t off = cur(p)->off;
    tnode *f = mk(p, N_FILTER, off);
    f->a = operand;
    f->lit = dotted_name(p);
    if (is_op(p, OP_LPAREN)) parse_call_args(p, f);
    return f;
}

static tnode *parse_call(ps *p, tnode *callee) {
    tnode *c = mk(p, N_CALL, callee->off);
    c->a = callee;
    parse_call_args(p, c);
    return c;
}

static tnode *parse_test(ps *p, tnode *operand) {
    size_t off = cur(p)->off;
    adv(p);   /* 'is' */
    tnode *t = mk(p, N_TEST, off);
    t->a = operand;
    t->op = skip_name(p, "not");
    t->lit = dotted_name(p);
    const ttok *c = cur(p);
    if (is_op(p, OP_LPAREN)) {
        parse_call_args(p, t);
    } else if ((c->type == TK_NAME || c->type == TK_STR || c->type == TK_INT || c->type == TK_FLOAT ||
                (c->type == TK_OP && (c->op == OP_LPAREN || c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) pfail(p, "cannot chain multiple tests with 'is'");
        tnode *arg = parse_postfix(p, parse_primary(p));
        push(p, &t->args, arg);
    }
    return t;
}

static tnode *parse_subscribed(ps *p) {
    size_t off = cur(p)->off;
    tnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(p, OP_COLON)) {
        adv(p);
    } else {
        tnode *e = parse_expression(p, true);
        if (!is_op(p, OP_COLON)) return e;
        adv(p);
        parts[0] = e;
    }
    if (!is_op(p, OP_COLON) && !is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA)) parts[1] = parse_expression(p, true);
    if (is_op(p, OP_COLON)) {
        adv(p);
        if (!is_op(p, OP_RBRACKET) && !is_op(p, OP_COMMA)) parts[2] = parse_expression(p, true);
    }
    tnode *s = mk(p, N_SLICE, off);
    for (int k = 0; k < 3; k++) {
        push(p, &s->args, parts[k]);
    }
    return s;
}

static tnode *parse_subscript(ps *p, tnode *obj) {
    size_t off = cur(p)->off;
    if (skip_op(p, OP_DOT)) {
        if (cur(p)->type == TK_NAME) {
            tnode *n = mk(p, N_ATTR, off);
            n->a = obj;
            n->lit = name_val(p, cur(p));
            adv(p);
            return n;
        }
        if (cur(p)->type == TK_INT) {
            tnode *n = mk(p, N_ITEM, off);
            n->a = obj;
            n->b = mk(p, N_LIT, cur(p)->off);
            n->b->lit = cur(p)->v;
            adv(p);
            return n;
        }
        pfail(p, "expected a name or number after '.'");
    }
    adv(p);   /* '[' */
    tnode *n = mk(p, N_ITEM, off);
    n->a = obj;
    tnode *tup = mk(p, N_TUPLE, cur(p)->off);
    while (!is_op(p, OP_RBRACKET)) {
        if (tup->args.n) expect_op(p, OP_COMMA, "expected ',' or ']'");
        push(p, &tup->args, parse_subscribed(p));
    }
    adv(p);
    if (tup->args.n == 0) pfail_at(p, off, "%s", "empty subscript");
    n->b = tup->args.n == 1 ? tup->args.v[0] : tup;
    return n;
}

static tnode *parse_postfix(ps *p, tnode *n) {
    for (;;) {
        if (is_op(p, OP_DOT) || is_op(p, OP_LBRACKET)) n = parse_subscript(p, n);
        else if (is_op(p, OP_LPAREN)) n = parse_call(p, n);
        else return n;
    }
}

static tnode *parse_filter_expr(ps *p, tnode *n) {
    for (;;) {
        if (is_op(p, OP_PIPE)) { adv(p); n = parse_filter(p, n); }
        else if (is_name(cur(p), "is")) n = parse_test(p, n);
        else if (is_op(p, OP_LPAREN)) n = parse_call(p, n);
        else return n;
    }
}

static tnode *parse_primary(ps *p) {
    const ttok *t = cur(p);
    tnode *n;
    switch ((ttype)t->type) {
    case TK_NAME:
        n = mk(p, N_LIT, t->off);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = tv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = tv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = tv_none();
        else { n->kind = N_NAME; n->lit = name_val(p, t); }
        adv(p);
        return n;
    case TK_STR: {
        n = mk(p, N_LIT, t->off);
        n->lit = t->v;
        adv(p);
        if (cur(p)->type == TK_STR) {   /* adjacent literals concatenate */
            tsb b;
            tsb_init(&b, p->a, p->a->cap);
            tsb_putn(&b, n->lit.u.s.p, n->lit.u.s.n);
            while (cur(p)->type == TK_STR) {
                tsb_putn(&b, cur(p)->v.u.s.p, cur(p)->v.u.s.n);
                adv(p);
            }
            n->lit = tsb_val(&b);
        }
        return n;
    }
    case TK_INT: case TK_FLOAT:
        n = mk(p, N_LIT, t->off);
        n->lit = t->v;
        adv(p);
        return n;
    case TK_OP:
        if (t->op == OP_LPAREN) {
            adv(p);
            enter(p);
            n = parse_tuple(p, false, true, NULL, true);
            p->nest--;
            expect_op(p, OP_RPAREN, "expected ')'");
            return n;
        }
        if (t->op == OP_LBRACKET) {
            adv(p);
            enter(p);
            n = mk(p, N_LIST, t->off);
            while (!is_op(p, OP_RBRACKET)) {
                if (n->args.n) expect_op(p, OP_COMMA, "expected ',' or ']' in a list");
                if (is_op(p, OP_RBRACKET)) break;
                push(p, &n->args, parse_expression(p, true));
            }
            adv(p);
            p->nest--;
            return n;
        }
        if (t->op == OP_LBRACE) {
            adv(p);
            enter(p);
            n = mk(p, N_DICT, t->off);
            while (!is_op(p, OP_RBRACE)) {
                if (n->args.n) expect_op(p, OP_COMMA, "expected ',' or '}' in a dict");
                if (is_op(p, OP_RBRACE)) break;
                push(p, &n->args, parse_expression(p, true));
                expect_op(p, OP_COLON, "expected ':' in a dict");
                push(p, &n->kwv, parse_expression(p, true));
            }
            adv(p);
            p->nest--;
            return n;
        }
        break;
    default: break;
    }
    pfail(p, "expected an expression");
}

static tnode *parse_unary(ps *p, bool with_filter) {
    enter(p);
    size_t off = cur(p)->off;
    tnode *n;
    if (skip_op(p, OP_SUB)) {
        n = mk(p, N_NEG, off);
        n->a = parse_unary(p, false);
    } else if (skip_op(p, OP_ADD)) {
        n = mk(p, N_POS, off);
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->nest--;
    return n;
}

static tnode *bin(ps *p, tnkind k, uint8_t op, size_t off, tnode *l, tnode *r) {
    tnode *n = mk(p, k, off);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static tnode *parse_pow(ps *p) {
    tnode *l = parse_unary(p, true);
    while (is_op(p, OP_POW)) {
        size_t off = cur(p)->off;
        adv(p);
        l = bin(p, N_BIN, OP_POW, off, l, parse_unary(p, true));
    }
    return l;
}

static tnode *parse_math2(ps *p) {
    tnode *l = parse_pow(p);
    while (is_op(p, OP_MUL) || is_op(p, OP_DIV) || is_op(p, OP_FLOORDIV) || is_op(p, OP_MOD)) {
        uint8_t op = cur(p)->op;
        size_t off = cur(p)->off;
        adv(p);
        l = bin(p, N_BIN, op, off, l, parse_pow(p));
    }
    return l;
}

static tnode *parse_concat(ps *p) {
    size_t off = cur(p)->off;
    tnode *first = parse_math2(p);
    if (!is_op(p, OP_TILDE)) return first;
    tnode *n = mk(p, N_CONCAT, off);
    push(p, &n->args, first);
    while (skip_op(p, OP_TILDE)) push(p, &n->args, parse_math2(p));
    return n;
}

static tnode *parse_math1(ps *p) {
    tnode *l = parse_concat(p);
    while (is_op(p, OP_ADD) || is_op(p, OP_SUB)) {
        uint8_t op = cur(p)->op;
        size_t off = cur(p)->off;
        adv(p);
        l = bin(p, N_BIN, op, off, l, parse_concat(p));
    }
    return l;
}

/* a < b < c is (a < b) and (b < c), as Python and jinja2 evaluate it */
static tnode *parse_compare(ps *p) {
    tnode *l = parse_math1(p), *result = NULL;
    for (;;) {
        size_t off = cur(p)->off;
        uint8_t op;
        const ttok *t = cur(p);
        if (t->type == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                                 t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            adv(p);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            adv(p);
        } else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
            op = CMP_NOTIN;
            adv(p);
            adv(p);
        } else {
            break;
        }
        tnode *r = parse_math1(p);
        tnode *c = bin(p, N_CMP, op, off, l, r);
        result = result ? bin(p, N_AND, 0, off, result, c) : c;
        l = r;
    }
    return result ? result : l;
}

static tnode *parse_not(ps *p) {
    if (is_name(cur(p), "not")) {
        size_t off = cur(p)->off;
        adv(p);
        enter(p);
        tnode *n = mk(p, N_NOT, off);
        n->a = parse_not(p);
        p->nest--;
        return n;
    }
    return parse_compare(p);
}

static tnode *parse_and(ps *p) {
    tnode *l = parse_not(p);
    while (is_name(cur(p), "and")) {
        size_t off = cur(p)->off;
        adv(p);
        l = bin(p, N_AND, 0, off, l, parse_not(p));
    }
    return l;
}

static tnode *parse_or(ps *p) {
    tnode *l = parse_and(p);
    while (is_name(cur(p), "or")) {
        size_t off = cur(p)->off;
        adv(p);
        l = bin(p, N_OR, 0, off, l, parse_and(p));
    }
    return l;
}

static tnode *parse_condexpr(ps *p) {
    tnode *e = parse_or(p);
    while (is_name(cur(p), "if")) {
        size_t off = cur(p)->off;
        adv(p);
        tnode *n = mk(p, N_COND, off);
        n->a = e;
        n->b = parse_or(p);
        if (skip_name(p, "else")) {
            enter(p);
            n->c = parse_condexpr(p);
            p->nest--;
        }
        e = n;
    }
    return e;
}

static tnode *parse_expression(ps *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

/* ---- statements ---- */

static void expect_bend(ps *p) {
    if (cur(p)->type != TK_BEND) pfail(p, "expected '%}'");
    adv(p);
}

/* Body up to one of the end tags (NULL-terminated); leaves the tag name current, returns its index. */
static int parse_body(ps *p, tnodes *body, const char *const *ends, size_t open_off, const char *open_tag);

static tnode *parse_assign_target(ps *p, bool with_tuple, bool with_namespace, const char *extra_end) {
    size_t off = cur(p)->off;
    if (with_namespace && cur(p)->type == TK_NAME && peek(p, 1)->type == TK_OP && peek(p, 1)->op == OP_DOT &&
        peek(p, 2)->type == TK_NAME) {
        tnode *ns = mk(p, N_NAME, off);
        ns->lit = name_val(p, cur(p));
        adv(p);
        adv(p);
        tnode *n = mk(p, N_ATTR, off);
        n->a = ns;
        n->lit = name_val(p, cur(p));
        adv(p);
        return n;
    }
    tnode *t = with_tuple ? parse_tuple(p, true, true, extra_end, false) : parse_primary(p);
    if (t->kind == N_NAME) return t;
    if (t->kind == N_TUPLE) {
        for (size_t i = 0; i < t->args.n; i++)
            if (t->args.v[i]->kind != N_NAME) pfail_at(p, t->args.v[i]->off, "%s", "can only assign to names");
        return t;
    }
    pfail_at(p, off, "%s", "can only assign to names (or namespace attributes)");
}

static void target_names(ps *p, tnode *dst, tnode *target) {
    if (target->kind == N_NAME) add_name(p, dst, target->lit);
    else
        for (size_t i = 0; i < target->args.n; i++) add_name(p, dst, target->args.v[i]->lit);
}

static void parse_signature(ps *p, tnode *n) {
    expect_op(p, OP_LPAREN, "expected '('");
    while (!is_op(p, OP_RPAREN)) {
        if (n->nn) expect_op(p, OP_COMMA, "expected ',' between parameters");
        if (cur(p)->type != TK_NAME) pfail(p, "expected a parameter name");
        add_name(p, n, name_val(p, cur(p)));
        adv(p);
        push(p, &n->kwv, skip_op(p, OP_ASSIGN) ? parse_expression(p, true) : NULL);
    }
    adv(p);
}

static tnode *parse_statement(ps *p) {
    const ttok *t = cur(p);
    size_t off = t->off;
    if (t->type != TK_NAME) pfail(p, "expected a tag name");
    enter(p);
    tnode *n = NULL;
    if (is_name(t, "for")) {
        static const char *const e1[] = {"endfor", "else", NULL}, *const e2[] = {"endfor", NULL};
        adv(p);
        n = mk(p, N_FOR, off);
        target_names(p, n, parse_assign_target(p, true, false, "in"));
        if (!skip_name(p, "in")) pfail(p, "expected 'in'");
        n->a = parse_tuple(p, false, false, "recursive", false);
        if (skip_name(p, "if")) n->b = parse_expression(p, true);
        if (skip_name(p, "recursive")) pfail_at(p, off, "%s", "recursive loops are not supported");
        expect_bend(p);
        p->loops++;
        int k = parse_body(p, &n->args, e1, off, "for");
        p->loops--;
        if (k == 1) {
            adv(p);
            expect_bend(p);
            parse_body(p, &n->kwv, e2, off, "for");
        }
        adv(p);
    } else if (is_name(t, "if")) {
        static const char *const e[] = {"endif", "elif", "else", NULL}, *const e2[] = {"endif", NULL};
        adv(p);
        n = mk(p, N_IF, off);
        n->a = parse_tuple(p, false, false, NULL, false);
        expect_bend(p);
        tnode *node = n;
        for (;;) {
            int k = parse_body(p, &node->args, e, off, "if");
            size_t eoff = cur(p)->off;
            adv(p);
            if (k == 1) {
                tnode *el = mk(p, N_IF, eoff);
                el->a = parse_tuple(p, false, false, NULL, false);
                expect_bend(p);
                push(p, &node->kwv, el);
                node = el;
                continue;
            }
            if (k == 2) {
                expect_bend(p);
                parse_body(p, &node->kwv, e2, off, "if");
                adv(p);
            }
            break;
        }
    } else if (is_name(t, "set")) {
        static const char *const e[] = {"endset", NULL};
        adv(p);
        tnode *target = parse_assign_target(p, true, true, NULL);
        if (skip_op(p, OP_ASSIGN)) {
            n = mk(p, N_SET, off);
            n->a = target;
            n->b = parse_tuple(p, false, true, NULL, false);
        } else {
            n = mk(p, N_SETBLOCK, off);
            n->a = target;
            if (target->kind != N_NAME && target->kind != N_ATTR) pfail_at(p, off, "%s", "a block set takes one name");
            while (skip_op(p, OP_PIPE)) n->c = parse_filter(p, n->c);
            expect_bend(p);
            parse_body(p, &n->args, e, off, "set");
            adv(p);
        }
    } else if (is_name(t, "macro")) {
        static const char *const e[] = {"endmacro", NULL};
        adv(p);
        if (cur(p)->type != TK_NAME) pfail(p, "expected the macro's name");
        n = mk(p, N_MACRO, off);
        n->lit = name_val(p, cur(p));
        adv(p);
        parse_signature(p, n);
        expect_bend(p);
        int saved = p->loops;
        p->loops = 0;
        parse_body(p, &n->args, e, off, "macro");
        p->loops = saved;
        adv(p);
    } else if (is_name(t, "call")) {
        static const char *const e[] = {"endcall", NULL};
        adv(p);
        n = mk(p, N_CALLBLOCK, off);
        if (is_op(p, OP_LPAREN)) parse_signature(p, n);
        n->a = parse_expression(p, true);
        if (n->a->kind != N_CALL) pfail_at(p, off, "%s", "expected a call after 'call'");
        expect_bend(p);
        parse_body(p, &n->args, e, off, "call");
        adv(p);
    } else if (is_name(t, "filter")) {
        static const char *const e[] = {"endfilter", NULL};
        adv(p);
        n = mk(p, N_FILTERBLOCK, off);
        n->c = parse_filter(p, NULL);
        while (skip_op(p, OP_PIPE)) n->c = parse_filter(p, n->c);
        expect_bend(p);
        parse_body(p, &n->args, e, off, "filter");
        adv(p);
    } else if (is_name(t, "with")) {
        static const char *const e[] = {"endwith", NULL};
        adv(p);
        n = mk(p, N_WITH, off);
        while (cur(p)->type != TK_BEND) {
            if (n->nn) expect_op(p, OP_COMMA, "expected ','");
            tnode *target = parse_assign_target(p, false, false, NULL);
            add_name(p, n, target->lit);
            expect_op(p, OP_ASSIGN, "expected '='");
            push(p, &n->kwv, parse_expression(p, true));
        }
        expect_bend(p);
        parse_body(p, &n->args, e, off, "with");
        adv(p);
    } else if (is_name(t, "generation")) {
        static const char *const e[] = {"endgeneration", NULL};
        adv(p);
        n = mk(p, N_BODY, off);
        expect_bend(p);
        parse_body(p, &n->args, e, off, "generation");
        adv(p);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (p->loops == 0) pfail_at(p, off, "'%s' outside a for loop", is_name(t, "break") ? "break" : "continue");
        n = mk(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, off);
        adv(p);
    } else {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->p);
        pfail_at(p, off, "unknown tag '%s'", name);
    }
    expect_bend(p);
    p->nest--;
    return n;
}

static int parse_body(ps *p, tnodes *body, const char *const *ends, size_t open_off, const char *open_tag) {
    for (;;) {
        const ttok *t = cur(p);
        switch ((ttype)t->type) {
        case TK_TEXT: {
            tnode *n = mk(p, N_TEXT, t->off);
            n->lit = t->v;
            push(p, body, n);
            adv(p);
            break;
        }
        case TK_VBEGIN: {
            adv(p);
            tnode *n = mk(p, N_OUT, t->off);
            n->a = parse_tuple(p, false, true, NULL, false);
            if (cur(p)->type != TK_VEND) pfail(p, "expected '}}'");
            adv(p);
            push(p, body, n);
            break;
        }
        case TK_BBEGIN: {
            adv(p);
            if (ends)
                for (int k = 0; ends[k]; k++)
                    if (is_name(cur(p), ends[k])) return k;
            push(p, body, parse_statement(p));
            break;
        }
        case TK_EOF:
            if (ends) pfail_at(p, open_off, "'%s' block is never closed", open_tag);
            return -1;
        default:
            pfail(p, "unexpected token");
        }
    }
}

void tparse(tarena *a, const char *src, size_t n, tprogram *out) {
    memset(out, 0, sizeof *out);
    tlex(a, src, n, &out->lx);
    ps p = {.a = a, .lx = &out->lx};
    parse_body(&p, &out->body, NULL, 0, NULL);
    /* the lexer stops on stray end tags only through parse_statement's "unknown tag" */
}
