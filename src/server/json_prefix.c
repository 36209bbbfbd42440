/* json_prefix.c — a byte-level pushdown automaton for "this is a prefix of one JSON object". */
#include "server/json_prefix.h"

#include <string.h>

enum {
    S_START,       /* before the root: only '{' (and whitespace) */
    S_OBJ_FIRST,   /* after '{': key or '}' */
    S_OBJ_KEY,     /* after ',' in an object: key */
    S_COLON,       /* after a key */
    S_VALUE,       /* after ':' or ',' in an array */
    S_ARR_FIRST,   /* after '[': value or ']' */
    S_AFTER,       /* after a value: ',' or the container's close */
    S_STRING,      /* inside a string; sub: 0 plain, 1 after '\', 2..5 hex digits left + 1 */
    S_NUMBER,      /* sub: see N_* */
    S_LITERAL,     /* true / false / null; sub: bytes matched */
    S_DONE,
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *lit_text(uint8_t l) { return l == 't' ? "true" : l == 'f' ? "false" : "null"; }

void rp_jsonp_init(rp_json_prefix *p) {
    memset(p, 0, sizeof *p);
    p->state = S_START;
}

bool rp_jsonp_done(const rp_json_prefix *p) { return p->state == S_DONE; }

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* A value just ended. */
static void value_end(rp_json_prefix *p) { p->state = p->depth == 0 ? S_DONE : S_AFTER; }

static bool open_container(rp_json_prefix *p, char c) {
    if (p->depth >= RP_JSONP_MAX_DEPTH) return false;
    p->stack[p->depth++] = (uint8_t)c;
    p->state = c == '{' ? S_OBJ_FIRST : S_ARR_FIRST;
    return true;
}

static bool close_container(rp_json_prefix *p, char c) {
    if (p->depth == 0 || p->stack[p->depth - 1] != (c == '}' ? '{' : '[')) return false;
    p->depth--;
    value_end(p);
    return true;
}

/* Starts a value at byte c (state S_VALUE / S_ARR_FIRST). */
static bool value_start(rp_json_prefix *p, char c) {
    if (c == '{' || c == '[') return open_container(p, c);
    if (c == '"') {
        p->state = S_STRING;
        p->sub = 0;
        p->key = false;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        p->state = S_NUMBER;
        p->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        p->nd = 1;
        return true;
    }
    if (c == 't' || c == 'f' || c == 'n') {
        p->state = S_LITERAL;
        p->lit = (uint8_t)c;
        p->sub = 1;
        return true;
    }
    return false;
}

static bool hexd(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool feed1(rp_json_prefix *p, char c) {
    const unsigned char u = (unsigned char)c;
    if (p->state == S_STRING) {
        if (p->sub == 0) {
            if (c == '"') {
                if (p->key) p->state = S_COLON;
                else value_end(p);
                p->ws = 0;
                return true;
            }
            if (c == '\\') p->sub = 1;
            else if (u < 0x20) return false;
            return true;
        }
        if (p->sub == 1) {
            if (c == 'u') { p->sub = 5; return true; }
            if (!strchr("\"\\/bfnrt", c) || !c) return false;
            p->sub = 0;
            return true;
        }
        if (!hexd(c)) return false;
        p->sub = p->sub == 2 ? 0 : (uint8_t)(p->sub - 1);
        return true;
    }
    if (u >= 0x80) return false;
    if (p->state == S_NUMBER) {
        const bool dig = c >= '0' && c <= '9';
        switch (p->sub) {
        case N_MINUS: if (dig) { p->sub = c == '0' ? N_ZERO : N_INT; p->nd = 1; return true; } return false;
        case N_ZERO: if (c == '.') { p->sub = N_DOT; return true; } if (c == 'e' || c == 'E') { p->sub = N_E; return true; } break;
        case N_INT:
            if (dig) return ++p->nd <= RP_JSONP_MAX_INT;
            if (c == '.') { p->sub = N_DOT; return true; }
            if (c == 'e' || c == 'E') { p->sub = N_E; return true; }
            break;
        case N_DOT: if (dig) { p->sub = N_FRAC; return true; } return false;
        case N_FRAC: if (dig) return true; if (c == 'e' || c == 'E') { p->sub = N_E; return true; } break;
        case N_E: if (c == '+' || c == '-') { p->sub = N_ESIGN; return true; } if (dig) { p->sub = N_EXP; p->nd = 1; return true; } return false;
        case N_ESIGN: if (dig) { p->sub = N_EXP; p->nd = 1; return true; } return false;
        case N_EXP: if (dig) return ++p->nd <= RP_JSONP_MAX_EXP; break;
        }
        /* the number ended (accepting sub-state); c belongs to what follows */
        value_end(p);
        p->ws = 0;
        if (p->state == S_DONE) return false;
    }
    if (p->state == S_LITERAL) {
        const char *t = lit_text(p->lit);
        if (c != t[p->sub]) return false;
        if (t[++p->sub] == '\0') {
            value_end(p);
            p->ws = 0;
        }
        return true;
    }
    if (is_ws(c)) {
        if (p->state == S_DONE || ++p->ws > RP_JSONP_MAX_WS) return false;
        return true;
    }
    p->ws = 0;
    switch (p->state) {
    case S_START: return c == '{' && open_container(p, c);
    case S_OBJ_FIRST:
        if (c == '}') return close_container(p, c);
        /* fall through */
    case S_OBJ_KEY:
        if (c != '"') return false;
        p->state = S_STRING;
        p->sub = 0;
        p->key = true;
        return true;
    case S_COLON:
        if (c != ':') return false;
        p->state = S_VALUE;
        return true;
    case S_ARR_FIRST:
        if (c == ']') return close_container(p, c);
        return value_start(p, c);
    case S_VALUE: return value_start(p, c);
    case S_AFTER:
        if (c == ',') {
            p->state = p->stack[p->depth - 1] == '{' ? S_OBJ_KEY : S_VALUE;
            return true;
        }
        return (c == '}' || c == ']') && close_container(p, c);
    default: return false;
    }
}

bool rp_jsonp_feed(rp_json_prefix *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed1(p, s[i])) return false;
    return true;
}

size_t rp_jsonp_close(const rp_json_prefix *p, char *buf, size_t cap) {
    char tmp[2 * RP_JSONP_MAX_DEPTH + 32];
    size_t n = 0;
#define PUT(str) do { const char *s_ = (str); while (*s_ && n + 1 < sizeof tmp) tmp[n++] = *s_++; } while (0)
    int depth = p->depth;
    switch (p->state) {
    case S_START: PUT("{}"); depth = 0; break;
    case S_STRING:
        if (p->sub == 1) PUT("n");
        else for (int k = p->sub; k >= 2; k--) PUT(k == 2 ? "1" : "0");   /* never \u0000 (rejected by parsers) */
        PUT("\"");
        if (p->key) PUT(": null");
        break;
    case S_NUMBER:
        if (p->sub == N_MINUS || p->sub == N_DOT || p->sub == N_E || p->sub == N_ESIGN) PUT("0");
        break;
    case S_LITERAL: PUT(lit_text(p->lit) + p->sub); break;
    case S_OBJ_KEY: PUT("\"\": null"); break;
    case S_COLON: PUT(": null"); break;
    case S_VALUE: PUT("null"); break;
    default: break;
    }
    for (int d = depth; d-- > 0;) PUT(p->stack[d] == '{' ? "}" : "]");
#undef PUT
    tmp[n] = '\0';
    if (buf && cap) {
        size_t w = n < cap - 1 ? n : cap - 1;
        memcpy(buf, tmp, w);
        buf[w] = '\0';
    }
    return n;
}
