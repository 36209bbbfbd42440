/* api_model.c — the public API's system, model description / metadata, tokenizer and chat-template calls. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "kernels/cpu.h"
#include "model/model.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

/* ---- system ---- */

rp_status rp_cpu_select(const char *level) {
    if (!level) return rp_errorf(RP_ERR_INVALID_ARG, "cpu: no level given");
    if (!strcmp(level, "auto")) return rp_cpu_set_level(rp_cpu_info_get()->best);
    const int l = rp_cpu_level_parse(level);
    if (l < 0) return rp_errorf(RP_ERR_INVALID_ARG, "cpu: level '%s' unknown here (auto, %s)", level, rp_cpu_level_names());
    return rp_cpu_set_level((rp_cpu_level)l);
}

const char *rp_cpu_active(void) { return rp_cpu_level_name(rp_cpu_level_active()); }

size_t rp_system_info(char *buf, size_t cap) {
    const rp_cpu_info *c = rp_cpu_info_get();
#if defined(__aarch64__)
    const int n = snprintf(buf, cap, "cpu: %s | neon %d fphp %d dotprod %d i8mm %d bf16 %d | sve %d sve2 %d sme %d | "
                                     "levels %s | best %s, active %s",
                           c->brand, c->neon, c->fphp, c->dotprod, c->i8mm, c->bf16, c->sve, c->sve2, c->sme,
                           rp_cpu_level_names(), rp_cpu_level_name(c->best), rp_cpu_level_name(rp_cpu_level_active()));
#elif defined(__x86_64__)
    const int n = snprintf(buf, cap, "cpu: %s | avx2 %d fma %d f16c %d | avx512 f %d bw %d dq %d vl %d vnni %d bf16 %d | "
                                     "amx %d (permitted %d) | levels %s | best %s, active %s",
                           c->brand, c->avx2, c->fma, c->f16c, c->avx512f, c->avx512bw, c->avx512dq, c->avx512vl,
                           c->avx512vnni, c->avx512bf16, c->amx_tile && c->amx_int8, c->amx_permitted,
                           rp_cpu_level_names(), rp_cpu_level_name(c->best), rp_cpu_level_name(rp_cpu_level_active()));
#else
    const int n = snprintf(buf, cap, "cpu: %s | no SIMD kernels for this architecture | levels %s | best %s, active %s",
                           c->brand, rp_cpu_level_names(), rp_cpu_level_name(c->best),
                           rp_cpu_level_name(rp_cpu_level_active()));
#endif
    return n > 0 ? (size_t)n : 0;
}

/* ---- model ---- */

rp_model_desc rp_model_describe(const rp_model *m) {
    rp_model_desc d;
    memset(&d, 0, sizeof d);
    if (!m) return d;
    const rp_hparams *h = &m->hp;
    d.name = m->name;
    d.arch = rp_arch_name(h->arch);
    d.chat_format = m->chat == RP_CHAT_UNKNOWN ? "none" : rp_chat_format_name(m->chat);
    d.n_vocab = h->n_vocab;
    d.n_ctx_train = h->n_ctx_train;
    d.n_embd = h->n_embd;
    d.n_ff = h->n_ff;
    d.n_layer = h->n_layer;
    d.n_head = h->n_head;
    d.n_head_kv = h->n_head_kv;
    d.head_dim = h->head_dim;
    d.weight_bytes = m->weight_bytes;
    d.fingerprint = m->fingerprint;
    d.has_weights = m->layers != NULL;
    d.has_tokenizer = m->tok != NULL;
    d.n_rot = h->n_rot;
    d.rope_neox = h->rope_kind == RP_ROPE_NEOX;
    d.rope_llama3 = h->rope_llama3;
    d.rope_base = h->rope_base;
    d.rms_eps = h->rms_eps;
    d.tied_output = m->tied_output;
    d.tokenizer = !m->tok ? "" : rp_tokenizer_kind(m->tok) == RP_TOK_SPM ? "spm" : rp_tokenizer_kind(m->tok) == RP_TOK_WPM ? "wpm" : "bpe";
    d.n_tokens = m->tok ? rp_tokenizer_n_vocab(m->tok) : 0;
    for (int32_t l = 0; m->layers && l < m->hp.n_layer; l++)
        if (m->layers[l].window > 0) {
            d.n_swa = m->layers[l].window;
            d.n_swa_layers++;
        }
    return d;
}

long rp_model_meta(const rp_model *m, const char *key, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    if (!m || !m->gguf || !key) return -1;
    const int64_t i = rp_gguf_find_key(m->gguf, key);
    if (i < 0) return -1;
    char tmp[64];
    const char *text = tmp;
    size_t len = 0;
    rp_str str;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    if (rp_gguf_get_str(m->gguf, key, &str) == RP_OK) {
        text = str.ptr;
        len = str.len;
    } else if (rp_gguf_get_bool(m->gguf, key, &b) == RP_OK) {
        len = (size_t)snprintf(tmp, sizeof tmp, "%s", b ? "true" : "false");
    } else if (rp_gguf_get_u32(m->gguf, key, &u32) == RP_OK) {
        len = (size_t)snprintf(tmp, sizeof tmp, "%" PRIu32, u32);
    } else if (rp_gguf_get_i32(m->gguf, key, &i32) == RP_OK) {
        len = (size_t)snprintf(tmp, sizeof tmp, "%" PRId32, i32);
    } else if (rp_gguf_get_u64(m->gguf, key, &u64) == RP_OK) {
        len = (size_t)snprintf(tmp, sizeof tmp, "%" PRIu64, u64);
    } else if (rp_gguf_get_f32(m->gguf, key, &f) == RP_OK) {
        len = (size_t)snprintf(tmp, sizeof tmp, "%.9g", (double)f);
    } else {   /* an array (or a type none of the above reads) */
        len = (size_t)snprintf(tmp, sizeof tmp, "[%" PRIu64 " items]", rp_gguf_kv_arr_len(m->gguf, (uint64_t)i));
    }
    if (cap) {
        const size_t w = len < cap - 1 ? len : cap - 1;
        memcpy(buf, text, w);
        buf[w] = 0;
    }
    return (long)len;
}

/* ---- tokenizer ---- */

static rp_status need_tok(const rp_model *m) {
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "tokenizer: no model");
    if (!m->tok) return rp_errorf(RP_ERR_UNSUPPORTED, "tokenizer: model '%s' has no tokenizer", m->name);
    return RP_OK;
}

rp_status rp_tokenize(const rp_model *m, const char *text, size_t len, bool add_bos, bool parse_special, rp_token *out,
                      int32_t cap, int32_t *n_out) {
    *n_out = 0;
    RP_TRY(need_tok(m));
    if (!text && len) return rp_errorf(RP_ERR_INVALID_ARG, "tokenize: NULL text of %zu bytes", len);
    if (cap < 0 || (cap > 0 && !out)) return rp_errorf(RP_ERR_INVALID_ARG, "tokenize: no output buffer");
    const rp_tokenize_opts o = {.add_bos = add_bos, .parse_special = parse_special};
    size_t got = 0;
    rp_status st = rp_tokenizer_encode(m->tok, text ? text : "", len, o, out, (size_t)cap, &got);
    if (got > INT32_MAX) return rp_errorf(RP_ERR_RANGE, "tokenize: %zu tokens", got);
    *n_out = (int32_t)got;
    return st;
}

int32_t rp_token_to_piece(const rp_model *m, rp_token t, bool render_special, char *buf, int32_t cap) {
    if (need_tok(m) != RP_OK || cap < 0 || (cap > 0 && !buf)) return 0;
    /* the whole piece first, so the length returned is what it needs even when cap is smaller */
    char piece[4096];
    if (rp_tokenizer_max_piece_len(m->tok) > sizeof piece) return 0;   /* no vocabulary we load has one */
    const int n = rp_tokenizer_token_to_piece(m->tok, t, render_special, piece, sizeof piece);
    if (n <= 0) return 0;
    memcpy(buf, piece, (size_t)n < (size_t)cap ? (size_t)n : (size_t)cap);
    return n;
}

rp_status rp_detokenize(const rp_model *m, const rp_token *t, int32_t n, bool render_special, char *buf, size_t cap,
                        size_t *len) {
    *len = 0;
    RP_TRY(need_tok(m));
    if (n < 0 || (n > 0 && !t)) return rp_errorf(RP_ERR_INVALID_ARG, "detokenize: %d tokens", n);
    rp_detok d;
    rp_detok_init(&d, m->tok, render_special);
    char piece[4096];   /* >= rp_detok_bound() for every vocabulary we load */
    size_t w = 0;
    for (int32_t i = 0; i <= n; i++) {
        const int k = i < n ? rp_detok_push(&d, t[i], piece, sizeof piece) : rp_detok_flush(&d, piece, sizeof piece);
        if (k <= 0) continue;
        if (cap && w < cap - 1) memcpy(buf + w, piece, (size_t)k < cap - 1 - w ? (size_t)k : cap - 1 - w);
        w += (size_t)k;
    }
    if (cap) buf[w < cap - 1 ? w : cap - 1] = 0;
    *len = w;
    return cap > w ? RP_OK : rp_errorf(RP_ERR_FULL, "detokenize: %zu bytes needed, the buffer holds %zu", w + 1, cap);
}

rp_token rp_token_bos(const rp_model *m) { return m && m->tok ? rp_tokenizer_bos(m->tok) : -1; }
rp_token rp_token_eos(const rp_model *m) { return m && m->tok ? rp_tokenizer_eos(m->tok) : -1; }
rp_token rp_token_eot(const rp_model *m) { return m && m->tok ? rp_tokenizer_eot(m->tok) : -1; }
bool rp_token_is_eog(const rp_model *m, rp_token t) { return m && m->tok && rp_tokenizer_is_eog(m->tok, t); }

/* ---- chat templates ---- */

static char *dup_str(const char *s) {
    if (!s) return NULL;
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Parses an OpenAI tool_calls JSON array ([{"id", "type": "function",
 * "function": {"name", "arguments"}}]) into calls with malloc'd fields (the
 * arguments as JSON object text); NULL gives none. */
static rp_status parse_calls(const char *json, size_t msg, rp_tool_call **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (!json) return RP_OK;
    json_error_t jerr;
    json_t *arr = json_loads(json, 0, &jerr);
    if (!json_is_array(arr)) {
        json_decref(arr);
        return rp_errorf(RP_ERR_INVALID_ARG, "chat: messages[%zu].tool_calls is not a JSON array", msg);
    }
    const size_t k = json_array_size(arr);
    rp_tool_call *calls = calloc(k ? k : 1, sizeof *calls);
    rp_status st = calls ? RP_OK : rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
    size_t made = 0;
    for (size_t i = 0; i < k && st == RP_OK; i++) {
        const json_t *c = json_array_get(arr, i), *fn = json_object_get(c, "function");
        const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        const json_t *id = json_object_get(c, "id");
        if (!json_is_object(fn) || !json_is_string(name) || !json_string_length(name)) {
            st = rp_errorf(RP_ERR_INVALID_ARG, "chat: messages[%zu].tool_calls[%zu] has no function name", msg, i);
            break;
        }
        char *argtext = NULL;
        if (json_is_object(args)) {
            argtext = json_dumps(args, JSON_COMPACT);
        } else if (json_is_string(args) && json_string_length(args)) {
            json_t *probe = json_loads(json_string_value(args), 0, NULL);
            const bool ok = json_is_object(probe);
            json_decref(probe);
            if (!ok) {
                st = rp_errorf(RP_ERR_INVALID_ARG, "chat: messages[%zu].tool_calls[%zu].function.arguments is not a "
                                                   "JSON object", msg, i);
                break;
            }
            argtext = dup_str(json_string_value(args));
        } else {
            argtext = dup_str("{}");
        }
        calls[i].name = dup_str(json_string_value(name));
        calls[i].id = json_is_string(id) ? dup_str(json_string_value(id)) : NULL;
        calls[i].arguments = argtext;
        made = i + 1;
        if (!calls[i].name || !argtext || (json_is_string(id) && !calls[i].id)) st = rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
    }
    json_decref(arr);
    if (st != RP_OK) {
        rp_tool_calls_free(calls, made);
        return st;
    }
    *out = calls;
    *n = k;
    return RP_OK;
}

rp_chat_format rp_model_chat_format(const rp_model *m) { return m ? m->chat : RP_CHAT_UNKNOWN; }

static rp_status render_msgs(const rp_model *m, rp_chat_format f, const rp_chat_message *msgs, int32_t n,
                             const char *tools_json, bool add_generation_prompt, const rp_chat_vars *vars,
                             char *buf, size_t cap, size_t *len);

/* The model's own template (its tokenizer.chat_template through the Jinja interpreter, or the one
 * rp_chat_template_set gave it). */
rp_status rp_chat_render(const rp_model *m, const rp_chat_message *msgs, int32_t n, const char *tools_json,
                         bool add_generation_prompt, char *buf, size_t cap, size_t *len) {
    *len = 0;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "chat: no model");
    return render_msgs(m, RP_CHAT_UNKNOWN, msgs, n, tools_json, add_generation_prompt, NULL, buf, cap, len);
}

rp_status rp_chat_render_vars(const rp_model *m, const rp_chat_message *msgs, int32_t n, const char *tools_json,
                              bool add_generation_prompt, const rp_chat_vars *vars, char *buf, size_t cap,
                              size_t *len) {
    *len = 0;
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "chat: no model");
    if (vars && vars->vars_json) {
        json_error_t e;
        json_t *v = json_loads(vars->vars_json, 0, &e);
        const bool obj = json_is_object(v);
        json_decref(v);
        if (!obj) return rp_errorf(RP_ERR_INVALID_ARG, "chat: template variables are not a JSON object");
    }
    return render_msgs(m, RP_CHAT_UNKNOWN, msgs, n, tools_json, add_generation_prompt, vars, buf, cap, len);
}

/* A built-in family's renderer, without a model. */
rp_status rp_chat_render_format(rp_chat_format f, const rp_chat_message *msgs, int32_t n, const char *tools_json,
                                bool add_generation_prompt, char *buf, size_t cap, size_t *len) {
    return render_msgs(NULL, f, msgs, n, tools_json, add_generation_prompt, NULL, buf, cap, len);
}

static rp_status render_msgs(const rp_model *m, rp_chat_format f, const rp_chat_message *msgs, int32_t n,
                             const char *tools_json, bool add_generation_prompt, const rp_chat_vars *vars,
                             char *buf, size_t cap, size_t *len) {
    *len = 0;
    if (n < 0 || (n > 0 && !msgs)) return rp_errorf(RP_ERR_INVALID_ARG, "chat: %d messages", n);
    rp_chat_msg *cm = calloc((size_t)(n > 0 ? n : 1), sizeof *cm);
    rp_tool_call **calls = calloc((size_t)(n > 0 ? n : 1), sizeof *calls);
    rp_status st = cm && calls ? RP_OK : rp_errorf(RP_ERR_NOMEM, "chat: out of memory");
    for (int32_t i = 0; i < n && st == RP_OK; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
        cm[i].tool_call_id = msgs[i].tool_call_id;
        cm[i].name = msgs[i].name;
        st = parse_calls(msgs[i].tool_calls, (size_t)i, &calls[i], &cm[i].n_tool_calls);
        cm[i].tool_calls = calls[i];
    }
    char *text = NULL;
    if (st == RP_OK) {
        /* no leading BOS text: tokenizing the result adds BOS where the vocabulary wants one (rp_prompt_add_text) */
        const rp_chat_opts o = {.tools_json = tools_json, .add_generation_prompt = add_generation_prompt,
                                .enable_thinking = !vars || vars->enable_thinking < 0 ? -1 : vars->enable_thinking > 0,
                                .reasoning_effort = vars ? vars->reasoning_effort : NULL,
                                .vars_json = vars ? vars->vars_json : NULL};
        st = m ? rp_model_render_chat(m, cm, (size_t)n, &o, &text) : rp_chat_apply(f, cm, (size_t)n, &o, &text);
    }
    if (st == RP_OK) {
        const size_t l = strlen(text);
        *len = l;
        if (cap > l) memcpy(buf, text, l + 1);
        else {
            if (cap) {
                memcpy(buf, text, cap - 1);
                buf[cap - 1] = 0;
            }
            st = rp_errorf(RP_ERR_FULL, "chat: %zu bytes needed, the buffer holds %zu", l + 1, cap);
        }
    }
    free(text);
    for (int32_t i = 0; calls && i < n; i++) rp_tool_calls_free(calls[i], cm ? cm[i].n_tool_calls : 0);
    free(calls);
    free(cm);
    return st;
}
