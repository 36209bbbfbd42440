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
#include "server/lazy_grammar.h"
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

_Static_assert(RP_SRV_MAX_N == RP_BACKEND_MAX_N, "a request's choices are the backend's jobs of one prompt");

static void cancel_choices(rp_srv_call *c) {
    for (int32_t i = 0; i < c->n_choices; i++)
        if (c->choice[i]->job) rp_job_cancel(c->choice[i]->job);
}

void rp_srv_cancel_all(rp_server *s) {
    pthread_mutex_lock(&s->mu);
    for (rp_srv_call *c = s->calls; c; c = c->next) cancel_choices(c);
    pthread_mutex_unlock(&s->mu);
}

/* Choice i of an n > 1 request: it borrows c's request, text and prompt (c outlives it) and owns its generation. */
static rp_status child_new(rp_srv_call *c, int32_t i, const rp_model *m) {
    rp_srv_call *k = calloc(1, sizeof *k);
    if (!k) return rp_errorf(RP_ERR_NOMEM, "server: out of memory");
    k->srv = c->srv;
    k->ep = c->ep;
    k->key = c->key;
    k->req = c->req;
    k->text = c->text;
    k->prompt = c->prompt;
    k->t0 = c->t0;
    k->deadline = c->deadline;
    memcpy(k->id, c->id, sizeof k->id);
    k->created = c->created;
    k->index = i;
    k->child = true;
    rp_status st = rp_srv_gen_init(&k->gen, m, &c->req, c->ep == RP_EP_CHAT ? &c->text : NULL);
    if (st != RP_OK) {
        free(k);
        return st;
    }
    c->choice[i] = k;
    return RP_OK;
}

static void child_free(rp_srv_call *k) {
    if (!k) return;
    if (k->job) {
        if (!k->done) rp_job_cancel(k->job);
        rp_job_release(k->job);
    }
    rp_srv_reply_free(&k->reply);
    rp_srv_gen_free(&k->gen);
    free(k);
}

/* Every choice finished. */
static bool all_done(const rp_srv_call *c) {
    for (int32_t i = 0; i < c->n_choices; i++)
        if (!c->choice[i]->done) return false;
    return true;
}

/* Completion tokens of every choice. */
static int32_t counted(const rp_srv_call *c) {
    int32_t n = 0;
    for (int32_t i = 0; i < c->n_choices; i++) n += c->choice[i]->n_counted;
    return n;
}

rp_status rp_srv_call_create(rp_server *s, rp_srv_endpoint ep, int key, const char *body, size_t len,
                             rp_srv_alive_fn alive, void *alive_user, rp_srv_call **out, rp_api_error *err) {
    *out = NULL;
    if (rp_backend_is_encoder(s->b))   /* as llama-server answers completions on an embedding model */
        return rp_api_errorf(err, RP_ERR_UNSUPPORTED, 501, "not_supported", NULL,
                             "'%s' is an embedding model (%s): it does not generate text; this server answers "
                             "/v1/embeddings only", rp_model_describe(rp_backend_model(s->b)).name,
                             rp_model_describe(rp_backend_model(s->b)).arch);
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
    c->n_choices = 1;
    c->choice[0] = c;
    if (r->n > 1 && r->session != RP_SRV_SESSION_NONE) {
        st = rp_api_errorf(err, RP_ERR_UNSUPPORTED, 400, "unsupported_value", "n",
                           "n = %d with reprise_session: a session holds one conversation, so one choice", r->n);
        goto fail;
    }
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
    for (int32_t i = 1; i < r->n; i++, c->n_choices++)
        if ((st = child_new(c, i, m)) != RP_OK) {
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
    /* the request's own grammar, else a forced tool call's, else the server's --grammar-file */
    jp.grammar = r->grammar ? r->grammar : c->text.grammar ? c->text.grammar : s->cfg.grammar;
    if (!r->grammar && c->text.grammar && c->text.grammar_lazy) {   /* auto with strict tools: from a call's opening */
        jp.grammar_lazy = true;
        jp.grammar_root = RP_SRV_LAZY_ROOT;
        jp.grammar_format = c->text.parse_fmt;
        jp.grammar_think_open = c->text.think_started;
    }
    jp.ignore_eos = r->ignore_eos;
    jp.session = rp_stab_backend(c->sess);
    jp.cache_ns = s->ns_per_key && key >= 0 ? s->keys.v[key].ns : 0;
    jp.logprobs = r->logprobs;
    jp.top_logprobs = r->top_logprobs;
    rp_job *jobs[RP_SRV_MAX_N] = {0};
    st = rp_backend_submit_n(s->b, &jp, c->n_choices, jobs);   /* choice i samples from seed + i */
    if (st == RP_OK)
        for (int32_t i = 0; i < c->n_choices; i++) c->choice[i]->job = jobs[i];
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

/* Takes a choice's new tokens (waiting up to wait_s), feeds its text, and enforces its stop sequences (by
 * cancelling its job). */
static void pump_choice(rp_srv_call *c, double wait_s, bool *done_out) {
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
    *done_out = done;
    if (!done) return;
    c->done = true;
    c->finish = rp_job_result(c->job, &c->stats, c->job_err, sizeof c->job_err);
    if (!c->child && c->stats.n_gen > 0 && !c->ttft_recorded) {
        c->ttft_recorded = true;
        rp_metrics_ttft(&c->srv->metrics, c->stats.ttft_ms * 1e-3);
    }
}

/* Takes every choice's new tokens (waiting up to wait_s on the first one still running), and enforces the
 * timeout and disconnects (by cancelling every choice). */
static void pump(rp_srv_call *c, double wait_s) {
    bool running = false;
    for (int32_t i = 0; i < c->n_choices; i++) {
        rp_srv_call *ch = c->choice[i];
        if (ch->done) continue;
        bool done = false;
        pump_choice(ch, running ? 0 : wait_s, &done);
        running |= !done;
    }
    if (!running) return;
    if (c->alive && !c->alive(c->alive_user)) {
        if (!c->gone) atomic_fetch_add(&c->srv->metrics.disconnects, 1);
        c->gone = true;
        cancel_choices(c);
    } else if (rp_srv_now() > c->deadline && !c->timed_out) {
        c->timed_out = true;
        atomic_fetch_add(&c->srv->metrics.timeouts, 1);
        cancel_choices(c);
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
    while (!all_done(c)) pump(c, 0.1);
    if (c->gone) return rp_api_errorf(err, RP_ERR_CANCELLED, 499, NULL, NULL, "the client disconnected");
    for (int32_t i = 0; i < c->n_choices; i++)
        if (c->choice[i]->finish == RP_JOB_ERROR)
            return rp_api_errorf(err, RP_ERR_INTERNAL, 500, NULL, NULL, "generation failed: %s", c->choice[i]->job_err);
    if (c->timed_out && counted(c) == 0)
        return rp_api_errorf(err, RP_ERR_CANCELLED, 503, "timeout", NULL,
                             "the request timed out after %.0f s before generating", c->srv->cfg.timeout_s);
    for (int32_t i = 0; i < c->n_choices; i++)
        if (finish_reply(c->choice[i]) != RP_OK)
            return rp_api_errorf(err, RP_ERR_NOMEM, 500, NULL, NULL, "%s", rp_last_error());
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

/* Streamed pieces of choice ch, into c's (choice 0's) stream. */
static bool out_content(rp_srv_call *c, rp_srv_call *ch, const char *s, size_t n) {
    if (n == 0) return true;
    char *txt = rp_srv_utf8_clean(s, n);
    if (!txt) return false;
    char *j = c->ep == RP_EP_CHAT ? rp_srv_chat_chunk(ch, txt, NULL, false, NULL) : rp_srv_completion_chunk(ch, txt, NULL);
    free(txt);
    return out_event(c, j);
}

static bool out_reasoning(rp_srv_call *c, rp_srv_call *ch, const char *s, size_t n) {
    if (n == 0 || c->ep != RP_EP_CHAT) return true;
    char *txt = rp_srv_utf8_clean(s, n);
    if (!txt) return false;
    char *j = rp_srv_chat_reasoning_chunk(ch, txt);
    free(txt);
    return out_event(c, j);
}

/* The end of choice ch: the rest of its reasoning and content, its tool calls, its finish_reason; or, when it
 * failed, the error event (c->failed: the stream ends there). */
static bool out_choice_end(rp_srv_call *c, rp_srv_call *ch) {
    ch->ended = true;
    if (ch->finish == RP_JOB_ERROR || finish_reply(ch) != RP_OK) {
        rp_api_error e;
        rp_api_errorf(&e, RP_ERR_INTERNAL, 500, NULL, NULL, "generation failed: %s",
                      ch->finish == RP_JOB_ERROR ? ch->job_err : rp_last_error());
        c->failed = true;
        return out_event(c, rp_api_error_json(&e));
    }
    const rp_srv_reply *rp = &ch->reply;
    if (rp->reasoning) {   /* streamed: text[r_begin, r_emitted); the final reasoning is that, white space trimmed */
        const size_t rl = strlen(rp->reasoning), sent = ch->gen.r_open ? ch->gen.r_emitted - ch->gen.r_begin : 0;
        if (sent < rl && memcmp(rp->reasoning, ch->gen.text + ch->gen.r_begin, sent) == 0 &&
            !out_reasoning(c, ch, rp->reasoning + sent, rl - sent))
            return false;
    }
    const char *content = rp->content ? rp->content : "";
    size_t cl = strlen(content);
    /* what was streamed is text[c_base..emitted); the final content continues it when it starts with it */
    const size_t sent = ch->gen.emitted - ch->gen.c_base;
    if (sent <= cl && memcmp(content, ch->gen.text + ch->gen.c_base, sent) == 0) {
        if (!out_content(c, ch, content + sent, cl - sent)) return false;
    }
    if (rp->n_calls > 0 && c->ep == RP_EP_CHAT && !out_event(c, rp_srv_chat_chunk(ch, NULL, NULL, false, rp)))
        return false;
    char *fin = c->ep == RP_EP_CHAT ? rp_srv_chat_chunk(ch, NULL, rp->finish_reason, false, NULL)
                                    : rp_srv_completion_chunk(ch, "", rp->finish_reason);
    return out_event(c, fin);
}

/* The end of the stream: the choices not ended yet, usage, [DONE]. */
static bool out_final(rp_srv_call *c) {
    for (int32_t i = 0; i < c->n_choices && !c->failed; i++)
        if (!c->choice[i]->ended && !out_choice_end(c, c->choice[i])) return false;
    if (!c->failed && c->req.include_usage && !out_event(c, rp_srv_usage_chunk(c))) return false;
    return out_add(c, "data: [DONE]\n\n", 14);
}

/* One round of streaming choice ch: its new reasoning and content, or its end once it finished (held while the
 * request timed out without a token: the end of the stream decides). */
static bool stream_choice(rp_srv_call *c, rp_srv_call *ch) {
    size_t rfrom, rto;
    rp_srv_gen_reasoning_stream(&ch->gen, &rfrom, &rto);
    if (rto > rfrom) {
        if (!out_reasoning(c, ch, ch->gen.text + rfrom, rto - rfrom)) return false;
        ch->gen.r_emitted = rto;
    }
    size_t end = rp_srv_gen_stream_end(&ch->gen);
    if (ch->done) {
        /* flush the held bytes first: the final reply knows what is content */
        if (finish_reply(ch) != RP_OK && ch->finish != RP_JOB_ERROR) ch->finish = RP_JOB_ERROR;
        if (!c->timed_out || ch->n_counted > 0) return out_choice_end(c, ch);
    } else if (end > ch->gen.emitted) {
        if (!out_content(c, ch, ch->gen.text + ch->gen.emitted, end - ch->gen.emitted)) return false;
        ch->gen.emitted = end;
    }
    return true;
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
            for (int32_t i = 0; i < c->n_choices && c->ep == RP_EP_CHAT; i++)
                if (!out_event(c, rp_srv_chat_chunk(c->choice[i], NULL, NULL, true, NULL))) return -2;
            break;
        case 1:
            pump(c, 0.1);
            if (c->gone) return -2;
            for (int32_t i = 0; i < c->n_choices && !c->failed; i++)
                if (!c->choice[i]->ended && !stream_choice(c, c->choice[i])) return -2;
            if (c->failed) {   /* an error event ends the stream */
                c->phase = 3;
                if (!out_add(c, "data: [DONE]\n\n", 14)) return -2;
            } else if (all_done(c)) {
                c->phase = 2;
            }
            break;
        case 2:
            c->phase = 3;
            if (c->timed_out && counted(c) == 0) {
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
    const bool finished = all_done(c);
    for (int32_t i = 1; i < c->n_choices; i++) child_free(c->choice[i]);   /* before what they borrow */
    c->n_choices = 1;
    if (c->job) {
        listed = true;
        /* a stream let go of before its end: a write to the client failed (it went away) */
        if (!finished && !c->gone && c->req.stream) atomic_fetch_add(&s->metrics.disconnects, 1);
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
