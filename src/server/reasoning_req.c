/* reasoning_req.c — a chat request's reasoning fields, as llama-server takes them: enable_thinking (top level, or
 * chat_template_kwargs.enable_thinking, which wins), chat_template_kwargs (all of it reaches the template),
 * reasoning_effort, and reasoning_format ("deepseek"/"auto": thinking to reasoning_content; "none": left in). */
#include <jansson.h>
#include <string.h>

#include "server/request.h"

#define BAD(...) rp_api_errorf(err, RP_ERR_INVALID_ARG, 400, NULL, __VA_ARGS__)

rp_status rp_srv_parse_reasoning(rp_srv_request *r, const json_t *root, rp_api_error *err) {
    r->enable_thinking = -1;
    const json_t *et = json_object_get(root, "enable_thinking");
    if (et && !json_is_null(et)) {
        if (!json_is_boolean(et)) return BAD("enable_thinking", "'enable_thinking' must be a boolean");
        r->enable_thinking = json_is_true(et);
    }
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        const json_t *ket = json_object_get(kw, "enable_thinking");
        if (ket && !json_is_null(ket)) {
            if (!json_is_boolean(ket))
                return BAD("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
            r->enable_thinking = json_is_true(ket);
        }
        if (json_object_size(kw) > 0) {
            r->template_kwargs = json_dumps(kw, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (!r->template_kwargs) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
        }
    }
    const json_t *eff = json_object_get(root, "reasoning_effort");
    if (eff && !json_is_null(eff)) {
        const char *e = json_string_value(eff);
        if (!e || (strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high") && strcmp(e, "minimal")))
            return BAD("reasoning_effort", "'reasoning_effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
        r->reasoning_effort = e;
    }
    const json_t *fmt = json_object_get(root, "reasoning_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "none") && strcmp(f, "deepseek") && strcmp(f, "auto")))
            return BAD("reasoning_format", "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\"");
        r->reasoning_raw = !strcmp(f, "none");
    }
    return RP_OK;
}
