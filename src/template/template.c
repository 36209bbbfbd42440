/* template.c — compile / render entry points: arenas, the error jump, limits and the global namespace. */
#include "template/template.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/teval.h"

struct rp_tmpl {
    tarena a;
    tprogram prog;
};

void te_run(tev *e);

rp_status rp_tmpl_compile(const char *src, size_t len, rp_tmpl **out) {
    *out = NULL;
    if (!src) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: no text");
    rp_tmpl *t = calloc(1, sizeof *t);
    if (!t) return rp_errorf(RP_ERR_NOMEM, "chat template: out of memory");
    jmp_buf jb;
    char err[TERR_CAP] = "";
    /* the tree of a template takes a few times its text; 64 MiB bounds a hostile one */
    ta_init(&t->a, (size_t)64 << 20, &jb, err);
    if (setjmp(jb)) {
        ta_free(&t->a);
        free(t);
        return rp_errorf(RP_ERR_FORMAT, "chat template: %s", err);
    }
    tparse(&t->a, src, len, &t->prog);
    t->a.jb = NULL;
    t->a.err = NULL;
    *out = t;
    return RP_OK;
}

void rp_tmpl_free(rp_tmpl *t) {
    if (!t) return;
    ta_free(&t->a);
    free(t);
}

static tval global_fn(tarena *a, int id) {
    tval f = {.k = TV_FUNC};
    f.u.fn = ta_alloc(a, sizeof *f.u.fn);
    f.u.fn->kind = F_GLOBAL;
    f.u.fn->id = (uint8_t)id;
    return f;
}

/* everything render() touches after setjmp lives here, so nothing needs `volatile` */
typedef struct render_state {
    tarena a;
    tsb out;
    tev e;
    char err[TERR_CAP];
} render_state;

static void render_body(render_state *rs, const rp_tmpl *t, const json_t *context, const rp_tmpl_opts *o) {
    tarena *a = &rs->a;
    tscope *g = ta_alloc(a, sizeof *g);
    g->vars = tv_dict_new(a, 8);
    static const struct { const char *name; int id; } k_globals[] = {
        {"range", G_RANGE}, {"namespace", G_NAMESPACE}, {"dict", G_DICT},
        {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME},
    };
    for (size_t i = 0; i < sizeof k_globals / sizeof k_globals[0]; i++)
        tv_dict_set(a, g->vars, tv_str(k_globals[i].name), global_fn(a, k_globals[i].id));
    tscope *root = ta_alloc(a, sizeof *root);
    root->parent = g;
    root->vars = context && json_is_object(context) ? tv_from_json(a, context, 0) : tv_dict_new(a, 0);
    tsb_init(&rs->out, a, o->max_output);
    rs->e = (tev){
        .a = a, .prog = &t->prog, .out = &rs->out, .scope = root, .max_depth = o->max_depth,
        .max_iters = o->max_iters, .max_output = o->max_output, .now = o->now,
    };
    te_run(&rs->e);
}

rp_status rp_tmpl_json_dumps(const json_t *v, int indent, const char *item_sep, const char *key_sep, char **out) {
    *out = NULL;
    render_state *rs = calloc(1, sizeof *rs);
    if (!rs) return rp_errorf(RP_ERR_NOMEM, "json: out of memory");
    jmp_buf jb;
    ta_init(&rs->a, (size_t)1 << 30, &jb, rs->err);
    if (setjmp(jb)) {
        rp_status st = rp_errorf(RP_ERR_NOMEM, "json: %s", rs->err);
        ta_free(&rs->a);
        free(rs);
        return st;
    }
    const tjson_opts o = {.indent = indent < 0 ? -1 : indent, .item_sep = item_sep, .key_sep = key_sep};
    tsb_init(&rs->out, &rs->a, (size_t)1 << 30);
    tv_put_json(&rs->out, tv_from_json(&rs->a, v, 0), &o, 0);
    *out = strndup(rs->out.p ? rs->out.p : "", rs->out.n);
    ta_free(&rs->a);
    free(rs);
    return *out ? RP_OK : rp_errorf(RP_ERR_NOMEM, "json: out of memory");
}

rp_status rp_tmpl_render(const rp_tmpl *t, const json_t *context, const rp_tmpl_opts *opts, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (!t) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: none");
    if (context && !json_is_object(context)) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: context is not a JSON object");
    rp_tmpl_opts o = opts ? *opts : (rp_tmpl_opts){0};
    if (!o.now) o.now = time(NULL);
    if (!o.max_output) o.max_output = (size_t)16 << 20;
    if (!o.max_memory) o.max_memory = (size_t)256 << 20;
    if (!o.max_iters) o.max_iters = 1000000;
    if (!o.max_depth) o.max_depth = 64;
    render_state *rs = calloc(1, sizeof *rs);
    if (!rs) return rp_errorf(RP_ERR_NOMEM, "chat template: out of memory");
    jmp_buf jb;
    ta_init(&rs->a, o.max_memory, &jb, rs->err);
    if (setjmp(jb)) {
        rp_status st = rp_errorf(RP_ERR_INVALID_ARG, "chat template: %s", rs->err);
        ta_free(&rs->a);
        free(rs);
        return st;
    }
    render_body(rs, t, context, &o);
    size_t n = rs->out.n;
    char *text = malloc(n + 1);
    if (text) {
        if (n) memcpy(text, rs->out.p, n);
        text[n] = 0;
    }
    ta_free(&rs->a);
    free(rs);
    if (!text) return rp_errorf(RP_ERR_NOMEM, "chat template: out of memory");
    *out = text;
    if (len) *len = n;
    return RP_OK;
}
