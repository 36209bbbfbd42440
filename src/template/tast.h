/* tast.h — the template's syntax tree and the parser that builds it (jinja2's grammar and precedence). */
#ifndef RP_TEMPLATE_TAST_H
#define RP_TEMPLATE_TAST_H

#include "template/tlex.h"

typedef enum tnkind {
    /* expressions */
    N_LIT = 1, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BIN, N_CMP, N_COND, N_CONCAT,
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_WITH,
    N_BREAK, N_CONTINUE, N_BODY
} tnkind;

enum { CMP_IN = 100, CMP_NOTIN };   /* N_CMP ops beyond the OP_* comparisons */

typedef struct tnode tnode;
typedef struct tnodes { tnode **v; size_t n, cap; } tnodes;

/* One node; which fields mean what, by kind:
 *   N_LIT lit | N_NAME lit=name | N_LIST/N_TUPLE args | N_DICT args=keys kwv=values
 *   N_ATTR a.lit | N_ITEM a[b] | N_SLICE args=start,stop,step (NULL: omitted)
 *   N_CALL a(args, names=kwv) | N_FILTER a|lit(args, names=kwv) (a NULL: the block's body)
 *   N_TEST a is [not: op] lit(args) | N_NEG/N_POS/N_NOT a | N_AND/N_OR a b | N_BIN a op b
 *   N_CMP a op b | N_COND a if b else c | N_CONCAT args
 *   N_TEXT lit | N_OUT a | N_IF if a: args else kwv | N_FOR names in a if b: args else kwv
 *   N_SET a = b | N_SETBLOCK a = c(args) | N_MACRO lit(names = kwv defaults): args
 *   N_CALLBLOCK a with caller(names = kwv): args | N_FILTERBLOCK c(args) | N_WITH names = kwv: args
 *   N_BODY args (generation blocks) */
struct tnode {
    uint8_t kind, op;
    size_t off;
    tnode *a, *b, *c;
    tnodes args, kwv;
    tval *names;
    size_t nn;
    tval lit;
};

typedef struct tprogram {
    tlexed lx;
    tnodes body;
} tprogram;

/* Parses the whole template; errors ("line L column C: syntax error: ...") jump through the arena. */
void tparse(tarena *a, const char *src, size_t n, tprogram *out);

#endif /* RP_TEMPLATE_TAST_H */
