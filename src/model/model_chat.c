/* model_chat.c — the model's chat template: its own tokenizer.chat_template (Jinja), a --chat-template
 * override (built-in or file), and rendering with the model's BOS / EOS texts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#define GGUF_ORIGIN "the model's tokenizer.chat_template"

/* The template a freshly loaded model uses: its own (an error is kept, not fatal: the model still tokenizes
 * and generates; chat start-up reports it), else "llama2" for a SentencePiece vocabulary without one. */
rp_status rp_model_chat_init(rp_model *m) {
    rp_str tmpl;
    free(m->tmpl_error);
    m->tmpl_error = NULL;
    rp_chat_tmpl_free(m->tmpl);
    m->tmpl = NULL;
    m->chat = RP_CHAT_UNKNOWN;
    snprintf(m->tmpl_origin, sizeof m->tmpl_origin, "none");
    if (!m->tok) return RP_OK;
    if (rp_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl) == RP_OK) {
        char *ts = strndup(tmpl.ptr, tmpl.len);
        if (!ts) return rp_errorf(RP_ERR_NOMEM, "model: out of memory reading the chat template");
        m->chat = rp_chat_detect(ts);
        rp_status st = rp_chat_tmpl_from_source(ts, tmpl.len, GGUF_ORIGIN, &m->tmpl);
        free(ts);
        if (st == RP_ERR_NOMEM) return st;
        if (st != RP_OK) {
            m->tmpl_error = strdup(rp_last_error());
            rp_error_clear();
            if (!m->tmpl_error) return rp_errorf(RP_ERR_NOMEM, "model: out of memory");
        }
        snprintf(m->tmpl_origin, sizeof m->tmpl_origin, "gguf");
        return RP_OK;
    }
    if (rp_tokenizer_kind(m->tok) == RP_TOK_SPM) {
        RP_TRY(rp_chat_tmpl_builtin("llama2", &m->tmpl));
        m->chat = RP_CHAT_LLAMA2;
        snprintf(m->tmpl_origin, sizeof m->tmpl_origin, "llama2");
    }
    return RP_OK;
}

void rp_model_chat_free(rp_model *m) {
    rp_chat_tmpl_free(m->tmpl);
    m->tmpl = NULL;
    free(m->tmpl_error);
    m->tmpl_error = NULL;
}

rp_status rp_model_render_chat(const rp_model *m, const rp_chat_msg *msgs, size_t n, const rp_chat_opts *opts, char **out) {
    *out = NULL;
    if (m->tmpl_error) return rp_errorf(RP_ERR_FORMAT, "%s", m->tmpl_error);
    if (!m->tmpl)
        return rp_errorf(RP_ERR_UNSUPPORTED, "chat: the model has no chat template (give one with --chat-template NAME|FILE; built-ins: %s)",
                         rp_chat_builtin_names);
    rp_chat_opts o = opts ? *opts : (rp_chat_opts){.enable_thinking = -1};
    const bool jinja = rp_chat_tmpl_is_jinja(m->tmpl);
    const char *bos = NULL;
    if (jinja && m->tok) {   /* the template's bos_token / eos_token are the vocabulary's texts */
        rp_token b = rp_tokenizer_bos(m->tok), e = rp_tokenizer_eos(m->tok);
        bos = b >= 0 ? rp_tokenizer_token_str(m->tok, b) : NULL;
        o.bos_text = bos;
        o.eos_text = e >= 0 ? rp_tokenizer_token_str(m->tok, e) : NULL;
    }
    rp_status st = rp_chat_tmpl_render(m->tmpl, msgs, n, &o, out);
    /* tokenizing adds BOS where the vocabulary asks for it: a template's own leading BOS would double it */
    if (st == RP_OK && jinja && bos && *bos && rp_tokenizer_add_bos(m->tok)) {
        size_t k = strlen(bos);
        if (!strncmp(*out, bos, k)) memmove(*out, *out + k, strlen(*out + k) + 1);
    }
    return st;
}

/* ---- public API ---- */

rp_status rp_chat_template_set(rp_model *m, const char *spec) {
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: no model");
    if (!m->tok) return rp_errorf(RP_ERR_UNSUPPORTED, "chat template: the model has no tokenizer");
    if (!spec) return rp_model_chat_init(m);
    rp_chat_tmpl *t = NULL;
    RP_TRY(rp_chat_tmpl_open(spec, &t));
    rp_model_chat_free(m);
    m->tmpl = t;
    rp_chat_format f = rp_chat_tmpl_family(t);
    m->chat = f;
    snprintf(m->tmpl_origin, sizeof m->tmpl_origin, "%s", rp_chat_builtin_known(spec) ? spec : "file");
    return RP_OK;
}

rp_status rp_chat_template_check(const rp_model *m) {
    if (!m) return rp_errorf(RP_ERR_INVALID_ARG, "chat template: no model");
    if (m->tmpl_error) return rp_errorf(RP_ERR_FORMAT, "%s", m->tmpl_error);
    if (!m->tmpl) return rp_errorf(RP_ERR_UNSUPPORTED, "chat template: the model has none (give one with --chat-template NAME|FILE)");
    return RP_OK;
}

const char *rp_chat_template_name(const rp_model *m) { return m ? m->tmpl_origin : "none"; }

bool rp_chat_template_shows_tools(const rp_model *m) { return m && m->tmpl && rp_chat_tmpl_supports_tools(m->tmpl); }
