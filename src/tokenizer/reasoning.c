/* reasoning.c — the <think>...</think> family (Qwen3, DeepSeek-R1 distills): where the model's thinking ends and
 * its answer begins, for a whole reply and for a reply still growing (streaming holds a partial tag back). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"

#include "core/error.h"

static const char k_open[] = "<think>", k_close[] = "</think>";

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Length of the longest proper prefix of pat that ends text[from..len). */
static size_t partial_tail(const char *text, size_t from, size_t len, const char *pat) {
    size_t pl = strlen(pat), avail = len - from;
    for (size_t k = pl - 1 < avail ? pl - 1 : avail; k > 0; k--)
        if (memcmp(text + len - k, pat, k) == 0) return k;
    return 0;
}

void rp_chat_reasoning_span(const char *text, size_t len, bool started, bool final, rp_reasoning_span *s) {
    memset(s, 0, sizeof *s);
    size_t i = 0;
    while (i < len && is_ws(text[i])) i++;
    size_t rb;
    if (started) rb = 0;
    else if (len - i >= sizeof k_open - 1 && !memcmp(text + i, k_open, sizeof k_open - 1)) rb = i + sizeof k_open - 1;
    else if (!final && len - i < sizeof k_open - 1 && memcmp(text + i, k_open, len - i) == 0) {   /* "", "<", "<th"...: undecided, hold all */
        s->reasoning_begin = s->reasoning_end = s->content_begin = s->content_end = 0;
        return;
    } else {   /* no thinking: all content */
        s->content_end = len;
        return;
    }
    while (rb < len && is_ws(text[rb])) rb++;
    s->has_reasoning = true;
    s->reasoning_begin = rb;
    const char *close = NULL;
    for (size_t p = rb; p + sizeof k_close - 1 <= len; p++)
        if (!memcmp(text + p, k_close, sizeof k_close - 1)) {
            close = text + p;
            break;
        }
    if (!close) {   /* still thinking (or cut off while thinking: all of it is reasoning) */
        s->in_reasoning = true;
        s->reasoning_end = final ? len : len - partial_tail(text, rb, len, k_close);
        if (s->reasoning_end < rb) s->reasoning_end = rb;
        s->content_begin = s->content_end = len;
        return;
    }
    s->reasoning_end = (size_t)(close - text);
    size_t cb = s->reasoning_end + sizeof k_close - 1;
    while (cb < len && is_ws(text[cb])) cb++;
    s->content_begin = cb;
    s->content_end = len;
}

static char *dup_n(const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) return NULL;
    memcpy(o, s, n);
    o[n] = '\0';
    return o;
}

rp_status rp_chat_split_reasoning(const char *text, bool started, char **reasoning, char **content) {
    *reasoning = NULL;
    *content = NULL;
    if (!text) return rp_errorf(RP_ERR_INVALID_ARG, "reasoning: no text");
    const size_t len = strlen(text);
    rp_reasoning_span s;
    rp_chat_reasoning_span(text, len, started, true, &s);
    size_t re = s.reasoning_end;
    while (re > s.reasoning_begin && is_ws(text[re - 1])) re--;
    if (s.has_reasoning && !(*reasoning = dup_n(text + s.reasoning_begin, re - s.reasoning_begin)))
        return rp_errorf(RP_ERR_NOMEM, "reasoning: out of memory");
    if (!(*content = dup_n(text + s.content_begin, s.content_end - s.content_begin))) {
        free(*reasoning);
        *reasoning = NULL;
        return rp_errorf(RP_ERR_NOMEM, "reasoning: out of memory");
    }
    return RP_OK;
}

bool rp_chat_prompt_opens_thinking(const char *prompt, size_t len) {
    while (len > 0 && is_ws(prompt[len - 1])) len--;
    return len >= sizeof k_open - 1 && !memcmp(prompt + len - (sizeof k_open - 1), k_open, sizeof k_open - 1);
}
