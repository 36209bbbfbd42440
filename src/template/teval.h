/* teval.h — the evaluator's state, shared by the evaluator (teval.c) and the built-ins (tbuiltins.c). */
#ifndef RP_TEMPLATE_TEVAL_H
#define RP_TEMPLATE_TEVAL_H

#include <time.h>

#include "template/tast.h"

typedef struct tscope {
    struct tscope *parent;
    tval vars;   /* dict */
} tscope;

typedef enum { F_GLOBAL = 1, F_METHOD, F_MACRO, F_CALLER } tfkind;
enum { G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };

struct tfunc {
    uint8_t kind, id;
    tval self, name;        /* F_METHOD: the object and the method's name */
    const tnode *node;      /* F_MACRO: the macro; F_CALLER: the call block */
    tscope *closure;        /* where it was defined */
    tval caller;            /* F_MACRO called from a call block: its `caller` */
};

struct tloop {
    size_t index0, length;
    tval items;      /* list */
    tval changed;    /* loop.changed(): the last value it saw (TV_UNDEF before the first call) */
    bool seen;
};

typedef struct tev {
    tarena *a;
    const tprogram *prog;
    tsb *out;
    tscope *scope;
    int depth, max_depth;
    int edepth;   /* expression evaluation depth (a long a+b+c+... chain is a deep tree): bounds the C stack */
    uint64_t iters, max_iters;
    size_t max_output;
    time_t now;   /* strftime_now's clock (UTC) */
} tev;

/* position for error messages */
void te_at(tev *e, const tnode *n, const char *construct);
_Noreturn void te_undefined_fail(tev *e, tval v);

tval te_getattr(tev *e, tval obj, tval name);   /* obj.name (jinja2's sandboxed getattr) */
tval te_getitem(tev *e, tval obj, tval key);    /* obj[key] */
tval te_iter_list(tev *e, tval v);              /* what a for loop walks (list / dict keys / chars); fails like Python */
tval te_call(tev *e, tval fn, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk);
void te_count_iters(tev *e, uint64_t n);        /* loop-iteration budget */
bool te_contains(tev *e, tval container, tval item);

/* built-ins (tbuiltins.c); `n` is the node, for messages */
tval tb_filter(tev *e, const tnode *n, tval name, tval v, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk);
bool tb_test(tev *e, const tnode *n, tval name, tval v, tval *args, size_t na);
tval tb_method(tev *e, tval self, tval name, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk);
bool tb_has_method(tval self, tval name);
tval tb_global(tev *e, int id, tval *args, size_t na, tval *kwn, tval *kwv, size_t nk);
tval tb_py_lower(tev *e, tval s);   /* str.lower() */
tval tb_percent_format(tev *e, tval fmt, tval args);   /* fmt % args: %s %r %d %i %%, as Python's */

#endif /* RP_TEMPLATE_TEVAL_H */
