/* tvalue.h — the template interpreter's values (Python semantics: str, int, float, bool, None, list, dict,
 * Undefined), the arena they live in, the error path, and their text forms (str(), repr(), json.dumps). */
#ifndef RP_TEMPLATE_TVALUE_H
#define RP_TEMPLATE_TVALUE_H

#include <jansson.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena: every allocation of one compile or one render; freed at once ---- */
typedef struct ta_chunk ta_chunk;
typedef struct tarena {
    ta_chunk *head;
    size_t used, cap;   /* bytes handed out so far; the limit */
    jmp_buf *jb;        /* where an error (or the limit) jumps */
    char *err;          /* error text buffer (TERR_CAP bytes) */
    const char *construct;   /* what was being evaluated, for messages */
    int line, col;           /* where (0: unknown) */
} tarena;

#define TERR_CAP 512

void ta_init(tarena *a, size_t cap, jmp_buf *jb, char *err);
void ta_free(tarena *a);
void *ta_alloc(tarena *a, size_t n);   /* zeroed; jumps on the limit */
char *ta_strndup(tarena *a, const char *s, size_t n);
/* Records "LINE:COL: message" (the position set in a->line/col) and jumps to a->jb. */
_Noreturn void ta_fail(tarena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- values ---- */
typedef enum tkind {
    TV_UNDEF = 0, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_FUNC, TV_LOOP
} tkind;

/* list printed as a tuple; dict that is a namespace(); lists that stand for Python's lazy objects, which
 * iterate like lists but have no JSON form: a generator (map, select, ...: no len, no index, always true),
 * dict views (.items() / .keys() / .values(): no index) and range() */
enum { TVF_TUPLE = 1, TVF_NS = 2, TVF_GEN = 4, TVF_ITEMS = 8, TVF_KEYS = 16, TVF_VALUES = 32, TVF_RANGE = 64 };
enum { TVF_MARKUP = 128 };   /* a str that is markupsafe's Markup (|safe, |escape): `+` escapes the other side */
#define TVF_LAZY (TVF_GEN | TVF_ITEMS | TVF_KEYS | TVF_VALUES | TVF_RANGE)
#define TVF_NOINDEX (TVF_GEN | TVF_ITEMS | TVF_KEYS | TVF_VALUES)

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tfunc tfunc;
typedef struct tloop tloop;

typedef struct tval {
    uint8_t k, flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;   /* TV_STR (UTF-8); TV_UNDEF: the missing name */
        tlist *l;
        tdict *d;
        tfunc *fn;
        tloop *lp;
    } u;
} tval;

/* depth: how deeply containers nest inside (1: none); bounded so that walking a value never exhausts the stack */
#define TV_MAX_NESTING 200
struct tlist { tval *v; size_t n, cap; int depth; };
typedef struct tkv { tval k, v; } tkv;
struct tdict { tkv *e; size_t n, cap; int depth; };

static inline tval tv_undef(void) { return (tval){.k = TV_UNDEF}; }
static inline tval tv_none(void) { return (tval){.k = TV_NONE}; }
static inline tval tv_bool(bool b) { return (tval){.k = TV_BOOL, .u.b = b}; }
static inline tval tv_int(int64_t i) { return (tval){.k = TV_INT, .u.i = i}; }
static inline tval tv_float(double f) { return (tval){.k = TV_FLOAT, .u.f = f}; }
static inline tval tv_strn(const char *p, size_t n) { tval v = {.k = TV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }
tval tv_str(const char *s);
tval tv_undef_named(const char *name, size_t n);

tval tv_list_new(tarena *a, size_t cap);
void tv_list_push(tarena *a, tval list, tval v);
tval tv_dict_new(tarena *a, size_t cap);
void tv_dict_set(tarena *a, tval dict, tval key, tval v);   /* replaces an equal key */
tval *tv_dict_get(tval dict, tval key);                     /* NULL when absent */
tval *tv_dict_gets(tval dict, const char *key, size_t n);

const char *tv_type_name(tval v);   /* Python's: "str", "int", "dict", "NoneType", "undefined", ... */
bool tv_truthy(tval v);
bool tv_is_str(tval v, const char *s);
bool tv_equal(tval a, tval b);      /* Python ==: deep, 1 == 1.0 == True */
/* Python ordering (<): numbers, strings, lists; other pairs fail with a TypeError. */
int tv_compare(tarena *a, tval x, tval y);

/* ---- text ---- */
typedef struct tsb { char *p; size_t n, cap; size_t limit; tarena *a; } tsb;   /* arena-backed builder */
void tsb_init(tsb *b, tarena *a, size_t limit);   /* limit: output bytes allowed (jumps past it) */
void tsb_putn(tsb *b, const char *s, size_t n);
void tsb_puts(tsb *b, const char *s);
void tsb_putc(tsb *b, char c);
tval tsb_val(tsb *b);   /* the text as a string value (shares the buffer) */

void tv_put_str(tsb *b, tval v);    /* str(v) */
void tv_put_repr(tsb *b, tval v);   /* repr(v) */
tval tv_to_str(tarena *a, tval v);  /* str(v) as a value */
tval tv_html_escape(tarena *a, tval s);   /* markupsafe.escape of a str: & < > " ' as entities, a Markup */
void tv_put_pyfloat(tsb *b, double v, bool json);   /* Python float repr (json: NaN / Infinity spellings) */

typedef struct tjson_opts {
    int indent;           /* < 0: none */
    const char *item_sep, *key_sep;   /* NULL: Python's defaults for the indent */
    bool ensure_ascii, sort_keys;
} tjson_opts;
void tv_put_json(tsb *b, tval v, const tjson_opts *o, int depth);   /* json.dumps; fails on Undefined etc. */

/* jansson -> value (objects keep their key order) */
tval tv_from_json(tarena *a, const json_t *j, int depth);

/* ---- Python str helpers over UTF-8 ---- */
size_t tu_len(const char *p, size_t n);                    /* code points */
size_t tu_offset(const char *p, size_t n, size_t cp);      /* byte offset of code point cp (n if past) */
size_t tu_space_len(const char *p, size_t n);              /* bytes of a str.isspace() code point at p, else 0 */
bool tu_all_ascii(const char *p, size_t n);

#endif /* RP_TEMPLATE_TVALUE_H */
