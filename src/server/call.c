/* call.c — one generation request end to end: parse, render, tokenize, session, submit, wait or stream, release. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/error.h"
#include "server/backend_internal.h"
#include "server/server_internal.h"

static void random_hex(char *out, int n_bytes) {
    uint8_t raw[32];
    if (n_bytes > 32) n_bytes = 32;
    if (getrandom(raw, (size_t)n_bytes, 0) != n_bytes) {
        uint64_t x = (uint64_t)(rp_srv_now() * 1e9) ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < n_bytes; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            raw[i] = (uint8_t)(x >> 56);
        }
    }
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < n_bytes; i++) {
        out[2 * i] = hx[raw[i] >> 4];
        out[2 * i + 1] = hx[raw[i] & 15];
    }
    out[2 * n_bytes] = '\0';
}

static void list_add(rp_server *s, rp_srv_call *c) {
    pthread_mutex_lock(&s->mu);
    c->next = s->calls;
    if (s->calls) s->calls->prev = c;
    s->calls = c;
    s->n_calls++;
    pthread_mutex_unlock(&s->mu);
}

static void list_del(rp_server *s, rp_srv_call *c) {
    pthread_mutex_lock(&s->mu);
    if (c->prev) c->prev->next = c->next;
    else if (s->calls == c) s->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    s->n_calls--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void rp_srv_cancel_all(rp_server *s) {
    pthread_mutex_lock(&s->mu);
    for (rp_srv_call *c = s->calls; c; c = c->next)
        if (c->job) rp_job_cancel(c->job);
    pthread_mutex_unlock(&s->mu);
}

rp_status rp_srv_call_create(rp_server *s, rp_srv_endpoint ep, int key, const char *body, size_t len,
                             rp_srv_alive_fn alive, void *alive_user, rp_srv_call **out, rp_api_error *err) {
    *out = NULL;
    rp_srv_call *c = calloc(1, sizeof *c);
    if (!c) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
    c->srv = s;
    c->ep = ep;
    c->key = key;
    c->t0 = rp_srv_now();
    c->deadline = c->t0 + s->cfg.timeout_s;
    c->alive = alive;
    c->alive_user = alive_user;
    c->created = (int64_t)time(NULL);
    strcpy(c->id, ep == RP_EP_CHAT ? "chatcmpl-" : "cmpl-");
    random_hex(c->id + strlen(c->id), 12);
    const rp_model *m = rp_backend_model(s->b);
    const int32_t n_ctx = rp_backend_n_ctx(s->b);
    const int32_t n_vocab = rp_model_describe(m).n_vocab;
    rp_status st = rp_srv_parse_request(ep, body, len, &s->lim, &c->req, err);
    if (st != RP_OK) goto fail;
    rp_srv_request *r = &c->req;
    st = ep == RP_EP_CHAT ? rp_srv_render_chat(m, r, &c->text, err) : rp_srv_render_completion(r, &c->text, err);
    if (st != RP_OK) goto fail;
    /* the prompt may take all but one cell (none when max_tokens is 0); a max_tokens beyond what is left is
     * clamped below, and the reply then ends with finish_reason "length" */
    const int32_t budget = n_ctx - (r->max_tokens == 0 ? 0 : 1);
    if (r->prompt_ids) {
        if ((int64_t)r->n_prompt_ids > budget) {
            st = rp_api_errorf(err, RP_ERR_RANGE, 400, "context_length_exceeded", "prompt",
                               "the prompt is %zu tokens, more than the %d this request can use", r->n_prompt_ids, budget);
            goto fail;
        }
        c->prompt.toks = malloc(sizeof *c->prompt.toks * r->n_prompt_ids);
        if (!c->prompt.toks) {
            st = rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < r->n_prompt_ids; i++) {
            if (r->prompt_ids[i] >= n_vocab) {
                st = rp_api_errorf(err, RP_ERR_RANGE, 400, NULL, "prompt", "token id %d is not in the vocabulary (%d)",
                                   r->prompt_ids[i], n_vocab);
                goto fail;
            }
            c->prompt.toks[i] = r->prompt_ids[i];
        }
        c->prompt.n = (int32_t)r->n_prompt_ids;
    } else if ((st = rp_srv_tokenize(m, &c->text, budget, &c->prompt, err)) != RP_OK) {
        goto fail;
    }
    int32_t max_tokens = r->max_tokens;
    const int32_t room = n_ctx - c->prompt.n;
    if (max_tokens < 0) max_tokens = ep == RP_EP_COMPLETIONS ? 16 : s->cfg.default_max_tokens;
    if (max_tokens > room) max_tokens = room;
    for (int32_t i = 0; i < r->n_bias; i++)
        if (r->bias[i].token >= n_vocab) {
            st = rp_api_errorf(err, RP_ERR_RANGE, 400, NULL, "logit_bias", "token id %d is not in the vocabulary (%d)",
                               r->bias[i].token, n_vocab);
            goto fail;
        }
    if ((st = rp_srv_gen_init(&c->gen, m, r, ep == RP_EP_CHAT ? &c->text : NULL)) != RP_OK) {
        rp_api_errorf(err, st, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    if (r->session == RP_SRV_SESSION_NEW) {
        st = rp_stab_new(s->sessions, key, c->sess_id, &c->sess);
        if (st != RP_OK) {
            rp_api_errorf(err, st, st == RP_ERR_FULL ? 429 : 500, st == RP_ERR_FULL ? "sessions_full" : NULL,
                          "reprise_session", "cannot create a session: %s", rp_last_error());
            goto fail;
        }
    } else if (r->session == RP_SRV_SESSION_ID) {
        st = rp_stab_acquire(s->sessions, key, r->session_id, 10.0, &c->sess);
        if (st != RP_OK) {
            rp_api_errorf(err, st, st == RP_ERR_NOT_FOUND ? 404 : 409,
                          st == RP_ERR_NOT_FOUND ? "session_not_found" : "session_busy", "reprise_session", "%s",
                          st == RP_ERR_NOT_FOUND ? "no such session (unknown or expired)"
                                                 : "the session is busy with another request");
            goto fail;
        }
        memcpy(c->sess_id, r->session_id, sizeof c->sess_id);
    }
    rp_job_params jp;
    memset(&jp, 0, sizeof jp);
    jp.toks = c->prompt.toks;
    jp.n = c->prompt.n;
    jp.bounds = c->prompt.bounds;
    jp.n_bounds = c->prompt.n_bounds;
    jp.sampler = rp_sampler_default_params();
    jp.sampler.temp = r->temperature;
    jp.sampler.top_p = r->top_p;
    jp.sampler.top_k = r->top_k;   /* 0 unless asked: OpenAI semantics are temperature and top_p only */
    jp.sampler.min_p = r->min_p;
    jp.sampler.repeat_penalty = r->repeat_penalty;
    jp.sampler.repeat_last_n = r->repeat_last_n;
    jp.sampler.presence_penalty = r->presence_penalty;
    jp.sampler.frequency_penalty = r->frequency_penalty;
    jp.sampler.bias = r->bias;
    jp.sampler.n_bias = r->n_bias;
    if (r->has_seed) jp.sampler.seed = r->seed;
    else if (getrandom(&jp.sampler.seed, sizeof jp.sampler.seed, 0) != (ssize_t)sizeof jp.sampler.seed)
        jp.sampler.seed = (uint64_t)(c->t0 * 1e9);
    jp.max_tokens = max_tokens;
    jp.reuse_mode = r->cache_mode;
    jp.recompute_ratio = r->cache_ratio;
    jp.persist = r->cache_persist;
    jp.constrain_json = c->text.constrain_json;
    jp.grammar = r->grammar ? r->grammar : s->cfg.grammar;
    jp.session = rp_stab_backend(c->sess);
    jp.cache_ns = s->ns_per_key && key >= 0 ? s->keys.v[key].ns : 0;
    jp.logprobs = r->logprobs;
    jp.top_logprobs = r->top_logprobs;
    st = rp_backend_submit(s->b, &jp, &c->job);
    if (st != RP_OK) {
        if (st == RP_ERR_FULL) {
            atomic_fetch_add(&s->metrics.rejected, 1);
            rp_api_errorf(err, st, 429, "queue_full", NULL, "the server is busy (queue full); retry later");
        } else if (st == RP_ERR_UNSUPPORTED || st == RP_ERR_FORMAT) {
            rp_api_errorf(err, st, 400, "unsupported_value", "response_format", "%s", rp_last_error());
        } else if (st == RP_ERR_RANGE) {
            rp_api_errorf(err, st, 400, "context_length_exceeded", NULL, "%s", rp_last_error());
        } else {
            rp_api_errorf(err, st, 500, NULL, NULL, "%s", rp_last_error());
        }
        goto fail;
    }
    list_add(s, c);
    *out = c;
    return RP_OK;
fail:
    if (c->sess && c->req.session == RP_SRV_SESSION_NEW) {
        /* the client never learns the id of a session whose first request failed: drop it */
        rp_stab_release(s->sessions, c->sess, false);
        rp_stab_delete(s->sessions, key, c->sess_id);
        c->sess = NULL;
    }
    rp_srv_call_free(c);
    return st != RP_OK ? st : RP_ERR_INTERNAL;
}

/* Takes new tokens (waiting up to wait_s), feeds the text, and enforces stop
 * sequences, the timeout and disconnects (all by cancelling the job). */
static void pump(rp_srv_call *c, double wait_s) {
    if (c->done) return;
    bool done = false;
    int32_t n = rp_job_wait(c->job, c->n_consumed, wait_s, &done);
    rp_token buf[256];
    while (c->n_consumed < n) {
        int32_t k = rp_job_tokens(c->job, c->n_consumed, buf, 256);
        if (k <= 0) break;
        for (int32_t i = 0; i < k && !c->gen.stopped; i++) {
            if (rp_srv_gen_feed(&c->gen, &buf[i], 1) != RP_OK) break;
            c->n_counted++;
        }
        c->n_consumed += k;
    }
    if (c->gen.stopped) rp_job_cancel(c->job);   /* a stop sequence: nothing more is needed */
    if (!done) {
        if (c->alive && !c->alive(c->alive_user)) {
            if (!c->gone) atomic_fetch_add(&c->srv->metrics.disconnects, 1);
            c->gone = true;
            rp_job_cancel(c->job);
        } else if (rp_srv_now() > c->deadline && !c->timed_out) {
            c->timed_out = true;
            atomic_fetch_add(&c->srv->metrics.timeouts, 1);
            rp_job_cancel(c->job);
        }
        return;
    }
    c->done = true;
    c->finish = rp_job_result(c->job, &c->stats, c->job_err, sizeof c->job_err);
    if (c->stats.n_gen > 0 && !c->ttft_recorded) {
        c->ttft_recorded = true;
        rp_metrics_ttft(&c->srv->metrics, c->stats.ttft_ms * 1e-3);
    }
}

static rp_status finish_reply(rp_srv_call *c) {
    if (c->have_reply) return RP_OK;
    RP_TRY(rp_srv_gen_flush(&c->gen));
    RP_TRY(rp_srv_gen_reply(&c->gen, c->finish, &c->reply));
    c->have_reply = true;
    return RP_OK;
}

rp_status rp_srv_call_run(rp_srv_call *c, char **json, int *http, rp_api_error *err) {
    *json = NULL;
    while (!c->done) pump(c, 0.1);
    if (c->gone) return rp_api_errorf(err, RP_ERR_CANCELLED, 499, NULL, NULL, "the client disconnected");
    if (c->finish == RP_JOB_ERROR)
        return rp_api_errorf(err, RP_ERR_INTERNAL, 500, NULL, NULL, "generation failed: %s", c->job_err);
    if (c->timed_out && c->n_counted == 0)
        return rp_api_errorf(err, RP_ERR_CANCELLED, 503, "timeout", NULL,
                             "the request timed out after %.0f s before generating", c->srv->cfg.timeout_s);
    if (finish_reply(c) != RP_OK) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "%s", rp_last_error());
    *json = c->ep == RP_EP_CHAT ? rp_srv_chat_response(c) : rp_srv_completion_response(c);
    if (!*json) return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "out of memory building the response");
    *http = 200;
    return RP_OK;
}

/* ------------------------------------------------------------ streaming */

static bool out_add(rp_srv_call *c, const char *s, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t nc = c->out_cap ? c->out_cap : 1024;
        while (nc < c->out_len + n) nc *= 2;
        char *np = realloc(c->out, nc);
        if (!np) return false;
        c->out = np;
        c->out_cap = nc;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
    return true;
}

/* Appends "data: <json>\n\n" and frees json. */
static bool out_event(rp_srv_call *c, char *json) {
    if (!json) return false;
    bool ok = out_add(c, "data: ", 6) && out_add(c, json, strlen(json)) && out_add(c, "\n\n", 2);
    free(json);
    return ok;
}

static bool out_content(rp_srv_call *c, const char *s, size_t n) {
    if (n == 0) return true;
    char *txt = rp_srv_utf8_clean(s, n);
    if (!txt) return false;
    char *j = c->ep == RP_EP_CHAT ? rp_srv_chat_chunk(c, txt, NULL, false, NULL) : rp_srv_completion_chunk(c, txt, NULL);
    free(txt);
    return out_event(c, j);
}

static bool out_reasoning(rp_srv_call *c, const char *s, size_t n) {
    if (n == 0 || c->ep != RP_EP_CHAT) return true;
    char *txt = rp_srv_utf8_clean(s, n);
    if (!txt) return false;
    char *j = rp_srv_chat_reasoning_chunk(c, txt);
    free(txt);
    return out_event(c, j);
}

/* The end of the stream: rest of the reasoning and content, tool calls, finish, usage, [DONE]. */
static bool out_final(rp_srv_call *c) {
    if (c->finish == RP_JOB_ERROR || finish_reply(c) != RP_OK) {
        rp_api_error e;
        rp_api_errorf(&e, RP_ERR_INTERNAL, 500, NULL, NULL, "generation failed: %s",
                      c->finish == RP_JOB_ERROR ? c->job_err : rp_last_error());
        if (!out_event(c, rp_api_error_json(&e))) return false;
        return out_add(c, "data: [DONE]\n\n", 14);
    }
    const rp_srv_reply *rp = &c->reply;
    if (rp->reasoning) {   /* streamed: text[r_begin, r_emitted); the final reasoning is that, white space trimmed */
        const size_t rl = strlen(rp->reasoning), sent = c->gen.r_open ? c->gen.r_emitted - c->gen.r_begin : 0;
        if (sent < rl && memcmp(rp->reasoning, c->gen.text + c->gen.r_begin, sent) == 0 &&
            !out_reasoning(c, rp->reasoning + sent, rl - sent))
            return false;
    }
    const char *content = rp->content ? rp->content : "";
    size_t cl = strlen(content);
    /* what was streamed is text[c_base..emitted); the final content continues it when it starts with it */
    const size_t sent = c->gen.emitted - c->gen.c_base;
    if (sent <= cl && memcmp(content, c->gen.text + c->gen.c_base, sent) == 0) {
        if (!out_content(c, content + sent, cl - sent)) return false;
    }
    if (rp->n_calls > 0 && c->ep == RP_EP_CHAT && !out_event(c, rp_srv_chat_chunk(c, NULL, NULL, false, rp)))
        return false;
    char *fin = c->ep == RP_EP_CHAT ? rp_srv_chat_chunk(c, NULL, rp->finish_reason, false, NULL)
                                    : rp_srv_completion_chunk(c, "", rp->finish_reason);
    if (!out_event(c, fin)) return false;
    if (c->req.include_usage && !out_event(c, rp_srv_usage_chunk(c))) return false;
    return out_add(c, "data: [DONE]\n\n", 14);
}

long rp_srv_call_read(rp_srv_call *c, char *buf, size_t max) {
    for (;;) {
        if (c->out_off < c->out_len) {
            size_t n = c->out_len - c->out_off < max ? c->out_len - c->out_off : max;
            memcpy(buf, c->out + c->out_off, n);
            c->out_off += n;
            return (long)n;
        }
        c->out_len = c->out_off = 0;
        if (c->gone) return -2;
        switch (c->phase) {
        case 0:
            c->phase = 1;
            if (c->ep == RP_EP_CHAT && !out_event(c, rp_srv_chat_chunk(c, NULL, NULL, true, NULL))) return -2;
            break;
        case 1: {
            pump(c, 0.1);
            if (c->gone) return -2;
            size_t rfrom, rto;
            rp_srv_gen_reasoning_stream(&c->gen, &rfrom, &rto);
            if (rto > rfrom) {
                if (!out_reasoning(c, c->gen.text + rfrom, rto - rfrom)) return -2;
                c->gen.r_emitted = rto;
            }
            size_t end = rp_srv_gen_stream_end(&c->gen);
            if (c->done) {
                /* flush the held bytes first: the final reply knows what is content */
                if (finish_reply(c) != RP_OK && c->finish != RP_JOB_ERROR) c->finish = RP_JOB_ERROR;
                c->phase = 2;
            } else if (end > c->gen.emitted) {
                if (!out_content(c, c->gen.text + c->gen.emitted, end - c->gen.emitted)) return -2;
                c->gen.emitted = end;
            }
            break;
        }
        case 2:
            c->phase = 3;
            if (c->timed_out && c->n_counted == 0 && c->finish != RP_JOB_ERROR) {
                rp_api_error e;
                rp_api_errorf(&e, RP_ERR_CANCELLED, 503, "timeout", NULL, "the request timed out before generating");
                if (!out_event(c, rp_api_error_json(&e)) || !out_add(c, "data: [DONE]\n\n", 14)) return -2;
                break;
            }
            if (!out_final(c)) return -2;
            break;
        default:
            return -1;
        }
    }
}

void rp_srv_call_free(rp_srv_call *c) {
    if (!c) return;
    rp_server *s = c->srv;
    bool listed = false;
    if (c->job) {
        listed = true;
        /* a stream let go of before its end: a write to the client failed (it went away) */
        if (!c->done && !c->gone && c->req.stream) atomic_fetch_add(&s->metrics.disconnects, 1);
        if (!c->done) rp_job_cancel(c->job);
        /* a session is handed to its next request only once the backend let go of it (a cancelled job
         * ends at its next token or step; a prefill in progress runs to its end). A one-off job needs
         * no wait: it is reference-counted. */
        if (c->sess)
            while (!rp_job_wait_done(c->job, 1.0)) {}
        rp_job_release(c->job);
    }
    if (c->sess) rp_stab_release(s->sessions, c->sess, c->have_reply && c->reply.n_calls > 0);
    if (listed) list_del(s, c);
    rp_srv_reply_free(&c->reply);
    rp_srv_gen_free(&c->gen);
    rp_srv_prompt_free(&c->prompt);
    rp_srv_text_free(&c->text);
    rp_srv_request_free(&c->req);
    free(c->out);
    free(c);
}
