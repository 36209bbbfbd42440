/* grammar_schema.c — JSON Schema -> GBNF (the subset of llama.cpp's json-schema-to-grammar / OpenAI strict mode):
 * type (and lists of types), properties / required / additionalProperties (properties keep their declared order;
 * optional ones may be left out), enum, const, items / minItems / maxItems, anyOf / oneOf, $ref to #/$defs/... and
 * #/definitions/..., string minLength / maxLength, pattern (a regex subset: literals, escapes, \d \w \s, classes,
 * ., groups, |, * + ? {m,n}, ^ $ anchors) and the formats date, time, date-time, uuid. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) { b->oom = true; return; }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof tmp) n = (int)sizeof tmp - 1;
    if (n > 0) sb_add(b, tmp, (size_t)n);
}

typedef struct conv {
    json_t *root;
    sbuf rules;          /* the rules emitted so far */
    json_t *refs_done;   /* ref name -> true */
    int n_rules;
    rp_status st;
} conv;

static const char *PRIMITIVES =
    "space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "boolean ::= (\"true\" | \"false\") space\n"
    "null ::= \"null\" space\n"
    "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
    "decimal-part ::= [0-9]{1,16}\n"
    "integer ::= (\"-\"? integral-part) space\n"
    "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\" space\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space\n"
    "array ::= \"[\" space ( value (\",\" space value)* )? \"]\" space\n"
    "date ::= [0-9]{4} \"-\" ( [0] [1-9] | [1] [0-2] ) \"-\" ( [0] [1-9] | [1-2] [0-9] | [3] [0-1] )\n"
    "time ::= ( [01] [0-9] | [2] [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? "
    "( \"Z\" | [+-] ( [01] [0-9] | [2] [0-3] ) \":\" [0-5] [0-9] )\n"
    "uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n";

static rp_status cv_fail(conv *c, rp_status st, const char *what, const char *arg) {
    if (c->st == RP_OK) c->st = rp_errorf(st, "json schema: %s%s", what, arg ? arg : "");
    return c->st;
}

/* A GBNF literal for the bytes s[0..n). */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') { sb_puts(b, "\\"); sb_add(b, (const char *)&ch, 1); }
        else if (ch == '\n') sb_puts(b, "\\n");
        else if (ch == '\r') sb_puts(b, "\\r");
        else if (ch == '\t') sb_puts(b, "\\t");
        else if (ch < 0x20) sb_printf(b, "\\x%02X", ch);
        else sb_add(b, (const char *)&ch, 1);
    }
    sb_puts(b, "\"");
}

/* A JSON value as its compact serialisation, as a literal. */
static void sb_json_literal(conv *c, sbuf *b, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) { cv_fail(c, RP_ERR_NOMEM, "out of memory", NULL); return; }
    sb_literal(b, s, strlen(s));
    free(s);
}

static int new_rule(conv *c, const char *body) {
    int id = c->n_rules++;
    sb_printf(&c->rules, "r%d ::= ", id);
    sb_puts(&c->rules, body);
    sb_puts(&c->rules, "\n");
    return id;
}

static void visit(conv *c, json_t *sch, sbuf *out, int depth);

/* ---- regex subset -> GBNF ---- */
typedef struct rx {
    const char *p;
    conv *c;
} rx;

static void rx_alt(rx *r, sbuf *out);

static void rx_class_escape(rx *r, sbuf *out, char e) {
    switch (e) {
    case 'd': sb_puts(out, "0-9"); break;
    case 'w': sb_puts(out, "a-zA-Z0-9_"); break;
    case 's': sb_puts(out, " \\t\\n\\r"); break;
    case 'n': sb_puts(out, "\\n"); break;
    case 't': sb_puts(out, "\\t"); break;
    case 'r': sb_puts(out, "\\r"); break;
    case '\\': case ']': case '[': case '-': case '^': case '"': sb_printf(out, "\\%c", e); break;
    default:
        if (e && !strchr("dwsDWS", e) && e != 'b' && e != 'B') sb_add(out, &e, 1);
        else cv_fail(r->c, RP_ERR_UNSUPPORTED, "unsupported regex escape in pattern", NULL);
    }
}

static void rx_atom(rx *r, sbuf *out) {
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p[0] == '?' && r->p[1] == ':') r->p += 2;
        sb_puts(out, "(");
        rx_alt(r, out);
        sb_puts(out, ")");
        if (*r->p != ')') { cv_fail(r->c, RP_ERR_FORMAT, "unbalanced '(' in pattern", NULL); return; }
        r->p++;
    } else if (ch == '[') {
        r->p++;
        sb_puts(out, "[");
        if (*r->p == '^') { sb_puts(out, "^"); r->p++; }
        while (*r->p && *r->p != ']') {
            if (*r->p == '\\') { r->p++; rx_class_escape(r, out, *r->p); if (*r->p) r->p++; }
            else if (*r->p == '"') { sb_puts(out, "\\\""); r->p++; }
            else { sb_add(out, r->p, 1); r->p++; }
        }
        if (*r->p != ']') { cv_fail(r->c, RP_ERR_FORMAT, "unterminated [class] in pattern", NULL); return; }
        r->p++;
        sb_puts(out, "]");
    } else if (ch == '.') {
        r->p++;
        sb_puts(out, "[^\"\\\\\\x00-\\x1F]");
    } else if (ch == '\\') {
        r->p++;
        char e = *r->p;
        if (!e) { cv_fail(r->c, RP_ERR_FORMAT, "trailing '\\' in pattern", NULL); return; }
        r->p++;
        if (e == 'd' || e == 'w' || e == 's') { sb_puts(out, "["); rx_class_escape(r, out, e); sb_puts(out, "]"); }
        else if (e == 'D') sb_puts(out, "[^0-9\"\\\\]");
        else if (e == 'W') sb_puts(out, "[^a-zA-Z0-9_\"\\\\]");
        else if (e == 'S') sb_puts(out, "[^ \\t\\n\\r\"\\\\]");
        else if (e == 'n') sb_puts(out, "\"\\n\"");
        else if (e == 't') sb_puts(out, "\"\\t\"");
        else if (strchr("bB", e) || (e >= '0' && e <= '9')) cv_fail(r->c, RP_ERR_UNSUPPORTED, "unsupported regex escape in pattern", NULL);
        else sb_literal(out, &e, 1);
    } else {
        int n = 1;
        uint32_t cp;
        int u = rp_grammar_utf8_decode((const unsigned char *)r->p, strlen(r->p), &cp);
        if (u > 1) n = u;
        sb_literal(out, r->p, (size_t)n);
        r->p += n;
    }
}

static void rx_seq(rx *r, sbuf *out) {
    while (*r->p && *r->p != '|' && *r->p != ')' && r->c->st == RP_OK) {
        if (*r->p == '^') { r->p++; continue; }
        if (*r->p == '$' && (r->p[1] == 0 || r->p[1] == '|' || r->p[1] == ')')) { r->p++; continue; }
        sb_puts(out, " ");
        rx_atom(r, out);
        char q = *r->p;
        if (q == '*' || q == '+' || q == '?') { sb_add(out, &q, 1); r->p++; }
        else if (q == '{') {
            const char *e = strchr(r->p, '}');
            if (!e) { cv_fail(r->c, RP_ERR_FORMAT, "unterminated {m,n} in pattern", NULL); return; }
            sb_add(out, r->p, (size_t)(e - r->p + 1));
            r->p = e + 1;
        }
        if (*r->p == '?' || *r->p == '+') r->p++;   /* lazy / possessive: same language */
    }
}

static void rx_alt(rx *r, sbuf *out) {
    rx_seq(r, out);
    while (*r->p == '|' && r->c->st == RP_OK) {
        r->p++;
        sb_puts(out, " |");
        rx_seq(r, out);
    }
}

/* ---- schema visitor ---- */

static int64_t int_of(json_t *o, const char *k, int64_t dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void visit_object(conv *c, json_t *sch, sbuf *out, int depth) {
    json_t *props = json_object_get(sch, "properties");
    json_t *req = json_object_get(sch, "required");
    json_t *addl = json_object_get(sch, "additionalProperties");
    if (!json_is_object(props) || json_object_size(props) == 0) {
        if (!addl || json_is_true(addl)) { sb_puts(out, "object"); return; }
        if (json_is_false(addl)) { sb_puts(out, "\"{\" space \"}\" space"); return; }
        sbuf kv = {0};
        sb_puts(&kv, "string \":\" space (");
        visit(c, addl, &kv, depth + 1);
        sb_puts(&kv, ")");
        int kr = new_rule(c, kv.s ? kv.s : "");
        free(kv.s);
        sb_printf(out, "\"{\" space ( r%d (\",\" space r%d)* )? \"}\" space", kr, kr);
        return;
    }
    /* each property's "key": value as a rule; required ones in order, then optionals chained */
    size_t np = json_object_size(props);
    int *kv = calloc(np, sizeof *kv);
    bool *isreq = calloc(np, sizeof *isreq);
    if (!kv || !isreq) { free(kv); free(isreq); cv_fail(c, RP_ERR_NOMEM, "out of memory", NULL); return; }
    size_t i = 0;
    const char *key;
    json_t *ps;
    json_object_foreach(props, key, ps) {
        sbuf b = {0};
        json_t *ks = json_string(key);
        sb_json_literal(c, &b, ks);
        json_decref(ks);
        sb_puts(&b, " space \":\" space (");
        visit(c, ps, &b, depth + 1);
        sb_puts(&b, ")");
        kv[i] = new_rule(c, b.s ? b.s : "");
        free(b.s);
        size_t j;
        json_t *r;
        json_array_foreach(req, j, r) if (json_is_string(r) && strcmp(json_string_value(r), key) == 0) isreq[i] = true;
        i++;
    }
    /* optional chain: rest_i ::= ("," space kv_i)? rest_{i+1}; first_i ::= kv_i rest_{i+1} | first_{i+1} */
    int n_req = 0;
    for (i = 0; i < np; i++) n_req += isreq[i];
    int rest = -1, first = -1;
    bool extra = addl && !json_is_false(addl);
    int extra_rule = -1;
    if (extra) {
        sbuf b = {0};
        sb_puts(&b, "(\",\" space string \":\" space (");
        if (json_is_object(addl)) visit(c, addl, &b, depth + 1);
        else sb_puts(&b, "value");
        sb_puts(&b, "))*");
        extra_rule = new_rule(c, b.s ? b.s : "");
        free(b.s);
    }
    for (size_t k = np; k-- > 0;) {
        if (isreq[k]) continue;
        char body[128];
        if (rest >= 0) snprintf(body, sizeof body, "(\",\" space r%d)? r%d", kv[k], rest);
        else snprintf(body, sizeof body, "(\",\" space r%d)?", kv[k]);
        int nrest = new_rule(c, body);
        if (rest >= 0) snprintf(body, sizeof body, "r%d r%d | r%d", kv[k], rest, first);
        else snprintf(body, sizeof body, "r%d", kv[k]);
        first = new_rule(c, body);
        rest = nrest;
    }
    sb_puts(out, "\"{\" space");
    if (n_req > 0) {
        bool lead = true;
        for (i = 0; i < np; i++) {
            if (!isreq[i]) continue;
            sb_printf(out, lead ? " r%d" : " \",\" space r%d", kv[i]);
            lead = false;
        }
        if (rest >= 0) sb_printf(out, " r%d", rest);
        if (extra_rule >= 0) sb_printf(out, " r%d", extra_rule);
    } else if (first >= 0) {
        sb_printf(out, " ( r%d", first);
        if (extra_rule >= 0) sb_printf(out, " r%d", extra_rule);
        sb_puts(out, " )?");
    }
    sb_puts(out, " \"}\" space");
    free(kv);
    free(isreq);
}

static void visit_type(conv *c, json_t *sch, const char *t, sbuf *out, int depth) {
    if (!strcmp(t, "object")) visit_object(c, sch, out, depth);
    else if (!strcmp(t, "array")) {
        json_t *items = json_object_get(sch, "items");
        int64_t mn = int_of(sch, "minItems", 0), mx = int_of(sch, "maxItems", -1);
        if (mn < 0 || (mx >= 0 && mx < mn) || mn > 10000 || mx > 10000) { cv_fail(c, RP_ERR_FORMAT, "bad minItems/maxItems", NULL); return; }
        sbuf it = {0};
        if (items && json_is_object(items)) visit(c, items, &it, depth + 1);
        else sb_puts(&it, "value");
        int ir = new_rule(c, it.s ? it.s : "");
        free(it.s);
        if (mx == 0) { sb_puts(out, "\"[\" space \"]\" space"); return; }
        char rep[64];
        if (mx < 0) snprintf(rep, sizeof rep, "{%lld,}", (long long)(mn > 0 ? mn - 1 : 0));
        else snprintf(rep, sizeof rep, "{%lld,%lld}", (long long)(mn > 0 ? mn - 1 : 0), (long long)(mx - 1));
        sb_printf(out, "\"[\" space %s r%d (\",\" space r%d)%s %s \"]\" space", mn > 0 ? "" : "(", ir, ir, rep, mn > 0 ? "" : ")?");
    } else if (!strcmp(t, "string")) {
        json_t *fmt = json_object_get(sch, "format");
        json_t *pat = json_object_get(sch, "pattern");
        if (json_is_string(fmt)) {
            const char *f = json_string_value(fmt);
            const char *body = !strcmp(f, "date") ? "date" : !strcmp(f, "time") ? "time"
                             : !strcmp(f, "date-time") ? "date \"T\" time" : !strcmp(f, "uuid") ? "uuid" : NULL;
            if (body) { sb_printf(out, "\"\\\"\" %s \"\\\"\" space", body); return; }
            /* other formats (email, uri, ...) fall back to any string, as llama.cpp does */
        }
        if (json_is_string(pat)) {
            rx r = {.p = json_string_value(pat), .c = c};
            sbuf b = {0};
            rx_alt(&r, &b);
            if (*r.p && c->st == RP_OK) cv_fail(c, RP_ERR_FORMAT, "unbalanced ')' in pattern", NULL);
            int pr = new_rule(c, b.s ? b.s : "\"\"");
            free(b.s);
            sb_printf(out, "\"\\\"\" r%d \"\\\"\" space", pr);
            return;
        }
        int64_t mn = int_of(sch, "minLength", 0), mx = int_of(sch, "maxLength", -1);
        if (mn < 0 || (mx >= 0 && mx < mn) || mn > 10000 || mx > 10000) { cv_fail(c, RP_ERR_FORMAT, "bad minLength/maxLength", NULL); return; }
        if (mn == 0 && mx < 0) sb_puts(out, "string");
        else if (mx < 0) sb_printf(out, "\"\\\"\" char{%lld,} \"\\\"\" space", (long long)mn);
        else sb_printf(out, "\"\\\"\" char{%lld,%lld} \"\\\"\" space", (long long)mn, (long long)mx);
    } else if (!strcmp(t, "number")) sb_puts(out, "number");
    else if (!strcmp(t, "integer")) sb_puts(out, "integer");
    else if (!strcmp(t, "boolean")) sb_puts(out, "boolean");
    else if (!strcmp(t, "null")) sb_puts(out, "null");
    else cv_fail(c, RP_ERR_UNSUPPORTED, "unknown type ", t);
}

static void visit(conv *c, json_t *sch, sbuf *out, int depth) {
    if (c->st != RP_OK) return;
    if (depth > 64) { cv_fail(c, RP_ERR_UNSUPPORTED, "schema nested deeper than 64", NULL); return; }
    if (json_is_true(sch) || (json_is_object(sch) && json_object_size(sch) == 0)) { sb_puts(out, "value"); return; }
    if (!json_is_object(sch)) { cv_fail(c, RP_ERR_FORMAT, "a schema must be an object", NULL); return; }
    json_t *v;
    if ((v = json_object_get(sch, "$ref"))) {
        const char *ref = json_string_value(v);
        const char *name = NULL;
        json_t *defs = NULL;
        if (ref && !strncmp(ref, "#/$defs/", 8)) { name = ref + 8; defs = json_object_get(c->root, "$defs"); }
        else if (ref && !strncmp(ref, "#/definitions/", 14)) { name = ref + 14; defs = json_object_get(c->root, "definitions"); }
        json_t *target = name ? json_object_get(defs, name) : NULL;
        if (!target) { cv_fail(c, RP_ERR_UNSUPPORTED, "unresolved $ref ", ref ? ref : "(not a string)"); return; }
        json_t *done = json_object_get(c->refs_done, ref);
        if (!done) {
            int id = c->n_rules++;   /* reserve the name first: recursive references see it */
            json_object_set_new(c->refs_done, ref, json_integer(id));
            sbuf b = {0};
            visit(c, target, &b, depth + 1);
            sb_printf(&c->rules, "r%d ::= %s\n", id, b.s ? b.s : "value");
            free(b.s);
            done = json_object_get(c->refs_done, ref);
        }
        sb_printf(out, "r%lld", (long long)json_integer_value(done));
        return;
    }
    if ((v = json_object_get(sch, "const"))) { sb_json_literal(c, out, v); sb_puts(out, " space"); return; }
    if ((v = json_object_get(sch, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0) { cv_fail(c, RP_ERR_FORMAT, "enum must be a non-empty array", NULL); return; }
        sb_puts(out, "(");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) sb_puts(out, " |");
            sb_puts(out, " ");
            sb_json_literal(c, out, e);
        }
        sb_puts(out, " ) space");
        return;
    }
    json_t *alts = json_object_get(sch, "anyOf");
    if (!alts) alts = json_object_get(sch, "oneOf");
    if (alts) {
        if (!json_is_array(alts) || json_array_size(alts) == 0) { cv_fail(c, RP_ERR_FORMAT, "anyOf/oneOf must be a non-empty array", NULL); return; }
        sb_puts(out, "(");
        size_t i;
        json_t *e;
        json_array_foreach(alts, i, e) {
            if (i) sb_puts(out, " |");
            sb_puts(out, " ");
            visit(c, e, out, depth + 1);
        }
        sb_puts(out, " )");
        return;
    }
    if (json_object_get(sch, "allOf")) { cv_fail(c, RP_ERR_UNSUPPORTED, "allOf is not supported", NULL); return; }
    json_t *t = json_object_get(sch, "type");
    if (json_is_string(t)) { visit_type(c, sch, json_string_value(t), out, depth); return; }
    if (json_is_array(t)) {
        sb_puts(out, "(");
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            if (!json_is_string(e)) { cv_fail(c, RP_ERR_FORMAT, "type list entries must be strings", NULL); return; }
            if (i) sb_puts(out, " |");
            sb_puts(out, " ");
            visit_type(c, sch, json_string_value(e), out, depth);
        }
        sb_puts(out, " )");
        return;
    }
    if (json_object_get(sch, "properties")) { visit_type(c, sch, "object", out, depth); return; }
    if (json_object_get(sch, "items")) { visit_type(c, sch, "array", out, depth); return; }
    sb_puts(out, "value");
}

RP_API rp_status rp_grammar_schema_to_gbnf(const char *schema_json, char **gbnf_out) {
    if (!gbnf_out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_schema_to_gbnf: NULL output");
    *gbnf_out = NULL;
    conv c = {.st = RP_OK};
    if (schema_json && *schema_json) {
        json_error_t err;
        c.root = json_loads(schema_json, JSON_DECODE_ANY, &err);
        if (!c.root) return rp_errorf(RP_ERR_FORMAT, "json schema: %d:%d: %s", err.line, err.column, err.text);
    } else c.root = json_object();
    c.refs_done = json_object();
    sbuf top = {0};
    visit(&c, c.root, &top, 0);
    sbuf all = {0};
    sb_puts(&all, "root ::= ");
    sb_puts(&all, top.s ? top.s : "value");
    sb_puts(&all, "\n");
    sb_puts(&all, PRIMITIVES);
    if (c.rules.s) sb_puts(&all, c.rules.s);
    json_decref(c.root);
    json_decref(c.refs_done);
    free(top.s);
    free(c.rules.s);
    if (c.st == RP_OK && (top.oom || all.oom || c.rules.oom)) c.st = rp_errorf(RP_ERR_NOMEM, "json schema: out of memory");
    if (c.st != RP_OK) { free(all.s); return c.st; }
    *gbnf_out = all.s;
    return RP_OK;
}

RP_API rp_status rp_grammar_from_json_schema(const char *schema_json, rp_grammar **out) {
    if (!out) return rp_errorf(RP_ERR_INVALID_ARG, "rp_grammar_from_json_schema: NULL output");
    *out = NULL;
    char *text = NULL;
    RP_TRY(rp_grammar_schema_to_gbnf(schema_json, &text));
    rp_status st = rp_grammar_parse(text, "root", out);
    free(text);
    return st;
}
