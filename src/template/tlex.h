/* tlex.h — the template lexer: Jinja2's token stream with HF's settings (trim_blocks, lstrip_blocks),
 * whitespace control (-/+), comments, raw blocks, and newline normalization as jinja2 does it. */
#ifndef RP_TEMPLATE_TLEX_H
#define RP_TEMPLATE_TLEX_H

#include "template/tvalue.h"

typedef enum ttype {
    TK_EOF = 0, TK_TEXT, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP
} ttype;

/* operators (TK_OP's op) */
enum {
    OP_ADD = 1, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET, OP_RBRACKET,
    OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_ASSIGN,
    OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON
};

typedef struct ttok {
    uint8_t type, op;
    size_t off;            /* byte offset in the normalized source */
    const char *p;         /* TK_NAME: the name; TK_TEXT: the text */
    size_t n;
    tval v;                /* TK_STR / TK_INT / TK_FLOAT / TK_TEXT: the value */
} ttok;

typedef struct tlexed {
    const char *src;       /* normalized source (\r\n and \r as \n, one trailing newline dropped) */
    size_t n;
    ttok *t;
    size_t nt;
} tlexed;

/* Tokenizes src (arena-allocated result). Errors jump through the arena. */
void tlex(tarena *a, const char *src, size_t n, tlexed *out);
/* 1-based line and column (in code points) of a byte offset. */
void tlex_linecol(const char *src, size_t n, size_t off, int *line, int *col);

#endif /* RP_TEMPLATE_TLEX_H */
