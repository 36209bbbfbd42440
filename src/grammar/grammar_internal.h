/* grammar_internal.h — the compiled form of a GBNF grammar (llama.cpp's element encoding) shared by the parser
 * (grammar_parse.c), the matcher (grammar_match.c) and the JSON Schema converter (grammar_schema.c). */
#ifndef RP_GRAMMAR_INTERNAL_H
#define RP_GRAMMAR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "reprise.h"

typedef enum rp_gelem_type {
    RP_GE_END = 0,      /* end of a rule's last alternative */
    RP_GE_ALT,          /* start of another alternative */
    RP_GE_RULE_REF,     /* value: rule id */
    RP_GE_CHAR,         /* value: code point; starts a char class */
    RP_GE_CHAR_NOT,     /* a negated class; value: first code point */
    RP_GE_CHAR_RNG_UPPER, /* the previous CHAR / CHAR_ALT is the lower end of a range ending at value */
    RP_GE_CHAR_ALT,     /* another code point of the class */
    RP_GE_CHAR_ANY,     /* '.': any code point */
} rp_gelem_type;

typedef struct rp_gelem {
    uint32_t type;
    uint32_t value;
} rp_gelem;

/* All rules' elements in one array: rule r's alternatives start at elems[rule_start[r]] and end at an END. */
struct rp_grammar {
    rp_gelem *elems;
    int32_t n_elems;
    int32_t *rule_start;
    int32_t n_rules;
    int32_t root;
    uint32_t fp[4];   /* XXH3-128 of the elements, rule starts and root: equal grammars share cached masks */
};

/* Decodes one UTF-8 code point; returns its byte length (0 on an invalid or truncated sequence). */
int rp_grammar_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif
